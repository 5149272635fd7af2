//! One bulk tokio stream alone and beside idle ones on the same queue: what an
//! idle connection costs the busy one.
//!
//! Two runtimes of one queue each, joined by a memory pair (offloads on, MTU
//! 1500, the hardware-offload ports of the report's `hw` cell). Before the
//! measurement, `idle` streams are opened from the client runtime to the
//! server's and left open, idle (spread over several server ports: one
//! source-port range toward one server port holds about 16,000); then each
//! iteration moves [`BYTES`] over one more stream, written in 64 KiB pieces by
//! a tokio task and read by another, and criterion reports bytes per second.
//! The queue threads serve only the streams their engines report events for
//! (`linerate_toe::Event`) and those the application side touched, so the
//! figures should not depend on `idle`.
//!
//! Run with `cargo bench --bench idle` (`-- idle/100000` for one cell;
//! `IDLE_COUNTS=0,1000` sets up only those).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::{MemNic, NicCaps};
use linerate::rt::{Handle, Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate::toe::Config;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes moved per iteration.
const BYTES: usize = 64 << 20;
/// Idle streams per server port.
const PER_PORT: usize = 10_000;
/// The bulk stream's server port.
const BULK_PORT: u16 = 5000;

fn host(i: u8) -> Config {
    Config::new([2, 0, 0, 0, 0, i]).with_ipv4(Ipv4Addr::new(10, 0, 0, i), 24)
}

/// Two runtimes, `idle` idle streams between them (both ends kept), and a
/// listener for the bulk stream.
struct Setup {
    _rts: (Runtime, Runtime),
    client: Handle,
    bulk: TcpListener,
    _idle: Vec<TcpStream>,
    tokio: tokio::runtime::Runtime,
}

fn setup(idle: usize) -> Setup {
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let client_rt = Runtime::start(a, RuntimeConfig::new(host(1))).expect("client runtime");
    let server_rt = Runtime::start(b, RuntimeConfig::new(host(2))).expect("server runtime");
    let (client, server) = (client_rt.handle().clone(), server_rt.handle().clone());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let (bulk, idle_streams) = tokio.block_on(async {
        let bulk = TcpListener::bind(&server, BULK_PORT).await.expect("bind");
        let ports = idle.div_ceil(PER_PORT);
        let mut listeners = Vec::new();
        for p in 0..ports {
            listeners.push(
                TcpListener::bind(&server, 6000 + p as u16)
                    .await
                    .expect("bind"),
            );
        }
        let mut keep = Vec::with_capacity(2 * idle);
        for (p, l) in listeners.iter().enumerate() {
            let n = PER_PORT.min(idle - p * PER_PORT);
            let to = SocketAddr::from(([10, 0, 0, 2], 6000 + p as u16));
            // Connects in flight together, a thousand at a time.
            let mut left = n;
            while left > 0 {
                let k = left.min(1000);
                let connects = async {
                    let mut tasks = Vec::with_capacity(k);
                    for _ in 0..k {
                        let c = client.clone();
                        tasks.push(tokio::spawn(
                            async move { TcpStream::connect(&c, to).await },
                        ));
                    }
                    let mut out = Vec::with_capacity(k);
                    for t in tasks {
                        out.push(t.await.expect("task").expect("connect"));
                    }
                    out
                };
                let accepts = async {
                    let mut out = Vec::with_capacity(k);
                    for _ in 0..k {
                        out.push(l.accept().await.expect("accept").0);
                    }
                    out
                };
                let (cs, ss) = tokio::join!(connects, accepts);
                keep.extend(cs);
                keep.extend(ss);
                left -= k;
            }
        }
        (bulk, keep)
    });
    Setup {
        _rts: (client_rt, server_rt),
        client,
        bulk,
        _idle: idle_streams,
        tokio,
    }
}

/// One stream: connect, write [`BYTES`], read them all at the other end.
async fn transfer(client: &Handle, bulk: &TcpListener) {
    let to = SocketAddr::from(([10, 0, 0, 2], BULK_PORT));
    let (c, s) = tokio::join!(TcpStream::connect(client, to), bulk.accept());
    let (mut c, (mut s, _)) = (c.expect("connect"), s.expect("accept"));
    let writer = tokio::spawn(async move {
        let piece = vec![0x5au8; 64 * 1024];
        let mut left = BYTES;
        while left > 0 {
            let n = left.min(piece.len());
            c.write_all(&piece[..n]).await.expect("write");
            left -= n;
        }
        c.shutdown().await.expect("shutdown");
        c
    });
    let mut buf = vec![0u8; 256 * 1024];
    let mut got = 0;
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            break;
        }
        got += n;
    }
    assert_eq!(got, BYTES);
    drop(writer.await.expect("writer"));
}

fn idle(c: &mut Criterion) {
    let mut g = c.benchmark_group("idle");
    g.throughput(Throughput::Bytes(BYTES as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.warm_up_time(Duration::from_secs(1));
    // `IDLE_COUNTS=0,1000` runs only those cells.
    let counts: Vec<usize> = std::env::var("IDLE_COUNTS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![0, 1_000, 10_000, 100_000]);
    for n in counts {
        let s = setup(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
            b.iter(|| s.tokio.block_on(transfer(&s.client, &s.bulk)));
        });
    }
    g.finish();
}

criterion_group!(benches, idle);
criterion_main!(benches);
