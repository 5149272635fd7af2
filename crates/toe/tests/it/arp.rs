//! ARP at engine level: gratuitous announcements at start (RFC 5227 section
//! 3) and the unsolicited neighbour advertisement (RFC 4861 section 7.2.6);
//! gratuitous ARP received from a known neighbour (merged: RFC 826), from an
//! unknown one (ignored, as Linux with `arp_accept=0`) and claiming our own
//! address (a conflict, counted); a cached entry expiring (RFC 1122 section
//! 2.3.2.1) and resolved again with the frame waiting. Frames are read with
//! etherparse, not the engine's builders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::sim::Sim;
use linerate_toe::{Config, Instant, TcpState};
use linerate_wire::etherparse::{
    ArpHardwareId, ArpOperation, ArpPacket, EtherType, Ethernet2Header, Icmpv6Type, NetSlice,
    SlicedPacket, TransportSlice,
};
use linerate_wire::tcp::Flags;
use std::time::Duration;

const ME_IP: [u8; 4] = [10, 0, 0, 1];
const PEER_IP: [u8; 4] = [10, 0, 0, 2];
const ME_IP6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const BROADCAST: [u8; 6] = [0xff; 6];
/// Where the peer moves to.
const NEW_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x22];
const NEWER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x33];

/// An ARP packet as etherparse reads it: Ethernet destination and source,
/// then the ARP fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Arp {
    eth_dst: [u8; 6],
    eth_src: [u8; 6],
    oper: u16,
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
}

/// The ARP packet in `f`, if it is one (Ethernet and IPv4 sizes checked).
fn parse_arp(f: &[u8]) -> Option<Arp> {
    let (eth, rest) = Ethernet2Header::from_slice(f).ok()?;
    if eth.ether_type != EtherType::ARP {
        return None;
    }
    let p = ArpPacket::from_slice(rest).ok()?;
    assert_eq!(p.hw_addr_type, ArpHardwareId::ETHERNET);
    assert_eq!(p.proto_addr_type, EtherType::IPV4);
    let a = p.try_eth_ipv4().ok()?;
    Some(Arp {
        eth_dst: eth.destination,
        eth_src: eth.source,
        oper: a.operation.0,
        sha: a.sender_mac,
        spa: a.sender_ipv4,
        tha: a.target_mac,
        tpa: a.target_ipv4,
    })
}

/// The Ethernet destination of `f`.
fn eth_dst(f: &[u8]) -> [u8; 6] {
    Ethernet2Header::from_slice(f).unwrap().0.destination
}

/// An ARP frame from `eth_src` to `eth_dst`, built with etherparse.
fn arp_frame(
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    a: ArpOperation,
    sha: [u8; 6],
    spa: [u8; 4],
    tha: [u8; 6],
    tpa: [u8; 4],
) -> Vec<u8> {
    let eth = Ethernet2Header {
        source: eth_src,
        destination: eth_dst,
        ether_type: EtherType::ARP,
    };
    let arp = ArpPacket::new(
        ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        a,
        &sha,
        &spa,
        &tha,
        &tpa,
    )
    .unwrap();
    let mut f = eth.to_bytes().to_vec();
    f.extend_from_slice(&arp.to_bytes());
    f
}

