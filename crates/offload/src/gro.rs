//! GRO: a per-queue coalescer of TCP segments (and, if asked, UDP datagrams), plain
//! and inside VXLAN, GENEVE and NVGRE, following Linux's merge and flush rules
//! (`net/core/gro.c`; REFERENCE.md, "GRO (coalescing)").
//!
//! Feed a receive batch to [`Gro::receive`] (or [`Gro::receive_batch`]), frame by
//! frame with its [`OffloadMeta`]; merged frames, and frames that could not be
//! merged, come out through a callback. [`Gro::flush_all`] ends the batch (Linux's
//! `napi_gro_flush` at the end of a poll), [`Gro::flush_older_than`] delivers runs
//! that waited too long.
//!
//! ```
//! use linerate_offload::gro::{FlushReason, Gro, GroConfig};
//! use linerate_offload::{Checksum, GsoType, OffloadMeta};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::etherparse::TcpHeader;
//!
//! // Three MSS-sized segments of one connection.
//! let seg = |seq: u32| {
//!     let mut tcp = TcpHeader::new(40000, 443, seq, 65535);
//!     tcp.ack = true;
//!     FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::Tcp(tcp)).build(&[7; 1000])
//! };
//! let frames = [seg(1), seg(1001), seg(2001)];
//! let verified = OffloadMeta { csum: Checksum::Verified { levels: 1 }, ..OffloadMeta::plain() };
//!
//! let mut gro = Gro::new(GroConfig::default());
//! let mut out = Vec::new();
//! gro.receive_batch(0, frames.iter().map(|f| (f.as_slice(), verified)), &mut |frame: &[u8], meta: &OffloadMeta| {
//!     out.push((frame.to_vec(), *meta));
//! });
//! assert_eq!(out.len(), 1);
//! let (frame, meta) = &out[0];
//! assert_eq!(frame.len(), 14 + 20 + 20 + 3000);
//! let gso = meta.gso.unwrap();
//! assert_eq!((gso.kind, gso.size, gso.segs), (GsoType::TcpV4, 1000, 3));
//! assert_eq!(gro.counters().merged, 2);
//! assert_eq!(gro.counters().flushed(FlushReason::BatchEnd), 1);
//! ```
//!
//! # Layers
//!
//! As in Linux, each header kind decides for its own header, in its own module:
//! whether a packet can be coalesced at all (`check`), whether it belongs to a held
//! run's flow (`same_flow`), whether it must end that run instead of joining it
//! (`must_flush`), and how the merged frame's header is fixed up (`complete`):
//!
//! | module | Linux | header |
//! |---|---|---|
//! | `eth` | `dev_gro_receive`, `eth_gro_receive`, `vlan_gro_receive` | Ethernet and VLAN tags |
//! | `ipv4` | `inet_gro_receive`, `inet_gro_flush`, `inet_gro_complete` | IPv4 |
//! | `ipv6` | `ipv6_gro_receive`, `ipv6_gro_flush`, `ipv6_gro_complete` | IPv6 |
//! | `udp_tunnel` | `udp_gro_receive`, `udp4/6_gro_complete` | outer UDP of VXLAN/GENEVE |
//! | `vxlan` | `vxlan_gro_receive` | VXLAN |
//! | `geneve` | `geneve_gro_receive` | GENEVE |
//! | `gre` | `gre_gro_receive`, `gre_gro_complete` | GRE / NVGRE |
//! | `tcp` | `tcp_gro_receive`, `tcp4/6_gro_receive`, `tcp_gro_complete` | TCP |
//! | `udp` | `udp_gro_receive_segment`, `udp_gro_complete_segment` | UDP GRO |
//!
//! A `walk` module composes them: outer Ethernet, outer IP, then in a tunnel the
//! tunnel header, inner Ethernet and inner IP, then the transport. Each step only
//! dispatches on its own header's kind; nothing matches tunnel and inner protocol
//! together. The [`Layout`] (parsed once here, or given by a caller that has
//! it, [`Gro::receive_with_layout`]) gives every offset; each frame's headers are
//! then resolved once into fixed-size arrays (a `View`), so the rules read fields
//! without per-field bounds checks, and a header that does not fit its frame can
//! only make a frame pass through, never panic.
//!
//! Runs live in a table of hash buckets (`table`): at most 8 runs per bucket, each
//! owning a buffer into which its first frame is copied and the later payloads
//! appended. Buffers are kept when a run ends, so once warm nothing is allocated
//! per packet.
//!
//! # Frag-list GRO
//!
//! A chaining context ([`Gro::chaining`], [`Gro::receive_chained`]) takes each
//! frame as its headers and a handle to its payload (`P`, a reference into a
//! buffer the caller owns and shares, as a pool's). Its runs copy only the first
//! frame's headers and keep a clone of every payload's handle, as Linux chains
//! the received buffers on `frag_list`; a run leaves as its completed headers
//! and the chain ([`ChainSink::run`]). Payload bytes are read only to verify a
//! checksum the NIC did not. Rules, counters and checksum states are those of
//! the copying context, frame for frame (`tests/it/gro_chain.rs` gathers every
//! chain and compares).
//!
//! # The fast path
//!
//! Once a plain TCP run (no tunnel; IPv4 without options or IPv6 without
//! extension headers) has two segments, its first frame's headers become a
//! template with a mask of the bytes every later segment must repeat: all but
//! the IP length, ID and header checksum and the TCP sequence number and
//! checksum. A frame that matches the template of the run GRO last touched, or
//! of the run its flow hash (read where the template has addresses and ports)
//! finds, and has the expected sequence number and IP ID, consistent lengths, a
//! good IPv4 header checksum and a payload no larger than the run's MSS, joins
//! that run without being parsed and without the layers' walk. The masked bytes
//! cover everything the layers compare against the first segment, so the
//! outcome is theirs; `tests/it/gro_fast.rs` flips every bit of every header byte
//! of interleaved flows and compares with [`Gro::without_fast_path`]. The
//! callers that parse before GRO ([`Gro::receive_split_with`],
//! [`Gro::receive_chained`]) give the layout as a closure, called only when the
//! fast path cannot take the frame.
//!
//! # What happens to a packet
//!
//! * **Refused** (`refused_<reason>`): it cannot be held (IP options, a fragment, a
//!   bad or unverified checksum, padding, SYN/RST/URG, a pure ACK, GENEVE O bit or
//!   version, GRE flags, not TCP, ...). It is delivered unchanged, bytes and meta
//!   (but see [Checksums](#checksums)).
//!   Runs with its flow hash are delivered first (`flushed_<reason>`), so a flow's
//!   bytes never overtake each other; Linux delivers such a packet ahead of its
//!   held run. (A frame whose headers do not parse as far as its addresses and
//!   ports has no flow hash and flushes nothing.)
//! * **Split** (`split_<reason>`): it matched a held run's hash but one layer says
//!   it is another flow (VNI, GENEVE options, GRE key or flags, outer UDP checksum
//!   zero versus non-zero, IPv6 flow label or extension headers, MACs, ...). It is
//!   kept apart: it joins or starts its own run.
//! * **Flush** (`flushed_<reason>`): it is of the run's flow but must not join it
//!   (TTL/TOS/DF, IP ID, traffic class/hop limit, ACK, window, flags, options,
//!   sequence gap, payload over the MSS, CWR, size). The run is delivered and the
//!   packet starts a new run (if it can: with FIN or PSH it is refused instead).
//! * **Merged** (`merged`): its payload is appended to the run. FIN, PSH or a
//!   payload shorter than the MSS then flush the run (`flushed_fin`, `_psh`,
//!   `_short`); so do the segment limit (`_segs`) and a size that leaves no room
//!   for another MSS (`_size`).
//! * **Held** (`held`): it starts a run.
//!
//! # The merged frame
//!
//! As Linux's `*_gro_complete` leave it, so that GSO re-segments it exactly:
//!
//! * the first segment's headers; IPv4 total length / IPv6 payload length of every
//!   IP header and the outer UDP length of a UDP tunnel set to the merged size;
//!   IPv4 header checksums recomputed (valid);
//! * TCP flags: the first segment's, ORed with the FIN and PSH of the others;
//! * the inner TCP (UDP GRO: UDP) checksum field holds the folded, not complemented,
//!   pseudo-header sum over the merged transport length, and the meta says
//!   `Checksum::Partial { start: <inner L4 offset>, offset: 16 (UDP: 6) }`;
//! * a non-zero outer UDP checksum holds, likewise, the folded pseudo-header sum
//!   over the merged outer UDP length (GSO computes each segment's; zero stays
//!   zero); a GRE checksum field is zeroed (GSO recomputes it per segment);
//! * `meta.gso = Some(Gso { kind: TcpV4 | TcpV6 | UdpL4 (inner), size: the first
//!   segment's payload length, tunnel: Udp { outer_csum } | Gre { csum } | None,
//!   fixed_id, outer_fixed_id, ecn: the first segment had CWR, segs })`;
//!   `meta.rss` is the first segment's.
//!
//! A run that nobody joined is delivered as it came: the same bytes and meta (but
//! see [Checksums](#checksums)).
//!
//! # Checksums
//!
//! `meta.csum` says what the NIC verified (`Checksum::Verified { levels }`, as
//! Linux's `csum_level`); GRO verifies the rest in software, as Linux's
//! `tcp4_gro_receive` does with `skb_gro_checksum_validate`, and refuses a packet
//! with a bad one (`refused_csum_bad`, `refused_outer_csum_bad`, ...). The
//! innermost transport checksum is verified as the packet's payload is copied
//! into its run ([`linerate_wire::checksum::copy_partial`]), so a packet GRO keeps is read
//! once, not once to verify and once to copy; a packet whose checksum turns out
//! bad there is refused exactly as if it had been refused before the copy (the
//! run keeps its bytes, no counter but its refusal moves). A packet GRO verified
//! and then passes on as it came (refused for FIN or PSH, or a run of one) has
//! its meta marked `Checksum::Verified` with every level it carries
//! (`csum_verified`), so the layer above need not verify it again.
//!
//! # Where linerate differs from Linux
//!
//! * Refused packets flush runs of their flow hash first (see above).
//! * The flow hash is computed here over the innermost addresses and ports (Linux
//!   uses `skb->hash`); tunnel fields are compared by the layers, not hashed.
//! * `max_segs` bounds TCP runs too (Linux bounds only UDP runs by count, TCP runs
//!   by size; with a 1448-byte MSS a 64 KiB run has 45 segments, below 64).
//! * A run is delivered as soon as another full segment would not fit in
//!   `max_len`, rather than when that segment arrives.
//! * A GRE checksum is zeroed rather than left stale.
//! * The counters say why (Linux counts only merged and flushed packets).
//! * When a segment breaks several rules, the transport's reason is counted, then
//!   the outer IP header's, then the inner's (Linux ORs them into one flag).
//! * `Checksum::Partial` frames are accepted only when the partial checksum is the
//!   innermost transport checksum.

