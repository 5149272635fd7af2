//! GSO output read by tshark with checksum validation on.
//!
//! Every layout (plain, VXLAN, GENEVE with options, NVGRE with and without GRE
//! checksum; IPv4/IPv6 outer and inner; TCP and USO) is segmented, copying and
//! zero-copy, into one pcap. tshark must find no bad checksum (IPv4 header, TCP,
//! UDP, GRE: status 0 is bad), every checksum linerate computed good (status 1),
//! TCP sequence numbers advancing by the MSS, and the VNI / VSID and ports of the
//! super-frame in every segment.
//!
//! Needs tshark: run with `cargo test --features system-tests --test system_offload_gso`.
#![cfg(feature = "system-tests")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../crates/offload/tests/it/common/mod.rs"]
mod common;

use common::{DPORT, SPORT, Spec, TUNNEL_SPORT, Tunnel, VNI, build};
use linerate::offload::gso::{CsumMode, SegmentBuf, Segmenter, ZeroCopyBuf};
use linerate_testkit::{pcap, tshark};
use std::collections::HashMap;
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

const FIELDS: &[&str] = &[
    "frame.protocols",
    "ip.checksum.status",
    "tcp.checksum.status",
    "udp.checksum.status",
    "gre.checksum.status",
    "tcp.seq",
    "tcp.len",
    "tcp.srcport",
    "tcp.dstport",
    "udp.srcport",
    "udp.dstport",
    "vxlan.vni",
    "geneve.vni",
    "gre.key",
    "_ws.malformed",
];

/// One segment in the pcap and what made it.
struct Made {
    spec: usize,
    index: usize,
}

fn specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for tunnel in Tunnel::ALL {
        for outer_v6 in [false, true] {
            for ip_v6 in [false, true] {
                for udp in [false, true] {
                    if tunnel == Tunnel::None && outer_v6 {
                        continue;
                    }
                    let mut s = Spec::new(tunnel, 20_000, 1448);
                    (s.outer_v6, s.ip_v6, s.udp) = (outer_v6, ip_v6, udp);
                    // Outer UDP checksum over IPv6 underlays, none over IPv4.
                    s.outer_csum = outer_v6;
                    s.seq = 0xfff0_0000u32.wrapping_add(specs.len() as u32 * 0x10_0000);
                    s.fin = true;
                    s.seed = specs.len() as u8;
                    specs.push(s);
                }
            }
        }
    }
    specs
}

/// The values of one field (all occurrences, outer first).
fn values<'a>(row: &'a HashMap<String, String>, field: &str) -> Vec<&'a str> {
    row[field].split(',').filter(|v| !v.is_empty()).collect()
}

