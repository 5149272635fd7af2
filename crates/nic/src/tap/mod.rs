//! The TAP backend (Linux): a kernel network interface whose wire is this process.
//!
//! [`Tap::open`] opens `/dev/net/tun` once per queue with `IFF_TAP | IFF_NO_PI |
//! IFF_VNET_HDR` (plus `IFF_MULTI_QUEUE` for more than one queue), sets a
//! little-endian `virtio_net_hdr` (`TUNSETVNETHDRSZ`, `TUNSETVNETLE`) and turns on
//! the kernel's offloads with `TUNSETOFFLOAD`. The header is converted with
//! [`linerate_offload::virtio`]: the 24-byte `virtio_net_hdr_v1_hash_tunnel`
//! ([`HdrLen::V1HashTunnel`]) where the kernel accepts the UDP-tunnel offload
//! flags (Linux 6.17+), else the 12-byte `virtio_net_hdr_v1` ([`HdrLen::V1`]).
//!
//! Scatter-gather frames are taken ([`Nic::tx_sg`]): one whose header needs
//! nothing from its bytes goes out with writev(2) (`virtio_net_hdr` and head,
//! then the payload where it lies), so the kernel's copy into its skb is the
//! only one; another is gathered first.
//!
//! # Offloads, and which way they point
//!
//! `TUNSETOFFLOAD` says what *this side* accepts from the kernel: with `TUN_F_CSUM`
//! the kernel may hand over frames whose checksum is left partial; with
//! `TUN_F_TSO4`/`TSO6`/`TSO_ECN`/`USO4|USO6` it may hand over 64 KiB super-frames.
//! [`Tap::open`] probes: it asks for every flag, drops one on `EINVAL`, most
//! recent first (UDP tunnel GSO, USO, TSO ECN, TSO6, TSO4), and asks again; what
//! stuck is [`Tap::offloads_available`]. It then keeps what [`TapConfig`] asked for
//! ([`Tap::offloads_enabled`]). The UDP-tunnel flags are left on only with the
//! 24-byte header ([`Tap::header_len`]), which tunnel super-frames need.
//!
//! The other way, the kernel always accepts what a `virtio_net_hdr` can say: frames
//! with a partial checksum and TCP (and, where USO is known, UDP) super-frames. So
//! [`NicCaps::offloads`] has `tx_csum`, `tso4`, `tso6`, `tso_ecn` and (on kernels
//! with USO) `uso`; `tunnel_udp` and `tunnel_udp_csum` when the UDP-tunnel flags
//! are on (the kernel takes tunnel super-frames only then); and `lro` when the
//! kernel may send super-frames. GSO inside GRE has no virtio form: wrap the TAP
//! in a [`crate::Shim`] to have it segmented in software.
//!
//! # Data path
//!
//! Receive reads until `EAGAIN` or the batch is full: one `read(2)` per frame,
//! straight into a pooled buffer, the header landing in its headroom. Transmit
//! writes the header into the headroom in front of each frame and the two with one
//! `write(2)`. The MTU in [`TapConfig`] is enforced on transmit (set the kernel
//! interface's MTU to match). Readiness is the queue's file descriptor.
//!
//! # Batched mode (io_uring)
//!
//! With [`TapConfig::io_uring`] set, each queue gets an io_uring of that depth
//! (the `uring` module): half its entries are receive buffers, half are
//! writes. Receive keeps a read posted per buffer, or with
//! [`TapConfig::io_uring_multishot`] runs one multishot read into a ring of
//! provided pool buffers (Linux 6.7+). It reaps completed reads from the
//! completion queue (no system call when there are some), gives the kernel
//! new buffers (or posts the reads again), and submits with one
//! `io_uring_enter` when there is something to arm or it found nothing;
//! transmit queues one write (writev for a scatter-gather
//! frame) per frame and submits the batch with one `io_uring_enter`. A sent
//! frame's buffers stay in the ring until its write's completion is reaped.
//! Readiness is then an eventfd the ring writes on every completion.
//!
//! A write that fails in the kernel is known only at its completion: it is
//! counted then (`tx_dropped_invalid`, or `tx_dropped_link_down` for `EIO`)
//! and not returned as an error, since its batch has returned already;
//! frames refused before the write (MTU, header) are refused as without
//! the ring. Where the ring cannot be set up (an old kernel, a seccomp
//! profile that refuses `io_uring_setup`, `io_uring_disabled`), [`Tap::open`]
//! falls back to the system-call path and says why in
//! [`Tap::io_uring_fallback`]; callers that log (the tunnel endpoint) log
//! it as a warning. [`Tap::ring_stats`] shows the batching.
//!
//! The interface disappears when the [`Tap`] is dropped (it is not persistent); it
//! may be moved into another network namespace meanwhile, and the descriptors keep
//! working.

