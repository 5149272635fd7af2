//! RSS kernels and software dispatch, side by side.
//!
//! * `toeplitz`: ns/hash per hash type on every path this CPU has, one
//!   `Toeplitz::hash` call each and in `Toeplitz::hash_batch`, beside the bitwise
//!   reference (Microsoft's definition, `toeplitz::bitwise`).
//! * `hash_input`: ns/frame to find a frame's hash input, read straight from its
//!   bytes (`HashConfig::extract`, the fast path) or through `layout::parse` and
//!   `HashConfig::input` (the full path), per kind of frame.
//! * `dispatch`: Mpps from one ring into 2, 4 and 8 queues: TCP/IPv4 frames of 1024
//!   flows in batches of 256, with the backend's hash or a software hash, for two
//!   item types: `RxFrame` (bytes and a whole `OffloadMeta`: 40 bytes) and `RxBuf`
//!   (bytes and hash: 24 bytes). Only the `dispatch` call is timed; the
//!   ring is refilled and the queues drained between batches (in a stack each
//!   queue's own core drains it).
//! * `source_port`: RSS-aware source port choice (allocate and release).
//!
//! `cargo bench --bench rss` runs them under criterion. `cargo bench --bench rss --
//! --table` prints one table instead: every case runs in short turns, round robin,
//! and each figure is the median of its turns. On a shared, loaded machine load
//! then falls on all cases alike, which makes the side-by-side ratios fair; the
//! figures in `docs/performance.md` come from it.

// Benchmark set-up: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput};
use linerate::offload::OffloadMeta;
use linerate::rss::toeplitz::bitwise;
use linerate::rss::{
    Dispatcher, FlowTuple, HashConfig, HashInput, IndirectionTable, Path, PortAllocator,
    QueueReceiver, RssKey, RxBuf, RxFrame, RxItem, Steering, Toeplitz,
};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate::wire::etherparse::{IpFragOffset, IpNumber, Ipv6FragmentHeader};
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

/// Inputs (and frames) per batch.
const BATCH: usize = 256;
const KINDS: [&str; 6] = [
    "ipv4", "tcp_ipv4", "udp_ipv4", "ipv6", "tcp_ipv6", "udp_ipv6",
];
const QUEUES: [u16; 3] = [2, 4, 8];

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
        ("gfni", Path::Gfni),
    ]
    .into_iter()
    .filter_map(|(n, p)| Toeplitz::with_path(key, p).ok().map(|t| (n, t)))
    .collect()
}

/// `BATCH` frames of one kind, random addresses and ports: the fast path's
/// common cases, and two it leaves to the full parse (NVGRE, IPv6 extension
/// headers).
fn frames_of(kind: &str, rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..BATCH)
        .map(|_| {
            let (sp, dp) = (rng.next() as u16, 443);
            let v4 = Ip::v4(rng.bytes(), rng.bytes());
            let under = Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
            let b = match kind {
                "tcp4" => FrameBuilder::new(v4, L4::tcp(sp, dp)),
                "udp6" => FrameBuilder::new(Ip::v6(rng.bytes(), rng.bytes()), L4::udp(sp, dp)),
                "tcp4-qinq" => FrameBuilder::new(v4, L4::tcp(sp, dp)).vlan(1).vlan(2),
                "vxlan-tcp4" => FrameBuilder::new(v4, L4::tcp(sp, dp)).vxlan(42, under),
                "geneve-tcp4" => FrameBuilder::new(v4, L4::tcp(sp, dp)).geneve(42, &[], under),
                "nvgre-tcp4" => FrameBuilder::new(v4, L4::tcp(sp, dp)).nvgre(42, 0, under),
                _ => {
                    let Ip::V6(h, mut ext) = Ip::v6(rng.bytes(), rng.bytes()) else {
                        unreachable!()
                    };
                    let zero = IpFragOffset::try_new(0).unwrap();
                    ext.fragment = Some(Ipv6FragmentHeader::new(IpNumber::UDP, zero, false, 1));
                    FrameBuilder::new(Ip::V6(h, ext), L4::udp(sp, dp))
                }
            };
            b.build(&[0u8; 6])
        })
        .collect()
}
const FRAME_KINDS: [&str; 7] = [
    "tcp4",
    "udp6",
    "tcp4-qinq",
    "vxlan-tcp4",
    "geneve-tcp4",
    "nvgre-tcp4",
    "udp6-ext",
];

