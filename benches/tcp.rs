//! TCP end to end: bulk goodput, connection churn and memory per connection.
//!
//! * `bulk/<stack>/<write>`: the offload report's matrix (`examples/offload_report/`)
//!   at its six write sizes (64 B to 256 KiB), small transfers per iteration:
//!   linerate with offloads on over plain ports (the software-offload shim doing
//!   GSO, GRO and checksums) and over offload-capable ports, off (MSS segments,
//!   checksums in the engine), and smoltcp 0.14, all on a memory link
//!   at MTU 1500 (`linerate_testkit::bulk`). Criterion reports bytes per second of
//!   the transfer's wall time (connection set-up included; building the stacks
//!   and their buffers not); each iteration opens a connection, moves the bytes and
//!   checks every one.
//! * `tunnel_bulk/<tunnel>-<mode>/<write>`: the report's tunnel experiment, one
//!   way, 1 KiB and 64 KiB writes: VXLAN, GENEVE (two options), NVGRE and no
//!   tunnel ("plain"), with the offloads in hardware, in software or off
//!   (`linerate_testkit::bulk::transfer_tunnel`).
//! * `connections/open_use_close`: one connection between two engines on the
//!   simulated link, per iteration: connect, accept, a 64-byte request and a
//!   64-byte response, close from both ends, until both sides have let go (the
//!   client's TIME-WAIT is shortened to 2 ms of virtual time so that ports are
//!   recycled). Criterion's time per iteration is the inverse of connections per
//!   second.
//! * `connections/batch/<n>`: the engine's own connection rate, without the
//!   simulated link's model (segmentation, checksum completion, faults, a heap of
//!   frames in flight): two engines wired back to back ([`Wire`]) pass frames as
//!   built. Per iteration `n` connections are opened at once; each client sends a
//!   64-byte request, the server answers 64 bytes and closes, the client reads the
//!   answer and the end of stream and closes; then virtual time passes the
//!   server's TIME-WAIT (2 ms here) and both engines are empty again. Both ends run
//!   on one thread, so the elements per second criterion reports are connections
//!   opened, used and closed per second per core, both ends' work included.
//! * `connections/server_end/<n>` and `connections/client_end/<n>`: the same
//!   batches, but criterion is given only the time spent inside one engine's
//!   calls (its socket calls, `handle_frame` and `poll_transmit`, timers), read
//!   with one clock pair around each engine's share of a step rather than per
//!   frame: the rate one core reaches serving (or opening) connections when the
//!   peer runs elsewhere, as for a server or a load balancer. The bench's own
//!   frame copies are counted to the engine whose `poll_transmit` made them.
//! * memory per established connection: printed once at start, not timed. A
//!   counting global allocator tracks live heap bytes; the figure is the growth for
//!   [`MEM_CONNS`] established, idle connections (each carried a 64-byte request
//!   and its response, read) divided by their number, for both ends together and
//!   per end, less what the thread's buffer cache (`toe::sim::internals::cached_buffer_bytes`) grew by
//!   (blocks freed and kept for the next connection, not held by any);
//!   beside it the engine's own accounting (`Engine::memory_usage`).
//!   Buffer storage is allocated as data arrives and released when drained, so
//!   an idle connection holds its slot and table entries only.
//!
//! Run with `cargo bench --bench tcp`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::offload::OffloadMeta;
use linerate::toe::sim::{LinkConfig, Sim};
use linerate::toe::{Engine, Instant, InvalidHandle, ListenerHandle, SocketHandle, TcpState};
use linerate_testkit::bulk::{self, Offload, Stack, Tunnelled};
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
    // The report's write sizes, each moving enough bytes to take a few
    // milliseconds per iteration.
    for write in bulk::WRITES {
        let total: u64 = if write <= 64 {
            1 << 20
        } else if write <= 1024 {
            4 << 20
        } else {
            8 << 20
        };
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

/// TCP bulk through VXLAN, GENEVE and NVGRE beside no tunnel, offloads in
/// hardware, in software and off, at 1 KiB and 64 KiB writes (the report's
/// tunnel experiment, one way).
fn tunnel_bulk(c: &mut Criterion) {
    let mut g = c.benchmark_group("tunnel_bulk");
    g.sample_size(10);
    for write in [1024, 64 * 1024] {
        let total: u64 = 8 << 20;
        g.throughput(Throughput::Bytes(total));
        for kind in Tunnelled::ALL {
            for mode in Offload::ALL {
                let id = BenchmarkId::new(format!("{}-{}", kind.name(), mode.name()), write);
                g.bench_with_input(id, &write, |b, &w| {
                    b.iter_custom(|iters| {
                        (0..iters)
                            .map(
                                |_| match bulk::transfer_tunnel(kind, mode, w, total, false) {
                                    Ok(m) => black_box(m).wall,
                                    Err(e) => panic!("{} {}: {e}", kind.name(), mode.name()),
                                },
                            )
                            .sum()
                    });
                });
            }
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
                        Err(InvalidHandle) | Ok(TcpState::Closed | TcpState::TimeWait)
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

/// Two engines wired back to back: frames go across as built (checksums
/// partial, as between two stacks of one host), with no link model.
struct Wire {
    engines: [Engine; 2],
    /// Frames on their way to engine 0 and 1.
    queues: [Vec<(Vec<u8>, OffloadMeta)>; 2],
    /// Frame buffers to reuse.
    spare: Vec<Vec<u8>>,
    now: Instant,
    /// Time spent inside each engine's calls, kept only when `timing` is on (the
    /// clock reads are a noticeable part of a batch of a thousand, and a large
    /// one of a single connection).
    spent: [Duration; 2],
    timing: bool,
}

impl Wire {
    /// Hosts 1 and 2 of the simulation's addressing, TIME-WAIT 2 ms, a backlog
    /// for `n` connections at once.
    fn new(n: usize) -> Wire {
        let engine = |i: u8| {
            let mut cfg = Sim::host_config(i);
            cfg.tcp.msl = Duration::from_millis(1);
            cfg.tcp.backlog = n + 1;
            // Resolved once (the warm-up), never again during the run.
            cfg.neighbor_ttl = Duration::from_secs(1 << 20);
            Engine::new(cfg, u64::from(i))
        };
        Wire {
            engines: [engine(1), engine(2)],
            queues: [Vec::new(), Vec::new()],
            spare: Vec::new(),
            now: Instant::ZERO,
            spent: [Duration::ZERO; 2],
            timing: false,
        }
    }

    /// The clock, when timing is on.
    fn clock(&self) -> Option<std::time::Instant> {
        self.timing.then(std::time::Instant::now)
    }

    /// Adds the time since `start` to engine `i`'s account.
    fn charge(spent: &mut [Duration; 2], i: usize, start: Option<std::time::Instant>) {
        if let Some(t) = start {
            spent[i] += t.elapsed();
        }
    }

    /// Runs `f` on engine `i`, adding its time to that engine's account.
    fn timed<R>(&mut self, i: usize, f: impl FnOnce(&mut Engine, Instant) -> R) -> R {
        let start = self.clock();
        let r = f(&mut self.engines[i], self.now);
        Wire::charge(&mut self.spent, i, start);
        r
    }

    /// Moves frames both ways until neither engine has anything to send.
    fn pump(&mut self) {
        loop {
            let mut moved = 0;
            let timing = self.timing;
            for (i, e) in self.engines.iter_mut().enumerate() {
                let (q, spare) = (&mut self.queues[1 - i], &mut self.spare);
                let start = timing.then(std::time::Instant::now);
                moved += e.poll_transmit(self.now, &mut |f, m| {
                    let mut b = spare.pop().unwrap_or_default();
                    b.clear();
                    b.extend_from_slice(f);
                    q.push((b, *m));
                });
                Wire::charge(&mut self.spent, i, start);
            }
            if moved == 0 {
                return;
            }
            for (i, (e, q)) in self.engines.iter_mut().zip(&mut self.queues).enumerate() {
                let start = timing.then(std::time::Instant::now);
                for (f, m) in q.drain(..) {
                    e.handle_frame(self.now, &f, &m);
                    self.spare.push(f);
                }
                Wire::charge(&mut self.spent, i, start);
            }
        }
    }

    /// Lets `d` of virtual time pass, running the timers due.
    fn advance(&mut self, d: Duration) {
        self.now += d;
        for i in 0..2 {
            self.timed(i, |e, now| e.handle_timeout(now));
        }
        self.pump();
    }
}

/// `n` connections at once: open, a 64-byte request and response, closed by
/// both ends, TIME-WAIT over.
fn batch(w: &mut Wire, l: ListenerHandle, n: usize, clients: &mut Vec<SocketHandle>) {
    let remote = "10.0.0.2:80".parse().expect("address");
    let mut buf = [0u8; 64];
    clients.clear();
    w.timed(0, |e, now| {
        for _ in 0..n {
            let c = e.tcp_connect(now, remote).expect("connect");
            assert_eq!(e.tcp_send(c, &[1; 64]), Ok(64));
            clients.push(c);
        }
    });
    w.pump();
    let served = w.timed(1, |e, _| {
        let mut served = 0;
        while let Ok(s) = e.tcp_accept(l) {
            assert_eq!(e.tcp_recv(s, &mut buf), Ok(64));
            assert_eq!(e.tcp_send(s, &[2; 64]), Ok(64));
            e.tcp_close(s).expect("close");
            served += 1;
        }
        served
    });
    assert_eq!(served, n);
    w.pump();
    w.timed(0, |e, _| {
        for &c in clients.iter() {
            assert_eq!(e.tcp_recv(c, &mut buf), Ok(64));
            assert_eq!(e.tcp_recv(c, &mut buf), Ok(0));
            e.tcp_close(c).expect("close");
        }
    });
    w.pump();
    // The server's TIME-WAIT (2 MSL) ends.
    w.advance(Duration::from_millis(3));
}

/// A wire with a listener, warmed up and checked to leave nothing behind.
fn warm_wire(n: usize, clients: &mut Vec<SocketHandle>) -> (Wire, ListenerHandle) {
    let mut w = Wire::new(n);
    let l = w.engines[1].tcp_listen(80).expect("listen");
    // Warm up (one connection resolves the neighbours: a thousand SYNs would
    // overflow the queue of frames waiting for ARP), and check that a batch
    // leaves nothing behind.
    batch(&mut w, l, 1, clients);
    batch(&mut w, l, n, clients);
    for e in &w.engines {
        assert_eq!(e.memory_usage().connections, 0, "connections left over");
    }
    (w, l)
}

fn connection_batches(c: &mut Criterion) {
    let mut g = c.benchmark_group("connections/batch");
    for n in [1usize, 1000] {
        let mut clients = Vec::with_capacity(n);
        let (mut w, l) = warm_wire(n, &mut clients);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| batch(&mut w, l, n, &mut clients));
        });
    }
    g.finish();
    // One end's share: the time inside that engine's calls only.
    for (end, name) in [(1, "connections/server_end"), (0, "connections/client_end")] {
        let mut g = c.benchmark_group(name);
        let n = 1000;
        let mut clients = Vec::with_capacity(n);
        let (mut w, l) = warm_wire(n, &mut clients);
        w.timing = true;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                let before = w.spent[end];
                for _ in 0..iters {
                    batch(&mut w, l, n, &mut clients);
                }
                w.spent[end] - before
            });
        });
        g.finish();
    }
}

