//! UDP sockets: datagrams both ways over IPv4 and IPv6, checksums and USO frames
//! as etherparse reads them, GRO super-datagrams split back, bounded queues, ICMP
//! port unreachable and its rate limit, errors; arbitrary input never panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::{ME_MAC, PEER_MAC, Raw};
use common::udp::*;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{
    InvalidHandle, MAX_UDP_SEGMENTS, UdpBindError, UdpHandle, UdpRecvError, UdpSendError,
};
use linerate_wire::{arp, ethernet};
use proptest::prelude::*;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

fn server_addr(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new("fd00::2".parse().unwrap(), port)
    } else {
        SocketAddr::new("10.0.0.2".parse().unwrap(), port)
    }
}

fn unspec(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new("::".parse().unwrap(), port)
    } else {
        SocketAddr::new("0.0.0.0".parse().unwrap(), port)
    }
}

/// Runs the simulation until engine `e` has a datagram on `h`, then reads it.
fn recv(sim: &mut Sim, e: usize, h: UdpHandle) -> (Vec<u8>, SocketAddr) {
    let limit = sim.now + Duration::from_secs(5);
    let mut got = None;
    let ok = sim.run_until(limit, |sim| {
        got = sim.engines[e]
            .udp_recv_with(h, |d, from| (d.to_vec(), from))
            .ok();
        got.is_some()
    });
    assert!(ok, "no datagram arrived");
    got.unwrap()
}

#[test]
fn datagrams_both_ways_both_families_offloads_on_and_off() {
    for offloads in [false, true] {
        for v6 in [false, true] {
            let mut sim = Sim::two_hosts(offloads, 3, LinkConfig::default());
            let server = sim.engines[1].udp_bind(unspec(v6, 7000)).unwrap();
            let client = sim.engines[0].udp_bind(unspec(v6, 0)).unwrap();
            let cport = sim.engines[0].udp_info(client).unwrap().local.port();
            assert!(cport >= 49_152, "ephemeral port {cport}");
            let max = sim.engines[0].udp_max_payload(sim.now, server_addr(v6, 1).ip());
            assert_eq!(max, if v6 { 1452 } else { 1472 });
            let sizes = [0usize, 1, 100, max];
            for (i, &n) in sizes.iter().enumerate() {
                let data: Vec<u8> = (0..n).map(|j| (i * 31 + j) as u8).collect();
                assert_eq!(
                    sim.engines[0].udp_send_to(client, &data, server_addr(v6, 7000)),
                    Ok(n)
                );
                let (got, from) = recv(&mut sim, 1, server);
                assert_eq!(got, data, "offloads {offloads} v6 {v6} size {n}");
                let client_ip = if v6 { "fd00::1" } else { "10.0.0.1" };
                assert_eq!(from, SocketAddr::new(client_ip.parse().unwrap(), cport));
                // And back, to the address recv_from reported.
                let echo: Vec<u8> = data.iter().rev().copied().collect();
                sim.engines[1].udp_send_to(server, &echo, from).unwrap();
                let (back, from2) = recv(&mut sim, 0, client);
                assert_eq!(back, echo);
                assert_eq!(from2, server_addr(v6, 7000));
            }
            let c = sim.engines[1].counters();
            assert_eq!(c.udp_in_datagrams, sizes.len() as u64);
            assert_eq!(c.udp_out_datagrams, sizes.len() as u64);
            assert_eq!((c.udp_in_errors, c.udp_no_ports), (0, 0));
        }
    }
}

#[test]
fn frames_carry_valid_checksums_complete_or_partial() {
    for offloads in [false, true] {
        for v6 in [false, true] {
            let mut r = dual_host(|c| c.offloads = offloads);
            let h = r.e.udp_bind(unspec(v6, 4000)).unwrap();
            let data: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
            r.e.udp_send_to(h, &data, peer(v6, 53)).unwrap();
            let frames = transmit(&mut r);
            assert_eq!(frames.len(), 1);
            let (f, m) = &frames[0];
            assert_eq!(m.gso, None);
            let l4 = 14 + if v6 { 40 } else { 20 };
            if offloads {
                assert_eq!(
                    m.csum,
                    Checksum::Partial {
                        start: l4 as u16,
                        offset: 6
                    }
                );
            } else {
                assert_eq!(m.csum, Checksum::None);
                // Complete as handed over: etherparse checks it below.
                let seen = parse_udp(f).unwrap();
                assert!(!seen.no_checksum);
            }
            let wire = on_wire(&frames);
            let seen = parse_udp(&wire[0]).unwrap();
            assert_eq!(seen.payload, data);
            assert_eq!(seen.dst, peer(v6, 53));
            let me: IpAddr = if v6 { ME6.into() } else { ME4.into() };
            assert_eq!(seen.src, SocketAddr::new(me, 4000));
            assert_eq!(&f[..6], &PEER_MAC);
            assert_eq!(&f[6..12], &ME_MAC);
        }
    }
}

