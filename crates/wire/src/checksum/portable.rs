//! The portable kernel: safe Rust, a word at a time.
//!
//! Bytes are read as little-endian words and the caller swaps the folded result into
//! network order (RFC 1071 section 2(B)). Two loops, because no one loop is fastest
//! at both ends:
//!
//! * [`short`], for inputs below [`WIDE_FROM`] bytes and for the tail of longer ones:
//!   64-bit words added with end-around carry into four chains (`add`/`adc` pairs).
//!   Nothing to set up or reduce, so a 20-byte header costs a few nanoseconds.
//! * [`wide`], for the bulk of longer inputs: 32-bit words widened into four 64-bit
//!   accumulators. There is no carry to propagate, so the loop vectorises (even on
//!   baseline x86_64 SSE2) and runs about twice as fast as the carry chains, but it
//!   has set-up and reduction costs that only pay off on a few hundred bytes.
//!
//! A 32-bit word is `lo + hi * 2^16` and `2^16 = 1 (mod 2^16 - 1)`, and likewise for
//! 64-bit words, so sums of wider words are congruent to the 16-bit word sum.

use super::add64;

/// Inputs at least this long go through [`wide`] first.
const WIDE_FROM: usize = 256;

/// Bytes per iteration of the [`wide`] loop: eight 32-bit words, two per accumulator.
const CHUNK: usize = 32;

/// Bytes [`wide`] sums before it folds its accumulators into the total. Each iteration
/// adds at most `2 * (2^32 - 1) < 2^33` to an accumulator, so `2^30 / 32 = 2^25`
/// iterations add less than `2^58`: no accumulator can overflow, whatever the length
/// of the input.
pub(super) const BLOCK: usize = 1 << 30;

/// The one's-complement sum of `data` read as little-endian 16-bit words (a trailing
/// odd byte is the low byte of a last word whose high byte is zero). The result is
/// congruent to that sum modulo `2^16 - 1` and is zero only if every byte is zero.
#[inline]
pub(super) fn sum(data: &[u8]) -> u64 {
    if data.len() < WIDE_FROM {
        return short(data);
    }
    let (bulk, tail) = data.split_at(data.len() - data.len() % CHUNK);
    add64(wide(bulk), short(tail))
}

/// [`sum`] by four chains of 64-bit adds with end-around carry.
#[inline]
fn short(data: &[u8]) -> u64 {
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    let mut rest = data;
    while let Some((c, tail)) = rest.split_first_chunk::<32>() {
        let [w0, w1, w2, w3] = split4(c);
        a0 = add64(a0, w0);
        a1 = add64(a1, w1);
        a2 = add64(a2, w2);
        a3 = add64(a3, w3);
        rest = tail;
    }
    // Fewer than 32 bytes left: 8-byte words, then 4, 2 and 1 bytes. A trailing odd
    // byte is the low byte of its little-endian word.
    while let Some((w, tail)) = rest.split_first_chunk::<8>() {
        a0 = add64(a0, u64::from_le_bytes(*w));
        rest = tail;
    }
    if let Some((w, tail)) = rest.split_first_chunk::<4>() {
        a1 = add64(a1, u64::from(u32::from_le_bytes(*w)));
        rest = tail;
    }
    if let Some((w, tail)) = rest.split_first_chunk::<2>() {
        a2 = add64(a2, u64::from(u16::from_le_bytes(*w)));
        rest = tail;
    }
    if let [b] = rest {
        a3 = add64(a3, u64::from(*b));
    }
    add64(add64(a0, a1), add64(a2, a3))
}

/// The four little-endian 64-bit words of a 32-byte chunk.
#[inline(always)]
fn split4(c: &[u8; 32]) -> [u64; 4] {
    let [a, b, c, d, e, f, g, h, rest @ ..] = *c;
    let [i, j, k, l, m, n, o, p, rest @ ..] = rest;
    let [q, r, s, t, u, v, w, x, rest @ ..] = rest;
    let [y, z, aa, ab, ac, ad, ae, af] = rest;
    [
        u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        u64::from_le_bytes([i, j, k, l, m, n, o, p]),
        u64::from_le_bytes([q, r, s, t, u, v, w, x]),
        u64::from_le_bytes([y, z, aa, ab, ac, ad, ae, af]),
    ]
}

/// [`sum`] of a whole number of [`CHUNK`]s by 32-bit words into 64-bit accumulators.
#[inline]
fn wide(data: &[u8]) -> u64 {
    data.chunks(BLOCK)
        .fold(0, |total, block| add64(total, wide_block(block)))
}

/// [`wide`] for at most [`BLOCK`] bytes.
#[inline]
fn wide_block(data: &[u8]) -> u64 {
    let (mut a0, mut a1, mut a2, mut a3) = (0u64, 0u64, 0u64, 0u64);
    let mut rest = data;
    while let Some((c, tail)) = rest.split_first_chunk::<CHUNK>() {
        a0 += word::<0>(c) + word::<16>(c);
        a1 += word::<4>(c) + word::<20>(c);
        a2 += word::<8>(c) + word::<24>(c);
        a3 += word::<12>(c) + word::<28>(c);
        rest = tail;
    }
    // Each accumulator is below 2^58 (see BLOCK), so these sums cannot overflow.
    a0 + a1 + a2 + a3
}

/// The little-endian 32-bit word at byte `I` of a chunk, widened.
#[inline(always)]
fn word<const I: usize>(c: &[u8; CHUNK]) -> u64 {
    const { assert!(I + 4 <= CHUNK) };
    u64::from(u32::from_le_bytes([c[I], c[I + 1], c[I + 2], c[I + 3]]))
}
