//! Fuzz target: see linerate_wire::harness::views.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_wire::harness::views(data));
