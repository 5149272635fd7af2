//! Out-of-order reassembly bookkeeping and the SACK blocks it yields (RFC 9293
//! section 3.10.7.4 "seventh, process the segment text"; RFC 2018 section 4).
//!
//! The bytes themselves sit in the receive [`Ring`](super::ring::Ring) past the
//! readable part; this keeps the sequence ranges that arrived above RCV.NXT,
//! sorted and merged, at most [`MAX_RANGES`] of them. RFC 2018 section 4 orders
//! the SACK blocks a receiver reports: the block holding the most recently
//! received segment first, then the others most recent first.

use super::seq::Seq;
use linerate_wire::tcp::SackBlocks;

/// Most disjoint ranges tracked; a segment that would make more is dropped
/// (the peer retransmits it).
pub const MAX_RANGES: usize = 32;

/// Sequence ranges received above RCV.NXT.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    /// Sorted, disjoint, non-adjacent `[start, end)` ranges.
    ranges: Vec<(Seq, Seq)>,
    /// Starts of ranges, most recently touched last (RFC 2018 ordering).
    recent: Vec<Seq>,
}

impl Assembler {
    /// Nothing out of order.
    pub fn new() -> Assembler {
        Assembler::default()
    }

    /// True if no range is held.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Bytes held in all ranges.
    pub fn held(&self) -> usize {
        self.ranges.iter().map(|&(s, e)| e.since(s)).sum()
    }

    /// The ranges held, lowest first.
    #[cfg(test)]
    pub fn ranges(&self) -> &[(Seq, Seq)] {
        &self.ranges
    }

    /// Records `[start, end)`. Returns false (and records nothing) if that would
    /// need more than [`MAX_RANGES`] ranges.
    pub fn insert(&mut self, start: Seq, end: Seq) -> bool {
        if end <= start {
            return true;
        }
        // First range that ends at or after `start` (touching counts).
        let i = self
            .ranges
            .iter()
            .position(|&(_, e)| e >= start)
            .unwrap_or(self.ranges.len());
        // Ranges from i that start at or before `end` merge with the new one.
        let mut j = i;
        let (mut s, mut e) = (start, end);
        while let Some(&(rs, re)) = self.ranges.get(j) {
            if rs > end {
                break;
            }
            s = s.min(rs);
            e = e.max(re);
            j += 1;
        }
        if j == i && self.ranges.len() >= MAX_RANGES {
            return false;
        }
        for &(rs, _) in self.ranges.get(i..j).unwrap_or_default() {
            self.recent.retain(|&r| r != rs);
        }
        self.ranges.splice(i..j, [(s, e)]);
        self.recent.push(s);
        true
    }

    /// If the lowest range starts at or before `nxt`, removes it and returns its end.
    pub fn pop_front(&mut self, nxt: Seq) -> Option<Seq> {
        let &(s, e) = self.ranges.first()?;
        if s > nxt {
            return None;
        }
        self.ranges.remove(0);
        self.recent.retain(|&r| r != s);
        Some(e)
    }

    /// The first part of `[start, end)` already held, if any (a duplicate).
    pub fn overlap(&self, start: Seq, end: Seq) -> Option<(Seq, Seq)> {
        self.ranges
            .iter()
            .find(|&&(s, e)| s < end && start < e)
            .map(|&(s, e)| (s.max(start), e.min(end)))
    }

    /// Up to `max` SACK blocks, most recent first (RFC 2018 section 4).
    pub fn sack_blocks(&self, max: usize) -> SackBlocks {
        let mut out = SackBlocks::new();
        for &start in self.recent.iter().rev().take(max) {
            if let Some(&(s, e)) = self.ranges.iter().find(|&&(s, _)| s == start) {
                out.push((s.0, e.0));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_pops() {
        let mut a = Assembler::new();
        assert!(a.insert(Seq(20), Seq(30)));
        assert!(a.insert(Seq(40), Seq(50)));
        assert_eq!(a.ranges(), &[(Seq(20), Seq(30)), (Seq(40), Seq(50))]);
        // Touching and overlapping merge.
        assert!(a.insert(Seq(30), Seq(41)));
        assert_eq!(a.ranges(), &[(Seq(20), Seq(50))]);
        assert_eq!(a.pop_front(Seq(10)), None);
        assert_eq!(a.pop_front(Seq(20)), Some(Seq(50)));
        assert!(a.is_empty());
    }

    #[test]
    fn sack_order_is_most_recent_first() {
        let mut a = Assembler::new();
        a.insert(Seq(100), Seq(200));
        a.insert(Seq(300), Seq(400));
        a.insert(Seq(500), Seq(600));
        let b = a.sack_blocks(3);
        assert_eq!(b.as_slice(), &[(500, 600), (300, 400), (100, 200)]);
        a.insert(Seq(200), Seq(250));
        let b = a.sack_blocks(3);
        assert_eq!(b.as_slice(), &[(100, 250), (500, 600), (300, 400)]);
        assert_eq!(a.sack_blocks(1).len(), 1);
    }

    #[test]
    fn bounded() {
        let mut a = Assembler::new();
        for i in 0..MAX_RANGES as u32 {
            assert!(a.insert(Seq(i * 10), Seq(i * 10 + 5)));
        }
        assert!(!a.insert(Seq(10_000), Seq(10_001)));
        // Merging into an existing range is still fine.
        assert!(a.insert(Seq(5), Seq(10)));
        assert_eq!(a.ranges().len(), MAX_RANGES - 1);
    }

    #[test]
    fn wraps() {
        let mut a = Assembler::new();
        a.insert(Seq(u32::MAX - 5), Seq(5));
        a.insert(Seq(5), Seq(10));
        assert_eq!(a.ranges(), &[(Seq(u32::MAX - 5), Seq(10))]);
    }
}
