//! ICMPv6 (RFC 4443): message view, checksum over the RFC 4443 section 2.3
//! pseudo-header, and builders for echo, destination unreachable, packet too big
//! and time exceeded. Neighbor Discovery messages are in [`super::ndp`].

use super::{HEADER_LEN, be16, put, rest_of_header};
use crate::checksum;
use crate::error::{Layer, Result, need};
use crate::ipv4::protocol;
use etherparse::{Icmpv6Header, Icmpv6Type};

/// Message types (RFC 4443 section 2.1, RFC 4861 section 4).
pub mod msg_type {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;
    /// Echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Echo reply.
    pub const ECHO_REPLY: u8 = 129;
    /// Router solicitation.
    pub const ROUTER_SOLICITATION: u8 = 133;
    /// Router advertisement.
    pub const ROUTER_ADVERTISEMENT: u8 = 134;
    /// Neighbor solicitation.
    pub const NEIGHBOR_SOLICITATION: u8 = 135;
    /// Neighbor advertisement.
    pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
    /// Redirect.
    pub const REDIRECT: u8 = 137;
}

/// Destination unreachable codes (RFC 4443 section 3.1).
pub mod unreachable_code {
    /// No route to destination.
    pub const NO_ROUTE: u8 = 0;
    /// Communication administratively prohibited.
    pub const ADMIN_PROHIBITED: u8 = 1;
    /// Beyond scope of source address.
    pub const BEYOND_SCOPE: u8 = 2;
    /// Address unreachable.
    pub const ADDRESS: u8 = 3;
    /// Port unreachable.
    pub const PORT: u8 = 4;
    /// Source address failed ingress/egress policy.
    pub const SOURCE_POLICY: u8 = 5;
    /// Reject route to destination.
    pub const REJECT_ROUTE: u8 = 6;
}

/// Time exceeded codes (RFC 4443 section 3.3).
pub mod time_exceeded_code {
    /// Hop limit exceeded in transit.
    pub const HOP_LIMIT: u8 = 0;
    /// Fragment reassembly time exceeded.
    pub const REASSEMBLY: u8 = 1;
}

/// Most bytes of the invoking packet an error should quote, so that the error
/// fits the minimum IPv6 MTU (RFC 4443 section 2.4 (c)): 1280 - 40 - 8.
pub const MAX_INVOKING: usize = 1232;

/// The pseudo-header sum of an ICMPv6 message of `len` bytes from `src` to `dst`.
pub fn pseudo_header_sum(src: &[u8; 16], dst: &[u8; 16], len: usize) -> u32 {
    checksum::pseudo_ipv6(src, dst, protocol::ICMPV6, len as u32)
}

/// A view over an ICMPv6 message.
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
        need(Layer::Icmpv6, self.buffer.as_ref(), HEADER_LEN)
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

    /// The MTU of a packet too big (type 2, RFC 4443 section 3.2); `None` otherwise.
    pub fn mtu(&self) -> Option<u32> {
        (self.msg_type() == msg_type::PACKET_TOO_BIG)
            .then(|| u32::from_be_bytes(self.rest_of_header()))
    }

    /// The pointer of a parameter problem (type 4, RFC 4443 section 3.4).
    pub fn pointer(&self) -> Option<u32> {
        (self.msg_type() == msg_type::PARAMETER_PROBLEM)
            .then(|| u32::from_be_bytes(self.rest_of_header()))
    }

    /// True for error messages (types 0 to 127, RFC 4443 section 2.1).
    pub fn is_error(&self) -> bool {
        self.msg_type() < 128
    }

    /// Everything after the 8-byte header.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..]
    }

    /// The quoted invoking packet of an error message; `None` for informational
    /// messages.
    pub fn invoking_packet(&self) -> Option<&[u8]> {
        self.is_error().then(|| self.data())
    }

    /// True if the checksum over the whole message and the pseudo-header for
    /// `src` and `dst` is correct.
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        let b = self.buffer.as_ref();
        checksum::verify(b, pseudo_header_sum(src, dst, b.len()))
    }

    /// The header as an owned etherparse value (types etherparse does not decode
    /// are [`Icmpv6Type::Unknown`]).
    pub fn header(&self) -> Icmpv6Header {
        match etherparse::Icmpv6Slice::from_slice(self.buffer.as_ref()) {
            Ok(s) => s.header(),
            Err(_) => Icmpv6Header {
                icmp_type: Icmpv6Type::Unknown {
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

    /// Sets the MTU (bytes 5 to 8) of a packet too big.
    pub fn set_mtu(&mut self, v: u32) {
        self.set_rest_of_header(v.to_be_bytes());
    }

    /// The data after the header, mutable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }

    /// Computes and writes the checksum over the whole message and the
    /// pseudo-header for `src` and `dst`.
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = checksum::finish(checksum::partial(b, pseudo_header_sum(src, dst, b.len())));
        self.set_checksum(c);
    }
}

/// Source and destination of the IPv6 packet that carries a message: the
/// checksum covers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Addrs<'a> {
    /// IPv6 source address.
    pub src: &'a [u8; 16],
    /// IPv6 destination address.
    pub dst: &'a [u8; 16],
}

pub(super) fn build(buf: &mut [u8], ip: Addrs<'_>, head: &[u8], body: &[u8]) -> Result<usize> {
    let n = put(Layer::Icmpv6, buf, head, body)?;
    Packet::new_unchecked(&mut buf[..n]).fill_checksum(ip.src, ip.dst);
    Ok(n)
}

/// Writes a message of type `t` followed by `body` into `buf`, with the checksum
/// computed for `ip`, and returns its length.
pub fn emit(buf: &mut [u8], ip: Addrs<'_>, t: Icmpv6Type, body: &[u8]) -> Result<usize> {
    build(buf, ip, &Icmpv6Header::new(t).to_bytes(), body)
}

pub(super) fn head(t: u8, code: u8, rest: [u8; 4]) -> [u8; HEADER_LEN] {
    [t, code, 0, 0, rest[0], rest[1], rest[2], rest[3]]
}

fn echo_rest(ident: u16, seq: u16) -> [u8; 4] {
    let (i, s) = (ident.to_be_bytes(), seq.to_be_bytes());
    [i[0], i[1], s[0], s[1]]
}

/// Writes an echo request (type 128) carrying `data`; returns its length.
pub fn emit_echo_request(
    buf: &mut [u8],
    ip: Addrs<'_>,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::ECHO_REQUEST, 0, echo_rest(ident, seq)),
        data,
    )
}

