//! An unmodified program under the preload on an AF_XDP interface it shares
//! with the kernel's stack: one address, two stacks, side by side.
//!
//! Namespace A holds one end of a veth pair with address `SHARED`; the
//! kernel's iperf3 server listens there on port 5201, and iperf3 under the
//! preload (`nic.xdp` on the same interface, `net.share_kernel_address`, so
//! the same address and MAC) on port 5202, bound to the wildcard address as
//! iperf3 does. While the preloaded server listens, its port is held in A's
//! kernel (a kernel bind of it fails). From namespace B, two kernel iperf3
//! clients send to both servers at the same time while B pings `SHARED`
//! (answered by A's kernel) throughout: each server received what its
//! client sent, no echo is lost, and the steering program's counters (the
//! preload's `LINERATE_STATS` file) and A's kernel TCP counters say which
//! stack served what: linerate's segments were redirected to it and never
//! reached A's kernel. When the preloaded program exits, its XDP program is
//! gone from the interface. The same with python3 on both stacks: a TCP
//! sink that answers with the SHA-256 of what it read (exact on both) and a
//! UDP echo (every datagram back), all bound to the wildcard address; and
//! with linerate on an address of its own beside the kernel's (its ARP and
//! all its traffic steered to it).
//!
//! `LINERATE_BULK_MIB` sets the MiB each client sends (default 256). Needs
//! root and iperf3: `cargo test -p linerate-preload --features
//! af-xdp,system-tests --test system_xdp_shared -- --test-threads=1`.
#![cfg(all(feature = "system-tests", feature = "af-xdp"))]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_testkit::netns::{self, Netns, VethPair};
use serde_json::Value;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SHARED: Ipv4Addr = Ipv4Addr::new(10, 219, 0, 2);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 219, 0, 1);
/// linerate's own address on A's end, when it does not share the kernel's.
const OWN: Ipv4Addr = Ipv4Addr::new(10, 219, 0, 3);
const KERNEL_PORT: u16 = 5201;
const LINERATE_PORT: u16 = 5202;
/// Most a TCP sender may have written and the receiving program not read
/// when iperf3 ends its test: the kernel's socket buffers at their
/// autotuning limits (`tcp_wmem`, `tcp_rmem`, 32 MiB of receive buffer on
/// some machines), linerate's buffers and what is in flight, as
/// tests/preload_common says.
fn in_flight() -> u64 {
    let max = |name: &str, default: u64| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(2)?.parse().ok())
            .unwrap_or(default)
    };
    max("tcp_rmem", 6 << 20) + max("tcp_wmem", 4 << 20) + (8 << 20)
}

fn mib() -> u64 {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
}

/// The library cargo built for this test, with its features (`af-xdp`):
/// `<target>/<profile>/deps/liblinerate_preload.so` (cargo links a
/// dependency's cdylib there, without a hash in its name, and copies it
/// up only for `cargo build`).
fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let deps = exe.parent().expect("<target>/<profile>/deps");
    let lib = deps.join("liblinerate_preload.so");
    let bytes = std::fs::read(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
    // A string only the AF_XDP build has: a build of the library with other
    // features, made later, replaces the file under the same name.
    let marker = b"AF_XDP sockets bound";
    assert!(
        bytes.windows(marker.len()).any(|w| w == marker),
        "{} has no AF_XDP: another build replaced it; run `cargo test -p linerate-preload \
         --features af-xdp,system-tests --test system_xdp_shared` again after touching \
         crates/preload/src/lib.rs",
        lib.display()
    );
    lib
}

/// A child process killed and reaped when the test ends, also on failure.
struct Running(Option<Child>);

impl Running {
    fn spawn(mut c: Command, what: &str) -> Running {
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        Running(Some(child))
    }

    /// Panics with its output if it has exited already.
    fn alive(&mut self, what: &str) {
        let Some(c) = self.0.as_mut() else {
            return;
        };
        if let Ok(Some(status)) = c.try_wait() {
            // Reaped by try_wait: only its output is left to read.
            let mut err = String::new();
            if let Some(mut e) = c.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            self.0 = None;
            panic!("{what} exited ({status}): {err}");
        }
    }

