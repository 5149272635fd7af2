//! The AF_XDP backend (Linux, cargo feature `af-xdp`): one AF_XDP socket per
//! queue of a kernel interface, through xsk-rs (which builds libxdp and libbpf).
//!
//! ```no_run
//! use linerate_nic::xdp::{Xdp, XdpConfig};
//! use linerate_nic::{Batch, Nic, Shim, ShimConfig};
//!
//! // Queue 0 of veth0, copy mode, generic (SKB) XDP; needs root.
//! let xdp = Xdp::open(&XdpConfig { mount_bpffs: true, ..XdpConfig::new("veth0") })?;
//! // AF_XDP has no segmentation or checksum offload: the shim does them.
//! let mut nic = Shim::new(xdp, ShimConfig::all())?;
//! let mut batch = Batch::new();
//! nic.readiness(0)?.wait(std::time::Duration::from_millis(100))?;
//! nic.receive(0, &mut batch, 64)?;
//! # Ok::<(), linerate_nic::NicError>(())
//! ```
//!
//! # Queues, UMEM and rings
//!
//! [`Xdp::open`] binds one socket to each of `queues` interface queues starting
//! at [`XdpConfig::first_queue`], each with a UMEM of its own (shared-nothing,
//! like the per-queue runtime): `2 * ring_size` frames of `frame_size` bytes, half
//! for receive (kept in the fill ring), half for transmit. Each socket has its
//! rx, tx, fill and completion rings of `ring_size` entries. Without
//! [`XdpConfig::steer`], libxdp loads its default program, which redirects every
//! frame of a queue with a socket to it; the program goes away with the last
//! socket.
//!
//! # Sharing the interface with the kernel's stack
//!
//! With [`XdpConfig::steer`], linerate loads its own program instead
//! ([`Steering`]; the sockets are created with libxdp's program load
//! inhibited and put in the program's socket map): only the frames of the
//! ports and 4-tuples claimed through it ([`crate::claims::Claims`]), ICMP
//! errors quoting them and traffic for addresses of linerate's own reach the
//! sockets; the kernel's stack gets everything else, so the host's own traffic
//! on the interface goes on. Claimed ports are held in the kernel by bound
//! sockets, so linerate can use the interface's own address and MAC. Hand
//! [`Xdp::steering`] to the runtime (`RuntimeConfig::claims` in linerate-rt).
//!
//! # Data path
//!
//! Receive takes up to `max` descriptors from the rx ring in one step, copies
//! each frame into a [`Pool`] buffer (copy mode copies anyway; the UMEM frame is
//! back in the fill ring before the call returns), and hands the fill ring a
//! kick if it asks for one (`XDP_USE_NEED_WAKEUP`). Transmit drains the
//! completion ring, copies as many frames as there are free transmit frames and
//! tx ring slots into the UMEM, hands them to the tx ring in one step and kicks
//! the kernel with `sendto` (in copy mode, once per 32 frames: that is what the
//! kernel moves per kick). Frames left in the batch had no free frame: call
//! again. Both calls drain the completion ring and re-kick frames the kernel
//! left in the tx ring.
//!
//! # Frames over one UMEM frame
//!
//! With [`XdpConfig::multi_buffer`] (`XDP_USE_SG`, and the steering program's
//! `xdp.frags` variant) a frame may span up to 17 UMEM frames: receive copies a
//! chain of descriptors (`XDP_PKT_CONTD`) into one pool buffer, transmit
//! splits a frame over as many transmit frames. So an MTU of 9000 works with
//! 4 KiB UMEM frames. A received frame longer than the pool's buffers is
//! dropped and counted (`rx_dropped_oversize`), never truncated.
//!
//! # Receive hash
//!
//! With [`SteerConfig::rx_hash`] and a native attach, the steering program is
//! bound to the device and reads the device's RSS hash
//! (`bpf_xdp_metadata_rx_hash`) into the metadata area in front of each frame
//! it redirects; receive hands it over as the frame's `OffloadMeta::rss`.
//!
//! # Offloads
//!
//! None ([`Offloads::NONE`]): AF_XDP has no segmentation, and no checksum
//! offload on a copy-mode device. A super-frame is refused with
//! [`NicError::Unsupported`], a frame over the MTU (or over a UMEM frame, or
//! 17 with multi-buffer) with [`NicError::Oversize`]; wrap the backend in a [`crate::Shim`], which
//! segments, checksums and coalesces in software.
//!
//! # Modes
//!
//! [`XdpAttach`] chooses how the XDP program is attached (native, generic/SKB,
//! or native falling back to generic), [`XdpBind`] whether frames are copied
//! (`XDP_COPY`, the only mode veth has) or zero-copy. With
//! [`XdpConfig::mount_bpffs`], `/sys/fs/bpf` is mounted first if it is not, so
//! libxdp can pin its dispatcher (without it libxdp falls back to one program
//! per interface and says so on stderr).
//!
//! # Errors
//!
//! Without root (`CAP_NET_RAW`, `CAP_NET_ADMIN`, `CAP_BPF`):
//! [`NicError::PermissionDenied`]. A queue the interface lacks (`ethtool -l`):
//! [`NicError::NoQueue`] before anything is allocated. No such interface in the
//! calling thread's network namespace: [`NicError::Io`] of kind `NotFound`. A
//! ring or frame size or an interface name that cannot work:
//! [`NicError::Config`], before anything is allocated.