mod bytes;
mod chain;
#[cfg(test)]
mod csum_tests;
mod eth;
mod fast;
mod geneve;
mod gre;
mod ipv4;
mod ipv6;
mod reason;
mod table;
mod tcp;
mod udp;
mod udp_tunnel;
mod view;
mod vxlan;
mod walk;

pub use chain::{ChainSink, NoChain};
pub use reason::{FlushReason, GroCounters};

use crate::meta::{Checksum, OffloadMeta};
use chain::{Chaining, Copying, Out};
use ipv4::IdMode;
use linerate_wire::error::{Error, Layer};
use linerate_wire::layout::{self, Layout};
use table::Table;
use view::{Frame, View};
use walk::RunState;

/// Where GRO delivers frames: merged runs, runs pushed out, and frames it refused.
///
/// Any `FnMut(&[u8], &OffloadMeta)` closure is a sink. A sink that keeps frames in
/// buffers of its own can take a run's buffer instead of copying it
/// ([`GroSink::run`]), as the NIC shim does with its pool.
pub trait GroSink {
    /// A frame GRO passes on as it came (refused, or a run of one segment when
    /// [`GroSink::run`] is not overridden).
    fn frame(&mut self, frame: &[u8], meta: &OffloadMeta);

    /// A run leaving GRO: the first `len` bytes of `buf` are the whole frame (the
    /// merged super-frame, or the run's single segment); the rest of `buf` is
    /// room GRO keeps for its next run. The sink may take the buffer, leaving
    /// another in its place (any length and content: GRO only writes into it,
    /// and grows it if short; a long one saves GRO growing it); by default the
    /// frame is passed to [`GroSink::frame`].
    fn run(&mut self, buf: &mut Vec<u8>, len: usize, meta: &OffloadMeta) {
        self.frame(buf.get(..len).unwrap_or_default(), meta);
    }

