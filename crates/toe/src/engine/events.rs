//! The engine's event queue: which sockets changed, drained by the caller with
//! [`Engine::poll_event`] (quinn-proto's `Connection::poll` shape), so a runtime
//! serves only the sockets that need it instead of sweeping all of them.
//!
//! [`Event`] says what is reported, and when.
//!
//! # Cost
//!
//! The engine notes a socket as changed (a flag test and, the first time, a
//! push) where a segment, a timer or an ICMP error reaches it; the readiness is
//! worked out once per noted socket when the queue is drained. A socket nothing
//! happens to costs nothing, so a queue thread with 100,000 idle connections
//! serves one busy one as it serves it alone (`benches/idle.rs`).

use super::Engine;
use super::error::ConnectionError;
use super::socket::{ListenerHandle, SocketHandle, reason_error};
use super::udp::UdpHandle;
use std::collections::VecDeque;

/// Something that happened to a socket, from [`Engine::poll_event`].
///
/// # What is reported, and when
///
/// Events are edges. Each socket keeps the readiness it was last seen with,
/// and an event is reported when a readiness bit turns on that was off:
///
/// * [`Event::Connected`]: an active open reached ESTABLISHED (once).
/// * [`Event::Readable`]: bytes, the end of the stream, or an error to read,
///   where there were none. A receive call that finds or leaves nothing to read
///   ([`RecvError::WouldBlock`](super::RecvError::WouldBlock), or a buffer
///   drained) arms it again: read until then, as with `EPOLLET`.
/// * [`Event::Writable`]: the send buffer has room again after a send was
///   refused ([`SendError::WouldBlock`](super::SendError::WouldBlock)) or filled it.
/// * [`Event::Closed`] / [`Event::Failed`]: the connection ended, in order or
///   with the error its calls now return (once).
/// * [`Event::Acceptable`]: a listener's accept queue has a connection, where
///   an accept call last found or left it empty. A connection taken with
///   [`Engine::tcp_accept`] is reported as it stands right after (readable if
///   data came with it, writable).
/// * [`Event::UdpReadable`] / [`Event::UdpWritable`]: as for TCP, per datagram
///   queue.
/// * [`Event::AddressAdded`] / [`Event::AddressRemoved`]: an interface
///   address came or went ([`Engine::set_ipv4`], SLAAC, ...), once each.
/// * [`Event::Dhcp`]: the DHCP channel ([`Engine::dhcp_recv`]) has
///   something where it had nothing.
/// * [`Event::DnsServers`]: the DNS servers learnt from router
///   advertisements ([`Engine::dns_servers`]) changed.
///
/// A socket whose readiness did not change is never reported, however many
/// segments, timers or calls touched it; a socket whose handle was given up
/// (closed, aborted, unlistened) is never reported again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Event {
    /// An active open completed: the connection is ESTABLISHED.
    Connected(SocketHandle),
    /// [`Engine::tcp_recv`] now returns bytes, the end of the stream or an error.
    Readable(SocketHandle),
    /// [`Engine::tcp_send`] now takes bytes.
    Writable(SocketHandle),
    /// The connection ended in order (both FINs exchanged and acknowledged);
    /// the handle stays valid until [`Engine::tcp_close`].
    Closed(SocketHandle),
    /// The connection failed; its calls return this error. The handle stays
    /// valid until [`Engine::tcp_close`] or [`Engine::tcp_abort`].
    Failed(SocketHandle, ConnectionError),
    /// [`Engine::tcp_accept`] now returns a connection.
    Acceptable(ListenerHandle),
    /// [`Engine::udp_recv_from`] now returns a datagram.
    UdpReadable(UdpHandle),
    /// [`Engine::udp_send_to`] now takes a datagram.
    UdpWritable(UdpHandle),
    /// The interface has this address from now on.
    AddressAdded(std::net::IpAddr),
    /// The interface no longer has this address.
    AddressRemoved(std::net::IpAddr),
    /// [`Engine::dhcp_recv`] now returns something.
    Dhcp,
    /// [`Engine::dns_servers`] changed.
    DnsServers,
}

/// Readiness bits (what an event reports when one turns on).
pub(super) mod bits {
    pub const CONNECTED: u8 = 1;
    pub const READABLE: u8 = 2;
    pub const WRITABLE: u8 = 4;
    pub const CLOSED: u8 = 8;
    /// Bits that stay on once reported.
    pub const STICKY: u8 = CONNECTED | CLOSED;
}

/// A socket noted as changed, by slot.
#[derive(Debug, Clone, Copy)]
enum Changed {
    Tcp(usize),
    Listener(usize),
    Udp(usize),
}

/// Per-socket event state: whether the socket is in the changed queue, and the
/// readiness it was last seen with.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct EventState {
    pub(super) queued: bool,
    pub(super) seen: u8,
}

impl EventState {
    /// A socket nothing was reported for yet.
    pub(super) const NEW: EventState = EventState {
        queued: false,
        seen: 0,
    };

    /// Marks it taken off the changed queue.
    pub(super) fn clear_queued(&mut self) {
        self.queued = false;
    }

    /// Forgets `bit`, so that it is reported when it turns on again.
    #[inline]
    pub(super) fn rearm(&mut self, bit: u8) {
        self.seen &= !bit;
    }
}

/// The changed sockets and the events worked out but not yet handed out.
#[derive(Debug, Default, Clone)]
pub(super) struct EventQueue {
    changed: VecDeque<Changed>,
    out: VecDeque<Event>,
}

