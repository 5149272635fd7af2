//! The [`Pool`] behind [`PacketBuf`]: per-thread magazines in front of a shared
//! depot, like a slab allocator's per-CPU caches (Bonwick and Adams, "Magazines
//! and Vmem", USENIX 2001).
//!
//! Each thread that allocates or drops a pool's buffers keeps a *magazine* of up
//! to `cap` free buffers for that pool in a thread-local. `alloc` pops from it and
//! dropping a buffer pushes onto it: no lock, no atomic read-modify-write. Only
//! when the magazine is empty (alloc) or full (drop) does the thread lock the
//! pool's shared *depot*, and then it moves `batch` buffers at once. A buffer
//! allocated on one thread and dropped on another goes into the dropping thread's
//! magazine, and from there to the depot a batch at a time; a thread that exits
//! hands its magazines back to the depot.
//!
//! Each buffer carries its strong reference to the pool (the `Arc` a
//! [`PacketBuf`] holds) wherever it goes, free or not, so handing one out or
//! taking it back moves that reference instead of counting it: the reference
//! count changes only when a buffer is freshly allocated or released to the
//! allocator. The depot, inside the pool, holds such references too; that cycle
//! is broken when the last [`Pool`] handle is dropped: the pool *closes*, frees
//! its depot, and from then on buffers that come back are released (no one can
//! allocate from it any more). Magazines of a closed pool on other threads are
//! freed when that thread next takes a slow path (of any pool), or exits.
//!
//! `max_free` bounds the free buffers, depot and magazines together: a magazine
//! may hold only as many buffers as its *quota*, and quotas are granted under
//! the depot lock so that the depot's buffers plus all quotas stay within
//! `max_free`. Counts a thread changes without the lock (buffers reused, buffers
//! in its magazine) are plain stores into a cache line of its own, summed by
//! [`Pool::stats`].

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::{MIN_HEADROOM, PacketBuf, lock};

/// A free buffer's storage and the pool reference it carries.
pub(super) type Slot = (Vec<u8>, Arc<PoolShared>);

/// Free buffers: their storage and, alongside, the pool reference each carries
/// (two stacks of one length rather than one of pairs: a push or pop then moves
/// each part in registers, not a pair through the stack).
#[derive(Default)]
struct Stack {
    data: Vec<Vec<u8>>,
    refs: Vec<Arc<PoolShared>>,
}

impl Stack {
    fn with_capacity(n: usize) -> Stack {
        Stack {
            data: Vec::with_capacity(n),
            refs: Vec::with_capacity(n),
        }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.data.len()
    }

    #[inline(always)]
    fn push(&mut self, data: Vec<u8>, pool: Arc<PoolShared>) {
        self.data.push(data);
        self.refs.push(pool);
    }

    #[inline(always)]
    fn pop(&mut self) -> Option<Slot> {
        let data = self.data.pop()?;
        Some((data, self.refs.pop()?))
    }

    /// Moves the top `n` (or all, if fewer) onto `to`.
    fn move_to(&mut self, to: &mut Stack, n: usize) {
        let from = self.len() - n.min(self.len());
        to.data.extend(self.data.drain(from..));
        to.refs.extend(self.refs.drain(from.min(self.refs.len())..));
    }
}

/// Largest batch moved between a magazine and the depot; a magazine holds up to
/// twice that. A window of MSS frames (a 512 KiB window is 362 of them) is
/// taken from the pool before any comes back, and a magazine smaller than that
/// runs empty and full again every window, each time through the depot's
/// lock a batch at a time: with 32 (a magazine of 64) the refills and spills
/// show in a profile of the bulk transfer with software offloads and with
/// offloads off alike (`cargo run --release --example offload_report -- --only
/// linerate-on --write 65536`). The price is what one thread can hold back from the
/// others: twice the batch, and never more than `max_free` allows.
const MAX_BATCH: usize = 256;

/// How a [`Pool`] sizes its buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConfig {
    /// Bytes in front of the frame (raised to [`MIN_HEADROOM`] if smaller).
    pub headroom: usize,
    /// Bytes for the frame itself (and any tailroom).
    pub buf_len: usize,
    /// Buffers allocated up front.
    pub prealloc: usize,
    /// Most free buffers the pool keeps; more are released to the allocator.
    pub max_free: usize,
}