mod hold;
mod queue;
mod steer;
mod sys;

pub use steer::{SteerConfig, SteerCounts, Steering};

use crate::buf::{Pool, PoolConfig};
use crate::caps::{NicCaps, Offloads};
use crate::check::check_tx;
use crate::counters::{Counter, Counters, Tally, count};
use crate::error::{NicConfigError, NicError, check_ifname};
use crate::frame::{Batch, Frame};
use crate::nic::{Nic, check_queue};
use crate::notify::Readiness;
use crate::pcap::{Direction, Record, Recorder};
use linerate_offload::{OffloadMeta, RssHash, RssHashType};
use queue::{OpenError, Sizes, XskQueue};
use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use xsk_rs::config::{BindFlags, Interface, LibxdpFlags, QueueSize, SocketConfig, XdpFlags};

/// How the XDP program is attached to the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum XdpAttach {
    /// In the driver (`XDP_FLAGS_DRV_MODE`); veth has it.
    Native,
    /// In the generic receive path on socket buffers (`XDP_FLAGS_SKB_MODE`):
    /// works on every device, slowest.
    #[default]
    Generic,
    /// Native, and generic where the driver refuses native.
    Auto,
}

/// Whether frames are copied between the device and the UMEM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum XdpBind {
    /// `XDP_COPY`: the kernel copies (the only mode veth and generic XDP have).
    #[default]
    Copy,
    /// `XDP_ZEROCOPY`: the driver DMAs into the UMEM. Where the driver lacks
    /// it (veth, generic attach), [`Xdp::open`] fails with
    /// [`NicConfigError::ZeroCopy`].
    ZeroCopy,
    /// Zero-copy where the driver has it, copy otherwise (the kernel picks at
    /// bind; [`Xdp::zero_copy`] says which it chose).
    Auto,
}

/// Preferred busy polling (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
/// `SO_BUSY_POLL_BUDGET` on each socket): the device's queue is polled in the
/// receive call (a non-blocking `recvfrom` per call) instead of by its
/// interrupt's softirq, which the kernel then defers
/// (`napi_defer_hard_irqs`, `gro_flush_timeout` on the interface, set by the
/// administrator). For a queue thread that polls without sleeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BusyPoll {
    /// `SO_PREFER_BUSY_POLL`: the kernel leaves the queue to the busy poller.
    pub prefer: bool,
    /// `SO_BUSY_POLL`: microseconds one poll may spin.
    pub usecs: u32,
    /// `SO_BUSY_POLL_BUDGET`: packets one poll may handle (over
    /// `net.core.busy_poll_budget`, only with `CAP_NET_ADMIN`).
    pub budget: u16,
}

