use super::*;
use etherparse::{IpNumber, Ipv4Header, Ipv6Header, TcpHeader, TcpOptions};
use proptest::prelude::*;

prop_compose! {
    fn header()(
        sp in any::<u16>(), dp in any::<u16>(), seq in any::<u32>(), ack_n in any::<u32>(),
        bits in 0u16..0x200, win in any::<u16>(), csum in any::<u16>(), urg in any::<u16>(),
        opt_words in 0usize..=10, opt_seed in any::<[u8; 40]>(),
    ) -> TcpHeader {
        let f = Flags::from_bits(bits);
        TcpHeader {
            source_port: sp,
            destination_port: dp,
            sequence_number: seq,
            acknowledgment_number: ack_n,
            ns: f.contains(Flags::NS),
            fin: f.contains(Flags::FIN),
            syn: f.contains(Flags::SYN),
            rst: f.contains(Flags::RST),
            psh: f.contains(Flags::PSH),
            ack: f.contains(Flags::ACK),
            urg: f.contains(Flags::URG),
            ece: f.contains(Flags::ECE),
            cwr: f.contains(Flags::CWR),
            window_size: win,
            checksum: csum,
            urgent_pointer: urg,
            options: TcpOptions::try_from_slice(&opt_seed[..opt_words * 4]).unwrap(),
        }
    }
}

fn flags_of(h: &TcpHeader) -> Flags {
    let mut f = Flags::empty();
    f.set(Flags::NS, h.ns);
    f.set(Flags::FIN, h.fin);
    f.set(Flags::SYN, h.syn);
    f.set(Flags::RST, h.rst);
    f.set(Flags::PSH, h.psh);
    f.set(Flags::ACK, h.ack);
    f.set(Flags::URG, h.urg);
    f.set(Flags::ECE, h.ece);
    f.set(Flags::CWR, h.cwr);
    f
}

fn segment(h: &TcpHeader, payload: &[u8]) -> Vec<u8> {
    let mut buf = h.to_bytes().to_vec();
    buf.extend_from_slice(payload);
    buf
}

proptest! {
    #[test]
    fn parse_matches_etherparse(h in header(), payload in proptest::collection::vec(any::<u8>(), 0..48)) {
        let buf = segment(&h, &payload);
        let p = Packet::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(p.src_port(), h.source_port);
        prop_assert_eq!(p.dst_port(), h.destination_port);
        prop_assert_eq!(p.seq_number(), h.sequence_number);
        prop_assert_eq!(p.ack_number(), h.acknowledgment_number);
        prop_assert_eq!(p.data_offset(), h.data_offset());
        prop_assert_eq!(p.header_len(), h.header_len());
        prop_assert_eq!(p.flags(), flags_of(&h));
        prop_assert_eq!(
            (p.fin(), p.syn(), p.rst(), p.psh(), p.ack(), p.urg(), p.ece(), p.cwr()),
            (h.fin, h.syn, h.rst, h.psh, h.ack, h.urg, h.ece, h.cwr)
        );
        prop_assert_eq!(p.window(), h.window_size);
        prop_assert_eq!(p.checksum(), h.checksum);
        prop_assert_eq!(p.urgent(), h.urgent_pointer);
        prop_assert_eq!(p.options(), h.options.as_slice());
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert_eq!(p.seg_len(), payload.len() + usize::from(h.syn) + usize::from(h.fin));
        prop_assert_eq!(p.header(), h.clone());
        let _ = p.options_iter().count();
    }

    #[test]
    fn setters_build_what_etherparse_reads(h in header(), payload in proptest::collection::vec(any::<u8>(), 0..16)) {
        let want = segment(&h, &payload);
        let mut out = vec![0u8; want.len()];
        let mut p = Packet::new_unchecked(&mut out[..]);
        p.set_src_port(h.source_port);
        p.set_dst_port(h.destination_port);
        p.set_seq_number(h.sequence_number);
        p.set_ack_number(h.acknowledgment_number);
        p.set_data_offset(h.data_offset());
        p.set_flags(flags_of(&h));
        p.set_window(h.window_size);
        p.set_checksum(h.checksum);
        p.set_urgent(h.urgent_pointer);
        p.options_mut().copy_from_slice(h.options.as_slice());
        p.payload_mut().copy_from_slice(&payload);
        prop_assert_eq!(&out, &want);
        prop_assert_eq!(TcpHeader::from_slice(&out).unwrap().0, h.clone());

        let mut out2 = vec![0u8; h.header_len()];
        Packet::new_unchecked(&mut out2[..]).set_header(&h);
        prop_assert_eq!(&out2[..], &want[..h.header_len()]);
        let mut out3 = vec![0u8; h.header_len()];
        prop_assert_eq!(emit(&h, &mut out3), Ok(h.header_len()));
        prop_assert_eq!(&out3, &out2);
    }

    #[test]
    fn checksums_match_etherparse(
        h in header(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        src4 in any::<[u8; 4]>(), dst4 in any::<[u8; 4]>(),
        src6 in any::<[u8; 16]>(), dst6 in any::<[u8; 16]>(),
    ) {
        let mut buf = segment(&h, &payload);
        let len = buf.len();
        let ip4 = Ipv4Header::new(len as u16, 64, IpNumber::TCP, src4, dst4).unwrap();
        let pseudo4 = crate::checksum::pseudo_ipv4(src4, dst4, 6, len as u16);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.fill_checksum(pseudo4);
        prop_assert_eq!(p.checksum(), h.calc_checksum_ipv4(&ip4, &payload).unwrap());
        prop_assert!(p.verify_checksum(pseudo4));

        let ip6 = Ipv6Header { source: src6, destination: dst6, ..Default::default() };
        let pseudo6 = crate::checksum::pseudo_ipv6(&src6, &dst6, 6, len as u32);
        p.fill_checksum(pseudo6);
        prop_assert_eq!(p.checksum(), h.calc_checksum_ipv6(&ip6, &payload).unwrap());
        prop_assert!(p.verify_checksum(pseudo6));
        // A flipped bit is caught.
        let last = len - 1;
        buf[last] ^= 0x01;
        prop_assert!(!Packet::new_checked(&buf[..]).unwrap().verify_checksum(pseudo6));
    }

    #[test]
    fn every_truncation_is_typed(h in header()) {
        let buf = segment(&h, &[]);
        for n in 0..buf.len() {
            let want = if n < HEADER_LEN { HEADER_LEN } else { h.header_len() };
            prop_assert_eq!(
                Packet::new_checked(&buf[..n]).unwrap_err(),
                Error::truncated(Layer::Tcp, want, n)
            );
        }
    }

    #[test]
    fn no_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
        if let Ok(p) = Packet::new_checked(&bytes[..]) {
            let _ = (p.header(), p.payload(), p.seg_len(), p.verify_checksum(0));
            for o in p.options_iter() {
                let _ = o;
            }
        }
    }

    #[test]
    fn set_flags_keeps_offset_and_reserved(off in 5u8..16, reserved in 0u8..8, bits in any::<u16>()) {
        let mut buf = [0u8; 60];
        buf[12] = (off << 4) | (reserved << 1);
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_flags(Flags::from_bits(bits));
        prop_assert_eq!(p.flags().bits(), bits & 0x1ff);
        prop_assert_eq!(p.data_offset(), off);
        prop_assert_eq!((buf[12] >> 1) & 0x7, reserved);
    }
}

