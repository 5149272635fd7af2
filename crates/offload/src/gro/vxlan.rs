//! VXLAN (RFC 7348): Linux `vxlan_gro_receive` / `vxlan_gro_prepare_receive`.
//!
//! Same flow: the flags word and the VNI word are equal. The header has nothing to
//! flush on or fix up; the outer UDP header is [`super::udp_tunnel`]'s, the inner
//! frame starts with [`super::eth`].

use super::FlushReason;
use super::bytes::{self, hdr32};
use linerate_wire::layout::Tunnel;

/// The VXLAN header.
pub(super) type Hdr = [u8; 8];

/// The header of tunnel `t` in `b`.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], t: &Tunnel) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(t.offset))
}

/// Same flow if the flags word (flags and reserved bits) and the VNI word (VNI and
/// the reserved byte) are equal.
#[inline]
pub(super) fn same_flow(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if hdr32!(p, 0) != hdr32!(h, 0) {
        return Err(FlushReason::TunnelFlags);
    }
    if hdr32!(p, 4) != hdr32!(h, 4) {
        return Err(FlushReason::Vni);
    }
    Ok(())
}
