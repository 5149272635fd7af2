//! One-pass frame layout: the kind and offset of every header in a frame.
//!
//! [`parse`] walks a frame once, from the outer Ethernet header (with up to two
//! 802.1Q / 802.1ad tags) through IPv4 (options skipped) or IPv6 (extension headers
//! walked, [`crate::ipv6::ext`]) to TCP, UDP, ICMP or GRE; if the outer L4 is a tunnel
//! (VXLAN or GENEVE by UDP destination port, NVGRE as GRE carrying Ethernet), it
//! decodes the tunnel header and walks the inner frame the same way. One level of
//! encapsulation is decoded; a tunnel inside the inner frame is left as inner L4
//! payload.
//!
//! The result, [`Layout`], is a small `Copy` value of offsets and kinds: it holds no
//! borrow, so GRO, GSO and RSS keep it beside the frame and read or rewrite fields at
//! the offsets it gives. Lengths are validated here once (every header lies inside
//! the frame; IP and UDP length fields lie inside the frame; the inner frame lies
//! inside the outer datagram), so later field reads at these offsets cannot fail.
//! Checksums are not verified here: that is the offload layer's work. The
//! commonest frame, untagged TCP over IPv4 without options or over IPv6 without
//! extension headers, is recognised by a few compares first and gets the same
//! [`Layout`] the walk would give (the tests flip every bit of such frames and
//! compare).
//!
//! What counts as an error: a malformed outer stack (Ethernet, VLAN, IP, transport)
//! makes [`parse`] fail. A datagram that only *looks* like a tunnel (UDP to a tunnel
//! port, or GRE carrying Ethernet) but whose tunnel header or inner frame is bad still
//! parses: its [`Layout`] has the outer headers, no tunnel, and the reason in
//! [`Layout::tunnel_error`], so RSS can still hash it and the tunnel endpoint can drop
//! it with a counter. GRE that is not version 0 carrying Ethernet (PPTP's enhanced
//! GRE, GRE carrying IP) is plain GRE. A first fragment never fails on its transport
//! header (its UDP length, for one, covers the whole datagram): the header is decoded
//! when the fragment holds it.
//!
//! Tunnel UDP ports are configurable ([`Config`]): by default VXLAN on 4789 (IANA) and
//! 8472 (Linux's default), GENEVE on 6081. As in Linux, only the destination port
//! selects the tunnel.
//!
//! ```
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::layout::{self, L4Kind};
//!
//! let frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(5000, 53))
//!     .vlan(100)
//!     .build(b"query");
//! let l = layout::parse(&frame).unwrap();
//! assert_eq!(l.outer.vlan_tags, 1);
//! assert_eq!(l.outer.l3_offset, 18);
//! assert_eq!(l.outer.l4, L4Kind::Udp);
//! assert_eq!(l.payload, 18 + 20 + 8);
//! ```

use crate::error::{Error, Layer, Result};
use crate::ethernet::{self, ethertype};
use crate::ipv4::protocol;
use crate::{geneve, gre, ipv6, vxlan};

/// How many tunnel ports of one kind a [`Config`] holds.
pub const MAX_PORTS: usize = 4;

/// A small fixed set of UDP ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortSet {
    ports: [u16; MAX_PORTS],
    len: u8,
}

impl PortSet {
    /// The empty set.
    pub const EMPTY: PortSet = PortSet {
        ports: [0; MAX_PORTS],
        len: 0,
    };

    /// A set holding `ports` (at most [`MAX_PORTS`], more are a typed error).
    pub fn new(ports: &[u16]) -> core::result::Result<Self, TooManyPorts> {
        let mut s = PortSet::EMPTY;
        for &p in ports {
            s.insert(p)?;
        }
        Ok(s)
    }

