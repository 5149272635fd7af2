//! Fuzz target: see linerate_dhcp::harness::dhcp (the DHCP message parser,
//! and a client driven through steps cut from the same bytes: replies made
//! to match its transaction, ARP conflicts, time, release; its deadlines
//! never in the past and its events consistent).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| linerate_dhcp::harness::dhcp(data));
