//! A frame with its offload metadata, and batches of them.

use crate::buf::PacketBuf;
use linerate_offload::OffloadMeta;

/// One Ethernet frame (from the destination MAC on, no FCS) and what travels with it.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The bytes, in a buffer with headroom.
    pub buf: PacketBuf,
    /// Checksum state, segmentation request or record, receive hash (24 bytes:
    /// a frame record is 24 more than its buffer).
    pub meta: OffloadMeta,
}

impl Frame {
    /// A frame of `buf` with `meta`.
    pub fn new(buf: PacketBuf, meta: OffloadMeta) -> Frame {
        Frame { buf, meta }
    }

    /// A frame whose checksums are complete and that needs no segmentation.
    pub fn plain(buf: PacketBuf) -> Frame {
        Frame {
            buf,
            meta: OffloadMeta::plain(),
        }
    }

    /// The frame's bytes.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The frame's bytes, writable.
    #[inline]
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// Frame length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True for an empty frame.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
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
    use super::*;

    /// Frame records move by value through batches and queues: the meta adds 24
    /// bytes to the buffer, no more (issue 15).
    #[test]
    fn frame_record_is_small() {
        assert_eq!(size_of::<OffloadMeta>(), 24);
        assert_eq!(size_of::<Frame>(), size_of::<PacketBuf>() + 24);
        println!(
            "Frame {} B, PacketBuf {} B, OffloadMeta {} B",
            size_of::<Frame>(),
            size_of::<PacketBuf>(),
            size_of::<OffloadMeta>()
        );
    }
}
