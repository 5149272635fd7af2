//! `OffloadMeta`: what travels with every frame between the stack and the NIC layer.
//!
//! Modelled on Linux's skb offload fields and on `virtio_net_hdr` (virtio 1.2 section
//! 5.1.6): the checksum state ([`Checksum`]), the segmentation request or the record
//! of a coalesced frame ([`Gso`]) and the receive hash ([`RssHash`]).
//!
//! The meta holds no header offsets beyond the checksum's: whoever needs the
//! frame's [`Layout`](linerate_wire::layout::Layout) parses it
//! ([`linerate_wire::layout::parse`], a few tens of nanoseconds for the usual
//! frames). Carrying a whole layout (104 bytes) in every meta made every frame
//! record several times larger, and frame records move by value through queues,
//! rings and batches; parsing again where a layout is needed is cheaper than
//! carrying one everywhere. [`OffloadMeta`] is 24 bytes.
//!
//! The same vocabulary serves both directions:
//!
//! * transmit: the stack hands a super-frame (headers plus up to 64 KiB of payload)
//!   marked `gso: Some(..)` with `csum: Partial`; the NIC layer segments it and
//!   completes checksums where the backend cannot;
//! * receive: the NIC layer marks what it verified (`csum: Verified`) and what it
//!   coalesced (`gso: Some(..)`, so the frame can be re-segmented exactly).

/// Checksum state of a frame (Linux `ip_summed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Checksum {
    /// Transmit: every checksum in the frame is complete. Receive: nothing has been
    /// verified (`CHECKSUM_NONE`).
    #[default]
    None,
    /// The transport checksum is to be completed (`CHECKSUM_PARTIAL`,
    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`): the 16-bit field at `start + offset` holds the
    /// folded (not complemented) pseudo-header sum, and the checksum covers the bytes
    /// from `start` to the end of the frame. In a tunnel, `start` is the inner L4
    /// header; outer checksums follow the GSO tunnel flags.
    Partial {
        /// Offset of the first byte the checksum covers (the L4 header).
        start: u16,
        /// Offset of the checksum field from `start` (16 for TCP, 6 for UDP).
        offset: u16,
    },
    /// The first `levels` checksums, counting from the outermost, have been verified
    /// (`CHECKSUM_UNNECESSARY` with `csum_level = levels - 1`;
    /// `VIRTIO_NET_HDR_F_DATA_VALID`). IPv4 header checksums are not counted, as in
    /// Linux: they are always checked in software.
    Verified {
        /// How many transport checksums (outer UDP/GRE, inner TCP/UDP) are known good.
        levels: u8,
    },
}

/// The transport protocol being segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GsoType {
    /// TCP over IPv4 (`SKB_GSO_TCPV4`, `VIRTIO_NET_HDR_GSO_TCPV4`).
    TcpV4,
    /// TCP over IPv6 (`SKB_GSO_TCPV6`, `VIRTIO_NET_HDR_GSO_TCPV6`).
    TcpV6,
    /// UDP datagrams of `size` bytes each (`SKB_GSO_UDP_L4`, `VIRTIO_NET_HDR_GSO_UDP_L4`).
    UdpL4,
}

/// The tunnel the segmented protocol sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GsoTunnel {
    /// Not tunnelled.
    #[default]
    None,
    /// Inside a UDP tunnel (VXLAN, GENEVE): `SKB_GSO_UDP_TUNNEL`, or
    /// `SKB_GSO_UDP_TUNNEL_CSUM` when each segment's outer UDP checksum must be
    /// computed (otherwise it is zero).
    Udp {
        /// Compute the outer UDP checksum per segment.
        outer_csum: bool,
    },
    /// Inside GRE (NVGRE): `SKB_GSO_GRE`, or `SKB_GSO_GRE_CSUM` when the GRE header
    /// carries a checksum to recompute per segment.
    Gre {
        /// Recompute the GRE checksum per segment.
        csum: bool,
    },
}

/// A segmentation request (transmit) or the record of a coalesced frame (receive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gso {
    /// What is segmented.
    pub kind: GsoType,
    /// Payload bytes per segment (the MSS for TCP, the datagram payload for UDP); the
    /// last segment may be shorter.
    pub size: u16,
    /// The tunnel around it, if any.
    pub tunnel: GsoTunnel,
    /// The (inner) IPv4 ID stays the same in every segment instead of advancing by
    /// one (`SKB_GSO_TCP_FIXEDID`).
    pub fixed_id: bool,
    /// The outer IPv4 ID of a tunnel stays the same in every segment.
    pub outer_fixed_id: bool,
    /// The first segment carries CWR, the others not (`SKB_GSO_TCP_ECN`,
    /// `VIRTIO_NET_HDR_GSO_ECN`).
    pub ecn: bool,
    /// Number of segments (set by GRO; informative on transmit).
    pub segs: u16,
}

impl Gso {
    /// A plain (untunnelled) request of `kind` with segment size `size`.
    pub const fn new(kind: GsoType, size: u16) -> Gso {
        Gso {
            kind,
            size,
            tunnel: GsoTunnel::None,
            fixed_id: false,
            outer_fixed_id: false,
            ecn: false,
            segs: 0,
        }
    }
}

/// The kind of input a receive hash was computed over (the RSS hash types of
/// Microsoft's RSS and of `virtio_net_hdr_v1_hash.hash_report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RssHashType {
    /// Source and destination IPv4 addresses.
    Ipv4,
    /// IPv4 addresses and TCP ports.
    TcpIpv4,
    /// IPv4 addresses and UDP ports.
    UdpIpv4,
    /// Source and destination IPv6 addresses.
    Ipv6,
    /// IPv6 addresses and TCP ports.
    TcpIpv6,
    /// IPv6 addresses and UDP ports.
    UdpIpv6,
}

/// A receive hash and what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RssHash {
    /// The 32-bit hash value.
    pub value: u32,
    /// What it was computed over.
    pub kind: RssHashType,
}

/// What travels with a frame between the stack and the NIC layer: 24 bytes,
/// `Copy`, moved by value with every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct OffloadMeta {
    /// Checksum state.
    pub csum: Checksum,
    /// Segmentation request or coalescing record.
    pub gso: Option<Gso>,
    /// Receive hash, when known.
    pub rss: Option<RssHash>,
}

impl OffloadMeta {
    /// Meta for a frame whose checksums are complete and that needs no segmentation.
    pub const fn plain() -> OffloadMeta {
        OffloadMeta {
            csum: Checksum::None,
            gso: None,
            rss: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The meta moves with every frame: keep it small (issue 15).
    #[test]
    fn meta_is_small() {
        assert_eq!(size_of::<OffloadMeta>(), 24);
    }
}
