//! What is hashed: the hash input per hash type, the per-type enable mask, and the
//! choice of outer or inner headers in tunnels.
//!
//! Microsoft's "RSS Hashing Types" and "RSS Hashing Functions": the input is the
//! source address, destination address, source port and destination port, in that
//! order and as on the wire (network byte order): 12 bytes for TCP or UDP over IPv4,
//! 36 over IPv6; 8 and 32 for the address-only types. As NICs do:
//!
//! * a hash type is used only if it is enabled ([`HashTypes`], like Microsoft's
//!   `NDIS_HASH_*` flags or `ethtool -N rx-flow-hash`); a TCP or UDP packet whose
//!   4-tuple type is disabled falls back to the address-only type of its family;
//! * fragments, the first one included, are hashed on addresses only, so every
//!   fragment of a datagram lands on one queue;
//! * for VXLAN, GENEVE and NVGRE frames the inner headers are hashed by default, so
//!   the flows of one tunnel spread over queues; [`TunnelHashing`] chooses the outer
//!   headers per tunnel kind instead. A tunnel whose inner frame is not IP is hashed
//!   on its outer headers.
//!
//! [`HashConfig::input`] reads the input at the offsets of a parsed
//! [`linerate_wire::layout`]; [`HashConfig::frame_input`] reads it straight from the
//! frame's bytes where it can ([`crate::extract`]) and parses only where it cannot,
//! with the same result.

use linerate_offload::RssHashType;
use linerate_wire::layout::{self, Fragment, Headers, L3Kind, L4Kind, Layout, TunnelKind};

/// The input of one hash: up to 36 bytes, and the hash type they are for.
///
/// ```
/// use linerate_rss::HashInput;
/// use linerate_offload::RssHashType;
/// let i = HashInput::udp_ipv4([10, 0, 0, 1], [10, 0, 0, 2], 5000, 53);
/// assert_eq!(i.kind(), RssHashType::UdpIpv4);
/// assert_eq!(i.as_bytes(), &[10, 0, 0, 1, 10, 0, 0, 2, 0x13, 0x88, 0, 53]);
/// assert_eq!(i.swapped().as_bytes(), &[10, 0, 0, 2, 10, 0, 0, 1, 0, 53, 0x13, 0x88]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C, align(8))]
pub struct HashInput {
    /// The input, zero-padded to [`HashInput::PADDED`] bytes so the SIMD path can
    /// read whole blocks.
    bytes: [u8; HashInput::PADDED],
    kind: RssHashType,
}

impl HashInput {
    /// Storage size: the longest input a 52-byte key covers, a multiple of 16.
    pub const PADDED: usize = 48;

    /// The input of `kind` from its address bytes (8 for IPv4, 32 for IPv6: source
    /// then destination) and, for the 4-tuple types, its port bytes.
    #[inline]
    pub(crate) fn build(kind: RssHashType, addrs: &[u8], ports: Option<[u8; 4]>) -> HashInput {
        let mut bytes = [0u8; HashInput::PADDED];
        let (a, rest) = bytes.split_at_mut(32);
        let n = if let Ok(v4) = <&[u8; 8]>::try_from(addrs) {
            if let Some(d) = a.first_chunk_mut::<8>() {
                *d = *v4;
            }
            8
        } else if let Ok(v6) = <&[u8; 32]>::try_from(addrs) {
            if let Some(d) = a.first_chunk_mut::<32>() {
                *d = *v6;
            }
            32
        } else {
            0
        };
        if let Some(p) = ports {
            let dst = if n == 8 {
                a.get_mut(8..12)
            } else {
                rest.get_mut(..4)
            };
            if let Some(d) = dst.and_then(|d| <&mut [u8; 4]>::try_from(d).ok()) {
                *d = p;
            }
        }
        HashInput { bytes, kind }
    }

    pub(crate) fn ports(src: u16, dst: u16) -> [u8; 4] {
        let [a, b] = src.to_be_bytes();
        let [c, d] = dst.to_be_bytes();
        [a, b, c, d]
    }

    /// IPv4 addresses only ([`RssHashType::Ipv4`], 8 bytes).
    pub fn ipv4(src: [u8; 4], dst: [u8; 4]) -> HashInput {
        let [a, b, c, d] = src;
        let [e, f, g, h] = dst;
        HashInput::build(RssHashType::Ipv4, &[a, b, c, d, e, f, g, h], None)
    }

    /// TCP over IPv4 ([`RssHashType::TcpIpv4`], 12 bytes).
    pub fn tcp_ipv4(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16) -> HashInput {
        HashInput::l4_ipv4(RssHashType::TcpIpv4, src, dst, src_port, dst_port)
    }

