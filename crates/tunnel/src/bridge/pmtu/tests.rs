//! The answers checked with etherparse (an independent parser and checksum).

use super::*;
use etherparse::{
    Icmpv4Type, Icmpv6Type, IpNumber, NetSlice, PacketBuilder, SlicedPacket, TransportSlice,
    icmpv4::DestUnreachableHeader,
};

const HOST: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 2];

/// An IPv4 UDP frame of `len` bytes of IP packet, DF as given.
fn v4(len: usize, df: bool, dst: [u8; 4]) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(HOST, PEER)
        .ipv4([10, 0, 0, 1], dst, 64)
        .udp(4000, 5000);
    let payload: Vec<u8> = (0..len - 28).map(|i| i as u8).collect();
    let mut f = Vec::new();
    b.write(&mut f, &payload).unwrap();
    if !df {
        f[14 + 6] &= !0x40;
    } else {
        f[14 + 6] |= 0x40;
    }
    // The header checksum again, DF changed.
    f[14 + 10] = 0;
    f[14 + 11] = 0;
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

fn v6(len: usize, dst: [u8; 16]) -> Vec<u8> {
    let mut src = [0u8; 16];
    src[0] = 0xfd;
    src[15] = 1;
    let b = PacketBuilder::ethernet2(HOST, PEER)
        .ipv6(src, dst, 64)
        .udp(4000, 5000);
    let payload: Vec<u8> = (0..len - 48).map(|i| i as u8).collect();
    let mut f = Vec::new();
    b.write(&mut f, &payload).unwrap();
    f
}

fn v6_dst() -> [u8; 16] {
    let mut d = [0u8; 16];
    d[0] = 0xfd;
    d[15] = 2;
    d
}

#[test]
fn an_ipv4_packet_with_df_over_the_mtu_gets_fragmentation_needed_from_its_destination() {
    let f = v4(1500, true, [10, 0, 0, 2]);
    let mut out = Vec::new();
    let Fit::Answer(n) = check(&f, 1450, &mut out) else {
        panic!("no answer");
    };
    assert_eq!(n, out.len());
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(etherparse::LinkHeader::Ethernet2(eth)) = p.link.unwrap().to_header() else {
        panic!("not Ethernet");
    };
    assert_eq!((eth.source, eth.destination), (PEER, HOST));
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        panic!("not IPv4");
    };
    let h = ip.header().to_header();
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    assert_eq!((h.source, h.destination), ([10, 0, 0, 2], [10, 0, 0, 1]));
    assert_eq!(h.protocol, IpNumber::ICMP);
    assert!(usize::from(h.total_len) <= 576);
    let Some(TransportSlice::Icmpv4(icmp)) = p.transport else {
        panic!("not ICMP");
    };
    assert_eq!(
        icmp.icmp_type(),
        Icmpv4Type::DestinationUnreachable(DestUnreachableHeader::FragmentationNeeded {
            next_hop_mtu: 1450
        })
    );
    let want = icmp.header().icmp_type.clone();
    let again = etherparse::Icmpv4Header::with_checksum(want, icmp.payload());
    assert_eq!(icmp.checksum(), again.checksum, "ICMP checksum");
    // The quote: the original packet from its IP header, 548 bytes of it.
    assert_eq!(icmp.payload(), &f[14..14 + 548]);
}

#[test]
fn an_ipv6_packet_over_the_mtu_gets_packet_too_big() {
    let f = v6(1500, v6_dst());
    let mut out = Vec::new();
    let Fit::Answer(_) = check(&f, 1430, &mut out) else {
        panic!("no answer");
    };
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    let Some(NetSlice::Ipv6(ip)) = p.net else {
        panic!("not IPv6");
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, v6_dst());
    assert_eq!(h.destination[15], 1);
    assert!(40 + usize::from(h.payload_length) <= 1280);
    let Some(TransportSlice::Icmpv6(icmp)) = p.transport else {
        panic!("not ICMPv6");
    };
    assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1430 });
    let again = etherparse::Icmpv6Header::with_checksum(
        icmp.header().icmp_type,
        h.source,
        h.destination,
        icmp.payload(),
    )
    .unwrap();
    assert_eq!(icmp.checksum(), again.checksum, "ICMPv6 checksum");
    assert_eq!(icmp.payload(), &f[14..14 + 1232]);
}

