//! The flow table: runs in hash buckets of at most eight (Linux `GRO_HASH_BUCKETS`
//! buckets of `MAX_GRO_SKBS` = 8 per NAPI context), each run owning a reusable
//! buffer into which its first frame is copied and later payloads appended.
//!
//! Lookup hashes into one bucket and compares a byte of the hash with the
//! bucket's eight at once (one 64-bit word, no branch per slot), masked by the
//! bucket's occupancy bits; only slots whose byte matches have their whole key
//! compared. When
//! the bucket is full its oldest run is delivered (Linux `gro_flush_oldest`).
//! Buffers stay allocated when a run ends, so once warm nothing is allocated per
//! packet.

use super::bytes;
use super::chain::Out;
use super::fast::{Shape, Template};
use super::view::{Frame, View};
use super::walk::{Csum, RunState};
use super::{FlushReason, GroCounters, walk};
use crate::meta::OffloadMeta;
use linerate_wire::checksum;
use linerate_wire::layout::Layout;

/// Runs per bucket (Linux `MAX_GRO_SKBS`).
pub(super) const PER_BUCKET: usize = 8;

/// A held run: the first frame (headers and payload) with later payloads
/// appended; in a chaining context, the first frame's headers and the handles of
/// every payload.
#[derive(Debug)]
pub(super) struct Run<P> {
    /// Hold order, for oldest-first delivery.
    order: u64,
    /// When the first segment arrived (the caller's clock).
    born: u64,
    /// What the transport and IP layers remember.
    pub(super) state: RunState,
    /// The first frame's layout (offsets into `buf`).
    pub(super) layout: Layout,
    /// The first frame's meta, delivered unchanged if nothing joins.
    meta: OffloadMeta,
    /// The first frame, then the payloads of the segments that joined: the
    /// first `len` bytes. The rest is room already initialised, kept so that
    /// appending writes each byte once (no zero-filling as the run grows), and
    /// so that a sink taking the buffer ([`GroSink::run`](super::GroSink::run))
    /// can hand it on whole. A chaining run's holds only the first frame's
    /// headers.
    pub(super) buf: Vec<u8>,
    /// Bytes of `buf` the run holds.
    pub(super) head: usize,
    /// Bytes of the run: `head`, and in a chaining run the payloads of `chain`.
    pub(super) len: usize,
    /// A chaining run's payloads, in order (empty in a copying context).
    pub(super) chain: Vec<P>,
}

impl<P> Run<P> {
    /// The run's first frame (its headers), as the layers compare against it.
    #[inline]
    pub(super) fn frame(&self) -> Frame<'_> {
        Frame {
            b: self.bytes(),
            l: &self.layout,
        }
    }

    /// The run's bytes.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        self.buf.get(..self.head).unwrap_or_default()
    }

    /// Appends `payload` to the run: its handle `chained` in a chaining run
    /// (as `out` chains it, [`Out::chain`]), else its bytes copied into room of up to `room` bytes. A
    /// checksum `deferred` (the sum of its pseudo-header and headers), and a
    /// tunnel's outer one `outer` likewise, are verified on the way: summed
    /// where the payload lies, or as it is copied (one pass for both).
    /// False, with nothing appended, if one is bad (or, which the room grown for
    /// it rules out, the bytes could not be copied whole: those written past the
    /// run are room, not the run).
    #[inline(always)]
    pub(super) fn keep(
        &mut self,
        payload: &[u8],
        chained: Option<&P>,
        deferred: Option<u32>,
        outer: Option<u32>,
        room: usize,
        out: &mut impl Out<P>,
    ) -> bool {
        if let Some(handle) = chained {
            let good = match outer {
                None => deferred.is_none_or(|h| walk::sums_to_ones(checksum::partial(payload, h))),
                Some(o) => both_good(checksum::partial(payload, 0), deferred, o),
            };
            if good {
                out.chain(&mut self.chain, handle);
            }
            return good;
        }
        let tail = self.tail(payload.len(), room);
        let copied = match (deferred, outer) {
            (None, None) => bytes::copy(tail, payload),
            (Some(h), None) => {
                checksum::copy_partial(tail, payload, h).is_some_and(walk::sums_to_ones)
            }
            (_, Some(o)) => {
                checksum::copy_partial(tail, payload, 0).is_some_and(|s| both_good(s, deferred, o))
            }
        };
        if copied {
            self.head += payload.len();
        }
        copied
    }

    /// The `n` bytes after the run's, in room grown (zeroed) if short: to twice
    /// the buffer, at least `n` more, at most `room` (unless `n` needs more), so
    /// that a buffer is zeroed about once over its life, not once per run.
    #[inline]
    pub(super) fn tail(&mut self, n: usize, room: usize) -> &mut [u8] {
        let end = self.head + n;
        if self.buf.len() < end {
            let grown = (2 * self.buf.len()).clamp(end, room.max(end));
            self.buf.resize(grown, 0);
        }
        self.buf.get_mut(self.head..end).unwrap_or_default()
    }
}

