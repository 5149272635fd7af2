//! Names to addresses over the runtime: a [`Resolver`] drives
//! [`linerate_dns::Resolver`] (the sans-IO stub resolver) over the runtime's
//! UDP and TCP sockets, and [`ToSocketAddrs`] lets
//! [`TcpStream::connect`](crate::TcpStream::connect) take `"host:port"`.
//!
//! The driver is one task on a queue thread ([`crate::local`]): it owns the
//! sans-IO resolver, opens a [`UdpSocket`] on a random source port for every
//! exchange (every try of a question: RFC 5452's defence, with the random
//! query ID) and a [`TcpStream`] when an answer is truncated, feeds them what
//! arrives, and sleeps until the resolver's next deadline on the queue loop's
//! clock. [`Resolver`] handles, which any thread or task may hold, send it
//! lookups over a channel; the lookups share one cache. Dropping every handle
//! ends the task.
//!
//! ```
//! use linerate_nic::{MemNic, NicCaps};
//! use linerate_rt::{Runtime, RuntimeConfig, dns::Resolver};
//! use linerate_toe::Config;
//! use std::net::Ipv4Addr;
//!
//! let (a, _b) = MemNic::pair(NicCaps::full(), NicCaps::full());
//! let cfg = Config::new([2, 0, 0, 0, 0, 1]).with_ipv4(Ipv4Addr::new(10, 0, 0, 1), 24);
//! let rt = Runtime::start(a, RuntimeConfig::new(cfg))?;
//! // A server nobody answers for: one try of 50 ms, then the lookup fails.
//! let mut dns = linerate_dns::Config::new(vec!["10.0.0.53:53".parse()?]);
//! dns.timeout = std::time::Duration::from_millis(50);
//! dns.attempts = 1;
//! let resolver = Resolver::start(rt.handle(), dns)?;
//! let e = resolver.lookup_host_blocking("www.example.test").unwrap_err();
//! assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::local::{self, Sleep};
use crate::runtime::Handle;
use crate::{TcpStream, UdpSocket};
use linerate_dns::{ExchangeId, Io, Lookup, LookupError, LookupId, Name, RecordType, Stats};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, oneshot};

/// Lookups waiting for the driver task before callers wait.
const REQUESTS: usize = 64;

type Reply = oneshot::Sender<Result<Lookup, LookupError>>;

enum Request {
    Lookup {
        name: Name,
        /// `None`: AAAA and A.
        rtype: Option<RecordType>,
        reply: Reply,
    },
    Stats(oneshot::Sender<Stats>),
}

/// A handle to a resolver running on a runtime (see the [module docs](self)).
/// Clones share the resolver and its cache.
#[derive(Debug, Clone)]
pub struct Resolver {
    tx: mpsc::Sender<Request>,
}

impl core::fmt::Debug for Request {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Request")
    }
}

/// The `std::io` form of a lookup's failure: `NotFound` for NXDOMAIN and no
/// records, `TimedOut`, `Other` for server failures, `InvalidData` for a
/// CNAME chain too long; the [`LookupError`] is the inner error.
fn lookup_error(e: LookupError) -> io::Error {
    let kind = match e {
        LookupError::NxDomain | LookupError::NoRecords => io::ErrorKind::NotFound,
        LookupError::TimedOut => io::ErrorKind::TimedOut,
        LookupError::CnameChainTooLong => io::ErrorKind::InvalidData,
        LookupError::Cancelled => io::ErrorKind::Interrupted,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

fn stopped() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the resolver has stopped (its runtime stopped)",
    )
}

impl Resolver {
    /// Starts a resolver asking `cfg`'s servers, its driver a task on queue 0.
    ///
    /// Errors: `InvalidInput` if `cfg` fails [`linerate_dns::Config::validate`];
    /// as [`Handle::spawn_on`] otherwise.
    pub fn start(rt: &Handle, cfg: linerate_dns::Config) -> io::Result<Resolver> {
        Resolver::start_on(rt, 0, cfg)
    }

