//! IGMP and MLD host behaviour checked against the RFC texts: message
//! formats (RFC 3376 section 4, RFC 3810 section 5) parsed with etherparse and
//! compared with layouts written out from the RFCs, checksums recomputed
//! here, query delays (RFC 3376 section 5.2), retransmissions (section 5.1),
//! the interface state of section 3.2, and the compatibility modes (RFC 3376
//! section 7, RFC 3810 section 8).

use super::host::{Compat, Filter, FilterMode, Host, Out, Query};
use super::{igmp, merge, mld};
use crate::config::Config;
use crate::engine::Engine;
use crate::rng::Rng;
use crate::time::Instant;
use linerate_offload::OffloadMeta;
use linerate_wire::etherparse::{NetSlice, SlicedPacket};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

const MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x38];
const ME4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const ME6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
const G4: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const G6: Ipv6Addr = Ipv6Addr::new(0xff15, 0, 0, 0, 0, 0, 0, 0x1234);
const QUERIER_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

/// RFC 1071's checksum, written here rather than taken from the crate.
fn ones(data: &[u8], mut sum: u32) -> u16 {
    for c in data.chunks(2) {
        let w = u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]);
        sum += u32::from(w);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn engine() -> Engine {
    let mut c = Config::new(MAC).with_ipv4(ME4, 24).with_ipv6(ME6, 64);
    c.announcements = 0;
    Engine::new(c, 7)
}

fn frames(e: &mut Engine, now: Instant) -> Vec<Vec<u8>> {
    let mut v = Vec::new();
    e.poll_transmit(now, &mut |f, _| v.push(f.to_vec()));
    v
}

/// The IGMP message of an IGMP frame, with the IPv4 header checked with
/// etherparse: TTL 1, Router Alert, precedence Internetwork Control,
/// protocol 2, header checksum good (RFC 3376 section 4).
fn igmp_of(f: &[u8]) -> (Ipv4Addr, Vec<u8>) {
    let p = SlicedPacket::from_ethernet(f).expect("etherparse");
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        panic!("not IPv4")
    };
    let h = ip.header();
    assert_eq!(h.ttl(), 1);
    assert_eq!(h.protocol().0, 2);
    assert_eq!(h.options(), &[0x94, 0x04, 0, 0], "Router Alert (RFC 2113)");
    assert_eq!(h.dcp().value() >> 3, 6, "precedence Internetwork Control");
    assert_eq!(ones(h.slice(), 0), 0, "header checksum");
    let dst = h.destination_addr();
    assert_eq!(f[..6], igmp::group_mac(dst), "RFC 1112 section 6.4 mapping");
    let m = ip.payload().payload.to_vec();
    assert_eq!(ones(&m, 0), 0, "IGMP checksum");
    (dst, m)
}

/// The MLD message of an MLD frame, the IPv6 headers checked with
/// etherparse: hop limit 1, a Hop-by-Hop header with Router Alert value 0, a
/// link-local source, ICMPv6 checksum good (RFC 3810 section 5).
fn mld_of(f: &[u8]) -> (Ipv6Addr, Vec<u8>) {
    let p = SlicedPacket::from_ethernet(f).expect("etherparse");
    let Some(NetSlice::Ipv6(ip)) = p.net else {
        panic!("not IPv6")
    };
    let h = ip.header();
    assert_eq!(h.hop_limit(), 1);
    assert_eq!(h.next_header().0, 0, "Hop-by-Hop first");
    let src = h.source_addr();
    assert!(src.is_unicast_link_local(), "source {src}");
    let hbh = &f[54..62];
    assert_eq!(hbh[0], 58);
    assert_eq!(&hbh[2..6], &[5, 2, 0, 0], "Router Alert, MLD (RFC 2711)");
    let dst = h.destination_addr();
    let m = f[62..].to_vec();
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(m.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&m);
    assert_eq!(ones(&pseudo, 0), 0, "ICMPv6 checksum");
    assert_eq!(f[..6], mld::group_mac(dst), "RFC 2464 section 7 mapping");
    (dst, m)
}

