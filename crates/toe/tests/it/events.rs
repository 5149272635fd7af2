//! The engine's event queue (`Engine::poll_event`): each change of a socket's
//! readiness is reported once, and a socket whose readiness did not change is
//! never reported, whatever reached it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{
    AcceptError, ConnectionError, Engine, Event, Instant, SocketHandle, UdpRecvError,
};
use std::time::Duration;

fn t(ms: u64) -> Instant {
    Instant::ZERO + Duration::from_millis(ms)
}

/// Every event engine `e` has now.
fn drain(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

/// Steps the simulation for `ms` of virtual time, collecting the events of
/// each engine after every step (as a runtime drains them after each round).
fn run(sim: &mut Sim, ms: u64, got: &mut [Vec<Event>; 2]) {
    let limit = t(sim.now.as_millis() + ms);
    loop {
        let more = sim.step(limit);
        for (i, g) in got.iter_mut().enumerate() {
            g.extend(drain(&mut sim.engines[i]));
        }
        if !more {
            return;
        }
    }
}

/// A connection from engine 0 to a listener on engine 1, accepted; the events
/// of the handshake are checked and discarded.
fn connected(sim: &mut Sim) -> (SocketHandle, SocketHandle) {
    let l = sim.engines[1].tcp_listen(5001).unwrap();
    let now = sim.now;
    let c = sim.engines[0]
        .tcp_connect(now, common::server_addr(false))
        .unwrap();
    let mut got = [vec![], vec![]];
    run(sim, 50, &mut got);
    assert_eq!(got[0], [Event::Connected(c), Event::Writable(c)]);
    assert_eq!(got[1], [Event::Acceptable(l)], "one event for the queue");
    let s = sim.engines[1].tcp_accept(l).unwrap();
    assert_eq!(sim.engines[1].tcp_accept(l), Err(AcceptError::WouldBlock));
    assert_eq!(drain(&mut sim.engines[1]), [Event::Writable(s)]);
    (c, s)
}

#[test]
fn handshake_reports_connected_writable_and_acceptable_once() {
    let mut sim = Sim::two_hosts(true, 1, LinkConfig::default());
    let (c, _s) = connected(&mut sim);
    // Idle: delayed ACKs, timers and rounds reach nobody's readiness.
    let mut got = [vec![], vec![]];
    run(&mut sim, 5_000, &mut got);
    assert_eq!(got, [vec![], vec![]]);
    assert!(!sim.engines[0].has_events());
    // An unchanged readiness is not reported however often it is asked.
    assert_eq!(sim.engines[0].poll_event(), None);
    let _ = c;
}

#[test]
fn readable_once_until_the_reader_drains() {
    let mut sim = Sim::two_hosts(false, 2, LinkConfig::default());
    let (c, s) = connected(&mut sim);
    let mut got = [vec![], vec![]];
    // Many segments in several rounds before the reader looks: one event.
    for _ in 0..4 {
        sim.engines[0].tcp_send(c, &[7u8; 10_000]).unwrap();
        run(&mut sim, 5, &mut got);
    }
    assert_eq!(got[1], [Event::Readable(s)], "one event for 40 KB");
    // A partial read leaves data: more data is not a new event.
    let mut buf = [0u8; 1000];
    assert_eq!(sim.engines[1].tcp_recv(s, &mut buf), Ok(1000));
    got[1].clear();
    sim.engines[0].tcp_send(c, &[8u8; 5_000]).unwrap();
    let until = 20;
    run(&mut sim, until, &mut got);
    assert_eq!(got[1], [], "still readable: nothing changed");
    // Drained: the next bytes are reported again, once.
    while sim.engines[1].tcp_recv(s, &mut buf).is_ok() {}
    sim.engines[0].tcp_send(c, b"more").unwrap();
    let until = 20;
    run(&mut sim, until, &mut got);
    assert_eq!(got[1], [Event::Readable(s)]);
    // The sender saw nothing: its buffer never filled.
    assert_eq!(got[0], []);
}

#[test]
fn writable_after_the_send_buffer_filled() {
    let mut sim = Sim::two_hosts(true, 3, LinkConfig::default());
    let (c, s) = connected(&mut sim);
    let chunk = vec![1u8; 64 * 1024];
    while sim.engines[0].tcp_send(c, &chunk).is_ok() {}
    let mut got = [vec![], vec![]];
    // The reader keeps reading: the sender's buffer drains as ACKs come.
    let mut buf = vec![0u8; 1 << 20];
    let limit = sim.now.as_millis() + 2_000;
    let mut done = |sim: &mut Sim, got: &mut [Vec<Event>; 2]| {
        for (i, g) in got.iter_mut().enumerate() {
            g.extend(drain(&mut sim.engines[i]));
        }
        while sim.engines[1].tcp_recv(s, &mut buf).is_ok() {}
        got[0].contains(&Event::Writable(c))
    };
    let reached = sim.run_until(t(limit), |sim| done(sim, &mut got));
    assert!(reached, "no Writable after the buffer drained: {got:?}");
    assert_eq!(
        got[0].iter().filter(|e| **e == Event::Writable(c)).count(),
        1,
        "{:?}",
        got[0]
    );
    // Filled again, drained again: reported again.
    while sim.engines[0].tcp_send(c, &chunk).is_ok() {}
    got[0].clear();
    let mut buf = vec![0u8; 1 << 20];
    let reached = sim.run_until(t(limit + 2_000), |sim| {
        got[0].extend(drain(&mut sim.engines[0]));
        while sim.engines[1].tcp_recv(s, &mut buf).is_ok() {}
        got[0].contains(&Event::Writable(c))
    });
    assert!(reached);
}

#[test]
fn end_of_stream_then_closed() {
    let mut sim = Sim::two_hosts(true, 4, LinkConfig::default());
    let (c, s) = connected(&mut sim);
    sim.engines[0].tcp_shutdown(c).unwrap();
    let mut got = [vec![], vec![]];
    run(&mut sim, 50, &mut got);
    assert_eq!(got[1], [Event::Readable(s)], "the FIN is readable");
    assert_eq!(got[0], []);
    let mut buf = [0u8; 16];
    assert_eq!(sim.engines[1].tcp_recv(s, &mut buf), Ok(0));
    sim.engines[1].tcp_shutdown(s).unwrap();
    got = [vec![], vec![]];
    run(&mut sim, 50, &mut got);
    // The server (LAST-ACK -> CLOSED) ends in order; the client, in
    // TIME-WAIT, has its end of stream.
    assert_eq!(got[1], [Event::Closed(s)]);
    assert_eq!(got[0], [Event::Readable(c)]);
    // TIME-WAIT ends: the client's connection is closed in order.
    got = [vec![], vec![]];
    run(&mut sim, 240_000, &mut got);
    assert_eq!(got[0], [Event::Closed(c)]);
    assert_eq!(got[1], []);
}

#[test]
fn reset_is_one_failure() {
    let mut sim = Sim::two_hosts(true, 5, LinkConfig::default());
    let (c, s) = connected(&mut sim);
    sim.engines[1].tcp_abort(s).unwrap();
    let mut got = [vec![], vec![]];
    run(&mut sim, 50, &mut got);
    assert_eq!(
        got[0],
        [Event::Readable(c), Event::Failed(c, ConnectionError::Reset)]
    );
    // The aborting side gave its handle up: nothing for it.
    assert_eq!(got[1], []);
    run(&mut sim, 5_000, &mut got);
    assert_eq!(got[0].len(), 2, "reported once: {:?}", got[0]);
}

#[test]
fn refused_connect_fails() {
    let mut sim = Sim::two_hosts(true, 6, LinkConfig::default());
    let now = sim.now;
    let c = sim.engines[0]
        .tcp_connect(now, common::server_addr(false))
        .unwrap();
    let mut got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(
        got[0],
        [
            Event::Readable(c),
            Event::Failed(c, ConnectionError::Refused)
        ]
    );
}

#[test]
fn only_the_socket_that_changed_is_reported() {
    let mut sim = Sim::two_hosts(true, 7, LinkConfig::default());
    let l = sim.engines[1].tcp_listen(5001).unwrap();
    let now = sim.now;
    let clients: Vec<_> = (0..50)
        .map(|_| {
            sim.engines[0]
                .tcp_connect(now, common::server_addr(false))
                .unwrap()
        })
        .collect();
    let mut got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(got[0].len(), 100, "Connected and Writable each");
    assert_eq!(got[1], [Event::Acceptable(l)]);
    let servers: Vec<_> = std::iter::from_fn(|| sim.engines[1].tcp_accept(l).ok()).collect();
    assert_eq!(servers.len(), 50);
    assert_eq!(drain(&mut sim.engines[1]).len(), 50);
    // One client of fifty talks.
    let (busy, quiet) = (clients[17], servers.clone());
    sim.engines[0].tcp_send(busy, &[5u8; 3000]).unwrap();
    got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(got[0], []);
    assert_eq!(got[1].len(), 1, "{:?}", got[1]);
    let Event::Readable(which) = got[1][0] else {
        panic!("{:?}", got[1]);
    };
    assert!(quiet.contains(&which));
    let mut buf = [0u8; 4000];
    assert_eq!(sim.engines[1].tcp_recv(which, &mut buf), Ok(3000));
}

#[test]
fn data_before_accept_is_reported_at_accept() {
    let mut sim = Sim::two_hosts(true, 8, LinkConfig::default());
    let l = sim.engines[1].tcp_listen(5001).unwrap();
    let now = sim.now;
    let c = sim.engines[0]
        .tcp_connect(now, common::server_addr(false))
        .unwrap();
    sim.engines[0].tcp_send(c, b"early").unwrap();
    let mut got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(got[1], [Event::Acceptable(l)]);
    let s = sim.engines[1].tcp_accept(l).unwrap();
    assert_eq!(
        drain(&mut sim.engines[1]),
        [Event::Readable(s), Event::Writable(s)]
    );
    // A second connection after the queue emptied is announced again.
    let now = sim.now;
    sim.engines[0]
        .tcp_connect(now, common::server_addr(false))
        .unwrap();
    got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(got[1], [Event::Acceptable(l)]);
}

#[test]
fn udp_readable_once_per_drain() {
    let mut sim = Sim::two_hosts(true, 9, LinkConfig::default());
    let a = sim.engines[0]
        .udp_bind("0.0.0.0:7000".parse().unwrap())
        .unwrap();
    let b = sim.engines[1]
        .udp_bind("0.0.0.0:7001".parse().unwrap())
        .unwrap();
    let to = "10.0.0.2:7001".parse().unwrap();
    for _ in 0..5 {
        sim.engines[0].udp_send_to(a, b"dgram", to).unwrap();
    }
    let mut got = [vec![], vec![]];
    run(&mut sim, 50, &mut got);
    // The sender's socket was writable before and after: no news.
    assert_eq!(got[0], []);
    assert_eq!(got[1], [Event::UdpReadable(b)]);
    let mut buf = [0u8; 64];
    for _ in 0..5 {
        sim.engines[1].udp_recv_from(b, &mut buf).unwrap();
    }
    assert_eq!(
        sim.engines[1].udp_recv_from(b, &mut buf),
        Err(UdpRecvError::WouldBlock)
    );
    sim.engines[0].udp_send_to(a, b"again", to).unwrap();
    got = [vec![], vec![]];
    run(&mut sim, 100, &mut got);
    assert_eq!(got[1], [Event::UdpReadable(b)]);
    assert_eq!(got[0], []);
}
