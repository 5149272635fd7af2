//! The receive buffer: received frames kept whole, then a byte ring.
//!
//! Linux keeps received segments in their socket buffers until the application
//! reads them (`sk_receive_queue`), so in-order data is copied once, out to the
//! application. The receive buffer does the same for large in-order segments
//! whose frame the engine owns ([`crate::Engine::handle_frames`]): it *adopts*
//! the frame's buffer and reads the payload from it where it lies. Everything
//! else (small segments, frames lent by reference, out-of-order data and what
//! follows it) is copied into a [`Ring`] behind the adopted frames.
//!
//! Order is kept by one rule: a frame is adopted only while the ring is empty
//! and nothing waits out of order, so the readable bytes are always the adopted
//! frames, in order, then the ring's bytes.
//!
//! Memory: the window counts payload bytes, as with the ring alone; an adopted
//! frame holds its whole buffer, so frames are adopted only while the buffers
//! held stay within twice the capacity (`RecvBuf::adoptable`); past that they
//! are copied. With the ring's storage (at most the capacity) a connection
//! holds at most three times its window; [`RecvBuf::storage`] reports it.
//!
//! Adoption has two steps because the payload is borrowed from the frame while
//! TCP processes the segment: `RecvBuf::adopt` accounts the bytes (they are
//! received, RCV.NXT moves past them), and `RecvBuf::fill` hands over the
//! buffer as soon as the engine gets it back, before anything can read.

use super::ring::Ring;
use linerate_nic::{Frags, PacketBuf, SharedBuf};
use std::collections::VecDeque;

/// Payload bytes an adopted segment has at least: below this, copying is
/// cheaper than keeping a frame.
pub const ADOPT_MIN: usize = 2048;

/// A smaller payload, down to this, is kept too when it fills at least half
/// of its frame's buffer: a full-sized segment at MTU 1500 (1448 or 1460
/// bytes in a 2 KiB pool buffer): keeping such segments rather than copying
/// them into the ring costs less CPU per byte in the offloads-off bulk cell
/// (`cargo run --release --example offload_report -- --only linerate-off
/// --write 65536 --repeat 8`). The same payload in a large buffer (a backend's
/// 64 KiB receive buffers) is still copied.
pub const ADOPT_MIN_DENSE: usize = 1024;

/// Where a received frame lies, for a segment whose frame the engine owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnedFrame {
    /// Address of the frame's first byte.
    pub addr: usize,
    /// Frame length.
    pub len: usize,
    /// Bytes of storage the frame's buffer holds.
    pub storage: usize,
}

impl OwnedFrame {
    /// The range of the frame `data` occupies, if it lies within it.
    pub fn range_of(&self, data: &[u8]) -> Option<core::ops::Range<usize>> {
        let start = data.as_ptr().addr().checked_sub(self.addr)?;
        let end = start.checked_add(data.len())?;
        (end <= self.len).then_some(start..end)
    }
}

/// What an adopted range lies in: a received frame, or a buffer the payloads
/// of a chain (frag-list GRO) lie in, shared with whatever else refers to it.
#[derive(Debug, Clone)]
enum Kept {
    /// A frame, between [`RecvBuf::adopt`] and [`RecvBuf::fill`].
    Awaited,
    /// A chain, between [`RecvBuf::adopt_chain`] and [`RecvBuf::fill_chain`]:
    /// `start` is the bytes of the chain to skip, `end - start` its bytes.
    AwaitedChain,
    Frame(PacketBuf),
    Shared(SharedBuf),
}

/// An adopted frame or shared range and the range of it still to be read.
#[derive(Debug, Clone)]
struct Held {
    buf: Kept,
    start: usize,
    end: usize,
    /// Storage charged for it: a frame's buffer, or the bytes of the fragments
    /// it took (a chain's buffers are shared by its fragments, as pages are by
    /// an skb's frags, and each fragment is charged its bytes).
    charge: usize,
}

