//! Checksum offload in software: completion of partial checksums, preparation of
//! partial checksums, and verification of received frames, outer and inner.
//!
//! * [`complete`] turns a frame marked [`Checksum::Partial`] into one whose checksums
//!   are all filled in, as Linux's `skb_checksum_help` does for a device without
//!   checksum offload: the 16-bit field at `start + offset` holds the folded
//!   pseudo-header sum (RFC 1071 / RFC 9293 section 3.1 / RFC 768 / RFC 8200
//!   section 8.1), the sum of `start..end` is complemented into it, and a computed
//!   zero is sent as `0xffff` (`CSUM_MANGLED_0`; harmless for TCP, required for UDP).
//!   In a tunnel the outer UDP checksum (`SKB_GSO_UDP_TUNNEL_CSUM`) and the GRE
//!   checksum (RFC 2784 section 2.5, `SKB_GSO_GRE_CSUM`) are recomputed afterwards
//!   when the meta asks for them; IPv4 header checksums when the options ask.
//! * [`prepare_partial`] is what a stack does before handing a frame to a NIC with
//!   checksum offload (Linux `tcp_v4_send_check` / `__tcp_v6_send_check` /
//!   `udp4_hwcsum`): it writes the pseudo-header sum into the innermost TCP or UDP
//!   checksum field and returns the [`Checksum::Partial`] to put in the meta.
//! * [`verify`] checks a received frame as a NIC with receive checksum offload does:
//!   outer IPv4 header, outer transport (TCP, UDP, GRE), then inner IPv4 header and
//!   inner transport, stopping at the first bad one. [`mark_verified`] records the
//!   result in the meta as [`Checksum::Verified`] (`CHECKSUM_UNNECESSARY` with
//!   `csum_level`).
//!
//! Every function takes untrusted frames: offsets come from the [`Layout`] (which
//! validated them) and every access is bounds-checked; bad input is a
//! [`CsumError`], never a panic.
//!
//! ```
//! use linerate_offload::{csum, Checksum, OffloadMeta};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::layout;
//!
//! let mut frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
//!     .build(b"some payload");
//! let l = layout::parse(&frame).unwrap();
//! // What a stack hands to a NIC with checksum offload...
//! let partial = csum::prepare_partial(&mut frame, &l).unwrap();
//! assert_eq!(partial, Checksum::Partial { start: 34, offset: 16 });
//! assert!(csum::verify(&frame, &l).bad.is_some());
//! // ...and what the NIC layer does when the backend has none.
//! let meta = OffloadMeta { csum: partial, ..OffloadMeta::plain() };
//! assert_eq!(csum::complete(&mut frame, &meta).unwrap(), Checksum::None);
//! let v = csum::verify(&frame, &l);
//! assert_eq!((v.levels, v.ipv4_headers, v.bad), (1, 1, None));
//! ```

use crate::meta::{Checksum, GsoTunnel, OffloadMeta};
use core::fmt;
use linerate_wire::checksum;
use linerate_wire::layout::{self, Fragment, Headers, L3Kind, L4Kind, Layout};
use linerate_wire::{Layer, gre, ipv4, tcp, udp};

/// Why a checksum could not be completed or prepared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CsumError {
    /// The frame's headers do not parse.
    Layout(linerate_wire::Error),
    /// `Checksum::Partial` points outside the frame (or its network packet).
    OutOfFrame {
        /// The partial checksum's start.
        start: u16,
        /// The partial checksum's field offset.
        offset: u16,
        /// Bytes the checksum may cover (the end of the network packet).
        len: usize,
    },
    /// The innermost transport is not TCP or UDP (or is a non-first fragment): there
    /// is no checksum to offload.
    NoTransport,
}

impl fmt::Display for CsumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsumError::Layout(e) => write!(f, "frame does not parse: {e}"),
            CsumError::OutOfFrame { start, offset, len } => write!(
                f,
                "partial checksum (start {start}, offset {offset}) outside a {len}-byte packet"
            ),
            CsumError::NoTransport => f.write_str("no TCP or UDP header to checksum"),
        }
    }
}

