//! Running engines on NIC queues: a single-threaded [`Driver`], the per-queue
//! [`Runtime`], and the tokio adaptor ([`TcpListener`], [`TcpStream`],
//! [`UdpSocket`]).
//!
//! ```
//! use linerate_nic::{MemNic, NicCaps};
//! use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
//! use linerate_toe::Config;
//! use std::net::Ipv4Addr;
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! // Two hosts joined by a memory wire, one runtime (one thread per queue) each.
//! let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
//! let host = |i: u8| Config::new([2, 0, 0, 0, 0, i]).with_ipv4(Ipv4Addr::new(10, 0, 0, i), 24);
//! let client = Runtime::start(a, RuntimeConfig::new(host(1)))?;
//! let server = Runtime::start(b, RuntimeConfig::new(host(2)))?;
//! let (ch, sh) = (client.handle().clone(), server.handle().clone());
//!
//! let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! tokio.block_on(async move {
//!     let listener = TcpListener::bind(&sh, 7).await?;
//!     let echo = tokio::spawn(async move {
//!         let (mut s, _) = listener.accept().await?;
//!         let mut buf = Vec::new();
//!         s.read_to_end(&mut buf).await?;
//!         s.write_all(&buf).await?;
//!         std::io::Result::Ok(())
//!     });
//!     let mut c = TcpStream::connect(&ch, "10.0.0.2:7").await?;
//!     c.write_all(b"ping").await?;
//!     c.shutdown().await?;
//!     let mut back = Vec::new();
//!     c.read_to_end(&mut back).await?;
//!     assert_eq!(back, b"ping");
//!     echo.await.unwrap()
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What runs where
//!
//! * [`Driver`]: one engine on one queue, on the caller's thread. `poll(now)`
//!   does a round of receive, timers and transmit and returns the next deadline;
//!   the caller waits on the queue's readiness until then. For embedding in an
//!   existing event loop, or for tests.
//! * [`Runtime`]: one thread per queue, each with its own engine and the
//!   connections RSS puts on that queue (shared-nothing). See [`runtime`].
//! * [`TcpListener`] / [`TcpStream`]: futures for any executor, talking to the
//!   queue threads through bounded command channels and per-stream staging
//!   rings, woken by the queue threads. See [`net`].
//! * [`UdpSocket`]: `bind`, `send_to`, `recv_from`, over staging queues of
//!   datagrams in the same way.
//! * [`Resolver`]: DNS lookups (A and AAAA, UDP with TCP fallback, a cache)
//!   by a task on a queue thread; [`TcpStream::connect`] takes `"host:port"`
//!   through it. See [`dns`].
//! * [`local`]: tasks on the queue threads themselves (thread per core):
//!   [`Handle::spawn_on`], [`local::spawn`], [`local::sleep`]. A task that
//!   opens its streams on its own queue never crosses threads.

mod affinity;
pub mod dns;
pub mod driver;
#[cfg(target_os = "linux")]
mod kick;
#[cfg(target_os = "linux")]
mod kneigh;
pub mod local;
pub mod net;
pub mod netconf;
mod ring;
pub mod runtime;
mod shared;
mod socket;
mod udp;
pub mod worker;

pub use dns::{Resolver, ToSocketAddrs};
pub use driver::{Driver, DriverStats, Service};
pub use net::{OwnedReadHalf, OwnedWriteHalf, ReadHalf, TcpListener, TcpStream, WriteHalf};
pub use netconf::NetState;
pub use runtime::{Handle, QueueStats, Runtime, RuntimeConfig, Unsent};
pub use shared::SharedNic;
pub use udp::UdpSocket;
pub use worker::{QueueNic, Worker, Workers};

use linerate_nic::NicError;
use linerate_rss::ConfigError;

/// Why a driver or runtime could not be set up, or stopped.
#[derive(Debug)]
#[non_exhaustive]
pub enum RtError {
    /// The NIC has no queue `queue`; it has `queues`.
    NoQueue {
        /// The queue asked for.
        queue: usize,
        /// How many the NIC has.
        queues: usize,
    },
    /// The engine emits TCP super-segments or partial checksums
    /// ([`linerate_toe::Config::offloads`]) that the NIC cannot segment or complete.
    Offloads,
    /// The steering spreads flows over a different number of queues than the
    /// NIC has.
    Steering {
        /// Queues of the steering's indirection table.
        steering: usize,
        /// Queues of the NIC.
        nic: usize,
    },
    /// The source-port range is not usable.
    Ports(ConfigError),
    /// The engine configuration breaks a rule of [`linerate_toe::Config::validate`].
    Config(linerate_toe::ConfigError),
    /// A NIC call failed.
    Nic(NicError),
    /// A queue thread could not be started.
    Spawn(std::io::Error),
    /// [`RuntimeConfig::cpus`] names a CPU the process may not run on.
    Cpu {
        /// The CPU.
        cpu: usize,
    },
    /// The kernel's neighbour table cannot be read
    /// ([`RuntimeConfig::kernel_neighbors`]: no such interface, no rtnetlink,
    /// or not Linux).
    KernelNeighbors(std::io::Error),
    /// A queue thread panicked.
    Panicked {
        /// Its queue.
        queue: usize,
    },
}

impl core::fmt::Display for RtError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RtError::NoQueue { queue, queues } => {
                write!(f, "no queue {queue}: the NIC has {queues}")
            }
            RtError::Offloads => f.write_str(
                "the engine emits super-segments or partial checksums the NIC cannot finish",
            ),
            RtError::Steering { steering, nic } => {
                write!(f, "the steering has {steering} queues, the NIC {nic}")
            }
            RtError::Ports(e) => write!(f, "source ports: {e}"),
            RtError::Config(e) => write!(f, "engine configuration: {e}"),
            RtError::Nic(e) => write!(f, "NIC: {e}"),
            RtError::Spawn(e) => write!(f, "cannot start a queue thread: {e}"),
            RtError::Cpu { cpu } => write!(f, "CPU {cpu} is not one this process may run on"),
            RtError::Panicked { queue } => write!(f, "the thread of queue {queue} panicked"),
            RtError::KernelNeighbors(e) => {
                write!(f, "cannot read the kernel's neighbour table: {e}")
            }
        }
    }
}

impl std::error::Error for RtError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RtError::Ports(e) => Some(e),
            RtError::Config(e) => Some(e),
            RtError::Nic(e) => Some(e),
            RtError::Spawn(e) | RtError::KernelNeighbors(e) => Some(e),
            _ => None,
        }
    }
}

impl From<NicError> for RtError {
    fn from(e: NicError) -> Self {
        RtError::Nic(e)
    }
}

impl From<ConfigError> for RtError {
    fn from(e: ConfigError) -> Self {
        RtError::Ports(e)
    }
}

impl From<linerate_toe::ConfigError> for RtError {
    fn from(e: linerate_toe::ConfigError) -> Self {
        RtError::Config(e)
    }
}
