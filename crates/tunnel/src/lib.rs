//! Tunnels (placeholder: the tunnel branch owns this file).
#![forbid(unsafe_code)]

pub mod bridge;
pub mod vtep;
