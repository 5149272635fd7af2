//! The TAP steering program (`linerate_nic::tap::TapSteering`) against the
//! Linux kernel: a three-queue TAP in a namespace the test creates, the
//! kernel sending into it, and which queue's descriptor each frame comes out
//! of.
//!
//! * datagrams and a SYN to ports claimed for queues 1 and 2 come out of
//!   those queues, every time (no flow hash); an unclaimed port, ARP and
//!   ICMP come out of queue 0;
//! * a port another queue holds cannot be claimed; claims count (released
//!   with the last one); a released or reaped port goes back to queue 0;
//! * IPv6 datagrams are steered by port as IPv4 ones;
//! * the kernel's ARP frames are recorded: its Ethernet address is found
//!   for its IPv4 address (`NeighborSource`).
//!
//! Needs root: `cargo test --features system-tests --test system_tap_steer`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::claims::{ClaimError, Claims, L4};
use linerate_nic::neigh::NeighborSource;
use linerate_nic::tap::{Tap, TapConfig, TapSteering};
use linerate_nic::{Batch, Nic};
use linerate_testkit::netns::{self, Netns};
use linerate_wire::etherparse::{NetSlice, SlicedPacket, TransportSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 218, 0, 1);
const OURS: Ipv4Addr = Ipv4Addr::new(10, 218, 0, 2);
const OUR_MAC: &str = "02:00:00:00:21:82";

/// What came out of a queue, in short.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Udp(u16),
    Syn(u16),
    Arp,
    Icmp,
    Other,
}

fn classify(bytes: &[u8]) -> Seen {
    let Ok(p) = SlicedPacket::from_ethernet(bytes) else {
        return Seen::Other;
    };
    if bytes.get(12..14) == Some(&[0x08, 0x06]) {
        return Seen::Arp;
    }
    match (&p.net, &p.transport) {
        (_, Some(TransportSlice::Udp(u))) => Seen::Udp(u.destination_port()),
        (_, Some(TransportSlice::Tcp(t))) if t.syn() => Seen::Syn(t.destination_port()),
        (_, Some(TransportSlice::Icmpv4(_))) => Seen::Icmp,
        (Some(NetSlice::Arp(_)), _) => Seen::Arp,
        _ => Seen::Other,
    }
}

struct Site {
    ns: Netns,
    queues: Vec<Tap>,
    steer: TapSteering,
}

fn site() -> Site {
    assert!(netns::is_root(), "system tests need root");
    let ns = Netns::new("lrst").unwrap();
    let name = netns::unique("lrst");
    let mut cfg = TapConfig::new(name.clone());
    cfg.queues = 3;
    let tap = ns.run(move || Tap::open(&cfg)).unwrap().unwrap();
    let steer = TapSteering::attach(&tap).unwrap();
    assert_eq!(steer.queue(), 0);
    netns::must(
        ns.ip(&["addr", "add", &format!("{KERNEL}/24"), "dev", &name]),
        "address",
    );
    let _ = ns.exec(
        "sh",
        &[
            "-c",
            &format!("echo 1 > /proc/sys/net/ipv6/conf/{name}/disable_ipv6"),
        ],
    );
    netns::must(ns.ip(&["link", "set", &name, "up"]), "up");
    netns::must(
        ns.ip(&[
            "neigh",
            "replace",
            &OURS.to_string(),
            "lladdr",
            OUR_MAC,
            "dev",
            &name,
        ]),
        "neighbour",
    );
    Site {
        ns,
        queues: tap.split(),
        steer,
    }
}

impl Site {
    /// Everything each queue has now (after the kernel had time to send).
    fn drain(&mut self) -> Vec<Vec<Seen>> {
        std::thread::sleep(Duration::from_millis(200));
        let mut out = Vec::new();
        for q in &mut self.queues {
            let mut seen = Vec::new();
            let mut batch = Batch::new();
            while q.receive(0, &mut batch, 64).unwrap() > 0 {
                seen.extend(batch.iter().map(|f| classify(f.bytes())));
                batch.clear();
            }
            out.push(seen);
        }
        out
    }

