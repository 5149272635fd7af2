//! A capture of a tunnel's underlay, checked frame by frame by tshark with
//! checksum validation on: every frame must dissect as the expected tunnel
//! (VXLAN with its VNI, GENEVE with its VNI and option TLVs, NVGRE with its VSID),
//! with every checksum inside good, the outer UDP checksum good or absent (zero)
//! as configured, and no frame longer than the underlay MTU allows. Underlay
//! control frames (ARP, IPv6 neighbour discovery and MLD) are allowed and counted.
//!
//! ```no_run
//! use linerate_testkit::tunnel_pcap::{Expect, OuterCsum, TunnelKind, check};
//! let expect = Expect::new(TunnelKind::Vxlan { vni: 42, port: 8472 }, OuterCsum::Zero, 1500);
//! let summary = check(std::path::Path::new("underlay.pcap"), &expect).unwrap();
//! assert!(summary.violations.is_empty(), "{}", summary.report());
//! ```

use crate::tshark;
use std::collections::HashMap;
use std::io;
use std::path::Path;

/// One GENEVE option TLV as it must appear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneveOpt {
    /// Option class.
    pub class: u16,
    /// Option type (its top bit is the critical bit).
    pub kind: u8,
    /// Option data (a multiple of 4 bytes).
    pub data: Vec<u8>,
}

/// The tunnel every data frame must be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelKind {
    /// VXLAN with this VNI on this UDP destination port.
    Vxlan {
        /// The VNI.
        vni: u32,
        /// The UDP destination port (4789, or 8472 as Linux's default).
        port: u16,
    },
    /// GENEVE (port 6081) with this VNI and these options, in order.
    Geneve {
        /// The VNI.
        vni: u32,
        /// The option TLVs every frame carries.
        options: Vec<GeneveOpt>,
    },
    /// NVGRE with this VSID (the GRE key's top 24 bits) and inner Ethernet.
    Nvgre {
        /// The VSID.
        vsid: u32,
    },
}

/// What the outer UDP checksum must be (VXLAN, GENEVE).
///
/// tshark's `udp.checksum.status`: 0 bad, 1 good, 2 unverified, 3 not present
/// (zero over IPv4), 4 illegal (zero over IPv6, which RFC 6935 allows tunnels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OuterCsum {
    /// Zero (status 3 over IPv4, 4 over IPv6).
    Zero,
    /// Present, and good (status 1).
    Good,
}

/// What a capture must show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// The tunnel.
    pub kind: TunnelKind,
    /// The outer UDP checksum (ignored for NVGRE).
    pub outer_csum: OuterCsum,
    /// The underlay MTU: no frame may be longer than this plus the 14-byte
    /// Ethernet header.
    pub mtu: usize,
    /// TCP ports whose payload tshark shows as plain data: without this,
    /// heuristic dissectors (Thrift, say) read random bulk data as their
    /// protocol and call it malformed.
    pub data_ports: Vec<u16>,
}

impl Expect {
    /// Expects `kind` with `outer_csum` at underlay MTU `mtu`, no data ports.
    pub fn new(kind: TunnelKind, outer_csum: OuterCsum, mtu: usize) -> Expect {
        Expect {
            kind,
            outer_csum,
            mtu,
            data_ports: Vec::new(),
        }
    }
}

/// What tshark found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Frames in the capture.
    pub frames: usize,
    /// Frames that were the expected tunnel.
    pub tunnel_frames: usize,
    /// Tunnel frames carrying TCP.
    pub inner_tcp: usize,
    /// TCP payload bytes inside the tunnel.
    pub inner_tcp_bytes: u64,
    /// Underlay control frames (ARP, ICMPv6 neighbour discovery and MLD).
    pub control: usize,
    /// The longest frame.
    pub max_len: usize,
    /// TCP checksums written 0xffff where 0x0000 is computed (equal in one's
    /// complement, RFC 1624; counted as good).
    pub ffff_checksums: usize,
    /// Every way a frame fell short, one line each (frame number first).
    pub violations: Vec<String>,
}

