//! Reusable output buffers: whole frames ([`SegmentBuf`]) or per-segment headers
//! with payload ranges into the super-frame ([`ZeroCopyBuf`]).
//!
//! Both keep their allocations across calls (each call clears them first), so
//! once they have grown to the largest super-frame, segmenting allocates nothing.

use crate::meta::Checksum;
use core::ops::Range;

/// Segments as whole frames, back to back in one arena.
#[derive(Debug, Clone, Default)]
pub struct SegmentBuf {
    data: Vec<u8>,
    frames: Vec<Range<usize>>,
    pub(super) csum: Checksum,
}

impl SegmentBuf {
    /// An empty buffer (it grows on first use).
    pub const fn new() -> SegmentBuf {
        SegmentBuf {
            data: Vec::new(),
            frames: Vec::new(),
            csum: Checksum::None,
        }
    }

    /// A buffer with room for `bytes` of frames and `frames` frames.
    pub fn with_capacity(bytes: usize, frames: usize) -> SegmentBuf {
        SegmentBuf {
            data: Vec::with_capacity(bytes),
            frames: Vec::with_capacity(frames),
            csum: Checksum::None,
        }
    }

    /// Removes every frame, keeping the memory.
    pub fn clear(&mut self) {
        self.data.clear();
        self.frames.clear();
        self.csum = Checksum::None;
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// True if there is no frame.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Frame `i`.
    pub fn get(&self, i: usize) -> Option<&[u8]> {
        self.data.get(self.frames.get(i)?.clone())
    }

    /// Frame `i`, mutable.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut [u8]> {
        let r = self.frames.get(i)?.clone();
        self.data.get_mut(r)
    }

    /// The frames, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        self.frames
            .iter()
            .map(|r| self.data.get(r.clone()).unwrap_or_default())
    }

    /// The checksum state of every frame: [`Checksum::None`] (complete), or
    /// [`Checksum::Partial`] with the transport header's offset in each frame.
    pub const fn csum(&self) -> Checksum {
        self.csum
    }

    /// Total bytes of all frames.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    pub(super) fn reserve(&mut self, bytes: usize, frames: usize) {
        self.data.reserve(bytes);
        self.frames.reserve(frames);
    }

    /// Appends `frame` as one frame and returns its range.
    pub(super) fn push_frame(&mut self, frame: &[u8]) -> Range<usize> {
        let start = self.data.len();
        self.data.extend_from_slice(frame);
        let r = start..self.data.len();
        self.frames.push(r.clone());
        r
    }

    pub(super) fn frame_mut(&mut self, r: Range<usize>) -> Option<&mut [u8]> {
        self.data.get_mut(r)
    }

    /// Appends a frame of `hdrs` and `payload`, then lets `fix` rewrite its
    /// headers.
    #[inline]
    pub(super) fn push_segment(
        &mut self,
        hdrs: &[u8],
        payload: &[u8],
        fix: impl FnOnce(&mut [u8]),
    ) {
        let start = self.data.len();
        self.data.extend_from_slice(hdrs);
        self.data.extend_from_slice(payload);
        if let Some(h) = self.data.get_mut(start..start + hdrs.len()) {
            fix(h);
        }
        self.frames.push(start..self.data.len());
    }
}

/// One segment of a [`ZeroCopyBuf`]: where its header is in the buffer's arena and
/// where its payload is in the super-frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ZeroCopySegment {
    /// The segment's headers, in the buffer's header arena.
    pub header: Range<usize>,
    /// The segment's payload, in the super-frame that was segmented.
    pub payload: Range<usize>,
}

/// Segments as (headers, payload) pairs: headers written into one arena, payloads
/// left in the super-frame, for backends that take scatter-gather lists.
#[derive(Debug, Clone, Default)]
pub struct ZeroCopyBuf {
    headers: Vec<u8>,
    segs: Vec<ZeroCopySegment>,
    pub(super) csum: Checksum,
}

impl ZeroCopyBuf {
    /// An empty buffer (it grows on first use).
    pub const fn new() -> ZeroCopyBuf {
        ZeroCopyBuf {
            headers: Vec::new(),
            segs: Vec::new(),
            csum: Checksum::None,
        }
    }