/// True if a payload summing to `sum` makes both the checksum whose header
/// part is `inner` (if any) and the one whose header part is `outer` good.
#[inline]
fn both_good(sum: u32, inner: Option<u32>, outer: u32) -> bool {
    inner.is_none_or(|h| walk::sums_to_ones(checksum::combine(h, sum)))
        && walk::sums_to_ones(checksum::combine(outer, sum))
}

/// The table of held runs. Slot `8 * b + i` is run `i` of bucket `b`; a bucket
/// of fewer than eight runs (a table for fewer than eight flows) leaves its
/// last slots unused.
#[derive(Debug)]
pub(super) struct Table<P> {
    /// Per bucket: the flow hash of the run held in each slot (stale where the
    /// slot is free).
    keys: Vec<[u32; PER_BUCKET]>,
    /// Per bucket: byte `i` is the low byte of slot `i`'s key.
    tags: Vec<u64>,
    /// Per bucket: bit `i` set when slot `i` holds a run.
    occ: Vec<u8>,
    /// Per slot: the run (kept when free, for its buffer).
    pub(super) runs: Vec<Run<P>>,
    /// Per slot: the fast path's template of the run held there, built once the
    /// run has two segments (its IP ID mode decided; see [`super::fast`]);
    /// apart from the runs, so that runs of one segment never touch them.
    pub(super) fast: Vec<Template>,
    /// The shape of the template last built or tried: where the fast path
    /// reads a frame's addresses and ports to find its run by hash.
    shape: Option<Shape>,
    /// Runs per bucket (at most [`PER_BUCKET`]).
    per_bucket: usize,
    /// The occupancy bits of a full bucket.
    full: u8,
    /// Number of buckets.
    buckets: usize,
    /// Runs held.
    held: usize,
    /// Next hold order number.
    next_order: u64,
    /// Held runs in hold order, as (slot, order); entries whose run has since
    /// been delivered are skipped and dropped lazily.
    live: Vec<(usize, u64)>,
}

impl<P: AsRef<[u8]> + Clone> Table<P> {
    /// A table for `max_flows` runs: buckets of eight (fewer if `max_flows` is
    /// smaller), `max_flows` rounded up to whole buckets.
    pub(super) fn new(max_flows: usize) -> Table<P> {
        let per_bucket = max_flows.clamp(1, PER_BUCKET);
        let buckets = max_flows.max(1).div_ceil(per_bucket);
        let slots = buckets * PER_BUCKET;
        let empty = || Run {
            order: 0,
            born: 0,
            state: RunState::EMPTY,
            layout: Layout::default(),
            meta: OffloadMeta::plain(),
            buf: Vec::new(),
            head: 0,
            len: 0,
            chain: Vec::new(),
        };
        Table {
            keys: vec![[0; PER_BUCKET]; buckets],
            tags: vec![0; buckets],
            occ: vec![0; buckets],
            runs: (0..slots).map(|_| empty()).collect(),
            fast: vec![Template::NONE; slots],
            shape: None,
            per_bucket,
            full: (((1u16 << per_bucket) - 1) & 0xff) as u8,
            buckets,
            held: 0,
            next_order: 0,
            live: Vec::with_capacity(slots),
        }
    }

    /// Runs currently held.
    pub(super) fn held(&self) -> usize {
        self.held
    }

    /// Total run capacity.
    pub(super) fn capacity(&self) -> usize {
        self.buckets * self.per_bucket
    }

