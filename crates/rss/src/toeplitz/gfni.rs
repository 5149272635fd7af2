//! The Toeplitz hash with `GF2P8AFFINEQB` (x86-64 GFNI with AVX-512), the method
//! of DPDK's `rte_thash_gfni` (`lib/hash/rte_thash_x86_gfni.h`).
//!
//! Number the input bits `d_0, d_1, ...` and the key bits `k_0, k_1, ...` from the
//! most significant bit of the first byte, and the hash bits `h_0..h_32` from the
//! most significant. Byte `J` of the hash (0 the most significant) gets from input
//! byte `i` the bits `h_(8J+b) ^= XOR_a d_(8i+a) & k_(8(i+J)+a+b)`: a linear map of
//! the input byte over GF(2) whose 8x8 matrix depends only on `n = i + J`, the key
//! byte position. [`Keys::new`] prepares one matrix `M_n` per key byte position:
//! its row for hash bit `b` is the 8 key bits from bit `8n + b` on.
//!
//! `GF2P8AFFINEQB` multiplies every byte of a 64-bit lane by that lane's matrix.
//! Lane `n` is given the four input bytes `d[n-3], d[n-2], d[n-1], d[n]` (zero
//! outside the input): its byte `3 - J` is then input byte `n - J`'s share of hash
//! byte `J`. XORing all lanes leaves the hash as the low little-endian `u32`. One
//! 512-bit instruction covers 8 key positions; an input of `L` bytes needs `L + 3`
//! positions: 2 instructions for IPv4 (8 or 12 bytes), 5 for IPv6 (32 or 36). The
//! four input bytes of each lane are picked from the input register with one
//! `VPERMB` (AVX512-VBMI) per 8 lanes, the index advancing by 8 each step.
//!
//! The lanes' upper four bytes are free: [`Keys::hash_batch`] puts a second input
//! there (`VPERMT2B` picks from both), so a batch hashes two inputs per pass and
//! the high `u32` of the XOR is the second hash.

use core::arch::x86_64::{
    __m512i, __mmask64, _mm_cvtsi128_si64, _mm_unpackhi_epi64, _mm_xor_si128,
    _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_xor_si256, _mm512_add_epi8,
    _mm512_castsi512_si256, _mm512_extracti64x4_epi64, _mm512_gf2p8affine_epi64_epi8,
    _mm512_maskz_permutex2var_epi8, _mm512_maskz_permutexvar_epi8, _mm512_set_epi64,
    _mm512_set1_epi8, _mm512_setzero_si512, _mm512_xor_si512,
};

use crate::input::HashInput;

/// 8-lane steps a key is prepared for: `48 + 3` key positions (a 52-byte key's
/// longest input), rounded up to 8.
const STEPS: usize = (HashInput::PADDED + 3).div_ceil(8);

/// Lane `l`'s bytes: `l - 3 + q` for `q` in 0..4 (the first input), the same plus
/// 64 (the second input, in `VPERMT2B`'s second table) for `q` in 4..8. Negative
/// indices wrap; the first step's mask zeroes them, and later steps add 8 to each.
const fn first_index() -> [i64; 8] {
    let mut lanes = [0i64; 8];
    let mut l = 0;
    while l < 8 {
        let mut b = [0u8; 8];
        let mut q = 0;
        while q < 8 {
            let base = if q < 4 { 0 } else { 64 };
            b[q] = (base + l as i32 + (q % 4) as i32 - 3) as u8;
            q += 1;
        }
        lanes[l] = i64::from_le_bytes(b);
        l += 1;
    }
    lanes
}
const INDEX: [i64; 8] = first_index();

/// First step, first input only: lane `l` keeps bytes `q` with `l + q >= 3`
/// (DPDK's `RTE_THASH_FIRST_ITER_MSK`).
const FIRST_ONE: __mmask64 = 0x0f0f_0f0f_0f0e_0c08;
/// Later steps, first input only: the low four bytes of every lane.
const REST_ONE: __mmask64 = 0x0f0f_0f0f_0f0f_0f0f;
/// First step, both inputs.
const FIRST_TWO: __mmask64 = FIRST_ONE | (FIRST_ONE << 4);
/// Later steps, both inputs.
const REST_TWO: __mmask64 = !0;

