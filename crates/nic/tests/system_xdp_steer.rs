//! linerate's steering XDP program against the Linux kernel, over a veth pair
//! between two namespaces: the AF_XDP side's end has the kernel's own address
//! (`SHARED`), which linerate shares; the peer is another kernel.
//!
//! * one address, two stacks: datagrams to a claimed port reach the AF_XDP
//!   socket, those to a kernel socket's port reach the kernel, the kernel
//!   answers ping throughout; a claimed 4-tuple is steered, the same port from
//!   another remote port is not; once released, its datagrams go to the kernel
//!   (its IP counters say so); an ICMP error quoting a claimed 4-tuple and
//!   ARP for an address of linerate's own reach the socket; a claimed port is
//!   held in the kernel (a kernel bind fails) and a port the kernel uses
//!   cannot be claimed;
//! * IPv6 too: a claimed port over IPv6, both fragmented ways of IP (later
//!   fragments follow the first), a neighbour solicitation for an address of
//!   linerate's own; and two queues' sockets sharing the one program and map
//!   (native XDP, which keeps the peer's queue);
//! * a full table refuses a claim with its typed error, and counts it;
//! * lifecycle: the program is gone from the interface once the last socket
//!   closes, and once a process holding it is killed; a second process on
//!   the interface's other queue joins the first one's program (one program
//!   on the interface, datagrams to a port the first claimed reaching both
//!   processes' sockets by the queue they arrive on), keeps it after the
//!   first lets go, and takes it along when killed.
//!
//! Needs root: `cargo test -p linerate-nic --features af-xdp,system-tests
//! --test system_xdp_steer -- --test-threads=1`.
#![cfg(all(feature = "system-tests", feature = "af-xdp"))]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::claims::{ClaimError, Claims, L4, Table};
use linerate_nic::xdp::{SteerConfig, Xdp, XdpAttach, XdpConfig};
use linerate_nic::{Batch, Nic};
use linerate_wire::build::{FrameBuilder, Ip, L4 as Build4};
use linerate_wire::etherparse::{Icmpv4Type, NetSlice, SlicedPacket, TransportSlice};
#[path = "../../testkit/src/netns.rs"]
#[allow(dead_code, missing_docs)]
mod netns;

use netns::Netns;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

/// The address linerate shares with the kernel of namespace A.
const SHARED: [u8; 4] = [10, 216, 0, 2];
/// The peer kernel, in namespace B.
const PEER: [u8; 4] = [10, 216, 0, 1];
/// An address of linerate's own (the kernel of A does not have it).
const OWN: [u8; 4] = [10, 216, 0, 5];
/// The IPv6 addresses of A (shared), B, and linerate's own.
const SHARED6: &str = "fd00:216::2";
const PEER6: &str = "fd00:216::1";
const OWN6: &str = "fd00:216::5";

struct Setup {
    /// Dropped first: sockets and program.
    nic: Option<Xdp>,
    _pair: Veth,
    a: Netns,
    b: Netns,
    ours: String,
    our_mac: [u8; 6],
    peer_mac: [u8; 6],
    queues: usize,
}

fn mac(ns: &Netns, dev: &str) -> [u8; 6] {
    let out = ns
        .exec("cat", &[&format!("/sys/class/net/{dev}/address")])
        .unwrap();
    let v: Vec<u8> = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// The root-namespace name of a veth end, deleted on drop if it is still
/// there (it moves into a namespace, and goes with it, once set up).
struct Veth(String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = netns::ip(&["link", "del", &self.0]);
    }
}

fn setup(steer: SteerConfig) -> Setup {
    setup_queues(steer, 1, XdpAttach::Generic)
}

/// A veth pair of `queues` queues a side: end A in namespace A with `SHARED`
/// and `SHARED6`, end B in namespace B with `PEER` and `PEER6`; AF_XDP with
/// `steer` on every queue of end A, attached as `attach` says.
fn setup_queues(steer: SteerConfig, queues: u16, attach: XdpAttach) -> Setup {
    setup_sockets(steer, queues, queues, attach)
}