impl Held {
    fn bytes(&self) -> &[u8] {
        let all = match &self.buf {
            Kept::Awaited | Kept::AwaitedChain => &[],
            Kept::Frame(b) => b.as_slice(),
            Kept::Shared(b) => b,
        };
        all.get(self.start..self.end).unwrap_or_default()
    }

    fn len(&self) -> usize {
        self.end - self.start
    }

    fn awaited(&self) -> bool {
        matches!(self.buf, Kept::Awaited | Kept::AwaitedChain)
    }
}

/// The receive buffer of one connection, holding at most `capacity` bytes.
#[derive(Debug, Clone, Default)]
pub struct RecvBuf {
    held: VecDeque<Held>,
    /// Unread bytes in `held`.
    held_len: usize,
    /// Storage of the held buffers.
    held_storage: usize,
    ring: Ring,
    cap: usize,
}

impl RecvBuf {
    /// An empty buffer holding at most `capacity` bytes; allocates nothing.
    pub fn new(capacity: usize) -> RecvBuf {
        RecvBuf {
            held: VecDeque::new(),
            held_len: 0,
            held_storage: 0,
            ring: Ring::new(capacity),
            cap: capacity,
        }
    }

    /// Bytes it can hold.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Raises the capacity to `cap` (never lowers it: the window advertised
    /// must not shrink).
    pub fn set_capacity(&mut self, cap: usize) {
        if cap > self.cap {
            self.cap = cap;
            self.ring.set_capacity(cap);
        }
    }

    /// Bytes of storage held now (ring storage and adopted buffers).
    pub fn storage(&self) -> usize {
        self.ring.storage() + self.held_storage
    }

    /// Readable bytes.
    pub fn len(&self) -> usize {
        self.held_len + self.ring.len()
    }

    /// True if nothing is readable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Room left.
    pub fn free(&self) -> usize {
        self.cap.saturating_sub(self.len())
    }

