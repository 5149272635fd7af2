//! linerate's resolver against dnsmasq, and TCP connects by name.
//!
//! The test makes a TAP in a namespace of its own (the kernel at 10.77.0.1/24
//! on it, linerate's [`Runtime`] at 10.77.0.2 on this side) and starts dnsmasq
//! in the namespace, listening on 10.77.0.1:53 and serving names from a hosts
//! file (`big.dns.test`: 100 addresses, more than a 1232-byte UDP answer
//! holds), `--host-record` (`www.dns.test`: an IPv4 and an IPv6 address) and
//! `--address` (`kernel.dns.test`: the kernel's address); `--local=/dns.test/`
//! makes every other name there NXDOMAIN. What dnsmasq was told is the
//! expected answer. Through linerate's resolver:
//!
//! * A and AAAA of `www.dns.test`, from one host lookup;
//! * `big.dns.test`'s 100 addresses: the UDP answer is truncated, so the
//!   resolver asks again over TCP; the kernel's TCP counters in the namespace
//!   (`PassiveOpens`, dnsmasq accepting the connection) show that it did;
//! * NXDOMAIN for `nx.dns.test`;
//! * a first server that never answers (a closed port), then the live one;
//! * a TCP connect to `kernel.dns.test:7000`, a kernel listener in the
//!   namespace, echoing bytes back.
//!
//! The namespace, the TAP, dnsmasq and its files go away when the test ends,
//! also on failure. Needs root and dnsmasq:
//! `cargo test --features system-tests --test system_dns`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_dns::{LookupError, RecordType};
use linerate_rt::dns::Resolver;
use linerate_rt::{Runtime, RuntimeConfig, TcpStream};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::tap::{KERNEL_IP, OUR_IP, OUR_MAC};
use linerate_toe::Config;
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WWW_V6: &str = "fd00:77::1";

