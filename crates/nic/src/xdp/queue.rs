//! One AF_XDP socket and its UMEM: the four rings and who owns each frame.
//!
//! The UMEM of a queue is split once, at open: the first half of its frames
//! belongs to receive, the second half to transmit.
//!
//! * Receive frames cycle fill ring -> kernel -> rx ring -> here (copied out into
//!   pool buffers) -> fill ring again, within the same call. The fill ring is as
//!   large as the receive half, so handing them back always fits.
//! * Transmit frames cycle `free` -> here (a frame copied in) -> tx ring ->
//!   kernel -> completion ring -> `free`. The completion ring is drained on every
//!   receive and transmit call.
//!
//! xsk-rs marks every ring operation `unsafe` for one contract: a frame
//! descriptor handed to a ring belongs to this UMEM and is not touched again
//! until the kernel hands it back. The ownership cycles above keep it: every
//! descriptor here comes from this queue's [`Umem::new`], and each one is, at any
//! moment, in exactly one place (a ring, `free`, or a local of one call).

use crate::error::NicConfigError;
use crate::frame::Frame;
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use xsk_rs::config::{SocketConfig, UmemConfig};
use xsk_rs::socket::XdpStatistics;
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, Socket, TxQueue, Umem};

/// How many frames one copy-mode `sendto` kick moves at most (`TX_BATCH_SIZE`
/// in net/xdp/xsk.c, the default `XDP_MAX_TX_SKB_BUDGET`).
pub(crate) const KICK_BATCH: usize = 32;

/// `XDP_PKT_CONTD` (linux/if_xdp.h): more descriptors of this frame follow.
const XDP_PKT_CONTD: u32 = 1;

/// Descriptors one frame may span with `XDP_USE_SG` in copy mode: the kernel
/// builds the frame as a socket buffer with at most `MAX_SKB_FRAGS` (17)
/// fragments and refuses a longer chain (`EOVERFLOW` in net/xdp/xsk.c).
pub(crate) const MAX_SG_DESCS: usize = 17;

/// What the steering program's `_hash` variants leave in front of each frame
/// they redirect (`struct rx_meta` in steer.bpf.c): hash, hash type, magic.
const META_LEN: usize = 12;
const META_MAGIC: u32 = 0x6c72_4d31;
const META_NO_HASH: u32 = u32::MAX;

/// The device's RSS hash of a received frame and its type
/// (`enum xdp_rss_hash_type`), from the XDP metadata area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RxHash {
    pub(crate) value: u32,
    pub(crate) kind: u32,
}

/// Why opening a queue failed, before it becomes a `NicError`.
#[derive(Debug)]
pub(crate) enum OpenError {
    /// UMEM creation failed (`xsk_umem__create`, the mmap).
    Umem(std::io::Error),
    /// Socket creation or bind failed (`xsk_socket__create`, XDP attach).
    Socket(std::io::Error),
    /// A configuration value xsk-rs refused.
    Config(NicConfigError),
}

fn io_of(e: &(dyn std::error::Error + 'static), what: &str) -> std::io::Error {
    match e.source().and_then(|s| s.downcast_ref::<std::io::Error>()) {
        Some(io) => match io.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(io.kind(), io.to_string()),
        },
        None => std::io::Error::other(format!("{what}: {e}")),
    }
}

/// The sizes of one queue's rings and frames.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sizes {
    /// Entries of each ring; also the frames of each half of the UMEM.
    pub(crate) ring: u32,
    /// Bytes of one UMEM frame.
    pub(crate) frame: u32,
}

