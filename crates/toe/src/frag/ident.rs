//! IPv6 Fragment Identifications (RFC 7739): unpredictable from off the path,
//! unique per (source, destination) for as long as a datagram may live.
//!
//! RFC 7739 section 5.3's hash-based scheme: `Identification = F(src, dst,
//! key1) + counter[G(src, dst, key2)]`, the counter incremented at each use.
//! `F` and `G` are the engine's keyed hash under keys drawn from its seeded
//! generator: the identifications a peer sees do not tell it those another
//! destination sees (section 5.1's single counter leaks the host's traffic
//! and lets an attacker predict them), and successive datagrams to one
//! destination get successive values, so they do not collide as random
//! values could (section 5.2).

use crate::engine::flow_hash::FlowHash;
use crate::rng::Rng;
use core::hash::BuildHasher;

/// Counters in the table (`G` picks one).
const COUNTERS: usize = 64;

/// The generator.
#[derive(Debug, Clone)]
pub(crate) struct Ipv6Ident {
    f: FlowHash,
    g: FlowHash,
    counters: [u32; COUNTERS],
}

impl Ipv6Ident {
    /// A generator whose keys and counters' starts come from `rng`.
    pub(crate) fn new(rng: &mut Rng) -> Ipv6Ident {
        let f = FlowHash::new(rng);
        let g = FlowHash::new(rng);
        let mut counters = [0u32; COUNTERS];
        for c in &mut counters {
            *c = rng.next_u32();
        }
        Ipv6Ident { f, g, counters }
    }

    /// The identification of the next fragmented datagram from `src` to `dst`.
    pub(crate) fn next(&mut self, src: &[u8; 16], dst: &[u8; 16]) -> u32 {
        let f = self.f.hash_one((src, dst)) as u32;
        let g = (self.g.hash_one((src, dst)) as usize) % COUNTERS;
        let Some(c) = self.counters.get_mut(g) else {
            return f;
        };
        *c = c.wrapping_add(1);
        f.wrapping_add(*c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successive_and_unrelated_across_destinations() {
        let mut g = Ipv6Ident::new(&mut Rng::new(7));
        let (a, b, c) = ([1; 16], [2; 16], [3; 16]);
        let x = g.next(&a, &b);
        let y = g.next(&a, &b);
        assert_eq!(y, x.wrapping_add(1), "one destination: successive values");
        let z = g.next(&a, &c);
        assert_ne!(z, y.wrapping_add(1));
        // Another seed: other values for the same pair.
        let mut h = Ipv6Ident::new(&mut Rng::new(8));
        assert_ne!(h.next(&a, &b), x);
    }
}
