//! IGMP messages (RFC 3376 section 4, RFC 2236 section 2, RFC 1112 appendix
//! I): queries decoded, reports and leaves encoded into whole Ethernet frames
//! sent as section 4 of RFC 3376 says: IP TTL 1, precedence Internetwork
//! Control, a Router Alert option (RFC 2113).

use super::{Compat, Out, Query};
use crate::checksum;
use crate::ethernet::{self, ethertype};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Message types.
pub mod msg {
    /// Membership Query (every version).
    pub const QUERY: u8 = 0x11;
    /// IGMPv1 Membership Report.
    pub const V1_REPORT: u8 = 0x12;
    /// IGMPv2 Membership Report.
    pub const V2_REPORT: u8 = 0x16;
    /// IGMPv2 Leave Group.
    pub const LEAVE: u8 = 0x17;
    /// IGMPv3 Membership Report.
    pub const V3_REPORT: u8 = 0x22;
}

/// All Systems (224.0.0.1): general queries.
pub const ALL_SYSTEMS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 1);
/// All Routers (224.0.0.2): IGMPv2 leaves.
pub const ALL_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 2);
/// All IGMPv3-capable routers (224.0.0.22): IGMPv3 reports.
pub const ALL_V3_ROUTERS: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 22);

/// The IPv4 header of every message sent: 20 bytes and the Router Alert option.
pub const IP_HEADER_LEN: usize = 24;

/// Why a received IGMP message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than its type needs, or a query of 9 to 11 bytes (RFC 3376
    /// section 7.1), or more sources than the message holds.
    Length,
    /// The checksum does not verify.
    Checksum,
    /// A group-specific query whose group is not a multicast address.
    Group,
}

/// A decoded message the host acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A query, general or for a group (and sources).
    Query(Query),
    /// Another host's IGMPv1 or IGMPv2 report for a group.
    Report(IpAddr),
    /// Anything else valid (a v3 report, a leave, an unknown type): ignored.
    Other,
}

/// The time a Max Resp Code or QQIC stands for, in its units (RFC 3376
/// sections 4.1.1 and 4.1.7: below 128 the value itself, else a floating
/// point value with a 3-bit exponent and a 4-bit mantissa).
pub fn decode_code(code: u8) -> u32 {
    if code < 128 {
        u32::from(code)
    } else {
        let exp = u32::from((code >> 4) & 0x7);
        let mant = u32::from(code & 0xf);
        (mant | 0x10) << (exp + 3)
    }
}

/// Decodes the IGMP message `data` (the IP payload).
pub fn decode(data: &[u8]) -> Result<Msg, Bad> {
    if data.len() < 8 {
        return Err(Bad::Length);
    }
    if !checksum::verify(data, 0) {
        return Err(Bad::Checksum);
    }
    let group = Ipv4Addr::new(data[4], data[5], data[6], data[7]);
    match data[0] {
        msg::QUERY => {
            let code = data[1];
            let (version, max_resp, rest) = match data.len() {
                8 if code == 0 => (Compat::V1, super::V1_MAX_RESP, None),
                8 => (
                    Compat::V2,
                    Duration::from_millis(u64::from(code) * 100),
                    None,
                ),
                9..=11 => return Err(Bad::Length),
                _ => {
                    let tenths = decode_code(code);
                    (
                        Compat::V3,
                        Duration::from_millis(u64::from(tenths) * 100),
                        data.get(8..),
                    )
                }
            };
            let group = if group.is_unspecified() {
                None
            } else if group.is_multicast() {
                Some(IpAddr::V4(group))
            } else {
                return Err(Bad::Group);
            };
            let mut q = Query {
                version,
                group,
                sources: Vec::new(),
                max_resp,
                qrv: 0,
                qqi: Duration::ZERO,
            };
            if let Some(r) = rest {
                let (Some(&flags), Some(&qqic), Some(n)) = (r.first(), r.get(1), r.get(2..4))
                else {
                    return Err(Bad::Length);
                };
                q.qrv = flags & 0x7;
                q.qqi = Duration::from_secs(u64::from(decode_code(qqic)));
                let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
                let src = r.get(4..4 + 4 * n).ok_or(Bad::Length)?;
                q.sources = src
                    .chunks_exact(4)
                    .map(|s| IpAddr::V4(Ipv4Addr::new(s[0], s[1], s[2], s[3])))
                    .collect();
                if group.is_none() && n != 0 {
                    // A general query lists no sources (RFC 3376 section 4.1.9).
                    return Err(Bad::Length);
                }
            }
            Ok(Msg::Query(q))
        }
        msg::V1_REPORT | msg::V2_REPORT if group.is_multicast() => {
            Ok(Msg::Report(IpAddr::V4(group)))
        }
        _ => Ok(Msg::Other),
    }
}

