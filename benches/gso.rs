//! GSO throughput: 64 KiB super-frames at MSS 1448, per layout, copying and
//! zero-copy output, transport checksums completed or left partial; the NIC
//! shim's software GSO onto a plain memory port, scatter-gather (headers plus
//! references to the super-frame's payload, checksums completed) against
//! copying each segment whole (`gso/shim-sg`, `gso/shim-copy`), and the
//! scatter-gather segmentation alone (`gso/sg-frames`); and checksum
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

#[path = "../crates/offload/tests/it/common/mod.rs"]
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

/// Scatter-gather GSO alone ([`linerate_nic::shim::segment_sg`]): the
/// super-frame shared once, per segment a pooled head with its headers and a
/// reference to its payload, checksums completed by summing the payload where
/// it lies; then the segments dropped (the super-frame's buffer goes back to
/// its pool with the last one, and is handed out again next round).
fn sg_frames(c: &mut Criterion<CpuTime>) {
    use linerate_nic::shim::segment_sg;
    use linerate_nic::{Batch, Frame, Pool, PoolConfig};
    let mut g = c.benchmark_group("gso/sg-frames");
    for mut spec in layouts() {
        spec.payload = 60_000;
        let sup = build(&spec);
        g.throughput(Throughput::Bytes(sup.payload.len() as u64));
        let (big, small) = (Pool::new(PoolConfig::super_frames()), Pool::default());
        let mut seg = Segmenter::new(CsumMode::Complete);
        let mut out = Batch::with_capacity(64);
        let len = sup.frame.len();
        drop(big.alloc_from(&sup.frame));
        let mut first = true;
        g.bench_function(BenchmarkId::from_parameter(spec.name()), |b| {
            b.iter(|| {
                let mut buf = big.alloc();
                buf.append(len);
                if first {
                    assert!(buf[..] == sup.frame[..], "the pool gave another buffer");
                    first = false;
                }
                let frame = Frame::new(buf, sup.meta);
                let n = segment_sg(&mut seg, &small, &mut out, frame).unwrap();
                out.clear();
                n
            })
        });
    }
    g.finish();
}

/// Scatter-gather GSO of a scatter-gather super-frame (an engine's
/// super-segment referencing its send buffer): a head holding the headers,
/// the payload in two fragments of a shared `Bytes` (a chunk boundary in the
/// middle); per segment a pooled head and a reference to its payload (the
/// segment across the boundary gathered into a buffer of its own), checksums
/// completed by summing the payload where it lies.
fn sg_pieces(c: &mut Criterion<CpuTime>) {
    use linerate_nic::shim::segment_sg;
    use linerate_nic::{Batch, Frag, Frame, Pool, SharedBuf};
    let mut g = c.benchmark_group("gso/sg-pieces");
    for mut spec in layouts() {
        spec.payload = 60_000;
        let sup = build(&spec);
        g.throughput(Throughput::Bytes(sup.payload.len() as u64));
        let pool = Pool::default();
        let mut seg = Segmenter::new(CsumMode::Complete);
        let mut out = Batch::with_capacity(64);
        let hdr = sup.frame.len() - sup.payload.len();
        let payload = SharedBuf::from_bytes(sup.frame[hdr..].to_vec().into());
        let cut = payload.len() / 2 + 7;
        let halves = [(0, cut), (cut, payload.len() - cut)];
        g.bench_function(BenchmarkId::from_parameter(spec.name()), |b| {
            b.iter(|| {
                let mut frame = Frame::new(pool.alloc_from(&sup.frame[..hdr]), sup.meta);
                for (at, len) in halves {
                    if let Some(f) = Frag::new(payload.clone(), at, len) {
                        let _ = frame.frags.push(f);
                    }
                }
                let n = segment_sg(&mut seg, &pool, &mut out, frame).unwrap();
                out.clear();
                n
            })
        });
    }
    g.finish();
}

/// The shim's software GSO end to end onto a plain memory port (no TSO, no
/// checksum offload): transmit one 64 KiB super-frame, take its segments off
/// the peer port (scatter-gather frames as they are) and drop them. Each round
/// reuses the super-frame's buffer: it comes back to the pool when its last
/// segment goes, and the pool hands it out again with the frame still in it.
fn shim(c: &mut Criterion<CpuTime>) {
    use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
    for (group, tx_sg) in [("gso/shim-sg", true), ("gso/shim-copy", false)] {
        let mut g = c.benchmark_group(group);
        // Layouts of the GSO groups, with 60 000 bytes of payload: the shim
        // takes super-frames of at most 64 KiB with their headers.
        for mut spec in [
            layouts()[0].clone(),
            layouts()[1].clone(),
            layouts()[3].clone(),
        ] {
            spec.payload = 60_000;
            let sup = build(&spec);
            g.throughput(Throughput::Bytes(sup.payload.len() as u64));
            // Room for MSS 1448 under the largest headers (IPv6, VXLAN).
            let caps = NicCaps {
                mtu: 1600,
                ..NicCaps::plain()
            };
            let (a, mut b) = MemNic::pair(caps, caps);
            assert!(b.set_rx_sg(true));
            let mut a = Shim::new(
                a,
                ShimConfig {
                    tx_sg,
                    ..ShimConfig::all()
                },
            )
            .unwrap();
            let (mut tx, mut rx) = (Batch::new(), Batch::with_capacity(256));
            let len = sup.frame.len();
            drop(a.pool().alloc_from(&sup.frame));
            let mut full_check = true;
            let mut round = |a: &mut Shim<MemNic>, b: &mut MemNic| {
                let mut buf = a.pool().alloc();
                buf.append(len);
                // The whole frame once, then its ends (a 64 KiB compare per
                // round would weigh as much as the work measured).
                let same = if full_check {
                    buf[..] == sup.frame[..]
                } else {
                    buf[..64] == sup.frame[..64] && buf[len - 64..] == sup.frame[len - 64..]
                };
                assert!(same, "the pool gave another buffer");
                full_check = false;
                tx.push(Frame::new(buf, sup.meta));
                a.transmit(0, &mut tx).unwrap();
                let n = b.receive(0, &mut rx, 256).unwrap();
                rx.clear();
                n
            };
            let n = round(&mut a, &mut b);
            assert_eq!(n, sup.payload.len().div_ceil(usize::from(MSS)));
            g.bench_function(BenchmarkId::from_parameter(spec.name()), |bch| {
                bch.iter(|| round(&mut a, &mut b))
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
    targets = gso, sg_frames, sg_pieces, shim, completion
}
criterion_main!(benches);
