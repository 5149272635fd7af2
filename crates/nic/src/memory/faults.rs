//! Seeded, reproducible faults on one direction of a memory wire.
//!
//! Each frame put on the wire passes, in this order:
//!
//! 1. **loss**: dropped with probability `loss`;
//! 2. **corruption**: with probability `corrupt`, one bit chosen uniformly over the
//!    frame is flipped; a [`Checksum::Verified`] mark is removed (the wire does not
//!    vouch for it any more). A [`Checksum::Partial`] mark stays: such a frame's
//!    checksum field holds only the pseudo-header sum, so nobody can detect the
//!    flip. To test end-to-end detection, send with checksums complete (a port
//!    without `tx_csum`, where the shim completes them in software);
//! 3. **duplication**: with probability `duplicate` a copy follows the frame;
//! 4. **rate limit**: the link serialises frames at `bits_per_sec` (frame bytes
//!    plus `overhead_bytes`); a frame that would wait longer than `queue` behind
//!    the frames before it is dropped (a tail-drop queue);
//! 5. **delay**: it arrives `delay` after it left the link;
//! 6. **reordering**: with probability `reorder` (decided once per original frame,
//!    so a duplicate stays with it) the frame is held back until `reorder_depth`
//!    later frames have been put on the wire, then arrives behind them (netem's
//!    model). A held frame is also released when its receiver finds nothing else
//!    ready, so nothing is held forever on an idle link.
//!
//! Every probabilistic fault draws from its own xoshiro256** stream, seeded from
//! the wire's seed, and only when its probability is non-zero; so the same seed and
//! configuration give the same sequence, and enabling one fault does not change
//! the decisions of another.

use crate::counters::{Counter, Tally};
use crate::frame::Frame;
use crate::rng::{Prob, Rng, splitmix64};
use linerate_offload::Checksum;
use std::collections::VecDeque;
use std::time::Duration;

/// A link rate and the queue in front of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Link rate in bits per second (0: unlimited).
    pub bits_per_sec: u64,
    /// The longest a frame may wait behind earlier frames; beyond it, it is
    /// dropped (`wire_dropped_rate`).
    pub queue: Duration,
    /// Bytes counted per frame beyond the frame itself (Ethernet's preamble, FCS
    /// and inter-frame gap: 24).
    pub overhead_bytes: u32,
}

impl RateLimit {
    /// A rate with a `queue`-long tail-drop queue and Ethernet's 24 bytes of
    /// per-frame overhead.
    pub const fn new(bits_per_sec: u64, queue: Duration) -> RateLimit {
        RateLimit {
            bits_per_sec,
            queue,
            overhead_bytes: 24,
        }
    }

    /// Nanoseconds the link needs for `len` frame bytes.
    fn serialise_ns(&self, len: usize) -> u64 {
        let bits = (len as u128 + u128::from(self.overhead_bytes)) * 8;
        let ns = bits * 1_000_000_000 / u128::from(self.bits_per_sec.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// The faults of one direction of a wire. The default is a perfect wire.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame has one bit flipped.
    pub corrupt: f64,
    /// Probability that a frame is followed by a copy.
    pub duplicate: f64,
    /// Probability that a frame is held back behind later ones.
    pub reorder: f64,
    /// How many later frames overtake a held frame (0 disables reordering).
    pub reorder_depth: u32,
    /// Time from leaving the link to arriving at the receiver.
    pub delay: Duration,
    /// Link rate and queue; `None` is unlimited.
    pub rate: Option<RateLimit>,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        loss: 0.0,
        corrupt: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_depth: 0,
        delay: Duration::ZERO,
        rate: None,
    };

    /// True if the wire is perfect (every frame arrives at once, as sent).
    pub fn is_none(&self) -> bool {
        Prob::new(self.loss) == Prob::Never
            && Prob::new(self.corrupt) == Prob::Never
            && Prob::new(self.duplicate) == Prob::Never
            && (Prob::new(self.reorder) == Prob::Never || self.reorder_depth == 0)
            && self.delay.is_zero()
            && self.rate.is_none_or(|r| r.bits_per_sec == 0)
    }
}

/// A frame held back by the reordering fault.
#[derive(Debug)]
struct Held {
    /// Frames still to overtake it.
    remaining: u32,
    /// When it would have arrived.
    arrival: u64,
    /// Receive ring it goes to.
    ring: usize,
    frame: Frame,
}

/// The fault state of one direction: configuration, random streams, the rate
/// limiter's clock and the held frames.
#[derive(Debug)]
pub(crate) struct FaultStage {
    loss: Prob,
    corrupt: Prob,
    duplicate: Prob,
    reorder: Prob,
    depth: u32,
    delay_ns: u64,
    rate: Option<RateLimit>,
    rng_loss: Rng,
    rng_corrupt: Rng,
    rng_duplicate: Rng,
    rng_reorder: Rng,
    /// When the link finishes sending what it has (rate limit).
    link_free_at: u64,
    held: VecDeque<Held>,
}

/// Where [`FaultStage::process`] sends the frames that come out of it.
pub(crate) trait Deliver {
    /// `frame` arrives on `ring` at `arrival` (virtual nanoseconds).
    fn deliver(&mut self, ring: usize, arrival: u64, frame: Frame);
}

impl FaultStage {
    pub(crate) fn new(faults: &Faults, seed: u64) -> FaultStage {
        let mut s = seed;
        let mut stream = || Rng::new(splitmix64(&mut s));
        FaultStage {
            loss: Prob::new(faults.loss),
            corrupt: Prob::new(faults.corrupt),
            duplicate: Prob::new(faults.duplicate),
            reorder: if faults.reorder_depth == 0 {
                Prob::Never
            } else {
                Prob::new(faults.reorder)
            },
            depth: faults.reorder_depth,
            delay_ns: u64::try_from(faults.delay.as_nanos()).unwrap_or(u64::MAX),
            rate: faults.rate.filter(|r| r.bits_per_sec != 0),
            rng_loss: stream(),
            rng_corrupt: stream(),
            rng_duplicate: stream(),
            rng_reorder: stream(),
            link_free_at: 0,
            held: VecDeque::new(),
        }
    }

