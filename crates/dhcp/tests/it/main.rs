//! The DHCP crate's integration tests, one binary: dnsmasq's captured
//! replies parsed and fed to the client, and the fuzz harness under proptest.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod captures;
mod client;
mod harness_props;
