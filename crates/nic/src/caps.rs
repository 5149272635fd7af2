//! What a backend does itself: [`NicCaps`] and the set of [`Offloads`].
//!
//! The same [`Offloads`] set describes a backend's hardware (or kernel) offloads and,
//! in the shim, which software offloads are switched on, so "what the backend lacks"
//! is a set difference. Names follow `ethtool -k` and Linux's `NETIF_F_*` features.

use linerate_offload::{Checksum, GsoTunnel, GsoType, OffloadMeta};

/// Offload features, one flag each (`ethtool -k` names in the field docs).
///
/// Transmit flags say what the backend completes or segments for frames handed to
/// it; receive flags say what it does to frames before handing them over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Offloads {
    /// `tx-checksumming`: completes a [`Checksum::Partial`] transport checksum
    /// at any offset (`NETIF_F_HW_CSUM`).
    pub tx_csum: bool,
    /// `rx-checksumming`: verifies transport checksums and marks good frames
    /// [`Checksum::Verified`].
    pub rx_csum: bool,
    /// `tx-tcp-segmentation`: segments TCP/IPv4 super-frames (`NETIF_F_TSO`).
    pub tso4: bool,
    /// `tx-tcp6-segmentation`: segments TCP/IPv6 super-frames (`NETIF_F_TSO6`).
    pub tso6: bool,
    /// `tx-tcp-ecn-segmentation`: segments super-frames whose first segment
    /// carries CWR (`NETIF_F_TSO_ECN`).
    pub tso_ecn: bool,
    /// `tx-udp-segmentation`: segments UDP super-datagrams, over IPv4 and IPv6
    /// (`NETIF_F_GSO_UDP_L4`).
    pub uso: bool,
    /// `tx-udp_tnl-segmentation`: segments super-frames inside a UDP tunnel with
    /// a zero outer checksum (`NETIF_F_GSO_UDP_TUNNEL`).
    pub tunnel_udp: bool,
    /// `tx-udp_tnl-csum-segmentation`: the same with an outer UDP checksum per
    /// segment (`NETIF_F_GSO_UDP_TUNNEL_CSUM`).
    pub tunnel_udp_csum: bool,
    /// `tx-gre-segmentation`: segments super-frames inside GRE without a GRE
    /// checksum (`NETIF_F_GSO_GRE`).
    pub tunnel_gre: bool,
    /// `tx-gre-csum-segmentation`: the same with a GRE checksum per segment
    /// (`NETIF_F_GSO_GRE_CSUM`).
    pub tunnel_gre_csum: bool,
    /// `large-receive-offload` / `rx-gro-hw`: receive may deliver coalesced
    /// super-frames, marked with their [`linerate_offload::Gso`] record.
    pub lro: bool,
}

impl Offloads {
    /// No offload at all.
    pub const NONE: Offloads = Offloads {
        tx_csum: false,
        rx_csum: false,
        tso4: false,
        tso6: false,
        tso_ecn: false,
        uso: false,
        tunnel_udp: false,
        tunnel_udp_csum: false,
        tunnel_gre: false,
        tunnel_gre_csum: false,
        lro: false,
    };

    /// Every offload.
    pub const ALL: Offloads = Offloads {
        tx_csum: true,
        rx_csum: true,
        tso4: true,
        tso6: true,
        tso_ecn: true,
        uso: true,
        tunnel_udp: true,
        tunnel_udp_csum: true,
        tunnel_gre: true,
        tunnel_gre_csum: true,
        lro: true,
    };

