//! A frame with its offload metadata, and batches of them.
//!
//! # Scatter-gather frames
//!
//! A frame is its *head*, a [`PacketBuf`] holding the headers (and, for a linear
//! frame, everything), plus optional payload fragments ([`Frags`]): references
//! into shared, reference-counted buffers ([`SharedBuf`]), as Linux's skb frags
//! point into pages. Software GSO makes such frames: a small head with a
//! segment's headers and one fragment naming its payload in the super-frame, so
//! the payload is never copied on the way out.
//!
//! [`Frame::bytes`] is always the head; [`Frame::len`] the whole frame.
//! Scatter-gather frames only go where they were asked for: a NIC transmits one
//! only if it says so ([`crate::Nic::tx_sg`]), and hands them up on receive only
//! to a caller that opted in ([`crate::Nic::set_rx_sg`]); everywhere else frames
//! are linear, and code that reads a frame's bytes reads all of them.

use crate::buf::{Frag, PacketBuf, Pool, SharedBuf};
use linerate_offload::OffloadMeta;

/// The payload fragments of a frame: none (a linear frame), one (a GSO
/// segment's payload is one range of its super-frame), or a chain (a run that
/// frag-list GRO coalesced: each segment's payload where it was received, as
/// Linux's `frag_list`). One fragment is kept inline, so a segment's record needs
/// no allocation; a chain's vector comes from, and goes back to, a cache of this
/// thread's, so a warm receive path allocates none either.
#[derive(Debug, Default)]
pub struct Frags {
    rep: Rep,
}

#[derive(Debug, Default)]
enum Rep {
    #[default]
    None,
    One(Frag),
    /// Never empty.
    Chain(Vec<Frag>),
}

impl Clone for Frags {
    fn clone(&self) -> Frags {
        let rep = match &self.rep {
            Rep::None => Rep::None,
            Rep::One(f) => Rep::One(f.clone()),
            Rep::Chain(v) => {
                let mut c = chain_box();
                c.extend(v.iter().cloned());
                Rep::Chain(c)
            }
        };
        Frags { rep }
    }
}

impl Drop for Frags {
    #[inline]
    fn drop(&mut self) {
        // Looked at in place first: taken whatever it is, the value would go
        // through the stack and be read back wider than it was written (a
        // store-forwarding stall per dropped frame, in perf). A lone
        // fragment or none is dropped by the fields' own drop.
        if matches!(self.rep, Rep::Chain(_))
            && let Rep::Chain(v) = core::mem::take(&mut self.rep)
        {
            keep_chain(v);
        }
    }
}

/// Chains kept per thread for reuse, at most.
const CHAIN_CACHE: usize = 256;

std::thread_local! {
    static CHAINS: core::cell::RefCell<Vec<Vec<Frag>>> =
        const { core::cell::RefCell::new(Vec::new()) };
}

/// An empty chain vector, from this thread's cache if it has one.
fn chain_box() -> Vec<Frag> {
    CHAINS
        .try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.pop()))
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Drops the fragments of `v` (their references go) and keeps the vector.
fn keep_chain(mut v: Vec<Frag>) {
    v.clear();
    let _ = CHAINS.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut()
            && c.len() < CHAIN_CACHE
        {
            c.push(v);
        }
    });
}

impl Frags {
    /// No fragments.
    #[inline]
    pub const fn new() -> Frags {
        Frags { rep: Rep::None }
    }

    /// Appends `frag`. A second fragment makes the fragments a chain (its
    /// vector from the thread's cache). Never fails; the `Result` is for
    /// callers written when a frame held one fragment at most.
    #[inline]
    pub fn push(&mut self, frag: Frag) -> Result<(), Frag> {
        if matches!(self.rep, Rep::None) {
            // A GSO segment's one fragment: written in place. Swapped in, not
            // assigned: an assignment calls the drop glue of the old value
            // (empty, but a call), across which the fragment waits on the
            // stack, to be read back by one wide load that stalls on store
            // forwarding (perf of `cargo bench --bench gso -- sg-frames`).
            // What comes out is `Rep::None`, which owns nothing.
            core::mem::forget(core::mem::replace(&mut self.rep, Rep::One(frag)));
        } else {
            self.push_more(frag);
        }
        Ok(())
    }

