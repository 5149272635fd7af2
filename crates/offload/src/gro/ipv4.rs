//! IPv4: Linux `inet_gro_receive` (packet checks, same flow) and `inet_gro_flush`
//! (the rules that end a run), `inet_gro_complete` (the fix-up); REFERENCE.md "GRO".
//!
//! * Packet: IHL 5 (no options), not a fragment (nor the reserved flag), header
//!   checksum good, total length equal to the real length (no padding).
//! * Same flow: protocol, source and destination address.
//! * Flush: TTL, TOS or DF differ; the ID is neither fixed for the run nor the first
//!   segment's ID plus the number of segments held. Whether the run's ID is fixed is
//!   decided at its second segment, separately for the outer and the inner header of
//!   a tunnel; as in Linux, a fixed ID needs DF (an atomic datagram, RFC 6864).
//! * Fix-up: total length of the merged packet; header checksum recomputed.

use super::FlushReason;
use super::bytes::{self, hdr16, hdr32};
use linerate_wire::checksum;
use linerate_wire::ipv4::field;
use linerate_wire::layout::Headers;

/// DF in the flags / fragment offset word.
const DF: u16 = 0x4000;

/// How a run's IPv4 IDs advance (Linux `NAPI_GRO_CB(p)->ip_fixedid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum IdMode {
    /// One segment so far (or not IPv4): decided at the second.
    #[default]
    Undecided,
    /// Every segment has the first one's ID (`SKB_GSO_TCP_FIXEDID`).
    Fixed,
    /// Each segment's ID is the previous one's plus one.
    Incrementing,
}

/// The fixed IPv4 header.
pub(super) type Hdr = [u8; 20];

/// The header at `h` in `b`, if it lies there.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], h: &Headers) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(h.l3_offset))
}

/// The packet-level checks, for a header whose packet really is `len` bytes long
/// (to the end of the frame).
#[inline]
pub(super) fn check(ip: &Hdr, len: usize) -> Result<(), FlushReason> {
    if ip[field::VER_IHL] != 0x45 {
        return Err(FlushReason::IpOptions);
    }
    if hdr16!(ip, field::FLG_OFF.start) & !DF != 0 {
        return Err(FlushReason::Fragment);
    }
    if usize::from(hdr16!(ip, field::LENGTH.start)) != len {
        return Err(FlushReason::Length);
    }
    if !header_sum_ok(ip) {
        return Err(FlushReason::IpCsum);
    }
    Ok(())
}

/// True if the header sums to all ones (RFC 1071). Summed as five native-order
/// 32-bit words (as Linux's `ip_fast_csum`): the one's-complement sum is
/// independent of byte order up to a byte swap (RFC 1071 section 2(B)), and all
/// ones swapped is all ones.
#[inline]
fn header_sum_ok(ip: &Hdr) -> bool {
    let w = |i: usize| u64::from(bytes::array::<4>(ip, i).map_or(0, |x| u32::from_ne_bytes(*x)));
    let s = w(0) + w(4) + w(8) + w(12) + w(16);
    let s = (s & 0xffff_ffff) + (s >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    checksum::fold(s as u32) == 0xffff
}

/// Same flow if protocol and both addresses are equal.
#[inline]
pub(super) fn same_flow(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    let same = p[field::PROTOCOL] == h[field::PROTOCOL]
        && hdr32!(p, field::SRC_ADDR.start) == hdr32!(h, field::SRC_ADDR.start)
        && hdr32!(p, field::DST_ADDR.start) == hdr32!(h, field::DST_ADDR.start);
    if same {
        Ok(())
    } else {
        Err(FlushReason::Tuple)
    }
}

/// The flush rules against the run's first header `h`; the run holds `count`
/// segments with ID mode `mode`. Returns the ID mode the run has if the packet joins.
#[inline]
pub(super) fn must_flush(
    p: &Hdr,
    h: &Hdr,
    mode: IdMode,
    count: u16,
) -> Result<IdMode, FlushReason> {
    if p[field::TTL] != h[field::TTL] {
        return Err(FlushReason::Ttl);
    }
    if p[field::DSCP_ECN] != h[field::DSCP_ECN] {
        return Err(FlushReason::Tos);
    }
    let df = hdr16!(p, field::FLG_OFF.start) & DF;
    if df != hdr16!(h, field::FLG_OFF.start) & DF {
        return Err(FlushReason::Df);
    }
    let offset = hdr16!(p, field::IDENT.start).wrapping_sub(hdr16!(h, field::IDENT.start));
    match mode {
        IdMode::Undecided if offset == 0 && df != 0 => Ok(IdMode::Fixed),
        IdMode::Undecided if offset == 1 => Ok(IdMode::Incrementing),
        IdMode::Fixed if offset == 0 => Ok(IdMode::Fixed),
        IdMode::Incrementing if offset == count => Ok(IdMode::Incrementing),
        _ => Err(FlushReason::IpId),
    }
}

/// The pseudo-header sum for a transport header of `l4_len` bytes after `ip`.
#[inline]
pub(super) fn pseudo(ip: &Hdr, protocol: u8, l4_len: u16) -> u32 {
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    checksum::pseudo_ipv4(src, dst, protocol, l4_len)
}

/// Sets the total length to `total` and recomputes the header checksum.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &mut Headers, total: u16) {
    let l3 = usize::from(h.l3_offset);
    bytes::put16(b, l3 + field::LENGTH.start, total);
    bytes::put16(b, l3 + field::CHECKSUM.start, 0);
    let c = checksum::checksum(bytes::slice(b, l3, 20));
    bytes::put16(b, l3 + field::CHECKSUM.start, c);
    h.l3_len = u32::from(total);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_sum_agrees_with_rfc1071() {
        let mut h = [
            0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0, 0, 0xc0, 0xa8, 0, 1, 0xc0, 0xa8, 0,
            0xc7,
        ];
        let c = checksum::checksum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(header_sum_ok(&h));
        for i in 0..20 {
            let mut bad = h;
            bad[i] ^= 0x21;
            assert_eq!(header_sum_ok(&bad), checksum::verify(&bad, 0), "byte {i}");
        }
    }
}
