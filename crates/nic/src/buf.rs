//! Packet buffers with headroom, recycled through a [`Pool`].
//!
//! A [`PacketBuf`] is one contiguous, initialised byte area with the frame in the
//! middle: *headroom* before it (at least [`MIN_HEADROOM`] bytes, for outer headers
//! prepended by encapsulation and for a backend's own header such as
//! `virtio_net_hdr`), the frame, and *tailroom* after it. [`PacketBuf::prepend`]
//! and [`PacketBuf::strip_front`] move the frame's start without copying it.
//!
//! Buffers come from a [`Pool`] and go back to it when dropped, so once the pool is
//! warm the data path allocates nothing per frame: the same storage is handed out
//! again, stale bytes and all (a buffer's content past what was written is
//! unspecified). A buffer that grew past the pool's size keeps its larger capacity
//! when recycled. [`PoolStats::allocated`] counts the fresh allocations, so tests can
//! check that a warm path makes none.
//!
//! Allocating and dropping takes no lock and no atomic read-modify-write while
//! the thread's own cache of the pool's buffers has one free (alloc) or room for
//! one (drop): buffers move between those caches and the pool's shared free list
//! a batch at a time (see the `pool` module for how, and how `max_free` is kept).
//! Buffers are `Send` and may be dropped on any thread.

use std::sync::{Arc, Mutex};

mod pool;
mod shared;

use pool::PoolShared;
pub use pool::{Pool, PoolConfig, PoolStats};
pub use shared::{BOX_BATCH, BOX_CACHE, Frag, SharedBuf};

/// The least headroom a pooled buffer has: room for VXLAN over IPv6 (70 bytes) or
/// GENEVE with options in front of a frame, plus a 12-byte `virtio_net_hdr`.
pub const MIN_HEADROOM: usize = 128;

/// A [`PacketBuf`] operation that does not fit the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufError {
    /// Prepending `need` bytes with only `have` bytes of headroom.
    Headroom {
        /// Bytes asked for.
        need: usize,
        /// Headroom available.
        have: usize,
    },
    /// Stripping or truncating beyond the frame: `need` bytes of a `have`-byte frame.
    Short {
        /// Bytes asked for.
        need: usize,
        /// Frame length.
        have: usize,
    },
}

impl core::fmt::Display for BufError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BufError::Headroom { need, have } => {
                write!(f, "cannot prepend {need} bytes: {have} bytes of headroom")
            }
            BufError::Short { need, have } => {
                write!(f, "cannot take {need} bytes from a {have}-byte frame")
            }
        }
    }
}

impl std::error::Error for BufError {}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A frame in a buffer with headroom; goes back to its [`Pool`] when dropped.
///
/// Dereferences to the frame's bytes.
pub struct PacketBuf {
    /// Initialised storage; the frame is `data[start..end]`. Offsets are `u32`
    /// (storage up to 4 GiB), which keeps a buffer at 48 bytes and a frame
    /// record at 88.
    data: Vec<u8>,
    start: u32,
    end: u32,
    /// The headroom [`PacketBuf::clear`] restores.
    reserve: u32,
    /// The port of a multi-port NIC the frame came in on
    /// ([`PacketBuf::port`]); it sits in what was padding, so the buffer
    /// stays 48 bytes.
    port: u16,
    pool: Option<Arc<PoolShared>>,
}

/// An offset into a buffer's storage as stored (storage is at most 4 GiB).
#[inline(always)]
pub(crate) fn off(x: usize) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

impl core::fmt::Debug for PacketBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PacketBuf")
            .field("len", &self.len())
            .field("headroom", &self.headroom())
            .field("pooled", &self.pool.is_some())
            .finish()
    }
}

impl PacketBuf {
    /// An unpooled buffer with `headroom` bytes before the frame and room for
    /// `capacity` frame bytes (it grows past that when written to).
    pub fn with_headroom(headroom: usize, capacity: usize) -> PacketBuf {
        PacketBuf {
            data: vec![0u8; headroom + capacity],
            start: off(headroom),
            end: off(headroom),
            reserve: off(headroom),
            port: 0,
            pool: None,
        }
    }

