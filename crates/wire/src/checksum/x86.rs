//! The AVX2 kernel (x86_64): 128 bytes per iteration in four 256-bit vectors.
//!
//! Each vector is split into the low and high 16-bit halves of its eight 32-bit lanes
//! (`and` with `0xffff`, logical shift right by 16), and the halves are added into
//! 32-bit lane accumulators: eight of them (a low and a high one for each of the four
//! vectors of an iteration), so the adds form eight independent chains. As in the
//! portable kernel the words are read little-endian and the caller swaps the folded
//! result (RFC 1071 section 2(B)). Loads are unaligned (`vmovdqu`), so any alignment
//! works; the last `len % 32` bytes go to the portable kernel.
//!
//! Overflow bound: an add puts at most `0xffff` into a 32-bit lane. The low and high
//! accumulators of the first vector get one add per 128-byte iteration plus at most
//! three from the 32-byte loop after it, the others one per iteration. A block of
//! [`BLOCK`] = 512 KiB is 4096 iterations, so the eight accumulators together hold at
//! most `(8 * 4096 + 6) * 0xffff < 2^32` per lane (about `2^31`: the block could double
//! but not quadruple): they are added in 32-bit lanes, widened to 64 bits once per
//! block, and added to the total.
//!
//! Buffers of [`ALIGN_FROM`] bytes or more are summed from the first 32-byte boundary
//! on, the bytes before it by the portable kernel: unaligned loads cost nothing while
//! the data is in L1, but a 64 KiB buffer (in L2) sums about a fifth slower from an odd
//! address. If that head has odd length, the rest of the buffer starts at an odd offset
//! and its sum is byte-swapped before it is added (RFC 1071 section 2(B)).

#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m256i, _mm_add_epi64, _mm_cvtsi128_si64, _mm_extract_epi64, _mm256_add_epi32,
    _mm256_add_epi64, _mm256_and_si256, _mm256_castsi256_si128, _mm256_extracti128_si256,
    _mm256_loadu_si256, _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setzero_si256,
    _mm256_srli_epi32, _mm256_srli_epi64, _mm256_storeu_si256,
};

use super::{add64, fold64, portable};

/// Bytes summed before the lane accumulators are widened (see the module docs).
pub(super) const BLOCK: usize = 1 << 19;

/// Buffers at least this long are summed from a 32-byte boundary (see the module docs).
pub(super) const ALIGN_FROM: usize = 1024;

/// True if this CPU runs the AVX2 kernel. The standard library caches the answer.
#[inline]
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// The little-endian word sum of `data`, with the contract of `portable::sum`, or
/// `None` if this CPU lacks AVX2.
#[inline]
pub(super) fn sum(data: &[u8]) -> Option<u64> {
    if !available() {
        return None;
    }
    // SAFETY: AVX2 is available (checked just above), which is `sum_avx2`'s only
    // requirement.
    Some(unsafe { sum_avx2(data) })
}

/// [`sum`] without the check: aligns long buffers, then [`sum_unaligned`].
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2(data: &[u8]) -> u64 {
    if data.len() < ALIGN_FROM {
        // SAFETY: AVX2 is available (this function's contract).
        return unsafe { sum_unaligned(data) };
    }
    let head_len = data.as_ptr().align_offset(32).min(data.len());
    let (head, body) = data.split_at(head_len);
    // SAFETY: as above.
    let body_sum = unsafe { sum_unaligned(body) };
    let body_sum = if head_len % 2 == 1 {
        // The body starts at an odd offset: its little-endian words straddle the
        // words of the whole buffer, and its folded sum is byte-swapped.
        u64::from(fold64(body_sum).swap_bytes())
    } else {
        body_sum
    };
    add64(portable::sum(head), body_sum)
}

/// [`sum_avx2`] with no alignment step.
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn sum_unaligned(data: &[u8]) -> u64 {
    let mut total = 0u64;
    let mut rest = data;
    while rest.len() >= 32 {
        let take = rest.len().min(BLOCK) & !31;
        let (block, tail) = rest.split_at(take);
        // SAFETY: AVX2 is available (this function's contract); `block` is a whole
        // number of 32-byte vectors, at most `BLOCK` bytes long.
        total = add64(total, unsafe { sum_block(block) });
        rest = tail;
    }
    if rest.is_empty() {
        total
    } else {
        add64(total, portable::sum(rest))
    }
}

