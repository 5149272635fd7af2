//! State shared between a queue thread and the application side of a stream or
//! listener: staging rings, flags, wakers. Each lives behind its own mutex, held
//! for a copy or a flag change, never across an engine call of another socket.

use super::ring::ByteRing;
use super::shared::lock;
use linerate_toe::{Error, SocketHandle};
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
    pub(crate) error: Option<Error>,
    /// The application shut the sending side (a FIN follows `tx`).
    pub(crate) shutdown: bool,
    /// The application dropped the stream: send what is in `tx`, then close.
    pub(crate) closed: bool,
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
    pub(crate) fn fail(&self, e: Error) {
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
    pub(crate) error: Option<Error>,
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

/// The `std::io` form of an engine error.
pub fn io_error(e: Error) -> io::Error {
    let kind = match e {
        Error::ConnectionRefused => io::ErrorKind::ConnectionRefused,
        Error::ConnectionReset => io::ErrorKind::ConnectionReset,
        Error::TimedOut => io::ErrorKind::TimedOut,
        Error::Aborted => io::ErrorKind::ConnectionAborted,
        Error::AddrInUse => io::ErrorKind::AddrInUse,
        Error::NoAddress | Error::NoPorts => io::ErrorKind::AddrNotAvailable,
        Error::NotConnected => io::ErrorKind::NotConnected,
        Error::Closed => io::ErrorKind::BrokenPipe,
        Error::WouldBlock => io::ErrorKind::WouldBlock,
        Error::MessageTooLong | Error::InvalidArgument => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}
