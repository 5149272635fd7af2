//! tshark as an independent dissector, with checksum validation on.

use std::io;
use std::path::Path;
use std::process::Command;

/// The options that make tshark validate IPv4, TCP and UDP checksums and print
/// absolute TCP sequence numbers.
pub const VALIDATE: &[&str] = &[
    "-o",
    "ip.check_checksum:TRUE",
    "-o",
    "tcp.check_checksum:TRUE",
    "-o",
    "udp.check_checksum:TRUE",
    "-o",
    "tcp.relative_sequence_numbers:FALSE",
];

/// True if a `tshark` binary runs.
pub fn available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs tshark on `pcap` and returns, per frame, the value of each of `fields`
/// (all occurrences of a field joined with `,`, empty when absent). `extra` adds
/// arguments such as `-d udp.port==8472,vxlan`.
pub fn fields(pcap: &Path, fields: &[&str], extra: &[&str]) -> io::Result<Vec<Vec<String>>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(pcap).args(VALIDATE).args(extra);
    cmd.args([
        "-T",
        "fields",
        "-E",
        "separator=|",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    for f in fields {
        cmd.arg("-e").arg(f);
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .map(|l| l.split('|').map(str::to_owned).collect::<Vec<_>>())
        .collect())
}
