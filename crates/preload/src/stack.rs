//! The configuration read at load time and the linerate runtime, started at
//! the first socket the policy offloads.

use crate::config::{Config, Device, OnError, TapNic, XdpNic};
use crate::policy::Prefix;
use linerate_nic::tap::{TapOffloads, TapSteering};
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
    /// linerate shares the interface's address with the kernel's stack
    /// (`net.share_kernel_address`): its ports are held in the kernel.
    pub(crate) shared: bool,
    /// The AF_XDP steering program (`nic.xdp`), for its counters.
    #[cfg_attr(not(feature = "af-xdp"), allow(dead_code))]
    pub(crate) steering: Option<Steer>,
    runtime: Mutex<Option<Runtime>>,
    /// In a forked child with a queue of its own: its slot and claims,
    /// given back at exit.
    child: Option<(usize, Arc<TapSteering>)>,
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

/// Deepest fork line served: a process this many forks below the one the
/// library loaded in has no runtime of its own (its sockets are the kernel's).
const MAX_GENERATIONS: usize = 16;

/// The runtime of a forked process, by its generation (1: a child, 2: a
/// grandchild...). A process only ever looks at its own generation's entry,
/// which none of its ancestors touched, so what it inherited is unset.
static CHILD: [OnceLock<Option<Stack>>; MAX_GENERATIONS] =
    [const { OnceLock::new() }; MAX_GENERATIONS];

/// The stack, started at the first call; `None` if it could not start (said
/// once on stderr; the sockets then stay the kernel's). In a forked child,
/// the child's own (`nic.children`), or `None`.
pub(crate) fn stack() -> Option<&'static Stack> {
    let cfg = config()?;
    let generation = crate::sock::generation() as usize;
    if generation > 0 {
        return CHILD
            .get(generation - 1)?
            .get_or_init(|| match crate::children::start(cfg) {
                Ok(s) => s,
                Err(e) => {
                    log(format_args!(
                        "this forked process cannot run linerate on a queue of its own: {e}; \
                         its new sockets are the kernel's"
                    ));
                    None
                }
            })
            .as_ref();
    }
    STACK
        .get_or_init(|| match start(cfg) {
            Ok(s) => Some(s),
            Err(e) => {
                log(format_args!(
                    "cannot start linerate on {}: {e}; this program's sockets stay the kernel's",
                    cfg.nic.interface()
                ));
                None
            }
        })
        .as_ref()
}

/// This process's stack if it started one (never starts it).
fn current() -> Option<&'static Stack> {
    match crate::sock::generation() as usize {
        0 => STACK.get()?.as_ref(),
        g => CHILD.get(g - 1)?.get()?.as_ref(),
    }
}

/// The engine and runtime settings from the configuration.
pub(crate) fn runtime_config(cfg: &Config) -> RuntimeConfig {
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
    // The queue threads' own system calls (the NIC's, the kernel sockets
    // holding claimed ports) must not be taken for the program's.
    rc.on_thread_start = Some(crate::ffi::sys::library_thread);
    rc
}

pub(crate) fn stack_of(
    cfg: &Config,
    rt: Runtime,
    steering: Option<Steer>,
    child: Option<(usize, Arc<TapSteering>)>,
) -> Stack {
    let (addr, len) = cfg.address;
    Stack {
        handle: rt.handle().clone(),
        subnet: Prefix::new(IpAddr::V4(addr), len),
        routed: cfg.gateway.is_some(),
        subnet6: cfg.address6.map(|(a, l)| Prefix::new(IpAddr::V6(a), l)),
        routed6: cfg.gateway6.is_some(),
        shared: cfg.share_kernel_address,
        steering,
        runtime: Mutex::new(Some(rt)),
        child,
    }
}

fn start(cfg: &Config) -> Result<Stack, String> {
    let (addr, len) = cfg.address;
    let rc = runtime_config(cfg);
    let (rt, steering) = match &cfg.nic.device {
        Device::Tap(t) => (start_tap(cfg, t, rc)?, None),
        Device::Xdp(x) => start_xdp(cfg, x, rc)?,
    };
    tracing::info!(
        nic = %cfg.nic.interface(),
        address = %format_args!("{addr}/{len}"),
        address6 = ?cfg.address6,
        shared = cfg.share_kernel_address,
        queues = cfg.nic.queues,
        children = cfg.nic.children,
        mtu = cfg.nic.mtu,
        "linerate started"
    );
    Ok(stack_of(cfg, rt, steering, None))
}

fn start_tap(cfg: &Config, t: &TapNic, mut rc: RuntimeConfig) -> Result<Runtime, String> {
    if !t.create
        && !std::path::Path::new("/sys/class/net")
            .join(&t.name)
            .exists()
    {
        let mq = if cfg.nic.children > 0 {
            " multi_queue"
        } else {
            ""
        };
        return Err(format!(
            "nic.tap: no interface {} (create it with `ip tuntap add dev {} mode tap{mq}`, or set nic.create = true)",
            t.name, t.name
        ));
    }
    let mut tc = TapConfig::new(t.name.clone());
    let children = cfg.nic.children;
    // With children: the program's queue, then one kept for each child.
    tc.queues = if children > 0 {
        1 + children
    } else {
        cfg.nic.queues
    };
    tc.mtu = cfg.nic.mtu;
    if !t.vnet_hdr {
        tc.offloads = TapOffloads::NONE;
    }
    let tap = Tap::open(&tc).map_err(|e| {
        if children > 0 && !t.create {
            format!(
                "nic.tap: {e} (with nic.children the TAP must be multi-queue: \
                 `ip tuntap add dev {} mode tap multi_queue`)",
                t.name
            )
        } else {
            format!("nic.tap: {e}")
        }
    })?;
    if children == 0 {
        return Runtime::start(tap, rc).map_err(|e| e.to_string());
    }
    let first = crate::children::keep_queues(t, tap, &mut rc)?;
    let rt = Runtime::start(first, rc).map_err(|e| e.to_string())?;
    crate::children::start_reaper();
    Ok(rt)
}