    /// True if frames pass untouched and at once.
    pub(crate) fn is_transparent(&self) -> bool {
        !self.loss.is_possible()
            && !self.corrupt.is_possible()
            && !self.duplicate.is_possible()
            && !self.reorder.is_possible()
            && self.delay_ns == 0
            && self.rate.is_none()
            && self.held.is_empty()
    }

    /// Puts `frame` on the wire at `now` toward `ring`, counting faults in `tally`.
    pub(crate) fn process(
        &mut self,
        mut frame: Frame,
        ring: usize,
        now: u64,
        tally: &mut Tally,
        out: &mut impl Deliver,
    ) {
        if self.rng_loss.chance(self.loss) {
            tally.add(Counter::WireLost, 1);
            return;
        }
        if self.rng_corrupt.chance(self.corrupt) {
            // The bit flipped is in this frame only, not in a payload buffer
            // other frames share: gather it first.
            if frame.linearize() {
                tally.add(Counter::SgLinearized, 1);
            }
            let bits = frame.len() as u64 * 8;
            if bits > 0 {
                let bit = self.rng_corrupt.below(bits);
                let byte = usize::try_from(bit / 8).unwrap_or(usize::MAX);
                if let Some(b) = frame.bytes_mut().get_mut(byte) {
                    *b ^= 1 << (bit % 8);
                }
                if matches!(frame.meta.csum, Checksum::Verified { .. }) {
                    frame.meta.csum = Checksum::None;
                }
                tally.add(Counter::WireCorrupted, 1);
            }
        }
        let copy = if self.rng_duplicate.chance(self.duplicate) {
            tally.add(Counter::WireDuplicated, 1);
            Some(frame.clone())
        } else {
            None
        };
        let hold = self.rng_reorder.chance(self.reorder);
        if hold {
            tally.add(Counter::WireReordered, 1);
        }
        for f in core::iter::once(frame).chain(copy) {
            let Some(arrival) = self.depart(f.len(), now) else {
                tally.add(Counter::WireDroppedRate, 1);
                continue;
            };
            if hold {
                self.held.push_back(Held {
                    remaining: self.depth,
                    arrival,
                    ring,
                    frame: f,
                });
            } else {
                out.deliver(ring, arrival, f);
                self.overtake(arrival, out);
            }
        }
    }

    /// The arrival time of a `len`-byte frame leaving at `now`, or `None` if the
    /// rate limiter's queue is full.
    fn depart(&mut self, len: usize, now: u64) -> Option<u64> {
        let left = match &self.rate {
            None => now,
            Some(r) => {
                let start = self.link_free_at.max(now);
                let queue_ns = u64::try_from(r.queue.as_nanos()).unwrap_or(u64::MAX);
                if start - now > queue_ns {
                    return None;
                }
                let done = start.saturating_add(r.serialise_ns(len));
                self.link_free_at = done;
                done
            }
        };
        Some(left.saturating_add(self.delay_ns))
    }

