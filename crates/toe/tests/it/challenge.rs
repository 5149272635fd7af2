//! RFC 5961 section 7: the engine sends at most `challenge_ack_limit` challenge
//! ACKs per second, however many in-window RSTs (or SYNs) arrive; the rest are
//! counted as suppressed, and an RST at exactly RCV.NXT still resets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{ConnectionError, SocketHandle, TcpState};
use linerate_wire::tcp::Flags;
use std::time::Duration;

fn established(r: &mut Raw) -> (SocketHandle, u16, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let port = r.answer_syn(c, &syn, &[]);
    (c, port, 7001)
}

#[test]
fn a_flood_of_in_window_rsts_gets_at_most_the_limit_of_challenge_acks_per_second() {
    const LIMIT: u64 = 100;
    let mut r = Raw::host(|c| c.tcp.challenge_ack_limit = LIMIT as u32);
    let (c, port, rcv_nxt) = established(&mut r);
    let start = r.now;
    // 2500 per second for 4 seconds, RSTs and SYNs inside the window but not at
    // RCV.NXT: each asks for a challenge ACK.
    let mut per_second = [0u64; 4];
    for i in 0..10_000u32 {
        r.now = start + Duration::from_micros(400 * u64::from(i));
        let flags = if i % 5 == 0 { Flags::SYN } else { Flags::RST };
        let seq = rcv_nxt.wrapping_add(1 + i % 50_000);
        r.input(&tcp_frame(80, port, seq, None, flags, 0, &[], &[]));
        let acks = r.segments();
        assert!(
            acks.iter()
                .all(|s| s.flags == Flags::ACK && s.ack == rcv_nxt)
        );
        let sec = ((r.now - start).as_secs()) as usize;
        per_second[sec] += acks.len() as u64;
    }
    assert_eq!(per_second, [LIMIT; 4], "exactly the limit, every second");
    let k = r.e.counters();
    assert_eq!(k.tcp_challenge_acks, 4 * LIMIT);
    assert_eq!(k.tcp_challenge_acks_suppressed, 10_000 - 4 * LIMIT);
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    // The limit only holds back challenges: an exact RST still resets.
    r.input(&tcp_frame(80, port, rcv_nxt, None, Flags::RST, 0, &[], &[]));
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::Reset)
    );
}

#[test]
fn the_default_limit_is_1000_per_second() {
    let mut r = Raw::host(|_| {});
    assert_eq!(r.e.config().tcp.challenge_ack_limit, 1000);
    let (_, port, rcv_nxt) = established(&mut r);
    let mut acks = 0;
    for i in 0..3000u32 {
        let seq = rcv_nxt.wrapping_add(10 + i);
        r.input(&tcp_frame(80, port, seq, None, Flags::RST, 0, &[], &[]));
        acks += r.segments().len();
    }
    assert_eq!(acks, 1000);
}
