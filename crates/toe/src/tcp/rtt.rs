//! The retransmission timer's estimator (RFC 6298 sections 2 and 5).
//!
//! SRTT and RTTVAR follow section 2.2/2.3 with alpha = 1/8 and beta = 1/4;
//! RTO = SRTT + max(G, 4 * RTTVAR), at least the configured minimum (section 2.4;
//! RFC 6298 says 1 s, Linux uses 200 ms) and at most the maximum (at least 60 s).
//! Before the first sample RTO is 1 s (section 2.1). Each expiry doubles it
//! ([`RttEstimator::back_off`], section 5.5) until a new sample arrives. Samples
//! come from the timestamp echo (RFC 7323 section 4) or, without timestamps, from
//! one timed segment at a time that was not retransmitted (Karn's algorithm,
//! section 3).

use std::time::Duration;

/// Clock granularity G (timestamps tick in milliseconds), in nanoseconds.
const GRANULARITY_NS: u128 = 1_000_000;
/// Initial RTO (RFC 6298 section 2.1).
pub const INITIAL_RTO: Duration = Duration::from_secs(1);

/// SRTT, RTTVAR and the current RTO with its backoff.
///
/// SRTT and RTTVAR are kept in nanoseconds: a sample costs a few integer
/// operations rather than `Duration`'s seconds-and-nanoseconds arithmetic, with
/// the same results (its divisions by 2, 4 and 8 round down exactly as these
/// do). Samples are the difference of two nanosecond [`crate::Instant`]s or a
/// timestamp echo, so they fit in 64 bits; a longer one (no clock gives one)
/// counts as the longest that fits.
#[derive(Debug, Clone, PartialEq)]
pub struct RttEstimator {
    /// SRTT in nanoseconds, once there is a sample.
    srtt: Option<u64>,
    /// RTTVAR in nanoseconds.
    rttvar: u64,
    rto: Duration,
    min_rto: Duration,
    max_rto: Duration,
    backoff: u32,
}

/// `ns` nanoseconds.
fn duration(ns: u128) -> Duration {
    match u64::try_from(ns) {
        Ok(n) => Duration::from_nanos(n),
        Err(_) => Duration::new((ns / 1_000_000_000) as u64, (ns % 1_000_000_000) as u32),
    }
}

impl RttEstimator {
    /// No sample yet: RTO is [`INITIAL_RTO`] (clamped to the bounds). A zero
    /// `min_rto` counts as 1 ns and a `max_rto` below it as `min_rto`, so the
    /// timer always moves forward (a zero RTO would fire again at the same
    /// instant for ever).
    pub fn new(min_rto: Duration, max_rto: Duration) -> RttEstimator {
        let min_rto = min_rto.max(Duration::from_nanos(1));
        RttEstimator {
            srtt: None,
            rttvar: 0,
            rto: INITIAL_RTO.clamp(min_rto, max_rto.max(min_rto)),
            min_rto,
            max_rto: max_rto.max(min_rto),
            backoff: 0,
        }
    }