/// [`setup_queues`] with sockets on the first `sockets` of the `queues` queues.
fn setup_sockets(steer: SteerConfig, queues: u16, sockets: u16, attach: XdpAttach) -> Setup {
    assert!(netns::is_root(), "system tests need root");
    let a = Netns::new("lrsa").unwrap();
    let b = Netns::new("lrsb").unwrap();
    let (ours, peer) = (netns::unique("lsa"), netns::unique("lsb"));
    let q = queues.to_string();
    let each = ["numtxqueues", q.as_str(), "numrxqueues", q.as_str()];
    let mut add = vec!["link", "add", ours.as_str()];
    add.extend(each);
    add.extend(["type", "veth", "peer", "name", peer.as_str()]);
    add.extend(each);
    netns::ip(&add).unwrap();
    let guard = Veth(ours.clone());
    netns::ip(&["link", "set", &ours, "netns", a.name()]).unwrap();
    netns::ip(&["link", "set", &peer, "netns", b.name()]).unwrap();
    for (ns, dev, v4, v6) in [
        (&a, &ours, "10.216.0.2/24", "fd00:216::2/64"),
        (&b, &peer, "10.216.0.1/24", "fd00:216::1/64"),
    ] {
        ns.ip(&["addr", "add", v4, "dev", dev]).unwrap();
        ns.ip(&["-6", "addr", "add", v6, "dev", dev, "nodad"])
            .unwrap();
        ns.ip(&["link", "set", dev, "up"]).unwrap();
    }
    // The peer's checksums complete (veth leaves them partial otherwise,
    // and a copy-mode socket sees them so).
    b.exec("ethtool", &["-K", &peer, "tx", "off"]).unwrap();
    let cfg = XdpConfig {
        mount_bpffs: true,
        attach,
        queues: sockets,
        steer: Some(steer),
        ..XdpConfig::new(ours.clone())
    };
    let nic = a.run(move || Xdp::open(&cfg)).unwrap().unwrap();
    Setup {
        our_mac: mac(&a, &ours),
        peer_mac: mac(&b, &peer),
        ours,
        queues: usize::from(sockets),
        nic: Some(nic),
        _pair: guard,
        a,
        b,
    }
}

impl Setup {
    fn nic(&mut self) -> &mut Xdp {
        self.nic.as_mut().unwrap()
    }

    /// Every frame the AF_XDP socket gets within `wait`.
    fn drain(&mut self, wait: Duration) -> Vec<Vec<u8>> {
        self.drain_queues(wait).into_iter().flatten().collect()
    }

    /// Every frame each queue's AF_XDP socket gets within `wait`.
    fn drain_queues(&mut self, wait: Duration) -> Vec<Vec<Vec<u8>>> {
        let deadline = Instant::now() + wait;
        let mut batch = Batch::new();
        let mut out = vec![Vec::new(); self.queues];
        while Instant::now() < deadline {
            let mut got = 0;
            for (q, frames) in out.iter_mut().enumerate() {
                got += self.nic().receive(q, &mut batch, 64).unwrap();
                frames.extend(batch.drain(..).map(|f| f.bytes().to_vec()));
            }
            if got == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        out
    }

    fn send(&mut self, frame: Vec<u8>) {
        let mut batch = Batch::new();
        batch.push(linerate_nic::Frame::plain(
            self.nic().pool().alloc_from(&frame),
        ));
        let deadline = Instant::now() + Duration::from_secs(2);
        while !batch.is_empty() {
            self.nic().transmit(0, &mut batch).unwrap();
            assert!(Instant::now() < deadline, "transmit stuck");
        }
    }

    /// Sends `n` datagrams from the peer's `from` port to `SHARED:to`.
    fn peer_sends(&self, from: u16, to: u16, n: usize) {
        self.peer_sends_to(PEER.into(), from, SocketAddr::from((SHARED, to)), n, 32);
    }

    /// Sends `n` datagrams of `len` bytes from the peer's `from` port on
    /// address `ip` to `to`.
    fn peer_sends_to(&self, ip: std::net::IpAddr, from: u16, to: SocketAddr, n: usize, len: usize) {
        self.b
            .run(move || {
                let s = UdpSocket::bind((ip, from)).unwrap();
                for i in 0..n {
                    s.send_to(&vec![i as u8; len], to).unwrap();
                }
            })
            .unwrap();
    }

    /// IPv4 packets the kernel of namespace A received (`Ip: InReceives`;
    /// UDP's own `InDatagrams` counts only datagrams a program reads).
    fn kernel_ip_in(&self) -> u64 {
        let out = self.a.exec("cat", &["/proc/net/snmp"]).unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mut ip = text.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "InReceives")
            .map(|(_, v)| v.parse::<u64>().unwrap())
            .unwrap()
    }