/// An IGMP query frame from 10.0.0.1 to `dst`: `msg` gets its checksum here.
fn igmp_query_frame(dst: Ipv4Addr, mut msg: Vec<u8>) -> Vec<u8> {
    let c = ones(&msg, 0);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip = vec![0x46, 0xc0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 10, 0, 0, 1];
    ip.extend_from_slice(&dst.octets());
    ip.extend_from_slice(&[0x94, 4, 0, 0]);
    let total = (ip.len() + msg.len()) as u16;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    let c = ones(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let mut f = igmp::group_mac(dst).to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    f.extend_from_slice(&ip);
    f.extend_from_slice(&msg);
    f
}

/// An MLD query frame from `src` to `dst` with hop limit `hops`.
fn mld_query_frame(src: Ipv6Addr, dst: Ipv6Addr, hops: u8, mut msg: Vec<u8>) -> Vec<u8> {
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src.octets());
    pseudo.extend_from_slice(&dst.octets());
    pseudo.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    pseudo.extend_from_slice(&msg);
    let c = ones(&pseudo, 0);
    msg[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = mld::group_mac(dst).to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 1, 0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&((8 + msg.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, hops]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0]);
    f.extend_from_slice(&msg);
    f
}

/// An IGMPv3 general query (RFC 3376 section 4.1) with Max Resp Code `code`.
fn v3_general(code: u8) -> Vec<u8> {
    igmp_query_frame(
        igmp::ALL_SYSTEMS,
        vec![0x11, code, 0, 0, 0, 0, 0, 0, 2, 125, 0, 0],
    )
}

fn bind4(e: &mut Engine) -> crate::UdpHandle {
    e.udp_bind("0.0.0.0:5000".parse().unwrap()).unwrap()
}

#[test]
fn max_resp_code_and_qqic_decode_as_rfc_3376_4_1_1() {
    // Below 128 the value; 0x80 is exp 0, mant 0: (0x10) << 3 = 128.
    assert_eq!(igmp::decode_code(100), 100);
    assert_eq!(igmp::decode_code(0x80), 128);
    // 0xff: mant 15, exp 7: 31 << 10 = 31744 tenths, RFC 3376's 3174.4 s.
    assert_eq!(igmp::decode_code(0xff), 31_744);
    // RFC 3810 section 5.1.3: 0xffff is (0x1fff) << 10 ms, about 8387.6 s.
    assert_eq!(mld::decode_mrc(0xffff), 8_387_584);
    assert_eq!(mld::decode_mrc(10_000), 10_000);
}

#[test]
fn join_sends_igmpv3_to_ex_report_as_rfc_3376_4_2() {
    let mut e = engine();
    let u = bind4(&mut e);
    e.udp_join_multicast(u, G4.into()).unwrap();
    let f = frames(&mut e, ms(0));
    assert_eq!(f.len(), 1, "one report at once");
    let (dst, m) = igmp_of(&f[0]);
    assert_eq!(dst, Ipv4Addr::new(224, 0, 0, 22));
    // Type 0x22, reserved, checksum, reserved, one record: CHANGE_TO_EXCLUDE
    // (4), no aux data, no sources, the group.
    let mut want = vec![0x22, 0, m[2], m[3], 0, 0, 0, 1, 4, 0, 0, 0];
    want.extend_from_slice(&G4.octets());
    assert_eq!(m, want);
    assert_eq!(e.multicast_macs(), &[[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]]);
}

#[test]
fn state_change_is_retransmitted_robustness_times_within_uri() {
    // RFC 3376 section 5.1: [Robustness Variable] transmissions, the later
    // ones at random within [Unsolicited Report Interval] (1 s).
    let mut e = engine();
    let u = bind4(&mut e);
    e.udp_join_multicast(u, G4.into()).unwrap();
    let mut sent = frames(&mut e, ms(0)).len();
    let t = e.poll_timeout().expect("a retransmission is scheduled");
    assert!(t <= ms(1000), "{t:?}");
    e.handle_timeout(t);
    sent += frames(&mut e, t).len();
    assert_eq!(sent, 2);
    assert_eq!(e.poll_timeout(), None, "nothing more after Robustness");
    e.udp_leave_multicast(u, G4.into()).unwrap();
    let f = frames(&mut e, t);
    let (_, m) = igmp_of(&f[0]);
    assert_eq!(m[8], 3, "CHANGE_TO_INCLUDE {{}} on leave");
    assert_eq!(m[10..12], [0, 0]);
    assert!(e.multicast_macs().is_empty());
}

