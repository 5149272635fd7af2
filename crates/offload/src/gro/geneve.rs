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

/// The base GENEVE header (options follow it).
pub(super) type Hdr = [u8; 8];

/// The base header at the start of the whole header `g`.
#[inline]
pub(super) fn base(g: &[u8]) -> Option<&Hdr> {
    bytes::array(g, 0)
}

/// The whole header of tunnel `t` in `b`, options included.
#[inline]
pub(super) fn whole<'a>(b: &'a [u8], t: &Tunnel) -> &'a [u8] {
    bytes::slice(b, usize::from(t.offset), usize::from(t.len))
}

/// The packet-level checks.
#[inline]
pub(super) fn check(g: &Hdr) -> Result<(), FlushReason> {
    if g[field::VER_OPT_LEN] >> 6 != 0 {
        return Err(FlushReason::GeneveVersion);
    }
    if g[field::FLAGS] & FLAG_OAM != 0 {
        return Err(FlushReason::GeneveOam);
    }
    Ok(())
}

/// Same flow if the whole headers `p` and `h`, options included, are byte-equal.
#[inline]
pub(super) fn same_flow(p: &[u8], h: &[u8]) -> Result<(), FlushReason> {
    if !bytes::eq(
        bytes::slice(p, field::VNI.start, 3),
        bytes::slice(h, field::VNI.start, 3),
    ) {
        return Err(FlushReason::Vni);
    }
    if !bytes::eq(p, h) {
        return Err(FlushReason::GeneveOptions);
    }
    Ok(())
}
