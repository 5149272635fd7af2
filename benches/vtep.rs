//! The VTEP's bridging: 64-byte frames forwarded by a [`BridgeDomain`] per second.
//!
//! * `local_to_local`: a host on port 0 sends batches of 64 frames to a learned
//!   MAC behind port 1; the domain receives them, learns, looks up and forwards;
//!   the host on port 1 takes them back into the sending batch (nothing copied or
//!   allocated once warm): the cost of the domain plus two memory-port hops.
//! * `local_to_remote`: the same frames toward a MAC learned behind a remote VTEP,
//!   handed to an overlay that counts and recycles them (the tunnel's own cost is
//!   in `benches/tunnel.rs`).
//! * `flood`: broadcasts from port 0 replicated to one other port and two remote
//!   VTEPs (three copies each).
//!
//! Run with `cargo bench --bench vtep`. The target is 5 Mpps per core.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::{Batch, Frame, MemNic, Nic, NicCaps, NicError};
use linerate::tunnel::bridge::{BridgeDomain, Dest, DomainConfig, Fdb, FdbConfig, Overlay};
use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

const BATCH: usize = 64;

/// An overlay that takes every frame and drops it (back to its pool).
struct Sink(usize);

impl Overlay for Sink {
    fn receive(&mut self, _: &mut Vec<(IpAddr, Frame)>, _: usize) -> Result<usize, NicError> {
        Ok(0)
    }
    fn transmit(&mut self, _: IpAddr, batch: &mut Batch) -> Result<usize, NicError> {
        let n = batch.len();
        self.0 += n;
        batch.clear();
        Ok(n)
    }
}

fn frame(dst: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0xa, 0x88, 0xb5]);
    f.resize(64, 0x5a);
    f
}

fn setup() -> (BridgeDomain<Sink>, MemNic, MemNic) {
    let mut cfg = DomainConfig::new(1);
    cfg.batch = BATCH;
    let mut d = BridgeDomain::new(cfg, Sink(0), Fdb::new(FdbConfig::default()));
    let (h0, p0) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let (h1, p1) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    d.add_port(Box::new(p0));
    d.add_port(Box::new(p1));
    let fdb = d.fdb_mut();
    fdb.add_static(1, [2, 0, 0, 0, 0, 0xb], Dest::Local(1))
        .unwrap();
    fdb.add_static(
        1,
        [2, 0, 0, 0, 0, 0xc],
        Dest::Remote(IpAddr::from([10, 0, 0, 2])),
    )
    .unwrap();
    fdb.add_flood(1, IpAddr::from([10, 0, 0, 2])).unwrap();
    fdb.add_flood(1, IpAddr::from([10, 0, 0, 3])).unwrap();
    (d, h0, h1)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("vtep");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, dst) in [
        ("local_to_local", [2, 0, 0, 0, 0, 0xb]),
        ("local_to_remote", [2, 0, 0, 0, 0, 0xc]),
        ("flood", [0xff; 6]),
    ] {
        let (mut d, mut h0, mut h1) = setup();
        let bytes = frame(dst);
        let mut batch = Batch::with_capacity(4 * BATCH);
        let now = Duration::ZERO;
        g.bench_function(name, |b| {
            b.iter(|| {
                while batch.len() < BATCH {
                    batch.push(Frame::plain(h0.pool().alloc_from(&bytes)));
                }
                h0.transmit(0, &mut batch).unwrap();
                black_box(d.poll(now));
                h1.receive(0, &mut batch, 4 * BATCH).unwrap();
                batch.truncate(BATCH);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
