//! Fuzz target: see linerate_tunnel::harness::receive (arbitrary underlay
//! frames into a tunnel endpoint's receive path, invariants checked).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_tunnel::harness::receive(data));
