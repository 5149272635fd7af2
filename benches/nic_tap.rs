//! The TAP backend: frames per second against the kernel, the same shape as
//! `nic_xdp` so the two backends compare (root only; skipped with a message
//! otherwise).
//!
//! The TAP is moved into a namespace with the kernel at 10.217.0.1 (offloads
//! toward this side off, so the kernel hands over MTU-sized frames). Frames of
//! 64 bytes (60 in memory, plus the FCS a wire adds) and of 1514 bytes, batches
//! of 64:
//!
//! * `tx`: UDP frames to a MAC that is not the kernel's (dropped on input): one
//!   `write(2)` per frame with its `virtio_net_hdr`.
//! * `rx`: a kernel UDP socket in the namespace sends as fast as it can to our
//!   address (a static neighbour entry, no ARP); one `read(2)` per frame.
//!
//! Throughput is in frames (elements): Gbit/s is that times the frame's bytes
//! times 8.
//!
//! Run with `cargo bench --features system-tests --bench nic_tap`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
use linerate::nic::{Batch, Frame, Nic};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate_testkit::netns::{self, Netns};

const BATCH: usize = 64;
const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x05];

/// (label, frame length, UDP payload for that length).
const SIZES: [(&str, usize, usize); 2] = [("64B", 60, 18), ("1514B", 1514, 1472)];

fn tap(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("nic_tap benches skipped: they need root");
        return;
    }
    let ns = Netns::new("lrtb").expect("namespace");
    let mut tap = Tap::open(&TapConfig {
        offloads: TapOffloads::NONE,
        ..TapConfig::new(netns::unique("lrtb"))
    })
    .expect("tap");
    let name = tap.name().to_owned();
    netns::ip(&["link", "set", &name, "netns", ns.name()]).expect("move");
    let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{name}/disable_ipv6");
    let _ = ns.exec("sh", &["-c", &off]);
    ns.ip(&["addr", "add", "10.217.0.1/24", "dev", &name])
        .expect("addr");
    ns.ip(&["link", "set", &name, "up"]).expect("up");
    ns.ip(&[
        "neigh",
        "add",
        "10.217.0.2",
        "lladdr",
        "02:4c:52:00:00:05",
        "dev",
        &name,
    ])
    .expect("neigh");

    let mut g = c.benchmark_group("tap");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut batch = Batch::with_capacity(BATCH);
    for (label, len, payload) in SIZES {
        let frame = FrameBuilder::new(Ip::v4([10, 217, 0, 2], [10, 217, 0, 9]), L4::udp(1, 2))
            .macs(OUR_MAC, [2, 0x4c, 0x52, 0, 0, 9])
            .build(&vec![0; payload]);
        assert_eq!(frame.len(), len);
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("tx", label), |bch| {
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
    for (label, len, payload) in SIZES {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let sender = ns
            .spawn(move || {
                let s = std::net::UdpSocket::bind("10.217.0.1:0").expect("bind");
                let msg = vec![0u8; payload];
                let mut sent = 0u64;
                while !stop2.load(Ordering::Relaxed) && sent < 100_000_000 {
                    if s.send_to(&msg, "10.217.0.2:9").is_ok() {
                        sent += 1;
                    }
                }
            })
            .expect("sender");
        let ready = tap.readiness(0).expect("readiness");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(BenchmarkId::new("rx", label), |bch| {
            bch.iter(|| {
                batch.clear();
                while batch.len() < BATCH {
                    let room = BATCH - batch.len();
                    if tap.receive(0, &mut batch, room).unwrap_or(0) == 0 {
                        let _ = ready.wait(Duration::from_millis(10));
                    }
                }
                debug_assert!(batch.iter().all(|f| f.len() == len));
            })
        });
        stop.store(true, Ordering::Relaxed);
        let _ = sender.join();
    }
    g.finish();
}

criterion_group!(benches, tap);
criterion_main!(benches);
