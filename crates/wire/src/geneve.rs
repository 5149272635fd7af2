//! GENEVE (RFC 8926): a checked view over the header and its options, an iterator over
//! the option TLVs, and a [`Repr`] that parses and emits the whole header.
//!
//! The base header (RFC 8926 section 3.4) and an option (section 3.5):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Ver|  Opt Len  |O|C|    Rsvd.  |          Protocol Type        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |        Virtual Network Identifier (VNI)       |    Reserved   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Option Class         |      Type     |R|R|R| Length  |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ~                  Variable-Length Option Data                  ~
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! Opt Len and an option's Length count 4-byte words, so the header is 8 to 260 bytes
//! and an option 4 to 128. GENEVE rides in UDP, destination port [`PORT`] (6081);
//! protocol [`PROTO_TEB`] means an Ethernet frame follows.
//!
//! Receive rules (RFC 8926 sections 3.4 and 3.5), and where this module stands:
//!
//! * an unknown version MUST be dropped: [`Packet::new_checked`] refuses any version
//!   but 0 ([`Error::Invalid`] `"version"`);
//! * the O bit marks a control message whose payload is never forwarded:
//!   [`Packet::oam`] / [`Repr::oam`], for the caller to act on;
//! * an endpoint MUST drop a packet with a critical option (Type bit `0x80`) it does
//!   not know: [`Repr::has_unknown_critical`];
//! * the header's Rsvd. and Reserved fields and an option's three R bits MUST be
//!   ignored on receipt: the view exposes them ([`Packet::reserved1`],
//!   [`Packet::reserved2`]) but nothing here judges them, and [`OptionIter`] reads an
//!   option's length from the low 5 bits only. Everything this module writes has them
//!   zero.
//!
//! Options are walked by [`OptionIter`], which never panics and never loops: an option
//! whose declared length runs past the end of the options yields
//! [`Error::Truncated`] for [`Layer::GeneveOption`] and ends the walk.
//!
//! ```
//! use linerate_wire::geneve::{self, GeneveOption, Packet, Repr};
//! // One critical option (class 0x0102, type 0x80 | 5) with 4 bytes of data.
//! let opt = GeneveOption { class: 0x0102, kind: 0x85, data: &[1, 2, 3, 4] };
//! let mut opts = [0u8; 8];
//! let n = geneve::emit_options(&[opt], &mut opts).unwrap();
//! let repr = Repr::new(42, &opts[..n]);
//! assert!(repr.critical);
//!
//! let mut buf = [0u8; 16 + 14];
//! let len = repr.emit(&mut buf).unwrap();
//! let p = Packet::new_checked(&buf[..]).unwrap();
//! assert_eq!((p.header_len(), p.vni()), (len, 42));
//! let back = Repr::parse(&p).unwrap();
//! assert_eq!(back, repr);
//! assert_eq!(back.option_iter().next(), Some(Ok(opt)));
//! // An endpoint that knows no options must drop this packet.
//! assert!(back.has_unknown_critical(|_class, _kind| false));
//! ```

use crate::error::{Error, Layer, Result};

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Version (top 2 bits) and Opt Len (low 6 bits, in 4-byte words).
    pub const VER_OPT_LEN: usize = 0;
    /// O and C flags and the 6 Rsvd. bits.
    pub const FLAGS: usize = 1;
    /// Protocol type (an EtherType).
    pub const PROTOCOL: Range<usize> = 2..4;
    /// Virtual Network Identifier (24 bits).
    pub const VNI: Range<usize> = 4..7;
    /// The reserved last byte of the base header.
    pub const RESERVED2: usize = 7;
    /// Start of the options.
    pub const OPTIONS: usize = 8;

    /// Offsets inside one option.
    pub mod option {
        use core::ops::Range;
        /// Option class.
        pub const CLASS: Range<usize> = 0..2;
        /// Type (the `0x80` bit marks a critical option).
        pub const TYPE: usize = 2;
        /// Three R bits and the 5-bit Length (in 4-byte words, header excluded).
        pub const LENGTH: usize = 3;
        /// Start of the option data.
        pub const DATA: usize = 4;
    }
}

