//! IP reassembly (RFC 791 section 3.2, RFC 815, RFC 8200 section 4.5) with the
//! bounds of Linux's `net/ipv4/inet_fragment.c`, as a sans-IO table the engine
//! feeds fragments and the time.
//!
//! A datagram being reassembled is keyed by (source, destination, protocol,
//! identification) for IPv4 and (source, destination, identification) for
//! IPv6. Its fragments' payloads are appended to one buffer in the order they
//! arrive, beside a list of the ranges they cover sorted by offset; the
//! datagram is complete when the ranges cover `0..end` with `end` set by the
//! last fragment (M clear), and is then copied, in order, behind the headers
//! of its first fragment into an output buffer the caller reads. Buffers are
//! pooled: a datagram's buffers go back to a spare list when it completes or
//! is dropped, and the next datagram takes them, so the steady state allocates
//! nothing per fragment.
//!
//! Refused, and counted ([`Counters`]):
//!
//! * overlapping fragments drop the whole datagram, and the fragments of it
//!   still to come (RFC 5722 section 4 for IPv6; the same for IPv4, as Linux
//!   does since 2018); an exact duplicate (same offset and length) is ignored
//!   (RFC 8200 section 4.5 allows it);
//! * a fragment with more to follow whose length is not a multiple of 8, or an
//!   empty one (RFC 791, RFC 8200: the fragment is dropped);
//! * a fragment that would make the datagram longer than 65,535 bytes;
//! * a fragment past the end a last fragment set, or a last fragment before
//!   data already held (the datagram is dropped, as Linux's `ip_frag_queue`);
//! * more than [`FragConfig::max_fragments`] fragments (the datagram).
//!
//! Memory: every datagram is charged its buffers' capacities and a fixed cost;
//! spare buffers are charged too. A fragment that would take the total past
//! [`FragConfig::high_thresh`] first gives up the spare buffers, then evicts
//! the oldest datagrams until the total is at most
//! [`FragConfig::low_thresh`] (Linux's `inet_frag_evictor` before 4.17); the
//! datagrams of one source may hold [`FragConfig::per_source`] at most. The
//! total never passes the high threshold ([`Reassembler::memory`]); one
//! output buffer of at most 64 KiB, reused, comes on top.
//!
//! Time: a datagram expires [`FragConfig::timeout_v4`] or
//! [`FragConfig::timeout_v6`] after its first fragment arrived;
//! [`Reassembler::expire`] reports it with its first fragment when that had
//! arrived, for the caller's ICMP time exceeded (RFC 792, RFC 8200 section
//! 4.5).

use crate::config::FragConfig;
use crate::counters::Counters;
use crate::engine::flow_hash::FlowHash;
use crate::rng::Rng;
use crate::time::Instant;
use std::collections::HashMap;
use std::mem::size_of;

pub(crate) mod ident;

/// The largest datagram, and so the largest end of a fragment.
pub const MAX_DATAGRAM: usize = 65_535;

/// The end of a list (an index no slot has).
const NIL: usize = usize::MAX;

/// What identifies the fragments of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FragKey {
    /// Source address (IPv4 mapped into IPv6 for IPv4).
    pub src: [u8; 16],
    /// Destination address (likewise).
    pub dst: [u8; 16],
    /// Identification (16 bits for IPv4, 32 for IPv6).
    pub id: u32,
    /// Protocol (IPv4 only; 0 for IPv6, whose key has none: RFC 8200
    /// section 4.5).
    pub proto: u8,
    /// IPv6.
    pub v6: bool,
}

impl FragKey {
    /// The key of an IPv4 datagram (RFC 791 section 3.2).
    pub fn v4(src: [u8; 4], dst: [u8; 4], proto: u8, id: u16) -> FragKey {
        let map = |a: [u8; 4]| std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
        FragKey {
            src: map(src),
            dst: map(dst),
            id: u32::from(id),
            proto,
            v6: false,
        }
    }

    /// The key of an IPv6 datagram.
    pub fn v6(src: [u8; 16], dst: [u8; 16], id: u32) -> FragKey {
        FragKey {
            src,
            dst,
            id,
            proto: 0,
            v6: true,
        }
    }
}

