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
use linerate_wire::checksum;
use linerate_wire::gre::{FLAG_C, FLAG_K, field};
use linerate_wire::layout::Tunnel;

/// The packet-level checks.
#[inline]
pub(super) fn check(b: &[u8], t: &Tunnel) -> Result<(), FlushReason> {
    if bytes::be16(b, usize::from(t.offset)) & !(FLAG_C | FLAG_K) != 0 {
        return Err(FlushReason::GreFlags);
    }
    Ok(())
}

/// True if the header carries a checksum (C).
#[inline]
pub(super) fn has_csum(b: &[u8], t: &Tunnel) -> bool {
    bytes::be16(b, usize::from(t.offset)) & FLAG_C != 0
}

/// Verifies the checksum over the GRE header and payload (to the end of `b`).
#[inline]
pub(super) fn verify(b: &[u8], t: &Tunnel) -> Result<(), FlushReason> {
    if checksum::verify(bytes::range(b, usize::from(t.offset), b.len()), 0) {
        Ok(())
    } else {
        Err(FlushReason::GreCsum)
    }
}

/// Same flow if the flags/protocol words are equal and so are the keys.
#[inline]
pub(super) fn same_flow(p: &[u8], pt: &Tunnel, h: &[u8], ht: &Tunnel) -> Result<(), FlushReason> {
    let (po, ho) = (usize::from(pt.offset), usize::from(ht.offset));
    let flags = bytes::be16(p, po);
    if flags != bytes::be16(h, ho) {
        return Err(FlushReason::GreFlags);
    }
    if bytes::be16(p, po + 2) != bytes::be16(h, ho + 2) {
        return Err(FlushReason::Tuple);
    }
    if flags & FLAG_K != 0 {
        // The key follows the checksum word when C is set.
        let key = field::OPTIONAL + if flags & FLAG_C != 0 { 4 } else { 0 };
        if bytes::be32(p, po + key) != bytes::be32(h, ho + key) {
            return Err(if pt.vni != ht.vni {
                FlushReason::Vni
            } else {
                FlushReason::GreKey
            });
        }
    }
    Ok(())
}

/// Zeroes the checksum field if C is set (see the module docs).
#[inline]
pub(super) fn complete(b: &mut [u8], t: &Tunnel) {
    if has_csum(b, t) {
        bytes::put16(b, usize::from(t.offset) + field::OPTIONAL, 0);
    }
}
