//! Linux TCP against linerate over an impaired path, and the kernel-to-kernel
//! reference through the same impairment (issue 16; docs/testing.md: "An
//! impaired path").
//!
//! `linerate_testkit::impair` owns a TAP in a namespace it creates (the kernel
//! at 10.78.0.1) and impairs every frame each way as netem would (the kernel's
//! super-frames segmented into wire frames first); linerate's engine, or a
//! second kernel in its own namespace and TAP (10.78.0.2), is the other end.
//!
//! CI tests (a few MiB each, both directions, offloads on and off): every
//! transfer arrives SHA-256 exact, and the impairment really happened (the
//! model's counters: frames lost, reordered, duplicated, corrupted; the
//! kernel's `TCP_INFO` shows retransmissions). No timing is asserted.
//!
//! `issue_16_matrix` (ignored): the whole matrix of issue 16, 64 MiB per run,
//! medians of three seeds, printed as a Markdown table. Hours at worst; set
//! `LINERATE_IMPAIR_MIB`, `LINERATE_IMPAIR_SEEDS` (a count),
//! `LINERATE_IMPAIR_CASES` (substrings of case names, comma-separated),
//! `LINERATE_IMPAIR_DIRS` (`k->l`, `l->k`) and `LINERATE_IMPAIR_OFFLOADS`
//! (`on`, `off`) to run part of it:
//! `cargo test --release --features system-tests --test system_impair -- --ignored --nocapture`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_testkit::impair::matrix::{self, Cell};
use linerate_testkit::impair::{
    self, Direction, Impairment, KernelTcp, RunConfig, RunResult, kernel_to_kernel,
};
use linerate_testkit::netns;
use std::time::Duration;

const MIB: usize = 1 << 20;

fn cfg(direction: Direction, offloads: bool, impairment: Impairment, len: usize) -> RunConfig {
    RunConfig {
        direction,
        offloads,
        impairment,
        kernel: KernelTcp::ALL_ON,
        seed: 1,
        len,
        limit: Duration::from_secs(120),
    }
}

fn root() {
    assert!(netns::is_root(), "system tests need root");
}

/// 1 % loss and 10 % duplication with 0.5 % corruption: a few MiB each way.
fn lossy() -> Impairment {
    Impairment {
        loss: 0.01,
        duplicate: 0.1,
        corrupt: 0.005,
        ..Impairment::CLEAN
    }
}

/// 2 ms of delay with 10 % of frames reordered (sent at once).
fn reordering() -> Impairment {
    Impairment {
        delay: Duration::from_millis(2),
        reorder: 0.1,
        ..Impairment::CLEAN
    }
}

/// What every impaired run must show: the frames each way really met the
/// impairment, nothing was refused, the data was checked (by the run itself).
fn check_impaired(r: &RunResult, i: &Impairment, what: &str) {
    for (dir, c) in [
        ("from the kernel", r.from_kernel),
        ("to the kernel", r.to_kernel),
    ] {
        assert!(c.frames > 100, "{what}, {dir}: {c:?}");
        if i.loss > 0.0 {
            assert!(c.lost > 0, "{what}, {dir}: no frame lost: {c:?}");
        }
        if i.duplicate > 0.0 {
            assert!(c.duplicated > 0, "{what}, {dir}: {c:?}");
        }
        if i.reorder > 0.0 {
            assert!(
                c.reordered > 0 && c.out_of_order > 0,
                "{what}, {dir}: {c:?}"
            );
        }
        assert_eq!(c.overflow, 0, "{what}, {dir}: {c:?}");
    }
    // Corruption is rare: over both directions.
    if i.corrupt > 0.0 {
        assert!(
            r.from_kernel.corrupted + r.to_kernel.corrupted > 0,
            "{what}: nothing corrupted"
        );
    }
    assert_eq!(r.stats.malformed, 0, "{what}: {:?}", r.stats);
    assert_eq!(r.stats.refused, 0, "{what}: {:?}", r.stats);
    assert!(r.kernel.snd_mss >= 1000, "{what}: {:?}", r.kernel);
    // Loss toward the data's receiver makes the sender retransmit.
    if i.loss > 0.0 {
        assert!(r.sender_retrans > 0, "{what}: no retransmission: {r:?}");
    }
    eprintln!(
        "{what}: {:.2} s, sender retransmitted {}, kernel {:?}",
        r.secs, r.sender_retrans, r.kernel
    );
}

