//! Engine to engine bulk transfers over the simulated link, byte-exact, with
//! offloads on and off, GRO on the receive side, IPv4 and IPv6, and with seeded
//! faults.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Pace, fnv, pattern, transfer, transfer_paced};
use linerate_toe::sim::{LinkConfig, Sim};
use std::net::SocketAddr;
use std::time::Duration;

const V4: &str = "10.0.0.2:5001";
const V6: &str = "[fd00::2]:5001";

fn run(offloads: bool, link: LinkConfig, addr: &str, len: usize, seed: u64) -> Sim {
    let mut sim = Sim::two_hosts(offloads, seed, link);
    let data = pattern(len, seed);
    let t = transfer(
        &mut sim,
        0,
        1,
        addr.parse::<SocketAddr>().unwrap(),
        &data,
        Duration::from_secs(600),
    );
    assert_eq!(t.received.len(), data.len());
    assert_eq!(fnv(&t.received), fnv(&data));
    assert!(t.received == data);
    sim
}

#[test]
fn ipv4_offloads_on() {
    let sim = run(true, LinkConfig::default(), V4, 2 << 20, 1);
    let c = sim.engines[0].counters();
    assert_eq!(c.tcp_retrans_segs, 0);
    // Super-segments: far fewer IP datagrams than wire segments.
    assert!(c.ip_out_requests * 10 < c.tcp_out_segs, "{c:?}");
    assert!(sim.link.stats().segmented > 0);
    assert_eq!(sim.link.stats().oversize, 0);
}

#[test]
fn ipv4_offloads_off() {
    let sim = run(false, LinkConfig::default(), V4, 1 << 20, 2);
    let c = sim.engines[0].counters();
    // Every datagram a segment, but the unsolicited neighbour advertisement.
    assert_eq!(
        c.ip_out_requests - c.ndp_unsolicited_adverts_out,
        c.tcp_out_segs
    );
    assert_eq!(sim.link.stats().segmented, 0);
}

#[test]
fn ipv6_offloads_on_and_off() {
    run(true, LinkConfig::default(), V6, 1 << 20, 3);
    run(false, LinkConfig::default(), V6, 1 << 20, 4);
}

#[test]
fn gro_super_segments_received_whole() {
    let link = LinkConfig {
        gro: true,
        ..LinkConfig::default()
    };
    let sim = run(true, link, V4, 4 << 20, 5);
    let rx = sim.engines[1].counters();
    // The receiver saw super-segments and counted the segments inside them.
    assert!(rx.ip_in_receives * 10 < rx.tcp_in_segs, "{rx:?}");
    // It still acknowledged at least every second full-sized segment's worth: the
    // sender's congestion window could grow and no timer fired.
    assert_eq!(sim.engines[0].counters().tcp_timeouts, 0);
}

#[test]
fn gro_frames_kept_in_the_receive_buffer_with_faults() {
    // Super-frames arrive whole, in order or not, duplicated, some corrupted:
    // the receiver keeps large in-order payloads in their frames and copies the
    // rest behind them; every byte still comes out in order.
    // Frames reordered over the seeds (a seed may see none: with slow start
    // doubling per round trip, few super-frames carry a whole transfer).
    let mut reordered = 0;
    for seed in 30..33 {
        let link = LinkConfig {
            gro: true,
            ..faulty(seed)
        };
        let sim = run(true, link, if seed == 31 { V6 } else { V4 }, 2 << 20, seed);
        let rx = sim.engines[1].counters();
        assert!(rx.tcp_rx_adopted > 0, "{rx:?}");
        reordered += sim.link.stats().reordered;
    }
    assert!(reordered > 0);
    // Without faults nearly every super-segment is kept.
    let link = LinkConfig {
        gro: true,
        ..LinkConfig::default()
    };
    let sim = run(true, link, V4, 2 << 20, 34);
    let rx = sim.engines[1].counters();
    assert!(rx.tcp_rx_adopted * 2 > rx.ip_in_receives / 2, "{rx:?}");
}

