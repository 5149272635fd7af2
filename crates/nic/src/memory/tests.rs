//! Memory backend: MTU enforcement, fault rates over a million frames,
//! reproducibility, delay and rate in virtual time, rings, the switch.

use super::*;
use crate::caps::Offloads;
use crate::counters::Counter;
use crate::pcap::MemoryRecorder;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};

const MAC_A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];

/// A 60-byte test frame carrying `seq` three times (plain, inverted, byte-swapped),
/// so that a majority vote recovers it after a single flipped bit.
fn seq_frame(seq: u32) -> [u8; 60] {
    let mut f = [0u8; 60];
    f[..6].copy_from_slice(&MAC_B);
    f[6..12].copy_from_slice(&MAC_A);
    f[12..14].copy_from_slice(&[0x88, 0xb5]);
    f[14..18].copy_from_slice(&seq.to_be_bytes());
    f[18..22].copy_from_slice(&(!seq).to_be_bytes());
    f[22..26].copy_from_slice(&seq.swap_bytes().to_be_bytes());
    for (i, b) in f[26..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(i as u8);
    }
    f
}

/// The sequence number of a received test frame and whether it was corrupted.
fn decode(bytes: &[u8]) -> (u32, bool) {
    let a = u32::from_be_bytes(bytes[14..18].try_into().unwrap());
    let b = !u32::from_be_bytes(bytes[18..22].try_into().unwrap());
    let c = u32::from_be_bytes(bytes[22..26].try_into().unwrap()).swap_bytes();
    let diff = |s: u32| {
        seq_frame(s)
            .iter()
            .zip(bytes)
            .map(|(x, y)| (x ^ y).count_ones())
            .sum::<u32>()
    };
    let seq = if a == b || a == c { a } else { b };
    let d = diff(seq);
    assert!(d <= 1, "more than one bit flipped: {d}");
    (seq, d == 1)
}

fn send_seq(nic: &mut MemNic, batch: &mut Batch, seqs: std::ops::Range<u32>) {
    for s in seqs {
        batch.push(Frame::plain(nic.pool().alloc_from(&seq_frame(s))));
    }
    let n = batch.len();
    assert_eq!(nic.transmit(0, batch).unwrap(), n);
}

fn drain(nic: &mut MemNic, batch: &mut Batch) {
    while nic.receive(0, batch, 4096).unwrap() > 0 {}
}

fn tcp4(payload: usize) -> Vec<u8> {
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1000, 80))
        .macs(MAC_A, MAC_B)
        .build(&vec![0x5a; payload])
}

fn super_frame(payload: usize, mss: u16) -> Frame {
    Frame::new(
        PacketBuf::from_slice(&tcp4(payload)),
        OffloadMeta {
            csum: Checksum::Partial {
                start: 34,
                offset: 16,
            },
            gso: Some(Gso::new(GsoType::TcpV4, mss)),
            ..OffloadMeta::plain()
        },
    )
}

use crate::buf::PacketBuf;

#[test]
fn pair_moves_frames_both_ways_and_counts() {
    let (mut a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut batch = Batch::new();
    send_seq(&mut a, &mut batch, 0..10);
    send_seq(&mut b, &mut batch, 100..105);
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 4).unwrap(), 4);
    assert_eq!(b.receive(0, &mut got, 100).unwrap(), 6);
    assert_eq!(b.receive(0, &mut got, 100).unwrap(), 0);
    let seqs: Vec<u32> = got.iter().map(|f| decode(f.bytes()).0).collect();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    got.clear();
    assert_eq!(a.receive(0, &mut got, 100).unwrap(), 5);
    let s = a.counters().snapshot();
    assert_eq!(s.total(Counter::TxPackets), 10);
    assert_eq!(s.total(Counter::TxBytes), 600);
    assert_eq!(s.total(Counter::RxPackets), 5);
    assert_eq!(b.counters().total(Counter::RxBytes), 600);
    assert!(matches!(
        a.receive(1, &mut got, 1),
        Err(NicError::NoQueue {
            queue: 1,
            queues: 1
        })
    ));
}

