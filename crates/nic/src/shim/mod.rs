//! The software-offload shim: any backend, presented as a fully capable NIC.
//!
//! [`Shim`] wraps a [`Nic`] and offers the layer above every offload its
//! [`ShimConfig`] switches on, doing in software exactly what the backend lacks
//! (`wanted.minus(backend)`, [`Offloads::minus`]) and passing through what the
//! backend does itself. The engine never branches on the backend.
//!
//! # Transmit
//!
//! Frames are taken from the front of the batch, one at a time:
//!
//! * a super-frame whose segmentation request the backend cannot honour is
//!   segmented with [`linerate_offload::gso::Segmenter`]. To a backend that takes
//!   scatter-gather frames ([`Nic::tx_sg`], and [`ShimConfig::tx_sg`] on) the
//!   super-frame's buffer becomes a [`SharedBuf`] once, and each segment is a
//!   small head of the backend's pool with its headers plus one [`Frag`]
//!   referencing its payload range ([`segment_sg`]): no payload byte is copied,
//!   and a completed checksum sums the range where it lies. To any other
//!   backend each segment's payload is read from the super-frame and gathered
//!   with its headers into one pooled buffer of the backend's pool, the checksum
//!   summed in the same pass. Checksums are completed ([`CsumMode::Complete`])
//!   when the backend has no `tx_csum`, else left partial for it
//!   ([`CsumMode::LeavePartial`]);
//! * a frame with a partial checksum the backend cannot complete is completed in
//!   place ([`linerate_offload::csum::complete`]);
//! * anything else is passed on as it is.
//!
//! Every frame so produced is checked against the backend's caps (MTU, offloads)
//! before it is queued, so a frame the backend would refuse is refused here with
//! the same typed error ([`NicError::Unsupported`], [`NicError::Oversize`], ...),
//! counted under `tx_dropped_<reason>` in the shim's counters. When the backend's
//! queue is full, the segments of a super-frame already taken wait in the shim
//! (one super-frame's worth per queue at most) and go first on the next call.
//!
//! # Receive
//!
//! * checksums the backend did not verify are verified
//!   ([`linerate_offload::csum::verify_meta`]): good frames are marked
//!   [`linerate_offload::Checksum::Verified`] (`csum_verified`), bad ones dropped
//!   (`csum_bad`, `rx_dropped_csum`). With software GRO, GRO verifies them, the
//!   innermost transport checksum while it copies the payload into its run (each
//!   byte read once); what GRO passes on unverified (refused before it looked at
//!   the checksum) is verified here on its way up;
//! * with more presented queues than the backend has, frames are dispatched to
//!   per-queue internal queues by the Toeplitz hash ([`linerate_rss::Steering`];
//!   the backend's hash is used when it gives one), `rss_dispatched` counted on the
//!   target queue; `receive(q)` drains queue `q`;
//! * when the backend has no LRO, each queue's frames go through its own
//!   [`Gro`] context, flushed at the end of every receive call (so nothing is held
//!   between calls; `gro_merged`, `gro_flushed`). Without software dispatch the
//!   shim asks the backend for scatter-gather frames ([`ShimConfig::rx_sg`],
//!   [`Nic::set_rx_sg`]): GRO takes each in two parts, its headers parsed where
//!   they are and its payload summed and copied into the run where it lies
//!   ([`Gro::receive_split`]), so over a memory wire a segment's payload is
//!   copied once between the sender's super-frame and the receiver's, not
//!   gathered first. Every other path takes frames linear (`sg_linearized`
//!   counts the frames gathered: those GRO passes on as they came, and any the
//!   dispatch or checksum paths see). A merged run goes up in the
//!   buffer GRO gathered it in (a buffer of the shim's pool, which the layer
//!   above may keep as long as it likes); a frame GRO passes on as it came goes
//!   up in its own buffer;
//! * a super-frame the backend delivers while the shim presents no LRO is
//!   segmented back into MTU frames.
//!
//! Counters ([`Nic::counters`]) are the shim's, per presented queue: `rx_packets`
//! and `tx_packets` count frames as the layer above sees them (super-frames),
//! plus `gso_segments`, `gso_packets`, `gro_merged`, `gro_flushed`, `csum_bad`,
//! `csum_verified`, `csum_completed`, `rss_dispatched`. The backend's own counters
//! (frames as on the wire) are at [`Shim::backend`]. The recorder is the
//! backend's: it sees frames as they are on the wire, after segmentation on
//! transmit and before GRO on receive.
//!
//! ```
//! use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
//! use linerate_offload::{csum, Gso, GsoType, OffloadMeta};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::layout;
//!
//! // Two plain memory ports: no offloads, MTU 1500.
//! let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
//! let mut a = Shim::new(a, ShimConfig::default())?;
//! let mut b = Shim::new(b, ShimConfig::default())?;
//! assert!(a.caps().offloads.tso4 && a.caps().offloads.tx_csum);
//!
//! // A 20 000-byte TCP super-frame with a partial checksum, as a stack hands it over.
//! let mut bytes = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
//!     .build(&[7; 20_000]);
//! let l = layout::parse(&bytes).unwrap();
//! let partial = csum::prepare_partial(&mut bytes, &l).unwrap();
//! let meta = OffloadMeta { csum: partial, gso: Some(Gso::new(GsoType::TcpV4, 1460)), ..OffloadMeta::plain() };
//! let mut batch = Batch::new();
//! batch.push(Frame::new(a.pool().alloc_from(&bytes), meta));
//! assert_eq!(a.transmit(0, &mut batch)?, 1);
//!
//! // 14 MTU frames crossed the wire; the receiver gets one super-frame back.
//! assert_eq!(b.receive(0, &mut batch, 64)?, 1);
//! assert_eq!(batch[0].len(), bytes.len());
//! assert_eq!(b.backend().counters().snapshot().by_name("rx_packets"), Some(14));
//! assert_eq!(b.counters().snapshot().by_name("gro_merged"), Some(13));
//! # Ok::<(), linerate_nic::NicError>(())
//! ```

use crate::buf::{Frag, PacketBuf, Pool, PoolConfig, SharedBuf};
use crate::caps::{NicCaps, Offloads, RssCaps};
use crate::check::check_tx;
use crate::counters::{Counter, Counters, Tally, count};
use crate::error::{NicConfigError, NicError};
use crate::frame::{Batch, Frags, Frame};
use crate::nic::{Nic, check_queue};
use crate::notify::Readiness;
use crate::pcap::Recorder;
use linerate_offload::gro::{ChainSink, Gro, GroConfig, GroSink};
use linerate_offload::gso::{CsumMode, GsoError, HeaderSink, SegmentSink, Segmenter};
use linerate_offload::{Checksum, OffloadMeta, RssHash, csum};
use linerate_rss::{HashConfig, IndirectionTable, RssKey, Steering};
use linerate_wire::layout;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

