//! One frame of every kind linerate-wire builds, each with what an independent
//! dissector must read from it.
//!
//! Each [`Sample`] carries `expect`: pairs of a tshark field name and the value tshark
//! must print for it (all occurrences, outer first, joined with `,`). The values come
//! from the specification the frame was built from, not from linerate's own parser,
//! so the pcap test checks linerate against tshark. Every checksum in every frame is
//! filled in; the test also requires tshark to find none of them bad.

use etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, IcmpEchoHeader, Icmpv4Type, Icmpv6Type,
    IpNumber, Ipv4Options, Ipv6RawExtHeader, TcpOptionElement, icmpv4, icmpv6,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::geneve::GeneveOption;

/// A frame and what tshark must read from it.
#[derive(Debug, Clone)]
pub struct Sample {
    /// A short unique name (used for fuzz seeds and messages).
    pub name: String,
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
    /// (tshark field, expected value) pairs.
    pub expect: Vec<(&'static str, String)>,
}

/// Arguments tshark needs to decode every sample (Linux's VXLAN port 8472).
pub const TSHARK_ARGS: &[&str] = &["-d", "udp.port==8472,vxlan"];

/// Fields the catalogue's expectations use, plus the checksum statuses and the
/// malformed-packet marker that the pcap test checks on every frame.
pub const FIELDS: &[&str] = &[
    "frame.protocols",
    "ip.checksum.status",
    "tcp.checksum.status",
    "udp.checksum.status",
    "icmp.checksum.status",
    "icmpv6.checksum.status",
    "_ws.malformed",
    "_ws.expert.message",
    "vlan.id",
    "ieee8021ad.id",
    "arp.opcode",
    "arp.dst.proto_ipv4",
    "ip.src",
    "ip.dst",
    "ip.opt.type",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.nxt",
    "ipv6.hopopts.nxt",
    "ipv6.dstopts.nxt",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq",
    "tcp.options.mss_val",
    "tcp.options.wscale.shift",
    "tcp.options.timestamp.tsval",
    "tcp.options.sack_le",
    "tcp.options.sack_re",
    "udp.srcport",
    "udp.dstport",
    "icmp.type",
    "icmp.code",
    "icmp.mtu",
    "icmpv6.type",
    "icmpv6.mtu",
    "icmpv6.nd.ns.target_address",
    "icmpv6.nd.na.target_address",
    "icmpv6.opt.linkaddr",
    "vxlan.vni",
    "geneve.vni",
    "geneve.option.class",
    "geneve.option.type",
    "geneve.option.type.critical",
    "gre.key",
    "gre.proto",
];

/// The payload of every sample that carries one (text, so no dissector mistakes it
/// for a protocol).
pub const PAYLOAD: &[u8] = b"linerate catalogue payload: the quick brown fox";

/// IPv4 addresses of the inner (or only) hosts.
pub const V4_A: [u8; 4] = [10, 77, 0, 1];
/// IPv4 address of the second host.
pub const V4_B: [u8; 4] = [10, 77, 0, 2];
/// IPv6 address of the first host (fd00:77::1).
pub const V6_A: [u8; 16] = [0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// IPv6 address of the second host (fd00:77::2).
pub const V6_B: [u8; 16] = [0xfd, 0, 0, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
/// Underlay IPv4 addresses.
pub const UNDER_V4: ([u8; 4], [u8; 4]) = ([192, 0, 2, 1], [192, 0, 2, 2]);
/// Underlay IPv6 addresses (2001:db8::1, 2001:db8::2).
pub const UNDER_V6: ([u8; 16], [u8; 16]) = (
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
    [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
);

/// Inner TCP ports (no dissector claims them).
pub const TCP_PORTS: (u16, u16) = (40000, 44000);
/// Inner UDP ports.
pub const UDP_PORTS: (u16, u16) = (40001, 44001);

fn s(v: impl ToString) -> String {
    v.to_string()
}

fn sample(name: impl Into<String>, frame: Vec<u8>, expect: Vec<(&'static str, String)>) -> Sample {
    Sample {
        name: name.into(),
        frame,
        expect,
    }
}

/// The TCP header the catalogue's TCP frames use: ACK, PSH, timestamps.
fn tcp() -> L4 {
    let L4::Tcp(mut h) = L4::tcp(TCP_PORTS.0, TCP_PORTS.1) else {
        unreachable!()
    };
    h.sequence_number = 1_000_000;
    h.acknowledgment_number = 2_000_000;
    h.psh = true;
    let _ = h.set_options(&[
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::Timestamp(777, 888),
    ]);
    L4::Tcp(h)
}

/// Every frame kind: ARP, VLAN, QinQ, IPv4 options, IPv6 extension headers, TCP
/// with every option, UDP, ICMPv4 and ICMPv6 messages including NDP.
pub fn plain() -> Vec<Sample> {
    let mut out = Vec::new();
    let mac_a = [0x02, 0, 0, 0, 0, 0x01];
    let bcast = [0xff; 6];

    let arp = |op: ArpOperation, tha: [u8; 6]| {
        ArpPacket::new(
            ArpHardwareId::ETHERNET,
            EtherType::IPV4,
            op,
            &mac_a,
            &V4_A,
            &tha,
            &V4_B,
        )
        .unwrap_or_else(|_| unreachable!("valid ARP"))
    };
    out.push(sample(
        "arp-request",
        FrameBuilder::arp(arp(ArpOperation::REQUEST, [0; 6]), mac_a, bcast).build(&[]),
        vec![("arp.opcode", s(1)), ("arp.dst.proto_ipv4", s("10.77.0.2"))],
    ));
    out.push(sample(
        "arp-reply",
        FrameBuilder::arp(
            arp(ArpOperation::REPLY, [2, 0, 0, 0, 0, 2]),
            mac_a,
            [2, 0, 0, 0, 0, 2],
        )
        .build(&[]),
        vec![("arp.opcode", s(2))],
    ));

    out.push(sample(
        "vlan-ipv4-udp",
        FrameBuilder::new(Ip::v4(V4_A, V4_B), L4::udp(UDP_PORTS.0, UDP_PORTS.1))
            .vlan(100)
            .build(PAYLOAD),
        vec![
            ("vlan.id", s(100)),
            ("udp.srcport", s(UDP_PORTS.0)),
            ("udp.dstport", s(UDP_PORTS.1)),
            ("ip.checksum.status", s(1)),
            ("udp.checksum.status", s(1)),
        ],
    ));
    out.push(sample(
        "qinq-ipv6-tcp",
        FrameBuilder::new(Ip::v6(V6_A, V6_B), tcp())
            .vlan(10)
            .vlan(20)
            .build(PAYLOAD),
        vec![
            ("ieee8021ad.id", s(10)),
            ("vlan.id", s(20)),
            ("ipv6.dst", s("fd00:77::2")),
            ("tcp.dstport", s(TCP_PORTS.1)),
            ("tcp.options.timestamp.tsval", s(777)),
            ("tcp.checksum.status", s(1)),
        ],
    ));

    // IPv4 with options (NOP, NOP, NOP, end of list) and a SYN with every option.
    let mut ip = Ip::v4(V4_A, V4_B);
    if let Ip::V4(h) = &mut ip {
        h.options = Ipv4Options::try_from(&[1u8, 1, 1, 0][..]).unwrap_or_default();
    }
    let L4::Tcp(mut syn) = L4::tcp(TCP_PORTS.0, TCP_PORTS.1) else {
        unreachable!()
    };
    syn.syn = true;
    syn.ack = false;
    syn.acknowledgment_number = 0;
    syn.sequence_number = 123_456;
    let _ = syn.set_options(&[
        TcpOptionElement::MaximumSegmentSize(1460),
        TcpOptionElement::SelectiveAcknowledgementPermitted,
        TcpOptionElement::Timestamp(12345, 0),
        TcpOptionElement::Noop,
        TcpOptionElement::WindowScale(7),
    ]);
    out.push(sample(
        "ipv4-options-tcp-syn",
        FrameBuilder::new(ip, L4::Tcp(syn)).build(&[]),
        vec![
            ("ip.opt.type", s("1,1,1,0")),
            ("tcp.seq", s(123_456)),
            ("tcp.options.mss_val", s(1460)),
            ("tcp.options.wscale.shift", s(7)),
            ("tcp.options.timestamp.tsval", s(12345)),
            ("ip.checksum.status", s(1)),
            ("tcp.checksum.status", s(1)),
        ],
    ));

    // IPv6 with hop-by-hop and destination options; a TCP ACK with SACK blocks.
    let mut ip = Ip::v6(V6_A, V6_B);
    if let Ip::V6(_, exts) = &mut ip {
        exts.hop_by_hop_options = Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, 0, 0, 0, 0]).ok();
        exts.destination_options = Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, 0, 0, 0, 0]).ok();
    }
    let L4::Tcp(mut ack) = L4::tcp(TCP_PORTS.0, TCP_PORTS.1) else {
        unreachable!()
    };
    ack.sequence_number = 5000;
    ack.acknowledgment_number = 1000;
    let _ = ack.set_options(&[
        TcpOptionElement::Noop,
        TcpOptionElement::Noop,
        TcpOptionElement::SelectiveAcknowledgement((3000, 4000), [Some((6000, 7000)), None, None]),
    ]);
    out.push(sample(
        "ipv6-exthdrs-tcp-sack",
        FrameBuilder::new(ip, L4::Tcp(ack)).build(&[]),
        vec![
            ("ipv6.nxt", s(0)),
            ("ipv6.hopopts.nxt", s(60)),
            ("ipv6.dstopts.nxt", s(6)),
            ("tcp.options.sack_le", s("3000,6000")),
            ("tcp.options.sack_re", s("4000,7000")),
            ("tcp.checksum.status", s(1)),
        ],
    ));

    let echo = IcmpEchoHeader { id: 0x4242, seq: 7 };
    out.push(sample(
        "icmpv4-echo-request",
        FrameBuilder::new(
            Ip::v4(V4_A, V4_B),
            L4::Icmpv4(Icmpv4Type::EchoRequest(echo)),
        )
        .build(PAYLOAD),
        vec![
            ("icmp.type", s(8)),
            ("icmp.code", s(0)),
            ("icmp.checksum.status", s(1)),
        ],
    ));
    out.push(sample(
        "icmpv4-echo-reply",
        FrameBuilder::new(Ip::v4(V4_B, V4_A), L4::Icmpv4(Icmpv4Type::EchoReply(echo)))
            .build(PAYLOAD),
        vec![("icmp.type", s(0)), ("icmp.checksum.status", s(1))],
    ));

    // ICMP errors quote the invoking packet: its IP header and first 8 bytes.
    let invoking = FrameBuilder::new(Ip::v4(V4_A, V4_B), tcp()).build(PAYLOAD);
    let quote = invoking.get(14..14 + 20 + 8).unwrap_or_default().to_vec();
    let frag_needed = icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1400 };
    out.push(sample(
        "icmpv4-frag-needed",
        FrameBuilder::new(
            Ip::v4([10, 77, 0, 254], V4_A),
            L4::Icmpv4(Icmpv4Type::DestinationUnreachable(frag_needed)),
        )
        .build(&quote),
        vec![
            ("icmp.type", s(3)),
            ("icmp.code", s(4)),
            ("icmp.mtu", s(1400)),
            ("icmp.checksum.status", s(1)),
        ],
    ));
    out.push(sample(
        "icmpv4-time-exceeded",
        FrameBuilder::new(
            Ip::v4([10, 77, 0, 254], V4_A),
            L4::Icmpv4(Icmpv4Type::TimeExceeded(
                icmpv4::TimeExceededCode::TtlExceededInTransit,
            )),
        )
        .build(&quote),
        vec![
            ("icmp.type", s(11)),
            ("icmp.code", s(0)),
            ("icmp.checksum.status", s(1)),
        ],
    ));

