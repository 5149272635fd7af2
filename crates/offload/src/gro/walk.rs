//! The composition: a frame's headers walked outer to inner, each handed to the
//! module of its own kind, as Linux's `dev_gro_receive` hands a packet to
//! `inet_gro_receive` / `ipv6_gro_receive`, which hand it to `udp_gro_receive` /
//! `gre_gro_receive`, then `vxlan_gro_receive` / `geneve_gro_receive`,
//! `eth_gro_receive`, the inner IP layer and `tcp_gro_receive`.
//!
//! The walk is the same for every stack: outer Ethernet, outer IP, then, in a
//! tunnel, the tunnel header(s), inner Ethernet and inner IP, then the transport.
//! At each level a small dispatcher picks the function for that header's kind
//! (IPv4 or IPv6; VXLAN, GENEVE or GRE; TCP or UDP); no function looks at more than
//! one level, and none matches on tunnel and inner protocol together.

use super::FlushReason;
use super::bytes;
use super::ipv4::IdMode;
use super::{eth, geneve, gre, ipv4, ipv6, tcp, udp, udp_tunnel, vxlan};
use crate::meta::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta};
use linerate_wire::ipv4::protocol;
use linerate_wire::layout::{Fragment, Headers, L3Kind, L4Kind, Layout, Tunnel, TunnelKind};
use linerate_wire::tcp::Flags;

/// A frame and its layout, as the layers see it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Frame<'a> {
    /// The frame's bytes; the innermost IP packet ends at the end (checked).
    pub(super) b: &'a [u8],
    /// Where its headers are.
    pub(super) l: &'a Layout,
}

impl Frame<'_> {
    /// The headers of the flow: inner in a tunnel, else outer.
    #[inline]
    pub(super) fn innermost(&self) -> &Headers {
        self.l.innermost()
    }

    /// Payload bytes after the innermost transport header.
    #[inline]
    pub(super) fn payload_len(&self) -> usize {
        self.b.len().saturating_sub(usize::from(self.l.payload))
    }

    /// The payload after the innermost transport header.
    #[inline]
    pub(super) fn payload(&self) -> &[u8] {
        bytes::range(self.b, usize::from(self.l.payload), self.b.len())
    }

    /// True if the layout's headers lie inside the frame (it may have come with the
    /// meta rather than from parsing this frame).
    #[inline]
    pub(super) fn fits(&self) -> bool {
        let end = self.b.len();
        let inner_ok = self.l.inner.is_none_or(|i| i.l3_end() <= end);
        usize::from(self.l.payload) <= end && self.l.outer.l3_end() <= end && inner_ok
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
    const fn csum_offset(self) -> u16 {
        match self {
            L4::Tcp => 16,
            L4::Udp => 6,
        }
    }
}

/// What a run remembers besides its first frame's headers.
#[derive(Debug, Clone, Copy)]
pub(super) struct RunState {
    /// The transport protocol.
    pub(super) l4: L4,
    /// Segments held.
    pub(super) segs: u16,
    /// Segment size: the first segment's payload (TCP: the MSS).
    pub(super) size: u16,
    /// TCP: the sequence number the next segment must have.
    pub(super) next_seq: u32,
    /// TCP: FIN and PSH of merged segments, ORed into the head at completion.
    pub(super) or_flags: Flags,
    /// IPv4 ID mode per IP level: 0 the outer (or only) header, 1 the inner.
    pub(super) ids: [IdMode; 2],
}

impl RunState {
    /// The state of a free slot.
    pub(super) const EMPTY: RunState = RunState {
        l4: L4::Tcp,
        segs: 0,
        size: 0,
        next_seq: 0,
        or_flags: Flags::empty(),
        ids: [IdMode::Undecided; 2],
    };

