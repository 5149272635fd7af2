use super::*;
use etherparse::{IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv4Options};
use proptest::prelude::*;

prop_compose! {
    /// An IPv4 header etherparse builds, with its checksum and total length
    /// filled in, fragment offsets from `offs` and option words from `words`.
    pub(super) fn header_from(offs: BoxedStrategy<u16>, words: BoxedStrategy<usize>)(
        dscp in 0u8..64, ecn in 0u8..4, ident in any::<u16>(), df in any::<bool>(),
        mf in any::<bool>(), off in offs, ttl in any::<u8>(), proto in any::<u8>(),
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        opt_words in words, opt_seed in any::<[u8; 40]>(), payload_len in 0u16..64,
    ) -> Ipv4Header {
        let mut h = Ipv4Header {
            dscp: IpDscp::try_new(dscp).unwrap(),
            ecn: IpEcn::try_new(ecn).unwrap(),
            total_len: 0,
            identification: ident,
            dont_fragment: df,
            more_fragments: mf,
            fragment_offset: IpFragOffset::try_new(off).unwrap(),
            time_to_live: ttl,
            protocol: IpNumber(proto),
            header_checksum: 0,
            source: src,
            destination: dst,
            options: Ipv4Options::try_from(&opt_seed[..opt_words * 4]).unwrap(),
        };
        h.total_len = h.header_len() as u16 + payload_len;
        h.header_checksum = h.calc_header_checksum();
        h
    }
}

/// Any header: offsets and option lengths uniform.
fn header() -> impl Strategy<Value = Ipv4Header> {
    header_from((0u16..8192).boxed(), (0usize..=10).boxed())
}

fn datagram(h: &Ipv4Header, pad: usize) -> Vec<u8> {
    let mut buf = h.to_bytes().to_vec();
    let payload_len = usize::from(h.total_len) - h.header_len();
    buf.extend((0..payload_len).map(|i| i as u8));
    buf.resize(buf.len() + pad, 0xee);
    buf
}

proptest! {
    /// The in-place sum for a header without options decides as the general
    /// checksum does, for any 20 bytes (valid, corrupted or random).
    #[test]
    fn option_free_checksum_matches_the_general_one(
        mut bytes in proptest::collection::vec(any::<u8>(), 20),
        fix: bool,
    ) {
        bytes[0] = 0x45;
        if fix {
            bytes[10] = 0;
            bytes[11] = 0;
            let c = crate::checksum::checksum(&bytes);
            bytes[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let p = Packet::new_unchecked(&bytes[..]);
        prop_assert_eq!(p.verify_checksum(), crate::checksum::verify(&bytes, 0));
        if fix {
            prop_assert!(p.verify_checksum());
        }
    }

    #[test]
    fn parse_matches_etherparse(h in header(), pad in 0usize..8) {
        let buf = datagram(&h, pad);
        let p = Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.version(), 4);
        prop_assert_eq!(p.ihl(), h.ihl());
        prop_assert_eq!(p.header_len(), h.header_len());
        prop_assert_eq!(p.dscp(), h.dscp.value());
        prop_assert_eq!(p.ecn(), h.ecn.value());
        prop_assert_eq!(p.total_len(), h.total_len);
        prop_assert_eq!(p.ident(), h.identification);
        prop_assert_eq!(p.dont_frag(), h.dont_fragment);
        prop_assert_eq!(p.more_frags(), h.more_fragments);
        prop_assert_eq!(p.frag_offset(), h.fragment_offset.value());
        prop_assert_eq!(p.frag_byte_offset(), h.fragment_offset.byte_offset());
        prop_assert_eq!(p.is_fragment(), h.is_fragmenting_payload());
        prop_assert_eq!(p.ttl(), h.time_to_live);
        prop_assert_eq!(p.protocol(), h.protocol.0);
        prop_assert_eq!(p.checksum(), h.header_checksum);
        prop_assert_eq!(p.src_addr(), h.source);
        prop_assert_eq!(p.dst_addr(), h.destination);
        prop_assert_eq!(p.options(), h.options.as_slice());
        prop_assert_eq!(p.payload(), &buf[h.header_len()..usize::from(h.total_len)]);
        prop_assert!(p.verify_checksum());
        prop_assert_eq!(p.header(), h.clone());
        // etherparse's own slice agrees on the payload bounds (it would
        // parse an authentication header as an extension, so not for AH).
        if h.protocol.0 != protocol::AH {
            let s = etherparse::Ipv4Slice::from_slice(&buf).unwrap();
            prop_assert_eq!(p.payload(), s.payload().payload);
        }
    }

    #[test]
    fn setters_build_what_etherparse_reads(h in header()) {
        let want = datagram(&h, 0);
        let mut out = vec![0u8; want.len()];
        let mut p = Packet::new_unchecked(&mut out[..]);
        p.set_version(4);
        p.set_ihl(h.ihl());
        p.set_dscp(h.dscp.value());
        p.set_ecn(h.ecn.value());
        p.set_total_len(h.total_len);
        p.set_ident(h.identification);
        p.set_dont_frag(h.dont_fragment);
        p.set_more_frags(h.more_fragments);
        p.set_frag_offset(h.fragment_offset.value());
        p.set_ttl(h.time_to_live);
        p.set_protocol(h.protocol.0);
        p.set_src_addr(h.source);
        p.set_dst_addr(h.destination);
        p.options_mut().copy_from_slice(h.options.as_slice());
        p.payload_mut().copy_from_slice(&want[h.header_len()..]);
        p.fill_checksum();
        prop_assert_eq!(p.checksum(), h.calc_header_checksum());
        prop_assert_eq!(&out, &want);
        let (back, _) = Ipv4Header::from_slice(&out).unwrap();
        prop_assert_eq!(back, h.clone());

        let mut out2 = vec![0u8; h.header_len()];
        Packet::new_unchecked(&mut out2[..]).set_header(&h);
        prop_assert_eq!(&out2[..], &want[..h.header_len()]);
        let mut out3 = vec![0u8; h.header_len()];
        prop_assert_eq!(emit(&h, &mut out3), Ok(h.header_len()));
        prop_assert_eq!(&out3, &out2);
        prop_assert_eq!(
            emit(&h, &mut out3[..h.header_len() - 1]),
            Err(Error::BufferTooSmall { layer: Layer::Ipv4, need: h.header_len(), have: h.header_len() - 1 })
        );
    }

    #[test]
    fn every_truncation_is_typed(h in header()) {
        let buf = datagram(&h, 0);
        for n in 0..buf.len() {
            let want = if n < HEADER_LEN {
                HEADER_LEN
            } else if n < h.header_len() {
                h.header_len()
            } else {
                usize::from(h.total_len)
            };
            prop_assert_eq!(
                Packet::new_checked(&buf[..n]).unwrap_err(),
                Error::truncated(Layer::Ipv4, want, n)
            );
        }
    }

    #[test]
    fn decrement_ttl_keeps_checksum(h in header()) {
        let mut buf = datagram(&h, 0);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        let ttl = p.decrement_ttl();
        prop_assert_eq!(ttl, h.time_to_live.saturating_sub(1));
        prop_assert!(p.verify_checksum());
        let mut h2 = h.clone();
        h2.time_to_live = ttl;
        prop_assert_eq!(p.checksum(), h2.calc_header_checksum());
    }

    #[test]
    fn udp_checksum_with_pseudo_header_matches_etherparse(
        src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        payload in proptest::collection::vec(any::<u8>(), 0..40),
    ) {
        let l4_len = 8 + payload.len() as u16;
        let ip = Ipv4Header::new(l4_len, 64, IpNumber::UDP, src, dst).unwrap();
        let udp = etherparse::UdpHeader::with_ipv4_checksum(1, 2, &ip, &payload).unwrap();
        let mut buf = ip.to_bytes().to_vec();
        buf.extend_from_slice(&udp.to_bytes());
        buf.extend_from_slice(&payload);
        let p = Packet::new_checked(&buf[..]).unwrap();
        let pseudo = p.pseudo_header_sum(l4_len);
        prop_assert!(crate::udp::Packet::new_checked(p.payload()).unwrap().verify_checksum(pseudo, false));
    }

    #[test]
    fn no_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = (p.header(), p.options(), p.payload(), p.verify_checksum());
        }
    }
}

