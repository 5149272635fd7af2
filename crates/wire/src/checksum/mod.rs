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
//!
//! # Kernels
//!
//! [`partial`] runs the fastest [`Implementation`] this CPU has ([`best`], detected
//! once at run time); [`partial_with`] runs a chosen one, for tests and benchmarks.
//! Both kernels sum the data as little-endian words and byte-swap the folded result,
//! which RFC 1071 section 2(B) shows equals the big-endian sum:
//!
//! * [`Implementation::Portable`]: safe Rust. Short inputs go through four chains of
//!   64-bit adds with end-around carry; longer ones through 32-bit words added into
//!   four 64-bit accumulators, a loop the compiler vectorises. Runs everywhere.
//! * [`Implementation::Avx2`]: x86_64 with AVX2, 128 bytes per iteration into 32-bit
//!   lanes that are widened before they can overflow.
//! * [`Implementation::Avx512`]: x86_64 with AVX-512 F, BW and VNNI, 64 bytes per
//!   vector in two instructions (a bias and `vpdpwssd`), aligned loads, and masked
//!   loads for the ragged ends instead of a scalar head and tail.
//!
//! The vector kernels are the only `unsafe` code of the checksum.
//!
//! [`partial`] hands inputs shorter than 128 bytes straight to the portable kernel:
//! below that, measured on an AMD EPYC (Zen), the vector kernels' set-up and final
//! reduction cost more than they save.
//!
//! [`partial_chunks`] sums the consecutive pieces of one buffer (the payloads of GSO
//! segments, say) in one call: one kernel choice for all of them, and with AVX-512
//! no scalar work at the pieces' edges.

#[cfg(test)]
mod tests;

#[cfg(target_arch = "x86_64")]
mod avx512;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use core::sync::atomic::{AtomicU8, Ordering};

/// A checksum kernel.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Implementation {
    /// Safe, portable Rust, word at a time. Always available.
    Portable,
    /// AVX2 (x86_64 only, detected at run time).
    Avx2,
    /// AVX-512 F, BW and VNNI (x86_64 only, detected at run time).
    Avx512,
}

impl Implementation {
    /// Every kernel this build knows, available on this CPU or not.
    pub const ALL: &'static [Implementation] = &[
        Implementation::Portable,
        Implementation::Avx2,
        Implementation::Avx512,
    ];

    /// True if this kernel runs on this CPU.
    pub fn is_available(self) -> bool {
        match self {
            Implementation::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Implementation::Avx2 => x86::available(),
            #[cfg(target_arch = "x86_64")]
            Implementation::Avx512 => avx512::available(),
            #[cfg(not(target_arch = "x86_64"))]
            Implementation::Avx2 | Implementation::Avx512 => false,
        }
    }

    /// A short lowercase name (`"portable"`, `"avx2"`, `"avx512"`), for benchmark and
    /// log labels.
    pub const fn name(self) -> &'static str {
        match self {
            Implementation::Portable => "portable",
            Implementation::Avx2 => "avx2",
            Implementation::Avx512 => "avx512",
        }
    }
}

/// Inputs shorter than this many bytes go straight to the portable kernel (module docs).
const SMALL: usize = 128;

/// The detected best kernel, plus one (0: not detected yet).
static BEST: AtomicU8 = AtomicU8::new(0);

/// The fastest kernel this CPU runs. Detected on the first call and cached.
#[inline]
pub fn best() -> Implementation {
    match BEST.load(Ordering::Relaxed) {
        1 => Implementation::Portable,
        2 => Implementation::Avx2,
        3 => Implementation::Avx512,
        _ => detect(),
    }
}

#[cold]
fn detect() -> Implementation {
    let imp = if Implementation::Avx512.is_available() {
        Implementation::Avx512
    } else if Implementation::Avx2.is_available() {
        Implementation::Avx2
    } else {
        Implementation::Portable
    };
    let code = match imp {
        Implementation::Avx512 => 3,
        Implementation::Avx2 => 2,
        Implementation::Portable => 1,
    };
    // Racing first calls all store the same value.
    BEST.store(code, Ordering::Relaxed);
    imp
}

