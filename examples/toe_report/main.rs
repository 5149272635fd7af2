//! The TOE experiment as Chelsio's paper draws it: unmodified iperf3 with one
//! end on linerate through the preload library (TOE mode) against the same two
//! kernel iperf3s over a veth pair (NIC mode), throughput and CPU per Gbit/s
//! against write size, one way and both ways at once; sockperf's ping-pong
//! latency beside them. Root only: it makes network namespaces.
//!
//! ```text
//! cargo build --release -p linerate-preload
//! sudo cargo run --release --example toe_report             # every size, 3 s a cell
//! sudo cargo run --release --example toe_report -- --quick  # 64 B, 1 KiB, 64 KiB; 1 s
//! sudo cargo run --release --example toe_report -- --write 1024 --seconds 10
//! ```
//!
//! **TOE mode.** A namespace holds a TAP. The kernel has 10.231.0.1/24 on it;
//! iperf3 under `LD_PRELOAD=liblinerate_preload.so` runs linerate at
//! 10.231.0.2 on the TAP's other end (vnet_hdr offloads on), every socket
//! offloaded. The other iperf3 is the kernel's, on the TAP. Three cells per
//! write size: linerate sending (the preloaded client writes), linerate
//! receiving (the kernel client writes to the preloaded server), and both at
//! once (`--bidir`, the preloaded client).
//!
//! **NIC mode.** Two namespaces joined by a veth pair at MTU 1500, both ends
//! the kernel's iperf3: one way, and `--bidir`.
//!
//! Gbit/s is what the receiving end counted over the run (iperf3's `--json`,
//! both directions added for `--bidir`). CPU is the whole machine's, from
//! `/proc/stat` across the client's run: both iperf3s, linerate's queue
//! threads, the kernel's softirqs, everything, so the two modes are charged
//! alike. It is given as CPU % per Gbit/s, where 100 % is every core busy
//! (the paper's measure), and in the CSV as CPU seconds per 10^9 bytes.
//!
//! Cells run in rounds, a write size at a time with every mode at that size,
//! so that a noisy neighbour hurts both modes alike; `--rounds N` keeps each
//! cell's median. The report prints a table of TOE/NIC ratios against the
//! paper's targets, and writes SVG charts, `report.csv`, `summary.md` (the
//! tables of docs/performance.md) and `index.html` into `target/toe-report/`
//! (or `--out DIR`). `--busy-poll-us` sets the preload's busy polling for the
//! TOE cells; the latency cells run without it and with
//! `--latency-busy-poll-us` (50 µs by default).

#[path = "../offload_report/chart.rs"]
mod chart;
mod run;

use chart::{Out, Row, Series, human};
use clap::Parser;
use run::{Cell, Lab, Mode};
use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The paper's write sizes.
const WRITES: [usize; 7] = [64, 256, 1024, 4096, 16384, 65536, 262144];

/// The TOE experiment: iperf3 on linerate through the preload library
/// against iperf3 on the kernel over a veth pair (root only).
#[derive(Parser)]
#[command(name = "toe_report")]
struct Options {
    /// 64 B, 1 KiB and 64 KiB only, 1 s a cell.
    #[arg(long)]
    quick: bool,
    /// Only this write size (bytes).
    #[arg(long, value_name = "BYTES")]
    write: Option<usize>,
    /// Seconds per iperf3 run.
    #[arg(long, value_name = "S", default_value_t = 3)]
    seconds: u32,
    /// Runs of each cell; the median is reported.
    #[arg(long, value_name = "N", default_value_t = 1)]
    rounds: usize,
    /// The preload library (built with `cargo build --release -p
    /// linerate-preload`).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/release/liblinerate_preload.so"
    )]
    preload: PathBuf,
    /// Where the charts and the CSV go.
    #[arg(long, value_name = "DIR", default_value = "target/toe-report")]
    out: PathBuf,
    /// Skip the sockperf latency cells.
    #[arg(long)]
    no_latency: bool,
    /// Run only these cells (toe-send, toe-receive, toe-bidir, nic-one-way,
    /// nic-bidir; repeat the flag for more), for profiling one.
    #[arg(long, value_name = "CELL", value_parser = cell_parser())]
    cell: Vec<Cell>,
    /// Only the latency cells.
    #[arg(long)]
    latency_only: bool,
    /// The preload's busy polling (`nic.busy_poll_us`) for the TOE cells;
    /// 0 (the default) sleeps at once, as the kernel's sockets do without
    /// SO_BUSY_POLL.
    #[arg(long, value_name = "US", default_value_t = 0)]
    busy_poll_us: u32,
    /// The busy polling of the latency cells that busy-poll.
    #[arg(long, value_name = "US", default_value_t = 50)]
    latency_busy_poll_us: u32,
}

/// `--cell`'s values: the cells' names.
fn cell_parser() -> impl clap::builder::TypedValueParser<Value = Cell> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Cell::ALL.map(Cell::name)).try_map(|name| {
        Cell::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or("no such cell")
    })
}

