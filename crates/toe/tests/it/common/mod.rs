//! Helpers shared by the integration tests: a bulk transfer between two engines
//! of a simulation, driven as two small applications would.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod raw;
pub mod smol;
pub mod udp;

use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Engine, Instant, RecvError, SendError, SocketHandle, TcpState};
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

/// The link of the seeded fault campaign (tests/faults.rs): loses 5 % of
/// frames, reorders 5 %, duplicates 1 % and corrupts 0.1 %.
pub fn faulty_link(seed: u64) -> LinkConfig {
    LinkConfig {
        loss: 0.05,
        reorder: 0.05,
        duplicate: 0.01,
        corrupt: 0.001,
        seed,
        ..LinkConfig::default()
    }
}

/// Port 5001 of engine 1 of [`Sim::two_hosts`], on its IPv4 or IPv6 address.
pub fn server_addr(v6: bool) -> SocketAddr {
    if v6 {
        "[fd00::2]:5001"
    } else {
        "10.0.0.2:5001"
    }
    .parse()
    .unwrap()
}

/// Sends what connection `c` of `e` takes of `data` from `*sent` on and, once
/// all of it is sent, shuts down the sending side (once: `*shut`).
pub fn send_then_shut(
    e: &mut Engine,
    c: SocketHandle,
    data: &[u8],
    sent: &mut usize,
    shut: &mut bool,
) -> Result<(), SendError> {
    while *sent < data.len() {
        match e.tcp_send(c, &data[*sent..]) {
            Ok(n) => *sent += n,
            Err(SendError::WouldBlock) => break,
            Err(e) => return Err(e),
        }
    }
    if *sent == data.len() && !*shut {
        e.tcp_shutdown(c).unwrap();
        *shut = true;
    }
    Ok(())
}

/// Reads all connection `s` of `e` holds through `buf`, handing each read to
/// `got`; true at the end of stream.
pub fn recv_each(
    e: &mut Engine,
    s: SocketHandle,
    buf: &mut [u8],
    mut got: impl FnMut(&[u8]),
) -> Result<bool, RecvError> {
    loop {
        match e.tcp_recv(s, buf) {
            Ok(0) => return Ok(true),
            Ok(n) => got(&buf[..n]),
            Err(RecvError::WouldBlock) => return Ok(false),
            Err(e) => return Err(e),
        }
    }
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

/// How the receiving application of [`transfer_paced`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes per read call, at most.
    pub bytes: usize,
    /// Read calls per simulation step, at most.
    pub calls: usize,
    /// Read only on every `every`th step.
    pub every: u32,
    /// Alternate copying reads with lending ones (`tcp_recv_with`).
    pub lend: bool,
}

impl Pace {
    /// Everything there is, every step, by copying reads.
    pub const PROMPT: Pace = Pace {
        bytes: 256 * 1024,
        calls: usize::MAX,
        every: 1,
        lend: false,
    };
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
    transfer_paced(sim, from, to, server, data, limit, Pace::PROMPT)
}

/// [`transfer`] with a receiving application that reads at `pace`.
pub fn transfer_paced(
    sim: &mut Sim,
    from: usize,
    to: usize,
    server: SocketAddr,
    data: &[u8],
    limit: Duration,
    pace: Pace,
) -> Transfer {
    let l = sim.engines[to].tcp_listen(server.port()).unwrap();
    let start = sim.now;
    let c = sim.engines[from].tcp_connect(start, server).unwrap();
    let mut s = None;
    let mut sent = 0;
    let mut shut = false;
    let mut received = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; pace.bytes];
    let mut eof_at = None;
    let deadline = start + limit;
    let mut step = 0u32;
    let mut app = |sim: &mut Sim| {
        step = step.wrapping_add(1);
        if s.is_none() {
            s = sim.engines[to].tcp_accept(l).ok();
        }
        send_then_shut(&mut sim.engines[from], c, data, &mut sent, &mut shut)
            .unwrap_or_else(|e| panic!("send: {e}"));
        if let Some(s) = s.filter(|_| step.is_multiple_of(pace.every.max(1))) {
            for call in 0..pace.calls {
                let r = if pace.lend && !call.is_multiple_of(2) {
                    let mut got = 0;
                    sim.engines[to]
                        .tcp_recv_with(s, |d| {
                            let k = d.len().min(pace.bytes - got);
                            received.extend_from_slice(&d[..k]);
                            got += k;
                            k
                        })
                        .map(|n| {
                            // Already taken: report it as read into nothing.
                            if n > 0 { usize::MAX } else { 0 }
                        })
                } else {
                    sim.engines[to].tcp_recv(s, &mut buf)
                };
                match r {
                    Ok(usize::MAX) => {}
                    Ok(0) => {
                        eof_at.get_or_insert(sim.now);
                        break;
                    }
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
        eof_at.is_some()
    };
    // A paced reader also runs when nothing happens on the link (as an
    // application polling every millisecond would); a prompt one needs not.
    let tick = if pace.every > 1 || pace.calls < usize::MAX {
        Duration::from_millis(1)
    } else {
        limit
    };
    let mut ok = false;
    while !ok && sim.now < deadline {
        let until = (sim.now + tick).min(deadline);
        ok = sim.run_until(until, &mut app);
    }
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