use crate::buf::{Pool, PoolConfig};
use crate::caps::{NicCaps, Offloads};
use crate::check::check_tx;
use crate::counters::{Counter, Counters, Tally, count};
use crate::error::{NicConfigError, NicError, check_ifname};
use crate::frame::{Batch, Frame};
use crate::nic::{Nic, check_queue};
use crate::notify::Readiness;
use crate::pcap::{Direction, Record, Recorder};
use crate::sys;
use linerate_offload::virtio::{HdrLen, VirtioError, VirtioNetHdr, flags, gso_type};
use linerate_offload::{Checksum, OffloadMeta};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

mod steer;
mod uring;
pub use steer::{NEIGHBORS_CAPACITY, PORTS_CAPACITY, TapSteering};
pub use uring::RingStats;

const IFF_TAP: libc::c_short = 0x0002;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;

const TUN_F_CSUM: libc::c_ulong = 0x01;
const TUN_F_TSO4: libc::c_ulong = 0x02;
const TUN_F_TSO6: libc::c_ulong = 0x04;
const TUN_F_TSO_ECN: libc::c_ulong = 0x08;
const TUN_F_USO4: libc::c_ulong = 0x20;
const TUN_F_USO6: libc::c_ulong = 0x40;
const TUN_F_UDP_TUNNEL_GSO: libc::c_ulong = 0x80;
const TUN_F_UDP_TUNNEL_GSO_CSUM: libc::c_ulong = 0x100;

/// The `TUNSETOFFLOAD` flags: what the kernel may hand this side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TapOffloads {
    /// `TUN_F_CSUM`: frames with a partial checksum.
    pub csum: bool,
    /// `TUN_F_TSO4`: TCP/IPv4 super-frames.
    pub tso4: bool,
    /// `TUN_F_TSO6`: TCP/IPv6 super-frames.
    pub tso6: bool,
    /// `TUN_F_TSO_ECN`: TCP super-frames with CWR on the first segment.
    pub tso_ecn: bool,
    /// `TUN_F_USO4 | TUN_F_USO6` (Linux 6.2+, set together): UDP super-datagrams.
    pub uso: bool,
    /// `TUN_F_UDP_TUNNEL_GSO` (Linux 6.17+): super-frames in a UDP tunnel.
    pub udp_tunnel: bool,
    /// `TUN_F_UDP_TUNNEL_GSO_CSUM`: the same with outer UDP checksums.
    pub udp_tunnel_csum: bool,
}

impl TapOffloads {
    /// Nothing: the kernel segments and checksums everything itself.
    pub const NONE: TapOffloads = TapOffloads {
        csum: false,
        tso4: false,
        tso6: false,
        tso_ecn: false,
        uso: false,
        udp_tunnel: false,
        udp_tunnel_csum: false,
    };

    /// Every flag.
    pub const ALL: TapOffloads = TapOffloads {
        csum: true,
        tso4: true,
        tso6: true,
        tso_ecn: true,
        uso: true,
        udp_tunnel: true,
        udp_tunnel_csum: true,
    };

    /// Checksums and TCP segmentation: what every kernel since 2.6 has.
    pub const TSO: TapOffloads = TapOffloads {
        csum: true,
        tso4: true,
        tso6: true,
        tso_ecn: true,
        ..TapOffloads::NONE
    };

    fn bits(self) -> libc::c_ulong {
        let mut b = 0;
        for (on, bit) in [
            (self.csum, TUN_F_CSUM),
            (self.tso4, TUN_F_TSO4),
            (self.tso6, TUN_F_TSO6),
            (self.tso_ecn, TUN_F_TSO_ECN),
            (self.uso, TUN_F_USO4 | TUN_F_USO6),
            (self.udp_tunnel, TUN_F_UDP_TUNNEL_GSO),
            (self.udp_tunnel_csum, TUN_F_UDP_TUNNEL_GSO_CSUM),
        ] {
            if on {
                b |= bit;
            }
        }
        b
    }

    fn from_bits(b: libc::c_ulong) -> TapOffloads {
        TapOffloads {
            csum: b & TUN_F_CSUM != 0,
            tso4: b & TUN_F_TSO4 != 0,
            tso6: b & TUN_F_TSO6 != 0,
            tso_ecn: b & TUN_F_TSO_ECN != 0,
            uso: b & (TUN_F_USO4 | TUN_F_USO6) == TUN_F_USO4 | TUN_F_USO6,
            udp_tunnel: b & TUN_F_UDP_TUNNEL_GSO != 0,
            udp_tunnel_csum: b & TUN_F_UDP_TUNNEL_GSO_CSUM != 0,
        }
    }

    /// True if the kernel may hand over super-frames.
    pub fn any_gso(&self) -> bool {
        self.tso4 || self.tso6 || self.uso || self.udp_tunnel
    }
}

