//! IPv4 (RFC 791 section 3.1): a checked view over the header, its options and the
//! payload; the header checksum (RFC 791 section 3.1, RFC 1071, incremental update per
//! RFC 1624); the pseudo-header sum for TCP/UDP (RFC 9293 section 3.1, RFC 768);
//! and the IP protocol numbers shared with IPv6 ([`protocol`]).
//!
//! Options are not interpreted: [`Packet::options`] returns their raw bytes, bounded
//! by IHL. [`Packet::payload`] is bounded by the total length, so Ethernet padding
//! after the datagram is ignored. The owned header value is
//! [`etherparse::Ipv4Header`]; [`Packet::header`], [`Packet::set_header`] and [`emit`]
//! convert.

use crate::checksum;
use crate::error::{Error, Layer, Result, need};

/// IP protocol numbers (IANA "Assigned Internet Protocol Numbers"), used by both
/// the IPv4 protocol field and the IPv6 next header field.
pub mod protocol {
    /// IPv6 Hop-by-Hop Options (RFC 8200 section 4.3), IANA `HOPOPT`.
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP for IPv4 (RFC 792).
    pub const ICMP: u8 = 1;
    /// IGMP (RFC 3376).
    pub const IGMP: u8 = 2;
    /// IPv4 in IP encapsulation (RFC 2003), IANA `IPv4`.
    pub const IPV4: u8 = 4;
    /// TCP (RFC 9293).
    pub const TCP: u8 = 6;
    /// UDP (RFC 768).
    pub const UDP: u8 = 17;
    /// IPv6 encapsulation (RFC 2473), IANA `IPv6`.
    pub const IPV6: u8 = 41;
    /// IPv6 Routing header (RFC 8200 section 4.4), IANA `IPv6-Route`.
    pub const ROUTING: u8 = 43;
    /// IPv6 Fragment header (RFC 8200 section 4.5), IANA `IPv6-Frag`.
    pub const FRAGMENT: u8 = 44;
    /// Generic Routing Encapsulation (RFC 2784), carrying NVGRE (RFC 7637).
    pub const GRE: u8 = 47;
    /// Encapsulating Security Payload (RFC 4303).
    pub const ESP: u8 = 50;
    /// Authentication Header (RFC 4302).
    pub const AH: u8 = 51;
    /// ICMP for IPv6 (RFC 4443), IANA `IPv6-ICMP`.
    pub const ICMPV6: u8 = 58;
    /// No next header (RFC 8200 section 4.7), IANA `IPv6-NoNxt`.
    pub const NO_NEXT: u8 = 59;
    /// IPv6 Destination Options (RFC 8200 section 4.6), IANA `IPv6-Opts`.
    pub const DEST_OPTS: u8 = 60;
    /// SCTP (RFC 9260).
    pub const SCTP: u8 = 132;
    /// Mobility header (RFC 6275).
    pub const MOBILITY: u8 = 135;
    /// UDP-Lite (RFC 3828).
    pub const UDPLITE: u8 = 136;
    /// Host Identity Protocol (RFC 7401).
    pub const HIP: u8 = 139;
    /// Shim6 (RFC 5533).
    pub const SHIM6: u8 = 140;
    /// Ethernet (RFC 8986).
    pub const ETHERNET: u8 = 143;
}

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP (high 6 bits) and ECN (low 2 bits).
    pub const DSCP_ECN: usize = 1;
    /// Total length.
    pub const LENGTH: Range<usize> = 2..4;
    /// Identification.
    pub const IDENT: Range<usize> = 4..6;
    /// Flags (3 bits) and fragment offset (13 bits).
    pub const FLG_OFF: Range<usize> = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Range<usize> = 10..12;
    /// Source address.
    pub const SRC_ADDR: Range<usize> = 12..16;
    /// Destination address.
    pub const DST_ADDR: Range<usize> = 16..20;
}

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;