fn full_path(c: &HashConfig, f: &[u8]) -> Option<HashInput> {
    c.input(f, &c.layout.parse(f).ok()?)
}

/// One dispatcher and the ring it is fed from.
struct Rig<T> {
    d: Dispatcher<T>,
    rx: Vec<QueueReceiver<T>>,
    ring: Vec<T>,
    batch: Vec<T>,
    drain: Vec<T>,
    at: usize,
}

impl<T: RxItem + Clone> Rig<T> {
    fn new(steering: &Arc<Steering>, ring: Vec<T>) -> Rig<T> {
        let (d, rx) = Dispatcher::new(steering.clone(), 4 * BATCH).unwrap();
        Rig {
            d,
            rx,
            ring,
            batch: Vec::with_capacity(BATCH),
            drain: Vec::with_capacity(BATCH),
            at: 0,
        }
    }

    /// Dispatches the next batch; only the `dispatch` call is timed.
    fn step(&mut self) -> Duration {
        // The ring's frames are moved out of it, as from a backend's receive ring.
        self.batch
            .extend(self.ring[self.at..self.at + BATCH].iter().cloned());
        self.at = (self.at + BATCH) % self.ring.len();
        let t0 = Instant::now();
        let res = self.d.dispatch(self.batch.drain(..));
        let t = t0.elapsed();
        debug_assert_eq!(res.dropped, 0);
        for q in &self.rx {
            self.drain.clear();
            q.pop_batch(&mut self.drain, usize::MAX);
        }
        t
    }
}

/// A dispatch case: its name and one step (ns for `BATCH` frames).
type Step = Box<dyn FnMut() -> Duration>;

/// Every dispatch case for `queues` queues: (item, hash source, step).
fn dispatch_cases(queues: u16) -> Vec<(&'static str, &'static str, Step)> {
    let mut rng = Rng(9);
    // Leaked: the rigs hold slices of these frames for the whole run.
    let frames: &'static [Vec<u8>] = Vec::leak(
        (0..1024)
            .map(|_| {
                FrameBuilder::new(
                    Ip::v4(rng.bytes(), [10, 0, 0, 1]),
                    L4::tcp(rng.next() as u16, 80),
                )
                .build(&[0u8; 6])
            })
            .collect(),
    );
    let steering = Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(queues).unwrap(),
        HashConfig::default(),
    ));
    let mut out: Vec<(&'static str, &'static str, Step)> = Vec::new();
    for (hash, backend) in [("backend", true), ("software", false)] {
        let h = |f: &[u8]| backend.then(|| steering.hash_frame(f, None).unwrap());
        let frame_ring = frames
            .iter()
            .map(|f| {
                RxFrame::with_meta(
                    f.as_slice(),
                    OffloadMeta {
                        rss: h(f),
                        ..OffloadMeta::plain()
                    },
                )
            })
            .collect();
        let buf_ring = frames
            .iter()
            .map(|f| RxBuf {
                data: f.as_slice(),
                rss: h(f),
            })
            .collect();
        let mut a = Rig::new(&steering, frame_ring);
        let mut b = Rig::new(&steering, buf_ring);
        out.push(("RxFrame", hash, Box::new(move || a.step())));
        out.push(("RxBuf", hash, Box::new(move || b.step())));
    }
    out
}

