//! The send buffer: a queue of byte chunks from SND.UNA to the end of what the
//! application wrote, holding at most a configured number of bytes.
//!
//! Storage follows the data: an idle connection holds no buffer at all. Bytes
//! copied in ([`SendBuf::push`]) fill a growing tail chunk; buffers handed over
//! whole ([`SendBuf::push_bytes`], the zero-copy send) are queued as they are,
//! by reference, and never copied until output copies them into a frame
//! ([`SendBuf::peek`]). Output over a NIC that takes scatter-gather frames
//! copies nothing: the frame references the bytes where they lie
//! ([`SendBuf::frags`]), as Linux's skbs point into the pages `tcp_sendmsg`
//! filled. Acknowledged bytes are dropped from the front
//! ([`SendBuf::consume`]), and a chunk's memory goes back to the allocator (or
//! to its owner) as soon as its last byte is acknowledged; the smallest tail
//! chunk goes to the per-thread cache (`tcp::pool`) instead, for the next
//! connection's first write.

use bytes::{Buf, Bytes, BytesMut};
use linerate_nic::{Frag, Frags, SharedBuf};
use linerate_wire::checksum;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Smallest tail chunk allocated for copied bytes: taken from and given back to
/// the per-thread cache (`tcp::pool`), as every connection that writes a
/// little needs one.
const MIN_CHUNK: usize = super::pool::CHUNK;

/// Largest tail chunk allocated for copied bytes when less is asked for: the
/// tail grows geometrically with the bytes queued, up to this.
const MAX_CHUNK: usize = 64 * 1024;

/// Handed-over buffers shorter than this are copied into the tail instead of
/// being queued: a chunk costs a queue entry and a walk in [`SendBuf::peek`],
/// which is more than copying a few hundred bytes.
pub const COPY_BELOW: usize = 512;

/// Bytes queued for sending, up to a fixed capacity.
#[derive(Debug, Default)]
pub struct SendBuf {
    /// Sealed chunks, oldest first; none is empty.
    chunks: VecDeque<Bytes>,
    /// The chunk being filled by copies; after every sealed chunk.
    tail: BytesMut,
    /// Bytes held (chunks and tail).
    len: usize,
    /// Bytes it may hold.
    cap: usize,
    /// Where the last [`SendBuf::peek`] ended: the chunk's index and the offset
    /// of its first byte from the front. Output reads forward, so the next peek
    /// starts there instead of walking from the front. Atomics (relaxed: plain
    /// loads and stores) rather than a `Cell`, so the buffer stays `Sync`.
    cursor_idx: AtomicUsize,
    cursor_start: AtomicUsize,
}

/// A copy holding the same bytes (sealed chunks shared, the tail copied), for
/// a test or fuzz harness that clones a prepared engine.
impl Clone for SendBuf {
    fn clone(&self) -> SendBuf {
        SendBuf {
            chunks: self.chunks.clone(),
            tail: self.tail.clone(),
            len: self.len,
            cap: self.cap,
            cursor_idx: AtomicUsize::new(self.cursor_idx.load(Relaxed)),
            cursor_start: AtomicUsize::new(self.cursor_start.load(Relaxed)),
        }
    }
}

impl SendBuf {
    /// An empty buffer holding at most `capacity` bytes; allocates nothing.
    pub fn new(capacity: usize) -> SendBuf {
        SendBuf {
            cap: capacity,
            ..SendBuf::default()
        }
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
        self.cap.saturating_sub(self.len)
    }

    /// Bytes of memory it holds: the tail's allocation and the handed-over
    /// chunks' lengths (their owners may hold more).
    pub fn storage(&self) -> usize {
        let sealed: usize = self.chunks.iter().map(Bytes::len).sum();
        sealed + self.tail.capacity()
    }

    /// Chunks queued (sealed ones and the tail).
    #[cfg(test)]
    pub fn chunk_count(&self) -> usize {
        self.chunks.len() + usize::from(!self.tail.is_empty())
    }

