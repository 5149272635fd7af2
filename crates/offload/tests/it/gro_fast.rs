//! GRO's fast path (a TCP segment that continues the run last touched joins
//! it without the layers' walk) decides exactly as the full walk does: for
//! streams of TCP segments over IPv4 and IPv6, plain (with and without VLAN
//! tags and TCP options) and in VXLAN, GENEVE and NVGRE tunnels (outer UDP
//! checksums on and off, a GRE checksum), every single bit of every header
//! byte of every segment (of a sample of segments, in a tunnel) is flipped in
//! turn, and GRO with the fast path delivers the same frames, metas and
//! counters as GRO without it, whole and in two parts, with checksums verified
//! by the NIC and without.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::common;

use common::{Spec, Tunnel, build};
use linerate_offload::{
    Checksum, CsumMode, Gro, GroConfig, GroCounters, OffloadMeta, SegmentBuf, Segmenter,
};
use linerate_wire::layout::L3Kind;

type Out = Vec<(Vec<u8>, OffloadMeta)>;

fn segments(v6: bool, vlan: bool, options: bool, fixed_id: bool) -> Vec<Vec<u8>> {
    segments_of(
        v6,
        vlan,
        options,
        fixed_id,
        12 * 500 + 200,
        500,
        0xffff_f000,
        0xfffa,
    )
}

#[allow(clippy::too_many_arguments)]
fn segments_of(
    v6: bool,
    vlan: bool,
    options: bool,
    fixed_id: bool,
    payload: usize,
    mss: u16,
    seq: u32,
    ip_id: u16,
) -> Vec<Vec<u8>> {
    segment(&Spec {
        tunnel: Tunnel::None,
        ip_v6: v6,
        outer_v6: false,
        udp: false,
        payload,
        mss,
        outer_csum: false,
        input_outer_csum: false,
        fixed_id,
        outer_fixed_id: fixed_id,
        fin: false,
        psh: false,
        cwr: false,
        ece: false,
        tcp_options: options,
        vlan,
        partial: true,
        seq,
        ip_id,
        outer_ip_id: ip_id,
        seed: 3,
    })
}

/// A tunnelled stream of 13 segments: `tunnel` over an outer IPv4 or IPv6
/// header (`outer_v6`), with the outer UDP checksum (`outer_csum`), around
/// TCP over IPv4 or IPv6 (`v6`), inner and outer IPv4 IDs fixed or not.
fn tunnel_segments(
    tunnel: Tunnel,
    outer_v6: bool,
    outer_csum: bool,
    v6: bool,
    fixed_id: bool,
) -> Vec<Vec<u8>> {
    segment(&Spec {
        ip_v6: v6,
        outer_v6,
        outer_csum,
        input_outer_csum: outer_csum,
        fixed_id,
        outer_fixed_id: !fixed_id,
        psh: false,
        seq: 0xffff_f000,
        ip_id: 0xfffa,
        outer_ip_id: 0xfff0,
        seed: 3,
        ..Spec::new(tunnel, 12 * 500 + 200, 500)
    })
}

/// The segments software GSO makes of `spec`'s super-frame.
fn segment(spec: &Spec) -> Vec<Vec<u8>> {
    let sup = build(spec);
    let mut out = SegmentBuf::new();
    Segmenter::new(CsumMode::Complete)
        .segment(&sup.frame, &sup.meta, &mut out)
        .unwrap();
    out.iter().map(<[u8]>::to_vec).collect()
}

/// What GRO delivers for `frames`, whole or (`split`) in two parts at the
/// payload, with or without the fast path, and its counters.
fn run(frames: &[Vec<u8>], meta: OffloadMeta, fast: bool, split: bool) -> (Out, String) {
    let cfg = GroConfig::default();
    let mut gro = Gro::new(cfg);
    if !fast {
        gro = gro.without_fast_path();
    }
    let mut out: Out = Vec::new();
    let mut sink = |x: &[u8], m: &OffloadMeta| out.push((x.to_vec(), *m));
    for (i, f) in frames.iter().enumerate() {
        let parsed = cfg.layout.parse(f);
        let taken = split
            && match &parsed {
                Ok(l) if usize::from(l.payload) <= f.len() => {
                    let (head, pay) = f.split_at(usize::from(l.payload));
                    gro.receive_split(i as u64, head, pay, l, &meta, &mut sink)
                }
                _ => false,
            };
        if !taken {
            gro.receive(i as u64, f, meta, &mut sink);
        }
    }
    gro.flush_all(&mut sink);
    (out, gro.counters().to_string())
}

