//! Hash input from frames: per hash type, fragments on addresses only, the enable
//! mask, and tunnels (inner by default, outer by configuration), with frames built by
//! `linerate_wire::build` and offsets from `linerate_wire::layout`.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use common::Rng;
use linerate_offload::RssHashType;
use linerate_rss::{
    FlowTuple, HashConfig, HashInput, HashLevel, HashTypes, IndirectionTable, RssKey, Steering,
    TunnelHashing,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{IpFragOffset, IpNumber, Ipv6FragmentHeader};
use linerate_wire::layout;

fn steering(config: HashConfig) -> Steering {
    Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(8).unwrap(),
        config,
    )
}

fn input(config: &HashConfig, frame: &[u8]) -> Option<HashInput> {
    config.input(frame, &layout::parse(frame).unwrap())
}

const A4: [u8; 4] = [66, 9, 149, 187];
const B4: [u8; 4] = [161, 142, 100, 80];

#[test]
fn each_type_from_frames() {
    let c = HashConfig::default();
    let tcp4 = FrameBuilder::new(Ip::v4(A4, B4), L4::tcp(2794, 1766)).build(b"x");
    let udp4 = FrameBuilder::new(Ip::v4(A4, B4), L4::udp(2794, 1766)).build(b"x");
    let icmp4 = FrameBuilder::new(Ip::v4(A4, B4), L4::Raw(1)).build(&[8, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        input(&c, &tcp4),
        Some(HashInput::tcp_ipv4(A4, B4, 2794, 1766))
    );
    assert_eq!(
        input(&c, &udp4),
        Some(HashInput::udp_ipv4(A4, B4, 2794, 1766))
    );
    assert_eq!(input(&c, &icmp4), Some(HashInput::ipv4(A4, B4)));
    // Microsoft's vector, end to end from a frame.
    let s = steering(c);
    assert_eq!(s.hash_frame(&tcp4, None).unwrap().value, 0x51ccc178);
    assert_eq!(
        s.hash_frame(&tcp4, None).unwrap().kind,
        RssHashType::TcpIpv4
    );

    let a6: [u8; 16] = "3ffe:2501:200:1fff::7"
        .parse::<Ipv6Addr>()
        .unwrap()
        .octets();
    let b6: [u8; 16] = "3ffe:2501:200:3::1".parse::<Ipv6Addr>().unwrap().octets();
    let tcp6 = FrameBuilder::new(Ip::v6(a6, b6), L4::tcp(2794, 1766)).build(b"x");
    let udp6 = FrameBuilder::new(Ip::v6(a6, b6), L4::udp(2794, 1766)).build(b"x");
    assert_eq!(s.hash_frame(&tcp6, None).unwrap().value, 0x40207d3d);
    assert_eq!(
        s.hash_frame(&udp6, None).unwrap().kind,
        RssHashType::UdpIpv6
    );
    let vlan = FrameBuilder::new(Ip::v6(a6, b6), L4::tcp(2794, 1766))
        .vlan(7)
        .vlan(8)
        .build(b"x");
    assert_eq!(s.hash_frame(&vlan, None).unwrap().value, 0x40207d3d);
}

#[test]
fn mask_falls_back_to_addresses_or_nothing() {
    let tcp4 = FrameBuilder::new(Ip::v4(A4, B4), L4::tcp(2794, 1766)).build(b"x");
    let only_ip = HashConfig {
        types: HashTypes::IPV4,
        ..HashConfig::default()
    };
    let s = steering(only_ip);
    let h = s.hash_frame(&tcp4, None).unwrap();
    assert_eq!((h.value, h.kind), (0x323e8fc2, RssHashType::Ipv4));
    let only_udp = HashConfig {
        types: HashTypes::UDP_IPV4,
        ..HashConfig::default()
    };
    assert_eq!(steering(only_udp).hash_frame(&tcp4, None), None);
    // Not IP at all.
    assert_eq!(
        steering(HashConfig::default()).hash_frame(&[0xff; 60], None),
        None
    );
}

#[test]
fn ipv4_fragments_hash_on_addresses_only() {
    let s = steering(HashConfig::default());
    for (more, offset) in [(true, 0u16), (true, 185), (false, 185)] {
        let Ip::V4(mut h) = Ip::v4(A4, B4) else {
            unreachable!()
        };
        h.dont_fragment = false;
        h.more_fragments = more;
        h.fragment_offset = IpFragOffset::try_new(offset).unwrap();
        let f = FrameBuilder::new(Ip::V4(h), L4::tcp(2794, 1766)).build(&[0; 64]);
        let l = layout::parse(&f).unwrap();
        assert_ne!(l.outer.frag, layout::Fragment::None);
        let got = s.hash_frame(&f, Some(&l)).unwrap();
        assert_eq!((got.value, got.kind), (0x323e8fc2, RssHashType::Ipv4));
    }
}

#[test]
fn ipv6_fragments_hash_on_addresses_only() {
    let s = steering(HashConfig::default());
    let a6: [u8; 16] = "3ffe:2501:200:1fff::7"
        .parse::<Ipv6Addr>()
        .unwrap()
        .octets();
    let b6: [u8; 16] = "3ffe:2501:200:3::1".parse::<Ipv6Addr>().unwrap().octets();
    for (more, offset) in [(true, 0u16), (false, 100)] {
        let Ip::V6(h, mut ext) = Ip::v6(a6, b6) else {
            unreachable!()
        };
        ext.fragment = Some(Ipv6FragmentHeader::new(
            IpNumber::TCP,
            IpFragOffset::try_new(offset).unwrap(),
            more,
            7,
        ));
        let f = FrameBuilder::new(Ip::V6(h, ext), L4::tcp(2794, 1766)).build(&[0; 64]);
        let l = layout::parse(&f).unwrap();
        assert_ne!(l.outer.frag, layout::Fragment::None);
        let got = s.hash_frame(&f, Some(&l)).unwrap();
        assert_eq!((got.value, got.kind), (0x2cc18cd5, RssHashType::Ipv6));
    }
}

#[test]
fn frame_and_flow_agree_and_tss_of_frames() {
    let s = steering(HashConfig::default());
    let mut r = Rng(11);
    for _ in 0..200 {
        let (a, b): ([u8; 4], [u8; 4]) = (r.bytes(), r.bytes());
        let (p, q) = (r.port(), r.port());
        let f = FrameBuilder::new(Ip::v4(a, b), L4::udp(p, q)).build(b"x");
        let flow = FlowTuple::udp4(Ipv4Addr::from(a), p, Ipv4Addr::from(b), q);
        assert_eq!(s.hash_frame(&f, None), s.hash_flow(&flow));
        assert_eq!(s.rx_queue_of_frame(&f, None), s.rx_queue(&flow));
        assert_eq!(s.tx_queue_of_frame(&f, None), s.tx_queue(&flow));
        let back = FrameBuilder::new(Ip::v4(b, a), L4::udp(q, p)).build(b"y");
        assert_eq!(
            s.tx_queue_of_frame(&f, None),
            s.rx_queue_of_frame(&back, None)
        );
    }
}

#[derive(Clone, Copy, Debug)]
enum Tunnel {
    Vxlan,
    Geneve,
    Nvgre,
}

/// `n` frames of one tunnel (fixed outer headers) carrying `n` inner flows.
fn tunnel_frames(t: Tunnel, n: usize, r: &mut Rng) -> Vec<Vec<u8>> {
    let under = || Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
    (0..n)
        .map(|_| {
            let inner = FrameBuilder::new(Ip::v4(r.bytes(), r.bytes()), L4::tcp(r.port(), 80));
            match t {
                Tunnel::Vxlan => inner.vxlan(42, under()),
                Tunnel::Geneve => inner.geneve(42, &[], under()),
                Tunnel::Nvgre => inner.nvgre(42, 0, under()),
            }
            .build(b"payload")
        })
        .collect()
}

fn queues_used(s: &Steering, frames: &[Vec<u8>]) -> BTreeSet<u16> {
    frames
        .iter()
        .map(|f| s.rx_queue_of_frame(f, None))
        .collect()
}

#[test]
fn tunnels_spread_inner_flows_and_outer_hashing_does_not() {
    let mut r = Rng(5);
    for t in [Tunnel::Vxlan, Tunnel::Geneve, Tunnel::Nvgre] {
        let frames = tunnel_frames(t, 256, &mut r);
        let inner = steering(HashConfig::default());
        let used = queues_used(&inner, &frames);
        assert_eq!(used.len(), 8, "{t:?} inner hashing: {used:?}");
        // The inner hash is the hash of the inner headers.
        let l = layout::parse(&frames[0]).unwrap();
        let want = inner
            .config()
            .headers_input(&frames[0], &l.inner.unwrap())
            .unwrap();
        assert_eq!(
            inner.hash_frame(&frames[0], None).unwrap().value,
            inner.hasher().hash(&want)
        );

        let outer = steering(HashConfig {
            tunnels: TunnelHashing::OUTER,
            ..HashConfig::default()
        });
        let used = queues_used(&outer, &frames);
        assert_eq!(used.len(), 1, "{t:?} outer hashing: {used:?}");
    }
}

#[test]
fn tunnel_level_is_per_kind() {
    let mut r = Rng(6);
    let only_vxlan_outer = steering(HashConfig {
        tunnels: TunnelHashing {
            vxlan: HashLevel::Outer,
            ..TunnelHashing::INNER
        },
        ..HashConfig::default()
    });
    let vx = tunnel_frames(Tunnel::Vxlan, 64, &mut r);
    let gn = tunnel_frames(Tunnel::Geneve, 64, &mut r);
    assert_eq!(queues_used(&only_vxlan_outer, &vx).len(), 1);
    assert!(queues_used(&only_vxlan_outer, &gn).len() > 4);
}

#[test]
fn tunnel_with_non_ip_inner_uses_outer() {
    let s = steering(HashConfig::default());
    // An ARP frame inside VXLAN: the inner frame has no IP, so the outer UDP
    // 4-tuple is hashed.
    let arp = linerate_wire::etherparse::ArpPacket::new(
        linerate_wire::etherparse::ArpHardwareId::ETHERNET,
        linerate_wire::etherparse::EtherType::IPV4,
        linerate_wire::etherparse::ArpOperation::REQUEST,
        &[2, 0, 0, 0, 0, 1],
        &[10, 0, 0, 1],
        &[0; 6],
        &[10, 0, 0, 2],
    )
    .unwrap();
    let f = FrameBuilder::arp(arp, [2, 0, 0, 0, 0, 1], [0xff; 6])
        .vxlan(1, Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]))
        .build(&[]);
    let h = s.hash_frame(&f, None).unwrap();
    assert_eq!(h.kind, RssHashType::UdpIpv4);
}

