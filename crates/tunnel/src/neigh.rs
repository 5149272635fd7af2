//! ARP (RFC 826) and neighbour discovery (RFC 4861) messages on the underlay:
//! probes for a next hop, and the answers for the VTEP's own address. Which
//! next hops are known, probed, given up on, and what waits for them, is the
//! engine's neighbour table, shared: [`linerate_nic::neigh`] (the tunnel keeps
//! one in its shared state, bounded by `VtepConfig::neighbors`).

use linerate_nic::{Frame, Pool};
use linerate_wire::checksum;
use std::net::IpAddr;

/// An ARP request or IPv6 neighbour solicitation for `target` from
/// `local_mac`/`local`.
pub(crate) fn probe(
    pool: &Pool,
    local_mac: [u8; 6],
    local: IpAddr,
    target: IpAddr,
) -> Option<Frame> {
    match (local, target) {
        (IpAddr::V4(l), IpAddr::V4(t)) => {
            let mut b = [0u8; 42];
            b[0..6].copy_from_slice(&[0xff; 6]);
            b[6..12].copy_from_slice(&local_mac);
            b[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
            linerate_wire::arp::emit_request(&mut b[14..], local_mac, l.octets(), t.octets())
                .ok()?;
            Some(Frame::plain(pool.alloc_from(&b)))
        }
        (IpAddr::V6(l), IpAddr::V6(t)) => {
            let t = t.octets();
            let dst = linerate_wire::icmp::ndp::solicited_node_multicast(&t);
            let mac = linerate_wire::icmp::ndp::multicast_mac(&dst);
            Some(nd(pool, 135, 0, local_mac, mac, &l.octets(), &dst, &t, 1))
        }
        _ => None,
    }
}

/// An ICMPv6 neighbour message of `kind` (135 NS with a source link-layer
/// option, 136 NA with a target one) with `flags` in its first byte.
#[allow(clippy::too_many_arguments)]
pub(crate) fn nd(
    pool: &Pool,
    kind: u8,
    flags: u8,
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: &[u8; 16],
    dst: &[u8; 16],
    target: &[u8; 16],
    opt: u8,
) -> Frame {
    let mut b = [0u8; 14 + 40 + 32];
    b[0..6].copy_from_slice(&dst_mac);
    b[6..12].copy_from_slice(&src_mac);
    b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    b[14] = 0x60;
    b[18..20].copy_from_slice(&32u16.to_be_bytes());
    b[20] = 58;
    b[21] = 255;
    b[22..38].copy_from_slice(src);
    b[38..54].copy_from_slice(dst);
    b[54] = kind;
    b[58] = flags;
    b[62..78].copy_from_slice(target);
    b[78] = opt;
    b[79] = 1;
    b[80..86].copy_from_slice(&src_mac);
    let c = checksum::finish(checksum::partial(
        &b[54..],
        checksum::pseudo_ipv6(src, dst, 58, 32),
    ));
    b[56..58].copy_from_slice(&c.to_be_bytes());
    Frame::plain(pool.alloc_from(&b))
}

/// What a received ARP or ND message says: the answer to send (if it asks for
/// the VTEP's address) and the (address, MAC) it teaches.
pub(crate) fn handle(
    b: &[u8],
    nd_at: Option<(usize, usize)>,
    pool: &Pool,
    local_mac: [u8; 6],
    local: IpAddr,
) -> (Option<Frame>, Option<(IpAddr, [u8; 6])>) {
    match (nd_at, local) {
        (None, IpAddr::V4(l)) => {
            let Ok(p) = linerate_wire::arp::Packet::new_checked(b.get(14..).unwrap_or_default())
            else {
                return (None, None);
            };
            if p.htype() != 1 || p.ptype() != 0x0800 || p.hlen() != 6 || p.plen() != 4 {
                return (None, None);
            }
            let learn = Some((IpAddr::from(p.spa()), p.sha()));
            if p.oper() == 1 && p.tpa() == l.octets() {
                let mut r = [0u8; 42];
                r[0..6].copy_from_slice(&p.sha());
                r[6..12].copy_from_slice(&local_mac);
                r[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
                if linerate_wire::arp::emit_reply(
                    &mut r[14..],
                    local_mac,
                    l.octets(),
                    p.sha(),
                    p.spa(),
                )
                .is_ok()
                {
                    return (Some(Frame::plain(pool.alloc_from(&r))), learn);
                }
            }
            (None, learn)
        }
        (Some((off, end)), IpAddr::V6(l)) => {
            let Some(m) = b.get(off..end) else {
                return (None, None);
            };
            let (Some(src), Some(dst)) = (b.get(22..38), b.get(38..54)) else {
                return (None, None);
            };
            let mut s = [0u8; 16];
            s.copy_from_slice(src);
            let mut d = [0u8; 16];
            d.copy_from_slice(dst);
            if m.len() < 24 || b.get(21) != Some(&255) {
                return (None, None);
            }
            if !checksum::verify(m, checksum::pseudo_ipv6(&s, &d, 58, m.len() as u32)) {
                return (None, None);
            }
            let mut target = [0u8; 16];
            target.copy_from_slice(m.get(8..24).unwrap_or(&[0; 16]));
            // The link-layer option (source for NS, target for NA).
            let mut ll = None;
            let mut opts = m.get(24..).unwrap_or_default();
            while let Some(&[kind, len, a, b2, c, d2, e, f]) = opts.first_chunk::<8>() {
                let n = usize::from(len) * 8;
                if n == 0 || n > opts.len() {
                    break;
                }
                if kind == 1 || kind == 2 {
                    ll = Some([a, b2, c, d2, e, f]);
                }
                opts = opts.get(n..).unwrap_or_default();
            }
            if m.first() == Some(&135) {
                let learn = ll.map(|mac| (IpAddr::from(s), mac));
                if target == l.octets() && s != [0; 16] {
                    let Some(mac) = ll else { return (None, None) };
                    // Solicited and override (RFC 4861 section 7.2.4).
                    let f = nd(pool, 136, 0x60, local_mac, mac, &l.octets(), &s, &target, 2);
                    return (Some(f), learn);
                }
                (None, learn)
            } else {
                (None, ll.map(|mac| (IpAddr::from(target), mac)))
            }
        }
        _ => (None, None),
    }
}
