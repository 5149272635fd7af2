//! SYN cookies (RFC 4987 section 3.6) under a SYN flood over the simulated link:
//! spoofed SYNs fill the listener's SYN queue, cookies answer the rest, and
//! legitimate connections still complete and carry data. Forged ACKs do not
//! open connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{fnv, pattern};
use linerate_offload::OffloadMeta;
use linerate_toe::sim::{Link, LinkConfig, Sim};
use linerate_toe::{AcceptError, Engine, RecvError, SendError, SocketHandle};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{TcpHeader, TcpOptionElement as O};
use std::net::SocketAddr;
use std::time::Duration;

const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
/// The attacker's port on the hub (engines are on ports 0 and 1).
const ATTACKER: usize = 2;

/// Hosts 1 (client, port 0) and 2 (server, port 1) and a port for the attacker.
fn flood_sim(client_timestamps: bool) -> Sim {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.tcp.timestamps = i == 2 || client_timestamps;
            Engine::new(c, 99 + u64::from(i))
        })
        .collect();
    let mut sim = Sim::new(engines, LinkConfig::default());
    sim.link = Link::new(3, LinkConfig::default());
    sim
}

/// A spoofed SYN (or, with `ack`, a forged ACK) from a random address and port,
/// with the options Linux sends.
fn spoofed(x: &mut u64, ack: Option<u32>) -> Vec<u8> {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    let r = *x;
    let src = [198, 18, (r >> 8) as u8, r as u8];
    let mut h = TcpHeader::new((r >> 16) as u16 | 1024, 80, (r >> 32) as u32, 64_240);
    match ack {
        None => {
            h.syn = true;
            h.set_options(&[
                O::MaximumSegmentSize(1460),
                O::SelectiveAcknowledgementPermitted,
                O::Timestamp((r >> 24) as u32, 0),
                O::Noop,
                O::WindowScale(7),
            ])
            .unwrap();
        }
        Some(a) => {
            h.ack = true;
            h.acknowledgment_number = a;
        }
    }
    let mac = [0x02, 0xee, src[0], src[1], src[2], src[3]];
    FrameBuilder::new(Ip::v4(src, [10, 0, 0, 2]), L4::Tcp(h))
        .macs(mac, SERVER_MAC)
        .build(&[])
}

/// Runs `conns` client connections of `len` bytes each to the server while
/// `flood` spoofed SYNs arrive, `per_ms` per millisecond; returns the server's
/// accepted handles once every transfer has been checked.
fn run(sim: &mut Sim, flood: usize, per_ms: usize, conns: usize, len: usize) -> Vec<SocketHandle> {
    let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let data = pattern(len, 5);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut injected = 0;
    let mut clients: Vec<(SocketHandle, usize, bool)> = Vec::new();
    let mut accepted: Vec<(SocketHandle, Vec<u8>, bool)> = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let end = sim.now + Duration::from_secs(60);
    let mut t = sim.now;
    while injected < flood || accepted.len() < conns || accepted.iter().any(|a| !a.2) {
        assert!(sim.now < end, "stuck: {} accepted", accepted.len());
        t += Duration::from_millis(1);
        // The flood, and once it is under way, the legitimate clients.
        let now = sim.now;
        for _ in 0..per_ms {
            if injected < flood {
                let f = spoofed(&mut x, None);
                sim.link.send(now, ATTACKER, &f, &OffloadMeta::plain());
                injected += 1;
            }
        }
        if injected >= flood.min(per_ms * 5) && clients.len() < conns {
            let c = sim.engines[0].tcp_connect(now, server).unwrap();
            clients.push((c, 0, false));
        }
        while sim.step(t) {}
        for (c, sent, shut) in &mut clients {
            while *sent < len {
                match sim.engines[0].tcp_send(*c, &data[*sent..]) {
                    Ok(n) => *sent += n,
                    Err(SendError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            if *sent == len && !*shut {
                sim.engines[0].tcp_shutdown(*c).unwrap();
                *shut = true;
            }
        }
        while let Ok(s) = sim.engines[1].tcp_accept(l) {
            accepted.push((s, Vec::new(), false));
        }
        for (s, got, eof) in &mut accepted {
            while !*eof {
                match sim.engines[1].tcp_recv(*s, &mut buf) {
                    Ok(0) => *eof = true,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
    }
    assert_eq!(injected, flood);
    assert_eq!(accepted.len(), conns);
    for (_, got, _) in &accepted {
        assert_eq!(got.len(), len);
        assert_eq!(fnv(got), fnv(&data));
    }
    accepted.into_iter().map(|a| a.0).collect()
}

#[test]
fn legitimate_connections_complete_through_a_100k_syn_flood() {
    let mut sim = flood_sim(true);
    let backlog = sim.engines[1].config().tcp.backlog as u64;
    let accepted = run(&mut sim, 100_000, 1_000, 20, 100_000);
    let c = sim.engines[1].counters().clone();
    eprintln!(
        "cookies sent {}, validated {}, failed {}, listen drops {}",
        c.tcp_syncookies_sent, c.tcp_syncookies_recv, c.tcp_syncookies_failed, c.tcp_listen_drops
    );
    // The spoofed SYNs filled the SYN queue; every later SYN got a cookie, the
    // legitimate clients' among them, and their ACKs validated.
    assert!(c.tcp_syncookies_sent >= 100_000 - backlog, "{c:?}");
    assert_eq!(c.tcp_syncookies_recv, 20);
    assert_eq!(c.tcp_syncookies_failed, 0);
    assert_eq!(c.tcp_listen_drops, 0);
    // With timestamps the SYN's options survived the cookie: window scaling,
    // SACK, timestamps and the full MSS.
    let info = sim.engines[1].tcp_info(accepted[0]).unwrap();
    assert!(info.sack && info.timestamps, "{info:?}");
    assert!(info.snd_wscale > 0 && info.rcv_wscale > 0, "{info:?}");
    assert_eq!(info.snd_mss, 1460 - 12);

    // Forged ACKs (random cookies) open nothing and are answered with RST.
    let mut x = 42u64;
    let rsts = c.tcp_out_rsts;
    for i in 0..1_000u32 {
        let f = spoofed(&mut x, Some(i.wrapping_mul(2_654_435_761)));
        let now = sim.now;
        sim.link.send(now, ATTACKER, &f, &OffloadMeta::plain());
    }
    let t = sim.now + Duration::from_millis(10);
    while sim.step(t) {}
    let c = sim.engines[1].counters();
    assert_eq!(c.tcp_syncookies_failed, 1_000);
    assert_eq!(c.tcp_syncookies_recv, 20);
    assert_eq!(c.tcp_out_rsts - rsts, 1_000);
    let l2 = sim.engines[1].tcp_listen(81).unwrap();
    assert_eq!(sim.engines[1].tcp_accept(l2), Err(AcceptError::WouldBlock));
}

#[test]
fn without_timestamps_a_cookie_connection_loses_window_scaling_and_sack() {
    let mut sim = flood_sim(false);
    let accepted = run(&mut sim, 1_000, 500, 1, 300_000);
    let c = sim.engines[1].counters();
    assert_eq!(c.tcp_syncookies_recv, 1);
    let info = sim.engines[1].tcp_info(accepted[0]).unwrap();
    assert!(!info.sack && !info.timestamps, "{info:?}");
    assert_eq!((info.snd_wscale, info.rcv_wscale), (0, 0));
    assert_eq!(info.snd_mss, 1460);
}
