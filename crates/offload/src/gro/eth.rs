//! Ethernet (and 802.1Q/802.1ad tags): the "same flow" rule of Linux
//! `dev_gro_receive` (`compare_ether_header`) and `vlan_gro_receive`, for the outer
//! frame and for the inner frame of a tunnel (`eth_gro_receive`).
//!
//! The whole MAC header, tags included, must be byte-equal; Ethernet has nothing to
//! flush on and nothing to fix up.

use super::FlushReason;
use super::bytes;
use linerate_wire::layout::Headers;

/// The MAC header of `h` in `b`: addresses, tags, EtherType.
#[inline]
fn header<'a>(b: &'a [u8], h: &Headers) -> &'a [u8] {
    bytes::range(b, usize::from(h.l2), usize::from(h.l3_offset))
}

/// Same flow if the MAC headers (addresses, VLAN tags, EtherType) are equal.
#[inline]
pub(super) fn same_flow(p: &[u8], ph: &Headers, h: &[u8], hh: &Headers) -> Result<(), FlushReason> {
    if header(p, ph) == header(h, hh) {
        Ok(())
    } else {
        Err(FlushReason::L2)
    }
}