/// A broadcast ARP request from (`mac`, `spa`) for `tpa`.
fn request(mac: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Vec<u8> {
    arp_frame(mac, BROADCAST, ArpOperation::REQUEST, mac, spa, [0; 6], tpa)
}

/// The peer's ARP reply to us, giving `mac` for its address.
fn peer_reply(mac: [u8; 6]) -> Vec<u8> {
    arp_frame(
        mac,
        ME_MAC,
        ArpOperation::REPLY,
        mac,
        PEER_IP,
        ME_MAC,
        ME_IP,
    )
}

/// A gratuitous ARP from (`mac`, `ip`): a request (target hardware address
/// zero) or a reply (target hardware address broadcast, as `arping -A` sends),
/// broadcast, sender and target protocol address both `ip`.
fn garp(mac: [u8; 6], ip: [u8; 4], reply: bool) -> Vec<u8> {
    if reply {
        arp_frame(mac, BROADCAST, ArpOperation::REPLY, mac, ip, BROADCAST, ip)
    } else {
        request(mac, ip, ip)
    }
}

/// Every frame the engine sends from now to `end`, with the time it went,
/// running timers as they fall due.
fn run_until(r: &mut Raw, end: Instant) -> Vec<(Instant, Vec<u8>)> {
    let mut seen: Vec<_> = r.frames().into_iter().map(|f| (r.now, f)).collect();
    while let Some(t) = r.e.poll_timeout() {
        if t > end {
            break;
        }
        r.now = t.max(r.now);
        r.e.handle_timeout(r.now);
        seen.extend(r.frames().into_iter().map(|f| (r.now, f)));
    }
    r.now = end;
    seen
}

/// The gratuitous ARP RFC 5227 section 3 describes, from host 1.
fn expected_announcement() -> Arp {
    Arp {
        eth_dst: BROADCAST,
        eth_src: ME_MAC,
        oper: 1,
        sha: ME_MAC,
        spa: ME_IP,
        tha: [0; 6],
        tpa: ME_IP,
    }
}

/// The unsolicited neighbour advertisement in `f`, checked field by field
/// against RFC 4861 section 7.2.6 (all-nodes, hop limit 255, override set,
/// solicited and router clear, our address as target, our MAC in the target
/// link-layer address option, checksum valid).
fn check_unsolicited_na(f: &[u8]) {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("not IPv6: {p:?}");
    };
    assert_eq!(eth_dst(f), [0x33, 0x33, 0, 0, 0, 1]);
    let h = ip.header();
    assert_eq!(h.source(), ME_IP6);
    assert_eq!(
        h.destination(),
        [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    );
    assert_eq!(h.hop_limit(), 255);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("not ICMPv6: {p:?}");
    };
    assert!(icmp.is_checksum_valid(h.source(), h.destination()));
    let Icmpv6Type::NeighborAdvertisement(flags) = icmp.icmp_type() else {
        panic!("not an NA: {:?}", icmp.icmp_type());
    };
    assert!(
        flags.r#override && !flags.solicited && !flags.router,
        "{flags:?}"
    );
    let body = icmp.payload();
    assert_eq!(body[..16], ME_IP6);
    // Option 2 (target link-layer address), 8 bytes.
    assert_eq!(body[16..], [2, 1, 2, 0, 0, 0, 0, 1]);
}

/// (a) The first `poll_transmit` carries the announcement (and the
/// unsolicited NA), the second announcement comes 2 s later by the timer, and
/// no third; the clock's epoch does not matter.
#[test]
fn announces_at_start_then_once_more_two_seconds_later() {
    let mut r = Raw::new(Sim::host_config(1));
    let start = Instant::from_millis(123_456);
    r.now = start;
    let first = r.frames();
    assert_eq!(first.len(), 2, "announcement and advertisement");
    assert_eq!(parse_arp(&first[0]), Some(expected_announcement()));
    check_unsolicited_na(&first[1]);
    assert!(r.frames().is_empty(), "sent once");
    assert_eq!(r.e.poll_timeout(), Some(start + Duration::from_secs(2)));
    // Nothing before the interval is over.
    let later = run_until(&mut r, start + Duration::from_millis(1_999));
    assert!(later.is_empty(), "{later:?}");
    let later = run_until(&mut r, start + Duration::from_secs(30));
    assert_eq!(later.len(), 1, "exactly one more announcement, no third");
    assert_eq!(later[0].0, start + Duration::from_secs(2));
    assert_eq!(parse_arp(&later[0].1), Some(expected_announcement()));
    assert_eq!(r.e.poll_timeout(), None, "no timer left");
    let c = r.e.counters();
    assert_eq!(
        (c.arp_announcements_out, c.ndp_unsolicited_adverts_out),
        (2, 1)
    );
    assert_eq!(c.arp_requests_out, 0, "announcements are not resolutions");
}

/// The count is configurable: 0 sends nothing; an IPv6-only interface sends
/// the advertisement once and keeps no timer; 3 sends three.
#[test]
fn announcement_count_is_configurable() {
    let tuned = |f: fn(&mut Config)| {
        let mut cfg = Sim::host_config(1);
        f(&mut cfg);
        let mut r = Raw::new(cfg);
        run_until(&mut r, Instant::from_millis(60_000))
    };
    assert!(tuned(|c| c.announcements = 0).is_empty());
    let v6 = tuned(|c| c.ipv4 = None);
    assert_eq!(v6.len(), 1);
    check_unsolicited_na(&v6[0].1);
    let three = tuned(|c| {
        c.ipv6 = None;
        c.announcements = 3;
        c.announce_interval = Duration::from_millis(500);
    });
    let at: Vec<u64> = three.iter().map(|(t, _)| t.as_millis()).collect();
    assert_eq!(at, [0, 500, 1000]);
    assert!(
        three
            .iter()
            .all(|(_, f)| parse_arp(f) == Some(expected_announcement()))
    );
}

