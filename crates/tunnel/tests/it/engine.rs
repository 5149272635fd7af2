//! The engine over each tunnel kind: IPv4 and IPv6 underlay, IPv4 and IPv6
//! inner, offloads in hardware (tunnel TSO/LRO ports), in software (the
//! underlay's shim) and off; clean and under the memory backend's seeded
//! faults; byte-exact both ways at once (SHA-256).

use crate::common;

use common::{Mode, kinds, transfer, tunnel_pair};
use linerate_nic::Counter;
use linerate_nic::memory::Faults;
use linerate_tunnel::Encap;
use linerate_tunnel::TunnelCounter;

/// Debug-run size each way (the `#[ignore]`d test moves 64 MiB).
const SMALL: usize = 4 << 20;

fn faults() -> Faults {
    Faults {
        loss: 0.01,
        corrupt: 0.005,
        duplicate: 0.005,
        reorder: 0.01,
        reorder_depth: 3,
        ..Faults::NONE
    }
}

fn run(encap: &Encap, v6: bool, inner_v6: bool, mode: Mode, faulty: bool, total: usize) {
    let f = match (faulty, mode) {
        (false, _) => Faults::NONE,
        // Between ports with checksum offload frames cross with their
        // checksum partial, which no receiver can check: the memory wire
        // documents its corruption fault as undetectable there, as it would
        // be on a real link between two hosts' TSO and LRO (the outer
        // Ethernet FCS catches it). Loss, duplication and reordering stay.
        (true, Mode::Hw) => Faults {
            corrupt: 0.0,
            ..faults()
        },
        (true, _) => faults(),
    };
    let (a, b) = tunnel_pair(encap, v6, mode, f, 0x7e57);
    let what = format!("{encap:?} underlay v6 {v6} inner v6 {inner_v6} {mode:?} faults {faulty}");
    let (a, b) = match transfer(a, b, mode != Mode::Off, inner_v6, total) {
        Ok(n) => n,
        Err(e) => panic!("{what}: {e}"),
    };
    for t in [&a, &b] {
        let c = t.tunnel_counters();
        assert!(
            c.get(TunnelCounter::TxEncap) > 0 && c.get(TunnelCounter::RxDecap) > 0,
            "{what}"
        );
        // The underlay shim's counters say how the super-segments crossed.
        let shim = t.with_underlay(|u| u.counters().snapshot());
        let (gso, whole) = (
            shim.total(Counter::GsoSegments),
            shim.total(Counter::TxGsoPackets),
        );
        match mode {
            Mode::Hw => assert!(whole > 0 && gso == 0, "{what}: {gso} {whole}"),
            Mode::Sw => assert!(
                gso > 0 && whole == 0 && shim.total(Counter::GroMerged) > 0,
                "{what}"
            ),
            Mode::Off => assert!(gso == 0 && whole == 0, "{what}"),
        }
    }
}

fn matrix(mode: Mode, faulty: bool, total: usize) {
    for encap in &kinds() {
        for v6 in [false, true] {
            for inner_v6 in [false, true] {
                run(encap, v6, inner_v6, mode, faulty, total);
            }
        }
    }
}

#[test]
fn clean_offloads_in_software() {
    matrix(Mode::Sw, false, SMALL);
}

#[test]
fn clean_offloads_in_hardware() {
    matrix(Mode::Hw, false, SMALL);
}

#[test]
fn clean_offloads_off() {
    matrix(Mode::Off, false, SMALL / 4);
}

#[test]
fn faults_offloads_in_software() {
    matrix(Mode::Sw, true, SMALL / 4);
}

#[test]
fn faults_offloads_in_hardware() {
    matrix(Mode::Hw, true, SMALL / 4);
}

#[test]
fn faults_offloads_off() {
    matrix(Mode::Off, true, SMALL / 8);
}

/// 64 MiB each way, every combination: `cargo test --release -p linerate-tunnel
/// --test engine -- --ignored`.
#[test]
#[ignore = "64 MiB each way per combination: run in release"]
fn full_64_mib_each_way() {
    for mode in [Mode::Hw, Mode::Sw, Mode::Off] {
        for faulty in [false, true] {
            matrix(mode, faulty, 64 << 20);
        }
    }
}
