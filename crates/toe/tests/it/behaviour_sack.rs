//! SACK loss recovery on the wire (RFC 2018, RFC 6675), against a hand-driven peer:
//! with several holes only the holes are retransmitted, each exactly once, and
//! nothing the peer SACKed goes again; as a receiver, the engine reports
//! out-of-order data in SACK blocks, the most recent block first. And a regression:
//! recovery after a retransmission timeout keeps a timer running while data is
//! outstanding (a seeded fault run stalled forever when it did not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{ConnectionError, SocketHandle};
use linerate_wire::etherparse::{TcpHeaderSlice, TcpOptionElement as O};
use linerate_wire::tcp::Flags;
use linerate_wire::{ethernet, ipv4};
use std::time::Duration;

const MSS: u32 = 1000;

/// Established with a peer offering MSS 1000, SACK, window scale 4 and a 60,000 byte
/// window, no timestamps, offloads off (one segment per frame).
fn established(tune: impl FnOnce(&mut linerate_toe::Config)) -> (Raw, SocketHandle, u16, u32) {
    connected(
        |c| {
            c.offloads = false;
            tune(c);
        },
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
            O::Noop,
            O::WindowScale(4),
        ],
    )
}

/// An ACK from the peer with SACK blocks given as segment ranges `[a, b)` above `base`.
fn sack_ack(r: &mut Raw, port: u16, base: u32, ack_seg: u32, blocks: &[(u32, u32)]) {
    let b: Vec<(u32, u32)> = blocks
        .iter()
        .map(|&(s, e)| (base + s * MSS, base + e * MSS))
        .collect();
    let opts = if b.is_empty() {
        vec![]
    } else {
        let mut more = [None; 3];
        for (slot, x) in more.iter_mut().zip(&b[1..]) {
            *slot = Some(*x);
        }
        vec![O::Noop, O::Noop, O::SelectiveAcknowledgement(b[0], more)]
    };
    // 3750 << 4 = 60,000: the window does not change, so these count as duplicates.
    r.input(&tcp_frame(
        80,
        port,
        7001,
        Some(base + ack_seg * MSS),
        Flags::empty(),
        3750,
        &opts,
        &[],
    ));
}

/// Segment index of a sequence number.
fn idx(base: u32, seq: u32) -> u32 {
    (seq - base) / MSS
}

#[test]
fn three_holes_retransmitted_once_each_and_nothing_else() {
    let (mut r, c, port, base) = established(|_| {});
    // Exactly the initial window, so everything after it is a retransmission.
    let data = common::pattern(10 * MSS as usize, 9);
    r.e.tcp_send(c, &data).unwrap();
    let first = r.segments();
    assert_eq!(first.len(), 10, "initial window of 10 segments: {first:?}");
    // Segments 0, 3 and 6 are lost; the peer SACKs what arrived, one by one, as
    // its duplicate ACKs would.
    let arrived = [1u32, 2, 4, 5, 7, 8, 9];
    let mut blocks: Vec<(u32, u32)> = Vec::new();
    let mut out = Vec::new();
    for &k in &arrived {
        match blocks.iter_mut().find(|b| b.1 == k) {
            Some(b) => b.1 = k + 1,
            None => blocks.push((k, k + 1)),
        }
        // The block holding the newest segment goes first (RFC 2018 section 4).
        let mut ordered = blocks.clone();
        ordered.sort_by_key(|b| std::cmp::Reverse(b.1 > k && b.0 <= k));
        sack_ack(&mut r, port, base, 0, &ordered);
        out.extend(r.segments());
    }
    let rexmit: Vec<u32> = out
        .iter()
        .filter(|s| !s.payload.is_empty())
        .map(|s| idx(base, s.seq))
        .collect();
    // Every hole went exactly once; no SACKed segment went again.
    let mut sorted = rexmit.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        vec![0, 3, 6],
        "retransmitted: {rexmit:?} in {out:?}"
    );
    for s in out.iter().filter(|s| idx(base, s.seq) < 10) {
        assert_eq!(s.payload.len(), MSS as usize, "whole segments: {s:?}");
        let at = (s.seq - base) as usize;
        assert_eq!(s.payload, data[at..at + MSS as usize], "the right bytes");
    }
    assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
    assert_eq!(r.e.counters().tcp_retrans_segs, 3);
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    // The holes filled: one cumulative ACK for everything ends recovery, and no
    // retransmission timer fires for data that was acknowledged.
    sack_ack(&mut r, port, base, 10, &[]);
    assert_eq!(r.e.tcp_info(c).unwrap().unacked, 0);
    r.advance(Duration::from_secs(1));
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    assert_eq!(r.e.counters().tcp_retrans_segs, 3);
}