#[test]
fn source_list_changes_send_allow_and_block() {
    // RFC 3376 section 5.1: INCLUDE(A) -> INCLUDE(B) sends ALLOW(B-A) and
    // BLOCK(A-B).
    let mut e = engine();
    let u = bind4(&mut e);
    let (a, b, c) = (
        IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)),
        IpAddr::V4(Ipv4Addr::new(10, 9, 0, 3)),
    );
    e.udp_set_multicast_filter(u, G4.into(), FilterMode::Include, &[a, b])
        .unwrap();
    let (_, m) = igmp_of(&frames(&mut e, ms(0))[0]);
    // INCLUDE {} -> INCLUDE(A) keeps the mode: ALLOW(A - {}), no BLOCK.
    assert_eq!(m[6..8], [0, 1], "one record");
    assert_eq!(m[8], 5, "ALLOW(A)");
    assert_eq!(m[10..12], [0, 2]);
    e.handle_timeout(ms(2000));
    frames(&mut e, ms(2000));
    e.udp_set_multicast_filter(u, G4.into(), FilterMode::Include, &[b, c])
        .unwrap();
    let (_, m) = igmp_of(&frames(&mut e, ms(2000))[0]);
    assert_eq!(m[6..8], [0, 2], "two records");
    let mut want = vec![5, 0, 0, 1];
    want.extend_from_slice(&G4.octets());
    want.extend_from_slice(&[10, 9, 0, 3]);
    want.extend_from_slice(&[6, 0, 0, 1]);
    want.extend_from_slice(&G4.octets());
    want.extend_from_slice(&[10, 9, 0, 1]);
    assert_eq!(m[8..], want[..]);
}

#[test]
fn general_query_is_answered_within_max_resp_time() {
    // RFC 3376 section 5.2: a delay chosen at random in [0, Max Resp Time];
    // the answer is a current-state report (MODE_IS_EXCLUDE for a plain join).
    let mut delays = Vec::new();
    for seed in 0..20 {
        let mut c = Config::new(MAC).with_ipv4(ME4, 24);
        c.announcements = 0;
        let mut e = Engine::new(c, seed);
        let u = bind4(&mut e);
        e.udp_join_multicast(u, G4.into()).unwrap();
        e.handle_timeout(ms(5000));
        frames(&mut e, ms(5000));
        // Max Resp Code 20: 2 s.
        e.handle_frame(ms(10_000), &v3_general(20), &OffloadMeta::plain());
        assert_eq!(e.counters().mcast.igmp_queries_in, 1);
        assert!(frames(&mut e, ms(10_000)).is_empty(), "not at once");
        let t = e.poll_timeout().unwrap();
        assert!(t >= ms(10_000) && t <= ms(12_000), "{t:?}");
        e.handle_timeout(t);
        let f = frames(&mut e, t);
        assert_eq!(f.len(), 1);
        let (dst, m) = igmp_of(&f[0]);
        assert_eq!(dst, Ipv4Addr::new(224, 0, 0, 22));
        assert_eq!(m[8], 2, "MODE_IS_EXCLUDE");
        delays.push(t.as_millis() - 10_000);
    }
    delays.sort_unstable();
    delays.dedup();
    assert!(delays.len() > 10, "delays are random: {delays:?}");
}