fn main() {
    let opts = Options::parse();
    if let Err(e) = report(&opts) {
        eprintln!("toe_report: {e}");
        std::process::exit(1);
    }
}

/// One line of the table: a mode's cell at a write size.
struct Figure {
    write: usize,
    cell: Cell,
    gbit_per_s: f64,
    /// Whole-machine CPU, 1.0 = every core busy for the whole run.
    cpu: f64,
}

impl Figure {
    /// CPU % (of the machine) per Gbit/s.
    fn cpu_per_gbit(&self) -> f64 {
        if self.gbit_per_s > 0.0 {
            100.0 * self.cpu / self.gbit_per_s
        } else {
            f64::NAN
        }
    }

    /// CPU seconds per 10^9 bytes.
    fn cpu_s_per_gb(&self, cores: f64) -> f64 {
        if self.gbit_per_s > 0.0 {
            8.0 * self.cpu * cores / self.gbit_per_s
        } else {
            f64::NAN
        }
    }
}

/// The run as Markdown tables (for docs/performance.md): each cell's
/// Gbit/s and CPU % per Gbit/s at each write size, TOE over NIC, latency.
fn summary(
    writes: &[usize],
    figures: &[Figure],
    pings: &[(run::Latency, run::PingPong)],
    busy_us: u32,
) -> String {
    use std::fmt::Write as _;
    let mut md = String::from(
        "| write | NIC one way | TOE sends | TOE receives | NIC both ways | TOE both ways |\n\
         |---:|---:|---:|---:|---:|---:|\n",
    );
    let order = [
        Cell::NicOneWay,
        Cell::ToeSend,
        Cell::ToeReceive,
        Cell::NicBidir,
        Cell::ToeBidir,
    ];
    let find = |w: usize, c: Cell| figures.iter().find(|f| f.write == w && f.cell == c);
    for &w in writes {
        let _ = write!(md, "| {} |", human(w));
        for c in order {
            match find(w, c) {
                Some(f) => {
                    let _ = write!(md, " {:.2} ({:.1}) |", f.gbit_per_s, f.cpu_per_gbit());
                }
                None => md.push_str(" |"),
            }
        }
        md.push('\n');
    }
    md.push_str(
        "\nGbit/s (CPU % of the machine per Gbit/s). TOE over NIC, Gbit/s and CPU per Gbit/s:\n\n\
         | write | sends | receives | both ways |\n|---:|---:|---:|---:|\n",
    );
    for &w in writes {
        let _ = write!(md, "| {} |", human(w));
        for c in [Cell::ToeSend, Cell::ToeReceive, Cell::ToeBidir] {
            match (find(w, c), find(w, c.nic_peer())) {
                (Some(t), Some(n)) => {
                    let _ = write!(
                        md,
                        " {:.2}x, {:.2}x |",
                        t.gbit_per_s / n.gbit_per_s,
                        t.cpu_per_gbit() / n.cpu_per_gbit()
                    );
                }
                _ => md.push_str(" |"),
            }
        }
        md.push('\n');
    }
    if !pings.is_empty() {
        let _ = write!(
            md,
            "\nsockperf ping-pong, TCP, 64 B, round trip over two, µs (busy polling: \
             `nic.busy_poll_us = {busy_us}`):\n\n| path | median | p99 |\n|---|---:|---:|\n"
        );
        for (l, r) in pings {
            let _ = writeln!(md, "| {} | {:.1} | {:.1} |", l.name(), r.p50_us, r.p99_us);
        }
    }
    md
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report(opts: &Options) -> Result<(), Box<dyn Error>> {
    if !linerate_testkit::netns::is_root() {
        return Err("needs root: it creates network namespaces, a TAP and a veth pair".into());
    }
    if !opts.preload.exists() {
        return Err(format!(
            "no preload library at {}: build it with `cargo build --release -p linerate-preload`, \
             or name it with --preload",
            opts.preload.display()
        )
        .into());
    }
    run::require(&["iperf3", "ip"])?;
    let latency = !opts.no_latency && run::require(&["sockperf"]).is_ok();
    if !opts.no_latency && !latency {
        eprintln!("toe_report: no sockperf (apt-get install sockperf): latency skipped");
    }
    let rounds = opts.rounds.max(1);
    let seconds = if opts.quick { 1 } else { opts.seconds.max(1) };
    let writes: Vec<usize> = match opts.write {
        _ if opts.latency_only => vec![],
        Some(w) => vec![w],
        None if opts.quick => vec![64, 1024, 65536],
        None => WRITES.to_vec(),
    };

    // Ctrl-C ends the run between cells; the guards then remove what it made.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }

    let lab = Lab::new(&opts.preload, opts.busy_poll_us)?;
    let cores = run::cores();
    println!(
        "TOE experiment: iperf3, {seconds} s a cell, median of {rounds}; {} ({cores} cores)",
        run::cpu_model()
    );
    println!(
        "TOE: linerate on a TAP through {}; NIC: kernel to kernel over a veth pair",
        opts.preload.display()
    );
    println!();
    println!(
        "{:>8}  {:<24} {:>9} {:>12}",
        "write", "cell", "Gbit/s", "CPU%/Gbit/s"
    );
    let mut figures = Vec::new();
    'sizes: for &w in &writes {
        for cell in Cell::ALL {
            if !opts.cell.is_empty() && !opts.cell.contains(&cell) {
                continue;
            }
            if stop.load(Ordering::Relaxed) {
                break 'sizes;
            }
            let mut gbps = Vec::new();
            let mut cpu = Vec::new();
            for _ in 0..rounds {
                let m = lab.iperf3(cell, w, seconds)?;
                gbps.push(m.gbit_per_s);
                cpu.push(m.cpu);
            }
            let f = Figure {
                write: w,
                cell,
                gbit_per_s: median(gbps),
                cpu: median(cpu),
            };
            println!(
                "{:>8}  {:<24} {:>9.3} {:>12.2}",
                human(w),
                cell.name(),
                f.gbit_per_s,
                f.cpu_per_gbit()
            );
            figures.push(f);
        }
    }
    if stop.load(Ordering::Relaxed) {
        return Err("interrupted".into());
    }

    println!();
    println!(
        "TOE / NIC (targets: Gbit/s >= 2x and CPU/Gbit <= 0.5x up to 1 KiB, Gbit/s >= 1x from 4 KiB)"
    );
    println!(
        "{:>8}  {:<24} {:>10} {:>12}  target",
        "write", "cell", "Gbit/s x", "CPU/Gbit x"
    );
    let find = |w: usize, c: Cell| figures.iter().find(|f| f.write == w && f.cell == c);
    for &w in &writes {
        for cell in Cell::ALL.into_iter().filter(|c| c.mode() == Mode::Toe) {
            let (Some(toe), Some(nic)) = (find(w, cell), find(w, cell.nic_peer())) else {
                continue;
            };
            let g = toe.gbit_per_s / nic.gbit_per_s;
            let c = toe.cpu_per_gbit() / nic.cpu_per_gbit();
            let met = if w <= 1024 {
                g >= 2.0 && c <= 0.5
            } else if w >= 4096 {
                g >= 1.0
            } else {
                true
            };
            println!(
                "{:>8}  {:<24} {:>9.2}x {:>11.2}x  {}",
                human(w),
                cell.name(),
                g,
                c,
                if met { "met" } else { "not met" }
            );
        }
    }

    let mut pings = Vec::new();
    if latency {
        println!();
        println!(
            "sockperf ping-pong, TCP, 64-byte messages, {seconds} s: round trip / 2 \
             (busy polling: nic.busy_poll_us = {})",
            opts.latency_busy_poll_us
        );
        println!("{:<40} {:>9} {:>9}", "", "p50 µs", "p99 µs");
        for l in run::Latency::ALL {
            let r = lab.sockperf(l, seconds, (opts.busy_poll_us, opts.latency_busy_poll_us))?;
            println!("{:<40} {:>9.1} {:>9.1}", l.name(), r.p50_us, r.p99_us);
            pings.push((l, r));
        }
    }

    let mut out = Out::new(&opts.out, "linerate TOE experiment")?;
    for f in &figures {
        out.row(Row {
            experiment: "toe".into(),
            direction: f.cell.direction(),
            stack: f.cell.name().into(),
            write: f.write,
            gbit_per_s: f.gbit_per_s,
            cpu_s_per_gb: f.cpu_s_per_gb(cores as f64),
        });
    }
    let series = |value: &dyn Fn(&Figure) -> f64| -> Vec<Series> {
        Cell::ALL
            .into_iter()
            .map(|c| Series {
                name: c.legend().into(),
                points: figures
                    .iter()
                    .filter(|f| f.cell == c)
                    .map(|f| (f.write, value(f)))
                    .collect(),
            })
            .collect()
    };
    out.chart(
        "toe_gbps",
        "iperf3: linerate through the preload (TOE) vs the kernel over veth (NIC)",
        "Gbit/s",
        &series(&|f| f.gbit_per_s),
    )?;
    out.chart(
        "toe_cpu",
        "iperf3: whole-machine CPU per Gbit/s, TOE vs NIC",
        "CPU % per Gbit/s",
        &series(&|f| f.cpu_per_gbit()),
    )?;
    let dir = out.finish()?;
    std::fs::write(
        dir.join("summary.md"),
        summary(&writes, &figures, &pings, opts.latency_busy_poll_us),
    )?;
    println!();
    println!(
        "charts and CSV: {}/index.html (toe_gbps.svg, toe_cpu.svg, report.csv, summary.md)",
        dir.display()
    );
    Ok(())
}
