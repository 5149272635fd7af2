//! Checksums GRO verifies itself, the innermost one while it copies the payload:
//! a segment with a wrong checksum is never merged, held or marked verified,
//! wherever the wrong byte is (IP header, TCP header, checksum field, first or
//! last payload byte) and whichever path the segment takes (starting a run,
//! joining one, ending one, making room in a full bucket, FIN/PSH on its own),
//! with payloads long enough for the vector kernel and short ones.
//!
//! The segments are built by `FrameBuilder` (etherparse computes their checksums);
//! `csum::verify` (the NIC layer's verifier, another code path) confirms which one
//! is bad before GRO sees it.

// Test code: a panic is a failed test.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use super::{FlushReason, Gro, GroConfig};
use crate::csum;
use crate::meta::{Checksum, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::TcpHeader;
use linerate_wire::layout;

/// Segment `i` of a flow from port `sport` with `mss`-byte payloads (the last
/// one `last` bytes), IPv4 IDs incrementing, ACK set.
fn segment(sport: u16, i: usize, mss: usize, len: usize, psh: bool) -> Vec<u8> {
    let seq = 1000 + (i * mss) as u32;
    let mut tcp = TcpHeader::new(sport, 80, seq, 5000);
    tcp.ack = true;
    tcp.acknowledgment_number = 77;
    tcp.psh = psh;
    let mut ip = Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
    if let Ip::V4(h) = &mut ip {
        h.identification = 300 + i as u16;
    }
    let payload: Vec<u8> = (0..len)
        .map(|k| (k as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(101) ^ 0x5a)
        .collect();
    FrameBuilder::new(ip, L4::Tcp(tcp)).build(&payload)
}

/// `n` segments of one flow; the last is `last` bytes long.
fn train(n: usize, mss: usize, last: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| segment(40_000, i, mss, if i + 1 == n { last } else { mss }, false))
        .collect()
}

/// Where a byte is flipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spot {
    /// The IPv4 TTL (the header checksum no longer matches).
    IpTtl,
    /// A byte of the TCP source port (another flow hash).
    TcpPort,
    /// A byte of the sequence number.
    TcpSeq,
    /// A byte of the window (a flush rule too).
    TcpWindow,
    /// The TCP checksum field itself.
    TcpCsum,
    /// The first payload byte.
    PayloadFirst,
    /// The last payload byte.
    PayloadLast,
}

const SPOTS: [Spot; 7] = [
    Spot::IpTtl,
    Spot::TcpPort,
    Spot::TcpSeq,
    Spot::TcpWindow,
    Spot::TcpCsum,
    Spot::PayloadFirst,
    Spot::PayloadLast,
];

/// `f` with the byte at `spot` flipped.
fn corrupt(f: &[u8], spot: Spot) -> Vec<u8> {
    let mut f = f.to_vec();
    let at = match spot {
        Spot::IpTtl => 14 + 8,
        Spot::TcpPort => 34 + 1,
        Spot::TcpSeq => 34 + 7,
        Spot::TcpWindow => 34 + 15,
        Spot::TcpCsum => 34 + 17,
        Spot::PayloadFirst => 54,
        Spot::PayloadLast => f.len() - 1,
    };
    f[at] ^= 0x21;
    f
}

/// Feeds `frames` unverified as one batch; returns what GRO delivered.
fn run(g: &mut Gro, frames: &[Vec<u8>]) -> Vec<(Vec<u8>, OffloadMeta)> {
    let mut out = Vec::new();
    g.receive_batch(
        0,
        frames.iter().map(|f| (f.as_slice(), OffloadMeta::plain())),
        &mut |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m)),
    );
    out
}

/// The payload of a (possibly merged) frame.
fn payload(f: &[u8]) -> &[u8] {
    let l = layout::parse(f).unwrap();
    &f[l.header_len()..]
}

