//! Out-of-order data on one connection is bounded, against a hand-driven
//! sender: at most `MAX_RANGES` disjoint ranges are held (a segment that would
//! make one more is dropped and counted in `tcp_ofo_dropped`), nothing beyond
//! the advertised window is kept (RFC 9293 section 3.10.7.4: a segment wholly
//! outside is unacceptable, one straddling the right edge is trimmed to it),
//! and once the holes are filled the stream is byte-exact up to where the kept
//! data ended. And the engine-wide budget (`TcpConfig::ofo_total`) is a soft
//! bound: a segment is taken while the bytes held are below it, so the total
//! exceeds it by less than one segment, never by two.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::sim::internals::OOO_RANGES as MAX_RANGES;

/// A receiver with a receive buffer of `rcvbuf` bytes and no auto-tuning.
fn rx(rcvbuf: usize, tune: impl FnOnce(&mut linerate_toe::Config)) -> Receiver {
    Receiver::new(|c| {
        c.tcp.recv_buffer = rcvbuf;
        c.tcp.recv_autotune = false;
        tune(c);
    })
}

#[test]
fn more_holes_than_the_connection_tracks_are_dropped_and_counted() {
    let mut x = rx(64 * 1024, |_| {});
    let holes = MAX_RANGES + 8;
    // Ranges [200k + 100, 200k + 200): disjoint, each with a hole below it.
    for k in 0..holes {
        x.send(200 * k + 100, 200 * k + 200);
    }
    let dropped = x.r.e.counters().tcp_ofo_dropped;
    assert_eq!(dropped, (holes - MAX_RANGES) as u64, "the excess counted");
    assert!(x.read().is_empty(), "nothing in order yet");
    // Every one of them was acknowledged at once (duplicate ACKs for 0).
    let acks = x.r.segments();
    assert!(!acks.is_empty() && acks.iter().all(|s| s.ack == x.base));

    // Fill every hole below: the kept ranges join the stream; what was dropped
    // does not, even though its bytes once arrived.
    for k in 0..holes {
        x.send(200 * k, 200 * k + 100);
    }
    let got = x.read();
    let kept = 200 * MAX_RANGES + 100;
    assert_eq!(got.len(), kept, "up to the first dropped range");
    assert_eq!(got, x.stream[..kept]);
    // The sender retransmits the rest: byte-exact from there.
    x.send(kept, 200 * holes);
    let more = x.read();
    assert_eq!(more, x.stream[kept..200 * holes]);
}

#[test]
fn data_beyond_the_window_is_not_kept() {
    let rcvbuf = 16 * 1024;
    let mut x = rx(rcvbuf, |_| {});
    // Nudge an ACK out to learn the window advertised.
    x.send(0, 1);
    let (acked, wnd) = x.last_ack().expect("an ACK");
    assert_eq!(acked, 1);
    assert!(wnd > 2000 && wnd <= rcvbuf, "{wnd}");
    let edge = acked + wnd;
    let out_before = x.r.e.counters().tcp_out_of_window;
    // Wholly beyond the right edge: unacceptable, dropped and counted, ACKed.
    x.send(edge + 100, edge + 1100);
    assert_eq!(x.r.e.counters().tcp_out_of_window, out_before + 1);
    assert_eq!(x.last_ack().map(|a| a.0), Some(1));
    // Straddling the right edge: only what fits is kept.
    x.send(edge - 500, edge + 500);
    // Fill up to the straddler in order.
    let mut at = 1;
    while at < edge - 500 {
        let to = (at + 1000).min(edge - 500);
        x.send(at, to);
        at = to;
    }
    let got = x.read();
    assert_eq!(
        got.len(),
        edge,
        "in order up to the right edge, not past it"
    );
    assert_eq!(got, x.stream[..edge]);
    // The window opened again with the read (the update goes out): the rest
    // comes, byte-exact.
    let (_, wnd) = x.last_ack().expect("a window update");
    assert!(wnd >= 1100, "{wnd}");
    x.send(edge, edge + 1100);
    assert_eq!(x.read(), x.stream[edge..edge + 1100]);
}

