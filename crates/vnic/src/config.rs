//! What a virtual NIC and a partition are made of, and why a configuration is refused.

use crate::filter::{FilterError, Rule};
use linerate_nic::memory::Clock;
use linerate_rss::Steering;
use std::net::IpAddr;
use std::sync::Arc;

/// Most virtual NICs one partition holds.
pub const MAX_VNICS: usize = 256;

/// Most queues one virtual NIC has.
pub const MAX_QUEUES: u16 = 64;

/// The highest valid VLAN ID (4095 is reserved, 0 means "priority tag only").
pub const MAX_VID: u16 = 4094;

/// Which VLANs a virtual NIC is on, and how their tags are handled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VlanMode {
    /// On the port's untagged LAN: frames go and come without a tag.
    #[default]
    Untagged,
    /// On one VLAN, tag handled by the partition (an SR-IOV VF's `vlan ID`): the tag
    /// is inserted on transmit and stripped on receive, so the vNIC sees only
    /// untagged frames; a tagged frame it sends is dropped (`tx_dropped_vlan`).
    Access(u16),
    /// On several VLANs, tags seen by the vNIC: it sends and receives frames
    /// tagged with one of `allowed`, and untagged frames too when `native`.
    Trunk {
        /// The VLAN IDs it may use, tagged.
        allowed: Vec<u16>,
        /// Whether it is also on the untagged LAN.
        native: bool,
    },
}

/// What happens to a frame over a rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Exceed {
    /// Transmit only: leave it in the caller's batch, to be sent when tokens are
    /// back (`tx_throttled` counts such calls). Nothing is lost; a TCP engine
    /// simply sends later. On receive, `Shape` acts as `Police`.
    #[default]
    Shape,
    /// Drop it (`rx_dropped_rate` / `tx_dropped_rate`).
    Police,
}

/// A token bucket in bits and packets per second.
///
/// A frame is charged for what it puts on the wire: a super-frame counts as the
/// segments GSO will make of it (each with its own copy of the headers), so
/// segmentation offload does not let a tenant exceed its rate. Bytes are those of
/// the Ethernet frames without FCS, preamble and gap (as the backends count them).
/// A frame passes while the bucket holds some credit, and may take it into debt (by
/// at most one frame): a super-frame larger than the burst still goes, and the
/// long-run rate is exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Bits per second; 0: no bit limit.
    pub bits_per_sec: u64,
    /// Packets (wire segments) per second; 0: no packet limit.
    pub packets_per_sec: u64,
    /// Bucket depth in bits (the most sent at once after an idle period).
    pub burst_bits: u64,
    /// Bucket depth in packets.
    pub burst_packets: u64,
    /// What to do over the limit.
    pub exceed: Exceed,
}

impl RateLimit {
    /// `bits_per_sec` with a burst of 1 ms of traffic (at least 64 KiB), shaping.
    pub fn bits(bits_per_sec: u64) -> RateLimit {
        RateLimit {
            bits_per_sec,
            packets_per_sec: 0,
            burst_bits: (bits_per_sec / 1000).max(65_536 * 8),
            burst_packets: 0,
            exceed: Exceed::Shape,
        }
    }

    /// `packets_per_sec` with a burst of 1 ms of packets (at least 64), shaping.
    pub fn packets(packets_per_sec: u64) -> RateLimit {
        RateLimit {
            bits_per_sec: 0,
            packets_per_sec,
            burst_bits: 0,
            burst_packets: (packets_per_sec / 1000).max(64),
            exceed: Exceed::Shape,
        }
    }
}

/// One virtual NIC.
#[derive(Debug, Clone)]
pub struct VnicConfig {
    /// Its unicast MAC address.
    pub mac: [u8; 6],
    /// Further unicast addresses it receives on and may send from.
    pub extra_macs: Vec<[u8; 6]>,
    /// Its VLANs.
    pub vlan: VlanMode,
    /// Multicast groups it takes (broadcast is always taken).
    pub multicast: Vec<[u8; 6]>,
    /// Takes every multicast frame of its VLANs (IPv6 neighbour discovery needs
    /// the solicited-node groups; this is the simple way to get them).
    pub all_multicast: bool,
    /// Takes every frame of its VLANs, whatever the destination (a copy when
    /// another vNIC owns it).
    pub promiscuous: bool,
    /// Steering by inner headers: tunnelled frames from the wire (VXLAN, GENEVE,
    /// NVGRE) whose VNI (VSID) and inner destination MAC are listed here come to
    /// this vNIC, still encapsulated, whatever their outer headers (as VMQ steers
    /// NVGRE traffic to a VM's queue by VSID and inner MAC). Frames of other VNIs
    /// or inner MACs are steered by their outer headers as usual.
    pub tunnel_macs: Vec<(u32, [u8; 6])>,
    /// Drops frames it sends from a source MAC not its own (SR-IOV `spoofchk`).
    pub spoof_check: bool,
    /// When not empty, the only IP addresses it may send from (IPv4 and IPv6
    /// source, ARP sender; `::` is allowed for duplicate address detection).
    pub ips: Vec<IpAddr>,
    /// Number of queues (1 to [`MAX_QUEUES`]).
    pub queues: u16,
    /// Its RSS over those queues (own key and table, as VMMQ); `None`:
    /// Microsoft's key and an even table. Its queue count must be `queues`.
    pub rss: Option<Arc<Steering>>,
    /// Frames each receive queue holds before dropping (`rx_dropped_ring_full`).
    pub ring_len: usize,
    /// Transmit rate limit.
    pub tx_rate: Option<RateLimit>,
    /// Receive rate limit.
    pub rx_rate: Option<RateLimit>,
    /// Rules applied to received frames (as the vNIC sees them: after tag
    /// stripping); `Steer(q)` picks the receive queue instead of RSS.
    pub rx_filters: Vec<Rule>,
    /// Rules applied to frames it sends (before tag insertion); `Steer` acts as
    /// `Allow`.
    pub tx_filters: Vec<Rule>,
}

