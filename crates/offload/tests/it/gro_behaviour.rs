//! GRO behaviour outside the merge rules: whole trains (plain, IPv6, VLAN-tagged)
//! coalesced and re-segmented back exactly, single segments delivered unchanged,
//! checksum states of the meta, age flushes, frames GRO does not handle passing
//! through, and a layout carried in the meta.

use crate::gro_util;

use gro_util::*;
use linerate_offload::gro::{FlushReason, Gro, GroConfig};
use linerate_offload::{Checksum, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, L4};
use linerate_wire::layout;

fn gro() -> Gro {
    Gro::new(GroConfig::default())
}

#[test]
fn a_train_merges_into_one_frame_that_resegments_exactly() {
    let train = train_v4(10, 1448);
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [10]);
    let (f, m) = &out[0];
    assert_eq!(f.len(), 14 + 20 + 20 + 14480);
    let gso = m.gso.unwrap();
    assert_eq!(
        (gso.kind, gso.size, gso.fixed_id, gso.ecn),
        (GsoType::TcpV4, 1448, false, false)
    );
    assert_eq!(resegment(f, m), train);
    assert_eq!(g.counters().merged, 9);
    assert_eq!(g.counters().coalesced, 1);
    assert_eq!(g.counters().flushed(FlushReason::BatchEnd), 1);
    assert_balanced(&g);
}

#[test]
fn ipv6_train_merges_and_resegments_exactly() {
    let train: Vec<_> = (0..5)
        .map(|i| frame(v6(), tcp(1 + i * 1000), 1000))
        .collect();
    let mut g = gro();
    let out = run(&mut g, &train);
    assert_eq!(segs(&out), [5]);
    assert_eq!(out[0].1.gso.unwrap().kind, GsoType::TcpV6);
    assert_eq!(resegment(&out[0].0, &out[0].1), train);
}

#[test]
fn vlan_tagged_trains_merge_and_resegment_exactly() {
    for tags in [&[5u16][..], &[100, 200]] {
        let train: Vec<_> = (0..4u32)
            .map(|i| {
                let b = tags.iter().fold(
                    FrameBuilder::new(v4(100 + i as u16), L4::Tcp(tcp(1 + i * 1000))),
                    |b, &t| b.vlan(t),
                );
                b.build(&payload(0, 1 + i * 1000, 1000))
            })
            .collect();
        let mut g = gro();
        let out = run(&mut g, &train);
        assert_eq!(segs(&out), [4], "{tags:?}");
        assert_eq!(resegment(&out[0].0, &out[0].1), train);
    }
}

#[test]
fn a_single_segment_is_delivered_unchanged() {
    let f = frame(v4(1), tcp(1), 100);
    let meta = OffloadMeta {
        rss: None,
        ..verified()
    };
    let mut g = gro();
    let out = run_with(&mut g, std::slice::from_ref(&f), meta);
    assert_eq!(out, vec![(f, meta)]);
    assert_eq!(g.counters().held, 1);
}

#[test]
fn an_unverified_bad_checksum_is_refused_and_a_good_one_merges() {
    let train = train_v4(3, 1000);
    let mut g = gro();
    let out = run_with(&mut g, &train, unverified());
    assert_eq!(segs(&out), [3], "verified in software");

    let mut bad = train.clone();
    let last = bad[2].len() - 1;
    bad[2][last] ^= 0xff;
    let mut g = gro();
    let out = run_with(&mut g, &bad, unverified());
    assert_eq!(segs(&out), [2, 1]);
    assert_eq!(out[1].0, bad[2], "delivered unchanged");
    assert_eq!(g.counters().refused(FlushReason::CsumBad), 1);
}

#[test]
fn a_verified_frame_is_not_checked_again() {
    // The NIC vouches for it; GRO does not sum it again (the stack would drop it).
    let mut train = train_v4(2, 1000);
    let last = train[1].len() - 1;
    train[1][last] ^= 0xff;
    let mut g = gro();
    assert_eq!(segs(&run(&mut g, &train)), [2]);
}

#[test]
fn a_partial_checksum_elsewhere_is_refused() {
    let f = frame(v4(1), tcp(1), 100);
    let meta = OffloadMeta {
        csum: Checksum::Partial {
            start: 14,
            offset: 10,
        },
        ..OffloadMeta::plain()
    };
    let mut g = gro();
    let out = run_with(&mut g, std::slice::from_ref(&f), meta);
    assert_eq!(out, vec![(f, meta)]);
    assert_eq!(g.counters().refused(FlushReason::CsumPartial), 1);
}

#[test]
fn runs_are_delivered_on_age() {
    let train = train_v4(2, 1000);
    let mut g = gro();
    let mut out = Vec::new();
    let mut sink = |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m));
    g.receive(100, &train[0], verified(), &mut sink);
    g.receive(200, &train[1], verified(), &mut sink);
    g.flush_older_than(100 + 999_999, &mut sink);
    assert_eq!(g.held(), 1);
    g.flush_older_than(100 + 1_000_000, &mut sink);
    assert_eq!(g.held(), 0);
    assert_eq!(g.counters().flushed(FlushReason::Age), 1);
    assert_eq!(segs(&out), [2]);
}

#[test]
fn unparseable_and_unsupported_frames_pass_through() {
    let udp = FrameBuilder::new(v4(1), L4::udp(1, 2)).build(&[1; 100]);
    let icmp = FrameBuilder::new(v4(1), L4::Raw(1)).build(&[0; 8]);
    let mut junk = frame(v4(1), tcp(1), 100);
    junk.truncate(60); // shorter than its IP total length
    let mut g = gro();
    let out = run(&mut g, &[udp.clone(), icmp.clone(), junk.clone()]);
    assert_eq!(
        out.iter().map(|o| o.0.clone()).collect::<Vec<_>>(),
        [udp, icmp, junk]
    );
    assert_eq!(g.counters().refused(FlushReason::UdpOff), 1);
    assert_eq!(g.counters().refused(FlushReason::Unsupported), 1);
    assert_eq!(g.counters().refused(FlushReason::Unparsed), 1);
}

#[test]
fn a_frame_already_coalesced_passes_through() {
    let f = frame(v4(1), tcp(1), 1000);
    let meta = OffloadMeta {
        gso: Some(linerate_offload::Gso::new(GsoType::TcpV4, 500)),
        ..verified()
    };
    let mut g = gro();
    let out = run_with(&mut g, std::slice::from_ref(&f), meta);
    assert_eq!(out, vec![(f, meta)]);
    assert_eq!(g.counters().refused(FlushReason::AlreadyGso), 1);
}

#[test]
fn a_given_layout_is_used_and_a_wrong_one_is_harmless() {
    let train = train_v4(3, 1000);
    let l = layout::parse(&train[0]).unwrap();
    let meta = verified();
    let with_layout = |g: &mut Gro, frames: &[Vec<u8>]| {
        let mut out: Vec<(Vec<u8>, OffloadMeta)> = Vec::new();
        let mut sink = |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m));
        for f in frames {
            g.receive_with_layout(0, f, &l, &meta, &mut sink);
        }
        g.flush_all(&mut sink);
        out
    };
    let mut g = gro();
    assert_eq!(segs(&with_layout(&mut g, &train)), [3]);
    assert_eq!(g.counters().received, 3);
    // A layout that does not fit the frame is refused, not trusted.
    let short = frame(v4(1), tcp(1), 10);
    let mut g = gro();
    let out = with_layout(&mut g, std::slice::from_ref(&short));
    assert_eq!(out[0].0, short);
    assert_eq!(g.counters().refused(FlushReason::Unparsed), 1);
}
