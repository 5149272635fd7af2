//! Bounds-checked big-endian field access on frame bytes.
//!
//! GRO reads header fields at offsets the [`Layout`](linerate_wire::layout::Layout)
//! gives. Those offsets lie inside the frame once the layout has been checked against
//! it, so these helpers never miss in practice; they still never panic: a read
//! outside the buffer yields zero (or an empty slice) and a write outside it does
//! nothing.

/// The big-endian 16-bit word at `at`, or 0.
#[inline]
pub(super) fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at.wrapping_add(2)) {
        Some(&[x, y]) => u16::from_be_bytes([x, y]),
        _ => 0,
    }
}

/// The big-endian 32-bit word at `at`, or 0.
#[inline]
pub(super) fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at.wrapping_add(4)) {
        Some(&[w, x, y, z]) => u32::from_be_bytes([w, x, y, z]),
        _ => 0,
    }
}

/// The big-endian 64-bit word at `at`, or 0.
#[inline]
pub(super) fn be64(b: &[u8], at: usize) -> u64 {
    array::<8>(b, at).map_or(0, |x| u64::from_be_bytes(*x))
}

/// The `N` bytes at `at` as an array, whose fields then read without bounds
/// checks; `None` if they are not all in `b`.
#[inline(always)]
pub(super) fn array<const N: usize>(b: &[u8], at: usize) -> Option<&[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The big-endian 16-bit word at constant offset `$i` of a header array (see
/// [`array()`]): constant indices into an array are checked when compiling, so this
/// cannot panic.
macro_rules! hdr16 {
    ($h:expr, $i:expr) => {
        u16::from_be_bytes([$h[$i], $h[$i + 1]])
    };
}
pub(super) use hdr16;

/// The big-endian 32-bit word at constant offset `$i` of a header array.
macro_rules! hdr32 {
    ($h:expr, $i:expr) => {
        u32::from_be_bytes([$h[$i], $h[$i + 1], $h[$i + 2], $h[$i + 3]])
    };
}
pub(super) use hdr32;

/// `len` bytes at `at`, or an empty slice.
#[inline]
pub(super) fn slice(b: &[u8], at: usize, len: usize) -> &[u8] {
    b.get(at..at.wrapping_add(len)).unwrap_or_default()
}

/// Bytes from `from` to `to`, or an empty slice.
#[inline]
pub(super) fn range(b: &[u8], from: usize, to: usize) -> &[u8] {
    b.get(from..to).unwrap_or_default()
}

/// The 8 bytes at `at` as a native-endian word (for equality only), or 0.
#[inline(always)]
fn ne64(b: &[u8], at: usize) -> u64 {
    array::<8>(b, at).map_or(0, |x| u64::from_ne_bytes(*x))
}

/// The 4 bytes at `at` as a native-endian word (for equality only), or 0.
#[inline(always)]
fn ne32(b: &[u8], at: usize) -> u32 {
    array::<4>(b, at).map_or(0, |x| u32::from_ne_bytes(*x))
}

/// Byte equality, inlined for the short runs headers compare (MACs, addresses,
/// options) instead of a call to `memcmp`: two overlapping words from each end.
#[inline(always)]
pub(super) fn eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => ne32(a, 0) == ne32(b, 0) && ne32(a, n - 4) == ne32(b, n - 4),
        8..=16 => ne64(a, 0) == ne64(b, 0) && ne64(a, n - 8) == ne64(b, n - 8),
        17..=32 => {
            ne64(a, 0) == ne64(b, 0)
                && ne64(a, 8) == ne64(b, 8)
                && ne64(a, n - 16) == ne64(b, n - 16)
                && ne64(a, n - 8) == ne64(b, n - 8)
        }
        _ => a == b,
    }
}

/// Copies `src` into `dst` if they are as long; false (copying nothing) if not.
#[inline]
pub(super) fn copy(dst: &mut [u8], src: &[u8]) -> bool {
    if dst.len() != src.len() {
        return false;
    }
    dst.copy_from_slice(src);
    true
}

/// Writes a big-endian 16-bit word at `at` (nothing if out of bounds).
#[inline]
pub(super) fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(f) = b.get_mut(at..at.wrapping_add(2)) {
        f.copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_bounds_is_zero_and_harmless() {
        let mut b = [1u8, 2, 3];
        assert_eq!(be16(&b, 1), 0x0203);
        assert_eq!(be16(&b, 2), 0);
        assert_eq!(be32(&b, 0), 0);
        assert_eq!(be32(&b, usize::MAX), 0);
        assert_eq!(slice(&b, 2, 5), &[] as &[u8]);
        assert_eq!(range(&b, 2, 1), &[] as &[u8]);
        put16(&mut b, 2, 0xffff);
        assert_eq!(b, [1, 2, 3]);
        put16(&mut b, 0, 0xabcd);
        assert_eq!(b, [0xab, 0xcd, 3]);
    }

    #[test]
    fn eq_agrees_with_slice_equality() {
        let a: Vec<u8> = (0..40).collect();
        for n in 0..40 {
            for flip in 0..n {
                let mut b = a.clone();
                b[flip] ^= 0x10;
                assert!(!eq(&a[..n], &b[..n]), "{n} {flip}");
            }
            assert!(eq(&a[..n], &a[..n]));
            assert!(!eq(&a[..n], &a[..n + 1]));
        }
    }
}
