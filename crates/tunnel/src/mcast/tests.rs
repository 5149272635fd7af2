//! The membership's messages, dissected with etherparse, and its timers in
//! virtual time.
use super::*;
use linerate_wire::etherparse::{NetSlice, SlicedPacket};
use std::net::Ipv4Addr;

const MAC: [u8; 6] = [2, 0x4c, 10, 0, 0, 2];
const G: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);

fn v4() -> Membership {
    Membership::new(IpAddr::from([10, 0, 0, 2]), MAC)
}

/// The IGMP message of `f`, its IPv4 destination and TTL.
fn igmp_of(f: &[u8]) -> (Ipv4Addr, u8, Vec<u8>) {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        panic!("not IPv4")
    };
    assert_eq!(ip.header().protocol().0, 2, "IGMP");
    assert_eq!(
        f[..6],
        igmp::group_mac(ip.header().destination_addr()),
        "to the destination's group address"
    );
    (
        ip.header().destination_addr(),
        ip.header().ttl(),
        ip.payload().payload.to_vec(),
    )
}

/// The (type, group) records of an IGMPv3 report.
fn records(m: &[u8]) -> Vec<(u8, Ipv4Addr)> {
    assert_eq!(m[0], 0x22, "a v3 report");
    assert!(linerate_wire::checksum::verify(m, 0), "IGMP checksum");
    let n = usize::from(u16::from_be_bytes([m[6], m[7]]));
    let mut at = 8;
    let mut out = Vec::new();
    for _ in 0..n {
        let srcs = usize::from(u16::from_be_bytes([m[at + 2], m[at + 3]]));
        out.push((
            m[at],
            Ipv4Addr::new(m[at + 4], m[at + 5], m[at + 6], m[at + 7]),
        ));
        at += 8 + 4 * srcs;
    }
    out
}

