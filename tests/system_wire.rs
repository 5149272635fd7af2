//! linerate-wire against independent dissectors and the Linux kernel.
//!
//! * Every catalogue frame (every header kind, every tunnel stack) goes into a pcap;
//!   tshark, with checksum validation on, must read the values the catalogue expects
//!   and find no bad checksum and no malformed packet.
//! * Frames the kernel sends and receives (ARP, ping, IPv6 neighbour discovery and
//!   ping, a TCP handshake with options, and the same through a kernel VXLAN device)
//!   are captured on a veth in namespaces this test creates; linerate's layout parser
//!   must parse every one and agree with tshark on tunnels, VNIs, protocols and ports.
//!
//! Needs root and tshark: run with `cargo test --features system-tests`.
#![cfg(feature = "system-tests")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::wire::layout::{self, L3Kind, L4Kind, TunnelKind};
use linerate_testkit::capture::Capture;
use linerate_testkit::netns::{Netns, VethPair};
use linerate_testkit::{catalog, pcap, tshark};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

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

fn dissect(frames: &[Vec<u8>], fields: &[&str], extra: &[&str]) -> Vec<HashMap<String, String>> {
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let dir = TempDir::new("pc");
    let path = dir.0.join("frames.pcap");
    pcap::write(&path, frames.iter().map(Vec::as_slice)).unwrap();
    let rows = tshark::fields(&path, fields, extra).unwrap();
    assert_eq!(rows.len(), frames.len(), "tshark read every frame");
    rows.into_iter()
        .map(|r| {
            fields
                .iter()
                .map(|f| f.to_string())
                .zip(r)
                .collect::<HashMap<_, _>>()
        })
        .collect()
}

const CHECKSUM_STATUS: &[&str] = &[
    "ip.checksum.status",
    "tcp.checksum.status",
    "udp.checksum.status",
    "icmp.checksum.status",
    "icmpv6.checksum.status",
];

#[test]
fn catalogue_read_by_tshark() {
    let samples = catalog::all();
    let frames: Vec<Vec<u8>> = samples.iter().map(|s| s.frame.clone()).collect();
    let rows = dissect(&frames, catalog::FIELDS, catalog::TSHARK_ARGS);
    let mut checked = 0;
    for (s, row) in samples.iter().zip(&rows) {
        for (field, want) in &s.expect {
            assert_eq!(row[*field], *want, "{}: tshark field {field}", s.name);
            checked += 1;
        }
        for f in CHECKSUM_STATUS {
            assert!(
                !row[*f].split(',').any(|v| v == "0"),
                "{}: bad {f}: {}",
                s.name,
                row[*f]
            );
        }
        assert_eq!(row["_ws.malformed"], "", "{}: malformed", s.name);
        // And linerate's own parser reads the same frame.
        let l = layout::parse(&s.frame).unwrap_or_else(|e| panic!("{}: {e}", s.name));
        if let Some(vni) = row.get("vxlan.vni").filter(|v| !v.is_empty()) {
            assert_eq!(
                l.tunnel.map(|t| (t.kind, t.vni.to_string())),
                Some((TunnelKind::Vxlan, vni.clone()))
            );
        }
        if let Some(vni) = row.get("geneve.vni").filter(|v| !v.is_empty()) {
            let t = l.tunnel.map(|t| (t.kind, format!("{:#08x}", t.vni)));
            assert_eq!(t, Some((TunnelKind::Geneve, vni.clone())));
        }
    }
    // Every tunnel stack appears, and enough fields were compared to mean something.
    for proto in ["vxlan", "geneve", "gre", "arp", "icmpv6", "ieee8021ad"] {
        assert!(
            rows.iter().any(|r| r["frame.protocols"].contains(proto)),
            "no {proto} frame"
        );
    }
    assert!(checked > 200, "only {checked} fields compared");
}

#[test]
fn tshark_flags_a_corrupted_checksum() {
    // The negative control for the test above: validation is really on.
    let mut frames: Vec<Vec<u8>> = catalog::tunnels().into_iter().map(|s| s.frame).collect();
    let last = frames.len() - 1;
    let n = frames[last].len();
    frames[last][n - 1] ^= 0x01; // a payload byte of the inner TCP segment
    let rows = dissect(&frames, CHECKSUM_STATUS, catalog::TSHARK_ARGS);
    assert!(
        rows[last]["tcp.checksum.status"]
            .split(',')
            .any(|v| v == "0")
    );
    assert!(!rows[0]["tcp.checksum.status"].split(',').any(|v| v == "0"));
}