    /// The bucket for `hash`.
    #[inline]
    pub(super) fn bucket(&self, hash: u32) -> usize {
        // Multiply-shift maps the hash onto 0..buckets without a division.
        ((u64::from(hash) * self.buckets as u64) >> 32) as usize
    }

    /// The occupancy bits of `bucket`'s slots whose run has hash `hash`.
    #[inline]
    fn matching(&self, bucket: usize, hash: u32) -> u8 {
        const LSB: u64 = 0x0101_0101_0101_0101;
        const MSB: u64 = 0x8080_8080_8080_8080;
        let (Some(keys), Some(&tags), Some(&occ)) = (
            self.keys.get(bucket),
            self.tags.get(bucket),
            self.occ.get(bucket),
        ) else {
            return 0;
        };
        // Bytes equal to the hash's low byte: zero bytes of `x` (the lowest
        // exactly; a byte above a zero one may show too, which the key
        // comparison below removes).
        let x = tags ^ (u64::from(hash as u8) * LSB);
        let zero = x.wrapping_sub(LSB) & !x & MSB;
        // Bit 7 of byte `i` gathered into bit `i`.
        let mut maybe = ((zero >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u8 & occ;
        let mut m = maybe;
        while maybe != 0 {
            let i = maybe.trailing_zeros() as usize;
            maybe &= maybe - 1;
            if keys.get(i) != Some(&hash) {
                m &= !(1 << i);
            }
        }
        m
    }

    /// The held runs in `bucket` whose hash is `hash`, in slot order.
    #[inline]
    pub(super) fn candidates(&self, bucket: usize, hash: u32) -> Slots {
        Slots(self.matching(bucket, hash), bucket * PER_BUCKET)
    }

    /// Builds the fast path's template for the run in `slot` once it has two
    /// segments (the second decides the IP ID mode the fast path checks), if
    /// it has none yet. From the second on, not the third: a bulk flow's runs
    /// end at every receive batch's end, and each segment taken before the
    /// template is a full walk (visible in a profile of the software-offload
    /// bulk cell, `offload_report -- --only linerate-on`).
    #[inline]
    pub(super) fn template(&mut self, slot: usize) {
        if let (Some(run), Some(t)) = (self.runs.get(slot), self.fast.get_mut(slot))
            && !t.tried
            && run.state.segs >= 2
        {
            Self::build(run, t, &mut self.shape);
        }
    }

    /// Builds `run`'s template into `t` (once per run: kept out of line).
    #[cold]
    #[inline(never)]
    fn build(run: &Run<P>, t: &mut Template, shape: &mut Option<Shape>) {
        *t = Template::of(run.bytes(), &run.layout);
        if t.len != 0 {
            *shape = Some(t.shape());
        }
    }

    /// The slot of the held run whose template `head` matches: the run in
    /// `last` (the one last held or joined), else one found by the flow hash
    /// read from `head` where `last`'s template (or, if it has none, the last
    /// one built) has its addresses and ports. A run whose template matches is
    /// the run the layers would find for the frame: a template holds every byte
    /// `same_flow` compares, and no two held runs are of one flow.
    #[inline]
    pub(super) fn fast_slot(&mut self, last: usize, head: &[u8]) -> Option<usize> {
        if let Some(t) = self.fast.get(last)
            && t.len != 0
        {
            if t.matches(head) && self.is_held(last) {
                return Some(last);
            }
            self.shape = Some(t.shape());
        }
        let hash = self.shape?.hash(head);
        let bucket = self.bucket(hash);
        self.candidates(bucket, hash)
            .find(|&slot| self.fast.get(slot).is_some_and(|t| t.matches(head)))
    }

    /// True if a run is held in `slot`.
    #[inline]
    pub(super) fn is_held(&self, slot: usize) -> bool {
        is_held(&self.occ, slot)
    }

    /// The run in `slot`.
    #[inline]
    pub(super) fn run(&self, slot: usize) -> Option<&Run<P>> {
        self.runs.get(slot)
    }

    /// The run in `slot`, mutably.
    #[inline]
    pub(super) fn run_mut(&mut self, slot: usize) -> Option<&mut Run<P>> {
        self.runs.get_mut(slot)
    }

    /// A free slot of `bucket`, if it has one (the first).
    #[inline]
    pub(super) fn free_slot(&self, bucket: usize) -> Option<usize> {
        let free = !self.occ.get(bucket)? & self.full;
        (free != 0).then(|| bucket * PER_BUCKET + free.trailing_zeros() as usize)
    }

    /// A slot of `bucket` to hold a new run in: a free one, else the oldest run's,
    /// delivered first (counted as [`FlushReason::TableFull`]).
    pub(super) fn make_room(
        &mut self,
        bucket: usize,
        counters: &mut GroCounters,
        out: &mut impl Out<P>,
    ) -> usize {
        if let Some(slot) = self.free_slot(bucket) {
            return slot;
        }
        let start = bucket * PER_BUCKET;
        let oldest = (start..start + self.per_bucket)
            .min_by_key(|&s| self.runs.get(s).map_or(u64::MAX, |r| r.order))
            .unwrap_or(start);
        self.deliver(oldest, FlushReason::TableFull, counters, out);
        oldest
    }

    /// Holds `p` as a new run in the free `slot`, with `meta` (its checksum state
    /// set to `csum.state`), in a buffer of up to `room` bytes (grown if short);
    /// chained (`chained` its payload's handle, `p.b` its headers), the buffer
    /// takes the headers and the run a clone of the handle. A checksum `csum` left
    /// for the copy is verified as the frame is copied in (chained: summed where
    /// it lies); if it is bad the slot stays free and this returns false (as it
    /// would if the frame could not be copied whole, which the room grown for it
    /// rules out).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn hold(
        &mut self,
        slot: usize,
        hash: u32,
        now: u64,
        p: &View<'_>,
        chained: Option<&P>,
        state: RunState,
        meta: &OffloadMeta,
        csum: Csum,
        room: usize,
    ) -> bool {
        let order = self.next_order;
        let (b, i) = (slot / PER_BUCKET, slot % PER_BUCKET);
        let (Some(key), Some(tags), Some(occ), Some(run)) = (
            self.keys.get_mut(b).and_then(|k| k.get_mut(i)),
            self.tags.get_mut(b),
            self.occ.get_mut(b),
            self.runs.get_mut(slot),
        ) else {
            return true;
        };
        run.head = 0;
        run.chain.clear();
        let kept = if let Some(handle) = chained {
            let good = csum
                .deferred
                .is_none_or(|head| walk::sums_to_ones(checksum::partial(p.payload(), head)));
            let headers = run.tail(p.b.len(), room);
            let copied = good && bytes::copy(headers, p.b);
            if copied {
                run.head = p.b.len();
                run.chain.push(handle.clone());
            }
            copied
        } else {
            let frame = run.tail(p.len(), room);
            let copied = match csum.deferred {
                None => frame
                    .split_at_mut_checked(p.b.len())
                    .is_some_and(|(head, pay)| bytes::copy(head, p.b) && bytes::copy(pay, p.pay)),
                Some(head) => {
                    let at = usize::from(p.l.payload);
                    frame
                        .split_at_mut_checked(at)
                        .is_some_and(|(headers, payload)| {
                            bytes::copy(headers, bytes::range(p.b, 0, at))
                                && checksum::copy_partial(payload, p.payload(), head)
                                    .is_some_and(walk::sums_to_ones)
                        })
                }
            };
            if copied {
                run.head = p.len();
            }
            copied
        };
        if !kept {
            return false;
        }
        run.len = p.len();
        // The slot's template was cleared when its last run was delivered.
        *key = hash;
        *tags = (*tags & !(0xff << (8 * i))) | (u64::from(hash as u8) << (8 * i));
        *occ |= 1 << i;
        self.next_order += 1;
        run.order = order;
        run.born = now;
        run.state = state;
        run.layout = *p.l;
        run.meta = *meta;
        run.meta.csum = csum.state;
        self.held += 1;
        if self.live.len() >= 4 * self.runs.len() {
            let (occ, runs) = (&self.occ, &self.runs);
            self.live.retain(|&(s, o)| is_live(occ, runs, s, o));
        }
        self.live.push((slot, order));
        true
    }

    /// Delivers the run in `slot` (completing it if it holds more than one
    /// segment), counting it as flushed for `reason`.
    pub(super) fn deliver(
        &mut self,
        slot: usize,
        reason: FlushReason,
        counters: &mut GroCounters,
        out: &mut impl Out<P>,
    ) {
        let bit = 1u8 << (slot % PER_BUCKET);
        let (Some(occ), Some(run)) = (self.occ.get_mut(slot / PER_BUCKET), self.runs.get_mut(slot))
        else {
            return;
        };
        if *occ & bit == 0 {
            return;
        }
        *occ &= !bit;
        self.held -= 1;
        if let Some(t) = self.fast.get_mut(slot) {
            t.len = 0;
            t.tried = false;
        }
        counters.flush(reason);
        counters.delivered += 1;
        if run.state.segs <= 1 {
            out.run(&mut run.buf, run.head, &mut run.chain, &run.meta);
        } else {
            counters.coalesced += 1;
            let frame = run.buf.get_mut(..run.head).unwrap_or_default();
            let meta = walk::complete(frame, run.len, &mut run.layout, &run.state, &run.meta);
            out.run(&mut run.buf, run.head, &mut run.chain, &meta);
        }
        run.chain.clear();
    }

    /// Delivers every held run whose hash is `hash` (all runs of a flow whose
    /// packet is being refused, so the flow's bytes stay in order).
    pub(super) fn deliver_hash(
        &mut self,
        hash: u32,
        reason: FlushReason,
        counters: &mut GroCounters,
        out: &mut impl Out<P>,
    ) {
        if self.held == 0 {
            return;
        }
        let bucket = self.bucket(hash);
        for slot in self.candidates(bucket, hash) {
            self.deliver(slot, reason, counters, out);
        }
    }

    /// Delivers the held runs, oldest first, for which `due(born)` is true.
    pub(super) fn deliver_where(
        &mut self,
        reason: FlushReason,
        mut due: impl FnMut(u64) -> bool,
        counters: &mut GroCounters,
        out: &mut impl Out<P>,
    ) {
        if self.held == 0 {
            self.live.clear();
            return;
        }
        let mut live = core::mem::take(&mut self.live);
        live.retain(|&(slot, order)| {
            if !is_live(&self.occ, &self.runs, slot, order) {
                return false;
            }
            let born = self.runs.get(slot).map_or(0, |r| r.born);
            if due(born) {
                self.deliver(slot, reason, counters, out);
                false
            } else {
                true
            }
        });
        self.live = live;
    }
}

/// True if a run is held in `slot`, by the occupancy bits `occ`.
#[inline]
fn is_held(occ: &[u8], slot: usize) -> bool {
    occ.get(slot / PER_BUCKET)
        .is_some_and(|&o| o & (1 << (slot % PER_BUCKET)) != 0)
}

/// True if the `live` entry (slot, order) still names a held run.
#[inline]
fn is_live<P>(occ: &[u8], runs: &[Run<P>], slot: usize, order: u64) -> bool {
    is_held(occ, slot) && runs.get(slot).is_some_and(|r| r.order == order)
}

/// The slots of a bucket whose bits are set in a mask, lowest first: the mask
/// and the bucket's first slot.
pub(super) struct Slots(u8, usize);

impl Iterator for Slots {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.0 == 0 {
            return None;
        }
        let i = self.0.trailing_zeros() as usize;
        self.0 &= self.0 - 1;
        Some(self.1 + i)
    }
}

