//! Fuzz target: see linerate_dns::harness::dns (the DNS message parser, and
//! the resolver fed the same bytes as the answer to its query, over UDP and,
//! when it asks, TCP; one answer per lookup and every exchange closed).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_dns::harness::dns(data));
