//! The classifier against the naive in-order scan (same verdicts, same counters),
//! the fields it extracts against etherparse's reading, and the range cover.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use linerate_vnic::filter::{
    Action, FilterError, Filters, FlowKey, IpPrefix, Level, Match, PortRange, Rule, Side, Verdict,
    naive,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use proptest::prelude::*;

const MACS: [[u8; 6]; 4] = [
    [2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2],
    [0xff; 6],
    [0x01, 0x00, 0x5e, 0, 0, 1],
];
const V4: [[u8; 4]; 4] = [
    [10, 0, 0, 1],
    [10, 0, 1, 2],
    [10, 1, 0, 3],
    [192, 168, 7, 9],
];
const VNIS: [u32; 3] = [100, 200, 0xfffffe];

fn v6(i: usize) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[0] = 0x20;
    a[1] = 0x01;
    a[2] = 0x0d;
    a[3] = 0xb8;
    a[8] = i as u8;
    a[15] = 1 + i as u8;
    a
}

/// A frame to classify.
#[derive(Debug, Clone)]
struct Spec {
    macs: (usize, usize),
    vlan: Option<u16>,
    v6: bool,
    ips: (usize, usize),
    l4: u8,
    ports: (u16, u16),
    flags: u8,
    tunnel: Option<(u8, usize, Option<u16>)>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (0..4usize, 0..4usize),
        prop_oneof![Just(None), Just(Some(10u16)), Just(Some(20))],
        any::<bool>(),
        (0..4usize, 0..4usize),
        0..4u8,
        (0..64u16, 0..64u16),
        any::<u8>(),
        prop_oneof![
            2 => Just(None),
            1 => (0..3u8, 0..3usize, prop_oneof![Just(None), Just(Some(30u16))]).prop_map(Some),
        ],
    )
        .prop_map(|(macs, vlan, v6, ips, l4, ports, flags, tunnel)| Spec {
            macs,
            vlan,
            v6,
            ips,
            l4,
            ports: (ports.0 * 1000 + 7, ports.1 * 1000 + 3),
            flags,
            tunnel,
        })
}

fn build(s: &Spec) -> Vec<u8> {
    let ip = if s.v6 {
        Ip::v6(v6(s.ips.0), v6(s.ips.1))
    } else {
        Ip::v4(V4[s.ips.0], V4[s.ips.1])
    };
    let l4 = match s.l4 {
        0 => {
            let L4::Tcp(mut h) = L4::tcp(s.ports.0, s.ports.1) else {
                unreachable!()
            };
            h.fin = s.flags & 1 != 0;
            h.syn = s.flags & 2 != 0;
            h.rst = s.flags & 4 != 0;
            h.ack = s.flags & 16 != 0;
            L4::Tcp(h)
        }
        1 => L4::udp(s.ports.0, s.ports.1),
        2 => L4::Raw(132),
        _ => L4::Raw(47),
    };
    let mut b = FrameBuilder::new(ip, l4).macs(MACS[s.macs.0], MACS[s.macs.1]);
    if let Some(v) = s.vlan {
        b = b.vlan(v);
    }
    if let Some((kind, vni, outer_vlan)) = s.tunnel {
        let outer = Ip::v4([172, 16, 0, 1], [172, 16, 0, 2]);
        b = match kind {
            0 => b.vxlan(VNIS[vni], outer),
            1 => b.geneve(VNIS[vni], &[], outer),
            _ => b.nvgre(VNIS[vni], 0, outer),
        };
        b = b.macs(MACS[1], MACS[0]);
        if let Some(v) = outer_vlan {
            b = b.vlan(v);
        }
    }
    // SCTP's ports, then anything.
    let mut payload = s.ports.0.to_be_bytes().to_vec();
    payload.extend_from_slice(&s.ports.1.to_be_bytes());
    payload.extend_from_slice(&[0; 12]);
    b.build(&payload)
}