/// True if this CPU has what the kernels are compiled for.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("gfni")
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("sse2")
}

/// A key prepared as GF(2) matrices. Only [`Keys::new`] makes one, and only after
/// [`available`] said yes: holding a `Keys` proves the CPU features the kernels
/// need.
pub(super) struct Keys {
    /// Step `s`, lane `l`: the matrix `M_(8s+l)`.
    matrices: [__m512i; STEPS],
}

/// The 8 key bits from bit `bit` on (bit 0 is the most significant bit of the
/// first key byte), most significant first; zero past the key.
fn key_byte(key: &[u8], bit: usize) -> u8 {
    let at = |i: usize| u16::from(key.get(i).copied().unwrap_or(0));
    let two = (at(bit / 8) << 8) | at(bit / 8 + 1);
    (two >> (8 - bit % 8)) as u8
}

impl Keys {
    /// Prepares `key`, or `None` if this CPU lacks GFNI or the AVX-512 parts used.
    #[allow(unsafe_code)]
    pub(super) fn new(key: &[u8]) -> Option<Keys> {
        if !available() {
            return None;
        }
        let mut m = [[0i64; 8]; STEPS];
        for (s, lanes) in m.iter_mut().enumerate() {
            for (l, lane) in lanes.iter_mut().enumerate() {
                let n = 8 * s + l;
                // Byte `b` of the lane (the row read for result bit `7 - b`, that
                // is hash bit `b` of the byte, most significant first).
                let mut rows = [0u8; 8];
                for (b, r) in rows.iter_mut().enumerate() {
                    *r = key_byte(key, 8 * n + b);
                }
                *lane = i64::from_le_bytes(rows);
            }
        }
        // SAFETY: `available` found AVX-512F on this CPU just above.
        let matrices = unsafe { vectors(&m) };
        Some(Keys { matrices })
    }

    /// Hashes a hash input (its length is one of 8, 12, 32 or 36 bytes).
    #[inline]
    #[allow(unsafe_code)]
    pub(super) fn hash_input(&self, input: &HashInput) -> u32 {
        let b = input.padded();
        // SAFETY: `self` exists only if `available` found the kernels' features on
        // this CPU (see `Keys::new`); the kernels need nothing else.
        unsafe {
            if input.len() <= 12 {
                one::<2>(&self.matrices, b)
            } else {
                one::<5>(&self.matrices, b)
            }
        }
    }

    /// Hashes every input of `inputs` into the matching slot of `out`, two at a time.
    #[allow(unsafe_code)]
    pub(super) fn hash_batch(&self, inputs: &[HashInput], out: &mut [u32]) {
        // SAFETY: as in `hash_input`: a `Keys` proves the kernels' CPU features.
        unsafe { batch(&self.matrices, inputs, out) }
    }

    /// Hashes up to 48 bytes (the caller checked the length against the key).
    #[allow(unsafe_code)]
    pub(super) fn hash_bytes(&self, input: &[u8]) -> u32 {
        let mut b = [0u8; HashInput::PADDED];
        for (d, s) in b.iter_mut().zip(input) {
            *d = *s;
        }
        // Zero bytes past the input add nothing to the hash.
        // SAFETY: as in `hash_input`: a `Keys` proves the kernels' CPU features.
        unsafe { one::<STEPS>(&self.matrices, &b) }
    }
}

/// The prepared matrices as registers.
#[target_feature(enable = "avx512f")]
fn vectors(m: &[[i64; 8]; STEPS]) -> [__m512i; STEPS] {
    let mut v = [_mm512_setzero_si512(); STEPS];
    for (d, s) in v.iter_mut().zip(m) {
        *d = _mm512_set_epi64(s[7], s[6], s[5], s[4], s[3], s[2], s[1], s[0]);
    }
    v
}

/// Little-endian `u64` at `at` (zero past the end).
#[inline(always)]
fn le64(b: &[u8; HashInput::PADDED], at: usize) -> i64 {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, i64::from_le_bytes)
}

