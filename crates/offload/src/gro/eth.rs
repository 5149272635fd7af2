//! Ethernet (and 802.1Q/802.1ad tags): the "same flow" rule of Linux
//! `dev_gro_receive` (`compare_ether_header`) and `vlan_gro_receive`, for the outer
//! frame and for the inner frame of a tunnel (`eth_gro_receive`).
//!
//! The whole MAC header, tags included, must be byte-equal; Ethernet has nothing to
//! flush on and nothing to fix up.

use super::FlushReason;
use super::bytes;
use linerate_wire::layout::Headers;

/// The Ethernet header: destination, source, EtherType (or the first tag's TPID).
pub(super) type Hdr = [u8; 14];

/// A MAC header: the fixed part, and the VLAN tags after it (empty if none).
#[derive(Debug, Clone, Copy)]
pub(super) struct Mac<'a> {
    /// Destination, source and the first EtherType / TPID.
    pub(super) base: &'a Hdr,
    /// The tags and final EtherType that follow, when tagged.
    pub(super) tags: &'a [u8],
}

/// The MAC header of `h` in `b`.
#[inline(always)]
pub(super) fn header<'a>(b: &'a [u8], h: &Headers) -> Option<Mac<'a>> {
    let l2 = usize::from(h.l2);
    let tags = if h.vlan_tags == 0 {
        &[][..]
    } else {
        bytes::range(b, l2 + 14, usize::from(h.l3_offset))
    };
    Some(Mac {
        base: bytes::array(b, l2)?,
        tags,
    })
}

/// Same flow if the MAC headers (addresses, VLAN tags, EtherType) are equal.
#[inline(always)]
pub(super) fn same_flow(p: &Mac<'_>, h: &Mac<'_>) -> Result<(), FlushReason> {
    // Two overlapping 8-byte words cover the 14 bytes.
    let word = |x: &Hdr, at: usize| bytes::be64(x, at);
    if word(p.base, 0) == word(h.base, 0)
        && word(p.base, 6) == word(h.base, 6)
        && bytes::eq(p.tags, h.tags)
    {
        Ok(())
    } else {
        Err(FlushReason::L2)
    }
}
