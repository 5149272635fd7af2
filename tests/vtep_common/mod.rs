//! What the VTEP system tests share: local ports (a TAP whose kernel side sits
//! in a namespace the test creates, with addresses), the `Vtep` library run
//! in-process on a thread of its own (its poll loop, waiting on the ports'
//! descriptors when idle), and the kernel sockets' side of byte-exact
//! transfers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
use linerate::nic::{Nic, Offloads, Readiness};
use linerate::tunnel::bridge::FdbRecord;
use linerate::tunnel::vtep::Vtep;
use linerate::tunnel::vtep::config::EndpointConfig;
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::stream;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes per direction of the main transfers: 256 MiB, or `LINERATE_BULK_MIB`.
pub fn bulk_len() -> usize {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new directory named after `tag` and the process.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(netns::unique(tag));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A VTEP's local port: a TAP whose kernel side was moved into a namespace of
/// its own and addressed there (the namespace is the "host" or "VM" behind
/// the port). Dropping it removes the namespace and, with it, the TAP's
/// kernel side (the descriptor closes with the `Tap`, wherever it went).
#[derive(Debug)]
pub struct LocalPort {
    /// The TAP, until [`LocalPort::take_tap`].
    tap: Option<Tap>,
    /// The namespace.
    pub ns: Netns,
    /// The TAP's name (inside the namespace).
    pub name: String,
}

impl LocalPort {
    /// A TAP named after `prefix` (at most 4 characters) with MTU `mtu` in a
    /// new namespace, the kernel's side at `v4`/24 and `v6`/64. `tso`: the
    /// kernel hands over 64 KiB TCP super-frames with partial checksums
    /// (`TUNSETOFFLOAD` TSO) and takes them from the VTEP; off: it segments
    /// and checksums everything itself, and the TAP presents no transmit
    /// offload (finished frames both ways).
    pub fn new(
        prefix: &str,
        tso: bool,
        mtu: u16,
        v4: Ipv4Addr,
        v6: Ipv6Addr,
    ) -> io::Result<LocalPort> {
        LocalPort::with_ring(prefix, tso, mtu, v4, v6, None)
    }

    /// [`LocalPort::new`] with the TAP batched through an io_uring of depth
    /// `ring` (`TapConfig::io_uring`) if given.
    pub fn with_ring(
        prefix: &str,
        tso: bool,
        mtu: u16,
        v4: Ipv4Addr,
        v6: Ipv6Addr,
        ring: Option<u32>,
    ) -> io::Result<LocalPort> {
        let ns = Netns::new(prefix)?;
        let want = if tso {
            TapOffloads::TSO
        } else {
            TapOffloads::NONE
        };
        let tap = Tap::open(&TapConfig {
            offloads: want,
            mtu,
            tx: if tso { Offloads::ALL } else { Offloads::NONE },
            io_uring: ring,
            ..TapConfig::new(netns::unique(prefix))
        })
        .map_err(io::Error::other)?;
        if tap.io_uring_active() != ring.is_some() {
            return Err(io::Error::other(format!(
                "io_uring asked {ring:?}, fallback {:?}",
                tap.io_uring_fallback()
            )));
        }
        if tap.offloads_enabled() != want {
            return Err(io::Error::other(format!(
                "TAP offloads {:?}, wanted {want:?}",
                tap.offloads_enabled()
            )));
        }
        let name = tap.name().to_owned();
        netns::ip(&["link", "set", &name, "netns", ns.name()])?;
        let port = LocalPort {
            tap: Some(tap),
            ns,
            name,
        };
        let n = port.name.as_str();
        port.ns.ip(&["link", "set", n, "mtu", &mtu.to_string()])?;
        port.ns
            .ip(&["addr", "add", &format!("{v4}/24"), "dev", n])?;
        port.ns
            .ip(&["addr", "add", &format!("{v6}/64"), "dev", n, "nodad"])?;
        port.ns.ip(&["link", "set", n, "up"])?;
        Ok(port)
    }

    /// The TAP, to be a VTEP's port (once).
    pub fn take_tap(&mut self) -> Tap {
        self.tap.take().expect("TAP taken twice")
    }

    /// The kernel side's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        mac_of(&self.ns, &self.name).unwrap()
    }
}

