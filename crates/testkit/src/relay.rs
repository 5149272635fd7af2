//! This process as the wire between two NICs (docs/testing.md: "linerate as the
//! wire between two Linux stacks"): whatever one
//! receives, the other transmits, metadata and all. With two TAPs whose kernel
//! sides sit in two namespaces, the two kernels talk through it; with the TAPs'
//! offloads on, super-frames cross whole.

use linerate_nic::notify::Readiness;
use linerate_nic::{Batch, Nic, NicError};
use std::io;
use std::time::Duration;

/// Two NICs joined by this process.
pub struct Relay<A: Nic, B: Nic> {
    /// One side.
    pub a: A,
    /// The other side.
    pub b: B,
    batch: Batch,
    /// Frames moved from `a` to `b`.
    pub a_to_b: u64,
    /// Frames moved from `b` to `a`.
    pub b_to_a: u64,
    /// Frames a transmit refused (dropped).
    pub refused: u64,
    /// The first refusal, for messages.
    pub first_refusal: Option<String>,
}

impl<A: Nic, B: Nic> Relay<A, B> {
    /// Joins `a` and `b` (queue 0 of each).
    pub fn new(a: A, b: B) -> Relay<A, B> {
        Relay {
            a,
            b,
            batch: Batch::with_capacity(64),
            a_to_b: 0,
            b_to_a: 0,
            refused: 0,
            first_refusal: None,
        }
    }

    /// Moves what is waiting both ways; if nothing was, waits up to `wait` for
    /// either side to have frames. Returns the frames moved.
    pub fn pump(&mut self, wait: Duration) -> io::Result<usize> {
        let ab = self.step(true)?;
        let ba = self.step(false)?;
        self.a_to_b += ab as u64;
        self.b_to_a += ba as u64;
        if ab + ba == 0 {
            wait_either(
                &self.a.readiness(0).map_err(io::Error::other)?,
                &self.b.readiness(0).map_err(io::Error::other)?,
                wait,
            )?;
        }
        Ok(ab + ba)
    }

    fn step(&mut self, a_to_b: bool) -> io::Result<usize> {
        let batch = &mut self.batch;
        batch.clear();
        let n = if a_to_b {
            self.a.receive(0, batch, 64)
        } else {
            self.b.receive(0, batch, 64)
        }
        .map_err(io::Error::other)?;
        // A full peer drops the rest after a few tries, as a wire would.
        let mut stuck = 0;
        while !batch.is_empty() && stuck < 1000 {
            let sent = if a_to_b {
                self.b.transmit(0, batch)
            } else {
                self.a.transmit(0, batch)
            };
            match sent {
                Ok(0) => {
                    stuck += 1;
                    std::thread::yield_now();
                }
                Ok(_) => stuck = 0,
                Err(NicError::Io(e)) => return Err(e),
                Err(e) => {
                    self.refused += 1;
                    self.first_refusal.get_or_insert_with(|| e.to_string());
                }
            }
        }
        batch.clear();
        Ok(n)
    }
}

/// Waits until either readiness fires or `timeout` passes.
#[allow(unsafe_code)]
fn wait_either(a: &Readiness, b: &Readiness, timeout: Duration) -> io::Result<()> {
    match (a, b) {
        (Readiness::Fd(a), Readiness::Fd(b)) => {
            let mut fds = [*a, *b].map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
            let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: fds is a valid array of two pollfds and the count matches.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            Ok(())
        }
        // Anything else: a short wait on one side, the other checked next round.
        (r, _) => r.wait(timeout.min(Duration::from_micros(200))).map(|_| ()),
    }
}