fn toeplitz(c: &mut Criterion) {
    let key = RssKey::MICROSOFT;
    let mut rng = Rng(7);
    let paths = paths(&key);
    let mut out = vec![0u32; BATCH];
    for kind in KINDS {
        let mut g = c.benchmark_group(format!("toeplitz/{kind}"));
        g.throughput(Throughput::Elements(BATCH as u64));
        g.measurement_time(Duration::from_secs(1))
            .warm_up_time(Duration::from_millis(300));
        let inputs = inputs(kind, &mut rng);
        g.bench_function("bitwise", |b| {
            b.iter(|| {
                inputs.iter().fold(0, |h, i| {
                    h ^ bitwise(key.as_bytes(), black_box(i).as_bytes())
                })
            })
        });
        for (name, t) in &paths {
            g.bench_function(*name, |b| {
                b.iter(|| inputs.iter().fold(0, |h, i| h ^ t.hash(black_box(i))))
            });
            g.bench_function(format!("{name}-batch"), |b| {
                b.iter(|| {
                    t.hash_batch(black_box(&inputs), &mut out);
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

fn hash_input(c: &mut Criterion) {
    let mut g = c.benchmark_group("hash_input");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    let config = HashConfig::default();
    let mut rng = Rng(11);
    for kind in FRAME_KINDS {
        let frames = frames_of(kind, &mut rng);
        g.bench_with_input(BenchmarkId::new("extract", kind), &frames, |b, fs| {
            b.iter(|| {
                fs.iter().for_each(|f| {
                    black_box(config.frame_input(black_box(f)));
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("parse", kind), &frames, |b, fs| {
            b.iter(|| {
                fs.iter().for_each(|f| {
                    black_box(full_path(&config, black_box(f)));
                })
            })
        });
    }
    g.finish();
}

fn dispatch(c: &mut Criterion) {
    let mut g = c.benchmark_group("dispatch");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    for queues in QUEUES {
        for (item, hash, mut step) in dispatch_cases(queues) {
            g.bench_function(BenchmarkId::new(format!("{item}/{hash}"), queues), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| step()).sum())
            });
        }
    }
    g.finish();
}

fn allocator() -> (PortAllocator, Vec<FlowTuple>) {
    let steering = Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(8).unwrap(),
        HashConfig::default(),
    ));
    let ports = PortAllocator::new(steering, false, 49152, 65535).unwrap();
    let mut rng = Rng(10);
    let flows = (0..1024)
        .map(|_| {
            FlowTuple::tcp4(
                Ipv4Addr::new(10, 0, 0, 1),
                0,
                Ipv4Addr::from(rng.next() as u32),
                443,
            )
        })
        .collect();
    (ports, flows)
}

fn source_port(c: &mut Criterion) {
    let mut g = c.benchmark_group("source_port");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let (mut ports, flows) = allocator();
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

/// The table: each case is a closure that runs one short turn and returns ns per
/// item; all cases of a section take turns, round robin, `rounds` times.
fn medians(cases: &mut [Box<dyn FnMut() -> f64 + '_>], rounds: usize) -> Vec<f64> {
    let mut samples = vec![Vec::with_capacity(rounds); cases.len()];
    for _ in 0..rounds {
        for (case, s) in cases.iter_mut().zip(&mut samples) {
            s.push(case());
        }
    }
    samples
        .into_iter()
        .map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        })
        .collect()
}

/// ns per item of `n` items done by `f`.
fn per_item(n: usize, f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_nanos() as f64 / n as f64
}

fn table() {
    let key = RssKey::MICROSOFT;
    let mut rng = Rng(7);
    let paths = paths(&key);
    println!("Toeplitz, ns/hash, median of 200 turns (-b: Toeplitz::hash_batch)");
    print!("{:10}{:>9}", "type", "bitwise");
    for (n, _) in &paths {
        print!("{n:>10}{:>11}", format!("{n}-b"));
    }
    println!("{:>16}", "bitwise/best");
    for kind in KINDS {
        let inputs = inputs(kind, &mut rng);
        let inputs = &inputs;
        // bitwise, then each path one call per hash, then each path batched.
        let mut cases: Vec<Box<dyn FnMut() -> f64>> = vec![Box::new(|| {
            per_item(BATCH, || {
                let h = inputs.iter().fold(0, |h, i| {
                    h ^ bitwise(key.as_bytes(), black_box(i).as_bytes())
                });
                black_box(h);
            })
        })];
        for (_, t) in &paths {
            cases.push(Box::new(move || {
                per_item(8 * BATCH, || {
                    for _ in 0..8 {
                        let h = inputs.iter().fold(0, |h, i| h ^ t.hash(black_box(i)));
                        black_box(h);
                    }
                })
            }));
        }
        for (_, t) in &paths {
            let mut out = vec![0u32; BATCH];
            cases.push(Box::new(move || {
                per_item(8 * BATCH, || {
                    for _ in 0..8 {
                        t.hash_batch(black_box(inputs), &mut out);
                        black_box(&out);
                    }
                })
            }));
        }
        let m = medians(&mut cases, 200);
        let n = paths.len();
        print!("{kind:10}{:>9.1}", m[0]);
        for i in 0..n {
            print!("{:>10.2}{:>11.2}", m[1 + i], m[1 + n + i]);
        }
        let best = m[1..].iter().copied().fold(f64::MAX, f64::min);
        println!("{:>15.0}x", m[0] / best);
    }

    println!();
    println!("Hash input, ns/frame, median of 200 turns: fast path vs layout::parse + input");
    println!("{:14}{:>9}{:>9}{:>8}", "frame", "extract", "parse", "ratio");
    let config = HashConfig::default();
    let mut rng = Rng(11);
    for kind in FRAME_KINDS {
        let frames = frames_of(kind, &mut rng);
        let mut cases: Vec<Box<dyn FnMut() -> f64>> = vec![
            Box::new(|| {
                per_item(BATCH, || {
                    frames.iter().for_each(|f| {
                        black_box(config.frame_input(black_box(f)));
                    })
                })
            }),
            Box::new(|| {
                per_item(BATCH, || {
                    frames.iter().for_each(|f| {
                        black_box(full_path(&config, black_box(f)));
                    })
                })
            }),
        ];
        let m = medians(&mut cases, 200);
        println!("{kind:14}{:>9.1}{:>9.1}{:>7.1}x", m[0], m[1], m[1] / m[0]);
    }

    println!();
    println!(
        "Dispatch of TCP/IPv4 frames in batches of {BATCH}, Mpps (median of 2000 turns);\n\
         items: RxFrame {} B (OffloadMeta {} B), RxBuf {} B",
        size_of::<RxFrame<&[u8]>>(),
        size_of::<OffloadMeta>(),
        size_of::<RxBuf<&[u8]>>()
    );
    println!(
        "{:7}{:9}{:>10}{:>10}",
        "queues", "item", "backend", "software"
    );
    for queues in QUEUES {
        let mut steps = dispatch_cases(queues);
        let mut cases: Vec<Box<dyn FnMut() -> f64 + '_>> = steps
            .iter_mut()
            .map(|(_, _, step)| {
                Box::new(move || step().as_nanos() as f64 / BATCH as f64)
                    as Box<dyn FnMut() -> f64 + '_>
            })
            .collect();
        let m = medians(&mut cases, 2000);
        drop(cases);
        let items = steps.len() / 2;
        for (i, (item, _, _)) in steps.iter().take(items).enumerate() {
            println!(
                "{queues:<7}{item:9}{:>10.1}{:>10.1}",
                1000.0 / m[i],
                1000.0 / m[items + i]
            );
        }
    }

    println!();
    let (mut ports, flows) = allocator();
    let mut cases: Vec<Box<dyn FnMut() -> f64 + '_>> = vec![Box::new(|| {
        per_item(flows.len(), || {
            for (i, f) in flows.iter().enumerate() {
                let p = ports.allocate(f, (i % 8) as u16).unwrap();
                ports.release(p).unwrap();
            }
        })
    })];
    let m = medians(&mut cases, 100);
    println!("Source port allocate + release: {:.1} ns", m[0]);
}

fn main() {
    if std::env::args().any(|a| a == "--table") {
        table();
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    toeplitz(&mut c);
    hash_input(&mut c);
    dispatch(&mut c);
    source_port(&mut c);
    c.final_summary();
}
