//! Fuzz target: see linerate_wire::harness::nvgre.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_wire::harness::nvgre(data));
