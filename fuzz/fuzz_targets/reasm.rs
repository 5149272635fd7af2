//! Fuzz target: see linerate_toe::harness::reasm (IP reassembly, alone and in
//! an engine, fed fuzzed fragments and time; memory bounds and reassembled
//! bytes checked after every step).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_toe::harness::reasm(data));