/// Which offloads the shim provides in software, and how it presents queues.
#[derive(Debug, Clone)]
pub struct ShimConfig {
    /// Complete partial transmit checksums the backend cannot (`tx-checksumming`).
    pub tx_csum: bool,
    /// Segment TCP super-frames the backend cannot (TSO: TCPv4, TCPv6, ECN),
    /// plain and in UDP and GRE tunnels.
    pub tso: bool,
    /// Segment UDP super-datagrams the backend cannot (USO), plain and in tunnels.
    pub uso: bool,
    /// Verify received checksums the backend did not (`rx-checksumming`).
    pub rx_csum: bool,
    /// Coalesce received segments when the backend has no LRO (GRO).
    pub gro: bool,
    /// The GRO settings (per queue).
    pub gro_config: GroConfig,
    /// Queues presented to the layer above; 0 means the backend's. More than
    /// the backend has turns on software RSS dispatch.
    pub queues: u16,
    /// The RSS steering for software dispatch; `None`: Microsoft's key, a
    /// 128-entry table over the presented queues, every hash type, inner headers
    /// (of tunnels on the ports of `gro_config.layout`).
    pub steering: Option<Arc<Steering>>,
    /// Frames each internal dispatch queue holds (more are dropped,
    /// `rx_dropped_ring_full`).
    pub queue_len: usize,
    /// The shim's pool for the layer above's super-frames and for received
    /// (coalesced) frames longer than `small_pool`'s buffers.
    pub pool: PoolConfig,
    /// The pool for received frames that fit an MTU-sized buffer.
    pub small_pool: PoolConfig,
    /// Software GSO makes scatter-gather segments (headers plus a reference to
    /// the super-frame's payload) for a backend that takes them ([`Nic::tx_sg`]);
    /// off, or for another backend, each segment is written whole (a copy).
    pub tx_sg: bool,
    /// With software GRO, ask the backend for scatter-gather frames
    /// ([`Nic::set_rx_sg`]) and coalesce them where their payload lies
    /// ([`Gro::receive_split`]); off, the backend gathers each first.
    pub rx_sg: bool,
}

impl ShimConfig {
    /// Every software offload on, the backend's queues.
    pub fn all() -> ShimConfig {
        ShimConfig {
            tx_csum: true,
            tso: true,
            uso: true,
            rx_csum: true,
            gro: true,
            gro_config: GroConfig::default(),
            queues: 0,
            steering: None,
            queue_len: 4096,
            pool: PoolConfig::super_frames(),
            small_pool: PoolConfig::mtu(),
            tx_sg: true,
            rx_sg: true,
        }
    }

    /// Every software offload off: the shim presents the backend as it is
    /// (useful to measure offloads on versus off through the same code).
    pub fn none() -> ShimConfig {
        ShimConfig {
            tx_csum: false,
            tso: false,
            uso: false,
            rx_csum: false,
            gro: false,
            ..ShimConfig::all()
        }
    }

    /// The offloads these switches ask for.
    pub const fn wanted(&self) -> Offloads {
        Offloads {
            tx_csum: self.tx_csum,
            rx_csum: self.rx_csum,
            tso4: self.tso,
            tso6: self.tso,
            tso_ecn: self.tso,
            uso: self.uso,
            tunnel_udp: self.tso || self.uso,
            tunnel_udp_csum: self.tso || self.uso,
            tunnel_gre: self.tso || self.uso,
            tunnel_gre_csum: self.tso || self.uso,
            lro: self.gro,
        }
    }
}

impl Default for ShimConfig {
    fn default() -> Self {
        ShimConfig::all()
    }
}

/// Per presented queue state.
struct QueueState {
    /// Frames waiting for the backend (segments of a super-frame already taken).
    pending: Batch,
    /// Received frames dispatched here by software RSS.
    dispatched: VecDeque<Frame>,
    /// The queue's GRO context.
    gro: Gro,
    /// The queue's frag-list GRO context, for scatter-gather frames when the
    /// layer above takes chains ([`Nic::set_rx_sg`]); made when first asked for.
    chain: Option<Box<Gro<Frag>>>,
    /// GRO's merge count at the last look.
    gro_merged: u64,
    /// GRO's coalesced count at the last look.
    gro_coalesced: u64,
    /// GRO's verified count at the last look.
    gro_verified: u64,
}

/// Any backend, presented with every offload the [`ShimConfig`] switches on (see
/// the [module docs](self)).
pub struct Shim<N: Nic> {
    backend: N,
    caps: NicCaps,
    /// What the shim does in software.
    soft: Offloads,
    /// What the shim can segment in software: every segmentation it was
    /// configured for, also where the backend has part of it (TSO but not
    /// TSO inside a UDP tunnel: such a frame is segmented here).
    can_segment: Offloads,
    counters: Counters,
    pool: Pool,
    small_pool: Pool,
    segmenter: Segmenter,
    /// Segments go to the backend as scatter-gather frames.
    tx_sg: bool,
    /// The backend hands up scatter-gather frames, for GRO to take in two parts.
    rx_sg: bool,
    /// Nothing on the receive path reads payload in software (no GRO, no
    /// checksum verification, no dispatch; the backend does LRO): the backend's
    /// scatter-gather frames can go up as they are to a layer above that takes
    /// them ([`Nic::set_rx_sg`] is passed on).
    pass_sg: bool,
    /// The layer above takes scatter-gather frames, chains included
    /// ([`Nic::set_rx_sg`]): GRO chains the payloads of scatter-gather frames
    /// instead of copying them.
    up_sg: bool,
    gro_config: GroConfig,
    queues: Vec<QueueState>,
    /// Software RSS, when more queues are presented than the backend has.
    steering: Option<Arc<Steering>>,
    queue_len: usize,
    /// How received frames are parsed (GRO's tunnel ports).
    layout: layout::Config,
    /// Frames read from the backend, before processing.
    scratch: Batch,
    /// Frames read from one backend queue for software dispatch.
    incoming: Batch,
    /// Frames being transmitted, taken from the caller's batch.
    input: VecDeque<Frame>,
    epoch: Instant,
}

impl<N: Nic> core::fmt::Debug for Shim<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Shim")
            .field("caps", &self.caps)
            .field("software", &self.soft)
            .finish_non_exhaustive()
    }
}

/// The union of two offload sets.
const fn union(a: Offloads, b: Offloads) -> Offloads {
    Offloads {
        tx_csum: a.tx_csum || b.tx_csum,
        rx_csum: a.rx_csum || b.rx_csum,
        tso4: a.tso4 || b.tso4,
        tso6: a.tso6 || b.tso6,
        tso_ecn: a.tso_ecn || b.tso_ecn,
        uso: a.uso || b.uso,
        tunnel_udp: a.tunnel_udp || b.tunnel_udp,
        tunnel_udp_csum: a.tunnel_udp_csum || b.tunnel_udp_csum,
        tunnel_gre: a.tunnel_gre || b.tunnel_gre,
        tunnel_gre_csum: a.tunnel_gre_csum || b.tunnel_gre_csum,
        lro: a.lro || b.lro,
    }
}

