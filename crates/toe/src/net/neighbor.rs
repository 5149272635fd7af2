//! The neighbour cache: linerate-nic's [`linerate_nic::neigh`] with the
//! engine's clock, its waiting frames and its keyed hash (ARP, RFC 826 with
//! RFC 1122's timeouts and bounded retries; NDP, RFC 4861 section 7.2 reduced
//! to INCOMPLETE and REACHABLE). The same table resolves a tunnel's underlay
//! next hops in linerate-tunnel.

use crate::engine::flow_hash::FlowHash;
use crate::time::Instant;
use linerate_offload::OffloadMeta;

pub(crate) use linerate_nic::neigh::{Limits, Lookup, Queued};

/// A frame waiting for its destination's Ethernet address.
pub(crate) type Pending = (Vec<u8>, OffloadMeta);

/// The engine's cache.
pub(crate) type NeighborCache = linerate_nic::neigh::NeighborCache<Instant, Pending, FlowHash>;
