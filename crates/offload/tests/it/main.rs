//! The offload crate's integration tests, one binary: each module is one
//! subject; `common` builds frames (also for the NIC crate's tests and the GSO
//! bench, by path), `gro_streams` and `gro_util` drive GRO.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod gro_streams;
mod gro_util;

mod gro_behaviour;
mod gro_chain;
mod gro_ecn;
mod gro_fast;
mod gro_prop;
mod gro_rules;
mod gro_split;
mod gro_tunnel_rules;
mod gso_gro_roundtrip;
mod gso_props;
mod robustness;
mod virtio_roundtrip;