/// The Ethernet address of IPv4 group `g` (RFC 1112 section 6.4).
pub fn group_mac(g: Ipv4Addr) -> [u8; 6] {
    let o = g.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

fn v4(a: &IpAddr) -> Option<Ipv4Addr> {
    match a {
        IpAddr::V4(a) => Some(*a),
        IpAddr::V6(_) => None,
    }
}

/// The IGMP messages (destination, message) that carry `out`, each fitting
/// an IP datagram of `mtu` bytes. A version 3 report whose records do not fit
/// one datagram is split between records.
pub fn messages(out: &Out, mtu: usize) -> Vec<(Ipv4Addr, Vec<u8>)> {
    let simple = |t: u8, dst: Ipv4Addr, g: Ipv4Addr| {
        let mut m = vec![t, 0, 0, 0];
        m.extend_from_slice(&g.octets());
        (dst, m)
    };
    let mut v = Vec::new();
    match out {
        Out::V1Report(g) => v.extend(v4(g).map(|g| simple(msg::V1_REPORT, g, g))),
        Out::V2Report(g) => v.extend(v4(g).map(|g| simple(msg::V2_REPORT, g, g))),
        Out::Leave(g) => v.extend(v4(g).map(|g| simple(msg::LEAVE, ALL_ROUTERS, g))),
        Out::Report(recs) => {
            let room = mtu.saturating_sub(IP_HEADER_LEN).max(8 + 8 + 4);
            let mut m: Vec<u8> = Vec::new();
            let mut n = 0u16;
            let flush = |m: &mut Vec<u8>, n: &mut u16, v: &mut Vec<(Ipv4Addr, Vec<u8>)>| {
                if *n > 0 {
                    if let Some(c) = m.get_mut(6..8) {
                        c.copy_from_slice(&n.to_be_bytes());
                    }
                    v.push((ALL_V3_ROUTERS, std::mem::take(m)));
                }
                *n = 0;
            };
            for (t, g, srcs) in recs {
                let Some(g) = v4(g) else { continue };
                let srcs: Vec<Ipv4Addr> = srcs.iter().filter_map(v4).collect();
                let len = 8 + 4 * srcs.len();
                if n > 0 && m.len() + len > room {
                    flush(&mut m, &mut n, &mut v);
                }
                if n == 0 {
                    m = vec![msg::V3_REPORT, 0, 0, 0, 0, 0, 0, 0];
                }
                m.extend_from_slice(&[*t, 0]);
                m.extend_from_slice(&(srcs.len() as u16).to_be_bytes());
                m.extend_from_slice(&g.octets());
                for s in &srcs {
                    m.extend_from_slice(&s.octets());
                }
                n += 1;
            }
            flush(&mut m, &mut n, &mut v);
        }
    }
    for (_, m) in v.iter_mut() {
        let c = checksum::checksum(m);
        if let Some(f) = m.get_mut(2..4) {
            f.copy_from_slice(&c.to_be_bytes());
        }
    }
    v
}

/// The whole frame of IGMP message `m` from `src` (at `mac`) to `dst`, with
/// IP identification `id`.
pub fn frame(mac: [u8; 6], src: Ipv4Addr, dst: Ipv4Addr, id: u16, m: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ethernet::HEADER_LEN + IP_HEADER_LEN + m.len());
    f.extend_from_slice(&group_mac(dst));
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ethertype::IPV4.to_be_bytes());
    let total = (IP_HEADER_LEN + m.len()).min(65_535) as u16;
    let mut ip = [0u8; IP_HEADER_LEN];
    ip[0] = 0x46;
    // Precedence Internetwork Control (RFC 3376 section 4).
    ip[1] = 0xc0;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&id.to_be_bytes());
    ip[6] = 0x40;
    ip[8] = 1;
    ip[9] = crate::ipv4::protocol::IGMP;
    ip[12..16].copy_from_slice(&src.octets());
    ip[16..20].copy_from_slice(&dst.octets());
    // Router Alert (RFC 2113): copied, option 20, length 4, value 0.
    ip[20..24].copy_from_slice(&[0x94, 0x04, 0, 0]);
    let c = checksum::checksum(&ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(m);
    f
}
