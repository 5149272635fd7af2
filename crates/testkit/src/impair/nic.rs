//! [`Impaired`]: any [`Nic`] behind an impaired link, one [`DelayLine`] each way.

use super::line::DelayLine;
use super::model::{ImpairCounters, Impairment, Model};
use linerate_nic::buf::Pool;
use linerate_nic::notify::Readiness;
use linerate_nic::pcap::{Direction, Record, Recorder};
use linerate_nic::{Batch, Counters, Frame, Nic, NicCaps, NicError};
use linerate_offload::OffloadMeta;
use linerate_offload::gro::{Gro, GroConfig};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use std::sync::Arc;
use std::time::Duration;

/// Frames taken from the inner NIC per receive call at most, in batches of 64.
const RX_DRAIN: usize = 1024;

/// How an [`Impaired`] NIC is set up.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ImpairedConfig {
    /// The impairment of frames the inner NIC receives (on their way to the
    /// caller of [`Nic::receive`]).
    pub inbound: Impairment,
    /// The impairment of frames the caller transmits (on their way to the inner
    /// NIC).
    pub outbound: Impairment,
    /// Seed of both directions' draws (each direction derives its own).
    pub seed: u64,
    /// Coalesce the wire frames each way with GRO when they are released, as a
    /// receiving NIC with GRO would: super-frames to the caller and to the
    /// inner NIC. Off: every frame crosses as one wire frame.
    pub coalesce: bool,
}

/// Counted drops of the wrapper itself (not of the impairment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImpairedStats {
    /// Frames that could not be segmented into wire frames (dropped).
    pub malformed: u64,
    /// Frames the inner NIC refused (dropped).
    pub refused: u64,
    /// Super-frames segmented (received and transmitted).
    pub segmented: u64,
}

/// A [`Nic`] whose frames cross an impaired link: every frame the inner NIC
/// receives is cut into wire frames (linerate_offload's GSO: a super-frame
/// becomes the MTU-sized frames it stands for, partial checksums completed) and
/// goes through the inbound [`DelayLine`] before [`Nic::receive`] returns it;
/// every frame transmitted likewise through the outbound line before the inner
/// NIC gets it. Loss, delay, reordering, duplication and corruption so apply per
/// wire frame, as netem on a real link would.
///
/// Released frames are coalesced again with GRO when
/// [`ImpairedConfig::coalesce`] is set; corrupted frames fail GRO's checksum
/// check and pass alone, for the receiver to drop. Frames leave the lines only
/// when this NIC is called ([`Nic::receive`], [`Nic::transmit`],
/// [`Impaired::release`]); a loop waits at most [`Impaired::time_to_next`].
///
/// It offers TSO and checksum offload whatever the inner NIC has (it segments
/// and completes everything itself).
pub struct Impaired<N: Nic> {
    inner: N,
    caps: NicCaps,
    epoch: std::time::Instant,
    inbound: DelayLine,
    outbound: DelayLine,
    coalesce: bool,
    seg: Segmenter,
    segs: SegmentBuf,
    gro_in: Gro,
    gro_out: Gro,
    rx: Batch,
    tx: Batch,
    stats: ImpairedStats,
    /// Records frames as the caller sees them (after the inbound line, before
    /// the outbound one); the inner NIC's recorder sees the other side.
    view: Option<Arc<dyn Recorder>>,
}

impl<N: Nic> core::fmt::Debug for Impaired<N> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Impaired")
            .field("inbound", &self.inbound.counters())
            .field("outbound", &self.outbound.counters())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Each direction's seed, derived from the one given (so inbound and outbound
/// draws are independent).
fn derive(seed: u64, dir: u64) -> u64 {
    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ dir.wrapping_mul(0xd1b5_4a32_d192_ed03)
}

impl<N: Nic> Impaired<N> {
    /// `inner` behind the link `cfg` describes.
    pub fn new(inner: N, cfg: ImpairedConfig) -> Impaired<N> {
        let mut caps = *inner.caps();
        caps.offloads.tx_csum = true;
        caps.offloads.tso4 = true;
        caps.offloads.tso6 = true;
        caps.offloads.tso_ecn = true;
        caps.offloads.lro = cfg.coalesce;
        Impaired {
            inner,
            caps,
            epoch: std::time::Instant::now(),
            inbound: DelayLine::new(Model::new(cfg.inbound, derive(cfg.seed, 1))),
            outbound: DelayLine::new(Model::new(cfg.outbound, derive(cfg.seed, 2))),
            coalesce: cfg.coalesce,
            seg: Segmenter::new(CsumMode::Complete),
            segs: SegmentBuf::new(),
            gro_in: Gro::new(GroConfig::default()),
            gro_out: Gro::new(GroConfig::default()),
            rx: Batch::new(),
            tx: Batch::new(),
            stats: ImpairedStats::default(),
            view: None,
        }
    }

