//! The hash input read straight from frame bytes, without a full
//! [`linerate_wire::layout`] parse: the fast path of [`HashConfig::frame_input`].
//!
//! Software RSS sits on one core in front of all the others, so the few bytes a
//! hash needs are read directly: Ethernet with up to two VLAN tags, IPv4 (any IHL,
//! so options are simply skipped; fragment bits) or IPv6 without extension headers,
//! then the TCP or UDP ports, and for VXLAN and GENEVE on the configured ports the
//! inner frame the same way. Every length check [`layout::Config::parse`] makes on
//! these headers is made here too, in the same order of precedence, so a frame the
//! full parse refuses is refused here and the answer is always the same.
//!
//! What is not decided here is handed back as [`Extracted::Parse`], and
//! [`HashConfig::frame_input`] then parses the frame fully: IPv6 extension headers
//! and GRE (NVGRE and plain GRE, whose header length depends on its flags). The crate's
//! tests compare both paths on the frame catalogue and on random mutations and
//! truncations of it.
//!
//! [`layout::Config::parse`]: linerate_wire::layout::Config::parse

use linerate_offload::RssHashType;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::ipv4::protocol;
use linerate_wire::ipv6::ext;
use linerate_wire::layout::TunnelKind;
use linerate_wire::vxlan;

use crate::input::{HashConfig, HashInput, HashLevel, Transport, shape};

/// What [`HashConfig::extract`] made of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extracted {
    /// The frame's hash input, as [`HashConfig::input`] gives it after a full parse.
    Input(HashInput),
    /// The frame has no hash input: it does not parse, is not IP, or its hash type
    /// is disabled (the full path says the same).
    Unhashable,
    /// Not decided on the fast path (IPv6 extension headers, GRE): parse the frame.
    Parse,
}

/// One header stack read from bytes: what the hash input needs.
#[derive(Debug, Clone, Copy)]
struct Stack {
    v6: bool,
    /// Offset of the network header.
    l3: usize,
    /// Offset of the transport header.
    l4: usize,
    /// TCP or UDP in an unfragmented packet; anything else is hashed on addresses.
    transport: Transport,
    /// For unfragmented UDP: the end of the datagram (its length field), where a
    /// tunnel's inner frame must end.
    udp_end: usize,
}

/// The outcome of reading one stack.
enum Read {
    Ip(Stack),
    /// The full parse fails on these headers, or they are not IP: no input.
    None,
    /// Not decided here.
    Parse,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..)?.first_chunk::<2>()?;
    Some(u16::from_be_bytes(*s))
}

