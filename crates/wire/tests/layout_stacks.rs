//! Build, parse, compare: every tunnel stack (none, VXLAN, GENEVE with options,
//! NVGRE) x (IPv4, IPv6 underlay, with and without VLAN tags) x (IPv4, IPv6 inner,
//! IPv6 with extension headers, IPv4 with options) x (TCP with options, UDP, ICMP).
//!
//! The offsets `layout::parse` reports are checked against etherparse parsing the same
//! bytes on its own (the whole frame, and the inner frame at the offset we report),
//! and every checksum the builder wrote is checked with etherparse's own routines.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use etherparse::{
    IpNumber, Ipv4Options, Ipv6Extensions, Ipv6RawExtHeader, NetSlice, SlicedPacket,
    TcpOptionElement, TransportSlice,
};
use linerate_wire::Layer;
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::geneve::GeneveOption;
use linerate_wire::layout::{self, Fragment, Headers, L3Kind, L4Kind, TunnelKind};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Tun {
    None,
    Vxlan(u32),
    Geneve(u32, Vec<(u16, u8, Vec<u8>)>),
    Nvgre(u32, u8),
}

fn ip_strategy() -> impl Strategy<Value = Ip> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<[u8; 4]>(), any::<u16>(), 0u8..4).prop_map(
            |(s, d, id, opt_words)| {
                let Ip::V4(mut h) = Ip::v4(s, d) else {
                    unreachable!()
                };
                h.identification = id;
                let opts = vec![1u8; usize::from(opt_words) * 4]; // NOPs
                h.options = Ipv4Options::try_from(&opts[..]).unwrap();
                Ip::V4(h)
            }
        ),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<bool>(),
            0u32..0x10_0000
        )
            .prop_map(|(s, d, with_ext, flow)| {
                let Ip::V6(mut h, _) = Ip::v6(s, d) else {
                    unreachable!()
                };
                h.flow_label = etherparse::Ipv6FlowLabel::try_new(flow).unwrap();
                let mut exts = Ipv6Extensions::default();
                if with_ext {
                    exts.hop_by_hop_options =
                        Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, 0, 0, 0, 0]).unwrap());
                    exts.destination_options =
                        Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &[0; 14]).unwrap());
                }
                Ip::V6(h, Box::new(exts))
            }),
    ]
}

fn l4_strategy() -> impl Strategy<Value = (L4, u8)> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), any::<u32>(), any::<bool>()).prop_map(|(s, d, seq, opts)| {
            let L4::Tcp(mut h) = L4::tcp(s, d) else {
                unreachable!()
            };
            h.sequence_number = seq;
            if opts {
                h.set_options(&[
                    TcpOptionElement::Noop,
                    TcpOptionElement::Noop,
                    TcpOptionElement::Timestamp(seq, !seq),
                ])
                .unwrap();
            }
            (L4::Tcp(h), 6)
        }),
        (any::<u16>(), 1u16..4000).prop_map(|(s, d)| (L4::udp(s, d), 17)),
    ]
}

fn tunnel_strategy() -> impl Strategy<Value = Tun> {
    let opt = (any::<u16>(), any::<u8>(), 0usize..4)
        .prop_map(|(c, t, words)| (c, t, (0..words * 4).map(|i| i as u8).collect::<Vec<u8>>()));
    prop_oneof![
        Just(Tun::None),
        (0u32..1 << 24).prop_map(Tun::Vxlan),
        ((0u32..1 << 24), proptest::collection::vec(opt, 0..4))
            .prop_map(|(v, o)| Tun::Geneve(v, o)),
        ((0u32..1 << 24), any::<u8>()).prop_map(|(v, f)| Tun::Nvgre(v, f)),
    ]
}

