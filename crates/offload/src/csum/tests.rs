use super::*;
use crate::meta::{Gso, GsoType};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use proptest::prelude::*;

fn v4(n: u8) -> Ip {
    Ip::v4([10, n, 0, 1], [10, n, 0, 2])
}

fn v6(n: u8) -> Ip {
    Ip::v6([n; 16], [n + 1; 16])
}

fn partial_meta(frame: &mut [u8]) -> OffloadMeta {
    let l = layout::parse(frame).unwrap();
    OffloadMeta {
        csum: prepare_partial(frame, &l).unwrap(),
        ..OffloadMeta::plain()
    }
}

/// The checksum field at `at`.
fn field(frame: &[u8], at: usize) -> u16 {
    be16(frame, at).unwrap()
}

#[test]
fn complete_restores_what_the_builder_computed() {
    for (ip, l4, at) in [
        (v4(1), L4::tcp(1, 2), 14 + 20 + 16),
        (v6(1), L4::tcp(1, 2), 14 + 40 + 16),
        (v4(1), L4::udp(1, 2), 14 + 20 + 6),
        (v6(1), L4::udp(1, 2), 14 + 40 + 6),
    ] {
        let built = FrameBuilder::new(ip, l4).build(b"odd length payload!");
        let mut frame = built.clone();
        let m = partial_meta(&mut frame);
        assert_ne!(field(&frame, at), field(&built, at));
        assert_eq!(complete(&mut frame, &m).unwrap(), Checksum::None);
        assert_eq!(frame, built);
    }
}

#[test]
fn partial_checksum_ends_at_the_ip_packet_not_the_padding() {
    let mut frame = FrameBuilder::new(v4(1), L4::udp(1, 2)).build(b"hi");
    let good = frame.clone();
    frame.resize(60, 0xee); // Ethernet padding
    let m = partial_meta(&mut frame);
    complete(&mut frame, &m).unwrap();
    assert_eq!(frame[..good.len()], good[..]);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(verify(&frame, &l), verify(&good, &l));
    assert!(verify(&frame, &l).ok());
}

#[test]
fn tunnel_outer_checksums_follow_the_meta() {
    let mut frame = FrameBuilder::new(v6(1), L4::tcp(1, 2))
        .vxlan(9, v4(2))
        .outer_udp_checksum(true)
        .build(&[5; 999]);
    let built = frame.clone();
    let outer_at = 14 + 20 + 6;
    let mut m = partial_meta(&mut frame);
    assert_eq!(
        m.csum,
        Checksum::Partial {
            start: 14 + 20 + 8 + 8 + 14 + 40,
            offset: 16
        }
    );
    // Without a tunnel in the meta, the outer checksum is left alone.
    frame[outer_at] ^= 0x55;
    let mut f = frame.clone();
    complete(&mut f, &m).unwrap();
    assert_ne!(f, built);
    // With "outer checksum" in the GSO request, or forced by the options, it is redone.
    let mut g = Gso::new(GsoType::TcpV6, 1000);
    g.tunnel = GsoTunnel::Udp { outer_csum: true };
    m.gso = Some(g);
    let mut f = frame.clone();
    complete(&mut f, &m).unwrap();
    assert_eq!(f, built);
    m.gso = None;
    let mut f = frame.clone();
    let opts = CompleteOptions {
        outer: true,
        ..Default::default()
    };
    complete_with(&mut f, &m, opts).unwrap();
    assert_eq!(f, built);
    let l = layout::parse(&f).unwrap();
    assert_eq!(verify(&f, &l).levels, 2);
}

#[test]
fn gre_checksum_and_ipv4_headers_are_recomputed_when_asked() {
    // NVGRE with C: insert the checksum word the builder does not make.
    let mut frame = FrameBuilder::new(v4(1), L4::udp(1, 2))
        .nvgre(9, 3, v4(2))
        .build(&[1; 333]);
    let l4 = 14 + 20;
    frame.splice(l4 + 4..l4 + 4, [0u8; 4]);
    frame[l4] |= 0x80;
    let total = field(&frame, 16) + 4;
    put16(&mut frame, 16, total);
    let m = partial_meta(&mut frame);
    let mut g = Gso::new(GsoType::UdpL4, 100);
    g.tunnel = GsoTunnel::Gre { csum: true };
    let m = OffloadMeta { gso: Some(g), ..m };
    let opts = CompleteOptions {
        ipv4_headers: true,
        ..Default::default()
    };
    complete_with(&mut frame, &m, opts).unwrap();
    let l = layout::parse(&frame).unwrap();
    let v = verify(&frame, &l);
    assert_eq!((v.levels, v.ipv4_headers, v.bad), (2, 2, None));
    // Break the GRE checksum: verify names it.
    frame[l4 + 4] ^= 1;
    let v = verify(&frame, &l);
    assert_eq!(
        v.bad,
        Some(BadChecksum {
            layer: Layer::Gre,
            inner: false
        })
    );
    assert_eq!(v.levels, 0);
}

#[test]
fn bad_partial_offsets_are_errors() {
    let mut frame = FrameBuilder::new(v4(1), L4::tcp(1, 2)).build(b"x");
    let l = layout::parse(&frame).unwrap();
    let len = frame.len();
    for (start, offset) in [(len as u16, 0), (40, 100), (u16::MAX, u16::MAX)] {
        let m = OffloadMeta {
            csum: Checksum::Partial { start, offset },
            ..OffloadMeta::plain()
        };
        assert!(matches!(
            complete(&mut frame, &m),
            Err(CsumError::OutOfFrame { .. })
        ));
        assert!(matches!(
            complete_layout(&mut frame, &l, &m, CompleteOptions::default()),
            Err(CsumError::OutOfFrame { .. })
        ));
    }
    // A frame that does not parse.
    let m = OffloadMeta {
        csum: Checksum::Partial {
            start: 0,
            offset: 0,
        },
        ..OffloadMeta::plain()
    };
    assert!(matches!(
        complete(&mut frame[..20], &m),
        Err(CsumError::Layout(_))
    ));
}

