//! VXLAN (RFC 7348): a checked view over the 8-byte header and its inner Ethernet
//! frame, and a [`Repr`] that parses and emits it.
//!
//! The header (RFC 7348 section 5, "VXLAN Header"):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |R|R|R|R|I|R|R|R|            Reserved                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                VXLAN Network Identifier (VNI) |   Reserved    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! It rides in UDP, destination port [`PORT`] (4789, RFC 7348 section 5); Linux uses
//! [`LINUX_PORT`] (8472) when no port is configured. The payload is an Ethernet frame.
//!
//! **Receive rule, stricter than the RFC.** RFC 7348 section 5 says reserved fields
//! "MUST be set to zero on transmission and ignored on receipt". Linux's VXLAN device
//! instead drops a packet whose I flag is clear or which has any bit set outside the I
//! flag and the VNI (all other bits are "reserved bits" unless an extension such as GBP
//! or GPE is configured). [`Repr::parse`] follows Linux, so that linerate and a kernel
//! peer accept exactly the same packets: a clear I flag, another flag bit, or a non-zero
//! reserved field is [`Error::Invalid`]. The [`Packet`] view itself judges nothing but
//! the length, so a caller wanting the RFC's leniency can read [`Packet::vni`]
//! directly. On transmit, [`Repr::emit`] writes every reserved bit as zero.
//!
//! ```
//! use linerate_wire::vxlan::{Packet, Repr};
//! let mut buf = [0u8; 8 + 14]; // header and an inner Ethernet header
//! let n = Repr { vni: 42 }.emit(&mut buf).unwrap();
//! assert_eq!(buf[..n], [0x08, 0, 0, 0, 0, 0, 42, 0]);
//! let p = Packet::new_checked(&buf[..]).unwrap();
//! assert_eq!(Repr::parse(&p).unwrap().vni, 42);
//! assert_eq!(p.payload().len(), 14);
//! ```

use crate::error::{Error, Layer, Result};

/// Field offsets.
pub mod field {
    use core::ops::Range;
    /// Flags byte (only I = 0x08 is defined).
    pub const FLAGS: usize = 0;
    /// The 24 reserved bits after the flags.
    pub const RESERVED1: Range<usize> = 1..4;
    /// VXLAN Network Identifier (24 bits).
    pub const VNI: Range<usize> = 4..7;
    /// The reserved last byte.
    pub const RESERVED2: usize = 7;
    /// The inner Ethernet frame.
    pub const PAYLOAD: core::ops::RangeFrom<usize> = 8..;
}

/// Length of the VXLAN header.
pub const HEADER_LEN: usize = 8;
/// IANA-assigned UDP destination port (RFC 7348 section 5).
pub const PORT: u16 = 4789;
/// The port Linux's VXLAN device uses when none is given.
pub const LINUX_PORT: u16 = 8472;
/// The I flag: "the VNI is valid"; must be set (RFC 7348 section 5).
pub const FLAG_I: u8 = 0x08;

/// Largest VNI plus one: the VNI is 24 bits.
const VNI_LIMIT: u32 = 1 << 24;

/// A view over a VXLAN packet (header and inner Ethernet frame).
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

    /// Wraps `buffer` after checking that it holds the 8-byte header. Flags and
    /// reserved bits are not judged here; [`Repr::parse`] does that.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        crate::error::need(Layer::Vxlan, self.buffer.as_ref(), HEADER_LEN)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u24_at(&self, r: core::ops::Range<usize>) -> u32 {
        let b = &self.buffer.as_ref()[r];
        u32::from_be_bytes([0, b[0], b[1], b[2]])
    }

    /// The flags byte (I = [`FLAG_I`]; the other bits are reserved).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The 24 reserved bits after the flags byte.
    pub fn reserved1(&self) -> u32 {
        self.u24_at(field::RESERVED1)
    }

    /// The VXLAN Network Identifier (24 bits).
    pub fn vni(&self) -> u32 {
        self.u24_at(field::VNI)
    }

    /// The reserved last byte of the header.
    pub fn reserved2(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED2]
    }

    /// The inner Ethernet frame: everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u24_at(&mut self, r: core::ops::Range<usize>, v: u32) {
        let [_, a, b, c] = v.to_be_bytes();
        self.buffer.as_mut()[r].copy_from_slice(&[a, b, c]);
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }

    /// Sets the 24 reserved bits after the flags; bits above the low 24 are dropped.
    pub fn set_reserved1(&mut self, v: u32) {
        self.set_u24_at(field::RESERVED1, v);
    }

    /// Sets the VNI; bits above the low 24 are dropped ([`Repr::emit`] refuses them).
    pub fn set_vni(&mut self, v: u32) {
        self.set_u24_at(field::VNI, v);
    }

    /// Sets the reserved last byte.
    pub fn set_reserved2(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED2] = v;
    }

    /// The inner Ethernet frame, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// A parsed VXLAN header: all it carries is the VNI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// VXLAN Network Identifier, below `1 << 24`.
    pub vni: u32,
}

