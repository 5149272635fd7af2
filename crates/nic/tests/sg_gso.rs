//! Scatter-gather GSO through the shim (issue 15): the segments a shim hands a
//! memory port, gathered, are the copying segmenter's frames byte for byte, with
//! the same checksum state, for every layout (plain, VXLAN, GENEVE with options,
//! NVGRE with and without checksum; IPv4/IPv6 inner and outer; TCP and UDP;
//! VLAN; checksums completed or left partial); in complete mode they also pass
//! the offload crate's independent (etherparse) checker. And through GRO on the
//! far side (scatter-gather segments coalesced in two parts) the layer above
//! receives exactly what the copying path delivers. A super-frame that is
//! itself scatter-gather (headers in its head, payload in pieces, as an
//! engine's super-segment referencing its send buffer) is segmented with its
//! payload referenced where it lies, into the same frames.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "../../offload/tests/it/common/mod.rs"]
mod common;

use common::{Spec, Super, Tunnel, build, check_segments};
use linerate_nic::{
    Batch, Counter, Frag, Frame, MemNic, Nic, NicCaps, NicError, SharedBuf, Shim, ShimConfig,
};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use proptest::prelude::*;

/// A plain port (no TSO) with jumbo frames, so every MSS of the specs fits,
/// and checksum offload or not.
fn caps(tx_csum: bool) -> NicCaps {
    let mut c = NicCaps::plain();
    c.mtu = 9600;
    c.offloads.tx_csum = tx_csum;
    c
}

/// Sends `sup` through a shim (scatter-gather or not) over a memory port and
/// returns the frames as the peer port hands them up (scatter-gather frames as
/// they are when `rx_sg`), with the peer's `sg_linearized` count.
/// `None` if the shim refuses the super-frame as larger than a port takes
/// (the strategy's largest payloads with the longest headers exceed it).
fn through_shim(sup: &Super, tx_csum: bool, tx_sg: bool, rx_sg: bool) -> Option<(Vec<Frame>, u64)> {
    let (a, mut b) = MemNic::pair(caps(tx_csum), caps(tx_csum));
    assert!(a.tx_sg());
    assert!(b.set_rx_sg(rx_sg));
    let mut a = Shim::new(
        a,
        ShimConfig {
            tx_sg,
            ..ShimConfig::all()
        },
    )
    .unwrap();
    let mut batch = Batch::new();
    batch.push(Frame::new(a.pool().alloc_from(&sup.frame), sup.meta));
    match a.transmit(0, &mut batch) {
        Err(NicError::Oversize { .. }) => return None,
        r => assert_eq!(r.unwrap(), 1),
    }
    let mut got = Batch::new();
    b.receive(0, &mut got, usize::MAX).unwrap();
    let linearized = b.counters().total(Counter::SgLinearized);
    Some((got.drain(..).collect(), linearized))
}

fn gathered(frames: &[Frame]) -> Vec<Vec<u8>> {
    frames
        .iter()
        .map(|f| {
            let mut v = Vec::new();
            f.gather_to_vec(&mut v);
            v
        })
        .collect()
}

/// `spec`'s super-frame, the checksum mode a port with (`tx_csum`) or without
/// checksum offload gets, and the copying segmenter's frames in that mode.
fn copying(spec: &Spec, tx_csum: bool) -> (Super, CsumMode, SegmentBuf) {
    let sup = build(spec);
    let mode = if tx_csum {
        CsumMode::LeavePartial
    } else {
        CsumMode::Complete
    };
    let mut reference = SegmentBuf::new();
    Segmenter::new(mode)
        .segment(&sup.frame, &sup.meta, &mut reference)
        .unwrap();
    (sup, mode, reference)
}

