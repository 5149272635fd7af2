//! A step of the `engine` target: one receive batch of segments of one size
//! from the peer, as a NIC without GRO hands them over, with holes,
//! duplicates and reordering that the input chooses. The engine acknowledges
//! such a batch segment by segment (`tcp::sack_owed`), which single segments
//! never exercise.
//!
//! Input, after the step's operation byte: the count (2 to [`MAX_SEGS`]); a
//! byte of choices (bit 0: from the peer's next sequence number, else from the
//! engine's last ACK; bits 1-2: the size, 1448, 536, 1000 or read; bit 3:
//! timestamps; bit 4: checksums verified by the NIC; bit 5: a FIN after the
//! last segment; bit 6: an older acknowledgment number, read; bit 7: PSH);
//! the holes and the duplicates, a bit per segment each; up to 15 swaps of
//! two places; the window.

use super::{Harness, Input, Seg, oracle};
use linerate_nic::Frame;
use linerate_offload::{Checksum, OffloadMeta};
use linerate_wire::etherparse::TcpOptionElement;

/// Segments in a batch at most (a NIC's receive burst,
/// `linerate_nic::DEFAULT_BATCH`); duplicates come on top.
pub(super) const MAX_SEGS: usize = 64;

impl Harness {
    /// A batch on connection `k`.
    pub(super) fn batch(&mut self, inp: &mut Input<'_>, k: usize) {
        let count = 2 + usize::from(inp.u8()) % (MAX_SEGS - 1);
        let how = inp.u8();
        let size = match how >> 1 & 3 {
            0 => 1448,
            1 => 536,
            2 => 1000,
            _ => 1 + usize::from(inp.u16() % 1500),
        };
        let holes = inp.u64();
        let dups = inp.u64();
        let (snd_max, last_ack, peer_nxt, ts, irs, src_port, dst_port) = {
            let c = &self.conns[k];
            (
                c.snd_max, c.last_ack, c.peer_nxt, c.ts, c.irs, c.remote, c.local,
            )
        };
        let base = if how & 1 == 0 { last_ack } else { peer_nxt };
        let ack = if how & 0x40 != 0 {
            snd_max.wrapping_sub(u32::from(inp.u16()))
        } else {
            snd_max
        };
        let tsval = (how & 8 != 0).then(|| inp.u32());
        // Arrival order: every segment that is not a hole, then the
        // duplicates, then the swaps.
        let mut order = [0u8; 2 * MAX_SEGS];
        let mut n = 0;
        for i in (0..count).filter(|i| holes >> i & 1 == 0) {
            order[n] = i as u8;
            n += 1;
        }
        for i in (0..count).filter(|i| holes >> i & 1 == 0 && dups >> i & 1 != 0) {
            order[n] = i as u8;
            n += 1;
        }
        for _ in 0..inp.u8() & 15 {
            let (a, b) = (usize::from(inp.u8()), usize::from(inp.u8()));
            if n > 0 {
                order.swap(a % n, b % n);
            }
        }
        let wnd = inp.u16();
        let mut meta = OffloadMeta::plain();
        if how & 0x10 != 0 {
            meta.csum = Checksum::Verified { levels: 1 };
        }
        let off = base.wrapping_sub(irs.wrapping_add(1));
        for &i in &order[..n] {
            let at = (usize::from(i) * size) as u32;
            let last = usize::from(i) + 1 == count;
            let opts = tsval.map(|v| {
                [
                    TcpOptionElement::Noop,
                    TcpOptionElement::Noop,
                    TcpOptionElement::Timestamp(v.wrapping_add(u32::from(i)), ts),
                ]
            });
            let seg = Seg {
                k,
                src_port,
                dst_port,
                seq: base.wrapping_add(at),
                ack: Some(ack),
                flags: (how >> 4 & 0x08) | u8::from(last && how & 0x20 != 0),
                wnd,
                opts: opts.as_ref().map_or(&[], |o| &o[..]),
                raw_opts: None,
                payload: oracle::peer_bytes(k, off.wrapping_add(at), size),
                payload_sum: Some(oracle::peer_sum(k, off.wrapping_add(at), size)),
            };
            if let Some(f) = Harness::build(&self.s.pool, &seg) {
                self.fed += 1;
                self.s.batch.push(Frame::new(f, meta));
            }
        }
        self.e.handle_frames(self.now, &mut self.s.batch);
        // The peer's stream position follows what it sent in order, holes
        // and all (what it lost, it sends again from the engine's ACK).
        if base == peer_nxt {
            let fin = u32::from(how & 0x20 != 0);
            self.conns[k].peer_nxt = base.wrapping_add((count * size) as u32).wrapping_add(fin);
        }
    }
}
