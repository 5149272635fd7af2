//! The TAP backend (Linux): a kernel network interface whose wire is this process.
//!
//! [`Tap::open`] opens `/dev/net/tun` once per queue with `IFF_TAP | IFF_NO_PI |
//! IFF_VNET_HDR` (plus `IFF_MULTI_QUEUE` for more than one queue), sets a 12-byte
//! little-endian `virtio_net_hdr_v1` (`TUNSETVNETHDRSZ`, `TUNSETVNETLE`) and turns
//! on the kernel's offloads with `TUNSETOFFLOAD`.
//!
//! # Offloads, and which way they point
//!
//! `TUNSETOFFLOAD` says what *this side* accepts from the kernel: with `TUN_F_CSUM`
//! the kernel may hand over frames whose checksum is left partial; with
//! `TUN_F_TSO4`/`TSO6`/`TSO_ECN`/`USO4|USO6` it may hand over 64 KiB super-frames.
//! [`Tap::open`] probes: it asks for every flag, drops one on `EINVAL`, most
//! recent first (UDP tunnel GSO, USO, TSO ECN, TSO6, TSO4), and asks again; what
//! stuck is [`Tap::offloads_available`]. It then keeps what [`TapConfig`] asked for
//! ([`Tap::offloads_enabled`]). The UDP-tunnel flags are probed but never left on:
//! tunnel super-frames need the 24-byte header, which this backend does not use yet.
//!
//! The other way, the kernel always accepts what a `virtio_net_hdr` can say: frames
//! with a partial checksum and TCP (and, where USO is known, UDP) super-frames. So
//! [`NicCaps::offloads`] has `tx_csum`, `tso4`, `tso6`, `tso_ecn` and (on kernels
//! with USO) `uso`; and `lro` when the kernel may send super-frames.
//!
//! # Data path
//!
//! Receive reads until `EAGAIN` or the batch is full: one `read(2)` per frame,
//! straight into a pooled buffer, the header landing in its headroom. Transmit
//! writes the header into the headroom in front of each frame and the two with one
//! `write(2)`. The MTU in [`TapConfig`] is enforced on transmit (set the kernel
//! interface's MTU to match). Readiness is the queue's file descriptor.
//!
//! The interface disappears when the [`Tap`] is dropped (it is not persistent); it
//! may be moved into another network namespace meanwhile, and the descriptors keep
//! working.

mod vnet;

use crate::buf::{Pool, PoolConfig};
use crate::caps::{NicCaps, Offloads};
use crate::check::check_tx;
use crate::counters::{Counter, Counters, Tally, count};
use crate::frame::{Batch, Frame};
use crate::nic::{Nic, NicError, check_queue};
use crate::notify::Readiness;
use crate::pcap::{Direction, Record, Recorder};
use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use vnet::VnetHdr;

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
        }
    }
}

