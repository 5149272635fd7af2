//! The tokio adaptor's errors keep the engine's information: the `io::Error`
//! kind its errno documents, and, for an active open that finds no free source
//! port, which range ran out and how to get more.

use crate::common;

use common::{RssWire, Switched, mem_pair, steering};
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use linerate_toe::{EPHEMERAL_PORTS, Instant, Keepalive, TcpState};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(60);

/// With steering, source ports come from `RuntimeConfig::ephemeral`: once its
/// four ports are taken, the next connect fails with `AddrNotAvailable`, and
/// the message names the setting to widen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steered_connects_past_the_port_range_say_how_to_widen_it() {
    let s = steering(1);
    let (a, b) = mem_pair(1);
    let cfg = |i: u8| RuntimeConfig {
        steering: Some(Arc::clone(&s)),
        seed: u64::from(i),
        ephemeral: (50_000, 50_003),
        ..RuntimeConfig::new(Sim::host_config(i))
    };
    let crt = Runtime::start(RssWire::new(a, Arc::clone(&s)), cfg(1)).unwrap();
    let srt = Runtime::start(RssWire::new(b, Arc::clone(&s)), cfg(2)).unwrap();
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async {
        let _listener = TcpListener::bind(&sh, 80).await.unwrap();
        let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let mut open = Vec::new();
        for _ in 0..4 {
            let c = TcpStream::connect(&ch, server).await.unwrap();
            assert!((50_000..=50_003).contains(&c.local_addr().port()));
            open.push(c);
        }
        let e = TcpStream::connect(&ch, server).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");
        let msg = e.to_string();
        assert!(msg.contains("RuntimeConfig::ephemeral"), "{msg}");
        assert!(
            msg.contains("50000-50003") && msg.contains("10.0.0.2:80"),
            "{msg}"
        );
    };
    tokio::time::timeout(LIMIT, run).await.expect("connects");
}

/// Without steering the engine picks source ports, from a range per remote
/// address and port: once all of them toward one server port are in use, the
/// message says so and how to get more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_connects_past_the_port_range_say_how_to_get_more() {
    let (a, _b) = mem_pair(1);
    let crt = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    let ch = crt.handle().clone();
    // Nobody answers at 10.0.0.9: the connections stay in SYN-SENT.
    let nobody: SocketAddr = "10.0.0.9:80".parse().unwrap();
    let (first, last) = EPHEMERAL_PORTS;
    ch.with_engine(0, move |e| {
        for port in first..=last {
            e.tcp_connect_from(Instant::ZERO, port, nobody).unwrap();
        }
    })
    .await
    .unwrap();
    let e = tokio::time::timeout(LIMIT, TcpStream::connect(&ch, nobody))
        .await
        .expect("fails at once")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("16384") && msg.contains("49152-65535"),
        "{msg}"
    );
    assert!(msg.contains("more server ports or addresses"), "{msg}");
}

/// Client on port a, server on port b (which can be cut), connected.
async fn connected_pair(
    cut: &Arc<AtomicBool>,
) -> (Runtime, Runtime, TcpStream, TcpStream, TcpListener) {
    let (a, b) = mem_pair(1);
    let crt = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    // A host that goes silent without a word (a pulled cable): its
    // frames dropped while `cut`.
    let b = Switched {
        nic: b,
        down: Arc::clone(cut),
        broken: Arc::new(AtomicBool::new(false)),
    };
    let srt = Runtime::start(b, RuntimeConfig::new(Sim::host_config(2))).unwrap();
    let listener = TcpListener::bind(srt.handle(), 80).await.unwrap();
    let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
    let c = TcpStream::connect(crt.handle(), server).await.unwrap();
    let (s, _) = listener.accept().await.unwrap();
    (crt, srt, c, s, listener)
}

/// `set_linger(Some(0))` (SO_LINGER 0): dropping the stream resets the
/// connection, what it had staged discarded; the peer reads "reset", not
/// the end of the stream a close would give it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_linger_drop_resets_the_connection() {
    let cut = Arc::new(AtomicBool::new(false));
    let run = async {
        let (_crt, _srt, mut c, mut s, _l) = connected_pair(&cut).await;
        c.write_all(b"hello").await.unwrap();
        let mut b = [0u8; 5];
        s.read_exact(&mut b).await.unwrap();
        c.set_linger(Some(Duration::ZERO));
        c.write_all(&[7u8; 4096]).await.unwrap();
        drop(c);
        let mut sink = Vec::new();
        let e = s.read_to_end(&mut sink).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("the reset arrives");
}

/// Keep-alive set through the stream: a peer that goes silent fails the
/// connection with `TimedOut` after the probes (idle 1 s, then 2 probes a
/// second apart); without them the read would wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keepalive_finds_a_silent_peer() {
    let cut = Arc::new(AtomicBool::new(false));
    let run = async {
        let (_crt, _srt, mut c, s, _l) = connected_pair(&cut).await;
        c.set_nodelay(true).unwrap();
        c.set_keepalive(Some(Keepalive {
            idle: Duration::from_secs(1),
            interval: Duration::from_secs(1),
            probes: 2,
        }))
        .unwrap();
        cut.store(true, Ordering::Relaxed);
        let mut b = [0u8; 1];
        let e = c.read(&mut b).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
        let info = c.tcp_info().await.unwrap();
        assert_eq!(info.state, TcpState::Closed, "{info:?}");
        drop(s);
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("keep-alive fails it");
}