/// The MAC address of `dev` in `ns`.
pub fn mac_of(ns: &Netns, dev: &str) -> io::Result<[u8; 6]> {
    let out = ns.ip(&["-o", "link", "show", "dev", dev])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text
        .split_whitespace()
        .skip_while(|w| *w != "link/ether")
        .nth(1)
        .ok_or_else(|| io::Error::other(format!("no MAC in {text:?}")))?;
    parse_mac(hex).ok_or_else(|| io::Error::other(format!("bad MAC {hex}")))
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// `aa:bb:cc:dd:ee:ff`, as `ip` and `bridge` print it.
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A `Vtep` running its poll loop on a thread of its own (as the binary's
/// loop does: poll every domain; when a round moved nothing, wait up to a
/// millisecond on the ports' descriptors). Stopped and joined on drop.
pub struct Running {
    vtep: Arc<Mutex<Vtep>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    epoch: Instant,
}

impl Running {
    /// Builds the VTEP of `cfg` over `underlay` and `ports` (see `Vtep::new`)
    /// and starts its loop.
    pub fn start(
        cfg: &EndpointConfig,
        underlay: Box<dyn Nic>,
        ports: Vec<Vec<Box<dyn Nic>>>,
    ) -> Running {
        let vtep = Vtep::new(cfg, underlay, ports).unwrap();
        let fds: Vec<libc::pollfd> = vtep
            .readiness()
            .into_iter()
            .filter_map(|r| match r {
                Readiness::Fd(fd) => Some(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
                Readiness::Notify(_) => None,
            })
            .collect();
        let vtep = Arc::new(Mutex::new(vtep));
        let stop = Arc::new(AtomicBool::new(false));
        let epoch = Instant::now();
        let thread = {
            let (vtep, stop) = (Arc::clone(&vtep), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut fds = fds;
                while !stop.load(Ordering::Relaxed) {
                    let moved = lock(&vtep).poll(epoch.elapsed());
                    if moved == 0 {
                        wait(&mut fds, 1);
                    }
                }
            })
        };
        Running {
            vtep,
            stop,
            thread: Some(thread),
            epoch,
        }
    }

    /// The VTEP's clock (what its FDB ages on).
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Runs `f` on the VTEP between two rounds of its loop; panics if the
    /// loop is gone (it panicked: its message is on stderr).
    pub fn with<R>(&self, f: impl FnOnce(&mut Vtep) -> R) -> R {
        assert!(
            !self.thread.as_ref().is_some_and(JoinHandle::is_finished),
            "the VTEP's poll loop stopped"
        );
        f(&mut lock(&self.vtep))
    }

    /// Its FDB, as `bridge fdb show` lists one.
    pub fn dump(&self) -> Vec<FdbRecord> {
        let now = self.now();
        self.with(|v| v.dump(now))
    }

    /// Its counters, `ethtool -S` style.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.with(|v| v.counters())
    }

    /// One counter by its full name (`vni42.tunnel.tx_encap`); 0 if absent.
    pub fn counter(&self, name: &str) -> u64 {
        self.counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| v)
    }

    /// The counters that are not zero, for messages.
    pub fn nonzero(&self) -> String {
        self.counters()
            .into_iter()
            .filter(|(_, v)| *v != 0)
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(v: &Mutex<Vtep>) -> MutexGuard<'_, Vtep> {
    match v.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Waits until a descriptor is readable or `ms` milliseconds pass.
#[allow(unsafe_code)]
fn wait(fds: &mut [libc::pollfd], ms: libc::c_int) {
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(ms.unsigned_abs().into()));
        return;
    }
    // SAFETY: `fds` is a valid, exclusively borrowed array of `fds.len()`
    // pollfd structs for the call's duration; the descriptors belong to the
    // VTEP's TAPs, which outlive the loop (the thread is joined before the
    // VTEP drops).
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms);
    }
}

/// The server side of a transfer each way on one connection: reads to EOF
/// (count and SHA-256), then writes `len` bytes of pattern 2 and closes.
pub fn kernel_server(addr: SocketAddr, len: usize, ready: mpsc::Sender<()>) -> (usize, [u8; 32]) {
    let l = TcpListener::bind(addr).unwrap();
    ready.send(()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    let got = stream::receive(&mut s).unwrap();
    stream::send(&mut s, 2, len).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    got
}

/// The client side: writes `len` bytes of pattern 1, half-closes, reads to
/// EOF.
pub fn kernel_client(addr: SocketAddr, len: usize) -> (usize, [u8; 32]) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(20)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
    stream::send(&mut s, 1, len).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let got = stream::receive(&mut s).unwrap();
    let _ = s.flush();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    got
}

/// `len` bytes each way between a client in `client` and a server at `addr`
/// in `server` (pattern 1 up, pattern 2 back), both checked against the
/// patterns' SHA-256; returns the seconds it took.
pub fn transfer(client: &Netns, server: &Netns, addr: SocketAddr, len: usize, what: &str) -> f64 {
    let (ready_tx, ready_rx) = mpsc::channel();
    let srv = server
        .spawn(move || kernel_server(addr, len, ready_tx))
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let start = Instant::now();
    let cli = client.spawn(move || kernel_client(addr, len)).unwrap();
    let up = srv.join().unwrap().unwrap();
    let down = cli.join().unwrap().unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(up, (len, stream::Pattern::digest(1, len)), "{what}: up");
    assert_eq!(down, (len, stream::Pattern::digest(2, len)), "{what}: down");
    secs
}

/// Pings `to` from `ns` (3 requests of 56 bytes); panics naming `what` unless
/// all are answered.
pub fn ping_from(ns: &Netns, to: std::net::IpAddr, what: &str) {
    let answered = ns
        .run(move || linerate_testkit::ping::ping(to, 3, 56, Duration::from_secs(3)))
        .unwrap()
        .unwrap();
    assert_eq!(answered, 3, "{what}: pings to {to} answered");
}
