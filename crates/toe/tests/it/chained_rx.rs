//! Frames whose TCP payload is a chain of fragments (what the shim's frag-list
//! GRO hands up, `Shim::set_rx_sg`), against the same frames linear.
//!
//! Two engines, made alike, get the same GRO super-segments from a hand-driven
//! peer: one as linear frames, one as a head of headers and the payload as
//! fragments of one shared buffer, cut at random. Every frame the two send
//! back must be the same bytes (acknowledgment numbers, SACK and D-SACK
//! blocks, windows), the bytes read must be the peer's stream, in-order data
//! must be kept by reference (`tcp_rx_adopted`) and, once read, every
//! reference must be gone (no buffer kept alive, none freed early: the bytes
//! read came out of them).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::common;

use common::raw::*;
use linerate_nic::{Batch, Frag, Frame, PacketBuf, SharedBuf};
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_toe::SocketHandle;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use proptest::prelude::*;
use std::time::Duration;

const MSS: usize = 1460;
/// The peer's ISS (`Raw::answer_syn`); its first data byte is ISS + 1.
const PEER_ISS: u32 = 7000;

fn peer_byte(off: usize) -> u8 {
    (off.wrapping_mul(131) ^ (off >> 7)) as u8
}

struct Pair {
    linear: Raw,
    chained: Raw,
    c: (SocketHandle, SocketHandle),
    port: u16,
    me: u32,
    /// Shared buffers handed to the chained engine.
    shared: Vec<SharedBuf>,
}

fn connect() -> (Raw, SocketHandle, u16, u32) {
    connected(
        |cfg| cfg.offloads = true,
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
        ],
    )
}

impl Pair {
    fn new() -> Pair {
        let (linear, c0, port, me) = connect();
        let (chained, c1, port1, me1) = connect();
        assert_eq!((port, me), (port1, me1), "the two engines are alike");
        Pair {
            linear,
            chained,
            c: (c0, c1),
            port,
            me,
            shared: Vec::new(),
        }
    }

    /// The peer sends segments `from..from + n` (of MSS bytes each) as one
    /// GRO super-segment, checksum verified below; the chained engine gets the
    /// payload in pieces of `piece` bytes.
    fn send(&mut self, from: usize, n: usize, piece: usize) {
        let payload: Vec<u8> = (from * MSS..(from + n) * MSS).map(peer_byte).collect();
        let seq = PEER_ISS.wrapping_add(1).wrapping_add((from * MSS) as u32);
        let f = tcp_frame(
            80,
            self.port,
            seq,
            Some(self.me),
            Flags::ACK,
            60_000,
            &[],
            &payload,
        );
        let mut meta = OffloadMeta {
            csum: Checksum::Verified { levels: 1 },
            ..OffloadMeta::plain()
        };
        if n > 1 {
            let mut g = Gso::new(GsoType::TcpV4, MSS as u16);
            g.segs = n as u16;
            meta.gso = Some(g);
        }
        let head = f.len() - payload.len();
        let mut batch = Batch::new();
        batch.push(Frame::new(PacketBuf::from_slice(&f), meta));
        self.linear.e.handle_frames(self.linear.now, &mut batch);

        let shared = SharedBuf::new(PacketBuf::from_slice(&payload));
        let mut g = Frame::new(PacketBuf::from_slice(&f[..head]), meta);
        let mut at = 0;
        while at < payload.len() {
            let k = piece.min(payload.len() - at);
            g.frags
                .push(Frag::new(shared.clone(), at, k).unwrap())
                .unwrap();
            at += k;
        }
        batch.push(g);
        self.chained.e.handle_frames(self.chained.now, &mut batch);
        self.shared.push(shared);
    }

    /// The frames both send now (or after `d`), which must be the same bytes.
    fn answers(&mut self, d: Duration) {
        if d.is_zero() {
            assert_eq!(self.linear.frames(), self.chained.frames());
        } else {
            let a = self.linear.advance(d);
            let b = self.chained.advance(d);
            assert_eq!(format!("{a:?}"), format!("{b:?}"));
        }
    }

    /// Reads what each engine has, in `chunk`-byte reads, from stream offset `at`.
    fn read(&mut self, at: usize, chunk: usize) -> usize {
        let mut got = [Vec::new(), Vec::new()];
        for (r, c, out) in [
            (&mut self.linear, self.c.0, 0),
            (&mut self.chained, self.c.1, 1),
        ] {
            let mut buf = vec![0u8; chunk];
            while let Ok(n) = r.e.tcp_recv(c, &mut buf) {
                if n == 0 {
                    break;
                }
                got[out].extend_from_slice(&buf[..n]);
            }
        }
        assert_eq!(got[0].len(), got[1].len());
        let want: Vec<u8> = (at..at + got[1].len()).map(peer_byte).collect();
        assert!(got[1] == want, "chained bytes differ from the stream");
        assert!(got[0] == want, "linear bytes differ from the stream");
        got[1].len()
    }
}

/// In order, out of order past a hole, the hole filled, an old retransmission
/// overlapping new data, a duplicate: the same answers and bytes either way.
#[test]
fn chained_super_segments_act_as_linear_ones() {
    let mut p = Pair::new();
    p.send(0, 8, MSS);
    p.answers(Duration::ZERO);
    p.send(12, 6, 1000); // past a hole: copied, SACKed
    p.answers(Duration::ZERO);
    p.send(8, 4, 333); // fills it
    p.answers(Duration::ZERO);
    p.send(16, 6, 4096); // partly old: D-SACK for the old part
    p.answers(Duration::ZERO);
    p.send(2, 2, 700); // wholly old: D-SACK
    p.answers(Duration::ZERO);
    p.answers(Duration::from_millis(300));
    assert!(
        p.chained.e.counters().tcp_rx_adopted > 0,
        "in-order chains kept"
    );
    assert_eq!(p.read(0, 10_000), 22 * MSS);
    p.answers(Duration::ZERO);
    for s in &p.shared {
        assert_eq!(s.ref_count(), 1, "every fragment's reference went");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any order of super-segments (some repeated), any cut into fragments and
    /// reads of any size between them: the same answers and the stream's bytes.
    #[test]
    fn any_order_and_cut(
        sends in prop::collection::vec((0usize..40, 1usize..12, 1usize..3000), 1..14),
        reads in prop::collection::vec(1usize..20_000, 14),
    ) {
        let mut p = Pair::new();
        let mut at = 0;
        for (i, (from, n, piece)) in sends.into_iter().enumerate() {
            p.send(from, n, piece);
            p.answers(Duration::ZERO);
            at += p.read(at, reads[i]);
            p.answers(Duration::ZERO);
        }
        p.answers(Duration::from_millis(300));
        at += p.read(at, 65_536);
        let _ = at;
        for s in &p.shared {
            prop_assert_eq!(s.ref_count(), 1);
        }
    }
}
