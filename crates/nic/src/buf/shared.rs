//! [`SharedBuf`]: a [`PacketBuf`] shared by reference, the payload store of
//! scatter-gather frames (as Linux's skb frags share pages).
//!
//! A super-frame that software GSO cuts into segments becomes one `SharedBuf`;
//! so does a chunk of a TCP send buffer ([`SharedBuf::from_bytes`]: a
//! [`Bytes`]), which the frames sent from it reference instead of copying it,
//! as Linux's `tcp_sendmsg` fills pages that skbs then point into;
//! each segment is a small header buffer plus a [`Frag`] naming the range of the
//! shared buffer that is its payload. Cloning a `SharedBuf` counts a reference
//! (one atomic increment); the buffer goes back to its [`crate::Pool`] when the
//! last reference is dropped, on whatever thread that happens.
//!
//! The reference-counted box around the buffer is recycled too, as the pool
//! recycles buffers: when the last reference goes, the box (now empty) is kept
//! in a per-thread cache of up to [`BOX_CACHE`], and [`SharedBuf::new`] takes
//! one from there before it allocates. Boxes move between the thread caches
//! and a shared depot [`BOX_BATCH`] at a time (one lock per batch, none per
//! frame), so a box released on a thread that makes none (the receiver's, when
//! sender and receiver run on threads of their own) finds its way back to the
//! thread that makes them. A warm path allocates no box
//! ([`SharedBuf::boxes_allocated`]).

use super::{PacketBuf, lock};
use bytes::Bytes;
use core::num::NonZeroU32;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Most empty boxes each thread keeps for reuse.
pub const BOX_CACHE: usize = 64;

/// Boxes moved between a thread's cache and the shared depot at once.
pub const BOX_BATCH: usize = BOX_CACHE / 2;

/// Most empty boxes the shared depot keeps (more are freed).
const DEPOT_MAX: usize = 1024;

/// What a [`SharedBuf`] shares: a pool's buffer, or bytes another owner holds.
enum Store {
    Packet(PacketBuf),
    Bytes(Bytes),
}

impl Store {
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Store::Packet(b) => b.as_slice(),
            Store::Bytes(b) => b,
        }
    }
}

thread_local! {
    static BOXES: RefCell<Vec<Arc<Store>>> = const { RefCell::new(Vec::new()) };
}

/// Empty boxes shared between threads.
static DEPOT: Mutex<Vec<Arc<Store>>> = Mutex::new(Vec::new());

/// Boxes allocated fresh, all threads.
static ALLOCATED: AtomicU64 = AtomicU64::new(0);

/// An empty box from this thread's cache, refilled from the depot when empty.
fn take_box() -> Option<Arc<Store>> {
    BOXES
        .try_with(|c| {
            let mut c = c.try_borrow_mut().ok()?;
            if c.is_empty() {
                let mut d = lock(&DEPOT);
                let from = d.len().saturating_sub(BOX_BATCH);
                c.extend(d.drain(from..));
            }
            c.pop()
        })
        .ok()
        .flatten()
}

/// Keeps the empty box `arc` in this thread's cache, moving a batch to the
/// depot first when the cache is full (freeing it if the depot is full too).
fn keep_box(arc: Arc<Store>) {
    let _ = BOXES.try_with(|c| {
        let Ok(mut c) = c.try_borrow_mut() else {
            return;
        };
        if c.len() >= BOX_CACHE {
            let from = c.len() - BOX_BATCH;
            let mut d = lock(&DEPOT);
            if d.len() + BOX_BATCH <= DEPOT_MAX {
                d.extend(c.drain(from..));
            } else {
                drop(d);
                c.truncate(from);
            }
        }
        c.push(arc);
    });
}

/// An empty, unpooled buffer (no storage: making or dropping it allocates nothing).
fn empty() -> PacketBuf {
    PacketBuf::from_vec(Vec::new())
}

