//! A runtime's life as a first program meets it: a link that is down at start,
//! a queue whose NIC fails, and a program that writes its last response and
//! returns while the bytes are still on their way.

use crate::common;

use common::{Switched, mem_pair};
use linerate_nic::NicError;
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn config(i: u8) -> RuntimeConfig {
    RuntimeConfig {
        seed: u64::from(i),
        ..RuntimeConfig::new(Sim::host_config(i))
    }
}

fn server_addr(port: u16) -> SocketAddr {
    SocketAddr::new("10.0.0.2".parse().unwrap(), port)
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_link_that_is_down_at_start_is_not_fatal() {
    let (a, b) = mem_pair(1);
    let down = Arc::new(AtomicBool::new(true));
    let nic = Switched {
        nic: a,
        down: Arc::clone(&down),
        broken: Arc::new(AtomicBool::new(false)),
    };
    let client = Runtime::start(nic, config(1)).unwrap();
    let server = Runtime::start(b, config(2)).unwrap();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let rt = tokio();
    let listener = rt.block_on(TcpListener::bind(&sh, 80)).unwrap();
    // The announcement and the first SYN's ARP request are dropped.
    std::thread::sleep(Duration::from_millis(100));
    let dropped = ch.stats(0).unwrap().tx_dropped;
    assert!(dropped > 0, "nothing was dropped while down");
    // Up again: the runtime is still there, and a connection works (the
    // ARP request and SYN retried on their timers).
    down.store(false, Ordering::Release);
    rt.block_on(async {
        let (c, s) = tokio::join!(TcpStream::connect(&ch, server_addr(80)), listener.accept());
        let (mut c, (mut s, _)) = (c.unwrap(), s.unwrap());
        c.write_all(b"up").await.unwrap();
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"up");
    });
    client.shutdown().unwrap();
}

#[test]
fn a_failed_queue_says_why_in_every_later_call() {
    let (a, b) = mem_pair(1);
    let broken = Arc::new(AtomicBool::new(false));
    let nic = Switched {
        nic: a,
        down: Arc::new(AtomicBool::new(false)),
        broken: Arc::clone(&broken),
    };
    let client = Runtime::start(nic, config(1)).unwrap();
    let _server = Runtime::start(b, config(2)).unwrap();
    let ch = client.handle().clone();
    broken.store(true, Ordering::Release);
    let rt = tokio();
    // The queue thread meets the failure at its next round.
    let e = rt.block_on(async {
        for _ in 0..200 {
            match TcpStream::connect(&ch, server_addr(80)).await {
                Err(e) if e.kind() == ErrorKind::NotConnected => return e,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        panic!("the runtime never stopped");
    });
    let msg = e.to_string();
    assert!(
        msg.contains("queue 0 failed") && msg.contains("injected device failure"),
        "{msg}"
    );
    let r = client.shutdown();
    assert!(
        matches!(r, Err(linerate_rt::RtError::Nic(NicError::Io(_)))),
        "{r:?}"
    );
}

/// The server writes its last response, shuts the stream and returns; its
/// runtime is dropped at once. The client still gets every byte and the end.
#[test]
fn the_last_response_is_delivered_after_the_program_returns() {
    const LEN: usize = 4 << 20;
    let (a, b) = mem_pair(1);
    let client = Runtime::start(a, config(1)).unwrap();
    let server = Runtime::start(b, config(2)).unwrap();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let listener = tokio().block_on(TcpListener::bind(&sh, 80)).unwrap();
    let reader = std::thread::spawn(move || {
        tokio().block_on(async {
            let mut c = TcpStream::connect(&ch, server_addr(80)).await.unwrap();
            // The reader starts late: most of the response is still in the
            // server's buffers when its program returns.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut got = Vec::new();
            // Bounded: a response that never ends fails the test, not hangs it.
            let read = tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut got));
            let _ = read.await;
            got
        })
    });
    tokio().block_on(async {
        let (mut s, _) = listener.accept().await.unwrap();
        let body: Vec<u8> = (0..LEN).map(|i| (i % 251) as u8).collect();
        s.write_all(&body).await.unwrap();
        s.shutdown().await.unwrap();
    });
    drop(listener);
    drop(server);
    let got = reader.join().unwrap();
    assert_eq!(got.len(), LEN);
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
    drop(client);
}