#[cfg(test)]
mod tests {
    // Test code: a panic is a failed test.
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::super::{Gro, GroConfig, GroSink};
    use crate::meta::{Checksum, OffloadMeta};
    use linerate_wire::build::{FrameBuilder, Ip, L4};
    use linerate_wire::etherparse::TcpHeader;

    /// A sink that takes every run's buffer and leaves `spare` in its place.
    struct Taker {
        spare: fn() -> Vec<u8>,
        out: Vec<(Vec<u8>, OffloadMeta)>,
    }

    impl GroSink for Taker {
        fn frame(&mut self, frame: &[u8], meta: &OffloadMeta) {
            self.out.push((frame.to_vec(), *meta));
        }
        fn run(&mut self, buf: &mut Vec<u8>, len: usize, meta: &OffloadMeta) {
            let mut taken = core::mem::replace(buf, (self.spare)());
            assert!(taken.len() >= len);
            taken.truncate(len);
            self.out.push((taken, *meta));
        }
    }

    fn segments() -> Vec<Vec<u8>> {
        (0..50u32)
            .map(|i| {
                let mut tcp = TcpHeader::new(1000, 2000, 1 + i * 1000, 512);
                tcp.ack = true;
                // Three runs of 16 (the third ends short), then two flows apart.
                let len = if i == 47 { 500 } else { 1000 };
                let sport = if i >= 48 { 1000 + i as u16 - 47 } else { 1000 };
                tcp.source_port = sport;
                let mut ip = Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
                if let Ip::V4(h) = &mut ip {
                    h.identification = i as u16;
                }
                FrameBuilder::new(ip, L4::Tcp(tcp)).build(&vec![i as u8; len])
            })
            .collect()
    }