impl Default for BusyPoll {
    /// Preferred, 20 µs, 64 packets (what the kernel's AF_XDP documentation
    /// and the xdpsock sample use).
    fn default() -> BusyPoll {
        BusyPoll {
            prefer: true,
            usecs: 20,
            budget: 64,
        }
    }
}

/// How to open an interface's queues with AF_XDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpConfig {
    /// The interface, in the calling thread's network namespace.
    pub interface: String,
    /// The interface queue the NIC's queue 0 binds to.
    pub first_queue: u32,
    /// Number of queues (one socket each), `first_queue` onwards.
    pub queues: u16,
    /// How to attach the XDP program.
    pub attach: XdpAttach,
    /// Copy or zero-copy.
    pub bind: XdpBind,
    /// `XDP_USE_NEED_WAKEUP`: kick the kernel only when the rings ask for it.
    /// On (the default) saves a system call per batch where the driver's
    /// softirq does the work (native drivers, zero-copy); off kicks every
    /// batch, which suits veth and copy mode, where the kick itself moves the
    /// frames.
    pub need_wakeup: bool,
    /// Entries of each ring (rx, tx, fill, completion; a power of two);
    /// each queue's UMEM has twice as many frames. Default 2048: a receive
    /// burst of that many frames waits in the ring while the thread is away.
    pub ring_size: u32,
    /// Bytes of one UMEM frame: 2048 or 4096 (a power of two, at least 2048);
    /// the largest frame is this less 256 bytes of XDP headroom.
    pub frame_size: u32,
    /// Mount a BPF file system at `/sys/fs/bpf` first if none is there.
    pub mount_bpffs: bool,
    /// The MTU enforced on transmit; `None`: the interface's.
    pub mtu: Option<u16>,
    /// The receive pool; `None`: buffers as large as the largest frame
    /// (a UMEM frame, or the MTU's frame with [`XdpConfig::multi_buffer`]).
    pub pool: Option<PoolConfig>,
    /// `XDP_USE_SG`: frames larger than a UMEM frame (an MTU of 9000 with
    /// 4 KiB frames) arrive as chains of descriptors (`XDP_PKT_CONTD`), which
    /// receive copies into one buffer, and transmit splits such frames over
    /// as many UMEM frames (at most 17, what the kernel's copy mode takes).
    /// The steering program is then its `xdp.frags` variant. A frame over
    /// the receive pool's buffers is dropped and counted
    /// (`rx_dropped_oversize`), never truncated. Default off: without it the
    /// MTU is what one UMEM frame holds.
    pub multi_buffer: bool,
    /// Frames one `sendto` kick asks the kernel to move: its copy-mode
    /// budget (`TX_BATCH_SIZE`, 32, in net/xdp/xsk.c; settable per socket
    /// with `XDP_MAX_TX_SKB_BUDGET` on kernels that have it). Default 32.
    pub tx_kick_batch: usize,
    /// `Some`: load linerate's steering program ([`Steering`]), which sends
    /// linerate only the frames it owns and the kernel the rest. `None`:
    /// libxdp's default program, which sends linerate every frame of its
    /// queues.
    pub steer: Option<SteerConfig>,
    /// Preferred busy polling on each socket; `None` (the default): none.
    pub busy_poll: Option<BusyPoll>,
}

impl XdpConfig {
    /// Queue 0 of `interface`, copy mode, generic attach, need-wakeup, rings of
    /// 2048, 4 KiB frames, the interface's MTU, bpffs left as it is, one
    /// buffer per frame, kicks of 32 frames, no busy polling.
    pub fn new(interface: impl Into<String>) -> XdpConfig {
        XdpConfig {
            interface: interface.into(),
            first_queue: 0,
            queues: 1,
            attach: XdpAttach::Generic,
            bind: XdpBind::Copy,
            need_wakeup: true,
            ring_size: 2048,
            frame_size: 4096,
            mount_bpffs: false,
            mtu: None,
            pool: None,
            steer: None,
            multi_buffer: false,
            tx_kick_batch: queue::KICK_BATCH,
            busy_poll: None,
        }
    }
}

