//! Rate limits over virtual time: a tenant offering ten times its rate gets its
//! rate within 5 %, in packets and in bits, with plain frames and with GSO
//! super-frames (counted on the wire, after segmentation), and does not slow a
//! tenant under its own limit. Receive limits police.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{setup, udp_frame};
use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_nic::{Batch, Counter, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
use linerate_offload::{Gso, GsoType, OffloadMeta};
use linerate_vnic::{Exceed, Partition, PartitionConfig, RateLimit, SwitchMode, VnicConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::time::Duration;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const OUTSIDE: [u8; 6] = [2, 0, 0, 0, 0, 0xee];

/// Virtual time step and run length.
const STEP: Duration = Duration::from_micros(100);
const RUN: Duration = Duration::from_secs(1);

/// What reached the wire from one source MAC: frames and bytes.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    frames: u64,
    bytes: u64,
}

fn collect(wire: &mut MemNic, a: &mut Seen, b: &mut Seen) {
    let mut batch = Batch::new();
    while wire.receive(0, &mut batch, 1024).unwrap() > 0 {}
    for f in batch.iter() {
        let s = if f.bytes()[6..12] == A {
            &mut *a
        } else {
            &mut *b
        };
        s.frames += 1;
        s.bytes += f.len() as u64;
    }
}

/// Offers `per_step` copies of `frame` (with `meta`) from `nic` every step for
/// [`RUN`]; frames it does not take are not offered again (the offer is fresh).
fn offer<N: Nic>(nic: &mut N, frame: &[u8], meta: OffloadMeta, per_step: usize, batch: &mut Batch) {
    batch.clear();
    for _ in 0..per_step {
        batch.push(Frame::new(nic.pool().alloc_from(frame), meta));
    }
    let _ = nic.transmit(0, batch);
    batch.clear();
}

fn within(got: f64, want: f64, what: &str) {
    let err = (got - want).abs() / want;
    assert!(
        err <= 0.05,
        "{what}: {got:.0} against {want:.0} ({:.1} % off)",
        err * 100.0
    );
}

#[test]
fn packets_per_second_within_five_percent_at_ten_times_the_offer() {
    let (part, mut wire, clock) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut a = part
        .add(VnicConfig {
            tx_rate: Some(RateLimit::packets(10_000)),
            ..VnicConfig::new(A)
        })
        .unwrap();
    let f = udp_frame(A, OUTSIDE, None, 0, 100);
    let (mut sa, mut sb, mut batch) = (Seen::default(), Seen::default(), Batch::new());
    // 10 frames per 100 us: 100,000 packets/s offered.
    while clock.now() < RUN {
        offer(&mut a, &f, OffloadMeta::plain(), 10, &mut batch);
        collect(&mut wire, &mut sa, &mut sb);
        clock.advance(STEP);
    }
    within(sa.frames as f64, 10_000.0, "packets in one second");
    assert!(a.counters().total(Counter::TxThrottled) > 0);
    assert_eq!(
        a.counters().total(Counter::TxDroppedRate),
        0,
        "shaping drops nothing"
    );
}

#[test]
fn bits_per_second_within_five_percent_and_a_second_tenant_is_not_slowed() {
    let (part, mut wire, clock) = setup(SwitchMode::Veb, NicCaps::plain());
    let limit = RateLimit::bits(100_000_000);
    let mut a = part
        .add(VnicConfig {
            tx_rate: Some(limit),
            ..VnicConfig::new(A)
        })
        .unwrap();
    let mut b = part
        .add(VnicConfig {
            tx_rate: Some(limit),
            ..VnicConfig::new(B)
        })
        .unwrap();
    let fa = udp_frame(A, OUTSIDE, None, 0, 1000);
    let fb = udp_frame(B, OUTSIDE, None, 0, 1000);
    let (mut sa, mut sb, mut batch) = (Seen::default(), Seen::default(), Batch::new());
    let mut offered_b = 0u64;
    let mut step = 0u64;
    while clock.now() < RUN {
        // A: 12 frames of 1,046 bytes per 100 us, 1 Gbit/s (10x). B: one frame
        // every other step, 42 Mbit/s (under its 100).
        offer(&mut a, &fa, OffloadMeta::plain(), 12, &mut batch);
        if step.is_multiple_of(2) {
            offer(&mut b, &fb, OffloadMeta::plain(), 1, &mut batch);
            offered_b += 1;
        }
        collect(&mut wire, &mut sa, &mut sb);
        clock.advance(STEP);
        step += 1;
    }
    within((sa.bytes * 8) as f64, 100e6, "A's bits in one second");
    assert_eq!(sb.frames, offered_b, "B sent everything it offered");
}

/// A TCP super-frame of `len` payload bytes with GSO size `mss`, from A.
fn super_frame(len: usize, mss: u16) -> (Vec<u8>, OffloadMeta) {
    let payload = vec![0x42u8; len];
    let mut frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40_000, 80))
        .macs(A, OUTSIDE)
        .build(&payload);
    let l = linerate_wire::layout::parse(&frame).unwrap();
    let csum = linerate_offload::csum::prepare_partial(&mut frame, &l).unwrap();
    (
        frame,
        OffloadMeta {
            csum,
            gso: Some(Gso::new(GsoType::TcpV4, mss)),
            rss: None,
        },
    )
}

