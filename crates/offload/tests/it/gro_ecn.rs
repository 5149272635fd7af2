//! ECN through GRO (RFC 3168, Linux's `inet_gro_receive` / `ipv6_gro_receive`
//! comparing the whole TOS / traffic class, `tcp_gro_receive` flushing on CWR):
//! segments with different ECN codepoints never merge, so a CE mark is never
//! lost to (or spread by) coalescing, and GSO of what GRO delivered gives back
//! the segments that went in, marks included. Codepoints are read back with
//! etherparse.
#![allow(clippy::unwrap_used)]

use crate::gro_util;

use gro_util::*;
use linerate_offload::gro::{FlushReason, Gro, GroConfig};
use linerate_wire::build::Ip;
use linerate_wire::etherparse::{IpEcn, SlicedPacket};

const ECT0: u8 = 2;
const CE: u8 = 3;

fn with_ecn(mut ip: Ip, ecn: u8) -> Ip {
    match &mut ip {
        Ip::V4(h) => h.ecn = IpEcn::try_new(ecn).unwrap(),
        Ip::V6(h, _) => h.traffic_class = (h.traffic_class & !3) | ecn,
    }
    ip
}

/// The ECN codepoint and the TCP sequence number of an Ethernet frame.
fn ecn_and_seq(f: &[u8]) -> (u8, u32) {
    let p = SlicedPacket::from_ethernet(f).unwrap();
    let ecn = match p.net.unwrap() {
        linerate_wire::etherparse::NetSlice::Ipv4(s) => s.header().ecn().value(),
        linerate_wire::etherparse::NetSlice::Ipv6(s) => s.header().traffic_class() & 3,
        _ => panic!("not IP"),
    };
    let seq = match p.transport.unwrap() {
        linerate_wire::etherparse::TransportSlice::Tcp(t) => t.sequence_number(),
        _ => panic!("not TCP"),
    };
    (ecn, seq)
}

/// Six 1000-byte segments, ECT(0) but for those in `ce`, over IPv4 or IPv6.
fn train(ipv6: bool, ce: &[usize]) -> Vec<Vec<u8>> {
    (0..6)
        .map(|i| {
            let ip = if ipv6 { v6() } else { v4(100 + i as u16) };
            let mark = if ce.contains(&i) { CE } else { ECT0 };
            frame(with_ecn(ip, mark), tcp(1 + 1000 * i as u32), 1000)
        })
        .collect()
}

#[test]
fn a_ce_mark_is_never_merged_away() {
    for v6 in [false, true] {
        for ce in [&[2][..], &[0], &[5], &[1, 2], &[1, 3]] {
            let input = train(v6, ce);
            let mut g = Gro::new(GroConfig::default());
            let out = run(&mut g, &input);
            assert_balanced(&g);
            // Each wire segment comes back with its own mark.
            let back = resegment_all(&out);
            assert_eq!(back, input, "v6 {v6} ce {ce:?}");
            // Every delivered frame carries one codepoint, that of every
            // segment in it.
            for (f, m) in &out {
                let (ecn, seq) = ecn_and_seq(f);
                let n = m.gso.map_or(1, |g| g.segs) as u32;
                for k in 0..n {
                    let i = ((seq - 1) / 1000 + k) as usize;
                    let want = if ce.contains(&i) { CE } else { ECT0 };
                    assert_eq!(ecn, want, "v6 {v6} ce {ce:?}: segment {i}");
                }
            }
            let reason = if v6 {
                FlushReason::TrafficClass
            } else {
                FlushReason::Tos
            };
            assert!(
                g.counters().flushed(reason) >= 1,
                "v6 {v6} ce {ce:?}: {}",
                g.counters()
            );
        }
    }
}

#[test]
fn segments_all_marked_ce_still_merge() {
    for v6 in [false, true] {
        let input = train(v6, &[0, 1, 2, 3, 4, 5]);
        let mut g = Gro::new(GroConfig::default());
        let out = run(&mut g, &input);
        assert_eq!(segs(&out), [6], "v6 {v6}");
        assert_eq!(ecn_and_seq(&out[0].0).0, CE);
        assert_eq!(resegment_all(&out), input);
    }
}
