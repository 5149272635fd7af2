//! VXLAN against Linux (issue 12, "against Linux"; docs/testing.md: "The Linux
//! VXLAN device as a tunnel peer").
//!
//! The kernel's own VXLAN device (`vx0`) sits in a namespace the test creates,
//! over a TAP whose other end this process owns (`linerate_testkit::vxlan`).
//!
//! * `kernel_vxlan_pair_*`: the harness's own check, with no linerate tunnel in
//!   it: two kernel VXLAN endpoints in two namespaces, this process copying
//!   frames between their TAPs. Pings both ways (IPv4 and IPv6 inside), TCP both
//!   ways with SHA-256, with the TAPs' offloads on (the kernels hand over UDP
//!   tunnel super-frames where this kernel has `TUN_F_UDP_TUNNEL_GSO`) and off;
//!   with them off, the underlay capture passes the tshark tunnel check (what
//!   Linux sends is what the checker accepts).
//!
//! * `linerate_vxlan_*`: the linerate engine over a linerate VXLAN tunnel over
//!   the TAP (through the software shim) talks TCP to a kernel socket behind
//!   `vx0`: `LINERATE_BULK_MIB` (256) MiB each way on one connection, SHA-256,
//!   IPv4 and IPv6 underlay, on ports 4789 and 8472; offloads on (the TAP's
//!   toward linerate, the tunnel's and the engine's: super-segments cross
//!   encapsulated whole) and off (TUNSETOFFLOAD 0, the TAP presenting no
//!   transmit offload, tunnel and engine offloads off: MSS-sized segments, every
//!   checksum in software). Pings through the tunnel both ways: the kernel
//!   pings the engine (IPv4 and IPv6 inside); linerate pings the kernel with
//!   echo requests sent on the overlay NIC itself before the engine runs (the
//!   engine answers echo requests but has no API to send one).
//! * `linerate_vxlan_*_gso_in_software_passes_tshark`: the same with the kernel's
//!   offloads off and the TAP presenting none, the engine's and tunnel's on: the
//!   shim segments linerate's encapsulated super-segments into frames, the TAP
//!   is recorded as on the wire, and tshark must read every frame both ways
//!   (linerate's and Linux's) as VXLAN with our VNI, checksums good, outer UDP
//!   checksums zero over IPv4 and good over IPv6, none over the MTU
//!   (`LINERATE_BULK_MIB` / 16 each way).
//!
//! Sizes: `LINERATE_BULK_MIB` (default 256) each way for linerate transfers; the
//! harness checks move a quarter of it.
//!
//! Needs root and tshark:
//! `cargo test --features system-tests --test system_tunnel_kernel -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::tap::TapOffloads;
use linerate::nic::{Counter, Nic, Offloads, PcapRecorder, Shim, ShimConfig};
use linerate::toe::Config;
use linerate::tunnel::{Encap, Tunnel, VniConfig, VtepConfig};
use linerate_testkit::relay::Relay;
use linerate_testkit::tunnel_pcap::{self, Expect, OuterCsum, TunnelKind};
use linerate_testkit::vxlan::{IANA_PORT, KernelVtep, LINUX_PORT, VxlanSpec};
use linerate_testkit::{netns, ping, stream};
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod tunnel_common;

use tunnel_common::{Host, overlay_ping};

const VNI: u32 = 4242;