fn query(group: Option<Ipv4Addr>, max_resp_tenths: u8) -> Vec<u8> {
    let g = group.unwrap_or(Ipv4Addr::UNSPECIFIED).octets();
    let mut m = vec![
        0x11,
        max_resp_tenths,
        0,
        0,
        g[0],
        g[1],
        g[2],
        g[3],
        2,
        125,
        0,
        0,
    ];
    let c = linerate_wire::checksum::checksum(&m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    m
}

#[test]
fn a_join_is_reported_at_once_then_retransmitted_within_the_interval() {
    let mut m = v4();
    let t0 = Instant::now();
    let mut out = Vec::new();
    assert!(m.join(t0, G.into(), &mut out));
    assert!(!m.join(t0, G.into(), &mut out), "joined once");
    assert_eq!(out.len(), 1);
    let (dst, ttl, msg) = igmp_of(&out[0]);
    assert_eq!((dst, ttl), (igmp::ALL_V3_ROUTERS, 1), "RFC 3376 section 4");
    assert_eq!(records(&msg), vec![(record::TO_EX, G)]);
    out.clear();
    m.poll(t0 + URI, &mut out);
    assert_eq!(out.len(), 1, "robustness 2: one retransmission within 1 s");
    out.clear();
    m.poll(t0 + URI * 5, &mut out);
    assert!(out.is_empty(), "and no more");
}

#[test]
fn queries_are_answered_after_a_random_delay_within_max_resp() {
    let mut m = v4();
    let t0 = Instant::now();
    let mut out = Vec::new();
    m.join(t0, G.into(), &mut out);
    m.join(t0, IpAddr::from([239, 9, 9, 9]), &mut out);
    m.poll(t0 + URI * 2, &mut out);
    out.clear();
    // A general query with Max Resp 2 s: one report of both groups, current
    // state, at some time in [0, 2 s].
    let t1 = t0 + URI * 10;
    assert_eq!(m.igmp(t1, &query(None, 20)), Ok(true));
    let mut when = None;
    for ms in (0..=2000).step_by(10) {
        m.poll(t1 + Duration::from_millis(ms), &mut out);
        if !out.is_empty() {
            when = Some(ms);
            break;
        }
    }
    assert!(when.is_some(), "answered within Max Resp Time");
    assert_eq!(out.len(), 1);
    let (_, _, msg) = igmp_of(&out[0]);
    let mut r = records(&msg);
    r.sort();
    assert_eq!(
        r,
        vec![
            (record::IS_EX, G),
            (record::IS_EX, Ipv4Addr::new(239, 9, 9, 9))
        ]
    );
    // A group-specific query for G only: G's record only.
    out.clear();
    let t2 = t1 + URI * 10;
    m.igmp(t2, &query(Some(G), 10)).unwrap();
    m.poll(t2 + URI, &mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(records(&igmp_of(&out[0]).2), vec![(record::IS_EX, G)]);
    // One for a group not joined: nothing.
    out.clear();
    m.igmp(t2, &query(Some(Ipv4Addr::new(239, 7, 7, 7)), 10))
        .unwrap();
    m.poll(t2 + URI * 3, &mut out);
    assert!(out.is_empty());
    // The delays differ between queries (a random choice, not a constant).
    let mut seen = std::collections::HashSet::new();
    for i in 0..20u32 {
        let t = t2 + URI * (100 + 10 * i);
        m.igmp(t, &query(None, 100)).unwrap();
        let mut ms = 0;
        loop {
            m.poll(t + Duration::from_millis(ms), &mut out);
            if !out.is_empty() || ms > 10_000 {
                break;
            }
            ms += 50;
        }
        out.clear();
        seen.insert(ms);
    }
    assert!(seen.len() > 3, "delays {seen:?}");
}

#[test]
fn an_igmpv2_querier_gets_v2_reports_and_a_leave_is_sent() {
    let mut m = v4();
    let t0 = Instant::now();
    let mut out = Vec::new();
    m.join(t0, G.into(), &mut out);
    m.poll(t0 + URI * 2, &mut out);
    out.clear();
    let mut v2 = vec![0x11, 10, 0, 0, 0, 0, 0, 0];
    let c = linerate_wire::checksum::checksum(&v2);
    v2[2..4].copy_from_slice(&c.to_be_bytes());
    m.igmp(t0, &v2).unwrap();
    m.poll(t0 + URI * 2, &mut out);
    assert_eq!(out.len(), 1);
    let (dst, _, msg) = igmp_of(&out[0]);
    assert_eq!((dst, msg[0]), (G, 0x16), "an IGMPv2 report to the group");
    out.clear();
    assert!(m.leave(t0 + URI * 3, G.into(), &mut out));
    assert_eq!(out.len(), usize::from(ROBUSTNESS));
    let (dst, _, msg) = igmp_of(&out[0]);
    assert_eq!((dst, msg[0]), (igmp::ALL_ROUTERS, 0x17), "an IGMPv2 leave");
    assert!(!m.leave(t0, G.into(), &mut out));
}

#[test]
fn a_v3_leave_is_a_change_to_include_nothing() {
    let mut m = v4();
    let t0 = Instant::now();
    let mut out = Vec::new();
    m.join(t0, G.into(), &mut out);
    out.clear();
    assert!(m.leave(t0, G.into(), &mut out));
    assert_eq!(out.len(), usize::from(ROBUSTNESS));
    assert_eq!(records(&igmp_of(&out[1]).2), vec![(record::TO_IN, G)]);
    assert_eq!(m.groups().count(), 0);
}

#[test]
fn over_ipv6_mldv2_reports_leave_from_a_link_local_address() {
    let own: Ipv6Addr = "fd00:78::2".parse().unwrap();
    let mut m = Membership::new(own.into(), MAC);
    let g: Ipv6Addr = "ff05::4242".parse().unwrap();
    let mut out = Vec::new();
    m.join(Instant::now(), g.into(), &mut out);
    let f = &out[0];
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let Some(NetSlice::Ipv6(ip)) = p.net else {
        panic!("not IPv6")
    };
    let h = ip.header();
    assert!(h.source_addr().is_unicast_link_local());
    assert_eq!(h.destination_addr(), mld::ALL_V2_ROUTERS);
    assert_eq!(h.hop_limit(), 1);
    let icmp = ip.payload().payload;
    assert_eq!(icmp[0], 143, "an MLDv2 report");
    assert_eq!(icmp[8], record::TO_EX);
    assert_eq!(icmp[12..28], g.octets());
    let macs = m.macs();
    assert!(macs.contains(&[0x33, 0x33, 0, 0, 0x42, 0x42]));
    assert!(
        macs.contains(&[0x33, 0x33, 0xff, 0, 0, 2]),
        "solicited-node"
    );
    assert!(macs.contains(&[0x33, 0x33, 0, 0, 0, 1]), "all nodes");
}
