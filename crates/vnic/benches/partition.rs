//! The partition's data path: 64-byte frames per second.
//!
//! * `steer_128`: batches of 64 frames from the wire, each to one of 128 vNICs (by
//!   destination MAC), pumped and taken by their vNICs: the memory wire's hop plus
//!   the steering lookup, the vNIC's queue and its receive call;
//! * `veb`: a vNIC sends batches of 64 frames to another vNIC of the partition,
//!   which takes them: the transmit checks (spoof, VLAN), the lookup and the
//!   embedded switch, no wire;
//! * `wire_only`: the bare memory pair with the same frames, for scale.
//!
//! Run with `cargo bench -p linerate-vnic --bench partition`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_vnic::{Partition, PartitionConfig, Vnic, VnicConfig};
use std::hint::black_box;
use std::time::Duration;

const BATCH: usize = 64;

fn mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, (i >> 8) as u8, i as u8]
}

fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.resize(64, 0x5a);
    f
}

fn setup(n: usize) -> (Partition<MemNic>, Vec<Vnic<MemNic>>, MemNic) {
    let (port, wire) = memory::pair(PairConfig {
        clock: Clock::manual(),
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let part = Partition::new(
        port,
        PartitionConfig {
            clock: Clock::manual(),
            ..PartitionConfig::default()
        },
    );
    let vnics = (0..n)
        .map(|i| part.add(VnicConfig::new(mac(i))).expect("vnic"))
        .collect();
    (part, vnics, wire)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("partition");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(3));

    let (_part, mut vnics, mut wire) = setup(128);
    let frames: Vec<Vec<u8>> = (0..BATCH)
        .map(|i| frame(mac(i * 37 % 128), [2, 0, 0, 9, 9, 9]))
        .collect();
    let mut batch = Batch::with_capacity(BATCH);
    let mut rx = Batch::with_capacity(BATCH);
    g.bench_function("steer_128", |b| {
        b.iter(|| {
            for f in &frames {
                batch.push(Frame::plain(wire.pool().alloc_from(f)));
            }
            wire.transmit(0, &mut batch).expect("wire");
            let mut got = 0;
            for v in vnics.iter_mut() {
                got += v.receive(0, &mut rx, BATCH).expect("rx");
                rx.clear();
                if got == BATCH {
                    break;
                }
            }
            black_box(got)
        })
    });

    let (_part, mut vnics, _wire) = setup(2);
    let to_b: Vec<Vec<u8>> = (0..BATCH).map(|_| frame(mac(1), mac(0))).collect();
    g.bench_function("veb", |b| {
        b.iter(|| {
            let [a, bb] = &mut vnics[..] else { return 0 };
            for f in &to_b {
                batch.push(Frame::plain(a.pool().alloc_from(f)));
            }
            a.transmit(0, &mut batch).expect("tx");
            let got = bb.receive(0, &mut rx, BATCH).expect("rx");
            rx.clear();
            black_box(got)
        })
    });

    let (mut x, mut y) = memory::pair(PairConfig::new(NicCaps::plain(), NicCaps::plain()));
    g.bench_function("wire_only", |b| {
        b.iter(|| {
            for f in &to_b {
                batch.push(Frame::plain(x.pool().alloc_from(f)));
            }
            x.transmit(0, &mut batch).expect("tx");
            let got = y.receive(0, &mut rx, BATCH).expect("rx");
            rx.clear();
            black_box(got)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
