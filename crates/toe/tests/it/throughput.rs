//! Wall-clock throughput of engine-to-engine bulk transfer through the simulation
//! (the link's copies included). Ignored by default; run in release:
//! `cargo test -p linerate-toe --release --test throughput -- --ignored --nocapture`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::pattern;
use linerate_toe::sim::{LinkConfig, Sim};
use std::time::Duration;

/// Streams `total` bytes (a 1 MiB pattern, cyclically) from engine 0 to engine 1;
/// the receiver counts and discards. Returns the wall time of the transfer alone.
fn stream(sim: &mut Sim, total: usize) -> Duration {
    let l = sim.engines[1].tcp_listen(5001).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:5001".parse().unwrap())
        .unwrap();
    let chunk = pattern(1 << 20, 1);
    let (mut sent, mut got, mut s) = (0usize, 0usize, None);
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = std::time::Instant::now();
    let end = sim.now + Duration::from_secs(3600);
    let ok = sim.run_until(end, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        while sent < total {
            let off = sent % chunk.len();
            let n = (total - sent).min(chunk.len() - off);
            match sim.engines[0].tcp_send(c, &chunk[off..off + n]) {
                Ok(k) => sent += k,
                Err(_) => break,
            }
        }
        if let Some(s) = s {
            while let Ok(n) = sim.engines[1].tcp_recv(s, &mut buf) {
                if n == 0 {
                    break;
                }
                got += n;
            }
        }
        got == total
    });
    assert!(ok);
    t0.elapsed()
}

fn measure(name: &str, offloads: bool, gro: bool, mtu: u16) {
    let link = LinkConfig {
        gro,
        mtu,
        latency: Duration::from_micros(10),
        ..LinkConfig::default()
    };
    let mut sim = Sim::two_hosts(offloads, 1, link);
    let len = 1 << 30;
    let wall = stream(&mut sim, len);
    let gbps = (len as f64 * 8.0) / wall.as_secs_f64() / 1e9;
    let c = sim.engines[0].counters();
    println!(
        "{name:<40} {gbps:6.2} Gbit/s wall ({:.3} s), {} datagrams out for {} segments",
        wall.as_secs_f64(),
        c.ip_out_requests,
        c.tcp_out_segs
    );
}

#[test]
#[ignore = "measurement; run in release"]
fn engine_to_engine_throughput() {
    measure("offloads on, GRO link (super-frames)", true, true, 1500);
    measure("offloads on, link segments (MTU 1500)", true, false, 1500);
    measure("offloads off (MTU 1500)", false, false, 1500);
}