fn check(spec: &Spec, tx_csum: bool) {
    let (sup, mode, reference) = copying(spec, tx_csum);
    let n = reference.len();
    let want: Vec<Vec<u8>> = reference.iter().map(<[u8]>::to_vec).collect();

    // Scatter-gather, handed up as it travelled: headers in the head, payload
    // by reference into one shared buffer (the super-frame's).
    let Some((sg, linearized)) = through_shim(&sup, tx_csum, true, true) else {
        // Too large for a port: refused alike without scatter-gather.
        assert!(through_shim(&sup, tx_csum, false, true).is_none());
        return;
    };
    assert_eq!(sg.len(), n, "{}", spec.name());
    assert_eq!(linearized, 0);
    let first = sg[0].first_shared().expect("a scatter-gather segment");
    for f in &sg {
        assert!(!f.is_linear(), "{}: a linear segment", spec.name());
        assert!(f.first_shared().unwrap().same(first));
        assert_eq!(f.meta.csum, reference.csum(), "{}", spec.name());
        assert!(f.meta.gso.is_none());
    }
    let sg_bytes = gathered(&sg);
    assert!(
        sg_bytes == want,
        "{}: scatter-gather segments differ from the copying segmenter's",
        spec.name()
    );
    if mode == CsumMode::Complete {
        check_segments(spec, &sup, &sg_bytes);
    }
    drop(sg);

    // The same, gathered by the port for a receiver that did not opt in.
    let (linear, linearized) = through_shim(&sup, tx_csum, true, false).unwrap();
    assert_eq!(linearized, n as u64);
    assert!(linear.iter().all(Frame::is_linear));
    let linear_bytes: Vec<Vec<u8>> = linear.iter().map(|f| f.bytes().to_vec()).collect();
    assert!(linear_bytes == want, "{}: linearized differ", spec.name());

    // And the copying path (scatter-gather off): linear from the start.
    let (copied, linearized) = through_shim(&sup, tx_csum, false, true).unwrap();
    assert_eq!(linearized, 0);
    assert!(copied.iter().all(Frame::is_linear));
    assert!(
        gathered(&copied) == want,
        "{}: copying differs",
        spec.name()
    );
}

/// `sup` as a scatter-gather super-frame through a scatter-gather shim: its
/// headers in a head of the shim's pool, its payload in pieces cut at `cuts`
/// (fractions of the payload, in 1/1000), each a fragment at an offset of a
/// buffer of its own (half of them `Bytes`, half pool buffers). The segments,
/// handed up by the peer port as they travelled, must be the copying
/// segmenter's frames; nothing gathered on the way; each segment's payload a
/// reference into the piece that holds it, or one buffer of its own where it
/// spans two.
fn check_pieces(spec: &Spec, tx_csum: bool, cuts: &[u16]) {
    let (sup, mode, reference) = copying(spec, tx_csum);
    let n = reference.len();
    let want: Vec<Vec<u8>> = reference.iter().map(<[u8]>::to_vec).collect();
    let hdr_len = sup.frame.len() - sup.payload.len();
    let (a, mut b) = MemNic::pair(caps(tx_csum), caps(tx_csum));
    assert!(b.set_rx_sg(true));
    let mut a = Shim::new(a, ShimConfig::all()).unwrap();
    assert!(
        a.tx_sg(),
        "the shim takes scatter-gather frames over a port that does"
    );
    let mut frame = Frame::new(a.pool().alloc_from(&sup.frame[..hdr_len]), sup.meta);
    let payload = &sup.frame[hdr_len..];
    let mut points: Vec<usize> = cuts
        .iter()
        .map(|&c| payload.len() * usize::from(c.min(1000)) / 1000)
        .collect();
    points.push(0);
    points.push(payload.len());
    points.sort_unstable();
    points.dedup();
    let mut pieces = Vec::new();
    for (i, w) in points.windows(2).enumerate() {
        let part = &payload[w[0]..w[1]];
        // Each piece at offset 3 of its buffer, so offsets are exercised.
        let mut store = vec![0xee; 3];
        store.extend_from_slice(part);
        store.push(0xee);
        let shared = if i % 2 == 0 {
            SharedBuf::from_bytes(bytes::Bytes::from(store))
        } else {
            SharedBuf::new(a.pool().alloc_from(&store))
        };
        pieces.push((shared.clone(), w[0]..w[1]));
        frame
            .frags
            .push(Frag::new(shared, 3, part.len()).unwrap())
            .unwrap();
    }
    let mut batch = Batch::new();
    batch.push(frame);
    match a.transmit(0, &mut batch) {
        Err(NicError::Oversize { .. }) => return,
        r => assert_eq!(r.unwrap(), 1),
    }
    assert_eq!(
        a.counters().total(Counter::SgLinearized),
        0,
        "{}",
        spec.name()
    );
    let mut got = Batch::new();
    b.receive(0, &mut got, usize::MAX).unwrap();
    assert_eq!(b.counters().total(Counter::SgLinearized), 0);
    assert_eq!(got.len(), n, "{}", spec.name());
    let mut at = 0;
    for f in got.iter() {
        assert_eq!(f.meta.csum, reference.csum(), "{}", spec.name());
        assert_eq!(
            f.frags.len(),
            1,
            "{}: one fragment per segment",
            spec.name()
        );
        let frag = &f.frags.as_slice()[0];
        let end = at + frag.len();
        let holder = pieces.iter().find(|(_, r)| r.start <= at && end <= r.end);
        match holder {
            Some((shared, _)) => assert!(
                frag.shared().same(shared),
                "{}: a segment within one piece must reference it",
                spec.name()
            ),
            None => assert!(pieces.iter().all(|(s, _)| !frag.shared().same(s))),
        }
        at = end;
    }
    let sg_bytes = gathered(&got);
    assert!(
        sg_bytes == want,
        "{}: segments of a scatter-gather super-frame differ from the copying segmenter's",
        spec.name()
    );
    if mode == CsumMode::Complete {
        check_segments(spec, &sup, &sg_bytes);
    }
}

