//! Undo of needless congestion responses, against a hand-driven peer, as Linux
//! does (`tcp_undo_cwnd_reduction`): a fast retransmission whose retransmission
//! the peer reports as a duplicate (D-SACK, RFC 2883 section 5 / RFC 3708), and
//! a retransmission timeout whose original segments the peer acknowledges (a
//! timestamp echo older than the retransmission: Eifel detection, RFC 3522)
//! give back the window and ssthresh they took.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const MSS: u32 = 1000;

/// An ACK from the peer for `ack` with SACK blocks `blocks` (sequence numbers)
/// and, if given, a timestamp echoing `tsecr`.
fn ack(r: &mut Raw, port: u16, ack: u32, blocks: &[(u32, u32)], tsecr: Option<u32>) {
    let mut opts = Vec::new();
    if let Some(e) = tsecr {
        opts.extend([O::Noop, O::Noop, O::Timestamp(500, e)]);
    }
    if let Some((&first, rest)) = blocks.split_first() {
        let mut more = [None; 3];
        for (slot, b) in more.iter_mut().zip(rest) {
            *slot = Some(*b);
        }
        opts.extend([O::Noop, O::Noop, O::SelectiveAcknowledgement(first, more)]);
    }
    r.input(&tcp_frame(
        80,
        port,
        7001,
        Some(ack),
        Flags::empty(),
        3750,
        &opts,
        &[],
    ));
}

/// Segment 0 of the initial window is delayed, not lost: the peer SACKs 1 to 4,
/// the sender retransmits 0 and cuts its window; then 0 arrives, the peer
/// acknowledges everything, and the retransmission arrives as a duplicate,
/// reported by a D-SACK block. The cut is undone: cwnd and ssthresh are back
/// (slow start again, as before). Before (no undo), it failed with cwnd left
/// at 7,000 (CUBIC's cut to 0.7) and ssthresh 7,000.
#[test]
fn a_spurious_fast_retransmission_is_undone_after_d_sack() {
    let (mut r, c, port, base) = connected(
        |c| c.offloads = false,
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
            O::Noop,
            O::WindowScale(4),
        ],
    );
    r.e.tcp_send(c, &common::pattern(10 * MSS as usize, 3))
        .unwrap();
    assert_eq!(r.segments().len(), 10);
    let before = r.e.tcp_info(c).unwrap();
    assert_eq!((before.cwnd, before.ssthresh), (10_000, usize::MAX));
    let seg = |k: u32| base + k * MSS;
    r.now += Duration::from_millis(10);
    for k in 1..=4 {
        ack(&mut r, port, base, &[(seg(1), seg(k + 1))], None);
    }
    let out = r.segments();
    assert!(
        out.iter().any(|s| s.seq == base && !s.payload.is_empty()),
        "segment 0 retransmitted: {out:?}"
    );
    assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
    let cut = r.e.tcp_info(c).unwrap();
    assert!(
        cut.cwnd < before.cwnd && cut.ssthresh < usize::MAX,
        "{cut:?}"
    );
    // The original 0 arrives: everything is acknowledged. Then the
    // retransmission: a duplicate ACK with a D-SACK block for it.
    ack(&mut r, port, seg(10), &[], None);
    ack(&mut r, port, seg(10), &[(seg(0), seg(1))], None);
    let after = r.e.tcp_info(c).unwrap();
    assert_eq!(r.e.counters().tcp_undos, 1);
    assert!(after.cwnd >= before.cwnd, "{after:?}");
    assert_eq!(after.ssthresh, usize::MAX, "{after:?}");
}

/// After that D-SACK the reordering window is wider (RFC 8985 section 6.2
/// step 4, and reordering counts as seen, as Linux's `tcp_check_sack_reordering`
/// counts a D-SACKed retransmission): the same reordering once more, segment
/// 10 arriving 3 ms after 11 to 14 (min_RTT 10 ms, so the window is now 5 ms
/// instead of 2.5 ms, and no longer zero with DupThresh segments SACKed), is
/// not taken for a loss. Without that, a second fast retransmission follows:
/// the window stays zero, reordering never having been seen.
#[test]
fn after_a_d_sack_the_same_reordering_is_no_loss() {
    let (mut r, c, port, base) = connected(
        |c| c.offloads = false,
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
            O::Noop,
            O::WindowScale(4),
        ],
    );
    let data = common::pattern(20 * MSS as usize, 3);
    let seg = |k: u32| base + k * MSS;
    r.e.tcp_send(c, &data[..10 * MSS as usize]).unwrap();
    assert_eq!(r.segments().len(), 10);
    r.now += Duration::from_millis(10);
    for k in 1..=4 {
        ack(&mut r, port, base, &[(seg(1), seg(k + 1))], None);
    }
    r.segments();
    ack(&mut r, port, seg(10), &[], None);
    ack(&mut r, port, seg(10), &[(seg(0), seg(1))], None);
    assert_eq!(r.e.counters().tcp_undos, 1);
    // Segments 10 to 19; 11 to 14 arrive after 10 ms, 10 after 13 ms.
    r.e.tcp_send(c, &data[10 * MSS as usize..]).unwrap();
    assert_eq!(r.segments().len(), 10);
    r.now += Duration::from_millis(10);
    for k in 11..=14 {
        ack(&mut r, port, seg(10), &[(seg(11), seg(k + 1))], None);
    }
    let mut out = r.segments();
    out.extend(r.advance(Duration::from_millis(3)));
    ack(&mut r, port, seg(15), &[], None);
    out.extend(r.segments());
    assert!(
        out.iter().all(|s| s.seq != seg(10)),
        "segment 10 resent: {out:?}"
    );
    assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
}