/// One received fragment, as [`Reassembler::insert`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Fragment<'a> {
    /// Its datagram.
    pub key: FragKey,
    /// Where its data starts in the datagram's fragmentable part, in bytes.
    pub offset: usize,
    /// More fragments follow (M set).
    pub more: bool,
    /// Its data (the bytes after its fragment header, or after its IPv4
    /// header).
    pub data: &'a [u8],
    /// The headers the reassembled datagram gets, taken from the first
    /// fragment (offset 0) only: they start the output and the quote of an
    /// ICMP time exceeded.
    pub head: &'a [u8],
    /// The largest end (offset plus length) the datagram may reach: 65,535
    /// less what the headers add to the length field.
    pub limit: usize,
    /// The sender's link-layer address, kept with the first fragment for the
    /// ICMP answer on expiry.
    pub link: [u8; 6],
    /// The first fragment may be answered with an ICMP error (it went to our
    /// unicast address from a unicast source).
    pub answerable: bool,
}

/// Why a fragment or its datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a multiple of 8 bytes with more to follow, or empty: the fragment.
    BadLength,
    /// The datagram would pass 65,535 bytes: the fragment.
    TooLong,
    /// Past the end set by a last fragment, or a last fragment before data
    /// held: the datagram.
    PastEnd,
    /// Two fragments overlap: the datagram (and its fragments still to come).
    Overlap,
    /// A fragment of a datagram dropped for overlapping fragments.
    AfterOverlap,
    /// More fragments than allowed: the datagram.
    TooMany,
    /// Its source holds its whole share: the datagram.
    SourceLimit,
    /// The fragment alone would not fit the memory budget: the datagram.
    Memory,
}

/// What [`Reassembler::insert`] did with a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// Kept; the datagram is not complete yet.
    Held,
    /// The same range as a fragment already held: ignored.
    Duplicate,
    /// The datagram is complete: [`Reassembler::output`] holds the first
    /// fragment's `head_len` bytes of headers, then the data.
    Complete {
        /// Bytes of headers at the start of the output.
        head_len: usize,
    },
    /// Dropped, with the reason.
    Refused(Refused),
}

/// A datagram that timed out, as [`Reassembler::expire`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// Its key.
    pub key: FragKey,
    /// Its first fragment had arrived and may be answered: the quote buffer
    /// holds it (headers, then data), for an ICMP time exceeded.
    pub answer: bool,
    /// The link-layer address the first fragment came from.
    pub link: [u8; 6],
}

/// A range of the datagram held: `off..end`, its bytes at `at` in the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    off: u32,
    end: u32,
    at: u32,
}

/// One datagram being reassembled, or a slot kept for the next one.
#[derive(Debug, Clone)]
struct Queue {
    key: FragKey,
    /// Dropped for overlapping fragments: kept, empty, until it expires, to
    /// drop the fragments still to come (RFC 5722).
    dead: bool,
    created: Instant,
    expires: Instant,
    /// The end set by the last fragment.
    end: Option<u32>,
    /// Bytes held (the ranges do not overlap).
    have: u32,
    link: [u8; 6],
    answerable: bool,
    first: bool,
    data: Vec<u8>,
    pieces: Vec<Piece>,
    head: Vec<u8>,
    /// Bytes charged.
    mem: usize,
    /// Neighbours in its family's age list.
    prev: usize,
    next: usize,
}

impl Queue {
    fn empty() -> Queue {
        Queue {
            key: FragKey::v6([0; 16], [0; 16], 0),
            dead: false,
            created: Instant::ZERO,
            expires: Instant::ZERO,
            end: None,
            have: 0,
            link: [0; 6],
            answerable: false,
            first: false,
            data: Vec::new(),
            pieces: Vec::new(),
            head: Vec::new(),
            mem: 0,
            prev: NIL,
            next: NIL,
        }
    }

    /// Bytes of its buffers.
    fn buffers(&self) -> usize {
        self.data.capacity() + self.head.capacity() + self.pieces.capacity() * size_of::<Piece>()
    }
}

/// The fixed charge per datagram: its slot and its table entry.
pub const QUEUE_COST: usize = size_of::<Queue>() + size_of::<(FragKey, usize)>() + 16;

