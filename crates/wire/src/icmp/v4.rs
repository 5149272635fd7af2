//! ICMPv4 (RFC 792; RFC 1191 section 4 for the next-hop MTU; RFC 1812 section
//! 4.3.2.3 for how much of the invoking datagram an error quotes).

use super::{HEADER_LEN, be16, put, rest_of_header};
use crate::checksum;
use crate::error::{Layer, Result, need};
use etherparse::{Icmpv4Header, Icmpv4Type};

/// Message types.
pub mod msg_type {
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Source quench (deprecated, RFC 6633).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Timestamp request.
    pub const TIMESTAMP: u8 = 13;
    /// Timestamp reply.
    pub const TIMESTAMP_REPLY: u8 = 14;
}

/// Destination unreachable codes (RFC 792, RFC 1122 section 3.2.2.1, RFC 1812
/// section 5.2.7.1).
pub mod unreachable_code {
    /// Net unreachable.
    pub const NET: u8 = 0;
    /// Host unreachable.
    pub const HOST: u8 = 1;
    /// Protocol unreachable.
    pub const PROTOCOL: u8 = 2;
    /// Port unreachable.
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set; carries the next-hop MTU (RFC 1191).
    pub const FRAG_NEEDED: u8 = 4;
    /// Source route failed.
    pub const SOURCE_ROUTE_FAILED: u8 = 5;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Time exceeded codes.
pub mod time_exceeded_code {
    /// Time to live exceeded in transit.
    pub const TTL: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// Most bytes of the invoking datagram an error should quote, so that the error
/// datagram stays within 576 bytes (RFC 1812 section 4.3.2.3): 576 - 20 - 8.
pub const MAX_INVOKING: usize = 548;

/// A view over an ICMPv4 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// 8 bytes. Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        need(Layer::Icmpv4, self.buffer.as_ref(), HEADER_LEN)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Message type ([`msg_type`]).
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Code.
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Bytes 5 to 8, whose meaning depends on the type.
    pub fn rest_of_header(&self) -> [u8; 4] {
        rest_of_header(self.buffer.as_ref())
    }

    /// Echo identifier (echo request / reply).
    pub fn echo_ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Echo sequence number (echo request / reply).
    pub fn echo_seq_no(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Next-hop MTU of a "fragmentation needed" (type 3 code 4, RFC 1191 section 4);
    /// `None` for other messages. Zero means an old router that does not say.
    pub fn next_hop_mtu(&self) -> Option<u16> {
        (self.msg_type() == msg_type::DEST_UNREACHABLE
            && self.code() == unreachable_code::FRAG_NEEDED)
            .then(|| be16(self.buffer.as_ref(), 6))
    }

    /// Pointer to the offending octet of a parameter problem (type 12).
    pub fn pointer(&self) -> Option<u8> {
        (self.msg_type() == msg_type::PARAMETER_PROBLEM).then(|| self.buffer.as_ref()[4])
    }

    /// True for error messages (destination unreachable, source quench, redirect,
    /// time exceeded, parameter problem), which quote the invoking datagram.
    pub fn is_error(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::DEST_UNREACHABLE
                | msg_type::SOURCE_QUENCH
                | msg_type::REDIRECT
                | msg_type::TIME_EXCEEDED
                | msg_type::PARAMETER_PROBLEM
        )
    }

    /// Everything after the 8-byte header (echo data, or the invoking datagram).
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The quoted invoking datagram (IP header and at least 8 bytes of its
    /// payload) of an error message; `None` for queries.
    pub fn invoking_packet(&self) -> Option<&[u8]> {
        self.is_error().then(|| self.data())
    }

    /// True if the checksum over the whole message is correct.
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(self.buffer.as_ref(), 0)
    }

    /// The header as an owned etherparse value. A type etherparse decodes with a
    /// fixed length (timestamps) but whose length does not match comes back as
    /// [`Icmpv4Type::Unknown`].
    pub fn header(&self) -> Icmpv4Header {
        match etherparse::Icmpv4Slice::from_slice(self.buffer.as_ref()) {
            Ok(s) => s.header(),
            Err(_) => Icmpv4Header {
                icmp_type: Icmpv4Type::Unknown {
                    type_u8: self.msg_type(),
                    code_u8: self.code(),
                    bytes5to8: self.rest_of_header(),
                },
                checksum: self.checksum(),
            },
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, at: usize, v: u16) {
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the message type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[0] = v;
    }

    /// Sets the code.
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[1] = v;
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(2, v);
    }

