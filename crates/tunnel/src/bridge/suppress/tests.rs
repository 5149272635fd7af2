use super::*;
use etherparse::{Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use linerate_wire::build::FrameBuilder;

const T0: Duration = Duration::ZERO;
const REQ_MAC: Mac = [2, 0, 0, 0, 0, 1];
const TGT_MAC: Mac = [2, 0, 0, 0, 0, 9];

fn arp_request(spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    FrameBuilder::arp(arp::request(REQ_MAC, spa, tpa).into(), REQ_MAC, [0xff; 6]).build(&[])
}

/// A Neighbor Solicitation built by etherparse, not by linerate.
fn ns(src: [u8; 16], target: [u8; 16], slla: Option<Mac>) -> Vec<u8> {
    let dst = ndp::solicited_node_multicast(&target);
    let mut body = target.to_vec();
    if let Some(m) = slla {
        body.extend_from_slice(&[1, 1]);
        body.extend_from_slice(&m);
    }
    let b = PacketBuilder::ethernet2(REQ_MAC, ndp::multicast_mac(&dst))
        .ipv6(src, dst, 255)
        .icmpv6(Icmpv6Type::NeighborSolicitation);
    let mut out = Vec::new();
    b.write(&mut out, &body).unwrap();
    out
}

#[test]
fn arp_request_for_a_known_address_is_answered_as_a_host_would() {
    let mut s = Suppress::new(SuppressConfig::default());
    s.add_static(1, IpAddr::from([10, 1, 0, 9]), TGT_MAC)
        .unwrap();
    let mut out = [0u8; 128];
    let Answer::Answered(n) = s.answer(T0, 1, &arp_request([10, 1, 0, 1], [10, 1, 0, 9]), &mut out)
    else {
        panic!("not answered")
    };
    assert_eq!(n, 60, "padded to the Ethernet minimum");
    let p = SlicedPacket::from_ethernet(&out[..n]).unwrap();
    let eth = p.link.unwrap().to_header().unwrap();
    let eth = eth.ethernet2().unwrap();
    assert_eq!((eth.source, eth.destination), (TGT_MAC, REQ_MAC));
    let Some(NetSlice::Arp(a)) = p.net else {
        panic!("not ARP: {:?}", p.net)
    };
    assert_eq!(a.operation(), etherparse::ArpOperation::REPLY);
    assert_eq!(a.sender_hw_addr(), TGT_MAC);
    assert_eq!(a.sender_protocol_addr(), [10, 1, 0, 9]);
    assert_eq!(a.target_hw_addr(), REQ_MAC);
    assert_eq!(a.target_protocol_addr(), [10, 1, 0, 1]);
    assert_eq!(s.counters(1).answered, 1);
}

#[test]
fn unknown_targets_other_vnis_and_other_frames_are_not_answered() {
    let mut s = Suppress::new(SuppressConfig::default());
    s.add_static(1, IpAddr::from([10, 1, 0, 9]), TGT_MAC)
        .unwrap();
    let mut out = [0u8; 128];
    let req = arp_request([10, 1, 0, 1], [10, 1, 0, 9]);
    assert_eq!(
        s.answer(T0, 2, &req, &mut out),
        Answer::Unknown,
        "other VNI"
    );
    assert_eq!(
        s.answer(T0, 1, &arp_request([10, 1, 0, 1], [10, 1, 0, 8]), &mut out),
        Answer::Unknown
    );
    assert_eq!(s.counters(1).missed, 1);
    // Gratuitous ARP, a TCP frame, a truncated ARP: not requests.
    assert_eq!(
        s.answer(T0, 1, &arp_request([10, 1, 0, 9], [10, 1, 0, 9]), &mut out),
        Answer::NotARequest
    );
    let tcp = FrameBuilder::new(
        linerate_wire::build::Ip::v4([10, 1, 0, 1], [10, 1, 0, 9]),
        linerate_wire::build::L4::tcp(1, 2),
    )
    .build(&[0; 10]);
    assert_eq!(s.answer(T0, 1, &tcp, &mut out), Answer::NotARequest);
    assert_eq!(s.answer(T0, 1, &req[..30], &mut out), Answer::NotARequest);
    // An output buffer too small: no answer, no panic.
    assert_eq!(s.answer(T0, 1, &req, &mut out[..20]), Answer::NotARequest);
}

#[test]
fn neighbor_solicitation_for_a_known_address_gets_an_advertisement() {
    let mut s = Suppress::new(SuppressConfig::default());
    let target: [u8; 16] = "2001:db8::9".parse::<Ipv6Addr>().unwrap().octets();
    let src: [u8; 16] = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
    // Learned from an advertisement the target sent earlier.
    let na = {
        let mut body = target.to_vec();
        body.extend_from_slice(&[2, 1]);
        body.extend_from_slice(&TGT_MAC);
        let b = PacketBuilder::ethernet2(TGT_MAC, REQ_MAC)
            .ipv6(target, src, 255)
            .icmpv6(Icmpv6Type::NeighborAdvertisement(
                etherparse::icmpv6::NeighborAdvertisementHeader {
                    router: false,
                    solicited: true,
                    r#override: true,
                },
            ));
        let mut v = Vec::new();
        b.write(&mut v, &body).unwrap();
        v
    };
    s.snoop(T0, 3, &na);
    assert_eq!(s.lookup(T0, 3, IpAddr::from(target)), Some(TGT_MAC));

    let mut out = [0u8; 256];
    let Answer::Answered(n) = s.answer(T0, 3, &ns(src, target, Some(REQ_MAC)), &mut out) else {
        panic!("not answered")
    };
    let p = SlicedPacket::from_ethernet(&out[..n]).unwrap();
    let eth = p.link.as_ref().unwrap().to_header().unwrap();
    let eth = eth.ethernet2().unwrap();
    assert_eq!((eth.source, eth.destination), (TGT_MAC, REQ_MAC));
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!()
    };
    assert_eq!(ip.header().source(), target);
    assert_eq!(ip.header().destination(), src);
    assert_eq!(ip.header().hop_limit(), 255);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!()
    };
    let Icmpv6Type::NeighborAdvertisement(flags) = icmp.icmp_type() else {
        panic!("{:?}", icmp.icmp_type())
    };
    assert!(flags.solicited && flags.r#override && !flags.router);
    // etherparse verifies the checksum independently.
    let ip_hdr = ip.header().to_header();
    assert_eq!(
        icmp.header()
            .icmp_type
            .calc_checksum(ip_hdr.source, ip_hdr.destination, icmp.payload())
            .unwrap(),
        icmp.header().checksum
    );
    assert_eq!(&icmp.payload()[..16], &target);
    assert_eq!(&icmp.payload()[16..24], &[2, 1, 2, 0, 0, 0, 0, 9]);
}

