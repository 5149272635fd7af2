//! The segmentation plan: the stack of header layers of one super-frame, built
//! once from its [`Layout`] and the [`Gso`] request, then applied to every segment.
//!
//! Building walks the headers outermost first, as Linux's `skb_mac_gso_segment`
//! descends through `inet_gso_segment` / `ipv6_gso_segment`, the tunnel's
//! `gso_segment` and the transport's: each step checks its own header against the
//! request and makes its layer (in `ip`, `udp`, `tunnel`, `tcp`). Applying runs the
//! layers innermost first, each fixing its own header and passing outward the
//! one's-complement sum of everything from its header to the end of the segment
//! (what an enclosing UDP or GRE checksum covers).

use super::{CsumMode, GsoError, ip, tcp, tunnel, udp};
use crate::meta::{Checksum, Gso, GsoTunnel};
use crate::virtio::kind_matches;
use linerate_wire::checksum;
use linerate_wire::layout::{Fragment, Headers, L4Kind, Layout, TunnelKind};

/// What a layer needs to know about the segment it fixes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seg {
    /// Segment number, from 0.
    pub index: u32,
    /// The first segment.
    pub first: bool,
    /// The last segment.
    pub last: bool,
    /// Payload bytes before this segment's (the TCP sequence offset).
    pub offset: u32,
    /// Payload bytes in this segment.
    pub len: usize,
    /// The one's-complement sum of the payload ([`CsumMode::Complete`]; else 0).
    pub payload_sum: u32,
}

/// A network header: IPv4 or IPv6.
#[derive(Debug, Clone, Copy)]
pub(super) enum Net {
    /// An IPv4 header.
    V4(ip::Ipv4),
    /// An IPv6 header and its extension headers.
    V6(ip::Ipv6),
}

impl Net {
    #[inline]
    fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        match self {
            Net::V4(l) => l.fix(hdr, seg, below),
            Net::V6(l) => l.fix(hdr, seg, below),
        }
    }
}

/// The segmented transport header.
#[derive(Debug, Clone, Copy)]
pub(super) enum Transport {
    /// TCP (TSO).
    Tcp(tcp::Tcp),
    /// UDP (USO).
    Udp(udp::Udp),
}

impl Transport {
    #[inline]
    fn fix(&self, hdr: &mut [u8], seg: &Seg, payload_sum: u32) -> u32 {
        match self {
            Transport::Tcp(l) => l.fix(hdr, seg, payload_sum),
            Transport::Udp(l) => l.fix(hdr, seg, payload_sum),
        }
    }

    /// Offset of the checksum field in the header.
    fn csum_offset(&self) -> u16 {
        match self {
            Transport::Tcp(_) => linerate_wire::tcp::field::CHECKSUM.start as u16,
            Transport::Udp(_) => linerate_wire::udp::field::CHECKSUM.start as u16,
        }
    }
}

/// The header a tunnel puts on the outer IP packet: UDP (VXLAN, GENEVE) or GRE.
#[derive(Debug, Clone, Copy)]
pub(super) enum Encap {
    /// The outer UDP header.
    Udp(udp::Udp),
    /// The GRE header.
    Gre(tunnel::Gre),
}

impl Encap {
    #[inline]
    fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        match self {
            Encap::Udp(l) => l.fix(hdr, seg, below),
            Encap::Gre(l) => l.fix(hdr, below),
        }
    }
}

/// The headers of a tunnel, outside the segmented IP packet.
#[derive(Debug, Clone, Copy)]
struct TunnelLayers {
    /// The outer IP header.
    outer_ip: Net,
    /// The outer UDP or the GRE header.
    encap: Encap,
    /// Sum of what lies between it and the inner IP header, copied unchanged: the
    /// VXLAN or GENEVE header and the inner Ethernet header.
    opaque: u32,
}

/// The layers of one super-frame and how it divides: the transport in its IP
/// packet, in a tunnel or not. The nesting is fixed, so applying the plan is
/// straight-line code; what each header does is its own module's business.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    transport: Transport,
    ip: Net,
    tunnel: Option<TunnelLayers>,
    /// Bytes of headers copied into every segment.
    pub hdr_len: usize,
    /// Payload bytes of the super-frame.
    pub payload_len: usize,
    /// Payload bytes per segment.
    pub mss: usize,
    /// The checksum state of every segment made.
    pub csum_out: Checksum,
}

