//! GRO of frames in two parts (`Gro::receive_split`: headers, then the payload
//! where it lies, as scatter-gather frames come) behaves exactly as GRO of the
//! same frames in one piece: the same frames delivered, in the same order, with
//! the same metas, and the same counters, for every layout (plain, VXLAN with and
//! without outer checksum, GENEVE with options, NVGRE with and without GRE
//! checksum; IPv4/IPv6), two flows interleaved at random, and corrupt bytes in
//! headers or payloads (so the flush rules and checksum verification are
//! exercised in both forms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "common/mod.rs"]
mod common;

use common::{Spec, Tunnel, build};
use linerate_offload::{CsumMode, Gro, GroConfig, OffloadMeta, SegmentBuf, Segmenter};
use linerate_wire::layout;
use proptest::prelude::*;

type Out = Vec<(Vec<u8>, OffloadMeta)>;

fn segments(spec: &Spec) -> Vec<Vec<u8>> {
    let sup = build(spec);
    let mut out = SegmentBuf::new();
    Segmenter::new(CsumMode::Complete)
        .segment(&sup.frame, &sup.meta, &mut out)
        .unwrap();
    out.iter().map(<[u8]>::to_vec).collect()
}

/// Feeds `frames` to a GRO in one piece and to another in two parts where it can
/// (falling back to one piece where `receive_split` declines), and returns both
/// outputs and counter summaries, with how many went in two parts.
fn both(frames: &[Vec<u8>]) -> ((Out, String), (Out, String), usize) {
    let cfg = GroConfig::default();
    // The fast path against the layers' full walk.
    let (mut one, mut two) = (Gro::new(cfg).without_fast_path(), Gro::new(cfg));
    let (mut a, mut b): (Out, Out) = (Vec::new(), Vec::new());
    let mut split = 0;
    for (i, f) in frames.iter().enumerate() {
        let now = i as u64;
        one.receive(
            now,
            f,
            OffloadMeta::plain(),
            &mut |x: &[u8], m: &OffloadMeta| {
                a.push((x.to_vec(), *m));
            },
        );
        let mut sink = |x: &[u8], m: &OffloadMeta| b.push((x.to_vec(), *m));
        let taken = match cfg.layout.parse(f) {
            Ok(l) if usize::from(l.payload) <= f.len() => {
                let (head, pay) = f.split_at(usize::from(l.payload));
                two.receive_split(now, head, pay, &l, &OffloadMeta::plain(), &mut sink)
            }
            _ => false,
        };
        if taken {
            split += 1;
        } else {
            two.receive(now, f, OffloadMeta::plain(), &mut sink);
        }
    }
    one.flush_all(&mut |x: &[u8], m: &OffloadMeta| a.push((x.to_vec(), *m)));
    two.flush_all(&mut |x: &[u8], m: &OffloadMeta| b.push((x.to_vec(), *m)));
    let (ca, cb) = (one.counters().to_string(), two.counters().to_string());
    ((a, ca), (b, cb), split)
}

fn spec(tunnel: Tunnel, v6: bool, outer_v6: bool, payload: usize, mss: u16, seed: u8) -> Spec {
    Spec {
        tunnel,
        ip_v6: v6,
        outer_v6,
        udp: false,
        payload,
        mss,
        outer_csum: seed & 1 != 0,
        input_outer_csum: false,
        fixed_id: false,
        outer_fixed_id: seed & 2 != 0,
        fin: false,
        psh: seed & 4 != 0,
        cwr: false,
        ece: false,
        tcp_options: seed & 8 != 0,
        vlan: seed & 16 != 0,
        partial: true,
        seq: u32::from(seed) << 20,
        ip_id: u16::from(seed) * 7,
        outer_ip_id: 1,
        seed,
    }
}

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::None),
        Just(Tunnel::Vxlan),
        (0u8..=3).prop_map(|options| Tunnel::Geneve { options }),
        any::<bool>().prop_map(|csum| Tunnel::Nvgre { csum }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn two_parts_behave_as_one(
        t1 in tunnel(), t2 in tunnel(),
        v in any::<(bool, bool, bool, bool)>(),
        len in (1usize..30_000, 1usize..30_000),
        mss in 536u16..=1400,
        seeds in any::<(u8, u8)>(),
        order in proptest::collection::vec(any::<bool>(), 0..200),
        corrupt in proptest::collection::vec((any::<u16>(), any::<u16>(), any::<u8>()), 0..3),
        in_headers in proptest::collection::vec((any::<u16>(), 0u16..100, any::<u8>()), 0..3),
    ) {
        let mut f1 = segments(&spec(t1, v.0, v.1, len.0, mss, seeds.0));
        let mut f2 = segments(&spec(t2, v.2, v.3, len.1, mss, seeds.1.wrapping_add(1)));
        // Two flows (different seeds: different sequence numbers; the layouts
        // may be the same), interleaved as `order` says, each in its order.
        f1.reverse();
        f2.reverse();
        let mut frames = Vec::new();
        for pick in order.iter().copied().chain(std::iter::repeat(true)) {
            let from = if pick { &mut f1 } else { &mut f2 };
            match from.pop().or_else(|| f1.pop()).or_else(|| f2.pop()) {
                Some(f) => frames.push(f),
                None => break,
            }
        }
        // Anywhere, and in the first 100 bytes, where the headers are (the fields
        // a segment may change without ending its run among them).
        for &(which, at, bit) in corrupt.iter().chain(&in_headers) {
            let i = usize::from(which) % frames.len();
            let j = usize::from(at) % frames[i].len();
            frames[i][j] ^= 1 << (bit % 8);
        }
        let ((a, ca), (b, cb), split) = both(&frames);
        prop_assert!(split > 0 || frames.is_empty());
        prop_assert_eq!(ca, cb);
        prop_assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            prop_assert!(x == y, "delivered frames differ");
        }
    }
}

/// A frame whose payload does not start where the head ends, or whose IP
/// packet ends before the frame does (padding), is declined, and GRO is left
/// as it was.
#[test]
fn receive_split_declines_what_it_cannot_take() {
    let f = segments(&spec(Tunnel::Vxlan, false, false, 3000, 1000, 0)).remove(0);
    let l = layout::parse(&f).unwrap();
    let at = usize::from(l.payload);
    let mut gro = Gro::new(GroConfig::default());
    let mut sink = |_: &[u8], _: &OffloadMeta| panic!("nothing is delivered");
    let m = OffloadMeta::plain();
    assert!(!gro.receive_split(0, &f[..at - 2], &f[at - 2..], &l, &m, &mut sink));
    assert!(!gro.receive_split(0, &f[..at], &f[at..f.len() - 1], &l, &m, &mut sink));
    let mut gso = m;
    gso.gso = Some(linerate_offload::Gso::new(
        linerate_offload::GsoType::TcpV4,
        100,
    ));
    assert!(!gro.receive_split(0, &f[..at], &f[at..], &l, &gso, &mut sink));
    assert_eq!(gro.counters().received, 0);
    assert!(gro.receive_split(0, &f[..at], &f[at..], &l, &m, &mut sink));
    assert_eq!((gro.counters().received, gro.held()), (1, 1));
}
