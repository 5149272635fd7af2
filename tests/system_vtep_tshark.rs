//! GENEVE and NVGRE between two linerate VTEPs, kernel TCP at both ends, the
//! underlay read by tshark with checksum validation on (issue 13, "Must
//! show", second point: this kernel has neither a GENEVE nor an NVGRE device
//! to test against, so two linerate VTEPs face each other).
//!
//! ```text
//! ns A: kernel TCP ── TAP ══ Vtep 1 ══ shim ── memory link (recorded) ── shim ══ Vtep 2 ══ TAP ── ns B: kernel TCP
//! ```
//!
//! Each `Vtep` is built from a TOML config (`vtep::config::parse`) and runs
//! its poll loop on a thread of its own. Its local port is a TAP whose kernel
//! side sits in a namespace (A or B, the same overlay subnet); the two
//! underlays are the two ends of a linerate memory link joined in this
//! process (no kernel device carries GENEVE or NVGRE here) with no hardware
//! offload, each under a software shim, so frames on the link are finished
//! wire frames. The link is recorded to a pcap. TSO on: the TAPs' TSO and
//! every shim offload on (the shims segment the VTEPs' encapsulated
//! super-frames and complete every checksum); off: no offload anywhere, frame
//! by frame.
//!
//! Each case: pings both ways (IPv4 and IPv6 inside), both VTEPs' FDBs hold
//! the far host's MAC behind the other VTEP and the near one's on the port,
//! `ENGINE_MIB` (8) MiB of kernel TCP A to B and back, SHA-256 checked; then
//! tshark must read every recorded frame as the expected tunnel (GENEVE with
//! its two option TLVs, or NVGRE with the VSID), every inner checksum good,
//! the outer UDP checksum zero over IPv4 and good over IPv6, none over the
//! MTU, underlay ARP / neighbour discovery the only other frames, and at
//! least the bytes sent as inner TCP payload.
//!
//! Cases: GENEVE and NVGRE, each over an IPv4 and an IPv6 underlay, each
//! with the local TAPs' TSO on (the kernels hand over 64 KiB frames, the
//! VTEPs encapsulate them whole, the underlay shims segment) and off; NVGRE
//! over IPv6 with TSO off also with ARP/ND suppression on in both VTEPs (A's
//! requests for B, once A forgets B, answered by VTEP 1). About 1 s a case
//! here, most of it tshark.
//!
//! And VXLAN between the two with Linux's outer-header options set (`ttl`,
//! `tos`, `df`, `srcport`, `udpcsum`): tshark must read each of them on every
//! encapsulated frame.
//!
//! Needs root and tshark:
//! `cargo test --features linerate/system-tests --test system_vtep_tshark -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod vtep_common;

use linerate::nic::{Counter, MemNic, Nic, NicCaps, PcapRecorder, Shim, ShimConfig};
use linerate::tunnel::bridge::Dest;
use linerate::tunnel::vtep::config::parse;
use linerate_testkit::netns;
use linerate_testkit::tshark;
use linerate_testkit::tunnel_pcap::{self, Expect, GeneveOpt, OuterCsum, TunnelKind};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;
use vtep_common::{LocalPort, Running, TempDir, ping_from, transfer};

const VNI: u32 = 0x00_7e57;
/// MiB each way through every case.
const ENGINE_MIB: usize = 8;
/// The underlay MTU (the memory link's).
const MTU: usize = 1500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Geneve,
    Nvgre,
}

/// The GENEVE options both VTEPs send (classes in the experimental range, so
/// tshark shows their data).
fn options() -> Vec<GeneveOpt> {
    vec![
        GeneveOpt {
            class: 0xfff0,
            kind: 0x01,
            data: vec![1, 2, 3, 4],
        },
        GeneveOpt {
            class: 0xfff1,
            kind: 0x22,
            data: vec![0xa5; 8],
        },
    ]
}

