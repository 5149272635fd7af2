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
//! `tests/system_impair.rs`). One snapshot per owed
//! ACK, oldest first, in a queue whose room is kept from batch to batch (no
//! allocation per frame once it has grown to the largest batch).
//!
//! None of those ACKs is dropped, however many segments the batch carries:
//! while holes remain, an ACK left out takes with it the only report of the
//! ranges that arrived between its frame and the next kept one, and a sender
//! running RACK (Linux) marks what it never saw SACKed as lost and sends it
//! again (the loss cells without GRO of `tests/system_impair.rs` show it). A
//! batch costs one snapshot per ACK it owes, each no larger than the option it
//! becomes. Only ACKs of in-order data are thinned ([`IN_ORDER`]).
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

/// ACKs of in-order data (every second full-sized segment, no hole, no
/// duplicate) owed at most. One more takes the place of such an ACK that only
/// moved the acknowledgment number on between two that moved it further
/// (dropped as a lost ACK would be: the next covers it), so that a long batch
/// of in-order data keeps its last ACK, covering all. Extra ones sent with
/// the final acknowledgment number would all be alike, and a sender without
/// SACK counts them as duplicate ACKs: more duplicates than segments out reads
/// as reordering, and it retransmits more than toward a Linux receiver (the
/// `SACK off, loss 1 %` cells of `tests/system_impair.rs`). So in-order data
/// gets at most this many ACKs per batch, like a GRO receiver's one per
/// super-segment.
const IN_ORDER: usize = 16;

/// ACKs owed at most, whatever they report: far more than a receive batch
/// holds frames (`linerate_nic::DEFAULT_BATCH`, and the runtime's receive
/// budget of four batches per poll), so only a caller that hands over
/// thousands of segments before asking for output meets it. One owed beyond
/// it takes the newest one's place if it moves the acknowledgment number on,
/// and is dropped if it does not (its D-SACK block then waits for the next
/// ACK not owed).
pub(crate) const MAX_OWED: usize = 1024;
// `Rcv::dup_owed` counts them.
const _: () = assert!(MAX_OWED <= u16::MAX as usize);

/// One ACK owed: its acknowledgment number and blocks as of its frame.
#[derive(Debug, Clone, Copy)]
struct Owed {
    ack: u32,
    blocks: SackBlocks,
    /// An ACK of in-order data, which [`IN_ORDER`] thins.
    in_order: bool,
}

/// Owed ACKs' acknowledgment numbers and SACK blocks, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwedSacks {
    /// Owed ACKs from `head` on (those before it were sent); emptied, its
    /// room kept, when all are sent.
    owed: Vec<Owed>,
    head: usize,
    /// How many of them are in order.
    in_order: usize,
    /// A D-SACK block not yet reported, for the next ACK that is not one owed
    /// (those carry their own).
    dsack: Option<(u32, u32)>,
}

impl OwedSacks {
    /// Records an ACK just owed: its acknowledgment number and blocks, and
    /// whether it acknowledges in-order data only. Returns whether it is owed
    /// as one more ACK; past [`IN_ORDER`] in-order ACKs it may take the place
    /// of one, and past [`MAX_OWED`] of the newest or none.
    pub fn push(
        &mut self,
        ack: Seq,
        blocks: SackBlocks,
        dsack: Option<(u32, u32)>,
        in_order: bool,
    ) -> bool {
        let new = Owed {
            ack: ack.0,
            blocks,
            in_order,
        };
        if in_order
            && self.in_order >= IN_ORDER
            && let Some(k) = self.spare(ack)
        {
            // In order both: the count stays. Most often the newest (a run of
            // in-order data), replaced where it lies.
            if k + 1 == self.owed.len() {
                if let Some(last) = self.owed.last_mut() {
                    *last = new;
                }
            } else if k < self.owed.len() {
                self.owed.remove(k);
                self.owed.push(new);
            }
            return false;
        }
        if self.len() < MAX_OWED {
            if self.head > 0 && self.owed.len() == self.owed.capacity() {
                // Sent ones still in front, and no room: drop them rather
                // than grow.
                self.owed.drain(..self.head);
                self.head = 0;
            }
            self.in_order += usize::from(in_order);
            self.owed.push(new);
            return true;
        }
        // (At the bound, so the newest is owed, not sent.)
        match self.owed.last_mut() {
            Some(last) if Seq(last.ack) < ack => {
                self.in_order -= usize::from(last.in_order);
                self.in_order += usize::from(in_order);
                *last = new;
            }
            _ => {
                if dsack.is_some() {
                    self.dsack = dsack;
                }
            }
        }
        false
    }

    /// ACKs owed.
    fn len(&self) -> usize {
        self.owed.len() - self.head
    }

