//! GRO throughput in packets per second: MSS-sized (1448-byte) TCP segments of 1,
//! 16 and 1024 flows interleaved round robin, fed in NAPI-sized batches of 64 with a
//! flush at each batch end; plain IPv4 and TCP/IPv4 in VXLAN over IPv4.
//!
//! The frames carry the meta a NIC layer hands GRO: checksums verified; GRO
//! parses each frame (the meta carries no layout). The `layout` cases give GRO
//! a layout the caller parsed beforehand ([`Gro::receive_with_layout`], parsing
//! not timed): the difference is what the parse costs. The `verify` case leaves
//! the checksums to GRO too, which then verifies each TCP checksum while it
//! copies the payload, as behind a NIC without receive checksum offload. With
//! 1024 flows and Linux's default table of 64 runs, runs are pushed out before
//! they grow: that is the worst case; the `table1024` case gives GRO room for all.
//!
//! The `chain` cases are frag-list GRO ([`Gro::chaining`]): each frame lies in a
//! shared, reference-counted buffer, as a pool's, split into headers and a
//! handle to its payload as a scatter-gather frame comes; GRO parses it (timed)
//! unless it continues the run last touched; runs keep the handles (a
//! reference count each) instead of copying the payloads, and the sink takes
//! each delivered chain.
//!
//! `cargo bench --bench gro`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use linerate::offload::gro::{ChainSink, Gro, GroConfig};
use linerate::offload::{Checksum, OffloadMeta};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate::wire::etherparse::TcpHeader;
use linerate::wire::layout::{self, Layout};
use std::hint::black_box;
use std::ops::Range;
use std::rc::Rc;
use std::time::Duration;

const MSS: usize = 1448;
const PACKETS: usize = 2048;
const BATCH: usize = 64;

/// Segment `i` of flow `f`.
fn segment(f: usize, i: usize, vxlan: bool) -> Vec<u8> {
    let seq = 1 + (i * MSS) as u32;
    let mut tcp = TcpHeader::new(10_000 + f as u16, 443, seq, 65535);
    tcp.ack = true;
    tcp.acknowledgment_number = 1;
    let mut ip = Ip::v4([10, 0, (f >> 8) as u8, f as u8], [10, 1, 0, 1]);
    if let Ip::V4(h) = &mut ip {
        h.identification = i as u16;
    }
    let b = FrameBuilder::new(ip, L4::Tcp(tcp));
    let b = if vxlan {
        let mut outer = Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
        if let Ip::V4(h) = &mut outer {
            h.identification = i as u16;
        }
        b.vxlan(42, outer)
    } else {
        b
    };
    b.build(&[0x5a; MSS])
}

/// `PACKETS` segments of `flows` flows, round robin, with their meta (checksums
/// verified if `verified`) and their layout.
fn train(flows: usize, vxlan: bool, verified: bool) -> Vec<(Vec<u8>, OffloadMeta, Layout)> {
    let per_flow = PACKETS / flows;
    let mut v = Vec::with_capacity(PACKETS);
    for i in 0..per_flow {
        for f in 0..flows {
            let frame = segment(f, i, vxlan);
            let meta = OffloadMeta {
                csum: if verified {
                    Checksum::Verified { levels: 1 }
                } else {
                    Checksum::None
                },
                ..OffloadMeta::plain()
            };
            let l = layout::parse(&frame).unwrap_or_default();
            v.push((frame, meta, l));
        }
    }
    v
}

/// A payload handle: a shared buffer and the range of it that is the payload.
#[derive(Clone)]
struct Pay(Rc<Vec<u8>>, Range<usize>);

impl AsRef<[u8]> for Pay {
    fn as_ref(&self) -> &[u8] {
        self.0.get(self.1.clone()).unwrap_or_default()
    }
}

/// Counts what leaves a chaining GRO and takes (drops) each chain.
struct Count {
    bytes: usize,
}

impl ChainSink<Pay> for Count {
    fn frame(&mut self, head: &[u8], payload: &Pay, _: &OffloadMeta) {
        self.bytes += head.len() + payload.1.len();
    }
    fn run(&mut self, head: &[u8], chain: &mut Vec<Pay>, _: &OffloadMeta) {
        self.bytes += head.len();
        for p in chain.drain(..) {
            self.bytes += p.1.len();
        }
    }
}