/// A [`PacketBuf`] (or [`Bytes`]) shared by reference counting; read-only while
/// shared.
///
/// Dereferences to the buffer's frame bytes.
pub struct SharedBuf {
    /// Always `Some` until dropped (an `Option` so that `Drop` can move the box
    /// into the cache).
    inner: Option<Arc<Store>>,
}

impl core::fmt::Debug for SharedBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedBuf")
            .field("len", &self.len())
            .field("refs", &self.ref_count())
            .finish()
    }
}

impl SharedBuf {
    /// Shares `buf` (in a recycled box when one is free, see the module docs).
    pub fn new(buf: PacketBuf) -> SharedBuf {
        SharedBuf::boxed(Store::Packet(buf))
    }

    /// Shares `bytes` (in a recycled box, as [`SharedBuf::new`]): a reference
    /// to memory another owner manages, such as a chunk of a send buffer. The
    /// bytes are released (one reference of `Bytes` dropped) with the last
    /// reference; [`SharedBuf::try_unwrap`] never yields them.
    pub fn from_bytes(bytes: Bytes) -> SharedBuf {
        SharedBuf::boxed(Store::Bytes(bytes))
    }

    fn boxed(store: Store) -> SharedBuf {
        let inner = match take_box() {
            Some(mut arc) => match Arc::get_mut(&mut arc) {
                Some(slot) => {
                    *slot = store;
                    arc
                }
                // Cannot happen: only unique boxes are kept.
                None => SharedBuf::fresh(store),
            },
            None => SharedBuf::fresh(store),
        };
        SharedBuf { inner: Some(inner) }
    }

    fn fresh(store: Store) -> Arc<Store> {
        ALLOCATED.fetch_add(1, Ordering::Relaxed);
        Arc::new(store)
    }

    /// Boxes allocated fresh so far, by every thread of the process: a warm data
    /// path makes none.
    pub fn boxes_allocated() -> u64 {
        ALLOCATED.load(Ordering::Relaxed)
    }

    /// The shared bytes (the buffer's frame).
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.inner.as_deref().map_or(&[], Store::as_slice)
    }

    /// Length of the shared bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// True if there are no shared bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// References to the buffer now (this one included).
    pub fn ref_count(&self) -> usize {
        self.inner.as_ref().map_or(0, Arc::strong_count)
    }

    /// True if `self` and `other` share one buffer.
    #[inline]
    pub fn same(&self, other: &SharedBuf) -> bool {
        match (&self.inner, &other.inner) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The buffer itself if this is the only reference to a [`PacketBuf`], else
    /// `self` back (always for shared [`Bytes`]).
    pub fn try_unwrap(mut self) -> Result<PacketBuf, SharedBuf> {
        let Some(arc) = self.inner.as_mut() else {
            return Err(self);
        };
        match Arc::get_mut(arc) {
            Some(Store::Packet(buf)) => Ok(core::mem::replace(buf, empty())),
            _ => Err(self),
        }
    }
}

impl Clone for SharedBuf {
    /// Another reference to the same buffer (no copy).
    #[inline]
    fn clone(&self) -> Self {
        SharedBuf {
            inner: self.inner.clone(),
        }
    }
}

impl core::ops::Deref for SharedBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl Drop for SharedBuf {
    /// Inline, the last reference's work out of line: most drops (a segment's
    /// fragment of a send-buffer chunk, say) let go of one reference of many,
    /// and made in a call of their own they paid its frame for the last one's
    /// work too.
    #[inline]
    fn drop(&mut self) {
        let Some(arc) = self.inner.take() else {
            return;
        };
        // Not the last reference (the common case, one load): just let go.
        // `get_mut` in `release` decides for certain when this looks like
        // the last.
        if Arc::strong_count(&arc) > 1 {
            return;
        }
        release(arc);
    }
}