/// A super-frame's headers must be in its head: one whose head holds part of
/// the payload too is gathered and segmented as a linear one, with the same
/// result; one whose head is short of its headers is refused as malformed by
/// a port that segments itself, and segmented after gathering by the shim.
#[test]
fn a_head_not_exactly_the_headers_is_gathered() {
    let spec = Spec {
        seed: 5,
        ..Spec::new(Tunnel::None, 20_000, 1400)
    };
    let sup = build(&spec);
    let hdr_len = sup.frame.len() - sup.payload.len();
    let mut reference = SegmentBuf::new();
    Segmenter::new(CsumMode::Complete)
        .segment(&sup.frame, &sup.meta, &mut reference)
        .unwrap();
    let want: Vec<Vec<u8>> = reference.iter().map(<[u8]>::to_vec).collect();
    for split in [hdr_len + 10, hdr_len - 4] {
        let (a, mut b) = MemNic::pair(caps(false), caps(false));
        assert!(b.set_rx_sg(true));
        let mut a = Shim::new(a, ShimConfig::all()).unwrap();
        let mut frame = Frame::new(a.pool().alloc_from(&sup.frame[..split]), sup.meta);
        let rest = SharedBuf::new(a.pool().alloc_from(&sup.frame[split..]));
        let len = rest.len();
        frame.frags.push(Frag::new(rest, 0, len).unwrap()).unwrap();
        let mut batch = Batch::new();
        batch.push(frame);
        assert_eq!(a.transmit(0, &mut batch).unwrap(), 1, "split at {split}");
        let mut got = Batch::new();
        b.receive(0, &mut got, usize::MAX).unwrap();
        assert!(gathered(&got) == want, "split at {split}");
    }
    // A port with TSO takes a scatter-gather super-frame as it is, if its
    // headers are all in the head.
    let mut tso = NicCaps::full();
    tso.mtu = 9600;
    for (split, ok) in [(hdr_len, true), (hdr_len - 4, false)] {
        let (mut a, _b) = MemNic::pair(tso, tso);
        let mut frame = Frame::new(a.pool().alloc_from(&sup.frame[..split]), sup.meta);
        let rest = SharedBuf::new(a.pool().alloc_from(&sup.frame[split..]));
        let len = rest.len();
        frame.frags.push(Frag::new(rest, 0, len).unwrap()).unwrap();
        let mut batch = Batch::new();
        batch.push(frame);
        assert_eq!(a.transmit(0, &mut batch).is_ok(), ok, "split at {split}");
    }
}

