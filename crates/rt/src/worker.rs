//! Loops for services that own several NICs: a bridge, a tunnel endpoint, a
//! relay. [`Driver`](crate::Driver) serves one queue of one NIC to a
//! [`Service`](crate::Service) that only sees frames; a [`Worker`] moves frames
//! between NICs it holds itself, so the loop only has to poll it, know its
//! next timer, and wait on all of its NICs at once when it is idle.
//!
//! [`Workers::spawn`] runs one thread per worker (one worker per queue, each
//! over its own queue of every device: see [`SharedNic::queue`]), shares a
//! clock, and stops and joins them, handing the workers back for their final
//! counters.
//!
//! ```
//! use linerate_nic::{Batch, Nic, NicCaps, Readiness, memory};
//! use linerate_rt::worker::{Worker, Workers};
//! use linerate_toe::Instant;
//!
//! /// Copies every frame from one port to the other.
//! struct Wire { a: memory::MemNic, b: memory::MemNic, batch: Batch, moved: u64 }
//!
//! impl Worker for Wire {
//!     fn poll(&mut self, _now: Instant) -> usize {
//!         self.batch.clear();
//!         let n = self.a.receive(0, &mut self.batch, 32).unwrap_or(0);
//!         let _ = self.b.transmit(0, &mut self.batch);
//!         self.moved += n as u64;
//!         n
//!     }
//!     fn readiness(&self) -> Vec<Readiness> {
//!         self.a.readiness(0).into_iter().collect()
//!     }
//! }
//!
//! let (a, _peer_a) = memory::pair(memory::PairConfig::new(NicCaps::default(), NicCaps::default()));
//! let (b, _peer_b) = memory::pair(memory::PairConfig::new(NicCaps::default(), NicCaps::default()));
//! let workers = Workers::spawn(vec![Wire { a, b, batch: Batch::new(), moved: 0 }], "wire").unwrap();
//! let wires = workers.join().unwrap();
//! assert_eq!(wires[0].moved, 0);
//! ```

use crate::RtError;
use crate::shared::SharedNic;
use linerate_nic::{Batch, Counters, Nic, NicCaps, NicError, Pool, Readiness, Recorder};
use linerate_toe::Instant;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// The longest an idle worker sleeps before it is polled again (timers it did
/// not report, the stop flag).
pub const MAX_WAIT: Duration = Duration::from_millis(50);

/// A service that owns its NICs and moves frames between them.
pub trait Worker: Send {
    /// Moves one round of frames at `now` (the loop's clock, starting at
    /// zero); returns how many frames moved, 0 when idle.
    fn poll(&mut self, now: Instant) -> usize;

    /// When the worker must be polled again although no frame arrives (its
    /// earliest timer), if ever.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// What to wait on for frames: one entry per receive queue it serves.
    fn readiness(&self) -> Vec<Readiness>;

    /// Changes whenever [`Worker::readiness`] would answer otherwise (a
    /// device added or removed while it runs): the loop then asks again
    /// before it waits, so it neither misses a new device's frames nor
    /// waits on a closed descriptor. Workers whose devices never change keep
    /// the default.
    fn readiness_generation(&self) -> u64 {
        0
    }
}

/// Runs `worker` until `stop` is set: poll, and when a poll moved nothing,
/// wait on every NIC of the worker until a frame, its timer or [`MAX_WAIT`].
/// `epoch` is the clock's zero.
pub fn run<W: Worker>(
    worker: &mut W,
    stop: &AtomicBool,
    epoch: std::time::Instant,
) -> std::io::Result<()> {
    let mut generation = worker.readiness_generation();
    let mut ready = worker.readiness();
    let now = || Instant::from_nanos(u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX));
    while !stop.load(Ordering::Relaxed) {
        let t = now();
        if worker.poll(t) > 0 {
            continue;
        }
        let g = worker.readiness_generation();
        if g != generation {
            generation = g;
            ready = worker.readiness();
        }
        let wait = worker
            .poll_timeout()
            .map_or(MAX_WAIT, |d| d.saturating_duration_since(t).min(MAX_WAIT));
        if !wait.is_zero() {
            linerate_nic::wait_any(&ready, wait)?;
        }
    }
    Ok(())
}