    /// Adds `port`; adding a port already present does nothing.
    pub fn insert(&mut self, port: u16) -> core::result::Result<(), TooManyPorts> {
        if self.contains(port) {
            return Ok(());
        }
        let slot = self
            .ports
            .get_mut(usize::from(self.len))
            .ok_or(TooManyPorts)?;
        *slot = port;
        self.len += 1;
        Ok(())
    }

    /// True if `port` is in the set.
    #[inline]
    pub fn contains(&self, port: u16) -> bool {
        self.as_slice().contains(&port)
    }

    /// The ports, in insertion order.
    pub fn as_slice(&self) -> &[u16] {
        self.ports.get(..usize::from(self.len)).unwrap_or_default()
    }
}

/// A [`PortSet`] already holds [`MAX_PORTS`] ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyPorts;

impl core::fmt::Display for TooManyPorts {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "a tunnel port set holds at most {MAX_PORTS} ports")
    }
}

impl std::error::Error for TooManyPorts {}

/// Which UDP destination ports mean which tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// VXLAN ports (default 4789 and 8472).
    pub vxlan_ports: PortSet,
    /// GENEVE ports (default 6081).
    pub geneve_ports: PortSet,
    /// Decode NVGRE (GRE carrying Ethernet, protocol 0x6558) as a tunnel (default on).
    pub gre: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config::DEFAULT
    }
}

impl Config {
    /// The default ports: VXLAN 4789 and 8472, GENEVE 6081, NVGRE on.
    pub const DEFAULT: Config = Config {
        vxlan_ports: PortSet {
            ports: [vxlan::PORT, vxlan::LINUX_PORT, 0, 0],
            len: 2,
        },
        geneve_ports: PortSet {
            ports: [geneve::PORT, 0, 0, 0],
            len: 1,
        },
        gre: true,
    };

    /// No tunnel decoding: every frame is parsed as plain.
    pub const PLAIN: Config = Config {
        vxlan_ports: PortSet::EMPTY,
        geneve_ports: PortSet::EMPTY,
        gre: false,
    };

    /// Parses `frame` with these tunnel ports.
    #[inline]
    pub fn parse(&self, frame: &[u8]) -> Result<Layout> {
        // The common case first: untagged Ethernet, IPv4 without options or
        // IPv6 without extension headers, TCP. It cannot carry a tunnel.
        if let Some(outer) = plain_tcp(frame) {
            return Ok(Layout {
                outer,
                tunnel: None,
                inner: None,
                payload: outer.payload,
                tunnel_error: None,
            });
        }
        self.parse_general(frame)
    }

    /// [`Config::parse`] without its shortcut for plain TCP: every frame walks
    /// the general parser (the tests compare the two).
    fn parse_general(&self, frame: &[u8]) -> Result<Layout> {
        let outer = parse_headers(frame, 0)?;
        let mut layout = Layout {
            outer,
            tunnel: None,
            inner: None,
            payload: outer.payload,
            tunnel_error: None,
        };
        // Only UDP and GRE can carry a tunnel: everything else is done.
        if !matches!(outer.l4, L4Kind::Udp | L4Kind::Gre) || outer.frag != Fragment::None {
            return Ok(layout);
        }
        let found = self.tunnel(frame, &outer).and_then(|t| match t {
            Some(t) if t.carries_ethernet() => {
                // The inner frame ends where the outer datagram does (UDP length, or
                // the IP packet for GRE), not at the end of the buffer.
                let within = frame.get(..outer.l4_end()).unwrap_or_default();
                let inner = parse_headers(within, usize::from(t.offset) + usize::from(t.len))?;
                Ok(Some((t, Some(inner))))
            }
            Some(t) => Ok(Some((t, None))),
            None => Ok(None),
        });
        match found {
            Ok(Some((t, inner))) => {
                layout.tunnel = Some(t);
                layout.inner = inner;
                layout.payload = inner.map_or(t.offset + t.len, |h| h.payload);
            }
            Ok(None) => {}
            Err(e) => layout.tunnel_error = Some(e),
        }
        Ok(layout)
    }

