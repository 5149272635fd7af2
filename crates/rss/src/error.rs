//! Typed errors for bad configuration and for source port choice.
//!
//! Nothing on the per-frame path fails: frames that cannot be hashed go to the
//! default queue and are counted. What can fail is configuration (a key of the
//! wrong length, an indirection table of a size no NIC has, a queue number out of
//! range, an empty port range) and source port choice (a range with no free port
//! left for the wanted queue).

use core::fmt;

/// A configuration value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigError {
    /// An RSS key must be 40 bytes (Microsoft RSS) or 52 bytes (some NICs, e.g.
    /// Intel ice / i40e, DPDK `RTE_THASH_KEY_LEN` users).
    KeyLength {
        /// The length that was given.
        len: usize,
    },
    /// The hash input is longer than the key covers (key length - 4 bytes).
    InputTooLong {
        /// The input length that was given.
        len: usize,
        /// The longest input this key can hash.
        max: usize,
    },
    /// An indirection table must have a power-of-two number of entries from 1 to
    /// [`crate::indirection::MAX_SIZE`].
    TableSize {
        /// The size that was given.
        size: usize,
    },
    /// The number of queues must be from 1 to the table size (and at most
    /// `u16::MAX`).
    QueueCount {
        /// The number of queues that was given.
        queues: usize,
        /// The table size it was checked against.
        table_size: usize,
    },
    /// A queue number is not below the number of queues.
    QueueOutOfRange {
        /// The queue that was named.
        queue: u16,
        /// The number of queues.
        queues: u16,
    },
    /// A source port range is empty (its first port above its last) or holds
    /// port 0.
    PortRange {
        /// First port of the range.
        first: u16,
        /// Last port of the range.
        last: u16,
    },
    /// The SIMD hash path was asked for but this CPU (or target) lacks it.
    PathUnavailable,
    /// A queue capacity of zero was asked for.
    QueueCapacity,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::KeyLength { len } => {
                write!(f, "RSS key is {len} bytes, must be 40 or 52")
            }
            ConfigError::InputTooLong { len, max } => {
                write!(
                    f,
                    "hash input is {len} bytes, this key covers at most {max}"
                )
            }
            ConfigError::TableSize { size } => write!(
                f,
                "indirection table size {size} is not a power of two in 1..={}",
                crate::indirection::MAX_SIZE
            ),
            ConfigError::QueueCount { queues, table_size } => write!(
                f,
                "{queues} queues: must be from 1 to the table size {table_size}"
            ),
            ConfigError::QueueOutOfRange { queue, queues } => {
                write!(f, "queue {queue} is out of range (there are {queues})")
            }
            ConfigError::PortRange { first, last } => {
                write!(f, "port range {first}..={last} is empty or holds port 0")
            }
            ConfigError::PathUnavailable => {
                write!(f, "the SIMD Toeplitz path is not available on this CPU")
            }
            ConfigError::QueueCapacity => write!(f, "a queue capacity must be at least 1"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// Source port choice failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PortError {
    /// Every port of the range whose hash lands on `queue` is in use.
    Exhausted {
        /// The queue that was asked for.
        queue: u16,
    },
    /// The queue is not in the indirection table.
    QueueOutOfRange {
        /// The queue that was asked for.
        queue: u16,
        /// The number of queues.
        queues: u16,
    },
    /// The flow's address family differs from the allocator's.
    FamilyMismatch,
    /// The port is outside the allocator's range.
    NotInRange {
        /// The port.
        port: u16,
    },
    /// `release` of a port that is not allocated, or `reserve` of one that is.
    WrongState {
        /// The port.
        port: u16,
        /// True if the port was found in use.
        in_use: bool,
    },
}

impl fmt::Display for PortError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PortError::Exhausted { queue } => {
                write!(
                    f,
                    "no free source port in the range hashes to queue {queue}"
                )
            }
            PortError::QueueOutOfRange { queue, queues } => {
                write!(f, "queue {queue} is out of range (there are {queues})")
            }
            PortError::FamilyMismatch => {
                write!(f, "flow address family differs from the allocator's")
            }
            PortError::NotInRange { port } => write!(f, "port {port} is outside the range"),
            PortError::WrongState { port, in_use: true } => {
                write!(f, "port {port} is already in use")
            }
            PortError::WrongState {
                port,
                in_use: false,
            } => write!(f, "port {port} is not allocated"),
        }
    }
}

impl std::error::Error for PortError {}
