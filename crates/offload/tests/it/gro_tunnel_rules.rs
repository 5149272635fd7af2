//! The GRO rules of REFERENCE.md for tunnels (VXLAN, GENEVE, NVGRE/GRE, the outer
//! UDP and IP headers) and for UDP GRO: one test per rule, with its counter, and
//! merged tunnel frames re-segmented back into exactly the segments that went in.

use crate::gro_util;

use gro_util::*;
use linerate_offload::gro::{FlushReason, Gro, GroConfig};
use linerate_offload::{Checksum, GsoTunnel, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::checksum;
use linerate_wire::layout;

fn gro() -> Gro {
    Gro::new(GroConfig::default())
}

/// A TCP segment (inner IPv4 ID `id`, outer ID `oid`) in VXLAN `vni`.
fn vx(vni: u32, i: u32, oid: u16, outer_csum: bool) -> Vec<u8> {
    let seq = 1 + i * 1000;
    FrameBuilder::new(v4(100 + i as u16), L4::Tcp(tcp(seq)))
        .vxlan(vni, under4(oid))
        .outer_udp_checksum(outer_csum)
        .build(&payload(vni as u8, seq, 1000))
}

/// A VXLAN train with incrementing inner and outer IDs.
fn vx_train(vni: u32, n: u32, outer_csum: bool) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| vx(vni, i, 500 + i as u16, outer_csum))
        .collect()
}

/// A TCP segment in GENEVE `vni` with one option carrying `opt`.
fn gnv(vni: u32, i: u32, opt: [u8; 4]) -> Vec<u8> {
    let seq = 1 + i * 1000;
    FrameBuilder::new(v4(100 + i as u16), L4::Tcp(tcp(seq)))
        .geneve(vni, &[geneve_opt(&opt)], under4(500 + i as u16))
        .build(&payload(vni as u8, seq, 1000))
}

/// A TCP segment in NVGRE (`vsid`, `flow_id`).
fn nvgre(vsid: u32, flow_id: u8, i: u32) -> Vec<u8> {
    let seq = 1 + i * 1000;
    FrameBuilder::new(v4(100 + i as u16), L4::Tcp(tcp(seq)))
        .nvgre(vsid, flow_id, under4(500 + i as u16))
        .build(&payload(vsid as u8, seq, 1000))
}

/// Offset of the GRE header in the frames built here (Ethernet + IPv4).
const GRE: usize = 14 + 20;

/// Inserts a 4-byte GRE word at `at` with `flag` set, fixing the outer IPv4 header.
fn insert_gre_word(f: &mut Vec<u8>, at: usize, flag: u16, word: [u8; 4]) {
    f.splice(at..at, word);
    let flags = u16::from_be_bytes([f[GRE], f[GRE + 1]]) | flag;
    f[GRE..GRE + 2].copy_from_slice(&flags.to_be_bytes());
    let total = u16::from_be_bytes([f[16], f[17]]) + 4;
    f[16..18].copy_from_slice(&total.to_be_bytes());
    refill_ipv4_csum(f, 14);
}

/// The NVGRE frame with a GRE checksum (C) added and filled.
fn with_gre_csum(mut f: Vec<u8>) -> Vec<u8> {
    insert_gre_word(&mut f, GRE + 4, 0x8000, [0; 4]);
    let c = checksum::checksum(&f[GRE..]);
    f[GRE + 4..GRE + 6].copy_from_slice(&c.to_be_bytes());
    f
}

fn assert_exact(out: &Delivered, fed: &[Vec<u8>]) {
    assert_eq!(resegment_all(out), fed, "GRO then GSO gives back the input");
}

#[test]
fn vxlan_trains_merge_and_resegment_exactly() {
    for outer_csum in [false, true] {
        let train = vx_train(42, 6, outer_csum);
        let mut g = gro();
        let out = run(&mut g, &train);
        assert_eq!(segs(&out), [6]);
        let gso = out[0].1.gso.unwrap();
        assert_eq!(gso.kind, GsoType::TcpV4);
        assert_eq!(gso.tunnel, GsoTunnel::Udp { outer_csum });
        assert!(!gso.fixed_id && !gso.outer_fixed_id);
        assert_exact(&out, &train);
        // The outer checksum field: zero stays zero; else the folded pseudo sum.
        let f = &out[0].0;
        let l = layout::parse(f).unwrap();
        let at = usize::from(l.outer.l4_offset) + 6;
        let field = u16::from_be_bytes([f[at], f[at + 1]]);
        if outer_csum {
            let len = (f.len() - usize::from(l.outer.l4_offset)) as u16;
            let ps = checksum::pseudo_ipv4([192, 0, 2, 1], [192, 0, 2, 2], 17, len);
            assert_eq!(field, checksum::fold(ps));
        } else {
            assert_eq!(field, 0);
        }
    }
}

