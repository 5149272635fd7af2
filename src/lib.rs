//! linerate: a user-space TCP/IP stack whose NIC layer is offload-aware.
//!
//! This facade re-exports the workspace crates; see each for details. The README
//! follows (its examples are compiled and run as tests).
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub use linerate_dhcp as dhcp;
pub use linerate_dns as dns;
pub use linerate_nic as nic;
pub use linerate_offload as offload;
pub use linerate_rss as rss;
pub use linerate_rt as rt;
pub use linerate_toe as toe;
pub use linerate_tunnel as tunnel;
pub use linerate_vnic as vnic;
pub use linerate_wire as wire;

/// The types an appliance starts from, for one glob import.
///
/// The engine and its socket API with the error of each call, the runtime and
/// its tokio adaptor (or a [`Driver`](prelude::Driver) in a loop of your own),
/// and the NIC layer: the memory backend, the TAP backend, the software-offload
/// shim, and the frames' offload metadata.
///
/// ```
/// use linerate::prelude::*;
/// use std::net::Ipv4Addr;
///
/// let cfg = Config::new([2, 0, 0, 0, 0, 1]).with_ipv4(Ipv4Addr::new(10, 0, 0, 1), 24);
/// let mut engine = Engine::new(cfg, 1);
/// let listener = engine.tcp_listen(80)?;
/// // Each call's error says what to do next.
/// match engine.tcp_accept(listener) {
///     Ok(conn) => println!("accepted {conn:?}"),
///     Err(AcceptError::WouldBlock) => {} // accept again after Event::Acceptable
///     Err(AcceptError::InvalidHandle) => unreachable!("the listener is open"),
/// }
/// assert_eq!(engine.tcp_listen(80), Err(ListenError::AddrInUse));
/// # Ok::<(), ListenError>(())
/// ```
pub mod prelude {
    // The sans-IO engine, its handles, events and errors.
    pub use linerate_toe::{
        AcceptError, Config, ConnectError, ConnectionError, Engine, Event, Instant, InvalidHandle,
        ListenError, ListenerHandle, Readiness, RecvError, SendError, SocketHandle, TcpState,
        UdpBindError, UdpHandle, UdpRecvError, UdpSendError,
    };
    // Running engines: the per-queue runtime and its tokio adaptor, or one
    // engine on one queue in the caller's loop.
    pub use linerate_rt::{
        Driver, Handle, RtError, Runtime, RuntimeConfig, TcpListener, TcpStream, UdpSocket,
    };
    // NICs: the trait, capabilities, frames, the memory backend and the
    // software-offload shim.
    pub use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, NicError, Shim, ShimConfig};
    #[cfg(target_os = "linux")]
    pub use linerate_nic::{Tap, TapConfig};
    pub use linerate_offload::OffloadMeta;
    // Tunnels and virtual NICs over a NIC.
    pub use linerate_tunnel::{Tunnel, vtep::Vtep};
    pub use linerate_vnic::Partition;
}