    /// Sets bytes 5 to 8.
    pub fn set_rest_of_header(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[4..8].copy_from_slice(&v);
    }

    /// Sets the echo identifier.
    pub fn set_echo_ident(&mut self, v: u16) {
        self.set_u16_at(4, v);
    }

    /// Sets the echo sequence number.
    pub fn set_echo_seq_no(&mut self, v: u16) {
        self.set_u16_at(6, v);
    }

    /// Sets the next-hop MTU (bytes 7 and 8; bytes 5 and 6 are left as they are).
    pub fn set_next_hop_mtu(&mut self, v: u16) {
        self.set_u16_at(6, v);
    }

    /// The data after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and writes the checksum over the whole message.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
}

fn build(buf: &mut [u8], head: &[u8], body: &[u8]) -> Result<usize> {
    let n = put(Layer::Icmpv4, buf, head, body)?;
    Packet::new_unchecked(&mut buf[..n]).fill_checksum();
    Ok(n)
}

/// Writes a message of type `t` followed by `body` into `buf`, with the checksum
/// computed, and returns its length.
pub fn emit(buf: &mut [u8], t: &Icmpv4Type, body: &[u8]) -> Result<usize> {
    let head = Icmpv4Header {
        icmp_type: t.clone(),
        checksum: 0,
    }
    .to_bytes();
    build(buf, &head, body)
}

fn head(t: u8, code: u8, rest: [u8; 4]) -> [u8; HEADER_LEN] {
    [t, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]
}

fn echo_rest(ident: u16, seq: u16) -> [u8; 4] {
    let (i, s) = (ident.to_be_bytes(), seq.to_be_bytes());
    [i[0], i[1], s[0], s[1]]
}

/// Writes an echo request (type 8) carrying `data`; returns its length.
pub fn emit_echo_request(buf: &mut [u8], ident: u16, seq: u16, data: &[u8]) -> Result<usize> {
    build(
        buf,
        &head(msg_type::ECHO_REQUEST, 0, echo_rest(ident, seq)),
        data,
    )
}

/// Writes an echo reply (type 0) carrying `data`; returns its length.
pub fn emit_echo_reply(buf: &mut [u8], ident: u16, seq: u16, data: &[u8]) -> Result<usize> {
    build(
        buf,
        &head(msg_type::ECHO_REPLY, 0, echo_rest(ident, seq)),
        data,
    )
}

/// Writes a destination unreachable (type 3) with `code` ([`unreachable_code`]),
/// quoting `invoking` (at most [`MAX_INVOKING`] bytes should be passed); returns
/// its length.
pub fn emit_dest_unreachable(buf: &mut [u8], code: u8, invoking: &[u8]) -> Result<usize> {
    build(
        buf,
        &head(msg_type::DEST_UNREACHABLE, code, [0; 4]),
        invoking,
    )
}

/// Writes a "fragmentation needed and DF set" (type 3 code 4) advertising
/// `next_hop_mtu` (RFC 1191 section 4), quoting `invoking`; returns its length.
pub fn emit_frag_needed(buf: &mut [u8], next_hop_mtu: u16, invoking: &[u8]) -> Result<usize> {
    let m = next_hop_mtu.to_be_bytes();
    let h = head(
        msg_type::DEST_UNREACHABLE,
        unreachable_code::FRAG_NEEDED,
        [0, 0, m[0], m[1]],
    );
    build(buf, &h, invoking)
}

/// Writes a time exceeded (type 11) with `code` ([`time_exceeded_code`]), quoting
/// `invoking`; returns its length.
pub fn emit_time_exceeded(buf: &mut [u8], code: u8, invoking: &[u8]) -> Result<usize> {
    build(buf, &head(msg_type::TIME_EXCEEDED, code, [0; 4]), invoking)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use etherparse::IcmpEchoHeader;
    use etherparse::icmpv4::{DestUnreachableHeader, TimeExceededCode};
    use proptest::prelude::*;

    fn data() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..64)
    }

    proptest! {
        #[test]
        fn echo_matches_etherparse(ident in any::<u16>(), seq in any::<u16>(), d in data(), req in any::<bool>()) {
            let mut buf = [0u8; 80];
            let n = if req {
                emit_echo_request(&mut buf, ident, seq, &d).unwrap()
            } else {
                emit_echo_reply(&mut buf, ident, seq, &d).unwrap()
            };
            let echo = IcmpEchoHeader { id: ident, seq };
            let t = if req { Icmpv4Type::EchoRequest(echo) } else { Icmpv4Type::EchoReply(echo) };
            let want = Icmpv4Header::with_checksum(t.clone(), &d);
            let p = Packet::new_checked(&buf[..n]).unwrap();
            prop_assert_eq!(p.header(), want.clone());
            prop_assert_eq!((p.echo_ident(), p.echo_seq_no()), (ident, seq));
            prop_assert_eq!(p.data(), &d[..]);
            prop_assert!(p.verify_checksum() && !p.is_error() && p.invoking_packet().is_none());
            let mut again = [0u8; 80];
            prop_assert_eq!(emit(&mut again, &t, &d), Ok(n));
            prop_assert_eq!(&again[..n], &buf[..n]);
        }

        #[test]
        fn errors_match_etherparse(code in 0u8..20, mtu in any::<u16>(), d in data(), which in 0u8..3) {
            let mut buf = [0u8; 80];
            let (n, t) = match which {
                0 => (
                    emit_frag_needed(&mut buf, mtu, &d).unwrap(),
                    DestUnreachableHeader::from_values(unreachable_code::FRAG_NEEDED, mtu)
                        .map(Icmpv4Type::DestinationUnreachable),
                ),
                1 => (
                    emit_dest_unreachable(&mut buf, code, &d).unwrap(),
                    DestUnreachableHeader::from_values(code, 0).map(Icmpv4Type::DestinationUnreachable),
                ),
                _ => (
                    emit_time_exceeded(&mut buf, code % 2, &d).unwrap(),
                    TimeExceededCode::from_u8(code % 2).map(Icmpv4Type::TimeExceeded),
                ),
            };
            let p = Packet::new_checked(&buf[..n]).unwrap();
            prop_assert!(p.verify_checksum() && p.is_error());
            prop_assert_eq!(p.invoking_packet(), Some(&d[..]));
            // Codes etherparse names decode to the same header and checksum.
            if let Some(t) = t {
                prop_assert_eq!(p.header(), Icmpv4Header::with_checksum(t, &d));
            }
            let frag = which == 0 || which == 1 && code == unreachable_code::FRAG_NEEDED;
            prop_assert_eq!(p.next_hop_mtu(), frag.then_some(if which == 0 { mtu } else { 0 }));
        }

        #[test]
        fn setters_and_no_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            match Packet::new_checked(&bytes[..]) {
                Ok(p) => {
                    let _ = (p.header(), p.invoking_packet(), p.pointer(), p.next_hop_mtu());
                    let mut copy = bytes.clone();
                    let mut q = Packet::new_unchecked(&mut copy[..]);
                    q.fill_checksum();
                    prop_assert!(q.verify_checksum());
                    let want = etherparse::Icmpv4Slice::from_slice(&copy).map(|s| s.icmp_type().calc_checksum(s.payload()));
                    if let Ok(c) = want {
                        // etherparse recomputes from decoded fields; only equal when
                        // nothing it ignores (unused bytes) is non-zero, so compare
                        // for echo only.
                        if matches!(copy[0], 0 | 8) {
                            prop_assert_eq!(c, Packet::new_unchecked(&copy[..]).checksum());
                        }
                    }
                }
                Err(e) => prop_assert_eq!(e, Error::truncated(Layer::Icmpv4, 8, bytes.len())),
            }
        }
    }

    #[test]
    fn setters_write_fields() {
        let mut buf = [0u8; 12];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(msg_type::PARAMETER_PROBLEM);
        p.set_code(0);
        p.set_rest_of_header([7, 0, 0, 0]);
        p.data_mut().copy_from_slice(&[0x45, 0, 0, 20]);
        p.fill_checksum();
        assert_eq!(p.pointer(), Some(7));
        assert!(p.verify_checksum());
        p.set_echo_ident(0x0102);
        p.set_echo_seq_no(0x0304);
        assert_eq!(p.rest_of_header(), [1, 2, 3, 4]);
        p.set_next_hop_mtu(1400);
        assert_eq!(p.echo_seq_no(), 1400);
        assert_eq!(
            emit_echo_request(&mut buf[..9], 1, 2, b"ab"),
            Err(Error::BufferTooSmall {
                layer: Layer::Icmpv4,
                need: 10,
                have: 9
            })
        );
    }
}