impl<N: Nic> Shim<N> {
    /// Wraps `backend`, providing in software what `cfg` asks for and the backend
    /// lacks.
    ///
    /// # Errors
    ///
    /// [`NicError::Config`]: [`NicConfigError::Rss`] if software RSS is needed
    /// and the default steering cannot be built for the queue count,
    /// [`NicConfigError::SteeringQueues`] if `cfg.steering` has a different
    /// queue count than presented.
    pub fn new(backend: N, cfg: ShimConfig) -> Result<Shim<N>, NicError> {
        let bcaps = *backend.caps();
        let tx_sg = cfg.tx_sg && backend.tx_sg();
        let mut backend = backend;
        let can_segment = cfg.wanted();
        let soft = can_segment.minus(bcaps.offloads);
        let presented = if cfg.queues == 0 {
            bcaps.queues.max(1)
        } else {
            cfg.queues
        };
        let steering = if presented > bcaps.queues {
            let s = match cfg.steering {
                Some(s) => s,
                // Tunnels found on GRO's ports, so the hash read from the
                // bytes is of the flow GRO sees.
                None => Arc::new(Steering::new(
                    &RssKey::MICROSOFT,
                    IndirectionTable::new(presented)?,
                    HashConfig {
                        layout: cfg.gro_config.layout,
                        ..HashConfig::default()
                    },
                )),
            };
            if s.queues() != presented {
                return Err(NicConfigError::SteeringQueues {
                    steering: s.queues(),
                    presented,
                }
                .into());
            }
            Some(s)
        } else {
            None
        };
        let software_segments = soft.tso4 || soft.tso6 || soft.uso;
        let caps = NicCaps {
            offloads: union(bcaps.offloads, soft),
            queues: presented,
            rss: match (&steering, bcaps.rss) {
                (Some(s), _) => Some(RssCaps {
                    key_len: 40,
                    table_len: u16::try_from(s.table().with(|t| t.len())).unwrap_or(u16::MAX),
                }),
                (None, r) => r,
            },
            max_gso_size: if software_segments {
                NicCaps::GSO_MAX_SIZE
            } else {
                bcaps.max_gso_size
            },
            max_gso_segs: if software_segments {
                NicCaps::GSO_MAX_SEGS
            } else {
                bcaps.max_gso_segs
            },
            ..bcaps
        };
        let queues = (0..presented)
            .map(|_| QueueState {
                pending: Batch::new(),
                dispatched: VecDeque::new(),
                gro: Gro::new(cfg.gro_config),
                chain: None,
                gro_merged: 0,
                gro_coalesced: 0,
                gro_verified: 0,
            })
            .collect();
        // Scatter-gather frames from the backend go to GRO in two parts (headers,
        // payload where it lies), so their payload is copied once, into the run;
        // software dispatch reads frames whole first, so it takes them linear.
        let rx_sg = cfg.rx_sg && soft.lro && steering.is_none() && backend.set_rx_sg(true);
        let pass_sg =
            cfg.rx_sg && !soft.lro && !soft.rx_csum && steering.is_none() && bcaps.offloads.lro;
        Ok(Shim {
            backend,
            caps,
            soft,
            can_segment,
            counters: Counters::new(usize::from(presented)),
            pool: Pool::new(cfg.pool),
            small_pool: Pool::new(cfg.small_pool),
            segmenter: Segmenter::new(CsumMode::Complete),
            tx_sg,
            rx_sg,
            pass_sg,
            up_sg: false,
            gro_config: cfg.gro_config,
            queues,
            steering,
            queue_len: cfg.queue_len.max(1),
            layout: cfg.gro_config.layout,
            scratch: Batch::new(),
            incoming: Batch::new(),
            input: VecDeque::with_capacity(crate::frame::DEFAULT_BATCH),
            epoch: Instant::now(),
        })
    }

    /// The wrapped backend (its counters show frames as they are on the wire).
    pub fn backend(&self) -> &N {
        &self.backend
    }

    /// The wrapped backend, writable. With [`ShimConfig::rx_sg`] (and software
    /// GRO) the shim has asked it for scatter-gather frames on receive.
    pub fn backend_mut(&mut self) -> &mut N {
        &mut self.backend
    }

    /// Unwraps the backend (frames waiting in the shim are dropped), handing
    /// up linear frames again if the shim had asked it for scatter-gather ones.
    pub fn into_backend(self) -> N {
        let mut backend = self.backend;
        if self.rx_sg || (self.pass_sg && self.up_sg) {
            backend.set_rx_sg(false);
        }
        backend
    }

    /// What the shim does in software: the wanted offloads minus the backend's.
    pub fn software(&self) -> Offloads {
        self.soft
    }

    /// The software RSS steering, when the shim dispatches.
    pub fn steering(&self) -> Option<&Arc<Steering>> {
        self.steering.as_ref()
    }

    /// The backend queue a presented queue maps to.
    fn backend_queue(&self, queue: usize) -> usize {
        queue % self.backend.queues().max(1)
    }

