//! The sockets linerate serves for the program: the fd table, each socket's
//! state, the placeholder's readiness, and the calls' semantics (safe Rust;
//! the C boundary is [`crate::ffi`]).
//!
//! A socket the policy may offload starts as a real kernel socket
//! (`Undecided`): calls that need no decision go to the kernel as they are.
//! The decision comes with what the policy looks at: `listen` (the port),
//! `connect` (the peer), `bind` or the first `sendto` of a UDP socket. A
//! socket decided for the kernel leaves the table; one decided for linerate
//! has its kernel socket replaced, under the same fd number (`dup3`), by the
//! placeholder: one end of an AF_UNIX socketpair whose readiness the library
//! keeps equal to the linerate socket's.

use crate::ffi::sys;
use crate::policy::{self, Action, Kind, Query};
use crate::stack::{self, log};
use libc::c_int;
use linerate_rt::{TcpListener, TcpStream, UdpSocket};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod data;
mod opts;

use data::{advance, recv_once, send_once};

/// An errno value.
pub(crate) type Errno = c_int;
/// A call's result: a value or an errno.
pub(crate) type R<T> = Result<T, Errno>;

/// Largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;

static TABLE: RwLock<Vec<Option<Arc<Core>>>> = RwLock::new(Vec::new());
/// Set at the first socket entered in the table: until then no call looks.
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Set in a child after `fork`: the runtime's threads did not follow.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The process's place in its fork line: bumped in every child. A socket
/// decided for linerate in another generation is served by a runtime that
/// is not in this process.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// The socket behind `fd`, if the table has one.
pub(crate) fn lookup(fd: c_int) -> Option<Arc<Core>> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    let i = usize::try_from(fd).ok()?;
    let t = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    t.get(i).and_then(Clone::clone)
}

fn insert(fd: c_int, core: Arc<Core>) {
    let Ok(i) = usize::try_from(fd) else {
        return;
    };
    let mut t = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    if t.len() <= i {
        t.resize(i + 1, None);
    }
    if let Some(slot) = t.get_mut(i) {
        *slot = Some(core);
    }
    ACTIVE.store(true, Ordering::Release);
}

fn remove(fd: c_int) -> Option<Arc<Core>> {
    let i = usize::try_from(fd).ok()?;
    let mut t = TABLE.write().unwrap_or_else(PoisonError::into_inner);
    t.get_mut(i).and_then(Option::take)
}

/// Calls `f` with each connected stream still open and its first fd (for
/// the statistics at exit).
pub(crate) fn each_stream(mut f: impl FnMut(c_int, &TcpStream)) {
    let t = TABLE.read().unwrap_or_else(PoisonError::into_inner);
    let mut seen: Vec<*const Core> = Vec::new();
    for core in t.iter().flatten() {
        if seen.contains(&Arc::as_ptr(core)) {
            continue;
        }
        seen.push(Arc::as_ptr(core));
        // A forked child's statistics are of its own runtime's streams.
        if core.inherited() {
            continue;
        }
        let g = lock(&core.st);
        if let (State::Stream { s, .. }, Some(&fd)) = (&g.state, g.fds.first()) {
            f(fd, s);
        }
    }
}

/// Called in the child after `fork` (async-signal-safe: atomics only).
pub(crate) fn forked() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    FORKED.store(true, Ordering::Release);
}

/// How many forks separate this process from the one the library loaded in (0: that one).
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire)
}

/// Whether this process is a child that inherited the library's state
/// without its runtime's threads.
pub(crate) fn is_forked() -> bool {
    FORKED.load(Ordering::Acquire)
}

/// Options a linerate socket keeps (those the engine has no knob for yet are
/// kept and reported back, as the kernel would).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Opts {
    pub(crate) reuseaddr: bool,
    pub(crate) reuseport: bool,
    pub(crate) keepalive: bool,
    pub(crate) nodelay: bool,
    pub(crate) rcvbuf: c_int,
    pub(crate) sndbuf: c_int,
    pub(crate) rcvtimeo: Option<Duration>,
    pub(crate) sndtimeo: Option<Duration>,
    pub(crate) linger: Option<c_int>,
    pub(crate) v6only: bool,
    /// TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT as set (`None`: Linux's
    /// defaults, 7200 s, 75 s, 9).
    pub(crate) keepidle: Option<c_int>,
    pub(crate) keepintvl: Option<c_int>,
    pub(crate) keepcnt: Option<c_int>,
}

/// An option's value, for `getsockopt`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OptVal {
    /// An `int`.
    Int(c_int),
    /// A `struct timeval`.
    Time(Option<Duration>),
    /// A `struct linger`.
    Linger(Option<c_int>),
    /// A string (TCP_CONGESTION).
    Str(&'static str),
    /// A `struct tcp_info`'s figures.
    TcpInfo(opts::TcpInfoVals),
}

/// An option to set, decoded by the C boundary.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OptSet {
    /// An `int` value (`optlen >= 4`).
    Int(c_int),
    /// A `struct timeval`.
    Time(Option<Duration>),
    /// A `struct linger`: on, seconds.
    Linger(bool, c_int),
    /// Too short for what the option takes.
    Short,
}

