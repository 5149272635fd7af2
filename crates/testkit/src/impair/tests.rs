use super::*;
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, Offloads};
use linerate_offload::{Gso, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{SlicedPacket, TcpHeader, TransportSlice};
use std::time::Duration;

const MS: u64 = 1_000_000;

/// Frame `i`: 100 bytes, the index in its first 8, an odd multiple of it in
/// the next 8 (so no single flipped bit makes another frame), then a pattern.
fn frame(i: u64) -> Vec<u8> {
    let mut f = vec![0u8; 100];
    f[..8].copy_from_slice(&i.to_le_bytes());
    f[8..16].copy_from_slice(&i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    for (j, b) in f[16..].iter_mut().enumerate() {
        *b = (j as u8).wrapping_mul(31) ^ (i as u8);
    }
    f
}

fn index(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[..8].try_into().unwrap())
}

/// Offers `n` frames one microsecond apart, releases at the end; returns the
/// released frames.
fn run(cfg: Impairment, seed: u64, n: u64) -> (Vec<Vec<u8>>, ImpairCounters) {
    let mut line = DelayLine::new(Model::new(cfg, seed));
    let mut out = Vec::new();
    for i in 0..n {
        line.offer(i * 1_000, &frame(i));
        line.release(i * 1_000, usize::MAX, |f| out.push(f.to_vec()));
    }
    line.release(u64::MAX, usize::MAX, |f| out.push(f.to_vec()));
    (out, line.counters())
}

/// |observed - expected| within 5 standard deviations of a binomial count.
fn near(observed: u64, n: u64, p: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (observed as f64 - mean).abs() <= 5.0 * sd + 1.0,
        "{observed} of {n}, expected {mean:.0} ± {:.0}",
        5.0 * sd
    );
}

#[test]
fn fractions_match_the_probabilities_over_many_frames() {
    let n = 200_000;
    let cfg = Impairment {
        loss: 0.05,
        duplicate: 0.05,
        corrupt: 0.01,
        ..Impairment::CLEAN
    };
    for seed in [1, 2, 3] {
        let (out, c) = run(cfg, seed, n);
        assert_eq!(c.frames, n);
        near(c.duplicated, n, 0.05);
        // Loss is drawn once per frame and once more per surviving copy.
        let draws = n + c.duplicated;
        near(c.lost, draws, 0.05);
        // Counted from the frames themselves: each index seen once, twice (a
        // duplicate) or not at all (lost); a corrupted frame differs from the
        // original in one bit. An index with a flipped bit in its first 8 bytes
        // is attributed to another index, so compare the whole frame.
        let mut seen = vec![0u32; n as usize];
        let mut corrupted = 0;
        for f in &out {
            let i = index(f);
            if (i as usize) < seen.len() && f == &frame(i) {
                seen[i as usize] += 1;
            } else {
                corrupted += 1;
            }
        }
        assert_eq!(corrupted, c.corrupted, "seed {seed}");
        near(corrupted, out.len() as u64, 0.01);
        let twice = seen.iter().filter(|&&s| s == 2).count() as u64;
        let never = seen.iter().filter(|&&s| s == 0).count() as u64;
        // Twice: duplicated and neither copy lost nor corrupted; lost outright:
        // not duplicated and lost (about 4.75 %), less what corruption hides.
        near(twice, n, 0.05 * 0.95 * 0.95 * 0.99 * 0.99);
        near(never, n, 0.95 * 0.05 + 0.01);
        assert_eq!(out.len() as u64, c.released);
        assert_eq!(c.released, n + c.duplicated - c.lost);
    }
}

#[test]
fn the_same_seed_gives_the_same_decisions_and_another_seed_others() {
    let cfg = Impairment {
        loss: 0.1,
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(1),
        reorder: 0.1,
        duplicate: 0.05,
        corrupt: 0.05,
        ..Impairment::CLEAN
    };
    let verdicts = |seed| {
        let mut m = Model::new(cfg, seed);
        (0..10_000u64)
            .map(|i| m.decide(i * 1_000, 1514, 0))
            .collect::<Vec<_>>()
    };
    assert_eq!(verdicts(42), verdicts(42));
    assert_ne!(verdicts(42), verdicts(43));
    assert_eq!(run(cfg, 9, 5_000).0, run(cfg, 9, 5_000).0);
}