    /// Sends what waits in `queue`'s pending batch; true if all of it went.
    fn flush_pending(&mut self, queue: usize) -> Result<bool, NicError> {
        let bq = self.backend_queue(queue);
        let Some(q) = self.queues.get_mut(queue) else {
            return Ok(true);
        };
        while !q.pending.is_empty() {
            let before = q.pending.len();
            match self.backend.transmit(bq, &mut q.pending) {
                Ok(_) if q.pending.len() == before => return Ok(false),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Turns `frame` into what the backend can take, appended to `queue`'s
    /// pending batch. On refusal returns the error and the counter to bump.
    fn convert(
        &mut self,
        queue: usize,
        mut frame: Frame,
        tally: &mut Tally,
    ) -> Result<(), (NicError, Counter)> {
        let bcaps = *self.backend.caps();
        let b = bcaps.offloads;
        let Some(q) = self.queues.get_mut(queue) else {
            return Ok(());
        };
        // A scatter-gather frame keeps its fragments where the backend takes
        // them and nothing needs their bytes in one piece: software GSO
        // (headers per segment, payload referenced where it lies) or a frame
        // passed on whose checksum needs no completing. Anything else is
        // gathered first, so checksums and segmentation see all of it.
        if !frame.is_linear() {
            let soft_gso = frame
                .meta
                .gso
                .is_some_and(|g| !b.segments(&g) && self.can_segment.segments(&g));
            let completes = matches!(frame.meta.csum, Checksum::Partial { .. })
                && !b.tx_csum
                && self.soft.tx_csum;
            if !(self.tx_sg && (soft_gso || !completes)) && frame.linearize() {
                tally.add(Counter::SgLinearized, 1);
            }
        }
        if let Some(gso) = frame.meta.gso
            && !b.segments(&gso)
            && self.can_segment.segments(&gso)
        {
            // Check the request against the presented caps first (sizes, kind).
            checked(&self.caps, &mut frame, tally)?;
            let partial_in = frame.meta.csum;
            let mode = if b.tx_csum {
                CsumMode::LeavePartial
            } else {
                CsumMode::Complete
            };
            self.segmenter.set_mode(mode);
            let first = q.pending.len();
            let made = if self.tx_sg {
                segment_sg(
                    &mut self.segmenter,
                    self.backend.pool(),
                    &mut q.pending,
                    frame,
                )
            } else {
                let mut sink =
                    SegmentsInto::new(self.backend.pool(), &mut q.pending, frame.meta.rss);
                let made = self
                    .segmenter
                    .segment_to(frame.bytes(), &frame.meta, &mut sink);
                sink.finish();
                made
            };
            let (n, seg_csum) = match made {
                Ok(r) => r,
                Err(e) => {
                    // Segments of a frame that failed part-way are not sent.
                    q.pending.truncate(first);
                    return Err((e.into(), Counter::TxDroppedInvalid));
                }
            };
            if !self.tx_sg {
                // (`segment_sg` has set them.)
                for f in q.pending.iter_mut().skip(first) {
                    f.meta.csum = seg_csum;
                }
            }
            tally.add(Counter::GsoPackets, 1);
            tally.add(Counter::GsoSegments, n as u64);
            if matches!(partial_in, Checksum::Partial { .. }) && matches!(seg_csum, Checksum::None)
            {
                tally.add(Counter::CsumCompleted, n as u64);
            }
            return Ok(());
        }
        if matches!(frame.meta.csum, Checksum::Partial { .. }) && !b.tx_csum && self.soft.tx_csum {
            let meta = frame.meta;
            let done = csum::complete(frame.bytes_mut(), &meta)
                .map_err(|e| (NicError::from(e), Counter::TxDroppedInvalid))?;
            frame.meta.csum = done;
            tally.add(Counter::CsumCompleted, 1);
        }
        checked(&bcaps, &mut frame, tally)?;
        if frame.meta.gso.is_some() {
            tally.add(Counter::TxGsoPackets, 1);
        }
        q.pending.push(frame);
        Ok(())
    }
}

/// [`check_tx`] of `frame` against `caps`; a scatter-gather frame refused (its
/// headers not all in its head, say) is gathered and checked again, as a linear
/// frame (`sg_linearized`).
fn checked(
    caps: &NicCaps,
    frame: &mut Frame,
    tally: &mut Tally,
) -> Result<(), (NicError, Counter)> {
    match check_tx(caps, frame) {
        Ok(_) => Ok(()),
        Err(e) if frame.is_linear() => Err(e),
        Err(_) => {
            frame.linearize();
            tally.add(Counter::SgLinearized, 1);
            check_tx(caps, frame).map(|_| ())
        }
    }
}

/// Software GSO of `frame` into scatter-gather segments appended to `out`: the
/// super-frame's buffer is shared once, and each segment is a head of `pool`
/// holding its headers (fixed up by the segmenter's plan) plus a fragment
/// referencing its payload range; the payload is only read, to sum it when the
/// checksums are completed. Returns the segment count and their checksum state,
/// as [`Segmenter::segment_to`] does; on failure nothing is appended.
///
/// This is what the shim does for a backend that takes scatter-gather frames
/// ([`Nic::tx_sg`]): each head is taken from `pool` and the headers are built
/// in it ([`Segmenter::segment_headers_to`]); the segments' metas keep
/// `frame`'s RSS hash.
///
/// # Errors
///
/// The segmenter's, for a super-frame it cannot segment.
pub fn segment_sg(
    segmenter: &mut Segmenter,
    pool: &Pool,
    out: &mut Batch,
    frame: Frame,
) -> Result<(usize, Checksum), GsoError> {
    let meta = OffloadMeta {
        csum: Checksum::None,
        gso: None,
        rss: frame.meta.rss,
    };
    let first = out.len();
    let mut frame = frame;
    if !frame.is_linear() {
        // Headers in the head, payload in fragments (an engine's super-segment
        // referencing its send buffer): each segment references the part of
        // the fragments that is its payload.
        let head_len = frame.head_len();
        let mut sink = SgSink {
            pool,
            out,
            payload: Payload::Pieces {
                head_len,
                frags: frame.frags.as_slice(),
                idx: 0,
                base: head_len,
            },
            meta,
            open: false,
        };
        let made = frame.with_probe(|probe| {
            segmenter.segment_pieces_to(
                probe,
                head_len,
                frame.frags.as_slice(),
                &frame.meta,
                &mut sink,
            )
        });
        let out = sink.out;
        match made {
            Ok((n, csum)) => {
                for f in out.iter_mut().skip(first) {
                    f.meta.csum = csum;
                }
                return Ok((n, csum));
            }
            // Headers not all in the head: gathered, and segmented as linear.
            Err(GsoError::Split) => {
                out.truncate(first);
                frame.linearize();
                return segment_sg(segmenter, pool, out, frame);
            }
            Err(e) => {
                out.truncate(first);
                return Err(e);
            }
        }
    }
    let shared = SharedBuf::new(frame.buf);
    let mut sink = SgSink {
        pool,
        out,
        payload: Payload::Linear(&shared),
        meta,
        open: false,
    };
    let made = segmenter.segment_headers_to(&shared, &frame.meta, &mut sink);
    let out = sink.out;
    match made {
        Ok((n, csum)) => {
            for f in out.iter_mut().skip(first) {
                f.meta.csum = csum;
            }
            Ok((n, csum))
        }
        Err(e) => {
            out.truncate(first);
            Err(e)
        }
    }
}

/// Where [`segment_sg`] builds segments: each a frame pushed onto `out` when its
/// head is lent (a buffer of `pool`, the headers written there in place), given
/// its payload as a fragment of `shared` when committed.
struct SgSink<'a, 'p> {
    pool: &'a Pool,
    out: &'a mut Batch,
    payload: Payload<'p>,
    meta: OffloadMeta,
    /// The last frame of `out` was lent and not committed yet.
    open: bool,
}

/// Where the super-frame [`SgSink`] segments holds its payload.
enum Payload<'a> {
    /// In one shared buffer with the headers: a range of it is a range of the
    /// frame.
    Linear(&'a SharedBuf),
    /// In fragments after a head of `head_len` bytes; the segments' ranges
    /// come in order, so a cursor remembers fragment `idx` starting at frame
    /// offset `base`.
    Pieces {
        head_len: usize,
        frags: &'a [Frag],
        idx: usize,
        base: usize,
    },
}

impl Payload<'_> {
    /// Pushes onto `frags` a reference to the frame's bytes `range`: one
    /// fragment always, so that a receiver's frag-list GRO can chain the
    /// segment. A range that spans pieces (a segment across two chunks of a
    /// send buffer, once per chunk boundary) is gathered into a buffer of
    /// `pool` of its own, the one copy this makes.
    fn refer(&mut self, range: core::ops::Range<usize>, frags: &mut crate::Frags, pool: &Pool) {
        match self {
            Payload::Linear(shared) => {
                if let Some(frag) = Frag::new((*shared).clone(), range.start, range.len()) {
                    let _ = frags.push(frag);
                }
            }
            Payload::Pieces {
                head_len,
                frags: pieces,
                idx,
                base,
            } => {
                if range.start < *base {
                    (*idx, *base) = (0, *head_len);
                }
                // The piece the range starts in.
                while let Some(p) = pieces.get(*idx)
                    && range.start >= *base + p.len()
                {
                    *base += p.len();
                    *idx += 1;
                }
                let Some(p) = pieces.get(*idx) else {
                    return;
                };
                if range.end - *base <= p.len() {
                    // Within one piece: referenced where it lies.
                    frags.push_slice(p, range.start - *base, range.len());
                    return;
                }
                gather(pieces, idx, base, range, frags, pool);
            }
        }
    }
}

/// The frame's bytes `range`, which span pieces from piece `idx` (at frame
/// offset `base`) on, gathered into a buffer of `pool` and pushed onto
/// `frags` as one fragment; the cursor left at the last piece read. Out of
/// line: it happens once per boundary between pieces (send-buffer chunks),
/// and inline it weighed on every segment's commit.
#[cold]
#[inline(never)]
fn gather(
    pieces: &[Frag],
    idx: &mut usize,
    base: &mut usize,
    range: core::ops::Range<usize>,
    frags: &mut crate::Frags,
    pool: &Pool,
) {
    let mut pos = range.start;
    let mut gathered: Option<PacketBuf> = None;
    while pos < range.end {
        let Some(p) = pieces.get(*idx) else { break };
        if pos >= *base + p.len() {
            *base += p.len();
            *idx += 1;
            continue;
        }
        let from = pos - *base;
        let k = (p.len() - from).min(range.end - pos);
        let bytes = p.bytes().get(from..from + k).unwrap_or_default();
        gathered
            .get_or_insert_with(|| {
                let mut b = pool.alloc();
                b.clear();
                b
            })
            .extend_from_slice(bytes);
        pos += k;
    }
    if let Some(b) = gathered {
        let len = b.len();
        if let Some(frag) = Frag::new(SharedBuf::new(b), 0, len) {
            let _ = frags.push(frag);
        }
    }
}

impl HeaderSink for SgSink<'_, '_> {
    fn header(&mut self, len: usize) -> Option<&mut [u8]> {
        if !self.open {
            // Room first, then the frame made where it stays: `push` builds it
            // on the stack before the capacity check and copies it over, and
            // that copy stalls on store forwarding (perf). Made with an empty
            // head (constants), which then becomes the pool's buffer in place
            // (`alloc_into_empty`; a buffer moved in would stall the same way).
            let meta = self.meta;
            let n = self.out.len() + 1;
            self.out
                .resize_with(n, || Frame::new(PacketBuf::from_vec(Vec::new()), meta));
            self.open = true;
            let f = self.out.last_mut()?;
            self.pool.alloc_into_empty(&mut f.buf);
        }
        let f = self.out.last_mut()?;
        f.buf.clear();
        Some(f.buf.append(len))
    }

    fn commit(&mut self, payload: core::ops::Range<usize>) {
        self.open = false;
        let Some(f) = self.out.last_mut() else {
            return;
        };
        self.payload.refer(payload, &mut f.frags, self.pool);
        if f.head_len() == 0 {
            // A segment without headers of its own (a frame passed through):
            // its headers are in the payload, and a head must hold them.
            f.linearize();
        }
    }
}

impl<N: Nic> Nic for Shim<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.queues())?;
        if !self.flush_pending(queue)? {
            return Ok(0);
        }
        let mut tally = Tally::default();
        let mut taken = 0;
        let mut result = Ok(());
        let mut input = core::mem::take(&mut self.input);
        input.extend(batch.drain(..));
        // Convert a run of frames, then send it; stop when the backend is full.
        'outer: while !input.is_empty() {
            while let Some(frame) = input.pop_front() {
                let len = frame.len();
                if let Err((e, c)) = self.convert(queue, frame, &mut tally) {
                    tally.add(c, 1);
                    result = Err(e);
                    break 'outer;
                }
                taken += 1;
                tally.add(Counter::TxPackets, 1);
                tally.add(Counter::TxBytes, len as u64);
                let pending = self.queues.get(queue).map_or(0, |q| q.pending.len());
                if pending >= crate::frame::DEFAULT_BATCH {
                    break;
                }
            }
            match self.flush_pending(queue) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // Frames not taken go back to the batch, in order.
        batch.extend(input.drain(..));
        self.input = input;
        if result.is_err() {
            // What was taken before the refused frame goes now (or waits).
            let _ = self.flush_pending(queue);
        }
        tally.flush(&self.counters, queue);
        result.map(|()| taken)
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.queues())?;
        let mut tally = Tally::default();
        let mut scratch = core::mem::take(&mut self.scratch);
        scratch.clear();
        let result = if let Some(steering) = self.steering.clone() {
            self.receive_dispatched(queue, &steering, &mut scratch, max, &mut tally)
        } else {
            self.backend
                .receive(queue, &mut scratch, max)
                .map(|_| self.prepare(&mut scratch, &mut tally))
        };
        let before = batch.len();
        if let Err(e) = result {
            self.scratch = scratch;
            tally.flush(&self.counters, queue);
            return Err(e);
        }
        self.deliver(queue, &mut scratch, batch, &mut tally);
        self.scratch = scratch;
        let got = batch.get(before..).unwrap_or_default();
        count(&mut tally, got, false);
        tally.flush(&self.counters, queue);
        Ok(batch.len() - before)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        check_queue(queue, self.queues())?;
        self.backend.readiness(self.backend_queue(queue))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.backend.set_recorder(recorder);
    }

    /// Scatter-gather frames up: possible where the backend hands them to the
    /// shim ([`ShimConfig::rx_sg`]) and the shim does GRO. GRO then keeps each
    /// such frame's payload by reference and hands a run up as its headers and
    /// a chain of the payloads (frag-list GRO, as Linux's `frag_list`), with
    /// the checksums verified; a frame it passes on as it came goes up as it
    /// came. Off (the default), every frame goes up linear.
    /// True if the backend takes scatter-gather frames (and
    /// [`ShimConfig::tx_sg`] is on): the shim then takes them too, segments
    /// their payload by reference and passes them on without gathering them
    /// where nothing needs their bytes in one piece.
    fn tx_sg(&self) -> bool {
        self.tx_sg
    }

    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        self.backend.set_multicast_filter(unicast, groups)
    }

    fn set_rx_sg(&mut self, on: bool) -> bool {
        if self.pass_sg {
            // Passed through: the backend's frames go up as they come.
            self.up_sg = self.backend.set_rx_sg(on) && on;
            return self.up_sg;
        }
        self.up_sg = on && self.rx_sg;
        if self.up_sg {
            for q in &mut self.queues {
                let cfg = self.gro_config;
                q.chain.get_or_insert_with(|| Box::new(Gro::chaining(cfg)));
            }
        } else {
            // Runs held as chains leave as they would at a batch's end.
            for q in &mut self.queues {
                if let Some(c) = q.chain.as_mut()
                    && c.held() > 0
                {
                    c.flush_all_chained(&mut Discard);
                }
            }
        }
        self.up_sg
    }
}

