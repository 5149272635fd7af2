//! Tunnel underlay captures read by tshark with checksum validation on (issue 12,
//! "an independent check").
//!
//! * `tunnel_pcap_check_passes_gso_output_and_catches_faults`: the checker of
//!   `linerate_testkit::tunnel_pcap` itself, on VXLAN (ports 4789 and Linux's
//!   8472), GENEVE with two option TLVs and NVGRE super-frames made by
//!   `FrameBuilder` and segmented by linerate-offload's GSO: every segment passes;
//!   a flipped payload byte, a wrong VNI, a wrong option, a wrong outer checksum
//!   expectation and a lower MTU are each caught.
//!
//! * `engine_over_<kind>_...`: two linerate engines talk TCP (4 MiB each way,
//!   SHA-256) through a linerate tunnel over the memory backend at MTU 1500 with
//!   no hardware offloads, GSO on: the engines send 64 KiB super-segments, the
//!   tunnel encapsulates them whole, the underlay's shim segments them in
//!   software. The underlay is recorded as on the wire and tshark must read
//!   every frame as the expected tunnel (VXLAN on 4789 and 8472, GENEVE with two
//!   option TLVs, NVGRE) with the right VNI / VSID / options, every inner
//!   checksum good, the outer UDP checksum zero or good as configured, none
//!   over the MTU; underlay ARP / neighbour discovery the only other frames.
//!
//! Needs tshark: `cargo test --features system-tests --test system_tunnel_tshark`.
#![cfg(feature = "system-tests")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../crates/offload/tests/it/common/mod.rs"]
mod common;
mod tunnel_common;

use common::{Spec, Tunnel, VNI, build};
use linerate::nic::{Counter, MemNic, Nic, NicCaps, PcapRecorder, Shim, ShimConfig};
use linerate::offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate::toe::Config;
use linerate::tunnel::{Encap, Tunnel as Overlay, TunnelNic, UdpCsum, VniConfig, VtepConfig};
use linerate_testkit::stream::Pattern;
use linerate_testkit::tunnel_pcap::{self, Expect, GeneveOpt, OuterCsum, TunnelKind};
use linerate_testkit::{pcap, tshark};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tunnel_common::{Host, Receiver, Sender, pump_pair};

/// A temporary directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(linerate_testkit::netns::unique(tag));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The options `common::build` puts in a GENEVE header with `n` options.
fn geneve_options(n: u8) -> Vec<GeneveOpt> {
    (0..n)
        .map(|i| GeneveOpt {
            class: 0x0102,
            kind: i + 1,
            data: vec![i; 4],
        })
        .collect()
}

/// The segments of one TCP super-frame through `tunnel`, outer IPv6 or not,
/// with the outer UDP checksum filled or not; VXLAN's port rewritten to `port`.
fn segments(tunnel: Tunnel, outer_v6: bool, outer_csum: bool, port: u16) -> Vec<Vec<u8>> {
    let mut s = Spec::new(tunnel, 12_000, 1300);
    s.outer_v6 = outer_v6;
    s.ip_v6 = !outer_v6;
    s.outer_csum = outer_csum;
    let sup = build(&s);
    let mut seg = Segmenter::new(CsumMode::Complete);
    let mut out = SegmentBuf::new();
    let n = seg.segment(&sup.frame, &sup.meta, &mut out).unwrap();
    assert!(n >= 9, "{} segments", n);
    (0..n)
        .map(|i| {
            let mut f = out.get(i).unwrap().to_vec();
            if tunnel == Tunnel::Vxlan && port != 4789 {
                // The outer UDP destination port, after Ethernet and IP. A
                // checksum over it is then wrong: only do this without one.
                assert!(!outer_csum);
                let at = 14 + if outer_v6 { 40 } else { 20 } + 2;
                f[at..at + 2].copy_from_slice(&port.to_be_bytes());
            }
            f
        })
        .collect()
}

fn kind_of(tunnel: Tunnel, port: u16) -> TunnelKind {
    match tunnel {
        Tunnel::Vxlan => TunnelKind::Vxlan { vni: VNI, port },
        Tunnel::Geneve { options } => TunnelKind::Geneve {
            vni: VNI,
            options: geneve_options(options),
        },
        Tunnel::Nvgre { .. } => TunnelKind::Nvgre { vsid: VNI },
        Tunnel::None => unreachable!(),
    }
}

fn check(dir: &TempDir, name: &str, frames: &[Vec<u8>], e: &Expect) -> tunnel_pcap::Summary {
    let path = dir.0.join(format!("{name}.pcap"));
    pcap::write(&path, frames.iter().map(Vec::as_slice)).unwrap();
    tunnel_pcap::check(&path, e).unwrap()
}

