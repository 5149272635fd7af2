//! Virtual NICs: one [`Nic`] partitioned into up to 256, each a `Nic` of its own.
//!
//! What Cisco's VIC and Chelsio's T5 do in an adapter, and SR-IOV, VMQ and macvlan
//! do in Linux, done as a layer between a stack and its backend: a tenant (an
//! engine, a tunnel endpoint, an appliance's VM) gets a [`Vnic`] with
//!
//! - an identity: a unicast MAC (and extra ones), a VLAN mode ([`VlanMode`]: on
//!   the untagged LAN; access, with the tag inserted and stripped for it; or trunk
//!   with an allowed list), multicast subscriptions, promiscuous mode;
//! - queues of its own with its own RSS (key and table, as VMMQ);
//! - steering: a received frame goes to its vNIC by destination MAC and VLAN in
//!   one hash lookup, before RSS; broadcasts and multicasts are copied to the vNICs
//!   that take them; a frame for no vNIC goes to the default vNIC or is counted
//!   and dropped;
//! - anti-spoofing (its own MACs and, if set, IP addresses only), rate limits per
//!   direction charged by wire bytes and segments (so GSO does not cheat), filters
//!   ([`filter`]: ordered rules on L2 to L4 fields, inner or outer headers);
//! - an embedded switch between vNICs of the partition ([`SwitchMode`]: VEB,
//!   VEPA, private): switched inside, a super-frame crosses whole;
//! - counters (`rx_dropped_filter`, `tx_dropped_spoof`, ... beside the usual).
//!
//! Every offload of the NIC below stays available: partition a
//! [`linerate_nic::Shim`] and every vNIC has software TSO, GRO and checksums.
//!
//! ```
//! use linerate_nic::memory::{self, Clock, PairConfig};
//! use linerate_nic::{Batch, Frame, Nic, NicCaps};
//! use linerate_vnic::{Partition, PartitionConfig, VnicConfig};
//!
//! let (port, mut wire) = memory::pair(PairConfig::new(NicCaps::plain(), NicCaps::plain()));
//! let part = Partition::new(port, PartitionConfig { clock: Clock::manual(), ..Default::default() });
//! let mut a = part.add(VnicConfig::new([2, 0, 0, 0, 0, 1]))?;
//! let mut b = part.add(VnicConfig::new([2, 0, 0, 0, 0, 2]))?;
//!
//! // A frame from the wire for b reaches b only.
//! let mut frame = vec![0u8; 60];
//! frame[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
//! frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
//! let mut batch = Batch::new();
//! batch.push(Frame::plain(wire.pool().alloc_from(&frame)));
//! wire.transmit(0, &mut batch)?;
//! assert_eq!(a.receive(0, &mut batch, 64)?, 0);
//! assert_eq!(b.receive(0, &mut batch, 64)?, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod config;
pub mod filter;
mod partition;
mod rate;
mod steer;
mod vlan;
mod vnic;

pub use config::{
    Exceed, MAX_QUEUES, MAX_VID, MAX_VNICS, PartitionConfig, RateError, RateLimit, SwitchMode,
    VlanMode, VnicConfig, VnicError,
};
pub use partition::Partition;
pub use vnic::Vnic;

#[doc(no_inline)]
pub use linerate_nic::Nic;
