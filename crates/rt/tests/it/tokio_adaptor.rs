//! The tokio adaptor over two per-queue runtimes on a memory wire with RSS.

use crate::common;

use common::two_runtimes;
use linerate_rt::{Handle, TcpListener, TcpStream};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(60);

/// Waits for a full round of every queue thread, so its counters are published.
async fn settle(h: &Handle) {
    for q in 0..h.queues() {
        h.with_engine(q, |_| ()).await.unwrap();
    }
}

fn server_addr(port: u16, v6: bool) -> SocketAddr {
    if v6 {
        SocketAddr::new("fd00::2".parse().unwrap(), port)
    } else {
        SocketAddr::new("10.0.0.2".parse().unwrap(), port)
    }
}

/// The echo server on a tokio task.
async fn serve(s: TcpStream) {
    common::serve_echo(s, |w| {
        let h = tokio::spawn(w);
        async { h.await.unwrap() }
    })
    .await;
}

/// The echo client on a tokio task.
async fn client(s: TcpStream, id: u64, up: usize, down: usize) {
    common::echo_client(s, id, up, down, |w| {
        let h = tokio::spawn(w);
        async { h.await.unwrap() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_carry_exact_bytes_both_ways() {
    const N: u64 = 32;
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 5000).await.unwrap();
    let run = async move {
        let server = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..N {
                let (s, peer) = listener.accept().await.unwrap();
                assert_eq!(s.peer_addr(), peer);
                tasks.push(tokio::spawn(serve(s)));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let mut clients = Vec::new();
        for id in 0..N {
            let ch = ch.clone();
            clients.push(tokio::spawn(async move {
                // Every fourth stream over IPv6 (neighbour discovery on each queue).
                let s = TcpStream::connect(&ch, server_addr(5000, id % 4 == 3))
                    .await
                    .unwrap();
                let up = 20_000 + (id as usize * 7_919) % 70_000;
                let down = 10_000 + (id as usize * 104_729) % 60_000;
                client(s, id, up, down).await;
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("transfers finish");

    let (ch, sh) = (crt.handle(), srt.handle());
    settle(ch).await;
    settle(sh).await;
    let opened: Vec<u64> = (0..2).map(|q| ch.stats(q).unwrap().active_opens).collect();
    let accepted: Vec<u64> = (0..2).map(|q| sh.stats(q).unwrap().passive_opens).collect();
    assert_eq!(opened.iter().sum::<u64>(), N, "{opened:?}");
    assert_eq!(accepted, opened, "symmetric RSS: same queue on both hosts");
    assert!(
        accepted.iter().all(|&n| n > 0),
        "both queues used: {accepted:?}"
    );
    for q in 0..2 {
        let fails = ch.stats(q).unwrap().connect_failures;
        assert_eq!(fails, 0);
    }
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_on_a_queue_brings_the_replies_to_that_queue() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 6000).await.unwrap();
    let run = async {
        for q in 0..2 {
            for k in 0..6 {
                let addr = server_addr(6000, k == 5);
                let mut s = TcpStream::connect_on(&ch, q, addr).await.unwrap();
                assert_eq!(s.queue(), q);
                let (mut a, _) = listener.accept().await.unwrap();
                assert_eq!(a.queue(), q, "the server sees the flow on the same queue");
                assert_eq!(a.peer_addr(), s.local_addr());
                s.write_all(b"q").await.unwrap();
                let mut b = [0u8; 1];
                a.read_exact(&mut b).await.unwrap();
                a.write_all(&[q as u8]).await.unwrap();
                s.read_exact(&mut b).await.unwrap();
                assert_eq!(b[0], q as u8);
            }
        }
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("connects finish");
    settle(&ch).await;
    settle(&sh).await;
    for q in 0..2 {
        let st = ch.stats(q).unwrap();
        assert_eq!((st.active_opens, st.connect_failures), (6, 0), "queue {q}");
        assert_eq!(sh.stats(q).unwrap().passive_opens, 6, "queue {q}");
        // A segment on a queue whose engine does not know its flow would draw a
        // reset: none did, on either host.
        let rsts = ch
            .with_engine(q, |e| e.counters().tcp_out_rsts)
            .await
            .unwrap();
        let srv_rsts = sh
            .with_engine(q, |e| e.counters().tcp_out_rsts)
            .await
            .unwrap();
        assert_eq!((rsts, srv_rsts), (0, 0), "queue {q}");
        let opens = ch
            .with_engine(q, |e| e.counters().tcp_active_opens)
            .await
            .unwrap();
        assert_eq!(opens, 6);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_close_reads_as_eof() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 7000).await.unwrap();
    let run = async {
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let (mut r, mut w) = s.split();
            let (read, wrote) = tokio::join!(
                async {
                    let mut v = Vec::new();
                    r.read_to_end(&mut v).await.unwrap();
                    v
                },
                w.write_all(b"goodbye")
            );
            wrote.unwrap();
            assert_eq!(read, b"hello");
            // Dropping the stream closes it: a FIN after "goodbye".
        });
        let mut c = TcpStream::connect(&ch, server_addr(7000, false))
            .await
            .unwrap();
        c.write_all(b"hello").await.unwrap();
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"goodbye");
        let mut more = [0u8; 8];
        assert_eq!(c.read(&mut more).await.unwrap(), 0, "EOF stays EOF");
        server.await.unwrap();
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("close finishes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_to_a_closed_port_is_refused() {
    let (crt, _srt) = two_runtimes(2);
    let ch = crt.handle().clone();
    let run = async {
        for v6 in [false, true] {
            let e = TcpStream::connect(&ch, server_addr(9, v6))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
        }
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("refusal arrives");
    settle(&ch).await;
    let fails: u64 = (0..2).map(|q| ch.stats(q).unwrap().connect_failures).sum();
    assert_eq!(fails, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_runtime_aborts_its_streams() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 7100).await.unwrap();
    let mut c = TcpStream::connect(&ch, server_addr(7100, false))
        .await
        .unwrap();
    let _server_side = listener.accept().await.unwrap();
    let reader = tokio::spawn(async move {
        let mut b = [0u8; 4];
        c.read(&mut b).await
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    tokio::task::spawn_blocking(move || crt.shutdown().unwrap())
        .await
        .unwrap();
    let e = tokio::time::timeout(LIMIT, reader)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionAborted);
    let e = TcpStream::connect(&ch, server_addr(7100, false))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotConnected);
}

#[test]
fn engine_calls_from_a_plain_thread_and_config_errors() {
    let (crt, _srt) = two_runtimes(2);
    let h = crt.handle().clone();
    let mtus: Vec<u16> = (0..2)
        .map(|q| h.with_engine_blocking(q, |e| e.config().mtu).unwrap())
        .collect();
    assert_eq!(mtus, [1500, 1500]);
    assert!(h.with_engine_blocking(2, |_| ()).is_err(), "no queue 2");

    let (a, _b) = common::mem_pair(2);
    let cfg = linerate_rt::RuntimeConfig {
        steering: Some(common::steering(4)),
        ..linerate_rt::RuntimeConfig::new(linerate_toe::sim::Sim::host_config(1))
    };
    assert!(matches!(
        linerate_rt::Runtime::start(a, cfg),
        Err(linerate_rt::RtError::Steering {
            steering: 4,
            nic: 2
        })
    ));
}

/// The default seed (ISN and SYN-cookie keys, ports) comes from the operating
/// system: never a constant shared by every deployment (RFC 6528 section 3,
/// RFC 4987 section 3.6), and different for every configuration made.
#[test]
fn default_seed_comes_from_the_operating_system() {
    let host = linerate_toe::sim::Sim::host_config(1);
    let seeds: Vec<u64> = (0..4)
        .map(|_| linerate_rt::RuntimeConfig::new(host.clone()).seed)
        .collect();
    for (i, a) in seeds.iter().enumerate() {
        for b in &seeds[i + 1..] {
            assert_ne!(a, b, "two default configurations share a seed: {seeds:x?}");
        }
    }
}

/// The queues are one interface: only the first announces its addresses
/// (RFC 5227 asks for two gratuitous ARPs per interface, not per queue).
#[test]
fn one_queue_announces_for_the_interface() {
    let (crt, _srt) = two_runtimes(4);
    let h = crt.handle().clone();
    let deadline = std::time::Instant::now() + LIMIT;
    let announced = |q| {
        h.with_engine_blocking(q, |e| {
            let c = e.counters();
            (c.arp_announcements_out, c.ndp_unsolicited_adverts_out)
        })
        .unwrap()
    };
    while announced(0).0 == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        announced(0).0 >= 1 && announced(0).1 == 1,
        "{:?}",
        announced(0)
    );
    for q in 1..4 {
        assert_eq!(announced(q), (0, 0), "queue {q}");
    }
}

/// `Runtime::start_queues` over a two-queue memory pair split into one NIC per
/// queue (each queue thread owns its own, no lock between them): streams over
/// both queues carry exact bytes both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_queues_each_owned_by_its_thread_carry_exact_bytes() {
    use linerate_nic::memory::{self, PairConfig};
    use linerate_nic::{MemNic, NicCaps};
    use linerate_rt::{Runtime, RuntimeConfig};
    use linerate_toe::sim::Sim;
    const N: u64 = 8;
    let caps = NicCaps {
        queues: 2,
        ..NicCaps::full()
    };
    let (a, b) = memory::pair(PairConfig {
        clock: memory::Clock::system(),
        ..PairConfig::new(caps, caps)
    });
    let (a, b): (Vec<MemNic>, Vec<MemNic>) = (a.split(), b.split());
    assert_eq!((a.len(), b.len()), (2, 2));
    let crt = Runtime::start_queues(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    let srt = Runtime::start_queues(b, RuntimeConfig::new(Sim::host_config(2))).unwrap();
    assert_eq!(crt.handle().queues(), 2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 5001).await.unwrap();
    let run = async move {
        let server = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..N {
                let (s, _) = listener.accept().await.unwrap();
                tasks.push(tokio::spawn(serve(s)));
            }
            for t in tasks {
                t.await.unwrap();
            }
        });
        let mut clients = Vec::new();
        for id in 0..N {
            let ch = ch.clone();
            clients.push(tokio::spawn(async move {
                let s = TcpStream::connect(&ch, server_addr(5001, false))
                    .await
                    .unwrap();
                client(s, id, 150_000, 90_000).await;
            }));
        }
        for c in clients {
            c.await.unwrap();
        }
        server.await.unwrap();
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .expect("transfers finish");
    let (ch, sh) = (crt.handle(), srt.handle());
    settle(ch).await;
    settle(sh).await;
    let opened: Vec<u64> = (0..2).map(|q| ch.stats(q).unwrap().active_opens).collect();
    assert!(
        opened.iter().all(|&n| n > 0),
        "both queues used: {opened:?}"
    );
    assert_eq!(opened.iter().sum::<u64>(), N);
}
