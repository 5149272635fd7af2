//! The linerate VTEP against Linux's VXLAN device (issue 13, "Must show",
//! first point; docs/testing.md: "The VTEP against the kernel's VXLAN device").
//!
//! ```text
//! ns A: kernel TCP ── TAP ══ linerate Vtep (in this process, a thread) ══ TAP ── ns B: vx0 ── kernel TCP
//!        (local port)                                          (underlay)     (Linux VXLAN)
//! ```
//!
//! The `Vtep` library is built from a TOML config (`vtep::config::parse`, as
//! the binary reads one) over two TAPs under software shims, and runs its poll
//! loop on a thread: one VNI whose local port is a TAP whose kernel side sits
//! in namespace A (addressed like `vx0`'s peer), whose flood list is the
//! kernel's VTEP; the underlay TAP is `linerate_testkit::vxlan`'s, its kernel
//! side in namespace B under `vx0` (`remote` = the VTEP's underlay address).
//!
//! Each case: pings both ways, IPv4 and IPv6 inside, with ARP both ways (A
//! resolves B's `vx0` through the VTEP; then B's neighbour table is flushed
//! and B resolves A); `bridge fdb show dev vx0` in B must list A's MAC at the
//! VTEP's underlay address (the kernel learned it) and the VTEP's FDB
//! (`Vtep::dump`) A's MAC on its port and `vx0`'s behind the kernel's VTEP;
//! then kernel TCP from A to B and back on one connection, SHA-256 checked.
//!
//! * TSO on: the local TAP with `TUNSETOFFLOAD` TSO (the kernel in A hands over
//!   64 KiB TCP frames with partial checksums) and the underlay TAP with every
//!   offload toward us; the VTEP must encapsulate the super-frames whole
//!   (tunnel GSO: the shim or the kernel segments after encapsulation), so
//!   its encapsulations are far fewer than the MSS-sized segments carried.
//! * TSO off: both TAPs with no offload either way and shims with none: every
//!   frame is MSS-sized, encapsulated one by one, every checksum made in
//!   software by the kernels.
//!
//! Cases: IPv4 underlay TSO on (Linux's port 8472) and off (4789), IPv6
//! underlay TSO on (4789, TCP over IPv6 inside) and off (8472); and three of
//! them again with both TAPs batched through io_uring (`[tap] io_uring`,
//! the `_io_uring` cases). Each moves
//! `LINERATE_BULK_MIB` (default 256) MiB each way; the four took 15 s in all
//! on a busy two-core machine (about 1 and 4 s per transfer with TSO on and
//! off).
//!
//! Several networks on one VTEP, and several VTEPs in one network with Linux:
//! `system_vtep_mesh.rs`.
//!
//! Needs root: `cargo test --features linerate/system-tests --test system_vtep_kernel -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod vtep_common;

use linerate::nic::tap::TapOffloads;
use linerate::nic::{Counter, Nic, Offloads, Shim, ShimConfig};
use linerate::tunnel::bridge::Dest;
use linerate::tunnel::vtep::config::parse;
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::vxlan::{IANA_PORT, KernelVtep, LINUX_PORT, VxlanSpec};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;
use vtep_common::{LocalPort, Running, bulk_len, fmt_mac, ping_from, transfer};

const VNI: u32 = 4242;

/// The MAC `ip neigh` in `ns` holds for `ip` on `dev`, if any.
fn neighbour(ns: &Netns, dev: &str, ip: IpAddr) -> Option<String> {
    let out = ns
        .ip(&["neigh", "show", &ip.to_string(), "dev", dev])
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .map(str::to_owned)
}

fn vtep_vs_kernel(underlay_v6: bool, port: u16, tso: bool, len: usize) {
    vtep_vs_kernel_ring(underlay_v6, port, tso, len, None);
}