#[test]
fn dad_solicitations_are_answered_to_all_nodes_unsolicited() {
    let mut s = Suppress::new(SuppressConfig::default());
    let target: [u8; 16] = "fd00::9".parse::<Ipv6Addr>().unwrap().octets();
    s.add_static(1, IpAddr::from(target), TGT_MAC).unwrap();
    let mut out = [0u8; 256];
    let Answer::Answered(n) = s.answer(T0, 1, &ns([0; 16], target, None), &mut out) else {
        panic!()
    };
    let p = SlicedPacket::from_ethernet(&out[..n]).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!()
    };
    assert_eq!(
        ip.header().destination(),
        "ff02::1".parse::<Ipv6Addr>().unwrap().octets()
    );
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!()
    };
    assert!(matches!(
        icmp.icmp_type(),
        Icmpv6Type::NeighborAdvertisement(f) if !f.solicited
    ));
}

#[test]
fn a_solicitation_with_a_bad_checksum_or_hop_limit_is_ignored() {
    let mut s = Suppress::new(SuppressConfig::default());
    let target: [u8; 16] = "fd00::9".parse::<Ipv6Addr>().unwrap().octets();
    let src: [u8; 16] = "fd00::1".parse::<Ipv6Addr>().unwrap().octets();
    s.add_static(1, IpAddr::from(target), TGT_MAC).unwrap();
    let mut out = [0u8; 256];
    let mut bad = ns(src, target, Some(REQ_MAC));
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(s.answer(T0, 1, &bad, &mut out), Answer::NotARequest);
    let mut hop = ns(src, target, Some(REQ_MAC));
    hop[14 + 7] = 64;
    assert_eq!(s.answer(T0, 1, &hop, &mut out), Answer::NotARequest);
}

#[test]
fn learning_from_arp_is_bounded_and_ages() {
    let cfg = SuppressConfig {
        ageing: Duration::from_secs(10),
        max_per_vni: 3,
        max_total: 4,
    };
    let mut s = Suppress::new(cfg);
    for i in 1..=10u8 {
        s.snoop(T0, 1, &arp_request([10, 0, 0, i], [10, 0, 0, 200]));
    }
    assert_eq!(s.len(), 3);
    assert_eq!(s.counters(1).full, 7);
    s.snoop(T0, 2, &arp_request([10, 0, 0, 1], [10, 0, 0, 200]));
    s.snoop(T0, 2, &arp_request([10, 0, 0, 2], [10, 0, 0, 200]));
    assert_eq!(s.len(), 4, "total bound");
    assert_eq!(
        s.lookup(Duration::from_secs(9), 1, IpAddr::from([10, 0, 0, 1])),
        Some(REQ_MAC)
    );
    assert_eq!(
        s.lookup(Duration::from_secs(10), 1, IpAddr::from([10, 0, 0, 1])),
        None
    );
    assert_eq!(s.age(Duration::from_secs(10)), 4);
    assert!(s.is_empty());
    // A static entry is not overwritten by what is snooped.
    s.add_static(1, IpAddr::from([10, 0, 0, 7]), TGT_MAC)
        .unwrap();
    s.snoop(T0, 1, &arp_request([10, 0, 0, 7], [10, 0, 0, 200]));
    assert_eq!(s.lookup(T0, 1, IpAddr::from([10, 0, 0, 7])), Some(TGT_MAC));
}
