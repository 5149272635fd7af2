//! The AVX-512 kernel (x86_64 with AVX-512 F, BW and VNNI): 64 bytes per vector,
//! two instructions per vector, loads always aligned.
//!
//! Each 16-bit word `w` (little-endian, at an even address) is biased to the
//! signed value `w - 2^15` by flipping its top bit (`vpxord`), and `vpdpwssd`
//! multiplies the biased words by one and adds each pair into a signed 32-bit
//! lane: `w0 + w1 - 2^16` per lane per vector. Every vector adds exactly
//! `-2^16` per lane of bias, whatever its mask (a masked-out word is zero, which
//! biases to `-2^15` like any other), so after `V` vectors adding `2^16 * V` to
//! the lanes gives the exact word sums back. As in the other kernels the words
//! are read little-endian and the caller swaps the folded result (RFC 1071
//! section 2(B)).
//!
//! Loads are aligned: the first and last vectors of a piece are loaded with
//! byte masks (`vmovdqu8` with a mask, AVX-512 BW), which read nothing outside
//! the piece (masked-out bytes are neither read nor able to fault), so a piece
//! is summed over the aligned 64-byte vectors that cover it, whatever its
//! address and length, with no scalar head or tail. Words are therefore
//! formed at even *addresses*; a piece that starts at an odd address has its
//! folded sum byte-swapped (RFC 1071 section 2(B)) to give the sum of its own
//! words.
//!
//! [`chunk_sums`] sums consecutive pieces of one buffer (the payloads of GSO
//! segments) in one pass: per piece, only its two edge vectors and a final
//! reduction are extra.
//!
//! Overflow bound: a lane changes by at most `2^16` per vector and starts at
//! zero, so it stays within `i32` for fewer than `2^15` vectors. A block of
//! [`BLOCK`] = 1 MiB is at most `2^14 + 1` vectors, all accumulators together;
//! the accumulators' sum per lane, unbiased, is a sum of at most `2 * (2^14 + 1)`
//! words, below `2^32`.

#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_and_si512, _mm512_dpwssd_epi32, _mm512_load_si512,
    _mm512_maskz_loadu_epi8, _mm512_reduce_add_epi32, _mm512_set1_epi16, _mm512_set1_epi32,
    _mm512_setzero_si512, _mm512_srli_epi32, _mm512_xor_si512,
};

use super::{add64, fold64, from_le_sum};

/// Most bytes summed by one round of the accumulators (see the module docs).
pub(super) const BLOCK: usize = 1 << 20;

/// True if this CPU runs the AVX-512 kernel (AVX-512 F, BW and VNNI). The
/// standard library caches the answer.
#[inline]
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

/// The little-endian word sum of `data`, with the contract of `portable::sum`,
/// or `None` if this CPU lacks the features.
#[inline]
pub(super) fn sum(data: &[u8]) -> Option<u64> {
    if !available() {
        return None;
    }
    // SAFETY: the CPU has AVX-512 F, BW and VNNI (checked just above), which is
    // `sum_512`'s only requirement.
    Some(unsafe { sum_512(data) })
}

/// The sums of `data` cut into pieces of `size` bytes (the last may be
/// shorter), as `super::partial_chunks` returns them, into `sums`; the number
/// of pieces summed, or `None` if this CPU lacks the features.
#[inline]
pub(super) fn chunk_sums(data: &[u8], size: usize, sums: &mut [u32]) -> Option<usize> {
    if !available() {
        return None;
    }
    // SAFETY: the CPU has AVX-512 F, BW and VNNI (checked just above), which is
    // `chunk_sums_512`'s only requirement.
    Some(unsafe { chunk_sums_512(data, size, sums) })
}

/// [`sum`] without the check.
///
/// # Safety
///
/// The CPU must support AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn sum_512(data: &[u8]) -> u64 {
    // Blocks of an even length: every block after the first starts at an even
    // offset, so their sums add as they are.
    data.chunks(BLOCK).fold(0, |total, block| {
        // SAFETY: the features are available (this function's contract).
        add64(total, unsafe { piece(block) })
    })
}

/// [`chunk_sums`] without the check.
///
/// # Safety
///
/// The CPU must support AVX-512 F, BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn chunk_sums_512(data: &[u8], size: usize, sums: &mut [u32]) -> usize {
    if size == 0 {
        return 0;
    }
    let mut n = 0;
    for (out, chunk) in sums.iter_mut().zip(data.chunks(size)) {
        let s = if chunk.len() <= BLOCK {
            // SAFETY: the features are available (this function's contract).
            unsafe { piece(chunk) }
        } else {
            // SAFETY: as above.
            unsafe { sum_512(chunk) }
        };
        *out = from_le_sum(s);
        n += 1;
    }
    n
}

