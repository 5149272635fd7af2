//! What a socket call can fail with: one type per operation whose callers do
//! different things next (quinn-proto's `WriteError`, `ConnectError`), each
//! variant naming the `errno` it stands for and what to do about it.
//!
//! * [`InvalidHandle`]: the one error every call on a handle shares.
//! * [`ConnectionError`]: why a connection failed. [`Event::Failed`] carries
//!   it, [`Readiness::error`] holds it, and [`SendError::Failed`] and
//!   [`RecvError::Failed`] return it once it happened.
//! * Per call: [`ListenError`], [`AcceptError`], [`ConnectError`],
//!   [`SendError`], [`RecvError`], [`UdpBindError`], [`UdpSendError`],
//!   [`UdpRecvError`].
//!
//! Every one converts into [`std::io::Error`] with the `ErrorKind` of its
//! `errno` (`From`), so a caller with an `io::Result` uses `?`; and
//! [`InvalidHandle`] and [`ConnectionError`] convert into the per-call types
//! that contain them.
//!
//! [`Event::Failed`]: super::Event::Failed
//! [`Readiness::error`]: super::Readiness::error

use core::fmt;
use std::io;

/// The handle does not name a live socket: it was closed, aborted or
/// unlistened, or never came from this engine (`EBADF`). A program error: the
/// handle is not usable again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct InvalidHandle;

impl fmt::Display for InvalidHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid socket handle")
    }
}

impl std::error::Error for InvalidHandle {}

impl From<InvalidHandle> for io::Error {
    fn from(e: InvalidHandle) -> io::Error {
        io::Error::other(e)
    }
}

/// Why a connection failed. It comes once as
/// [`Event::Failed`](super::Event::Failed); from then on reads and writes
/// return it ([`RecvError::Failed`] once the received bytes are read,
/// [`SendError::Failed`]). The handle stays valid until
/// [`Engine::tcp_close`](super::Engine::tcp_close) or
/// [`Engine::tcp_abort`](super::Engine::tcp_abort), which the caller calls next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectionError {
    /// The peer answered the SYN with RST, or an ICMP port or protocol
    /// unreachable came back for it (`ECONNREFUSED`): nothing listens there.
    Refused,
    /// The peer reset the connection (`ECONNRESET`).
    Reset,
    /// Retransmissions, SYN retries or keep-alive probes went unanswered
    /// (`ETIMEDOUT`).
    TimedOut,
    /// The connection was aborted on this side (`ECONNABORTED`): its listener
    /// was closed before it was accepted, or the engine gave it up.
    Aborted,
}

impl ConnectionError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            ConnectionError::Refused => io::ErrorKind::ConnectionRefused,
            ConnectionError::Reset => io::ErrorKind::ConnectionReset,
            ConnectionError::TimedOut => io::ErrorKind::TimedOut,
            ConnectionError::Aborted => io::ErrorKind::ConnectionAborted,
        }
    }
}

impl fmt::Display for ConnectionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectionError::Refused => "connection refused",
            ConnectionError::Reset => "connection reset by peer",
            ConnectionError::TimedOut => "connection timed out",
            ConnectionError::Aborted => "connection aborted",
        })
    }
}

impl std::error::Error for ConnectionError {}

impl From<ConnectionError> for io::Error {
    fn from(e: ConnectionError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Why [`Engine::tcp_listen`](super::Engine::tcp_listen) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListenError {
    /// The port is already listened on (`EADDRINUSE`): close that listener
    /// first, or use another port.
    AddrInUse,
    /// Port 0 (`EINVAL`): the engine does not pick a listening port; name one.
    InvalidPort,
}

impl ListenError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            ListenError::AddrInUse => io::ErrorKind::AddrInUse,
            ListenError::InvalidPort => io::ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ListenError::AddrInUse => "address in use: the port is already listened on",
            ListenError::InvalidPort => "cannot listen on port 0",
        })
    }
}

impl std::error::Error for ListenError {}

impl From<ListenError> for io::Error {
    fn from(e: ListenError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Why [`Engine::tcp_accept`](super::Engine::tcp_accept) returned no connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AcceptError {
    /// The listener handle is not live (`EBADF`).
    InvalidHandle,
    /// No connection is waiting (`EAGAIN`): accept again after
    /// [`Event::Acceptable`](super::Event::Acceptable).
    WouldBlock,
}

impl AcceptError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            AcceptError::InvalidHandle => io::ErrorKind::Other,
            AcceptError::WouldBlock => io::ErrorKind::WouldBlock,
        }
    }
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::InvalidHandle => InvalidHandle.fmt(f),
            AcceptError::WouldBlock => f.write_str("no connection waiting to be accepted"),
        }
    }
}

impl std::error::Error for AcceptError {}

