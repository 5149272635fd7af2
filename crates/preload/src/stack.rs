//! The configuration read at load time and the linerate runtime, started at
//! the first socket the policy offloads.

use crate::config::{Config, OnError};
use crate::policy::Prefix;
use linerate_nic::tap::TapOffloads;
use linerate_nic::{Tap, TapConfig};
use linerate_rt::{Handle, Runtime, RuntimeConfig};
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

/// Writes one line to stderr, prefixed with the library's name.
pub(crate) fn log(msg: impl core::fmt::Display) {
    eprintln!("linerate-preload: {msg}");
}

static CONFIG: OnceLock<Option<Config>> = OnceLock::new();

/// The checked configuration; `None` when the library is inert (no
/// `LINERATE_CONFIG`, or a bad file with `on_error = "kernel"`).
pub(crate) fn config() -> Option<&'static Config> {
    CONFIG.get().and_then(Option::as_ref)
}

/// What loading decided, for [`init`]'s caller.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Loaded {
    /// No `LINERATE_CONFIG`: every call goes to libc.
    Inert,
    /// A good file: offloading as it says.
    Active,
    /// A bad file with `on_error = "kernel"`: said on stderr, every call to libc.
    Kernel,
    /// A bad file: said on stderr; the program must stop.
    Exit,
}

/// `LINERATE_LOG=filter` (tracing's env-filter syntax: `info`, `debug`,
/// `linerate_rt=trace,info`): the runtime's and the library's events, to
/// stderr, or appended to `LINERATE_LOG_FILE` when that names a file.
fn init_log() {
    let Some(filter) = std::env::var_os("LINERATE_LOG") else {
        return;
    };
    let filter = filter.to_string_lossy();
    let filter = match tracing_subscriber::EnvFilter::try_new(filter.as_ref()) {
        Ok(f) => f,
        Err(e) => {
            log(format_args!(
                "LINERATE_LOG={filter:?}: {e}; write a level such as \"debug\" or \"linerate_rt=trace\""
            ));
            return;
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_thread_names(true);
    let done = match std::env::var_os("LINERATE_LOG_FILE") {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path);
            match file {
                Ok(f) => builder
                    .with_ansi(false)
                    .with_writer(Mutex::new(f))
                    .try_init(),
                Err(e) => {
                    log(format_args!(
                        "LINERATE_LOG_FILE: cannot open {}: {e}; logging to stderr",
                        path.to_string_lossy()
                    ));
                    builder.with_writer(std::io::stderr).try_init()
                }
            }
        }
        None => builder.with_writer(std::io::stderr).try_init(),
    };
    if done.is_err() {
        log("LINERATE_LOG: the program has a tracing subscriber of its own; not replaced");
    }
}

/// Reads and checks `LINERATE_CONFIG`, once, at load.
pub(crate) fn init() -> Loaded {
    let Some(path) = std::env::var_os("LINERATE_CONFIG") else {
        let _ = CONFIG.set(None);
        return Loaded::Inert;
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            log(format_args!(
                "LINERATE_CONFIG: cannot read {}: {e}; point it at a readable TOML file",
                path.to_string_lossy()
            ));
            let _ = CONFIG.set(None);
            return Loaded::Exit;
        }
    };
    match Config::from_toml(&text) {
        Ok(c) => {
            init_log();
            let _ = CONFIG.set(Some(c));
            Loaded::Active
        }
        Err(e) => {
            let _ = CONFIG.set(None);
            log(format_args!("{}: {e}", path.to_string_lossy()));
            match crate::config::on_error_of(&text) {
                OnError::Kernel => {
                    log("on_error = \"kernel\": every socket of this program is the kernel's");
                    Loaded::Kernel
                }
                OnError::Exit => Loaded::Exit,
            }
        }
    }
}

/// A running linerate on the configured NIC.
pub(crate) struct Stack {
    /// The runtime's handle, for opening sockets.
    pub(crate) handle: Handle,
    /// Its subnet: the peers the engine reaches on the link.
    pub(crate) subnet: Prefix,
    /// A gateway is configured: the engine reaches every IPv4 peer, those off
    /// the subnet through it.
    pub(crate) routed: bool,
    /// The IPv6 prefix, when linerate has an IPv6 address.
    pub(crate) subnet6: Option<Prefix>,
    /// An IPv6 gateway is configured.
    pub(crate) routed6: bool,
    runtime: Mutex<Option<Runtime>>,
}

