//! A small seeded generator for reproducible faults: xoshiro256** (Blackman and
//! Vigna, 2018) seeded through SplitMix64, as its authors recommend. No OS
//! randomness anywhere: the same seed gives the same sequence on every machine.

/// SplitMix64 step: advances `state` and returns the next output.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// xoshiro256**.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose state is four SplitMix64 outputs from `seed`.
    pub(crate) fn new(seed: u64) -> Rng {
        let mut sm = seed;
        Rng {
            s: [
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
                splitmix64(&mut sm),
            ],
        }
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = self.s;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s1 << 17;
        let s2 = s2 ^ s0;
        let s3 = s3 ^ s1;
        let s1 = s1 ^ s2;
        let s0 = s0 ^ s3;
        let s2 = s2 ^ t;
        let s3 = s3.rotate_left(45);
        self.s = [s0, s1, s2, s3];
        result
    }

    /// A value in `0..n` (Lemire's multiply-high; the bias is below 2^-32 for the
    /// small `n` used here). `n == 0` gives 0.
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`.
    #[inline]
    pub(crate) fn chance(&mut self, p: Prob) -> bool {
        match p {
            Prob::Never => false,
            Prob::Always => true,
            Prob::Below(t) => self.next_u64() < t,
        }
    }
}

/// A probability prepared for [`Rng::chance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prob {
    /// 0: never draws.
    Never,
    /// 1: never draws.
    Always,
    /// True when a 64-bit draw is below this threshold (p * 2^64).
    Below(u64),
}

impl Prob {
    /// `p` clamped to 0..=1 (NaN is 0).
    pub(crate) fn new(p: f64) -> Prob {
        if p.is_nan() || p <= 0.0 {
            Prob::Never
        } else if p >= 1.0 {
            Prob::Always
        } else {
            // 2^64 as f64 is exact; the product is below 2^64 and the cast saturates.
            Prob::Below((p * 18_446_744_073_709_551_616.0) as u64)
        }
    }

    /// True unless the probability is 0.
    pub(crate) fn is_possible(self) -> bool {
        self != Prob::Never
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // First outputs of SplitMix64 seeded with 0 (Vigna's reference code).
        let mut s = 0;
        assert_eq!(splitmix64(&mut s), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(&mut s), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn xoshiro_reference_values() {
        // xoshiro256** with state {1, 2, 3, 4}: reference outputs.
        let mut r = Rng { s: [1, 2, 3, 4] };
        assert_eq!(r.next_u64(), 11_520);
        assert_eq!(r.next_u64(), 0);
        assert_eq!(r.next_u64(), 1_509_978_240);
        assert_eq!(r.next_u64(), 1_215_971_899_390_074_240);
    }

    #[test]
    fn chance_matches_probability() {
        let mut r = Rng::new(7);
        let p = Prob::new(0.25);
        let n = 200_000;
        let hits = (0..n).filter(|_| r.chance(p)).count() as f64;
        assert!((hits / n as f64 - 0.25).abs() < 0.01);
        assert!(!r.chance(Prob::new(0.0)));
        assert!(r.chance(Prob::new(1.0)));
        assert_eq!(Prob::new(f64::NAN), Prob::Never);
        assert!((0..1000).all(|_| r.below(10) < 10));
    }
}
