//! Receive-side validation of an underlay frame: is it a tunnel frame for this
//! VTEP, and where is the inner frame? Pure (no state), so the fuzz target and
//! the refusal tests drive it directly through the overlay NIC.

use crate::config::Encap;
use crate::counters::TunnelCounter;
use linerate_offload::{Checksum, OffloadMeta};
use linerate_wire::{checksum, geneve, gre, vxlan};
use std::net::IpAddr;

/// What the receive path needs to know of the VTEP.
#[derive(Debug, Clone)]
pub(crate) struct RxConfig {
    pub local_ip: IpAddr,
    pub port: u16,
    pub encap: Encap,
    pub zero_csum6: bool,
    pub local_mac: [u8; 6],
    /// Multicast groups joined (Linux's vxlan `group`): frames to one are
    /// tunnel frames of ours too.
    pub groups: Vec<IpAddr>,
}

/// A valid tunnel frame for this VTEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decap {
    /// VNI / VSID.
    pub vni: u32,
    /// Bytes of outer headers before the inner Ethernet header.
    pub hlen: usize,
    /// Offset just past the inner frame (the outer datagram's end).
    pub end: usize,
    /// Outer source address.
    pub src: IpAddr,
    /// Outer ECN codepoint.
    pub ecn: u8,
    /// The outer transport checksum is present (counted as a verified level).
    pub outer_csum: bool,
    /// The multicast group the frame was sent to, if not to this VTEP's
    /// own address.
    pub group: Option<IpAddr>,
}

/// Frames that are not tunnel frames but that the VTEP itself handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Control {
    /// An ARP packet (EtherType 0x0806) at offset 14.
    Arp,
    /// An ICMPv6 neighbour solicitation or advertisement: offset of the ICMPv6
    /// message, its end, and the IPv6 source and destination.
    Nd { off: usize, end: usize },
    /// An IGMP message: offset of the message and its end.
    Igmp { off: usize, end: usize },
    /// An MLD message (checksum verified): offset of the ICMPv6 message,
    /// its end, the IPv6 source and hop limit, and whether a Router Alert
    /// option came with it.
    Mld {
        off: usize,
        end: usize,
        src: [u8; 16],
        hop_limit: u8,
        router_alert: bool,
    },
}

/// Why a frame was not decapsulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Counted(TunnelCounter),
    Control(Control),
}

use Refused::Counted;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

const TRUNC: Refused = Counted(TunnelCounter::RxTruncated);
const NOT_OURS: Refused = Counted(TunnelCounter::RxNotOurs);