#[test]
fn vxlan_over_ipv6_with_ipv6_inside_merges_exactly() {
    let train: Vec<_> = (0..4u32)
        .map(|i| {
            let seq = 1 + i * 1000;
            FrameBuilder::new(v6(), L4::Tcp(tcp(seq)))
                .vxlan(7, under6())
                .outer_udp_checksum(true)
                .build(&payload(7, seq, 1000))
        })
        .collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [4]);
    assert_eq!(out[0].1.gso.unwrap().kind, GsoType::TcpV6);
    assert_exact(&out, &train);
}

#[test]
fn outer_and_inner_ip_ids_are_tracked_apart() {
    // Inner IDs increment, outer IDs are fixed (DF is set on the underlay).
    let train: Vec<_> = (0..4).map(|i| vx(1, i, 77, false)).collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [4]);
    let gso = out[0].1.gso.unwrap();
    assert!(!gso.fixed_id && gso.outer_fixed_id);
    assert_exact(&out, &train);
    // An outer ID out of turn ends the run.
    let fed = vec![
        vx(1, 0, 500, false),
        vx(1, 1, 501, false),
        vx(1, 2, 509, false),
    ];
    let mut g = gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [2, 1]);
    assert_eq!(g.counters().flushed(FlushReason::IpId), 1);
}

#[test]
fn outer_ttl_difference_flushes() {
    let mut outer = under4(501);
    if let Ip::V4(h) = &mut outer {
        h.time_to_live = 9;
    }
    let second = FrameBuilder::new(v4(101), L4::Tcp(tcp(1001)))
        .vxlan(42, outer)
        .build(&payload(42, 1001, 1000));
    let mut g = gro();
    let out = run(&mut g, &[vx(42, 0, 500, false), second]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().flushed(FlushReason::Ttl), 1);
}

#[test]
fn a_different_vni_is_another_flow() {
    let (a, b) = (vx_train(1, 4, false), vx_train(2, 4, false));
    // Same inner connection in two VNIs, interleaved: each VNI merges on its own.
    let fed: Vec<_> = a
        .iter()
        .zip(&b)
        .flat_map(|(x, y)| [x.clone(), y.clone()])
        .collect();
    let mut g = gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [4, 4]);
    assert!(g.counters().split(FlushReason::Vni) >= 1);
    assert_exact(&out[..1].to_vec(), &a);
    assert_exact(&out[1..].to_vec(), &b);
}

#[test]
fn outer_udp_checksum_zero_and_non_zero_are_different_flows() {
    let fed = vec![vx(1, 0, 500, false), vx(1, 1, 501, true)];
    let mut g = gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::OuterCsum), 1);
    assert_eq!(g.counters().held, 2);
}

#[test]
fn a_different_outer_source_port_is_another_flow() {
    let second = FrameBuilder::new(v4(101), L4::Tcp(tcp(1001)))
        .vxlan(1, under4(501))
        .tunnel_ports(50000, 4789)
        .build(&payload(1, 1001, 1000));
    let mut g = gro();
    let out = run(&mut g, &[vx(1, 0, 500, false), second]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::Tuple), 1);
}

#[test]
fn a_different_inner_mac_is_another_flow() {
    let second = FrameBuilder::new(v4(101), L4::Tcp(tcp(1001)))
        .macs([2, 0, 0, 0, 0, 9], [2, 0, 0, 0, 0, 2])
        .vxlan(1, under4(501))
        .build(&payload(1, 1001, 1000));
    let mut g = gro();
    let out = run(&mut g, &[vx(1, 0, 500, false), second]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::L2), 1);
}

#[test]
fn a_bad_outer_udp_checksum_is_refused_when_not_verified() {
    let mut bad = vx(1, 1, 501, true);
    let at = 14 + 20 + 6;
    bad[at] ^= 0x40;
    let good = vx(1, 0, 500, true);
    let mut g = gro();
    let out = run_with(&mut g, &[good, bad.clone()], unverified());
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].0, bad);
    assert_eq!(g.counters().refused(FlushReason::OuterCsumBad), 1);
}