/// A sink that drops what it is given (runs left when chains are switched
/// off between receives: there are none, as every receive ends with a flush).
struct Discard;

impl ChainSink<Frag> for Discard {
    fn frame(&mut self, _: &[u8], _: &Frag, _: &OffloadMeta) {}
    fn run(&mut self, _: &[u8], _: &mut Vec<Frag>, _: &OffloadMeta) {}
}

impl<N: Nic> Shim<N> {
    /// Verifies checksums (dropping bad frames) and re-segments super-frames the
    /// layer above did not ask for, in place. With software GRO the checksums are
    /// left to GRO, which verifies while it copies, and to [`GroOut`] for the
    /// frames GRO passes on unverified ([`Shim::deliver`]).
    fn prepare(&mut self, frames: &mut Batch, tally: &mut Tally) {
        // Scatter-gather frames go on only to GRO (which takes them in two
        // parts), or up as they are where the shim reads no payload on receive
        // and the layer above takes them; any other is gathered here, before
        // anything reads its bytes.
        // One pass over the records: gathering, and whether any is a
        // super-frame.
        let pass = self.pass_sg && self.up_sg;
        let mut any_gso = false;
        for f in frames.iter_mut() {
            let gso = f.meta.gso.is_some();
            any_gso |= gso;
            if !f.is_linear() && !pass && (!self.rx_sg || gso) && f.linearize() {
                tally.add(Counter::SgLinearized, 1);
            }
        }
        let verify = self.soft.rx_csum && !self.soft.lro;
        let resegment = !self.caps.offloads.lro && any_gso;
        if verify {
            frames.retain_mut(|f| {
                if !matches!(f.meta.csum, Checksum::None) {
                    return true;
                }
                let mut meta = f.meta;
                let Ok(v) = csum::verify_meta(f.bytes(), &mut meta) else {
                    return true; // not IP, or unparseable: nothing to verify
                };
                if v.ok() {
                    if v.levels > 0 {
                        tally.add(Counter::CsumVerified, 1);
                    }
                    f.meta = meta;
                    true
                } else {
                    tally.add(Counter::CsumBad, 1);
                    tally.add(Counter::RxDroppedCsum, 1);
                    false
                }
            });
        }
        if resegment {
            self.resegment(frames, tally);
        }
    }

