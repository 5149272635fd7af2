//! Many connections: what an idle established connection costs (buffers hold
//! nothing once drained), and that the connection table keeps lookups O(1) as
//! the count grows (the table grows with it, and a segment on one connection
//! among many costs what it costs among few).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Engine, SocketHandle};
use std::collections::HashMap;
use std::time::{Duration, Instant as WallClock};

/// Listener ports on the server: one client address has 16,384 ephemeral
/// ports per server port.
const PORTS: u16 = 64;

fn pair(conns: usize) -> Sim {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.tcp.backlog = conns + 1;
            Engine::new(c, u64::from(i) * 77)
        })
        .collect();
    Sim::new(engines, LinkConfig::default())
}

/// Opens `n` connections from engine 0 to engine 1 (spread over [`PORTS`]
/// server ports), each carrying a 100-byte request that the server reads, and
/// lets them settle idle. Returns the client handles and their peers' handles.
fn establish(sim: &mut Sim, n: usize) -> (Vec<SocketHandle>, Vec<SocketHandle>) {
    let listeners: Vec<_> = (0..PORTS)
        .map(|p| sim.engines[1].tcp_listen(1000 + p).unwrap())
        .collect();
    let mut clients = Vec::with_capacity(n);
    let mut servers = Vec::with_capacity(n);
    let mut buf = [0u8; 256];
    // In batches, so that the link and the queues stay small.
    for batch in (0..n).collect::<Vec<_>>().chunks(4096) {
        for &i in batch {
            let port = 1000 + (i % usize::from(PORTS)) as u16;
            let addr = format!("10.0.0.2:{port}").parse().unwrap();
            let c = sim.engines[0].tcp_connect(sim.now, addr).unwrap();
            assert_eq!(sim.engines[0].tcp_send(c, &[7u8; 100]), Ok(100));
            clients.push(c);
        }
        let want = clients.len();
        let limit = sim.now + Duration::from_secs(30);
        let ok = sim.run_until(limit, |sim| {
            for &l in &listeners {
                while let Ok(s) = sim.engines[1].tcp_accept(l) {
                    servers.push(s);
                }
            }
            servers.len() == want
        });
        assert!(ok, "{} of {want} accepted", servers.len());
    }
    // Every request arrives and is read; the delayed ACKs go out.
    let settle = sim.now + Duration::from_millis(200);
    sim.run_until(settle, |_| false);
    for &s in &servers {
        assert_eq!(sim.engines[1].tcp_recv(s, &mut buf), Ok(100));
    }
    let settle = sim.now + Duration::from_millis(200);
    sim.run_until(settle, |_| false);
    // Accepted in arrival order: pair each client with its server.
    let mut by_peer: HashMap<_, _> = servers
        .iter()
        .map(|&s| {
            let (local, remote) = sim.engines[1].tcp_addrs(s).unwrap();
            ((remote, local), s)
        })
        .collect();
    let servers = clients
        .iter()
        .map(|&c| {
            by_peer
                .remove(&sim.engines[0].tcp_addrs(c).unwrap())
                .unwrap()
        })
        .collect();
    (clients, servers)
}

/// Wall time of `rounds` request/response exchanges on `c` -> `s`.
fn ping_pong(sim: &mut Sim, c: SocketHandle, s: SocketHandle, rounds: usize) -> Duration {
    let mut buf = [0u8; 64];
    let start = WallClock::now();
    for _ in 0..rounds {
        assert_eq!(sim.engines[0].tcp_send(c, &[1u8; 32]), Ok(32));
        let limit = sim.now + Duration::from_secs(1);
        assert!(sim.run_until(limit, |sim| sim.engines[1].tcp_recv(s, &mut buf) == Ok(32)));
        assert_eq!(sim.engines[1].tcp_send(s, &[2u8; 32]), Ok(32));
        assert!(sim.run_until(limit, |sim| sim.engines[0].tcp_recv(c, &mut buf) == Ok(32)));
    }
    start.elapsed()
}

fn check_idle_cost(n: usize) {
    let mut sim = pair(n);
    let (clients, servers) = establish(&mut sim, n);
    for (side, e) in sim.engines.iter().enumerate() {
        let m = e.memory_usage();
        assert_eq!(m.connections, n, "side {side}: {m:?}");
        // Drained buffers hold no storage.
        assert_eq!(m.buffers, 0, "side {side}: {m:?}");
        let beyond_slots = (m.total() - m.slots) / n;
        assert!(
            beyond_slots < 512,
            "side {side}: {beyond_slots} B beyond the slot"
        );
        // The slot table holds each connection's state inline: bounded too.
        let per = m.per_connection();
        assert!(
            per < Engine::slot_size() * 2 + 512,
            "side {side}: {per} B per connection"
        );
        assert!(per < 4096, "side {side}: {per} B per connection");
        // The table grew with the connections: at most 7/8 full, never sparse.
        let (len, cap) = e.table_load();
        assert_eq!(len, n);
        assert!(
            cap >= len && cap <= 2 * len + 64,
            "side {side}: {len} in {cap}"
        );
    }
    // Still connections that work, first and last.
    for i in [0, n - 1] {
        ping_pong(&mut sim, clients[i], servers[i], 1);
    }
}

#[test]
fn ten_thousand_idle_connections_cost_little() {
    check_idle_cost(10_000);
}

/// A segment on one connection costs the same among 100,000 (or the count in
/// `LINERATE_SCALE_CONNS`) as among a few: the median time of an exchange stays
/// within a factor of the small engine's, while the table holds them all.
/// Timing on a shared machine: run alone, in release (`cargo test --release
/// --test scale -- --ignored`).
#[test]
#[ignore = "slow in debug and timing-based; run in release with --ignored"]
fn per_packet_work_does_not_grow_with_the_connection_count() {
    let n: usize = std::env::var("LINERATE_SCALE_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let median = |sim: &mut Sim, c, s| {
        let mut t: Vec<_> = (0..15).map(|_| ping_pong(sim, c, s, 200)).collect();
        t.sort();
        t[t.len() / 2]
    };
    let mut small = pair(16);
    let (c, s) = establish(&mut small, 16);
    let few = median(&mut small, c[7], s[7]);
    let mut big = pair(n);
    let (c, s) = establish(&mut big, n);
    let many = median(&mut big, c[n / 2], s[n / 2]);
    let m = big.engines[1].memory_usage();
    println!(
        "{n} connections: exchange {many:?} vs {few:?} with 16; {} B per connection ({} B slot)",
        m.per_connection(),
        Engine::slot_size()
    );
    assert_eq!(big.engines[1].table_load().0, n);
    // Cache misses grow with the table; the work does not. Allow for them.
    assert!(many < few * 4, "{many:?} with {n} vs {few:?} with 16");
    drop(big);
    check_idle_cost(n.min(200_000));
}
