//! IPv6: Linux `ipv6_gro_receive` (packet checks, same flow) and `ipv6_gro_flush`
//! (the rules that end a run), `ipv6_gro_complete` (the fix-up); REFERENCE.md "GRO".
//!
//! * Packet: payload length equal to the real length; no fragment header.
//! * Same flow: version and flow label, addresses, next header and the extension
//!   headers byte for byte.
//! * Flush: traffic class or hop limit differ.
//! * Fix-up: payload length of the merged packet.

use super::FlushReason;
use super::bytes;
use linerate_wire::checksum;
use linerate_wire::ipv6::field;
use linerate_wire::layout::{Fragment, Headers};

/// The packet-level checks, for the header `h` of a packet ending at `end`.
#[inline]
pub(super) fn check(b: &[u8], h: &Headers, end: usize) -> Result<(), FlushReason> {
    let l3 = usize::from(h.l3_offset);
    if h.frag != Fragment::None {
        return Err(FlushReason::Fragment);
    }
    if usize::from(bytes::be16(b, l3 + field::LENGTH.start)) + 40 != end.wrapping_sub(l3) {
        return Err(FlushReason::Length);
    }
    Ok(())
}

/// Same flow if version and flow label, addresses, next header and extension
/// headers are equal.
#[inline]
pub(super) fn same_flow(p: &[u8], ph: &Headers, h: &[u8], hh: &Headers) -> Result<(), FlushReason> {
    let (pl, hl) = (usize::from(ph.l3_offset), usize::from(hh.l3_offset));
    if (bytes::be32(p, pl) ^ bytes::be32(h, hl)) & 0xf00f_ffff != 0 {
        return Err(FlushReason::FlowLabel);
    }
    if bytes::slice(p, pl + field::SRC_ADDR.start, 32)
        != bytes::slice(h, hl + field::SRC_ADDR.start, 32)
    {
        return Err(FlushReason::Tuple);
    }
    let ext =
        |b, h: &Headers| bytes::range(b, usize::from(h.l3_offset) + 40, usize::from(h.l4_offset));
    if bytes::u8_at(p, pl + field::NXT_HDR) != bytes::u8_at(h, hl + field::NXT_HDR)
        || ext(p, ph) != ext(h, hh)
    {
        return Err(FlushReason::Ipv6Ext);
    }
    Ok(())
}

/// The flush rules against the run's first header `hh`.
#[inline]
pub(super) fn must_flush(
    p: &[u8],
    ph: &Headers,
    h: &[u8],
    hh: &Headers,
) -> Result<(), FlushReason> {
    let (pl, hl) = (usize::from(ph.l3_offset), usize::from(hh.l3_offset));
    if (bytes::be32(p, pl) ^ bytes::be32(h, hl)) & 0x0ff0_0000 != 0 {
        return Err(FlushReason::TrafficClass);
    }
    if bytes::u8_at(p, pl + field::HOP_LIMIT) != bytes::u8_at(h, hl + field::HOP_LIMIT) {
        return Err(FlushReason::HopLimit);
    }
    Ok(())
}

/// The pseudo-header sum of the transport header at `h` for `l4_len` bytes.
#[inline]
pub(super) fn pseudo(b: &[u8], h: &Headers, next_header: u8, l4_len: u16) -> u32 {
    let l3 = usize::from(h.l3_offset);
    let addrs = bytes::slice(b, l3 + field::SRC_ADDR.start, 32);
    checksum::combine(
        checksum::partial(addrs, 0),
        u32::from(l4_len) + u32::from(next_header),
    )
}

/// Sets the payload length so the packet ends at `total` bytes from its header.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &mut Headers, total: u16) {
    let l3 = usize::from(h.l3_offset);
    bytes::put16(b, l3 + field::LENGTH.start, total.saturating_sub(40));
    h.l3_len = total;
}