/// How to open a TAP interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapConfig {
    /// Interface name (at most 15 bytes); a `%d` in it, or an empty name
    /// (`tap%d`), lets the kernel pick the number.
    pub name: String,
    /// Number of queues (one descriptor each; more than one sets
    /// `IFF_MULTI_QUEUE`).
    pub queues: u16,
    /// The offloads to leave on (of those the kernel has).
    pub offloads: TapOffloads,
    /// The MTU enforced on transmit (match the interface's).
    pub mtu: u16,
    /// The receive pool; its `buf_len` bounds the frames read (a longer frame is
    /// dropped, `rx_dropped_truncated`). `None`: sized for 64 KiB super-frames.
    pub pool: Option<PoolConfig>,
    /// The transmit offloads this side lets the kernel do (checksum completion,
    /// segmentation), of those it can: [`Offloads::ALL`] by default. Less makes
    /// the TAP present fewer offloads (say, to have a [`crate::Shim`] segment in
    /// software, for tests and measurements). Receive flags here are ignored.
    pub tx: Offloads,
    /// Batched mode: an io_uring of this many entries per queue (half for
    /// receive buffers, half for writes; rounded up to a power of two, at
    /// most 4096). `None` (the default): one `read(2)`/`write(2)` per frame.
    pub io_uring: Option<u32>,
    /// In batched mode, receive through one multishot read over provided
    /// buffers (`true`; Linux 6.7+, else reads kept posted), or through
    /// reads kept posted, one per buffer (`false`, the default). Posted reads
    /// all wait on the TAP and all wake for each frame (about eight poll arms
    /// per frame at light load, where the multishot read arms once); at a
    /// saturating load they are read inline at submit and delivered 5-10 %
    /// more through the VTEP than the multishot read in the measurements of
    /// docs/performance.md, which is why they stay the default.
    pub io_uring_multishot: bool,
}

impl TapConfig {
    /// One queue named `name`, checksum and TCP segmentation offloads, MTU 1500.
    pub fn new(name: impl Into<String>) -> TapConfig {
        TapConfig {
            name: name.into(),
            queues: 1,
            offloads: TapOffloads::TSO,
            mtu: NicCaps::ETHERNET_MTU,
            pool: None,
            tx: Offloads::ALL,
            io_uring: None,
            io_uring_multishot: false,
        }
    }
}

/// A TAP interface, one descriptor per queue.
pub struct Tap {
    name: String,
    fds: Vec<OwnedFd>,
    /// The interface's queue this Tap's queue 0 is ([`Tap::split`]).
    base: usize,
    caps: NicCaps,
    available: TapOffloads,
    enabled: TapOffloads,
    /// Whether the kernel takes USO super-frames from this side.
    uso_in: bool,
    /// The `virtio_net_hdr` layout in front of every frame.
    hdr: HdrLen,
    /// The transmit offloads this side lets the kernel do.
    tx: Offloads,
    pool: Pool,
    counters: Counters,
    recorder: Option<Arc<dyn Recorder>>,
    /// The batched mode's ring of each queue (`None`: system calls).
    rings: Vec<Option<uring::Ring>>,
    /// Why the batched mode asked for could not be set up.
    ring_error: Option<Arc<io::Error>>,
}

impl core::fmt::Debug for Tap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Tap")
            .field("name", &self.name)
            .field("queues", &self.fds.len())
            .field("enabled", &self.enabled)
            .finish_non_exhaustive()
    }
}

/// The MTU of interface `name` in the calling thread's network namespace
/// (`SIOCGIFMTU`); `NotFound` if there is none of that name.
pub fn interface_mtu(name: &str) -> std::io::Result<u32> {
    crate::sys::mtu(name)
}

fn ifreq(name: &str, flags: libc::c_short) -> Result<libc::ifreq, NicConfigError> {
    check_ifname(name)?;
    let bytes = name.as_bytes();
    // An all-zero ifreq is valid: a NUL name and a zero union.
    let mut req = libc::ifreq {
        ifr_name: [0; libc::IFNAMSIZ],
        ifr_ifru: libc::__c_anonymous_ifr_ifru { ifru_flags: 0 },
    };
    for (d, &s) in req.ifr_name.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = flags;
    Ok(req)
}