/// The kernels this CPU runs, portable first, [`best`] last.
pub fn available() -> &'static [Implementation] {
    const PORTABLE_ONLY: &[Implementation] = &[Implementation::Portable];
    const AVX2: &[Implementation] = &[Implementation::Portable, Implementation::Avx2];
    const AVX512_ONLY: &[Implementation] = &[Implementation::Portable, Implementation::Avx512];
    match best() {
        Implementation::Avx512 if Implementation::Avx2.is_available() => Implementation::ALL,
        Implementation::Avx512 => AVX512_ONLY,
        Implementation::Avx2 => AVX2,
        Implementation::Portable => PORTABLE_ONLY,
    }
}

/// [`partial`] with a chosen kernel, whatever the input length. Returns `None`, rather
/// than quietly running another kernel, if `imp` does not run on this CPU (see
/// [`available`]).
#[inline]
pub fn partial_with(imp: Implementation, data: &[u8], initial: u32) -> Option<u32> {
    let sum = match imp {
        Implementation::Portable => portable::sum(data),
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx2 => x86::sum(data)?,
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx512 => avx512::sum(data)?,
        #[cfg(not(target_arch = "x86_64"))]
        Implementation::Avx2 | Implementation::Avx512 => return None,
    };
    Some(combine(initial, from_le_sum(sum)))
}

/// The sums of `data` cut into consecutive pieces of `size` bytes (the last
/// one may be shorter), in order into `sums`: `sums[k]` is
/// `partial(&data[k * size..][..size], 0)`, each piece summed as a buffer of its
/// own (its first byte is the high byte of its first word, whatever its offset).
/// Returns the number of pieces summed: all of them, or as many as `sums` holds;
/// none if `size` is 0 or `data` is empty.
///
/// One call for the payloads of a run of segments: the kernel is chosen once
/// ([`best`]), and the AVX-512 kernel sums each piece with no scalar work at its
/// edges.
#[inline]
pub fn partial_chunks(data: &[u8], size: usize, sums: &mut [u32]) -> usize {
    #[cfg(target_arch = "x86_64")]
    match best() {
        Implementation::Avx512 => {
            if let Some(n) = avx512::chunk_sums(data, size, sums) {
                return n;
            }
        }
        Implementation::Avx2 if size >= SMALL => {
            if let Some(n) = x86::chunk_sums(data, size, sums) {
                return n;
            }
        }
        _ => {}
    }
    portable_chunk_sums(data, size, sums)
}

/// [`partial_chunks`] with a chosen kernel, whatever the piece size, or `None`
/// if `imp` does not run on this CPU (see [`available`]).
pub fn partial_chunks_with(
    imp: Implementation,
    data: &[u8],
    size: usize,
    sums: &mut [u32],
) -> Option<usize> {
    match imp {
        Implementation::Portable => Some(portable_chunk_sums(data, size, sums)),
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx2 => x86::chunk_sums(data, size, sums),
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx512 => avx512::chunk_sums(data, size, sums),
        #[cfg(not(target_arch = "x86_64"))]
        Implementation::Avx2 | Implementation::Avx512 => None,
    }
}

/// [`partial_chunks`] by the portable kernel.
fn portable_chunk_sums(data: &[u8], size: usize, sums: &mut [u32]) -> usize {
    if size == 0 {
        return 0;
    }
    let mut n = 0;
    for (out, chunk) in sums.iter_mut().zip(data.chunks(size)) {
        *out = from_le_sum(portable::sum(chunk));
        n += 1;
    }
    n
}

/// Adds two 64-bit one's-complement sums with end-around carry.
#[inline(always)]
const fn add64(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u64
}

/// Turns a kernel's little-endian word sum into a network-order 16-bit sum (as a
/// `u32`, ready for [`combine`]). Zero stays zero, so an all-zero buffer adds nothing.
#[inline(always)]
const fn from_le_sum(sum: u64) -> u32 {
    fold64(sum).swap_bytes() as u32
}