type Connecting = Pin<Box<dyn Future<Output = io::Result<TcpStream>> + Send>>;

enum State {
    /// A kernel socket the policy has not decided on yet.
    Undecided {
        /// Bound to linerate's own address (the kernel was not asked).
        ours: Option<SocketAddr>,
        /// The port the kernel bound, if it was asked.
        port: Option<u16>,
    },
    Connecting(Connecting),
    Stream {
        s: TcpStream,
        /// Bytes read for MSG_PEEK, returned first.
        peek: Vec<u8>,
        rd_shut: bool,
        wr_shut: bool,
    },
    Listener {
        l: TcpListener,
        ready: VecDeque<(TcpStream, SocketAddr)>,
        err: Option<Errno>,
        /// The peers' families it takes: the engine's listener takes both,
        /// an AF_INET socket IPv4 only, an IPV6_V6ONLY one IPv6 only.
        v4: bool,
        v6: bool,
    },
    Udp {
        s: UdpSocket,
        peer: Option<SocketAddr>,
        /// A datagram read for MSG_PEEK, returned first.
        peek: Option<(Vec<u8>, SocketAddr)>,
    },
    /// A connect that failed; the socket is unconnected.
    Failed,
    Closed,
}

struct St {
    state: State,
    /// The program's fds for this socket (more than one after `dup`).
    fds: Vec<c_int>,
    /// The library's end of the placeholder socketpair.
    b: Option<OwnedFd>,
    /// Readable, writable: what the placeholder shows.
    shown: (bool, bool),
    nonblock: bool,
    cloexec: bool,
    so_error: Errno,
    opts: Opts,
    /// A `connect` returned 0 for the connection (or it was accepted): the
    /// next `connect` is `EISCONN`. Until then one more `connect` after a
    /// non-blocking one completed returns 0, as Linux's does.
    confirmed: bool,
}

/// One socket, shared by its fds.
pub(crate) struct Core {
    kind: Kind,
    domain: c_int,
    /// Decided for linerate (the data calls are ours).
    linerate: AtomicBool,
    /// The [`GENERATION`] of the process whose runtime serves it (set when
    /// it is decided for linerate).
    born: AtomicU32,
    /// Bumped at every wake; blocked callers wait on it (futex).
    seq: AtomicU32,
    /// A wake found the state locked: its holder syncs again.
    pending: AtomicBool,
    waker: Waker,
    st: Mutex<St>,
}

struct Notify(Weak<Core>);

impl Wake for Notify {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(c) = self.0.upgrade() {
            c.wake();
        }
    }
}

fn lock(m: &Mutex<St>) -> MutexGuard<'_, St> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// errno for an `io::Error` from linerate-rt.
pub(crate) fn errno_of(e: &io::Error) -> Errno {
    use io::ErrorKind as K;
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        K::WouldBlock => libc::EAGAIN,
        K::ConnectionRefused => libc::ECONNREFUSED,
        K::ConnectionReset => libc::ECONNRESET,
        K::ConnectionAborted => libc::ECONNABORTED,
        K::TimedOut => libc::ETIMEDOUT,
        K::BrokenPipe => libc::EPIPE,
        K::NotConnected => libc::ENOTCONN,
        K::AddrInUse => libc::EADDRINUSE,
        K::AddrNotAvailable => libc::EADDRNOTAVAIL,
        K::InvalidInput => libc::EINVAL,
        K::HostUnreachable => libc::EHOSTUNREACH,
        K::NetworkUnreachable => libc::ENETUNREACH,
        K::NetworkDown => libc::ENETDOWN,
        K::FileTooLarge => libc::EMSGSIZE,
        K::OutOfMemory => libc::ENOMEM,
        K::PermissionDenied => libc::EACCES,
        _ => libc::EIO,
    }
}

/// The transport of `socket(domain, ty, proto)` if linerate could serve it.
pub(crate) fn kind_of(domain: c_int, ty: c_int, proto: c_int) -> Option<Kind> {
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return None;
    }
    match (ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC), proto) {
        (libc::SOCK_STREAM, 0 | libc::IPPROTO_TCP) => Some(Kind::Tcp),
        (libc::SOCK_DGRAM, 0 | libc::IPPROTO_UDP) => Some(Kind::Udp),
        _ => None,
    }
}

/// After a kernel `socket()` returned `fd`: watches it if the policy could
/// offload it.
pub(crate) fn on_socket(fd: c_int, domain: c_int, ty: c_int, proto: c_int) {
    let Some(kind) = kind_of(domain, ty, proto) else {
        return;
    };
    // A forked child has no runtime threads: its new sockets are the
    // kernel's, unless the configuration keeps a queue for it.
    if is_forked() && !crate::children::enabled() {
        return;
    }
    let Some(cfg) = stack::config() else {
        return;
    };
    if !policy::may_offload(&cfg.rules, cfg.default, kind) {
        return;
    }
    let core = Core::new(
        kind,
        domain,
        State::Undecided {
            ours: None,
            port: None,
        },
        fd,
    );
    insert(fd, core);
}

