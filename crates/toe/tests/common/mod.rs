//! Helpers shared by the integration tests: a bulk transfer between two engines
//! of a simulation, driven as two small applications would.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod raw;
pub mod udp;

use linerate_toe::sim::Sim;
use linerate_toe::{Error, Instant, SocketHandle, TcpState};
use std::net::SocketAddr;
use std::time::Duration;

/// FNV-1a, 64 bits: a cheap content hash to compare transfers by.
pub fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The result of [`transfer`].
#[derive(Debug)]
pub struct Transfer {
    pub received: Vec<u8>,
    /// Virtual time from connect to the receiver's end of stream.
    pub elapsed: Duration,
    pub client: SocketHandle,
    pub server: SocketHandle,
}

/// Sends `data` from engine `from` to a listener on engine `to` at `server`,
/// then closes both ends; returns what arrived.
pub fn transfer(
    sim: &mut Sim,
    from: usize,
    to: usize,
    server: SocketAddr,
    data: &[u8],
    limit: Duration,
) -> Transfer {
    let l = sim.engines[to].tcp_listen(server.port()).unwrap();
    let start = sim.now;
    let c = sim.engines[from].tcp_connect(start, server).unwrap();
    let mut s = None;
    let mut sent = 0;
    let mut shut = false;
    let mut received = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 256 * 1024];
    let mut eof_at = None;
    let deadline = start + limit;
    let ok = sim.run_until(deadline, |sim| {
        if s.is_none() {
            s = sim.engines[to].tcp_accept(l).ok();
        }
        while sent < data.len() {
            match sim.engines[from].tcp_send(c, &data[sent..]) {
                Ok(n) => sent += n,
                Err(Error::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == data.len() && !shut {
            sim.engines[from].tcp_shutdown(c).unwrap();
            shut = true;
        }
        if let Some(s) = s {
            loop {
                match sim.engines[to].tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof_at.get_or_insert(sim.now);
                        break;
                    }
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
        eof_at.is_some()
    });
    assert!(
        ok,
        "transfer did not finish: sent {sent}, received {} of {}",
        received.len(),
        data.len()
    );
    let server_h = s.unwrap();
    // Close both sides and let the FIN exchange finish.
    sim.engines[to].tcp_close(server_h).unwrap();
    let end = sim.now + Duration::from_secs(120);
    let closed = sim.run_until(end, |sim| {
        matches!(
            sim.engines[from].tcp_state(c),
            Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed)
        )
    });
    assert!(
        closed,
        "client did not see the close: {:?}",
        sim.engines[from].tcp_state(c)
    );
    Transfer {
        received,
        elapsed: eof_at.unwrap() - start,
        client: c,
        server: server_h,
    }
}

/// Runs the simulation until nothing is pending or `limit` passes.
pub fn settle(sim: &mut Sim, limit: Duration) {
    let end = sim.now + limit;
    while sim.step(end) {}
}

/// The virtual time now plus `d`.
pub fn later(sim: &Sim, d: Duration) -> Instant {
    sim.now + d
}
