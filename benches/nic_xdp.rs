//! The AF_XDP backend: frames per second over a veth pair (root only; skipped
//! with a message otherwise).
//!
//! One veth end stays in the root namespace with AF_XDP on its queue 0, the
//! other is in a namespace with the kernel at 10.216.0.1. Frames of 64 bytes
//! (60 in memory, plus the FCS a wire adds) and of 1514 bytes (a 1500-byte IP
//! packet), batches of 64:
//!
//! * `tx`: UDP frames to a MAC that is not the kernel's (the kernel drops them on
//!   input, like the TAP bench's writes): the cost of copying into the UMEM, the
//!   tx ring and the copy-mode `sendto` that hands them to veth.
//! * `rx`: a kernel UDP socket in the namespace sends as fast as it can to our
//!   address (a static neighbour entry, no ARP), up to 64 datagrams per `send` through
//!   UDP segmentation offload (`UDP_SEGMENT`), since a system call per datagram
//!   (about 0.17 Mpps here) is slower than the receive side (the kernel segments
//!   them before veth: the peer's `tx-udp-segmentation` is off); the bench receives 64
//!   frames per iteration: rx ring, copy out of the UMEM, fill ring. On veth the
//!   XDP program and the copy into the UMEM run on the sender's core (veth's NAPI),
//!   so the sender's core bounds what is received.
//!
//! Both with the XDP program attached generic (SKB) and native (veth has it),
//! copy mode either way. Throughput is in frames (elements): Gbit/s is that
//! times the frame's bytes times 8.
//!
//! Each case also prints frames per second of the bench thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`, user and system, over warm-up and measurement):
//! what one core running linerate's side moves. For `tx` that includes the
//! kernel's copy-mode transmit in `sendto` (and veth's delivery to the peer,
//! which runs in it); for `rx` it is the ring, the copy out of the UMEM, the fill
//! ring and the waits, while the sender's core pays for the XDP program.
//!
//! Run with `cargo bench --features af-xdp --bench nic_xdp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::xdp::{Xdp, XdpAttach, XdpConfig};
use linerate::nic::{Batch, Counter, Frame, Nic};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate_testkit::netns::{self, Netns, RootVeth};

const BATCH: usize = 64;
const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x04];

/// The pair, the namespace and the kernel's address on it, with a static
/// neighbour entry for our address (no ARP).
fn veth_pair() -> (RootVeth, Netns) {
    let ns = Netns::new("lrxb").expect("namespace");
    let veth = RootVeth::new("lx", &ns, "10.216.0.1/24").expect("veth");
    ns.ip(&[
        "neigh",
        "add",
        "10.216.0.2",
        "lladdr",
        "02:4c:52:00:00:04",
        "dev",
        &veth.peer,
    ])
    .expect("neigh");
    // Segment the sender's UDP_SEGMENT sends before veth: with the XDP
    // program attached generically, a datagram still in one super-frame
    // would reach the socket as one frame (attached natively, veth turns
    // the peer's segmentation off itself).
    let off = ns.exec("ethtool", &["-K", &veth.peer, "tx-udp-segmentation", "off"]);
    if !off.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "ethtool -K {} tx-udp-segmentation off failed: {off:?}",
            veth.peer
        );
    }
    (veth, ns)
}

/// (label, frame length, UDP payload for that length).
const SIZES: [(&str, usize, usize); 2] = [("64B", 60, 18), ("1514B", 1514, 1472)];