#[test]
fn queues_map_through_modulo_the_peer_queues() {
    let four = NicCaps {
        queues: 4,
        ..NicCaps::plain()
    };
    let two = NicCaps {
        queues: 2,
        ..NicCaps::plain()
    };
    let (mut a, mut b) = MemNic::pair(four, two);
    let mut batch = Batch::new();
    for q in 0..4 {
        batch.push(Frame::plain(a.pool().alloc_from(&seq_frame(q as u32))));
        a.transmit(q, &mut batch).unwrap();
    }
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 2);
    assert_eq!(b.receive(1, &mut got, 10).unwrap(), 2);
    let seqs: Vec<u32> = got.iter().map(|f| decode(f.bytes()).0).collect();
    assert_eq!(seqs, vec![0, 2, 1, 3]);
    assert_eq!(b.counters().get(1, Counter::RxPackets), 2);
}

/// `split`: one NIC per queue, each seeing only its queue, the port's counters
/// kept in the port's numbering, frames mapped through as before.
#[test]
fn a_split_port_is_one_nic_per_queue() {
    let two = NicCaps {
        queues: 2,
        ..NicCaps::plain()
    };
    let (a, b) = MemNic::pair(two, two);
    let counters = b.counters().clone();
    let mut a = a.split();
    let mut b = b.split();
    assert_eq!((a.len(), b.len()), (2, 2));
    assert!(a.iter().chain(&b).all(|n| n.queues() == 1));
    for (q, nic) in a.iter_mut().enumerate() {
        let mut batch: Batch = (0..3u32)
            .map(|i| Frame::plain(nic.pool().alloc_from(&seq_frame(10 * q as u32 + i))))
            .collect();
        assert_eq!(nic.transmit(0, &mut batch).unwrap(), 3);
        assert!(nic.transmit(1, &mut batch).is_err(), "one queue each");
    }
    for (q, nic) in b.iter_mut().enumerate() {
        assert!(matches!(nic.readiness(0), Ok(Readiness::Notify(_))));
        let mut got = Batch::new();
        assert_eq!(nic.receive(0, &mut got, 10).unwrap(), 3);
        let seqs: Vec<u32> = got.iter().map(|f| decode(f.bytes()).0).collect();
        let q = q as u32;
        assert_eq!(seqs, vec![10 * q, 10 * q + 1, 10 * q + 2], "queue {q}");
    }
    assert_eq!(counters.get(0, Counter::RxPackets), 3);
    assert_eq!(counters.get(1, Counter::RxPackets), 3);
    // A split one-queue port is the port itself.
    let (one, _) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    assert_eq!(one.split().len(), 1);
}

/// Each queue's direction has its own wire, and its own seeded faults: a
/// lossy two-queue pair loses on both queues, reproducibly.
#[test]
fn each_queue_has_its_own_seeded_faults() {
    let two = NicCaps {
        queues: 2,
        ..NicCaps::plain()
    };
    let run = || {
        let (mut a, mut b) = pair(PairConfig {
            a_to_b: Faults {
                loss: 0.3,
                ..Faults::NONE
            },
            seed: 11,
            ..PairConfig::new(two, two)
        });
        let mut kept = Vec::new();
        for q in 0..2 {
            let mut batch: Batch = (0..200u32)
                .map(|i| Frame::plain(a.pool().alloc_from(&seq_frame(i))))
                .collect();
            a.transmit(q, &mut batch).unwrap();
            let mut got = Batch::new();
            while b.receive(q, &mut got, 256).unwrap() > 0 {}
            kept.push(got.iter().map(|f| decode(f.bytes()).0).collect::<Vec<_>>());
        }
        kept
    };
    let first = run();
    for k in &first {
        assert!(
            k.len() > 100 && k.len() < 180,
            "about 70 % kept: {}",
            k.len()
        );
    }
    assert_ne!(first[0], first[1], "the queues draw their own faults");
    assert_eq!(first, run(), "the same seed, the same losses");
}

