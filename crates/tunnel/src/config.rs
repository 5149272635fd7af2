//! What a tunnel is: the encapsulation, the underlay addresses and the outer
//! header policy ([`VtepConfig`]), and the per-VNI part ([`VniConfig`]).

use std::net::IpAddr;
use std::ops::RangeInclusive;

/// One GENEVE option TLV sent on every frame (RFC 8926 section 3.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneveOpt {
    /// Option class.
    pub class: u16,
    /// Option type (bit 7 is the critical bit).
    pub kind: u8,
    /// Option data: a multiple of 4 bytes, at most 124.
    pub data: Vec<u8>,
}

/// The encapsulation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encap {
    /// VXLAN (RFC 7348): UDP, 8-byte header with the I flag and a 24-bit VNI.
    Vxlan,
    /// GENEVE (RFC 8926): UDP, 8-byte header plus the given options, protocol
    /// 0x6558 (Ethernet).
    Geneve {
        /// Options written on every frame sent.
        options: Vec<GeneveOpt>,
        /// Critical options (class, type) this endpoint understands on receive;
        /// a frame with another critical option is refused
        /// (`rx_dropped_geneve_critical`).
        known_critical: Vec<(u16, u8)>,
    },
    /// NVGRE (RFC 7637): GRE with the K bit, key = VSID (24 bits) and FlowID
    /// (8 bits), protocol 0x6558, no checksum, no sequence number.
    Nvgre,
}

impl Encap {
    /// The default UDP destination port: 4789 for VXLAN, 6081 for GENEVE, 0
    /// for NVGRE (not UDP).
    pub fn default_port(&self) -> u16 {
        match self {
            Encap::Vxlan => linerate_wire::vxlan::PORT,
            Encap::Geneve { .. } => linerate_wire::geneve::PORT,
            Encap::Nvgre => 0,
        }
    }
}

/// How the outer IP header's DSCP is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dscp {
    /// Copied from the inner IP header (Linux `tos inherit`).
    #[default]
    Inherit,
    /// This value (0..=63).
    Fixed(u8),
}

/// The outer IPv4 header's Don't Fragment bit (Linux's vxlan `df`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Df {
    /// Always set: routers on the underlay never fragment the tunnel's
    /// packets (an oversize one is dropped and reported, and the VTEP answers
    /// its hosts' oversize packets itself). Linux's default is `unset`.
    #[default]
    Set,
    /// Never set: the underlay may fragment, and the far VTEP reassembles.
    Unset,
    /// Copied from the inner IPv4 header (set for inner IPv6, which routers
    /// never fragment).
    Inherit,
}

/// The outer UDP checksum on transmit (VXLAN and GENEVE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpCsum {
    /// Zero on IPv4 (RFC 7348's recommendation, Linux's default). On IPv6 the
    /// checksum is still computed unless [`VtepConfig::ipv6_zero_csum`] is
    /// set (RFC 6935/6936).
    #[default]
    Zero,
    /// Computed on every frame (per segment for super-frames:
    /// `GsoTunnel::Udp { outer_csum: true }`).
    Compute,
}

/// How the Ethernet address of the underlay's next hop is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextHop {
    /// Resolved with ARP (IPv4) or neighbour discovery (IPv6) for this address
    /// (the remote VTEP when on-link, or a gateway).
    Resolve(IpAddr),
    /// A fixed Ethernet address, no resolution.
    Static([u8; 6]),
}

/// The tunnel endpoint (VTEP) on one underlay: shared by every VNI on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VtepConfig {
    /// The encapsulation.
    pub encap: Encap,
    /// This VTEP's underlay Ethernet address (outer source MAC).
    pub local_mac: [u8; 6],
    /// This VTEP's underlay IP address (IPv4 or IPv6); frames to another
    /// destination address are not ours (`rx_dropped_not_ours`).
    pub local_ip: IpAddr,
    /// UDP destination port (VXLAN, GENEVE); frames to another port are not
    /// ours. Defaults to [`Encap::default_port`]. The underlay's shim finds
    /// tunnels by port (VXLAN 4789 and 8472, GENEVE 6081 by default): another
    /// port must be added to its `ShimConfig::gro_config.layout` for its GSO
    /// and GRO to see the inner flows.
    pub port: u16,
    /// Outer UDP source ports, chosen from the inner flow hash (RFC 7348
    /// section 5: 49152-65535 by default).
    pub src_ports: RangeInclusive<u16>,
    /// Outer TTL / hop limit (64 by default).
    pub ttl: u8,
    /// Outer TTL / hop limit toward a multicast group (1 by default: Linux's
    /// vxlan device sends to its `group` with TTL 1 unless `ttl` is set).
    pub multicast_ttl: u8,
    /// Outer DSCP.
    pub dscp: Dscp,
    /// Outer IPv4 Don't Fragment bit.
    pub df: Df,
    /// Outer UDP checksum on transmit.
    pub udp_csum: UdpCsum,
    /// IPv6 underlay: send zero UDP checksums (with [`UdpCsum::Zero`]) and
    /// accept them on receive (RFC 6935/6936 opt-in). Off by default: IPv6
    /// frames are sent with a checksum, and zero-checksum ones are refused
    /// (`rx_dropped_zero_csum6`).
    pub ipv6_zero_csum: bool,
    /// GRO/TSO kept for the inner flows: super-segments cross encapsulated
    /// whole (tunnel GSO). Off: the overlay presents no segmentation offload,
    /// so the stack sends MSS-sized segments that are encapsulated one by one.
    pub offloads: bool,
    /// The underlay next hops' resolution (ARP / neighbour discovery): the
    /// engine's neighbour table ([`linerate_nic::neigh`]) with its bounds, the
    /// engine's defaults (a probe a second, three probes, 64 frames waiting per
    /// next hop, 60 s before an address is resolved again, 1,024 addresses).
    pub neighbors: linerate_nic::neigh::Limits,
}