    /// Records every frame the caller receives and transmits, as it sees them
    /// (the inner NIC's [`Nic::set_recorder`] sees the other side of the lines).
    pub fn set_view_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.view = recorder;
    }

    fn record_view(&self, dir: Direction, frames: &[Frame]) {
        if let Some(r) = &self.view {
            let time = Duration::from_nanos(nanos_since(self.epoch));
            for f in frames {
                r.record(&Record {
                    dir,
                    queue: 0,
                    frame: f.bytes(),
                    meta: &f.meta,
                    time,
                });
            }
        }
    }

    /// The inner NIC.
    pub fn inner(&self) -> &N {
        &self.inner
    }

    /// What the inbound direction did (frames the inner NIC received).
    pub fn inbound(&self) -> ImpairCounters {
        self.inbound.counters()
    }

    /// What the outbound direction did (frames transmitted through this NIC).
    pub fn outbound(&self) -> ImpairCounters {
        self.outbound.counters()
    }

    /// The wrapper's own drops.
    pub fn stats(&self) -> ImpairedStats {
        self.stats
    }

    /// Frames held in either direction.
    pub fn held(&self) -> usize {
        self.inbound.held() + self.outbound.held() + self.tx.len()
    }

    /// How long until a held frame is due (zero if one is due now); `None` if
    /// none is held.
    pub fn time_to_next(&self) -> Option<Duration> {
        let now = nanos_since(self.epoch);
        if !self.tx.is_empty() {
            return Some(Duration::ZERO);
        }
        let due = match (self.inbound.next_due(), self.outbound.next_due()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        Some(Duration::from_nanos(due.saturating_sub(now)))
    }

    /// Passes every outbound frame due now to the inner NIC (queue `queue`);
    /// inbound frames wait for [`Nic::receive`]. Returns how many the inner NIC
    /// took.
    pub fn release(&mut self, queue: usize) -> Result<usize, NicError> {
        let now = nanos_since(self.epoch);
        let Impaired {
            inner,
            outbound,
            gro_out,
            tx,
            coalesce,
            ..
        } = self;
        let pool = inner.pool().clone();
        let mut push = |frame: &[u8], meta: &OffloadMeta| {
            tx.push(Frame::new(pool.alloc_from(frame), *meta));
        };
        if *coalesce {
            outbound.release(now, usize::MAX, |f| {
                gro_out.receive(now, f, OffloadMeta::plain(), &mut push);
            });
            gro_out.flush_all(&mut push);
        } else {
            outbound.release(now, usize::MAX, |f| push(f, &OffloadMeta::plain()));
        }
        let mut taken = 0;
        while !self.tx.is_empty() {
            match self.inner.transmit(queue, &mut self.tx) {
                Ok(0) => break,
                Ok(n) => taken += n,
                Err(e @ (NicError::Io(_) | NicError::NoQueue { .. })) => return Err(e),
                // The refused frame left the batch; go on with the rest.
                Err(_) => self.stats.refused += 1,
            }
        }
        Ok(taken)
    }

    /// Cuts `frame` into wire frames and offers each to `line`.
    fn offer(
        seg: &mut Segmenter,
        segs: &mut SegmentBuf,
        stats: &mut ImpairedStats,
        line: &mut DelayLine,
        now: u64,
        frame: &[u8],
        meta: &OffloadMeta,
    ) {
        if meta.gso.is_some() {
            stats.segmented += 1;
        }
        match seg.segment(frame, meta, segs) {
            Ok(_) => {
                for s in segs.iter() {
                    line.offer(now, s);
                }
            }
            Err(_) => stats.malformed += 1,
        }
    }
}

impl<N: Nic> Nic for Impaired<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        self.release(queue)?;
        let now = nanos_since(self.epoch);
        let mut drained = 0;
        while drained < RX_DRAIN {
            self.rx.clear();
            let n = self.inner.receive(queue, &mut self.rx, 64)?;
            for f in self.rx.iter() {
                Self::offer(
                    &mut self.seg,
                    &mut self.segs,
                    &mut self.stats,
                    &mut self.inbound,
                    now,
                    f.bytes(),
                    &f.meta,
                );
            }
            self.rx.clear();
            drained += n;
            if n < 64 {
                break;
            }
        }
        let now = nanos_since(self.epoch);
        let before = batch.len();
        let Impaired {
            inner,
            inbound,
            gro_in,
            coalesce,
            ..
        } = self;
        let pool = inner.pool();
        let mut push = |frame: &[u8], meta: &OffloadMeta| {
            batch.push(Frame::new(pool.alloc_from(frame), *meta));
        };
        if *coalesce {
            inbound.release(now, max, |f| {
                gro_in.receive(now, f, OffloadMeta::plain(), &mut push);
            });
            gro_in.flush_all(&mut push);
        } else {
            inbound.release(now, max, |f| push(f, &OffloadMeta::plain()));
        }
        if self.view.is_some() {
            self.record_view(Direction::Rx, batch.get(before..).unwrap_or_default());
        }
        Ok(batch.len() - before)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let now = nanos_since(self.epoch);
        let n = batch.len();
        if self.view.is_some() {
            self.record_view(Direction::Tx, batch);
        }
        for f in batch.drain(..) {
            Self::offer(
                &mut self.seg,
                &mut self.segs,
                &mut self.stats,
                &mut self.outbound,
                now,
                f.bytes(),
                &f.meta,
            );
        }
        self.release(queue)?;
        Ok(n)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        self.inner.readiness(queue)
    }

    fn counters(&self) -> &Counters {
        self.inner.counters()
    }

    fn pool(&self) -> &Pool {
        self.inner.pool()
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.inner.set_recorder(recorder);
    }
}
