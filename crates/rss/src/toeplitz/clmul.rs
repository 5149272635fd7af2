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
//! products are the hash, most significant bit first. One 64x64-bit carry-less
//! multiplication per 4 input bytes, plus a nibble-table byte reversal (`PSHUFB`).
//!
//! Two kernels compute exactly this: [`kernel`] with 128-bit `PCLMULQDQ` (SSE4.1),
//! one product per instruction, and [`kernel256`] with 256-bit `VPCLMULQDQ` (AVX2),
//! two products per instruction and 32 input bytes reversed at once.

use core::arch::x86_64::{
    __m128i, __m256i, _mm_and_si128, _mm_clmulepi64_si128, _mm_cvtepu32_epi64, _mm_cvtsi128_si64,
    _mm_or_si128, _mm_set_epi64x, _mm_set1_epi8, _mm_setr_epi8, _mm_setzero_si128,
    _mm_shuffle_epi8, _mm_srli_epi16, _mm_srli_si128, _mm_xor_si128, _mm256_and_si256,
    _mm256_castsi256_si128, _mm256_clmulepi64_epi128, _mm256_cvtepu32_epi64,
    _mm256_extracti128_si256, _mm256_or_si256, _mm256_set_epi64x, _mm256_set1_epi8,
    _mm256_setr_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16,
    _mm256_xor_si256,
};

use crate::input::HashInput;

/// 32-bit input pieces a key is prepared for: 48 input bytes (a 52-byte key).
const PIECES: usize = HashInput::PADDED / 4;

/// Which kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Width {
    /// [`kernel`]: PCLMULQDQ, SSSE3, SSE4.1.
    Xmm,
    /// [`kernel256`]: additionally AVX2 and VPCLMULQDQ.
    Ymm,
}

impl Width {
    /// True if this CPU has what the kernel is compiled for.
    pub(super) fn available(self) -> bool {
        let xmm = std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("ssse3")
            && std::arch::is_x86_feature_detected!("sse4.1");
        match self {
            Width::Xmm => xmm,
            Width::Ymm => {
                xmm && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("vpclmulqdq")
            }
        }
    }
}

/// A key prepared for the carry-less path. Only [`Keys::new`] makes one, and only
/// after [`Width::available`] said yes for its width: holding a `Keys` proves the
/// CPU features its kernel needs.
pub(super) struct Keys {
    /// Piece `c`'s key window: key bytes `4c..4c+8` as a big-endian `u64` (bytes
    /// past the key read as zero; they only ever meet zero input bits).
    windows: [u64; PIECES],
    width: Width,
}

impl Keys {
    /// Prepares `key` for the `width` kernel, or `None` if this CPU lacks it.
    pub(super) fn new(key: &[u8], width: Width) -> Option<Keys> {
        if !width.available() {
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
        Some(Keys { windows, width })
    }

    /// Hashes a hash input (its length is one of 8, 12, 32 or 36 bytes).
    #[inline]
    #[allow(unsafe_code)]
    pub(super) fn hash_input(&self, input: &HashInput) -> u32 {
        let (w, b) = (&self.windows, input.padded());
        // SAFETY: `self` exists only if `Width::available` found the features of
        // `self.width`'s kernel on this CPU (see `Keys::new`); the kernels need
        // nothing else.
        unsafe {
            match (self.width, input.len()) {
                (Width::Ymm, 12) => kernel256::<3>(w, b),
                (Width::Ymm, 36) => kernel256::<9>(w, b),
                (Width::Ymm, 8) => kernel256::<2>(w, b),
                (Width::Ymm, _) => kernel256::<8>(w, b),
                (Width::Xmm, 12) => kernel::<3>(w, b),
                (Width::Xmm, 36) => kernel::<9>(w, b),
                (Width::Xmm, 8) => kernel::<2>(w, b),
                (Width::Xmm, _) => kernel::<8>(w, b),
            }
        }
    }

    /// Hashes every input of `inputs` into the matching slot of `out`.
    #[allow(unsafe_code)]
    pub(super) fn hash_batch(&self, inputs: &[HashInput], out: &mut [u32]) {
        // SAFETY: as in `hash_input`: a `Keys` proves its kernel's CPU features.
        unsafe {
            match self.width {
                Width::Ymm => batch256(&self.windows, inputs, out),
                Width::Xmm => batch(&self.windows, inputs, out),
            }
        }
    }

    /// Hashes up to 48 bytes (the caller checked the length against the key).
    #[allow(unsafe_code)]
    pub(super) fn hash_bytes(&self, input: &[u8]) -> u32 {
        let mut b = [0u8; HashInput::PADDED];
        for (d, s) in b.iter_mut().zip(input) {
            *d = *s;
        }
        // Zero bytes past the input add nothing to the hash.
        // SAFETY: as in `hash_input`: a `Keys` proves its kernel's CPU features.
        unsafe {
            match self.width {
                Width::Ymm => kernel256::<PIECES>(&self.windows, &b),
                Width::Xmm => kernel::<PIECES>(&self.windows, &b),
            }
        }
    }
}

/// Little-endian `u64` at `at` (zero past the end; never reached for `at <= 40`).
#[inline(always)]
fn le64(b: &[u8; HashInput::PADDED], at: usize) -> i64 {
    b.get(at..at + 8)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, i64::from_le_bytes)
}

