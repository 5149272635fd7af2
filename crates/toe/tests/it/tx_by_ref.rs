//! Super-segments sent by reference (issue 15): an engine whose sink takes
//! scatter-gather frames (`PoolSink::with_frags`) sends each super-segment as
//! its headers plus references to the send buffer, against an engine made
//! alike whose sink takes linear frames only. Given the same writes (copied
//! and handed over, short and long, across chunk boundaries), the same ACKs
//! and the same retransmission timeouts, the two must send the same bytes,
//! frame for frame once gathered; the first must have copied no payload of a
//! super-segment (its heads hold headers only) and the fragments must point
//! into memory the send buffer holds (a handed-over buffer's own bytes).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::common;

use bytes::Bytes;
use common::raw::*;
use linerate_nic::{Batch, Pool, PoolConfig};
use linerate_offload::OffloadMeta;
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_toe::{PoolSink, SocketHandle};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use proptest::prelude::*;
use std::time::Duration;

const MSS: usize = 1460;

fn byte(off: usize) -> u8 {
    (off.wrapping_mul(37) ^ (off >> 8)) as u8
}

fn connect() -> (Raw, SocketHandle, u16, u32) {
    connected(
        |cfg| {
            cfg.offloads = true;
            cfg.tcp.send_buffer = 1 << 20;
        },
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
        ],
    )
}

struct Side {
    r: Raw,
    c: SocketHandle,
    pool: Pool,
    frags: bool,
    written: usize,
    /// The most fragments one frame had.
    most_frags: usize,
}

impl Side {
    /// Everything the engine sends now, as frames (gathered), with the count
    /// of frames that had fragments (their heads holding headers only) and of
    /// fragments pointing into a buffer of `handed`.
    fn frames(&mut self, handed: &[Bytes]) -> (Vec<(Vec<u8>, OffloadMeta)>, usize, usize) {
        let mut batch = Batch::new();
        let now = self.r.now;
        self.r.e.poll_transmit_into(
            now,
            &mut PoolSink::new(&self.pool, &mut batch).with_frags(self.frags),
        );
        let (mut by_ref, mut in_place) = (0, 0);
        let out = batch
            .iter()
            .map(|f| {
                if !f.is_linear() {
                    by_ref += 1;
                    self.most_frags = self.most_frags.max(f.frags.len());
                    assert!(f.head_len() <= 14 + 20 + 60, "a head of headers only");
                    for frag in f.frags.iter() {
                        let p = frag.bytes().as_ptr_range();
                        in_place += usize::from(handed.iter().any(|b| {
                            let r = b.as_ptr_range();
                            r.start <= p.start && p.end <= r.end
                        }));
                    }
                }
                let mut v = Vec::new();
                f.gather_to_vec(&mut v);
                (v, f.meta)
            })
            .collect();
        (out, by_ref, in_place)
    }
}

/// One step of the script both engines follow.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// Copy `n` bytes in.
    Write(usize),
    /// Hand a buffer of `n` bytes over.
    Hand(usize),
    /// The peer acknowledges `n` more bytes (up to what was sent).
    Ack(usize),
    /// Time passes (a retransmission timeout, at most).
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..200_000).prop_map(Step::Write),
        (1usize..200_000).prop_map(Step::Hand),
        (1usize..300_000).prop_map(Step::Ack),
        (1u64..2_000).prop_map(Step::Wait),
    ]
}

