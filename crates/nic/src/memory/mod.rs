//! The memory backend: NICs joined by wires inside one process.
//!
//! [`pair`] makes two ports joined by a wire; [`switch`] makes a learning switch
//! with N ports. Each port ([`MemNic`]) has its own [`NicCaps`], standing for a NIC
//! with or without checksum offload, TSO, LRO or several queues, and its MTU is
//! enforced: a frame longer than the MTU without a segmentation request is refused
//! with [`NicError::Oversize`] (and counted in `tx_dropped_oversize`), never passed.
//! A receiver with a smaller MTU than its sender drops such frames
//! (`rx_dropped_oversize`).
//!
//! The wire carries frames as they are, as veth and virtio do: a super-frame a
//! TSO-capable port sends arrives whole, marked, and a partial checksum arrives
//! partial (frames move; nothing is copied except duplicates). It keeps the
//! checksum state and the segmentation mark, and clears what only the sender knew
//! (the parsed layout, the transmit hash). A receiving port is handed super-frames
//! whether or not its caps say `lro`: the shim, which wraps ports, segments them for
//! a stack that asked for no LRO.
//!
//! Scatter-gather frames ([`crate::Frame::frags`]) are carried by reference too,
//! as veth passes an skb ([`Nic::tx_sg`] is true): the payload buffers they point
//! into are shared, not copied. A receiver gets them as they are only if it asked
//! ([`Nic::set_rx_sg`]); otherwise each is gathered into its head on the way up
//! (`sg_linearized`), the one copy a linear receiver needs. A corruption fault
//! gathers the frame it flips a bit in first, so shared payload is never written.
//!
//! Each direction has its own seeded [`Faults`]: loss, corruption, duplication,
//! reordering, delay, rate limit. Time comes from a [`Clock`], virtual by default,
//! so delays and rates are reproducible too.
//!
//! Queues map straight through: what a port sends on transmit queue `q` arrives on
//! the peer's receive queue `q % queues`. (Hardware RSS for memory ports comes with
//! the shim, which dispatches with linerate-rss.)
//!
//! ```
//! use linerate_nic::memory::{self, Faults, PairConfig};
//! use linerate_nic::{Batch, Frame, Nic, NicCaps};
//!
//! let (mut a, mut b) = memory::pair(PairConfig {
//!     a_to_b: Faults { loss: 0.5, ..Faults::NONE },
//!     seed: 7,
//!     ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
//! });
//! let mut batch = Batch::new();
//! for i in 0..100u8 {
//!     batch.push(Frame::plain(a.pool().alloc_from(&[i; 60])));
//! }
//! a.transmit(0, &mut batch)?;
//! let got = b.receive(0, &mut batch, 1000)?;
//! assert!(got > 25 && got < 75, "about half arrive: {got}");
//! # Ok::<(), linerate_nic::NicError>(())
//! ```

mod faults;
mod switch;
mod wire;

pub use faults::{Faults, RateLimit};
pub use switch::{Switch, SwitchConfig, SwitchPort, SwitchStats, switch};

use crate::buf::{Pool, PoolConfig, lock};
use crate::caps::NicCaps;
use crate::check::check_tx;
use crate::counters::{Counter, Counters, Tally, count};
use crate::frame::{Batch, Frame};
use crate::nic::{Nic, NicError, check_queue};
use crate::notify::{Notify, Readiness};
use crate::pcap::{Direction, Record, Recorder};
use crate::rng::splitmix64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::Wire;

/// The time a memory network runs on: virtual (advanced by hand, the default) or
/// the system's monotonic clock. Clones share the same time.
#[derive(Debug, Clone)]
pub struct Clock {
    inner: Arc<ClockInner>,
}

#[derive(Debug)]
enum ClockInner {
    Manual(AtomicU64),
    System(Instant),
}

impl Clock {
    /// A virtual clock at zero that moves only by [`Clock::advance`].
    pub fn manual() -> Clock {
        Clock {
            inner: Arc::new(ClockInner::Manual(AtomicU64::new(0))),
        }
    }

