//! Software RSS dispatch: frames from one receive ring into N per-queue queues.
//!
//! For a backend with one receive queue (a TAP without multi-queue, an AF_XDP
//! socket on a single-queue NIC) this is the NIC's RSS block done in software, as
//! Linux's RPS is: for each frame, take the backend's hash from its
//! [`OffloadMeta`] if it has one, else parse the frame (or use the layout already in
//! its meta), hash it ([`Steering`]) and record the hash and layout in the meta so
//! later stages need not do it again; then push the frame onto the queue the
//! indirection table names.
//!
//! The queues are bounded lock-free queues ([`crossbeam_queue::ArrayQueue`]), one
//! per receive queue, each drained by its own [`QueueReceiver`] (one core each). A
//! full queue drops the frame and counts the drop against that queue, like a NIC's
//! `rx_queue_N_drops`; a slow core never blocks the others.
//!
//! Order: one dispatcher pushes in ring order, each queue is FIFO, and every frame
//! of a flow goes to the same queue while the table stays the same (the table is
//! read once per [`Dispatcher::dispatch`] call), so frames of a flow are never
//! reordered. As on a NIC, a table update moves flows between queues, and frames
//! already queued on the old queue may then be processed after newer ones on the
//! new queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use crossbeam_utils::CachePadded;
use linerate_offload::OffloadMeta;

use crate::error::ConfigError;
use crate::indirection::IndirectionTable;
use crate::steering::Steering;

/// A received frame and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxFrame<B> {
    /// The frame bytes (any owner: `Vec<u8>`, a pool buffer, a borrowed slice).
    pub data: B,
    /// Offload metadata; dispatch fills `rss` and `layout` when it computes them.
    pub meta: OffloadMeta,
}

impl<B> RxFrame<B> {
    /// A frame with empty metadata (no backend hash).
    pub fn new(data: B) -> RxFrame<B> {
        RxFrame {
            data,
            meta: OffloadMeta::plain(),
        }
    }

    /// A frame with the given metadata.
    pub fn with_meta(data: B, meta: OffloadMeta) -> RxFrame<B> {
        RxFrame { data, meta }
    }
}

/// Per-queue counters, like `ethtool -S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Frames pushed onto the queue.
    pub delivered: u64,
    /// Frames dropped because the queue was full.
    pub dropped: u64,
}

/// Dispatcher counters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DispatchStats {
    /// Per queue.
    pub queues: Vec<QueueStats>,
    /// Frames whose hash came from the backend.
    pub backend_hashed: u64,
    /// Frames hashed in software.
    pub software_hashed: u64,
    /// Frames that could not be hashed (not parsable, not IP, or type disabled),
    /// sent to the default queue.
    pub unhashed: u64,
}

/// What one [`Dispatcher::dispatch`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dispatched {
    /// Frames pushed onto a queue.
    pub delivered: usize,
    /// Frames dropped because their queue was full.
    pub dropped: usize,
}

#[derive(Debug, Default)]
struct Counters {
    delivered: AtomicU64,
    dropped: AtomicU64,
}

#[derive(Debug)]
struct Shared<B> {
    queues: Box<[ArrayQueue<RxFrame<B>>]>,
    counters: Box<[CachePadded<Counters>]>,
    backend_hashed: AtomicU64,
    software_hashed: AtomicU64,
    unhashed: AtomicU64,
}