    /// The newest in-order ACK that only moved the acknowledgment number on
    /// between two that moved it further (the next being `ack` for the newest
    /// owed), by its place in `owed`.
    fn spare(&self, ack: Seq) -> Option<usize> {
        let at = |k: usize| self.owed.get(k).map(|o| Seq(o.ack));
        (self.head + 1..self.owed.len()).rev().find(|&k| {
            let (Some(prev), Some(this)) = (at(k - 1), at(k)) else {
                return false;
            };
            let next = at(k + 1).unwrap_or(ack);
            self.owed.get(k).is_some_and(|o| o.in_order) && prev < this && this < next
        })
    }

    /// True if the oldest owed ACK reports a hole, a duplicate or a filled
    /// hole (a segment with data may carry one of in-order data instead).
    pub fn next_reports_hole(&self) -> bool {
        self.owed.get(self.head).is_some_and(|o| !o.in_order)
    }

    /// Keeps a D-SACK block for the next ACK sent.
    pub fn set_dsack(&mut self, l: Seq, r: Seq) {
        self.dsack = Some((l.0, r.0));
    }

    /// Takes the pending D-SACK block (an ACK is going out, or one is owed).
    pub fn take_dsack(&mut self) -> Option<(u32, u32)> {
        self.dsack.take()
    }

    /// True if a D-SACK block waits for an ACK.
    pub fn dsack_pending(&self) -> bool {
        self.dsack.is_some()
    }

