//! What the preload's system tests share: the library built in the test's
//! profile, a namespace with a TAP and a config file ([`Site`]), programs
//! run on the kernel or under the preload, iperf3 runs and their byte-count
//! checks, and processes killed when the test ends (also on failure).
#![allow(dead_code, unreachable_pub)]

use linerate_testkit::netns::{self, Netns};
use serde_json::Value;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The kernel's address on the TAP.
pub const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 1);
/// linerate's.
pub const OURS: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 2);
/// The kernel's IPv6 address on the TAP ([`Site::with_ipv6`]).
pub const KERNEL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x217, 0, 0, 0, 0, 0, 1);
/// linerate's.
pub const OURS6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x217, 0, 0, 0, 0, 0, 2);

/// Builds the library once per test process; its path.
pub fn library() -> PathBuf {
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
pub struct Site {
    pub ns: Netns,
    pub config: PathBuf,
    pub lib: PathBuf,
}

impl Site {
    /// Every socket offloaded (`default = "linerate"`).
    pub fn new() -> Site {
        Site::with_policy("[policy]\ndefault = \"linerate\"\n")
    }

    /// With `policy`, the config file's policy section.
    pub fn with_policy(policy: &str) -> Site {
        Site::build(policy, false)
    }

    /// Every socket offloaded, with IPv6 too: the kernel at [`KERNEL6`]/64,
    /// linerate at [`OURS6`]/64.
    pub fn with_ipv6() -> Site {
        Site::build("[policy]\ndefault = \"linerate\"\n", true)
    }

    /// Every socket offloaded, on a multi-queue TAP with `children =
    /// children`: forked children run linerate on queues of their own.
    pub fn forking(children: u16) -> Site {
        Site::build_with("[policy]\ndefault = \"linerate\"\n", false, children)
    }

    fn build(policy: &str, ipv6: bool) -> Site {
        Site::build_with(policy, ipv6, 0)
    }

    fn build_with(policy: &str, ipv6: bool, children: u16) -> Site {
        assert!(netns::is_root(), "system tests need root");
        let lib = library();
        let ns = Netns::new("lrp").unwrap();
        let tap = netns::unique("lrpt");
        let mut add = vec!["tuntap", "add", "dev", &tap, "mode", "tap"];
        if children > 0 {
            add.push("multi_queue");
        }
        ns.ip(&add).unwrap();
        let v6 = if ipv6 { "0" } else { "1" };
        let off = format!("echo {v6} > /proc/sys/net/ipv6/conf/{tap}/disable_ipv6");
        let _ = ns.exec("sh", &["-c", &off]);
        ns.ip(&["addr", "add", &format!("{KERNEL}/24"), "dev", &tap])
            .unwrap();
        if ipv6 {
            ns.ip(&[
                "addr",
                "add",
                &format!("{KERNEL6}/64"),
                "dev",
                &tap,
                "nodad",
            ])
            .unwrap();
        }
        ns.ip(&["link", "set", &tap, "up"]).unwrap();
        let config = std::env::temp_dir().join(format!("{}.toml", netns::unique("lrpc")));
        let net6 = if ipv6 {
            format!("address6 = \"{OURS6}/64\"\n")
        } else {
            String::new()
        };
        let children = if children > 0 {
            format!("children = {children}\n")
        } else {
            String::new()
        };
        let text = format!(
            "[nic]\ntap = \"{tap}\"\n{children}[net]\naddress = \"{OURS}/24\"\n{net6}{policy}"
        );
        std::fs::write(&config, text).unwrap();
        Site { ns, config, lib }
    }

    /// `program args` in the namespace on the kernel, bounded in time.
    pub fn kernel(&self, program: &str, args: &[&str]) -> Command {
        let mut c = self.ns.command("timeout");
        c.args(["60", program]).args(args);
        c
    }

    /// `program args` in the namespace under the preload, bounded in time.
    pub fn preloaded(&self, program: &str, args: &[&str]) -> Command {
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

pub fn output(mut c: Command, what: &str) -> Output {
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

pub fn json(out: &Output, what: &str) -> Value {
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

pub fn num(v: &Value, path: &[&str]) -> f64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

/// One iperf3 run: the server on one side, the client on the other, both
/// with `--json`; returns (client report, server report).
pub fn iperf3(site: &Site, preload_client: bool, args: &[&str]) -> (Value, Value) {
    iperf3_between(site, preload_client, (KERNEL.into(), OURS.into()), args)
}

/// [`iperf3`] between the kernel's and linerate's `addrs` (IPv4 or IPv6).
pub fn iperf3_between(
    site: &Site,
    preload_client: bool,
    addrs: (std::net::IpAddr, std::net::IpAddr),
    args: &[&str],
) -> (Value, Value) {
    let server_ip = if preload_client { addrs.0 } else { addrs.1 };
    let server_args = ["-s", "-1", "--json", "-p", "5201"];
    let kernel_ip = addrs.0.to_string();
    let mut server = if preload_client {
        let mut a = server_args.to_vec();
        a.extend(["-B", &kernel_ip]);
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

pub struct KillOnDrop(pub Option<std::process::Child>);

impl KillOnDrop {
    pub fn wait(mut self) -> Output {
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

/// Most a TCP sender may have written and the receiving program not read
/// when the test ended: the kernel's send and receive buffers at their
/// autotuning limits (`tcp_wmem`, `tcp_rmem`: 4 MiB and 6 MiB by default,
/// 32 MiB of receive buffer on some machines), what linerate stages and
/// buffers (its send buffer, its receive window) and what is in flight.
pub fn in_flight() -> f64 {
    let max = |name: &str, default: f64| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(2)?.parse::<f64>().ok())
            .unwrap_or(default)
    };
    max("tcp_rmem", 6.0 * 1048576.0) + max("tcp_wmem", 4.0 * 1048576.0) + 8.0 * 1048576.0
}

/// The TCP byte counts of one run: the two reports agree, and what the
/// receiver read is what the sender wrote less its buffers at the end.
pub fn check_tcp(client: &Value, server: &Value, reverse: bool) -> f64 {
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
        sent - received <= in_flight(),
        "sent {sent}, received {received}"
    );
    let secs = num(receiver, &["end", "sum_received", "seconds"]);
    received * 8.0 / secs / 1e9
}

/// A program under the preload that prints "ready" once set up, then runs
/// until the test is done with it; killed when dropped.
pub struct Started {
    child: KillOnDrop,
}

impl Started {
    pub fn new(mut cmd: Command) -> Started {
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
    pub fn wait(self) -> std::process::ExitStatus {
        self.child.wait().status
    }
}

/// A server program that says on stdout when it is ready (a line holding
/// `marker`); what it prints after is kept for the test's messages. Killed
/// when dropped.
pub struct Marked {
    child: KillOnDrop,
    /// What it printed.
    pub out: std::sync::Arc<Mutex<String>>,
}

impl Marked {
    pub fn new(mut cmd: Command, marker: &'static str) -> Marked {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let out = std::sync::Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        for (pipe, tx) in [
            (
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
                tx.clone(),
            ),
            (Box::new(stderr), tx),
        ] {
            let out = std::sync::Arc::clone(&out);
            // Read to the end: a full pipe would stop the program.
            std::thread::spawn(move || {
                let r = std::io::BufReader::new(pipe);
                for line in std::io::BufRead::lines(r).map_while(Result::ok) {
                    if line.contains(marker) {
                        let _ = tx.send(());
                    }
                    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                    o.push_str(&line);
                    o.push('\n');
                }
            });
        }
        let ready = rx.recv_timeout(Duration::from_secs(30)).is_ok();
        let printed = out.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert!(ready, "no {marker:?} from the program:\n{printed}");
        Marked {
            child: KillOnDrop(Some(child)),
            out,
        }
    }

    /// What it printed so far.
    pub fn printed(&self) -> String {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// A program's path, or a failure that names the package to install (.ci/run
/// installs every one).
pub fn need(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()));
    assert!(
        found,
        "{program} is not installed: `apt-get install {package}` (.ci/run installs it)"
    );
}

/// A directory for the test's files, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        let d = std::env::temp_dir().join(netns::unique(prefix));
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    /// `name` inside it, as a string for a command line.
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits until a TCP connect from the namespace to `to` succeeds (the
/// server listens), for at most 30 s.
pub fn wait_listening(site: &Site, to: std::net::SocketAddr) {
    let ok = site
        .ns
        .run(move || {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if std::net::TcpStream::connect_timeout(&to, Duration::from_secs(1)).is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        })
        .unwrap();
    assert!(ok, "nothing listens on {to} after 30 s");
}
