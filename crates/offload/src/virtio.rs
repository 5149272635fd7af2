//! `virtio_net_hdr`: the header a TAP device with `IFF_VNET_HDR` puts before every
//! frame, converted to and from [`OffloadMeta`].
//!
//! Four sizes exist (virtio 1.2 section 5.1.6, Linux `include/uapi/linux/virtio_net.h`),
//! all little-endian here (a v1 header is; a legacy one is with `TUNSETVNETLE` or on a
//! little-endian host):
//!
//! ```text
//!  0      1         2        4         6           8            10           12
//!  flags  gso_type  hdr_len  gso_size  csum_start  csum_offset  num_buffers      (v1: 12)
//!  12          16           18       20               22               24
//!  hash_value  hash_report  padding  outer_th_offset  inner_nh_offset            (24)
//! ```
//!
//! [`HdrLen::Legacy`] is `struct virtio_net_hdr` (10 bytes), [`HdrLen::V1`] adds
//! `num_buffers` (`struct virtio_net_hdr_v1`), [`HdrLen::V1Hash`] the receive hash
//! (`struct virtio_net_hdr_v1_hash`) and [`HdrLen::V1HashTunnel`] the offsets of the
//! outer transport and inner network headers that UDP-tunnel GSO needs (`struct
//! virtio_net_hdr_v1_hash_tunnel`, Linux 6.17: `VIRTIO_NET_F_HOST_UDP_TUNNEL_GSO`).
//!
//! The mapping to [`OffloadMeta`] follows Linux's `virtio_net_hdr_to_skb`,
//! `virtio_net_hdr_tnl_to_skb`, `virtio_net_chk_data_valid` and their `_from_skb`
//! counterparts:
//!
//! | virtio_net_hdr                                   | OffloadMeta                          |
//! |--------------------------------------------------|--------------------------------------|
//! | `NEEDS_CSUM`, `csum_start`, `csum_offset`        | `Checksum::Partial { start, offset }`|
//! | `DATA_VALID`                                     | `Checksum::Verified { levels: 1 }`   |
//! | `DATA_VALID` + `UDP_TUNNEL_CSUM` (not tunnel GSO)| `Checksum::Verified { levels: 2 }`   |
//! | `TCPV4` / `TCPV6` / `UDP_L4`, `gso_size`         | `Gso { kind, size }`                 |
//! | `ECN`                                            | `Gso::ecn`                           |
//! | `UDP_TUNNEL_IPV4` / `_IPV6`                      | `GsoTunnel::Udp`                     |
//! | `UDP_TUNNEL_CSUM` (with tunnel GSO)              | `GsoTunnel::Udp { outer_csum: true }`|
//! | `RSC_INFO` with `DATA_VALID`, `csum_start`       | `Gso::segs` (virtio `RSC_EXT`)       |
//! | `hash_value`, `hash_report`                      | `RssHash`                            |
//!
//! What the header cannot say: GSO inside GRE (no virtio GSO type: [`from_meta`]
//! refuses it), the fixed-ID flags (`SKB_GSO_TCP_FIXEDID` never crosses virtio;
//! [`to_meta`] says "incrementing", as the kernel assumes), UFO (`GSO_UDP`, refused),
//! a GSO size of zero with a GSO type (refused, as Linux does; `Gso { size: 0 }` is
//! written as "no GSO", which is what Linux means by it), and segment counts of a
//! partial-checksum frame (the `csum_*` fields are taken). Everything else converts
//! both ways without loss.
//!
//! [`to_meta`] parses the frame itself ([`linerate_wire::layout::parse`]): `hdr_len`
//! and the tunnel offsets from a kernel are not trusted (they are not checked
//! against the frame either; the parse is what the GSO type is checked against).
//! [`from_meta`] parses it too, for `hdr_len` and the tunnel offsets.
//!
//! [`from_meta`]: VirtioNetHdr::from_meta
//! [`to_meta`]: VirtioNetHdr::to_meta
//!
//! ```
//! use linerate_offload::virtio::{HdrLen, VirtioNetHdr, flags, gso_type};
//! use linerate_offload::{csum, Gso, GsoType, OffloadMeta};
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::layout;
//!
//! let mut frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
//!     .build(&[0; 4000]);
//! let l = layout::parse(&frame).unwrap();
//! let meta = OffloadMeta {
//!     csum: csum::prepare_partial(&mut frame, &l).unwrap(),
//!     gso: Some(Gso::new(GsoType::TcpV4, 1448)),
//!     ..OffloadMeta::plain()
//! };
//! let hdr = VirtioNetHdr::from_meta(&meta, &frame).unwrap();
//! assert_eq!((hdr.flags, hdr.gso_type, hdr.hdr_len), (flags::NEEDS_CSUM, gso_type::TCPV4, 54));
//! let mut wire = [0u8; 12];
//! hdr.write(&mut wire, HdrLen::V1).unwrap();
//! let back = VirtioNetHdr::read(&wire, HdrLen::V1).unwrap();
//! assert_eq!(back.to_meta(&frame).unwrap(), meta);
//! ```

