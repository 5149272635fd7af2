//! One direction of a memory wire: the fault stage and the receiver's rings.

use super::faults::{Deliver, FaultStage, Faults};
use crate::caps::NicCaps;
use crate::counters::{Counter, Counters, Tally};
use crate::frame::{Batch, Frame};
use crate::notify::Notify;
use std::collections::VecDeque;
use std::sync::Arc;

/// A receive ring: frames in flight or waiting, in arrival order.
///
/// Arrival times are kept beside the frames, not paired with them: a batch
/// then moves between the transmitter's batch, the ring and the receiver's
/// batch as one run of frame records (no per-frame pair built and copied on
/// the way, which cost as much as the rest of the ring's work), and the
/// receive side finds the frames that have arrived by reading only the times.
/// Times never decrease (each is at least the one before it).
#[derive(Debug, Default)]
struct Ring {
    frames: VecDeque<Frame>,
    /// `arrivals[i]` is when `frames[i]` arrives (virtual nanoseconds).
    arrivals: VecDeque<u64>,
    /// Frames delivered since the receiver was last notified.
    fresh: bool,
}

impl Ring {
    /// The arrival time a frame sent at `arrival` gets: no earlier than the
    /// frame before it (the ring is a FIFO).
    fn arrival_after(&self, arrival: u64) -> u64 {
        self.arrivals
            .back()
            .map_or(arrival, |&last| last.max(arrival))
    }
}

/// The receiver's side of a wire: its rings, limits and counters.
#[derive(Debug)]
struct Rings {
    rings: Vec<Ring>,
    ring_len: usize,
    caps: NicCaps,
    counters: Counters,
    notifies: Vec<Arc<Notify>>,
    /// Per-ring drop tallies of the current push.
    tally: Vec<Tally>,
}

impl Deliver for Rings {
    fn deliver(&mut self, ring: usize, arrival: u64, mut frame: Frame) {
        // The receiver hashes for itself.
        frame.meta.rss = None;
        let Some(r) = self.rings.get_mut(ring) else {
            return;
        };
        let tally = self.tally.get_mut(ring);
        if frame.meta.gso.is_none()
            && frame.len() > self.caps.max_frame_len(0)
            && oversize(&frame, &self.caps)
        {
            // Longer than the receiver's MTU and not a super-frame: a receiving
            // NIC counts it and drops it.
            if let Some(t) = tally {
                t.add(Counter::RxDroppedOversize, 1);
            }
            return;
        }
        if r.frames.len() >= self.ring_len {
            if let Some(t) = tally {
                t.add(Counter::RxDroppedRingFull, 1);
            }
            return;
        }
        let arrival = r.arrival_after(arrival);
        r.arrivals.push_back(arrival);
        r.frames.push_back(frame);
        r.fresh = true;
    }
}

impl Rings {
    /// [`Deliver::deliver`] for the first `n` frames of `batch`, taking them,
    /// all sent at `now`. When every one of them fits the receiver's MTU (or is
    /// a super-frame) and its ring has room for them all, as on a bulk path,
    /// they move into the ring as one run; otherwise one by one, each checked
    /// and counted as `deliver` does.
    fn deliver_batch(&mut self, ring: usize, now: u64, batch: &mut Batch, n: usize) {
        let n = n.min(batch.len());
        let caps = &self.caps;
        let max_len = caps.max_frame_len(0);
        let room = self
            .rings
            .get(ring)
            .map_or(0, |r| self.ring_len.saturating_sub(r.frames.len()));
        let frames = batch.get_mut(..n).unwrap_or_default();
        // One pass over the records: the hash cleared (the receiver hashes for
        // itself; `deliver` clears it too, whichever way the frames go) while
        // the sizes are checked.
        let whole = n <= room
            && frames.iter_mut().fold(true, |ok, f| {
                f.meta.rss = None;
                ok && (f.meta.gso.is_some() || f.len() <= max_len || !oversize(f, caps))
            });
        let Some(r) = self.rings.get_mut(ring).filter(|_| whole && n > 0) else {
            for f in batch.drain(..n) {
                self.deliver(ring, now, f);
            }
            return;
        };
        let arrival = r.arrival_after(now);
        r.arrivals.extend(core::iter::repeat_n(arrival, n));
        if r.frames.is_empty() && n == batch.len() {
            // The whole batch into an empty ring: its storage becomes the
            // ring's, and the ring's (empty) storage the batch's, so no frame
            // record moves at all (as veth hands over the skb).
            let spare = Vec::from(core::mem::take(&mut r.frames));
            r.frames = VecDeque::from(core::mem::replace(&mut **batch, spare));
        } else if n == batch.len() {
            // The whole batch behind frames already in the ring: appended as
            // one block copy (`extend` from a drain moves each record through
            // the stack, and that copy stalls on store forwarding), the
            // batch's storage kept for it.
            let mut run = VecDeque::from(core::mem::take(&mut **batch));
            r.frames.append(&mut run);
            **batch = Vec::from(run);
        } else {
            r.frames.extend(batch.drain(..n));
        }
        r.fresh = true;
    }
}

