//! The tunnel's own counters, named like `ethtool -S` (`rx_dropped_<reason>`).
//!
//! Each overlay [`crate::TunnelNic`] has the usual [`linerate_nic::Counters`]
//! (`rx_packets`, `tx_packets`, `tx_dropped_oversize`, ...) for the frames it
//! delivers and takes, and a [`TunnelCounters`] for what only a tunnel can
//! refuse. Frames refused before their VNI is known (wrong port, truncated,
//! unknown VNI...) are counted in the VTEP's counters, shared by every VNI
//! ([`crate::TunnelNic::vtep_counters`]); frames refused after (source not
//! allowed, ECN) in the VNI's own ([`crate::TunnelNic::tunnel_counters`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// One tunnel counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum TunnelCounter {
            $( $(#[$doc])* $variant, )*
        }

        impl TunnelCounter {
            /// Every counter, in display order.
            pub const ALL: &'static [TunnelCounter] = &[$(TunnelCounter::$variant,)*];

            /// The `ethtool -S` style name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(TunnelCounter::$variant => $name,)*
                }
            }
        }
    };
}

counters! {
    /// Frames decapsulated and delivered to the overlay.
    RxDecap => "rx_decap",
    /// Frames encapsulated and handed to the underlay.
    TxEncap => "tx_encap",
    /// Underlay frames that are not tunnel frames for this VTEP (another
    /// address, port, protocol or EtherType), and not ARP/ND it answers.
    RxNotOurs => "rx_dropped_not_ours",
    /// Tunnel frames for a VNI/VSID no overlay has.
    RxUnknownVni => "rx_dropped_unknown_vni",
    /// Outer UDP (or GRE) checksum bad.
    RxBadOuterCsum => "rx_dropped_outer_csum",
    /// IPv6 outer UDP checksum zero without the zero-checksum opt-in.
    RxZeroCsum6 => "rx_dropped_zero_csum6",
    /// VXLAN header without the I flag.
    RxVxlanNoI => "rx_dropped_vxlan_flags",
    /// GENEVE of a version other than 0.
    RxGeneveVersion => "rx_dropped_geneve_version",
    /// GENEVE with the O (control message) bit.
    RxGeneveOam => "rx_dropped_geneve_oam",
    /// GENEVE with a critical option this endpoint does not know.
    RxGeneveCritical => "rx_dropped_geneve_critical",
    /// GENEVE carrying something other than Ethernet, or GRE that is not
    /// NVGRE (checksum or sequence present, no key).
    RxBadTunnelHeader => "rx_dropped_tunnel_header",
    /// Headers cut short: outer IP, UDP/GRE, tunnel header or inner Ethernet.
    RxTruncated => "rx_dropped_tunnel_truncated",
    /// Outer source address not allowed for the VNI.
    RxSource => "rx_dropped_source",
    /// RFC 6040: CE on the outer header of a not-ECT inner packet.
    RxEcnDrop => "rx_dropped_ecn",
    /// ARP and neighbour discovery messages received (answered, learned from
    /// or ignored), never delivered to an overlay.
    NeighSeen => "neigh_seen",
    /// ARP requests and neighbour solicitations answered for the underlay address.
    NeighAnswered => "neigh_answered",
    /// ARP/ND probes sent for the next hop.
    NeighProbes => "neigh_probes",
    /// Frames dropped because the next hop was not resolved yet.
    TxUnresolved => "tx_dropped_unresolved",
    /// Frames for a remote VTEP the VNI was not configured with
    /// (`TunnelNic::transmit_to`).
    TxUnknownRemote => "tx_dropped_unknown_remote",
    /// Inner frames too long for the overlay MTU and not marked for segmentation.
    TxOversize => "tx_dropped_tunnel_oversize",
    /// Inner frames whose headers could not be parsed (no room to encapsulate,
    /// not Ethernet).
    TxInvalid => "tx_dropped_tunnel_invalid",
    /// IGMP / MLD queries heard on the underlay (a multicast group's
    /// VTEP answers them).
    McastQueries => "mcast_queries",
    /// IGMP / MLD reports and leaves the VTEP sent for its groups.
    McastReports => "mcast_reports",
    /// IGMP / MLD messages dropped as malformed (length, checksum, header).
    McastBad => "mcast_dropped_bad",
}

/// A set of [`TunnelCounter`]s (relaxed atomics; clones share them).
#[derive(Debug, Clone)]
pub struct TunnelCounters {
    values: Arc<[AtomicU64]>,
}

impl Default for TunnelCounters {
    fn default() -> Self {
        TunnelCounters::new()
    }
}

impl TunnelCounters {
    /// All zero.
    pub fn new() -> TunnelCounters {
        TunnelCounters {
            values: TunnelCounter::ALL
                .iter()
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    /// Adds `n` to `c`.
    #[inline]
    pub fn add(&self, c: TunnelCounter, n: u64) {
        if let Some(v) = self.values.get(c as usize) {
            v.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The value of `c`.
    pub fn get(&self, c: TunnelCounter) -> u64 {
        self.values
            .get(c as usize)
            .map_or(0, |v| v.load(Ordering::Relaxed))
    }

    /// The value of the counter named `name`.
    pub fn by_name(&self, name: &str) -> Option<u64> {
        TunnelCounter::ALL
            .iter()
            .find(|c| c.name() == name)
            .map(|&c| self.get(c))
    }

    /// Every counter with its name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        TunnelCounter::ALL.iter().map(|&c| (c.name(), self.get(c)))
    }
}
