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
//! Linux sender to linerate with 10 % reordering: 4.4-5.9 s against 1.1-2.6 s
//! to a Linux receiver, 1.7 s with an ACK per segment). One snapshot per owed
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

/// Snapshots kept, and so ACKs owed at most: one owed beyond that replaces the
/// newest (that ACK is dropped, as a lost ACK would be; the one kept covers
/// both). Before, the extra ones were counted and went out with the final
/// acknowledgment number, all alike: a batch of 64 in-order segments with no
/// hole sent 16 identical ACKs after the 16 it should, and a sender without
/// SACK counted them as duplicates (a Linux sender to linerate, SACK off, 1 %
/// loss: reordering estimate 44-92, `TCPRenoReorder` up to 184, and up to 2.6
/// times the retransmissions toward a Linux receiver).
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
    /// whether it takes an ACK of its own; in a full ring it replaces the
    /// newest one instead (and a D-SACK block of it waits for the next ACK not
    /// owed, as the blocks it replaces may have carried one of their own).
    pub fn push(&mut self, ack: Seq, blocks: SackBlocks, dsack: Option<(u32, u32)>) -> bool {
        let full = self.len >= SLOTS;
        if full && dsack.is_some() {
            self.dsack = dsack;
        }
        let i = (self.head + self.len.min(SLOTS) + SLOTS - usize::from(full)) % SLOTS;
        if let (Some(slot), Some(a)) = (self.ring.get_mut(i), self.acks.get_mut(i)) {
            *slot = blocks;
            *a = ack.0;
        }
        if !full {
            self.len += 1;
        }
        !full
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
    let blocks = if rcv.sack_ok {
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
        // The newest replaced by each owed beyond the ring: the last one's.
        let (ack, b) = o.pop().unwrap();
        assert_eq!(ack, Seq(119));
        assert_eq!(b.as_slice(), &[(19, 20)]);
        assert!(o.pop().is_none());
        assert!(o.take_dsack().is_none());
    }

    #[test]
    fn a_dsack_that_does_not_fit_stays_pending() {
        let mut o = OwedSacks::default();
        for k in 0..16u32 {
            assert!(o.push(Seq(k), SackBlocks::new(), None));
        }
        assert!(!o.push(Seq(16), SackBlocks::new(), Some((1, 2))));
        assert_eq!(o.take_dsack(), Some((1, 2)));
        assert_eq!(o.take_dsack(), None);
    }
}
