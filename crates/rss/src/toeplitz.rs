//! The Toeplitz hash, with the key prepared once.
//!
//! Microsoft's RSS specification ("RSS Hashing Functions", "Verifying the RSS Hash
//! Calculation") defines the hash bit by bit: for each set bit of the input, from
//! the most significant bit of the first byte on, XOR the left-most 32 bits of the
//! key into the result, then shift the key left by one bit. [`bitwise`] is exactly
//! that, kept as the reference the fast paths are checked and benchmarked against.
//!
//! The hash is linear over XOR in its input, so the contribution of each input byte
//! depends only on the byte's value and position. [`Toeplitz::new`] therefore
//! prepares, once per key, one table of 256 `u32` per input byte position (as DPDK's
//! `rte_thash` and Linux's `toeplitz` precomputation do); a hash is then one table
//! load and one XOR per input byte, with no branch ([`Path::Portable`]).
//!
//! On x86-64 CPUs with PCLMULQDQ there are SIMD paths, chosen at run time: the hash
//! is a carry-less product of the input with the key (a Toeplitz matrix-vector
//! product is a polynomial product over GF(2)), so each 32 input bits cost one
//! 64x64-bit carry-less multiplication against a 64-bit key window.
//! [`Path::Clmul`] uses 128-bit `PCLMULQDQ`; [`Path::Vpclmul`] uses 256-bit
//! `VPCLMULQDQ` with AVX2, two products per instruction.
//!
//! On x86-64 CPUs with GFNI and AVX-512 (F, BW, VBMI) there is [`Path::Gfni`], DPDK's
//! `rte_thash_gfni` method: the key is prepared once into one 8x8 GF(2) matrix per
//! key byte position, and `GF2P8AFFINEQB` applies 8 of them to 4 input bytes each
//! per instruction (2 instructions for IPv4, 5 for IPv6; batches hash two inputs
//! per pass). All paths give identical results (tested on a million random inputs
//! of every hash type).
//!
//! Which path [`Path::detect`] picks was decided by measurement on the development
//! machine (AMD EPYC, AVX2, VAES, VPCLMULQDQ): see "Performance" in the crate
//! documentation. [`Toeplitz::hash_batch`] runs the SIMD loop inside one
//! feature-enabled function, which saves a call per hash.

use std::sync::Arc;

use crate::error::ConfigError;
use crate::input::HashInput;
use crate::key::RssKey;
use linerate_offload::RssHashType;

#[cfg(target_arch = "x86_64")]
mod clmul;
#[cfg(target_arch = "x86_64")]
mod gfni;

/// How hashes are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Per-byte-position lookup tables of `u32` (portable; 48 KiB, of which a
    /// 40-byte key uses 36).
    Portable,
    /// Carry-less multiplication with 128-bit `PCLMULQDQ` (x86-64 with PCLMULQDQ,
    /// SSSE3 and SSE4.1, detected at run time).
    Clmul,
    /// Carry-less multiplication with 256-bit `VPCLMULQDQ`, two products per
    /// instruction (x86-64 with the above plus AVX2 and VPCLMULQDQ, detected at run
    /// time).
    Vpclmul,
    /// GF(2) affine transformations with 512-bit `GF2P8AFFINEQB`, as DPDK's
    /// `rte_thash_gfni` (x86-64 with GFNI, AVX-512F, AVX-512BW and AVX-512VBMI,
    /// detected at run time).
    Gfni,
}

impl Path {
    /// True if this path can run on this CPU.
    pub fn is_available(self) -> bool {
        match self {
            Path::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Path::Clmul => clmul::Width::Xmm.available(),
            #[cfg(target_arch = "x86_64")]
            Path::Vpclmul => clmul::Width::Ymm.available(),
            #[cfg(target_arch = "x86_64")]
            Path::Gfni => gfni::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Path::Clmul | Path::Vpclmul | Path::Gfni => false,
        }
    }