/// The last reference to `arc` (if it is: else just dropped): the buffer goes
/// back to its pool now, and the box, empty, into this thread's cache.
#[cold]
#[inline(never)]
fn release(mut arc: Arc<Store>) {
    let Some(store) = Arc::get_mut(&mut arc) else {
        return;
    };
    drop(core::mem::replace(store, Store::Packet(empty())));
    keep_box(arc);
}

/// A payload fragment of a scatter-gather frame: `len` bytes at `off` in a
/// [`SharedBuf`] (a range checked when made, so reading it cannot fail). Never
/// empty, so an `Option<Frag>` is as small as a `Frag` (16 bytes).
#[derive(Debug, Clone)]
pub struct Frag {
    buf: SharedBuf,
    off: u32,
    len: NonZeroU32,
}

impl Frag {
    /// The `len` bytes at `off` of `buf`, or `None` if they are not all in it or
    /// `len` is 0.
    ///
    /// Always inlined: made out of line, its result comes back through memory
    /// as three narrow stores that the caller reads as one 16-byte load, which
    /// waits on store forwarding (perf of `cargo bench --bench gso --
    /// sg-frames` shows it on each segment's commit).
    #[inline(always)]
    pub fn new(buf: SharedBuf, off: usize, len: usize) -> Option<Frag> {
        let end = off.checked_add(len)?;
        if end > buf.len() {
            return None;
        }
        Some(Frag {
            buf,
            off: u32::try_from(off).ok()?,
            len: NonZeroU32::new(u32::try_from(len).ok()?)?,
        })
    }

    /// Another reference to `len` of this fragment's bytes from `from` on, or
    /// `None` if they are not all in it or `len` is 0.
    ///
    /// The range is checked before the buffer is shared, so nothing is made
    /// and dropped when it is out of bounds: made so, the new fragment goes
    /// where it is put in registers, where [`Frag::new`] with a clone builds
    /// it on the stack first, by narrow stores that its copy, one wide load,
    /// then waits on (software GSO's per-segment reference, in perf).
    #[inline(always)]
    pub fn slice(&self, from: usize, len: usize) -> Option<Frag> {
        let end = from.checked_add(len)?;
        if end > self.len() {
            return None;
        }
        let off = u32::try_from(self.offset() + from).ok()?;
        let len = NonZeroU32::new(u32::try_from(len).ok()?)?;
        Some(Frag {
            buf: self.buf.clone(),
            off,
            len,
        })
    }

    /// Grows this fragment by `next` if `next` continues it: the bytes right
    /// after it in the same buffer. True if it did (then `next` is not needed
    /// to hold those bytes); false, changing nothing, if `next` lies elsewhere
    /// or the length would not fit a fragment's.
    #[inline]
    pub fn extend(&mut self, next: &Frag) -> bool {
        let continues = self.buf.same(&next.buf)
            && u64::from(self.off) + u64::from(self.len.get()) == u64::from(next.off);
        match self.len.checked_add(next.len.get()) {
            Some(len) if continues => {
                self.len = len;
                true
            }
            _ => false,
        }
    }

    /// The fragment's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        let off = self.off as usize;
        self.buf.get(off..off + self.len()).unwrap_or_default()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len.get() as usize
    }

    /// Always false: a fragment has at least one byte.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Where the fragment starts in its buffer.
    #[inline]
    pub fn offset(&self) -> usize {
        self.off as usize
    }

    /// The shared buffer the fragment points into.
    #[inline]
    pub fn shared(&self) -> &SharedBuf {
        &self.buf
    }

    /// The shared buffer, and where the fragment lies in it (offset, length).
    #[inline]
    pub fn into_parts(self) -> (SharedBuf, usize, usize) {
        let (off, len) = (self.off as usize, self.len());
        (self.buf, off, len)
    }
}

impl AsRef<[u8]> for Frag {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::buf::{Pool, PoolConfig};