    /// Appends a reference to `len` bytes of `of` from `from` on
    /// ([`Frag::slice`]); false, appending nothing, if they are not all in it
    /// or `len` is 0.
    ///
    /// [`Frags::push`] of the slice, but where there is no fragment yet (a GSO
    /// segment's) the new one is made where it stays: made before the branch,
    /// it waits on the stack for whichever branch takes it, and its copy into
    /// place stalls on store forwarding.
    #[inline(always)]
    pub fn push_slice(&mut self, of: &Frag, from: usize, len: usize) -> bool {
        if matches!(self.rep, Rep::None) {
            let Some(frag) = of.slice(from, len) else {
                return false;
            };
            core::mem::forget(core::mem::replace(&mut self.rep, Rep::One(frag)));
            return true;
        }
        match of.slice(from, len) {
            Some(frag) => {
                self.push_more(frag);
                true
            }
            None => false,
        }
    }

    #[cold]
    #[inline(never)]
    fn push_more(&mut self, frag: Frag) {
        self.rep = match core::mem::take(&mut self.rep) {
            Rep::None => Rep::One(frag),
            Rep::One(first) => {
                let mut c = chain_box();
                c.push(first);
                c.push(frag);
                Rep::Chain(c)
            }
            Rep::Chain(mut c) => {
                c.push(frag);
                Rep::Chain(c)
            }
        };
    }

    /// The fragments `chain` holds, in order, taking them and leaving `chain`
    /// empty with room (the chain's vector is swapped with one of the thread's
    /// cache, so a warm path allocates nothing).
    pub fn from_chain(chain: &mut Vec<Frag>) -> Frags {
        let rep = match chain.len() {
            0 => Rep::None,
            1 => chain.pop().map_or(Rep::None, Rep::One),
            _ => {
                let mut c = chain_box();
                core::mem::swap(&mut c, chain);
                Rep::Chain(c)
            }
        };
        Frags { rep }
    }

    /// Number of fragments.
    #[inline]
    pub fn len(&self) -> usize {
        match &self.rep {
            Rep::None => 0,
            Rep::One(_) => 1,
            Rep::Chain(c) => c.len(),
        }
    }

    /// True if there is none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        matches!(self.rep, Rep::None)
    }

    /// The fragments, in order.
    #[inline]
    pub fn as_slice(&self) -> &[Frag] {
        match &self.rep {
            Rep::None => &[],
            Rep::One(f) => core::slice::from_ref(f),
            Rep::Chain(c) => c,
        }
    }

    /// The fragments, in order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &Frag> + '_ {
        self.as_slice().iter()
    }

    /// Bytes in all fragments.
    #[inline]
    pub fn total_len(&self) -> usize {
        match &self.rep {
            Rep::None => 0,
            Rep::One(f) => f.len(),
            Rep::Chain(c) => c.iter().map(Frag::len).sum(),
        }
    }

    /// Takes the fragments, in order, handing each to `f` (the chain's vector
    /// goes back to the thread's cache).
    pub fn take_each(&mut self, mut f: impl FnMut(Frag)) {
        match core::mem::take(&mut self.rep) {
            Rep::None => {}
            Rep::One(one) => f(one),
            Rep::Chain(mut v) => {
                v.drain(..).for_each(&mut f);
                keep_chain(v);
            }
        }
    }

    /// Drops every fragment (their references go).
    pub fn clear(&mut self) {
        if let Rep::Chain(v) = core::mem::take(&mut self.rep) {
            keep_chain(v);
        }
    }
}

/// The longest frame [`Frame::with_probe`] makes a probe for: more than any
/// super-frame (an IP packet's length is 16 bits; 64 KiB of payload behind
/// tunnel headers).
pub const PROBE_MAX: usize = 128 * 1024;

std::thread_local! {
    static PROBE: core::cell::RefCell<Vec<u8>> = const { core::cell::RefCell::new(Vec::new()) };
}

/// One Ethernet frame (from the destination MAC on, no FCS) and what travels with it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The head bytes, in a buffer with headroom: the whole frame when
    /// [`Frame::frags`] is empty, else its headers (and any bytes before the first
    /// fragment).
    pub buf: PacketBuf,
    /// Checksum state, segmentation request or record, receive hash (24 bytes).
    pub meta: OffloadMeta,
    /// Payload after the head, by reference (empty for a linear frame).
    pub frags: Frags,
}

impl Frame {
    /// A linear frame of `buf` with `meta`.
    #[inline]
    pub fn new(buf: PacketBuf, meta: OffloadMeta) -> Frame {
        Frame {
            buf,
            meta,
            frags: Frags::new(),
        }
    }

