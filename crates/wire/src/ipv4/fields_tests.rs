//! [`fields`] against [`Packet`] (which it must refuse and accept exactly like)
//! and against etherparse and a plain RFC 1071 sum for the values it reads.

use super::*;
use etherparse::{IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv4Options};
use proptest::prelude::*;

/// RFC 1071 done the obvious way: big-endian 16-bit words, end-around carry.
fn reference_checksum_ok(header: &[u8]) -> bool {
    let mut sum: u32 = 0;
    for w in header.chunks(2) {
        let hi = u32::from(w[0]) << 8;
        let lo = u32::from(*w.get(1).unwrap_or(&0));
        sum += hi | lo;
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Checks `fields(buf)` against `Packet::new_checked` and etherparse.
fn check(buf: &[u8]) -> std::result::Result<(), TestCaseError> {
    let got = fields(buf);
    match Packet::new_checked(buf) {
        Err(e) => prop_assert_eq!(got, Err(e)),
        Ok(p) => {
            let f = got.expect("accepted by Packet::new_checked");
            let e = Ipv4HeaderSlice::from_slice(buf).expect("etherparse accepts it");
            prop_assert_eq!(f.src, e.source());
            prop_assert_eq!(f.dst, e.destination());
            prop_assert_eq!(f.protocol, e.protocol().0);
            prop_assert_eq!(
                f.fragment,
                e.more_fragments() || e.fragments_offset().value() != 0
            );
            let hl = usize::from(e.ihl()) * 4;
            let total = usize::from(e.total_len());
            prop_assert_eq!(f.checksum_ok, reference_checksum_ok(&buf[..hl]));
            prop_assert_eq!(f.datagram, &buf[..total]);
            prop_assert_eq!(f.payload, &buf[hl..total]);
            prop_assert_eq!(f.payload, p.payload());
        }
    }
    Ok(())
}

prop_compose! {
    fn header()(
        dscp in 0u8..64, ecn in 0u8..4, ident in any::<u16>(), df in any::<bool>(),
        mf in any::<bool>(), off in prop_oneof![Just(0u16), 0u16..8192], ttl in any::<u8>(),
        proto in any::<u8>(), src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(),
        opt_words in prop_oneof![3 => Just(0usize), 1 => 0usize..=10],
        opt_seed in any::<[u8; 40]>(), payload_len in 0u16..64,
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

proptest! {
    /// Well-formed datagrams with and without options, with Ethernet padding,
    /// then damaged: one byte changed anywhere in the header (checksum, version,
    /// IHL, total length, flags), or the buffer cut short.
    #[test]
    fn matches_packet_and_etherparse(
        h in header(),
        pad in 0usize..8,
        damage in proptest::option::of((0usize..60, any::<u8>())),
        cut in proptest::option::of(0usize..140),
    ) {
        let mut buf = h.to_bytes().to_vec();
        let payload_len = usize::from(h.total_len) - h.header_len();
        buf.extend((0..payload_len).map(|i| i as u8));
        buf.resize(buf.len() + pad, 0xee);
        let f = fields(&buf).unwrap();
        prop_assert!(f.checksum_ok);
        check(&buf)?;
        if let Some((at, v)) = damage {
            let at = at % h.header_len();
            buf[at] = v;
        }
        if let Some(c) = cut {
            buf.truncate(c);
        }
        check(&buf)?;
    }

    /// Arbitrary bytes, mostly starting 0x45 so that the one-pass path runs.
    #[test]
    fn arbitrary_bytes(
        plain in any::<bool>(),
        mut bytes in proptest::collection::vec(any::<u8>(), 0..80),
    ) {
        if plain && let Some(b) = bytes.first_mut() {
            *b = 0x45;
        }
        check(&bytes)?;
    }
}

/// Total lengths around the edges: below the header, exactly it, the buffer,
/// one past it.
#[test]
fn total_length_edges() {
    let mut h = [0u8; 28];
    h[0] = 0x45;
    for total in [0u16, 19, 20, 21, 27, 28, 29, 0xffff] {
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[10..12].copy_from_slice(&[0, 0]);
        let c = crate::checksum::checksum(&h[..20]);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        let got = fields(&h);
        assert_eq!(got.is_ok(), (20..=28).contains(&total), "total {total}");
        assert_eq!(got.map(|f| f.checksum_ok).ok(), got.is_ok().then_some(true));
        assert_eq!(got.err(), Packet::new_checked(&h[..]).err());
    }
}