    /// Each flag with its `ethtool -k` name, in a fixed order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, bool)> {
        [
            ("tx-checksumming", self.tx_csum),
            ("rx-checksumming", self.rx_csum),
            ("tx-tcp-segmentation", self.tso4),
            ("tx-tcp6-segmentation", self.tso6),
            ("tx-tcp-ecn-segmentation", self.tso_ecn),
            ("tx-udp-segmentation", self.uso),
            ("tx-udp_tnl-segmentation", self.tunnel_udp),
            ("tx-udp_tnl-csum-segmentation", self.tunnel_udp_csum),
            ("tx-gre-segmentation", self.tunnel_gre),
            ("tx-gre-csum-segmentation", self.tunnel_gre_csum),
            ("large-receive-offload", self.lro),
        ]
        .into_iter()
    }

    /// The flags set in both `self` and `other`.
    pub const fn intersect(self, other: Offloads) -> Offloads {
        Offloads {
            tx_csum: self.tx_csum && other.tx_csum,
            rx_csum: self.rx_csum && other.rx_csum,
            tso4: self.tso4 && other.tso4,
            tso6: self.tso6 && other.tso6,
            tso_ecn: self.tso_ecn && other.tso_ecn,
            uso: self.uso && other.uso,
            tunnel_udp: self.tunnel_udp && other.tunnel_udp,
            tunnel_udp_csum: self.tunnel_udp_csum && other.tunnel_udp_csum,
            tunnel_gre: self.tunnel_gre && other.tunnel_gre,
            tunnel_gre_csum: self.tunnel_gre_csum && other.tunnel_gre_csum,
            lro: self.lro && other.lro,
        }
    }

    /// The flags set in `self` but not in `other` (what a shim over a backend
    /// with `other` must do in software).
    pub const fn minus(self, other: Offloads) -> Offloads {
        Offloads {
            tx_csum: self.tx_csum && !other.tx_csum,
            rx_csum: self.rx_csum && !other.rx_csum,
            tso4: self.tso4 && !other.tso4,
            tso6: self.tso6 && !other.tso6,
            tso_ecn: self.tso_ecn && !other.tso_ecn,
            uso: self.uso && !other.uso,
            tunnel_udp: self.tunnel_udp && !other.tunnel_udp,
            tunnel_udp_csum: self.tunnel_udp_csum && !other.tunnel_udp_csum,
            tunnel_gre: self.tunnel_gre && !other.tunnel_gre,
            tunnel_gre_csum: self.tunnel_gre_csum && !other.tunnel_gre_csum,
            lro: self.lro && !other.lro,
        }
    }

    /// True if these offloads segment a super-frame marked `gso`: the protocol's
    /// flag, ECN if the first segment carries CWR, and the tunnel kind's flag.
    pub const fn segments(&self, gso: &linerate_offload::Gso) -> bool {
        let proto = match gso.kind {
            GsoType::TcpV4 => self.tso4,
            GsoType::TcpV6 => self.tso6,
            GsoType::UdpL4 => self.uso,
        };
        let ecn = !gso.ecn || self.tso_ecn;
        let tunnel = match gso.tunnel {
            GsoTunnel::None => true,
            GsoTunnel::Udp { outer_csum: false } => self.tunnel_udp,
            GsoTunnel::Udp { outer_csum: true } => self.tunnel_udp_csum,
            GsoTunnel::Gre { csum: false } => self.tunnel_gre,
            GsoTunnel::Gre { csum: true } => self.tunnel_gre_csum,
        };
        proto && ecn && tunnel
    }

    /// Checks that a backend with these offloads can put a frame marked `meta` on
    /// the wire as it is: its segmentation request, if any, is one it performs,
    /// and a partial checksum is one it completes.
    pub fn check_tx(&self, meta: &OffloadMeta) -> Result<(), Unsupported> {
        if let Some(gso) = &meta.gso
            && !self.segments(gso)
        {
            return Err(Unsupported::Gso(*gso));
        }
        if matches!(meta.csum, Checksum::Partial { .. }) && !self.tx_csum {
            return Err(Unsupported::ChecksumPartial);
        }
        Ok(())
    }
}

/// An offload a frame asks for that the backend does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsupported {
    /// The frame asks for segmentation of a kind the backend cannot do.
    Gso(linerate_offload::Gso),
    /// The frame carries a partial checksum and the backend cannot complete it.
    ChecksumPartial,
}

impl core::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Unsupported::Gso(g) => write!(
                f,
                "the backend cannot segment {:?} (size {}, tunnel {:?}, ecn {})",
                g.kind, g.size, g.tunnel, g.ecn
            ),
            Unsupported::ChecksumPartial => {
                f.write_str("the backend cannot complete a partial checksum")
            }
        }
    }
}

impl std::error::Error for Unsupported {}

/// Receive-side scaling parameters of a backend that hashes in hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RssCaps {
    /// Toeplitz key length in bytes (40 on most NICs, 52 on some).
    pub key_len: u16,
    /// Indirection table size in entries (128 is the Microsoft and ixgbe
    /// convention; 64..512 elsewhere).
    pub table_len: u16,
}