/// The kernel's counts for one socket (`XDP_STATISTICS`, as `xdpsock` prints).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdpStats {
    /// Frames dropped for other reasons (no fill entry, too long).
    pub rx_dropped: u64,
    /// Frames dropped because of an invalid fill descriptor.
    pub rx_invalid_descs: u64,
    /// Frames dropped because the rx ring was full.
    pub rx_ring_full: u64,
    /// Times the fill ring was found empty.
    pub rx_fill_ring_empty_descs: u64,
    /// Transmit descriptors the kernel refused.
    pub tx_invalid_descs: u64,
    /// Times the tx ring was found empty.
    pub tx_ring_empty_descs: u64,
}

/// An interface's queues opened with AF_XDP.
pub struct Xdp {
    interface: String,
    queues: Vec<XskQueue>,
    attach: XdpAttach,
    mounted_bpffs: bool,
    caps: NicCaps,
    pool: Pool,
    counters: Counters,
    recorder: Option<Arc<dyn Recorder>>,
    /// linerate's program and maps, when [`XdpConfig::steer`] asked for them;
    /// after `queues`, so the sockets close first.
    steering: Option<Arc<Steering>>,
    /// `XDP_USE_SG` is on ([`XdpConfig::multi_buffer`]).
    multi_buffer: bool,
    /// The sockets are bound zero-copy.
    zero_copy: bool,
    /// Descriptors one transmitted frame may span.
    max_descs: usize,
    /// Receive drives the device's queue ([`XdpConfig::busy_poll`]).
    busy_poll: bool,
    /// Per queue, the frame whose descriptors are being chained.
    partial: Vec<Partial>,
    /// The longest frame receive keeps (the pool's buffer length).
    rx_max: usize,
}

/// A received frame whose descriptors have not all been read yet
/// (`XDP_PKT_CONTD`): the kernel puts all of a frame's descriptors in the rx
/// ring at once, but one receive call may stop within them.
#[derive(Default)]
struct Partial {
    buf: Option<crate::buf::PacketBuf>,
    /// Bytes of the frame so far (also when it went over and is dropped).
    len: usize,
    /// Its offload metadata (the device's hash, from its first descriptor).
    meta: OffloadMeta,
}

/// `XDP_RSS_L3_IPV4`, `_L3_IPV6`, `_L4`, `_L4_TCP`, `_L4_UDP` of the kernel's
/// `enum xdp_rss_hash_type` (include/net/xdp.h).
const RSS_L3_IPV4: u32 = 1 << 0;
const RSS_L3_IPV6: u32 = 1 << 1;
const RSS_L4: u32 = 1 << 3;
const RSS_L4_TCP: u32 = 1 << 4;
const RSS_L4_UDP: u32 = 1 << 5;

/// A received frame's offload metadata: the device's RSS hash, if the
/// steering program read one (its checksums unverified, as every frame here).
/// What the hash covers comes from its type; a device that only says "L4"
/// (veth: `skb->l4_hash`) gets the family and protocol from the frame.
fn rx_meta(frame: &[u8], hash: Option<queue::RxHash>) -> OffloadMeta {
    let Some(h) = hash else {
        return OffloadMeta::plain();
    };
    let ethertype = frame
        .get(12..14)
        .and_then(|t| <[u8; 2]>::try_from(t).ok())
        .map(u16::from_be_bytes);
    let v4 = h.kind & RSS_L3_IPV4 != 0 || (h.kind & RSS_L3_IPV6 == 0 && ethertype == Some(0x0800));
    let v6 = h.kind & RSS_L3_IPV6 != 0 || (!v4 && ethertype == Some(0x86dd));
    let proto = if h.kind & RSS_L4_TCP != 0 {
        Some(6)
    } else if h.kind & RSS_L4_UDP != 0 {
        Some(17)
    } else if h.kind & RSS_L4 != 0 {
        frame.get(if v4 { 23 } else { 20 }).copied()
    } else {
        None
    };
    let kind = match (v4, v6, proto) {
        (true, _, Some(6)) => RssHashType::TcpIpv4,
        (true, _, Some(17)) => RssHashType::UdpIpv4,
        (true, _, _) => RssHashType::Ipv4,
        (false, true, Some(6)) => RssHashType::TcpIpv6,
        (false, true, Some(17)) => RssHashType::UdpIpv6,
        (false, true, _) => RssHashType::Ipv6,
        _ => return OffloadMeta::plain(),
    };
    OffloadMeta {
        rss: Some(RssHash {
            value: h.value,
            kind,
        }),
        ..OffloadMeta::plain()
    }
}