/// Bytes per direction of a linerate transfer: 256 MiB, or `LINERATE_BULK_MIB`.
fn bulk_len() -> usize {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(netns::unique(tag));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kernel side of a transfer each way on one connection: the server reads
/// to EOF (digest), then writes `len` bytes of seed 2 and closes.
fn kernel_server(addr: SocketAddr, len: usize, ready: mpsc::Sender<()>) -> (usize, [u8; 32]) {
    let l = TcpListener::bind(addr).unwrap();
    ready.send(()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let got = stream::receive(&mut s).unwrap();
    stream::send(&mut s, 2, len).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    got
}

/// The client side: writes `len` bytes of seed 1, half-closes, reads to EOF.
fn kernel_client(addr: SocketAddr, len: usize) -> (usize, [u8; 32]) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(20)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    stream::send(&mut s, 1, len).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let got = stream::receive(&mut s).unwrap();
    let _ = s.flush();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    got
}

/// Two kernel VXLAN endpoints joined by a relay in this process.
/// `udp_csum`: the kernels' outer UDP checksums (Linux's default is none over
/// IPv4, computed over IPv6).
fn kernel_vxlan_pair(underlay_v6: bool, port: u16, offloads: TapOffloads, udp_csum: bool) {
    assert!(netns::is_root(), "system tests need root");
    let spec = VxlanSpec {
        offloads,
        udp_csum,
        ..VxlanSpec::new(underlay_v6, VNI, port)
    };
    let mut a = KernelVtep::new("tka", &spec).unwrap();
    let mut b = KernelVtep::new("tkb", &spec.mirrored()).unwrap();
    let tap_a = a.take_tap().unwrap();
    eprintln!(
        "kernel offloads toward us: {:?} (header {:?})",
        tap_a.offloads_enabled(),
        tap_a.header_len()
    );
    let mut relay = Relay::new(tap_a, b.take_tap().unwrap());
    let dir = TempDir::new("tkp");
    let pcap = std::env::var("LINERATE_TUNNEL_PCAP")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.0.join("underlay.pcap"));
    let recorder = Arc::new(PcapRecorder::create(&pcap).unwrap());
    relay.a.set_recorder(Some(recorder.clone()));
    let mut pump_until = |what: &str, limit: Duration, done: &dyn Fn() -> bool| {
        let end = Instant::now() + limit;
        while !done() {
            assert!(Instant::now() < end, "timed out: {what}");
            relay.pump(Duration::from_millis(5)).unwrap();
        }
    };

    // Ping both ways, IPv4 and IPv6 inside the tunnel.
    let (a_in, b_in) = (spec.kernel_overlay, spec.ours_overlay);
    for (from, to) in [
        (&a, IpAddr::from(b_in.0)),
        (&a, IpAddr::from(b_in.1)),
        (&b, IpAddr::from(a_in.0)),
        (&b, IpAddr::from(a_in.1)),
    ] {
        let p = from
            .ns
            .spawn(move || ping::ping(to, 3, 56, Duration::from_secs(3)))
            .unwrap();
        pump_until("ping", Duration::from_secs(20), &|| p.is_finished());
        let answered = p.join().unwrap().unwrap().unwrap();
        assert_eq!(answered, 3, "pings to {to} answered");
    }

    // TCP each way, byte-exact.
    let len = bulk_len() / 16;
    let server_addr = SocketAddr::new(b_in.0.into(), 5001);
    let (ready_tx, ready_rx) = mpsc::channel();
    let server =
        b.ns.spawn(move || kernel_server(server_addr, len, ready_tx))
            .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let start = Instant::now();
    let client = a.ns.spawn(move || kernel_client(server_addr, len)).unwrap();
    pump_until("transfer", Duration::from_secs(300), &|| {
        server.is_finished() && client.is_finished()
    });
    let secs = start.elapsed().as_secs_f64();
    let (up, down) = (
        server.join().unwrap().unwrap(),
        client.join().unwrap().unwrap(),
    );
    assert_eq!(up, (len, stream::Pattern::digest(1, len)), "a to b");
    assert_eq!(down, (len, stream::Pattern::digest(2, len)), "b to a");
    eprintln!(
        "kernel VXLAN pair, underlay v{}, port {port}, outer UDP checksum {udp_csum}, offloads {}: 2 x {} MiB in {secs:.2} s; relay {} + {} frames, {} refused {:?}",
        if underlay_v6 { 6 } else { 4 },
        offloads.any_gso(),
        len >> 20,
        relay.a_to_b,
        relay.b_to_a,
        relay.refused,
        relay.first_refusal
    );
    assert_eq!(relay.refused, 0, "{:?}", relay.first_refusal);
    // With offloads on, the kernels hand over super-frames (UDP tunnel GSO
    // where this kernel has it, else nothing bigger than the MTU).
    let rx_gso = relay.a.counters().total(Counter::RxGsoPackets)
        + relay.b.counters().total(Counter::RxGsoPackets);
    let tunnel_gso = relay.a.offloads_enabled().udp_tunnel;
    assert_eq!(
        rx_gso > 0,
        tunnel_gso,
        "{rx_gso} super-frames from the kernels"
    );

    relay.a.set_recorder(None);
    let recorder = Arc::into_inner(recorder).unwrap();
    recorder.finish().unwrap();
    // Without offloads toward us, the kernel sends finished frames: every one
    // must pass the tunnel check.
    if !offloads.any_gso() {
        let outer = if spec.udp_csum {
            OuterCsum::Good
        } else {
            OuterCsum::Zero
        };
        let e = Expect {
            data_ports: vec![5001],
            ..Expect::new(TunnelKind::Vxlan { vni: VNI, port }, outer, 1500)
        };
        let sum = tunnel_pcap::check(&pcap, &e).unwrap();
        eprintln!("{}", sum.report());
        assert!(sum.violations.is_empty(), "{}", sum.report());
        assert!(sum.inner_tcp_bytes >= 2 * len as u64);
    }
}

