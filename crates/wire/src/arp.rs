//! ARP for Ethernet and IPv4 (RFC 826; gratuitous ARP per RFC 5227 section 3).
//!
//! [`Packet`] is a checked view over the 28-byte packet: it accepts only hardware
//! type 1 (Ethernet), protocol type 0x0800 (IPv4), hardware length 6 and protocol
//! length 4, the only combination this stack resolves. The owned value is
//! [`etherparse::ArpEthIpv4Packet`] ([`Packet::header`], [`Packet::set_header`],
//! [`emit`]), and through [`etherparse::ArpEthIpv4Packet::to_arp_packet`] the generic
//! [`etherparse::ArpPacket`]. [`request`], [`reply`] and [`gratuitous`] make the
//! common ones, and [`Packet::reply_to`] answers a request.

use crate::error::{Error, Layer, Result, need};
use etherparse::{ArpEthIpv4Packet, ArpOperation};

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Hardware type.
    pub const HTYPE: Range<usize> = 0..2;
    /// Protocol type.
    pub const PTYPE: Range<usize> = 2..4;
    /// Hardware address length.
    pub const HLEN: usize = 4;
    /// Protocol address length.
    pub const PLEN: usize = 5;
    /// Operation.
    pub const OPER: Range<usize> = 6..8;
    /// Sender hardware address.
    pub const SHA: Range<usize> = 8..14;
    /// Sender protocol address.
    pub const SPA: Range<usize> = 14..18;
    /// Target hardware address.
    pub const THA: Range<usize> = 18..24;
    /// Target protocol address.
    pub const TPA: Range<usize> = 24..28;
}

/// Length of the fixed part (through the lengths and the operation).
pub const FIXED_LEN: usize = 8;
/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// Hardware type Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;

/// ARP operation codes (RFC 826).
pub mod operation {
    /// Request.
    pub const REQUEST: u16 = 1;
    /// Reply.
    pub const REPLY: u16 = 2;
}

/// A view over an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// [`PACKET_LEN`]. Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking it: 8 bytes for the fixed part, then hardware
    /// type 1 (`"htype"`), protocol type 0x0800 (`"ptype"`), `"hlen"` 6 and `"plen"`
    /// 4 ([`Error::Invalid`] otherwise), then 28 bytes in all. Trailing bytes
    /// (Ethernet padding) are allowed.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        need(Layer::Arp, buf, FIXED_LEN)?;
        if self.htype() != HTYPE_ETHERNET {
            return Err(Error::invalid(Layer::Arp, "htype", self.htype().into()));
        }
        if self.ptype() != crate::ethernet::ethertype::IPV4 {
            return Err(Error::invalid(Layer::Arp, "ptype", self.ptype().into()));
        }
        if self.hlen() != 6 {
            return Err(Error::invalid(Layer::Arp, "hlen", self.hlen().into()));
        }
        if self.plen() != 4 {
            return Err(Error::invalid(Layer::Arp, "plen", self.plen().into()));
        }
        need(Layer::Arp, buf, PACKET_LEN)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    fn array_at<const N: usize>(&self, r: core::ops::Range<usize>) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buffer.as_ref()[r]);
        a
    }

    /// Hardware type (1 for Ethernet).
    pub fn htype(&self) -> u16 {
        self.u16_at(field::HTYPE)
    }

    /// Protocol type (0x0800 for IPv4).
    pub fn ptype(&self) -> u16 {
        self.u16_at(field::PTYPE)
    }

    /// Hardware address length.
    pub fn hlen(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    pub fn plen(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation ([`operation::REQUEST`], [`operation::REPLY`], ...).
    pub fn oper(&self) -> u16 {
        self.u16_at(field::OPER)
    }

    /// Sender hardware address.
    pub fn sha(&self) -> [u8; 6] {
        self.array_at(field::SHA)
    }

    /// Sender protocol address.
    pub fn spa(&self) -> [u8; 4] {
        self.array_at(field::SPA)
    }

    /// Target hardware address.
    pub fn tha(&self) -> [u8; 6] {
        self.array_at(field::THA)
    }

    /// Target protocol address.
    pub fn tpa(&self) -> [u8; 4] {
        self.array_at(field::TPA)
    }

    /// True for a gratuitous ARP (sender and target protocol addresses equal,
    /// RFC 5227 section 3), request or reply.
    pub fn is_gratuitous(&self) -> bool {
        self.spa() == self.tpa()
    }

    /// The packet as an owned etherparse value.
    pub fn header(&self) -> ArpEthIpv4Packet {
        ArpEthIpv4Packet {
            operation: ArpOperation(self.oper()),
            sender_mac: self.sha(),
            sender_ipv4: self.spa(),
            target_mac: self.tha(),
            target_ipv4: self.tpa(),
        }
    }

    /// The reply a host owning [`Packet::tpa`] with hardware address `my_mac` sends
    /// to this request (RFC 826, "Packet Reception").
    pub fn reply_to(&self, my_mac: [u8; 6]) -> ArpEthIpv4Packet {
        reply(my_mac, self.tpa(), self.sha(), self.spa())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the hardware type.
    pub fn set_htype(&mut self, v: u16) {
        self.set_u16_at(field::HTYPE, v);
    }

    /// Sets the protocol type.
    pub fn set_ptype(&mut self, v: u16) {
        self.set_u16_at(field::PTYPE, v);
    }

    /// Sets the hardware address length.
    pub fn set_hlen(&mut self, v: u8) {
        self.buffer.as_mut()[field::HLEN] = v;
    }

    /// Sets the protocol address length.
    pub fn set_plen(&mut self, v: u8) {
        self.buffer.as_mut()[field::PLEN] = v;
    }

    /// Sets the operation.
    pub fn set_oper(&mut self, v: u16) {
        self.set_u16_at(field::OPER, v);
    }

    /// Sets the sender hardware address.
    pub fn set_sha(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&v);
    }

    /// Sets the sender protocol address.
    pub fn set_spa(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&v);
    }

    /// Sets the target hardware address.
    pub fn set_tha(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&v);
    }

    /// Sets the target protocol address.
    pub fn set_tpa(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&v);
    }

    /// Writes all 28 bytes of `h` (hardware and protocol types and lengths included).
    pub fn set_header(&mut self, h: &ArpEthIpv4Packet) {
        self.buffer.as_mut()[..PACKET_LEN].copy_from_slice(&h.to_bytes());
    }
}

