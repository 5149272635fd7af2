//! The offload report: TCP bulk throughput and CPU cost of linerate with offloads
//! on and off, and of smoltcp, on the same memory link, in one run.
//!
//! ```text
//! cargo run --release --example offload_report            # the full matrix (< 2 min)
//! cargo run --release --example offload_report -- --quick # a tenth of the bytes
//! cargo run --release --example offload_report -- --only linerate-on --write 65536
//! ```
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
//! (`getrusage(RUSAGE_THREAD)`) per 10^9 application bytes. The clock is real time,
//! except that when nothing can happen before a timer the driver jumps to it rather
//! than sleeping, so wall time is work. Both ends run on the one thread, so CPU
//! s/GB counts sender and receiver together. The machine may be shared: cells run
//! in rounds (every stack at one write size, then the next size) and the best of
//! [`ROUNDS`] runs of each cell is kept.
//!
//! The driver loop lives in `linerate_testkit::bulk`, shared with `benches/tcp.rs`.

use linerate_testkit::bulk::{self, Measurement, Stack};
use std::error::Error;
use std::time::Instant;

/// Write sizes, bytes.
const WRITES: [usize; 6] = [64, 1024, 4096, 16 * 1024, 64 * 1024, 256 * 1024];

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

fn human(bytes: usize) -> String {
    match bytes {
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}

fn best(a: Option<Measurement>, b: Measurement) -> Measurement {
    match a {
        Some(a) if a.gbit_per_s() >= b.gbit_per_s() => a,
        _ => b,
    }
}

/// Command-line options.
struct Options {
    quick: bool,
    /// Run only this stack (for profiling one cell).
    only: Option<Stack>,
    /// Run only this write size.
    write: Option<usize>,
}

fn options() -> Result<Options, Box<dyn Error>> {
    let mut o = Options {
        quick: false,
        only: None,
        write: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--only" => {
                let name = args.next().unwrap_or_default();
                o.only = Some(
                    Stack::ALL
                        .into_iter()
                        .find(|s| s.name() == name)
                        .ok_or(format!(
                            "--only takes linerate-on, linerate-off or smoltcp, not {name:?}"
                        ))?,
                );
            }
            "--write" => o.write = Some(args.next().unwrap_or_default().parse()?),
            other => {
                return Err(format!(
                    "unknown option {other:?} (--quick, --only STACK, --write BYTES)"
                )
                .into());
            }
        }
    }
    Ok(o)
}

fn main() -> Result<(), Box<dyn Error>> {
    let opts = options()?;
    if let Some(stack) = opts.only {
        // One cell, for profiling: no table.
        let write = opts.write.unwrap_or(64 * 1024);
        let total = transfer_size(write) / if opts.quick { 10 } else { 1 };
        let m = bulk::transfer(stack, write, total)?;
        println!(
            "{} at {}: {:.2} Gbit/s, {:.3} CPU s/GB, {} wire frames, {} frames into the stack",
            stack.name(),
            human(write),
            m.gbit_per_s(),
            m.cpu_s_per_gb(),
            m.wire_frames,
            m.stack_frames
        );
        return Ok(());
    }
    let quick = opts.quick;
    let (scale, rounds) = if quick { (10, 1) } else { (1, ROUNDS) };
    let started = Instant::now();
    println!(
        "linerate offload report: TCP bulk over the memory backend, MTU 1500, one thread, \
         best of {rounds}"
    );
    println!(
        "on = GSO + GRO + checksums in the NIC layer; off = MSS segments, checksums in the \
         engine; smoltcp 0.14 both ends; socket buffers {} KiB",
        bulk::SOCKET_BUFFER / 1024
    );
    println!();
    println!(
        "{:>8} | {:>11} {:>8} | {:>11} {:>8} | {:>11} {:>8} | {:>6} | {:>10} | {:>9}",
        "write",
        "on Gbit/s",
        "CPU s/GB",
        "off Gbit/s",
        "CPU s/GB",
        "smol Gbit/s",
        "CPU s/GB",
        "on/off",
        "on/smoltcp",
        "MiB/cell"
    );
    println!("{}", "-".repeat(112));
    let mut cpu_ratios = Vec::new();
    for write in WRITES
        .into_iter()
        .filter(|w| opts.write.is_none_or(|o| o == *w))
    {
        let total = transfer_size(write) / scale;
        let mut cells: [Option<Measurement>; 3] = [None; 3];
        for _ in 0..rounds {
            for (cell, stack) in cells.iter_mut().zip(Stack::ALL) {
                let m = bulk::transfer(stack, write, total)
                    .map_err(|e| format!("{} at {}: {e}", stack.name(), human(write)))?;
                *cell = Some(best(*cell, m));
            }
        }
        let [Some(on), Some(off), Some(smol)] = cells else {
            return Err("no measurement".into());
        };
        println!(
            "{:>8} | {:>11.2} {:>8.3} | {:>11.2} {:>8.3} | {:>11.2} {:>8.3} | {:>5.2}x | {:>9.2}x | {:>9}",
            human(write),
            on.gbit_per_s(),
            on.cpu_s_per_gb(),
            off.gbit_per_s(),
            off.cpu_s_per_gb(),
            smol.gbit_per_s(),
            smol.cpu_s_per_gb(),
            on.gbit_per_s() / off.gbit_per_s(),
            on.gbit_per_s() / smol.gbit_per_s(),
            total >> 20,
        );
        cpu_ratios.push((
            write,
            off.cpu_s_per_gb() / on.cpu_s_per_gb(),
            smol.cpu_s_per_gb() / on.cpu_s_per_gb(),
        ));
    }
    // Wall time on a shared machine includes time the thread was not running; CPU
    // time per byte does not, so its ratios are the steadier comparison.
    println!();
    println!("CPU cost ratios (how many times the CPU per byte linerate-on needs):");
    println!(
        "{:>8} | {:>12} | {:>16}",
        "write", "off / on", "smoltcp / on"
    );
    for (write, off, smol) in cpu_ratios {
        println!("{:>8} | {:>11.2}x | {:>15.2}x", human(write), off, smol);
    }
    println!();
    println!(
        "every byte checked against the bytes sent; ratios are of Gbit/s; total {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
