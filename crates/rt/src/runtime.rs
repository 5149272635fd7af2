//! The per-queue runtime: one thread per NIC queue, each owning one [`Engine`]
//! and the connections RSS puts on its queue (shared-nothing).
//!
//! # What runs where
//!
//! * **Queue threads** (`linerate-q0`, `linerate-q1`, ...): each loops over
//!   commands from its channel, a [`Driver`] round on its queue (receive, timers),
//!   serving the streams that need it (staging rings to and from the engine,
//!   accepts, connect results, task wake-ups), and transmit; then it blocks on
//!   the queue's readiness until the engine's next timer. Nothing of one queue's
//!   engine is touched by another thread.
//! * **Only what changed is served**: a stream is visited when its engine
//!   reports an event for it ([`linerate_toe::Event`]: readable, writable,
//!   connected, closed, failed) or its application side asks (bytes staged
//!   into an empty send ring, room made in a stalled receive ring, shutdown,
//!   drop). A queue with 100,000 idle streams serves a busy one as it serves
//!   it alone (`benches/idle.rs`). UDP sockets likewise: on their engine's
//!   events (a datagram to read, room to send), a datagram staged into an
//!   empty queue, room made in a full receive queue, a drop; a writer waiting
//!   for room is looked at after each transmit until it is woken.
//!   [`QueueStats::served`] counts the visits.
//! * **Application threads and tasks** talk to a queue through its bounded
//!   command channel (listen, connect, engine calls) and through per-stream
//!   staging rings (data), then wake the queue thread. The memory backend's
//!   [`Notify`] is that wake-up; a backend whose readiness is a file descriptor
//!   (TAP, AF_XDP) has its queue thread sleep in `poll(2)` on that descriptor
//!   and an eventfd of the queue's, which the application side writes when it
//!   hands an idle queue work: the thread sleeps until its NIC, its engine's
//!   next timer or the application needs it, and wakes at once for each.
//!
//! # Flows and queues
//!
//! A listener is opened on every queue: RSS puts each incoming flow on one queue
//! and that queue's engine answers it. An active open from queue `q` takes its
//! source port from linerate-rss's [`PortAllocator`] (with the runtime's
//! [`Steering`], which must describe the NIC's RSS), so the peer's replies hash to
//! `q`. ARP and IPv6 neighbour discovery frames, which RSS puts on one queue while
//! every engine of the host resolves neighbours, are copied to the other queues.
//!
//! [`Notify`]: linerate_nic::Notify

use super::RtError;
use super::driver::{Driver, offloads_fit};
#[cfg(target_os = "linux")]
use super::kick::KickFd;
use super::local::{Executor, Remote};
use super::shared::{SharedNic, lock};
use super::socket::{ListenShared, SockError, SockShared, wake};
use super::udp::{Served, UdpBound, UdpShared, service_udp};
use linerate_nic::claims::{ClaimError, Claims, L4};
use linerate_nic::{Nic, NicError, Notify, Readiness};
use linerate_offload::OffloadMeta;
use linerate_rss::{FlowTuple, PortAllocator, Steering};
use linerate_toe::Config;
use linerate_toe::Instant;
use linerate_toe::TcpState;
use linerate_toe::{
    ConnectError, ConnectionError, Engine, Event, ListenerHandle, RecvError, SendError,
    SocketHandle,
};
use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The interface every queue's engine serves (one MAC and address set for
    /// the host). [`Config::offloads`] is switched off if the NIC cannot segment
    /// and checksum what the engine would emit.
    pub engine: Config,
    /// Seed of the engines' randomness (ISN and SYN-cookie keys, timestamp
    /// offsets, ephemeral ports); each queue mixes in its index. [`RuntimeConfig::new`]
    /// draws it from the operating system's generator (`getrandom(2)`), so ISNs
    /// (RFC 6528) and SYN cookies (RFC 4987) cannot be predicted from the source;
    /// set it only to replay a run.
    pub seed: u64,
    /// The NIC's receive steering, for RSS-aware active opens. `None`: source
    /// ports are the engine's random ephemeral ones (right for one queue, or a
    /// backend that maps queues straight through).
    pub steering: Option<Arc<Steering>>,
    /// Source ports for active opens with steering, first and last.
    pub ephemeral: (u16, u16),
    /// The interface's steering, when linerate shares it with the kernel's
    /// stack (`linerate_nic::xdp::Steering`): every queue claims its
    /// listeners' ports and its connections' 4-tuples there as they open, and
    /// gives them up once the engine no longer holds them (after TIME-WAIT).
    /// An active open whose source port the kernel uses takes another; a
    /// claim refused because a table is full refuses the connection (the
    /// connect fails, an accepted connection is reset) and is counted in
    /// [`QueueStats::claims_refused`]. `None`: the interface is linerate's alone.
    pub claims: Option<Arc<dyn Claims>>,
    /// The interface (in the network namespace [`Runtime::start`] is called
    /// in) whose neighbour table the kernel keeps for the engine: with an
    /// address shared with the kernel's stack, the kernel gets the ARP replies
    /// and neighbour advertisements, so each queue reads next hops from the
    /// kernel's table over rtnetlink, has the kernel resolve those it lacks,
    /// and refreshes those in use before `neighbor_ttl` lapses (see
    /// `linerate_nic::kernel_neigh`). Counted in
    /// [`QueueStats::kernel_neighbors`]. `None` (the default): the engine
    /// resolves its neighbours itself. Linux only.
    pub kernel_neighbors: Option<String>,
    /// Next hops learned outside the engine, for a runtime whose ARP replies
    /// go elsewhere (a process on one queue of a TAP shared through
    /// `linerate_nic::tap::TapSteering`, which sends every ARP frame to queue
    /// 0 and records its sender): each queue reads the next hops its engine
    /// is resolving there, and refreshes those in use, as with
    /// [`RuntimeConfig::kernel_neighbors`] (which wins when both are set);
    /// counted in [`QueueStats::kernel_neighbors`]. `None` (the default): the
    /// engine's own replies only.
    pub neighbor_source: Option<Arc<dyn linerate_nic::neigh::NeighborSource>>,
    /// Commands each queue's channel holds before senders wait.
    pub commands: usize,
    /// Bytes of each stream's staging ring, per direction, between the
    /// application and the engine's own buffers, to begin with (see
    /// [`RuntimeConfig::stream_buffer_max`]).
    pub stream_buffer: usize,
    /// Bytes a staging ring may grow to. A ring doubles (up to this) when one
    /// read takes, or one write fills, half of it or more: an application
    /// that moves as much per call as the ring holds would otherwise take
    /// turns with the queue thread (fill, drain, fill) instead of overlapping
    /// with it, as a kernel socket's auto-tuned buffers let it. Rings of
    /// applications that move less per call stay at
    /// [`RuntimeConfig::stream_buffer`]. Not below that.
    pub stream_buffer_max: usize,
    /// Accepted connections a listener holds (over all queues) before the queues
    /// leave further ones in their engines' accept queues; each engine's own
    /// backlog (`tcp.backlog`) is raised to it if lower.
    pub accept_backlog: usize,
    /// Longest a queue thread sleeps with nothing to do (it is woken earlier by
    /// frames, commands and its engine's timers).
    pub max_wait: Duration,
    /// Longest a queue thread waits on a file-descriptor readiness before
    /// looking at its commands again, should the queue's wake-up eventfd not
    /// be available (`eventfd(2)` failed): then the only way work handed to
    /// the queue is seen. With the eventfd (always, on Linux) it is unused.
    pub fd_poll: Duration,
    /// Busy polling, as Linux's `SO_BUSY_POLL`: after a round that moved
    /// frames, a queue thread keeps looking at its NIC and its commands
    /// without sleeping for this long, so that the next frame or request is
    /// seen without a wake-up (a system call and, on a virtual machine, an
    /// interrupt to the sleeping CPU). It trades a core's idle time for
    /// latency. Zero (the default): the thread sleeps as soon as it has
    /// nothing to do.
    pub busy_poll: Duration,
    /// Prefix of the queue threads' names.
    pub thread_name: String,
    /// Runs first on each queue thread, before it touches its NIC: an
    /// `LD_PRELOAD` interposer (linerate-preload) marks the threads as its
    /// own there, so their system calls (the NIC's, the ports held in the
    /// kernel for [`RuntimeConfig::claims`]) go straight to libc instead of
    /// being looked up among the program's sockets. `None` (the default):
    /// nothing runs.
    pub on_thread_start: Option<fn()>,
    /// How long stopping the runtime (dropping it, [`Runtime::shutdown`])
    /// waits for the streams' staged data and FINs to go out and be
    /// acknowledged, as `SO_LINGER` bounds a closing socket: every stream's
    /// sending side is shut once what it staged is sent, and the queue threads
    /// go on until every byte and FIN is acknowledged or this time passes.
    /// Zero stops at once (what is unsent is lost). [`Runtime::shutdown_timeout`]
    /// sets it per call and says what was left.
    pub linger: Duration,
    /// CPUs to pin the queue threads to: queue `q`'s thread runs only on
    /// `cpus[q % cpus.len()]`. Empty (the default): not pinned. Pinned, the
    /// threads of two runtimes that talk to each other in one process (the
    /// same queue of both ends on the same CPU) hand their bytes over in that
    /// CPU's cache, and no thread migrates; each CPU must be one the process
    /// may run on ([`RtError::Cpu`] otherwise).
    pub cpus: Vec<usize>,
    /// The DNS servers and options of [`Handle::resolver`] (the resolver
    /// [`crate::TcpStream::connect`] looks names up with); `None` (the
    /// default): no resolver until [`Handle::set_resolver`] gives one.
    pub dns: Option<linerate_dns::Config>,
    /// The DHCP client of an engine configured with
    /// [`Config::dhcp`](linerate_toe::Config::dhcp) (see [`crate::netconf`]):
    /// `None` (the default) uses `linerate_dhcp::Config::new` for the
    /// interface's MAC.
    pub dhcp_client: Option<linerate_dhcp::Config>,
    /// Whether stopping the runtime gives the DHCP lease back to its server
    /// (a DHCPRELEASE, RFC 2131 section 4.4.6) before the queues stop, as
    /// `dhclient -r` does. Off (the default): the lease is kept, and a client
    /// started again soon gets the address back with
    /// [`linerate_dhcp::Config::init_reboot`].
    pub dhcp_release_on_stop: bool,
}