#[test]
fn packets_that_fit_pass_and_those_not_to_answer_are_dropped() {
    let mut out = Vec::new();
    assert_eq!(
        check(&v4(1450, true, [10, 0, 0, 2]), 1450, &mut out),
        Fit::Fits
    );
    assert_eq!(check(&v6(1430, v6_dst()), 1430, &mut out), Fit::Fits);
    // Without DF a router would fragment; a VTEP may not.
    assert_eq!(
        check(&v4(1500, false, [10, 0, 0, 2]), 1450, &mut out),
        Fit::Drop
    );
    // To a multicast group or the broadcast address.
    assert_eq!(
        check(&v4(1500, true, [239, 1, 1, 1]), 1450, &mut out),
        Fit::Drop
    );
    assert_eq!(check(&v4(1500, true, [255; 4]), 1450, &mut out), Fit::Drop);
    let mut group = [0u8; 16];
    group[0] = 0xff;
    group[15] = 1;
    assert_eq!(check(&v6(1500, group), 1430, &mut out), Fit::Drop);
    // A non-first fragment.
    let mut frag = v4(1500, true, [10, 0, 0, 2]);
    frag[14 + 7] = 8;
    assert_eq!(check(&frag, 1450, &mut out), Fit::Drop);
    // An ICMP error itself (port unreachable).
    let mut err = v4(1500, true, [10, 0, 0, 2]);
    err[14 + 9] = 1;
    err[34] = 3;
    assert_eq!(check(&err, 1450, &mut out), Fit::Drop);
    // Not IP, or too short to read: left to the rest of the path.
    assert_eq!(check(&[0u8; 10], 1450, &mut out), Fit::Fits);
    let mut arp = v4(1500, true, [10, 0, 0, 2]);
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    assert_eq!(check(&arp, 1450, &mut out), Fit::Fits);
}

#[test]
fn a_tagged_frame_is_answered_with_its_tag() {
    let f = v4(1500, true, [10, 0, 0, 2]);
    let mut tagged = f[..12].to_vec();
    tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x2a]);
    tagged.extend_from_slice(&f[12..]);
    let mut out = Vec::new();
    let Fit::Answer(_) = check(&tagged, 1450, &mut out) else {
        panic!("no answer");
    };
    assert_eq!(&out[12..16], &[0x81, 0x00, 0x00, 0x2a]);
    let p = SlicedPacket::from_ethernet(&out).unwrap();
    assert!(matches!(p.transport, Some(TransportSlice::Icmpv4(_))));
}

#[test]
fn any_bytes_never_panic() {
    let mut out = Vec::new();
    let base = v6(1500, v6_dst());
    for cut in 0..base.len().min(200) {
        let _ = check(&base[..cut], 1280, &mut out);
    }
    let base = v4(1500, true, [10, 0, 0, 2]);
    for cut in 0..60 {
        let mut f = base.clone();
        f[14] = (cut as u8) ^ 0x4f;
        let _ = check(&f[..cut.max(14)], 576, &mut out);
        let _ = check(&f, 576, &mut out);
    }
}

#[test]
fn answers_are_limited_to_a_burst_then_a_thousand_a_second() {
    let mut r = RateLimit::new();
    let t = std::time::Duration::from_secs(5);
    let burst = (0..100).filter(|_| r.allow(t)).count();
    assert_eq!(burst, 50);
    assert!(!r.allow(t));
    // 10 ms later: ten more.
    let later = t + std::time::Duration::from_millis(10);
    assert_eq!((0..100).filter(|_| r.allow(later)).count(), 10);
}
