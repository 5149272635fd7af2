//! The tunnel endpoint (VTEP): local TAP ports bridged into VXLAN, GENEVE and
//! NVGRE networks over a TAP underlay, in user space.
//!
//! ```text
//! sudo cargo run --release --example tunnel_endpoint -- --config examples/vtep.toml
//! tunnel_endpoint ctl /run/vtep.sock fdb            # and vnis, ports, neighbors, counters
//! tunnel_endpoint ctl /run/vtep.sock fdb add 42 02:00:00:00:00:01 192.168.100.1
//! ```
//!
//! Flags: `--config FILE` (required), `--log LEVEL` (a `tracing` filter;
//! `RUST_LOG` when absent, else `info`), `--stats SECS` (print the counters
//! every SECS seconds; 0, the default, never), `--pcap FILE` (record the
//! underlay's frames both ways). `SIGUSR1` prints the counters
//! and the FDB; `SIGHUP` reads the config file again and applies the
//! difference ([`linerate::tunnel::vtep::diff`]: VNIs, ports, flood lists,
//! static entries; a file that changes what cannot change while it runs, or
//! breaks a rule, is refused with each field and its fix, and the VTEP runs
//! on as it was); Ctrl-C or `SIGTERM` stops it, and the TAP devices go away
//! when their descriptors close.
//!
//! With `[control] socket = PATH` it serves a Unix socket (mode 0600,
//! removed at exit) that `tunnel_endpoint ctl PATH ...` talks to ([`ctl`]:
//! show the FDB, VNIs, ports, neighbours and counters, add and remove static
//! entries, flood remotes, VNIs and ports, flush learned entries, reload;
//! the protocol is [`linerate::tunnel::vtep::control`]'s). With `[metrics]
//! listen = "ADDR:PORT"` it serves every counter in the Prometheus text
//! format at `/metrics` ([`metrics`]).
//!
//! It runs on linerate-rt's [`Workers`]: one thread per queue
//! (`underlay.queues` in the config), each owning a replica of the VTEP over
//! its own queue of every device, nothing locked between them (the underlay
//! and each local port are multi-queue TAPs split into one `Tap` per queue,
//! each under its own shim; the kernel spreads flows over the queues by their hash, so
//! a local port's flows spread by their inner headers, the underlay's by the
//! outer ones, whose UDP source port is the inner flow's hash). Replicas tell
//! each other the MACs they learn or see move and the next hops they resolve
//! ([`Vtep::take_learned`]), through bounded channels, never on the data
//! path's frames. Run-time changes and shows reach each replica the same way:
//! as jobs on a channel its thread runs between two rounds of its loop
//! ([`server`]), so the forwarding path takes no lock for them.

mod ctl;
mod metrics;
mod server;

use clap::{Arg, Command, value_parser};
use linerate::nic::tap::TapOffloads;
use linerate::nic::{
    Nic, NicError, PcapRecorder, Readiness, Recorder, Shim, ShimConfig, Tap, TapConfig,
};
use linerate::rt::{Worker, Workers};
use linerate::toe::Instant;
use linerate::tunnel::vtep::config::{EndpointConfig, UnderlayDevice, parse};
use linerate::tunnel::vtep::{Learning, Sample, Scope, Vtep, overlay_mtu};
use server::{Job, Server};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::time::Duration;
use tracing::{error, info, warn};

/// A device as one NIC per queue, each owned by the thread that serves it.
type Device = Vec<Box<dyn Nic>>;

/// One thread's VTEP over queue `q` of every device.
pub struct Replica {
    vtep: Vtep,
    peers: Vec<SyncSender<Arc<Learning>>>,
    inbox: Receiver<Arc<Learning>>,
    learning: Learning,
    /// Learning messages a full peer mailbox refused (the peer then learns
    /// from traffic).
    unshared: u64,
    /// Changes and shows from the control socket, SIGHUP and the metrics,
    /// run between two rounds.
    jobs: Receiver<Job>,
}

fn since_start(now: Instant) -> Duration {
    Duration::from_nanos(now.as_nanos())
}

