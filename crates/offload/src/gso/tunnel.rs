//! The GRE header of an NVGRE tunnel in each segment (RFC 2784, RFC 2890, RFC 7637;
//! Linux `gre_gso_segment`).
//!
//! GRE has no length field: the outer IP header carries it. When the header has a
//! checksum (C), it is recomputed per segment over the GRE header and everything
//! after it (RFC 2784 section 2.5), from the sum of the header taken once per
//! super-frame and the sum handed up by the inner layers. The key (VSID and
//! FlowID) and sequence number are copied. VXLAN and GENEVE headers need no
//! fix-up: they are copied as they are (see the plan), and their UDP header is
//! [`super::udp`]'s.

use super::plan::Encap;
use crate::csum::put16;
use linerate_wire::checksum;
use linerate_wire::gre;
use linerate_wire::layout::{Headers, Tunnel};

/// A GRE header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(in crate::gso) struct Gre {
    /// Offset of the header in the segment.
    off: usize,
    /// Sum of the header without the checksum field.
    base: u32,
    /// The header has a checksum (C).
    csum: bool,
}

impl Gre {
    #[inline]
    pub(super) fn fix(&self, hdr: &mut [u8], below: u32) -> u32 {
        if !self.csum {
            return checksum::combine(self.base, below);
        }
        let c = checksum::finish(checksum::combine(self.base, below));
        put16(hdr, self.off + gre::field::OPTIONAL, c);
        checksum::combine(checksum::combine(self.base, u32::from(c)), below)
    }
}

/// The layer for the GRE header of `outer` (whose checksum flag the layout read);
/// `None` if `want_csum` and the header has no checksum.
pub(super) fn gre(
    frame: &[u8],
    outer: &Headers,
    tunnel: &Tunnel,
    want_csum: bool,
) -> Option<Encap> {
    let csum = tunnel.flags.gre_csum;
    if want_csum && !csum {
        return None;
    }
    let (l4, end) = (usize::from(outer.l4_offset), usize::from(outer.payload));
    let part =
        |from: usize, to: usize| checksum::partial(frame.get(from..to).unwrap_or_default(), 0);
    let at = l4 + gre::field::OPTIONAL;
    let base = if csum {
        checksum::combine(part(l4, at), part(at + 2, end))
    } else {
        part(l4, end)
    };
    Some(Encap::Gre(Gre {
        off: l4,
        base,
        csum,
    }))
}
