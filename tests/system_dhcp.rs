//! Addresses from the network: linerate's runtime configured by dnsmasq.
//!
//! The test makes a TAP in a namespace of its own (the kernel at
//! 10.77.0.1/24 and fd00:77:38::1/64 on it) and starts dnsmasq there as DHCP
//! server (a 2-minute lease, dnsmasq's shortest, with T1 5 s and T2 8 s so
//! that a renewal comes within seconds; router, DNS server and MTU options),
//! router advertiser (`--enable-ra`, the prefix stateless, the DNS server in
//! an RDNSS option) and DNS server (`named.dhcp.test`, an A and an AAAA
//! record). linerate's [`Runtime`] starts with no address at all, DHCP and
//! SLAAC switched on in its engine configuration, and:
//!
//! * gets an IPv4 lease from dnsmasq's range, with its prefix, router, DNS
//!   server and MTU, and the times dnsmasq was told;
//! * renews it at T1 (dnsmasq's log shows the second DHCPACK);
//! * forms the SLAAC address of the advertised prefix and its MAC, and
//!   takes the RDNSS server;
//! * resolves `named.dhcp.test` through the servers it learnt;
//! * carries TCP over both addresses it obtained, both ways, with kernel
//!   sockets in the namespace (each side checks the other's address).
//!
//! A second test restarts the client over the same interface (a persistent
//! TAP, reopened): a runtime started again with the address of its last
//! lease asks for it in INIT-REBOOT and gets it without a DISCOVER; one that
//! stops with `dhcp_release_on_stop` gives the lease back (dnsmasq logs the
//! DHCPRELEASE and drops the lease from its file); one that remembers an
//! address of another network is refused (DHCPNAK) and starts over.
//!
//! The namespace, the TAP, dnsmasq and its files go away when the test ends,
//! also on failure. Needs root and dnsmasq:
//! `cargo test --features system-tests --test system_dhcp`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_rt::{NetState, Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::tap::{KERNEL_IP, OUR_MAC};
use linerate_toe::Config;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KERNEL_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x77, 0x38, 0, 0, 0, 0, 1);

/// dnsmasq in the namespace, and its directory (log, leases); both go away
/// on drop.
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