/// Checks `h` (offsets from the frame start) against etherparse's own parse of
/// `frame[h.l2..]`, and returns the transport payload etherparse saw.
fn compare_with_etherparse<'a>(frame: &'a [u8], h: &Headers) -> &'a [u8] {
    let base = usize::from(h.l2);
    let sliced = SlicedPacket::from_ethernet(&frame[base..]).expect("etherparse parses it");
    assert_eq!(
        usize::from(h.vlan_tags),
        sliced.link_exts.len(),
        "vlan tags"
    );
    let (l3_kind, l3_hdr_len, protocol) = match &sliced.net {
        Some(NetSlice::Ipv4(s)) => {
            let hdr = s.header();
            assert_eq!(
                hdr.header_checksum(),
                hdr.to_header().calc_header_checksum()
            );
            assert_eq!(h.l3_len, u32::from(hdr.total_len()));
            (L3Kind::Ipv4, hdr.slice().len(), hdr.protocol().0)
        }
        Some(NetSlice::Ipv6(s)) => {
            let exts = s.extensions().slice().len();
            assert_eq!(
                h.l3_len as usize,
                40 + usize::from(s.header().payload_length())
            );
            (L3Kind::Ipv6, 40 + exts, s.payload().ip_number.0)
        }
        other => panic!("unexpected net {other:?}"),
    };
    assert_eq!(h.l3, l3_kind);
    assert_eq!(h.protocol, protocol);
    assert_eq!(h.frag, Fragment::None);
    let l3 = base + 14 + 4 * sliced.link_exts.len();
    assert_eq!(usize::from(h.l3_offset), l3);
    assert_eq!(usize::from(h.l4_offset), l3 + l3_hdr_len);
    match sliced.transport {
        Some(TransportSlice::Tcp(t)) => {
            assert_eq!(h.l4, L4Kind::Tcp);
            assert_eq!(h.l4_header_len(), t.slice().len() - t.payload().len());
            let want = match &sliced.net {
                Some(NetSlice::Ipv4(s)) => t
                    .to_header()
                    .calc_checksum_ipv4(&s.header().to_header(), t.payload()),
                Some(NetSlice::Ipv6(s)) => t
                    .to_header()
                    .calc_checksum_ipv6(&s.header().to_header(), t.payload()),
                _ => unreachable!(),
            };
            assert_eq!(t.checksum(), want.unwrap(), "tcp checksum");
            t.payload()
        }
        Some(TransportSlice::Udp(u)) => {
            assert_eq!(h.l4, L4Kind::Udp);
            assert_eq!(h.l4_header_len(), 8);
            u.payload()
        }
        None if protocol == 47 => {
            assert_eq!(h.l4, L4Kind::Gre);
            &frame[usize::from(h.l4_offset)..h.l3_end()]
        }
        other => panic!("unexpected transport {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_stack_parses_as_built(
        inner_ip in ip_strategy(),
        (l4, l4_proto) in l4_strategy(),
        inner_vlans in 0usize..=2,
        tun in tunnel_strategy(),
        outer_ip in ip_strategy(),
        outer_vlans in 0usize..=2,
        payload in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let mut b = FrameBuilder::new(inner_ip, l4);
        for v in 0..inner_vlans {
            b = b.vlan(100 + v as u16);
        }
        let geneve_opts: Vec<GeneveOption<'_>>;
        b = match &tun {
            Tun::None => b,
            Tun::Vxlan(vni) => b.vxlan(*vni, outer_ip),
            Tun::Geneve(vni, opts) => {
                geneve_opts = opts
                    .iter()
                    .map(|(c, t, d)| GeneveOption { class: *c, kind: *t, data: d })
                    .collect();
                b.geneve(*vni, &geneve_opts, outer_ip)
            }
            Tun::Nvgre(vsid, flow) => b.nvgre(*vsid, *flow, outer_ip),
        };
        if !matches!(tun, Tun::None) {
            for v in 0..outer_vlans {
                b = b.vlan(200 + v as u16);
            }
        }
        let frame = b.build(&payload);
        let l = layout::parse(&frame).unwrap();

        let outer_payload = compare_with_etherparse(&frame, &l.outer);
        match (&tun, l.tunnel, l.inner) {
            (Tun::None, None, None) => {
                prop_assert_eq!(outer_payload, &payload[..]);
                prop_assert_eq!(l.outer.protocol, l4_proto);
            }
            (Tun::None, t, _) => prop_assert!(false, "unexpected tunnel {:?}", t),
            (tun, Some(t), Some(inner)) => {
                let (kind, vni) = match tun {
                    Tun::Vxlan(v) => (TunnelKind::Vxlan, *v),
                    Tun::Geneve(v, _) => (TunnelKind::Geneve, *v),
                    Tun::Nvgre(v, _) => (TunnelKind::Nvgre, *v),
                    Tun::None => unreachable!(),
                };
                prop_assert_eq!(t.kind, kind);
                prop_assert_eq!(t.vni, vni);
                prop_assert_eq!(usize::from(inner.l2), usize::from(t.offset) + usize::from(t.len));
                prop_assert_eq!(inner.protocol, l4_proto);
                let inner_payload = compare_with_etherparse(&frame, &inner);
                prop_assert_eq!(inner_payload, &payload[..]);
            }
            (_, t, i) => prop_assert!(false, "tunnel {:?} inner {:?}", t, i),
        }
        prop_assert_eq!(&frame[l.payload_range()], &payload[..]);
        prop_assert_eq!(l.tunnel_error, None);

        // Every strict prefix is refused with an error, never a panic.
        for cut in 0..frame.len() {
            prop_assert!(layout::parse(&frame[..cut]).is_err(), "prefix {} parsed", cut);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(frame in proptest::collection::vec(any::<u8>(), 0..400)) {
        if let Ok(l) = layout::parse(&frame) {
            for h in [Some(l.outer), l.inner].into_iter().flatten() {
                prop_assert!(h.l2 <= h.l3_offset && h.l3_offset <= h.l4_offset);
                prop_assert!(h.l4_offset <= h.payload);
                prop_assert!(usize::from(h.payload) <= frame.len());
                prop_assert!(h.l3_end() <= frame.len() || matches!(h.l3, L3Kind::Other(_)));
            }
            prop_assert!(l.header_len() <= frame.len());
        }
    }
}

#[test]
fn padding_after_ip_is_ignored() {
    // A 60-byte minimum Ethernet frame carrying a short UDP datagram: the bytes after
    // the IPv4 total length are padding, not payload.
    let mut frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::udp(1, 2)).build(b"ab");
    frame.resize(60, 0xee);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(l.outer.l3_end(), 14 + 20 + 8 + 2);
    assert_eq!(&frame[l.payload_range()], b"ab");
}

#[test]
fn fragments_have_no_transport_header() {
    let mut ip = Ip::v4([1; 4], [2; 4]);
    if let Ip::V4(h) = &mut ip {
        h.dont_fragment = false;
        h.fragment_offset = etherparse::IpFragOffset::try_new(100).unwrap();
    }
    let frame = FrameBuilder::new(ip, L4::Raw(6)).build(&[0u8; 8]);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(
        (l.outer.frag, l.outer.l4, l.outer.protocol),
        (Fragment::Later, L4Kind::None, 6)
    );

    let mut ip = Ip::v4([1; 4], [2; 4]);
    if let Ip::V4(h) = &mut ip {
        h.dont_fragment = false;
        h.more_fragments = true;
    }
    let frame = FrameBuilder::new(ip, L4::udp(1, 4789)).build(&[0u8; 30]);
    let l = layout::parse(&frame).unwrap();
    // A first fragment carries its UDP header, but is never decoded as a tunnel.
    assert_eq!(
        (l.outer.frag, l.outer.l4, l.tunnel),
        (Fragment::First, L4Kind::Udp, None)
    );
}

#[test]
fn typed_errors_name_the_layer() {
    use linerate_wire::Error;
    let frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2)).build(b"xyz");
    let mut bad = frame.clone();
    bad[14] = 0x44; // IHL 4
    assert_eq!(
        layout::parse(&bad).unwrap_err(),
        Error::invalid(Layer::Ipv4, "ihl", 4)
    );
    let mut bad = frame.clone();
    bad[14 + 20 + 12] = 0x40; // TCP data offset 4
    assert_eq!(
        layout::parse(&bad).unwrap_err(),
        Error::invalid(Layer::Tcp, "data_offset", 4)
    );
    assert_eq!(
        layout::parse(&frame[..30]).unwrap_err(),
        Error::truncated(Layer::Ipv4, 20, 16)
    );
    let tagged = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .vlan(1)
        .vlan(2)
        .vlan(3)
        .build(b"");
    assert_eq!(
        layout::parse(&tagged).unwrap_err(),
        Error::TooMany {
            layer: Layer::Vlan,
            limit: 2
        }
    );
    // VXLAN port but the I flag is clear: not a tunnel, and the reason is kept (the
    // tunnel endpoint drops it, as Linux does); RSS can still use the outer headers.
    let mut vx = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .vxlan(7, Ip::v4([3; 4], [4; 4]))
        .build(b"");
    vx[14 + 20 + 8] = 0;
    let l = layout::parse(&vx).unwrap();
    assert_eq!((l.tunnel, l.inner, l.outer.l4), (None, None, L4Kind::Udp));
    assert_eq!(l.tunnel_error.map(|e| e.layer()), Some(Layer::Vxlan));
    // The same bytes with tunnels off parse as plain UDP.
    let l = layout::Config::PLAIN.parse(&vx).unwrap();
    assert_eq!(
        (l.outer.l4, l.tunnel, l.tunnel_error),
        (L4Kind::Udp, None, None)
    );
}