/// What a backend does itself: MTU, segmentation limits, offloads, queues, RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NicCaps {
    /// The wire MTU: the largest IP packet (Ethernet payload, VLAN tags
    /// excluded) a frame not marked for segmentation may carry.
    pub mtu: u16,
    /// The largest super-frame the backend segments or delivers, headers
    /// included (64 KiB for Linux's TSO).
    pub max_gso_size: u32,
    /// The largest number of segments one super-frame may ask for.
    pub max_gso_segs: u16,
    /// The backend's own offloads.
    pub offloads: Offloads,
    /// Number of queue pairs (combined channels, `ethtool -l`).
    pub queues: u16,
    /// Hardware RSS, if the backend hashes and steers received frames itself.
    pub rss: Option<RssCaps>,
}

impl NicCaps {
    /// Standard Ethernet MTU.
    pub const ETHERNET_MTU: u16 = 1500;
    /// Linux's limit on a GSO super-frame (`GSO_LEGACY_MAX_SIZE`).
    pub const GSO_MAX_SIZE: u32 = 65_536;
    /// Linux's limit on the segments of one super-frame (`GSO_MAX_SEGS`).
    pub const GSO_MAX_SEGS: u16 = 65_535;

    /// A backend with MTU 1500, one queue, no offload and no RSS.
    pub const fn plain() -> NicCaps {
        NicCaps {
            mtu: Self::ETHERNET_MTU,
            max_gso_size: Self::GSO_MAX_SIZE,
            max_gso_segs: Self::GSO_MAX_SEGS,
            offloads: Offloads::NONE,
            queues: 1,
            rss: None,
        }
    }

    /// A backend with MTU 1500, one queue and every offload.
    pub const fn full() -> NicCaps {
        NicCaps {
            offloads: Offloads::ALL,
            ..NicCaps::plain()
        }
    }

    /// The largest frame not marked for segmentation, for a frame with
    /// `vlan_tags` VLAN tags: MTU plus the Ethernet header and tags.
    pub const fn max_frame_len(&self, vlan_tags: u8) -> usize {
        self.mtu as usize + crate::ETH_HEADER_LEN + 4 * vlan_tags as usize
    }
}

impl Default for NicCaps {
    fn default() -> Self {
        NicCaps::plain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_offload::Gso;

    #[test]
    fn segments_needs_protocol_ecn_and_tunnel() {
        let mut o = Offloads::NONE;
        let mut g = Gso::new(GsoType::TcpV4, 1448);
        assert!(!o.segments(&g));
        o.tso4 = true;
        assert!(o.segments(&g));
        g.ecn = true;
        assert!(!o.segments(&g));
        o.tso_ecn = true;
        assert!(o.segments(&g));
        g.tunnel = GsoTunnel::Udp { outer_csum: true };
        o.tunnel_udp = true;
        assert!(
            !o.segments(&g),
            "zero-checksum tunnel TSO is not the csum kind"
        );
        o.tunnel_udp_csum = true;
        assert!(o.segments(&g));
        assert!(!o.segments(&Gso::new(GsoType::UdpL4, 1000)));
    }

    #[test]
    fn check_tx_reports_what_is_missing() {
        let o = Offloads {
            tso6: true,
            ..Offloads::NONE
        };
        let meta = OffloadMeta {
            gso: Some(Gso::new(GsoType::TcpV6, 1440)),
            csum: Checksum::Partial {
                start: 54,
                offset: 16,
            },
            ..OffloadMeta::plain()
        };
        assert_eq!(o.check_tx(&meta), Err(Unsupported::ChecksumPartial));
        let o = Offloads { tx_csum: true, ..o };
        assert_eq!(o.check_tx(&meta), Ok(()));
        assert_eq!(Offloads::NONE.check_tx(&OffloadMeta::plain()), Ok(()));
    }

    #[test]
    fn set_algebra() {
        let a = Offloads::ALL;
        let b = Offloads {
            tso4: true,
            lro: true,
            ..Offloads::NONE
        };
        assert_eq!(a.intersect(b), b);
        let m = a.minus(b);
        assert!(!m.tso4 && !m.lro && m.tso6 && m.tx_csum);
        assert_eq!(a.iter().filter(|(_, on)| *on).count(), 11);
        assert_eq!(NicCaps::plain().max_frame_len(1), 1518);
    }
}