impl RuntimeConfig {
    /// Defaults for an interface `engine`: a seed from the operating system, no
    /// steering, 64-command channels, 256 KiB staging rings, a linger of one
    /// second.
    pub fn new(engine: Config) -> RuntimeConfig {
        RuntimeConfig {
            engine,
            seed: os_seed(),
            steering: None,
            ephemeral: linerate_rss::sport::EPHEMERAL,
            claims: None,
            kernel_neighbors: None,
            neighbor_source: None,
            commands: 64,
            stream_buffer: 256 * 1024,
            stream_buffer_max: 4 << 20,
            accept_backlog: 1024,
            max_wait: Duration::from_secs(1),
            fd_poll: Duration::from_millis(1),
            busy_poll: Duration::ZERO,
            thread_name: "linerate-q".to_string(),
            on_thread_start: None,
            cpus: Vec::new(),
            linger: Duration::from_secs(1),
            dns: None,
            dhcp_client: None,
            dhcp_release_on_stop: false,
        }
    }
}

/// 64 bits from the operating system's generator. Should it fail (no
/// `getrandom(2)` and no `/dev/urandom`), std's hash keys, which std also draws
/// from the operating system, are the fallback: never a constant.
fn os_seed() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x6c69_6e65_7261_7465);
        h.finish()
    })
}

/// A request to a queue thread.
pub(crate) enum Command {
    /// Open a listener on the queue's engine.
    Listen {
        port: u16,
        shared: Arc<ListenShared>,
        reply: oneshot::Sender<Result<(), SockError>>,
    },
    /// Open a connection from this queue.
    Connect {
        remote: SocketAddr,
        reply: oneshot::Sender<Result<Arc<SockShared>, SockError>>,
    },
    /// Bind a UDP socket on the queue's engine; the reply is the bound address.
    UdpBind {
        addr: SocketAddr,
        shared: Arc<UdpShared>,
        reply: oneshot::Sender<Result<SocketAddr, SockError>>,
    },
    /// Run a closure on the engine.
    Run(Box<dyn FnOnce(&mut Engine) + Send>),
    /// A neighbour-discovery frame another queue received.
    Frame(Vec<u8>, OffloadMeta),
}

/// Counters of one queue, read with [`Handle::stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    /// Rounds of the queue loop.
    pub polls: u64,
    /// Frames received on the queue.
    pub rx_frames: u64,
    /// Frames the backend took for transmission.
    pub tx_frames: u64,
    /// Frames the backend refused (the driver itself drops none: while the
    /// backend takes nothing, the engine keeps its frames).
    pub tx_dropped: u64,
    /// Neighbour-discovery frames copied to the other queues.
    pub forwarded: u64,
    /// Connections opened from this queue that reached ESTABLISHED.
    pub active_opens: u64,
    /// Connections accepted on this queue.
    pub passive_opens: u64,
    /// Connects from this queue that failed.
    pub connect_failures: u64,
    /// Streams the queue serves now.
    pub streams: u64,
    /// Tasks alive on the queue thread ([`crate::local`]).
    pub tasks: u64,
    /// Polls of those tasks so far.
    pub task_polls: u64,
    /// Tasks dropped because they panicked.
    pub task_panics: u64,
    /// Stream reads and writes of tasks on this queue's thread served straight
    /// from and into the engine (no staging ring).
    pub direct_io: u64,
    /// Timers of [`crate::local::sleep`] the queue holds.
    pub timers: u64,
    /// Times a stream or a UDP binding was served, for an event of its engine
    /// or a change on its application side: grows with traffic, not with the
    /// sockets that sit idle.
    pub served: u64,
    /// Listens, connects and accepted connections refused because a table of
    /// the interface's steering was full ([`RuntimeConfig::claims`]).
    pub claims_refused: u64,
    /// Next hops copied from the kernel's neighbour table
    /// ([`RuntimeConfig::kernel_neighbors`]) or from a
    /// [`RuntimeConfig::neighbor_source`], first resolutions and refreshes.
    pub kernel_neighbors: u64,
    /// Next hops the kernel was asked to resolve because its table had no
    /// usable entry.
    pub kernel_resolves: u64,
    /// Look-ups in the kernel's table that failed.
    pub kernel_neighbor_errors: u64,
}

#[derive(Debug, Default)]
struct StatCells {
    polls: AtomicU64,
    rx_frames: AtomicU64,
    tx_frames: AtomicU64,
    tx_dropped: AtomicU64,
    forwarded: AtomicU64,
    active_opens: AtomicU64,
    passive_opens: AtomicU64,
    connect_failures: AtomicU64,
    streams: AtomicU64,
    tasks: AtomicU64,
    task_polls: AtomicU64,
    task_panics: AtomicU64,
    direct_io: AtomicU64,
    served: AtomicU64,
    timers: AtomicU64,
    claims_refused: AtomicU64,
    kernel_neighbors: AtomicU64,
    kernel_resolves: AtomicU64,
    kernel_neighbor_errors: AtomicU64,
}

impl StatCells {
    fn store(&self, s: &QueueStats) {
        let r = Ordering::Relaxed;
        self.polls.store(s.polls, r);
        self.rx_frames.store(s.rx_frames, r);
        self.tx_frames.store(s.tx_frames, r);
        self.tx_dropped.store(s.tx_dropped, r);
        self.forwarded.store(s.forwarded, r);
        self.active_opens.store(s.active_opens, r);
        self.passive_opens.store(s.passive_opens, r);
        self.connect_failures.store(s.connect_failures, r);
        self.streams.store(s.streams, r);
        self.tasks.store(s.tasks, r);
        self.task_polls.store(s.task_polls, r);
        self.task_panics.store(s.task_panics, r);
        self.direct_io.store(s.direct_io, r);
        self.served.store(s.served, r);
        self.timers.store(s.timers, r);
        self.claims_refused.store(s.claims_refused, r);
        self.kernel_neighbors.store(s.kernel_neighbors, r);
        self.kernel_resolves.store(s.kernel_resolves, r);
        self.kernel_neighbor_errors
            .store(s.kernel_neighbor_errors, r);
    }

    fn load(&self) -> QueueStats {
        let r = Ordering::Relaxed;
        QueueStats {
            polls: self.polls.load(r),
            rx_frames: self.rx_frames.load(r),
            tx_frames: self.tx_frames.load(r),
            tx_dropped: self.tx_dropped.load(r),
            forwarded: self.forwarded.load(r),
            active_opens: self.active_opens.load(r),
            passive_opens: self.passive_opens.load(r),
            connect_failures: self.connect_failures.load(r),
            streams: self.streams.load(r),
            tasks: self.tasks.load(r),
            task_polls: self.task_polls.load(r),
            task_panics: self.task_panics.load(r),
            claims_refused: self.claims_refused.load(r),
            kernel_neighbors: self.kernel_neighbors.load(r),
            kernel_resolves: self.kernel_resolves.load(r),
            kernel_neighbor_errors: self.kernel_neighbor_errors.load(r),
            direct_io: self.direct_io.load(r),
            served: self.served.load(r),
            timers: self.timers.load(r),
        }
    }
}

/// How application threads wake a queue thread.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    /// The queue's own readiness signal (memory backend).
    Notify(Arc<Notify>),
    /// An eventfd the queue thread polls beside its NIC's descriptor.
    #[cfg(target_os = "linux")]
    Fd(Arc<KickFd>),
    /// None: the queue thread polls at [`RuntimeConfig::fd_poll`].
    Poll,
}

impl Wake {
    /// Wakes the queue thread (a no-op for [`Wake::Poll`]).
    pub(crate) fn kick(&self) {
        match self {
            Wake::Notify(n) => n.notify(),
            #[cfg(target_os = "linux")]
            Wake::Fd(k) => k.kick(),
            Wake::Poll => {}
        }
    }
}

// Aligned to two cache lines (an adjacent-line prefetcher pairs them): each
// queue thread stores its statistics here every round, and with the queues
// packed side by side those stores would bounce one cache line between the
// cores serving neighbouring queues.
#[derive(Debug)]
#[repr(align(128))]
struct QueueShared {
    cmd: mpsc::Sender<Command>,
    wake: Wake,
    stats: StatCells,
    /// Tasks spawned onto the queue and wake-ups of its tasks from other threads.
    remote: Arc<Remote>,
    /// Streams whose application side changed (bytes staged to send, room
    /// made in a stalled receive ring, shutdown, close), for the queue thread
    /// to serve: with the engine's events, all it serves.
    dirty: Dirty,
}

/// A queue's list of streams to serve for their application side.
#[derive(Debug, Default)]
struct Dirty {
    list: std::sync::Mutex<Vec<Arc<SockShared>>>,
    /// UDP sockets whose application side changed.
    udp: std::sync::Mutex<Vec<Arc<UdpShared>>>,
    /// A list is not empty (the queue thread takes the locks only then).
    pending: AtomicBool,
}

