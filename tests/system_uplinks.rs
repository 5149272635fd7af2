//! An engine with two interfaces (`Config::interfaces`) on two uplinks to two
//! Linux routers, each in its own namespace and subnet: the Linux host with
//! eth0 and eth1.
//!
//! ```text
//!   nb (B 10.91.0.2, fd91::2) ── R1 (10.81.0.1, fd81::1) ══ TAP 0 ══╗
//!   nd (D 10.93.0.2)          ──┘                                  engine: interface 0 10.81.0.2, fd81::2
//!   nc (C 10.92.0.2, fd92::2) ── R2 (10.82.0.1, fd82::1) ══ TAP 1 ══╝        interface 1 10.82.0.2, fd82::2
//! ```
//!
//! The engine's table: default via R1 (interface 0), C's prefixes via R2 on
//! interface 1. R1 forwards only to B and D, R2 only to C, and neither knows
//! the other's uplink subnet: a TCP exchange with a kernel echo server in B,
//! C and D (the third prefix, the default route's) succeeds only if each
//! leaves by the right uplink with that uplink's own address as its source.
//! An AF_PACKET capture on each TAP's kernel side then shows which uplink
//! carried what: every frame from the engine on TAP 0 has interface 0's MAC
//! and address and is for B or D (or R1), every one on TAP 1 has interface
//! 1's and is for C (or R2). The same for IPv6 with B and C.
//!
//! The two TAPs are one NIC to the runtime's [`Driver`] through
//! [`linerate::nic::Ports`] (received frames tagged with their port, sent
//! frames out of the port their source MAC names, one epoll descriptor to
//! wait on).
//!
//! Needs root: `cargo test --features system-tests --test system_uplinks`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::tap::Tap;
use linerate::nic::{Nic, Ports};
use linerate::rt::{Driver, Runtime, RuntimeConfig, TcpStream};
use linerate::toe::{Config, Engine, Instant, Interface, Route, RouteKind, TcpState};
use linerate_testkit::capture::Capture;
use linerate_testkit::impair::tap_in_ring;
use linerate_testkit::netns::{self, Netns, VethPair};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::time::Duration;

const MAC0: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0x81, 0x02];
const MAC1: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0x82, 0x02];
const R1: Ipv4Addr = Ipv4Addr::new(10, 81, 0, 1);
const R2: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 1);
const ME0: Ipv4Addr = Ipv4Addr::new(10, 81, 0, 2);
const ME1: Ipv4Addr = Ipv4Addr::new(10, 82, 0, 2);
const B: Ipv4Addr = Ipv4Addr::new(10, 91, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(10, 92, 0, 2);
const D: Ipv4Addr = Ipv4Addr::new(10, 93, 0, 2);
const R1_6: Ipv6Addr = Ipv6Addr::new(0xfd81, 0, 0, 0, 0, 0, 0, 1);
const R2_6: Ipv6Addr = Ipv6Addr::new(0xfd82, 0, 0, 0, 0, 0, 0, 1);
const ME0_6: Ipv6Addr = Ipv6Addr::new(0xfd81, 0, 0, 0, 0, 0, 0, 2);
const ME1_6: Ipv6Addr = Ipv6Addr::new(0xfd82, 0, 0, 0, 0, 0, 0, 2);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd91, 0, 0, 0, 0, 0, 0, 2);
const C6: Ipv6Addr = Ipv6Addr::new(0xfd92, 0, 0, 0, 0, 0, 0, 2);
const PORT: u16 = 7000;

fn ok(out: std::io::Result<std::process::Output>, what: &str) {
    netns::must(out, what);
}

/// A kernel echo server in `ns` on `addr`: answers each connection with its
/// name, what it read and the address the connection came from, then closes.
fn echo_server(ns: &Netns, addr: IpAddr, name: &'static str) {
    let listener = ns
        .run(move || TcpListener::bind((addr, PORT)))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).unwrap_or(0);
            let peer = s
                .peer_addr()
                .map(|p| p.ip().to_string())
                .unwrap_or_default();
            let _ = s.write_all(name.as_bytes());
            let _ = s.write_all(&buf[..n]);
            let _ = s.write_all(format!(" from {peer}").as_bytes());
        }
    });
}

/// The engine over both TAPs, driven on this thread.
struct Host {
    driver: Driver<Ports<Tap>>,
    epoch: std::time::Instant,
}

