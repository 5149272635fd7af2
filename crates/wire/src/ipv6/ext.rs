//! The IPv6 extension header chain (RFC 8200 section 4), walked with a bound.
//!
//! Hop-by-Hop Options (0), Routing (43), Destination Options (60) and Mobility (135)
//! share the generic "next header, length in 8-octet units not counting the first 8"
//! shape; Fragment (44) is a fixed 8 bytes; Authentication Header (51, RFC 4302)
//! counts its length in 4-octet units minus 2. The walk stops at the first header
//! that is not an extension (the upper-layer protocol), at ESP (50, whose contents
//! are encrypted) and at No Next Header (59). A non-first fragment ends the walk
//! too: what follows its header is not a header. At most [`MAX_EXTENSIONS`] headers
//! are walked; a longer chain is refused, like Linux's GRO and most NICs do.

use crate::error::{Error, Layer, Result};
use crate::ipv4::protocol::{AH, DEST_OPTS, FRAGMENT, HOP_BY_HOP, MOBILITY, ROUTING};

/// The most extension headers the walk will step over.
pub const MAX_EXTENSIONS: usize = 8;

/// What an IPv6 Fragment header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FragmentInfo {
    /// Fragment offset in 8-octet units.
    pub offset: u16,
    /// More fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
    /// Where the Fragment header starts, in bytes from the start of the chain
    /// (the end of the fixed header): the length of the unfragmentable part's
    /// extension headers (RFC 8200 section 4.5).
    pub at: usize,
}

impl FragmentInfo {
    /// True for the first fragment (offset zero): it carries the upper-layer header.
    pub const fn is_first(&self) -> bool {
        self.offset == 0
    }
}

/// The result of walking an extension header chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExtChain {
    /// The protocol after the last extension header walked (the upper layer, or
    /// ESP, No Next Header, or, for a non-first fragment, the fragment's protocol).
    pub next_header: u8,
    /// Total bytes of the extension headers walked.
    pub len: usize,
    /// Number of extension headers walked.
    pub count: u8,
    /// The Fragment header, if there was one.
    pub fragment: Option<FragmentInfo>,
}

/// True if `next_header` names an extension header this walk steps over.
pub const fn is_extension(next_header: u8) -> bool {
    matches!(
        next_header,
        HOP_BY_HOP | ROUTING | FRAGMENT | AH | DEST_OPTS | MOBILITY
    )
}