#[test]
fn gso_output_passes_tshark_checksum_validation() {
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let specs = specs();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    let mut made = Vec::new();
    let mut seg = Segmenter::new(CsumMode::Complete);
    let (mut out, mut zc) = (SegmentBuf::new(), ZeroCopyBuf::new());
    for (k, spec) in specs.iter().enumerate() {
        let sup = build(spec);
        let n = seg.segment(&sup.frame, &sup.meta, &mut out).unwrap();
        assert_eq!(n, 14, "{}", spec.name());
        seg.segment_zero_copy(&sup.frame, &sup.meta, &mut zc)
            .unwrap();
        for i in 0..n {
            frames.push(out.get(i).unwrap().to_vec());
            made.push(Made { spec: k, index: i });
            let mut f = Vec::new();
            assert!(zc.gather_into(i, &sup.frame, &mut f));
            frames.push(f);
            made.push(Made { spec: k, index: i });
        }
    }

    let dir = TempDir::new("gso");
    let path = dir.0.join("gso.pcap");
    pcap::write(&path, frames.iter().map(Vec::as_slice)).unwrap();
    let rows = tshark::fields(&path, FIELDS, &[]).unwrap();
    assert_eq!(rows.len(), frames.len(), "tshark read every frame");

    let mut checked = 0;
    for (row, m) in rows.into_iter().zip(&made) {
        let row: HashMap<String, String> = FIELDS.iter().map(|f| f.to_string()).zip(row).collect();
        let spec = &specs[m.spec];
        let what = format!("{} segment {}", spec.name(), m.index);
        assert_eq!(row["_ws.malformed"], "", "{what}: malformed");
        let tunnelled = spec.tunnel != Tunnel::None;
        // tshark decoded the tunnel and the inner frame.
        let protocols = &row["frame.protocols"];
        let want = match spec.tunnel {
            Tunnel::None => "eth",
            Tunnel::Vxlan => ":vxlan:eth",
            Tunnel::Geneve { .. } => ":geneve:eth",
            Tunnel::Nvgre { .. } => ":gre:eth",
        };
        let inner = if spec.udp { "udp" } else { "tcp" };
        assert!(
            protocols.contains(want) && protocols.contains(inner),
            "{what}: tshark read {protocols}"
        );

        // Checksums: none bad; every one linerate computed, good.
        let ip = values(&row, "ip.checksum.status");
        let ipv4_headers = usize::from(!spec.ip_v6) + usize::from(tunnelled && !spec.outer_v6);
        assert_eq!(ip, vec!["1"; ipv4_headers], "{what}: IPv4 header checksums");
        let udp = values(&row, "udp.checksum.status");
        let tcp = values(&row, "tcp.checksum.status");
        let mut want_udp = Vec::new();
        if matches!(spec.tunnel, Tunnel::Vxlan | Tunnel::Geneve { .. }) {
            // A zero outer checksum is "not present" (3).
            want_udp.push(if spec.outer_csum { "1" } else { "3" });
        }
        if spec.udp {
            want_udp.push("1");
            assert!(tcp.is_empty(), "{what}: TCP in a UDP flow");
        } else {
            assert_eq!(tcp, ["1"], "{what}: TCP checksum");
        }
        assert_eq!(udp, want_udp, "{what}: UDP checksums");
        let gre = values(&row, "gre.checksum.status");
        match spec.tunnel {
            Tunnel::Nvgre { csum: true } => assert_eq!(gre, ["1"], "{what}: GRE checksum"),
            _ => assert!(!gre.contains(&"0"), "{what}: GRE checksum {gre:?}"),
        }

        // Sequence numbers advance by the MSS; ports and VNIs are the super-frame's.
        if !spec.udp {
            let seq = spec.seq.wrapping_add(m.index as u32 * u32::from(spec.mss));
            assert_eq!(row["tcp.seq"], seq.to_string(), "{what}: sequence number");
            assert_eq!(row["tcp.srcport"], SPORT.to_string());
            assert_eq!(row["tcp.dstport"], DPORT.to_string());
            let len: usize = row["tcp.len"].parse().unwrap();
            assert!(len <= usize::from(spec.mss), "{what}: {len} > MSS");
        }
        let mut ports: Vec<String> = Vec::new();
        match spec.tunnel {
            Tunnel::Vxlan => {
                assert_eq!(row["vxlan.vni"], VNI.to_string(), "{what}: VNI");
                ports.push(format!("{TUNNEL_SPORT}>4789"));
            }
            Tunnel::Geneve { .. } => {
                assert_eq!(row["geneve.vni"], format!("{VNI:#08x}"), "{what}: VNI");
                ports.push(format!("{TUNNEL_SPORT}>6081"));
            }
            Tunnel::Nvgre { .. } => {
                let key = &row["gre.key"];
                let key = u32::from_str_radix(key.trim_start_matches("0x"), 16).unwrap();
                assert_eq!(key >> 8, VNI, "{what}: VSID");
            }
            Tunnel::None => {}
        }
        if spec.udp {
            ports.push(format!("{SPORT}>{DPORT}"));
        }
        let src = values(&row, "udp.srcport");
        let dst = values(&row, "udp.dstport");
        let got: Vec<String> = src
            .iter()
            .zip(&dst)
            .map(|(s, d)| format!("{s}>{d}"))
            .collect();
        assert_eq!(got, ports, "{what}: UDP ports");
        checked += 1;
    }
    assert_eq!(checked, frames.len());
}

/// The negative control of the test above: tshark really validates each kind of
/// checksum it is asked about, inner and outer.
#[test]
fn tshark_flags_corrupted_segments() {
    assert!(tshark::available(), "tshark is needed");
    let mut vxlan = Spec::new(Tunnel::Vxlan, 3000, 1448);
    vxlan.outer_v6 = true;
    vxlan.outer_csum = true;
    let gre = Spec::new(Tunnel::Nvgre { csum: true }, 3000, 1448);
    let plain = Spec::new(Tunnel::None, 3000, 1448);
    let mut frames = Vec::new();
    let mut seg = Segmenter::default();
    let mut out = SegmentBuf::new();
    for (spec, corrupt_at) in [(&vxlan, None), (&gre, None), (&plain, Some(14 + 8))] {
        let sup = build(spec);
        seg.segment(&sup.frame, &sup.meta, &mut out).unwrap();
        let mut f = out.get(0).unwrap().to_vec();
        let at = corrupt_at.unwrap_or(f.len() - 1); // a payload byte by default
        f[at] ^= 0x01;
        frames.push(f);
    }
    let dir = TempDir::new("gsoneg");
    let path = dir.0.join("bad.pcap");
    pcap::write(&path, frames.iter().map(Vec::as_slice)).unwrap();
    let fields = [
        "ip.checksum.status",
        "tcp.checksum.status",
        "udp.checksum.status",
        "gre.checksum.status",
    ];
    let rows = tshark::fields(&path, &fields, &[]).unwrap();
    // VXLAN over IPv6: outer UDP and inner TCP both cover the byte.
    assert_eq!(rows[0][1], "0");
    assert_eq!(rows[0][2], "0");
    // NVGRE with checksum: GRE and inner TCP.
    assert_eq!(rows[1][3], "0");
    assert_eq!(rows[1][1], "0");
    // Plain: the IPv4 header (TTL changed).
    assert_eq!(rows[2][0], "0");
}
