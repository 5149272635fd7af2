//! Retransmission and persist timers on the wire, against a hand-driven peer
//! (tests/timers.rs has the plain doubling and give-up): the RTO backoff stops at
//! the configured maximum (RFC 6298 section 5.5, 2.5), a new RTT sample ends the
//! backoff (section 5.7 with RFC 7323 section 4), and zero-window probes
//! (RFC 9293 section 3.8.6.1) carry one byte past the window at backed-off
//! intervals, keep the connection up for as long as the peer answers them, and
//! stop once the window opens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{Config, SocketHandle, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const PEER: u32 = 9_001;

/// Established to a peer offering MSS 1000 and, with `ts`, timestamps (TSval 100).
fn established(
    ts: bool,
    wnd: u16,
    tune: impl FnOnce(&mut Config),
) -> (Raw, SocketHandle, u16, u32) {
    let mut r = Raw::host(|c| {
        c.offloads = false;
        // The hand-driven peer answers no ARP: keep its entry for the whole test.
        c.neighbor_ttl = Duration::from_secs(3600);
        tune(c);
    });
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let mut opts = vec![O::MaximumSegmentSize(1000)];
    if ts {
        opts.push(O::Timestamp(100, syn.opts.timestamps.map_or(0, |t| t.0)));
    }
    let port = r.answer_syn_with(c, &syn, PEER - 1, wnd, &opts);
    (r, c, port, syn.seq.wrapping_add(1))
}

fn gaps_ms(seen: &[Seen]) -> Vec<u64> {
    seen.windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis() as u64)
        .collect()
}

#[test]
fn rto_backoff_stops_at_max_rto() {
    let (mut r, c, _, me) = established(false, 60_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.max_rto = Duration::from_secs(1);
        c.tcp.max_retries = 7;
    });
    r.e.tcp_send(c, b"0123456789").unwrap();
    let mut seen = r.segments();
    let t0 = seen[0].at;
    seen.extend(r.advance(Duration::from_secs(60)));
    assert!(
        seen.iter()
            .all(|s| s.seq == me && s.payload == b"0123456789")
    );
    // The handshake sampled an RTT of zero: RTO 200 ms, doubled per expiry, at most 1 s.
    assert_eq!(gaps_ms(&seen), vec![200, 400, 800, 1000, 1000, 1000, 1000]);
    assert_eq!(seen[1].at - t0, Duration::from_millis(200));
    assert_eq!(r.e.tcp_info(c).unwrap().state, TcpState::Closed);
}

#[test]
fn a_fresh_rtt_sample_ends_the_backoff() {
    let (mut r, c, port, me) = established(true, 60_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.no_delay = true;
    });
    r.e.tcp_send(c, &[7u8; 1000]).unwrap();
    let first = r.segments();
    // Two expiries: 200 ms, then 400 ms later.
    let again = r.advance(Duration::from_millis(650));
    assert_eq!(again.len(), 2, "{again:?}");
    assert_eq!(again[1].at - again[0].at, Duration::from_millis(400));
    assert_eq!(r.e.tcp_info(c).unwrap().rto, Duration::from_millis(800));
    // The peer acknowledges the last retransmission, echoing its TSval: an RTT of
    // zero, so the RTO is back at its 200 ms floor.
    let tsval = again[1].opts.timestamps.unwrap().0;
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(me + 1000),
        Flags::empty(),
        60_000,
        &[O::Timestamp(101, tsval)],
        &[],
    ));
    assert_eq!(r.e.tcp_info(c).unwrap().retransmits, 0);
    assert_eq!(r.e.tcp_info(c).unwrap().rto, Duration::from_millis(200));
    // New data, never acknowledged: its first retransmission comes 200 ms later,
    // not 1.6 s.
    let _ = first;
    r.e.tcp_send(c, &[8u8; 500]).unwrap();
    let sent = r.segments();
    assert_eq!(sent.len(), 1);
    let re = r.advance(Duration::from_millis(250));
    assert_eq!(re.len(), 1, "{re:?}");
    assert_eq!(re[0].seq, me + 1000);
    assert_eq!(re[0].at - sent[0].at, Duration::from_millis(200));
}