impl core::fmt::Debug for Xdp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Xdp")
            .field("interface", &self.interface)
            .field("queues", &self.queues)
            .field("attach", &self.attach)
            .finish_non_exhaustive()
    }
}

/// `EPERM`/`EACCES` become [`NicError::PermissionDenied`].
fn os_error(what: &'static str, error: io::Error) -> NicError {
    match error.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => NicError::PermissionDenied { what, error },
        _ => NicError::Io(error),
    }
}

fn open_error(e: OpenError, cfg: &XdpConfig) -> NicError {
    match e {
        OpenError::Socket(e)
            if cfg.bind == XdpBind::ZeroCopy
                && matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) =>
        {
            NicError::Config(NicConfigError::ZeroCopy {
                interface: cfg.interface.clone(),
                error: e.to_string(),
            })
        }
        OpenError::Umem(e) => os_error("creating an AF_XDP UMEM", e),
        OpenError::Socket(e) => os_error("binding an AF_XDP socket", e),
        OpenError::Config(e) => NicError::Config(e),
    }
}

impl Xdp {
    /// Opens `cfg.queues` queues of `cfg.interface` (see the module docs).
    pub fn open(cfg: &XdpConfig) -> Result<Xdp, NicError> {
        check_ifname(&cfg.interface)?;
        let ring = QueueSize::new(cfg.ring_size).map_err(|_| NicConfigError::RingSize {
            size: cfg.ring_size,
        })?;
        if cfg.frame_size < 2048 || !cfg.frame_size.is_power_of_two() {
            return Err(NicConfigError::FrameSize {
                size: cfg.frame_size,
            }
            .into());
        }
        let queues = cfg.queues.max(1);
        // Before anything is allocated: the interface and its queues.
        let if_mtu = sys::mtu(&cfg.interface)?;
        if let Some(have) = sys::queues(&cfg.interface)? {
            let last = cfg.first_queue.saturating_add(u32::from(queues) - 1);
            if last >= have {
                return Err(NicError::NoQueue {
                    queue: cfg.first_queue.max(have) as usize,
                    queues: have as usize,
                });
            }
        }
        let mounted_bpffs = if cfg.mount_bpffs {
            sys::ensure_bpffs(c"/sys/fs/bpf").map_err(|e| os_error("mounting bpffs", e))?
        } else {
            false
        };
        let name: Interface = cfg
            .interface
            .parse()
            .map_err(|_| NicConfigError::InterfaceName {
                name: cfg.interface.clone(),
            })?;
        let mut bind = match cfg.bind {
            XdpBind::Copy => BindFlags::XDP_COPY,
            XdpBind::ZeroCopy => BindFlags::XDP_ZEROCOPY,
            XdpBind::Auto => BindFlags::empty(),
        };
        if cfg.need_wakeup {
            bind |= BindFlags::XDP_USE_NEED_WAKEUP;
        }
        if cfg.multi_buffer {
            bind |= BindFlags::XDP_USE_SG;
        }
        // linerate's own program first: the sockets then only bind, with
        // libxdp's program load inhibited.
        let steering = match &cfg.steer {
            Some(steer) => {
                let ifindex = sys::ifindex(&cfg.interface)?;
                // The socket map takes every queue of the interface, for
                // other processes on the others (`steer` module docs).
                let end = cfg.first_queue.saturating_add(u32::from(queues));
                let end = end.max(sys::queues(&cfg.interface)?.unwrap_or(0));
                let s = Steering::attach(ifindex, cfg.attach, end, steer, cfg.multi_buffer)
                    .map_err(|e| os_error("attaching the steering XDP program", e))?;
                Some(Arc::new(s))
            }
            None => None,
        };
        let libxdp = if steering.is_some() {
            LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD
        } else {
            LibxdpFlags::empty()
        };
        let socket = |attach| {
            let flags = match attach {
                XdpAttach::Native => XdpFlags::XDP_FLAGS_DRV_MODE,
                XdpAttach::Generic | XdpAttach::Auto => XdpFlags::XDP_FLAGS_SKB_MODE,
            };
            SocketConfig::builder()
                .rx_queue_size(ring)
                .tx_queue_size(ring)
                .bind_flags(bind)
                .xdp_flags(flags)
                .libxdp_flags(libxdp)
                .build()
        };
        let sizes = Sizes {
            ring: cfg.ring_size,
            frame: cfg.frame_size,
        };
        let kick = cfg.tx_kick_batch;
        let mut attach = steering.as_ref().map_or(cfg.attach, |s| s.attach_mode());
        let mut opened = Vec::with_capacity(usize::from(queues));
        for i in 0..u32::from(queues) {
            let id = cfg.first_queue + i;
            let q = if attach == XdpAttach::Auto {
                match XskQueue::open(
                    &name,
                    id,
                    sizes,
                    socket(XdpAttach::Native),
                    cfg.need_wakeup,
                    kick,
                ) {
                    Ok(q) => {
                        attach = XdpAttach::Native;
                        q
                    }
                    Err(OpenError::Socket(e))
                        if !matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) =>
                    {
                        attach = XdpAttach::Generic;
                        let sock = socket(XdpAttach::Generic);
                        XskQueue::open(&name, id, sizes, sock, cfg.need_wakeup, kick)
                            .map_err(|e| open_error(e, cfg))?
                    }
                    Err(e) => return Err(open_error(e, cfg)),
                }
            } else {
                XskQueue::open(&name, id, sizes, socket(attach), cfg.need_wakeup, kick)
                    .map_err(|e| open_error(e, cfg))?
            };
            let mut q = q;
            if let Some(b) = cfg.busy_poll {
                sys::set_busy_poll(q.fd(), b.prefer, b.usecs, b.budget)
                    .map_err(|e| os_error("setting busy polling on an AF_XDP socket", e))?;
            }
            if let Some(s) = &steering {
                q.set_rx_meta(s.rx_hash());
                s.add_socket(id, q.fd())
                    .map_err(|e| os_error("adding a socket to the steering program", e))?;
            }
            opened.push(q);
        }
        let room = opened.first().map_or(0, XskQueue::room);
        let zero_copy = match opened.first() {
            Some(q) => sys::zero_copy(q.fd()).map_err(NicError::Io)?,
            None => false,
        };
        // The MTU is what a UMEM frame holds (or, multi-buffer, a chain of
        // them), less the Ethernet header and two VLAN tags, at most.
        // A chain never longer than the tx ring (a frame it cannot hold at
        // once would never go).
        let max_descs = queue::MAX_SG_DESCS.min(cfg.ring_size as usize);
        let frame_max = if cfg.multi_buffer {
            room * max_descs
        } else {
            room
        };
        let fits =
            u16::try_from(frame_max.saturating_sub(crate::ETH_HEADER_LEN + 8)).unwrap_or(u16::MAX);
        let mtu = cfg
            .mtu
            .unwrap_or_else(|| u16::try_from(if_mtu).unwrap_or(u16::MAX))
            .min(fits);
        let largest = usize::from(mtu) + crate::ETH_HEADER_LEN + 8;
        let pool = Pool::new(cfg.pool.unwrap_or(PoolConfig {
            buf_len: room.max(largest).max(PoolConfig::mtu().buf_len),
            ..PoolConfig::mtu()
        }));
        let rx_max = pool.config().buf_len;
        Ok(Xdp {
            interface: cfg.interface.clone(),
            queues: opened,
            attach,
            mounted_bpffs,
            caps: NicCaps {
                mtu,
                queues,
                offloads: Offloads::NONE,
                ..NicCaps::plain()
            },
            pool,
            counters: Counters::new(usize::from(queues)),
            recorder: None,
            steering,
            multi_buffer: cfg.multi_buffer,
            zero_copy,
            busy_poll: cfg.busy_poll.is_some(),
            max_descs,
            partial: (0..queues).map(|_| Partial::default()).collect(),
            rx_max,
        })
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// How the XDP program is attached ([`XdpAttach::Auto`] resolved).
    pub fn attach_mode(&self) -> XdpAttach {
        self.attach
    }

