//! The network layer of each segment: IPv4 (RFC 791; Linux `inet_gso_segment`) and
//! IPv6 (RFC 8200; Linux `ipv6_gso_segment`).
//!
//! IPv4: total length, identification (+1 per segment from the super-frame's,
//! wrapping, unless the ID is fixed: `SKB_GSO_TCP_FIXEDID`, RFC 6864 allows a
//! constant ID on atomic datagrams) and the header checksum, computed from the sum
//! of the unchanging header words taken once per super-frame. Options are copied.
//!
//! IPv6: the payload length (extension headers are copied and counted in it).

use super::GsoError;
use super::plan::{Net, Seg};
use crate::csum::{be16, put16};
use linerate_wire::layout::{Headers, L3Kind};
use linerate_wire::{Layer as WireLayer, checksum, ipv4, ipv6};

/// An IPv4 header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(in crate::gso) struct Ipv4 {
    /// Offset of the header in the segment.
    off: usize,
    /// Header bytes from this header to the end of all headers.
    tail: usize,
    /// Sum of the header without total length, identification and checksum.
    base: u32,
    /// The super-frame's identification.
    id0: u16,
    /// Keep the identification in every segment.
    fixed_id: bool,
}

impl Ipv4 {
    #[inline]
    pub(super) fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        // At most the super-frame's total length, which fitted 16 bits.
        let total = (self.tail + seg.len) as u16;
        let id = if self.fixed_id {
            self.id0
        } else {
            self.id0.wrapping_add(seg.index as u16)
        };
        let off = self.off;
        put16(hdr, off + ipv4::field::LENGTH.start, total);
        put16(hdr, off + ipv4::field::IDENT.start, id);
        let c = checksum::finish(checksum::combine(
            self.base,
            u32::from(total) + u32::from(id),
        ));
        put16(hdr, off + ipv4::field::CHECKSUM.start, c);
        // A header with a correct checksum sums to 0xffff, which adds nothing.
        below
    }
}

/// An IPv6 header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(in crate::gso) struct Ipv6 {
    /// Offset of the header in the segment.
    off: usize,
    /// Header bytes from this header to the end of all headers.
    tail: usize,
    /// Sum of the header and its extension headers without the payload length.
    base: u32,
}

impl Ipv6 {
    #[inline]
    pub(super) fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        // At most the super-frame's payload length, which fitted 16 bits.
        let len = (self.tail + seg.len).saturating_sub(ipv6::HEADER_LEN) as u16;
        put16(hdr, self.off + ipv6::field::LENGTH.start, len);
        checksum::combine(checksum::combine(self.base, u32::from(len)), below)
    }
}

/// The layer for the network header of `h`, whose segments' headers end at
/// `hdr_len`; `None` if `h` is not IP.
pub(super) fn layer(frame: &[u8], h: &Headers, hdr_len: usize, fixed_id: bool) -> Option<Net> {
    let (l3, l4) = (usize::from(h.l3_offset), usize::from(h.l4_offset));
    let part = |r: core::ops::Range<usize>| {
        checksum::partial(frame.get(l3 + r.start..l3 + r.end).unwrap_or_default(), 0)
    };
    let tail = hdr_len.saturating_sub(l3);
    let hlen = l4.saturating_sub(l3);
    match h.l3 {
        L3Kind::Ipv4 => {
            let base = checksum::combine(
                part(0..ipv4::field::LENGTH.start),
                checksum::combine(
                    part(ipv4::field::FLG_OFF.start..ipv4::field::CHECKSUM.start),
                    part(ipv4::field::SRC_ADDR.start..hlen),
                ),
            );
            Some(Net::V4(Ipv4 {
                off: l3,
                tail,
                base,
                id0: be16(frame, l3 + ipv4::field::IDENT.start).unwrap_or(0),
                fixed_id,
            }))
        }
        L3Kind::Ipv6 => {
            let base = checksum::combine(
                part(ipv6::field::VER_TC_FLOW),
                part(ipv6::field::NXT_HDR..hlen),
            );
            Some(Net::V6(Ipv6 {
                off: l3,
                tail,
                base,
            }))
        }
        _ => None,
    }
}

/// Checks that the IP packet of `h` ends exactly at `end` (the end of the frame, or
/// of the tunnel holding it).
pub(super) fn check_end(h: &Headers, end: usize) -> Result<(), GsoError> {
    if h.l3_end() == end {
        return Ok(());
    }
    let layer = match h.l3 {
        L3Kind::Ipv6 => WireLayer::Ipv6,
        _ => WireLayer::Ipv4,
    };
    Err(GsoError::LengthMismatch {
        layer,
        declared: h.l3_end(),
        actual: end,
    })
}