    /// What the AF_XDP socket gets in 200 ms while the peer runs `ping args`
    /// (stopped then: nobody answers it).
    fn drain_while_peer_pings(&mut self, args: &[&str]) -> Vec<Vec<u8>> {
        let mut ping = self.b.command("ping").args(args).spawn().unwrap();
        let got = self.drain(Duration::from_millis(200));
        let _ = ping.kill();
        let _ = ping.wait();
        got
    }

    fn program_attached(&self) -> bool {
        let out = self.a.ip(&["link", "show", "dev", &self.ours]).unwrap();
        String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
    }
}

/// UDP datagrams among `frames` to `SHARED:port`, from peer port `from` (any
/// if `None`).
fn udp_to(frames: &[Vec<u8>], port: u16, from: Option<u16>) -> usize {
    frames
        .iter()
        .filter(|f| {
            let Ok(p) = SlicedPacket::from_ethernet(f) else {
                return false;
            };
            let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(u))) = (&p.net, &p.transport)
            else {
                return false;
            };
            ip.header().destination() == SHARED
                && u.destination_port() == port
                && from.is_none_or(|f| u.source_port() == f)
        })
        .count()
}

fn addr(ip: [u8; 4], port: u16) -> SocketAddr {
    SocketAddr::from((ip, port))
}

