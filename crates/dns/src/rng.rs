//! Unpredictable query IDs from the caller's secret.
//!
//! A stub resolver's defence against off-path answer forgery is what the
//! attacker cannot guess: the 16-bit query ID (RFC 5452 section 9.2) and the
//! source port, which the driver picks. The IDs are SipHash-2-4, keyed with
//! the caller's 128-bit seed, of a counter: a keyed PRF, so seeing any number
//! of IDs says nothing about the next one without the key (a plain PRNG such
//! as xorshift gives its state away in a few outputs). The SipHash is written
//! here for a fixed 8-byte input and checked against the `siphasher` crate.

/// A counter-mode generator keyed by a 128-bit secret.
#[derive(Clone)]
pub(crate) struct Rng {
    k0: u64,
    k1: u64,
    counter: u64,
}

impl core::fmt::Debug for Rng {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // The key is the secret: never printed.
        f.debug_struct("Rng").finish_non_exhaustive()
    }
}

impl Rng {
    pub(crate) fn new(seed: u128) -> Rng {
        Rng {
            k0: seed as u64,
            k1: (seed >> 64) as u64,
            counter: 0,
        }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        siphash24_u64(self.k0, self.k1, self.counter)
    }

    pub(crate) fn next_u16(&mut self) -> u16 {
        (self.next_u64() >> 48) as u16
    }
}

/// SipHash-2-4 of the eight little-endian bytes of `m`.
fn siphash24_u64(k0: u64, k1: u64, m: u64) -> u64 {
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut compress = |w: u64| {
        v[3] ^= w;
        round(&mut v);
        round(&mut v);
        v[0] ^= w;
    };
    compress(m);
    // The final block: no bytes left, the length (8) in the top byte.
    compress(8 << 56);
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::Hasher;
    use siphasher::sip::SipHasher24;

    #[test]
    fn siphash_matches_the_reference() {
        for (k0, k1, m) in [
            (0, 0, 0u64),
            (1, 2, 3),
            (u64::MAX, 7, 0x0123_4567_89ab_cdef),
        ] {
            let mut h = SipHasher24::new_with_keys(k0, k1);
            h.write(&m.to_le_bytes());
            assert_eq!(siphash24_u64(k0, k1, m), h.finish());
        }
    }

    #[test]
    fn ids_depend_on_the_key() {
        let mut a = Rng::new(1);
        let mut b = Rng::new(2);
        let xs: Vec<u16> = (0..16).map(|_| a.next_u16()).collect();
        let ys: Vec<u16> = (0..16).map(|_| b.next_u16()).collect();
        assert_ne!(xs, ys);
        // Spread: 16 draws from 65,536 values almost never repeat.
        let mut sorted = xs.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert!(sorted.len() >= 15, "{xs:?}");
    }
}
