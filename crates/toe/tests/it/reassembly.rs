//! Fragments with `Config::fragments` on: UDP datagrams cut here into IPv4 and
//! IPv6 fragments reach the socket whole whatever the order and duplicates;
//! overlapping fragments drop the datagram; a first fragment left alone draws
//! ICMP time exceeded (code 1) after 30 s (IPv4) or 60 s (IPv6); an IPv6
//! first fragment without its upper-layer header draws parameter problem
//! code 3 (RFC 7112), a bad fragment length code 0; a flood of incomplete
//! datagrams stays within the memory bound while other datagrams get through.
//! On output, datagrams over the MTU leave as fragments another engine
//! reassembles, and are refused where the socket or the config says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::{ME_MAC, PEER_MAC, Raw};
use common::udp::{ME4, ME6, PEER4, PEER6, dual_host, ip_of, parse_icmp, peer, transmit};
use linerate_toe::{Config, Engine, Instant, UdpHandle, UdpRecvError, UdpSendError};
use linerate_wire::etherparse::{IpNumber, Ipv4Header, Ipv6Header, UdpHeader};
use std::time::Duration;

const PORT: u16 = 4000;

fn on(c: &mut Config) {
    c.fragments.enabled = true;
    c.offloads = false;
    c.announcements = 0;
}