    /// UDP over IPv4 ([`RssHashType::UdpIpv4`], 12 bytes).
    pub fn udp_ipv4(src: [u8; 4], dst: [u8; 4], src_port: u16, dst_port: u16) -> HashInput {
        HashInput::l4_ipv4(RssHashType::UdpIpv4, src, dst, src_port, dst_port)
    }

    fn l4_ipv4(kind: RssHashType, src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> HashInput {
        let [a, b, c, d] = src;
        let [e, f, g, h] = dst;
        HashInput::build(
            kind,
            &[a, b, c, d, e, f, g, h],
            Some(HashInput::ports(sp, dp)),
        )
    }

    /// IPv6 addresses only ([`RssHashType::Ipv6`], 32 bytes).
    pub fn ipv6(src: [u8; 16], dst: [u8; 16]) -> HashInput {
        HashInput::build(RssHashType::Ipv6, &concat16(src, dst), None)
    }

    /// TCP over IPv6 ([`RssHashType::TcpIpv6`], 36 bytes).
    pub fn tcp_ipv6(src: [u8; 16], dst: [u8; 16], src_port: u16, dst_port: u16) -> HashInput {
        let p = Some(HashInput::ports(src_port, dst_port));
        HashInput::build(RssHashType::TcpIpv6, &concat16(src, dst), p)
    }

    /// UDP over IPv6 ([`RssHashType::UdpIpv6`], 36 bytes).
    pub fn udp_ipv6(src: [u8; 16], dst: [u8; 16], src_port: u16, dst_port: u16) -> HashInput {
        let p = Some(HashInput::ports(src_port, dst_port));
        HashInput::build(RssHashType::UdpIpv6, &concat16(src, dst), p)
    }

    /// The hash type.
    #[inline]
    pub fn kind(&self) -> RssHashType {
        self.kind
    }

    /// The input length in bytes: 8, 12, 32 or 36.
    #[inline]
    pub fn len(&self) -> usize {
        input_len(self.kind)
    }

    /// Always false: every hash type has input.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The input bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..self.len()).unwrap_or_default()
    }

    /// The input bytes zero-padded to [`HashInput::PADDED`].
    #[inline]
    pub(crate) fn padded(&self) -> &[u8; HashInput::PADDED] {
        &self.bytes
    }

    /// The input of the reverse direction: source and destination exchanged.
    pub fn swapped(&self) -> HashInput {
        let (alen, has_ports) = shape(self.kind);
        let half = alen / 2;
        let mut out = [0u8; HashInput::PADDED];
        let b = &self.bytes;
        let src = b.get(..half).unwrap_or_default();
        let dst = b.get(half..alen).unwrap_or_default();
        let (s, rest) = out.split_at_mut(half);
        s.copy_from_slice(dst);
        let (d, rest) = rest.split_at_mut(half);
        d.copy_from_slice(src);
        if has_ports
            && let Some(&[a, b, c, d]) = b.get(alen..alen + 4)
            && let Some(o) = rest.first_chunk_mut::<4>()
        {
            *o = [c, d, a, b];
        }
        HashInput {
            bytes: out,
            kind: self.kind,
        }
    }
}

pub(crate) fn concat16(a: [u8; 16], b: [u8; 16]) -> [u8; 32] {
    let mut o = [0u8; 32];
    let (x, y) = o.split_at_mut(16);
    x.copy_from_slice(&a);
    y.copy_from_slice(&b);
    o
}

/// Address bytes and whether ports follow, per hash type.
pub(crate) const fn shape(kind: RssHashType) -> (usize, bool) {
    match kind {
        RssHashType::Ipv4 => (8, false),
        RssHashType::TcpIpv4 | RssHashType::UdpIpv4 => (8, true),
        RssHashType::Ipv6 => (32, false),
        RssHashType::TcpIpv6 | RssHashType::UdpIpv6 => (32, true),
    }
}

/// Input length per hash type.
pub(crate) const fn input_len(kind: RssHashType) -> usize {
    match shape(kind) {
        (a, true) => a + 4,
        (a, false) => a,
    }
}

/// The set of enabled hash types (Microsoft's `NDIS_HASH_*` flags).
///
/// ```
/// use linerate_rss::HashTypes;
/// use linerate_offload::RssHashType;
/// let t = HashTypes::IPV4 | HashTypes::TCP_IPV4;
/// assert!(t.contains(RssHashType::TcpIpv4));
/// assert!(!t.contains(RssHashType::UdpIpv4));
/// assert_eq!(HashTypes::default(), HashTypes::ALL);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashTypes(u8);