/// Asserts what must hold whenever `bad` (the segment at `at` of `frames`) is
/// fed with the others: it comes out once, unchanged and not marked verified;
/// everything else comes out verified (or merged), and the good payloads come out
/// in order, none lost, none merged with the bad one; every packet is accounted.
fn assert_isolated(g: &Gro, frames: &[Vec<u8>], at: usize, out: &[(Vec<u8>, OffloadMeta)]) {
    let bad = &frames[at];
    let ctx = format!("bad segment {at} of {}: {}", frames.len(), g.counters());
    let l = layout::parse(bad).unwrap();
    assert!(!csum::verify(bad, &l).ok(), "{ctx}: the segment is not bad");
    let alone: Vec<_> = out.iter().filter(|(f, _)| f == bad).collect();
    assert_eq!(alone.len(), 1, "{ctx}");
    let (_, m) = alone[0];
    assert!(m.gso.is_none(), "{ctx}");
    assert!(!matches!(m.csum, Checksum::Verified { .. }), "{ctx}: {m:?}");
    let mut got = Vec::new();
    for (f, m) in out.iter().filter(|(f, _)| f != bad) {
        match m.gso {
            Some(_) => assert!(matches!(m.csum, Checksum::Partial { .. }), "{ctx}"),
            None => assert_eq!(m.csum, Checksum::Verified { levels: 1 }, "{ctx}"),
        }
        got.extend_from_slice(payload(f));
    }
    let want: Vec<u8> = frames
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != at)
        .flat_map(|(_, f)| payload(f).to_vec())
        .collect();
    assert!(got == want, "{ctx}: good payloads not delivered as sent");
    let c = g.counters();
    assert_eq!(c.received, frames.len() as u64, "{ctx}");
    assert_eq!(c.received, c.merged + c.held + c.refused_total(), "{ctx}");
    assert_eq!(c.refused_total(), 1, "{ctx}");
    assert_eq!(c.csum_verified, frames.len() as u64 - 1, "{ctx}");
    assert_eq!(c.delivered, out.len() as u64, "{ctx}");
    assert_eq!(g.held(), 0, "{ctx}");
}

/// The reason a segment with a byte flipped at `spot` is refused for.
fn reason(spot: Spot) -> FlushReason {
    match spot {
        Spot::IpTtl => FlushReason::IpCsum,
        _ => FlushReason::CsumBad,
    }
}

#[test]
fn a_bad_segment_anywhere_in_a_train_is_refused_alone() {
    // 1448: the vector kernel; 100: the portable one; odd last lengths.
    for (mss, last) in [(1448, 1448), (1448, 1001), (100, 100), (100, 37)] {
        for at in [0, 1, 3, 5] {
            for spot in SPOTS {
                let mut frames = train(6, mss, last);
                frames[at] = corrupt(&frames[at], spot);
                let mut g = Gro::new(GroConfig::default());
                let out = run(&mut g, &frames);
                assert_isolated(&g, &frames, at, &out);
                let c = g.counters();
                assert_eq!(c.refused(reason(spot)), 1, "{spot:?} at {at}: {c}");
                // A flipped window or sequence number is not what ends the run:
                // the checksum comes first. A flipped port makes it another
                // flow's segment, which leaves the run alone: the next segment
                // ends it (a sequence gap).
                let gap = spot == Spot::TcpPort && at > 0 && at < 5;
                assert_eq!(c.flushed(FlushReason::Window), 0, "{spot:?} at {at}: {c}");
                assert_eq!(
                    c.flushed(FlushReason::SeqGap),
                    u64::from(gap),
                    "{spot:?} at {at}: {c}"
                );
                if spot != Spot::TcpPort {
                    // Same flow: the runs are exactly those before and after it.
                    let segs: Vec<u16> = out
                        .iter()
                        .filter(|(f, _)| *f != frames[at])
                        .map(|(_, m)| m.gso.map_or(1, |g| g.segs))
                        .collect();
                    let want: Vec<u16> = [at, 5 - at]
                        .into_iter()
                        .filter(|&n| n > 0)
                        .map(|n| n as u16)
                        .collect();
                    assert_eq!(segs, want, "{spot:?} at {at}: {c}");
                }
            }
        }
    }
}

#[test]
fn good_segments_are_verified_once_and_marked() {
    let frames = train(4, 1448, 700);
    let mut g = Gro::new(GroConfig::default());
    let out = run(&mut g, &frames);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].1.gso.unwrap().segs, 4);
    assert_eq!(g.counters().csum_verified, 4);
    // A run of one: delivered as it came, marked verified.
    let mut g = Gro::new(GroConfig::default());
    let out = run(&mut g, &frames[..1]);
    assert_eq!(out, [(frames[0].clone(), verified_meta())]);
    // Already verified by the NIC: nothing counted, the meta as it came.
    let mut g = Gro::new(GroConfig::default());
    let mut out = Vec::new();
    g.receive_batch(
        0,
        [(frames[0].as_slice(), verified_meta())],
        &mut |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m)),
    );
    assert_eq!(out, [(frames[0].clone(), verified_meta())]);
    assert_eq!(g.counters().csum_verified, 0);
}

