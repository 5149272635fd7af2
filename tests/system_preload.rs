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
//! * iperf3 under the preload as client (TCP `-l 64`, `-l 64K`, `-R`,
//!   `-P 4`; UDP both ways) and as server, against the kernel's iperf3: both
//!   ends finish, their JSON reports agree with each other, and what the
//!   receiver counted is what the sender sent less at most what the sender's
//!   buffers held when the test ended (TCP), or less what the receiver
//!   reports lost (UDP).
//! * A C program (tests/preload_c/edge.c, compiled here with `cc`) calls
//!   the interposed functions through their edge cases: run on the kernel
//!   (the same namespace, the kernel talking to itself) and under the
//!   preload, it prints the same lines.
//!
//! The library is built by the test (`cargo build -p linerate-preload`).
//! Needs root: `cargo test --features system-tests --test system_preload`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_testkit::netns::{self, Netns};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The kernel's address on the TAP.
const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 1);
/// linerate's.
const OURS: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 2);

/// Builds the library once per test process; its path.
fn library() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.as_ref() {
        return p.clone();
    }
    // This test runs from <target>/<profile dir>/deps/.
    let exe = std::env::current_exe().expect("the test's own path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("<target>/<profile>/deps");
    let target = profile_dir.parent().expect("<target>");
    let release = profile_dir.ends_with("release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_owned());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--quiet", "-p", "linerate-preload"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .arg("--target-dir")
        .arg(target);
    // This test's own profile: its build of the crates below is reused
    // instead of a second one in the dev profile.
    cmd.args(["--profile", if release { "release" } else { "test" }]);
    let out = cmd.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo build -p linerate-preload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = target
        .join(if release { "release" } else { "debug" })
        .join("liblinerate_preload.so");
    assert!(path.exists(), "{} after the build", path.display());
    *built = Some(path.clone());
    path
}

/// A namespace with a persistent TAP, the kernel at [`KERNEL`]/24, and a
/// config file that offloads every socket onto the TAP at [`OURS`].
struct Site {
    ns: Netns,
    config: PathBuf,
    lib: PathBuf,
}

impl Site {
    /// Every socket offloaded (`default = "linerate"`).
    fn new() -> Site {
        Site::with_policy("[policy]\ndefault = \"linerate\"\n")
    }

    /// With `policy`, the config file's policy section.
    fn with_policy(policy: &str) -> Site {
        assert!(netns::is_root(), "system tests need root");
        let lib = library();
        let ns = Netns::new("lrp").unwrap();
        let tap = netns::unique("lrpt");
        ns.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"])
            .unwrap();
        let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{tap}/disable_ipv6");
        let _ = ns.exec("sh", &["-c", &off]);
        ns.ip(&["addr", "add", &format!("{KERNEL}/24"), "dev", &tap])
            .unwrap();
        ns.ip(&["link", "set", &tap, "up"]).unwrap();
        let config = std::env::temp_dir().join(format!("{}.toml", netns::unique("lrpc")));
        let text = format!("[nic]\ntap = \"{tap}\"\n[net]\naddress = \"{OURS}/24\"\n{policy}");
        std::fs::write(&config, text).unwrap();
        Site { ns, config, lib }
    }

    /// `program args` in the namespace on the kernel, bounded in time.
    fn kernel(&self, program: &str, args: &[&str]) -> Command {
        let mut c = self.ns.command("timeout");
        c.args(["60", program]).args(args);
        c
    }

    /// `program args` in the namespace under the preload, bounded in time.
    fn preloaded(&self, program: &str, args: &[&str]) -> Command {
        let mut c = self.ns.command("env");
        c.arg(format!("LINERATE_CONFIG={}", self.config.display()))
            .arg(format!("LD_PRELOAD={}", self.lib.display()))
            .args(["timeout", "60", program])
            .args(args);
        c
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.config);
    }
}