    fn tunnel(&self, frame: &[u8], outer: &Headers) -> Result<Option<Tunnel>> {
        let l4 = usize::from(outer.l4_offset);
        match outer.l4 {
            L4Kind::Udp => {
                let dport = be16(frame, l4 + 2).unwrap_or(0);
                let (vxlan, geneve) = (
                    self.vxlan_ports.contains(dport),
                    self.geneve_ports.contains(dport),
                );
                if !vxlan && !geneve {
                    return Ok(None);
                }
                let body = frame
                    .get(usize::from(outer.payload)..outer.l4_end())
                    .unwrap_or_default();
                let flags = TunnelFlags {
                    outer_udp_csum: be16(frame, l4 + 6).unwrap_or(0) != 0,
                    ..TunnelFlags::default()
                };
                if vxlan {
                    let repr = vxlan::Repr::parse(&vxlan::Packet::new_checked(body)?)?;
                    Ok(Some(Tunnel {
                        kind: TunnelKind::Vxlan,
                        offset: outer.payload,
                        len: vxlan::HEADER_LEN as u16,
                        vni: repr.vni,
                        protocol: ethertype::TEB,
                        flags,
                    }))
                } else {
                    let p = geneve::Packet::new_checked(body)?;
                    Ok(Some(Tunnel {
                        kind: TunnelKind::Geneve,
                        offset: outer.payload,
                        len: off16(Layer::Geneve, p.header_len())?,
                        vni: p.vni(),
                        protocol: p.protocol(),
                        flags: TunnelFlags {
                            oam: p.oam(),
                            critical: p.critical(),
                            ..flags
                        },
                    }))
                }
            }
            L4Kind::Gre if self.gre => {
                let gre_bytes = frame.get(l4..outer.l3_end()).unwrap_or_default();
                let word = be16(gre_bytes, 0).unwrap_or(0);
                // Only version 0 carrying Ethernet is a tunnel; other GRE is plain.
                if word & gre::VERSION_MASK != 0 || be16(gre_bytes, 2) != Some(gre::PROTO_TEB) {
                    return Ok(None);
                }
                let p = gre::Packet::new_checked(gre_bytes)?;
                Ok(Some(Tunnel {
                    kind: TunnelKind::Nvgre,
                    offset: outer.l4_offset,
                    len: off16(Layer::Gre, p.header_len())?,
                    vni: p.key().map_or(0, |k| k >> 8),
                    protocol: ethertype::TEB,
                    flags: TunnelFlags {
                        gre_csum: p.checksum_present(),
                        gre_key: p.key_present(),
                        gre_seq: p.sequence_present(),
                        ..TunnelFlags::default()
                    },
                }))
            }
            _ => Ok(None),
        }
    }
}

/// Parses `frame` with the default tunnel ports ([`Config::DEFAULT`]).
#[inline]
pub fn parse(frame: &[u8]) -> Result<Layout> {
    Config::DEFAULT.parse(frame)
}

/// The kind of network-layer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L3Kind {
    /// No network layer was found (only before parsing).
    #[default]
    None,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
    /// ARP.
    Arp,
    /// Another EtherType, not decoded.
    Other(u16),
}

/// The kind of transport-layer header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum L4Kind {
    /// None: not IP, or a non-first fragment (no transport header in it).
    #[default]
    None,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMPv4.
    Icmpv4,
    /// ICMPv6.
    Icmpv6,
    /// GRE.
    Gre,
    /// Another IP protocol, not decoded.
    Other(u8),
}

/// Whether the IP packet is a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fragment {
    /// Not a fragment (an IPv6 atomic fragment, offset 0 without more fragments,
    /// RFC 6946, counts as not a fragment).
    #[default]
    None,
    /// The first fragment: it carries the transport header (when long enough).
    First,
    /// A later fragment: no transport header.
    Later,
}

