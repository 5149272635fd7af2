//! GSO in software: TCP segmentation (TSO), UDP segmentation (USO), plain and inside
//! VXLAN, GENEVE or NVGRE, over IPv4 and IPv6, inner and outer.
//!
//! A super-frame (headers plus up to 64 KiB of payload, marked with a [`Gso`]
//! request in its [`OffloadMeta`]) becomes frames carrying at most `size` payload
//! bytes each, as Linux's `skb_gso_segment` makes them. The work is layered the same
//! way: each header kind fixes up its own header in every segment and hands the
//! one's-complement sum of what it covers to the header outside it (as Linux's
//! local checksum offload, `lco_csum`, does), so no function knows every
//! combination of tunnel and inner protocol:
//!
//! * Ethernet and VLAN tags, the VXLAN and GENEVE headers (options included): copied
//!   unchanged.
//! * IPv4 (`inet_gso_segment`): total length; identification +1 per segment unless
//!   `fixed_id` (the outer header of a tunnel: `outer_fixed_id`); header checksum.
//! * IPv6 (`ipv6_gso_segment`): payload length (extension headers kept).
//! * UDP tunnel (`skb_udp_tunnel_segment`, RFC 7348, RFC 8926): outer UDP length;
//!   outer checksum computed per segment when the tunnel is `outer_csum`, or over
//!   IPv6 when the super-frame had a non-zero one (zero UDP checksums over IPv6 are
//!   for tunnels that allow them, RFC 6935), else zero.
//! * GRE (`gre_gso_segment`, RFC 2784 section 2.5, RFC 7637): the GRE checksum
//!   recomputed per segment when the header has one.
//! * TCP (`tcp_gso_segment`, RFC 9293): sequence number +`size` per segment; FIN and
//!   PSH only on the last segment, CWR only on the first (RFC 3168 section 6.1.2);
//!   checksum.
//! * UDP (`__udp_gso_segment`, USO): length and checksum per datagram; a computed
//!   zero is sent as `0xffff` (RFC 768).
//!
//! The transport checksum of each segment is completed ([`CsumMode::Complete`]) or
//! left partial for a backend with checksum offload ([`CsumMode::LeavePartial`]: the
//! field holds the pseudo-header sum, and outer checksums are computed as Linux's
//! LCO does, valid once the backend completes the inner one).
//!
//! Output is either whole frames in a reusable arena ([`SegmentBuf`]) or, for
//! backends that take scatter-gather lists, per-segment headers in an arena plus the
//! range of the super-frame each segment's payload is ([`ZeroCopyBuf`]): the payload
//! is only read (to sum it in [`CsumMode::Complete`]), never copied. Neither
//! allocates per segment once its buffers have grown to the largest super-frame.
//!
//! A frame without a GSO request (or with size 0, which Linux reads as "not GSO")
//! passes through as one segment, its checksum completed if partial and the mode is
//! [`CsumMode::Complete`]; so does a GSO frame whose payload fits one segment (with
//! every checksum recomputed). Bad input is a [`GsoError`], never a panic.
//!
//! ```
//! use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
//! use linerate_offload::{Gso, GsoTunnel, GsoType, OffloadMeta};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//!
//! // 4000 bytes of TCP over IPv6, inside VXLAN over IPv4, in 1400-byte segments.
//! let frame = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::tcp(40000, 80))
//!     .vxlan(7, Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]))
//!     .build(&[0xab; 4000]);
//! let mut gso = Gso::new(GsoType::TcpV6, 1400);
//! gso.tunnel = GsoTunnel::Udp { outer_csum: true };
//! let meta = OffloadMeta { gso: Some(gso), ..OffloadMeta::plain() };
//!
//! let mut seg = Segmenter::new(CsumMode::Complete);
//! let mut out = SegmentBuf::new();
//! assert_eq!(seg.segment(&frame, &meta, &mut out).unwrap(), 3);
//! let lens: Vec<usize> = out.iter().map(|f| f.len()).collect();
//! let headers = 14 + 20 + 8 + 8 + 14 + 40 + 20;
//! assert_eq!(lens, [headers + 1400, headers + 1400, headers + 1200]);
//! ```

