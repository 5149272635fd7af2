//! The SACK blocks of duplicate ACKs owed but not yet sent (RFC 2018 section 4).
//!
//! Several out-of-order frames can arrive in one receive batch; each is owed an
//! ACK of its own ([`Rcv::owe_dup_ack`](super::state::Rcv::owe_dup_ack)), and
//! the ACKs go out after the batch. RFC 2018 section 4 wants each one to carry
//! the blocks as they were when its frame arrived (the block holding that frame
//! first), not the final state: otherwise every ACK repeats the newest blocks and
//! a block that stopped growing is never reported. This keeps one snapshot per
//! owed ACK, oldest first, in a fixed ring (no allocation per frame).
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

/// Snapshots kept; duplicates owed beyond that carry the blocks of the moment
/// they are sent.
const SLOTS: usize = 8;

/// Owed ACKs' SACK blocks, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwedSacks {
    ring: [SackBlocks; SLOTS],
    head: usize,
    len: usize,
    /// Bit `i`: the snapshot in slot `i` opens with a D-SACK block.
    marks: u8,
    /// A D-SACK block not yet reported, for the next ACK that is not a
    /// duplicate owed (those carry their own).
    dsack: Option<(u32, u32)>,
}

impl OwedSacks {
    /// Records the blocks of an ACK just owed; a full ring keeps what it holds
    /// (and a D-SACK block it cannot keep waits for the next ACK).
    pub fn push(&mut self, blocks: SackBlocks, dsack: Option<(u32, u32)>) {
        if self.len >= SLOTS {
            if dsack.is_some() {
                self.dsack = dsack;
            }
            return;
        }
        let i = (self.head + self.len) % SLOTS;
        if let Some(slot) = self.ring.get_mut(i) {
            *slot = blocks;
            self.len += 1;
            self.marks &= !(1 << i);
            if dsack.is_some() {
                self.marks |= 1 << i;
            }
        }
    }

    /// Keeps a D-SACK block for the next ACK sent.
    pub fn set_dsack(&mut self, l: Seq, r: Seq) {
        self.dsack = Some((l.0, r.0));
    }

    /// Takes the pending D-SACK block (an ACK is going out).
    pub fn take_dsack(&mut self) -> Option<(u32, u32)> {
        self.dsack.take()
    }

    /// The blocks of the oldest owed ACK, now being sent.
    pub fn pop(&mut self) -> Option<SackBlocks> {
        if self.len == 0 {
            return None;
        }
        let b = self.ring.get(self.head).copied();
        self.head = (self.head + 1) % SLOTS;
        self.len -= 1;
        b
    }

    /// Forgets every snapshot (RCV.NXT advanced: the owed duplicates are void).
    /// The D-SACK block of the newest one is still news: it stays pending.
    pub fn clear(&mut self) {
        while self.len > 0 {
            let newest = (self.head + self.len - 1) % SLOTS;
            self.len -= 1;
            if self.dsack.is_none()
                && self.marks & (1 << newest) != 0
                && let Some(&d) = self.ring.get(newest).and_then(|b| b.as_slice().first())
            {
                self.dsack = Some(d);
            }
        }
        self.marks = 0;
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

/// An out-of-order or duplicate frame arrived: owes it an ACK of its own and,
/// with SACK, records the blocks as of this frame (the one holding it first),
/// after `dsack`, the range of it that arrived before (RFC 2883), if any.
pub(crate) fn owe_dup_ack(
    rcv: &mut Rcv,
    asm: &Assembler,
    owed: &mut OwedSacks,
    dsack: Option<(Seq, Seq)>,
) {
    rcv.owe_dup_ack();
    if rcv.sack_ok {
        let d = dsack.map(|(l, r)| (l.0, r.0));
        owed.push(blocks_now(asm, d, rcv.ts_ok), d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_bounded() {
        let mut o = OwedSacks::default();
        for k in 0..10u32 {
            o.push(SackBlocks::from_slice(&[(k, k + 1)]).unwrap(), None);
        }
        for k in 0..8u32 {
            assert_eq!(o.pop().unwrap().as_slice(), &[(k, k + 1)]);
        }
        assert!(o.pop().is_none());
        o.push(SackBlocks::new(), None);
        o.clear();
        assert!(o.pop().is_none());
        assert!(o.take_dsack().is_none());
    }

    #[test]
    fn a_dsack_of_a_voided_duplicate_stays_pending() {
        let mut o = OwedSacks::default();
        o.push(
            SackBlocks::from_slice(&[(1, 2), (5, 6)]).unwrap(),
            Some((1, 2)),
        );
        o.push(SackBlocks::from_slice(&[(5, 6)]).unwrap(), None);
        o.clear();
        assert!(o.pop().is_none());
        assert_eq!(o.take_dsack(), Some((1, 2)));
        assert_eq!(o.take_dsack(), None);
    }
}
