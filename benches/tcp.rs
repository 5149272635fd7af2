//! TCP end to end: bulk goodput, connection churn and memory per connection.
//!
//! * `bulk/<stack>/<write>`: the offload report's matrix (`examples/offload_report.rs`)
//!   at 64 B and 64 KiB writes, small transfers per iteration: linerate with
//!   offloads on (the software-offload shim doing GSO, GRO and checksums) and off
//!   (MSS segments, checksums in the engine), and smoltcp 0.14, all on a memory link
//!   at MTU 1500 (`linerate_testkit::bulk`). Criterion reports bytes per second of
//!   the transfer's wall time (connection set-up included; building the stacks
//!   and their buffers not); each iteration opens a connection, moves the bytes and
//!   checks every one.
//! * `connections/open_use_close`: one connection between two engines on the
//!   simulated link, per iteration: connect, accept, a 64-byte request and a
//!   64-byte response, close from both ends, until both sides have let go (the
//!   client's TIME-WAIT is shortened to 2 ms of virtual time so that ports are
//!   recycled). Criterion's time per iteration is the inverse of connections per
//!   second.
//! * memory per established connection: printed once at start, not timed. A
//!   counting global allocator tracks live heap bytes; the figure is the growth for
//!   [`MEM_CONNS`] established, idle connections divided by their number, for both
//!   ends together and per end. These are bytes requested from the allocator (the
//!   send and receive rings are allocated whole, zeroed, at connection set-up; the
//!   kernel commits their pages only when touched).
//!
//! Run with `cargo bench --bench tcp`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::toe::sim::{LinkConfig, Sim};
use linerate::toe::{Engine, Error, Instant, TcpState};
use linerate_testkit::bulk::{self, Stack};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes live on the heap.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the same arguments, which upholds
// the `GlobalAlloc` contract; the counter is only arithmetic on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees for `layout` are passed on unchanged.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` and `layout` come from this allocator, i.e. from `System`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` and `layout` come from `System`; `new_size` is the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(new_size, Ordering::Relaxed);
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Connections established for the memory figure.
const MEM_CONNS: usize = 200;

/// Two engines with offloads on, TIME-WAIT shortened to 2 ms.
fn engine_pair() -> Sim {
    let engines = (1..=2u8)
        .map(|i| {
            let mut cfg = Sim::host_config(i);
            cfg.tcp.msl = Duration::from_millis(1);
            Engine::new(cfg, u64::from(i))
        })
        .collect();
    Sim::new(engines, LinkConfig::default())
}

fn bulk_matrix(c: &mut Criterion) {
    let mut g = c.benchmark_group("bulk");
    g.sample_size(10);
    for write in [64usize, 64 * 1024] {
        let total: u64 = if write == 64 { 1 << 20 } else { 8 << 20 };
        g.throughput(Throughput::Bytes(total));
        for stack in Stack::ALL {
            g.bench_with_input(BenchmarkId::new(stack.name(), write), &write, |b, &w| {
                // The transfer's own wall time: set-up of the pair (buffers, pools)
                // is left out, as in the report.
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| match bulk::transfer(stack, w, total) {
                            Ok(m) => black_box(m).wall,
                            Err(e) => panic!("{}: {e}", stack.name()),
                        })
                        .sum()
                });
            });
        }
    }
    g.finish();
}

/// One connection: open, a request and a response, closed by both ends.
fn open_use_close(sim: &mut Sim, listener: linerate::toe::ListenerHandle) {
    let remote = "10.0.0.2:80".parse().expect("address");
    let c = sim.engines[0]
        .tcp_connect(sim.now, remote)
        .expect("connect");
    let (mut server, mut step) = (None, 0);
    let mut buf = [0u8; 64];
    let limit = sim.now + Duration::from_secs(10);
    let done = sim.run_until(limit, |sim| {
        server = server.or_else(|| sim.engines[1].tcp_accept(listener).ok());
        match step {
            0 => {
                if sim.engines[0].tcp_send(c, &[1; 64]) == Ok(64) {
                    step = 1;
                }
            }
            1 => {
                if let Some(s) = server
                    && sim.engines[1].tcp_recv(s, &mut buf) == Ok(64)
                    && sim.engines[1].tcp_send(s, &[2; 64]) == Ok(64)
                {
                    step = 2;
                }
            }
            2 => {
                if sim.engines[0].tcp_recv(c, &mut buf) == Ok(64) {
                    let _ = sim.engines[0].tcp_close(c);
                    if let Some(s) = server {
                        let _ = sim.engines[1].tcp_close(s);
                    }
                    step = 3;
                }
            }
            _ => {
                let gone = |e: &Engine, h| {
                    matches!(
                        e.tcp_state(h),
                        Err(Error::InvalidHandle) | Ok(TcpState::Closed | TcpState::TimeWait)
                    )
                };
                let server_gone = server.is_none_or(|s| gone(&sim.engines[1], s));
                return gone(&sim.engines[0], c) && server_gone;
            }
        }
        false
    });
    assert!(done, "connection did not complete");
}

fn connections(c: &mut Criterion) {
    let mut sim = engine_pair();
    let listener = sim.engines[1].tcp_listen(80).expect("listen");
    let mut g = c.benchmark_group("connections");
    g.throughput(Throughput::Elements(1));
    g.bench_function("open_use_close", |b| {
        b.iter(|| open_use_close(&mut sim, listener));
    });
    g.finish();
}

/// Live heap bytes per established connection (both ends), measured once.
fn memory_per_connection() {
    let mut sim = engine_pair();
    let listener = sim.engines[1].tcp_listen(80).expect("listen");
    // Warm up: ARP resolved, tables and queues grown for one connection.
    open_use_close(&mut sim, listener);
    let before = LIVE.load(Ordering::Relaxed);
    let remote = "10.0.0.2:80".parse().expect("address");
    let clients: Vec<_> = (0..MEM_CONNS)
        .map(|_| {
            sim.engines[0]
                .tcp_connect(sim.now, remote)
                .expect("connect")
        })
        .collect();
    let mut servers = Vec::new();
    let limit = sim.now + Duration::from_secs(10);
    let ok = sim.run_until(limit, |sim| {
        while let Ok(s) = sim.engines[1].tcp_accept(listener) {
            servers.push(s);
        }
        servers.len() == MEM_CONNS
            && clients
                .iter()
                .all(|&c| sim.engines[0].tcp_state(c) == Ok(TcpState::Established))
    });
    assert!(ok, "connections not established");
    // Let the last ACKs land so nothing is in flight.
    let settle = sim.now + Duration::from_millis(100);
    sim.run_until(settle, |_| false);
    let grown = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    let per_pair = grown / MEM_CONNS;
    let cfg = &sim.engines[0].config().tcp;
    println!(
        "memory per established connection (counting allocator, {MEM_CONNS} idle connections): \
         {per_pair} B for both ends, {} B per end (send buffer {} B + receive buffer {} B configured)",
        per_pair / 2,
        cfg.send_buffer,
        cfg.recv_buffer
    );
    black_box((clients, servers, Instant::ZERO));
}

fn all(c: &mut Criterion) {
    memory_per_connection();
    bulk_matrix(c);
    connections(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
