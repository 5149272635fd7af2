//! Time as the caller tells it: the client has no clock of its own.
//!
//! Every entry point takes the current [`Instant`], a count of nanoseconds
//! since an epoch the caller picks (zero in simulations, the runtime's start
//! in `linerate-rt`), so retransmissions and lease timers run in simulated time in
//! tests and on a monotonic clock in production.

use core::ops::{Add, Sub};
use core::time::Duration;

/// A point in time, in nanoseconds since the caller's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    /// `ms` milliseconds after the epoch (saturating).
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The time from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the largest representable instant.
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the epoch.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}
