//! The sender's SACK scoreboard (RFC 2018 section 5, RFC 6675 sections 2 to 4).
//!
//! It keeps which bytes above SND.UNA the receiver reported holding, so that loss
//! recovery retransmits only the holes. Blocks outside `(SND.UNA, SND.MAX]` are
//! ignored (a D-SACK or a lie). [`Scoreboard::lost_boundary`] implements
//! RFC 6675's IsLost(): a hole is lost when at least DupThresh (3) SMSS of SACKed
//! bytes lie above it.

use super::seq::Seq;

/// DupThresh (RFC 6675 section 2).
pub const DUP_THRESH: usize = 3;
/// Most blocks remembered; a reneging or adversarial receiver cannot grow it.
const MAX_BLOCKS: usize = 64;

/// SACKed ranges above SND.UNA.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scoreboard {
    blocks: Vec<(Seq, Seq)>,
    sacked: usize,
}

impl Scoreboard {
    /// Empty.
    pub fn new() -> Scoreboard {
        Scoreboard::default()
    }

    /// Total SACKed bytes above SND.UNA.
    pub fn sacked_bytes(&self) -> usize {
        self.sacked
    }

    /// The highest SACKed sequence number (the end of the last block).
    #[cfg(test)]
    pub fn high_sacked(&self) -> Option<Seq> {
        self.blocks.last().map(|&(_, e)| e)
    }

    /// True if nothing is SACKed.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Adds the blocks of one ACK; returns true if any byte was newly SACKed.
    #[cfg(test)]
    pub fn update(&mut self, una: Seq, max: Seq, blocks: &[(u32, u32)]) -> bool {
        self.update_with(una, max, blocks, |_, _| {})
    }

    /// [`Scoreboard::update`], calling `newly(l, r)` for each range `[l, r)` this
    /// ACK SACKs for the first time (what RACK takes as delivered, RFC 8985
    /// section 6.2).
    pub fn update_with(
        &mut self,
        una: Seq,
        max: Seq,
        blocks: &[(u32, u32)],
        mut newly: impl FnMut(Seq, Seq),
    ) -> bool {
        let before = self.sacked;
        for &(l, r) in blocks {
            let (l, r) = (Seq(l), Seq(r));
            if l >= r || l <= una || r > max {
                continue;
            }
            let mut at = l;
            for &(s, e) in &self.blocks {
                if e <= at {
                    continue;
                }
                if s >= r {
                    break;
                }
                if s > at {
                    newly(at, s);
                }
                at = at.max(e);
                if at >= r {
                    break;
                }
            }
            if at < r {
                newly(at, r);
            }
            self.insert(l, r);
        }
        self.sacked > before
    }

    /// The SACKed ranges, in sequence order.
    pub fn blocks(&self) -> &[(Seq, Seq)] {
        &self.blocks
    }

    fn insert(&mut self, l: Seq, r: Seq) {
        let i = self
            .blocks
            .iter()
            .position(|&(_, e)| e >= l)
            .unwrap_or(self.blocks.len());
        let mut j = i;
        let (mut s, mut e) = (l, r);
        while let Some(&(bs, be)) = self.blocks.get(j) {
            if bs > r {
                break;
            }
            s = s.min(bs);
            e = e.max(be);
            j += 1;
        }
        if j == i && self.blocks.len() >= MAX_BLOCKS {
            return;
        }
        let removed: usize = self
            .blocks
            .get(i..j)
            .unwrap_or_default()
            .iter()
            .map(|&(a, b)| b.since(a))
            .sum();
        self.blocks.splice(i..j, [(s, e)]);
        self.sacked = self.sacked - removed + e.since(s);
    }

    /// Forgets everything below `una` (cumulatively acknowledged).
    pub fn prune(&mut self, una: Seq) {
        let mut sacked = 0;
        self.blocks.retain_mut(|b| {
            if b.1 <= una {
                return false;
            }
            b.0 = b.0.max(una);
            sacked += b.1.since(b.0);
            true
        });
        self.sacked = sacked;
    }