impl Host {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn pump_until(&mut self, limit: Duration, what: &str, mut done: impl FnMut(&mut Host) -> bool) {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            let now = self.now();
            let next = self.driver.poll(now).unwrap();
            self.driver
                .wait(self.now(), next, Duration::from_millis(2))
                .unwrap();
        }
    }

    /// Connects to `to`, sends `msg`, and reads the answer to its end.
    fn exchange(&mut self, to: IpAddr, msg: &[u8]) -> Vec<u8> {
        let now = self.now();
        let c = self
            .driver
            .engine_mut()
            .tcp_connect(now, SocketAddr::new(to, PORT))
            .unwrap();
        self.pump_until(Duration::from_secs(10), "established", |h| {
            h.driver.engine().tcp_info(c).map(|i| i.state) == Ok(TcpState::Established)
        });
        self.driver.engine_mut().tcp_send(c, msg).unwrap();
        let mut got = Vec::new();
        self.pump_until(Duration::from_secs(10), "the answer", |h| {
            let mut buf = [0u8; 256];
            match h.driver.engine_mut().tcp_recv(c, &mut buf) {
                Ok(0) => true,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    false
                }
                Err(_) => false,
            }
        });
        self.driver.engine_mut().tcp_close(c).unwrap();
        // Let the close go out before the next exchange.
        let end = std::time::Instant::now() + Duration::from_millis(50);
        self.pump_until(Duration::from_secs(1), "close", |_| {
            std::time::Instant::now() >= end
        });
        got
    }
}

/// What a frame from the engine on a TAP is: source MAC, source and
/// destination address (IPv4 or IPv6; for ARP the sender and target).
#[derive(Debug, Clone, PartialEq)]
struct Sent {
    mac: [u8; 6],
    src: IpAddr,
    dst: IpAddr,
}

/// The frames of `frames` the engine sent (source MAC one of ours).
fn from_engine(frames: &[Vec<u8>]) -> Vec<Sent> {
    let mut out = Vec::new();
    for f in frames {
        let Some(mac) = f.get(6..12) else { continue };
        let mac: [u8; 6] = mac.try_into().unwrap();
        if mac != MAC0 && mac != MAC1 {
            continue;
        }
        let ethertype = u16::from_be_bytes([f[12], f[13]]);
        let body = &f[14..];
        let (src, dst) = match ethertype {
            0x0800 => (
                IpAddr::V4(Ipv4Addr::new(body[12], body[13], body[14], body[15])),
                IpAddr::V4(Ipv4Addr::new(body[16], body[17], body[18], body[19])),
            ),
            0x86dd => {
                let a: [u8; 16] = body[8..24].try_into().unwrap();
                let b: [u8; 16] = body[24..40].try_into().unwrap();
                (IpAddr::V6(a.into()), IpAddr::V6(b.into()))
            }
            0x0806 => (
                IpAddr::V4(Ipv4Addr::new(body[14], body[15], body[16], body[17])),
                IpAddr::V4(Ipv4Addr::new(body[24], body[25], body[26], body[27])),
            ),
            _ => continue,
        };
        out.push(Sent { mac, src, dst });
    }
    out
}

/// The routers, networks and echo servers of the module docs, and the two
/// TAPs for the engine; all go away when dropped.
struct Lab {
    r1: Netns,
    r2: Netns,
    taps: Option<(Tap, Tap)>,
    _nets: Vec<Netns>,
}