/// One thread per worker, sharing a clock and a stop flag.
#[derive(Debug)]
pub struct Workers<W> {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<std::io::Result<W>>>,
}

impl<W: Worker + 'static> Workers<W> {
    /// Starts a thread named `{name}{i}` for worker `i`.
    ///
    /// Errors: [`RtError::Spawn`] if a thread cannot start (the ones started
    /// are stopped and joined first).
    pub fn spawn(workers: Vec<W>, name: &str) -> Result<Workers<W>, RtError> {
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = std::time::Instant::now();
        let mut out = Workers {
            stop: Arc::clone(&stop),
            threads: Vec::with_capacity(workers.len()),
        };
        for (i, mut w) in workers.into_iter().enumerate() {
            let stop = Arc::clone(&stop);
            let t = std::thread::Builder::new()
                .name(format!("{name}{i}"))
                .spawn(move || run(&mut w, &stop, epoch).map(|()| w));
            match t {
                Ok(t) => out.threads.push(t),
                Err(e) => {
                    let _ = out.join();
                    return Err(RtError::Spawn(e));
                }
            }
        }
        Ok(out)
    }

    /// The stop flag: setting it stops every thread at its next poll (a
    /// signal handler may set it, as `signal_hook::flag` does).
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Whether every thread still runs (a thread whose NIC failed has ended).
    pub fn running(&self) -> bool {
        self.threads.iter().all(|t| !t.is_finished())
    }

    /// Stops the threads and returns the workers in order.
    ///
    /// Errors: [`RtError::Nic`] with the first I/O error a loop ended on;
    /// [`RtError::Panicked`] if a worker panicked.
    pub fn join(self) -> Result<Vec<W>, RtError> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::with_capacity(self.threads.len());
        let mut err = None;
        for (queue, t) in self.threads.into_iter().enumerate() {
            match t.join() {
                Ok(Ok(w)) => out.push(w),
                Ok(Err(e)) => {
                    err.get_or_insert(RtError::Nic(NicError::Io(e)));
                }
                Err(_) => {
                    err.get_or_insert(RtError::Panicked { queue });
                }
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

/// One queue of a [`SharedNic`] as a NIC of its own with a single queue (its
/// queue 0), so a worker per queue can own a view of every device.
#[derive(Debug)]
pub struct QueueNic<N> {
    shared: SharedNic<N>,
    queue: usize,
    caps: NicCaps,
}

impl<N: Nic> SharedNic<N> {
    /// The view of queue `queue` as a one-queue NIC.
    ///
    /// Errors: [`NicError::NoQueue`] if the NIC has no such queue.
    pub fn queue(&self, queue: usize) -> Result<QueueNic<N>, NicError> {
        let queues = self.queues();
        if queue >= queues {
            return Err(NicError::NoQueue { queue, queues });
        }
        let mut caps = *self.caps();
        caps.queues = 1;
        Ok(QueueNic {
            shared: self.clone(),
            queue,
            caps,
        })
    }
}

impl<N: Nic> QueueNic<N> {
    /// The shared queue this view serves.
    pub fn queue(&self) -> usize {
        self.queue
    }

    fn check(queue: usize) -> Result<(), NicError> {
        if queue == 0 {
            Ok(())
        } else {
            Err(NicError::NoQueue { queue, queues: 1 })
        }
    }
}

impl<N: Nic> Nic for QueueNic<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        Self::check(queue)?;
        self.shared.receive(self.queue, batch, max)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        Self::check(queue)?;
        self.shared.transmit(self.queue, batch)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        Self::check(queue)?;
        self.shared.readiness(self.queue)
    }

    fn counters(&self) -> &Counters {
        self.shared.counters()
    }

    fn pool(&self) -> &Pool {
        self.shared.pool()
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.shared.set_recorder(recorder);
    }

    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        self.shared.set_multicast_filter(unicast, groups)
    }
}
