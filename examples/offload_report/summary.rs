//! `summary.md`: the report's headline ratios as one Markdown table, the one
//! generated table the README shows. Ratios of goodput, each stack against
//! linerate with offloads off and against smoltcp, at the write sizes the
//! vendor papers quote (1 KiB, 64 KiB); regenerated whole on every run.

use crate::chart::human;
use linerate_testkit::bulk::Measurement;
use std::fmt::Write as _;

/// The write sizes the summary shows, where the run measured them.
const HEADLINE: [usize; 2] = [1024, 64 * 1024];

/// The table from the TCP bulk cells (`[sw, hw, off, smoltcp]` per write
/// size): the headline sizes, or every size measured when the run had
/// neither; `None` if it measured nothing.
pub fn markdown(table: &[(usize, [Measurement; 4])], rounds: usize, quick: bool) -> Option<String> {
    let headline: Vec<_> = table.iter().filter(|(w, _)| HEADLINE.contains(w)).collect();
    let rows = if headline.is_empty() {
        table.iter().collect()
    } else {
        headline
    };
    if rows.is_empty() {
        return None;
    }
    let mut s = String::from(
        "| write | sw / off | hw / off | sw / smoltcp | hw / smoltcp |\n\
         |------:|---------:|---------:|-------------:|-------------:|\n",
    );
    let r = |a: &Measurement, b: &Measurement| a.gbit_per_s() / b.gbit_per_s();
    for (w, [sw, hw, off, smol]) in rows {
        let _ = writeln!(
            s,
            "| {} | {:.2}x | {:.2}x | {:.2}x | {:.2}x |",
            human(*w),
            r(sw, off),
            r(hw, off),
            r(sw, smol),
            r(hw, smol)
        );
    }
    let how = if quick {
        "one round of a tenth of the bytes (`--quick`)".to_string()
    } else {
        format!("best of {rounds} rounds")
    };
    let _ = write!(
        s,
        "\nTCP goodput ratios, one flow over linerate's in-memory backend at MTU 1500, \
         both ends on one thread, {how}, on {}. sw: offloads on, done in software by \
         the NIC layer; hw: offloads on, over ports that have them; off: offloads off; \
         smoltcp: smoltcp 0.14 at both ends. Made by \
         `cargo run --release --example offload_report`.\n",
        machine()
    );
    Some(s)
}

/// The CPU model and how many CPUs the process may use, as far as known.
fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "an unknown CPU".to_string());
    match std::thread::available_parallelism() {
        Ok(n) => format!("{model} ({n} CPUs)"),
        Err(_) => model,
    }
}