/// Busy polling (`nic.busy_poll_us`): watches `seq` move from `seen` for
/// at most the configured time (and `left`), spinning instead of sleeping
/// on the futex, so that an answer the queue thread hands over soon is
/// taken without a wake-up. True if it moved.
fn busy_wait(seq: &AtomicU32, seen: u32, left: Option<Duration>) -> bool {
    let Some(budget) = stack::config().map(|c| c.nic.busy_poll) else {
        return false;
    };
    if budget.is_zero() {
        return false;
    }
    let budget = left.map_or(budget, |l| l.min(budget));
    let start = Instant::now();
    while start.elapsed() < budget {
        for _ in 0..64 {
            if seq.load(Ordering::Acquire) != seen {
                return true;
            }
            std::hint::spin_loop();
        }
    }
    false
}

/// Maps `a` into `domain`'s family: IPv4 as IPv4-mapped on an AF_INET6 socket.
fn in_domain(domain: c_int, a: SocketAddr) -> SocketAddr {
    match (domain, a) {
        (libc::AF_INET6, SocketAddr::V4(v4)) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        _ => a,
    }
}

/// An IPv4-mapped address as IPv4 (linerate's engine is IPv4 here).
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::V4(SocketAddrV4::new(v4, v6.port())),
            None => a,
        },
        v4 => v4,
    }
}

fn unspecified(domain: c_int, port: u16) -> SocketAddr {
    if domain == libc::AF_INET6 {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port)
    } else {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)
    }
}

/// Logs an option linerate does not know, once per option.
fn unknown_option(level: c_int, name: c_int) {
    static SEEN: Mutex<Vec<(c_int, c_int)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    if !seen.contains(&(level, name)) {
        seen.push((level, name));
        log(format_args!(
            "socket option level {level} name {name} is not supported on linerate sockets: ENOPROTOOPT"
        ));
    }
}

impl Core {
    fn new(kind: Kind, domain: c_int, state: State, fd: c_int) -> Arc<Core> {
        Arc::new_cyclic(|me| Core {
            kind,
            domain,
            linerate: AtomicBool::new(!matches!(state, State::Undecided { .. })),
            born: AtomicU32::new(generation()),
            seq: AtomicU32::new(0),
            pending: AtomicBool::new(false),
            waker: Waker::from(Arc::new(Notify(me.clone()))),
            st: Mutex::new(St {
                state,
                fds: vec![fd],
                b: None,
                shown: (false, true),
                nonblock: false,
                cloexec: false,
                so_error: 0,
                opts: Opts::default(),
                confirmed: false,
            }),
        })
    }

    /// Whether the socket is UDP.
    pub(crate) fn is_udp(&self) -> bool {
        self.kind == Kind::Udp
    }

    /// Whether the socket is linerate's (its data calls are served here).
    pub(crate) fn is_linerate(&self) -> bool {
        self.linerate.load(Ordering::Acquire)
    }

    /// A queue thread (or a connect's answer) changed the socket.
    fn wake(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        sys::futex_wake(&self.seq);
        self.pending.store(true, Ordering::SeqCst);
        self.drain_pending();
    }

    /// Syncs the placeholder for wakes that found the state locked, unless
    /// another thread holds it now (it does so when it lets go).
    fn drain_pending(&self) {
        while self.pending.load(Ordering::SeqCst) {
            let mut g = match self.st.try_lock() {
                Ok(g) => g,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => return,
            };
            self.pending.store(false, Ordering::SeqCst);
            self.sync(&mut g, Sides::BOTH);
        }
    }

    /// Lets go of the state after syncing the placeholder with it.
    fn finish(&self, g: MutexGuard<'_, St>) {
        self.finish_sides(g, Sides::BOTH);
    }

    /// [`Core::finish`] after a call that changed only `sides`: a side ready
    /// at the last sync stays ready until the program consumes it, and one
    /// that was not has the socket's waker, so only the sides the call
    /// touched need a look.
    fn finish_sides(&self, mut g: MutexGuard<'_, St>, sides: Sides) {
        self.sync(&mut g, sides);
        drop(g);
        self.drain_pending();
    }

    /// Brings the state forward (a connect's answer, accepted connections)
    /// and makes the placeholder show its readiness, leaving the socket's
    /// waker wherever a side is not ready.
    fn sync(&self, st: &mut St, sides: Sides) {
        if self.inherited() {
            return;
        }
        let mut cx = Context::from_waker(&self.waker);
        let sides = if advance(st, &mut cx) {
            Sides::BOTH
        } else {
            sides
        };
        let want = match &mut st.state {
            State::Undecided { .. } | State::Closed => return,
            State::Connecting(_) => (false, false),
            State::Failed => (true, true),
            State::Stream {
                s,
                peek,
                rd_shut,
                wr_shut,
            } => (
                if sides.read {
                    !peek.is_empty() || *rd_shut || s.poll_read_ready(&mut cx).is_ready()
                } else {
                    st.shown.0
                },
                if sides.write {
                    *wr_shut || s.poll_write_ready(&mut cx).is_ready()
                } else {
                    st.shown.1
                },
            ),
            State::Listener { ready, err, .. } => (!ready.is_empty() || err.is_some(), false),
            State::Udp { s, peek, .. } => (
                if sides.read {
                    peek.is_some() || s.poll_recv_ready(&mut cx).is_ready()
                } else {
                    st.shown.0
                },
                if sides.write {
                    s.poll_send_ready(&mut cx).is_ready()
                } else {
                    st.shown.1
                },
            ),
        };
        let want = (want.0 || st.so_error != 0, want.1 || st.so_error != 0);
        if want != st.shown
            && let (Some(&fd), Some(b)) = (st.fds.first(), st.b.as_ref())
        {
            sys::show(fd, b, st.shown, want);
            st.shown = want;
        }
    }