#[derive(Debug)]
pub(crate) struct Inner {
    queues: Box<[QueueShared]>,
    next: AtomicUsize,
    stop: AtomicBool,
    pub(crate) epoch: std::time::Instant,
    stream_buffer: usize,
    /// What a stream's staging rings may grow to ([`RuntimeConfig::stream_buffer_max`]).
    pub(crate) stream_buffer_max: usize,
    /// How long a stopping queue waits for its streams' data (nanoseconds).
    linger: AtomicU64,
    /// Why a queue thread stopped on its own (its NIC failed, it panicked):
    /// every later call that finds the runtime stopped says it.
    failure: std::sync::OnceLock<String>,
    /// The configuration of the runtime's resolver, and the resolver once
    /// started (at the first [`Handle::resolver`]).
    dns: std::sync::Mutex<(Option<linerate_dns::Config>, Option<crate::Resolver>)>,
    /// Addresses from the network (`crate::netconf`).
    pub(crate) net: crate::netconf::Shared,
}

impl Inner {
    /// The error of a call that found the runtime (or the queue) stopped,
    /// with the cause if a queue failed.
    pub(crate) fn stopped(&self) -> io::Error {
        match self.failure.get() {
            Some(why) => io::Error::new(
                io::ErrorKind::NotConnected,
                format!("the linerate runtime has stopped: {why}"),
            ),
            None => io::Error::new(
                io::ErrorKind::NotConnected,
                "the linerate runtime has stopped",
            ),
        }
    }

    /// The `std::io` form of a socket error; an abort because a queue failed
    /// says why, and running out of source ports says how to get more.
    pub(crate) fn io_error(&self, e: impl Into<SockError>) -> io::Error {
        let e = e.into();
        match (e, self.failure.get()) {
            (SockError::Connection(ConnectionError::Aborted), Some(why)) => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("connection aborted: {why}"),
            ),
            (SockError::NoPorts { remote, steered }, _) => io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                no_ports(remote, steered, self.queues.len()),
            ),
            _ => e.into(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// A cheap, cloneable reference to a running [`Runtime`], for opening sockets
/// ([`super::TcpListener::bind`], [`super::TcpStream::connect`]) and reaching
/// engines from any thread or task.
#[derive(Debug, Clone)]
pub struct Handle {
    pub(crate) inner: Arc<Inner>,
}

impl Handle {
    /// Number of queues (and queue threads).
    pub fn queues(&self) -> usize {
        self.inner.queues.len()
    }

    /// The runtime's clock, as its engines see it.
    pub fn now(&self) -> Instant {
        self.inner.now()
    }

    /// The runtime's resolver: the one [`Handle::set_resolver`] gave, or one
    /// started (on queue 0) from [`RuntimeConfig::dns`] at the first call.
    ///
    /// Errors: `NotFound` when there is neither; as
    /// [`crate::Resolver::start`] when it cannot start.
    pub fn resolver(&self) -> io::Result<crate::Resolver> {
        let mut slot = lock(&self.inner.dns);
        if let Some(r) = &slot.1 {
            return Ok(r.clone());
        }
        let Some(cfg) = slot.0.clone() else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no DNS resolver: set RuntimeConfig::dns or call Handle::set_resolver",
            ));
        };
        let r = crate::Resolver::start(self, cfg)?;
        slot.1 = Some(r.clone());
        Ok(r)
    }

    /// Makes `resolver` the runtime's (for servers learnt at run time, from
    /// DHCP or a router advertisement); lookups under way in the previous one
    /// finish there.
    pub fn set_resolver(&self, resolver: crate::Resolver) {
        lock(&self.inner.dns).1 = Some(resolver);
    }

    /// The counters of `queue`, if there is such a queue.
    pub fn stats(&self, queue: usize) -> Option<QueueStats> {
        self.inner.queues.get(queue).map(|q| q.stats.load())
    }

    /// Runs `f` on the engine of `queue`, on its thread, and returns its result
    /// (for counters, [`Engine::tcp_info`], tuning).
    pub async fn with_engine<R, F>(&self, queue: usize, f: F) -> io::Result<R>
    where
        F: FnOnce(&mut Engine) -> R + Send + 'static,
        R: Send + 'static,
    {
        // A task on the queue's own thread runs it there and then.
        let mut slot = Some(f);
        if let Some(r) =
            crate::local::with_engine(self, queue, |e| slot.take().map(|f| f(e))).flatten()
        {
            return Ok(r);
        }
        let Some(f) = slot else {
            return Err(self.inner.stopped());
        };
        let (tx, rx) = oneshot::channel();
        let run = move |e: &mut Engine| {
            let _ = tx.send(f(e));
        };
        self.command(queue, Command::Run(Box::new(run))).await?;
        rx.await.map_err(|_| self.inner.stopped())
    }

    /// [`Handle::with_engine`] for a thread outside any async runtime (it blocks;
    /// calling it from a tokio task panics, as tokio's blocking calls do). On the
    /// queue's own thread it runs `f` at once if the engine is lent to the
    /// caller (a task there, [`crate::local`]) and fails with `WouldBlock`
    /// otherwise, rather than wait for its own thread.
    pub fn with_engine_blocking<R, F>(&self, queue: usize, f: F) -> io::Result<R>
    where
        F: FnOnce(&mut Engine) -> R + Send + 'static,
        R: Send + 'static,
    {
        let mut slot = Some(f);
        if let Some(r) =
            crate::local::with_engine(self, queue, |e| slot.take().map(|f| f(e))).flatten()
        {
            return Ok(r);
        }
        if crate::local::on_queue(self, queue) {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "with_engine_blocking on the queue's own thread, its engine not lent",
            ));
        }
        let Some(f) = slot else {
            return Err(self.inner.stopped());
        };
        let (tx, rx) = oneshot::channel();
        let run = move |e: &mut Engine| {
            let _ = tx.send(f(e));
        };
        let q = self.queue(queue)?;
        q.cmd
            .blocking_send(Command::Run(Box::new(run)))
            .map_err(|_| self.inner.stopped())?;
        self.kick(queue);
        rx.blocking_recv().map_err(|_| self.inner.stopped())
    }

    fn queue(&self, queue: usize) -> io::Result<&QueueShared> {
        self.inner.queues.get(queue).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no queue {queue}: the runtime has {}", self.queues()),
            )
        })
    }

    /// Sends `cmd` to `queue` (waiting while its channel is full) and wakes it.
    pub(crate) async fn command(&self, queue: usize, cmd: Command) -> io::Result<()> {
        self.queue(queue)?
            .cmd
            .send(cmd)
            .await
            .map_err(|_| self.inner.stopped())?;
        self.kick(queue);
        Ok(())
    }

    /// The executor of `queue`'s thread, as other threads reach it.
    pub(crate) fn remote(&self, queue: usize) -> io::Result<&Arc<Remote>> {
        self.inner
            .queues
            .get(queue)
            .map(|q| &q.remote)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no queue {queue}: the runtime has {}", self.queues()),
                )
            })
    }

    /// Asks the queue thread of `sock` to serve it: its application side
    /// changed. The queue thread serves only such streams and those its
    /// engine reports events for, so a stream nobody touches costs nothing.
    pub(crate) fn serve(&self, sock: &Arc<SockShared>) {
        let Some(q) = self.inner.queues.get(sock.queue) else {
            return;
        };
        if !sock.dirty.swap(true, Ordering::AcqRel) {
            lock(&q.dirty.list).push(Arc::clone(sock));
            q.dirty.pending.store(true, Ordering::Release);
        }
        self.kick(sock.queue);
    }

    /// Asks queue `q`'s thread to serve its binding of UDP socket `sock`.
    pub(crate) fn serve_udp(&self, sock: &Arc<UdpShared>, q: usize) {
        let (Some(qs), Some(at)) = (self.inner.queues.get(q), sock.at.get(q)) else {
            return;
        };
        if !at.dirty.swap(true, Ordering::AcqRel) {
            lock(&qs.dirty.udp).push(Arc::clone(sock));
            qs.dirty.pending.store(true, Ordering::Release);
        }
        self.kick(q);
    }

    /// Wakes the thread of `queue`.
    pub(crate) fn kick(&self, queue: usize) {
        if let Some(q) = self.inner.queues.get(queue) {
            q.wake.kick();
        }
    }

    /// Wakes every queue thread.
    pub(crate) fn kick_all(&self) {
        for q in 0..self.queues() {
            self.kick(q);
        }
    }

    /// The next queue in round-robin order.
    pub(crate) fn pick_queue(&self) -> usize {
        self.inner.next.fetch_add(1, Ordering::Relaxed) % self.queues().max(1)
    }
}

/// The per-queue runtime. See the [module docs](self).
///
/// Stopping it (dropping it, [`Runtime::shutdown`], [`Runtime::shutdown_timeout`])
/// is graceful: listeners close, every stream's staged data goes out followed
/// by a FIN, and the queue threads run until the peers have acknowledged all of
/// it or the linger time ([`RuntimeConfig::linger`]) passes; then streams and
/// listeners still open fail with [`std::io::ErrorKind::ConnectionAborted`].
#[derive(Debug)]
pub struct Runtime {
    handle: Handle,
    threads: Vec<JoinHandle<Result<Unsent, NicError>>>,
}

/// What a stopping runtime could not deliver within its linger time
/// ([`Runtime::shutdown_timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unsent {
    /// Streams (and connections whose handles were given up) with data or a
    /// FIN the peer had not acknowledged.
    pub streams: usize,
    /// Bytes they held: staged, in the engines' send buffers, or sent and not
    /// acknowledged.
    pub bytes: u64,
}

