//! Internet checksum throughput: each kernel, the dispatching `partial`, and
//! etherparse's routine, over in-cache buffers from one small packet to a 64 KiB
//! GSO super-segment, and the one-pass copy and sum each kernel offers beside a
//! copy followed by a sum. Run with `cargo bench --bench checksum`.

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

    // Copy and sum in one pass, as the offloads-off engine fills a frame from its
    // send buffer: the payload lands after the headers (66 bytes into a 64-byte
    // aligned buffer), from wherever it lies in the send buffer.
    let mut g = c.benchmark_group("copy_checksum");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let mut out = vec![0u8; max + 256];
    let dst_at = out.as_ptr().align_offset(64).min(64) + 66;
    for size in [256, 1448, 8948, 65536] {
        let src = &buf[start + 5..start + 5 + size];
        g.throughput(Throughput::Bytes(size as u64));
        // AVX-512 copies with AVX2's kernel (`copy_partial_with`'s docs).
        for &imp in checksum::available()
            .iter()
            .filter(|&&i| i != Implementation::Avx512)
        {
            g.bench_function(BenchmarkId::new(imp.name(), size), |b| {
                b.iter(|| checksum::copy_partial_with(imp, &mut out[dst_at..], black_box(src), 0))
            });
        }
        g.bench_function(BenchmarkId::new("memcpy_then_sum", size), |b| {
            b.iter(|| {
                let d = &mut out[dst_at..dst_at + size];
                d.copy_from_slice(black_box(src));
                checksum::partial(d, 0)
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