/// Writes `h` at the start of `buf` and returns its length (28), or
/// [`Error::BufferTooSmall`].
pub fn emit(h: &ArpEthIpv4Packet, buf: &mut [u8]) -> Result<usize> {
    let have = buf.len();
    let out = buf.get_mut(..PACKET_LEN).ok_or(Error::BufferTooSmall {
        layer: Layer::Arp,
        need: PACKET_LEN,
        have,
    })?;
    Packet::new_unchecked(out).set_header(h);
    Ok(PACKET_LEN)
}

/// A request from (`sha`, `spa`) for the hardware address of `tpa`; the target
/// hardware address is zero. Send it to [`crate::ethernet::BROADCAST`].
pub const fn request(sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> ArpEthIpv4Packet {
    ArpEthIpv4Packet {
        operation: ArpOperation::REQUEST,
        sender_mac: sha,
        sender_ipv4: spa,
        target_mac: [0; 6],
        target_ipv4: tpa,
    }
}

/// A reply from (`sha`, `spa`) to (`tha`, `tpa`).
pub const fn reply(sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4]) -> ArpEthIpv4Packet {
    ArpEthIpv4Packet {
        operation: ArpOperation::REPLY,
        sender_mac: sha,
        sender_ipv4: spa,
        target_mac: tha,
        target_ipv4: tpa,
    }
}

/// A gratuitous ARP announcement (RFC 5227 section 3: a request with sender and
/// target protocol address both `spa`, target hardware address zero), broadcast
/// to refresh neighbours' caches.
pub const fn gratuitous(sha: [u8; 6], spa: [u8; 4]) -> ArpEthIpv4Packet {
    request(sha, spa, spa)
}

