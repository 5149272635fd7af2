//! linerate: a user-space TCP/IP stack whose NIC layer is offload-aware.
//!
//! This facade re-exports the workspace crates; see each for details. The README
//! follows (its examples are compiled and run as tests).
//!
#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub use linerate_nic as nic;
pub use linerate_offload as offload;
pub use linerate_rss as rss;
pub use linerate_rt as rt;
pub use linerate_toe as toe;
pub use linerate_tunnel as tunnel;
pub use linerate_vnic as vnic;
pub use linerate_wire as wire;
