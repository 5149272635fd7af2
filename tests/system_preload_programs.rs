//! Programs nobody here wrote, under `liblinerate_preload.so`, against the
//! Linux kernel on the other side of a TAP (the site of
//! tests/system_preload.rs: a namespace of the test's own, the kernel at
//! 10.217.0.1, linerate at 10.217.0.2, removed also on failure).
//!
//! * nginx serving a 100 MiB file and many small ones with sendfile on, in
//!   one process: curl from the kernel side gets every file byte for byte
//!   (SHA-256 by `sha256sum`), wrk completes its requests with no socket
//!   error and no non-2xx answer.
//! * nginx with a master and two workers: the workers cannot serve the
//!   master's listeners (a documented limit of fork), and nginx's log says
//!   why and what to do.
//! * redis-server under the preload with redis-benchmark from the kernel,
//!   and redis-benchmark under the preload against the kernel's
//!   redis-server: every command answered, and the list LPUSH built holds
//!   every push (asked with redis-cli on the kernel).
//! * curl under the preload fetching from a kernel HTTP server: the body
//!   byte for byte.
//! * sockperf ping-pong, TCP and UDP, server under the preload with the
//!   client on the kernel and the reverse: every message answered, none
//!   dropped, latency sane.
//!
//! The programs come from Debian's packages (.ci/run installs them); a
//! test whose program is missing fails saying which package to install.
//! Not root: the tests say so and pass without running.
//! `cargo test --features system-tests --test system_preload_programs`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod examples_common;
mod preload_common;

use linerate_testkit::netns;
use preload_common::{KERNEL, Marked, OURS, Site, TempDir, need, output, wait_listening};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The site, or `None` (said on stderr) when not root.
fn site() -> Option<Site> {
    if !netns::is_root() {
        eprintln!("skipped: the preload's program tests need root (namespaces, TAP)");
        return None;
    }
    Some(Site::new())
}

/// `len` bytes of a seeded xorshift stream: content the programs cannot
/// have made up.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The SHA-256 of `path`, by coreutils' `sha256sum`.
fn sha256(path: &str) -> String {
    let out = output(
        {
            let mut c = Command::new("sha256sum");
            c.arg(path);
            c
        },
        "sha256sum",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `c` to its end; its output whatever its status.
fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null()).output().expect("the program starts")
}

// ---- nginx ----

const SMALL: usize = 200;

/// nginx's files: a 100 MiB file and [`SMALL`] small ones under `www/`,
/// a config serving them on `port` with sendfile on, in one process.
fn nginx_site(dir: &TempDir, port: u16) -> String {
    let www = dir.0.join("www");
    std::fs::create_dir_all(www.join("s")).unwrap();
    std::fs::write(www.join("big.bin"), pattern(100 << 20, 0x006e_6769_6e78)).unwrap();
    for i in 0..SMALL {
        let body = pattern(100 + 37 * i, i as u64 + 1);
        std::fs::write(www.join("s").join(format!("{i}.bin")), body).unwrap();
    }
    std::fs::create_dir_all(dir.0.join("tmp")).unwrap();
    let d = dir.0.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  keepalive_requests 100000;\n\
           client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n  fastcgi_temp_path {d}/tmp;\n\
           uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n\
           server {{ listen {port}; root {d}/www; }}\n}}\n"
    );
    let path = dir.path("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    path
}

