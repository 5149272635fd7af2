//! The composition: a frame's headers walked outer to inner, each handed to the
//! module of its own kind, as Linux's `dev_gro_receive` hands a packet to
//! `inet_gro_receive` / `ipv6_gro_receive`, which hand it to `udp_gro_receive` /
//! `gre_gro_receive`, then `vxlan_gro_receive` / `geneve_gro_receive`,
//! `eth_gro_receive`, the inner IP layer and `tcp_gro_receive`.
//!
//! A [`View`] resolves, once per frame, where each level's header is and what kind
//! it is (see [`super::view`]). The walks ([`check`],
//! [`same_flow`], [`must_flush`], [`after_merge`], [`complete`]) go through the
//! levels outer to inner; at each level a small dispatcher picks the function for
//! that header's kind (IPv4 or IPv6; VXLAN, GENEVE or GRE; TCP or UDP). No function
//! looks at more than one level, and none matches on tunnel and inner protocol
//! together.

use super::FlushReason;
use super::ipv4::IdMode;
use super::view::{Ip, L4, Level, Trans, Tun, View};
use super::{eth, geneve, gre, ipv4, ipv6, tcp, udp, udp_tunnel, vxlan};
use crate::meta::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta};
use linerate_wire::checksum;
use linerate_wire::ipv4::protocol;
use linerate_wire::layout::{Headers, L3Kind, Layout, TunnelKind};
use linerate_wire::tcp::Flags;

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
    pub(super) fn start(p: &View<'_>) -> RunState {
        let len = p.payload_len();
        let next_seq = match p.l4 {
            Trans::Tcp(t, _) => tcp::seq(t).wrapping_add(len as u32),
            Trans::Udp(_) => 0,
        };
        RunState {
            l4: p.l4(),
            segs: 1,
            size: u16::try_from(len).unwrap_or(u16::MAX),
            next_seq,
            or_flags: Flags::empty(),
            ids: [IdMode::Undecided; 2],
        }
    }

    /// Records that `p` joined the run, with the ID modes `ids` decided by
    /// [`must_flush`].
    #[inline]
    pub(super) fn merged(&mut self, p: &View<'_>, ids: [IdMode; 2]) {
        self.segs = self.segs.saturating_add(1);
        self.ids = ids;
        if let Trans::Tcp(t, _) = p.l4 {
            self.next_seq = self.next_seq.wrapping_add(p.payload_len() as u32);
            self.or_flags |= tcp::flags(t) & (Flags::FIN | Flags::PSH);
        }
    }
}

// ---- per-level dispatchers -------------------------------------------------------

#[inline]
fn ip_check(v: &View<'_>, lv: &Level<'_>) -> Result<(), FlushReason> {
    let len = v.len().saturating_sub(usize::from(lv.h.l3_offset));
    match lv.ip {
        Ip::V4(x) => ipv4::check(x, len),
        Ip::V6(x, _) => ipv6::check(x, lv.h.frag, len),
    }
}

#[inline(always)]
fn level_same_flow(p: &Level<'_>, h: &Level<'_>) -> Result<(), FlushReason> {
    eth::same_flow(&p.mac, &h.mac)?;
    match (p.ip, h.ip) {
        (Ip::V4(x), Ip::V4(y)) => ipv4::same_flow(x, y),
        (Ip::V6(x, xe), Ip::V6(y, ye)) => ipv6::same_flow(x, xe, y, ye),
        _ => Err(FlushReason::Tuple),
    }
}

#[inline]
fn ip_must_flush(
    p: &Level<'_>,
    h: &Level<'_>,
    mode: IdMode,
    count: u16,
) -> Result<IdMode, FlushReason> {
    match (p.ip, h.ip) {
        (Ip::V4(x), Ip::V4(y)) => ipv4::must_flush(x, y, mode, count),
        (Ip::V6(x, _), Ip::V6(y, _)) => ipv6::must_flush(x, y).map(|()| mode),
        _ => Err(FlushReason::Tuple),
    }
}

#[inline]
fn ip_pseudo(b: &[u8], h: &Headers, proto: u8, l4_len: u16) -> u32 {
    match h.l3 {
        L3Kind::Ipv4 => ipv4::header(b, h).map_or(0, |x| ipv4::pseudo(x, proto, l4_len)),
        _ => ipv6::header(b, h).map_or(0, |x| ipv6::pseudo(x, proto, l4_len)),
    }
}