use crate::meta::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta, RssHash, RssHashType};
use core::fmt;
use linerate_wire::layout::{self, Headers, L3Kind, L4Kind, Layout, TunnelKind};

/// `flags` bits (`VIRTIO_NET_HDR_F_*`).
pub mod flags {
    /// The checksum is partial: complete it from `csum_start` to the end, into
    /// `csum_start + csum_offset`.
    pub const NEEDS_CSUM: u8 = 1;
    /// The checksum has been verified (receive).
    pub const DATA_VALID: u8 = 2;
    /// `csum_start` and `csum_offset` hold the coalesced segment count and the
    /// duplicate ACK count (receive segment coalescing, `VIRTIO_NET_F_RSC_EXT`).
    pub const RSC_INFO: u8 = 4;
    /// UDP tunnel GSO: the outer UDP checksum is to be computed per segment; with
    /// `DATA_VALID` and no tunnel GSO: the inner checksum was verified too.
    pub const UDP_TUNNEL_CSUM: u8 = 8;
}

/// `gso_type` values and bits (`VIRTIO_NET_HDR_GSO_*`).
pub mod gso_type {
    /// Not a GSO frame.
    pub const NONE: u8 = 0;
    /// TCP over IPv4 (TSO).
    pub const TCPV4: u8 = 1;
    /// UDP fragmentation offload (UFO; not supported here).
    pub const UDP: u8 = 3;
    /// TCP over IPv6.
    pub const TCPV6: u8 = 4;
    /// UDP segmentation (USO), IPv4 and IPv6.
    pub const UDP_L4: u8 = 5;
    /// Inside a UDP tunnel over IPv4 (needs [`super::HdrLen::V1HashTunnel`]).
    pub const UDP_TUNNEL_IPV4: u8 = 0x20;
    /// Inside a UDP tunnel over IPv6 (needs [`super::HdrLen::V1HashTunnel`]).
    pub const UDP_TUNNEL_IPV6: u8 = 0x40;
    /// Both tunnel bits.
    pub const UDP_TUNNEL: u8 = UDP_TUNNEL_IPV4 | UDP_TUNNEL_IPV6;
    /// The first segment carries CWR (TCP ECN).
    pub const ECN: u8 = 0x80;
}

/// `hash_report` values (`VIRTIO_NET_HASH_REPORT_*`).
pub mod hash_report {
    /// No hash.
    pub const NONE: u16 = 0;
    /// IPv4 addresses.
    pub const IPV4: u16 = 1;
    /// IPv4 addresses and TCP ports.
    pub const TCPV4: u16 = 2;
    /// IPv4 addresses and UDP ports.
    pub const UDPV4: u16 = 3;
    /// IPv6 addresses.
    pub const IPV6: u16 = 4;
    /// IPv6 addresses and TCP ports.
    pub const TCPV6: u16 = 5;
    /// IPv6 addresses and UDP ports.
    pub const UDPV6: u16 = 6;
    /// IPv6 addresses, home/routing addresses from extension headers.
    pub const IPV6_EX: u16 = 7;
    /// [`IPV6_EX`] with TCP ports.
    pub const TCPV6_EX: u16 = 8;
    /// [`IPV6_EX`] with UDP ports.
    pub const UDPV6_EX: u16 = 9;
}

/// Which header layout is on the wire (`TUNSETVNETHDRSZ`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HdrLen {
    /// `struct virtio_net_hdr`, 10 bytes (TAP's default).
    Legacy,
    /// `struct virtio_net_hdr_v1`, 12 bytes.
    V1,
    /// `struct virtio_net_hdr_v1_hash`, 20 bytes.
    V1Hash,
    /// `struct virtio_net_hdr_v1_hash_tunnel`, 24 bytes.
    V1HashTunnel,
}

