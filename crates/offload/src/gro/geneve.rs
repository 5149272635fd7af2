//! GENEVE (RFC 8926): Linux `geneve_gro_receive`.
//!
//! * Packet: version 0 and the O bit (control message) clear.
//! * Same flow: the whole header, options included, byte-equal (Linux compares
//!   `opt_len` and `memcmp`s the header); a different VNI is counted as such, any
//!   other difference as "options".
//!
//! Nothing to flush on or fix up; the outer UDP header is [`super::udp_tunnel`]'s.

use super::FlushReason;
use super::bytes;
use linerate_wire::geneve::{FLAG_OAM, field};
use linerate_wire::layout::Tunnel;

/// The packet-level checks.
#[inline]
pub(super) fn check(b: &[u8], t: &Tunnel) -> Result<(), FlushReason> {
    let at = usize::from(t.offset);
    if bytes::u8_at(b, at + field::VER_OPT_LEN) >> 6 != 0 {
        return Err(FlushReason::GeneveVersion);
    }
    if bytes::u8_at(b, at + field::FLAGS) & FLAG_OAM != 0 {
        return Err(FlushReason::GeneveOam);
    }
    Ok(())
}

/// Same flow if the headers, options included, are byte-equal.
#[inline]
pub(super) fn same_flow(p: &[u8], pt: &Tunnel, h: &[u8], ht: &Tunnel) -> Result<(), FlushReason> {
    if pt.vni != ht.vni {
        return Err(FlushReason::Vni);
    }
    let hdr = |b, t: &Tunnel| bytes::slice(b, usize::from(t.offset), usize::from(t.len));
    if hdr(p, pt) != hdr(h, ht) {
        return Err(FlushReason::GeneveOptions);
    }
    Ok(())
}
