//! A byte ring of fixed logical capacity whose storage grows on demand: the
//! receive buffer.
//!
//! The receive buffer keeps in-order bytes the application has not read, and
//! out-of-order bytes are written past them ([`Ring::write_at`]) and become
//! readable when [`Ring::commit`]ted. Storage is allocated when bytes arrive,
//! doubled (keeping every byte at its place relative to the head) when more is
//! needed, up to the capacity, and given back by [`Ring::release`] once empty, so
//! an idle connection holds none.

/// The first allocation, at least (small: zeroed, and served from the
/// allocator's per-thread cache).
const MIN_STORAGE: usize = 512;

/// A byte ring holding at most `capacity` bytes.
#[derive(Debug, Clone, Default)]
pub struct Ring {
    /// Storage; its length is the current size (at most `cap`).
    buf: Vec<u8>,
    head: usize,
    len: usize,
    cap: usize,
}

impl Ring {
    /// An empty ring holding at most `capacity` bytes; allocates nothing.
    pub fn new(capacity: usize) -> Ring {
        Ring {
            buf: Vec::new(),
            head: 0,
            len: 0,
            cap: capacity,
        }
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Bytes of storage allocated now.
    pub fn storage(&self) -> usize {
        self.buf.len()
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
        let size = self.buf.len();
        if end <= size {
            return;
        }
        let new_size = end
            .checked_next_power_of_two()
            .unwrap_or(end)
            .max(MIN_STORAGE)
            .min(self.cap);
        let mut grown = vec![0; new_size];
        let (a, b) = self.buf.split_at(self.head.min(size));
        if let Some(dst) = grown.get_mut(..b.len()) {
            dst.copy_from_slice(b);
        }
        if let Some(dst) = grown.get_mut(b.len()..size) {
            dst.copy_from_slice(a);
        }
        self.buf = grown;
        self.head = 0;
    }

    /// Gives the storage back if the ring is empty. The caller knows no
    /// out-of-order bytes sit past the end ([`Ring::write_at`] without a
    /// [`Ring::commit`]): they would be lost.
    pub fn release(&mut self) {
        if self.len == 0 {
            self.buf = Vec::new();
            self.head = 0;
        }
    }

    /// The two slices of storage starting `offset` bytes after the head, `n` bytes
    /// in all (clamped to the storage), as (up to the end of storage, after the wrap).
    fn spans(&self, offset: usize, n: usize) -> (core::ops::Range<usize>, core::ops::Range<usize>) {
        let size = self.buf.len();
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
        if let Some(dst) = self.buf.get_mut(a) {
            dst.copy_from_slice(da);
        }
        if let Some(dst) = self.buf.get_mut(b)
            && let Some(src) = db.get(..dst.len())
        {
            dst.copy_from_slice(src);
        }
        n
    }

    /// Makes `n` more bytes after the end readable (they were written by
    /// [`Ring::write_at`]); clamped to the free space.
    pub fn commit(&mut self, n: usize) {
        self.len += n.min(self.buf.len().saturating_sub(self.len));
    }

    /// Drops `n` bytes from the front (clamped to the length).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if !self.buf.is_empty() {
            self.head = (self.head + n) % self.buf.len();
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
        // Never more than the capacity.
        let mut r = Ring::new(3000);
        assert_eq!(r.push(&data), 3000);
        assert_eq!(r.storage(), 3000);
        // Not released while it holds bytes.
        r.release();
        assert_eq!(r.storage(), 3000);
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
    }
}