/// Over ports with every offload (the shim reads no payload on receive), a
/// layer above that takes scatter-gather frames gets a scatter-gather
/// super-frame as it was sent: nothing gathered, the payload where the sender
/// put it.
#[test]
fn a_shim_with_nothing_to_do_passes_scatter_gather_frames_up() {
    let mut tso = NicCaps::full();
    tso.mtu = 9600;
    let spec = Spec {
        ip_v6: true,
        seed: 6,
        ..Spec::new(Tunnel::None, 30_000, 1400)
    };
    let sup = build(&spec);
    let hdr_len = sup.frame.len() - sup.payload.len();
    for takes in [true, false] {
        let (a, b) = MemNic::pair(tso, tso);
        let mut a = Shim::new(a, ShimConfig::all()).unwrap();
        let mut b = Shim::new(b, ShimConfig::all()).unwrap();
        assert_eq!(b.set_rx_sg(takes), takes);
        let mut frame = Frame::new(a.pool().alloc_from(&sup.frame[..hdr_len]), sup.meta);
        let payload = SharedBuf::from_bytes(bytes::Bytes::from(sup.payload.clone()));
        let len = payload.len();
        frame
            .frags
            .push(Frag::new(payload.clone(), 0, len).unwrap())
            .unwrap();
        let mut batch = Batch::new();
        batch.push(frame);
        assert_eq!(a.transmit(0, &mut batch).unwrap(), 1);
        let mut got = Batch::new();
        assert_eq!(b.receive(0, &mut got, 8).unwrap(), 1);
        let f = &got[0];
        assert_eq!(f.meta.gso, sup.meta.gso, "a super-frame, as sent");
        let mut whole = Vec::new();
        f.gather_to_vec(&mut whole);
        assert!(whole == sup.frame);
        if takes {
            assert_eq!(f.frags.len(), 1);
            assert!(f.frags.as_slice()[0].shared().same(&payload), "not copied");
        } else {
            assert!(
                f.is_linear(),
                "gathered for a layer that takes linear frames"
            );
        }
    }
}

/// GSO -> wire -> GRO between two shims, scatter-gather both ways (segments by
/// reference, GRO in two parts), scatter-gather with frag-list GRO handing up
/// chains (`set_rx_sg`), and copying both ways: the layer above receives the
/// same frames (gathered), with the same metas, and the shims count the
/// same, but for the frames gathered.
fn round_trip_same_both_ways(sup: &Super, tx_csum: bool) {
    let run = |sg: bool, chains: bool| {
        let (a, b) = MemNic::pair(caps(tx_csum), caps(tx_csum));
        let cfg = ShimConfig {
            tx_sg: sg,
            rx_sg: sg,
            ..ShimConfig::all()
        };
        let mut a = Shim::new(a, cfg.clone()).unwrap();
        let mut b = Shim::new(b, cfg).unwrap();
        assert_eq!(b.set_rx_sg(chains), chains);
        let mut batch = Batch::new();
        batch.push(Frame::new(a.pool().alloc_from(&sup.frame), sup.meta));
        match a.transmit(0, &mut batch) {
            // Too large for a port (see `through_shim`).
            Err(NicError::Oversize { .. }) => return None,
            r => assert_eq!(r.unwrap(), 1),
        }
        b.receive(0, &mut batch, usize::MAX).unwrap();
        let frames: Vec<_> = gathered(&batch)
            .into_iter()
            .zip(batch.iter().map(|f| f.meta))
            .collect();
        assert!(chains || batch.iter().all(Frame::is_linear));
        Some((frames, b.counters().snapshot()))
    };
    let (Some((sg, s1)), Some((copy, s2)), Some((chained, s3))) =
        (run(true, false), run(false, false), run(true, true))
    else {
        assert!(
            run(true, false).is_none() && run(false, false).is_none() && run(true, true).is_none(),
            "refused one way only"
        );
        return;
    };
    assert!(sg == copy, "the layer above received different frames");
    assert!(chained == copy, "frag-list GRO's frames, gathered, differ");
    for c in Counter::ALL.iter().filter(|c| **c != Counter::SgLinearized) {
        assert_eq!(s1.by_name(c.name()), s2.by_name(c.name()), "{c:?}");
        assert_eq!(s3.by_name(c.name()), s2.by_name(c.name()), "chained: {c:?}");
    }
}

