//! The tokio adaptor's UdpSocket over two per-queue runtimes on a memory wire
//! with RSS: datagrams both ways over IPv4 and IPv6, every one checked; port 0;
//! address in use; a closed port answered with ICMP; a dropped socket frees
//! its port after sending what it staged; a stopped runtime fails the socket;
//! a reader of a full staging queue gets the datagrams its engines held back;
//! idle sockets are not served.

use crate::common;

use common::{Fnv, pattern, two_runtimes, two_runtimes_waiting};
use linerate_rt::{Handle, UdpSocket};
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

/// Waits for a full round of every queue thread.
async fn settle(h: &Handle) {
    for q in 0..h.queues() {
        h.with_engine(q, |_| ()).await.unwrap();
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A datagram of `len` bytes: its id, then a pattern of that id.
fn datagram(id: u32, len: usize) -> Vec<u8> {
    let mut d = id.to_le_bytes().to_vec();
    d.extend(pattern(u64::from(id), len.saturating_sub(4)));
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datagrams_both_ways_both_families_every_one_exact() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async move {
        for (any, server_ip) in [("0.0.0.0", "10.0.0.2"), ("[::]", "[fd00::2]")] {
            let server = UdpSocket::bind(&sh, addr(&format!("{any}:9000")))
                .await
                .unwrap();
            assert_eq!(server.local_addr().port(), 9000);
            let echo = tokio::spawn(async move {
                let mut buf = vec![0u8; 2048];
                loop {
                    let (n, from) = server.recv_from(&mut buf).await.unwrap();
                    if n == 0 {
                        return server;
                    }
                    server.send_to(&buf[..n], from).await.unwrap();
                }
            });
            let client = UdpSocket::bind(&ch, addr(&format!("{any}:0")))
                .await
                .unwrap();
            let port = client.local_addr().port();
            assert!(port >= 49_152, "ephemeral {port}");
            let to = addr(&format!("{server_ip}:9000"));
            // A window of 8 datagrams in flight: the wire is lossless unless
            // something overflows, and nothing should.
            let n = 300u32;
            let mut want = BTreeMap::new();
            let mut buf = vec![0u8; 2048];
            let mut next = 0u32;
            while next < n || !want.is_empty() {
                while next < n && want.len() < 8 {
                    let d = datagram(next, 4 + (next as usize * 37) % 1400);
                    assert_eq!(client.send_to(&d, to).await.unwrap(), d.len());
                    want.insert(next, Fnv::of(&d));
                    next += 1;
                }
                let (len, from) = client.recv_from(&mut buf).await.unwrap();
                assert_eq!(from, to);
                let id = u32::from_le_bytes(buf[..4].try_into().unwrap());
                assert_eq!(
                    want.remove(&id),
                    Some(Fnv::of(&buf[..len])),
                    "datagram {id}"
                );
            }
            client.send_to(&[], to).await.unwrap();
            let server = echo.await.unwrap();
            drop(server);
        }
        settle(&sh).await;
        let delivered: u64 = {
            let mut t = 0;
            for q in 0..sh.queues() {
                t += sh
                    .with_engine(q, |e| e.counters().udp_in_datagrams)
                    .await
                    .unwrap();
            }
            t
        };
        assert_eq!(delivered, 2 * 301);
    };
    tokio::time::timeout(LIMIT, run).await.unwrap();
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_in_use_closed_ports_and_freed_ports() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async move {
        let a = UdpSocket::bind(&sh, addr("0.0.0.0:7000")).await.unwrap();
        let e = UdpSocket::bind(&sh, addr("0.0.0.0:7000"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::AddrInUse);
        // The other family's port is separate.
        let a6 = UdpSocket::bind(&sh, addr("[::]:7000")).await.unwrap();
        // A datagram to a closed port: the server's engine answers with ICMP.
        let c = UdpSocket::bind(&ch, addr("0.0.0.0:0")).await.unwrap();
        c.send_to(b"hello?", addr("10.0.0.2:7001")).await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let mut sent = 0;
            for q in 0..sh.queues() {
                sent += sh
                    .with_engine(q, |e| e.counters().icmp_out_dest_unreachs)
                    .await
                    .unwrap();
            }
            if sent == 1 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no port unreachable"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Sends staged before a drop still go out; then the port is free.
        c.send_to(b"last words", addr("10.0.0.2:7000"))
            .await
            .unwrap();
        drop(c);
        let mut buf = [0u8; 32];
        let (n, _) = a.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"last words");
        drop(a);
        settle(&sh).await;
        let again = UdpSocket::bind(&sh, addr("0.0.0.0:7000")).await.unwrap();
        // Arguments checked at once.
        let e = again.send_to(b"x", addr("[fd00::1]:1")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let e = again
            .send_to(&vec![0u8; 70_000], addr("10.0.0.1:1"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        // Too big for the path: the engine refuses it, the next send says so.
        again
            .send_to(&[0u8; 1473], addr("10.0.0.1:1"))
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            match again.send_to(b"ok", addr("10.0.0.1:1")).await {
                Err(e) => {
                    assert_eq!(e.kind(), ErrorKind::InvalidInput);
                    break;
                }
                Ok(_) => assert!(tokio::time::Instant::now() < deadline),
            }
        }
        (again, a6)
    };
    let (again, a6) = tokio::time::timeout(LIMIT, run).await.unwrap();
    // A stopped runtime fails the sockets.
    srt.shutdown().unwrap();
    let mut buf = [0u8; 8];
    let e = again.recv_from(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionAborted);
    assert!(a6.send_to(b"x", addr("[fd00::1]:1")).await.is_err());
    crt.shutdown().unwrap();
}

/// Datagrams the server's engines took in, over all queues.
async fn received(h: &Handle) -> u64 {
    let mut n = 0;
    for q in 0..h.queues() {
        n += h
            .with_engine(q, |e| e.counters().udp_in_datagrams)
            .await
            .unwrap();
    }
    n
}

/// Sockets served so far, over all queues.
fn served(h: &Handle) -> u64 {
    (0..h.queues()).map(|q| h.stats(q).unwrap().served).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_a_full_queue_gets_the_datagrams_its_engines_held_back() {
    // Queue threads that sleep a minute when nothing wakes them: a reader
    // that makes room in a full staging queue must wake them itself, or the
    // datagrams left in the engines wait for that minute.
    let (crt, srt) = two_runtimes_waiting(2, Duration::from_secs(60));
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async move {
        let server = UdpSocket::bind(&sh, addr("0.0.0.0:9100")).await.unwrap();
        // From four ports, so RSS spreads them over both queues; more than
        // the staging queue holds (256), less than each engine's queue.
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(UdpSocket::bind(&ch, addr("0.0.0.0:0")).await.unwrap());
        }
        let total = 4 * 150u32;
        for id in 0..total {
            let c = &clients[(id % 4) as usize];
            c.send_to(&datagram(id, 64), addr("10.0.0.2:9100"))
                .await
                .unwrap();
            if id % 64 == 63 {
                // Paced, so that the wire and the queues drop none.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while received(&sh).await < u64::from(total) {
            assert!(tokio::time::Instant::now() < deadline, "not all arrived");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut seen = vec![false; total as usize];
        let mut buf = [0u8; 128];
        for _ in 0..total {
            let (n, _) = tokio::time::timeout(Duration::from_secs(10), server.recv_from(&mut buf))
                .await
                .expect("a datagram held in an engine never reached the reader")
                .unwrap();
            assert_eq!(n, 64);
            let id = u32::from_le_bytes(buf[..4].try_into().unwrap());
            assert_eq!(&buf[..n], &datagram(id, 64)[..], "datagram {id}");
            assert!(!seen[id as usize], "datagram {id} twice");
            seen[id as usize] = true;
        }
        (server, clients)
    };
    let kept = tokio::time::timeout(LIMIT, run).await.unwrap();
    drop(kept);
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_are_not_served() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async move {
        let mut idle = Vec::new();
        for port in 0..1_000u16 {
            idle.push(
                UdpSocket::bind(&sh, addr(&format!("0.0.0.0:{}", 20_000 + port)))
                    .await
                    .unwrap(),
            );
        }
        let server = UdpSocket::bind(&sh, addr("0.0.0.0:9200")).await.unwrap();
        let client = UdpSocket::bind(&ch, addr("0.0.0.0:0")).await.unwrap();
        settle(&sh).await;
        let (before, polls) = (served(&sh), sh.stats(0).unwrap().polls);
        let rounds = 200u32;
        let mut buf = [0u8; 64];
        for id in 0..rounds {
            client
                .send_to(&datagram(id, 32), addr("10.0.0.2:9200"))
                .await
                .unwrap();
            let (n, from) = server.recv_from(&mut buf).await.unwrap();
            server.send_to(&buf[..n], from).await.unwrap();
            let (n, _) = client.recv_from(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], &datagram(id, 32)[..]);
        }
        let rounds_run = sh.stats(0).unwrap().polls - polls;
        let visits = served(&sh) - before;
        // Each round trip changes the server's socket a few times (a datagram
        // in, staged out, sent); a sweep would visit all 1,001 sockets on each
        // queue every round.
        assert!(rounds_run > u64::from(rounds), "{rounds_run} rounds");
        assert!(
            visits <= u64::from(rounds) * 8,
            "{visits} sockets served for {rounds} round trips beside 1,000 idle ones"
        );
        (idle, server, client)
    };
    let kept = tokio::time::timeout(LIMIT, run).await.unwrap();
    drop(kept);
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

/// Multicast through the adaptor: a socket bound on every queue joins a group
/// (each queue's engine joins), receives what another runtime sends to it,
/// leaves, and then gets nothing; leaving twice says `NotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multicast_join_receive_leave() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let run = async move {
        for (any, group) in [("0.0.0.0", "239.9.9.9"), ("[::]", "[ff15::9]")] {
            let server = UdpSocket::bind(&sh, addr(&format!("{any}:9100")))
                .await
                .unwrap();
            let g = addr(&format!("{group}:9100"));
            match g.ip() {
                std::net::IpAddr::V4(a) => server.join_multicast_v4(a).await.unwrap(),
                std::net::IpAddr::V6(a) => server.join_multicast_v6(a).await.unwrap(),
            }
            let client = UdpSocket::bind(&ch, addr(&format!("{any}:0")))
                .await
                .unwrap();
            client.set_multicast_hops(2).await.unwrap();
            let mut buf = [0u8; 64];
            // Sent until one arrives: the first may race the join's report.
            let got = loop {
                client.send_to(b"to the group", g).await.unwrap();
                if let Ok(r) =
                    tokio::time::timeout(Duration::from_millis(50), server.recv_from(&mut buf))
                        .await
                {
                    break r.unwrap();
                }
            };
            assert_eq!(&buf[..got.0], b"to the group");
            assert_eq!(got.1.ip(), client_ip(any));
            server.leave_multicast(g.ip()).await.unwrap();
            let again = server.leave_multicast(g.ip()).await.unwrap_err();
            assert_eq!(again.kind(), ErrorKind::NotFound);
            settle(&sh).await;
            while tokio::time::timeout(Duration::from_millis(20), server.recv_from(&mut buf))
                .await
                .is_ok()
            {}
            for _ in 0..5 {
                client.send_to(b"after the leave", g).await.unwrap();
            }
            settle(&ch).await;
            settle(&sh).await;
            assert!(
                tokio::time::timeout(Duration::from_millis(200), server.recv_from(&mut buf))
                    .await
                    .is_err(),
                "a datagram after the leave"
            );
            let filtered: u64 = {
                let mut n = 0;
                for q in 0..sh.queues() {
                    n += sh
                        .with_engine(q, |e| e.counters().rx_other_host)
                        .await
                        .unwrap();
                }
                n
            };
            assert!(
                filtered >= 5,
                "the engines drop the group's frames: {filtered}"
            );
        }
    };
    tokio::time::timeout(LIMIT, run).await.unwrap();
    crt.shutdown().unwrap();
    srt.shutdown().unwrap();
}

/// The client runtime's address of `any`'s family (`common::two_runtimes`).
fn client_ip(any: &str) -> std::net::IpAddr {
    if any.starts_with('[') {
        "fd00::1".parse().unwrap()
    } else {
        "10.0.0.1".parse().unwrap()
    }
}
