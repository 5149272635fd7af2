//! The [`Nic`] trait every backend and the shim implement, and its errors.

use crate::buf::Pool;
use crate::caps::NicCaps;
use crate::counters::Counters;
pub use crate::error::NicError;
use crate::frame::Batch;
use crate::notify::Readiness;
use crate::pcap::Recorder;
use std::sync::Arc;

/// A network interface: queues of frames in and out, each frame with its
/// [`linerate_offload::OffloadMeta`].
///
/// The data path is batched and never blocks: [`Nic::receive`] returns what is
/// there now (possibly nothing), [`Nic::transmit`] takes what it can now. A driver,
/// a poll loop or an async task, waits on [`Nic::readiness`] when a queue is empty.
///
/// # Frames and metadata
///
/// On transmit, a frame may ask for what [`Nic::caps`] offers: segmentation of a
/// super-frame (`meta.gso`, if [`crate::Offloads::segments`] it) and completion of a
/// partial checksum (`meta.csum`, with `tx_csum`). A frame longer than the MTU
/// without a segmentation request is refused with [`NicError::Oversize`], never
/// passed on. The shim wraps any backend and offers every offload, doing in
/// software what the backend lacks.
///
/// On receive, `meta` says what the backend knows: checksums it verified or left
/// partial, the coalescing record of a super-frame, the RSS hash.
///
/// # Errors and partial batches
///
/// `transmit` takes frames from the front of the batch, in order. When it meets a
/// frame it must refuse, it drops that frame (counting it under a
/// `tx_dropped_<reason>` counter) and returns the error at once: the frames before
/// it were sent, those after it are still in the batch.
pub trait Nic: Send {
    /// What the backend does itself.
    fn caps(&self) -> &NicCaps;

    /// Appends up to `max` received frames from `queue` to `batch` and returns how
    /// many; 0 when none is waiting.
    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError>;

    /// Sends frames from the front of `batch` on `queue`, removing the ones taken,
    /// and returns how many were taken; frames left in the batch could not be
    /// taken now (try again when the backend has room).
    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError>;

    /// What to wait on for `queue` to have frames to receive.
    fn readiness(&self, queue: usize) -> Result<Readiness, NicError>;

    /// The per-queue counters.
    fn counters(&self) -> &Counters;

    /// The pool the backend allocates received frames from, and that transmitters
    /// should take buffers from.
    fn pool(&self) -> &Pool;

    /// Records every frame the backend sends or receives, as it is on the wire,
    /// from now on (`None` stops recording).
    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>);

    /// Number of queues (`caps().queues`).
    fn queues(&self) -> usize {
        usize::from(self.caps().queues)
    }

    /// True if [`Nic::transmit`] takes scatter-gather frames ([`crate::Frame::frags`]
    /// not empty), as Linux's `NETIF_F_SG`: the memory backend carries them by
    /// reference. A NIC that says false (the default) must be given linear frames
    /// only; the shim linearizes for it (by writing each segment whole).
    fn tx_sg(&self) -> bool {
        false
    }

    /// Asks for scatter-gather frames on receive (`on`) or linear ones only (the
    /// default), and returns whether [`Nic::receive`] may now hand up
    /// scatter-gather frames. A NIC that cannot (the default) returns false and
    /// keeps handing up linear frames; one that can linearizes for a caller that
    /// did not opt in, where it would otherwise have handed the frame up.
    fn set_rx_sg(&mut self, on: bool) -> bool {
        let _ = on;
        false
    }

    /// Asks the backend to hand up only frames to `unicast`, the broadcast
    /// address and the Ethernet group addresses `groups` (the receive filter
    /// a NIC driver's `ndo_set_rx_mode` programs), dropping the rest before
    /// they cost a read; an empty `groups` with `unicast` all zero turns
    /// the filter off. Returns whether the backend filters now: false (the
    /// default) for one that has no filter and hands up every frame, which
    /// the engine then filters itself.
    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        let _ = (unicast, groups);
        Ok(false)
    }
}

impl<N: Nic + ?Sized> Nic for Box<N> {
    fn caps(&self) -> &NicCaps {
        (**self).caps()
    }
    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        (**self).receive(queue, batch, max)
    }
    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        (**self).transmit(queue, batch)
    }
    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        (**self).readiness(queue)
    }
    fn counters(&self) -> &Counters {
        (**self).counters()
    }
    fn pool(&self) -> &Pool {
        (**self).pool()
    }
    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        (**self).set_recorder(recorder);
    }
    fn tx_sg(&self) -> bool {
        (**self).tx_sg()
    }
    fn set_rx_sg(&mut self, on: bool) -> bool {
        (**self).set_rx_sg(on)
    }
    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        (**self).set_multicast_filter(unicast, groups)
    }
}

/// Checks `queue` against `queues`.
pub(crate) fn check_queue(queue: usize, queues: usize) -> Result<(), NicError> {
    if queue < queues {
        Ok(())
    } else {
        Err(NicError::NoQueue { queue, queues })
    }
}