/// The 48 padded input bytes in the low bytes of a register, zero above.
#[inline]
#[target_feature(enable = "avx512f")]
fn load(b: &[u8; HashInput::PADDED]) -> __m512i {
    _mm512_set_epi64(
        0,
        0,
        le64(b, 40),
        le64(b, 32),
        le64(b, 24),
        le64(b, 16),
        le64(b, 8),
        le64(b, 0),
    )
}

/// XOR of the eight 64-bit lanes.
#[inline]
#[target_feature(enable = "avx512f,avx2,sse2")]
fn fold(acc: __m512i) -> u64 {
    let y = _mm256_xor_si256(
        _mm512_castsi512_si256(acc),
        _mm512_extracti64x4_epi64::<1>(acc),
    );
    let x = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y));
    _mm_cvtsi128_si64(_mm_xor_si128(x, _mm_unpackhi_epi64(x, x))) as u64
}

/// The hash of the padded input `b` over the first `S` steps (`8 * S` key
/// positions: inputs up to `8 * S - 3` bytes).
#[inline]
#[target_feature(enable = "gfni,avx512f,avx512bw,avx512vbmi,avx2,sse2")]
fn one<const S: usize>(m: &[__m512i; STEPS], b: &[u8; HashInput::PADDED]) -> u32 {
    let x = load(b);
    let eight = _mm512_set1_epi8(8);
    let i = INDEX;
    let mut idx = _mm512_set_epi64(i[7], i[6], i[5], i[4], i[3], i[2], i[1], i[0]);
    let mut acc = _mm512_setzero_si512();
    for (s, mat) in m.iter().take(S).enumerate() {
        let mask = if s == 0 { FIRST_ONE } else { REST_ONE };
        let lanes = _mm512_maskz_permutexvar_epi8(mask, idx, x);
        acc = _mm512_xor_si512(acc, _mm512_gf2p8affine_epi64_epi8::<0>(lanes, *mat));
        idx = _mm512_add_epi8(idx, eight);
    }
    fold(acc) as u32
}

/// The hashes of two padded inputs over the first `S` steps: `a`'s in the low 32
/// bits, `c`'s in the high.
#[inline]
#[target_feature(enable = "gfni,avx512f,avx512bw,avx512vbmi,avx2,sse2")]
fn two<const S: usize>(
    m: &[__m512i; STEPS],
    a: &[u8; HashInput::PADDED],
    c: &[u8; HashInput::PADDED],
) -> u64 {
    let (x, y) = (load(a), load(c));
    let eight = _mm512_set1_epi8(8);
    let i = INDEX;
    let mut idx = _mm512_set_epi64(i[7], i[6], i[5], i[4], i[3], i[2], i[1], i[0]);
    let mut acc = _mm512_setzero_si512();
    for (s, mat) in m.iter().take(S).enumerate() {
        let mask = if s == 0 { FIRST_TWO } else { REST_TWO };
        let lanes = _mm512_maskz_permutex2var_epi8(mask, x, idx, y);
        acc = _mm512_xor_si512(acc, _mm512_gf2p8affine_epi64_epi8::<0>(lanes, *mat));
        idx = _mm512_add_epi8(idx, eight);
    }
    fold(acc)
}

/// [`one`] and [`two`] over a batch, inlined into one loop: pairs of inputs, the
/// steps set by the longer of the two.
#[target_feature(enable = "gfni,avx512f,avx512bw,avx512vbmi,avx2,sse2")]
fn batch(m: &[__m512i; STEPS], inputs: &[HashInput], out: &mut [u32]) {
    let mut ins = inputs.chunks_exact(2);
    let mut outs = out.chunks_exact_mut(2);
    for (i, o) in (&mut ins).zip(&mut outs) {
        if let ([a, c], [oa, oc]) = (i, o) {
            let h = if a.len().max(c.len()) <= 12 {
                two::<2>(m, a.padded(), c.padded())
            } else {
                two::<5>(m, a.padded(), c.padded())
            };
            *oa = h as u32;
            *oc = (h >> 32) as u32;
        }
    }
    // An odd input left over (when `out` had room for it).
    let rest = inputs.len().min(out.len()) / 2 * 2;
    if let (Some(a), Some(o)) = (inputs.get(rest), out.get_mut(rest)) {
        *o = if a.len() <= 12 {
            one::<2>(m, a.padded())
        } else {
            one::<5>(m, a.padded())
        };
    }
}
