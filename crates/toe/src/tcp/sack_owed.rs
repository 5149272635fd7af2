//! The SACK blocks of duplicate ACKs owed but not yet sent (RFC 2018 section 4).
//!
//! Several out-of-order frames can arrive in one receive batch; each is owed an
//! ACK of its own ([`Rcv::owe_dup_ack`](super::state::Rcv::owe_dup_ack)), and
//! the ACKs go out after the batch. RFC 2018 section 4 wants each one to carry
//! the blocks as they were when its frame arrived (the block holding that frame
//! first), not the final state: otherwise every ACK repeats the newest blocks and
//! a block that stopped growing is never reported. This keeps one snapshot per
//! owed ACK, oldest first, in a fixed ring (no allocation per frame).

use super::assembler::Assembler;
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
}

impl OwedSacks {
    /// Records the blocks of an ACK just owed; a full ring keeps what it holds.
    pub fn push(&mut self, blocks: SackBlocks) {
        if self.len >= SLOTS {
            return;
        }
        if let Some(slot) = self.ring.get_mut((self.head + self.len) % SLOTS) {
            *slot = blocks;
            self.len += 1;
        }
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
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

/// An out-of-order or duplicate frame arrived: owes it an ACK of its own and,
/// with SACK, records the blocks as of this frame (the one holding it first).
pub(crate) fn owe_dup_ack(rcv: &mut Rcv, asm: &Assembler, owed: &mut OwedSacks) {
    rcv.owe_dup_ack();
    if rcv.sack_ok {
        owed.push(asm.sack_blocks(super::segment::max_sack_blocks(rcv.ts_ok)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_bounded() {
        let mut o = OwedSacks::default();
        for k in 0..10u32 {
            o.push(SackBlocks::from_slice(&[(k, k + 1)]).unwrap());
        }
        for k in 0..8u32 {
            assert_eq!(o.pop().unwrap().as_slice(), &[(k, k + 1)]);
        }
        assert!(o.pop().is_none());
        o.push(SackBlocks::new());
        o.clear();
        assert!(o.pop().is_none());
    }
}