#[test]
fn every_tunnel_both_versions_both_checksum_modes() {
    for tunnel in Tunnel::ALL {
        for (ip_v6, outer_v6, udp) in [
            (false, false, false),
            (true, true, false),
            (false, true, true),
        ] {
            for tx_csum in [false, true] {
                let spec = Spec {
                    tunnel,
                    ip_v6,
                    outer_v6,
                    udp,
                    payload: 20_000,
                    mss: 1400,
                    outer_csum: true,
                    input_outer_csum: false,
                    fixed_id: false,
                    outer_fixed_id: false,
                    fin: true,
                    psh: true,
                    cwr: true,
                    ece: false,
                    tcp_options: true,
                    vlan: true,
                    partial: true,
                    seq: 0xffff_f000,
                    ip_id: 0xfffe,
                    outer_ip_id: 7,
                    seed: 3,
                };
                check(&spec, tx_csum);
            }
        }
    }
}

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::None),
        Just(Tunnel::Vxlan),
        (0u8..=4).prop_map(|options| Tunnel::Geneve { options }),
        any::<bool>().prop_map(|csum| Tunnel::Nvgre { csum }),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (tunnel(), any::<bool>(), any::<bool>(), any::<bool>()),
        prop_oneof![1usize..=3000, 1usize..=65536],
        536u16..=9000,
        any::<u16>(),
        (any::<u32>(), any::<u16>(), any::<u16>(), any::<u8>()),
    )
        .prop_map(
            |(
                (tunnel, ip_v6, outer_v6, udp),
                payload,
                mss,
                bits,
                (seq, ip_id, outer_ip_id, seed),
            )| {
                let bit = |n: u32| bits & (1 << n) != 0;
                Spec {
                    tunnel,
                    ip_v6,
                    outer_v6,
                    udp,
                    payload,
                    mss,
                    outer_csum: bit(0),
                    input_outer_csum: bit(1),
                    fixed_id: bit(2),
                    outer_fixed_id: bit(3),
                    fin: bit(4),
                    psh: bit(5),
                    cwr: bit(6),
                    ece: bit(7),
                    tcp_options: bit(8),
                    vlan: bit(9),
                    partial: bit(10),
                    seq,
                    ip_id,
                    outer_ip_id,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Scatter-gather output equals the copying output byte for byte after
    /// gathering, for every layout, complete or partial.
    #[test]
    fn scatter_gather_equals_copying(spec in spec(), tx_csum in any::<bool>()) {
        check(&spec, tx_csum);
    }

    /// A scatter-gather super-frame, cut anywhere, segments into the same
    /// frames, its payload referenced where it lies.
    #[test]
    fn scatter_gather_super_frames_segment_by_reference(
        spec in spec(),
        tx_csum in any::<bool>(),
        cuts in proptest::collection::vec(0u16..=1000, 0..4),
    ) {
        check_pieces(&spec, tx_csum, &cuts);
    }

    /// The round trip through GRO delivers the same either way.
    #[test]
    fn scatter_gather_round_trip_equals_copying(spec in spec(), tx_csum in any::<bool>()) {
        round_trip_same_both_ways(&build(&spec), tx_csum);
    }
}
