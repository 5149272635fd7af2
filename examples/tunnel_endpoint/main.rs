//! The tunnel endpoint (VTEP): local TAP ports bridged into VXLAN, GENEVE and
//! NVGRE networks over a TAP underlay, in user space.
//!
//! ```text
//! sudo cargo run --release --example tunnel_endpoint -- --config examples/vtep.toml
//! ```
//!
//! Flags: `--config FILE` (required), `--log LEVEL` (a `tracing` filter;
//! `RUST_LOG` when absent, else `info`), `--stats SECS` (print the counters
//! every SECS seconds; 0, the default, never), `--pcap FILE` (record the
//! underlay's frames both ways). `SIGUSR1` prints the counters
//! and the FDB; Ctrl-C or `SIGTERM` stops it, and the TAP devices go away when
//! their descriptors close.
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
//! path's frames.

use clap::{Arg, Command, value_parser};
use linerate::nic::tap::TapOffloads;
use linerate::nic::{
    Nic, NicError, PcapRecorder, Readiness, Recorder, Shim, ShimConfig, Tap, TapConfig,
};
use linerate::rt::{Worker, Workers};
use linerate::toe::Instant;
use linerate::tunnel::bridge::FdbRecord;
use linerate::tunnel::vtep::config::{EndpointConfig, UnderlayDevice, parse};
use linerate::tunnel::vtep::{Learning, Vtep, overlay_mtu};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing::{error, info, warn};

/// A device as one NIC per queue, each owned by the thread that serves it.
type Device = Vec<Box<dyn Nic>>;

/// How often a replica publishes its counters and FDB for the printer.
const PUBLISH: Duration = Duration::from_millis(500);

/// A replica's published snapshot, read by the printer.
type Published = Arc<Mutex<Snapshot>>;

/// What a replica last published.
#[derive(Default)]
struct Snapshot {
    counters: Vec<(String, u64)>,
    fdb: Vec<FdbRecord>,
}

/// One thread's VTEP over queue `q` of every device.
struct Replica {
    vtep: Vtep,
    peers: Vec<SyncSender<Arc<Learning>>>,
    inbox: Receiver<Arc<Learning>>,
    learning: Learning,
    /// Learning messages a full peer mailbox refused (the peer then learns
    /// from traffic).
    unshared: u64,
    snapshot: Published,
    next_publish: Instant,
}

fn since_start(now: Instant) -> Duration {
    Duration::from_nanos(now.as_nanos())
}

impl Replica {
    fn publish(&mut self, now: Duration) {
        let mut counters = self.vtep.counters();
        counters.push(("vtep.learning_unshared".into(), self.unshared));
        let fdb = self.vtep.dump(now);
        let mut s = self.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
        *s = Snapshot { counters, fdb };
    }
}

impl Worker for Replica {
    fn poll(&mut self, now: Instant) -> usize {
        let t = since_start(now);
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
        if now >= self.next_publish {
            self.publish(t);
            self.next_publish = Instant::from_nanos(
                now.as_nanos()
                    .saturating_add(u64::try_from(PUBLISH.as_nanos()).unwrap_or(u64::MAX)),
            );
        }
        moved
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.next_publish)
    }

    fn readiness(&self) -> Vec<Readiness> {
        self.vtep.readiness()
    }
}