    /// Copies as much of `data` as fits; returns how much.
    #[inline]
    pub fn push(&mut self, data: &[u8]) -> usize {
        // The common case, inlined into the caller: a write that fits the tail's
        // spare room (and the capacity) is one copy and two additions. A new
        // chunk or the capacity limit take the general path.
        let n = data.len();
        if n <= self.tail.capacity() - self.tail.len() && n <= self.free() {
            self.tail.extend_from_slice(data);
            self.len += n;
            return n;
        }
        self.push_slow(data)
    }

    /// [`SendBuf::push`] that needs a new tail chunk or stops at the capacity:
    /// once a chunk for short writes, out of line so that the common case stays
    /// small enough to inline.
    #[inline(never)]
    fn push_slow(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.free());
        let mut rest = data.get(..n).unwrap_or_default();
        while !rest.is_empty() {
            let spare = self.tail.capacity() - self.tail.len();
            if spare == 0 {
                self.seal();
                // Chunks of at most MAX_CHUNK: large enough to amortise the
                // allocation, small enough to stay off the allocator's mmap path.
                let want = rest.len().max(self.len.clamp(MIN_CHUNK, MAX_CHUNK));
                let want = want.min(MAX_CHUNK).min(self.free());
                self.tail = if want == MIN_CHUNK {
                    super::pool::take_chunk()
                } else {
                    BytesMut::with_capacity(want)
                };
                continue;
            }
            let (now, later) = rest.split_at(spare.min(rest.len()));
            self.tail.extend_from_slice(now);
            self.len += now.len();
            rest = later;
        }
        n
    }

    /// Queues as much of `data` as fits without copying it (a short buffer is
    /// copied, see [`COPY_BELOW`]); returns how much.
    pub fn push_bytes(&mut self, mut data: Bytes) -> usize {
        let n = data.len().min(self.free());
        if n < COPY_BELOW {
            return self.push(data.get(..n).unwrap_or_default());
        }
        data.truncate(n);
        self.seal();
        self.chunks.push_back(data);
        self.len += n;
        n
    }

    /// Moves the tail's bytes into a sealed chunk (its spare capacity stays with
    /// the tail).
    fn seal(&mut self) {
        if self.tail.is_empty() {
            return;
        }
        // A full tail is frozen whole (no shared header to allocate, as
        // splitting one off needs); a partly filled one keeps its spare room.
        let sealed = if self.tail.len() == self.tail.capacity() {
            std::mem::take(&mut self.tail)
        } else {
            self.tail.split()
        };
        self.chunks.push_back(sealed.freeze());
    }

    /// Drops `n` bytes from the front (clamped to the length); frees the chunks
    /// that held them.
    pub fn consume(&mut self, n: usize) {
        let mut n = n.min(self.len);
        self.len -= n;
        let (mut idx, mut start) = self.cursor();
        while n > 0 {
            let Some(front) = self.chunks.front_mut() else {
                self.tail.advance(n.min(self.tail.len()));
                break;
            };
            if front.len() > n {
                front.advance(n);
                start = start.saturating_sub(n);
                break;
            }
            n -= front.len();
            start = start.saturating_sub(front.len());
            idx = idx.saturating_sub(1);
            self.chunks.pop_front();
        }
        if self.len == 0 {
            // Drained: give the memory back.
            self.chunks.clear();
            super::pool::give_chunk(std::mem::take(&mut self.tail));
            (idx, start) = (0, 0);
        }
        // A cursor into a chunk that was partly consumed is off by the consumed
        // part; start over from the front in that case.
        if start == 0 {
            idx = 0;
        }
        self.set_cursor(idx, start);
    }

    /// Appends to `out` references to the `len` bytes at `offset` from the
    /// front, one fragment per chunk they span, and returns true; false (and
    /// `out` as it was) if the buffer does not hold them all, `len` is 0, or
    /// they span more than `max` chunks (many short writes: copying them is
    /// cheaper than a fragment each).
    ///
    /// Bytes still in the tail are sealed first: the tail's written part
    /// becomes a chunk of its own, sharing its allocation with the tail, which
    /// keeps its spare room for the writes that follow (`BytesMut::split`: the
    /// two never overlap). Nothing is copied; the chunks live until the last
    /// frame referencing them is dropped, however soon [`SendBuf::consume`]
    /// lets go of them.
    pub fn frags(&mut self, offset: usize, len: usize, max: usize, out: &mut Frags) -> bool {
        let Some(end) = offset.checked_add(len) else {
            return false;
        };
        if len == 0 || end > self.len {
            return false;
        }
        let (mut idx, mut start) = self.cursor();
        if start > offset {
            (idx, start) = (0, 0);
        }
        // Count the chunks first (the tail as one), so that a refusal seals
        // nothing.
        let (mut i, mut at, mut spanned) = (idx, start, 0);
        while at < end {
            let Some(c) = self.chunk(i) else { break };
            if offset < at + c.len() {
                spanned += 1;
            }
            at += c.len();
            i += 1;
        }
        if spanned > max {
            return false;
        }
        if end > self.len - self.tail.len() {
            self.seal();
        }
        let mut pos = offset;
        while pos < end {
            let Some(c) = self.chunks.get(idx) else {
                break;
            };
            if pos >= start + c.len() {
                start += c.len();
                idx += 1;
                continue;
            }
            let from = pos - start;
            let k = (c.len() - from).min(end - pos);
            let shared = SharedBuf::from_bytes(c.slice(from..from + k));
            if let Some(frag) = Frag::new(shared, 0, k) {
                let _ = out.push(frag);
            }
            pos += k;
        }
        self.set_cursor(idx, start);
        pos == end
    }

    fn cursor(&self) -> (usize, usize) {
        (
            self.cursor_idx.load(Relaxed),
            self.cursor_start.load(Relaxed),
        )
    }

    fn set_cursor(&self, idx: usize, start: usize) {
        self.cursor_idx.store(idx, Relaxed);
        self.cursor_start.store(start, Relaxed);
    }

    /// The chunk at `idx` (sealed chunks, then the tail).
    fn chunk(&self, idx: usize) -> Option<&[u8]> {
        match self.chunks.get(idx) {
            Some(c) => Some(c),
            None if idx == self.chunks.len() => Some(&self.tail),
            None => None,
        }
    }

    /// Copies bytes starting `offset` bytes after the front into `out`; returns
    /// how many (limited by what the buffer holds).
    pub fn peek(&self, offset: usize, out: &mut [u8]) -> usize {
        self.copy_out(offset, out, |dst, src, _| dst.copy_from_slice(src))
    }

    /// [`SendBuf::peek`] that also sums what it copies (the Internet checksum's
    /// unfolded sum of `out[..n]`, as `checksum::partial` would give), in the same
    /// pass over the bytes: a segment built without checksum offload is read
    /// once, not copied and then read again to sum it.
    pub fn peek_sum(&self, offset: usize, out: &mut [u8]) -> (usize, u32) {
        let mut sum = 0u32;
        let n = self.copy_out(offset, out, |dst, src, at| {
            let piece = checksum::copy_partial(dst, src, 0).unwrap_or(0);
            // A piece starting at an odd byte sums with its bytes swapped.
            let piece = if at % 2 == 1 {
                checksum::shift_odd(piece)
            } else {
                piece
            };
            sum = checksum::combine(sum, piece);
        });
        (n, sum)
    }

    /// Walks the chunks holding `offset..offset + out.len()` (as far as the
    /// buffer goes), calling `copy(dst, src, at)` for each piece, `at` being the
    /// piece's offset in `out`; returns the bytes covered.
    fn copy_out(
        &self,
        offset: usize,
        out: &mut [u8],
        mut copy: impl FnMut(&mut [u8], &[u8], usize),
    ) -> usize {
        let n = out.len().min(self.len.saturating_sub(offset));
        let (mut idx, mut start) = self.cursor();
        if start > offset {
            (idx, start) = (0, 0);
        }
        let mut done = 0;
        while done < n {
            let Some(c) = self.chunk(idx) else { break };
            let pos = offset + done;
            if pos >= start + c.len() {
                start += c.len();
                idx += 1;
                continue;
            }
            let src = c.get(pos - start..).unwrap_or_default();
            let k = src.len().min(n - done);
            if let (Some(dst), Some(src)) = (out.get_mut(done..done + k), src.get(..k)) {
                copy(dst, src, done);
            }
            done += k;
        }
        self.set_cursor(idx, start);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(b: &SendBuf) -> Vec<u8> {
        let mut out = vec![0; b.len()];
        assert_eq!(b.peek(0, &mut out), b.len());
        out
    }

    #[test]
    fn is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SendBuf>();
        check::<crate::Engine>();
    }

    #[test]
    fn allocates_nothing_until_written_and_frees_when_drained() {
        let mut b = SendBuf::new(1 << 20);
        assert_eq!(b.storage(), 0);
        assert_eq!(b.push(b"hello"), 5);
        assert!(b.storage() >= 5 && b.storage() <= MIN_CHUNK);
        b.consume(5);
        assert_eq!(b.storage(), 0);
        assert!(b.is_empty());
    }

    /// The first chunk of a drained buffer serves the next buffer's first
    /// write (through the per-thread cache), whole again.
    #[test]
    fn a_drained_first_chunk_serves_the_next_connection() {
        std::thread::spawn(|| {
            let mut a = SendBuf::new(1 << 20);
            assert_eq!(a.push(&[1; 64]), 64);
            let ptr = a.tail.as_ptr();
            a.consume(10);
            a.consume(54);
            assert_eq!(a.storage(), 0);
            let mut b = SendBuf::new(1 << 20);
            assert_eq!(b.push(&[2; 64]), 64);
            assert_eq!((b.tail.as_ptr(), b.tail.capacity()), (ptr, MIN_CHUNK));
            assert_eq!(all(&b), vec![2; 64]);
            // A buffer smaller than a chunk gets a chunk of its own size.
            let mut c = SendBuf::new(100);
            assert_eq!(c.push(&[3; 200]), 100);
            assert_eq!(c.tail.capacity(), 100);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn handed_over_bytes_are_not_copied() {
        let mut b = SendBuf::new(1 << 20);
        b.push(b"head");
        let big = Bytes::from(vec![7u8; 4096]);
        let ptr = big.as_ptr();
        assert_eq!(b.push_bytes(big), 4096);
        b.push(b"tail");
        assert_eq!(b.chunk_count(), 3);
        assert_eq!(b.chunk(1).map(<[u8]>::as_ptr), Some(ptr));
        let got = all(&b);
        assert_eq!(&got[..4], b"head");
        assert!(got[4..4100].iter().all(|&x| x == 7));
        assert_eq!(&got[4100..], b"tail");
        // A short one is copied into the tail.
        b.push_bytes(Bytes::from_static(b"small"));
        assert_eq!(b.chunk_count(), 3);
        assert_eq!(&all(&b)[4104..], b"small");
    }

    /// Fragments reference the chunks (no copy), across chunk boundaries and
    /// into the tail, which goes on filling its spare room afterwards.
    #[test]
    fn fragments_reference_the_bytes_where_they_lie() {
        let mut b = SendBuf::new(1 << 20);
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 255) as u8).collect();
        b.push(&data[..5_000]);
        let big = Bytes::from(data[5_000..15_000].to_vec());
        let big_ptr = big.as_ptr();
        b.push_bytes(big);
        b.push(&data[15_000..16_000]);
        let mut f = Frags::new();
        assert!(b.frags(4_000, 11_500, 4, &mut f));
        let got: Vec<u8> = f.iter().flat_map(|x| x.bytes().to_vec()).collect();
        assert_eq!(got, &data[4_000..15_500]);
        assert_eq!(f.len(), 3, "one fragment per chunk spanned");
        assert_eq!(f.as_slice()[1].bytes().as_ptr(), big_ptr, "not copied");
        // The tail was sealed; writing on does not disturb what is referenced.
        b.push(&data[16_000..20_000]);
        assert_eq!(all(&b), &data[..20_000]);
        let got: Vec<u8> = f.iter().flat_map(|x| x.bytes().to_vec()).collect();
        assert_eq!(got, &data[4_000..15_500]);
        // Acknowledged bytes go from the buffer; the fragments keep theirs.
        b.consume(16_000);
        assert_eq!(all(&b), &data[16_000..20_000]);
        assert_eq!(
            got,
            f.iter()
                .flat_map(|x| x.bytes().to_vec())
                .collect::<Vec<u8>>()
        );
        let mut g = Frags::new();
        assert!(!b.frags(3_000, 1_001, 4, &mut g), "past the end");
        assert!(!b.frags(0, 0, 4, &mut g));
        assert!(g.is_empty());
        assert!(b.frags(3_000, 1_000, 4, &mut g));
        // Too many chunks: refused, and the tail is not sealed for it.
        b.push(&data[..100]);
        let chunks = b.chunk_count();
        assert!(!b.frags(0, 4_050, 1, &mut g));
        assert!(b.frags(3_990, 20, 2, &mut g));
        assert_eq!(
            b.chunk_count(),
            chunks,
            "sealing an empty tail changes nothing"
        );
        assert_eq!(b.chunk_count(), chunks);
        assert_eq!(g.as_slice()[0].bytes(), &data[19_000..20_000]);
    }

    proptest! {
        /// Any range, after any writes and acknowledgements, as fragments reads
        /// as the same range copied.
        #[test]
        fn fragments_equal_the_copy(
            ops in proptest::collection::vec((0usize..3, 1usize..9_000), 1..24),
            cut in (0usize..40_000, 0usize..40_000),
        ) {
            let mut b = SendBuf::new(64 * 1024);
            let mut n = 0u32;
            let mut next = |len: usize| -> Vec<u8> {
                (0..len).map(|_| { n = n.wrapping_add(1); (n % 251) as u8 }).collect()
            };
            for (op, len) in ops {
                match op {
                    0 => { let d = next(len); b.push(&d); }
                    1 => { let d = next(len); b.push_bytes(Bytes::from(d)); }
                    _ => {
                        let (off, l) = (cut.0 % (b.len() + 1), cut.1 % (b.len() + 1));
                        let l = l.min(b.len() - off);
                        let mut f = Frags::new();
                        prop_assert_eq!(b.frags(off, l, usize::MAX, &mut f), l > 0);
                        let got: Vec<u8> = f.iter().flat_map(|x| x.bytes().to_vec()).collect();
                        let mut want = vec![0; l];
                        b.peek(off, &mut want);
                        prop_assert_eq!(got, want);
                        b.consume(len.min(b.len()));
                    }
                }
            }
        }
    }

    #[test]
    fn takes_only_what_fits() {
        let mut b = SendBuf::new(1000);
        assert_eq!(b.push(&[1; 600]), 600);
        assert_eq!(b.push_bytes(Bytes::from(vec![2u8; 600])), 400);
        assert_eq!(b.free(), 0);
        assert_eq!(b.push(b"x"), 0);
        b.consume(700);
        assert_eq!(all(&b), vec![2u8; 300]);
    }

    proptest! {
        /// `peek_sum` copies what `peek` copies and sums it as the checksum
        /// module sums the copy, whatever the pieces (handed-over `Bytes` and
        /// copied writes, odd lengths) and the offset.
        #[test]
        fn peek_sum_is_peek_then_partial(
            writes in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 1..3000), any::<bool>()), 1..6),
            offset in 0usize..4000,
            len in 0usize..9000,
        ) {
            let mut b = SendBuf::new(1 << 20);
            for (w, handed) in &writes {
                if *handed {
                    b.push_bytes(Bytes::from(w.clone()));
                } else {
                    b.push(w);
                }
            }
            let mut want = vec![0u8; len];
            let n = b.peek(offset, &mut want);
            let mut got = vec![0u8; len];
            let (m, sum) = b.peek_sum(offset, &mut got);
            prop_assert_eq!(m, n);
            prop_assert_eq!(&got[..m], &want[..n]);
            prop_assert_eq!(
                checksum::fold(sum),
                checksum::fold(checksum::partial(&want[..n], 0))
            );
        }

        /// Any mix of copies, handed-over buffers, acknowledgements and reads at
        /// any offset behaves like a byte deque.
        #[test]
        fn behaves_like_a_deque(
            ops in proptest::collection::vec((0u8..4, 0usize..3000, 0usize..3000), 0..80)
        ) {
            let cap = 8000;
            let mut b = SendBuf::new(cap);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u8;
            for (op, n, off) in ops {
                let mut data = || -> Vec<u8> {
                    (0..n).map(|_| { next = next.wrapping_add(1); next }).collect()
                };
                match op {
                    0 => {
                        let d = data();
                        let k = b.push(&d);
                        prop_assert_eq!(k, n.min(cap - model.len()));
                        model.extend(&d[..k]);
                    }
                    1 => {
                        let d = data();
                        let k = b.push_bytes(Bytes::from(d.clone()));
                        prop_assert_eq!(k, n.min(cap - model.len()));
                        model.extend(&d[..k]);
                    }
                    2 => {
                        b.consume(n);
                        model.drain(..n.min(model.len()));
                    }
                    _ => {
                        let mut out = vec![0; n];
                        let k = b.peek(off, &mut out);
                        let want: Vec<u8> = model.iter().skip(off).take(n).copied().collect();
                        prop_assert_eq!(&out[..k], &want[..]);
                    }
                }
                prop_assert_eq!(b.len(), model.len());
                if model.is_empty() {
                    prop_assert_eq!(b.storage(), 0);
                }
            }
        }

        /// Short writes (the inlined path of `push`) mixed with handed-over
        /// buffers, acknowledgements and reads, in a buffer small enough that
        /// writes keep meeting the capacity and chunk ends: a byte deque that
        /// never holds more than the capacity, and a write that fits the tail's
        /// room neither allocates nor seals a chunk.
        #[test]
        fn short_writes_behave_like_a_deque(
            ops in proptest::collection::vec((0u8..8, 0usize..200, 0usize..1500), 0..300)
        ) {
            let cap = 2500;
            let mut b = SendBuf::new(cap);
            let mut model = std::collections::VecDeque::new();
            let mut next = 0u8;
            for (op, n, off) in ops {
                let mut data = |n: usize| -> Vec<u8> {
                    (0..n).map(|_| { next = next.wrapping_add(1); next }).collect()
                };
                match op {
                    0..=3 => {
                        let d = data(n);
                        let room = b.tail.capacity() - b.tail.len();
                        let fits = n <= room && n <= b.free();
                        let (tail_cap, sealed) = (b.tail.capacity(), b.chunks.len());
                        let k = b.push(&d);
                        prop_assert_eq!(k, n.min(cap - model.len()));
                        model.extend(&d[..k]);
                        if fits {
                            prop_assert_eq!(b.tail.capacity(), tail_cap);
                            prop_assert_eq!(b.chunks.len(), sealed);
                        }
                    }
                    4 => {
                        let d = data(COPY_BELOW + off);
                        let k = b.push_bytes(Bytes::from(d.clone()));
                        prop_assert_eq!(k, d.len().min(cap - model.len()));
                        model.extend(&d[..k]);
                    }
                    5 | 6 => {
                        b.consume(n);
                        model.drain(..n.min(model.len()));
                    }
                    _ => {
                        let mut out = vec![0; n];
                        let k = b.peek(off, &mut out);
                        let want: Vec<u8> = model.iter().skip(off).take(n).copied().collect();
                        prop_assert_eq!(&out[..k], &want[..]);
                    }
                }
                prop_assert!(b.len() <= cap);
                prop_assert_eq!(b.len(), model.len());
                prop_assert_eq!(all(&b), model.iter().copied().collect::<Vec<u8>>());
            }
        }
    }
}