    /// [`Resolver::start`] with the driver on `queue`.
    pub fn start_on(rt: &Handle, queue: usize, cfg: linerate_dns::Config) -> io::Result<Resolver> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let seed = (u128::from(getrandom::u64().map_err(io::Error::other)?) << 64)
            | u128::from(getrandom::u64().map_err(io::Error::other)?);
        let (tx, rx) = mpsc::channel(REQUESTS);
        let handle = rt.clone();
        rt.spawn_on(queue, move || async move {
            // Validated above: `new` cannot fail.
            if let Ok(r) = linerate_dns::Resolver::new(cfg, seed) {
                Driver::new(handle, r, rx).run().await;
            }
        })?;
        Ok(Resolver { tx })
    }

    fn request(
        name: &str,
        rtype: Option<RecordType>,
    ) -> io::Result<(Request, oneshot::Receiver<Result<Lookup, LookupError>>)> {
        let name =
            Name::from_ascii(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (reply, rx) = oneshot::channel();
        Ok((Request::Lookup { name, rtype, reply }, rx))
    }

    async fn ask(&self, name: &str, rtype: Option<RecordType>) -> io::Result<Lookup> {
        let (req, rx) = Resolver::request(name, rtype)?;
        self.tx.send(req).await.map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())?.map_err(lookup_error)
    }

    /// The IPv6 and IPv4 addresses of `name` (both questions at once; IPv6
    /// first). Errors: `InvalidInput` for a name that is not one, and those
    /// of [`LookupError`] as described there (the inner error), `NotConnected`
    /// once the runtime has stopped.
    pub async fn lookup_host(&self, name: &str) -> io::Result<Lookup> {
        self.ask(name, None).await
    }

    /// Records of one type ([`RecordType::A`] or [`RecordType::AAAA`]) of `name`.
    pub async fn lookup(&self, name: &str, rtype: RecordType) -> io::Result<Lookup> {
        self.ask(name, Some(rtype)).await
    }

    /// [`Resolver::lookup_host`] for a thread outside any async runtime (it
    /// blocks; calling it from a tokio task panics, as tokio's blocking calls
    /// do). On a queue thread of a linerate runtime it fails with
    /// `WouldBlock` rather than stall that queue.
    pub fn lookup_host_blocking(&self, name: &str) -> io::Result<Lookup> {
        self.ask_blocking(name, None)
    }

    /// [`Resolver::lookup`], blocking as [`Resolver::lookup_host_blocking`].
    pub fn lookup_blocking(&self, name: &str, rtype: RecordType) -> io::Result<Lookup> {
        self.ask_blocking(name, Some(rtype))
    }

    fn ask_blocking(&self, name: &str, rtype: Option<RecordType>) -> io::Result<Lookup> {
        if local::queue().is_some() {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "a blocking lookup on a queue thread would stall the queue",
            ));
        }
        let (req, rx) = Resolver::request(name, rtype)?;
        self.tx.blocking_send(req).map_err(|_| stopped())?;
        rx.blocking_recv()
            .map_err(|_| stopped())?
            .map_err(lookup_error)
    }

    /// The resolver's counters ([`linerate_dns::Stats`]): queries over UDP
    /// and TCP, timeouts, cache hits, answers dropped as mismatched.
    pub async fn stats(&self) -> io::Result<Stats> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(Request::Stats(tx))
            .await
            .map_err(|_| stopped())?;
        rx.await.map_err(|_| stopped())
    }
}

type Pending<T> = Pin<Box<dyn Future<Output = io::Result<T>>>>;

/// An exchange's socket, as the driver holds it.
enum Sock {
    /// Binding a UDP socket; the datagrams to send once bound.
    Binding(Pending<UdpSocket>, SocketAddr, VecDeque<Vec<u8>>),
    Udp(UdpSocket, SocketAddr, VecDeque<Vec<u8>>),
    /// Connecting; the bytes to write once connected.
    Connecting(Pending<TcpStream>, Vec<u8>),
    /// Connected; the bytes left to write.
    Tcp(TcpStream, Vec<u8>),
}