/// A TAP device for `what` with `queues` queues and vnet_hdr offloads, under
/// a shim, shared by the replicas; errors worded for the user.
fn open_tap(name: &str, mtu: u16, queues: u16, what: &str) -> Result<Device, String> {
    let mut cfg = TapConfig::new(name);
    cfg.mtu = mtu;
    cfg.queues = queues;
    // Every offload the kernel has: on the underlay, UDP tunnel super-frames
    // both ways where it has TUN_F_UDP_TUNNEL_GSO (Linux 6.17+).
    cfg.offloads = TapOffloads::ALL;
    let mut tap = Tap::open(&cfg).map_err(|e| tap_error(name, what, &e))?;
    // The kernel side gets the MTU too: a host on a port then never sends a
    // frame the tunnel cannot carry.
    tap.set_interface_mtu(mtu)
        .map_err(|e| format!("{what} {name}: setting its MTU to {mtu}: {e}"))?;
    info!(device = name, role = what, queues, offloads = ?tap.offloads_enabled(), "TAP created");
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

/// The replicas of the VTEP of `cfg`, one per queue, with their mailboxes
/// and snapshots.
fn build(
    cfg: &EndpointConfig,
    pcap: Option<&str>,
) -> Result<(Vec<Replica>, Vec<Published>), String> {
    let queues = cfg.underlay.queues.max(1);
    let mut cfg = cfg.clone();
    let underlay = match &cfg.underlay.device {
        UnderlayDevice::Tap(name) => open_tap(name, cfg.underlay.mtu, queues, "underlay")?,
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
            p.push(open_tap(name, mtu, queues, "port")?);
        }
        ports.push(p);
    }
    let n = usize::from(queues);
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| sync_channel(256)).unzip();
    let mut replicas = Vec::with_capacity(n);
    let mut snapshots = Vec::with_capacity(n);
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
        let snapshot = Arc::new(Mutex::new(Snapshot::default()));
        snapshots.push(Arc::clone(&snapshot));
        replicas.push(Replica {
            vtep,
            peers,
            inbox,
            learning: Learning::default(),
            unshared: 0,
            snapshot,
            next_publish: Instant::ZERO,
        });
    }
    Ok((replicas, snapshots))
}

/// Prints the counters summed over the replicas (the FDB's from the first:
/// the replicas' tables are copies) and the first replica's FDB.
fn print_counters(snapshots: &[Snapshot]) {
    let mut sum: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, s) in snapshots.iter().enumerate() {
        for (name, v) in &s.counters {
            if i == 0 || !name.contains(".fdb.") {
                *sum.entry(name.as_str()).or_default() += v;
            }
        }
    }
    for (name, v) in sum {
        if v != 0 {
            println!("{name}: {v}");
        }
    }
    if let Some(s) = snapshots.first() {
        for r in &s.fdb {
            println!("{r}");
        }
    }
}

fn print_published(snapshots: &[Published]) {
    let taken: Vec<Snapshot> = snapshots
        .iter()
        .map(|s| {
            let s = s.lock().unwrap_or_else(PoisonError::into_inner);
            Snapshot {
                counters: s.counters.clone(),
                fdb: s.fdb.clone(),
            }
        })
        .collect();
    print_counters(&taken);
}

fn run() -> Result<(), String> {
    let m = Command::new("tunnel_endpoint")
        .about("A VTEP: local TAP ports bridged into VXLAN, GENEVE and NVGRE networks")
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
        .get_matches();
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
    let (replicas, snapshots) = build(&cfg, pcap)?;
    let queues = replicas.len();
    let workers = Workers::spawn(replicas, "vtep").map_err(|e| e.to_string())?;
    let stop = workers.stop_flag();
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| e.to_string())?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| e.to_string())?;
    info!(vnis = cfg.vnis.len(), queues, "VTEP running");
    let start = std::time::Instant::now();
    let mut next_stats = stats;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if !workers.running() && !stop.load(Ordering::Relaxed) {
            warn!("a queue's thread ended");
            break;
        }
        if dump.swap(false, Ordering::Relaxed) {
            print_published(&snapshots);
        }
        if !stats.is_zero() && start.elapsed() >= next_stats {
            print_published(&snapshots);
            next_stats += stats;
        }
    }
    info!("stopping");
    let replicas = workers.join().map_err(|e| e.to_string())?;
    let last: Vec<Snapshot> = replicas
        .into_iter()
        .map(|mut r| {
            r.publish(start.elapsed());
            let s = r.snapshot.lock().unwrap_or_else(PoisonError::into_inner);
            Snapshot {
                counters: s.counters.clone(),
                fdb: s.fdb.clone(),
            }
        })
        .collect();
    print_counters(&last);
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
