//! Unmodified programs under `liblinerate_preload.so`, against the Linux
//! kernel on the other side of a TAP.
//!
//! Each test makes a network namespace with a persistent TAP in it, the
//! kernel at 10.217.0.1/24 on it; the preloaded program runs inside the
//! namespace, where linerate opens the TAP by name and answers at
//! 10.217.0.2 (the config file is written by the test). The peers are the
//! kernel's own: iperf3 (Debian's package), and std::net servers on threads
//! that entered the namespace. The namespace, the TAP and the files are
//! removed when the test ends, also on failure.
//!
//! * iperf3 under the preload as client (TCP `-l 64`, `-l 1K`, `-l 64K`,
//!   `-l 256K`, `-R`, `--bidir`, `-P 4`; UDP both ways) and as server (TCP
//!   one way, `-R`, `--bidir`), against the kernel's iperf3: both
//!   ends finish, their JSON reports agree with each other, and what the
//!   receiver counted is what the sender sent less at most what the sender's
//!   buffers held when the test ended (TCP), or less what the receiver
//!   reports lost (UDP).
//! * A C program (tests/preload_c/edge.c, compiled here with `cc`) calls
//!   the interposed functions through their edge cases: run on the kernel
//!   (the same namespace, the kernel talking to itself) and under the
//!   preload, it prints the same lines (among them TCP_INFO's fields and
//!   what a kernel peer saw of a close with SO_LINGER 0).
//! * Random call sequences under the preload (a proptest in this binary,
//!   run again as the preloaded program): no call answers `EIO` (a caught
//!   panic), and no descriptor outlives its sequence.
//!
//! The library is built by the test (`cargo build -p linerate-preload`).
//! Needs root: `cargo test --features system-tests --test system_preload`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod preload_common;

use linerate_testkit::netns::{self, Netns};
use preload_common::{
    KERNEL, KERNEL6, OURS, OURS6, Site, Started, check_tcp, iperf3, iperf3_between, library, num,
    output,
};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

fn tcp_client(args: &[&str]) {
    let site = Site::new();
    let reverse = args.contains(&"-R");
    let (c, s) = iperf3(&site, true, args);
    let gbps = check_tcp(&c, &s, reverse);
    eprintln!("iperf3 client under the preload {args:?}: {gbps:.2} Gbit/s");
}

#[test]
fn iperf3_client_tcp_64() {
    tcp_client(&["-l", "64"]);
}

#[test]
fn iperf3_client_tcp_64k() {
    tcp_client(&["-l", "64K"]);
}

#[test]
fn iperf3_client_tcp_1k() {
    tcp_client(&["-l", "1K", "-t", "1"]);
}

#[test]
fn iperf3_client_tcp_256k() {
    tcp_client(&["-l", "256K", "-t", "1"]);
}

#[test]
fn iperf3_client_tcp_reverse() {
    tcp_client(&["-R"]);
}

#[test]
fn iperf3_client_tcp_four_streams() {
    let site = Site::new();
    let (c, s) = iperf3(&site, true, &["-P", "4"]);
    let gbps = check_tcp(&c, &s, false);
    assert_eq!(c["end"]["streams"].as_array().map(Vec::len), Some(4));
    eprintln!("iperf3 client under the preload -P 4: {gbps:.2} Gbit/s");
}

/// IPv6 peers (`net.address6`): the preloaded iperf3 connects to the
/// kernel's IPv6 address and serves a kernel client that connects to
/// linerate's, TCP both ways and UDP; the servers' reports name linerate's
/// address, which the kernel does not have, so linerate carried them.
#[test]
fn iperf3_over_ipv6_both_ways() {
    let site = Site::with_ipv6();
    let addrs = (KERNEL6.into(), OURS6.into());
    let ours = OURS6.to_string();
    let host = |v: &Value, key: &str| v["start"]["connected"][0][key].as_str().map(str::to_owned);
    let (c, s) = iperf3_between(&site, true, addrs, &["-t", "1"]);
    let gbps = check_tcp(&c, &s, false);
    assert_eq!(host(&s, "remote_host"), Some(ours.clone()), "{s}");
    eprintln!("iperf3 client under the preload over IPv6: {gbps:.2} Gbit/s");
    let (c, s) = iperf3_between(&site, false, addrs, &["-t", "1", "-R"]);
    let gbps = check_tcp(&c, &s, true);
    assert_eq!(host(&s, "local_host"), Some(ours.clone()), "{s}");
    assert_eq!(host(&c, "remote_host"), Some(ours.clone()), "{c}");
    eprintln!("iperf3 server under the preload over IPv6, sending: {gbps:.2} Gbit/s");
    let (c, s) = iperf3_between(&site, true, addrs, &["-t", "1", "-u", "-b", "50M"]);
    check_udp(&c, &s, false);
    assert_eq!(host(&s, "remote_host"), Some(ours), "{s}");
}