mod ip;
mod out;
mod plan;
mod tcp;
mod tunnel;
mod udp;

pub use out::{HeaderSink, SegmentBuf, SegmentSink, ZeroCopyBuf, ZeroCopySegment};

use crate::csum::{self, CsumError};
use crate::meta::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta};
use core::fmt;
use linerate_wire::checksum;
use linerate_wire::layout;
use plan::{Plan, Seg};

/// What happens to the transport checksum of each segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CsumMode {
    /// Every checksum of every segment is complete.
    #[default]
    Complete,
    /// The (innermost) transport checksum is left partial for a backend with
    /// checksum offload: the field holds the pseudo-header sum and the output's
    /// checksum state says where ([`SegmentBuf::csum`], [`ZeroCopyBuf::csum`]).
    /// IPv4 header checksums and outer tunnel checksums are still completed.
    LeavePartial,
}

/// Why a super-frame could not be segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GsoError {
    /// The frame's headers do not parse.
    Layout(linerate_wire::Error),
    /// The segmented headers are not what the GSO kind says (TCPv4 needs IPv4 and
    /// TCP, TCPv6 IPv6 and TCP, UDP L4 UDP).
    KindMismatch {
        /// The requested kind.
        kind: GsoType,
    },
    /// The frame has no tunnel of the kind the request names (a UDP tunnel: VXLAN
    /// or GENEVE carrying Ethernet; GRE: NVGRE), or the request asks for a GRE
    /// checksum the header does not carry.
    TunnelMismatch {
        /// The requested tunnel.
        tunnel: GsoTunnel,
    },
    /// An IP fragment cannot be segmented.
    Fragment,
    /// A length field disagrees with the frame: trailing bytes after the IP packet
    /// (more than its 16-bit length can say, or padding), an inner packet shorter
    /// than its tunnel, a UDP length shorter than its IP packet.
    LengthMismatch {
        /// The header whose length field disagrees.
        layer: linerate_wire::Layer,
        /// The end of the data that header declares.
        declared: usize,
        /// Where the data really ends.
        actual: usize,
    },
    /// A pass-through frame's partial checksum could not be completed.
    Checksum(CsumError),
    /// The [`SegmentSink`] had no buffer for the next segment.
    NoBuffer,
    /// A super-frame given as headers and payload pieces
    /// ([`Segmenter::segment_pieces_to`]) whose headers are not exactly the
    /// head, or whose pieces do not hold exactly its payload.
    Split,
}

impl fmt::Display for GsoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GsoError::Layout(e) => write!(f, "frame does not parse: {e}"),
            GsoError::KindMismatch { kind } => {
                write!(f, "frame does not carry what GSO kind {kind:?} segments")
            }
            GsoError::TunnelMismatch { tunnel } => {
                write!(f, "frame does not carry the tunnel {tunnel:?}")
            }
            GsoError::Fragment => f.write_str("IP fragments cannot be segmented"),
            GsoError::LengthMismatch {
                layer,
                declared,
                actual,
            } => write!(
                f,
                "{layer} length says the data ends at {declared}, it ends at {actual}"
            ),
            GsoError::Checksum(e) => write!(f, "checksum completion failed: {e}"),
            GsoError::NoBuffer => f.write_str("no buffer for the next segment"),
            GsoError::Split => {
                f.write_str("headers and payload pieces do not divide the super-frame")
            }
        }
    }
}

impl std::error::Error for GsoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            GsoError::Layout(e) => Some(e),
            GsoError::Checksum(e) => Some(e),
            _ => None,
        }
    }
}

impl From<linerate_wire::Error> for GsoError {
    fn from(e: linerate_wire::Error) -> Self {
        GsoError::Layout(e)
    }
}

impl From<CsumError> for GsoError {
    fn from(e: CsumError) -> Self {
        GsoError::Checksum(e)
    }
}

/// Counters, as `ethtool -S` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stats {
    /// Super-frames segmented (at least one segment made by the engine).
    pub super_frames: u64,
    /// Segments made by the engine.
    pub segments: u64,
    /// Frames without a GSO request passed through as they were.
    pub passed_through: u64,
    /// Frames refused with an error.
    pub errors: u64,
}