/// The capacity a buffer of capacity `cap` grows to for `need` bytes: doubled
/// (so that appending stays amortised O(1)) up to `max`, never less than
/// `need`.
fn grown(cap: usize, need: usize, max: usize) -> usize {
    if need <= cap {
        return cap;
    }
    need.max(cap.saturating_mul(2).min(max)).max(16)
}

/// The reassembly table. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Reassembler {
    cfg: FragConfig,
    slots: Vec<Queue>,
    /// Slots without a datagram; their buffers are spare.
    free: Vec<usize>,
    by_key: HashMap<FragKey, usize, FlowHash>,
    by_source: HashMap<[u8; 16], usize, FlowHash>,
    /// Age lists (oldest first), IPv4 and IPv6: each is also in expiry order,
    /// the timeout being one per family.
    lists: [(usize, usize); 2],
    /// Bytes charged to datagrams.
    used: usize,
    /// Bytes of spare buffers in free slots.
    spare: usize,
    /// The last datagram completed.
    out: Vec<u8>,
}

impl Reassembler {
    /// An empty table with the bounds of `cfg`; `seed` keys its hash tables
    /// (so that where keys land cannot be chosen from outside).
    pub fn new(cfg: &FragConfig, seed: u64) -> Reassembler {
        let hash = FlowHash::new(&mut Rng::new(seed));
        Reassembler {
            cfg: cfg.clone(),
            slots: Vec::new(),
            free: Vec::new(),
            by_key: HashMap::with_hasher(hash),
            by_source: HashMap::with_hasher(FlowHash::new(&mut Rng::new(seed ^ 0x5352_4345))),
            lists: [(NIL, NIL); 2],
            used: 0,
            spare: 0,
            out: Vec::new(),
        }
    }

    /// Bytes held: the datagrams' buffers and fixed costs, and the spare
    /// buffers. At most [`FragConfig::high_thresh`] after every call.
    pub fn memory(&self) -> usize {
        self.used + self.spare
    }

    /// Bytes the datagrams from `src` hold.
    pub fn source_memory(&self, src: &[u8; 16]) -> usize {
        self.by_source.get(src).copied().unwrap_or(0)
    }

    /// Datagrams being reassembled (and those kept after overlapping
    /// fragments until they expire).
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// No datagram is being reassembled.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The datagram [`Insert::Complete`] reported: the first fragment's
    /// headers, then the data. Valid until the next call that takes `&mut
    /// self`.
    pub fn output(&self) -> &[u8] {
        &self.out
    }

    /// The output buffer, to patch the headers in place.
    pub fn output_mut(&mut self) -> &mut [u8] {
        &mut self.out
    }

    /// Takes the output buffer (to read it while the caller is borrowed
    /// mutably elsewhere); [`Reassembler::put_output`] gives it back.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Gives back the buffer [`Reassembler::take_output`] took, for reuse.
    pub fn put_output(&mut self, out: Vec<u8>) {
        self.out = out;
    }