#[test]
fn one_address_two_stacks() {
    let mut s = setup(SteerConfig {
        addresses: vec![OWN.into()],
        hold: vec![SHARED.into()],
        ..SteerConfig::default()
    });
    assert!(s.program_attached());
    let steering = std::sync::Arc::clone(s.nic().steering().unwrap());
    // The kernel's socket on 7002; linerate's port 7001.
    let kernel =
        s.a.run(|| UdpSocket::bind(("10.216.0.2", 7002)).unwrap())
            .unwrap();
    kernel
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    steering.claim_port(L4::Udp, 7001).unwrap();
    // Held in the kernel: a kernel program cannot take it.
    let taken = s.a.run(|| UdpSocket::bind(("10.216.0.2", 7001)).is_err());
    assert!(taken.unwrap(), "the claimed port is free in the kernel");
    // A port the kernel uses cannot be claimed.
    assert!(matches!(
        steering.claim_port(L4::Udp, 7002),
        Err(ClaimError::InUse { l4: L4::Udp, .. })
    ));

    // The kernel answers ping on the shared address while the socket is bound.
    let b_name = s.b.name().to_owned();
    let ping = std::thread::spawn(move || {
        std::process::Command::new("ip")
            .args([
                "netns", "exec", &b_name, "ping", "-c", "3", "-i", "0.2", "-W", "2",
            ])
            .arg("10.216.0.2")
            .output()
            .unwrap()
    });
    s.peer_sends(9000, 7001, 5);
    s.peer_sends(9000, 7002, 5);
    let got = s.drain(Duration::from_millis(300));
    assert_eq!(udp_to(&got, 7001, None), 5, "linerate's port");
    assert_eq!(
        udp_to(&got, 7002, None),
        0,
        "the kernel's port reached linerate"
    );
    let mut buf = [0u8; 64];
    for _ in 0..5 {
        assert_eq!(kernel.recv(&mut buf).unwrap(), 32, "the kernel's socket");
    }
    let out = ping.join().unwrap();
    assert!(
        out.status.success(),
        "ping: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A 4-tuple: steered from the claimed remote port only.
    let (local, remote) = (addr(SHARED, 7003), addr(PEER, 9000));
    steering.claim_flow(L4::Udp, local, remote).unwrap();
    assert!(matches!(
        steering.claim_flow(L4::Udp, local, remote),
        Err(ClaimError::Exists)
    ));
    let before = s.kernel_ip_in();
    s.peer_sends(9000, 7003, 3);
    s.peer_sends(9001, 7003, 2);
    let got = s.drain(Duration::from_millis(300));
    assert_eq!(udp_to(&got, 7003, Some(9000)), 3, "the claimed 4-tuple");
    assert_eq!(udp_to(&got, 7003, Some(9001)), 0, "another remote port");
    assert_eq!(s.kernel_ip_in() - before, 2, "the kernel got the others");

    // Released (the connection closed): its datagrams go to the kernel.
    steering.release_flow(L4::Udp, local, remote);
    let before = s.kernel_ip_in();
    s.peer_sends(9000, 7003, 3);
    let got = s.drain(Duration::from_millis(300));
    assert_eq!(
        udp_to(&got, 7003, None),
        0,
        "a released 4-tuple reached linerate"
    );
    assert_eq!(s.kernel_ip_in() - before, 3, "the kernel did not get them");

    // An ICMP error quoting linerate's datagram (the peer has nothing on 9999).
    let (local, remote) = (addr(SHARED, 7004), addr(PEER, 9999));
    steering.claim_flow(L4::Udp, local, remote).unwrap();
    let frame = FrameBuilder::new(Ip::v4(SHARED, PEER), Build4::udp(7004, 9999))
        .macs(s.our_mac, s.peer_mac)
        .build(b"is anyone there");
    s.send(frame);
    let got = s.drain(Duration::from_millis(500));
    let unreachable = got
        .iter()
        .filter(|f| {
            let p = SlicedPacket::from_ethernet(f).unwrap();
            matches!(&p.transport, Some(TransportSlice::Icmpv4(i))
                if matches!(i.icmp_type(), Icmpv4Type::DestinationUnreachable(_)))
        })
        .count();
    assert_eq!(
        unreachable, 1,
        "the port unreachable quoting linerate's datagram"
    );

    // ARP for an address of linerate's own comes to linerate (nobody
    // answers, so ping fails).
    let got = s.drain_while_peer_pings(&["-c", "1", "10.216.0.5"]);
    let arp = got
        .iter()
        .filter(|f| f.get(12..14) == Some(&[0x08, 0x06]) && f.get(38..42) == Some(&OWN))
        .count();
    assert!(arp >= 1, "no ARP request for linerate's own address");

    let c = steering.counts().unwrap();
    assert_eq!(c.port, 5, "{c:?}");
    assert_eq!(c.flow, 3, "{c:?}");
    assert_eq!(c.icmp, 1, "{c:?}");
    assert!(c.arp >= 1, "{c:?}");
    // Ping, its ARP, the kernel's datagrams (and IPv6 chatter) were passed.
    assert!(c.passed >= 5 + 2 + 3 + 3, "{c:?}");
    assert_eq!(c.no_socket + c.malformed, 0, "{c:?}");
    steering.release_port(L4::Udp, 7001);
    let free = s.a.run(|| UdpSocket::bind(("10.216.0.2", 7001)).is_ok());
    assert!(free.unwrap(), "the released port is still held");
}

#[test]
fn a_full_table_refuses_the_claim() {
    let mut s = setup(SteerConfig {
        flows: 2,
        ports: 1,
        ..SteerConfig::default()
    });
    let steering = std::sync::Arc::clone(s.nic().steering().unwrap());
    let flow = |p| (addr(SHARED, p), addr(PEER, 80));
    for p in [1000, 1001] {
        let (l, r) = flow(p);
        steering.claim_flow(L4::Tcp, l, r).unwrap();
    }
    let (l, r) = flow(1002);
    assert!(matches!(
        steering.claim_flow(L4::Tcp, l, r),
        Err(ClaimError::Full {
            table: Table::Flows,
            capacity: 2
        })
    ));
    steering.claim_port(L4::Tcp, 80).unwrap();
    // A second claim of a port counts, it takes no entry.
    steering.claim_port(L4::Tcp, 80).unwrap();
    assert!(matches!(
        steering.claim_port(L4::Tcp, 81),
        Err(ClaimError::Full {
            table: Table::Ports,
            ..
        })
    ));
    assert_eq!(steering.refused(), 2);
    let (l0, r0) = flow(1000);
    steering.release_flow(L4::Tcp, l0, r0);
    steering.claim_flow(L4::Tcp, l, r).unwrap();
    let v6: SocketAddr = "[fd00::1]:80".parse().unwrap();
    assert!(matches!(
        steering.claim_flow(L4::Tcp, l, v6),
        Err(ClaimError::Family)
    ));
}

#[test]
fn the_program_goes_with_the_last_socket() {
    let mut s = setup(SteerConfig::default());
    assert!(s.program_attached());
    let steering = std::sync::Arc::clone(s.nic().steering().unwrap());
    drop(s.nic.take());
    // The handle still holds it.
    assert!(s.program_attached());
    drop(steering);
    assert!(!s.program_attached(), "the program outlived its sockets");
}

/// Run by `the_program_goes_with_a_killed_process` in a child process: holds
/// the program on the interface named by `LR_STEER_CHILD` until killed.
#[test]
#[ignore = "a helper: the_program_goes_with_a_killed_process runs it in a child process"]
fn steer_child() {
    let dev = std::env::var("LR_STEER_CHILD").expect("LR_STEER_CHILD names the interface");
    let _nic = Xdp::open(&XdpConfig {
        steer: Some(SteerConfig::default()),
        ..XdpConfig::new(dev)
    })
    .unwrap();
    println!("steering ready");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn the_program_goes_with_a_killed_process() {
    let mut s = setup(SteerConfig::default());
    drop(s.nic.take());
    assert!(!s.program_attached());
    let exe = std::env::current_exe().unwrap();
    let mut child =
        s.a.command(exe.to_str().unwrap())
            .args(["--exact", "steer_child", "--ignored", "--nocapture"])
            .env("LR_STEER_CHILD", &s.ours)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.program_attached() {
        assert!(Instant::now() < deadline, "the child never attached");
        assert!(child.try_wait().unwrap().is_none(), "the child exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    // `ip netns exec` runs the test binary in place (exec): its pid is ours.
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.program_attached() {
        assert!(
            Instant::now() < deadline,
            "the program outlived its process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run by `two_processes_share_one_program` in a child process: a socket on
/// queue 1 of the interface named by `LR_STEER_QUEUE1`; says whether it
/// joined, counts the datagrams to port 7001 it gets for two seconds, says
/// how many, and waits to be killed.
#[test]
#[ignore = "a helper: two_processes_share_one_program runs it in a child process"]
fn steer_queue1() {
    let dev = std::env::var("LR_STEER_QUEUE1").expect("LR_STEER_QUEUE1 names the interface");
    let mut nic = Xdp::open(&XdpConfig {
        attach: XdpAttach::Native,
        first_queue: 1,
        queues: 1,
        steer: Some(SteerConfig::default()),
        ..XdpConfig::new(dev)
    })
    .unwrap();
    println!("joined={}", nic.steering().unwrap().joined());
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut batch = Batch::new();
    let mut frames = Vec::new();
    while Instant::now() < deadline {
        if nic.receive(0, &mut batch, 64).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        frames.extend(batch.drain(..).map(|f| f.bytes().to_vec()));
    }
    println!("got={}", udp_to(&frames, 7001, None));
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn two_processes_share_one_program() {
    use std::io::BufRead;
    // Native: veth hands a frame to the receive queue of the index the peer
    // sent it on, so the peer's flows spread over both queues.
    let mut s = setup_sockets(SteerConfig::default(), 2, 1, XdpAttach::Native);
    let steering = std::sync::Arc::clone(s.nic().steering().unwrap());
    assert!(!steering.joined());
    steering.claim_port(L4::Udp, 7001).unwrap();

    // A process asking for another program variant is refused, saying why.
    let dev = s.ours.clone();
    let refused =
        s.a.run(move || {
            Xdp::open(&XdpConfig {
                first_queue: 1,
                multi_buffer: true,
                steer: Some(SteerConfig::default()),
                ..XdpConfig::new(dev)
            })
            .map(|_| ())
        })
        .unwrap();
    let why = refused.unwrap_err().to_string();
    assert!(why.contains("xdp.frags"), "{why}");

    let exe = std::env::current_exe().unwrap();
    let mut child =
        s.a.command(exe.to_str().unwrap())
            .args(["--exact", "steer_queue1", "--ignored", "--nocapture"])
            .env("LR_STEER_QUEUE1", &s.ours)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut line = |prefix: &str| loop {
        let l = lines.next().expect("the child's output").unwrap();
        if let Some(v) = l.strip_prefix(prefix) {
            return v.to_string();
        }
    };
    assert_eq!(line("joined="), "true", "the child joined our program");
    let out = s.a.ip(&["link", "show", "dev", &s.ours]).unwrap();
    let shown = String::from_utf8_lossy(&out.stdout)
        .matches("prog/xdp")
        .count();
    assert_eq!(shown, 1, "one program on the interface");

    // Datagrams of many flows to the port we claimed: each reaches the
    // socket of the queue it arrives on, in whichever process.
    for from in 10_000..10_032 {
        s.peer_sends(from, 7001, 1);
    }
    let ours = udp_to(&s.drain(Duration::from_millis(1000)), 7001, None);
    let theirs: usize = line("got=").parse().unwrap();
    assert_eq!(ours + theirs, 32, "ours {ours}, the child's {theirs}");
    assert!(ours > 0 && theirs > 0, "ours {ours}, the child's {theirs}");

    // We let go; the child keeps the program. Killed, it takes it along.
    drop(steering);
    drop(s.nic.take());
    assert!(s.program_attached(), "the child still holds the program");
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.program_attached() {
        assert!(
            Instant::now() < deadline,
            "the program outlived its last process"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whole UDP datagrams to local port `port` among `frames`, and fragments
/// (first ones included), IPv4 and IPv6.
fn udp_and_fragments(frames: &[Vec<u8>], port: u16) -> (usize, usize) {
    let (mut udp, mut frags) = (0, 0);
    for f in frames {
        let Ok(p) = SlicedPacket::from_ethernet(f) else {
            continue;
        };
        match (&p.net, &p.transport) {
            (_, Some(TransportSlice::Udp(u))) if u.destination_port() == port => udp += 1,
            (Some(NetSlice::Ipv4(ip)), _) if ip.header().is_fragmenting_payload() => frags += 1,
            (Some(NetSlice::Ipv6(ip)), _) if ip.is_payload_fragmented() => frags += 1,
            _ => {}
        }
    }
    (udp, frags)
}

#[test]
fn ipv6_fragments_and_queues_share_the_program() {
    let shared6: std::net::IpAddr = SHARED6.parse().unwrap();
    let own6: std::net::IpAddr = OWN6.parse().unwrap();
    let mut s = setup_queues(
        SteerConfig {
            addresses: vec![own6],
            hold: vec![SHARED.into(), shared6],
            ..SteerConfig::default()
        },
        2,
        // Native: veth hands a frame to the receive queue of the index the
        // peer sent it on (generic XDP sees every frame on queue 0).
        XdpAttach::Native,
    );
    assert_eq!(s.nic().attach_mode(), XdpAttach::Native);
    let steering = std::sync::Arc::clone(s.nic().steering().unwrap());
    steering.claim_port(L4::Udp, 7001).unwrap();
    let peer6: std::net::IpAddr = PEER6.parse().unwrap();

    // IPv6 to the claimed port; the neighbour solicitation for the shared
    // address goes to the kernel, which answers it.
    s.peer_sends_to(peer6, 9000, SocketAddr::new(shared6, 7001), 4, 32);
    let got = s.drain(Duration::from_millis(300));
    assert_eq!(udp_and_fragments(&got, 7001), (4, 0), "IPv6 datagrams");

    // One datagram of 4000 bytes each way of IP: the first fragment by its
    // port, the others because the first was linerate's.
    s.peer_sends_to(PEER.into(), 9001, SocketAddr::from((SHARED, 7001)), 1, 4000);
    s.peer_sends_to(peer6, 9001, SocketAddr::new(shared6, 7001), 1, 4000);
    let got = s.drain(Duration::from_millis(300));
    // 4008 bytes of UDP: three fragments at MTU 1500, either way.
    assert_eq!(udp_and_fragments(&got, 7001), (0, 6), "fragments");

    // A neighbour solicitation for linerate's own IPv6 address is linerate's.
    let got = s.drain_while_peer_pings(&["-6", "-c", "1", OWN6]);
    let solicitations = got
        .iter()
        .filter(|f| {
            let p = SlicedPacket::from_ethernet(f).unwrap();
            matches!(&p.transport, Some(TransportSlice::Icmpv6(i)) if i.type_u8() == 135)
        })
        .count();
    assert!(
        solicitations >= 1,
        "no solicitation for linerate's own address"
    );

    // Many flows over both queues, one program and one map for both sockets.
    for from in 10_000..10_032 {
        s.peer_sends(from, 7001, 1);
    }
    let per_queue = s.drain_queues(Duration::from_millis(300));
    let counts: Vec<usize> = per_queue.iter().map(|q| udp_to(q, 7001, None)).collect();
    assert_eq!(counts.iter().sum::<usize>(), 32, "per queue: {counts:?}");
    assert!(
        counts.iter().all(|c| *c > 0),
        "a queue got nothing: {counts:?}"
    );

    let c = steering.counts().unwrap();
    assert_eq!(c.frag, 4, "{c:?}");
    assert_eq!(c.port, 4 + 2 + 32, "{c:?}");
    assert!(c.nd >= 1, "{c:?}");
    assert_eq!(c.no_socket + c.malformed, 0, "{c:?}");
}
