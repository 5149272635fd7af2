//! IPv6: Linux `ipv6_gro_receive` (packet checks, same flow) and `ipv6_gro_flush`
//! (the rules that end a run), `ipv6_gro_complete` (the fix-up); REFERENCE.md "GRO".
//!
//! * Packet: payload length equal to the real length; no fragment header.
//! * Same flow: version and flow label, addresses, next header and the extension
//!   headers byte for byte.
//! * Flush: traffic class or hop limit differ.
//! * Fix-up: payload length of the merged packet.

use super::FlushReason;
use super::bytes::{self, hdr16, hdr32};
use linerate_wire::checksum;
use linerate_wire::ipv6::field;
use linerate_wire::layout::{Fragment, Headers};

/// The fixed IPv6 header.
pub(super) type Hdr = [u8; 40];

/// The fixed header at `h` in `b`, if it lies there.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], h: &Headers) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(h.l3_offset))
}

/// The extension headers of the packet at `h` in `b` (empty if none).
#[inline]
pub(super) fn ext<'a>(b: &'a [u8], h: &Headers) -> &'a [u8] {
    bytes::range(b, usize::from(h.l3_offset) + 40, usize::from(h.l4_offset))
}

/// The packet-level checks, for a header whose packet really is `len` bytes long
/// (to the end of the frame) and whose fragment state the layout gives as `frag`.
#[inline]
pub(super) fn check(ip: &Hdr, frag: Fragment, len: usize) -> Result<(), FlushReason> {
    if frag != Fragment::None {
        return Err(FlushReason::Fragment);
    }
    if usize::from(hdr16!(ip, field::LENGTH.start)) + 40 != len {
        return Err(FlushReason::Length);
    }
    Ok(())
}

/// Same flow if version and flow label, addresses, next header and extension
/// headers (`pext`, `hext`) are equal.
#[inline]
pub(super) fn same_flow(p: &Hdr, pext: &[u8], h: &Hdr, hext: &[u8]) -> Result<(), FlushReason> {
    if (hdr32!(p, 0) ^ hdr32!(h, 0)) & 0xf00f_ffff != 0 {
        return Err(FlushReason::FlowLabel);
    }
    if !bytes::eq(&p[8..40], &h[8..40]) {
        return Err(FlushReason::Tuple);
    }
    if p[field::NXT_HDR] != h[field::NXT_HDR] || !bytes::eq(pext, hext) {
        return Err(FlushReason::Ipv6Ext);
    }
    Ok(())
}

/// The flush rules against the run's first header `h`.
#[inline]
pub(super) fn must_flush(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if (hdr32!(p, 0) ^ hdr32!(h, 0)) & 0x0ff0_0000 != 0 {
        return Err(FlushReason::TrafficClass);
    }
    if p[field::HOP_LIMIT] != h[field::HOP_LIMIT] {
        return Err(FlushReason::HopLimit);
    }
    Ok(())
}

/// The pseudo-header sum for a transport header of `l4_len` bytes (RFC 8200
/// section 8.1).
#[inline]
pub(super) fn pseudo(ip: &Hdr, next_header: u8, l4_len: u16) -> u32 {
    checksum::combine(
        checksum::partial(&ip[8..40], 0),
        u32::from(l4_len) + u32::from(next_header),
    )
}

/// Sets the payload length so the packet ends at `total` bytes from its header.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &mut Headers, total: u16) {
    let l3 = usize::from(h.l3_offset);
    bytes::put16(b, l3 + field::LENGTH.start, total.saturating_sub(40));
    h.l3_len = u32::from(total);
}
