//! NIC backends: frames and bytes per second.
//!
//! * `memory_pair`: one batch of 64 frames goes A -> B and comes back through
//!   `receive` into the same batch, so nothing is copied or allocated: the cost of
//!   the backend itself. 60-byte and 1514-byte frames on plain ports, and 64 KiB
//!   TCP super-frames between TSO/LRO ports ("offloads on": the same bytes as 45
//!   MTU frames in one). A lossy wire (1 % loss, reordering, duplication) shows
//!   what the fault stage costs.
//! * `tap` (root only; skipped otherwise): writes of 60- and 1514-byte frames into
//!   a TAP whose kernel side drops them (they are addressed to another host), and
//!   reads of UDP datagrams a kernel socket sends through it.
//!
//! * `shim` (offloads on versus off, side by side): the same 256 000 bytes of TCP
//!   payload cross a memory pair whose ports have NO offload (MTU 1500), both ends
//!   wrapped in a [`Shim`], as 176 wire frames either way (4 x 44 segments):
//!   - `on`: the stack hands 4 super-frames of 64 000 bytes with partial checksums
//!     ([`ShimConfig::all`]); the shim segments and completes checksums on
//!     transmit, verifies checksums and coalesces (GRO) on receive, and the stack
//!     gets super-frames back;
//!   - `off`: the stack hands the 176 MSS-sized frames itself and, having no
//!     checksum offload, completes each checksum in software before sending and
//!     verifies each on receive ([`ShimConfig::none`]: the shim does nothing).
//!   - `hw`: the same super-frames over ports with TSO/LRO and checksum offload
//!     (the shim passes them through): the ceiling when the backend does it all.
//!
//! * `pool`: a [`Pool`] buffer allocated and dropped, one at a time and 64 at a
//!   time (a batch), on the thread that allocated it (what a per-queue runtime
//!   does); and the 64-at-a-time round on two threads sharing one pool at once.
//!
//! Run with `cargo bench --bench nic`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::memory::{self, Faults, PairConfig};
use linerate::nic::{
    Batch, Frame, MemNic, Nic, NicCaps, Offloads, PacketBuf, Pool, PoolConfig, Shim, ShimConfig,
};
use linerate::offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate::offload::{Checksum, Gso, GsoType, OffloadMeta, csum};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate::wire::layout;

const BATCH: usize = 64;

fn tcp_frame(payload: usize) -> Vec<u8> {
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40_000, 80))
        .build(&vec![0x5a; payload])
}

/// Brings the batch back to exactly `BATCH` frames (a lossy wire takes some, a
/// duplicating one adds some).
fn top_up(nic: &MemNic, batch: &mut Batch, frame: &[u8], meta: OffloadMeta) {
    batch.truncate(BATCH);
    while batch.len() < BATCH {
        batch.push(Frame::new(nic.pool().alloc_from(frame), meta));
    }
}

/// Sends the batch from `a` and receives it back on `b`.
fn round(a: &mut MemNic, b: &mut MemNic, batch: &mut Batch) {
    a.transmit(0, batch).unwrap_or_default();
    while b.receive(0, batch, BATCH).unwrap_or_default() > 0 {}
}

fn memory_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("memory_pair");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let tso = NicCaps {
        offloads: Offloads {
            tx_csum: true,
            tso4: true,
            lro: true,
            ..Offloads::NONE
        },
        ..NicCaps::plain()
    };
    let gso_meta = OffloadMeta {
        csum: Checksum::Partial {
            start: 34,
            offset: 16,
        },
        gso: Some(Gso::new(GsoType::TcpV4, 1460)),
        ..OffloadMeta::plain()
    };
    let lossy = Faults {
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_depth: 3,
        ..Faults::NONE
    };
    let cases: [(&str, Vec<u8>, NicCaps, OffloadMeta, Faults); 4] = [
        (
            "60B",
            tcp_frame(6),
            NicCaps::plain(),
            OffloadMeta::plain(),
            Faults::NONE,
        ),
        (
            "1514B",
            tcp_frame(1460),
            NicCaps::plain(),
            OffloadMeta::plain(),
            Faults::NONE,
        ),
        ("64KiB_tso", tcp_frame(65_000), tso, gso_meta, Faults::NONE),
        (
            "1514B_lossy",
            tcp_frame(1460),
            NicCaps::plain(),
            OffloadMeta::plain(),
            lossy,
        ),
    ];
    for (name, frame, caps, meta, faults) in cases {
        let (mut a, mut b) = memory::pair(PairConfig {
            a_to_b: faults,
            ..PairConfig::new(caps, caps)
        });
        let mut batch = Batch::with_capacity(2 * BATCH);
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("frames", name), |bch| {
            bch.iter(|| {
                top_up(&a, &mut batch, &frame, meta);
                round(&mut a, &mut b, black_box(&mut batch));
            })
        });
        g.throughput(Throughput::Bytes((BATCH * frame.len()) as u64));
        g.bench_function(BenchmarkId::new("bytes", name), |bch| {
            bch.iter(|| {
                top_up(&a, &mut batch, &frame, meta);
                round(&mut a, &mut b, black_box(&mut batch));
            })
        });
    }
    g.finish();
}

