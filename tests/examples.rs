//! Every small API example runs, as a user would start it, in its `--memory`
//! mode: the example's own server code against a client of linerate's on an
//! in-memory wire, which checks what comes back byte for byte and makes the
//! example exit 0 (an assertion in it fails the run). The TAP modes, against
//! the kernel, are in `system_examples.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod examples_common;

use examples_common::run;
use std::time::Duration;

/// Runs `name --memory ARGS` and checks it succeeded and printed `last`.
fn memory(name: &str, args: &[&str], last: &str) {
    let mut all = vec!["--memory"];
    all.extend_from_slice(args);
    let (status, lines) = run(name, &all, Duration::from_secs(60));
    assert!(status.success(), "{name}: {status}: {lines:?}");
    assert!(
        lines.iter().any(|l| l.contains(last)),
        "{name}: no line with {last:?}: {lines:?}"
    );
}

#[test]
fn tcp_echo_echoes_a_megabyte() {
    memory("tcp_echo", &[], "1000000 bytes echoed over the memory wire");
}

#[test]
fn udp_echo_echoes_every_datagram() {
    memory("udp_echo", &[], "100 datagrams echoed");
}

#[test]
fn tcp_proxy_spreads_connections_round_robin() {
    memory(
        "tcp_proxy",
        &[],
        "6 connections spread over 3 backends in turn",
    );
}

#[test]
fn event_loop_drives_two_engines_by_hand() {
    memory(
        "event_loop",
        &[],
        "1000000 bytes echoed over the memory wire",
    );
}

#[test]
fn http_hello_answers_and_returns() {
    memory(
        "http_hello",
        &["--body-bytes", "300000"],
        "the response arrived whole",
    );
}

/// The flags are clap's: `--help` lists them, a wrong one is refused.
#[test]
fn examples_explain_their_flags() {
    for name in [
        "tcp_echo",
        "udp_echo",
        "tcp_proxy",
        "event_loop",
        "http_hello",
    ] {
        let (status, lines) = run(name, &["--help"], Duration::from_secs(30));
        assert!(status.success(), "{name} --help: {lines:?}");
        for flag in ["--tap", "--ip", "--memory"] {
            assert!(
                lines.iter().any(|l| l.contains(flag)),
                "{name} --help lacks {flag}: {lines:?}"
            );
        }
        let (status, _) = run(name, &["--no-such-flag"], Duration::from_secs(30));
        assert_eq!(status.code(), Some(2), "{name} accepted a wrong flag");
    }
}

/// The offload report's flags (clap's derive, the same names and defaults as
/// before) and its `summary.md`: one Markdown table of ratios, one row per
/// headline write size measured.
#[test]
fn offload_report_writes_its_summary() {
    let dir = std::env::temp_dir().join(format!("lr-report-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let args = [
        "--quick",
        "--write",
        "65536",
        "--no-tunnel",
        "--no-scaling",
        "--no-vnic",
        "--out",
        out,
    ];
    let (status, lines) = run("offload_report", &args, Duration::from_secs(300));
    assert!(status.success(), "{status}: {lines:?}");
    let summary = std::fs::read_to_string(dir.join("summary.md")).unwrap();
    let csv = std::fs::read_to_string(dir.join("report.csv")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let rows: Vec<&str> = summary.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows.len(), 3, "{summary}");
    assert!(
        rows[0].contains("sw / off") && rows[0].contains("hw / smoltcp"),
        "{summary}"
    );
    // Four ratios, each a positive number.
    let cells: Vec<&str> = rows[2].split('|').map(str::trim).collect();
    assert_eq!(cells[1], "64 KiB", "{summary}");
    for c in &cells[2..6] {
        let x: f64 = c.trim_end_matches('x').parse().unwrap();
        assert!(x > 0.0 && x.is_finite(), "{summary}");
    }
    assert_eq!(
        csv.lines().filter(|l| l.starts_with("tcp_bulk,")).count(),
        4,
        "{csv}"
    );

    // One cell, twice; an unknown stack is refused by the parser.
    let (status, lines) = run(
        "offload_report",
        &[
            "--only",
            "linerate-hw",
            "--write",
            "1024",
            "--quick",
            "--repeat",
            "2",
        ],
        Duration::from_secs(300),
    );
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("linerate-hw at 1 KiB"))
            .count(),
        2
    );
    let (status, lines) = run(
        "offload_report",
        &["--only", "nosuch"],
        Duration::from_secs(30),
    );
    assert_eq!(status.code(), Some(2), "{lines:?}");
}