fn tcp_exchange(server_ns: &Netns, client_ns: &Netns, addr: &'static str) {
    let listener = server_ns
        .run(move || TcpListener::bind(addr))
        .unwrap()
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        s.write_all(b"bye").unwrap();
        got
    });
    let reply = client_ns
        .run(move || {
            let mut c = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(5))?;
            c.write_all(b"hello through linerate's parser")?;
            c.shutdown(std::net::Shutdown::Write)?;
            let mut r = Vec::new();
            c.read_to_end(&mut r)?;
            std::io::Result::Ok(r)
        })
        .unwrap()
        .unwrap();
    assert_eq!(reply, b"bye");
    assert_eq!(server.join().unwrap(), b"hello through linerate's parser");
}

/// The first transport-level protocol in a tshark protocol path (`eth:ethertype:ip:
/// icmp:ip:udp:vxlan...` is ICMP: what follows is the packet an ICMP error quotes).
fn first_l4(protos: &str) -> (&str, &str) {
    let mut it = protos.split(':');
    while let Some(p) = it.next() {
        if matches!(p, "arp" | "icmp" | "icmpv6" | "tcp" | "udp" | "gre") {
            return (p, it.next().unwrap_or(""));
        }
    }
    ("", "")
}

fn last(v: &str) -> &str {
    v.rsplit(',').next().unwrap_or("")
}

fn be16(f: &[u8], at: u16) -> u16 {
    u16::from_be_bytes([f[usize::from(at)], f[usize::from(at) + 1]])
}