/// The families a listener takes, as the kernel's: an AF_INET socket IPv4
/// peers only, an AF_INET6 one both (IPv4 peers as IPv4-mapped addresses),
/// and with IPV6_V6ONLY IPv6 peers only. The engine's listener is one per
/// port whatever the family; the library turns the others away.
#[test]
fn listeners_take_the_families_their_sockets_ask_for() {
    let site = Site::with_ipv6();
    let script = r#"
import selectors, socket
sel = selectors.DefaultSelector()
def listener(family, port, v6only=None):
    s = socket.socket(family)
    if v6only is not None:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    s.bind(("0.0.0.0" if family == socket.AF_INET else "::", port))
    s.listen()
    sel.register(s, selectors.EVENT_READ)
listener(socket.AF_INET, 5311)
listener(socket.AF_INET6, 5312, 1)
listener(socket.AF_INET6, 5313, 0)
print("ready", flush=True)
while True:
    for key, _ in sel.select():
        c, peer = key.fileobj.accept()
        c.recv(100)
        c.sendall(("%s %d" % (peer[0], key.fileobj.getsockname()[1])).encode())
        c.close()
"#;
    let _server = Started::new(site.preloaded("python3", &["-c", script]));
    let v4 = |port| SocketAddr::from((OURS, port));
    let v6 = |port| SocketAddr::from((OURS6, port));
    let answer = |to: SocketAddr| {
        let back = ask(&site, to, b"x").unwrap_or_else(|e| panic!("{to}: {e}"));
        String::from_utf8(back).unwrap()
    };
    // Refused by the kernel at the SYN; by linerate with a reset just after
    // the handshake (which the client sees at its shutdown or its read).
    let turned_away = |to: SocketAddr| {
        let r = ask(&site, to, b"x");
        assert!(
            r.as_ref().is_err_and(|e| matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionRefused
                    | std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::NotConnected
                    | std::io::ErrorKind::BrokenPipe
            )),
            "{to}: {r:?}"
        );
    };
    assert_eq!(answer(v4(5311)), format!("{KERNEL} 5311"));
    turned_away(v6(5311));
    turned_away(v4(5312));
    assert_eq!(answer(v6(5312)), format!("{KERNEL6} 5312"));
    assert_eq!(answer(v4(5313)), format!("::ffff:{KERNEL} 5313"));
    assert_eq!(answer(v6(5313)), format!("{KERNEL6} 5313"));
}

/// `LINERATE_LOG` with `LINERATE_LOG_FILE`: the runtime's start and the
/// policy's decisions land in the file as tracing lines; without
/// `LINERATE_LOG` the library writes none.
#[test]
fn linerate_log_writes_the_events_to_a_file() {
    let site = Site::new();
    let dir = preload_common::TempDir::new("lrlog");
    let script = r#"
import socket
s = socket.socket()
s.bind(("0.0.0.0", 5321))
s.listen()
print("ready", flush=True)
c, _ = s.accept()
c.sendall(c.recv(100))
c.close()
"#;
    let run = |log: Option<&str>, file: &str| {
        let mut cmd = site.preloaded("python3", &["-c", script]);
        cmd.env("LINERATE_LOG_FILE", file);
        if let Some(l) = log {
            cmd.env("LINERATE_LOG", l);
        }
        let server = Started::new(cmd);
        assert_eq!(
            ask(&site, SocketAddr::from((OURS, 5321)), b"hi").unwrap(),
            b"hi"
        );
        assert!(server.wait().success());
    };
    let with = dir.path("with.log");
    run(Some("debug"), &with);
    let text = std::fs::read_to_string(&with).unwrap();
    assert!(
        text.lines().any(|l| l.contains("INFO")
            && l.contains("linerate started")
            && l.contains("10.217.0.2/24")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.contains("DEBUG")
            && l.contains("policy decided")
            && l.contains("local_port=Some(5321)")
            && l.contains("Linerate")),
        "{text}"
    );
    let without = dir.path("without.log");
    run(None, &without);
    assert!(
        !Path::new(&without).exists(),
        "a log file without LINERATE_LOG"
    );
}