#[test]
fn segmented_send_is_one_uso_super_datagram_with_offloads_else_many() {
    for v6 in [false, true] {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        // Offloads on: one frame, a USO request the NIC layer cuts.
        let mut r = dual_host(|c| c.offloads = true);
        let h = r.e.udp_bind(unspec(v6, 4000)).unwrap();
        assert_eq!(
            r.e.udp_send_to_segmented(h, &data, peer(v6, 9), 1200),
            Ok(10_000)
        );
        let frames = transmit(&mut r);
        assert_eq!(frames.len(), 1);
        let mut want = Gso::new(GsoType::UdpL4, 1200);
        want.segs = 9;
        assert_eq!(frames[0].1.gso, Some(want));
        assert!(matches!(
            frames[0].1.csum,
            Checksum::Partial { offset: 6, .. }
        ));
        let wire = on_wire(&frames);
        let uso: Vec<UdpSeen> = wire.iter().map(|f| parse_udp(f).unwrap()).collect();
        // Offloads off: the datagrams themselves, complete.
        let mut r = dual_host(|c| c.offloads = false);
        let h = r.e.udp_bind(unspec(v6, 4000)).unwrap();
        r.e.udp_send_to_segmented(h, &data, peer(v6, 9), 1200)
            .unwrap();
        let frames = transmit(&mut r);
        assert_eq!(frames.len(), 9);
        assert!(frames.iter().all(|(_, m)| *m == OffloadMeta::plain()));
        let plain: Vec<UdpSeen> = frames.iter().map(|(f, _)| parse_udp(f).unwrap()).collect();
        for seen in [&uso, &plain] {
            let lens: Vec<usize> = seen.iter().map(|s| s.payload.len()).collect();
            assert_eq!(lens, [1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 400]);
            let joined: Vec<u8> = seen.iter().flat_map(|s| s.payload.clone()).collect();
            assert_eq!(joined, data);
        }
        assert_eq!(uso, plain, "USO and software segmentation agree");
        assert_eq!(r.e.counters().udp_out_datagrams, 9);
        // A payload that fits one segment is a plain datagram.
        r.e.udp_send_to_segmented(h, &data[..1000], peer(v6, 9), 1200)
            .unwrap();
        assert_eq!(transmit(&mut r).len(), 1);
    }
}

#[test]
fn gro_super_datagram_is_split_back_into_datagrams() {
    // By hand: 3 datagrams of 100 bytes and one of 50, coalesced.
    for v6 in [false, true] {
        let mut r = dual_host(|_| {});
        let h = r.e.udp_bind(unspec(v6, 5000)).unwrap();
        let data: Vec<u8> = (0..350u32).map(|i| i as u8).collect();
        let frame = udp_from_peer(peer(v6, 777), 5000, &data);
        let mut meta = OffloadMeta::plain();
        meta.csum = Checksum::Verified { levels: 1 };
        meta.gso = Some(Gso::new(GsoType::UdpL4, 100));
        r.e.handle_frame(r.now, &frame, &meta);
        let mut got = Vec::new();
        let mut buf = [0u8; 2000];
        while let Ok((n, from)) = r.e.udp_recv_from(h, &mut buf) {
            assert_eq!(from, peer(v6, 777));
            got.push(buf[..n].to_vec());
        }
        let lens: Vec<usize> = got.iter().map(Vec::len).collect();
        assert_eq!(lens, [100, 100, 100, 50]);
        assert_eq!(got.concat(), data);
        assert_eq!(r.e.counters().udp_in_datagrams, 4);
    }
    // Through a GRO link: a USO send arrives whole and is split.
    let link = LinkConfig {
        gro: true,
        ..LinkConfig::default()
    };
    let mut sim = Sim::two_hosts(true, 5, link);
    let server = sim.engines[1].udp_bind(unspec(false, 6000)).unwrap();
    let client = sim.engines[0].udp_bind(unspec(false, 0)).unwrap();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
    sim.engines[0]
        .udp_send_to_segmented(client, &data, server_addr(false, 6000), 1400)
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 15 {
        got.push(recv(&mut sim, 1, server).0);
    }
    assert!(got[..14].iter().all(|d| d.len() == 1400));
    assert_eq!(got[14].len(), 20_000 - 14 * 1400);
    assert_eq!(got.concat(), data);
    // One IP datagram carried them all (besides the other host's unsolicited
    // neighbour advertisement).
    let na = sim.engines[0].counters().ndp_unsolicited_adverts_out;
    assert_eq!(sim.engines[1].counters().ip_in_receives, 1 + na);
    assert_eq!(sim.link.stats().segmented, 0);
}

