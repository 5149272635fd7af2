//! What both kinds of impaired run share: the transfer's settings and result,
//! the kernel's per-namespace TCP switches, a TAP in a namespace.

use super::model::{ImpairCounters, Impairment};
use super::nic::ImpairedStats;
use super::tcp_info::TcpInfo;
use crate::netns::{self, Netns};
use linerate_nic::tap::{Tap, TapConfig, TapOffloads};
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;

/// Which way the data goes. "Linerate" is the engine in the linerate run and
/// the second kernel in its place in the reference run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The kernel sends, linerate (or the kernel in its place) receives.
    KernelToLinerate,
    /// Linerate (or the kernel in its place) sends, the kernel receives.
    LinerateToKernel,
}

impl Direction {
    /// Both directions.
    pub const BOTH: [Direction; 2] = [Direction::KernelToLinerate, Direction::LinerateToKernel];

    /// A short name for tables: `k->l` or `l->k`.
    pub fn short(self) -> &'static str {
        match self {
            Direction::KernelToLinerate => "k->l",
            Direction::LinerateToKernel => "l->k",
        }
    }
}

/// The congestion control of every kernel socket in these runs (set per socket
/// with `TCP_CONGESTION`): linerate's own (CUBIC), so that a comparison is of
/// loss recovery, not of congestion control. A socket otherwise gets its
/// namespace's default, inherited from the host's, which may be BBR (it is on
/// the machines this was written on): BBR does not back off for random loss,
/// so against it every lossy case measured BBR against CUBIC. (A namespace's
/// default cannot be set to an algorithm outside the host's
/// `tcp_allowed_congestion_control`; a socket's can, by root.)
pub const CONGESTION_CONTROL: &str = "cubic";

/// TCP options of the kernel under test, set with sysctls in its namespace
/// (`net.ipv4.tcp_sack`, `tcp_timestamps`, `tcp_window_scaling` are per
/// network namespace). Only the kernel facing linerate is changed; the options
/// are then off on the connection whoever the peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelTcp {
    /// `net.ipv4.tcp_sack`.
    pub sack: bool,
    /// `net.ipv4.tcp_timestamps`.
    pub timestamps: bool,
    /// `net.ipv4.tcp_window_scaling`.
    pub window_scaling: bool,
}

impl Default for KernelTcp {
    fn default() -> Self {
        KernelTcp::ALL_ON
    }
}

impl KernelTcp {
    /// The kernel's defaults: everything on.
    pub const ALL_ON: KernelTcp = KernelTcp {
        sack: true,
        timestamps: true,
        window_scaling: true,
    };

    /// Writes the sysctls inside `ns`.
    pub fn apply(&self, ns: &Netns) -> io::Result<()> {
        let set = [
            ("tcp_sack", self.sack),
            ("tcp_timestamps", self.timestamps),
            ("tcp_window_scaling", self.window_scaling),
        ];
        ns.run(move || -> io::Result<()> {
            // /proc/sys/net shows the namespace of the thread that opens it.
            for (name, on) in set {
                std::fs::write(
                    format!("/proc/sys/net/ipv4/{name}"),
                    if on { "1\n" } else { "0\n" },
                )?;
            }
            Ok(())
        })?
    }
}

/// One transfer over an impaired path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunConfig {
    /// Which way the data goes.
    pub direction: Direction,
    /// The TAPs' offloads toward this process (TSO and checksum: 64 KiB
    /// super-frames from the kernel) and GRO of the released wire frames; the
    /// engine's offloads follow it.
    pub offloads: bool,
    /// The impairment, the same each way.
    pub impairment: Impairment,
    /// The kernel's TCP options.
    pub kernel: KernelTcp,
    /// Seed of the impairment's draws (and of the data).
    pub seed: u64,
    /// Bytes to move.
    pub len: usize,
    /// Longest the transfer may take.
    pub limit: Duration,
}

/// What one transfer gave. "K" is the kernel facing linerate (or facing the
/// kernel in linerate's place).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunResult {
    /// Seconds from the established connection's first write to the receiver's
    /// end of file (the data checked by SHA-256 by then).
    pub secs: f64,
    /// Retransmitted segments of the sender (K's `tcpi_total_retrans` when K
    /// sends; linerate's `tcp_retrans_segs`, or the other kernel's
    /// `tcpi_total_retrans`, otherwise).
    pub sender_retrans: u64,
    /// K's socket as K saw it at the end.
    pub kernel: TcpInfo,
    /// The impairment of the frames K sent.
    pub from_kernel: ImpairCounters,
    /// The impairment of the frames toward K.
    pub to_kernel: ImpairCounters,
    /// Frames the impaired wrapper could not segment or the TAP refused.
    pub stats: ImpairedStats,
}

/// The kernel's address.
pub const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
/// Linerate's address (or the second kernel's, in the reference).
pub const PEER_IP: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
/// linerate's MAC address.
pub const PEER_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x12];

/// A TAP with the kernel's offloads toward this process on or off, moved into
/// `ns` with address `ip`/24 and up.
pub fn tap_in(ns: &Netns, offloads: bool, ip: Ipv4Addr) -> io::Result<Tap> {
    tap_in_ring(ns, offloads, ip, None)
}

/// [`tap_in`] with the TAP batched through an io_uring of depth `ring`
/// (`TapConfig::io_uring`) if given; an error if the ring was refused.
pub fn tap_in_ring(ns: &Netns, offloads: bool, ip: Ipv4Addr, ring: Option<u32>) -> io::Result<Tap> {
    if !netns::is_root() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "an impaired TAP needs root",
        ));
    }
    let want = if offloads {
        TapOffloads::TSO
    } else {
        TapOffloads::NONE
    };
    let tap = Tap::open(&TapConfig {
        offloads: want,
        io_uring: ring,
        ..TapConfig::new(netns::unique("lri"))
    })
    .map_err(io::Error::other)?;
    if let Some(e) = tap.io_uring_fallback() {
        return Err(io::Error::other(format!("io_uring refused: {e}")));
    }
    if tap.offloads_enabled() != want {
        return Err(io::Error::other(format!(
            "TAP offloads {:?}, wanted {want:?}",
            tap.offloads_enabled()
        )));
    }
    netns::ip(&["link", "set", tap.name(), "netns", ns.name()])?;
    let cidr = format!("{ip}/24");
    ns.ip(&["addr", "add", &cidr, "dev", tap.name()])?;
    ns.ip(&["link", "set", tap.name(), "up"])?;
    Ok(tap)
}

/// Fails with `TimedOut` naming `what` once `end` has passed.
pub(crate) fn check_deadline(end: std::time::Instant, what: &str) -> io::Result<()> {
    if std::time::Instant::now() >= end {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("timed out: {what}"),
        ))
    } else {
        Ok(())
    }
}

/// A kernel thread's result, its panics and errors as one error.
pub(crate) fn joined<T>(h: std::thread::JoinHandle<io::Result<io::Result<T>>>) -> io::Result<T> {
    h.join()
        .map_err(|_| io::Error::other("kernel socket thread panicked"))??
}