/// exec starts clean: a linerate socket the program made inheritable (no
/// FD_CLOEXEC, which the kernel would pass to the new image) is closed by
/// exec (and so is an inheritable duplicate of it), because the new image's
/// library has no runtime to serve it; the
/// program still reads its own FD_CLOEXEC setting back. A kernel socket
/// (the policy leaves port 5330's peer to the kernel here) is inherited as
/// the kernel inherits it.
#[test]
fn exec_closes_linerate_sockets_and_keeps_kernel_ones() {
    let site = Site::with_policy(
        "[policy]\ndefault = \"kernel\"\n[[policy.rule]]\ntype = \"tcp\"\nremote_port = 5331\naction = \"linerate\"\n",
    );
    // Kernel servers on both ports, on the kernel's address.
    let listeners: Vec<TcpListener> = [5330u16, 5331]
        .iter()
        .map(|&p| {
            site.ns
                .run(move || TcpListener::bind(SocketAddr::from((KERNEL, p))).unwrap())
                .unwrap()
        })
        .collect();
    let script = format!(
        r#"
import fcntl, os, socket, sys
if len(sys.argv) > 1:
    for fd in map(int, sys.argv[1:]):
        try:
            os.fstat(fd)
            print(fd, "open")
        except OSError:
            print(fd, "closed")
    sys.exit(0)
k = socket.create_connection(("{KERNEL}", 5330))
l = socket.create_connection(("{KERNEL}", 5331))
for s in (k, l):
    os.set_inheritable(s.fileno(), True)
    flags = fcntl.fcntl(s.fileno(), fcntl.F_GETFD)
    print("cloexec", bool(flags & fcntl.FD_CLOEXEC))
d = os.dup2(l.fileno(), 50, inheritable=True)
sys.stdout.flush()
os.execv(sys.executable, [sys.executable, "-c", open("/proc/self/cmdline").read().split("\0")[2], str(k.fileno()), str(l.fileno()), str(d)])
"#
    );
    let out = output(site.preloaded("python3", &["-c", &script]), "python3 exec");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(&lines[..2], ["cloexec False", "cloexec False"], "{text}");
    assert!(lines[2].ends_with(" open"), "the kernel socket: {text}");
    assert!(lines[3].ends_with(" closed"), "the linerate socket: {text}");
    assert!(lines[4].ends_with(" closed"), "its duplicate: {text}");
    drop(listeners);
}

#[test]
fn iperf3_server_tcp() {
    let site = Site::new();
    let (c, s) = iperf3(&site, false, &[]);
    let gbps = check_tcp(&c, &s, false);
    eprintln!("iperf3 server under the preload: {gbps:.2} Gbit/s");
}

#[test]
fn iperf3_server_tcp_reverse() {
    let site = Site::new();
    let (c, s) = iperf3(&site, false, &["-R"]);
    let gbps = check_tcp(&c, &s, true);
    eprintln!("iperf3 server under the preload, sending: {gbps:.2} Gbit/s");
}

/// `--bidir`: each direction's byte counts agree as one way's do. The
/// client's report holds both ends' figures for both directions: its own
/// sending and receiving, and the server's (`sum_received`,
/// `sum_sent_bidir_reverse`), which must equal the server's report.
fn check_bidir(client: &Value, server: &Value) -> (f64, f64) {
    let mut gbps = [0.0; 2];
    for (i, (sent_at, got_at, sender, receiver)) in [
        ("sum_sent", "sum_received", client, server),
        (
            "sum_sent_bidir_reverse",
            "sum_received_bidir_reverse",
            server,
            client,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let sent = num(sender, &["end", sent_at, "bytes"]);
        let received = num(receiver, &["end", got_at, "bytes"]);
        let server_side = if i == 0 { got_at } else { sent_at };
        assert_eq!(
            num(client, &["end", server_side, "bytes"]),
            num(server, &["end", server_side, "bytes"]),
            "the client's copy of the server's {server_side}"
        );
        assert!(received > 0.0, "{got_at}: nothing received");
        assert!(
            received <= sent,
            "{got_at}: received {received} > sent {sent}"
        );
        assert!(
            sent - received <= preload_common::in_flight(),
            "{got_at}: sent {sent}, received {received}"
        );
        let secs = num(receiver, &["end", got_at, "seconds"]);
        gbps[i] = received * 8.0 / secs / 1e9;
    }
    (gbps[0], gbps[1])
}

#[test]
fn iperf3_client_tcp_bidir() {
    let site = Site::new();
    let (c, s) = iperf3(&site, true, &["--bidir", "-t", "1"]);
    let (up, down) = check_bidir(&c, &s);
    eprintln!("iperf3 client under the preload --bidir: {up:.2} Gbit/s out, {down:.2} in");
}

#[test]
fn iperf3_server_tcp_bidir() {
    let site = Site::new();
    let (c, s) = iperf3(&site, false, &["--bidir", "-t", "1"]);
    let (up, down) = check_bidir(&c, &s);
    eprintln!("iperf3 server under the preload --bidir: {up:.2} Gbit/s in, {down:.2} out");
}

/// UDP: the receiver counts the sender's datagrams, less those it reports
/// lost, and loses few.
fn check_udp(client: &Value, server: &Value, reverse: bool) {
    let (sender, receiver) = if reverse {
        (server, client)
    } else {
        (client, server)
    };
    let sent = num(sender, &["end", "sum_sent", "packets"]);
    let got = num(receiver, &["end", "sum_received", "packets"]);
    let lost = num(receiver, &["end", "sum_received", "lost_packets"]);
    let bytes = num(receiver, &["end", "sum_received", "bytes"]);
    assert!(got > 0.0 && bytes > 0.0, "nothing received");
    // The receiver's packet count is the highest sequence number it saw;
    // the last few the sender sent may arrive after the receiver stopped.
    assert!(
        got <= sent && sent - got <= 64.0,
        "sent {sent}, receiver counted {got}"
    );
    assert!(lost <= got * 0.1, "lost {lost} of {got}");
    let sent_bytes = num(sender, &["end", "sum_sent", "bytes"]);
    assert!(
        bytes <= sent_bytes,
        "received {bytes} bytes of {sent_bytes}"
    );
    eprintln!("iperf3 UDP (reverse: {reverse}): sent {sent} datagrams, {got} counted, {lost} lost");
}

#[test]
fn iperf3_client_udp() {
    let site = Site::new();
    let (c, s) = iperf3(&site, true, &["-u", "-b", "50M"]);
    check_udp(&c, &s, false);
}

#[test]
fn iperf3_client_udp_reverse() {
    let site = Site::new();
    let (c, s) = iperf3(&site, true, &["-u", "-b", "50M", "-R"]);
    check_udp(&c, &s, true);
}

/// Kernel servers for the C program: TCP echo, TCP reset, UDP echo; they
/// stop when dropped.
struct Peers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
}

