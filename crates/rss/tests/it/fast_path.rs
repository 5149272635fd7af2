//! The fast hash-input path ([`HashConfig::extract`], read straight from bytes)
//! against the full one (`layout::Config::parse`, then [`HashConfig::input`]): the
//! same answer for every frame of the testkit catalogue, for fragments, tunnels
//! (inner and outer hashing, tunnel ports of every kind, overlapping ports, bad
//! tunnel headers), every truncation of all of them, and random mutations, under
//! configurations that enable different hash types and tunnel levels.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::Rng;
use linerate_rss::{
    Extracted, HashConfig, HashInput, HashLevel, HashTypes, IndirectionTable, RssKey, Steering,
    TunnelHashing,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{IpFragOffset, IpNumber, Ipv6FragmentHeader};
use linerate_wire::geneve::GeneveOption;
use linerate_wire::layout::{self, L3Kind, L4Kind, PortSet};

/// The full path: parse with the configured tunnel ports, then read the input.
fn full(c: &HashConfig, frame: &[u8]) -> Option<HashInput> {
    c.input(frame, &c.layout.parse(frame).ok()?)
}

/// The configurations compared: hash types, tunnel levels and tunnel ports.
fn configs() -> Vec<HashConfig> {
    let d = HashConfig::default();
    let mut odd_ports = layout::Config::DEFAULT;
    // 6081 is both VXLAN and GENEVE (VXLAN wins); the catalogue's inner UDP
    // destination port and the tunnel source port look like GENEVE.
    odd_ports.vxlan_ports = PortSet::new(&[4789, 6081]).unwrap();
    odd_ports.geneve_ports = PortSet::new(&[6081, 44001, 4790, 49152]).unwrap();
    odd_ports.gre = false;
    vec![
        d,
        HashConfig {
            tunnels: TunnelHashing::OUTER,
            ..d
        },
        HashConfig {
            tunnels: TunnelHashing {
                vxlan: HashLevel::Outer,
                geneve: HashLevel::Inner,
                nvgre: HashLevel::Inner,
            },
            ..d
        },
        HashConfig {
            tunnels: TunnelHashing {
                vxlan: HashLevel::Inner,
                geneve: HashLevel::Outer,
                nvgre: HashLevel::Outer,
            },
            ..d
        },
        HashConfig {
            types: HashTypes::IPV4 | HashTypes::IPV6,
            ..d
        },
        HashConfig {
            types: HashTypes::TCP_IPV4 | HashTypes::UDP_IPV6,
            ..d
        },
        HashConfig {
            types: HashTypes::NONE,
            ..d
        },
        HashConfig {
            layout: layout::Config::PLAIN,
            ..d
        },
        HashConfig {
            layout: odd_ports,
            ..d
        },
    ]
}

fn v4_fragment(more: bool, offset: u16, l4: L4) -> Vec<u8> {
    let Ip::V4(mut h) = Ip::v4([10, 1, 2, 3], [10, 4, 5, 6]) else {
        unreachable!()
    };
    h.dont_fragment = false;
    h.more_fragments = more;
    h.fragment_offset = IpFragOffset::try_new(offset).unwrap();
    FrameBuilder::new(Ip::V4(h), l4).build(&[7; 40])
}

/// Frames the catalogue lacks: fragments, tunnels around them, tunnel variants.
fn extra_frames() -> Vec<Vec<u8>> {
    let under4 = || Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
    let under6 = || Ip::v6([0x20; 16], [0x21; 16]);
    let inner_tcp = || FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1234, 80));
    let inner_udp6 = || FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::udp(5353, 53));
    let opt = GeneveOption {
        class: 0x0102,
        kind: 0x03,
        data: &[1, 2, 3, 4, 5, 6, 7, 8],
    };
    let mut v = vec![
        v4_fragment(true, 0, L4::tcp(2794, 1766)),
        v4_fragment(true, 0, L4::udp(2794, 1766)),
        v4_fragment(true, 0, L4::udp(49152, 4789)),
        v4_fragment(true, 185, L4::tcp(2794, 1766)),
        v4_fragment(false, 185, L4::udp(2794, 1766)),
        v4_fragment(true, 0, L4::Raw(47)),
        v4_fragment(true, 0, L4::Raw(1)),
        inner_tcp().vlan(3).vxlan(9, under4()).build(b"p"),
        inner_tcp().vxlan(9, under6()).vlan(4).build(b"p"),
        inner_tcp()
            .vlan(1)
            .vlan(2)
            .vxlan(9, under4())
            .vlan(5)
            .vlan(6)
            .build(b"p"),
        inner_udp6().geneve(77, &[opt], under4()).build(b"p"),
        inner_udp6().geneve(77, &[opt, opt], under6()).build(b"p"),
        inner_udp6()
            .vxlan(5, under4())
            .tunnel_ports(50000, 4790)
            .build(b"p"),
        inner_udp6()
            .vxlan(5, under4())
            .tunnel_ports(50000, 6081)
            .build(b"p"),
        inner_udp6()
            .geneve(5, &[], under4())
            .tunnel_ports(50000, 4789)
            .build(b"p"),
        inner_tcp().nvgre(5, 1, under4()).build(b"p"),
        inner_tcp().nvgre(5, 1, under6()).build(b"p"),
        // A tunnel inside the inner frame is not decoded.
        FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(9, 4789))
            .vxlan(9, under4())
            .build(&[0x08, 0, 0, 0, 0, 0, 1, 0]),
    ];
    // An inner fragment, and an inner IPv6 fragment (extension header).
    let Ip::V4(mut h) = Ip::v4([10, 9, 9, 1], [10, 9, 9, 2]) else {
        unreachable!()
    };
    h.more_fragments = true;
    h.dont_fragment = false;
    v.push(
        FrameBuilder::new(Ip::V4(h), L4::tcp(1, 2))
            .vxlan(3, under4())
            .build(&[0; 30]),
    );
    let Ip::V6(h6, mut ext) = Ip::v6([3; 16], [4; 16]) else {
        unreachable!()
    };
    ext.fragment = Some(Ipv6FragmentHeader::new(
        IpNumber::UDP,
        IpFragOffset::try_new(0).unwrap(),
        true,
        7,
    ));
    v.push(
        FrameBuilder::new(Ip::V6(h6, ext), L4::udp(1, 2))
            .geneve(3, &[], under4())
            .build(&[0; 30]),
    );
    // IPv4 options inside and outside.
    let Ip::V4(mut h) = Ip::v4([10, 7, 7, 1], [10, 7, 7, 2]) else {
        unreachable!()
    };
    h.options = [1, 1, 1, 0][..].try_into().unwrap();
    v.push(
        FrameBuilder::new(Ip::V4(h.clone()), L4::udp(7, 8))
            .vxlan(3, Ip::V4(h))
            .build(&[0; 9]),
    );
    v
}