/// Takes frames from one receive ring and spreads them over per-queue queues.
///
/// ```
/// use linerate_rss::{Dispatcher, HashConfig, IndirectionTable, RssKey, RxFrame, Steering};
/// use linerate_wire::build::{FrameBuilder, Ip, L4};
/// use std::sync::Arc;
///
/// let steering = Arc::new(Steering::new(&RssKey::SYMMETRIC, IndirectionTable::new(4).unwrap(), HashConfig::default()));
/// let (mut dispatcher, queues) = Dispatcher::new(steering, 1024).unwrap();
/// let frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40000, 80)).build(b"x");
/// let done = dispatcher.dispatch([RxFrame::new(frame)]);
/// assert_eq!(done.delivered, 1);
/// let got: Vec<_> = queues.iter().filter_map(|q| q.pop()).collect();
/// assert_eq!(got.len(), 1);
/// assert!(got[0].meta.rss.is_some() && got[0].meta.layout.is_some());
/// ```
#[derive(Debug)]
pub struct Dispatcher<B> {
    steering: Arc<Steering>,
    shared: Arc<Shared<B>>,
    /// Per-call counts, flushed to the shared counters at the end of a call.
    delivered: Box<[u64]>,
    dropped: Box<[u64]>,
}

impl<B: AsRef<[u8]>> Dispatcher<B> {
    /// A dispatcher into `steering.queues()` queues of `capacity` frames each, and
    /// the receivers of those queues (index = queue number).
    pub fn new(
        steering: Arc<Steering>,
        capacity: usize,
    ) -> Result<(Dispatcher<B>, Vec<QueueReceiver<B>>), ConfigError> {
        if capacity == 0 {
            return Err(ConfigError::QueueCapacity);
        }
        let n = usize::from(steering.queues());
        let shared = Arc::new(Shared {
            queues: (0..n).map(|_| ArrayQueue::new(capacity)).collect(),
            counters: (0..n)
                .map(|_| CachePadded::new(Counters::default()))
                .collect(),
            backend_hashed: AtomicU64::new(0),
            software_hashed: AtomicU64::new(0),
            unhashed: AtomicU64::new(0),
        });
        let receivers = (0..n)
            .map(|q| QueueReceiver {
                shared: shared.clone(),
                queue: q as u16,
            })
            .collect();
        Ok((
            Dispatcher {
                steering,
                shared,
                delivered: vec![0; n].into_boxed_slice(),
                dropped: vec![0; n].into_boxed_slice(),
            },
            receivers,
        ))
    }

    /// The steering in use (replace its table to move flows at run time).
    pub fn steering(&self) -> &Arc<Steering> {
        &self.steering
    }

    /// Dispatches a batch of frames; frames that find their queue full are dropped
    /// (and counted).
    pub fn dispatch<I: IntoIterator<Item = RxFrame<B>>>(&mut self, frames: I) -> Dispatched {
        self.dispatch_with(frames, drop)
    }

    /// Dispatches a batch of frames, handing frames that find their queue full to
    /// `on_drop` (to return their buffers to a pool, say).
    pub fn dispatch_with<I, F>(&mut self, frames: I, mut on_drop: F) -> Dispatched
    where
        I: IntoIterator<Item = RxFrame<B>>,
        F: FnMut(RxFrame<B>),
    {
        let steering = self.steering.clone();
        let mut counts = [0u64; 3]; // backend, software, unhashed
        let mut done = Dispatched::default();
        steering.table().with(|table| {
            for mut frame in frames {
                let q = classify(&steering, table, &mut frame, &mut counts);
                let q = usize::from(q);
                let Some(queue) = self.shared.queues.get(q) else {
                    // A table never names a queue the steering lacks; be safe.
                    on_drop(frame);
                    done.dropped += 1;
                    continue;
                };
                match queue.push(frame) {
                    Ok(()) => {
                        if let Some(c) = self.delivered.get_mut(q) {
                            *c += 1;
                        }
                        done.delivered += 1;
                    }
                    Err(frame) => {
                        if let Some(c) = self.dropped.get_mut(q) {
                            *c += 1;
                        }
                        done.dropped += 1;
                        on_drop(frame);
                    }
                }
            }
        });
        self.flush(counts);
        done
    }

