//! Test support for linerate, shared by tests, examples, benchmarks and fuzz seeds.
//!
//! * [`catalog`]: one frame of every kind linerate-wire knows, each with what an
//!   independent dissector (tshark) must read from it.
//! * [`pcap`]: write and read classic pcap files (Ethernet link type).
//! * [`tshark`]: run tshark with checksum validation on and read its field output.
//! * [`netns`]: network namespaces, veth pairs and commands inside them, each a guard
//!   that removes what it made when dropped, also when a test fails.
#![deny(unsafe_code)]

pub mod capture;
pub mod catalog;
pub mod netns;
pub mod pcap;
pub mod tshark;
