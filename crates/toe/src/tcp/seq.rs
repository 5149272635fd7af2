//! Sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293 section 3.4).
//!
//! `a < b` means `b` is ahead of `a` by less than 2^31; the comparison is only
//! meaningful between numbers within 2^31 of each other, which the window limits
//! (RFC 7323 section 2.3: at most 2^30 bytes) guarantee for a connection.

use core::cmp::Ordering;
use core::fmt;

/// A TCP sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Seq(pub u32);

impl Seq {
    /// `self + n`, wrapping. `n` is a byte count below 2^31 on every use.
    #[inline]
    pub fn plus(self, n: usize) -> Seq {
        Seq(self.0.wrapping_add(n as u32))
    }

    /// `self - n`, wrapping.
    #[inline]
    pub fn minus(self, n: usize) -> Seq {
        Seq(self.0.wrapping_sub(n as u32))
    }

    /// The signed distance from `other` to `self` (`self - other`).
    #[inline]
    pub fn diff(self, other: Seq) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// `self - other` as a byte count, or 0 if `self` is not after `other`.
    #[inline]
    pub fn since(self, other: Seq) -> usize {
        usize::try_from(self.diff(other)).unwrap_or(0)
    }

    /// The later of the two.
    #[inline]
    pub fn max(self, other: Seq) -> Seq {
        if self.diff(other) >= 0 { self } else { other }
    }

    /// The earlier of the two.
    #[inline]
    pub fn min(self, other: Seq) -> Seq {
        if self.diff(other) <= 0 { self } else { other }
    }

    /// True if `lo <= self < hi`.
    #[inline]
    pub fn in_range(self, lo: Seq, hi: Seq) -> bool {
        lo <= self && self < hi
    }
}

impl PartialOrd for Seq {
    #[inline]
    fn partial_cmp(&self, other: &Seq) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl fmt::Debug for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let a = Seq(u32::MAX - 1);
        let b = a.plus(4);
        assert_eq!(b, Seq(2));
        assert!(a < b);
        assert!(b > a);
        assert_eq!(b.diff(a), 4);
        assert_eq!(b.since(a), 4);
        assert_eq!(a.since(b), 0);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
        assert!(Seq(0).in_range(a, b));
        assert!(!b.in_range(a, b));
        assert_eq!(b.minus(4), a);
    }
}
