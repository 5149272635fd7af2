//! The socket API over the engine (RFC 9293 section 3.9.1's user calls): listen,
//! accept, connect, send, recv, shutdown, close, abort, state and readiness.
//!
//! Handles are slot indices with a generation, so a handle to a connection that is
//! gone is refused ([`InvalidHandle`]) rather than reaching the one that took its
//! slot. Calls never block: a `WouldBlock` variant says which event to wait for.
//! Each call has its error type (`super::error`); connection failures are a
//! [`ConnectionError`]: refused, reset, timed out, aborted.

use super::error::{
    AcceptError, ConnectError, ConnectionError, EPHEMERAL_PORTS, InvalidHandle, ListenError,
    RecvError, SendError,
};
use super::events::bits;
use super::{Engine, Listener};
use crate::tcp::TcpState;
use crate::tcp::conn::Conn;
use crate::tcp::state::CloseReason;
use crate::time::Instant;
use bytes::Bytes;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A TCP connection's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SocketHandle {
    index: u32,
    generation: u32,
}

impl SocketHandle {
    pub(super) fn new(idx: usize, generation: u32) -> SocketHandle {
        SocketHandle {
            index: idx as u32,
            generation,
        }
    }

    /// A small number naming the connection's slot in its engine: dense, and
    /// reused once the connection is gone (a handle compares unequal to the
    /// one before it, an index does not). For the caller's own tables.
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

/// A listening socket's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerHandle(u32);

impl ListenerHandle {
    pub(super) fn new(idx: usize) -> ListenerHandle {
        ListenerHandle(idx as u32)
    }
}

/// What a socket is ready for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// `tcp_recv` would return data, end of stream, or an error.
    pub readable: bool,
    /// `tcp_send` would take bytes (or return an error).
    pub writable: bool,
    /// The connection failed with this error.
    pub error: Option<ConnectionError>,
}

/// A snapshot of a connection's TCP variables (like Linux's `tcp_info`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TcpInfo {
    /// State.
    pub state: TcpState,
    /// Data bytes per segment sent (effective MSS less options), once synchronized.
    pub snd_mss: usize,
    /// Congestion window, bytes.
    pub cwnd: usize,
    /// Slow start threshold, bytes (`usize::MAX` until the first loss).
    pub ssthresh: usize,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// Current retransmission timeout (with backoff).
    pub rto: Duration,
    /// Peer's window, bytes.
    pub snd_wnd: usize,
    /// The peer's window scale shift.
    pub snd_wscale: u8,
    /// Our window scale shift.
    pub rcv_wscale: u8,
    /// SACK negotiated.
    pub sack: bool,
    /// Timestamps negotiated.
    pub timestamps: bool,
    /// ECN negotiated (RFC 3168; Linux's `TCPI_OPT_ECN`).
    pub ecn: bool,
    /// Bytes sent and not acknowledged.
    pub unacked: usize,
    /// Consecutive retransmission timeouts.
    pub retransmits: u32,
    /// Bytes waiting to be read.
    pub recv_queue: usize,
    /// The receive buffer's capacity now, the most the advertised window can
    /// be: [`crate::TcpConfig::recv_buffer_initial`], grown by auto-tuning up
    /// to [`crate::TcpConfig::recv_buffer`] (or that from the start).
    pub recv_window_cap: usize,
    /// Bytes in the send buffer (unacknowledged and unsent).
    pub send_queue: usize,
    /// The least RTT seen (RACK's min_RTT; Linux's `tcpi_min_rtt`).
    pub min_rtt: Option<Duration>,
    /// RACK's reordering window now, outside recovery (RFC 8985 section 6.2).
    pub reo_wnd: Duration,
}

pub(super) fn reason_error(r: CloseReason) -> Option<ConnectionError> {
    match r {
        CloseReason::Normal => None,
        CloseReason::Refused => Some(ConnectionError::Refused),
        CloseReason::Reset => Some(ConnectionError::Reset),
        CloseReason::TimedOut => Some(ConnectionError::TimedOut),
        CloseReason::Aborted => Some(ConnectionError::Aborted),
    }
}