/// The segmentation engine. Holds the checksum mode, the tunnel ports it parses
/// frames with, and counters; all per-call state lives on the stack, and output
/// goes to the caller's reusable buffers.
///
/// Each super-frame is parsed here ([`layout::Config::parse`]): tens of
/// nanoseconds, against microseconds to cut 64 KiB into segments, so the meta
/// carries no layout.
#[derive(Debug, Clone, Default)]
pub struct Segmenter {
    mode: CsumMode,
    layout: layout::Config,
    stats: Stats,
}

impl Segmenter {
    /// An engine producing segments with checksums in `mode`.
    pub const fn new(mode: CsumMode) -> Segmenter {
        Segmenter {
            mode,
            layout: layout::Config::DEFAULT,
            stats: Stats {
                super_frames: 0,
                segments: 0,
                passed_through: 0,
                errors: 0,
            },
        }
    }

    /// The checksum mode.
    pub const fn mode(&self) -> CsumMode {
        self.mode
    }

    /// Changes the checksum mode.
    pub fn set_mode(&mut self, mode: CsumMode) {
        self.mode = mode;
    }

    /// The tunnel ports frames are parsed with ([`layout::Config::DEFAULT`] unless
    /// set).
    pub const fn layout_config(&self) -> &layout::Config {
        &self.layout
    }

    /// Parses frames with `cfg`: a tunnel on a port of its own (VXLAN on a port
    /// other than 4789 and 8472, say) is segmented as a tunnel only when its port
    /// is in the config.
    pub fn set_layout_config(&mut self, cfg: layout::Config) {
        self.layout = cfg;
    }

    /// The counters so far.
    pub const fn stats(&self) -> Stats {
        self.stats
    }

    /// Segments `frame` as `meta` asks into whole frames in `out` (cleared first),
    /// and returns the number of frames.
    ///
    /// The frame is parsed with the segmenter's tunnel ports
    /// ([`Segmenter::set_layout_config`]).
    pub fn segment(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        out: &mut SegmentBuf,
    ) -> Result<usize, GsoError> {
        out.clear();
        let r = self.segment_copy(frame, meta, out);
        self.count(&r);
        if r.is_err() {
            out.clear();
        }
        r
    }

    /// Segments `frame` as `meta` asks into per-segment headers in `out` (cleared
    /// first), each paired with the range of `frame` that is its payload, and
    /// returns the number of segments. Read a segment with [`ZeroCopyBuf::get`] or
    /// [`ZeroCopyBuf::iter`], passing the same `frame`.
    ///
    /// A frame without a GSO request yields one segment: an empty header and the
    /// whole frame as payload, or, when its partial checksum must be completed, the
    /// completed frame as header and an empty payload.
    pub fn segment_zero_copy(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        out: &mut ZeroCopyBuf,
    ) -> Result<usize, GsoError> {
        out.clear();
        let r = self.segment_zc(frame, meta, out);
        self.count(&r);
        if r.is_err() {
            out.clear();
        }
        r
    }

    /// Segments `frame` as `meta` asks, writing each whole segment into a buffer
    /// `sink` lends, and returns the number of segments; the checksum state of
    /// every segment is [`Segmenter::segment`]'s.
    ///
    /// Each segment's payload is copied once, straight from `frame` into the
    /// sink's buffer, and with [`CsumMode::Complete`] summed in the same pass
    /// ([`checksum::copy_partial`]): the copy a backend without scatter-gather
    /// needs anyway also yields the checksum. A frame without a GSO request is
    /// copied whole (its partial checksum completed in `Complete` mode). If the
    /// sink has no room, [`GsoError::NoBuffer`]: the segments before were
    /// committed.
    pub fn segment_to(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        sink: &mut impl SegmentSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let r = self.segment_sink(frame, meta, sink);
        if r.is_err() {
            self.stats.errors += 1;
        }
        r
    }