    /// The oldest owed ACK, now being sent: its acknowledgment number and blocks.
    pub fn pop(&mut self) -> Option<(Seq, SackBlocks)> {
        let o = *self.owed.get(self.head)?;
        self.head += 1;
        if self.head == self.owed.len() {
            self.owed.clear();
            self.head = 0;
        }
        self.in_order -= usize::from(o.in_order);
        Some((Seq(o.ack), o.blocks))
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
/// before (RFC 2883), if any. Never thinned (see the module docs).
pub(crate) fn owe_dup_ack(
    rcv: &mut Rcv,
    asm: &Assembler,
    owed: &mut OwedSacks,
    dsack: Option<(Seq, Seq)>,
) {
    owe(rcv, asm, owed, dsack, false);
}

/// In-order data calls for an ACK of its own (every second full-sized
/// segment): [`owe_dup_ack`], but thinned past [`IN_ORDER`] unless it carries
/// a D-SACK block.
pub(crate) fn owe_in_order_ack(
    rcv: &mut Rcv,
    asm: &Assembler,
    owed: &mut OwedSacks,
    dsack: Option<(Seq, Seq)>,
) {
    owe(rcv, asm, owed, dsack, dsack.is_none() && asm.is_empty());
}

fn owe(
    rcv: &mut Rcv,
    asm: &Assembler,
    owed: &mut OwedSacks,
    dsack: Option<(Seq, Seq)>,
    in_order: bool,
) {
    let d = dsack.map(|(l, r)| (l.0, r.0));
    // No blocks to report (in-order data, every second segment of a bulk
    // transfer): the empty set as a constant, not built and copied.
    let blocks = if rcv.sack_ok && (d.is_some() || !asm.is_empty()) {
        blocks_now(asm, d, rcv.ts_ok)
    } else {
        SackBlocks::new()
    };
    if owed.push(rcv.nxt, blocks, d, in_order) {
        rcv.owe_dup_ack();
    } else {
        rcv.ack_now = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acks(o: &mut OwedSacks) -> Vec<u32> {
        std::iter::from_fn(|| o.pop()).map(|(a, _)| a.0).collect()
    }

    /// A long batch of in-order data: its first ACKs and its last, which
    /// covers the rest.
    #[test]
    fn in_order_acks_thin_to_the_first_ones_and_the_last() {
        let mut o = OwedSacks::default();
        for k in 0..20u32 {
            let own = o.push(Seq(100 + k), SackBlocks::new(), None, true);
            assert_eq!(own, k < 16);
        }
        let mut want: Vec<u32> = (100..115).collect();
        want.push(119);
        assert_eq!(acks(&mut o), want);
        assert!(o.take_dsack().is_none());
    }

    /// Out-of-order frames after a full run of in-order ACKs: every one keeps
    /// its ACK and blocks, however many, and so does the frame that fills the
    /// hole; in-order ACKs that follow are thinned again.
    #[test]
    fn acks_reporting_holes_are_never_dropped() {
        let mut o = OwedSacks::default();
        for k in 1..=16u32 {
            assert!(o.push(Seq(k * 10), SackBlocks::new(), None, true));
        }
        for k in 0..200u32 {
            let b = SackBlocks::from_slice(&[(1000, 1100 + k)]).unwrap();
            assert!(o.push(Seq(160), b, None, false));
        }
        assert!(o.push(Seq(5000), SackBlocks::new(), None, false));
        assert!(!o.push(Seq(5010), SackBlocks::new(), None, true));
        assert!(!o.push(Seq(5020), SackBlocks::new(), None, true));
        let mut sent = std::iter::from_fn(|| o.pop());
        // 5010 took the place of 150 (which moved on only between 140 and
        // 160), then 5020 that of 5010.
        for k in (1..=14u32).chain([16]) {
            assert_eq!(sent.next().map(|(a, _)| a.0), Some(k * 10));
        }
        for k in 0..200u32 {
            let (a, b) = sent.next().unwrap();
            assert_eq!((a.0, b.as_slice()), (160, &[(1000, 1100 + k)][..]));
        }
        assert_eq!(sent.next().map(|(a, _)| a.0), Some(5000));
        assert_eq!(sent.next().map(|(a, _)| a.0), Some(5020));
        assert!(sent.next().is_none());
    }

    #[test]
    fn past_the_bound_the_newest_moves_on_or_the_dsack_waits() {
        let mut o = OwedSacks::default();
        for _ in 0..MAX_OWED {
            assert!(o.push(Seq(7), SackBlocks::new(), None, false));
        }
        assert!(!o.push(Seq(7), SackBlocks::new(), Some((1, 2)), false));
        assert_eq!(o.take_dsack(), Some((1, 2)));
        assert!(!o.push(Seq(9), SackBlocks::new(), None, false));
        let sent = acks(&mut o);
        assert_eq!(sent.len(), MAX_OWED);
        assert_eq!(sent.last(), Some(&9));
        assert_eq!(o.take_dsack(), None);
    }

    proptest::proptest! {
        /// Pushes and pops interleaved (output between arrivals): every ACK
        /// owed goes out once, oldest first, and the queue never holds more
        /// than it owes.
        #[test]
        fn interleaved_pushes_and_pops_keep_order_and_count(
            ops in proptest::collection::vec(0u8..4, 1..300),
        ) {
            let mut o = OwedSacks::default();
            let (mut next, mut owed, mut sent) = (0u32, 0usize, Vec::new());
            for op in ops {
                if op == 0 {
                    if let Some((a, _)) = o.pop() {
                        sent.push(a.0);
                        owed -= 1;
                    }
                } else {
                    next += 1;
                    if o.push(Seq(next), SackBlocks::new(), None, false) {
                        owed += 1;
                    }
                }
                proptest::prop_assert_eq!(o.len(), owed);
                proptest::prop_assert!(o.owed.len() <= o.owed.capacity());
            }
            sent.extend(std::iter::from_fn(|| o.pop()).map(|(a, _)| a.0));
            let want: Vec<u32> = (1..=next).collect();
            proptest::prop_assert_eq!(sent, want);
        }

        /// Any batch of owed ACKs, in order or not, each moving the
        /// acknowledgment number on or repeating it: what goes out is a
        /// subsequence of what was owed, in order, ending with the last one
        /// owed; every ACK not in order goes out; an in-order one left out is
        /// covered by a later one that moved the number further.
        #[test]
        fn owed_acks_thin_only_in_order_ones(
            steps in proptest::collection::vec((0u32..3, proptest::bool::ANY), 1..120),
        ) {
            let mut o = OwedSacks::default();
            let mut ack = 1000u32;
            let mut owed = Vec::new();
            let mut counted = 0;
            for (i, &(s, in_order)) in steps.iter().enumerate() {
                ack += s * 100;
                let b = SackBlocks::from_slice(&[(i as u32, i as u32 + 1)]).unwrap();
                owed.push((ack, i as u32, in_order));
                if o.push(Seq(ack), b, None, in_order) {
                    counted += 1;
                }
            }
            let sent: Vec<(u32, u32)> = std::iter::from_fn(|| o.pop())
                .map(|(a, b)| (a.0, b.as_slice()[0].0))
                .collect();
            proptest::prop_assert_eq!(sent.len(), counted);
            proptest::prop_assert_eq!(sent.last().map(|s| s.1), owed.last().map(|o| o.1));
            let mut it = owed.iter();
            proptest::prop_assert!(sent.iter().all(|s| it.any(|o| o.1 == s.1)));
            for &(a, id, in_order) in &owed {
                let kept = sent.iter().any(|s| s.1 == id);
                if !in_order {
                    proptest::prop_assert!(kept, "{} of {:?} not sent: {:?}", id, owed, sent);
                } else if !kept {
                    proptest::prop_assert!(sent.iter().any(|s| s.1 > id && s.0 > a));
                }
            }
            let thin = sent.iter().filter(|s| owed[s.1 as usize].2).count();
            let others = owed.iter().filter(|o| !o.2).count();
            proptest::prop_assert!(thin <= IN_ORDER + others, "{} {}", thin, others);
        }
    }
}