fn all_frames() -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = linerate_testkit::catalog::all()
        .into_iter()
        .map(|s| s.frame)
        .collect();
    v.extend(extra_frames());
    v
}

/// Compares the paths on one frame under one configuration; true if the fast
/// path decided.
#[track_caller]
fn same(c: &HashConfig, frame: &[u8]) -> bool {
    let want = full(c, frame);
    let got = c.extract(frame);
    match got {
        Extracted::Input(i) => assert_eq!(Some(i), want, "{c:?}\n{frame:02x?}"),
        Extracted::Unhashable => assert_eq!(None, want, "{c:?}\n{frame:02x?}"),
        Extracted::Parse => {}
    }
    assert_eq!(c.frame_input(frame), want, "{c:?}\n{frame:02x?}");
    got != Extracted::Parse
}

/// True if the fast path is meant to decide `frame`: no IPv6 extension header and
/// no GRE in any stack the full parse walks.
fn fast_path_frame(frame: &[u8]) -> bool {
    let Ok(l) = layout::parse(frame) else {
        return true;
    };
    [Some(l.outer), l.inner].into_iter().flatten().all(|h| {
        let ext = h.l3 == L3Kind::Ipv6 && h.l3_header_len() != 40;
        !ext && h.l4 != L4Kind::Gre
    })
}

#[test]
fn catalogue_and_extras_agree_and_are_decided_fast() {
    let frames = all_frames();
    assert!(frames.len() >= 60, "{}", frames.len());
    let mut decided = 0;
    for c in configs() {
        for f in &frames {
            if same(&c, f) {
                decided += 1;
            } else {
                assert!(!fast_path_frame(f), "not decided fast: {f:02x?}");
            }
        }
    }
    assert!(decided > frames.len() * 6, "{decided}");
}

