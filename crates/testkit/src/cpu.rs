//! CPU time of the calling thread (`getrusage(RUSAGE_THREAD)`), for reports that
//! give CPU seconds per gigabyte next to wall-clock throughput.

use std::time::Duration;

/// User and system CPU time the calling thread has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel on the thread's behalf.
    pub system: Duration,
}

impl CpuTime {
    /// User plus system time.
    pub fn total(&self) -> Duration {
        self.user + self.system
    }

    /// The CPU time used between `earlier` and `self`.
    pub fn since(&self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
        }
    }
}

fn duration(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// The calling thread's CPU time (Linux: `RUSAGE_THREAD`; elsewhere the whole
/// process's, `RUSAGE_SELF`). Zero if the call fails.
#[allow(unsafe_code)]
pub fn thread_cpu_time() -> CpuTime {
    #[cfg(target_os = "linux")]
    let who = libc::RUSAGE_THREAD;
    #[cfg(not(target_os = "linux"))]
    let who = libc::RUSAGE_SELF;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage` (zeroed, so initialised even
    // if the call fails); getrusage only writes into it.
    let rc = unsafe { libc::getrusage(who, usage.as_mut_ptr()) };
    if rc != 0 {
        return CpuTime::default();
    }
    // SAFETY: zero-initialised above, and getrusage filled it in on success.
    let usage = unsafe { usage.assume_init() };
    CpuTime {
        user: duration(usage.ru_utime),
        system: duration(usage.ru_stime),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_work_uses_cpu_time() {
        let before = thread_cpu_time();
        let mut x = 0u64;
        let start = std::time::Instant::now();
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let used = thread_cpu_time().since(before).total();
        assert!(used > Duration::from_millis(5), "{used:?}");
    }
}