    /// A linear frame whose checksums are complete and that needs no segmentation.
    pub fn plain(buf: PacketBuf) -> Frame {
        Frame::new(buf, OffloadMeta::plain())
    }

    /// A scatter-gather frame: `head`, then the bytes of `frag`.
    pub fn with_frag(head: PacketBuf, frag: Frag, meta: OffloadMeta) -> Frame {
        Frame {
            buf: head,
            meta,
            frags: Frags {
                rep: Rep::One(frag),
            },
        }
    }

    /// The head bytes: the whole frame if it is linear ([`Frame::is_linear`]).
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The head bytes, writable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Frame length in bytes: the head and every fragment.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len() + self.frags.total_len()
    }

    /// Frame length in bytes (the same as [`Frame::len`], named for contrast
    /// with [`Frame::head_len`]).
    #[inline]
    pub fn total_len(&self) -> usize {
        self.len()
    }

    /// Length of the head ([`Frame::bytes`]).
    #[inline]
    pub fn head_len(&self) -> usize {
        self.buf.len()
    }

    /// Calls `f` with a slice as long as the whole frame ([`Frame::len`]) that
    /// begins with the head; what follows the head is unspecified (not the
    /// fragments' bytes). For parsing the headers of a scatter-gather frame,
    /// held in its head, against the frame's length without gathering its
    /// payload. A linear frame is its own probe; otherwise the head is copied
    /// into a probe buffer of this thread's (grown as needed, up to
    /// [`PROBE_MAX`]; `f` gets the head alone for a longer frame).
    pub fn with_probe<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        if self.frags.is_empty() {
            return f(self.bytes());
        }
        let (head, len) = (self.bytes(), self.len());
        if len > PROBE_MAX {
            return f(head);
        }
        PROBE.with(|p| match p.try_borrow_mut() {
            Ok(mut p) => {
                if p.len() < len {
                    p.resize(len, 0);
                }
                if let Some(d) = p.get_mut(..head.len()) {
                    d.copy_from_slice(head);
                }
                f(p.get(..len).unwrap_or_default())
            }
            // Called from within `f`: a probe of its own.
            Err(_) => {
                let mut v = vec![0; len];
                if let Some(d) = v.get_mut(..head.len()) {
                    d.copy_from_slice(head);
                }
                f(&v)
            }
        })
    }

    /// True for an empty frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the frame has no fragments: [`Frame::bytes`] is all of it.
    #[inline]
    pub fn is_linear(&self) -> bool {
        self.frags.is_empty()
    }

    /// The frame's bytes in order, as chunks: the head, then each fragment.
    pub fn chunks(&self) -> impl Iterator<Item = &[u8]> + '_ {
        core::iter::once(self.bytes()).chain(self.frags.iter().map(Frag::bytes))
    }

    /// Makes the frame linear by appending its fragments to the head (one copy,
    /// growing the head's storage if its tailroom is short) and dropping their
    /// references. Returns true if there was anything to gather.
    #[inline]
    pub fn linearize(&mut self) -> bool {
        if self.frags.is_empty() {
            return false; // the common case: checked inline, nothing written
        }
        self.gather_frags();
        true
    }

    #[cold]
    #[inline(never)]
    fn gather_frags(&mut self) {
        let mut dst = self.buf.append(self.frags.total_len());
        for frag in self.frags.iter() {
            let (d, rest) = dst.split_at_mut(frag.len().min(dst.len()));
            d.copy_from_slice(frag.bytes().get(..d.len()).unwrap_or_default());
            dst = rest;
        }
        self.frags.clear();
    }

    /// Copies the whole frame into the front of `out` and returns its length, or
    /// `None` if `out` is too short (for a backend that gathers into one buffer of
    /// its own, such as an AF_XDP UMEM frame).
    pub fn gather_into(&self, out: &mut [u8]) -> Option<usize> {
        let len = self.len();
        let mut rest = out.get_mut(..len)?;
        for c in self.chunks() {
            let (dst, tail) = rest.split_at_mut_checked(c.len())?;
            dst.copy_from_slice(c);
            rest = tail;
        }
        Some(len)
    }

    /// Appends the whole frame to `out`.
    pub fn gather_to_vec(&self, out: &mut Vec<u8>) {
        out.reserve(self.len());
        for c in self.chunks() {
            out.extend_from_slice(c);
        }
    }

    /// The frame's bytes in one slice: its own for a linear frame, otherwise
    /// gathered into `scratch` (cleared first). For the few places that need
    /// the bytes whole and can afford the copy (a recorder).
    pub fn contiguous<'a>(&'a self, scratch: &'a mut Vec<u8>) -> &'a [u8] {
        if self.is_linear() {
            return self.bytes();
        }
        scratch.clear();
        self.gather_to_vec(scratch);
        scratch
    }

    /// The shared buffer of the first fragment, if any (where a GSO segment's
    /// payload lives).
    pub fn first_shared(&self) -> Option<&SharedBuf> {
        self.frags.iter().next().map(Frag::shared)
    }
}

