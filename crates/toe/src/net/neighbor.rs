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
        }
    }

    /// The Ethernet address of `ip`, if known and not expired.
    pub fn lookup(&self, now: Instant, ip: IpAddr) -> Lookup {
        match self.map.get(&ip) {
            Some(Entry::Reachable { mac, expires }) if *expires > now => Lookup::Hit(*mac),
            _ => Lookup::Miss,
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
}
