//! TCP keep-alives (RFC 9293 section 3.8.4, RFC 1122 section 4.2.3.6): off by
//! default; probes of SND.NXT - 1 with no data at idle, idle + interval, ...;
//! answered probes keep the connection up; unanswered ones fail it with "timed
//! out" after idle + probes * interval; never sent with data in flight.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use common::settle;
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{
    ConnectionError, Engine, Instant, Keepalive, RecvError, SocketHandle, TcpState,
};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const KA: Keepalive = Keepalive {
    idle: Duration::from_secs(10),
    interval: Duration::from_secs(2),
    probes: 3,
};

/// A connection to 10.0.0.2:80 from a hand-driven engine; returns it, our
/// port, SND.NXT and RCV.NXT.
fn established(r: &mut Raw) -> (SocketHandle, u16, u32, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let port = r.answer_syn(c, &syn, &[O::MaximumSegmentSize(1460)]);
    (c, port, syn.seq.wrapping_add(1), 7001)
}

#[test]
fn off_by_default() {
    let mut r = Raw::host(|_| {});
    let (c, ..) = established(&mut r);
    assert_eq!(r.e.tcp_keepalive(c), Ok(None));
    assert!(r.advance(Duration::from_secs(3 * 3600)).is_empty());
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(r.e.counters().tcp_keepalive_probes, 0);
}

#[test]
fn unanswered_probes_fail_the_connection_after_idle_plus_probes_times_interval() {
    let mut r = Raw::host(|_| {});
    let (c, _, snd_nxt, rcv_nxt) = established(&mut r);
    let heard = r.now;
    r.e.tcp_set_keepalive(c, Some(KA)).unwrap();
    assert_eq!(r.e.tcp_keepalive(c), Ok(Some(KA)));
    let seen = r.advance(Duration::from_secs(60));
    let at: Vec<Duration> = seen.iter().map(|s| s.at - heard).collect();
    assert_eq!(
        at,
        [10, 12, 14].map(Duration::from_secs),
        "probes at idle, then every interval: {seen:?}"
    );
    for p in &seen {
        assert_eq!(p.flags, Flags::ACK);
        assert_eq!(p.seq, snd_nxt.wrapping_sub(1), "SEG.SEQ = SND.NXT - 1");
        assert_eq!(p.ack, rcv_nxt);
        assert!(p.payload.is_empty());
    }
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    assert_eq!(
        r.e.tcp_recv(c, &mut [0; 4]),
        Err(RecvError::Failed(ConnectionError::TimedOut))
    );
    let k = r.e.counters();
    assert_eq!((k.tcp_keepalive_probes, k.tcp_keepalive_timeouts), (3, 1));
    // It failed at idle + 3 * interval exactly: no timer is left.
    assert_eq!(r.e.poll_timeout(), None);
}

#[test]
fn any_segment_from_the_peer_answers_and_restarts_the_idle_clock() {
    let mut r = Raw::host(|_| {});
    let (c, port, snd_nxt, rcv_nxt) = established(&mut r);
    r.e.tcp_set_keepalive(c, Some(KA)).unwrap();
    let start = r.now;
    // Two probes go unanswered; then the peer's ACK arrives.
    let seen = r.advance(Duration::from_secs(13));
    assert_eq!(seen.len(), 2);
    r.input(&tcp_frame(
        80,
        port,
        rcv_nxt,
        Some(snd_nxt),
        Flags::empty(),
        60_000,
        &[],
        &[],
    ));
    let answered = r.now;
    // The next probe waits a whole idle period again, and the count restarts:
    // three more unanswered ones are needed.
    let seen = r.advance(Duration::from_secs(60));
    let at: Vec<Duration> = seen.iter().map(|s| s.at - answered).collect();
    assert_eq!(at, [10, 12, 14].map(Duration::from_secs));
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    assert_eq!(r.e.counters().tcp_keepalive_probes, 5);
    assert!(answered - start == Duration::from_secs(13));
}

#[test]
fn no_probes_while_data_is_in_flight() {
    let mut r = Raw::host(|c| c.tcp.max_retries = 3);
    let (c, ..) = established(&mut r);
    r.e.tcp_set_keepalive(c, Some(KA)).unwrap();
    r.e.tcp_send(c, b"never acknowledged").unwrap();
    let seen = r.advance(Duration::from_secs(120));
    // Retransmissions only, each carrying the data; the RTO gives up.
    assert!(seen.iter().all(|s| s.payload == b"never acknowledged"));
    assert_eq!(r.e.counters().tcp_keepalive_probes, 0);
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
}

