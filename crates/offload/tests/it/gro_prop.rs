//! Property: GRO over any interleaving of several flows (plain and tunnelled, IPv4
//! and IPv6; some of them the same inner connection in different VNIs or tunnels),
//! with loss and reordering, in batches of any size, with a table of any size,
//! never mixes flows or VNIs and delivers every segment exactly once, in order, per
//! flow: re-segmenting what comes out (by the GSO rules) gives back exactly what
//! went in, flow by flow, in arrival order. A merge across a gap would re-segment
//! into sequence numbers that never arrived, so gaps must flush.

// A test: a panic is a failed case.
#![allow(clippy::unwrap_used)]

use crate::gro_util;

use gro_util::*;
use linerate_offload::OffloadMeta;
use linerate_offload::gro::{FlushReason, Gro, GroConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::layout::{self, L3Kind, TunnelKind};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Plain4,
    Plain6,
    Vxlan4,
    Vxlan6Csum,
    Geneve4,
    Nvgre4,
}

#[derive(Debug, Clone)]
struct Spec {
    kind: Kind,
    vni: u32,
    port: u16,
    mss: usize,
    segs: usize,
    fixed_id: bool,
    short_last: bool,
    psh_last: bool,
    /// Per segment: dropped (loss).
    lost: Vec<bool>,
    /// Per segment: swapped with the next one (reordering).
    swap: Vec<bool>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop_oneof![
            Just(Kind::Plain4),
            Just(Kind::Plain6),
            Just(Kind::Vxlan4),
            Just(Kind::Vxlan6Csum),
            Just(Kind::Geneve4),
            Just(Kind::Nvgre4),
        ],
        1u32..=2,
        0u16..2,
        prop_oneof![Just(64usize), Just(200), Just(700)],
        1usize..=12,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(proptest::bool::weighted(0.1), 12),
        proptest::collection::vec(proptest::bool::weighted(0.1), 12),
    )
        .prop_map(
            |(kind, vni, port, mss, segs, fixed_id, short_last, psh_last, lost, swap)| Spec {
                kind,
                vni,
                port,
                mss,
                segs,
                fixed_id,
                short_last,
                psh_last,
                lost,
                swap,
            },
        )
}

/// The flow's identity: what GRO must never mix.
fn identity(kind: Kind, vni: u32, port: u16) -> (Kind, u32, u16) {
    match kind {
        Kind::Plain4 | Kind::Plain6 => (kind, 0, port),
        _ => (kind, vni, port),
    }
}

/// Segment `i` of flow `tag` described by `s`.
fn segment(tag: u8, s: &Spec, i: usize) -> Vec<u8> {
    // Every flow uses the same sequence numbers (and IP IDs): only the headers that
    // tell flows apart (and the payload bytes) differ, so a merge across flows
    // would not be stopped by a gap.
    let seq = 1 + (i * s.mss) as u32;
    let last = i + 1 == s.segs;
    let len = if last && s.short_last {
        s.mss / 2 + 1
    } else {
        s.mss
    };
    let mut t = tcp(seq);
    t.source_port = 40000 + s.port;
    t.psh = last && s.psh_last;
    let id = if s.fixed_id { 7 } else { 100 + i as u16 };
    let inner = match s.kind {
        Kind::Plain6 | Kind::Vxlan6Csum => v6(),
        _ => v4(id),
    };
    let b = FrameBuilder::new(inner, L4::Tcp(t));
    let outer = || under4(if s.fixed_id { 9 } else { 300 + i as u16 });
    let b = match s.kind {
        Kind::Plain4 | Kind::Plain6 => b,
        Kind::Vxlan4 => b.vxlan(s.vni, outer()),
        Kind::Vxlan6Csum => b.vxlan(s.vni, under6()).outer_udp_checksum(true),
        Kind::Geneve4 => b.geneve(s.vni, &[geneve_opt(&[0, 0, 0, s.vni as u8])], outer()),
        Kind::Nvgre4 => b.nvgre(s.vni, 1, outer()),
    };
    b.build(&payload(tag, seq, len))
}