/// Folds a 64-bit one's-complement sum to 16 bits (zero only if `sum` is zero).
#[inline(always)]
const fn fold64(sum: u64) -> u16 {
    let s = (sum & 0xffff_ffff) + (sum >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    fold(s as u32)
}

/// Adds `data`, read as big-endian 16-bit words (a trailing odd byte is padded with
/// zero), to the running sum `initial`, and returns the new unfolded sum.
#[inline]
pub fn partial(data: &[u8], initial: u32) -> u32 {
    let sum = if data.len() < SMALL {
        portable::sum(data)
    } else {
        sum_best(data)
    };
    combine(initial, from_le_sum(sum))
}

/// Copies `src` into the front of `dst` and adds `src` to the running sum
/// `initial`, as [`partial`] would, in one pass over the data: the copy a
/// segmenter or a receive path makes anyway also yields the checksum. Returns
/// `None` (copying nothing) if `dst` is shorter than `src`.
#[inline]
pub fn copy_partial(dst: &mut [u8], src: &[u8], initial: u32) -> Option<u32> {
    let dst = dst.get_mut(..src.len())?;
    #[cfg(target_arch = "x86_64")]
    if src.len() >= SMALL
        && best() != Implementation::Portable
        && let Some(s) = x86::copy_sum(dst, src)
    {
        return Some(combine(initial, from_le_sum(s)));
    }
    dst.copy_from_slice(src);
    Some(partial(dst, initial))
}

/// [`copy_partial`] with a chosen kernel, whatever the input length. Returns
/// `None` (copying nothing) if `imp` does not run on this CPU or `dst` is
/// shorter than `src`.
///
/// AVX-512 copies with the AVX2 kernel: one with 64-byte stores aligned to the
/// destination (masked at the edges, or whole unaligned edge vectors, since
/// masked stores are slow on AMD's Zen 4) made the offloads-off column dearer
/// per byte than AVX2's, where the copy is bound by the memory the payload
/// comes from (`cargo bench --bench checksum -- copy_checksum`, and
/// `offload_report -- --only linerate-off`).
pub fn copy_partial_with(
    imp: Implementation,
    dst: &mut [u8],
    src: &[u8],
    initial: u32,
) -> Option<u32> {
    let dst = dst.get_mut(..src.len())?;
    let sum = match imp {
        Implementation::Portable => {
            dst.copy_from_slice(src);
            portable::sum(src)
        }
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx2 => x86::copy_sum(dst, src)?,
        #[cfg(target_arch = "x86_64")]
        Implementation::Avx512 if avx512::available() => x86::copy_sum(dst, src)?,
        _ => return None,
    };
    Some(combine(initial, from_le_sum(sum)))
}

/// The little-endian word sum of `data` by the [`best`] kernel.
#[inline]
fn sum_best(data: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    match best() {
        Implementation::Avx512 => {
            if let Some(s) = avx512::sum(data) {
                return s;
            }
        }
        Implementation::Avx2 => {
            if let Some(s) = x86::sum(data) {
                return s;
            }
        }
        Implementation::Portable => {}
    }
    portable::sum(data)
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
    // Six values below 2^16: the plain sum cannot overflow.
    u32::from(u16::from_be_bytes([src[0], src[1]]))
        + u32::from(u16::from_be_bytes([src[2], src[3]]))
        + u32::from(u16::from_be_bytes([dst[0], dst[1]]))
        + u32::from(u16::from_be_bytes([dst[2], dst[3]]))
        + u32::from(protocol)
        + u32::from(l4_len)
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
///
/// This gives the same value as recomputing the checksum from scratch, including
/// RFC 1624 section 3's example where the result is `0x0000` (RFC 1141's equation 2
/// gives `0xffff` there), with one exception no incremental formula can avoid: if
/// the covered data, pseudo-header included, is all zeros after the change, the
/// recomputed field is `0xffff` but this returns `0x0000` (`check`, `old` and `new`
/// cannot tell that case from one whose sum is `0xffff`). TCP and UDP (the protocol
/// number is in the pseudo-header) and IPv4 (the version field) never cover all-zero
/// data; an ICMP echo message with zero identifier, sequence number and no data does.
/// Over UDP, a result of `0x0000` must still be sent as `0xffff` (RFC 768), and a
/// field of `0x0000` ("no checksum") must not be updated at all.
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