/// Runs `script` on both engines; returns the super-segments sent by
/// reference, the fragments that pointed into handed-over buffers, and the
/// most fragments one frame had.
fn run(script: &[Step]) -> (usize, usize, usize) {
    let (r0, c0, port, me) = connect();
    let (r1, c1, port1, me1) = connect();
    assert_eq!((port, me), (port1, me1), "the two engines are alike");
    let mut sides = [(r0, c0, true), (r1, c1, false)].map(|(r, c, frags)| Side {
        r,
        c,
        pool: Pool::new(PoolConfig::mtu()),
        frags,
        written: 0,
        most_frags: 0,
    });
    let mut acked = 0usize;
    let mut sent_max = 0usize;
    let (mut by_ref_total, mut in_place_total) = (0, 0);
    let mut handed: Vec<Bytes> = Vec::new();
    for s in script {
        for side in &mut sides {
            match *s {
                Step::Write(n) => {
                    let data: Vec<u8> = (side.written..side.written + n).map(byte).collect();
                    side.written += side.r.e.tcp_send(side.c, &data).unwrap_or(0);
                }
                Step::Hand(n) => {
                    let data: Bytes = (side.written..side.written + n).map(byte).collect();
                    if side.frags {
                        handed.push(data.clone());
                    }
                    side.written += side.r.e.tcp_send_bytes(side.c, data).unwrap_or(0);
                }
                Step::Ack(_) | Step::Wait(_) => {}
            }
        }
        assert_eq!(sides[0].written, sides[1].written);
        if let Step::Wait(ms) = *s {
            for side in &mut sides {
                let end = side.r.now + Duration::from_millis(ms);
                while let Some(t) = side.r.e.poll_timeout() {
                    if t > end {
                        break;
                    }
                    side.r.now = t.max(side.r.now);
                    side.r.e.handle_timeout(side.r.now);
                }
                side.r.now = end;
                side.r.e.handle_timeout(end);
            }
        }
        let (a, n, k) = sides[0].frames(&handed);
        let (b, m, _) = sides[1].frames(&handed);
        in_place_total += k;
        assert_eq!(m, 0, "a linear sink gets linear frames");
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            assert!(x.0 == y.0, "frame {i} differs");
            assert_eq!(x.1, y.1, "frame {i}'s meta differs");
        }
        by_ref_total += n;
        let mut segs = SegmentBuf::new();
        let mut segmenter = Segmenter::new(CsumMode::Complete);
        for (f, meta) in &a {
            segmenter.segment(f, meta, &mut segs).unwrap();
            for w in segs.iter() {
                let Some(seg) = parse_tcp(w, sides[0].r.now) else {
                    continue;
                };
                let end = seg.seq.wrapping_sub(me) as usize + seg.payload.len();
                sent_max = sent_max.max(end);
                let off = seg.seq.wrapping_sub(me) as usize;
                for (k, &v) in seg.payload.iter().enumerate() {
                    assert_eq!(v, byte(off + k), "stream byte {}", off + k);
                }
            }
        }
        if let Step::Ack(n) = *s {
            acked = (acked + n).min(sent_max);
            let ack = tcp_frame(
                80,
                port,
                7001,
                Some(me.wrapping_add(acked as u32)),
                Flags::ACK,
                65_535,
                &[],
                &[],
            );
            for side in &mut sides {
                side.r.input(&ack);
            }
        }
    }
    assert_eq!(
        sides[0].r.e.counters().tcp_out_by_ref as usize,
        by_ref_total
    );
    assert_eq!(sides[1].r.e.counters().tcp_out_by_ref, 0);
    (by_ref_total, in_place_total, sides[0].most_frags)
}

#[test]
fn long_writes_go_by_reference_and_match_the_copy() {
    // The peer's window is 64 KiB: each ACK lets about that much more go.
    let mut script = vec![Step::Write(300_000), Step::Ack(20_000), Step::Hand(100_000)];
    script.extend([Step::Ack(60_000), Step::Write(7)].repeat(4));
    script.push(Step::Wait(1_500));
    script.extend([Step::Ack(60_000)].repeat(5));
    let (by_ref, in_place, _) = run(&script);
    assert!(by_ref > 0, "no super-segment went by reference");
    assert!(
        in_place > 0,
        "no fragment pointed into the handed-over buffer"
    );
}

/// Short buffers handed over while the congestion window is full (a writer
/// of short pieces: each its own chunk of the send buffer) go out by
/// reference once ACKs open it, a super-segment referencing up to 16 of them
/// (Linux's skb up to 17 frags); at most 4, it was copied whole, as one in
/// nine super-segments of the offload report's sw cell at 1 KiB writes.
#[test]
fn a_super_segment_over_many_short_chunks_goes_by_reference() {
    let mut script = vec![Step::Write(20_000)];
    script.extend([Step::Hand(2_500)].repeat(20));
    script.extend([Step::Ack(20_000)].repeat(4));
    let (by_ref, _, most) = run(&script);
    assert!(by_ref > 0, "no super-segment went by reference");
    assert!(
        (5..=16).contains(&most),
        "the most fragments of a frame: {most}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any script: the same frames either way.
    #[test]
    fn frames_by_reference_equal_the_copy(script in proptest::collection::vec(step(), 1..16)) {
        run(&script);
    }
}
