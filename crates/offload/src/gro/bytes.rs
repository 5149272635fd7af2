//! Bounds-checked big-endian field access on frame bytes.
//!
//! GRO reads header fields at offsets the [`Layout`](linerate_wire::layout::Layout)
//! gives. Those offsets lie inside the frame once the layout has been checked against
//! it, so these helpers never miss in practice; they still never panic: a read
//! outside the buffer yields zero (or an empty slice) and a write outside it does
//! nothing.

/// The byte at `at`, or 0.
#[inline]
pub(super) fn u8_at(b: &[u8], at: usize) -> u8 {
    b.get(at).copied().unwrap_or(0)
}

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
    match b.get(at..at.wrapping_add(8)) {
        Some(s) => {
            let mut x = [0u8; 8];
            x.copy_from_slice(s);
            u64::from_be_bytes(x)
        }
        None => 0,
    }
}

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
        assert_eq!(u8_at(&b, 9), 0);
    }
}