#[test]
fn bad_data_offset_is_named() {
    let mut buf = segment(&TcpHeader::new(1, 2, 3, 4), &[]);
    buf[12] = 0x40;
    assert_eq!(
        Packet::new_checked(&buf[..]).unwrap_err(),
        Error::invalid(Layer::Tcp, "data_offset", 4)
    );
    assert_eq!(
        emit(&TcpHeader::new(1, 2, 3, 4), &mut buf[..19]),
        Err(Error::BufferTooSmall {
            layer: Layer::Tcp,
            need: 20,
            have: 19
        })
    );
}

#[test]
fn flags_ops_and_debug() {
    let mut f = Flags::SYN | Flags::ACK;
    assert!(f.contains(Flags::SYN) && f.intersects(Flags::ACK | Flags::FIN));
    assert!(!f.contains(Flags::SYN | Flags::FIN));
    assert_eq!(format!("{f:?}"), "SYN|ACK");
    f.remove(Flags::SYN);
    f |= Flags::FIN;
    assert_eq!(f & Flags::FIN, Flags::FIN);
    f &= !Flags::FIN;
    assert_eq!(f, Flags::ACK);
    assert_eq!(format!("{:?}", Flags::empty()), "(empty)");
    assert!(Flags::from_bits(0xfe00).is_empty());
    assert_eq!((!Flags::empty()).bits(), Flags::ALL.bits());
}

#[test]
fn syn_options_through_the_view() {
    let opts = SynOptions {
        mss: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamps: Some((5, 0)),
    };
    let mut buf = [0u8; 60];
    let n = opts.emit(&mut buf[HEADER_LEN..]).unwrap();
    let mut p = Packet::new_unchecked(&mut buf[..HEADER_LEN + n]);
    p.set_data_offset(((HEADER_LEN + n) / 4) as u8);
    p.set_flags(Flags::SYN);
    let p = Packet::new_checked(&buf[..HEADER_LEN + n]).unwrap();
    assert_eq!(parse_syn_options(p.options()), Ok(opts));
    let h = p.header();
    assert!(h.syn && h.options_iterator().all(|o| o.is_ok()));
}