#[test]
fn shutdown_timeout_says_what_was_left() {
    let (a, b) = mem_pair(1);
    let client = Runtime::start(a, config(1)).unwrap();
    let server = Runtime::start(b, config(2)).unwrap();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let rt = tokio();
    let listener = rt.block_on(TcpListener::bind(&sh, 80)).unwrap();
    let (c, _s) = rt.block_on(async {
        let (c, s) = tokio::join!(TcpStream::connect(&ch, server_addr(80)), listener.accept());
        (c.unwrap(), s.unwrap())
    });
    // The server stops first: the client's data can never be acknowledged.
    drop(server);
    let mut c = c;
    rt.block_on(async { c.write_all(&[1u8; 100_000]).await.unwrap() });
    let left = client.shutdown_timeout(Duration::from_millis(200)).unwrap();
    assert_eq!(left.streams, 1, "{left:?}");
    assert!(left.bytes >= 100_000, "{left:?}");
    // And with nothing pending, nothing is left and no time is spent.
    let (a, b) = mem_pair(1);
    let (x, y) = (
        Runtime::start(a, config(1)).unwrap(),
        Runtime::start(b, config(2)).unwrap(),
    );
    let t = std::time::Instant::now();
    assert!(
        x.shutdown_timeout(Duration::from_secs(30))
            .unwrap()
            .is_empty()
    );
    assert!(t.elapsed() < Duration::from_secs(10));
    drop(y);
}

/// `RuntimeConfig::busy_poll`: after a round that moved frames the queue
/// thread goes round again at once for the configured time instead of
/// sleeping (its rounds count shows the spinning), then sleeps as before;
/// the default sleeps at once.
#[test]
fn a_busy_polling_queue_spins_after_traffic_then_sleeps() {
    let (a, b) = mem_pair(1);
    let client = Runtime::start(a, config(1)).unwrap();
    let server = Runtime::start(
        b,
        RuntimeConfig {
            busy_poll: Duration::from_millis(400),
            ..config(2)
        },
    )
    .unwrap();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let rt = tokio();
    let listener = rt.block_on(TcpListener::bind(&sh, 80)).unwrap();
    rt.block_on(async {
        let (c, s) = tokio::join!(TcpStream::connect(&ch, server_addr(80)), listener.accept());
        let (mut c, (mut s, _)) = (c.unwrap(), s.unwrap());
        c.write_all(b"spin").await.unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"spin");
    });
    let rounds = |h: &linerate_rt::Handle| h.stats(0).unwrap().polls;
    let (c0, s0) = (rounds(&ch), rounds(&sh));
    std::thread::sleep(Duration::from_millis(100));
    let (c1, s1) = (rounds(&ch), rounds(&sh));
    // Spinning: a round takes microseconds; sleeping: a round per timer or
    // wake-up (a handful in 100 ms).
    assert!(
        s1 - s0 > 200,
        "the busy-polling queue ran {} rounds in 100 ms",
        s1 - s0
    );
    assert!(
        c1 - c0 < 50,
        "the default queue ran {} rounds in 100 ms",
        c1 - c0
    );
    // Past the busy-poll time it sleeps too.
    std::thread::sleep(Duration::from_millis(500));
    let s2 = rounds(&sh);
    std::thread::sleep(Duration::from_millis(100));
    let s3 = rounds(&sh);
    assert!(s3 - s2 < 50, "still spinning: {} rounds in 100 ms", s3 - s2);
    client.shutdown().unwrap();
    server.shutdown().unwrap();
}
