//! IPv6 Neighbor Discovery (RFC 4861): Neighbor Solicitation (section 4.3) and
//! Advertisement (section 4.4) with their link-layer address options (section
//! 4.6.1), checked as section 7.1.1 / 7.1.2 ask of the message itself (code 0,
//! 24 bytes at least, every option longer than zero). The IP-level checks (hop
//! limit 255, addresses) need the IPv6 header and are the caller's.
//!
//! Options iterate with bounds checks ([`options`], [`Neighbor::options_iter`]);
//! errors are [`Layer::Icmpv6`]: `"option length"` for a zero length, or
//! [`Error::Truncated`] for an option running past the end (`need` / `have`
//! counted from the start of the message for a [`Neighbor`], from the start of the
//! slice for [`options`]). Also here: the solicited-node multicast address
//! (RFC 4291 section 2.7.1) and the Ethernet multicast MAC (RFC 2464 section 7)
//! a solicitation goes to.

use super::v6::{self, Addrs, msg_type};
use super::{HEADER_LEN, be16};
use crate::error::{Error, Layer, Result, need};
use etherparse::icmpv6::NeighborAdvertisementHeader;

/// NDP option types (RFC 4861 section 4.6).
pub mod option_type {
    /// Source link-layer address.
    pub const SOURCE_LL_ADDR: u8 = 1;
    /// Target link-layer address.
    pub const TARGET_LL_ADDR: u8 = 2;
    /// Prefix information.
    pub const PREFIX_INFO: u8 = 3;
    /// Redirected header.
    pub const REDIRECTED_HEADER: u8 = 4;
    /// MTU.
    pub const MTU: u8 = 5;
}

/// Length of an NS or NA without options: header and target address.
pub const NEIGHBOR_LEN: usize = HEADER_LEN + 16;
/// Length of a link-layer address option for Ethernet (one 8-byte unit).
pub const LL_ADDR_OPTION_LEN: usize = 8;

const ROUTER: u8 = 0x80;
const SOLICITED: u8 = 0x40;
const OVERRIDE: u8 = 0x20;

/// One NDP option: its type and the bytes after the type and length bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NdpOption<'a> {
    /// Option type ([`option_type`]).
    pub kind: u8,
    /// Option data: 8 times the length field, minus 2 bytes.
    pub data: &'a [u8],
}

impl NdpOption<'_> {
    /// The Ethernet address of a source or target link-layer address option.
    pub fn lladdr(&self) -> Option<[u8; 6]> {
        match (self.kind, self.data) {
            (option_type::SOURCE_LL_ADDR | option_type::TARGET_LL_ADDR, [a, b, c, d, e, f, ..]) => {
                Some([*a, *b, *c, *d, *e, *f])
            }
            _ => None,
        }
    }
}

/// Iterates over the NDP options in `bytes`; see the [module docs](self).
pub fn options(bytes: &[u8]) -> NdpOptions<'_> {
    NdpOptions { rest: bytes, at: 0 }
}

/// Iterator over NDP options; see [`options`].
#[derive(Debug, Clone)]
pub struct NdpOptions<'a> {
    rest: &'a [u8],
    /// Offset of `rest` from where errors are counted.
    at: usize,
}

impl<'a> NdpOptions<'a> {
    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }
}

impl<'a> Iterator for NdpOptions<'a> {
    type Item = Result<NdpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let data = self.rest;
        let &kind = data.first()?;
        let end = self.at + data.len();
        let r = match data.get(1).map(|&l| usize::from(l) * 8) {
            None => Err(Error::truncated(Layer::Icmpv6, self.at + 2, end)),
            Some(0) => Err(Error::invalid(Layer::Icmpv6, "option length", 0)),
            Some(len) => match (data.get(2..len), data.get(len..)) {
                (Some(body), Some(rest)) => {
                    self.rest = rest;
                    self.at += len;
                    return Some(Ok(NdpOption { kind, data: body }));
                }
                _ => Err(Error::truncated(Layer::Icmpv6, self.at + len, end)),
            },
        };
        self.rest = &[];
        Some(r)
    }
}