    /// Writes `data` starting `offset` bytes after the readable bytes, without
    /// making it readable; as much as fits; returns how much.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> usize {
        let room = self.free().saturating_sub(offset);
        let n = data.len().min(room);
        self.ring
            .write_at(offset, data.get(..n).unwrap_or_default())
    }

    /// Makes `n` bytes written by [`RecvBuf::write_at`] readable.
    pub fn commit(&mut self, n: usize) {
        self.ring.commit(n);
    }

    /// True if `len` in-order payload bytes in a frame of `frame.storage` bytes
    /// may be adopted now: the ring is empty (the caller knows nothing waits
    /// out of order), the payload is large ([`ADOPT_MIN`], or
    /// [`ADOPT_MIN_DENSE`] filling half its buffer) and fits, and the buffers held stay
    /// within twice the capacity (frames from a backend with large fixed
    /// buffers may carry much less than they hold; past the bound they are
    /// copied, as Linux collapses socket buffers under memory pressure).
    pub(crate) fn adoptable(&self, frame: &OwnedFrame, len: usize) -> bool {
        let dense = len >= ADOPT_MIN_DENSE && len.saturating_mul(2) >= frame.storage;
        self.ring.is_empty()
            && (len >= ADOPT_MIN || dense)
            && len <= self.free()
            && self.held_storage.saturating_add(frame.storage) <= self.cap.saturating_mul(2)
    }

    /// Accounts `range` of the frame being processed as readable; the frame
    /// itself follows by [`RecvBuf::fill`].
    pub(crate) fn adopt(&mut self, range: core::ops::Range<usize>) {
        self.held_len += range.len();
        // A plain `push_back`: made with `resize_with` (so that the entry
        // would not go through the stack) it costs an out-of-line generic
        // call per adopted segment, dearer on the offloads-off bulk cell
        // (`offload_report -- --only linerate-off --write 65536`).
        self.held.push_back(Held {
            buf: Kept::Awaited,
            start: range.start,
            end: range.end,
            charge: 0,
        });
    }

    /// True if in-order data of `len` bytes in a chain of fragments may be
    /// adopted now: as [`RecvBuf::adoptable`], each fragment charged its bytes.
    pub(crate) fn adoptable_chain(&self, len: usize) -> bool {
        self.ring.is_empty()
            && len >= ADOPT_MIN
            && len <= self.free()
            && self.held_storage.saturating_add(len) <= self.cap.saturating_mul(2)
    }

    /// Accounts `len` bytes of the chain of the frame being processed, after
    /// its first `skip` bytes, as readable; the fragments follow by
    /// [`RecvBuf::fill_chain`].
    pub(crate) fn adopt_chain(&mut self, skip: usize, len: usize) {
        self.held_len += len;
        // Made where it stays, as in `adopt`.
        let n = self.held.len() + 1;
        self.held.resize_with(n, || Held {
            buf: Kept::AwaitedChain,
            start: skip,
            end: skip + len,
            charge: 0,
        });
    }

    /// True if an adopted range waits for its frame or chain.
    pub(crate) fn awaits_frame(&self) -> bool {
        self.held.back().is_some_and(Held::awaited)
    }

    /// Hands over the frame of the last [`RecvBuf::adopt`].
    pub(crate) fn fill(&mut self, buf: PacketBuf) {
        if let Some(h) = self.held.back_mut()
            && matches!(h.buf, Kept::Awaited)
        {
            h.charge = buf.storage();
            self.held_storage += h.charge;
            h.buf = Kept::Frame(buf);
        }
    }

    /// Hands over the fragments of the last [`RecvBuf::adopt_chain`], taking
    /// them from `frags`. Fragments that continue the range held before them
    /// in the same buffer (consecutive segments of one buffer, as a memory
    /// wire's are) extend it, as Linux coalesces frags of one page.
    pub(crate) fn fill_chain(&mut self, frags: &mut Frags) {
        let Some(h) = self
            .held
            .back()
            .filter(|h| matches!(h.buf, Kept::AwaitedChain))
        else {
            return;
        };
        let (mut skip, mut left) = (h.start, h.len());
        self.held.pop_back();
        frags.take_each(|frag| {
            let (shared, off, len) = frag.into_parts();
            let from = skip.min(len);
            skip -= from;
            let n = (len - from).min(left);
            if n == 0 {
                return;
            }
            left -= n;
            let (start, end) = (off + from, off + from + n);
            self.held_storage += n;
            if let Some(last) = self.held.back_mut()
                && let Kept::Shared(b) = &last.buf
                && b.same(&shared)
                && last.end == start
            {
                last.end = end;
                last.charge += n;
                return;
            }
            self.held.push_back(Held {
                buf: Kept::Shared(shared),
                start,
                end,
                charge: n,
            });
        });
        // Bytes accounted that the fragments did not hold (cannot happen: the
        // engine adopts what the segment's fragments hold) stay unreadable
        // rather than read as anything else.
        self.held_len -= left;
    }

    /// The readable bytes, in order, as slices.
    pub fn slices(&self) -> impl Iterator<Item = &[u8]> {
        let (a, b) = self.ring.readable();
        self.held.iter().map(Held::bytes).chain([a, b])
    }

    /// Drops `n` bytes from the front (clamped to the length).
    pub fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let Some(h) = self.held.front_mut() else {
                break;
            };
            let len = h.len();
            if n < len {
                h.start += n;
                self.held_len -= n;
                return;
            }
            // All of it: popped without a store into it first (the pop reads
            // the whole entry back, and a load over a just-stored field stalls
            // on store forwarding: perf showed it on every segment read).
            let charge = h.charge;
            self.held.pop_front();
            self.held_storage -= charge;
            self.held_len -= len;
            n -= len;
        }
        self.ring.consume(n);
    }

    /// Copies from the front into `out` and consumes it; returns how many bytes.
    pub fn pop(&mut self, out: &mut [u8]) -> usize {
        let mut n = 0;
        while let Some(h) = self.held.front_mut() {
            let Some(dst) = out.get_mut(n..) else { break };
            if dst.is_empty() {
                break;
            }
            if h.awaited() {
                // Never between adopt and fill: the engine fills before
                // returning to the application. Read nothing rather than guess.
                debug_assert!(false, "adopted range without its frame");
                return n;
            }
            let src = h.bytes();
            let k = src.len().min(dst.len());
            if let (Some(d), Some(s)) = (dst.get_mut(..k), src.get(..k)) {
                d.copy_from_slice(s);
            }
            n += k;
            // Consumed here, as `consume(k)` would (one entry: no call and
            // no second look at the front per frame read).
            let len = h.len();
            self.held_len -= k;
            if k < len {
                h.start += k;
                break;
            }
            let charge = h.charge;
            self.held.pop_front();
            self.held_storage -= charge;
        }
        if self.held.is_empty() {
            n += self.ring.pop(out.get_mut(n..).unwrap_or_default());
        }
        n
    }

    /// Gives the ring's storage back if nothing is readable. The caller knows
    /// no out-of-order bytes wait past the end.
    pub fn release(&mut self) {
        if self.held.is_empty() {
            self.ring.release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(payload: &[u8], header: usize) -> PacketBuf {
        let mut f = vec![0xee; header];
        f.extend_from_slice(payload);
        PacketBuf::from_slice(&f)
    }

    /// Adopts `payload` (after a `header`-byte header) if the buffer allows.
    fn offer(r: &mut RecvBuf, payload: &[u8], header: usize) -> bool {
        let buf = frame(payload, header);
        let s = buf.as_slice();
        let of = OwnedFrame {
            addr: s.as_ptr().addr(),
            len: s.len(),
            storage: buf.storage(),
        };
        let data = &s[header..];
        if !r.adoptable(&of, data.len()) {
            return false;
        }
        let range = of.range_of(data).unwrap();
        r.adopt(range);
        assert!(r.awaits_frame());
        r.fill(buf);
        assert!(!r.awaits_frame());
        true
    }

    #[test]
    fn range_of_rejects_foreign_slices() {
        let buf = frame(&[1; 100], 54);
        let s = buf.as_slice();
        let of = OwnedFrame {
            addr: s.as_ptr().addr(),
            len: s.len(),
            storage: buf.storage(),
        };
        assert_eq!(of.range_of(&s[54..]), Some(54..154));
        let other = [0u8; 10];
        assert_eq!(of.range_of(&other), None);
    }

    #[test]
    fn adopts_only_large_payloads_into_an_empty_ring() {
        let mut r = RecvBuf::new(64 * 1024);
        assert!(!offer(&mut r, &[1; 100], 54), "small payloads are copied");
        assert!(offer(&mut r, &[2; 4000], 54));
        assert_eq!(r.len(), 4000);
        assert_eq!(r.write_at(0, &[3; 10]), 10);
        r.commit(10);
        assert!(!offer(&mut r, &[4; 4000], 54), "ring holds bytes: copy");
        let mut out = vec![0; 5000];
        assert_eq!(r.pop(&mut out), 4010);
        assert!(out[..4000].iter().all(|&b| b == 2));
        assert!(out[4000..4010].iter().all(|&b| b == 3));
        assert!(r.is_empty());
        assert!(r.storage() > 0, "ring storage until released");
        r.release();
        assert_eq!(r.storage(), 0);
    }

    /// A full-sized segment at MTU 1500 in a pool-sized buffer is kept; the
    /// same payload in a 64 KiB buffer, or a smaller one, is copied.
    #[test]
    fn adopts_mss_segments_that_fill_half_their_buffer() {
        let offer_in = |r: &mut RecvBuf, payload: &[u8], storage: usize| {
            let mut buf = PacketBuf::with_headroom(128, storage - 128);
            buf.extend_from_slice(&[0xee; 54]);
            buf.extend_from_slice(payload);
            let s = buf.as_slice();
            let of = OwnedFrame {
                addr: s.as_ptr().addr(),
                len: s.len(),
                storage: buf.storage(),
            };
            let data = &s[54..];
            r.adoptable(&of, data.len())
        };
        let mut r = RecvBuf::new(64 * 1024);
        assert!(offer_in(&mut r, &[1; 1448], 2176));
        assert!(offer_in(&mut r, &[1; 1460], 2176));
        assert!(
            !offer_in(&mut r, &[1; 1448], 64 * 1024),
            "large buffer: copy"
        );
        assert!(!offer_in(&mut r, &[1; 1000], 2176), "below ADOPT_MIN_DENSE");
        assert!(
            offer_in(&mut r, &[1; 3000], 64 * 1024),
            "ADOPT_MIN as before"
        );
        assert!(offer(&mut r, &[5; 1448], 54));
        assert_eq!(r.len(), 1448);
    }

    #[test]
    fn never_over_capacity() {
        let mut r = RecvBuf::new(6000);
        assert!(offer(&mut r, &[1; 4000], 54));
        assert!(!offer(&mut r, &[1; 4000], 54), "does not fit the window");
        assert_eq!(r.write_at(0, &[2; 4000]), 2000);
        assert_eq!(r.free(), 2000, "write_at does not make bytes readable");
        r.commit(2000);
        assert_eq!(r.free(), 0);
    }

    #[test]
    fn held_storage_bounded_by_twice_the_capacity() {
        // 3000-byte payloads in 20 KiB buffers (a backend with large fixed
        // buffers): kept while the buffers held stay within 2 x 32 KiB.
        let mut r = RecvBuf::new(32 * 1024);
        let mut kept = 0;
        for i in 0..10u8 {
            let mut buf = PacketBuf::with_headroom(128, 20 * 1024);
            buf.extend_from_slice(&[i; 3054]);
            let s = buf.as_slice();
            let of = OwnedFrame {
                addr: s.as_ptr().addr(),
                len: s.len(),
                storage: buf.storage(),
            };
            let data = &s[54..];
            if r.adoptable(&of, data.len()) {
                r.adopt(of.range_of(data).unwrap());
                r.fill(buf);
                kept += 1;
            } else {
                let n = r.write_at(0, data);
                r.commit(n);
            }
            // Held buffers within 2 x capacity, the ring's storage within 1 x.
            assert!(r.storage() <= 3 * r.capacity(), "{}", r.storage());
        }
        assert_eq!(kept, 3, "64 KiB holds three 20.1 KiB buffers");
        assert_eq!(r.len(), 30_000);
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// In-order data, adopted if the buffer allows it, else copied.
        Data(Vec<u8>),
        Read(usize),
        Lend(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1usize..9000, any::<u8>())
                .prop_map(|(n, b)| Op::Data((0..n).map(|i| b.wrapping_add(i as u8)).collect())),
            (0usize..12_000).prop_map(Op::Read),
            (0usize..12_000).prop_map(Op::Lend),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Against a byte queue: whatever mix of adopted and copied segments and
        /// reads (copying or lending), the bytes come out in order, none lost.
        #[test]
        fn reads_back_in_order(ops in proptest::collection::vec(op(), 1..60)) {
            let mut r = RecvBuf::new(32 * 1024);
            let mut model = std::collections::VecDeque::new();
            for o in ops {
                match o {
                    Op::Data(d) => {
                        if !offer(&mut r, &d, 54) {
                            let n = r.write_at(0, &d);
                            r.commit(n);
                            model.extend(&d[..n]);
                        } else {
                            model.extend(&d);
                        }
                    }
                    Op::Read(n) => {
                        let mut out = vec![0; n];
                        let before = model.len();
                        let k = r.pop(&mut out);
                        prop_assert_eq!(k, n.min(before));
                        let want: Vec<u8> = model.drain(..k).collect();
                        prop_assert_eq!(&out[..k], &want[..]);
                    }
                    Op::Lend(n) => {
                        let mut got = Vec::new();
                        for s in r.slices() {
                            let k = s.len().min(n - got.len());
                            got.extend_from_slice(&s[..k]);
                        }
                        r.consume(got.len());
                        let want: Vec<u8> = model.drain(..got.len()).collect();
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(r.len(), model.len());
                prop_assert!(r.len() <= r.capacity());
            }
            let mut out = vec![0; 64 * 1024];
            let k = r.pop(&mut out);
            prop_assert_eq!(&out[..k], &model.iter().copied().collect::<Vec<_>>()[..]);
            prop_assert!(r.is_empty());
        }
    }
}
