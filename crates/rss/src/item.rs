//! Dispatch items: what the [`Dispatcher`](crate::Dispatcher) moves from the
//! receive ring into the per-queue queues.
//!
//! [`RxItem`] is what dispatch needs of a frame: its bytes and a place for its
//! receive hash. [`RxFrame`] carries the frame's whole [`OffloadMeta`] (24 bytes),
//! as the NIC layer hands it over; [`RxBuf`] only the hash, for stacks that keep
//! other metadata beside the buffer (or need none). Items move by value through
//! the queues, so their size is much of what dispatch costs.

use linerate_offload::{OffloadMeta, RssHash};
use linerate_wire::layout::Layout;

/// What the dispatcher needs of a received frame: its bytes, and a place for its
/// receive hash (and, optionally, its parsed layout).
///
/// [`RxFrame`] carries a whole [`OffloadMeta`]; [`RxBuf`] only the hash. Any other
/// type a stack moves between its cores (a pool index beside a buffer, say) can
/// implement it: the dispatcher moves items by value into its queues, so small
/// items dispatch faster.
pub trait RxItem {
    /// The frame bytes, from the outer Ethernet header on.
    fn frame(&self) -> &[u8];

    /// The receive hash the backend (or an earlier stage) supplied, if any.
    fn rss(&self) -> Option<RssHash>;

    /// Records the hash dispatch computed.
    fn set_rss(&mut self, hash: RssHash);

    /// A layout parsed earlier, if the item carries one: the hash input is then
    /// read at its offsets instead of from the bytes. `None` by default (and for
    /// [`RxFrame`] and [`RxBuf`], which carry none: reading the input from the
    /// bytes costs about what reading it at a layout's offsets does).
    fn layout(&self) -> Option<&Layout> {
        None
    }

    /// Keeps the layout dispatch parsed when the fast path could not decide
    /// ([`Extracted::Parse`](crate::Extracted::Parse)); dropped by default (and
    /// by [`RxFrame`] and [`RxBuf`]).
    fn set_layout(&mut self, layout: Layout) {
        let _ = layout;
    }
}

/// A received frame and its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RxFrame<B> {
    /// The frame bytes (any owner: `Vec<u8>`, a pool buffer, a borrowed slice).
    pub data: B,
    /// Offload metadata; dispatch fills `rss` when it computes the hash.
    pub meta: OffloadMeta,
}

impl<B> RxFrame<B> {
    /// A frame with empty metadata (no backend hash).
    pub fn new(data: B) -> RxFrame<B> {
        RxFrame {
            data,
            meta: OffloadMeta::plain(),
        }
    }

    /// A frame with the given metadata.
    pub fn with_meta(data: B, meta: OffloadMeta) -> RxFrame<B> {
        RxFrame { data, meta }
    }
}

impl<B: AsRef<[u8]>> RxItem for RxFrame<B> {
    #[inline]
    fn frame(&self) -> &[u8] {
        self.data.as_ref()
    }

    #[inline]
    fn rss(&self) -> Option<RssHash> {
        self.meta.rss
    }

    #[inline]
    fn set_rss(&mut self, hash: RssHash) {
        self.meta.rss = Some(hash);
    }
}

/// A received frame with only its receive hash: the smallest dispatch item (24
/// bytes with a borrowed slice, 32 with a `Vec<u8>`, against 40 and 48 for
/// [`RxFrame`]).
///
/// ```
/// use linerate_rss::{Dispatcher, HashConfig, IndirectionTable, RssKey, RxBuf, Steering};
/// use linerate_wire::build::{FrameBuilder, Ip, L4};
/// use std::sync::Arc;
///
/// let frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(5000, 53)).build(b"q");
/// let steering = Arc::new(Steering::new(&RssKey::MICROSOFT, IndirectionTable::new(2)?, HashConfig::default()));
/// let (mut dispatcher, queues) = Dispatcher::new(steering.clone(), 64)?;
/// dispatcher.dispatch([RxBuf::new(frame.as_slice())]);
/// let q = steering.rx_queue_of_frame(&frame, None);
/// assert_eq!(queues[usize::from(q)].pop().and_then(|b| b.rss), steering.hash_frame(&frame, None));
/// # Ok::<(), linerate_rss::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxBuf<B> {
    /// The frame bytes.
    pub data: B,
    /// The receive hash: from the backend, or filled in by dispatch.
    pub rss: Option<RssHash>,
}

impl<B> RxBuf<B> {
    /// A frame without a hash.
    pub fn new(data: B) -> RxBuf<B> {
        RxBuf { data, rss: None }
    }

    /// A frame with the backend's hash.
    pub fn with_rss(data: B, hash: RssHash) -> RxBuf<B> {
        RxBuf {
            data,
            rss: Some(hash),
        }
    }
}

impl<B: AsRef<[u8]>> RxItem for RxBuf<B> {
    #[inline]
    fn frame(&self) -> &[u8] {
        self.data.as_ref()
    }

    #[inline]
    fn rss(&self) -> Option<RssHash> {
        self.rss
    }

    #[inline]
    fn set_rss(&mut self, hash: RssHash) {
        self.rss = Some(hash);
    }
}
