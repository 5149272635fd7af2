//! Readiness: how a driver learns that a queue may have frames to receive.
//!
//! A backend backed by a kernel object (TAP, AF_XDP) hands out its file
//! descriptor: register it with epoll, `poll(2)` or tokio's `AsyncFd`. The memory
//! backend hands out a [`Notify`]: a single-permit signal that wakes a registered
//! [`Waker`] (async drivers) or a blocked thread (poll loops). Neither needs a
//! runtime, so this crate depends on none.
//!
//! Readiness is a hint: after it fires, receive until the queue is empty, then
//! wait again. Spurious wake-ups are allowed; lost ones are not.

use crate::buf::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A single-permit wake-up signal (like tokio's `Notify`, without a runtime).
///
/// [`Notify::notify`] stores a permit and wakes whoever waits; a wait consumes the
/// permit, returning at once if one is stored. So a notification that arrives
/// between "queue found empty" and "start waiting" is not lost.
#[derive(Debug, Default)]
pub struct Notify {
    permit: AtomicBool,
    waiting: AtomicBool,
    waker: Mutex<Option<Waker>>,
    cond: Condvar,
}

impl Notify {
    /// A signal without a permit.
    pub fn new() -> Notify {
        Notify::default()
    }

    /// Stores the permit and wakes the registered waker and any blocked thread.
    ///
    /// The lock is only taken to order this call after a waiter's last look at
    /// the permit (it looks holding the lock, and releases it only inside
    /// `Condvar::wait`): the condition variable is signalled once it is
    /// released, so the woken thread does not run straight into the lock still
    /// held here and sleep on it again (a second sleep and wake-up per signal).
    pub fn notify(&self) {
        self.permit.store(true, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) {
            let waker = {
                let mut w = lock(&self.waker);
                self.waiting.store(false, Ordering::SeqCst);
                w.take()
            };
            self.cond.notify_all();
            if let Some(w) = waker {
                w.wake();
            }
        }
    }

    /// Consumes the permit if one is stored.
    pub fn try_take(&self) -> bool {
        self.permit.swap(false, Ordering::SeqCst)
    }

    /// Ready once a permit is stored (consuming it); otherwise registers `cx`'s
    /// waker, replacing any earlier one, and returns `Pending`.
    pub fn poll_notified(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.try_take() {
            return Poll::Ready(());
        }
        {
            let mut w = lock(&self.waker);
            match &mut *w {
                Some(old) if old.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            self.waiting.store(true, Ordering::SeqCst);
        }
        if self.try_take() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    /// Blocks until a permit is stored (consuming it, `true`) or `timeout` passes
    /// (`false`).
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = lock(&self.waker);
        loop {
            if self.try_take() {
                return true;
            }
            self.waiting.store(true, Ordering::SeqCst);
            if self.try_take() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            guard = match self.cond.wait_timeout(guard, deadline - now) {
                Ok((g, _)) => g,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// What to wait on for a queue's receive side.
#[derive(Debug, Clone)]
pub enum Readiness {
    /// A file descriptor that polls readable (`POLLIN`) when frames wait. It stays
    /// valid as long as the NIC that returned it.
    #[cfg(target_os = "linux")]
    Fd(std::os::fd::RawFd),
    /// A signal the backend notifies when it queues frames.
    Notify(Arc<Notify>),
}

impl Readiness {
    /// Blocks until the queue may have frames or `timeout` passes; `Ok(true)` if
    /// it became ready. For simple poll loops and tests.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        match self {
            #[cfg(target_os = "linux")]
            Readiness::Fd(fd) => crate::sys::poll_readable(*fd, timeout),
            Readiness::Notify(n) => Ok(n.wait_timeout(timeout)),
        }
    }
}

/// Blocks until one of `set` may have frames or `timeout` passes; `Ok(true)` if
/// one became ready (a notify's permit is consumed). For loops that serve
/// several NICs from one thread, such as a bridge or a tunnel endpoint.
///
/// Descriptors alone are waited on with one `poll(2)`; notifies alone by
/// parking the thread with a waker on each. A mix is waited on in slices of at
/// most a millisecond (a parked thread cannot also sleep in `poll(2)`).
pub fn wait_any(set: &[Readiness], timeout: Duration) -> std::io::Result<bool> {
    #[cfg(target_os = "linux")]
    let fds: Vec<std::os::fd::RawFd> = set
        .iter()
        .filter_map(|r| match r {
            Readiness::Fd(fd) => Some(*fd),
            Readiness::Notify(_) => None,
        })
        .collect();
    #[cfg(not(target_os = "linux"))]
    let fds: Vec<i32> = Vec::new();
    let notifies: Vec<&Arc<Notify>> = set
        .iter()
        .filter_map(|r| match r {
            Readiness::Notify(n) => Some(n),
            #[allow(unreachable_patterns)]
            _ => None,
        })
        .collect();
    if notifies.is_empty() {
        #[cfg(target_os = "linux")]
        return crate::sys::poll_any_readable(&fds, timeout);
        #[cfg(not(target_os = "linux"))]
        {
            std::thread::sleep(timeout);
            return Ok(false);
        }
    }
    let deadline = Instant::now() + timeout;
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if fds.is_empty() {
            if notifies.iter().any(|n| n.poll_notified(&mut cx).is_ready()) {
                return Ok(true);
            }
        } else if notifies.iter().any(|n| n.try_take()) {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        let left = deadline - now;
        if fds.is_empty() {
            std::thread::park_timeout(left);
        } else {
            #[cfg(target_os = "linux")]
            if crate::sys::poll_any_readable(&fds, left.min(Duration::from_millis(1)))? {
                return Ok(true);
            }
        }
    }
}

/// A waker that unparks a thread.
struct Unpark(std::thread::Thread);

impl std::task::Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn permit_is_not_lost_and_is_single() {
        let n = Notify::new();
        n.notify();
        n.notify();
        assert!(n.wait_timeout(Duration::ZERO));
        assert!(!n.wait_timeout(Duration::from_millis(1)));
    }

    #[test]
    fn wakes_a_registered_waker() {
        let n = Notify::new();
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        assert_eq!(n.poll_notified(&mut cx), Poll::Pending);
        n.notify();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert_eq!(n.poll_notified(&mut cx), Poll::Ready(()));
        assert_eq!(n.poll_notified(&mut cx), Poll::Pending);
    }

    #[test]
    fn wakes_a_blocked_thread() {
        let n = Arc::new(Notify::new());
        let m = Arc::clone(&n);
        let t = std::thread::spawn(move || m.wait_timeout(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        n.notify();
        assert!(t.join().unwrap());
    }

    #[test]
    fn no_wake_up_is_lost_in_a_ping_pong() {
        // Two threads hand a turn back and forth 5,000 times through two
        // signals; a lost wake-up leaves a thread waiting out its timeout.
        const ROUNDS: usize = 5_000;
        let (ping, pong) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let (ping2, pong2) = (Arc::clone(&ping), Arc::clone(&pong));
        let t = std::thread::spawn(move || {
            for i in 0..ROUNDS {
                if !ping2.wait_timeout(Duration::from_secs(10)) {
                    return Err(i);
                }
                pong2.notify();
            }
            Ok(())
        });
        for i in 0..ROUNDS {
            ping.notify();
            assert!(pong.wait_timeout(Duration::from_secs(10)), "round {i}");
        }
        assert_eq!(t.join().unwrap(), Ok(()));
    }

    #[test]
    fn wait_any_wakes_on_any_notify_and_times_out_without() {
        let a = Arc::new(Notify::new());
        let b = Arc::new(Notify::new());
        let set = [
            Readiness::Notify(Arc::clone(&a)),
            Readiness::Notify(Arc::clone(&b)),
        ];
        assert!(!wait_any(&set, Duration::from_millis(5)).unwrap());
        let b2 = Arc::clone(&b);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.notify();
        });
        let start = Instant::now();
        assert!(wait_any(&set, Duration::from_secs(10)).unwrap());
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
        // The permit was consumed.
        assert!(!b.try_take());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn wait_any_wakes_on_any_descriptor_also_mixed_with_a_notify() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let (_a0, a1) = UnixStream::pair().unwrap();
        let (mut b0, b1) = UnixStream::pair().unwrap();
        let fds = [Readiness::Fd(a1.as_raw_fd()), Readiness::Fd(b1.as_raw_fd())];
        assert!(!wait_any(&fds, Duration::from_millis(5)).unwrap());
        b0.write_all(b"x").unwrap();
        assert!(wait_any(&fds, Duration::from_secs(10)).unwrap());
        let n = Arc::new(Notify::new());
        let mixed = [
            Readiness::Fd(a1.as_raw_fd()),
            Readiness::Notify(Arc::clone(&n)),
        ];
        assert!(!wait_any(&mixed, Duration::from_millis(5)).unwrap());
        n.notify();
        assert!(wait_any(&mixed, Duration::from_secs(10)).unwrap());
    }
}
