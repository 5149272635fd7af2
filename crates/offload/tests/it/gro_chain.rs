//! Frag-list GRO (`Gro::chaining`, `Gro::receive_chained`: each frame's headers,
//! and a handle to its payload, which runs keep instead of copying) delivers
//! exactly what copying GRO delivers for the same frames whole, once each
//! delivered chain is gathered: the same frames, in the same order, with the same
//! metas and the same counters, for every layout (plain, VXLAN with and without
//! outer checksum, GENEVE with options, NVGRE with and without GRE checksum;
//! IPv4/IPv6), two flows interleaved at random, and corrupt bytes in headers or
//! payloads (so the flush rules and checksum verification are exercised). Every
//! handle GRO took is given back or dropped: none is held once GRO is flushed.
//! The copying context runs without the fast path (`without_fast_path`), the
//! chaining one with it, so the fast path is checked against the layers' walk.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::common;
use crate::gro_streams;

use common::Tunnel;
use gro_streams::{segments, spec};
use linerate_offload::{ChainSink, Checksum, Gro, GroConfig, OffloadMeta};
use proptest::prelude::*;
use std::ops::Range;
use std::rc::Rc;

type Out = Vec<(Vec<u8>, OffloadMeta)>;

/// Both contexts' outputs and counters, and the payloads' buffers.
type Both = ((Out, String), (Gather, String), Vec<Rc<Vec<u8>>>);

/// A payload handle as a pool's would be: a shared buffer and a range of it.
#[derive(Debug, Clone)]
struct Pay(Rc<Vec<u8>>, Range<usize>);

impl AsRef<[u8]> for Pay {
    fn as_ref(&self) -> &[u8] {
        &self.0[self.1.clone()]
    }
}

/// Gathers what a chaining context delivers.
#[derive(Default)]
struct Gather {
    out: Out,
    /// Payloads per delivered chain.
    chains: Vec<usize>,
}

impl ChainSink<Pay> for Gather {
    fn frame(&mut self, head: &[u8], payload: &Pay, meta: &OffloadMeta) {
        let mut f = head.to_vec();
        f.extend_from_slice(payload.as_ref());
        self.out.push((f, *meta));
    }
    fn run(&mut self, head: &[u8], chain: &mut Vec<Pay>, meta: &OffloadMeta) {
        let mut f = head.to_vec();
        // Take some, leave the rest for GRO to drop.
        for p in chain.drain(..chain.len() / 2) {
            f.extend_from_slice(p.as_ref());
        }
        for p in chain.iter() {
            f.extend_from_slice(p.as_ref());
        }
        self.chains.push(chain.len());
        self.out.push((f, *meta));
    }
}

/// Feeds `frames` (with `meta`) whole to a copying context and in two parts to a
/// chaining one; returns both outputs and counter summaries, the chained
/// output's chain lengths, and the handles' buffers (to count references).
fn both(frames: &[Vec<u8>], meta: OffloadMeta) -> Both {
    let cfg = GroConfig::default();
    let mut one = Gro::new(cfg).without_fast_path();
    let mut two = Gro::<Pay>::chaining(cfg);
    let mut a: Out = Vec::new();
    let mut b = Gather::default();
    let mut bufs = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let now = i as u64;
        one.receive(now, f, meta, &mut |x: &[u8], m: &OffloadMeta| {
            a.push((x.to_vec(), *m));
        });
        // The payload lies in a buffer of its own, after bytes that are not it.
        let parsed = cfg.layout.parse(f);
        let at = parsed
            .as_ref()
            .map_or(f.len(), |l| usize::from(l.payload).min(f.len()));
        let mut buf = vec![0xa5; 7];
        buf.extend_from_slice(&f[at..]);
        let buf = Rc::new(buf);
        let pay = Pay(Rc::clone(&buf), 7..buf.len());
        two.receive_chained(now, &f[..at], &pay, || cfg.layout.parse(f), &meta, &mut b);
        bufs.push(buf);
    }
    one.flush_all(&mut |x: &[u8], m: &OffloadMeta| a.push((x.to_vec(), *m)));
    two.flush_all_chained(&mut b);
    let (ca, cb) = (one.counters().to_string(), two.counters().to_string());
    ((a, ca), (b, cb), bufs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn chained_runs_gather_to_the_copied_ones(
        frames in gro_streams::stream(),
        verified in any::<bool>(),
    ) {
        let meta = if verified {
            OffloadMeta { csum: Checksum::Verified { levels: 2 }, ..OffloadMeta::plain() }
        } else {
            OffloadMeta::plain()
        };
        let ((a, ca), (b, cb), bufs) = both(&frames, meta);
        prop_assert_eq!(ca, cb);
        prop_assert_eq!(a.len(), b.out.len());
        for (x, y) in a.iter().zip(&b.out) {
            prop_assert!(x == y, "delivered frames differ");
        }
        // Nothing is held after the flush: every buffer's only reference is ours.
        for buf in &bufs {
            prop_assert_eq!(Rc::strong_count(buf), 1);
        }
    }
}

/// A run of MSS segments is delivered as one chain: the first segment's headers,
/// completed, and one handle per segment, no payload copied.
#[test]
fn a_run_is_one_chain_of_its_segments() {
    let frames = segments(&spec(Tunnel::Vxlan, false, false, 10 * 1000, 1000, 0));
    assert_eq!(frames.len(), 10);
    let ((a, _), (b, cb), _) = both(&frames, OffloadMeta::plain());
    assert_eq!(a.len(), 1);
    assert_eq!(b.chains, [5], "half the chain taken, half left to GRO");
    assert!(cb.contains("gro_merged: 9"), "{cb}");
    let gso = b.out[0].1.gso.unwrap();
    assert_eq!((gso.size, gso.segs), (1000, 10));
}