/// A view over a Neighbor Solicitation (type 135) or Advertisement (type 136).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbor<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Neighbor<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// [`NEIGHBOR_LEN`]. Use [`Neighbor::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Neighbor { buffer }
    }

    /// Wraps `buffer` after checking, in this order: the 8-byte header, type 135 or
    /// 136 (`"type"`), code 0 (`"code"`), the target address, then every option
    /// (see the [module docs](self)).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Neighbor { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Neighbor::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        need(Layer::Icmpv6, b, HEADER_LEN)?;
        let t = self.msg_type();
        if t != msg_type::NEIGHBOR_SOLICITATION && t != msg_type::NEIGHBOR_ADVERTISEMENT {
            return Err(Error::invalid(Layer::Icmpv6, "type", t.into()));
        }
        if self.code() != 0 {
            return Err(Error::invalid(Layer::Icmpv6, "code", self.code().into()));
        }
        need(Layer::Icmpv6, b, NEIGHBOR_LEN)?;
        self.options_iter().try_for_each(|o| o.map(drop))
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The message as a plain ICMPv6 view.
    pub fn as_icmp(&self) -> v6::Packet<&[u8]> {
        v6::Packet::new_unchecked(self.buffer.as_ref())
    }

    /// Message type (135 or 136).
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Code (0).
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Checksum field.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// True for a solicitation, false for an advertisement.
    pub fn is_solicitation(&self) -> bool {
        self.msg_type() == msg_type::NEIGHBOR_SOLICITATION
    }

    /// Target address.
    pub fn target_addr(&self) -> [u8; 16] {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[HEADER_LEN..NEIGHBOR_LEN]);
        a
    }

    fn flag(&self, mask: u8) -> bool {
        !self.is_solicitation() && self.buffer.as_ref()[4] & mask != 0
    }

    /// R: the sender is a router (advertisements only).
    pub fn router_flag(&self) -> bool {
        self.flag(ROUTER)
    }

    /// S: sent in response to a solicitation (advertisements only).
    pub fn solicited_flag(&self) -> bool {
        self.flag(SOLICITED)
    }

    /// O: override an existing cache entry (advertisements only).
    pub fn override_flag(&self) -> bool {
        self.flag(OVERRIDE)
    }

    /// The three flags as etherparse's value.
    pub fn na_flags(&self) -> NeighborAdvertisementHeader {
        NeighborAdvertisementHeader {
            router: self.router_flag(),
            solicited: self.solicited_flag(),
            r#override: self.override_flag(),
        }
    }

    /// The options, raw.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[NEIGHBOR_LEN..]
    }

    /// Iterates over the options (errors counted from the message start).
    pub fn options_iter(&self) -> NdpOptions<'_> {
        NdpOptions {
            rest: self.options(),
            at: NEIGHBOR_LEN,
        }
    }

    fn lladdr_of(&self, kind: u8) -> Option<[u8; 6]> {
        self.options_iter()
            .filter_map(|o| o.ok())
            .find(|o| o.kind == kind)
            .and_then(|o| o.lladdr())
    }

    /// The first source link-layer address option's Ethernet address.
    pub fn source_lladdr(&self) -> Option<[u8; 6]> {
        self.lladdr_of(option_type::SOURCE_LL_ADDR)
    }

    /// The first target link-layer address option's Ethernet address.
    pub fn target_lladdr(&self) -> Option<[u8; 6]> {
        self.lladdr_of(option_type::TARGET_LL_ADDR)
    }

    /// True if the checksum is correct for the pseudo-header of `src` and `dst`.
    pub fn verify_checksum(&self, src: &[u8; 16], dst: &[u8; 16]) -> bool {
        self.as_icmp().verify_checksum(src, dst)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Neighbor<T> {
    /// Sets the target address.
    pub fn set_target_addr(&mut self, v: &[u8; 16]) {
        self.buffer.as_mut()[HEADER_LEN..NEIGHBOR_LEN].copy_from_slice(v);
    }

    /// Writes the R/S/O flags and zeroes the reserved bits (bytes 5 to 8).
    pub fn set_na_flags(&mut self, f: NeighborAdvertisementHeader) {
        self.buffer.as_mut()[4..8].copy_from_slice(&f.to_bytes());
    }

    /// The options, mutable.
    pub fn options_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[NEIGHBOR_LEN..]
    }

    /// Computes and writes the checksum for the pseudo-header of `src` and `dst`.
    pub fn fill_checksum(&mut self, src: &[u8; 16], dst: &[u8; 16]) {
        v6::Packet::new_unchecked(self.buffer.as_mut()).fill_checksum(src, dst);
    }
}

fn emit_neighbor(
    buf: &mut [u8],
    ip: Addrs<'_>,
    head: [u8; HEADER_LEN],
    target: &[u8; 16],
    lladdr: Option<(u8, [u8; 6])>,
) -> Result<usize> {
    let mut body = [0u8; 16 + LL_ADDR_OPTION_LEN];
    body[..16].copy_from_slice(target);
    let len = match lladdr {
        Some((kind, mac)) => {
            body[16] = kind;
            body[17] = 1;
            body[18..].copy_from_slice(&mac);
            body.len()
        }
        None => 16,
    };
    v6::build(buf, ip, &head, &body[..len])
}

/// Writes a Neighbor Solicitation for `target` (with a source link-layer address
/// option if `source_lladdr` is given; leave it out when `ip.src` is unspecified,
/// for duplicate address detection, RFC 4861 section 4.3), checksum filled;
/// returns its length.
pub fn emit_neighbor_solicitation(
    buf: &mut [u8],
    ip: Addrs<'_>,
    target: &[u8; 16],
    source_lladdr: Option<[u8; 6]>,
) -> Result<usize> {
    let head = v6::head(msg_type::NEIGHBOR_SOLICITATION, 0, [0; 4]);
    let opt = source_lladdr.map(|m| (option_type::SOURCE_LL_ADDR, m));
    emit_neighbor(buf, ip, head, target, opt)
}

/// Writes a Neighbor Advertisement for `target` with `flags` (and a target
/// link-layer address option if `target_lladdr` is given), checksum filled;
/// returns its length.
pub fn emit_neighbor_advertisement(
    buf: &mut [u8],
    ip: Addrs<'_>,
    target: &[u8; 16],
    flags: NeighborAdvertisementHeader,
    target_lladdr: Option<[u8; 6]>,
) -> Result<usize> {
    let head = v6::head(msg_type::NEIGHBOR_ADVERTISEMENT, 0, flags.to_bytes());
    let opt = target_lladdr.map(|m| (option_type::TARGET_LL_ADDR, m));
    emit_neighbor(buf, ip, head, target, opt)
}

/// The solicited-node multicast address of `addr`: ff02::1:ffXX:XXXX with its
/// low 24 bits (RFC 4291 section 2.7.1).
pub fn solicited_node_multicast(addr: &[u8; 16]) -> [u8; 16] {
    let mut m = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, 0, 0, 0];
    m[13..].copy_from_slice(&addr[13..]);
    m
}

/// The Ethernet address an IPv6 multicast `addr` maps to: 33:33 and its low 32
/// bits (RFC 2464 section 7).
pub fn multicast_mac(addr: &[u8; 16]) -> [u8; 6] {
    [0x33, 0x33, addr[12], addr[13], addr[14], addr[15]]
}

#[cfg(test)]
mod tests;
