//! Addresses from the network at engine level: the DHCP channel before the
//! engine has an address (`Config::dhcp`), addresses set and removed at run
//! time with their events, and SLAAC (`Config::slaac`, RFC 4862) fed router
//! advertisements, neighbour solicitations and advertisements written with
//! etherparse; the engine's frames are read with etherparse too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_offload::OffloadMeta;
use linerate_toe::{AddrState, Config, DhcpIn, Engine, Event, Instant, NextHop};
use linerate_wire::etherparse::icmpv6::{NeighborAdvertisementHeader, RouterAdvertisementHeader};
use linerate_wire::etherparse::{
    ArpPacket, EtherType, Ethernet2Header, Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket,
    TransportSlice,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

const MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x26];
const SERVER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const ROUTER_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// fd00:26::/64 and MAC's modified EUI-64 identifier, written out.
const SLAAC: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x26, 0, 0, 0x004c, 0x52ff, 0xfe00, 0x0026);
const LINK_LOCAL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x004c, 0x52ff, 0xfe00, 0x0026);

fn sent(e: &mut Engine, now: Instant) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    e.poll_transmit(now, &mut |f, _| v.push(f.to_vec()));
    v
}

fn events(e: &mut Engine) -> Vec<Event> {
    std::iter::from_fn(|| e.poll_event()).collect()
}

fn udp_frame(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(SERVER_MAC, [0xff; 6])
        .ipv4(src.octets(), dst.octets(), 64)
        .udp(sport, dport)
        .write(&mut f, payload)
        .unwrap();
    f
}

#[test]
fn dhcp_channel_before_an_address() {
    let mut cfg = Config::new(MAC);
    cfg.dhcp = true;
    cfg.announcements = 0;
    let mut e = Engine::new(cfg, 1);
    let now = Instant::ZERO;
    // The client's DISCOVER: from 0.0.0.0:68 to the broadcast address.
    e.dhcp_send(now, Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, b"discover")
        .unwrap();
    let out = sent(&mut e, now);
    assert_eq!(out.len(), 1);
    let p = SlicedPacket::from_ethernet(&out[0]).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("IPv4")
    };
    assert_eq!(ip.header().source_addr(), Ipv4Addr::UNSPECIFIED);
    assert_eq!(ip.header().destination_addr(), Ipv4Addr::BROADCAST);
    let Some(TransportSlice::Udp(u)) = &p.transport else {
        panic!("UDP")
    };
    assert_eq!((u.source_port(), u.destination_port()), (68, 67));
    let csum = u
        .to_header()
        .calc_checksum_ipv4(&ip.header().to_header(), u.payload())
        .unwrap();
    assert_eq!(u.checksum(), csum, "a complete UDP checksum");
    assert_eq!(u.payload(), b"discover");
    assert_eq!(
        Ethernet2Header::from_slice(&out[0]).unwrap().0.destination,
        [0xff; 6]
    );

    // The server's OFFER, broadcast, and one to the offered address: both
    // for the client although the engine has no address.
    let server = Ipv4Addr::new(10, 26, 0, 1);
    let offered = Ipv4Addr::new(10, 26, 0, 50);
    e.handle_frame(
        now,
        &udp_frame(server, Ipv4Addr::BROADCAST, 67, 68, b"offer"),
        &OffloadMeta::plain(),
    );
    e.handle_frame(
        now,
        &udp_frame(server, offered, 67, 68, b"ack"),
        &OffloadMeta::plain(),
    );
    // Not DHCP: dropped as before (no address).
    e.handle_frame(
        now,
        &udp_frame(server, offered, 67, 69, b"other"),
        &OffloadMeta::plain(),
    );
    assert_eq!(
        events(&mut e),
        [Event::Dhcp],
        "one event for a queue that was empty"
    );
    assert_eq!(e.dhcp_recv(), Some(DhcpIn::Message(b"offer".to_vec())));
    assert_eq!(e.dhcp_recv(), Some(DhcpIn::Message(b"ack".to_vec())));
    assert_eq!(e.dhcp_recv(), None);
    // A bad checksum is dropped and counted.
    let mut bad = udp_frame(server, Ipv4Addr::BROADCAST, 67, 68, b"offer");
    let n = bad.len();
    bad[n - 1] ^= 1;
    e.handle_frame(now, &bad, &OffloadMeta::plain());
    assert_eq!(e.dhcp_recv(), None);
    assert_eq!(e.dhcp_stats().errors, 1);

    // The probe: ARP request from 0.0.0.0 for the offered address; an ARP
    // reply from the holder comes back through the channel.
    e.dhcp_arp_probe(offered);
    let out = sent(&mut e, now);
    let (eth, rest) = Ethernet2Header::from_slice(&out[0]).unwrap();
    assert_eq!(eth.ether_type, EtherType::ARP);
    let a = ArpPacket::from_slice(rest).unwrap().try_eth_ipv4().unwrap();
    assert_eq!((a.sender_ipv4, a.target_ipv4), ([0; 4], offered.octets()));
    let mut reply = Vec::new();
    let holder = [2, 0, 0, 0, 0, 0x77];
    Ethernet2Header {
        source: holder,
        destination: MAC,
        ether_type: EtherType::ARP,
    }
    .write(&mut reply)
    .unwrap();
    let arp = ArpPacket::new(
        linerate_wire::etherparse::ArpHardwareId::ETHERNET,
        EtherType::IPV4,
        linerate_wire::etherparse::ArpOperation::REPLY,
        &holder,
        &offered.octets(),
        &MAC,
        &[0; 4],
    )
    .unwrap();
    reply.extend_from_slice(&arp.to_bytes());
    e.handle_frame(now, &reply, &OffloadMeta::plain());
    assert_eq!(
        e.dhcp_recv(),
        Some(DhcpIn::Arp {
            sha: holder,
            spa: offered,
            tpa: Ipv4Addr::UNSPECIFIED
        })
    );
}