impl From<InvalidHandle> for AcceptError {
    fn from(_: InvalidHandle) -> AcceptError {
        AcceptError::InvalidHandle
    }
}

impl From<AcceptError> for io::Error {
    fn from(e: AcceptError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// The engine's ephemeral port range, first and last (RFC 6335's dynamic
/// ports): the source ports [`Engine::tcp_connect`](super::Engine::tcp_connect)
/// and a UDP bind to port 0 choose from.
pub const EPHEMERAL_PORTS: (u16, u16) = (49_152, 65_535);

/// Why [`Engine::tcp_connect`](super::Engine::tcp_connect) or
/// [`Engine::tcp_connect_from`](super::Engine::tcp_connect_from) failed at once.
/// (A connection that fails later, refused or timed out, is reported by
/// [`Event::Failed`](super::Event::Failed) with a [`ConnectionError`].)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectError {
    /// The interface has no address of the destination's family
    /// (`EADDRNOTAVAIL`): configure one ([`crate::Config::with_ipv4`],
    /// [`crate::Config::with_ipv6`]) or connect to the other family.
    NoAddress,
    /// Every source port of [`EPHEMERAL_PORTS`] (16,384) is in use toward this
    /// remote address and port (`EADDRNOTAVAIL`). Each remote address and port
    /// has a range of its own: connect to more server ports or addresses, or
    /// wait for connections to close (TIME-WAIT holds a port for 2 MSL).
    NoPorts,
    /// The chosen local port already has a connection to this remote address
    /// and port, in any state including TIME-WAIT (`EADDRINUSE`): choose
    /// another port.
    AddrInUse,
    /// Local port 0 for [`Engine::tcp_connect_from`](super::Engine::tcp_connect_from)
    /// (`EINVAL`): call [`Engine::tcp_connect`](super::Engine::tcp_connect) to
    /// have one chosen.
    InvalidPort,
    /// The routing table has no way to the destination
    /// ([`Config::routes`](crate::Config::routes)).
    Unroutable(Unroutable),
}

/// Why the routing table refuses a destination
/// ([`Config::routes`](crate::Config::routes)), with the errno Linux gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unroutable {
    /// No route covers it (`ENETUNREACH`): add one, or a default route
    /// ([`Config::with_gateway`](crate::Config::with_gateway)).
    NoRoute,
    /// An unreachable route covers it (`EHOSTUNREACH`).
    Unreachable,
    /// A blackhole route covers it (`EINVAL`).
    Blackhole,
}

impl Unroutable {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            Unroutable::NoRoute => io::ErrorKind::NetworkUnreachable,
            Unroutable::Unreachable => io::ErrorKind::HostUnreachable,
            Unroutable::Blackhole => io::ErrorKind::InvalidInput,
        }
    }
}

impl fmt::Display for Unroutable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Unroutable::NoRoute => "network unreachable: no route covers the destination",
            Unroutable::Unreachable => {
                "host unreachable: an unreachable route covers the destination"
            }
            Unroutable::Blackhole => "a blackhole route covers the destination",
        })
    }
}

impl std::error::Error for Unroutable {}

impl ConnectError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            ConnectError::NoAddress | ConnectError::NoPorts => io::ErrorKind::AddrNotAvailable,
            ConnectError::AddrInUse => io::ErrorKind::AddrInUse,
            ConnectError::InvalidPort => io::ErrorKind::InvalidInput,
            ConnectError::Unroutable(u) => u.kind(),
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (first, last) = EPHEMERAL_PORTS;
        match self {
            ConnectError::NoAddress => {
                f.write_str("no address of the destination's family on the interface")
            }
            ConnectError::NoPorts => write!(
                f,
                "no free source port: all {} of the ephemeral range {first}-{last} are in use \
                 toward this remote address and port; connect to more server ports or addresses",
                usize::from(last - first) + 1
            ),
            ConnectError::AddrInUse => {
                f.write_str("address in use: the local port already has a connection to this remote address and port")
            }
            ConnectError::InvalidPort => f.write_str("cannot connect from local port 0"),
            ConnectError::Unroutable(u) => u.fmt(f),
        }
    }
}

impl std::error::Error for ConnectError {}

impl From<ConnectError> for io::Error {
    fn from(e: ConnectError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Why [`Engine::tcp_send`](super::Engine::tcp_send) or
/// [`Engine::tcp_send_bytes`](super::Engine::tcp_send_bytes) took nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendError {
    /// The handle is not live (`EBADF`).
    InvalidHandle,
    /// The send buffer is full (`EAGAIN`): send again after
    /// [`Event::Writable`](super::Event::Writable).
    WouldBlock,
    /// The sending side is closed (`EPIPE`): [`Engine::tcp_shutdown`](super::Engine::tcp_shutdown)
    /// was called, or the connection ended in order. Nothing more can be sent.
    Closed,
    /// The connection failed (its [`ConnectionError`]): close the handle.
    Failed(ConnectionError),
}

impl SendError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            SendError::InvalidHandle => io::ErrorKind::Other,
            SendError::WouldBlock => io::ErrorKind::WouldBlock,
            SendError::Closed => io::ErrorKind::BrokenPipe,
            SendError::Failed(e) => e.kind(),
        }
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::InvalidHandle => InvalidHandle.fmt(f),
            SendError::WouldBlock => f.write_str("send buffer full"),
            SendError::Closed => f.write_str("socket closed for writing"),
            SendError::Failed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SendError {}