    /// Segments `frame` as `meta` asks, writing each segment's headers into a
    /// buffer `sink` lends and handing it the range of `frame` that is the
    /// segment's payload, and returns the number of segments and their checksum
    /// state ([`Segmenter::segment`]'s). The payload is never copied: with
    /// [`CsumMode::Complete`] it is read once, to sum it where it lies. This is
    /// [`Segmenter::segment_zero_copy`] with the headers built where they stay
    /// (scatter-gather frames' heads), not in an arena.
    ///
    /// A frame without a GSO request yields one segment with no headers and
    /// the whole frame as payload, unless its partial checksum must be
    /// completed: then the completed frame is the headers and the payload is
    /// empty. If the sink has no room, [`GsoError::NoBuffer`]: the segments
    /// before were committed.
    pub fn segment_headers_to(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        sink: &mut impl HeaderSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let r = self.segment_headers(frame, meta, sink);
        if r.is_err() {
            self.stats.errors += 1;
        }
        r
    }

    /// [`Segmenter::segment_headers_to`] for a super-frame whose payload is not
    /// in one slice (a scatter-gather frame: its headers in a head buffer, its
    /// payload in fragments). `probe` starts with the `head_len` bytes of
    /// headers and is as long as the whole frame (what follows the headers is
    /// never read: the headers are parsed and their lengths checked against
    /// it); `pieces` hold the payload, in order. The ranges handed to the sink
    /// are offsets in the whole frame, as `segment_headers_to`'s (from
    /// `head_len`); a segment's may span pieces. The payload is only read, to
    /// sum it with [`CsumMode::Complete`], each segment's where it lies.
    ///
    /// Only a frame with a GSO request; [`GsoError::Split`] if it has none, if
    /// its headers are not exactly `head_len` bytes, or if the pieces do not
    /// hold its payload exactly.
    pub fn segment_pieces_to<P: AsRef<[u8]>>(
        &mut self,
        probe: &[u8],
        head_len: usize,
        pieces: &[P],
        meta: &OffloadMeta,
        sink: &mut impl HeaderSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let r = self.segment_pieces(probe, head_len, pieces, meta, sink);
        if r.is_err() {
            self.stats.errors += 1;
        }
        r
    }

    fn segment_pieces<P: AsRef<[u8]>>(
        &mut self,
        probe: &[u8],
        head_len: usize,
        pieces: &[P],
        meta: &OffloadMeta,
        sink: &mut impl HeaderSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let gso = request(meta).ok_or(GsoError::Split)?;
        let (plan, hdrs, _) = self.plan(probe, &gso)?;
        let total: usize = pieces.iter().map(|p| p.as_ref().len()).sum();
        if hdrs.len() != head_len || total != plan.payload_len {
            return Err(GsoError::Split);
        }
        let n = plan.segments();
        let mut at = hdrs.len();
        let mut sums = PieceSums::new(pieces, plan.mss, self.mode);
        for i in 0..n {
            let len = plan
                .mss
                .min(plan.payload_len - (i * plan.mss).min(plan.payload_len));
            let seg = plan.seg(i, len, sums.next(i, len));
            let h = sink.header(hdrs.len()).ok_or(GsoError::NoBuffer)?;
            copy_headers(h, hdrs);
            plan.fix(h, &seg);
            sink.commit(at..at + len);
            at += len;
        }
        self.stats.super_frames += 1;
        self.stats.segments += n as u64;
        Ok((n, plan.csum_out))
    }

    fn segment_headers(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        sink: &mut impl HeaderSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let Some(gso) = request(meta) else {
            let mut state = meta.csum;
            if self.mode == CsumMode::Complete && matches!(meta.csum, Checksum::Partial { .. }) {
                let buf = sink.header(frame.len()).ok_or(GsoError::NoBuffer)?;
                buf.copy_from_slice(frame);
                state = self.complete(buf, meta)?;
                sink.commit(frame.len()..frame.len());
            } else {
                sink.header(0).ok_or(GsoError::NoBuffer)?;
                sink.commit(0..frame.len());
            }
            self.stats.passed_through += 1;
            return Ok((1, state));
        };
        let (plan, hdrs, payload) = self.plan(frame, &gso)?;
        let n = plan.segments();
        let mut at = hdrs.len();
        let mut sums = PayloadSums::new(payload, plan.mss, self.mode);
        for (i, chunk) in plan.chunks(payload).enumerate() {
            let seg = plan.seg(i, chunk.len(), sums.get(i));
            let h = sink.header(hdrs.len()).ok_or(GsoError::NoBuffer)?;
            copy_headers(h, hdrs);
            plan.fix(h, &seg);
            sink.commit(at..at + chunk.len());
            at += chunk.len();
        }
        self.stats.super_frames += 1;
        self.stats.segments += n as u64;
        Ok((n, plan.csum_out))
    }

