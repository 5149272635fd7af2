//! ICMP for IPv4 (RFC 792; fragmentation needed with the next-hop MTU per RFC 1191
//! section 4) and for IPv6 (RFC 4443), with IPv6 Neighbor Discovery's solicitation
//! and advertisement (RFC 4861 sections 4.3, 4.4 and 4.6.1).
//!
//! * [`v4::Packet`] and [`v6::Packet`]: checked views over the 8-byte header and the
//!   body (echo data, or the invoking packet of an error), with checksum fill and
//!   verify (no pseudo-header for ICMPv4, RFC 4443 section 2.3's for ICMPv6).
//! * [`ndp::Neighbor`]: a view over NS / NA, target address, R/S/O flags and the
//!   link-layer address options, validated once.
//! * Builders that write a complete message, checksum filled, into a caller buffer:
//!   echo request / reply, destination unreachable (with fragmentation needed),
//!   time exceeded, packet too big, NS and NA.
//!
//! The view's buffer is the whole ICMP message (the IP payload), since the checksum
//! covers all of it. The owned values are etherparse's [`etherparse::Icmpv4Header`]
//! / [`etherparse::Icmpv4Type`] and [`etherparse::Icmpv6Header`] /
//! [`etherparse::Icmpv6Type`]; `header()` converts, and `v4::emit` / `v6::emit` write
//! any of them.

pub mod ndp;
pub mod v4;
pub mod v6;

use crate::error::{Error, Layer, Result};

/// Length of the ICMP header (type, code, checksum, 4 type-specific bytes), the
/// same for both versions.
pub const HEADER_LEN: usize = 8;

/// Copies `head` then `body` to the start of `buf` and returns the length, or
/// [`Error::BufferTooSmall`] without writing.
fn put(layer: Layer, buf: &mut [u8], head: &[u8], body: &[u8]) -> Result<usize> {
    let len = head.len() + body.len();
    let have = buf.len();
    let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall {
        layer,
        need: len,
        have,
    })?;
    let (h, b) = out.split_at_mut(head.len());
    h.copy_from_slice(head);
    b.copy_from_slice(body);
    Ok(len)
}

/// Big-endian u16 at `at` in a buffer already checked to hold it.
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The 4 type-specific bytes (5 to 8) of a header already checked to hold them.
fn rest_of_header(b: &[u8]) -> [u8; 4] {
    [b[4], b[5], b[6], b[7]]
}