/// Reads the Ethernet, VLAN, IP and transport headers starting at `start`, with
/// the checks `layout::parse_headers` makes. The frame ends at `frame.len()`.
#[inline(always)]
fn read_stack(frame: &[u8], start: usize) -> Read {
    let Some(mut et) = be16(frame, start + 12) else {
        return Read::None;
    };
    let mut l3 = start + ethernet::HEADER_LEN;
    if ethernet::is_vlan_tpid(et) {
        // Up to two tags; the inner one must be 802.1Q (`ethernet::walk_vlans`).
        let Some(next) = be16(frame, l3 + 2) else {
            return Read::None;
        };
        l3 += 4;
        if ethernet::is_vlan_tpid(next) {
            if next != ethertype::VLAN {
                return Read::None;
            }
            let Some(last) = be16(frame, l3 + 2) else {
                return Read::None;
            };
            l3 += 4;
            if ethernet::is_vlan_tpid(last) {
                return Read::None;
            }
            et = last;
        } else {
            et = next;
        }
    }
    let Some(have) = frame.len().checked_sub(l3) else {
        return Read::None;
    };
    let (v6, l4, end, proto, first) = match et {
        ethertype::IPV4 => {
            let Some(ip) = frame.get(l3..).and_then(|b| b.first_chunk::<20>()) else {
                return Read::None;
            };
            let [vihl, _, t0, t1, _, _, f0, f1, _, proto, ..] = *ip;
            let ihl = usize::from(vihl & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([t0, t1]));
            if vihl >> 4 != 4 || ihl < 20 || total < ihl || have < total {
                return Read::None;
            }
            let frag = u16::from_be_bytes([f0, f1]);
            if frag & 0x1fff != 0 {
                // A later fragment: no transport header, nothing can fail.
                return Read::Ip(Stack {
                    v6: false,
                    l3,
                    l4: l3 + ihl,
                    transport: Transport::Other,
                    udp_end: 0,
                });
            }
            (false, l3 + ihl, l3 + total, proto, frag & 0x2000 != 0)
        }
        ethertype::IPV6 => {
            let Some(ip) = frame.get(l3..).and_then(|b| b.first_chunk::<40>()) else {
                return Read::None;
            };
            let [v, _, _, _, p0, p1, nh, ..] = *ip;
            let total = 40 + usize::from(u16::from_be_bytes([p0, p1]));
            if v >> 4 != 6 || have < total {
                return Read::None;
            }
            if ext::is_extension(nh) {
                return Read::Parse;
            }
            (true, l3 + 40, l3 + total, nh, false)
        }
        _ => return Read::None,
    };
    // The transport header, bounded by the IP packet (`layout::parse_l4`): a first
    // fragment never fails on a short header, but does on a bad field it holds.
    let have = end.saturating_sub(l4);
    let mut udp_end = 0;
    let transport = match proto {
        protocol::TCP => {
            if have < 20 {
                if !first {
                    return Read::None;
                }
            } else {
                let doff = frame.get(l4 + 12).map_or(0, |b| usize::from(b >> 4) * 4);
                if doff < 20 || (have < doff && !first) {
                    return Read::None;
                }
            }
            Transport::Tcp
        }
        protocol::UDP => {
            if have < 8 {
                if !first {
                    return Read::None;
                }
            } else {
                let len = usize::from(be16(frame, l4 + 4).unwrap_or(0));
                if len < 8 || (len > have && !first) {
                    return Read::None;
                }
                udp_end = l4 + len;
            }
            Transport::Udp
        }
        protocol::ICMP | protocol::ICMPV6 => {
            if have < 8 && !first {
                return Read::None;
            }
            Transport::Other
        }
        // GRE's header length depends on its flags, and it may be a tunnel.
        protocol::GRE if !first => return Read::Parse,
        _ => Transport::Other,
    };
    Read::Ip(Stack {
        v6,
        l3,
        l4,
        transport: if first { Transport::Other } else { transport },
        udp_end,
    })
}

/// Where a frame's hash input lies: its hash type and the offsets of the network
/// and transport headers it is read from (all inside the frame, checked).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site {
    kind: RssHashType,
    l3: usize,
    l4: usize,
}

impl Site {
    /// The input at this site of `frame` (`None` only if the site lies outside
    /// `frame`, which [`HashConfig::locate`] never gives).
    #[inline(always)]
    pub(crate) fn input(self, frame: &[u8]) -> Option<HashInput> {
        let (alen, has_ports) = shape(self.kind);
        let ports = if has_ports {
            Some(*frame.get(self.l4..)?.first_chunk::<4>()?)
        } else {
            None
        };
        // Addresses: IPv4 bytes 12..20, IPv6 bytes 8..40 of the IP header.
        Some(if alen == 8 {
            HashInput::build(self.kind, frame.get(self.l3 + 12..self.l3 + 20)?, ports)
        } else {
            HashInput::build(self.kind, frame.get(self.l3 + 8..self.l3 + 40)?, ports)
        })
    }
}

/// What [`HashConfig::locate`] found.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Located {
    At(Site),
    Unhashable,
    Parse,
}

impl HashConfig {
    /// The site of one stack's input, as [`HashConfig::headers_input`] picks it.
    #[inline(always)]
    fn site(&self, s: &Stack) -> Option<Site> {
        Some(Site {
            kind: self.types.select(s.v6, s.transport)?,
            l3: s.l3,
            l4: s.l4,
        })
    }

    /// Where the hash input of `frame` lies: [`HashConfig::extract`] without
    /// building the input, so that dispatch builds it where it keeps it.
    #[inline(always)]
    pub(crate) fn locate(&self, frame: &[u8]) -> Located {
        let outer = match read_stack(frame, 0) {
            Read::Ip(s) => s,
            Read::None => return Located::Unhashable,
            Read::Parse => return Located::Parse,
        };
        if outer.transport == Transport::Udp {
            match self.tunnel_input(frame, &outer) {
                Read::Ip(inner) => {
                    if let Some(site) = self.site(&inner) {
                        return Located::At(site);
                    }
                }
                Read::None => {}
                Read::Parse => return Located::Parse,
            }
        }
        match self.site(&outer) {
            Some(site) => Located::At(site),
            None => Located::Unhashable,
        }
    }

