//! The ACKs owed but not yet sent: their acknowledgment numbers and SACK
//! blocks (RFC 5681 section 4.2, RFC 2018 section 4).
//!
//! Several frames that each call for an immediate ACK can arrive in one receive
//! batch: out-of-order data, duplicates, and in-order data that fills all or
//! part of a hole. Each is owed an ACK of its own
//! ([`Rcv::owe_dup_ack`](super::state::Rcv::owe_dup_ack)), and the ACKs go out
//! after the batch. Each carries what it would have carried had it been sent
//! when its frame arrived, as Linux's per-segment processing sends them: the
//! acknowledgment number of that moment and the blocks of that moment (the
//! block holding that frame first, RFC 2018 section 4), not the final state.
//! Otherwise every ACK repeats the newest blocks and a block that stopped
//! growing is never reported; and a sender on a reordering path gets one
//! stretch ACK per batch where a Linux receiver sends one per segment, which
//! starves its RACK reordering window and undo of the timing they need (the
//! `delay 5 ms, reorder 10 %` cells, kernel to linerate, of
//! `tests/system_impair.rs`'s `issue_16_matrix`). One snapshot per owed
//! ACK, oldest first, in a fixed ring (no allocation per frame).
//!
//! D-SACK (RFC 2883 section 4): an ACK for data that arrived twice carries the
//! duplicate range as its first block, then the SACK blocks as RFC 2018 orders
//! them (for a duplicate above RCV.NXT, the block holding it next). A duplicate
//! that is part of a segment also bringing new data (a retransmitted GRO
//! super-segment partly below RCV.NXT) owes no duplicate ACK: its D-SACK block is
//! kept pending for the next ACK sent.

use super::assembler::Assembler;
use super::seq::Seq;
use super::state::Rcv;
use linerate_wire::tcp::SackBlocks;

/// Snapshots kept, and so ACKs owed at most. One owed beyond that takes the
/// place of an ACK that only moved the acknowledgment number on between two
/// that moved it further (dropped as a lost ACK would be: the next covers it),
/// or else of a duplicate beyond the third of its run, so that a long batch of in-order data keeps its last ACK (covering all) and
/// out-of-order frames after it keep their duplicate ACKs. Extra ones sent
/// with the final acknowledgment number would all be alike, and a sender
/// without SACK counts them as duplicate ACKs: more duplicates than segments
/// out reads as reordering, and it retransmits more than toward a Linux
/// receiver (the `SACK off, loss 1 %` cells of `tests/system_impair.rs`'s
/// `issue_16_matrix`, with `LINERATE_IMPAIR_DEBUG` for the kernel's
/// reordering estimate). So a batch gets at most this many ACKs, like a GRO
/// receiver's one per super-segment.
const SLOTS: usize = 16;

/// Owed ACKs' acknowledgment numbers and SACK blocks, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwedSacks {
    ring: [SackBlocks; SLOTS],
    acks: [u32; SLOTS],
    head: usize,
    len: usize,
    /// A D-SACK block not yet reported, for the next ACK that is not one owed
    /// (those carry their own).
    dsack: Option<(u32, u32)>,
}

