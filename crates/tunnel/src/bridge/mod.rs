//! VTEP bridging: per-VNI bridge domains joining local ports and remote VTEPs.
//!
//! [`fdb`] is the forwarding database: learning, ageing, static entries, bounds,
//! flood lists and the per-frame forwarding decision.

pub mod fdb;

pub use fdb::{
    Dest, DropReason, Fdb, FdbConfig, FdbCounters, FdbError, FdbRecord, Forward, Learned, Mac,
    MacFmt,
};

pub mod suppress;

pub use suppress::{
    Answer, NeighRecord, Suppress, SuppressConfig, SuppressCounters, SuppressError,
};

pub mod domain;

mod pmtu;

pub use domain::{
    BridgeDomain, DomainConfig, L2MISS_INTERVAL, L2MISS_LINES, Overlay, PortCounters,
};

#[cfg(feature = "harness")]
pub mod harness;