impl Replica {
    /// Every counter, the VTEP's and the replica's own.
    pub fn samples(&self) -> Vec<Sample> {
        let mut s = self.vtep.samples();
        s.push(Sample {
            scope: Scope::Process,
            name: "learning_unshared".into(),
            value: self.unshared,
        });
        s
    }

    /// The VTEP.
    pub fn vtep(&self) -> &Vtep {
        &self.vtep
    }

    /// The VTEP, to change.
    pub fn vtep_mut(&mut self) -> &mut Vtep {
        &mut self.vtep
    }
}

impl Worker for Replica {
    fn poll(&mut self, now: Instant) -> usize {
        let t = since_start(now);
        // One empty channel's look per round when nothing is asked.
        while let Ok(job) = self.jobs.try_recv() {
            job(self, t);
        }
        while let Ok(l) = self.inbox.try_recv() {
            self.vtep.apply_learned(t, &l);
        }
        let moved = self.vtep.poll(t);
        if !self.peers.is_empty() {
            self.vtep.take_learned(&mut self.learning);
            if !self.learning.is_empty() {
                let l = Arc::new(core::mem::take(&mut self.learning));
                for p in &self.peers {
                    if let Err(TrySendError::Full(_)) = p.try_send(Arc::clone(&l)) {
                        self.unshared += 1;
                    }
                }
            }
        }
        moved
    }

    fn readiness(&self) -> Vec<Readiness> {
        self.vtep.readiness()
    }

    fn readiness_generation(&self) -> u64 {
        self.vtep.generation()
    }
}

/// A TAP device for `what` with `queues` queues and vnet_hdr offloads, under
/// a shim, shared by the replicas, batched through an io_uring of depth
/// `io_uring` per queue if given (`[tap] io_uring`); errors worded for the
/// user.
pub fn open_tap(
    name: &str,
    mtu: u16,
    queues: u16,
    what: &str,
    io_uring: Option<u32>,
) -> Result<Device, String> {
    let mut cfg = TapConfig::new(name);
    cfg.mtu = mtu;
    cfg.queues = queues;
    cfg.io_uring = io_uring;
    // Every offload the kernel has: on the underlay, UDP tunnel super-frames
    // both ways where it has TUN_F_UDP_TUNNEL_GSO (Linux 6.17+).
    cfg.offloads = TapOffloads::ALL;
    let mut tap = Tap::open(&cfg).map_err(|e| tap_error(name, what, &e))?;
    // The kernel side gets the MTU too: a host on a port then never sends a
    // frame the tunnel cannot carry.
    tap.set_interface_mtu(mtu)
        .map_err(|e| format!("{what} {name}: setting its MTU to {mtu}: {e}"))?;
    info!(device = name, role = what, queues, offloads = ?tap.offloads_enabled(), io_uring = tap.io_uring_active(), "TAP created");
    if let Some(e) = tap.io_uring_fallback() {
        // The data path works without the ring, a system call per frame.
        warn!(device = name, role = what, error = %e, "tap.io_uring: no io_uring (refused by the kernel or a seccomp profile?): one system call per frame");
    }
    // One Tap per queue (each its own descriptor), each under its own shim:
    // nothing is shared between the queues' threads.
    tap.split()
        .into_iter()
        .map(|t| {
            let t: Box<dyn Nic> = Box::new(t);
            let shim =
                Shim::new(t, ShimConfig::all()).map_err(|e| format!("{what} {name}: {e}"))?;
            Ok(Box::new(shim) as Box<dyn Nic>)
        })
        .collect()
}