/// [`vtep_vs_kernel`] with both TAPs batched through an io_uring of depth
/// `ring` (`[tap] io_uring`) if given.
fn vtep_vs_kernel_ring(underlay_v6: bool, port: u16, tso: bool, len: usize, ring: Option<u32>) {
    assert!(netns::is_root(), "system tests need root");
    let what = format!(
        "underlay v{}, port {port}, TSO {}{}",
        if underlay_v6 { 6 } else { 4 },
        if tso { "on" } else { "off" },
        if ring.is_some() { ", io_uring" } else { "" }
    );
    let t0 = Instant::now();
    let spec = VxlanSpec {
        offloads: if tso {
            TapOffloads::ALL
        } else {
            TapOffloads::NONE
        },
        tap_tx: if tso { Offloads::ALL } else { Offloads::NONE },
        io_uring: ring,
        ..VxlanSpec::new(underlay_v6, VNI, port)
    };
    let mut b = KernelVtep::new("vkb", &spec).unwrap();
    let (a4, a6) = spec.ours_overlay;
    let (b4, b6) = spec.kernel_overlay;
    let mut a = LocalPort::with_ring("vka", tso, spec.overlay_mtu(), a4, a6, ring).unwrap();
    let shim = || {
        if tso {
            ShimConfig::all()
        } else {
            ShimConfig::none()
        }
    };
    let ul_tap = b.take_tap().unwrap();
    assert_eq!(ul_tap.io_uring_active(), ring.is_some(), "{what}");
    let ul_tap_counters = ul_tap.counters().clone();
    let ul = Shim::new(ul_tap, shim()).unwrap();
    let ul_counters = ul.counters().clone();
    let port_tap = a.take_tap();
    let port_tap_counters = port_tap.counters().clone();
    let local = Shim::new(port_tap, shim()).unwrap();

    let prefix = if underlay_v6 { 64 } else { 24 };
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/{prefix}"

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        port = {port}
        flood = ["{kernel}"]
        ports = ["{name}"]
        {tap}
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        name = a.name,
        tap = ring.map_or(String::new(), |d| format!("[tap]\nio_uring = {d}")),
    );
    let cfg = parse(&toml).unwrap();
    assert_eq!(cfg.tap_io_uring, ring, "{what}: [tap] io_uring");
    let vtep = Running::start(&cfg, Box::new(ul), vec![vec![Box::new(local)]]);

    // Pings and ARP both ways: A resolves B's vx0 through the VTEP...
    let (a_mac, b_mac) = (a.mac(), b.kernel_overlay_mac().unwrap());
    for to in [IpAddr::from(b4), IpAddr::from(b6)] {
        ping_from(&a.ns, to, &what);
    }
    assert_eq!(
        neighbour(&a.ns, &a.name, b4.into()),
        Some(fmt_mac(b_mac)),
        "{what}: A's ARP entry for B"
    );
    assert_eq!(
        neighbour(&a.ns, &a.name, b6.into()),
        Some(fmt_mac(b_mac)),
        "{what}: A's neighbour entry for B"
    );
    // ...then B forgets A and resolves it itself.
    b.ns.ip(&["neigh", "flush", "dev", &b.vxlan_name]).unwrap();
    assert_eq!(neighbour(&b.ns, &b.vxlan_name, a4.into()), None);
    for to in [IpAddr::from(a4), IpAddr::from(a6)] {
        ping_from(&b.ns, to, &what);
    }
    assert_eq!(
        neighbour(&b.ns, &b.vxlan_name, a4.into()),
        Some(fmt_mac(a_mac)),
        "{what}: B's ARP entry for A"
    );
    assert_eq!(
        neighbour(&b.ns, &b.vxlan_name, a6.into()),
        Some(fmt_mac(a_mac)),
        "{what}: B's neighbour entry for A"
    );

    // The kernel's VXLAN device learned A's MAC behind the VTEP...
    let fdb =
        b.ns.command("bridge")
            .args(["fdb", "show", "dev", &b.vxlan_name])
            .output()
            .unwrap();
    let fdb = String::from_utf8_lossy(&fdb.stdout).into_owned();
    let want = format!("{} dst {}", fmt_mac(a_mac), spec.ours_underlay);
    assert!(
        fdb.lines().any(|l| l.starts_with(&want)),
        "{what}: `bridge fdb show dev vx0` in B lacks {want:?}:\n{fdb}"
    );
    // ...and the VTEP learned vx0's behind the kernel's VTEP, and A's on its
    // port.
    let dump = vtep.dump();
    let entry = |mac: [u8; 6]| dump.iter().find(|r| r.mac == mac && r.vni == VNI);
    let listing = dump.iter().map(|r| format!("\n  {r}")).collect::<String>();
    let at_b = entry(b_mac).unwrap_or_else(|| panic!("{what}: no entry for vx0:{listing}"));
    assert_eq!(at_b.dest, Dest::Remote(spec.kernel_underlay), "{what}");
    assert!(!at_b.is_static);
    let at_a = entry(a_mac).unwrap_or_else(|| panic!("{what}: no entry for A:{listing}"));
    assert_eq!(at_a.dest, Dest::Local(0), "{what}");
    assert!(!at_a.is_static);
    eprintln!("{what}: VTEP FDB:{listing}\nvx0 FDB:\n{fdb}");

    // TCP, A to B and back, over IPv4 inside (IPv6 inside on the IPv6
    // underlay with TSO on).
    let server = if underlay_v6 && tso {
        IpAddr::from(b6)
    } else {
        IpAddr::from(b4)
    };
    let encap_before = vtep.counter(&format!("vni{VNI}.tunnel.tx_encap"));
    let secs = transfer(&a.ns, &b.ns, SocketAddr::new(server, 5001), len, &what);
    let c = |n: &str| vtep.counter(&format!("vni{VNI}.{n}"));
    let encap = c("tunnel.tx_encap") - encap_before;
    let mtu = usize::from(spec.overlay_mtu());
    let segments = (len / (mtu - if server.is_ipv6() { 60 } else { 40 })) as u64;
    let (port_gso, port_tx_gso, ul_tx_gso, ul_sw_gso) = (
        port_tap_counters.total(Counter::RxGsoPackets),
        port_tap_counters.total(Counter::TxGsoPackets),
        ul_tap_counters.total(Counter::TxGsoPackets),
        ul_counters.total(Counter::GsoPackets),
    );
    eprintln!(
        "{what}: 2 x {} MiB in {secs:.2} s ({:.2} Gbit/s), setup and checks {:.2} s; \
         {encap} encapsulations for {segments} segments up; super-frames from A {port_gso}, \
         to A {port_tx_gso}, to the kernel {ul_tx_gso}, segmented by the shim {ul_sw_gso}\n{}",
        len >> 20,
        2.0 * len as f64 * 8.0 / secs / 1e9,
        t0.elapsed().as_secs_f64() - secs,
        vtep.nonzero()
    );
    if tso {
        assert!(
            port_gso > 0,
            "{what}: the kernel in A handed no super-frame"
        );
        // What came back decapsulated reached A in super-frames too.
        assert!(port_tx_gso > 0, "{what}: no super-frame reached A");
        assert!(
            encap * 4 < segments,
            "{what}: {encap} encapsulations for {segments} segments"
        );
        assert!(
            ul_tx_gso + ul_sw_gso > 0,
            "{what}: no super-frame went out encapsulated"
        );
    } else {
        assert_eq!(port_gso + port_tx_gso, 0, "{what}");
        assert_eq!(ul_tx_gso + ul_sw_gso, 0, "{what}");
        assert!(
            encap >= segments,
            "{what}: {encap} encapsulations for {segments} segments"
        );
    }
    assert_eq!(
        ul_counters.total(Counter::RxDroppedCsum),
        0,
        "{what}: bad checksums from the kernel"
    );
    assert_eq!(c("tunnel.rx_dropped_source"), 0, "{what}");
    drop(vtep);
    drop(a);
    drop(b);
    eprintln!("{what}: {:.2} s in all", t0.elapsed().as_secs_f64());
}