/// VTEP `n`'s underlay address.
fn underlay(n: u8, v6: bool) -> IpAddr {
    if v6 {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(n)).into()
    } else {
        Ipv4Addr::new(192, 0, 2, n).into()
    }
}

/// Host `n`'s overlay addresses (in namespace A for 1, B for 2).
fn overlay(n: u8) -> (Ipv4Addr, Ipv6Addr) {
    (
        Ipv4Addr::new(10, 42, 0, n),
        Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, u16::from(n)),
    )
}

/// The encapsulation's bytes beyond the inner Ethernet frame's, less the
/// outer Ethernet header: what the inner IP MTU gives up.
fn overhead(kind: Kind, v6: bool) -> usize {
    let ip = if v6 { 40 } else { 20 };
    let tunnel = match kind {
        Kind::Geneve => 8 + 8 + options().iter().map(|o| 4 + o.data.len()).sum::<usize>(),
        Kind::Nvgre => 8,
    };
    ip + tunnel + 14
}

/// VTEP `me`'s config, its port named `port`.
fn config(kind: Kind, v6: bool, suppress: bool, me: u8, peer: u8, port: &str) -> String {
    let prefix = if v6 { 64 } else { 24 };
    let mut s = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{}/{prefix}"
        mtu = {MTU}

        [[vni]]
        id = {VNI}
        encap = "{}"
        flood = ["{}"]
        ports = ["{port}"]
        suppress_arp = {suppress}
        "#,
        underlay(me, v6),
        match kind {
            Kind::Geneve => "geneve",
            Kind::Nvgre => "nvgre",
        },
        underlay(peer, v6),
    );
    if kind == Kind::Geneve {
        for o in options() {
            let data: String = o.data.iter().map(|b| format!("{b:02x}")).collect();
            s.push_str(&format!(
                "\n[[vni.geneve_option]]\nclass = {}\ntype = {}\ndata = \"{data}\"\n",
                o.class, o.kind
            ));
        }
    }
    s
}