    /// Splits received super-frames into MTU frames (for a layer above that was
    /// not offered LRO).
    fn resegment(&mut self, frames: &mut Batch, tally: &mut Tally) {
        let mut out = Batch::with_capacity(frames.len());
        self.segmenter.set_mode(CsumMode::Complete);
        for f in frames.drain(..) {
            if f.meta.gso.is_none() {
                out.push(f);
                continue;
            }
            let first = out.len();
            let mut sink = SegmentsInto::new(&self.small_pool, &mut out, f.meta.rss);
            let made = self.segmenter.segment_to(f.bytes(), &f.meta, &mut sink);
            sink.finish();
            match made {
                Ok((n, state)) => {
                    for s in out.iter_mut().skip(first) {
                        s.meta.csum = state;
                    }
                    tally.add(Counter::GsoSegments, n as u64);
                }
                Err(_) => {
                    out.truncate(first);
                    tally.add(Counter::RxDroppedMalformed, 1);
                }
            }
        }
        *frames = out;
    }

    /// Software RSS: reads every backend queue, dispatches what arrives to the
    /// presented queues, and moves up to `max` frames of `queue` into `out`.
    fn receive_dispatched(
        &mut self,
        queue: usize,
        steering: &Steering,
        out: &mut Batch,
        max: usize,
        tally: &mut Tally,
    ) -> Result<(), NicError> {
        let mut incoming = core::mem::take(&mut self.incoming);
        let mut result = Ok(());
        let same_ports = steering.config().layout == self.layout;
        for bq in 0..self.backend.queues() {
            incoming.clear();
            if let Err(e) = self.backend.receive(bq, &mut incoming, max) {
                result = Err(e);
                break;
            }
            self.prepare(&mut incoming, tally);
            for mut f in incoming.drain(..) {
                let hash = match f.meta.rss {
                    Some(h) => Some(h.value),
                    None => {
                        // The input read straight from the bytes, or, when the
                        // steering's tunnel ports are not GRO's, from a parse
                        // with GRO's (what the frame's flow is, for the shim).
                        let h = if same_ports {
                            steering.hash_frame(f.bytes(), None)
                        } else {
                            let l = self.layout.parse(f.bytes()).ok();
                            steering.hash_frame(f.bytes(), l.as_ref())
                        };
                        f.meta.rss = h;
                        h.map(|h| h.value)
                    }
                };
                let target = usize::from(steering.queue_of(hash));
                let Some(q) = self.queues.get_mut(target) else {
                    continue;
                };
                if q.dispatched.len() >= self.queue_len {
                    self.counters.add(target, Counter::RxDroppedRingFull, 1);
                    continue;
                }
                q.dispatched.push_back(f);
                self.counters.add(target, Counter::RssDispatched, 1);
            }
        }
        self.incoming = incoming;
        result?;
        if let Some(q) = self.queues.get_mut(queue) {
            let n = q.dispatched.len().min(max);
            out.extend(q.dispatched.drain(..n));
        }
        Ok(())
    }

