//! linerate: a user-space TCP/IP stack whose NIC layer is offload-aware.
//!
//! This facade re-exports the workspace crates; see each for details.
//!
//! ```
//! let frame = [0u8; 10];
//! assert!(linerate::wire::layout::parse(&frame).is_err());
//! ```
#![forbid(unsafe_code)]

pub use linerate_wire as wire;