    /// The hash input of `frame` read straight from its bytes, or
    /// [`Extracted::Parse`] where only a full parse can tell (see the
    /// [module documentation](crate::extract)). Whenever it decides, it agrees
    /// with parsing the frame with `self.layout` and calling [`HashConfig::input`].
    ///
    /// ```
    /// use linerate_rss::{Extracted, HashConfig, HashInput};
    /// use linerate_wire::build::{FrameBuilder, Ip, L4};
    /// let frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40000, 80))
    ///     .vlan(7)
    ///     .build(b"x");
    /// let want = HashInput::tcp_ipv4([10, 0, 0, 1], [10, 0, 0, 2], 40000, 80);
    /// assert_eq!(HashConfig::default().extract(&frame), Extracted::Input(want));
    /// assert_eq!(HashConfig::default().extract(&frame[..30]), Extracted::Unhashable);
    /// ```
    #[inline]
    pub fn extract(&self, frame: &[u8]) -> Extracted {
        match self.locate(frame) {
            Located::At(site) => match site.input(frame) {
                Some(i) => Extracted::Input(i),
                None => Extracted::Unhashable,
            },
            Located::Unhashable => Extracted::Unhashable,
            Located::Parse => Extracted::Parse,
        }
    }

    /// The inner stack of a VXLAN or GENEVE datagram whose inner headers are to be
    /// hashed; [`Read::None`] when the datagram is no such tunnel, its tunnel
    /// header or inner frame is bad, or the outer headers are to be hashed (the
    /// outer input is then used, as `layout::Config::parse` with
    /// [`HashConfig::input`] does).
    #[inline(never)]
    fn tunnel_input(&self, frame: &[u8], outer: &Stack) -> Read {
        let Some(dport) = be16(frame, outer.l4 + 2) else {
            return Read::None;
        };
        let ports = &self.layout;
        let kind = if ports.vxlan_ports.contains(dport) {
            TunnelKind::Vxlan
        } else if ports.geneve_ports.contains(dport) {
            TunnelKind::Geneve
        } else {
            return Read::None;
        };
        if self.tunnels.level(kind) == HashLevel::Outer {
            return Read::None;
        }
        // The tunnel header and the inner frame end with the UDP datagram.
        let within = frame.get(..outer.udp_end).unwrap_or_default();
        let body_at = outer.l4 + 8;
        let Some(&[b0, b1, b2, b3, _, _, _, b7]) =
            within.get(body_at..).and_then(|b| b.first_chunk::<8>())
        else {
            return Read::None;
        };
        let header_len = match kind {
            TunnelKind::Vxlan => {
                // Flags I only, reserved bits zero (`vxlan::Repr::parse`).
                if b0 != vxlan::FLAG_I || [b1, b2, b3, b7] != [0; 4] {
                    return Read::None;
                }
                vxlan::HEADER_LEN
            }
            _ => {
                // GENEVE: version 0, options inside the datagram, carrying Ethernet.
                let len = 8 + usize::from(b0 & 0x3f) * 4;
                if b0 >> 6 != 0
                    || within.len().saturating_sub(body_at) < len
                    || u16::from_be_bytes([b2, b3]) != ethertype::TEB
                {
                    return Read::None;
                }
                len
            }
        };
        read_stack(within, body_at + header_len)
    }

    /// The hash input of `frame`: read straight from its bytes
    /// ([`HashConfig::extract`]) where possible, else parsed with `self.layout`
    /// ([`HashConfig::input`]); `None` if the frame does not parse, is not IP, or
    /// its hash type is disabled.
    #[inline]
    pub fn frame_input(&self, frame: &[u8]) -> Option<HashInput> {
        match self.extract(frame) {
            Extracted::Input(i) => Some(i),
            Extracted::Unhashable => None,
            Extracted::Parse => self.parse_input(frame),
        }
    }

    /// The full path: parse, then [`HashConfig::input`].
    #[cold]
    pub(crate) fn parse_input(&self, frame: &[u8]) -> Option<HashInput> {
        let layout = self.layout.parse(frame).ok()?;
        self.input(frame, &layout)
    }
}
