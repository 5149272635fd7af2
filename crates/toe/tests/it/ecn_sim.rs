//! ECN end to end between two linerate engines on the simulated link, with a
//! marking router in the test's loop: every `n`th ECT(0) datagram from the
//! sender is marked CE (what an AQM does instead of dropping). The receiver
//! echoes ECE, the sender reduces its window without retransmitting anything
//! and sends CWR; the stream arrives byte-exact, offloads on (super-frames,
//! marked whole) and off. Without marks nothing is reduced.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Counters, EcnMode, Instant, RecvError};
use std::net::SocketAddr;
use std::time::Duration;

/// Marks an IPv4 datagram in Ethernet frame `f` CE if it is ECT(0); returns
/// whether it was ECT(0). The header checksum is recomputed (RFC 1071).
fn mark_ce(f: &mut [u8]) -> bool {
    if f.len() < 34 || f[12..14] != [0x08, 0x00] || f[15] & 3 != 2 {
        return false;
    }
    f[15] |= 3;
    f[24] = 0;
    f[25] = 0;
    let hl = usize::from(f[14] & 0x0f) * 4;
    let mut sum: u32 = f[14..14 + hl]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    true
}

struct Outcome {
    sender: Counters,
    receiver: Counters,
    marked: u32,
    ecn: bool,
}

/// Host 1 (`EcnMode::On`) sends `data` to host 2 (default, passive); every
/// `every`th ECT(0) datagram host 1 sends is marked CE (`0`: none).
fn run(offloads: bool, every: u32, data: &[u8]) -> Outcome {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.offloads = offloads;
            if i == 1 {
                c.tcp.ecn = EcnMode::On;
            }
            linerate_toe::Engine::new(c, u64::from(i))
        })
        .collect();
    let link = LinkConfig {
        latency: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let mut sim = Sim::new(engines, link);
    let server = SocketAddr::from(([10, 0, 0, 2], 80));
    let l = sim.engines[1].tcp_listen(80).unwrap();
    let c = sim.engines[0].tcp_connect(sim.now, server).unwrap();
    let (mut s, mut sent, mut shut, mut ect, mut marked) = (None, 0, false, 0u32, 0u32);
    let mut received = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 1 << 16];
    let mut ecn = false;
    let deadline = Instant::ZERO + Duration::from_secs(60);
    let mut eof = false;
    while !eof && sim.now < deadline {
        let now = sim.now;
        for port in 0..2 {
            while let Some((f, m)) = sim.link.recv(now, port) {
                sim.engines[port].handle_frame(now, &f, &m);
            }
            let e = &mut sim.engines[port];
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            let link = &mut sim.link;
            e.poll_transmit(now, &mut |f, m| {
                let mut f = f.to_vec();
                if port == 0 && every > 0 && f.len() > 34 && f[15] & 3 == 2 {
                    ect += 1;
                    if ect.is_multiple_of(every) && mark_ce(&mut f) {
                        marked += 1;
                    }
                }
                link.send(now, port, &f, m);
            });
        }
        if s.is_none() {
            s = sim.engines[1].tcp_accept(l).ok();
            if s.is_some() {
                ecn = sim.engines[0].tcp_info(c).unwrap().ecn;
            }
        }
        common::send_then_shut(&mut sim.engines[0], c, data, &mut sent, &mut shut).unwrap();
        if let Some(s) = s {
            loop {
                match sim.engines[1].tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
        let engines = sim.engines.iter().filter_map(|e| e.poll_timeout()).min();
        let next = [engines, sim.link.next_delivery()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(now + Duration::from_millis(1));
        sim.now = next.max(now);
        if sim.now == now {
            // Something due now is still pending (an engine's timer at
            // `now`); the next round takes it.
            sim.now = now + Duration::from_micros(1);
        }
    }
    assert!(
        eof,
        "the transfer did not finish: {} of {}",
        received.len(),
        data.len()
    );
    assert!(received == data, "byte-exact");
    Outcome {
        sender: sim.engines[0].counters().clone(),
        receiver: sim.engines[1].counters().clone(),
        marked,
        ecn,
    }
}

#[test]
fn ce_marks_slow_the_sender_without_retransmissions() {
    let data = common::pattern(2 << 20, 11);
    for offloads in [false, true] {
        // Super-frames are few (64 KiB each): mark more of them.
        let o = run(offloads, if offloads { 4 } else { 30 }, &data);
        assert!(o.ecn, "negotiated");
        assert!(o.marked > 0, "offloads {offloads}: nothing marked");
        assert!(o.receiver.tcp_ecn_ce_in > 0, "offloads {offloads}");
        let r = o.sender.tcp_ecn_reductions;
        eprintln!(
            "offloads {offloads}: {} marked, {} CE received, {r} reductions",
            o.marked, o.receiver.tcp_ecn_ce_in
        );
        assert!(r > 0, "offloads {offloads}: the sender reduced");
        assert!(
            r <= u64::from(o.marked),
            "offloads {offloads}: {r} reductions for {} marks",
            o.marked
        );
        if offloads {
            // A marked super-frame is a burst of CE segments: one reduction.
            assert!(r < o.receiver.tcp_ecn_ce_in, "once per window");
        }
        assert_eq!(
            o.sender.tcp_retrans_segs, 0,
            "offloads {offloads}: no loss, nothing resent"
        );
        let clean = run(offloads, 0, &data);
        assert_eq!(clean.sender.tcp_ecn_reductions, 0);
        assert_eq!(clean.receiver.tcp_ecn_ce_in, 0);
    }
}