impl Engine {
    /// Buffers handed to [`Engine::tcp_send_bytes`] shorter than this many
    /// bytes are copied into the send buffer rather than queued by reference:
    /// a queued buffer costs an entry and a walk at output, more than copying
    /// a few hundred bytes.
    pub const COPY_BELOW: usize = crate::tcp::sendbuf::COPY_BELOW;

    pub(super) fn handle_conn(&self, h: SocketHandle) -> Result<&Conn, InvalidHandle> {
        let slot = self.slots.get(h.index as usize).ok_or(InvalidHandle)?;
        if slot.generation != h.generation {
            return Err(InvalidHandle);
        }
        match slot.conn.as_ref() {
            Some(c) if !c.app_closed => Ok(c),
            _ => Err(InvalidHandle),
        }
    }

    fn handle_conn_mut(&mut self, h: SocketHandle) -> Result<&mut Conn, InvalidHandle> {
        self.handle_conn(h)?;
        self.conn_mut(h.index as usize).ok_or(InvalidHandle)
    }

    fn handle_of(&self, idx: usize) -> SocketHandle {
        let generation = self.slots.get(idx).map_or(0, |s| s.generation);
        SocketHandle {
            index: idx as u32,
            generation,
        }
    }

    /// After a send or a read: a transmit opportunity, nothing else (data moved
    /// in or out of a buffer changes no state, deadline or queue; output and the
    /// bookkeeping after it follow in `poll_transmit`).
    fn wake(&mut self, h: SocketHandle) {
        self.mark_ready(h.index as usize);
    }

    /// After a read: once nothing is left to read, the next bytes are reported
    /// ([`Event::Readable`](super::Event::Readable)).
    #[inline]
    fn drained(&mut self, h: SocketHandle) {
        if let Some(slot) = self.slots.get_mut(h.index as usize)
            && slot
                .conn
                .as_ref()
                .is_some_and(|c| c.rx.is_empty() && !c.fin_received())
        {
            slot.ev.rearm(bits::READABLE);
        }
    }

    /// After an application call: bookkeeping and a transmit opportunity.
    fn touched(&mut self, h: SocketHandle) {
        let idx = h.index as usize;
        self.after_event(idx);
        self.mark_ready(idx);
    }

    /// Listens on `port` on every address of the interface (LISTEN, RFC 9293
    /// section 3.10.1 with a passive open).
    pub fn tcp_listen(&mut self, port: u16) -> Result<ListenerHandle, ListenError> {
        if port == 0 {
            return Err(ListenError::InvalidPort);
        }
        if self.by_port.contains_key(&port) {
            return Err(ListenError::AddrInUse);
        }
        let l = Listener {
            port,
            ready: Default::default(),
            queued: 0,
            embryonic: 0,
            cookies_until: None,
            ev: super::events::EventState::NEW,
        };
        let idx = match self.listeners.iter().position(Option::is_none) {
            Some(i) => {
                if let Some(slot) = self.listeners.get_mut(i) {
                    *slot = Some(l);
                }
                i
            }
            None => {
                self.listeners.push(Some(l));
                self.listeners.len() - 1
            }
        };
        self.by_port.insert(port, idx);
        Ok(ListenerHandle(idx as u32))
    }