/// Queues `0..queues` of interface `name` through AF_XDP (the `af-xdp`
/// feature), under a shim: the interface has no offloads toward user space.
#[cfg(feature = "af-xdp")]
fn open_xdp(name: &str, queues: u16) -> Result<Device, String> {
    use linerate::nic::xdp::XdpAttach;
    use linerate::nic::{Xdp, XdpConfig};
    let cfg = XdpConfig {
        queues,
        attach: XdpAttach::Auto,
        // libxdp keeps its programs in bpffs: mount it if it is not.
        mount_bpffs: true,
        ..XdpConfig::new(name)
    };
    let xdp = Xdp::open(&cfg).map_err(|e| match &e {
        NicError::Io(io) if io.raw_os_error() == Some(libc::ENODEV) => format!(
            "underlay.xdp = {name:?}: no such interface: name an existing one (ip link)"
        ),
        NicError::Io(io) if matches!(io.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
            format!("underlay.xdp = {name:?}: not permitted: run as root or with CAP_NET_ADMIN and CAP_BPF")
        }
        NicError::Io(io) if io.raw_os_error() == Some(libc::EINVAL) => format!(
            "underlay.xdp = {name:?}: the interface refused {queues} AF_XDP queue(s): \
             lower underlay.queues to what `ethtool -l {name}` shows"
        ),
        _ => format!("underlay.xdp = {name:?}: {e}"),
    })?;
    info!(
        device = name,
        role = "underlay",
        queues,
        "AF_XDP sockets bound"
    );
    // The AF_XDP sockets share one NIC value: its queues are views of it,
    // behind a lock taken once per batch.
    let xdp: Box<dyn Nic> = Box::new(xdp);
    let shim = Shim::new(xdp, ShimConfig::all()).map_err(|e| format!("underlay {name}: {e}"))?;
    let shared = linerate::rt::SharedNic::new(shim);
    (0..usize::from(queues))
        .map(|q| {
            let v = shared
                .queue(q)
                .map_err(|e| format!("underlay {name}: queue {q}: {e}"))?;
            Ok(Box::new(v) as Box<dyn Nic>)
        })
        .collect()
}

#[cfg(not(feature = "af-xdp"))]
fn open_xdp(name: &str, _queues: u16) -> Result<Device, String> {
    Err(format!(
        "underlay.xdp = {name:?}: this build has no AF_XDP: build with \
         `--features af-xdp`, or use `tap = \"...\"` in [underlay]"
    ))
}

fn tap_error(name: &str, what: &str, e: &NicError) -> String {
    let os = match e {
        NicError::Io(io) => io.raw_os_error(),
        NicError::PermissionDenied { error, .. } => error.raw_os_error(),
        _ => None,
    };
    match os {
        Some(libc::EPERM) | Some(libc::EACCES) => format!(
            "{what} {name}: not permitted to create TAP devices (/dev/net/tun): \
             run as root or with CAP_NET_ADMIN"
        ),
        Some(libc::ENOENT) | Some(libc::ENODEV) => {
            format!("{what} {name}: /dev/net/tun is missing: load the tun module (modprobe tun)")
        }
        Some(libc::EBUSY) | Some(libc::EEXIST) => format!(
            "{what} {name}: the device name is in use by another interface or program: \
             pick another name in the config"
        ),
        Some(libc::EINVAL) => format!(
            "{what} {name}: the kernel refused the TAP (an existing non-TAP interface \
             of that name?): pick another name in the config"
        ),
        _ => format!("{what} {name}: {e}"),
    }
}

/// The MAC address of interface `name`, from sysfs.
fn interface_mac(name: &str) -> Option<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in &mut mac {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    Some(mac)
}

/// What [`build`] makes: the replicas, their job channels, and the
/// configuration they run.
type Built = (Vec<Replica>, Vec<SyncSender<Job>>, EndpointConfig);