const ECHO: u16 = 7101;
const RESET: u16 = 7102;
const CLOSED: u16 = 7103;
const UDP_ECHO: u16 = 7104;
/// Connections come in pairs: the first is read to its end, and the second
/// is told how it ended ("eof" or "reset").
const OBSERVE: u16 = 7105;
/// Accepts and never reads: its window fills, so what is sent to it stays
/// unacknowledged (for SO_LINGER's wait).
const SINK: u16 = 7106;

impl Peers {
    fn start(ns: &Netns) -> Peers {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let (tx, rx) = std::sync::mpsc::channel();
        for port in [ECHO, RESET] {
            let (stop, tx) = (Arc::clone(&stop), tx.clone());
            threads.push(
                ns.spawn(move || {
                    let l = TcpListener::bind(SocketAddr::from((KERNEL, port))).unwrap();
                    l.set_nonblocking(true).unwrap();
                    tx.send(()).unwrap();
                    while !stop.load(Ordering::Relaxed) {
                        let Ok((mut c, _)) = l.accept() else {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        };
                        c.set_nonblocking(false).unwrap();
                        if port == RESET {
                            // SO_LINGER 0: close sends a reset.
                            set_linger_zero(&c);
                            drop(c);
                            continue;
                        }
                        let stop = Arc::clone(&stop);
                        std::thread::spawn(move || {
                            c.set_read_timeout(Some(Duration::from_millis(100)))
                                .unwrap();
                            let mut b = [0u8; 4096];
                            while !stop.load(Ordering::Relaxed) {
                                match c.read(&mut b) {
                                    Ok(0) => break,
                                    Ok(n) => {
                                        if c.write_all(&b[..n]).is_err() {
                                            break;
                                        }
                                    }
                                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                                    Err(_) => break,
                                }
                            }
                        });
                    }
                })
                .unwrap(),
            );
        }
        let (stop2, tx2) = (Arc::clone(&stop), tx.clone());
        threads.push(
            ns.spawn(move || {
                let u = UdpSocket::bind(SocketAddr::from((KERNEL, UDP_ECHO))).unwrap();
                u.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
                tx2.send(()).unwrap();
                let mut b = [0u8; 65536];
                while !stop2.load(Ordering::Relaxed) {
                    if let Ok((n, from)) = u.recv_from(&mut b) {
                        let _ = u.send_to(&b[..n], from);
                    }
                }
            })
            .unwrap(),
        );
        let (stop3, tx3) = (Arc::clone(&stop), tx.clone());
        threads.push(
            ns.spawn(move || {
                let l = TcpListener::bind(SocketAddr::from((KERNEL, OBSERVE))).unwrap();
                l.set_nonblocking(true).unwrap();
                tx3.send(()).unwrap();
                let accept = || loop {
                    if stop3.load(Ordering::Relaxed) {
                        return None;
                    }
                    match l.accept() {
                        Ok((c, _)) => {
                            c.set_nonblocking(false).unwrap();
                            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                            return Some(c);
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                };
                while let Some(mut first) = accept() {
                    let mut b = [0u8; 4096];
                    let how = loop {
                        match first.read(&mut b) {
                            Ok(0) => break "eof\n",
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                                break "reset\n";
                            }
                            Err(_) => break "error\n",
                        }
                    };
                    let Some(mut second) = accept() else { break };
                    let _ = second.write_all(how.as_bytes());
                }
            })
            .unwrap(),
        );
        let (stop4, tx4) = (Arc::clone(&stop), tx.clone());
        threads.push(
            ns.spawn(move || {
                let l = TcpListener::bind(SocketAddr::from((KERNEL, SINK))).unwrap();
                l.set_nonblocking(true).unwrap();
                tx4.send(()).unwrap();
                let mut held = Vec::new();
                while !stop4.load(Ordering::Relaxed) {
                    match l.accept() {
                        Ok((c, _)) => held.push(c),
                        Err(_) => std::thread::sleep(Duration::from_millis(5)),
                    }
                }
            })
            .unwrap(),
        );
        for _ in 0..5 {
            rx.recv_timeout(Duration::from_secs(10)).unwrap();
        }
        Peers { stop, threads }
    }
}

impl Drop for Peers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[allow(unsafe_code)]
fn set_linger_zero(s: &std::net::TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a linger struct and its size, on a live socket.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&raw const l).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
}