    /// A frame GRO passes on as it came that came in two parts
    /// ([`Gro::receive_split`]): `head` then `payload`. By default the two are
    /// gathered into one buffer (allocated) for [`GroSink::frame`]; a sink that
    /// owns the parts (the NIC shim) takes them as they are instead.
    fn frame_split(&mut self, head: &[u8], payload: &[u8], meta: &OffloadMeta) {
        let mut whole = Vec::with_capacity(head.len() + payload.len());
        whole.extend_from_slice(head);
        whole.extend_from_slice(payload);
        self.frame(&whole, meta);
    }
}

/// A frame as GRO was given it: one piece, or headers then payload; in a
/// chaining context, with its payload's handle.
#[derive(Debug)]
struct Parts<'a, P>(&'a [u8], &'a [u8], Option<&'a P>);

impl<P> Clone for Parts<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Parts<'_, P> {}

impl<F: FnMut(&[u8], &OffloadMeta)> GroSink for F {
    fn frame(&mut self, frame: &[u8], meta: &OffloadMeta) {
        self(frame, meta);
    }
}

/// GRO settings. The defaults are Linux's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroConfig {
    /// Runs held at once (default 64: Linux's 8 hash buckets of 8 per NAPI
    /// context). Buckets hold 8 runs (fewer if this is below 8); the number is
    /// rounded up to whole buckets. A new flow whose bucket is full has the
    /// bucket's oldest run delivered (`flushed_table_full`).
    pub max_flows: usize,
    /// Segments per run (default 64, Linux's `UDP_GRO_CNT_MAX`; applied to TCP
    /// too).
    pub max_segs: u16,
    /// Largest merged IP packet, outer IP header included (default 65535: Linux's
    /// `GRO_LEGACY_MAX_SIZE` minus one, the largest IPv4 total length).
    pub max_len: u16,
    /// Coalesce UDP datagrams (UDP GRO, `GsoType::UdpL4`); off by default, as in
    /// Linux without `UDP_GRO` or UDP forwarding GRO. Tunnels are coalesced either
    /// way.
    pub udp: bool,
    /// Age at which [`Gro::flush_older_than`] delivers a run, in the unit of the
    /// `now` values given to [`Gro::receive`] (default 1 000 000: one millisecond
    /// in nanoseconds, Linux's jiffy at HZ=1000).
    pub flush_age: u64,
    /// Tunnel ports frames are parsed with.
    pub layout: layout::Config,
}