#[test]
fn closed_port_answers_port_unreachable_quoting_the_datagram() {
    for v6 in [false, true] {
        let mut r = dual_host(|_| {});
        let frame = udp_from_peer(peer(v6, 3333), 9999, b"anyone there?");
        r.input(&frame);
        let out = transmit(&mut r);
        assert_eq!(out.len(), 1);
        let icmp = parse_icmp(&out[0].0).unwrap();
        assert_eq!(icmp.kind, if v6 { (1, 4) } else { (3, 3) });
        let me: IpAddr = if v6 { ME6.into() } else { ME4.into() };
        assert_eq!((icmp.src, icmp.dst), (me, peer(v6, 1).ip()));
        // The whole invoking datagram fits: quoted byte for byte.
        assert_eq!(icmp.quote, ip_of(&frame));
        assert_eq!(&out[0].0[..6], &PEER_MAC);
        let c = r.e.counters();
        assert_eq!((c.udp_no_ports, c.icmp_out_dest_unreachs), (1, 1));
    }
    // A long datagram is quoted up to 576 bytes of ICMP datagram (IPv4).
    let mut r = dual_host(|_| {});
    r.input(&udp_from_peer(peer(false, 1), 9, &[7u8; 1400]));
    let out = transmit(&mut r);
    assert_eq!(ip_of(&out[0].0).len(), 576);
    // Broadcast: counted, never answered (RFC 1122 section 3.2.2).
    let mut r = dual_host(|_| {});
    let b = linerate_wire::build::FrameBuilder::new(
        linerate_wire::build::Ip::v4(PEER4, [10, 0, 0, 255]),
        linerate_wire::build::L4::udp(1, 9),
    )
    .macs(PEER_MAC, ethernet::BROADCAST)
    .build(b"x");
    r.input(&b);
    assert!(transmit(&mut r).is_empty());
    assert_eq!(r.e.counters().udp_no_ports, 1);
    // A socket bound to the unspecified address takes the broadcast.
    let h = r.e.udp_bind(unspec(false, 9)).unwrap();
    r.input(&b);
    assert_eq!(r.e.udp_recv_with(h, |d, _| d.to_vec()), Ok(b"x".to_vec()));
    // A socket bound to our unicast address does not.
    r.e.udp_close(h).unwrap();
    let h = r.e.udp_bind(SocketAddr::new(ME4.into(), 9)).unwrap();
    r.input(&b);
    assert_eq!(
        r.e.udp_recv_from(h, &mut [0; 8]),
        Err(UdpRecvError::WouldBlock)
    );
}

#[test]
fn port_unreachable_is_rate_limited_by_a_token_bucket() {
    let mut r = dual_host(|c| {
        c.icmp_error_rate = 10;
        c.icmp_error_burst = 5;
    });
    let flood = |r: &mut Raw| {
        for i in 0..100u16 {
            r.input(&udp_from_peer(peer(i % 2 == 1, 1000 + i), 9, b"x"));
        }
        transmit(r)
            .iter()
            .filter(|(f, _)| parse_icmp(f).is_some())
            .count()
    };
    assert_eq!(flood(&mut r), 5, "the burst");
    assert_eq!(r.e.counters().icmp_out_rate_limited, 95);
    r.now += Duration::from_millis(300);
    assert_eq!(flood(&mut r), 3, "10 per second for 300 ms");
    r.now += Duration::from_secs(10);
    assert_eq!(flood(&mut r), 5, "never more than the burst");
    let c = r.e.counters();
    assert_eq!(c.icmp_out_dest_unreachs, 13);
    assert_eq!(c.icmp_out_rate_limited, 95 + 97 + 95);
    assert_eq!(c.udp_no_ports, 300);
}