impl HashTypes {
    /// No hashing at all: every frame goes to the default queue.
    pub const NONE: HashTypes = HashTypes(0);
    /// IPv4 addresses.
    pub const IPV4: HashTypes = HashTypes::of(RssHashType::Ipv4);
    /// TCP over IPv4.
    pub const TCP_IPV4: HashTypes = HashTypes::of(RssHashType::TcpIpv4);
    /// UDP over IPv4.
    pub const UDP_IPV4: HashTypes = HashTypes::of(RssHashType::UdpIpv4);
    /// IPv6 addresses.
    pub const IPV6: HashTypes = HashTypes::of(RssHashType::Ipv6);
    /// TCP over IPv6.
    pub const TCP_IPV6: HashTypes = HashTypes::of(RssHashType::TcpIpv6);
    /// UDP over IPv6.
    pub const UDP_IPV6: HashTypes = HashTypes::of(RssHashType::UdpIpv6);
    /// All six types (the default).
    pub const ALL: HashTypes = HashTypes(0b11_1111);

    /// The set holding only `kind`.
    pub const fn of(kind: RssHashType) -> HashTypes {
        HashTypes(1 << bit(kind))
    }

    /// True if `kind` is enabled.
    #[inline]
    pub const fn contains(self, kind: RssHashType) -> bool {
        self.0 & (1 << bit(kind)) != 0
    }

    /// This set with `kind` enabled.
    pub const fn with(self, kind: RssHashType) -> HashTypes {
        HashTypes(self.0 | (1 << bit(kind)))
    }

    /// This set with `kind` disabled.
    pub const fn without(self, kind: RssHashType) -> HashTypes {
        HashTypes(self.0 & !(1 << bit(kind)))
    }

    /// The bits: IPv4 1, TCP/IPv4 2, UDP/IPv4 4, IPv6 8, TCP/IPv6 16, UDP/IPv6 32.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The type a packet is hashed as, given its family, its transport (when the
    /// transport header is present and the packet is not a fragment) and this mask.
    #[inline]
    pub const fn select(self, v6: bool, l4: Transport) -> Option<RssHashType> {
        let (ip, tcp, udp) = if v6 {
            (
                RssHashType::Ipv6,
                RssHashType::TcpIpv6,
                RssHashType::UdpIpv6,
            )
        } else {
            (
                RssHashType::Ipv4,
                RssHashType::TcpIpv4,
                RssHashType::UdpIpv4,
            )
        };
        match l4 {
            Transport::Tcp if self.contains(tcp) => Some(tcp),
            Transport::Udp if self.contains(udp) => Some(udp),
            _ if self.contains(ip) => Some(ip),
            _ => None,
        }
    }
}

const fn bit(kind: RssHashType) -> u8 {
    match kind {
        RssHashType::Ipv4 => 0,
        RssHashType::TcpIpv4 => 1,
        RssHashType::UdpIpv4 => 2,
        RssHashType::Ipv6 => 3,
        RssHashType::TcpIpv6 => 4,
        RssHashType::UdpIpv6 => 5,
    }
}

impl Default for HashTypes {
    fn default() -> Self {
        HashTypes::ALL
    }
}

impl core::ops::BitOr for HashTypes {
    type Output = HashTypes;
    fn bitor(self, rhs: HashTypes) -> HashTypes {
        HashTypes(self.0 | rhs.0)
    }
}

/// The transport of a packet, as far as the hash type is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TCP, not fragmented.
    Tcp,
    /// UDP, not fragmented.
    Udp,
    /// Anything else, or a fragment (first or later).
    Other,
}

/// Which headers of a tunnelled frame are hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum HashLevel {
    /// The outer (underlay) headers: all flows of one tunnel endpoint pair on one
    /// queue unless the tunnel source port carries entropy.
    Outer,
    /// The inner (overlay) headers: the tunnel's flows spread over queues.
    #[default]
    Inner,
}

/// The hash level per tunnel kind; inner for all three by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TunnelHashing {
    /// VXLAN (RFC 7348).
    pub vxlan: HashLevel,
    /// GENEVE (RFC 8926).
    pub geneve: HashLevel,
    /// NVGRE (RFC 7637).
    pub nvgre: HashLevel,
}