/// IANA-assigned UDP destination port (RFC 8926 section 3.3).
pub const PORT: u16 = 6081;
/// Length of the base header (no options).
pub const HEADER_LEN: usize = 8;
/// Length of the longest header: the base and 63 words of options.
pub const MAX_HEADER_LEN: usize = 260;
/// Most option bytes a header can carry (Opt Len is 6 bits of 4-byte words).
pub const MAX_OPTIONS_LEN: usize = 252;
/// Length of an option's header (class, type, length).
pub const OPTION_HEADER_LEN: usize = 4;
/// Most data bytes one option can carry (Length is 5 bits of 4-byte words).
pub const MAX_OPTION_DATA_LEN: usize = 124;
/// The bit of an option's Type that marks it critical.
pub const TYPE_CRITICAL: u8 = 0x80;
/// The O bit of byte 1: a control (OAM) message.
pub const FLAG_OAM: u8 = 0x80;
/// The C bit of byte 1: critical options are present.
pub const FLAG_CRITICAL: u8 = 0x40;
/// Protocol type of an Ethernet payload (transparent Ethernet bridging).
pub const PROTO_TEB: u16 = 0x6558;

/// Version bits of byte 0.
const VERSION_MASK: u8 = 0xc0;
/// Opt Len bits of byte 0.
const OPT_LEN_MASK: u8 = 0x3f;
/// Rsvd. bits of byte 1.
const RESERVED1_MASK: u8 = 0x3f;
/// Length bits of an option's fourth byte.
const OPTION_LENGTH_MASK: u8 = 0x1f;
/// Largest VNI plus one: the VNI is 24 bits.
const VNI_LIMIT: u32 = 1 << 24;

/// A view over a GENEVE packet (header, options and payload).
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

    /// Wraps `buffer` after the checks of [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the 8-byte base header, that the version is 0
    /// ([`Error::Invalid`] `"version"`) and that the buffer holds the options Opt Len
    /// announces ([`Error::Truncated`]). The options themselves are not walked here:
    /// see [`Packet::option_iter`] and [`Repr::parse`].
    pub fn check_len(&self) -> Result<()> {
        let buf = self.buffer.as_ref();
        crate::error::need(Layer::Geneve, buf, HEADER_LEN)?;
        let version = self.version();
        if version != 0 {
            return Err(Error::invalid(Layer::Geneve, "version", u32::from(version)));
        }
        crate::error::need(Layer::Geneve, buf, self.header_len())
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn byte(&self, at: usize) -> u8 {
        self.buffer.as_ref()[at]
    }

    /// The version (0 after [`Packet::new_checked`]).
    pub fn version(&self) -> u8 {
        self.byte(field::VER_OPT_LEN) >> 6
    }

    /// The length of the options in bytes (Opt Len times 4), 0 to 252.
    pub fn opt_len(&self) -> usize {
        4 * usize::from(self.byte(field::VER_OPT_LEN) & OPT_LEN_MASK)
    }

    /// The O bit: a control message; its payload must not be forwarded.
    pub fn oam(&self) -> bool {
        self.byte(field::FLAGS) & FLAG_OAM != 0
    }

    /// The C bit: one or more options are critical.
    pub fn critical(&self) -> bool {
        self.byte(field::FLAGS) & FLAG_CRITICAL != 0
    }

    /// The 6 Rsvd. bits after O and C (ignored on receipt).
    pub fn reserved1(&self) -> u8 {
        self.byte(field::FLAGS) & RESERVED1_MASK
    }

    /// The protocol type of the payload (an EtherType; [`PROTO_TEB`] for Ethernet).
    pub fn protocol(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::PROTOCOL.start], b[field::PROTOCOL.start + 1]])
    }

    /// The Virtual Network Identifier (24 bits).
    pub fn vni(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VNI];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }

    /// The reserved last byte of the base header (ignored on receipt).
    pub fn reserved2(&self) -> u8 {
        self.byte(field::RESERVED2)
    }

    /// Header length with options: `8 + opt_len()`, 8 to 260.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.opt_len()
    }

    /// The raw option bytes (`opt_len()` of them).
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OPTIONS..self.header_len()]
    }

    /// Walks the options.
    pub fn option_iter(&self) -> OptionIter<'_> {
        OptionIter::new(self.options())
    }

    /// The payload: everything after the options.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_bits(&mut self, at: usize, mask: u8, v: u8) {
        let b = &mut self.buffer.as_mut()[at];
        *b = (*b & !mask) | (v & mask);
    }

    /// Sets the version; bits above the low 2 are dropped.
    pub fn set_version(&mut self, v: u8) {
        self.set_bits(field::VER_OPT_LEN, VERSION_MASK, v << 6);
    }

    /// Sets Opt Len from a length in bytes, which should be a multiple of 4 no larger
    /// than 252: it is divided by 4 and cut to 6 bits. The options then move the
    /// payload: set this before writing options or payload.
    pub fn set_opt_len(&mut self, bytes: usize) {
        self.set_bits(field::VER_OPT_LEN, OPT_LEN_MASK, (bytes / 4) as u8);
    }

    /// Sets or clears the O bit.
    pub fn set_oam(&mut self, on: bool) {
        self.set_bits(field::FLAGS, FLAG_OAM, if on { FLAG_OAM } else { 0 });
    }

    /// Sets or clears the C bit.
    pub fn set_critical(&mut self, on: bool) {
        self.set_bits(
            field::FLAGS,
            FLAG_CRITICAL,
            if on { FLAG_CRITICAL } else { 0 },
        );
    }

    /// Sets the 6 Rsvd. bits; higher bits are dropped.
    pub fn set_reserved1(&mut self, v: u8) {
        self.set_bits(field::FLAGS, RESERVED1_MASK, v);
    }

    /// Sets the protocol type.
    pub fn set_protocol(&mut self, v: u16) {
        self.buffer.as_mut()[field::PROTOCOL].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the VNI; bits above the low 24 are dropped ([`Repr::emit`] refuses them).
    pub fn set_vni(&mut self, v: u32) {
        let [_, a, b, c] = v.to_be_bytes();
        self.buffer.as_mut()[field::VNI].copy_from_slice(&[a, b, c]);
    }

    /// Sets the reserved last byte of the base header.
    pub fn set_reserved2(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED2] = v;
    }

    /// The raw option bytes, mutable (`opt_len()` of them).
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[field::OPTIONS..end]
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