/// One bound AF_XDP socket with its UMEM and rings.
pub(crate) struct XskQueue {
    umem: Umem,
    fill: FillQueue,
    comp: CompQueue,
    tx: TxQueue,
    rx: RxQueue,
    /// Transmit frames not in the kernel's hands.
    free: Vec<FrameDesc>,
    /// Descriptors read from a ring in one call (reused, never shrinks).
    scratch: Vec<FrameDesc>,
    /// Receive frames the fill ring did not take back (never expected; kept so
    /// a frame is not lost if it happens).
    refill: Vec<FrameDesc>,
    /// Transmit frames handed to the tx ring and not yet completed.
    in_flight: usize,
    tx_ring: usize,
    /// Bytes a frame may have (the UMEM frame less the kernel's headroom).
    room: usize,
    /// Whether the rings say when they need a kick (`XDP_USE_NEED_WAKEUP`).
    need_wakeup: bool,
    /// Frames per `sendto` kick ([`KICK_BATCH`] unless configured).
    kick_batch: usize,
    /// Read the steering program's metadata in front of each frame.
    rx_meta: bool,
    /// The last descriptor read had `XDP_PKT_CONTD`: the next continues a
    /// frame (and has no metadata of its own).
    in_chain: bool,
    /// Bytes of one UMEM frame.
    frame_size: usize,
    fd: RawFd,
}

impl core::fmt::Debug for XskQueue {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("XskQueue")
            .field("fd", &self.fd)
            .field("free", &self.free.len())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl XskQueue {
    /// Creates the UMEM and binds a socket to `queue` of `interface`.
    pub(crate) fn open(
        interface: &xsk_rs::config::Interface,
        queue: u32,
        sizes: Sizes,
        socket: SocketConfig,
        need_wakeup: bool,
        kick_batch: usize,
    ) -> Result<XskQueue, OpenError> {
        let bad_ring = || OpenError::Config(NicConfigError::RingSize { size: sizes.ring });
        let bad_frame = || OpenError::Config(NicConfigError::FrameSize { size: sizes.frame });
        let ring = xsk_rs::config::QueueSize::new(sizes.ring).map_err(|_| bad_ring())?;
        let frame = xsk_rs::config::FrameSize::new(sizes.frame).map_err(|_| bad_frame())?;
        let umem_cfg = UmemConfig::builder()
            .frame_size(frame)
            .fill_queue_size(ring)
            .comp_queue_size(ring)
            .build()
            .map_err(|_| bad_frame())?;
        let room = umem_cfg.mtu() as usize;
        let count = sizes
            .ring
            .checked_mul(2)
            .and_then(core::num::NonZeroU32::new)
            .ok_or_else(bad_ring)?;
        let (umem, mut descs) =
            Umem::new(umem_cfg, count, false).map_err(|e| OpenError::Umem(io_of(&e, "UMEM")))?;
        // SAFETY: this UMEM is not shared: no socket is bound to this interface
        // and queue through it, so libxdp loads (or shares) the XDP program and
        // owns the fill and completion rings it hands back.
        #[allow(unsafe_code)]
        let (tx, rx, rings) = unsafe { Socket::new(socket, &umem, interface, queue) }
            .map_err(|e| OpenError::Socket(io_of(&e, "AF_XDP socket")))?;
        let (mut fill, comp) = rings.ok_or(OpenError::Config(NicConfigError::SharedUmem))?;
        let free = descs.split_off(sizes.ring as usize);
        // SAFETY: the receive half of this UMEM's descriptors, handed to the
        // kernel once; they come back through the rx ring.
        #[allow(unsafe_code)]
        let filled = unsafe { fill.produce(&descs) };
        let mut refill = Vec::with_capacity(descs.len());
        if filled != descs.len() {
            refill.extend_from_slice(&descs);
        }
        let fd = rx.fd().as_raw_fd();
        Ok(XskQueue {
            umem,
            fill,
            comp,
            tx,
            rx,
            free,
            scratch: vec![FrameDesc::default(); sizes.ring as usize],
            refill,
            in_flight: 0,
            tx_ring: sizes.ring as usize,
            room,
            need_wakeup,
            kick_batch: kick_batch.max(1),
            rx_meta: false,
            in_chain: false,
            frame_size: sizes.frame as usize,
            fd,
        })
    }

    /// Read the RSS hash the steering program puts in front of each frame.
    pub(crate) fn set_rx_meta(&mut self, on: bool) {
        self.rx_meta = on;
    }

    /// The socket's descriptor (polls readable when the rx ring has frames).
    pub(crate) fn fd(&self) -> RawFd {
        self.fd
    }

    /// The largest frame a UMEM frame holds.
    pub(crate) fn room(&self) -> usize {
        self.room
    }

    /// Transmit frames free now (after draining completions).
    pub(crate) fn tx_free(&mut self) -> usize {
        self.complete();
        self.free
            .len()
            .min(self.tx.nb_free(self.tx_ring as u32) as usize)
    }

    /// Moves completed transmit frames back to `free`.
    pub(crate) fn complete(&mut self) {
        loop {
            // SAFETY: the completion ring returns descriptors of this UMEM that
            // the kernel is done with; `scratch` only receives their addresses.
            #[allow(unsafe_code)]
            let n = unsafe { self.comp.consume(&mut self.scratch) };
            if n == 0 {
                break;
            }
            self.free
                .extend_from_slice(self.scratch.get(..n).unwrap_or_default());
            self.in_flight = self.in_flight.saturating_sub(n);
        }
    }

    /// Kicks the kernel to send what waits in the tx ring: in copy mode each
    /// `sendto` moves at most [`KICK_BATCH`] frames (or the configured
    /// budget), so kick once per that many
    /// (the kernel may still stop early when the device is busy; the next call
    /// kicks again).
    pub(crate) fn kick(&mut self) -> std::io::Result<()> {
        let mut kicks = self.pending_tx().div_ceil(self.kick_batch) + 1;
        while self.pending_tx() > 0 && kicks > 0 {
            if self.need_wakeup && !self.tx.needs_wakeup() {
                break;
            }
            self.tx.wakeup()?;
            kicks -= 1;
        }
        self.complete();
        Ok(())
    }

    /// Frames in the tx ring the kernel has not taken yet.
    fn pending_tx(&mut self) -> usize {
        self.tx_ring
            .saturating_sub(self.tx.nb_free_exact() as usize)
            .min(self.in_flight)
    }

    /// Copies each frame of `frames` into free transmit frames, one UMEM
    /// frame per [`XskQueue::room`] bytes (the caller checked that there are
    /// enough, [`XskQueue::tx_free`], and that a frame over one UMEM frame is
    /// sent only with `XDP_USE_SG`), and hands them all to the tx ring, then
    /// kicks. A frame over one UMEM frame goes as a chain of descriptors,
    /// `XDP_PKT_CONTD` on all but the last. A scatter-gather frame is
    /// gathered there, chunk after chunk: the one copy AF_XDP needs of any
    /// frame.
    pub(crate) fn send<'a>(
        &mut self,
        frames: impl ExactSizeIterator<Item = &'a Frame>,
        descs: usize,
    ) -> std::io::Result<usize> {
        let n = frames.len();
        let staged = self.stage(frames, descs)?;
        if staged == 0 {
            return Ok(0);
        }
        Ok(n)
    }

