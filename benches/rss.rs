//! Toeplitz ns/hash per hash type per path (bitwise reference, portable tables,
//! PCLMULQDQ), and software dispatch Mpps into 2, 4 and 8 queues.
//!
//! `cargo bench --bench rss`

// Benchmark set-up: a failed unwrap is a broken benchmark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::rss::toeplitz::bitwise;
use linerate::rss::{HashInput, Path, RssKey, Toeplitz};
use std::hint::black_box;
use std::time::Duration;

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

fn toeplitz(c: &mut Criterion) {
    let mut g = c.benchmark_group("toeplitz");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    let key = RssKey::MICROSOFT;
    let mut rng = Rng(7);
    let mut paths = vec![(
        "portable",
        Toeplitz::with_path(&key, Path::Portable).unwrap(),
    )];
    if let Ok(t) = Toeplitz::with_path(&key, Path::Clmul) {
        paths.push(("clmul", t));
    }
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

criterion_group!(benches, toeplitz);
criterion_main!(benches);