impl PoolConfig {
    /// Buffers for frames up to a 1500-byte MTU with VLAN tags (2 KiB).
    pub const fn mtu() -> PoolConfig {
        PoolConfig {
            headroom: MIN_HEADROOM,
            buf_len: 2048,
            prealloc: 0,
            max_free: 4096,
        }
    }

    /// Buffers for 64 KiB super-frames.
    pub const fn super_frames() -> PoolConfig {
        PoolConfig {
            headroom: MIN_HEADROOM,
            buf_len: 65_536 + 64,
            prealloc: 0,
            max_free: 512,
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig::mtu()
    }
}

/// Counts of a [`Pool`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Buffers allocated fresh since the pool was made (prealloc included).
    pub allocated: u64,
    /// Buffers handed out again from the free ones.
    pub reused: u64,
    /// Free buffers now (in the depot and in every thread's magazine).
    pub free: usize,
}

pub(super) struct PoolShared {
    pub(super) cfg: PoolConfig,
    /// Bytes of a fresh buffer (headroom plus `buf_len`).
    size: usize,
    /// Buffers moved between a magazine and the depot at once.
    batch: usize,
    /// Most buffers a magazine holds.
    cap: usize,
    /// Live [`Pool`] handles; the pool closes when the last goes.
    handles: AtomicUsize,
    allocated: AtomicU64,
    depot: Mutex<Depot>,
}

struct Depot {
    free: Stack,
    /// The quotas of all magazines: `free.len() + lent <= max_free` (unless
    /// `prealloc` was larger).
    lent: usize,
    /// Reuses from the depot directly, and those of magazines since handed back.
    reused: u64,
    /// The counts of the magazines alive now.
    caches: Vec<Arc<CacheCounts>>,
    /// No [`Pool`] handle is left: buffers that come back are released.
    closed: bool,
}

/// A magazine's counts, written only by its thread (plain stores) and read by
/// [`Pool::stats`]; on a cache line of its own so threads do not share one.
#[derive(Default)]
#[repr(align(128))]
struct CacheCounts {
    reused: AtomicU64,
    free: AtomicUsize,
}

/// One thread's free buffers of one pool.
struct Magazine {
    pool: Arc<PoolShared>,
    bufs: Stack,
    /// Most buffers this magazine may hold now (granted by the depot).
    quota: usize,
    reused: u64,
    counts: Arc<CacheCounts>,
}

thread_local! {
    static MAGAZINES: RefCell<Vec<Magazine>> = const { RefCell::new(Vec::new()) };
}

impl PoolShared {
    /// A freshly allocated buffer.
    fn fresh(self: &Arc<Self>) -> Slot {
        self.allocated.fetch_add(1, Ordering::Relaxed);
        (vec![0u8; self.size], Arc::clone(self))
    }

    /// A free buffer (from this thread's magazine if it has one), else a fresh
    /// one. The common case is inlined whole: a pop, two plain stores.
    #[inline(always)]
    pub(super) fn take(self: &Arc<Self>) -> Slot {
        match MAGAZINES.try_with(|mags| pop_local(mags, self)) {
            Ok(Some(slot)) => slot,
            _ => self.take_slow(),
        }
    }

    /// [`PoolShared::take`] when this thread's magazine is empty or missing.
    #[cold]
    #[inline(never)]
    fn take_slow(self: &Arc<Self>) -> Slot {
        let got = MAGAZINES.try_with(|mags| {
            let mut mags = mags.try_borrow_mut().ok()?;
            Some(magazine(&mut mags, self)?.refill())
        });
        match got {
            Ok(Some(slot)) => slot,
            _ => self.take_shared(),
        }
    }

    /// [`PoolShared::take`] without a magazine (the thread is exiting).
    #[cold]
    fn take_shared(self: &Arc<Self>) -> Slot {
        let got = {
            let mut d = lock(&self.depot);
            let slot = d.free.pop();
            if slot.is_some() {
                d.reused += 1;
            }
            slot
        };
        got.unwrap_or_else(|| self.fresh())
    }

    /// [`recycle`] without a magazine.
    #[cold]
    fn put_shared((data, pool): Slot) {
        let released = {
            let mut d = lock(&pool.depot);
            if !d.closed && d.free.len() + d.lent < pool.cfg.max_free {
                d.free.push(data, Arc::clone(&pool));
                None
            } else {
                Some(data)
            }
        };
        drop(released);
    }
}