#[test]
fn addresses_come_and_go_with_events() {
    let mut cfg = Config::new(MAC);
    cfg.announcements = 1;
    let mut e = Engine::new(cfg, 1);
    let now = Instant::ZERO;
    let a = Ipv4Addr::new(10, 26, 0, 50);
    e.set_ipv4(a, 24).unwrap();
    assert_eq!(events(&mut e), [Event::AddressAdded(IpAddr::V4(a))]);
    assert_eq!(
        e.route_lookup(IpAddr::V4(Ipv4Addr::new(10, 26, 0, 9))),
        NextHop::Neighbor(IpAddr::V4(Ipv4Addr::new(10, 26, 0, 9)))
    );
    // Announced: a gratuitous ARP for the new address.
    let out = sent(&mut e, now);
    let (_, rest) = Ethernet2Header::from_slice(&out[0]).unwrap();
    let g = ArpPacket::from_slice(rest).unwrap().try_eth_ipv4().unwrap();
    assert_eq!((g.sender_ipv4, g.target_ipv4), (a.octets(), a.octets()));
    // Through a gateway of the new subnet.
    let gw = IpAddr::V4(Ipv4Addr::new(10, 26, 0, 1));
    e.set_gateway(gw).unwrap();
    assert_eq!(
        e.route_lookup(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
        NextHop::Neighbor(gw)
    );
    let b = Ipv4Addr::new(10, 26, 0, 51);
    e.set_ipv4(b, 24).unwrap();
    assert_eq!(
        events(&mut e),
        [
            Event::AddressRemoved(IpAddr::V4(a)),
            Event::AddressAdded(IpAddr::V4(b))
        ]
    );
    assert_eq!(e.remove_ipv4().map(|c| c.addr), Some(b));
    assert_eq!(events(&mut e), [Event::AddressRemoved(IpAddr::V4(b))]);
    assert!(e.set_ipv4(Ipv4Addr::BROADCAST, 24).is_err());
    assert!(e.set_mtu(500).is_err());
    e.set_mtu(1400).unwrap();
    assert_eq!(e.config().mtu, 1400);
}

/// A router advertisement from ROUTER_LL: router lifetime, then a prefix
/// information option for fd00:26::/64 (A flag) with `valid`/`preferred`
/// lifetimes, and an RDNSS option naming fd00:26::53 for 600 s.
fn router_advert(router_lifetime: u16, valid: u32, preferred: u32) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0; 8]); // reachable time, retrans timer
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&SERVER_MAC);
    body.extend_from_slice(&[3, 4, 64, 0xc0]);
    body.extend_from_slice(&valid.to_be_bytes());
    body.extend_from_slice(&preferred.to_be_bytes());
    body.extend_from_slice(&[0; 4]);
    body.extend_from_slice(&Ipv6Addr::new(0xfd00, 0x26, 0, 0, 0, 0, 0, 0).octets());
    body.extend_from_slice(&[25, 3, 0, 0]);
    body.extend_from_slice(&600u32.to_be_bytes());
    body.extend_from_slice(&Ipv6Addr::new(0xfd00, 0x26, 0, 0, 0, 0, 0, 0x53).octets());
    let mut f = Vec::new();
    PacketBuilder::ethernet2(SERVER_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(ROUTER_LL.octets(), ALL_NODES.octets(), 255)
        .icmpv6(Icmpv6Type::RouterAdvertisement(RouterAdvertisementHeader {
            cur_hop_limit: 64,
            managed_address_config: false,
            other_config: false,
            router_lifetime,
        }))
        .write(&mut f, &body)
        .unwrap();
    f
}

