//! The segmented TCP header (RFC 9293; Linux `tcp_gso_segment`).
//!
//! Per segment: the sequence number advances by the payload before it; FIN and PSH
//! stay only on the last segment, CWR only on the first (RFC 3168 section 6.1.2:
//! one CWR per window reduction); options are copied; the checksum is computed
//! from the unchanging header words (summed once per super-frame), the new
//! sequence number and flags, the payload sum and the pseudo-header, or left
//! partial (the pseudo-header sum in the field).

use super::CsumMode;
use super::plan::{Seg, Transport};
use crate::csum::{be16, be32, pseudo_addr_sum, put16, put32};
use linerate_wire::checksum;
use linerate_wire::layout::Headers;
use linerate_wire::tcp::{self, Flags};

/// Flags kept only on the last segment.
const LAST_ONLY: u16 = Flags::FIN.bits() | Flags::PSH.bits();
/// Flags kept only on the first segment.
const FIRST_ONLY: u16 = Flags::CWR.bits();

/// A TCP header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(in crate::gso) struct Tcp {
    /// Offset of the header in the segment.
    off: usize,
    /// Header bytes from this header to the end of all headers (its length).
    tail: usize,
    /// Sum of the header without sequence number, flags word and checksum.
    base: u32,
    /// The super-frame's sequence number.
    seq0: u32,
    /// The super-frame's data offset and flags word.
    flags0: u16,
    /// Pseudo-header sum of the addresses and the protocol.
    pseudo: u32,
    /// Leave the checksum partial.
    partial: bool,
}

impl Tcp {
    #[inline]
    pub(super) fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        let seq = self.seq0.wrapping_add(seg.offset);
        let mut fw = self.flags0;
        if !seg.last {
            fw &= !LAST_ONLY;
        }
        if !seg.first {
            fw &= !FIRST_ONLY;
        }
        let pseudo = checksum::combine(self.pseudo, (self.tail + seg.len) as u32);
        let off = self.off;
        put32(hdr, off + tcp::field::SEQ_NUM.start, seq);
        put16(hdr, off + tcp::field::FLAGS.start, fw);
        let c = if self.partial {
            checksum::fold(pseudo)
        } else {
            let words = (seq >> 16) + (seq & 0xffff) + u32::from(fw);
            let sum = checksum::combine(
                checksum::combine(self.base, words),
                checksum::combine(below, pseudo),
            );
            checksum::finish(sum)
        };
        put16(hdr, off + tcp::field::CHECKSUM.start, c);
        // Once complete, the segment sums to the complement of its pseudo-header
        // (Linux's local checksum offload): what an outer checksum adds for it.
        u32::from(!checksum::fold(pseudo))
    }
}

/// The layer for the TCP header of `h`, whose segments' headers end at `hdr_len`;
/// `None` if `h` is not IP.
pub(super) fn layer(
    frame: &[u8],
    h: &Headers,
    hdr_len: usize,
    mode: CsumMode,
) -> Option<Transport> {
    let l4 = usize::from(h.l4_offset);
    let part = |from: usize, to: usize| {
        checksum::partial(frame.get(l4 + from..l4 + to).unwrap_or_default(), 0)
    };
    let hlen = usize::from(h.payload).saturating_sub(l4);
    let base = checksum::combine(
        checksum::combine(
            part(tcp::field::SRC_PORT.start, tcp::field::SEQ_NUM.start),
            part(tcp::field::ACK_NUM.start, tcp::field::FLAGS.start),
        ),
        checksum::combine(
            part(tcp::field::WINDOW.start, tcp::field::CHECKSUM.start),
            part(tcp::field::URGENT.start, hlen),
        ),
    );
    let pseudo = pseudo_addr_sum(frame, h)?;
    Some(Transport::Tcp(Tcp {
        off: l4,
        tail: hdr_len.saturating_sub(l4),
        base,
        seq0: be32(frame, l4 + tcp::field::SEQ_NUM.start).unwrap_or(0),
        flags0: be16(frame, l4 + tcp::field::FLAGS.start).unwrap_or(0),
        pseudo: checksum::combine(pseudo, u32::from(h.protocol)),
        partial: mode == CsumMode::LeavePartial,
    }))
}
