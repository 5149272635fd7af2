//! The hash of the connection table (4-tuple to slot) and the port table: a
//! keyed folded multiply, the construction of foldhash and of wyhash's core.
//!
//! Every word the key writes is mixed by one 64 x 64 -> 128-bit multiply whose
//! halves are folded together; the two key words are drawn from the engine's
//! seeded generator, so where entries land cannot be predicted from outside
//! without the seed (flooding one bucket with chosen 4-tuples needs it). This is
//! not a PRF (SipHash, which the standard library uses, is), but a lookup costs a
//! few multiplies instead of a SipHash run per packet, and the table's cost per
//! packet stays flat at a million connections (see the tests and
//! `benches/tcp.rs`).

use crate::rng::Rng;
use core::hash::{BuildHasher, Hasher};

/// An odd constant with well-mixed bits (the first digits of pi's fraction).
const PI: u64 = 0x243f_6a88_85a3_08d3;

/// The high and low halves of `a * b` (128 bits) exclusive-ored.
#[inline]
fn fold(a: u64, b: u64) -> u64 {
    let p = u128::from(a) * u128::from(b);
    (p as u64) ^ ((p >> 64) as u64)
}

/// Builds [`FlowHasher`]s with the engine's key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowHash {
    seed: u64,
    key: u64,
}

impl FlowHash {
    /// A key drawn from `rng`.
    pub(crate) fn new(rng: &mut Rng) -> FlowHash {
        FlowHash {
            seed: rng.next_u64(),
            // Odd, so that the multiply is a bijection on the low word.
            key: rng.next_u64() | 1,
        }
    }
}

impl BuildHasher for FlowHash {
    type Hasher = FlowHasher;

    #[inline]
    fn build_hasher(&self) -> FlowHasher {
        FlowHasher {
            acc: self.seed,
            key: self.key,
        }
    }
}

/// The hasher: one folded multiply per word written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlowHasher {
    acc: u64,
    key: u64,
}

impl FlowHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.acc = fold(self.acc ^ word, self.key ^ PI).rotate_left(23);
    }
}

impl Hasher for FlowHasher {
    #[inline]
    fn finish(&self) -> u64 {
        fold(self.acc, self.key)
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.mix(u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            if let Some(dst) = w.get_mut(..rest.len()) {
                dst.copy_from_slice(rest);
            }
            // The length in the top byte tells "ab" from "ab\0".
            self.mix(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

    /// Open addressing as hashbrown does it: the low bits choose the home
    /// position in a power-of-two table filled to 7/8 at most, probing in
    /// groups of 16; returns (mean, max) probe-group count over `keys`.
    fn probe_stats(h: &FlowHash, keys: &[(SocketAddr, SocketAddr)]) -> (f64, usize) {
        let buckets = (keys.len() * 8 / 7).next_power_of_two();
        let mask = buckets - 1;
        let mut used = vec![false; buckets];
        let (mut total, mut max) = (0usize, 0usize);
        for k in keys {
            let mut pos = h.hash_one(k) as usize & mask;
            let mut groups = 1;
            // Triangular probing by groups of 16 slots, like hashbrown.
            let mut stride = 0;
            'probe: loop {
                for i in 0..16 {
                    let p = (pos + i) & mask;
                    if !used[p] {
                        used[p] = true;
                        break 'probe;
                    }
                }
                stride += 16;
                pos = (pos + stride) & mask;
                groups += 1;
            }
            total += groups;
            max = max.max(groups);
        }
        (total as f64 / keys.len() as f64, max)
    }

    /// The worst case a server meets: one client address, every port of it,
    /// to a few server ports; and a client with many addresses to one server.
    fn tuples(n: usize, v6: bool) -> Vec<(SocketAddr, SocketAddr)> {
        (0..n)
            .map(|i| {
                let (host, port) = (i / 60_000, 1024 + (i % 60_000) as u16);
                let (local, remote): (IpAddr, IpAddr) = if v6 {
                    (
                        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
                        Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, host as u16, 2).into(),
                    )
                } else {
                    (
                        Ipv4Addr::new(10, 0, 0, 1).into(),
                        Ipv4Addr::from(0x0a01_0000 + host as u32).into(),
                    )
                };
                (
                    SocketAddr::new(local, 80 + (i % 3) as u16),
                    SocketAddr::new(remote, port),
                )
            })
            .collect()
    }

    #[test]
    fn sequential_tuples_spread_evenly() {
        let h = FlowHash::new(&mut Rng::new(1));
        for v6 in [false, true] {
            let (mean, max) = probe_stats(&h, &tuples(200_000, v6));
            assert!(mean < 1.2, "v6 {v6}: mean probe groups {mean}");
            assert!(max <= 8, "v6 {v6}: max probe groups {max}");
        }
    }

    /// A million connections: lookups still take about one probe group.
    #[test]
    fn a_million_tuples_spread_evenly() {
        let h = FlowHash::new(&mut Rng::new(2));
        for v6 in [false, true] {
            let (mean, max) = probe_stats(&h, &tuples(1_000_000, v6));
            assert!(mean < 1.2, "v6 {v6}: mean probe groups {mean}");
            assert!(max <= 10, "v6 {v6}: max probe groups {max}");
        }
    }

    #[test]
    fn the_key_changes_the_hash() {
        let k = tuples(1, false)[0];
        let a = FlowHash::new(&mut Rng::new(1)).hash_one(k);
        let b = FlowHash::new(&mut Rng::new(2)).hash_one(k);
        assert_ne!(a, b);
        assert_eq!(a, FlowHash::new(&mut Rng::new(1)).hash_one(k));
    }
}