#[test]
fn configurable_ports() {
    let frame = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::udp(1, 2))
        .vxlan(99, Ip::v4([3; 4], [4; 4]))
        .tunnel_ports(50000, 9999)
        .build(b"p");
    assert_eq!(layout::parse(&frame).unwrap().tunnel, None);
    let mut cfg = layout::Config::DEFAULT;
    cfg.vxlan_ports.insert(9999).unwrap();
    let l = cfg.parse(&frame).unwrap();
    assert_eq!(l.tunnel.map(|t| t.vni), Some(99));
    assert_eq!(l.inner.map(|h| h.l3), Some(L3Kind::Ipv6));
    let mut full = layout::PortSet::new(&[1, 2, 3, 4]).unwrap();
    assert!(full.insert(5).is_err());
    assert!(full.insert(4).is_ok());
}

#[test]
fn udp_shorter_than_its_ip_payload() {
    // UDP length 10 in an IP payload of 14: the datagram ends at the UDP length.
    let mut frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::udp(1, 2)).build(b"abcdef");
    frame[14 + 20 + 5] = 10;
    let l = layout::parse(&frame).unwrap();
    assert_eq!(&frame[l.payload_range()], b"ab");
    assert_eq!(l.outer.l3_end(), 14 + 20 + 14);
}