/// A reusable batch of frames: a `Vec<Frame>` whose capacity survives
/// [`Vec::clear`] and [`Vec::drain`], so receive and transmit loops that keep
/// their batches allocate nothing once warm.
///
/// [`crate::Nic::receive`] appends to a batch; [`crate::Nic::transmit`] removes
/// from its front the frames it took. It dereferences to the `Vec`.
#[derive(Debug, Default)]
pub struct Batch {
    frames: Vec<Frame>,
}

/// The batch size backends and examples use unless told otherwise (wireguard-go
/// and DPDK burst sizes are in this range).
pub const DEFAULT_BATCH: usize = 64;

impl Batch {
    /// An empty batch with room for [`DEFAULT_BATCH`] frames.
    pub fn new() -> Batch {
        Batch::with_capacity(DEFAULT_BATCH)
    }

    /// An empty batch with room for `n` frames.
    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            frames: Vec::with_capacity(n),
        }
    }

    /// Appends a frame with an empty buffer of `pool` (the pool's headroom
    /// before it) and plain metadata, and returns it, for a sink that writes
    /// the frame where it stays (and then sets its metadata).
    ///
    /// The frame is made in the batch's storage, field by field: a `Frame`
    /// built on the stack and pushed is copied by wide loads of what narrow
    /// stores just wrote, which stall on store forwarding (perf showed it on
    /// the engine's every transmitted segment and on software GSO's every
    /// segment head).
    #[inline]
    pub fn push_pooled(&mut self, pool: &Pool) -> Option<&mut Frame> {
        let n = self.frames.len() + 1;
        // Constants only (a meta passed in would be copied through memory).
        self.frames.resize_with(n, || {
            Frame::new(PacketBuf::from_vec(Vec::new()), OffloadMeta::plain())
        });
        let f = self.frames.last_mut()?;
        pool.alloc_into_empty(&mut f.buf);
        Some(f)
    }

    /// Total bytes of the frames in the batch.
    pub fn bytes(&self) -> usize {
        self.frames.iter().map(Frame::len).sum()
    }
}

impl core::ops::Deref for Batch {
    type Target = Vec<Frame>;
    #[inline]
    fn deref(&self) -> &Vec<Frame> {
        &self.frames
    }
}

impl core::ops::DerefMut for Batch {
    #[inline]
    fn deref_mut(&mut self) -> &mut Vec<Frame> {
        &mut self.frames
    }
}

impl From<Vec<Frame>> for Batch {
    fn from(frames: Vec<Frame>) -> Batch {
        Batch { frames }
    }
}

impl Extend<Frame> for Batch {
    fn extend<I: IntoIterator<Item = Frame>>(&mut self, iter: I) {
        self.frames.extend(iter);
    }
}

impl FromIterator<Frame> for Batch {
    fn from_iter<I: IntoIterator<Item = Frame>>(iter: I) -> Batch {
        Batch {
            frames: iter.into_iter().collect(),
        }
    }
}