#[test]
fn receive_queue_is_bounded_and_drops_are_counted() {
    let mut r = dual_host(|c| {
        c.udp.recv_datagrams = 4;
        c.udp.recv_buffer = 1000;
    });
    let h = r.e.udp_bind(unspec(false, 9)).unwrap();
    assert!(!r.e.udp_readiness(h).unwrap().readable);
    for i in 0..10u8 {
        r.input(&udp_from_peer(peer(false, 1), 9, &[i; 100]));
    }
    let info = r.e.udp_info(h).unwrap();
    assert_eq!(
        (info.recv_datagrams, info.recv_bytes, info.drops),
        (4, 400, 6)
    );
    assert!(r.e.udp_readiness(h).unwrap().readable);
    let c = r.e.counters();
    assert_eq!(
        (c.udp_rcvbuf_errors, c.udp_in_errors, c.udp_in_datagrams),
        (6, 6, 4)
    );
    // The first four are kept, in order.
    for i in 0..4u8 {
        assert_eq!(r.e.udp_recv_with(h, |d, _| d[0]), Ok(i));
    }
    assert_eq!(
        r.e.udp_recv_with(h, |d, _| d.len()),
        Err(UdpRecvError::WouldBlock)
    );
    assert!(!r.e.udp_readiness(h).unwrap().readable);
    // Bytes bound too: 600 + 500 > 1000.
    r.input(&udp_from_peer(peer(false, 1), 9, &[1; 600]));
    r.input(&udp_from_peer(peer(false, 1), 9, &[2; 500]));
    assert_eq!(r.e.udp_info(h).unwrap().recv_bytes, 600);
    // A short buffer takes the head of the datagram; the rest is gone.
    let mut small = [0u8; 10];
    assert_eq!(r.e.udp_recv_from(h, &mut small), Ok((10, peer(false, 1))));
    assert_eq!(r.e.udp_info(h).unwrap().recv_datagrams, 0);
}

#[test]
fn bad_checksums_are_dropped_zero_means_none_only_over_ipv4() {
    let mut r = dual_host(|_| {});
    let h4 = r.e.udp_bind(unspec(false, 9)).unwrap();
    let h6 = r.e.udp_bind(unspec(true, 9)).unwrap();
    assert_ne!(h4, h6);
    for v6 in [false, true] {
        let mut f = udp_from_peer(peer(v6, 1), 9, b"hello");
        let last = f.len() - 1;
        f[last] ^= 0x20;
        r.input(&f);
    }
    let c = r.e.counters();
    assert_eq!(
        (c.udp_in_csum_errors, c.udp_in_errors, c.udp_in_datagrams),
        (2, 2, 0)
    );
    // Zero checksum: "none" over IPv4, refused over IPv6.
    for v6 in [false, true] {
        let mut f = udp_from_peer(peer(v6, 1), 9, b"hello");
        let at = 14 + if v6 { 40 } else { 20 } + 6;
        f[at] = 0;
        f[at + 1] = 0;
        r.input(&f);
    }
    assert_eq!(
        r.e.udp_recv_with(h4, |d, _| d.to_vec()),
        Ok(b"hello".to_vec())
    );
    assert_eq!(
        r.e.udp_recv_with(h6, |d, _| d.len()),
        Err(UdpRecvError::WouldBlock)
    );
    assert_eq!(r.e.counters().udp_in_csum_errors, 3);
    // A truncated header or a length beyond the datagram: dropped, counted.
    let mut f = udp_from_peer(peer(false, 1), 9, b"hello");
    f[14 + 20 + 5] = 200;
    r.input(&f);
    assert_eq!(r.e.counters().udp_in_errors, 4);
}

