//! The runtime's integration tests, one binary: each module is one subject
//! (bursts, claims, configuration, DNS, the driver, errors, lifecycle, tasks
//! on queue threads, readiness, services, the tokio adaptor, UDP, workers),
//! with the shared set-ups in `common` (also used by `system_xdp_shared` and
//! the top-level `system_rt_*` tests). One binary links the runtime and its
//! dev-dependencies once instead of once per subject.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

#[path = "../common/mod.rs"]
mod common;

mod burst;
mod claims;
mod config;
mod dns;
mod driver;
mod errors;
mod lifecycle;
mod local;
mod readiness;
mod service;
mod tokio_adaptor;
mod udp;
mod worker;
