//! UDP GRO (not the outer header of a tunnel, which is [`super::udp_tunnel`]'s):
//! Linux `udp_gro_receive_segment` and `udp_gro_complete_segment`; REFERENCE.md
//! "GRO". Off by default ([`super::GroConfig::udp`]), as in Linux, where a socket
//! asks for it (`UDP_GRO`) or forwarding turns it on.
//!
//! * Packet: a non-zero checksum (for symmetry with GSO, which always writes one),
//!   verified; UDP length equal to the real length and larger than the header.
//! * Same flow: both ports.
//! * Flush: a datagram larger than the run's first ends the run and starts a new
//!   one; after merging, a shorter one (the last of a train) or the segment limit
//!   flushes the run.
//! * Fix-up: UDP length of the merged datagram; the checksum field holds the folded
//!   pseudo-header sum over it, with the frame marked
//!   `Checksum::Partial { start: <UDP header>, offset: 6 }` and `GsoType::UdpL4`.

use super::FlushReason;
use super::bytes::{self, hdr16, hdr32};
use super::view::View;
use linerate_wire::checksum;
use linerate_wire::layout::Headers;
use linerate_wire::udp::field;

/// The UDP header.
pub(super) type Hdr = [u8; 8];

/// The header at `h.l4_offset` in `b`, if it lies there.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], h: &Headers) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(h.l4_offset))
}

/// The UDP length field.
#[inline]
fn ulen(u: &Hdr) -> u16 {
    hdr16!(u, field::LENGTH.start)
}

/// The packet-level checks, for a datagram that really is `len` bytes long (to the
/// end of the frame).
#[inline]
pub(super) fn check(u: &Hdr, len: usize) -> Result<(), FlushReason> {
    if hdr16!(u, field::CHECKSUM.start) == 0 {
        return Err(FlushReason::UdpCsumZero);
    }
    let ulen = usize::from(ulen(u));
    if ulen != len || ulen <= 8 {
        return Err(FlushReason::Length);
    }
    Ok(())
}

/// Verifies the checksum of the datagram at `h` (to the end of `b`) in software,
/// with the pseudo-header sum `pseudo`.
#[inline]
pub(super) fn verify(v: &View<'_>, h: &Headers, pseudo: u32) -> Result<(), FlushReason> {
    if checksum::fold(v.sum_from(usize::from(h.l4_offset), pseudo)) == 0xffff {
        Ok(())
    } else {
        Err(FlushReason::CsumBad)
    }
}

/// Same flow if both ports are equal.
#[inline]
pub(super) fn same_flow(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if hdr32!(p, 0) == hdr32!(h, 0) {
        Ok(())
    } else {
        Err(FlushReason::Tuple)
    }
}

/// The flush rule against the run's first datagram `h` (whose length field is
/// still the first datagram's: it is only rewritten at completion).
#[inline]
pub(super) fn must_flush(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if ulen(p) > ulen(h) {
        Err(FlushReason::OverMss)
    } else {
        Ok(())
    }
}

/// After the datagram `p` joined the run `h`: a shorter one than the first ends it.
#[inline]
pub(super) fn after_merge(p: &Hdr, h: &Hdr) -> Option<FlushReason> {
    (ulen(p) < ulen(h)).then_some(FlushReason::Short)
}

/// Sets the UDP length to `len` and writes the folded pseudo-header sum `pseudo`
/// (over that length) into the checksum field.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &Headers, len: u16, pseudo: u32) {
    let l4 = usize::from(h.l4_offset);
    bytes::put16(b, l4 + field::LENGTH.start, len);
    bytes::put16(b, l4 + field::CHECKSUM.start, checksum::fold(pseudo));
}