fn prefix() -> impl Strategy<Value = IpPrefix> {
    prop_oneof![
        (0..4usize, 0..=32u8).prop_map(|(i, len)| IpPrefix {
            addr: IpAddr::V4(Ipv4Addr::from(V4[i])),
            len
        }),
        (0..4usize, 0..=128u8).prop_map(|(i, len)| IpPrefix {
            addr: IpAddr::V6(Ipv6Addr::from(v6(i))),
            len
        }),
    ]
}

fn range() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        (0..64u16).prop_map(|p| PortRange {
            lo: p * 1000 + 7,
            hi: p * 1000 + 7
        }),
        (0..65535u16, 0..20000u16).prop_map(|(lo, w)| PortRange {
            lo,
            hi: lo.saturating_add(w)
        }),
        Just(PortRange { lo: 0, hi: 65535 }),
    ]
}

fn rule() -> impl Strategy<Value = Rule> {
    let l2 = (
        any::<bool>(),
        proptest::option::weighted(0.2, 0..4usize),
        proptest::option::weighted(0.2, 0..4usize),
        proptest::option::weighted(0.2, prop_oneof![Just(10u16), Just(20), Just(30)]),
        proptest::option::weighted(0.2, prop_oneof![Just(0x0800u16), Just(0x86dd)]),
    );
    let l3 = (
        proptest::option::weighted(0.3, prefix()),
        proptest::option::weighted(0.3, prefix()),
        proptest::option::weighted(0.3, prop_oneof![Just(6u8), Just(17), Just(132), Just(47)]),
        proptest::option::weighted(0.3, range()),
        proptest::option::weighted(0.3, range()),
        proptest::option::weighted(0.15, (any::<u8>(), any::<u8>())),
        proptest::option::weighted(0.2, 0..3usize),
    );
    let action = prop_oneof![
        Just(Action::Allow),
        Just(Action::Drop),
        Just(Action::Count),
        (0..4u16).prop_map(Action::Steer),
    ];
    (l2, l3, action).prop_map(
        |((inner, dm, sm, vlan, et), (sip, dip, proto, sp, dp, fl, vni), action)| Rule {
            when: Match {
                level: if inner { Level::Inner } else { Level::Outer },
                dst_mac: dm.map(|i| MACS[i]),
                src_mac: sm.map(|i| MACS[i]),
                vlan,
                ethertype: et,
                src_ip: sip,
                dst_ip: dip,
                proto,
                src_port: sp,
                dst_port: dp,
                tcp_flags: fl,
                vni: vni.map(|i| VNIS[i]),
            },
            action,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Random rule sets against random frames: every verdict and every rule's
    /// hit count as the in-order scan has them.
    #[test]
    fn classifier_agrees_with_the_scan(
        rules in proptest::collection::vec(rule(), 0..60),
        frames in proptest::collection::vec(spec(), 1..60),
        access_vlan in proptest::option::of(prop_oneof![Just(10u16), Just(30)]),
    ) {
        let mut f = Filters::new(rules.clone()).expect("valid rules");
        let mut hits = vec![0u64; rules.len()];
        let mut keys = Vec::new();
        let mut want = Vec::new();
        for s in &frames {
            let mut key = FlowKey::extract(&build(s));
            if let (Some(v), None) = (access_vlan, s.vlan) {
                key.set_vlan(v);
            }
            want.push(naive::scan(&rules, &key, &mut hits));
            prop_assert_eq!(f.classify(&key), want[want.len() - 1], "frame {:?}", s);
            keys.push(key);
        }
        prop_assert_eq!(f.hits(), &hits[..]);
        // The batch path: the same verdicts, the same counts again.
        let mut batch = Filters::new(rules.clone()).expect("valid rules");
        let mut got = vec![Verdict::Allow; keys.len()];
        batch.classify_batch(&keys, &mut got);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(batch.hits(), &hits[..]);
    }

    /// Many rules alike but for their port ranges (kept as lists under one entry
    /// when few, expanded to prefixes when many): the scan's verdicts and counts.
    #[test]
    fn ranged_rules_agree_with_the_scan(
        ranges in proptest::collection::vec(
            (range(), proptest::option::of(range()), any::<bool>(), prop_oneof![Just(Action::Drop), Just(Action::Count), Just(Action::Steer(2))]),
            0..40,
        ),
        frames in proptest::collection::vec(spec(), 1..40),
    ) {
        let rules: Vec<Rule> = ranges
            .iter()
            .map(|&(d, s, udp, action)| Rule {
                when: Match { proto: udp.then_some(17), dst_port: Some(d), src_port: s, ..Match::default() },
                action,
            })
            .collect();
        let mut f = Filters::new(rules.clone()).expect("valid rules");
        let mut hits = vec![0u64; rules.len()];
        for s in &frames {
            let key = FlowKey::extract(&build(s));
            let want = naive::scan(&rules, &key, &mut hits);
            prop_assert_eq!(f.classify(&key), want, "frame {:?}", s);
        }
        prop_assert_eq!(f.hits(), &hits[..]);
    }

    /// The fields as etherparse reads the frame (outer and inner).
    #[test]
    fn fields_are_etherparse_s(s in spec()) {
        let frame = build(&s);
        let key = FlowKey::extract(&frame);
        let outer = key.outer();
        check_fields(&frame, &outer)?;
        match s.tunnel {
            Some((_, vni, _)) => {
                prop_assert_eq!(outer.vni, Some(VNIS[vni]));
                let inner = key.inner().expect("inner level");
                prop_assert_eq!(inner.vni, Some(VNIS[vni]));
                let p = SlicedPacket::from_ethernet(&frame).expect("outer");
                let start = frame.len() - inner_len(&s);
                let _ = p;
                check_fields(&frame[start..], &inner)?;
            }
            None => {
                prop_assert!(key.inner().is_none());
                prop_assert_eq!(outer.vni, None);
            }
        }
    }
}

/// Length of the inner Ethernet frame (the same spec built without the tunnel).
fn inner_len(s: &Spec) -> usize {
    build(&Spec {
        tunnel: None,
        ..s.clone()
    })
    .len()
}

fn check_fields(frame: &[u8], f: &linerate_vnic::filter::Fields) -> Result<(), TestCaseError> {
    let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses");
    let eth = match &p.link {
        Some(etherparse::LinkSlice::Ethernet2(e)) => e,
        _ => return Err(TestCaseError::fail("no ethernet")),
    };
    prop_assert_eq!(f.dst_mac, eth.destination());
    prop_assert_eq!(f.src_mac, eth.source());
    let vid = p.vlan().map(|v| match v.to_header() {
        etherparse::VlanHeader::Single(h) => h.vlan_id.value(),
        etherparse::VlanHeader::Double(h) => h.outer.vlan_id.value(),
    });
    prop_assert_eq!(f.vlan, vid);
    let (src, dst, proto) = match &p.net {
        Some(NetSlice::Ipv4(i)) => (
            IpAddr::V4(i.header().source_addr()),
            IpAddr::V4(i.header().destination_addr()),
            i.header().protocol().0,
        ),
        Some(NetSlice::Ipv6(i)) => (
            IpAddr::V6(i.header().source_addr()),
            IpAddr::V6(i.header().destination_addr()),
            i.payload().ip_number.0,
        ),
        _ => return Err(TestCaseError::fail("no IP")),
    };
    prop_assert_eq!(f.src_ip, Some(src));
    prop_assert_eq!(f.dst_ip, Some(dst));
    prop_assert_eq!(f.proto, Some(proto));
    match &p.transport {
        Some(TransportSlice::Tcp(t)) => {
            prop_assert_eq!(f.src_port, Some(t.source_port()));
            prop_assert_eq!(f.dst_port, Some(t.destination_port()));
            prop_assert_eq!(f.tcp_flags, Some(t.slice()[13]));
        }
        Some(TransportSlice::Udp(u)) => {
            prop_assert_eq!(f.src_port, Some(u.source_port()));
            prop_assert_eq!(f.dst_port, Some(u.destination_port()));
            prop_assert_eq!(f.tcp_flags, None);
        }
        _ if proto == 132 => {
            let payload = match &p.net {
                Some(NetSlice::Ipv4(i)) => i.payload().payload,
                Some(NetSlice::Ipv6(i)) => i.payload().payload,
                _ => &[],
            };
            prop_assert_eq!(
                f.src_port,
                Some(u16::from_be_bytes([payload[0], payload[1]]))
            );
            prop_assert_eq!(
                f.dst_port,
                Some(u16::from_be_bytes([payload[2], payload[3]]))
            );
        }
        _ => {
            prop_assert_eq!(f.src_port, None);
            prop_assert_eq!(f.tcp_flags, None);
        }
    }
    Ok(())
}

/// Rules that would match if the classifier ignored a field: one frame, each rule
/// off by one field, none must match; the same rule exact must.
#[test]
fn each_field_is_compared() {
    let s = Spec {
        macs: (0, 1),
        vlan: Some(10),
        v6: false,
        ips: (0, 3),
        l4: 0,
        ports: (1007, 2003),
        flags: 2,
        tunnel: None,
    };
    let key = FlowKey::extract(&build(&s));
    let exact = Match {
        dst_mac: Some(MACS[1]),
        src_mac: Some(MACS[0]),
        vlan: Some(10),
        ethertype: Some(0x0800),
        src_ip: Some(IpPrefix {
            addr: IpAddr::V4(Ipv4Addr::from(V4[0])),
            len: 32,
        }),
        dst_ip: Some(IpPrefix {
            addr: IpAddr::V4(Ipv4Addr::from(V4[3])),
            len: 24,
        }),
        proto: Some(6),
        src_port: Some(PortRange { lo: 1000, hi: 1010 }),
        dst_port: Some(PortRange { lo: 2003, hi: 2003 }),
        tcp_flags: Some((2, 0x12)),
        ..Match::default()
    };
    let off: Vec<Match> = vec![
        Match {
            dst_mac: Some(MACS[2]),
            ..exact
        },
        Match {
            src_mac: Some(MACS[2]),
            ..exact
        },
        Match {
            vlan: Some(11),
            ..exact
        },
        Match {
            ethertype: Some(0x86dd),
            ..exact
        },
        Match {
            src_ip: Some(IpPrefix {
                addr: IpAddr::V4(Ipv4Addr::from(V4[1])),
                len: 24,
            }),
            ..exact
        },
        Match {
            dst_ip: Some(IpPrefix {
                addr: IpAddr::V4(Ipv4Addr::from(V4[0])),
                len: 8,
            }),
            ..exact
        },
        Match {
            proto: Some(17),
            ..exact
        },
        Match {
            src_port: Some(PortRange { lo: 1008, hi: 9000 }),
            ..exact
        },
        Match {
            dst_port: Some(PortRange { lo: 0, hi: 2002 }),
            ..exact
        },
        Match {
            tcp_flags: Some((0x12, 0x12)),
            ..exact
        },
        Match {
            vni: Some(100),
            ..exact
        },
        Match {
            level: Level::Inner,
            ..exact
        },
    ];
    for m in off {
        let mut f = Filters::new(vec![Rule {
            when: m,
            action: Action::Drop,
        }])
        .expect("valid");
        assert_eq!(f.classify(&key), Verdict::Allow, "{m:?}");
    }
    let mut f = Filters::new(vec![Rule {
        when: exact,
        action: Action::Drop,
    }])
    .expect("valid");
    assert_eq!(f.classify(&key), Verdict::Drop);
}

/// Ranges become prefixes whose union is the range, disjoint, at most 30.
#[test]
fn a_range_is_covered_exactly() {
    let probe = |lo: u16, hi: u16| {
        let rule = Rule {
            when: Match {
                proto: Some(17),
                dst_port: Some(PortRange { lo, hi }),
                ..Match::default()
            },
            action: Action::Drop,
        };
        let mut f = Filters::new(vec![rule]).expect("valid");
        assert!(f.entries() <= 30, "{lo}-{hi}: {} entries", f.entries());
        for p in [
            0,
            1,
            lo.saturating_sub(1),
            lo,
            lo.saturating_add(1),
            hi.saturating_sub(1),
            hi,
            hi.saturating_add(1),
            65535,
        ] {
            let s = Spec {
                macs: (0, 1),
                vlan: None,
                v6: false,
                ips: (0, 1),
                l4: 1,
                ports: (9, p),
                flags: 0,
                tunnel: None,
            };
            let want = if (lo..=hi).contains(&p) {
                Verdict::Drop
            } else {
                Verdict::Allow
            };
            assert_eq!(
                f.classify(&FlowKey::extract(&build(&s))),
                want,
                "{lo}-{hi} port {p}"
            );
        }
    };
    for (lo, hi) in [
        (0, 65535),
        (1, 65534),
        (1024, 65535),
        (0, 0),
        (65535, 65535),
        (3, 4),
        (1000, 1999),
        (8000, 8080),
    ] {
        probe(lo, hi);
    }
}

/// Rules the classifier cannot honour are refused with a typed reason naming
/// the rule and the value at fault.
#[test]
fn bad_rules_are_refused() {
    let long4 = IpPrefix {
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        len: 33,
    };
    let long6 = IpPrefix {
        addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
        len: 129,
    };
    let empty = PortRange { lo: 9, hi: 8 };
    let bad = [
        (
            Match {
                src_ip: Some(long4),
                ..Match::default()
            },
            FilterError::PrefixTooLong {
                rule: 1,
                side: Side::Source,
                prefix: long4,
            },
        ),
        (
            Match {
                dst_ip: Some(long6),
                ..Match::default()
            },
            FilterError::PrefixTooLong {
                rule: 1,
                side: Side::Destination,
                prefix: long6,
            },
        ),
        (
            Match {
                vlan: Some(4096),
                ..Match::default()
            },
            FilterError::VlanTooLarge { rule: 1, vid: 4096 },
        ),
        (
            Match {
                vni: Some(1 << 24),
                ..Match::default()
            },
            FilterError::VniTooLarge {
                rule: 1,
                vni: 1 << 24,
            },
        ),
        (
            Match {
                dst_port: Some(empty),
                ..Match::default()
            },
            FilterError::EmptyPortRange {
                rule: 1,
                side: Side::Destination,
                range: empty,
            },
        ),
    ];
    for (m, want) in bad {
        let r = Filters::new(vec![
            Rule {
                when: Match::default(),
                action: Action::Count,
            },
            Rule {
                when: m,
                action: Action::Drop,
            },
        ]);
        let e = r.expect_err("refused");
        assert_eq!(e, want);
        // The message names the rule and says what to use instead.
        let text = e.to_string();
        assert!(
            text.starts_with("rule 1:") && text.contains("use"),
            "{text}"
        );
    }
}

/// Malformed and short frames classify on what they have, without panicking.
#[test]
fn broken_frames_classify() {
    let mut f = Filters::new(vec![
        Rule {
            when: Match {
                proto: Some(6),
                ..Match::default()
            },
            action: Action::Drop,
        },
        Rule {
            when: Match {
                src_mac: Some(MACS[0]),
                ..Match::default()
            },
            action: Action::Steer(1),
        },
    ])
    .expect("valid");
    let good = build(&Spec {
        macs: (0, 1),
        vlan: None,
        v6: false,
        ips: (0, 1),
        l4: 0,
        ports: (1, 2),
        flags: 0,
        tunnel: None,
    });
    for cut in 0..good.len() {
        let v = f.classify_frame(&good[..cut]);
        if cut >= 14 && v != Verdict::Drop {
            // Cut inside IP or TCP: the L2 rule still applies.
            assert_eq!(v, Verdict::Steer(1), "cut at {cut}");
        }
    }
    assert_eq!(f.classify_frame(&good), Verdict::Drop);
}