    /// Waits for it to exit by itself; its output.
    fn wait(mut self, what: &str) -> Output {
        let out = self.0.take().unwrap().wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{what} failed ({}): {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        out
    }

    /// Interrupts it (SIGINT, as a user at a terminal); its output.
    fn interrupt(mut self) -> Output {
        let child = self.0.take().unwrap();
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn json(out: &Output, what: &str) -> Value {
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert!(v.get("error").is_none(), "{what}: {}", v["error"]);
    v
}

fn bytes(v: &Value, sum: &str) -> u64 {
    v["end"][sum]["bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no end.{sum}.bytes in {v}"))
}

/// A's kernel TCP counter `name`.
fn tcp_counter(ns: &Netns, name: &str) -> u64 {
    let out = ns.exec("cat", &["/proc/net/snmp"]).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let (names, values) = (tcp.next().unwrap(), tcp.next().unwrap());
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.parse().unwrap())
        .unwrap()
}

/// Whether a kernel socket in `ns` can bind `SHARED:port` (TCP).
fn kernel_can_bind(ns: &Netns, port: u16) -> bool {
    ns.run(move || std::net::TcpListener::bind((SHARED, port)).is_ok())
        .unwrap()
}

/// Waits until `ready` or panics with `what` after 20 s.
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Files removed when the test ends.
struct Files(Vec<PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for f in &self.0 {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Namespaces A and B joined by a veth pair, and a config file that runs
/// every socket of a preloaded program on A's end, sharing its address.
struct Site {
    a: Netns,
    b: Netns,
    pair: VethPair,
    config: PathBuf,
    stats: PathBuf,
    lib: PathBuf,
    _files: Files,
}

impl Site {
    fn new() -> Site {
        Site::with_net("share_kernel_address = true\n")
    }

    /// With `net` as the config file's `[net]` table.
    fn with_net(net: &str) -> Site {
        assert!(netns::is_root(), "system tests need root");
        let lib = library();
        let a = Netns::new("lrxa").unwrap();
        let b = Netns::new("lrxb").unwrap();
        let pair = VethPair::new(&a, &format!("{SHARED}/24"), &b, &format!("{PEER}/24")).unwrap();
        // Frames with complete checksums and no larger than the MTU from
        // the peer: a copy-mode AF_XDP socket gets a frame as the peer left
        // it.
        b.exec(
            "ethtool",
            &["-K", &pair.b, "tso", "off", "gso", "off", "tx", "off"],
        )
        .unwrap();
        // The file names only the interface: the address and MAC are read
        // from it.
        let config = std::env::temp_dir().join(format!("{}.toml", netns::unique("lrxc")));
        let stats = std::env::temp_dir().join(format!("{}.stats", netns::unique("lrxs")));
        std::fs::write(
            &config,
            format!(
                "[nic]\nxdp = \"{}\"\n[net]\n{net}[policy]\ndefault = \"linerate\"\n",
                pair.a
            ),
        )
        .unwrap();
        let files = Files(vec![config.clone(), stats.clone()]);
        Site {
            a,
            b,
            pair,
            config,
            stats,
            lib,
            _files: files,
        }
    }

    /// `args` in A under the preload, writing its statistics at exit.
    fn preloaded(&self, args: &[String]) -> Command {
        let mut c = self.a.command("env");
        c.arg(format!("LINERATE_CONFIG={}", self.config.display()))
            .arg(format!("LD_PRELOAD={}", self.lib.display()))
            .arg(format!("LINERATE_STATS={}", self.stats.display()))
            .args(args);
        c
    }

    /// The steering counters the preloaded program wrote at exit.
    fn steering(&self) -> HashMap<String, u64> {
        let text = std::fs::read_to_string(&self.stats).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("steer "))
            .filter_map(|l| l.split_once(' '))
            .map(|(n, v)| (n.to_owned(), v.parse().unwrap()))
            .collect()
    }

    /// Whether A's end has an XDP program attached.
    fn attached(&self) -> bool {
        let link = self.a.ip(&["link", "show", "dev", &self.pair.a]).unwrap();
        String::from_utf8_lossy(&link.stdout).contains("xdp")
    }
}

#[test]
fn kernel_and_preloaded_iperf3_serve_one_address() {
    let site = Site::new();
    let mib = mib();
    let (a, b) = (&site.a, &site.b);

    let iperf3_server = |port: u16| {
        let port = port.to_string();
        ["timeout", "120", "iperf3", "-s", "-1", "--json", "-p"]
            .into_iter()
            .map(str::to_owned)
            .chain([port])
            .collect::<Vec<_>>()
    };
    let mut c = a.command("env");
    c.args(iperf3_server(KERNEL_PORT));
    let kernel_server = Running::spawn(c, "the kernel's iperf3 server");
    let c = site.preloaded(&iperf3_server(LINERATE_PORT));
    let mut linerate_server = Running::spawn(c, "iperf3 under the preload");

    // linerate listens once its port is held in A's kernel; the kernel's
    // server once its port is taken.
    wait_until(
        "the preloaded iperf3's port is not held in A's kernel",
        || {
            linerate_server.alive("iperf3 under the preload");
            !kernel_can_bind(a, LINERATE_PORT)
        },
    );
    wait_until("the kernel's iperf3 does not listen", || {
        !kernel_can_bind(a, KERNEL_PORT)
    });
    assert!(site.attached(), "no XDP program on A's end");

    let segs_before = tcp_counter(a, "InSegs");
    let mut ping = b.command("ping");
    ping.args(["-i", "0.05", "-W", "1", &SHARED.to_string()]);
    let ping = Running::spawn(ping, "ping");
    let start = Instant::now();
    let client = |port: u16| {
        let mut c = b.command("timeout");
        c.args(["120", "iperf3", "-c", &SHARED.to_string(), "--json"])
            .args(["-p", &port.to_string(), "-n", &format!("{mib}M")]);
        Running::spawn(c, "a kernel iperf3 client")
    };
    let to_kernel = client(KERNEL_PORT);
    let to_linerate = client(LINERATE_PORT);
    let to_kernel = json(
        &to_kernel.wait("the client of the kernel's server"),
        "client",
    );
    let to_linerate = json(
        &to_linerate.wait("the client of linerate's server"),
        "client",
    );
    let elapsed = start.elapsed();
    let kernel_server = json(&kernel_server.wait("the kernel's server"), "server");
    let linerate_server = linerate_server.wait("the preloaded server");
    let linerate_log = String::from_utf8_lossy(&linerate_server.stderr).to_string();
    let linerate_server = json(&linerate_server, "the preloaded server");
    let ping = ping.interrupt();
    let ping = String::from_utf8_lossy(&ping.stdout).to_string();
    let kernel_segs = tcp_counter(a, "InSegs") - segs_before;

    // Each server received what its client sent, less what was still in
    // the socket buffers when the client ended the test (iperf3 counts what
    // the server read by then); the client's copy of the server's count is
    // the server's own.
    let sent = mib << 20;
    let (ks, kr) = (
        bytes(&to_kernel, "sum_sent"),
        bytes(&kernel_server, "sum_received"),
    );
    let (ls, lr) = (
        bytes(&to_linerate, "sum_sent"),
        bytes(&linerate_server, "sum_received"),
    );
    println!(
        "{mib} MiB to each server in {elapsed:?}: kernel {ks} sent, {kr} received; \
         linerate {ls} sent, {lr} received"
    );
    assert!(ks >= sent && ls >= sent, "the clients sent {ks} and {ls}");
    assert_eq!(bytes(&to_kernel, "sum_received"), kr, "the kernel's server");
    assert_eq!(
        bytes(&to_linerate, "sum_received"),
        lr,
        "the preloaded server ({linerate_log})"
    );
    for (s, r) in [(ks, kr), (ls, lr)] {
        assert!(r <= s && s - r <= in_flight(), "sent {s}, received {r}");
    }
    assert!(ping.contains(" 0% packet loss"), "{ping}");

    // Which stack served what: the steering program's counters, written by
    // the preloaded program at exit.
    let steer = site.steering();
    println!("steering {steer:?}, A's kernel InSegs {kernel_segs}");
    let segments = |bytes: u64| bytes / 1448;
    // linerate's segments came by port (the handshake, before the
    // connection was claimed) and 4-tuple, and never reached A's kernel,
    // which counted the kernel server's. (The preloaded server exits, and
    // writes the counters, when its own test is over: the kernel's may
    // still be running then, so what was passed is not compared.)
    assert!(steer["passed"] >= 1, "{steer:?}");
    assert!(steer["port"] >= 1, "{steer:?}");
    assert!(steer["redirected"] >= segments(lr), "{steer:?}");
    assert!(
        kernel_segs >= segments(kr),
        "A's kernel InSegs {kernel_segs}"
    );
    assert!(
        kernel_segs < segments(kr) + segments(lr) / 2,
        "A's kernel took {kernel_segs} segments: linerate's too"
    );
    assert_eq!(steer["refused"], 0, "{steer:?}");

    // The program is gone: its XDP program and the port it held with it.
    assert!(!site.attached(), "an XDP program is left");
    assert!(kernel_can_bind(a, LINERATE_PORT), "the port is still held");
}

/// A TCP sink that answers with the length and SHA-256 of what it read, and
/// a UDP echo on the port two above, both bound to the wildcard address; it
/// prints `ready` once both are open, and exits at the connection after the
/// one it hashed (so that the test decides when the counters are taken).
const SINK: &str = r#"
import hashlib, socket, sys, threading
port = int(sys.argv[1])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("", port + 2))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("", port))
t.listen(4)
def echo():
    while True:
        d, a = u.recvfrom(65536)
        u.sendto(d, a)