#[test]
fn the_engine_wide_budget_is_exceeded_by_less_than_one_segment() {
    let budget = 3000;
    let mut x = rx(64 * 1024, |c| c.tcp.ofo_total = budget);
    // 2999 bytes held: one below the budget.
    x.send(1000, 1000 + budget - 1);
    // The budget is not spent yet, so a 5000-byte segment is taken whole:
    // 7999 bytes held, the budget exceeded by one segment less one byte.
    x.send(5000, 10_000);
    assert_eq!(x.r.e.counters().tcp_ofo_dropped, 0);
    // Now it is spent: the next out-of-order segment, however small, is not.
    x.send(11_000, 11_001);
    assert_eq!(x.r.e.counters().tcp_ofo_dropped, 1);
    // Fill the holes: both held ranges were kept, the last segment was not.
    x.send(0, 1000);
    x.send(1000 + budget - 1, 5000);
    x.send(10_000, 11_000);
    let got = x.read();
    assert_eq!(got.len(), 11_000);
    assert_eq!(got, x.stream[..11_000]);
}

/// Duplicate ACKs keep the window they started with while a hole waits, even
/// if the reader frees space between them: a sender counts an ACK as a
/// duplicate only if its window is unchanged (RFC 5681 section 2; Linux takes
/// any change as a window update), and without SACK it needs three of them to
/// retransmit before its timeout. Once the hole is filled the window opens.
#[test]
fn duplicate_acks_keep_their_window_while_the_reader_frees_space() {
    let mut rx = rx(64 << 10, |_| {});
    for k in 0..20 {
        rx.send(k * 1000, (k + 1) * 1000);
    }
    let (ack, wnd) = rx.last_ack().unwrap();
    assert_eq!(ack, 20_000);
    // Segment 20 is lost; 21.. arrive, and the application reads between them.
    let mut dups = Vec::new();
    for k in 21..25 {
        rx.send(k * 1000, (k + 1) * 1000);
        dups.extend(rx.r.segments());
        if k == 21 {
            assert_eq!(rx.read().len(), 20_000);
        }
    }
    assert_eq!(dups.len(), 4, "{dups:?}");
    for d in &dups {
        assert_eq!(d.ack.wrapping_sub(rx.base), 20_000, "{dups:?}");
        assert_eq!(
            usize::from(d.wnd),
            wnd,
            "a duplicate ACK moved the window: {dups:?}"
        );
    }
    // The hole is filled: the ACK moves and the window opens to the buffer.
    rx.send(20_000, 21_000);
    let (ack, open) = rx.last_ack().unwrap();
    assert_eq!(ack, 25_000);
    assert!(open > wnd, "{open} after {wnd}");
    assert_eq!(rx.read(), rx.stream[20_000..25_000]);
}

/// While a hole waits and the window is held, a read that frees space sends
/// no window update: it could only repeat the held window, and to a sender
/// without SACK an ACK that repeats the last one is one more duplicate, more
/// than the segments it has out (Linux then takes it for reordering, raises
/// its duplicate threshold and waits for its timer: the "SACK off, loss 1 %"
/// cells, kernel to linerate, of `tests/system_impair.rs`'s `issue_16_matrix`
/// with `LINERATE_IMPAIR_DEBUG`). One duplicate ACK per segment that arrives.
#[test]
fn a_read_while_a_hole_waits_sends_no_extra_duplicate() {
    let mut rx = rx(64 << 10, |_| {});
    // 44 KB in: the window left (20.5 KiB) is under half the buffer.
    for k in 0..44 {
        rx.send(k * 1000, (k + 1) * 1000);
    }
    let (ack, wnd) = rx.last_ack().unwrap();
    assert_eq!(ack, 44_000);
    // Segment 44 is lost; 45.. arrive, and the application reads 15 KB
    // between them: the held window is still at least half the free space.
    let mut dups = Vec::new();
    for k in 45..49 {
        rx.send(k * 1000, (k + 1) * 1000);
        dups.extend(rx.r.segments());
        if k == 46 {
            let mut buf = vec![0u8; 15_000];
            assert_eq!(rx.r.e.tcp_recv(rx.c, &mut buf).unwrap(), 15_000);
            dups.extend(rx.r.segments());
        }
    }
    assert_eq!(dups.len(), 4, "one duplicate per segment: {dups:?}");
    for d in &dups {
        assert_eq!(d.ack.wrapping_sub(rx.base), 44_000, "{dups:?}");
        assert_eq!(usize::from(d.wnd), wnd, "{dups:?}");
    }
    rx.send(44_000, 45_000);
    let (ack, open) = rx.last_ack().unwrap();
    assert_eq!(ack, 49_000);
    assert!(open > wnd, "{open} after {wnd}");
}