#[test]
fn send_and_bind_errors() {
    let mut r = dual_host(|c| c.udp.send_buffer = 3000);
    let h = r.e.udp_bind(unspec(false, 7)).unwrap();
    assert_eq!(r.e.udp_bind(unspec(false, 7)), Err(UdpBindError::AddrInUse));
    let h6 = r.e.udp_bind(unspec(true, 7)).unwrap();
    assert_eq!(
        r.e.udp_bind(SocketAddr::new("10.9.9.9".parse().unwrap(), 8)),
        Err(UdpBindError::NoAddress)
    );
    let to = peer(false, 53);
    assert_eq!(
        r.e.udp_send_to(h, &[0; 1473], to),
        Err(UdpSendError::MessageTooLong)
    );
    assert_eq!(r.e.udp_send_to(h, &[0; 1472], to), Ok(1472));
    assert_eq!(
        r.e.udp_send_to(h6, &[0; 1453], peer(true, 53)),
        Err(UdpSendError::MessageTooLong)
    );
    assert_eq!(
        r.e.udp_send_to(h, b"x", peer(true, 53)),
        Err(UdpSendError::InvalidDestination)
    );
    assert_eq!(
        r.e.udp_send_to(h, b"x", peer(false, 0)),
        Err(UdpSendError::InvalidDestination)
    );
    assert_eq!(
        r.e.udp_send_to_segmented(h, &[0; 100], to, 0),
        Err(UdpSendError::InvalidSegmentSize)
    );
    assert_eq!(
        r.e.udp_send_to_segmented(h, &[0; 3000], to, 1473),
        Err(UdpSendError::MessageTooLong)
    );
    let too_many = vec![0u8; 100 * MAX_UDP_SEGMENTS + 1];
    assert_eq!(
        r.e.udp_send_to_segmented(h, &too_many, to, 100),
        Err(UdpSendError::MessageTooLong)
    );
    // The send queue: 1472 queued, 1000 more fit, 1000 more do not.
    assert_eq!(r.e.udp_send_to(h, &[0; 1000], to), Ok(1000));
    assert!(r.e.udp_readiness(h).unwrap().writable);
    assert_eq!(
        r.e.udp_send_to(h, &[0; 1000], to),
        Err(UdpSendError::WouldBlock)
    );
    assert_eq!(r.e.counters().udp_sndbuf_errors, 1);
    assert_eq!(r.e.udp_info(h).unwrap().send_bytes, 2472);
    assert_eq!(transmit(&mut r).len(), 2);
    assert_eq!(r.e.udp_info(h).unwrap().send_bytes, 0);
    // Closed: the handle is dead, the port free again.
    r.e.udp_close(h).unwrap();
    assert_eq!(r.e.udp_info(h), Err(InvalidHandle));
    assert_eq!(
        r.e.udp_send_to(h, b"x", to),
        Err(UdpSendError::InvalidHandle)
    );
    let again = r.e.udp_bind(unspec(false, 7)).unwrap();
    assert_ne!(again, h);
    assert_eq!(r.e.udp_close(h), Err(InvalidHandle));
}

#[test]
fn a_send_to_an_unresolved_neighbour_waits_for_arp() {
    let mut cfg = Sim::host_config(1);
    cfg.announcements = 0; // every frame counted
    let mut r = Raw::new(cfg);
    let h = r.e.udp_bind(unspec(false, 7)).unwrap();
    r.e.udp_send_to(h, b"after arp", peer(false, 53)).unwrap();
    let out = transmit(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(&out[0].0[12..14], &[0x08, 0x06], "an ARP request");
    let mut reply = vec![0u8; 14 + arp::PACKET_LEN];
    reply[..6].copy_from_slice(&ME_MAC);
    reply[6..12].copy_from_slice(&PEER_MAC);
    reply[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_reply(&mut reply[14..], PEER_MAC, PEER4, ME_MAC, ME4).unwrap();
    r.input(&reply);
    let out = transmit(&mut r);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].1.csum,
        Checksum::Partial {
            start: 34,
            offset: 6
        }
    );
    assert_eq!(parse_udp(&on_wire(&out)[0]).unwrap().payload, b"after arp");
    assert_eq!(&out[0].0[..6], &PEER_MAC);
}

proptest! {
    /// Any bytes after a valid IPv4 or IPv6 header with protocol UDP, with any
    /// GRO record, are counted and never panic; whatever is delivered is a
    /// prefix-free split of the payload.
    #[test]
    fn arbitrary_udp_never_panics(
        body in proptest::collection::vec(any::<u8>(), 0..600),
        v6 in any::<bool>(),
        gso in proptest::option::of(0u16..700),
        verified in any::<bool>(),
    ) {
        let mut r = dual_host(|_| {});
        let h = r.e.udp_bind(unspec(v6, u16::from_be_bytes([body.get(2).copied().unwrap_or(0), body.get(3).copied().unwrap_or(0)]).max(1))).ok();
        let ip = if v6 {
            linerate_wire::build::Ip::v6(PEER6.octets(), ME6.octets())
        } else {
            linerate_wire::build::Ip::v4(PEER4, ME4)
        };
        let f = linerate_wire::build::FrameBuilder::new(ip, linerate_wire::build::L4::Raw(17))
            .macs(PEER_MAC, ME_MAC)
            .build(&body);
        let mut meta = OffloadMeta::plain();
        if verified {
            meta.csum = Checksum::Verified { levels: 1 };
        }
        meta.gso = gso.map(|s| Gso::new(GsoType::UdpL4, s));
        r.input(&f);
        r.e.handle_frame(r.now, &f, &meta);
        let _ = transmit(&mut r);
        if let Some(h) = h {
            let mut total = 0;
            while let Ok(n) = r.e.udp_recv_with(h, |d, _| d.len()) {
                total += n;
            }
            prop_assert!(total <= 2 * body.len());
        }
    }
}