#[test]
fn first_fragments_parse_whatever_their_transport_length() {
    // A first fragment of a 3000-byte UDP datagram carries 1480 bytes of it.
    for ip in [Ip::v4([1; 4], [2; 4]), Ip::v6([1; 16], [2; 16])] {
        let ip = match ip {
            Ip::V4(mut h) => {
                h.dont_fragment = false;
                h.more_fragments = true;
                Ip::V4(h)
            }
            Ip::V6(h, mut exts) => {
                exts.fragment = Some(etherparse::Ipv6FragmentHeader::new(
                    IpNumber::UDP,
                    etherparse::IpFragOffset::ZERO,
                    true,
                    99,
                ));
                Ip::V6(h, exts)
            }
        };
        let mut frame = FrameBuilder::new(ip, L4::udp(5000, 4789)).build(&[0u8; 1472]);
        let l = layout::parse(&frame).unwrap();
        let udp = usize::from(l.outer.l4_offset);
        frame[udp + 4..udp + 6].copy_from_slice(&3008u16.to_be_bytes());
        let l = layout::parse(&frame).unwrap();
        assert_eq!(
            (l.outer.frag, l.outer.l4, l.tunnel),
            (Fragment::First, L4Kind::Udp, None)
        );
        assert_eq!(l.outer.l4_header_len(), 8);
        // A first fragment too short for a TCP header still parses, undecoded.
        let cut = &frame[..udp + 4];
        let mut short = cut.to_vec();
        let l3 = usize::from(l.outer.l3_offset);
        if l.outer.l3 == L3Kind::Ipv4 {
            let total = (short.len() - l3) as u16;
            short[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
            short[l3 + 10..l3 + 12].copy_from_slice(&[0, 0]);
        } else {
            let plen = (short.len() - l3 - 40) as u16;
            short[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
        }
        let l = layout::parse(&short).unwrap();
        assert_eq!((l.outer.l4, l.outer.l4_header_len()), (L4Kind::Udp, 0));
    }
}

#[test]
fn ipv6_atomic_fragment_is_whole() {
    let Ip::V6(h, mut exts) = Ip::v6([1; 16], [2; 16]) else {
        unreachable!()
    };
    exts.fragment = Some(etherparse::Ipv6FragmentHeader::new(
        IpNumber::UDP,
        etherparse::IpFragOffset::ZERO,
        false,
        7,
    ));
    let frame = FrameBuilder::new(Ip::V6(h, exts), L4::udp(1, 2))
        .vxlan(5, Ip::v4([3; 4], [4; 4]))
        .build(b"x");
    assert_eq!(layout::parse(&frame).unwrap().outer.frag, Fragment::None);
    // And as the inner packet of a tunnel, which is then still decoded.
    assert_eq!(
        layout::parse(&frame).unwrap().tunnel.map(|t| t.vni),
        Some(5)
    );
}

#[test]
fn ipv6_payload_up_to_64k() {
    let frame = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::tcp(1, 2)).build(&[7; 65515]);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(l.outer.l3_len, 40 + 65535);
    assert_eq!(l.payload_range().len(), 65515);
}

#[test]
fn other_gre_is_plain() {
    // PPTP's enhanced GRE (version 1, key, sequence): plain GRE with its own length.
    let mut pptp = vec![0x30, 0x01, 0x88, 0x0b, 0, 8, 0, 1, 0, 0, 0, 9];
    pptp.extend_from_slice(&[0xff, 0x03, 0, 0x21, 0, 0, 0, 0]);
    let frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::Raw(47)).build(&pptp);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(
        (l.outer.l4, l.tunnel, l.tunnel_error),
        (L4Kind::Gre, None, None)
    );
    assert_eq!(l.outer.l4_header_len(), 12);
    // GRE version 0 carrying IPv4 with a reserved bit set: plain GRE too.
    let gre_ip = [0x00, 0x40, 0x08, 0x00, 0x45, 0, 0, 20];
    let frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::Raw(47)).build(&gre_ip);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(
        (l.outer.l4, l.tunnel, l.outer.l4_header_len()),
        (L4Kind::Gre, None, 4)
    );
    // GRE carrying Ethernet with the routing bit: a tunnel header we refuse, reported.
    let mut nvgre = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .nvgre(9, 1, Ip::v4([3; 4], [4; 4]))
        .build(b"");
    nvgre[14 + 20] |= 0x40;
    let l = layout::parse(&nvgre).unwrap();
    assert_eq!(l.tunnel_error.map(|e| e.layer()), Some(Layer::Gre));
}