    /// linerate's steering program and maps ([`XdpConfig::steer`]): hand it
    /// to the runtime as its [`crate::claims::Claims`]. The program stays
    /// attached while a clone of it lives.
    pub fn steering(&self) -> Option<&Arc<Steering>> {
        self.steering.as_ref()
    }

    /// Whether [`Xdp::open`] mounted `/sys/fs/bpf` (it stays mounted).
    pub fn mounted_bpffs(&self) -> bool {
        self.mounted_bpffs
    }

    /// Whether the sockets are bound zero-copy (`XDP_OPTIONS_ZEROCOPY`): what
    /// [`XdpBind::Auto`] chose.
    pub fn zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// `queue`'s socket's `SO_BUSY_POLL` in microseconds, as the kernel
    /// holds it ([`XdpConfig::busy_poll`]).
    pub fn busy_poll_usecs(&self, queue: usize) -> Result<u32, NicError> {
        sys::busy_poll(self.queue(queue)?.fd()).map_err(NicError::Io)
    }

    /// Whether frames may span several UMEM frames (`XDP_USE_SG`).
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// The largest frame a UMEM frame holds.
    pub fn frame_room(&self) -> usize {
        self.queues.first().map_or(0, XskQueue::room)
    }

    /// The kernel's drop counts for `queue`'s socket.
    pub fn statistics(&self, queue: usize) -> Result<XdpStats, NicError> {
        let s = self.queue(queue)?.statistics()?;
        Ok(XdpStats {
            rx_dropped: s.rx_dropped(),
            rx_invalid_descs: s.rx_invalid_descs(),
            rx_ring_full: s.rx_ring_full(),
            rx_fill_ring_empty_descs: s.rx_fill_ring_empty_descs(),
            tx_invalid_descs: s.tx_invalid_descs(),
            tx_ring_empty_descs: s.tx_ring_empty_descs(),
        })
    }