impl HdrLen {
    /// The size in bytes.
    pub const fn bytes(self) -> usize {
        match self {
            HdrLen::Legacy => 10,
            HdrLen::V1 => 12,
            HdrLen::V1Hash => 20,
            HdrLen::V1HashTunnel => 24,
        }
    }

    /// The layout of this many bytes, if it is one.
    pub const fn from_bytes(n: usize) -> Option<HdrLen> {
        match n {
            10 => Some(HdrLen::Legacy),
            12 => Some(HdrLen::V1),
            20 => Some(HdrLen::V1Hash),
            24 => Some(HdrLen::V1HashTunnel),
            _ => None,
        }
    }

    const fn has_hash(self) -> bool {
        matches!(self, HdrLen::V1Hash | HdrLen::V1HashTunnel)
    }
}

/// Why a header could not be read, written or converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VirtioError {
    /// The buffer is shorter than the header.
    Short {
        /// Bytes the header needs.
        need: usize,
        /// Bytes the buffer has.
        have: usize,
    },
    /// The frame's headers do not parse.
    Layout(linerate_wire::Error),
    /// A `gso_type` this crate does not handle (UFO, unknown values).
    UnsupportedGsoType(u8),
    /// A GSO type with `gso_size` zero (Linux refuses it too).
    ZeroGsoSize,
    /// Both UDP tunnel bits, or tunnel/ECN bits without a GSO type.
    BadGsoType(u8),
    /// The frame does not carry what `gso_type` (or the meta's `Gso`) says: the
    /// protocols, or the tunnel.
    GsoMismatch {
        /// The `gso_type` in question.
        gso_type: u8,
    },
    /// UDP-tunnel GSO without `NEEDS_CSUM` (Linux requires the inner checksum to be
    /// partial).
    TunnelNeedsPartial,
    /// Flags that exclude each other (`NEEDS_CSUM` with `DATA_VALID` or `RSC_INFO`).
    ConflictingFlags(u8),
    /// `csum_start + csum_offset` lies outside the frame.
    CsumOutOfFrame {
        /// `csum_start`.
        start: u16,
        /// `csum_offset`.
        offset: u16,
        /// The frame's length.
        len: usize,
    },
    /// UDP-tunnel GSO needs the 24-byte header ([`HdrLen::V1HashTunnel`]).
    NeedsTunnelHeader,
    /// The meta cannot be expressed: GSO inside GRE, or a UDP tunnel over something
    /// other than IPv4/IPv6.
    Unrepresentable,
}

impl fmt::Display for VirtioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirtioError::Short { need, have } => {
                write!(f, "virtio_net_hdr needs {need} bytes, have {have}")
            }
            VirtioError::Layout(e) => write!(f, "frame does not parse: {e}"),
            VirtioError::UnsupportedGsoType(t) => write!(f, "unsupported gso_type {t:#04x}"),
            VirtioError::ZeroGsoSize => f.write_str("gso_type set with gso_size 0"),
            VirtioError::BadGsoType(t) => write!(f, "invalid gso_type {t:#04x}"),
            VirtioError::GsoMismatch { gso_type } => {
                write!(f, "frame does not match gso_type {gso_type:#04x}")
            }
            VirtioError::TunnelNeedsPartial => f.write_str("UDP tunnel GSO without NEEDS_CSUM"),
            VirtioError::ConflictingFlags(fl) => write!(f, "conflicting flags {fl:#04x}"),
            VirtioError::CsumOutOfFrame { start, offset, len } => write!(
                f,
                "csum_start {start} + csum_offset {offset} outside a {len}-byte frame"
            ),
            VirtioError::NeedsTunnelHeader => {
                f.write_str("UDP tunnel GSO needs the 24-byte virtio_net_hdr")
            }
            VirtioError::Unrepresentable => {
                f.write_str("offload metadata has no virtio_net_hdr form")
            }
        }
    }
}

impl std::error::Error for VirtioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VirtioError::Layout(e) => Some(e),
            _ => None,
        }
    }
}

impl From<linerate_wire::Error> for VirtioError {
    fn from(e: linerate_wire::Error) -> Self {
        VirtioError::Layout(e)
    }
}

