use super::*;
use etherparse::icmpv6::{Icmpv6PayloadSlice, NdpOptionSlice, NdpOptionsIterator};
use etherparse::{Icmpv6Slice, Icmpv6Type};
use proptest::prelude::*;

fn flags() -> impl Strategy<Value = NeighborAdvertisementHeader> {
    any::<(bool, bool, bool)>().prop_map(|(router, solicited, r#override)| {
        NeighborAdvertisementHeader {
            router,
            solicited,
            r#override,
        }
    })
}

proptest! {
    #[test]
    fn builders_match_etherparse(
        src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), target in any::<[u8; 16]>(),
        mac in proptest::option::of(any::<[u8; 6]>()), f in flags(), solicit in any::<bool>(),
    ) {
        let ip = Addrs { src: &src, dst: &dst };
        let mut buf = [0u8; 40];
        let n = if solicit {
            emit_neighbor_solicitation(&mut buf, ip, &target, mac).unwrap()
        } else {
            emit_neighbor_advertisement(&mut buf, ip, &target, f, mac).unwrap()
        };
        prop_assert_eq!(n, NEIGHBOR_LEN + if mac.is_some() { 8 } else { 0 });

        // Ours.
        let p = Neighbor::new_checked(&buf[..n]).unwrap();
        prop_assert_eq!(p.is_solicitation(), solicit);
        prop_assert_eq!(p.target_addr(), target);
        prop_assert!(p.verify_checksum(&src, &dst));
        let want_flags = if solicit { NeighborAdvertisementHeader { router: false, solicited: false, r#override: false } } else { f };
        prop_assert_eq!(p.na_flags(), want_flags);
        prop_assert_eq!((p.router_flag(), p.solicited_flag(), p.override_flag()), (want_flags.router, want_flags.solicited, want_flags.r#override));
        prop_assert_eq!(if solicit { p.source_lladdr() } else { p.target_lladdr() }, mac);
        prop_assert_eq!(if solicit { p.target_lladdr() } else { p.source_lladdr() }, None);

        // etherparse's.
        let s = Icmpv6Slice::from_slice(&buf[..n]).unwrap();
        prop_assert!(s.is_checksum_valid(src, dst));
        prop_assert_eq!(p.as_icmp().header(), s.header());
        let (t, opts) = match s.payload_slice().unwrap() {
            Icmpv6PayloadSlice::NeighborSolicitation(x) => (x.target_address(), x.options()),
            Icmpv6PayloadSlice::NeighborAdvertisement(x) => (x.target_address(), x.options()),
            other => return Err(TestCaseError::fail(format!("{other:?}"))),
        };
        prop_assert_eq!(t.octets(), target);
        if !solicit {
            prop_assert_eq!(s.icmp_type(), Icmpv6Type::NeighborAdvertisement(f));
        }
        let theirs: Vec<Vec<u8>> = NdpOptionsIterator::from_slice(opts)
            .map(|o| match o.unwrap() {
                NdpOptionSlice::SourceLinkLayerAddress(x) => x.link_layer_address().to_vec(),
                NdpOptionSlice::TargetLinkLayerAddress(x) => x.link_layer_address().to_vec(),
                other => panic!("{other:?}"),
            })
            .collect();
        prop_assert_eq!(theirs, mac.map(|m| m.to_vec()).into_iter().collect::<Vec<_>>());

        // Setters rebuild it from zero.
        let mut out = [0u8; 40];
        out[0] = buf[0];
        let mut q = Neighbor::new_unchecked(&mut out[..n]);
        q.set_target_addr(&target);
        if !solicit {
            q.set_na_flags(f);
        }
        q.options_mut().copy_from_slice(&buf[NEIGHBOR_LEN..n]);
        q.fill_checksum(&src, &dst);
        prop_assert_eq!(&out[..n], &buf[..n]);

        // Every truncation is a typed error, counted from the message start.
        for cut in 0..n {
            if cut == NEIGHBOR_LEN {
                // Options are optional: the bare message is whole.
                prop_assert!(Neighbor::new_checked(&buf[..cut]).is_ok());
                continue;
            }
            let want = if cut < HEADER_LEN {
                HEADER_LEN
            } else if cut < NEIGHBOR_LEN {
                NEIGHBOR_LEN
            } else if cut == NEIGHBOR_LEN + 1 {
                NEIGHBOR_LEN + 2
            } else {
                n
            };
            prop_assert_eq!(
                Neighbor::new_checked(&buf[..cut]).unwrap_err(),
                Error::truncated(Layer::Icmpv6, want, cut)
            );
        }
    }

    #[test]
    fn arbitrary_options_never_panic_and_agree_with_etherparse(
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let ours: Vec<_> = options(&bytes).collect();
        if let Some(i) = ours.iter().position(|r| r.is_err()) {
            prop_assert_eq!(i, ours.len() - 1);
        }
        // Where both accept a link-layer option, they read the same address.
        for (o, t) in ours.iter().zip(NdpOptionsIterator::from_slice(&bytes)) {
            match (o, t) {
                (Ok(o), Ok(NdpOptionSlice::SourceLinkLayerAddress(x))) => {
                    prop_assert_eq!(o.kind, 1);
                    prop_assert_eq!(o.data, x.link_layer_address());
                }
                (Ok(o), Ok(NdpOptionSlice::TargetLinkLayerAddress(x))) => {
                    prop_assert_eq!(o.kind, 2);
                    prop_assert_eq!(o.data, x.link_layer_address());
                }
                (Ok(o), Ok(t)) => prop_assert_eq!(o.kind, t.option_type().0),
                _ => break,
            }
        }
        let mut msg = vec![135, 0, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&[0; 16]);
        msg.extend_from_slice(&bytes);
        if let Ok(p) = Neighbor::new_checked(&msg[..]) {
            let _ = (p.source_lladdr(), p.target_lladdr(), p.na_flags());
        }
    }
}

#[test]
fn invalid_fields_and_options() {
    let src = [0u8; 16];
    let dst = solicited_node_multicast(&[
        0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0xef,
    ]);
    assert_eq!(
        dst,
        [
            0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xab, 0xcd, 0xef
        ]
    );
    assert_eq!(multicast_mac(&dst), [0x33, 0x33, 0xff, 0xab, 0xcd, 0xef]);
    let ip = Addrs {
        src: &src,
        dst: &dst,
    };
    let mut buf = [0u8; 40];
    let n = emit_neighbor_solicitation(&mut buf, ip, &[1; 16], Some([2; 6])).unwrap();
    let mut b = buf;
    b[0] = 134;
    assert_eq!(
        Neighbor::new_checked(&b[..n]).unwrap_err(),
        Error::invalid(Layer::Icmpv6, "type", 134)
    );
    let mut b = buf;
    b[1] = 1;
    assert_eq!(
        Neighbor::new_checked(&b[..n]).unwrap_err(),
        Error::invalid(Layer::Icmpv6, "code", 1)
    );
    let mut b = buf;
    b[NEIGHBOR_LEN + 1] = 0;
    assert_eq!(
        Neighbor::new_checked(&b[..n]).unwrap_err(),
        Error::invalid(Layer::Icmpv6, "option length", 0)
    );
    let mut b = buf;
    b[NEIGHBOR_LEN + 1] = 2;
    assert_eq!(
        Neighbor::new_checked(&b[..n]).unwrap_err(),
        Error::truncated(Layer::Icmpv6, NEIGHBOR_LEN + 16, n)
    );
    // Standalone iteration counts from the slice start.
    assert_eq!(
        options(&[1, 2, 0, 0]).next(),
        Some(Err(Error::truncated(Layer::Icmpv6, 16, 4)))
    );
    assert_eq!(
        options(&[1]).next(),
        Some(Err(Error::truncated(Layer::Icmpv6, 2, 1)))
    );
    // An unknown option is skipped; a solicitation's flags read as false.
    let mut with_unknown = buf[..NEIGHBOR_LEN].to_vec();
    with_unknown.extend_from_slice(&[9, 1, 0, 0, 0, 0, 0, 0]);
    with_unknown.extend_from_slice(&buf[NEIGHBOR_LEN..n]);
    with_unknown[4] = 0xe0;
    let p = Neighbor::new_checked(&with_unknown[..]).unwrap();
    assert_eq!(p.source_lladdr(), Some([2; 6]));
    assert!(!p.router_flag() && !p.solicited_flag() && !p.override_flag());
    assert_eq!(p.options_iter().count(), 2);
    assert_eq!(
        NdpOption {
            kind: 3,
            data: &[0; 30]
        }
        .lladdr(),
        None
    );
    assert_eq!(
        emit_neighbor_solicitation(&mut buf[..31], ip, &[1; 16], Some([2; 6])),
        Err(Error::BufferTooSmall {
            layer: Layer::Icmpv6,
            need: 32,
            have: 31
        })
    );
}