    /// Takes a round-trip sample `r` (RFC 6298 section 2.2 / 2.3) and clears the backoff.
    pub fn sample(&mut self, r: Duration) {
        let r = u64::try_from(r.as_nanos()).unwrap_or(u64::MAX);
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(srtt) => {
                let err = u128::from(srtt.abs_diff(r));
                // Both stay within the larger of their old value and the
                // sample, so within 64 bits.
                self.rttvar = ((u128::from(self.rttvar) * 3 + err) / 4) as u64;
                ((u128::from(srtt) * 7 + u128::from(r)) / 8) as u64
            }
        };
        self.srtt = Some(srtt);
        let rto = u128::from(srtt) + GRANULARITY_NS.max(u128::from(self.rttvar) * 4);
        self.rto = if rto <= self.min_rto.as_nanos() {
            self.min_rto
        } else if rto >= self.max_rto.as_nanos() {
            self.max_rto
        } else {
            duration(rto)
        };
        self.backoff = 0;
    }

    /// SRTT, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// RTTVAR.
    #[cfg(test)]
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// The upper bound of the RTO, backed off or not.
    pub fn max_rto(&self) -> Duration {
        self.max_rto
    }

    /// The timeout to arm now: RTO doubled once per expiry since the last sample,
    /// at most the maximum.
    pub fn rto(&self) -> Duration {
        let factor = 1u32 << self.backoff.min(16);
        self.rto.saturating_mul(factor).min(self.max_rto)
    }

    /// Backs the timer off after an expiry (RFC 6298 section 5.5).
    pub fn back_off(&mut self) {
        self.backoff = self.backoff.saturating_add(1);
    }

    /// Number of expiries since the last sample.
    #[cfg(test)]
    pub fn backoffs(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(Duration::from_millis(200), Duration::from_secs(60))
    }

    /// Bounds a configuration should not have (zero, or in the wrong order)
    /// still give a timer that moves forward: a zero RTO, or a probe interval
    /// capped at a zero `max_rto`, fired again at the same instant for ever
    /// (found by the any-config proptest as a hang in `handle_timeout`).
    #[test]
    fn bad_bounds_still_give_a_positive_timeout() {
        let mut e = RttEstimator::new(Duration::ZERO, Duration::ZERO);
        assert!(e.rto() > Duration::ZERO);
        e.sample(Duration::ZERO);
        assert!(e.rto() > Duration::ZERO);
        let e = RttEstimator::new(Duration::from_millis(600), Duration::ZERO);
        assert_eq!(e.max_rto(), Duration::from_millis(600));
        assert_eq!(e.rto(), Duration::from_millis(600));
    }

    /// RFC 6298 in `Duration` arithmetic, as the estimator computed it before
    /// it kept nanoseconds: (SRTT, RTTVAR, RTO) after `samples`.
    fn reference(
        min_rto: Duration,
        max_rto: Duration,
        samples: &[Duration],
    ) -> (Option<Duration>, Duration, Duration) {
        let max_rto = max_rto.max(min_rto);
        let (mut srtt, mut rttvar) = (None::<Duration>, Duration::ZERO);
        let mut rto = INITIAL_RTO.clamp(min_rto, max_rto);
        for &r in samples {
            match srtt {
                None => {
                    srtt = Some(r);
                    rttvar = r / 2;
                }
                Some(s) => {
                    rttvar = (rttvar * 3 + s.abs_diff(r)) / 4;
                    srtt = Some((s * 7 + r) / 8);
                }
            }
            let s = srtt.unwrap_or(r);
            rto = (s + Duration::from_millis(1).max(rttvar * 4)).clamp(min_rto, max_rto);
        }
        (srtt, rttvar, rto)
    }

    proptest::proptest! {
        /// The nanosecond arithmetic gives what `Duration`'s gives, sample by
        /// sample, from microseconds to days and with any bounds.
        #[test]
        fn matches_the_duration_arithmetic(
            min_ns in 0u64..2_000_000_000,
            max_ns in 0u64..200_000_000_000_000,
            samples in proptest::collection::vec(
                proptest::prop_oneof![0u64..5_000_000, 0u64..100_000_000_000_000],
                1..20,
            ),
        ) {
            let (min_rto, max_rto) = (Duration::from_nanos(min_ns), Duration::from_nanos(max_ns));
            let mut e = RttEstimator::new(min_rto, max_rto);
            let samples: Vec<Duration> = samples.into_iter().map(Duration::from_nanos).collect();
            for k in 1..=samples.len() {
                e.sample(samples[k - 1]);
                let (srtt, rttvar, rto) = reference(min_rto, max_rto, &samples[..k]);
                proptest::prop_assert_eq!(e.srtt(), srtt);
                proptest::prop_assert_eq!(e.rttvar(), rttvar);
                proptest::prop_assert_eq!(e.rto(), rto);
            }
        }
    }

    #[test]
    fn first_and_later_samples() {
        let mut e = est();
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.sample(Duration::from_millis(100));
        // SRTT = 100, RTTVAR = 50, RTO = 100 + 200 = 300 ms.
        assert_eq!(e.srtt(), Some(Duration::from_millis(100)));
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.sample(Duration::from_millis(100));
        // RTTVAR = 3/4 * 50 = 37.5, RTO = 100 + 150 = 250 ms.
        assert_eq!(e.rttvar(), Duration::from_micros(37_500));
        assert_eq!(e.rto(), Duration::from_millis(250));
    }

    #[test]
    fn minimum_and_backoff() {
        let mut e = est();
        e.sample(Duration::from_millis(1));
        assert_eq!(e.rto(), Duration::from_millis(200));
        e.back_off();
        e.back_off();
        assert_eq!(e.rto(), Duration::from_millis(800));
        for _ in 0..40 {
            e.back_off();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
        e.sample(Duration::from_millis(1));
        assert_eq!(e.backoffs(), 0);
    }
}
