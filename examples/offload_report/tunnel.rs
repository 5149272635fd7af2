//! The tunnel experiment (QLogic FastLinQ, Chelsio T5 NVGRE): TCP bulk through
//! VXLAN, GENEVE (two options) and NVGRE beside the same traffic without a
//! tunnel, tunnel offloads in hardware, in software and off, one way and both ways.

use crate::chart::{Out, Row, Series, human};
use linerate_testkit::bulk::{self, Measurement, Offload, Tunnelled, WRITES};
use std::error::Error;

/// Bytes per cell (per direction): smaller than the TCP table's, for 144
/// cells, and large enough that a cell is not mostly its start (a fresh pair's
/// pools filling, slow start), which made the hw-against-no-tunnel ratios the
/// tunnel targets check move between runs of one build at a quarter of this
/// (`--tunnel-cell vxlan:hw --repeat N` shows the spread).
fn cell_bytes(write: usize) -> u64 {
    match write {
        w if w <= 64 => 16 << 20,
        w if w <= 1024 => 64 << 20,
        _ => 128 << 20,
    }
}

type Cells = Vec<(Tunnelled, Offload, usize, Measurement)>;

fn measure(
    both: bool,
    scale: u64,
    rounds: usize,
    writes: &[usize],
) -> Result<Cells, Box<dyn Error>> {
    let mut cells: Cells = Vec::new();
    for &write in writes {
        for kind in Tunnelled::ALL {
            for mode in Offload::ALL {
                let mut best: Option<Measurement> = None;
                for _ in 0..rounds {
                    let m =
                        bulk::transfer_tunnel(kind, mode, write, cell_bytes(write) / scale, both)
                            .map_err(|e| {
                            format!("{} {} at {}: {e}", kind.name(), mode.name(), human(write))
                        })?;
                    if best.is_none_or(|b| m.gbit_per_s() > b.gbit_per_s()) {
                        best = Some(m);
                    }
                }
                if let Some(m) = best {
                    cells.push((kind, mode, write, m));
                }
            }
        }
    }
    Ok(cells)
}

/// One cell, `repeat` times, one line each (for profiling and for side by
/// side runs of two builds): `spec` is `KIND:MODE`, as the tables name them.
pub fn one_cell(spec: &str, write: usize, repeat: usize) -> Result<(), Box<dyn Error>> {
    let (kind, mode) = spec
        .split_once(':')
        .ok_or("--tunnel-cell takes KIND:MODE")?;
    let kind = Tunnelled::ALL
        .into_iter()
        .find(|k| k.name() == kind)
        .ok_or_else(|| format!("no tunnel kind {kind:?}"))?;
    let mode = Offload::ALL
        .into_iter()
        .find(|m| m.name() == mode)
        .ok_or_else(|| format!("no offload mode {mode:?}"))?;
    for _ in 0..repeat {
        let m = bulk::transfer_tunnel(kind, mode, write, cell_bytes(write), false)?;
        println!(
            "{} {} at {}: {:.2} Gbit/s, {:.3} CPU s/GB",
            kind.name(),
            mode.name(),
            human(write),
            m.gbit_per_s(),
            m.cpu_s_per_gb()
        );
    }
    Ok(())
}

fn get(cells: &Cells, kind: Tunnelled, mode: Offload, write: usize) -> Option<&Measurement> {
    cells
        .iter()
        .find(|c| c.0 == kind && c.1 == mode && c.2 == write)
        .map(|c| &c.3)
}

/// Runs the experiment, prints its tables and the targets, adds its charts.
pub fn section(
    out: &mut Out,
    quick: bool,
    only_write: Option<usize>,
) -> Result<(), Box<dyn Error>> {
    let (scale, rounds) = if quick { (8, 1) } else { (1, 3) };
    let writes: Vec<usize> = WRITES
        .into_iter()
        .filter(|w| only_write.is_none_or(|o| o == *w))
        .collect();
    println!();
    println!(
        "tunnel experiment: TCP bulk through VXLAN, GENEVE (2 options) and NVGRE over the memory \
         backend, underlay MTU 1500 (overlay 1450/1438/1458), best of {rounds}"
    );
    println!(
        "hw = tunnel TSO/LRO ports (super-frames encapsulated and carried whole); sw = plain ports, \
         the underlay shim does tunnel GSO/GRO and checksums; off = MSS segments encapsulated one by one"
    );
    for (both, dir) in [(false, "uni"), (true, "bi")] {
        let cells = measure(both, scale, rounds, &writes)?;
        println!();
        println!(
            "{} ({}): Gbit/s and CPU s/GB{}",
            if both {
                "bidirectional"
            } else {
                "unidirectional"
            },
            dir,
            if both {
                " (bytes of both directions)"
            } else {
                ""
            }
        );
        println!(
            "{:>7} {:>8} | {:>15} | {:>15} | {:>15} | {:>6} {:>6} {:>8}",
            "tunnel",
            "write",
            "hw Gb/s CPUs/GB",
            "sw Gb/s CPUs/GB",
            "off Gb/s CPUs/GB",
            "hw/off",
            "sw/off",
            "hw/plain"
        );
        for kind in Tunnelled::ALL {
            for &write in &writes {
                let (Some(hw), Some(sw), Some(off), Some(plain)) = (
                    get(&cells, kind, Offload::Hw, write),
                    get(&cells, kind, Offload::Sw, write),
                    get(&cells, kind, Offload::Off, write),
                    get(&cells, Tunnelled::No, Offload::Hw, write),
                ) else {
                    continue;
                };
                let c =
                    |m: &Measurement| format!("{:>7.2} {:>7.3}", m.gbit_per_s(), m.cpu_s_per_gb());
                println!(
                    "{:>7} {:>8} | {} | {} | {} | {:>5.2}x {:>5.2}x {:>7.2}x",
                    kind.name(),
                    human(write),
                    c(hw),
                    c(sw),
                    c(off),
                    hw.gbit_per_s() / off.gbit_per_s(),
                    sw.gbit_per_s() / off.gbit_per_s(),
                    hw.gbit_per_s() / plain.gbit_per_s(),
                );
            }
        }
        for (kind, mode, write, m) in &cells {
            out.row(Row {
                experiment: format!("tunnel_{}", kind.name()),
                direction: dir,
                stack: mode.name().to_string(),
                write: *write,
                gbit_per_s: m.gbit_per_s(),
                cpu_s_per_gb: m.cpu_s_per_gb(),
            });
        }
        targets(&cells);
        charts(out, &cells, dir)?;
    }
    Ok(())
}