#[test]
fn every_truncation_agrees() {
    for c in configs() {
        for f in all_frames() {
            for n in 0..f.len() {
                same(&c, &f[..n]);
            }
        }
    }
}

#[test]
fn hash_frame_is_the_full_path_hashed() {
    let s = Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(8).unwrap(),
        HashConfig::default(),
    );
    for f in all_frames() {
        let want = full(s.config(), &f).map(|i| s.hash_input(&i));
        assert_eq!(s.hash_frame(&f, None), want, "{f:02x?}");
    }
}

/// Flips up to four bytes, mostly in the headers, mostly single bits, and
/// sometimes truncates.
fn mutate(f: &mut Vec<u8>, r: &mut Rng) {
    for _ in 0..1 + r.next() % 4 {
        let span = if r.next().is_multiple_of(4) {
            f.len()
        } else {
            f.len().min(120)
        };
        if span == 0 {
            break;
        }
        let at = (r.next() as usize) % span;
        let x = if r.next().is_multiple_of(2) {
            1u8 << (r.next() % 8)
        } else {
            r.next() as u8
        };
        f[at] ^= x;
    }
    if r.next().is_multiple_of(4) {
        let n = (r.next() as usize) % (f.len() + 1);
        f.truncate(n);
    }
}

#[test]
fn random_mutations_agree() {
    let frames = all_frames();
    let configs = configs();
    let mut r = Rng(0x5eed);
    let (mut decided, mut total) = (0u32, 0u32);
    for _ in 0..200_000 {
        let mut f = frames[(r.next() as usize) % frames.len()].clone();
        mutate(&mut f, &mut r);
        let c = &configs[(r.next() as usize) % configs.len()];
        decided += u32::from(same(c, &f));
        total += 1;
    }
    // Most mutations stay on the fast path (they are decided there, not parsed).
    assert!(decided > total / 2, "{decided} of {total}");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any frame of the catalogue, any configuration, any few byte changes in
        /// the headers, any truncation: both paths agree.
        #[test]
        fn mutated_catalogue_frames_agree(
            which in any::<usize>(),
            config in any::<usize>(),
            flips in proptest::collection::vec((0usize..160, any::<u8>()), 0..6),
            cut in any::<u16>(),
        ) {
            let frames = all_frames();
            let configs = configs();
            let mut f = frames[which % frames.len()].clone();
            for (at, x) in flips {
                let i = at % f.len();
                f[i] ^= x;
            }
            f.truncate(usize::from(cut) % (f.len() + 1));
            same(&configs[config % configs.len()], &f);
        }

        /// Random bytes behind a valid Ethernet + IP prefix: both paths agree.
        #[test]
        fn random_tails_agree(
            v6 in any::<bool>(),
            vlan in 0u8..3,
            proto in proptest::sample::select(vec![6u8, 17, 1, 58, 47, 0, 44, 59, 99]),
            tail in proptest::collection::vec(any::<u8>(), 0..120),
        ) {
            let mut b = FrameBuilder::new(
                if v6 { Ip::v6([1; 16], [2; 16]) } else { Ip::v4([1; 4], [2; 4]) },
                L4::Raw(99),
            );
            for v in 0..vlan {
                b = b.vlan(u16::from(v) + 1);
            }
            let mut f = b.build(&[]);
            let ip_end = f.len();
            f.extend_from_slice(&tail);
            // Make the IP length cover the tail.
            let l3 = ip_end - if v6 { 40 } else { 20 };
            // And carry `proto` (the builder refuses extension header numbers).
            if v6 {
                let n = u16::try_from(tail.len()).unwrap();
                f[l3 + 4..l3 + 6].copy_from_slice(&n.to_be_bytes());
                f[l3 + 6] = proto;
            } else {
                let n = u16::try_from(tail.len() + 20).unwrap();
                f[l3 + 2..l3 + 4].copy_from_slice(&n.to_be_bytes());
                f[l3 + 9] = proto;
            }
            for c in configs() {
                same(&c, &f);
            }
        }
    }
}