/// A `virtio_net_hdr` in any of its sizes, as plain values (fields a shorter header
/// lacks are zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VirtioNetHdr {
    /// [`flags`] bits.
    pub flags: u8,
    /// [`gso_type`] value and bits.
    pub gso_type: u8,
    /// Bytes of headers (Ethernet through the segmented transport header).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Partial checksum start (or, with `RSC_INFO`, the coalesced segment count).
    pub csum_start: u16,
    /// Partial checksum field offset from `csum_start` (or, with `RSC_INFO`, the
    /// duplicate ACK count).
    pub csum_offset: u16,
    /// Merged receive buffers (v1 and longer).
    pub num_buffers: u16,
    /// Receive hash (20 and 24 bytes).
    pub hash_value: u32,
    /// What the hash covers, a [`hash_report`] value (20 and 24 bytes).
    pub hash_report: u16,
    /// Offset of the outer transport (UDP) header of a tunnel (24 bytes).
    pub outer_th_offset: u16,
    /// Offset of the inner network header of a tunnel (24 bytes).
    pub inner_nh_offset: u16,
}

#[inline]
fn le16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[lo, hi]) => u16::from_le_bytes([lo, hi]),
        _ => 0,
    }
}

#[inline]
fn put_le(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(s) = b.get_mut(at..at + v.len()) {
        s.copy_from_slice(v);
    }
}

impl VirtioNetHdr {
    /// Decodes a header of layout `len` from the start of `buf`.
    pub fn read(buf: &[u8], len: HdrLen) -> Result<VirtioNetHdr, VirtioError> {
        let need = len.bytes();
        let b = buf.get(..need).ok_or(VirtioError::Short {
            need,
            have: buf.len(),
        })?;
        let mut h = VirtioNetHdr {
            flags: b.first().copied().unwrap_or(0),
            gso_type: b.get(1).copied().unwrap_or(0),
            hdr_len: le16(b, 2),
            gso_size: le16(b, 4),
            csum_start: le16(b, 6),
            csum_offset: le16(b, 8),
            ..VirtioNetHdr::default()
        };
        if need >= 12 {
            h.num_buffers = le16(b, 10);
        }
        if len.has_hash() {
            h.hash_value = u32::from(le16(b, 12)) | u32::from(le16(b, 14)) << 16;
            h.hash_report = le16(b, 16);
        }
        if len == HdrLen::V1HashTunnel {
            h.outer_th_offset = le16(b, 20);
            h.inner_nh_offset = le16(b, 22);
        }
        Ok(h)
    }

    /// Encodes the header as layout `len` into the start of `buf` and returns its
    /// size. Fields the layout lacks are dropped (the hash from a 10- or 12-byte
    /// header), except UDP-tunnel GSO, which is an error below 24 bytes.
    pub fn write(&self, buf: &mut [u8], len: HdrLen) -> Result<usize, VirtioError> {
        let need = len.bytes();
        if self.gso_type & gso_type::UDP_TUNNEL != 0 && len != HdrLen::V1HashTunnel {
            return Err(VirtioError::NeedsTunnelHeader);
        }
        let have = buf.len();
        let b = buf
            .get_mut(..need)
            .ok_or(VirtioError::Short { need, have })?;
        b.fill(0);
        put_le(b, 0, &[self.flags, self.gso_type]);
        put_le(b, 2, &self.hdr_len.to_le_bytes());
        put_le(b, 4, &self.gso_size.to_le_bytes());
        put_le(b, 6, &self.csum_start.to_le_bytes());
        put_le(b, 8, &self.csum_offset.to_le_bytes());
        if need >= 12 {
            put_le(b, 10, &self.num_buffers.to_le_bytes());
        }
        if len.has_hash() {
            put_le(b, 12, &self.hash_value.to_le_bytes());
            put_le(b, 16, &self.hash_report.to_le_bytes());
        }
        if len == HdrLen::V1HashTunnel {
            put_le(b, 20, &self.outer_th_offset.to_le_bytes());
            put_le(b, 22, &self.inner_nh_offset.to_le_bytes());
        }
        Ok(need)
    }

