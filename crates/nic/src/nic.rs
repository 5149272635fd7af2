//! The [`Nic`] trait every backend and the shim implement, and its errors.

use crate::buf::{BufError, Pool};
use crate::caps::{NicCaps, Unsupported};
use crate::counters::Counters;
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
}

/// Why a NIC operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NicError {
    /// There is no queue `queue`; the NIC has `queues`.
    NoQueue {
        /// The queue asked for.
        queue: usize,
        /// How many the NIC has.
        queues: usize,
    },
    /// A frame longer than the MTU allows, without a segmentation request (or with
    /// one whose segments would be too long, or a super-frame over the limit).
    Oversize {
        /// The frame's length, or the length of one of its segments.
        len: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A frame asks for an offload the backend does not have.
    Unsupported(Unsupported),
    /// A frame whose headers cannot be parsed where the backend needs them.
    Malformed(linerate_wire::Error),
    /// A frame whose metadata cannot be honoured as it stands (for example a
    /// segmentation request with segment size 0).
    InvalidMeta {
        /// What is wrong.
        what: &'static str,
    },
    /// A frame the kernel refused (`EINVAL` on a TAP write: a bad
    /// `virtio_net_hdr` or a frame the kernel cannot take).
    Rejected {
        /// The frame's length.
        len: usize,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// A buffer operation did not fit.
    Buffer(BufError),
    /// An operating-system call failed.
    Io(std::io::Error),
    /// The operating system refused for lack of privilege (`EPERM`, `EACCES`):
    /// AF_XDP sockets and XDP programs need root (`CAP_NET_RAW`,
    /// `CAP_NET_ADMIN`, `CAP_BPF`).
    PermissionDenied {
        /// What was being done.
        what: &'static str,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// A configuration value was refused (software RSS steering).
    Config(linerate_rss::ConfigError),
    /// A frame's metadata has no `virtio_net_hdr` form the backend can write
    /// (GSO inside GRE; a tunnel request without the 24-byte header), or the
    /// header is inconsistent with the frame.
    Virtio(linerate_offload::virtio::VirtioError),
    /// The interface is down (a TAP whose link is not up refuses frames with
    /// `EIO`): the frame is dropped and counted (`tx_dropped_link_down`). Not
    /// fatal: bring the link up (`ip link set DEV up`) and frames flow again.
    LinkDown,
}

impl core::fmt::Display for NicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NicError::NoQueue { queue, queues } => {
                write!(f, "no queue {queue}: the NIC has {queues}")
            }
            NicError::Oversize { len, limit } => write!(
                f,
                "frame of {len} bytes exceeds the limit of {limit} and is not marked for segmentation"
            ),
            NicError::Unsupported(u) => write!(f, "unsupported offload: {u}"),
            NicError::Malformed(e) => write!(f, "malformed frame: {e}"),
            NicError::InvalidMeta { what } => write!(f, "invalid offload metadata: {what}"),
            NicError::Rejected { len, error } => {
                write!(f, "the kernel refused a {len}-byte frame: {error}")
            }
            NicError::Buffer(e) => write!(f, "buffer: {e}"),
            NicError::Io(e) => write!(f, "I/O: {e}"),
            NicError::PermissionDenied { what, error } => {
                write!(f, "{what}: {error} (this needs root)")
            }
            NicError::Config(e) => write!(f, "configuration: {e}"),
            NicError::Virtio(e) => write!(f, "virtio_net_hdr: {e}"),
            NicError::LinkDown => f.write_str(
                "the interface is down: frames are dropped until it is up (ip link set DEV up)",
            ),
        }
    }
}

impl std::error::Error for NicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NicError::Unsupported(e) => Some(e),
            NicError::Malformed(e) => Some(e),
            NicError::Rejected { error, .. }
            | NicError::Io(error)
            | NicError::PermissionDenied { error, .. } => Some(error),
            NicError::Buffer(e) => Some(e),
            NicError::Config(e) => Some(e),
            NicError::Virtio(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for NicError {
    fn from(e: std::io::Error) -> Self {
        NicError::Io(e)
    }
}

impl From<BufError> for NicError {
    fn from(e: BufError) -> Self {
        NicError::Buffer(e)
    }
}

impl From<Unsupported> for NicError {
    fn from(e: Unsupported) -> Self {
        NicError::Unsupported(e)
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