impl std::error::Error for CsumError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CsumError::Layout(e) => Some(e),
            _ => None,
        }
    }
}

impl From<linerate_wire::Error> for CsumError {
    fn from(e: linerate_wire::Error) -> Self {
        CsumError::Layout(e)
    }
}

/// Extra work for [`complete_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompleteOptions {
    /// Also recompute every IPv4 header checksum (outer and inner).
    pub ipv4_headers: bool,
    /// Also recompute a present outer checksum (a non-zero outer UDP checksum of a
    /// UDP tunnel, a GRE checksum) even when the meta does not ask for it.
    pub outer: bool,
}

/// Completes the checksums of `frame` as [`complete_with`] with default options:
/// the partial transport checksum, then the outer UDP / GRE checksum when
/// `meta.gso` says the tunnel carries one. Returns the frame's new checksum state
/// ([`Checksum::None`] after completing; `meta.csum` unchanged if it was not partial).
pub fn complete(frame: &mut [u8], meta: &OffloadMeta) -> Result<Checksum, CsumError> {
    complete_with(frame, meta, CompleteOptions::default())
}

/// Completes the checksums of `frame`.
///
/// 1. If `meta.csum` is [`Checksum::Partial`], the transport checksum: the sum of
///    `start` to the end of the network packet holding `start` (which excludes
///    Ethernet padding) is complemented into the field at `start + offset`, whose
///    content (the pseudo-header sum) is included; zero is written as `0xffff`.
/// 2. If `opts.ipv4_headers`, the inner IPv4 header checksum.
/// 3. The outer checksum of a tunnel: the outer UDP checksum when `meta.gso` is a
///    UDP tunnel with `outer_csum` (0 becomes `0xffff`), the GRE checksum when the
///    GRE header carries one and `meta.gso` is a GRE tunnel; either when
///    `opts.outer` and one is present. Without these, outer checksums are left as
///    they are: an encapsulating stack computes them with local checksum offload
///    (LCO), valid once the inner checksum is complete.
/// 4. If `opts.ipv4_headers`, the outer IPv4 header checksum.
///
/// The frame is parsed here ([`layout::parse`]); [`complete_layout`] takes a
/// layout the caller has already.
pub fn complete_with(
    frame: &mut [u8],
    meta: &OffloadMeta,
    opts: CompleteOptions,
) -> Result<Checksum, CsumError> {
    let l = layout::parse(frame)?;
    complete_layout(frame, &l, meta, opts)
}

/// [`complete_with`] with the frame's layout given (parsed with other tunnel
/// ports, say, or already at hand). The layout's offsets are not trusted: every
/// access is bounds-checked, so a stale layout gives wrong sums, never a panic.
pub fn complete_layout(
    frame: &mut [u8],
    l: &Layout,
    meta: &OffloadMeta,
    opts: CompleteOptions,
) -> Result<Checksum, CsumError> {
    let mut state = meta.csum;
    if let Checksum::Partial { start, offset } = meta.csum {
        let end = partial_end(frame, l, usize::from(start));
        fill_partial(frame, start, offset, end)?;
        state = Checksum::None;
    }
    if let Some(inner) = &l.inner {
        if opts.ipv4_headers {
            fill_ipv4_header(frame, inner);
        }
        let (udp_csum, gre_csum) = match meta.gso.map(|g| g.tunnel) {
            Some(GsoTunnel::Udp { outer_csum }) => (outer_csum, false),
            Some(GsoTunnel::Gre { csum }) => (false, csum),
            _ => (false, false),
        };
        match l.outer.l4 {
            L4Kind::Udp => {
                let present = be16(frame, usize::from(l.outer.l4_offset) + 6).unwrap_or(0) != 0;
                if udp_csum || (opts.outer && present) {
                    fill_udp(frame, &l.outer);
                }
            }
            // A GRE header without C has no checksum: fill_gre does nothing.
            L4Kind::Gre if gre_csum || opts.outer => fill_gre(frame, &l.outer),
            _ => {}
        }
    }
    if opts.ipv4_headers {
        fill_ipv4_header(frame, &l.outer);
    }
    Ok(state)
}