#[test]
fn mtu_is_enforced_and_never_passed_silently() {
    let (mut a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut batch = Batch::new();
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(100))));
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(1461)))); // 1515 bytes
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(200))));
    match a.transmit(0, &mut batch) {
        Err(NicError::Oversize {
            len: 1515,
            limit: 1514,
        }) => {}
        other => panic!("{other:?}"),
    }
    // The frame before it went, the oversize one is gone, the one after waits.
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].len(), 14 + 20 + 20 + 200);
    assert_eq!(a.counters().total(Counter::TxDroppedOversize), 1);
    assert_eq!(a.counters().total(Counter::TxPackets), 1);
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 1);
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 1);

    // A 1514-byte frame is fine; MTU-sized segments of a super-frame are refused
    // where the port has no TSO.
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(1460))));
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 1);
    batch.push(super_frame(20_000, 1460));
    assert!(matches!(
        a.transmit(0, &mut batch),
        Err(NicError::Unsupported(_))
    ));
    assert_eq!(a.counters().total(Counter::TxDroppedUnsupported), 1);
    got.clear();
    drain(&mut b, &mut got);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|f| f.len() <= 1514));
}

#[test]
fn a_tso_port_sends_super_frames_whole_and_marked() {
    let tso = NicCaps {
        offloads: Offloads {
            tx_csum: true,
            tso4: true,
            ..Offloads::NONE
        },
        ..NicCaps::plain()
    };
    let (mut a, mut b) = MemNic::pair(tso, NicCaps::plain());
    let mut batch = Batch::new();
    batch.push(super_frame(60_000, 1460));
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 1);
    // Segments of 1461 bytes would not fit.
    batch.push(super_frame(60_000, 1461));
    assert!(matches!(
        a.transmit(0, &mut batch),
        Err(NicError::Oversize { len: 1515, .. })
    ));
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 1);
    assert_eq!(got[0].len(), 60_054);
    assert_eq!(got[0].meta.gso, Some(Gso::new(GsoType::TcpV4, 1460)));
    assert_eq!(a.counters().total(Counter::TxGsoPackets), 1);
    assert_eq!(b.counters().total(Counter::RxGsoPackets), 1);
}

#[test]
fn a_receiver_with_a_smaller_mtu_drops_what_does_not_fit() {
    let jumbo = NicCaps {
        mtu: 9000,
        ..NicCaps::plain()
    };
    let (mut a, mut b) = MemNic::pair(jumbo, NicCaps::plain());
    let mut batch = Batch::new();
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(4000))));
    batch.push(Frame::plain(a.pool().alloc_from(&tcp4(1000))));
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 2);
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 1);
    assert_eq!(b.counters().total(Counter::RxDroppedOversize), 1);
}

#[test]
fn full_rings_drop_and_count() {
    let mut cfg = PairConfig::new(NicCaps::plain(), NicCaps::plain());
    cfg.b.ring_len = 8;
    let (mut a, mut b) = pair(cfg);
    let mut batch = Batch::new();
    send_seq(&mut a, &mut batch, 0..20);
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 100).unwrap(), 8);
    assert_eq!(b.counters().total(Counter::RxDroppedRingFull), 12);
}