/// A TAP interface, one descriptor per queue.
pub struct Tap {
    name: String,
    fds: Vec<OwnedFd>,
    caps: NicCaps,
    available: TapOffloads,
    enabled: TapOffloads,
    /// Whether the kernel takes USO super-frames from this side.
    uso_in: bool,
    pool: Pool,
    counters: Counters,
    recorder: Option<Arc<dyn Recorder>>,
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

fn ifreq(name: &str, flags: libc::c_short) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?}: at most 15 bytes, no NUL"),
        ));
    }
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
            sys::ioctl_ptr(&fd, libc::TUNSETIFF, &mut req)?;
            name = name_of(&req);
            let mut size: libc::c_int = vnet::LEN as libc::c_int;
            sys::ioctl_ptr(&fd, libc::TUNSETVNETHDRSZ, &mut size)?;
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
        let pool = Pool::new(cfg.pool.unwrap_or(PoolConfig {
            buf_len: 65_536 + 512,
            ..PoolConfig::super_frames()
        }));
        let mut tap = Tap {
            name,
            fds,
            caps: NicCaps {
                mtu: cfg.mtu,
                queues,
                ..NicCaps::plain()
            },
            available,
            enabled: TapOffloads::NONE,
            uso_in: available.uso,
            pool,
            counters: Counters::new(usize::from(queues)),
            recorder: None,
        };
        tap.set_offloads(cfg.offloads)?;
        Ok(tap)
    }

    /// Turns the kernel's offloads toward this side to `want`, as far as the
    /// kernel has them (UDP tunnel flags stay off), and returns what is on.
    pub fn set_offloads(&mut self, want: TapOffloads) -> Result<TapOffloads, NicError> {
        let mut bits = want.bits() & self.available.bits();
        bits &= !(TUN_F_UDP_TUNNEL_GSO | TUN_F_UDP_TUNNEL_GSO_CSUM);
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
            lro: self.enabled.any_gso(),
            ..Offloads::NONE
        };
        Ok(self.enabled)
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offloads the kernel accepted when probed.
    pub fn offloads_available(&self) -> TapOffloads {
        self.available
    }

    /// The offloads on now.
    pub fn offloads_enabled(&self) -> TapOffloads {
        self.enabled
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
            for f in frames {
                r.record(&Record {
                    dir,
                    queue,
                    frame: f.bytes(),
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
    fn write_one(&self, fd: &OwnedFd, f: &mut Frame) -> Result<(), WriteFail> {
        check_tx(&self.caps, f).map_err(|(e, c)| WriteFail::Refused(e, c))?;
        let meta = f.meta;
        let frame_len = f.len();
        let hdr = VnetHdr::from_meta(&meta, || {
            let layout = meta
                .layout
                .or_else(|| linerate_wire::layout::parse(f.bytes()).ok());
            layout.map_or(0, |l| l.payload)
        })
        .ok_or(WriteFail::Refused(
            NicError::InvalidMeta {
                what: "tunnel segmentation needs the 24-byte virtio header",
            },
            Counter::TxDroppedUnsupported,
        ))?;
        let Some((out, len)) = f.buf.with_header(vnet::LEN) else {
            return Err(WriteFail::Refused(
                NicError::Buffer(crate::BufError::Headroom {
                    need: vnet::LEN,
                    have: f.buf.headroom(),
                }),
                Counter::TxDroppedInvalid,
            ));
        };
        hdr.encode(out);
        match sys::write(fd, out.get(..len).unwrap_or_default()) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(WriteFail::WouldBlock),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Err(WriteFail::Refused(
                NicError::Rejected {
                    len: frame_len,
                    error: e,
                },
                Counter::TxDroppedInvalid,
            )),
            Err(e) => Err(WriteFail::Refused(
                NicError::Io(e),
                Counter::TxDroppedInvalid,
            )),
        }
    }
}

impl Nic for Tap {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.fds.len())?;
        let fd = self.fd(queue)?;
        let before = batch.len();
        let mut tally = Tally::default();
        let room = self.pool.config().buf_len;
        let mut result = Ok(());
        while batch.len() - before < max {
            let mut buf = self.pool.alloc();
            let area = buf.read_area(vnet::LEN, room + 1);
            let area_len = area.len();
            let n = match sys::read(fd, area) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    result = Err(NicError::Io(e));
                    break;
                }
            };
            if n >= area_len {
                tally.add(Counter::RxDroppedTruncated, 1);
                continue;
            }
            let meta = VnetHdr::decode(area.get(..n).unwrap_or_default()).and_then(|h| h.to_meta());
            let Some(meta) = meta.filter(|_| n >= vnet::LEN + crate::ETH_HEADER_LEN) else {
                tally.add(Counter::RxDroppedMalformed, 1);
                continue;
            };
            buf.set_frame(n - vnet::LEN);
            batch.push(Frame::new(buf, meta));
        }
        let got = batch.get(before..).unwrap_or_default();
        count(&mut tally, got, false);
        tally.flush(&self.counters, queue);
        self.record(Direction::Rx, queue, got);
        result.map(|()| batch.len() - before)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.fds.len())?;
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
        self.record(Direction::Tx, queue, done);
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
        tally.flush(&self.counters, queue);
        result
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        Ok(Readiness::Fd(self.fd(queue)?.as_raw_fd()))
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.recorder = recorder;
    }
}
