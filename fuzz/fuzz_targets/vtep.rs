//! Fuzz target: see linerate_tunnel::bridge::harness::vtep.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_tunnel::bridge::harness::vtep(data));
