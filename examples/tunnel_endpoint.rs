//! The tunnel endpoint (VTEP): local TAP ports bridged into VXLAN, GENEVE and
//! NVGRE networks over a TAP underlay, in user space.
//!
//! ```text
//! sudo cargo run --release --example tunnel_endpoint -- --config examples/vtep.toml
//! ```
//!
//! Flags: `--config FILE` (required), `--log LEVEL` (a `tracing` filter;
//! `RUST_LOG` when absent, else `info`), `--stats SECS` (print the counters
//! every SECS seconds; 0, the default, never). `SIGUSR1` prints the counters
//! and the FDB; Ctrl-C or `SIGTERM` stops it, and the TAP devices go away when
//! their descriptors close.
//!
//! One thread runs a poll loop over every VNI's bridge domain, waiting on the
//! ports' descriptors when idle (linerate-rt's driver serves one NIC queue per
//! `Service`; a bridge moves frames between many NICs).

use clap::{Arg, Command, value_parser};
use linerate::nic::{Nic, NicError, Readiness, Shim, ShimConfig, Tap, TapConfig};
use linerate::tunnel::vtep::Vtep;
use linerate::tunnel::vtep::config::{EndpointConfig, UnderlayDevice, parse};
use std::os::fd::RawFd;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tracing::{error, info};

/// A TAP device for `what`, with vnet_hdr offloads, under a shim; errors
/// worded for the user.
fn open_tap(name: &str, mtu: u16, what: &str) -> Result<Box<dyn Nic>, String> {
    let mut cfg = TapConfig::new(name);
    cfg.mtu = mtu;
    let tap = Tap::open(&cfg).map_err(|e| tap_error(name, what, &e))?;
    info!(device = name, role = what, offloads = ?tap.offloads_enabled(), "TAP created");
    let shim = Shim::new(tap, ShimConfig::all()).map_err(|e| format!("{what} {name}: {e}"))?;
    Ok(Box::new(shim))
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

fn build(cfg: &EndpointConfig) -> Result<Vtep, String> {
    let underlay = match &cfg.underlay.device {
        UnderlayDevice::Tap(name) => open_tap(name, cfg.underlay.mtu, "underlay")?,
        UnderlayDevice::Xdp(name) => {
            return Err(format!(
                "underlay.xdp = {name:?}: this example runs over a TAP underlay only: \
                 use `tap = \"...\"` in [underlay]"
            ));
        }
    };
    let mut ports = Vec::with_capacity(cfg.vnis.len());
    for v in &cfg.vnis {
        let mut p = Vec::with_capacity(v.ports.len());
        for name in &v.ports {
            p.push(open_tap(name, 1500, "port")?);
        }
        ports.push(p);
    }
    Vtep::new(cfg, underlay, ports).map_err(|e| e.to_string())
}

fn print_counters(vtep: &Vtep, now: Duration) {
    for (name, v) in vtep.counters() {
        if v != 0 {
            println!("{name}: {v}");
        }
    }
    for r in vtep.dump(now) {
        println!("{r}");
    }
}

/// Waits until a descriptor is readable or `timeout` passes.
fn wait(fds: &[RawFd], timeout: Duration) {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: `p` is a valid array of `p.len()` pollfd structs for the call's
    // duration; the descriptors stay open (owned by the VTEP's TAPs).
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms);
    }
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

    let stop = Arc::new(AtomicBool::new(false));
    let dump = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(|e| e.to_string())?;
    }
    signal_hook::flag::register(signal_hook::consts::SIGUSR1, Arc::clone(&dump))
        .map_err(|e| e.to_string())?;

    let mut vtep = build(&cfg)?;
    info!(vnis = cfg.vnis.len(), "VTEP running");
    let fds: Vec<RawFd> = vtep
        .readiness()
        .into_iter()
        .filter_map(|r| match r {
            Readiness::Fd(fd) => Some(fd),
            Readiness::Notify(_) => None,
        })
        .collect();
    let start = Instant::now();
    let mut next_stats = stats;
    while !stop.load(Ordering::Relaxed) {
        let now = start.elapsed();
        if vtep.poll(now) == 0 {
            wait(&fds, Duration::from_millis(50));
        }
        if dump.swap(false, Ordering::Relaxed) {
            print_counters(&vtep, now);
        }
        if !stats.is_zero() && now >= next_stats {
            print_counters(&vtep, now);
            next_stats = now + stats;
        }
    }
    info!("stopping");
    print_counters(&vtep, start.elapsed());
    drop(vtep);
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