    /// The offload metadata this header gives `frame` (which follows the header).
    ///
    /// The frame is parsed here (a frame that does not parse is refused). `hdr_len` and
    /// the tunnel offsets are ignored; the GSO type must match the parsed frame
    /// (TCPv4: IPv4 and TCP, TCPv6: IPv6 and TCP, UDP_L4: UDP, in the inner headers
    /// of a UDP tunnel whose outer IP version is the tunnel bit's).
    pub fn to_meta(&self, frame: &[u8]) -> Result<OffloadMeta, VirtioError> {
        let layout = layout::parse(frame)?;
        let f = self.flags;
        let needs = f & flags::NEEDS_CSUM != 0;
        let valid = f & flags::DATA_VALID != 0;
        let rsc = f & flags::RSC_INFO != 0;
        if needs && (valid || rsc) {
            return Err(VirtioError::ConflictingFlags(f));
        }
        let tunnel_bits = self.gso_type & gso_type::UDP_TUNNEL;
        let csum = if needs {
            let (start, offset) = (self.csum_start, self.csum_offset);
            if usize::from(start) + usize::from(offset) + 2 > frame.len() {
                return Err(VirtioError::CsumOutOfFrame {
                    start,
                    offset,
                    len: frame.len(),
                });
            }
            Checksum::Partial { start, offset }
        } else if valid {
            let inner = tunnel_bits == 0 && f & flags::UDP_TUNNEL_CSUM != 0;
            Checksum::Verified {
                levels: 1 + u8::from(inner),
            }
        } else {
            Checksum::None
        };
        let mut gso = self.gso(&layout, f & flags::UDP_TUNNEL_CSUM != 0)?;
        if let Some(g) = &mut gso {
            if g.tunnel != GsoTunnel::None && !needs {
                return Err(VirtioError::TunnelNeedsPartial);
            }
            if rsc && valid {
                g.segs = self.csum_start;
            }
        }
        let rss = rss_from(self.hash_value, self.hash_report);
        Ok(OffloadMeta { csum, gso, rss })
    }

    /// The [`Gso`] of `gso_type` and `gso_size`, checked against the frame.
    fn gso(&self, layout: &Layout, tunnel_csum: bool) -> Result<Option<Gso>, VirtioError> {
        let t = self.gso_type;
        let tunnel_bits = t & gso_type::UDP_TUNNEL;
        let base = t & !(gso_type::UDP_TUNNEL | gso_type::ECN);
        let kind = match base {
            gso_type::NONE if t == gso_type::NONE => return Ok(None),
            gso_type::NONE => return Err(VirtioError::BadGsoType(t)),
            gso_type::TCPV4 => GsoType::TcpV4,
            gso_type::TCPV6 => GsoType::TcpV6,
            gso_type::UDP_L4 => GsoType::UdpL4,
            _ => return Err(VirtioError::UnsupportedGsoType(t)),
        };
        if self.gso_size == 0 {
            return Err(VirtioError::ZeroGsoSize);
        }
        let mismatch = VirtioError::GsoMismatch { gso_type: t };
        let (tunnel, segmented) = match tunnel_bits {
            0 => (GsoTunnel::None, &layout.outer),
            gso_type::UDP_TUNNEL_IPV4 | gso_type::UDP_TUNNEL_IPV6 => {
                let outer_l3 = if tunnel_bits == gso_type::UDP_TUNNEL_IPV4 {
                    L3Kind::Ipv4
                } else {
                    L3Kind::Ipv6
                };
                let udp_tunnel = layout
                    .tunnel
                    .is_some_and(|tn| matches!(tn.kind, TunnelKind::Vxlan | TunnelKind::Geneve));
                match &layout.inner {
                    Some(inner) if udp_tunnel && layout.outer.l3 == outer_l3 => (
                        GsoTunnel::Udp {
                            outer_csum: tunnel_csum,
                        },
                        inner,
                    ),
                    _ => return Err(mismatch),
                }
            }
            _ => return Err(VirtioError::BadGsoType(t)),
        };
        if !kind_matches(kind, segmented) {
            return Err(mismatch);
        }
        Ok(Some(Gso {
            kind,
            size: self.gso_size,
            tunnel,
            fixed_id: false,
            outer_fixed_id: false,
            ecn: t & gso_type::ECN != 0,
            segs: 0,
        }))
    }