/// Classifies the underlay frame `b` received with `meta`.
pub(crate) fn classify(b: &[u8], meta: &OffloadMeta, cfg: &RxConfig) -> Result<Decap, Refused> {
    let ethertype = be16(b, 12).ok_or(TRUNC)?;
    const L3: usize = 14;
    let mut group = None;
    let (src, proto, l4, end, ecn, pseudo) = match (ethertype, cfg.local_ip) {
        (0x0806, _) => return Err(Refused::Control(Control::Arp)),
        (0x0800, IpAddr::V4(local)) => {
            let h: &[u8; 20] = b
                .get(L3..)
                .and_then(|x| x.first_chunk::<20>())
                .ok_or(TRUNC)?;
            let ihl = usize::from(h[0] & 0xf) * 4;
            if h[0] >> 4 != 4 || ihl < 20 {
                return Err(NOT_OURS);
            }
            let total = usize::from(be16(h, 2).ok_or(TRUNC)?);
            let end = L3 + total;
            if total < ihl || end > b.len() {
                return Err(TRUNC);
            }
            let hdr = b.get(L3..L3 + ihl).ok_or(TRUNC)?;
            let good = if ihl == 20 {
                crate::encap::ipv4_header_sum(h) == 0xffff
            } else {
                checksum::verify(hdr, 0)
            };
            if !good {
                return Err(Counted(TunnelCounter::RxBadOuterCsum));
            }
            let dst = [h[16], h[17], h[18], h[19]];
            if h[9] == 2 {
                // IGMP: the group membership's (queries), whatever the
                // destination.
                return Err(Refused::Control(Control::Igmp { off: L3 + ihl, end }));
            }
            if dst != local.octets() {
                group = Some(IpAddr::from(dst)).filter(|g| cfg.groups.contains(g));
                if group.is_none() {
                    return Err(NOT_OURS);
                }
            }
            // Fragments (MF or an offset) are never tunnel frames of ours: the
            // sender sets DF and segments (RFC 7348 section 4.3).
            if be16(h, 6).unwrap_or(0) & 0x3fff != 0 {
                return Err(NOT_OURS);
            }
            let s = [h[12], h[13], h[14], h[15]];
            let proto = h[9];
            let pseudo = checksum::pseudo_ipv4(s, dst, proto, 0);
            let src = IpAddr::from(s);
            (src, proto, L3 + ihl, end, h[1] & 3, pseudo)
        }
        (0x86dd, IpAddr::V6(local)) => {
            let h: &[u8; 40] = b
                .get(L3..)
                .and_then(|x| x.first_chunk::<40>())
                .ok_or(TRUNC)?;
            if h[0] >> 4 != 6 {
                return Err(NOT_OURS);
            }
            let end = L3 + 40 + usize::from(be16(h, 4).ok_or(TRUNC)?);
            if end > b.len() {
                return Err(TRUNC);
            }
            let (s, d) = addrs16(h);
            let proto = h[6];
            if proto == 0 {
                // A Hop-by-Hop header: only MLD (with Router Alert) is ours.
                return mld_control(b, h, end).map_or(Err(NOT_OURS), |c| Err(Refused::Control(c)));
            }
            if proto == 58 {
                // ICMPv6: neighbour discovery is the VTEP's.
                let t = *b.get(L3 + 40).ok_or(TRUNC)?;
                if t == 135 || t == 136 {
                    return Err(Refused::Control(Control::Nd { off: L3 + 40, end }));
                }
                return mld_control(b, h, end).map_or(Err(NOT_OURS), |c| Err(Refused::Control(c)));
            }
            if d != local.octets() {
                group = Some(IpAddr::from(d)).filter(|g| cfg.groups.contains(g));
                if group.is_none() {
                    return Err(NOT_OURS);
                }
            }
            let pseudo = checksum::pseudo_ipv6(&s, &d, proto, 0);
            let ecn = (h[1] >> 4) & 3;
            (IpAddr::from(s), proto, L3 + 40, end, ecn, pseudo)
        }
        _ => return Err(NOT_OURS),
    };
    // Tunnel frames come unicast to this VTEP (Linux drops PACKET_OTHERHOST),
    // or to the Ethernet address of a group it joined.
    let to = match group {
        None => cfg.local_mac,
        Some(g) => crate::mcast::group_mac(g),
    };
    if b.get(0..6) != Some(&to[..]) {
        return Err(NOT_OURS);
    }
    // A partial checksum on receive (a memory port or TAP handing over a frame
    // built locally, virtio's NEEDS_CSUM) is trusted, as Linux trusts
    // CHECKSUM_PARTIAL: the inner checksum is not complete yet, so the outer
    // one cannot be checked.
    let verified = match meta.csum {
        Checksum::Verified { levels } => levels >= 1,
        Checksum::Partial { .. } => true,
        Checksum::None => false,
    };
    match &cfg.encap {
        Encap::Vxlan | Encap::Geneve { .. } => {
            if proto != 17 {
                return Err(NOT_OURS);
            }
            let u = b.get(l4..l4 + 8).ok_or(TRUNC)?;
            if be16(u, 2) != Some(cfg.port) {
                return Err(NOT_OURS);
            }
            let ulen = usize::from(be16(u, 4).unwrap_or(0));
            if ulen < 8 || l4 + ulen > end {
                return Err(TRUNC);
            }
            let end = l4 + ulen;
            let field = be16(u, 6).unwrap_or(0);
            let outer_csum = field != 0;
            if !outer_csum {
                if cfg.local_ip.is_ipv6() && !cfg.zero_csum6 {
                    return Err(Counted(TunnelCounter::RxZeroCsum6));
                }
            } else if !verified {
                let len = u32::try_from(ulen).unwrap_or(0);
                let ps = checksum::combine(pseudo, checksum::combine(len >> 16, len & 0xffff));
                if !checksum::verify(b.get(l4..end).ok_or(TRUNC)?, ps) {
                    return Err(Counted(TunnelCounter::RxBadOuterCsum));
                }
            }
            let t = l4 + 8;
            let (vni, tlen) = match &cfg.encap {
                Encap::Vxlan => {
                    let p = vxlan::Packet::new_checked(b.get(t..end).ok_or(TRUNC)?)
                        .map_err(|_| TRUNC)?;
                    if p.flags() & vxlan::FLAG_I == 0 {
                        return Err(Counted(TunnelCounter::RxVxlanNoI));
                    }
                    (p.vni(), vxlan::HEADER_LEN)
                }
                Encap::Geneve { known_critical, .. } => {
                    let body = b.get(t..end).ok_or(TRUNC)?;
                    if body.len() < geneve::HEADER_LEN {
                        return Err(TRUNC);
                    }
                    let p = geneve::Packet::new_unchecked(body);
                    if p.version() != 0 {
                        return Err(Counted(TunnelCounter::RxGeneveVersion));
                    }
                    if p.header_len() > body.len() {
                        return Err(TRUNC);
                    }
                    if p.oam() {
                        return Err(Counted(TunnelCounter::RxGeneveOam));
                    }
                    if p.protocol() != geneve::PROTO_TEB {
                        return Err(Counted(TunnelCounter::RxBadTunnelHeader));
                    }
                    // Every critical option must be known, whatever the C bit
                    // says (RFC 8926 section 3.5.1: C is a hint).
                    for o in p.option_iter() {
                        let o = o.map_err(|_| TRUNC)?;
                        if o.critical() && !known_critical.contains(&(o.class, o.kind)) {
                            return Err(Counted(TunnelCounter::RxGeneveCritical));
                        }
                    }
                    (p.vni(), p.header_len())
                }
                Encap::Nvgre => return Err(NOT_OURS),
            };
            let hlen = t + tlen;
            inner_eth(b, hlen, end)?;
            Ok(Decap {
                vni,
                hlen,
                end,
                src,
                ecn,
                outer_csum,
                group,
            })
        }
        Encap::Nvgre => {
            if proto != 47 {
                return Err(NOT_OURS);
            }
            let body = b.get(l4..end).ok_or(TRUNC)?;
            if body.len() < gre::BASE_LEN {
                return Err(TRUNC);
            }
            let p = gre::Packet::new_unchecked(body);
            if p.protocol() != gre::PROTO_TEB || p.version() != 0 {
                return Err(NOT_OURS);
            }
            // RFC 7637 section 3.2: C and S clear, K set.
            if p.checksum_present() || p.sequence_present() || !p.key_present() {
                return Err(Counted(TunnelCounter::RxBadTunnelHeader));
            }
            if body.len() < gre::NVGRE_LEN {
                return Err(TRUNC);
            }
            let vni = p.vsid().ok_or(TRUNC)?;
            let hlen = l4 + gre::NVGRE_LEN;
            inner_eth(b, hlen, end)?;
            Ok(Decap {
                vni,
                hlen,
                end,
                src,
                ecn,
                outer_csum: false,
                group,
            })
        }
    }
}

