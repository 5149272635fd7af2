//! Fuzz target: see linerate_offload::harness::gro.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_offload::harness::gro(data));