/// Where a partial checksum starting at `start` ends: the end of the (inner or
/// outer) network packet that holds `start`, so Ethernet padding is not summed.
fn partial_end(frame: &[u8], l: &Layout, start: usize) -> usize {
    let h = match &l.inner {
        Some(inner) if start >= usize::from(inner.l3_offset) => inner,
        _ => &l.outer,
    };
    h.l3_end().min(frame.len())
}

/// Completes a partial checksum over `start..end` into the field at
/// `start + offset`.
fn fill_partial(frame: &mut [u8], start: u16, offset: u16, end: usize) -> Result<(), CsumError> {
    let (s, at) = (usize::from(start), usize::from(start) + usize::from(offset));
    let out = || CsumError::OutOfFrame {
        start,
        offset,
        len: end,
    };
    if at + 2 > end {
        return Err(out());
    }
    let sum = checksum::partial(frame.get(s..end).ok_or_else(out)?, 0);
    put16(frame, at, mangle_zero(checksum::finish(sum)));
    Ok(())
}

/// A computed checksum of zero is sent as `0xffff` (Linux `CSUM_MANGLED_0`): both
/// verify, and for UDP zero would mean "no checksum".
#[inline]
pub(crate) const fn mangle_zero(c: u16) -> u16 {
    if c == 0 { 0xffff } else { c }
}

fn fill_ipv4_header(frame: &mut [u8], h: &Headers) {
    if h.l3 != L3Kind::Ipv4 {
        return;
    }
    let (l3, l4) = (usize::from(h.l3_offset), usize::from(h.l4_offset));
    put16(frame, l3 + ipv4::field::CHECKSUM.start, 0);
    let c = checksum::checksum(frame.get(l3..l4).unwrap_or_default());
    put16(frame, l3 + ipv4::field::CHECKSUM.start, c);
}

/// Recomputes the UDP checksum of the headers `h` over the UDP length.
fn fill_udp(frame: &mut [u8], h: &Headers) {
    let l4 = usize::from(h.l4_offset);
    let len = usize::from(be16(frame, l4 + udp::field::LENGTH.start).unwrap_or(0));
    let Some(pseudo) = pseudo_sum(frame, h, ipv4::protocol::UDP, len) else {
        return;
    };
    put16(frame, l4 + udp::field::CHECKSUM.start, 0);
    let sum = checksum::partial(frame.get(l4..l4 + len).unwrap_or_default(), pseudo);
    put16(
        frame,
        l4 + udp::field::CHECKSUM.start,
        mangle_zero(checksum::finish(sum)),
    );
}

/// Recomputes the GRE checksum (if the header has one) over the GRE packet.
fn fill_gre(frame: &mut [u8], h: &Headers) {
    let (l4, end) = (usize::from(h.l4_offset), h.l3_end());
    if let Some(buf) = frame.get_mut(l4..end)
        && let Ok(mut p) = gre::Packet::new_checked(buf)
    {
        p.fill_checksum();
    }
}