#[test]
fn group_and_source_query_gets_the_asked_sources_the_state_allows() {
    // RFC 3376 section 5.2: for INCLUDE(A) and a query for sources B, the
    // answer is IS_IN(A*B).
    let mut e = engine();
    let u = bind4(&mut e);
    let a = [10, 9, 0, 1];
    let b = [10, 9, 0, 2];
    e.udp_set_multicast_filter(
        u,
        G4.into(),
        FilterMode::Include,
        &[Ipv4Addr::from(a).into(), Ipv4Addr::from(b).into()],
    )
    .unwrap();
    e.handle_timeout(ms(5000));
    frames(&mut e, ms(5000));
    let mut q = vec![0x11, 10, 0, 0];
    q.extend_from_slice(&G4.octets());
    q.extend_from_slice(&[2, 125, 0, 2]);
    q.extend_from_slice(&b);
    q.extend_from_slice(&[10, 9, 0, 7]);
    e.handle_frame(ms(6000), &igmp_query_frame(G4, q), &OffloadMeta::plain());
    let t = e.poll_timeout().unwrap();
    assert!(t <= ms(7000));
    e.handle_timeout(t);
    let (_, m) = igmp_of(&frames(&mut e, t)[0]);
    let mut want = vec![1, 0, 0, 1];
    want.extend_from_slice(&G4.octets());
    want.extend_from_slice(&b);
    assert_eq!(m[8..], want[..]);
}

#[test]
fn igmpv2_query_enters_compatibility_mode_until_the_timeout() {
    // RFC 3376 section 7.2.1: an IGMPv2 query (8 bytes, Max Resp Time not
    // zero) sets the IGMPv2 Querier Present timer; in that mode a join sends
    // an IGMPv2 report (0x16) to the group and a leave an IGMPv2 leave (0x17)
    // to all-routers (RFC 2236 section 3).
    let mut e = engine();
    let u = bind4(&mut e);
    let q = igmp_query_frame(igmp::ALL_SYSTEMS, vec![0x11, 100, 0, 0, 0, 0, 0, 0]);
    e.handle_frame(ms(0), &q, &OffloadMeta::plain());
    assert_eq!(e.multicast_compat(false), Compat::V2);
    e.udp_join_multicast(u, G4.into()).unwrap();
    let (dst, m) = igmp_of(&frames(&mut e, ms(0))[0]);
    assert_eq!(dst, G4);
    assert_eq!(m.len(), 8);
    assert_eq!(m[0], 0x16);
    assert_eq!(m[4..8], G4.octets());
    // A v2 general query is answered with a v2 report within Max Resp Time (10 s).
    e.handle_frame(ms(20_000), &q, &OffloadMeta::plain());
    let t = e.poll_timeout().unwrap();
    assert!(t <= ms(30_000), "{t:?}");
    e.handle_timeout(t);
    let (_, m) = igmp_of(&frames(&mut e, t)[0]);
    assert_eq!(m[0], 0x16);
    e.udp_leave_multicast(u, G4.into()).unwrap();
    let (dst, m) = igmp_of(&frames(&mut e, t)[0]);
    assert_eq!((dst, m[0]), (Ipv4Addr::new(224, 0, 0, 2), 0x17));
    // Older Version Querier Present Timeout: Robustness (2) x Query Interval
    // (125 s) + Query Response Interval (the query's 10 s), from the last
    // v2 query.
    let end = ms(20_000 + 260_000);
    e.handle_timeout(end - Duration::from_millis(1));
    assert_eq!(e.multicast_compat(false), Compat::V2);
    e.handle_timeout(end);
    assert_eq!(e.multicast_compat(false), Compat::V3);
    e.udp_join_multicast(u, G4.into()).unwrap();
    let (_, m) = igmp_of(&frames(&mut e, end)[0]);
    assert_eq!(m[0], 0x22, "back to IGMPv3");
}

#[test]
fn mld_join_sends_mldv2_report_as_rfc_3810_5_2() {
    let mut e = engine();
    let u = e.udp_bind("[::]:5000".parse().unwrap()).unwrap();
    e.udp_join_multicast(u, G6.into()).unwrap();
    let f = frames(&mut e, ms(0));
    assert_eq!(f.len(), 1);
    let (dst, m) = mld_of(&f[0]);
    assert_eq!(dst, "ff02::16".parse::<Ipv6Addr>().unwrap());
    // Type 143, reserved, checksum, reserved, one record: CHANGE_TO_EXCLUDE,
    // aux 0, no sources, the group.
    let mut want = vec![143, 0, m[2], m[3], 0, 0, 0, 1, 4, 0, 0, 0];
    want.extend_from_slice(&G6.octets());
    assert_eq!(m, want);
    assert_eq!(e.multicast_macs(), &[[0x33, 0x33, 0, 0, 0x12, 0x34]]);
}

