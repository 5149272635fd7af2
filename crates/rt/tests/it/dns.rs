//! The runtime's DNS resolver over a memory wire with RSS (two queues), against
//! a server on the other runtime that answers with messages captured from
//! dnsmasq (crates/dns/testdata: their ID set to the query's): a lookup over
//! UDP, a truncated answer that sends the resolver to TCP, the blocking form,
//! host names in `TcpStream::connect` and what happens without a resolver.

use crate::common;

use common::two_runtimes;
use linerate_dns::RecordType;
use linerate_rt::dns::Resolver;
use linerate_rt::{Handle, TcpListener, TcpStream, UdpSocket};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn capture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dns/testdata")
        .join(format!("{name}.answer.bin"));
    std::fs::read(p).unwrap()
}

/// The capture answering `query` (by its question's name and type, read at
/// RFC 1035's fixed offsets), with the query's ID; `None` for other questions.
fn answer_for(query: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let q = query.get(12..)?;
    let end = q.iter().position(|&b| b == 0)?;
    let qtype = u16::from_be_bytes([*q.get(end + 1)?, *q.get(end + 2)?]);
    let name = match (&q[..=end], qtype) {
        (b"\x03www\x07example\x04test\x00", 1) => "www-a",
        (b"\x03www\x07example\x04test\x00", 28) => "www-aaaa",
        (b"\x03big\x07example\x04test\x00", 1) if tcp => "big-a-tcp",
        (b"\x03big\x07example\x04test\x00", 1) => "big-a-udp",
        _ => return None,
    };
    let mut a = capture(name);
    a[..2].copy_from_slice(&query[..2]);
    Some(a)
}

/// A DNS server on `h` port 53, UDP and TCP, until the runtime stops.
async fn serve(h: &Handle) {
    let udp = UdpSocket::bind(h, "0.0.0.0:53".parse().unwrap())
        .await
        .unwrap();
    let tcp = TcpListener::bind(h, 53).await.unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 2048];
        while let Ok((n, from)) = udp.recv_from(&mut buf).await {
            if let Some(a) = answer_for(&buf[..n], false) {
                udp.send_to(&a, from).await.unwrap();
            }
        }
    });
    tokio::spawn(async move {
        while let Ok((mut s, _)) = tcp.accept().await {
            tokio::spawn(async move {
                let len = s.read_u16().await.unwrap();
                let mut q = vec![0u8; usize::from(len)];
                s.read_exact(&mut q).await.unwrap();
                if let Some(a) = answer_for(&q, true) {
                    s.write_u16(a.len() as u16).await.unwrap();
                    s.write_all(&a).await.unwrap();
                }
                let mut rest = Vec::new();
                let _ = s.read_to_end(&mut rest).await;
            });
        }
    });
}

fn config() -> linerate_dns::Config {
    let mut c = linerate_dns::Config::new(vec!["10.0.0.2:53".parse().unwrap()]);
    c.timeout = Duration::from_secs(2);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_over_udp_and_tcp() {
    let (crt, srt) = two_runtimes(2);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    serve(&sh).await;
    let r = Resolver::start(&ch, config()).unwrap();
    let limit = Duration::from_secs(20);
    // The address dnsmasq was given for www.example.test (testdata/hosts).
    let www = tokio::time::timeout(limit, r.lookup("www.example.test", RecordType::A))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(www.addrs, vec!["192.0.2.10".parse::<IpAddr>().unwrap()]);
    // 100 addresses: over TCP after the truncated UDP answer.
    let big = tokio::time::timeout(limit, r.lookup("big.example.test", RecordType::A))
        .await
        .unwrap()
        .unwrap();
    let mut got: Vec<IpAddr> = big.addrs.clone();
    got.sort();
    let want: Vec<IpAddr> = (1..=100u8)
        .map(|i| IpAddr::from([198, 51, 100, i]))
        .collect();
    assert_eq!(got, want);
    let s = r.stats().await.unwrap();
    assert_eq!((s.udp_queries, s.tcp_queries), (2, 1), "{s:?}");
    // The blocking form, from a thread outside the async runtime; the A
    // answer comes from the cache, the AAAA one from the server.
    let r2 = r.clone();
    let host = tokio::task::spawn_blocking(move || r2.lookup_host_blocking("www.example.test"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        host.addrs,
        vec![
            "2001:db8::10".parse::<IpAddr>().unwrap(),
            "192.0.2.10".parse().unwrap()
        ]
    );
    assert_eq!(r.stats().await.unwrap().cache_hits, 1);
    // A name the server never answers: every try times out (2 s, 2 tries).
    let mut quick = config();
    quick.timeout = Duration::from_millis(100);
    let r3 = Resolver::start(&ch, quick).unwrap();
    let e = r3.lookup_host("nobody.example.test").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    let e = r3.lookup_host("bad..name").await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_takes_literals_without_a_resolver_and_names_with_one() {
    let (crt, srt) = two_runtimes(1);
    let (ch, sh) = (crt.handle().clone(), srt.handle().clone());
    let listener = TcpListener::bind(&sh, 7).await.unwrap();
    let accept = tokio::spawn(async move {
        for _ in 0..3 {
            listener.accept().await.unwrap();
        }
    });
    // Literals need no resolver.
    for remote in ["10.0.0.2:7", "10.0.0.2:7"] {
        TcpStream::connect(&ch, remote).await.unwrap();
    }
    let addr: SocketAddr = "10.0.0.2:7".parse().unwrap();
    TcpStream::connect(&ch, (addr.ip(), 7)).await.unwrap();
    accept.await.unwrap();
    // A name without a resolver: NotFound, saying what to configure.
    let e = TcpStream::connect(&ch, "server.example.test:7")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(e.to_string().contains("RuntimeConfig::dns"), "{e}");
    assert_eq!(
        TcpStream::connect(&ch, "no-port").await.unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    // With one, the name is looked up. The capture says www.example.test is
    // 2001:db8::10 and 192.0.2.10, not on this wire: the connects themselves
    // go unanswered, so only the lookup is checked.
    serve(&sh).await;
    ch.set_resolver(Resolver::start(&ch, config()).unwrap());
    let connect = TcpStream::connect(&ch, ("www.example.test", 7));
    let _ = tokio::time::timeout(Duration::from_secs(1), connect).await;
    let s = ch.resolver().unwrap().stats().await.unwrap();
    assert_eq!(s.udp_queries, 2, "AAAA and A asked: {s:?}");
    assert_eq!(s.lookups, 1, "{s:?}");
}