/// The flow's segments in the order they arrive (after loss and reordering).
fn arrivals(tag: u8, s: &Spec) -> Vec<Vec<u8>> {
    let mut v: Vec<_> = (0..s.segs)
        .filter(|&i| !s.lost[i])
        .map(|i| segment(tag, s, i))
        .collect();
    for i in 0..v.len().saturating_sub(1) {
        if s.swap[i] {
            v.swap(i, i + 1);
        }
    }
    v
}

/// The identity of a frame, read back from its headers.
fn identity_of(frame: &[u8]) -> (Kind, u32, u16) {
    let l = layout::parse(frame).unwrap();
    let h = l.innermost();
    let l4 = usize::from(h.l4_offset);
    let port = u16::from_be_bytes([frame[l4], frame[l4 + 1]]) - 40000;
    let kind = match (l.tunnel.map(|t| t.kind), h.l3, l.outer.l3) {
        (None, L3Kind::Ipv4, _) => Kind::Plain4,
        (None, _, _) => Kind::Plain6,
        (Some(TunnelKind::Vxlan), _, L3Kind::Ipv4) => Kind::Vxlan4,
        (Some(TunnelKind::Vxlan), _, _) => Kind::Vxlan6Csum,
        (Some(TunnelKind::Geneve), _, _) => Kind::Geneve4,
        (Some(TunnelKind::Nvgre), _, _) => Kind::Nvgre4,
    };
    identity(kind, l.tunnel.map_or(0, |t| t.vni), port)
}