impl Unsent {
    /// Nothing was left.
    pub fn is_empty(&self) -> bool {
        self.streams == 0
    }
}

impl Runtime {
    /// Starts one thread per queue of `nic`.
    ///
    /// Errors: [`RtError::Config`] if `cfg.engine` fails
    /// [`linerate_toe::Config::validate`]; [`RtError::Steering`] if the steering's queue count differs from
    /// the NIC's; [`RtError::Ports`] for a bad ephemeral range; [`RtError::Nic`]
    /// if a queue has no readiness; [`RtError::Spawn`] if a thread cannot start.
    pub fn start<N: Nic + 'static>(nic: N, cfg: RuntimeConfig) -> Result<Runtime, RtError> {
        let shared = SharedNic::new(nic);
        let views = (0..shared.queues().max(1))
            .map(|q| shared.queue(q))
            .collect::<Result<Vec<_>, _>>()?;
        Runtime::start_queues(views, cfg)
    }

    /// Starts one thread per NIC of `queues`, each NIC one queue of the same
    /// interface, owned by its thread: nothing is locked between the queue
    /// threads (a backend that splits, such as
    /// `linerate_nic::MemNic::split`). [`Runtime::start`] shares one NIC
    /// between its threads instead, behind a lock taken once per batch.
    ///
    /// Errors: as [`Runtime::start`]; [`RtError::NoQueue`] if `queues` is
    /// empty.
    pub fn start_queues<N: Nic + 'static>(
        queues: Vec<N>,
        cfg: RuntimeConfig,
    ) -> Result<Runtime, RtError> {
        cfg.engine.validate()?;
        if !cfg.cpus.is_empty() {
            let allowed = crate::affinity::allowed().map_err(RtError::Spawn)?;
            if let Some(&cpu) = cfg.cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(RtError::Cpu { cpu });
            }
        }
        let Some(first) = queues.first() else {
            return Err(RtError::NoQueue {
                queue: 0,
                queues: 0,
            });
        };
        let caps = *first.caps();
        let nics = queues;
        let queues = nics.len();
        if let Some(s) = &cfg.steering
            && usize::from(s.queues()) != queues
        {
            return Err(RtError::Steering {
                steering: usize::from(s.queues()),
                nic: queues,
            });
        }
        let mut engine_cfg = cfg.engine.clone();
        // The queue thread moves established connections out of its engine's
        // accept queue once per round; a burst of handshakes completing in one
        // receive batch must fit there until then, as it fits the listener's
        // own queue (`accept_backlog`).
        engine_cfg.tcp.backlog = engine_cfg.tcp.backlog.max(cfg.accept_backlog);
        if !offloads_fit(&engine_cfg, &caps) {
            engine_cfg.offloads = false;
        }
        let mut shared = Vec::with_capacity(queues);
        let mut loops = Vec::with_capacity(queues);
        for (q, nic) in nics.into_iter().enumerate() {
            let readiness = nic.readiness(0)?;
            let wake = match &readiness {
                Readiness::Notify(n) => Wake::Notify(Arc::clone(n)),
                #[cfg(target_os = "linux")]
                Readiness::Fd(_) => match KickFd::new() {
                    Ok(k) => Wake::Fd(Arc::new(k)),
                    Err(e) => {
                        tracing::warn!(queue = q, error = %e, "no eventfd to wake the queue thread: it polls its NIC every {:?}", cfg.fd_poll);
                        Wake::Poll
                    }
                },
            };
            let (tx, rx) = mpsc::channel(cfg.commands.max(1));
            shared.push(QueueShared {
                cmd: tx,
                remote: Arc::new(Remote::new(wake.clone())),
                wake,
                stats: StatCells::default(),
                dirty: Dirty::default(),
            });
            let seed = cfg.seed ^ (q as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // The queues are one interface: the first announces its addresses
            // (gratuitous ARP, unsolicited NA), the others keep quiet.
            let mut queue_cfg = engine_cfg.clone();
            if q > 0 {
                queue_cfg.announcements = 0;
            }
            let engine = Engine::new(queue_cfg, seed);
            let driver = Driver::with_service(RefCell::new(engine), nic, 0)?;
            let ports = match &cfg.steering {
                Some(s) => {
                    let (first, last) = cfg.ephemeral;
                    Some((
                        PortAllocator::new(Arc::clone(s), false, first, last)?,
                        PortAllocator::new(Arc::clone(s), true, first, last)?,
                    ))
                }
                None => None,
            };
            let kneigh = match &cfg.kernel_neighbors {
                #[cfg(target_os = "linux")]
                Some(ifname) => {
                    let nl = linerate_nic::kernel_neigh::KernelNeighbors::open(
                        ifname,
                        KERNEL_NEIGHBOR_WAIT,
                    )
                    .map_err(RtError::KernelNeighbors)?;
                    Some(crate::kneigh::KernelNeighborTable::new(
                        crate::kneigh::Source::Kernel(nl),
                        engine_cfg.neighbor_ttl,
                    ))
                }
                #[cfg(not(target_os = "linux"))]
                Some(_) => {
                    return Err(RtError::KernelNeighbors(io::Error::from(
                        io::ErrorKind::Unsupported,
                    )));
                }
                #[cfg(target_os = "linux")]
                None => cfg.neighbor_source.as_ref().map(|src| {
                    crate::kneigh::KernelNeighborTable::new(
                        crate::kneigh::Source::Other(Arc::clone(src)),
                        engine_cfg.neighbor_ttl,
                    )
                }),
                #[cfg(not(target_os = "linux"))]
                None => None,
            };
            loops.push((driver, rx, readiness, ports, kneigh));
        }
        let inner = Arc::new(Inner {
            queues: shared.into_boxed_slice(),
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            epoch: std::time::Instant::now(),
            stream_buffer: cfg.stream_buffer.max(1),
            stream_buffer_max: cfg.stream_buffer_max.max(cfg.stream_buffer.max(1)),
            linger: AtomicU64::new(u64::try_from(cfg.linger.as_nanos()).unwrap_or(u64::MAX)),
            failure: std::sync::OnceLock::new(),
            dns: std::sync::Mutex::new((cfg.dns.clone(), None)),
            net: crate::netconf::Shared::default(),
        });
        let mut rt = Runtime {
            handle: Handle { inner },
            threads: Vec::with_capacity(queues),
        };
        for (q, (driver, cmd, readiness, ports, kneigh)) in loops.into_iter().enumerate() {
            let lp = QueueLoop {
                q,
                driver,
                inner: Arc::clone(&rt.handle.inner),
                cmd,
                conns: Vec::new(),
                streams: 0,
                todo: Vec::new(),
                dirty: Vec::new(),
                listeners: Vec::new(),
                udps: Vec::new(),
                udp_todo: Vec::new(),
                udp_dirty: Vec::new(),
                udp_watch: Vec::new(),
                ports,
                claims: cfg.claims.clone(),
                releasing: Vec::new(),
                release_check: Instant::ZERO,
                random_port: RandomPorts::new(cfg.ephemeral, cfg.seed ^ q as u64),
                readiness,
                neighbor: Vec::new(),
                kneigh,
                backlog: cfg.accept_backlog.max(1),
                max_wait: cfg.max_wait,
                fd_poll: cfg.fd_poll,
                busy_poll: cfg.busy_poll,
                busy_until: Instant::ZERO,
                frames_seen: 0,
                stats: QueueStats::default(),
                link_down: false,
                link_down_seen: 0,
                link_tx_seen: 0,
            };
            let cpu = (!cfg.cpus.is_empty())
                .then(|| cfg.cpus.get(q % cfg.cpus.len()).copied())
                .flatten();
            let on_start = cfg.on_thread_start;
            let t = std::thread::Builder::new()
                .name(format!("{}{q}", cfg.thread_name))
                .spawn(move || {
                    if let Some(start) = on_start {
                        start();
                    }
                    if let Some(cpu) = cpu {
                        // Checked allowed above; should the kernel refuse
                        // anyway (the set changed since), the thread runs
                        // unpinned.
                        let _ = crate::affinity::pin(cpu);
                    }
                    lp.run()
                })
                .map_err(RtError::Spawn)?;
            rt.threads.push(t);
        }
        crate::netconf::start(
            &rt.handle,
            &engine_cfg,
            cfg.dhcp_client.clone(),
            cfg.dhcp_release_on_stop,
            cfg.dns.is_none(),
            cfg.seed,
        )
        .map_err(RtError::Spawn)?;
        Ok(rt)
    }

    /// A handle for opening sockets; clones are cheap and may outlive the
    /// runtime (their calls then fail).
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Stops the runtime gracefully, waiting up to [`RuntimeConfig::linger`]
    /// for the streams' data and FINs to be acknowledged (see [`Runtime`]);
    /// returns the first error a queue stopped with.
    pub fn shutdown(mut self) -> Result<(), RtError> {
        self.stop().map(|_| ())
    }

    /// [`Runtime::shutdown`] waiting up to `linger` (zero: stop at once), and
    /// saying what was left unacknowledged when it stopped.
    pub fn shutdown_timeout(mut self, linger: Duration) -> Result<Unsent, RtError> {
        let nanos = u64::try_from(linger.as_nanos()).unwrap_or(u64::MAX);
        self.handle.inner.linger.store(nanos, Ordering::Release);
        self.stop()
    }

    fn stop(&mut self) -> Result<Unsent, RtError> {
        self.handle.inner.stop.store(true, Ordering::Release);
        self.handle.kick_all();
        let mut first = Ok(Unsent::default());
        for (queue, t) in self.threads.drain(..).enumerate() {
            let r = match t.join() {
                Ok(Ok(u)) => Ok(u),
                Ok(Err(e)) => Err(RtError::Nic(e)),
                Err(_) => Err(RtError::Panicked { queue }),
            };
            match (&mut first, r) {
                (Ok(total), Ok(u)) => {
                    total.streams += u.streams;
                    total.bytes += u.bytes;
                }
                (Ok(_), Err(e)) => first = Err(e),
                (Err(_), _) => {}
            }
        }
        first
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// A stream the queue thread serves.
struct Conn {
    h: SocketHandle,
    sock: Arc<SockShared>,
    /// The connect call waiting for the handshake.
    connect: Option<oneshot::Sender<Result<Arc<SockShared>, SockError>>>,
    /// Source port from the allocator, released when the stream goes.
    port: Option<u16>,
    /// The 4-tuple claimed in the interface's steering (local, remote).
    claimed: Option<(SocketAddr, SocketAddr)>,
    fin_sent: bool,
    /// On this round's list of streams to serve.
    todo: bool,
}

struct Listening {
    lh: ListenerHandle,
    shared: Arc<ListenShared>,
    /// Its port, claimed in the interface's steering (if there is one).
    port: u16,
}

/// Source ports drawn at random from the runtime's ephemeral range: active
/// opens that claim their 4-tuple before the engine sends the SYN, on a
/// runtime without RSS steering.
struct RandomPorts {
    first: u16,
    span: u64,
    state: u64,
}

impl RandomPorts {
    fn new((first, last): (u16, u16), seed: u64) -> RandomPorts {
        RandomPorts {
            first,
            span: u64::from(last.saturating_sub(first)) + 1,
            state: seed | 1,
        }
    }

    /// xorshift64*: the next port of the range.
    fn next(&mut self) -> u16 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        let x = self.state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
        let off = u16::try_from(x % self.span).unwrap_or(0);
        self.first.saturating_add(off)
    }
}

