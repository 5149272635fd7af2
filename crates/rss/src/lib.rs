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
//!   tables (portable, as DPDK's `rte_thash`), PCLMULQDQ / VPCLMULQDQ carry-less
//!   paths and a GFNI (`GF2P8AFFINEQB`) path chosen at run time, identical results; 40- and 52-byte keys ([`RssKey`]), Microsoft's
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
//!   through it: [`RxFrame`] (with a whole `OffloadMeta`, 40 bytes with a borrowed
//!   slice) or the smaller [`RxBuf`] (24).
//!
//! References: Microsoft, "Receive Side Scaling" (RSS hashing types, hashing
//! functions, indirection table, "Verifying the RSS Hash Calculation"); DPDK
//! `lib/hash/rte_thash.h`; Woo and Park, "Scalable TCP Session Monitoring with
//! Symmetric Receive-side Scaling" (2012); Jeong et al., "mTCP" (NSDI 2014).
//!
//! SIMD: the carry-less paths need PCLMULQDQ, SSSE3 and SSE4.1 ([`Path::Clmul`]),
//! plus AVX2 and VPCLMULQDQ ([`Path::Vpclmul`]); the GFNI path ([`Path::Gfni`], DPDK's
//! `rte_thash_gfni` method) needs GFNI, AVX-512F, AVX-512BW and AVX-512VBMI (Intel
//! Ice Lake and later servers, AMD Zen 4 and later). All x86-64, detected at run
//! time, with the portable tables everywhere else.
//!
//! # Performance
//!
//! `cargo bench --bench rss -- --table` (from the workspace root) prints every
//! path side by side: each case runs in short turns, round robin, and each figure
//! is the median of its turns, so load on a shared machine falls on all cases
//! alike; `cargo bench --bench rss` runs the same cases under criterion. The
//! current figures are in the workspace's `docs/performance.md`.
//!
//! [`Path::detect`] prefers `gfni`, then `vpclmul`, then `clmul`, then `portable`:
//! `gfni` is the fastest for every hash type, single and batched; batched, as
//! dispatch hashes, it takes half the time of `vpclmul` (two inputs share each
//! pass). Where the CPU lacks GFNI or those AVX-512 parts, `vpclmul` is the
//! fastest batched on every type but IPv4 addresses alone, where `clmul` is as
//! fast.
//!
//! Dispatch moves items by value through the queues, so their size is much of
//! the cost: [`RxFrame`] carries a whole `OffloadMeta` (lean, with no layout in
//! it) in 40 bytes, [`RxBuf`] 24. With a software hash, reading the hash input
//! and hashing it are the limit; the input read straight from the frame's bytes
//! costs about half of a full `layout::parse`.
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
