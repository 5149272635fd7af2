//! The tokio adaptor's [`UdpSocket`]: `bind`, `send_to`, `recv_from` over a
//! [`Runtime`](super::Runtime), in the shape of `tokio::net::UdpSocket`.
//!
//! The socket is bound on every queue's engine (RSS may put a datagram from any
//! peer on any queue, as with a listener); sends go out from one queue, the
//! socket's home. Datagrams move through two bounded staging queues shared with
//! the queue threads, as a stream's bytes do ([`super::net`]): `send_to` stages
//! the datagram and wakes the home queue, which hands it to its engine;
//! each queue thread moves datagrams its engine received into the receive
//! queue and wakes the reader. When the receive queue is full, datagrams stay
//! in the engines' own bounded queues, which drop (and count) the excess.
//!
//! A socket bound on one queue ([`UdpSocket::bind_on`]) and used by a task on
//! that queue's thread ([`crate::local`]) skips the staging queues: its sends
//! and receives call the engine directly, and a refused send fails at once.
//!
//! A send is checked for what can be checked at once (family, port, size of a
//! UDP datagram); a datagram the engine then refuses (it does not fit the path
//! MTU and the engine's `Config::fragments` is off) is dropped and its error
//! returned by the next `send_to`, as an asynchronous error of a kernel socket
//! is.

use super::local;
use super::runtime::{Command, Handle, to_io};
use super::shared::lock;
use super::socket::{register, wake};
use linerate_toe::{
    ConnectionError, Engine, FilterMode, McastError, UdpHandle, UdpRecvError, UdpSendError,
};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use tokio::io::ReadBuf;
use tokio::sync::oneshot;

/// Datagrams each staging queue holds.
const STAGED: usize = 256;
/// Largest UDP payload (an IPv4 datagram of 65535 bytes).
const MAX_PAYLOAD: usize = 65_535 - 20 - 8;

/// A socket: what both sides see.
#[derive(Debug)]
pub(crate) struct UdpShared {
    /// The queue that sends.
    pub(crate) home: usize,
    /// Bound on the home queue alone ([`UdpSocket::bind_on`]).
    pub(crate) single: bool,
    /// By queue: where the socket is bound there.
    pub(crate) at: Box<[UdpAt]>,
    pub(crate) st: Mutex<UdpState>,
}

/// A socket's binding on one queue, as the application side sees it.
#[derive(Debug)]
pub(crate) struct UdpAt {
    /// The binding's engine handle index on that queue (`usize::MAX` if not
    /// bound there), for the queue thread to find it from its dirty list.
    pub(crate) index: AtomicUsize,
    /// On that queue's dirty list.
    pub(crate) dirty: AtomicBool,
}

/// The mutable part of a socket.
#[derive(Debug, Default)]
pub(crate) struct UdpState {
    rx: VecDeque<(SocketAddr, Vec<u8>)>,
    tx: VecDeque<(SocketAddr, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
    /// An error to report from the next send.
    send_error: Option<UdpSendError>,
    /// The runtime stopped.
    error: Option<ConnectionError>,
    /// The application dropped the socket.
    closed: bool,
    /// The binding's handle in the home queue's engine (a socket bound on one
    /// queue only), for tasks on that queue's thread.
    pub(crate) handle: Option<UdpHandle>,
    /// The application last received on the home queue's thread, straight
    /// from the engine: the queue thread leaves datagrams there and only wakes
    /// the reader.
    local: bool,
    read_waker: Option<Waker>,
    write_waker: Option<Waker>,
}

impl UdpState {
    fn recycle(&mut self, mut b: Vec<u8>) {
        if self.spare.len() < STAGED {
            b.clear();
            self.spare.push(b);
        }
    }
}

impl UdpShared {
    pub(crate) fn new(home: usize, single: bool, queues: usize) -> UdpShared {
        UdpShared {
            home,
            single,
            at: (0..queues)
                .map(|_| UdpAt {
                    index: AtomicUsize::new(usize::MAX),
                    dirty: AtomicBool::new(false),
                })
                .collect(),
            st: Mutex::new(UdpState::default()),
        }
    }

    /// The queues the socket is bound on.
    pub(crate) fn queues(&self) -> std::ops::Range<usize> {
        if self.single {
            self.home..self.home + 1
        } else {
            0..self.at.len()
        }
    }

    /// Takes the socket off queue `q`'s dirty list; returns the binding's
    /// index there.
    pub(crate) fn undirty(&self, q: usize) -> Option<usize> {
        let at = self.at.get(q)?;
        at.dirty.store(false, Ordering::Release);
        Some(at.index.load(Ordering::Acquire))
    }

