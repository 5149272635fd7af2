//! UDP and ICMP helpers for one engine against a hand-driven peer: frames with
//! their metadata, datagrams and ICMP errors from the peer, and etherparse as the
//! independent parser of what the engine emits.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::raw::{ME_MAC, PEER_MAC, Raw};
use linerate_offload::OffloadMeta;
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use linerate_wire::icmp::ndp;
use linerate_wire::icmp::v6::Addrs;
use linerate_wire::{ethernet, ipv6};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

pub const ME4: [u8; 4] = [10, 0, 0, 1];
pub const PEER4: [u8; 4] = [10, 0, 0, 2];
pub const ME6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
pub const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

/// The peer's address of the family `v6` at `port`.
pub fn peer(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new(IpAddr::V6(PEER6), port)
    } else {
        SocketAddr::new(IpAddr::from(PEER4), port)
    }
}

/// Host 1 of the simulation knowing the peer's MAC for both families (an ARP
/// request and a neighbour solicitation from the peer).
pub fn dual_host(tune: impl FnOnce(&mut linerate_toe::Config)) -> Raw {
    let mut r = Raw::host(tune);
    let len = ndp::NEIGHBOR_LEN + ndp::LL_ADDR_OPTION_LEN;
    let mut f = vec![0u8; 14 + 40 + len];
    f[..6].copy_from_slice(&ME_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    {
        let mut ip = ipv6::Packet::new_unchecked(&mut f[14..54]);
        ip.set_version(6);
        ip.set_payload_len(len as u16);
        ip.set_next_header(58);
        ip.set_hop_limit(255);
        ip.set_src_addr(PEER6.octets());
        ip.set_dst_addr(ME6.octets());
    }
    let (s, d) = (PEER6.octets(), ME6.octets());
    ndp::emit_neighbor_solicitation(
        &mut f[54..],
        Addrs { src: &s, dst: &d },
        &ME6.octets(),
        Some(PEER_MAC),
    )
    .unwrap();
    r.input(&f);
    r.frames(); // the advertisement
    r
}

/// Every frame the engine sends now, as it hands them over, with metadata.
pub fn transmit(r: &mut Raw) -> Vec<(Vec<u8>, OffloadMeta)> {
    let mut out = Vec::new();
    r.e.poll_transmit(r.now, &mut |f, m| out.push((f.to_vec(), *m)));
    out
}

/// `frames` as a NIC would put them on the wire: segmented, checksums complete
/// (linerate-offload's segmenter).
pub fn on_wire(frames: &[(Vec<u8>, OffloadMeta)]) -> Vec<Vec<u8>> {
    let mut seg = Segmenter::new(CsumMode::Complete);
    let mut buf = SegmentBuf::new();
    let mut out = Vec::new();
    for (f, m) in frames {
        seg.segment(f, m, &mut buf).unwrap();
        out.extend(buf.iter().map(<[u8]>::to_vec));
    }
    out
}

/// A UDP datagram from the peer (`from`) to us at `to_port`, checksum filled
/// (by etherparse, through linerate-wire's builder).
pub fn udp_from_peer(from: SocketAddr, to_port: u16, payload: &[u8]) -> Vec<u8> {
    let ip = match from.ip() {
        IpAddr::V4(a) => Ip::v4(a.octets(), ME4),
        IpAddr::V6(a) => Ip::v6(a.octets(), ME6.octets()),
    };
    FrameBuilder::new(ip, L4::udp(from.port(), to_port))
        .macs(PEER_MAC, ME_MAC)
        .build(payload)
}

/// A UDP datagram as etherparse sees it, its checksum checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpSeen {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub payload: Vec<u8>,
    /// The checksum field was zero (none).
    pub no_checksum: bool,
}

