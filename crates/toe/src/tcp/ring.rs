//! A byte ring of bounded logical capacity whose storage grows on demand: the
//! receive buffer.
//!
//! The receive buffer keeps in-order bytes the application has not read, and
//! out-of-order bytes are written past them ([`Ring::write_at`]) and become
//! readable when [`Ring::commit`]ted. Storage is allocated when bytes arrive,
//! doubled (keeping every byte at its place relative to the head) when more is
//! needed, up to the capacity, and given back by [`Ring::release`] once empty, so
//! an idle connection holds none. Storage comes from and returns to the
//! thread's [`pool`] cache, and is never zeroed: only the bytes written
//! are initialised (the vector's length), and only those are ever read.

use super::pool;

/// The first allocation, at least.
const MIN_STORAGE: usize = 512;

/// A byte ring holding at most `capacity` bytes.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// Storage: `size` bytes of ring, of which the first `buf.len()` are
    /// initialised (at least up to the head and the readable bytes after it).
    buf: Vec<u8>,
    /// Current storage size (at most `cap`).
    size: usize,
    head: usize,
    len: usize,
    cap: usize,
    /// The storage size when it was last released: a connection that drains
    /// between arrivals gets the same size straight away next time.
    last_size: usize,
}

impl Ring {
    /// An empty ring holding at most `capacity` bytes; allocates nothing.
    pub fn new(capacity: usize) -> Ring {
        Ring {
            buf: Vec::new(),
            size: 0,
            head: 0,
            len: 0,
            cap: capacity,
            last_size: 0,
        }
    }

    /// Bytes it can hold.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Raises the capacity to `cap` (receive-window auto-tuning); a smaller
    /// `cap` is ignored: the capacity never shrinks. Allocates nothing.
    pub fn set_capacity(&mut self, cap: usize) {
        self.cap = self.cap.max(cap);
    }

    /// Bytes of storage allocated now.
    pub fn storage(&self) -> usize {
        self.buf.capacity()
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Room left.
    pub fn free(&self) -> usize {
        self.cap - self.len
    }

    /// Grows the storage (if needed) to hold `end` bytes from the head, clamped
    /// to the capacity. The bytes keep their offsets from the head.
    fn reserve(&mut self, end: usize) {
        let size = self.size;
        if end <= size {
            return;
        }
        let new_size = end
            .checked_next_power_of_two()
            .unwrap_or(end)
            .max(MIN_STORAGE)
            .max(self.last_size)
            .min(self.cap);
        let mut grown = pool::take(new_size);
        let init = self.buf.len();
        let head = self.head.min(init);
        // Offsets from the head: [head, init) first, then (if the ring had
        // wrapped) the never-written gap up to the old end, then [0, head).
        grown.extend_from_slice(self.buf.get(head..).unwrap_or_default());
        if head > 0 {
            grown.resize(size - head, 0);
            grown.extend_from_slice(self.buf.get(..head).unwrap_or_default());
        }
        pool::give(std::mem::replace(&mut self.buf, grown));
        self.size = new_size;
        self.head = 0;
    }

    /// Gives the storage back if the ring is empty. The caller knows no
    /// out-of-order bytes sit past the end ([`Ring::write_at`] without a
    /// [`Ring::commit`]): they would be lost.
    pub fn release(&mut self) {
        if self.len == 0 && self.size > 0 {
            self.last_size = self.size;
            pool::give(std::mem::take(&mut self.buf));
            self.size = 0;
            self.head = 0;
        }
    }

    /// Writes `data` at storage position `at` (`at + data.len()` within the
    /// size), initialising what was not yet.
    fn put(&mut self, at: usize, data: &[u8]) {
        if at > self.buf.len() {
            self.buf.resize(at, 0);
        }
        let overlap = self.buf.len().saturating_sub(at).min(data.len());
        let (old, new) = data.split_at(overlap);
        if let Some(dst) = self.buf.get_mut(at..at + overlap) {
            dst.copy_from_slice(old);
        }
        self.buf.extend_from_slice(new);
    }

    /// The two slices of storage starting `offset` bytes after the head, `n` bytes
    /// in all (clamped to the storage), as (up to the end of storage, after the wrap).
    fn spans(&self, offset: usize, n: usize) -> (core::ops::Range<usize>, core::ops::Range<usize>) {
        let size = self.size;
        if size == 0 {
            return (0..0, 0..0);
        }
        let n = n.min(size);
        let start = (self.head + offset % size) % size;
        let first = n.min(size - start);
        (start..start + first, 0..n - first)
    }

    /// The readable bytes, in order, as up to two slices of storage.
    pub fn readable(&self) -> (&[u8], &[u8]) {
        let (a, b) = self.spans(0, self.len);
        (
            self.buf.get(a).unwrap_or_default(),
            self.buf.get(b).unwrap_or_default(),
        )
    }

    /// Appends as much of `data` as fits; returns how much.
    #[cfg(test)]
    pub fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        let written = self.write_at(0, data.get(..n).unwrap_or_default());
        self.len += written;
        written
    }