#[test]
fn mldv1_query_enters_compatibility_mode_and_bad_queries_are_counted() {
    // RFC 3810 section 8.2.1: an MLDv1 query (24 bytes) makes the node answer
    // as MLDv1: a report (131) to the group (RFC 2710 section 3).
    let mut e = engine();
    let u = e.udp_bind("[::]:5000".parse().unwrap()).unwrap();
    let mut q = vec![130, 0, 0, 0, 0x03, 0xe8, 0, 0];
    q.extend_from_slice(&[0; 16]);
    let good = mld_query_frame(QUERIER_LL, mld::ALL_NODES, 1, q.clone());
    // RFC 3810 section 5.1.14: a global source, or a hop limit of 255, and
    // the query is dropped.
    let global = mld_query_frame("fd00::1".parse().unwrap(), mld::ALL_NODES, 1, q.clone());
    let hops = mld_query_frame(QUERIER_LL, mld::ALL_NODES, 255, q.clone());
    // 25 to 27 bytes is no valid query (RFC 3810 section 8.1).
    let mut short = q.clone();
    short.push(0);
    let short = mld_query_frame(QUERIER_LL, mld::ALL_NODES, 1, short);
    for f in [&global, &hops, &short] {
        e.handle_frame(ms(0), f, &OffloadMeta::plain());
    }
    assert_eq!(e.counters().mcast.mld_in_errors, 3);
    assert_eq!(e.multicast_compat(true), Compat::V3);
    e.handle_frame(ms(0), &good, &OffloadMeta::plain());
    assert_eq!(e.multicast_compat(true), Compat::V2);
    e.udp_join_multicast(u, G6.into()).unwrap();
    let (dst, m) = mld_of(&frames(&mut e, ms(0))[0]);
    assert_eq!(dst, G6);
    assert_eq!((m[0], m.len()), (131, 24));
    assert_eq!(m[8..24], G6.octets());
    e.udp_leave_multicast(u, G6.into()).unwrap();
    let (dst, m) = mld_of(&frames(&mut e, ms(0))[0]);
    assert_eq!((dst, m[0]), (mld::ALL_ROUTERS, 132));
}

#[test]
fn malformed_igmp_is_counted() {
    let mut e = engine();
    // A 10-byte query (RFC 3376 section 7.1: ignored), a bad checksum.
    let ten = igmp_query_frame(igmp::ALL_SYSTEMS, vec![0x11, 10, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut bad = v3_general(10);
    let n = bad.len();
    bad[n - 1] ^= 1;
    e.handle_frame(ms(0), &ten, &OffloadMeta::plain());
    e.handle_frame(ms(0), &bad, &OffloadMeta::plain());
    let c = &e.counters().mcast;
    assert_eq!((c.igmp_in, c.igmp_in_errors, c.igmp_queries_in), (2, 2, 0));
}

#[test]
fn interface_state_merges_sockets_as_rfc_3376_3_2() {
    // RFC 3376 section 3.2's example: EXCLUDE {a,b,c,d}, EXCLUDE {b,c,d,e}
    // and INCLUDE {d,e,z} make EXCLUDE {b,c}.
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 0, 1, n));
    let (a, b, c, d, x, z) = (ip(1), ip(2), ip(3), ip(4), ip(5), ip(26));
    let f = [
        Filter::new(FilterMode::Exclude, &[a, b, c, d]),
        Filter::new(FilterMode::Exclude, &[b, c, d, x]),
        Filter::new(FilterMode::Include, &[d, x, z]),
    ];
    assert_eq!(merge(f.iter()), Filter::new(FilterMode::Exclude, &[b, c]));
    let f = [
        Filter::new(FilterMode::Include, &[a, b]),
        Filter::new(FilterMode::Include, &[b, c]),
    ];
    assert_eq!(
        merge(f.iter()),
        Filter::new(FilterMode::Include, &[a, b, c])
    );
}

