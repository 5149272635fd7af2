//! Layout parse time per frame, for plain TCP and each tunnel stack, with
//! etherparse's `SlicedPacket` on the plain frame beside it.
//!
//! `cargo bench --bench layout`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate::wire::geneve::GeneveOption;
use linerate::wire::layout;
use std::hint::black_box;
use std::time::Duration;

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let payload = [0x5au8; 1400];
    let v4 = || Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
    let v6 = || Ip::v6([0xfd; 16], [0xfe; 16]);
    let under = || Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
    let tcp = || L4::tcp(40000, 443);
    let opts = [GeneveOption {
        class: 0x0102,
        kind: 1,
        data: &[1, 2, 3, 4],
    }];
    vec![
        ("tcp4", FrameBuilder::new(v4(), tcp()).build(&payload)),
        ("tcp6", FrameBuilder::new(v6(), tcp()).build(&payload)),
        (
            "vxlan4-tcp4",
            FrameBuilder::new(v4(), tcp())
                .vxlan(42, under())
                .build(&payload),
        ),
        (
            "vxlan6-tcp6",
            FrameBuilder::new(v6(), tcp())
                .vxlan(42, v6())
                .build(&payload),
        ),
        (
            "geneve4-tcp4",
            FrameBuilder::new(v4(), tcp())
                .geneve(42, &opts, under())
                .build(&payload),
        ),
        (
            "nvgre4-tcp4",
            FrameBuilder::new(v4(), tcp())
                .nvgre(42, 7, under())
                .build(&payload),
        ),
    ]
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("layout");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let frames = frames();
    for (name, f) in &frames {
        g.bench_function(format!("linerate/{name}"), |b| {
            b.iter(|| layout::parse(black_box(f)).map(|l| l.payload))
        });
    }
    for (name, f) in frames.iter().filter(|(n, _)| n.starts_with("tcp")) {
        g.bench_function(format!("etherparse-sliced/{name}"), |b| {
            b.iter(|| {
                etherparse::SlicedPacket::from_ethernet(black_box(f)).map(|p| p.transport.is_some())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
