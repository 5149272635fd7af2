//! Receive-side scaling in software: the Toeplitz hash, the indirection table,
//! transmit-queue selection, RSS-aware source ports and queue dispatch.
//!
//! A shared-nothing stack runs one engine per core and must keep every connection
//! on one core in both directions:
//!
//! ```
//! use linerate_rss::{Dispatcher, FlowTuple, HashConfig, IndirectionTable, PortAllocator, RssKey, RxFrame, Steering};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use std::net::Ipv4Addr;
//! use std::sync::Arc;
//!
//! // Four queues, Microsoft's key, all six hash types, inner headers in tunnels.
//! let steering = Arc::new(Steering::new(
//!     &RssKey::MICROSOFT,
//!     IndirectionTable::new(4)?,
//!     HashConfig::default(),
//! ));
//!
//! // Core 2 opens a connection: pick a source port that brings the replies to queue 2.
//! let mut ports = PortAllocator::new(steering.clone(), false, 49152, 65535)?;
//! let mut flow = FlowTuple::tcp4(Ipv4Addr::new(10, 0, 0, 1), 0, Ipv4Addr::new(10, 0, 0, 2), 80);
//! flow.src_port = ports.allocate(&flow, 2)?;
//! assert_eq!(steering.tx_queue(&flow), 2);
//!
//! // A reply arrives on the single receive ring; software RSS puts it on queue 2.
//! let (mut dispatcher, queues) = Dispatcher::new(steering.clone(), 256)?;
//! let reply = FrameBuilder::new(Ip::v4([10, 0, 0, 2], [10, 0, 0, 1]), L4::tcp(80, flow.src_port))
//!     .build(b"HTTP/1.1 200 OK\r\n");
//! dispatcher.dispatch([RxFrame::new(reply)]);
//! assert_eq!(queues[2].len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate does what a NIC's RSS block does, and the rest of that contract:
//!
//! * [`Toeplitz`]: Microsoft's RSS hash with the key prepared once: per-byte-position
//!   tables (portable, as DPDK's `rte_thash`) and PCLMULQDQ / VPCLMULQDQ carry-less
//!   paths chosen at run time, identical results; 40- and 52-byte keys ([`RssKey`]), Microsoft's
//!   default key and the symmetric `0x6d5a` key built in.
//! * [`HashConfig`]: the input per hash type (IPv4, TCP/IPv4, UDP/IPv4, IPv6,
//!   TCP/IPv6, UDP/IPv6), fragments hashed on addresses only, a per-type enable
//!   mask, inner or outer headers for VXLAN, GENEVE and NVGRE (inner by default).
//!   The input is read straight from the frame's bytes ([`HashConfig::extract`]:
//!   Ethernet, VLAN, IPv4, IPv6, TCP, UDP, VXLAN, GENEVE) with the checks
//!   [`linerate_wire::layout`] makes, or at the offsets a layout gives; IPv6
//!   extension headers and GRE go through the full parse. Both paths agree on every
//!   frame (tested on the frame catalogue, its truncations and random mutations).
//! * [`IndirectionTable`] / [`SharedTable`]: 128 entries by default (up to 512),
//!   1..=size queues, even spread, swapped atomically while traffic flows.
//! * [`Steering`]: receive queue of a frame or flow, and transmit queue (TSS) = the
//!   receive queue of the reverse direction.
//! * [`PortAllocator`]: a free source port whose hash lands on a wanted queue, in
//!   O(1) expected time (mTCP, DPDK `rte_thash_adjust_tuple`).
//! * [`Dispatcher`]: one receive ring into N bounded per-queue queues, using the
//!   backend's hash when it has one, hashing the others in chunks; overflow
//!   counted as drops per queue; flows never reordered. Any [`RxItem`] moves
//!   through it: [`RxFrame`] (with a whole `OffloadMeta`) or the small [`RxBuf`].
//!
//! References: Microsoft, "Receive Side Scaling" (RSS hashing types, hashing
//! functions, indirection table, "Verifying the RSS Hash Calculation"); DPDK
//! `lib/hash/rte_thash.h`; Woo and Park, "Scalable TCP Session Monitoring with
//! Symmetric Receive-side Scaling" (2012); Jeong et al., "mTCP" (NSDI 2014).
//!
//! SIMD: the carry-less paths need PCLMULQDQ, SSSE3 and SSE4.1 ([`Path::Clmul`]),
//! plus AVX2 and VPCLMULQDQ ([`Path::Vpclmul`]); x86-64, detected at run time, with
//! the portable tables everywhere else. DPDK's GFNI path (`GF2P8AFFINEQB`) is
//! deliberately left out: the machine this crate is built and tested on has no GFNI
//! (nor AVX-512), and untested code is not shipped.
//!
//! # Performance
//!
//! `cargo bench --bench rss -- --table` (from the workspace root) prints all of
//! these side by side: every case runs in short turns, round robin, and each figure
//! is the median of its turns, so load on a shared machine falls on all cases
//! alike; `cargo bench --bench rss` runs the same cases under criterion. On the
//! development machine (2 cores of an AMD EPYC, Zen 3 class, 2.45 GHz, shared with
//! other builds, load average 8 to 11 during this run), ns per hash, one
//! [`Toeplitz::hash`] call each / in [`Toeplitz::hash_batch`]:
//!
//! | type     | bitwise | portable    | clmul      | vpclmul    |
//! |----------|--------:|------------:|-----------:|-----------:|
//! | IPv4     |    64   | 2.9 / 2.8   | 3.7 / 2.1  | 4.1 / 2.5  |
//! | TCP/IPv4 |    81   | 4.1 / 3.9   | 4.7 / 2.8  | 4.4 / 2.5  |
//! | UDP/IPv4 |    81   | 4.1 / 3.9   | 4.7 / 2.8  | 4.4 / 2.5  |
//! | IPv6     |   176   | 9.4 / 9.7   | 7.5 / 6.0  | 6.6 / 4.6  |
//! | TCP/IPv6 |   194   | 10.7 / 10.3 | 8.7 / 6.9  | 7.0 / 6.0  |
//! | UDP/IPv6 |   194   | 10.7 / 10.3 | 8.7 / 6.9  | 7.0 / 6.0  |
//!
//! [`Path::detect`] prefers `vpclmul`, then `clmul`, then `portable`: batched, as
//! dispatch hashes, `vpclmul` is fastest for every type.
//!
//! Finding the hash input, ns per frame, read from the bytes /
//! `layout::parse` + [`HashConfig::input`]: TCP/IPv4 14 / 26, UDP/IPv6 18 / 37,
//! TCP/IPv4 in QinQ 14 / 27, VXLAN 23 / 59, GENEVE 25 / 60. NVGRE and IPv6 with an
//! extension header fall back to the parse after a 4 to 5 ns attempt (80 / 76, 45 /
//! 41).
//!
//! Dispatch of TCP/IPv4 frames from one ring in batches of 256, Mpps with the
//! backend's hash / with a software hash, per item type:
//!
//! | queues | [`RxFrame`] (144 B) | `OffloadMeta` without `layout` (40 B) | [`RxBuf`] (24 B) |
//! |-------:|--------------------:|--------------------------------------:|-----------------:|
//! | 2      | 43 / 19             | 81 / 30                               | 104 / 32         |
//! | 4      | 42 / 19             | 81 / 30                               | 100 / 32         |
//! | 8      | 39 / 18             | 78 / 29                               | 99 / 32          |
//!
//! Items move by value through the queues, so their size is much of the cost: the
//! 104-byte `Layout` inside `OffloadMeta` costs `RxFrame` about a third of its
//! software-hash rate and half its backend-hash rate. Source port choice (allocate
//! and release): about 42 ns.
#![deny(unsafe_code)]

pub mod dispatch;
pub mod error;
pub mod extract;
pub mod flow;
pub mod indirection;
pub mod input;
pub mod item;
pub mod key;
pub mod sport;
pub mod steering;
pub mod toeplitz;

pub use dispatch::{
    DispatchStats, Dispatched, Dispatcher, QueueReceiver, QueueStats, RxBuf, RxFrame, RxItem,
};
pub use error::{ConfigError, PortError};
pub use extract::Extracted;
pub use flow::{FlowAddrs, FlowTuple};
pub use indirection::{IndirectionTable, SharedTable};
pub use input::{HashConfig, HashInput, HashLevel, HashTypes, Transport, TunnelHashing};
pub use key::RssKey;
pub use sport::PortAllocator;
pub use steering::Steering;
pub use toeplitz::{Path, Toeplitz};