    #[test]
    fn buffers_taken_by_the_sink_give_the_same_frames() {
        let frames = segments();
        let cfg = GroConfig {
            max_segs: 16,
            ..GroConfig::default()
        };
        let feed = |sink: &mut dyn FnMut(&mut Gro)| {
            let mut g = Gro::new(cfg);
            sink(&mut g);
            g
        };
        let mut reference = Vec::new();
        feed(&mut |g: &mut Gro| {
            let mut s = |f: &[u8], m: &OffloadMeta| reference.push((f.to_vec(), *m));
            for f in &frames {
                g.receive(0, f, OffloadMeta::plain(), &mut s);
            }
            g.flush_all(&mut s);
        });
        assert_eq!(reference.len(), 5);
        assert!(reference[..3].iter().all(|(_, m)| m.gso.is_some()));
        assert!(
            reference[3..]
                .iter()
                .all(|(_, m)| m.csum == Checksum::Verified { levels: 1 })
        );
        // Left with nothing, a short buffer, or one full of stale bytes.
        for spare in [Vec::new, || vec![0xee; 100], || vec![0xee; 70_000]] {
            let mut t = Taker {
                spare,
                out: Vec::new(),
            };
            feed(&mut |g: &mut Gro| {
                for f in &frames {
                    g.receive(0, f, OffloadMeta::plain(), &mut t);
                }
                g.flush_all(&mut t);
            });
            assert_eq!(t.out, reference);
        }
    }