/// Writes an echo reply (type 129) carrying `data`; returns its length.
pub fn emit_echo_reply(
    buf: &mut [u8],
    ip: Addrs<'_>,
    ident: u16,
    seq: u16,
    data: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::ECHO_REPLY, 0, echo_rest(ident, seq)),
        data,
    )
}

/// Writes a destination unreachable (type 1) with `code` ([`unreachable_code`]),
/// quoting `invoking` (at most [`MAX_INVOKING`] bytes should be passed); returns
/// its length.
pub fn emit_dest_unreachable(
    buf: &mut [u8],
    ip: Addrs<'_>,
    code: u8,
    invoking: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::DEST_UNREACHABLE, code, [0; 4]),
        invoking,
    )
}

/// Writes a packet too big (type 2) advertising `mtu`, quoting `invoking`;
/// returns its length.
pub fn emit_packet_too_big(
    buf: &mut [u8],
    ip: Addrs<'_>,
    mtu: u32,
    invoking: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::PACKET_TOO_BIG, 0, mtu.to_be_bytes()),
        invoking,
    )
}

/// Codes of the parameter problem message (RFC 4443 section 3.4, RFC 7112
/// section 5).
pub mod parameter_problem_code {
    /// Erroneous header field encountered.
    pub const HEADER_FIELD: u8 = 0;
    /// Unrecognized Next Header type encountered.
    pub const NEXT_HEADER: u8 = 1;
    /// Unrecognized IPv6 option encountered.
    pub const OPTION: u8 = 2;
    /// IPv6 First Fragment has incomplete IPv6 Header Chain (RFC 7112).
    pub const INCOMPLETE_CHAIN: u8 = 3;
}

/// Writes a parameter problem (type 4) with `code`
/// ([`parameter_problem_code`]) and `pointer` (the offset of the field in
/// error in `invoking`), quoting `invoking`; returns its length.
pub fn emit_parameter_problem(
    buf: &mut [u8],
    ip: Addrs<'_>,
    code: u8,
    pointer: u32,
    invoking: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::PARAMETER_PROBLEM, code, pointer.to_be_bytes()),
        invoking,
    )
}

