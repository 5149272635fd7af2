//! The RSS crate's integration tests, one binary: each module is one subject,
//! the shared set-ups in `common`, the published vectors in `../data`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

mod dispatch;
mod distribution;
mod fast_path;
mod frames;
mod gfni;
mod paths;
mod sport;
mod verification;
