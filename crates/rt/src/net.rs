//! The tokio adaptor: [`TcpListener`] and [`TcpStream`] (`AsyncRead +
//! AsyncWrite`) over a [`Runtime`](super::Runtime).
//!
//! The futures run on any executor (tokio's or another); the connections live on
//! the runtime's queue threads. A stream's data moves through two staging rings
//! shared with its queue thread: `poll_write` copies the caller's bytes into the
//! send ring and `poll_read` copies out of the receive ring, each under the
//! stream's own lock, and the queue thread moves the rings to and from the
//! engine's buffers. A task that finds its ring full (write) or empty (read)
//! leaves its waker there; the queue thread wakes it when it moves bytes, when the
//! stream ends or fails. Reads and writes call on the queue thread only when it
//! has work: the send ring was empty, or the receive ring had stalled full; the
//! stream then goes on the queue's list of streams to serve, and the engine's
//! events (`linerate_toe::Event`) name the rest, so the queue thread never
//! visits a stream nothing happened to.
//!
//! A task running on the stream's own queue thread ([`crate::local`]) skips the
//! rings: it reads from and writes into the engine's buffers directly, and waits
//! on the engine's readiness, which the queue thread checks every round.

use super::dns::ToSocketAddrs;
use super::local;
use super::runtime::{Command, Handle, to_io};
use super::shared::lock;
use super::socket::{ListenShared, SockShared, SockState, register};
use linerate_toe::{Engine, InvalidHandle, Keepalive, RecvError, SendError, SocketHandle, TcpInfo};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// A TCP listener open on every queue of a runtime ([`TcpListener::bind`]) or
/// on one ([`TcpListener::bind_on`]).
///
/// ```no_run
/// # async fn f(rt: linerate_rt::Handle) -> std::io::Result<()> {
/// use linerate_rt::TcpListener;
/// use tokio::io::AsyncWriteExt;
/// let listener = TcpListener::bind(&rt, 8080).await?;
/// loop {
///     let (mut stream, peer) = listener.accept().await?;
///     tokio::spawn(async move { stream.write_all(b"hello\n").await });
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct TcpListener {
    shared: Arc<ListenShared>,
    rt: Handle,
    port: u16,
}

impl TcpListener {
    /// Listens on `port` on every queue (every address of the interface).
    /// Fails with `AddrInUse` if any queue already listens there.
    pub async fn bind(rt: &Handle, port: u16) -> io::Result<TcpListener> {
        TcpListener::bind_queues(rt, 0..rt.queues(), port).await
    }

    /// Listens on `port` on `queue` alone: it accepts the connections RSS puts
    /// on that queue. One listener per queue on the same port, each accepting
    /// from a task on its own queue thread ([`crate::local`]), keeps a
    /// connection on one thread from the first SYN on. Fails with `NotFound` for
    /// a queue the runtime does not have, `AddrInUse` if the queue already
    /// listens there.
    pub async fn bind_on(rt: &Handle, queue: usize, port: u16) -> io::Result<TcpListener> {
        if queue >= rt.queues() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no queue {queue}: the runtime has {}", rt.queues()),
            ));
        }
        TcpListener::bind_queues(rt, queue..queue + 1, port).await
    }

    async fn bind_queues(
        rt: &Handle,
        queues: std::ops::Range<usize>,
        port: u16,
    ) -> io::Result<TcpListener> {
        let shared = Arc::new(ListenShared::default());
        let listener = TcpListener {
            shared: Arc::clone(&shared),
            rt: rt.clone(),
            port,
        };
        for q in queues {
            let (tx, rx) = oneshot::channel();
            let cmd = Command::Listen {
                port,
                shared: Arc::clone(&shared),
                reply: tx,
            };
            rt.command(q, cmd).await?;
            // On error, dropping `listener` closes the queues that did listen.
            rx.await
                .map_err(|_| rt.inner.stopped())?
                .map_err(|e| rt.inner.io_error(e))?;
        }
        Ok(listener)
    }

    /// The port listened on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection, from whichever queue RSS put it on, with the peer's
    /// address.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Polls for the next connection.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        let mut st = lock(&self.shared.st);
        if let Some(sock) = st.ready.pop_front() {
            drop(st);
            let remote = sock.remote;
            return Poll::Ready(Ok((TcpStream::new(sock, self.rt.clone()), remote)));
        }
        if let Some(e) = st.error {
            return Poll::Ready(Err(self.rt.inner.io_error(e)));
        }
        register(&mut st.waker, cx.waker());
        Poll::Pending
    }
}