/// The driver task's state.
struct Driver {
    rt: Handle,
    r: linerate_dns::Resolver,
    rx: mpsc::Receiver<Request>,
    waiters: HashMap<LookupId, Reply>,
    socks: BTreeMap<ExchangeId, Sock>,
    /// The sleep until the resolver's deadline, and that deadline.
    sleep: Option<(linerate_dns::Instant, Pin<Box<Sleep>>)>,
    buf: Vec<u8>,
    /// Every handle is gone: finish what runs, take nothing new.
    closing: bool,
}

impl Driver {
    fn new(rt: Handle, r: linerate_dns::Resolver, rx: mpsc::Receiver<Request>) -> Driver {
        Driver {
            rt,
            r,
            rx,
            waiters: HashMap::new(),
            socks: BTreeMap::new(),
            sleep: None,
            buf: vec![0; 65_535],
            closing: false,
        }
    }

    fn now(&self) -> linerate_dns::Instant {
        linerate_dns::Instant::from_nanos(self.rt.now().as_nanos())
    }

    async fn run(mut self) {
        poll_fn(|cx| self.poll(cx)).await;
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let mut progress = self.requests(cx);
            progress |= self.io();
            progress |= self.sockets(cx);
            progress |= self.answers();
            progress |= self.timer(cx);
            if self.closing && self.waiters.is_empty() && self.socks.is_empty() {
                return Poll::Ready(());
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    fn requests(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        while !self.closing {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Request::Lookup { name, rtype, reply })) => {
                    let now = self.now();
                    let id = match rtype {
                        Some(t) => self.r.lookup(now, &name, t),
                        None => self.r.lookup_host_name(now, &name),
                    };
                    self.waiters.insert(id, reply);
                    progress = true;
                }
                Poll::Ready(Some(Request::Stats(reply))) => {
                    let _ = reply.send(self.r.stats());
                }
                Poll::Ready(None) => self.closing = true,
                Poll::Pending => break,
            }
        }
        // A caller that stopped waiting: its lookup stops too.
        let gone: Vec<LookupId> = self
            .waiters
            .iter()
            .filter(|(_, w)| w.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.r.cancel(id);
            progress = true;
        }
        progress
    }

    /// Carries out what the resolver asked.
    fn io(&mut self) -> bool {
        let mut progress = false;
        while let Some(io) = self.r.poll_io() {
            progress = true;
            match io {
                Io::UdpSend {
                    exchange,
                    server,
                    data,
                } => match self.socks.get_mut(&exchange) {
                    Some(Sock::Binding(_, _, q) | Sock::Udp(_, _, q)) => q.push_back(data),
                    Some(_) => {}
                    None => {
                        let rt = self.rt.clone();
                        // Port 0: the engine picks a free ephemeral port at random.
                        let any = match server {
                            SocketAddr::V4(_) => SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
                            SocketAddr::V6(_) => SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0)),
                        };
                        let bind: Pending<UdpSocket> =
                            Box::pin(async move { UdpSocket::bind(&rt, any).await });
                        self.socks.insert(
                            exchange,
                            Sock::Binding(bind, server, VecDeque::from([data])),
                        );
                    }
                },
                Io::TcpConnect {
                    exchange,
                    server,
                    data,
                } => {
                    let rt = self.rt.clone();
                    let connect: Pending<TcpStream> =
                        Box::pin(async move { TcpStream::connect(&rt, server).await });
                    self.socks.insert(exchange, Sock::Connecting(connect, data));
                }
                Io::Close { exchange } => {
                    self.socks.remove(&exchange);
                }
            }
        }
        progress
    }

    /// Moves every socket along: binds and connects, sends, receives.
    fn sockets(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        let keys: Vec<ExchangeId> = self.socks.keys().copied().collect();
        for ex in keys {
            let Some(sock) = self.socks.remove(&ex) else {
                continue;
            };
            let (next, moved) = self.step(cx, ex, sock);
            progress |= moved;
            if let Some(s) = next {
                self.socks.insert(ex, s);
            }
        }
        progress
    }

    /// One socket's step: the socket to keep (`None`: dropped) and whether
    /// anything happened.
    fn step(&mut self, cx: &mut Context<'_>, ex: ExchangeId, sock: Sock) -> (Option<Sock>, bool) {
        match sock {
            Sock::Binding(mut fut, server, q) => match fut.as_mut().poll(cx) {
                Poll::Ready(Ok(s)) => (Some(Sock::Udp(s, server, q)), true),
                // The try goes unanswered and times out in the resolver.
                Poll::Ready(Err(e)) => {
                    tracing::debug!("dns: cannot bind a UDP socket: {e}");
                    (None, true)
                }
                Poll::Pending => (Some(Sock::Binding(fut, server, q)), false),
            },
            Sock::Udp(s, server, mut q) => {
                let mut moved = false;
                while let Some(d) = q.front() {
                    match s.poll_send_to(cx, d, server) {
                        Poll::Ready(r) => {
                            if let Err(e) = r {
                                tracing::debug!("dns: send to {server}: {e}");
                            }
                            q.pop_front();
                            moved = true;
                        }
                        Poll::Pending => break,
                    }
                }
                loop {
                    let mut rb = ReadBuf::new(&mut self.buf);
                    match s.poll_recv_from(cx, &mut rb) {
                        Poll::Ready(Ok(from)) => {
                            let n = rb.filled().len();
                            let now = self.now();
                            let data = self.buf.get(..n).unwrap_or_default();
                            self.r.handle_udp(now, ex, from, data);
                            moved = true;
                        }
                        Poll::Ready(Err(_)) | Poll::Pending => break,
                    }
                }
                (Some(Sock::Udp(s, server, q)), moved)
            }
            Sock::Connecting(mut fut, data) => match fut.as_mut().poll(cx) {
                Poll::Ready(Ok(s)) => (Some(Sock::Tcp(s, data)), true),
                Poll::Ready(Err(e)) => {
                    tracing::debug!("dns: TCP connect: {e}");
                    let now = self.now();
                    self.r.handle_tcp_closed(now, ex);
                    (None, true)
                }
                Poll::Pending => (Some(Sock::Connecting(fut, data)), false),
            },
            Sock::Tcp(mut s, mut out) => {
                let mut moved = false;
                while !out.is_empty() {
                    match Pin::new(&mut s).poll_write(cx, &out) {
                        Poll::Ready(Ok(n)) if n > 0 => {
                            out.drain(..n);
                            moved = true;
                        }
                        Poll::Ready(_) => {
                            let now = self.now();
                            self.r.handle_tcp_closed(now, ex);
                            return (None, true);
                        }
                        Poll::Pending => break,
                    }
                }
                loop {
                    let mut rb = ReadBuf::new(&mut self.buf);
                    match Pin::new(&mut s).poll_read(cx, &mut rb) {
                        Poll::Ready(Ok(())) if !rb.filled().is_empty() => {
                            let n = rb.filled().len();
                            let now = self.now();
                            let data = self.buf.get(..n).unwrap_or_default();
                            self.r.handle_tcp(now, ex, data);
                            moved = true;
                        }
                        Poll::Ready(_) => {
                            // The end of the stream, or a failure.
                            let now = self.now();
                            self.r.handle_tcp_closed(now, ex);
                            return (None, true);
                        }
                        Poll::Pending => break,
                    }
                }
                (Some(Sock::Tcp(s, out)), moved)
            }
        }
    }

    fn answers(&mut self) -> bool {
        let mut progress = false;
        while let Some((id, result)) = self.r.poll_answer() {
            if let Some(w) = self.waiters.remove(&id) {
                let _ = w.send(result);
            }
            progress = true;
        }
        progress
    }

    /// Runs the resolver's timers; sleeps until the next.
    fn timer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.r.poll_timeout() else {
            self.sleep = None;
            return false;
        };
        let now = self.now();
        if deadline <= now {
            self.sleep = None;
            self.r.handle_timeout(now);
            return true;
        }
        let sleep = match &mut self.sleep {
            Some((at, s)) if *at == deadline => s,
            slot => {
                let d = deadline.saturating_duration_since(now);
                &mut slot.insert((deadline, Box::pin(local::sleep(d)))).1
            }
        };
        if sleep.as_mut().poll(cx).is_ready() {
            self.sleep = None;
            let now = self.now();
            self.r.handle_timeout(now.max(deadline));
            return true;
        }
        false
    }
}

