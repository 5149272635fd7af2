//! The engine's routing table against Linux routers (`Config::routes`).
//!
//! The engine sits on a TAP whose kernel side is namespace R1 (10.77.0.1, the
//! TAP host of `linerate_testkit::tap`). A second router, R2, is on the same
//! link: a macvlan of the TAP moved into its own namespace (10.77.0.3, its own
//! MAC). R1 forwards to network B (10.91.0.0/24) and nothing else; R2 forwards
//! to network C (10.92.0.0/24) and nothing else; a kernel echo server listens
//! in each. The engine's table: default via R1, 10.92.0.0/24 via R2,
//! 10.93.0.0/24 blackhole. A TCP exchange with B's server and with C's server
//! each succeeds only through the right router (neither router can reach the
//! other network), and a connect into the blackhole is refused with nothing
//! sent. Then the route to C is removed at run time: a new connection to C
//! goes to R1, which cannot forward it (R1 answers with ICMP net unreachable
//! or drops it), so the connect never completes, while B still works.
//!
//! Needs root: `cargo test --features system-tests --test system_routes`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::toe::{ConnectError, Route, RouteKind, TcpState, Unroutable};
use linerate_testkit::netns::{self, Netns, VethPair};
use linerate_testkit::tap::{KERNEL_IP, TapHost};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::time::Duration;

const R2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
const B_SERVER: Ipv4Addr = Ipv4Addr::new(10, 91, 0, 2);
const C_SERVER: Ipv4Addr = Ipv4Addr::new(10, 92, 0, 2);
const PORT: u16 = 7000;

fn ok(out: std::io::Result<std::process::Output>, what: &str) {
    netns::must(out, what);
}

/// A kernel echo server in `ns` at `addr`: answers each connection with what
/// it read, prefixed by its own name, then closes.
fn echo_server(ns: &Netns, addr: Ipv4Addr, name: &'static str) {
    let listener = ns
        .run(move || TcpListener::bind((addr, PORT)))
        .unwrap()
        .unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 64];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = s.write_all(name.as_bytes());
            let _ = s.write_all(&buf[..n]);
        }
    });
}

/// Connects to `to`, sends `msg`, and reads the answer to its end.
fn exchange(h: &mut TapHost, to: Ipv4Addr, msg: &[u8]) -> Vec<u8> {
    let now = h.now();
    let c = h
        .engine_mut()
        .tcp_connect(now, SocketAddr::new(IpAddr::V4(to), PORT))
        .unwrap();
    h.pump_until(Duration::from_secs(10), "established", |h| {
        h.engine().tcp_info(c).map(|i| i.state) == Ok(TcpState::Established)
    })
    .unwrap();
    h.engine_mut().tcp_send(c, msg).unwrap();
    let mut got = Vec::new();
    h.pump_until(Duration::from_secs(10), "the answer", |h| {
        let mut buf = [0u8; 256];
        match h.engine_mut().tcp_recv(c, &mut buf) {
            Ok(0) => true,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                false
            }
            Err(_) => false,
        }
    })
    .unwrap();
    h.engine_mut().tcp_close(c).unwrap();
    got
}

#[test]
fn traffic_leaves_by_the_route_for_its_prefix() {
    assert!(netns::is_root(), "system tests need root");
    let mut h = TapHost::with_config("lrrt", false, |c| {
        *c = c
            .clone()
            .with_gateway(IpAddr::V4(KERNEL_IP))
            .with_route(Route::new(
                IpAddr::V4(Ipv4Addr::new(10, 92, 0, 0)),
                24,
                RouteKind::Via(IpAddr::V4(R2)),
            ))
            .with_route(Route::new(
                IpAddr::V4(Ipv4Addr::new(10, 93, 0, 0)),
                24,
                RouteKind::Blackhole,
            ));
        c.validate().unwrap();
    })
    .unwrap();
    let tap = h.tap().name().to_owned();
    // R2: a macvlan of the TAP, in a namespace of its own.
    let r2 = Netns::new("lrr2").unwrap();
    let mv = netns::unique("lrmv");
    ok(
        h.ns.ip(&[
            "link", "add", &mv, "link", &tap, "type", "macvlan", "mode", "bridge",
        ]),
        "macvlan",
    );
    ok(h.ns.ip(&["link", "set", &mv, "netns", r2.name()]), "move");
    ok(
        r2.ip(&["addr", "add", "10.77.0.3/24", "dev", &mv]),
        "R2 addr",
    );
    ok(r2.ip(&["link", "set", &mv, "up"]), "R2 up");
    // Networks B and C behind them.
    let nb = Netns::new("lrnb").unwrap();
    let nc = Netns::new("lrnc").unwrap();
    let _vb = VethPair::new(&h.ns, "10.91.0.1/24", &nb, "10.91.0.2/24").unwrap();
    let _vc = VethPair::new(&r2, "10.92.0.1/24", &nc, "10.92.0.2/24").unwrap();
    ok(
        nb.ip(&["route", "add", "default", "via", "10.91.0.1"]),
        "B route",
    );
    ok(
        nc.ip(&["route", "add", "default", "via", "10.92.0.1"]),
        "C route",
    );
    for ns in [&h.ns, &r2] {
        ok(
            ns.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]),
            "ip_forward",
        );
    }
    echo_server(&nb, B_SERVER, "B:");
    echo_server(&nc, C_SERVER, "C:");

    assert_eq!(exchange(&mut h, B_SERVER, b"hello B"), b"B:hello B");
    assert_eq!(exchange(&mut h, C_SERVER, b"hello C"), b"C:hello C");

    // The blackhole: refused at once, nothing on the wire for it.
    let now = h.now();
    let e = h
        .engine_mut()
        .tcp_connect(
            now,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 93, 0, 9)), PORT),
        )
        .unwrap_err();
    assert_eq!(e, ConnectError::Unroutable(Unroutable::Blackhole));

    // Without the route to C, its traffic goes to R1, which cannot forward it.
    let gone = h
        .engine_mut()
        .remove_route(IpAddr::V4(Ipv4Addr::new(10, 92, 0, 0)), 24, 0)
        .unwrap();
    assert_eq!(gone.kind, RouteKind::Via(IpAddr::V4(R2)));
    let now = h.now();
    let c = h
        .engine_mut()
        .tcp_connect(now, SocketAddr::new(IpAddr::V4(C_SERVER), PORT))
        .unwrap();
    let r = h.pump_until(Duration::from_secs(2), "no way to C through R1", |h| {
        h.engine().tcp_info(c).map(|i| i.state) == Ok(TcpState::Established)
    });
    assert!(r.is_err(), "reached C through R1");
    assert_eq!(exchange(&mut h, B_SERVER, b"again"), b"B:again");
}
