//! A fixed-capacity byte ring: the storage of the send and receive buffers.
//!
//! The send buffer keeps bytes from SND.UNA to the end of what the application
//! wrote; the receive buffer keeps in-order bytes the application has not read,
//! and out-of-order bytes are written past them ([`Ring::write_at`]) and become
//! readable when [`Ring::commit`]ted. Nothing here allocates after creation.

/// A byte ring of fixed capacity.
#[derive(Debug, Clone)]
pub struct Ring {
    buf: Vec<u8>,
    head: usize,
    len: usize,
}

impl Ring {
    /// An empty ring holding at most `capacity` bytes.
    pub fn new(capacity: usize) -> Ring {
        Ring {
            buf: vec![0; capacity],
            head: 0,
            len: 0,
        }
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
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
        self.capacity() - self.len
    }

    /// The two slices of storage starting `offset` bytes after the head, `n` bytes
    /// in all (clamped to the capacity), as (up to the end of storage, after the wrap).
    fn spans(&self, offset: usize, n: usize) -> (core::ops::Range<usize>, core::ops::Range<usize>) {
        let cap = self.capacity();
        if cap == 0 {
            return (0..0, 0..0);
        }
        let n = n.min(cap);
        let start = (self.head + offset % cap) % cap;
        let first = n.min(cap - start);
        (start..start + first, 0..n - first)
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
        self.len += n.min(self.free());
    }

    /// Drops `n` bytes from the front (clamped to the length).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if self.capacity() > 0 {
            self.head = (self.head + n) % self.capacity();
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