    /// The state of a run that `p` starts.
    #[inline]
    pub(super) fn start(p: Frame<'_>, l4: L4) -> RunState {
        let len = p.payload_len();
        let h = p.innermost();
        RunState {
            l4,
            segs: 1,
            size: u16::try_from(len).unwrap_or(u16::MAX),
            next_seq: match l4 {
                L4::Tcp => tcp::seq(p.b, h).wrapping_add(len as u32),
                L4::Udp => 0,
            },
            or_flags: Flags::empty(),
            ids: [IdMode::Undecided; 2],
        }
    }

    /// Records that `p` joined the run, with the ID modes `ids` decided by
    /// [`must_flush`].
    #[inline]
    pub(super) fn merged(&mut self, p: Frame<'_>, ids: [IdMode; 2]) {
        self.segs = self.segs.saturating_add(1);
        self.ids = ids;
        if self.l4 == L4::Tcp {
            let len = p.payload_len();
            self.next_seq = self.next_seq.wrapping_add(len as u32);
            let f = tcp::flags(p.b, p.innermost());
            if f.contains(Flags::FIN) {
                self.or_flags |= Flags::FIN;
            }
            if f.contains(Flags::PSH) {
                self.or_flags |= Flags::PSH;
            }
        }
    }
}

/// Which run family a packet belongs to, or why it is refused at once.
#[inline]
pub(super) fn classify(p: Frame<'_>, udp_on: bool) -> Result<L4, FlushReason> {
    let outer = &p.l.outer;
    if outer.frag != Fragment::None || p.l.inner.is_some_and(|i| i.frag != Fragment::None) {
        return Err(FlushReason::Fragment);
    }
    if p.l.tunnel.is_some() && p.l.inner.is_none() {
        return Err(FlushReason::Unsupported);
    }
    let h = p.innermost();
    if !matches!(h.l3, L3Kind::Ipv4 | L3Kind::Ipv6) {
        return Err(FlushReason::Unsupported);
    }
    match h.l4 {
        L4Kind::Tcp => Ok(L4::Tcp),
        L4Kind::Udp if udp_on => Ok(L4::Udp),
        L4Kind::Udp => Err(FlushReason::UdpOff),
        _ => Err(FlushReason::Unsupported),
    }
}

/// True if the innermost headers are IP with TCP or UDP ports, so the packet has a
/// flow hash (a first fragment has; a later one has not).
#[inline]
pub(super) fn has_ports(p: Frame<'_>) -> bool {
    let h = p.innermost();
    matches!(h.l3, L3Kind::Ipv4 | L3Kind::Ipv6) && matches!(h.l4, L4Kind::Tcp | L4Kind::Udp)
}

/// Mixes 64 bits into 32 (the finaliser of MurmurHash3).
#[inline]
const fn mix(mut x: u64) -> u32 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x as u32
}

/// The flow hash: innermost addresses and ports. Tunnel fields are left out on
/// purpose, so that flows that differ only there share a bucket and the layers can
/// say why they are kept apart ([`GroCounters::split`](super::GroCounters::split)).
#[inline]
pub(super) fn flow_hash(p: Frame<'_>) -> u32 {
    let h = p.innermost();
    let l3 = usize::from(h.l3_offset);
    let addrs = match h.l3 {
        L3Kind::Ipv6 => {
            bytes::be64(p.b, l3 + 8)
                ^ bytes::be64(p.b, l3 + 16).rotate_left(17)
                ^ bytes::be64(p.b, l3 + 24).rotate_left(31)
                ^ bytes::be64(p.b, l3 + 32).rotate_left(47)
        }
        _ => bytes::be64(p.b, l3 + 12),
    };
    let ports = u64::from(bytes::be32(p.b, usize::from(h.l4_offset)));
    mix(addrs.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ports)
}

// ---- per-level dispatchers -------------------------------------------------------

#[inline]
fn ip_check(b: &[u8], h: &Headers, end: usize) -> Result<(), FlushReason> {
    match h.l3 {
        L3Kind::Ipv4 => ipv4::check(b, h, end),
        L3Kind::Ipv6 => ipv6::check(b, h, end),
        _ => Err(FlushReason::Unsupported),
    }
}