/// The interface's queues through AF_XDP with linerate's steering program:
/// the frames of linerate's ports and connections (shared address) or of its
/// own address go to linerate, the rest to the kernel's stack.
#[cfg(feature = "af-xdp")]
fn start_xdp(
    cfg: &Config,
    x: &XdpNic,
    mut rc: RuntimeConfig,
) -> Result<(Runtime, Option<Steer>), String> {
    use crate::config::{XdpAttach, XdpBind};
    use linerate_nic::claims::Claims;
    use linerate_nic::xdp::{self, SteerConfig, Xdp, XdpConfig};
    use linerate_nic::{Nic, NicError, Shim, ShimConfig};

    let mut ours = vec![IpAddr::V4(cfg.address.0)];
    ours.extend(cfg.address6.map(|(a, _)| IpAddr::V6(a)));
    let steer = if cfg.share_kernel_address {
        // The kernel answers ARP and ND for the address; every port linerate
        // claims is held on it in the kernel.
        SteerConfig {
            hold: ours,
            ..SteerConfig::default()
        }
    } else {
        SteerConfig {
            addresses: ours,
            ..SteerConfig::default()
        }
    };
    // Frames over one 4 KiB UMEM frame (less its headroom) arrive as chains.
    let frame_size = 4096;
    let xc = XdpConfig {
        first_queue: x.first_queue,
        queues: cfg.nic.queues,
        attach: match x.attach {
            XdpAttach::Auto => xdp::XdpAttach::Auto,
            XdpAttach::Native => xdp::XdpAttach::Native,
            XdpAttach::Generic => xdp::XdpAttach::Generic,
        },
        bind: match x.bind {
            XdpBind::Auto => xdp::XdpBind::Auto,
            XdpBind::Copy => xdp::XdpBind::Copy,
            XdpBind::ZeroCopy => xdp::XdpBind::ZeroCopy,
        },
        frame_size,
        mount_bpffs: true,
        mtu: Some(cfg.nic.mtu),
        multi_buffer: usize::from(cfg.nic.mtu) + linerate_nic::ETH_HEADER_LEN + 8 + 256
            > frame_size as usize,
        steer: Some(steer),
        ..XdpConfig::new(x.interface.clone())
    };
    let name = &x.interface;
    let nic = Xdp::open(&xc).map_err(|e| match &e {
        NicError::PermissionDenied { .. } => format!(
            "nic.xdp = {name:?}: {e}: run as root, or with CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF"
        ),
        NicError::NoQueue { queues, .. } => format!(
            "nic.xdp = {name:?}: {e}: the interface has {queues} queue(s); lower nic.first_queue or nic.queues"
        ),
        NicError::Config(linerate_nic::NicConfigError::ZeroCopy { .. }) => format!(
            "nic.bind: {e}: the driver has no zero-copy AF_XDP; write bind = \"auto\" or \"copy\""
        ),
        _ => format!("nic.xdp = {name:?}: {e}"),
    })?;
    let steering = nic
        .steering()
        .cloned()
        .ok_or_else(|| format!("nic.xdp = {name:?}: no steering program"))?;
    // The engine's MTU is what the sockets carry (a UMEM frame, or a chain).
    rc.engine.mtu = rc.engine.mtu.min(Nic::caps(&nic).mtu);
    tracing::info!(
        interface = %name,
        attach = ?nic.attach_mode(),
        zero_copy = nic.zero_copy(),
        multi_buffer = nic.multi_buffer(),
        "AF_XDP sockets bound"
    );
    if cfg.share_kernel_address {
        // The kernel announces the address and gets the ARP/ND replies:
        // next hops come from its table.
        rc.engine.announcements = 0;
        rc.claims = Some(Arc::clone(&steering) as Arc<dyn Claims>);
        rc.kernel_neighbors = Some(name.clone());
    }
    let shim = Shim::new(nic, ShimConfig::all()).map_err(|e| format!("nic.xdp = {name:?}: {e}"))?;
    let rt = Runtime::start(shim, rc).map_err(|e| e.to_string())?;
    Ok((rt, Some(steering)))
}

#[cfg(not(feature = "af-xdp"))]
fn start_xdp(
    _cfg: &Config,
    x: &XdpNic,
    _rc: RuntimeConfig,
) -> Result<(Runtime, Option<Steer>), String> {
    // The configuration refuses it in this build already.
    Err(format!(
        "nic.xdp = {:?}: this build of linerate-preload has no AF_XDP (build it with --features af-xdp)",
        x.interface
    ))
}

/// The steering program's handle, for its counters.
#[cfg(feature = "af-xdp")]
pub(crate) type Steer = Arc<linerate_nic::xdp::Steering>;
/// No steering without AF_XDP.
#[cfg(not(feature = "af-xdp"))]
pub(crate) type Steer = std::convert::Infallible;

/// At exit: the runtime sends what the program wrote and closed (up to a
/// second), as the kernel would after the process is gone.
pub(crate) fn at_exit() {
    // A forked child has the runtime's state but not its threads: nothing
    // to join or flush there, unless it started one of its own.
    let Some(s) = current() else {
        return;
    };
    if crate::stats::enabled() {
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
    let rt = s
        .runtime
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    if let Some(rt) = rt {
        let _ = rt.shutdown_timeout(Duration::from_secs(1));
    }
    // A child gives its queue back.
    if let Some((slot, steer)) = &s.child {
        crate::children::give_back(*slot, steer);
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