mod robustness {
    use super::*;
    use linerate_rss::{Dispatcher, RxFrame};
    use proptest::prelude::*;
    use std::sync::Arc;

    fn valid_frames() -> Vec<Vec<u8>> {
        let mut r = Rng(77);
        let mut v = tunnel_frames(Tunnel::Vxlan, 2, &mut r);
        v.extend(tunnel_frames(Tunnel::Geneve, 2, &mut r));
        v.extend(tunnel_frames(Tunnel::Nvgre, 2, &mut r));
        v.push(FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::udp(1, 2)).build(b"abc"));
        v.push(FrameBuilder::new(Ip::v4(A4, B4), L4::tcp(1, 2)).build(b"abc"));
        v
    }

    proptest! {
        /// Mutated and truncated frames never panic the hashing or the dispatcher,
        /// and whatever hashes is dispatched to a queue that exists.
        #[test]
        fn mutated_frames_never_panic(
            which in 0usize..8,
            flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..8),
            cut in any::<u16>(),
        ) {
            let frames = valid_frames();
            let mut f = frames[which % frames.len()].clone();
            for (at, x) in flips {
                let i = usize::from(at) % f.len();
                f[i] ^= x;
            }
            f.truncate(usize::from(cut) % (f.len() + 1));
            let s = Arc::new(steering(HashConfig::default()));
            let _ = s.hash_frame(&f, None);
            let q = s.rx_queue_of_frame(&f, None);
            prop_assert!(q < 8);
            let (mut d, rx) = Dispatcher::new(s, 4).unwrap();
            let res = d.dispatch([RxFrame::new(f)]);
            prop_assert_eq!(res.delivered, 1);
            prop_assert_eq!(rx[usize::from(q)].len(), 1);
        }

        #[test]
        fn random_bytes_never_panic(f in proptest::collection::vec(any::<u8>(), 0..200)) {
            let s = steering(HashConfig::default());
            let _ = s.hash_frame(&f, None);
            prop_assert!(s.tx_queue_of_frame(&f, None) < 8);
        }
    }
}
