//! GSO throughput: 64 KiB super-frames at MSS 1448, per layout, copying and
//! zero-copy output, transport checksums completed or left partial; and checksum
//! completion of a 64 KiB partial frame.
//!
//! Throughput is counted in payload bytes (what the application sent), so the
//! figures compare directly across layouts.
//!
//! Time is the CPU time of the benchmarking thread (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: the machines this runs on are shared, and time spent descheduled
//! says nothing about the code. `LINERATE_BENCH_WALL=1` measures wall time instead.
//!
//! `cargo bench --bench gso` (filter with e.g. `-- zero-copy`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../crates/offload/tests/common/mod.rs"]
mod common;

use common::{Spec, Tunnel, build};
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter, ZeroCopyBuf};
use linerate_offload::{OffloadMeta, csum};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// CPU time of the calling thread in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`), or
/// wall time off Linux or when `LINERATE_BENCH_WALL` is set.
struct CpuTime {
    wall: WallTime,
    epoch: Instant,
    use_wall: bool,
}

#[cfg(target_os = "linux")]
mod thread_clock {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }

    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }

    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

    /// The calling thread's CPU time in nanoseconds.
    pub fn now() -> Option<u64> {
        let mut ts = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec (two 64-bit fields on 64-bit
        // Linux) through a pointer to a live, properly aligned one.
        let r = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

#[cfg(not(target_os = "linux"))]
mod thread_clock {
    pub fn now() -> Option<u64> {
        None
    }
}

impl CpuTime {
    fn new() -> CpuTime {
        let use_wall = std::env::var_os("LINERATE_BENCH_WALL").is_some()
            || cfg!(not(all(target_os = "linux", target_pointer_width = "64")))
            || thread_clock::now().is_none();
        CpuTime {
            wall: WallTime,
            epoch: Instant::now(),
            use_wall,
        }
    }

    fn now(&self) -> u64 {
        match self.use_wall {
            false => thread_clock::now().unwrap_or(0),
            true => self.epoch.elapsed().as_nanos() as u64,
        }
    }
}

impl Measurement for CpuTime {
    type Intermediate = u64;
    type Value = u64;

    fn start(&self) -> u64 {
        self.now()
    }
    fn end(&self, start: u64) -> u64 {
        self.now().saturating_sub(start)
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, like wall time.
        self.wall.formatter()
    }
}

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

fn gso(c: &mut Criterion<CpuTime>) {
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

fn completion(c: &mut Criterion<CpuTime>) {
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
        let l = linerate_wire::layout::parse(&sup.frame).unwrap();
        g.bench_function(BenchmarkId::new("verify", spec.name()), |b| {
            b.iter(|| csum::verify(black_box(&frame), &l))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(CpuTime::new())
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = gso, completion
}
criterion_main!(benches);