#[inline]
fn ip_same_flow(p: &[u8], ph: &Headers, h: &[u8], hh: &Headers) -> Result<(), FlushReason> {
    match (ph.l3, hh.l3) {
        (L3Kind::Ipv4, L3Kind::Ipv4) => ipv4::same_flow(p, ph, h, hh),
        (L3Kind::Ipv6, L3Kind::Ipv6) => ipv6::same_flow(p, ph, h, hh),
        _ => Err(FlushReason::Tuple),
    }
}

#[inline]
fn ip_must_flush(
    p: &[u8],
    ph: &Headers,
    h: &[u8],
    hh: &Headers,
    mode: IdMode,
    count: u16,
) -> Result<IdMode, FlushReason> {
    match ph.l3 {
        L3Kind::Ipv4 => ipv4::must_flush(p, ph, h, hh, mode, count),
        _ => ipv6::must_flush(p, ph, h, hh).map(|()| mode),
    }
}

#[inline]
fn ip_pseudo(b: &[u8], h: &Headers, proto: u8, l4_len: u16) -> u32 {
    match h.l3 {
        L3Kind::Ipv4 => ipv4::pseudo(b, h, proto, l4_len),
        _ => ipv6::pseudo(b, h, proto, l4_len),
    }
}

#[inline]
fn ip_complete(b: &mut [u8], h: &mut Headers, total: u16) {
    match h.l3 {
        L3Kind::Ipv4 => ipv4::complete(b, h, total),
        _ => ipv6::complete(b, h, total),
    }
}

#[inline]
fn tunnel_check(b: &[u8], o: &Headers, t: &Tunnel, end: usize) -> Result<(), FlushReason> {
    match t.kind {
        TunnelKind::Vxlan => udp_tunnel::check(b, o, end),
        TunnelKind::Geneve => {
            udp_tunnel::check(b, o, end)?;
            geneve::check(b, t)
        }
        TunnelKind::Nvgre => gre::check(b, t),
    }
}

#[inline]
fn tunnel_same_flow(
    p: Frame<'_>,
    pt: &Tunnel,
    h: Frame<'_>,
    ht: &Tunnel,
) -> Result<(), FlushReason> {
    if pt.kind != ht.kind {
        return Err(FlushReason::Tuple);
    }
    match pt.kind {
        TunnelKind::Vxlan => {
            udp_tunnel::same_flow(p.b, &p.l.outer, h.b, &h.l.outer)?;
            vxlan::same_flow(p.b, pt, h.b, ht)
        }
        TunnelKind::Geneve => {
            udp_tunnel::same_flow(p.b, &p.l.outer, h.b, &h.l.outer)?;
            geneve::same_flow(p.b, pt, h.b, ht)
        }
        TunnelKind::Nvgre => gre::same_flow(p.b, pt, h.b, ht),
    }
}

/// Takes one verified checksum level, if the meta left any.
#[inline]
fn take_level(trusted: &mut u8) -> bool {
    if *trusted > 0 {
        *trusted -= 1;
        true
    } else {
        false
    }
}

/// Length from `from` to the end of `b`, as a header length field.
#[inline]
fn len_from(b: &[u8], from: u16) -> u16 {
    u16::try_from(b.len().saturating_sub(usize::from(from))).unwrap_or(u16::MAX)
}