#[test]
fn invalid_fields_are_named() {
    let mut h = Ipv4Header::new(4, 64, IpNumber::TCP, [1, 2, 3, 4], [5, 6, 7, 8]).unwrap();
    h.header_checksum = h.calc_header_checksum();
    let good = datagram(&h, 0);
    let mut b = good.clone();
    b[0] = 0x65;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        Error::invalid(Layer::Ipv4, "version", 6)
    );
    let mut b = good.clone();
    b[0] = 0x44;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        Error::invalid(Layer::Ipv4, "ihl", 4)
    );
    let mut b = good.clone();
    b[3] = 19;
    assert_eq!(
        Packet::new_checked(&b[..]).unwrap_err(),
        Error::invalid(Layer::Ipv4, "total_len", 19)
    );
    let mut b = good;
    b[0] = 0x46; // IHL 6: a 24-byte header, cut at 23
    assert_eq!(
        Packet::new_checked(&b[..23]).unwrap_err(),
        Error::truncated(Layer::Ipv4, 24, 23)
    );
}

#[test]
fn reserved_flag_and_fragment_bits_are_independent() {
    let h = Ipv4Header::new(0, 1, IpNumber::UDP, [0; 4], [0; 4]).unwrap();
    let mut buf = datagram(&h, 0);
    let mut p = Packet::new_checked(&mut buf[..]).unwrap();
    p.set_frag_offset(0xffff);
    assert_eq!(p.frag_offset(), 0x1fff);
    assert!(p.dont_frag() && !p.more_frags() && p.is_fragment());
    p.set_dont_frag(false);
    p.set_more_frags(true);
    assert_eq!(
        (p.dont_frag(), p.more_frags(), p.frag_offset()),
        (false, true, 0x1fff)
    );
    p.set_frag_offset(0);
    assert!(p.is_fragment());
    p.set_more_frags(false);
    assert!(!p.is_fragment());
    let mut zero = [0u8; HEADER_LEN];
    let mut z = Packet::new_unchecked(&mut zero[..]);
    z.set_ttl(0);
    assert_eq!(z.decrement_ttl(), 0);
}