    /// The system's monotonic clock, zero now.
    pub fn system() -> Clock {
        Clock {
            inner: Arc::new(ClockInner::System(Instant::now())),
        }
    }

    /// Time since the clock's zero.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns())
    }

    /// Time since the clock's zero, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        match &*self.inner {
            ClockInner::Manual(t) => t.load(Ordering::Acquire),
            ClockInner::System(start) => {
                u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }

    /// Moves a virtual clock forward by `d`; returns false (and does nothing) on
    /// the system clock.
    pub fn advance(&self, d: Duration) -> bool {
        match &*self.inner {
            ClockInner::Manual(t) => {
                let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
                t.fetch_add(ns, Ordering::AcqRel);
                true
            }
            ClockInner::System(_) => false,
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::manual()
    }
}

/// One memory port's make-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortConfig {
    /// What the port does itself (MTU, offloads, queues).
    pub caps: NicCaps,
    /// Frames each receive ring holds, in flight or waiting (more are dropped,
    /// `rx_dropped_ring_full`).
    pub ring_len: usize,
    /// The port's buffer pool.
    pub pool: PoolConfig,
}

impl PortConfig {
    /// A port with `caps`, 4096-frame rings and a pool sized for the MTU (or for
    /// 64 KiB super-frames if the port has TSO, USO or LRO).
    pub fn new(caps: NicCaps) -> PortConfig {
        let o = caps.offloads;
        let big = o.tso4 || o.tso6 || o.uso || o.lro || caps.mtu > 2000;
        PortConfig {
            caps,
            ring_len: 4096,
            pool: if big {
                PoolConfig::super_frames()
            } else {
                PoolConfig::mtu()
            },
        }
    }
}

/// Two ports and the wire between them.
#[derive(Debug, Clone)]
pub struct PairConfig {
    /// Port A.
    pub a: PortConfig,
    /// Port B.
    pub b: PortConfig,
    /// Faults on frames from A to B.
    pub a_to_b: Faults,
    /// Faults on frames from B to A.
    pub b_to_a: Faults,
    /// Seed of every random decision on the wire.
    pub seed: u64,
    /// The time the wire runs on.
    pub clock: Clock,
}

impl PairConfig {
    /// Ports with `a` and `b`, a perfect wire, seed 0, a manual clock.
    pub fn new(a: NicCaps, b: NicCaps) -> PairConfig {
        PairConfig {
            a: PortConfig::new(a),
            b: PortConfig::new(b),
            a_to_b: Faults::NONE,
            b_to_a: Faults::NONE,
            seed: 0,
            clock: Clock::manual(),
        }
    }
}

/// The seed of wire number `index` of a network seeded with `seed`.
pub(crate) fn wire_seed(seed: u64, index: u64) -> u64 {
    let mut s = seed ^ index.wrapping_mul(0xa076_1d64_78bd_642f);
    splitmix64(&mut s)
}

/// The receiving half of a port, shared with whatever sends to it: a wire per
/// receive queue, so the threads that serve different queues (and the senders
/// toward them) never take the same lock.
pub(crate) struct Inbound {
    pub(crate) wires: Vec<Arc<Mutex<Wire>>>,
    pub(crate) counters: Counters,
    pub(crate) notifies: Vec<Arc<Notify>>,
}

impl Inbound {
    /// The wire toward receive queue `queue % queues`.
    pub(crate) fn wire(wires: &[Arc<Mutex<Wire>>], queue: usize) -> Option<&Arc<Mutex<Wire>>> {
        wires.get(queue % wires.len().max(1))
    }
}