/// The targets, from this run: each ratio of Gbit/s (wall time, which a
/// busy machine disturbs) and of CPU per byte (the steadier one: the inverse
/// ratio of CPU seconds per GB).
fn targets(cells: &Cells) {
    let ratio = |a: Option<&Measurement>, b: Option<&Measurement>| match (a, b) {
        (Some(a), Some(b)) => Some((
            a.gbit_per_s() / b.gbit_per_s(),
            b.cpu_s_per_gb() / a.cpu_s_per_gb(),
        )),
        _ => None,
    };
    for kind in [Tunnelled::Vxlan, Tunnelled::Geneve, Tunnelled::Nvgre] {
        let k = 64 * 1024;
        let vs_plain = ratio(
            get(cells, kind, Offload::Hw, k),
            get(cells, Tunnelled::No, Offload::Hw, k),
        );
        let onoff64 = ratio(
            get(cells, kind, Offload::Hw, k),
            get(cells, kind, Offload::Off, k),
        );
        let onoff1 = ratio(
            get(cells, kind, Offload::Hw, 1024),
            get(cells, kind, Offload::Off, 1024),
        );
        let f = |r: Option<(f64, f64)>, want: f64| match r {
            Some((g, c)) => format!(
                "{g:.2}x Gbit/s, {c:.2}x CPU ({})",
                match (g >= want, c >= want) {
                    (true, true) => "met",
                    (false, false) => "NOT met",
                    _ => "met by one measure",
                }
            ),
            None => "-".to_string(),
        };
        println!(
            "  {}: hw vs no tunnel at 64 KiB {} [>= 0.9x]; hw/off at 64 KiB {} [>= 3x]; at 1 KiB {} [>= 2x]",
            kind.name(),
            f(vs_plain, 0.9),
            f(onoff64, 3.0),
            f(onoff1, 2.0)
        );
    }
}

fn charts(out: &mut Out, cells: &Cells, dir: &str) -> Result<(), Box<dyn Error>> {
    for kind in [Tunnelled::Vxlan, Tunnelled::Geneve, Tunnelled::Nvgre] {
        let series = |value: fn(&Measurement) -> f64| -> Vec<Series> {
            let mut s: Vec<Series> = Offload::ALL
                .into_iter()
                .map(|mode| Series {
                    name: format!("{} {}", kind.name(), mode.name()),
                    points: cells
                        .iter()
                        .filter(|c| c.0 == kind && c.1 == mode)
                        .map(|c| (c.2, value(&c.3)))
                        .collect(),
                })
                .collect();
            s.push(Series {
                name: "no tunnel, hw".to_string(),
                points: cells
                    .iter()
                    .filter(|c| c.0 == Tunnelled::No && c.1 == Offload::Hw)
                    .map(|c| (c.2, value(&c.3)))
                    .collect(),
            });
            s
        };
        let what = if dir == "bi" {
            "bidirectional"
        } else {
            "unidirectional"
        };
        out.chart(
            &format!("tunnel_{}_{dir}_gbps", kind.name()),
            &format!(
                "TCP through {} ({what}): throughput, offloads on vs off",
                kind.name().to_uppercase()
            ),
            "Gbit/s",
            &series(Measurement::gbit_per_s),
        )?;
        out.chart(
            &format!("tunnel_{}_{dir}_cpu", kind.name()),
            &format!(
                "TCP through {} ({what}): CPU per GB, offloads on vs off",
                kind.name().to_uppercase()
            ),
            "CPU seconds per GB",
            &series(Measurement::cpu_s_per_gb),
        )?;
    }
    Ok(())
}