    fn flush(&mut self, counts: [u64; 3]) {
        let s = &self.shared;
        for ((c, d), x) in s
            .counters
            .iter()
            .zip(self.delivered.iter_mut())
            .zip(self.dropped.iter_mut())
        {
            if *d != 0 {
                c.delivered.fetch_add(*d, Ordering::Relaxed);
                *d = 0;
            }
            if *x != 0 {
                c.dropped.fetch_add(*x, Ordering::Relaxed);
                *x = 0;
            }
        }
        let [b, sw, u] = counts;
        for (c, v) in [
            (&s.backend_hashed, b),
            (&s.software_hashed, sw),
            (&s.unhashed, u),
        ] {
            if v != 0 {
                c.fetch_add(v, Ordering::Relaxed);
            }
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> DispatchStats {
        self.shared.stats()
    }
}

/// The queue of one frame; fills its meta's hash and layout when computed here.
#[inline]
fn classify<B: AsRef<[u8]>>(
    steering: &Steering,
    table: &IndirectionTable,
    frame: &mut RxFrame<B>,
    counts: &mut [u64; 3],
) -> u16 {
    if let Some(h) = frame.meta.rss {
        counts[0] += 1;
        return table.queue(h.value);
    }
    let [_, software, unhashed] = counts;
    let data = frame.data.as_ref();
    let input = match &frame.meta.layout {
        Some(layout) => steering.config().input(data, layout),
        None => match steering.config().layout.parse(data) {
            Ok(layout) => {
                let input = steering.config().input(data, &layout);
                // Keep the layout: later stages (GRO) need not parse again.
                frame.meta.layout = Some(layout);
                input
            }
            Err(_) => None,
        },
    };
    match input {
        Some(input) => {
            let h = steering.hash_input(&input);
            frame.meta.rss = Some(h);
            *software += 1;
            table.queue(h.value)
        }
        None => {
            *unhashed += 1;
            steering.default_queue()
        }
    }
}

impl<B> Shared<B> {
    fn stats(&self) -> DispatchStats {
        DispatchStats {
            queues: self
                .counters
                .iter()
                .map(|c| QueueStats {
                    delivered: c.delivered.load(Ordering::Relaxed),
                    dropped: c.dropped.load(Ordering::Relaxed),
                })
                .collect(),
            backend_hashed: self.backend_hashed.load(Ordering::Relaxed),
            software_hashed: self.software_hashed.load(Ordering::Relaxed),
            unhashed: self.unhashed.load(Ordering::Relaxed),
        }
    }
}

/// The receiving end of one queue: the core that owns the queue drains it.
#[derive(Debug)]
pub struct QueueReceiver<B> {
    shared: Arc<Shared<B>>,
    queue: u16,
}

impl<B> QueueReceiver<B> {
    /// The queue number.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    fn inner(&self) -> Option<&ArrayQueue<RxFrame<B>>> {
        self.shared.queues.get(usize::from(self.queue))
    }

    /// The oldest frame, if any.
    pub fn pop(&self) -> Option<RxFrame<B>> {
        self.inner()?.pop()
    }

    /// Moves up to `max` frames, oldest first, onto `out`; returns how many.
    pub fn pop_batch(&self, out: &mut Vec<RxFrame<B>>, max: usize) -> usize {
        let Some(q) = self.inner() else { return 0 };
        let mut n = 0;
        while n < max {
            let Some(f) = q.pop() else { break };
            out.push(f);
            n += 1;
        }
        n
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.inner().map_or(0, ArrayQueue::len)
    }

    /// True if no frame is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue's capacity.
    pub fn capacity(&self) -> usize {
        self.inner().map_or(0, ArrayQueue::capacity)
    }

    /// This queue's counters.
    pub fn stats(&self) -> QueueStats {
        self.shared
            .counters
            .get(usize::from(self.queue))
            .map_or(QueueStats::default(), |c| QueueStats {
                delivered: c.delivered.load(Ordering::Relaxed),
                dropped: c.dropped.load(Ordering::Relaxed),
            })
    }
}
