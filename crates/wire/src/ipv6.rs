//! IPv6 (RFC 8200 section 3): a checked view over the 40-byte fixed header and the
//! payload it delimits, and the upper-layer pseudo-header sum (RFC 8200 section 8.1).
//!
//! [`Packet::payload`] is bounded by the payload length field, so Ethernet padding is
//! ignored; it starts with the extension headers, if any, which [`ext`] walks. A
//! payload length of zero (RFC 2675 jumbograms) is taken literally: an empty payload.
//! The owned header value is [`etherparse::Ipv6Header`]; [`Packet::header`],
//! [`Packet::set_header`] and [`emit`] convert. Next header values are the IP
//! protocol numbers of [`protocol`] (shared with IPv4).

pub mod ext;

use crate::checksum;
use crate::error::{Error, Layer, Result, need};

pub use crate::ipv4::protocol;

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Version (4 bits), traffic class (8 bits), flow label (20 bits).
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    /// Payload length.
    pub const LENGTH: Range<usize> = 4..6;
    /// Next header.
    pub const NXT_HDR: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 8..24;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 24..40;
}

/// Length of the fixed header.
pub const HEADER_LEN: usize = 40;

const FLOW_MASK: u32 = 0x000f_ffff;

/// A view over an IPv6 packet (fixed header and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// the header or the payload length. Use [`Packet::new_checked`] on untrusted
    /// input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking, in this order: 40 bytes present, version 6
    /// (`"version"`), the whole payload present. Bytes after the payload (Ethernet
    /// padding) are allowed.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        need(Layer::Ipv6, buf, HEADER_LEN)?;
        if self.version() != 6 {
            return Err(Error::invalid(
                Layer::Ipv6,
                "version",
                self.version().into(),
            ));
        }
        need(Layer::Ipv6, buf, self.total_len())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn word0(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    fn addr_at(&self, r: core::ops::Range<usize>) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[r]);
        a
    }

    /// Version (6).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (8 bits: DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Differentiated services code point: the high 6 bits of the traffic class.
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }

    /// Explicit congestion notification: the low 2 bits of the traffic class.
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }

    /// Flow label (20 bits, RFC 6437).
    pub fn flow_label(&self) -> u32 {
        self.word0() & FLOW_MASK
    }

    /// Payload length (extension headers included).
    pub fn payload_len(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }

    /// Length of header and payload.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.payload_len())
    }

    /// Next header: the first extension header or the upper-layer protocol.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    pub fn src_addr(&self) -> [u8; 16] {
        self.addr_at(field::SRC_ADDR)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 16] {
        self.addr_at(field::DST_ADDR)
    }

    /// The payload (extension headers included), bounded by the payload length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.total_len()]
    }

    /// The pseudo-header sum for an upper-layer protocol `next_header` carrying
    /// `l4_len` bytes (RFC 8200 section 8.1: the upper-layer length, not the payload
    /// length, when extension headers come first).
    pub fn pseudo_header_sum(&self, next_header: u8, l4_len: u32) -> u32 {
        let b = self.buffer.as_ref();
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src.copy_from_slice(&b[field::SRC_ADDR]);
        dst.copy_from_slice(&b[field::DST_ADDR]);
        checksum::pseudo_ipv6(&src, &dst, next_header, l4_len)
    }

    /// The header as an owned etherparse value.
    pub fn header(&self) -> etherparse::Ipv6Header {
        etherparse::Ipv6Header {
            traffic_class: self.traffic_class(),
            // Masked to 20 bits above, so the fallback is never taken.
            flow_label: etherparse::Ipv6FlowLabel::try_new(self.flow_label()).unwrap_or_default(),
            payload_length: self.payload_len(),
            next_header: etherparse::IpNumber(self.next_header()),
            hop_limit: self.hop_limit(),
            source: self.src_addr(),
            destination: self.dst_addr(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_word0(&mut self, mask: u32, v: u32) {
        let w = (self.word0() & !mask) | (v & mask);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the version (low 4 bits of `v`).
    pub fn set_version(&mut self, v: u8) {
        self.set_word0(0xf000_0000, u32::from(v) << 28);
    }

    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.set_word0(0x0ff0_0000, u32::from(v) << 20);
    }

    /// Sets the DSCP (low 6 bits of `v`), keeping the ECN bits.
    pub fn set_dscp(&mut self, v: u8) {
        self.set_word0(0x0fc0_0000, u32::from(v) << 22);
    }

    /// Sets the ECN bits (low 2 bits of `v`), keeping the DSCP.
    pub fn set_ecn(&mut self, v: u8) {
        self.set_word0(0x0030_0000, u32::from(v) << 20);
    }

    /// Sets the flow label (low 20 bits of `v`).
    pub fn set_flow_label(&mut self, v: u32) {
        self.set_word0(FLOW_MASK, v);
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the next header.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }

    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, v: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }

    /// The payload, mutable, bounded by the payload length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// Writes every field of `h`. Panics if the buffer is shorter than 40 bytes;
    /// [`emit`] checks instead.
    pub fn set_header(&mut self, h: &etherparse::Ipv6Header) {
        self.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&h.to_bytes());
    }
}

