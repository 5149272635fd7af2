//! The neighbour cache: IP address to Ethernet address, for ARP (RFC 826, with
//! RFC 1122 section 2.3.2.1's timeouts and bounded retries) and NDP (RFC 4861
//! section 7.2, reduced to INCOMPLETE and REACHABLE).
//!
//! While an address is being resolved, frames for it wait in a bounded queue
//! (RFC 1122 section 2.3.2.2 asks for at least one); a resolution that gets no
//! answer after the configured number of probes drops them and is forgotten,
//! so the next frame starts a new one.

use crate::engine::flow_hash::FlowHash;
use crate::time::Instant;
use linerate_offload::OffloadMeta;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

/// A frame waiting for its destination's Ethernet address.
pub(crate) type Pending = (Vec<u8>, OffloadMeta);

#[derive(Debug)]
enum Entry {
    Reachable {
        mac: [u8; 6],
        expires: Instant,
    },
    Incomplete {
        next_probe: Instant,
        probes: u32,
        queue: VecDeque<Pending>,
    },
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Resolved.
    Hit([u8; 6]),
    /// Not resolved: queue the frame and maybe probe.
    Miss,
}

/// What to do after a frame was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Queued {
    /// A new resolution started: send a probe now.
    ProbeNow,
    /// Waiting on a resolution already under way.
    Waiting,
    /// The queue was full; the frame was dropped.
    Dropped,
}

/// Timing and bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub ttl: Duration,
    pub retry: Duration,
    pub probes: u32,
    pub queue: usize,
}

/// The cache.
#[derive(Debug)]
pub(crate) struct NeighborCache {
    map: HashMap<IpAddr, Entry, FlowHash>,
    limits: Limits,
    /// The entry the last [`NeighborCache::lookup_mut`] found reachable, copied:
    /// address, MAC, expiry. Frames go to one next hop after another, and
    /// comparing an address is cheaper than hashing it. Every change to the map
    /// clears it, so while set it is a copy of the map's entry for its address.
    last: Option<(IpAddr, [u8; 6], Instant)>,
}

impl NeighborCache {
    #[cfg(test)]
    pub fn new(limits: Limits) -> NeighborCache {
        NeighborCache::with_hash(limits, FlowHash::new(&mut crate::rng::Rng::new(0)))
    }

    /// An empty cache whose table hashes with `hash` (the engine's key).
    pub fn with_hash(limits: Limits, hash: FlowHash) -> NeighborCache {
        NeighborCache {
            map: HashMap::with_hasher(hash),
            limits,
            last: None,
        }
    }

    /// The Ethernet address of `ip`, if known and not expired.
    pub fn lookup(&self, now: Instant, ip: IpAddr) -> Lookup {
        if let Some(mac) = self.last_hit(now, ip) {
            return Lookup::Hit(mac);
        }
        match self.map.get(&ip) {
            Some(Entry::Reachable { mac, expires }) if *expires > now => Lookup::Hit(*mac),
            _ => Lookup::Miss,
        }
    }

    /// [`NeighborCache::lookup`], keeping a hit found in the map as the last
    /// hit (the transmit path's look-up, once per frame).
    #[inline]
    pub fn lookup_mut(&mut self, now: Instant, ip: IpAddr) -> Lookup {
        if let Some(mac) = self.last_hit(now, ip) {
            return Lookup::Hit(mac);
        }
        self.lookup_map(now, ip)
    }

    #[inline(never)]
    fn lookup_map(&mut self, now: Instant, ip: IpAddr) -> Lookup {
        match self.map.get(&ip) {
            Some(Entry::Reachable { mac, expires }) if *expires > now => {
                self.last = Some((ip, *mac, *expires));
                Lookup::Hit(*mac)
            }
            _ => Lookup::Miss,
        }
    }

    /// The last hit's MAC, if it is for `ip` and not expired.
    #[inline(always)]
    fn last_hit(&self, now: Instant, ip: IpAddr) -> Option<[u8; 6]> {
        match self.last {
            Some((a, mac, expires)) if a == ip && expires > now => Some(mac),
            _ => None,
        }
    }

    /// Records `ip` at `mac`. If `create` is false, only an existing entry is
    /// updated (RFC 826's merge rule; RFC 4861 section 7.2.5). Returns the frames
    /// that were waiting, with their destination address to be filled in.
    pub fn learn(
        &mut self,
        now: Instant,
        ip: IpAddr,
        mac: [u8; 6],
        create: bool,
    ) -> VecDeque<Pending> {
        self.last = None;
        let fresh = Entry::Reachable {
            mac,
            expires: now + self.limits.ttl,
        };
        match self.map.get_mut(&ip) {
            Some(e) => match std::mem::replace(e, fresh) {
                Entry::Incomplete { queue, .. } => queue,
                Entry::Reachable { .. } => VecDeque::new(),
            },
            None => {
                if create {
                    self.map.insert(ip, fresh);
                }
                VecDeque::new()
            }
        }
    }