impl Stack {
    /// Whether the engine reaches `ip`: on its subnet (IPv4, IPv4-mapped, or
    /// IPv6 with an IPv6 address), or anywhere with that family's gateway.
    pub(crate) fn reaches(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(a) => a.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            IpAddr::V4(a) if !a.is_unspecified() => {
                self.subnet.contains(ip) || (self.routed && !a.is_multicast())
            }
            IpAddr::V6(a) if !a.is_unspecified() && !a.is_loopback() => {
                self.subnet6.is_some_and(|p| p.contains(ip)) || (self.routed6 && !a.is_multicast())
            }
            _ => false,
        }
    }
}

static STACK: OnceLock<Option<Stack>> = OnceLock::new();

/// The stack, started at the first call; `None` if it could not start (said
/// once on stderr; the sockets then stay the kernel's).
pub(crate) fn stack() -> Option<&'static Stack> {
    STACK
        .get_or_init(|| {
            let cfg = config()?;
            match start(cfg) {
                Ok(s) => Some(s),
                Err(e) => {
                    log(format_args!(
                        "cannot start linerate on {}: {e}; this program's sockets stay the kernel's",
                        cfg.nic.tap
                    ));
                    None
                }
            }
        })
        .as_ref()
}

fn start(cfg: &Config) -> Result<Stack, String> {
    if !cfg.nic.create
        && !std::path::Path::new("/sys/class/net")
            .join(&cfg.nic.tap)
            .exists()
    {
        return Err(format!(
            "nic.tap: no interface {} (create it with `ip tuntap add dev {} mode tap`, or set nic.create = true)",
            cfg.nic.tap, cfg.nic.tap
        ));
    }
    let mut tc = TapConfig::new(cfg.nic.tap.clone());
    tc.queues = cfg.nic.queues;
    tc.mtu = cfg.nic.mtu;
    if !cfg.nic.vnet_hdr {
        tc.offloads = TapOffloads::NONE;
    }
    let tap = Tap::open(&tc).map_err(|e| format!("nic.tap: {e}"))?;
    let (addr, len) = cfg.address;
    let mut engine = linerate_toe::Config::new(cfg.nic.mac).with_ipv4(addr, len);
    if let Some(gw) = cfg.gateway {
        // The IPv4 default route through it (the config checked it is on
        // the subnet).
        engine = engine.with_gateway(IpAddr::V4(gw));
    }
    if let Some((a6, l6)) = cfg.address6 {
        engine = engine.with_ipv6(a6, l6);
        if let Some(gw6) = cfg.gateway6 {
            engine = engine.with_gateway(IpAddr::V6(gw6));
        }
    }
    engine.mtu = cfg.nic.mtu;
    let mut rc = RuntimeConfig::new(engine);
    rc.thread_name = "linerate-preload-q".to_owned();
    rc.busy_poll = cfg.nic.busy_poll;
    let rt = Runtime::start(tap, rc).map_err(|e| e.to_string())?;
    tracing::info!(
        tap = %cfg.nic.tap,
        address = %format_args!("{addr}/{len}"),
        address6 = ?cfg.address6,
        queues = cfg.nic.queues,
        mtu = cfg.nic.mtu,
        "linerate started"
    );
    Ok(Stack {
        handle: rt.handle().clone(),
        subnet: Prefix::new(IpAddr::V4(addr), len),
        routed: cfg.gateway.is_some(),
        subnet6: cfg.address6.map(|(a, l)| Prefix::new(IpAddr::V6(a), l)),
        routed6: cfg.gateway6.is_some(),
        runtime: Mutex::new(Some(rt)),
    })
}

/// At exit: the runtime sends what the program wrote and closed (up to a
/// second), as the kernel would after the process is gone.
pub(crate) fn at_exit() {
    // A forked child has the runtime's state but not its threads: nothing
    // to join or flush there.
    if crate::sock::is_forked() {
        return;
    }
    if crate::stats::enabled() && matches!(STACK.get(), Some(Some(_))) {
        // On a thread of its own: exit has already run this thread's
        // thread-local destructors, which the calls to the queue threads
        // (tokio's blocking channels) need.
        let gather = std::thread::spawn(|| {
            let mut open = Vec::new();
            crate::sock::each_stream(|fd, s| open.push(crate::stats::open_line(fd, s)));
            crate::stats::write(&open);
        });
        let _ = gather.join();
    }
    if let Some(Some(s)) = STACK.get() {
        let rt = s
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(rt) = rt {
            let _ = rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `f` to completion on the calling thread (for the few calls that
/// wait on a queue thread's answer: bind, listen).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