/// dnsmasq in the namespace, and its directory (hosts file, log); both go
/// away on drop.
struct Dnsmasq {
    child: Child,
    dir: PathBuf,
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn big_addrs() -> Vec<IpAddr> {
    (1..=100u8)
        .map(|i| IpAddr::V4(Ipv4Addr::new(198, 51, 100, i)))
        .collect()
}

impl Dnsmasq {
    fn start(ns: &Netns) -> Dnsmasq {
        let dir = std::env::temp_dir().join(netns::unique("ldns"));
        std::fs::create_dir_all(&dir).unwrap();
        let hosts: String = big_addrs()
            .iter()
            .map(|a| format!("{a} big.dns.test\n"))
            .collect();
        std::fs::write(dir.join("hosts"), hosts).unwrap();
        let child = ns
            .command("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--user=root",
                "--no-resolv",
                "--no-hosts",
                "--bind-interfaces",
                "--port=53",
                "--local=/dns.test/",
                "--local-ttl=60",
                "--log-queries",
            ])
            .arg(format!("--listen-address={KERNEL_IP}"))
            .arg(format!("--addn-hosts={}", dir.join("hosts").display()))
            .arg(format!("--log-facility={}", dir.join("log").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .arg(format!("--host-record=www.dns.test,{KERNEL_IP},{WWW_V6}"))
            .arg(format!("--address=/kernel.dns.test/{KERNEL_IP}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq runs (apt-get install dnsmasq)");
        let d = Dnsmasq { child, dir };
        // Ready once it listens on UDP and TCP port 53.
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let udp = ns.exec("ss", &["-Hlun", "sport = :53"]).unwrap();
            let tcp = ns.exec("ss", &["-Hltn", "sport = :53"]).unwrap();
            if !udp.stdout.is_empty() && !tcp.stdout.is_empty() {
                break;
            }
            assert!(Instant::now() < end, "dnsmasq did not start listening");
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }
}

/// The namespace's `Tcp: ... PassiveOpens` counter (connections the kernel
/// accepted).
fn passive_opens(ns: &Netns) -> u64 {
    let snmp = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
    let text = String::from_utf8(snmp.stdout).unwrap();
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "PassiveOpens")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

fn dns_config(servers: &[SocketAddr]) -> linerate_dns::Config {
    let mut c = linerate_dns::Config::new(servers.to_vec());
    c.timeout = Duration::from_millis(300);
    c.attempts = 2;
    c
}

/// Runs `f` on `wait`, failing the test if it takes over 10 s.
fn in_time<T>(wait: &tokio::runtime::Runtime, f: impl std::future::Future<Output = T>) -> T {
    wait.block_on(async { tokio::time::timeout(Duration::from_secs(10), f).await })
        .expect("done within 10 s")
}

#[test]
fn resolves_names_dnsmasq_serves_and_connects_by_name() {
    assert!(netns::is_root(), "system tests need root");
    let (tap, ns) = linerate_testkit::tap::tap_in_namespace("ldn", false).unwrap();
    let dnsmasq = Dnsmasq::start(&ns);
    let live = SocketAddr::new(KERNEL_IP.into(), 53);
    // Nothing listens there: the kernel answers with ICMP port unreachable,
    // which a DNS client cannot tell from loss; only the timeout moves on.
    let dead = SocketAddr::new(KERNEL_IP.into(), 5353);

    let engine = Config::new(OUR_MAC).with_ipv4(OUR_IP, 24);
    let rt = Runtime::start(
        tap,
        RuntimeConfig {
            dns: Some(dns_config(&[live])),
            ..RuntimeConfig::new(engine)
        },
    )
    .unwrap();
    let h = rt.handle().clone();
    let wait = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let resolver = h.resolver().unwrap();

    // A and AAAA in one host lookup (IPv6 first).
    let www = in_time(&wait, resolver.lookup_host("www.dns.test")).unwrap();
    assert_eq!(
        www.addrs,
        vec![WWW_V6.parse::<IpAddr>().unwrap(), IpAddr::V4(KERNEL_IP)]
    );
    let v6 = in_time(&wait, resolver.lookup("www.dns.test", RecordType::AAAA)).unwrap();
    assert_eq!(v6.addrs, vec![WWW_V6.parse::<IpAddr>().unwrap()]);

    // 100 A records: truncated over UDP, whole over TCP.
    let opens = passive_opens(&ns);
    let big = in_time(&wait, resolver.lookup("big.dns.test", RecordType::A)).unwrap();
    let got: BTreeSet<IpAddr> = big.addrs.iter().copied().collect();
    assert_eq!(big.addrs.len(), 100);
    assert_eq!(got, big_addrs().into_iter().collect());
    assert_eq!(
        passive_opens(&ns),
        opens + 1,
        "dnsmasq accepted one TCP connection for the truncated answer"
    );
    let stats = wait.block_on(resolver.stats()).unwrap();
    assert_eq!(stats.tcp_queries, 1, "{stats:?}");

    // NXDOMAIN.
    let e = in_time(&wait, resolver.lookup_host("nx.dns.test")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert_eq!(
        e.get_ref().and_then(|i| i.downcast_ref::<LookupError>()),
        Some(&LookupError::NxDomain)
    );

    // A dead first server, then the live second one; the blocking form
    // from this (non-runtime) thread.
    let failover = Resolver::start(&h, dns_config(&[dead, live])).unwrap();
    let started = Instant::now();
    let l = failover
        .lookup_blocking("kernel.dns.test", RecordType::A)
        .unwrap();
    assert_eq!(l.addrs, vec![IpAddr::V4(KERNEL_IP)]);
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "the first server was waited for"
    );
    let fs = wait.block_on(failover.stats()).unwrap();
    assert_eq!((fs.timeouts, fs.udp_queries), (1, 2), "{fs:?}");

    // TCP by name to a kernel listener in the namespace.
    let listener = ns
        .run(|| std::net::TcpListener::bind((KERNEL_IP, 7000)).unwrap())
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        peer
    });
    let echoed = in_time(&wait, async {
        let mut s = TcpStream::connect(&h, "kernel.dns.test:7000").await?;
        assert_eq!(s.peer_addr(), SocketAddr::new(KERNEL_IP.into(), 7000));
        s.write_all(b"hello").await?;
        let mut back = [0u8; 5];
        s.read_exact(&mut back).await?;
        std::io::Result::Ok(back)
    })
    .unwrap();
    assert_eq!(&echoed, b"hello");
    assert_eq!(server.join().unwrap().ip(), IpAddr::V4(OUR_IP));
    // The SocketAddr form still connects without a lookup.
    let listener2 = ns
        .run(|| std::net::TcpListener::bind((KERNEL_IP, 7001)).unwrap())
        .unwrap();
    let direct = SocketAddr::new(KERNEL_IP.into(), 7001);
    in_time(&wait, TcpStream::connect(&h, direct)).unwrap();
    listener2.accept().unwrap();

    // dnsmasq's own log names the queries it answered.
    let log = dnsmasq.log();
    for q in [
        "query[A] big.dns.test",
        "query[AAAA] www.dns.test",
        "query[A] nx.dns.test",
    ] {
        assert!(log.contains(q), "dnsmasq's log has {q:?}:\n{log}");
    }
    drop(rt);
}