/// Writes the pseudo-header sum into the innermost TCP or UDP checksum field and
/// returns the matching [`Checksum::Partial`]: the state a frame is in when a stack
/// hands it to a NIC with checksum offload. In a tunnel, the inner transport is
/// prepared; outer checksums are not touched.
pub fn prepare_partial(frame: &mut [u8], layout: &Layout) -> Result<Checksum, CsumError> {
    let h = layout.innermost();
    if h.frag == Fragment::Later {
        return Err(CsumError::NoTransport);
    }
    let l4 = usize::from(h.l4_offset);
    let (proto, offset, len) = match h.l4 {
        L4Kind::Tcp => (
            ipv4::protocol::TCP,
            tcp::field::CHECKSUM.start,
            h.l3_end().saturating_sub(l4),
        ),
        L4Kind::Udp => (
            ipv4::protocol::UDP,
            udp::field::CHECKSUM.start,
            usize::from(be16(frame, l4 + udp::field::LENGTH.start).unwrap_or(0)),
        ),
        _ => return Err(CsumError::NoTransport),
    };
    let pseudo = pseudo_sum(frame, h, proto, len).ok_or(CsumError::NoTransport)?;
    let out = CsumError::OutOfFrame {
        start: h.l4_offset,
        offset: offset as u16,
        len: frame.len(),
    };
    if l4 + offset + 2 > frame.len() {
        return Err(out);
    }
    put16(frame, l4 + offset, checksum::fold(pseudo));
    Ok(Checksum::Partial {
        start: h.l4_offset,
        offset: offset as u16,
    })
}

/// Which checksum was found bad by [`verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BadChecksum {
    /// The header whose checksum is wrong: [`Layer::Ipv4`] (header checksum),
    /// [`Layer::Tcp`], [`Layer::Udp`] or [`Layer::Gre`].
    pub layer: Layer,
    /// True if it is in the inner (encapsulated) headers.
    pub inner: bool,
}

/// What [`verify`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Verdict {
    /// Transport checksums (outer UDP or GRE, then inner TCP or UDP) found good,
    /// counting from the outermost and stopping at the first bad one. Absent
    /// checksums (a zero UDP checksum over IPv4 or of a tunnel over IPv6, GRE without
    /// C) are skipped, not counted, as Linux counts `csum_level`.
    pub levels: u8,
    /// IPv4 header checksums found good (not counted in `levels`, as in Linux).
    pub ipv4_headers: u8,
    /// The first bad checksum, if any (nothing after it is checked).
    pub bad: Option<BadChecksum>,
}

impl Verdict {
    /// True if no checksum was bad.
    pub const fn ok(&self) -> bool {
        self.bad.is_none()
    }
}

/// Verifies the checksums of a received frame, outermost first: the IPv4 header
/// checksum, the transport checksum (TCP, UDP, GRE with C), then the same for the
/// inner headers of a tunnel. ICMP and other protocols are not checked; the L4
/// checksum of a fragment is not checkable and is skipped.
pub fn verify(frame: &[u8], layout: &Layout) -> Verdict {
    let mut v = Verdict::default();
    let tunnel = layout.tunnel.is_some();
    if verify_level(frame, &layout.outer, false, tunnel, &mut v)
        && let Some(inner) = &layout.inner
    {
        verify_level(frame, inner, true, false, &mut v);
    }
    v
}

