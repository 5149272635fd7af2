//! Domain names: from text, to and from the wire with compression
//! (RFC 1035 sections 2.3.4, 3.1 and 4.1.4).
//!
//! A [`Name`] holds its wire form (length-prefixed labels ending in the
//! root's zero byte), at most 255 bytes, labels of 1 to 63 bytes. Names
//! compare and hash without regard to ASCII case (RFC 4343), and keep the
//! case they were given, which is what goes on the wire.
//!
//! Decompression follows pointers only backwards, to an offset before the
//! label that holds the pointer, and at most [`MAX_POINTERS`] of them: a
//! loop or a forward chain is an error, never a hang, and every read is
//! bounds-checked.

use core::fmt;
use core::hash::{Hash, Hasher};

/// Longest name in wire form (RFC 1035 section 3.1).
pub const MAX_NAME: usize = 255;
/// Longest label (RFC 1035 section 2.3.4).
pub const MAX_LABEL: usize = 63;
/// Compression pointers one name may follow. A name of 255 bytes has at most
/// 127 labels, so a well-formed message never needs more.
pub const MAX_POINTERS: usize = 127;

/// Why a name could not be read or written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The message ends inside the name.
    Truncated,
    /// A label is longer than 63 bytes.
    LabelTooLong,
    /// The name is longer than 255 bytes in wire form.
    TooLong,
    /// Text with an empty label (`a..b`, or a leading dot).
    EmptyLabel,
    /// Text with a byte a host name cannot hold (whitespace, a control
    /// character, a backslash: escapes are not taken).
    BadCharacter(u8),
    /// A compression pointer to its own label or later.
    ForwardPointer,
    /// More compression pointers than [`MAX_POINTERS`].
    TooManyPointers,
    /// A label type other than a length or a pointer (`0b01`, `0b10`: RFC 6891
    /// retired the extended label types).
    ReservedLabelType(u8),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Truncated => f.write_str("the message ends inside a name"),
            NameError::LabelTooLong => f.write_str("a label is longer than 63 bytes"),
            NameError::TooLong => f.write_str("the name is longer than 255 bytes"),
            NameError::EmptyLabel => f.write_str("the name has an empty label"),
            NameError::BadCharacter(b) => write!(f, "byte {b:#04x} cannot be in a host name"),
            NameError::ForwardPointer => {
                f.write_str("a compression pointer does not point backwards")
            }
            NameError::TooManyPointers => f.write_str("too many compression pointers"),
            NameError::ReservedLabelType(t) => write!(f, "reserved label type {t:#04x}"),
        }
    }
}

impl std::error::Error for NameError {}

/// A domain name (see the [module docs](self)).
#[derive(Clone)]
pub struct Name {
    /// Wire form, ending with the root label's zero byte.
    wire: Vec<u8>,
}

impl Name {
    /// The root name (`.`).
    pub fn root() -> Name {
        Name { wire: vec![0] }
    }

    /// Parses dotted text: `example.test` or `example.test.` (always taken as
    /// absolute; there are no search domains). Any byte but whitespace,
    /// control characters, `\` and `.` may be in a label.
    pub fn from_ascii(text: &str) -> Result<Name, NameError> {
        let text = text.strip_suffix('.').unwrap_or(text);
        if text.is_empty() {
            return Ok(Name::root());
        }
        let mut wire = Vec::with_capacity(text.len() + 2);
        for label in text.split('.') {
            if label.is_empty() {
                return Err(NameError::EmptyLabel);
            }
            if label.len() > MAX_LABEL {
                return Err(NameError::LabelTooLong);
            }
            if let Some(&b) = label
                .as_bytes()
                .iter()
                .find(|&&b| b <= b' ' || b == b'\\' || b == 0x7f)
            {
                return Err(NameError::BadCharacter(b));
            }
            wire.push(label.len() as u8);
            wire.extend_from_slice(label.as_bytes());
        }
        wire.push(0);
        if wire.len() > MAX_NAME {
            return Err(NameError::TooLong);
        }
        Ok(Name { wire })
    }

    /// The wire form (uncompressed), ending with the root's zero byte.
    pub fn as_wire(&self) -> &[u8] {
        &self.wire
    }

    /// True for the root name.
    pub fn is_root(&self) -> bool {
        self.wire.len() == 1
    }