    /// Fails the socket (the runtime stopped) and wakes its tasks.
    pub(crate) fn fail(&self, e: ConnectionError) {
        let (r, w) = {
            let mut st = lock(&self.st);
            st.error.get_or_insert(e);
            (st.read_waker.take(), st.write_waker.take())
        };
        wake(r);
        wake(w);
    }
}

/// One queue's binding of a socket, served by that queue's thread.
#[derive(Debug)]
pub(crate) struct UdpBound {
    pub(crate) h: UdpHandle,
    pub(crate) shared: Arc<UdpShared>,
    /// On this round's list of bindings to serve.
    pub(crate) todo: bool,
    /// On the list of bindings with a writer waiting for room.
    pub(crate) watch: bool,
    /// Its local port, claimed in the interface's steering (if there is one).
    pub(crate) claimed: Option<u16>,
}

/// What serving a binding left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// The application dropped the socket: the binding is closed.
    Gone,
    /// Served; a writer is still waiting for room in the engine's send queue
    /// (woken when it is at most half full, which no event reports).
    Waiting,
    /// Served.
    Done,
}

/// Serves one binding on queue `q`: received datagrams to the application,
/// staged sends (on the home queue) to the engine.
///
/// The queue thread serves a binding when its engine reports it
/// ([`linerate_toe::Event::UdpReadable`], [`linerate_toe::Event::UdpWritable`]),
/// when the application side changed it (a datagram staged into an empty send
/// queue, room made in a full receive queue, the socket dropped or read
/// elsewhere), and while a writer waits for room ([`Served::Waiting`]).
pub(crate) fn service_udp(engine: &mut Engine, q: usize, b: &UdpBound) -> Served {
    let mut guard = lock(&b.shared.st);
    let st = &mut *guard;
    let mut got = false;
    while !st.closed && !st.local && st.rx.len() < STAGED {
        let mut buf = st.spare.pop().unwrap_or_default();
        match engine.udp_recv_with(b.h, |data, from| {
            buf.extend_from_slice(data);
            from
        }) {
            Ok(from) => {
                st.rx.push_back((from, buf));
                got = true;
            }
            Err(_) => {
                st.recycle(buf);
                break;
            }
        }
    }
    let mut sent = false;
    if q == b.shared.home {
        while let Some((to, data)) = st.tx.pop_front() {
            match engine.udp_send_to(b.h, &data, to) {
                Err(UdpSendError::WouldBlock) => {
                    st.tx.push_front((to, data));
                    break;
                }
                Err(e) => st.send_error = Some(e),
                Ok(_) => {}
            }
            st.recycle(data);
            sent = true;
        }
    }
    // A dropped socket still sends what it staged (as a kernel socket sends
    // what `sendto` took), then closes.
    if st.closed && (q != b.shared.home || st.tx.is_empty()) {
        drop(guard);
        let _ = engine.udp_close(b.h);
        return Served::Gone;
    }
    // Tasks that call the engine directly wait on its readiness: a datagram
    // to read; for a writer, a send queue at most half full (Linux's
    // `sock_writeable`), so that a writer is not woken for room its datagram
    // does not fit in, round after round.
    if let Ok(r) = engine.udp_readiness(b.h) {
        got |= st.local && r.readable && st.read_waker.is_some();
    }
    if q == b.shared.home
        && st.tx.is_empty()
        && st.write_waker.is_some()
        && let Ok(info) = engine.udp_info(b.h)
    {
        sent |= 2 * info.send_bytes <= engine.config().udp.send_buffer;
    }
    let r = if got { st.read_waker.take() } else { None };
    let w = if sent { st.write_waker.take() } else { None };
    let waiting = q == b.shared.home && st.write_waker.is_some();
    drop(guard);
    wake(r);
    wake(w);
    if waiting {
        Served::Waiting
    } else {
        Served::Done
    }
}

/// A UDP socket bound on every queue of a runtime.
///
/// ```no_run
/// # async fn f(rt: linerate_rt::Handle) -> std::io::Result<()> {
/// use linerate_rt::UdpSocket;
/// let sock = UdpSocket::bind(&rt, "0.0.0.0:5353".parse().unwrap()).await?;
/// let mut buf = [0u8; 1500];
/// let (n, peer) = sock.recv_from(&mut buf).await?;
/// sock.send_to(&buf[..n], peer).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct UdpSocket {
    shared: Arc<UdpShared>,
    rt: Handle,
    local: SocketAddr,
}