    /// Runs `op` until it is ready: at once for a non-blocking call
    /// (`EAGAIN` if not ready), else sleeping between the socket's wakes,
    /// `EAGAIN` after `timeout`, `EINTR` if a signal arrives.
    fn wait<T>(
        &self,
        sides: Sides,
        nonblock: bool,
        timeout: Option<Duration>,
        mut op: impl FnMut(&mut St, &mut Context<'_>) -> Poll<R<T>>,
    ) -> R<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.inherited() {
                return Err(forked_errno());
            }
            let g0 = self.seq.load(Ordering::Acquire);
            let mut g = lock(&self.st);
            let mut cx = Context::from_waker(&self.waker);
            let moved = advance(&mut g, &mut cx);
            let r = op(&mut g, &mut cx);
            self.finish_sides(g, if moved { Sides::BOTH } else { sides });
            if let Poll::Ready(r) = r {
                return r;
            }
            if nonblock {
                return Err(libc::EAGAIN);
            }
            let left = match deadline {
                None => None,
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return Err(libc::EAGAIN);
                    }
                    Some(d - now)
                }
            };
            // A handler ran. SA_RESTART is the kernel's business here: a
            // futex wait without a timeout fails with ERESTARTSYS, which the
            // kernel restarts for a handler with SA_RESTART and turns into
            // EINTR for one without; a wait with a timeout (SO_RCVTIMEO,
            // SO_SNDTIMEO) is never restarted. That is signal(7)'s rule for
            // the socket calls, so EINTR reaching here is the program's.
            if busy_wait(&self.seq, g0, left) {
                continue;
            }
            if sys::futex_wait(&self.seq, g0, left) == Err(libc::EINTR) {
                return Err(libc::EINTR);
            }
        }
    }

    fn flags(&self) -> (bool, Opts) {
        let g = lock(&self.st);
        (g.nonblock, g.opts)
    }

    /// Leaves the socket to the kernel: out of the table, calls to libc.
    fn unwatch(&self, fd: c_int) {
        remove(fd);
        lock(&self.st).state = State::Closed;
    }

    /// Replaces the kernel socket under `fd` by a placeholder, keeping the
    /// flags and options the program set on it.
    fn take_over(&self, st: &mut St, fd: c_int) -> R<()> {
        let (nonblock, cloexec, opts) = sys::kernel_state(fd);
        let b = sys::placeholder_over(fd)?;
        st.b = Some(b);
        st.shown = (false, true);
        st.nonblock = nonblock;
        st.cloexec = cloexec;
        st.opts = opts;
        self.born.store(generation(), Ordering::Release);
        self.linerate.store(true, Ordering::Release);
        Ok(())
    }

    /// A linerate socket inherited through `fork`: its runtime's threads
    /// are in an ancestor.
    fn inherited(&self) -> bool {
        FORKED.load(Ordering::Relaxed) && self.born.load(Ordering::Relaxed) != generation()
    }

    /// With the kernel's address shared (`net.share_kernel_address`), a
    /// socket the program bound to the wildcard address is a kernel socket
    /// bound to `port`, which keeps linerate from holding the port in the
    /// kernel (its claim would find it in use): the placeholder replaces it
    /// (closing it) before linerate claims the port, and the socket counts as
    /// bound to linerate's address from then on, so that a claim that fails
    /// leaves it bound as the program asked. `Ok(true)`: replaced.
    fn release_kernel_port(
        &self,
        st: &mut St,
        fd: c_int,
        stack: &stack::Stack,
        cfg: &crate::config::Config,
        port: u16,
    ) -> R<bool> {
        if !stack.shared {
            return Ok(false);
        }
        let State::Undecided { ours, port: held } = &st.state else {
            return Ok(false);
        };
        if ours.is_some() || held.is_none() {
            return Ok(false);
        }
        self.take_over(st, fd)?;
        let me = SocketAddr::new(IpAddr::V4(cfg.address.0), port);
        st.state = State::Undecided {
            ours: Some(in_domain(self.domain, me)),
            port: None,
        };
        Ok(true)
    }

    // ---- bind, listen, connect, accept ----

    /// `bind`; `None`: the kernel's (call it).
    pub(crate) fn bind(&self, fd: c_int, addr: SocketAddr) -> Option<R<()>> {
        let cfg = stack::config()?;
        let mut g = lock(&self.st);
        let State::Undecided { ours, port } = &mut g.state else {
            return Some(Err(libc::EINVAL));
        };
        if ours.is_some() || port.is_some() {
            return Some(Err(libc::EINVAL));
        }
        let ip = unmapped(addr).ip();
        let mine = ip == cfg.address.0 || cfg.address6.is_some_and(|(a, _)| ip == a);
        if !mine && !ip.is_unspecified() {
            drop(g);
            self.unwatch(fd);
            return None;
        }
        if mine {
            *ours = Some(addr);
        } else {
            if let Err(e) = sys::kernel_bind(fd, addr) {
                return Some(Err(e));
            }
            *port = Some(sys::kernel_port(fd).unwrap_or(addr.port()));
        }
        let local = ours.map(|a| a.port()).or(*port);
        if self.kind == Kind::Udp {
            // A UDP socket is decided when bound: it may never name a peer.
            let q = Query {
                kind: Kind::Udp,
                local_port: local,
                remote: None,
            };
            return Some(self.decide_udp(g, fd, &q, None).map(|_| ()));
        }
        Some(Ok(()))
    }

    /// Decides a UDP socket; linerate binds it. `Ok(false)`: left to the
    /// kernel (and unwatched); the caller then repeats its call on libc.
    fn decide_udp(
        &self,
        mut g: MutexGuard<'_, St>,
        fd: c_int,
        q: &Query,
        peer: Option<SocketAddr>,
    ) -> R<bool> {
        let Some(cfg) = stack::config() else {
            return Ok(false);
        };
        let State::Undecided { ours, port } = &g.state else {
            return Ok(true);
        };
        let bind_port = ours.map(|a| a.port()).or(*port).unwrap_or(0);
        let reach = q
            .remote
            .is_none_or(|(ip, _)| stack::stack().is_some_and(|s| s.reaches(ip)));
        if !reach || policy::decide(&cfg.rules, cfg.default, q) == Action::Kernel {
            let was_ours = ours.is_some();
            drop(g);
            self.unwatch(fd);
            // Bound to linerate's address only: the kernel cannot have it.
            return if was_ours {
                Err(libc::EADDRNOTAVAIL)
            } else {
                Ok(false)
            };
        }
        let Some(stack) = stack::stack() else {
            drop(g);
            self.unwatch(fd);
            return Ok(false);
        };
        // The engine binds a UDP port per family: IPv6 when the socket's
        // own address or its first peer is IPv6 (not IPv4-mapped), IPv4
        // otherwise (an AF_INET6 socket then talks to IPv4-mapped peers).
        let native6 = |a: SocketAddr| matches!(unmapped(a), SocketAddr::V6(_));
        let v6 = ours.is_some_and(native6)
            || q.remote
                .is_some_and(|(ip, port)| native6(SocketAddr::new(ip, port)))
            || (ours.is_none()
                && q.remote.is_none()
                && self.domain == libc::AF_INET6
                && g.opts.v6only);
        let local = if v6 {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), bind_port)
        } else {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), bind_port)
        };
        let early = self.release_kernel_port(&mut g, fd, stack, cfg, bind_port)?;
        let s = stack::block_on(UdpSocket::bind(&stack.handle, local)).map_err(|e| errno_of(&e))?;
        if !early {
            self.take_over(&mut g, fd)?;
        }
        g.state = State::Udp {
            s,
            peer,
            peek: None,
        };
        self.finish(g);
        Ok(true)
    }

    /// `listen`; `None`: the kernel's.
    pub(crate) fn listen(&self, fd: c_int) -> Option<R<()>> {
        let cfg = stack::config()?;
        let mut g = lock(&self.st);
        match &g.state {
            State::Listener { .. } => return Some(Ok(())),
            State::Undecided { .. } if self.kind == Kind::Tcp => {}
            State::Undecided { .. } => {
                drop(g);
                self.unwatch(fd);
                return None;
            }
            _ => return Some(Err(libc::EINVAL)),
        }
        let State::Undecided { ours, port } = &mut g.state else {
            return Some(Err(libc::EINVAL));
        };
        let local = ours.map(|a| a.port()).or(*port);
        let q = Query {
            kind: Kind::Tcp,
            local_port: local,
            remote: None,
        };
        let was_ours = ours.is_some();
        if policy::decide(&cfg.rules, cfg.default, &q) == Action::Kernel {
            drop(g);
            self.unwatch(fd);
            return if was_ours {
                Some(Err(libc::EADDRNOTAVAIL))
            } else {
                None
            };
        }
        let Some(stack) = stack::stack() else {
            drop(g);
            self.unwatch(fd);
            return None;
        };
        let port = match local {
            Some(p) if p != 0 => p,
            _ => {
                // The kernel picks the port (and keeps it reserved for us).
                if let Err(e) = sys::kernel_bind(fd, unspecified(self.domain, 0)) {
                    return Some(Err(e));
                }
                match sys::kernel_port(fd) {
                    Some(p) => {
                        *port = Some(p);
                        p
                    }
                    None => return Some(Err(libc::EADDRNOTAVAIL)),
                }
            }
        };
        // On an address shared with the kernel, the kernel socket bound to
        // the port would keep linerate from holding it there: it goes first.
        let early = self.release_kernel_port(&mut g, fd, stack, cfg, port);
        if let Err(e) = early {
            return Some(Err(e));
        }
        let l = match stack::block_on(TcpListener::bind(&stack.handle, port)) {
            Ok(l) => l,
            Err(e) => return Some(Err(errno_of(&e))),
        };
        if early == Ok(false)
            && let Err(e) = self.take_over(&mut g, fd)
        {
            return Some(Err(e));
        }
        g.shown = (false, true);
        let v6only = g.opts.v6only;
        g.state = State::Listener {
            l,
            ready: VecDeque::new(),
            err: None,
            v4: !(self.domain == libc::AF_INET6 && v6only),
            v6: self.domain == libc::AF_INET6,
        };
        self.finish(g);
        Some(Ok(()))
    }

    /// `connect`; `None`: the kernel's.
    pub(crate) fn connect(&self, fd: c_int, addr: Option<SocketAddr>) -> Option<R<()>> {
        let cfg = stack::config()?;
        let mut g = lock(&self.st);
        // This call starts the connection (Linux's non-blocking connect
        // then says EINPROGRESS, whatever the first look finds).
        let mut begun = false;
        if let State::Undecided { ours, port } = &g.state {
            let addr = unmapped(addr?);
            let q = Query {
                kind: self.kind,
                local_port: ours.map(|a| a.port()).or(*port),
                remote: Some((addr.ip(), addr.port())),
            };
            if self.kind == Kind::Udp {
                return match self.decide_udp(g, fd, &q, Some(addr)) {
                    Ok(true) => Some(Ok(())),
                    Ok(false) => None,
                    Err(e) => Some(Err(e)),
                };
            }
            let was_ours = ours.is_some();
            let reach = stack::stack().is_some_and(|s| s.reaches(addr.ip()));
            if !reach || policy::decide(&cfg.rules, cfg.default, &q) == Action::Kernel {
                drop(g);
                self.unwatch(fd);
                return if was_ours {
                    Some(Err(libc::EADDRNOTAVAIL))
                } else {
                    None
                };
            }
            let stack = stack::stack()?;
            if let Err(e) = self.take_over(&mut g, fd) {
                return Some(Err(e));
            }
            let h = stack.handle.clone();
            g.state =
                State::Connecting(Box::pin(async move { TcpStream::connect(&h, addr).await }));
            g.shown = (false, true);
            begun = true;
        }
        let confirmed = g.confirmed;
        match &mut g.state {
            State::Udp { peer, .. } => {
                *peer = addr.map(unmapped);
                return Some(Ok(()));
            }
            State::Stream { .. } if confirmed => return Some(Err(libc::EISCONN)),
            State::Stream { .. } => {
                g.confirmed = true;
                return Some(Ok(()));
            }
            State::Listener { .. } => return Some(Err(libc::EINVAL)),
            State::Connecting(_) => {}
            State::Failed => {
                let e = std::mem::take(&mut g.so_error);
                return Some(Err(if e == 0 { libc::ECONNABORTED } else { e }));
            }
            State::Undecided { .. } | State::Closed => return Some(Err(libc::EBADF)),
        }
        // First look, and the answer to a second connect of a non-blocking one.
        let (nonblock, opts) = (g.nonblock, g.opts);
        let started = g.shown == (false, true);
        drop(g);
        // A non-blocking connect that starts the connection only sets it
        // going (the look polls the connect once): it answers EINPROGRESS
        // even if the peer's answer is already in, which the next connect
        // or SO_ERROR then reports, as Linux's does.
        let first = nonblock && begun;
        let r = self.wait(Sides::BOTH, nonblock, opts.sndtimeo, |st, _| {
            match &st.state {
                State::Connecting(_) => Poll::Pending,
                _ if first => Poll::Ready(Err(libc::EAGAIN)),
                State::Stream { .. } => {
                    st.confirmed = true;
                    Poll::Ready(Ok(()))
                }
                _ => {
                    let e = std::mem::take(&mut st.so_error);
                    Poll::Ready(Err(if e == 0 { libc::ECONNABORTED } else { e }))
                }
            }
        });
        Some(match r {
            Err(libc::EAGAIN) if nonblock && started => Err(libc::EINPROGRESS),
            Err(libc::EAGAIN) if nonblock => Err(libc::EALREADY),
            Err(libc::EAGAIN) => Err(libc::EINPROGRESS),
            r => r,
        })
    }

    /// `accept4`: the new socket's fd and its peer. `None`: the kernel's.
    pub(crate) fn accept(&self, flags: c_int) -> Option<R<(c_int, SocketAddr)>> {
        if !self.is_linerate() {
            return None;
        }
        let (nonblock, opts) = self.flags();
        let r = self.wait(
            Sides::READ,
            nonblock,
            opts.rcvtimeo,
            |st, _| match &mut st.state {
                State::Listener { ready, err, .. } => match ready.pop_front() {
                    Some(c) => Poll::Ready(Ok(c)),
                    None => match err {
                        Some(e) => Poll::Ready(Err(*e)),
                        None => Poll::Pending,
                    },
                },
                _ => Poll::Ready(Err(libc::EINVAL)),
            },
        );
        let (s, peer) = match r {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let (a, b) = match sys::placeholder_new() {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let core = Core::new(
            Kind::Tcp,
            self.domain,
            State::Stream {
                s,
                peek: Vec::new(),
                rd_shut: false,
                wr_shut: false,
            },
            a,
        );
        {
            let mut g = lock(&core.st);
            g.b = Some(b);
            g.confirmed = true;
            g.nonblock = flags & libc::SOCK_NONBLOCK != 0;
            g.cloexec = flags & libc::SOCK_CLOEXEC != 0;
            g.opts = Opts {
                nodelay: opts.nodelay,
                keepalive: opts.keepalive,
                keepidle: opts.keepidle,
                keepintvl: opts.keepintvl,
                keepcnt: opts.keepcnt,
                ..Opts::default()
            };
            if let State::Stream { s, .. } = &g.state {
                opts::apply_stream_opts(s, &g.opts, true);
            }
            insert(a, Arc::clone(&core));
            core.finish(g);
        }
        Some(Ok((a, in_domain(self.domain, peer))))
    }

    // ---- data ----

    /// `recv` family into `buf`: bytes, sender (UDP), the datagram's full
    /// length (more than the bytes when it was cut; the bytes on a stream).
    /// `flags`: MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL.
    pub(crate) fn recv(
        &self,
        buf: &mut [u8],
        flags: c_int,
    ) -> R<(usize, Option<SocketAddr>, usize)> {
        let (nonblock, opts) = self.flags();
        let nonblock = nonblock || flags & libc::MSG_DONTWAIT != 0;
        let peek = flags & libc::MSG_PEEK != 0;
        let waitall = flags & libc::MSG_WAITALL != 0 && !peek;
        let domain = self.domain;
        let mut done = 0usize;
        loop {
            let r = self.wait(
                Sides::READ,
                nonblock && done == 0,
                opts.rcvtimeo,
                |st, cx| {
                    let rest = buf.get_mut(done..).unwrap_or_default();
                    recv_once(st, cx, rest, peek, domain)
                },
            );
            match r {
                Ok((n, from, full)) => {
                    done += n;
                    if !waitall || n == 0 || done >= buf.len() || from.is_some() {
                        return Ok((done, from, full.max(done)));
                    }
                }
                Err(_) if done > 0 => return Ok((done, None, done)),
                Err(e) => return Err(e),
            }
        }
    }

    /// `send` family: bytes taken. A blocking stream takes them all (or
    /// fails); `to` is the datagram's destination.
    pub(crate) fn send(&self, data: &[u8], flags: c_int, to: Option<SocketAddr>) -> R<usize> {
        let (nonblock, opts) = self.flags();
        let nonblock = nonblock || flags & libc::MSG_DONTWAIT != 0;
        let mut done = 0usize;
        let r = loop {
            let r = self.wait(
                Sides::WRITE,
                nonblock && done == 0,
                opts.sndtimeo,
                |st, cx| {
                    let rest = data.get(done..).unwrap_or_default();
                    send_once(st, cx, rest, to)
                },
            );
            match r {
                Ok(n) => {
                    done += n;
                    if nonblock || n == 0 || done >= data.len() || self.kind == Kind::Udp {
                        break Ok(done);
                    }
                }
                Err(_) if done > 0 => break Ok(done),
                Err(e) => break Err(e),
            }
        };
        if r == Err(libc::EPIPE) && flags & libc::MSG_NOSIGNAL == 0 {
            sys::raise_sigpipe();
        }
        r
    }

    /// `sendto` on a socket still undecided (UDP): decides it with the
    /// destination. `false`: the kernel's (call libc).
    pub(crate) fn decide_by_sendto(&self, fd: c_int, to: SocketAddr) -> R<bool> {
        let g = lock(&self.st);
        let State::Undecided { ours, port } = &g.state else {
            return Ok(true);
        };
        if self.kind != Kind::Udp {
            drop(g);
            self.unwatch(fd);
            return Ok(false);
        }
        let to = unmapped(to);
        let q = Query {
            kind: Kind::Udp,
            local_port: ours.map(|a| a.port()).or(*port),
            remote: Some((to.ip(), to.port())),
        };
        self.decide_udp(g, fd, &q, None)
    }

    // ---- the rest ----

    /// `shutdown`. `None`: the kernel's.
    pub(crate) fn shutdown(&self, how: c_int) -> Option<R<()>> {
        if !self.is_linerate() {
            return None;
        }
        let mut g = lock(&self.st);
        let r = match &mut g.state {
            State::Stream {
                s,
                rd_shut,
                wr_shut,
                ..
            } => {
                if !(libc::SHUT_RD..=libc::SHUT_RDWR).contains(&how) {
                    Err(libc::EINVAL)
                } else {
                    if how != libc::SHUT_WR {
                        *rd_shut = true;
                    }
                    if how != libc::SHUT_RD && !*wr_shut {
                        *wr_shut = true;
                        let mut cx = Context::from_waker(&self.waker);
                        let _ = Pin::new(s).poll_shutdown(&mut cx);
                    }
                    Ok(())
                }
            }
            _ => Err(libc::ENOTCONN),
        };
        self.finish(g);
        Some(r)
    }

    /// The program closes `fd`; the socket goes with its last fd. The caller
    /// then closes `fd` in the kernel.
    pub(crate) fn close(fd: c_int) {
        let Some(core) = remove(fd) else {
            return;
        };
        let mut g = lock(&core.st);
        g.fds.retain(|&f| f != fd);
        let mut linger = None;
        if g.fds.is_empty() {
            if let State::Stream { s, .. } = &g.state {
                crate::stats::closing(fd, s);
                match g.opts.linger {
                    // SO_LINGER on with zero seconds: the close resets.
                    Some(0) => s.set_linger(Some(Duration::ZERO)),
                    Some(secs) => {
                        let secs = u64::try_from(secs).unwrap_or(0);
                        linger = Some((s.queue(), s.engine_handle(), Duration::from_secs(secs)));
                    }
                    None => {}
                }
            }
            g.state = State::Closed;
            g.b = None;
        }
        drop(g);
        if let Some((queue, h, time)) = linger {
            opts::linger_close(queue, h, time);
        }
    }

    /// Another fd (`dup`) for the socket.
    pub(crate) fn dup_to(self: &Arc<Self>, new: c_int) {
        let mut g = lock(&self.st);
        g.fds.push(new);
        insert(new, Arc::clone(self));
    }

    /// `getsockname`. `None`: the kernel's.
    pub(crate) fn sockname(&self) -> Option<R<SocketAddr>> {
        let g = lock(&self.st);
        let a = match &g.state {
            State::Undecided { ours, .. } => return ours.map(Ok),
            State::Stream { s, .. } => s.local_addr(),
            State::Listener { l, .. } => unspecified(self.domain, l.port()),
            State::Udp { s, .. } => s.local_addr(),
            State::Connecting(_) | State::Failed => unspecified(self.domain, 0),
            State::Closed => return Some(Err(libc::EBADF)),
        };
        Some(Ok(in_domain(self.domain, a)))
    }

    /// `getpeername`. `None`: the kernel's.
    pub(crate) fn peername(&self) -> Option<R<SocketAddr>> {
        if !self.is_linerate() {
            return None;
        }
        let g = lock(&self.st);
        Some(match &g.state {
            State::Stream { s, .. } => Ok(in_domain(self.domain, s.peer_addr())),
            State::Udp { peer: Some(p), .. } => Ok(in_domain(self.domain, *p)),
            _ => Err(libc::ENOTCONN),
        })
    }

    /// `fcntl` commands on file status and descriptor flags. `None`: the
    /// kernel's (on the placeholder, or the kernel socket).
    pub(crate) fn fcntl(&self, cmd: c_int, arg: c_int) -> Option<R<c_int>> {
        if !self.is_linerate() {
            return None;
        }
        let mut g = lock(&self.st);
        match cmd {
            libc::F_GETFL => Some(Ok(
                libc::O_RDWR | if g.nonblock { libc::O_NONBLOCK } else { 0 }
            )),
            libc::F_SETFL => {
                g.nonblock = arg & libc::O_NONBLOCK != 0;
                Some(Ok(0))
            }
            libc::F_GETFD => Some(Ok(if g.cloexec { libc::FD_CLOEXEC } else { 0 })),
            libc::F_SETFD => {
                g.cloexec = arg & libc::FD_CLOEXEC != 0;
                Some(Ok(0))
            }
            _ => None,
        }
    }

    /// `ioctl(FIONBIO)`.
    pub(crate) fn set_nonblock(&self, on: bool) -> Option<R<()>> {
        if !self.is_linerate() {
            return None;
        }
        lock(&self.st).nonblock = on;
        Some(Ok(()))
    }

    /// `ioctl(FIONREAD)`: bytes (TCP) or the next datagram's length (UDP).
    pub(crate) fn readable_bytes(&self) -> Option<R<c_int>> {
        if !self.is_linerate() {
            return None;
        }
        let g = lock(&self.st);
        let n = match &g.state {
            State::Stream { s, peek, .. } => peek.len() + s.readable_bytes(),
            State::Udp { s, peek, .. } => match peek {
                Some((d, _)) => d.len(),
                None => s.next_datagram_len().unwrap_or(0),
            },
            State::Listener { .. } => return Some(Err(libc::EINVAL)),
            _ => 0,
        };
        Some(Ok(c_int::try_from(n).unwrap_or(c_int::MAX)))
    }
}

/// Which readiness a sync looks at.
#[derive(Debug, Clone, Copy)]
struct Sides {
    read: bool,
    write: bool,
}

impl Sides {
    const BOTH: Sides = Sides {
        read: true,
        write: true,
    };
    const READ: Sides = Sides {
        read: true,
        write: false,
    };
    const WRITE: Sides = Sides {
        read: false,
        write: true,
    };
}

/// How an option's value is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OptShape {
    /// An `int`.
    Int,
    /// A `struct timeval`.
    Time,
    /// A `struct linger`.
    Linger,
}

fn forked_errno() -> Errno {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        log(
            "a linerate socket inherited through fork is not usable in the child (the queue \
             threads serving it stay in the parent): EIO; run the program as one process \
             (nginx: master_process off), open the socket in the child (with nic.children), \
             or leave its port to the kernel with a policy rule",
        );
    }
    libc::EIO
}