/// The sum of `block`, whose length is a multiple of 32 and at most [`BLOCK`].
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn sum_block(block: &[u8]) -> u64 {
    debug_assert!(block.len().is_multiple_of(32) && block.len() <= BLOCK);
    let big = block.chunks_exact(128);
    let small = big.remainder();
    // The whole body is one unsafe block so that it compiles both where the
    // arithmetic intrinsics are safe inside an AVX2 function (Rust 1.87 and later) and
    // where they are not (the workspace's rust-version).
    // SAFETY: every load reads 32 bytes at `p + k * 32` from a chunk of at least
    // `(k + 1) * 32` bytes (`chunks_exact(128)` gives 128, `chunks_exact(32)` gives 32),
    // so it stays inside `block`, and `loadu` has no alignment requirement. AVX2 is
    // available (this function's contract).
    unsafe {
        let mask = _mm256_set1_epi32(0xffff);
        let zero = _mm256_setzero_si256();
        let (mut l0, mut l1, mut l2, mut l3) = (zero, zero, zero, zero);
        let (mut h0, mut h1, mut h2, mut h3) = (zero, zero, zero, zero);
        for c in big {
            let p = c.as_ptr().cast::<__m256i>();
            let v0 = _mm256_loadu_si256(p);
            let v1 = _mm256_loadu_si256(p.add(1));
            let v2 = _mm256_loadu_si256(p.add(2));
            let v3 = _mm256_loadu_si256(p.add(3));
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(v0, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(v0));
            l1 = _mm256_add_epi32(l1, _mm256_and_si256(v1, mask));
            h1 = _mm256_add_epi32(h1, _mm256_srli_epi32::<16>(v1));
            l2 = _mm256_add_epi32(l2, _mm256_and_si256(v2, mask));
            h2 = _mm256_add_epi32(h2, _mm256_srli_epi32::<16>(v2));
            l3 = _mm256_add_epi32(l3, _mm256_and_si256(v3, mask));
            h3 = _mm256_add_epi32(h3, _mm256_srli_epi32::<16>(v3));
        }
        for c in small.chunks_exact(32) {
            let v = _mm256_loadu_si256(c.as_ptr().cast::<__m256i>());
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(v, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(v));
        }
        // Below 2^32 per lane (module docs), so these 32-bit adds cannot overflow.
        let l = _mm256_add_epi32(_mm256_add_epi32(l0, l1), _mm256_add_epi32(l2, l3));
        let h = _mm256_add_epi32(_mm256_add_epi32(h0, h1), _mm256_add_epi32(h2, h3));
        let s = _mm256_add_epi32(l, h);
        // Widen to 64-bit lanes: each is the sum of two 32-bit lanes.
        let mask32 = _mm256_set1_epi64x(0xffff_ffff);
        let s = _mm256_add_epi64(_mm256_and_si256(s, mask32), _mm256_srli_epi64::<32>(s));
        // Horizontal sum in registers (a wide store read back as four `u64`s would
        // stall store-to-load forwarding).
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        // Each lane is below 2^34: no overflow. The casts reinterpret the bits.
        _mm_cvtsi128_si64(s) as u64 + _mm_extract_epi64::<1>(s) as u64
    }
}

/// Copies `src` into the front of `dst` and returns the little-endian word sum of
/// `src` (the contract of `portable::sum`), or `None` if this CPU lacks AVX2 or
/// `dst` is shorter than `src`. One pass over the data: each vector loaded is
/// stored and summed.
#[inline]
pub(super) fn copy_sum(dst: &mut [u8], src: &[u8]) -> Option<u64> {
    if !available() {
        return None;
    }
    let dst = dst.get_mut(..src.len())?;
    // SAFETY: AVX2 is available (checked just above), and `dst` is exactly as long
    // as `src`, `copy_sum_avx2`'s requirements.
    Some(unsafe { copy_sum_avx2(dst, src) })
}

/// [`copy_sum`] without the checks.
///
/// # Safety
///
/// The CPU must support AVX2; `dst.len() == src.len()`.
#[target_feature(enable = "avx2")]
unsafe fn copy_sum_avx2(dst: &mut [u8], src: &[u8]) -> u64 {
    let mut total = 0u64;
    let (mut src, mut dst) = (src, dst);
    while src.len() >= 32 {
        let take = src.len().min(BLOCK) & !31;
        let (block, tail) = src.split_at(take);
        let (out, out_tail) = dst.split_at_mut(take);
        // SAFETY: AVX2 is available and `out` is as long as `block`, a whole number
        // of 32-byte vectors of at most `BLOCK` bytes (this function's contract).
        total = add64(total, unsafe { copy_sum_block(out, block) });
        src = tail;
        dst = out_tail;
    }
    dst.copy_from_slice(src);
    add64(total, portable::sum(src))
}