/// The peer takes `n` bytes and closes its window.
fn ack_zero_window(r: &mut Raw, port: u16, ack: u32) {
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(ack),
        Flags::empty(),
        0,
        &[],
        &[],
    ));
}

#[test]
fn zero_window_probes_one_byte_past_the_window_with_backoff() {
    let (mut r, c, port, me) = established(false, 4_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.max_rto = Duration::from_secs(4);
        c.tcp.max_retries = 3;
    });
    let data = common::pattern(10_000, 5);
    r.e.tcp_send(c, &data).unwrap();
    let first = r.segments();
    let sent: usize = first.iter().map(|s| s.payload.len()).sum();
    assert_eq!(sent, 4_000, "the peer's window");
    // Everything acknowledged, and the window closed.
    ack_zero_window(&mut r, port, me + 4_000);
    assert!(
        r.segments().is_empty(),
        "nothing may be sent into a zero window"
    );
    // The peer answers every probe with the same zero window, for two minutes.
    let mut probes = Vec::new();
    let end = r.now + Duration::from_secs(120);
    while r.now < end {
        let step = r.advance(Duration::from_millis(50));
        for p in step {
            assert_eq!(p.seq, me + 4_000, "the probe starts at SND.UNA: {p:?}");
            assert_eq!(p.payload.len(), 1, "one byte past the window: {p:?}");
            assert_eq!(p.payload[0], data[4_000]);
            probes.push(p);
            ack_zero_window(&mut r, port, me + 4_000);
            assert!(r.segments().is_empty());
        }
    }
    // Backed off: 200 ms doubling to the 4 s maximum, then every 4 s.
    let g = gaps_ms(&probes);
    assert!(g.len() >= 15, "{g:?}");
    assert_eq!(&g[..5], &[400, 800, 1600, 3200, 4000], "{g:?}");
    assert!(g[5..].iter().all(|&x| x == 4000), "{g:?}");
    // Far more probes than max_retries: an answered probe is no failure
    // (RFC 9293 section 3.8.6.1, RFC 1122 section 4.2.2.17).
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(r.e.counters().tcp_window_probes, probes.len() as u64);
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    // The window opens: the rest goes at once, from the first unacknowledged byte.
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(me + 4_000),
        Flags::empty(),
        60_000,
        &[],
        &[],
    ));
    let rest = r.segments();
    assert_eq!(rest.first().map(|s| s.seq), Some(me + 4_000), "{rest:?}");
    let mut got = Vec::new();
    for s in &rest {
        assert_eq!(s.seq, me + 4_000 + got.len() as u32);
        got.extend_from_slice(&s.payload);
    }
    assert!(got == data[4_000..], "{} bytes", got.len());
}

/// Probes nobody answers: the same byte again (not the next one further past the
/// window), and after `max_retries` unanswered probes the peer is taken for gone,
/// as after as many retransmission timeouts. (Both failed before: each probe sent
/// one more new byte and the connection probed a vanished peer forever.)
#[test]
fn unanswered_zero_window_probes_repeat_one_byte_then_give_up() {
    let (mut r, c, port, me) = established(false, 1_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.max_rto = Duration::from_secs(2);
        c.tcp.max_retries = 3;
    });
    r.e.tcp_send(c, &[1u8; 3_000]).unwrap();
    r.segments();
    ack_zero_window(&mut r, port, me + 1_000);
    // One answered probe first: answering resets the count.
    let p = r.advance(Duration::from_millis(250));
    assert_eq!(p.len(), 1);
    ack_zero_window(&mut r, port, me + 1_000);
    let seen = r.advance(Duration::from_secs(60));
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        seen.iter()
            .all(|s| s.seq == me + 1_000 && s.payload.len() == 1),
        "{seen:?}"
    );
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(linerate_toe::ConnectionError::TimedOut)
    );
    assert_eq!(r.e.counters().tcp_estab_resets, 1);
}