impl Drop for TcpListener {
    fn drop(&mut self) {
        self.shared.close();
        self.rt.kick_all();
    }
}

/// The application side of one stream; closing happens when the last half goes.
#[derive(Debug)]
struct Inner {
    sock: Arc<SockShared>,
    rt: Handle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sock.close();
        self.rt.serve(&self.sock);
    }
}

/// The error of a call on a connection its engine no longer has.
fn gone(e: InvalidHandle) -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, e)
}

/// Copies what `ring` holds (up to `buf`'s room) into `buf`; how much.
fn copy_out(ring: &mut crate::ring::ByteRing, buf: &mut ReadBuf<'_>) -> usize {
    let (a, b) = ring.readable();
    let n1 = a.len().min(buf.remaining());
    buf.put_slice(a.get(..n1).unwrap_or_default());
    let n2 = b.len().min(buf.remaining());
    buf.put_slice(b.get(..n2).unwrap_or_default());
    ring.consume(n1 + n2);
    n1 + n2
}

impl Inner {
    fn poll_read(&self, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        // A task on the stream's own queue thread reads the engine itself.
        if let Some(p) =
            local::with_engine(&self.rt, self.sock.queue, |e| self.read_direct(e, cx, buf))
        {
            return p;
        }
        let mut kick = false;
        let poll = {
            let mut guard = lock(&self.sock.st);
            let st = &mut *guard;
            if st.local {
                // Read elsewhere now: the queue thread stages again.
                st.local = false;
                kick = true;
            }
            if !st.rx.is_empty() {
                let n = copy_out(&mut st.rx, buf);
                let grew = st.rx.grow_after(n, self.rt.inner.stream_buffer_max);
                if st.rx_stalled && (grew || 4 * st.rx.free() >= st.rx.capacity()) {
                    st.rx_stalled = false;
                    kick = true;
                }
                Poll::Ready(Ok(()))
            } else if let Some(e) = st.error {
                Poll::Ready(Err(self.rt.inner.io_error(e)))
            } else if st.eof {
                Poll::Ready(Ok(()))
            } else {
                register(&mut st.read_waker, cx.waker());
                Poll::Pending
            }
        };
        if kick {
            self.rt.serve(&self.sock);
        }
        poll
    }

    /// [`Inner::poll_read`] on the queue's thread: bytes the queue staged
    /// first, then straight from the engine's receive buffer (one copy, none
    /// through the staging ring), and from then on the queue leaves received
    /// bytes there.
    fn read_direct(
        &self,
        engine: &mut Engine,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut guard = lock(&self.sock.st);
        let st = &mut *guard;
        st.local = true;
        if !st.rx.is_empty() {
            copy_out(&mut st.rx, buf);
            return Poll::Ready(Ok(()));
        }
        if st.eof {
            return Poll::Ready(Ok(()));
        }
        // Bytes the engine still holds come before a failure the queue has
        // seen (data, then the reset), as on the staged path.
        match engine.tcp_recv(self.sock.h, buf.initialize_unfilled()) {
            Ok(n) if n > 0 => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Ok(_) => match st.error {
                Some(e) => Poll::Ready(Err(self.rt.inner.io_error(e))),
                None => {
                    st.eof = true;
                    Poll::Ready(Ok(()))
                }
            },
            Err(RecvError::WouldBlock) => match st.error {
                Some(e) => Poll::Ready(Err(self.rt.inner.io_error(e))),
                None => {
                    register(&mut st.read_waker, cx.waker());
                    Poll::Pending
                }
            },
            Err(e) => {
                let e = *st.error.get_or_insert(e.into());
                Poll::Ready(Err(self.rt.inner.io_error(e)))
            }
        }
    }

