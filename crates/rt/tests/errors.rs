//! The tokio adaptor's errors keep the engine's information: the `io::Error`
//! kind its errno documents, and, for an active open that finds no free source
//! port, which range ran out and how to get more.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{RssWire, mem_pair, steering};
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use linerate_toe::{EPHEMERAL_PORTS, Instant};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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