/// One option TLV (RFC 8926 section 3.5), borrowing its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GeneveOption<'a> {
    /// Option class: the namespace of `kind`.
    pub class: u16,
    /// The Type byte, including the [`TYPE_CRITICAL`] bit.
    pub kind: u8,
    /// The option data: a multiple of 4 bytes, at most 124.
    pub data: &'a [u8],
}

impl GeneveOption<'_> {
    /// True if the critical bit of the Type is set: an endpoint that does not know
    /// the option must drop the packet.
    pub const fn critical(&self) -> bool {
        self.kind & TYPE_CRITICAL != 0
    }

    /// Bytes the option takes on the wire: its 4-byte header and its data.
    pub const fn buffer_len(&self) -> usize {
        OPTION_HEADER_LEN + self.data.len()
    }
}

/// An iterator over raw GENEVE option bytes, yielding each option or the error that
/// ends the walk.
///
/// An option header cut short, or an option whose declared length runs past the end,
/// yields [`Error::Truncated`] for [`Layer::GeneveOption`] (need and have counted from
/// that option's start), after which the iterator is exhausted. The R bits of an
/// option are ignored.
#[derive(Debug, Clone)]
pub struct OptionIter<'a> {
    rest: &'a [u8],
}

impl<'a> OptionIter<'a> {
    /// Walks `options`, the raw option bytes of a header (for example
    /// [`Packet::options`] or [`Repr::options`]).
    pub const fn new(options: &'a [u8]) -> Self {
        OptionIter { rest: options }
    }
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<GeneveOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = core::mem::take(&mut self.rest);
        let Some(&[c0, c1, kind, len]) = rest.first_chunk::<OPTION_HEADER_LEN>() else {
            return Some(Err(Error::truncated(
                Layer::GeneveOption,
                OPTION_HEADER_LEN,
                rest.len(),
            )));
        };
        let need = OPTION_HEADER_LEN + 4 * usize::from(len & OPTION_LENGTH_MASK);
        let (Some(data), Some(after)) = (rest.get(OPTION_HEADER_LEN..need), rest.get(need..))
        else {
            return Some(Err(Error::truncated(Layer::GeneveOption, need, rest.len())));
        };
        self.rest = after;
        Some(Ok(GeneveOption {
            class: u16::from_be_bytes([c0, c1]),
            kind,
            data,
        }))
    }
}

impl core::iter::FusedIterator for OptionIter<'_> {}

/// Checks that `options` walks as whole TLVs; the first error if not.
fn check_options(options: &[u8]) -> Result<()> {
    OptionIter::new(options).try_for_each(|o| o.map(|_| ()))
}

