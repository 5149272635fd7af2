//! The offload report: TCP bulk throughput and CPU cost of linerate with offloads
//! on and off, and of smoltcp, on the same memory link, in one run.
//!
//! ```text
//! cargo run --release --example offload_report            # the full matrix (< 2 min)
//! cargo run --release --example offload_report -- --quick # a tenth of the bytes
//! cargo run --release --example offload_report -- --only linerate-on --write 65536
//! cargo run --release --example offload_report -- --out DIR   # charts and CSV there
//! ```
//!
//! Besides the tables it prints, the report writes SVG charts (Gbit/s and CPU
//! seconds per GB against write size, one pair per experiment), `report.csv`
//! with every cell, `summary.md` (the headline ratios as one Markdown table,
//! for the README) and an `index.html` that shows them, into
//! `target/offload-report/` (or `--out DIR`). `--help` lists the flags.
//!
//! Experiments: the TCP bulk table below; the tunnel experiment
//! ([`tunnel`]: VXLAN, GENEVE and NVGRE with tunnel offloads in hardware, in
//! software and off, beside the same traffic without a tunnel, one way and both
//! ways at once).
//!
//! Two stacks talk over a pair of in-memory NIC ports at MTU 1500 with no hardware
//! offloads, in one thread. The sender writes `W` bytes per call for W = 64 B ..
//! 256 KiB; the receiver reads and checks every byte. Each cell is one of:
//!
//! * **linerate on**: `Config::offloads = true`. The engine emits one 64 KiB
//!   super-segment per flow per round with a GSO request and a partial checksum;
//!   the NIC layer cuts it into MTU-sized frames and completes the checksums
//!   (software GSO), and on the receiving side verifies checksums and coalesces
//!   the frames again (software GRO) before the engine sees them.
//! * **linerate off**: `Config::offloads = false`. MSS-sized segments with full
//!   checksums from the engine; the engine verifies received checksums; no GRO.
//! * **smoltcp**: smoltcp 0.14 `Interface` + `tcp::Socket` on both ends, over the
//!   same memory ports (`linerate_testkit::smol::SmolPort`), with 512 KiB socket
//!   buffers like linerate's.
//!
//! Gbit/s is goodput over wall time; CPU s/GB is the thread's user + system time
//! per 10^9 application bytes: the scheduler's account that
//! `getrusage(RUSAGE_THREAD)` reports, read through the thread's CPU-time clock
//! (`CLOCK_THREAD_CPUTIME_ID`, nanoseconds; getrusage's own figure lags it by up to
//! a millisecond, `linerate_testkit::cpu` checks they agree). The clock is real time,
//! except that when nothing can happen before a timer the driver jumps to it rather
//! than sleeping, so wall time is work. Both ends run on the one thread, so CPU
//! s/GB counts sender and receiver together. The machine may be shared: cells run
//! in rounds (every stack at one write size, then the next size) and the best of
//! [`ROUNDS`] runs of each cell is kept.
//!
//! The driver loop lives in `linerate_testkit::bulk`, shared with `benches/tcp.rs`.

mod chart;
mod scaling;
mod summary;
mod tunnel;
mod vnic;

use chart::{Out, Row, Series};
use clap::Parser;
use linerate_testkit::bulk::{self, Measurement, Stack, WRITES};
use std::error::Error;
use std::path::PathBuf;
use std::time::Instant;

/// Runs of each cell; the best is reported.
const ROUNDS: usize = 3;

/// Bytes per run at write size `write`: small writes cost a call per 64 bytes, so
/// they move less to keep the whole report under two minutes.
fn transfer_size(write: usize) -> u64 {
    if write <= 64 {
        48 << 20
    } else if write <= 1024 {
        192 << 20
    } else {
        384 << 20
    }
}

use chart::human;

fn best(a: Option<Measurement>, b: Measurement) -> Measurement {
    match a {
        Some(a) if a.gbit_per_s() >= b.gbit_per_s() => a,
        _ => b,
    }
}