/// The kind of tunnel header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN (RFC 7348) over UDP.
    Vxlan,
    /// GENEVE (RFC 8926) over UDP.
    Geneve,
    /// GRE version 0 carrying Ethernet (protocol 0x6558): NVGRE (RFC 7637) when keyed
    /// without checksum or sequence ([`TunnelFlags`] says which fields are present).
    Nvgre,
}

/// Tunnel header facts the GRO and GSO rules need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TunnelFlags {
    /// UDP tunnels: the outer UDP checksum field is non-zero.
    pub outer_udp_csum: bool,
    /// GRE: the checksum field is present (C).
    pub gre_csum: bool,
    /// GRE: the key field is present (K).
    pub gre_key: bool,
    /// GRE: the sequence number field is present (S).
    pub gre_seq: bool,
    /// GENEVE: the O (control message) bit.
    pub oam: bool,
    /// GENEVE: the C (critical options present) bit.
    pub critical: bool,
}

/// The tunnel header of an encapsulated frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tunnel {
    /// Which tunnel.
    pub kind: TunnelKind,
    /// Offset of the tunnel header (VXLAN/GENEVE: after the outer UDP header;
    /// NVGRE: the GRE header itself, at the outer L4 offset).
    pub offset: u16,
    /// Length of the tunnel header, GENEVE options and GRE optional fields included.
    pub len: u16,
    /// VXLAN or GENEVE VNI; NVGRE VSID (the upper 24 bits of the key; 0 if unkeyed).
    pub vni: u32,
    /// The protocol the tunnel carries (0x6558 Ethernet; GENEVE may say otherwise,
    /// in which case the inner frame is not decoded).
    pub protocol: u16,
    /// Header facts (checksums, optional fields, GENEVE bits).
    pub flags: TunnelFlags,
}

impl Tunnel {
    /// True if the tunnel carries an Ethernet frame (decoded as the inner headers).
    pub const fn carries_ethernet(&self) -> bool {
        self.protocol == ethertype::TEB
    }
}

/// Offsets and kinds of one Ethernet + L3 + L4 stack (outer or inner).
///
/// All offsets count from the start of the whole frame. Header offsets fit in 16
/// bits; lengths and ends that may cover a 64 KiB payload are 32-bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers {
    /// Offset of the Ethernet header.
    pub l2: u16,
    /// Number of VLAN tags (0..=2) following the MAC addresses.
    pub vlan_tags: u8,
    /// The EtherType after any VLAN tags.
    pub ethertype: u16,
    /// Network-layer kind.
    pub l3: L3Kind,
    /// Offset of the network header (after the Ethernet header and tags).
    pub l3_offset: u16,
    /// Length of the network packet as its header declares (IPv4 total length;
    /// IPv6 40 + payload length, up to 65575; ARP 28), which excludes any Ethernet
    /// padding. For an undecoded EtherType: the rest of the buffer.
    pub l3_len: u32,
    /// IP protocol / final IPv6 next header (0 when not IP).
    pub protocol: u8,
    /// Fragment state of the IP packet.
    pub frag: Fragment,
    /// Transport-layer kind.
    pub l4: L4Kind,
    /// Offset of the transport header (after IPv4 options or IPv6 extension headers).
    pub l4_offset: u16,
    /// Offset of the transport payload (after the TCP header with options, the UDP
    /// header, 8 bytes of ICMP, the GRE header); equal to `l4_offset` when the
    /// transport header is not decoded.
    pub payload: u16,
    /// Offset just past the transport segment: the end of the UDP datagram as its
    /// length field says (a UDP datagram may be shorter than its IP payload), the end
    /// of the network packet otherwise.
    pub l4_end: u32,
}

impl Headers {
    /// Offset just past the network packet (its declared end).
    pub fn l3_end(&self) -> usize {
        usize::from(self.l3_offset) + self.l3_len as usize
    }

    /// Offset just past the transport segment (see [`Headers::l4_end`] the field).
    pub fn l4_end(&self) -> usize {
        self.l4_end as usize
    }