/// A batch moves into the ring as one run (`Wire::push_batch`): frames come
/// out in order, `max` at a time, across batches, with the sender's hash gone.
#[test]
fn batches_arrive_whole_in_order_and_unhashed() {
    let (mut a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut batch = Batch::new();
    for range in [0..10, 10..25] {
        for s in range {
            let mut f = Frame::plain(a.pool().alloc_from(&seq_frame(s)));
            f.meta.rss = Some(linerate_offload::RssHash {
                value: s,
                kind: linerate_offload::RssHashType::Ipv4,
            });
            batch.push(f);
        }
        let n = batch.len();
        assert_eq!(a.transmit(0, &mut batch).unwrap(), n);
        assert!(batch.is_empty());
    }
    assert_eq!(b.pending(0), 25);
    let mut seqs = Vec::new();
    let mut got = Batch::new();
    loop {
        let n = b.receive(0, &mut got, 3).unwrap();
        assert!(n <= 3);
        if n == 0 {
            break;
        }
        for f in got.drain(..) {
            assert_eq!(f.meta.rss, None);
            seqs.push(decode(f.bytes()).0);
        }
    }
    assert_eq!(seqs, (0..25).collect::<Vec<_>>());
    assert_eq!(b.counters().total(Counter::RxPackets), 25);
    // A whole batch into an empty ring and out to an empty batch (storage
    // exchanged both ways), twice, then onto frames still waiting.
    for round in 0..3u32 {
        for s in 0..7 {
            batch.push(Frame::plain(
                a.pool().alloc_from(&seq_frame(100 * round + s)),
            ));
        }
        assert_eq!(a.transmit(0, &mut batch).unwrap(), 7);
        assert!(batch.is_empty());
        if round < 2 {
            assert_eq!(b.receive(0, &mut got, 64).unwrap(), 7);
            let seqs: Vec<u32> = got.drain(..).map(|f| decode(f.bytes()).0).collect();
            assert_eq!(seqs, (0..7).map(|s| 100 * round + s).collect::<Vec<_>>());
        }
    }
    for s in 0..3 {
        batch.push(Frame::plain(a.pool().alloc_from(&seq_frame(300 + s))));
    }
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 3);
    got.push(Frame::plain(a.pool().alloc_from(&seq_frame(999))));
    assert_eq!(b.receive(0, &mut got, 64).unwrap(), 10);
    let seqs: Vec<u32> = got.drain(..).map(|f| decode(f.bytes()).0).collect();
    assert_eq!(
        seqs,
        [999, 200, 201, 202, 203, 204, 205, 206, 300, 301, 302]
    );
}

/// What a receiver measured of a faulty wire.
#[derive(Debug, Default)]
struct Measured {
    received: u64,
    distinct: u64,
    duplicates: u64,
    corrupted: u64,
    late: u64,
}

fn measure(frames: &[Frame], seen: &mut [u8], max_seen: &mut Option<u32>, m: &mut Measured) {
    for f in frames {
        let (seq, corrupt) = decode(f.bytes());
        m.received += 1;
        let slot = &mut seen[seq as usize];
        *slot += 1;
        if *slot == 1 {
            m.distinct += 1;
            if corrupt {
                m.corrupted += 1;
            }
            if max_seen.is_some_and(|mx| seq < mx) {
                m.late += 1;
            }
        } else {
            m.duplicates += 1;
        }
        *max_seen = Some(max_seen.map_or(seq, |mx| mx.max(seq)));
    }
}

/// `got` is within 5 standard deviations of `n` draws with probability `p`.
fn within(what: &str, got: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (got as f64 - mean).abs() <= 5.0 * sd,
        "{what}: measured {got}, expected {mean:.0} +- {:.0}",
        5.0 * sd
    );
}