/// Verifies one header stack into `v`; false if a checksum was bad.
fn verify_level(frame: &[u8], h: &Headers, inner: bool, tunnel: bool, v: &mut Verdict) -> bool {
    let bad = |v: &mut Verdict, layer| {
        v.bad = Some(BadChecksum { layer, inner });
        false
    };
    let (l3, l4, end) = (
        usize::from(h.l3_offset),
        usize::from(h.l4_offset),
        h.l3_end(),
    );
    if h.l3 == L3Kind::Ipv4 {
        if !checksum::verify(frame.get(l3..l4).unwrap_or_default(), 0) {
            return bad(v, Layer::Ipv4);
        }
        v.ipv4_headers += 1;
    }
    if h.frag != Fragment::None {
        return true;
    }
    let good = match h.l4 {
        L4Kind::Tcp => {
            let Some(pseudo) = pseudo_sum(frame, h, ipv4::protocol::TCP, end.saturating_sub(l4))
            else {
                return true;
            };
            if !checksum::verify(frame.get(l4..end).unwrap_or_default(), pseudo) {
                return bad(v, Layer::Tcp);
            }
            true
        }
        L4Kind::Udp => {
            let len = usize::from(be16(frame, l4 + udp::field::LENGTH.start).unwrap_or(0));
            let field = be16(frame, l4 + udp::field::CHECKSUM.start).unwrap_or(0);
            if field == 0 {
                // RFC 768: absent over IPv4. RFC 8200 8.1 forbids it over IPv6,
                // except for tunnels (RFC 6935, RFC 6936).
                if h.l3 == L3Kind::Ipv6 && !tunnel {
                    return bad(v, Layer::Udp);
                }
                false
            } else {
                let Some(pseudo) = pseudo_sum(frame, h, ipv4::protocol::UDP, len) else {
                    return true;
                };
                if !checksum::verify(frame.get(l4..l4 + len).unwrap_or_default(), pseudo) {
                    return bad(v, Layer::Udp);
                }
                true
            }
        }
        L4Kind::Gre => {
            let body = frame.get(l4..end).unwrap_or_default();
            match gre::Packet::new_checked(body) {
                Ok(p) if p.checksum_present() => {
                    if !p.verify_checksum() {
                        return bad(v, Layer::Gre);
                    }
                    true
                }
                _ => false,
            }
        }
        _ => false,
    };
    if good {
        v.levels += 1;
    }
    true
}

/// Records a clean verdict in the meta: `meta.csum` becomes
/// [`Checksum::Verified`] with `verdict.levels`, unless a checksum was bad, none was
/// verified, or the frame is [`Checksum::Partial`] (locally built: nothing to
/// verify). Returns true if the meta was marked.
pub fn mark_verified(meta: &mut OffloadMeta, verdict: &Verdict) -> bool {
    if !verdict.ok() || verdict.levels == 0 || matches!(meta.csum, Checksum::Partial { .. }) {
        return false;
    }
    let levels = match meta.csum {
        Checksum::Verified { levels } => levels.max(verdict.levels),
        _ => verdict.levels,
    };
    meta.csum = Checksum::Verified { levels };
    true
}

/// Parses and verifies `frame` ([`verify`]) and marks `meta` as
/// [`mark_verified`] does.
pub fn verify_meta(frame: &[u8], meta: &mut OffloadMeta) -> Result<Verdict, CsumError> {
    let l = layout::parse(frame)?;
    let v = verify(frame, &l);
    mark_verified(meta, &v);
    Ok(v)
}

/// The pseudo-header sum of the network header of `h` for protocol `proto`
/// carrying `len` bytes; `None` if `h` is not IP.
pub(crate) fn pseudo_sum(frame: &[u8], h: &Headers, proto: u8, len: usize) -> Option<u32> {
    let addrs = pseudo_addr_sum(frame, h)?;
    let len = u32::try_from(len).ok()?;
    Some(checksum::combine(
        checksum::combine(addrs, u32::from(proto)),
        checksum::combine(len >> 16, len & 0xffff),
    ))
}

/// The sum of the source and destination addresses of the network header of `h`.
pub(crate) fn pseudo_addr_sum(frame: &[u8], h: &Headers) -> Option<u32> {
    let l3 = usize::from(h.l3_offset);
    let addrs = match h.l3 {
        L3Kind::Ipv4 => frame.get(l3 + 12..l3 + 20)?,
        L3Kind::Ipv6 => frame.get(l3 + 8..l3 + 40)?,
        _ => return None,
    };
    Some(checksum::partial(addrs, 0))
}

/// The big-endian 16-bit word at `at`.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*s.first()?, *s.get(1)?]))
}

/// The big-endian 32-bit word at `at`.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> Option<u32> {
    let s: [u8; 4] = b.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(s))
}

/// Writes `v` big-endian at `at`; does nothing if that is outside `b` (callers
/// write at offsets the layout validated).
#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at.wrapping_add(2)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// Writes `v` big-endian at `at`; does nothing if that is outside `b`.
#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at.wrapping_add(4)) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests;