    /// Forgets everything (after a retransmission timeout, RFC 2018 section 5.1).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.sacked = 0;
    }

    /// True if `seq` is SACKed.
    #[cfg(test)]
    pub fn is_sacked(&self, seq: Seq) -> bool {
        self.blocks.iter().any(|&(s, e)| seq.in_range(s, e))
    }

    /// The end of the SACKed block that holds `seq`, if any.
    pub fn sacked_until(&self, seq: Seq) -> Option<Seq> {
        self.blocks
            .iter()
            .find(|&&(s, e)| seq.in_range(s, e))
            .map(|&(_, e)| e)
    }

    /// The start of the first SACKed block above `seq`, if any.
    pub fn next_sacked_after(&self, seq: Seq) -> Option<Seq> {
        self.blocks.iter().find(|&&(s, _)| s > seq).map(|&(s, _)| s)
    }

    /// IsLost() boundary: every un-SACKed byte below it has at least DupThresh
    /// segments' worth (`DUP_THRESH * mss` bytes) SACKed above it.
    pub fn lost_boundary(&self, mss: usize) -> Option<Seq> {
        let need = DUP_THRESH.saturating_sub(1).max(1) * mss + 1;
        let mut above = 0usize;
        for &(s, e) in self.blocks.iter().rev() {
            above += e.since(s);
            if above >= need {
                return Some(s);
            }
        }
        None
    }

    /// Un-SACKed bytes in `[from, to)`.
    pub fn holes_between(&self, from: Seq, to: Seq) -> usize {
        if to <= from {
            return 0;
        }
        let sacked: usize = self
            .blocks
            .iter()
            .map(|&(s, e)| e.min(to).since(s.max(from)))
            .sum();
        to.since(from).saturating_sub(sacked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_prune_and_bounds() {
        let mut sb = Scoreboard::new();
        let una = Seq(1000);
        let max = Seq(10_000);
        assert!(sb.update(una, max, &[(2000, 3000), (4000, 5000)]));
        assert_eq!(sb.sacked_bytes(), 2000);
        // Below una (D-SACK) or beyond max: ignored.
        assert!(!sb.update(una, max, &[(500, 900), (9000, 11_000)]));
        // Merging.
        assert!(sb.update(una, max, &[(2500, 4500)]));
        assert_eq!(sb.sacked_bytes(), 3000);
        assert_eq!(sb.high_sacked(), Some(Seq(5000)));
        assert!(sb.is_sacked(Seq(2000)));
        assert!(!sb.is_sacked(Seq(5000)));
        assert_eq!(sb.sacked_until(Seq(2100)), Some(Seq(5000)));
        assert_eq!(sb.next_sacked_after(Seq(1000)), Some(Seq(2000)));
        assert_eq!(sb.holes_between(Seq(1000), Seq(6000)), 2000);
        sb.prune(Seq(3000));
        assert_eq!(sb.sacked_bytes(), 2000);
        sb.prune(Seq(6000));
        assert!(sb.is_empty());
    }

    #[test]
    fn update_reports_only_newly_sacked_ranges() {
        let mut sb = Scoreboard::new();
        let (una, max) = (Seq(0), Seq(100_000));
        sb.update(una, max, &[(2000, 3000), (5000, 6000)]);
        let mut got = Vec::new();
        sb.update_with(una, max, &[(1000, 7000)], |l, r| got.push((l.0, r.0)));
        assert_eq!(got, vec![(1000, 2000), (3000, 5000), (6000, 7000)]);
        got.clear();
        sb.update_with(una, max, &[(1500, 6500)], |l, r| got.push((l.0, r.0)));
        assert!(got.is_empty());
        assert_eq!(sb.blocks(), &[(Seq(1000), Seq(7000))]);
    }

    #[test]
    fn lost_boundary_needs_dupthresh() {
        let mut sb = Scoreboard::new();
        let una = Seq(0);
        sb.update(una, Seq(100_000), &[(2000, 3000)]);
        assert_eq!(sb.lost_boundary(1000), None);
        sb.update(una, Seq(100_000), &[(4000, 6000)]);
        // 3000 bytes SACKed above 2000: more than (3 - 1) * 1000.
        assert_eq!(sb.lost_boundary(1000), Some(Seq(2000)));
    }
}