/// Host 1 knowing the peer at `PEER_MAC` (from the peer's request), no
/// announcements, `tune` applied.
fn host(tune: impl FnOnce(&mut Config)) -> Raw {
    Raw::host(|c| {
        c.announcements = 0;
        tune(c);
    })
}

/// (b) A gratuitous ARP from a known neighbour with a new MAC, as a request and
/// then as a reply, moves the next frames to it (and is not answered).
#[test]
fn gratuitous_arp_from_a_known_neighbour_moves_it() {
    let mut r = host(|_| {});
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.frames();
    assert_eq!(syn.len(), 1);
    assert_eq!(eth_dst(&syn[0]), PEER_MAC);
    let syn = parse_tcp(&syn[0], r.now).unwrap();
    assert!(syn.flags.contains(Flags::SYN));

    r.input(&garp(NEW_MAC, PEER_IP, false));
    assert!(
        r.frames().is_empty(),
        "a gratuitous request is not answered"
    );
    // The SYN-ACK (from whatever MAC): our ACK goes to the new one.
    let (me, _) = r.e.tcp_addrs(c).unwrap();
    r.input(&tcp_frame(
        80,
        me.port(),
        7000,
        Some(syn.seq.wrapping_add(1)),
        Flags::SYN,
        60_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    let ack = r.frames();
    assert_eq!(ack.len(), 1);
    assert_eq!(eth_dst(&ack[0]), NEW_MAC);

    r.input(&garp(NEWER_MAC, PEER_IP, true));
    assert!(r.frames().is_empty());
    assert_eq!(r.e.tcp_send(c, b"moved"), Ok(5));
    let data = r.frames();
    assert_eq!(data.len(), 1);
    assert_eq!(eth_dst(&data[0]), NEWER_MAC);
    assert_eq!(parse_tcp(&data[0], r.now).unwrap().payload, b"moved");
    assert_eq!(r.e.counters().arp_requests_out, 0, "no resolution needed");
    assert_eq!(r.e.counters().arp_conflicts, 0);
}

/// (c) A gratuitous ARP (request or reply) from an address not in the table
/// creates no entry: a frame to it still waits for an ARP request's answer.
#[test]
fn gratuitous_arp_from_an_unknown_address_creates_no_entry() {
    let mut cfg = Sim::host_config(1);
    cfg.announcements = 0;
    let mut r = Raw::new(cfg);
    r.input(&garp(PEER_MAC, PEER_IP, false));
    r.input(&garp(PEER_MAC, PEER_IP, true));
    assert!(r.frames().is_empty(), "not answered");
    r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let out = r.frames();
    assert_eq!(out.len(), 1, "only the ARP request: {out:?}");
    assert_eq!(
        parse_arp(&out[0]),
        Some(Arp {
            eth_dst: BROADCAST,
            eth_src: ME_MAC,
            oper: 1,
            sha: ME_MAC,
            spa: ME_IP,
            tha: [0; 6],
            tpa: PEER_IP,
        })
    );
    // The answer releases the SYN, to the MAC it gives.
    r.input(&peer_reply(NEW_MAC));
    let syn = r.frames();
    assert_eq!(syn.len(), 1);
    assert_eq!(eth_dst(&syn[0]), NEW_MAC);
    assert!(
        parse_tcp(&syn[0], r.now)
            .unwrap()
            .flags
            .contains(Flags::SYN)
    );
}

/// (d) A gratuitous ARP for our own address from another MAC is a conflict:
/// counted, not answered, nothing learnt (requests for our address are still
/// answered with our MAC, frames to the peer still go to it). Our own
/// announcement coming back is not a conflict.
#[test]
fn gratuitous_arp_for_our_address_is_counted_as_a_conflict() {
    let mut r = host(|_| {});
    let intruder = [2, 0, 0, 0, 0, 0x66];
    r.input(&garp(intruder, ME_IP, false));
    r.input(&garp(intruder, ME_IP, true));
    // An ordinary request sent from our address by another host.
    r.input(&request(intruder, ME_IP, PEER_IP));
    assert!(r.frames().is_empty(), "nothing answered");
    assert_eq!(r.e.counters().arp_conflicts, 3);
    // Our own announcement looped back.
    r.input(&garp(ME_MAC, ME_IP, false));
    assert!(r.frames().is_empty());
    assert_eq!(r.e.counters().arp_conflicts, 3);
    // Still ours: a request for our address is answered with our MAC.
    r.input(&request(PEER_MAC, PEER_IP, ME_IP));
    let reply = r.frames();
    assert_eq!(reply.len(), 1);
    let a = parse_arp(&reply[0]).unwrap();
    assert_eq!(
        (a.oper, a.sha, a.spa, a.tha, a.tpa),
        (2, ME_MAC, ME_IP, PEER_MAC, PEER_IP)
    );
    // And the peer is where it was.
    r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.frames();
    assert_eq!(syn.len(), 1);
    assert_eq!(eth_dst(&syn[0]), PEER_MAC);
}

/// (e) Once `neighbor_ttl` has passed since the peer was learnt, a send to it
/// starts a new resolution: an ARP request goes, the segment waits, and the
/// answer releases it to the MAC it gives. Before that, sends go straight out.
#[test]
fn an_expired_neighbour_is_resolved_again_before_the_frame_goes() {
    let mut r = host(|c| c.neighbor_ttl = Duration::from_secs(5));
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments();
    assert_eq!(syn.len(), 1);
    let port = r.answer_syn(c, &syn[0], &[]);
    let peer_ack = |r: &mut Raw, seg: &Seen| {
        let end = seg.seq.wrapping_add(seg.payload.len() as u32);
        r.input(&tcp_frame(
            80,
            port,
            7001,
            Some(end),
            Flags::ACK,
            60_000,
            &[],
            &[],
        ));
    };
    // At 4 s, still valid: the segment goes at once.
    r.advance(Duration::from_secs(4));
    assert_eq!(r.e.tcp_send(c, b"early"), Ok(5));
    let out = r.frames();
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(eth_dst(&out[0]), PEER_MAC);
    let seg = parse_tcp(&out[0], r.now).unwrap();
    assert_eq!(seg.payload, b"early");
    peer_ack(&mut r, &seg);
    // At 6 s, expired (learnt at 0, the TTL 5 s): an ARP request first.
    let quiet = run_until(&mut r, Instant::from_millis(6_000));
    assert!(quiet.is_empty(), "{quiet:?}");
    assert_eq!(r.e.tcp_send(c, b"late"), Ok(4));
    let out = r.frames();
    assert_eq!(out.len(), 1, "only the ARP request: {out:?}");
    let a = parse_arp(&out[0]).unwrap();
    assert_eq!(
        (a.eth_dst, a.oper, a.spa, a.tpa),
        (BROADCAST, 1, ME_IP, PEER_IP)
    );
    assert_eq!(r.e.counters().arp_requests_out, 1);
    // The segment waits (200 ms on, nothing but ARP).
    let waiting = run_until(&mut r, Instant::from_millis(6_200));
    assert!(
        waiting.iter().all(|(_, f)| parse_arp(f).is_some()),
        "{waiting:?}"
    );
    r.input(&peer_reply(NEW_MAC));
    let out = r.frames();
    let tcp: Vec<_> = out
        .iter()
        .filter(|f| parse_tcp(f, r.now).is_some())
        .collect();
    assert!(!tcp.is_empty(), "released");
    assert!(tcp.iter().all(|f| eth_dst(f) == NEW_MAC));
    assert_eq!(parse_tcp(tcp[0], r.now).unwrap().payload, b"late");
}

/// An ARP probe for our address (RFC 5227 section 2.1.1: sender address
/// 0.0.0.0, target our address) is answered, as Linux answers it, to the
/// prober's MAC with target address 0.0.0.0, so a host checking whether the
/// address is free learns that it is not; the prober is not learnt, and a
/// probe for another address draws nothing.
#[test]
fn an_arp_probe_for_our_address_is_answered() {
    let mut r = host(|_| {});
    let prober = [2, 0, 0, 0, 0, 0x77];
    let probe = |tpa| request(prober, [0; 4], tpa);
    r.input(&probe([10, 0, 0, 99]));
    assert!(r.frames().is_empty(), "a probe for another address");
    r.input(&probe(ME_IP));
    let reply = r.frames();
    assert_eq!(reply.len(), 1);
    let a = parse_arp(&reply[0]).unwrap();
    assert_eq!(
        a,
        Arp {
            eth_dst: prober,
            eth_src: ME_MAC,
            oper: 2,
            sha: ME_MAC,
            spa: ME_IP,
            tha: prober,
            tpa: [0; 4],
        }
    );
    assert_eq!(r.e.counters().arp_conflicts, 0, "a probe is no conflict");
}