impl Dnsmasq {
    fn start(ns: &Netns, dev: &str) -> Dnsmasq {
        let dir = std::env::temp_dir().join(netns::unique("ldhcp"));
        std::fs::create_dir_all(&dir).unwrap();
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
                "--local=/dhcp.test/",
                "--log-queries",
                "--log-dhcp",
                "--enable-ra",
                "--dhcp-authoritative",
                "--dhcp-range=10.77.0.50,10.77.0.99,255.255.255.0,2m",
                "--dhcp-range=fd00:77:38::,ra-stateless,64",
                "--dhcp-option=option:T1,5",
                "--dhcp-option=option:T2,8",
                "--dhcp-option=option:router,10.77.0.1",
                "--dhcp-option=option:dns-server,10.77.0.1",
                "--dhcp-option=option:mtu,1400",
                "--dhcp-option=option6:dns-server,[fd00:77:38::1]",
                "--host-record=named.dhcp.test,10.77.0.1,fd00:77:38::1",
            ])
            .arg(format!("--interface={dev}"))
            .arg(format!("--listen-address={KERNEL_IP}"))
            .arg(format!("--listen-address={KERNEL_V6}"))
            .arg(format!("--dhcp-leasefile={}", dir.join("leases").display()))
            .arg(format!("--log-facility={}", dir.join("log").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dnsmasq runs (apt-get install dnsmasq)");
        let d = Dnsmasq { child, dir };
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            let dhcp = ns.exec("ss", &["-Hlun", "sport = :67"]).unwrap();
            let dns = ns.exec("ss", &["-Hlun", "sport = :53"]).unwrap();
            if !dhcp.stdout.is_empty() && !dns.stdout.is_empty() {
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

    fn leases(&self) -> String {
        std::fs::read_to_string(self.dir.join("leases")).unwrap_or_default()
    }
}

/// The DHCP client of the tests: RFC 5227's probe takes about 5 s; one
/// probe and a short wait keep the tests short and still show the probe on
/// the wire.
fn quick_client() -> linerate_dhcp::Config {
    let mut client = linerate_dhcp::Config::new(OUR_MAC);
    client.arp_probe = linerate_dhcp::ArpProbe {
        count: 1,
        wait: Duration::from_millis(100),
        min: Duration::from_millis(100),
        max: Duration::from_millis(200),
        announce_wait: Duration::from_millis(300),
    };
    client
}

/// Waits until the kernel's link-local address on `dev` is past DAD
/// (dnsmasq advertises from it).
fn link_local_ready(ns: &Netns, dev: &str) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let o = ns
            .ip(&["-6", "addr", "show", "dev", dev, "scope", "link"])
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout).to_string();
        if text.contains("fe80") && !text.contains("tentative") {
            break;
        }
        assert!(Instant::now() < end, "no link-local address: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The modified EUI-64 address of `mac` in `prefix`/64 (RFC 4291
/// appendix A), written out here rather than taken from linerate.
fn eui64(prefix: [u16; 4], mac: [u8; 6]) -> Ipv6Addr {
    let w = |a: u8, b: u8| u16::from_be_bytes([a, b]);
    Ipv6Addr::new(
        prefix[0],
        prefix[1],
        prefix[2],
        prefix[3],
        w(mac[0] ^ 2, mac[1]),
        w(mac[2], 0xff),
        w(0xfe, mac[3]),
        w(mac[4], mac[5]),
    )
}

/// Waits (up to `limit`) for the runtime's view of the network to satisfy
/// `ok`; returns it.
fn wait_net(
    rt: &tokio::runtime::Runtime,
    h: &linerate_rt::Handle,
    limit: Duration,
    ok: impl FnMut(&NetState) -> bool,
) -> NetState {
    let mut rx = h.watch_net();
    rt.block_on(async {
        tokio::time::timeout(limit, rx.wait_for(ok))
            .await
            .map(|s| s.map(|s| s.clone()))
    })
    .unwrap_or_else(|_| panic!("timed out; the runtime has {:?}", h.net_state()))
    .unwrap()
}

/// Runs `f` on `wait`, failing the test if it takes over 10 s.
fn in_time<T>(wait: &tokio::runtime::Runtime, f: impl std::future::Future<Output = T>) -> T {
    wait.block_on(async { tokio::time::timeout(Duration::from_secs(10), f).await })
        .expect("done within 10 s")
}

/// linerate connects to a kernel listener at `kernel` and the kernel
/// connects to a linerate listener at `ours`: each side sees the other's
/// address, and the bytes come back.
fn tcp_both_ways(
    wait: &tokio::runtime::Runtime,
    h: &linerate_rt::Handle,
    ns: &Netns,
    kernel: SocketAddr,
    ours: SocketAddr,
) {
    let listener = ns
        .run(move || std::net::TcpListener::bind(kernel).unwrap())
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
        peer
    });
    let echoed = in_time(wait, async {
        let mut s = TcpStream::connect(h, kernel).await?;
        s.write_all(b"hello").await?;
        let mut back = [0u8; 5];
        s.read_exact(&mut back).await?;
        std::io::Result::Ok(back)
    })
    .unwrap();
    assert_eq!(&echoed, b"hello");
    assert_eq!(
        server.join().unwrap().ip(),
        ours.ip(),
        "the kernel saw our obtained address"
    );

    let l = in_time(wait, TcpListener::bind(h, ours.port())).unwrap();
    let client = ns
        .spawn(move || {
            let mut s = std::net::TcpStream::connect_timeout(&ours, Duration::from_secs(10))?;
            s.set_read_timeout(Some(Duration::from_secs(10)))?;
            s.write_all(b"world")?;
            let mut back = [0u8; 5];
            s.read_exact(&mut back)?;
            std::io::Result::Ok((back, s.local_addr()?))
        })
        .unwrap();
    let peer = in_time(wait, async {
        let (mut s, peer) = l.accept().await?;
        assert_eq!(s.local_addr(), ours);
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await?;
        s.write_all(&buf).await?;
        std::io::Result::Ok(peer)
    })
    .unwrap();
    let (back, local) = client.join().unwrap().unwrap().unwrap();
    assert_eq!(&back, b"world");
    // The kernel's own address, as it chose it (on the IPv6 link it may
    // be one it formed from the same advertisement).
    assert_eq!(peer, local);
}