impl Default for GroConfig {
    fn default() -> Self {
        GroConfig {
            max_flows: 64,
            max_segs: 64,
            max_len: u16::MAX,
            udp: false,
            flush_age: 1_000_000,
            layout: layout::Config::DEFAULT,
        }
    }
}

/// A per-queue GRO context: the held runs and the counters.
///
/// `P` is the payload handle of a chaining context ([`Gro::chaining`]); a
/// copying one ([`Gro::new`]) has none.
#[derive(Debug)]
pub struct Gro<P = NoChain> {
    cfg: GroConfig,
    table: Table<P>,
    counters: GroCounters,
    /// The slot of the run last held or joined, which the fast path tries first.
    last: usize,
    /// The fast path is on (the default).
    fast_on: bool,
}

impl<P: AsRef<[u8]> + Clone> Gro<P> {
    /// The configuration.
    pub fn config(&self) -> &GroConfig {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &GroCounters {
        &self.counters
    }

    /// The same context without the fast path for segments that continue the
    /// run last touched: every frame takes the layers' full walk. The results
    /// are the same (the tests compare the two); only the time differs.
    #[doc(hidden)]
    pub fn without_fast_path(mut self) -> Gro<P> {
        self.fast_on = false;
        self
    }

    /// A context of `cfg` whose runs hold `P`s.
    fn with_table(cfg: GroConfig) -> Gro<P> {
        Gro {
            cfg,
            table: Table::new(cfg.max_flows),
            counters: GroCounters::default(),
            last: 0,
            fast_on: true,
        }
    }

    /// Runs held now.
    pub fn held(&self) -> usize {
        self.table.held()
    }

    /// Runs the table can hold (`max_flows` rounded up to whole buckets).
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }
}

impl Gro {
    /// A GRO context with `cfg` that copies each run into a buffer of its own.
    /// Buffers are allocated as runs first use them and kept.
    pub fn new(cfg: GroConfig) -> Gro {
        Gro::with_table(cfg)
    }

    /// Takes one received frame at time `now`. `meta.csum` says what was verified
    /// (`Verified`, or `None`: the transport checksum is then verified here).
    /// Frames that leave GRO (merged runs, runs pushed out, refused frames) go to
    /// `out`, in an order that keeps every flow's segments in order.
    #[inline]
    pub fn receive(&mut self, now: u64, frame: &[u8], meta: OffloadMeta, out: &mut impl GroSink) {
        self.receive_ref(now, frame, &meta, out);
    }

    /// [`Gro::receive`] with the meta borrowed (nothing of it is copied unless
    /// the frame starts a run).
    #[inline]
    pub fn receive_ref(
        &mut self,
        now: u64,
        frame: &[u8],
        meta: &OffloadMeta,
        out: &mut impl GroSink,
    ) {
        let out = &mut Copying(out);
        self.counters.received += 1;
        let whole = Parts(frame, &[], None);
        if meta.gso.is_some() {
            return self.refuse(whole, meta, FlushReason::AlreadyGso, None, out);
        }
        if self.fast(whole, meta, out) {
            return;
        }
        // Borrowed where the parser wrote it, not moved out of the `Result` (a
        // copy of a struct just written, which stalls on store forwarding).
        match &self.cfg.layout.parse(frame) {
            Ok(l) => self.receive_parsed(now, whole, l, meta, out),
            Err(e) => self.refuse(whole, meta, parse_reason(e), None, out),
        }
    }