/// Timestamps on, SACK off, a 10 ms round trip: ten segments go and the
/// peer's ACK for them is delayed past the retransmission timer (200 ms), which
/// resends segment 0 with cwnd one segment. The ACK then arrives, echoing the
/// originals' timestamp: the timeout was needless. The window comes back
/// (ten segments of new data go at once, not one) and segments 1 to 9 are not
/// sent again. Before (no undo), it failed with cwnd 7,925 and ssthresh 7,699
/// after that ACK (slow start from one segment after the timeout), against
/// 11,000 and unbounded before the timeout.
#[test]
fn a_spurious_timeout_is_undone_by_the_timestamp_echo() {
    let (mut r, c, port, base) = connected(
        |c| c.offloads = false,
        &[
            // 1000 data bytes per segment beside the 12 of the timestamps.
            O::MaximumSegmentSize(MSS as u16 + 12),
            O::Noop,
            O::WindowScale(4),
            O::Noop,
            O::Noop,
            O::Timestamp(400, 0),
        ],
    );
    let data = common::pattern(40 * MSS as usize, 4);
    // One round trip to measure: a segment acknowledged after 10 ms.
    r.e.tcp_send(c, &data[..MSS as usize]).unwrap();
    let first = r.segments();
    let ts0 = first[0].opts.timestamps.unwrap().0;
    r.now += Duration::from_millis(10);
    ack(&mut r, port, base + MSS, &[], Some(ts0));
    assert_eq!(r.e.tcp_info(c).unwrap().rto, Duration::from_millis(200));
    let base = base + MSS;
    r.e.tcp_send(c, &data[MSS as usize..11 * MSS as usize])
        .unwrap();
    let window = r.segments();
    assert_eq!(window.len(), 10);
    let ts_orig = window[9].opts.timestamps.unwrap().0;
    let before = r.e.tcp_info(c).unwrap();
    // The timer fires: segment 0 again, alone.
    let again = r.advance(Duration::from_millis(205));
    assert_eq!(r.e.counters().tcp_timeouts, 1);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].seq, base);
    // The delayed ACK of the originals.
    ack(&mut r, port, base + 10 * MSS, &[], Some(ts_orig));
    assert_eq!(r.e.counters().tcp_undos, 1);
    let after = r.e.tcp_info(c).unwrap();
    assert!(after.cwnd >= before.cwnd, "{after:?} vs {before:?}");
    assert_eq!(after.ssthresh, before.ssthresh);
    // New data goes with the window restored.
    r.e.tcp_send(c, &data[11 * MSS as usize..]).unwrap();
    let next = r.segments();
    assert!(next.len() >= 10, "{next:?}");
    assert!(next.iter().all(|s| s.seq >= base + 10 * MSS), "{next:?}");
}

/// Timestamps and SACK on. Segment 0 of ten is delayed: the peer SACKs 1 to 4,
/// the sender retransmits 0 and cuts its window (recovery until segment 10 is
/// acknowledged). Then the original 0 arrives and the peer acknowledges up to
/// 5, echoing the original's timestamp: the hole was filled by the original,
/// and no retransmission is left above SND.UNA, so the cut is undone at once,
/// inside recovery (Linux's `tcp_try_undo_partial`), without waiting for the
/// D-SACK of the retransmission. An echo of the retransmission's own timestamp
/// (the retransmission filled the hole: a real loss) undoes nothing. An undo
/// that waits for the end of recovery or the D-SACK fails here, with cwnd left
/// at CUBIC's cut.
#[test]
fn a_hole_filled_by_the_original_undoes_the_cut_inside_recovery() {
    for original_fills in [true, false] {
        let (mut r, c, port, base) = connected(
            |c| c.offloads = false,
            &[
                O::MaximumSegmentSize(MSS as u16 + 12),
                O::SelectiveAcknowledgementPermitted,
                O::Noop,
                O::WindowScale(4),
                O::Noop,
                O::Noop,
                O::Timestamp(400, 0),
            ],
        );
        let seg = |k: u32| base + k * MSS;
        r.e.tcp_send(c, &common::pattern(10 * MSS as usize, 5))
            .unwrap();
        let window = r.segments();
        assert_eq!(window.len(), 10);
        let ts_orig = window[0].opts.timestamps.unwrap().0;
        let before = r.e.tcp_info(c).unwrap();
        r.now += Duration::from_millis(10);
        for k in 1..=4 {
            ack(&mut r, port, base, &[(seg(1), seg(k + 1))], Some(ts_orig));
        }
        let out = r.segments();
        let rtx = out
            .iter()
            .find(|s| s.seq == base && !s.payload.is_empty())
            .expect("segment 0 retransmitted");
        let ts_rtx = rtx.opts.timestamps.unwrap().0;
        assert!(ts_rtx > ts_orig);
        assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
        assert!(r.e.tcp_info(c).unwrap().cwnd < before.cwnd);
        // A partial ACK: up to 5 of the 10 outstanding.
        r.now += Duration::from_millis(1);
        let echo = if original_fills { ts_orig } else { ts_rtx };
        ack(&mut r, port, seg(5), &[], Some(echo));
        let after = r.e.tcp_info(c).unwrap();
        if original_fills {
            assert_eq!(r.e.counters().tcp_undos, 1);
            assert!(after.cwnd >= before.cwnd, "{after:?} vs {before:?}");
            assert_eq!(after.ssthresh, usize::MAX, "{after:?}");
        } else {
            assert_eq!(r.e.counters().tcp_undos, 0);
            assert!(after.cwnd < before.cwnd, "{after:?}");
        }
    }
}
