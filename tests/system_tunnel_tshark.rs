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
//! Needs tshark: `cargo test --features system-tests --test system_tunnel_tshark`.
#![cfg(feature = "system-tests")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../crates/offload/tests/common/mod.rs"]
mod common;

use common::{Spec, Tunnel, VNI, build};
use linerate::offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_testkit::tunnel_pcap::{self, Expect, GeneveOpt, OuterCsum, TunnelKind};
use linerate_testkit::{pcap, tshark};
use std::path::PathBuf;

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