#[test]
fn verified_levels_count_non_zero_outer_checksums() {
    // With a non-zero outer checksum, one verified level covers only that; the inner
    // TCP checksum is then checked here, and a bad one is refused.
    let mut bad = vx(1, 1, 501, true);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    // Keep the outer checksum right so only the inner one is wrong.
    let l = layout::parse(&bad).unwrap();
    let ol4 = usize::from(l.outer.l4_offset);
    bad[ol4 + 6..ol4 + 8].copy_from_slice(&[0, 0]);
    let ps = checksum::pseudo_ipv4([192, 0, 2, 1], [192, 0, 2, 2], 17, (bad.len() - ol4) as u16);
    let c = checksum::finish(checksum::partial(&bad[ol4..], ps));
    bad[ol4 + 6..ol4 + 8].copy_from_slice(&c.to_be_bytes());
    let one = OffloadMeta {
        csum: Checksum::Verified { levels: 1 },
        ..OffloadMeta::plain()
    };
    let mut g = gro();
    let out = run_with(&mut g, &[vx(1, 0, 500, true), bad], one);
    assert_eq!(out.len(), 2);
    assert_eq!(g.counters().refused(FlushReason::CsumBad), 1);
    // With a zero outer checksum, one level is the inner TCP checksum: trusted.
    let mut g = gro();
    assert_eq!(segs(&run_with(&mut g, &vx_train(1, 3, false), one)), [3]);
}

#[test]
fn geneve_with_equal_options_merges_exactly() {
    let train: Vec<_> = (0..5).map(|i| gnv(9, i, [1, 2, 3, 4])).collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [5]);
    assert_eq!(
        out[0].1.gso.unwrap().tunnel,
        GsoTunnel::Udp { outer_csum: false }
    );
    assert_exact(&out, &train);
}

#[test]
fn geneve_options_that_differ_are_another_flow() {
    let mut g = gro();
    let out = run(&mut g, &[gnv(9, 0, [1, 2, 3, 4]), gnv(9, 1, [1, 2, 3, 5])]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::GeneveOptions), 1);
    let mut g = gro();
    let out = run(&mut g, &[gnv(9, 0, [1, 2, 3, 4]), gnv(10, 1, [1, 2, 3, 4])]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().split(FlushReason::Vni), 1);
}

#[test]
fn geneve_oam_is_refused() {
    let mut oam = gnv(9, 1, [1, 2, 3, 4]);
    oam[14 + 20 + 8 + 1] |= 0x80; // O bit (the outer UDP checksum is zero)
    let mut g = gro();
    let out = run(&mut g, &[gnv(9, 0, [1, 2, 3, 4]), oam.clone()]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].0, oam);
    assert_eq!(g.counters().refused(FlushReason::GeneveOam), 1);
    assert_eq!(g.counters().flushed(FlushReason::GeneveOam), 1);
}

#[test]
fn geneve_version_other_than_zero_is_refused() {
    let mut v1 = gnv(9, 1, [1, 2, 3, 4]);
    v1[14 + 20 + 8] |= 0x40;
    let mut g = gro();
    let out = run(&mut g, &[gnv(9, 0, [1, 2, 3, 4]), v1.clone()]);
    assert_eq!(out.len(), 2);
    assert!(out.iter().any(|(f, _)| *f == v1));
    assert_eq!(g.counters().refused(FlushReason::GeneveVersion), 1);
}

#[test]
fn nvgre_merges_exactly() {
    let train: Vec<_> = (0..5).map(|i| nvgre(77, 3, i)).collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [5]);
    assert_eq!(out[0].1.gso.unwrap().tunnel, GsoTunnel::Gre { csum: false });
    assert_exact(&out, &train);
}

#[test]
fn gre_with_checksum_merges_exactly_and_zeroes_the_field() {
    let train: Vec<_> = (0..4).map(|i| with_gre_csum(nvgre(77, 3, i))).collect();
    assert!(is_tunnelled_tcp(&train[0]));
    let mut g = gro();
    let out = run_with(&mut g, &train, unverified());
    assert_eq!(segs(&out), [4], "{}", g.counters());
    assert_eq!(out[0].1.gso.unwrap().tunnel, GsoTunnel::Gre { csum: true });
    assert_eq!(&out[0].0[GRE + 4..GRE + 6], &[0, 0]);
    assert_exact(&out, &train);
}

#[test]
fn a_bad_gre_checksum_is_refused() {
    let mut bad = with_gre_csum(nvgre(77, 3, 1));
    bad[GRE + 4] ^= 1;
    let mut g = gro();
    let out = run_with(
        &mut g,
        &[with_gre_csum(nvgre(77, 3, 0)), bad.clone()],
        unverified(),
    );
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].0, bad);
    assert_eq!(g.counters().refused(FlushReason::GreCsum), 1);
}

#[test]
fn gre_sequence_numbers_are_refused() {
    let mut s = nvgre(77, 3, 1);
    insert_gre_word(&mut s, GRE + 8, 0x1000, [0, 0, 0, 9]);
    assert!(is_tunnelled_tcp(&s));
    let mut g = gro();
    let out = run(&mut g, &[nvgre(77, 3, 0), s.clone()]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].0, s);
    assert_eq!(g.counters().refused(FlushReason::GreFlags), 1);
}

