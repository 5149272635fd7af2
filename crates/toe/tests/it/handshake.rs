//! The three-way handshake: options negotiated or refused (RFC 9293 section 3.7.1,
//! RFC 7323, RFC 2018), simultaneous open (RFC 9293 section 3.5), refusal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{
    ConnectError, ConnectionError, EPHEMERAL_PORTS, ListenError, RecvError, TcpState,
};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

fn connect_pair(sim: &mut Sim) -> (linerate_toe::SocketHandle, linerate_toe::SocketHandle) {
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let mut s = None;
    let end = sim.now + Duration::from_secs(5);
    assert!(sim.run_until(end, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        s.is_some() && sim.engines[0].tcp_state(c) == Ok(TcpState::Established)
    }));
    (c, s.unwrap())
}

#[test]
fn every_option_negotiated_between_engines() {
    let mut sim = Sim::two_hosts(true, 1, LinkConfig::default());
    let (c, s) = connect_pair(&mut sim);
    for (e, h) in [(0, c), (1, s)] {
        let i = sim.engines[e].tcp_info(h).unwrap();
        assert!(i.sack && i.timestamps, "{i:?}");
        // 512 KiB buffers need a shift of 4 (RFC 7323 section 2.3).
        assert_eq!((i.snd_wscale, i.rcv_wscale), (4, 4));
        // MTU 1500: MSS 1460, less 12 bytes of timestamps per segment.
        assert_eq!(i.snd_mss, 1448);
        assert!(i.srtt.is_some());
    }
}

#[test]
fn options_refused_by_the_peer() {
    let mut sim = Sim::two_hosts(true, 2, LinkConfig::default());
    let t = &mut sim.engines[1];
    let mut cfg = t.config().clone();
    cfg.tcp.sack = false;
    cfg.tcp.timestamps = false;
    cfg.tcp.window_scaling = false;
    sim.engines[1] = linerate_toe::Engine::new(cfg, 9);
    let (c, _) = connect_pair(&mut sim);
    let i = sim.engines[0].tcp_info(c).unwrap();
    assert!(!i.sack && !i.timestamps, "{i:?}");
    assert_eq!((i.snd_wscale, i.rcv_wscale), (0, 0));
    assert_eq!(i.snd_mss, 1460);
    // Without scaling the window field caps at 65535.
    assert!(i.snd_wnd <= 65_535);
}

#[test]
fn syn_ack_echoes_only_what_the_syn_offered() {
    let mut r = Raw::host(|_| {});
    r.e.tcp_listen(80).unwrap();
    // A bare SYN: no options at all.
    r.input(&tcp_frame(1000, 80, 5000, None, Flags::SYN, 1000, &[], &[]));
    let sa = r.segments();
    assert_eq!(sa.len(), 1);
    assert!(sa[0].flags.contains(Flags::SYN | Flags::ACK));
    assert_eq!(sa[0].ack, 5001);
    assert_eq!(sa[0].opts.mss, Some(1460));
    assert_eq!(sa[0].opts.window_scale, None);
    assert!(!sa[0].opts.sack_permitted);
    assert_eq!(sa[0].opts.timestamps, None);
    // A SYN with everything: all echoed, the timestamp echoing the peer's.
    let opts = [
        O::MaximumSegmentSize(1400),
        O::SelectiveAcknowledgementPermitted,
        O::Timestamp(777, 0),
        O::Noop,
        O::WindowScale(9),
    ];
    r.input(&tcp_frame(
        1001,
        80,
        9000,
        None,
        Flags::SYN,
        1000,
        &opts,
        &[],
    ));
    let sa = r.segments();
    assert_eq!(sa.len(), 1);
    assert_eq!(sa[0].opts.window_scale, Some(4));
    assert!(sa[0].opts.sack_permitted);
    assert_eq!(sa[0].opts.timestamps.map(|t| t.1), Some(777));
    // Complete it and send data: the MSS the peer asked for (less timestamps) holds.
    let iss = sa[0].seq;
    let ts = sa[0].opts.timestamps.unwrap().0;
    r.input(&tcp_frame(
        1001,
        80,
        9001,
        Some(iss.wrapping_add(1)),
        Flags::empty(),
        1000,
        &[O::Timestamp(778, ts)],
        &[],
    ));
    r.frames();
    let l = r.e.tcp_listen(81).unwrap();
    assert_eq!(r.e.tcp_listen(81), Err(ListenError::AddrInUse));
    let _ = l;
}