#[test]
fn dnsmasq_gives_addresses_dns_and_a_renewal() {
    assert!(netns::is_root(), "system tests need root");
    let (tap, ns) = linerate_testkit::tap::tap_in_namespace("ldh", false).unwrap();
    let dev = tap.name().to_string();
    let v6 = format!("{KERNEL_V6}/64");
    ns.ip(&["-6", "addr", "add", &v6, "dev", &dev, "nodad"])
        .unwrap();
    link_local_ready(&ns, &dev);
    let dnsmasq = Dnsmasq::start(&ns, &dev);

    let mut engine = Config::new(OUR_MAC);
    engine.dhcp = true;
    engine.slaac = true;
    let rt = Runtime::start(
        tap,
        RuntimeConfig {
            dhcp_client: Some(quick_client()),
            ..RuntimeConfig::new(engine)
        },
    )
    .unwrap();
    let h = rt.handle().clone();
    let wait = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();

    // Both addresses and both DNS servers.
    let slaac = eui64([0xfd00, 0x77, 0x38, 0], OUR_MAC);
    let dns_v4 = IpAddr::V4(KERNEL_IP);
    let dns_v6 = IpAddr::V6(KERNEL_V6);
    let st = wait_net(&wait, &h, Duration::from_secs(20), |s| {
        s.ipv4.is_some() && s.ipv6.is_some() && s.dns.contains(&dns_v4) && s.dns.contains(&dns_v6)
    });
    let (v4, len) = st.ipv4.unwrap();
    assert!(
        (Ipv4Addr::new(10, 77, 0, 50)..=Ipv4Addr::new(10, 77, 0, 99)).contains(&v4),
        "{v4} is in dnsmasq's range"
    );
    assert_eq!(len, 24);
    assert_eq!(st.ipv6, Some((slaac, 64)));
    let lease = st.lease.clone().unwrap();
    assert_eq!(lease.addr, v4);
    assert_eq!(lease.server, KERNEL_IP);
    assert_eq!(lease.routers, [KERNEL_IP]);
    assert_eq!(lease.dns_servers, [KERNEL_IP]);
    assert_eq!(lease.mtu, Some(1400));
    assert_eq!(lease.lease_time, Some(Duration::from_secs(120)));
    assert_eq!(lease.renewal_time, Duration::from_secs(5));
    assert_eq!(lease.rebinding_time, Duration::from_secs(8));
    let (mtu, gw4, ra_dns, router) = h
        .with_engine_blocking(0, |e| {
            (
                e.config().mtu,
                e.route_lookup(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
                e.dns_servers(),
                e.slaac_state().router.map(|(r, _)| r),
            )
        })
        .unwrap();
    assert_eq!(mtu, 1400, "the lease's MTU is the engine's");
    assert_eq!(gw4, linerate_toe::NextHop::Neighbor(IpAddr::V4(KERNEL_IP)));
    assert_eq!(ra_dns, [dns_v6], "the RDNSS server of the advertisement");
    let router = router.expect("a default router from the advertisement");
    assert_eq!(router.segments()[0], 0xfe80, "{router} is link-local");

    // A renewal at T1 (5 s after the request), acknowledged by dnsmasq.
    let renewed = wait_net(&wait, &h, Duration::from_secs(15), |s| s.renewals >= 1);
    assert_eq!(renewed.ipv4, Some((v4, 24)));
    let log = dnsmasq.log();
    let acks = log.matches(&format!("DHCPACK({dev}) {v4}")).count();
    assert!(
        acks >= 2,
        "dnsmasq acknowledged the request and a renewal:\n{log}"
    );
    assert!(
        log.contains(&format!("DHCPREQUEST({dev}) {v4}")),
        "dnsmasq saw our requests:\n{log}"
    );

    // A name dnsmasq serves, through the servers the network gave.
    let resolver = h.resolver().unwrap();
    let named = in_time(&wait, resolver.lookup_host("named.dhcp.test")).unwrap();
    assert_eq!(named.addrs, vec![dns_v6, dns_v4]);
    assert!(
        dnsmasq.log().contains("query[A] named.dhcp.test"),
        "dnsmasq answered the lookup"
    );

    // TCP over both obtained addresses, both ways.
    tcp_both_ways(
        &wait,
        &h,
        &ns,
        SocketAddr::new(dns_v4, 7100),
        SocketAddr::new(IpAddr::V4(v4), 7200),
    );
    tcp_both_ways(
        &wait,
        &h,
        &ns,
        SocketAddr::new(dns_v6, 7101),
        SocketAddr::new(IpAddr::V6(slaac), 7201),
    );
    drop(rt);
}

/// A runtime with DHCP on the persistent TAP `dev` of `ns` (reopened), the
/// client starting in INIT-REBOOT with `reboot` if given.
fn dhcp_runtime(ns: &Netns, dev: &str, reboot: Option<Ipv4Addr>, release: bool) -> Runtime {
    let cfg = linerate_nic::TapConfig {
        offloads: linerate_nic::tap::TapOffloads::NONE,
        ..linerate_nic::TapConfig::new(dev)
    };
    let tap = ns
        .run(move || linerate_nic::Tap::open(&cfg))
        .unwrap()
        .unwrap();
    let mut engine = Config::new(OUR_MAC);
    engine.dhcp = true;
    engine.offloads = false;
    let mut client = quick_client();
    client.init_reboot = reboot;
    Runtime::start(
        tap,
        RuntimeConfig {
            dhcp_client: Some(client),
            dhcp_release_on_stop: release,
            ..RuntimeConfig::new(engine)
        },
    )
    .unwrap()
}

/// Waits up to 10 s for dnsmasq's log to satisfy `ok`.
fn wait_log(d: &Dnsmasq, what: &str, ok: impl Fn(&str) -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !ok(&d.log()) {
        assert!(Instant::now() < end, "{what}:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn init_reboot_keeps_the_lease_and_release_gives_it_back() {
    assert!(netns::is_root(), "system tests need root");
    let ns = Netns::new("ldr").unwrap();
    let dev = netns::unique("ldr");
    ns.ip(&["tuntap", "add", "dev", &dev, "mode", "tap"])
        .unwrap();
    ns.ip(&["addr", "add", &format!("{KERNEL_IP}/24"), "dev", &dev])
        .unwrap();
    let v6 = format!("{KERNEL_V6}/64");
    ns.ip(&["-6", "addr", "add", &v6, "dev", &dev, "nodad"])
        .unwrap();
    ns.ip(&["link", "set", &dev, "up"]).unwrap();
    let dnsmasq = Dnsmasq::start(&ns, &dev);
    let wait = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let discovers = |d: &Dnsmasq| d.log().matches(&format!("DHCPDISCOVER({dev})")).count();

    // A first lease, kept when the runtime stops (the default).
    let rt = dhcp_runtime(&ns, &dev, None, false);
    let st = wait_net(&wait, rt.handle(), Duration::from_secs(20), |s| {
        s.ipv4.is_some()
    });
    let (v4, _) = st.ipv4.unwrap();
    drop(rt);
    assert_eq!(discovers(&dnsmasq), 1);
    assert!(!dnsmasq.log().contains("DHCPRELEASE"), "{}", dnsmasq.log());
    assert!(
        dnsmasq.leases().contains(&v4.to_string()),
        "dnsmasq keeps the lease"
    );

    // Started again with that address: INIT-REBOOT, no DISCOVER.
    let rt = dhcp_runtime(&ns, &dev, Some(v4), true);
    let st = wait_net(&wait, rt.handle(), Duration::from_secs(20), |s| {
        s.ipv4.is_some()
    });
    assert_eq!(st.ipv4, Some((v4, 24)), "the same address");
    assert_eq!(discovers(&dnsmasq), 1, "no DISCOVER:\n{}", dnsmasq.log());
    assert_eq!(
        dnsmasq
            .log()
            .matches(&format!("DHCPACK({dev}) {v4}"))
            .count(),
        2,
        "acknowledged again:\n{}",
        dnsmasq.log()
    );
    // Stopping gives it back.
    rt.shutdown().unwrap();
    wait_log(&dnsmasq, "dnsmasq saw the release", |l| {
        l.contains(&format!("DHCPRELEASE({dev}) {v4}"))
    });
    let end = Instant::now() + Duration::from_secs(5);
    while dnsmasq.leases().contains(&v4.to_string()) {
        assert!(
            Instant::now() < end,
            "the lease is gone: {}",
            dnsmasq.leases()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // An address of another network is refused, and the client starts over.
    let elsewhere = Ipv4Addr::new(10, 99, 0, 7);
    let rt = dhcp_runtime(&ns, &dev, Some(elsewhere), false);
    let st = wait_net(&wait, rt.handle(), Duration::from_secs(20), |s| {
        s.ipv4.is_some()
    });
    let (again, _) = st.ipv4.unwrap();
    assert!(
        (Ipv4Addr::new(10, 77, 0, 50)..=Ipv4Addr::new(10, 77, 0, 99)).contains(&again),
        "{again} is in dnsmasq's range"
    );
    let log = dnsmasq.log();
    assert!(
        log.contains(&format!("DHCPNAK({dev}) {elsewhere}")),
        "{log}"
    );
    assert_eq!(discovers(&dnsmasq), 2, "a DISCOVER after the NAK:\n{log}");
    drop(rt);
}
