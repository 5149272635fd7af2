//! Issue 16's matrix: each impairment, both directions, offloads on and off,
//! linerate and the kernel-to-kernel reference side by side per seed, medians
//! and ratios in a Markdown table.

use super::model::Impairment;
use super::setup::{Direction, KernelTcp, RunConfig, RunResult};
use std::fmt::Write as _;
use std::time::Duration;

/// One impairment setting of the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Case {
    /// Its name in the table.
    pub name: &'static str,
    /// The impairment, the same each way.
    pub impairment: Impairment,
    /// The kernel's TCP options.
    pub kernel: KernelTcp,
}

const MS: Duration = Duration::from_millis(1);

/// Delay of the delayed cases: 5 ms each way.
pub const DELAY: Duration = Duration::from_millis(5);

/// The settings issue 16 asks for. Jitter keeps the frames' order
/// ([`Impairment::keep_order`]): reordering is its own case, as netem's
/// `reorder` (10 % of frames skip the 5 ms delay).
pub fn issue_cases() -> Vec<Case> {
    let clean = Impairment::CLEAN;
    let loss1 = Impairment {
        loss: 0.01,
        ..clean
    };
    let delay = Impairment {
        delay: DELAY,
        jitter: MS,
        keep_order: true,
        ..clean
    };
    let on = KernelTcp::ALL_ON;
    vec![
        Case {
            name: "loss 1 %",
            impairment: loss1,
            kernel: on,
        },
        Case {
            name: "loss 5 %",
            impairment: Impairment {
                loss: 0.05,
                ..clean
            },
            kernel: on,
        },
        Case {
            name: "delay 5 ms ± 1 ms",
            impairment: delay,
            kernel: on,
        },
        Case {
            name: "delay 5 ms, reorder 10 %",
            impairment: Impairment {
                delay: DELAY,
                reorder: 0.10,
                ..clean
            },
            kernel: on,
        },
        Case {
            name: "dup 5 %, corrupt 1 %",
            impairment: Impairment {
                duplicate: 0.05,
                corrupt: 0.01,
                ..clean
            },
            kernel: on,
        },
        Case {
            name: "SACK off, loss 1 %",
            impairment: loss1,
            kernel: KernelTcp { sack: false, ..on },
        },
        Case {
            name: "timestamps off, loss 1 %",
            impairment: loss1,
            kernel: KernelTcp {
                timestamps: false,
                ..on
            },
        },
        Case {
            name: "wscale off, delay 5 ms ± 1 ms",
            impairment: delay,
            kernel: KernelTcp {
                window_scaling: false,
                ..on
            },
        },
    ]
}

/// One cell: a case, a direction and an offload setting, every seed's runs.
#[derive(Debug, Clone)]
pub struct Cell {
    /// The setting.
    pub case: Case,
    /// Which way the data went.
    pub direction: Direction,
    /// TAP offloads (and GRO of released frames).
    pub offloads: bool,
    /// linerate's runs, one per seed (an error as text).
    pub linerate: Vec<Result<RunResult, String>>,
    /// The kernel-to-kernel runs, one per seed.
    pub kernel: Vec<Result<RunResult, String>>,
}

/// The median of `xs` (mean of the middle two for an even count); `None` if empty.
pub fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return None;
    }
    let hi = *v.get(n / 2)?;
    if n % 2 == 1 {
        Some(hi)
    } else {
        Some((v.get(n / 2 - 1)? + hi) / 2.0)
    }
}

impl Cell {
    /// Runs `case` for every seed, linerate then the reference for each, with
    /// `run` doing one transfer (`linerate` or `kernel_to_kernel`, passed in so
    /// this module needs no root).
    pub fn measure(
        case: Case,
        direction: Direction,
        offloads: bool,
        seeds: &[u64],
        len: usize,
        limit: Duration,
        mut run: impl FnMut(bool, &RunConfig) -> std::io::Result<RunResult>,
    ) -> Cell {
        let mut cell = Cell {
            case,
            direction,
            offloads,
            linerate: Vec::new(),
            kernel: Vec::new(),
        };
        for &seed in seeds {
            let cfg = RunConfig {
                direction,
                offloads,
                impairment: case.impairment,
                kernel: case.kernel,
                seed,
                len,
                limit,
            };
            cell.linerate
                .push(run(true, &cfg).map_err(|e| e.to_string()));
            cell.kernel
                .push(run(false, &cfg).map_err(|e| e.to_string()));
        }
        cell
    }

    fn med(runs: &[Result<RunResult, String>], f: impl Fn(&RunResult) -> f64) -> Option<f64> {
        let xs: Vec<f64> = runs.iter().filter_map(|r| r.as_ref().ok()).map(f).collect();
        median(&xs)
    }

    /// Median seconds of linerate's runs and of the reference's.
    pub fn secs(&self) -> (Option<f64>, Option<f64>) {
        (
            Self::med(&self.linerate, |r| r.secs),
            Self::med(&self.kernel, |r| r.secs),
        )
    }

    /// Median retransmissions of the sender, linerate's runs and the reference's.
    pub fn retrans(&self) -> (Option<f64>, Option<f64>) {
        (
            Self::med(&self.linerate, |r| r.sender_retrans as f64),
            Self::med(&self.kernel, |r| r.sender_retrans as f64),
        )
    }

    /// Failed runs (linerate's, the reference's).
    pub fn failures(&self) -> (usize, usize) {
        let n = |v: &[Result<RunResult, String>]| v.iter().filter(|r| r.is_err()).count();
        (n(&self.linerate), n(&self.kernel))
    }
}

fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_owned(), |x| format!("{x:.digits$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// The cells as a Markdown table: median seconds of linerate and of the
/// kernel-to-kernel reference and their ratio; median retransmissions of the
/// sender (the kernel's `tcpi_total_retrans` toward linerate and toward Linux
/// for `k->l`; linerate's `tcp_retrans_segs` and the other kernel's for
/// `l->k`) and their ratio; failed runs.
pub fn table(cells: &[Cell]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| case | dir | offl | linerate s | kernel s | time ratio | retrans lr | retrans k | retrans ratio | failed |"
    );
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|---:|---:|---:|---|");
    for c in cells {
        let (ls, ks) = c.secs();
        let (lr, kr) = c.retrans();
        let (lf, kf) = c.failures();
        let rr = match (lr, kr) {
            (Some(a), Some(b)) if b == 0.0 && a == 0.0 => Some(1.0),
            _ => ratio(lr, kr),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            c.case.name,
            c.direction.short(),
            if c.offloads { "on" } else { "off" },
            fmt_opt(ls, 2),
            fmt_opt(ks, 2),
            fmt_opt(ratio(ls, ks), 2),
            fmt_opt(lr, 0),
            fmt_opt(kr, 0),
            fmt_opt(rr, 2),
            if lf + kf == 0 {
                String::new()
            } else {
                format!("{lf} lr, {kf} k of {}", c.linerate.len())
            },
        );
    }
    out
}
