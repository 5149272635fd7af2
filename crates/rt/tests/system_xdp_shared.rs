//! One interface and one address, two stacks: linerate (the runtime on AF_XDP
//! with its steering program) and the kernel's stack, side by side.
//!
//! Namespace A holds one end of a veth pair with address `SHARED`, which the
//! kernel of A and linerate (same MAC, same address) both use; namespace B
//! holds the peer. From B at the same time: a kernel TCP server in A and a
//! linerate server in A, on two ports of `SHARED`, each receive the same
//! amount of data (SHA-256 checked), while B pings `SHARED` (answered by the
//! kernel of A) throughout. The steering program's counters and the kernel's
//! TCP counters say which stack served what. Then linerate connects out from
//! a port it holds in the kernel (a kernel bind of it fails); once its
//! listener is gone, a SYN to its port is the kernel's (answered with a reset)
//! and no 4-tuple is left in the program's map.
//!
//! `LINERATE_XDP_SHARED_BYTES` sets the bytes per server (default 4 MiB),
//! `LINERATE_XDP_CONNS` the connections each stack makes out at once
//! (default 10,000).
//! Needs root: `cargo test -p linerate-rt --features af-xdp,system-tests --test
//! system_xdp_shared -- --test-threads=1`.
#![cfg(all(feature = "system-tests", feature = "af-xdp"))]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::claims::Claims;
use linerate_nic::xdp::{SteerConfig, Xdp, XdpAttach, XdpConfig};
use linerate_nic::{Shim, ShimConfig};
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_testkit::netns::{Netns, VethPair};
use linerate_toe::Config;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SHARED: Ipv4Addr = Ipv4Addr::new(10, 218, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 218, 0, 1);
const KERNEL_PORT: u16 = 5201;
const LINERATE_PORT: u16 = 5202;
/// A kernel server in B that linerate connects to.
const PEER_PORT: u16 = 5203;

