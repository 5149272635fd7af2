//! An engine with two interfaces (`Config::interfaces`), as a host with two
//! uplinks: each prefix's traffic leaves by the interface its route names,
//! with that interface's MAC and address; neighbours are resolved out of the
//! right interface; ARP is answered per arrival interface; and the
//! configurations that cannot work are refused with their reason. The wire is
//! read as each uplink's router would read it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_offload::OffloadMeta;
use linerate_toe::{
    Config, ConfigError, Engine, Instant, Interface, NextHop, Route, RouteError, RouteKind,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::TcpHeader;
use linerate_wire::{arp, ethernet, ipv4, tcp};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const ME0: [u8; 6] = [2, 0, 0, 0, 0x81, 2];
const ME1: [u8; 6] = [2, 0, 0, 0, 0x82, 2];
const R1_MAC: [u8; 6] = [2, 0, 0, 0, 0x81, 1];
const R2_MAC: [u8; 6] = [2, 0, 0, 0, 0x82, 1];
const A0: [u8; 4] = [10, 81, 0, 2];
const A1: [u8; 4] = [10, 82, 0, 2];
const R1: [u8; 4] = [10, 81, 0, 1];
const R2: [u8; 4] = [10, 82, 0, 1];
/// Network B, behind R1 (by the default route).
const B: [u8; 4] = [10, 91, 0, 5];
/// Network C, behind R2.
const C: [u8; 4] = [10, 92, 0, 5];
/// Some other network: the default route's.
const D: [u8; 4] = [198, 51, 100, 9];

fn ip(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

/// Interface 0 on 10.81.0.0/24 with the default route via R1; interface 1 on
/// 10.82.0.0/24 with C's /24 via R2 on it.
fn two_uplinks() -> Config {
    let mut cfg = Config::new(ME0)
        .with_ipv4(Ipv4Addr::from(A0), 24)
        .with_interface(Interface::new(ME1).with_ipv4(Ipv4Addr::from(A1), 24))
        .with_gateway(ip(R1))
        .with_route(Route::new(ip([10, 92, 0, 0]), 24, RouteKind::Via(ip(R2))).with_dev(1));
    cfg.announcements = 0;
    cfg
}

/// What a frame is, as the router on its link sees it.
#[derive(Debug, PartialEq)]
enum Seen {
    /// An ARP packet: operation, sender MAC and address, target address.
    Arp {
        src_mac: [u8; 6],
        oper: u16,
        sha: [u8; 6],
        spa: [u8; 4],
        tpa: [u8; 4],
    },
    /// A TCP segment: Ethernet addresses, IP addresses, flags.
    Tcp {
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        src: [u8; 4],
        dst: [u8; 4],
        syn: bool,
    },
    Other,
}

fn seen(f: &[u8]) -> Seen {
    let eth = ethernet::Packet::new_checked(f).unwrap();
    match eth.ethertype() {
        0x0806 => {
            let a = arp::Packet::new_checked(eth.payload()).unwrap();
            Seen::Arp {
                src_mac: eth.src_addr(),
                oper: a.oper(),
                sha: a.sha(),
                spa: a.spa(),
                tpa: a.tpa(),
            }
        }
        0x0800 => {
            let p = ipv4::Packet::new_checked(eth.payload()).unwrap();
            if p.protocol() != 6 {
                return Seen::Other;
            }
            let t = tcp::Packet::new_checked(p.payload()).unwrap();
            Seen::Tcp {
                src_mac: eth.src_addr(),
                dst_mac: eth.dst_addr(),
                src: p.src_addr(),
                dst: p.dst_addr(),
                syn: t.flags().contains(tcp::Flags::SYN),
            }
        }
        _ => Seen::Other,
    }
}

fn frames(e: &mut Engine, now: Instant) -> Vec<Seen> {
    let mut out = Vec::new();
    e.poll_transmit(now, &mut |f, _| out.push(seen(f)));
    out
}

fn arp_request(from_mac: [u8; 6], from: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&ethernet::BROADCAST);
    f[6..12].copy_from_slice(&from_mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_request(&mut f[14..], from_mac, from, target).unwrap();
    f
}

fn arp_reply(to_mac: [u8; 6], to: [u8; 4], from_mac: [u8; 6], from: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&to_mac);
    f[6..12].copy_from_slice(&from_mac);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_reply(&mut f[14..], from_mac, from, to_mac, to).unwrap();
    f
}

fn resolve_request(src_mac: [u8; 6], spa: [u8; 4], tpa: [u8; 4]) -> Seen {
    Seen::Arp {
        src_mac,
        oper: arp::operation::REQUEST,
        sha: src_mac,
        spa,
        tpa,
    }
}

fn syn(src_mac: [u8; 6], dst_mac: [u8; 6], src: [u8; 4], dst: [u8; 4]) -> Seen {
    Seen::Tcp {
        src_mac,
        dst_mac,
        src,
        dst,
        syn: true,
    }
}

#[test]
fn each_prefix_leaves_by_its_uplink_with_that_uplinks_mac_and_address() {
    let now = Instant::ZERO;
    let mut e = Engine::try_new(two_uplinks(), 7).unwrap();
    assert_eq!(e.interface_count(), 2);
    let meta = OffloadMeta::plain();

    // To B: by the default route, R1 resolved out of interface 0.
    e.tcp_connect(now, SocketAddr::new(ip(B), 80)).unwrap();
    assert_eq!(frames(&mut e, now), [resolve_request(ME0, A0, R1)]);
    e.handle_frame_on(0, now, &arp_reply(ME0, A0, R1_MAC, R1), &meta);
    assert_eq!(frames(&mut e, now), [syn(ME0, R1_MAC, A0, B)]);

    // To C: by its route on interface 1, R2 resolved out of it, from A1.
    e.tcp_connect(now, SocketAddr::new(ip(C), 80)).unwrap();
    assert_eq!(frames(&mut e, now), [resolve_request(ME1, A1, R2)]);
    // R2's answer on interface 0 (where R2 is not) is not a frame for us:
    // its destination is interface 1's MAC.
    e.handle_frame_on(0, now, &arp_reply(ME1, A1, R2_MAC, R2), &meta);
    assert_eq!(e.counters().rx_other_host, 1);
    e.handle_frame_on(1, now, &arp_reply(ME1, A1, R2_MAC, R2), &meta);
    assert_eq!(frames(&mut e, now), [syn(ME1, R2_MAC, A1, C)]);

    // A third prefix: the default route's, R1 already known.
    e.tcp_connect(now, SocketAddr::new(ip(D), 443)).unwrap();
    assert_eq!(frames(&mut e, now), [syn(ME0, R1_MAC, A0, D)]);

    // On-link neighbours of each prefix, on their own interface.
    e.tcp_connect(now, SocketAddr::new(ip([10, 82, 0, 77]), 80))
        .unwrap();
    assert_eq!(
        frames(&mut e, now),
        [resolve_request(ME1, A1, [10, 82, 0, 77])]
    );

    let ifc = e.interface_counters(1);
    assert_eq!((ifc.arp_requests_out, ifc.rx_frames), (2, 1));
    assert_eq!(e.interface_counters(0).arp_requests_out, 1);
}

#[test]
fn the_route_table_answers_with_the_output_interface() {
    let e = Engine::try_new(two_uplinks(), 7).unwrap();
    let t = two_uplinks().route_table().unwrap();
    assert_eq!(t.lookup_dev(ip(B)), (NextHop::Neighbor(ip(R1)), 0));
    assert_eq!(t.lookup_dev(ip(C)), (NextHop::Neighbor(ip(R2)), 1));
    assert_eq!(t.lookup_dev(ip(D)), (NextHop::Neighbor(ip(R1)), 0));
    assert_eq!(
        t.lookup_dev(ip([10, 82, 0, 9])),
        (NextHop::Neighbor(ip([10, 82, 0, 9])), 1)
    );
    // Interface 1's prefix is a connected route on it.
    assert!(
        e.routes()
            .iter()
            .any(|r| r.prefix_len == 24 && r.contains(ip(A1)) && r.dev == Some(1))
    );
    // A gateway route without `dev` goes out where its gateway is on the link.
    let cfg = two_uplinks().with_route(Route::new(ip([10, 93, 0, 0]), 16, RouteKind::Via(ip(R2))));
    let t = cfg.route_table().unwrap();
    assert_eq!(
        t.lookup_dev(ip([10, 93, 1, 1])),
        (NextHop::Neighbor(ip(R2)), 1)
    );
}

#[test]
fn udp_from_an_unbound_socket_takes_the_output_interfaces_address() {
    let now = Instant::ZERO;
    let mut e = Engine::try_new(two_uplinks(), 7).unwrap();
    let meta = OffloadMeta::plain();
    e.handle_frame_on(1, now, &arp_request(R2_MAC, R2, A1), &meta);
    e.handle_frame_on(0, now, &arp_request(R1_MAC, R1, A0), &meta);
    let _ = frames(&mut e, now);
    let s = e
        .udp_bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0))
        .unwrap();
    e.udp_send_to(s, b"c", SocketAddr::new(ip(C), 53)).unwrap();
    e.udp_send_to(s, b"b", SocketAddr::new(ip(B), 53)).unwrap();
    let mut got = Vec::new();
    e.poll_transmit(now, &mut |f, _| {
        let eth = ethernet::Packet::new_checked(f).unwrap();
        let p = ipv4::Packet::new_checked(eth.payload()).unwrap();
        got.push((eth.src_addr(), eth.dst_addr(), p.src_addr(), p.dst_addr()));
    });
    assert_eq!(got, [(ME1, R2_MAC, A1, C), (ME0, R1_MAC, A0, B)]);
}