    /// [`Gro::receive_ref`] for a caller that has parsed the frame already (with
    /// the tunnel ports of [`GroConfig::layout`]): GRO does not parse it again.
    /// The layout is not trusted: one whose headers do not lie in the frame makes
    /// the frame pass through (`unparsed`), and every read is bounds-checked.
    #[inline]
    pub fn receive_with_layout(
        &mut self,
        now: u64,
        frame: &[u8],
        layout: &Layout,
        meta: &OffloadMeta,
        out: &mut impl GroSink,
    ) {
        let out = &mut Copying(out);
        self.counters.received += 1;
        let whole = Parts(frame, &[], None);
        if meta.gso.is_some() {
            return self.refuse(whole, meta, FlushReason::AlreadyGso, None, out);
        }
        if self.fast(whole, meta, out) {
            return;
        }
        self.receive_parsed(now, whole, layout, meta, out);
    }

    /// [`Gro::receive_with_layout`] for a frame in two parts, as a
    /// scatter-gather frame is: `head` holds every header, up to where the
    /// innermost payload starts, and `payload` the rest. The payload is read where
    /// it lies: summed to verify the checksum and copied into the run once (or,
    /// refused, handed to [`GroSink::frame_split`] as it came). `layout` is the
    /// whole frame's (its lengths those of head and payload together) and is not
    /// trusted.
    ///
    /// Returns false, having done nothing, for a frame this cannot take in two
    /// parts: a segmentation request, a tunnel error, a layout whose payload does
    /// not start at the end of `head`, or an outer IP packet that does not end
    /// with `payload` (padding). Gather such a frame and give it to
    /// [`Gro::receive_with_layout`].
    #[inline]
    pub fn receive_split(
        &mut self,
        now: u64,
        head: &[u8],
        payload: &[u8],
        layout: &Layout,
        meta: &OffloadMeta,
        out: &mut impl GroSink,
    ) -> bool {
        if meta.gso.is_some()
            || layout.tunnel_error.is_some()
            || usize::from(layout.payload) != head.len()
            || layout.outer.l3_end() != head.len() + payload.len()
        {
            return false;
        }
        self.counters.received += 1;
        let (parts, out) = (Parts(head, payload, None), &mut Copying(out));
        if !self.fast(parts, meta, out) {
            self.receive_parsed(now, parts, layout, meta, out);
        }
        true
    }

    /// [`Gro::receive_split`] with the layout given only when it is needed: a
    /// segment that continues the run GRO last touched joins it without one
    /// (see the fast path in the module docs), and `layout` is not called;
    /// otherwise it is, and `None` (no layout) declines the frame as
    /// [`Gro::receive_split`] declines what it cannot take: false, nothing done.
    #[inline]
    pub fn receive_split_with(
        &mut self,
        now: u64,
        head: &[u8],
        payload: &[u8],
        layout: impl FnOnce() -> Option<Layout>,
        meta: &OffloadMeta,
        out: &mut impl GroSink,
    ) -> bool {
        if meta.gso.is_none() && self.fast(Parts(head, payload, None), meta, &mut Copying(out)) {
            self.counters.received += 1;
            return true;
        }
        match layout() {
            Some(l) => self.receive_split(now, head, payload, &l, meta, out),
            None => false,
        }
    }

    /// [`Gro::receive`] for every frame of `batch`, then [`Gro::flush_all`].
    pub fn receive_batch<'f>(
        &mut self,
        now: u64,
        batch: impl IntoIterator<Item = (&'f [u8], OffloadMeta)>,
        out: &mut impl GroSink,
    ) {
        for (frame, meta) in batch {
            self.receive_ref(now, frame, &meta, out);
        }
        self.flush_all(out);
    }

    /// Delivers every held run, oldest first (`flushed_batch_end`).
    pub fn flush_all(&mut self, out: &mut impl GroSink) {
        self.flush_where(None, &mut Copying(out));
    }

    /// Delivers the runs whose first segment arrived at least
    /// [`GroConfig::flush_age`] before `now`, oldest first (`flushed_age`).
    pub fn flush_older_than(&mut self, now: u64, out: &mut impl GroSink) {
        self.flush_where(Some(now), &mut Copying(out));
    }
}

impl<P: AsRef<[u8]> + Clone> Gro<P> {
    /// A GRO context with `cfg` that chains: its runs keep the payload handles
    /// of their segments instead of copying the payloads ([`Gro::receive_chained`]).
    pub fn chaining(cfg: GroConfig) -> Gro<P> {
        Gro::with_table(cfg)
    }