/// Walks the chain that starts with protocol `next_header` at the start of `data`
/// (the bytes right after the fixed IPv6 header).
pub fn walk(mut next_header: u8, data: &[u8]) -> Result<ExtChain> {
    let mut chain = ExtChain {
        next_header,
        ..ExtChain::default()
    };
    let mut off = 0usize;
    while is_extension(next_header) {
        if usize::from(chain.count) == MAX_EXTENSIONS {
            return Err(Error::TooMany {
                layer: Layer::Ipv6Ext,
                limit: MAX_EXTENSIONS,
            });
        }
        // RFC 8200 section 4.1: Hop-by-Hop Options only right after the fixed header.
        if next_header == HOP_BY_HOP && chain.count > 0 {
            return Err(Error::invalid(
                Layer::Ipv6Ext,
                "next_header",
                u32::from(HOP_BY_HOP),
            ));
        }
        let rest = data.get(off..).unwrap_or_default();
        let (Some(&nh), Some(&len_byte)) = (rest.first(), rest.get(1)) else {
            return Err(Error::truncated(Layer::Ipv6Ext, 8, rest.len()));
        };
        let hdr_len = match next_header {
            FRAGMENT => 8,
            AH => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        if rest.len() < hdr_len {
            return Err(Error::truncated(Layer::Ipv6Ext, hdr_len, rest.len()));
        }
        if next_header == FRAGMENT {
            let word = |i: usize| rest.get(i).copied().unwrap_or(0);
            let off_flags = u16::from_be_bytes([word(2), word(3)]);
            let frag = FragmentInfo {
                offset: off_flags >> 3,
                more: off_flags & 1 == 1,
                ident: u32::from_be_bytes([word(4), word(5), word(6), word(7)]),
                at: off,
            };
            chain.fragment = Some(frag);
            chain.count += 1;
            off += hdr_len;
            chain.len = off;
            chain.next_header = nh;
            if !frag.is_first() {
                return Ok(chain);
            }
        } else {
            chain.count += 1;
            off += hdr_len;
            chain.len = off;
            chain.next_header = nh;
        }
        next_header = nh;
    }
    Ok(chain)
}

/// True if the chain holds a first Fragment header (offset 0) after which it
/// ends before its upper-layer header does: RFC 7112's "incomplete header
/// chain", for a chain [`walk`] refused. `upper_len` gives the least bytes of
/// an upper-layer header (`None` for a protocol whose header is not checked).
pub fn first_fragment_truncated(
    next_header: u8,
    data: &[u8],
    upper_len: impl Fn(u8) -> Option<usize>,
) -> bool {
    let mut nh = next_header;
    let mut off = 0usize;
    let mut first = false;
    for _ in 0..=MAX_EXTENSIONS {
        let rest = data.get(off..).unwrap_or_default();
        if !is_extension(nh) {
            return first && upper_len(nh).is_some_and(|n| rest.len() < n);
        }
        let (Some(&next), Some(&len_byte)) = (rest.first(), rest.get(1)) else {
            return first;
        };
        let hdr_len = match nh {
            FRAGMENT => 8,
            AH => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        if rest.len() < hdr_len {
            return first;
        }
        if nh == FRAGMENT {
            let off_flags = u16::from_be_bytes([
                rest.get(2).copied().unwrap_or(0),
                rest.get(3).copied().unwrap_or(0),
            ]);
            if off_flags >> 3 != 0 {
                return false;
            }
            first = true;
        }
        off += hdr_len;
        nh = next;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{IpNumber, Ipv6Extensions, Ipv6FragmentHeader, Ipv6RawExtHeader};

    #[test]
    fn no_extensions() {
        let c = walk(6, &[]).unwrap();
        assert_eq!(
            c,
            ExtChain {
                next_header: 6,
                len: 0,
                count: 0,
                fragment: None
            }
        );
    }

    #[test]
    fn chain_written_by_etherparse() {
        let mut exts = Ipv6Extensions {
            hop_by_hop_options: Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &[0; 14]).unwrap()),
            destination_options: Some(Ipv6RawExtHeader::new_raw(IpNumber(0), &[1; 6]).unwrap()),
            fragment: Some(Ipv6FragmentHeader::new(
                IpNumber(0),
                etherparse::IpFragOffset::ZERO,
                true,
                0xdead_beef,
            )),
            ..Ipv6Extensions::default()
        };
        let mut bytes = Vec::new();
        let first = exts.set_next_headers(IpNumber::TCP);
        assert_eq!(first, IpNumber::IPV6_HEADER_HOP_BY_HOP);
        exts.write(&mut bytes, first).unwrap();
        let c = walk(HOP_BY_HOP, &bytes).unwrap();
        assert_eq!(c.next_header, 6);
        assert_eq!(c.len, bytes.len());
        assert_eq!(c.count, 3);
        assert_eq!(
            c.fragment,
            Some(FragmentInfo {
                offset: 0,
                more: true,
                ident: 0xdead_beef,
                at: 24,
            })
        );
    }

    #[test]
    fn hop_by_hop_only_first() {
        // Destination options, then a hop-by-hop header: refused (Linux drops it too).
        let bytes = [0, 0, 1, 4, 0, 0, 0, 0, 6, 0, 1, 4, 0, 0, 0, 0];
        assert_eq!(
            walk(DEST_OPTS, &bytes).unwrap_err(),
            Error::invalid(Layer::Ipv6Ext, "next_header", 0)
        );
        assert_eq!(walk(HOP_BY_HOP, &bytes[8..]).unwrap().next_header, 6);
    }

    #[test]
    fn later_fragment_stops_the_walk() {
        // Fragment header, offset 100 units, next header TCP; the payload is not a header.
        let bytes = [6, 0, 0x03, 0x20, 0, 0, 0, 7, 0xff, 0xff];
        let c = walk(FRAGMENT, &bytes).unwrap();
        assert_eq!(c.fragment.unwrap().offset, 100);
        assert_eq!((c.next_header, c.len), (6, 8));
    }

    #[test]
    fn bounded_and_truncated() {
        // Nine empty destination-options headers, each pointing to the next.
        let bytes: Vec<u8> = (0..9)
            .flat_map(|_| [DEST_OPTS, 0, 1, 4, 0, 0, 0, 0])
            .collect();
        assert_eq!(
            walk(DEST_OPTS, &bytes).unwrap_err(),
            Error::TooMany {
                layer: Layer::Ipv6Ext,
                limit: MAX_EXTENSIONS
            }
        );
        assert_eq!(
            walk(DEST_OPTS, &[6, 1, 0, 0]).unwrap_err(),
            Error::truncated(Layer::Ipv6Ext, 16, 4)
        );
        assert_eq!(
            walk(ROUTING, &[6]).unwrap_err(),
            Error::truncated(Layer::Ipv6Ext, 8, 1)
        );
    }

    #[test]
    fn incomplete_chain_after_a_first_fragment() {
        let udp = |nh: u8| (nh == 17).then_some(8);
        // Fragment (offset 0, M) then a destination-options header cut short.
        let cut = [DEST_OPTS, 0, 0, 1, 0, 0, 0, 1, 17, 1, 0, 0];
        assert!(walk(FRAGMENT, &cut).is_err());
        assert!(first_fragment_truncated(FRAGMENT, &cut, udp));
        // Fragment then a UDP header of 4 bytes: the upper-layer header is cut.
        let short = [17, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4];
        assert!(first_fragment_truncated(FRAGMENT, &short, udp));
        let whole = [17, 0, 0, 1, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8];
        assert!(!first_fragment_truncated(FRAGMENT, &whole, udp));
        // A later fragment, or no fragment at all: not this case.
        let later = [DEST_OPTS, 0, 0, 9, 0, 0, 0, 1, 17, 1, 0, 0];
        assert!(!first_fragment_truncated(FRAGMENT, &later, udp));
        assert!(!first_fragment_truncated(DEST_OPTS, &[17, 1, 0, 0], udp));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(nh in proptest::prelude::any::<u8>(), data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            if let Ok(c) = walk(nh, &data) {
                proptest::prop_assert!(c.len <= data.len());
                proptest::prop_assert!(usize::from(c.count) <= MAX_EXTENSIONS);
            }
        }
    }
}