/// Encodes `opts` as option TLVs at the start of `buf` (R bits zero) and returns the
/// bytes written: the raw form [`Repr::options`] takes.
///
/// Errors: [`Error::Invalid`] `"length"` for [`Layer::GeneveOption`] if an option's
/// data is not a multiple of 4 bytes or is longer than 124; [`Error::Invalid`]
/// `"opt_len"` for [`Layer::Geneve`] (the value in bytes) if all of them take more than
/// [`MAX_OPTIONS_LEN`]; [`Error::BufferTooSmall`] if `buf` cannot hold them. Nothing is
/// written on error.
pub fn emit_options(opts: &[GeneveOption<'_>], buf: &mut [u8]) -> Result<usize> {
    let mut total = 0;
    for o in opts {
        let n = o.data.len();
        if n % 4 != 0 || n > MAX_OPTION_DATA_LEN {
            let v = u32::try_from(n).unwrap_or(u32::MAX);
            return Err(Error::invalid(Layer::GeneveOption, "length", v));
        }
        total += o.buffer_len();
        if total > MAX_OPTIONS_LEN {
            return Err(Error::invalid(Layer::Geneve, "opt_len", total as u32));
        }
    }
    let have = buf.len();
    let Some(mut out) = buf.get_mut(..total) else {
        return Err(Error::BufferTooSmall {
            layer: Layer::Geneve,
            need: total,
            have,
        });
    };
    for o in opts {
        let (hdr, rest) = out.split_at_mut(OPTION_HEADER_LEN);
        let [c0, c1] = o.class.to_be_bytes();
        hdr.copy_from_slice(&[c0, c1, o.kind, (o.data.len() / 4) as u8]);
        let (data, rest) = rest.split_at_mut(o.data.len());
        data.copy_from_slice(o.data);
        out = rest;
    }
    Ok(total)
}

/// A parsed GENEVE header, borrowing its raw options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Virtual Network Identifier, below `1 << 24`.
    pub vni: u32,
    /// Protocol type of the payload ([`PROTO_TEB`] for Ethernet).
    pub protocol: u16,
    /// The O bit: a control message.
    pub oam: bool,
    /// The C bit: critical options are present. RFC 8926 requires it set if any
    /// option is critical; [`Repr::new`] computes it.
    pub critical: bool,
    /// The raw, encoded option TLVs ([`emit_options`] writes them, [`OptionIter`]
    /// reads them): a multiple of 4 bytes, at most [`MAX_OPTIONS_LEN`].
    pub options: &'a [u8],
}

impl<'a> Repr<'a> {
    /// A header for an Ethernet payload ([`PROTO_TEB`]), O clear, with C set iff one
    /// of `options` is critical (RFC 8926 section 3.5).
    pub fn new(vni: u32, options: &'a [u8]) -> Repr<'a> {
        let critical = OptionIter::new(options).any(|o| o.is_ok_and(|o| o.critical()));
        Repr {
            vni,
            protocol: PROTO_TEB,
            oam: false,
            critical,
            options,
        }
    }

    /// Parses the header of `p` (re-checking it as [`Packet::check_len`] does), and
    /// walks the options: an option running past Opt Len is [`Error::Truncated`] for
    /// [`Layer::GeneveOption`]. The returned value borrows the options from `p`'s
    /// buffer, not from `p`. Reserved fields are ignored.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(p: &Packet<&'a T>) -> Result<Repr<'a>> {
        p.check_len()?;
        let buffer: &'a T = p.buffer;
        let buf: &'a [u8] = buffer.as_ref();
        let options = buf.get(field::OPTIONS..p.header_len()).unwrap_or_default();
        check_options(options)?;
        Ok(Repr {
            vni: p.vni(),
            protocol: p.protocol(),
            oam: p.oam(),
            critical: p.critical(),
            options,
        })
    }