    /// A buffer of `pool` whose frame is all of `data` (no headroom); the storage
    /// goes back to `pool` when dropped. For frames built in a `Vec` elsewhere
    /// (GRO's merged runs), taken without a copy.
    pub(crate) fn from_storage(pool: &Pool, data: Vec<u8>) -> PacketBuf {
        let mut b = PacketBuf::from_vec(data);
        b.pool = Some(Arc::clone(&pool.shared));
        b
    }

    /// An unpooled buffer whose frame is all of `data`, taken without a copy
    /// (no headroom).
    pub fn from_vec(data: Vec<u8>) -> PacketBuf {
        let end = off(data.len());
        PacketBuf {
            data,
            start: 0,
            end,
            reserve: 0,
            port: 0,
            pool: None,
        }
    }

    /// An unpooled buffer holding a copy of `frame` after [`MIN_HEADROOM`].
    pub fn from_slice(frame: &[u8]) -> PacketBuf {
        let mut b = PacketBuf::with_headroom(MIN_HEADROOM, frame.len());
        b.extend_from_slice(frame);
        b
    }

    /// Bytes of storage the buffer holds (headroom, frame, tailroom and any
    /// spare capacity): what keeping it costs.
    #[inline]
    pub fn storage(&self) -> usize {
        self.data.capacity()
    }

    /// Frame length.
    #[inline]
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// True if the frame is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// Bytes free in front of the frame.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.start as usize
    }

    /// Bytes free after the frame without growing the storage.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.data.len().saturating_sub(self.end as usize)
    }

    /// The frame.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.data
            .get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }

    /// The frame, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.data
            .get_mut(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }

    /// Extends the frame `n` bytes to the front, into the headroom, and returns
    /// those bytes (their content is unspecified: write the new header there).
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8], BufError> {
        let start = self.start as usize;
        if n > start {
            return Err(BufError::Headroom {
                need: n,
                have: start,
            });
        }
        self.start = off(start - n);
        Ok(self.data.get_mut(start - n..start).unwrap_or_default())
    }

    /// Removes `n` bytes from the front of the frame (they become headroom).
    pub fn strip_front(&mut self, n: usize) -> Result<(), BufError> {
        if n > self.len() {
            return Err(BufError::Short {
                need: n,
                have: self.len(),
            });
        }
        self.start = off(self.start as usize + n);
        Ok(())
    }

    /// Shortens the frame to `len` bytes; longer `len` is an error.
    pub fn truncate(&mut self, len: usize) -> Result<(), BufError> {
        if len > self.len() {
            return Err(BufError::Short {
                need: len,
                have: self.len(),
            });
        }
        self.end = off(self.start as usize + len);
        Ok(())
    }

    /// Appends `bytes` to the frame, growing the storage if the tailroom is short
    /// (an allocation; size pools so that it does not happen on the data path).
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.append(bytes.len()).copy_from_slice(bytes);
    }

    /// Extends the frame by `n` bytes at the end and returns them (content
    /// unspecified), growing the storage if needed.
    pub fn append(&mut self, n: usize) -> &mut [u8] {
        let old = self.end as usize;
        let new_end = old + n;
        if new_end > self.data.len() {
            self.data.resize(new_end, 0);
        }
        self.end = off(new_end);
        self.data.get_mut(old..new_end).unwrap_or_default()
    }

    /// Empties the frame and restores the original headroom (and port 0).
    pub fn clear(&mut self) {
        self.start = self.reserve;
        self.end = self.reserve;
        self.port = 0;
    }

    /// The port of a multi-port NIC ([`crate::ports::Ports`]) the frame was
    /// received on: 0 for a frame from any other NIC, and for a new or
    /// cleared buffer. An engine with several interfaces reads it as the
    /// frame's arrival interface (Linux's `skb->skb_iif`).
    #[inline]
    pub fn port(&self) -> usize {
        usize::from(self.port)
    }

    /// Sets the port [`PacketBuf::port`] reports (saturating at `u16::MAX`).
    #[inline]
    pub fn set_port(&mut self, port: usize) {
        self.port = u16::try_from(port).unwrap_or(u16::MAX);
    }

    /// Makes sure `headroom` bytes before the frame start and `len` bytes from it
    /// are initialised storage (growing it if needed), and returns that whole area
    /// with the frame start at index `headroom`. For backends that read a frame
    /// and their own header in one call; follow with [`PacketBuf::set_frame`].
    pub(crate) fn read_area(&mut self, headroom: usize, len: usize) -> &mut [u8] {
        let start = (self.reserve as usize).max(headroom);
        self.start = off(start);
        self.end = self.start;
        let need = start + len;
        if need > self.data.len() {
            self.data.resize(need, 0);
        }
        self.data
            .get_mut(start - headroom..need)
            .unwrap_or_default()
    }

    /// After [`PacketBuf::read_area`]: the frame is the `len` bytes at the
    /// area's frame start (clamped to the storage).
    pub(crate) fn set_frame(&mut self, len: usize) {
        self.end = off((self.start as usize + len).min(self.data.len()));
    }

    /// The frame and the `n` bytes of storage after it (initialised, content
    /// unspecified), or `None` if the storage is shorter. For reading headers in
    /// place with the length of a longer frame whose rest lies elsewhere.
    pub(crate) fn with_tail(&self, n: usize) -> Option<&[u8]> {
        self.data
            .get(self.start as usize..(self.end as usize).checked_add(n)?)
    }

    /// The `n` bytes of headroom just before the frame (for a backend header that
    /// goes out in the same write as the frame), or `None` if the headroom is short.
    pub(crate) fn with_header(&mut self, n: usize) -> Option<(&mut [u8], usize)> {
        let from = (self.start as usize).checked_sub(n)?;
        let end = self.end as usize;
        let len = end - from;
        Some((self.data.get_mut(from..end)?, len))
    }
}