/// A UDP datagram frame from `src` to group `G4`, port 5000.
fn group_datagram(src: Ipv4Addr) -> Vec<u8> {
    let mut f = igmp::group_mac(G4).to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 9, 0x08, 0x00]);
    let mut ip = vec![0x45, 0, 0, 32, 0, 0, 0, 0, 1, 17, 0, 0];
    ip.extend_from_slice(&src.octets());
    ip.extend_from_slice(&G4.octets());
    let c = ones(&ip, 0);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    // UDP without a checksum (zero is "none" over IPv4).
    f.extend_from_slice(&[0x13, 0x88, 0x13, 0x88, 0, 12, 0, 0, 1, 2, 3, 4]);
    f
}

#[test]
fn datagrams_reach_only_joined_sockets_from_allowed_sources() {
    let mut e = engine();
    let u = bind4(&mut e);
    let s1 = Ipv4Addr::new(10, 0, 0, 7);
    let s2 = Ipv4Addr::new(10, 0, 0, 8);
    // Not joined: the Ethernet filter drops it.
    e.handle_frame(ms(0), &group_datagram(s1), &OffloadMeta::plain());
    assert_eq!(e.counters().rx_other_host, 1);
    e.udp_set_multicast_filter(u, G4.into(), FilterMode::Exclude, &[s2.into()])
        .unwrap();
    e.handle_frame(ms(0), &group_datagram(s1), &OffloadMeta::plain());
    e.handle_frame(ms(0), &group_datagram(s2), &OffloadMeta::plain());
    let mut buf = [0u8; 16];
    let (n, from) = e.udp_recv_from(u, &mut buf).unwrap();
    assert_eq!((n, from), (4, SocketAddr::new(s1.into(), 5000)));
    assert!(e.udp_recv_from(u, &mut buf).is_err(), "the excluded source");
    assert_eq!(e.counters().mcast.udp_filtered, 1);
    // A second socket of another port joins too; closing the first keeps
    // the group while the second is in it.
    let v = e.udp_bind("0.0.0.0:5001".parse().unwrap()).unwrap();
    e.udp_join_multicast(v, G4.into()).unwrap();
    e.udp_close(u).unwrap();
    assert_eq!(e.multicast_groups().len(), 1);
    e.udp_close(v).unwrap();
    assert!(e.multicast_groups().is_empty());
    e.handle_frame(ms(0), &group_datagram(s1), &OffloadMeta::plain());
    assert_eq!(e.counters().rx_other_host, 2);
}

#[test]
fn multicast_sends_use_the_socket_hops_default_one() {
    let mut e = engine();
    let u = bind4(&mut e);
    let to = SocketAddr::new(G4.into(), 6000);
    e.udp_send_to(u, b"x", to).unwrap();
    e.udp_set_multicast_hops(u, 7).unwrap();
    e.udp_send_to(u, b"y", to).unwrap();
    let f = frames(&mut e, ms(0));
    let ttl: Vec<u8> = f
        .iter()
        .map(|f| {
            let p = SlicedPacket::from_ethernet(f).unwrap();
            let Some(NetSlice::Ipv4(ip)) = p.net else {
                panic!()
            };
            assert_eq!(ones(ip.header().slice(), 0), 0, "header checksum");
            assert_eq!(f[..6], igmp::group_mac(G4));
            ip.header().ttl()
        })
        .collect();
    assert_eq!(ttl, [1, 7]);
}

#[test]
fn host_v3_query_rules_keep_the_earlier_general_answer() {
    // RFC 3376 section 5.2 rule 1: a pending general answer due sooner makes
    // a new query schedule nothing.
    let mut h = Host::default();
    let mut rng = Rng::new(1);
    let mut out = Vec::new();
    h.set_filter(
        ms(0),
        &mut rng,
        G4.into(),
        Filter::new(FilterMode::Exclude, &[]),
        &mut out,
    );
    assert!(matches!(out[0], Out::Report(_)));
    h.timeout(ms(5000), &mut rng, &mut out);
    let q = |s: u64| Query {
        version: Compat::V3,
        group: None,
        sources: Vec::new(),
        max_resp: Duration::from_secs(s),
        qrv: 3,
        qqi: Duration::from_secs(60),
    };
    h.query(ms(10_000), &mut rng, &q(1));
    let first = h.deadline().unwrap();
    h.query(ms(10_000), &mut rng, &q(100));
    assert_eq!(h.deadline(), Some(first));
    assert_eq!(h.robustness(), 3, "QRV adopted (RFC 3376 section 4.1.6)");
    assert!(h.filter(G4.into()).is_some());
}

