//! VXLAN (RFC 7348): Linux `vxlan_gro_receive` / `vxlan_gro_prepare_receive`.
//!
//! Same flow: the flags word and the VNI word are equal. The header has nothing to
//! flush on or fix up; the outer UDP header is [`super::udp_tunnel`]'s, the inner
//! frame starts with [`super::eth`].

use super::FlushReason;
use super::bytes;
use linerate_wire::layout::Tunnel;

/// Same flow if the flags word (flags and reserved bits) and the VNI word (VNI and
/// the reserved byte) are equal.
#[inline]
pub(super) fn same_flow(p: &[u8], pt: &Tunnel, h: &[u8], ht: &Tunnel) -> Result<(), FlushReason> {
    let (po, ho) = (usize::from(pt.offset), usize::from(ht.offset));
    if bytes::be32(p, po) != bytes::be32(h, ho) {
        return Err(FlushReason::TunnelFlags);
    }
    if bytes::be32(p, po + 4) != bytes::be32(h, ho + 4) {
        return Err(FlushReason::Vni);
    }
    Ok(())
}