#[test]
fn kernel_frames_parse() {
    let a = Netns::new("lrka").unwrap();
    let b = Netns::new("lrkb").unwrap();
    let veth = VethPair::new(&a, "10.99.0.1/24", &b, "10.99.0.2/24").unwrap();
    // Capture from the start: the VXLAN devices' first packets already need ARP.
    let dev = veth.a.clone();
    let cap = a.run(move || Capture::open(&dev)).unwrap().unwrap();
    a.ip(&[
        "-6",
        "addr",
        "add",
        "fd00:99::1/64",
        "dev",
        &veth.a,
        "nodad",
    ])
    .unwrap();
    b.ip(&[
        "-6",
        "addr",
        "add",
        "fd00:99::2/64",
        "dev",
        &veth.b,
        "nodad",
    ])
    .unwrap();
    for (ns, dev, local, remote, overlay) in [
        (&a, &veth.a, "10.99.0.1", "10.99.0.2", "192.168.99.1/24"),
        (&b, &veth.b, "10.99.0.2", "10.99.0.1", "192.168.99.2/24"),
    ] {
        let vx = linerate_testkit::netns::unique("vx");
        ns.ip(&[
            "link", "add", &vx, "type", "vxlan", "id", "42", "remote", remote, "local", local,
            "dstport", "4789", "dev", dev,
        ])
        .unwrap();
        ns.ip(&["addr", "add", overlay, "dev", &vx]).unwrap();
        ns.ip(&["link", "set", &vx, "up"]).unwrap();
    }

    a.exec("ping", &["-c", "2", "-i", "0.2", "-W", "2", "10.99.0.2"])
        .unwrap();
    a.exec(
        "ping",
        &["-6", "-c", "2", "-i", "0.2", "-W", "2", "fd00:99::2"],
    )
    .unwrap();
    tcp_exchange(&b, &a, "10.99.0.2:7777");
    a.exec("ping", &["-c", "2", "-i", "0.2", "-W", "2", "192.168.99.2"])
        .unwrap();
    tcp_exchange(&b, &a, "192.168.99.2:7778");
    let frames = cap
        .collect(Duration::from_millis(500), Duration::from_secs(10))
        .unwrap();
    assert!(frames.len() >= 20, "captured only {} frames", frames.len());

    let fields = [
        "frame.protocols",
        "vxlan.vni",
        "tcp.srcport",
        "tcp.dstport",
        "tcp.flags.syn",
        "tcp.options.mss_val",
        "tcp.options.wscale.shift",
        "tcp.options.timestamp.tsval",
        "udp.srcport",
        "udp.dstport",
        "icmp.type",
        "icmpv6.type",
        "arp.opcode",
    ];
    let rows = dissect(&frames, &fields, &[]);
    let mut seen = HashMap::<&str, usize>::new();
    for (i, (f, row)) in frames.iter().zip(&rows).enumerate() {
        let l = layout::parse(f).unwrap_or_else(|e| panic!("kernel frame {i} refused: {e}"));
        let protos = &row["frame.protocols"];
        let h = l.innermost();
        let (outer_l4, above) = first_l4(protos);
        if (outer_l4, above) == ("udp", "vxlan") {
            let t = l.tunnel.unwrap_or_else(|| {
                panic!("frame {i}: tshark saw VXLAN, we did not: {l:?} {f:02x?}")
            });
            assert_eq!(
                (t.kind, t.vni.to_string()),
                (TunnelKind::Vxlan, row["vxlan.vni"].clone())
            );
            *seen.entry("vxlan").or_default() += 1;
        } else {
            assert_eq!(l.tunnel, None, "frame {i}: {protos}");
        }
        let innermost = if l.tunnel.is_some() {
            first_l4(protos.split_once(":vxlan:").map_or("", |(_, inner)| inner)).0
        } else {
            outer_l4
        };
        if innermost == "arp" {
            assert_eq!(h.l3, L3Kind::Arp, "frame {i}");
            *seen
                .entry(if l.tunnel.is_some() {
                    "vxlan-arp"
                } else {
                    "arp"
                })
                .or_default() += 1;
        } else if innermost == "icmpv6" {
            assert_eq!(h.l4, L4Kind::Icmpv6, "frame {i}");
            *seen
                .entry(match last(&row["icmpv6.type"]) {
                    "135" | "136" => "ndp",
                    _ => "icmpv6",
                })
                .or_default() += 1;
        } else if innermost == "icmp" {
            assert_eq!(h.l4, L4Kind::Icmpv4, "frame {i}");
            *seen
                .entry(if l.tunnel.is_some() {
                    "vxlan-icmp"
                } else {
                    "icmp"
                })
                .or_default() += 1;
        } else if innermost == "tcp" {
            assert_eq!(h.l4, L4Kind::Tcp, "frame {i}");
            assert_eq!(be16(f, h.l4_offset).to_string(), last(&row["tcp.srcport"]));
            assert_eq!(
                be16(f, h.l4_offset + 2).to_string(),
                last(&row["tcp.dstport"])
            );
            if last(&row["tcp.flags.syn"]) == "1" {
                // A kernel SYN carries MSS, SACK-permitted, timestamps, window scale:
                // linerate's option parser must read what tshark reads.
                let seg = &f[usize::from(h.l4_offset)..h.l3_end()];
                let tcp = linerate::wire::tcp::Packet::new_checked(seg).unwrap();
                let o = linerate::wire::tcp::parse_syn_options(tcp.options()).unwrap();
                assert_eq!(
                    o.mss.map(|v| v.to_string()).unwrap_or_default(),
                    last(&row["tcp.options.mss_val"])
                );
                let ws = o.window_scale.map(|v| v.to_string()).unwrap_or_default();
                assert_eq!(ws, last(&row["tcp.options.wscale.shift"]));
                let ts = o.timestamps.map(|(v, _)| v.to_string()).unwrap_or_default();
                assert_eq!(ts, last(&row["tcp.options.timestamp.tsval"]));
                assert!(o.sack_permitted && o.mss.is_some(), "frame {i}: {o:?}");
                *seen
                    .entry(if l.tunnel.is_some() {
                        "vxlan-syn"
                    } else {
                        "syn"
                    })
                    .or_default() += 1;
            }
        } else if innermost == "udp" {
            assert_eq!(h.l4, L4Kind::Udp, "frame {i}");
            assert_eq!(be16(f, h.l4_offset).to_string(), last(&row["udp.srcport"]));
        }
    }
    for kind in [
        "arp",
        "icmp",
        "ndp",
        "icmpv6",
        "syn",
        "vxlan",
        "vxlan-arp",
        "vxlan-icmp",
        "vxlan-syn",
    ] {
        assert!(
            seen.get(kind).copied().unwrap_or(0) > 0,
            "no {kind} frame among {seen:?}"
        );
    }
}
