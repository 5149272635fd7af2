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

/// Clock granularity G (timestamps tick in milliseconds).
const GRANULARITY: Duration = Duration::from_millis(1);
/// Initial RTO (RFC 6298 section 2.1).
pub const INITIAL_RTO: Duration = Duration::from_secs(1);

/// SRTT, RTTVAR and the current RTO with its backoff.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    min_rto: Duration,
    max_rto: Duration,
    backoff: u32,
}

impl RttEstimator {
    /// No sample yet: RTO is [`INITIAL_RTO`] (clamped to the bounds).
    pub fn new(min_rto: Duration, max_rto: Duration) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: Duration::ZERO,
            rto: INITIAL_RTO.clamp(min_rto, max_rto.max(min_rto)),
            min_rto,
            max_rto: max_rto.max(min_rto),
            backoff: 0,
        }
    }

    /// Takes a round-trip sample `r` (RFC 6298 section 2.2 / 2.3) and clears the backoff.
    pub fn sample(&mut self, r: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(r);
                self.rttvar = (self.rttvar * 3 + err) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(r);
        let rto = srtt + GRANULARITY.max(self.rttvar * 4);
        self.rto = rto.clamp(self.min_rto, self.max_rto);
        self.backoff = 0;
    }

    /// SRTT, once there is a sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// RTTVAR.
    pub fn rttvar(&self) -> Duration {
        self.rttvar
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