#[test]
fn tunnel_pcap_check_passes_gso_output_and_catches_faults() {
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let dir = TempDir::new("tpc");
    let cases = [
        (Tunnel::Vxlan, 4789),
        (Tunnel::Vxlan, 8472),
        (Tunnel::Geneve { options: 2 }, 6081),
        (Tunnel::Nvgre { csum: false }, 0),
    ];
    for (tunnel, port) in cases {
        for outer_v6 in [false, true] {
            // Outer UDP checksums as Linux sends them: none over IPv4, computed
            // over IPv6; 8472 without (the port is patched in afterwards).
            let csum = outer_v6 && port != 8472 && !matches!(tunnel, Tunnel::Nvgre { .. });
            let name = format!("{}-{port}-v{}", tunnel.name(), if outer_v6 { 6 } else { 4 });
            let frames = segments(tunnel, outer_v6, csum, port);
            let outer = if csum {
                OuterCsum::Good
            } else {
                OuterCsum::Zero
            };
            let good = Expect::new(kind_of(tunnel, port), outer, 1500);
            let sum = check(&dir, &name, &frames, &good);
            assert!(sum.violations.is_empty(), "{name}: {}", sum.report());
            assert_eq!(sum.tunnel_frames, frames.len(), "{name}");
            assert_eq!(sum.inner_tcp, frames.len(), "{name}");
            assert_eq!(sum.inner_tcp_bytes, 12_000, "{name}: {}", sum.report());
            assert!(sum.max_len <= 1514, "{name}");

            // Each fault is caught, on the frames it touches.
            let mut flipped = frames.clone();
            let last = flipped[3].len() - 1;
            flipped[3][last] ^= 0x40;
            let sum = check(&dir, &format!("{name}-flip"), &flipped, &good);
            // tshark numbers frames from 1. An outer UDP checksum covers the
            // byte too.
            assert_eq!(
                sum.violations.len(),
                1 + usize::from(csum),
                "{}",
                sum.report()
            );
            assert!(sum.violations.iter().all(|v| v.starts_with("frame 4:")));
            assert!(sum.violations.iter().any(|v| v.contains("TCP checksum")));
            assert_eq!(sum.tunnel_frames, frames.len() - 1);

            let small = Expect {
                mtu: 1400,
                ..good.clone()
            };
            let sum = check(&dir, &format!("{name}-mtu"), &frames, &small);
            assert!(sum.violations.iter().all(|v| v.contains("over MTU")));
            assert!(sum.violations.len() >= frames.len() - 1, "{}", sum.report());

            let wrong = match kind_of(tunnel, port) {
                TunnelKind::Vxlan { vni, port } => TunnelKind::Vxlan { vni: vni + 1, port },
                TunnelKind::Geneve { vni, mut options } => {
                    options[1].data[0] ^= 1;
                    TunnelKind::Geneve { vni, options }
                }
                TunnelKind::Nvgre { vsid } => TunnelKind::Nvgre { vsid: vsid ^ 0x10 },
            };
            let e = Expect {
                kind: wrong,
                ..good.clone()
            };
            let sum = check(&dir, &format!("{name}-id"), &frames, &e);
            assert_eq!(sum.violations.len(), frames.len(), "{}", sum.report());
            assert_eq!(sum.tunnel_frames, 0);

            if !matches!(tunnel, Tunnel::Nvgre { .. }) {
                let other = if csum {
                    OuterCsum::Zero
                } else {
                    OuterCsum::Good
                };
                let e = Expect {
                    outer_csum: other,
                    ..good.clone()
                };
                let sum = check(&dir, &format!("{name}-csum"), &frames, &e);
                assert_eq!(sum.violations.len(), frames.len(), "{}", sum.report());
                assert!(sum.violations[0].contains("outer UDP checksum"));
            }
        }
    }
}

