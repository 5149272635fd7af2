//! Fuzz target: see linerate_toe::harness::engine (the TCP engine with open
//! connections, fed fuzzed segments, time and socket calls, invariants checked
//! after every step).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_toe::harness::engine(data));