/// The MLD message of the IPv6 packet with fixed header `h` (at offset 14
/// of `b`, ending at `end`), directly or behind a Hop-by-Hop header, its
/// ICMPv6 checksum verified; `None` if it is not one.
fn mld_control(b: &[u8], h: &[u8; 40], end: usize) -> Option<Control> {
    const L3: usize = 14;
    let (s, d) = addrs16(h);
    let (off, router_alert) = if h[6] == 0 {
        let hbh = L3 + 40;
        if *b.get(hbh)? != 58 {
            return None;
        }
        let len = 8 + 8 * usize::from(*b.get(hbh + 1)?);
        let ip = b.get(L3..hbh + len)?;
        (hbh + len, linerate_wire::mcast::mld::has_router_alert(ip))
    } else {
        (L3 + 40, false)
    };
    let t = *b.get(off)?;
    if !linerate_wire::mcast::mld::is_mld(t) || off > end {
        return None;
    }
    let msg = b.get(off..end)?;
    let len = u32::try_from(msg.len()).ok()?;
    if !checksum::verify(msg, checksum::pseudo_ipv6(&s, &d, 58, len)) {
        return None;
    }
    Some(Control::Mld {
        off,
        end,
        src: s,
        hop_limit: h[7],
        router_alert,
    })
}

/// The source and destination addresses of an IPv6 header.
fn addrs16(h: &[u8; 40]) -> ([u8; 16], [u8; 16]) {
    let mut s = [0; 16];
    let mut d = [0; 16];
    for (i, (x, y)) in s.iter_mut().zip(d.iter_mut()).enumerate() {
        *x = h.get(8 + i).copied().unwrap_or(0);
        *y = h.get(24 + i).copied().unwrap_or(0);
    }
    (s, d)
}

/// The inner frame holds at least an Ethernet header.
fn inner_eth(b: &[u8], hlen: usize, end: usize) -> Result<(), Refused> {
    if end < hlen + 14 || end > b.len() {
        return Err(TRUNC);
    }
    Ok(())
}

/// The ECN field of the inner IP header at `l3` (EtherType `et`), if IP.
pub(crate) fn inner_ecn(b: &[u8], et: u16, l3: usize) -> Option<u8> {
    match et {
        0x0800 => Some(b.get(l3 + 1)? & 3),
        0x86dd => Some((b.get(l3 + 1)? >> 4) & 3),
        _ => None,
    }
}

/// Sets the inner IP header's ECN field at `l3` to `ecn`, fixing the IPv4
/// header checksum incrementally (RFC 1624).
pub(crate) fn set_inner_ecn(b: &mut [u8], et: u16, l3: usize, ecn: u8) {
    match et {
        0x0800 => {
            let (Some(&tos), Some(c0), Some(c1)) = (b.get(l3 + 1), b.get(l3 + 10), b.get(l3 + 11))
            else {
                return;
            };
            let old = u16::from_be_bytes([*b.get(l3).unwrap_or(&0), tos]);
            let new_tos = (tos & !3) | (ecn & 3);
            let new = u16::from_be_bytes([*b.get(l3).unwrap_or(&0), new_tos]);
            let c = u16::from_be_bytes([*c0, *c1]);
            // HC' = ~(~HC + ~m + m')
            let sum = checksum::combine(
                checksum::combine(u32::from(!c), u32::from(!old)),
                u32::from(new),
            );
            let nc = !checksum::fold(sum);
            if let Some(t) = b.get_mut(l3 + 1) {
                *t = new_tos;
            }
            if let Some(f) = b.get_mut(l3 + 10..l3 + 12) {
                f.copy_from_slice(&nc.to_be_bytes());
            }
        }
        0x86dd => {
            if let Some(x) = b.get_mut(l3 + 1) {
                *x = (*x & !0x30) | ((ecn & 3) << 4);
            }
        }
        _ => {}
    }
}
