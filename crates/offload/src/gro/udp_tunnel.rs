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
use super::bytes;
use linerate_wire::checksum;
use linerate_wire::layout::Headers;
use linerate_wire::udp::field;

/// The UDP checksum of the outer header `o`.
#[inline]
pub(super) fn csum(b: &[u8], o: &Headers) -> u16 {
    bytes::be16(b, usize::from(o.l4_offset) + field::CHECKSUM.start)
}

/// The packet-level checks: the UDP length is the real length (to `end`).
#[inline]
pub(super) fn check(b: &[u8], o: &Headers, end: usize) -> Result<(), FlushReason> {
    let l4 = usize::from(o.l4_offset);
    if usize::from(bytes::be16(b, l4 + field::LENGTH.start)) != end.wrapping_sub(l4) {
        return Err(FlushReason::Length);
    }
    Ok(())
}

/// True if the datagram's checksum is non-zero, so it counts as a checksum level.
#[inline]
pub(super) fn has_csum(b: &[u8], o: &Headers) -> bool {
    csum(b, o) != 0
}

/// Verifies the (non-zero) checksum in software, with the outer pseudo header sum
/// `pseudo`.
#[inline]
pub(super) fn verify(b: &[u8], o: &Headers, pseudo: u32) -> Result<(), FlushReason> {
    let seg = bytes::range(b, usize::from(o.l4_offset), b.len());
    if checksum::verify(seg, pseudo) {
        Ok(())
    } else {
        Err(FlushReason::OuterCsumBad)
    }
}

/// Same flow if both ports are equal and the checksums are both zero or both not.
#[inline]
pub(super) fn same_flow(p: &[u8], po: &Headers, h: &[u8], ho: &Headers) -> Result<(), FlushReason> {
    if bytes::be32(p, usize::from(po.l4_offset)) != bytes::be32(h, usize::from(ho.l4_offset)) {
        return Err(FlushReason::Tuple);
    }
    if (csum(p, po) == 0) != (csum(h, ho) == 0) {
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
    if csum(b, o) != 0 {
        bytes::put16(b, l4 + field::CHECKSUM.start, checksum::fold(pseudo));
    }
}