#[test]
fn vtep_vxlan_ipv4_underlay_linux_port_tso_on() {
    vtep_vs_kernel(false, LINUX_PORT, true, bulk_len());
}

#[test]
fn vtep_vxlan_ipv4_underlay_iana_port_tso_off() {
    vtep_vs_kernel(false, IANA_PORT, false, bulk_len());
}

#[test]
fn vtep_vxlan_ipv6_underlay_iana_port_tso_on() {
    vtep_vs_kernel(true, IANA_PORT, true, bulk_len());
}

#[test]
fn vtep_vxlan_ipv6_underlay_linux_port_tso_off() {
    vtep_vs_kernel(true, LINUX_PORT, false, bulk_len());
}

/// Both TAPs batched through io_uring (`[tap] io_uring`): super-frames both
/// ways.
#[test]
fn vtep_vxlan_ipv4_underlay_linux_port_tso_on_io_uring() {
    vtep_vs_kernel_ring(false, LINUX_PORT, true, bulk_len(), Some(256));
}

/// Both TAPs batched through io_uring: every frame MSS-sized, one ring
/// entry each.
#[test]
fn vtep_vxlan_ipv4_underlay_iana_port_tso_off_io_uring() {
    vtep_vs_kernel_ring(false, IANA_PORT, false, bulk_len(), Some(256));
}

