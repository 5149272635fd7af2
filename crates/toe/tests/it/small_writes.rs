//! Small writes through `tcp_send`, the per-write path: writes of every size
//! from 1 to 200 bytes, mixed with handed-over buffers, arrive byte-exact; the
//! send buffer takes exactly what fits (never more than its capacity, and full
//! to it when a write is cut short or refused); a write on a connection that
//! cannot send says why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::pattern;
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Bytes, ConnectionError, Engine, RecvError, SendError, SocketHandle, TcpState};
use std::time::Duration;

/// Deliberately not a multiple of any write size used below.
const SEND_BUFFER: usize = 20_011;

fn sim(seed: u64) -> Sim {
    let engines = (1..=2u8)
        .map(|i| {
            let mut c = Sim::host_config(i);
            c.tcp.send_buffer = SEND_BUFFER;
            c.tcp.recv_buffer = 64 * 1024;
            Engine::new(c, seed * 31 + u64::from(i))
        })
        .collect();
    Sim::new(engines, LinkConfig::default())
}

#[test]
fn small_writes_arrive_byte_exact_and_fill_the_buffer_exactly() {
    let mut s = sim(1);
    let data = pattern(1 << 20, 7);
    let l = s.engines[1].tcp_listen(80).unwrap();
    let c = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    let (mut sent, mut writes, mut cut, mut refused) = (0, 0usize, 0, 0);
    let mut server: Option<SocketHandle> = None;
    let mut got = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 64 * 1024];
    let limit = s.now + Duration::from_secs(600);
    let done = s.run_until(limit, |s| {
        let e = &mut s.engines[0];
        while sent < data.len() {
            // Sizes 1..=200 in a scrambled order; every 50th write a handed-over
            // buffer (queued by reference, leaving the tail's room behind it).
            let handed = writes % 50 == 49;
            let len = if handed {
                Engine::COPY_BELOW + writes % 1000
            } else {
                writes * 37 % 200 + 1
            };
            let len = len.min(data.len() - sent);
            let chunk = &data[sent..sent + len];
            let r = if handed {
                e.tcp_send_bytes(c, Bytes::copy_from_slice(chunk))
            } else {
                e.tcp_send(c, chunk)
            };
            let queued = e.tcp_info(c).unwrap().send_queue;
            assert!(queued <= SEND_BUFFER, "{queued} bytes queued");
            match r {
                Ok(n) if n == len => {
                    sent += n;
                    writes += 1;
                }
                Ok(n) => {
                    // Cut short: the buffer took exactly what fitted.
                    assert!(n > 0);
                    assert_eq!(queued, SEND_BUFFER, "cut short with room left");
                    sent += n;
                    cut += 1;
                    break;
                }
                Err(SendError::WouldBlock) => {
                    assert_eq!(queued, SEND_BUFFER, "refused with room left");
                    assert_eq!(e.tcp_send(c, &[]), Ok(0));
                    refused += 1;
                    break;
                }
                Err(err) => panic!("send: {err}"),
            }
        }
        server = server.or_else(|| s.engines[1].tcp_accept(l).ok());
        if let Some(h) = server {
            loop {
                match s.engines[1].tcp_recv(h, &mut buf) {
                    Ok(0) | Err(RecvError::WouldBlock) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(err) => panic!("recv: {err}"),
                }
            }
        }
        got.len() == data.len()
    });
    assert!(done, "received {} of {}", got.len(), data.len());
    assert!(
        got == data,
        "the received stream differs from the one written"
    );
    // The buffer's edge was reached both ways, so the test saw it.
    assert!(cut > 0 && refused > 0, "cut {cut}, refused {refused}");
}

#[test]
fn writes_that_cannot_be_sent_say_why() {
    let mut s = sim(2);
    s.engines[1].tcp_listen(80).unwrap();
    // Before the handshake completes the data waits; after a shutdown the
    // sending side is closed.
    let c = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    assert_eq!(s.engines[0].tcp_send(c, b"early"), Ok(5));
    s.engines[0].tcp_shutdown(c).unwrap();
    assert_eq!(s.engines[0].tcp_send(c, b"late"), Err(SendError::Closed));

    // Refused by the peer (no listener): the reason, not just "closed".
    let r = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:81".parse().unwrap())
        .unwrap();
    let end = s.now + Duration::from_secs(5);
    s.run_until(end, |s| s.engines[0].tcp_state(r) == Ok(TcpState::Closed));
    assert_eq!(s.engines[0].tcp_state(r), Ok(TcpState::Closed));
    assert_eq!(
        s.engines[0].tcp_send(r, b"x"),
        Err(SendError::Failed(ConnectionError::Refused))
    );

    // A handle given up is refused, also once its slot holds a new connection,
    // which the stale handle must not write into.
    s.engines[0].tcp_close(r).unwrap();
    assert_eq!(
        s.engines[0].tcp_send(r, b"x"),
        Err(SendError::InvalidHandle)
    );
    let fresh = s.engines[0]
        .tcp_connect(s.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    assert_eq!(
        s.engines[0].tcp_send(r, b"x"),
        Err(SendError::InvalidHandle)
    );
    assert_eq!(s.engines[0].tcp_info(fresh).unwrap().send_queue, 0);
    assert_eq!(s.engines[0].tcp_send(fresh, b"ok"), Ok(2));
    assert_eq!(s.engines[0].tcp_info(fresh).unwrap().send_queue, 2);
}