/// Every datagram waiting on `u`: (payload, sender).
fn received(e: &mut Engine, u: crate::UdpHandle) -> Vec<(Vec<u8>, SocketAddr)> {
    let mut v = Vec::new();
    let mut buf = [0u8; 64];
    while let Ok((n, from)) = e.udp_recv_from(u, &mut buf) {
        v.push((buf[..n].to_vec(), from));
    }
    v
}

#[test]
fn sends_to_a_joined_group_loop_back_as_linux_does() {
    // Linux's defaults (ip(7), ipv6(7)): IP_MULTICAST_LOOP and
    // IPV6_MULTICAST_LOOP on, so a member socket of the sending host gets the
    // datagram too, the sender included if it is the member; the copy is
    // filtered as a received one; the datagram still goes on the wire.
    let mut e = engine();
    let member = bind4(&mut e);
    let sender = e.udp_bind("0.0.0.0:6000".parse().unwrap()).unwrap();
    let g = SocketAddr::new(G4.into(), 5000);
    e.udp_send_to(sender, b"early", g).unwrap();
    assert!(received(&mut e, member).is_empty(), "not joined yet");
    e.udp_join_multicast(member, G4.into()).unwrap();
    frames(&mut e, ms(0));
    e.udp_send_to(sender, b"one", g).unwrap();
    e.udp_send_to(member, b"own", g).unwrap();
    let me = |port| SocketAddr::new(ME4.into(), port);
    assert_eq!(
        received(&mut e, member),
        [(b"one".to_vec(), me(6000)), (b"own".to_vec(), me(5000))]
    );
    let out = frames(&mut e, ms(0));
    assert_eq!(out.len(), 2, "both went on the wire as well");
    assert!(out.iter().all(|f| f[..6] == igmp::group_mac(G4)));
    assert_eq!(e.counters().mcast.udp_looped, 2);
    // Another port of the group: nobody of ours listens there.
    e.udp_send_to(sender, b"x", SocketAddr::new(G4.into(), 5001))
        .unwrap();
    // The loop off on the sender.
    e.udp_set_multicast_loop(sender, false).unwrap();
    e.udp_send_to(sender, b"off", g).unwrap();
    assert!(received(&mut e, member).is_empty());
    e.udp_set_multicast_loop(sender, true).unwrap();
    // A filter that takes only another source keeps ours out.
    let other = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9));
    e.udp_set_multicast_filter(member, G4.into(), FilterMode::Include, &[other])
        .unwrap();
    e.udp_send_to(sender, b"blocked", g).unwrap();
    assert!(received(&mut e, member).is_empty());
    assert_eq!(e.counters().mcast.udp_looped, 2);
    // A segmented send loops back as its datagrams.
    e.udp_join_multicast(member, G4.into()).unwrap();
    e.udp_send_to_segmented(sender, b"aabbc", g, 2).unwrap();
    let got: Vec<Vec<u8>> = received(&mut e, member)
        .into_iter()
        .map(|(d, _)| d)
        .collect();
    assert_eq!(got, [b"aa".to_vec(), b"bb".to_vec(), b"c".to_vec()]);
}

#[test]
fn ipv6_sends_to_a_joined_group_loop_back() {
    let mut e = engine();
    let member = e.udp_bind("[::]:5000".parse().unwrap()).unwrap();
    let sender = e.udp_bind("[::]:6000".parse().unwrap()).unwrap();
    e.udp_join_multicast(member, G6.into()).unwrap();
    e.udp_send_to(sender, b"six", SocketAddr::new(G6.into(), 5000))
        .unwrap();
    assert_eq!(
        received(&mut e, member),
        [(b"six".to_vec(), SocketAddr::new(ME6.into(), 6000))]
    );
}