/// Parses a complete UDP frame with etherparse; panics on a bad checksum or a
/// length field that disagrees with the IP length.
pub fn parse_udp(frame: &[u8]) -> Option<UdpSeen> {
    let h = PacketHeaders::from_ethernet_slice(frame).ok()?;
    let Some(TransportHeader::Udp(u)) = h.transport else {
        return None;
    };
    let payload = h.payload.slice();
    assert_eq!(usize::from(u.length), 8 + payload.len(), "UDP length");
    let (src, dst, want) = match h.net? {
        NetHeaders::Ipv4(ip, _) => (
            IpAddr::from(ip.source),
            IpAddr::from(ip.destination),
            u.calc_checksum_ipv4(&ip, payload).unwrap(),
        ),
        NetHeaders::Ipv6(ip, _) => (
            IpAddr::from(ip.source),
            IpAddr::from(ip.destination),
            u.calc_checksum_ipv6(&ip, payload).unwrap(),
        ),
        _ => return None,
    };
    let no_checksum = u.checksum == 0;
    if !no_checksum {
        assert_eq!(u.checksum, want, "UDP checksum");
    }
    Some(UdpSeen {
        src: SocketAddr::new(src, u.source_port),
        dst: SocketAddr::new(dst, u.destination_port),
        payload: payload.to_vec(),
        no_checksum,
    })
}

/// An ICMP error as etherparse sees it, its checksum checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpSeen {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// (type, code).
    pub kind: (u8, u8),
    /// The quoted invoking datagram.
    pub quote: Vec<u8>,
}

/// Parses an ICMPv4 or ICMPv6 frame with etherparse.
pub fn parse_icmp(frame: &[u8]) -> Option<IcmpSeen> {
    let h = PacketHeaders::from_ethernet_slice(frame).ok()?;
    let payload = h.payload.slice();
    match (h.net?, h.transport?) {
        (NetHeaders::Ipv4(ip, _), TransportHeader::Icmpv4(i)) => {
            assert_eq!(
                i.checksum,
                i.icmp_type.calc_checksum(payload),
                "ICMPv4 checksum"
            );
            let l4 = 14 + ip.header_len();
            let kind = (frame[l4], frame[l4 + 1]);
            Some(IcmpSeen {
                src: IpAddr::from(ip.source),
                dst: IpAddr::from(ip.destination),
                kind,
                quote: payload.to_vec(),
            })
        }
        (NetHeaders::Ipv6(ip, _), TransportHeader::Icmpv6(i)) => {
            let want = i
                .icmp_type
                .calc_checksum(ip.source, ip.destination, payload)
                .unwrap();
            assert_eq!(i.checksum, want, "ICMPv6 checksum");
            let kind = (frame[54], frame[55]);
            Some(IcmpSeen {
                src: IpAddr::from(ip.source),
                dst: IpAddr::from(ip.destination),
                kind,
                quote: payload.to_vec(),
            })
        }
        _ => None,
    }
}

/// The payload of an Ethernet frame (the IP datagram).
pub fn ip_of(frame: &[u8]) -> &[u8] {
    &frame[ethernet::HEADER_LEN..]
}

/// An ICMPv4 message from `src` to us, its body written by `body` (which returns
/// its length, checksum filled, e.g. linerate-wire's `icmp::v4::emit_*`).
pub fn icmp4_from(src: [u8; 4], body: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 1500];
    let n = body(&mut f[34..]);
    f.truncate(34 + n);
    f[..6].copy_from_slice(&ME_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let mut ip = linerate_wire::ipv4::Packet::new_unchecked(&mut f[14..34]);
    ip.set_version(4);
    ip.set_ihl(5);
    ip.set_total_len((20 + n) as u16);
    ip.set_ttl(64);
    ip.set_protocol(1);
    ip.set_src_addr(src);
    ip.set_dst_addr(ME4);
    ip.fill_checksum();
    f
}

/// An ICMPv6 message from `src` to us, its body written by `body` with the
/// addresses for its checksum.
pub fn icmp6_from(src: Ipv6Addr, body: impl FnOnce(&mut [u8], Addrs<'_>) -> usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 40 + 1500];
    let (s, d) = (src.octets(), ME6.octets());
    let n = body(&mut f[54..], Addrs { src: &s, dst: &d });
    f.truncate(54 + n);
    f[..6].copy_from_slice(&ME_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    let mut ip = ipv6::Packet::new_unchecked(&mut f[14..54]);
    ip.set_version(6);
    ip.set_payload_len(n as u16);
    ip.set_next_header(58);
    ip.set_hop_limit(64);
    ip.set_src_addr(s);
    ip.set_dst_addr(d);
    f
}
