//! MLD messages (RFC 3810 section 5, RFC 2710 section 3): queries decoded
//! and checked as RFC 3810 section 5.1.14 asks (link-local source, hop limit
//! 1, a Router Alert option), reports and dones encoded into whole Ethernet
//! frames with hop limit 1 behind a Hop-by-Hop header carrying Router Alert
//! (RFC 2711, value 0: MLD).

use super::{Compat, Out, Query};
use crate::checksum;
use crate::ethernet::{self, ethertype};
use crate::ipv4::protocol;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// Message types (ICMPv6).
pub mod msg {
    /// Multicast Listener Query (every version).
    pub const QUERY: u8 = 130;
    /// MLDv1 Multicast Listener Report.
    pub const V1_REPORT: u8 = 131;
    /// MLDv1 Multicast Listener Done.
    pub const DONE: u8 = 132;
    /// MLDv2 Multicast Listener Report.
    pub const V2_REPORT: u8 = 143;
}

/// True for an ICMPv6 message type of MLD.
pub fn is_mld(t: u8) -> bool {
    matches!(t, msg::QUERY | msg::V1_REPORT | msg::DONE | msg::V2_REPORT)
}

/// All Nodes (ff02::1): general queries.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// All Routers (ff02::2): MLDv1 dones.
pub const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// All MLDv2-capable routers (ff02::16): MLDv2 reports.
pub const ALL_V2_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 0x16);

/// The Hop-by-Hop header of every message sent: next header ICMPv6, Router
/// Alert (type 5, length 2, value 0), PadN of 2.
const HOP_BY_HOP: [u8; 8] = [protocol::ICMPV6, 0, 5, 2, 0, 0, 1, 0];

/// IPv6 and Hop-by-Hop headers.
pub const IP_HEADER_LEN: usize = 40 + HOP_BY_HOP.len();

/// Why a received MLD message was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// Shorter than its type needs, a query of 25 to 27 bytes (RFC 3810
    /// section 8.1), or more sources than the message holds.
    Length,
    /// A query from a source that is not link-local, with a hop limit other
    /// than 1, or without a Router Alert option (RFC 3810 section 5.1.14).
    Header,
    /// A group-specific query whose group is not a multicast address.
    Group,
}

/// A decoded message the host acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// A query, general or for a group (and sources).
    Query(Query),
    /// Another node's MLDv1 report for a group.
    Report(IpAddr),
    /// Anything else valid: ignored.
    Other,
}

/// The milliseconds an MLDv2 Maximum Response Code stands for (RFC 3810
/// section 5.1.3).
pub fn decode_mrc(code: u16) -> u32 {
    if code < 32768 {
        u32::from(code)
    } else {
        let exp = u32::from((code >> 12) & 0x7);
        let mant = u32::from(code & 0xfff);
        (mant | 0x1000) << (exp + 3)
    }
}

/// True if the IPv6 packet `ip` (fixed header first) carries a Hop-by-Hop
/// header with a Router Alert option.
pub fn has_router_alert(ip: &[u8]) -> bool {
    if ip.get(6) != Some(&protocol::HOP_BY_HOP) {
        return false;
    }
    let Some(hbh) = ip.get(40..) else {
        return false;
    };
    let Some(&len) = hbh.get(1) else {
        return false;
    };
    let opts = hbh.get(2..8 + 8 * usize::from(len)).unwrap_or_default();
    let mut i = 0;
    while let Some(&t) = opts.get(i) {
        if t == 0 {
            i += 1;
            continue;
        }
        let Some(&l) = opts.get(i + 1) else {
            return false;
        };
        if t == 5 && l == 2 {
            return true;
        }
        i += 2 + usize::from(l);
    }
    false
}

/// Decodes the MLD message `data` (checksum already verified), sent from
/// `src` with `hop_limit`; `router_alert` says whether the packet had the option.
pub fn decode(data: &[u8], src: Ipv6Addr, hop_limit: u8, router_alert: bool) -> Result<Msg, Bad> {
    let (Some(&t), Some(g)) = (data.first(), data.get(8..24)) else {
        return Err(Bad::Length);
    };
    let mut a = [0u8; 16];
    a.copy_from_slice(g);
    let group = Ipv6Addr::from(a);
    match t {
        msg::QUERY => {
            if !src.is_unicast_link_local() || hop_limit != 1 || !router_alert {
                return Err(Bad::Header);
            }
            let code = data
                .get(4..6)
                .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]));
            let (version, ms, rest) = match data.len() {
                24 => (Compat::V2, u32::from(code), None),
                25..=27 => return Err(Bad::Length),
                _ => (Compat::V3, decode_mrc(code), data.get(24..)),
            };
            let group = if group.is_unspecified() {
                None
            } else if group.is_multicast() {
                Some(IpAddr::V6(group))
            } else {
                return Err(Bad::Group);
            };
            let mut q = Query {
                version,
                group,
                sources: Vec::new(),
                max_resp: Duration::from_millis(u64::from(ms)),
                qrv: 0,
                qqi: Duration::ZERO,
            };
            if let Some(r) = rest {
                let (Some(&flags), Some(&qqic), Some(n)) = (r.first(), r.get(1), r.get(2..4))
                else {
                    return Err(Bad::Length);
                };
                q.qrv = flags & 0x7;
                q.qqi = Duration::from_secs(u64::from(super::igmp::decode_code(qqic)));
                let n = usize::from(u16::from_be_bytes([n[0], n[1]]));
                let src = r.get(4..4 + 16 * n).ok_or(Bad::Length)?;
                q.sources = src
                    .chunks_exact(16)
                    .filter_map(|s| <[u8; 16]>::try_from(s).ok())
                    .map(|s| IpAddr::V6(Ipv6Addr::from(s)))
                    .collect();
                if group.is_none() && n != 0 {
                    return Err(Bad::Length);
                }
            }
            Ok(Msg::Query(q))
        }
        msg::V1_REPORT if group.is_multicast() => Ok(Msg::Report(IpAddr::V6(group))),
        _ => Ok(Msg::Other),
    }
}