fn host() -> (Raw, UdpHandle, UdpHandle) {
    let mut r = dual_host(on);
    let u4 = r.e.udp_bind("0.0.0.0:4000".parse().unwrap()).unwrap();
    let u6 = r.e.udp_bind("[::]:4000".parse().unwrap()).unwrap();
    assert!(r.frames().is_empty());
    (r, u4, u6)
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn eth(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(1514);
    f.extend_from_slice(&ME_MAC);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// The UDP datagram (header and payload, checksum right) from the peer's
/// port 5000 to [`PORT`].
fn udp_bytes(v6: bool, data: &[u8]) -> Vec<u8> {
    let udp = if v6 {
        let ip = Ipv6Header {
            payload_length: (8 + data.len()) as u16,
            next_header: IpNumber::UDP,
            hop_limit: 64,
            source: PEER6.octets(),
            destination: ME6.octets(),
            ..Ipv6Header::default()
        };
        UdpHeader::with_ipv6_checksum(5000, PORT, &ip, data).unwrap()
    } else {
        let ip = Ipv4Header::new((8 + data.len()) as u16, 64, IpNumber::UDP, PEER4, ME4).unwrap();
        UdpHeader::with_ipv4_checksum(5000, PORT, &ip, data).unwrap()
    };
    let mut b = udp.to_bytes().to_vec();
    b.extend_from_slice(data);
    b
}

/// An IPv4 fragment frame: `piece` at byte `off` of datagram `id`.
fn frag4(id: u16, off: usize, more: bool, piece: &[u8]) -> Vec<u8> {
    let mut ip = Ipv4Header::new(piece.len() as u16, 64, IpNumber::UDP, PEER4, ME4).unwrap();
    ip.identification = id;
    ip.dont_fragment = false;
    ip.more_fragments = more;
    ip.fragment_offset =
        linerate_wire::etherparse::IpFragOffset::try_new((off / 8) as u16).unwrap();
    ip.header_checksum = ip.calc_header_checksum();
    let mut f = eth(0x0800);
    ip.write(&mut f).unwrap();
    f.extend_from_slice(piece);
    f
}

/// An IPv6 fragment frame: a Fragment header (next header `next`) and
/// `piece` at byte `off` of datagram `id`.
fn frag6_with(id: u32, off: usize, more: bool, next: u8, piece: &[u8]) -> Vec<u8> {
    let ip = Ipv6Header {
        payload_length: (8 + piece.len()) as u16,
        next_header: IpNumber::IPV6_FRAGMENTATION_HEADER,
        hop_limit: 64,
        source: PEER6.octets(),
        destination: ME6.octets(),
        ..Ipv6Header::default()
    };
    let mut f = eth(0x86dd);
    ip.write(&mut f).unwrap();
    let o = (((off / 8) as u16) << 3) | u16::from(more);
    f.extend_from_slice(&[next, 0]);
    f.extend_from_slice(&o.to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(piece);
    f
}

fn frag6(id: u32, off: usize, more: bool, piece: &[u8]) -> Vec<u8> {
    frag6_with(id, off, more, 17, piece)
}

/// `bytes` cut into pieces of `per` bytes (a multiple of 8): (offset, more,
/// piece).
fn cut(bytes: &[u8], per: usize) -> Vec<(usize, bool, Vec<u8>)> {
    bytes
        .chunks(per)
        .enumerate()
        .map(|(i, c)| (i * per, (i + 1) * per < bytes.len(), c.to_vec()))
        .collect()
}

fn recv(r: &mut Raw, u: UdpHandle) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 70_000];
    match r.e.udp_recv_from(u, &mut buf) {
        Ok((n, _)) => Some(buf[..n].to_vec()),
        Err(UdpRecvError::WouldBlock) => None,
        Err(e) => panic!("{e:?}"),
    }
}

#[test]
fn ipv4_and_ipv6_reassembled_in_any_order_with_duplicates() {
    let (mut r, u4, u6) = host();
    for (v6, u) in [(false, u4), (true, u6)] {
        for len in [1473usize, 3000, 9000, 65_507] {
            let data = payload(len, len as u8);
            let dg = udp_bytes(v6, &data);
            let mut frags = cut(&dg, if v6 { 1232 } else { 1480 });
            // Reversed, the last one and a middle one twice; the last one
            // once more after the datagram completed (it waits alone).
            frags.reverse();
            let (last, mid) = (frags[0].clone(), frags[frags.len() / 2].clone());
            frags.insert(1, last.clone());
            if frags.len() > 3 {
                frags.insert(2, mid);
            }
            frags.push(last);
            let before = r.e.counters().clone();
            let mut got = Vec::new();
            for (off, more, p) in &frags {
                let f = if v6 {
                    frag6(0x1234_0000 + len as u32, *off, *more, p)
                } else {
                    frag4(len as u16, *off, *more, p)
                };
                r.input(&f);
                while let Some(d) = recv(&mut r, u) {
                    got.push(d);
                }
            }
            assert_eq!(got.len(), 1, "v6 {v6} len {len}: delivered once");
            assert!(got[0] == data, "v6 {v6} len {len}: not the datagram sent");
            let c = r.e.counters();
            assert_eq!(c.ip_reasm_oks, before.ip_reasm_oks + 1);
            assert_eq!(c.ip_reasm_reqds, before.ip_reasm_reqds + frags.len() as u64);
            assert_eq!(c.ip_reasm_fails, before.ip_reasm_fails);
            assert_eq!(c.ip_in_fragments_dropped, 0);
        }
    }
    // The last duplicates came after completion: they wait (and will time
    // out without an ICMP: they are not first fragments).
    assert!(r.frames().is_empty());
    let c = r.e.counters().clone();
    r.now += Duration::from_secs(61);
    r.e.handle_timeout(r.now);
    assert_eq!(r.e.counters().icmp_out_time_excds, c.icmp_out_time_excds);
}

#[test]
fn overlapping_fragments_drop_the_datagram_and_its_latecomers() {
    let (mut r, u4, u6) = host();
    for (v6, u) in [(false, u4), (true, u6)] {
        let data = payload(4000, 7);
        let dg = udp_bytes(v6, &data);
        let frags = cut(&dg, 1024);
        let send = |r: &mut Raw, off: usize, more: bool, p: &[u8]| {
            let f = if v6 {
                frag6(77, off, more, p)
            } else {
                frag4(77, off, more, p)
            };
            r.input(&f);
        };
        send(&mut r, 0, true, &frags[0].2);
        // Overlaps the first by 8 bytes, with other bytes there (the
        // "teardrop" shape).
        send(&mut r, 1016, true, &[0xee; 1024]);
        for (off, more, p) in &frags[1..] {
            send(&mut r, *off, *more, p);
        }
        assert_eq!(
            recv(&mut r, u),
            None,
            "v6 {v6}: an overlapped datagram was delivered"
        );
        let c = r.e.counters();
        assert_eq!(c.ip_reasm_overlaps, 1 + u64::from(v6));
        assert_eq!(c.ip_reasm_after_overlap, 3 * (1 + u64::from(v6)));
        assert_eq!(c.ip_reasm_oks, 0);
    }
    assert!(r.frames().is_empty(), "overlaps are dropped silently");
}

#[test]
fn first_fragment_alone_draws_time_exceeded() {
    let (mut r, _, _) = host();
    r.now = Instant::from_millis(1_000);
    let d4 = udp_bytes(false, &payload(3000, 1));
    let d6 = udp_bytes(true, &payload(3000, 2));
    r.input(&frag4(9, 0, true, &d4[..1480]));
    r.input(&frag6(9, 0, true, &d6[..1232]));
    // A datagram whose first fragment never came: no ICMP (RFC 792).
    r.input(&frag4(10, 1480, true, &d4[1480..2960]));
    assert!(r.frames().is_empty());
    assert!(r.e.poll_timeout() <= Some(Instant::from_millis(31_000)));
    r.now = Instant::from_millis(30_999);
    r.e.handle_timeout(r.now);
    assert!(r.frames().is_empty());
    r.now = Instant::from_millis(31_000);
    r.e.handle_timeout(r.now);
    let out = r.frames();
    assert_eq!(
        out.len(),
        1,
        "one ICMP for the datagram with its first fragment"
    );
    let icmp = parse_icmp(&out[0]).unwrap();
    assert_eq!(icmp.kind, (11, 1), "time exceeded, fragment reassembly");
    assert_eq!(icmp.dst, std::net::IpAddr::from(PEER4));
    // The quote is the first fragment: its header (id 9, MF) and data.
    assert_eq!(&icmp.quote[4..6], &9u16.to_be_bytes());
    assert_eq!(icmp.quote[6] & 0x20, 0x20);
    assert_eq!(&icmp.quote[20..28], &d4[..8]);
    assert_eq!(r.e.counters().ip_reasm_timeout, 2);
    // IPv6 at 60 s.
    r.now = Instant::from_millis(60_999);
    r.e.handle_timeout(r.now);
    assert!(r.frames().is_empty());
    r.now = Instant::from_millis(61_000);
    r.e.handle_timeout(r.now);
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let icmp = parse_icmp(&out[0]).unwrap();
    assert_eq!(icmp.kind, (3, 1));
    assert_eq!(icmp.dst, std::net::IpAddr::V6(PEER6));
    assert_eq!(icmp.quote[6], 44, "the quote's next header is Fragment");
    assert_eq!(&icmp.quote[48..56], &d6[..8]);
    let c = r.e.counters();
    assert_eq!((c.ip_reasm_timeout, c.icmp_out_time_excds), (3, 2));
}

#[test]
fn ipv6_first_fragment_without_its_upper_header_draws_parameter_problem() {
    let (mut r, _, u6) = host();
    // Fragment header, then only 4 bytes of the UDP header (RFC 7112).
    r.input(&frag6(5, 0, true, &[0x13, 0x88, 0x0f, 0xa0]));
    let out = r.frames();
    assert_eq!(out.len(), 1);
    let icmp = parse_icmp(&out[0]).unwrap();
    assert_eq!(icmp.kind, (4, 3));
    // Pointer 0.
    assert_eq!(&out[0][58..62], &[0, 0, 0, 0]);
    assert_eq!(r.e.counters().ip_reasm_incomplete_chain, 1);
    // A destination-options header cut short behind the Fragment header.
    r.input(&frag6_with(6, 0, true, 60, &[17, 1, 0, 0]));
    let out = r.frames();
    assert_eq!(parse_icmp(&out[0]).unwrap().kind, (4, 3));
    assert_eq!(r.e.counters().ip_reasm_incomplete_chain, 2);
    // A non-last fragment whose length is not a multiple of 8: code 0,
    // pointing to the Payload Length.
    let d = udp_bytes(true, &payload(2000, 3));
    r.input(&frag6(7, 0, true, &d[..1001]));
    let out = r.frames();
    let icmp = parse_icmp(&out[0]).unwrap();
    assert_eq!(icmp.kind, (4, 0));
    assert_eq!(&out[0][58..62], &4u32.to_be_bytes());
    // Past 65,535 bytes: code 0, pointing to the Fragment Offset (40 + 2).
    r.input(&frag6(8, 65_000, false, &d[..1000]));
    let out = r.frames();
    let icmp = parse_icmp(&out[0]).unwrap();
    assert_eq!(icmp.kind, (4, 0));
    assert_eq!(&out[0][58..62], &42u32.to_be_bytes());
    let c = r.e.counters();
    assert_eq!((c.ip_reasm_bad_length, c.ip_reasm_too_long), (1, 1));
    assert_eq!(c.icmp_out_parm_probs, 4);
    assert_eq!(recv(&mut r, u6), None);
}

#[test]
fn a_flood_of_incomplete_datagrams_stays_within_the_bound() {
    let mut r = dual_host(|c| {
        on(c);
        c.fragments.high_thresh = 256 * 1024;
        c.fragments.low_thresh = 192 * 1024;
        c.fragments.per_source = 64 * 1024;
    });
    let u = r.e.udp_bind("0.0.0.0:4000".parse().unwrap()).unwrap();
    let data = payload(3000, 9);
    let dg = udp_bytes(false, &data);
    let frags = cut(&dg, 1480);
    for i in 0..5000u32 {
        // First fragments of datagrams that never complete, from many
        // sources (the last octet varies) and ids.
        let mut f = frag4(i as u16, 0, true, &dg[..1480]);
        f[14 + 15] = (i % 200) as u8 + 3;
        let mut ip = linerate_wire::ipv4::Packet::new_unchecked(&mut f[14..34]);
        ip.fill_checksum();
        r.input(&f);
        let m = r.e.memory_usage().reassembly;
        assert!(m <= 256 * 1024, "{m} over the bound after {i}");
        if i % 500 == 0 {
            // Other traffic keeps flowing: a whole datagram in fragments.
            for (off, more, p) in &frags {
                r.input(&frag4(60_000 + i as u16, *off, *more, p));
            }
            assert_eq!(recv(&mut r, u).as_deref(), Some(&data[..]), "after {i}");
        }
    }
    let c = r.e.counters();
    assert!(c.ip_reasm_evicted > 0);
    assert_eq!(c.ip_reasm_oks, 10);
}

fn sent_fragments(r: &mut Raw) -> Vec<Vec<u8>> {
    transmit(r).into_iter().map(|(f, _)| f).collect()
}

#[test]
fn large_sends_leave_in_fragments_another_engine_reassembles() {
    let (mut a, u4, u6) = host();
    let mut bcfg = linerate_toe::sim::Sim::host_config(2);
    on(&mut bcfg);
    let mut b = Raw::new(bcfg);
    let b4 = b.e.udp_bind("0.0.0.0:5000".parse().unwrap()).unwrap();
    let b6 = b.e.udp_bind("[::]:5000".parse().unwrap()).unwrap();
    b.frames();
    let mut ids6 = Vec::new();
    for (v6, u, bu) in [(false, u4, b4), (true, u6, b6)] {
        for len in [1, 1472, 1473, 20_000, if v6 { 65_527 } else { 65_507 }] {
            let data = payload(len, 3);
            assert_eq!(a.e.udp_send_to(u, &data, peer(v6, 5000)), Ok(len));
            let frames = sent_fragments(&mut a);
            let per = if v6 { 1448 } else { 1480 };
            assert_eq!(frames.len(), (len + 8).div_ceil(per), "v6 {v6} len {len}");
            for f in &frames {
                assert!(f.len() <= 1514);
                let ip = ip_of(f);
                if v6 && frames.len() > 1 {
                    assert_eq!(ip[6], 44, "a Fragment header");
                    ids6.push(u32::from_be_bytes(ip[44..48].try_into().unwrap()));
                } else if !v6 {
                    let df = ip[6] & 0x40 != 0;
                    assert_eq!(df, frames.len() == 1, "DF only on whole datagrams");
                }
            }
            // Delivered to the other engine last fragment first.
            for f in frames.iter().rev() {
                b.input(f);
            }
            assert_eq!(
                recv(&mut b, bu).as_deref(),
                Some(&data[..]),
                "v6 {v6} len {len}"
            );
        }
    }
    let c = a.e.counters();
    // IPv4: 1473, 20,000 and 65,507 bytes; IPv6: 1472 too (its header is
    // larger).
    assert_eq!(c.ip_frag_oks, 7);
    ids6.dedup();
    assert_eq!(ids6.len(), 4, "one identification per IPv6 datagram");
    // Two engines of other seeds: other identifications for the same
    // addresses (RFC 7739: not predictable), read from datagrams to ff02::1
    // (which need no neighbour).
    let id_of = |seed: u64| {
        let mut cfg = linerate_toe::sim::Sim::host_config(1);
        on(&mut cfg);
        let mut e = Engine::new(cfg, seed);
        let h = e.udp_bind("[::]:4000".parse().unwrap()).unwrap();
        let to = "[ff02::1]:5000".parse().unwrap();
        e.udp_send_to(h, &[0; 3000], to).unwrap();
        let mut ids = Vec::new();
        e.poll_transmit(Instant::ZERO, &mut |f, _| {
            if f.len() > 62 && f[14 + 6] == 44 {
                ids.push(u32::from_be_bytes(f[58..62].try_into().unwrap()));
            }
        });
        assert_eq!(ids.len(), 3);
        ids[0]
    };
    let (x, y) = (id_of(1), id_of(2));
    assert_ne!(x, y);
    assert_eq!(x, id_of(1), "a seed gives the same run");
}

#[test]
fn large_sends_are_refused_when_fragments_are_not_allowed() {
    let (mut r, u4, u6) = host();
    r.e.udp_set_dont_fragment(u4, true).unwrap();
    assert_eq!(
        r.e.udp_send_to(u4, &[0; 1473], peer(false, 53)),
        Err(UdpSendError::MessageTooLong)
    );
    assert_eq!(r.e.udp_send_to(u4, &[0; 1472], peer(false, 53)), Ok(1472));
    assert_eq!(r.e.udp_send_to(u6, &[0; 1453], peer(true, 53)), Ok(1453));
    // Segmented sends: each datagram must fit, fragments or not.
    assert_eq!(
        r.e.udp_send_to_segmented(u6, &[0; 3000], peer(true, 53), 1453),
        Err(UdpSendError::MessageTooLong)
    );
    // Over the UDP length field: refused.
    assert_eq!(
        r.e.udp_send_to(u6, &vec![0; 65_528], peer(true, 53)),
        Err(UdpSendError::MessageTooLong)
    );
    // Fragments off (the default): refused as before.
    let mut off = dual_host(|c| c.offloads = false);
    let h = off.e.udp_bind("0.0.0.0:4000".parse().unwrap()).unwrap();
    assert_eq!(
        off.e.udp_send_to(h, &[0; 1473], peer(false, 53)),
        Err(UdpSendError::MessageTooLong)
    );
}
