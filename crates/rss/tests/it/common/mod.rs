//! Helpers shared by the integration tests.
#![allow(dead_code)]

use linerate_rss::HashInput;

/// A small deterministic generator (splitmix64), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut b = [0u8; N];
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
        b
    }

    pub fn port(&mut self) -> u16 {
        self.next() as u16
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The six hash types, by name.
pub const KINDS: [&str; 6] = [
    "ipv4", "tcp_ipv4", "udp_ipv4", "ipv6", "tcp_ipv6", "udp_ipv6",
];

/// A random input of the named type.
pub fn input(kind: &str, r: &mut Rng) -> HashInput {
    let (p, q) = (r.port(), r.port());
    match kind {
        "ipv4" => HashInput::ipv4(r.bytes(), r.bytes()),
        "tcp_ipv4" => HashInput::tcp_ipv4(r.bytes(), r.bytes(), p, q),
        "udp_ipv4" => HashInput::udp_ipv4(r.bytes(), r.bytes(), p, q),
        "ipv6" => HashInput::ipv6(r.bytes(), r.bytes()),
        "tcp_ipv6" => HashInput::tcp_ipv6(r.bytes(), r.bytes(), p, q),
        "udp_ipv6" => HashInput::udp_ipv6(r.bytes(), r.bytes(), p, q),
        other => panic!("unknown kind {other}"),
    }
}