impl UdpSocket {
    /// Binds `addr` (an unspecified or the interface's address; port 0 picks a
    /// free port) on every queue. Fails with `AddrInUse` if a queue has the
    /// port bound for that family.
    pub async fn bind(rt: &Handle, addr: SocketAddr) -> io::Result<UdpSocket> {
        let home = rt.pick_queue();
        // The home queue first: it picks the port when asked for port 0.
        let order = std::iter::once(home).chain((0..rt.queues()).filter(|&q| q != home));
        UdpSocket::bind_queues(rt, home, order.collect(), addr).await
    }

    /// Binds `addr` on `queue` alone: it receives the datagrams RSS puts on
    /// that queue and sends from it. From a task on that queue's thread
    /// ([`crate::local`]) its sends and receives call the engine directly. One
    /// socket per queue on the same port, each served by a task on its queue,
    /// is the thread-per-core shape of a UDP server. Fails with `NotFound` for a
    /// queue the runtime does not have, `AddrInUse` if the queue has the port
    /// bound for that family.
    pub async fn bind_on(rt: &Handle, queue: usize, addr: SocketAddr) -> io::Result<UdpSocket> {
        if queue >= rt.queues() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no queue {queue}: the runtime has {}", rt.queues()),
            ));
        }
        UdpSocket::bind_queues(rt, queue, vec![queue], addr).await
    }

    async fn bind_queues(
        rt: &Handle,
        home: usize,
        queues: Vec<usize>,
        addr: SocketAddr,
    ) -> io::Result<UdpSocket> {
        let shared = Arc::new(UdpShared::new(home, queues.len() == 1, rt.queues()));
        let mut sock = UdpSocket {
            shared: Arc::clone(&shared),
            rt: rt.clone(),
            local: addr,
        };
        for q in queues {
            let (tx, rx) = oneshot::channel();
            let cmd = Command::UdpBind {
                addr: sock.local,
                shared: Arc::clone(&shared),
                reply: tx,
            };
            rt.command(q, cmd).await?;
            // On error, dropping `sock` closes the queues that did bind.
            sock.local = rx
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::NotConnected))?
                .map_err(to_io)?;
        }
        Ok(sock)
    }

    /// The bound address (with the port picked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sends one datagram to `target`; returns its length once it is staged
    /// for the engine (waiting while the staging queue is full).
    pub async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        poll_fn(|cx| self.poll_send_to(cx, buf, target)).await
    }

    /// Polls to stage one datagram to `target`.
    pub fn poll_send_to(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
        target: SocketAddr,
    ) -> Poll<io::Result<usize>> {
        if target.is_ipv4() != self.local.is_ipv4() || target.port() == 0 {
            return Poll::Ready(Err(to_io(UdpSendError::InvalidDestination)));
        }
        if buf.len() > MAX_PAYLOAD {
            return Poll::Ready(Err(to_io(UdpSendError::MessageTooLong)));
        }
        if let Some(Some(p)) = self.direct(|e, st, h| {
            if !st.tx.is_empty() {
                // Staged datagrams go first.
                return None;
            }
            if let Some(err) = st.send_error.take() {
                return Some(Poll::Ready(Err(to_io(err))));
            }
            Some(match e.udp_send_to(h, buf, target) {
                Ok(n) => Poll::Ready(Ok(n)),
                Err(UdpSendError::WouldBlock) => {
                    register(&mut st.write_waker, cx.waker());
                    Poll::Pending
                }
                Err(err) => Poll::Ready(Err(to_io(err))),
            })
        }) {
            return p;
        }
        let was_empty = {
            let mut st = lock(&self.shared.st);
            if let Some(e) = st.error {
                return Poll::Ready(Err(to_io(e)));
            }
            if let Some(e) = st.send_error.take() {
                return Poll::Ready(Err(to_io(e)));
            }
            if st.tx.len() >= STAGED {
                register(&mut st.write_waker, cx.waker());
                return Poll::Pending;
            }
            let mut b = st.spare.pop().unwrap_or_default();
            b.extend_from_slice(buf);
            let was_empty = st.tx.is_empty();
            st.tx.push_back((target, b));
            was_empty
        };
        if was_empty {
            self.rt.serve_udp(&self.shared, self.shared.home);
        }
        Poll::Ready(Ok(buf.len()))
    }

    /// Polls until a receive would not wait (a datagram staged, or an error),
    /// without receiving; shares the waker slot of `poll_recv_from`. A socket
    /// served on its home queue's own thread asks the engine.
    pub fn poll_recv_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(ready) = self.direct(|e, st, h| {
            let ready = !st.rx.is_empty()
                || st.error.is_some()
                || e.udp_readiness(h).map_or(true, |r| r.readable);
            if !ready {
                st.local = true;
                register(&mut st.read_waker, cx.waker());
            }
            ready
        }) {
            return if ready {
                Poll::Ready(())
            } else {
                Poll::Pending
            };
        }
        let mut st = lock(&self.shared.st);
        if st.local {
            st.local = false;
            drop(st);
            self.rt.kick(self.shared.home);
            st = lock(&self.shared.st);
        }
        if !st.rx.is_empty() || st.error.is_some() {
            return Poll::Ready(());
        }
        register(&mut st.read_waker, cx.waker());
        Poll::Pending
    }

    /// Polls until a send would not wait (room in the staging queue, or an
    /// error to report), without sending; shares the waker slot of
    /// `poll_send_to`.
    pub fn poll_send_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = lock(&self.shared.st);
        if st.tx.len() < STAGED || st.error.is_some() || st.send_error.is_some() {
            return Poll::Ready(());
        }
        register(&mut st.write_waker, cx.waker());
        Poll::Pending
    }

    /// The length of the next staged datagram, if one is staged (`FIONREAD`).
    pub fn next_datagram_len(&self) -> Option<usize> {
        lock(&self.shared.st).rx.front().map(|(_, d)| d.len())
    }

    /// Receives one datagram into `buf`; returns its length (cut to `buf`, the
    /// rest of a longer datagram is lost) and its sender.
    pub async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        let mut rb = ReadBuf::new(buf);
        let from = poll_fn(|cx| self.poll_recv_from(cx, &mut rb)).await?;
        Ok((rb.filled().len(), from))
    }

    /// Polls to receive one datagram into `buf`; returns its sender.
    pub fn poll_recv_from(
        &self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<SocketAddr>> {
        if let Some(p) = self.direct(|e, st, h| {
            st.local = true;
            if let Some((from, data)) = st.rx.pop_front() {
                // Staged before the task read here: those first.
                let n = data.len().min(buf.remaining());
                buf.put_slice(data.get(..n).unwrap_or_default());
                st.recycle(data);
                return Poll::Ready(Ok(from));
            }
            if let Some(err) = st.error {
                return Poll::Ready(Err(to_io(err)));
            }
            match e.udp_recv_from(h, buf.initialize_unfilled()) {
                Ok((n, from)) => {
                    buf.advance(n);
                    Poll::Ready(Ok(from))
                }
                Err(UdpRecvError::WouldBlock) => {
                    register(&mut st.read_waker, cx.waker());
                    Poll::Pending
                }
                Err(err) => Poll::Ready(Err(to_io(err))),
            }
        }) {
            return p;
        }
        let mut st = lock(&self.shared.st);
        if st.local {
            // Received elsewhere now: the queue thread stages again.
            st.local = false;
            drop(st);
            self.rt.serve_udp(&self.shared, self.shared.home);
            st = lock(&self.shared.st);
        }
        let was_full = st.rx.len() >= STAGED;
        if let Some((from, data)) = st.rx.pop_front() {
            let n = data.len().min(buf.remaining());
            buf.put_slice(data.get(..n).unwrap_or_default());
            st.recycle(data);
            drop(st);
            if was_full {
                // The queue threads left datagrams in their engines while the
                // queue was full: they move them now (no event would say so).
                for q in self.shared.queues() {
                    self.rt.serve_udp(&self.shared, q);
                }
            }
            return Poll::Ready(Ok(from));
        }
        if let Some(e) = st.error {
            return Poll::Ready(Err(to_io(e)));
        }
        register(&mut st.read_waker, cx.waker());
        Poll::Pending
    }
}