    fn segment_sink(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        sink: &mut impl SegmentSink,
    ) -> Result<(usize, Checksum), GsoError> {
        let Some(gso) = request(meta) else {
            let buf = sink.buffer(frame.len()).ok_or(GsoError::NoBuffer)?;
            buf.copy_from_slice(frame);
            let mut state = meta.csum;
            if self.mode == CsumMode::Complete && matches!(meta.csum, Checksum::Partial { .. }) {
                state = self.complete(buf, meta)?;
            }
            sink.commit();
            self.stats.passed_through += 1;
            return Ok((1, state));
        };
        let (plan, hdrs, payload) = self.plan(frame, &gso)?;
        let n = plan.segments();
        let h = hdrs.len();
        for (i, chunk) in plan.chunks(payload).enumerate() {
            let buf = sink.buffer(h + chunk.len()).ok_or(GsoError::NoBuffer)?;
            let (hdr, data) = buf.split_at_mut(h);
            copy_headers(hdr, hdrs);
            let payload_sum = match self.mode {
                CsumMode::Complete => checksum::copy_partial(data, chunk, 0).unwrap_or(0),
                CsumMode::LeavePartial => {
                    data.copy_from_slice(chunk);
                    0
                }
            };
            let seg = plan.seg(i, chunk.len(), payload_sum);
            plan.fix(hdr, &seg);
            sink.commit();
        }
        self.stats.super_frames += 1;
        self.stats.segments += n as u64;
        Ok((n, plan.csum_out))
    }

    /// Completes the partial checksum of a frame without a GSO request, parsed
    /// with the segmenter's tunnel ports.
    fn complete(&self, frame: &mut [u8], meta: &OffloadMeta) -> Result<Checksum, CsumError> {
        let l = self.layout.parse(frame)?;
        csum::complete_layout(frame, &l, meta, csum::CompleteOptions::default())
    }

    fn count(&mut self, r: &Result<usize, GsoError>) {
        if r.is_err() {
            self.stats.errors += 1;
        }
    }

    fn segment_copy(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        out: &mut SegmentBuf,
    ) -> Result<usize, GsoError> {
        let Some(gso) = request(meta) else {
            let range = out.push_frame(frame);
            out.csum = meta.csum;
            if self.mode == CsumMode::Complete && matches!(meta.csum, Checksum::Partial { .. }) {
                let copy = out.frame_mut(range).unwrap_or_default();
                out.csum = self.complete(copy, meta)?;
            }
            self.stats.passed_through += 1;
            return Ok(1);
        };
        let (plan, hdrs, payload) = self.plan(frame, &gso)?;
        let n = plan.segments();
        out.reserve(n * hdrs.len() + payload.len(), n);
        out.csum = plan.csum_out;
        let mut sums = PayloadSums::new(payload, plan.mss, self.mode);
        for (i, chunk) in plan.chunks(payload).enumerate() {
            let seg = plan.seg(i, chunk.len(), sums.get(i));
            out.push_segment(hdrs, chunk, |h| plan.fix(h, &seg));
        }
        self.stats.super_frames += 1;
        self.stats.segments += n as u64;
        Ok(n)
    }