#[test]
fn kernel_vxlan_pair_ipv4_underlay_offloads_on() {
    kernel_vxlan_pair(false, IANA_PORT, TapOffloads::ALL, false);
}

#[test]
fn kernel_vxlan_pair_ipv4_underlay_offloads_off() {
    kernel_vxlan_pair(false, LINUX_PORT, TapOffloads::NONE, false);
}

#[test]
fn kernel_vxlan_pair_ipv4_underlay_outer_checksum_offloads_off() {
    kernel_vxlan_pair(false, IANA_PORT, TapOffloads::NONE, true);
}

#[test]
fn kernel_vxlan_pair_ipv6_underlay_offloads_on() {
    kernel_vxlan_pair(true, LINUX_PORT, TapOffloads::ALL, true);
}

#[test]
fn kernel_vxlan_pair_ipv6_underlay_offloads_off() {
    kernel_vxlan_pair(true, IANA_PORT, TapOffloads::NONE, true);
}

#[test]
fn kernel_vxlan_pair_ipv6_underlay_zero_checksum_offloads_off() {
    kernel_vxlan_pair(true, LINUX_PORT, TapOffloads::NONE, false);
}

/// linerate's underlay MAC (the VTEP's, on the TAP).
const OUR_UNDERLAY_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0x75, 0, 0x02];
/// The engine's MAC inside the tunnel.
const OUR_OVERLAY_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0x0e, 0, 0x02];