impl From<InvalidHandle> for SendError {
    fn from(_: InvalidHandle) -> SendError {
        SendError::InvalidHandle
    }
}

impl From<ConnectionError> for SendError {
    fn from(e: ConnectionError) -> SendError {
        SendError::Failed(e)
    }
}

impl From<SendError> for io::Error {
    fn from(e: SendError) -> io::Error {
        match e {
            SendError::Failed(c) => c.into(),
            e => io::Error::new(e.kind(), e),
        }
    }
}

/// Why [`Engine::tcp_recv`](super::Engine::tcp_recv) or
/// [`Engine::tcp_recv_with`](super::Engine::tcp_recv_with) returned no bytes.
/// (The end of the stream is `Ok(0)`, not an error.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvError {
    /// The handle is not live (`EBADF`).
    InvalidHandle,
    /// Nothing has arrived yet (`EAGAIN`): read again after
    /// [`Event::Readable`](super::Event::Readable).
    WouldBlock,
    /// The connection failed (its [`ConnectionError`]) and every byte that
    /// arrived before was read: close the handle.
    Failed(ConnectionError),
}

impl RecvError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            RecvError::InvalidHandle => io::ErrorKind::Other,
            RecvError::WouldBlock => io::ErrorKind::WouldBlock,
            RecvError::Failed(e) => e.kind(),
        }
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::InvalidHandle => InvalidHandle.fmt(f),
            RecvError::WouldBlock => f.write_str("nothing received yet"),
            RecvError::Failed(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RecvError {}

impl From<InvalidHandle> for RecvError {
    fn from(_: InvalidHandle) -> RecvError {
        RecvError::InvalidHandle
    }
}

impl From<ConnectionError> for RecvError {
    fn from(e: ConnectionError) -> RecvError {
        RecvError::Failed(e)
    }
}

impl From<RecvError> for io::Error {
    fn from(e: RecvError) -> io::Error {
        match e {
            RecvError::Failed(c) => c.into(),
            e => io::Error::new(e.kind(), e),
        }
    }
}

/// Why [`Engine::udp_bind`](super::Engine::udp_bind) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpBindError {
    /// The address is neither the unspecified address nor the interface's
    /// address of that family (`EADDRNOTAVAIL`): bind to one of those.
    NoAddress,
    /// The port is bound for that family (`EADDRINUSE`): close that socket
    /// first, or use another port (or 0).
    AddrInUse,
    /// Port 0 and every port of [`EPHEMERAL_PORTS`] is bound for that family
    /// (`EADDRNOTAVAIL`): close sockets, or bind named ports outside the range.
    NoPorts,
}

impl UdpBindError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            UdpBindError::NoAddress | UdpBindError::NoPorts => io::ErrorKind::AddrNotAvailable,
            UdpBindError::AddrInUse => io::ErrorKind::AddrInUse,
        }
    }
}

impl fmt::Display for UdpBindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UdpBindError::NoAddress => "no such address on the interface",
            UdpBindError::AddrInUse => "address in use: the port is bound",
            UdpBindError::NoPorts => "no free ephemeral UDP port",
        })
    }
}

impl std::error::Error for UdpBindError {}

impl From<UdpBindError> for io::Error {
    fn from(e: UdpBindError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Why [`Engine::udp_send_to`](super::Engine::udp_send_to) or
/// [`Engine::udp_send_to_segmented`](super::Engine::udp_send_to_segmented)
/// queued nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpSendError {
    /// The handle is not live (`EBADF`).
    InvalidHandle,
    /// The socket's send queue is full (`EAGAIN`, counted in
    /// [`Counters::udp_sndbuf_errors`](crate::Counters::udp_sndbuf_errors)):
    /// send again after [`Event::UdpWritable`](super::Event::UdpWritable).
    WouldBlock,
    /// The interface has no address of the destination's family to send from
    /// (`EADDRNOTAVAIL`).
    NoAddress,
    /// The datagram does not fit the path MTU
    /// ([`Engine::udp_max_payload`](super::Engine::udp_max_payload)), a UDP
    /// length field, or [`MAX_UDP_SEGMENTS`](super::MAX_UDP_SEGMENTS) segments
    /// (`EMSGSIZE`): send less per call, or segment it.
    MessageTooLong,
    /// The destination is of the other family than the socket, has port 0 or
    /// is the unspecified address (`EINVAL`).
    InvalidDestination,
    /// A segment size of 0 (`EINVAL`).
    InvalidSegmentSize,
    /// The routing table has no way to the destination
    /// ([`Config::routes`](crate::Config::routes)).
    Unroutable(Unroutable),
}

impl UdpSendError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            UdpSendError::InvalidHandle => io::ErrorKind::Other,
            UdpSendError::WouldBlock => io::ErrorKind::WouldBlock,
            UdpSendError::NoAddress => io::ErrorKind::AddrNotAvailable,
            UdpSendError::MessageTooLong
            | UdpSendError::InvalidDestination
            | UdpSendError::InvalidSegmentSize => io::ErrorKind::InvalidInput,
            UdpSendError::Unroutable(u) => u.kind(),
        }
    }
}