impl Summary {
    /// The counts and the first violations, for an assertion message.
    pub fn report(&self) -> String {
        let mut s = format!(
            "{} frames: {} tunnel ({} TCP, {} payload bytes), {} control, longest {}, {} TCP checksums 0xffff for 0; {} violations",
            self.frames,
            self.tunnel_frames,
            self.inner_tcp,
            self.inner_tcp_bytes,
            self.control,
            self.max_len,
            self.ffff_checksums,
            self.violations.len()
        );
        for v in self.violations.iter().take(20) {
            s.push_str("\n  ");
            s.push_str(v);
        }
        s
    }
}

const FIELDS: &[&str] = &[
    "frame.number",
    "frame.len",
    "frame.protocols",
    "ip.checksum.status",
    "udp.checksum",
    "udp.checksum.status",
    "tcp.checksum.status",
    "tcp.checksum",
    "tcp.checksum_calculated",
    "icmp.checksum.status",
    "icmpv6.checksum.status",
    "gre.checksum.status",
    "tcp.len",
    "udp.dstport",
    "vxlan.vni",
    "geneve.vni",
    "geneve.option.class",
    "geneve.option.type",
    "geneve.option.length",
    "geneve.option.unknown.data",
    "gre.key",
    "gre.proto",
    "icmpv6.type",
    "_ws.malformed",
    "_ws.expert.message",
];

