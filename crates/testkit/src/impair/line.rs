//! The frames one direction holds until they are due, released in time order.

use super::model::{ImpairCounters, Model};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One direction of an impaired link: a [`Model`] deciding each frame's fate and
/// the frames it delays, released by due time (ties in arrival order), as
/// netem's time-sorted queue releases them.
///
/// Frame buffers are kept and reused once released, so a warm line allocates
/// nothing per frame.
#[derive(Debug)]
pub struct DelayLine {
    model: Model,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Vec<u8>>,
    free: Vec<usize>,
    next_seq: u64,
    newest_released: Option<u64>,
    released: u64,
    out_of_order: u64,
}

impl DelayLine {
    /// A line whose frames `model` decides.
    pub fn new(model: Model) -> DelayLine {
        DelayLine {
            model,
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            newest_released: None,
            released: 0,
            out_of_order: 0,
        }
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// What the model decided so far, with the release counts.
    pub fn counters(&self) -> ImpairCounters {
        ImpairCounters {
            released: self.released,
            out_of_order: self.out_of_order,
            ..self.model.counters
        }
    }

    /// Frames held now.
    pub fn held(&self) -> usize {
        self.heap.len()
    }

    /// When the next held frame is due, if any.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Offers `frame`, arriving at `now`: the model decides, and each copy to be
    /// sent is held (corrupted if so decided) until due.
    pub fn offer(&mut self, now: u64, frame: &[u8]) {
        // ARP passes at once and takes no draw: the two runs compared (linerate,
        // which announces itself, and a kernel peer, which is asked) exchange
        // different ARP frames, and a draw spent on one would shift every later
        // draw, so the same TCP frame of the kernel would meet different fates
        // in the two runs (a SYN lost in one run only, say).
        // Ethertype ARP, hardware Ethernet, protocol IPv4.
        if frame.get(12..18) == Some(&[0x08, 0x06, 0x00, 0x01, 0x08, 0x00][..]) {
            self.hold(now, None, frame);
            return;
        }
        let verdict = self.model.decide(now, frame.len(), self.heap.len());
        for d in verdict.deliveries() {
            self.hold(d.due, d.flip, frame);
        }
    }

    /// Keeps a copy of `frame` until `due`, with bit `flip` flipped if given.
    fn hold(&mut self, due: u64, flip: Option<(usize, u8)>, frame: &[u8]) {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Vec::new());
                self.slots.len() - 1
            }
        };
        let Some(buf) = self.slots.get_mut(slot) else {
            return;
        };
        buf.clear();
        buf.extend_from_slice(frame);
        if let Some((byte, bit)) = flip
            && let Some(b) = buf.get_mut(byte)
        {
            *b ^= 1 << (bit & 7);
        }
        self.heap.push(Reverse((due, self.next_seq, slot)));
        self.next_seq += 1;
    }

    /// Hands every frame due at `now` (at most `max`) to `f`, earliest first;
    /// returns how many.
    pub fn release(&mut self, now: u64, max: usize, mut f: impl FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < max {
            match self.heap.peek() {
                Some(Reverse((due, _, _))) if *due <= now => {}
                _ => break,
            }
            let Some(Reverse((_, seq, slot))) = self.heap.pop() else {
                break;
            };
            if self.newest_released.is_some_and(|newest| seq < newest) {
                self.out_of_order += 1;
            }
            self.newest_released = Some(self.newest_released.map_or(seq, |s| s.max(seq)));
            if let Some(buf) = self.slots.get(slot) {
                f(buf);
            }
            self.free.push(slot);
            self.released += 1;
            n += 1;
        }
        n
    }
}