    /// The path [`Toeplitz::new`] uses on this CPU: the faster of the available
    /// paths as measured for this crate (see the crate documentation).
    pub fn detect() -> Path {
        PREFERRED
            .iter()
            .copied()
            .find(|p| p.is_available())
            .unwrap_or(Path::Portable)
    }
}

/// Paths in order of preference, fastest measured first: on the development machine
/// (AMD EPYC, 2 cores) GFNI beat every other path for every hash type, single call
/// and batched (batched about twice as fast as VPCLMULQDQ); the carry-less paths
/// beat the tables, and the 256-bit one matched the 128-bit one on IPv4 and beat it
/// on IPv6 (see the crate documentation).
const PREFERRED: [Path; 4] = [Path::Gfni, Path::Vpclmul, Path::Clmul, Path::Portable];

/// Every path, for tests and benchmarks that compare them.
pub const ALL_PATHS: [Path; 4] = [Path::Portable, Path::Clmul, Path::Vpclmul, Path::Gfni];

/// A Toeplitz hasher: a key prepared once, and the path that hashes with it.
///
/// Cloning is cheap (the prepared tables are shared).
///
/// ```
/// use linerate_rss::{HashInput, RssKey, Toeplitz};
/// let t = Toeplitz::new(&RssKey::MICROSOFT);
/// // Microsoft's first verification row: 66.9.149.187:2794 -> 161.142.100.80:1766.
/// let input = HashInput::tcp_ipv4([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
/// assert_eq!(t.hash(&input), 0x51ccc178);
/// ```
#[derive(Clone)]
pub struct Toeplitz {
    prepared: Arc<Prepared>,
    path: Path,
}

struct Prepared {
    key: RssKey,
    /// `tables[i][b]`: the hash of an input whose only non-zero byte is `b` at
    /// position `i`. Always [`HashInput::PADDED`] tables (those past the key's
    /// `max_input_len` are zero and never used), so lookups need no length check.
    tables: Box<[[u32; 256]; HashInput::PADDED]>,
    #[cfg(target_arch = "x86_64")]
    simd: Option<Simd>,
}

/// The key prepared for a SIMD path (its existence proves the CPU has the path).
///
/// One per prepared key, inside its `Arc`: the size difference costs nothing, and a
/// `Box` would add a pointer chase to every hash.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::large_enum_variant)]
enum Simd {
    Clmul(clmul::Keys),
    Gfni(gfni::Keys),
}

impl core::fmt::Debug for Toeplitz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Toeplitz")
            .field("key", &self.prepared.key)
            .field("path", &self.path)
            .finish()
    }
}

impl Toeplitz {
    /// Prepares `key` for hashing on the path [`Path::detect`] picks.
    pub fn new(key: &RssKey) -> Toeplitz {
        Toeplitz::prepare(key, Path::detect())
    }

    /// Prepares `key` for hashing on `path`, or [`ConfigError::PathUnavailable`]
    /// when this CPU lacks it.
    pub fn with_path(key: &RssKey, path: Path) -> Result<Toeplitz, ConfigError> {
        if !path.is_available() {
            return Err(ConfigError::PathUnavailable);
        }
        Ok(Toeplitz::prepare(key, path))
    }