/// Writes [`request`] into `buf`; see [`emit`].
pub fn emit_request(buf: &mut [u8], sha: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Result<usize> {
    emit(&request(sha, spa, tpa), buf)
}

/// Writes [`reply`] into `buf`; see [`emit`].
pub fn emit_reply(
    buf: &mut [u8],
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
) -> Result<usize> {
    emit(&reply(sha, spa, tha, tpa), buf)
}

/// Writes [`gratuitous`] into `buf`; see [`emit`].
pub fn emit_gratuitous(buf: &mut [u8], sha: [u8; 6], spa: [u8; 4]) -> Result<usize> {
    emit(&gratuitous(sha, spa), buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::ArpPacket;
    use proptest::prelude::*;

    fn arp() -> impl Strategy<Value = ArpEthIpv4Packet> {
        (
            any::<u16>(),
            any::<[u8; 6]>(),
            any::<[u8; 4]>(),
            any::<[u8; 6]>(),
            any::<[u8; 4]>(),
        )
            .prop_map(|(op, sha, spa, tha, tpa)| ArpEthIpv4Packet {
                operation: ArpOperation(op),
                sender_mac: sha,
                sender_ipv4: spa,
                target_mac: tha,
                target_ipv4: tpa,
            })
    }

    proptest! {
        #[test]
        fn parse_matches_etherparse(h in arp(), pad in 0usize..18) {
            let mut buf = h.to_bytes().to_vec();
            buf.resize(PACKET_LEN + pad, 0);
            let p = Packet::new_checked(&buf[..]).unwrap();
            let e = ArpPacket::from_slice(&buf).unwrap();
            prop_assert_eq!(p.htype(), e.hw_addr_type.0);
            prop_assert_eq!(p.ptype(), e.proto_addr_type.0);
            prop_assert_eq!(p.hlen(), e.hw_addr_size());
            prop_assert_eq!(p.plen(), e.protocol_addr_size());
            prop_assert_eq!(p.oper(), e.operation.0);
            prop_assert_eq!(&p.sha()[..], e.sender_hw_addr());
            prop_assert_eq!(&p.spa()[..], e.sender_protocol_addr());
            prop_assert_eq!(&p.tha()[..], e.target_hw_addr());
            prop_assert_eq!(&p.tpa()[..], e.target_protocol_addr());
            prop_assert_eq!(p.header(), h.clone());
            prop_assert_eq!(e.try_eth_ipv4().unwrap(), h.clone());

            let mut out = [0u8; PACKET_LEN];
            let mut q = Packet::new_unchecked(&mut out[..]);
            q.set_htype(1);
            q.set_ptype(0x0800);
            q.set_hlen(6);
            q.set_plen(4);
            q.set_oper(h.operation.0);
            q.set_sha(h.sender_mac);
            q.set_spa(h.sender_ipv4);
            q.set_tha(h.target_mac);
            q.set_tpa(h.target_ipv4);
            prop_assert_eq!(ArpPacket::from_slice(&out).unwrap().try_eth_ipv4().unwrap(), h.clone());
            let mut out2 = [0u8; PACKET_LEN];
            prop_assert_eq!(emit(&h, &mut out2), Ok(PACKET_LEN));
            prop_assert_eq!(out2, out);

            for n in 0..PACKET_LEN {
                let want = if n < FIXED_LEN { FIXED_LEN } else { PACKET_LEN };
                prop_assert_eq!(
                    Packet::new_checked(&buf[..n]).unwrap_err(),
                    Error::truncated(Layer::Arp, want, n)
                );
            }
        }

        #[test]
        fn no_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(p) = Packet::new_checked(&bytes[..]) {
                let _ = p.header();
            }
        }
    }

    #[test]
    fn invalid_fields_are_named() {
        let good = request([1; 6], [10, 0, 0, 1], [10, 0, 0, 2]).to_bytes();
        for (at, v, field, value) in [
            (1, 6u8, "htype", 6u32),
            (2, 0x86, "ptype", 0x86dd),
            (4, 8, "hlen", 8),
            (5, 16, "plen", 16),
        ] {
            let mut b = good;
            b[at] = v;
            if at == 2 {
                b[3] = 0xdd;
            }
            assert_eq!(
                Packet::new_checked(&b[..]).unwrap_err(),
                Error::invalid(Layer::Arp, field, value)
            );
        }
        // A foreign ARP is reported as such even when it is short.
        let mut b = good;
        b[5] = 16;
        assert_eq!(
            Packet::new_checked(&b[..10]).unwrap_err(),
            Error::invalid(Layer::Arp, "plen", 16)
        );
    }

    #[test]
    fn builders() {
        let me = [2, 0, 0, 0, 0, 1];
        let peer = [2, 0, 0, 0, 0, 2];
        let mut buf = [0u8; 60];
        assert_eq!(
            emit_request(&mut buf, me, [10, 0, 0, 1], [10, 0, 0, 2]),
            Ok(28)
        );
        let req = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(req.oper(), operation::REQUEST);
        assert_eq!(req.tha(), [0; 6]);
        assert!(!req.is_gratuitous());
        let answer = req.reply_to(peer);
        assert_eq!(answer, reply(peer, [10, 0, 0, 2], me, [10, 0, 0, 1]));

        let mut r = [0u8; 28];
        emit_reply(&mut r, peer, [10, 0, 0, 2], me, [10, 0, 0, 1]).unwrap();
        assert_eq!(r, answer.to_bytes());

        let mut g = [0u8; 28];
        emit_gratuitous(&mut g, me, [10, 0, 0, 1]).unwrap();
        let g = Packet::new_checked(&g[..]).unwrap();
        assert!(g.is_gratuitous());
        assert_eq!(
            (g.oper(), g.spa(), g.tpa()),
            (operation::REQUEST, [10, 0, 0, 1], [10, 0, 0, 1])
        );

        assert_eq!(
            emit_request(&mut buf[..27], me, [0; 4], [0; 4]),
            Err(Error::BufferTooSmall {
                layer: Layer::Arp,
                need: 28,
                have: 27
            })
        );
    }
}