fn bench_chain(c: &mut Criterion) {
    let mut g = c.benchmark_group("gro");
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(800))
        .sample_size(30);
    // (name, flows, vxlan, verified, table size)
    let cases: &[(&str, usize, bool, bool, usize)] = &[
        ("tcp4-chain/1", 1, false, true, 64),
        ("tcp4-chain/16", 16, false, true, 64),
        ("tcp4-chain/1024", 1024, false, true, 64),
        ("tcp4-chain/1024-table1024", 1024, false, true, 1024),
        ("tcp4-chain-verify/1", 1, false, false, 64),
        ("vxlan4-tcp4-chain/1", 1, true, true, 64),
    ];
    for &(name, flows, vxlan, verified, max_flows) in cases {
        // Each frame in its buffer, split where its payload starts (as a
        // scatter-gather frame comes: headers, then a reference to the payload).
        let frames: Vec<(Rc<Vec<u8>>, usize, OffloadMeta)> = train(flows, vxlan, verified)
            .into_iter()
            .map(|(f, m, l)| (Rc::new(f), usize::from(l.payload), m))
            .collect();
        let cfg = GroConfig {
            max_flows,
            ..GroConfig::default()
        };
        let mut gro = Gro::<Pay>::chaining(cfg);
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut sink = Count { bytes: 0 };
                for batch in frames.chunks(BATCH) {
                    for (f, at, m) in batch {
                        let pay = Pay(Rc::clone(f), *at..f.len());
                        let head = f.get(..*at).unwrap_or_default();
                        // GRO parses only a frame that does not continue a run.
                        let parse = || cfg.layout.parse(f);
                        gro.receive_chained(0, head, &pay, parse, m, &mut sink);
                    }
                    gro.flush_all_chained(&mut sink);
                }
                black_box(sink.bytes)
            })
        });
        let c = gro.counters();
        eprintln!(
            "{name}: {:.1} segments per delivered frame",
            c.received as f64 / c.delivered.max(1) as f64
        );
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("gro");
    g.throughput(Throughput::Elements(PACKETS as u64));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(800))
        .sample_size(30);
    // (name, flows, vxlan, layout given, verified, table size)
    let cases: &[(&str, usize, bool, bool, bool, usize)] = &[
        ("tcp4/1", 1, false, false, true, 64),
        ("tcp4/16", 16, false, false, true, 64),
        ("tcp4/1024", 1024, false, false, true, 64),
        ("tcp4/1024-table1024", 1024, false, false, true, 1024),
        ("tcp4-layout/1", 1, false, true, true, 64),
        ("tcp4-verify/1", 1, false, false, false, 64),
        ("vxlan4-tcp4/1", 1, true, false, true, 64),
        ("vxlan4-tcp4/16", 16, true, false, true, 64),
        ("vxlan4-tcp4-layout/1", 1, true, true, true, 64),
    ];
    for &(name, flows, vxlan, given, verified, max_flows) in cases {
        let frames = train(flows, vxlan, verified);
        let mut gro = Gro::new(GroConfig {
            max_flows,
            ..GroConfig::default()
        });
        g.bench_function(name, |b| {
            b.iter(|| {
                let mut bytes = 0usize;
                let mut sink = |f: &[u8], m: &OffloadMeta| {
                    bytes += f.len() + usize::from(m.gso.is_some());
                };
                for batch in frames.chunks(BATCH) {
                    if given {
                        for (f, m, l) in batch {
                            gro.receive_with_layout(0, f, l, m, &mut sink);
                        }
                        gro.flush_all(&mut sink);
                    } else {
                        let items = batch.iter().map(|(f, m, _)| (f.as_slice(), *m));
                        gro.receive_batch(0, items, &mut sink);
                    }
                }
                black_box(bytes)
            })
        });
        let c = gro.counters();
        eprintln!(
            "{name}: {:.1} segments per delivered frame",
            c.received as f64 / c.delivered.max(1) as f64
        );
    }
    g.finish();
}

criterion_group!(benches, bench, bench_chain);
criterion_main!(benches);