    /// Moves `frames` (prepared) to `batch`, through `queue`'s GRO when the shim
    /// does GRO.
    fn deliver(&mut self, queue: usize, frames: &mut Batch, batch: &mut Batch, tally: &mut Tally) {
        if !self.soft.lro {
            batch.append(frames);
            return;
        }
        let Some(q) = self.queues.get_mut(queue) else {
            batch.append(frames);
            return;
        };
        let now = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let parser = self.layout;
        let mut emit = GroOut {
            small: &self.small_pool,
            big: &self.pool,
            batch,
            verify: self.soft.rx_csum,
            tally,
            current: (core::ptr::null(), 0),
            passed: None,
            verify_passed: false,
        };
        q.gro.flush_older_than(now, &mut emit);
        if let Some(c) = q.chain.as_mut() {
            c.flush_older_than_chained(now, &mut emit);
        }
        let chains = self.up_sg;
        for f in frames.iter_mut() {
            if !f.is_linear() {
                if chains
                    && f.frags.len() == 1
                    && let Some(c) = q.chain.as_mut()
                {
                    // A flow's segments reach one context only while the other
                    // holds nothing: its runs go first, so order is kept.
                    if q.gro.held() > 0 {
                        q.gro.flush_all(&mut emit);
                    }
                    if receive_chained(c, now, &parser, f, &mut emit) {
                        continue;
                    }
                }
                if let Some(c) = q.chain.as_mut()
                    && c.held() > 0
                {
                    c.flush_all_chained(&mut emit);
                }
                if receive_split(&mut q.gro, now, &parser, f, &mut emit) {
                    continue;
                }
                // Not a frame GRO takes in two parts: gathered, and taken whole.
                f.linearize();
                emit.tally.add(Counter::SgLinearized, 1);
            }
            if let Some(c) = q.chain.as_mut()
                && c.held() > 0
            {
                c.flush_all_chained(&mut emit);
            }
            emit.current = (f.bytes().as_ptr(), f.len());
            q.gro.receive_ref(now, f.bytes(), &f.meta, &mut emit);
            // GRO passed the frame on as it came: its own buffer goes up, in the
            // place GRO gave it, rather than a copy.
            if let Some(at) = emit.passed.take()
                && let Some(slot) = emit.batch.get_mut(at)
            {
                slot.buf = core::mem::replace(&mut f.buf, PacketBuf::with_headroom(0, 0));
            }
        }
        emit.current = (core::ptr::null(), 0);
        frames.clear();
        q.gro.flush_all(&mut emit);
        if let Some(c) = q.chain.as_mut() {
            c.flush_all_chained(&mut emit);
        }
        let c = q.gro.counters();
        let (mut merged, mut coalesced, mut verified) = (c.merged, c.coalesced, c.csum_verified);
        if let Some(ch) = q.chain.as_ref() {
            let d = ch.counters();
            merged += d.merged;
            coalesced += d.coalesced;
            verified += d.csum_verified;
        }
        tally.add(Counter::GroMerged, merged - q.gro_merged);
        tally.add(Counter::GroFlushed, coalesced - q.gro_coalesced);
        tally.add(Counter::CsumVerified, verified - q.gro_verified);
        q.gro_merged = merged;
        q.gro_coalesced = coalesced;
        q.gro_verified = verified;
    }
}

/// Gives the scatter-gather frame `f` (one fragment) to the frag-list GRO
/// context `gro`: its head, and its fragment by reference. Returns false,
/// having done nothing, if the frame's head cannot be parsed as far as its
/// payload (then it takes the copying way). A frame GRO passes on as it came
/// goes up as it came, in the place GRO gave it, verified first (gathered) if
/// GRO did not verify it and the shim does `rx_csum`.
fn receive_chained(
    gro: &mut Gro<Frag>,
    now: u64,
    parser: &layout::Config,
    f: &mut Frame,
    emit: &mut GroOut<'_>,
) -> bool {
    let Some(frag) = f.frags.iter().next() else {
        return false;
    };
    let layout = || {
        f.buf
            .with_tail(frag.len())
            .ok_or(linerate_wire::Error::Truncated {
                layer: linerate_wire::error::Layer::Ethernet,
                need: f.buf.len() + frag.len(),
                have: f.buf.len(),
            })
            .and_then(|probe| parser.parse(probe))
    };
    let head = f.bytes();
    emit.current = (head.as_ptr(), head.len());
    gro.receive_chained(now, head, frag, layout, &f.meta, emit);
    emit.current = (core::ptr::null(), 0);
    if let Some(at) = emit.passed.take() {
        pass_up(emit, at, f, false);
    }
    true
}

/// Moves `f`, the frame being received, into the place GRO gave it in the
/// batch (`at`): gathered if `gather` (a layer above that takes linear frames
/// only) or to be verified, and verified if GRO passed it on unverified and the
/// shim does `rx_csum` (dropped, and counted, if bad).
fn pass_up(emit: &mut GroOut<'_>, at: usize, f: &mut Frame, gather: bool) {
    let Some(slot) = emit.batch.get_mut(at) else {
        return;
    };
    slot.buf = core::mem::replace(&mut f.buf, PacketBuf::with_headroom(0, 0));
    slot.frags = core::mem::take(&mut f.frags);
    let verify = core::mem::take(&mut emit.verify_passed);
    if (gather || verify) && slot.linearize() {
        emit.tally.add(Counter::SgLinearized, 1);
    }
    if !verify {
        return;
    }
    let mut meta = slot.meta;
    match csum::verify_meta(slot.bytes(), &mut meta) {
        Ok(v) if !v.ok() => {
            emit.tally.add(Counter::CsumBad, 1);
            emit.tally.add(Counter::RxDroppedCsum, 1);
            emit.batch.remove(at);
        }
        Ok(v) => {
            if v.levels > 0 {
                emit.tally.add(Counter::CsumVerified, 1);
            }
            slot.meta = meta;
        }
        Err(_) => {}
    }
}

/// Gives the scatter-gather frame `f` to `gro` in two parts, its head and its
/// fragment's bytes where they lie ([`Gro::receive_split`]), and returns false,
/// having done nothing, if GRO cannot take it so.
///
/// GRO needs the whole frame's layout unless the frame continues the run it
/// last touched (its fast path). It is parsed from the head in place, as
/// long as the frame: the head's storage past its end stands in for the payload
/// (initialised bytes of the buffer, never read as payload). The parse reads
/// headers only, and GRO takes the frame only if the headers end exactly where
/// the head does and the packet where the payload does, so bytes past the head
/// cannot have decided anything (a header continuing into the fragment would make
/// the layout's payload start past the head, or its tunnel fail to parse).
///
/// A frame GRO passes on as it came goes up as a frame, in the place GRO gave
/// it: head and fragment moved there, then gathered (the layer above takes
/// linear frames) and verified if GRO did not.
fn receive_split(
    gro: &mut Gro,
    now: u64,
    parser: &layout::Config,
    f: &mut Frame,
    emit: &mut GroOut<'_>,
) -> bool {
    let Some(frag) = f.frags.iter().next() else {
        return false;
    };
    if f.frags.len() != 1 {
        return false;
    }
    let layout = || {
        f.buf
            .with_tail(frag.len())
            .and_then(|probe| parser.parse(probe).ok())
    };
    let head = f.bytes();
    emit.current = (head.as_ptr(), head.len());
    if !gro.receive_split_with(now, head, frag.bytes(), layout, &f.meta, emit) {
        emit.current = (core::ptr::null(), 0);
        return false;
    }
    emit.current = (core::ptr::null(), 0);
    if let Some(at) = emit.passed.take() {
        pass_up(emit, at, f, true);
    }
    true
}

/// Where the shim's software GSO writes segments: buffers of the backend's pool,
/// appended to a queue's pending batch with `meta`. Each segment is written
/// where it stays, in a frame pushed onto the batch when its buffer is lent
/// (not built aside and moved in when committed).
struct SegmentsInto<'a> {
    pool: &'a Pool,
    batch: &'a mut Batch,
    meta: OffloadMeta,
    /// The last frame of `batch` was lent and not committed yet.
    open: bool,
}

impl<'a> SegmentsInto<'a> {
    fn new(pool: &'a Pool, batch: &'a mut Batch, rss: Option<RssHash>) -> SegmentsInto<'a> {
        SegmentsInto {
            pool,
            batch,
            meta: OffloadMeta {
                csum: Checksum::None,
                gso: None,
                rss,
            },
            open: false,
        }
    }

    /// Takes back a segment lent but never committed (the segmenter gave up).
    fn finish(self) {
        if self.open {
            self.batch.pop();
        }
    }
}