/// The replicas of the VTEP of `cfg`, one per queue, with their job
/// channels; and the configuration they run (the underlay's MAC and MTU
/// from the interface, over AF_XDP).
fn build(cfg: &EndpointConfig, pcap: Option<&str>) -> Result<Built, String> {
    let queues = cfg.underlay.queues.max(1);
    let mut cfg = cfg.clone();
    let underlay = match &cfg.underlay.device {
        UnderlayDevice::Tap(name) => {
            open_tap(name, cfg.underlay.mtu, queues, "underlay", cfg.tap_io_uring)?
        }
        UnderlayDevice::Xdp(name) => {
            // Over a real interface, the VTEP speaks with the interface's MAC
            // (a made-up one would not pass its unicast filter).
            if cfg.underlay.mac.is_none() {
                cfg.underlay.mac = interface_mac(name);
            }
            // And its MTU, unless a lower one is configured.
            let have = linerate::nic::tap::interface_mtu(name)
                .map_err(|e| format!("underlay.xdp = {name:?}: {e}"))?;
            let have = u16::try_from(have).unwrap_or(u16::MAX);
            if !cfg.underlay.mtu_configured {
                cfg.underlay.mtu = have;
            } else if cfg.underlay.mtu > have {
                return Err(format!(
                    "underlay.mtu = {}: more than {name}'s MTU {have}: lower it, or raise \
                     the interface's (ip link set {name} mtu ...)",
                    cfg.underlay.mtu
                ));
            }
            open_xdp(name, queues)?
        }
    };
    let cfg = &cfg;
    let mut underlay = underlay;
    if let Some(path) = pcap {
        let rec: Arc<dyn Recorder> =
            Arc::new(PcapRecorder::create(path).map_err(|e| format!("--pcap {path}: {e}"))?);
        for q in &mut underlay {
            q.set_recorder(Some(Arc::clone(&rec)));
        }
        info!(file = path, "recording the underlay");
    }
    // ports[vni][port] is a device: one NIC per queue.
    let mut ports: Vec<Vec<Device>> = Vec::with_capacity(cfg.vnis.len());
    for v in &cfg.vnis {
        let mut p = Vec::with_capacity(v.ports.len());
        let mtu = overlay_mtu(cfg, v);
        for name in &v.ports {
            p.push(open_tap(name, mtu, queues, "port", cfg.tap_io_uring)?);
        }
        ports.push(p);
    }
    let n = usize::from(queues);
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel(256)).unzip();
    let mut replicas = Vec::with_capacity(n);
    let mut jobs = Vec::with_capacity(n);
    // Deal the queues out: replica q takes queue q of every device.
    let mut underlay = underlay.into_iter();
    let mut ports: Vec<Vec<std::vec::IntoIter<Box<dyn Nic>>>> = ports
        .into_iter()
        .map(|v| v.into_iter().map(Vec::into_iter).collect())
        .collect();
    for (q, inbox) in rxs.into_iter().enumerate() {
        let missing = || format!("queue {q}: a device has fewer queues than underlay.queues");
        let mut local = Vec::with_capacity(ports.len());
        for vni in &mut ports {
            let mut p = Vec::with_capacity(vni.len());
            for dev in vni.iter_mut() {
                p.push(dev.next().ok_or_else(missing)?);
            }
            local.push(p);
        }
        let under = underlay.next().ok_or_else(missing)?;
        let mut vtep = Vtep::new(cfg, under, local).map_err(|e| e.to_string())?;
        vtep.share_learning(n > 1);
        let peers = txs
            .iter()
            .enumerate()
            .filter(|&(o, _)| o != q)
            .map(|(_, t)| t.clone())
            .collect();
        let (job_tx, job_rx) = sync_channel(16);
        jobs.push(job_tx);
        replicas.push(Replica {
            vtep,
            peers,
            inbox,
            learning: Learning::default(),
            unshared: 0,
            jobs: job_rx,
        });
    }
    Ok((replicas, jobs, cfg.clone()))
}

/// Prints the counters that are not zero (summed over the replicas) and the
/// FDB (the first replica's: the replicas' tables are copies).
fn print_counters(samples: &[Sample], fdb: &[linerate::tunnel::bridge::FdbRecord]) {
    for s in samples {
        if s.value != 0 {
            println!("{}: {}", s.dotted(), s.value);
        }
    }
    for r in fdb {
        println!("{r}");
    }
}

/// Asks the running replicas for their counters and FDB, and prints them.
fn print_running(server: &Server) {
    match (server.samples(), server.fdb()) {
        (Ok(s), Ok(f)) => print_counters(&s, &f),
        (Err(e), _) | (_, Err(e)) => warn!("counters: {e}"),
    }
}