    /// A buffer with room for `header_bytes` of headers and `segments` segments.
    pub fn with_capacity(header_bytes: usize, segments: usize) -> ZeroCopyBuf {
        ZeroCopyBuf {
            headers: Vec::with_capacity(header_bytes),
            segs: Vec::with_capacity(segments),
            csum: Checksum::None,
        }
    }

    /// Removes every segment, keeping the memory.
    pub fn clear(&mut self) {
        self.headers.clear();
        self.segs.clear();
        self.csum = Checksum::None;
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// True if there is no segment.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// The segments' header and payload ranges.
    pub fn segments(&self) -> &[ZeroCopySegment] {
        &self.segs
    }

    /// The header arena (every segment's headers, back to back).
    pub fn header_bytes(&self) -> &[u8] {
        &self.headers
    }

    /// The headers of segment `i`.
    pub fn header(&self, i: usize) -> Option<&[u8]> {
        self.headers.get(self.segs.get(i)?.header.clone())
    }

    /// Segment `i` as (headers, payload), the payload borrowed from `frame`, which
    /// must be the super-frame that was segmented.
    pub fn get<'a>(&'a self, i: usize, frame: &'a [u8]) -> Option<(&'a [u8], &'a [u8])> {
        let s = self.segs.get(i)?;
        Some((
            self.headers.get(s.header.clone())?,
            frame.get(s.payload.clone())?,
        ))
    }

    /// Every segment as (headers, payload), in order; see [`ZeroCopyBuf::get`].
    pub fn iter<'a>(
        &'a self,
        frame: &'a [u8],
    ) -> impl ExactSizeIterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.segs.iter().map(move |s| {
            (
                self.headers.get(s.header.clone()).unwrap_or_default(),
                frame.get(s.payload.clone()).unwrap_or_default(),
            )
        })
    }

    /// Appends segment `i` as one contiguous frame to `out` (for a backend without
    /// scatter-gather, or a test); false if there is no segment `i`.
    pub fn gather_into(&self, i: usize, frame: &[u8], out: &mut Vec<u8>) -> bool {
        let Some((h, p)) = self.get(i, frame) else {
            return false;
        };
        out.extend_from_slice(h);
        out.extend_from_slice(p);
        true
    }

    /// The checksum state of every segment, as [`SegmentBuf::csum`].
    pub const fn csum(&self) -> Checksum {
        self.csum
    }

    pub(super) fn reserve(&mut self, header_bytes: usize, segments: usize) {
        self.headers.reserve(header_bytes);
        self.segs.reserve(segments);
    }

    /// Appends `hdrs` to the header arena and returns their range.
    #[inline]
    pub(super) fn push_header(&mut self, hdrs: &[u8]) -> Range<usize> {
        let start = self.headers.len();
        self.headers.extend_from_slice(hdrs);
        start..self.headers.len()
    }

    pub(super) fn header_mut(&mut self, r: Range<usize>) -> Option<&mut [u8]> {
        self.headers.get_mut(r)
    }

    #[inline]
    pub(super) fn push_segment(&mut self, header: Range<usize>, payload: Range<usize>) {
        self.segs.push(ZeroCopySegment { header, payload });
    }
}

/// Where [`super::Segmenter::segment_headers_to`] writes segments: a buffer the
/// caller lends for each segment's headers (a scatter-gather frame's head), and
/// the range of the super-frame that is its payload, which is never copied.
pub trait HeaderSink {
    /// A writable area of exactly `len` bytes for the next segment's headers
    /// (content unspecified: the segmenter writes all of it), or `None` if there
    /// is no room.
    fn header(&mut self, len: usize) -> Option<&mut [u8]>;

    /// The area last lent by [`HeaderSink::header`] holds the segment's headers,
    /// and `payload` (a range of the super-frame) is its payload.
    fn commit(&mut self, payload: core::ops::Range<usize>);
}

/// Where [`super::Segmenter::segment_to`] writes segments: buffers the caller
/// lends (a NIC's pool buffers), so each segment is built in place.
pub trait SegmentSink {
    /// A writable area of exactly `len` bytes for the next segment (content
    /// unspecified: the segmenter writes all of it), or `None` if there is no room.
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]>;

    /// The area last lent by [`SegmentSink::buffer`] holds a whole segment.
    fn commit(&mut self);
}