/// True for a claim refused because a steering table is full (counted).
fn is_full(e: &ClaimError) -> bool {
    matches!(e, ClaimError::Full { .. })
}

/// Commands handled per round at most, before frames get their turn.
const COMMAND_BUDGET: usize = 256;

/// Longest a queue thread waits for the kernel's answer about a neighbour.
#[cfg(target_os = "linux")]
const KERNEL_NEIGHBOR_WAIT: Duration = Duration::from_millis(100);

/// One queue thread's state.
struct QueueLoop<N: Nic> {
    q: usize,
    /// The engine in a `RefCell`: lent to the tasks on this thread while they
    /// run (streams of this queue read and write it directly), reached
    /// without a check otherwise.
    driver: Driver<N, RefCell<Engine>>,
    inner: Arc<Inner>,
    cmd: mpsc::Receiver<Command>,
    /// The streams, by their engine handle's index.
    conns: Vec<Option<Conn>>,
    /// How many of `conns` are there.
    streams: usize,
    /// Streams to serve this round (indices into `conns`).
    todo: Vec<usize>,
    /// Streams the application side changed, taken from the queue's list.
    dirty: Vec<Arc<SockShared>>,
    listeners: Vec<Listening>,
    /// UDP sockets bound on this queue, by their engine handle's index.
    udps: Vec<Option<UdpBound>>,
    /// UDP bindings to serve this round (indices into `udps`).
    udp_todo: Vec<usize>,
    /// UDP sockets the application side changed, taken from the queue's list.
    udp_dirty: Vec<Arc<UdpShared>>,
    /// UDP bindings with a writer waiting for room, served every round.
    udp_watch: Vec<usize>,
    /// IPv4 and IPv6 source-port allocators for this queue.
    ports: Option<(PortAllocator, PortAllocator)>,
    /// The interface's steering ([`RuntimeConfig::claims`]).
    claims: Option<Arc<dyn Claims>>,
    /// 4-tuples of streams that are gone, still claimed while the engine
    /// holds them (closing, TIME-WAIT).
    releasing: Vec<(SocketAddr, SocketAddr)>,
    /// When `releasing` is looked at next.
    release_check: Instant,
    /// Source ports for active opens with claims but no steering.
    random_port: RandomPorts,
    readiness: Readiness,
    neighbor: Vec<(Vec<u8>, OffloadMeta)>,
    /// Next hops from the kernel ([`RuntimeConfig::kernel_neighbors`]).
    #[cfg(target_os = "linux")]
    kneigh: Option<crate::kneigh::KernelNeighborTable>,
    #[cfg(not(target_os = "linux"))]
    kneigh: Option<()>,
    backlog: usize,
    max_wait: Duration,
    fd_poll: Duration,
    /// [`RuntimeConfig::busy_poll`], and until when this thread spins: the
    /// last round that moved frames plus it.
    busy_poll: Duration,
    busy_until: Instant,
    /// Frames received and sent when last looked at (busy polling's "moved").
    frames_seen: u64,
    stats: QueueStats,
    /// Frames are being dropped because the link is down (logged once).
    link_down: bool,
    /// The driver's link-down drops and frames sent when last looked at.
    link_down_seen: u64,
    link_tx_seen: u64,
}

impl<N: Nic> QueueLoop<N> {
    fn run(mut self) -> Result<Unsent, NicError> {
        let handle = Handle {
            inner: Arc::clone(&self.inner),
        };
        let remote = match self.inner.queues.get(self.q) {
            Some(q) => Arc::clone(&q.remote),
            None => Arc::new(Remote::new(Wake::Poll)),
        };
        let mut tasks = Executor::install(self.q, handle, remote);
        let r = self.run_inner(&mut tasks);
        if r.is_ok() && self.q == 0 {
            self.last_words(&mut tasks);
        }
        // Tasks first: dropping them closes their streams, whose data then
        // goes out while the queue lingers; what is left after is failed.
        tasks.shutdown();
        let left = match &r {
            Ok(()) => self.linger(),
            Err(e) => {
                let why = format!("queue {} failed: {e}", self.q);
                tracing::error!(queue = self.q, error = %e, "linerate queue thread failed; its streams are aborted");
                let _ = self.inner.failure.set(why);
                Unsent::default()
            }
        };
        self.teardown();
        r.map(|()| left)
    }

    /// What the runtime says before it stops: the network task on queue 0
    /// is told and run once more (a DHCPRELEASE, `dhcp_release_on_stop`), and
    /// what it sent goes out while the queue lingers.
    fn last_words(&mut self, tasks: &mut Executor) {
        if !self.inner.net.stop() {
            return;
        }
        let now = self.inner.now();
        if tasks.has_work() {
            let _ = tasks.run(now, self.driver.service());
        }
    }

    /// The graceful part of stopping: listeners close, every stream's sending
    /// side is shut after what it staged, and the loop goes on (receive,
    /// timers, serving, transmit) until the peers acknowledged every byte and
    /// FIN, or the linger time passes. Returns what was left.
    fn linger(&mut self) -> Unsent {
        let linger = Duration::from_nanos(self.inner.linger.load(Ordering::Acquire));
        let start = self.inner.now();
        let deadline = start + linger;
        let engine = self.driver.service_mut().get_mut();
        for l in self.listeners.drain(..) {
            let _ = engine.tcp_unlisten(l.lh);
            if let Some(c) = &self.claims {
                c.release_port(L4::Tcp, l.port);
            }
            let w = {
                let mut st = lock(&l.shared.st);
                st.error = Some(ConnectionError::Aborted);
                st.waker.take()
            };
            wake(w);
        }
        for idx in 0..self.conns.len() {
            if let Some(Some(c)) = self.conns.get(idx) {
                lock(&c.sock.st).shutdown = true;
                self.note(idx);
            }
        }
        loop {
            let now = self.inner.now();
            if let Err(e) = self.linger_round(now) {
                tracing::warn!(queue = self.q, error = %e, "NIC failed while lingering");
                return self.unsent();
            }
            let left = self.unsent();
            // A last word (the DHCPRELEASE) waits for its next hop's address
            // as data does for its acknowledgement.
            let resolving = self.q == 0
                && self.inner.net.said_last_words()
                && self.driver.service_mut().get_mut().neighbors_resolving();
            if (left.is_empty() && !resolving) || now >= deadline {
                if !left.is_empty() {
                    tracing::warn!(
                        queue = self.q,
                        streams = left.streams,
                        bytes = left.bytes,
                        "stopping with data the peers have not acknowledged (linger {linger:?})"
                    );
                }
                return left;
            }
            let next = self.driver.next_deadline(now, false);
            let until = next.map_or(deadline, |d| d.min(deadline));
            let tick = now + Duration::from_millis(1);
            if self.wait(now, Some(until.min(tick))).is_err() {
                return left;
            }
        }
    }

    /// One round of the loop while lingering: no commands, tasks or accepts.
    fn linger_round(&mut self, now: Instant) -> Result<(), NicError> {
        let mut neighbor = std::mem::take(&mut self.neighbor);
        self.driver
            .receive_with(now, &mut |f, m| neighbor.push((f.to_vec(), *m)))?;
        self.forward(&mut neighbor);
        self.neighbor = neighbor;
        self.driver.handle_timeouts(now);
        self.kernel_neighbors(now);
        self.serve();
        self.release_claims(now, false);
        self.driver.transmit(now)?;
        self.watch_udp();
        self.publish();
        Ok(())
    }

