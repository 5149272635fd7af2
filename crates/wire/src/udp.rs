//! UDP (RFC 768): a checked view over the 8-byte header and its payload.
//!
//! The owned header value is [`etherparse::UdpHeader`]; [`Packet::header`] and
//! [`Packet::set_header`] convert. The checksum covers the pseudo-header
//! ([`crate::checksum::pseudo_ipv4`] / [`crate::checksum::pseudo_ipv6`]); over IPv4 a
//! zero checksum means "none", and a computed zero is sent as `0xffff`.

use crate::checksum;
use crate::error::{Error, Layer, Result};

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Length of header plus payload.
    pub const LENGTH: Range<usize> = 4..6;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

/// A view over a UDP datagram (header and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is too short.
    /// Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking that it holds the header and that the length
    /// field is at least 8 and no more than the buffer. Bytes beyond the length
    /// field (Ethernet padding) are allowed and ignored by [`Packet::payload`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        crate::error::need(Layer::Udp, buf, HEADER_LEN)?;
        let len = usize::from(self.length());
        if len < HEADER_LEN {
            return Err(Error::invalid(Layer::Udp, "length", len as u32));
        }
        crate::error::need(Layer::Udp, buf, len)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// The length field (header plus payload).
    pub fn length(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// The checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// The payload, as delimited by the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.length())]
    }

    /// The header as an owned etherparse value.
    pub fn header(&self) -> etherparse::UdpHeader {
        etherparse::UdpHeader {
            source_port: self.src_port(),
            destination_port: self.dst_port(),
            length: self.length(),
            checksum: self.checksum(),
        }
    }

    /// True if the checksum is correct for the pseudo-header sum `pseudo`, or is
    /// zero (absent) and `zero_ok` (IPv4 allows it; IPv6 does not, RFC 8200 8.1).
    pub fn verify_checksum(&self, pseudo: u32, zero_ok: bool) -> bool {
        if self.checksum() == 0 {
            return zero_ok;
        }
        let len = usize::from(self.length());
        checksum::verify(&self.buffer.as_ref()[..len], pseudo)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the source port.
    pub fn set_src_port(&mut self, v: u16) {
        self.set_u16_at(field::SRC_PORT, v);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, v: u16) {
        self.set_u16_at(field::DST_PORT, v);
    }

    /// Sets the length field.
    pub fn set_length(&mut self, v: u16) {
        self.set_u16_at(field::LENGTH, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    /// The payload, mutable, as delimited by the length field.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = usize::from(self.length());
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    /// Writes all four fields of `h`.
    pub fn set_header(&mut self, h: &etherparse::UdpHeader) {
        self.set_src_port(h.source_port);
        self.set_dst_port(h.destination_port);
        self.set_length(h.length);
        self.set_checksum(h.checksum);
    }

    /// Computes and writes the checksum over header and payload given the
    /// pseudo-header sum `pseudo`; a computed zero is written as `0xffff`.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let len = usize::from(self.length());
        let c = checksum::finish(checksum::partial(&self.buffer.as_ref()[..len], pseudo));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_rejects_short_and_bad_length() {
        assert_eq!(
            Packet::new_checked(&[0u8; 7][..]).unwrap_err(),
            Error::truncated(Layer::Udp, 8, 7)
        );
        let mut b = [0u8; 8];
        b[5] = 7; // length 7 < 8
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::invalid(Layer::Udp, "length", 7)
        );
        b[5] = 9; // length 9 > 8 bytes present
        assert_eq!(
            Packet::new_checked(&b[..]).unwrap_err(),
            Error::truncated(Layer::Udp, 9, 8)
        );
    }

    #[test]
    fn checksum_matches_etherparse() {
        let h = etherparse::UdpHeader::with_ipv4_checksum(
            1234,
            53,
            &etherparse::Ipv4Header::new(
                7,
                64,
                etherparse::IpNumber::UDP,
                [10, 0, 0, 1],
                [10, 0, 0, 2],
            )
            .unwrap(),
            b"payload",
        )
        .unwrap();
        let mut buf = [0u8; 15];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_header(&h);
        p.payload_mut().copy_from_slice(b"payload");
        let pseudo = checksum::pseudo_ipv4([10, 0, 0, 1], [10, 0, 0, 2], 17, 15);
        assert!(p.verify_checksum(pseudo, false));
        let want = p.checksum();
        p.fill_checksum(pseudo);
        assert_eq!(p.checksum(), want);
        assert_eq!(Packet::new_checked(&buf[..]).unwrap().header(), h);
    }
}