impl core::ops::Deref for PacketBuf {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl core::ops::DerefMut for PacketBuf {
    #[inline]
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl Clone for PacketBuf {
    /// A copy of the frame in a buffer from the same pool, with the same headroom.
    fn clone(&self) -> Self {
        let mut b = match &self.pool {
            Some(shared) => Pool::alloc_in(shared),
            None => PacketBuf::with_headroom(self.reserve as usize, self.len()),
        };
        b.extend_from_slice(self.as_slice());
        b
    }
}

impl Drop for PacketBuf {
    #[inline]
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool::recycle(&mut self.data, pool);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headroom_prepend_and_strip() {
        let pool = Pool::new(PoolConfig {
            headroom: 16, // raised to the minimum
            ..PoolConfig::mtu()
        });
        let mut b = pool.alloc_from(b"payload");
        assert_eq!(b.headroom(), MIN_HEADROOM);
        b.prepend(4).unwrap().copy_from_slice(b"hdr:");
        assert_eq!(&b[..], b"hdr:payload");
        b.strip_front(4).unwrap();
        assert_eq!(&b[..], b"payload");
        assert_eq!(
            b.prepend(MIN_HEADROOM + 1),
            Err(BufError::Headroom {
                need: MIN_HEADROOM + 1,
                have: MIN_HEADROOM
            })
        );
        assert!(b.strip_front(8).is_err());
        b.truncate(3).unwrap();
        assert_eq!(&b[..], b"pay");
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.headroom(), MIN_HEADROOM);
    }

    #[test]
    fn warm_pool_allocates_nothing() {
        let pool = Pool::new(PoolConfig {
            prealloc: 8,
            ..PoolConfig::mtu()
        });
        for round in 0..100 {
            let bufs: Vec<_> = (0..8).map(|i| pool.alloc_from(&[round as u8, i])).collect();
            assert_eq!(bufs.len(), 8);
        }
        let s = pool.stats();
        assert_eq!(s.allocated, 8);
        assert_eq!(s.reused, 800);
        assert_eq!(s.free, 8);
    }