impl VnicConfig {
    /// One queue, untagged, spoof check on, no limits or filters.
    pub fn new(mac: [u8; 6]) -> VnicConfig {
        VnicConfig {
            mac,
            extra_macs: Vec::new(),
            vlan: VlanMode::Untagged,
            multicast: Vec::new(),
            all_multicast: false,
            promiscuous: false,
            tunnel_macs: Vec::new(),
            spoof_check: true,
            ips: Vec::new(),
            queues: 1,
            rss: None,
            ring_len: 1024,
            tx_rate: None,
            rx_rate: None,
            rx_filters: Vec::new(),
            tx_filters: Vec::new(),
        }
    }
}

/// How traffic between two vNICs of one partition travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SwitchMode {
    /// Switched inside (a VEB, the T5's on-board switch, macvlan `bridge`): it
    /// never reaches the wire, and a super-frame crosses whole.
    #[default]
    Veb,
    /// Sent out to the wire (VEPA): the external switch must hairpin it back.
    Vepa,
    /// Forbidden (macvlan `private`): dropped, `tx_dropped_private`; broadcasts go
    /// to the wire only.
    Private,
}

/// A partition's make-up.
#[derive(Debug, Clone)]
pub struct PartitionConfig {
    /// Traffic between vNICs.
    pub mode: SwitchMode,
    /// Time for the rate limits (the memory backend's clock in simulations).
    pub clock: Clock,
    /// Frames taken from each backend queue per pump.
    pub burst: usize,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            mode: SwitchMode::Veb,
            clock: Clock::system(),
            burst: 64,
        }
    }
}

/// Why a [`RateLimit`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateError {
    /// A bit rate with a bucket of 0 bits: nothing could ever be sent.
    BitRateWithoutBurst,
    /// A packet rate with a bucket of 0 packets: nothing could ever be sent.
    PacketRateWithoutBurst,
    /// Neither a bit nor a packet rate.
    NoRate,
}

impl core::fmt::Display for RateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            RateError::BitRateWithoutBurst => {
                "a bit rate with a burst of 0 bits: give burst_bits at least one frame's bits \
                 (RateLimit::bits picks 1 ms of traffic)"
            }
            RateError::PacketRateWithoutBurst => {
                "a packet rate with a burst of 0 packets: give burst_packets at least 1"
            }
            RateError::NoRate => {
                "neither bits_per_sec nor packets_per_sec is set: set one, or give no rate limit"
            }
        })
    }
}

impl std::error::Error for RateError {}

/// Why a vNIC could not be made.
#[derive(Debug)]
#[non_exhaustive]
pub enum VnicError {
    /// The partition already has [`MAX_VNICS`].
    Full,
    /// The address is not a unicast one (multicast bit set, or all zero).
    NotUnicast([u8; 6]),
    /// A multicast subscription to a unicast address.
    NotMulticast([u8; 6]),
    /// The address is already taken on that VLAN by another vNIC.
    MacInUse {
        /// The address.
        mac: [u8; 6],
        /// The VLAN (`None`: untagged).
        vlan: Option<u16>,
    },
    /// A VLAN ID outside 1..=4094.
    BadVlan(u16),
    /// A queue count outside 1..=[`MAX_QUEUES`], or an RSS steering for another count.
    BadQueues(u16),
    /// A rate limit that cannot work.
    BadRate(RateError),
    /// A filter rule refused.
    Filter(FilterError),
    /// A ring of no frames.
    BadRing,
    /// A (VNI, inner MAC) already steered to another vNIC, or a VNI over 24 bits.
    TunnelMacInUse {
        /// The VNI.
        vni: u32,
        /// The inner MAC.
        mac: [u8; 6],
    },
    /// The RSS steering could not be built.
    Rss(linerate_rss::ConfigError),
}

impl core::fmt::Display for VnicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mac = |m: &[u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        match self {
            VnicError::Full => write!(f, "the partition already has {MAX_VNICS} vNICs"),
            VnicError::NotUnicast(m) => write!(f, "{} is not a unicast address", mac(m)),
            VnicError::NotMulticast(m) => write!(f, "{} is not a multicast address", mac(m)),
            VnicError::MacInUse { mac: m, vlan } => match vlan {
                Some(v) => write!(f, "{} is already used on VLAN {v}", mac(m)),
                None => write!(f, "{} is already used untagged", mac(m)),
            },
            VnicError::BadVlan(v) => write!(f, "VLAN ID {v} is outside 1..=4094"),
            VnicError::BadQueues(q) => {
                write!(
                    f,
                    "{q} queues: a vNIC has 1 to {MAX_QUEUES}, and its RSS as many"
                )
            }
            VnicError::BadRate(e) => write!(f, "rate limit: {e}"),
            VnicError::Filter(e) => write!(f, "filter: {e}"),
            VnicError::BadRing => write!(f, "a receive ring must hold at least one frame"),
            VnicError::TunnelMacInUse { vni, mac: m } => write!(
                f,
                "VNI {vni} inner MAC {} is already steered elsewhere, or the VNI is over 24 bits",
                mac(m)
            ),
            VnicError::Rss(e) => write!(f, "RSS: {e}"),
        }
    }
}

impl std::error::Error for VnicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VnicError::Filter(e) => Some(e),
            VnicError::BadRate(e) => Some(e),
            VnicError::Rss(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FilterError> for VnicError {
    fn from(e: FilterError) -> Self {
        VnicError::Filter(e)
    }
}
