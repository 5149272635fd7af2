//! TCP (RFC 9293 section 3.1): a checked view over the header, its options and the
//! segment data, with [`Flags`] for the control bits (RFC 9293, ECE/CWR per RFC 3168
//! section 6.1) and the checksum over the pseudo-header (RFC 9293 section 3.1).
//! Options are parsed and written by [`options`].
//!
//! TCP has no length field: the view's buffer is the whole segment (the IP payload),
//! and [`Packet::payload`] and the checksum run to its end. The owned header value is
//! [`etherparse::TcpHeader`]; [`Packet::header`], [`Packet::set_header`] and [`emit`]
//! convert.

pub mod options;

pub use options::{
    SackBlocks, SynOptions, TcpOption, emit_options, emitted_len, parse_syn_options,
};

use crate::checksum;
use crate::error::{Error, Layer, Result, need};
use core::fmt;
use core::ops::{BitAnd, BitAndAssign, BitOr, BitOrAssign, Not};

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ_NUM: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK_NUM: Range<usize> = 8..12;
    /// Data offset (4 bits), reserved (3 bits) and the control bits (9 bits).
    pub const FLAGS: Range<usize> = 12..14;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
}

/// Length of the header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;

/// TCP control bits, as the low 9 bits of header bytes 12 and 13.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u16);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x002);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x004);
    /// Push function.
    pub const PSH: Flags = Flags(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x010);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x020);
    /// ECN-Echo (RFC 3168).
    pub const ECE: Flags = Flags(0x040);
    /// Congestion window reduced (RFC 3168).
    pub const CWR: Flags = Flags(0x080);
    /// Bit 7 of byte 12: the historic ECN nonce sum (RFC 3540, etherparse's `ns`),
    /// the AE bit of accurate ECN.
    pub const NS: Flags = Flags(0x100);
    /// Every bit this type holds.
    pub const ALL: Flags = Flags(0x1ff);

    /// No bits.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// From raw bits; bits above the nine control bits are dropped.
    pub const fn from_bits(bits: u16) -> Flags {
        Flags(bits & Flags::ALL.0)
    }

    /// The raw bits.
    pub const fn bits(self) -> u16 {
        self.0
    }

    /// True if no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// True if every bit of `other` is set.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Sets the bits of `other`.
    pub fn insert(&mut self, other: Flags) {
        self.0 |= other.0;
    }

    /// Clears the bits of `other`.
    pub fn remove(&mut self, other: Flags) {
        self.0 &= !other.0;
    }

    /// Sets or clears the bits of `other`.
    pub fn set(&mut self, other: Flags, on: bool) {
        if on {
            self.insert(other)
        } else {
            self.remove(other)
        }
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl BitAnd for Flags {
    type Output = Flags;
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl BitAndAssign for Flags {
    fn bitand_assign(&mut self, rhs: Flags) {
        self.0 &= rhs.0;
    }
}

impl Not for Flags {
    type Output = Flags;
    fn not(self) -> Flags {
        Flags(!self.0 & Flags::ALL.0)
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Flags, &str); 9] = [
            (Flags::FIN, "FIN"),
            (Flags::SYN, "SYN"),
            (Flags::RST, "RST"),
            (Flags::PSH, "PSH"),
            (Flags::ACK, "ACK"),
            (Flags::URG, "URG"),
            (Flags::ECE, "ECE"),
            (Flags::CWR, "CWR"),
            (Flags::NS, "NS"),
        ];
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("(empty)")?;
        }
        Ok(())
    }
}