fn name_of(req: &libc::ifreq) -> String {
    let bytes: Vec<u8> = req
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Sets the `virtio_net_hdr` size of a queue.
fn set_hdr_len(fd: &OwnedFd, len: HdrLen) -> io::Result<()> {
    let mut size = libc::c_int::try_from(len.bytes()).unwrap_or(12);
    sys::ioctl_ptr(fd, libc::TUNSETVNETHDRSZ, &mut size)
}

/// The metadata of a received frame from its header. A frame that does not
/// parse (not IP, say) is kept when the header asks nothing of it; `None` if
/// the header is unusable (the frame is dropped as malformed).
fn rx_meta(head: &[u8], frame: &[u8], len: HdrLen) -> Option<OffloadMeta> {
    let h = VirtioNetHdr::read(head, len).ok()?;
    match h.to_meta(frame) {
        Ok(meta) => Some(meta),
        Err(VirtioError::Layout(_))
            if h.gso_type == gso_type::NONE && h.flags & flags::NEEDS_CSUM == 0 =>
        {
            Some(OffloadMeta {
                csum: if h.flags & flags::DATA_VALID != 0 {
                    Checksum::Verified { levels: 1 }
                } else {
                    Checksum::None
                },
                ..OffloadMeta::plain()
            })
        }
        Err(_) => None,
    }
}

/// Asks for `want`; on `EINVAL` drops the most recent flag still asked for and
/// asks again. Returns what stuck.
fn probe_offloads(fd: &OwnedFd, want: libc::c_ulong) -> io::Result<libc::c_ulong> {
    const DROP_ORDER: [libc::c_ulong; 7] = [
        TUN_F_UDP_TUNNEL_GSO_CSUM,
        TUN_F_UDP_TUNNEL_GSO,
        TUN_F_USO4 | TUN_F_USO6,
        TUN_F_TSO_ECN,
        TUN_F_TSO6,
        TUN_F_TSO4,
        TUN_F_CSUM,
    ];
    let mut flags = want;
    let mut next = DROP_ORDER.iter();
    loop {
        match sys::ioctl_val(fd, libc::TUNSETOFFLOAD, flags) {
            Ok(()) => return Ok(flags),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) && flags != 0 => {
                let Some(drop) = next.find(|&&d| flags & d != 0) else {
                    return Err(e);
                };
                flags &= !drop;
            }
            Err(e) => return Err(e),
        }
    }
}

impl Tap {
    /// Creates the interface and opens its queues.
    pub fn open(cfg: &TapConfig) -> Result<Tap, NicError> {
        let queues = cfg.queues.max(1);
        let mut flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
        if queues > 1 {
            flags |= IFF_MULTI_QUEUE;
        }
        let mut name = if cfg.name.is_empty() {
            "tap%d".to_owned()
        } else {
            cfg.name.clone()
        };
        let mut fds = Vec::with_capacity(usize::from(queues));
        for _ in 0..queues {
            let fd = sys::open_rw_nonblock(c"/dev/net/tun")?;
            let mut req = ifreq(&name, flags)?;
            sys::ioctl_ptr(&fd, libc::TUNSETIFF, &mut req).map_err(|error| {
                match error.raw_os_error() {
                    Some(libc::EPERM | libc::EACCES) => NicError::PermissionDenied {
                        what: "creating a TAP interface (TUNSETIFF)",
                        error,
                    },
                    _ => NicError::Io(error),
                }
            })?;
            name = name_of(&req);
            set_hdr_len(&fd, HdrLen::V1)?;
            let mut le: libc::c_int = 1;
            // A v1 header is little-endian anyway; this only matters on
            // big-endian hosts, so an old kernel's EINVAL is not fatal.
            if let Err(e) = sys::ioctl_ptr(&fd, libc::TUNSETVNETLE, &mut le)
                && e.raw_os_error() != Some(libc::EINVAL)
            {
                return Err(e.into());
            }
            fds.push(fd);
        }
        let first = fds.first().ok_or(NicError::NoQueue {
            queue: 0,
            queues: 0,
        })?;
        let available = TapOffloads::from_bits(probe_offloads(first, TapOffloads::ALL.bits())?);
        // Tunnel super-frames need the 24-byte header: use it where the kernel
        // has the tunnel offload, and only there (older kernels refuse 24).
        let mut hdr = HdrLen::V1;
        if available.udp_tunnel
            && fds
                .iter()
                .all(|fd| set_hdr_len(fd, HdrLen::V1HashTunnel).is_ok())
        {
            hdr = HdrLen::V1HashTunnel;
        } else {
            for fd in &fds {
                set_hdr_len(fd, HdrLen::V1)?;
            }
        }
        let pool = Pool::new(cfg.pool.unwrap_or(PoolConfig {
            buf_len: 65_536 + 512,
            ..PoolConfig::super_frames()
        }));
        let mut tap = Tap {
            name,
            fds,
            base: 0,
            caps: NicCaps {
                mtu: cfg.mtu,
                queues,
                ..NicCaps::plain()
            },
            available,
            enabled: TapOffloads::NONE,
            uso_in: available.uso,
            hdr,
            tx: Offloads {
                lro: true,
                rx_csum: true,
                ..cfg.tx
            },
            pool,
            counters: Counters::new(usize::from(queues)),
            recorder: None,
            rings: Vec::new(),
            ring_error: None,
        };
        tap.set_offloads(cfg.offloads)?;
        if let Some(depth) = cfg.io_uring {
            let rings: io::Result<Vec<uring::Ring>> = tap
                .fds
                .iter()
                .map(|fd| uring::Ring::new(fd, depth, cfg.io_uring_multishot))
                .collect();
            match rings {
                Ok(r) => tap.rings = r.into_iter().map(Some).collect(),
                // Rings already made are dropped; their queues' descriptors
                // may have been made blocking, so made non-blocking again.
                Err(e) => {
                    for fd in &tap.fds {
                        let _ = sys::set_nonblocking(fd, true);
                    }
                    tap.ring_error = Some(Arc::new(e));
                }
            }
        }
        Ok(tap)
    }