fn both(impairment: Impairment, offloads: bool, mib: usize) {
    root();
    for direction in Direction::BOTH {
        let c = cfg(direction, offloads, impairment, mib * MIB);
        let what = |who: &str| format!("{who} {} offloads {offloads}", direction.short());
        let lr = impair::linerate(&c).unwrap();
        check_impaired(&lr, &impairment, &what("linerate"));
        let k = kernel_to_kernel(&c).unwrap();
        check_impaired(&k, &impairment, &what("kernel"));
        // The kernel facing linerate and the one facing Linux met the same
        // model: the first frames of the kernel's draw the same fates, so
        // with the same seed the two runs' counts are of one size.
        assert!(lr.from_kernel.frames > 0 && k.from_kernel.frames > 0);
    }
}

#[test]
fn loss_duplication_and_corruption_both_ways_offloads_on() {
    both(lossy(), true, 8);
}

#[test]
fn loss_duplication_and_corruption_both_ways_offloads_off() {
    both(lossy(), false, 4);
}

#[test]
fn delay_and_reordering_both_ways_offloads_on() {
    both(reordering(), true, 8);
}

#[test]
fn delay_and_reordering_both_ways_offloads_off() {
    both(reordering(), false, 4);
}

#[test]
fn kernel_options_off_in_the_namespace_reach_the_connection() {
    root();
    let off = KernelTcp {
        sack: false,
        timestamps: false,
        window_scaling: false,
    };
    for run in [impair::linerate, kernel_to_kernel] {
        let c = RunConfig {
            kernel: off,
            ..cfg(Direction::KernelToLinerate, true, Impairment::CLEAN, MIB)
        };
        let r = run(&c).unwrap();
        assert!(
            !r.kernel.sack() && !r.kernel.timestamps() && !r.kernel.window_scaling(),
            "{:?}",
            r.kernel
        );
        let r = run(&cfg(
            Direction::KernelToLinerate,
            true,
            Impairment::CLEAN,
            MIB,
        ))
        .unwrap();
        assert!(
            r.kernel.sack() && r.kernel.timestamps() && r.kernel.window_scaling(),
            "{:?}",
            r.kernel
        );
    }
}

fn env_list(name: &str) -> Option<Vec<String>> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect())
}

#[test]
#[ignore = "issue 16's whole matrix: long; run by hand with --release --nocapture"]
fn issue_16_matrix() {
    root();
    let mib: usize = std::env::var("LINERATE_IMPAIR_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let seeds: u64 = std::env::var("LINERATE_IMPAIR_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let seeds: Vec<u64> = (1..=seeds).collect();
    let cases = env_list("LINERATE_IMPAIR_CASES");
    let dirs = env_list("LINERATE_IMPAIR_DIRS");
    let offl = env_list("LINERATE_IMPAIR_OFFLOADS");
    let mut cells = Vec::new();
    for case in matrix::issue_cases() {
        if cases
            .as_ref()
            .is_some_and(|c| !c.iter().any(|c| case.name.contains(c.as_str())))
        {
            continue;
        }
        for direction in Direction::BOTH {
            if dirs
                .as_ref()
                .is_some_and(|d| !d.iter().any(|d| d == direction.short()))
            {
                continue;
            }
            for offloads in [true, false] {
                let name = if offloads { "on" } else { "off" };
                if offl.as_ref().is_some_and(|o| !o.iter().any(|o| o == name)) {
                    continue;
                }
                let cell = Cell::measure(
                    case,
                    direction,
                    offloads,
                    &seeds,
                    mib * MIB,
                    Duration::from_secs(300),
                    |lr, c| {
                        if lr {
                            impair::linerate(c)
                        } else {
                            kernel_to_kernel(c)
                        }
                    },
                );
                for (who, runs) in [("linerate", &cell.linerate), ("kernel", &cell.kernel)] {
                    for r in runs {
                        match r {
                            Ok(r) => eprintln!(
                                "{} {} {name} {who}: {:.2} s, retrans {}",
                                case.name,
                                direction.short(),
                                r.secs,
                                r.sender_retrans
                            ),
                            Err(e) => eprintln!(
                                "{} {} {name} {who}: FAILED {e}",
                                case.name,
                                direction.short()
                            ),
                        }
                    }
                }
                cells.push(cell);
                eprintln!("{}", matrix::table(cells.get(cells.len() - 1..).unwrap()));
            }
        }
    }
    println!("{}", matrix::table(&cells));
}
