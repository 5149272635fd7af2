//! A fixed-capacity byte ring: the staging buffer between an application task and
//! a queue thread, one per direction of a stream.
//!
//! Readers and writers see the contents as at most two slices, so data moves with
//! one `copy_from_slice` per slice. The storage is allocated at the first write,
//! never before and nothing after: a stream that carries no data in one
//! direction (or none at all, an idle connection) holds no buffer for it.

/// A ring of bytes with a fixed capacity.
#[derive(Debug)]
pub(crate) struct ByteRing {
    /// Empty until the first write, then `cap` bytes.
    buf: Box<[u8]>,
    cap: usize,
    head: usize,
    len: usize,
}

impl ByteRing {
    /// An empty ring holding at most `cap` bytes (at least 1).
    pub(crate) fn new(cap: usize) -> ByteRing {
        ByteRing {
            buf: Box::default(),
            cap: cap.max(1),
            head: 0,
            len: 0,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// True once the ring has its storage.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> bool {
        !self.buf.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn free(&self) -> usize {
        self.capacity() - self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stored bytes, oldest first, as two slices (the second may be empty).
    pub(crate) fn readable(&self) -> (&[u8], &[u8]) {
        let cap = self.capacity();
        let first = self.len.min(cap - self.head);
        let (before, from_head) = self.buf.split_at(self.head);
        let a = from_head.get(..first).unwrap_or_default();
        let b = before.get(..self.len - first).unwrap_or_default();
        (a, b)
    }

    /// Doubles the capacity, up to `max`, after a call that moved `moved`
    /// bytes in or out, if that was half the capacity or more (see
    /// `RuntimeConfig::stream_buffer_max`); true if it grew. The contents
    /// stay, in order.
    pub(crate) fn grow_after(&mut self, moved: usize, max: usize) -> bool {
        let cap = self.capacity();
        if 2 * moved < cap || cap >= max {
            return false;
        }
        let new_cap = cap.saturating_mul(2).min(max);
        if !self.buf.is_empty() {
            let mut buf = vec![0u8; new_cap].into_boxed_slice();
            let (a, b) = self.readable();
            let (first, rest) = buf.split_at_mut(a.len());
            first.copy_from_slice(a);
            if let Some(second) = rest.get_mut(..b.len()) {
                second.copy_from_slice(b);
            }
            self.buf = buf;
            self.head = 0;
        }
        self.cap = new_cap;
        true
    }

    /// Forgets the `n` oldest bytes (at most all of them).
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) % self.capacity();
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
    }

    /// The first contiguous free area (empty when the ring is full); fill it, then
    /// call [`ByteRing::produce`].
    pub(crate) fn writable(&mut self) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = vec![0u8; self.cap].into_boxed_slice();
        }
        let cap = self.capacity();
        let tail = (self.head + self.len) % cap;
        let end = if tail >= self.head && self.len < cap {
            cap
        } else {
            self.head
        };
        let n = if self.len == cap { 0 } else { end - tail };
        self.buf.get_mut(tail..tail + n).unwrap_or_default()
    }

    /// Counts `n` bytes written into [`ByteRing::writable`] as stored.
    pub(crate) fn produce(&mut self, n: usize) {
        self.len = (self.len + n).min(self.capacity());
    }

    /// Copies as much of `data` as fits; returns how much.
    pub(crate) fn write(&mut self, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let rest = data.get(done..).unwrap_or_default();
            let area = self.writable();
            let n = area.len().min(rest.len());
            if n == 0 {
                break;
            }
            if let (Some(dst), Some(src)) = (area.get_mut(..n), rest.get(..n)) {
                dst.copy_from_slice(src);
            }
            self.produce(n);
            done += n;
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::ByteRing;

    fn contents(r: &ByteRing) -> Vec<u8> {
        let (a, b) = r.readable();
        [a, b].concat()
    }

    #[test]
    fn storage_comes_with_the_first_write() {
        let mut r = ByteRing::new(1 << 20);
        assert!(!r.allocated());
        assert_eq!(
            (r.len(), r.free(), r.readable()),
            (0, 1 << 20, (&[][..], &[][..]))
        );
        r.consume(5);
        assert!(!r.allocated());
        assert_eq!(r.write(b"x"), 1);
        assert!(r.allocated());
        assert_eq!(contents(&r), b"x");
    }

    #[test]
    fn grows_after_a_call_that_moves_half_of_it_keeping_the_order() {
        let mut r = ByteRing::new(8);
        // A small call leaves it alone; so does the limit.
        assert!(!r.grow_after(3, 64));
        assert!(!r.grow_after(8, 8));
        assert_eq!(r.capacity(), 8);
        // Not allocated yet: only the capacity changes.
        assert!(r.grow_after(4, 12));
        assert_eq!((r.capacity(), r.allocated()), (12, false));
        // Wrapped contents come out in order after growing.
        assert_eq!(r.write(b"abcdefghijkl"), 12);
        r.consume(7);
        assert_eq!(r.write(b"mnopq"), 5);
        assert_eq!(contents(&r), b"hijklmnopq");
        assert!(r.grow_after(10, 64));
        assert_eq!((r.capacity(), r.free()), (24, 14));
        assert_eq!(contents(&r), b"hijklmnopq");
        assert_eq!(r.write(b"rstuvwxyz0123456"), 14);
        assert_eq!(contents(&r), b"hijklmnopqrstuvwxyz01234");
    }

    #[test]
    fn wraps_and_keeps_order() {
        let mut r = ByteRing::new(8);
        assert_eq!(r.write(b"abcdef"), 6);
        r.consume(4);
        assert_eq!(r.write(b"ghijklmn"), 6, "only 6 free");
        assert_eq!(r.free(), 0);
        assert!(r.writable().is_empty());
        assert_eq!(contents(&r), b"efghijkl");
        r.consume(3);
        assert_eq!(contents(&r), b"hijkl");
        assert_eq!(r.writable().len(), 3);
        r.consume(100);
        assert!(r.is_empty());
        assert_eq!(r.writable().len(), 8);
    }

    #[test]
    fn matches_a_model() {
        let mut r = ByteRing::new(13);
        let mut model = std::collections::VecDeque::new();
        let mut x = 1u32;
        for step in 0..2000u32 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let n = (x >> 16) as usize % 9;
            if step % 2 == 0 {
                let data: Vec<u8> = (0..n).map(|i| (step as usize + i) as u8).collect();
                let took = r.write(&data);
                model.extend(&data[..took]);
            } else {
                r.consume(n);
                for _ in 0..n.min(model.len()) {
                    model.pop_front();
                }
            }
            assert_eq!(contents(&r), model.iter().copied().collect::<Vec<_>>());
            assert_eq!(r.len() + r.free(), 13);
        }
    }
}