impl VtepConfig {
    /// A VTEP with `encap` at `local_mac`/`local_ip`, the kind's default port,
    /// source ports 49152-65535, TTL 64, DSCP inherited, DF set, zero outer
    /// UDP checksum on IPv4 (computed on IPv6), offloads on.
    pub fn new(encap: Encap, local_mac: [u8; 6], local_ip: IpAddr) -> VtepConfig {
        VtepConfig {
            port: encap.default_port(),
            encap,
            local_mac,
            local_ip,
            src_ports: 49152..=65535,
            ttl: 64,
            multicast_ttl: 1,
            dscp: Dscp::Inherit,
            df: Df::Set,
            udp_csum: UdpCsum::Zero,
            ipv6_zero_csum: false,
            offloads: true,
            neighbors: linerate_nic::neigh::Limits::default(),
        }
    }
}

/// One virtual network on a VTEP: an overlay [`crate::TunnelNic`] of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VniConfig {
    /// The VNI (VXLAN, GENEVE) or VSID (NVGRE): 24 bits.
    pub vni: u32,
    /// The remote VTEP's underlay address (same family as the local one).
    pub remote_ip: IpAddr,
    /// How the outer destination MAC is found.
    pub next_hop: NextHop,
    /// Underlay source addresses frames of this VNI may come from; empty: the
    /// remote VTEP's only. Others are refused (`rx_dropped_source`).
    pub allowed_sources: Vec<IpAddr>,
    /// Further remote VTEPs of this VNI (a bridge's flood list and learned
    /// VTEPs): [`crate::TunnelNic::transmit_to`] sends toward any of them or
    /// `remote_ip`, and frames from them are accepted like `remote_ip`'s. At
    /// most [`MAX_REMOTES`] in all.
    pub remotes: Vec<IpAddr>,
    /// How the remotes of `remotes` are reached when `next_hop` resolves
    /// (with [`NextHop::Static`] every remote gets that MAC): on-link
    /// (resolved themselves) unless a gateway is given and the remote is
    /// outside the underlay prefix, then through the gateway.
    pub gateway: Option<Gateway>,
    /// A multicast group of the underlay (Linux's vxlan `group`): the VTEP
    /// joins it (IGMPv3 / MLDv2 reports, answers to queries, a leave when
    /// the last VNI of the group goes), frames sent to it are accepted for
    /// this VNI, and frames of this VNI from any underlay source are
    /// accepted (the group's members are not known beforehand); a sender
    /// becomes a remote of the VNI the first time
    /// [`crate::TunnelNic::transmit_to`] sends toward it. List the group in
    /// `remotes` (or as `remote_ip`) to send to it.
    pub group: Option<IpAddr>,
}

/// Remote VTEPs a VNI reaches at most (`remote_ip` and
/// [`VniConfig::remotes`] together).
pub const MAX_REMOTES: usize = 4096;

/// The underlay's gateway, for remote VTEPs outside its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gateway {
    /// The gateway's address (resolved with ARP or ND).
    pub ip: IpAddr,
    /// The underlay prefix length around the VTEP's local address.
    pub prefix: u8,
}

impl Gateway {
    /// Whether `remote` is outside `local`'s prefix (then reached via the
    /// gateway).
    pub fn routes(&self, local: IpAddr, remote: IpAddr) -> bool {
        match (local, remote) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let m = u32::MAX
                    .checked_shl(32u32.saturating_sub(u32::from(self.prefix)))
                    .unwrap_or(0);
                (u32::from(a) & m) != (u32::from(b) & m)
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let m = u128::MAX
                    .checked_shl(128u32.saturating_sub(u32::from(self.prefix)))
                    .unwrap_or(0);
                (u128::from(a) & m) != (u128::from(b) & m)
            }
            _ => false,
        }
    }
}