/// The ICMPv6 messages in `frames`: type, source, destination, and the
/// NDP target (for solicitations).
fn icmpv6(frames: &[Vec<u8>]) -> Vec<(u8, Ipv6Addr, Ipv6Addr, Option<Ipv6Addr>)> {
    frames
        .iter()
        .filter_map(|f| {
            let p = SlicedPacket::from_ethernet(f).ok()?;
            let Some(NetSlice::Ipv6(ip)) = &p.net else {
                return None;
            };
            let Some(TransportSlice::Icmpv6(i)) = &p.transport else {
                return None;
            };
            let h = ip.header();
            let target = match i.icmp_type() {
                Icmpv6Type::NeighborSolicitation => <[u8; 16]>::try_from(&i.payload()[..16])
                    .ok()
                    .map(Ipv6Addr::from),
                _ => None,
            };
            Some((i.type_u8(), h.source_addr(), h.destination_addr(), target))
        })
        .collect()
}

fn slaac_engine() -> Engine {
    let mut cfg = Config::new(MAC);
    cfg.slaac = true;
    cfg.announcements = 0;
    Engine::new(cfg, 1)
}

/// Runs the engine's timers up to `until`, collecting its frames.
fn run(e: &mut Engine, from: Instant, until: Instant) -> Vec<Vec<u8>> {
    let mut out = sent(e, from);
    while let Some(t) = e.poll_timeout().filter(|t| *t <= until) {
        e.handle_timeout(t);
        out.extend(sent(e, t));
    }
    out
}

#[test]
fn slaac_forms_an_address_from_a_router_advertisement() {
    let mut e = slaac_engine();
    // DAD of the link-local address, then a router solicitation from it.
    let out = icmpv6(&run(&mut e, Instant::ZERO, Instant::from_millis(1_500)));
    assert_eq!(out[0].0, 135);
    assert_eq!(out[0].1, Ipv6Addr::UNSPECIFIED, "DAD from ::");
    assert_eq!(out[0].3, Some(LINK_LOCAL));
    assert_eq!(
        (out[1].0, out[1].1),
        (133, LINK_LOCAL),
        "RS from the link-local address"
    );
    assert_eq!(out[1].2, Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2));
    let t = Instant::from_millis(2_000);
    e.handle_frame(
        t,
        &router_advert(1800, 86_400, 14_400),
        &OffloadMeta::plain(),
    );
    assert_eq!(events(&mut e), [Event::DnsServers]);
    assert_eq!(
        e.dns_servers(),
        [IpAddr::V6(Ipv6Addr::new(0xfd00, 0x26, 0, 0, 0, 0, 0, 0x53))]
    );
    // DAD of the formed address, then it is the engine's.
    let out = icmpv6(&run(&mut e, t, Instant::from_millis(3_500)));
    assert!(
        out.iter().any(|m| m.0 == 135 && m.3 == Some(SLAAC)),
        "{out:?}"
    );
    assert_eq!(
        e.config().ipv6.map(|c| (c.addr, c.prefix_len)),
        Some((SLAAC, 64))
    );
    assert_eq!(events(&mut e), [Event::AddressAdded(IpAddr::V6(SLAAC))]);
    // The default route goes through the router.
    assert_eq!(
        e.route_lookup(IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1))),
        NextHop::Neighbor(IpAddr::V6(ROUTER_LL))
    );
    assert_eq!(e.slaac_state().router.map(|r| r.0), Some(ROUTER_LL));
}