    /// Takes one received frame at time `now` as `head`, every header up to
    /// where the innermost payload starts, and `payload`, a handle to the rest:
    /// a run this frame starts or joins keeps a clone of the handle, and its
    /// bytes are read only to verify a checksum `meta` does not vouch for.
    /// `layout` gives the whole frame's layout as the caller parses it (with the
    /// tunnel ports of [`GroConfig::layout`]), or the parser's error; it is
    /// called only if the frame does not simply continue the run GRO last
    /// touched, and what it gives is not trusted. A frame whose layout does not end its headers where `head` ends
    /// is passed on as it came (`unparsed`). Frames leave through `out` in an
    /// order that keeps every flow's segments in order; merged or not, rules,
    /// counters and checksum states are those of a copying context given the
    /// same frames whole ([`Gro::receive_with_layout`], or [`Gro::receive`]
    /// where the parser failed).
    #[inline]
    pub fn receive_chained(
        &mut self,
        now: u64,
        head: &[u8],
        payload: &P,
        layout: impl FnOnce() -> Result<Layout, Error>,
        meta: &OffloadMeta,
        out: &mut impl ChainSink<P>,
    ) {
        let out = &mut Chaining(out);
        self.counters.received += 1;
        let parts = Parts(head, payload.as_ref(), Some(payload));
        if meta.gso.is_some() {
            return self.refuse(parts, meta, FlushReason::AlreadyGso, None, out);
        }
        if self.fast(parts, meta, out) {
            return;
        }
        let parsed = layout();
        let layout = match &parsed {
            Ok(l) => l,
            Err(e) => return self.refuse(parts, meta, parse_reason(e), None, out),
        };
        if usize::from(layout.payload) != head.len() {
            return self.refuse(parts, meta, FlushReason::Unparsed, None, out);
        }
        self.receive_parsed(now, parts, layout, meta, out);
    }

    /// [`Gro::flush_all`] for a chaining context.
    pub fn flush_all_chained(&mut self, out: &mut impl ChainSink<P>) {
        self.flush_where(None, &mut Chaining(out));
    }

    /// [`Gro::flush_older_than`] for a chaining context.
    pub fn flush_older_than_chained(&mut self, now: u64, out: &mut impl ChainSink<P>) {
        self.flush_where(Some(now), &mut Chaining(out));
    }

    /// Delivers the held runs oldest first: all (`flushed_batch_end`), or with
    /// `now` those at least [`GroConfig::flush_age`] old (`flushed_age`).
    fn flush_where(&mut self, now: Option<u64>, out: &mut impl Out<P>) {
        let age = self.cfg.flush_age;
        match now {
            None => {
                self.table
                    .deliver_where(FlushReason::BatchEnd, |_| true, &mut self.counters, out)
            }
            Some(now) => self.table.deliver_where(
                FlushReason::Age,
                |born| now.saturating_sub(born) >= age,
                &mut self.counters,
                out,
            ),
        }
    }

    /// The fast path ([`fast`]): merges `frame` into the run last held or joined
    /// if it simply continues it, as [`Gro::receive_parsed`] would, and returns
    /// true; false, having changed nothing, sends it down the full path.
    #[inline]
    fn fast(&mut self, frame: Parts<'_, P>, meta: &OffloadMeta, out: &mut impl Out<P>) -> bool {
        let Parts(head, pay, chained) = frame;
        if !self.fast_on {
            return false;
        }
        let vouched = match meta.csum {
            Checksum::Verified { levels: 1.. } => true,
            Checksum::None => false,
            _ => return false,
        };
        let Some(slot) = self.table.fast_slot(self.last, head) else {
            return false;
        };
        let (max_len, max_segs) = (usize::from(self.cfg.max_len), self.cfg.max_segs);
        let (Some(run), Some(t)) = (self.table.runs.get_mut(slot), self.table.fast.get(slot))
        else {
            return false;
        };
        // Checksums the meta vouches for are not verified again; the fast path
        // takes a frame whose checksums are either all vouched for or none
        // (the full path sorts out the levels of the others).
        let verify = match meta.csum {
            Checksum::Verified { levels } if levels >= t.levels() => false,
            _ if vouched => return false,
            _ => true,
        };
        let hdr_len = usize::from(t.len);
        // In two parts, the head must end where the template's headers do.
        if !pay.is_empty() && head.len() != hdr_len {
            return false;
        }
        let st = run.state;
        let first_id = |l3: usize| bytes::be16(run.bytes(), l3 + 4);
        // ID modes per IP level: the outer (or only) header's first.
        let ids = match &t.outer {
            None => [
                fast::Ids {
                    mode: st.ids[0],
                    first: first_id(t.l3()),
                },
                fast::Ids {
                    mode: IdMode::Undecided,
                    first: 0,
                },
            ],
            Some(o) => [
                fast::Ids {
                    mode: st.ids[1],
                    first: first_id(t.l3()),
                },
                fast::Ids {
                    mode: st.ids[0],
                    first: first_id(o.l3()),
                },
            ],
        };
        let total = head.len() + pay.len();
        let Some(hit) = fast::check(t, head, total, st.next_seq, ids, st.segs, st.size, verify)
        else {
            return false;
        };
        // The size rule of `judge`.
        let l3 = usize::from(run.layout.outer.l3_offset);
        if run.len.saturating_sub(l3) + hit.len > max_len {
            return false;
        }
        let payload = if pay.is_empty() {
            bytes::range(head, hdr_len, head.len())
        } else {
            pay
        };
        let kept = run.keep(payload, chained, hit.deferred, hit.outer, l3 + max_len, out);
        if !kept {
            // A bad checksum: the full path refuses the frame.
            return false;
        }
        run.len += payload.len();
        run.state.segs = st.segs.saturating_add(1);
        run.state.next_seq = st.next_seq.wrapping_add(payload.len() as u32);
        self.counters.merged += 1;
        self.counters.csum_verified += u64::from(verify);
        // The flush rules of `append`, in its order.
        let flush = if payload.len() < usize::from(st.size) {
            Some(FlushReason::Short)
        } else if run.state.segs >= max_segs {
            Some(FlushReason::Segs)
        } else if run.len.saturating_sub(l3) + usize::from(st.size) > max_len {
            Some(FlushReason::Size)
        } else {
            None
        };
        if let Some(r) = flush {
            self.table.deliver(slot, r, &mut self.counters, out);
        }
        true
    }