    /// The byte-wise lookup finds exactly the occupied slots whose key is the
    /// hash, also where the bytes of other keys are one off the hash's (the
    /// borrows of the zero-byte test).
    #[test]
    fn matching_is_exact() {
        let mut t = super::Table::<super::super::NoChain>::new(8);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let hash = next() as u32;
            let low = hash & 0xff;
            for i in 0..8 {
                let r = next();
                // Mostly near the hash: equal, one off in the low byte, or equal
                // in the low byte only.
                let key = match r % 5 {
                    0 => hash,
                    1 => (hash & !0xff) | (low.wrapping_add(1) & 0xff),
                    2 => (hash & !0xff) | (low.wrapping_sub(1) & 0xff),
                    3 => hash ^ 0x100,
                    _ => (r >> 8) as u32,
                };
                t.keys[0][i] = key;
                t.tags[0] = (t.tags[0] & !(0xff << (8 * i))) | (u64::from(key as u8) << (8 * i));
            }
            t.occ[0] = next() as u8;
            let want = (0..8).fold(0u8, |m, i| {
                m | (u8::from(t.keys[0][i] == hash && t.occ[0] & (1 << i) != 0) << i)
            });
            assert_eq!(t.matching(0, hash), want);
        }
    }

    #[test]
    fn tail_grows_by_doubling_up_to_the_room() {
        let mut run = super::Table::<super::super::NoChain>::new(1).runs.remove(0);
        assert_eq!(run.tail(10, 1000).len(), 10);
        assert_eq!(run.buf.len(), 10);
        run.head = 10;
        assert_eq!(run.tail(15, 1000).len(), 15);
        assert_eq!(run.buf.len(), 25, "at least what is needed");
        run.head = 25;
        assert_eq!(run.tail(1, 1000).len(), 1);
        assert_eq!(run.buf.len(), 50, "doubled");
        run.head = 50;
        run.tail(500, 1000);
        assert_eq!(run.buf.len(), 550);
        run.head = 550;
        run.tail(7, 1000);
        assert_eq!(run.buf.len(), 1000, "doubling capped at the room");
        run.head = 1000;
        assert_eq!(run.tail(7, 1000).len(), 7, "past the room when needed");
        assert_eq!(run.buf.len(), 1007);
    }
}
