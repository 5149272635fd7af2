//! A frame's headers resolved once: where each level's header is, what kind it is,
//! and the header itself as a fixed-size array (so the rules read its fields
//! without per-field bounds checks). A header that does not lie in its frame makes
//! the view fail, and the frame pass through GRO; it never makes anything panic.
//!
//! The levels are those of Linux's GRO walk: the outer Ethernet and IP headers; in
//! a tunnel, the tunnel header (outer UDP and VXLAN or GENEVE, or GRE) and the
//! inner Ethernet and IP headers; then the transport header of the flow.

use super::FlushReason;
use super::bytes;
use super::{eth, geneve, gre, ipv4, ipv6, tcp, udp, udp_tunnel, vxlan};
use linerate_wire::checksum;
use linerate_wire::layout::{Fragment, Headers, L3Kind, L4Kind, Layout, TunnelKind};

/// A frame and its layout.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame<'a> {
    /// The frame's bytes.
    pub(super) b: &'a [u8],
    /// Where its headers are.
    pub(super) l: &'a Layout,
}

impl Frame<'_> {
    /// True if the layout's headers lie inside the frame's bytes and its IP
    /// packets inside the frame, `len` bytes long (more than the bytes for a
    /// frame in two parts). The layout may have come from the caller,
    /// [`Gro::receive_with_layout`](super::Gro::receive_with_layout), rather than
    /// from parsing this frame.
    #[inline]
    pub(super) fn fits(&self, len: usize) -> bool {
        let inner_ok = self.l.inner.is_none_or(|i| i.l3_end() <= len);
        usize::from(self.l.payload) <= self.b.len() && self.l.outer.l3_end() <= len && inner_ok
    }
}

/// The transport protocol a run coalesces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum L4 {
    /// TCP segments.
    Tcp,
    /// UDP datagrams (UDP GRO).
    Udp,
}

impl L4 {
    /// Offset of the checksum field in the transport header.
    pub(super) const fn csum_offset(self) -> u16 {
        match self {
            L4::Tcp => 16,
            L4::Udp => 6,
        }
    }
}

/// An IP header, by kind.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ip<'a> {
    /// IPv4.
    V4(&'a ipv4::Hdr),
    /// IPv6 and its extension headers.
    V6(&'a ipv6::Hdr, &'a [u8]),
}

/// One Ethernet + IP level of a frame.
#[derive(Debug, Clone, Copy)]
pub(super) struct Level<'a> {
    /// Where the level's headers are.
    pub(super) h: &'a Headers,
    /// The MAC header.
    pub(super) mac: eth::Mac<'a>,
    /// The IP header.
    pub(super) ip: Ip<'a>,
}

/// A tunnel header, by kind.
#[derive(Debug, Clone, Copy)]
pub(super) enum Tun<'a> {
    /// VXLAN: outer UDP and VXLAN headers.
    Vxlan(&'a udp_tunnel::Hdr, &'a vxlan::Hdr),
    /// GENEVE: outer UDP header and the whole GENEVE header with options.
    Geneve(&'a udp_tunnel::Hdr, &'a [u8]),
    /// GRE / NVGRE: the whole GRE header.
    Gre(&'a [u8]),
}

/// The transport header, by kind.
#[derive(Debug, Clone, Copy)]
pub(super) enum Trans<'a> {
    /// TCP: fixed header and options.
    Tcp(&'a tcp::Hdr, &'a [u8]),
    /// UDP.
    Udp(&'a udp::Hdr),
}

/// Every header of a frame GRO can coalesce, resolved once.
#[derive(Debug, Clone, Copy)]
pub(super) struct View<'a> {
    /// The frame's bytes.
    pub(super) b: &'a [u8],
    /// Where its headers are.
    pub(super) l: &'a Layout,
    /// The outer (or only) level.
    pub(super) outer: Level<'a>,
    /// The tunnel header and the inner level.
    pub(super) tunnel: Option<(Tun<'a>, Level<'a>)>,
    /// The transport header of the flow.
    pub(super) l4: Trans<'a>,
    /// The payload, for a frame in two parts ([`Gro::receive_split`](super::Gro::receive_split)):
    /// `b` then holds every header and ends where the payload starts. Empty for
    /// a frame in one piece, whose payload is the end of `b`.
    pub(super) pay: &'a [u8],
}

