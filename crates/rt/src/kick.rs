//! Waking a queue thread that sleeps in `poll(2)` on its NIC's descriptor
//! (TAP, AF_XDP): an eventfd in the same poll set, written by the
//! application side when it hands the queue work.
//!
//! Without it such a thread could only look at its commands and staged
//! bytes when its NIC had frames or a short poll timeout ran out, so every
//! request a program wrote waited for the next tick before it left (the
//! cost shows in request/response round trips: sockperf ping-pong, redis).
//! With it the thread sleeps until its NIC, its engine's next timer or the
//! application needs it, and wakes at once for any of them.
//!
//! At most one write per sleep: the first kick after the thread drained
//! the eventfd writes it and marks it armed; later kicks see the mark and
//! do nothing until the thread drains it again. The thread clears the mark
//! (an acquiring swap, which pairs with the kicker's releasing swap) before
//! it looks for work, so work staged before a kick that found the mark set
//! is seen in the round that follows.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An eventfd that wakes one queue thread.
#[derive(Debug)]
pub(crate) struct KickFd {
    fd: OwnedFd,
    /// Written since the thread last drained it.
    armed: AtomicBool,
}

impl KickFd {
    /// A fresh, unsignalled eventfd (non-blocking, close-on-exec).
    pub(crate) fn new() -> io::Result<KickFd> {
        // SAFETY: eventfd has no memory arguments.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(KickFd {
            // SAFETY: a fresh descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            armed: AtomicBool::new(false),
        })
    }

    /// Wakes the thread if it sleeps (or makes its next sleep return at
    /// once); nothing if a kick is already pending.
    pub(crate) fn kick(&self) {
        if self.armed.swap(true, Ordering::AcqRel) {
            return;
        }
        let one: u64 = 1;
        // SAFETY: eight readable bytes, as eventfd wants. A failure (the
        // counter at its maximum) leaves it readable, which is all a kick needs.
        unsafe { libc::write(self.fd.as_raw_fd(), (&raw const one).cast(), 8) };
    }

    /// Sleeps until `nic` polls readable, a kick, or `timeout`; drains the
    /// kick so the next one writes again.
    pub(crate) fn wait(&self, nic: RawFd, timeout: Duration) -> io::Result<()> {
        let mut pfds = [
            libc::pollfd {
                fd: nic,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // ppoll: to the nanosecond, so a timer due in 300 µs is neither a
        // busy loop of zero-millisecond polls nor late by a millisecond.
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(timeout.subsec_nanos().min(999_999_999) as i32),
        };
        // SAFETY: two valid pollfd structs and their count, a timespec that
        // outlives the call, no signal mask.
        let rc = unsafe { libc::ppoll(pfds.as_mut_ptr(), 2, &raw const ts, std::ptr::null()) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        if pfds[1].revents & libc::POLLIN != 0 {
            self.drain();
        }
        Ok(())
    }

    /// Takes the count and clears the mark; work staged before a kick that
    /// found the mark set is visible after this (see the module docs).
    pub(crate) fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: eight writable bytes; non-blocking, so an empty counter
        // returns EAGAIN at once.
        unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8) };
        self.armed.swap(false, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_kick_wakes_a_long_sleep_at_once() {
        let k = Arc::new(KickFd::new().unwrap());
        // A NIC descriptor that never polls readable: the read end of a pipe.
        let mut p = [0 as libc::c_int; 2];
        // SAFETY: room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors, owned here.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        let k2 = Arc::clone(&k);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            k2.kick();
        });
        let start = Instant::now();
        k.wait(r.as_raw_fd(), Duration::from_secs(10)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        t.join().unwrap();
        // Drained: the next wait sleeps out its timeout.
        let start = Instant::now();
        k.wait(r.as_raw_fd(), Duration::from_millis(30)).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(25));
    }

    #[test]
    fn a_kick_before_the_sleep_is_not_lost() {
        let k = KickFd::new().unwrap();
        let mut p = [0 as libc::c_int; 2];
        // SAFETY: room for the two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors, owned here.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        k.kick();
        k.kick();
        let start = Instant::now();
        k.wait(r.as_raw_fd(), Duration::from_secs(10)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
        k.kick();
        let start = Instant::now();
        k.wait(r.as_raw_fd(), Duration::from_secs(10)).unwrap();
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
