//! A listener's accept queue when connections end before the application takes
//! them: they leave the queue at once (the backlog counts only live ones),
//! `tcp_accept` never hands one out, and the queue's memory stays bounded
//! however many come and go.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{AcceptError, TcpState};
use linerate_wire::tcp::Flags;

const P: u32 = 9_000;

/// The peer opens a connection from `port` to the engine's port 80 and
/// completes the handshake; returns the engine's ISS.
fn open(r: &mut Raw, port: u16) -> u32 {
    r.input(&tcp_frame(port, 80, P, None, Flags::SYN, 65_535, &[], &[]));
    let s = r.segments();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].flags, s[0].ack), (Flags::SYN | Flags::ACK, P + 1));
    let iss = s[0].seq;
    r.input(&tcp_frame(
        port,
        80,
        P + 1,
        Some(iss + 1),
        Flags::empty(),
        65_535,
        &[],
        &[],
    ));
    iss
}

fn reset(r: &mut Raw, port: u16) {
    r.input(&tcp_frame(port, 80, P + 1, None, Flags::RST, 0, &[], &[]));
}

#[test]
fn connections_reset_before_accept_are_skipped_and_free_the_backlog() {
    let mut r = Raw::host(|c| c.tcp.backlog = 4);
    let l = r.e.tcp_listen(80).unwrap();
    // Three established, not taken; two of them reset by the peer.
    for port in [1001, 1002, 1003] {
        open(&mut r, port);
    }
    reset(&mut r, 1001);
    reset(&mut r, 1003);
    assert_eq!(r.e.memory_usage().connections, 1);
    // The backlog of 4 now holds one: three more are taken normally (no SYN
    // cookie, no drop).
    for port in [1004, 1005, 1006] {
        open(&mut r, port);
    }
    assert_eq!(r.e.counters().tcp_syncookies_sent, 0);
    assert_eq!(r.e.counters().tcp_listen_drops, 0);
    // Accepted in order, the reset ones never.
    let mut got = Vec::new();
    while let Ok(h) = r.e.tcp_accept(l) {
        assert_eq!(r.e.tcp_state(h), Ok(TcpState::Established));
        got.push(r.e.tcp_addrs(h).unwrap().1.port());
    }
    assert_eq!(got, vec![1002, 1004, 1005, 1006]);
    assert_eq!(r.e.tcp_accept(l), Err(AcceptError::WouldBlock));
}

#[test]
fn churn_before_accept_keeps_the_queue_bounded() {
    // Ten thousand connections established and reset while the application
    // takes none: the backlog never fills, and what the engine holds for the
    // listener does not grow with them.
    let mut r = Raw::host(|c| c.tcp.backlog = 8);
    let l = r.e.tcp_listen(80).unwrap();
    open(&mut r, 2000);
    let before = r.e.memory_usage().tables;
    for i in 0..10_000u32 {
        let port = 3000 + (i % 20_000) as u16;
        open(&mut r, port);
        reset(&mut r, port);
    }
    assert_eq!(r.e.counters().tcp_syncookies_sent, 0);
    assert_eq!(r.e.counters().tcp_listen_drops, 0);
    assert_eq!(r.e.memory_usage().connections, 1);
    let after = r.e.memory_usage().tables;
    assert!(after <= before + 4096, "{before} -> {after}");
    let h = r.e.tcp_accept(l).unwrap();
    assert_eq!(r.e.tcp_addrs(h).unwrap().1.port(), 2000);
    assert_eq!(r.e.tcp_accept(l), Err(AcceptError::WouldBlock));
}