/// This thread's magazine for `pool`, made if there is none (`None` if the pool
/// is closed). For the slow paths (a batch at a time): it first hands back the
/// magazines of pools closed since, whose drop frees their buffers.
fn magazine<'a>(mags: &'a mut Vec<Magazine>, pool: &Arc<PoolShared>) -> Option<&'a mut Magazine> {
    mags.retain(|m| m.pool.handles.load(Ordering::Acquire) != 0);
    match mags.iter().position(|m| Arc::ptr_eq(&m.pool, pool)) {
        Some(i) => mags.get_mut(i),
        None => add_magazine(mags, pool),
    }
}

#[cold]
fn add_magazine<'a>(
    mags: &'a mut Vec<Magazine>,
    pool: &Arc<PoolShared>,
) -> Option<&'a mut Magazine> {
    let counts = Arc::new(CacheCounts::default());
    {
        let mut d = lock(&pool.depot);
        if d.closed {
            return None;
        }
        d.caches.push(Arc::clone(&counts));
    }
    mags.push(Magazine {
        pool: Arc::clone(pool),
        bufs: Stack::with_capacity(pool.cap),
        quota: 0,
        reused: 0,
        counts,
    });
    mags.last_mut()
}

/// [`PoolShared::take`] from this thread's magazine, if it has a buffer.
#[inline(always)]
fn pop_local(mags: &RefCell<Vec<Magazine>>, shared: &Arc<PoolShared>) -> Option<Slot> {
    let mut mags = mags.try_borrow_mut().ok()?;
    let m = mags.iter_mut().find(|m| Arc::ptr_eq(&m.pool, shared))?;
    let slot = m.bufs.pop()?;
    m.reused += 1;
    m.publish();
    Some(slot)
}

/// Takes back a buffer's storage (leaving `data` empty): into this thread's
/// magazine if it can, else the depot, else (too small, or no room, or the
/// thread is exiting) the allocator.
#[inline(always)]
pub(super) fn recycle(data: &mut Vec<u8>, pool: Arc<PoolShared>) {
    if data.capacity() < pool.size {
        return;
    }
    if let Ok(Some(pool)) = MAGAZINES.try_with(|mags| push_local(mags, data, pool)) {
        recycle_slow(data, pool);
    }
}

/// [`recycle`] into this thread's magazine if it has room; gives `pool` back
/// if not.
#[inline(always)]
fn push_local(
    mags: &RefCell<Vec<Magazine>>,
    data: &mut Vec<u8>,
    pool: Arc<PoolShared>,
) -> Option<Arc<PoolShared>> {
    if data.len() < pool.size {
        return Some(pool);
    }
    let Ok(mut mags) = mags.try_borrow_mut() else {
        return Some(pool);
    };
    match mags.iter_mut().find(|m| Arc::ptr_eq(&m.pool, &pool)) {
        Some(m) if m.bufs.len() < m.quota => {
            m.bufs.push(core::mem::take(data), pool);
            m.publish();
            None
        }
        _ => Some(pool),
    }
}

/// [`recycle`] when this thread's magazine is full or missing.
#[cold]
#[inline(never)]
fn recycle_slow(data: &mut Vec<u8>, pool: Arc<PoolShared>) {
    if data.len() < pool.size {
        // Storage that came in by `PacketBuf::from_storage`: initialise the rest.
        data.resize(pool.size, 0);
    }
    let mut slot = Some((core::mem::take(data), pool));
    let _ = MAGAZINES.try_with(|mags| {
        let Ok(mut mags) = mags.try_borrow_mut() else {
            return;
        };
        let Some(s) = slot.take() else {
            return;
        };
        match magazine(&mut mags, &s.1) {
            Some(m) if m.bufs.len() < m.quota => {
                m.bufs.push(s.0, s.1);
                m.publish();
            }
            Some(m) => m.put_slow(s),
            None => slot = Some(s),
        }
    });
    if let Some(s) = slot {
        PoolShared::put_shared(s);
    }
}

impl Magazine {
    /// Makes this magazine's counts visible to [`Pool::stats`].
    #[inline]
    fn publish(&self) {
        self.counts.free.store(self.bufs.len(), Ordering::Relaxed);
        self.counts.reused.store(self.reused, Ordering::Relaxed);
    }

