//! GRO of frames in two parts (`Gro::receive_split`: headers, then the payload
//! where it lies, as scatter-gather frames come) behaves exactly as GRO of the
//! same frames in one piece: the same frames delivered, in the same order, with
//! the same metas, and the same counters, for every layout (plain, VXLAN with and
//! without outer checksum, GENEVE with options, NVGRE with and without GRE
//! checksum; IPv4/IPv6), two flows interleaved at random, and corrupt bytes in
//! headers or payloads (so the flush rules and checksum verification are
//! exercised in both forms).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::common;
use crate::gro_streams;

use common::Tunnel;
use gro_streams::{segments, spec};
use linerate_offload::{Gro, GroConfig, OffloadMeta};
use linerate_wire::layout;
use proptest::prelude::*;

type Out = Vec<(Vec<u8>, OffloadMeta)>;

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

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn two_parts_behave_as_one(frames in gro_streams::stream()) {
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