#[test]
fn arp_is_answered_for_the_arrival_interfaces_address_only() {
    let now = Instant::ZERO;
    let mut e = Engine::try_new(two_uplinks(), 7).unwrap();
    let meta = OffloadMeta::plain();
    // R1's link asks for interface 1's address: not ours to answer there.
    e.handle_frame_on(0, now, &arp_request(R1_MAC, R1, A1), &meta);
    assert_eq!(frames(&mut e, now), []);
    // Asked on interface 1, answered from it.
    e.handle_frame_on(1, now, &arp_request(R2_MAC, R2, A1), &meta);
    assert_eq!(
        frames(&mut e, now),
        [Seen::Arp {
            src_mac: ME1,
            oper: arp::operation::REPLY,
            sha: ME1,
            spa: A1,
            tpa: R2,
        }]
    );
    // And interface 0's on interface 0.
    e.handle_frame_on(0, now, &arp_request(R1_MAC, R1, A0), &meta);
    assert_eq!(
        frames(&mut e, now),
        [Seen::Arp {
            src_mac: ME0,
            oper: arp::operation::REPLY,
            sha: ME0,
            spa: A0,
            tpa: R1,
        }]
    );
    assert_eq!(e.interface_counters(1).arp_replies_out, 1);
    // A frame on an interface the engine lacks is dropped.
    e.handle_frame_on(2, now, &arp_request(R2_MAC, R2, A1), &meta);
    assert_eq!(frames(&mut e, now), []);
}