#[inline]
fn ip_complete(b: &mut [u8], h: &mut Headers, total: u16) {
    match h.l3 {
        L3Kind::Ipv4 => ipv4::complete(b, h, total),
        _ => ipv6::complete(b, h, total),
    }
}

#[inline(always)]
fn tunnel_check(v: &View<'_>, t: &Tun<'_>) -> Result<(), FlushReason> {
    let udp_len = v.len().saturating_sub(usize::from(v.l.outer.l4_offset));
    match *t {
        Tun::Vxlan(u, _) => udp_tunnel::check(u, udp_len),
        Tun::Geneve(u, g) => {
            udp_tunnel::check(u, udp_len)?;
            geneve::base(g).map_or(Err(FlushReason::Unparsed), geneve::check)
        }
        Tun::Gre(g) => gre::check(g),
    }
}

#[inline(always)]
fn tunnel_same_flow(p: &Tun<'_>, h: &Tun<'_>) -> Result<(), FlushReason> {
    match (*p, *h) {
        (Tun::Vxlan(pu, px), Tun::Vxlan(hu, hx)) => {
            udp_tunnel::same_flow(pu, hu)?;
            vxlan::same_flow(px, hx)
        }
        (Tun::Geneve(pu, pg), Tun::Geneve(hu, hg)) => {
            udp_tunnel::same_flow(pu, hu)?;
            geneve::same_flow(pg, hg)
        }
        (Tun::Gre(pg), Tun::Gre(hg)) => gre::same_flow(pg, hg),
        _ => Err(FlushReason::Tuple),
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

/// Length from `from` to the end of a frame `total` bytes long, as a header
/// length field.
#[inline]
fn len_from(total: usize, from: u16) -> u16 {
    u16::try_from(total.saturating_sub(usize::from(from))).unwrap_or(u16::MAX)
}

/// Length from `from` to the end of the frame `v` (both parts), as a header
/// length field.
#[inline]
fn view_len_from(v: &View<'_>, from: u16) -> u16 {
    u16::try_from(v.len().saturating_sub(usize::from(from))).unwrap_or(u16::MAX)
}

/// What checking a frame's checksums found, and what it left for the copy.
#[derive(Debug, Clone, Copy)]
pub(super) struct Csum {
    /// The frame's checksum state once every checksum is known good: as it came,
    /// or [`Checksum::Verified`] with every level present when some were verified
    /// here (as [`crate::csum::mark_verified`] records a software verdict).
    pub(super) state: Checksum,
    /// True if a checksum was (or, `deferred`, is to be) verified in software.
    pub(super) software: bool,
    /// The innermost transport checksum, not verified yet: the sum of its
    /// pseudo-header and transport header. It is good if that plus the payload's
    /// sum folds to all ones, which GRO finds out while it copies the payload
    /// ([`checksum::copy_partial`]), reading each byte once.
    pub(super) deferred: Option<u32>,
}

impl Csum {
    /// Verifies a deferred checksum now, without copying (for the paths where the
    /// frame is not copied, or the verdict is needed before the copy): `Ok` with no
    /// deferred part left, or [`FlushReason::CsumBad`].
    #[inline]
    pub(super) fn settle(&mut self, v: &View<'_>) -> Result<(), FlushReason> {
        match self.deferred.take() {
            Some(head) if !sums_to_ones(checksum::partial(v.payload(), head)) => {
                Err(FlushReason::CsumBad)
            }
            _ => Ok(()),
        }
    }
}

/// True if an unfolded sum over a whole checksummed area folds to all ones.
#[inline]
pub(super) fn sums_to_ones(sum: u32) -> bool {
    checksum::fold(sum) == 0xffff
}

/// Checks the transport checksums, outer to inner. `Verified { levels }` vouches
/// for the first `levels` checksums present (a zero outer UDP checksum is not one,
/// as in Linux's `csum_level`); the others are verified here in software, the
/// innermost transport's only as far as its headers when `defer` (see
/// [`Csum::deferred`]).
#[inline(always)]
fn verify_checksums(v: &View<'_>, csum: Checksum, defer: bool) -> Result<Csum, FlushReason> {
    let as_came = Csum {
        state: csum,
        software: false,
        deferred: None,
    };
    if let (Checksum::Verified { levels: 1.. }, None) = (csum, &v.tunnel) {
        return Ok(as_came); // the common case: one level, the transport's, vouched for
    }
    let h = v.l.innermost();
    let (mut trusted, given) = match csum {
        Checksum::None => (0, 0),
        Checksum::Verified { levels } => (levels, levels),
        Checksum::Partial { start, offset } => {
            return if start == h.l4_offset && offset == v.l4().csum_offset() {
                Ok(as_came)
            } else {
                Err(FlushReason::CsumPartial)
            };
        }
    };
    // Checksums present: the innermost transport's (UDP GRO refuses a zero one)
    // and a tunnel's outer one.
    let mut present: u8 = 1;
    let mut software = false;
    if let Some((t, _)) = &v.tunnel {
        let o = &v.l.outer;
        match *t {
            Tun::Vxlan(u, _) | Tun::Geneve(u, _) => {
                if udp_tunnel::has_csum(u) {
                    present += 1;
                    if !take_level(&mut trusted) {
                        let pseudo =
                            ip_pseudo(v.b, o, protocol::UDP, view_len_from(v, o.l4_offset));
                        udp_tunnel::verify(v, o, pseudo)?;
                        software = true;
                    }
                }
            }
            Tun::Gre(g) => {
                if gre::has_csum(g) {
                    present += 1;
                    if !take_level(&mut trusted) {
                        gre::verify(v, v.l.tunnel.map_or(0, |t| t.offset))?;
                        software = true;
                    }
                }
            }
        }
    }
    let mut deferred = None;
    if !take_level(&mut trusted) {
        software = true;
        let pseudo = ip_pseudo(v.b, h, h.protocol, view_len_from(v, h.l4_offset));
        let (l4, payload) = (usize::from(h.l4_offset), usize::from(v.l.payload));
        // The payload's sum adds to the headers' as it is if it starts an even
        // number of bytes into the transport header (always, for TCP and UDP).
        if defer && l4 <= payload && payload <= v.b.len() && (payload - l4) % 2 == 0 {
            deferred = Some(checksum::partial(
                super::bytes::range(v.b, l4, payload),
                pseudo,
            ));
        } else {
            match v.l4 {
                Trans::Tcp(..) => tcp::verify(v, h, pseudo)?,
                Trans::Udp(_) => udp::verify(v, h, pseudo)?,
            }
        }
    }
    let state = if software {
        Checksum::Verified {
            levels: given.max(present),
        }
    } else {
        csum
    };
    Ok(Csum {
        state,
        software,
        deferred,
    })
}

// ---- the walks -------------------------------------------------------------------

/// The packet-level checks of every level, outer to inner, then the checksums
/// (the innermost transport checksum left for the copy when `defer`, see
/// [`Csum::deferred`]).
#[inline(always)]
pub(super) fn check(v: &View<'_>, csum: Checksum, defer: bool) -> Result<Csum, FlushReason> {
    ip_check(v, &v.outer)?;
    if let Some((t, inner)) = &v.tunnel {
        tunnel_check(v, t)?;
        ip_check(v, inner)?;
    }
    match v.l4 {
        Trans::Tcp(t, _) => tcp::check(t, v.payload_len())?,
        Trans::Udp(u) => {
            let len = v
                .len()
                .saturating_sub(usize::from(v.l.innermost().l4_offset));
            udp::check(u, len)?;
        }
    }
    verify_checksums(v, csum, defer)
}

/// Same flow: every level agrees, outer to inner; the first that does not says why.
#[inline(always)]
pub(super) fn same_flow(p: &View<'_>, h: &View<'_>) -> Result<(), FlushReason> {
    level_same_flow(&p.outer, &h.outer)?;
    match (&p.tunnel, &h.tunnel) {
        (None, None) => {}
        (Some((pt, pi)), Some((ht, hi))) => {
            tunnel_same_flow(pt, ht)?;
            level_same_flow(pi, hi)?;
        }
        _ => return Err(FlushReason::Tuple),
    }
    match (p.l4, h.l4) {
        (Trans::Tcp(x, _), Trans::Tcp(y, _)) => tcp::same_flow(x, y),
        (Trans::Udp(x), Trans::Udp(y)) => udp::same_flow(x, y),
        _ => Err(FlushReason::Tuple),
    }
}

/// The flush rules of every level for `p` against the run `h` in state `st`
/// (transport, then IP outer to inner). Returns the run's IPv4 ID modes if `p` may
/// join.
#[inline(always)]
pub(super) fn must_flush(
    p: &View<'_>,
    h: &View<'_>,
    st: &RunState,
) -> Result<[IdMode; 2], FlushReason> {
    // The transport first, as in `tcp_gro_receive`: when a segment breaks several
    // rules (a reordered segment also has an out-of-turn IP ID), the transport's
    // reason is the one counted.
    match (p.l4, h.l4) {
        (Trans::Tcp(x, xo), Trans::Tcp(y, yo)) => {
            tcp::must_flush(x, xo, y, yo, p.payload_len(), st.size, st.next_seq)?;
        }
        (Trans::Udp(x), Trans::Udp(y)) => udp::must_flush(x, y)?,
        _ => return Err(FlushReason::Tuple),
    }
    let [outer_id, inner_id] = st.ids;
    let outer_id = ip_must_flush(&p.outer, &h.outer, outer_id, st.segs)?;
    let inner_id = match (&p.tunnel, &h.tunnel) {
        (Some((_, pi)), Some((_, hi))) => ip_must_flush(pi, hi, inner_id, st.segs)?,
        _ => inner_id,
    };
    Ok([outer_id, inner_id])
}

/// After `p` joined the run `h`: the transport's reason to flush it now, if any.
#[inline]
pub(super) fn after_merge(p: &View<'_>, h: &View<'_>, st: &RunState) -> Option<FlushReason> {
    match (p.l4, h.l4) {
        (Trans::Tcp(x, _), _) => tcp::after_merge(x, p.payload_len(), st.size),
        (Trans::Udp(x), Trans::Udp(y)) => udp::after_merge(x, y),
        _ => None,
    }
}

/// Whether `p`, which found no run to join, may start one.
#[inline]
pub(super) fn can_start(p: &View<'_>) -> Result<(), FlushReason> {
    match p.l4 {
        Trans::Tcp(t, _) => tcp::can_start(t),
        Trans::Udp(_) => Ok(()),
    }
}

/// Completes a merged run in place (Linux's `*_gro_complete`, every level for its
/// own header) and returns the meta of the merged frame.
pub(super) fn complete(
    b: &mut [u8],
    total_len: usize,
    l: &mut Layout,
    st: &RunState,
    first: &OffloadMeta,
) -> OffloadMeta {
    let total = len_from(total_len, l.outer.l3_offset);
    ip_complete(b, &mut l.outer, total);
    // The merged frame has no padding: every transport segment ends with it.
    let end = u32::try_from(total_len).unwrap_or(u32::MAX);
    l.outer.l4_end = end;
    if let Some(inner) = l.inner.as_mut() {
        inner.l4_end = end;
    }
    let mut tunnel = GsoTunnel::None;
    if let Some(t) = l.tunnel {
        let o = l.outer;
        match t.kind {
            TunnelKind::Vxlan | TunnelKind::Geneve => {
                let len = len_from(total_len, o.l4_offset);
                let pseudo = ip_pseudo(b, &o, protocol::UDP, len);
                tunnel = GsoTunnel::Udp {
                    outer_csum: udp_tunnel::header(b, &o).is_some_and(udp_tunnel::has_csum),
                };
                udp_tunnel::complete(b, &o, len, pseudo);
            }
            TunnelKind::Nvgre => {
                tunnel = GsoTunnel::Gre {
                    csum: gre::has_csum(gre::header(b, &t)),
                };
                gre::complete(b, &t);
            }
        }
    }
    if let Some(inner) = l.inner.as_mut() {
        let total = len_from(total_len, inner.l3_offset);
        ip_complete(b, inner, total);
    }
    let h = *l.innermost();
    let l4_len = len_from(total_len, h.l4_offset);
    let pseudo = ip_pseudo(b, &h, h.protocol, l4_len);
    let (kind, ecn) = match st.l4 {
        L4::Tcp => {
            let ecn = tcp::header(b, &h).is_some_and(|t| tcp::flags(t).contains(Flags::CWR));
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
    }
}