fn verified_meta() -> OffloadMeta {
    OffloadMeta {
        csum: Checksum::Verified { levels: 1 },
        ..OffloadMeta::plain()
    }
}

#[test]
fn a_bad_segment_that_would_end_a_run_is_refused_for_its_checksum() {
    // Segment 2 has another window (a flush rule) and a bad payload byte.
    let mut frames = train(5, 1448, 1448);
    let mut tcp = TcpHeader::new(40_000, 80, 1000 + 2 * 1448, 4000);
    tcp.ack = true;
    tcp.acknowledgment_number = 77;
    let mut ip = Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
    if let Ip::V4(h) = &mut ip {
        h.identification = 302;
    }
    let good = FrameBuilder::new(ip, L4::Tcp(tcp)).build(payload(&frames[2]));
    frames[2] = corrupt(&good, Spot::PayloadFirst);
    let mut g = Gro::new(GroConfig::default());
    let out = run(&mut g, &frames);
    assert_isolated(&g, &frames, 2, &out);
    let c = g.counters();
    assert_eq!(c.flushed(FlushReason::Window), 0, "{c}");
    assert_eq!(c.flushed(FlushReason::CsumBad), 1, "{c}");
    // The same segment, good: it ends the run for its window (and its own run
    // ends when the window changes back).
    frames[2] = good;
    let mut g = Gro::new(GroConfig::default());
    run(&mut g, &frames);
    assert_eq!(g.counters().flushed(FlushReason::Window), 2);
}

#[test]
fn a_bad_segment_of_a_new_flow_in_a_full_bucket_makes_no_room() {
    let cfg = GroConfig {
        max_flows: 1,
        ..GroConfig::default()
    };
    let a = train(3, 1448, 1448);
    for spot in [Spot::PayloadFirst, Spot::PayloadLast, Spot::TcpCsum] {
        let b = corrupt(&segment(40_001, 0, 1448, 1448, false), spot);
        let frames = [a[0].clone(), a[1].clone(), b.clone(), a[2].clone()];
        let mut g = Gro::new(cfg);
        let out = run(&mut g, &frames);
        assert_isolated(&g, &frames, 2, &out);
        let c = g.counters();
        assert_eq!(c.flushed(FlushReason::TableFull), 0, "{spot:?}: {c}");
        assert_eq!(out.len(), 2, "{spot:?}: {c}");
        assert_eq!(out[1].1.gso.unwrap().segs, 3, "{spot:?}: {c}");
        // A good one does make room.
        let b = segment(40_001, 0, 1448, 1448, false);
        let mut g = Gro::new(cfg);
        run(&mut g, &[a[0].clone(), b]);
        assert_eq!(g.counters().flushed(FlushReason::TableFull), 1);
    }
}

#[test]
fn a_bad_psh_segment_with_no_run_is_refused_for_its_checksum() {
    let good = segment(40_000, 0, 1448, 1448, true);
    for spot in [Spot::PayloadFirst, Spot::PayloadLast, Spot::TcpCsum] {
        let bad = corrupt(&good, spot);
        let mut g = Gro::new(GroConfig::default());
        let out = run(&mut g, std::slice::from_ref(&bad));
        assert_eq!(out, [(bad, OffloadMeta::plain())], "{spot:?}");
        let c = g.counters();
        assert_eq!(
            (c.refused(FlushReason::CsumBad), c.refused(FlushReason::Psh)),
            (1, 0),
            "{c}"
        );
    }
    // Good, it is refused for PSH and delivered marked verified.
    let mut g = Gro::new(GroConfig::default());
    let out = run(&mut g, std::slice::from_ref(&good));
    assert_eq!(out, [(good, verified_meta())]);
    assert_eq!(g.counters().refused(FlushReason::Psh), 1);
    assert_eq!(g.counters().csum_verified, 1);
}