/// Compiles tests/preload_c/edge.c into a temporary directory.
fn edge_program(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload_c/edge.c");
    let exe = dir.join("edge");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-pthread", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn c_program_answers_as_the_kernel() {
    let site = Site::new();
    let dir = std::env::temp_dir().join(netns::unique("lrpe"));
    std::fs::create_dir_all(&dir).unwrap();
    struct Rm(PathBuf);
    impl Drop for Rm {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _rm = Rm(dir.clone());
    let exe = edge_program(&dir);
    let _peers = Peers::start(&site.ns);
    let exe = exe.to_str().unwrap();
    let ports = [ECHO, RESET, CLOSED, UDP_ECHO, OBSERVE, SINK].map(|p| p.to_string());
    let ip = KERNEL.to_string();
    let args = [
        ip.as_str(),
        &ports[0],
        &ports[1],
        &ports[2],
        &ports[3],
        &ports[4],
        &ports[5],
    ];
    let kernel = output(site.kernel(exe, &args), "edge on the kernel");
    let stats = dir.join("stats.txt");
    let mut preloaded = site.preloaded(exe, &args);
    preloaded.env("LINERATE_STATS", &stats);
    let ours = output(preloaded, "edge under the preload");
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
    let ours_err = ours.stderr.clone();
    let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
    assert!(
        kernel.ends_with("done\n"),
        "the kernel run ended early:\n{kernel}"
    );
    for (i, (k, o)) in kernel.lines().zip(ours.lines()).enumerate() {
        assert_eq!(
            k,
            o,
            "line {} differs\nkernel:\n{kernel}\npreload:\n{ours}",
            i + 1
        );
    }
    assert_eq!(
        kernel.lines().count(),
        ours.lines().count(),
        "preload:\n{ours}"
    );
    // LINERATE_STATS: the engine's counters, and a line per connection the
    // program closed, with its figures (the TCP_INFO exchange's among them).
    let stats = std::fs::read_to_string(&stats).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; the program's stderr:\n{}",
            stats.display(),
            String::from_utf8_lossy(&ours_err)
        )
    });
    let counter = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("queue 0 {name} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{stats}"))
    };
    assert!(counter("tcp_active_opens") >= 5, "{stats}");
    assert!(counter("rx_frames") > 0, "{stats}");
    let echo = format!("-> {KERNEL}:{ECHO} state ");
    assert!(
        stats
            .lines()
            .any(|l| l.contains(&echo) && l.contains("srtt_us") && l.ends_with("(closed)")),
        "no closed echo connection in\n{stats}"
    );
}

/// One exchange with a server from the kernel side: send `msg`, read until
/// the server closes.
fn ask(site: &Site, to: SocketAddr, msg: &'static [u8]) -> std::io::Result<Vec<u8>> {
    site.ns
        .run(move || {
            let mut c = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(10)))?;
            c.write_all(msg)?;
            c.shutdown(std::net::Shutdown::Write)?;
            let mut back = Vec::new();
            c.read_to_end(&mut back)?;
            Ok(back)
        })
        .unwrap()
}

/// The policy per server: one program, two listeners; the rule offloads
/// port 5301 only. Each is reached on its own stack's address and only
/// there: linerate answers 5302 with a reset, the kernel has nothing on
/// 5301 (its socket was replaced by linerate's).
#[test]
fn policy_splits_one_program_between_the_stacks() {
    let site = Site::with_policy(
        "[policy]\ndefault = \"kernel\"\n[[policy.rule]]\ntype = \"tcp\"\nlocal_port = 5301\naction = \"linerate\"\n",
    );
    let script = r#"
import socket
ls = []
for port in (5301, 5302):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen()
    ls.append(s)
print("ready", flush=True)
for s in ls:
    c, _ = s.accept()
    c.sendall(c.recv(100).upper() + b" " + str(s.getsockname()[1]).encode())
    c.close()
"#;
    let server = Started::new(site.preloaded("python3", &["-c", script]));
    let refused = |to: SocketAddr| {
        let e = ask(&site, to, b"x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{to}: {e}");
    };
    refused(SocketAddr::from((OURS, 5302)));
    refused(SocketAddr::from((KERNEL, 5301)));
    assert_eq!(
        ask(&site, SocketAddr::from((OURS, 5301)), b"tcp").unwrap(),
        b"TCP 5301"
    );
    assert_eq!(
        ask(&site, SocketAddr::from((KERNEL, 5302)), b"tcp").unwrap(),
        b"TCP 5302"
    );
    assert!(server.wait().success());
}