#[test]
fn tunnel_flags() {
    let l4 = || L4::tcp(1, 2);
    let v4 = || Ip::v4([3; 4], [4; 4]);
    let f = FrameBuilder::new(v4(), l4())
        .vxlan(1, v4())
        .outer_udp_checksum(true)
        .build(b"a");
    assert!(
        layout::parse(&f)
            .unwrap()
            .tunnel
            .unwrap()
            .flags
            .outer_udp_csum
    );
    let f = FrameBuilder::new(v4(), l4()).vxlan(1, v4()).build(b"a");
    assert!(
        !layout::parse(&f)
            .unwrap()
            .tunnel
            .unwrap()
            .flags
            .outer_udp_csum
    );
    let f = FrameBuilder::new(v4(), l4()).nvgre(1, 2, v4()).build(b"a");
    let t = layout::parse(&f).unwrap().tunnel.unwrap();
    assert!(t.flags.gre_key && !t.flags.gre_csum && !t.flags.gre_seq);
    let crit = GeneveOption {
        class: 1,
        kind: 0x80,
        data: &[],
    };
    let f = FrameBuilder::new(v4(), l4())
        .geneve(1, &[crit], v4())
        .build(b"a");
    let t = layout::parse(&f).unwrap().tunnel.unwrap();
    assert!(t.flags.critical && !t.flags.oam);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random bytes rarely get past Ethernet; damaged real frames reach every layer.
    #[test]
    fn damaged_frames_never_panic(
        inner_ip in ip_strategy(),
        (l4, _) in l4_strategy(),
        tun in tunnel_strategy(),
        outer_ip in ip_strategy(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6),
        cut in any::<usize>(),
    ) {
        let b = FrameBuilder::new(inner_ip, l4);
        let b = match tun {
            Tun::None => b,
            Tun::Vxlan(v) => b.vxlan(v, outer_ip),
            Tun::Geneve(v, _) => b.geneve(v, &[], outer_ip),
            Tun::Nvgre(v, f) => b.nvgre(v, f, outer_ip),
        };
        let mut frame = b.build(b"payload bytes");
        for (at, v) in edits {
            let n = frame.len();
            frame[at % n] = v;
        }
        frame.truncate(cut % (frame.len() + 1));
        linerate_wire::harness::layout(&frame);
    }
}
