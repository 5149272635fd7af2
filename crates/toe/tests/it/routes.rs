//! The routing table (`Config::routes`): what the engine puts on the wire for
//! on-link and off-link destinations, through one gateway or another by
//! longest prefix, blackhole and unreachable routes, no route at all, and
//! routes changed under an open connection. The wire is read as a router
//! would: which address the engine resolves (ARP's target) and which Ethernet
//! address its datagrams carry.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{
    Config, ConfigError, ConnectError, NextHop, Route, RouteError, RouteKind, UdpSendError,
    Unroutable,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::TcpHeader;
use linerate_wire::tcp::Flags;
use linerate_wire::{arp, ethernet, ipv4};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const GW1: [u8; 4] = [10, 0, 0, 254];
const GW1_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfe];
const GW2: [u8; 4] = [10, 0, 0, 253];
const GW2_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0xfd];
/// A host beyond the gateways.
const FAR: [u8; 4] = [192, 0, 2, 7];

fn ip(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

fn far(port: u16) -> SocketAddr {
    SocketAddr::new(ip(FAR), port)
}

/// Host 10.0.0.1/24 with its default route through GW1, quiet at start.
fn routed(tune: impl FnOnce(Config) -> Config) -> Raw {
    let mut cfg = linerate_toe::sim::Sim::host_config(1).with_gateway(ip(GW1));
    cfg.announcements = 0;
    let cfg = tune(cfg);
    cfg.validate().unwrap();
    Raw::new(cfg)
}

/// What a frame of the engine's is: an ARP request for an address, or an IPv4
/// datagram to an Ethernet address and an IP address.
#[derive(Debug, PartialEq)]
enum Out {
    ArpFor([u8; 4]),
    Ip { mac: [u8; 6], dst: [u8; 4] },
}

fn classify(frames: &[Vec<u8>]) -> Vec<Out> {
    frames
        .iter()
        .map(|f| {
            let eth = ethernet::Packet::new_checked(&f[..]).unwrap();
            match eth.ethertype() {
                0x0806 => {
                    let a = arp::Packet::new_checked(eth.payload()).unwrap();
                    assert_eq!(a.oper(), arp::operation::REQUEST);
                    Out::ArpFor(a.tpa())
                }
                0x0800 => {
                    let p = ipv4::Packet::new_checked(eth.payload()).unwrap();
                    Out::Ip {
                        mac: eth.dst_addr(),
                        dst: p.dst_addr(),
                    }
                }
                t => panic!("ethertype {t:#06x}"),
            }
        })
        .collect()
}

fn arp_reply(from: [u8; 4], mac: [u8; 6]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&ME_MAC);
    f[6..12].copy_from_slice(&mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_reply(&mut f[14..], mac, from, ME_MAC, [10, 0, 0, 1]).unwrap();
    f
}

#[test]
fn off_link_destinations_go_to_the_gateway_and_on_link_ones_straight() {
    let mut r = routed(|c| c);
    r.e.tcp_connect(r.now, far(80)).unwrap();
    // The gateway is resolved, not the far host.
    assert_eq!(classify(&r.frames()), [Out::ArpFor(GW1)]);
    r.input(&arp_reply(GW1, GW1_MAC));
    assert_eq!(
        classify(&r.frames()),
        [Out::Ip {
            mac: GW1_MAC,
            dst: FAR
        }]
    );
    // A neighbour on the prefix is resolved itself.
    r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    assert_eq!(classify(&r.frames()), [Out::ArpFor([10, 0, 0, 2])]);
    assert_eq!(r.e.route_lookup(ip(FAR)), NextHop::Neighbor(ip(GW1)));
    assert_eq!(
        r.e.route_lookup(ip([10, 0, 0, 9])),
        NextHop::Neighbor(ip([10, 0, 0, 9]))
    );
}

#[test]
fn the_longest_prefix_picks_the_gateway() {
    let mut r = routed(|c| {
        c.with_route(Route::new(ip([192, 0, 2, 0]), 24, RouteKind::Via(ip(GW2))))
            .with_route(Route::new(ip([192, 0, 2, 0]), 24, RouteKind::Via(ip(GW1))).with_metric(10))
    });
    r.input(&arp_reply(GW1, GW1_MAC));
    r.input(&arp_reply(GW2, GW2_MAC));
    r.frames();
    let u =
        r.e.udp_bind(SocketAddr::new(ip([10, 0, 0, 1]), 5000))
            .unwrap();
    r.e.udp_send_to(u, b"to the /24", far(53)).unwrap();
    r.e.udp_send_to(
        u,
        b"to the default",
        SocketAddr::new(ip([198, 51, 100, 1]), 53),
    )
    .unwrap();
    assert_eq!(
        classify(&r.frames()),
        [
            Out::Ip {
                mac: GW2_MAC,
                dst: FAR
            },
            Out::Ip {
                mac: GW1_MAC,
                dst: [198, 51, 100, 1]
            },
        ]
    );
}

#[test]
fn blackhole_unreachable_and_missing_routes_are_refused_as_linux_refuses_them() {
    let mut r = routed(|c| {
        c.with_route(Route::new(ip([203, 0, 113, 0]), 24, RouteKind::Blackhole))
            .with_route(Route::new(ip([198, 18, 0, 0]), 15, RouteKind::Unreachable))
    });
    let to = |a: [u8; 4]| SocketAddr::new(ip(a), 80);
    let e = r.e.tcp_connect(r.now, to([203, 0, 113, 9])).unwrap_err();
    assert_eq!(e, ConnectError::Unroutable(Unroutable::Blackhole));
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    let e = r.e.tcp_connect(r.now, to([198, 19, 1, 1])).unwrap_err();
    assert_eq!(e, ConnectError::Unroutable(Unroutable::Unreachable));
    assert_eq!(e.kind(), ErrorKind::HostUnreachable);
    let u =
        r.e.udp_bind(SocketAddr::new(ip([10, 0, 0, 1]), 5000))
            .unwrap();
    let e = r.e.udp_send_to(u, b"x", to([203, 0, 113, 9])).unwrap_err();
    assert_eq!(e, UdpSendError::Unroutable(Unroutable::Blackhole));
    // Nothing went out for them.
    assert!(r.frames().is_empty());

    // Without a default route, off-link is unreachable; on-link still works.
    let mut cfg = linerate_toe::sim::Sim::host_config(1);
    cfg.announcements = 0;
    cfg.routes.clear();
    let mut r = Raw::new(cfg);
    let e = r.e.tcp_connect(r.now, far(80)).unwrap_err();
    assert_eq!(e, ConnectError::Unroutable(Unroutable::NoRoute));
    assert_eq!(e.kind(), ErrorKind::NetworkUnreachable);
    r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    assert_eq!(classify(&r.frames()), [Out::ArpFor([10, 0, 0, 2])]);
}

#[test]
fn a_connection_follows_the_table_as_it_changes() {
    let mut r = routed(|c| c);
    r.input(&arp_reply(GW1, GW1_MAC));
    r.input(&arp_reply(GW2, GW2_MAC));
    r.frames();
    let c = r.e.tcp_connect(r.now, far(80)).unwrap();
    let syn = r.segments().remove(0);
    // The far host answers through the gateway.
    let mut h = TcpHeader::new(80, 0, 7000, 60_000);
    h.syn = true;
    h.ack = true;
    h.acknowledgment_number = syn.seq.wrapping_add(1);
    let (local, _) = r.e.tcp_addrs(c).unwrap();
    h.destination_port = local.port();
    let synack = FrameBuilder::new(Ip::v4(FAR, [10, 0, 0, 1]), L4::Tcp(h))
        .macs(GW1_MAC, ME_MAC)
        .build(&[]);
    r.input(&synack);
    r.frames(); // the ACK
    assert_eq!(
        r.e.tcp_info(c).unwrap().state,
        linerate_toe::TcpState::Established
    );

    // A more specific route appears: the next segment takes it.
    r.e.add_route(Route::new(ip([192, 0, 2, 0]), 24, RouteKind::Via(ip(GW2))))
        .unwrap();
    r.e.tcp_send(c, b"hello").unwrap();
    assert_eq!(
        classify(&r.frames()),
        [Out::Ip {
            mac: GW2_MAC,
            dst: FAR
        }]
    );
    // Then it is replaced by a blackhole: segments are dropped and counted,
    // and come back through the default route once the blackhole goes.
    assert!(r.e.remove_route(ip([192, 0, 2, 0]), 24, 0).is_some());
    r.e.add_route(Route::new(ip([192, 0, 2, 0]), 24, RouteKind::Blackhole))
        .unwrap();
    r.now += Duration::from_secs(2);
    r.e.handle_timeout(r.now);
    assert!(r.frames().is_empty(), "the retransmission was dropped");
    assert!(r.e.counters().route_blackhole_drops >= 1);
    assert!(r.e.remove_route(ip([192, 0, 2, 0]), 24, 0).is_some());
    r.now += Duration::from_secs(4);
    r.e.handle_timeout(r.now);
    let out = r.frames();
    assert!(!out.is_empty());
    assert!(
        classify(&out).iter().all(|o| *o
            == Out::Ip {
                mac: GW1_MAC,
                dst: FAR
            }),
        "{:?}",
        classify(&out)
    );
    let resent = out
        .iter()
        .filter_map(|f| parse_tcp(f, r.now))
        .next()
        .unwrap();
    assert_eq!(resent.payload, b"hello");
    assert!(resent.flags.contains(Flags::ACK));
}

#[test]
fn bad_routes_fail_validation_with_the_route_named() {
    // A gateway off every on-link prefix could never be resolved.
    let cfg = linerate_toe::sim::Sim::host_config(1).with_gateway(ip([172, 16, 0, 1]));
    match cfg.validate() {
        Err(ConfigError::Route(RouteError::GatewayNotOnLink { route })) => {
            assert_eq!(route.kind, RouteKind::Via(ip([172, 16, 0, 1])));
        }
        other => panic!("{other:?}"),
    }
    let msg = cfg.validate().unwrap_err().to_string();
    assert!(msg.contains("172.16.0.1"), "{msg}");
    // An on-link route for it makes it good.
    let cfg = cfg.with_route(Route::new(ip([172, 16, 0, 0]), 30, RouteKind::OnLink));
    cfg.validate().unwrap();
    let mut r = Raw::new(cfg);
    assert_eq!(
        r.e.route_lookup(ip(FAR)),
        NextHop::Neighbor(ip([172, 16, 0, 1]))
    );
    // At run time the same rules hold.
    let bad = Route::new(ip([8, 8, 8, 0]), 24, RouteKind::Via(ip([9, 9, 9, 9])));
    assert_eq!(
        r.e.add_route(bad),
        Err(RouteError::GatewayNotOnLink { route: bad })
    );
    let dup = Route::new(ip([172, 16, 0, 0]), 30, RouteKind::OnLink);
    assert_eq!(r.e.add_route(dup), Err(RouteError::Exists { route: dup }));
    // The interface's own prefix is in the table.
    assert!(r.e.routes().iter().any(|r| r.prefix_len == 24
        && r.kind == RouteKind::OnLink
        && r.contains(ip([10, 0, 0, 5]))));
    r.frames();
}