/// Live heap bytes per established connection (both ends), measured once.
fn memory_per_connection() {
    let mut sim = engine_pair();
    let listener = sim.engines[1].tcp_listen(80).expect("listen");
    // Warm up: ARP resolved, tables and queues grown for one connection.
    open_use_close(&mut sim, listener);
    let cached = linerate::toe::sim::internals::cached_buffer_bytes;
    let before = LIVE.load(Ordering::Relaxed);
    let cached_before = cached();
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
    // A request and a response on each, read; then let the last ACKs land so
    // nothing is in flight.
    for (&c, &s) in clients.iter().zip(&servers) {
        assert_eq!(sim.engines[0].tcp_send(c, &[1; 64]), Ok(64));
        assert_eq!(sim.engines[1].tcp_send(s, &[2; 64]), Ok(64));
    }
    let settle = sim.now + Duration::from_millis(100);
    sim.run_until(settle, |_| false);
    let mut buf = [0u8; 64];
    for (&c, &s) in clients.iter().zip(&servers) {
        assert_eq!(sim.engines[0].tcp_recv(c, &mut buf), Ok(64));
        assert_eq!(sim.engines[1].tcp_recv(s, &mut buf), Ok(64));
    }
    let settle = sim.now + Duration::from_millis(100);
    sim.run_until(settle, |_| false);
    let grown = LIVE
        .load(Ordering::Relaxed)
        .saturating_sub(before)
        .saturating_sub(cached().saturating_sub(cached_before));
    let per_pair = grown / MEM_CONNS;
    let cfg = &sim.engines[0].config().tcp;
    println!(
        "memory per established connection (counting allocator, {MEM_CONNS} idle connections): \
         {per_pair} B for both ends, {} B per end (send buffer {} B + receive buffer {} B configured)",
        per_pair / 2,
        cfg.send_buffer,
        cfg.recv_buffer
    );
    let m = sim.engines[1].memory_usage();
    println!(
        "memory per established connection (Engine::memory_usage, server end): {} B \
         ({} connections: slots {} B, buffers {} B, tables {} B; one slot is {} B)",
        m.per_connection(),
        m.connections,
        m.slots,
        m.buffers,
        m.tables,
        Engine::slot_size()
    );
    black_box((clients, servers, Instant::ZERO));
}

fn all(c: &mut Criterion) {
    memory_per_connection();
    bulk_matrix(c);
    tunnel_bulk(c);
    connections(c);
    connection_batches(c);
}

criterion_group!(benches, all);
criterion_main!(benches);
