//! The outer UDP header of a UDP tunnel (VXLAN, GENEVE): Linux `udp_gro_receive`
//! (the tunnel path) and `udp4_gro_complete` / `udp6_gro_complete` with
//! `udp_gro_complete`; REFERENCE.md "GRO".
//!
//! * Packet: UDP length equal to the real length; a non-zero checksum is verified
//!   (it is a checksum level of its own; a zero one is not).
//! * Same flow: both ports; checksums both zero or both non-zero.
//! * Fix-up: UDP length of the merged datagram. A non-zero checksum becomes the
//!   folded, not complemented, pseudo-header sum over the merged length (what
//!   Linux's `udp4_gro_complete` writes, `~udp_v4_check(len, saddr, daddr, 0)`), so
//!   GSO (`GsoTunnel::Udp { outer_csum: true }`) completes it per segment; a zero
//!   checksum stays zero.

use super::FlushReason;
use super::bytes::{self, hdr16, hdr32};
use super::view::View;
use linerate_wire::checksum;
use linerate_wire::layout::Headers;
use linerate_wire::udp::field;

/// The outer UDP header.
pub(super) type Hdr = [u8; 8];

/// The outer UDP header of the frame `b` whose outer headers are `o`.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], o: &Headers) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(o.l4_offset))
}

/// The checksum field.
#[inline]
fn csum(u: &Hdr) -> u16 {
    hdr16!(u, field::CHECKSUM.start)
}

/// The packet-level checks: the UDP length is the real length `len` (to the end
/// of the frame).
#[inline]
pub(super) fn check(u: &Hdr, len: usize) -> Result<(), FlushReason> {
    if usize::from(hdr16!(u, field::LENGTH.start)) != len {
        return Err(FlushReason::Length);
    }
    Ok(())
}

/// True if the checksum is non-zero, so it counts as a checksum level.
#[inline]
pub(super) fn has_csum(u: &Hdr) -> bool {
    csum(u) != 0
}

/// Verifies the (non-zero) checksum of the datagram at `o` (to the end of the
/// frame `v`) in software, with the outer pseudo-header sum `pseudo`.
#[inline]
pub(super) fn verify(v: &View<'_>, o: &Headers, pseudo: u32) -> Result<(), FlushReason> {
    if checksum::fold(v.sum_from(usize::from(o.l4_offset), pseudo)) == 0xffff {
        Ok(())
    } else {
        Err(FlushReason::OuterCsumBad)
    }
}

/// Same flow if both ports are equal and the checksums are both zero or both not.
#[inline]
pub(super) fn same_flow(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if hdr32!(p, 0) != hdr32!(h, 0) {
        return Err(FlushReason::Tuple);
    }
    if (csum(p) == 0) != (csum(h) == 0) {
        return Err(FlushReason::OuterCsum);
    }
    Ok(())
}

/// Sets the UDP length to `len` and, if the checksum is non-zero, writes the folded
/// pseudo-header sum `pseudo` (over that length) into it.
#[inline]
pub(super) fn complete(b: &mut [u8], o: &Headers, len: u16, pseudo: u32) {
    let l4 = usize::from(o.l4_offset);
    bytes::put16(b, l4 + field::LENGTH.start, len);
    if bytes::be16(b, l4 + field::CHECKSUM.start) != 0 {
        bytes::put16(b, l4 + field::CHECKSUM.start, checksum::fold(pseudo));
    }
}