fn bytes() -> usize {
    std::env::var("LINERATE_XDP_SHARED_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4 << 20)
}

/// Deterministic data, different per stream.
fn data(len: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32 ^ u32::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn mac_of(text: &str) -> Option<[u8; 6]> {
    let v: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    v.try_into().ok()
}

/// `(name, value)` of the kernel's TCP counters in `ns`.
fn tcp_counter(ns: &Netns, name: &str) -> u64 {
    let out = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap()
}

/// Namespaces A and B joined by a veth pair, A's end at `SHARED`, B's at
/// `PEER`, B sending MTU-sized frames with complete checksums (a copy-mode
/// socket gets a frame as the peer left it); with A's end's MAC.
fn shared_pair(prefix_a: &str, prefix_b: &str) -> (Netns, Netns, VethPair, [u8; 6]) {
    let a = Netns::new(prefix_a).unwrap();
    let b = Netns::new(prefix_b).unwrap();
    let pair = VethPair::new(&a, &format!("{SHARED}/24"), &b, &format!("{PEER}/24")).unwrap();
    b.exec(
        "ethtool",
        &["-K", &pair.b, "tso", "off", "gso", "off", "tx", "off"],
    )
    .unwrap();
    let out = a
        .exec("cat", &[&format!("/sys/class/net/{}/address", pair.a)])
        .unwrap();
    let mac = mac_of(String::from_utf8(out.stdout).unwrap().trim()).unwrap();
    (a, b, pair, mac)
}

/// The runtime on AF_XDP on `dev` in `a`, sharing `SHARED` and the MAC `mac`
/// with A's kernel: the steering program holds its ports, the kernel answers
/// ARP and announces the address, next hops come from the kernel's table
/// (entries living `neighbor_ttl`). Opened in A: the AF_XDP socket and the
/// queue threads (which hold the ports in A's kernel).
fn shared_runtime(
    a: &Netns,
    dev: String,
    mac: [u8; 6],
    neighbor_ttl: Option<Duration>,
) -> (Runtime, Arc<linerate_nic::xdp::Steering>) {
    a.run(move || {
        let xdp = Xdp::open(&XdpConfig {
            mount_bpffs: true,
            attach: XdpAttach::Generic,
            steer: Some(SteerConfig {
                hold: vec![SHARED.into()],
                ..SteerConfig::default()
            }),
            ..XdpConfig::new(dev.clone())
        })
        .unwrap();
        let steering = Arc::clone(xdp.steering().unwrap());
        let nic = Shim::new(xdp, ShimConfig::all()).unwrap();
        let mut engine = Config::new(mac).with_ipv4(SHARED, 24);
        engine.announcements = 0;
        if let Some(ttl) = neighbor_ttl {
            engine.neighbor_ttl = ttl;
        }
        let mut cfg = RuntimeConfig::new(engine);
        cfg.claims = Some(Arc::clone(&steering) as Arc<dyn Claims>);
        cfg.kernel_neighbors = Some(dev);
        (Runtime::start(nic, cfg).unwrap(), steering)
    })
    .unwrap()
}

#[test]
fn kernel_and_linerate_serve_one_address() {
    assert!(linerate_testkit::netns::is_root(), "system tests need root");
    let len = bytes();
    let (a, b, pair, our_mac) = shared_pair("lrha", "lrhb");
    // The kernel answers ARP for the address and announces it; the peer's
    // MAC comes from the kernel's table (the ARP replies are the kernel's),
    // read again and again: entries live one second.
    let (rt, steering) = shared_runtime(&a, pair.a.clone(), our_mac, Some(Duration::from_secs(1)));
    let h = rt.handle().clone();

    let kernel_listener = a
        .run(|| std::net::TcpListener::bind((SHARED, KERNEL_PORT)).unwrap())
        .unwrap();
    let kernel_server = std::thread::spawn(move || {
        let (mut s, _) = kernel_listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        (got.len(), Sha256::digest(&got).to_vec())
    });
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = tokio
        .block_on(TcpListener::bind(&h, LINERATE_PORT))
        .unwrap();
    // The listener's port is held in A's kernel.
    let held = a.run(|| std::net::TcpListener::bind((SHARED, LINERATE_PORT)).is_err());
    assert!(
        held.unwrap(),
        "the linerate listener's port is free in the kernel"
    );
    let linerate_server = tokio.spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        s.shutdown().await.unwrap();
        (got.len(), Sha256::digest(&got).to_vec(), listener)
    });

    let segs_before = tcp_counter(&a, "InSegs");
    let counts_before = steering.counts().unwrap();
    let ping = b
        .command("ping")
        .args(["-i", "0.05", "-W", "1", &SHARED.to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let client = |port: u16, seed: u8| {
        b.spawn(move || {
            let payload = data(len, seed);
            let mut s = std::net::TcpStream::connect((SHARED, port)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
            s.write_all(&payload).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            Sha256::digest(&payload).to_vec()
        })
        .unwrap()
    };
    let to_kernel = client(KERNEL_PORT, 1);
    let to_linerate = client(LINERATE_PORT, 2);
    let sent_kernel = to_kernel.join().unwrap().unwrap();
    let sent_linerate = to_linerate.join().unwrap().unwrap();
    let (klen, ksum) = kernel_server.join().unwrap();
    let (llen, lsum, listener) = tokio.block_on(linerate_server).unwrap();
    let elapsed = start.elapsed();
    // Ping ran throughout: stop it (it prints its summary), every echo
    // answered.
    std::process::Command::new("kill")
        .args(["-INT", &ping.id().to_string()])
        .status()
        .unwrap();
    let out = ping.wait_with_output().unwrap();
    let ping_text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!((klen, llen), (len, len));
    assert_eq!(ksum, sent_kernel, "the kernel server's bytes");
    assert_eq!(lsum, sent_linerate, "the linerate server's bytes");
    assert!(ping_text.contains(" 0% packet loss"), "{ping_text}");

    // Which stack served what: every data segment to the kernel's port was
    // passed (and counted by the kernel), linerate's came by port and flow.
    let c = steering.counts().unwrap();
    let passed = c.passed - counts_before.passed;
    let redirected = c.redirected() - counts_before.redirected();
    let segments = (len / 1448) as u64;
    let kernel_segs = tcp_counter(&a, "InSegs") - segs_before;
    println!(
        "{len} bytes each in {elapsed:?}: passed {passed}, redirected {redirected} ({c:?}), \
         kernel InSegs {kernel_segs}, queue 0 {:?}",
        h.stats(0)
    );
    assert!(passed >= segments, "{c:?}");
    assert!(kernel_segs >= segments, "kernel InSegs {kernel_segs}");
    // The SYN and what comes before the runtime accepts (and claims the
    // 4-tuple) match the port, the rest the 4-tuple.
    assert!(c.port >= 1 && c.port + c.flow >= segments, "{c:?}");
    assert_eq!(c.no_socket + c.malformed, 0, "{c:?}");

    // linerate connects out; the source port is held in A's kernel meanwhile.
    let peer_listener = b
        .run(|| std::net::TcpListener::bind((PEER, PEER_PORT)).unwrap())
        .unwrap();
    let peer_server = std::thread::spawn(move || {
        let (mut s, _) = peer_listener.accept().unwrap();
        s.write_all(b"hello from the peer").unwrap();
    });
    let (port, held, got) = tokio.block_on(async {
        let mut s = TcpStream::connect(&h, SocketAddr::from((PEER, PEER_PORT)))
            .await
            .unwrap();
        let port = s.local_addr().port();
        let held = a.run(move || std::net::TcpListener::bind((SHARED, port)).is_err());
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        (port, held.unwrap(), got)
    });
    peer_server.join().unwrap();
    assert_eq!(got, b"hello from the peer");
    assert!(held, "linerate's source port {port} was free in the kernel");

    // The listener goes: a SYN to its port is now the kernel's, which resets it.
    drop(listener);
    let deadline = Instant::now() + Duration::from_secs(5);
    let rsts = tcp_counter(&a, "OutRsts");
    loop {
        let refused = b
            .run(|| std::net::TcpStream::connect((SHARED, LINERATE_PORT)).is_err())
            .unwrap();
        if refused {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "linerate still serves its old port"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        tcp_counter(&a, "OutRsts") > rsts,
        "the kernel did not reset the SYN"
    );
    drop(tokio);
    rt.shutdown().unwrap();
    // Every claim was given up with the runtime: no 4-tuple is steered.
    assert_eq!(steering.flows().unwrap(), 0, "4-tuples left in the map");
}

/// The kernel's neighbour entry for `ip` in `ns`, as `ip neigh` prints it.
fn kernel_entry(ns: &Netns, dev: &str, ip: Ipv4Addr) -> String {
    let out = ns
        .ip(&["neigh", "show", &ip.to_string(), "dev", dev])
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Next hops come from the kernel's table and stay fresh: with no entry for
/// the peer in A's kernel, linerate's connect has the kernel resolve it; then
/// the peer changes its MAC and A's kernel forgets the old one (as it would
/// once its probes of the old MAC failed). linerate's entry (one second's
/// worth) is refreshed from the kernel's table before it lapses, so the next
/// connect reaches the peer's new MAC. With the MAC added by hand, or learned
/// once, it would go to the old MAC (dropped by the peer), and once expired
/// linerate's own ARP requests would get replies only the kernel sees.
#[test]
fn next_hops_come_from_the_kernel_and_stay_fresh() {
    assert!(linerate_testkit::netns::is_root(), "system tests need root");
    let (a, b, pair, our_mac) = shared_pair("lrna", "lrnb");
    assert_eq!(
        kernel_entry(&a, &pair.a, PEER),
        "",
        "A's kernel knows the peer already"
    );
    let (rt, _steering) = shared_runtime(&a, pair.a.clone(), our_mac, Some(Duration::from_secs(1)));
    let h = rt.handle().clone();
    let peer_listener = b
        .run(|| std::net::TcpListener::bind((PEER, PEER_PORT)).unwrap())
        .unwrap();
    let peer_server = std::thread::spawn(move || {
        for _ in 0..2 {
            let (mut s, _) = peer_listener.accept().unwrap();
            s.write_all(b"hello from the peer").unwrap();
        }
    });
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fetch = || {
        tokio.block_on(async {
            let connect = TcpStream::connect(&h, SocketAddr::from((PEER, PEER_PORT)));
            let Ok(s) = tokio::time::timeout(Duration::from_secs(5), connect).await else {
                panic!("connect timed out: {:?}", h.stats(0));
            };
            let mut s = s.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got
        })
    };
    assert_eq!(fetch(), b"hello from the peer");
    let first = h.stats(0).unwrap();
    assert!(
        first.kernel_resolves >= 1 && first.kernel_neighbors >= 1,
        "{first:?}"
    );
    let entry = kernel_entry(&a, &pair.a, PEER);
    assert!(
        entry.contains("lladdr"),
        "A's kernel did not resolve: {entry}"
    );

    // The peer moves to a new MAC; A's kernel forgets the old one.
    let new_mac = "02:6c:72:00:00:99";
    b.ip(&["link", "set", "dev", &pair.b, "address", new_mac])
        .unwrap();
    a.ip(&["neigh", "flush", "dev", &pair.a]).unwrap();
    // Three of linerate's lifetimes: its entry is refreshed, never lapses.
    std::thread::sleep(Duration::from_secs(3));
    let entry = kernel_entry(&a, &pair.a, PEER);
    assert!(entry.contains(new_mac), "A's kernel has {entry}");
    let later = h.stats(0).unwrap();
    assert!(
        later.kernel_neighbors >= first.kernel_neighbors + 2,
        "no refreshes: {later:?}"
    );
    assert_eq!(fetch(), b"hello from the peer");
    peer_server.join().unwrap();
    println!("{:?}", h.stats(0));
    drop(tokio);
    rt.shutdown().unwrap();
}

/// Bytes each way of the jumbo-frame transfer: 256 MiB, or `LINERATE_BULK_MIB`.
fn bulk_bytes() -> usize {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// MTU 9000 through AF_XDP multi-buffer: the veth pair at MTU 9000, the
/// socket with `XDP_USE_SG` (4 KiB UMEM frames, so every full frame spans
/// three descriptors) and the steering program's `xdp.frags` variant. A
/// kernel client in B sends `LINERATE_BULK_MIB` MiB to a linerate server
/// while linerate sends as much to a kernel server in B, at the same time;
/// both SHA-256 exact. The kernel's segments are 9000-byte frames (the
/// peer's segmentation off), so without multi-buffer none would reach
/// linerate; linerate's own go out as chains too.
#[test]
fn jumbo_frames_through_multi_buffer_both_ways() {
    assert!(linerate_testkit::netns::is_root(), "system tests need root");
    let len = bulk_bytes();
    let a = Netns::new("lrja").unwrap();
    let b = Netns::new("lrjb").unwrap();
    let pair = VethPair::new(&a, &format!("{SHARED}/24"), &b, &format!("{PEER}/24")).unwrap();
    a.ip(&["link", "set", "dev", &pair.a, "mtu", "9000"])
        .unwrap();
    b.ip(&["link", "set", "dev", &pair.b, "mtu", "9000"])
        .unwrap();
    b.exec(
        "ethtool",
        &["-K", &pair.b, "tso", "off", "gso", "off", "tx", "off"],
    )
    .unwrap();
    let our_mac = {
        let out = a
            .exec("cat", &[&format!("/sys/class/net/{}/address", pair.a)])
            .unwrap();
        mac_of(String::from_utf8(out.stdout).unwrap().trim()).unwrap()
    };
    let dev = pair.a.clone();
    let (rt, room) = a
        .run(move || {
            let xdp = Xdp::open(&XdpConfig {
                mount_bpffs: true,
                attach: XdpAttach::Generic,
                multi_buffer: true,
                steer: Some(SteerConfig {
                    hold: vec![SHARED.into()],
                    ..SteerConfig::default()
                }),
                ..XdpConfig::new(dev.clone())
            })
            .unwrap();
            let room = xdp.frame_room();
            assert_eq!(linerate_nic::Nic::caps(&xdp).mtu, 9000);
            let steering = Arc::clone(xdp.steering().unwrap());
            let nic = Shim::new(xdp, ShimConfig::all()).unwrap();
            let mut engine = Config::new(our_mac).with_ipv4(SHARED, 24);
            engine.announcements = 0;
            engine.mtu = 9000;
            let mut cfg = RuntimeConfig::new(engine);
            cfg.claims = Some(steering as Arc<dyn Claims>);
            cfg.kernel_neighbors = Some(dev);
            (Runtime::start(nic, cfg).unwrap(), room)
        })
        .unwrap();
    assert!(room < 9014, "a UMEM frame holds a jumbo frame ({room})");
    let h = rt.handle().clone();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = tokio
        .block_on(TcpListener::bind(&h, LINERATE_PORT))
        .unwrap();
    let server = tokio.spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::with_capacity(len);
        s.read_to_end(&mut got).await.unwrap();
        (got.len(), Sha256::digest(&got).to_vec())
    });
    let peer_listener = b
        .run(|| std::net::TcpListener::bind((PEER, PEER_PORT)).unwrap())
        .unwrap();
    let peer_server = std::thread::spawn(move || {
        let (mut s, _) = peer_listener.accept().unwrap();
        let mut got = Vec::with_capacity(len);
        s.read_to_end(&mut got).unwrap();
        (got.len(), Sha256::digest(&got).to_vec())
    });
    let start = Instant::now();
    let to_linerate = b
        .spawn(move || {
            let payload = data(len, 3);
            let mut s = std::net::TcpStream::connect((SHARED, LINERATE_PORT)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
            s.write_all(&payload).unwrap();
            Sha256::digest(&payload).to_vec()
        })
        .unwrap();
    let h2 = h.clone();
    let from_linerate = tokio.spawn(async move {
        let payload = data(len, 4);
        let mut s = TcpStream::connect(&h2, SocketAddr::from((PEER, PEER_PORT)))
            .await
            .unwrap();
        s.write_all(&payload).await.unwrap();
        s.shutdown().await.unwrap();
        Sha256::digest(&payload).to_vec()
    });
    let sent_in = to_linerate.join().unwrap().unwrap();
    let sent_out = tokio.block_on(from_linerate).unwrap();
    let (in_len, in_sum) = tokio.block_on(server).unwrap();
    let (out_len, out_sum) = peer_server.join().unwrap();
    let elapsed = start.elapsed();
    assert_eq!((in_len, out_len), (len, len));
    assert_eq!(in_sum, sent_in, "the bytes linerate received");
    assert_eq!(out_sum, sent_out, "the bytes the kernel received");
    // Jumbo frames both ways: the kernel's interface counters in B saw
    // frames of 9000 bytes from linerate (rx bytes over rx packets well
    // above one UMEM frame).
    let out = b
        .exec(
            "cat",
            &[&format!("/sys/class/net/{}/statistics/rx_bytes", pair.b)],
        )
        .unwrap();
    let rx_bytes: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let out = b
        .exec(
            "cat",
            &[&format!("/sys/class/net/{}/statistics/rx_packets", pair.b)],
        )
        .unwrap();
    let rx_packets: u64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    println!(
        "{len} bytes each way at MTU 9000 in {elapsed:?}; B received {rx_packets} frames, \
         {rx_bytes} bytes; queue 0 {:?}",
        h.stats(0)
    );
    assert!(
        rx_bytes / rx_packets.max(1) > room as u64,
        "linerate's frames average {} bytes",
        rx_bytes / rx_packets.max(1)
    );
    drop(tokio);
    rt.shutdown().unwrap();
}

/// Connections per side for [`both_stacks_connect_out_without_a_4_tuple_clash`]
/// (`LINERATE_XDP_CONNS`, 10,000 by default).
fn conns() -> usize {
    std::env::var("LINERATE_XDP_CONNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// linerate and the kernel of A connect out from the one shared address to
/// the same server in B at the same time, `conns()` connections each: the
/// source ports linerate picks are held in A's kernel, so the kernel never
/// picks one of them, no connection of either stack is reset or refused,
/// the server sees every connection's own greeting, and no 4-tuple is left
/// in the steering map afterwards.
#[test]
fn both_stacks_connect_out_without_a_4_tuple_clash() {
    assert!(linerate_testkit::netns::is_root(), "system tests need root");
    let n = conns();
    let (a, b, pair, our_mac) = shared_pair("lrca", "lrcb");
    let (rt, steering) = shared_runtime(&a, pair.a.clone(), our_mac, None);
    let h = rt.handle().clone();

    // The server in B: reads each connection's greeting, answers with it,
    // closes first. Every greeting is "L<i>" or "K<i>".
    let listener = b
        .run(|| std::net::TcpListener::bind((PEER, PEER_PORT)).unwrap())
        .unwrap();
    let server = std::thread::spawn(move || {
        let mut seen = std::collections::HashSet::new();
        let mut tuples = std::collections::HashSet::new();
        while seen.len() < 2 * n {
            let (mut s, from) = listener.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut buf = [0u8; 16];
            let mut len = 0;
            while len < buf.len() {
                match s.read(&mut buf[len..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => {
                        len += k;
                        if buf[..len].ends_with(b"\n") {
                            break;
                        }
                    }
                }
            }
            let greeting = String::from_utf8_lossy(&buf[..len]).into_owned();
            let _ = s.write_all(greeting.as_bytes());
            assert!(seen.insert(greeting.clone()), "greeting {greeting:?} twice");
            tuples.insert(from);
        }
        tuples.len()
    });
    let start = Instant::now();
    // The kernel's connections, from a thread in A.
    let kernel = a
        .spawn(move || {
            let mut ports = Vec::with_capacity(n);
            for i in 0..n {
                let mut s = std::net::TcpStream::connect((PEER, PEER_PORT))
                    .unwrap_or_else(|e| panic!("kernel connection {i}: {e}"));
                ports.push(s.local_addr().unwrap().port());
                let hello = format!("K{i}\n");
                s.write_all(hello.as_bytes()).unwrap();
                let mut back = Vec::new();
                s.read_to_end(&mut back)
                    .unwrap_or_else(|e| panic!("kernel connection {i}: {e}"));
                assert_eq!(back, hello.as_bytes(), "kernel connection {i}");
            }
            (ports, start.elapsed())
        })
        .unwrap();
    // linerate's, 32 at a time.
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ours: Vec<u16> = tokio.block_on(async {
        let mut ports = Vec::with_capacity(n);
        for chunk in (0..n).collect::<Vec<_>>().chunks(32) {
            let mut tasks = Vec::new();
            for &i in chunk {
                let h = h.clone();
                tasks.push(tokio::spawn(async move {
                    let mut s = TcpStream::connect(&h, SocketAddr::from((PEER, PEER_PORT)))
                        .await
                        .unwrap_or_else(|e| panic!("linerate connection {i}: {e}"));
                    let port = s.local_addr().port();
                    let hello = format!("L{i}\n");
                    s.write_all(hello.as_bytes()).await.unwrap();
                    let mut back = Vec::new();
                    s.read_to_end(&mut back)
                        .await
                        .unwrap_or_else(|e| panic!("linerate connection {i}: {e}"));
                    assert_eq!(back, hello.as_bytes(), "linerate connection {i}");
                    port
                }));
            }
            for t in tasks {
                ports.push(t.await.unwrap());
            }
        }
        ports
    });
    let ours_took = start.elapsed();
    let (theirs, theirs_took) = kernel.join().unwrap().unwrap();
    let tuples = server.join().unwrap();
    let elapsed = start.elapsed();
    // The server took every greeting once (it checks); a source port may
    // come round again, its old 4-tuple in B's TIME-WAIT taking the new SYN.
    let ours_set: std::collections::HashSet<u16> = ours.iter().copied().collect();
    let overlap = theirs.iter().filter(|p| ours_set.contains(p)).count();
    println!(
        "{n} connections each in {elapsed:?} (linerate's done in {ours_took:?}, the kernel's in \
         {theirs_took:?}): {tuples} 4-tuples at the server, linerate used \
         {} source ports, the kernel {}, {overlap} ports used by both (at different times), \
         queue 0 {:?}",
        ours_set.len(),
        theirs
            .iter()
            .copied()
            .collect::<std::collections::HashSet<u16>>()
            .len(),
        h.stats(0)
    );
    drop(tokio);
    rt.shutdown().unwrap();
    assert_eq!(steering.flows().unwrap(), 0, "4-tuples left in the map");
}
