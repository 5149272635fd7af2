//! Whole-frame builder: stack headers, get bytes with every length, protocol number
//! and checksum filled in.
//!
//! The standard headers are etherparse's owned values ([`etherparse::Ipv4Header`],
//! [`etherparse::TcpHeader`], ...), so any field can be set; the builder overwrites
//! only what the stacking decides: EtherTypes, IP protocol / next header, IP and UDP
//! lengths, and checksums (IPv4 header, TCP, UDP, ICMPv4, ICMPv6, and the outer UDP
//! checksum of a tunnel when asked for). Tunnels wrap the frame built so far:
//! [`FrameBuilder::vxlan`], [`FrameBuilder::geneve`] and [`FrameBuilder::nvgre`].
//!
//! This is the tool tests, examples and benchmarks use to make frames; it is not on
//! the data path (it allocates).
//!
//! ```
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! let frame = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::tcp(1000, 2000)).build(&[7; 100]);
//! assert_eq!(frame.len(), 14 + 40 + 20 + 100);
//! ```

use crate::checksum;
use crate::error::{Error, Layer, Result};
use crate::{geneve, gre, vxlan};
use etherparse::{
    ArpPacket, EtherType, Ethernet2Header, Icmpv4Header, Icmpv4Type, Icmpv6Header, Icmpv6Type,
    IpNumber, Ipv4Header, Ipv6Extensions, Ipv6Header, SingleVlanHeader, TcpHeader, UdpHeader,
    VlanId,
};

/// Source MAC the builder uses unless told otherwise (locally administered).
pub const DEFAULT_SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// Destination MAC the builder uses unless told otherwise.
pub const DEFAULT_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
/// Outer (underlay) source MAC of tunnels built here.
pub const DEFAULT_OUTER_SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 1, 0x01];
/// Outer (underlay) destination MAC of tunnels built here.
pub const DEFAULT_OUTER_DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 1, 0x02];
/// Tunnel UDP source port unless told otherwise (in the 49152..=65535 range RFC 7348
/// recommends; fixed, so all flows of one tunnel share it unless set per frame).
pub const DEFAULT_TUNNEL_SRC_PORT: u16 = 49153;

/// An IP header to build: IPv4, or IPv6 with optional extension headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ip {
    /// IPv4 (options, TTL, ID, flags, DSCP/ECN as set in the header).
    V4(Ipv4Header),
    /// IPv6 and its extension headers (possibly empty; boxed, etherparse's chain
    /// type is large).
    V6(Ipv6Header, Box<Ipv6Extensions>),
}

impl Ip {
    /// IPv4 with TTL 64, ID 0, DF set.
    pub fn v4(src: [u8; 4], dst: [u8; 4]) -> Ip {
        let mut h = Ipv4Header {
            source: src,
            destination: dst,
            time_to_live: 64,
            ..Default::default()
        };
        h.dont_fragment = true;
        Ip::V4(h)
    }

    /// IPv6 with hop limit 64, no extension headers.
    pub fn v6(src: [u8; 16], dst: [u8; 16]) -> Ip {
        Ip::V6(
            Ipv6Header {
                source: src,
                destination: dst,
                hop_limit: 64,
                ..Default::default()
            },
            Box::default(),
        )
    }
}

/// A transport header to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L4 {
    /// TCP (options included in the header value).
    Tcp(TcpHeader),
    /// UDP (ports used; length and checksum computed).
    Udp(UdpHeader),
    /// ICMPv4 (type and its fields; checksum computed).
    Icmpv4(Icmpv4Type),
    /// ICMPv6 (type and its fields; checksum computed with the pseudo-header).
    Icmpv6(Icmpv6Type),
    /// Another IP protocol: its number; the payload follows the IP header as is.
    Raw(u8),
}

impl L4 {
    /// TCP with ACK set, sequence 1, acknowledgement 1, window 65535.
    pub fn tcp(src_port: u16, dst_port: u16) -> L4 {
        let mut h = TcpHeader::new(src_port, dst_port, 1, 65535);
        h.ack = true;
        h.acknowledgment_number = 1;
        L4::Tcp(h)
    }

