//! Frag-list GRO: runs that keep the received payloads by reference instead of
//! copying them (Linux's `skb_gro_receive` chaining the received buffers on
//! `frag_list`).
//!
//! A chaining context, [`Gro::chaining`](super::Gro::chaining), takes each frame
//! as its headers (a slice) plus a handle to its payload (`P`: a reference into a
//! buffer the caller owns and can share, such as a pooled, reference-counted
//! buffer). A run keeps its first frame's headers, which GRO fixes up when the run
//! leaves, and a clone of each joining payload's handle; it touches the payload
//! bytes only to verify a checksum the NIC did not. The rules, counters and
//! checksums are those of the copying context, frame for frame: gathering what a
//! chaining context delivers gives the bytes and metas a copying one does.

use super::GroSink;
use crate::meta::OffloadMeta;

/// Where a chaining GRO context delivers frames.
pub trait ChainSink<P> {
    /// A frame GRO passes on as it came (refused, or counted and passed on with
    /// its checksum verified): its headers `head`, then `payload`'s bytes.
    fn frame(&mut self, head: &[u8], payload: &P, meta: &OffloadMeta);

    /// A run leaving GRO: `head` is its first frame's headers (completed, and
    /// `meta` a segmentation record, when segments joined it), then the bytes of
    /// the payloads in `chain`, in order. The sink may take them (`drain`,
    /// `mem::take`); GRO drops what it leaves and keeps the vector's room.
    fn run(&mut self, head: &[u8], chain: &mut Vec<P>, meta: &OffloadMeta);

    /// Appends `next`, the payload of a segment joining a run, to the run's
    /// `chain` (never empty: the run's first payload is in it). By default a
    /// clone of `next` is pushed; a sink whose handles name ranges of shared
    /// buffers may instead grow the last one when `next` continues it in the
    /// same buffer (as consecutive GSO segments of one super-frame do), so a
    /// run of them leaves as one handle: no reference counted per segment,
    /// and none for the layer above to walk.
    #[inline]
    fn chain(&mut self, chain: &mut Vec<P>, next: &P)
    where
        P: Clone,
    {
        // Room first, so that the push is a store: `extend_from_slice` of
        // one element is an out-of-line call once the fast path around it
        // grows, and a bare `push(next.clone())` hands the clone made on the
        // stack to an out-of-line push by address, whose wide load of it
        // stalls on store forwarding (perf, both).
        chain.reserve(1);
        chain.push(next.clone());
    }
}

/// The payload type of a copying context ([`Gro::new`](super::Gro::new)): it
/// has no values, so a copying context's runs never hold a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoChain {}

impl AsRef<[u8]> for NoChain {
    fn as_ref(&self) -> &[u8] {
        match *self {}
    }
}

/// Where the table and the refusal path deliver, for either kind of context.
pub(super) trait Out<P> {
    /// A frame passed on as it came: `head` then `pay` (empty for a frame in one
    /// piece); `chained` is its payload handle in a chaining context.
    fn frame(&mut self, head: &[u8], pay: &[u8], chained: Option<&P>, meta: &OffloadMeta);

    /// A run leaving GRO: `buf[..len]` its bytes (a chaining run's: its headers),
    /// `chain` its payloads (empty in a copying context).
    fn run(&mut self, buf: &mut Vec<u8>, len: usize, chain: &mut Vec<P>, meta: &OffloadMeta);

    /// Appends a joining segment's payload handle to its run's chain
    /// ([`ChainSink::chain`]).
    fn chain(&mut self, chain: &mut Vec<P>, next: &P);
}

/// A copying context's sink.
pub(super) struct Copying<'s, S: ?Sized>(pub(super) &'s mut S);

impl<S: GroSink + ?Sized> Out<NoChain> for Copying<'_, S> {
    #[inline]
    fn frame(&mut self, head: &[u8], pay: &[u8], _: Option<&NoChain>, meta: &OffloadMeta) {
        if pay.is_empty() {
            self.0.frame(head, meta);
        } else {
            self.0.frame_split(head, pay, meta);
        }
    }

    #[inline]
    fn run(&mut self, buf: &mut Vec<u8>, len: usize, _: &mut Vec<NoChain>, meta: &OffloadMeta) {
        self.0.run(buf, len, meta);
    }

    #[inline]
    fn chain(&mut self, _: &mut Vec<NoChain>, next: &NoChain) {
        match *next {}
    }
}

/// A chaining context's sink.
pub(super) struct Chaining<'s, S: ?Sized>(pub(super) &'s mut S);

impl<P: Clone, S: ChainSink<P> + ?Sized> Out<P> for Chaining<'_, S> {
    #[inline]
    fn frame(&mut self, head: &[u8], _: &[u8], chained: Option<&P>, meta: &OffloadMeta) {
        // A chaining context hands every frame in with its handle.
        if let Some(p) = chained {
            self.0.frame(head, p, meta);
        }
    }

    #[inline]
    fn run(&mut self, buf: &mut Vec<u8>, len: usize, chain: &mut Vec<P>, meta: &OffloadMeta) {
        self.0.run(buf.get(..len).unwrap_or_default(), chain, meta);
    }

    #[inline]
    fn chain(&mut self, chain: &mut Vec<P>, next: &P) {
        self.0.chain(chain, next);
    }
}