impl EventQueue {
    /// Queues connection `idx` (its `queued` flag just set).
    #[inline]
    pub(super) fn push_tcp(&mut self, idx: usize) {
        self.changed.push_back(Changed::Tcp(idx));
    }

    /// Queues an event that belongs to no socket.
    pub(super) fn push(&mut self, e: Event) {
        self.out.push_back(e);
    }

    /// Bytes held by the queues' storage.
    pub(super) fn bytes(&self) -> usize {
        self.changed.capacity() * size_of::<Changed>() + self.out.capacity() * size_of::<Event>()
    }
}

impl Engine {
    /// The next event, or `None` when no socket changed since the last call
    /// returned `None`. See [`Event`] for what each means and when it comes.
    ///
    /// Answers change after [`Engine::handle_frame`], [`Engine::handle_frames`],
    /// [`Engine::handle_timeout`] and [`Engine::tcp_accept`]; drain them after
    /// those, then serve the sockets named.
    pub fn poll_event(&mut self) -> Option<Event> {
        loop {
            if let Some(e) = self.events.out.pop_front() {
                return Some(e);
            }
            match self.events.changed.pop_front()? {
                Changed::Tcp(idx) => self.tcp_events(idx),
                Changed::Listener(idx) => self.listener_events(idx),
                Changed::Udp(idx) => self.udp_events(idx),
            }
        }
    }

    /// True if [`Engine::poll_event`] may return an event.
    pub fn has_events(&self) -> bool {
        !self.events.out.is_empty() || !self.events.changed.is_empty()
    }

    /// Notes connection `idx` as changed.
    #[inline]
    pub(super) fn tcp_changed(&mut self, idx: usize) {
        if let Some(slot) = self.slots.get_mut(idx)
            && !slot.ev.queued
        {
            slot.ev.queued = true;
            self.events.push_tcp(idx);
        }
    }

    /// Notes listener `idx` as changed.
    pub(super) fn listener_changed(&mut self, idx: usize) {
        if let Some(Some(l)) = self.listeners.get_mut(idx)
            && !l.ev.queued
        {
            l.ev.queued = true;
            self.events.changed.push_back(Changed::Listener(idx));
        }
    }

    /// Notes UDP socket `idx` as changed.
    pub(super) fn udp_changed(&mut self, idx: usize) {
        if let Some(ev) = self.udp.event_state(idx)
            && !ev.queued
        {
            ev.queued = true;
            self.events.changed.push_back(Changed::Udp(idx));
        }
    }

    fn tcp_events(&mut self, idx: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        slot.ev.queued = false;
        let Some(c) = slot.conn.as_ref() else {
            return;
        };
        // Not the application's (given up, or not accepted yet).
        if c.app_closed || slot.accept || c.listener.is_some() {
            return;
        }
        let reason = c.close_reason();
        let error = reason.and_then(reason_error);
        let mut cur = 0;
        if synchronized(c.tcp_state()) {
            cur |= bits::CONNECTED;
        }
        if !c.rx.is_empty() || c.fin_received() || reason.is_some() {
            cur |= bits::READABLE;
        }
        if reason.is_none() && cur & bits::CONNECTED != 0 && c.can_send() && c.tx.free() > 0 {
            cur |= bits::WRITABLE;
        }
        if reason.is_some() {
            cur |= bits::CLOSED;
        }
        let new = cur & !slot.ev.seen;
        slot.ev.seen = cur | (slot.ev.seen & bits::STICKY);
        if new == 0 {
            return;
        }
        let h = SocketHandle::new(idx, slot.generation);
        let out = &mut self.events.out;
        if new & bits::CONNECTED != 0 {
            out.push_back(Event::Connected(h));
        }
        if new & bits::READABLE != 0 {
            out.push_back(Event::Readable(h));
        }
        if new & bits::WRITABLE != 0 {
            out.push_back(Event::Writable(h));
        }
        if new & bits::CLOSED != 0 {
            out.push_back(match error {
                Some(e) => Event::Failed(h, e),
                None => Event::Closed(h),
            });
        }
    }

    fn listener_events(&mut self, idx: usize) {
        let Some(Some(l)) = self.listeners.get_mut(idx) else {
            return;
        };
        l.ev.queued = false;
        let cur = if l.queued > 0 { bits::READABLE } else { 0 };
        let new = cur & !l.ev.seen;
        l.ev.seen = cur;
        if new != 0 {
            self.events
                .out
                .push_back(Event::Acceptable(ListenerHandle::new(idx)));
        }
    }

    fn udp_events(&mut self, idx: usize) {
        let send_buffer = self.cfg.udp.send_buffer;
        let Some((h, cur, ev)) = self.udp.readiness_bits(idx, send_buffer) else {
            return;
        };
        let new = cur & !ev.seen;
        ev.seen = cur;
        if new & bits::READABLE != 0 {
            self.events.out.push_back(Event::UdpReadable(h));
        }
        if new & bits::WRITABLE != 0 {
            self.events.out.push_back(Event::UdpWritable(h));
        }
    }
}

/// The connection got past the handshake (ESTABLISHED or a later state).
fn synchronized(s: crate::tcp::TcpState) -> bool {
    use crate::tcp::TcpState as S;
    !matches!(s, S::Closed | S::Listen | S::SynSent | S::SynReceived)
}