/// Writes a time exceeded (type 3) with `code` ([`time_exceeded_code`]), quoting
/// `invoking`; returns its length.
pub fn emit_time_exceeded(
    buf: &mut [u8],
    ip: Addrs<'_>,
    code: u8,
    invoking: &[u8],
) -> Result<usize> {
    build(
        buf,
        ip,
        &head(msg_type::TIME_EXCEEDED, code, [0; 4]),
        invoking,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use etherparse::IcmpEchoHeader;
    use etherparse::icmpv6::{DestUnreachableCode, TimeExceededCode};
    use proptest::prelude::*;

    const SRC: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    const DST: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

    fn data() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(any::<u8>(), 0..64)
    }

    proptest! {
        #[test]
        fn builders_match_etherparse(
            src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), d in data(),
            a in any::<u16>(), b in any::<u16>(), mtu in any::<u32>(), code in 0u8..8, which in 0u8..5,
        ) {
            let ip = Addrs { src: &src, dst: &dst };
            let mut buf = [0u8; 80];
            let (n, t) = match which {
                0 => (emit_echo_request(&mut buf, ip, a, b, &d), Some(Icmpv6Type::EchoRequest(IcmpEchoHeader { id: a, seq: b }))),
                1 => (emit_echo_reply(&mut buf, ip, a, b, &d), Some(Icmpv6Type::EchoReply(IcmpEchoHeader { id: a, seq: b }))),
                2 => (emit_dest_unreachable(&mut buf, ip, code, &d), DestUnreachableCode::from_u8(code).map(Icmpv6Type::DestinationUnreachable)),
                3 => (emit_packet_too_big(&mut buf, ip, mtu, &d), Some(Icmpv6Type::PacketTooBig { mtu })),
                _ => (emit_time_exceeded(&mut buf, ip, code % 2, &d), TimeExceededCode::from_u8(code % 2).map(Icmpv6Type::TimeExceeded)),
            };
            let n = n.unwrap();
            let p = Packet::new_checked(&buf[..n]).unwrap();
            prop_assert!(p.verify_checksum(&src, &dst));
            // etherparse's independent checksum check agrees.
            prop_assert!(etherparse::Icmpv6Slice::from_slice(&buf[..n]).unwrap().is_checksum_valid(src, dst));
            prop_assert_eq!(p.data(), &d[..]);
            prop_assert_eq!(p.is_error(), which >= 2);
            prop_assert_eq!(p.invoking_packet().is_some(), which >= 2);
            prop_assert_eq!(p.mtu(), (which == 3).then_some(mtu));
            if which < 2 {
                prop_assert_eq!((p.echo_ident(), p.echo_seq_no()), (a, b));
            }
            if let Some(t) = t {
                let want = Icmpv6Header::with_checksum(t, src, dst, &d).unwrap();
                prop_assert_eq!(p.header(), want);
                let mut again = [0u8; 80];
                prop_assert_eq!(emit(&mut again, ip, t, &d), Ok(n));
                prop_assert_eq!(&again[..n], &buf[..n]);
            }
        }

        #[test]
        fn no_panics_and_fill_verifies(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            match Packet::new_checked(&bytes[..]) {
                Ok(p) => {
                    let _ = (p.header(), p.invoking_packet(), p.pointer(), p.mtu());
                    let mut copy = bytes.clone();
                    let mut q = Packet::new_unchecked(&mut copy[..]);
                    q.fill_checksum(&SRC, &DST);
                    prop_assert!(q.verify_checksum(&SRC, &DST));
                    prop_assert!(etherparse::Icmpv6Slice::from_slice(&copy).unwrap().is_checksum_valid(SRC, DST));
                }
                Err(e) => prop_assert_eq!(e, Error::truncated(Layer::Icmpv6, 8, bytes.len())),
            }
        }
    }

    #[test]
    fn parameter_problem_carries_code_and_pointer() {
        let mut buf = [0u8; 64];
        let quote = [0x60u8; 48];
        let ip = Addrs {
            src: &SRC,
            dst: &DST,
        };
        let n = emit_parameter_problem(
            &mut buf,
            ip,
            parameter_problem_code::INCOMPLETE_CHAIN,
            42,
            &quote,
        )
        .unwrap();
        assert_eq!(n, HEADER_LEN + quote.len());
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!((p.msg_type(), p.code()), (msg_type::PARAMETER_PROBLEM, 3));
        assert_eq!(p.pointer(), Some(42));
        assert_eq!(p.invoking_packet(), Some(&quote[..]));
        assert!(p.verify_checksum(&SRC, &DST));
    }

    #[test]
    fn setters_write_fields() {
        let mut buf = [0u8; 8];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_msg_type(msg_type::PARAMETER_PROBLEM);
        p.set_code(1);
        p.set_rest_of_header([0, 0, 0, 40]);
        assert_eq!(p.pointer(), Some(40));
        p.set_msg_type(msg_type::PACKET_TOO_BIG);
        p.set_mtu(1280);
        assert_eq!(p.mtu(), Some(1280));
        p.set_echo_ident(1);
        p.set_echo_seq_no(2);
        assert_eq!((p.echo_ident(), p.echo_seq_no(), p.code()), (1, 2, 1));
        assert!(p.data_mut().is_empty());
        let ip = Addrs {
            src: &SRC,
            dst: &DST,
        };
        assert_eq!(
            emit_echo_reply(&mut buf[..8], ip, 1, 2, b"x"),
            Err(Error::BufferTooSmall {
                layer: Layer::Icmpv6,
                need: 9,
                have: 8
            })
        );
    }
}
