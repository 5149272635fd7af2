//! Virtual time: the engine has no clock of its own.
//!
//! Every entry point takes the current [`Instant`] as an argument, so a simulation
//! can run hours of TCP timers in milliseconds of real time, and a runtime can pass
//! a monotonic clock. An `Instant` is a count of nanoseconds since an arbitrary
//! epoch chosen by the caller (zero in simulations).

use core::ops::{Add, AddAssign, Sub};
use std::time::Duration;

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

    /// `us` microseconds after the epoch (saturating).
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us.saturating_mul(1_000))
    }

    /// `ms` milliseconds after the epoch (saturating).
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds since the epoch.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Whole milliseconds since the epoch.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
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

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturates at the epoch.
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturates at zero.
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// The earlier of two optional deadlines. Without branches (a deadline that
/// is absent counts as the end of time, and the result is absent only when
/// both are): connections fold five or six of them after every event.
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    let x = a.map_or(u64::MAX, |t| t.0);
    let y = b.map_or(u64::MAX, |t| t.0);
    if a.is_none() && b.is_none() {
        None
    } else {
        Some(Instant(x.min(y)))
    }
}

/// The earliest of any number of optional deadlines, folded as nanoseconds
/// with a flag for whether any was present (the end of time is itself a
/// deadline): no `Option` is rebuilt between steps, as chained [`earliest`]
/// calls do. [`Earliest::get`] is what folding them with [`earliest`] gives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Earliest {
    at: u64,
    any: bool,
}

impl Earliest {
    /// No deadline yet.
    pub const NONE: Earliest = Earliest {
        at: u64::MAX,
        any: false,
    };

    /// Adds `t`, if present.
    #[inline(always)]
    pub fn with(self, t: Option<Instant>) -> Earliest {
        Earliest {
            at: self.at.min(t.map_or(u64::MAX, |t| t.0)),
            any: self.any | t.is_some(),
        }
    }

    /// The earliest deadline added, if any was.
    #[inline(always)]
    pub fn get(self) -> Option<Instant> {
        self.any.then_some(Instant(self.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_micros(6_000));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(
            Instant::from_nanos(u64::MAX) + Duration::from_secs(1),
            Instant::from_nanos(u64::MAX)
        );
        assert_eq!(earliest(Some(t), None), Some(t));
        assert_eq!(earliest(Some(t), Some(Instant::ZERO)), Some(Instant::ZERO));
    }

    /// Deadlines at the edges: none, the start, the end of time and next to them.
    const EDGES: [Option<Instant>; 6] = [
        None,
        Some(Instant::ZERO),
        Some(Instant::from_nanos(1)),
        Some(Instant::from_millis(7)),
        Some(Instant::from_nanos(u64::MAX - 1)),
        Some(Instant::from_nanos(u64::MAX)),
    ];

    /// Against the obvious definition (the minimum of those present), with
    /// the end of time among the values.
    #[test]
    fn earliest_is_the_minimum_of_those_present() {
        let values = EDGES;
        for a in values {
            for b in values {
                let want = [a, b].into_iter().flatten().min();
                assert_eq!(earliest(a, b), want, "{a:?} {b:?}");
            }
        }
    }

    /// Against the minimum of those present, and against folding with
    /// [`earliest`], over every sequence of up to four values drawn from
    /// edge cases (the end of time among them).
    #[test]
    fn earliest_fold_matches_model() {
        let values = EDGES;
        let n = values.len();
        for len in 0..=4u32 {
            for code in 0..n.pow(len) {
                let mut seq = Vec::new();
                let mut c = code;
                for _ in 0..len {
                    seq.push(values[c % n]);
                    c /= n;
                }
                let want = seq.iter().flatten().min().copied();
                let folded = seq.iter().fold(None, |a, &b| earliest(a, b));
                let ours = seq.iter().fold(Earliest::NONE, |a, &b| a.with(b)).get();
                assert_eq!(ours, want, "{seq:?}");
                assert_eq!(ours, folded, "{seq:?}");
            }
        }
    }
}