/// `rev4(n) << 4` for each nibble value `n`: a reversed low nibble, moved high.
const TO_HIGH: [u8; 16] = [
    0x00, 0x80, 0x40, 0xc0, 0x20, 0xa0, 0x60, 0xe0, 0x10, 0x90, 0x50, 0xd0, 0x30, 0xb0, 0x70, 0xf0,
];
/// `rev4(n)`: a reversed high nibble, moved low.
const TO_LOW: [u8; 16] = [
    0x0, 0x8, 0x4, 0xc, 0x2, 0xa, 0x6, 0xe, 0x1, 0x9, 0x5, 0xd, 0x3, 0xb, 0x7, 0xf,
];

/// A 16-byte table as `PSHUFB` operand bytes.
macro_rules! lut {
    ($set:ident, $t:expr $(, $u:expr)?) => {{
        let t = $t;
        $set(
            t[0] as i8, t[1] as i8, t[2] as i8, t[3] as i8, t[4] as i8, t[5] as i8,
            t[6] as i8, t[7] as i8, t[8] as i8, t[9] as i8, t[10] as i8, t[11] as i8,
            t[12] as i8, t[13] as i8, t[14] as i8, t[15] as i8,
            $(
                $u[0] as i8, $u[1] as i8, $u[2] as i8, $u[3] as i8, $u[4] as i8,
                $u[5] as i8, $u[6] as i8, $u[7] as i8, $u[8] as i8, $u[9] as i8,
                $u[10] as i8, $u[11] as i8, $u[12] as i8, $u[13] as i8, $u[14] as i8,
                $u[15] as i8,
            )?
        )
    }};
}

/// Reverses the bits of every byte (nibble lookups with `PSHUFB`).
#[inline]
#[target_feature(enable = "ssse3")]
fn reverse_byte_bits(x: __m128i) -> __m128i {
    let nibble = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(x, nibble);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(x), nibble);
    _mm_or_si128(
        _mm_shuffle_epi8(lut!(_mm_setr_epi8, TO_HIGH), lo),
        _mm_shuffle_epi8(lut!(_mm_setr_epi8, TO_LOW), hi),
    )
}

/// [`reverse_byte_bits`] on 32 bytes (`VPSHUFB` looks up within each 128-bit lane,
/// so each table is given twice).
#[inline]
#[target_feature(enable = "avx2")]
fn reverse_byte_bits256(x: __m256i) -> __m256i {
    let nibble = _mm256_set1_epi8(0x0f);
    let lo = _mm256_and_si256(x, nibble);
    let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nibble);
    _mm256_or_si256(
        _mm256_shuffle_epi8(lut!(_mm256_setr_epi8, TO_HIGH, TO_HIGH), lo),
        _mm256_shuffle_epi8(lut!(_mm256_setr_epi8, TO_LOW, TO_LOW), hi),
    )
}

/// The hash of the first `4 * P` bytes of `b`, one 128-bit `PCLMULQDQ` per piece.
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

/// The hash of the first `4 * P` bytes of `b`, with 256-bit `VPCLMULQDQ`: each
/// instruction multiplies two pieces (one per 128-bit lane); the lanes are XORed at
/// the end.
#[inline]
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1,avx2,vpclmulqdq")]
fn kernel256<const P: usize>(windows: &[u64; PIECES], b: &[u8; HashInput::PADDED]) -> u32 {
    let w = |c: usize| windows.get(c).copied().unwrap_or(0) as i64;
    let mut acc = _mm256_setzero_si256();
    let mut block = 0;
    while block * 8 < P {
        let c = block * 8;
        let at = c * 4;
        let x = reverse_byte_bits256(_mm256_set_epi64x(
            le64(b, at + 24),
            le64(b, at + 16),
            le64(b, at + 8),
            le64(b, at),
        ));
        // Pieces c..c+4 as [c, c+1 | c+2, c+3].
        let d = _mm256_cvtepu32_epi64(_mm256_castsi256_si128(x));
        let k = _mm256_set_epi64x(w(c + 3), w(c + 2), w(c + 1), w(c));
        acc = _mm256_xor_si256(acc, _mm256_clmulepi64_epi128::<0x00>(d, k));
        if c + 1 < P {
            acc = _mm256_xor_si256(acc, _mm256_clmulepi64_epi128::<0x11>(d, k));
        }
        if c + 4 < P {
            let d = _mm256_cvtepu32_epi64(_mm256_extracti128_si256::<1>(x));
            let k = _mm256_set_epi64x(w(c + 7), w(c + 6), w(c + 5), w(c + 4));
            acc = _mm256_xor_si256(acc, _mm256_clmulepi64_epi128::<0x00>(d, k));
            if c + 5 < P {
                acc = _mm256_xor_si256(acc, _mm256_clmulepi64_epi128::<0x11>(d, k));
            }
        }
        block += 1;
    }
    let x = _mm_xor_si128(
        _mm256_castsi256_si128(acc),
        _mm256_extracti128_si256::<1>(acc),
    );
    ((_mm_cvtsi128_si64(x) as u64) >> 32) as u32
}

/// [`kernel`] over a batch, inlined into one loop.
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

/// [`kernel256`] over a batch, inlined into one loop.
#[target_feature(enable = "pclmulqdq,ssse3,sse4.1,avx2,vpclmulqdq")]
fn batch256(windows: &[u64; PIECES], inputs: &[HashInput], out: &mut [u32]) {
    for (i, o) in inputs.iter().zip(out) {
        let b = i.padded();
        *o = match i.len() {
            12 => kernel256::<3>(windows, b),
            36 => kernel256::<9>(windows, b),
            8 => kernel256::<2>(windows, b),
            _ => kernel256::<8>(windows, b),
        };
    }
}