    /// The labels, first to last (the root's empty label not included).
    pub fn labels(&self) -> Labels<'_> {
        Labels { rest: &self.wire }
    }

    /// Reads the name that starts at `at` in `msg`, following compression
    /// pointers; returns it and the offset just after it (after the first
    /// pointer, if any).
    pub fn decode(msg: &[u8], at: usize) -> Result<(Name, usize), NameError> {
        let mut wire = Vec::with_capacity(32);
        let mut pos = at;
        // Where reading resumes in the record: after the first pointer.
        let mut end = None;
        let mut pointers = 0;
        loop {
            let len = *msg.get(pos).ok_or(NameError::Truncated)?;
            match len >> 6 {
                0b00 => {
                    let len = usize::from(len);
                    if len == 0 {
                        wire.push(0);
                        if wire.len() > MAX_NAME {
                            return Err(NameError::TooLong);
                        }
                        let next = end.unwrap_or(pos + 1);
                        return Ok((Name { wire }, next));
                    }
                    let label = msg
                        .get(pos + 1..pos + 1 + len)
                        .ok_or(NameError::Truncated)?;
                    // The root's byte still has to fit.
                    if wire.len() + 1 + len + 1 > MAX_NAME {
                        return Err(NameError::TooLong);
                    }
                    wire.push(len as u8);
                    wire.extend_from_slice(label);
                    pos += 1 + len;
                }
                0b11 => {
                    let low = *msg.get(pos + 1).ok_or(NameError::Truncated)?;
                    let target = (usize::from(len & 0x3f) << 8) | usize::from(low);
                    if target >= pos {
                        return Err(NameError::ForwardPointer);
                    }
                    pointers += 1;
                    if pointers > MAX_POINTERS {
                        return Err(NameError::TooManyPointers);
                    }
                    end.get_or_insert(pos + 2);
                    pos = target;
                }
                _ => return Err(NameError::ReservedLabelType(len)),
            }
        }
    }

    /// True if `self` is `other` or below it (`www.example.test` is in
    /// `example.test` and in the root).
    pub fn is_subdomain_of(&self, other: &Name) -> bool {
        let a = self.as_wire();
        let b = other.as_wire();
        if b.len() > a.len() {
            return false;
        }
        // Walk `self`'s labels until the rest is as long as `other`; it must
        // be a label boundary and equal.
        let mut rest = a;
        while rest.len() > b.len() {
            let skip = usize::from(rest.first().copied().unwrap_or(0)) + 1;
            rest = rest.get(skip..).unwrap_or_default();
        }
        rest.len() == b.len() && rest.eq_ignore_ascii_case(b)
    }
}

/// The labels of a [`Name`], from [`Name::labels`].
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let len = usize::from(*self.rest.first()?);
        if len == 0 {
            return None;
        }
        let label = self.rest.get(1..1 + len)?;
        self.rest = self.rest.get(1 + len..)?;
        Some(label)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        self.wire.eq_ignore_ascii_case(&other.wire)
    }
}

impl Eq for Name {}

impl Hash for Name {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for b in &self.wire {
            h.write_u8(b.to_ascii_lowercase());
        }
    }
}

impl fmt::Display for Name {
    /// Dotted text, with a trailing dot for the root alone; bytes outside
    /// printable ASCII, and dots or backslashes inside a label, as `\DDD`
    /// (RFC 1035 section 5.1).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_root() {
            return f.write_str(".");
        }
        for (i, label) in self.labels().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            for &b in label {
                if b.is_ascii_graphic() && b != b'.' && b != b'\\' {
                    write!(f, "{}", b as char)?;
                } else {
                    write!(f, "\\{b:03}")?;
                }
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({self})")
    }
}