/// Builds the receiving side of a port with `cfg`, behind a wire with `faults`.
pub(crate) fn inbound(cfg: &PortConfig, faults: &Faults, seed: u64) -> Inbound {
    let queues = usize::from(cfg.caps.queues.max(1));
    let counters = Counters::new(queues);
    let notifies: Vec<_> = (0..queues).map(|_| Arc::new(Notify::new())).collect();
    // Queue 0's wire keeps the port's seed (a one-queue port behaves as it
    // always has); each other queue's faults are seeded on their own.
    let wires = (0..queues)
        .map(|q| {
            let seed = if q == 0 {
                seed
            } else {
                wire_seed(seed, q as u64)
            };
            Arc::new(Mutex::new(Wire::new(
                faults,
                seed,
                cfg.caps,
                cfg.ring_len,
                counters.clone(),
                notifies.clone(),
            )))
        })
        .collect();
    Inbound {
        wires,
        counters,
        notifies,
    }
}

/// Where a port's transmitted frames go.
enum Outbound {
    Wire(Vec<Arc<Mutex<Wire>>>),
    Switch(switch::Uplink),
}

/// One port of a memory network.
pub struct MemNic {
    caps: NicCaps,
    /// The port's queue this NIC's queue 0 is ([`MemNic::split`]); 0 for a
    /// whole port.
    base: usize,
    pool: Pool,
    clock: Clock,
    inbound: Inbound,
    outbound: Outbound,
    recorder: Option<Arc<dyn Recorder>>,
    /// The caller takes scatter-gather frames on receive.
    rx_sg: bool,
}

impl core::fmt::Debug for MemNic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MemNic")
            .field("caps", &self.caps)
            .field("now", &self.clock.now())
            .finish_non_exhaustive()
    }
}

/// Two ports joined by a wire with the faults `cfg` gives each direction.
pub fn pair(cfg: PairConfig) -> (MemNic, MemNic) {
    let in_a = inbound(&cfg.a, &cfg.b_to_a, wire_seed(cfg.seed, 1));
    let in_b = inbound(&cfg.b, &cfg.a_to_b, wire_seed(cfg.seed, 0));
    let to_b = in_b.wires.clone();
    let to_a = in_a.wires.clone();
    let a = MemNic::new(&cfg.a, cfg.clock.clone(), in_a, Outbound::Wire(to_b));
    let b = MemNic::new(&cfg.b, cfg.clock, in_b, Outbound::Wire(to_a));
    (a, b)
}

impl MemNic {
    fn new(cfg: &PortConfig, clock: Clock, inbound: Inbound, outbound: Outbound) -> MemNic {
        MemNic {
            caps: NicCaps {
                queues: cfg.caps.queues.max(1),
                ..cfg.caps
            },
            base: 0,
            pool: Pool::new(cfg.pool),
            clock,
            inbound,
            outbound,
            recorder: None,
            rx_sg: false,
        }
    }

    /// Two ports with `a` and `b` joined by a perfect wire.
    pub fn pair(a: NicCaps, b: NicCaps) -> (MemNic, MemNic) {
        pair(PairConfig::new(a, b))
    }

    /// Splits a port of several queues into one NIC per queue, each with a
    /// single queue (its queue 0 is the port's queue `i`), so that each can be
    /// owned by the thread that serves it: they share no lock (each queue has
    /// its own wire), only the port's pool and counters (atomic, one cache
    /// line set per queue). Counters keep the port's queue numbering.
    pub fn split(self) -> Vec<MemNic> {
        let queues = usize::from(self.caps.queues.max(1));
        if queues == 1 {
            return vec![self];
        }
        let MemNic {
            caps,
            base,
            pool,
            clock,
            inbound,
            outbound,
            recorder,
            rx_sg,
        } = self;
        (0..queues)
            .map(|q| MemNic {
                caps: NicCaps { queues: 1, ..caps },
                base: base + q,
                pool: pool.clone(),
                clock: clock.clone(),
                inbound: Inbound {
                    wires: inbound.wires.clone(),
                    counters: inbound.counters.clone(),
                    notifies: inbound.notifies.clone(),
                },
                outbound: match &outbound {
                    Outbound::Wire(w) => Outbound::Wire(w.clone()),
                    Outbound::Switch(up) => Outbound::Switch(up.clone()),
                },
                recorder: recorder.clone(),
                rx_sg,
            })
            .collect()
    }