    /// One frame went past the held ones: release those it was the last to pass.
    fn overtake(&mut self, arrival: u64, out: &mut impl Deliver) {
        if self.held.is_empty() {
            return;
        }
        for h in self.held.iter_mut() {
            h.remaining = h.remaining.saturating_sub(1);
        }
        while self.held.front().is_some_and(|h| h.remaining == 0) {
            if let Some(h) = self.held.pop_front() {
                out.deliver(h.ring, h.arrival.max(arrival), h.frame);
            }
        }
    }

    /// Releases every held frame bound for `ring` (its receiver found nothing
    /// else ready).
    pub(crate) fn release(&mut self, ring: usize, out: &mut impl Deliver) {
        if self.held.iter().all(|h| h.ring != ring) {
            return;
        }
        let mut keep = VecDeque::with_capacity(self.held.len());
        while let Some(h) = self.held.pop_front() {
            if h.ring == ring {
                out.deliver(h.ring, h.arrival, h.frame);
            } else {
                keep.push_back(h);
            }
        }
        self.held = keep;
    }

    /// Frames held back now.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::PacketBuf;

    #[derive(Default)]
    struct Sink(Vec<(usize, u64, Vec<u8>)>);
    impl Deliver for Sink {
        fn deliver(&mut self, ring: usize, arrival: u64, frame: Frame) {
            self.0.push((ring, arrival, frame.bytes().to_vec()));
        }
    }

    fn frame(i: u32) -> Frame {
        Frame::plain(PacketBuf::from_slice(&i.to_be_bytes()))
    }

    #[test]
    fn perfect_wire_is_transparent() {
        let mut st = FaultStage::new(&Faults::NONE, 1);
        assert!(st.is_transparent());
        assert!(Faults::default().is_none());
        let mut sink = Sink::default();
        let mut t = Tally::default();
        for i in 0..10 {
            st.process(frame(i), 0, 5, &mut t, &mut sink);
        }
        assert_eq!(sink.0.len(), 10);
        assert!(sink.0.iter().all(|(r, a, _)| *r == 0 && *a == 5));
    }

    #[test]
    fn reorder_holds_a_frame_behind_depth_others() {
        let f = Faults {
            reorder: 1.0,
            reorder_depth: 2,
            ..Faults::NONE
        };
        let mut st = FaultStage::new(&f, 1);
        let mut sink = Sink::default();
        let mut t = Tally::default();
        st.process(frame(0), 0, 0, &mut t, &mut sink);
        assert_eq!(st.held(), 1);
        // With every frame held, nothing overtakes: release on an idle receiver.
        st.release(1, &mut sink);
        assert_eq!(st.held(), 1, "other rings' frames stay");
        st.release(0, &mut sink);
        assert_eq!(sink.0.len(), 1);
        assert_eq!(t.get(Counter::WireReordered), 1);
    }

    #[test]
    fn rate_limit_serialises_and_tail_drops() {
        let f = Faults {
            // 8 Mbit/s, no overhead: 1 byte per microsecond; queue 10 us.
            rate: Some(RateLimit {
                bits_per_sec: 8_000_000,
                queue: Duration::from_micros(10),
                overhead_bytes: 0,
            }),
            delay: Duration::from_micros(100),
            ..Faults::NONE
        };
        let mut st = FaultStage::new(&f, 1);
        let mut sink = Sink::default();
        let mut t = Tally::default();
        for i in 0..5 {
            // 4-byte frames: 4 us each.
            st.process(frame(i), 0, 0, &mut t, &mut sink);
        }
        let arrivals: Vec<u64> = sink.0.iter().map(|x| x.1).collect();
        // Waits of 0, 4, 8 us fit the 10 us queue; 12 and 16 do not.
        assert_eq!(arrivals, vec![104_000, 108_000, 112_000]);
        assert_eq!(t.get(Counter::WireDroppedRate), 2);
    }

    #[test]
    fn corruption_flips_exactly_one_bit_and_drops_verified() {
        let f = Faults {
            corrupt: 1.0,
            ..Faults::NONE
        };
        let mut st = FaultStage::new(&f, 9);
        let mut sink = Sink::default();
        let mut t = Tally::default();
        let mut fr = frame(0x1234_5678);
        fr.meta.csum = Checksum::Verified { levels: 1 };
        st.process(fr, 0, 0, &mut t, &mut sink);
        let got = u32::from_be_bytes(sink.0[0].2.clone().try_into().unwrap());
        assert_eq!((got ^ 0x1234_5678).count_ones(), 1);
    }
}