/// Checks the transport checksums, outer to inner. `Verified { levels }` vouches
/// for the first `levels` checksums present (a zero outer UDP checksum is not one,
/// as in Linux's `csum_level`); the others are verified here in software.
fn verify_checksums(p: Frame<'_>, csum: Checksum, l4: L4) -> Result<(), FlushReason> {
    let h = p.innermost();
    let mut trusted = match csum {
        Checksum::None => 0,
        Checksum::Verified { levels } => levels,
        Checksum::Partial { start, offset } => {
            return if start == h.l4_offset && offset == l4.csum_offset() {
                Ok(())
            } else {
                Err(FlushReason::CsumPartial)
            };
        }
    };
    if let Some(t) = &p.l.tunnel {
        let o = &p.l.outer;
        match t.kind {
            TunnelKind::Vxlan | TunnelKind::Geneve => {
                if udp_tunnel::has_csum(p.b, o) && !take_level(&mut trusted) {
                    let pseudo = ip_pseudo(p.b, o, protocol::UDP, len_from(p.b, o.l4_offset));
                    udp_tunnel::verify(p.b, o, pseudo)?;
                }
            }
            TunnelKind::Nvgre => {
                if gre::has_csum(p.b, t) && !take_level(&mut trusted) {
                    gre::verify(p.b, t)?;
                }
            }
        }
    }
    if !take_level(&mut trusted) {
        let pseudo = ip_pseudo(p.b, h, h.protocol, len_from(p.b, h.l4_offset));
        match l4 {
            L4::Tcp => tcp::verify(p.b, h, pseudo)?,
            L4::Udp => udp::verify(p.b, h, pseudo)?,
        }
    }
    Ok(())
}

// ---- the walks -------------------------------------------------------------------

/// The packet-level checks of every level, outer to inner, then the checksums.
pub(super) fn check(p: Frame<'_>, csum: Checksum, l4: L4) -> Result<(), FlushReason> {
    let end = p.b.len();
    let o = &p.l.outer;
    ip_check(p.b, o, end)?;
    if let (Some(t), Some(i)) = (&p.l.tunnel, &p.l.inner) {
        tunnel_check(p.b, o, t, end)?;
        ip_check(p.b, i, end)?;
    }
    let h = p.innermost();
    match l4 {
        L4::Tcp => tcp::check(p.b, h, p.payload_len())?,
        L4::Udp => udp::check(p.b, h, end)?,
    }
    verify_checksums(p, csum, l4)
}

/// Same flow: every level agrees, outer to inner; the first that does not says why.
#[inline]
pub(super) fn same_flow(p: Frame<'_>, h: Frame<'_>, l4: L4) -> Result<(), FlushReason> {
    eth::same_flow(p.b, &p.l.outer, h.b, &h.l.outer)?;
    ip_same_flow(p.b, &p.l.outer, h.b, &h.l.outer)?;
    match (&p.l.tunnel, &h.l.tunnel, &p.l.inner, &h.l.inner) {
        (None, None, _, _) => {}
        (Some(pt), Some(ht), Some(pi), Some(hi)) => {
            tunnel_same_flow(p, pt, h, ht)?;
            eth::same_flow(p.b, pi, h.b, hi)?;
            ip_same_flow(p.b, pi, h.b, hi)?;
        }
        _ => return Err(FlushReason::Tuple),
    }
    let (ph, hh) = (p.innermost(), h.innermost());
    match l4 {
        L4::Tcp => tcp::same_flow(p.b, ph, h.b, hh),
        L4::Udp => udp::same_flow(p.b, ph, h.b, hh),
    }
}

/// The flush rules of every level for `p` against the run `h` in state `st`
/// (transport, then IP outer to inner).
/// Returns the run's IPv4 ID modes if `p` may join.
#[inline]
pub(super) fn must_flush(
    p: Frame<'_>,
    h: Frame<'_>,
    st: &RunState,
) -> Result<[IdMode; 2], FlushReason> {
    // The transport first, as in `tcp_gro_receive`: when a segment breaks several
    // rules (a reordered segment also has an out-of-turn IP ID), the transport's
    // reason is the one counted.
    let (ph, hh) = (p.innermost(), h.innermost());
    match st.l4 {
        L4::Tcp => tcp::must_flush(p.b, ph, h.b, hh, p.payload_len(), st.size, st.next_seq)?,
        L4::Udp => udp::must_flush(p.b, ph, h.b, hh)?,
    }
    let mut ids = st.ids;
    let [outer_id, inner_id] = &mut ids;
    *outer_id = ip_must_flush(p.b, &p.l.outer, h.b, &h.l.outer, *outer_id, st.segs)?;
    if let (Some(pi), Some(hi)) = (&p.l.inner, &h.l.inner) {
        *inner_id = ip_must_flush(p.b, pi, h.b, hi, *inner_id, st.segs)?;
    }
    Ok(ids)
}