/// python3's asyncio (epoll, non-blocking connect, SO_ERROR) under the
/// preload: an echo server a kernel client checks byte for byte, and a
/// client of the kernel's echo server.
#[test]
fn python_asyncio_echo_both_ways() {
    let site = Site::new();
    let server = r#"
import asyncio
async def echo(r, w):
    while data := await r.read(65536):
        w.write(data)
        await w.drain()
    w.close()
async def main():
    srv = await asyncio.start_server(echo, "0.0.0.0", 5303)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()
asyncio.run(main())
"#;
    let _server = Started::new(site.preloaded("python3", &["-c", server]));
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let to = SocketAddr::from((OURS, 5303));
    let sent = data.clone();
    let back = site
        .ns
        .run(move || -> std::io::Result<Vec<u8>> {
            let c = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
            c.set_read_timeout(Some(Duration::from_secs(20)))?;
            let mut w = c.try_clone()?;
            let writer = std::thread::spawn(move || {
                w.write_all(&sent)?;
                w.shutdown(std::net::Shutdown::Write)
            });
            let mut back = Vec::new();
            (&c).read_to_end(&mut back)?;
            writer.join().unwrap()?;
            Ok(back)
        })
        .unwrap()
        .unwrap();
    assert!(
        back == data,
        "echoed {} bytes of {}",
        back.len(),
        data.len()
    );

    let _peers = Peers::start(&site.ns);
    let client = format!(
        r#"
import asyncio, hashlib
async def main():
    r, w = await asyncio.open_connection("{KERNEL}", {ECHO})
    data = bytes((i * 13) % 256 for i in range(300000))
    w.write(data)
    await w.drain()
    back = await r.readexactly(len(data))
    w.close()
    print("same" if back == data else "differs", flush=True)
asyncio.run(main())
"#
    );
    let out = output(
        site.preloaded("python3", &["-c", &client]),
        "asyncio client",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "same");
}

/// A bad config stops the program before main, naming the field; with
/// `on_error = "kernel"` the program runs on the kernel and says so.
#[test]
fn bad_config_stops_before_main_or_falls_back() {
    let lib = library();
    let dir = std::env::temp_dir();
    let run = |text: &str| {
        let path = dir.join(format!("{}.toml", netns::unique("lrpb")));
        std::fs::write(&path, text).unwrap();
        let out = Command::new("sh")
            .args(["-c", "echo main"])
            .env("LINERATE_CONFIG", &path)
            .env("LD_PRELOAD", &lib)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        out
    };
    let bad = run("[nic]\ntap = \"lr0\"\nmtu = 70000\n[net]\naddress = \"10.0.0.2/24\"\n");
    assert_eq!(bad.status.code(), Some(1));
    assert!(bad.stdout.is_empty(), "main ran");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("nic.mtu") && err.contains("give 576 to 9000"),
        "{err}"
    );

    let fallback =
        run("on_error = \"kernel\"\n[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2\"\n");
    assert!(fallback.status.success());
    assert_eq!(String::from_utf8_lossy(&fallback.stdout), "main\n");
    let err = String::from_utf8_lossy(&fallback.stderr);
    assert!(
        err.contains("net.address") && err.contains("kernel"),
        "{err}"
    );

    let inert = Command::new("sh")
        .args(["-c", "echo main"])
        .env_remove("LINERATE_CONFIG")
        .env("LD_PRELOAD", &lib)
        .output()
        .unwrap();
    assert!(inert.status.success() && inert.stderr.is_empty());
}

/// The socket layer's state machine under random call sequences: this test's
/// own binary runs again under the preload (`calls_child`), where a proptest
/// draws sequences of interposed calls over a handful of descriptor slots
/// (sockets of both kinds, binds, listens, non-blocking connects to a kernel
/// echo server, to a closed port and to nowhere, accepts, sends, receives,
/// shutdowns, dups, fcntl, ioctl, poll, options, closes, stale numbers).
/// Every call must return as a socket call may (never `EIO`, the library's
/// answer when it caught a panic), and once a sequence has closed what it
/// opened, the process has the descriptors it had before.
#[test]
fn random_call_sequences_leave_no_fd_and_no_panic() {
    let site = Site::new();
    let _peers = Peers::start(&site.ns);
    let exe = std::env::current_exe().unwrap();
    let mut cmd = site.preloaded(
        exe.to_str().unwrap(),
        &["--exact", "calls_child", "--nocapture", "--test-threads=1"],
    );
    cmd.env("LINERATE_CALLS_CHILD", "1");
    if let Ok(seed) = std::env::var("PROPTEST_RNG_SEED") {
        cmd.env("PROPTEST_RNG_SEED", seed);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the call sequences failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("sequences: ok"),
        "the child ran no sequences:\n{stdout}\n{stderr}"
    );
    assert!(!stderr.contains("panic"), "the library panicked:\n{stderr}");
}

