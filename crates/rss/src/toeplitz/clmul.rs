//! The Toeplitz hash as a carry-less product (x86-64 PCLMULQDQ).
//!
//! Number the input bits `d_0, d_1, ...` and the key bits `k_0, k_1, ...` from the
//! most significant bit of the first byte. Bit `j` of the hash (counting from its
//! most significant bit) is `h_j = XOR_i d_i & k_(i+j)`: a correlation of input and
//! key, which is a product of polynomials over GF(2) once one of them is reversed.
//!
//! Split the input into 32-bit pieces `c = 0, 1, ...`. For piece `c`, let
//! `D(x) = sum d_(32c+i) x^i` (the piece with each byte's bits reversed, loaded
//! little-endian) and `K(x) = sum k_(32c+m) x^(63-m)` for `m` in 0..64 (the key's
//! bytes `4c..4c+8` read as a big-endian `u64`: no preparation beyond that). The
//! coefficient of `x^(63-j)` in `D * K` is `XOR_i d_(32c+i) k_(32c+i+j)`, the piece's
//! share of `h_j`. So bits 32..64 of the XOR of all pieces' 64x64-bit carry-less
//! products are the hash, most significant bit first. One `PCLMULQDQ` per 4 input
//! bytes, plus a nibble-table byte reversal (`PSHUFB`) per 16 input bytes.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m128i, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtepu32_epi64, _mm_cvtsi128_si64,
    _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8, _mm_setr_epi8, _mm_setzero_si128,
    _mm_shuffle_epi8, _mm_srli_epi16, _mm_srli_si128, _mm_xor_si128,
};

use crate::input::HashInput;

/// 32-bit input pieces a key is prepared for: 48 input bytes (a 52-byte key).
const PIECES: usize = HashInput::PADDED / 4;

/// True if this CPU has what [`kernel`] is compiled for.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("ssse3")
        && std::arch::is_x86_feature_detected!("sse4.1")
}

/// A key prepared for the carry-less path. Only [`Keys::new`] makes one, and only
/// after [`available`] said yes: holding a `Keys` proves the CPU features.
pub(super) struct Keys {
    /// Piece `c`'s key window: key bytes `4c..4c+8` as a big-endian `u64` (bytes
    /// past the key read as zero; they only ever meet zero input bits).
    windows: [u64; PIECES],
}

impl Keys {
    /// Prepares `key`, or `None` if this CPU lacks PCLMULQDQ, SSSE3 or SSE4.1.
    pub(super) fn new(key: &[u8]) -> Option<Keys> {
        if !available() {
            return None;
        }
        let mut windows = [0u64; PIECES];
        for (c, w) in windows.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            for (i, d) in b.iter_mut().enumerate() {
                *d = key.get(4 * c + i).copied().unwrap_or(0);
            }
            *w = u64::from_be_bytes(b);
        }
        Some(Keys { windows })
    }

    /// Hashes a hash input (its length is one of 8, 12, 32 or 36 bytes).
    #[inline]
    pub(super) fn hash_input(&self, input: &HashInput) -> u32 {
        let b = input.padded();
        // SAFETY: `self` exists only if `available()` found PCLMULQDQ, SSSE3 and
        // SSE4.1 on this CPU (see `Keys::new`); `kernel` needs nothing else.
        unsafe {
            match input.len() {
                8 => kernel::<2>(&self.windows, b),
                12 => kernel::<3>(&self.windows, b),
                32 => kernel::<8>(&self.windows, b),
                36 => kernel::<9>(&self.windows, b),
                _ => kernel::<PIECES>(&self.windows, b),
            }
        }
    }

    /// Hashes every input of `inputs` into the matching slot of `out`.
    pub(super) fn hash_batch(&self, inputs: &[HashInput], out: &mut [u32]) {
        // SAFETY: as in `hash_input`: a `Keys` proves the CPU features.
        unsafe { batch(&self.windows, inputs, out) }
    }

    /// Hashes up to 48 bytes (the caller checked the length against the key).
    pub(super) fn hash_bytes(&self, input: &[u8]) -> u32 {
        let mut b = [0u8; HashInput::PADDED];
        for (d, s) in b.iter_mut().zip(input) {
            *d = *s;
        }
        // Zero bytes past the input add nothing to the hash.
        // SAFETY: as in `hash_input`: a `Keys` proves the CPU features.
        unsafe { kernel::<PIECES>(&self.windows, &b) }
    }
}

