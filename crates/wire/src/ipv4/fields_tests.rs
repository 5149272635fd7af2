//! [`fields`] against [`Packet`] (which it must refuse and accept exactly like)
//! and against etherparse and a plain RFC 1071 sum for the values it reads.

use super::*;
use etherparse::{Ipv4Header, Ipv4HeaderSlice};
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

/// Headers as they usually come (offset 0, no options) more often than not.
fn header() -> impl Strategy<Value = Ipv4Header> {
    super::tests::header_from(
        prop_oneof![Just(0u16), 0u16..8192].boxed(),
        prop_oneof![3 => Just(0usize), 1 => 0usize..=10].boxed(),
    )
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