    fn prepare(key: &RssKey, path: Path) -> Toeplitz {
        let k = key.as_bytes();
        // Built on the heap (48 KiB is a lot for a small thread stack).
        let mut tables: Box<[[u32; 256]; HashInput::PADDED]> =
            match vec![[0u32; 256]; HashInput::PADDED]
                .into_boxed_slice()
                .try_into()
            {
                Ok(t) => t,
                Err(_) => Box::new([[0u32; 256]; HashInput::PADDED]),
            };
        for (pos, table) in tables.iter_mut().enumerate().take(key.max_input_len()) {
            // The 32-bit key windows for the 8 bits of this byte position.
            let mut windows = [0u32; 8];
            for (bit, w) in windows.iter_mut().enumerate() {
                *w = window(k, pos * 8 + bit);
            }
            for (value, slot) in table.iter_mut().enumerate() {
                *slot = windows
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| value & (0x80 >> bit) != 0)
                    .fold(0, |h, (_, w)| h ^ w);
            }
        }
        #[cfg(target_arch = "x86_64")]
        let simd = match path {
            Path::Portable => None,
            Path::Clmul => clmul::Keys::new(k, clmul::Width::Xmm).map(Simd::Clmul),
            Path::Vpclmul => clmul::Keys::new(k, clmul::Width::Ymm).map(Simd::Clmul),
            Path::Gfni => gfni::Keys::new(k).map(Simd::Gfni),
        };
        Toeplitz {
            prepared: Arc::new(Prepared {
                key: *key,
                tables,
                #[cfg(target_arch = "x86_64")]
                simd,
            }),
            path,
        }
    }

    /// The key.
    pub fn key(&self) -> &RssKey {
        &self.prepared.key
    }

    /// The path hashes are computed on.
    pub fn path(&self) -> Path {
        self.path
    }

    /// The Toeplitz hash of a hash input (at most 36 bytes, which every key covers).
    #[inline]
    pub fn hash(&self, input: &HashInput) -> u32 {
        #[cfg(target_arch = "x86_64")]
        match &self.prepared.simd {
            Some(Simd::Gfni(keys)) => return keys.hash_input(input),
            Some(Simd::Clmul(keys)) => return keys.hash_input(input),
            None => {}
        }
        self.hash_portable(input)
    }

    /// Hashes every input of `inputs` into the matching slot of `out` (as many as
    /// the shorter of the two holds). The same values as [`Toeplitz::hash`]; on the
    /// SIMD path the loop runs inside one feature-enabled function.
    pub fn hash_batch(&self, inputs: &[HashInput], out: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        match &self.prepared.simd {
            Some(Simd::Gfni(keys)) => return keys.hash_batch(inputs, out),
            Some(Simd::Clmul(keys)) => return keys.hash_batch(inputs, out),
            None => {}
        }
        for (i, o) in inputs.iter().zip(out) {
            *o = self.hash_portable(i);
        }
    }

    #[inline]
    fn hash_portable(&self, input: &HashInput) -> u32 {
        let t = &self.prepared.tables;
        let b = input.padded();
        // Branches, not a jump table: the 4-tuple types first.
        let kind = input.kind();
        if matches!(kind, RssHashType::TcpIpv4 | RssHashType::UdpIpv4) {
            fixed::<12>(t, b)
        } else if matches!(kind, RssHashType::TcpIpv6 | RssHashType::UdpIpv6) {
            fixed::<36>(t, b)
        } else if kind == RssHashType::Ipv4 {
            fixed::<8>(t, b)
        } else {
            fixed::<32>(t, b)
        }
    }

    /// The Toeplitz hash of arbitrary bytes, at most [`RssKey::max_input_len`] of
    /// them, else [`ConfigError::InputTooLong`].
    pub fn hash_bytes(&self, input: &[u8]) -> Result<u32, ConfigError> {
        let max = self.prepared.key.max_input_len();
        if input.len() > max {
            return Err(ConfigError::InputTooLong {
                len: input.len(),
                max,
            });
        }
        #[cfg(target_arch = "x86_64")]
        match &self.prepared.simd {
            Some(Simd::Gfni(keys)) => return Ok(keys.hash_bytes(input)),
            Some(Simd::Clmul(keys)) => return Ok(keys.hash_bytes(input)),
            None => {}
        }
        Ok(tables_hash(&self.prepared.tables[..], input))
    }
}

