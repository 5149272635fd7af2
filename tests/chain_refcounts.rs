//! Frag-list GRO end to end, under faults (issue 15's reference counts): two
//! engines over the software-offload shim on a faulty memory wire (loss,
//! duplication, reordering, bit flips, each way), the shims handing up chains
//! (`Nic::set_rx_sg`): GSO segments reference their super-frame's buffer, GRO
//! chains them, the engine keeps the chains as receive storage, and frames are
//! dropped mid-chain by the wire, by GRO (bad checksums) and by TCP (out of
//! window, duplicates). Both directions at once, so data frames (chained) and
//! pure ACKs (linear) meet in one receive path. Every byte read must be the
//! byte sent (a buffer freed or reused while referenced would show here), and
//! the engines send their super-segments as headers plus references to their
//! send buffers (`TxSink::takes_frags`), so received chains point into the
//! sender's send buffer, across its chunk boundaries;
//! once everything is dropped, every buffer of every pool must be back (none
//! leaked).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, Faults, PairConfig};
use linerate_nic::{Batch, Counter, MemNic, Nic, NicCaps, PoolStats, Shim, ShimConfig};
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, PoolSink, SocketHandle};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

const LEN: usize = 768 * 1024;

fn byte(dir: usize, off: usize) -> u8 {
    (off.wrapping_mul(7 + dir) ^ (off >> 9)) as u8
}

struct Host {
    e: Engine,
    nic: Shim<MemNic>,
    batch: Batch,
    sock: Option<SocketHandle>,
    sent: usize,
    got: usize,
}

impl Host {
    fn pump(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        self.e.poll_transmit_into(
            now,
            &mut PoolSink::new(self.nic.pool(), &mut self.batch).with_frags(self.nic.tx_sg()),
        );
        if !self.batch.is_empty() {
            moved += self.nic.transmit(0, &mut self.batch).unwrap();
            self.batch.clear();
        }
        loop {
            let n = self.nic.receive(0, &mut self.batch, 64).unwrap();
            if n == 0 {
                break;
            }
            moved += n;
            self.e.handle_frames(now, &mut self.batch);
        }
        moved
    }

    fn app(&mut self, dir: usize) {
        let Some(s) = self.sock else { return };
        while self.sent < LEN {
            let chunk: Vec<u8> = (self.sent..(self.sent + 10_000).min(LEN))
                .map(|o| byte(dir, o))
                .collect();
            match self.e.tcp_send(s, &chunk) {
                Ok(n) if n > 0 => self.sent += n,
                _ => break,
            }
        }
        let mut buf = vec![0u8; 7_000];
        while let Ok(n) = self.e.tcp_recv(s, &mut buf) {
            if n == 0 {
                break;
            }
            for (i, b) in buf[..n].iter().enumerate() {
                assert_eq!(*b, byte(1 - dir, self.got + i), "byte {}", self.got + i);
            }
            self.got += n;
        }
    }
}

fn faults(seed: u64) -> Faults {
    Faults {
        loss: 0.01 + (seed % 3) as f64 * 0.01,
        duplicate: 0.02,
        corrupt: 0.005,
        reorder: 0.05,
        reorder_depth: 3,
        ..Faults::NONE
    }
}

fn all_back(what: &str, s: PoolStats) {
    assert_eq!(
        s.allocated, s.free as u64,
        "{what}: buffers not back: {s:?}"
    );
}

fn run(seed: u64, v6: bool) {
    let mut cfg = PairConfig::new(NicCaps::plain(), NicCaps::plain());
    cfg.a_to_b = faults(seed);
    cfg.b_to_a = faults(seed + 1);
    cfg.seed = seed;
    let (a, b) = memory::pair(cfg);
    let mut hosts = [a, b].map(|port| Host {
        e: Engine::new(Sim::host_config(0), 0),
        nic: Shim::new(port, ShimConfig::all()).unwrap(),
        batch: Batch::new(),
        sock: None,
        sent: 0,
        got: 0,
    });
    for (i, h) in hosts.iter_mut().enumerate() {
        let mut c = Sim::host_config(i as u8 + 1);
        c.offloads = true;
        h.e = Engine::new(c, seed + i as u64);
        assert!(h.nic.set_rx_sg(true), "the shim hands up chains");
    }
    let mut now = Instant::ZERO;
    let listener = hosts[1].e.tcp_listen(80).unwrap();
    let remote = if v6 {
        SocketAddr::from((Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2), 80))
    } else {
        SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 80))
    };
    hosts[0].sock = Some(hosts[0].e.tcp_connect(now, remote).unwrap());
    let mut idle_rounds = 0;
    while hosts.iter().any(|h| h.got < LEN) {
        let mut moved = 0;
        for (dir, h) in hosts.iter_mut().enumerate() {
            moved += h.pump(now);
            h.app(dir);
        }
        if hosts[1].sock.is_none() {
            hosts[1].sock = hosts[1].e.tcp_accept(listener).ok();
        }
        if moved == 0 {
            let next = hosts.iter().filter_map(|h| h.e.poll_timeout()).min();
            now = next.map_or(now + Duration::from_millis(1), |t| t.max(now));
            for h in &mut hosts {
                h.e.handle_timeout(now);
            }
            idle_rounds += 1;
            assert!(
                idle_rounds < 200_000,
                "stalled: {:?}",
                hosts.each_ref().map(|h| h.got)
            );
        }
    }
    let chained: u64 = hosts.iter().map(|h| h.e.counters().tcp_rx_adopted).sum();
    let by_ref: u64 = hosts.iter().map(|h| h.e.counters().tcp_out_by_ref).sum();
    let lost: u64 = hosts
        .iter()
        .map(|h| h.nic.backend().counters().total(Counter::WireLost))
        .sum();
    println!(
        "seed {seed} (IPv6 {v6}): frames taken as chains {chained}, super-segments sent by \
         reference {by_ref}, frames the wire dropped {lost}"
    );
    assert!(chained > 0, "no frame was taken as a chain");
    assert!(by_ref > 0, "no super-segment referenced its send buffer");
    // Everything dropped: engines first (their receive storage), then every
    // frame still on the wire or in a shim.
    let stats = hosts.map(|mut h| {
        drop(core::mem::replace(
            &mut h.e,
            Engine::new(Sim::host_config(9), 0),
        ));
        let mut rest = Batch::new();
        while h.nic.receive(0, &mut rest, 64).unwrap() > 0 {
            rest.clear();
        }
        (h.nic.pool().stats(), h.nic.backend().pool().stats(), h)
    });
    for (shim, port, _) in stats {
        all_back("shim", shim);
        all_back("port", port);
    }
}

#[test]
fn chains_under_faults_both_ways_nothing_leaks() {
    for seed in 1..=3 {
        run(seed, seed == 2);
    }
}
