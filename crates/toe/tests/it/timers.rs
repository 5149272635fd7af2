//! Timers: SYN and data retransmission with exponential backoff (RFC 6298 section
//! 5.5) ending in a timeout, TIME-WAIT for 2 MSL (RFC 9293 section 3.4.2),
//! zero-window probing (section 3.8.6.1), delayed ACKs (section 3.8.6.3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use common::{pattern, settle};
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{ConnectionError, Instant, SendError, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

fn gaps(seen: &[Seen]) -> Vec<u64> {
    seen.windows(2)
        .map(|w| (w[1].at - w[0].at).as_millis() as u64)
        .collect()
}

#[test]
fn syn_backoff_then_timeout() {
    let mut r = Raw::host(|c| c.tcp.syn_retries = 4);
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let seen = r.advance(Duration::from_secs(120));
    assert!(seen.iter().all(|s| s.flags == Flags::SYN));
    assert_eq!(seen.len(), 5);
    // 1 s initial RTO, doubled after every expiry.
    assert_eq!(gaps(&seen), vec![1000, 2000, 4000, 8000]);
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    assert_eq!(
        r.e.tcp_send(c, b"x"),
        Err(SendError::Failed(ConnectionError::TimedOut))
    );
}

/// Establishes a connection from the engine to a raw peer that offers no options;
/// returns the handle and (engine's ISS + 1, peer's next sequence number).
fn established(r: &mut Raw, peer_wnd: u16) -> (linerate_toe::SocketHandle, u32, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let mine = c;
    let peer_iss = 7_000;
    r.input(&tcp_frame(
        80,
        local_port(r, mine),
        peer_iss,
        Some(syn.seq.wrapping_add(1)),
        Flags::SYN,
        peer_wnd,
        &[O::MaximumSegmentSize(1000)],
        &[],
    ));
    let ack = r.segments();
    assert_eq!(ack.len(), 1);
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    (c, syn.seq.wrapping_add(1), peer_iss + 1)
}

fn local_port(r: &Raw, h: linerate_toe::SocketHandle) -> u16 {
    r.e.tcp_addrs(h).unwrap().0.port()
}

#[test]
fn data_rto_backoff_then_timeout() {
    let mut r = Raw::host(|c| {
        c.tcp.max_retries = 5;
        c.tcp.min_rto = Duration::from_millis(200);
    });
    let (c, _, _) = established(&mut r, 60_000);
    r.e.tcp_send(c, b"hello").unwrap();
    let first = r.segments();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].payload, b"hello");
    // Never acknowledged: retransmitted with the RTO doubling each time.
    let mut seen = first;
    seen.extend(r.advance(Duration::from_secs(600)));
    assert!(seen.iter().all(|s| s.payload == b"hello"));
    assert_eq!(seen.len(), 6);
    let g = gaps(&seen);
    for w in g.windows(2) {
        assert_eq!(w[1], 2 * w[0], "{g:?}");
    }
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    assert_eq!(r.e.counters().tcp_timeouts, 5);
    assert_eq!(r.e.counters().tcp_retrans_segs, 5);
}

#[test]
fn time_wait_lasts_two_msl_and_acks_a_repeated_fin() {
    let mut r = Raw::host(|c| c.tcp.msl = Duration::from_secs(2));
    let (c, my_nxt, peer_nxt) = established(&mut r, 60_000);
    let port = local_port(&r, c);
    r.e.tcp_shutdown(c).unwrap();
    let fin = r.segments();
    assert_eq!(fin.len(), 1);
    assert!(fin[0].flags.contains(Flags::FIN));
    // The peer acknowledges our FIN and sends its own.
    r.input(&tcp_frame(
        80,
        port,
        peer_nxt,
        Some(my_nxt + 1),
        Flags::FIN,
        60_000,
        &[],
        &[],
    ));
    let ack = r.segments();
    assert_eq!(ack.len(), 1);
    assert_eq!(ack[0].ack, peer_nxt + 1);
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    // The peer repeats its FIN (our ACK was lost): acknowledged again.
    r.advance(Duration::from_secs(3));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    r.input(&tcp_frame(
        80,
        port,
        peer_nxt,
        Some(my_nxt + 1),
        Flags::FIN,
        60_000,
        &[],
        &[],
    ));
    let again = r.segments();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].ack, peer_nxt + 1);
    // 2 MSL after that FIN (the timer restarted), the connection is gone.
    let t = r.now;
    r.advance(Duration::from_millis(3_900));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    r.advance(Duration::from_millis(200));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Closed));
    assert!(r.now - t >= Duration::from_secs(4));
    assert_eq!(r.e.tcp_recv(c, &mut [0; 4]), Ok(0));
}

