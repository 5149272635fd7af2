//! Bursts: handshakes that complete in one receive batch, every one accepted
//! (the engine's accept queue holds them until the queue thread moves them to
//! the listener, however many arrive between two rounds); and reads and
//! writes that move whole staging rings, which make the rings grow.

use crate::common;

use common::mem_pair;
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::time::Duration;

/// Runtimes for hosts 1 and 2 of a memory wire, and a tokio runtime to
/// drive the test's tasks.
fn two_hosts(cfg: impl Fn(u8) -> RuntimeConfig) -> (Runtime, Runtime, tokio::runtime::Runtime) {
    let (a, b) = mem_pair(1);
    let c = Runtime::start(a, cfg(1)).unwrap();
    let s = Runtime::start(b, cfg(2)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (c, s, rt)
}

#[test]
fn a_thousand_connects_at_once_are_all_accepted() {
    const K: usize = 1000;
    let (c, s, rt) = two_hosts(|host| RuntimeConfig::new(Sim::host_config(host)));
    let (ch, sh) = (c.handle().clone(), s.handle().clone());
    rt.block_on(async {
        let l = TcpListener::bind(&sh, 6000).await.unwrap();
        let to: std::net::SocketAddr = "10.0.0.2:6000".parse().unwrap();
        let tasks: Vec<_> = (0..K)
            .map(|_| {
                let c = ch.clone();
                tokio::spawn(async move { TcpStream::connect(&c, to).await })
            })
            .collect();
        let accepts = async {
            let mut v = Vec::new();
            // A connection the server dropped would never come: bounded.
            while let Ok(r) = tokio::time::timeout(Duration::from_secs(5), l.accept()).await {
                v.push(r.unwrap());
                if v.len() == K {
                    break;
                }
            }
            v
        };
        let connects = async {
            let mut v = Vec::new();
            for t in tasks {
                v.push(t.await.unwrap().unwrap());
            }
            v
        };
        let (accepted, connected) = tokio::join!(accepts, connects);
        assert_eq!(connected.len(), K);
        assert_eq!(accepted.len(), K, "server {:?}", sh.stats(0));
    });
}

/// Calls that move a whole staging ring at a time make the rings grow
/// (`RuntimeConfig::stream_buffer_max`): with 4 KiB rings, one write or read
/// could never move more than 4 KiB, and after a few such calls single
/// calls move more, up to the limit, never past it; the bytes arrive in
/// order.
#[test]
fn staging_rings_grow_for_calls_that_move_them_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const RING: usize = 4096;
    const MAX: usize = 64 * 1024;
    const TOTAL: usize = 4 << 20;
    let (c, s, rt) = two_hosts(|host| {
        let mut c = RuntimeConfig::new(Sim::host_config(host));
        c.stream_buffer = RING;
        c.stream_buffer_max = MAX;
        c
    });
    let (ch, sh) = (c.handle().clone(), s.handle().clone());
    rt.block_on(async {
        let l = TcpListener::bind(&sh, 6001).await.unwrap();
        let to: std::net::SocketAddr = "10.0.0.2:6001".parse().unwrap();
        let writer = tokio::spawn(async move {
            let mut st = TcpStream::connect(&ch, to).await.unwrap();
            let data: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
            let (mut done, mut most) = (0, 0);
            while done < TOTAL {
                let n = st.write(&data[done..]).await.unwrap();
                most = most.max(n);
                done += n;
            }
            st.shutdown().await.unwrap();
            most
        });
        let (mut st, _) = l.accept().await.unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let (mut got, mut most, mut ok) = (0, 0, true);
        loop {
            let n = tokio::time::timeout(Duration::from_secs(30), st.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            if n == 0 {
                break;
            }
            ok &= buf[..n]
                .iter()
                .enumerate()
                .all(|(i, &b)| b == ((got + i) % 251) as u8);
            most = most.max(n);
            got += n;
        }
        let wrote_most = writer.await.unwrap();
        assert!(ok, "bytes out of order");
        assert_eq!(got, TOTAL);
        assert!(
            wrote_most > RING && wrote_most <= MAX,
            "largest write {wrote_most}"
        );
        assert!(most > RING && most <= MAX, "largest read {most}");
    });
}