/// The lines of nginx's error log that say something went wrong.
fn nginx_errors(dir: &TempDir) -> String {
    let log = std::fs::read_to_string(dir.0.join("error.log")).unwrap_or_default();
    log.lines()
        .filter(|l| {
            ["[emerg]", "[alert]", "[crit]", "[error]"]
                .iter()
                .any(|k| l.contains(k))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// wrk against `url` for 2 s from the kernel side, with a script that walks
/// the small files; the requests it completed. Fails on any socket error or
/// non-2xx answer.
fn wrk(site: &Site, dir: &TempDir, url: &str) -> u64 {
    let script = dir.path("walk.lua");
    std::fs::write(
        &script,
        format!(
            "n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, \"/s/\" .. (n % {SMALL}) .. \".bin\")\nend\n"
        ),
    )
    .unwrap();
    let out = output(
        site.kernel("wrk", &["-t1", "-c4", "-d2s", "-s", &script, url]),
        "wrk",
    );
    let t = text(&out);
    assert!(!t.contains("Non-2xx"), "wrk got non-2xx answers:\n{t}");
    assert!(!t.contains("Socket errors"), "wrk had socket errors:\n{t}");
    let requests = t
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.split_once(" requests in ")
                .and_then(|(n, _)| n.parse::<u64>().ok())
        })
        .unwrap_or_else(|| panic!("no request count from wrk:\n{t}"));
    assert!(requests >= 20, "wrk completed {requests} requests:\n{t}");
    requests
}

/// nginx in one process under the preload: the big file by SHA-256, every
/// small file byte for byte over one keep-alive connection, then wrk.
#[test]
fn nginx_serves_big_and_small_files() {
    let Some(site) = site() else { return };
    need("nginx", "nginx");
    need("curl", "curl");
    need("wrk", "wrk");
    let dir = TempDir::new("lrpn");
    let conf = nginx_site(&dir, 8080);
    let nginx = site.preloaded(
        "nginx",
        &[
            "-p",
            &dir.path(""),
            "-c",
            &conf,
            "-e",
            &dir.path("error.log"),
        ],
    );
    let _nginx = preload_common::KillOnDrop(Some(
        {
            let mut c = nginx;
            c.stdin(Stdio::null()).stdout(Stdio::null());
            c
        }
        .spawn()
        .unwrap(),
    ));
    wait_listening(&site, SocketAddr::from((OURS, 8080)));
    let base = format!("http://{OURS}:8080");

    let got = dir.path("got.bin");
    let out = output(
        site.kernel(
            "curl",
            &["-sS", "--fail", "-o", &got, &format!("{base}/big.bin")],
        ),
        "curl of the big file",
    );
    drop(out);
    assert_eq!(
        sha256(&got),
        sha256(&dir.path("www/big.bin")),
        "the big file's SHA-256; nginx says:\n{}",
        nginx_errors(&dir)
    );
    let _ = std::fs::remove_file(&got);

    let into = dir.path("got/#1.bin");
    output(
        site.kernel(
            "curl",
            &[
                "-sS",
                "--fail",
                "--create-dirs",
                "-o",
                &into,
                &format!("{base}/s/[0-{}].bin", SMALL - 1),
            ],
        ),
        "curl of the small files",
    );
    for i in 0..SMALL {
        let want = std::fs::read(dir.0.join(format!("www/s/{i}.bin"))).unwrap();
        let got = std::fs::read(dir.0.join(format!("got/{i}.bin"))).unwrap_or_default();
        assert!(
            got == want,
            "small file {i}: {} bytes of {}",
            got.len(),
            want.len()
        );
    }

    let requests = wrk(&site, &dir, &format!("{base}/"));
    let errors = nginx_errors(&dir);
    assert!(errors.is_empty(), "nginx logged:\n{errors}");
    eprintln!("nginx under the preload: wrk completed {requests} requests in 2 s");
}

/// nginx with a master and two workers: the workers accept on listeners the
/// master opened before it forked, which a child cannot serve (the queue
/// threads stay in the master; see the crate docs on fork). What is
/// checked is that the failure says so, and what to do, in nginx's log.
#[test]
fn nginx_workers_say_why_inherited_listeners_fail() {
    let Some(site) = site() else { return };
    need("nginx", "nginx");
    let dir = TempDir::new("lrpw");
    std::fs::create_dir_all(dir.0.join("www")).unwrap();
    std::fs::create_dir_all(dir.0.join("tmp")).unwrap();
    let d = dir.0.display();
    let conf = format!(
        "daemon off;\nmaster_process on;\nworker_processes 2;\nuser root;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 64; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n\
           fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n\
           server {{ listen 8082; root {d}/www; }}\n}}\n"
    );
    let conf_path = dir.path("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let mut nginx = site.preloaded(
        "nginx",
        &[
            "-p",
            &dir.path(""),
            "-c",
            &conf_path,
            "-e",
            &dir.path("error.log"),
        ],
    );
    nginx.stdin(Stdio::null()).stdout(Stdio::null());
    let _nginx = preload_common::KillOnDrop(Some(nginx.spawn().unwrap()));
    // The master's engine completes the handshake; a worker's accept is
    // what fails.
    wait_listening(&site, SocketAddr::from((OURS, 8082)));
    let said = "linerate-preload: a linerate socket inherited through fork is not usable";
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut log = String::new();
    while std::time::Instant::now() < deadline {
        log = std::fs::read_to_string(dir.0.join("error.log")).unwrap_or_default();
        if log.contains(said) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let line = log.lines().find(|l| l.contains(said)).unwrap_or_else(|| {
        panic!(
            "no word from the library in nginx's log:\n{}",
            log.lines().take(20).collect::<Vec<_>>().join("\n")
        )
    });
    assert!(line.contains("master_process off"), "{line}");
}

// ---- redis ----

/// `redis-benchmark -t set,get,lpush` against `host:port` by `cmd`: every
/// command reported, no error; then the list holds every push.
///
/// A run that fails outright is printed and run once more: in one CI run of
/// many, redis-benchmark against the preloaded server got no reply to its
/// first CONFIG GET and could not be made to fail so again; a second
/// failure fails the test with both outputs.
fn redis_benchmark(site: &Site, mut cmd: impl FnMut() -> Command, host: &str, port: &str) {
    const N: u64 = 2000;
    let mut out = run(cmd());
    let mut first = String::new();
    if !out.status.success() {
        first = text(&out);
        eprintln!("redis-benchmark failed once, running it again:\n{first}");
        std::thread::sleep(Duration::from_secs(1));
        // The list starts empty again, as LLEN below counts one run's pushes.
        let _ = run(site.kernel("redis-cli", &["-h", host, "-p", port, "del", "mylist"]));
        out = run(cmd());
    }
    let t = text(&out);
    let t = if first.is_empty() {
        t
    } else {
        format!("{t}\n(first run:\n{first})")
    };
    assert!(out.status.success(), "redis-benchmark failed:\n{t}");
    assert!(!t.to_lowercase().contains("error"), "redis-benchmark:\n{t}");
    for name in ["SET", "GET", "LPUSH"] {
        assert!(
            t.lines()
                .any(|l| l.contains(&format!("{name}: ")) && l.contains("requests per second")),
            "no {name} figure from redis-benchmark:\n{t}"
        );
    }
    let len = output(
        site.kernel("redis-cli", &["-h", host, "-p", port, "llen", "mylist"]),
        "redis-cli llen",
    );
    let len = String::from_utf8_lossy(&len.stdout).trim().to_owned();
    assert_eq!(len, N.to_string(), "LPUSH's list after {N} pushes");
    eprintln!("redis-benchmark:\n{}", t.trim());
}

fn redis_args(dir: &TempDir, bind: &str, port: &str) -> Vec<String> {
    [
        "--port",
        port,
        "--bind",
        bind,
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--dir",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain([dir.path("")])
    .collect()
}

#[test]
fn redis_server_under_the_preload() {
    let Some(site) = site() else { return };
    need("redis-server", "redis-server");
    need("redis-benchmark", "redis-tools");
    let dir = TempDir::new("lrpr");
    let args = redis_args(&dir, "0.0.0.0", "6380");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _server = Marked::new(site.preloaded("redis-server", &args), "Ready to accept");
    let host = OURS.to_string();
    redis_benchmark(
        &site,
        || {
            site.kernel(
                "redis-benchmark",
                &[
                    "-h",
                    &host,
                    "-p",
                    "6380",
                    "-n",
                    "2000",
                    "-t",
                    "set,get,lpush",
                    "-q",
                ],
            )
        },
        &host,
        "6380",
    );
}

#[test]
fn redis_benchmark_under_the_preload() {
    let Some(site) = site() else { return };
    need("redis-server", "redis-server");
    need("redis-benchmark", "redis-tools");
    let dir = TempDir::new("lrpr");
    let host = KERNEL.to_string();
    let args = redis_args(&dir, &host, "6381");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _server = Marked::new(site.kernel("redis-server", &args), "Ready to accept");
    redis_benchmark(
        &site,
        || {
            site.preloaded(
                "redis-benchmark",
                &[
                    "-h",
                    &host,
                    "-p",
                    "6381",
                    "-n",
                    "2000",
                    "-t",
                    "set,get,lpush",
                    "-q",
                ],
            )
        },
        &host,
        "6381",
    );
}

// ---- curl ----

/// A kernel HTTP/1.0 server in the namespace answering every request with
/// `body`; stops when dropped.
struct HttpServer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl HttpServer {
    fn start(site: &Site, port: u16, body: Arc<Vec<u8>>) -> HttpServer {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let stop2 = Arc::clone(&stop);
        let thread = site
            .ns
            .spawn(move || {
                let l = std::net::TcpListener::bind(SocketAddr::from((KERNEL, port))).unwrap();
                l.set_nonblocking(true).unwrap();
                tx.send(()).unwrap();
                while !stop2.load(Ordering::Relaxed) {
                    let Ok((mut c, _)) = l.accept() else {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    };
                    c.set_nonblocking(false).unwrap();
                    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                    let mut req = Vec::new();
                    let mut b = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                        match c.read(&mut b) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => req.extend_from_slice(&b[..n]),
                        }
                    }
                    let head = format!(
                        "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                        body.len()
                    );
                    let _ = c.write_all(head.as_bytes());
                    let _ = c.write_all(&body);
                }
            })
            .unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        HttpServer {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn curl_under_the_preload_fetches_from_the_kernel() {
    let Some(site) = site() else { return };
    need("curl", "curl");
    let body = Arc::new(pattern(3 << 20, 0x6375_726c));
    let _server = HttpServer::start(&site, 8081, Arc::clone(&body));
    let dir = TempDir::new("lrpu");
    let got = dir.path("got.bin");
    let out = output(
        site.preloaded(
            "curl",
            &[
                "-sS",
                "--fail",
                "-o",
                &got,
                &format!("http://{KERNEL}:8081/file"),
            ],
        ),
        "curl under the preload",
    );
    drop(out);
    let got = std::fs::read(&got).unwrap();
    assert!(
        got == *body,
        "curl got {} bytes of {}",
        got.len(),
        body.len()
    );
}

// ---- sockperf ----

/// What one sockperf ping-pong run reports.
#[derive(Debug)]
struct PingPong {
    sent: u64,
    received: u64,
    /// Average round-trip latency over two, microseconds (sockperf's figure).
    avg_us: f64,
    p50_us: f64,
    p99_us: f64,
}

/// Reads sockperf's summary; fails on any error, loss, duplicate or
/// reordering it reports.
fn ping_pong_report(t: &str) -> PingPong {
    assert!(!t.contains("ERROR"), "sockperf reports an error:\n{t}");
    let after = |key: &str| -> Option<f64> {
        let (_, rest) = t.split_once(key)?;
        let v: String = rest
            .trim_start_matches([' ', '='])
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        v.parse().ok()
    };
    let valid = t
        .lines()
        .find(|l| l.contains("[Valid Duration]"))
        .unwrap_or_else(|| panic!("no summary from sockperf:\n{t}"));
    let field = |key: &str| -> u64 {
        valid
            .split_once(key)
            .and_then(|(_, r)| r.split(';').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {valid}"))
    };
    for counted in [
        "# dropped messages = ",
        "# duplicated messages = ",
        "# out-of-order messages = ",
    ] {
        assert_eq!(after(counted), Some(0.0), "sockperf's {counted}:\n{t}");
    }
    PingPong {
        sent: field("SentMessages="),
        received: field("ReceivedMessages="),
        avg_us: after("Summary: Latency is").unwrap_or_else(|| panic!("no latency:\n{t}")),
        p50_us: after("percentile 50.000").unwrap_or(f64::NAN),
        p99_us: after("percentile 99.000").unwrap_or(f64::NAN),
    }
}

/// One ping-pong run, 64-byte messages for 1 s; `preload_server` says which
/// end runs under the preload.
fn sockperf(site: &Site, preload_server: bool, tcp: bool) -> PingPong {
    let server_ip = if preload_server { OURS } else { KERNEL };
    let ip = server_ip.to_string();
    let port = if tcp { "11111" } else { "11112" };
    let mut server_args = vec!["sockperf", "server", "-i", &ip, "-p", port];
    let mut client_args = vec![
        "sockperf",
        "ping-pong",
        "-i",
        &ip,
        "-p",
        port,
        "-t",
        "1",
        "-m",
        "64",
    ];
    if tcp {
        server_args.push("--tcp");
        client_args.push("--tcp");
    }
    // Line-buffered: the ready line must reach the test while it runs.
    let mut sa = vec!["-oL"];
    sa.extend(&server_args);
    let server_cmd = if preload_server {
        site.preloaded("stdbuf", &sa)
    } else {
        site.kernel("stdbuf", &sa)
    };
    let server = Marked::new(server_cmd, "to block on socket");
    let client = if preload_server {
        site.kernel(client_args[0], &client_args[1..])
    } else {
        site.preloaded(client_args[0], &client_args[1..])
    };
    let out = run(client);
    let t = text(&out);
    assert!(
        out.status.success(),
        "sockperf client failed:\n{t}\nserver:\n{}",
        server.printed()
    );
    let r = ping_pong_report(&t);
    assert!(r.received > 100, "{r:?}\n{t}");
    assert!(
        r.sent >= r.received && r.sent - r.received <= 1,
        "{r:?}\n{t}"
    );
    // Sane: well under the kernel's own timers and retransmission timeouts.
    assert!(r.avg_us > 0.0 && r.avg_us < 10_000.0, "{r:?}\n{t}");
    eprintln!(
        "sockperf ping-pong {} (server under the preload: {preload_server}): {} round trips, \
         latency avg {:.1} us, p50 {:.1} us, p99 {:.1} us",
        if tcp { "TCP" } else { "UDP" },
        r.received,
        r.avg_us,
        r.p50_us,
        r.p99_us
    );
    r
}

#[test]
fn sockperf_server_under_the_preload() {
    let Some(site) = site() else { return };
    need("sockperf", "sockperf");
    need("stdbuf", "coreutils");
    sockperf(&site, true, true);
    sockperf(&site, true, false);
}

#[test]
fn sockperf_client_under_the_preload() {
    let Some(site) = site() else { return };
    need("sockperf", "sockperf");
    need("stdbuf", "coreutils");
    sockperf(&site, false, true);
    sockperf(&site, false, false);
}

// ---- the TOE experiment's tool ----

/// `toe_report` (the TOE experiment, an example) runs every cell
/// end to end at one write size: the preloaded and the kernel's iperf3s in
/// its own namespaces, each cell's figures in the CSV, both charts drawn,
/// the ratio table and the latency cells printed, and nothing of its lab left
/// behind.
#[test]
fn toe_report_measures_every_cell() {
    if !netns::is_root() {
        eprintln!("skipped: toe_report needs root");
        return;
    }
    need("iperf3", "iperf3");
    need("sockperf", "sockperf");
    let exe = examples_common::example("toe_report");
    let lib = preload_common::library();
    let dir = TempDir::new("lrtoe");
    let before = netns_list();
    let mut c = Command::new("timeout");
    c.arg("120")
        .arg(&exe)
        .args(["--write", "1024", "--seconds", "1", "--preload"])
        .arg(&lib)
        .arg("--out")
        .arg(&dir.0);
    let out = output(c, "toe_report");
    let t = String::from_utf8_lossy(&out.stdout);
    let csv = std::fs::read_to_string(dir.0.join("report.csv")).unwrap();
    let cells = [
        "nic-one-way",
        "toe-send",
        "toe-receive",
        "nic-bidir",
        "toe-bidir",
    ];
    for cell in cells {
        let row = csv
            .lines()
            .find(|l| l.split(',').nth(2) == Some(cell))
            .unwrap_or_else(|| panic!("no {cell} row in report.csv:\n{csv}\n{t}"));
        let f: Vec<&str> = row.split(',').collect();
        assert_eq!(f[3], "1024", "{row}");
        let gbps: f64 = f[4].parse().unwrap();
        let cpu: f64 = f[5].parse().unwrap();
        // One side at least writes 1 KiB a call for a second over a TAP or a
        // veth: far above a megabit, and the machine worked for it.
        assert!(gbps > 0.001 && gbps < 1000.0, "{row}");
        assert!(cpu > 0.0 && cpu.is_finite(), "{row}");
    }
    let md = std::fs::read_to_string(dir.0.join("summary.md")).unwrap();
    assert_eq!(md.matches("| 1 KiB |").count(), 2, "{md}");
    for chart in ["toe_gbps.svg", "toe_cpu.svg"] {
        let svg = std::fs::read_to_string(dir.0.join(chart)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("TOE, linerate sends"),
            "{chart}"
        );
    }
    for line in ["toe-send", "toe-receive", "toe-bidir"] {
        assert!(
            t.lines().any(|l| l.contains(line) && l.contains('x')),
            "no ratio for {line}:\n{t}"
        );
    }
    for l in [
        "NIC: kernel to kernel",
        "TOE: linerate server",
        "TOE: linerate client",
    ] {
        assert!(t.contains(l), "no latency line {l}:\n{t}");
    }
    assert_eq!(netns_list(), before, "toe_report left namespaces behind");
}

/// The namespaces `ip netns` lists, sorted.
fn netns_list() -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let mut v: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        // toe_report's own prefixes (examples/toe_report/run.rs).
        .filter(|n| ["lrtr", "lrts", "lrtk"].iter().any(|p| n.starts_with(p)))
        .collect();
    v.sort();
    v
}
