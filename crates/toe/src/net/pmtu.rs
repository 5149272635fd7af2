//! The path MTU cache: per destination, the largest IP datagram known to cross
//! the path, learnt from ICMPv4 "fragmentation needed" (RFC 1191) and ICMPv6
//! "packet too big" (RFC 8201).
//!
//! * Only decreases are taken (RFC 1191 section 6.1, RFC 8201 section 4: an
//!   estimate is never raised by a message); an entry expires after the
//!   configured time (10 minutes by default, RFC 1191 section 6.3), after which
//!   the interface MTU applies again.
//! * Values are clamped from below ([`clamp`]): 1280 for IPv6, the IPv6 minimum
//!   link MTU (RFC 8200 section 5; RFC 8201 section 4 says never to go below
//!   it); 552 for IPv4, Linux's `min_pmtu`. RFC 791 allows 68, but a forged
//!   "fragmentation needed" announcing a tiny MTU would cut a connection to
//!   absurdly small segments (RFC 5927 section 7): 552 keeps a 512-byte TCP
//!   payload, as Linux does.
//! * A "fragmentation needed" without an MTU (an RFC 792 router, the field is
//!   zero) takes the next plateau below the quoted datagram's length (RFC 1191
//!   section 7's table).
//! * Bounded: when full, the entry expiring first makes room.

use crate::time::Instant;
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// The smallest path MTU accepted for IPv4 (Linux's `ip_rt_min_pmtu`).
pub(crate) const MIN_PMTU_V4: u16 = 552;
/// The smallest path MTU accepted for IPv6 (RFC 8200 section 5).
pub(crate) const MIN_PMTU_V6: u16 = 1280;

/// RFC 1191 section 7's plateaus, largest first.
const PLATEAUS: [u16; 11] = [
    65535, 32000, 17914, 8166, 4352, 2002, 1492, 1006, 508, 296, 68,
];

/// `mtu` raised to the family's minimum.
pub(crate) fn clamp(ip: IpAddr, mtu: u16) -> u16 {
    match ip {
        IpAddr::V4(_) => mtu.max(MIN_PMTU_V4),
        IpAddr::V6(_) => mtu.max(MIN_PMTU_V6),
    }
}

/// The plateau below `len`, the total length of a datagram that was too big
/// (RFC 1191 section 5, for "fragmentation needed" without an MTU).
pub(crate) fn plateau_below(len: u16) -> u16 {
    PLATEAUS.iter().copied().find(|&p| p < len).unwrap_or(68)
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mtu: u16,
    expires: Instant,
}

/// The cache.
#[derive(Debug, Clone)]
pub(crate) struct PmtuCache {
    map: HashMap<IpAddr, Entry>,
    capacity: usize,
    expiry: Duration,
}

impl PmtuCache {
    /// A cache of at most `capacity` destinations whose entries last `expiry`.
    pub fn new(capacity: usize, expiry: Duration) -> PmtuCache {
        PmtuCache {
            map: HashMap::new(),
            capacity: capacity.max(1),
            expiry,
        }
    }

    /// The path MTU to `ip` if one is known and not expired.
    pub fn get(&self, now: Instant, ip: IpAddr) -> Option<u16> {
        self.map.get(&ip).filter(|e| e.expires > now).map(|e| e.mtu)
    }

    /// Records that datagrams to `ip` larger than `mtu` (already clamped) do not
    /// pass. Returns true if that lowers the estimate below both the current
    /// entry and `link_mtu` (the interface's).
    pub fn update(&mut self, now: Instant, ip: IpAddr, mtu: u16, link_mtu: u16) -> bool {
        let current = self.get(now, ip).unwrap_or(link_mtu);
        if mtu >= current {
            return false;
        }
        if !self.map.contains_key(&ip) && self.map.len() >= self.capacity {
            self.map.retain(|_, e| e.expires > now);
            if self.map.len() >= self.capacity
                && let Some(victim) = self
                    .map
                    .iter()
                    // Ties broken by address, not by the map's randomly seeded
                    // order: the engine's behaviour depends only on its seed.
                    .min_by_key(|&(ip, e)| (e.expires, *ip))
                    .map(|(k, _)| *k)
            {
                self.map.remove(&victim);
            }
        }
        self.map.insert(
            ip,
            Entry {
                mtu,
                expires: now + self.expiry,
            },
        );
        true
    }

    /// Destinations held (expired ones included until they are pushed out).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn v4(i: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
    }

    #[test]
    fn only_decreases_and_expires() {
        let mut c = PmtuCache::new(4, Duration::from_secs(600));
        let t = Instant::from_millis(1);
        assert!(!c.update(t, v4(1), 1500, 1500), "not below the link MTU");
        assert!(c.update(t, v4(1), 1400, 1500));
        assert_eq!(c.get(t, v4(1)), Some(1400));
        assert!(!c.update(t, v4(1), 1450, 1500), "never raised");
        assert!(c.update(t, v4(1), 1300, 1500));
        assert_eq!(c.get(t + Duration::from_secs(599), v4(1)), Some(1300));
        assert_eq!(c.get(t + Duration::from_secs(600), v4(1)), None);
        // After expiry the link MTU is the reference again.
        assert!(c.update(t + Duration::from_secs(700), v4(1), 1450, 1500));
    }

    #[test]
    fn bounded() {
        let mut c = PmtuCache::new(3, Duration::from_secs(10));
        for i in 0..10u8 {
            let t = Instant::from_millis(u64::from(i));
            assert!(c.update(t, v4(i), 1000, 1500));
            assert!(c.len() <= 3);
            assert_eq!(c.get(t, v4(i)), Some(1000));
        }
        // The oldest went first.
        let t = Instant::from_millis(20);
        assert_eq!(c.get(t, v4(0)), None);
        assert_eq!(c.get(t, v4(9)), Some(1000));
    }

    /// Entries that expire together are evicted lowest address first, whatever
    /// order the map (seeded at random per process) keeps them in.
    #[test]
    fn eviction_ties_are_deterministic() {
        let t = Instant::from_millis(0);
        for order in [[3u8, 1, 2], [2, 3, 1], [1, 2, 3]] {
            let mut c = PmtuCache::new(3, Duration::from_secs(10));
            for i in order {
                assert!(c.update(t, v4(i), 1000, 1500));
            }
            assert!(c.update(t, v4(9), 1000, 1500));
            assert_eq!(c.get(t, v4(1)), None, "inserted in order {order:?}");
            for i in [2, 3, 9] {
                assert_eq!(c.get(t, v4(i)), Some(1000));
            }
        }
    }

    #[test]
    fn clamps_and_plateaus() {
        let six = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(clamp(six, 600), 1280);
        assert_eq!(clamp(six, 1400), 1400);
        assert_eq!(clamp(v4(1), 68), 552);
        assert_eq!(clamp(v4(1), 1000), 1000);
        assert_eq!(plateau_below(1500), 1492);
        assert_eq!(plateau_below(1492), 1006);
        assert_eq!(plateau_below(60), 68);
    }
}
