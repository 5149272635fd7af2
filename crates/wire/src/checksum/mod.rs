//! The Internet checksum (RFC 1071), its incremental update (RFC 1624), and the
//! IPv4 / IPv6 pseudo-header sums (RFC 768, RFC 9293 section 3.1, RFC 8200 section 8.1).
//!
//! Sums are carried as an unfolded 32-bit one's-complement accumulator, like Linux's
//! `__wsum`: [`partial`] adds a buffer to it, [`fold`] reduces it to 16 bits and
//! [`finish`] complements that into the value a header carries. One's-complement
//! addition is associative and commutative, so partial sums of pieces combine with
//! [`combine`], provided every piece but the last has an even length (a piece that
//! starts at an odd offset of the whole must be shifted with [`shift_odd`]).
//!
//! ```
//! use linerate_wire::checksum;
//! // RFC 1071 section 3 example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
//! let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
//! assert_eq!(checksum::fold(checksum::partial(&data, 0)), 0xddf2);
//! assert_eq!(checksum::checksum(&data), !0xddf2);
//! ```

/// Adds `data`, read as big-endian 16-bit words (a trailing odd byte is padded with
/// zero), to the running sum `initial`, and returns the new unfolded sum.
#[inline]
pub fn partial(data: &[u8], initial: u32) -> u32 {
    combine(initial, portable_sum(data))
}

/// Adds two unfolded sums with end-around carry.
#[inline]
pub const fn combine(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    s.wrapping_add(carry as u32)
}

/// Adjusts the sum of a piece that starts at an odd byte offset of the data being
/// summed, so it can be [`combine`]d with the sums of the pieces before it.
#[inline]
pub const fn shift_odd(sum: u32) -> u32 {
    let f = fold(sum);
    f.swap_bytes() as u32
}

/// Folds an unfolded sum to 16 bits (not complemented).
#[inline]
pub const fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// Folds and complements: the value to write into a checksum field.
#[inline]
pub const fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// The checksum field value for `data` alone.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    finish(partial(data, 0))
}

/// True if `data`, whose checksum field is filled in, sums (with `initial`, for
/// example a pseudo-header sum) to all ones.
#[inline]
pub fn verify(data: &[u8], initial: u32) -> bool {
    fold(partial(data, initial)) == 0xffff
}

/// The IPv4 pseudo-header sum (source, destination, zero, protocol, L4 length).
#[inline]
pub fn pseudo_ipv4(src: [u8; 4], dst: [u8; 4], protocol: u8, l4_len: u16) -> u32 {
    let s = u32::from(u16::from_be_bytes([src[0], src[1]]))
        + u32::from(u16::from_be_bytes([src[2], src[3]]))
        + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
        + u32::from(u16::from_be_bytes([dst[2], dst[3]]))
        + u32::from(protocol)
        + u32::from(l4_len);
    s
}

/// The IPv6 pseudo-header sum (source, destination, 32-bit upper-layer length,
/// zero, next header).
#[inline]
pub fn pseudo_ipv6(src: &[u8; 16], dst: &[u8; 16], next_header: u8, l4_len: u32) -> u32 {
    let mut s = partial(src, 0);
    s = partial(dst, s);
    s = combine(s, l4_len >> 16);
    s = combine(s, l4_len & 0xffff);
    combine(s, u32::from(next_header))
}

/// RFC 1624 equation 3: the new checksum field after one 16-bit word of the covered
/// data changed from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub const fn update16(check: u16, old: u16, new: u16) -> u16 {
    let s = combine(combine((!check) as u32, (!old) as u32), new as u32);
    !fold(s)
}

/// [`update16`] for an aligned 32-bit field (an address, a sequence number).
#[inline]
pub const fn update32(check: u16, old: u32, new: u32) -> u16 {
    let c = update16(check, (old >> 16) as u16, (new >> 16) as u16);
    update16(c, old as u16, new as u16)
}

fn portable_sum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        acc += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u64::from(*last) << 8;
    }
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    acc as u32
}