impl SegmentSink for SegmentsInto<'_> {
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        if !self.open {
            self.batch.push(Frame::new(self.pool.alloc(), self.meta));
            self.open = true;
        }
        let f = self.batch.last_mut()?;
        f.buf.clear();
        Some(f.buf.append(len))
    }

    fn commit(&mut self) {
        self.open = false;
    }
}

/// Where the shim's GRO delivers. A frame GRO passes on as it came (refused) is
/// the frame being received: its own buffer goes up (`passed`: [`Shim::deliver`]
/// moves it into the slot left here), verified first if GRO did not (`verify`),
/// and dropped if bad. A run that fits a small buffer is copied into one; a
/// merged super-frame's buffer is taken whole into a [`PacketBuf`] of the big
/// pool, and GRO gets another buffer of that pool in its place, so the payload
/// GRO gathered is not copied again. The layer above may keep that buffer as long
/// as it likes: it goes back to the pool when dropped, and the pool hands it out
/// again, so a warm shim allocates nothing.
struct GroOut<'a> {
    small: &'a Pool,
    big: &'a Pool,
    batch: &'a mut Batch,
    /// Verify what GRO passes on unverified (the shim does `rx_csum`).
    verify: bool,
    tally: &'a mut Tally,
    /// The bytes of the frame being received (address and length).
    current: (*const u8, usize),
    /// Where in `batch` the frame being received was passed on, if it was.
    passed: Option<usize>,
    /// The frame passed on came in two parts and is to be verified once gathered.
    verify_passed: bool,
}

impl GroOut<'_> {
    fn push(&mut self, buf: PacketBuf, meta: &OffloadMeta) {
        self.batch.push(Frame::new(buf, *meta));
    }
}

/// Frag-list GRO's output: a run goes up as its headers, copied into a small
/// buffer, and the chain of its payloads by reference; a frame passed on as it
/// came is the frame being received (moved up by [`receive_chained`]) or a run
/// of one leaving GRO (its headers copied, its payload by reference).
impl ChainSink<Frag> for GroOut<'_> {
    fn frame(&mut self, head: &[u8], payload: &Frag, meta: &OffloadMeta) {
        if self.passed.is_none() && (head.as_ptr(), head.len()) == self.current {
            self.passed = Some(self.batch.len());
            self.verify_passed = self.verify && matches!(meta.csum, Checksum::None);
            self.batch
                .push(Frame::new(PacketBuf::with_headroom(0, 0), *meta));
            return;
        }
        let mut f = Frame::new(self.small.alloc_from(head), *meta);
        let _ = f.frags.push(payload.clone());
        if self.verify && matches!(meta.csum, Checksum::None) {
            f.linearize();
            self.tally.add(Counter::SgLinearized, 1);
            let mut m = f.meta;
            match csum::verify_meta(f.bytes(), &mut m) {
                Ok(v) if !v.ok() => {
                    self.tally.add(Counter::CsumBad, 1);
                    self.tally.add(Counter::RxDroppedCsum, 1);
                    return;
                }
                Ok(v) if v.levels > 0 => self.tally.add(Counter::CsumVerified, 1),
                _ => {}
            }
            f.meta = m;
        }
        self.batch.push(f);
    }

    /// A joining segment's payload grows the chain's last fragment when it
    /// continues it in the same buffer (consecutive GSO segments of one
    /// super-frame, over a memory wire), else is pushed: a run of a
    /// super-frame's segments goes up as one fragment per buffer it spans,
    /// with no reference counted per segment.
    #[inline]
    fn chain(&mut self, chain: &mut Vec<Frag>, next: &Frag) {
        if let Some(last) = chain.last_mut()
            && last.extend(next)
        {
            return;
        }
        chain.extend_from_slice(core::slice::from_ref(next));
    }

    fn run(&mut self, head: &[u8], chain: &mut Vec<Frag>, meta: &OffloadMeta) {
        let buf = self.small.alloc_from(head);
        self.batch.push(Frame {
            buf,
            meta: *meta,
            frags: Frags::from_chain(chain),
        });
    }
}

impl GroSink for GroOut<'_> {
    fn frame_split(&mut self, head: &[u8], payload: &[u8], meta: &OffloadMeta) {
        if self.passed.is_none() && (head.as_ptr(), head.len()) == self.current {
            // The frame being received: it goes up itself (see `receive_split`),
            // verified there once gathered.
            self.passed = Some(self.batch.len());
            self.verify_passed = self.verify && matches!(meta.csum, Checksum::None);
            self.batch
                .push(Frame::new(PacketBuf::with_headroom(0, 0), *meta));
            return;
        }
        // Not the frame being received (GRO delivers nothing else in two parts):
        // gathered into a buffer of the shim's.
        let len = head.len() + payload.len();
        let pool = if len <= self.small.config().buf_len {
            self.small
        } else {
            self.big
        };
        let mut buf = pool.alloc();
        buf.extend_from_slice(head);
        buf.extend_from_slice(payload);
        GroSink::frame(self, &buf, meta);
    }

    fn frame(&mut self, bytes: &[u8], meta: &OffloadMeta) {
        let mut meta = *meta;
        if self.verify && matches!(meta.csum, Checksum::None) {
            match csum::verify_meta(bytes, &mut meta) {
                Ok(v) if !v.ok() => {
                    self.tally.add(Counter::CsumBad, 1);
                    self.tally.add(Counter::RxDroppedCsum, 1);
                    return;
                }
                Ok(v) if v.levels > 0 => self.tally.add(Counter::CsumVerified, 1),
                // Not IP, unparseable, or nothing to verify: passed on as it is.
                _ => {}
            }
        }
        if self.passed.is_none() && (bytes.as_ptr(), bytes.len()) == self.current {
            self.passed = Some(self.batch.len());
            self.batch
                .push(Frame::new(PacketBuf::with_headroom(0, 0), meta));
            return;
        }
        let pool = if bytes.len() <= self.small.config().buf_len {
            self.small
        } else {
            self.big
        };
        let buf = pool.alloc_from(bytes);
        self.batch.push(Frame::new(buf, meta));
    }

    fn run(&mut self, buf: &mut Vec<u8>, len: usize, meta: &OffloadMeta) {
        if len <= self.small.config().buf_len {
            return GroSink::frame(self, buf.get(..len).unwrap_or_default(), meta);
        }
        // The whole storage goes up, GRO's room after the frame included: it is
        // initialised, so the pool takes it back as it is (no zero-filling), and
        // GRO's new buffer is a whole pool buffer it need not grow.
        let taken = core::mem::replace(buf, self.big.take_storage());
        let mut frame = PacketBuf::from_storage(self.big, taken);
        if frame.truncate(len).is_err() {
            return; // cannot happen: `len` is within the run's buffer
        }
        self.push(frame, meta);
    }
}

#[cfg(test)]
mod tests;