threading.Thread(target=echo, daemon=True).start()
print("ready", flush=True)
c, _ = t.accept()
h = hashlib.sha256()
n = 0
while True:
    b = c.recv(1 << 16)
    if not b:
        break
    h.update(b)
    n += len(b)
c.sendall(f"{n} {h.hexdigest()}\n".encode())
c.close()
t.accept()[0].close()
"#;

/// Deterministic data, different per stream.
fn data(len: usize, seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32 ^ u32::from(seed);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Waits for the line `ready` on `server`'s stdout.
fn ready(server: &mut Running, what: &str) {
    let out = server.0.as_mut().unwrap().stdout.take().unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    if line.trim() != "ready" {
        server.alive(what);
        panic!("{what} said {line:?}");
    }
}

/// python3 under the preload and the kernel's python3, the same program, on
/// one address at once: a kernel client in B sends each TCP sink
/// `LINERATE_BULK_MIB` MiB and both answer with the SHA-256 of exactly what
/// was sent; 200 datagrams through each UDP echo all come back exact. The
/// preloaded sockets bound the wildcard address first (the kernel binding
/// given up before linerate held the ports); ping runs throughout.
#[test]
fn kernel_and_preloaded_python_sha_exact_on_one_address() {
    let site = Site::new();
    let len = usize::try_from(mib() << 20).unwrap();
    let steer = python_sinks(&site, SHARED);
    assert!(steer["redirected"] >= (len / 1448) as u64, "{steer:?}");
    assert!(steer["flow"] >= (len / 1448) as u64, "{steer:?}");
    assert!(steer["passed"] >= (len / 1448) as u64, "{steer:?}");
}

/// linerate's own address on the interface, beside the kernel's: every
/// frame to it, ARP included, is steered to linerate (which answers the
/// peer's ARP requests itself), the kernel keeps its address and the rest.
#[test]
fn preloaded_python_on_an_address_of_its_own_beside_the_kernel() {
    let site = Site::with_net(&format!("address = \"{OWN}/24\"\n"));
    let len = usize::try_from(mib() << 20).unwrap();
    let steer = python_sinks(&site, OWN);
    assert!(steer["arp"] >= 1, "{steer:?}");
    assert!(steer["addr"] >= (len / 1448) as u64, "{steer:?}");
    assert_eq!(steer["port"] + steer["flow"], 0, "{steer:?}");
    assert!(steer["passed"] >= (len / 1448) as u64, "{steer:?}");
}

/// The python sinks on both stacks of `site`'s A (the kernel's at `SHARED`,
/// linerate's at `ours`) fed at once from B, ping to `SHARED` throughout;
/// the steering counters the preloaded one wrote at exit.
fn python_sinks(site: &Site, ours: Ipv4Addr) -> HashMap<String, u64> {
    use sha2::{Digest, Sha256};
    use std::io::{Read, Write};
    let (a, b) = (&site.a, &site.b);
    let len = usize::try_from(mib() << 20).unwrap();
    let shared = ours == SHARED;
    let script = std::env::temp_dir().join(format!("{}.py", netns::unique("lrxp")));
    std::fs::write(&script, SINK).unwrap();
    let _script = Files(vec![script.clone()]);
    let sink = |port: u16| {
        vec![
            "timeout".to_owned(),
            "120".to_owned(),
            "python3".to_owned(),
            script.display().to_string(),
            port.to_string(),
        ]
    };
    let mut c = a.command("env");
    c.args(sink(KERNEL_PORT));
    let mut kernel_sink = Running::spawn(c, "the kernel's python3");
    let mut linerate_sink = Running::spawn(
        site.preloaded(&sink(LINERATE_PORT)),
        "python3 under the preload",
    );
    ready(&mut kernel_sink, "the kernel's python3");
    ready(&mut linerate_sink, "python3 under the preload");
    assert_eq!(
        !kernel_can_bind(a, LINERATE_PORT),
        shared,
        "the preloaded listener's port is held in A's kernel only on a shared address"
    );

    let mut ping = b.command("ping");
    ping.args(["-i", "0.05", "-W", "1", &SHARED.to_string()]);
    let ping = Running::spawn(ping, "ping");
    let start = Instant::now();
    let client = |to: Ipv4Addr, port: u16, seed: u8| {
        b.spawn(move || {
            // The datagrams first: the sink exits after its TCP connection.
            let echoed = (0..200u32).all(|i| {
                let u = std::net::UdpSocket::bind((PEER, 0)).unwrap();
                u.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                let d = data(64 + (i as usize * 7) % 1400, i as u8);
                u.send_to(&d, (to, port + 2)).unwrap();
                let mut back = vec![0; 2048];
                matches!(u.recv_from(&mut back), Ok((n, _)) if back[..n] == d[..])
            });
            let payload = data(len, seed);
            let mut s = std::net::TcpStream::connect((to, port)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            s.write_all(&payload).unwrap();
            s.shutdown(std::net::Shutdown::Write).unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            (
                answer,
                format!("{len} {}", hex(&Sha256::digest(&payload))),
                echoed,
            )
        })
        .unwrap()
    };
    let to_kernel = client(SHARED, KERNEL_PORT, 1);
    let to_linerate = client(ours, LINERATE_PORT, 2);
    let (k_answer, k_want, k_echoed) = to_kernel.join().unwrap().unwrap();
    let (l_answer, l_want, l_echoed) = to_linerate.join().unwrap().unwrap();
    let elapsed = start.elapsed();
    // Both transfers are over: the sinks may exit (the preloaded one writes
    // its counters then).
    for (to, port) in [(SHARED, KERNEL_PORT), (ours, LINERATE_PORT)] {
        b.run(move || std::net::TcpStream::connect((to, port)).map(drop))
            .unwrap()
            .unwrap();
    }
    kernel_sink.wait("the kernel's python3");
    let out = linerate_sink.wait("python3 under the preload");
    let ping = ping.interrupt();
    let ping = String::from_utf8_lossy(&ping.stdout).to_string();
    println!("{len} bytes to each sink in {elapsed:?}");
    assert_eq!(k_answer.trim(), k_want, "the kernel's sink");
    assert_eq!(
        l_answer.trim(),
        l_want,
        "the preloaded sink ({})",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(k_echoed, "a datagram through the kernel's echo was lost");
    assert!(l_echoed, "a datagram through linerate's echo was lost");
    assert!(ping.contains(" 0% packet loss"), "{ping}");

    let steer = site.steering();
    println!("steering {steer:?}");
    assert_eq!(steer["refused"], 0, "{steer:?}");
    assert!(!site.attached(), "an XDP program is left");
    steer
}