    /// Ready once a read would not wait: bytes, the end of the stream or an
    /// error. Pending leaves `cx`'s waker where a read would.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(ready) = local::with_engine(&self.rt, self.sock.queue, |e| {
            e.tcp_readiness(self.sock.h).map_or(true, |r| r.readable)
        }) {
            let mut st = lock(&self.sock.st);
            if ready || !st.rx.is_empty() || st.eof || st.error.is_some() {
                return Poll::Ready(());
            }
            st.local = true;
            register(&mut st.read_waker, cx.waker());
            return Poll::Pending;
        }
        let mut kick = false;
        let poll = {
            let mut st = lock(&self.sock.st);
            if st.local {
                st.local = false;
                kick = true;
            }
            if !st.rx.is_empty() || st.eof || st.error.is_some() {
                Poll::Ready(())
            } else {
                register(&mut st.read_waker, cx.waker());
                Poll::Pending
            }
        };
        if kick {
            self.rt.serve(&self.sock);
        }
        poll
    }

    /// Ready once a write would not wait: room in the send ring, or an
    /// error or shut sending side (the write then fails at once).
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut st = lock(&self.sock.st);
        if st.error.is_some() || st.shutdown || st.closed || st.tx.free() > 0 {
            return Poll::Ready(());
        }
        register(&mut st.write_waker, cx.waker());
        Poll::Pending
    }

    /// Bytes a read returns at once (the staged ones).
    fn staged(&self) -> usize {
        lock(&self.sock.st).rx.len()
    }

    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        if let Some(Some(p)) = local::with_engine(&self.rt, self.sock.queue, |e| {
            self.write_direct(e, cx, data)
        }) {
            return p;
        }
        let was_empty;
        let n = {
            let mut guard = lock(&self.sock.st);
            let st = &mut *guard;
            if let Some(e) = st.error {
                return Poll::Ready(Err(self.rt.inner.io_error(e)));
            }
            if st.shutdown || st.closed {
                return Poll::Ready(Err(to_io(SendError::Closed)));
            }
            if data.is_empty() {
                return Poll::Ready(Ok(0));
            }
            was_empty = st.tx.is_empty();
            let n = st.tx.write(data);
            if n == 0 {
                register(&mut st.write_waker, cx.waker());
                return Poll::Pending;
            }
            st.tx.grow_after(n, self.rt.inner.stream_buffer_max);
            n
        };
        if was_empty {
            self.rt.serve(&self.sock);
        }
        Poll::Ready(Ok(n))
    }

    /// [`Inner::poll_write`] on the queue's thread: straight into the engine's
    /// send buffer (one copy), unless bytes staged earlier must go first
    /// (`None`: the staged path).
    fn write_direct(
        &self,
        engine: &mut Engine,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Option<Poll<io::Result<usize>>> {
        let mut guard = lock(&self.sock.st);
        let st = &mut *guard;
        if let Some(e) = st.error {
            return Some(Poll::Ready(Err(self.rt.inner.io_error(e))));
        }
        if st.shutdown || st.closed {
            return Some(Poll::Ready(Err(to_io(SendError::Closed))));
        }
        if data.is_empty() {
            return Some(Poll::Ready(Ok(0)));
        }
        if !st.tx.is_empty() {
            return None;
        }
        Some(match engine.tcp_send(self.sock.h, data) {
            Ok(0) | Err(SendError::WouldBlock) => {
                // The queue thread wakes it when the engine takes bytes again.
                register(&mut st.write_waker, cx.waker());
                Poll::Pending
            }
            Ok(n) => Poll::Ready(Ok(n)),
            Err(e) => {
                let e = *st.error.get_or_insert(e.into());
                Poll::Ready(Err(self.rt.inner.io_error(e)))
            }
        })
    }

    fn poll_shutdown(&self) -> Poll<io::Result<()>> {
        lock(&self.sock.st).shutdown = true;
        self.rt.serve(&self.sock);
        Poll::Ready(Ok(()))
    }
}

