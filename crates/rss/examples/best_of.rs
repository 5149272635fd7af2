//! Best-of-many timings of the Toeplitz paths, dispatch and source port choice.
//!
//! Criterion (`cargo bench --bench rss`) reports means, which on a shared, loaded
//! machine measure the neighbours as much as the code; this prints the best of many
//! short runs instead (the figures in the crate documentation come from here):
//!
//! `cargo run --release -p linerate-rss --example best_of`

// Example code: a failed unwrap is a broken example.
#![allow(clippy::unwrap_used, clippy::expect_used)]
use linerate_offload::{OffloadMeta, RssHash, RssHashType};
use linerate_rss::toeplitz::bitwise;
use linerate_rss::*;
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

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
        for x in b.iter_mut() {
            *x = self.next() as u8;
        }
        b
    }
}

/// Best ns per item over `runs` runs of `f` (which processes `items` items).
fn best(runs: usize, items: usize, mut f: impl FnMut()) -> f64 {
    let mut b = f64::MAX;
    for _ in 0..runs {
        let t0 = Instant::now();
        f();
        b = b.min(t0.elapsed().as_nanos() as f64 / items as f64);
    }
    b
}

fn main() {
    let key = RssKey::MICROSOFT;
    let mut r = Rng(1);
    let kinds = [
        "ipv4", "tcp_ipv4", "udp_ipv4", "ipv6", "tcp_ipv6", "udp_ipv6",
    ];
    let paths: Vec<(&str, Toeplitz)> = [
        ("portable", Path::Portable),
        ("clmul", Path::Clmul),
        ("vpclmul", Path::Vpclmul),
    ]
    .into_iter()
    .filter_map(|(n, p)| Toeplitz::with_path(&key, p).ok().map(|t| (n, t)))
    .collect();
    println!("ns/hash, best of 30 runs of 256 x 20 hashes; NAME-b = Toeplitz::hash_batch");
    print!("{:10}{:>10}", "type", "bitwise");
    for (n, _) in &paths {
        print!("{n:>12}{:>12}", format!("{n}-b"));
    }
    println!();
    for kind in kinds {
        let inputs: Vec<HashInput> = (0..256)
            .map(|_| {
                let (p, q) = (r.next() as u16, r.next() as u16);
                match kind {
                    "ipv4" => HashInput::ipv4(r.bytes(), r.bytes()),
                    "tcp_ipv4" => HashInput::tcp_ipv4(r.bytes(), r.bytes(), p, q),
                    "udp_ipv4" => HashInput::udp_ipv4(r.bytes(), r.bytes(), p, q),
                    "ipv6" => HashInput::ipv6(r.bytes(), r.bytes()),
                    "tcp_ipv6" => HashInput::tcp_ipv6(r.bytes(), r.bytes(), p, q),
                    _ => HashInput::udp_ipv6(r.bytes(), r.bytes(), p, q),
                }
            })
            .collect();
        let bw = best(10, 256, || {
            let mut h = 0;
            for i in &inputs {
                h ^= bitwise(key.as_bytes(), black_box(i).as_bytes());
            }
            black_box(h);
        });
        print!("{kind:10}{bw:>10.2}");
        let mut out = vec![0u32; 256];
        for (_, t) in &paths {
            let one = best(30, 256 * 20, || {
                for _ in 0..20 {
                    let mut h = 0;
                    for i in &inputs {
                        h ^= t.hash(black_box(i));
                    }
                    black_box(h);
                }
            });
            let bat = best(30, 256 * 20, || {
                for _ in 0..20 {
                    t.hash_batch(black_box(&inputs), &mut out);
                    black_box(&out);
                }
            });
            print!("{one:>12.2}{bat:>12.2}");
        }
        println!();
    }

    // Dispatch.
    let frames: Vec<Vec<u8>> = (0..1024)
        .map(|_| {
            FrameBuilder::new(
                Ip::v4(r.bytes(), [10, 0, 0, 1]),
                L4::tcp(r.next() as u16, 80),
            )
            .build(&[0u8; 6])
        })
        .collect();
    let parse = best(30, 1024, || {
        for f in &frames {
            black_box(linerate_wire::layout::parse(black_box(f)).ok());
        }
    });
    println!("layout::parse tcp4: {parse:.2} ns/frame");
    for queues in [2u16, 4, 8] {
        let steering = Arc::new(Steering::new(
            &key,
            IndirectionTable::new(queues).unwrap(),
            HashConfig::default(),
        ));
        let hf = best(30, 1024, || {
            for f in &frames {
                black_box(steering.hash_frame(black_box(f), None));
            }
        });
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
            let (mut d, rx) = Dispatcher::new(steering.clone(), 2048).unwrap();
            let mut drain = Vec::with_capacity(1024);
            let mut b = f64::MAX;
            let mut batch = Vec::with_capacity(256);
            for i in 0..200 {
                batch.extend(ring[(i % 4) * 256..(i % 4 + 1) * 256].iter().cloned());
                let t0 = Instant::now();
                let res = d.dispatch(batch.drain(..));
                let ns = t0.elapsed().as_nanos() as f64 / 256.0;
                b = b.min(ns);
                assert_eq!(res.dropped, 0);
                for q in &rx {
                    drain.clear();
                    q.pop_batch(&mut drain, usize::MAX);
                }
            }
            println!(
                "dispatch {queues} queues {}: {b:.2} ns/frame = {:.1} Mpps (hash_frame alone {hf:.2} ns)",
                if backend {
                    "backend hash "
                } else {
                    "software hash"
                },
                1000.0 / b
            );
        }
    }
    let steering = Arc::new(Steering::new(
        &key,
        IndirectionTable::new(8).unwrap(),
        HashConfig::default(),
    ));
    let mut ports = PortAllocator::new(steering, false, 49152, 65535).unwrap();
    let flows: Vec<FlowTuple> = (0..1024)
        .map(|_| {
            FlowTuple::tcp4(
                std::net::Ipv4Addr::new(10, 0, 0, 1),
                0,
                std::net::Ipv4Addr::from(r.next() as u32),
                443,
            )
        })
        .collect();
    let sp = best(30, 1024, || {
        for (i, f) in flows.iter().enumerate() {
            let p = ports.allocate(f, (i % 8) as u16).unwrap();
            ports.release(p).unwrap();
        }
    });
    println!("source port allocate+release: {sp:.1} ns");
}