#[cfg(target_os = "linux")]
fn tap(c: &mut Criterion) {
    use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
    use linerate_testkit::netns::{self, Netns};

    if !netns::is_root() {
        eprintln!("tap benches skipped: they need root");
        return;
    }
    let ns = Netns::new("lrbn").expect("namespace");
    let mut tap = Tap::open(&TapConfig {
        offloads: TapOffloads::NONE,
        ..TapConfig::new(netns::unique("lrb"))
    })
    .expect("tap");
    let name = tap.name().to_owned();
    netns::ip(&["link", "set", &name, "netns", ns.name()]).expect("move");
    ns.ip(&["addr", "add", "10.214.0.1/24", "dev", &name])
        .expect("addr");
    ns.ip(&["link", "set", &name, "up"]).expect("up");
    // The kernel sends to 10.214.0.2 without asking ARP.
    ns.ip(&[
        "neigh",
        "add",
        "10.214.0.2",
        "lladdr",
        "02:4c:52:00:00:02",
        "dev",
        &name,
    ])
    .expect("neigh");

    let mut g = c.benchmark_group("tap");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut batch = Batch::with_capacity(BATCH);
    for (label, payload) in [("60B", 6), ("1514B", 1460)] {
        // To a MAC that is not the interface's: the kernel drops them on input.
        let frame = FrameBuilder::new(Ip::v4([10, 214, 0, 2], [10, 214, 0, 9]), L4::tcp(1, 2))
            .macs([2, 0x4c, 0x52, 0, 0, 2], [2, 0x4c, 0x52, 0, 0, 9])
            .build(&vec![0; payload]);
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("write", label), |bch| {
            bch.iter(|| {
                batch.clear();
                for _ in 0..BATCH {
                    batch.push(Frame::plain(tap.pool().alloc_from(&frame)));
                }
                while !batch.is_empty() {
                    if tap.transmit(0, &mut batch).is_err() {
                        break;
                    }
                }
            })
        });
    }

    // Reads: a kernel UDP socket in the namespace sends as fast as it can.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let sender = ns
        .spawn(move || {
            let s = std::net::UdpSocket::bind("10.214.0.1:0").expect("bind");
            let msg = [0u8; 1400];
            let mut sent = 0u64;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) && sent < 50_000_000 {
                if s.send_to(&msg, "10.214.0.2:9").is_ok() {
                    sent += 1;
                }
            }
        })
        .expect("sender");
    let ready = tap.readiness(0).expect("readiness");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(BenchmarkId::new("read", "1442B_udp"), |bch| {
        bch.iter(|| {
            batch.clear();
            while batch.len() < BATCH {
                let room = BATCH - batch.len();
                if tap.receive(0, &mut batch, room).unwrap_or(0) == 0 {
                    let _ = ready.wait(Duration::from_millis(10));
                }
            }
        })
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sender.join();
    g.finish();
}

#[cfg(not(target_os = "linux"))]
fn tap(_: &mut Criterion) {}

/// Super-frames of the `shim` group: count and payload bytes each.
const SUPERS: usize = 4;
const SUPER_PAYLOAD: usize = 64_000;

/// Frames as the stack builds them, with their meta.
type StackFrames = [(Vec<u8>, OffloadMeta)];

/// Sends `frames` (with `meta`) from `a` in batches and receives everything on
/// `b`; returns the payload bytes the receiver got, after `check` on each frame.
fn shim_round(
    a: &mut Shim<MemNic>,
    b: &mut Shim<MemNic>,
    frames: &StackFrames,
    batch: &mut Batch,
    stack_csum: bool,
) -> usize {
    for chunk in frames.chunks(BATCH) {
        batch.clear();
        for (f, meta) in chunk {
            let mut frame = Frame::new(a.pool().alloc_from(f), *meta);
            if stack_csum {
                // No checksum offload: the stack fills in every checksum itself.
                frame.meta.csum = csum::complete(frame.bytes_mut(), meta).unwrap_or_default();
            }
            batch.push(frame);
        }
        while !batch.is_empty() {
            a.transmit(0, batch).unwrap_or_default();
        }
    }
    let mut bytes = 0;
    loop {
        batch.clear();
        if b.receive(0, batch, BATCH).unwrap_or_default() == 0 {
            break;
        }
        for f in batch.iter() {
            if stack_csum {
                // ...and verifies every checksum it receives.
                let Ok(l) = layout::parse(f.bytes()) else {
                    continue;
                };
                if csum::verify(f.bytes(), &l).ok() {
                    bytes += f.len() - l.header_len();
                }
            } else {
                bytes += f.len() - 54;
            }
        }
    }
    bytes
}

fn shim(c: &mut Criterion) {
    let mut g = c.benchmark_group("shim");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let mut frame = tcp_frame(SUPER_PAYLOAD);
    let l = layout::parse(&frame).unwrap_or_default();
    let partial = csum::prepare_partial(&mut frame, &l).unwrap_or_default();
    let meta = OffloadMeta {
        csum: partial,
        gso: Some(Gso::new(GsoType::TcpV4, 1460)),
        ..OffloadMeta::plain()
    };
    let supers: Vec<_> = (0..SUPERS).map(|_| (frame.clone(), meta)).collect();
    // The same bytes as MSS frames, checksums partial (completed per round).
    let mut seg = Segmenter::new(CsumMode::LeavePartial);
    let mut out = SegmentBuf::new();
    let n = seg.segment(&frame, &meta, &mut out).unwrap_or_default();
    let seg_meta = OffloadMeta {
        csum: out.csum(),
        ..OffloadMeta::plain()
    };
    let mss: Vec<_> = (0..SUPERS)
        .flat_map(|_| out.iter().map(|f| (f.to_vec(), seg_meta)))
        .collect();
    eprintln!(
        "shim: {} wire frames per round, {} bytes of payload",
        SUPERS * n,
        SUPERS * SUPER_PAYLOAD
    );
    let tso = NicCaps {
        offloads: Offloads {
            tx_csum: true,
            rx_csum: true,
            tso4: true,
            lro: true,
            ..Offloads::NONE
        },
        ..NicCaps::plain()
    };
    let cases: [(&str, NicCaps, ShimConfig, &StackFrames, bool); 3] = [
        ("on", NicCaps::plain(), ShimConfig::all(), &supers, false),
        ("off", NicCaps::plain(), ShimConfig::none(), &mss, true),
        ("hw", tso, ShimConfig::all(), &supers, false),
    ];
    g.throughput(Throughput::Bytes((SUPERS * SUPER_PAYLOAD) as u64));
    for (name, caps, cfg, frames, stack_csum) in cases {
        let (a, b) = MemNic::pair(caps, caps);
        let (Ok(mut a), Ok(mut b)) = (Shim::new(a, cfg.clone()), Shim::new(b, cfg)) else {
            continue;
        };
        let mut batch = Batch::with_capacity(2 * BATCH);
        let got = shim_round(&mut a, &mut b, frames, &mut batch, stack_csum);
        assert_eq!(got, SUPERS * SUPER_PAYLOAD, "{name}: payload lost");
        g.bench_function(BenchmarkId::new("256KB_payload", name), |bch| {
            bch.iter(|| shim_round(&mut a, &mut b, frames, black_box(&mut batch), stack_csum))
        });
    }
    g.finish();
}

/// Allocates `bufs.capacity()` buffers of `pool` into `bufs`, writes a byte into
/// each, and drops them all.
fn pool_round(pool: &Pool, bufs: &mut Vec<PacketBuf>) {
    for i in 0..bufs.capacity() {
        let mut b = pool.alloc();
        b.append(1)[0] = i as u8;
        bufs.push(b);
    }
    black_box(&bufs);
    bufs.clear();
}

fn pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool");
    g.sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let pool = Pool::new(PoolConfig {
        prealloc: 256,
        ..PoolConfig::mtu()
    });
    g.throughput(Throughput::Elements(1));
    g.bench_function(BenchmarkId::new("alloc_drop", "one"), |bch| {
        bch.iter(|| {
            let mut b = pool.alloc();
            b.append(1)[0] = 1;
            black_box(b)
        })
    });
    g.throughput(Throughput::Elements(BATCH as u64));
    let mut bufs = Vec::with_capacity(BATCH);
    g.bench_function(BenchmarkId::new("alloc_drop", "batch64"), |bch| {
        bch.iter(|| pool_round(&pool, &mut bufs))
    });
    // Two threads at once on one pool (2 x 64 buffers per iteration).
    g.throughput(Throughput::Elements(2 * BATCH as u64));
    g.bench_function(BenchmarkId::new("alloc_drop", "batch64_2threads"), |bch| {
        bch.iter_custom(|iters| {
            let start = std::time::Instant::now();
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        let mut bufs = Vec::with_capacity(BATCH);
                        for _ in 0..iters {
                            pool_round(&pool, &mut bufs);
                        }
                    });
                }
            });
            start.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, memory_pair, shim, tap, pool);
criterion_main!(benches);