#[test]
fn vtep_vxlan_ipv6_underlay_iana_port_tso_on_io_uring() {
    vtep_vs_kernel_ring(true, IANA_PORT, true, bulk_len(), Some(256));
}

/// `ping -M do` from `ns` to `to` with `size` bytes of payload: its output.
fn ping_df(ns: &Netns, to: IpAddr, size: usize) -> String {
    let out = ns
        .command("ping")
        .args([
            "-n",
            "-c",
            "1",
            "-W",
            "2",
            "-M",
            "do",
            "-s",
            &size.to_string(),
        ])
        .arg(to.to_string())
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A host whose port MTU was raised past the overlay's sends a packet the
/// tunnel cannot carry: the VTEP answers with ICMP "fragmentation needed" /
/// ICMPv6 "packet too big" from the destination, the kernel takes the lower
/// path MTU, and its next `ping -M do` of that size fails locally. Nothing
/// oversize reaches the kernel's VXLAN device.
fn vtep_answers_packets_too_big(underlay_v6: bool) {
    assert!(netns::is_root(), "system tests need root");
    let what = format!("underlay v{}", if underlay_v6 { 6 } else { 4 });
    let spec = VxlanSpec {
        offloads: TapOffloads::NONE,
        tap_tx: Offloads::NONE,
        ..VxlanSpec::new(underlay_v6, VNI, IANA_PORT)
    };
    let mut b = KernelVtep::new("vpb", &spec).unwrap();
    let (a4, a6) = spec.ours_overlay;
    let (b4, b6) = spec.kernel_overlay;
    let overlay = spec.overlay_mtu();
    let mut a = LocalPort::new("vpa", false, overlay, a4, a6).unwrap();
    let ul = Shim::new(b.take_tap().unwrap(), ShimConfig::none()).unwrap();
    let local = Shim::new(a.take_tap(), ShimConfig::none()).unwrap();
    let prefix = if underlay_v6 { 64 } else { 24 };
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/{prefix}"

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        port = {IANA_PORT}
        flood = ["{kernel}"]
        ports = ["{name}"]
        "#,
        ours = spec.ours_underlay,
        kernel = spec.kernel_underlay,
        name = a.name,
    );
    let cfg = parse(&toml).unwrap();
    let vtep = Running::start(&cfg, Box::new(ul), vec![vec![Box::new(local)]]);
    // At the overlay MTU, with DF: answered (and both ends resolved).
    for (to, hdr) in [(IpAddr::from(b4), 28), (IpAddr::from(b6), 48)] {
        let out = ping_df(&a.ns, to, usize::from(overlay) - hdr);
        assert!(
            out.contains(" 0% packet loss"),
            "{what}: {to} at the MTU: {out}"
        );
    }
    // The host's MTU raised to 1500: a full-size packet is answered with the
    // overlay's MTU, and the next one fails on the host itself.
    a.ns.ip(&["link", "set", &a.name, "mtu", "1500"]).unwrap();
    for (to, hdr) in [(IpAddr::from(b4), 28), (IpAddr::from(b6), 48)] {
        let out = ping_df(&a.ns, to, 1500 - hdr);
        let mtu = format!("mtu{}{overlay}", if to.is_ipv4() { " = " } else { "=" });
        assert!(
            out.contains(&mtu),
            "{what}: {to}: no ICMP with {mtu} came back: {out}\n{}",
            vtep.nonzero()
        );
        let again = ping_df(&a.ns, to, 1500 - hdr);
        assert!(
            again.contains("too long") || again.contains(&format!("mtu={overlay}")),
            "{what}: {to}: the host did not lower its path MTU: {again}"
        );
    }
    let answered: u64 = vtep
        .counters()
        .iter()
        .filter(|(n, _)| n.ends_with("icmp_too_big"))
        .map(|(_, v)| v)
        .sum();
    assert!(answered >= 2, "{what}: {}", vtep.nonzero());
    assert_eq!(
        vtep.counters()
            .iter()
            .filter(|(n, _)| n.ends_with("tx_dropped_tunnel_oversize"))
            .map(|(_, v)| v)
            .sum::<u64>(),
        0,
        "{what}: oversize frames reached the tunnel"
    );
    drop(vtep);
    drop(a);
    drop(b);
}

#[test]
fn vtep_answers_packets_too_big_ipv4_underlay() {
    vtep_answers_packets_too_big(false);
}

#[test]
fn vtep_answers_packets_too_big_ipv6_underlay() {
    vtep_answers_packets_too_big(true);
}