#[test]
fn a_connection_accepted_on_an_uplink_answers_by_it() {
    let now = Instant::ZERO;
    let mut e = Engine::try_new(two_uplinks(), 7).unwrap();
    let meta = OffloadMeta::plain();
    e.handle_frame_on(1, now, &arp_request(R2_MAC, R2, A1), &meta);
    let _ = frames(&mut e, now);
    e.tcp_listen(8080).unwrap();
    let mut h = TcpHeader::new(40000, 8080, 1000, 65535);
    h.syn = true;
    let syn_in = FrameBuilder::new(Ip::v4(C, A1), L4::Tcp(h))
        .macs(R2_MAC, ME1)
        .build(&[]);
    e.handle_frame_on(1, now, &syn_in, &meta);
    let out = frames(&mut e, now);
    assert!(
        matches!(
            out.as_slice(),
            [Seen::Tcp {
                src_mac: ME1,
                dst_mac: R2_MAC,
                src: A1,
                dst: C,
                syn: true
            }]
        ),
        "{out:?}"
    );
}

#[test]
fn bad_interface_configurations_are_refused_with_their_reason() {
    let base = two_uplinks();
    // Two interfaces with one MAC.
    let mut c = base.clone();
    c.interfaces[0].mac = ME0;
    assert_eq!(
        c.validate(),
        Err(ConfigError::DuplicateMac {
            mac: ME0,
            first: 0,
            second: 1
        })
    );
    assert!(Engine::try_new(c.clone(), 1).is_err());
    // An engine built anyway does not panic.
    let mut e = Engine::new(c, 1);
    let _ = frames(&mut e, Instant::ZERO);

    // Overlapping prefixes: 10.82.0.0/24 inside 10.0.0.0/8.
    let mut c = base.clone();
    c.ipv4 = Some(linerate_toe::config::Ipv4Cidr::new(
        Ipv4Addr::new(10, 1, 0, 1),
        8,
    ));
    c.routes.clear();
    let err = c.validate().unwrap_err();
    assert!(
        matches!(
            err,
            ConfigError::OverlappingPrefixes {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("overlap"), "{err}");

    // A route out of an interface the engine does not have.
    let r = Route::new(ip([10, 95, 0, 0]), 16, RouteKind::Via(ip(R2))).with_dev(2);
    let err = base.clone().with_route(r).validate().unwrap_err();
    assert_eq!(
        err,
        ConfigError::Route(RouteError::NoDevice {
            route: r,
            devices: 2
        })
    );
    assert!(err.to_string().contains("dev 2"), "{err}");

    // A gateway that is not on the link of the interface named.
    let r = Route::new(ip([10, 95, 0, 0]), 16, RouteKind::Via(ip(R2))).with_dev(0);
    assert_eq!(
        base.clone().with_route(r).validate(),
        Err(ConfigError::Route(RouteError::GatewayNotOnLink {
            route: r
        }))
    );

    // A further interface breaking a rule of its own, with its index.
    let mut c = base.clone();
    c.interfaces[0].mtu = 500;
    assert_eq!(
        c.validate(),
        Err(ConfigError::Interface {
            index: 1,
            error: Box::new(ConfigError::Mtu {
                value: 500,
                min: 576
            })
        })
    );
    let mut c = base.clone();
    c.interfaces[0].mac = [1, 0, 0, 0, 0, 1];
    assert!(matches!(
        c.validate(),
        Err(ConfigError::Interface { index: 1, .. })
    ));

    // Too many interfaces.
    let mut c = base;
    c.interfaces = (0..16u8)
        .map(|i| Interface::new([2, 1, 0, 0, 0, i]))
        .collect();
    assert_eq!(
        c.validate(),
        Err(ConfigError::Interfaces { count: 17, max: 16 })
    );
}

/// IPv6 on two interfaces: a neighbour solicitation for interface 1's
/// address is answered on interface 1 only, with its MAC; a connection to
/// C's IPv6 prefix resolves R2 out of interface 1 from interface 1's address.
#[test]
fn ipv6_neighbours_are_per_interface_too() {
    use linerate_wire::icmp::{ndp, v6 as icmpv6};
    use linerate_wire::ipv6;
    use std::net::Ipv6Addr;
    let v6 = |s: &str| s.parse::<Ipv6Addr>().unwrap();
    let (me0, me1, r2) = (v6("fd81::2"), v6("fd82::2"), v6("fd82::1"));
    let mut cfg = two_uplinks().with_ipv6(me0, 64);
    cfg.interfaces[0].ipv6 = Some(linerate_toe::config::Ipv6Cidr::new(me1, 64));
    let cfg = cfg.with_route(
        Route::new(IpAddr::V6(v6("fd92::")), 64, RouteKind::Via(IpAddr::V6(r2))).with_dev(1),
    );
    let now = Instant::ZERO;
    let mut e = Engine::try_new(cfg, 7).unwrap();
    let meta = OffloadMeta::plain();
    let ns = |target: Ipv6Addr| {
        let group = ndp::solicited_node_multicast(&target.octets());
        let mut body = vec![0u8; ndp::NEIGHBOR_LEN + ndp::LL_ADDR_OPTION_LEN];
        ndp::emit_neighbor_solicitation(
            &mut body,
            icmpv6::Addrs {
                src: &r2.octets(),
                dst: &group,
            },
            &target.octets(),
            Some(R2_MAC),
        )
        .unwrap();
        let mut ip = Ip::v6(r2.octets(), group);
        if let Ip::V6(h, _) = &mut ip {
            h.hop_limit = 255;
        }
        FrameBuilder::new(ip, L4::Raw(58))
            .macs(R2_MAC, ndp::multicast_mac(&group))
            .build(&body)
    };
    // Asked on interface 0: not that interface's address.
    e.handle_frame_on(0, now, &ns(me1), &meta);
    assert_eq!(frames(&mut e, now), []);
    // Asked on interface 1: answered from it.
    e.handle_frame_on(1, now, &ns(me1), &meta);
    let mut out = Vec::new();
    e.poll_transmit(now, &mut |f, _| out.push(f.to_vec()));
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    assert_eq!(eth.src_addr(), ME1);
    let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(Ipv6Addr::from(ip.src_addr()), me1);
    let na = ndp::Neighbor::new_checked(ip.payload()).unwrap();
    assert_eq!(na.target_addr(), me1.octets());
    assert_eq!(na.target_lladdr(), Some(ME1));

    // A connection to C's IPv6 prefix: R2 is known now (learned from its
    // solicitation), so the SYN goes at once, out of interface 1.
    e.tcp_connect(now, SocketAddr::new(IpAddr::V6(v6("fd92::5")), 80))
        .unwrap();
    let mut out = Vec::new();
    e.poll_transmit(now, &mut |f, _| out.push(f.to_vec()));
    assert_eq!(out.len(), 1);
    let eth = ethernet::Packet::new_checked(&out[0][..]).unwrap();
    assert_eq!((eth.src_addr(), eth.dst_addr()), (ME1, R2_MAC));
    let ip = ipv6::Packet::new_checked(eth.payload()).unwrap();
    assert_eq!(Ipv6Addr::from(ip.src_addr()), me1);
}