    /// When the oldest datagram expires, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        let at = |head: usize| self.slots.get(head).map(|q| q.expires);
        crate::time::earliest(at(self.lists[0].0), at(self.lists[1].0))
    }

    /// Takes one fragment at `now`, counting it and what happens to it in
    /// `counters`.
    pub fn insert(&mut self, now: Instant, f: &Fragment<'_>, counters: &mut Counters) -> Insert {
        counters.ip_reasm_reqds += 1;
        let r = self.insert_inner(now, f, counters);
        if let Insert::Refused(why) = r {
            counters.ip_reasm_fails += 1;
            match why {
                Refused::BadLength => counters.ip_reasm_bad_length += 1,
                Refused::TooLong => counters.ip_reasm_too_long += 1,
                Refused::PastEnd => counters.ip_reasm_past_end += 1,
                Refused::Overlap => counters.ip_reasm_overlaps += 1,
                Refused::AfterOverlap => counters.ip_reasm_after_overlap += 1,
                Refused::TooMany => counters.ip_reasm_too_many += 1,
                Refused::SourceLimit => counters.ip_reasm_source_limit += 1,
                Refused::Memory => counters.ip_reasm_evicted += 1,
            }
        }
        match r {
            Insert::Duplicate => counters.ip_reasm_duplicates += 1,
            Insert::Complete { .. } => counters.ip_reasm_oks += 1,
            _ => {}
        }
        r
    }

    fn insert_inner(&mut self, now: Instant, f: &Fragment<'_>, counters: &mut Counters) -> Insert {
        let len = f.data.len();
        if len == 0 || (f.more && !len.is_multiple_of(8)) {
            return Insert::Refused(Refused::BadLength);
        }
        let end = f.offset.saturating_add(len);
        if end > f.limit.min(MAX_DATAGRAM) {
            return Insert::Refused(Refused::TooLong);
        }
        // Both fit 16 bits now.
        let (off, end) = (f.offset as u32, end as u32);
        let idx = match self.by_key.get(&f.key) {
            Some(&i) => i,
            None => match self.create(now, f.key, counters) {
                Ok(i) => i,
                Err(why) => return Insert::Refused(why),
            },
        };
        let Some(q) = self.slots.get(idx) else {
            return Insert::Refused(Refused::Memory);
        };
        if q.dead {
            return Insert::Refused(Refused::AfterOverlap);
        }
        let last_end = q.pieces.last().map_or(0, |p| p.end);
        // Linux's `ip_frag_queue`: a last fragment must not end before data
        // held, nor disagree with an earlier last fragment; data must not
        // reach past a known end.
        let past = if f.more {
            q.end.is_some_and(|e| end > e)
        } else {
            end < last_end || q.end.is_some_and(|e| e != end)
        };
        if past {
            self.remove(idx);
            return Insert::Refused(Refused::PastEnd);
        }
        let at = q.pieces.partition_point(|p| p.off < off);
        if let Some(p) = q.pieces.get(at)
            && p.off == off
            && p.end == end
        {
            if f.more {
                return Insert::Duplicate;
            }
            // The same range, now known to be the last: the end may complete
            // the datagram.
            if let Some(q) = self.slots.get_mut(idx) {
                q.end = Some(end);
            }
            return self.complete(idx).unwrap_or(Insert::Duplicate);
        }
        let before = at.checked_sub(1).and_then(|i| q.pieces.get(i));
        let overlap =
            before.is_some_and(|p| p.end > off) || q.pieces.get(at).is_some_and(|p| p.off < end);
        if overlap {
            self.kill(idx);
            return Insert::Refused(Refused::Overlap);
        }
        if q.pieces.len() >= self.cfg.max_fragments {
            self.remove(idx);
            return Insert::Refused(Refused::TooMany);
        }
        // What the buffers grow to, and what that costs.
        let first = off == 0;
        let data_cap = grown(q.data.capacity(), q.data.len() + len, MAX_DATAGRAM);
        let pieces_cap = grown(
            q.pieces.capacity(),
            q.pieces.len() + 1,
            self.cfg.max_fragments,
        );
        let head_cap = if first {
            q.head.capacity().max(f.head.len())
        } else {
            q.head.capacity()
        };
        let mem = QUEUE_COST + data_cap + head_cap + pieces_cap * size_of::<Piece>();
        let grow = mem.saturating_sub(q.mem);
        let src = q.key.src;
        if grow > 0 {
            if self.source_memory(&src).saturating_add(grow) > self.cfg.per_source {
                self.remove(idx);
                return Insert::Refused(Refused::SourceLimit);
            }
            if !self.make_room(grow, idx, counters) {
                self.remove(idx);
                return Insert::Refused(Refused::Memory);
            }
        }
        let Some(q) = self.slots.get_mut(idx) else {
            return Insert::Refused(Refused::Memory);
        };
        q.data.reserve_exact(data_cap.saturating_sub(q.data.len()));
        q.pieces
            .reserve_exact(pieces_cap.saturating_sub(q.pieces.len()));
        let pos = q.data.len() as u32;
        q.data.extend_from_slice(f.data);
        q.pieces.insert(at, Piece { off, end, at: pos });
        if first {
            q.head.clear();
            q.head.reserve_exact(head_cap);
            q.head.extend_from_slice(f.head);
            q.first = true;
            q.link = f.link;
            q.answerable = f.answerable;
        }
        if !f.more {
            q.end = Some(end);
        }
        q.have += end - off;
        let now_mem = QUEUE_COST + q.buffers();
        let old_mem = std::mem::replace(&mut q.mem, now_mem);
        self.charge(&src, now_mem, old_mem);
        self.complete(idx).unwrap_or(Insert::Held)
    }

    /// If datagram `idx` is complete, copies it to the output and removes it.
    fn complete(&mut self, idx: usize) -> Option<Insert> {
        let q = self.slots.get(idx)?;
        if !q.first || q.end != Some(q.have) {
            return None;
        }
        let head_len = q.head.len();
        self.out.clear();
        self.out.extend_from_slice(&q.head);
        for p in &q.pieces {
            let (a, n) = (p.at as usize, (p.end - p.off) as usize);
            self.out
                .extend_from_slice(q.data.get(a..a + n).unwrap_or_default());
        }
        self.remove(idx);
        Some(Insert::Complete { head_len })
    }

    /// Moves `src`'s and the total charge of a datagram from `old` to `new`
    /// bytes.
    fn charge(&mut self, src: &[u8; 16], new: usize, old: usize) {
        self.used = (self.used + new).saturating_sub(old);
        let e = self.by_source.entry(*src).or_insert(0);
        *e = (*e + new).saturating_sub(old);
        if *e == 0 {
            self.by_source.remove(src);
        }
    }

    /// Makes room for `grow` more bytes under the high threshold: the spare
    /// buffers first, then the oldest datagrams other than `keep`, down to the
    /// low threshold. False if even that is not enough.
    fn make_room(&mut self, grow: usize, keep: usize, counters: &mut Counters) -> bool {
        let high = self.cfg.high_thresh;
        if self.memory().saturating_add(grow) <= high {
            return true;
        }
        self.drop_spare();
        if self.memory().saturating_add(grow) <= high {
            return true;
        }
        let low = self.cfg.low_thresh.min(high);
        while self.memory().saturating_add(grow) > low {
            let Some(oldest) = self.oldest(keep) else {
                break;
            };
            let dead = self.slots.get(oldest).is_some_and(|q| q.dead);
            self.remove(oldest);
            if !dead {
                counters.ip_reasm_fails += 1;
                counters.ip_reasm_evicted += 1;
            }
            self.drop_spare();
        }
        self.memory().saturating_add(grow) <= high
    }

    /// The oldest datagram other than `keep`.
    fn oldest(&self, keep: usize) -> Option<usize> {
        let mut best: Option<(Instant, usize)> = None;
        for list in self.lists {
            let mut i = list.0;
            if i == keep {
                i = self.slots.get(i).map_or(NIL, |q| q.next);
            }
            if let Some(q) = self.slots.get(i)
                && best.is_none_or(|(t, _)| q.created < t)
            {
                best = Some((q.created, i));
            }
        }
        best.map(|(_, i)| i)
    }

    /// Frees the spare buffers.
    fn drop_spare(&mut self) {
        if self.spare == 0 {
            return;
        }
        for &i in &self.free {
            if let Some(q) = self.slots.get_mut(i) {
                q.data = Vec::new();
                q.pieces = Vec::new();
                q.head = Vec::new();
            }
        }
        self.spare = 0;
    }

    /// A new datagram for `key`, its fixed cost charged; refused when neither
    /// its source's share nor the budget has room.
    fn create(
        &mut self,
        now: Instant,
        key: FragKey,
        counters: &mut Counters,
    ) -> Result<usize, Refused> {
        if self.source_memory(&key.src).saturating_add(QUEUE_COST) > self.cfg.per_source {
            return Err(Refused::SourceLimit);
        }
        if !self.make_room(QUEUE_COST, NIL, counters) {
            return Err(Refused::Memory);
        }
        let timeout = if key.v6 {
            self.cfg.timeout_v6
        } else {
            self.cfg.timeout_v4
        };
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Queue::empty());
                self.slots.len() - 1
            }
        };
        let list = usize::from(key.v6);
        let tail = self.lists[list].1;
        let Some(q) = self.slots.get_mut(idx) else {
            return Err(Refused::Memory);
        };
        self.spare = self.spare.saturating_sub(q.buffers());
        let share = self.by_source.get(&key.src).copied().unwrap_or(0);
        if share + QUEUE_COST + q.buffers() > self.cfg.per_source {
            // Spare buffers this large would take the source past its share
            // at once: the datagram starts without them.
            q.data = Vec::new();
            q.pieces = Vec::new();
            q.head = Vec::new();
        }
        q.key = key;
        q.dead = false;
        q.created = now;
        q.expires = now + timeout;
        q.end = None;
        q.have = 0;
        q.first = false;
        q.answerable = false;
        q.mem = QUEUE_COST + q.buffers();
        q.prev = tail;
        q.next = NIL;
        let mem = q.mem;
        match self.slots.get_mut(tail) {
            Some(t) => t.next = idx,
            None => self.lists[list].0 = idx,
        }
        self.lists[list].1 = idx;
        self.by_key.insert(key, idx);
        self.charge(&key.src, mem, 0);
        Ok(idx)
    }

    /// Drops datagram `idx`'s data but keeps its entry, so that its fragments
    /// still to come are dropped too, until it expires (RFC 5722 section 4).
    fn kill(&mut self, idx: usize) {
        let Some(q) = self.slots.get_mut(idx) else {
            return;
        };
        q.dead = true;
        q.data = Vec::new();
        q.pieces = Vec::new();
        q.head = Vec::new();
        let src = q.key.src;
        let old = std::mem::replace(&mut q.mem, QUEUE_COST);
        self.charge(&src, QUEUE_COST, old);
    }

    /// Removes datagram `idx`: its buffers become spare (within a quarter of
    /// the low threshold; freed beyond).
    fn remove(&mut self, idx: usize) {
        let Some(q) = self.slots.get_mut(idx) else {
            return;
        };
        let (key, prev, next, mem) = (q.key, q.prev, q.next, q.mem);
        q.data.clear();
        q.pieces.clear();
        q.head.clear();
        q.prev = NIL;
        q.next = NIL;
        q.mem = 0;
        let keep = self.spare + q.buffers() <= self.cfg.low_thresh / 4;
        if keep {
            self.spare += q.buffers();
        } else {
            q.data = Vec::new();
            q.pieces = Vec::new();
            q.head = Vec::new();
        }
        let list = usize::from(key.v6);
        match self.slots.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.lists[list].0 = next,
        }
        match self.slots.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.lists[list].1 = prev,
        }
        if self.by_key.get(&key) == Some(&idx) {
            self.by_key.remove(&key);
        }
        self.charge(&key.src, 0, mem);
        self.free.push(idx);
    }

    /// Removes the oldest datagram due at `now`, if any, and reports it; when
    /// its first fragment had arrived and may be answered, `quote` receives
    /// that fragment (headers and data), at most `max_quote` bytes. Datagrams
    /// kept after overlapping fragments leave silently (`None` is not
    /// returned for them: the next due one is).
    pub fn expire(
        &mut self,
        now: Instant,
        quote: &mut Vec<u8>,
        max_quote: usize,
        counters: &mut Counters,
    ) -> Option<Expired> {
        loop {
            let idx = [self.lists[0].0, self.lists[1].0]
                .into_iter()
                .filter_map(|i| self.slots.get(i).map(|q| (q.expires, i)))
                .filter(|&(t, _)| t <= now)
                .min()?
                .1;
            let q = self.slots.get(idx)?;
            if q.dead {
                self.remove(idx);
                continue;
            }
            counters.ip_reasm_timeout += 1;
            counters.ip_reasm_fails += 1;
            let answer = q.first && q.answerable;
            quote.clear();
            if answer {
                quote.extend_from_slice(
                    q.head
                        .get(..q.head.len().min(max_quote))
                        .unwrap_or_default(),
                );
                if let Some(p) = q.pieces.first().filter(|p| p.off == 0) {
                    let room = max_quote.saturating_sub(quote.len());
                    let n = ((p.end - p.off) as usize).min(room);
                    let a = p.at as usize;
                    quote.extend_from_slice(q.data.get(a..a + n).unwrap_or_default());
                }
            }
            let e = Expired {
                key: q.key,
                answer,
                link: q.link,
            };
            self.remove(idx);
            return Some(e);
        }
    }
}

#[cfg(test)]
mod tests;