#[inline(always)]
fn level<'a>(b: &'a [u8], h: &'a Headers) -> Result<Level<'a>, FlushReason> {
    let ip = match h.l3 {
        L3Kind::Ipv4 => ipv4::header(b, h).map(Ip::V4),
        L3Kind::Ipv6 => ipv6::header(b, h).map(|x| Ip::V6(x, ipv6::ext(b, h))),
        _ => None,
    };
    let ip = ip.ok_or(FlushReason::Unsupported)?;
    Ok(Level {
        h,
        mac: eth::header(b, h).ok_or(FlushReason::Unparsed)?,
        ip,
    })
}

/// The transport header at `h`, if GRO coalesces its kind (UDP only with
/// `udp_on`).
#[inline(always)]
fn transport<'a>(b: &'a [u8], h: &Headers, udp_on: bool) -> Result<Trans<'a>, FlushReason> {
    let l4 = match h.l4 {
        L4Kind::Tcp => tcp::header(b, h).map(|t| Trans::Tcp(t, tcp::options(b, h))),
        L4Kind::Udp if udp_on => udp::header(b, h).map(Trans::Udp),
        L4Kind::Udp => return Err(FlushReason::UdpOff),
        _ => return Err(FlushReason::Unsupported),
    };
    l4.ok_or(FlushReason::Unparsed)
}

impl<'a> View<'a> {
    /// Resolves the headers of `f` (followed by `pay`, for a frame in two parts),
    /// or says why the frame cannot be coalesced (not IP, a fragment, not TCP
    /// or, with `udp_on`, UDP; a tunnel that does not carry Ethernet).
    #[inline(always)]
    pub(super) fn new(f: Frame<'a>, pay: &'a [u8], udp_on: bool) -> Result<View<'a>, FlushReason> {
        let (b, l) = (f.b, f.l);
        if l.outer.frag != Fragment::None || l.inner.is_some_and(|i| i.frag != Fragment::None) {
            return Err(FlushReason::Fragment);
        }
        let outer = level(b, &l.outer)?;
        let (Some(t), Some(inner)) = (&l.tunnel, &l.inner) else {
            if l.tunnel.is_some() {
                return Err(FlushReason::Unsupported);
            }
            // No tunnel: built apart, so that the tunnel's fields are not written.
            return Ok(View {
                b,
                l,
                outer,
                tunnel: None,
                l4: transport(b, l.innermost(), udp_on)?,
                pay,
            });
        };
        let o = &l.outer;
        let tun = match t.kind {
            TunnelKind::Vxlan => udp_tunnel::header(b, o)
                .zip(vxlan::header(b, t))
                .map(|(u, x)| Tun::Vxlan(u, x)),
            TunnelKind::Geneve => {
                udp_tunnel::header(b, o).map(|u| Tun::Geneve(u, geneve::whole(b, t)))
            }
            TunnelKind::Nvgre => Some(Tun::Gre(gre::header(b, t))),
        };
        let tunnel = Some((tun.ok_or(FlushReason::Unparsed)?, level(b, inner)?));
        Ok(View {
            b,
            l,
            outer,
            tunnel,
            l4: transport(b, l.innermost(), udp_on)?,
            pay,
        })
    }

    /// The transport protocol.
    #[inline]
    pub(super) fn l4(&self) -> L4 {
        match self.l4 {
            Trans::Tcp(..) => L4::Tcp,
            Trans::Udp(_) => L4::Udp,
        }
    }

    /// Payload bytes after the innermost transport header.
    #[inline]
    pub(super) fn payload_len(&self) -> usize {
        self.b.len().saturating_sub(usize::from(self.l.payload)) + self.pay.len()
    }

    /// The payload after the innermost transport header.
    #[inline]
    pub(super) fn payload(&self) -> &'a [u8] {
        if self.pay.is_empty() {
            bytes::range(self.b, usize::from(self.l.payload), self.b.len())
        } else {
            self.pay
        }
    }

    /// The frame's length: its bytes and, in two parts, the payload after them.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.b.len() + self.pay.len()
    }

    /// The one's-complement sum (unfolded) from `from` to the frame's end,
    /// across both parts of a frame in two, added to `init`.
    #[inline]
    pub(super) fn sum_from(&self, from: usize, init: u32) -> u32 {
        let head = bytes::range(self.b, from, self.b.len());
        let s = checksum::partial(head, init);
        if self.pay.is_empty() {
            return s;
        }
        let p = checksum::partial(self.pay, 0);
        // After an odd number of bytes the payload's words straddle: its sum
        // counts with its bytes swapped (RFC 1071, byte-order independence).
        let p = if head.len() % 2 == 1 {
            u32::from(checksum::fold(p).swap_bytes())
        } else {
            u32::from(checksum::fold(p))
        };
        u32::from(checksum::fold(s)) + p
    }
}