    /// Queues a frame for `ip` (which missed).
    pub fn enqueue(&mut self, now: Instant, ip: IpAddr, frame: Pending) -> Queued {
        let limits = self.limits;
        self.last = None;
        let e = self.map.entry(ip).or_insert(Entry::Incomplete {
            next_probe: now,
            probes: 0,
            queue: VecDeque::new(),
        });
        if let Entry::Reachable { .. } = e {
            // Expired: resolve again.
            *e = Entry::Incomplete {
                next_probe: now,
                probes: 0,
                queue: VecDeque::new(),
            };
        }
        match e {
            Entry::Incomplete {
                next_probe,
                probes,
                queue,
            } => {
                if queue.len() >= limits.queue {
                    return Queued::Dropped;
                }
                queue.push_back(frame);
                if *probes == 0 && *next_probe <= now {
                    *probes = 1;
                    *next_probe = now + limits.retry;
                    Queued::ProbeNow
                } else {
                    Queued::Waiting
                }
            }
            Entry::Reachable { .. } => Queued::Waiting,
        }
    }

    /// Runs the retry timers: returns the addresses to probe again, and the number
    /// of frames dropped by resolutions that gave up.
    pub fn poll(&mut self, now: Instant, probe: &mut Vec<IpAddr>) -> (usize, usize) {
        let limits = self.limits;
        let mut dropped = 0;
        let mut failed = 0;
        self.last = None;
        self.map.retain(|ip, e| match e {
            Entry::Incomplete {
                next_probe,
                probes,
                queue,
            } if *next_probe <= now => {
                if *probes >= limits.probes {
                    dropped += queue.len();
                    failed += 1;
                    false
                } else {
                    *probes += 1;
                    *next_probe = now + limits.retry;
                    probe.push(*ip);
                    true
                }
            }
            _ => true,
        });
        (failed, dropped)
    }