impl core::str::FromStr for Name {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Name, NameError> {
        Name::from_ascii(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1035 section 4.1.4's example: F.ISI.ARPA at offset 20, FOO.F.ISI.ARPA
    /// at 40 as a label and a pointer to 20, ARPA at 64 as a pointer to 26,
    /// and the root at 92 (as a zero byte).
    fn rfc1035_example() -> Vec<u8> {
        let mut m = vec![0xaa; 20];
        m.extend_from_slice(b"\x01F\x03ISI\x04ARPA\x00");
        m.resize(40, 0xbb);
        m.extend_from_slice(b"\x03FOO\xc0\x14");
        m.resize(64, 0xcc);
        m.extend_from_slice(b"\xc0\x1a");
        m.resize(92, 0xdd);
        m.push(0);
        m
    }

    #[test]
    fn rfc1035_compression_example() {
        let m = rfc1035_example();
        let (n, next) = Name::decode(&m, 20).unwrap();
        assert_eq!(n.to_string(), "F.ISI.ARPA");
        assert_eq!(next, 32);
        let (n, next) = Name::decode(&m, 40).unwrap();
        assert_eq!(n.to_string(), "FOO.F.ISI.ARPA");
        assert_eq!(next, 46);
        let (n, next) = Name::decode(&m, 64).unwrap();
        assert_eq!(n.to_string(), "ARPA");
        assert_eq!(next, 66);
        let (n, next) = Name::decode(&m, 92).unwrap();
        assert!(n.is_root());
        assert_eq!(next, 93);
        assert_eq!(n.to_string(), ".");
    }

    #[test]
    fn text_round_trip_and_case() {
        let a = Name::from_ascii("WWW.Example.test.").unwrap();
        let b: Name = "www.example.TEST".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "WWW.Example.test");
        assert_eq!(a.as_wire(), b"\x03WWW\x07Example\x04test\x00");
        use std::hash::BuildHasher;
        let s = std::collections::hash_map::RandomState::new();
        assert_eq!(s.hash_one(&a), s.hash_one(&b));
        assert!(a.is_subdomain_of(&"example.test".parse().unwrap()));
        assert!(a.is_subdomain_of(&Name::root()));
        assert!(!a.is_subdomain_of(&"ample.test".parse().unwrap()));
    }

    #[test]
    fn text_limits() {
        assert_eq!(Name::from_ascii("a..b"), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii(".a"), Err(NameError::EmptyLabel));
        assert_eq!(Name::from_ascii("a b"), Err(NameError::BadCharacter(b' ')));
        let long = "x".repeat(64);
        assert_eq!(Name::from_ascii(&long), Err(NameError::LabelTooLong));
        // 4 labels of 63 bytes: 256 bytes of wire form with the root byte.
        let l63 = "y".repeat(63);
        let too_long = [l63.as_str(); 4].join(".");
        assert_eq!(Name::from_ascii(&too_long), Err(NameError::TooLong));
        // 3 of 63 and one of 61: exactly 255.
        let ok = format!("{l63}.{l63}.{l63}.{}", "z".repeat(61));
        assert_eq!(Name::from_ascii(&ok).unwrap().as_wire().len(), 255);
    }

    #[test]
    fn hostile_pointers() {
        // A pointer to itself, a pointer forward, a two-pointer loop.
        assert_eq!(Name::decode(b"\xc0\x00", 0), Err(NameError::ForwardPointer));
        assert_eq!(
            Name::decode(b"\xc0\x02\x00", 0),
            Err(NameError::ForwardPointer)
        );
        assert_eq!(
            Name::decode(b"\x00\xc0\x03\xc0\x01", 3),
            Err(NameError::ForwardPointer)
        );
        // A long backward chain of pointers, each to the one before.
        let mut m = vec![0u8];
        for i in 0..200u16 {
            let at = 1 + 2 * i;
            let to = if i == 0 { 0 } else { at - 2 };
            m.extend_from_slice(&(0xc000 | to).to_be_bytes());
        }
        let last = m.len() - 2;
        assert_eq!(Name::decode(&m, last), Err(NameError::TooManyPointers));
        assert_eq!(Name::decode(&m, 1 + 2 * 10).unwrap().0, Name::root());
        // Labels whose sum passes 255 through pointers.
        let mut m2 = vec![63];
        m2.extend_from_slice(&[b'a'; 63]);
        m2.push(0);
        let mut at = 0u16;
        for _ in 0..4 {
            let here = m2.len() as u16;
            m2.push(63);
            m2.extend_from_slice(&[b'b'; 63]);
            m2.extend_from_slice(&(0xc000 | at).to_be_bytes());
            at = here;
        }
        assert_eq!(Name::decode(&m2, usize::from(at)), Err(NameError::TooLong));
        assert_eq!(
            Name::decode(b"\x40", 0),
            Err(NameError::ReservedLabelType(0x40))
        );
        assert_eq!(
            Name::decode(b"\x80", 0),
            Err(NameError::ReservedLabelType(0x80))
        );
        assert_eq!(Name::decode(b"\x05abc", 0), Err(NameError::Truncated));
        assert_eq!(Name::decode(b"\xc0", 1), Err(NameError::Truncated));
        assert_eq!(Name::decode(b"\xc0", 0), Err(NameError::Truncated));
    }
}