fn command() -> Command {
    Command::new("tunnel_endpoint")
        .about("A VTEP: local TAP ports bridged into VXLAN, GENEVE and NVGRE networks")
        .subcommand_negates_reqs(true)
        .arg(
            Arg::new("config")
                .long("config")
                .required(true)
                .help("the TOML config (see examples/vtep.toml)"),
        )
        .arg(
            Arg::new("log")
                .long("log")
                .help("log filter (error, warn, info, debug, trace); default RUST_LOG or info"),
        )
        .arg(
            Arg::new("stats")
                .long("stats")
                .value_parser(value_parser!(u64))
                .default_value("0")
                .help("print the counters every SECS seconds (0: only on SIGUSR1)"),
        )
        .arg(
            Arg::new("pcap")
                .long("pcap")
                .help("record the underlay's frames, both ways, as the VTEP sees them, to FILE"),
        )
        .subcommand(ctl::command())
}

fn run() -> Result<(), String> {
    let m = command().get_matches();
    if let Some(("ctl", c)) = m.subcommand() {
        return ctl::run(c);
    }
    let filter = match m.get_one::<String>("log") {
        Some(l) => tracing_subscriber::EnvFilter::new(l),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    };
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let path = m
        .get_one::<String>("config")
        .ok_or("--config FILE is required")?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let cfg = parse(&text).map_err(|e| format!("{path}: {e}"))?;
    let stats = Duration::from_secs(m.get_one::<u64>("stats").copied().unwrap_or(0));

    let pcap = m.get_one::<String>("pcap").map(String::as_str);
    let (replicas, jobs, built) = build(&cfg, pcap)?;
    let queues = replicas.len();
    let server = Arc::new(Server::new(path.into(), cfg.clone(), built, jobs));
    // Bound before the threads start, so a socket in use stops it here.
    let socket = match &cfg.control {
        Some(p) => Some(server::Socket::bind(p)?),
        None => None,
    };
    let listener = match cfg.metrics {
        Some(a) => Some(
            std::net::TcpListener::bind(a)
                .map_err(|e| format!("metrics.listen = \"{a}\": {e}: pick a free address"))?,
        ),
        None => None,
    };
    let workers = Workers::spawn(replicas, "vtep").map_err(|e| e.to_string())?;
    let stop = workers.stop_flag();
    let dump = Arc::new(AtomicBool::new(false));
    let reload = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| e.to_string())?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| e.to_string())?;
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload))
        .map_err(|e| e.to_string())?;
    if let Some(s) = &socket {
        s.serve(Arc::clone(&server)).map_err(|e| e.to_string())?;
        info!(socket = %s.path().display(), "control socket");
    }
    if let Some(l) = listener {
        let addr = l.local_addr().map_err(|e| e.to_string())?;
        metrics::serve(l, Arc::clone(&server)).map_err(|e| e.to_string())?;
        info!(%addr, "metrics at http://{addr}/metrics");
    }
    info!(vnis = cfg.vnis.len(), queues, "VTEP running");
    let start = std::time::Instant::now();
    let mut next_stats = stats;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if !workers.running() && !stop.load(Ordering::Relaxed) {
            warn!("a queue's thread ended");
            break;
        }
        if reload.swap(false, Ordering::Relaxed) {
            server.reload_logged("SIGHUP");
        }
        if dump.swap(false, Ordering::Relaxed) {
            print_running(&server);
        }
        if !stats.is_zero() && start.elapsed() >= next_stats {
            print_running(&server);
            next_stats += stats;
        }
    }
    info!("stopping");
    // The socket file goes first: a client now finds no VTEP.
    drop(socket);
    let replicas = workers.join().map_err(|e| e.to_string())?;
    // Multicast groups are left while the underlay is still there; a TAP
    // frees what it has not handed to the kernel when it goes, so a moment
    // for the leaves to leave.
    let left: usize = replicas.iter().map(|r| r.vtep.leave_groups()).sum();
    if left > 0 {
        info!("left {left} multicast group(s)");
        std::thread::sleep(Duration::from_millis(100));
    }
    let now = start.elapsed();
    let all: Vec<Vec<Sample>> = replicas.iter().map(Replica::samples).collect();
    let fdb = replicas
        .first()
        .map(|r| r.vtep.dump(now))
        .unwrap_or_default();
    print_counters(&Sample::merge(&all), &fdb);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Logging may not be up yet: say it on stderr too.
            error!("{e}");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