    /// The kernel sends one datagram to each of `ports`, `times` times each
    /// from a new socket (a new flow hash every time).
    fn send_udp(&self, ports: &[u16], times: usize) {
        let ports = ports.to_vec();
        self.ns
            .run(move || {
                for _ in 0..times {
                    let s = UdpSocket::bind((KERNEL, 0)).unwrap();
                    for &p in &ports {
                        s.send_to(b"steer", (OURS, p)).unwrap();
                    }
                }
            })
            .unwrap();
    }
}

fn only(seen: &[Seen], what: &Seen) -> bool {
    !seen.is_empty() && seen.iter().all(|s| s == what)
}

#[test]
fn claimed_ports_come_out_of_their_queue_and_the_rest_out_of_queue_0() {
    let mut site = site();
    let q1 = site.steer.for_queue(1);
    let q2 = site.steer.for_queue(2);
    q1.claim_port(L4::Udp, 7001).unwrap();
    q2.claim_port(L4::Udp, 7002).unwrap();
    let remote = SocketAddr::new(IpAddr::V4(KERNEL), 40_000);
    q2.claim_flow(L4::Tcp, SocketAddr::new(IpAddr::V4(OURS), 7003), remote)
        .unwrap();
    assert_eq!(site.steer.lookup(L4::Udp, 7001), Some(1));
    assert_eq!(site.steer.lookup(L4::Tcp, 7003), Some(2));
    assert_eq!(site.steer.lookup(L4::Tcp, 7001), None);

    // Many flows to each port: a hash would spread them over the queues.
    site.send_udp(&[7001, 7002, 7009], 16);
    let seen = site.drain();
    assert!(only(&seen[1], &Seen::Udp(7001)), "queue 1: {:?}", seen[1]);
    assert!(only(&seen[2], &Seen::Udp(7002)), "queue 2: {:?}", seen[2]);
    assert_eq!(seen[1].len(), 16);
    assert_eq!(seen[2].len(), 16);
    assert_eq!(
        seen[0].iter().filter(|s| **s == Seen::Udp(7009)).count(),
        16,
        "queue 0: {:?}",
        seen[0]
    );

    // A SYN to the claimed TCP port; ICMP and ARP to queue 0.
    let syn = site
        .ns
        .spawn(|| {
            TcpStream::connect_timeout(&SocketAddr::from((OURS, 7003)), Duration::from_millis(300))
        })
        .unwrap();
    let _ = site
        .ns
        .exec("ping", &["-c", "1", "-W", "1", &OURS.to_string()]);
    let _ = site.ns.exec("ping", &["-c", "1", "-W", "1", "10.218.0.77"]);
    let _ = syn.join();
    let seen = site.drain();
    assert!(seen[2].contains(&Seen::Syn(7003)), "queue 2: {:?}", seen[2]);
    assert!(only(&seen[2], &Seen::Syn(7003)), "queue 2: {:?}", seen[2]);
    assert!(seen[1].is_empty(), "queue 1: {:?}", seen[1]);
    assert!(seen[0].contains(&Seen::Icmp), "queue 0: {:?}", seen[0]);
    assert!(seen[0].contains(&Seen::Arp), "queue 0: {:?}", seen[0]);

    // The kernel's ARP request for .77 named its own address and MAC.
    let mac = site
        .ns
        .exec(
            "cat",
            &[&format!("/sys/class/net/{}/address", site.queues[0].name())],
        )
        .unwrap();
    let mac = String::from_utf8(mac.stdout).unwrap();
    let want: Vec<u8> = mac
        .trim()
        .split(':')
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    let got = q1
        .neighbor(IpAddr::V4(KERNEL))
        .expect("the kernel's ARP recorded");
    assert_eq!(&got[..], &want[..]);
    assert_eq!(q1.neighbor(IpAddr::V4(Ipv4Addr::new(10, 218, 0, 99))), None);
}