/// A tshark number: decimal, or hexadecimal with `0x`.
pub fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Bytes as tshark prints them (hex, with or without `:` separators).
fn parse_bytes(s: &str) -> Option<Vec<u8>> {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The tshark options `check` uses for `kind` (VXLAN on a port other than 4789
/// must be named).
pub fn decode_as(kind: &TunnelKind) -> Vec<String> {
    match kind {
        TunnelKind::Vxlan { port, .. } if *port != 4789 => {
            vec!["-d".into(), format!("udp.port=={port},vxlan")]
        }
        _ => Vec::new(),
    }
}

/// Reads `pcap` with tshark and checks every frame against `expect`.
pub fn check(pcap: &Path, expect: &Expect) -> io::Result<Summary> {
    let mut extra = decode_as(&expect.kind);
    for p in &expect.data_ports {
        extra.push("-d".into());
        extra.push(format!("tcp.port=={p},data"));
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let rows = tshark::fields(pcap, FIELDS, &extra)?;
    let mut sum = Summary::default();
    for row in rows {
        let row: HashMap<&str, String> = FIELDS.iter().copied().zip(row).collect();
        check_frame(&row, expect, &mut sum);
    }
    Ok(sum)
}

/// Every occurrence of a field, outer first.
fn values<'a>(row: &'a HashMap<&str, String>, field: &str) -> Vec<&'a str> {
    row.get(field)
        .map(|v| v.split(',').filter(|v| !v.is_empty()).collect())
        .unwrap_or_default()
}

fn check_frame(row: &HashMap<&str, String>, e: &Expect, sum: &mut Summary) {
    sum.frames += 1;
    let get = |f: &str| row.get(f).map_or("", String::as_str);
    let n = get("frame.number").to_owned();
    let mut bad = |what: String| sum.violations.push(format!("frame {n}: {what}"));
    let len = parse_num(get("frame.len")).unwrap_or(0) as usize;
    let protocols = get("frame.protocols").to_owned();
    sum.max_len = sum.max_len.max(len);
    if len > e.mtu + 14 {
        bad(format!("{len} bytes, over MTU {} + 14", e.mtu));
    }
    if !get("_ws.malformed").is_empty() {
        bad(format!("malformed ({protocols})"));
    }
    // Control frames of the underlay itself: ARP, neighbour discovery, MLD
    // (Linux reports its IPv6 multicast groups).
    let outer_eth_only = !protocols.contains(":vxlan:")
        && !protocols.contains(":geneve:")
        && !protocols.contains(":gre:");
    if outer_eth_only {
        let nd = values(row, "icmpv6.type")
            .first()
            .and_then(|t| parse_num(t))
            .is_some_and(|t| (133..=137).contains(&t) || matches!(t, 130..=132 | 143));
        if protocols.starts_with("eth:ethertype:arp") || nd {
            sum.control += 1;
        } else {
            bad(format!("not a tunnel frame: {protocols}"));
        }
        return;
    }
    let before = sum.violations.len();
    check_tunnel(row, e, &protocols, sum);
    if sum.violations.len() == before {
        sum.tunnel_frames += 1;
    }
}

fn check_tunnel(row: &HashMap<&str, String>, e: &Expect, protocols: &str, sum: &mut Summary) {
    let get = |f: &str| row.get(f).map_or("", String::as_str);
    let n = get("frame.number").to_owned();
    let mut v = Vec::new();
    let udp = values(row, "udp.checksum.status");
    let outer_udp = match &e.kind {
        TunnelKind::Vxlan { vni, port } => {
            if !protocols.contains(":vxlan:eth:") {
                v.push(format!("not VXLAN: {protocols}"));
            }
            let got = values(row, "vxlan.vni");
            if got.first().and_then(|s| parse_num(s)) != Some(u64::from(*vni)) {
                v.push(format!("VXLAN VNI {got:?}, want {vni}"));
            }
            let dport = values(row, "udp.dstport");
            if dport.first().and_then(|s| parse_num(s)) != Some(u64::from(*port)) {
                v.push(format!("UDP destination port {dport:?}, want {port}"));
            }
            true
        }
        TunnelKind::Geneve { vni, options } => {
            if !protocols.contains(":geneve:eth:") {
                v.push(format!("not GENEVE: {protocols}"));
            }
            let got = values(row, "geneve.vni");
            if got.first().and_then(|s| parse_num(s)) != Some(u64::from(*vni)) {
                v.push(format!("GENEVE VNI {got:?}, want {vni}"));
            }
            check_options(row, options, &mut v);
            true
        }
        TunnelKind::Nvgre { vsid } => {
            if !protocols.contains(":gre:eth:") {
                v.push(format!("not NVGRE: {protocols}"));
            }
            let key = values(row, "gre.key");
            let got = key.first().and_then(|s| parse_num(s)).map(|k| k >> 8);
            if got != Some(u64::from(*vsid)) {
                v.push(format!("GRE key {key:?}, want VSID {vsid}"));
            }
            let proto = values(row, "gre.proto");
            if proto.first().and_then(|s| parse_num(s)) != Some(0x6558) {
                v.push(format!("GRE protocol {proto:?}, want 0x6558"));
            }
            if values(row, "gre.checksum.status").contains(&"0") {
                v.push("bad GRE checksum".into());
            }
            false
        }
    };
    // Outer UDP checksum as configured; every inner one good.
    let inner_udp = if outer_udp {
        // A zero checksum is "not present" (3) over IPv4, "illegal" (4) over
        // IPv6, where RFC 6935 allows it for tunnels all the same.
        let value = values(row, "udp.checksum");
        let zero = value.first().and_then(|s| parse_num(s)) == Some(0);
        let ok = match e.outer_csum {
            OuterCsum::Zero => zero && matches!(udp.first(), Some(&"3" | &"4")),
            OuterCsum::Good => !zero && udp.first() == Some(&"1"),
        };
        if !ok {
            v.push(format!(
                "outer UDP checksum {value:?} status {udp:?}, want {:?}",
                e.outer_csum
            ));
        }
        udp.get(1..).unwrap_or_default()
    } else {
        &udp[..]
    };
    // A TCP checksum field of 0xffff where 0x0000 is computed is the same
    // number in one's complement (RFC 1624 section 3; Linux's incremental
    // updates write it); tshark calls it bad ("tcp.checksum.ffff").
    let mut tcp_status = values(row, "tcp.checksum.status");
    let field = values(row, "tcp.checksum");
    let calc = values(row, "tcp.checksum_calculated");
    for (i, st) in tcp_status.iter_mut().enumerate() {
        let f = field.get(i).and_then(|s| parse_num(s));
        let c = calc.get(i).and_then(|s| parse_num(s));
        if *st == "0" && f == Some(0xffff) && c == Some(0) {
            *st = "1";
            sum.ffff_checksums += 1;
        }
    }
    for (field, statuses) in [
        ("UDP", inner_udp.to_vec()),
        ("IPv4 header", values(row, "ip.checksum.status")),
        ("TCP", tcp_status),
        ("ICMP", values(row, "icmp.checksum.status")),
        ("ICMPv6", values(row, "icmpv6.checksum.status")),
    ] {
        if statuses.iter().any(|s| *s != "1") {
            v.push(format!("{field} checksum status {statuses:?} (1 is good)"));
        }
    }
    let tcp = values(row, "tcp.checksum.status");
    if !tcp.is_empty() {
        sum.inner_tcp += 1;
        sum.inner_tcp_bytes += values(row, "tcp.len")
            .first()
            .and_then(|s| parse_num(s))
            .unwrap_or(0);
    }
    sum.violations
        .extend(v.into_iter().map(|w| format!("frame {n}: {w}")));
}

fn check_options(row: &HashMap<&str, String>, want: &[GeneveOpt], v: &mut Vec<String>) {
    let class = values(row, "geneve.option.class");
    let kind = values(row, "geneve.option.type");
    // tshark names the header's total options length `geneve.option.length`
    // too (this version prints it first); drop it when it is there.
    let mut len = values(row, "geneve.option.length");
    let total: usize = want.iter().map(|o| 4 + o.data.len()).sum();
    if len.len() == want.len() + 1 {
        if len.first().and_then(|s| parse_num(s)) != Some(total as u64) {
            v.push(format!("GENEVE options length {len:?}, want {total} first"));
        }
        len.remove(0);
    }
    let data = values(row, "geneve.option.unknown.data");
    if class.len() != want.len() || kind.len() != want.len() {
        v.push(format!(
            "GENEVE options: classes {class:?} types {kind:?}, want {} options",
            want.len()
        ));
        return;
    }
    for (i, o) in want.iter().enumerate() {
        let c = class.get(i).and_then(|s| parse_num(s));
        let t = kind.get(i).and_then(|s| parse_num(s));
        // tshark prints the option length in bytes, header included.
        let l = len.get(i).and_then(|s| parse_num(s));
        let d = data.get(i).and_then(|s| parse_bytes(s));
        if c != Some(u64::from(o.class)) || t != Some(u64::from(o.kind)) {
            v.push(format!(
                "GENEVE option {i}: class {c:?} type {t:?}, want {:#06x} {:#04x}",
                o.class, o.kind
            ));
        }
        if l != Some(4 + o.data.len() as u64) {
            v.push(format!(
                "GENEVE option {i}: length {l:?}, want {}",
                4 + o.data.len()
            ));
        }
        if d.as_deref() != Some(&o.data[..]) {
            v.push(format!("GENEVE option {i}: data {d:?}, want {:?}", o.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_bytes_as_tshark_prints_them() {
        assert_eq!(parse_num("0x00abcdef"), Some(0xab_cdef));
        assert_eq!(parse_num("4789"), Some(4789));
        assert_eq!(parse_num(""), None);
        assert_eq!(parse_bytes("a5a5"), Some(vec![0xa5, 0xa5]));
        assert_eq!(parse_bytes("01:02:03"), Some(vec![1, 2, 3]));
        assert_eq!(parse_bytes("012"), None);
    }

    #[test]
    fn vxlan_on_another_port_is_named_to_tshark() {
        let k = |port| TunnelKind::Vxlan { vni: 1, port };
        assert_eq!(decode_as(&k(8472)), ["-d", "udp.port==8472,vxlan"]);
        assert!(decode_as(&k(4789)).is_empty());
        assert!(decode_as(&TunnelKind::Nvgre { vsid: 1 }).is_empty());
    }
}
