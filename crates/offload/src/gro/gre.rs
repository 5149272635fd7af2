//! GRE and NVGRE (RFC 2784, RFC 2890, RFC 7637): Linux `gre_gro_receive` and
//! `gre_gro_complete`.
//!
//! * Packet: version 0 and no flags but K and C (no S: GSO could not re-create
//!   sequence numbers); a checksum (C) is verified (it is a checksum level of its
//!   own).
//! * Same flow: the flags and protocol word is equal, and so is the key (NVGRE:
//!   VSID and FlowID) when present.
//! * Fix-up: with C, the checksum field is zeroed: it covers the whole merged
//!   payload and GSO recomputes it per segment (`GsoTunnel::Gre { csum: true }`).
//!   Linux leaves the first segment's stale value there; zero says plainly that
//!   it is not valid.

use super::FlushReason;
use super::bytes;
use super::view::View;
use linerate_wire::checksum;
use linerate_wire::gre::{FLAG_C, FLAG_K, field};
use linerate_wire::layout::Tunnel;

/// The whole GRE header of tunnel `t` in `b` (base header and optional words).
#[inline]
pub(super) fn header<'a>(b: &'a [u8], t: &Tunnel) -> &'a [u8] {
    bytes::slice(b, usize::from(t.offset), usize::from(t.len))
}

/// The flags and version word.
#[inline]
fn flags(g: &[u8]) -> u16 {
    bytes::be16(g, field::FLAGS_VERSION.start)
}

/// The packet-level checks.
#[inline]
pub(super) fn check(g: &[u8]) -> Result<(), FlushReason> {
    if flags(g) & !(FLAG_C | FLAG_K) != 0 {
        return Err(FlushReason::GreFlags);
    }
    Ok(())
}

/// True if the header carries a checksum (C).
#[inline]
pub(super) fn has_csum(g: &[u8]) -> bool {
    flags(g) & FLAG_C != 0
}

/// Verifies the checksum over the GRE header at `at` and its payload (to the end
/// of `b`).
#[inline]
pub(super) fn verify(v: &View<'_>, at: u16) -> Result<(), FlushReason> {
    if checksum::fold(v.sum_from(usize::from(at), 0)) == 0xffff {
        Ok(())
    } else {
        Err(FlushReason::GreCsum)
    }
}

/// Same flow if the flags and protocol words are equal and so are the keys (a
/// different VSID counts as [`FlushReason::Vni`], a different FlowID as
/// [`FlushReason::GreKey`]).
#[inline]
pub(super) fn same_flow(p: &[u8], h: &[u8]) -> Result<(), FlushReason> {
    let f = flags(p);
    if f != flags(h) {
        return Err(FlushReason::GreFlags);
    }
    if bytes::be16(p, field::PROTOCOL.start) != bytes::be16(h, field::PROTOCOL.start) {
        return Err(FlushReason::Tuple);
    }
    if f & FLAG_K != 0 {
        // The key follows the checksum word when C is set.
        let at = field::OPTIONAL + if f & FLAG_C != 0 { 4 } else { 0 };
        let (pk, hk) = (bytes::be32(p, at), bytes::be32(h, at));
        if pk != hk {
            return Err(if pk >> 8 != hk >> 8 {
                FlushReason::Vni
            } else {
                FlushReason::GreKey
            });
        }
    }
    Ok(())
}

/// Zeroes the checksum field of tunnel `t` if C is set (see the module docs).
#[inline]
pub(super) fn complete(b: &mut [u8], t: &Tunnel) {
    let at = usize::from(t.offset);
    if bytes::be16(b, at) & FLAG_C != 0 {
        bytes::put16(b, at + field::OPTIONAL, 0);
    }
}