/// [`sum_block`] that also stores every vector it loads into `out`.
///
/// # Safety
///
/// The CPU must support AVX2; `out.len() == block.len()`, a multiple of 32 of at
/// most [`BLOCK`].
#[target_feature(enable = "avx2")]
unsafe fn copy_sum_block(out: &mut [u8], block: &[u8]) -> u64 {
    debug_assert!(block.len().is_multiple_of(32) && block.len() <= BLOCK);
    debug_assert_eq!(out.len(), block.len());
    let big = block.len() / 128 * 128;
    // SAFETY: every load reads 32 bytes at `src + at` and every store writes 32
    // bytes at `dst + at` with `at + 32 <= block.len() == out.len()` (the loops
    // stop there), so both stay inside their slices; `loadu`/`storeu` have no
    // alignment requirement. AVX2 is available (this function's contract).
    unsafe {
        let src = block.as_ptr().cast::<__m256i>();
        let dst = out.as_mut_ptr().cast::<__m256i>();
        let mask = _mm256_set1_epi32(0xffff);
        let zero = _mm256_setzero_si256();
        let (mut l0, mut l1, mut l2, mut l3) = (zero, zero, zero, zero);
        let (mut h0, mut h1, mut h2, mut h3) = (zero, zero, zero, zero);
        let mut v = 0;
        while v * 32 < big {
            let v0 = _mm256_loadu_si256(src.add(v));
            let v1 = _mm256_loadu_si256(src.add(v + 1));
            let v2 = _mm256_loadu_si256(src.add(v + 2));
            let v3 = _mm256_loadu_si256(src.add(v + 3));
            _mm256_storeu_si256(dst.add(v), v0);
            _mm256_storeu_si256(dst.add(v + 1), v1);
            _mm256_storeu_si256(dst.add(v + 2), v2);
            _mm256_storeu_si256(dst.add(v + 3), v3);
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(v0, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(v0));
            l1 = _mm256_add_epi32(l1, _mm256_and_si256(v1, mask));
            h1 = _mm256_add_epi32(h1, _mm256_srli_epi32::<16>(v1));
            l2 = _mm256_add_epi32(l2, _mm256_and_si256(v2, mask));
            h2 = _mm256_add_epi32(h2, _mm256_srli_epi32::<16>(v2));
            l3 = _mm256_add_epi32(l3, _mm256_and_si256(v3, mask));
            h3 = _mm256_add_epi32(h3, _mm256_srli_epi32::<16>(v3));
            v += 4;
        }
        while v * 32 < block.len() {
            let x = _mm256_loadu_si256(src.add(v));
            _mm256_storeu_si256(dst.add(v), x);
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(x, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(x));
            v += 1;
        }
        // The same bound as `sum_block`: below 2^32 per lane.
        let l = _mm256_add_epi32(_mm256_add_epi32(l0, l1), _mm256_add_epi32(l2, l3));
        let h = _mm256_add_epi32(_mm256_add_epi32(h0, h1), _mm256_add_epi32(h2, h3));
        let s = _mm256_add_epi32(l, h);
        let mask32 = _mm256_set1_epi64x(0xffff_ffff);
        let s = _mm256_add_epi64(_mm256_and_si256(s, mask32), _mm256_srli_epi64::<32>(s));
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        _mm_cvtsi128_si64(s) as u64 + _mm_extract_epi64::<1>(s) as u64
    }
}

/// The sums of `data` cut into pieces of `size` bytes (the last may be
/// shorter), as `super::partial_chunks` returns them, into `sums`; the number
/// of pieces summed, or `None` if this CPU lacks AVX2. One feature check for
/// all the pieces.
#[inline]
pub(super) fn chunk_sums(data: &[u8], size: usize, sums: &mut [u32]) -> Option<usize> {
    if !available() {
        return None;
    }
    if size == 0 {
        return Some(0);
    }
    // SAFETY: AVX2 is available (checked just above), which is `chunk_sums_avx2`'s
    // only requirement.
    Some(unsafe { chunk_sums_avx2(data, size, sums) })
}

