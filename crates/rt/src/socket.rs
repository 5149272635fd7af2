//! State shared between a queue thread and the application side of a stream or
//! listener: staging rings, flags, wakers. Each lives behind its own mutex, held
//! for a copy or a flag change, never across an engine call of another socket.

use super::ring::ByteRing;
use super::shared::lock;
use linerate_nic::claims::{ClaimError, Table};
use linerate_toe::{
    ConnectError, ConnectionError, InvalidHandle, ListenError, RecvError, SendError, SocketHandle,
    UdpBindError, UdpSendError,
};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::task::Waker;

/// A stream: what both sides see.
#[derive(Debug)]
pub(crate) struct SockShared {
    /// The queue (and so the thread and engine) that owns the connection.
    pub(crate) queue: usize,
    /// The connection in that queue's engine.
    pub(crate) h: SocketHandle,
    pub(crate) local: SocketAddr,
    pub(crate) remote: SocketAddr,
    pub(crate) st: Mutex<SockState>,
    /// On its queue's list of streams the application side changed (see
    /// [`crate::Handle::serve`]); cleared by the queue thread when it takes the
    /// list.
    pub(crate) dirty: AtomicBool,
}

/// The mutable part of a stream.
#[derive(Debug)]
pub(crate) struct SockState {
    /// Bytes written by the application, not yet taken by the engine.
    pub(crate) tx: ByteRing,
    /// Bytes taken from the engine, not yet read by the application.
    pub(crate) rx: ByteRing,
    /// The engine reported the end of the stream (after `rx` is read).
    pub(crate) eof: bool,
    /// The connection failed.
    pub(crate) error: Option<SockError>,
    /// The application shut the sending side (a FIN follows `tx`).
    pub(crate) shutdown: bool,
    /// The application dropped the stream: send what is in `tx`, then close.
    pub(crate) closed: bool,
    /// Closing aborts instead (a zero linger time, [`crate::TcpStream::set_linger`]).
    pub(crate) abort_on_close: bool,
    /// `TCP_NODELAY` as the application last set it, for the queue thread
    /// to apply ([`crate::TcpStream::set_nodelay`]).
    pub(crate) set_nodelay: Option<bool>,
    /// Keep-alive settings to apply ([`crate::TcpStream::set_keepalive`]).
    pub(crate) set_keepalive: Option<Option<linerate_toe::Keepalive>>,
    /// The queue thread stopped pulling because `rx` was full.
    pub(crate) rx_stalled: bool,
    /// The application last read on the queue's own thread, straight from the
    /// engine (see [`crate::local`]): the queue thread leaves received bytes
    /// in the engine and only wakes the reader.
    pub(crate) local: bool,
    pub(crate) read_waker: Option<Waker>,
    pub(crate) write_waker: Option<Waker>,
}

impl SockShared {
    pub(crate) fn new(
        queue: usize,
        h: SocketHandle,
        local: SocketAddr,
        remote: SocketAddr,
        buffer: usize,
    ) -> SockShared {
        SockShared {
            queue,
            h,
            local,
            remote,
            st: Mutex::new(SockState {
                tx: ByteRing::new(buffer),
                rx: ByteRing::new(buffer),
                eof: false,
                error: None,
                shutdown: false,
                closed: false,
                abort_on_close: false,
                set_nodelay: None,
                set_keepalive: None,
                rx_stalled: false,
                local: false,
                read_waker: None,
                write_waker: None,
            }),
            dirty: AtomicBool::new(false),
        }
    }

    /// Marks the stream given up by the application; its wakers are dropped.
    pub(crate) fn close(&self) {
        let mut st = lock(&self.st);
        st.closed = true;
        st.read_waker = None;
        st.write_waker = None;
    }

    /// Fails the stream with `e` (if it has not failed yet) and wakes its tasks.
    pub(crate) fn fail(&self, e: SockError) {
        let (r, w) = {
            let mut st = lock(&self.st);
            st.error.get_or_insert(e);
            (st.read_waker.take(), st.write_waker.take())
        };
        wake(r);
        wake(w);
    }
}

/// A listener: what both sides see.
#[derive(Debug, Default)]
pub(crate) struct ListenShared {
    pub(crate) st: Mutex<ListenState>,
}

/// The mutable part of a listener.
#[derive(Debug, Default)]
pub(crate) struct ListenState {
    /// Accepted connections from every queue, waiting for `accept`.
    pub(crate) ready: VecDeque<std::sync::Arc<SockShared>>,
    pub(crate) waker: Option<Waker>,
    /// The application dropped the listener.
    pub(crate) closed: bool,
    /// The runtime stopped.
    pub(crate) error: Option<ConnectionError>,
}

impl ListenShared {
    /// Marks the listener given up; connections not accepted yet are closed.
    pub(crate) fn close(&self) {
        let pending: Vec<_> = {
            let mut st = lock(&self.st);
            st.closed = true;
            st.waker = None;
            st.ready.drain(..).collect()
        };
        for s in pending {
            s.close();
        }
    }
}