    /// Length of the network header including IPv4 options / IPv6 extension headers.
    pub fn l3_header_len(&self) -> usize {
        usize::from(self.l4_offset) - usize::from(self.l3_offset)
    }

    /// Length of the transport header (0 when not decoded).
    pub fn l4_header_len(&self) -> usize {
        usize::from(self.payload) - usize::from(self.l4_offset)
    }

    /// The transport payload's byte range in the frame.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        usize::from(self.payload)..self.l4_end()
    }
}

/// Where every header of a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Layout {
    /// The outer (or only) headers.
    pub outer: Headers,
    /// The tunnel header, when the outer L4 is a recognised and valid tunnel.
    pub tunnel: Option<Tunnel>,
    /// The inner headers, when the tunnel carries Ethernet.
    pub inner: Option<Headers>,
    /// Offset of the innermost payload (what follows the innermost decoded header).
    pub payload: u16,
    /// Why a datagram that looked like a tunnel (by port or GRE protocol) was not
    /// decoded as one: a bad tunnel header or a bad inner frame.
    pub tunnel_error: Option<Error>,
}

impl Layout {
    /// The headers the application's flow is in: the inner ones in a tunnel, else
    /// the outer ones.
    #[inline]
    pub fn innermost(&self) -> &Headers {
        self.inner.as_ref().unwrap_or(&self.outer)
    }

    /// Total length of all headers (the offset of the innermost payload).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.payload)
    }

    /// The innermost payload's byte range in the frame.
    #[inline]
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        self.innermost().payload_range()
    }
}

#[inline]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*s.first()?, *s.get(1)?]))
}

#[inline]
fn byte(b: &[u8], at: usize) -> Option<u8> {
    b.get(at).copied()
}

/// Converts an offset known to be within a frame to u16, or fails: frames whose
/// headers lie beyond 64 KiB are refused.
#[inline]
fn off16(layer: Layer, at: usize) -> Result<u16> {
    u16::try_from(at)
        .map_err(|_| Error::invalid(layer, "offset", u32::try_from(at).unwrap_or(u32::MAX)))
}

#[inline]
fn len32(at: usize) -> u32 {
    u32::try_from(at).unwrap_or(u32::MAX)
}

/// The headers of an untagged Ethernet frame carrying IPv4 without options or
/// IPv6 without extension headers, not a fragment, and a whole TCP header, as
/// [`parse_headers`] finds them; `None` for anything else (which that parser
/// then decides, error or not). A few loads and compares instead of the walk.
#[inline]
fn plain_tcp(frame: &[u8]) -> Option<Headers> {
    const L3: usize = ethernet::HEADER_LEN;
    // Ethernet and the fixed IPv4 header (or IPv6's first 20 bytes): one
    // bounds check, then constant offsets. The protocol first: a tunnel's
    // UDP leaves at once.
    let e = frame.first_chunk::<34>()?;
    let (l4, total, ethertype) = match u16::from_be_bytes([e[12], e[13]]) {
        ethertype::IPV4 => {
            // Protocol TCP; version 4, IHL 5; MF clear and offset 0 (the
            // reserved bit and DF do not make a fragment).
            if e[L3 + 9] != protocol::TCP
                || e[L3] != 0x45
                || e[L3 + 6] & 0x3f != 0
                || e[L3 + 7] != 0
            {
                return None;
            }
            let total = usize::from(u16::from_be_bytes([e[L3 + 2], e[L3 + 3]]));
            (L3 + 20, total, ethertype::IPV4)
        }
        ethertype::IPV6 => {
            // Next header TCP (so no extension header), version 6.
            if e[L3 + 6] != protocol::TCP || e[L3] >> 4 != 6 {
                return None;
            }
            let total = 40 + usize::from(u16::from_be_bytes([e[L3 + 4], e[L3 + 5]]));
            (L3 + 40, total, ethertype::IPV6)
        }
        _ => return None,
    };
    let end = L3 + total;
    // The packet lies in the frame and holds a whole TCP header.
    let doff = usize::from(byte(frame, l4 + 12)? >> 4) * 4;
    if end > frame.len() || doff < 20 || l4 + doff > end {
        return None;
    }
    Some(Headers {
        l2: 0,
        vlan_tags: 0,
        ethertype,
        l3: if ethertype == ethertype::IPV4 {
            L3Kind::Ipv4
        } else {
            L3Kind::Ipv6
        },
        l3_offset: L3 as u16,
        l3_len: total as u32,
        protocol: protocol::TCP,
        frag: Fragment::None,
        l4: L4Kind::Tcp,
        l4_offset: l4 as u16,
        payload: (l4 + doff) as u16,
        l4_end: end as u32,
    })
}