impl<'a> IntoIterator for &'a Batch {
    type Item = &'a Frame;
    type IntoIter = core::slice::Iter<'a, Frame>;
    fn into_iter(self) -> Self::IntoIter {
        self.frames.iter()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// Frame records move by value through batches and queues: the meta adds 24
    /// bytes to the buffer and the inline fragment 16 (a pointer and two `u32`),
    /// no more (issue 15).
    #[test]
    fn frame_record_is_small() {
        assert_eq!(size_of::<OffloadMeta>(), 24);
        assert_eq!(size_of::<Frags>(), 24);
        assert_eq!(size_of::<Frame>(), size_of::<PacketBuf>() + 24 + 24);
        // 80 bytes before scatter-gather; 48 + 24 + 16 with `u32` buffer
        // offsets and one fragment; 8 more for a tag when chains came.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(size_of::<Frame>(), 96);
        println!(
            "Frame {} B, PacketBuf {} B, OffloadMeta {} B, Frags {} B",
            size_of::<Frame>(),
            size_of::<PacketBuf>(),
            size_of::<OffloadMeta>(),
            size_of::<Frags>()
        );
    }

    fn sg(head: &[u8], shared: &[u8], off: usize, len: usize) -> (Frame, crate::Pool) {
        let pool = crate::Pool::default();
        let s = SharedBuf::new(pool.alloc_from(shared));
        let f = Frame::with_frag(
            pool.alloc_from(head),
            Frag::new(s, off, len).unwrap(),
            OffloadMeta::plain(),
        );
        (f, pool)
    }

    #[test]
    fn scatter_gather_frame_reads_as_its_gathered_bytes() {
        let (mut f, pool) = sg(b"HDR", b"0123456789", 4, 5);
        assert!(!f.is_linear());
        assert_eq!((f.len(), f.head_len(), f.total_len()), (8, 3, 8));
        let chunks: Vec<&[u8]> = f.chunks().collect();
        assert_eq!(chunks, [&b"HDR"[..], &b"45678"[..]]);
        let mut v = Vec::new();
        f.gather_to_vec(&mut v);
        assert_eq!(v, b"HDR45678");
        let mut out = [0u8; 9];
        assert_eq!(f.gather_into(&mut out), Some(8));
        assert_eq!(&out[..8], b"HDR45678");
        assert_eq!(f.gather_into(&mut [0u8; 7]), None);
        let c = f.clone();
        assert_eq!(f.first_shared().unwrap().ref_count(), 2);
        assert!(f.linearize());
        assert!(!f.linearize());
        assert!(f.is_linear());
        assert_eq!(f.bytes(), b"HDR45678");
        assert_eq!(c.first_shared().unwrap().ref_count(), 1);
        let free = pool.stats().free;
        drop(c);
        assert_eq!(
            pool.stats().free,
            free + 2,
            "clone's head and the shared buffer"
        );
    }

    /// A chain (frag-list GRO's run) reads as its pieces in order, gathers,
    /// clones by reference, and lets every reference go when dropped, through
    /// `push` and `from_chain` alike.
    #[test]
    fn chain_of_fragments() {
        let pool = crate::Pool::default();
        let s = SharedBuf::new(pool.alloc_from(b"0123456789"));
        let piece = |off, len| Frag::new(s.clone(), off, len).unwrap();
        let mut frags = Frags::new();
        assert!(frags.push(piece(0, 2)).is_ok());
        assert_eq!((frags.len(), frags.total_len()), (1, 2));
        assert!(frags.push(piece(5, 3)).is_ok());
        assert!(frags.push(piece(9, 1)).is_ok());
        assert_eq!((frags.len(), frags.total_len()), (3, 6));
        assert_eq!(s.ref_count(), 4);
        let mut f = Frame::new(pool.alloc_from(b"H"), OffloadMeta::plain());
        f.frags = frags;
        let chunks: Vec<&[u8]> = f.chunks().collect();
        assert_eq!(chunks, [&b"H"[..], b"01", b"567", b"9"]);
        assert_eq!(f.len(), 7);
        let c = f.clone();
        assert_eq!(s.ref_count(), 7);
        assert!(f.linearize());
        assert_eq!(f.bytes(), b"H015679");
        assert_eq!(s.ref_count(), 4, "the gathered frame let its pieces go");
        drop(c);
        assert_eq!(s.ref_count(), 1);

        let mut v = vec![piece(1, 1), piece(3, 2)];
        let room = v.capacity();
        let g = Frags::from_chain(&mut v);
        assert!(v.is_empty());
        assert_eq!(g.as_slice().len(), 2);
        assert_eq!(
            g.iter().map(Frag::bytes).collect::<Vec<_>>(),
            [&b"1"[..], b"34"]
        );
        let mut one = vec![piece(7, 2)];
        let h = Frags::from_chain(&mut one);
        assert_eq!((h.len(), h.total_len()), (1, 2));
        assert!(Frags::from_chain(&mut Vec::new()).is_empty());
        drop((g, h));
        assert_eq!(s.ref_count(), 1);
        assert!(room >= 2);
        drop(s);
        assert_eq!(
            pool.stats().free,
            2,
            "the clone's head and the shared buffer"
        );
    }
}