/// Little-endian `u64` at `at` (zero past the end; never reached for `at <= 40`).
#[inline(always)]
fn le64(b: &[u8; HashInput::PADDED], at: usize) -> i64 {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, i64::from_le_bytes)
}

/// Reverses the bits of every byte (nibble lookups with `PSHUFB`).
#[inline]
#[target_feature(enable = "ssse3")]
fn reverse_byte_bits(x: __m128i) -> __m128i {
    // rev4(n) << 4 for the low nibble n; rev4(n) for the high nibble.
    let to_high = _mm_setr_epi8(
        0x00,
        0x80u8 as i8,
        0x40,
        0xc0u8 as i8,
        0x20,
        0xa0u8 as i8,
        0x60,
        0xe0u8 as i8,
        0x10,
        0x90u8 as i8,
        0x50,
        0xd0u8 as i8,
        0x30,
        0xb0u8 as i8,
        0x70,
        0xf0u8 as i8,
    );
    let to_low = _mm_setr_epi8(
        0x0, 0x8, 0x4, 0xc, 0x2, 0xa, 0x6, 0xe, 0x1, 0x9, 0x5, 0xd, 0x3, 0xb, 0x7, 0xf,
    );
    let nibble = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(x, nibble);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(x), nibble);
    _mm_or_si128(_mm_shuffle_epi8(to_high, lo), _mm_shuffle_epi8(to_low, hi))
}

/// The hash of the first `4 * P` bytes of `b`.
#[inline]
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
fn kernel<const P: usize>(windows: &[u64; PIECES], b: &[u8; HashInput::PADDED]) -> u32 {
    let w = |c: usize| windows.get(c).copied().unwrap_or(0) as i64;
    let mut acc = _mm_setzero_si128();
    let mut block = 0;
    while block * 4 < P {
        let c = block * 4;
        let x = reverse_byte_bits(_mm_set_epi64x(le64(b, c * 4 + 8), le64(b, c * 4)));
        // Pieces c and c+1, zero-extended to 64 bits each.
        let d = _mm_cvtepu32_epi64(x);
        let k = _mm_set_epi64x(w(c + 1), w(c));
        acc = _mm_xor_si128(acc, _mm_clmulepi64_si128::<0x00>(d, k));
        if c + 1 < P {
            acc = _mm_xor_si128(acc, _mm_clmulepi64_si128::<0x11>(d, k));
        }
        if c + 2 < P {
            let d = _mm_cvtepu32_epi64(_mm_srli_si128::<8>(x));
            let k = _mm_set_epi64x(w(c + 3), w(c + 2));
            acc = _mm_xor_si128(acc, _mm_clmulepi64_si128::<0x00>(d, k));
            if c + 3 < P {
                acc = _mm_xor_si128(acc, _mm_clmulepi64_si128::<0x11>(d, k));
            }
        }
        block += 1;
    }
    ((_mm_cvtsi128_si64(acc) as u64) >> 32) as u32
}

/// [`kernel`] over a batch, with the kernel inlined into one loop.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1")]
fn batch(windows: &[u64; PIECES], inputs: &[HashInput], out: &mut [u32]) {
    for (i, o) in inputs.iter().zip(out) {
        let b = i.padded();
        *o = match i.len() {
            12 => kernel::<3>(windows, b),
            36 => kernel::<9>(windows, b),
            8 => kernel::<2>(windows, b),
            _ => kernel::<8>(windows, b),
        };
    }
}