impl Plan {
    /// Walks `layout` for the request `gso` (whose size is not zero).
    pub fn build(
        frame: &[u8],
        layout: &Layout,
        gso: &Gso,
        mode: CsumMode,
    ) -> Result<Plan, GsoError> {
        let outer = &layout.outer;
        let seg_h = match gso.tunnel {
            GsoTunnel::None => outer,
            tunnel => layout
                .inner
                .as_ref()
                .ok_or(GsoError::TunnelMismatch { tunnel })?,
        };
        if !kind_matches(gso.kind, seg_h) {
            return Err(GsoError::KindMismatch { kind: gso.kind });
        }
        if outer.frag != Fragment::None || seg_h.frag != Fragment::None {
            return Err(GsoError::Fragment);
        }
        let hdr_len = usize::from(seg_h.payload);
        // The frame ends where the outer IP packet does: no trailing bytes.
        ip::check_end(outer, frame.len())?;
        // The outer Ethernet header is copied unchanged and no checksum covers it:
        // it needs no layer.
        let tunnel = match gso.tunnel {
            GsoTunnel::None => None,
            t => Some(
                tunnel_layers(frame, layout, seg_h, hdr_len, gso)?
                    .ok_or(GsoError::TunnelMismatch { tunnel: t })?,
            ),
        };
        let kind_mismatch = GsoError::KindMismatch { kind: gso.kind };
        let ip = ip::layer(frame, seg_h, hdr_len, gso.fixed_id).ok_or(kind_mismatch)?;
        let transport = match seg_h.l4 {
            L4Kind::Tcp => tcp::layer(frame, seg_h, hdr_len, mode),
            _ => {
                let csum = match mode {
                    CsumMode::Complete => udp::Csum::Compute,
                    CsumMode::LeavePartial => udp::Csum::LeavePartial,
                };
                udp::segmented(frame, seg_h, hdr_len, csum)?
            }
        }
        .ok_or(kind_mismatch)?;
        let csum_out = match mode {
            CsumMode::Complete => Checksum::None,
            CsumMode::LeavePartial => Checksum::Partial {
                start: seg_h.l4_offset,
                offset: transport.csum_offset(),
            },
        };
        Ok(Plan {
            transport,
            ip,
            tunnel,
            hdr_len,
            payload_len: seg_h.l3_end().saturating_sub(hdr_len),
            mss: usize::from(gso.size),
            csum_out,
        })
    }

    /// Number of segments: at least one, even without payload.
    #[inline]
    pub fn segments(&self) -> usize {
        self.payload_len.div_ceil(self.mss.max(1)).max(1)
    }

    /// The payload of each segment, in order (one empty chunk without payload).
    pub fn chunks<'p>(&self, payload: &'p [u8]) -> impl Iterator<Item = &'p [u8]> {
        let empty = payload.is_empty().then_some(payload);
        payload.chunks(self.mss.max(1)).chain(empty)
    }

    /// Fixes every header of one segment, innermost first, each passing outward
    /// the sum of what it covers.
    #[inline(always)]
    pub fn fix(&self, hdr: &mut [u8], seg: &Seg) {
        let below = self.transport.fix(hdr, seg, seg.payload_sum);
        let below = self.ip.fix(hdr, seg, below);
        if let Some(t) = &self.tunnel {
            let below = checksum::combine(t.opaque, below);
            let below = t.encap.fix(hdr, seg, below);
            t.outer_ip.fix(hdr, seg, below);
        }
    }
}

/// The layers of a tunnel around the segmented IP packet `inner`: the outer IP
/// header, the tunnel's UDP or GRE header, and the tunnel header and inner
/// Ethernet header between it and `inner`. `None` if the outer header is not IP.
fn tunnel_layers(
    frame: &[u8],
    layout: &Layout,
    inner: &Headers,
    hdr_len: usize,
    gso: &Gso,
) -> Result<Option<TunnelLayers>, GsoError> {
    let outer = &layout.outer;
    let mismatch = GsoError::TunnelMismatch { tunnel: gso.tunnel };
    let t = layout.tunnel.ok_or(mismatch)?;
    // The inner packet fills the tunnel to the end of the outer packet.
    ip::check_end(inner, outer.l3_end())?;
    let encap = match (gso.tunnel, t.kind) {
        (GsoTunnel::Udp { outer_csum }, TunnelKind::Vxlan | TunnelKind::Geneve) => {
            udp::tunnel(frame, outer, hdr_len, outer_csum)?
        }
        (GsoTunnel::Gre { csum }, TunnelKind::Nvgre) => tunnel::gre(frame, outer, &t, csum),
        _ => None,
    }
    .ok_or(mismatch)?;
    // After the UDP or GRE header: the tunnel header (VXLAN, GENEVE; NVGRE has none
    // beyond GRE's) and the inner Ethernet header, copied unchanged.
    let opaque = sum(frame, usize::from(outer.payload), inner.l3_offset);
    Ok(
        ip::layer(frame, outer, hdr_len, gso.outer_fixed_id).map(|outer_ip| TunnelLayers {
            outer_ip,
            encap,
            opaque,
        }),
    )
}

/// The sum of `frame[from..to]` (empty if out of range).
fn sum(frame: &[u8], from: usize, to: u16) -> u32 {
    checksum::partial(frame.get(from..usize::from(to)).unwrap_or_default(), 0)
}