#[test]
fn fault_rates_match_the_configuration_over_a_million_frames() {
    const N: u32 = 1_000_000;
    let faults = Faults {
        loss: 0.02,
        corrupt: 0.01,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_depth: 4,
        ..Faults::NONE
    };
    let (mut a, mut b) = pair(PairConfig {
        a_to_b: faults,
        seed: 0x5eed,
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let mut seen = vec![0u8; N as usize];
    let mut max_seen = None;
    let mut m = Measured::default();
    let (mut tx, mut rx) = (Batch::with_capacity(256), Batch::with_capacity(1024));
    let mut next = 0;
    while next < N {
        let end = (next + 256).min(N);
        send_seq(&mut a, &mut tx, next..end);
        next = end;
        drain(&mut b, &mut rx);
        measure(&rx, &mut seen, &mut max_seen, &mut m);
        rx.clear();
    }
    let lost = u64::from(N) - m.distinct;
    within("loss", lost, N.into(), faults.loss);
    within("duplication", m.duplicates, m.distinct, faults.duplicate);
    within("corruption", m.corrupted, m.distinct, faults.corrupt);
    within("reordering", m.late, m.distinct, faults.reorder);
    // The wire's own counters agree with what the receiver saw.
    let s = b.counters().snapshot();
    assert_eq!(s.total(Counter::WireLost), lost);
    assert_eq!(s.total(Counter::WireDuplicated), m.duplicates);
    assert_eq!(s.total(Counter::WireCorrupted), m.corrupted);
    // A frame held at the end of a burst is released when the receiver finds
    // the ring idle, behind no later frame: held, but not measurably late.
    let held = s.total(Counter::WireReordered);
    assert!(
        held >= m.late && held - m.late <= held / 100,
        "held {held}, late {}",
        m.late
    );
    assert_eq!(s.total(Counter::RxPackets), m.received);
    assert_eq!(a.counters().total(Counter::TxPackets), u64::from(N));
    // The pool is warm: buffers were recycled, not allocated per frame.
    let pool = a.pool().stats();
    assert!(pool.allocated < 3000, "{pool:?}");
}

/// Sends `n` frames through a wire with every fault on, advancing the virtual
/// clock, and returns what arrived, in order, with arrival times.
fn faulty_run(seed: u64, n: u32) -> Vec<(Duration, Vec<u8>)> {
    let faults = Faults {
        loss: 0.05,
        corrupt: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        reorder_depth: 3,
        delay: Duration::from_micros(50),
        rate: Some(RateLimit::new(1_000_000_000, Duration::from_micros(20))),
    };
    let (mut a, mut b) = pair(PairConfig {
        a_to_b: faults,
        seed,
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let clock = a.clock().clone();
    let (mut tx, mut rx) = (Batch::new(), Batch::new());
    let mut out = Vec::new();
    for chunk in 0..n / 10 {
        send_seq(&mut a, &mut tx, chunk * 10..chunk * 10 + 10);
        clock.advance(Duration::from_micros(10));
        drain(&mut b, &mut rx);
        out.extend(rx.drain(..).map(|f| (clock.now(), f.bytes().to_vec())));
    }
    clock.advance(Duration::from_secs(1));
    drain(&mut b, &mut rx);
    out.extend(rx.drain(..).map(|f| (clock.now(), f.bytes().to_vec())));
    out
}

#[test]
fn the_same_seed_gives_the_same_sequence() {
    let first = faulty_run(42, 20_000);
    assert!(first.len() > 10_000);
    assert_eq!(first, faulty_run(42, 20_000));
    assert_ne!(first, faulty_run(43, 20_000));
}

#[test]
fn delay_runs_on_the_virtual_clock() {
    let (mut a, mut b) = pair(PairConfig {
        a_to_b: Faults {
            delay: Duration::from_millis(1),
            ..Faults::NONE
        },
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let mut batch = Batch::new();
    send_seq(&mut a, &mut batch, 0..3);
    let mut got = Batch::new();
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 0);
    assert_eq!(b.next_arrival(0), Some(Duration::from_millis(1)));
    assert_eq!(b.pending(0), 3);
    b.clock().advance(Duration::from_micros(999));
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 0);
    b.clock().advance(Duration::from_micros(1));
    assert_eq!(b.receive(0, &mut got, 10).unwrap(), 3);
    assert_eq!(b.next_arrival(0), None);
}

#[test]
fn rate_limit_delivers_the_link_rate_and_drops_the_excess() {
    // 1 Gbit/s; 1000-byte frames take (1000 + 24) * 8 = 8192 ns. Offer twice
    // that for 100 ms of virtual time.
    let (mut a, mut b) = pair(PairConfig {
        a_to_b: Faults {
            rate: Some(RateLimit::new(1_000_000_000, Duration::from_micros(100))),
            ..Faults::NONE
        },
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let clock = a.clock().clone();
    let frame = [0u8; 1000];
    let (mut tx, mut rx) = (Batch::new(), Batch::new());
    let mut delivered = 0u64;
    let offered = 100_000_000 / 4096;
    for _ in 0..offered / 8 {
        for _ in 0..8 {
            tx.push(Frame::plain(a.pool().alloc_from(&frame)));
        }
        a.transmit(0, &mut tx).unwrap();
        clock.advance(Duration::from_nanos(8 * 4096));
        delivered += b.receive(0, &mut rx, 1000).unwrap() as u64;
        rx.clear();
    }
    let expected = 100_000_000 / 8192;
    assert!(
        delivered.abs_diff(expected) <= expected / 100,
        "delivered {delivered}, expected {expected}"
    );
    let dropped = b.counters().total(Counter::WireDroppedRate);
    assert!(
        dropped.abs_diff(offered - expected) <= expected / 50,
        "dropped {dropped}"
    );
}

#[test]
fn readiness_fires_when_frames_arrive() {
    let (mut a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let Readiness::Notify(n) = b.readiness(0).unwrap() else {
        panic!("memory readiness is a Notify");
    };
    assert!(!n.try_take());
    let t = std::thread::spawn(move || n.wait_timeout(Duration::from_secs(10)));
    std::thread::sleep(Duration::from_millis(10));
    let mut batch = Batch::new();
    send_seq(&mut a, &mut batch, 0..1);
    assert!(t.join().unwrap());
}

#[test]
fn ports_run_on_separate_threads() {
    // Rings drop on overflow (as a NIC does); a receiver thread starved on a loaded
    // machine must not lose frames here, so the ring holds the whole test.
    let mut cfg = PairConfig::new(NicCaps::plain(), NicCaps::plain());
    cfg.b.ring_len = 16_384;
    let (mut a, mut b) = pair(cfg);
    let rx = std::thread::spawn(move || {
        let ready = b.readiness(0).unwrap();
        let mut got = Batch::new();
        let mut seqs = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while seqs.len() < 10_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "got {} of 10000",
                seqs.len()
            );
            if b.receive(0, &mut got, 256).unwrap() == 0 {
                ready.wait(Duration::from_millis(100)).unwrap();
            }
            seqs.extend(got.drain(..).map(|f| decode(f.bytes()).0));
        }
        seqs
    });
    let mut batch = Batch::new();
    for c in 0..100 {
        send_seq(&mut a, &mut batch, c * 100..c * 100 + 100);
    }
    assert_eq!(rx.join().unwrap(), (0..10_000).collect::<Vec<_>>());
}

#[test]
fn recorder_sees_frames_as_on_the_wire() {
    let (mut a, mut b) = pair(PairConfig {
        a_to_b: Faults {
            corrupt: 1.0,
            ..Faults::NONE
        },
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let rec = Arc::new(MemoryRecorder::new());
    a.set_recorder(Some(rec.clone()));
    b.set_recorder(Some(rec.clone()));
    let mut batch = Batch::new();
    send_seq(&mut a, &mut batch, 7..8);
    b.receive(0, &mut batch, 1).unwrap();
    let r = rec.take();
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].dir, r[1].dir), (Direction::Tx, Direction::Rx));
    assert_eq!(r[0].frame, seq_frame(7));
    assert_eq!(decode(&r[1].frame), (7, true), "the receiver saw the flip");
}

#[test]
fn switch_learns_floods_and_forwards() {
    let (sw, mut ports) = switch(SwitchConfig::new(3, NicCaps::plain()));
    let mac = |i: u8| [2, 0, 0, 0, 0, i];
    let frame = |dst: [u8; 6], src: [u8; 6]| {
        let mut f = [0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f
    };
    let mut batch = Batch::new();
    let mut send = |ports: &mut [MemNic], from: usize, bytes: [u8; 60]| {
        batch.push(Frame::plain(ports[from].pool().alloc_from(&bytes)));
        ports[from].transmit(0, &mut batch).unwrap();
    };
    // Unknown destination: flooded to ports 1 and 2; port 0 learned.
    send(&mut ports, 0, frame(mac(1), mac(0)));
    // Port 1 answers: known destination, forwarded to port 0 only.
    send(&mut ports, 1, frame(mac(0), mac(1)));
    // Broadcast from port 2: flooded.
    send(&mut ports, 2, frame([0xff; 6], mac(2)));
    // Port 0 to port 1, now learned.
    send(&mut ports, 0, frame(mac(1), mac(0)));
    let mut got = Batch::new();
    let counts: Vec<usize> = ports
        .iter_mut()
        .map(|p| {
            got.clear();
            p.receive(0, &mut got, 10).unwrap()
        })
        .collect();
    assert_eq!(counts, vec![2, 3, 1]);
    let s = sw.stats();
    assert_eq!(
        (s.forwarded, s.flooded, s.filtered, s.learned),
        (2, 2, 0, 3)
    );
    assert_eq!(sw.lookup(mac(2)), Some(2));
    assert_eq!(sw.ports(), 3);
    // A frame to a MAC learned on the sending port is filtered.
    send(&mut ports, 0, frame(mac(0), mac(0)));
    assert_eq!(sw.stats().filtered, 1);
}

#[test]
fn switch_ports_keep_their_own_caps_and_faults() {
    let mut cfg = SwitchConfig::new(3, NicCaps::plain());
    cfg.ports[1].port.caps.mtu = 9000;
    cfg.ports[2].faults.loss = 1.0;
    let (_sw, mut ports) = switch(cfg);
    let mut batch = Batch::new();
    // A 4 KiB frame from the jumbo port floods: port 0 (MTU 1500) drops it as
    // oversize, port 2's cable loses it.
    batch.push(Frame::plain(ports[1].pool().alloc_from(&tcp4(4000))));
    ports[1].transmit(0, &mut batch).unwrap();
    let mut got = Batch::new();
    assert_eq!(ports[0].receive(0, &mut got, 10).unwrap(), 0);
    assert_eq!(ports[0].counters().total(Counter::RxDroppedOversize), 1);
    assert_eq!(ports[2].counters().total(Counter::WireLost), 1);
    // The same frame from a 1500-byte port is refused at the port.
    batch.push(Frame::plain(ports[0].pool().alloc_from(&tcp4(4000))));
    assert!(ports[0].transmit(0, &mut batch).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the faults, every frame is accounted for: each one sent (plus
    /// each duplicate) is received or counted as lost, rate-dropped or dropped at
    /// a full ring; nothing stays held once the clock has run on.
    #[test]
    fn every_frame_is_accounted_for(
        loss in 0.0f64..0.3,
        corrupt in 0.0f64..0.3,
        duplicate in 0.0f64..0.3,
        reorder in 0.0f64..0.3,
        depth in 0u32..6,
        delay_us in 0u64..100,
        rate in proptest::option::of(10_000_000u64..10_000_000_000),
        ring_len in 1usize..300,
        chunks in proptest::collection::vec((1u32..40, 0u64..20), 1..30),
        seed in proptest::prelude::any::<u64>(),
    ) {
        let faults = Faults {
            loss,
            corrupt,
            duplicate,
            reorder,
            reorder_depth: depth,
            delay: Duration::from_micros(delay_us),
            rate: rate.map(|r| RateLimit::new(r, Duration::from_micros(50))),
        };
        let mut cfg = PairConfig {
            a_to_b: faults,
            seed,
            ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
        };
        cfg.b.ring_len = ring_len;
        let (mut a, mut b) = pair(cfg);
        let clock = a.clock().clone();
        let (mut tx, mut rx) = (Batch::new(), Batch::new());
        let mut seq = 0;
        let mut received = 0;
        for (n, advance_us) in chunks {
            send_seq(&mut a, &mut tx, seq..seq + n);
            seq += n;
            clock.advance(Duration::from_micros(advance_us));
            drain(&mut b, &mut rx);
            received += rx.len() as u64;
            rx.clear();
        }
        clock.advance(Duration::from_secs(10));
        drain(&mut b, &mut rx);
        received += rx.len() as u64;
        assert_eq!(b.pending(0), 0);
        let s = b.counters().snapshot();
        let sent = a.counters().total(Counter::TxPackets);
        assert_eq!(sent, u64::from(seq));
        assert_eq!(s.total(Counter::RxPackets), received);
        assert_eq!(
            sent + s.total(Counter::WireDuplicated),
            received
                + s.total(Counter::WireLost)
                + s.total(Counter::WireDroppedRate)
                + s.total(Counter::RxDroppedRingFull),
            "{}", s.ethtool()
        );
    }
}

/// Scatter-gather frames on the wire: carried by reference to a receiver that
/// opted in, gathered for one that did not, and a corruption fault flips a bit
/// in the frame it hits only, never in the payload buffer other frames share.
#[test]
fn scatter_gather_frames_by_reference_and_corruption_stays_in_its_frame() {
    use crate::buf::{Frag, SharedBuf};
    let run = |corrupt: f64, rx_sg: bool| {
        let (mut a, mut b) = pair(PairConfig {
            a_to_b: Faults {
                corrupt,
                duplicate: 0.5,
                ..Faults::NONE
            },
            seed: 5,
            ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
        });
        assert!(b.set_rx_sg(rx_sg));
        let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let shared = SharedBuf::new(a.pool().alloc_from(&payload));
        let mut batch = Batch::new();
        for i in 0..20 {
            let mut hdr = seq_frame(0)[..14].to_vec();
            hdr[11] = i as u8;
            let head = a.pool().alloc_from(&hdr);
            let frag = Frag::new(shared.clone(), 50 * i as usize, 50).unwrap();
            batch.push(Frame::with_frag(head, frag, OffloadMeta::plain()));
        }
        assert_eq!(a.transmit(0, &mut batch).unwrap(), 20);
        assert_eq!(b.receive(0, &mut batch, 100).unwrap(), batch.len());
        assert!(batch.len() > 20, "duplicates arrive too");
        assert_eq!(&shared[..], &payload[..], "shared payload written");
        let linear = batch.iter().filter(|f| f.is_linear()).count();
        let gathered = b.counters().total(Counter::SgLinearized);
        (batch, linear, gathered)
    };
    // Perfect bytes, opted in: every frame (duplicates too) points into the
    // one shared buffer, whose bytes they carry.
    let (frames, linear, gathered) = run(0.0, true);
    assert_eq!((linear, gathered), (0, 0));
    for f in frames.iter() {
        let mut v = Vec::new();
        f.gather_to_vec(&mut v);
        let i = usize::from(v[11]);
        assert_eq!(f.len(), 64);
        assert_eq!(f.first_shared().unwrap().ref_count(), frames.len());
        let want: Vec<u8> = (50 * i..50 * i + 50).map(|x| x as u8).collect();
        assert_eq!(&v[14..], &want[..]);
    }
    // Not opted in: gathered on the way up.
    let (frames, linear, gathered) = run(0.0, false);
    assert_eq!((linear, gathered), (frames.len(), frames.len() as u64));
    // Every frame corrupted: each gathered before its bit flips (a duplicate is
    // a copy of the corrupted frame, so it arrives linear as well).
    let (frames, linear, _) = run(1.0, true);
    assert_eq!(linear, frames.len());
}