#[test]
fn ipv6_frames_are_steered_by_port_too() {
    let mut site = site();
    let name = site.queues[0].name().to_owned();
    let _ = site.ns.exec(
        "sh",
        &[
            "-c",
            &format!("echo 0 > /proc/sys/net/ipv6/conf/{name}/disable_ipv6"),
        ],
    );
    netns::must(
        site.ns
            .ip(&["addr", "add", "fd00:218::1/64", "dev", &name, "nodad"]),
        "IPv6 address",
    );
    netns::must(
        site.ns.ip(&[
            "neigh",
            "replace",
            "fd00:218::2",
            "lladdr",
            OUR_MAC,
            "dev",
            &name,
        ]),
        "IPv6 neighbour",
    );
    let q2 = site.steer.for_queue(2);
    q2.claim_port(L4::Udp, 7201).unwrap();
    site.drain();
    site.ns
        .run(|| {
            for _ in 0..8 {
                let s = UdpSocket::bind("[fd00:218::1]:0").unwrap();
                s.send_to(b"steer", "[fd00:218::2]:7201").unwrap();
                s.send_to(b"steer", "[fd00:218::2]:7202").unwrap();
            }
        })
        .unwrap();
    let seen = site.drain();
    assert_eq!(
        seen[2].iter().filter(|s| **s == Seen::Udp(7201)).count(),
        8,
        "queue 2: {:?}",
        seen[2]
    );
    assert!(
        !seen[2].contains(&Seen::Udp(7202)),
        "queue 2: {:?}",
        seen[2]
    );
    assert!(
        !seen[1].contains(&Seen::Udp(7201)),
        "queue 1: {:?}",
        seen[1]
    );
    assert_eq!(
        seen[0].iter().filter(|s| **s == Seen::Udp(7202)).count(),
        8,
        "queue 0: {:?}",
        seen[0]
    );
}

#[test]
fn claims_are_exclusive_counted_released_and_reaped() {
    let mut site = site();
    let q1 = site.steer.for_queue(1);
    let q2 = site.steer.for_queue(2);
    q1.claim_port(L4::Udp, 7101).unwrap();
    assert!(matches!(
        q2.claim_port(L4::Udp, 7101),
        Err(ClaimError::InUse { .. })
    ));
    // Counted: a second claim of the same port (an accepted connection on a
    // listener's port) keeps it after one release.
    let local = SocketAddr::new(IpAddr::V4(OURS), 7101);
    let remote = SocketAddr::new(IpAddr::V4(KERNEL), 50_000);
    q1.claim_flow(L4::Udp, local, remote).unwrap();
    q1.release_port(L4::Udp, 7101);
    site.send_udp(&[7101], 4);
    let seen = site.drain();
    assert!(only(&seen[1], &Seen::Udp(7101)), "queue 1: {:?}", seen[1]);
    q1.release_flow(L4::Udp, local, remote);
    assert_eq!(site.steer.lookup(L4::Udp, 7101), None);
    site.send_udp(&[7101], 4);
    let seen = site.drain();
    assert!(seen[1].is_empty(), "queue 1: {:?}", seen[1]);
    assert_eq!(seen[0].iter().filter(|s| **s == Seen::Udp(7101)).count(), 4);

    // A queue whose process is gone: its claims are reaped, others stay.
    q2.claim_port(L4::Udp, 7102).unwrap();
    q2.claim_port(L4::Tcp, 7103).unwrap();
    q1.claim_port(L4::Udp, 7104).unwrap();
    assert_eq!(site.steer.reap(2), 2);
    assert_eq!(site.steer.lookup(L4::Udp, 7102), None);
    assert_eq!(site.steer.lookup(L4::Udp, 7104), Some(1));
    site.send_udp(&[7102, 7104], 2);
    let seen = site.drain();
    assert!(seen[2].is_empty(), "queue 2: {:?}", seen[2]);
    assert!(only(&seen[1], &Seen::Udp(7104)), "queue 1: {:?}", seen[1]);
    // Released by its holder, the port is free for another queue.
    q1.release_all();
    q2.claim_port(L4::Udp, 7104).unwrap();
}
