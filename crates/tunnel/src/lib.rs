//! Tunnels as NICs: VXLAN (RFC 7348), GENEVE (RFC 8926) and NVGRE (RFC 7637)
//! overlays, each a [`linerate_nic::Nic`] over an underlay `Nic`, so the engine,
//! the runtime and the report run over a tunnel unchanged.
//!
//! ```
//! use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
//! use linerate_tunnel::{Encap, NextHop, Tunnel, VniConfig, VtepConfig};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//!
//! let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
//! let (ip_a, ip_b) = ([192, 0, 2, 1].into(), [192, 0, 2, 2].into());
//! let (mac_a, mac_b) = ([2, 0, 0, 0, 0, 0xa], [2, 0, 0, 0, 0, 0xb]);
//! let vni = |remote, mac| VniConfig { next_hop: NextHop::Static(mac), ..VniConfig::new(42, remote) };
//! let mut ta = Tunnel::new(Shim::new(a, ShimConfig::all())?, VtepConfig::new(Encap::Vxlan, mac_a, ip_a), vni(ip_b, mac_b))?;
//! let mut tb = Tunnel::new(Shim::new(b, ShimConfig::all())?, VtepConfig::new(Encap::Vxlan, mac_b, ip_b), vni(ip_a, mac_a))?;
//! assert_eq!(ta.caps().mtu, 1450);
//!
//! let inner = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(1, 2)).build(b"hello");
//! let mut batch = Batch::new();
//! batch.push(Frame::plain(ta.pool().alloc_from(&inner)));
//! assert_eq!(ta.transmit(0, &mut batch)?, 1);
//! assert_eq!(tb.receive(0, &mut batch, 64)?, 1);
//! assert_eq!(batch[0].bytes(), &inner[..]);
//! assert_eq!(tb.tunnel_counters().by_name("rx_decap"), Some(1));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Transmit
//!
//! The outer Ethernet, IP (v4 or v6) and UDP + VXLAN/GENEVE or GRE headers are
//! copied from a template built once per VNI into the frame's headroom
//! ([`linerate_nic::PacketBuf::prepend`]; the inner frame is not copied), then
//! lengths, the IPv4 ID and header checksum, the UDP source port (from the
//! inner flow hash, in [`VtepConfig::src_ports`]) or the NVGRE FlowID, the
//! DSCP (inherited or fixed) and the ECN field (RFC 6040 normal mode: copied
//! from the inner header) are patched in. DF is set; the TTL is
//! [`VtepConfig::ttl`]. A super-segment keeps its GSO request and partial
//! checksum (moved by the header length); its GSO tunnel kind becomes
//! `GsoTunnel::Udp { outer_csum }` or `GsoTunnel::Gre { csum: false }`, so the
//! underlay's shim segments it in software or a backend with tunnel TSO takes
//! it whole. An inner frame longer than the overlay MTU and not marked for
//! segmentation is refused (`tx_dropped_oversize`), never fragmented.
//!
//! # Receive
//!
//! Frames for this VTEP's address and port (or GRE protocol) are validated
//! with the wire views and decapsulated in place
//! ([`linerate_nic::PacketBuf::strip_front`]): the checksum state loses its
//! outer level, a coalescing record loses its tunnel kind. Everything else is
//! refused and counted ([`TunnelCounter`]); ARP requests and neighbour
//! solicitations for the underlay address are answered, replies resolve the
//! next hop. ECN is decapsulated per RFC 6040 section 4.2.
//!
//! # The underlay's next hop
//!
//! [`NextHop::Resolve`] resolves the outer destination MAC with ARP (IPv4) or
//! neighbour discovery (IPv6) with the engine's default bounds: a probe per
//! second, three probes, at most 64 encapsulated frames waiting (more are
//! counted `tx_dropped_unresolved`), refreshed after 60 seconds. The VTEP
//! answers ARP requests and neighbour solicitations for its own underlay
//! address. [`NextHop::Static`] skips all that. This is a one-entry
//! resolver of its own: the engine's neighbour table (in `linerate-toe`) is
//! not shared with it yet.
//!
//! # Counters
//!
//! Each overlay counts inner frames in its [`linerate_nic::Counters`]; the
//! tunnel's own refusals and events are [`TunnelCounter`]s (`rx_decap`,
//! `tx_encap`, `rx_dropped_unknown_vni`, `rx_dropped_outer_csum`,
//! `rx_dropped_zero_csum6`, `rx_dropped_vxlan_flags`,
//! `rx_dropped_geneve_version`, `rx_dropped_geneve_oam`,
//! `rx_dropped_geneve_critical`, `rx_dropped_tunnel_header`,
//! `rx_dropped_tunnel_truncated`, `rx_dropped_source`, `rx_dropped_ecn`,
//! `rx_dropped_not_ours`, `neigh_seen`, `neigh_answered`, `neigh_probes`,
//! `tx_dropped_unresolved`, `tx_dropped_tunnel_oversize`,
//! `tx_dropped_tunnel_invalid`): per VNI at [`TunnelNic::tunnel_counters`],
//! per VTEP (before a VNI is known) at [`TunnelNic::vtep_counters`].
//!
//! # Several VNIs on one underlay
//!
//! [`Tunnel::many`] wraps one underlay into one overlay [`TunnelNic`] per VNI.
//! They share the underlay (and its queues) through an `Arc<Mutex<..>>`,
//! locked once per `receive` / `transmit` call (per batch, not per frame).
//! Receiving on queue `q` of any VNI drains the underlay's queue `q`, keeps
//! this VNI's frames and leaves the others' in their own per-queue inboxes, so
//! a frame of one VNI is never delivered to another. A VNI's readiness is the
//! underlay queue's; when one VNI's receive leaves frames in another's inbox
//! it notifies the underlay's [`linerate_nic::Notify`] (memory backend), but a
//! file descriptor (TAP, AF_XDP) cannot be made readable from here: a poll
//! loop driving several VNIs over such a backend should receive from each of
//! them when it wakes.
#![forbid(unsafe_code)]
#![warn(clippy::indexing_slicing)]

pub mod bridge;
pub mod config;
pub mod counters;
mod decap;
mod ecn;
mod encap;
#[cfg(feature = "harness")]
pub mod harness;
mod mcast;
mod neigh;
mod tunnel;
pub mod vtep;

pub use config::{
    Df, Dscp, Encap, Gateway, GeneveOpt, MAX_REMOTES, NextHop, TunnelConfigError, UdpCsum,
    VniConfig, VtepConfig,
};
pub use counters::{TunnelCounter, TunnelCounters};
pub use ecn::{EcnDecap, decap_ecn};
pub use tunnel::{INBOX_LEN, RemoteVtep, Tunnel, TunnelGroup, TunnelNic};
