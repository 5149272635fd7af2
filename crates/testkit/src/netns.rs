//! Network namespaces, veth pairs, and code or commands run inside a namespace.
//!
//! Every object is a guard: dropping it removes what it created, so a failing test
//! (which unwinds) still cleans up. Names are unique per process and call
//! ([`unique`]), so tests running in parallel, or twice, never collide.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call: `prefix` (keep it at most 4 characters,
/// interface names are limited to 15), the process id and a counter.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{}x{n}", std::process::id() % 1_000_000)
}

/// True when running as root (namespaces and devices need it).
#[allow(unsafe_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn check(out: Output, what: &str) -> io::Result<Output> {
    if out.status.success() {
        Ok(out)
    } else {
        Err(io::Error::other(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Runs `ip` with `args` in the current namespace; an error carries its stderr.
pub fn ip(args: &[&str]) -> io::Result<Output> {
    check(
        Command::new("ip").args(args).output()?,
        &format!("ip {}", args.join(" ")),
    )
}

/// The output of a set-up command that must succeed: panics naming `what`
/// and the command's stderr otherwise (for tests).
pub fn must(out: io::Result<Output>, what: &str) -> Output {
    let out = out.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A network namespace, deleted (with every device in it) when dropped.
#[derive(Debug)]
pub struct Netns {
    name: String,
}

impl Netns {
    /// Creates a namespace with a unique name starting with `prefix`, and brings
    /// its loopback up.
    pub fn new(prefix: &str) -> io::Result<Netns> {
        let name = unique(prefix);
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip` with `args` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> io::Result<Output> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// Runs `program args` inside the namespace and waits; an error carries stderr.
    pub fn exec(&self, program: &str, args: &[&str]) -> io::Result<Output> {
        check(self.command(program).args(args).output()?, program)
    }

    /// Runs `f` on a new thread that has entered the namespace (setns(2) changes
    /// the network namespace of the calling thread only), and returns its result.
    /// Sockets `f` opens live in the namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> io::Result<T> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = File::open(path)?;
        let handle = std::thread::spawn(move || -> io::Result<T> {
            enter(&file)?;
            Ok(f())
        });
        handle
            .join()
            .map_err(|_| io::Error::other("thread in namespace panicked"))?
    }

    /// Like [`Netns::run`], but returns at once with the thread's handle.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
        let path = format!("/var/run/netns/{}", self.name);
        let file = File::open(path)?;
        Ok(std::thread::spawn(move || -> io::Result<T> {
            enter(&file)?;
            Ok(f())
        }))
    }
}

#[allow(unsafe_code)]
fn enter(ns: &File) -> io::Result<()> {
    // SAFETY: the fd is a valid open namespace file for the duration of the call;
    // setns only changes this thread's network namespace.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A veth pair with one end in the root namespace (for an AF_XDP socket or a
/// raw socket of this process) and the other in a namespace, addressed, both
/// up, IPv6 off on both (no router solicitations on the wire). The pair goes
/// away when this drops (deleting our end deletes the peer).
#[derive(Debug)]
pub struct RootVeth {
    /// Our end, in the root namespace.
    pub ours: String,
    /// The end in the namespace.
    pub peer: String,
}

impl RootVeth {
    /// Creates the pair with unique names from `prefix` and moves the peer into
    /// `ns` with the CIDR address `peer_addr` (for example `"10.216.0.1/24"`).
    pub fn new(prefix: &str, ns: &Netns, peer_addr: &str) -> io::Result<RootVeth> {
        let ours = unique(&format!("{prefix}a"));
        let peer = unique(&format!("{prefix}b"));
        ip(&["link", "add", &ours, "type", "veth", "peer", "name", &peer])?;
        let v = RootVeth { ours, peer };
        ip(&["link", "set", &v.peer, "netns", ns.name()])?;
        let _ = std::fs::write(
            format!("/proc/sys/net/ipv6/conf/{}/disable_ipv6", v.ours),
            "1",
        );
        let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{}/disable_ipv6", v.peer);
        let _ = ns.exec("sh", &["-c", &off]);
        ns.ip(&["addr", "add", peer_addr, "dev", &v.peer])?;
        ns.ip(&["link", "set", &v.peer, "up"])?;
        ip(&["link", "set", &v.ours, "up"])?;
        Ok(v)
    }
}

impl Drop for RootVeth {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.ours]);
    }
}

/// A veth pair whose ends are moved into two namespaces, addressed and up.
#[derive(Debug)]
pub struct VethPair {
    /// Name of the end in the first namespace.
    pub a: String,
    /// Name of the end in the second namespace.
    pub b: String,
}

impl VethPair {
    /// Creates a veth pair with unique names, moves one end into each namespace,
    /// gives them the CIDR addresses `addr_a` / `addr_b` (for example
    /// `"10.77.0.1/24"`) and brings them up. The pair disappears with either
    /// namespace.
    pub fn new(ns_a: &Netns, addr_a: &str, ns_b: &Netns, addr_b: &str) -> io::Result<VethPair> {
        let a = unique("va");
        let b = unique("vb");
        ip(&["link", "add", &a, "type", "veth", "peer", "name", &b])?;
        let pair = VethPair { a, b };
        let setup = || -> io::Result<()> {
            ip(&["link", "set", &pair.a, "netns", ns_a.name()])?;
            ip(&["link", "set", &pair.b, "netns", ns_b.name()])?;
            ns_a.ip(&["addr", "add", addr_a, "dev", &pair.a])?;
            ns_b.ip(&["addr", "add", addr_b, "dev", &pair.b])?;
            ns_a.ip(&["link", "set", &pair.a, "up"])?;
            ns_b.ip(&["link", "set", &pair.b, "up"])?;
            Ok(())
        };
        if let Err(e) = setup() {
            // Still in the root namespace if the move failed.
            let _ = ip(&["link", "del", &pair.a]);
            return Err(e);
        }
        Ok(pair)
    }
}