/// [`chunk_sums`] without the check; `size` is not zero.
///
/// # Safety
///
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn chunk_sums_avx2(data: &[u8], size: usize, sums: &mut [u32]) -> usize {
    let mut n = 0;
    for (out, chunk) in sums.iter_mut().zip(data.chunks(size)) {
        let s = if chunk.len() < super::SMALL {
            portable::sum(chunk)
        } else if chunk.len() <= BLOCK && chunk.len().is_multiple_of(2) {
            // SAFETY: AVX2 is available (this function's contract); the chunk
            // has an even length of at least 32 bytes and at most `BLOCK`.
            unsafe { piece_sum(chunk) }
        } else {
            // SAFETY: AVX2 is available (this function's contract).
            unsafe { sum_avx2(chunk) }
        };
        *out = super::from_le_sum(s);
        n += 1;
    }
    n
}

/// 32 zero bytes, then 32 bytes of ones: the 32 bytes from index `t` keep the
/// last `t` bytes of a vector.
static TAIL_MASK: [u8; 64] = {
    let mut m = [0u8; 64];
    let mut i = 32;
    while i < 64 {
        m[i] = 0xff;
        i += 1;
    }
    m
};

/// The sum of one GSO-sized piece, with no scalar work at its end: whole
/// vectors from its start, then the last 32 bytes loaded once more with the
/// bytes already summed masked off (an even length keeps the words of that
/// vector aligned with the piece's). Unaligned loads: the piece is summed
/// where it lies.
///
/// # Safety
///
/// The CPU must support AVX2; `data.len()` is even, at least 32 and at most
/// [`BLOCK`].
#[target_feature(enable = "avx2")]
unsafe fn piece_sum(data: &[u8]) -> u64 {
    debug_assert!(data.len().is_multiple_of(2) && data.len() >= 32 && data.len() <= BLOCK);
    let len = data.len();
    let whole = len / 32;
    let tail = len % 32;
    // SAFETY: vector `v` is read at `p + 32 * v` for `v < whole`, and
    // `32 * whole <= len`; the tail vector at `p + len - 32`, inside `data`
    // as `len >= 32`; the mask at `TAIL_MASK + tail` with `tail < 32`, inside
    // the 64-byte table. `loadu` has no alignment requirement. AVX2 is available
    // (this function's contract).
    unsafe {
        let p = data.as_ptr().cast::<__m256i>();
        let mask = _mm256_set1_epi32(0xffff);
        let zero = _mm256_setzero_si256();
        let (mut l0, mut l1, mut h0, mut h1) = (zero, zero, zero, zero);
        let mut v = 0;
        while v + 2 <= whole {
            let x0 = _mm256_loadu_si256(p.add(v));
            let x1 = _mm256_loadu_si256(p.add(v + 1));
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(x0, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(x0));
            l1 = _mm256_add_epi32(l1, _mm256_and_si256(x1, mask));
            h1 = _mm256_add_epi32(h1, _mm256_srli_epi32::<16>(x1));
            v += 2;
        }
        if v < whole {
            let x = _mm256_loadu_si256(p.add(v));
            l0 = _mm256_add_epi32(l0, _mm256_and_si256(x, mask));
            h0 = _mm256_add_epi32(h0, _mm256_srli_epi32::<16>(x));
        }
        if tail != 0 {
            let last = data.as_ptr().add(len - 32).cast::<__m256i>();
            let keep = TAIL_MASK.as_ptr().add(tail).cast::<__m256i>();
            let x = _mm256_and_si256(_mm256_loadu_si256(last), _mm256_loadu_si256(keep));
            l1 = _mm256_add_epi32(l1, _mm256_and_si256(x, mask));
            h1 = _mm256_add_epi32(h1, _mm256_srli_epi32::<16>(x));
        }
        // At most `BLOCK / 32 + 1` adds of up to 0xffff per lane across all four
        // accumulators: below 2^32, as in `sum_block`.
        let s = _mm256_add_epi32(_mm256_add_epi32(l0, l1), _mm256_add_epi32(h0, h1));
        let mask32 = _mm256_set1_epi64x(0xffff_ffff);
        let s = _mm256_add_epi64(_mm256_and_si256(s, mask32), _mm256_srli_epi64::<32>(s));
        let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        _mm_cvtsi128_si64(s) as u64 + _mm_extract_epi64::<1>(s) as u64
    }
}
