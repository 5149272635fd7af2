//! The linerate connection engine (being written).
#![forbid(unsafe_code)]

pub mod config;
pub mod counters;
pub mod engine;
pub(crate) mod net;
pub mod rng;
pub mod sim;
pub mod tcp;
pub mod time;

pub use config::{Config, TcpConfig};
pub use counters::Counters;
pub use engine::{Engine, Error, ListenerHandle, Readiness, SocketHandle, TcpInfo};
pub use tcp::TcpState;
pub use time::Instant;