    /// What is not yet acknowledged: streams with staged bytes, or whose
    /// engine connection has unacknowledged data or FIN, and connections the
    /// engine closes on its own.
    fn unsent(&mut self) -> Unsent {
        let engine = self.driver.service_mut().get_mut();
        let closing = engine.closing();
        let mut u = Unsent {
            streams: closing.connections,
            bytes: closing.bytes as u64,
        };
        for c in self.conns.iter().flatten() {
            let staged = lock(&c.sock.st).tx.len();
            let acked = engine.tcp_fin_acked(c.h).unwrap_or(true);
            let failed = engine
                .tcp_readiness(c.h)
                .map_or(true, |r| r.error.is_some());
            if failed || (acked && staged == 0) {
                continue;
            }
            u.streams += 1;
            u.bytes += (staged + engine.tcp_info(c.h).map_or(0, |i| i.send_queue)) as u64;
        }
        u
    }

    fn run_inner(&mut self, tasks: &mut Executor) -> Result<(), NicError> {
        while !self.inner.stop.load(Ordering::Acquire) {
            let now = self.inner.now();
            let mut more = self.commands(now);
            let mut neighbor = std::mem::take(&mut self.neighbor);
            more |= self
                .driver
                .receive_with(now, &mut |f, m| neighbor.push((f.to_vec(), *m)))?;
            self.forward(&mut neighbor);
            self.neighbor = neighbor;
            self.driver.handle_timeouts(now);
            self.kernel_neighbors(now);
            self.accept_all();
            self.serve();
            self.release_claims(now, false);
            // Tasks on this thread read what the serving staged and write what
            // the second serving hands to the engine, in the same round.
            if tasks.has_work() {
                if let Some(again) = tasks.run(now, self.driver.service()) {
                    more |= again;
                    self.accept_all();
                    self.serve();
                }
                self.stats.tasks = tasks.tasks() as u64;
                self.stats.task_polls = tasks.polls;
                self.stats.task_panics = tasks.panics;
                self.stats.direct_io = tasks.direct();
                self.stats.timers = tasks.timers() as u64;
            }
            self.driver.transmit(now)?;
            // Transmit made room in UDP send queues: their waiting writers
            // are woken now, not at the next round, and what else it changed
            // (events for sockets nobody is watching) is served next round
            // without a sleep.
            self.watch_udp();
            more |= self.driver.service_mut().get_mut().has_events();
            // A task woken by the second sweep (or since) runs next round
            // without a sleep: its wake-up pushed it on this thread's list only.
            more |= tasks.has_ready();
            self.publish();
            if !self.busy_poll.is_zero() {
                let frames = self.stats.rx_frames + self.stats.tx_frames;
                if frames != self.frames_seen || more {
                    self.frames_seen = frames;
                    self.busy_until = now + self.busy_poll;
                }
                if now < self.busy_until {
                    // Busy polling: the next round at once.
                    std::hint::spin_loop();
                    continue;
                }
            }
            let mut deadline = self.driver.next_deadline(now, more);
            if let Some(t) = tasks.next_timer() {
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            #[cfg(target_os = "linux")]
            if let Some(k) = &self.kneigh {
                let t = k.next_deadline(self.driver.service_mut().get_mut());
                deadline = Some(deadline.map_or(t, |d| d.min(t)));
            }
            self.wait(now, deadline)?;
        }
        Ok(())
    }

    /// Next hops from the kernel's neighbour table, when it keeps them.
    fn kernel_neighbors(&mut self, now: Instant) {
        #[cfg(target_os = "linux")]
        if let Some(k) = &mut self.kneigh {
            k.poll(now, self.driver.service_mut().get_mut(), &mut self.stats);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = now;
    }

    /// Handles waiting commands; true if some are left for the next round.
    fn commands(&mut self, now: Instant) -> bool {
        for _ in 0..COMMAND_BUDGET {
            let Ok(cmd) = self.cmd.try_recv() else {
                return false;
            };
            match cmd {
                Command::Listen {
                    port,
                    shared,
                    reply,
                } => {
                    let engine = self.driver.service_mut().get_mut();
                    let r = engine.tcp_listen(port).map_err(SockError::from);
                    let r = r.and_then(|lh| {
                        if let Some(c) = &self.claims
                            && let Err(e) = c.claim_port(L4::Tcp, port)
                        {
                            let _ = engine.tcp_unlisten(lh);
                            self.stats.claims_refused += u64::from(is_full(&e));
                            return Err(SockError::from(e));
                        }
                        self.listeners.push(Listening { lh, shared, port });
                        Ok(())
                    });
                    let _ = reply.send(r);
                }
                Command::Connect { remote, reply } => match self.connect(now, remote) {
                    Ok((h, port)) => match self.driver.service_mut().get_mut().tcp_addrs(h) {
                        Ok((local, remote)) => {
                            let sock =
                                SockShared::new(self.q, h, local, remote, self.inner.stream_buffer);
                            self.insert(Conn {
                                h,
                                sock: Arc::new(sock),
                                connect: Some(reply),
                                port,
                                claimed: self.claims.is_some().then_some((local, remote)),
                                fin_sent: false,
                                todo: false,
                            });
                        }
                        Err(e) => {
                            self.stats.connect_failures += 1;
                            let _ = reply.send(Err(e.into()));
                        }
                    },
                    Err(e) => {
                        self.stats.connect_failures += 1;
                        let _ = reply.send(Err(e));
                    }
                },
                Command::UdpBind {
                    addr,
                    shared,
                    reply,
                } => {
                    // Sockets the application dropped give their ports up
                    // first, so a bind right after a drop finds the port free.
                    self.take_dirty();
                    self.serve_udp_todo();
                    let q = self.q;
                    let engine = self.driver.service_mut().get_mut();
                    let claims = self.claims.as_deref();
                    let mut refused = 0;
                    let r = engine
                        .udp_bind(addr)
                        .map_err(SockError::from)
                        .and_then(|h| {
                            let local = engine.udp_info(h)?.local;
                            if let Some(c) = claims
                                && let Err(e) = c.claim_port(L4::Udp, local.port())
                            {
                                refused += u64::from(is_full(&e));
                                let _ = engine.udp_close(h);
                                return Err(SockError::from(e));
                            }
                            if shared.single {
                                lock(&shared.st).handle = Some(h);
                            }
                            Ok((h, local))
                        });
                    let r = r.map(|(h, local)| {
                        let idx = h.index();
                        if let Some(at) = shared.at.get(q) {
                            at.index.store(idx, Ordering::Release);
                        }
                        if self.udps.len() <= idx {
                            self.udps.resize_with(idx + 1, || None);
                        }
                        if let Some(slot) = self.udps.get_mut(idx) {
                            *slot = Some(UdpBound {
                                h,
                                shared,
                                todo: false,
                                watch: false,
                                claimed: claims.is_some().then_some(local.port()),
                            });
                        }
                        local
                    });
                    self.stats.claims_refused += refused;
                    let _ = reply.send(r);
                }
                Command::Run(f) => f(self.driver.service_mut().get_mut()),
                Command::Frame(bytes, meta) => {
                    self.driver
                        .service_mut()
                        .get_mut()
                        .handle_frame(now, &bytes, &meta);
                }
            }
        }
        true
    }

    /// An active open from this queue: with steering, from a source port whose
    /// replies hash to this queue. With claims, the 4-tuple is claimed before
    /// the SYN goes: a source port the kernel's stack uses is skipped.
    fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
    ) -> Result<(SocketHandle, Option<u16>), SockError> {
        let claims = self.claims.clone();
        let engine = self.driver.service_mut().get_mut();
        let cfg = engine.config();
        let no_address = SockError::Connect(ConnectError::NoAddress);
        let local_ip = match remote.ip() {
            IpAddr::V4(_) => IpAddr::V4(cfg.ipv4.ok_or(no_address)?.addr),
            IpAddr::V6(_) => IpAddr::V6(cfg.ipv6.ok_or(no_address)?.addr),
        };
        let (claims, ports) = match (claims, self.ports.as_mut()) {
            (None, None) => {
                return match engine.tcp_connect(now, remote) {
                    Ok(h) => Ok((h, None)),
                    Err(ConnectError::NoPorts) => Err(SockError::NoPorts {
                        remote,
                        steered: None,
                    }),
                    Err(e) => Err(SockError::Connect(e)),
                };
            }
            (claims, ports) => (claims, ports),
        };
        let flow = match (remote.ip(), local_ip) {
            (IpAddr::V4(r), IpAddr::V4(l)) => FlowTuple::tcp4(l, 0, r, remote.port()),
            (IpAddr::V6(r), IpAddr::V6(l)) => FlowTuple::tcp6(l, 0, r, remote.port()),
            _ => return Err(no_address),
        };
        let steered = ports.as_ref().map(|(p4, p6)| {
            if remote.is_ipv4() {
                p4.range()
            } else {
                p6.range()
            }
        });
        let no_ports = SockError::NoPorts { remote, steered };
        let queue = u16::try_from(self.q).map_err(|_| no_ports)?;
        let mut busy = Vec::new();
        let mut result = Err(no_ports);
        // A port still in TIME-WAIT towards the same peer is refused by the
        // engine, one the kernel uses by the claim: keep it aside and take
        // another.
        let mut ports = ports;
        for _ in 0..16 {
            let port = match ports.as_mut() {
                Some((p4, p6)) => {
                    let alloc = if remote.is_ipv4() { p4 } else { p6 };
                    let Ok(port) = alloc.allocate(&flow, queue) else {
                        break;
                    };
                    port
                }
                None => self.random_port.next(),
            };
            let local = SocketAddr::new(local_ip, port);
            if let Some(c) = &claims {
                match c.claim_flow(L4::Tcp, local, remote) {
                    Ok(()) => {}
                    Err(ClaimError::InUse { .. } | ClaimError::Exists) => {
                        busy.push(port);
                        continue;
                    }
                    Err(e) => {
                        busy.push(port);
                        self.stats.claims_refused += u64::from(is_full(&e));
                        result = Err(e.into());
                        break;
                    }
                }
            }
            let unclaim = || {
                if let Some(c) = &claims {
                    c.release_flow(L4::Tcp, local, remote);
                }
            };
            match engine.tcp_connect_from(now, port, remote) {
                Ok(h) => {
                    result = Ok((h, ports.is_some().then_some(port)));
                    break;
                }
                Err(ConnectError::AddrInUse) => {
                    unclaim();
                    busy.push(port);
                }
                Err(e) => {
                    unclaim();
                    busy.push(port);
                    result = Err(SockError::Connect(e));
                    break;
                }
            }
        }
        if let Some((p4, p6)) = ports {
            let alloc = if remote.is_ipv4() { p4 } else { p6 };
            for p in busy {
                let _ = alloc.release(p);
            }
        }
        result
    }

    /// Gives up the claims of streams that are gone once the engine no longer
    /// holds their 4-tuples (every 10 ms at most: closing streams are looked
    /// up in the engine's table, not per packet).
    fn release_claims(&mut self, now: Instant, all: bool) {
        if self.releasing.is_empty() || (!all && now < self.release_check) {
            return;
        }
        self.release_check = now + Duration::from_millis(10);
        let Some(claims) = &self.claims else {
            self.releasing.clear();
            return;
        };
        let engine = self.driver.service_mut().get_mut();
        self.releasing.retain(|&(local, remote)| {
            if !all && engine.tcp_holds(local, remote) {
                return true;
            }
            claims.release_flow(L4::Tcp, local, remote);
            false
        });
    }

    /// Copies neighbour-discovery frames to the other queues' engines.
    fn forward(&mut self, frames: &mut Vec<(Vec<u8>, OffloadMeta)>) {
        if self.inner.queues.len() < 2 {
            frames.clear();
            return;
        }
        for (bytes, meta) in frames.drain(..) {
            for (q, other) in self.inner.queues.iter().enumerate() {
                if q == self.q {
                    continue;
                }
                if other
                    .cmd
                    .try_send(Command::Frame(bytes.clone(), meta))
                    .is_ok()
                {
                    self.stats.forwarded += 1;
                    other.wake.kick();
                }
            }
        }
    }

    /// Moves established connections from the engine's listeners to the
    /// application's, and stops listeners the application dropped.
    fn accept_all(&mut self) {
        let engine = self.driver.service_mut().get_mut();
        let mut accepted = Vec::new();
        let (q, buffer, backlog) = (self.q, self.inner.stream_buffer, self.backlog);
        let claims = self.claims.as_deref();
        let mut refused = 0u64;
        self.listeners.retain(|l| {
            let mut st = lock(&l.shared.st);
            if st.closed {
                let _ = engine.tcp_unlisten(l.lh);
                if let Some(c) = claims {
                    c.release_port(L4::Tcp, l.port);
                }
                return false;
            }
            let mut woke = false;
            while st.ready.len() < backlog {
                let Ok(h) = engine.tcp_accept(l.lh) else {
                    break;
                };
                let Ok((local, remote)) = engine.tcp_addrs(h) else {
                    continue;
                };
                // Claimed so it outlives its listener; a full table resets it
                // rather than leave its segments to the kernel.
                if let Some(c) = claims
                    && let Err(e) = c.claim_flow(L4::Tcp, local, remote)
                {
                    refused += u64::from(is_full(&e));
                    let _ = engine.tcp_abort(h);
                    continue;
                }
                let sock = Arc::new(SockShared::new(q, h, local, remote, buffer));
                st.ready.push_back(Arc::clone(&sock));
                accepted.push(Conn {
                    h,
                    sock,
                    connect: None,
                    port: None,
                    claimed: claims.is_some().then_some((local, remote)),
                    fin_sent: false,
                    todo: false,
                });
                woke = true;
            }
            let w = if woke { st.waker.take() } else { None };
            drop(st);
            wake(w);
            true
        });
        self.stats.passive_opens += accepted.len() as u64;
        self.stats.claims_refused += refused;
        for c in accepted {
            self.insert(c);
        }
    }

    /// Adds a stream, to be served this round.
    fn insert(&mut self, c: Conn) {
        let idx = c.h.index();
        if self.conns.len() <= idx {
            self.conns.resize_with(idx + 1, || None);
        }
        if let Some(slot) = self.conns.get_mut(idx) {
            if slot.is_none() {
                self.streams += 1;
            }
            *slot = Some(c);
        }
        self.note(idx);
        self.stats.streams = self.streams as u64;
    }

    /// Puts stream `idx` on this round's list.
    fn note(&mut self, idx: usize) {
        if let Some(Some(c)) = self.conns.get_mut(idx)
            && !c.todo
        {
            c.todo = true;
            self.todo.push(idx);
        }
    }

    /// Puts the stream of engine handle `h` on this round's list, if it is
    /// still the one there.
    fn note_handle(&mut self, h: SocketHandle) {
        if let Some(Some(c)) = self.conns.get(h.index())
            && c.h == h
        {
            self.note(h.index());
        }
    }

    /// Serves the streams that need it: those the application side changed
    /// (the queue's dirty list) and those the engine reports events for
    /// (pending connects, staged data both ways, shutdown, close, errors,
    /// wake-ups). Idle streams are not visited.
    fn serve(&mut self) {
        self.take_dirty();
        loop {
            while let Some(ev) = self.driver.service_mut().get_mut().poll_event() {
                match ev {
                    Event::Connected(h)
                    | Event::Readable(h)
                    | Event::Writable(h)
                    | Event::Closed(h)
                    | Event::Failed(h, _) => self.note_handle(h),
                    Event::UdpReadable(h) | Event::UdpWritable(h) => {
                        if let Some(Some(b)) = self.udps.get(h.index())
                            && b.h == h
                        {
                            self.note_udp(h.index());
                        }
                    }
                    Event::Dhcp
                    | Event::DnsServers
                    | Event::AddressAdded(_)
                    | Event::AddressRemoved(_)
                        if self.q == 0 =>
                    {
                        self.inner.net.wake();
                    }
                    _ => {}
                }
            }
            self.serve_udp_todo();
            if self.todo.is_empty() {
                break;
            }
            let mut todo = std::mem::take(&mut self.todo);
            let engine = self.driver.service_mut().get_mut();
            for &idx in &todo {
                let Some(Some(c)) = self.conns.get_mut(idx) else {
                    continue;
                };
                c.todo = false;
                self.stats.served += 1;
                if service(engine, c, &mut self.stats) {
                    continue;
                }
                if let Some(Some(c)) = self.conns.get_mut(idx).map(Option::take) {
                    self.streams = self.streams.saturating_sub(1);
                    if let Some(tuple) = c.claimed {
                        self.releasing.push(tuple);
                    }
                    if let (Some(port), Some((p4, p6))) = (c.port, self.ports.as_mut()) {
                        let alloc = if c.sock.remote.is_ipv4() { p4 } else { p6 };
                        let _ = alloc.release(port);
                    }
                }
            }
            todo.clear();
            self.todo = todo;
            // Serving called the engine (sends, reads, closes): what that
            // changed is served in the same round.
        }
        self.stats.streams = self.streams as u64;
    }

    /// Takes the queue's dirty lists: the streams and UDP bindings the
    /// application side changed go on this round's lists.
    fn take_dirty(&mut self) {
        if let Some(q) = self.inner.queues.get(self.q)
            && q.dirty.pending.swap(false, Ordering::AcqRel)
        {
            std::mem::swap(&mut *lock(&q.dirty.list), &mut self.dirty);
            std::mem::swap(&mut *lock(&q.dirty.udp), &mut self.udp_dirty);
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for sock in dirty.drain(..) {
            // Cleared before it is served: a change made from now on puts
            // it on the list again.
            sock.dirty.store(false, Ordering::Release);
            if sock.queue == self.q {
                self.note_handle(sock.h);
            }
        }
        self.dirty = dirty;
        let mut udp = std::mem::take(&mut self.udp_dirty);
        for sock in udp.drain(..) {
            if let Some(idx) = sock.undirty(self.q)
                && let Some(Some(b)) = self.udps.get(idx)
                && Arc::ptr_eq(&b.shared, &sock)
            {
                self.note_udp(idx);
            }
        }
        self.udp_dirty = udp;
    }

    /// Puts UDP binding `idx` on this round's list.
    fn note_udp(&mut self, idx: usize) {
        if let Some(Some(b)) = self.udps.get_mut(idx)
            && !b.todo
        {
            b.todo = true;
            self.udp_todo.push(idx);
        }
    }

    /// Serves the UDP bindings on this round's list.
    fn serve_udp_todo(&mut self) {
        if self.udp_todo.is_empty() {
            return;
        }
        let mut todo = std::mem::take(&mut self.udp_todo);
        let engine = self.driver.service_mut().get_mut();
        for &idx in &todo {
            let Some(slot) = self.udps.get_mut(idx) else {
                continue;
            };
            let Some(b) = slot.as_mut() else {
                continue;
            };
            b.todo = false;
            self.stats.served += 1;
            match service_udp(engine, self.q, b) {
                Served::Gone => {
                    if let (Some(port), Some(c)) = (b.claimed, &self.claims) {
                        c.release_port(L4::Udp, port);
                    }
                    *slot = None;
                }
                Served::Waiting if !b.watch => {
                    b.watch = true;
                    self.udp_watch.push(idx);
                }
                Served::Waiting | Served::Done => {}
            }
        }
        todo.clear();
        self.udp_todo = todo;
    }

    /// Serves the UDP bindings whose writers wait for room (after transmit
    /// made some); they leave the list once woken.
    fn watch_udp(&mut self) {
        if self.udp_watch.is_empty() {
            return;
        }
        for i in 0..self.udp_watch.len() {
            let idx = self.udp_watch[i];
            if let Some(Some(b)) = self.udps.get_mut(idx) {
                b.watch = false;
            }
            self.note_udp(idx);
        }
        self.udp_watch.clear();
        self.serve_udp_todo();
    }

    fn publish(&mut self) {
        let d = self.driver.stats();
        self.stats.polls = d.polls;
        self.stats.rx_frames = d.rx_frames;
        self.stats.tx_frames = d.tx_frames;
        self.stats.tx_dropped = d.tx_refused + d.tx_link_down;
        if d.tx_link_down > self.link_down_seen {
            if !self.link_down {
                tracing::warn!(
                    queue = self.q,
                    "the link is down: frames are dropped (and counted) until it comes up"
                );
                self.link_down = true;
            }
            self.link_down_seen = d.tx_link_down;
            self.link_tx_seen = d.tx_frames;
        } else if self.link_down && d.tx_frames > self.link_tx_seen {
            tracing::info!(queue = self.q, "the link is up: frames flow");
            self.link_down = false;
        }
        if let Some(q) = self.inner.queues.get(self.q) {
            q.stats.store(&self.stats);
        }
    }

    /// Sleeps until the queue signals (frames, or a wake-up from the
    /// application), the deadline, or the longest wait.
    fn wait(&self, now: Instant, deadline: Option<Instant>) -> Result<(), NicError> {
        let timeout = deadline.map_or(self.max_wait, |d| {
            d.saturating_duration_since(now).min(self.max_wait)
        });
        if timeout.is_zero() {
            return Ok(());
        }
        match (
            &self.readiness,
            self.inner.queues.get(self.q).map(|q| &q.wake),
        ) {
            (Readiness::Notify(n), _) => {
                n.wait_timeout(timeout);
            }
            #[cfg(target_os = "linux")]
            (Readiness::Fd(fd), Some(Wake::Fd(k))) => k.wait(*fd, timeout)?,
            #[allow(unreachable_patterns)]
            (other, _) => {
                other.wait(timeout.min(self.fd_poll))?;
            }
        }
        Ok(())
    }

    /// The runtime stopped: every stream, connect and listener fails.
    fn teardown(&mut self) {
        self.streams = 0;
        let conns = self.conns.iter().flatten().filter_map(|c| c.claimed);
        self.releasing.extend(conns);
        self.release_claims(Instant::ZERO, true);
        if let Some(claims) = &self.claims {
            for l in &self.listeners {
                claims.release_port(L4::Tcp, l.port);
            }
        }
        for c in self.conns.drain(..).flatten() {
            if let Some(reply) = c.connect {
                let _ = reply.send(Err(ABORTED));
            }
            c.sock.fail(ABORTED);
        }
        self.udp_todo.clear();
        self.udp_watch.clear();
        for b in self.udps.drain(..).flatten() {
            if let (Some(port), Some(c)) = (b.claimed, &self.claims) {
                c.release_port(L4::Udp, port);
            }
            b.shared.fail(ConnectionError::Aborted);
        }
        for l in self.listeners.drain(..) {
            let w = {
                let mut st = lock(&l.shared.st);
                st.error = Some(ConnectionError::Aborted);
                st.waker.take()
            };
            wake(w);
        }
        self.cmd.close();
        while let Ok(cmd) = self.cmd.try_recv() {
            match cmd {
                Command::Listen { reply, .. } => {
                    let _ = reply.send(Err(ABORTED));
                }
                Command::Connect { reply, .. } => {
                    let _ = reply.send(Err(ABORTED));
                }
                Command::UdpBind { reply, .. } => {
                    let _ = reply.send(Err(ABORTED));
                }
                Command::Run(_) | Command::Frame(..) => {}
            }
        }
    }
}

/// Serves one stream; false once it is finished and can be forgotten.
fn service(engine: &mut Engine, c: &mut Conn, stats: &mut QueueStats) -> bool {
    let h = c.h;
    if let Some(reply) = c.connect.take() {
        let failed = match engine.tcp_readiness(h) {
            Ok(r) => r.error.map(SockError::from),
            Err(e) => Some(e.into()),
        };
        if let Some(e) = failed {
            stats.connect_failures += 1;
            let _ = reply.send(Err(e));
            let _ = engine.tcp_abort(h);
            return false;
        }
        match engine.tcp_state(h) {
            Ok(TcpState::SynSent | TcpState::SynReceived) => {
                if reply.is_closed() {
                    // The connect call was given up.
                    let _ = engine.tcp_abort(h);
                    return false;
                }
                c.connect = Some(reply);
                return true;
            }
            _ => {
                stats.active_opens += 1;
                if reply.send(Ok(Arc::clone(&c.sock))).is_err() {
                    let _ = engine.tcp_abort(h);
                    return false;
                }
            }
        }
    }
    let mut guard = lock(&c.sock.st);
    let st = &mut *guard;
    // Closed with a zero linger time (`SO_LINGER` 0): a reset now, what was
    // staged and what the engine holds discarded, as Linux's close(2) does.
    if st.closed && st.abort_on_close {
        let staged = st.tx.len();
        st.tx.consume(staged);
        drop(guard);
        let _ = engine.tcp_abort(h);
        return false;
    }
    if let Some(on) = st.set_nodelay.take() {
        let _ = engine.tcp_set_nodelay(h, on);
    }
    if let Some(ka) = st.set_keepalive.take() {
        let _ = engine.tcp_set_keepalive(h, ka);
    }
    let (mut wake_r, mut wake_w) = (false, false);
    if st.error.is_none() {
        if !st.tx.is_empty() {
            let before = st.tx.len();
            loop {
                let (a, _) = st.tx.readable();
                let len = a.len();
                if len == 0 {
                    break;
                }
                match engine.tcp_send(h, a) {
                    Ok(n) => {
                        st.tx.consume(n);
                        if n < len {
                            break;
                        }
                    }
                    Err(SendError::WouldBlock) => break,
                    Err(e) => {
                        st.error = Some(e.into());
                        break;
                    }
                }
            }
            wake_w = st.tx.len() < before && 2 * st.tx.free() >= st.tx.capacity();
        }
        if st.shutdown && st.tx.is_empty() && !c.fin_sent && st.error.is_none() {
            let _ = engine.tcp_shutdown(h);
            c.fin_sent = true;
        }
        // A stream its task reads on this thread keeps its bytes in the
        // engine (the task reads them there); others are staged. (Asked
        // first: the receive ring gets its storage only when bytes come.)
        let readable = engine.tcp_readiness(h).is_ok_and(|r| r.readable);
        if readable && !st.eof && !st.closed && !st.local && st.error.is_none() {
            loop {
                let area = st.rx.writable();
                if area.is_empty() {
                    st.rx_stalled = true;
                    break;
                }
                match engine.tcp_recv(h, area) {
                    Ok(0) => {
                        st.eof = true;
                        wake_r = true;
                        break;
                    }
                    Ok(n) => {
                        st.rx.produce(n);
                        wake_r = true;
                    }
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => {
                        st.error = Some(e.into());
                        break;
                    }
                }
            }
        }
        if st.error.is_none() {
            match engine.tcp_readiness(h) {
                Ok(r) => {
                    st.error = r.error.map(SockError::from);
                    // Tasks that read and write the engine directly wait on
                    // its readiness: readable bytes (or the end), room to send
                    // (a writer waits on the staging ring only while the ring
                    // holds bytes).
                    wake_r |= st.local && r.readable && st.read_waker.is_some();
                    wake_w |= st.tx.is_empty() && r.writable && st.write_waker.is_some();
                }
                Err(e) => st.error = Some(e.into()),
            }
        }
        if st.error.is_some() {
            wake_r = true;
            wake_w = true;
        }
    }
    let close = st.closed && (st.tx.is_empty() || st.error.is_some());
    let r = if wake_r { st.read_waker.take() } else { None };
    let w = if wake_w { st.write_waker.take() } else { None };
    drop(guard);
    wake(r);
    wake(w);
    if close {
        let _ = engine.tcp_close(h);
        return false;
    }
    true
}

/// The error of every socket of a runtime that stopped.
const ABORTED: SockError = SockError::Connection(ConnectionError::Aborted);

/// The `std::io` error for a failed socket call, of the kind the engine's
/// error documents.
pub(crate) fn to_io(e: impl Into<io::Error>) -> io::Error {
    e.into()
}

/// What an active open that found no free source port says: which range ran
/// out, and how to get more.
fn no_ports(remote: SocketAddr, steered: Option<(u16, u16)>, queues: usize) -> String {
    let (low, high) = linerate_toe::EPHEMERAL_PORTS;
    let per_remote = usize::from(high - low) + 1;
    match steered {
        Some((first, last)) => {
            let n = usize::from(last.saturating_sub(first)) + 1;
            format!(
                "no free source port for a connection to {remote}: none is left on this \
                 queue of the {n} ports of RuntimeConfig::ephemeral ({first}-{last}), which \
                 every destination shares and steering splits over {queues} queue(s); widen \
                 RuntimeConfig::ephemeral (the engine's own range, without steering, is \
                 {per_remote} ports per remote address and port)"
            )
        }
        None => {
            format!(
                "no free source port for a connection to {remote}: all {per_remote} ports of \
                 the engine's range {low}-{high} have a connection to that address and port \
                 (each remote address and port has a range of its own); connect to more \
                 server ports or addresses"
            )
        }
    }
}