pub(crate) fn wake(w: Option<Waker>) {
    if let Some(w) = w {
        w.wake();
    }
}

/// Stores `cx`'s waker in `slot` unless an equivalent one is there.
pub(crate) fn register(slot: &mut Option<Waker>, waker: &Waker) {
    match slot {
        Some(old) if old.will_wake(waker) => {}
        _ => *slot = Some(waker.clone()),
    }
}

/// An engine error the runtime keeps until a call reports it. The engine's
/// errors are `Copy`, so one value answers every later read, write or accept;
/// it becomes an `io::Error` (of the kind the engine's error documents) only
/// then, in `Inner::io_error`, which adds what the runtime knows: why it
/// stopped, and how to get more source ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SockError {
    /// The connection failed, or the runtime stopped (`Aborted`).
    Connection(ConnectionError),
    /// An active open failed at once, for a reason other than source ports.
    Connect(ConnectError),
    /// No source port is free for an active open toward `remote`: in the
    /// range of the runtime's port allocator, `RuntimeConfig::ephemeral`
    /// (with steering), or in the engine's own range for that destination.
    NoPorts {
        remote: SocketAddr,
        steered: Option<(u16, u16)>,
    },
    Listen(ListenError),
    /// A send failed other than by the connection failing.
    Send(SendError),
    /// A receive failed other than by the connection failing.
    Recv(RecvError),
    UdpBind(UdpBindError),
    UdpSend(UdpSendError),
    /// The engine no longer knows the socket.
    InvalidHandle,
    /// The interface's steering refused to send the socket's frames here
    /// (`RuntimeConfig::claims`).
    Claim(ClaimRefused),
}

/// Why the interface's steering refused a port or 4-tuple: what is kept of a
/// [`ClaimError`] (which is not `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimRefused {
    /// The kernel's stack uses the port.
    InUse,
    /// A steering table is full: the connection is refused.
    Full { table: Table, capacity: u32 },
    /// The kernel refused the update otherwise.
    Other(io::ErrorKind),
}

impl From<ClaimError> for SockError {
    fn from(e: ClaimError) -> SockError {
        SockError::Claim(match e {
            ClaimError::InUse { .. } | ClaimError::Exists => ClaimRefused::InUse,
            ClaimError::Full { table, capacity } => ClaimRefused::Full { table, capacity },
            ClaimError::Family => ClaimRefused::Other(io::ErrorKind::InvalidInput),
            ClaimError::Io(e) => ClaimRefused::Other(e.kind()),
            _ => ClaimRefused::Other(io::ErrorKind::Other),
        })
    }
}

impl From<ConnectionError> for SockError {
    fn from(e: ConnectionError) -> SockError {
        SockError::Connection(e)
    }
}

impl From<InvalidHandle> for SockError {
    fn from(_: InvalidHandle) -> SockError {
        SockError::InvalidHandle
    }
}

impl From<ListenError> for SockError {
    fn from(e: ListenError) -> SockError {
        SockError::Listen(e)
    }
}

impl From<UdpBindError> for SockError {
    fn from(e: UdpBindError) -> SockError {
        SockError::UdpBind(e)
    }
}

impl From<UdpSendError> for SockError {
    fn from(e: UdpSendError) -> SockError {
        SockError::UdpSend(e)
    }
}

/// A failed connection is kept as its [`ConnectionError`], however it was
/// found (a send, a receive, the readiness).
impl From<SendError> for SockError {
    fn from(e: SendError) -> SockError {
        match e {
            SendError::Failed(c) => SockError::Connection(c),
            SendError::InvalidHandle => SockError::InvalidHandle,
            e => SockError::Send(e),
        }
    }
}

impl From<RecvError> for SockError {
    fn from(e: RecvError) -> SockError {
        match e {
            RecvError::Failed(c) => SockError::Connection(c),
            RecvError::InvalidHandle => SockError::InvalidHandle,
            e => SockError::Recv(e),
        }
    }
}

/// The `std::io` form, without what only the runtime knows.
impl From<SockError> for io::Error {
    fn from(e: SockError) -> io::Error {
        match e {
            SockError::Connection(e) => e.into(),
            SockError::Connect(e) => e.into(),
            SockError::NoPorts { .. } => ConnectError::NoPorts.into(),
            SockError::Listen(e) => e.into(),
            SockError::Send(e) => e.into(),
            SockError::Recv(e) => e.into(),
            SockError::UdpBind(e) => e.into(),
            SockError::UdpSend(e) => e.into(),
            SockError::InvalidHandle => InvalidHandle.into(),
            SockError::Claim(ClaimRefused::InUse) => io::Error::new(
                io::ErrorKind::AddrInUse,
                "the port is used by the kernel's stack on this interface",
            ),
            SockError::Claim(ClaimRefused::Full { table, capacity }) => io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "refused: the steering program's {table} table is full ({capacity} entries)"
                ),
            ),
            SockError::Claim(ClaimRefused::Other(kind)) => io::Error::new(
                kind,
                "the interface's steering program could not be updated",
            ),
        }
    }
}
