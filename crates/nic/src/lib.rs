//! The NIC layer of linerate: the [`Nic`] trait and its capabilities ([`NicCaps`]),
//! frames with their offload metadata, buffer pools with headroom, per-queue
//! counters, a pcap recorder, and the backends.
//!
//! ```
//! use linerate_nic::{Batch, Counter, Frame, MemNic, Nic, NicCaps};
//!
//! // Two NICs joined by a perfect in-memory wire, MTU 1500, no offloads.
//! let (mut a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
//!
//! // Frames live in pooled buffers with headroom; a batch carries many at once.
//! let mut batch = Batch::new();
//! for i in 0..8u8 {
//!     let frame = [[0xff; 6].as_slice(), &[2, 0, 0, 0, 0, 1], &[0x88, 0xb5], &[i; 46]].concat();
//!     batch.push(Frame::plain(a.pool().alloc_from(&frame)));
//! }
//! assert_eq!(a.transmit(0, &mut batch)?, 8);
//! assert!(batch.is_empty());
//!
//! // Non-blocking receive: whatever is there now.
//! assert_eq!(b.receive(0, &mut batch, 64)?, 8);
//! assert_eq!(batch[3].bytes()[14], 3);
//!
//! // A frame over the MTU, not marked for segmentation, is refused, not passed on.
//! batch.clear();
//! batch.push(Frame::plain(a.pool().alloc_from(&[0; 1515])));
//! assert!(a.transmit(0, &mut batch).is_err());
//! assert_eq!(a.counters().total(Counter::TxDroppedOversize), 1);
//! assert_eq!(b.counters().snapshot().by_name("rx_packets"), Some(8));
//! # Ok::<(), linerate_nic::NicError>(())
//! ```
//!
//! # The pieces
//!
//! * [`Nic`]: per-queue, batched, non-blocking receive and transmit of [`Frame`]s
//!   (bytes in a [`PacketBuf`] plus [`linerate_offload::OffloadMeta`]; a
//!   scatter-gather frame adds payload by reference into a shared
//!   [`SharedBuf`], see [`frame`]), with a
//!   [`Readiness`] source per queue (a file descriptor, or a [`Notify`] for the
//!   memory backend) so that a poll loop or an async task of any runtime can
//!   drive it.
//! * [`NicCaps`] and [`Offloads`]: what a backend does itself. The shim (next)
//!   wraps any backend and does the rest in software: GSO/USO and checksums on
//!   transmit; checksum verification, GRO and RSS dispatch on receive.
//! * [`Pool`] / [`PacketBuf`]: recycled buffers with at least [`MIN_HEADROOM`]
//!   bytes in front, so encapsulation prepends without copying and a warm data
//!   path allocates nothing.
//! * [`Shim`]: wraps any backend and presents every offload [`ShimConfig`]
//!   switches on, doing in software what the backend lacks.
//! * [`Counters`]: per-queue counters named like `ethtool -S`.
//! * [`pcap`]: a [`Recorder`] hook and a pcap writer for frames as they are on
//!   the wire.
//! * [`Ports`]: several NICs as one, for an engine with more than one
//!   interface (each received frame tagged with its port, each sent frame out
//!   of the port its source MAC names).
//!
//! # Backends
//!
//! * [`memory`]: pairs and learning switches in one process, per-port
//!   capabilities, an enforced MTU and seeded, reproducible faults per direction.
//! * `tap` (Linux): `/dev/net/tun` with `IFF_VNET_HDR` and `IFF_MULTI_QUEUE`, the
//!   kernel's TSO/USO and checksum offloads probed with `TUNSETOFFLOAD`.
//!   `tap::TapSteering` steers the queues of a TAP shared by several processes
//!   by claimed port (a raw-BPF `TUNSETSTEERINGEBPF` program).
//! * `kernel_neigh` (Linux): the kernel's neighbour table over rtnetlink, for
//!   an address shared with the kernel's stack.
//! * `xdp` (Linux, cargo feature `af-xdp`): one AF_XDP socket per queue
//!   through xsk-rs (which builds libxdp), copy or zero-copy, native or generic
//!   XDP; no offloads, so it goes behind a [`Shim`].
#![deny(unsafe_code)]
#![warn(clippy::indexing_slicing)]

pub mod buf;
pub mod caps;
mod check;
pub mod claims;
pub mod counters;
pub mod error;
pub mod frame;
#[cfg(target_os = "linux")]
pub mod kernel_neigh;
pub mod memory;
pub mod neigh;
pub mod nic;
pub mod notify;
pub mod pcap;
pub mod ports;
mod rng;
pub mod shim;
#[cfg(target_os = "linux")]
mod sys;
#[cfg(target_os = "linux")]
pub mod tap;
#[cfg(all(target_os = "linux", feature = "af-xdp"))]
pub mod xdp;

pub use buf::{BufError, Frag, MIN_HEADROOM, PacketBuf, Pool, PoolConfig, PoolStats, SharedBuf};
pub use caps::{NicCaps, Offloads, RssCaps, Unsupported};
pub use check::check_tx;
pub use claims::{ClaimError, Claims};
pub use counters::{Counter, Counters, Snapshot, Tally, count};
pub use error::{MetaError, NicConfigError, NicError};
pub use frame::{Batch, DEFAULT_BATCH, Frags, Frame};
pub use memory::MemNic;
pub use nic::Nic;
pub use notify::{Notify, Readiness, wait_any};
pub use pcap::{PcapRecorder, Recorder};
pub use ports::Ports;
pub use shim::{Shim, ShimConfig};
#[cfg(target_os = "linux")]
pub use tap::{Tap, TapConfig};
#[cfg(all(target_os = "linux", feature = "af-xdp"))]
pub use xdp::{Xdp, XdpConfig};

/// Length of an Ethernet header without VLAN tags.
pub const ETH_HEADER_LEN: usize = 14;