    /// Takes the next established connection from a listener's queue.
    pub fn tcp_accept(&mut self, l: ListenerHandle) -> Result<SocketHandle, AcceptError> {
        let lst = self
            .listeners
            .get_mut(l.0 as usize)
            .and_then(Option::as_mut)
            .ok_or(AcceptError::InvalidHandle)?;
        // Stale entries (connections that ended before being taken) are
        // skipped.
        while let Some((idx, generation)) = lst.ready.pop_front() {
            let Some(slot) = self.slots.get_mut(idx) else {
                continue;
            };
            if !slot.accept || slot.generation != generation {
                continue;
            }
            slot.accept = false;
            lst.queued = lst.queued.saturating_sub(1);
            if lst.queued == 0 {
                lst.ev.rearm(bits::READABLE);
            }
            if let Some(c) = slot.conn.as_mut() {
                c.listener = None;
            }
            // Reported from here on as it stands: connected, and readable if
            // data came with it.
            slot.ev.seen = bits::CONNECTED;
            self.tcp_changed(idx);
            return Ok(self.handle_of(idx));
        }
        lst.ev.rearm(bits::READABLE);
        Err(AcceptError::WouldBlock)
    }

    /// Stops listening. Connections not yet accepted are reset.
    pub fn tcp_unlisten(&mut self, l: ListenerHandle) -> Result<(), InvalidHandle> {
        let lst = self
            .listeners
            .get_mut(l.0 as usize)
            .and_then(Option::take)
            .ok_or(InvalidHandle)?;
        self.by_port.remove(&lst.port);
        let pending: Vec<usize> = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| {
                s.conn
                    .as_ref()
                    .is_some_and(|c| c.listener == Some(l.0 as usize))
            })
            .map(|(i, _)| i)
            .collect();
        for idx in pending {
            if let Some(c) = self.conn_mut(idx) {
                c.listener = None;
                c.app_closed = true;
                c.abort();
            }
            self.after_event(idx);
            self.mark_ready(idx);
        }
        Ok(())
    }

    /// Opens a connection to `remote` (an active OPEN): SYN-SENT, from the
    /// interface's address of the same family and a random free ephemeral port
    /// (RFC 6056 section 3.3.2's random search).
    ///
    /// Errors: [`ConnectError::NoAddress`], [`ConnectError::NoPorts`]. A
    /// connection refused or timed out later is reported by
    /// [`Event::Failed`](super::Event::Failed).
    pub fn tcp_connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
    ) -> Result<SocketHandle, ConnectError> {
        self.connect_from(now, None, remote)
    }

    /// [`Engine::tcp_connect`] from a chosen local port (as after `bind`).
    ///
    /// Errors: [`ConnectError::NoAddress`], [`ConnectError::AddrInUse`] if the
    /// port already has a connection to `remote`, [`ConnectError::InvalidPort`]
    /// for port 0.
    pub fn tcp_connect_from(
        &mut self,
        now: Instant,
        local_port: u16,
        remote: SocketAddr,
    ) -> Result<SocketHandle, ConnectError> {
        self.connect_from(now, Some(local_port), remote)
    }

    fn connect_from(
        &mut self,
        now: Instant,
        port: Option<u16>,
        remote: SocketAddr,
    ) -> Result<SocketHandle, ConnectError> {
        self.clock = self.clock.max(now);
        // The address of the interface the route goes out of (`iface`).
        let local_ip = self
            .source_for(remote.ip())
            .ok_or(ConnectError::NoAddress)?;
        self.route_check(remote.ip())
            .map_err(ConnectError::Unroutable)?;
        let local = match port {
            Some(0) => return Err(ConnectError::InvalidPort),
            Some(p) => {
                let cand = SocketAddr::new(local_ip, p);
                if self.by_tuple.contains_key(&(cand, remote)) {
                    return Err(ConnectError::AddrInUse);
                }
                cand
            }
            None => self.ephemeral(local_ip, remote)?,
        };
        let iss = self.isn.isn(now, local, remote);
        // The timestamp offset is a keyed hash of the 4-tuple, as the ISN's
        // is (RFC 7323 section 7.1, RFC 6528): a new connection on a tuple
        // whose last one the peer still holds in TIME-WAIT sends a later
        // TSval than the last it saw, so the peer takes the SYN as a new
        // connection (RFC 6191) instead of rejecting it by PAWS and leaving
        // it to a retransmission a second later, as a random offset would
        // half the time.
        let ts_offset = self.cookies.ts_offset(local, remote);
        let params = self.conn_params(local_ip);
        self.counters.tcp_active_opens += 1;
        let idx = self.insert_conn(|| Conn::connect(now, local, remote, iss, ts_offset, params));
        self.after_event(idx);
        Ok(self.handle_of(idx))
    }

    /// A free ephemeral port for `remote`, searched from a random start.
    fn ephemeral(
        &mut self,
        local_ip: IpAddr,
        remote: SocketAddr,
    ) -> Result<SocketAddr, ConnectError> {
        let (low, high) = EPHEMERAL_PORTS;
        let span = u64::from(high - low) + 1;
        let start = self.rng.below(span);
        (0..span)
            .map(|i| SocketAddr::new(local_ip, low + ((start + i) % span) as u16))
            .find(|cand| {
                !self.by_tuple.contains_key(&(*cand, remote))
                    && !self.by_port.contains_key(&cand.port())
            })
            .ok_or(ConnectError::NoPorts)
    }

    /// Queues `data` for sending; returns how many bytes the send buffer took.
    /// Allowed before the handshake completes (the data waits).
    ///
    /// Errors: [`SendError::WouldBlock`] while the buffer is full (wait for
    /// [`Event::Writable`](super::Event::Writable)); [`SendError::Closed`] after
    /// [`Engine::tcp_shutdown`]; [`SendError::Failed`] once the connection failed.
    pub fn tcp_send(&mut self, h: SocketHandle, data: &[u8]) -> Result<usize, SendError> {
        self.send_with(h, data.is_empty(), |c| c.send(data))
    }

    /// The per-write path of [`Engine::tcp_send`] and [`Engine::tcp_send_bytes`]:
    /// one slot lookup, one state test, `push` into the send buffer (its bytes
    /// taken), a flag test to queue the connection for output. Nagle and
    /// everything else wait for output.
    #[inline(always)]
    fn send_with(
        &mut self,
        h: SocketHandle,
        empty: bool,
        push: impl FnOnce(&mut Conn) -> usize,
    ) -> Result<usize, SendError> {
        let idx = h.index as usize;
        let slot = self
            .slots
            .get_mut(idx)
            .filter(|s| s.generation == h.generation)
            .ok_or(SendError::InvalidHandle)?;
        let c = slot
            .conn
            .as_mut()
            .filter(|c| !c.app_closed)
            .ok_or(SendError::InvalidHandle)?;
        if !c.can_send() {
            // Closed: say why.
            let why = c.close_reason().and_then(reason_error);
            return Err(why.map_or(SendError::Closed, SendError::Failed));
        }
        // Nothing fits exactly when the buffer is full (a send takes as much as
        // fits). Queued before the copy, so that nothing but the buffer is live
        // across it.
        if c.tx.free() == 0 && !empty {
            slot.ev.rearm(bits::WRITABLE);
            return Err(SendError::WouldBlock);
        }
        Engine::enqueue(&mut self.ready, &mut slot.queued, idx);
        let n = push(c);
        if c.tx.free() == 0 {
            // Full: the room that comes back is reported.
            slot.ev.rearm(bits::WRITABLE);
        }
        debug_assert!(n > 0 || empty);
        Ok(n)
    }

    /// Reads received bytes into `buf`. `Ok(0)` is the end of the stream (the peer
    /// closed and everything was read); [`RecvError::WouldBlock`] means no data
    /// yet (wait for [`Event::Readable`](super::Event::Readable));
    /// [`RecvError::Failed`] comes once the connection failed and what arrived
    /// before was read.
    pub fn tcp_recv(&mut self, h: SocketHandle, buf: &mut [u8]) -> Result<usize, RecvError> {
        let c = self.handle_conn_mut(h)?;
        let n = c.recv(buf);
        if n > 0 || buf.is_empty() {
            self.drained(h);
            self.wake(h);
            return Ok(n);
        }
        if let Some(r) = c.close_reason() {
            return match reason_error(r) {
                Some(e) => Err(RecvError::Failed(e)),
                None => Ok(0),
            };
        }
        if c.fin_received() {
            return Ok(0);
        }
        self.drained(h);
        Err(RecvError::WouldBlock)
    }

    /// Closes the sending side: a FIN follows the buffered data (shutdown(SHUT_WR)).
    pub fn tcp_shutdown(&mut self, h: SocketHandle) -> Result<(), InvalidHandle> {
        let c = self.handle_conn_mut(h)?;
        c.shutdown();
        self.touched(h);
        Ok(())
    }

    /// CLOSE (RFC 9293 section 3.10.4): shuts the sending side and gives the handle
    /// up; the engine finishes the close (FIN, TIME-WAIT) on its own. Unread data
    /// makes it an abort with RST instead (RFC 1122 section 4.2.2.13).
    pub fn tcp_close(&mut self, h: SocketHandle) -> Result<(), InvalidHandle> {
        let c = self.handle_conn_mut(h)?;
        if c.rx.is_empty() {
            c.shutdown();
        } else {
            c.abort();
        }
        c.app_closed = true;
        let idx = h.index as usize;
        self.mark_ready(idx);
        self.after_event(idx);
        Ok(())
    }

    /// ABORT (RFC 9293 section 3.10.5): an RST to the peer, buffers dropped, the
    /// handle given up.
    pub fn tcp_abort(&mut self, h: SocketHandle) -> Result<(), InvalidHandle> {
        let c = self.handle_conn_mut(h)?;
        c.abort();
        c.app_closed = true;
        let idx = h.index as usize;
        self.mark_ready(idx);
        self.after_event(idx);
        Ok(())
    }

    /// Turns Nagle's algorithm off (`true`) or on, like `TCP_NODELAY`.
    pub fn tcp_set_nodelay(&mut self, h: SocketHandle, on: bool) -> Result<(), InvalidHandle> {
        self.handle_conn_mut(h)?.no_delay = on;
        self.touched(h);
        Ok(())
    }

    /// The connection's state (STATUS).
    pub fn tcp_state(&self, h: SocketHandle) -> Result<TcpState, InvalidHandle> {
        Ok(self.handle_conn(h)?.tcp_state())
    }

    /// The local and remote addresses.
    pub fn tcp_addrs(&self, h: SocketHandle) -> Result<(SocketAddr, SocketAddr), InvalidHandle> {
        let c = self.handle_conn(h)?;
        Ok((c.local, c.remote))
    }

    /// Whether a connection or a TIME-WAIT record holds the 4-tuple `local`
    /// <-> `remote`. A runtime that steers 4-tuples to this engine (an XDP
    /// program shared with the kernel's stack) keeps the steering until this
    /// turns false: the engine answers the peer until then.
    pub fn tcp_holds(&self, local: SocketAddr, remote: SocketAddr) -> bool {
        self.by_tuple.contains_key(&(local, remote))
    }

    /// What the socket is ready for.
    pub fn tcp_readiness(&self, h: SocketHandle) -> Result<Readiness, InvalidHandle> {
        let c = self.handle_conn(h)?;
        let error = c.close_reason().and_then(reason_error);
        Ok(Readiness {
            readable: !c.rx.is_empty() || c.fin_received() || error.is_some(),
            writable: error.is_some() || (c.can_send() && c.tx.free() > 0),
            error,
        })
    }

    /// TCP variables of the connection.
    pub fn tcp_info(&self, h: SocketHandle) -> Result<TcpInfo, InvalidHandle> {
        let c = self.handle_conn(h)?;
        let snd = c.state.snd();
        let rcv = c.state.rcv();
        Ok(TcpInfo {
            state: c.tcp_state(),
            snd_mss: snd.map_or(0, |s| s.mss),
            cwnd: snd.map_or(0, |s| s.cc.cwnd()),
            ssthresh: snd.map_or(usize::MAX, |s| s.cc.ssthresh()),
            srtt: snd.and_then(|s| s.rtt.srtt()),
            rto: snd.map_or(Duration::ZERO, |s| s.rtt.rto()),
            snd_wnd: snd.map_or(0, |s| s.wnd),
            snd_wscale: snd.map_or(0, |s| s.shift),
            rcv_wscale: rcv.map_or(0, |r| r.shift),
            sack: snd.is_some_and(|s| s.sack_ok),
            timestamps: rcv.is_some_and(|r| r.ts_ok),
            ecn: c.ecn.ok,
            unacked: snd.map_or(0, |s| s.outstanding()),
            retransmits: snd.map_or(0, |s| s.retries),
            recv_queue: c.rx.len(),
            recv_window_cap: c.rx.capacity(),
            send_queue: c.tx.len(),
            min_rtt: snd.and_then(|s| s.rack.min_rtt()),
            reo_wnd: snd.map_or(Duration::ZERO, |s| s.rack_reo_wnd()),
        })
    }

    /// Turns keep-alive probes on with `ka`, or off with `None` (the default):
    /// RFC 9293 section 3.8.4, see [`crate::tcp::Keepalive`]. A connection whose
    /// probes go unanswered fails with [`ConnectionError::TimedOut`].
    pub fn tcp_set_keepalive(
        &mut self,
        h: SocketHandle,
        ka: Option<crate::tcp::Keepalive>,
    ) -> Result<(), InvalidHandle> {
        let c = self.handle_conn_mut(h)?;
        c.ka.cfg = ka;
        c.ka.probes_out = 0;
        c.ka.last_probe = None;
        c.ka.due = false;
        self.touched(h);
        Ok(())
    }

    /// The keep-alive settings.
    pub fn tcp_keepalive(
        &self,
        h: SocketHandle,
    ) -> Result<Option<crate::tcp::Keepalive>, InvalidHandle> {
        Ok(self.handle_conn(h)?.ka.cfg)
    }

    /// [`Engine::tcp_send`] of an owned buffer, without copying it: the send
    /// buffer keeps a reference and output copies from it straight into the
    /// frames. Returns how many bytes were taken from the front of `data` (all of
    /// it if there is room; send the rest, `data.slice(n..)`, later). Buffers
    /// shorter than [`Engine::COPY_BELOW`] bytes are copied. Errors: as
    /// [`Engine::tcp_send`].
    pub fn tcp_send_bytes(&mut self, h: SocketHandle, data: Bytes) -> Result<usize, SendError> {
        self.send_with(h, data.is_empty(), |c| c.send_bytes(data))
    }

    /// [`Engine::tcp_recv`] without a copy: lends the received bytes to `read`
    /// where they lie, as up to two slices in order, and consumes as many as it
    /// returns (it is called again with the next slice only if it took the whole
    /// of the previous one). Returns the bytes consumed. Without data `read` is
    /// not called, and the result is as for [`Engine::tcp_recv`]: `Ok(0)` at the
    /// end of the stream, [`RecvError::WouldBlock`] when nothing arrived yet. (So
    /// `Ok(0)` after `read` was called means it took nothing.)
    pub fn tcp_recv_with(
        &mut self,
        h: SocketHandle,
        read: impl FnMut(&[u8]) -> usize,
    ) -> Result<usize, RecvError> {
        let c = self.handle_conn_mut(h)?;
        if !c.rx.is_empty() {
            let n = c.recv_with(read);
            self.drained(h);
            self.wake(h);
            return Ok(n);
        }
        if let Some(r) = c.close_reason() {
            return match reason_error(r) {
                Some(e) => Err(RecvError::Failed(e)),
                None => Ok(0),
            };
        }
        if c.fin_received() {
            return Ok(0);
        }
        self.drained(h);
        Err(RecvError::WouldBlock)
    }
}
