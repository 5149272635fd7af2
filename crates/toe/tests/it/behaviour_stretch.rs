//! The sender under stretch ACKs (a peer acknowledging a whole GRO burst with
//! one ACK, as Linux does with offloads on), against a hand-driven peer: slow
//! start doubles cwnd per round trip however few ACKs cover the window (every
//! acknowledged byte counts, as in Linux's `tcp_slow_start`), and a lost stretch
//! ACK with SACK off does not stall the sender until its retransmission timer
//! (a tail loss probe, RFC 8985 section 7, sends the next segment and the
//! peer's answer acknowledges everything).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const MSS: u32 = 1000;
/// The peer's window: 65,535 << 7, about 8 MiB.
const WND: u16 = 65_535;

/// An ACK from the peer for `ack`.
fn ack(r: &mut Raw, port: u16, ack: u32) {
    r.input(&tcp_frame(
        80,
        port,
        7001,
        Some(ack),
        Flags::empty(),
        WND,
        &[],
        &[],
    ));
}

/// The end of the highest segment in `segs`, or `high` if none is higher.
fn high_of(segs: &[Seen], high: u32) -> u32 {
    segs.iter()
        .map(|s| s.seq + s.payload.len() as u32)
        .fold(
            high,
            |h, e| if e.wrapping_sub(h) as i32 > 0 { e } else { h },
        )
}

/// Round trips of 10 ms; each window is acknowledged by one ACK per 64 KiB (the
/// last one covering the rest): cwnd doubles each round trip in slow start.
/// Slow start limited to 2 SMSS per ACK (RFC 3465's L) fails here, with cwnd
/// 10,000 -> 12,000 in the first round trip instead of 20,000.
#[test]
fn slow_start_doubles_per_round_trip_under_one_ack_per_64_kib() {
    let (mut r, c, port, base) = connected(
        |c| {
            c.offloads = false;
            c.tcp.send_buffer = 16 << 20;
        },
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::Noop,
            O::WindowScale(7),
        ],
    );
    r.e.tcp_send(c, &common::pattern(8 << 20, 5)).unwrap();
    let mut high = high_of(&r.segments(), base);
    let mut una = base;
    let mut cwnd = r.e.tcp_info(c).unwrap().cwnd;
    assert_eq!(cwnd, 10 * MSS as usize, "the initial window");
    for round in 0..5 {
        assert_eq!(
            (high - una) as usize,
            cwnd,
            "round {round}: a full window sent"
        );
        r.now += Duration::from_millis(10);
        let end = high;
        let mut sent = Vec::new();
        while una != end {
            una = if end - una > 65_536 {
                una + 65_536
            } else {
                end
            };
            ack(&mut r, port, una);
            sent.extend(r.segments());
        }
        high = high_of(&sent, high);
        let now = r.e.tcp_info(c).unwrap().cwnd;
        assert_eq!(now, 2 * cwnd, "round {round}: cwnd {cwnd} -> {now}");
        cwnd = now;
    }
    assert_eq!(cwnd, 320 * MSS as usize);
}

/// SACK off, a 10 ms round trip: after the first window is acknowledged (one
/// ACK per segment), 20 segments go, the peer receives them and its one ACK for all of them is lost.
/// A tail loss probe (2 SRTT + 2 ms later) sends the next two new segments
/// (two, so that a receiver acknowledges at once instead of after its delayed
/// ACK time, RFC 5681 section 4.2); the peer's answer acknowledges everything
/// and the sender goes on, long before its retransmission timer (200 ms, the
/// minimum). Probes that need SACK fail here, with nothing sent in those
/// 100 ms (the sender waits for its retransmission timer, then resends from
/// SND.UNA).
#[test]
fn a_lost_stretch_ack_without_sack_is_recovered_by_a_probe() {
    let (mut r, c, port, base) = connected(
        |c| c.offloads = false,
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::Noop,
            O::WindowScale(7),
        ],
    );
    r.e.tcp_send(c, &common::pattern(100 * MSS as usize, 5))
        .unwrap();
    // A first round trip of 10 ms, acknowledged: an RTT sample of 10 ms.
    let first = r.segments();
    assert_eq!(first.len(), 10);
    // One ACK per segment (no stretch ACK yet), so that slow start's rule does
    // not matter here.
    r.now += Duration::from_millis(10);
    let mut second = Vec::new();
    for k in 1..=10 {
        ack(&mut r, port, base + k * MSS);
        second.extend(r.segments());
    }
    assert_eq!(second.len(), 20, "slow start: 20 segments");
    let high = high_of(&second, base);
    // The peer's ACK of all 20 is lost. Within 100 ms (a few round trips, well
    // below the 200 ms minimum RTO) a probe goes: new data, not a resend.
    let probe = r.advance(Duration::from_millis(100));
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    assert_eq!(probe.len(), 2, "one probe of two segments: {probe:?}");
    assert_eq!(probe[0].seq, high, "the next new segment");
    assert_eq!(probe[1].seq, high + MSS, "and the one after it");
    assert_eq!(r.e.counters().tcp_tlp_probes, 1);
    // The peer acknowledges everything including the probe: the sender goes on.
    ack(&mut r, port, high + 2 * MSS);
    let more = r.segments();
    assert!(!more.is_empty());
    assert!(more.iter().all(|s| s.seq >= high + 2 * MSS), "{more:?}");
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    assert_eq!(r.e.counters().tcp_retrans_segs, 0);
}
