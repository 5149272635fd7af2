//! Zero-copy socket calls: `tcp_send_bytes` queues owned buffers without copying
//! them, `tcp_recv_with` lends the receive buffer in place. Byte-exact transfers
//! in the simulation, with partial consumption, the receive ring wrapping
//! around, and out-of-order arrivals from a faulty link.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{fnv, pattern};
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Bytes, Engine, RecvError, SendError, SocketHandle, TcpState};
use std::time::Duration;

/// Two hosts with a small receive buffer (so the ring wraps often).
fn sim(seed: u64, link: LinkConfig, recv_buffer: usize) -> Sim {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.tcp.recv_buffer = recv_buffer;
            c.tcp.send_buffer = 64 * 1024;
            Engine::new(c, seed * 31 + u64::from(i))
        })
        .collect();
    Sim::new(engines, link)
}

/// What the receiver saw.
#[derive(Default)]
struct Received {
    data: Vec<u8>,
    /// `tcp_recv_with` calls whose closure saw two slices (the ring wrapped).
    wrapped: usize,
    /// Closure calls that took less than they were lent.
    partial: usize,
}

/// Sends `data` from engine 0 to engine 1 with `tcp_send_bytes`, in buffers of
/// the sizes `sizes` cycles through, then shuts down; engine 1 reads with
/// `tcp_recv_with`, taking at most `take(call)` bytes per closure call.
fn transfer(
    sim: &mut Sim,
    data: &[u8],
    sizes: &[usize],
    take: impl Fn(usize) -> usize,
) -> Received {
    let l = sim.engines[1].tcp_listen(7000).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:7000".parse().unwrap())
        .unwrap();
    let whole = Bytes::copy_from_slice(data);
    let (mut sent, mut next, mut shut) = (0, 0, false);
    let mut pending: Option<Bytes> = None;
    let mut server: Option<SocketHandle> = None;
    let mut got = Received::default();
    let mut calls = 0;
    let mut eof = false;
    let limit = sim.now + Duration::from_secs(600);
    let mut step = |sim: &mut Sim| {
        server = server.or_else(|| sim.engines[1].tcp_accept(l).ok());
        loop {
            let buf = match pending.take() {
                Some(b) => b,
                None if sent < data.len() => {
                    let n = sizes[next % sizes.len()].min(data.len() - sent);
                    next += 1;
                    let b = whole.slice(sent..sent + n);
                    sent += n;
                    b
                }
                None => break,
            };
            match sim.engines[0].tcp_send_bytes(c, buf.clone()) {
                Ok(n) if n == buf.len() => {}
                Ok(n) => {
                    pending = Some(buf.slice(n..));
                    break;
                }
                Err(SendError::WouldBlock) => {
                    pending = Some(buf);
                    break;
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        if sent == data.len() && pending.is_none() && !shut {
            sim.engines[0].tcp_shutdown(c).unwrap();
            shut = true;
        }
        let Some(s) = server else { return false };
        // A slow reader: bytes stay in the ring while more arrive, so it wraps.
        let mut budget = 2000usize;
        loop {
            if budget == 0 {
                return false;
            }
            let mut slices = 0;
            let r = sim.engines[1].tcp_recv_with(s, |slice| {
                assert!(!slice.is_empty(), "an empty slice was lent");
                slices += 1;
                calls += 1;
                let k = take(calls).min(slice.len()).min(budget);
                budget -= k;
                if k < slice.len() {
                    got.partial += 1;
                }
                got.data.extend_from_slice(&slice[..k]);
                k
            });
            if slices == 2 {
                got.wrapped += 1;
            }
            match r {
                Ok(0) if slices == 0 => {
                    eof = true;
                    return true;
                }
                Ok(_) => {}
                Err(RecvError::WouldBlock) => return false,
                Err(e) => panic!("recv: {e}"),
            }
        }
    };
    // The reader takes at most `budget` bytes per look: once the link has gone
    // quiet it still needs some looks to drain what arrived.
    let mut ok = false;
    for _ in 0..10_000 {
        ok = sim.run_until(limit, &mut step);
        if ok {
            break;
        }
    }
    let (n, want) = (got.data.len(), data.len());
    assert!(ok && eof, "transfer did not finish: {n} of {want}");
    got
}

#[test]
fn byte_exact_with_partial_reads_and_wrap_around() {
    let mut s = sim(1, LinkConfig::default(), 16 * 1024);
    let data = pattern(3 << 20, 1);
    // Buffers above and below the copy threshold, odd sizes; reads of odd sizes.
    let sizes = [
        70_000,
        3,
        Engine::COPY_BELOW - 1,
        Engine::COPY_BELOW,
        9_001,
        1_448,
        65_536,
    ];
    let got = transfer(&mut s, &data, &sizes, |call| {
        [1000, 1, 4093, 20_000][call % 4]
    });
    assert_eq!(got.data.len(), data.len());
    assert_eq!(fnv(&got.data), fnv(&data));
    assert!(got.data == data);
    assert!(got.wrapped > 0, "the receive ring never wrapped");
    assert!(got.partial > 0);
}

#[test]
fn byte_exact_over_a_lossy_reordering_link() {
    let link = LinkConfig {
        loss: 0.02,
        reorder: 0.05,
        duplicate: 0.01,
        seed: 9,
        ..LinkConfig::default()
    };
    let mut s = sim(2, link, 32 * 1024);
    let data = pattern(1 << 20, 2);
    let got = transfer(&mut s, &data, &[100_000, 17, 4_000], |call| {
        777 + call % 5000
    });
    assert!(got.data == data);
    assert!(got.wrapped > 0);
    let c = s.engines[0].counters();
    assert!(c.tcp_retrans_segs > 0, "no loss happened: {c:?}");
}

#[test]
fn copies_and_handed_over_buffers_keep_their_order() {
    let mut s = sim(3, LinkConfig::default(), 64 * 1024);
    let l = s.engines[1].tcp_listen(80).unwrap();
    let c = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let big = pattern(5000, 3);
    let mut want = Vec::new();
    for i in 0..10u8 {
        let small = vec![i; usize::from(i) * 10];
        assert_eq!(s.engines[0].tcp_send(c, &small), Ok(small.len()));
        want.extend_from_slice(&small);
        let b = Bytes::from(big.clone());
        assert_eq!(s.engines[0].tcp_send_bytes(c, b), Ok(big.len()));
        want.extend_from_slice(&big);
    }
    // An empty buffer is taken as nothing, not refused.
    assert_eq!(s.engines[0].tcp_send_bytes(c, Bytes::new()), Ok(0));
    s.engines[0].tcp_shutdown(c).unwrap();
    let mut server = None;
    let mut got = Vec::new();
    let done = s.run_until(s.now + Duration::from_secs(5), |sim| {
        server = server.or_else(|| sim.engines[1].tcp_accept(l).ok());
        let Some(h) = server else { return false };
        loop {
            match sim.engines[1].tcp_recv_with(h, |b| {
                got.extend_from_slice(b);
                b.len()
            }) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    });
    assert!(done);
    assert!(got == want);
}

#[test]
fn recv_with_edge_cases() {
    let mut s = sim(4, LinkConfig::default(), 64 * 1024);
    let l = s.engines[1].tcp_listen(80).unwrap();
    let c = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let mut server = None;
    assert!(s.run_until(s.now + Duration::from_secs(1), |sim| {
        server = server.or_else(|| sim.engines[1].tcp_accept(l).ok());
        server.is_some()
    }));
    let h = server.unwrap();
    // Nothing yet: WouldBlock, and the closure is not called.
    let mut called = false;
    let r = s.engines[1].tcp_recv_with(h, |_| {
        called = true;
        0
    });
    assert_eq!(r, Err(RecvError::WouldBlock));
    assert!(!called);
    s.engines[0].tcp_send(c, b"hello world").unwrap();
    s.run_until(s.now + Duration::from_millis(5), |_| false);
    // Taking nothing leaves everything; claiming more than lent is clamped.
    assert_eq!(s.engines[1].tcp_recv_with(h, |_| 0), Ok(0));
    assert_eq!(s.engines[1].tcp_info(h).unwrap().recv_queue, 11);
    let mut seen = Vec::new();
    let r = s.engines[1].tcp_recv_with(h, |b| {
        seen.extend_from_slice(&b[..5]);
        5
    });
    assert_eq!((r, &seen[..]), (Ok(5), &b"hello"[..]));
    let r = s.engines[1].tcp_recv_with(h, |b| {
        seen.extend_from_slice(b);
        usize::MAX
    });
    assert_eq!((r, &seen[..]), (Ok(6), &b"hello world"[..]));
    // End of stream after the peer's FIN, and a closed handle is refused.
    s.engines[0].tcp_close(c).unwrap();
    s.run_until(s.now + Duration::from_millis(5), |_| false);
    assert_eq!(s.engines[1].tcp_state(h), Ok(TcpState::CloseWait));
    assert_eq!(s.engines[1].tcp_recv_with(h, |_| 0), Ok(0));
    assert_eq!(
        s.engines[0].tcp_send_bytes(c, Bytes::from_static(b"late")),
        Err(SendError::InvalidHandle)
    );
    s.engines[1].tcp_close(h).unwrap();
    assert_eq!(
        s.engines[1].tcp_recv_with(h, |_| 0),
        Err(RecvError::InvalidHandle)
    );
}

#[test]
fn send_bytes_after_shutdown_is_refused() {
    let mut s = sim(5, LinkConfig::default(), 64 * 1024);
    s.engines[1].tcp_listen(80).unwrap();
    let c = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    s.engines[0].tcp_shutdown(c).unwrap();
    assert_eq!(
        s.engines[0].tcp_send_bytes(c, Bytes::from(vec![1u8; 4096])),
        Err(SendError::Closed)
    );
}
