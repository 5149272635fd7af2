//! Where the engine writes the frames it sends: buffers the caller lends.
//!
//! [`Engine::poll_transmit_into`](super::Engine::poll_transmit_into) asks a
//! [`TxSink`] for an area of exactly the frame's length, writes the headers and
//! copies the payload from the send buffer straight into it, then commits it with
//! its [`OffloadMeta`]. Over a NIC the area is a pooled packet buffer
//! ([`PoolSink`]), so a super-segment's payload is copied once on its way out of the
//! socket, with no intermediate frame. [`Engine::poll_transmit`](super::Engine::poll_transmit)
//! is the same over a reused scratch buffer, for callers that take `&[u8]`.
//!
//! A sink over a NIC that takes scatter-gather frames ([`Nic::tx_sg`],
//! [`PoolSink::with_frags`]) may take a super-segment as its headers in the
//! area and its payload as references to the send buffer
//! ([`TxSink::commit_frags`]): then no payload byte is copied on the way out.
//!
//! [`Nic::tx_sg`]: linerate_nic::Nic::tx_sg

use linerate_nic::{Batch, Frags, Frame, Pool};
use linerate_offload::OffloadMeta;

/// Takes the frames an engine sends.
pub trait TxSink {
    /// A writable area of exactly `len` bytes for the next frame (its content is
    /// unspecified: the engine writes all of it), or `None` if the sink has no
    /// room now. The engine then keeps the frame and offers it again on the next
    /// poll.
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]>;

    /// The area last handed out by [`TxSink::buffer`] holds a whole frame, to be
    /// sent with `meta`.
    fn commit(&mut self, meta: &OffloadMeta);

    /// True if the sink takes frames whose payload follows their headers as
    /// fragments ([`TxSink::commit_frags`]). False by default.
    fn takes_frags(&self) -> bool {
        false
    }

    /// The area last handed out by [`TxSink::buffer`] holds a frame's headers,
    /// and `frags` its payload: to be sent together with `meta`. Called only if
    /// [`TxSink::takes_frags`]; the default, for sinks that do not, sends the
    /// headers alone, which no caller asks for.
    fn commit_frags(&mut self, meta: &OffloadMeta, frags: Frags) {
        drop(frags);
        self.commit(meta);
    }

    /// Takes a whole frame that already lives in a buffer (a frame a forwarding
    /// service received and sends on), or gives it back if the sink has no room
    /// now. By default it is copied through [`TxSink::buffer`]; sinks that
    /// collect [`Frame`]s take it as it is, without a copy.
    #[allow(clippy::result_large_err)] // the frame is moved back, not copied
    fn push_frame(&mut self, frame: Frame) -> Result<(), Frame> {
        let Some(area) = self.buffer(frame.len()) else {
            return Err(frame);
        };
        area.copy_from_slice(frame.bytes());
        self.commit(&frame.meta);
        Ok(())
    }
}

/// A [`TxSink`] that fills buffers from a [`Pool`] and appends them to a [`Batch`]
/// as [`Frame`]s.
///
/// Each frame is made in the batch when its buffer is lent ([`Batch::push_pooled`])
/// and written where it stays; committing sets its metadata. A buffer lent and
/// not committed is lent again by the next [`TxSink::buffer`], and taken out of
/// the batch when the sink is dropped.
#[derive(Debug)]
pub struct PoolSink<'a> {
    pool: &'a Pool,
    batch: &'a mut Batch,
    /// The batch's last frame was lent and not committed yet.
    open: bool,
    limit: usize,
    frags: bool,
}

impl<'a> PoolSink<'a> {
    /// Appends to `batch` buffers taken from `pool`, with no limit on how many.
    pub fn new(pool: &'a Pool, batch: &'a mut Batch) -> PoolSink<'a> {
        PoolSink {
            pool,
            batch,
            open: false,
            limit: usize::MAX,
            frags: false,
        }
    }

    /// Takes super-segments with their payload referenced in the send buffer
    /// (`on`), for a NIC that takes scatter-gather frames (pass its
    /// [`linerate_nic::Nic::tx_sg`]); by default every frame is linear.
    pub fn with_frags(mut self, on: bool) -> PoolSink<'a> {
        self.frags = on;
        self
    }

    /// Refuses buffers once the batch holds `limit` frames.
    pub fn with_limit(mut self, limit: usize) -> PoolSink<'a> {
        self.limit = limit;
        self
    }

    /// The frame lent, now committed: the batch's last.
    #[inline]
    fn close(&mut self) -> Option<&mut Frame> {
        if !core::mem::take(&mut self.open) {
            return None;
        }
        self.batch.last_mut()
    }
}