/// Parses Ethernet, VLAN tags, L3 and L4 starting at `start`; the frame ends at
/// `frame.len()`.
#[inline]
fn parse_headers(frame: &[u8], start: usize) -> Result<Headers> {
    let avail = |at: usize| frame.len().saturating_sub(at);
    let mut h = Headers {
        l2: off16(Layer::Ethernet, start)?,
        ..Headers::default()
    };
    let vlans = ethernet::walk_vlans(frame.get(start..).unwrap_or_default())?;
    h.vlan_tags = vlans.tags as u8; // at most MAX_VLAN_TAGS
    h.ethertype = vlans.ethertype;
    let l3 = start + vlans.l3_offset;
    h.l3_offset = off16(Layer::Ethernet, l3)?;
    match h.ethertype {
        ethertype::IPV4 => parse_ipv4(frame, l3, &mut h)?,
        ethertype::IPV6 => parse_ipv6(frame, l3, &mut h)?,
        ethertype::ARP => {
            crate::arp::Packet::new_checked(frame.get(l3..).unwrap_or_default())?;
            h.l3 = L3Kind::Arp;
            h.l3_len = crate::arp::PACKET_LEN as u32;
            h.l4_offset = off16(Layer::Arp, l3 + crate::arp::PACKET_LEN)?;
            h.payload = h.l4_offset;
            h.l4_end = len32(h.l3_end());
            return Ok(h);
        }
        other => {
            h.l3 = L3Kind::Other(other);
            h.l3_len = len32(avail(l3));
            h.l4_offset = h.l3_offset;
            h.payload = h.l3_offset;
            h.l4_end = len32(h.l3_end());
            return Ok(h);
        }
    }
    parse_l4(frame, &mut h)?;
    Ok(h)
}

#[inline]
fn parse_ipv4(frame: &[u8], l3: usize, h: &mut Headers) -> Result<()> {
    let have = frame.len().saturating_sub(l3);
    if have < 20 {
        return Err(Error::truncated(Layer::Ipv4, 20, have));
    }
    let vihl = byte(frame, l3).unwrap_or(0);
    if vihl >> 4 != 4 {
        return Err(Error::invalid(Layer::Ipv4, "version", u32::from(vihl >> 4)));
    }
    let ihl = usize::from(vihl & 0x0f) * 4;
    if ihl < 20 {
        return Err(Error::invalid(Layer::Ipv4, "ihl", u32::from(vihl & 0x0f)));
    }
    let total = usize::from(be16(frame, l3 + 2).unwrap_or(0));
    if total < ihl {
        return Err(Error::invalid(Layer::Ipv4, "total_len", total as u32));
    }
    if have < total {
        return Err(Error::truncated(Layer::Ipv4, total, have));
    }
    let frag = be16(frame, l3 + 6).unwrap_or(0);
    let (more, offset) = (frag & 0x2000 != 0, frag & 0x1fff);
    h.frag = match (offset, more) {
        (0, false) => Fragment::None,
        (0, true) => Fragment::First,
        _ => Fragment::Later,
    };
    h.l3 = L3Kind::Ipv4;
    h.l3_len = total as u32;
    h.protocol = byte(frame, l3 + 9).unwrap_or(0);
    h.l4_offset = off16(Layer::Ipv4, l3 + ihl)?;
    Ok(())
}

