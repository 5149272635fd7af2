//! Seeded randomness: a xoshiro256** generator and RFC 6528 initial sequence numbers.
//!
//! The engine takes a 64-bit seed and draws everything random from it (ISN key,
//! timestamp offsets, ephemeral ports), so a simulation replays exactly.
//!
//! Initial sequence numbers follow RFC 6528 section 3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where `M` is a
//! timer ticking every 4 microseconds and `F` is SipHash-2-4 keyed with 128 secret
//! bits drawn from the seed (the keyed, stable `siphasher` implementation, not
//! `std`'s unspecified hasher).

use crate::time::Instant;
use core::hash::Hasher;
use siphasher::sip::SipHasher24;
use std::net::{IpAddr, SocketAddr};

/// xoshiro256** (Blackman and Vigna), seeded through splitmix64.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let s = [
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
            splitmix64(&mut x),
        ];
        Rng { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let [s0, s1, s2, s3] = &mut self.s;
        let result = s1.wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = *s1 << 17;
        *s2 ^= *s0;
        *s3 ^= *s1;
        *s1 ^= *s2;
        *s0 ^= *s3;
        *s2 ^= t;
        *s3 = s3.rotate_left(45);
        result
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// A uniform value in `0..n` (`0` when `n` is zero), by Lemire's multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p` (clamped to 0..=1).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        // 53 random bits as a fraction in [0, 1).
        let f = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        f < p
    }
}

/// RFC 6528 initial sequence number generator.
#[derive(Debug, Clone)]
pub(crate) struct IsnGenerator {
    k0: u64,
    k1: u64,
}

impl IsnGenerator {
    /// A generator keyed with 128 bits from `rng`.
    pub(crate) fn new(rng: &mut Rng) -> IsnGenerator {
        IsnGenerator {
            k0: rng.next_u64(),
            k1: rng.next_u64(),
        }
    }

    /// A second 128-bit key derived from this one (for SYN cookies), so that the
    /// engine's draws from its generator stay as they were.
    pub(crate) fn derived_key(&self) -> (u64, u64) {
        let mut x = self.k0 ^ 0x5359_4e43_4f4f_4b49; // "SYNCOOKI"
        let mut y = self.k1 ^ 0x4553_5f52_4643_3439; // "ES_RFC49"
        (splitmix64(&mut x), splitmix64(&mut y))
    }

    /// `M + F(local, remote, key)` at time `now`.
    pub(crate) fn isn(&self, now: Instant, local: SocketAddr, remote: SocketAddr) -> u32 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        for a in [local, remote] {
            match a.ip() {
                IpAddr::V4(ip) => h.write(&ip.octets()),
                IpAddr::V6(ip) => h.write(&ip.octets()),
            }
            h.write(&a.port().to_be_bytes());
        }
        let f = h.finish() as u32;
        // M: a 4 microsecond timer (RFC 6528 section 3), wrapping.
        let m = (now.as_nanos() / 4_000) as u32;
        m.wrapping_add(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(8).next_u64(), xs[0]);
        for _ in 0..1000 {
            assert!(a.below(10) < 10);
        }
        assert_eq!(a.below(0), 0);
        assert!(!a.chance(0.0));
        assert!(a.chance(1.0));
    }

    #[test]
    fn isn_depends_on_tuple_key_and_time() {
        let mut rng = Rng::new(1);
        let g = IsnGenerator::new(&mut rng);
        let l: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let r: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let r2: SocketAddr = "10.0.0.2:81".parse().unwrap();
        let t = Instant::from_millis(1);
        assert_eq!(g.isn(t, l, r), g.isn(t, l, r));
        assert_ne!(g.isn(t, l, r), g.isn(t, l, r2));
        // M advances by 250 per millisecond.
        let later = Instant::from_millis(2);
        assert_eq!(g.isn(later, l, r).wrapping_sub(g.isn(t, l, r)), 250);
        let g2 = IsnGenerator::new(&mut Rng::new(2));
        assert_ne!(g.isn(t, l, r), g2.isn(t, l, r));
    }
}