    /// Takes a frame once its layout is known: `frame.0`, then `frame.1` (empty
    /// unless the frame came in two parts), with `frame.2` its payload's handle
    /// in a chaining context.
    fn receive_parsed(
        &mut self,
        now: u64,
        frame: Parts<'_, P>,
        layout: &Layout,
        meta: &OffloadMeta,
        out: &mut impl Out<P>,
    ) {
        let Parts(head, pay, chained) = frame;
        // A datagram that looked like a tunnel but whose tunnel header or inner frame
        // is bad: refused for the reason the tunnel layer gives.
        if let Some(e) = &layout.tunnel_error {
            return self.refuse(frame, meta, parse_reason(e), None, out);
        }
        let f = Frame { b: head, l: layout };
        if !f.fits(head.len() + pay.len()) {
            return self.refuse(frame, meta, FlushReason::Unparsed, None, out);
        }
        // Borrowed where it was built, not moved out of the `Result`.
        let view = View::new(f, pay, self.cfg.udp);
        let p = match &view {
            Ok(p) => p,
            Err(r) => {
                let r = *r;
                let hash = view::has_ports(f).then(|| view::flow_hash(f));
                return self.refuse(frame, meta, r, hash, out);
            }
        };
        let hash = p.flow_hash();
        let mut csum = match walk::check(p, meta.csum, true) {
            Ok(c) => c,
            Err(r) => return self.refuse(frame, meta, r, Some(hash), out),
        };
        let bucket = self.table.bucket(hash);
        let limits = (usize::from(self.cfg.max_len), self.cfg.max_segs);
        let mut found = None;
        let mut split = None;
        for slot in self.table.candidates(bucket, hash) {
            let Some(run) = self.table.run(slot) else {
                continue;
            };
            let Ok(h) = View::new(run.frame(), &[], true) else {
                continue;
            };
            match walk::same_flow(p, &h) {
                Ok(()) => {
                    found = Some((slot, judge(p, &h, run, limits.0)));
                    break;
                }
                Err(r) => split = split.or(Some(r)),
            }
        }
        // A checksum left for the copy is verified as the payload is appended or
        // the frame held (in a chaining context, summed where it lies). Where the
        // frame is not kept, or where something would be delivered before it is,
        // it is verified first, on its own: a bad frame changes nothing but its
        // own refusal, as if it had been refused when it was checked.
        match found {
            Some((slot, Ok((ids, then)))) => {
                let Ok(flush) =
                    self.append(slot, p, chained, csum.deferred, ids, then, limits, out)
                else {
                    return self.refuse(frame, meta, FlushReason::CsumBad, Some(hash), out);
                };
                self.counters.merged += 1;
                self.counters.csum_verified += u64::from(csum.software);
                self.last = slot;
                if flush.is_none() {
                    self.table.template(slot);
                }
                if let Some(r) = flush {
                    self.table.deliver(slot, r, &mut self.counters, out);
                }
                return;
            }
            Some((slot, Err(r))) => {
                if let Err(bad) = csum.settle(p) {
                    return self.refuse(frame, meta, bad, Some(hash), out);
                }
                self.table.deliver(slot, r, &mut self.counters, out);
                split = None;
            }
            None => {}
        }
        if let Err(r) = walk::can_start(p) {
            if let Err(bad) = csum.settle(p) {
                return self.refuse(frame, meta, bad, Some(hash), out);
            }
            if let Some(s) = split {
                self.counters.split_off(s);
            }
            if !csum.software {
                return self.refuse(frame, meta, r, None, out);
            }
            // Delivered with what was verified here recorded.
            self.counters.csum_verified += 1;
            let verified = OffloadMeta {
                csum: csum.state,
                ..*meta
            };
            return self.refuse(frame, &verified, r, None, out);
        }
        let slot = match self.table.free_slot(bucket) {
            Some(slot) => slot,
            None => {
                // Making room delivers a run: only for a good frame.
                if let Err(bad) = csum.settle(p) {
                    return self.refuse(frame, meta, bad, Some(hash), out);
                }
                self.table.make_room(bucket, &mut self.counters, out)
            }
        };
        let start = RunState::start(p);
        let room = usize::from(layout.outer.l3_offset) + limits.0;
        if !self
            .table
            .hold(slot, hash, now, p, chained, start, meta, csum, room)
        {
            return self.refuse(frame, meta, FlushReason::CsumBad, Some(hash), out);
        }
        if let Some(s) = split {
            self.counters.split_off(s);
        }
        self.counters.held += 1;
        self.counters.csum_verified += u64::from(csum.software);
        self.last = slot;
    }