    /// UDP between the two ports.
    pub fn udp(src_port: u16, dst_port: u16) -> L4 {
        L4::Udp(UdpHeader {
            source_port: src_port,
            destination_port: dst_port,
            length: 0,
            checksum: 0,
        })
    }

    fn protocol(&self) -> u8 {
        match self {
            L4::Tcp(_) => IpNumber::TCP.0,
            L4::Udp(_) => IpNumber::UDP.0,
            L4::Icmpv4(_) => IpNumber::ICMP.0,
            L4::Icmpv6(_) => IpNumber::IPV6_ICMP.0,
            L4::Raw(p) => *p,
        }
    }
}

/// What the Ethernet frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Net {
    Ip(Ip, L4),
    Arp(Box<ArpPacket>),
}

/// The tunnel header that wraps an inner frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TunnelSpec {
    /// VXLAN with this VNI.
    Vxlan {
        /// VXLAN network identifier (24 bits).
        vni: u32,
    },
    /// GENEVE with this VNI and these encoded option TLVs.
    Geneve {
        /// Virtual network identifier (24 bits).
        vni: u32,
        /// Encoded options (see [`geneve::emit_options`]).
        options: Vec<u8>,
    },
    /// NVGRE with this VSID and flow ID.
    Nvgre {
        /// Virtual subnet identifier (24 bits).
        vsid: u32,
        /// Per-flow entropy (8 bits).
        flow_id: u8,
    },
}

/// One Ethernet + VLAN + network layer of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Level {
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    vlans: Vec<u16>,
}

/// The outer headers of a tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outer {
    level: Level,
    ip: Ip,
    spec: TunnelSpec,
    src_port: u16,
    dst_port: u16,
    udp_checksum: bool,
}

/// Builds a frame from headers; see the [module documentation](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameBuilder {
    level: Level,
    net: Net,
    outer: Option<Outer>,
    /// A header that could not be encoded when it was added (reported by
    /// [`FrameBuilder::try_build`]).
    deferred: Option<Error>,
}

impl FrameBuilder {
    /// An IP frame between the default MACs.
    pub fn new(ip: Ip, l4: L4) -> Self {
        FrameBuilder {
            level: Level {
                src_mac: DEFAULT_SRC_MAC,
                dst_mac: DEFAULT_DST_MAC,
                vlans: Vec::new(),
            },
            net: Net::Ip(ip, l4),
            outer: None,
            deferred: None,
        }
    }

    /// An ARP frame between the given MACs.
    pub fn arp(arp: ArpPacket, src_mac: [u8; 6], dst_mac: [u8; 6]) -> Self {
        FrameBuilder {
            level: Level {
                src_mac,
                dst_mac,
                vlans: Vec::new(),
            },
            net: Net::Arp(Box::new(arp)),
            outer: None,
            deferred: None,
        }
    }

    fn current_level(&mut self) -> &mut Level {
        match &mut self.outer {
            Some(o) => &mut o.level,
            None => &mut self.level,
        }
    }

    /// Sets the MACs of the outermost Ethernet header built so far.
    pub fn macs(mut self, src: [u8; 6], dst: [u8; 6]) -> Self {
        let l = self.current_level();
        l.src_mac = src;
        l.dst_mac = dst;
        self
    }

    /// Adds a VLAN tag (VID, 12 bits) inside any tags already on the outermost
    /// Ethernet header; with two tags the first is 802.1ad (0x88a8).
    pub fn vlan(mut self, vid: u16) -> Self {
        self.current_level().vlans.push(vid);
        self
    }

    fn wrap(mut self, ip: Ip, spec: TunnelSpec, dst_port: u16) -> Self {
        if self.outer.is_some() {
            // One level of encapsulation: re-wrapping replaces the tunnel.
            self.outer = None;
        }
        self.outer = Some(Outer {
            level: Level {
                src_mac: DEFAULT_OUTER_SRC_MAC,
                dst_mac: DEFAULT_OUTER_DST_MAC,
                vlans: Vec::new(),
            },
            ip,
            spec,
            src_port: DEFAULT_TUNNEL_SRC_PORT,
            dst_port,
            udp_checksum: false,
        });
        self
    }