/// One interposed call of a random sequence; `slot` picks one of the
/// sequence's descriptors (an empty slot is a stale number).
#[derive(Debug, Clone)]
enum Call {
    Socket { slot: usize, udp: bool },
    Bind { slot: usize, port: u16 },
    Listen { slot: usize },
    Connect { slot: usize, to: u8 },
    Accept { slot: usize, into: usize },
    Send { slot: usize, len: usize },
    Recv { slot: usize, peek: bool },
    Shutdown { slot: usize, how: i32 },
    Close { slot: usize },
    Dup { slot: usize, into: usize },
    Fcntl { slot: usize, cloexec: bool },
    Ioctl { slot: usize },
    Poll { slots: Vec<usize> },
    SetOpt { slot: usize, which: u8, value: i32 },
    GetOpt { slot: usize, which: u8 },
    Names { slot: usize },
}

const SLOTS: usize = 6;

fn call() -> impl proptest::strategy::Strategy<Value = Call> {
    use proptest::prelude::*;
    let s = 0..SLOTS;
    prop_oneof![
        3 => (s.clone(), any::<bool>()).prop_map(|(slot, udp)| Call::Socket { slot, udp }),
        1 => (s.clone(), prop_oneof![Just(0u16), Just(7300u16), Just(7301u16)])
            .prop_map(|(slot, port)| Call::Bind { slot, port }),
        1 => s.clone().prop_map(|slot| Call::Listen { slot }),
        3 => (s.clone(), 0u8..3).prop_map(|(slot, to)| Call::Connect { slot, to }),
        1 => (s.clone(), s.clone()).prop_map(|(slot, into)| Call::Accept { slot, into }),
        3 => (s.clone(), 0usize..3000).prop_map(|(slot, len)| Call::Send { slot, len }),
        3 => (s.clone(), any::<bool>()).prop_map(|(slot, peek)| Call::Recv { slot, peek }),
        1 => (s.clone(), 0i32..4).prop_map(|(slot, how)| Call::Shutdown { slot, how }),
        2 => s.clone().prop_map(|slot| Call::Close { slot }),
        1 => (s.clone(), s.clone()).prop_map(|(slot, into)| Call::Dup { slot, into }),
        1 => (s.clone(), any::<bool>()).prop_map(|(slot, cloexec)| Call::Fcntl { slot, cloexec }),
        1 => s.clone().prop_map(|slot| Call::Ioctl { slot }),
        1 => proptest::collection::vec(s.clone(), 1..4).prop_map(|slots| Call::Poll { slots }),
        1 => (s.clone(), 0u8..8, -1i32..3).prop_map(|(slot, which, value)| Call::SetOpt {
            slot,
            which,
            value
        }),
        1 => (s.clone(), 0u8..8).prop_map(|(slot, which)| Call::GetOpt { slot, which }),
        1 => s.prop_map(|slot| Call::Names { slot }),
    ]
}