impl OwedSacks {
    /// Records an ACK just owed: its acknowledgment number and blocks. Returns
    /// whether it is owed as one more ACK; in a full ring it takes the place of
    /// one (see [`SLOTS`]) or, with none to spare, of the newest if it moves
    /// the acknowledgment number on, and is dropped if it does not (its D-SACK
    /// block then waits for the next ACK not owed).
    pub fn push(&mut self, ack: Seq, blocks: SackBlocks, dsack: Option<(u32, u32)>) -> bool {
        if self.len < SLOTS {
            self.put(self.len, ack, blocks);
            self.len += 1;
            return true;
        }
        let at =
            |o: &OwedSacks, k: usize| Seq(o.acks.get((o.head + k) % SLOTS).copied().unwrap_or(0));
        // The newest ACK that only moved on between two that moved further;
        // else a duplicate of a run holding more than three (the oldest such
        // run: a sender without SACK retransmits at the third).
        let spare = (1..SLOTS)
            .rev()
            .find(|&k| {
                let next = if k + 1 == SLOTS { ack } else { at(self, k + 1) };
                at(self, k - 1) < at(self, k) && at(self, k) < next
            })
            .or_else(|| (4..SLOTS).find(|&k| (k - 4..k).all(|j| at(self, j) == at(self, k))));
        match spare {
            Some(k) => {
                for j in k..SLOTS - 1 {
                    let (i, n) = ((self.head + j) % SLOTS, (self.head + j + 1) % SLOTS);
                    if let (Some(&a), Some(&b)) = (self.acks.get(n), self.ring.get(n)) {
                        self.put_raw(i, a, b);
                    }
                }
                self.put(SLOTS - 1, ack, blocks);
            }
            None if at(self, SLOTS - 1) < ack => self.put(SLOTS - 1, ack, blocks),
            None => {
                if dsack.is_some() {
                    self.dsack = dsack;
                }
            }
        }
        false
    }

    /// Writes the `k`th owed ACK, counted from the oldest.
    fn put(&mut self, k: usize, ack: Seq, blocks: SackBlocks) {
        self.put_raw((self.head + k) % SLOTS, ack.0, blocks);
    }

    fn put_raw(&mut self, i: usize, ack: u32, blocks: SackBlocks) {
        if let (Some(slot), Some(a)) = (self.ring.get_mut(i), self.acks.get_mut(i)) {
            *slot = blocks;
            *a = ack;
        }
    }

    /// Keeps a D-SACK block for the next ACK sent.
    pub fn set_dsack(&mut self, l: Seq, r: Seq) {
        self.dsack = Some((l.0, r.0));
    }

    /// Takes the pending D-SACK block (an ACK is going out, or one is owed).
    pub fn take_dsack(&mut self) -> Option<(u32, u32)> {
        self.dsack.take()
    }

    /// The oldest owed ACK, now being sent: its acknowledgment number and blocks.
    pub fn pop(&mut self) -> Option<(Seq, SackBlocks)> {
        if self.len == 0 {
            return None;
        }
        let b = self.ring.get(self.head).copied()?;
        let a = self.acks.get(self.head).copied()?;
        self.head = (self.head + 1) % SLOTS;
        self.len -= 1;
        Some((Seq(a), b))
    }
}

/// The SACK option of an ACK now: `dsack` first if given, then up to the rest
/// of the room in blocks of `asm`, most recent first (RFC 2883 section 4,
/// RFC 2018 section 4).
pub(crate) fn blocks_now(asm: &Assembler, dsack: Option<(u32, u32)>, ts: bool) -> SackBlocks {
    let max = super::segment::max_sack_blocks(ts);
    let Some(d) = dsack else {
        return asm.sack_blocks(max);
    };
    let mut out = SackBlocks::new();
    out.push(d);
    for &b in asm.sack_blocks(max - 1).as_slice() {
        out.push(b);
    }
    out
}