    /// Wraps the frame in VXLAN (UDP port 4789) over `outer_ip`.
    pub fn vxlan(self, vni: u32, outer_ip: Ip) -> Self {
        self.wrap(outer_ip, TunnelSpec::Vxlan { vni }, vxlan::PORT)
    }

    /// Wraps the frame in GENEVE (UDP port 6081) with `options` over `outer_ip`.
    pub fn geneve(self, vni: u32, options: &[geneve::GeneveOption<'_>], outer_ip: Ip) -> Self {
        let mut buf = [0u8; geneve::MAX_OPTIONS_LEN];
        let (options, err) = match geneve::emit_options(options, &mut buf) {
            Ok(n) => (buf.get(..n).unwrap_or_default().to_vec(), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let mut b = self.wrap(outer_ip, TunnelSpec::Geneve { vni, options }, geneve::PORT);
        b.deferred = b.deferred.or(err);
        b
    }

    /// Wraps the frame in NVGRE (GRE key = VSID << 8 | flow ID) over `outer_ip`.
    pub fn nvgre(self, vsid: u32, flow_id: u8, outer_ip: Ip) -> Self {
        self.wrap(outer_ip, TunnelSpec::Nvgre { vsid, flow_id }, 0)
    }

    /// Sets the tunnel's UDP source and destination ports (VXLAN, GENEVE).
    pub fn tunnel_ports(mut self, src: u16, dst: u16) -> Self {
        if let Some(o) = &mut self.outer {
            o.src_port = src;
            o.dst_port = dst;
        }
        self
    }

    /// Fills the outer UDP checksum (VXLAN, GENEVE) instead of leaving it zero.
    pub fn outer_udp_checksum(mut self, on: bool) -> Self {
        if let Some(o) = &mut self.outer {
            o.udp_checksum = on;
        }
        self
    }

    /// Builds the frame around `payload`.
    ///
    /// # Panics
    /// Panics if the headers cannot be built (a packet over 64 KiB, a VNI over 24
    /// bits, more than 252 bytes of GENEVE options); [`FrameBuilder::try_build`]
    /// returns those as errors.
    #[allow(clippy::expect_used)]
    pub fn build(&self, payload: &[u8]) -> Vec<u8> {
        self.try_build(payload)
            .expect("frame headers must be buildable")
    }

    /// Builds the frame around `payload`, or says which header could not be built.
    pub fn try_build(&self, payload: &[u8]) -> Result<Vec<u8>> {
        if let Some(e) = self.deferred {
            return Err(e);
        }
        let mut inner = Vec::with_capacity(payload.len() + 128);
        write_level(&mut inner, &self.level, &self.net, payload)?;
        let Some(o) = &self.outer else {
            return Ok(inner);
        };
        let mut tunnel = Vec::with_capacity(inner.len() + 64);
        let l4 = match &o.spec {
            TunnelSpec::Vxlan { vni } => {
                tunnel.resize(vxlan::HEADER_LEN, 0);
                vxlan::Repr { vni: *vni }.emit(&mut tunnel)?;
                L4::Udp(UdpHeader {
                    source_port: o.src_port,
                    destination_port: o.dst_port,
                    length: 0,
                    checksum: 0,
                })
            }
            TunnelSpec::Geneve { vni, options } => {
                let repr = geneve::Repr::new(*vni, options);
                tunnel.resize(repr.buffer_len(), 0);
                repr.emit(&mut tunnel)?;
                L4::Udp(UdpHeader {
                    source_port: o.src_port,
                    destination_port: o.dst_port,
                    length: 0,
                    checksum: 0,
                })
            }
            TunnelSpec::Nvgre { vsid, flow_id } => {
                let repr = gre::Repr::nvgre(*vsid, *flow_id);
                tunnel.resize(repr.buffer_len(), 0);
                repr.emit(&mut tunnel)?;
                L4::Raw(IpNumber::GRE.0)
            }
        };
        tunnel.extend_from_slice(&inner);
        let mut frame = Vec::with_capacity(tunnel.len() + 80);
        let net = Net::Ip(o.ip.clone(), l4);
        write_level(&mut frame, &o.level, &net, &tunnel)?;
        if !o.udp_checksum && matches!(o.spec, TunnelSpec::Vxlan { .. } | TunnelSpec::Geneve { .. })
        {
            clear_outer_udp_checksum(&mut frame, &o.level, &o.ip);
        }
        Ok(frame)
    }
}

fn too_big(layer: Layer, len: usize) -> Error {
    Error::invalid(layer, "length", u32::try_from(len).unwrap_or(u32::MAX))
}

fn write_ethernet(out: &mut Vec<u8>, level: &Level, ethertype: EtherType) {
    let tags = level.vlans.len();
    let first = if tags > 1 {
        EtherType::PROVIDER_BRIDGING
    } else {
        EtherType::VLAN_TAGGED_FRAME
    };
    let eth = Ethernet2Header {
        source: level.src_mac,
        destination: level.dst_mac,
        ether_type: if tags == 0 { ethertype } else { first },
    };
    out.extend_from_slice(&eth.to_bytes());
    for (i, &vid) in level.vlans.iter().enumerate() {
        let next = if i + 1 == tags {
            ethertype
        } else {
            EtherType::VLAN_TAGGED_FRAME
        };
        let tag = SingleVlanHeader {
            pcp: etherparse::VlanPcp::ZERO,
            drop_eligible_indicator: false,
            vlan_id: VlanId::try_new(vid & 0x0fff).unwrap_or(VlanId::ZERO),
            ether_type: next,
        };
        out.extend_from_slice(&tag.to_bytes());
    }
}

/// Writes Ethernet, tags, the network header and `net`'s transport header around
/// `payload`, with lengths and checksums.
fn write_level(out: &mut Vec<u8>, level: &Level, net: &Net, payload: &[u8]) -> Result<()> {
    match net {
        Net::Arp(arp) => {
            write_ethernet(out, level, EtherType::ARP);
            out.extend_from_slice(&arp.to_bytes());
            out.extend_from_slice(payload);
            Ok(())
        }
        Net::Ip(ip, l4) => {
            let ethertype = match ip {
                Ip::V4(_) => EtherType::IPV4,
                Ip::V6(..) => EtherType::IPV6,
            };
            write_ethernet(out, level, ethertype);
            let l4_bytes = transport_bytes(l4, payload)?;
            let l4_len = l4_bytes.len() + payload.len();
            let protocol = l4.protocol();
            let (pseudo, ip_bytes) = network_bytes(ip, protocol, l4_len)?;
            out.extend_from_slice(&ip_bytes);
            let l4_start = out.len();
            out.extend_from_slice(&l4_bytes);
            out.extend_from_slice(payload);
            fill_transport_checksum(out.get_mut(l4_start..).unwrap_or_default(), l4, pseudo);
            Ok(())
        }
    }
}

/// The network header bytes and the pseudo-header sum for the transport checksum.
fn network_bytes(ip: &Ip, protocol: u8, l4_len: usize) -> Result<(u32, Vec<u8>)> {
    match ip {
        Ip::V4(h) => {
            let mut h = h.clone();
            h.protocol = IpNumber(protocol);
            h.set_payload_len(l4_len)
                .map_err(|_| too_big(Layer::Ipv4, l4_len))?;
            h.header_checksum = 0;
            let mut bytes = h.to_bytes().to_vec();
            let c = checksum::checksum(&bytes);
            if let Some(f) = bytes.get_mut(10..12) {
                f.copy_from_slice(&c.to_be_bytes());
            }
            let len = u16::try_from(l4_len).map_err(|_| too_big(Layer::Ipv4, l4_len))?;
            Ok((
                checksum::pseudo_ipv4(h.source, h.destination, protocol, len),
                bytes,
            ))
        }
        Ip::V6(h, exts) => {
            let mut h = h.clone();
            let mut exts = Ipv6Extensions::clone(exts);
            h.next_header = exts.set_next_headers(IpNumber(protocol));
            let total = exts.header_len() + l4_len;
            h.set_payload_length(total)
                .map_err(|_| too_big(Layer::Ipv6, total))?;
            let mut bytes = h.to_bytes().to_vec();
            exts.write(&mut bytes, h.next_header)
                .map_err(|_| Error::invalid(Layer::Ipv6Ext, "chain", 0))?;
            let len = u32::try_from(l4_len).map_err(|_| too_big(Layer::Ipv6, l4_len))?;
            Ok((
                checksum::pseudo_ipv6(&h.source, &h.destination, protocol, len),
                bytes,
            ))
        }
    }
}

/// The transport header bytes with a zero checksum (filled later, when the payload
/// is in place).
fn transport_bytes(l4: &L4, payload: &[u8]) -> Result<Vec<u8>> {
    Ok(match l4 {
        L4::Tcp(h) => {
            let mut h = h.clone();
            h.checksum = 0;
            h.to_bytes().to_vec()
        }
        L4::Udp(h) => {
            let len = 8 + payload.len();
            let mut h = h.clone();
            h.length = u16::try_from(len).map_err(|_| too_big(Layer::Udp, len))?;
            h.checksum = 0;
            h.to_bytes().to_vec()
        }
        L4::Icmpv4(t) => Icmpv4Header {
            icmp_type: t.clone(),
            checksum: 0,
        }
        .to_bytes()
        .to_vec(),
        L4::Icmpv6(t) => Icmpv6Header {
            icmp_type: *t,
            checksum: 0,
        }
        .to_bytes()
        .to_vec(),
        L4::Raw(_) => Vec::new(),
    })
}

fn fill_transport_checksum(seg: &mut [u8], l4: &L4, pseudo: u32) {
    let (at, initial, zero_is_ffff) = match l4 {
        L4::Tcp(_) => (16, pseudo, false),
        L4::Udp(_) => (6, pseudo, true),
        L4::Icmpv4(_) => (2, 0, false),
        L4::Icmpv6(_) => (2, pseudo, false),
        L4::Raw(_) => return,
    };
    let mut c = checksum::finish(checksum::partial(seg, initial));
    if zero_is_ffff && c == 0 {
        c = 0xffff;
    }
    if let Some(f) = seg.get_mut(at..at + 2) {
        f.copy_from_slice(&c.to_be_bytes());
    }
}

/// Zeroes the tunnel's outer UDP checksum (RFC 7348: should be zero over IPv4; Linux
/// sends zero over IPv6 too unless told otherwise, RFC 6935/6936).
fn clear_outer_udp_checksum(frame: &mut [u8], level: &Level, ip: &Ip) {
    let l3 = 14 + 4 * level.vlans.len();
    let l4 = l3
        + match ip {
            Ip::V4(h) => h.header_len(),
            Ip::V6(_, exts) => 40 + exts.header_len(),
        };
    if let Some(f) = frame.get_mut(l4 + 6..l4 + 8) {
        f.copy_from_slice(&[0, 0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_agree_with_etherparse() {
        let frame = FrameBuilder::new(Ip::v4([10, 1, 2, 3], [10, 4, 5, 6]), L4::tcp(1, 2))
            .build(b"0123456789abc");
        let p = etherparse::SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(etherparse::NetSlice::Ipv4(ip)) = p.net else {
            panic!("not ipv4")
        };
        let h = ip.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        let Some(etherparse::TransportSlice::Tcp(tcp)) = p.transport else {
            panic!("not tcp")
        };
        let want = tcp
            .to_header()
            .calc_checksum_ipv4(&h, tcp.payload())
            .unwrap();
        assert_eq!(tcp.checksum(), want);
    }

    #[test]
    fn bad_geneve_options_are_an_error() {
        let data = [0u8; 124];
        let opt = geneve::GeneveOption {
            class: 1,
            kind: 2,
            data: &data,
        };
        let b = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::udp(1, 2)).geneve(
            7,
            &[opt, opt, opt],
            Ip::v4([3; 4], [4; 4]),
        );
        assert_eq!(b.try_build(b"x").unwrap_err().layer(), Layer::Geneve);
    }

    #[test]
    fn oversize_is_an_error() {
        let big = vec![0; 65536];
        let b = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::udp(1, 2));
        assert_eq!(b.try_build(&big).unwrap_err().layer(), Layer::Udp);
        let b = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2));
        assert_eq!(b.try_build(&big).unwrap_err().layer(), Layer::Ipv4);
        let b = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::tcp(1, 2));
        assert_eq!(b.try_build(&big).unwrap_err().layer(), Layer::Ipv6);
    }
}
