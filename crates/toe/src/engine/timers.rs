//! Connection timers: an indexed binary min-heap of `(deadline, slot)` with at
//! most one entry per connection slot, so it never holds more entries than
//! there are connections with a timer running.
//!
//! A connection's timers (RFC 6298 retransmission, delayed ACK, persist,
//! keep-alive, SYN retransmission, TIME-WAIT) are folded into its earliest
//! deadline by `Conn::next_deadline`; the heap keeps that deadline, or an
//! earlier one: a deadline that moved later is left where it was and, when it
//! comes, the connection finds nothing due and schedules its real one (the
//! cheap direction, as the events that push a timer back, ACKs, are the
//! common ones). A freed slot's entry is removed at once rather than left to
//! be skipped when it comes due, so connections that come and go leave
//! nothing behind. Each position is tracked per slot, so moving an entry
//! earlier or removing it is O(log n).

use crate::time::Instant;

/// "Not in the heap" in [`TimerHeap::pos`].
const NONE: u32 = u32::MAX;

/// Deadlines by slot, earliest first.
#[derive(Debug, Clone, Default)]
pub(super) struct TimerHeap {
    /// `(deadline, slot)`, a binary min-heap on the deadline.
    heap: Vec<(Instant, u32)>,
    /// The heap position of each slot's entry, or [`NONE`].
    pos: Vec<u32>,
}

impl TimerHeap {
    /// The earliest entry.
    pub fn peek(&self) -> Option<(Instant, usize)> {
        self.heap.first().map(|&(t, i)| (t, i as usize))
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.heap.capacity() * size_of::<(Instant, u32)>() + self.pos.capacity() * size_of::<u32>()
    }

    /// The deadline held for `slot`, if any.
    #[cfg(test)]
    pub fn get(&self, slot: usize) -> Option<Instant> {
        let p = *self.pos.get(slot)?;
        self.heap.get(p as usize).map(|&(t, _)| t)
    }

    /// Makes sure `slot` is woken at `at` or before: adds an entry, or moves an
    /// existing later one to `at`; an entry already at or before `at` stays.
    pub fn schedule(&mut self, slot: usize, at: Instant) {
        let Ok(s) = u32::try_from(slot) else { return };
        if s == NONE {
            return;
        }
        if self.pos.len() <= slot {
            self.pos.resize(slot + 1, NONE);
        }
        let p = self.pos.get(slot).copied().unwrap_or(NONE);
        if p == NONE {
            let at_end = self.heap.len();
            self.heap.push((at, s));
            self.set_pos(at_end);
            self.sift_up(at_end);
        } else if let Some(e) = self.heap.get_mut(p as usize)
            && at < e.0
        {
            e.0 = at;
            self.sift_up(p as usize);
        }
    }

    /// Removes the earliest entry if it is due at `now`; returns its slot.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        let &(t, s) = self.heap.first()?;
        if t > now {
            return None;
        }
        self.remove_at(0);
        Some(s as usize)
    }

    /// Removes `slot`'s entry, if it has one.
    pub fn remove(&mut self, slot: usize) {
        if let Some(&p) = self.pos.get(slot)
            && p != NONE
        {
            self.remove_at(p as usize);
        }
    }

    fn remove_at(&mut self, p: usize) {
        let Some(&(_, s)) = self.heap.get(p) else {
            return;
        };
        if let Some(x) = self.pos.get_mut(s as usize) {
            *x = NONE;
        }
        let last = self.heap.len() - 1;
        self.heap.swap(p, last);
        self.heap.pop();
        if p < last {
            self.set_pos(p);
            let p = self.sift_up(p);
            self.sift_down(p);
        }
    }

    /// Records where the entry at heap position `p` is.
    fn set_pos(&mut self, p: usize) {
        if let Some(&(_, s)) = self.heap.get(p)
            && let Some(x) = self.pos.get_mut(s as usize)
        {
            *x = p as u32;
        }
    }

    fn sift_up(&mut self, mut p: usize) -> usize {
        while p > 0 {
            let parent = (p - 1) / 2;
            let (Some(a), Some(b)) = (self.heap.get(p), self.heap.get(parent)) else {
                break;
            };
            if a.0 >= b.0 {
                break;
            }
            self.heap.swap(p, parent);
            self.set_pos(p);
            p = parent;
        }
        self.set_pos(p);
        p
    }

    fn sift_down(&mut self, mut p: usize) {
        let n = self.heap.len();
        loop {
            let (l, r) = (2 * p + 1, 2 * p + 2);
            let key = |i: usize| self.heap.get(i).map(|e| e.0);
            let mut m = p;
            if l < n && key(l) < key(m) {
                m = l;
            }
            if r < n && key(r) < key(m) {
                m = r;
            }
            if m == p {
                break;
            }
            self.heap.swap(p, m);
            self.set_pos(p);
            p = m;
        }
        self.set_pos(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::BTreeMap;

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    #[test]
    fn one_entry_per_slot_earliest_kept() {
        let mut h = TimerHeap::default();
        h.schedule(3, t(50));
        h.schedule(3, t(80));
        assert_eq!(h.len(), 1);
        assert_eq!(h.get(3), Some(t(50)));
        h.schedule(3, t(20));
        assert_eq!((h.len(), h.get(3)), (1, Some(t(20))));
        h.schedule(1, t(30));
        assert_eq!(h.peek(), Some((t(20), 3)));
        assert_eq!(h.pop_due(t(19)), None);
        assert_eq!(h.pop_due(t(25)), Some(3));
        assert_eq!(h.get(3), None);
        h.remove(1);
        assert_eq!((h.len(), h.peek()), (0, None));
    }

    /// Against a model (a map of slot to deadline): random schedules, removals
    /// and pops keep the same earliest entry and the same set.
    #[test]
    fn matches_a_sorted_model() {
        let mut rng = Rng::new(5);
        let mut h = TimerHeap::default();
        let mut model: BTreeMap<usize, Instant> = BTreeMap::new();
        let mut now = 0;
        for _ in 0..20_000 {
            let slot = rng.below(300) as usize;
            match rng.below(4) {
                0 | 1 => {
                    let at = t(now + rng.below(1000));
                    h.schedule(slot, at);
                    let e = model.entry(slot).or_insert(at);
                    *e = (*e).min(at);
                }
                2 => {
                    h.remove(slot);
                    model.remove(&slot);
                }
                _ => {
                    now += rng.below(20);
                    while let Some(s) = h.pop_due(t(now)) {
                        let due = model.remove(&s);
                        assert!(due.is_some_and(|d| d <= t(now)), "{s} {due:?}");
                    }
                    assert!(model.values().all(|&d| d > t(now)));
                }
            }
            assert_eq!(h.len(), model.len());
            let min = model.values().min().copied();
            assert_eq!(h.peek().map(|(t, _)| t), min);
            assert_eq!(h.get(slot), model.get(&slot).copied());
        }
    }
}