fn two_vteps(kind: Kind, v6: bool, tso: bool, suppress: bool) {
    assert!(netns::is_root(), "system tests need root");
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let what = format!(
        "{kind:?} over IPv{}, TSO {}{}",
        if v6 { 6 } else { 4 },
        if tso { "on" } else { "off" },
        if suppress { ", ARP/ND suppression" } else { "" }
    );
    let t0 = Instant::now();
    let mtu = u16::try_from(MTU - overhead(kind, v6)).unwrap();
    let (a4, a6) = overlay(1);
    let (b4, b6) = overlay(2);
    let mut a = LocalPort::new("vta", tso, mtu, a4, a6).unwrap();
    let mut b = LocalPort::new("vtb", tso, mtu, b4, b6).unwrap();

    let dir = TempDir::new("vtp");
    let pcap = dir.0.join("underlay.pcap");
    let recorder = Arc::new(PcapRecorder::create(&pcap).unwrap());
    let (mut ua, ub) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    ua.set_recorder(Some(recorder.clone()));
    let start = |n: u8, peer: u8, port: &mut LocalPort, link: MemNic| {
        let cfg = parse(&config(kind, v6, suppress, n, peer, &port.name)).unwrap();
        let shim = || {
            if tso {
                ShimConfig::all()
            } else {
                ShimConfig::none()
            }
        };
        let ul = Shim::new(link, shim()).unwrap();
        let gso = ul.counters().clone();
        let local = Shim::new(port.take_tap(), shim()).unwrap();
        (
            Running::start(&cfg, Box::new(ul), vec![vec![Box::new(local)]]),
            gso,
        )
    };
    let (v1, gso1) = start(1, 2, &mut a, ua);
    let (v2, gso2) = start(2, 1, &mut b, ub);
    let diagnose = || format!("VTEP 1: {}\nVTEP 2: {}", v1.nonzero(), v2.nonzero());

    for to in [IpAddr::from(b4), IpAddr::from(b6)] {
        ping_from(&a.ns, to, &what);
    }
    for to in [IpAddr::from(a4), IpAddr::from(a6)] {
        ping_from(&b.ns, to, &what);
    }
    // Each VTEP learned its own host on its port and the far one behind the
    // other VTEP.
    let (a_mac, b_mac) = (a.mac(), b.mac());
    for (v, near, far, peer) in [(&v1, a_mac, b_mac, 2), (&v2, b_mac, a_mac, 1)] {
        let dump = v.dump();
        let at = |mac| dump.iter().find(|r| r.mac == mac).map(|r| r.dest);
        let listing = dump.iter().map(|r| format!("\n  {r}")).collect::<String>();
        assert_eq!(at(near), Some(Dest::Local(0)), "{what}:{listing}");
        assert_eq!(
            at(far),
            Some(Dest::Remote(underlay(peer, v6))),
            "{what}:{listing}"
        );
    }

    if suppress {
        // VTEP 1 has seen B's addresses (in B's answers): once A forgets B,
        // A's ARP request and neighbour solicitation are answered by VTEP 1
        // itself, on A's port.
        let name = format!("vni{VNI}.{}.arp_nd_suppressed", a.name);
        let before = v1.counter(&name);
        a.ns.ip(&["neigh", "flush", "dev", &a.name]).unwrap();
        for to in [IpAddr::from(b4), IpAddr::from(b6)] {
            ping_from(&a.ns, to, &what);
        }
        let answered = v1.counter(&name) - before;
        assert!(answered >= 2, "{what}: {answered} answered\n{}", diagnose());
    }

    let len = ENGINE_MIB << 20;
    let secs = transfer(&a.ns, &b.ns, SocketAddr::new(b4.into(), 5001), len, &what);
    let counters = diagnose();
    let (g1, g2) = (
        gso1.total(Counter::GsoPackets),
        gso2.total(Counter::GsoPackets),
    );
    drop(v1);
    drop(v2);
    let recorder = Arc::into_inner(recorder).expect("the link still records");
    recorder.finish().unwrap();
    if tso {
        // The kernels' super-frames crossed the VTEPs whole: the underlay
        // shims segmented them after encapsulation.
        assert!(g1 > 0 && g2 > 0, "{what}: shim GSO {g1} / {g2}\n{counters}");
    } else {
        assert_eq!(g1 + g2, 0, "{what}: shim GSO {g1} / {g2}\n{counters}");
    }

    let tunnel = match kind {
        Kind::Geneve => TunnelKind::Geneve {
            vni: VNI,
            options: options(),
        },
        Kind::Nvgre => TunnelKind::Nvgre { vsid: VNI },
    };
    let outer = if v6 { OuterCsum::Good } else { OuterCsum::Zero };
    let e = Expect {
        data_ports: vec![5001],
        ..Expect::new(tunnel, outer, MTU)
    };
    let tshark_start = Instant::now();
    let sum = tunnel_pcap::check(&pcap, &e).unwrap();
    eprintln!(
        "{what}: 2 x {ENGINE_MIB} MiB in {secs:.2} s; tshark {:.2} s; {:.2} s in all; shim GSO {g1} / {g2}; {}\n{counters}",
        tshark_start.elapsed().as_secs_f64(),
        t0.elapsed().as_secs_f64(),
        sum.report()
    );
    assert!(sum.violations.is_empty(), "{what}: {}", sum.report());
    assert!(
        sum.inner_tcp_bytes >= 2 * len as u64,
        "{what}: {}",
        sum.report()
    );
    assert!(sum.control >= 2, "{what}: underlay next hop resolved");
    assert!(sum.max_len <= MTU + 14, "{what}");
}

#[test]
fn vteps_geneve_ipv4_underlay_tso_on() {
    two_vteps(Kind::Geneve, false, true, false);
}

#[test]
fn vteps_geneve_ipv6_underlay_tso_off() {
    two_vteps(Kind::Geneve, true, false, false);
}

#[test]
fn vteps_nvgre_ipv4_underlay_tso_on() {
    two_vteps(Kind::Nvgre, false, true, false);
}