/// linerate's offload report: TCP bulk throughput and CPU per GB against write
/// size, offloads on against off, linerate against smoltcp, through tunnels,
/// across queues and virtual NICs, all over the in-memory backend.
#[derive(Parser)]
#[command(name = "offload_report")]
struct Options {
    /// A tenth of the bytes per cell, one round.
    #[arg(long)]
    quick: bool,
    /// Run one stack at one write size (for profiling one cell).
    #[arg(long, value_name = "STACK", value_parser = stack_parser())]
    only: Option<Stack>,
    /// Run only this write size.
    #[arg(long, value_name = "BYTES")]
    write: Option<usize>,
    /// Where the charts, the CSV and the summary go.
    #[arg(long, value_name = "DIR", default_value = "target/offload-report")]
    out: PathBuf,
    /// Skip the tunnel experiment.
    #[arg(long)]
    no_tunnel: bool,
    /// Skip the queue-scaling experiment.
    #[arg(long)]
    no_scaling: bool,
    /// Skip the virtual NIC experiment.
    #[arg(long)]
    no_vnic: bool,
    /// Run only the virtual NIC experiment.
    #[arg(long)]
    vnic_only: bool,
    /// Run only the queue-scaling experiment (--repeat rounds, --quick for less).
    #[arg(long)]
    scaling_only: bool,
    /// Run the virtual NIC experiment at this pair count only.
    #[arg(long, value_name = "N")]
    pairs: Option<usize>,
    /// With --only: run the cell N times, one line each (a longer profile).
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// Run one cell of the tunnel experiment (plain|vxlan|geneve|nvgre :
    /// hw|sw|off, one way, --write or 64 KiB writes), --repeat times.
    #[arg(long, value_name = "KIND:MODE")]
    tunnel_cell: Option<String>,
    /// Run one cell of the scaling experiment (tokio|queues : 1|2), --repeat
    /// times (for profiling).
    #[arg(long, value_name = "TASKS:QUEUES")]
    scaling_cell: Option<String>,
}

/// `--only`'s values: the stacks' names.
fn stack_parser() -> impl clap::builder::TypedValueParser<Value = Stack> {
    use clap::builder::TypedValueParser;
    let all = || Stack::ALL.into_iter().chain(Stack::ZERO_COPY);
    clap::builder::PossibleValuesParser::new(all().map(Stack::name)).try_map(move |name| {
        all()
            .find(|s| s.name() == name)
            .ok_or_else(|| format!("no stack {name:?}"))
    })
}

