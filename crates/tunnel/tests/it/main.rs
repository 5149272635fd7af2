//! The tunnel crate's integration tests, one binary: each module is one
//! subject, the shared set-ups in `common`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod config;
mod encap;
mod engine;
mod fuzz_seeds;
mod group;
mod offloads;
mod refusals;
mod remotes;
mod sack_batch;
mod vnis;
mod vtep;
mod vtep_learning;
mod vtep_runtime;
