//! UDP headers in segments (RFC 768): the segmented datagrams of USO (Linux
//! `__udp_gso_segment`) and the outer header of a UDP tunnel (Linux
//! `skb_udp_tunnel_segment`, RFC 7348 section 5, RFC 8926 section 3.3).
//!
//! Both get their length rewritten per segment. The checksum covers the header,
//! everything after it and the pseudo-header; it is computed (a computed zero is
//! sent as `0xffff`), left partial (USO for a backend with checksum offload), or
//! zero (a tunnel without outer checksum: RFC 7348 says it should be zero over
//! IPv4; over IPv6 zero is kept only where the super-frame had it, RFC 6935).

use super::GsoError;
use super::plan::{Encap, Seg, Transport};
use crate::csum::{be16, mangle_zero, pseudo_addr_sum, put16};
use linerate_wire::layout::{Headers, L3Kind};
use linerate_wire::{Layer as WireLayer, checksum, ipv4, udp};

/// What to do with a UDP checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::gso) enum Csum {
    /// Compute it.
    Compute,
    /// Leave it partial: the pseudo-header sum in the field.
    LeavePartial,
    /// Write zero (no checksum).
    Zero,
}

/// A UDP header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(in crate::gso) struct Udp {
    /// Offset of the header in the segment.
    off: usize,
    /// Header bytes from this header to the end of all headers.
    tail: usize,
    /// Sum of the ports.
    base: u32,
    /// Pseudo-header sum of the addresses and the protocol.
    pseudo: u32,
    /// The checksum rule.
    csum: Csum,
}

impl Udp {
    #[inline]
    pub(super) fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        // At most the super-frame's UDP length, which fitted 16 bits.
        let len = (self.tail + seg.len) as u16;
        let off = self.off;
        put16(hdr, off + udp::field::LENGTH.start, len);
        let pseudo = checksum::combine(self.pseudo, u32::from(len));
        let c = match self.csum {
            Csum::Zero => {
                put16(hdr, off + udp::field::CHECKSUM.start, 0);
                let own = checksum::combine(self.base, u32::from(len));
                return checksum::combine(own, below);
            }
            Csum::LeavePartial => checksum::fold(pseudo),
            Csum::Compute => {
                let own = checksum::combine(self.base, u32::from(len));
                let sum = checksum::combine(checksum::combine(own, below), pseudo);
                mangle_zero(checksum::finish(sum))
            }
        };
        put16(hdr, off + udp::field::CHECKSUM.start, c);
        // Once complete, the datagram sums to the complement of its pseudo-header.
        u32::from(!checksum::fold(pseudo))
    }
}

fn new(frame: &[u8], h: &Headers, hdr_len: usize, csum: Csum) -> Option<Udp> {
    let l4 = usize::from(h.l4_offset);
    let ports = frame.get(l4..l4 + udp::field::LENGTH.start)?;
    Some(Udp {
        off: l4,
        tail: hdr_len.saturating_sub(l4),
        base: checksum::partial(ports, 0),
        pseudo: checksum::combine(pseudo_addr_sum(frame, h)?, u32::from(ipv4::protocol::UDP)),
        csum,
    })
}

/// Checks that the UDP length of `h` reaches exactly the end of its IP packet.
fn check_len(frame: &[u8], h: &Headers) -> Result<(), GsoError> {
    let l4 = usize::from(h.l4_offset);
    let len = usize::from(be16(frame, l4 + udp::field::LENGTH.start).unwrap_or(0));
    if l4 + len == h.l3_end() {
        return Ok(());
    }
    Err(GsoError::LengthMismatch {
        layer: WireLayer::Udp,
        declared: l4 + len,
        actual: h.l3_end(),
    })
}

/// The layer for the segmented UDP header of `h` (USO).
pub(super) fn segmented(
    frame: &[u8],
    h: &Headers,
    hdr_len: usize,
    csum: Csum,
) -> Result<Option<Transport>, GsoError> {
    check_len(frame, h)?;
    Ok(new(frame, h, hdr_len, csum).map(Transport::Udp))
}

/// The layer for the outer UDP header of a tunnel in `outer`; the checksum is
/// computed if `outer_csum`, or over IPv6 if the super-frame had one.
pub(super) fn tunnel(
    frame: &[u8],
    outer: &Headers,
    hdr_len: usize,
    outer_csum: bool,
) -> Result<Option<Encap>, GsoError> {
    check_len(frame, outer)?;
    let l4 = usize::from(outer.l4_offset);
    let had = be16(frame, l4 + udp::field::CHECKSUM.start).unwrap_or(0) != 0;
    let csum = if outer_csum || (outer.l3 == L3Kind::Ipv6 && had) {
        Csum::Compute
    } else {
        Csum::Zero
    };
    Ok(new(frame, outer, hdr_len, csum).map(Encap::Udp))
}