/// True if `frame`, not a super-frame, is longer than `caps` allows for its tags.
pub(crate) fn oversize(frame: &Frame, caps: &NicCaps) -> bool {
    let tags = linerate_wire::ethernet::walk_vlans(frame.bytes()).map_or(0, |w| w.tags);
    frame.len() > caps.max_frame_len(u8::try_from(tags).unwrap_or(2))
}

/// One direction toward one receiving port.
#[derive(Debug)]
pub(crate) struct Wire {
    stage: FaultStage,
    rx: Rings,
}

impl Wire {
    pub(crate) fn new(
        faults: &Faults,
        seed: u64,
        caps: NicCaps,
        ring_len: usize,
        counters: Counters,
        notifies: Vec<Arc<Notify>>,
    ) -> Wire {
        let queues = usize::from(caps.queues.max(1));
        Wire {
            stage: FaultStage::new(faults, seed),
            rx: Rings {
                rings: (0..queues).map(|_| Ring::default()).collect(),
                ring_len: ring_len.max(1),
                caps,
                counters,
                notifies,
                tally: vec![Tally::default(); queues],
            },
        }
    }

    /// Puts `frames`, sent on transmit queue `queue`, on the wire at `now`. They
    /// go to ring `queue % rings`, as a multi-queue virtio or veth device pairs
    /// its queues.
    pub(crate) fn push(&mut self, queue: usize, frames: impl Iterator<Item = Frame>, now: u64) {
        let ring = queue % self.rx.rings.len().max(1);
        let mut faults = Tally::default();
        if self.stage.is_transparent() {
            for f in frames {
                self.rx.deliver(ring, now, f);
            }
        } else {
            for f in frames {
                self.stage.process(f, ring, now, &mut faults, &mut self.rx);
            }
        }
        faults.flush(&self.rx.counters, ring);
        self.finish_push();
    }

    /// [`Wire::push`] of the first `n` frames of `batch`, taking them: over a
    /// wire without faults they move into the receiver's ring as one run.
    pub(crate) fn push_batch(&mut self, queue: usize, batch: &mut Batch, n: usize, now: u64) {
        if !self.stage.is_transparent() {
            let n = n.min(batch.len());
            self.push(queue, batch.drain(..n), now);
            return;
        }
        let ring = queue % self.rx.rings.len().max(1);
        self.rx.deliver_batch(ring, now, batch, n);
        self.finish_push();
    }

    fn finish_push(&mut self) {
        let Rings {
            rings,
            counters,
            notifies,
            tally,
            ..
        } = &mut self.rx;
        for (i, (r, t)) in rings.iter_mut().zip(tally.iter_mut()).enumerate() {
            t.flush(counters, i);
            if r.fresh {
                r.fresh = false;
                if let Some(n) = notifies.get(i) {
                    n.notify();
                }
            }
        }
    }

    /// Moves up to `max` frames that have arrived by `now` from `ring` to `batch`.
    pub(crate) fn pop(&mut self, ring: usize, now: u64, batch: &mut Batch, max: usize) -> usize {
        let ready = |rx: &Rings| {
            rx.rings
                .get(ring)
                .and_then(|r| r.arrivals.front())
                .is_some_and(|&at| at <= now)
        };
        if !ready(&self.rx) && self.stage.held() > 0 {
            self.stage.release(ring, &mut self.rx);
            self.finish_push();
        }
        let Some(r) = self.rx.rings.get_mut(ring) else {
            return 0;
        };
        // Arrival times never decrease: the frames that have arrived are a
        // prefix, taken as one run.
        let n = r
            .arrivals
            .iter()
            .take(max)
            .take_while(|&&at| at <= now)
            .count();
        if n > 0 && batch.is_empty() {
            // The batch is empty: the ring's storage becomes the batch's, and
            // the batch's (empty) storage the ring's. Contiguous when the
            // frames came in by `deliver_batch`'s exchange, so nothing moves;
            // frames past the first `n` (not arrived yet, or over `max`) go
            // back into the ring as one run.
            r.arrivals.drain(..n);
            let got = Vec::from(core::mem::take(&mut r.frames));
            let spare = core::mem::replace(&mut **batch, got);
            r.frames = VecDeque::from(spare);
            if batch.len() > n {
                r.frames.extend(batch.drain(n..));
            }
        } else {
            r.arrivals.drain(..n);
            batch.extend(r.frames.drain(..n));
        }
        n
    }

    /// When the next frame on `ring` arrives, if one is in flight or waiting.
    pub(crate) fn next_arrival(&self, ring: usize) -> Option<u64> {
        self.rx
            .rings
            .get(ring)
            .and_then(|r| r.arrivals.front())
            .copied()
    }

    /// Frames in flight or waiting on `ring`.
    pub(crate) fn pending(&self, ring: usize) -> usize {
        self.rx.rings.get(ring).map_or(0, |r| r.frames.len())
    }
}
