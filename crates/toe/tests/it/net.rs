//! Interface behaviour: ARP replies and resolution with queued frames and give-up
//! (RFC 826, RFC 1122 section 2.3.2), ICMP echo for IPv4 and IPv6, neighbour
//! solicitation answered (RFC 4861); the neighbour table bounded under spoofed
//! ARP and on-link SYN floods.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::Instant;
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{IcmpEchoHeader, Icmpv4Type, Icmpv6Type};
use linerate_wire::icmp::{ndp, v4 as icmpv4, v6 as icmpv6};
use linerate_wire::{arp, ethernet, ipv4, ipv6};
use std::time::Duration;

/// Host 1 without its start-up announcements (gratuitous ARP, unsolicited NA;
/// `tests/arp.rs`), for the tests that count every frame.
fn quiet() -> linerate_toe::Config {
    let mut cfg = Sim::host_config(1);
    cfg.announcements = 0;
    cfg
}

#[test]
fn answers_arp_requests_for_its_address_only() {
    let mut r = Raw::new(quiet());
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&ethernet::BROADCAST);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_request(&mut f[14..], PEER_MAC, [10, 0, 0, 2], [10, 0, 0, 99]).unwrap();
    r.input(&f);
    assert!(r.frames().is_empty());
    arp::emit_request(&mut f[14..], PEER_MAC, [10, 0, 0, 2], [10, 0, 0, 1]).unwrap();
    r.input(&f);
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    assert_eq!(eth.dst_addr(), PEER_MAC);
    let a = arp::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(a.oper(), arp::operation::REPLY);
    assert_eq!(
        (a.sha(), a.spa(), a.tpa()),
        (ME_MAC, [10, 0, 0, 1], [10, 0, 0, 2])
    );
}

#[test]
fn frames_wait_for_arp_and_are_dropped_when_it_fails() {
    let mut r = Raw::new(quiet());
    let c = r.e.tcp_connect(Instant::ZERO, peer_addr(80)).unwrap();
    let out = r.frames();
    // Only the ARP request: the SYN waits.
    assert_eq!(out.len(), 1);
    assert_eq!(
        ethernet::Packet::new_checked(&out[0][..])
            .unwrap()
            .ethertype(),
        0x0806
    );
    // The reply releases the SYN.
    r.input(&peer_arp_reply());
    let syn = r.segments();
    assert_eq!(syn.len(), 1);
    assert!(syn[0].flags.contains(linerate_wire::tcp::Flags::SYN));
    let _ = c;
    // An unanswered resolution: retries every second, then gives up and drops.
    let mut r = Raw::new(quiet());
    r.e.tcp_connect(Instant::ZERO, peer_addr(80)).unwrap();
    r.frames();
    r.advance(Duration::from_millis(2_500));
    assert_eq!(r.e.counters().arp_requests_out, 3);
    assert_eq!(r.e.counters().neighbor_failures, 0);
    r.advance(Duration::from_millis(600));
    assert_eq!(r.e.counters().neighbor_failures, 1);
    assert!(r.e.counters().neighbor_drops >= 1);
}

#[test]
fn echo_replies_v4_and_v6() {
    let mut r = Raw::host(|_| {});
    let req = FrameBuilder::new(
        Ip::v4([10, 0, 0, 2], [10, 0, 0, 1]),
        L4::Icmpv4(Icmpv4Type::EchoRequest(IcmpEchoHeader { id: 7, seq: 9 })),
    )
    .macs(PEER_MAC, ME_MAC)
    .build(b"abcdef");
    r.input(&req);
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
    assert!(ip.verify_checksum());
    let icmp = icmpv4::Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum());
    assert_eq!(icmp.msg_type(), icmpv4::msg_type::ECHO_REPLY);
    assert_eq!(
        (icmp.echo_ident(), icmp.echo_seq_no(), icmp.data()),
        (7, 9, &b"abcdef"[..])
    );
    assert_eq!(r.e.counters().icmp_out_echo_reps, 1);

    let me = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let peer = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let req = FrameBuilder::new(
        Ip::v6(peer, me),
        L4::Icmpv6(Icmpv6Type::EchoRequest(IcmpEchoHeader { id: 1, seq: 2 })),
    )
    .macs(PEER_MAC, ME_MAC)
    .build(b"v6");
    r.input(&req);
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
    let icmp = icmpv6::Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum(&me, &peer));
    assert_eq!(icmp.msg_type(), icmpv6::msg_type::ECHO_REPLY);
    assert_eq!(icmp.data(), b"v6");
}

#[test]
fn neighbour_solicitation_is_answered() {
    let mut r = Raw::new(quiet());
    let me = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let peer = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    let group = ndp::solicited_node_multicast(&me);
    let mut body = vec![0u8; ndp::NEIGHBOR_LEN + ndp::LL_ADDR_OPTION_LEN];
    ndp::emit_neighbor_solicitation(
        &mut body,
        icmpv6::Addrs {
            src: &peer,
            dst: &group,
        },
        &me,
        Some(PEER_MAC),
    )
    .unwrap();
    let mut ip = Ip::v6(peer, group);
    if let Ip::V6(h, _) = &mut ip {
        h.hop_limit = 255;
    }
    let f = FrameBuilder::new(ip, L4::Raw(58))
        .macs(PEER_MAC, ndp::multicast_mac(&group))
        .build(&body);
    r.input(&f);
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    let ip6 = ipv6::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(ip6.hop_limit(), 255);
    let na = ndp::Neighbor::new_checked(ip6.payload()).unwrap();
    assert!(!na.is_solicitation());
    assert!(na.verify_checksum(&me, &peer));
    assert_eq!(na.target_addr(), me);
    assert!(na.solicited_flag() && na.override_flag());
    assert_eq!(na.target_lladdr(), Some(ME_MAC));
    // The same with hop limit 64 is refused (RFC 4861 section 7.1.1).
    let f = FrameBuilder::new(Ip::v6(peer, group), L4::Raw(58))
        .macs(PEER_MAC, ndp::multicast_mac(&group))
        .build(&body);
    r.input(&f);
    assert!(r.frames().is_empty());
    assert_eq!(r.e.counters().ndp_errors, 1);
}