/// A TCP connection served by one queue of a runtime.
///
/// Reads return 0 at the end of the stream (the peer's FIN); a failed connection
/// reads and writes as an `io::Error` of the matching kind (`ConnectionReset`,
/// `TimedOut`, ...). `poll_flush` returns at once: written bytes are in the send
/// ring, on their way. `poll_shutdown` queues a FIN after them. Dropping the
/// stream (or both halves) sends what is staged, then closes; unread received
/// data makes the close an abort (RST), as with `close(2)`.
#[derive(Debug)]
pub struct TcpStream {
    inner: Arc<Inner>,
}

impl TcpStream {
    fn new(sock: Arc<SockShared>, rt: Handle) -> TcpStream {
        TcpStream {
            inner: Arc::new(Inner { sock, rt }),
        }
    }

    /// Opens a connection to `remote` from the next queue in round-robin
    /// order. `remote` is a socket address, or a host and port
    /// ([`ToSocketAddrs`]: `"example.test:80"`, `("example.test", 80)`) whose
    /// name the runtime's resolver ([`Handle::resolver`]) looks up; the
    /// addresses found are tried in turn (IPv6 first) until one connects,
    /// and the last one's error is returned if none does.
    ///
    /// Errors: those of [`TcpStream::connect_on`]; for a name, those of
    /// [`crate::Resolver::lookup_host`] and `NotFound` when the runtime has no
    /// resolver.
    pub async fn connect(rt: &Handle, remote: impl ToSocketAddrs) -> io::Result<TcpStream> {
        let addrs = crate::dns::resolve(rt, &remote).await?;
        let mut last = None;
        for a in addrs {
            match TcpStream::connect_on(rt, rt.pick_queue(), a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, "the name has no addresses")
        }))
    }

    /// Opens a connection to `remote` from `queue`: with the runtime's steering,
    /// its source port makes the peer's replies arrive on that queue.
    /// Fails with `ConnectionRefused` if the peer answers with RST, `TimedOut`
    /// if it never answers, `AddrNotAvailable` if no source port is free (the
    /// message says which range ran out and how to get more).
    pub async fn connect_on(
        rt: &Handle,
        queue: usize,
        remote: SocketAddr,
    ) -> io::Result<TcpStream> {
        let (tx, rx) = oneshot::channel();
        rt.command(queue, Command::Connect { remote, reply: tx })
            .await?;
        let sock = rx
            .await
            .map_err(|_| rt.inner.stopped())?
            .map_err(|e| rt.inner.io_error(e))?;
        Ok(TcpStream::new(sock, rt.clone()))
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.sock.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.sock.remote
    }

    /// Polls until a read would not wait (bytes, the end of the stream, or an
    /// error to report), without reading: for an event loop that asks before
    /// it reads, as `poll(2)` does. Pending leaves `cx`'s waker with the
    /// stream, woken as a pending `poll_read`'s would be; reads and readiness
    /// checks of one stream share that one waker slot.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_read_ready(cx)
    }

    /// Polls until a write would not wait (room in the send ring, or an error
    /// the write reports), without writing. Shares the waker slot of
    /// `poll_write`.
    pub fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_write_ready(cx)
    }

    /// Bytes a read returns without waiting: those staged for the
    /// application (`FIONREAD`). The engine may hold more.
    pub fn readable_bytes(&self) -> usize {
        self.inner.staged()
    }

    /// The queue (thread, engine) serving the connection.
    pub fn queue(&self) -> usize {
        self.inner.sock.queue
    }

    /// The connection's handle in its queue's engine ([`TcpStream::queue`]),
    /// for [`Handle::with_engine`] calls the stream has no method of its own
    /// for. The handle is generational: once the connection is gone, calls
    /// with it fail with `InvalidHandle` rather than reach another one.
    pub fn engine_handle(&self) -> SocketHandle {
        self.inner.sock.h
    }

    /// Turns Nagle's algorithm off (`true`) or on, like `TCP_NODELAY`. The
    /// queue thread applies it in its next round, before it sends more of
    /// the stream's bytes. Fails with the stream's error if it has failed.
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.set_option(|st| st.set_nodelay = Some(on))
    }

    /// Turns keep-alive probes on with `ka` (`SO_KEEPALIVE` with
    /// `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`), or off with `None`;
    /// a peer that answers none of them fails the stream with `TimedOut`.
    /// Applied as [`TcpStream::set_nodelay`] is.
    pub fn set_keepalive(&self, ka: Option<Keepalive>) -> io::Result<()> {
        self.set_option(|st| st.set_keepalive = Some(ka))
    }

    /// Leaves an option change for the queue thread and asks it to serve
    /// the stream.
    fn set_option(&self, f: impl FnOnce(&mut SockState)) -> io::Result<()> {
        {
            let mut st = lock(&self.inner.sock.st);
            if let Some(e) = st.error {
                return Err(e.into());
            }
            f(&mut st);
        }
        self.inner.rt.serve(&self.inner.sock);
        Ok(())
    }

    /// The connection's state and the engine's figures for it (`TCP_INFO`).
    pub async fn tcp_info(&self) -> io::Result<TcpInfo> {
        let h = self.inner.sock.h;
        let r = self
            .inner
            .rt
            .with_engine(self.queue(), move |e| e.tcp_info(h))
            .await?;
        r.map_err(gone)
    }

    /// `SO_LINGER`: with `Some(Duration::ZERO)`, dropping the stream aborts
    /// the connection (a reset, unsent bytes discarded) instead of closing it
    /// after what is staged. Any other value closes as without it: dropping
    /// never blocks, and the queue thread sends what is staged.
    pub fn set_linger(&self, linger: Option<Duration>) {
        lock(&self.inner.sock.st).abort_on_close = linger == Some(Duration::ZERO);
    }

    /// Splits into halves that can move to different tasks; the connection
    /// closes when both are dropped. Dropping the write half shuts the sending
    /// side (a FIN), as tokio's does.
    pub fn into_split(self) -> (OwnedReadHalf, OwnedWriteHalf) {
        (
            OwnedReadHalf {
                inner: Arc::clone(&self.inner),
            },
            OwnedWriteHalf { inner: self.inner },
        )
    }

    /// Splits into borrowed halves, for reading and writing concurrently in one
    /// task.
    pub fn split(&mut self) -> (ReadHalf<'_>, WriteHalf<'_>) {
        (
            ReadHalf { inner: &self.inner },
            WriteHalf { inner: &self.inner },
        )
    }
}