/// The engine on a linerate VXLAN tunnel over the TAP of a kernel VXLAN
/// endpoint: pings both ways, then TCP each way on one connection (the kernel
/// connects over an IPv6 underlay, linerate over an IPv4 one).
///
/// `soft`: the kernel's offloads toward linerate off and the TAP presenting no
/// transmit offload, but the engine's and the tunnel's on, the shim doing GSO,
/// GRO and checksums in software; the underlay is then recorded as on the wire
/// and read by tshark. `len` bytes each way.
fn linerate_vxlan_with(underlay_v6: bool, port: u16, offloads: bool, soft: bool, len: usize) {
    assert!(netns::is_root(), "system tests need root");
    let kernel_offloads = offloads && !soft;
    let spec = VxlanSpec {
        offloads: if kernel_offloads {
            TapOffloads::ALL
        } else {
            TapOffloads::NONE
        },
        tap_tx: if kernel_offloads {
            Offloads::ALL
        } else {
            Offloads::NONE
        },
        ..VxlanSpec::new(underlay_v6, VNI, port)
    };
    let mut k = KernelVtep::new("tlk", &spec).unwrap();
    let mut tap = k.take_tap().unwrap();
    // LINERATE_TUNNEL_PCAP=FILE records the underlay (for a look with tshark).
    let dir = TempDir::new("tlp");
    let pcap = match std::env::var("LINERATE_TUNNEL_PCAP") {
        Ok(path) => Some(PathBuf::from(path)),
        Err(_) if soft => Some(dir.0.join("underlay.pcap")),
        Err(_) => None,
    };
    let recorder = pcap
        .as_ref()
        .map(|p| Arc::new(PcapRecorder::create(p).unwrap()));
    if let Some(r) = &recorder {
        tap.set_recorder(Some(r.clone()));
    }
    let tap_offloads = tap.offloads_enabled();
    // Off: no software offload either (no GSO, GRO or checksum help below the
    // tunnel), so every checksum is computed and verified by the tunnel and the
    // engine, frame by frame.
    let shim_cfg = if offloads {
        ShimConfig::all()
    } else {
        ShimConfig::none()
    };
    let shim = Shim::new(tap, shim_cfg).unwrap();
    // Linux's outer checksums by default: none over IPv4, computed over IPv6,
    // as the tunnel's defaults.
    let vtep = VtepConfig {
        port,
        offloads,
        ..VtepConfig::new(Encap::Vxlan, OUR_UNDERLAY_MAC, spec.ours_underlay)
    };
    let mut nic = Tunnel::new(shim, vtep, VniConfig::new(VNI, spec.kernel_underlay)).unwrap();
    let k4 = spec.kernel_overlay.0;
    let (o4, o6) = spec.ours_overlay;
    let what = format!(
        "underlay v{}, port {port}, offloads {offloads}{}",
        if underlay_v6 { 6 } else { 4 },
        if soft { " (in software)" } else { "" }
    );

    // linerate pings the kernel, on the overlay NIC before the engine runs.
    let kernel_mac = k.kernel_overlay_mac().unwrap();
    let answered = overlay_ping(
        &mut nic,
        (OUR_OVERLAY_MAC, o4),
        (kernel_mac, k4),
        3,
        Duration::from_millis(200),
        Duration::from_secs(3),
    );
    assert_eq!(
        answered,
        3,
        "{what}: linerate's pings answered\n{}",
        k.vxlan_stats()
    );

    let mut cfg = Config::new(OUR_OVERLAY_MAC)
        .with_ipv4(o4, 24)
        .with_ipv6(o6, 64);
    cfg.offloads = offloads;
    cfg.tcp.send_buffer = 4 << 20;
    cfg.tcp.recv_buffer = 4 << 20;
    let mut h = Host::new(cfg, 0x5eed, nic);

    // The kernel pings the engine, IPv4 and IPv6 inside.
    for to in [IpAddr::from(o4), IpAddr::from(o6)] {
        let p =
            k.ns.spawn(move || ping::ping(to, 3, 56, Duration::from_secs(3)))
                .unwrap();
        h.pump_until(Duration::from_secs(20), "kernel ping", |_| p.is_finished());
        assert_eq!(
            p.join().unwrap().unwrap().unwrap(),
            3,
            "{what}: pings to {to}"
        );
    }

    // TCP each way on one connection.
    let start = Instant::now();
    let (up, down);
    if underlay_v6 {
        // The kernel connects: it sends first, then reads what the engine sends.
        let l = h.engine_mut().tcp_listen(5001).unwrap();
        let addr = SocketAddr::new(o4.into(), 5001);
        let client = k.ns.spawn(move || kernel_client(addr, len)).unwrap();
        let s = h.accept(l);
        up = h.receive(s);
        h.send(s, 2, len);
        h.pump_until(Duration::from_secs(600), "kernel reads", |_| {
            client.is_finished()
        });
        down = client.join().unwrap().unwrap();
        h.engine_mut().tcp_close(s).unwrap();
    } else {
        // linerate connects: it sends first, then reads what the kernel sends.
        let addr = SocketAddr::new(k4.into(), 5001);
        let (ready_tx, ready_rx) = mpsc::channel();
        let server =
            k.ns.spawn(move || kernel_server(addr, len, ready_tx))
                .unwrap();
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let now = h.now();
        let c = h.engine_mut().tcp_connect(now, addr).unwrap();
        h.send(c, 1, len);
        // The kernel has everything once it starts sending: count from there.
        down = h.receive(c);
        h.pump_until(Duration::from_secs(20), "kernel done", |_| {
            server.is_finished()
        });
        up = server.join().unwrap().unwrap();
        h.engine_mut().tcp_close(c).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        up,
        (len, stream::Pattern::digest(1, len)),
        "{what}: toward the engine's peer"
    );
    assert_eq!(down, (len, stream::Pattern::digest(2, len)), "{what}: back");
    let c = h.engine().counters();
    eprintln!(
        "linerate VXLAN vs kernel, {what}: 2 x {} MiB in {secs:.2} s, {:.2} Gbit/s; TAP offloads {tap_offloads:?}; tcp in {} out {} retrans {} adopted {}; tunnel {:?}",
        len >> 20,
        2.0 * len as f64 * 8.0 / secs / 1e9,
        c.tcp_in_segs,
        c.tcp_out_segs,
        c.tcp_retrans_segs,
        c.tcp_rx_adopted,
        h.nic()
            .tunnel_counters()
            .iter()
            .chain(h.nic().vtep_counters().iter())
            .filter(|(_, v)| *v > 0)
            .collect::<Vec<_>>()
    );
    assert_eq!(c.tcp_in_csum_errors, 0, "{what}");
    // On, super-segments cross the tunnel whole both ways; off, every segment
    // is a frame of its own.
    let t = h.nic().tunnel_counters();
    let (encap, decap) = (
        t.by_name("tx_encap").unwrap(),
        t.by_name("rx_decap").unwrap(),
    );
    if offloads {
        assert!(
            encap * 4 < c.tcp_out_segs,
            "{what}: {encap} frames for {} segments",
            c.tcp_out_segs
        );
        // The kernel's super-frames arrive whole; in software, the shim's GRO
        // coalesces what one receive call finds.
        let factor = if soft { 2 } else { 4 };
        assert!(
            decap * factor < c.tcp_in_segs,
            "{what}: {decap} frames for {} segments",
            c.tcp_in_segs
        );
    } else {
        assert!(
            encap >= c.tcp_out_segs,
            "{what}: {encap} frames for {} segments",
            c.tcp_out_segs
        );
        assert!(
            decap >= c.tcp_in_segs,
            "{what}: {decap} frames for {} segments",
            c.tcp_in_segs
        );
    }
    assert_eq!(
        h.nic().counters().total(Counter::RxDroppedCsum),
        0,
        "{what}"
    );

    // The recording: linerate's frames (segmented by the shim) and the
    // kernel's, every one VXLAN with our VNI, checksums good, outer UDP
    // checksums as Linux's and the tunnel's defaults (zero over IPv4, computed
    // over IPv6), none over the MTU.
    h.nic_mut().set_recorder(None);
    if let Some(r) = recorder {
        Arc::into_inner(r).unwrap().finish().unwrap();
    }
    if soft && let Some(pcap) = &pcap {
        let outer = if underlay_v6 {
            OuterCsum::Good
        } else {
            OuterCsum::Zero
        };
        let e = Expect {
            data_ports: vec![5001],
            ..Expect::new(TunnelKind::Vxlan { vni: VNI, port }, outer, 1500)
        };
        let sum = tunnel_pcap::check(pcap, &e).unwrap();
        eprintln!("{what}: {}", sum.report());
        assert!(sum.violations.is_empty(), "{what}: {}", sum.report());
        assert!(
            sum.inner_tcp_bytes >= 2 * len as u64,
            "{what}: {}",
            sum.report()
        );
        let gso = h
            .nic()
            .with_underlay(|u| u.counters().total(Counter::GsoPackets));
        assert!(gso > 0, "{what}: the shim segmented {gso} super-segments");
    }
}

fn linerate_vxlan(underlay_v6: bool, port: u16, offloads: bool) {
    linerate_vxlan_with(underlay_v6, port, offloads, false, bulk_len());
}

#[test]
fn linerate_vxlan_ipv4_underlay_gso_in_software_passes_tshark() {
    linerate_vxlan_with(false, LINUX_PORT, true, true, bulk_len() / 16);
}

#[test]
fn linerate_vxlan_ipv6_underlay_gso_in_software_passes_tshark() {
    linerate_vxlan_with(true, IANA_PORT, true, true, bulk_len() / 16);
}

#[test]
fn linerate_vxlan_ipv4_underlay_offloads_on() {
    linerate_vxlan(false, IANA_PORT, true);
}

#[test]
fn linerate_vxlan_ipv4_underlay_offloads_off() {
    linerate_vxlan(false, LINUX_PORT, false);
}

#[test]
fn linerate_vxlan_ipv6_underlay_offloads_on() {
    linerate_vxlan(true, LINUX_PORT, true);
}

#[test]
fn linerate_vxlan_ipv6_underlay_offloads_off() {
    linerate_vxlan(true, IANA_PORT, false);
}