impl UdpSocket {
    /// Runs `f` with the home queue's engine, the socket's state and its
    /// handle there, if the caller is a task on that queue's thread and the
    /// socket is bound there alone; `None` otherwise.
    fn direct<R>(&self, f: impl FnOnce(&mut Engine, &mut UdpState, UdpHandle) -> R) -> Option<R> {
        if !self.shared.single {
            return None;
        }
        local::with_engine(&self.rt, self.shared.home, |e| {
            let mut st = lock(&self.shared.st);
            let h = st.handle?;
            Some(f(e, &mut st, h))
        })
        .flatten()
    }
}

impl Drop for UdpSocket {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.shared.st);
            st.closed = true;
            st.read_waker = None;
            st.write_waker = None;
        }
        for q in self.shared.queues() {
            self.rt.serve_udp(&self.shared, q);
        }
    }
}

/// Multicast: joins, leaves and source filters, applied on every queue the
/// socket is bound on (see `linerate_toe`'s `engine::mcast` for what the
/// engine reports and delivers).
impl UdpSocket {
    /// Joins IPv4 `group` for every source (std's `join_multicast_v4`; groups
    /// are joined on the engine's interface 0).
    pub async fn join_multicast_v4(&self, group: Ipv4Addr) -> io::Result<()> {
        self.set_multicast_filter(IpAddr::V4(group), FilterMode::Exclude, &[])
            .await
    }

