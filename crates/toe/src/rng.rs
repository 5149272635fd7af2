//! Seeded randomness: a xoshiro256** generator and RFC 6528 initial sequence numbers.
//!
//! The engine takes a 64-bit seed and draws everything random from it (ISN key,
//! timestamp offsets, ephemeral ports), so a simulation replays exactly.
//!
//! Initial sequence numbers follow RFC 6528 section 3:
//! `ISN = M + F(localip, localport, remoteip, remoteport, secretkey)`, where `M` is a
//! timer ticking every 4 microseconds and `F` is SipHash-2-4 keyed with 128 secret
//! bits drawn from the seed over the 4-tuple's bytes (a fixed-input SipHash
//! written here, checked against the `siphasher` crate; not `std`'s
//! unspecified hasher): a keyed PRF per 4-tuple, a few hundred instructions
//! cheaper than the streaming hasher on every connection opened.

use crate::time::Instant;
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
        let mut buf = [0u8; 36];
        let n = put_addr(&mut buf, 0, local);
        let n = put_addr(&mut buf, n, remote);
        let f = siphash24(self.k0, self.k1, buf.get(..n).unwrap_or_default()) as u32;
        // M: a 4 microsecond timer (RFC 6528 section 3), wrapping.
        let m = (now.as_nanos() / 4_000) as u32;
        m.wrapping_add(f)
    }
}

/// Writes `a`'s address octets and big-endian port at `at` in `buf`; returns
/// the end (or `at` if it does not fit).
pub(crate) fn put_addr(buf: &mut [u8], at: usize, a: SocketAddr) -> usize {
    let mut put = |at: usize, b: &[u8]| match buf.get_mut(at..at + b.len()) {
        Some(d) => {
            d.copy_from_slice(b);
            at + b.len()
        }
        None => at,
    };
    let end = match a.ip() {
        IpAddr::V4(ip) => put(at, &ip.octets()),
        IpAddr::V6(ip) => put(at, &ip.octets()),
    };
    put(end, &a.port().to_be_bytes())
}

/// SipHash-2-4 (Aumasson and Bernstein) of `data` under the key `(k0, k1)`:
/// the same function as `siphasher`'s `SipHasher24` fed `data` in one
/// `write`, without its streaming buffer (a short fixed input, like a
/// 4-tuple, takes two or five compression rounds).
pub(crate) fn siphash24(k0: u64, k1: u64, data: &[u8]) -> u64 {
    #[inline(always)]
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
    let mut compress = |m: u64| {
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    };
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        compress(u64::from_le_bytes(b));
    }
    let mut last = [0u8; 8];
    let tail = words.remainder();
    if let Some(d) = last.get_mut(..tail.len()) {
        d.copy_from_slice(tail);
    }
    compress(u64::from_le_bytes(last) | ((data.len() as u64 & 0xff) << 56));
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

    /// The hand-rolled SipHash-2-4 against the `siphasher` crate, every
    /// length from 0 to 40 bytes and random keys.
    #[test]
    fn siphash_matches_the_reference() {
        let mut rng = Rng::new(3);
        let data: Vec<u8> = (0..40).map(|_| rng.next_u32() as u8).collect();
        for len in 0..=data.len() {
            let (k0, k1) = (rng.next_u64(), rng.next_u64());
            let mut h = SipHasher24::new_with_keys(k0, k1);
            h.write(&data[..len]);
            assert_eq!(siphash24(k0, k1, &data[..len]), h.finish(), "{len}");
        }
    }

    /// The ISN's keyed part is SipHash-2-4 of the addresses and ports as
    /// written byte by byte (IPv4 and IPv6).
    #[test]
    fn isn_hash_input() {
        let g = IsnGenerator::new(&mut Rng::new(9));
        for (l, r) in [
            ("10.0.0.1:1000", "10.0.0.2:80"),
            ("[2001:db8::1]:40000", "[2001:db8::2]:443"),
        ] {
            let (l, r): (SocketAddr, SocketAddr) = (l.parse().unwrap(), r.parse().unwrap());
            let mut h = SipHasher24::new_with_keys(g.k0, g.k1);
            for a in [l, r] {
                match a.ip() {
                    IpAddr::V4(ip) => h.write(&ip.octets()),
                    IpAddr::V6(ip) => h.write(&ip.octets()),
                }
                h.write(&a.port().to_be_bytes());
            }
            assert_eq!(g.isn(Instant::ZERO, l, r), h.finish() as u32);
        }
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