/// Table hash of the first `N` bytes of `b` (`N` a multiple of 4, at most 48),
/// unrolled.
///
/// The input is read 8 bytes at a time and split into bytes with shifts: a table
/// lookup per byte is then one load, not two, which matters because loads are what
/// this loop is bound by.
#[inline(always)]
fn fixed<const N: usize>(t: &[[u32; 256]; HashInput::PADDED], b: &[u8; HashInput::PADDED]) -> u32 {
    let mut h = 0;
    let mut i = 0;
    while i < N {
        let w = b
            .get(i..i + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map_or(0, u64::from_le_bytes);
        let mut k = 0;
        while k < 8 && i + k < N {
            if let Some(tk) = t.get(i + k) {
                h ^= tk[((w >> (8 * k)) & 0xff) as usize];
            }
            k += 1;
        }
        i += 8;
    }
    h
}

/// Table hash of any input no longer than the tables.
#[inline]
fn tables_hash(tables: &[[u32; 256]], input: &[u8]) -> u32 {
    tables
        .iter()
        .zip(input)
        .fold(0, |h, (t, &b)| h ^ t[usize::from(b)])
}

/// The 32 key bits starting at bit `bit` (bit 0 is the most significant bit of the
/// first key byte); bits past the key's end read as zero.
fn window(key: &[u8], bit: usize) -> u32 {
    let byte = bit / 8;
    let shift = bit % 8;
    let mut five = [0u8; 8];
    for (i, d) in five.iter_mut().take(5).enumerate() {
        *d = key.get(byte + i).copied().unwrap_or(0);
    }
    let wide = u64::from_be_bytes(five);
    // The 40 bits of five bytes sit at the top of `wide`; take 32 of them.
    (wide >> (32 - shift)) as u32
}

/// The Toeplitz hash computed bit by bit, exactly as Microsoft's specification
/// writes it: for each set input bit (most significant first), XOR the left-most 32
/// bits of the key into the result, then shift the key left one bit.
///
/// This is the slow reference the prepared paths are tested and benchmarked
/// against. Key bits past the end of `key` read as zero.
///
/// ```
/// use linerate_rss::{RssKey, toeplitz::bitwise};
/// let input = [66, 9, 149, 187, 161, 142, 100, 80]; // IPv4 only: src, dst
/// assert_eq!(bitwise(RssKey::MICROSOFT.as_bytes(), &input), 0x323e8fc2);
/// ```
pub fn bitwise(key: &[u8], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    let mut k = (0..32).fold(0u32, |w, i| (w << 1) | key_bit(i));
    let mut result = 0;
    let mut next = 32;
    for byte in input {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= k;
            }
            k = (k << 1) | key_bit(next);
            next += 1;
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_reads_key_bits() {
        let k = RssKey::MICROSOFT;
        let k = k.as_bytes();
        assert_eq!(window(k, 0), 0x6d5a56da);
        assert_eq!(window(k, 8), 0x5a56da25);
        assert_eq!(window(k, 4), 0xd5a56da2);
        // Past the end: zero-filled.
        assert_eq!(window(k, 8 * 38), 0x01fa0000);
    }

    #[test]
    fn tables_match_bitwise_per_byte() {
        let key = RssKey::MICROSOFT;
        let t = Toeplitz::with_path(&key, Path::Portable).unwrap();
        for pos in [0usize, 5, 35] {
            for v in [1u8, 0x80, 0x5a, 0xff] {
                let mut input = [0u8; 36];
                input[pos] = v;
                assert_eq!(
                    t.hash_bytes(&input).unwrap(),
                    bitwise(key.as_bytes(), &input),
                    "pos {pos} value {v:#x}"
                );
            }
        }
    }

    #[test]
    fn input_too_long() {
        let t = Toeplitz::new(&RssKey::MICROSOFT);
        assert_eq!(
            t.hash_bytes(&[0; 37]),
            Err(ConfigError::InputTooLong { len: 37, max: 36 })
        );
        let t52 = Toeplitz::new(&RssKey::SYMMETRIC_52);
        assert!(t52.hash_bytes(&[1; 48]).is_ok());
        assert_eq!(t.hash_bytes(&[]), Ok(0));
    }
}