#[test]
fn prepare_partial_needs_tcp_or_udp() {
    let mut frame = FrameBuilder::new(
        v4(1),
        L4::Icmpv4(etherparse::Icmpv4Type::EchoRequest(
            etherparse::IcmpEchoHeader { id: 1, seq: 2 },
        )),
    )
    .build(b"ping");
    let l = layout::parse(&frame).unwrap();
    assert_eq!(prepare_partial(&mut frame, &l), Err(CsumError::NoTransport));
}

#[test]
fn verify_counts_levels_and_names_the_bad_one() {
    // VXLAN over IPv4 without outer checksum: only the inner TCP counts.
    let frame = FrameBuilder::new(v4(1), L4::tcp(1, 2))
        .vxlan(9, v4(2))
        .build(&[3; 100]);
    let l = layout::parse(&frame).unwrap();
    assert_eq!(
        verify(&frame, &l),
        Verdict {
            levels: 1,
            ipv4_headers: 2,
            bad: None
        }
    );
    let mut bad = frame.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(
        verify(&bad, &l).bad,
        Some(BadChecksum {
            layer: Layer::Tcp,
            inner: true
        })
    );
    let mut bad = frame.clone();
    bad[14 + 8] ^= 1; // outer TTL
    let v = verify(&bad, &l);
    assert_eq!(
        (v.bad, v.ipv4_headers),
        (
            Some(BadChecksum {
                layer: Layer::Ipv4,
                inner: false
            }),
            0
        )
    );

    // Plain UDP over IPv6 must carry a checksum (RFC 8200 8.1); in a tunnel it may not.
    let mut udp6 = FrameBuilder::new(v6(1), L4::udp(1, 2)).build(b"data");
    put16(&mut udp6, 14 + 40 + 6, 0);
    let l = layout::parse(&udp6).unwrap();
    assert_eq!(
        verify(&udp6, &l).bad,
        Some(BadChecksum {
            layer: Layer::Udp,
            inner: false
        })
    );
    let tun6 = FrameBuilder::new(v4(1), L4::udp(1, 2))
        .vxlan(9, v6(2))
        .build(b"data");
    let l = layout::parse(&tun6).unwrap();
    assert_eq!(
        verify(&tun6, &l),
        Verdict {
            levels: 1,
            ipv4_headers: 1,
            bad: None
        }
    );
}

#[test]
fn marking_records_clean_verdicts_only() {
    let frame = FrameBuilder::new(v4(1), L4::tcp(1, 2))
        .vxlan(9, v4(2))
        .outer_udp_checksum(true)
        .build(&[3; 100]);
    let mut m = OffloadMeta::plain();
    let v = verify_meta(&frame, &mut m).unwrap();
    assert_eq!(v.levels, 2);
    assert_eq!(m.csum, Checksum::Verified { levels: 2 });

    let mut bad = frame.clone();
    *bad.last_mut().unwrap() ^= 1;
    let mut m = OffloadMeta::plain();
    assert!(!verify_meta(&bad, &mut m).unwrap().ok());
    assert_eq!(m.csum, Checksum::None);

    // Partial frames are local: nothing to mark.
    let mut m = OffloadMeta {
        csum: Checksum::Partial {
            start: 1,
            offset: 2,
        },
        ..OffloadMeta::plain()
    };
    assert!(!mark_verified(&mut m, &v));
    // Never fewer levels than already known.
    let mut m = OffloadMeta {
        csum: Checksum::Verified { levels: 3 },
        ..OffloadMeta::plain()
    };
    assert!(mark_verified(&mut m, &v));
    assert_eq!(m.csum, Checksum::Verified { levels: 3 });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// prepare_partial then complete gives back the builder's checksums, for any
    /// payload, IP versions, transport and tunnel.
    #[test]
    fn prepare_then_complete_round_trips(
        payload in proptest::collection::vec(any::<u8>(), 0..3000),
        inner6 in any::<bool>(), outer6 in any::<bool>(), udp in any::<bool>(),
        tunnel in 0u8..4,
    ) {
        let ip = if inner6 { v6(1) } else { v4(1) };
        let l4 = if udp { L4::udp(7, 8) } else { L4::tcp(7, 8) };
        let outer = if outer6 { v6(3) } else { v4(3) };
        let b = FrameBuilder::new(ip, l4);
        let b = match tunnel {
            0 => b,
            1 => b.vxlan(1, outer),
            2 => b.geneve(1, &[], outer),
            _ => b.nvgre(1, 1, outer),
        };
        let built = b.build(&payload);
        let mut frame = built.clone();
        let m = partial_meta(&mut frame);
        complete(&mut frame, &m).unwrap();
        // Equal, except that a zero UDP/TCP checksum may come back as 0xffff.
        let l = layout::parse(&frame).unwrap();
        let at = usize::from(l.innermost().l4_offset) + if udp { 6 } else { 16 };
        let (a, b) = (field(&frame, at), field(&built, at));
        prop_assert!(a == b || (a, b) == (0xffff, 0));
        prop_assert!(verify(&frame, &l).ok());
    }
}
