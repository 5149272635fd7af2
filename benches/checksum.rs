//! Internet checksum throughput: each kernel, the dispatching `partial`, and
//! etherparse's routine, over in-cache buffers from one small packet to a 64 KiB
//! GSO super-segment. Run with `cargo bench --bench checksum`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::wire::checksum::{self, Implementation};

const SIZES: [usize; 6] = [64, 256, 1500, 4096, 16384, 65536];

/// Pseudo-random bytes (xorshift), so no kernel sees a degenerate all-zero buffer.
fn bytes(n: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let max = SIZES[SIZES.len() - 1];
    let buf = bytes(max + 128);
    // Start 64-byte aligned, like a packet buffer from a pool; `unaligned` starts one
    // byte later, the worst case (every vector load straddles a cache line now and then).
    let start = buf.as_ptr().align_offset(64).min(64);

    let mut g = c.benchmark_group("checksum");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for size in SIZES {
        let data = &buf[start..start + size];
        g.throughput(Throughput::Bytes(size as u64));
        for &imp in checksum::available() {
            g.bench_with_input(BenchmarkId::new(imp.name(), size), data, |b, d| {
                b.iter(|| checksum::partial_with(imp, black_box(d), 0))
            });
        }
        g.bench_with_input(BenchmarkId::new("best", size), data, |b, d| {
            b.iter(|| checksum::partial(black_box(d), 0))
        });
        let odd = &buf[start + 1..start + 1 + size];
        g.bench_with_input(BenchmarkId::new("best_unaligned", size), odd, |b, d| {
            b.iter(|| checksum::partial(black_box(d), 0))
        });
        g.bench_with_input(BenchmarkId::new("etherparse", size), data, |b, d| {
            b.iter(|| {
                etherparse::checksum::Sum16BitWords::new()
                    .add_slice(black_box(d))
                    .ones_complement()
            })
        });
    }
    g.finish();
    eprintln!(
        "checksum: best = {:?}, available = {:?} (of {:?})",
        checksum::best(),
        checksum::available(),
        Implementation::ALL
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