/// After `p` joined the run `h`: the transport's reason to flush it now, if any.
#[inline]
pub(super) fn after_merge(p: Frame<'_>, h: Frame<'_>, st: &RunState) -> Option<FlushReason> {
    let (ph, hh) = (p.innermost(), h.innermost());
    match st.l4 {
        L4::Tcp => tcp::after_merge(p.b, ph, p.payload_len(), st.size),
        L4::Udp => udp::after_merge(p.b, ph, h.b, hh),
    }
}

/// Whether `p`, which found no run to join, may start one.
#[inline]
pub(super) fn can_start(p: Frame<'_>, l4: L4) -> Result<(), FlushReason> {
    match l4 {
        L4::Tcp => tcp::can_start(p.b, p.innermost()),
        L4::Udp => Ok(()),
    }
}

/// Completes a merged run in place (Linux's `*_gro_complete`, inner to outer in
/// effect, every level for its own header) and returns the meta of the merged frame.
pub(super) fn complete(
    b: &mut [u8],
    l: &mut Layout,
    st: &RunState,
    first: &OffloadMeta,
) -> OffloadMeta {
    let total = len_from(b, l.outer.l3_offset);
    ip_complete(b, &mut l.outer, total);
    let mut tunnel = GsoTunnel::None;
    if let Some(t) = l.tunnel {
        let o = l.outer;
        match t.kind {
            TunnelKind::Vxlan | TunnelKind::Geneve => {
                let len = len_from(b, o.l4_offset);
                let pseudo = ip_pseudo(b, &o, protocol::UDP, len);
                tunnel = GsoTunnel::Udp {
                    outer_csum: udp_tunnel::has_csum(b, &o),
                };
                udp_tunnel::complete(b, &o, len, pseudo);
            }
            TunnelKind::Nvgre => {
                tunnel = GsoTunnel::Gre {
                    csum: gre::has_csum(b, &t),
                };
                gre::complete(b, &t);
            }
        }
    }
    if let Some(inner) = l.inner.as_mut() {
        let total = len_from(b, inner.l3_offset);
        ip_complete(b, inner, total);
    }
    let h = *l.innermost();
    let l4_len = len_from(b, h.l4_offset);
    let pseudo = ip_pseudo(b, &h, h.protocol, l4_len);
    let (kind, ecn) = match st.l4 {
        L4::Tcp => {
            let ecn = tcp::flags(b, &h).contains(Flags::CWR);
            tcp::complete(b, &h, st.or_flags, pseudo);
            let kind = if h.l3 == L3Kind::Ipv6 {
                GsoType::TcpV6
            } else {
                GsoType::TcpV4
            };
            (kind, ecn)
        }
        L4::Udp => {
            udp::complete(b, &h, l4_len, pseudo);
            (GsoType::UdpL4, false)
        }
    };
    let [outer_id, inner_id] = st.ids;
    let (fixed_id, outer_fixed_id) = if l.tunnel.is_some() {
        (inner_id == IdMode::Fixed, outer_id == IdMode::Fixed)
    } else {
        (outer_id == IdMode::Fixed, false)
    };
    OffloadMeta {
        csum: Checksum::Partial {
            start: h.l4_offset,
            offset: st.l4.csum_offset(),
        },
        gso: Some(Gso {
            kind,
            size: st.size,
            tunnel,
            fixed_id,
            outer_fixed_id,
            ecn,
            segs: st.segs,
        }),
        rss: first.rss,
        layout: Some(*l),
    }
}
