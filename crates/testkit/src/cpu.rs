//! CPU time of the calling thread (or the whole process), for reports that give CPU seconds per gigabyte
//! next to wall-clock throughput: the user/system split from
//! `getrusage(RUSAGE_THREAD)`, and the total from `CLOCK_THREAD_CPUTIME_ID`, which
//! the scheduler keeps in nanoseconds (getrusage's figures move in whole ticks on
//! most kernels, too coarse for a cell that runs a tenth of a second).

use std::time::Duration;

/// User and system CPU time the calling thread has used so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTime {
    /// Time in user mode.
    pub user: Duration,
    /// Time in the kernel on the thread's behalf.
    pub system: Duration,
    /// Both, from the thread's CPU-time clock (zero where that clock is missing).
    pub clock: Duration,
}

impl CpuTime {
    /// User plus system time: the CPU-time clock's reading where there is one.
    pub fn total(&self) -> Duration {
        if self.clock.is_zero() {
            self.user + self.system
        } else {
            self.clock
        }
    }

    /// The CPU time used between `earlier` and `self`.
    pub fn since(&self, earlier: CpuTime) -> CpuTime {
        CpuTime {
            user: self.user.saturating_sub(earlier.user),
            system: self.system.saturating_sub(earlier.system),
            clock: self.clock.saturating_sub(earlier.clock),
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
pub fn thread_cpu_time() -> CpuTime {
    #[cfg(target_os = "linux")]
    let who = libc::RUSAGE_THREAD;
    #[cfg(not(target_os = "linux"))]
    let who = libc::RUSAGE_SELF;
    usage(who, libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The whole process's CPU time, all threads, including what the kernel did in
/// their system calls (work the kernel defers to its own threads, such as
/// softirq processing in ksoftirqd, is not in it). Zero if the call fails.
pub fn process_cpu_time() -> CpuTime {
    usage(libc::RUSAGE_SELF, libc::CLOCK_PROCESS_CPUTIME_ID)
}

#[allow(unsafe_code)]
fn usage(who: libc::c_int, clock_id: libc::clockid_t) -> CpuTime {
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
        clock: clock(clock_id),
    }
}

/// A CPU-time clock's reading, or zero if the call fails.
#[allow(unsafe_code)]
fn clock(id: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
    Duration::new(secs, nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// Spins until the calling thread's CPU-time clock has grown by `d` (not for
    /// `d` of wall time, which a loaded machine may give the thread only a
    /// fraction of), or `cap` of wall time passes. Returns the thread's CPU time
    /// used and the wall time taken.
    fn spin_cpu(d: Duration, cap: Duration) -> (CpuTime, Duration) {
        let (before, start) = (thread_cpu_time(), Instant::now());
        let mut x = 0u64;
        loop {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            let used = thread_cpu_time().since(before);
            if used.total() >= d || start.elapsed() >= cap {
                return (used, start.elapsed());
            }
        }
    }

    /// The CPU-time clock moves with work, getrusage's user + system agrees with
    /// it (it moves in coarser steps), and neither runs ahead of the wall clock.
    #[test]
    fn busy_work_uses_cpu_time() {
        let (used, wall) = spin_cpu(Duration::from_millis(30), Duration::from_secs(20));
        assert!(
            used.clock >= Duration::from_millis(30),
            "clock stuck: {used:?} in {wall:?}"
        );
        let rusage = used.user + used.system;
        assert!(
            rusage >= Duration::from_millis(20) && rusage <= wall + Duration::from_millis(5),
            "getrusage {rusage:?} against clock {:?}, wall {wall:?}",
            used.clock
        );
        assert!(
            used.clock <= wall + Duration::from_millis(1),
            "{used:?} > {wall:?}"
        );
    }

    /// Another thread's work counts for the process, not for this thread.
    #[test]
    fn process_time_includes_other_threads() {
        let (me, all) = (thread_cpu_time(), process_cpu_time());
        let child = std::thread::spawn(|| {
            spin_cpu(Duration::from_millis(40), Duration::from_secs(20))
                .0
                .total()
        })
        .join()
        .unwrap_or_default();
        let mine = thread_cpu_time().since(me).total();
        let process = process_cpu_time().since(all).total();
        assert!(child >= Duration::from_millis(40), "child thread {child:?}");
        assert!(
            process >= child,
            "process {process:?} < child thread {child:?}"
        );
        assert!(mine < child / 2, "this thread {mine:?}, child {child:?}");
    }
}