#[test]
fn gso_super_frames_are_charged_by_their_segments() {
    for (limit, bits) in [
        (RateLimit::bits(200_000_000), true),
        (RateLimit::packets(10_000), false),
    ] {
        let clock = Clock::manual();
        let (port, mut wire) = memory::pair(PairConfig {
            clock: clock.clone(),
            ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
        });
        let part = Partition::new(
            Shim::new(port, ShimConfig::all()).unwrap(),
            PartitionConfig {
                clock: clock.clone(),
                ..PartitionConfig::default()
            },
        );
        let mut a = part
            .add(VnicConfig {
                tx_rate: Some(limit),
                ..VnicConfig::new(A)
            })
            .unwrap();
        // 20,000-byte super-frames, 14 segments each on the wire.
        let (f, meta) = super_frame(20_000, 1448);
        let (mut sa, mut sb, mut batch) = (Seen::default(), Seen::default(), Batch::new());
        while clock.now() < RUN {
            // 2 super-frames per 100 us: 3.2 Gbit/s, 280,000 segments/s offered.
            offer(&mut a, &f, meta, 2, &mut batch);
            collect(&mut wire, &mut sa, &mut sb);
            clock.advance(STEP);
        }
        assert!(
            sa.frames > 0 && sa.bytes / sa.frames < 1515,
            "segments on the wire"
        );
        if bits {
            within(
                (sa.bytes * 8) as f64,
                200e6,
                "bits of segments in one second",
            );
        } else {
            within(sa.frames as f64, 10_000.0, "segments in one second");
        }
    }
}

#[test]
fn policing_drops_and_receive_limits_police() {
    let (part, mut wire, clock) = setup(SwitchMode::Veb, NicCaps::plain());
    let police = RateLimit {
        exceed: Exceed::Police,
        burst_packets: 10,
        ..RateLimit::packets(1_000)
    };
    let mut a = part
        .add(VnicConfig {
            tx_rate: Some(police),
            rx_rate: Some(RateLimit {
                burst_packets: 10,
                ..RateLimit::packets(2_000)
            }),
            ..VnicConfig::new(A)
        })
        .unwrap();
    let out = udp_frame(A, OUTSIDE, None, 0, 100);
    let inbound = udp_frame(OUTSIDE, A, None, 0, 100);
    let (mut sa, mut sb, mut batch) = (Seen::default(), Seen::default(), Batch::new());
    let mut received = 0u64;
    let mut offered = 0u64;
    while clock.now() < RUN {
        // Each 100 us: one frame out (10,000/s against 1,000) and two in (20,000/s
        // against 2,000).
        batch.push(Frame::plain(a.pool().alloc_from(&out)));
        assert_eq!(
            a.transmit(0, &mut batch).unwrap(),
            1,
            "policing takes every frame"
        );
        offered += 1;
        for _ in 0..2 {
            batch.push(Frame::plain(wire.pool().alloc_from(&inbound)));
        }
        wire.transmit(0, &mut batch).unwrap();
        received += a.receive(0, &mut batch, 64).unwrap() as u64;
        batch.clear();
        collect(&mut wire, &mut sa, &mut sb);
        clock.advance(STEP);
    }
    within(sa.frames as f64, 1_000.0, "policed packets out");
    assert_eq!(
        a.counters().total(Counter::TxDroppedRate),
        offered - sa.frames,
        "every frame over the rate dropped and counted"
    );
    within(received as f64, 2_000.0, "policed packets in");
    assert_eq!(
        a.counters().total(Counter::RxDroppedRate),
        20_000 - received
    );
}