/// A view over a TCP segment (header, options and data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// the header length. Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking, in this order: 20 bytes present, data offset
    /// at least 5 (`"data_offset"`), the whole header present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        need(Layer::Tcp, buf, HEADER_LEN)?;
        if self.data_offset() < 5 {
            return Err(Error::invalid(
                Layer::Tcp,
                "data_offset",
                self.data_offset().into(),
            ));
        }
        need(Layer::Tcp, buf, self.header_len())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[r.start], b[r.start + 1]])
    }

    fn u32_at(&self, r: core::ops::Range<usize>) -> u32 {
        // One bounds check for the four bytes.
        let b = &self.buffer.as_ref()[r.start..r.start + 4];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(field::DST_PORT)
    }

    /// Sequence number (SEG.SEQ).
    pub fn seq_number(&self) -> u32 {
        self.u32_at(field::SEQ_NUM)
    }

    /// Acknowledgment number (SEG.ACK).
    pub fn ack_number(&self) -> u32 {
        self.u32_at(field::ACK_NUM)
    }

    /// Data offset, in 32-bit words.
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS.start] >> 4
    }

    /// Header length in bytes (data offset times 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The control bits (the three reserved bits are not included).
    pub fn flags(&self) -> Flags {
        Flags::from_bits(self.u16_at(field::FLAGS))
    }

    /// FIN flag.
    pub fn fin(&self) -> bool {
        self.flags().contains(Flags::FIN)
    }

    /// SYN flag.
    pub fn syn(&self) -> bool {
        self.flags().contains(Flags::SYN)
    }

    /// RST flag.
    pub fn rst(&self) -> bool {
        self.flags().contains(Flags::RST)
    }

    /// PSH flag.
    pub fn psh(&self) -> bool {
        self.flags().contains(Flags::PSH)
    }

    /// ACK flag.
    pub fn ack(&self) -> bool {
        self.flags().contains(Flags::ACK)
    }

    /// URG flag.
    pub fn urg(&self) -> bool {
        self.flags().contains(Flags::URG)
    }

    /// ECE flag.
    pub fn ece(&self) -> bool {
        self.flags().contains(Flags::ECE)
    }

    /// CWR flag.
    pub fn cwr(&self) -> bool {
        self.flags().contains(Flags::CWR)
    }

    /// Window (SEG.WND, before scaling).
    pub fn window(&self) -> u16 {
        self.u16_at(field::WINDOW)
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        self.u16_at(field::CHECKSUM)
    }

    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        self.u16_at(field::URGENT)
    }

    /// The options, raw (between byte 20 and the header length).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// Iterates over the options; see [`options::iter`].
    pub fn options_iter(&self) -> options::Iter<'_> {
        options::iter(self.options())
    }

    /// The segment data: everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// SEG.LEN: data length plus one for SYN and one for FIN (RFC 9293 3.3.1).
    pub fn seg_len(&self) -> usize {
        let f = self.flags();
        self.payload().len()
            + usize::from(f.contains(Flags::SYN))
            + usize::from(f.contains(Flags::FIN))
    }

    /// True if the checksum over the whole buffer, with the pseudo-header sum
    /// `pseudo` (for example [`crate::ipv4::Packet::pseudo_header_sum`]), is correct.
    pub fn verify_checksum(&self, pseudo: u32) -> bool {
        checksum::verify(self.buffer.as_ref(), pseudo)
    }

    /// The header as an owned etherparse value.
    pub fn header(&self) -> etherparse::TcpHeader {
        let f = self.flags();
        etherparse::TcpHeader {
            source_port: self.src_port(),
            destination_port: self.dst_port(),
            sequence_number: self.seq_number(),
            acknowledgment_number: self.ack_number(),
            ns: f.contains(Flags::NS),
            fin: f.contains(Flags::FIN),
            syn: f.contains(Flags::SYN),
            rst: f.contains(Flags::RST),
            psh: f.contains(Flags::PSH),
            ack: f.contains(Flags::ACK),
            urg: f.contains(Flags::URG),
            ece: f.contains(Flags::ECE),
            cwr: f.contains(Flags::CWR),
            window_size: self.window(),
            checksum: self.checksum(),
            urgent_pointer: self.urgent(),
            // A multiple of 4 bytes, at most 40: always accepted.
            options: etherparse::TcpOptions::try_from_slice(self.options()).unwrap_or_default(),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }

    fn set_u32_at(&mut self, r: core::ops::Range<usize>, v: u32) {
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

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, v: u32) {
        self.set_u32_at(field::SEQ_NUM, v);
    }

    /// Sets the acknowledgment number.
    pub fn set_ack_number(&mut self, v: u32) {
        self.set_u32_at(field::ACK_NUM, v);
    }

    /// Sets the data offset, in 32-bit words (low 4 bits of `v`).
    pub fn set_data_offset(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS.start];
        *b = (*b & 0x0f) | (v << 4);
    }

    /// Sets the control bits, keeping the data offset and the reserved bits.
    pub fn set_flags(&mut self, f: Flags) {
        let old = self.u16_at(field::FLAGS);
        self.set_u16_at(field::FLAGS, (old & !Flags::ALL.0) | f.bits());
    }

    /// Sets the window.
    pub fn set_window(&mut self, v: u16) {
        self.set_u16_at(field::WINDOW, v);
    }

    /// Sets the checksum field.
    pub fn set_checksum(&mut self, v: u16) {
        self.set_u16_at(field::CHECKSUM, v);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent(&mut self, v: u16) {
        self.set_u16_at(field::URGENT, v);
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[HEADER_LEN..hl]
    }

    /// The segment data, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }

    /// Computes and writes the checksum over the whole buffer with the
    /// pseudo-header sum `pseudo`.
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let c = checksum::finish(checksum::partial(self.buffer.as_ref(), pseudo));
        self.set_checksum(c);
    }

    /// Writes every field of `h`, options included, as they are. Panics if the
    /// buffer is shorter than `h.header_len()`; [`emit`] checks instead.
    pub fn set_header(&mut self, h: &etherparse::TcpHeader) {
        let bytes = h.to_bytes();
        self.buffer.as_mut()[..bytes.len()].copy_from_slice(&bytes);
    }
}

/// Writes `h` (options and checksum field as they are) at the start of `buf` and
/// returns the header length, or [`Error::BufferTooSmall`].
pub fn emit(h: &etherparse::TcpHeader, buf: &mut [u8]) -> Result<usize> {
    let bytes = h.to_bytes();
    let have = buf.len();
    let out = buf.get_mut(..bytes.len()).ok_or(Error::BufferTooSmall {
        layer: Layer::Tcp,
        need: bytes.len(),
        have,
    })?;
    out.copy_from_slice(&bytes);
    Ok(bytes.len())
}

#[cfg(test)]
mod tests;