mod sealed {
    use std::net::SocketAddr;

    /// What a [`super::ToSocketAddrs`] stands for.
    #[derive(Debug)]
    pub enum Target {
        /// Addresses, no lookup needed.
        Addrs(Vec<SocketAddr>),
        /// A host name to look up, and the port.
        Host(String, u16),
    }

    pub trait Sealed {
        fn target(&self) -> std::io::Result<Target>;
    }
}

use sealed::{Sealed, Target};

/// What [`TcpStream::connect`](crate::TcpStream::connect) takes: a socket
/// address (`SocketAddr`, `(IpAddr, u16)`, ...), or a host and a port as
/// `"host:port"` or `("host", port)`. Text that is an address literal
/// (`"10.0.0.2:80"`, `"[2001:db8::1]:80"`) is used as it is; a name is looked
/// up with the runtime's resolver ([`Handle::resolver`]). Sealed: the
/// types listed here only.
pub trait ToSocketAddrs: Sealed {}

fn bad_target(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{what:?} is not host:port"),
    )
}

fn host_port(host: &str, port: u16) -> Target {
    // `[v6]` in the host part: the brackets are not the name's.
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match bare.parse::<IpAddr>() {
        Ok(ip) => Target::Addrs(vec![SocketAddr::new(ip, port)]),
        Err(_) => Target::Host(host.to_string(), port),
    }
}

