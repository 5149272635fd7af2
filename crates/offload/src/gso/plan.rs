//! The segmentation plan: the stack of header layers of one super-frame, built
//! once from its [`Layout`] and the [`Gso`] request, then applied to every segment.
//!
//! Building walks the headers outermost first, as Linux's `skb_mac_gso_segment`
//! descends through `inet_gso_segment` / `ipv6_gso_segment`, the tunnel's
//! `gso_segment` and the transport's: each step checks its own header against the
//! request and pushes one [`Layer`]. Applying runs the layers innermost first, each
//! fixing its own header and passing outward the one's-complement sum of everything
//! from its header to the end of the segment (what an enclosing UDP or GRE checksum
//! covers).

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

/// One header's fix-up.
#[derive(Debug, Clone, Copy)]
pub(super) enum Layer {
    /// Bytes copied unchanged (Ethernet and VLAN tags, VXLAN, GENEVE): their sum.
    Opaque(u32),
    /// An IPv4 header.
    Ipv4(ip::Ipv4),
    /// An IPv6 header and its extension headers.
    Ipv6(ip::Ipv6),
    /// A GRE header.
    Gre(tunnel::Gre),
    /// A UDP header: the segmented one (USO) or a tunnel's.
    Udp(udp::Udp),
    /// The segmented TCP header.
    Tcp(tcp::Tcp),
}

impl Layer {
    /// Fixes this layer's header in `hdr` (the segment's headers) for `seg`, given
    /// the sum of everything after the header, and returns the sum from the header's
    /// start to the end of the segment.
    #[inline]
    fn fix(&self, hdr: &mut [u8], seg: &Seg, below: u32) -> u32 {
        match self {
            Layer::Opaque(sum) => checksum::combine(*sum, below),
            Layer::Ipv4(l) => l.fix(hdr, seg, below),
            Layer::Ipv6(l) => l.fix(hdr, seg, below),
            Layer::Gre(l) => l.fix(hdr, below),
            Layer::Udp(l) => l.fix(hdr, seg, below),
            Layer::Tcp(l) => l.fix(hdr, seg, below),
        }
    }
}

/// Most layers a frame has: outer IP, UDP or GRE, tunnel header and inner
/// Ethernet, inner IP, transport.
const MAX_LAYERS: usize = 5;

/// The layers of one super-frame and how it divides.
#[derive(Debug, Clone, Copy)]
pub(super) struct Plan {
    layers: [Layer; MAX_LAYERS],
    n: usize,
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
        let mut plan = Plan {
            layers: [Layer::Opaque(0); MAX_LAYERS],
            n: 0,
            hdr_len,
            payload_len: 0,
            mss: usize::from(gso.size),
            csum_out: Checksum::None,
        };
        // The frame ends where the outer IP packet does: no trailing bytes.
        ip::check_end(outer, frame.len())?;
        // The outer Ethernet header is copied unchanged and no checksum covers it:
        // it needs no layer.
        let kind_mismatch = GsoError::KindMismatch { kind: gso.kind };
        if gso.tunnel != GsoTunnel::None {
            let outer_ip = ip::layer(frame, outer, hdr_len, gso.outer_fixed_id);
            plan.push(outer_ip.ok_or(GsoError::TunnelMismatch { tunnel: gso.tunnel })?);
            tunnel_layers(&mut plan, frame, layout, seg_h, gso.tunnel)?;
        }
        plan.push(ip::layer(frame, seg_h, hdr_len, gso.fixed_id).ok_or(kind_mismatch)?);
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
        .ok_or(GsoError::KindMismatch { kind: gso.kind })?;
        plan.payload_len = seg_h.l3_end().saturating_sub(hdr_len);
        if mode == CsumMode::LeavePartial {
            plan.csum_out = Checksum::Partial {
                start: seg_h.l4_offset,
                offset: transport.csum_offset(),
            };
        }
        plan.push(transport.layer);
        Ok(plan)
    }

    fn push(&mut self, l: Layer) {
        debug_assert!(
            self.n < MAX_LAYERS,
            "a frame has at most {MAX_LAYERS} layers"
        );
        if let Some(slot) = self.layers.get_mut(self.n) {
            *slot = l;
            self.n += 1;
        }
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

    /// Fixes every header of one segment, innermost first.
    #[inline]
    pub fn fix(&self, hdr: &mut [u8], seg: &Seg) {
        let mut below = seg.payload_sum;
        for l in self.layers.get(..self.n).unwrap_or_default().iter().rev() {
            below = l.fix(hdr, seg, below);
        }
    }
}

/// The layers between the outer and the inner IP header: the tunnel's UDP or GRE
/// header, the tunnel header and the inner Ethernet header.
fn tunnel_layers(
    plan: &mut Plan,
    frame: &[u8],
    layout: &Layout,
    inner: &Headers,
    tunnel: GsoTunnel,
) -> Result<(), GsoError> {
    let outer = &layout.outer;
    let mismatch = GsoError::TunnelMismatch { tunnel };
    let t = layout.tunnel.ok_or(mismatch)?;
    // The inner packet fills the tunnel to the end of the outer packet.
    ip::check_end(inner, outer.l3_end())?;
    match (tunnel, t.kind) {
        (GsoTunnel::Udp { outer_csum }, TunnelKind::Vxlan | TunnelKind::Geneve) => {
            plan.push(udp::tunnel(frame, outer, plan.hdr_len, outer_csum)?.ok_or(mismatch)?);
        }
        (GsoTunnel::Gre { csum }, TunnelKind::Nvgre) => {
            plan.push(tunnel::gre(frame, outer, &t, csum).ok_or(mismatch)?);
        }
        _ => return Err(mismatch),
    }
    // After the UDP or GRE header: the tunnel header (VXLAN, GENEVE; NVGRE has none
    // beyond GRE's) and the inner Ethernet header, copied unchanged.
    plan.push(Layer::Opaque(sum(
        frame,
        usize::from(outer.payload),
        inner.l3_offset,
    )));
    Ok(())
}

/// The sum of `frame[from..to]` (empty if out of range).
fn sum(frame: &[u8], from: usize, to: u16) -> u32 {
    checksum::partial(frame.get(from..usize::from(to)).unwrap_or_default(), 0)
}

/// A transport layer and where its checksum field is.
pub(super) struct Transport {
    pub layer: Layer,
    pub csum_field: usize,
}

impl Transport {
    fn csum_offset(&self) -> u16 {
        self.csum_field as u16
    }
}