/// The Ethernet address of IPv6 group `g` (RFC 2464 section 7).
pub fn group_mac(g: Ipv6Addr) -> [u8; 6] {
    let o = g.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

fn v6(a: &IpAddr) -> Option<Ipv6Addr> {
    match a {
        IpAddr::V6(a) => Some(*a),
        IpAddr::V4(_) => None,
    }
}

/// The MLD messages (destination, message without its checksum) that carry
/// `out`, each fitting an IP packet of `mtu` bytes.
pub fn messages(out: &Out, mtu: usize) -> Vec<(Ipv6Addr, Vec<u8>)> {
    let simple = |t: u8, dst: Ipv6Addr, g: Ipv6Addr| {
        let mut m = vec![t, 0, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&g.octets());
        (dst, m)
    };
    let mut v = Vec::new();
    match out {
        Out::V1Report(g) | Out::V2Report(g) => {
            v.extend(v6(g).map(|g| simple(msg::V1_REPORT, g, g)))
        }
        Out::Leave(g) => v.extend(v6(g).map(|g| simple(msg::DONE, ALL_ROUTERS, g))),
        Out::Report(recs) => {
            let room = mtu.saturating_sub(IP_HEADER_LEN).max(8 + 20 + 16);
            let mut m: Vec<u8> = Vec::new();
            let mut n = 0u16;
            let flush = |m: &mut Vec<u8>, n: &mut u16, v: &mut Vec<(Ipv6Addr, Vec<u8>)>| {
                if *n > 0 {
                    if let Some(c) = m.get_mut(6..8) {
                        c.copy_from_slice(&n.to_be_bytes());
                    }
                    v.push((ALL_V2_ROUTERS, std::mem::take(m)));
                }
                *n = 0;
            };
            for (t, g, srcs) in recs {
                let Some(g) = v6(g) else { continue };
                let srcs: Vec<Ipv6Addr> = srcs.iter().filter_map(v6).collect();
                let len = 20 + 16 * srcs.len();
                if n > 0 && m.len() + len > room {
                    flush(&mut m, &mut n, &mut v);
                }
                if n == 0 {
                    m = vec![msg::V2_REPORT, 0, 0, 0, 0, 0, 0, 0];
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
    v
}

/// The whole frame of MLD message `m` (its checksum filled in here) from
/// `src` (at `mac`) to `dst`.
pub fn frame(mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, m: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(ethernet::HEADER_LEN + IP_HEADER_LEN + m.len());
    f.extend_from_slice(&group_mac(dst));
    f.extend_from_slice(&mac);
    f.extend_from_slice(&ethertype::IPV6.to_be_bytes());
    let plen = (HOP_BY_HOP.len() + m.len()).min(65_535) as u16;
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&plen.to_be_bytes());
    f.extend_from_slice(&[protocol::HOP_BY_HOP, 1]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&HOP_BY_HOP);
    let at = f.len();
    f.extend_from_slice(m);
    let pseudo = checksum::pseudo_ipv6(
        &src.octets(),
        &dst.octets(),
        protocol::ICMPV6,
        m.len() as u32,
    );
    let c = checksum::finish(checksum::partial(m, pseudo));
    if let Some(x) = f.get_mut(at + 2..at + 4) {
        x.copy_from_slice(&c.to_be_bytes());
    }
    f
}

/// The link-local address MLD messages leave from (RFC 3810 section 5:
/// reports are sent from a link-local address): the interface's own if it
/// is one, else the modified EUI-64 one of `mac` (RFC 4291 appendix A).
pub fn source(own: Ipv6Addr, mac: [u8; 6]) -> Ipv6Addr {
    if own.is_unicast_link_local() {
        return own;
    }
    let m = mac;
    Ipv6Addr::from([
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 2,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ])
}