    out.push(sample(
        "icmpv6-echo-request",
        FrameBuilder::new(
            Ip::v6(V6_A, V6_B),
            L4::Icmpv6(Icmpv6Type::EchoRequest(echo)),
        )
        .build(PAYLOAD),
        vec![("icmpv6.type", s(128)), ("icmpv6.checksum.status", s(1))],
    ));
    let invoking6 = FrameBuilder::new(Ip::v6(V6_A, V6_B), tcp()).build(PAYLOAD);
    let quote6 = invoking6.get(14..14 + 40 + 8).unwrap_or_default().to_vec();
    out.push(sample(
        "icmpv6-packet-too-big",
        FrameBuilder::new(
            Ip::v6(V6_B, V6_A),
            L4::Icmpv6(Icmpv6Type::PacketTooBig { mtu: 1280 }),
        )
        .build(&quote6),
        vec![
            ("icmpv6.type", s(2)),
            ("icmpv6.mtu", s(1280)),
            ("icmpv6.checksum.status", s(1)),
        ],
    ));

    // Neighbour solicitation to the solicited-node multicast address of V6_B, with a
    // source link-layer address option (type 1, length 1 unit of 8 bytes).
    let snm = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 2];
    let mut ns_ip = Ip::v6(V6_A, snm);
    if let Ip::V6(h, _) = &mut ns_ip {
        h.hop_limit = 255;
    }
    let mut body = V6_B.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&mac_a);
    out.push(sample(
        "icmpv6-neighbor-solicitation",
        FrameBuilder::new(ns_ip, L4::Icmpv6(Icmpv6Type::NeighborSolicitation))
            .macs(mac_a, [0x33, 0x33, 0xff, 0, 0, 2])
            .build(&body),
        vec![
            ("icmpv6.type", s(135)),
            ("icmpv6.nd.ns.target_address", s("fd00:77::2")),
            ("icmpv6.opt.linkaddr", s("02:00:00:00:00:01")),
            ("icmpv6.checksum.status", s(1)),
        ],
    ));
    let mut na_ip = Ip::v6(V6_B, V6_A);
    if let Ip::V6(h, _) = &mut na_ip {
        h.hop_limit = 255;
    }
    let mut body = V6_B.to_vec();
    body.extend_from_slice(&[2, 1, 0x02, 0, 0, 0, 0, 0x02]);
    let na = icmpv6::NeighborAdvertisementHeader {
        router: false,
        solicited: true,
        r#override: true,
    };
    out.push(sample(
        "icmpv6-neighbor-advertisement",
        FrameBuilder::new(na_ip, L4::Icmpv6(Icmpv6Type::NeighborAdvertisement(na))).build(&body),
        vec![
            ("icmpv6.type", s(136)),
            ("icmpv6.nd.na.target_address", s("fd00:77::2")),
            ("icmpv6.opt.linkaddr", s("02:00:00:00:00:02")),
            ("icmpv6.checksum.status", s(1)),
        ],
    ));
    out
}

