//! GSO throughput: 64 KiB super-frames at MSS 1448, per layout, copying and
//! zero-copy output, transport checksums completed or left partial; and checksum
//! completion of a 64 KiB partial frame.
//!
//! Throughput is counted in payload bytes (what the application sent), so the
//! figures compare directly across layouts.
//!
//! `cargo bench --bench gso` (filter with e.g. `-- zero-copy`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../crates/offload/tests/common/mod.rs"]
mod common;

use common::{Spec, Tunnel, build};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter, ZeroCopyBuf};
use linerate_offload::{OffloadMeta, csum};
use std::hint::black_box;
use std::time::Duration;

const MSS: u16 = 1448;

fn layouts() -> Vec<Spec> {
    let spec = |tunnel, outer_v6, ip_v6, udp| {
        let mut s = Spec::new(tunnel, 65536, MSS);
        (s.outer_v6, s.ip_v6, s.udp) = (outer_v6, ip_v6, udp);
        s.outer_csum = true;
        s
    };
    vec![
        spec(Tunnel::None, false, false, false),
        spec(Tunnel::None, false, true, false),
        spec(Tunnel::None, false, false, true),
        spec(Tunnel::Vxlan, false, false, false),
        spec(Tunnel::Vxlan, true, true, false),
        spec(Tunnel::Geneve { options: 2 }, false, false, false),
        spec(Tunnel::Nvgre { csum: false }, false, false, false),
        spec(Tunnel::Nvgre { csum: true }, false, true, false),
    ]
}

fn gso(c: &mut Criterion) {
    for (group, zero_copy, mode) in [
        ("gso/copy", false, CsumMode::Complete),
        ("gso/zero-copy", true, CsumMode::Complete),
        ("gso/copy-partial", false, CsumMode::LeavePartial),
        ("gso/zero-copy-partial", true, CsumMode::LeavePartial),
    ] {
        let mut g = c.benchmark_group(group);
        for spec in layouts() {
            let sup = build(&spec);
            g.throughput(Throughput::Bytes(sup.payload.len() as u64));
            let mut seg = Segmenter::new(mode);
            let (mut out, mut zc) = (SegmentBuf::new(), ZeroCopyBuf::new());
            g.bench_function(BenchmarkId::from_parameter(spec.name()), |b| {
                if zero_copy {
                    b.iter(|| seg.segment_zero_copy(black_box(&sup.frame), &sup.meta, &mut zc))
                } else {
                    b.iter(|| seg.segment(black_box(&sup.frame), &sup.meta, &mut out))
                }
            });
        }
        g.finish();
    }
}

fn completion(c: &mut Criterion) {
    let mut g = c.benchmark_group("csum");
    for spec in [
        Spec::new(Tunnel::None, 65536, MSS),
        Spec::new(Tunnel::Vxlan, 65536, MSS),
    ] {
        let sup = build(&spec);
        let meta = OffloadMeta {
            gso: None,
            ..sup.meta
        };
        g.throughput(Throughput::Bytes(sup.frame.len() as u64));
        let mut frame = sup.frame.clone();
        let linerate_offload::Checksum::Partial { start, offset } = meta.csum else {
            panic!("not partial")
        };
        let at = usize::from(start + offset);
        let pseudo = [sup.frame[at], sup.frame[at + 1]];
        g.bench_function(BenchmarkId::new("complete", spec.name()), |b| {
            b.iter(|| {
                // Complete from the same state each time: restore the pseudo sum.
                frame[at..at + 2].copy_from_slice(&pseudo);
                csum::complete(black_box(&mut frame), &meta)
            })
        });
        let l = sup.meta.layout.unwrap();
        g.bench_function(BenchmarkId::new("verify", spec.name()), |b| {
            b.iter(|| csum::verify(black_box(&frame), &l))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = gso, completion
}
criterion_main!(benches);