impl Drop for PoolSink<'_> {
    fn drop(&mut self) {
        if self.open {
            self.batch.pop();
        }
    }
}

impl TxSink for PoolSink<'_> {
    #[inline]
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        let f = if self.open {
            self.batch.last_mut()?
        } else {
            if self.batch.len() >= self.limit {
                return None;
            }
            let f = self.batch.push_pooled(self.pool)?;
            self.open = true;
            f
        };
        f.buf.clear();
        Some(f.buf.append(len))
    }

    #[inline]
    fn commit(&mut self, meta: &OffloadMeta) {
        if let Some(f) = self.close() {
            f.meta = *meta;
        }
    }

    fn takes_frags(&self) -> bool {
        self.frags
    }

    fn commit_frags(&mut self, meta: &OffloadMeta, frags: Frags) {
        if let Some(f) = self.close() {
            f.meta = *meta;
            f.frags = frags;
        }
    }

    fn push_frame(&mut self, frame: Frame) -> Result<(), Frame> {
        if self.open {
            // A buffer lent and abandoned: it is not a frame.
            self.open = false;
            self.batch.pop();
        }
        if self.batch.len() >= self.limit {
            return Err(frame);
        }
        self.batch.push(frame);
        Ok(())
    }
}

/// The sink behind [`Engine::poll_transmit`](super::Engine::poll_transmit): one
/// reused buffer, each frame handed to a callback as it is committed.
pub(super) struct CallbackSink<'a, F> {
    pub(super) buf: &'a mut Vec<u8>,
    pub(super) len: usize,
    pub(super) out: F,
}

impl<F: FnMut(&[u8], &OffloadMeta)> TxSink for CallbackSink<'_, F> {
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.buf.len() < len {
            self.buf.resize(len, 0);
        }
        self.len = len;
        self.buf.get_mut(..len)
    }

    fn commit(&mut self, meta: &OffloadMeta) {
        if let Some(frame) = self.buf.get(..self.len) {
            (self.out)(frame, meta);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    /// The pool buffers out of the pool's free list, with `pool` still holding
    /// its warm ones (alloc'd and dropped once, so each later alloc reuses).
    fn out_of(pool: &Pool) -> u64 {
        let s = pool.stats();
        s.allocated - s.free as u64
    }

    /// A frame is made in the batch when its buffer is lent; committed, it is
    /// the bytes written with the meta given. A buffer lent and not committed is
    /// lent again, and leaves the batch (back to the pool) when the sink goes
    /// or a whole frame is pushed instead: never a frame of stale bytes.
    #[test]
    fn a_lent_buffer_is_a_frame_only_once_committed() {
        let pool = Pool::default();
        let mut batch = Batch::new();
        let meta = OffloadMeta::plain();
        {
            let mut sink = PoolSink::new(&pool, &mut batch);
            sink.buffer(3).unwrap().copy_from_slice(b"abc");
            sink.commit(&meta);
            // Lent twice, committed once: one frame, the second write's.
            sink.buffer(5).unwrap().copy_from_slice(b"stale");
            sink.buffer(2).unwrap().copy_from_slice(b"de");
            sink.commit(&meta);
            // Lent and abandoned for a whole frame.
            sink.buffer(4).unwrap().copy_from_slice(b"lost");
            sink.push_frame(Frame::plain(pool.alloc_from(b"fgh")))
                .unwrap();
            // Lent and never committed.
            sink.buffer(4).unwrap().copy_from_slice(b"gone");
        }
        let got: Vec<&[u8]> = batch.iter().map(Frame::bytes).collect();
        assert_eq!(got, [&b"abc"[..], b"de", b"fgh"]);
        assert_eq!(out_of(&pool), 3, "the abandoned buffers went back");
        batch.clear();
        assert_eq!(out_of(&pool), 0);
    }

    /// The limit counts frames in the batch; a lent buffer is lent again
    /// without counting twice.
    #[test]
    fn the_limit_counts_committed_and_lent_frames() {
        let pool = Pool::default();
        let mut batch = Batch::new();
        let meta = OffloadMeta::plain();
        {
            let mut sink = PoolSink::new(&pool, &mut batch).with_limit(2);
            sink.buffer(1).unwrap()[0] = 1;
            sink.commit(&meta);
            sink.buffer(1).unwrap()[0] = 2;
            sink.buffer(1).unwrap()[0] = 3;
            sink.commit(&meta);
            assert!(sink.buffer(1).is_none());
        }
        let got: Vec<&[u8]> = batch.iter().map(Frame::bytes).collect();
        assert_eq!(got, [&[1u8][..], &[3u8][..]]);
    }
}
