//! Software RSS dispatch: frames from one receive ring into N per-queue queues.
//!
//! For a backend with one receive queue (a TAP without multi-queue, an AF_XDP
//! socket on a single-queue NIC) this is the NIC's RSS block done in software, as
//! Linux's RPS is: for each frame, take the backend's hash if it has one, else read
//! the hash input from the frame's bytes ([`HashConfig::extract`]; a full parse
//! only where that cannot decide, or the layout already in the frame), hash it
//! ([`Steering`]) and record the hash in the frame; then push the frame onto the
//! queue the indirection table names.
//!
//! Frames without a backend hash are taken in chunks: their inputs are read, then
//! hashed together ([`crate::Toeplitz::hash_batch`]), then the chunk is pushed in
//! ring order. Frames with a backend hash go straight to their queue when no frame
//! before them is waiting for a hash. What a frame is, is the [`RxItem`] trait:
//! [`RxFrame`] carries a whole [`OffloadMeta`](linerate_offload::OffloadMeta) (40
//! bytes with a borrowed slice), [`RxBuf`] only the hash (24 bytes). Items are
//! moved by value into the queues, so the smaller an item, the faster it
//! dispatches (see "Performance" in the crate documentation).
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
use linerate_offload::RssHash;

use crate::error::ConfigError;
use crate::extract::Located;
use crate::indirection::IndirectionTable;
use crate::input::{HashConfig, HashInput};
pub use crate::item::{RxBuf, RxFrame, RxItem};
use crate::steering::Steering;

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
struct Shared<T> {
    queues: Box<[ArrayQueue<T>]>,
    counters: Box<[CachePadded<Counters>]>,
    backend_hashed: AtomicU64,
    software_hashed: AtomicU64,
    unhashed: AtomicU64,
}

/// Frames are classified, hashed and pushed this many at a time.
const CHUNK: usize = 32;

/// A queue entry that is not known yet: the frame's input is being hashed.
const PENDING: u16 = u16::MAX;

/// Per-call counts of where hashes came from.
#[derive(Debug, Default)]
struct Sources {
    backend: u64,
    software: u64,
    unhashed: u64,
}

/// The queues of one call and its per-queue counts.
struct Out<'a, T, F> {
    shared: &'a Shared<T>,
    delivered: &'a mut [u64],
    dropped: &'a mut [u64],
    on_drop: F,
    done: Dispatched,
}

impl<T, F: FnMut(T)> Out<'_, T, F> {
    /// Pushes `frame` onto queue `q`, or hands it to `on_drop` if that is full.
    #[inline(always)]
    fn push(&mut self, q: u16, frame: T) {
        let q = usize::from(q);
        let Some(queue) = self.shared.queues.get(q) else {
            // A table never names a queue the steering lacks; be safe.
            (self.on_drop)(frame);
            self.done.dropped += 1;
            return;
        };
        match queue.push(frame) {
            Ok(()) => {
                if let Some(c) = self.delivered.get_mut(q) {
                    *c += 1;
                }
                self.done.delivered += 1;
            }
            Err(frame) => {
                if let Some(c) = self.dropped.get_mut(q) {
                    *c += 1;
                }
                self.done.dropped += 1;
                (self.on_drop)(frame);
            }
        }
    }
}

/// Takes frames from one receive ring and spreads them over per-queue queues.
///
/// Items are any [`RxItem`]: [`RxFrame`] (with a whole
/// [`OffloadMeta`](linerate_offload::OffloadMeta)) or the smaller [`RxBuf`].
/// Frames without a backend hash are taken 32 at a time: the hash inputs of such
/// a chunk are read first, then hashed together
/// ([`Toeplitz::hash_batch`](crate::Toeplitz::hash_batch)), then the frames are
/// pushed in ring order.
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
/// assert!(got[0].meta.rss.is_some());
/// ```
#[derive(Debug)]
pub struct Dispatcher<T> {
    steering: Arc<Steering>,
    shared: Arc<Shared<T>>,
    /// Per-call counts, flushed to the shared counters at the end of a call.
    delivered: Box<[u64]>,
    dropped: Box<[u64]>,
    /// The chunk being dispatched and its hash inputs (reused across calls).
    chunk: Vec<T>,
    inputs: Vec<HashInput>,
}

