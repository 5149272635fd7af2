//! Rate limits on what the engine sends in answer to what it receives, so a
//! flood of input cannot turn the engine into an amplifier:
//!
//! * [`TokenBucket`]: ICMP error messages (RFC 1812 section 4.3.2.8 and RFC 4443
//!   section 2.4 (f) ask for a rate limit; the token bucket is RFC 4443's
//!   example, and Linux's `icmp_msgs_per_sec` / `icmp_msgs_burst`).
//! * [`PerSecond`]: challenge ACKs (RFC 5961 section 7: "limit the number of
//!   challenge ACKs ... per time unit"), at most `limit` in each one-second
//!   window of the engine's clock, as Linux's `tcp_challenge_ack_limit` counts
//!   them.
//!
//! Both only read the time they are given; neither needs a timer.

use crate::time::Instant;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A token bucket: `rate` tokens per second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    /// Tokens per second.
    rate: u64,
    /// Most tokens held, in nano-tokens.
    cap: u64,
    /// Tokens held, in nano-tokens (a token is 10^9 of them, so a refill over
    /// any interval is exact in integers).
    nanotokens: u64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: u32, burst: u32) -> TokenBucket {
        let cap = u64::from(burst.max(1)).saturating_mul(NANOS_PER_SEC);
        TokenBucket {
            rate: u64::from(rate),
            cap,
            nanotokens: cap,
            last: None,
        }
    }

    /// Takes a token if there is one at `now`.
    pub fn take(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last {
            let dt = now.as_nanos().saturating_sub(last.as_nanos());
            let add = dt.saturating_mul(self.rate);
            self.nanotokens = self.nanotokens.saturating_add(add).min(self.cap);
        }
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        if self.nanotokens >= NANOS_PER_SEC {
            self.nanotokens -= NANOS_PER_SEC;
            true
        } else {
            false
        }
    }
}

/// At most `limit` events per one-second window; a window starts at the first
/// event after the previous one ended.
#[derive(Debug, Clone)]
pub(crate) struct PerSecond {
    limit: u32,
    window_start: Option<Instant>,
    count: u32,
}

impl PerSecond {
    /// A limit of `limit` per second.
    pub fn new(limit: u32) -> PerSecond {
        PerSecond {
            limit,
            window_start: None,
            count: 0,
        }
    }

    /// True if one more event fits the window holding `now` (and counts it).
    pub fn allow(&mut self, now: Instant) -> bool {
        let expired = self
            .window_start
            .is_none_or(|s| now.as_nanos().saturating_sub(s.as_nanos()) >= NANOS_PER_SEC);
        if expired {
            self.window_start = Some(now);
            self.count = 0;
        }
        if self.count < self.limit {
            self.count += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_bursts_then_refills_at_rate() {
        let mut b = TokenBucket::new(10, 3);
        let t0 = Instant::from_millis(1000);
        assert_eq!((0..5).filter(|_| b.take(t0)).count(), 3);
        // 10 per second: one token every 100 ms.
        assert!(!b.take(t0 + std::time::Duration::from_millis(99)));
        assert!(b.take(t0 + std::time::Duration::from_millis(100)));
        assert!(!b.take(t0 + std::time::Duration::from_millis(150)));
        // A long pause refills to the burst, not beyond.
        let later = t0 + std::time::Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.take(later)).count(), 3);
        // Time going backwards gives nothing.
        assert!(!b.take(t0));
    }

    #[test]
    fn per_second_windows() {
        let mut l = PerSecond::new(2);
        let t = Instant::from_millis(500);
        assert!(l.allow(t) && l.allow(t) && !l.allow(t));
        assert!(!l.allow(t + std::time::Duration::from_millis(999)));
        assert!(l.allow(t + std::time::Duration::from_millis(1000)));
        let mut none = PerSecond::new(0);
        assert!(!none.allow(t));
    }
}