impl Lab {
    fn new() -> Lab {
        assert!(netns::is_root(), "system tests need root");
        // The routers, each with a TAP whose other end the engine drives.
        let r1 = Netns::new("lru1").unwrap();
        let r2 = Netns::new("lru2").unwrap();
        let tap0 = tap_in_ring(&r1, false, R1, None).unwrap();
        let tap1 = tap_in_ring(&r2, false, R2, None).unwrap();
        let (t0, t1) = (tap0.name().to_owned(), tap1.name().to_owned());
        ok(
            r1.ip(&["-6", "addr", "add", "fd81::1/64", "dev", &t0, "nodad"]),
            "R1 v6",
        );
        ok(
            r2.ip(&["-6", "addr", "add", "fd82::1/64", "dev", &t1, "nodad"]),
            "R2 v6",
        );
        // Networks B and D behind R1, C behind R2.
        let nb = Netns::new("lrub").unwrap();
        let nc = Netns::new("lruc").unwrap();
        let nd = Netns::new("lrud").unwrap();
        let vb = VethPair::new(&r1, "10.91.0.1/24", &nb, "10.91.0.2/24").unwrap();
        let vc = VethPair::new(&r2, "10.92.0.1/24", &nc, "10.92.0.2/24").unwrap();
        let _vd = VethPair::new(&r1, "10.93.0.1/24", &nd, "10.93.0.2/24").unwrap();
        ok(
            r1.ip(&["-6", "addr", "add", "fd91::1/64", "dev", &vb.a, "nodad"]),
            "B v6 gw",
        );
        ok(
            nb.ip(&["-6", "addr", "add", "fd91::2/64", "dev", &vb.b, "nodad"]),
            "B v6",
        );
        ok(
            r2.ip(&["-6", "addr", "add", "fd92::1/64", "dev", &vc.a, "nodad"]),
            "C v6 gw",
        );
        ok(
            nc.ip(&["-6", "addr", "add", "fd92::2/64", "dev", &vc.b, "nodad"]),
            "C v6",
        );
        for (ns, gw, gw6) in [
            (&nb, "10.91.0.1", Some("fd91::1")),
            (&nc, "10.92.0.1", Some("fd92::1")),
            (&nd, "10.93.0.1", None),
        ] {
            ok(ns.ip(&["route", "add", "default", "via", gw]), "default");
            if let Some(gw6) = gw6 {
                ok(
                    ns.ip(&["-6", "route", "add", "default", "via", gw6]),
                    "default v6",
                );
            }
        }
        for ns in [&r1, &r2] {
            ok(
                ns.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]),
                "ip_forward",
            );
            ok(
                ns.exec("sysctl", &["-qw", "net.ipv6.conf.all.forwarding=1"]),
                "ipv6 forwarding",
            );
        }
        echo_server(&nb, IpAddr::V4(B), "B:");
        echo_server(&nc, IpAddr::V4(C), "C:");
        echo_server(&nd, IpAddr::V4(D), "D:");
        echo_server(&nb, IpAddr::V6(B6), "B6:");
        echo_server(&nc, IpAddr::V6(C6), "C6:");

        Lab {
            r1,
            r2,
            taps: Some((tap0, tap1)),
            _nets: vec![nb, nc, nd],
        }
    }
}

/// The engine's configuration: interface 0 towards R1 (the default routes),
/// interface 1 towards R2 (C's prefixes).
fn engine_config() -> Config {
    let mut cfg = Config::new(MAC0)
        .with_ipv4(ME0, 24)
        .with_ipv6(ME0_6, 64)
        .with_interface(Interface::new(MAC1).with_ipv4(ME1, 24).with_ipv6(ME1_6, 64))
        .with_gateway(IpAddr::V4(R1))
        .with_gateway(IpAddr::V6(R1_6))
        .with_route(
            Route::new(
                IpAddr::V4(Ipv4Addr::new(10, 92, 0, 0)),
                24,
                RouteKind::Via(IpAddr::V4(R2)),
            )
            .with_dev(1),
        )
        .with_route(
            Route::new(
                IpAddr::V6(Ipv6Addr::new(0xfd92, 0, 0, 0, 0, 0, 0, 0)),
                64,
                RouteKind::Via(IpAddr::V6(R2_6)),
            )
            .with_dev(1),
        );
    cfg.offloads = false;
    cfg.announcements = 0;
    cfg.validate().unwrap();
    cfg
}

/// Who is asked, what, and the answer: each server names the uplink address
/// the connection came from.
const EXCHANGES: [(IpAddr, &str, &str); 5] = [
    (IpAddr::V4(B), "hello B", "B:hello B from 10.81.0.2"),
    (IpAddr::V4(C), "hello C", "C:hello C from 10.82.0.2"),
    (IpAddr::V4(D), "hello D", "D:hello D from 10.81.0.2"),
    (IpAddr::V6(B6), "hello B6", "B6:hello B6 from fd81::2"),
    (IpAddr::V6(C6), "hello C6", "C6:hello C6 from fd82::2"),
];