    /// The clock the port runs on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// When the next frame for `queue` arrives (clock time), if one is in flight
    /// or waiting: a driver with delays or rate limits sleeps until then.
    pub fn next_arrival(&self, queue: usize) -> Option<Duration> {
        let queue = self.base + queue;
        Inbound::wire(&self.inbound.wires, queue)
            .and_then(|w| lock(w).next_arrival(queue))
            .map(Duration::from_nanos)
    }

    /// Frames in flight toward `queue` or waiting on it.
    pub fn pending(&self, queue: usize) -> usize {
        let queue = self.base + queue;
        Inbound::wire(&self.inbound.wires, queue).map_or(0, |w| lock(w).pending(queue))
    }

    fn record(&self, dir: Direction, queue: usize, frames: &[Frame]) {
        if let Some(r) = &self.recorder {
            let time = self.clock.now();
            let mut gathered = Vec::new();
            for f in frames {
                // The recorder sees the frame as on the wire: a scatter-gather
                // frame gathered (a copy only while recording).
                let frame = f.contiguous(&mut gathered);
                r.record(&Record {
                    dir,
                    queue,
                    frame,
                    meta: &f.meta,
                    time,
                });
            }
        }
    }
}

impl Nic for MemNic {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.queues())?;
        let queue = self.base + queue;
        let before = batch.len();
        let now = self.clock.now_ns();
        let n = Inbound::wire(&self.inbound.wires, queue)
            .map_or(0, |w| lock(w).pop(queue, now, batch, max));
        if n > 0 {
            let mut tally = Tally::default();
            if !self.rx_sg {
                let mut gathered = 0;
                for f in batch.iter_mut().skip(before) {
                    gathered += u64::from(f.linearize());
                }
                tally.add(Counter::SgLinearized, gathered);
            }
            let got = batch.get(before..).unwrap_or_default();
            count(&mut tally, got, false);
            tally.flush(&self.inbound.counters, queue);
            self.record(Direction::Rx, queue, got);
        }
        Ok(n)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.queues())?;
        let queue = self.base + queue;
        let mut refused = None;
        let mut ok = 0;
        for f in batch.iter() {
            if let Err(e) = check_tx(&self.caps, f) {
                refused = Some(e);
                break;
            }
            ok += 1;
        }
        let mut tally = Tally::default();
        let sent = batch.get(..ok).unwrap_or_default();
        count(&mut tally, sent, true);
        self.record(Direction::Tx, queue, sent);
        let now = self.clock.now_ns();
        match &mut self.outbound {
            Outbound::Wire(w) => match Inbound::wire(w, queue) {
                Some(w) => lock(w).push_batch(queue, batch, ok, now),
                None => drop(batch.drain(..ok)),
            },
            Outbound::Switch(up) => up.forward(queue, batch.drain(..ok), now),
        }
        let result = match refused {
            Some((err, counter)) => {
                tally.add(counter, 1);
                if !batch.is_empty() {
                    batch.remove(0);
                }
                Err(err)
            }
            None => Ok(ok),
        };
        tally.flush(&self.inbound.counters, queue);
        result
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        check_queue(queue, self.queues())?;
        self.inbound
            .notifies
            .get(self.base + queue)
            .map(|n| Readiness::Notify(Arc::clone(n)))
            .ok_or(NicError::NoQueue {
                queue,
                queues: self.queues(),
            })
    }

    fn counters(&self) -> &Counters {
        &self.inbound.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.recorder = recorder;
    }

    fn tx_sg(&self) -> bool {
        true
    }

    fn set_rx_sg(&mut self, on: bool) -> bool {
        self.rx_sg = on;
        true
    }
}

#[cfg(test)]
mod tests;