#[test]
fn frames_leave_in_time_order_never_early() {
    let cfg = Impairment {
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(1),
        duplicate: 0.02,
        ..Impairment::CLEAN
    };
    // The due times the model hands out, from a second model with the same seed.
    let mut twin = Model::new(cfg, 5);
    let mut line = DelayLine::new(Model::new(cfg, 5));
    let mut due = Vec::new(); // (due, arrival order) per copy
    let mut released = Vec::new(); // (release time, copy)
    let mut copy = 0u64;
    let step = 100_000; // release every 100 µs
    for i in 0..20_000u64 {
        let now = i * 10_000; // a frame every 10 µs
        for d in twin.decide(now, 100, line.held()).deliveries() {
            due.push((d.due, copy));
            copy += 1;
        }
        line.offer(now, &frame(i));
        if now % step == 0 {
            line.release(now, usize::MAX, |f| released.push((now, index(f))));
        }
    }
    let mut t = 20_000 * 10_000;
    while line.held() > 0 {
        line.release(t, usize::MAX, |f| released.push((t, index(f))));
        t += step;
    }
    assert_eq!(released.len(), due.len());
    // Released in (due, arrival) order: the sorted list of due times.
    let mut order = due.clone();
    order.sort();
    for ((at, _), (d, _)) in released.iter().zip(&order) {
        assert!(*at >= *d, "released at {at} before due {d}");
        assert!(*at < *d + step + 10_000, "released at {at}, due {d}");
    }
    // Every delay within 5 ms ± 1 ms of arrival.
    for (i, (d, _)) in due.iter().enumerate() {
        let _ = i;
        assert!(*d >= 4 * MS, "{d}");
    }
    // Jitter of ±1 ms with a frame every 10 µs reorders (netem's tfifo).
    assert!(
        line.counters().out_of_order > 1_000,
        "{:?}",
        line.counters()
    );
}

#[test]
fn keep_order_never_reorders_under_jitter() {
    let cfg = Impairment {
        delay: Duration::from_millis(5),
        jitter: Duration::from_millis(1),
        keep_order: true,
        ..Impairment::CLEAN
    };
    let (out, c) = run(cfg, 11, 20_000);
    let idx: Vec<u64> = out.iter().map(|f| index(f)).collect();
    assert!(idx.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(c.out_of_order, 0);
}

#[test]
fn reorder_sends_a_fraction_at_once_ahead_of_the_delayed() {
    let cfg = Impairment {
        delay: Duration::from_millis(5),
        reorder: 0.1,
        ..Impairment::CLEAN
    };
    let n = 50_000;
    let mut line = DelayLine::new(Model::new(cfg, 3));
    let mut at_once = 0u64;
    for i in 0..n {
        line.offer(i * 1_000, &frame(i));
        // Released at its arrival: only a reordered frame can be; the others
        // leave 5 ms after theirs.
        line.release(i * 1_000, usize::MAX, |f| {
            if index(f) == i {
                at_once += 1;
            } else {
                assert_eq!(index(f) + 5_000, i);
            }
        });
    }
    let c = line.counters();
    assert_eq!(at_once, c.reordered);
    near(c.reordered, n, 0.1);
    // Each left ahead of the frames delayed before it: out of order.
    assert!(c.out_of_order >= c.reordered - 10, "{c:?}");
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let cfg = Impairment {
        corrupt: 1.0,
        ..Impairment::CLEAN
    };
    let mut line = DelayLine::new(Model::new(cfg, 8));
    let mut positions = std::collections::HashSet::new();
    for i in 0..2_000u64 {
        let original = frame(i);
        line.offer(0, &original);
        line.release(0, usize::MAX, |f| {
            let bits: u32 = f
                .iter()
                .zip(&original)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(bits, 1);
            let byte = f.iter().zip(&original).position(|(a, b)| a != b).unwrap();
            positions.insert(byte);
        });
    }
    assert_eq!(line.counters().corrupted, 2_000);
    // Spread over the frame, not always the same byte.
    assert!(positions.len() > 90, "{}", positions.len());
}

#[test]
fn a_duplicated_frame_that_is_lost_is_still_sent_once_as_in_netem() {
    let cfg = Impairment {
        loss: 1.0,
        duplicate: 1.0,
        ..Impairment::CLEAN
    };
    let (out, c) = run(cfg, 1, 100);
    assert_eq!(out.len(), 100);
    assert_eq!((c.duplicated, c.lost), (100, 100));
}

#[test]
fn rate_serialises_and_limit_drops() {
    // 8 Mbit/s: a 1000-byte frame takes 1 ms.
    let cfg = Impairment {
        rate: Some(8_000_000),
        limit: 6,
        ..Impairment::CLEAN
    };
    let mut m = Model::new(cfg, 1);
    let dues: Vec<Option<u64>> = (0..8)
        .map(|held| m.decide(0, 1000, held).first.map(|d| d.due))
        .collect();
    assert_eq!(
        dues,
        [1, 2, 3, 4, 5, 6]
            .map(|ms| Some(ms * MS))
            .into_iter()
            .chain([None, None])
            .collect::<Vec<_>>()
    );
    assert_eq!(m.counters.overflow, 2);
}

/// A TCP/IPv4 super-frame of `len` payload bytes asking for 1448-byte segments.
fn super_frame(len: usize) -> (Vec<u8>, OffloadMeta) {
    let mut tcp = TcpHeader::new(40000, 5001, 1_000, 65535);
    tcp.ack = true;
    tcp.acknowledgment_number = 7;
    let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
    let f = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::Tcp(tcp)).build(&payload);
    let meta = OffloadMeta {
        gso: Some(Gso::new(GsoType::TcpV4, 1448)),
        ..OffloadMeta::plain()
    };
    (f, meta)
}