    #[test]
    fn storage_taken_and_wrapped_goes_back_to_the_pool() {
        let pool = Pool::new(PoolConfig {
            prealloc: 2,
            ..PoolConfig::mtu()
        });
        let mut data = pool.take_storage();
        assert_eq!(data.len(), MIN_HEADROOM + 2048);
        data.truncate(100); // a frame built in place, shorter than the storage
        let b = PacketBuf::from_storage(&pool, data);
        assert_eq!((b.len(), b.headroom()), (100, 0));
        assert_eq!(pool.stats().free, 1);
        drop(b);
        let s = pool.stats();
        assert_eq!((s.allocated, s.reused, s.free), (2, 1, 2));
        // Storage too small for the pool is released, not kept.
        drop(PacketBuf::from_storage(&pool, vec![0; 10]));
        assert_eq!(pool.stats().free, 2);
        // A pooled buffer's storage comes back initialised to full size.
        let a = pool.alloc();
        let c = pool.alloc();
        assert_eq!(a.tailroom() + a.headroom(), MIN_HEADROOM + 2048);
        assert_eq!(c.tailroom() + c.headroom(), MIN_HEADROOM + 2048);
        assert_eq!(pool.stats().allocated, 2);
    }

    #[test]
    fn grows_past_capacity_and_clones() {
        let pool = Pool::new(PoolConfig {
            buf_len: 4,
            ..PoolConfig::mtu()
        });
        let mut b = pool.alloc();
        b.extend_from_slice(&[1; 10]);
        assert_eq!(b.len(), 10);
        let c = b.clone();
        assert_eq!(&c[..], &b[..]);
        let u = PacketBuf::from_slice(b"abc");
        assert_eq!(&u.clone()[..], b"abc");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Prepend(usize, u8),
        Strip(usize),
        Append(Vec<u8>),
        Truncate(usize),
        Clear,
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0usize..200, any::<u8>()).prop_map(|(n, b)| Op::Prepend(n, b)),
            (0usize..200).prop_map(Op::Strip),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(Op::Append),
            (0usize..400).prop_map(Op::Truncate),
            Just(Op::Clear),
        ]
    }

    proptest::proptest! {
        /// Every operation agrees with a plain `Vec` model, and failures leave
        /// the frame as it was.
        #[test]
        fn behaves_like_a_vec(ops in proptest::collection::vec(op(), 0..40)) {
            let pool = Pool::new(PoolConfig { buf_len: 256, ..PoolConfig::mtu() });
            let mut b = pool.alloc();
            let mut model: Vec<u8> = Vec::new();
            let mut room = MIN_HEADROOM;
            for op in ops {
                match op {
                    Op::Prepend(n, v) => match b.prepend(n) {
                        Ok(h) => {
                            h.fill(v);
                            model.splice(0..0, std::iter::repeat_n(v, n));
                            room -= n;
                        }
                        Err(_) => assert!(n > room),
                    },
                    Op::Strip(n) => match b.strip_front(n) {
                        Ok(()) => {
                            model.drain(..n);
                            room += n;
                        }
                        Err(_) => assert!(n > model.len()),
                    },
                    Op::Append(v) => {
                        b.extend_from_slice(&v);
                        model.extend_from_slice(&v);
                    }
                    Op::Truncate(n) => match b.truncate(n) {
                        Ok(()) => model.truncate(n),
                        Err(_) => assert!(n > model.len()),
                    },
                    Op::Clear => {
                        b.clear();
                        model.clear();
                        room = MIN_HEADROOM;
                    }
                }
                assert_eq!(&b[..], &model[..]);
                assert_eq!(b.headroom(), room);
            }
        }
    }

    #[test]
    fn read_area_puts_the_header_in_headroom() {
        let mut b = Pool::default().alloc();
        let area = b.read_area(12, 100);
        assert_eq!(area.len(), 112);
        area[..12].copy_from_slice(&[9; 12]);
        area[12..15].copy_from_slice(b"abc");
        b.set_frame(3);
        assert_eq!(&b[..], b"abc");
        let (with, len) = b.with_header(12).unwrap();
        assert_eq!(len, 15);
        assert_eq!(&with[..12], &[9; 12]);
    }
}