/// A frame that calls for an immediate ACK arrived (out of order, a
/// duplicate, or in order filling all or part of a hole): owes it an ACK of its
/// own with RCV.NXT as it is now and, with SACK, the blocks as of this frame
/// (the one holding it first), after `dsack`, the range of it that arrived
/// before (RFC 2883), if any.
pub(crate) fn owe_dup_ack(
    rcv: &mut Rcv,
    asm: &Assembler,
    owed: &mut OwedSacks,
    dsack: Option<(Seq, Seq)>,
) {
    let d = dsack.map(|(l, r)| (l.0, r.0));
    // No blocks to report (in-order data, every second segment of a bulk
    // transfer): the empty set as a constant, not built and copied.
    let blocks = if rcv.sack_ok && (d.is_some() || !asm.is_empty()) {
        blocks_now(asm, d, rcv.ts_ok)
    } else {
        SackBlocks::new()
    };
    if owed.push(rcv.nxt, blocks, d) {
        rcv.owe_dup_ack();
    } else {
        rcv.ack_now = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_bounded() {
        let mut o = OwedSacks::default();
        for k in 0..20u32 {
            let own = o.push(
                Seq(100 + k),
                SackBlocks::from_slice(&[(k, k + 1)]).unwrap(),
                None,
            );
            assert_eq!(own, k < 16);
        }
        for k in 0..15u32 {
            let (ack, b) = o.pop().unwrap();
            assert_eq!(ack, Seq(100 + k));
            assert_eq!(b.as_slice(), &[(k, k + 1)]);
        }
        // Each owed beyond the ring took the newest one's place (it only moved
        // on between two that moved further): the last one's.
        let (ack, b) = o.pop().unwrap();
        assert_eq!(ack, Seq(119));
        assert_eq!(b.as_slice(), &[(19, 20)]);
        assert!(o.pop().is_none());
        assert!(o.take_dsack().is_none());
    }

    #[test]
    fn a_dsack_that_does_not_fit_stays_pending() {
        let mut o = OwedSacks::default();
        // Four ACK numbers, each with three duplicates: a duplicate more has
        // no place.
        for k in 0..16u32 {
            assert!(o.push(Seq(k / 4), SackBlocks::new(), None));
        }
        assert!(!o.push(Seq(3), SackBlocks::new(), Some((1, 2))));
        assert_eq!(o.take_dsack(), Some((1, 2)));
        assert_eq!(o.take_dsack(), None);
    }

    /// In-order ACKs fill the ring, then frames out of order arrive: their
    /// duplicate ACKs take the places of in-order ones between two that moved
    /// further, the first and last in-order ones stay; a hole filled after
    /// fifteen duplicates takes the newest duplicate's place.
    #[test]
    fn duplicates_beyond_the_ring_take_the_places_of_acks_that_only_moved_on() {
        let mut o = OwedSacks::default();
        for k in 1..=16u32 {
            assert!(o.push(Seq(k * 10), SackBlocks::new(), None));
        }
        for _ in 0..20 {
            assert!(!o.push(Seq(160), SackBlocks::new(), None));
        }
        assert!(!o.push(Seq(500), SackBlocks::new(), None));
        let acks: Vec<u32> = std::iter::from_fn(|| o.pop()).map(|(a, _)| a.0).collect();
        let mut want = vec![10];
        want.extend([160; 14]);
        want.push(500);
        assert_eq!(acks, want);
    }

    proptest::proptest! {
        /// Any batch of owed ACKs (each moving the acknowledgment number on or
        /// repeating it): what goes out is a subsequence of what was owed, in
        /// order, never more than [`SLOTS`], ending with the last one owed;
        /// with up to four ACK numbers, each keeps up to three duplicates.
        #[test]
        fn owed_acks_overflow_into_a_subsequence(steps in proptest::collection::vec(0u32..3, 1..80)) {
            let mut o = OwedSacks::default();
            let mut ack = 1000u32;
            let mut owed = Vec::new();
            let mut counted = 0;
            for &s in &steps {
                ack += s * 100;
                owed.push(ack);
                if o.push(Seq(ack), SackBlocks::new(), None) {
                    counted += 1;
                }
            }
            let sent: Vec<u32> = std::iter::from_fn(|| o.pop()).map(|(a, _)| a.0).collect();
            proptest::prop_assert_eq!(sent.len(), counted);
            proptest::prop_assert!(sent.len() == owed.len().min(SLOTS));
            proptest::prop_assert_eq!(sent.last(), owed.last());
            let mut it = owed.iter();
            proptest::prop_assert!(sent.iter().all(|a| it.any(|b| b == a)), "{:?} from {:?}", sent, owed);
            // With four ACK numbers at most, each keeps its first ACK and three
            // duplicates (all it has, if fewer).
            let mut values = owed.clone();
            values.dedup();
            if values.len() <= 4 {
                for v in values {
                    let n_owed = owed.iter().filter(|&&a| a == v).count();
                    let n_sent = sent.iter().filter(|&&a| a == v).count();
                    proptest::prop_assert!(n_sent >= n_owed.min(4), "{} in {:?} from {:?}", v, sent, owed);
                }
            }
        }
    }
}