/// The peer shrinks its window to one byte while 3000 bytes are outstanding and
/// then goes silent. The RTO resends nothing (sender-side SWS avoidance keeps a
/// one-byte segment back), so the persist timer must take over from it: a
/// connection with data waiting always has one of the two running. (Found by the
/// engine fuzz harness: after the RTO, neither ran and the connection hung.)
#[test]
fn window_shrunk_below_a_segment_persist_takes_over_from_the_rto() {
    let (mut r, c, port, me) = established(false, 4_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.max_rto = Duration::from_secs(2);
        c.tcp.max_retries = 3;
    });
    r.e.tcp_send(c, &[3u8; 6_000]).unwrap();
    assert_eq!(
        r.segments().iter().map(|s| s.payload.len()).sum::<usize>(),
        4_000
    );
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(me + 1_000),
        Flags::empty(),
        1,
        &[],
        &[],
    ));
    r.segments();
    let mut seen = Vec::new();
    for _ in 0..600 {
        seen.extend(r.advance(Duration::from_millis(100)));
        if r.e.tcp_readiness(c).unwrap().error.is_some() {
            break;
        }
        assert!(r.e.poll_timeout().is_some(), "data waits and no timer runs");
    }
    assert!(!seen.is_empty());
    assert!(
        seen.iter()
            .all(|s| s.seq == me + 1_000 && s.payload.len() <= 1),
        "{seen:?}"
    );
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(linerate_toe::ConnectionError::TimedOut)
    );
}

/// A probe into a window too small for a segment carries data (the override of
/// sender-side SWS avoidance) without arming the retransmission timer. When the
/// window then opens without that data being acknowledged, and Nagle holds the
/// small rest back, the retransmission timer must take over from the persist
/// timer. (Found by the engine fuzz target: neither ran, and the connection hung
/// with data outstanding.)
#[test]
fn window_opening_after_a_data_probe_hands_over_to_the_rto() {
    let (mut r, c, port, me) = established(false, 4_000, |c| {
        c.tcp.min_rto = Duration::from_millis(200);
        c.tcp.max_rto = Duration::from_secs(2);
        c.tcp.max_retries = 3;
    });
    r.e.tcp_send(c, &[4u8; 4_800]).unwrap();
    assert_eq!(
        r.segments().iter().map(|s| s.payload.len()).sum::<usize>(),
        4_000
    );
    // Everything acknowledged, the window down to 300 bytes: too small to send into.
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(me + 4_000),
        Flags::empty(),
        300,
        &[],
        &[],
    ));
    assert!(r.segments().is_empty());
    // The persist timer sends what fits: 300 bytes.
    let probe = r.advance(Duration::from_millis(250));
    assert_eq!(probe.len(), 1, "{probe:?}");
    assert_eq!((probe[0].seq, probe[0].payload.len()), (me + 4_000, 300));
    // The window opens; the probe's bytes are not acknowledged, the 500 left wait
    // for them (Nagle). Then the peer is silent.
    r.input(&tcp_frame(
        80,
        port,
        PEER,
        Some(me + 4_000),
        Flags::empty(),
        60_000,
        &[],
        &[],
    ));
    r.segments();
    assert!(
        r.e.poll_timeout().is_some(),
        "300 bytes outstanding and no timer"
    );
    let again = r.advance(Duration::from_millis(300));
    assert!(
        again
            .iter()
            .any(|s| s.seq == me + 4_000 && !s.payload.is_empty()),
        "the RTO resends from SND.UNA: {again:?}"
    );
    r.advance(Duration::from_secs(30));
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(linerate_toe::ConnectionError::TimedOut)
    );
}