/// The reading half of [`TcpStream::into_split`].
#[derive(Debug)]
pub struct OwnedReadHalf {
    inner: Arc<Inner>,
}

/// The writing half of [`TcpStream::into_split`]; dropping it sends a FIN.
#[derive(Debug)]
pub struct OwnedWriteHalf {
    inner: Arc<Inner>,
}

impl OwnedReadHalf {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.sock.remote
    }
}

impl OwnedWriteHalf {
    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.inner.sock.remote
    }
}

impl Drop for OwnedWriteHalf {
    fn drop(&mut self) {
        let _ = self.inner.poll_shutdown();
    }
}

/// The reading half of [`TcpStream::split`].
#[derive(Debug)]
pub struct ReadHalf<'a> {
    inner: &'a Inner,
}

/// The writing half of [`TcpStream::split`].
#[derive(Debug)]
pub struct WriteHalf<'a> {
    inner: &'a Inner,
}

/// `AsyncRead` for a type whose `inner` holds the stream's shared state.
macro_rules! delegate_read {
    ($($t:ty),*) => {$(
        impl AsyncRead for $t {
            fn poll_read(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<io::Result<()>> {
                self.inner.poll_read(cx, buf)
            }
        }
    )*};
}

/// `AsyncWrite` for a type whose `inner` holds the stream's shared state; flush is a
/// no-op (written bytes are in the engine's hands), shutdown sends a FIN.
macro_rules! delegate_write {
    ($($t:ty),*) => {$(
        impl AsyncWrite for $t {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                self.inner.poll_write(cx, buf)
            }

            fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }

            fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                self.inner.poll_shutdown()
            }
        }
    )*};
}

delegate_read!(TcpStream, OwnedReadHalf, ReadHalf<'_>);
delegate_write!(TcpStream, OwnedWriteHalf, WriteHalf<'_>);