impl fmt::Display for UdpSendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UdpSendError::InvalidHandle => InvalidHandle.fmt(f),
            UdpSendError::WouldBlock => f.write_str("UDP send queue full"),
            UdpSendError::NoAddress => {
                f.write_str("no address of the destination's family on the interface")
            }
            UdpSendError::MessageTooLong => f.write_str("message too long"),
            UdpSendError::Unroutable(u) => u.fmt(f),
            UdpSendError::InvalidDestination => f.write_str(
                "invalid destination: the other family, port 0 or the unspecified address",
            ),
            UdpSendError::InvalidSegmentSize => f.write_str("invalid segment size 0"),
        }
    }
}

impl std::error::Error for UdpSendError {}

impl From<InvalidHandle> for UdpSendError {
    fn from(_: InvalidHandle) -> UdpSendError {
        UdpSendError::InvalidHandle
    }
}

impl From<UdpSendError> for io::Error {
    fn from(e: UdpSendError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// Why [`Engine::udp_recv_from`](super::Engine::udp_recv_from) or
/// [`Engine::udp_recv_with`](super::Engine::udp_recv_with) returned no datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpRecvError {
    /// The handle is not live (`EBADF`).
    InvalidHandle,
    /// No datagram is waiting (`EAGAIN`): receive again after
    /// [`Event::UdpReadable`](super::Event::UdpReadable).
    WouldBlock,
}

impl UdpRecvError {
    /// The `std::io` kind of the error.
    pub fn kind(self) -> io::ErrorKind {
        match self {
            UdpRecvError::InvalidHandle => io::ErrorKind::Other,
            UdpRecvError::WouldBlock => io::ErrorKind::WouldBlock,
        }
    }
}

impl fmt::Display for UdpRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UdpRecvError::InvalidHandle => InvalidHandle.fmt(f),
            UdpRecvError::WouldBlock => f.write_str("no datagram waiting"),
        }
    }
}

impl std::error::Error for UdpRecvError {}

impl From<InvalidHandle> for UdpRecvError {
    fn from(_: InvalidHandle) -> UdpRecvError {
        UdpRecvError::InvalidHandle
    }
}

impl From<UdpRecvError> for io::Error {
    fn from(e: UdpRecvError) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kinds a `std::io` caller sees are those of the errno each variant
    /// documents; a failed connection reads the same through every call.
    #[test]
    fn io_kinds_follow_errno() {
        use io::ErrorKind as K;
        let cases: [(io::Error, K); 12] = [
            (ConnectError::NoPorts.into(), K::AddrNotAvailable),
            (ConnectError::AddrInUse.into(), K::AddrInUse),
            (ListenError::AddrInUse.into(), K::AddrInUse),
            (SendError::WouldBlock.into(), K::WouldBlock),
            (SendError::Closed.into(), K::BrokenPipe),
            (
                SendError::Failed(ConnectionError::Reset).into(),
                K::ConnectionReset,
            ),
            (
                RecvError::Failed(ConnectionError::Refused).into(),
                K::ConnectionRefused,
            ),
            (RecvError::WouldBlock.into(), K::WouldBlock),
            (ConnectionError::TimedOut.into(), K::TimedOut),
            (ConnectionError::Aborted.into(), K::ConnectionAborted),
            (UdpSendError::MessageTooLong.into(), K::InvalidInput),
            (UdpBindError::NoPorts.into(), K::AddrNotAvailable),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
        }
        // A failure converted through a per-call error keeps its message.
        let via: io::Error = RecvError::from(ConnectionError::Reset).into();
        assert_eq!(via.to_string(), ConnectionError::Reset.to_string());
    }

    /// The hint on running out of source ports names the range and the way out.
    #[test]
    fn no_ports_says_how_to_get_more() {
        let s = ConnectError::NoPorts.to_string();
        assert!(s.contains("16384") && s.contains("49152-65535"), "{s}");
        assert!(s.contains("more server ports or addresses"), "{s}");
    }
}