#[test]
fn each_prefix_leaves_by_its_uplink_and_the_default_takes_the_rest() {
    let mut lab = Lab::new();
    let (tap0, tap1) = lab.taps.take().unwrap();
    let (t0, t1) = (tap0.name().to_owned(), tap1.name().to_owned());
    let cfg = engine_config();
    let ports = Ports::new(vec![(tap0, MAC0), (tap1, MAC1)]).unwrap();
    let engine = Engine::try_new(cfg, 0x5eed).unwrap();
    let mut h = Host {
        driver: Driver::new(engine, ports, 0).unwrap(),
        epoch: std::time::Instant::now(),
    };

    // Captures on the kernel side of each TAP.
    let cap0 = lab.r1.run(move || Capture::open(&t0)).unwrap().unwrap();
    let cap1 = lab.r2.run(move || Capture::open(&t1)).unwrap().unwrap();

    // Each server answers, and saw the address of the uplink it was reached by.
    for (to, msg, answer) in EXCHANGES {
        let got = h.exchange(to, msg.as_bytes());
        assert_eq!(String::from_utf8_lossy(&got), answer);
    }

    let quiet = Duration::from_millis(200);
    let on0 = from_engine(&cap0.collect(quiet, Duration::from_secs(2)).unwrap());
    let on1 = from_engine(&cap1.collect(quiet, Duration::from_secs(2)).unwrap());
    println!(
        "uplink 0 carried {} frames from the engine, uplink 1 {}",
        on0.len(),
        on1.len()
    );
    // Uplink 0: interface 0's MAC and addresses only, to B, D or R1.
    for s in &on0 {
        assert_eq!(s.mac, MAC0, "{s:?}");
        assert!(
            s.src == IpAddr::V4(ME0) || s.src == IpAddr::V6(ME0_6),
            "{s:?}"
        );
        assert!(
            [
                IpAddr::V4(B),
                IpAddr::V4(D),
                IpAddr::V4(R1),
                IpAddr::V6(B6),
                IpAddr::V6(R1_6)
            ]
            .contains(&s.dst)
                || matches!(s.dst, IpAddr::V6(a) if a.segments()[0] == 0xff02),
            "{s:?}"
        );
    }
    // Uplink 1: interface 1's, to C or R2.
    for s in &on1 {
        assert_eq!(s.mac, MAC1, "{s:?}");
        assert!(
            s.src == IpAddr::V4(ME1) || s.src == IpAddr::V6(ME1_6),
            "{s:?}"
        );
        assert!(
            [
                IpAddr::V4(C),
                IpAddr::V4(R2),
                IpAddr::V6(C6),
                IpAddr::V6(R2_6)
            ]
            .contains(&s.dst)
                || matches!(s.dst, IpAddr::V6(a) if a.segments()[0] == 0xff02),
            "{s:?}"
        );
    }
    // And each carried its share.
    for (on, dst) in [
        (&on0, IpAddr::V4(B)),
        (&on0, IpAddr::V4(D)),
        (&on0, IpAddr::V6(B6)),
        (&on1, IpAddr::V4(C)),
        (&on1, IpAddr::V6(C6)),
    ] {
        assert!(
            on.iter().filter(|s| s.dst == dst).count() >= 3,
            "{dst}: {on:?}"
        );
    }
    // The engine saw each uplink's frames arrive on its interface.
    let e = h.driver.engine();
    assert!(e.interface_counters(1).rx_frames > 5);
    assert!(e.interface_counters(1).arp_requests_out >= 1);
    assert!(e.interface_counters(0).arp_requests_out >= 1);
    let p = h.driver.nic();
    let tx = |i: usize| {
        p.port(i)
            .unwrap()
            .counters()
            .snapshot()
            .by_name("tx_packets")
            .unwrap_or(0)
    };
    assert!(tx(0) >= on0.len() as u64 && tx(1) >= on1.len() as u64);
}

/// The same two uplinks under the runtime: `Runtime::start` over [`Ports`]
/// of the two TAPs, unchanged queue thread, and the tokio adaptor's
/// `TcpStream::connect` to each network.
#[test]
fn the_runtime_drives_two_uplinks_through_ports() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut lab = Lab::new();
    let (tap0, tap1) = lab.taps.take().unwrap();
    let ports = Ports::new(vec![(tap0, MAC0), (tap1, MAC1)]).unwrap();
    let rt = Runtime::start(ports, RuntimeConfig::new(engine_config())).unwrap();
    let h = rt.handle().clone();
    let wait = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    for (to, msg, answer) in EXCHANGES {
        let got = wait
            .block_on(async {
                tokio::time::timeout(Duration::from_secs(10), async {
                    let mut s = TcpStream::connect(&h, SocketAddr::new(to, PORT)).await?;
                    s.write_all(msg.as_bytes()).await?;
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).await?;
                    std::io::Result::Ok(got)
                })
                .await
            })
            .expect("answered within 10 s")
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&got), answer);
    }
    rt.shutdown().unwrap();
}