    /// Bytes [`Repr::emit`] writes: the base header and the options.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN + self.options.len()
    }

    /// Walks the options.
    pub fn option_iter(&self) -> OptionIter<'a> {
        OptionIter::new(self.options)
    }

    /// True if an option is critical and `known(class, kind)` says it is not
    /// understood: an endpoint must then drop the packet (RFC 8926 section 3.5).
    /// All options are looked at, whether or not the C bit is set; options that do
    /// not walk as whole TLVs count as unknown critical (drop).
    pub fn has_unknown_critical(&self, known: impl Fn(u16, u8) -> bool) -> bool {
        self.option_iter().any(|o| match o {
            Ok(o) => o.critical() && !known(o.class, o.kind),
            Err(_) => true,
        })
    }

    /// Writes the header and options at the start of `buf` (version 0, reserved
    /// fields zero) and returns the bytes written.
    ///
    /// Errors, all for [`Layer::Geneve`] unless said: [`Error::Invalid`] `"vni"` if the
    /// VNI does not fit in 24 bits; `"opt_len"` (the value in bytes) if the options
    /// are not a multiple of 4 bytes or longer than 252; [`Error::Truncated`] for
    /// [`Layer::GeneveOption`] if they do not walk as whole TLVs; `"critical"` if an
    /// option is critical but C is clear (RFC 8926 section 3.5: C MUST then be set);
    /// [`Error::BufferTooSmall`] if `buf` is shorter than [`Repr::buffer_len`].
    /// Nothing is written on error.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.vni >= VNI_LIMIT {
            return Err(Error::invalid(Layer::Geneve, "vni", self.vni));
        }
        let olen = self.options.len();
        if !olen.is_multiple_of(4) || olen > MAX_OPTIONS_LEN {
            let v = u32::try_from(olen).unwrap_or(u32::MAX);
            return Err(Error::invalid(Layer::Geneve, "opt_len", v));
        }
        check_options(self.options)?;
        if !self.critical && self.option_iter().any(|o| o.is_ok_and(|o| o.critical())) {
            return Err(Error::invalid(Layer::Geneve, "critical", 0));
        }
        let len = self.buffer_len();
        let have = buf.len();
        let Some(out) = buf.get_mut(..len) else {
            return Err(Error::BufferTooSmall {
                layer: Layer::Geneve,
                need: len,
                have,
            });
        };
        let (hdr, opts) = out.split_at_mut(HEADER_LEN);
        let mut flags = 0;
        if self.oam {
            flags |= FLAG_OAM;
        }
        if self.critical {
            flags |= FLAG_CRITICAL;
        }
        let [p0, p1] = self.protocol.to_be_bytes();
        let [_, v0, v1, v2] = self.vni.to_be_bytes();
        hdr.copy_from_slice(&[(olen / 4) as u8, flags, p0, p1, v0, v1, v2, 0]);
        opts.copy_from_slice(self.options);
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A real GENEVE header with one option, as captured in gopacket's test data
    /// (`layers/geneve_test.go`, `testPacketGeneve3`, bytes 42..72): Opt Len 2, C set,
    /// protocol 0x6558, VNI 10, option class 0, type 0x80 (critical), length 1, data
    /// 00 00 00 0c; then the inner Ethernet header.
    const CAPTURED: [u8; 30] = [
        0x02, 0x40, 0x65, 0x58, 0x00, 0x00, 0x0a, 0x00, // base header
        0x00, 0x00, 0x80, 0x01, 0x00, 0x00, 0x00, 0x0c, // option
        0xfe, 0x71, 0xd8, 0x83, 0x72, 0x4f, 0xb6, 0x9e, 0xd2, 0x49, 0x51, 0x48, 0x08, 0x00,
    ];

    /// Built by hand, byte by byte, from RFC 8926 sections 3.4 and 3.5: O set, C clear,
    /// VNI 0xabcdef, two options: class 0x0102 type 0x05 with 4 data bytes, and class
    /// 0xffff type 0x7f with no data and all three R bits set (to be ignored).
    const HAND: [u8; 20] = [
        0x03, // Ver 0, Opt Len 3 words
        0x80, // O set, C clear, Rsvd. 0
        0x65, 0x58, // protocol: Ethernet
        0xab, 0xcd, 0xef, // VNI
        0x00, // Reserved
        0x01, 0x02, 0x05, 0x01, // class 0x0102, type 5, R 0, length 1 word
        0xde, 0xad, 0xbe, 0xef, // data
        0xff, 0xff, 0x7f, 0xe0, // class 0xffff, type 0x7f, R 111, length 0
    ];

    #[test]
    fn parses_captured_header() {
        let p = Packet::new_checked(&CAPTURED[..]).unwrap();
        assert_eq!((p.version(), p.opt_len(), p.header_len()), (0, 8, 16));
        assert_eq!((p.oam(), p.critical()), (false, true));
        assert_eq!((p.reserved1(), p.reserved2()), (0, 0));
        assert_eq!(p.protocol(), PROTO_TEB);
        assert_eq!(p.vni(), 10);
        assert_eq!(p.payload(), &CAPTURED[16..]);
        let opts: Vec<_> = p.option_iter().collect();
        let want = GeneveOption {
            class: 0,
            kind: 0x80,
            data: &[0, 0, 0, 0x0c],
        };
        assert_eq!(opts, [Ok(want)]);
        assert!(want.critical());
        let r = Repr::parse(&p).unwrap();
        assert_eq!(r, Repr::new(10, &CAPTURED[8..16]));
        assert!(r.has_unknown_critical(|_, _| false));
        assert!(!r.has_unknown_critical(|class, kind| (class, kind) == (0, 0x80)));
        let mut out = [0u8; 16];
        assert_eq!(r.emit(&mut out), Ok(16));
        assert_eq!(out, CAPTURED[..16]);
    }

    #[test]
    fn parses_hand_built_header() {
        let p = Packet::new_checked(&HAND[..]).unwrap();
        assert_eq!(p.header_len(), 20);
        assert_eq!((p.oam(), p.critical(), p.vni()), (true, false, 0xab_cdef));
        assert!(p.payload().is_empty());
        let opts: Vec<_> = p.option_iter().collect();
        assert_eq!(
            opts,
            [
                Ok(GeneveOption {
                    class: 0x0102,
                    kind: 5,
                    data: &[0xde, 0xad, 0xbe, 0xef]
                }),
                Ok(GeneveOption {
                    class: 0xffff,
                    kind: 0x7f,
                    data: &[]
                }),
            ]
        );
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                vni: 0xab_cdef,
                protocol: PROTO_TEB,
                oam: true,
                critical: false,
                options: &HAND[8..],
            }
        );
        assert!(!r.has_unknown_critical(|_, _| false));
        // Re-encoding the options clears the R bits, and nothing else.
        let mut enc = [0u8; 12];
        let decoded: Vec<_> = r.option_iter().map(|o| o.unwrap()).collect();
        assert_eq!(emit_options(&decoded, &mut enc), Ok(12));
        let mut want = HAND;
        want[19] = 0x00;
        assert_eq!(enc, want[8..]);
        let mut out = [0u8; 20];
        assert_eq!(Repr { options: &enc, ..r }.emit(&mut out), Ok(20));
        assert_eq!(out, want);
    }

    #[test]
    fn new_computes_critical() {
        let mut buf = [0u8; 16];
        let plain = GeneveOption {
            class: 1,
            kind: 0x01,
            data: &[],
        };
        let crit = GeneveOption {
            class: 1,
            kind: 0x81,
            data: &[1, 2, 3, 4],
        };
        let n = emit_options(&[plain], &mut buf).unwrap();
        let r = Repr::new(7, &buf[..n]);
        assert_eq!((r.critical, r.oam, r.protocol), (false, false, PROTO_TEB));
        let n = emit_options(&[plain, crit], &mut buf).unwrap();
        assert_eq!(n, 12);
        assert!(Repr::new(7, &buf[..n]).critical);
        assert!(!Repr::new(7, &[]).critical);
    }

    #[test]
    fn refuses_unknown_versions() {
        for v in 1..4u8 {
            let mut b = CAPTURED;
            b[0] |= v << 6;
            assert_eq!(
                Packet::new_checked(&b[..]),
                Err(Error::invalid(Layer::Geneve, "version", u32::from(v)))
            );
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&b[..])),
                Err(Error::invalid(Layer::Geneve, "version", u32::from(v)))
            );
        }
    }

    #[test]
    fn every_truncation_is_truncated() {
        for n in 0..20 {
            let need = if n < HEADER_LEN { HEADER_LEN } else { 20 };
            let want = Error::truncated(Layer::Geneve, need, n);
            assert_eq!(Packet::new_checked(&HAND[..n]), Err(want), "{n}");
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&HAND[..n])),
                Err(want),
                "{n}"
            );
        }
        assert!(Packet::new_checked(&HAND[..]).is_ok());
    }

    #[test]
    fn option_running_past_the_end_ends_the_walk() {
        // Opt Len 2 words, but the option claims 2 data words (needs 12 bytes).
        let mut b = CAPTURED;
        b[11] = 0x02;
        let p = Packet::new_checked(&b[..]).unwrap();
        let mut it = p.option_iter();
        assert_eq!(
            it.next(),
            Some(Err(Error::truncated(Layer::GeneveOption, 12, 8)))
        );
        assert_eq!(it.next(), None);
        assert_eq!(
            Repr::parse(&p),
            Err(Error::truncated(Layer::GeneveOption, 12, 8))
        );
        // A cut option header, and a walk resumed after a good option.
        let mut it = OptionIter::new(&[0, 1, 2, 0, 9, 9]);
        assert_eq!(
            it.next(),
            Some(Ok(GeneveOption {
                class: 1,
                kind: 2,
                data: &[]
            }))
        );
        assert_eq!(
            it.next(),
            Some(Err(Error::truncated(Layer::GeneveOption, 4, 2)))
        );
        assert_eq!(it.next(), None);
        // Malformed options count as an unknown critical option.
        let r = Repr {
            options: &[0, 1, 2, 1],
            ..Repr::new(1, &[])
        };
        assert!(r.has_unknown_critical(|_, _| true));
    }

    #[test]
    fn emit_options_refuses_bad_lengths() {
        let mut buf = [0u8; 260];
        let opt = |data| GeneveOption {
            class: 0,
            kind: 0,
            data,
        };
        assert_eq!(
            emit_options(&[opt(&[1, 2, 3])], &mut buf),
            Err(Error::invalid(Layer::GeneveOption, "length", 3))
        );
        assert_eq!(
            emit_options(&[opt(&[0; 128])], &mut buf),
            Err(Error::invalid(Layer::GeneveOption, "length", 128))
        );
        // Two full options take 256 bytes > 252.
        assert_eq!(
            emit_options(&[opt(&[0; 124]), opt(&[0; 124])], &mut buf),
            Err(Error::invalid(Layer::Geneve, "opt_len", 256))
        );
        // 63 empty options fill the header exactly; the 64th is too many.
        let full = [opt(&[]); 64];
        assert_eq!(emit_options(&full[..63], &mut buf), Ok(MAX_OPTIONS_LEN));
        assert_eq!(
            emit_options(&full, &mut buf),
            Err(Error::invalid(Layer::Geneve, "opt_len", 256))
        );
        let mut small = [0u8; 7];
        assert_eq!(
            emit_options(&[opt(&[1, 2, 3, 4])], &mut small),
            Err(Error::BufferTooSmall {
                layer: Layer::Geneve,
                need: 8,
                have: 7
            })
        );
        assert_eq!(small, [0; 7], "a refused emit must not write");
    }

    #[test]
    fn emit_refuses_bad_reprs() {
        let mut buf = [0u8; 300];
        let ok = Repr::new(1, &CAPTURED[8..16]);
        let inv = |f, v| Err(Error::invalid(Layer::Geneve, f, v));
        assert_eq!(
            Repr { vni: 1 << 24, ..ok }.emit(&mut buf),
            inv("vni", 1 << 24)
        );
        assert_eq!(
            Repr {
                options: &[0; 6],
                ..ok
            }
            .emit(&mut buf),
            inv("opt_len", 6)
        );
        assert_eq!(
            Repr {
                options: &[0; 256],
                ..ok
            }
            .emit(&mut buf),
            inv("opt_len", 256)
        );
        assert_eq!(
            Repr {
                critical: false,
                ..ok
            }
            .emit(&mut buf),
            inv("critical", 0)
        );
        assert_eq!(
            Repr {
                options: &[0, 0, 0, 1],
                ..ok
            }
            .emit(&mut buf),
            Err(Error::truncated(Layer::GeneveOption, 8, 4))
        );
        assert_eq!(
            ok.emit(&mut buf[..15]),
            Err(Error::BufferTooSmall {
                layer: Layer::Geneve,
                need: 16,
                have: 15
            })
        );
        assert!(buf.iter().all(|&b| b == 0), "a refused emit must not write");
        // C set without a critical option is allowed (the receiver just parses them).
        assert_eq!(
            Repr {
                critical: true,
                ..Repr::new(1, &[])
            }
            .emit(&mut buf),
            Ok(8)
        );
        assert_eq!(buf[1], FLAG_CRITICAL);
    }

    #[test]
    fn setters_write_the_fields() {
        let mut b = [0u8; 14];
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version(0);
        p.set_opt_len(4);
        p.set_oam(true);
        p.set_critical(true);
        p.set_reserved1(0x3f);
        p.set_protocol(0x0800);
        p.set_vni(0x0112_3456); // the bit above 24 is dropped
        p.set_reserved2(0x99);
        p.options_mut().copy_from_slice(&[0, 1, 0x82, 0]);
        p.payload_mut().copy_from_slice(&[5, 6]);
        assert_eq!(p.reserved1(), 0x3f);
        p.set_oam(false);
        assert_eq!(
            b,
            [
                0x01, 0x7f, 0x08, 0x00, 0x12, 0x34, 0x56, 0x99, 0, 1, 0x82, 0, 5, 6
            ]
        );
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(
            (p.oam(), p.critical(), p.vni(), p.opt_len()),
            (false, true, 0x12_3456, 4)
        );
        // Reserved fields are ignored on receipt.
        let r = Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Repr {
                protocol: 0x0800,
                ..Repr::new(0x12_3456, &[0, 1, 0x82, 0])
            }
        );
        let mut p = Packet::new_unchecked(&mut b[..]);
        p.set_version(3);
        assert_eq!(p.version(), 3);
        assert_eq!(p.opt_len(), 4, "set_version must keep Opt Len");
    }

    /// Option lists whose encoding fits in 0..=63 words.
    fn any_options() -> impl Strategy<Value = Vec<(u16, u8, Vec<u8>)>> {
        let opt = (
            any::<u16>(),
            any::<u8>(),
            (0usize..=31).prop_flat_map(|w| prop::collection::vec(any::<u8>(), 4 * w)),
        );
        prop::collection::vec(opt, 0..=63).prop_map(|mut v| {
            let mut words = 0;
            let keep = v
                .iter()
                .take_while(|(_, _, d)| {
                    words += 1 + d.len() / 4;
                    words <= 63
                })
                .count();
            v.truncate(keep);
            v
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn round_trip(
            opts in any_options(),
            vni in 0u32..1 << 24,
            protocol in any::<u16>(),
            oam in any::<bool>(),
            payload in prop::collection::vec(any::<u8>(), 0..16),
        ) {
            let opts: Vec<_> = opts
                .iter()
                .map(|(class, kind, data)| GeneveOption { class: *class, kind: *kind, data })
                .collect();
            let mut obuf = [0u8; MAX_OPTIONS_LEN];
            let n = emit_options(&opts, &mut obuf).unwrap();
            prop_assert_eq!(n, opts.iter().map(GeneveOption::buffer_len).sum::<usize>());
            let repr = Repr { protocol, oam, ..Repr::new(vni, &obuf[..n]) };
            prop_assert_eq!(repr.critical, opts.iter().any(GeneveOption::critical));
            let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
            prop_assert_eq!(repr.emit(&mut buf), Ok(HEADER_LEN + n));
            buf[HEADER_LEN + n..].copy_from_slice(&payload);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.header_len(), HEADER_LEN + n);
            prop_assert_eq!(Repr::parse(&p), Ok(repr));
            let back: Vec<_> = p.option_iter().collect::<Result<_>>().unwrap();
            prop_assert_eq!(back, opts);
            prop_assert_eq!(p.payload(), &payload[..]);
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            // Iterating raw bytes as options ends, and consumes at most the input.
            let mut walked = 0;
            for o in OptionIter::new(&bytes) {
                match o {
                    Ok(o) => walked += o.buffer_len(),
                    Err(_) => break,
                }
            }
            prop_assert!(walked <= bytes.len());
            // Clear the version half the time so the header view is exercised too.
            let mut b = bytes.clone();
            if let Some(first) = b.first_mut()
                && bytes.len() % 2 == 0 {
                    *first &= 0x3f;
                }
            match Packet::new_checked(&b[..]) {
                Ok(p) => {
                    prop_assert!(p.header_len() <= b.len());
                    let _ = (p.oam(), p.critical(), p.reserved1(), p.protocol(), p.vni());
                    let all_ok = p.option_iter().all(|o| o.is_ok());
                    match Repr::parse(&p) {
                        Ok(r) => {
                            prop_assert!(all_ok);
                            prop_assert_eq!(r.buffer_len(), p.header_len());
                        }
                        Err(e) => {
                            prop_assert!(!all_ok);
                            prop_assert_eq!(e.layer(), Layer::GeneveOption);
                        }
                    }
                }
                Err(_) => prop_assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err()),
            }
        }
    }
}
