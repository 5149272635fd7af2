//! What a backend shared with the kernel's stack must be told of linerate's
//! sockets: the ports and 4-tuples linerate owns, so that their frames are
//! steered to linerate and everything else to the kernel.
//!
//! A runtime calls a [`Claims`] where it opens and closes listeners, bound UDP
//! sockets and connections, never per packet. The AF_XDP backend's
//! `xdp::Steering` implements it (entries in its XDP program's maps, and a
//! bound kernel socket holding each port so the kernel neither picks nor
//! serves it); [`NoClaims`] is the backend that owns its whole interface.
//!
//! ```
//! use linerate_nic::claims::{Claims, L4, NoClaims};
//!
//! let claims = NoClaims;
//! claims.claim_port(L4::Tcp, 80)?;
//! claims.release_port(L4::Tcp, 80);
//! # Ok::<(), linerate_nic::claims::ClaimError>(())
//! ```

use std::net::SocketAddr;

/// A transport protocol whose ports are claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum L4 {
    /// TCP (IP protocol 6).
    Tcp,
    /// UDP (IP protocol 17).
    Udp,
}

impl L4 {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            L4::Tcp => 6,
            L4::Udp => 17,
        }
    }
}

/// The steering table that refused an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// Listening and bound ports.
    Ports,
    /// Exact 4-tuples.
    Flows,
    /// Addresses of linerate's own.
    Addresses,
}

impl core::fmt::Display for Table {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Table::Ports => "ports",
            Table::Flows => "flows",
            Table::Addresses => "addresses",
        })
    }
}

/// Why a claim was refused; each variant says what the caller does next.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClaimError {
    /// The kernel's stack uses the port (a kernel socket is bound to it): pick
    /// another port, or refuse the listen.
    InUse {
        /// The protocol.
        l4: L4,
        /// The local address and port.
        local: SocketAddr,
    },
    /// The table is full: refuse the connection (its frames would otherwise go
    /// to the kernel, a black hole). Counted.
    Full {
        /// Which table.
        table: Table,
        /// Its entries.
        capacity: u32,
    },
    /// The 4-tuple is claimed already.
    Exists,
    /// Local and remote addresses of different families.
    Family,
    /// The kernel refused the update for another reason.
    Io(std::io::Error),
}

impl core::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClaimError::InUse { l4, local } => {
                write!(f, "{l4:?} {local} is used by the kernel's stack")
            }
            ClaimError::Full { table, capacity } => write!(
                f,
                "the steering program's {table} table is full ({capacity} entries)"
            ),
            ClaimError::Exists => f.write_str("the 4-tuple is claimed already"),
            ClaimError::Family => f.write_str("local and remote addresses of different families"),
            ClaimError::Io(e) => write!(f, "updating the steering program's maps: {e}"),
        }
    }
}

impl std::error::Error for ClaimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClaimError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ClaimError> for std::io::Error {
    fn from(e: ClaimError) -> std::io::Error {
        let kind = match &e {
            ClaimError::InUse { .. } | ClaimError::Exists => std::io::ErrorKind::AddrInUse,
            ClaimError::Full { .. } => std::io::ErrorKind::OutOfMemory,
            ClaimError::Family => std::io::ErrorKind::InvalidInput,
            ClaimError::Io(e) => e.kind(),
        };
        std::io::Error::new(kind, e)
    }
}

/// The ports and 4-tuples linerate owns on an interface it shares with the
/// kernel. Claims of a port count: a port claimed twice (a listener on every
/// queue) is released after its second release. Called at open and close only.
pub trait Claims: Send + Sync + core::fmt::Debug {
    /// Frames to local `port` are linerate's (a listener, a bound UDP socket,
    /// a VTEP's underlay port).
    fn claim_port(&self, l4: L4, port: u16) -> Result<(), ClaimError>;
    /// Gives up one claim of `port`.
    fn release_port(&self, l4: L4, port: u16);
    /// Frames of the connection `local` <-> `remote` are linerate's.
    fn claim_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr) -> Result<(), ClaimError>;
    /// Gives up the connection's claim.
    fn release_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr);
}

/// Claims for a backend that owns its whole interface: every claim succeeds
/// and changes nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoClaims;

impl Claims for NoClaims {
    fn claim_port(&self, _: L4, _: u16) -> Result<(), ClaimError> {
        Ok(())
    }
    fn release_port(&self, _: L4, _: u16) {}
    fn claim_flow(&self, _: L4, _: SocketAddr, _: SocketAddr) -> Result<(), ClaimError> {
        Ok(())
    }
    fn release_flow(&self, _: L4, _: SocketAddr, _: SocketAddr) {}
}