    /// The magazine is empty: takes up to a batch from the depot (keeping the
    /// quota, which covers the buffers out now), else allocates.
    #[cold]
    fn refill(&mut self) -> Slot {
        {
            let mut d = lock(&self.pool.depot);
            d.free.move_to(&mut self.bufs, self.pool.batch);
            // The depot shrank by as many as the quota may grow.
            let quota = self.quota.max(self.bufs.len());
            d.lent = d.lent - self.quota + quota;
            self.quota = quota;
            self.publish();
        }
        match self.bufs.pop() {
            Some(slot) => {
                self.reused += 1;
                self.publish();
                slot
            }
            None => self.pool.fresh(),
        }
    }

    /// The magazine is at its quota: spills a batch to the depot if it is full,
    /// asks for more quota, and keeps `slot` if that left room.
    #[cold]
    fn put_slow(&mut self, slot: Slot) {
        let released = {
            let pool = &self.pool;
            let mut d = lock(&pool.depot);
            if d.closed {
                Some(slot)
            } else {
                if self.bufs.len() >= pool.cap {
                    let n = pool.batch.min(self.bufs.len());
                    self.bufs.move_to(&mut d.free, n);
                    // The quota went to the depot with the buffers.
                    self.quota -= n;
                    d.lent -= n;
                }
                let want = pool
                    .cap
                    .min(self.bufs.len() + pool.batch)
                    .saturating_sub(self.quota);
                let room = pool.cfg.max_free.saturating_sub(d.free.len() + d.lent);
                let grant = want.min(room);
                self.quota += grant;
                d.lent += grant;
                let kept = if self.bufs.len() < self.quota {
                    self.bufs.push(slot.0, slot.1);
                    None
                } else {
                    Some(slot)
                };
                self.publish();
                kept
            }
        };
        drop(released);
    }
}

impl Drop for Magazine {
    /// Hands the buffers, the quota and the counts back to the depot.
    fn drop(&mut self) {
        let bufs = core::mem::take(&mut self.bufs);
        let released = {
            let mut d = lock(&self.pool.depot);
            d.lent = d.lent.saturating_sub(self.quota);
            d.reused += self.reused;
            d.caches.retain(|c| !Arc::ptr_eq(c, &self.counts));
            if d.closed {
                bufs
            } else {
                let mut bufs = bufs;
                bufs.move_to(&mut d.free, usize::MAX);
                bufs
            }
        };
        drop(released);
    }
}

/// A shared pool of [`PacketBuf`]s (cheap to clone: clones share the buffers).
pub struct Pool {
    pub(super) shared: Arc<PoolShared>,
}