    /// Turns the kernel's offloads toward this side to `want`, as far as the
    /// kernel has them (UDP tunnel flags only with the 24-byte header), and
    /// returns what is on.
    pub fn set_offloads(&mut self, want: TapOffloads) -> Result<TapOffloads, NicError> {
        let mut bits = want.bits() & self.available.bits();
        if self.hdr != HdrLen::V1HashTunnel {
            bits &= !(TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM);
        }
        if bits & TUN_F_CSUM == 0 {
            // Segmentation without checksum offload is refused by the kernel.
            bits = 0;
        }
        if let Some(fd) = self.fds.first() {
            sys::ioctl_val(fd, libc::TUNSETOFFLOAD, bits)?;
        }
        self.enabled = TapOffloads::from_bits(bits);
        self.caps.offloads = Offloads {
            tx_csum: true,
            tso4: true,
            tso6: true,
            tso_ecn: true,
            uso: self.uso_in,
            tunnel_udp: self.enabled.udp_tunnel,
            tunnel_udp_csum: self.enabled.udp_tunnel_csum,
            lro: self.enabled.any_gso(),
            ..Offloads::NONE
        }
        .intersect(self.tx);
        Ok(self.enabled)
    }

    /// The receive filter of [`Nic::set_multicast_filter`], through
    /// `TUNSETTXFILTER` (what the kernel transmits on the TAP is what this side
    /// receives): `unicast` and the broadcast address matched exactly, `groups`
    /// through the tun driver's 64-bit hash of group addresses (a group that
    /// shares a hash bucket with a wanted one gets through too, and the
    /// engine drops it). The kernel drops the rest, and counts them in the
    /// interface's `tx_dropped`. All-zero `unicast` turns the filter off.
    pub fn set_filter(&mut self, unicast: [u8; 6], groups: &[[u8; 6]]) -> Result<(), NicError> {
        let mut addrs: Vec<[u8; 6]> = Vec::with_capacity(groups.len() + 2);
        if unicast != [0; 6] {
            addrs.push(unicast);
            addrs.push([0xff; 6]);
            // Exact matches hold 8 addresses; the tun driver hashes the
            // rest, which must then be group addresses.
            addrs.extend(groups.iter().filter(|g| g[0] & 1 == 1));
        }
        let count = u16::try_from(addrs.len()).unwrap_or(u16::MAX);
        // struct tun_filter { __u16 flags; __u16 count; __u8 addr[][6]; }
        let mut buf = Vec::with_capacity(4 + 6 * addrs.len());
        buf.extend_from_slice(&0u16.to_ne_bytes());
        buf.extend_from_slice(&count.to_ne_bytes());
        for a in addrs.iter().take(usize::from(count)) {
            buf.extend_from_slice(a);
        }
        if let Some(fd) = self.fds.first() {
            sys::ioctl_buf(fd, libc::TUNSETTXFILTER, &mut buf)?;
        }
        Ok(())
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the kernel interface's MTU to `mtu` and enforces it on transmit
    /// here too (the [`TapConfig::mtu`] of an open TAP). The kernel side then
    /// sends no frame longer than that (a host's `ping -M do` beyond it fails
    /// locally with "message too long"). Needs `CAP_NET_ADMIN`.
    pub fn set_interface_mtu(&mut self, mtu: u16) -> Result<(), NicError> {
        crate::sys::set_mtu(&self.name, u32::from(mtu))?;
        self.caps.mtu = mtu;
        Ok(())
    }

    /// The `virtio_net_hdr` layout in use: 24 bytes where the kernel has the UDP
    /// tunnel offload, else 12.
    pub fn header_len(&self) -> HdrLen {
        self.hdr
    }

    /// The offloads the kernel accepted when probed.
    pub fn offloads_available(&self) -> TapOffloads {
        self.available
    }

    /// The offloads on now.
    pub fn offloads_enabled(&self) -> TapOffloads {
        self.enabled
    }

    /// The interface's queue index of this Tap's first queue (0, or its
    /// place in the Tap it was split from: [`Tap::split`]).
    pub fn first_queue(&self) -> usize {
        self.base
    }

    /// The same queues with a buffer pool and counters of their own, for a
    /// process forked from the one that opened them: the copies it
    /// inherited may have been held by threads that did not follow it
    /// through `fork`. They are left alone (not dropped).
    pub fn renew(self) -> Tap {
        let pool = Pool::new(self.pool.config());
        let counters = Counters::new(self.base + self.fds.len());
        let mut t = self;
        std::mem::forget(std::mem::replace(&mut t.pool, pool));
        std::mem::forget(std::mem::replace(&mut t.counters, counters));
        std::mem::forget(std::mem::take(&mut t.rings));
        t.recorder = None;
        t
    }

    /// Splits a TAP of several queues into one `Tap` per queue (its queue 0 is
    /// the interface's queue `i`), so that each can be owned by the thread that
    /// serves it, with nothing locked between them; they share the pool and the
    /// counters (kept in the interface's queue numbering). The interface goes
    /// away when the last of them is dropped.
    pub fn split(self) -> Vec<Tap> {
        if self.fds.len() <= 1 {
            return vec![self];
        }
        let Tap {
            name,
            fds,
            base,
            caps,
            available,
            enabled,
            uso_in,
            hdr,
            tx,
            pool,
            counters,
            recorder,
            rings,
            ring_error,
        } = self;
        let mut rings = rings.into_iter();
        fds.into_iter()
            .enumerate()
            .map(|(q, fd)| Tap {
                name: name.clone(),
                fds: vec![fd],
                base: base + q,
                caps: NicCaps { queues: 1, ..caps },
                available,
                enabled,
                uso_in,
                hdr,
                tx,
                pool: pool.clone(),
                counters: counters.clone(),
                recorder: recorder.clone(),
                rings: rings.next().into_iter().collect(),
                ring_error: ring_error.clone(),
            })
            .collect()
    }

    /// True if the queues run batched through io_uring ([`TapConfig::io_uring`]).
    pub fn io_uring_active(&self) -> bool {
        self.rings.iter().any(Option::is_some)
    }

    /// Why the io_uring asked for in [`TapConfig::io_uring`] could not be set
    /// up (the TAP then does one system call per frame); `None` if it was, or
    /// was not asked for.
    pub fn io_uring_fallback(&self) -> Option<&io::Error> {
        self.ring_error.as_deref()
    }

    /// How much queue `queue`'s ring batched; `None` without a ring.
    pub fn ring_stats(&self, queue: usize) -> Option<RingStats> {
        self.rings.get(queue)?.as_ref().map(|r| r.stats)
    }

    fn fd(&self, queue: usize) -> Result<&OwnedFd, NicError> {
        self.fds.get(queue).ok_or(NicError::NoQueue {
            queue,
            queues: self.fds.len(),
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

/// Why a TAP write of one frame did not complete.
enum WriteFail {
    /// The frame is refused (dropped, counted, reported).
    Refused(NicError, Counter),
    /// The queue is full: stop, keep the frame.
    WouldBlock,
}

impl Tap {
    /// Checks `f` against the caps, makes its pieces fit one writev, and
    /// writes its `virtio_net_hdr` into its headroom.
    fn prepare(&self, f: &mut Frame) -> Result<(), WriteFail> {
        check_tx(&self.caps, f).map_err(|(e, c)| WriteFail::Refused(e, c))?;
        let plain = f.meta.gso.is_none() && f.meta.rss.is_none() && f.meta.csum == Checksum::None;
        if !plain && !f.is_linear() {
            // The header is read from the frame's headers: they must be in its
            // head, and the pieces few enough for one writev; else gathered
            // here, once.
            let head = f.head_len();
            let in_head = f.with_probe(|p| {
                linerate_wire::layout::parse(p).is_ok_and(|l| l.header_len() <= head)
            });
            if !in_head || f.frags.len() >= sys::MAX_IOV {
                f.linearize();
            }
        }
        let hdr = if plain {
            // Nothing to say: skip parsing the frame.
            Ok(VirtioNetHdr::default())
        } else {
            // The header is read from the frame's headers, in its head (a
            // scatter-gather super-frame's are: `check_tx`), parsed against
            // its whole length; the payload stays where it is.
            let meta = f.meta;
            f.with_probe(|probe| VirtioNetHdr::from_meta(&meta, probe))
        };
        let hdr = hdr.map_err(|e| {
            let counter = match e {
                VirtioError::Unrepresentable | VirtioError::NeedsTunnelHeader => {
                    Counter::TxDroppedUnsupported
                }
                _ => Counter::TxDroppedInvalid,
            };
            WriteFail::Refused(NicError::Virtio(e), counter)
        })?;
        let hlen = self.hdr.bytes();
        let have = f.buf.headroom();
        let Some((out, _)) = f.buf.with_header(hlen) else {
            return Err(WriteFail::Refused(
                NicError::Buffer(crate::BufError::Headroom { need: hlen, have }),
                Counter::TxDroppedInvalid,
            ));
        };
        hdr.write(out, self.hdr)
            .map_err(|e| WriteFail::Refused(NicError::Virtio(e), Counter::TxDroppedUnsupported))?;
        Ok(())
    }

    fn write_one(&self, fd: &OwnedFd, f: &mut Frame) -> Result<(), WriteFail> {
        self.prepare(f)?;
        let frame_len = f.len();
        let hlen = self.hdr.bytes();
        let have = f.buf.headroom();
        let Some((out, len)) = f.buf.with_header(hlen) else {
            return Err(WriteFail::Refused(
                NicError::Buffer(crate::BufError::Headroom { need: hlen, have }),
                Counter::TxDroppedInvalid,
            ));
        };
        let head = out.get(..len).unwrap_or_default();
        // A scatter-gather frame goes out gathered by the kernel (writev): its
        // payload is copied once, into the kernel's skb, as a linear one is.
        let written = match f.frags.as_slice() {
            [] => sys::write(fd, head),
            chain if chain.len() < sys::MAX_IOV => sys::writev_all(fd, head, chain),
            chain => {
                // A chain (a GRO run forwarded as it came): gathered here, once.
                let mut whole = Vec::with_capacity(head.len() + f.frags.total_len());
                whole.extend_from_slice(head);
                for frag in chain {
                    whole.extend_from_slice(frag.bytes());
                }
                sys::write(fd, &whole)
            }
        };
        match written {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(WriteFail::WouldBlock),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(WriteFail::Refused(
                NicError::Rejected {
                    len: frame_len,
                    error: e,
                },
                Counter::TxDroppedInvalid,
            )),
            // The link is down (the kernel's tun driver refuses writes to
            // a device that is not up): dropped and counted, not fatal.
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Err(WriteFail::Refused(
                NicError::LinkDown,
                Counter::TxDroppedLinkDown,
            )),
            Err(e) => Err(WriteFail::Refused(
                NicError::Io(e),
                Counter::TxDroppedInvalid,
            )),
        }
    }
}

/// Counts the writes that failed in the kernel since the last look.
fn tally_tx_failed(ring: &mut uring::Ring, tally: &mut Tally) {
    for errno in ring.tx_failed.drain(..) {
        let c = if errno == libc::EIO {
            Counter::TxDroppedLinkDown
        } else {
            Counter::TxDroppedInvalid
        };
        tally.add(c, 1);
    }
}

impl Tap {
    /// [`Nic::receive`] through the queue's ring: completed reads handed up,
    /// their slots posted again (see the module docs for when it submits).
    fn receive_ring(
        &mut self,
        queue: usize,
        batch: &mut Batch,
        max: usize,
    ) -> Result<usize, NicError> {
        let hlen = self.hdr.bytes();
        let room = self.pool.config().buf_len;
        let before = batch.len();
        let mut tally = Tally::default();
        let mut result = Ok(());
        let Some(ring) = self.rings.get_mut(queue).and_then(Option::as_mut) else {
            return Ok(0);
        };
        for last_look in [false, true] {
            ring.reap();
            ring.settle()?;
            if let Some(errno) = ring.rx_failed.take()
                && errno != libc::EIO
                && result.is_ok()
            {
                result = Err(NicError::Io(io::Error::from_raw_os_error(errno)));
            }
            while batch.len() - before < max {
                let Some((mut buf, res)) = ring.next_read() else {
                    break;
                };
                let Ok(n) = usize::try_from(res) else {
                    // Nothing to read from a device that is down; another
                    // error is the caller's, once.
                    if res != -libc::EIO && result.is_ok() {
                        result = Err(NicError::Io(io::Error::from_raw_os_error(-res)));
                    }
                    continue;
                };
                // The same area the read was posted into.
                let area = buf.read_area(hlen, room + 1);
                if n >= area.len() {
                    tally.add(Counter::RxDroppedTruncated, 1);
                    continue;
                }
                let (head, frame) = area.get(..n).unwrap_or_default().split_at(hlen.min(n));
                if frame.len() < crate::ETH_HEADER_LEN {
                    tally.add(Counter::RxDroppedMalformed, 1);
                    continue;
                }
                let Some(meta) = rx_meta(head, frame, self.hdr) else {
                    tally.add(Counter::RxDroppedMalformed, 1);
                    continue;
                };
                buf.set_frame(n - hlen);
                batch.push(Frame::new(buf, meta));
            }
            ring.post_reads(&self.pool, hlen, room);
            if batch.len() > before || last_look {
                // Frames found: the caller polls again before it sleeps, so
                // the reposted reads may wait for a fuller submit.
                if ring.queued() >= ring.read_slots() / 2 {
                    ring.submit()?;
                }
                break;
            }
            // Nothing: every read goes to the kernel, the eventfd is cleared,
            // and the completion queue gets one more look; a completion after
            // it leaves the eventfd readable.
            ring.submit()?;
            ring.drain_event();
        }
        tally_tx_failed(ring, &mut tally);
        let got = batch.get(before..).unwrap_or_default();
        count(&mut tally, got, false);
        tally.flush(&self.counters, self.base + queue);
        self.record(Direction::Rx, self.base + queue, got);
        result.map(|()| batch.len() - before)
    }

    /// [`Nic::transmit`] through the queue's ring: a write queued per frame
    /// (as many as there are free slots), one submit for the batch.
    fn transmit_ring(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let hlen = self.hdr.bytes();
        let room = match self.rings.get_mut(queue).and_then(Option::as_mut) {
            Some(ring) => {
                ring.reap();
                ring.write_room()
            }
            None => 0,
        };
        let mut ready = 0;
        let mut failure = None;
        for f in batch.iter_mut().take(room) {
            if f.frags.len() >= sys::MAX_IOV {
                f.linearize();
            }
            match self.prepare(f) {
                Ok(()) => ready += 1,
                Err(WriteFail::WouldBlock) => break,
                Err(WriteFail::Refused(e, c)) => {
                    failure = Some((e, c));
                    break;
                }
            }
        }
        let mut tally = Tally::default();
        let done = batch.get(..ready).unwrap_or_default();
        count(&mut tally, done, true);
        self.record(Direction::Tx, self.base + queue, done);
        let Some(ring) = self.rings.get_mut(queue).and_then(Option::as_mut) else {
            return Ok(0);
        };
        for f in batch.drain(..ready) {
            if ring.queue_write(f, hlen).is_err() {
                // Not reached: the room was counted and the header checked.
                tally.add(Counter::TxDroppedInvalid, 1);
            }
        }
        let submitted = ring.submit();
        // Writes to a TAP complete within the submit: their buffers go back
        // to the pool now rather than at the next call.
        ring.reap();
        tally_tx_failed(ring, &mut tally);
        let result = match failure {
            Some((e, c)) => {
                tally.add(c, 1);
                if !batch.is_empty() {
                    batch.remove(0);
                }
                Err(e)
            }
            None => submitted.map(|()| ready).map_err(NicError::Io),
        };
        tally.flush(&self.counters, self.base + queue);
        result
    }
}

impl Nic for Tap {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        self.set_filter(unicast, groups)?;
        Ok(unicast != [0; 6])
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.fds.len())?;
        if self.rings.get(queue).is_some_and(Option::is_some) {
            return self.receive_ring(queue, batch, max);
        }
        let fd = self.fd(queue)?;
        let before = batch.len();
        let mut tally = Tally::default();
        let room = self.pool.config().buf_len;
        let mut result = Ok(());
        while batch.len() - before < max {
            let mut buf = self.pool.alloc();
            let hlen = self.hdr.bytes();
            let area = buf.read_area(hlen, room + 1);
            let area_len = area.len();
            let n = match sys::read(fd, area) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                // Nothing to read from a device that is down.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => break,
                Err(e) => {
                    result = Err(NicError::Io(e));
                    break;
                }
            };
            if n >= area_len {
                tally.add(Counter::RxDroppedTruncated, 1);
                continue;
            }
            let (head, frame) = area.get(..n).unwrap_or_default().split_at(hlen.min(n));
            if frame.len() < crate::ETH_HEADER_LEN {
                tally.add(Counter::RxDroppedMalformed, 1);
                continue;
            }
            let Some(meta) = rx_meta(head, frame, self.hdr) else {
                tally.add(Counter::RxDroppedMalformed, 1);
                continue;
            };
            buf.set_frame(n - hlen);
            batch.push(Frame::new(buf, meta));
        }
        let got = batch.get(before..).unwrap_or_default();
        count(&mut tally, got, false);
        tally.flush(&self.counters, self.base + queue);
        self.record(Direction::Rx, self.base + queue, got);
        result.map(|()| batch.len() - before)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.fds.len())?;
        if self.rings.get(queue).is_some_and(Option::is_some) {
            return self.transmit_ring(queue, batch);
        }
        let fd = self.fd(queue)?;
        let mut sent = 0;
        let mut failure = None;
        for f in batch.iter_mut() {
            match self.write_one(fd, f) {
                Ok(()) => sent += 1,
                Err(WriteFail::WouldBlock) => break,
                Err(WriteFail::Refused(e, c)) => {
                    failure = Some((e, c));
                    break;
                }
            }
        }
        let mut tally = Tally::default();
        let done = batch.get(..sent).unwrap_or_default();
        count(&mut tally, done, true);
        self.record(Direction::Tx, self.base + queue, done);
        batch.drain(..sent);
        let result = match failure {
            Some((e, c)) => {
                tally.add(c, 1);
                if !batch.is_empty() {
                    batch.remove(0);
                }
                Err(e)
            }
            None => Ok(sent),
        };
        tally.flush(&self.counters, self.base + queue);
        result
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        if let Some(Some(ring)) = self.rings.get(queue) {
            return Ok(Readiness::Fd(ring.event_fd()));
        }
        Ok(Readiness::Fd(self.fd(queue)?.as_raw_fd()))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Scatter-gather frames are written with writev(2): the kernel gathers
    /// them into its skb, the one copy it makes of any frame.
    fn tx_sg(&self) -> bool {
        true
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.recorder = recorder;
    }
}