fn caps() -> NicCaps {
    NicCaps {
        offloads: Offloads::ALL,
        ..NicCaps::plain()
    }
}

/// Sends one super-frame through an `Impaired` port; returns what the far
/// port receives.
fn through(cfg: ImpairedConfig) -> (Vec<Frame>, Impaired<MemNic>) {
    let (a, mut b) = MemNic::pair(caps(), caps());
    let mut a = Impaired::new(a, cfg);
    let (f, meta) = super_frame(20 * 1448);
    let pool = a.pool().clone();
    let mut batch = Batch::new();
    batch.push(Frame::new(pool.alloc_from(&f), meta));
    assert_eq!(a.transmit(0, &mut batch).unwrap(), 1);
    let mut got = Batch::new();
    while b.receive(0, &mut got, 64).unwrap() > 0 {}
    (got.drain(..).collect(), a)
}

/// The payload of a TCP frame as etherparse reads it, checksum verified.
fn payload(f: &[u8]) -> Option<(u32, Vec<u8>)> {
    let p = SlicedPacket::from_ethernet(f).ok()?;
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        return None;
    };
    let Some(linerate_wire::etherparse::NetSlice::Ipv4(ip)) = p.net else {
        return None;
    };
    let h = ip.header().to_header();
    if h.calc_header_checksum() != h.header_checksum {
        return None;
    }
    let sum = t
        .to_header()
        .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
        .ok()?;
    (sum == t.checksum()).then(|| (t.sequence_number(), t.payload().to_vec()))
}

#[test]
fn a_super_frame_crosses_as_wire_frames_with_good_checksums() {
    let cfg = ImpairedConfig {
        inbound: Impairment::CLEAN,
        outbound: Impairment::CLEAN,
        seed: 1,
        coalesce: false,
    };
    let (frames, a) = through(cfg);
    assert_eq!(frames.len(), 20);
    let mut seq = 1_000u32;
    for f in &frames {
        assert!(f.meta.gso.is_none());
        let (s, p) = payload(f.bytes()).expect("a TCP frame with a good checksum");
        assert_eq!((s, p.len()), (seq, 1448));
        seq += 1448;
    }
    assert_eq!(a.outbound().released, 20);
    assert_eq!(a.stats().segmented, 1);
}

#[test]
fn coalescing_rebuilds_the_super_frame_unless_a_frame_is_corrupted() {
    let clean = ImpairedConfig {
        inbound: Impairment::CLEAN,
        outbound: Impairment::CLEAN,
        seed: 1,
        coalesce: true,
    };
    let (frames, _) = through(clean);
    assert_eq!(frames.len(), 1);
    let gso = frames[0].meta.gso.expect("a GRO super-frame");
    assert_eq!((gso.size, gso.segs), (1448, 20));

    // Every wire frame corrupted: none merges, the receiver gets twenty
    // frames, each with a bad checksum or a mangled header (etherparse cannot
    // read it as a good TCP frame) unless the flipped bit is in a MAC address,
    // which no checksum covers.
    let corrupt = ImpairedConfig {
        outbound: Impairment {
            corrupt: 1.0,
            ..Impairment::CLEAN
        },
        ..clean
    };
    let (frames, a) = through(corrupt);
    assert_eq!(frames.len(), 20);
    let (clean_frames, _) = through(clean);
    let (f0, _) = super_frame(20 * 1448);
    let macs = &f0[..12];
    let _ = clean_frames;
    for f in &frames {
        assert!(f.meta.gso.is_none());
        if &f.bytes()[..12] == macs {
            assert!(payload(f.bytes()).is_none());
        }
    }
    assert_eq!(a.outbound().corrupted, 20);
}

/// ARP passes at once whatever the impairment and takes no draw: frames after
/// it meet the fates they would have met without it (the linerate run and the
/// kernel-to-kernel reference exchange different ARP frames).
#[test]
fn arp_passes_and_takes_no_draw() {
    let cfg = Impairment {
        loss: 0.5,
        delay: Duration::from_millis(1),
        ..Impairment::CLEAN
    };
    let mut arp = vec![0xffu8; 6];
    arp.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06, 0x00, 0x01, 0x08, 0x00]);
    arp.resize(60, 0);
    let mut plain = DelayLine::new(Model::new(cfg, 9));
    let mut with_arp = DelayLine::new(Model::new(cfg, 9));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    with_arp.offer(0, &arp);
    let mut first = None;
    with_arp.release(0, usize::MAX, |f| first = Some(f.to_vec()));
    assert_eq!(first.as_deref(), Some(&arp[..]), "ARP held or lost");
    for i in 0..200 {
        plain.offer(i * 1_000, &frame(i));
        with_arp.offer(i * 1_000, &frame(i));
    }
    plain.release(u64::MAX, usize::MAX, |f| a.push(index(f)));
    with_arp.release(u64::MAX, usize::MAX, |f| b.push(index(f)));
    assert!(a.len() < 150, "half should be lost: {}", a.len());
    assert_eq!(a, b);
}