impl Repr {
    /// Parses the header of `p`.
    ///
    /// Errors: [`Error::Truncated`] if the buffer is shorter than 8 bytes;
    /// [`Error::Invalid`] with field `"flags"` if the I flag is clear or another flag
    /// bit is set, `"reserved1"` or `"reserved2"` if a reserved field is non-zero (the
    /// Linux rule, see the module docs).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Repr> {
        p.check_len()?;
        let flags = p.flags();
        if flags != FLAG_I {
            return Err(Error::invalid(Layer::Vxlan, "flags", u32::from(flags)));
        }
        let r1 = p.reserved1();
        if r1 != 0 {
            return Err(Error::invalid(Layer::Vxlan, "reserved1", r1));
        }
        let r2 = p.reserved2();
        if r2 != 0 {
            return Err(Error::invalid(Layer::Vxlan, "reserved2", u32::from(r2)));
        }
        Ok(Repr { vni: p.vni() })
    }

    /// Bytes [`Repr::emit`] writes: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the 8-byte header (I flag set, reserved bits zero) at the start of
    /// `buf` and returns the bytes written.
    ///
    /// Errors: [`Error::Invalid`] `"vni"` if the VNI does not fit in 24 bits;
    /// [`Error::BufferTooSmall`] if `buf` is shorter than 8 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        if self.vni >= VNI_LIMIT {
            return Err(Error::invalid(Layer::Vxlan, "vni", self.vni));
        }
        let Some(hdr) = buf.get_mut(..HEADER_LEN) else {
            return Err(Error::BufferTooSmall {
                layer: Layer::Vxlan,
                need: HEADER_LEN,
                have: buf.len(),
            });
        };
        let [_, a, b, c] = self.vni.to_be_bytes();
        hdr.copy_from_slice(&[FLAG_I, 0, 0, 0, a, b, c, 0]);
        Ok(HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// RFC 7348 section 5 layout, VNI 0x123456, followed by two payload bytes.
    const RFC_BYTES: [u8; 10] = [0x08, 0x00, 0x00, 0x00, 0x12, 0x34, 0x56, 0x00, 0xaa, 0xbb];

    #[test]
    fn parses_rfc_layout() {
        let p = Packet::new_checked(&RFC_BYTES[..]).unwrap();
        assert_eq!(p.flags(), FLAG_I);
        assert_eq!(p.reserved1(), 0);
        assert_eq!(p.vni(), 0x12_3456);
        assert_eq!(p.reserved2(), 0);
        assert_eq!(p.payload(), &[0xaa, 0xbb]);
        assert_eq!(Repr::parse(&p), Ok(Repr { vni: 0x12_3456 }));
    }

    #[test]
    fn emits_rfc_layout() {
        let mut buf = [0xffu8; 9];
        assert_eq!(Repr { vni: 0x12_3456 }.emit(&mut buf), Ok(8));
        assert_eq!(buf[..8], RFC_BYTES[..8]);
        assert_eq!(buf[8], 0xff, "emit wrote past the header");
        assert_eq!(Repr { vni: 1 }.buffer_len(), HEADER_LEN);
    }

    #[test]
    fn ports_are_the_assigned_ones() {
        assert_eq!((PORT, LINUX_PORT), (4789, 8472));
    }

    #[test]
    fn every_truncation_is_truncated() {
        for n in 0..HEADER_LEN {
            let b = &RFC_BYTES[..n];
            assert_eq!(
                Packet::new_checked(b),
                Err(Error::truncated(Layer::Vxlan, 8, n))
            );
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(b)),
                Err(Error::truncated(Layer::Vxlan, 8, n))
            );
        }
        assert!(
            Packet::new_checked(&RFC_BYTES[..HEADER_LEN])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn flags_and_reserved_bits_are_refused() {
        let parse = |b: [u8; 8]| Repr::parse(&Packet::new_checked(&b[..]).unwrap());
        let inv = |f, v| Err(Error::invalid(Layer::Vxlan, f, v));
        assert_eq!(parse([0, 0, 0, 0, 0, 0, 1, 0]), inv("flags", 0));
        assert_eq!(parse([0x0c, 0, 0, 0, 0, 0, 1, 0]), inv("flags", 0x0c));
        assert_eq!(parse([0x88, 0, 0, 0, 0, 0, 1, 0]), inv("flags", 0x88));
        assert_eq!(parse([0x08, 0, 1, 0, 0, 0, 1, 0]), inv("reserved1", 0x100));
        assert_eq!(
            parse([0x08, 0, 0, 0, 0, 0, 1, 0x80]),
            inv("reserved2", 0x80)
        );
        assert_eq!(
            parse([0x08, 0, 0, 0, 0xff, 0xff, 0xff, 0]),
            Ok(Repr { vni: 0xff_ffff })
        );
    }

    #[test]
    fn emit_refuses_wide_vni_and_short_buffer() {
        let mut buf = [0u8; 8];
        assert_eq!(
            Repr { vni: 1 << 24 }.emit(&mut buf),
            Err(Error::invalid(Layer::Vxlan, "vni", 1 << 24))
        );
        assert_eq!(buf, [0; 8], "a refused emit must not write");
        assert_eq!(
            Repr { vni: 7 }.emit(&mut buf[..7]),
            Err(Error::BufferTooSmall {
                layer: Layer::Vxlan,
                need: 8,
                have: 7
            })
        );
    }

    #[test]
    fn setters_write_the_fields() {
        let mut buf = [0u8; 10];
        let mut p = Packet::new_checked(&mut buf[..]).unwrap();
        p.set_flags(FLAG_I);
        p.set_reserved1(0xab_cdef);
        p.set_vni(0x0165_4321); // the bit above 24 is dropped
        p.set_reserved2(0x11);
        p.payload_mut().copy_from_slice(&[1, 2]);
        assert_eq!(p.reserved1(), 0xab_cdef);
        assert_eq!(p.vni(), 0x65_4321);
        assert_eq!(p.reserved2(), 0x11);
        assert_eq!(
            p.into_inner(),
            &[0x08, 0xab, 0xcd, 0xef, 0x65, 0x43, 0x21, 0x11, 1, 2]
        );
    }

    proptest! {
        #[test]
        fn round_trip(vni in 0u32..1 << 24, payload in prop::collection::vec(any::<u8>(), 0..16)) {
            let repr = Repr { vni };
            let mut buf = vec![0u8; repr.buffer_len() + payload.len()];
            prop_assert_eq!(repr.emit(&mut buf), Ok(HEADER_LEN));
            buf[HEADER_LEN..].copy_from_slice(&payload);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(Repr::parse(&p), Ok(repr));
            prop_assert_eq!(p.payload(), &payload[..]);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..24)) {
            match Packet::new_checked(&bytes[..]) {
                Ok(p) => {
                    let ok = Repr::parse(&p).is_ok();
                    let clean = bytes[0] == FLAG_I && bytes[1..4] == [0; 3] && bytes[7] == 0;
                    prop_assert_eq!(ok, clean);
                    prop_assert_eq!(p.payload().len(), bytes.len() - HEADER_LEN);
                }
                Err(e) => prop_assert_eq!(e, Error::truncated(Layer::Vxlan, 8, bytes.len())),
            }
        }
    }
}
