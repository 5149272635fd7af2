//! Builds one frame of every kind linerate-wire knows (ARP, VLAN, QinQ, IPv4 options,
//! IPv6 extension headers, TCP options, UDP, ICMPv4, ICMPv6 and NDP, and every tunnel
//! stack: VXLAN, GENEVE with options, NVGRE over IPv4 and IPv6), parses each back
//! with the one-pass layout parser, prints what it found, and writes them all to a
//! pcap file to open in Wireshark.
//!
//! ```text
//! cargo run --release --example frame_gallery -- [out.pcap]
//! ```

use linerate::wire::layout::{self, Headers};
use linerate_testkit::{catalog, pcap};
use std::path::PathBuf;

fn describe(h: &Headers) -> String {
    let vlan = if h.vlan_tags > 0 {
        format!(" vlan x{}", h.vlan_tags)
    } else {
        String::new()
    };
    format!(
        "{:?}{vlan} @{} / {:?} @{}",
        h.l3, h.l3_offset, h.l4, h.l4_offset
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "frames.pcap".into());
    let samples = catalog::all();
    println!("{:<32} {:>5}  layout", "frame", "bytes");
    for s in &samples {
        let l = layout::parse(&s.frame)?;
        let mut line = format!(
            "{:<32} {:>5}  {}",
            s.name,
            s.frame.len(),
            describe(&l.outer)
        );
        if let (Some(t), Some(inner)) = (l.tunnel, l.inner) {
            line += &format!("  | {:?} vni {} | {}", t.kind, t.vni, describe(&inner));
        }
        println!("{line}");
    }
    pcap::write(&out, samples.iter().map(|s| s.frame.as_slice()))?;
    println!(
        "\nwrote {} frames to {} (tshark: -d udp.port==8472,vxlan decodes the Linux-port sample)",
        samples.len(),
        out.display()
    );
    Ok(())
}