/// The little-endian word sum of `data` (at most [`BLOCK`] bytes), as
/// `portable::sum` gives it.
///
/// # Safety
///
/// The CPU must support AVX-512 F, BW and VNNI.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn piece(data: &[u8]) -> u64 {
    debug_assert!(data.len() <= BLOCK);
    if data.is_empty() {
        return 0;
    }
    let start = data.as_ptr();
    let head = start as usize % 64;
    // The piece in the coordinates of the aligned vectors that cover it: it
    // occupies bytes `head..end` of vectors `0..vectors`.
    let end = head + data.len();
    let vectors = end.div_ceil(64);
    // The address of vector 0, which may lie before `data`: only masked loads
    // (which read nothing outside `data`) and the aligned loads of vectors that
    // lie wholly inside `data` go through it.
    let base = start.wrapping_sub(head).cast::<__m512i>();
    let head_mask = u64::MAX << head;
    let tail_bytes = end - (vectors - 1) * 64;
    let tail_mask = u64::MAX >> (64 - tail_bytes);
    // The whole body is one unsafe block so that it compiles both where the
    // arithmetic intrinsics are safe inside a `target_feature` function and where
    // they are not.
    // SAFETY: the features are available (this function's contract). Vector 0
    // and vector `vectors - 1` are loaded with masks that select only bytes
    // `head..end` (the bytes of `data`): masked-out bytes are not read and cannot
    // fault. The vectors between, `1..vectors - 1`, lie inside `head..end`
    // (`64 * v >= 64 > head` and `64 * (v + 1) <= 64 * (vectors - 1) < end`), so
    // their aligned loads read only bytes of `data` (the addresses are computed
    // with wrapping arithmetic, as `base` itself may lie outside `data`).
    unsafe {
        let bias = _mm512_set1_epi16(i16::MIN);
        let ones = _mm512_set1_epi16(1);
        let zero = _mm512_setzero_si512();
        let (mut a0, mut a1, mut a2, mut a3) = (zero, zero, zero, zero);
        if vectors == 1 {
            let x = _mm512_maskz_loadu_epi8(head_mask & tail_mask, base.cast::<i8>());
            a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(x, bias), ones);
        } else {
            let x = _mm512_maskz_loadu_epi8(head_mask, base.cast::<i8>());
            a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(x, bias), ones);
            let last = vectors - 1;
            let mut v = 1;
            while v + 4 <= last {
                let p = base.wrapping_add(v);
                let x0 = _mm512_load_si512(p);
                let x1 = _mm512_load_si512(p.wrapping_add(1));
                let x2 = _mm512_load_si512(p.wrapping_add(2));
                let x3 = _mm512_load_si512(p.wrapping_add(3));
                a0 = _mm512_dpwssd_epi32(a0, _mm512_xor_si512(x0, bias), ones);
                a1 = _mm512_dpwssd_epi32(a1, _mm512_xor_si512(x1, bias), ones);
                a2 = _mm512_dpwssd_epi32(a2, _mm512_xor_si512(x2, bias), ones);
                a3 = _mm512_dpwssd_epi32(a3, _mm512_xor_si512(x3, bias), ones);
                v += 4;
            }
            while v < last {
                let x = _mm512_load_si512(base.wrapping_add(v));
                a1 = _mm512_dpwssd_epi32(a1, _mm512_xor_si512(x, bias), ones);
                v += 1;
            }
            let x = _mm512_maskz_loadu_epi8(tail_mask, base.wrapping_add(last).cast::<i8>());
            a2 = _mm512_dpwssd_epi32(a2, _mm512_xor_si512(x, bias), ones);
        }
        // Each lane: the sum of its words minus 2^16 per vector (module docs);
        // no overflow below 2^15 vectors, and adding the bias back leaves the
        // exact word sum, below 2^32, read as unsigned from here on.
        let s = _mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3));
        let s = _mm512_add_epi32(s, _mm512_set1_epi32((vectors << 16) as i32));
        // Fold each lane to below 2^17 (congruent modulo 2^16 - 1, and zero only
        // if it was), so the sixteen lanes add without overflow.
        let lo = _mm512_and_si512(s, _mm512_set1_epi32(0xffff));
        let s = _mm512_add_epi32(lo, _mm512_srli_epi32::<16>(s));
        // Below 2^21: the cast reinterprets a non-negative value.
        let total = _mm512_reduce_add_epi32(s) as u32 as u64;
        if head % 2 == 1 {
            // The words were formed at even addresses, straddling the piece's own.
            u64::from(fold64(total).swap_bytes())
        } else {
            total
        }
    }
}
