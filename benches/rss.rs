//! Toeplitz ns/hash per hash type per path (bitwise reference, portable tables,
//! PCLMULQDQ), and software dispatch Mpps into 2, 4 and 8 queues.
//!
//! `cargo bench --bench rss`

// Benchmark set-up: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::offload::{OffloadMeta, RssHash, RssHashType};
use linerate::rss::toeplitz::bitwise;
use linerate::rss::{
    Dispatcher, FlowTuple, HashConfig, HashInput, IndirectionTable, Path, PortAllocator, RssKey,
    RxFrame, Steering, Toeplitz,
};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use std::hint::black_box;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A small deterministic generator (splitmix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
        b
    }
}

const BATCH: usize = 256;

fn inputs(kind: &str, rng: &mut Rng) -> Vec<HashInput> {
    (0..BATCH)
        .map(|_| {
            let (p, q) = (rng.next() as u16, (rng.next() >> 16) as u16);
            match kind {
                "ipv4" => HashInput::ipv4(rng.bytes(), rng.bytes()),
                "tcp_ipv4" => HashInput::tcp_ipv4(rng.bytes(), rng.bytes(), p, q),
                "udp_ipv4" => HashInput::udp_ipv4(rng.bytes(), rng.bytes(), p, q),
                "ipv6" => HashInput::ipv6(rng.bytes(), rng.bytes()),
                "tcp_ipv6" => HashInput::tcp_ipv6(rng.bytes(), rng.bytes(), p, q),
                _ => HashInput::udp_ipv6(rng.bytes(), rng.bytes(), p, q),
            }
        })
        .collect()
}

/// Every path this CPU has, by name.
fn paths(key: &RssKey) -> Vec<(&'static str, Toeplitz)> {
    [
        ("portable", Path::Portable),
        ("clmul", Path::Clmul),
        ("vpclmul", Path::Vpclmul),
    ]
    .into_iter()
    .filter_map(|(n, p)| Toeplitz::with_path(key, p).ok().map(|t| (n, t)))
    .collect()
}

fn toeplitz(c: &mut Criterion) {
    let mut g = c.benchmark_group("toeplitz");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let key = RssKey::MICROSOFT;
    let mut rng = Rng(7);
    let paths = paths(&key);
    for kind in [
        "ipv4", "tcp_ipv4", "udp_ipv4", "ipv6", "tcp_ipv6", "udp_ipv6",
    ] {
        let inputs = inputs(kind, &mut rng);
        g.bench_with_input(BenchmarkId::new("bitwise", kind), &inputs, |b, inputs| {
            b.iter(|| {
                inputs.iter().fold(0, |h, i| {
                    h ^ bitwise(key.as_bytes(), black_box(i).as_bytes())
                })
            })
        });
        for (name, t) in &paths {
            g.bench_with_input(BenchmarkId::new(*name, kind), &inputs, |b, inputs| {
                b.iter(|| inputs.iter().fold(0, |h, i| h ^ t.hash(black_box(i))))
            });
        }
    }
    g.finish();
}

/// Batched hashing (`Toeplitz::hash_batch`), per path, for the 4-tuple types.
fn toeplitz_batch(c: &mut Criterion) {
    let mut g = c.benchmark_group("toeplitz_batch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let key = RssKey::MICROSOFT;
    let mut rng = Rng(8);
    let paths = paths(&key);
    for kind in ["tcp_ipv4", "tcp_ipv6"] {
        let inputs = inputs(kind, &mut rng);
        let mut out = vec![0u32; BATCH];
        for (name, t) in &paths {
            g.bench_with_input(BenchmarkId::new(*name, kind), &inputs, |b, inputs| {
                b.iter(|| {
                    t.hash_batch(black_box(inputs), &mut out);
                    black_box(&out);
                })
            });
        }
    }
    g.finish();
}

/// Software dispatch from one ring into 2, 4 and 8 queues: TCP/IPv4 frames of 1024
/// flows, batches of 256, hashed in software (parse + hash) or with the backend's
/// hash in the meta. Only the `dispatch` call is timed (frames moved out of a
/// ring `Vec`); the ring is refilled and the queues are drained between batches,
/// untimed (in a stack each queue's own core drains it).
fn dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch");
    const N: usize = 256;
    g.throughput(Throughput::Elements(N as u64));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let mut rng = Rng(9);
    let frames: Vec<Vec<u8>> = (0..1024)
        .map(|_| {
            FrameBuilder::new(
                Ip::v4(rng.bytes(), [10, 0, 0, 1]),
                L4::tcp(rng.next() as u16, 80),
            )
            .build(&[0u8; 6])
        })
        .collect();
    for queues in [2u16, 4, 8] {
        let steering = Arc::new(Steering::new(
            &RssKey::MICROSOFT,
            IndirectionTable::new(queues).unwrap(),
            HashConfig::default(),
        ));
        for backend in [false, true] {
            let ring: Vec<RxFrame<&[u8]>> = frames
                .iter()
                .map(|f| {
                    let mut meta = OffloadMeta::plain();
                    if backend {
                        meta.rss = Some(RssHash {
                            value: steering.hash_frame(f, None).unwrap().value,
                            kind: RssHashType::TcpIpv4,
                        });
                    }
                    RxFrame::with_meta(f.as_slice(), meta)
                })
                .collect();
            let (mut d, rx) = Dispatcher::new(steering.clone(), 4 * N).unwrap();
            let name = if backend {
                "backend_hash"
            } else {
                "software_hash"
            };
            let mut drain = Vec::with_capacity(N);
            let mut batch = Vec::with_capacity(N);
            let mut at = 0;
            g.bench_function(BenchmarkId::new(name, queues), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // The ring's frames are moved out of it, as from a
                        // backend's receive ring; refilling it is not timed.
                        batch.extend(ring[at..at + N].iter().cloned());
                        at = (at + N) % ring.len();
                        let t0 = Instant::now();
                        let res = d.dispatch(batch.drain(..));
                        total += t0.elapsed();
                        debug_assert_eq!(res.dropped, 0);
                        for q in &rx {
                            drain.clear();
                            q.pop_batch(&mut drain, usize::MAX);
                        }
                    }
                    total
                })
            });
        }
    }
    g.finish();
}

/// RSS-aware source port choice: allocate a port for a queue and release it.
fn source_port(c: &mut Criterion) {
    let mut g = c.benchmark_group("source_port");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let steering = Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(8).unwrap(),
        HashConfig::default(),
    ));
    let mut ports = PortAllocator::new(steering, false, 49152, 65535).unwrap();
    let mut rng = Rng(10);
    let flows: Vec<FlowTuple> = (0..1024)
        .map(|_| {
            FlowTuple::tcp4(
                Ipv4Addr::new(10, 0, 0, 1),
                0,
                Ipv4Addr::from(rng.next() as u32),
                443,
            )
        })
        .collect();
    let mut i = 0;
    g.bench_function("allocate_release", |b| {
        b.iter(|| {
            let f = &flows[i % flows.len()];
            let p = ports.allocate(black_box(f), (i % 8) as u16).unwrap();
            ports.release(p).unwrap();
            i += 1;
            p
        })
    });
    g.finish();
}

criterion_group!(benches, toeplitz, toeplitz_batch, dispatch, source_port);
criterion_main!(benches);