fn bench_mode(c: &mut Criterion, attach: XdpAttach, group: &str) {
    let (veth, ns) = veth_pair();
    let mut xdp = match Xdp::open(&XdpConfig {
        attach,
        mount_bpffs: true,
        ..XdpConfig::new(veth.ours.clone())
    }) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("{group}: AF_XDP open failed, skipped: {e}");
            return;
        }
    };
    let mut g = c.benchmark_group(group);
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut batch = Batch::with_capacity(BATCH);
    for (label, len, payload) in SIZES {
        let frame = FrameBuilder::new(Ip::v4([10, 216, 0, 2], [10, 216, 0, 9]), L4::udp(1, 2))
            .macs(OUR_MAC, [2, 0x4c, 0x52, 0, 0, 9])
            .build(&vec![0; payload]);
        assert_eq!(frame.len(), len);
        g.throughput(Throughput::Elements(BATCH as u64));
        let tx_before = xdp.counters().total(Counter::TxPackets);
        let cpu = thread_cpu();
        g.bench_function(BenchmarkId::new("tx", label), |bch| {
            bch.iter(|| {
                batch.clear();
                for _ in 0..BATCH {
                    batch.push(Frame::plain(xdp.pool().alloc_from(&frame)));
                }
                while !batch.is_empty() {
                    if xdp.transmit(0, &mut batch).is_err() {
                        break;
                    }
                }
            })
        });
        let sent = xdp.counters().total(Counter::TxPackets) - tx_before;
        per_core(&format!("{group}/tx/{label}"), sent, thread_cpu() - cpu);
    }
    for (label, len, payload) in SIZES {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let sender = ns
            .spawn(move || {
                let s = std::net::UdpSocket::bind("10.216.0.1:0").expect("bind");
                s.connect("10.216.0.2:9").expect("connect");
                // 64 datagrams per send where the kernel segments them.
                // (at most 64 KiB of UDP payload per send).
                let per = GSO_SEGMENTS.min(65_000 / payload);
                let per = if udp_segment(&s, payload) { per } else { 1 };
                let msg = vec![0u8; payload * per];
                let mut sent = 0u64;
                while !stop2.load(Ordering::Relaxed) && sent < 1_000_000_000 {
                    match s.send(&msg) {
                        Ok(_) => sent += per as u64,
                        // The veth's queue is full: the datagrams are dropped.
                        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                        Err(e) => {
                            eprintln!("{label}: the kernel's sender stopped: {e}");
                            break;
                        }
                    }
                }
                stop2.store(true, Ordering::Relaxed);
                sent
            })
            .expect("sender");
        let rx_before = xdp.counters().total(Counter::RxPackets);
        let started = Instant::now();
        let cpu = thread_cpu();
        let ready = xdp.readiness(0).expect("readiness");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("rx", label), |bch| {
            bch.iter(|| {
                batch.clear();
                while batch.len() < BATCH {
                    let room = BATCH - batch.len();
                    if xdp.receive(0, &mut batch, room).unwrap_or(0) == 0 {
                        // The sender gave up: nothing more will come.
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let _ = ready.wait(Duration::from_millis(10));
                    }
                }
                debug_assert!(batch.iter().all(|f| f.len() == len));
            })
        });
        let cpu = thread_cpu() - cpu;
        stop.store(true, Ordering::Relaxed);
        let sent = sender.join().ok().and_then(Result::ok).unwrap_or(0);
        // Who was the limit: the kernel's sender, or this side (frames the
        // kernel dropped at the socket because the rx ring was full).
        let secs = started.elapsed().as_secs_f64();
        let got = xdp.counters().total(Counter::RxPackets) - rx_before;
        let k = xdp.statistics(0).unwrap_or_default();
        eprintln!(
            "{group}/rx/{label}: kernel sent {:.0} kpps, received {:.0} kpps, \
             dropped at the socket so far: ring full {}, other {}",
            sent as f64 / secs / 1e3,
            got as f64 / secs / 1e3,
            k.rx_ring_full,
            k.rx_dropped
        );
        per_core(&format!("{group}/rx/{label}"), got, cpu);
    }
    g.finish();
    drop(xdp);
    drop(veth);
}

/// CPU time the calling thread has used (user and system).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    #[allow(unsafe_code)]
    // SAFETY: a valid clock id and a timespec to write.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// Prints `frames` over `cpu`: frames per second of one core's time.
fn per_core(what: &str, frames: u64, cpu: Duration) {
    let secs = cpu.as_secs_f64();
    // A case the bench's filter left out ran nothing.
    if secs > 0.0 && frames > 0 {
        eprintln!(
            "{what}: {frames} frames in {secs:.2} s of this thread's CPU: {:.2} Mpps per core \
             ({:.0} ns per frame)",
            frames as f64 / secs / 1e6,
            secs * 1e9 / frames.max(1) as f64
        );
    }
}

/// Datagrams per send with UDP segmentation offload.
const GSO_SEGMENTS: usize = 64;

/// Turns on UDP segmentation offload (`UDP_SEGMENT`, linux/udp.h) on `s`
/// with segments of `size` bytes; false if the kernel refuses.
fn udp_segment(s: &std::net::UdpSocket, size: usize) -> bool {
    use std::os::fd::AsRawFd;
    const UDP_SEGMENT: libc::c_int = 103;
    let v = libc::c_int::try_from(size).unwrap_or(0);
    #[allow(unsafe_code)]
    // SAFETY: a live socket and a c_int option value of its size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            std::ptr::from_ref(&v).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

fn xdp(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("nic_xdp benches skipped: they need root");
        return;
    }
    bench_mode(c, XdpAttach::Generic, "xdp_generic");
    bench_mode(c, XdpAttach::Native, "xdp_native");
}

criterion_group!(benches, xdp);
criterion_main!(benches);