    /// The header for `frame` with offload metadata `meta` (the frame is parsed
    /// here, for `hdr_len` and the tunnel offsets).
    ///
    /// `hdr_len` counts the headers up to and including the segmented transport
    /// header (the inner one in a UDP tunnel, as the virtio specification asks);
    /// it is zero without GSO, as Linux writes it. `Checksum::Verified` with more
    /// than two levels is written as two (`csum_level` 1 is the most virtio says);
    /// with zero levels, as nothing verified.
    pub fn from_meta(meta: &OffloadMeta, frame: &[u8]) -> Result<VirtioNetHdr, VirtioError> {
        let parsed = layout::parse(frame)?;
        let l = &parsed;
        let mut h = VirtioNetHdr::default();
        let mut verified_inner = false;
        match meta.csum {
            Checksum::None | Checksum::Verified { levels: 0 } => {}
            Checksum::Partial { start, offset } => {
                h.flags |= flags::NEEDS_CSUM;
                h.csum_start = start;
                h.csum_offset = offset;
            }
            Checksum::Verified { levels } => {
                h.flags |= flags::DATA_VALID;
                verified_inner = levels >= 2;
            }
        }
        if let Some(g) = meta.gso.filter(|g| g.size != 0) {
            let mut t = match g.kind {
                GsoType::TcpV4 => gso_type::TCPV4,
                GsoType::TcpV6 => gso_type::TCPV6,
                GsoType::UdpL4 => gso_type::UDP_L4,
            };
            if g.ecn {
                t |= gso_type::ECN;
            }
            let segmented = match g.tunnel {
                GsoTunnel::None => &l.outer,
                GsoTunnel::Gre { .. } => return Err(VirtioError::Unrepresentable),
                GsoTunnel::Udp { outer_csum } => {
                    let udp_tunnel = l.tunnel.is_some_and(|tn| {
                        matches!(tn.kind, TunnelKind::Vxlan | TunnelKind::Geneve)
                    });
                    let inner = l
                        .inner
                        .as_ref()
                        .filter(|_| udp_tunnel)
                        .ok_or(VirtioError::GsoMismatch { gso_type: t })?;
                    if !matches!(meta.csum, Checksum::Partial { .. }) {
                        return Err(VirtioError::TunnelNeedsPartial);
                    }
                    t |= match l.outer.l3 {
                        L3Kind::Ipv4 => gso_type::UDP_TUNNEL_IPV4,
                        L3Kind::Ipv6 => gso_type::UDP_TUNNEL_IPV6,
                        _ => return Err(VirtioError::Unrepresentable),
                    };
                    if outer_csum {
                        h.flags |= flags::UDP_TUNNEL_CSUM;
                    }
                    h.outer_th_offset = l.outer.l4_offset;
                    h.inner_nh_offset = inner.l3_offset;
                    inner
                }
            };
            if !kind_matches(g.kind, segmented) {
                return Err(VirtioError::GsoMismatch { gso_type: t });
            }
            h.gso_type = t;
            h.gso_size = g.size;
            h.hdr_len = segmented.payload;
            if g.segs != 0 && h.flags & flags::DATA_VALID != 0 {
                h.flags |= flags::RSC_INFO;
                h.csum_start = g.segs;
            }
        }
        if verified_inner && h.gso_type & gso_type::UDP_TUNNEL == 0 {
            h.flags |= flags::UDP_TUNNEL_CSUM;
        }
        if let Some(r) = meta.rss {
            h.hash_value = r.value;
            h.hash_report = report_of(r.kind);
        }
        Ok(h)
    }
}

/// True if the headers `h` are what a GSO of `kind` segments.
pub(crate) fn kind_matches(kind: GsoType, h: &Headers) -> bool {
    match kind {
        GsoType::TcpV4 => h.l3 == L3Kind::Ipv4 && h.l4 == L4Kind::Tcp,
        GsoType::TcpV6 => h.l3 == L3Kind::Ipv6 && h.l4 == L4Kind::Tcp,
        GsoType::UdpL4 => matches!(h.l3, L3Kind::Ipv4 | L3Kind::Ipv6) && h.l4 == L4Kind::Udp,
    }
}

fn rss_from(value: u32, report: u16) -> Option<RssHash> {
    let kind = match report {
        hash_report::IPV4 => RssHashType::Ipv4,
        hash_report::TCPV4 => RssHashType::TcpIpv4,
        hash_report::UDPV4 => RssHashType::UdpIpv4,
        hash_report::IPV6 | hash_report::IPV6_EX => RssHashType::Ipv6,
        hash_report::TCPV6 | hash_report::TCPV6_EX => RssHashType::TcpIpv6,
        hash_report::UDPV6 | hash_report::UDPV6_EX => RssHashType::UdpIpv6,
        _ => return None,
    };
    Some(RssHash { value, kind })
}

const fn report_of(kind: RssHashType) -> u16 {
    match kind {
        RssHashType::Ipv4 => hash_report::IPV4,
        RssHashType::TcpIpv4 => hash_report::TCPV4,
        RssHashType::UdpIpv4 => hash_report::UDPV4,
        RssHashType::Ipv6 => hash_report::IPV6,
        RssHashType::TcpIpv6 => hash_report::TCPV6,
        RssHashType::UdpIpv6 => hash_report::UDPV6,
    }
}

#[cfg(test)]
mod tests;