impl core::fmt::Debug for Pool {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pool")
            .field("cfg", &self.shared.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Pool {
    /// A pool with buffers sized by `cfg`.
    pub fn new(cfg: PoolConfig) -> Pool {
        let cfg = PoolConfig {
            headroom: cfg.headroom.max(MIN_HEADROOM),
            ..cfg
        };
        let batch = (cfg.max_free / 8).clamp(1, MAX_BATCH);
        let shared = Arc::new(PoolShared {
            cfg,
            size: cfg.headroom + cfg.buf_len,
            batch,
            cap: 2 * batch,
            handles: AtomicUsize::new(1),
            allocated: AtomicU64::new(cfg.prealloc as u64),
            depot: Mutex::new(Depot {
                free: Stack::with_capacity(cfg.prealloc),
                lent: 0,
                reused: 0,
                caches: Vec::new(),
                closed: false,
            }),
        });
        {
            let mut d = lock(&shared.depot);
            for _ in 0..cfg.prealloc {
                d.free.push(vec![0u8; shared.size], Arc::clone(&shared));
            }
        }
        Pool { shared }
    }

    /// The configuration (headroom raised to [`MIN_HEADROOM`]).
    pub fn config(&self) -> PoolConfig {
        self.shared.cfg
    }

    /// An empty buffer with the pool's headroom before it: recycled if one is
    /// free, else freshly allocated.
    #[inline]
    pub fn alloc(&self) -> PacketBuf {
        Pool::alloc_in(&self.shared)
    }

    /// [`Pool::alloc`] with the shared part only (for [`PacketBuf::clone`]).
    #[inline(always)]
    pub(super) fn alloc_in(shared: &Arc<PoolShared>) -> PacketBuf {
        let headroom = shared.cfg.headroom;
        let (data, pool) = shared.take();
        let at = super::off(headroom);
        PacketBuf {
            data,
            start: at,
            end: at,
            reserve: at,
            port: 0,
            pool: Some(pool),
        }
    }

    /// The storage of a buffer (recycled if one is free), for code that fills a
    /// `Vec` itself and then wraps it with [`PacketBuf::from_storage`].
    /// Makes `buf`, which the caller has just made storage-less and unpooled
    /// (`PacketBuf::from_vec(Vec::new())`), a buffer of this pool, as
    /// [`Pool::alloc`] returns one, written field by field where it lies.
    /// What `buf` held is not dropped (it holds nothing: checked in debug
    /// builds; in release, whatever it held would leak, not be freed twice).
    ///
    /// For a frame made in place (software GSO's segment heads): a buffer from
    /// [`Pool::alloc`] is assembled on the stack and moved into the frame by
    /// wide loads of narrow stores, which stall on store forwarding (perf of
    /// `cargo bench --bench gso -- sg-frames` shows it on each segment's head).
    /// Checking `buf` in release builds stalls the same way: its fields were
    /// just written by overlapping stores.
    #[inline]
    pub(crate) fn alloc_into_empty(&self, buf: &mut PacketBuf) {
        debug_assert!(buf.pool.is_none() && buf.data.capacity() == 0);
        // The slow way in a call of its own: a merge of both ways' buffers
        // would go through the stack, as `Pool::alloc`'s does.
        match MAGAZINES.try_with(|mags| pop_local(mags, &self.shared)) {
            Ok(Some((data, pool))) => self.fill(buf, data, pool),
            _ => self.alloc_into_slow(buf),
        }
    }

    #[cold]
    #[inline(never)]
    fn alloc_into_slow(&self, buf: &mut PacketBuf) {
        let (data, pool) = self.shared.take_slow();
        self.fill(buf, data, pool);
    }

    /// Puts `data` of `pool` into the storage-less, unpooled `buf`.
    #[inline(always)]
    fn fill(&self, buf: &mut PacketBuf, data: Vec<u8>, pool: Arc<PoolShared>) {
        let at = super::off(self.shared.cfg.headroom);
        // Both replaced values own nothing (see `alloc_into_empty`).
        core::mem::forget(core::mem::replace(&mut buf.data, data));
        core::mem::forget(buf.pool.replace(pool));
        buf.start = at;
        buf.end = at;
        buf.reserve = at;
        buf.port = 0;
    }

    pub(crate) fn take_storage(&self) -> Vec<u8> {
        self.shared.take().0
    }

    /// A buffer holding a copy of `frame`.
    #[inline]
    pub fn alloc_from(&self, frame: &[u8]) -> PacketBuf {
        let mut b = self.alloc();
        b.extend_from_slice(frame);
        b
    }

    /// Allocation counts. Exact when no other thread is using the pool at the
    /// same time; a snapshot otherwise.
    pub fn stats(&self) -> PoolStats {
        let d = lock(&self.shared.depot);
        let (mut reused, mut free) = (d.reused, d.free.len());
        for c in &d.caches {
            reused += c.reused.load(Ordering::Relaxed);
            free += c.free.load(Ordering::Relaxed);
        }
        PoolStats {
            allocated: self.shared.allocated.load(Ordering::Relaxed),
            reused,
            free,
        }
    }
}

impl Clone for Pool {
    fn clone(&self) -> Pool {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Pool {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Drop for Pool {
    /// The last handle closes the pool: its free buffers are released (this
    /// thread's magazine's now, other threads' when they next look).
    fn drop(&mut self) {
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) != 1 {
            return;
        }
        let _ = MAGAZINES.try_with(|mags| {
            if let Ok(mut mags) = mags.try_borrow_mut() {
                mags.retain(|m| !Arc::ptr_eq(&m.pool, &self.shared));
            }
        });
        let freed = {
            let mut d = lock(&self.shared.depot);
            d.closed = true;
            core::mem::take(&mut d.free)
        };
        drop(freed);
    }
}

impl Default for Pool {
    fn default() -> Self {
        Pool::new(PoolConfig::default())
    }
}