    /// Joins IPv6 `group` for every source (std's `join_multicast_v6`).
    pub async fn join_multicast_v6(&self, group: Ipv6Addr) -> io::Result<()> {
        self.set_multicast_filter(IpAddr::V6(group), FilterMode::Exclude, &[])
            .await
    }

    /// Leaves IPv4 `group` (std's `leave_multicast_v4`).
    pub async fn leave_multicast_v4(&self, group: Ipv4Addr) -> io::Result<()> {
        self.leave_multicast(IpAddr::V4(group)).await
    }

    /// Leaves IPv6 `group` (std's `leave_multicast_v6`).
    pub async fn leave_multicast_v6(&self, group: Ipv6Addr) -> io::Result<()> {
        self.leave_multicast(IpAddr::V6(group)).await
    }

    /// Sets the socket's filter of `group`: INCLUDE `sources` (a
    /// source-specific join, `IP_ADD_SOURCE_MEMBERSHIP`), EXCLUDE `sources`
    /// (`IP_BLOCK_SOURCE`), or INCLUDE nothing to leave (RFC 3678's
    /// `setsourcefilter`).
    pub async fn set_multicast_filter(
        &self,
        group: IpAddr,
        mode: FilterMode,
        sources: &[IpAddr],
    ) -> io::Result<()> {
        let sources = sources.to_vec();
        self.each_binding(move |e, h| e.udp_set_multicast_filter(h, group, mode, &sources))
            .await
    }

    /// Leaves `group`; `NotFound` if the socket had not joined it.
    pub async fn leave_multicast(&self, group: IpAddr) -> io::Result<()> {
        self.each_binding(move |e, h| e.udp_leave_multicast(h, group))
            .await
    }

    /// Sets the TTL / hop limit of datagrams to groups (`IP_MULTICAST_TTL`,
    /// `IPV6_MULTICAST_HOPS`; default 1).
    pub async fn set_multicast_hops(&self, hops: u8) -> io::Result<()> {
        self.each_binding(move |e, h| e.udp_set_multicast_hops(h, hops).map_err(McastError::from))
            .await
    }

    /// Whether datagrams this socket sends to a group this runtime joined
    /// also reach its own member socket of that group and port
    /// (`IP_MULTICAST_LOOP`, `IPV6_MULTICAST_LOOP`; on by default, as in
    /// Linux).
    pub async fn set_multicast_loop(&self, on: bool) -> io::Result<()> {
        self.each_binding(move |e, h| e.udp_set_multicast_loop(h, on).map_err(McastError::from))
            .await
    }

    /// Runs `f` on each queue's binding of the socket, in order; the first
    /// error stops it.
    async fn each_binding<F>(&self, f: F) -> io::Result<()>
    where
        F: Fn(&mut Engine, UdpHandle) -> Result<(), McastError> + Clone + Send + 'static,
    {
        for q in self.shared.queues() {
            let Some(at) = self.shared.at.get(q) else {
                continue;
            };
            let index = at.index.load(Ordering::Acquire);
            let f = f.clone();
            let r = self
                .rt
                .with_engine(q, move |e| match e.udp_handle(index) {
                    Some(h) => f(e, h),
                    None => Err(McastError::InvalidHandle),
                })
                .await?;
            r.map_err(mcast_io)?;
        }
        Ok(())
    }
}

/// The `io::Error` of a multicast call's refusal.
fn mcast_io(e: McastError) -> io::Error {
    let kind = match e {
        McastError::InvalidAddress | McastError::TooManySources => io::ErrorKind::InvalidInput,
        McastError::NoAddress => io::ErrorKind::AddrNotAvailable,
        McastError::NotJoined => io::ErrorKind::NotFound,
        McastError::TooManyGroups => io::ErrorKind::OutOfMemory,
        _ => io::ErrorKind::NotConnected,
    };
    io::Error::new(kind, e)
}
