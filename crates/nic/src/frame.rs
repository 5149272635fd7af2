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

use crate::buf::{Frag, PacketBuf, SharedBuf};
use linerate_offload::OffloadMeta;

/// The payload fragments of a frame: none (a linear frame) or, in this version,
/// one (a GSO segment's payload is one range of its super-frame). Kept inline, so
/// a frame record needs no allocation.
#[derive(Debug, Clone, Default)]
pub struct Frags {
    one: Option<Frag>,
}

impl Frags {
    /// No fragments.
    #[inline]
    pub const fn new() -> Frags {
        Frags { one: None }
    }

    /// Appends `frag`; gives it back if there is no room for another.
    #[inline]
    pub fn push(&mut self, frag: Frag) -> Result<(), Frag> {
        if self.one.is_some() {
            return Err(frag);
        }
        self.one = Some(frag);
        Ok(())
    }

    /// Number of fragments.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.one.is_some())
    }

    /// True if there is none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.one.is_none()
    }

    /// The fragments, in order.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &Frag> + '_ {
        self.one.iter()
    }

    /// Bytes in all fragments.
    #[inline]
    pub fn total_len(&self) -> usize {
        self.one.as_ref().map_or(0, Frag::len)
    }

    /// Drops every fragment (their references go).
    pub fn clear(&mut self) {
        self.one = None;
    }
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
            frags: Frags { one: Some(frag) },
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
        if let Some(frag) = self.frags.one.take() {
            self.buf.extend_from_slice(frag.bytes());
        }
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
        assert_eq!(size_of::<Frags>(), 16);
        assert_eq!(size_of::<Frame>(), size_of::<PacketBuf>() + 24 + 16);
        // 80 bytes before scatter-gather; 48 + 24 + 16 with `u32` buffer offsets.
        #[cfg(target_pointer_width = "64")]
        assert_eq!(size_of::<Frame>(), 88);
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
        let mut frags = Frags::new();
        let (g, _p) = sg(b"", b"ab", 0, 2);
        let frag = g.frags.iter().next().unwrap().clone();
        assert!(frags.push(frag.clone()).is_ok());
        assert!(frags.push(frag).is_err());
        assert_eq!((frags.len(), frags.total_len()), (1, 2));
    }
}