const DF: u16 = 0x4000;
const MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// A view over an IPv4 datagram (header, options and payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// the header or the total length. Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking, in this order: 20 bytes present, version 4
    /// (`"version"`), IHL at least 5 (`"ihl"`), the whole header present, total
    /// length at least the header length (`"total_len"`), the whole datagram present.
    /// Bytes after the total length (Ethernet padding) are allowed.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        need(Layer::Ipv4, buf, HEADER_LEN)?;
        if self.version() != 4 {
            return Err(Error::invalid(
                Layer::Ipv4,
                "version",
                self.version().into(),
            ));
        }
        if self.ihl() < 5 {
            return Err(Error::invalid(Layer::Ipv4, "ihl", self.ihl().into()));
        }
        let hl = self.header_len();
        need(Layer::Ipv4, buf, hl)?;
        let total = usize::from(self.total_len());
        if total < hl {
            return Err(Error::invalid(Layer::Ipv4, "total_len", total as u32));
        }
        need(Layer::Ipv4, buf, total)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    fn addr_at(&self, r: core::ops::Range<usize>) -> [u8; 4] {
        // One bounds check for the four bytes (this runs for every datagram).
        let b = &self.buffer.as_ref()[r.start..r.start + 4];
        [b[0], b[1], b[2], b[3]]
    }

    /// Version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Internet header length, in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// Header length in bytes (IHL times 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated services code point (6 bits, RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit congestion notification (2 bits, RFC 3168).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        self.u16_at(field::LENGTH)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        self.u16_at(field::IDENT)
    }

    /// Don't fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.u16_at(field::FLG_OFF) & DF != 0
    }

    /// More fragments flag.
    pub fn more_frags(&self) -> bool {
        self.u16_at(field::FLG_OFF) & MF != 0
    }

    /// Fragment offset, in 8-byte units (13 bits).
    pub fn frag_offset(&self) -> u16 {
        self.u16_at(field::FLG_OFF) & OFFSET_MASK
    }

    /// Fragment offset in bytes.
    pub fn frag_byte_offset(&self) -> u16 {
        self.frag_offset() * 8
    }

    /// True if this datagram is a fragment (more fragments, or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.u16_at(field::FLG_OFF) & (MF | OFFSET_MASK) != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload ([`protocol`]).
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// Source address.
    pub fn src_addr(&self) -> [u8; 4] {
        self.addr_at(field::SRC_ADDR)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> [u8; 4] {
        self.addr_at(field::DST_ADDR)
    }

    /// The options, raw (between byte 20 and the header length).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload, from the header length to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..usize::from(self.total_len())]
    }

    /// True if the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        let h = &self.buffer.as_ref()[..self.header_len()];
        if let &[a, b, c, d, e, f, g, i, j, k, l, m, n, o, p, q, r, s, t, u] = h {
            // No options (nearly every datagram): five words summed in place.
            let w = |a, b, c, d| u64::from(u32::from_be_bytes([a, b, c, d]));
            let sum = w(a, b, c, d) + w(e, f, g, i) + w(j, k, l, m) + w(n, o, p, q) + w(r, s, t, u);
            let sum = (sum & 0xffff_ffff) + (sum >> 32);
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            return sum == 0xffff;
        }
        checksum::verify(h, 0)
    }

    /// The pseudo-header sum (source, destination, protocol, `l4_len`) for the
    /// checksum of a TCP or UDP payload of `l4_len` bytes.
    pub fn pseudo_header_sum(&self, l4_len: u16) -> u32 {
        checksum::pseudo_ipv4(self.src_addr(), self.dst_addr(), self.protocol(), l4_len)
    }

    /// The header as an owned etherparse value (the reserved flag bit is dropped).
    pub fn header(&self) -> etherparse::Ipv4Header {
        use etherparse::{IpDscp, IpEcn, IpFragOffset, IpNumber, Ipv4Options};
        etherparse::Ipv4Header {
            // Masked to their widths above, so the fallbacks are never taken.
            dscp: IpDscp::try_new(self.dscp()).unwrap_or_default(),
            ecn: IpEcn::try_new(self.ecn()).unwrap_or_default(),
            total_len: self.total_len(),
            identification: self.ident(),
            dont_fragment: self.dont_frag(),
            more_fragments: self.more_frags(),
            fragment_offset: IpFragOffset::try_new(self.frag_offset()).unwrap_or_default(),
            time_to_live: self.ttl(),
            protocol: IpNumber(self.protocol()),
            header_checksum: self.checksum(),
            source: self.src_addr(),
            destination: self.dst_addr(),
            // A multiple of 4 bytes, at most 40: always accepted.
            options: Ipv4Options::try_from(self.options()).unwrap_or_default(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    fn set_flg_off(&mut self, mask: u16, v: u16) {
        let old = self.u16_at(field::FLG_OFF);
        self.set_u16_at(field::FLG_OFF, (old & !mask) | (v & mask));
    }

    /// Sets the version (low 4 bits of `v`).
    pub fn set_version(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the IHL, in 32-bit words (low 4 bits of `v`).
    pub fn set_ihl(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | (v & 0x0f);
    }

    /// Sets the DSCP (low 6 bits of `v`).
    pub fn set_dscp(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (v << 2);
    }

    /// Sets the ECN field (low 2 bits of `v`).
    pub fn set_ecn(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (v & 0x03);
    }

    /// Sets the total length.
    pub fn set_total_len(&mut self, v: u16) {
        self.set_u16_at(field::LENGTH, v);
    }

    /// Sets the identification.
    pub fn set_ident(&mut self, v: u16) {
        self.set_u16_at(field::IDENT, v);
    }

    /// Sets the don't fragment flag.
    pub fn set_dont_frag(&mut self, v: bool) {
        self.set_flg_off(DF, if v { DF } else { 0 });
    }

    /// Sets the more fragments flag.
    pub fn set_more_frags(&mut self, v: bool) {
        self.set_flg_off(MF, if v { MF } else { 0 });
    }

    /// Sets the fragment offset, in 8-byte units (low 13 bits of `v`).
    pub fn set_frag_offset(&mut self, v: u16) {
        self.set_flg_off(OFFSET_MASK, v);
    }

    /// Sets the time to live.
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }

    /// Sets the protocol.
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }

    /// Sets the header checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&v);
    }

    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&v);
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    /// The payload, mutable, bounded by the total length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, total) = (self.header_len(), usize::from(self.total_len()));
        &mut self.buffer.as_mut()[hl..total]
    }

    /// Computes and writes the header checksum.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(&self.buffer.as_ref()[..self.header_len()]);
        self.set_checksum(c);
    }

    /// Decrements the TTL (saturating at zero) and updates the checksum
    /// incrementally (RFC 1624), as a router forwarding the datagram does.
    /// Returns the new TTL.
    pub fn decrement_ttl(&mut self) -> u8 {
        let old = u16::from_be_bytes([self.ttl(), self.protocol()]);
        let ttl = self.ttl().saturating_sub(1);
        self.set_ttl(ttl);
        let new = u16::from_be_bytes([ttl, self.protocol()]);
        let c = checksum::update16(self.checksum(), old, new);
        self.set_checksum(c);
        ttl
    }

    /// Writes every field of `h`, options included, as they are (the checksum too;
    /// call [`Packet::fill_checksum`] after to compute it). Panics if the buffer is
    /// shorter than `h.header_len()`; [`emit`] checks instead.
    pub fn set_header(&mut self, h: &etherparse::Ipv4Header) {
        let bytes = h.to_bytes();
        self.buffer.as_mut()[..bytes.len()].copy_from_slice(&bytes);
    }
}