#[test]
fn every_header_bit_flipped_decides_as_the_full_walk() {
    let verified = OffloadMeta {
        csum: Checksum::Verified { levels: 1 },
        ..OffloadMeta::plain()
    };
    let mut cases = 0;
    let mut merged_fast = 0;
    for (v6, vlan, options, fixed_id) in [
        (false, false, false, false),
        (false, true, true, false),
        (false, false, true, true),
        (true, false, false, false),
        (true, true, true, false),
    ] {
        let frames = interleaved(&segments(v6, vlan, options, fixed_id));
        assert_eq!(frames.len(), 26);
        let hlen = cfg_payload(&frames[0]);
        for meta in [OffloadMeta::plain(), verified] {
            let clean = run(&frames, meta, true, false);
            assert_eq!(clean, run(&frames, meta, false, false));
            assert!(clean.1.contains("gro_merged: 24"), "{}", clean.1);
            merged_fast += 1;
            for i in 1..frames.len() {
                for at in 0..hlen {
                    for (bit, fix) in [(0, false), (7, false), (0, true), (6, true)] {
                        let mut bad = frames.clone();
                        bad[i][at] ^= 1 << bit;
                        // A sender that lies consistently: the IPv4 header checksum
                        // made good again, so the other rules are what decide.
                        if fix && !v6 {
                            fix_ipv4_checksum(&mut bad[i]);
                        }
                        let split = (i + at) % 2 == 0;
                        let with = run(&bad, meta, true, split);
                        let without = run(&bad, meta, false, split);
                        assert!(
                            with == without,
                            "v6 {v6} vlan {vlan} options {options} fixed {fixed_id} \
                             {meta:?}: segment {i}, byte {at}, bit {bit} (fixed {fix}):\n{}\n{}",
                            with.1,
                            without.1
                        );
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases > 5000 && merged_fast == 10);
}

/// A segment larger than the run's first (its MSS) ends the run, however far
/// into the run it comes.
#[test]
fn a_segment_over_the_mss_ends_the_run() {
    for v6 in [false, true] {
        for at in 2..6u16 {
            let first = segments_of(v6, false, false, false, 400 * usize::from(at), 400, 1000, 7);
            let mut frames = first.clone();
            let seq = 1000 + 400 * u32::from(at);
            frames.extend(segments_of(v6, false, false, false, 2000, 500, seq, 7 + at));
            let fast = run(&frames, OffloadMeta::plain(), true, false);
            assert_eq!(fast, run(&frames, OffloadMeta::plain(), false, false));
            assert!(fast.1.contains("gro_flushed_over_mss: 1"), "{}", fast.1);
        }
    }
}

/// Long streams end their runs at the size and segment limits alike.
#[test]
fn runs_end_at_the_limits_alike() {
    for (mss, reason) in [(1448u16, "gro_flushed_size: "), (500, "gro_flushed_segs: ")] {
        for v6 in [false, true] {
            let frames = segments_of(v6, true, true, false, 200 * usize::from(mss), mss, 9, 1);
            let fast = run(&frames, OffloadMeta::plain(), true, true);
            assert_eq!(fast, run(&frames, OffloadMeta::plain(), false, false));
            assert!(fast.1.contains(reason), "{}", fast.1);
        }
    }
}

/// `flow` interleaved with a second flow of the same shape (its innermost
/// ports one up and one down, so every checksum still holds, a tunnel's outer
/// UDP one too): the fast path then finds every segment's run by hash rather
/// than as the run last touched.
fn interleaved(flow: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let l4 = usize::from(
        GroConfig::default()
            .layout
            .parse(&flow[0])
            .unwrap()
            .innermost()
            .l4_offset,
    );
    let mut out = Vec::new();
    for f in flow {
        let mut g = f.clone();
        let sport = u16::from_be_bytes([g[l4], g[l4 + 1]]) + 1;
        let dport = u16::from_be_bytes([g[l4 + 2], g[l4 + 3]]) - 1;
        g[l4..l4 + 2].copy_from_slice(&sport.to_be_bytes());
        g[l4 + 2..l4 + 4].copy_from_slice(&dport.to_be_bytes());
        out.push(f.clone());
        out.push(g);
    }
    out
}

/// Recomputes the IPv4 header checksums of `f` (outer and inner, where the
/// stream's first frame, `like`, has IPv4 headers).
fn fix_ipv4_checksums(f: &mut [u8], like: &[u8]) {
    let l = GroConfig::default().layout.parse(like).unwrap();
    for h in [Some(l.outer), l.inner].into_iter().flatten() {
        let l3 = usize::from(h.l3_offset);
        if h.l3 != L3Kind::Ipv4 || f.len() < l3 + 20 {
            continue;
        }
        f[l3 + 10] = 0;
        f[l3 + 11] = 0;
        let c = linerate_wire::checksum::checksum(&f[l3..l3 + 20]);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Recomputes the IPv4 header checksum of `f`.
fn fix_ipv4_checksum(f: &mut [u8]) {
    let l3 = usize::from(
        GroConfig::default()
            .layout
            .parse(f)
            .map_or(14, |l| l.outer.l3_offset),
    );
    if f.len() < l3 + 20 {
        return;
    }
    f[l3 + 10] = 0;
    f[l3 + 11] = 0;
    let c = linerate_wire::checksum::checksum(&f[l3..l3 + 20]);
    f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

/// Where the payload starts.
fn cfg_payload(f: &[u8]) -> usize {
    usize::from(GroConfig::default().layout.parse(f).unwrap().payload)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// The fuzz target's invariants (copying GRO with and without the fast path
    /// and frag-list GRO agree on bent streams of two flows) hold for random
    /// inputs too.
    #[test]
    fn the_gro_fuzz_harness_holds(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 4..64)) {
        linerate_offload::harness::gro(&data);
    }
}

/// What GRO delivers for `frames` given in two parts at the payload, with no
/// checksum vouched for, its counters, and how many times it asked for a
/// frame's layout (only for a frame that does not continue its run by the
/// fast path).
fn split_counting_layouts(frames: &[Vec<u8>]) -> (Out, GroCounters, usize) {
    let cfg = GroConfig::default();
    let mut gro = Gro::new(cfg);
    let mut out: Out = Vec::new();
    let mut sink = |x: &[u8], m: &OffloadMeta| out.push((x.to_vec(), *m));
    let mut asked = 0;
    for (i, f) in frames.iter().enumerate() {
        let l = cfg.layout.parse(f).unwrap();
        let (head, pay) = f.split_at(usize::from(l.payload));
        let layout = || {
            asked += 1;
            Some(l)
        };
        let meta = OffloadMeta::plain();
        assert!(gro.receive_split_with(i as u64, head, pay, layout, &meta, &mut sink));
    }
    gro.flush_all(&mut sink);
    let c = gro.counters().clone();
    (out, c, asked)
}

/// A bulk stream whose checksums GRO verifies itself: from the template on
/// (built at a run's second segment), every segment joins by the fast path,
/// so the layout (asked for only when a frame does not simply continue the
/// run) is asked for the first two segments alone; a segment with a bad
/// checksum is not taken there, and goes down the full path to be refused.
/// A fast path whose header sum were wrong would send every segment down the
/// full path (same outcome, by design), which only this count shows.
#[test]
fn verified_segments_take_the_fast_path_from_the_third_on() {
    for (v6, vlan, options, fixed_id) in [
        (false, false, true, false),
        (false, true, false, true),
        (true, false, true, false),
    ] {
        let frames = segments(v6, vlan, options, fixed_id);
        assert_eq!(frames.len(), 13);
        for bad in [None, Some(7usize)] {
            let mut frames = frames.clone();
            if let Some(i) = bad {
                let last = frames[i].len() - 1;
                frames[i][last] ^= 0x10;
            }
            let (out, c, asked) = split_counting_layouts(&frames);
            match bad {
                None => {
                    assert_eq!(asked, 2, "v6 {v6} vlan {vlan} options {options}");
                    assert_eq!((out.len(), c.merged, c.csum_verified), (1, 12, 13));
                }
                Some(_) => {
                    // The bad segment, the one after it (its sequence number
                    // no longer continues the run, which leaves: it starts
                    // another) and that run's second take the full path.
                    assert_eq!(asked, 5, "v6 {v6} vlan {vlan} options {options}");
                    assert_eq!(c.csum_verified, 12);
                    // Two runs, and the bad segment between them as it came.
                    assert_eq!(out.len(), 3);
                    assert_eq!(out[1].1.csum, Checksum::None);
                }
            }
        }
    }
}

/// The tunnelled streams of the tunnel tests: tunnel, outer IPv6, outer UDP
/// checksum, inner IPv6, fixed inner IPv4 IDs (the outer ones then increment,
/// and the other way round).
const TUNNELS: [(Tunnel, bool, bool, bool, bool); 7] = [
    (Tunnel::Vxlan, false, false, false, false),
    (Tunnel::Vxlan, false, true, true, true),
    (Tunnel::Vxlan, true, true, false, false),
    (Tunnel::Geneve { options: 2 }, false, true, false, false),
    (Tunnel::Geneve { options: 2 }, true, false, true, true),
    (Tunnel::Nvgre { csum: false }, false, false, false, true),
    (Tunnel::Nvgre { csum: true }, true, false, false, false),
];

/// Checksum levels of a tunnelled stream's frames: the TCP checksum, and the
/// outer UDP or GRE checksum when there is one.
fn levels(tunnel: Tunnel, outer_csum: bool) -> u8 {
    match tunnel {
        Tunnel::Nvgre { csum } => 1 + u8::from(csum),
        Tunnel::None => 1,
        _ => 1 + u8::from(outer_csum),
    }
}

/// In every tunnel, the fast path decides as the full walk does: a sample of
/// segments (the first ones, where the ID modes are decided, and later ones)
/// with every bit of every header byte flipped in turn, whole and in two
/// parts, with no checksum vouched for, the outer one only, or all; and the
/// clean streams and some bent ones agree in frag-list GRO too.
#[test]
fn tunnel_header_bits_flipped_decide_as_the_full_walk() {
    let mut cases = 0;
    for (tunnel, outer_v6, outer_csum, v6, fixed_id) in TUNNELS {
        let ctx = format!(
            "{} outer v6 {outer_v6} csum {outer_csum} v6 {v6}",
            tunnel.name()
        );
        let frames = interleaved(&tunnel_segments(tunnel, outer_v6, outer_csum, v6, fixed_id));
        assert_eq!(frames.len(), 26, "{ctx}");
        let hlen = cfg_payload(&frames[0]);
        let all = levels(tunnel, outer_csum);
        let mut metas = vec![OffloadMeta::plain()];
        for levels in 1..=all {
            metas.push(OffloadMeta {
                csum: Checksum::Verified { levels },
                ..OffloadMeta::plain()
            });
        }
        for meta in metas {
            let clean = run(&frames, meta, true, false);
            assert_eq!(clean, run(&frames, meta, false, false), "{ctx}");
            assert!(clean.1.contains("gro_merged: 24"), "{ctx}: {}", clean.1);
            linerate_offload::harness::agree(&frames, meta);
            for i in [1, 2, 3, 4, 9, 25] {
                for at in 0..hlen {
                    for (bit, fix) in [(0, false), (7, false), (0, true), (5, true)] {
                        let mut bad = frames.clone();
                        bad[i][at] ^= 1 << bit;
                        if fix {
                            fix_ipv4_checksums(&mut bad[i], &frames[0]);
                        }
                        let split = (i + at) % 2 == 0;
                        let with = run(&bad, meta, true, split);
                        let without = run(&bad, meta, false, split);
                        assert!(
                            with == without,
                            "{ctx} {meta:?}: segment {i}, byte {at}, bit {bit} \
                             (fixed {fix}):\n{}\n{}",
                            with.1,
                            without.1
                        );
                        if at % 16 == 0 {
                            linerate_offload::harness::agree(&bad, meta);
                        }
                        cases += 1;
                    }
                }
            }
        }
    }
    assert!(cases > 20_000, "{cases}");
}

/// A tunnelled bulk stream whose checksums GRO verifies itself takes the
/// fast path from its third segment on (the layout is asked for twice), in
/// every tunnel the fast path covers: NVGRE with a GRE checksum, which it does
/// not, asks for it every time. A segment whose payload is bad, or (outer
/// UDP checksums on) whose outer checksum alone is bad, is not taken there
/// and is refused by the full path, for the reason it gives. Without the
/// fast path's tunnel support every segment would take the full path, with the
/// same frames out: only this count shows it.
#[test]
fn tunnelled_segments_take_the_fast_path_from_the_third_on() {
    let cfg = GroConfig::default();
    for (tunnel, outer_v6, outer_csum, v6, fixed_id) in TUNNELS {
        let ctx = format!(
            "{} outer v6 {outer_v6} csum {outer_csum} v6 {v6}",
            tunnel.name()
        );
        let frames = tunnel_segments(tunnel, outer_v6, outer_csum, v6, fixed_id);
        assert_eq!(frames.len(), 13, "{ctx}");
        let covered = !matches!(tunnel, Tunnel::Nvgre { csum: true });
        let udp_csum = outer_csum && matches!(tunnel, Tunnel::Vxlan | Tunnel::Geneve { .. });
        for bad in [None, Some(false), Some(true)] {
            if bad == Some(true) && !udp_csum {
                continue;
            }
            let mut frames = frames.clone();
            if let Some(outer_only) = bad {
                let f = &mut frames[7];
                if outer_only {
                    // The outer UDP checksum alone made bad (a bad payload
                    // with the TCP checksum made good again would leave it
                    // good: it covers the TCP header, checksum included).
                    let u = usize::from(cfg.layout.parse(f).unwrap().outer.l4_offset);
                    f[u + 6] ^= 0x01;
                } else {
                    let last = f.len() - 1;
                    f[last] ^= 0x10;
                }
            }
            let (out, c, asked) = split_counting_layouts(&frames);
            match (bad, covered) {
                (None, true) => {
                    assert_eq!(asked, 2, "{ctx}");
                    assert_eq!((out.len(), c.merged, c.csum_verified), (1, 12, 13), "{ctx}");
                }
                (None, false) => {
                    assert_eq!(asked, 13, "{ctx}");
                    assert_eq!((out.len(), c.merged), (1, 12), "{ctx}");
                }
                (Some(_), _) => {
                    // The bad segment, the one after it (its sequence number
                    // no longer continues the run: it starts another) and
                    // that run's second take the full path.
                    if covered {
                        assert_eq!(asked, 5, "{ctx}");
                    }
                    assert_eq!(c.csum_verified, 12, "{ctx}");
                    assert_eq!(out.len(), 3, "{ctx}");
                    assert_eq!(out[1].1.csum, Checksum::None, "{ctx}");
                    // The reason: the outer checksum's where there is one (a
                    // bad payload breaks both, and the outer is checked
                    // first), else the TCP one's.
                    let why = if udp_csum {
                        "gro_refused_outer_csum_bad: 1"
                    } else if covered {
                        "gro_refused_csum_bad: 1"
                    } else {
                        "gro_refused_gre_csum: 1"
                    };
                    let c = c.to_string();
                    assert!(c.contains(why), "{ctx}: {c}");
                }
            }
        }
    }
}