#[test]
fn mss_segments_kept_in_the_receive_buffer() {
    // Offloads off at MTU 1500: full-sized segments (1448 bytes of data, in
    // 2 KiB buffers) are kept in their frames like super-segments, not copied
    // into the ring; with faults too, every byte still comes out in order.
    let sim = run(false, LinkConfig::default(), V4, 2 << 20, 35);
    let rx = sim.engines[1].counters();
    let data_segs = (2 << 20) / 1448;
    assert!(rx.tcp_rx_adopted * 10 > data_segs * 9, "{rx:?}");
    for seed in 36..38 {
        let sim = run(
            false,
            faulty(seed),
            if seed == 37 { V6 } else { V4 },
            1 << 20,
            seed,
        );
        let rx = sim.engines[1].counters();
        assert!(rx.tcp_rx_adopted > 0, "{rx:?}");
    }
}

#[test]
fn slow_reader_mixes_kept_frames_and_copies() {
    // A reader that takes a few KiB now and then, by copying and lending reads:
    // frames are kept while the ring is empty, copied behind them otherwise,
    // and the window fills and reopens; the bytes come out in order.
    for (seed, faults) in [(40, false), (41, true), (42, true)] {
        let link = LinkConfig {
            gro: true,
            ..if faults {
                faulty(seed)
            } else {
                LinkConfig::default()
            }
        };
        let mut sim = Sim::two_hosts(true, seed, link);
        let data = pattern(1 << 20, seed);
        let pace = Pace {
            bytes: 3000 + seed as usize * 100,
            calls: 3,
            every: 2,
            lend: true,
        };
        let t = transfer_paced(
            &mut sim,
            0,
            1,
            V4.parse().unwrap(),
            &data,
            Duration::from_secs(600),
            pace,
        );
        assert_eq!(t.received.len(), data.len());
        assert!(t.received == data, "seed {seed}: bytes differ");
        let rx = sim.engines[1].counters();
        assert!(rx.tcp_rx_adopted > 0, "{rx:?}");
    }
}

fn faulty(seed: u64) -> LinkConfig {
    LinkConfig {
        loss: 0.01,
        duplicate: 0.005,
        reorder: 0.02,
        corrupt: 0.002,
        seed,
        ..LinkConfig::default()
    }
}

#[test]
fn with_faults_a_few_seeds() {
    for seed in 10..13 {
        let sim = run(true, faulty(seed), V4, 1 << 20, seed);
        let s = sim.link.stats();
        assert!(s.lost > 0 && s.reordered > 0, "{s:?}");
        assert!(sim.engines[0].counters().tcp_retrans_segs > 0);
    }
    for seed in 20..22 {
        run(false, faulty(seed), V6, 1 << 20, seed);
    }
}

#[test]
fn corruption_is_caught_by_checksums() {
    let link = LinkConfig {
        corrupt: 0.05,
        seed: 7,
        ..LinkConfig::default()
    };
    let sim = run(true, link, V4, 1 << 20, 7);
    let caught: u64 = sim
        .engines
        .iter()
        .map(|e| {
            let c = e.counters();
            c.tcp_in_csum_errors
                + c.ip_in_hdr_errors
                + c.rx_other_host
                + c.rx_bad_ethernet
                + c.rx_unknown_ethertype
                + c.ip_in_addr_errors
                + c.tcp_in_errs
        })
        .sum();
    assert!(caught > 0);
}

#[test]
#[ignore = "long: 64 MiB and many seeds"]
fn long_transfers_many_seeds() {
    run(true, LinkConfig::default(), V4, 64 << 20, 100);
    run(false, LinkConfig::default(), V4, 64 << 20, 101);
    run(
        true,
        LinkConfig {
            gro: true,
            ..LinkConfig::default()
        },
        V6,
        64 << 20,
        102,
    );
    for seed in 200..230 {
        run(
            seed % 2 == 0,
            faulty(seed),
            if seed % 3 == 0 { V6 } else { V4 },
            4 << 20,
            seed,
        );
    }
}