impl Sealed for str {
    fn target(&self) -> io::Result<Target> {
        if let Ok(a) = self.parse::<SocketAddr>() {
            return Ok(Target::Addrs(vec![a]));
        }
        let (host, port) = self.rsplit_once(':').ok_or_else(|| bad_target(self))?;
        let port = port.parse::<u16>().map_err(|_| bad_target(self))?;
        if host.is_empty() {
            return Err(bad_target(self));
        }
        Ok(host_port(host, port))
    }
}
impl ToSocketAddrs for str {}

impl Sealed for String {
    fn target(&self) -> io::Result<Target> {
        self.as_str().target()
    }
}
impl ToSocketAddrs for String {}

impl<T: Sealed + ?Sized> Sealed for &T {
    fn target(&self) -> io::Result<Target> {
        (**self).target()
    }
}
impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {}

impl Sealed for (&str, u16) {
    fn target(&self) -> io::Result<Target> {
        Ok(host_port(self.0, self.1))
    }
}
impl ToSocketAddrs for (&str, u16) {}

impl Sealed for (String, u16) {
    fn target(&self) -> io::Result<Target> {
        Ok(host_port(&self.0, self.1))
    }
}
impl ToSocketAddrs for (String, u16) {}

macro_rules! addr_targets {
    ($($t:ty),*) => {$(
        impl Sealed for $t {
            fn target(&self) -> io::Result<Target> {
                Ok(Target::Addrs(vec![SocketAddr::from(*self)]))
            }
        }
        impl ToSocketAddrs for $t {}
    )*};
}

addr_targets!(
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    (IpAddr, u16),
    (Ipv4Addr, u16),
    (Ipv6Addr, u16)
);

/// The addresses `target` stands for, looked up with `rt`'s resolver if it
/// is a name.
pub(crate) async fn resolve(
    rt: &Handle,
    target: &(impl ToSocketAddrs + ?Sized),
) -> io::Result<Vec<SocketAddr>> {
    match target.target()? {
        Target::Addrs(a) => Ok(a),
        Target::Host(host, port) => {
            let l = rt.resolver()?.lookup_host(&host).await?;
            Ok(l.addrs
                .into_iter()
                .map(|ip| SocketAddr::new(ip, port))
                .collect())
        }
    }
}