fn check(
    specs: Vec<Spec>,
    schedule: Vec<u8>,
    batches: Vec<u8>,
    max_flows: usize,
    verify_here: bool,
) -> Result<(), TestCaseError> {
    // One flow per identity.
    let mut flows: BTreeMap<(Kind, u32, u16), Vec<Vec<u8>>> = BTreeMap::new();
    let mut plain_run = true;
    for (tag, s) in specs.iter().enumerate() {
        let key = identity(s.kind, s.vni, s.port);
        let segs = arrivals(tag as u8, s);
        if flows.contains_key(&key) || segs.is_empty() {
            continue;
        }
        plain_run &= !s.lost.iter().take(s.segs).any(|&l| l)
            && !s.swap.iter().take(s.segs.saturating_sub(1)).any(|&w| w);
        flows.insert(key, segs);
    }
    // Interleave: each step takes the next segment of a flow the schedule picks.
    let mut queues: Vec<(_, std::collections::VecDeque<Vec<u8>>)> = flows
        .iter()
        .map(|(k, v)| (*k, v.iter().cloned().collect()))
        .collect();
    let mut fed = Vec::new();
    let mut pick = schedule.iter().cycle();
    while queues.iter().any(|(_, q)| !q.is_empty()) {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].1.is_empty())
            .collect();
        let i = live[usize::from(*pick.next().unwrap()) % live.len()];
        fed.push(queues[i].1.pop_front().unwrap());
    }
    // Feed in batches; flush at each batch end.
    let mut g = Gro::new(GroConfig {
        max_flows,
        ..GroConfig::default()
    });
    let meta = if verify_here {
        unverified()
    } else {
        verified()
    };
    let mut out: Delivered = Vec::new();
    let mut sink = |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m));
    let mut sizes = batches.iter().cycle();
    let mut rest = fed.as_slice();
    let mut nbatches = 0;
    while !rest.is_empty() {
        let n = (usize::from(*sizes.next().unwrap()) % 64 + 1).min(rest.len());
        let (batch, tail) = rest.split_at(n);
        g.receive_batch(0, batch.iter().map(|f| (f.as_slice(), meta)), &mut sink);
        rest = tail;
        nbatches += 1;
    }
    prop_assert_eq!(g.held(), 0);
    let c = g.counters().clone();
    prop_assert_eq!(c.received, fed.len() as u64);
    prop_assert_eq!(c.received, c.merged + c.held + c.refused_total());
    prop_assert_eq!(c.delivered, out.len() as u64);
    // Only a lone PSH segment is ever delivered without being held.
    prop_assert_eq!(c.refused_total(), c.refused(FlushReason::Psh), "{}", c);

    // Per flow, in delivery order, re-segmented: exactly what arrived.
    let mut got: BTreeMap<(Kind, u32, u16), Vec<Vec<u8>>> = BTreeMap::new();
    let mut frames_per_flow: BTreeMap<(Kind, u32, u16), usize> = BTreeMap::new();
    for (f, m) in &out {
        let key = identity_of(f);
        *frames_per_flow.entry(key).or_default() += 1;
        got.entry(key).or_default().extend(resegment(f, m));
    }
    prop_assert_eq!(got.len(), flows.len());
    for (key, want) in &flows {
        prop_assert!(
            got.get(key) == Some(want),
            "flow {:?} not delivered as it came",
            key
        );
    }
    // With nothing to stop it (no loss or reordering, one batch, room in the
    // table), every flow comes out as one frame.
    if plain_run && nbatches == 1 && max_flows >= 64 {
        for (key, n) in &frames_per_flow {
            prop_assert_eq!(*n, 1, "flow {:?} not fully coalesced: {}", key, c);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gro_never_mixes_flows_and_delivers_every_segment_once_in_order(
        specs in proptest::collection::vec(spec(), 1..=6),
        schedule in proptest::collection::vec(any::<u8>(), 1..64),
        batches in proptest::collection::vec(prop_oneof![3 => Just(255u8), 1 => any::<u8>()], 1..8),
        max_flows in prop_oneof![Just(2usize), Just(8), Just(64)],
        verify_here in proptest::bool::weighted(0.25),
    ) {
        check(specs, schedule, batches, max_flows, verify_here)?;
    }
}

/// Two copies of one spec that differ only in the VNI: the same inner connection,
/// sequence numbers and IDs in two virtual networks.
fn twins() -> impl Strategy<Value = Vec<Spec>> {
    (
        spec(),
        prop_oneof![
            Just(Kind::Vxlan4),
            Just(Kind::Vxlan6Csum),
            Just(Kind::Geneve4),
            Just(Kind::Nvgre4),
        ],
    )
        .prop_map(|(mut a, kind)| {
            a.kind = kind;
            a.vni = 1;
            let mut b = a.clone();
            b.vni = 2;
            vec![a, b]
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn twins_in_different_vnis_never_merge(
        specs in twins(),
        schedule in proptest::collection::vec(any::<u8>(), 1..16),
        batches in proptest::collection::vec(prop_oneof![3 => Just(255u8), 1 => any::<u8>()], 1..4),
        verify_here in proptest::bool::weighted(0.25),
    ) {
        check(specs, schedule, batches, 64, verify_here)?;
    }
}

#[test]
fn same_connection_in_every_tunnel_kind_stays_apart() {
    // Deterministic corner: one inner connection, six encapsulations, round robin.
    let specs: Vec<Spec> = [
        Kind::Plain4,
        Kind::Plain6,
        Kind::Vxlan4,
        Kind::Vxlan6Csum,
        Kind::Geneve4,
        Kind::Nvgre4,
    ]
    .into_iter()
    .map(|kind| Spec {
        kind,
        vni: 1,
        port: 0,
        mss: 200,
        segs: 5,
        fixed_id: false,
        short_last: false,
        psh_last: false,
        lost: vec![false; 12],
        swap: vec![false; 12],
    })
    .collect();
    check(specs, vec![0, 1, 2, 3, 4, 5], vec![255], 64, false).unwrap();
}

#[test]
fn ip_kinds_are_what_they_claim() {
    // Guard the generator: IPv6 kinds really are IPv6 inside.
    let s = Spec {
        kind: Kind::Vxlan6Csum,
        vni: 1,
        port: 0,
        mss: 64,
        segs: 1,
        fixed_id: false,
        short_last: false,
        psh_last: false,
        lost: vec![false; 12],
        swap: vec![false; 12],
    };
    let f = segment(0, &s, 0);
    let l = layout::parse(&f).unwrap();
    assert_eq!(
        (l.outer.l3, l.inner.unwrap().l3),
        (L3Kind::Ipv6, L3Kind::Ipv6)
    );
    assert!(matches!(Ip::v4([0; 4], [0; 4]), Ip::V4(_)));
}