#[test]
fn vteps_nvgre_ipv6_underlay_tso_off_suppression() {
    two_vteps(Kind::Nvgre, true, false, true);
}

#[test]
fn vteps_geneve_ipv4_underlay_tso_off() {
    two_vteps(Kind::Geneve, false, false, false);
}

#[test]
fn vteps_geneve_ipv6_underlay_tso_on() {
    two_vteps(Kind::Geneve, true, true, false);
}

#[test]
fn vteps_nvgre_ipv4_underlay_tso_off() {
    two_vteps(Kind::Nvgre, false, false, false);
}

#[test]
fn vteps_nvgre_ipv6_underlay_tso_on() {
    two_vteps(Kind::Nvgre, true, true, false);
}

/// VXLAN with the outer-header options Linux's vxlan device has: every
/// encapsulated frame on the wire, read by tshark, carries them.
#[test]
fn vteps_vxlan_outer_header_options() {
    assert!(netns::is_root(), "system tests need root");
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let (a4, a6) = overlay(1);
    let (b4, b6) = overlay(2);
    let mtu = u16::try_from(MTU - 50).unwrap();
    let mut a = LocalPort::new("vxa", false, mtu, a4, a6).unwrap();
    let mut b = LocalPort::new("vxb", false, mtu, b4, b6).unwrap();
    let dir = TempDir::new("vxo");
    let pcap = dir.0.join("underlay.pcap");
    let recorder = Arc::new(PcapRecorder::create(&pcap).unwrap());
    let (mut ua, ub) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    ua.set_recorder(Some(recorder.clone()));
    let start = |n: u8, peer: u8, port: &mut LocalPort, link: MemNic| {
        let toml = format!(
            r#"
            [underlay]
            tap = "unused"
            address = "{}/24"

            [[vni]]
            id = {VNI}
            encap = "vxlan"
            flood = ["{}"]
            ports = ["{}"]
            ttl = 9
            tos = 184
            df = "unset"
            srcport = [40000, 40009]
            udpcsum = true
            "#,
            underlay(n, false),
            underlay(peer, false),
            port.name
        );
        let cfg = parse(&toml).unwrap();
        let ul = Shim::new(link, ShimConfig::none()).unwrap();
        let local = Shim::new(port.take_tap(), ShimConfig::none()).unwrap();
        Running::start(&cfg, Box::new(ul), vec![vec![Box::new(local)]])
    };
    let v1 = start(1, 2, &mut a, ua);
    let v2 = start(2, 1, &mut b, ub);
    for to in [IpAddr::from(b4), IpAddr::from(b6)] {
        ping_from(&a.ns, to, "vxlan options");
    }
    transfer(
        &a.ns,
        &b.ns,
        SocketAddr::new(b4.into(), 5002),
        1 << 20,
        "vxlan options",
    );
    drop(v1);
    drop(v2);
    let recorder = Arc::into_inner(recorder).expect("the link still records");
    recorder.finish().unwrap();
    let rows = tshark::fields(
        &pcap,
        &[
            "ip.ttl",
            "ip.dsfield.dscp",
            "ip.flags.df",
            "udp.srcport",
            "udp.checksum.status",
        ],
        &["-Y", "vxlan"],
    )
    .unwrap();
    assert!(rows.len() > 100, "{} VXLAN frames", rows.len());
    let first = |v: &String| v.split(',').next().unwrap_or_default().to_owned();
    for r in &rows {
        let outer: Vec<String> = r.iter().map(first).collect();
        assert_eq!(outer[0], "9", "TTL: {r:?}");
        assert_eq!(outer[1], "46", "DSCP from tos 184: {r:?}");
        assert!(outer[2] == "0" || outer[2] == "False", "DF unset: {r:?}");
        let sport: u16 = outer[3].parse().unwrap();
        assert!((40000..=40009).contains(&sport), "source port: {r:?}");
        assert_eq!(outer[4], "1", "outer UDP checksum good: {r:?}");
    }
}