/// The options the GENEVE cases send (class in the experimental range, so
/// tshark shows their data).
fn engine_geneve_options() -> Vec<GeneveOpt> {
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

/// One engine-over-tunnel case.
struct Case {
    encap: Encap,
    port: u16,
    underlay_v6: bool,
    inner_v6: bool,
    udp_csum: UdpCsum,
    ipv6_zero_csum: bool,
}

impl Case {
    fn new(encap: Encap, underlay_v6: bool, inner_v6: bool) -> Case {
        Case {
            port: encap.default_port(),
            encap,
            underlay_v6,
            inner_v6,
            udp_csum: UdpCsum::Zero,
            ipv6_zero_csum: false,
        }
    }

    /// What the outer UDP checksum must be (per the tunnel's documentation:
    /// zero over IPv4 unless computed, computed over IPv6 unless opted out).
    fn outer(&self) -> OuterCsum {
        let zero = if self.underlay_v6 {
            self.ipv6_zero_csum && self.udp_csum == UdpCsum::Zero
        } else {
            self.udp_csum == UdpCsum::Zero
        };
        if zero {
            OuterCsum::Zero
        } else {
            OuterCsum::Good
        }
    }

    fn kind(&self) -> TunnelKind {
        match &self.encap {
            Encap::Vxlan => TunnelKind::Vxlan {
                vni: ENGINE_VNI,
                port: self.port,
            },
            Encap::Geneve { options, .. } => TunnelKind::Geneve {
                vni: ENGINE_VNI,
                options: options
                    .iter()
                    .map(|o| GeneveOpt {
                        class: o.class,
                        kind: o.kind,
                        data: o.data.clone(),
                    })
                    .collect(),
            },
            Encap::Nvgre => TunnelKind::Nvgre { vsid: ENGINE_VNI },
        }
    }

    fn name(&self) -> String {
        let kind = match self.encap {
            Encap::Vxlan => "vxlan",
            Encap::Geneve { .. } => "geneve",
            Encap::Nvgre => "nvgre",
        };
        let v = |six: bool| if six { 6 } else { 4 };
        format!(
            "{kind}:{} over v{} carrying v{} ({:?} outer checksum)",
            self.port,
            v(self.underlay_v6),
            v(self.inner_v6),
            self.outer()
        )
    }
}

const ENGINE_VNI: u32 = 0x00_5eed;
/// Bytes each way through every engine case.
const ENGINE_LEN: usize = 4 << 20;

/// One side of the engine cases: underlay MAC and IP, overlay MAC and IPs.
fn side(n: u8, underlay_v6: bool) -> ([u8; 6], IpAddr, [u8; 6], Ipv4Addr, Ipv6Addr) {
    let underlay: IpAddr = if underlay_v6 {
        Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, u16::from(n)).into()
    } else {
        Ipv4Addr::new(192, 0, 2, n).into()
    };
    (
        [2, 0x75, 0, 0, 0, n],
        underlay,
        [2, 0x0e, 0, 0, 0, n],
        Ipv4Addr::new(10, 42, 0, n),
        Ipv6Addr::new(0xfd00, 0x42, 0, 0, 0, 0, 0, u16::from(n)),
    )
}

/// The engine over a tunnel over a shim over one memory port.
fn tunnel_host(case: &Case, port: MemNic, me: u8, peer: u8) -> Host<TunnelNic> {
    let (umac, uip, omac, o4, o6) = side(me, case.underlay_v6);
    let (_, peer_ip, ..) = side(peer, case.underlay_v6);
    let vtep = VtepConfig {
        port: case.port,
        udp_csum: case.udp_csum,
        ipv6_zero_csum: case.ipv6_zero_csum,
        ..VtepConfig::new(case.encap.clone(), umac, uip)
    };
    let shim = Shim::new(port, ShimConfig::all()).unwrap();
    let nic = Overlay::new(shim, vtep, VniConfig::new(ENGINE_VNI, peer_ip)).unwrap();
    let mut cfg = Config::new(omac);
    cfg = if case.inner_v6 {
        cfg.with_ipv6(o6, 64)
    } else {
        cfg.with_ipv4(o4, 24)
    };
    cfg.offloads = true;
    Host::new(cfg, u64::from(me), nic)
}