    /// Writes `data` starting `offset` bytes after the current end, without making it
    /// readable; as much as fits in the free space; returns how much.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let room = self.free().saturating_sub(offset);
        let n = data.len().min(room);
        if n == 0 {
            return 0;
        }
        self.reserve(self.len + offset + n);
        let (a, b) = self.spans(self.len + offset, n);
        let (da, db) = data.split_at(a.len().min(n));
        self.put(a.start, da);
        if let Some(src) = db.get(..b.len()) {
            self.put(b.start, src);
        }
        n
    }

    /// Makes `n` more bytes after the end readable (they were written by
    /// [`Ring::write_at`]); clamped to the free space.
    pub fn commit(&mut self, n: usize) {
        self.len += n.min(self.size.saturating_sub(self.len));
    }

    /// Drops `n` bytes from the front (clamped to the length).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if self.size > 0 {
            self.head = (self.head + n) % self.size;
        }
        // The head is not reset when the ring empties: out-of-order bytes may sit
        // past the end, at positions relative to it.
        self.len -= n;
    }

    /// Copies bytes starting `offset` bytes after the head into `out`; returns how
    /// many (limited by what the ring holds).
    pub fn peek(&self, offset: usize, out: &mut [u8]) -> usize {
        let n = out.len().min(self.len.saturating_sub(offset));
        let (a, b) = self.spans(offset, n);
        let (oa, ob) = out.split_at_mut(a.len().min(n));
        if let Some(src) = self.buf.get(a) {
            oa.copy_from_slice(src);
        }
        if let Some(src) = self.buf.get(b)
            && let Some(dst) = ob.get_mut(..src.len())
        {
            dst.copy_from_slice(src);
        }
        n
    }

    /// Copies from the front into `out` and consumes it; returns how many bytes.
    pub fn pop(&mut self, out: &mut [u8]) -> usize {
        let n = self.peek(0, out);
        self.consume(n);
        n
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        pool::give(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_around() {
        let mut r = Ring::new(8);
        assert_eq!(r.push(b"abcdef"), 6);
        let mut o = [0; 4];
        assert_eq!(r.pop(&mut o), 4);
        assert_eq!(&o, b"abcd");
        assert_eq!(r.push(b"ghijklmn"), 6);
        assert_eq!(r.len(), 8);
        let mut all = [0; 8];
        assert_eq!(r.peek(0, &mut all), 8);
        assert_eq!(&all, b"efghijkl");
        assert_eq!(r.peek(6, &mut all), 2);
        assert_eq!(&all[..2], b"kl");
    }

    #[test]
    fn out_of_order_then_commit() {
        let mut r = Ring::new(8);
        r.push(b"ab");
        r.consume(1);
        assert_eq!(r.write_at(2, b"EF"), 2);
        assert_eq!(r.write_at(0, b"cd"), 2);
        r.commit(4);
        let mut o = [0; 5];
        assert_eq!(r.pop(&mut o), 5);
        assert_eq!(&o, b"bcdEF");
        // Emptying the readable part keeps bytes written past it in place.
        let mut r = Ring::new(8);
        r.push(b"ab");
        r.write_at(1, b"D");
        r.consume(2);
        r.write_at(0, b"C");
        r.commit(2);
        let mut o = [0; 2];
        assert_eq!(r.pop(&mut o), 2);
        assert_eq!(&o, b"CD");
        // Past the free space nothing is written.
        assert_eq!(r.write_at(8, b"x"), 0);
        assert_eq!(Ring::new(0).push(b"x"), 0);
    }

    #[test]
    fn storage_grows_on_demand_keeping_wrapped_and_out_of_order_bytes() {
        let mut r = Ring::new(8192);
        assert_eq!(r.storage(), 0);
        let data: Vec<u8> = (0..4000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert_eq!(r.push(&data[..1000]), 1000);
        assert_eq!(r.storage(), 1024);
        r.consume(900);
        // Wraps around the end of the first allocation.
        assert_eq!(r.push(&data[1000..1500]), 500);
        assert_eq!(r.storage(), 1024);
        let (a, b) = r.readable();
        assert_eq!((a.len(), b.len()), (124, 476));
        // Out of order, past what the storage holds: it grows.
        assert_eq!(r.write_at(500, &data[2000..3000]), 1000);
        assert_eq!(r.storage(), 4096);
        assert_eq!(r.write_at(0, &data[1500..2000]), 500);
        r.commit(1500);
        let mut out = vec![0; 2100];
        assert_eq!(r.pop(&mut out), 2100);
        assert_eq!(&out[..], &data[900..3000]);
        assert!(r.is_empty());
        r.release();
        assert_eq!(r.storage(), 0);
        // Never more than the capacity (the allocation may be a larger cached
        // block).
        let mut r = Ring::new(3000);
        assert_eq!(r.push(&data), 3000);
        assert_eq!((r.len(), r.free()), (3000, 0));
        assert!(r.storage() >= 3000);
        // Not released while it holds bytes.
        r.release();
        assert!(r.storage() >= 3000);
        let mut out = vec![0; 3000];
        assert_eq!(r.pop(&mut out), 3000);
        assert_eq!(&out[..], &data[..3000]);
    }

    #[test]
    fn a_drained_ring_comes_back_at_its_last_size() {
        let mut r = Ring::new(1 << 20);
        let data = vec![5u8; 100_000];
        assert_eq!(r.push(&data), 100_000);
        let size = r.storage();
        assert!(size >= 131_072);
        r.consume(100_000);
        r.release();
        assert_eq!(r.storage(), 0);
        // One small segment after the drain: the old size at once, no regrowth.
        assert_eq!(r.push(b"x"), 1);
        assert!(r.storage() >= 131_072);
        let mut o = [0u8; 1];
        assert_eq!(r.pop(&mut o), 1);
        assert_eq!(&o, b"x");
    }

    proptest! {
        #[test]
        fn behaves_like_a_deque(ops in proptest::collection::vec((any::<bool>(), 0usize..20), 0..60)) {
            let mut r = Ring::new(16);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u8;
            for (push, n) in ops {
                if push {
                    let data: Vec<u8> = (0..n).map(|_| { next = next.wrapping_add(1); next }).collect();
                    let k = r.push(&data);
                    prop_assert_eq!(k, n.min(16 - model.len()));
                    model.extend(&data[..k]);
                } else {
                    let mut out = vec![0; n];
                    let k = r.pop(&mut out);
                    let want: Vec<u8> = model.drain(..n.min(model.len())).collect();
                    prop_assert_eq!(&out[..k], &want[..]);
                }
                prop_assert_eq!(r.len(), model.len());
            }
        }

        /// Out-of-order writes, commits, reads and releases while the storage
        /// grows from nothing (relocating wrapped and pending bytes) behave like
        /// a deque with a map of pending bytes past its end.
        #[test]
        fn grows_like_a_deque_with_pending_bytes(
            ops in proptest::collection::vec((0u8..5, 0usize..3000, 0usize..3000), 0..80)
        ) {
            let cap = 1 << 14;
            let mut r = Ring::new(cap);
            let mut model: std::collections::VecDeque<u8> = Default::default();
            // Bytes written past the end, by offset from it.
            let mut pending: std::collections::BTreeMap<usize, u8> = Default::default();
            let mut next = 0u8;
            for (op, n, off) in ops {
                let room = cap - model.len();
                match op {
                    0 | 1 => {
                        let off = if op == 0 { 0 } else { off };
                        let data: Vec<u8> = (0..n).map(|_| { next = next.wrapping_add(1); next }).collect();
                        let k = r.write_at(off, &data);
                        prop_assert_eq!(k, n.min(room.saturating_sub(off)));
                        for (i, &b) in data[..k].iter().enumerate() {
                            pending.insert(off + i, b);
                        }
                    }
                    2 => {
                        // Commit the written prefix (never unwritten bytes).
                        let mut k = 0;
                        while k < n && pending.contains_key(&k) {
                            k += 1;
                        }
                        r.commit(k);
                        let rest = pending.split_off(&k);
                        model.extend(pending.values());
                        pending = rest.into_iter().map(|(o, b)| (o - k, b)).collect();
                    }
                    3 => {
                        let mut out = vec![0; n];
                        let k = r.pop(&mut out);
                        let want: Vec<u8> = model.drain(..n.min(model.len())).collect();
                        prop_assert_eq!(&out[..k], &want[..]);
                    }
                    _ => {
                        if pending.is_empty() {
                            r.release();
                            if model.is_empty() {
                                prop_assert_eq!(r.storage(), 0);
                            }
                        }
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                let (a, b) = r.readable();
                prop_assert_eq!(a.len() + b.len(), model.len());
                prop_assert!(a.iter().chain(b).eq(model.iter()));
            }
        }
    }
}