/// True if the innermost headers are IP with TCP or UDP ports, so the packet has a
/// flow hash (a first fragment has; a later one has not).
#[inline]
pub(super) fn has_ports(f: Frame<'_>) -> bool {
    let h = f.l.innermost();
    matches!(h.l3, L3Kind::Ipv4 | L3Kind::Ipv6) && matches!(h.l4, L4Kind::Tcp | L4Kind::Udp)
}

/// The flow hash of innermost addresses `addrs` (IPv4: source and destination;
/// IPv6: both folded to 64 bits) and `ports`: one multiply, the high half kept.
#[inline]
pub(super) const fn hash(addrs: u64, ports: u32) -> u32 {
    let x = addrs.rotate_left(17) ^ (ports as u64);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32
}

/// IPv6 source and destination addresses (32 bytes) folded to 64 bits.
#[inline]
pub(super) fn fold_v6(a: u64, b: u64, c: u64, d: u64) -> u64 {
    a ^ b.rotate_left(16) ^ c.rotate_left(32) ^ d.rotate_left(48)
}

/// The flow hash read from the frame's bytes: innermost addresses and ports, as
/// [`View::flow_hash`] computes it (for frames refused before a view exists).
#[inline]
pub(super) fn flow_hash(f: Frame<'_>) -> u32 {
    let h = f.l.innermost();
    let l3 = usize::from(h.l3_offset);
    let addrs = match h.l3 {
        L3Kind::Ipv6 => fold_v6(
            bytes::be64(f.b, l3 + 8),
            bytes::be64(f.b, l3 + 16),
            bytes::be64(f.b, l3 + 24),
            bytes::be64(f.b, l3 + 32),
        ),
        _ => bytes::be64(f.b, l3 + 12),
    };
    hash(addrs, bytes::be32(f.b, usize::from(h.l4_offset)))
}

impl View<'_> {
    /// The flow hash: innermost addresses and ports. Tunnel fields are left out on
    /// purpose, so that flows that differ only there share a bucket and the layers
    /// can say why they are kept apart
    /// ([`GroCounters::split`](super::GroCounters::split)).
    #[inline]
    pub(super) fn flow_hash(&self) -> u32 {
        let lv = self.tunnel.as_ref().map_or(&self.outer, |(_, i)| i);
        let addrs = match lv.ip {
            Ip::V4(x) => bytes::be64(x, 12),
            Ip::V6(x, _) => fold_v6(
                bytes::be64(x, 8),
                bytes::be64(x, 16),
                bytes::be64(x, 24),
                bytes::be64(x, 32),
            ),
        };
        let ports = match self.l4 {
            Trans::Tcp(t, _) => bytes::be32(t, 0),
            Trans::Udp(u) => bytes::be32(u, 0),
        };
        hash(addrs, ports)
    }
}