impl TunnelHashing {
    /// Inner headers for every tunnel kind (the default).
    pub const INNER: TunnelHashing = TunnelHashing {
        vxlan: HashLevel::Inner,
        geneve: HashLevel::Inner,
        nvgre: HashLevel::Inner,
    };
    /// Outer headers for every tunnel kind.
    pub const OUTER: TunnelHashing = TunnelHashing {
        vxlan: HashLevel::Outer,
        geneve: HashLevel::Outer,
        nvgre: HashLevel::Outer,
    };

    /// The level for `kind`.
    pub const fn level(&self, kind: TunnelKind) -> HashLevel {
        match kind {
            TunnelKind::Vxlan => self.vxlan,
            TunnelKind::Geneve => self.geneve,
            TunnelKind::Nvgre => self.nvgre,
        }
    }
}

impl Default for TunnelHashing {
    fn default() -> Self {
        TunnelHashing::INNER
    }
}

/// What is hashed: enabled types, tunnel levels, and the tunnel ports frames are
/// parsed with when they come without a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashConfig {
    /// Enabled hash types (all by default).
    pub types: HashTypes,
    /// Outer or inner headers per tunnel kind (inner by default).
    pub tunnels: TunnelHashing,
    /// Tunnel ports for parsing ([`layout::Config::DEFAULT`] by default).
    pub layout: layout::Config,
}

impl Default for HashConfig {
    fn default() -> Self {
        HashConfig {
            types: HashTypes::ALL,
            tunnels: TunnelHashing::INNER,
            layout: layout::Config::DEFAULT,
        }
    }
}

impl HashConfig {
    /// The hash input of `frame`, whose layout is `layout`; `None` if the frame is
    /// not IP or its hash type is disabled.
    #[inline]
    pub fn input(&self, frame: &[u8], layout: &Layout) -> Option<HashInput> {
        if let (Some(t), Some(inner)) = (&layout.tunnel, &layout.inner)
            && self.tunnels.level(t.kind) == HashLevel::Inner
            && let Some(i) = self.headers_input(frame, inner)
        {
            return Some(i);
        }
        self.headers_input(frame, &layout.outer)
    }

    /// The hash input of one header stack (outer or inner) of `frame`.
    #[inline]
    pub fn headers_input(&self, frame: &[u8], h: &Headers) -> Option<HashInput> {
        let v6 = match h.l3 {
            L3Kind::Ipv4 => false,
            L3Kind::Ipv6 => true,
            _ => return None,
        };
        let l4 = match (h.frag, h.l4) {
            (Fragment::None, L4Kind::Tcp) => Transport::Tcp,
            (Fragment::None, L4Kind::Udp) => Transport::Udp,
            _ => Transport::Other,
        };
        let kind = self.types.select(v6, l4)?;
        let l3 = usize::from(h.l3_offset);
        // Addresses: IPv4 bytes 12..20, IPv6 bytes 8..40 of the IP header.
        let addrs = if v6 {
            frame.get(l3 + 8..l3 + 40)?
        } else {
            frame.get(l3 + 12..l3 + 20)?
        };
        let ports = if shape(kind).1 {
            let l4 = usize::from(h.l4_offset);
            let p = frame.get(l4..l4 + 4)?;
            Some(<[u8; 4]>::try_from(p).ok()?)
        } else {
            None
        };
        Some(HashInput::build(kind, addrs, ports))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_select() {
        let t = HashTypes::IPV4 | HashTypes::UDP_IPV4;
        assert_eq!(t.select(false, Transport::Udp), Some(RssHashType::UdpIpv4));
        assert_eq!(t.select(false, Transport::Tcp), Some(RssHashType::Ipv4));
        assert_eq!(t.select(true, Transport::Tcp), None);
        assert_eq!(
            HashTypes::TCP_IPV6.select(true, Transport::Other),
            None,
            "no address-only fallback when IPv6 is disabled"
        );
        assert_eq!(HashTypes::ALL.without(RssHashType::Ipv4).bits(), 0b11_1110);
        assert_eq!(HashTypes::NONE.with(RssHashType::UdpIpv6).bits(), 32);
    }

    #[test]
    fn swapped_ipv6() {
        let i = HashInput::tcp_ipv6([1; 16], [2; 16], 0x0102, 0x0304);
        let s = i.swapped();
        assert_eq!(&s.as_bytes()[..16], &[2; 16]);
        assert_eq!(&s.as_bytes()[16..32], &[1; 16]);
        assert_eq!(&s.as_bytes()[32..], &[3, 4, 1, 2]);
        assert_eq!(s.swapped(), i);
        let a = HashInput::ipv4([1, 2, 3, 4], [5, 6, 7, 8]);
        assert_eq!(a.swapped().as_bytes(), &[5, 6, 7, 8, 1, 2, 3, 4]);
    }
}