/// Parses the SACK blocks of an ACK the engine sent.
fn sack_blocks(frame: &[u8]) -> Vec<(u32, u32)> {
    let eth = ethernet::Packet::new_checked(frame).unwrap();
    let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
    let t = TcpHeaderSlice::from_slice(ip.payload()).unwrap();
    t.options_iterator()
        .filter_map(|o| match o.unwrap() {
            O::SelectiveAcknowledgement(a, more) => {
                Some(std::iter::once(a).chain(more.into_iter().flatten()))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn receiver_reports_out_of_order_data_newest_block_first() {
    let (mut r, c, port, me) = established(|_| {});
    let peer = 7001u32;
    let seg = |k: u32| peer + k * MSS;
    let send = |r: &mut Raw, k: u32| {
        r.input(&tcp_frame(
            80,
            port,
            seg(k),
            Some(me),
            Flags::empty(),
            3750,
            &[],
            &[k as u8; MSS as usize],
        ));
        r.frames()
    };
    // Segment 0 arrives; 1 is lost; 2 arrives: a duplicate ACK for 1 SACKing 2.
    send(&mut r, 0);
    let a = send(&mut r, 2);
    assert_eq!(a.len(), 1);
    assert_eq!(parse_tcp(&a[0], r.now).unwrap().ack, seg(1));
    assert_eq!(sack_blocks(&a[0]), vec![(seg(2), seg(3))]);
    // 4 arrives (3 lost): two blocks, the newest first.
    let a = send(&mut r, 4);
    assert_eq!(sack_blocks(&a[0]), vec![(seg(4), seg(5)), (seg(2), seg(3))]);
    // 3 arrives and joins the two blocks into one.
    let a = send(&mut r, 3);
    assert_eq!(sack_blocks(&a[0]), vec![(seg(2), seg(5))]);
    // 1 arrives: everything is in order, the ACK covers it all and carries no SACK.
    let a = send(&mut r, 1);
    assert_eq!(parse_tcp(&a[0], r.now).unwrap().ack, seg(5));
    assert!(sack_blocks(&a[0]).is_empty());
    assert_eq!(r.e.tcp_info(c).unwrap().recv_queue, 5 * MSS as usize);
    let mut buf = vec![0u8; 8 * MSS as usize];
    let n = r.e.tcp_recv(c, &mut buf).unwrap();
    assert_eq!(n, 5 * MSS as usize);
    for k in 0..5 {
        assert!(
            buf[(k * MSS) as usize..((k + 1) * MSS) as usize]
                .iter()
                .all(|&b| b == k as u8)
        );
    }
}

/// After a retransmission timeout the engine resends from SND.UNA; a SACK then
/// starts fast recovery with SND.NXT back at SND.UNA and the congestion window
/// nearly used up by the retransmitted holes. The persist timer (meant for a
/// closed window) must not start there: it held back every retransmission and its
/// probes did not re-arm the retransmission timer, so the connection ended up with
/// data outstanding and no timer at all (found by tests/faults.rs, seed 1109).
#[test]
fn recovery_after_rto_keeps_a_timer_while_data_is_outstanding() {
    let (mut r, c, port, base) = established(|c| c.tcp.max_retries = 4);
    r.e.tcp_send(c, &common::pattern(20 * MSS as usize, 3))
        .unwrap();
    assert_eq!(r.segments().len(), 10);
    // Nothing is acknowledged: after a tail loss probe (the next two new
    // segments, RFC 8985 with two so that the receiver ACKs at once), the RTO
    // resends segment 0 alone.
    let again = r.advance(Duration::from_millis(300));
    assert_eq!(r.e.counters().tcp_tlp_probes, 1);
    assert_eq!(idx(base, again[0].seq), 10, "{again:?}");
    assert_eq!(idx(base, again[1].seq), 11, "{again:?}");
    let again = &again[2..];
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].seq, base);
    // The peer acknowledges it and SACKs 6..9: holes 1..6 are lost.
    sack_ack(&mut r, port, base, 1, &[(6, 9)]);
    let out = r.segments();
    assert!(!out.is_empty());
    // From here the peer is silent. Data is outstanding, so a timer must be armed
    // and the retransmissions must go on until the connection gives up.
    assert!(r.e.poll_timeout().is_some());
    let later = r.advance(Duration::from_secs(600));
    assert!(later.iter().all(|s| idx(base, s.seq) < 20), "{later:?}");
    assert!(
        later.iter().any(|s| s.seq == base + MSS),
        "SND.UNA retransmitted: {later:?}"
    );
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    assert_eq!(
        r.e.counters().tcp_window_probes,
        0,
        "the window never closed"
    );
}

/// RFC 2018 section 4: every duplicate ACK carries the SACK blocks as they were
/// when the frame that called for it arrived, the block holding that frame first,
/// also when several out-of-order frames arrive in one receive batch (the engine
/// once built them all after the batch, from the final state).
#[test]
fn batched_out_of_order_frames_each_get_the_blocks_of_their_moment() {
    let (mut r, _c, port, me) = established(|_| {});
    let peer = 7001u32;
    let seg = |k: u32| peer + k * MSS;
    let frame = |k: u32| {
        tcp_frame(
            80,
            port,
            seg(k),
            Some(me),
            Flags::empty(),
            3750,
            &[],
            &[k as u8; MSS as usize],
        )
    };
    r.input(&frame(0));
    r.frames();
    // One batch: 2, 4, 6 (holes at 1, 3, 5), then 3 joining 2 and 4.
    for k in [2, 4, 6, 3] {
        r.input(&frame(k));
    }
    let acks = r.frames();
    let blocks: Vec<_> = acks.iter().map(|f| sack_blocks(f)).collect();
    let b = |a: u32, e: u32| (seg(a), seg(e));
    assert_eq!(
        blocks,
        vec![
            vec![b(2, 3)],
            vec![b(4, 5), b(2, 3)],
            vec![b(6, 7), b(4, 5), b(2, 3)],
            vec![b(2, 5), b(6, 7)],
        ]
    );
    for f in &acks {
        assert_eq!(parse_tcp(f, r.now).unwrap().ack, seg(1));
    }
}