    /// Appends `p` to the run in `slot`, which [`judge`] let it join with ID modes
    /// `ids`, verifying its `deferred` checksum as the payload is copied
    /// ([`walk::Csum::deferred`]), or, chained (`chained` its payload's handle),
    /// as the payload is summed where it lies. Returns why the run must now be
    /// delivered, if it must: `then` (the transport's reason), the segment limit,
    /// or no room for another segment; `Err` if the checksum is bad (nothing is
    /// appended).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        slot: usize,
        p: &View<'_>,
        chained: Option<&P>,
        deferred: Option<u32>,
        ids: [IdMode; 2],
        then: Option<FlushReason>,
        (max_len, max_segs): (usize, u16),
        out: &mut impl Out<P>,
    ) -> Result<Option<FlushReason>, ()> {
        let Some(run) = self.table.run_mut(slot) else {
            return Ok(None);
        };
        let payload = p.payload();
        let room = usize::from(run.layout.outer.l3_offset) + max_len;
        let kept = run.keep(payload, chained, deferred, None, room, out);
        if !kept {
            // Bad (or, which the room grown for it rules out, not copied whole):
            // the bytes written past the run are room, not the run.
            return Err(());
        }
        run.len += payload.len();
        run.state.merged(p, ids);
        if then.is_some() {
            return Ok(then);
        }
        if run.state.segs >= max_segs {
            return Ok(Some(FlushReason::Segs));
        }
        let ip_len = run
            .len
            .saturating_sub(usize::from(run.layout.outer.l3_offset));
        if ip_len + usize::from(run.state.size) > max_len {
            return Ok(Some(FlushReason::Size));
        }
        Ok(None)
    }

    /// Delivers `frame` unchanged, counted as refused for `reason`, after the runs
    /// with flow hash `hash` (if given), so the flow stays in order.
    #[cold]
    fn refuse(
        &mut self,
        frame: Parts<'_, P>,
        meta: &OffloadMeta,
        reason: FlushReason,
        hash: Option<u32>,
        out: &mut impl Out<P>,
    ) {
        if let Some(hash) = hash {
            self.table
                .deliver_hash(hash, reason, &mut self.counters, out);
        }
        self.counters.refuse(reason);
        self.counters.delivered += 1;
        let Parts(head, pay, chained) = frame;
        out.frame(head, pay, chained, meta);
    }
}

/// Whether `p` may join the run whose head is `h` (the layers' flush rules, then
/// the size limit `max_len`): `Ok` with the run's IP ID modes and the reason to
/// flush right after joining, if any; `Err` with the reason the run must be
/// delivered without it.
#[inline]
fn judge<P>(
    p: &View<'_>,
    h: &View<'_>,
    run: &table::Run<P>,
    max_len: usize,
) -> Result<([IdMode; 2], Option<FlushReason>), FlushReason> {
    let ids = walk::must_flush(p, h, &run.state)?;
    let ip_len = run
        .len
        .saturating_sub(usize::from(run.layout.outer.l3_offset));
    if ip_len + p.payload_len() > max_len {
        return Err(FlushReason::Size);
    }
    Ok((ids, walk::after_merge(p, h, &run.state)))
}

/// The reason for a frame the layout parser refused: the GRO rule it breaks where
/// there is one (GENEVE version, GRE flags and version, VXLAN flags), else
/// [`FlushReason::Unparsed`].
fn parse_reason(e: &Error) -> FlushReason {
    match *e {
        Error::Invalid {
            layer: Layer::Geneve,
            field: "version",
            ..
        } => FlushReason::GeneveVersion,
        Error::Invalid {
            layer: Layer::Gre,
            field: "version" | "flags",
            ..
        } => FlushReason::GreFlags,
        Error::Invalid {
            layer: Layer::Vxlan,
            ..
        } => FlushReason::TunnelFlags,
        _ => FlushReason::Unparsed,
    }
}