/// The zero-copy comparison: each stack with its least-copying socket calls,
/// over the same ports as its row above (hw ports for linerate, plain for
/// smoltcp, which has no offloads to use).
fn zero_copy_table(opts: &Options, scale: u64, rounds: usize) -> Result<(), Box<dyn Error>> {
    println!();
    println!(
        "zero-copy socket calls: hw-zc = hw with tcp_send_bytes (the writer's buffer handed \
         over) and tcp_recv_with (read in place);"
    );
    println!(
        "smol-lend = smoltcp with its lending recv (send_slice still copies: smoltcp cannot \
         take a buffer over)"
    );
    println!(
        "{:>8} | {:>17} | {:>17} | {:>13}",
        "write", "hw-zc Gb/s CPUs/GB", "smol-lend Gb/s CPUs/GB", "hw-zc/smol-lend"
    );
    for write in WRITES
        .into_iter()
        .filter(|w| opts.write.is_none_or(|o| o == *w))
    {
        let total = transfer_size(write) / scale;
        let mut cells: [Option<Measurement>; 2] = [None; 2];
        for _ in 0..rounds {
            for (cell, stack) in cells.iter_mut().zip(Stack::ZERO_COPY) {
                let m = bulk::transfer(stack, write, total)
                    .map_err(|e| format!("{} at {}: {e}", stack.name(), human(write)))?;
                *cell = Some(best(*cell, m));
            }
        }
        let [Some(zc), Some(lend)] = cells else {
            return Err("no measurement".into());
        };
        println!(
            "{:>8} | {:>8.2} {:>8.3} | {:>13.2} {:>8.3} | {:>14.2}x",
            human(write),
            zc.gbit_per_s(),
            zc.cpu_s_per_gb(),
            lend.gbit_per_s(),
            lend.cpu_s_per_gb(),
            zc.gbit_per_s() / lend.gbit_per_s(),
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut opts = Options::parse();
    opts.repeat = opts.repeat.max(1);
    if let Some(cell) = &opts.tunnel_cell {
        return tunnel::one_cell(cell, opts.write.unwrap_or(64 * 1024), opts.repeat);
    }
    if let Some(stack) = opts.only {
        // One cell, for profiling: no table.
        let write = opts.write.unwrap_or(64 * 1024);
        let total = transfer_size(write) / if opts.quick { 10 } else { 1 };
        for _ in 0..opts.repeat {
            let m = bulk::transfer(stack, write, total)?;
            println!(
                "{} at {}: {:.2} Gbit/s, {:.3} CPU s/GB, {} wire frames, {} frames into the \
                 stack",
                stack.name(),
                human(write),
                m.gbit_per_s(),
                m.cpu_s_per_gb(),
                m.wire_frames,
                m.stack_frames
            );
        }
        return Ok(());
    }
    let quick = opts.quick;
    if opts.scaling_only {
        scaling::run(4, scaling::per_flow(quick), opts.repeat)?;
        return Ok(());
    }
    if let Some(cell) = &opts.scaling_cell {
        scaling::cell(cell, 4, scaling::per_flow(quick), opts.repeat)?;
        return Ok(());
    }
    if opts.vnic_only {
        let mut out = Out::new(&opts.out, "linerate offload report")?;
        vnic::section(&mut out, quick, opts.pairs, 1)?;
        out.finish()?;
        return Ok(());
    }
    let (scale, rounds) = if quick { (10, 1) } else { (1, ROUNDS) };
    let started = Instant::now();
    println!(
        "linerate offload report: TCP bulk over the memory backend, MTU 1500, one thread, \
         best of {rounds}"
    );
    println!(
        "sw  = offloads on, the NIC layer doing GSO, GRO and checksums in software over \
         plain ports (no offloads, MTU enforced on the wire; segments by reference, \
         frag-list GRO's chains kept by the engine)"
    );
    println!(
        "hw  = offloads on over ports that have them (TSO, LRO, checksums: veth-like), \
         super-frames cross whole"
    );
    println!("off = offloads off: MSS segments, checksums in the engine");
    println!(
        "smol = smoltcp 0.14 at both ends; socket buffers {} KiB everywhere",
        bulk::SOCKET_BUFFER / 1024
    );
    println!();
    println!(
        "{:>8} | {:>15} | {:>15} | {:>15} | {:>15} | {:>7} {:>7} {:>7} {:>7} | {:>5}",
        "write",
        "sw Gb/s CPUs/GB",
        "hw Gb/s CPUs/GB",
        "off Gb/s CPUs/GB",
        "smol Gb/s CPUs/GB",
        "sw/off",
        "sw/smol",
        "hw/off",
        "hw/smol",
        "MiB"
    );
    println!("{}", "-".repeat(130));
    let mut out = Out::new(&opts.out, "linerate offload report")?;
    let mut table: Vec<(usize, [Measurement; 4])> = Vec::new();
    let mut cpu_ratios = Vec::new();
    for write in WRITES
        .into_iter()
        .filter(|w| opts.write.is_none_or(|o| o == *w))
    {
        let total = transfer_size(write) / scale;
        let mut cells: [Option<Measurement>; 4] = [None; 4];
        for _ in 0..rounds {
            for (cell, stack) in cells.iter_mut().zip(Stack::ALL) {
                let m = bulk::transfer(stack, write, total)
                    .map_err(|e| format!("{} at {}: {e}", stack.name(), human(write)))?;
                *cell = Some(best(*cell, m));
            }
        }
        let [Some(sw), Some(off), Some(smol), Some(hw)] = cells else {
            return Err("no measurement".into());
        };
        let cell = |m: &Measurement| format!("{:>7.2} {:>7.3}", m.gbit_per_s(), m.cpu_s_per_gb());
        let r = |a: &Measurement, b: &Measurement| a.gbit_per_s() / b.gbit_per_s();
        println!(
            "{:>8} | {:>15} | {:>15} | {:>15} | {:>15} | {:>6.2}x {:>6.2}x {:>6.2}x {:>6.2}x | {:>5}",
            human(write),
            cell(&sw),
            cell(&hw),
            cell(&off),
            cell(&smol),
            r(&sw, &off),
            r(&sw, &smol),
            r(&hw, &off),
            r(&hw, &smol),
            total >> 20,
        );
        table.push((write, [sw, hw, off, smol]));
        let c = |a: &Measurement, b: &Measurement| a.cpu_s_per_gb() / b.cpu_s_per_gb();
        cpu_ratios.push((
            write,
            [c(&off, &sw), c(&smol, &sw), c(&off, &hw), c(&smol, &hw)],
        ));
    }
    // Wall time on a shared machine includes time the thread was not running; CPU
    // time per byte does not, so its ratios are the steadier comparison.
    println!();
    println!(
        "CPU per byte saved (how many times the CPU per byte the first needs the second needs):"
    );
    println!(
        "{:>8} | {:>9} {:>9} {:>9} {:>9}",
        "write", "off/sw", "smol/sw", "off/hw", "smol/hw"
    );
    for (write, [a, b, c, d]) in cpu_ratios {
        println!(
            "{:>8} | {:>8.2}x {:>8.2}x {:>8.2}x {:>8.2}x",
            human(write),
            a,
            b,
            c,
            d
        );
    }
    zero_copy_table(&opts, scale, rounds)?;
    tcp_charts(&mut out, &table)?;
    if !opts.no_tunnel {
        tunnel::section(&mut out, quick, opts.write)?;
    }
    if !opts.no_scaling {
        for m in scaling::run(4, scaling::per_flow(quick), rounds)? {
            out.row(Row {
                experiment: "scaling".into(),
                direction: "uni",
                stack: match m.tasks {
                    scaling::Tasks::Tokio => format!("rt-{}q", m.queues),
                    scaling::Tasks::OnQueues => format!("rt-local-{}q", m.queues),
                },
                write: 256 << 10,
                gbit_per_s: m.gbit_per_s(),
                cpu_s_per_gb: m.cpu_s_per_gb(),
            });
        }
    }
    if !opts.no_vnic {
        // One round of 15 cells of a second or two each: a longer span measures
        // the steady state better than the best of several short ones.
        vnic::section(&mut out, quick, opts.pairs, 1)?;
    }
    let dir = out.finish()?;
    if let Some(md) = summary::markdown(&table, rounds, quick) {
        std::fs::write(dir.join("summary.md"), md)?;
    }
    println!();
    println!(
        "charts (SVG), report.csv, summary.md and index.html in {}",
        dir.display()
    );
    println!(
        "every byte checked against the bytes sent; ratios are of Gbit/s; total {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The TCP bulk table as CSV rows and two charts.
fn tcp_charts(out: &mut Out, table: &[(usize, [Measurement; 4])]) -> Result<(), Box<dyn Error>> {
    const NAMES: [&str; 4] = ["linerate sw", "linerate hw", "linerate off", "smoltcp"];
    for (write, cells) in table {
        for (name, m) in NAMES.iter().zip(cells) {
            out.row(Row {
                experiment: "tcp_bulk".to_string(),
                direction: "uni",
                stack: name.to_string(),
                write: *write,
                gbit_per_s: m.gbit_per_s(),
                cpu_s_per_gb: m.cpu_s_per_gb(),
            });
        }
    }
    let series = |value: fn(&Measurement) -> f64| -> Vec<Series> {
        NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| Series {
                name: name.to_string(),
                points: table
                    .iter()
                    .filter_map(|(w, c)| c.get(i).map(|m| (*w, value(m))))
                    .collect(),
            })
            .collect()
    };
    out.chart(
        "tcp_bulk_gbps",
        "TCP bulk, MTU 1500: throughput, offloads on (hw, sw) vs off and smoltcp",
        "Gbit/s",
        &series(Measurement::gbit_per_s),
    )?;
    out.chart(
        "tcp_bulk_cpu",
        "TCP bulk, MTU 1500: CPU per GB, offloads on (hw, sw) vs off and smoltcp",
        "CPU seconds per GB",
        &series(Measurement::cpu_s_per_gb),
    )
}