#[test]
fn zero_window_probes_until_the_reader_reads() {
    let link = LinkConfig::default();
    let mut sim = Sim::two_hosts(true, 8, link.clone());
    // A small receive buffer on the receiver.
    let mut cfg = sim.engines[1].config().clone();
    cfg.tcp.recv_buffer = 8 * 1024;
    sim.engines[1] = linerate_toe::Engine::new(cfg, 5);
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let data = pattern(64 * 1024, 3);
    let mut sent = 0;
    let mut s = None;
    // Write without reading for 30 s: the window closes and the sender probes.
    sim.run_until(sim.now + Duration::from_secs(30), |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        if let Ok(n) = sim.engines[0].tcp_send(c, &data[sent..]) {
            sent += n;
        }
        false
    });
    let s = s.unwrap();
    let probes = sim.engines[0].counters().tcp_window_probes;
    assert!(probes >= 3, "{probes}");
    assert_eq!(sim.engines[1].tcp_info(s).unwrap().recv_queue, 8 * 1024);
    assert_eq!(sim.engines[0].tcp_state(c), Ok(TcpState::Established));
    // Probes are backed off, not sent every RTO: a handful in 30 s.
    assert!(probes < 30, "{probes}");
    // The reader reads: everything arrives.
    let mut got = Vec::new();
    let end = sim.now + Duration::from_secs(120);
    assert!(sim.run_until(end, |sim| {
        if sent < data.len()
            && let Ok(n) = sim.engines[0].tcp_send(c, &data[sent..])
        {
            sent += n;
        }
        let mut buf = [0u8; 4096];
        while let Ok(n) = sim.engines[1].tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    }));
    assert!(got == data);
}

#[test]
fn delayed_ack_and_every_second_segment() {
    let mut r = Raw::host(|c| c.tcp.delayed_ack = Duration::from_millis(40));
    let (c, my_nxt, mut peer) = established(&mut r, 60_000);
    let port = local_port(&r, c);
    // Quick ACKs at the start: the first segments are acknowledged at once.
    for _ in 0..16 {
        r.input(&tcp_frame(
            80,
            port,
            peer,
            Some(my_nxt),
            Flags::empty(),
            60_000,
            &[],
            &[7; 1000],
        ));
        peer += 1000;
        assert_eq!(r.segments().len(), 1);
    }
    // Then one full-sized segment waits for the delayed-ACK timer...
    r.input(&tcp_frame(
        80,
        port,
        peer,
        Some(my_nxt),
        Flags::empty(),
        60_000,
        &[],
        &[7; 1000],
    ));
    peer += 1000;
    assert!(r.segments().is_empty());
    let t0 = r.now;
    let acks = r.advance(Duration::from_millis(100));
    assert_eq!(acks.len(), 1);
    assert_eq!(acks[0].ack, peer);
    assert_eq!(acks[0].at - t0, Duration::from_millis(40));
    // ...and a second one is acknowledged at once.
    r.input(&tcp_frame(
        80,
        port,
        peer,
        Some(my_nxt),
        Flags::empty(),
        60_000,
        &[],
        &[7; 1000],
    ));
    peer += 1000;
    assert!(r.segments().is_empty());
    r.input(&tcp_frame(
        80,
        port,
        peer,
        Some(my_nxt),
        Flags::empty(),
        60_000,
        &[],
        &[7; 1000],
    ));
    peer += 1000;
    let a = r.segments();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].ack, peer);
    // Out of order: an immediate duplicate ACK.
    r.input(&tcp_frame(
        80,
        port,
        peer + 1000,
        Some(my_nxt),
        Flags::empty(),
        60_000,
        &[],
        &[7; 1000],
    ));
    let d = r.segments();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].ack, peer);
    let _ = Instant::ZERO;
}

#[test]
fn simultaneous_close_goes_through_closing() {
    let mut sim = Sim::two_hosts(true, 9, LinkConfig::default());
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let mut s = None;
    sim.run_until(sim.now + Duration::from_secs(1), |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        s.is_some()
    });
    settle(&mut sim, Duration::from_millis(100));
    let s = s.unwrap();
    sim.engines[0].tcp_shutdown(c).unwrap();
    sim.engines[1].tcp_shutdown(s).unwrap();
    let end = sim.now + Duration::from_secs(5);
    assert!(sim.run_until(end, |sim| {
        sim.engines[0].tcp_state(c) == Ok(TcpState::TimeWait)
            && sim.engines[1].tcp_state(s) == Ok(TcpState::TimeWait)
    }));
}
