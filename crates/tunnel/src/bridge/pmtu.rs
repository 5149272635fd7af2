//! Path MTU discovery across the tunnel for the hosts on a domain's local
//! ports.
//!
//! The tunnel adds its headers to every frame, so an IP packet from a local
//! port fits the overlay only up to the underlay's MTU less that overhead. A
//! packet over it cannot be fragmented on the underlay (VTEPs must not), so
//! the domain does what a router on the path would do, as Linux does for
//! tunnels in a bridge (`skb_tunnel_check_pmtu`): it answers the sender with
//! ICMP "fragmentation needed" (an IPv4 packet with DF) or ICMPv6 "packet too
//! big", which appears to come from the packet's destination (addresses and
//! MACs swapped) so that the sender's stack accepts it for that path. It
//! quotes as much of the packet as RFC 1812 (576 bytes in all) and RFC 4443
//! (1280) allow.
//!
//! No answer (the packet is only dropped, and counted) for what RFC 1122,
//! RFC 1812 and RFC 4443 say never to answer: ICMP errors, non-first
//! fragments, packets from an unspecified, broadcast or multicast source, and
//! packets to a broadcast or multicast destination; nor for an IPv4 packet
//! without DF, which a router would fragment and a VTEP may not.

use super::fdb::Mac;
use linerate_wire::checksum;

/// Largest ICMPv4 error datagram (RFC 1812 section 4.3.2.3).
const ICMP4_MAX: usize = 576;
/// Largest ICMPv6 error packet (RFC 4443 section 2.4 (c)).
const ICMP6_MAX: usize = 1280;

/// What a frame from a local port is, against the overlay's MTU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// It fits, or it is not an IP packet whose length can be read.
    Fits,
    /// Too big; an answer of this many bytes is in the output buffer.
    Answer(usize),
    /// Too big, and not to be answered.
    Drop,
}

/// Checks `frame` (Ethernet, with any 802.1Q/802.1ad tags) against `mtu`, the
/// largest IP packet the overlay carries; when too big and answerable, writes
/// the ICMP answer (a whole Ethernet frame back to the sender) into `out`.
pub(crate) fn check(frame: &[u8], mtu: u16, out: &mut Vec<u8>) -> Fit {
    let Some((l2, ethertype)) = l2_len(frame) else {
        return Fit::Fits;
    };
    let Some(ip) = frame.get(l2..) else {
        return Fit::Fits;
    };
    let mtu_len = usize::from(mtu);
    match ethertype {
        0x0800 => {
            let Some(len) = be16(ip, 2).map(usize::from) else {
                return Fit::Fits;
            };
            if len <= mtu_len || ip.first().is_none_or(|b| b >> 4 != 4) {
                return Fit::Fits;
            }
            match answer_v4(frame, l2, ip, len, mtu, out) {
                Some(n) => Fit::Answer(n),
                None => Fit::Drop,
            }
        }
        0x86dd => {
            let Some(len) = be16(ip, 4).map(|n| 40 + usize::from(n)) else {
                return Fit::Fits;
            };
            if len <= mtu_len || ip.first().is_none_or(|b| b >> 4 != 6) {
                return Fit::Fits;
            }
            match answer_v6(frame, l2, ip, len, mtu, out) {
                Some(n) => Fit::Answer(n),
                None => Fit::Drop,
            }
        }
        _ => Fit::Fits,
    }
}

/// The big-endian 16 bits at `at`.
fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b: [u8; 2] = bytes.get(at..at + 2)?.try_into().ok()?;
    Some(u16::from_be_bytes(b))
}

/// The Ethernet header's length with its VLAN tags, and the ethertype after
/// them.
fn l2_len(frame: &[u8]) -> Option<(usize, u16)> {
    let mut at = 12;
    loop {
        let ethertype = be16(frame, at)?;
        if matches!(ethertype, 0x8100 | 0x88a8) {
            at += 4;
            continue;
        }
        return Some((at + 2, ethertype));
    }
}

/// The reply's Ethernet header (MACs swapped, the same tags): into `out`.
fn reply_l2(frame: &[u8], l2: usize, out: &mut Vec<u8>) -> Option<()> {
    let dst: Mac = frame.get(0..6)?.try_into().ok()?;
    let src: Mac = frame.get(6..12)?.try_into().ok()?;
    // Never toward or from a group address.
    if dst[0] & 1 != 0 || src[0] & 1 != 0 {
        return None;
    }
    out.clear();
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    out.extend_from_slice(frame.get(12..l2)?);
    Some(())
}