    fn segment_zc(
        &mut self,
        frame: &[u8],
        meta: &OffloadMeta,
        out: &mut ZeroCopyBuf,
    ) -> Result<usize, GsoError> {
        let Some(gso) = request(meta) else {
            out.csum = meta.csum;
            if self.mode == CsumMode::Complete && matches!(meta.csum, Checksum::Partial { .. }) {
                let range = out.push_header(frame);
                let copy = out.header_mut(range.clone()).unwrap_or_default();
                out.csum = self.complete(copy, meta)?;
                out.push_segment(range, frame.len()..frame.len());
            } else {
                out.push_segment(0..0, 0..frame.len());
            }
            self.stats.passed_through += 1;
            return Ok(1);
        };
        let (plan, hdrs, payload) = self.plan(frame, &gso)?;
        let n = plan.segments();
        out.reserve(n * hdrs.len(), n);
        out.csum = plan.csum_out;
        let mut at = hdrs.len();
        let mut sums = PayloadSums::new(payload, plan.mss, self.mode);
        for (i, chunk) in plan.chunks(payload).enumerate() {
            let seg = plan.seg(i, chunk.len(), sums.get(i));
            let range = out.push_header(hdrs);
            if let Some(h) = out.header_mut(range.clone()) {
                plan.fix(h, &seg);
            }
            out.push_segment(range, at..at + chunk.len());
            at += chunk.len();
        }
        self.stats.super_frames += 1;
        self.stats.segments += n as u64;
        Ok(n)
    }

    /// Builds the plan for `frame` and splits it into headers and payload.
    fn plan<'f>(&self, frame: &'f [u8], gso: &Gso) -> Result<(Plan, &'f [u8], &'f [u8]), GsoError> {
        let l = self.layout.parse(frame)?;
        let plan = Plan::build(frame, &l, gso, self.mode)?;
        let (hdrs, rest) =
            frame
                .split_at_checked(plan.hdr_len)
                .ok_or(GsoError::LengthMismatch {
                    layer: linerate_wire::Layer::Ethernet,
                    declared: plan.hdr_len,
                    actual: frame.len(),
                })?;
        let payload = rest
            .get(..plan.payload_len)
            .ok_or(GsoError::LengthMismatch {
                layer: linerate_wire::Layer::Ethernet,
                declared: plan.hdr_len + plan.payload_len,
                actual: frame.len(),
            })?;
        Ok((plan, hdrs, payload))
    }
}

/// Copies a segment's headers, `src`, into `dst` (as long). From 16 bytes on
/// the copy is 16-byte blocks, the last one overlapping the one before: a few
/// inline moves, where `copy_from_slice` of a length known only at run time is
/// a call to `memcpy` for every segment (for 66 bytes; visible in a profile of
/// `cargo bench --bench gso` and of the software-offload bulk cell).
#[inline(always)]
fn copy_headers(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n < 16 || dst.len() != n {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks_exact(16)) {
        d.copy_from_slice(s);
    }
    if !n.is_multiple_of(16) {
        let d = dst
            .get_mut(n - 16..)
            .and_then(|d| <&mut [u8; 16]>::try_from(d).ok());
        let s = src
            .get(n - 16..)
            .and_then(|s| <&[u8; 16]>::try_from(s).ok());
        if let (Some(d), Some(s)) = (d, s) {
            *d = *s;
        }
    }
}

/// The GSO request of `meta`, if it asks for segmentation at all.
fn request(meta: &OffloadMeta) -> Option<Gso> {
    meta.gso.filter(|g| g.size != 0)
}

impl Plan {
    /// The per-segment context of segment `i`, whose payload is `len` bytes
    /// summing to `payload_sum` (0 when the checksum is left partial).
    #[inline]
    fn seg(&self, i: usize, len: usize, payload_sum: u32) -> Seg {
        Seg {
            index: i as u32,
            first: i == 0,
            last: i + 1 == self.segments(),
            offset: (i * self.mss) as u32,
            len,
            payload_sum,
        }
    }
}

/// Segments whose payload sums one call of the checksum kernel makes.
const SUM_BATCH: usize = 64;

/// The payload sums of a super-frame's segments in [`CsumMode::Complete`] (all
/// zero in [`CsumMode::LeavePartial`]), made [`SUM_BATCH`] segments at a time by
/// one pass of [`checksum::partial_chunks`] over their payloads instead of one
/// checksum call per segment. Lives on the stack: nothing is allocated.
struct PayloadSums<'p> {
    payload: &'p [u8],
    mss: usize,
    complete: bool,
    sums: [u32; SUM_BATCH],
    /// The segment whose sum is `sums[0]`.
    first: usize,
    /// Sums held in `sums`.
    held: usize,
}