fn parse_ipv6(frame: &[u8], l3: usize, h: &mut Headers) -> Result<()> {
    let have = frame.len().saturating_sub(l3);
    if have < 40 {
        return Err(Error::truncated(Layer::Ipv6, 40, have));
    }
    let version = byte(frame, l3).unwrap_or(0) >> 4;
    if version != 6 {
        return Err(Error::invalid(Layer::Ipv6, "version", u32::from(version)));
    }
    let total = 40 + usize::from(be16(frame, l3 + 4).unwrap_or(0));
    if have < total {
        return Err(Error::truncated(Layer::Ipv6, total, have));
    }
    let nh = byte(frame, l3 + 6).unwrap_or(0);
    let exts = frame.get(l3 + 40..l3 + total).unwrap_or_default();
    let chain = ipv6::ext::walk(nh, exts)?;
    h.frag = match chain.fragment {
        None => Fragment::None,
        // An atomic fragment (RFC 6946) is a whole packet.
        Some(f) if f.is_first() && !f.more => Fragment::None,
        Some(f) if f.is_first() => Fragment::First,
        Some(_) => Fragment::Later,
    };
    h.l3 = L3Kind::Ipv6;
    h.l3_len = total as u32;
    h.protocol = chain.next_header;
    h.l4_offset = off16(Layer::Ipv6, l3 + 40 + chain.len)?;
    Ok(())
}

/// The length of a GRE header from its first word (RFC 2784 / RFC 2890 for version
/// 0: base, checksum (C, or the deprecated R), key, sequence; RFC 2637 for version 1,
/// PPTP's enhanced GRE: base, key, sequence (S), acknowledgement (A)).
fn gre_header_len(word: u16) -> usize {
    let bit = |mask: u16| usize::from(word & mask != 0) * 4;
    match word & gre::VERSION_MASK {
        0 => {
            4 + usize::from(word & (gre::FLAG_C | gre::FLAG_R) != 0) * 4
                + bit(gre::FLAG_K)
                + bit(gre::FLAG_S)
        }
        1 => 8 + bit(gre::FLAG_S) + bit(0x0080),
        _ => 4,
    }
}