impl VniConfig {
    /// VNI `vni` to `remote_ip`, resolved on-link, from `remote_ip` only.
    pub fn new(vni: u32, remote_ip: IpAddr) -> VniConfig {
        VniConfig {
            vni,
            remote_ip,
            next_hop: NextHop::Resolve(remote_ip),
            allowed_sources: Vec::new(),
            remotes: Vec::new(),
            gateway: None,
            group: None,
        }
    }
}

/// Why [`crate::Tunnel::new`] or [`crate::Tunnel::many`] refused a
/// [`VtepConfig`] and its [`VniConfig`]s.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TunnelConfigError {
    /// A VNI (VSID for NVGRE) over 24 bits.
    VniTooLarge {
        /// The VNI given.
        vni: u32,
    },
    /// The same VNI twice in one call.
    DuplicateVni {
        /// The VNI given twice.
        vni: u32,
    },
    /// An address of the other family than the VTEP's local underlay address
    /// (a remote, a next hop, an allowed source, a gateway).
    Family {
        /// The VTEP's local underlay address.
        local: IpAddr,
        /// The first address of the other family.
        other: IpAddr,
    },
    /// A GENEVE option whose data is not a multiple of 4 bytes or is over 124,
    /// or options over 252 bytes in all.
    GeneveOption {
        /// The option's class.
        class: u16,
        /// The option's type.
        kind: u8,
        /// Bytes of the option's data.
        data_len: usize,
        /// Bytes of all the options with their headers, up to this one.
        total: usize,
    },
    /// An empty outer source-port range.
    EmptySourcePorts,
    /// Destination port 0 for a UDP tunnel (VXLAN, GENEVE).
    ZeroPort,
    /// A fixed outer DSCP over 63.
    Dscp {
        /// The DSCP given.
        dscp: u8,
    },
    /// An outer TTL (hop limit) of 0.
    ZeroTtl,
    /// The underlay MTU leaves no room for an inner frame of at least 68 bytes
    /// of IP once the encapsulation is taken off.
    Mtu {
        /// The underlay's MTU.
        mtu: u16,
        /// Bytes the encapsulation takes.
        overhead: usize,
    },
    /// No VNI given.
    NoVni,
    /// More than [`MAX_REMOTES`] remote VTEPs on one VNI.
    TooManyRemotes {
        /// The VNI.
        vni: u32,
    },
}

impl core::fmt::Display for TunnelConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            TunnelConfigError::VniTooLarge { vni } => {
                write!(f, "VNI {vni} is over 24 bits: use a VNI of 0 to 16777215")
            }
            TunnelConfigError::DuplicateVni { vni } => {
                write!(f, "VNI {vni} is given twice: give each VNI once")
            }
            TunnelConfigError::Family { local, other } => write!(
                f,
                "{other} is not of the family of the local underlay address {local}: use \
                 underlay addresses of one family"
            ),
            TunnelConfigError::GeneveOption {
                class,
                kind,
                data_len,
                total,
            } => write!(
                f,
                "GENEVE option class {class:#06x} type {kind:#04x} has {data_len} bytes of data \
                 ({total} bytes of options so far): give each option a multiple of 4 bytes, \
                 at most 124, and all of them at most 252 bytes with their headers"
            ),
            TunnelConfigError::EmptySourcePorts => f.write_str(
                "the outer source-port range is empty: give a range such as 49152..=65535",
            ),
            TunnelConfigError::ZeroPort => f.write_str(
                "UDP destination port 0: use the encapsulation's port (VXLAN 4789, GENEVE 6081)",
            ),
            TunnelConfigError::Dscp { dscp } => {
                write!(f, "outer DSCP {dscp} is over 63: use 0 to 63")
            }
            TunnelConfigError::ZeroTtl => f.write_str("outer TTL 0: use 1 to 255, such as 64"),
            TunnelConfigError::Mtu { mtu, overhead } => write!(
                f,
                "underlay MTU {mtu} leaves no room for an inner frame after {overhead} bytes of \
                 encapsulation: raise the underlay MTU to at least {}",
                overhead + 68
            ),
            TunnelConfigError::NoVni => f.write_str("no VNI given: give at least one VniConfig"),
            TunnelConfigError::TooManyRemotes { vni } => write!(
                f,
                "VNI {vni} has more than {MAX_REMOTES} remote VTEPs: split them over several VNIs"
            ),
        }
    }
}

impl std::error::Error for TunnelConfigError {}