    /// When [`NeighborCache::poll`] next has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.map
            .values()
            .filter_map(|e| match e {
                Entry::Incomplete { next_probe, .. } => Some(*next_probe),
                Entry::Reachable { .. } => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> NeighborCache {
        NeighborCache::new(Limits {
            ttl: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            probes: 3,
            queue: 2,
        })
    }

    fn ip() -> IpAddr {
        "10.0.0.2".parse().unwrap()
    }

    #[test]
    fn queue_resolve_flush() {
        let mut c = cache();
        let t = Instant::ZERO;
        assert_eq!(c.lookup(t, ip()), Lookup::Miss);
        assert_eq!(
            c.enqueue(t, ip(), (vec![1], OffloadMeta::plain())),
            Queued::ProbeNow
        );
        assert_eq!(
            c.enqueue(t, ip(), (vec![2], OffloadMeta::plain())),
            Queued::Waiting
        );
        assert_eq!(
            c.enqueue(t, ip(), (vec![3], OffloadMeta::plain())),
            Queued::Dropped
        );
        let q = c.learn(t, ip(), [2; 6], false);
        assert_eq!(q.len(), 2);
        assert_eq!(c.lookup(t, ip()), Lookup::Hit([2; 6]));
        // Expiry.
        assert_eq!(c.lookup(t + Duration::from_secs(61), ip()), Lookup::Miss);
    }

    #[test]
    fn gives_up_after_probes() {
        let mut c = cache();
        let mut t = Instant::ZERO;
        c.enqueue(t, ip(), (vec![1], OffloadMeta::plain()));
        let mut probes = Vec::new();
        let mut total = (0, 0);
        for _ in 0..5 {
            t += Duration::from_secs(1);
            let (f, d) = c.poll(t, &mut probes);
            total = (total.0 + f, total.1 + d);
        }
        assert_eq!(probes.len(), 2);
        assert_eq!(total, (1, 1));
        assert_eq!(c.next_deadline(), None);
        // Learning an unknown address without `create` adds nothing.
        c.learn(t, ip(), [1; 6], false);
        assert_eq!(c.lookup(t, ip()), Lookup::Miss);
    }

    /// What the cache should answer, kept independently: an entry is
    /// reachable at a MAC until an expiry, or being resolved (with the probe
    /// count and time that decide when `poll` gives up on it).
    #[derive(Clone, Copy)]
    enum Model {
        Reachable { mac: [u8; 6], expires: Instant },
        Incomplete { next_probe: Instant, probes: u32 },
    }

    /// Random learns (new MACs, with and without `create`), enqueues, polls,
    /// both look-ups and time steps around the TTL over a few addresses of
    /// both families: every look-up answers what the model says, so the
    /// last-hit copy is never stale (changed MAC), expired or resurrected
    /// (entry turned incomplete, or dropped by `poll`). Also checks that the
    /// copy answered hundreds of the hits.
    #[test]
    fn last_hit_matches_model() {
        let limits = Limits {
            ttl: Duration::from_millis(50),
            retry: Duration::from_millis(7),
            probes: 2,
            queue: 2,
        };
        let ips: [IpAddr; 4] = [
            "10.0.0.2".parse().unwrap(),
            "10.0.0.3".parse().unwrap(),
            "fe80::2".parse().unwrap(),
            "::a00:2".parse().unwrap(),
        ];
        let mut rng = crate::rng::Rng::new(7);
        let (mut fast, mut hits) = (0, 0);
        for _run in 0..20 {
            let mut c = NeighborCache::new(limits);
            let mut model: HashMap<IpAddr, Model> = HashMap::new();
            let mut now = Instant::ZERO;
            let mut next_mac = 0u8;
            for _ in 0..2_000 {
                let ip = ips[rng.below(ips.len() as u64) as usize];
                match rng.below(10) {
                    0 => now += Duration::from_millis(rng.below(30)),
                    1 => now += Duration::from_nanos(rng.below(3)),
                    2 => {
                        next_mac = next_mac.wrapping_add(1);
                        let create = rng.chance(0.7);
                        c.learn(now, ip, [next_mac; 6], create);
                        let fresh = Model::Reachable {
                            mac: [next_mac; 6],
                            expires: now + limits.ttl,
                        };
                        if let Some(e) = model.get_mut(&ip) {
                            *e = fresh;
                        } else if create {
                            model.insert(ip, fresh);
                        }
                    }
                    3 => {
                        let first = !matches!(model.get(&ip), Some(Model::Incomplete { .. }));
                        c.enqueue(now, ip, (vec![0], OffloadMeta::plain()));
                        if first {
                            model.insert(
                                ip,
                                Model::Incomplete {
                                    next_probe: now + limits.retry,
                                    probes: 1,
                                },
                            );
                        }
                    }
                    4 => {
                        c.poll(now, &mut Vec::new());
                        model.retain(|_, e| match e {
                            Model::Incomplete { next_probe, probes } if *next_probe <= now => {
                                *probes += 1;
                                *next_probe = now + limits.retry;
                                *probes <= limits.probes
                            }
                            _ => true,
                        });
                    }
                    k => {
                        let want = match model.get(&ip) {
                            Some(Model::Reachable { mac, expires }) if *expires > now => {
                                Lookup::Hit(*mac)
                            }
                            _ => Lookup::Miss,
                        };
                        let from_last = c.last_hit(now, ip).is_some();
                        let got = if k < 8 {
                            c.lookup_mut(now, ip)
                        } else {
                            c.lookup(now, ip)
                        };
                        assert_eq!(got, want, "{ip} at {now:?}");
                        assert_eq!(c.lookup(now, ip), want, "{ip} at {now:?}");
                        if want != Lookup::Miss {
                            hits += 1;
                            fast += usize::from(from_last);
                        }
                    }
                }
            }
        }
        assert!(hits > 1_000 && fast > 500, "{fast} of {hits}");
    }

    /// The cases one by one: a changed MAC, expiry, an entry turned
    /// incomplete, and another address in between.
    #[test]
    fn last_hit_invalidated() {
        let mut c = cache();
        let t = Instant::ZERO;
        let other: IpAddr = "10.0.0.9".parse().unwrap();
        c.learn(t, ip(), [1; 6], true);
        c.learn(t, other, [9; 6], true);
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([1; 6]));
        assert_eq!(c.lookup_mut(t, other), Lookup::Hit([9; 6]));
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([1; 6]));
        // The peer moved.
        c.learn(t, ip(), [2; 6], false);
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([2; 6]));
        assert_eq!(c.lookup(t, ip()), Lookup::Hit([2; 6]));
        // Expired: a miss, from either look-up, at the expiry itself.
        let end = t + Duration::from_secs(60);
        assert_eq!(c.lookup_mut(end, ip()), Lookup::Miss);
        assert_eq!(c.lookup(end, ip()), Lookup::Miss);
        // Turned incomplete before expiry (a frame queued for it).
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([2; 6]));
        c.enqueue(t, ip(), (vec![1], OffloadMeta::plain()));
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Miss);
        assert_eq!(c.lookup(t, ip()), Lookup::Miss);
        assert_eq!(c.lookup_mut(t, other), Lookup::Hit([9; 6]));
    }
}