/// Each call's errors, from the caller's arguments and the engine's tables.
#[test]
fn listen_and_connect_errors() {
    let mut r = Raw::host(|c| c.ipv6 = None);
    assert_eq!(r.e.tcp_listen(0), Err(ListenError::InvalidPort));
    assert_eq!(
        r.e.tcp_connect_from(r.now, 0, peer_addr(80)),
        Err(ConnectError::InvalidPort)
    );
    assert_eq!(
        r.e.tcp_connect(r.now, "[fd00::9]:80".parse().unwrap()),
        Err(ConnectError::NoAddress)
    );
    // Every source port of the range toward one remote address and port is
    // taken: the next connect there fails with NoPorts (a chosen port, with
    // AddrInUse), while another remote port still has a whole range.
    let (first, last) = EPHEMERAL_PORTS;
    for port in first..=last {
        r.e.tcp_connect_from(r.now, port, peer_addr(80)).unwrap();
    }
    assert_eq!(
        r.e.tcp_connect(r.now, peer_addr(80)),
        Err(ConnectError::NoPorts)
    );
    assert_eq!(
        r.e.tcp_connect_from(r.now, first, peer_addr(80)),
        Err(ConnectError::AddrInUse)
    );
    assert!(r.e.tcp_connect(r.now, peer_addr(81)).is_ok());
    assert_eq!(
        r.e.memory_usage().connections,
        usize::from(last - first) + 2
    );
}

#[test]
fn simultaneous_open() {
    let mut sim = Sim::two_hosts(true, 3, LinkConfig::default());
    let now = sim.now;
    let a = sim.engines[0]
        .tcp_connect_from(now, 6000, "10.0.0.2:7000".parse().unwrap())
        .unwrap();
    let b = sim.engines[1]
        .tcp_connect_from(now, 7000, "10.0.0.1:6000".parse().unwrap())
        .unwrap();
    let end = sim.now + Duration::from_secs(10);
    assert!(sim.run_until(end, |sim| {
        sim.engines[0].tcp_state(a) == Ok(TcpState::Established)
            && sim.engines[1].tcp_state(b) == Ok(TcpState::Established)
    }));
    // Data flows both ways.
    sim.engines[0].tcp_send(a, b"ping").unwrap();
    sim.engines[1].tcp_send(b, b"pong").unwrap();
    let mut got = (Vec::new(), Vec::new());
    let end = sim.now + Duration::from_secs(1);
    assert!(sim.run_until(end, |sim| {
        let mut buf = [0u8; 16];
        if let Ok(n) = sim.engines[1].tcp_recv(b, &mut buf) {
            got.0.extend_from_slice(&buf[..n]);
        }
        if let Ok(n) = sim.engines[0].tcp_recv(a, &mut buf) {
            got.1.extend_from_slice(&buf[..n]);
        }
        got.0 == b"ping" && got.1 == b"pong"
    }));
}

#[test]
fn connect_to_closed_port_is_refused() {
    let mut sim = Sim::two_hosts(true, 4, LinkConfig::default());
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:9".parse().unwrap())
        .unwrap();
    let end = sim.now + Duration::from_secs(2);
    assert!(sim.run_until(end, |sim| {
        sim.engines[0].tcp_readiness(c).unwrap().error.is_some()
    }));
    assert_eq!(
        sim.engines[0].tcp_readiness(c).unwrap().error,
        Some(ConnectionError::Refused)
    );
    assert_eq!(
        sim.engines[0].tcp_recv(c, &mut [0; 4]),
        Err(RecvError::Failed(ConnectionError::Refused))
    );
    assert_eq!(sim.engines[1].counters().tcp_out_rsts, 1);
    assert_eq!(sim.engines[0].counters().tcp_attempt_fails, 1);
}

#[test]
fn ipv6_handshake_resolves_neighbours() {
    let mut sim = Sim::two_hosts(true, 5, LinkConfig::default());
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "[fd00::2]:80".parse().unwrap())
        .unwrap();
    let end = sim.now + Duration::from_secs(2);
    let mut s = None;
    assert!(sim.run_until(end, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        s.is_some() && sim.engines[0].tcp_state(c) == Ok(TcpState::Established)
    }));
    assert_eq!(sim.engines[1].counters().ndp_in_solicits, 1);
    // The solicited advertisement, and the peer's unsolicited one at start.
    let unsolicited = sim.engines[1].counters().ndp_unsolicited_adverts_out;
    assert_eq!(sim.engines[0].counters().ndp_in_adverts, 1 + unsolicited);
}
