//! Tunnel encapsulation and decapsulation: 64-byte inner frames (an inner
//! Ethernet + IPv4 + UDP frame of 64 bytes) per kind.
//!
//! `encap_decap/<kind>`: a batch of 64 inner frames is transmitted on one
//! tunnel endpoint (outer headers copied from the template into headroom and
//! patched) over a plain memory pair and received on the other (validated with
//! the wire views and stripped), back into the same batch: nothing is copied
//! or allocated. Throughput is in inner frames, so criterion's elements/s is
//! the Mpps of encap+decap on one core. `encap_decap/plain` is the same batch
//! over the bare memory pair: the tunnel's own cost is the difference.
//!
//! Run with `cargo bench --bench tunnel`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::{
    Batch, Counters, Frame, MemNic, Nic, NicCaps, NicError, Notify, Pool, PoolConfig, Readiness,
    Recorder,
};
use linerate::tunnel::{Encap, GeneveOpt, NextHop, Tunnel, VniConfig, VtepConfig};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use std::sync::{Arc, Mutex};

const BATCH: usize = 64;
const MAC_A: [u8; 6] = [2, 0, 0, 0, 0x10, 1];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0x10, 2];

fn inner_frame() -> Vec<u8> {
    // 14 + 20 + 8 + 22 = 64 bytes.
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(40_000, 9)).build(&[0x5a; 22])
}

fn kinds() -> Vec<(&'static str, Encap)> {
    vec![
        ("vxlan", Encap::Vxlan),
        (
            "geneve_2opts",
            Encap::Geneve {
                options: vec![
                    GeneveOpt {
                        class: 0x0102,
                        kind: 0x80,
                        data: vec![1, 2, 3, 4],
                    },
                    GeneveOpt {
                        class: 0xff01,
                        kind: 0x05,
                        data: vec![9; 8],
                    },
                ],
                known_critical: vec![(0x0102, 0x80)],
            },
        ),
        ("nvgre", Encap::Nvgre),
    ]
}

fn round(a: &mut impl Nic, b: &mut impl Nic, batch: &mut Batch) {
    let n = a.transmit(0, batch).unwrap_or(0);
    let got = b.receive(0, batch, BATCH).unwrap_or(0);
    assert_eq!((n, got), (BATCH, BATCH));
}

fn encap_decap(c: &mut Criterion) {
    let mut g = c.benchmark_group("encap_decap");
    g.throughput(Throughput::Elements(BATCH as u64));
    let frame = inner_frame();
    {
        let (mut a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        let mut batch: Batch = (0..BATCH)
            .map(|_| Frame::plain(a.pool().alloc_from(&frame)))
            .collect();
        g.bench_function(BenchmarkId::new("plain", 64), |bench| {
            bench.iter(|| round(&mut a, &mut b, black_box(&mut batch)))
        });
    }
    for v6 in [false, true] {
        let (la, lb): (IpAddr, IpAddr) = if v6 {
            (
                "2001:db8::a".parse().unwrap(),
                "2001:db8::b".parse().unwrap(),
            )
        } else {
            ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap())
        };
        for (name, encap) in kinds() {
            let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
            let vni = |remote, mac| VniConfig {
                next_hop: NextHop::Static(mac),
                ..VniConfig::new(42, remote)
            };
            let mut ta =
                Tunnel::new(a, VtepConfig::new(encap.clone(), MAC_A, la), vni(lb, MAC_B)).unwrap();
            let mut tb = Tunnel::new(b, VtepConfig::new(encap, MAC_B, lb), vni(la, MAC_A)).unwrap();
            let mut batch: Batch = (0..BATCH)
                .map(|_| Frame::plain(ta.pool().alloc_from(&frame)))
                .collect();
            let id = format!("{name}_{}", if v6 { "ipv6" } else { "ipv4" });
            g.bench_function(BenchmarkId::new(id, 64), |bench| {
                bench.iter(|| round(&mut ta, &mut tb, black_box(&mut batch)))
            });
        }
    }
    g.finish();
}

/// Two ends of a minimal loop: what one transmits, the other receives.
struct Loop {
    tx: Arc<Mutex<Vec<Frame>>>,
    rx: Arc<Mutex<Vec<Frame>>>,
    caps: NicCaps,
    counters: Counters,
    pool: Pool,
    notify: Arc<Notify>,
}

fn loop_pair() -> (Loop, Loop) {
    let (x, y) = (
        Arc::new(Mutex::new(Vec::with_capacity(BATCH))),
        Arc::new(Mutex::new(Vec::with_capacity(BATCH))),
    );
    let end = |tx: &Arc<Mutex<Vec<Frame>>>, rx: &Arc<Mutex<Vec<Frame>>>| Loop {
        tx: Arc::clone(tx),
        rx: Arc::clone(rx),
        caps: NicCaps::plain(),
        counters: Counters::new(1),
        pool: Pool::new(PoolConfig::mtu()),
        notify: Arc::new(Notify::new()),
    };
    (end(&x, &y), end(&y, &x))
}

impl Nic for Loop {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }
    fn receive(&mut self, _: usize, batch: &mut Batch, _max: usize) -> Result<usize, NicError> {
        let mut q = self.rx.lock().unwrap();
        let n = q.len();
        if batch.is_empty() {
            std::mem::swap(&mut **batch, &mut *q);
        } else {
            batch.append(&mut q);
        }
        Ok(n)
    }
    fn transmit(&mut self, _: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let mut q = self.tx.lock().unwrap();
        let n = batch.len();
        if q.is_empty() {
            std::mem::swap(&mut **batch, &mut *q);
        } else {
            q.append(batch);
        }
        Ok(n)
    }
    fn readiness(&self, _: usize) -> Result<Readiness, NicError> {
        Ok(Readiness::Notify(Arc::clone(&self.notify)))
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn pool(&self) -> &Pool {
        &self.pool
    }
    fn set_recorder(&mut self, _: Option<Arc<dyn Recorder>>) {}
}

fn encap_decap_loop(c: &mut Criterion) {
    let mut g = c.benchmark_group("loop");
    g.throughput(Throughput::Elements(BATCH as u64));
    let frame = inner_frame();
    let (la, lb): (IpAddr, IpAddr) = ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap());
    {
        let (mut a, mut b) = loop_pair();
        let mut batch: Batch = (0..BATCH)
            .map(|_| Frame::plain(a.pool().alloc_from(&frame)))
            .collect();
        g.bench_function(BenchmarkId::new("plain", 64), |bench| {
            bench.iter(|| round(&mut a, &mut b, black_box(&mut batch)))
        });
    }
    for (name, encap) in kinds() {
        let (a, b) = loop_pair();
        let vni = |remote, mac| VniConfig {
            next_hop: NextHop::Static(mac),
            ..VniConfig::new(42, remote)
        };
        let mut ta =
            Tunnel::new(a, VtepConfig::new(encap.clone(), MAC_A, la), vni(lb, MAC_B)).unwrap();
        let mut tb = Tunnel::new(b, VtepConfig::new(encap, MAC_B, lb), vni(la, MAC_A)).unwrap();
        let mut batch: Batch = (0..BATCH)
            .map(|_| Frame::plain(ta.pool().alloc_from(&frame)))
            .collect();
        g.bench_function(BenchmarkId::new(format!("{name}_ipv4"), 64), |bench| {
            bench.iter(|| round(&mut ta, &mut tb, black_box(&mut batch)))
        });
    }
    g.finish();
}

criterion_group!(benches, encap_decap, encap_decap_loop);
criterion_main!(benches);