fn answer_v4(
    frame: &[u8],
    l2: usize,
    ip: &[u8],
    len: usize,
    mtu: u16,
    out: &mut Vec<u8>,
) -> Option<usize> {
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    if ihl < 20 || ip.len() < ihl {
        return None;
    }
    let frag = u16::from_be_bytes([*ip.get(6)?, *ip.get(7)?]);
    let df = frag & 0x4000 != 0;
    let offset = frag & 0x1fff;
    let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
    let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
    let proto = *ip.get(9)?;
    let bad_src = src == [0; 4] || src == [255; 4] || src[0] >= 224 || src[0] == 127;
    let bad_dst = dst == [255; 4] || dst[0] >= 224;
    // An ICMP error is never answered with another (RFC 1122 3.2.2).
    let icmp_error = proto == 1
        && offset == 0
        && ip
            .get(ihl)
            .is_some_and(|&t| matches!(t, 3 | 4 | 5 | 11 | 12));
    if !df || offset != 0 || bad_src || bad_dst || icmp_error {
        return None;
    }
    reply_l2(frame, l2, out)?;
    let quote = len.min(ip.len()).min(ICMP4_MAX - 20 - 8);
    let total = 20 + 8 + quote;
    let start = out.len();
    // IP: precedence "internetwork control" as Linux's icmp_send sets it.
    let tos = (ip.get(1)? & 0x1e) | 0xc0;
    let total16 = u16::try_from(total).ok()?;
    out.extend_from_slice(&[0x45, tos]);
    out.extend_from_slice(&total16.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 64, 1, 0, 0]);
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    let hc = checksum::checksum(out.get(start..start + 20)?);
    out.get_mut(start + 10..start + 12)?
        .copy_from_slice(&hc.to_be_bytes());
    // ICMP: type 3 code 4, the next-hop MTU (RFC 1191).
    let icmp = out.len();
    out.extend_from_slice(&[3, 4, 0, 0, 0, 0]);
    out.extend_from_slice(&mtu.to_be_bytes());
    out.extend_from_slice(ip.get(..quote)?);
    let c = checksum::checksum(out.get(icmp..)?);
    out.get_mut(icmp + 2..icmp + 4)?
        .copy_from_slice(&c.to_be_bytes());
    Some(out.len())
}

fn answer_v6(
    frame: &[u8],
    l2: usize,
    ip: &[u8],
    len: usize,
    mtu: u16,
    out: &mut Vec<u8>,
) -> Option<usize> {
    let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
    let next = *ip.get(6)?;
    let bad_src = src == [0; 16] || src[0] == 0xff;
    // The answer comes from the destination, which must be a unicast one.
    let bad_dst = dst[0] == 0xff || dst == [0; 16];
    // ICMPv6 errors (types below 128) are not answered (RFC 4443 2.4 (e.1));
    // behind extension headers they are not looked for.
    let icmp_error = next == 58 && ip.get(40).is_some_and(|&t| t < 128);
    // A non-first fragment: a fragment header with a non-zero offset.
    let later_fragment = next == 44 && be16(ip, 42).is_some_and(|o| o & 0xfff8 != 0);
    if bad_src || bad_dst || icmp_error || later_fragment {
        return None;
    }
    reply_l2(frame, l2, out)?;
    let quote = len.min(ip.len()).min(ICMP6_MAX - 40 - 8);
    let plen = 8 + quote;
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&u16::try_from(plen).ok()?.to_be_bytes());
    out.extend_from_slice(&[58, 64]);
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    let icmp = out.len();
    out.extend_from_slice(&[2, 0, 0, 0]);
    out.extend_from_slice(&u32::from(mtu).to_be_bytes());
    out.extend_from_slice(ip.get(..quote)?);
    let pseudo = checksum::pseudo_ipv6(&dst, &src, 58, u32::try_from(plen).ok()?);
    let c = checksum::finish(checksum::partial(out.get(icmp..)?, pseudo));
    out.get_mut(icmp + 2..icmp + 4)?
        .copy_from_slice(&c.to_be_bytes());
    Some(out.len())
}

/// A token bucket for the answers, as Linux limits ICMP errors
/// (`icmp_msgs_per_sec` 1000, `icmp_msgs_burst` 50).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateLimit {
    tokens: u32,
    last: std::time::Duration,
}

impl RateLimit {
    /// Answers a second at most, over a burst.
    const PER_SEC: u32 = 1000;
    const BURST: u32 = 50;

    pub(crate) fn new() -> RateLimit {
        RateLimit {
            tokens: Self::BURST,
            last: std::time::Duration::ZERO,
        }
    }

    /// True if an answer may go out at `now`.
    pub(crate) fn allow(&mut self, now: std::time::Duration) -> bool {
        let elapsed = now.saturating_sub(self.last);
        let add = elapsed.as_millis() * u128::from(Self::PER_SEC) / 1000;
        if add > 0 {
            let add = u32::try_from(add).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(add).min(Self::BURST);
            self.last = now;
        }
        if self.tokens == 0 {
            return false;
        }
        self.tokens -= 1;
        true
    }
}

#[cfg(test)]
mod tests;