/// Two hosts, a connection that exchanged a few bytes and went quiet.
fn idle_pair(seed: u64) -> (Sim, SocketHandle, SocketHandle) {
    // `Sim::two_hosts` without the start-up announcements: the link losing a
    // frame must mean a probe went.
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.announcements = 0;
            Engine::new(c, seed.wrapping_mul(31).wrapping_add(u64::from(i)))
        })
        .collect();
    let mut sim = Sim::new(engines, LinkConfig::default());
    let l = sim.engines[1].tcp_listen(22).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:22".parse().unwrap())
        .unwrap();
    sim.engines[0].tcp_send(c, b"hello").unwrap();
    let mut s = None;
    let limit = sim.now + Duration::from_secs(1);
    assert!(sim.run_until(limit, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        s.is_some_and(|s| sim.engines[1].tcp_recv(s, &mut [0; 8]) == Ok(5))
    }));
    settle(&mut sim, Duration::from_secs(1));
    (sim, c, s.unwrap())
}

#[test]
fn a_live_peer_answers_and_the_connection_stays_up() {
    let (mut sim, c, s) = idle_pair(1);
    sim.engines[0].tcp_set_keepalive(c, Some(KA)).unwrap();
    let end = sim.now + Duration::from_secs(120);
    while sim.step(end) {}
    assert_eq!(sim.engines[0].tcp_state(c), Ok(TcpState::Established));
    assert_eq!(sim.engines[1].tcp_state(s), Ok(TcpState::Established));
    let k = sim.engines[0].counters();
    // One probe per idle period (plus the round trip), each answered.
    assert!((10..=12).contains(&k.tcp_keepalive_probes), "{k:?}");
    assert_eq!(k.tcp_keepalive_timeouts, 0);
    // The peer saw each probe as an old duplicate and acknowledged it.
    let peer = sim.engines[1].counters();
    assert_eq!(peer.tcp_out_of_window, k.tcp_keepalive_probes);
    // Data still flows afterwards.
    sim.engines[1].tcp_send(s, b"still here").unwrap();
    let limit = sim.now + Duration::from_secs(1);
    let mut buf = [0u8; 16];
    assert!(sim.run_until(limit, |sim| sim.engines[0].tcp_recv(c, &mut buf) == Ok(10)));
}

#[test]
fn a_vanished_peer_times_out_after_idle_plus_probes_times_interval() {
    let (mut sim, c, _) = idle_pair(2);
    let quiet_since = sim.now;
    sim.link.config_mut().loss = 1.0;
    sim.engines[0].tcp_set_keepalive(c, Some(KA)).unwrap();
    // Stepped by hand (`Sim::step` moves the clock on past the last event),
    // noting when the link drops a frame: only probes are sent now.
    let limit = sim.now + Duration::from_secs(60);
    let mut probes = Vec::new();
    let failed_at: Instant = loop {
        let t = sim.now;
        let lost = sim.link.stats().lost;
        sim.poll();
        if sim.link.stats().lost > lost {
            probes.push(t);
        }
        if sim.engines[0].tcp_readiness(c).unwrap().error.is_some() {
            break t;
        }
        match sim.next_event() {
            Some(next) if next <= limit => sim.now = next.max(sim.now),
            _ => panic!("never failed"),
        }
    };
    assert_eq!(
        sim.engines[0].tcp_readiness(c).unwrap().error,
        Some(ConnectionError::TimedOut)
    );
    // The last segment heard came at most a second (the settle) before the link
    // went quiet: the first probe is `idle` after it, the others `interval`
    // apart, the failure one more `interval` on.
    assert_eq!(probes.len(), 3);
    let first = probes[0] - quiet_since;
    assert!(
        first <= KA.idle && first >= KA.idle - Duration::from_secs(1),
        "{first:?}"
    );
    let since_first: Vec<Duration> = probes.iter().map(|&p| p - probes[0]).collect();
    assert_eq!(since_first, [0, 2, 4].map(Duration::from_secs));
    assert_eq!(failed_at - probes[0], Duration::from_secs(6));
    let k = sim.engines[0].counters();
    assert_eq!((k.tcp_keepalive_probes, k.tcp_keepalive_timeouts), (3, 1));
    assert!(sim.link.stats().lost >= 3);
}