#[test]
fn slaac_two_hour_rule_and_expiry() {
    let mut e = slaac_engine();
    run(&mut e, Instant::ZERO, Instant::from_millis(1_500));
    let t = Instant::from_millis(2_000);
    e.handle_frame(t, &router_advert(0, 86_400, 14_400), &OffloadMeta::plain());
    run(&mut e, t, Instant::from_millis(3_500));
    assert_eq!(e.config().ipv6.map(|c| c.addr), Some(SLAAC));
    let valid = |e: &Engine| e.slaac_state().addrs[0].valid_until.unwrap();
    // RFC 4862 5.5.3 (e) 3: a short lifetime over more than two hours left
    // becomes two hours.
    let t = Instant::from_millis(10_000);
    e.handle_frame(t, &router_advert(0, 60, 60), &OffloadMeta::plain());
    assert_eq!(valid(&e), t + Duration::from_secs(7_200));
    // (e) 2: with two hours or less left, a shorter one is ignored.
    e.handle_frame(t, &router_advert(0, 60, 60), &OffloadMeta::plain());
    assert_eq!(valid(&e), t + Duration::from_secs(7_200));
    // (e) 1: a longer one than what is left is taken.
    let t2 = Instant::from_millis(20_000);
    e.handle_frame(t2, &router_advert(0, 9_000, 60), &OffloadMeta::plain());
    assert_eq!(valid(&e), t2 + Duration::from_secs(9_000));
    events(&mut e);
    // Deprecated after 60 s, gone after 9,000 s.
    run(&mut e, t2, t2 + Duration::from_secs(61));
    assert_eq!(e.slaac_state().addrs[0].state, AddrState::Deprecated);
    assert_eq!(
        e.config().ipv6.map(|c| c.addr),
        Some(SLAAC),
        "still the only one"
    );
    run(&mut e, t2, t2 + Duration::from_secs(9_001));
    assert_eq!(e.config().ipv6, None);
    assert!(events(&mut e).contains(&Event::AddressRemoved(IpAddr::V6(SLAAC))));
}

#[test]
fn slaac_duplicate_address_is_not_used() {
    let mut e = slaac_engine();
    run(&mut e, Instant::ZERO, Instant::from_millis(1_500));
    let t = Instant::from_millis(2_000);
    e.handle_frame(t, &router_advert(0, 86_400, 14_400), &OffloadMeta::plain());
    sent(&mut e, t);
    // Another node defends the address during DAD.
    let mut na = Vec::new();
    let other = [2, 0, 0, 0, 0, 0x99];
    let mut body = SLAAC.octets().to_vec();
    body.extend_from_slice(&[2, 1]);
    body.extend_from_slice(&other);
    PacketBuilder::ethernet2(other, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(SLAAC.octets(), ALL_NODES.octets(), 255)
        .icmpv6(Icmpv6Type::NeighborAdvertisement(
            NeighborAdvertisementHeader {
                router: false,
                solicited: false,
                r#override: true,
            },
        ))
        .write(&mut na, &body)
        .unwrap();
    e.handle_frame(Instant::from_millis(2_100), &na, &OffloadMeta::plain());
    run(&mut e, t, Instant::from_millis(5_000));
    assert_eq!(e.config().ipv6, None);
    assert_eq!(e.slaac_state().addrs[0].state, AddrState::Duplicate);
    assert_eq!(e.slaac_state().duplicates, 1);
}

#[test]
fn link_local_answers_solicitations() {
    let mut e = slaac_engine();
    run(&mut e, Instant::ZERO, Instant::from_millis(1_500));
    let mut ns = Vec::new();
    let mut body = LINK_LOCAL.octets().to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&SERVER_MAC);
    PacketBuilder::ethernet2(SERVER_MAC, MAC)
        .ipv6(ROUTER_LL.octets(), LINK_LOCAL.octets(), 255)
        .icmpv6(Icmpv6Type::NeighborSolicitation)
        .write(&mut ns, &body)
        .unwrap();
    let t = Instant::from_millis(2_000);
    e.handle_frame(t, &ns, &OffloadMeta::plain());
    let out = icmpv6(&sent(&mut e, t));
    assert_eq!(out, [(136, LINK_LOCAL, ROUTER_LL, None)]);
}