/// Writes `h` at the start of `buf` and returns 40, or [`Error::BufferTooSmall`].
pub fn emit(h: &etherparse::Ipv6Header, buf: &mut [u8]) -> Result<usize> {
    let have = buf.len();
    let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall {
        layer: Layer::Ipv6,
        need: HEADER_LEN,
        have,
    })?;
    out.copy_from_slice(&h.to_bytes());
    Ok(HEADER_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpNumber, Ipv6FlowLabel, Ipv6Header};
    use proptest::prelude::*;

    prop_compose! {
        fn header()(
            tc in any::<u8>(), flow in 0u32..=0xfffff, len in 0u16..64, nh in any::<u8>(),
            hl in any::<u8>(), src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
        ) -> Ipv6Header {
            Ipv6Header {
                traffic_class: tc,
                flow_label: Ipv6FlowLabel::try_new(flow).unwrap(),
                payload_length: len,
                next_header: IpNumber(nh),
                hop_limit: hl,
                source: src,
                destination: dst,
            }
        }
    }

    fn packet(h: &Ipv6Header, pad: usize) -> Vec<u8> {
        let mut buf = h.to_bytes().to_vec();
        buf.extend((0..h.payload_length).map(|i| i as u8));
        buf.resize(buf.len() + pad, 0xee);
        buf
    }

    proptest! {
        #[test]
        fn parse_matches_etherparse(h in header(), pad in 0usize..8) {
            let buf = packet(&h, pad);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.version(), 6);
            prop_assert_eq!(p.traffic_class(), h.traffic_class);
            prop_assert_eq!(p.dscp(), h.dscp().value());
            prop_assert_eq!(p.ecn(), h.ecn().value());
            prop_assert_eq!(p.flow_label(), h.flow_label.value());
            prop_assert_eq!(p.payload_len(), h.payload_length);
            prop_assert_eq!(p.next_header(), h.next_header.0);
            prop_assert_eq!(p.hop_limit(), h.hop_limit);
            prop_assert_eq!(p.src_addr(), h.source);
            prop_assert_eq!(p.dst_addr(), h.destination);
            prop_assert_eq!(p.payload(), &buf[40..40 + usize::from(h.payload_length)]);
            prop_assert_eq!(p.header(), h.clone());
        }

        #[test]
        fn setters_build_what_etherparse_reads(h in header()) {
            let want = packet(&h, 0);
            let mut out = vec![0u8; want.len()];
            let mut p = Packet::new_unchecked(&mut out[..]);
            p.set_version(6);
            p.set_dscp(h.dscp().value());
            p.set_ecn(h.ecn().value());
            p.set_flow_label(h.flow_label.value());
            p.set_payload_len(h.payload_length);
            p.set_next_header(h.next_header.0);
            p.set_hop_limit(h.hop_limit);
            p.set_src_addr(h.source);
            p.set_dst_addr(h.destination);
            p.payload_mut().copy_from_slice(&want[40..]);
            prop_assert_eq!(&out, &want);
            prop_assert_eq!(Ipv6Header::from_slice(&out).unwrap().0, h.clone());

            let mut out2 = [0u8; 40];
            let mut q = Packet::new_unchecked(&mut out2[..]);
            q.set_header(&h);
            q.set_traffic_class(0);
            q.set_traffic_class(h.traffic_class);
            prop_assert_eq!(&out2[..], &want[..40]);
            let mut out3 = [0u8; 40];
            prop_assert_eq!(emit(&h, &mut out3), Ok(40));
            prop_assert_eq!(out3, out2);
        }

        #[test]
        fn every_truncation_is_typed(h in header()) {
            let buf = packet(&h, 0);
            for n in 0..buf.len() {
                let want = if n < HEADER_LEN { HEADER_LEN } else { buf.len() };
                prop_assert_eq!(
                    Packet::new_checked(&buf[..n]).unwrap_err(),
                    Error::truncated(Layer::Ipv6, want, n)
                );
            }
        }

        #[test]
        fn pseudo_header_matches_etherparse(
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let udp = etherparse::UdpHeader::with_ipv6_checksum(7, 9, &Ipv6Header {
                source: src, destination: dst, ..Default::default()
            }, &payload).unwrap();
            let l4_len = 8 + payload.len();
            let ip = Ipv6Header {
                payload_length: l4_len as u16,
                next_header: IpNumber::UDP,
                hop_limit: 64,
                source: src,
                destination: dst,
                ..Default::default()
            };
            let mut buf = ip.to_bytes().to_vec();
            buf.extend_from_slice(&udp.to_bytes());
            buf.extend_from_slice(&payload);
            let p = Packet::new_checked(&buf[..]).unwrap();
            let pseudo = p.pseudo_header_sum(protocol::UDP, l4_len as u32);
            prop_assert!(crate::udp::Packet::new_checked(p.payload()).unwrap().verify_checksum(pseudo, false));
        }

        #[test]
        fn no_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = (p.header(), p.payload());
            }
        }
    }

    #[test]
    fn invalid_version_is_named() {
        let mut b = packet(&Ipv6Header::default(), 0);
        b[0] = 0x45;
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::invalid(Layer::Ipv6, "version", 4)
        );
        assert_eq!(
            emit(&Ipv6Header::default(), &mut b[..39]),
            Err(Error::BufferTooSmall {
                layer: Layer::Ipv6,
                need: 40,
                have: 39
            })
        );
    }
}