impl<'p> PayloadSums<'p> {
    fn new(payload: &'p [u8], mss: usize, mode: CsumMode) -> PayloadSums<'p> {
        PayloadSums {
            payload,
            mss: mss.max(1),
            complete: mode == CsumMode::Complete,
            sums: [0; SUM_BATCH],
            first: 0,
            held: 0,
        }
    }

    /// The sum of segment `i`'s payload (0 past the end, or when partial).
    #[inline]
    fn get(&mut self, i: usize) -> u32 {
        if !self.complete {
            return 0;
        }
        let k = i.wrapping_sub(self.first);
        if k < self.held {
            return self.sums.get(k).copied().unwrap_or(0);
        }
        let from = i.saturating_mul(self.mss);
        let rest = self.payload.get(from..).unwrap_or_default();
        self.held = checksum::partial_chunks(rest, self.mss, &mut self.sums);
        self.first = i;
        if self.held == 0 {
            return 0;
        }
        self.sums.first().copied().unwrap_or(0)
    }
}

/// The payload sums of consecutive segments of a payload held in pieces: the
/// segments that lie within one piece summed a batch at a time, as
/// [`PayloadSums`] does over one slice; a segment spanning pieces summed piece
/// by piece (each part at an odd offset in the segment byte-swapped, RFC 1071).
struct PieceSums<'p, P> {
    pieces: &'p [P],
    /// The piece the next segment starts in, and where in it.
    piece: usize,
    pos: usize,
    /// Sums of the segments from `base` on, over the current piece from the
    /// start of segment `base`.
    run: PayloadSums<'p>,
    base: usize,
    complete: bool,
}

impl<'p, P: AsRef<[u8]>> PieceSums<'p, P> {
    fn new(pieces: &'p [P], mss: usize, mode: CsumMode) -> PieceSums<'p, P> {
        let first = pieces.first().map_or(&[][..], AsRef::as_ref);
        PieceSums {
            pieces,
            piece: 0,
            pos: 0,
            run: PayloadSums::new(first, mss, mode),
            base: 0,
            complete: mode == CsumMode::Complete,
        }
    }

    fn piece(&self, i: usize) -> &'p [u8] {
        self.pieces.get(i).map_or(&[][..], AsRef::as_ref)
    }

    /// The sum of segment `i` (the one after the last asked for), `len` bytes.
    fn next(&mut self, i: usize, len: usize) -> u32 {
        let cur = self.piece(self.piece);
        if self.pos + len <= cur.len() {
            let sum = if self.complete {
                self.run.get(i - self.base)
            } else {
                0
            };
            self.pos += len;
            if self.pos == cur.len() {
                self.enter(self.piece + 1, 0, i + 1);
            }
            return sum;
        }
        // Across pieces: each part summed on its own.
        let (mut sum, mut done) = (0u32, 0usize);
        while done < len && self.piece < self.pieces.len() {
            let cur = self.piece(self.piece);
            let part = cur.get(self.pos..).unwrap_or_default();
            let part = part.get(..(len - done).min(part.len())).unwrap_or_default();
            if self.complete {
                let s = checksum::partial(part, 0);
                let s = if done % 2 == 1 {
                    checksum::shift_odd(s)
                } else {
                    s
                };
                sum = checksum::combine(sum, s);
            }
            done += part.len();
            self.pos += part.len();
            if self.pos >= cur.len() {
                self.piece += 1;
                self.pos = 0;
            }
        }
        self.enter(self.piece, self.pos, i + 1);
        sum
    }

    /// The next segment, `seg`, starts at `pos` in piece `piece`.
    fn enter(&mut self, piece: usize, pos: usize, seg: usize) {
        self.piece = piece;
        self.pos = pos;
        self.base = seg;
        let rest = self.piece(piece).get(pos..).unwrap_or_default();
        self.run = PayloadSums::new(rest, self.run.mss, self.mode());
    }

    fn mode(&self) -> CsumMode {
        if self.complete {
            CsumMode::Complete
        } else {
            CsumMode::LeavePartial
        }
    }
}

#[cfg(test)]
mod tests;