#[test]
fn gre_version_other_than_zero_is_refused() {
    let mut v1 = nvgre(77, 3, 1);
    v1[GRE + 1] |= 0x01; // version 1 (PPTP's enhanced GRE)
    let mut g = gro();
    let out = run(&mut g, &[nvgre(77, 3, 0), v1.clone()]);
    assert_eq!(out.len(), 2);
    assert!(out.iter().any(|(f, _)| *f == v1));
    // Not version 0 carrying Ethernet: the layout calls it plain GRE (no tunnel),
    // which GRO does not coalesce.
    assert_eq!(g.counters().refused(FlushReason::Unsupported), 1);
}

#[test]
fn vxlan_flags_other_than_i_are_refused() {
    let mut odd = vx(42, 1, 501, false);
    odd[14 + 20 + 8] |= 0x01; // a reserved flag bit
    let mut g = gro();
    let out = run(&mut g, &[vx(42, 0, 500, false), odd.clone()]);
    assert_eq!(out.len(), 2);
    assert!(out.iter().any(|(f, _)| *f == odd));
    assert_eq!(g.counters().refused(FlushReason::TunnelFlags), 1);
}

#[test]
fn gre_flags_and_keys_that_differ_are_other_flows() {
    let cases = [
        (with_gre_csum(nvgre(77, 3, 1)), FlushReason::GreFlags),
        (nvgre(77, 4, 1), FlushReason::GreKey),
        (nvgre(78, 3, 1), FlushReason::Vni),
    ];
    for (second, reason) in cases {
        let mut g = gro();
        let out = run(&mut g, &[nvgre(77, 3, 0), second]);
        assert_eq!(segs(&out), [1, 1], "{reason}");
        assert_eq!(g.counters().split(reason), 1, "{reason}");
    }
}

// ---- UDP GRO ---------------------------------------------------------------------

fn udp_gro() -> Gro {
    Gro::new(GroConfig {
        udp: true,
        ..GroConfig::default()
    })
}

fn dgram(i: u16, len: usize) -> Vec<u8> {
    FrameBuilder::new(v4(100 + i), L4::udp(5000, 6000)).build(&payload(1, u32::from(i), len))
}

#[test]
fn udp_gro_merges_equal_datagrams_and_a_shorter_last() {
    let fed = vec![dgram(0, 500), dgram(1, 500), dgram(2, 300), dgram(3, 500)];
    let mut g = udp_gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [3, 1]);
    let gso = out[0].1.gso.unwrap();
    assert_eq!((gso.kind, gso.size), (GsoType::UdpL4, 500));
    assert_eq!(g.counters().flushed(FlushReason::Short), 1);
    assert_exact(&out, &fed);
}

#[test]
fn udp_gro_is_off_by_default() {
    let mut g = gro();
    let out = run(&mut g, &[dgram(0, 500), dgram(1, 500)]);
    assert_eq!(segs(&out), [1, 1]);
    assert_eq!(g.counters().refused(FlushReason::UdpOff), 2);
}

#[test]
fn udp_gro_a_larger_datagram_ends_the_run() {
    let mut g = udp_gro();
    let fed = vec![dgram(0, 300), dgram(1, 300), dgram(2, 500)];
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [2, 1]);
    assert_eq!(g.counters().flushed(FlushReason::OverMss), 1);
    assert_exact(&out, &fed);
}

#[test]
fn udp_gro_needs_a_checksum() {
    let mut zero = dgram(1, 500);
    let at = 14 + 20 + 6;
    zero[at..at + 2].copy_from_slice(&[0, 0]);
    let mut g = udp_gro();
    let out = run(&mut g, &[dgram(0, 500), zero.clone()]);
    assert_eq!(out.len(), 2);
    assert_eq!(out[1].0, zero);
    assert_eq!(g.counters().refused(FlushReason::UdpCsumZero), 1);
}

#[test]
fn udp_gro_stops_at_64_segments() {
    let fed: Vec<_> = (0..70).map(|i| dgram(i, 100)).collect();
    let mut g = udp_gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [64, 6]);
    assert_eq!(g.counters().flushed(FlushReason::Segs), 1);
    assert_exact(&out, &fed);
}

#[test]
fn udp_gro_inside_vxlan() {
    let fed: Vec<_> = (0..3u16)
        .map(|i| {
            FrameBuilder::new(v4(100 + i), L4::udp(5000, 6000))
                .vxlan(5, under4(500 + i))
                .build(&payload(5, u32::from(i), 400))
        })
        .collect();
    let mut g = udp_gro();
    let out = run(&mut g, &fed);
    assert_eq!(segs(&out), [3]);
    let gso = out[0].1.gso.unwrap();
    assert_eq!(
        (gso.kind, gso.tunnel),
        (GsoType::UdpL4, GsoTunnel::Udp { outer_csum: false })
    );
    assert_exact(&out, &fed);
}