    fn queue(&self, queue: usize) -> Result<&XskQueue, NicError> {
        self.queues.get(queue).ok_or(NicError::NoQueue {
            queue,
            queues: self.queues.len(),
        })
    }

    fn record(&self, dir: Direction, queue: usize, frames: &[Frame]) {
        if let Some(r) = &self.recorder {
            let time = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO);
            let mut gathered = Vec::new();
            for f in frames {
                // As on the wire: a scatter-gather frame gathered (a copy only
                // while recording).
                let frame = f.contiguous(&mut gathered);
                r.record(&Record {
                    dir,
                    queue,
                    frame,
                    meta: &f.meta,
                    time,
                });
            }
        }
    }
}

impl Nic for Xdp {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.queues.len())?;
        let Some(q) = self.queues.get_mut(queue) else {
            return Ok(0);
        };
        // Frames the kernel left in the tx ring, and completions to recycle.
        q.kick()?;
        if self.busy_poll {
            sys::busy_poll_kick(q.fd());
        }
        let before = batch.len();
        let pool = &self.pool;
        let mut short = 0u64;
        let mut over = 0u64;
        let rx_max = self.rx_max;
        let Some(partial) = self.partial.get_mut(queue) else {
            return Ok(0);
        };
        q.recv(max, |bytes, more, hash| {
            let meta = rx_meta(bytes, hash);
            if !more && partial.len == 0 {
                // The common case: the whole frame in one descriptor.
                if bytes.len() < crate::ETH_HEADER_LEN {
                    short += 1;
                } else if bytes.len() > rx_max {
                    over += 1;
                } else {
                    batch.push(Frame::new(pool.alloc_from(bytes), meta));
                }
                return;
            }
            if partial.len == 0 {
                partial.meta = meta;
            }
            // A chain: gathered into one buffer, unless it grows past what
            // the pool's buffers hold (then it is counted, not truncated).
            partial.len += bytes.len();
            if partial.len <= rx_max {
                partial
                    .buf
                    .get_or_insert_with(|| pool.alloc())
                    .extend_from_slice(bytes);
            } else {
                partial.buf = None;
            }
            if more {
                return;
            }
            match partial.buf.take() {
                Some(b) if b.len() >= crate::ETH_HEADER_LEN => {
                    batch.push(Frame::new(b, partial.meta));
                }
                Some(_) => short += 1,
                None => over += 1,
            }
            partial.len = 0;
        });
        let mut tally = Tally::default();
        tally.add(Counter::RxDroppedMalformed, short);
        tally.add(Counter::RxDroppedOversize, over);
        let got = batch.get(before..).unwrap_or_default();
        count(&mut tally, got, false);
        tally.flush(&self.counters, queue);
        self.record(Direction::Rx, queue, got);
        Ok(batch.len() - before)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.queues.len())?;
        let Some(q) = self.queues.get_mut(queue) else {
            return Ok(0);
        };
        let free = q.tx_free();
        let room = q.room();
        let limit = if self.multi_buffer {
            room * self.max_descs
        } else {
            room
        };
        let mut ok = 0;
        let mut descs = 0;
        let mut failure = None;
        for f in batch.iter() {
            if let Err(refused) = check_tx(&self.caps, f) {
                failure = Some(refused);
                break;
            }
            if f.len() > limit {
                failure = Some((
                    NicError::Oversize {
                        len: f.len(),
                        limit,
                    },
                    Counter::TxDroppedOversize,
                ));
                break;
            }
            let need = f.len().div_ceil(room).max(1);
            if descs + need > free {
                break;
            }
            descs += need;
            ok += 1;
        }
        let sent = if ok > 0 {
            q.send(batch.iter().take(ok), descs)?
        } else {
            q.kick()?;
            0
        };
        let mut tally = Tally::default();
        let done = batch.get(..sent).unwrap_or_default();
        count(&mut tally, done, true);
        self.record(Direction::Tx, queue, done);
        batch.drain(..sent);
        let result = match failure {
            // The refused frame is at the front only if all before it went.
            Some((e, c)) if sent == ok => {
                tally.add(c, 1);
                if !batch.is_empty() {
                    batch.remove(0);
                }
                Err(e)
            }
            _ => Ok(sent),
        };
        tally.flush(&self.counters, queue);
        result
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        Ok(Readiness::Fd(self.queue(queue)?.fd()))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Scatter-gather frames are gathered into the UMEM frame they are sent
    /// in: the one copy AF_XDP makes of any frame.
    fn tx_sg(&self) -> bool {
        true
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.recorder = recorder;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(r: Result<Xdp, NicError>) -> io::ErrorKind {
        match r {
            Err(NicError::Io(e)) => e.kind(),
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }

    #[test]
    fn refuses_bad_sizes_before_touching_the_kernel() {
        let bad_ring = XdpConfig {
            ring_size: 1000,
            ..XdpConfig::new("lo")
        };
        assert!(matches!(
            Xdp::open(&bad_ring),
            Err(NicError::Config(NicConfigError::RingSize { size: 1000 }))
        ));
        for frame_size in [1024, 3000] {
            let bad_frame = XdpConfig {
                frame_size,
                ..XdpConfig::new("lo")
            };
            assert!(matches!(
                Xdp::open(&bad_frame),
                Err(NicError::Config(NicConfigError::FrameSize { size })) if size == frame_size
            ));
        }
    }

    #[test]
    fn a_missing_interface_is_not_found() {
        let cfg = XdpConfig::new("lrnoSuchIf0");
        assert_eq!(kind(Xdp::open(&cfg)), io::ErrorKind::NotFound);
        let cfg = XdpConfig::new("a-name-longer-than-15");
        assert!(matches!(
            Xdp::open(&cfg),
            Err(NicError::Config(NicConfigError::InterfaceName { name })) if name == cfg.interface
        ));
    }

    #[test]
    fn loopback_mtu_is_read() {
        assert!(sys::mtu("lo").is_ok_and(|m| m >= 1500));
        assert!(sys::is_bpffs(c"/proc").is_ok_and(|b| !b));
    }
}