/// Writes `h` (with its options and checksum field as they are) at the start of
/// `buf` and returns the header length, or [`Error::BufferTooSmall`].
pub fn emit(h: &etherparse::Ipv4Header, buf: &mut [u8]) -> Result<usize> {
    let bytes = h.to_bytes();
    let have = buf.len();
    let out = buf.get_mut(..bytes.len()).ok_or(Error::BufferTooSmall {
        layer: Layer::Ipv4,
        need: bytes.len(),
        have,
    })?;
    out.copy_from_slice(&bytes);
    Ok(bytes.len())
}

/// What a receive path reads of a datagram, read by [`fields`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields<'a> {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Protocol of the payload ([`protocol`]).
    pub protocol: u8,
    /// The header checksum is correct ([`Packet::verify_checksum`]).
    pub checksum_ok: bool,
    /// More fragments, or a non-zero offset ([`Packet::is_fragment`]).
    pub fragment: bool,
    /// Header and payload, up to the total length (Ethernet padding left out).
    pub datagram: &'a [u8],
    /// The payload ([`Packet::payload`]).
    pub payload: &'a [u8],
}

/// The checks of [`Packet::new_checked`] (refusing what it refuses, with its
/// error), the header checksum and the fields a receive path reads. A plain
/// header (version 4, IHL 5: nearly every datagram) is read in one pass over
/// its 20 bytes; a header with options goes through [`Packet`].
#[inline]
pub fn fields(buf: &[u8]) -> Result<Fields<'_>> {
    if let Some(h) = buf.first_chunk::<HEADER_LEN>()
        && h[0] == 0x45
    {
        let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
        // `None` when the total length is below 20 or past the buffer, both of
        // which the general path refuses.
        if let (Some(datagram), Some(payload)) = (buf.get(..total), buf.get(HEADER_LEN..total)) {
            // RFC 1071 section 2(B): the one's-complement sum does not depend on
            // byte order, so the words are summed as they lie in memory.
            let w = |i: usize| u64::from(u32::from_ne_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]));
            let sum = w(0) + w(4) + w(8) + w(12) + w(16);
            let sum = (sum & 0xffff_ffff) + (sum >> 32);
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            let sum = (sum & 0xffff) + (sum >> 16);
            let flg_off = u16::from_be_bytes([h[6], h[7]]);
            return Ok(Fields {
                src: [h[12], h[13], h[14], h[15]],
                dst: [h[16], h[17], h[18], h[19]],
                protocol: h[9],
                checksum_ok: sum == 0xffff,
                fragment: flg_off & (MF | OFFSET_MASK) != 0,
                datagram,
                payload,
            });
        }
    }
    fields_general(buf)
}

/// [`fields`] through [`Packet`] (headers with options, and refusals).
#[cold]
fn fields_general(buf: &[u8]) -> Result<Fields<'_>> {
    let p = Packet::new_checked(buf)?;
    let total = usize::from(p.total_len());
    Ok(Fields {
        src: p.src_addr(),
        dst: p.dst_addr(),
        protocol: p.protocol(),
        checksum_ok: p.verify_checksum(),
        fragment: p.is_fragment(),
        datagram: buf.get(..total).unwrap_or(buf),
        payload: buf.get(p.header_len()..total).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod fields_tests;