/// The descriptors of the process (`/proc/self/fd`).
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Runs one sequence; the slots hold descriptors, -1 when empty (calls on
/// an empty slot use a number nothing has).
#[allow(unsafe_code)]
fn run_calls(calls: &[Call]) -> Result<(), String> {
    use std::os::raw::c_int;
    let mut fds = [-1 as c_int; SLOTS];
    let fd = |fds: &[c_int; SLOTS], slot: usize| if fds[slot] >= 0 { fds[slot] } else { 9999 };
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let sl = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let mut buf = vec![0u8; 4096];
    for (i, c) in calls.iter().enumerate() {
        // SAFETY: each call gets live buffers of the lengths it is told, and
        // descriptor numbers it may fail on but cannot harm (the slots hold
        // this sequence's own sockets or a number nothing has).
        let r: isize = unsafe {
            match *c {
                Call::Socket { slot, udp } => {
                    if fds[slot] >= 0 {
                        libc::close(fds[slot]);
                    }
                    let ty = if udp {
                        libc::SOCK_DGRAM
                    } else {
                        libc::SOCK_STREAM
                    };
                    let s = libc::socket(libc::AF_INET, ty | libc::SOCK_NONBLOCK, 0);
                    fds[slot] = s;
                    s as isize
                }
                Call::Bind { slot, port } => {
                    let a = sin(OURS, port);
                    libc::bind(fd(&fds, slot), (&raw const a).cast(), sl) as isize
                }
                Call::Listen { slot } => libc::listen(fd(&fds, slot), 8) as isize,
                Call::Connect { slot, to } => {
                    let a = match to {
                        0 => sin(KERNEL, ECHO),
                        1 => sin(KERNEL, CLOSED),
                        // Nobody at this address: the connect stays pending.
                        _ => sin(std::net::Ipv4Addr::new(10, 217, 0, 99), 9),
                    };
                    libc::connect(fd(&fds, slot), (&raw const a).cast(), sl) as isize
                }
                Call::Accept { slot, into } => {
                    let s = libc::accept4(
                        fd(&fds, slot),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_NONBLOCK,
                    );
                    if s >= 0 {
                        if fds[into] >= 0 {
                            libc::close(fds[into]);
                        }
                        fds[into] = s;
                    }
                    s as isize
                }
                Call::Send { slot, len } => libc::send(
                    fd(&fds, slot),
                    buf.as_ptr().cast(),
                    len,
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                ),
                Call::Recv { slot, peek } => libc::recv(
                    fd(&fds, slot),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | if peek { libc::MSG_PEEK } else { 0 },
                ),
                Call::Shutdown { slot, how } => libc::shutdown(fd(&fds, slot), how) as isize,
                Call::Close { slot } => {
                    let r = libc::close(fd(&fds, slot));
                    fds[slot] = -1;
                    r as isize
                }
                Call::Dup { slot, into } => {
                    if fds[slot] < 0 || slot == into {
                        0
                    } else {
                        let s = libc::dup(fds[slot]);
                        if s >= 0 {
                            if fds[into] >= 0 {
                                libc::close(fds[into]);
                            }
                            fds[into] = s;
                        }
                        s as isize
                    }
                }
                Call::Fcntl { slot, cloexec } => {
                    let f = if cloexec { libc::FD_CLOEXEC } else { 0 };
                    libc::fcntl(fd(&fds, slot), libc::F_SETFD, f) as isize
                }
                Call::Ioctl { slot } => {
                    let mut n: c_int = 0;
                    libc::ioctl(fd(&fds, slot), libc::FIONREAD, &raw mut n) as isize
                }
                Call::Poll { ref slots } => {
                    let mut p: Vec<libc::pollfd> = slots
                        .iter()
                        .map(|&s| libc::pollfd {
                            fd: fd(&fds, s),
                            events: libc::POLLIN | libc::POLLOUT,
                            revents: 0,
                        })
                        .collect();
                    libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, 0) as isize
                }
                Call::SetOpt { slot, which, value } => {
                    let (level, name) = OPTS[usize::from(which)];
                    libc::setsockopt(
                        fd(&fds, slot),
                        level,
                        name,
                        (&raw const value).cast(),
                        size_of::<c_int>() as libc::socklen_t,
                    ) as isize
                }
                Call::GetOpt { slot, which } => {
                    let (level, name) = OPTS[usize::from(which)];
                    let mut v = [0u8; 256];
                    let mut len = v.len() as libc::socklen_t;
                    libc::getsockopt(
                        fd(&fds, slot),
                        level,
                        name,
                        v.as_mut_ptr().cast(),
                        &raw mut len,
                    ) as isize
                }
                Call::Names { slot } => {
                    let mut a: libc::sockaddr_storage = std::mem::zeroed();
                    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                    let r1 = libc::getsockname(fd(&fds, slot), (&raw mut a).cast(), &raw mut len);
                    len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                    let r2 = libc::getpeername(fd(&fds, slot), (&raw mut a).cast(), &raw mut len);
                    (r1 | r2) as isize
                }
            }
        };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EIO) {
                return Err(format!("call {i} {c:?} returned EIO (a caught panic)"));
            }
        }
    }
    for s in fds {
        if s >= 0 {
            // SAFETY: this sequence's own descriptor.
            unsafe { libc::close(s) };
        }
    }
    Ok(())
}

/// Options the sequences set and read: (level, name).
const OPTS: [(i32, i32); 8] = [
    (libc::SOL_SOCKET, libc::SO_REUSEADDR),
    (libc::SOL_SOCKET, libc::SO_KEEPALIVE),
    (libc::SOL_SOCKET, libc::SO_RCVBUF),
    (libc::SOL_SOCKET, libc::SO_ERROR),
    (libc::IPPROTO_TCP, libc::TCP_NODELAY),
    (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
    (libc::IPPROTO_TCP, libc::TCP_INFO),
    (libc::SOL_SOCKET, libc::SO_LINGER),
];

/// The child of [`random_call_sequences_leave_no_fd_and_no_panic`]: does
/// nothing unless that test started it under the preload.
#[test]
fn calls_child() {
    use proptest::test_runner::{Config, TestCaseError, TestRunner};
    if std::env::var_os("LINERATE_CALLS_CHILD").is_none() {
        return;
    }
    // Start the runtime first: its own descriptors (the TAP, wake-up fds)
    // are there before the baseline is taken.
    run_calls(&[
        Call::Socket {
            slot: 0,
            udp: false,
        },
        Call::Connect { slot: 0, to: 0 },
        Call::Socket { slot: 1, udp: true },
        Call::Connect { slot: 1, to: 0 },
        Call::Send { slot: 1, len: 10 },
        Call::Socket {
            slot: 2,
            udp: false,
        },
        Call::Bind {
            slot: 2,
            port: 7300,
        },
        Call::Listen { slot: 2 },
    ])
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let base = open_fds();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let seqs = proptest::collection::vec(call(), 1..40);
    runner
        .run(&seqs, |calls| {
            run_calls(&calls).map_err(TestCaseError::fail)?;
            let now = open_fds();
            if now != base {
                return Err(TestCaseError::fail(format!(
                    "{now} descriptors open after the sequence, {base} before"
                )));
            }
            Ok(())
        })
        .unwrap();
    println!("sequences: ok");
}