#[test]
fn ping_between_engines_through_the_sim() {
    // Both engines resolve each other over the hub while connecting over IPv4 and IPv6.
    let mut sim = Sim::two_hosts(false, 1, LinkConfig::default());
    sim.engines[1].tcp_listen(22).unwrap();
    let a = sim.engines[0]
        .tcp_connect(sim.now, "10.0.0.2:22".parse().unwrap())
        .unwrap();
    let b = sim.engines[0]
        .tcp_connect(sim.now, "[fd00::2]:22".parse().unwrap())
        .unwrap();
    let end = sim.now + Duration::from_secs(1);
    assert!(sim.run_until(end, |sim| {
        sim.engines[0].tcp_state(a) == Ok(linerate_toe::TcpState::Established)
            && sim.engines[0].tcp_state(b) == Ok(linerate_toe::TcpState::Established)
    }));
}

/// The peer's (10.0.0.2) ARP reply to our request.
fn peer_arp_reply() -> Vec<u8> {
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&ME_MAC);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_reply(&mut f[14..], PEER_MAC, [10, 0, 0, 2], ME_MAC, [10, 0, 0, 1]).unwrap();
    f
}

/// An ARP request from `ip` (MAC derived from it) for our address.
fn arp_request_from(ip: [u8; 4]) -> Vec<u8> {
    let mac = [2, 9, ip[0], ip[1], ip[2], ip[3]];
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&ethernet::BROADCAST);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_request(&mut f[14..], mac, ip, [10, 0, 0, 1]).unwrap();
    f
}

/// Spoofed ARP requests from many senders cannot grow the neighbour table past
/// `neighbor_max`: each is still answered (as Linux does) and the addresses
/// past the bound are refused and counted. Nor can they lock out a peer this
/// host needs: its resolution takes the place of an entry only learned from a
/// request, so the SYN goes out once the peer answers.
#[test]
fn neighbour_table_is_bounded_under_a_spoofed_arp_flood() {
    let mut cfg = Sim::host_config(1);
    cfg.neighbor_max = 8;
    cfg.announcements = 0;
    let mut r = Raw::new(cfg);
    for i in 0..100u8 {
        r.input(&arp_request_from([10, 0, 0, 10 + i]));
    }
    let replies = r.frames();
    assert_eq!(replies.len(), 100, "every request answered");
    assert_eq!(r.e.counters().neighbor_table_full, 92);
    // The flood goes on while this host opens a connection to its peer.
    r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    for i in 100..120u8 {
        r.input(&arp_request_from([10, 0, 0, 10 + i]));
    }
    let out = r.frames();
    let arp: Vec<_> = out
        .iter()
        .filter_map(|f| {
            let eth = ethernet::Packet::new_checked(&f[..]).ok()?;
            (eth.ethertype() == 0x0806).then(|| {
                arp::Packet::new_checked(eth.payload())
                    .ok()
                    .map(|a| (a.oper(), a.tpa()))
            })?
        })
        .collect();
    assert!(
        arp.contains(&(arp::operation::REQUEST, [10, 0, 0, 2])),
        "the peer is resolved: {arp:?}"
    );
    assert_eq!(r.e.counters().neighbor_drops, 0);
    assert_eq!(r.e.counters().neighbor_table_full, 112);
    // The peer answers: the SYN goes out.
    r.input(&peer_arp_reply());
    let syn = r.segments();
    assert_eq!(syn.len(), 1);
    assert!(syn[0].flags.contains(linerate_wire::tcp::Flags::SYN));
}

/// A SYN flood from many on-link sources: every SYN-ACK needs its source
/// resolved, so without a bound each would start a resolution with a queue of
/// its own. At most `neighbor_max` resolutions start; the other SYN-ACKs are
/// dropped and counted.
#[test]
fn syn_flood_from_many_on_link_sources_starts_bounded_resolutions() {
    let mut cfg = Sim::host_config(1);
    cfg.neighbor_max = 8;
    cfg.announcements = 0;
    let mut r = Raw::new(cfg);
    r.e.tcp_listen(80).unwrap();
    for i in 0..100u8 {
        let mut h = linerate_wire::etherparse::TcpHeader::new(4000 + u16::from(i), 80, 1000, 65535);
        h.syn = true;
        let f = FrameBuilder::new(Ip::v4([10, 0, 0, 10 + i], [10, 0, 0, 1]), L4::Tcp(h))
            .macs([2, 9, 0, 0, 0, i], ME_MAC)
            .build(&[]);
        r.input(&f);
    }
    let out = r.frames();
    let arp_out = out
        .iter()
        .filter(|f| ethernet::Packet::new_checked(&f[..]).unwrap().ethertype() == 0x0806)
        .count();
    assert_eq!(arp_out, 8, "one resolution per table entry");
    assert_eq!(r.e.counters().arp_requests_out, 8);
    assert_eq!(r.e.counters().neighbor_table_full, 92);
    assert_eq!(r.e.counters().neighbor_drops, 92);
}