    /// [`XskQueue::send`]'s work; returns the descriptors handed over.
    fn stage<'a>(
        &mut self,
        frames: impl Iterator<Item = &'a Frame>,
        descs: usize,
    ) -> std::io::Result<usize> {
        let n = descs.min(self.free.len());
        let at = self.free.len() - n;
        let mut staged = self.free.split_off(at);
        let room = self.room;
        let mut slots = staged.iter_mut();
        for bytes in frames {
            let mut left = bytes.len();
            let mut chunks = bytes.chunks();
            let mut chunk: &[u8] = chunks.next().unwrap_or_default();
            for desc in slots.by_ref() {
                let this = left.min(room);
                left -= this;
                desc.set_options(if left > 0 { XDP_PKT_CONTD } else { 0 });
                // SAFETY: `desc` came from `free`: a transmit frame of this UMEM
                // that neither the kernel nor anything else holds now.
                #[allow(unsafe_code)]
                let mut data = unsafe { self.umem.data_mut(desc) };
                let mut cursor = data.cursor();
                cursor.set_pos(0);
                let mut need = this;
                while need > 0 {
                    if chunk.is_empty() {
                        chunk = chunks.next().unwrap_or_default();
                        if chunk.is_empty() {
                            break;
                        }
                    }
                    let take = need.min(chunk.len());
                    let (head, rest) = chunk.split_at(take);
                    cursor.write_all(head)?;
                    chunk = rest;
                    need -= take;
                }
                if left == 0 {
                    break;
                }
            }
        }
        // SAFETY: the staged descriptors belong to this UMEM and are handed to
        // the kernel here; they return through the completion ring.
        #[allow(unsafe_code)]
        let sent = unsafe { self.tx.produce(&staged) };
        if sent != staged.len() {
            // The ring had no room for all (produce takes all or none).
            self.free.append(&mut staged);
            return Ok(0);
        }
        self.in_flight += sent;
        self.kick()?;
        Ok(sent)
    }

    /// Hands up to `max` received descriptors to `each` (their bytes, in the
    /// UMEM, valid during the call, and whether more of the same frame follow,
    /// `XDP_PKT_CONTD`), then gives the frames back to the fill ring. Returns
    /// how many were received.
    pub(crate) fn recv(
        &mut self,
        max: usize,
        mut each: impl FnMut(&[u8], bool, Option<RxHash>),
    ) -> usize {
        self.retry_refill();
        let want = max.min(self.scratch.len());
        let Some(descs) = self.scratch.get_mut(..want) else {
            return 0;
        };
        // SAFETY: the rx ring returns descriptors of this UMEM's receive half
        // that the kernel has filled and let go of.
        #[allow(unsafe_code)]
        let n = unsafe { self.rx.consume(descs) };
        let got = self.scratch.get(..n).unwrap_or_default();
        for desc in got {
            // SAFETY: `desc` is a received frame of this UMEM; it goes back to
            // the fill ring only after this read.
            #[allow(unsafe_code)]
            let data = unsafe { self.umem.data(desc) };
            let bytes = data.contents();
            let more = desc.options() & XDP_PKT_CONTD != 0;
            let hash = if self.rx_meta && !self.in_chain {
                self.meta(desc.addr(), bytes)
            } else {
                None
            };
            self.in_chain = more;
            each(bytes, more, hash);
        }
        if n > 0 {
            // SAFETY: the frames just read, handed back to the kernel to fill.
            #[allow(unsafe_code)]
            let back = unsafe { self.fill.produce(got) };
            if back != n {
                self.refill.extend_from_slice(got);
            }
            if self.fill.needs_wakeup() {
                let _ = self.fill.wakeup(self.rx.fd_mut(), 0);
            }
        }
        n
    }

    /// The metadata the steering program left in front of a frame at UMEM
    /// offset `addr` whose bytes are `bytes`, if it is there (its magic).
    fn meta(&self, addr: usize, bytes: &[u8]) -> Option<RxHash> {
        // The kernel puts a received frame `XDP_PACKET_HEADROOM` (256) bytes
        // into its UMEM frame (less the metadata the program reserved): the
        // metadata is within the same UMEM frame, which this call owns.
        if addr % self.frame_size < META_LEN {
            return None;
        }
        let mut m = [0u8; META_LEN];
        #[allow(unsafe_code)]
        // SAFETY: `bytes` starts at UMEM offset `addr`, at least META_LEN
        // bytes after the start of its UMEM frame (checked above); the frame
        // is this queue's, out of the kernel's hands until it is handed back
        // to the fill ring after this read; the UMEM is one mapping, which
        // `bytes` points into.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr().sub(META_LEN), m.as_mut_ptr(), META_LEN);
        }
        let word = |i: usize| {
            m.get(i..i + 4)
                .and_then(|w| <[u8; 4]>::try_from(w).ok())
                .map_or(0, u32::from_ne_bytes)
        };
        let (value, kind, magic) = (word(0), word(4), word(8));
        (magic == META_MAGIC && kind != META_NO_HASH).then_some(RxHash { value, kind })
    }

    fn retry_refill(&mut self) {
        if self.refill.is_empty() {
            return;
        }
        // SAFETY: frames of this UMEM's receive half that no ring holds.
        #[allow(unsafe_code)]
        let back = unsafe { self.fill.produce(&self.refill) };
        if back == self.refill.len() {
            self.refill.clear();
        }
    }

    /// The kernel's drop counts for this socket (`XDP_STATISTICS`).
    pub(crate) fn statistics(&self) -> std::io::Result<XdpStatistics> {
        self.rx.fd().xdp_statistics()
    }
}