/// Every non-zero counter of both sides: engine, overlay, tunnel, underlay.
fn diagnose(a: &Host<TunnelNic>, b: &Host<TunnelNic>) -> String {
    [("a", a), ("b", b)]
        .iter()
        .map(|(n, h)| {
            let tunnel: Vec<_> = h
                .nic()
                .tunnel_counters()
                .iter()
                .chain(h.nic().vtep_counters().iter())
                .filter(|(_, v)| *v > 0)
                .collect();
            format!(
                "{n}: engine {:?}\n{n}: overlay {}\n{n}: tunnel {tunnel:?}\n{n}: underlay {}",
                h.engine().counters(),
                h.nic().counters().snapshot().ethtool(),
                h.nic().with_underlay(|u| u.counters().snapshot().ethtool())
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn engine_over_tunnel(case: Case) {
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let name = case.name();
    let dir = TempDir::new("tpe");
    let path = dir.0.join("underlay.pcap");
    let recorder = Arc::new(PcapRecorder::create(&path).unwrap());
    let (mut pa, pb) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    pa.set_recorder(Some(recorder.clone()));
    let mut a = tunnel_host(&case, pa, 1, 2);
    let mut b = tunnel_host(&case, pb, 2, 1);
    let (.., b4, b6) = side(2, case.underlay_v6);
    let server: IpAddr = if case.inner_v6 { b6.into() } else { b4.into() };

    let start = std::time::Instant::now();
    let l = b.engine_mut().tcp_listen(5001).unwrap();
    let now = a.now();
    let c = a
        .engine_mut()
        .tcp_connect(now, SocketAddr::new(server, 5001))
        .unwrap();
    let mut accepted = None;
    let ok = pump_pair(&mut a, &mut b, Duration::from_secs(20), |_, b| {
        accepted = b.engine_mut().tcp_accept(l).ok();
        accepted.is_some()
    });
    assert!(ok, "{name}: accept timed out\n{}", diagnose(&a, &b));
    let s = accepted.unwrap();
    // Both ways at once.
    let (mut a_tx, mut b_tx) = (Sender::new(c, 1, ENGINE_LEN), Sender::new(s, 2, ENGINE_LEN));
    let (mut a_rx, mut b_rx) = (Receiver::new(c), Receiver::new(s));
    let ok = pump_pair(&mut a, &mut b, Duration::from_secs(120), |a, b| {
        let ea = a.engine_mut();
        let done_a = a_tx.step(ea) & a_rx.step(ea);
        let eb = b.engine_mut();
        let done_b = b_tx.step(eb) & b_rx.step(eb);
        done_a && done_b
    });
    assert!(ok, "{name}: transfer timed out\n{}", diagnose(&a, &b));
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(
        b_rx.finish(),
        (ENGINE_LEN, Pattern::digest(1, ENGINE_LEN)),
        "{name}: a to b"
    );
    assert_eq!(
        a_rx.finish(),
        (ENGINE_LEN, Pattern::digest(2, ENGINE_LEN)),
        "{name}: b to a"
    );
    // GSO on: the super-segments crossed the tunnel whole and the underlay's
    // shim segmented them.
    let gso = |h: &Host<TunnelNic>| {
        h.nic()
            .with_underlay(|u| u.counters().total(Counter::GsoPackets))
    };
    assert!(
        gso(&a) > 0 && gso(&b) > 0,
        "{name}: shim GSO {} / {}",
        gso(&a),
        gso(&b)
    );

    a.nic_mut().set_recorder(None);
    let recorder = Arc::into_inner(recorder).unwrap();
    recorder.finish().unwrap();
    let e = Expect {
        data_ports: vec![5001],
        ..Expect::new(case.kind(), case.outer(), 1500)
    };
    let sum = tunnel_pcap::check(&path, &e).unwrap();
    eprintln!("{name}: {secs:.2} s; {}", sum.report());
    assert!(sum.violations.is_empty(), "{name}: {}", sum.report());
    assert!(
        sum.inner_tcp_bytes >= 2 * ENGINE_LEN as u64,
        "{name}: {}",
        sum.report()
    );
    assert!(
        sum.control >= 2,
        "{name}: underlay next hop resolved: {}",
        sum.report()
    );
}

#[test]
fn engine_over_vxlan_ipv4_underlay() {
    engine_over_tunnel(Case::new(Encap::Vxlan, false, false));
}

#[test]
fn engine_over_vxlan_ipv4_underlay_outer_checksum_ipv6_inside() {
    engine_over_tunnel(Case {
        udp_csum: UdpCsum::Compute,
        ..Case::new(Encap::Vxlan, false, true)
    });
}

#[test]
fn engine_over_vxlan_linux_port_ipv6_underlay() {
    engine_over_tunnel(Case {
        port: 8472,
        ..Case::new(Encap::Vxlan, true, false)
    });
}

#[test]
fn engine_over_vxlan_ipv6_underlay_zero_checksum() {
    engine_over_tunnel(Case {
        ipv6_zero_csum: true,
        ..Case::new(Encap::Vxlan, true, true)
    });
}

fn geneve() -> Encap {
    Encap::Geneve {
        options: engine_geneve_options()
            .into_iter()
            .map(|o| linerate::tunnel::GeneveOpt {
                class: o.class,
                kind: o.kind,
                data: o.data,
            })
            .collect(),
        known_critical: Vec::new(),
    }
}

#[test]
fn engine_over_geneve_with_options_ipv4_underlay() {
    engine_over_tunnel(Case::new(geneve(), false, false));
}

#[test]
fn engine_over_geneve_with_options_ipv6_underlay() {
    engine_over_tunnel(Case::new(geneve(), true, true));
}

#[test]
fn engine_over_nvgre_ipv4_underlay() {
    engine_over_tunnel(Case::new(Encap::Nvgre, false, false));
}

#[test]
fn engine_over_nvgre_ipv6_underlay() {
    engine_over_tunnel(Case::new(Encap::Nvgre, true, true));
}