/// The GENEVE options the catalogue uses: one plain, one critical.
pub const GENEVE_OPTIONS: [GeneveOption<'static>; 2] = [
    GeneveOption {
        class: 0x0102,
        kind: 0x01,
        data: &[0xde, 0xad, 0xbe, 0xef],
    },
    GeneveOption {
        class: 0xfff0,
        kind: 0x85,
        data: &[1, 2, 3, 4, 5, 6, 7, 8],
    },
];

/// Every tunnel stack: (VXLAN, GENEVE with options, NVGRE) x (IPv4, IPv6 underlay)
/// x (IPv4, IPv6 inner) x (TCP, UDP), and VXLAN on Linux's port 8472.
pub fn tunnels() -> Vec<Sample> {
    let mut out = Vec::new();
    for (kind, vni) in [("vxlan", 42u32), ("geneve", 4242), ("nvgre", 0x0abcde)] {
        for outer_v6 in [false, true] {
            for inner_v6 in [false, true] {
                for tcp_inner in [true, false] {
                    out.push(tunnel_sample(
                        kind, vni, outer_v6, inner_v6, tcp_inner, None,
                    ));
                }
            }
        }
    }
    out.push(tunnel_sample("vxlan", 8472, false, false, true, Some(8472)));
    out
}

fn tunnel_sample(
    kind: &str,
    vni: u32,
    outer_v6: bool,
    inner_v6: bool,
    tcp_inner: bool,
    port: Option<u16>,
) -> Sample {
    let inner_ip = if inner_v6 {
        Ip::v6(V6_A, V6_B)
    } else {
        Ip::v4(V4_A, V4_B)
    };
    let outer_ip = if outer_v6 {
        Ip::v6(UNDER_V6.0, UNDER_V6.1)
    } else {
        Ip::v4(UNDER_V4.0, UNDER_V4.1)
    };
    let l4 = if tcp_inner {
        tcp()
    } else {
        L4::udp(UDP_PORTS.0, UDP_PORTS.1)
    };
    let flow_id = 0x5a;
    let mut b = FrameBuilder::new(inner_ip, l4);
    b = match kind {
        "vxlan" => b.vxlan(vni, outer_ip),
        "geneve" => b.geneve(vni, &GENEVE_OPTIONS, outer_ip),
        _ => b.nvgre(vni, flow_id, outer_ip),
    };
    if let Some(p) = port {
        b = b.tunnel_ports(linerate_wire::build::DEFAULT_TUNNEL_SRC_PORT, p);
    }
    // Outer UDP checksum: on over IPv6 (as Linux sends it), and on GENEVE over IPv4;
    // zero for VXLAN over IPv4 (RFC 7348).
    let outer_csum = outer_v6 || kind == "geneve";
    b = b.outer_udp_checksum(outer_csum);
    let frame = b.build(PAYLOAD);

    let name = format!(
        "{kind}{}-{}-{}-{}",
        port.map(|p| format!("{p}")).unwrap_or_default(),
        if outer_v6 { "ipv6" } else { "ipv4" },
        if inner_v6 { "ipv6" } else { "ipv4" },
        if tcp_inner { "tcp" } else { "udp" }
    );
    let mut expect = Vec::new();
    let ip_status = match (outer_v6, inner_v6) {
        (false, false) => "1,1",
        (true, true) => "",
        _ => "1",
    };
    expect.push(("ip.checksum.status", s(ip_status)));
    let udp_tunnel = kind != "nvgre";
    // tshark's checksum status: 1 good, 3 not present (a zero UDP checksum).
    let outer_udp_status = if outer_csum { "1" } else { "3" };
    let (dport, udp_ports_src, udp_ports_dst, udp_status) = match (udp_tunnel, tcp_inner) {
        (true, true) => {
            let d = port.unwrap_or(if kind == "vxlan" { 4789 } else { 6081 });
            (
                d,
                s(linerate_wire::build::DEFAULT_TUNNEL_SRC_PORT),
                s(d),
                s(outer_udp_status),
            )
        }
        (true, false) => {
            let d = port.unwrap_or(if kind == "vxlan" { 4789 } else { 6081 });
            (
                d,
                format!(
                    "{},{}",
                    linerate_wire::build::DEFAULT_TUNNEL_SRC_PORT,
                    UDP_PORTS.0
                ),
                format!("{d},{}", UDP_PORTS.1),
                format!("{outer_udp_status},1"),
            )
        }
        (false, true) => (0, s(""), s(""), s("")),
        (false, false) => (0, s(UDP_PORTS.0), s(UDP_PORTS.1), s(1)),
    };
    let _ = dport;
    expect.push(("udp.srcport", udp_ports_src));
    expect.push(("udp.dstport", udp_ports_dst));
    expect.push(("udp.checksum.status", udp_status));
    if tcp_inner {
        expect.push(("tcp.srcport", s(TCP_PORTS.0)));
        expect.push(("tcp.dstport", s(TCP_PORTS.1)));
        expect.push(("tcp.checksum.status", s(1)));
    }
    match kind {
        "vxlan" => expect.push(("vxlan.vni", s(vni))),
        "geneve" => {
            // tshark prints the GENEVE VNI in hex, the VXLAN one in decimal.
            expect.push(("geneve.vni", format!("{vni:#08x}")));
            expect.push(("geneve.option.class", s("0x0102,0xfff0")));
            expect.push(("geneve.option.type", s("0x01,0x85")));
        }
        _ => {
            expect.push((
                "gre.key",
                format!("{:#010x}", (vni << 8) | u32::from(flow_id)),
            ));
            expect.push(("gre.proto", s("0x6558")));
        }
    }
    let (src, dst) = if inner_v6 {
        ("ipv6.src", "ipv6.dst")
    } else {
        ("ip.src", "ip.dst")
    };
    let (outer_src, outer_dst, inner_src, inner_dst) = if outer_v6 {
        ("2001:db8::1", "2001:db8::2", "fd00:77::1", "fd00:77::2")
    } else {
        ("192.0.2.1", "192.0.2.2", "10.77.0.1", "10.77.0.2")
    };
    if outer_v6 == inner_v6 {
        expect.push((src, format!("{outer_src},{inner_src}")));
        expect.push((dst, format!("{outer_dst},{inner_dst}")));
    } else {
        let (isrc, idst) = if inner_v6 {
            ("fd00:77::1", "fd00:77::2")
        } else {
            ("10.77.0.1", "10.77.0.2")
        };
        expect.push((src, s(isrc)));
        expect.push((dst, s(idst)));
    }
    sample(name, frame, expect)
}

/// [`plain`] followed by [`tunnels`].
pub fn all() -> Vec<Sample> {
    let mut v = plain();
    v.extend(tunnels());
    v
}