fn output(mut c: Command, what: &str) -> Output {
    let out = c.stdin(Stdio::null()).output().expect("the program starts");
    assert!(
        out.status.success(),
        "{what} failed ({}): {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn json(out: &Output, what: &str) -> Value {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(
        v.get("error").is_none(),
        "{what} reports an error: {}",
        v["error"]
    );
    v
}

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// One iperf3 run: the server on one side, the client on the other, both
/// with `--json`; returns (client report, server report).
fn iperf3(site: &Site, preload_client: bool, args: &[&str]) -> (Value, Value) {
    let server_ip = if preload_client { KERNEL } else { OURS };
    let server_args = ["-s", "-1", "--json", "-p", "5201"];
    let mut server = if preload_client {
        let mut a = server_args.to_vec();
        a.extend(["-B", "10.217.0.1"]);
        site.kernel("iperf3", &a)
    } else {
        site.preloaded("iperf3", &server_args)
    };
    let server = server
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = KillOnDrop(Some(server));
    let ip = server_ip.to_string();
    let mut client_args = vec!["-c", &ip, "-p", "5201", "-t", "2", "--json"];
    client_args.extend(args);
    // The server needs a moment to listen; iperf3 does not retry.
    let mut client_out = None;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let c = if preload_client {
            site.preloaded("iperf3", &client_args)
        } else {
            site.kernel("iperf3", &client_args)
        };
        let mut c = c;
        let out = c.stdin(Stdio::null()).output().unwrap();
        let refused = String::from_utf8_lossy(&out.stdout).contains("Connection refused");
        if !refused {
            client_out = Some(out);
            break;
        }
    }
    let client_out = client_out.expect("the iperf3 server listens");
    let server_out = server.wait();
    let what = format!("iperf3 {args:?} (preloaded client: {preload_client})");
    assert!(
        client_out.status.success(),
        "{what}: client failed: {}\n{}",
        String::from_utf8_lossy(&client_out.stderr),
        String::from_utf8_lossy(&client_out.stdout)
    );
    assert!(
        server_out.status.success(),
        "{what}: server failed: {}\n{}",
        String::from_utf8_lossy(&server_out.stderr),
        String::from_utf8_lossy(&server_out.stdout)
    );
    (json(&client_out, &what), json(&server_out, &what))
}

struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn wait(mut self) -> Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for KillOnDrop {
    /// SIGTERM first: the process is `timeout` (exec'd by `ip netns exec`
    /// and `env`), which passes it on to the program it runs; a SIGKILL
    /// would leave the program behind. SIGKILL if it is still there after.
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            if let Ok(pid) = libc::pid_t::try_from(c.id()) {
                // SAFETY: a signal to our own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Most a TCP sender may have written and not delivered when the test
/// ended: its socket buffer (the kernel autotunes up to 4 MiB here, linerate
/// stages 256 KiB and buffers the engine's window) and what is in flight.
const IN_FLIGHT: f64 = 16.0 * 1024.0 * 1024.0;

/// The TCP byte counts of one run: the two reports agree, and what the
/// receiver read is what the sender wrote less its buffers at the end.
fn check_tcp(client: &Value, server: &Value, reverse: bool) -> f64 {
    let (sender, receiver) = if reverse {
        (server, client)
    } else {
        (client, server)
    };
    let sent = num(sender, &["end", "sum_sent", "bytes"]);
    let received = num(receiver, &["end", "sum_received", "bytes"]);
    // The client's report carries the server's own figure too: the same.
    let (side, theirs) = if reverse {
        ("sum_sent", sent)
    } else {
        ("sum_received", received)
    };
    assert_eq!(
        num(client, &["end", side, "bytes"]),
        theirs,
        "the client's copy of the server's {side}"
    );
    assert!(received > 0.0, "nothing received");
    assert!(received <= sent, "received {received} > sent {sent}");
    assert!(
        sent - received <= IN_FLIGHT,
        "sent {sent}, received {received}"
    );
    let secs = num(receiver, &["end", "sum_received", "seconds"]);
    received * 8.0 / secs / 1e9
}

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
        for _ in 0..3 {
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
        .args(["-O1", "-Wall", "-o"])
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
    let ports = [ECHO, RESET, CLOSED, UDP_ECHO].map(|p| p.to_string());
    let ip = KERNEL.to_string();
    let args = [ip.as_str(), &ports[0], &ports[1], &ports[2], &ports[3]];
    let kernel = output(site.kernel(exe, &args), "edge on the kernel");
    let ours = output(site.preloaded(exe, &args), "edge under the preload");
    let kernel = String::from_utf8_lossy(&kernel.stdout).into_owned();
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
}

/// A program under the preload that prints "ready" once set up, then runs
/// until the test is done with it; killed when dropped.
struct Started {
    child: KillOnDrop,
}

impl Started {
    fn new(mut cmd: Command) -> Started {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        assert_eq!(line.trim(), "ready", "the program did not start");
        Started {
            child: KillOnDrop(Some(child)),
        }
    }

    /// Waits for the program to end by itself; its status.
    fn wait(self) -> std::process::ExitStatus {
        self.child.wait().status
    }
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