    #[test]
    fn last_reference_returns_the_buffer_to_its_pool() {
        let pool = Pool::new(PoolConfig::mtu());
        let s = SharedBuf::new(pool.alloc_from(b"0123456789"));
        assert_eq!(pool.stats().free, 0);
        let a = Frag::new(s.clone(), 2, 3).unwrap();
        let b = Frag::new(s.clone(), 5, 5).unwrap();
        assert!(Frag::new(s.clone(), 6, 5).is_none());
        assert!(Frag::new(s.clone(), usize::MAX, 2).is_none());
        assert!(Frag::new(s.clone(), 3, 0).is_none());
        assert_eq!((a.bytes(), b.bytes()), (&b"234"[..], &b"56789"[..]));
        let c = b.slice(1, 3).unwrap();
        assert_eq!((c.bytes(), c.offset()), (&b"678"[..], 6));
        assert!(b.slice(3, 3).is_none() && b.slice(2, 0).is_none());
        assert!(b.slice(usize::MAX, 1).is_none());
        assert_eq!(s.ref_count(), 4);
        drop(c);
        // Growing by what follows in the same buffer; nothing else.
        let mut g = Frag::new(s.clone(), 0, 2).unwrap();
        assert!(!g.extend(&b), "a gap");
        assert!(
            !Frag::new(s.clone(), 1, 2).unwrap().extend(&a),
            "an overlap"
        );
        assert!(g.extend(&a) && g.bytes() == b"01234");
        assert!(g.extend(&b) && g.bytes() == b"0123456789");
        let other = SharedBuf::new(PacketBuf::from_slice(b"0123456789"));
        let mut h = Frag::new(other, 0, 5).unwrap();
        assert!(!h.extend(&b), "another buffer");
        assert_eq!(h.bytes(), b"01234");
        drop((g, h));
        assert_eq!(s.ref_count(), 3);
        assert!(a.shared().same(&s));
        drop(s);
        drop(a);
        assert_eq!(pool.stats().free, 0, "still referenced by b");
        assert_eq!(b.bytes(), b"56789");
        drop(b);
        assert_eq!(pool.stats().free, 1);
    }

    #[test]
    fn shared_bytes_are_released_with_the_last_reference() {
        let mut owner = bytes::BytesMut::with_capacity(64);
        owner.extend_from_slice(b"0123456789");
        let bytes = owner.split().freeze();
        let probe = bytes.clone();
        let s = SharedBuf::from_bytes(bytes);
        let a = Frag::new(s.clone(), 3, 4).unwrap();
        assert_eq!(a.bytes(), b"3456");
        assert_eq!(a.bytes().as_ptr(), probe[3..].as_ptr(), "no copy");
        assert!(Frag::new(s.clone(), 8, 3).is_none());
        // The owner writes on past what is shared, in its own part.
        owner.extend_from_slice(b"abc");
        assert_eq!(&owner[..], b"abc");
        drop(owner);
        let s = s.try_unwrap().unwrap_err();
        drop(s);
        assert!(!probe.is_unique(), "a fragment still holds the bytes");
        drop(a);
        assert!(probe.is_unique(), "the last reference let go of the bytes");
    }

    #[test]
    fn boxes_are_recycled_on_the_thread() {
        let pool = Pool::new(PoolConfig::mtu());
        let first = SharedBuf::new(pool.alloc_from(b"x"));
        let addr = Arc::as_ptr(first.inner.as_ref().unwrap());
        drop(first);
        let again = SharedBuf::new(pool.alloc_from(b"yz"));
        assert_eq!(Arc::as_ptr(again.inner.as_ref().unwrap()), addr);
        assert_eq!(&again[..], b"yz");
        let buf = again.try_unwrap().unwrap();
        assert_eq!(&buf[..], b"yz");
        let s = SharedBuf::new(buf);
        let t = s.clone();
        let s = s.try_unwrap().unwrap_err();
        drop(t);
        assert_eq!(&s.try_unwrap().unwrap()[..], b"yz");
    }
}