impl<T: RxItem> Dispatcher<T> {
    /// A dispatcher into `steering.queues()` queues of `capacity` frames each, and
    /// the receivers of those queues (index = queue number).
    pub fn new(
        steering: Arc<Steering>,
        capacity: usize,
    ) -> Result<(Dispatcher<T>, Vec<QueueReceiver<T>>), ConfigError> {
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
                chunk: Vec::with_capacity(CHUNK),
                inputs: Vec::with_capacity(CHUNK),
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
    pub fn dispatch<I: IntoIterator<Item = T>>(&mut self, frames: I) -> Dispatched {
        self.dispatch_with(frames, drop)
    }

    /// Dispatches a batch of frames, handing frames that find their queue full to
    /// `on_drop` (to return their buffers to a pool, say).
    pub fn dispatch_with<I, F>(&mut self, frames: I, on_drop: F) -> Dispatched
    where
        I: IntoIterator<Item = T>,
        F: FnMut(T),
    {
        let steering = self.steering.clone();
        let mut sources = Sources::default();
        let mut out = Out {
            shared: &self.shared,
            delivered: &mut self.delivered,
            dropped: &mut self.dropped,
            on_drop,
            done: Dispatched::default(),
        };
        let chunk = &mut self.chunk;
        let inputs = &mut self.inputs;
        steering.table().with(|table| {
            let mut queues = [0u16; CHUNK];
            let mut flush = |chunk: &mut Vec<T>, out: &mut Out<'_, T, F>, sources: &mut Sources| {
                classify(&steering, table, chunk, inputs, &mut queues, sources);
                for (frame, &q) in chunk.drain(..).zip(queues.iter()) {
                    out.push(q, frame);
                }
            };
            for frame in frames {
                // A frame with the backend's hash goes straight to its queue, unless
                // frames before it wait in the chunk (ring order is kept).
                if chunk.is_empty()
                    && let Some(h) = frame.rss()
                {
                    sources.backend += 1;
                    out.push(table.queue(h.value), frame);
                    continue;
                }
                chunk.push(frame);
                if chunk.len() == CHUNK {
                    flush(chunk, &mut out, &mut sources);
                }
            }
            if !chunk.is_empty() {
                flush(chunk, &mut out, &mut sources);
            }
        });
        let done = out.done;
        self.flush(sources);
        done
    }

    fn flush(&mut self, sources: Sources) {
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
        for (c, v) in [
            (&s.backend_hashed, sources.backend),
            (&s.software_hashed, sources.software),
            (&s.unhashed, sources.unhashed),
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

/// The queue of every frame of a chunk (`queues[i]` for `chunk[i]`); records the
/// hashes computed here in the frames. Inputs are read first, then hashed in one
/// [`crate::Toeplitz::hash_batch`] call.
#[inline]
fn classify<T: RxItem>(
    steering: &Steering,
    table: &IndirectionTable,
    chunk: &mut [T],
    inputs: &mut Vec<HashInput>,
    queues: &mut [u16; CHUNK],
    sources: &mut Sources,
) {
    inputs.clear();
    let config = steering.config();
    for (frame, q) in chunk.iter_mut().zip(queues.iter_mut()) {
        if let Some(h) = frame.rss() {
            sources.backend += 1;
            *q = table.queue(h.value);
        } else if let Some(input) = input_of(config, frame) {
            inputs.push(input);
            *q = PENDING;
        } else {
            sources.unhashed += 1;
            *q = steering.default_queue();
        }
    }
    if inputs.is_empty() {
        return;
    }
    let mut hashes = [0u32; CHUNK];
    steering.hasher().hash_batch(inputs, &mut hashes);
    let mut computed = inputs.iter().zip(hashes);
    for (frame, q) in chunk.iter_mut().zip(queues.iter_mut()) {
        if *q == PENDING
            && let Some((input, value)) = computed.next()
        {
            frame.set_rss(RssHash {
                value,
                kind: input.kind(),
            });
            *q = table.queue(value);
        }
    }
    sources.software += inputs.len() as u64;
}

/// The hash input of a frame without a hash: from its layout if it has one, else
/// read from its bytes, else (rarely) parsed, keeping the layout in the frame.
#[inline(always)]
fn input_of<T: RxItem>(config: &HashConfig, frame: &mut T) -> Option<HashInput> {
    if let Some(layout) = frame.layout() {
        return config.input(frame.frame(), layout);
    }
    match config.locate(frame.frame()) {
        Located::At(site) => site.input(frame.frame()),
        Located::Unhashable => None,
        Located::Parse => parse_input(config, frame),
    }
}

/// The full path for the frames [`HashConfig::locate`] leaves to a parse.
#[cold]
#[inline(never)]
fn parse_input<T: RxItem>(config: &HashConfig, frame: &mut T) -> Option<HashInput> {
    let data = frame.frame();
    let layout = config.layout.parse(data).ok()?;
    let input = config.input(data, &layout);
    frame.set_layout(layout);
    input
}

impl<T> Shared<T> {
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
pub struct QueueReceiver<T> {
    shared: Arc<Shared<T>>,
    queue: u16,
}

impl<T> QueueReceiver<T> {
    /// The queue number.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    fn inner(&self) -> Option<&ArrayQueue<T>> {
        self.shared.queues.get(usize::from(self.queue))
    }

    /// The oldest frame, if any.
    pub fn pop(&self) -> Option<T> {
        self.inner()?.pop()
    }

    /// Moves up to `max` frames, oldest first, onto `out`; returns how many.
    pub fn pop_batch(&self, out: &mut Vec<T>, max: usize) -> usize {
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