/// Decodes the transport header at `h.l4_offset`, bounded by the IP packet's end.
/// A first fragment never fails here: its transport header is decoded if it fits.
#[inline]
fn parse_l4(frame: &[u8], h: &mut Headers) -> Result<()> {
    let l4 = usize::from(h.l4_offset);
    let end = h.l3_end();
    let have = end.saturating_sub(l4);
    h.payload = h.l4_offset;
    h.l4_end = len32(end);
    if h.frag == Fragment::Later {
        h.l4 = L4Kind::None;
        return Ok(());
    }
    let first = h.frag == Fragment::First;
    // In a first fragment a short transport header is not an error: there is
    // simply no decoded header.
    let short = |layer: Layer, need: usize| -> Result<usize> {
        if first {
            Ok(0)
        } else {
            Err(Error::truncated(layer, need, have))
        }
    };
    let (kind, layer, hdr_len) = match h.protocol {
        protocol::TCP => {
            let doff = usize::from(byte(frame, l4 + 12).unwrap_or(0) >> 4) * 4;
            let len = if have < 20 {
                short(Layer::Tcp, 20)?
            } else if doff < 20 {
                return Err(Error::invalid(Layer::Tcp, "data_offset", (doff / 4) as u32));
            } else if have < doff {
                short(Layer::Tcp, doff)?
            } else {
                doff
            };
            (L4Kind::Tcp, Layer::Tcp, len)
        }
        protocol::UDP => {
            if have < 8 {
                (L4Kind::Udp, Layer::Udp, short(Layer::Udp, 8)?)
            } else {
                let len = usize::from(be16(frame, l4 + 4).unwrap_or(0));
                if len < 8 {
                    return Err(Error::invalid(Layer::Udp, "length", len as u32));
                }
                // A first fragment's UDP length covers the whole datagram.
                if !first {
                    if len > have {
                        return Err(Error::truncated(Layer::Udp, len, have));
                    }
                    h.l4_end = len32(l4 + len);
                }
                (L4Kind::Udp, Layer::Udp, 8)
            }
        }
        protocol::ICMP | protocol::ICMPV6 => {
            let (kind, layer) = if h.protocol == protocol::ICMP {
                (L4Kind::Icmpv4, Layer::Icmpv4)
            } else {
                (L4Kind::Icmpv6, Layer::Icmpv6)
            };
            let len = if have < 8 { short(layer, 8)? } else { 8 };
            (kind, layer, len)
        }
        protocol::GRE => {
            let len = gre_header_len(be16(frame, l4).unwrap_or(0));
            let len = if have < len {
                short(Layer::Gre, len)?
            } else {
                len
            };
            (L4Kind::Gre, Layer::Gre, len)
        }
        other => (L4Kind::Other(other), Layer::Ipv4, 0),
    };
    h.l4 = kind;
    h.payload = off16(layer, l4 + hdr_len)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    // Test code: a panic is a failed test.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::Config;
    use crate::build::{FrameBuilder, Ip, L4};
    use etherparse::TcpHeader;

    /// The plain TCP shortcut gives what the general parser gives, for frames
    /// with any bit of their first 80 bytes flipped, cut at any length, or
    /// tagged, with options, or fragments.
    #[test]
    fn plain_tcp_shortcut_parses_as_the_general_parser() {
        let mut tcp = TcpHeader::new(1000, 2000, 7, 512);
        tcp.ack = true;
        let with_opts = {
            let mut t = tcp.clone();
            t.set_options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
                .unwrap();
            t
        };
        let v4 = || Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
        let v6 = || Ip::v6([1; 16], [2; 16]);
        let bases = [
            FrameBuilder::new(v4(), L4::Tcp(tcp.clone())).build(&[9; 100]),
            FrameBuilder::new(v6(), L4::Tcp(tcp.clone())).build(&[9; 100]),
            FrameBuilder::new(v4(), L4::Tcp(with_opts.clone())).build(&[9; 3]),
            FrameBuilder::new(v6(), L4::Tcp(with_opts)).build(&[]),
            FrameBuilder::new(v4(), L4::Tcp(tcp.clone()))
                .vlan(7)
                .build(&[9; 10]),
            FrameBuilder::new(v4(), L4::udp(1, 4789)).build(&[0; 40]),
        ];
        let cfg = Config::DEFAULT;
        let mut checked = 0;
        for base in &bases {
            for len in 0..=base.len() {
                let f = &base[..len];
                assert_eq!(cfg.parse(f), cfg.parse_general(f), "cut at {len}");
            }
            for at in 0..base.len().min(80) {
                for bit in 0..8 {
                    let mut f = base.clone();
                    f[at] ^= 1 << bit;
                    assert_eq!(cfg.parse(&f), cfg.parse_general(&f), "byte {at} bit {bit}");
                    // Also with the frame one byte short and padded.
                    let short = &f[..f.len() - 1];
                    assert_eq!(cfg.parse(short), cfg.parse_general(short));
                    f.push(0);
                    assert_eq!(cfg.parse(&f), cfg.parse_general(&f));
                    checked += 1;
                }
            }
        }
        assert!(checked > 3000);
        // The shortcut is taken for the plain frames (and gives their layouts).
        assert!(super::plain_tcp(&bases[0]).is_some() && super::plain_tcp(&bases[1]).is_some());
        assert!(super::plain_tcp(&bases[2]).is_some());
        assert!(super::plain_tcp(&bases[4]).is_none());
    }
}
