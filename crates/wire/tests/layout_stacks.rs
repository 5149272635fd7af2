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
            assert_eq!(usize::from(h.l3_len), usize::from(hdr.total_len()));
            (L3Kind::Ipv4, hdr.slice().len(), hdr.protocol().0)
        }
        Some(NetSlice::Ipv6(s)) => {
            let exts = s.extensions().slice().len();
            assert_eq!(
                usize::from(h.l3_len),
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
        prop_assert_eq!(&frame[l.header_len()..l.innermost().l3_end()], &payload[..]);

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
    assert_eq!(&frame[l.header_len()..l.outer.l3_end()], b"ab");
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
    use linerate_wire::{Error, Layer};
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
    // VXLAN port but the I flag is clear: Linux drops it, so do we.
    let mut vx = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .vxlan(7, Ip::v4([3; 4], [4; 4]))
        .build(b"");
    vx[14 + 20 + 8] = 0;
    assert_eq!(layout::parse(&vx).unwrap_err().layer(), Layer::Vxlan);
    // The same bytes with tunnels off parse as plain UDP.
    let l = layout::Config::PLAIN.parse(&vx).unwrap();
    assert_eq!((l.outer.l4, l.tunnel), (L4Kind::Udp, None));
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
