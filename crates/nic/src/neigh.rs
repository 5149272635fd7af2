//! The neighbour cache: IP address to Ethernet address, for ARP (RFC 826, with
//! RFC 1122 section 2.3.2.1's timeouts and bounded retries) and NDP (RFC 4861
//! section 7.2, reduced to INCOMPLETE and REACHABLE).
//!
//! While an address is being resolved, frames for it wait in a bounded queue
//! (RFC 1122 section 2.3.2.2 asks for at least one); a resolution that gets no
//! answer after the configured number of probes drops them and is forgotten,
//! so the next frame starts a new one.
//!
//! The table holds at most [`Limits::max`] addresses (Linux's `gc_thresh3`,
//! 1,024 by default there too): spoofed ARP requests or neighbour
//! solicitations, or a SYN flood from many on-link sources (each SYN-ACK
//! starts a resolution), cannot grow it without bound. When it is full,
//! expired entries are swept out (at most once per retry interval, so a flood
//! does not buy a sweep per packet). If none has expired, an address this host
//! needs to send to takes the place of one only learned from a peer's request
//! and never sent to (so spoofed requests that keep the table full cannot lock
//! out the gateway); otherwise the new address is refused ([`TableFull`]) and
//! the caller counts it.
//!
//! Sans-IO and shared: the engine (linerate-toe) keeps its frames waiting here
//! with its own clock and keyed hash, a tunnel endpoint (linerate-tunnel) its
//! encapsulated frames with the underlay's. Time is any `T` that moves forward
//! by `Duration`s (`std::time::Instant`, the engine's `Instant`, a `Duration`
//! since an epoch); the caller builds and parses the ARP and NDP messages.
//!
//! ```
//! use linerate_nic::neigh::{Limits, Lookup, NeighborCache, Queued};
//! use std::time::Duration;
//!
//! let mut c: NeighborCache<Duration, &str> = NeighborCache::new(Limits::default());
//! let gw = "10.0.0.1".parse().unwrap();
//! let t = Duration::ZERO;
//! assert_eq!(c.lookup(t, gw), Lookup::Miss);
//! assert_eq!(c.enqueue(t, gw, "frame"), Queued::ProbeNow); // send an ARP request
//! let waiting = c.learn(t, gw, [2, 0, 0, 0, 0, 1], false).unwrap();
//! assert_eq!(waiting, ["frame"]); // their destination MAC filled in, they go
//! assert_eq!(c.lookup(t, gw), Lookup::Hit([2, 0, 0, 0, 0, 1]));
//! ```

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::ops::Add;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Entry<T, P> {
    Reachable {
        mac: [u8; 6],
        expires: T,
        /// This host wanted the address: it resolved it, or sent to it. An entry
        /// only learned from the peer's own ARP or NDP is not wanted until a
        /// frame goes to it, and is what a full table gives up first.
        wanted: bool,
    },
    Incomplete {
        next_probe: T,
        probes: u32,
        queue: VecDeque<P>,
    },
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Resolved.
    Hit([u8; 6]),
    /// Not resolved: queue the frame and maybe probe.
    Miss,
}

/// What to do after a frame was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queued {
    /// A new resolution started: send a probe now.
    ProbeNow,
    /// Waiting on a resolution already under way.
    Waiting,
    /// The queue was full; the frame was dropped.
    Dropped,
    /// The table was full: no resolution started, the frame was dropped.
    TableFull,
}

/// A new address refused because the table holds [`Limits::max`] others, none
/// of them expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

/// Timing and bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a resolved address stays usable without being learned again.
    pub ttl: Duration,
    /// Time between probes of an address being resolved.
    pub retry: Duration,
    /// Probes before a resolution gives up (and drops its frames).
    pub probes: u32,
    /// Frames waiting per address being resolved.
    pub queue: usize,
    /// Addresses the table holds at most.
    pub max: usize,
}

impl Default for Limits {
    /// The engine's defaults: 60 s, a probe a second, three probes, 64 frames
    /// waiting, 1,024 addresses.
    fn default() -> Limits {
        Limits {
            ttl: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            probes: 3,
            queue: 64,
            max: 1024,
        }
    }
}

/// The cache: time `T`, frames waiting `P`, table hasher `S`.
#[derive(Debug, Clone)]
pub struct NeighborCache<T, P, S = RandomState> {
    map: HashMap<IpAddr, Entry<T, P>, S>,
    limits: Limits,
    /// The entry the last [`NeighborCache::lookup_mut`] found reachable, copied:
    /// address, MAC, expiry. Frames go to one next hop after another, and
    /// comparing an address is cheaper than hashing it. Every change to the map
    /// clears it, so while set it is a copy of the map's entry for its address.
    last: Option<(Key, [u8; 6], T)>,
    /// Entries being resolved: [`NeighborCache::next_deadline`] looks at the
    /// table only when there are some.
    incomplete: usize,
    /// When a full table may next be swept of expired entries.
    next_sweep: Option<T>,
}

impl<T, P, S: BuildHasher + Default> NeighborCache<T, P, S>
where
    T: Copy + Ord + Add<Duration, Output = T>,
{
    /// An empty cache with a default hasher.
    pub fn new(limits: Limits) -> Self {
        NeighborCache::with_hash(limits, S::default())
    }
}

impl<T, P, S: BuildHasher> NeighborCache<T, P, S>
where
    T: Copy + Ord + Add<Duration, Output = T>,
{
    /// An empty cache whose table hashes with `hash` (the engine's key, so a
    /// peer cannot choose addresses that collide).
    pub fn with_hash(limits: Limits, hash: S) -> Self {
        NeighborCache {
            map: HashMap::with_hasher(hash),
            limits,
            last: None,
            incomplete: 0,
            next_sweep: None,
        }
    }

    /// The bounds it keeps.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Addresses in the table.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if the table holds no address.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// True if a new address may be added at `now`: the table has room, or a
    /// sweep (at most one per retry interval) of expired entries made some.
    fn room(&mut self, now: T) -> bool {
        if self.map.len() < self.limits.max {
            return true;
        }
        if self.next_sweep.is_some_and(|t| now < t) {
            return false;
        }
        self.next_sweep = Some(now + self.limits.retry);
        self.last = None;
        self.map.retain(|_, e| match e {
            Entry::Reachable { expires, .. } => *expires > now,
            Entry::Incomplete { .. } => true,
        });
        self.map.len() < self.limits.max
    }

    /// Makes room in a full table for an address this host needs, by giving up
    /// one entry it never wanted (learned from a peer, never sent to); true if
    /// there was one. A scan, but only with the table full.
    fn evict_unwanted(&mut self) -> bool {
        let victim = self.map.iter().find_map(|(ip, e)| match e {
            Entry::Reachable { wanted: false, .. } => Some(*ip),
            _ => None,
        });
        match victim {
            Some(ip) => {
                self.map.remove(&ip);
                self.last = None;
                true
            }
            None => false,
        }
    }

    /// The Ethernet address of `ip`, if known and not expired.
    pub fn lookup(&self, now: T, ip: IpAddr) -> Lookup {
        if let Some(mac) = self.last_hit(now, ip) {
            return Lookup::Hit(mac);
        }
        match self.map.get(&ip) {
            Some(Entry::Reachable { mac, expires, .. }) if *expires > now => Lookup::Hit(*mac),
            _ => Lookup::Miss,
        }
    }

    /// [`NeighborCache::lookup`], keeping a hit found in the map as the last
    /// hit (the transmit path's look-up, once per frame).
    #[inline]
    pub fn lookup_mut(&mut self, now: T, ip: IpAddr) -> Lookup {
        let key = Key::of(ip);
        match self.last {
            Some((a, mac, expires)) if a == key && expires > now => Lookup::Hit(mac),
            // The address goes on as its key, in registers: passed as an
            // `IpAddr` it would be spilled to the stack before the check above.
            _ => self.lookup_map(now, key.v6, key.bits),
        }
    }

    #[inline(never)]
    fn lookup_map(&mut self, now: T, v6: bool, bits: u128) -> Lookup {
        let ip = Key { v6, bits }.ip();
        match self.map.get_mut(&ip) {
            Some(Entry::Reachable {
                mac,
                expires,
                wanted,
            }) if *expires > now => {
                *wanted = true;
                self.last = Some((Key::of(ip), *mac, *expires));
                Lookup::Hit(*mac)
            }
            _ => Lookup::Miss,
        }
    }

    /// The last hit's MAC, if it is for `ip` and not expired.
    #[inline(always)]
    fn last_hit(&self, now: T, ip: IpAddr) -> Option<[u8; 6]> {
        match self.last {
            Some((a, mac, expires)) if a == Key::of(ip) && expires > now => Some(mac),
            _ => None,
        }
    }

    /// Records `ip` at `mac`. If `create` is false, only an existing entry is
    /// updated (RFC 826's merge rule; RFC 4861 section 7.2.5). Returns the frames
    /// that were waiting, with their destination address to be filled in, or
    /// [`TableFull`] if a new entry was due but the table is full.
    pub fn learn(
        &mut self,
        now: T,
        ip: IpAddr,
        mac: [u8; 6],
        create: bool,
    ) -> Result<VecDeque<P>, TableFull> {
        self.last = None;
        let expires = now + self.limits.ttl;
        if let Some(e) = self.map.get_mut(&ip) {
            let wanted = match e {
                Entry::Incomplete { .. } => true,
                Entry::Reachable { wanted, .. } => *wanted,
            };
            let fresh = Entry::Reachable {
                mac,
                expires,
                wanted,
            };
            return Ok(match std::mem::replace(e, fresh) {
                Entry::Incomplete { queue, .. } => {
                    self.incomplete -= 1;
                    queue
                }
                Entry::Reachable { .. } => VecDeque::new(),
            });
        }
        if create {
            if !self.room(now) {
                return Err(TableFull);
            }
            let fresh = Entry::Reachable {
                mac,
                expires,
                wanted: false,
            };
            self.map.insert(ip, fresh);
        }
        Ok(VecDeque::new())
    }

    /// Queues a frame for `ip` (which missed).
    pub fn enqueue(&mut self, now: T, ip: IpAddr, frame: P) -> Queued {
        let limits = self.limits;
        self.last = None;
        let fresh = || Entry::Incomplete {
            next_probe: now,
            probes: 0,
            queue: VecDeque::new(),
        };
        if !self.map.contains_key(&ip) {
            if !self.room(now) && !self.evict_unwanted() {
                return Queued::TableFull;
            }
            self.map.insert(ip, fresh());
            self.incomplete += 1;
        }
        let Some(e) = self.map.get_mut(&ip) else {
            return Queued::TableFull;
        };
        if let Entry::Reachable { .. } = e {
            // Expired: resolve again.
            *e = fresh();
            self.incomplete += 1;
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
    pub fn poll(&mut self, now: T, probe: &mut Vec<IpAddr>) -> (usize, usize) {
        let limits = self.limits;
        let mut dropped = 0;
        let mut failed = 0;
        self.last = None;
        let incomplete = &mut self.incomplete;
        self.map.retain(|ip, e| match e {
            Entry::Incomplete {
                next_probe,
                probes,
                queue,
            } if *next_probe <= now => {
                if *probes >= limits.probes {
                    dropped += queue.len();
                    failed += 1;
                    *incomplete -= 1;
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

    /// True if some address is being resolved.
    pub fn resolving(&self) -> bool {
        self.incomplete > 0
    }

    /// Addresses that need resolving from elsewhere (an address shared with the
    /// kernel's stack, whose neighbours the kernel resolves): those being
    /// resolved, and those this host wants (resolved, or sent to) that expire
    /// within `within` of `now` or have expired. Appended to `out`; a scan of
    /// the table, for a caller that looks now and then, not per frame.
    pub fn due(&self, now: T, within: Duration, out: &mut Vec<IpAddr>) {
        let soon = now + within;
        for (ip, e) in &self.map {
            let due = match e {
                Entry::Incomplete { .. } => true,
                Entry::Reachable {
                    expires, wanted, ..
                } => *wanted && *expires <= soon,
            };
            if due {
                out.push(*ip);
            }
        }
    }

    /// When [`NeighborCache::poll`] next has work.
    pub fn next_deadline(&self) -> Option<T> {
        if self.incomplete == 0 {
            return None;
        }
        self.map
            .values()
            .filter_map(|e| match e {
                Entry::Incomplete { next_probe, .. } => Some(*next_probe),
                Entry::Reachable { .. } => None,
            })
            .min()
    }
}

/// An address as the last-hit check compares it: the family and the bits in
/// one integer, made where the address is (in registers), not an `IpAddr`
/// built on the stack and read back wider than it was written (a
/// store-forwarding stall on the transmit path's once-per-frame look-up, in
/// perf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    v6: bool,
    bits: u128,
}

impl Key {
    #[inline(always)]
    fn of(ip: IpAddr) -> Key {
        match ip {
            IpAddr::V4(a) => Key {
                v6: false,
                bits: u128::from(u32::from(a)),
            },
            IpAddr::V6(a) => Key {
                v6: true,
                bits: u128::from(a),
            },
        }
    }

    fn ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(self.bits.into())
        } else {
            IpAddr::V4(u32::try_from(self.bits).unwrap_or_default().into())
        }
    }
}

/// Next hops some other part of the system learned, for an engine that does
/// not get the ARP replies to its own requests (a process on one queue of a
/// TAP whose replies are steered to another: see `tap::TapSteering`). A
/// runtime asks it for the next hops its engine is resolving, now and then,
/// never per frame.
pub trait NeighborSource: Send + Sync + core::fmt::Debug {
    /// The Ethernet address of `ip`, if known.
    fn neighbor(&self, ip: std::net::IpAddr) -> Option<[u8; 6]>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_offload::OffloadMeta;

    type Instant = Duration;
    type NeighborCache = super::NeighborCache<Instant, (Vec<u8>, OffloadMeta)>;

    fn cache() -> NeighborCache {
        NeighborCache::new(Limits {
            ttl: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            probes: 3,
            queue: 2,
            max: 1024,
        })
    }

    fn ip() -> IpAddr {
        "10.0.0.2".parse().unwrap()
    }

    /// What a shared address asks the kernel about: addresses being resolved,
    /// and wanted ones close to expiry; not those only learned from a peer,
    /// nor those far from expiry.
    #[test]
    fn due_lists_resolutions_and_wanted_entries_near_expiry() {
        let mut c = cache();
        let t = Duration::ZERO;
        let (wanted, learned, pending): (IpAddr, IpAddr, IpAddr) = (
            "10.0.0.3".parse().unwrap(),
            "10.0.0.4".parse().unwrap(),
            "10.0.0.5".parse().unwrap(),
        );
        c.learn(t, wanted, [2; 6], true).unwrap();
        c.learn(t, learned, [3; 6], true).unwrap();
        assert_eq!(c.lookup_mut(t, wanted), Lookup::Hit([2; 6]));
        assert!(!c.resolving());
        assert_eq!(
            c.enqueue(t, pending, (vec![], OffloadMeta::plain())),
            Queued::ProbeNow
        );
        assert!(c.resolving());
        let mut due = Vec::new();
        c.due(t, Duration::from_secs(30), &mut due);
        assert_eq!(due, [pending]);
        due.clear();
        c.due(Duration::from_secs(31), Duration::from_secs(30), &mut due);
        due.sort();
        assert_eq!(due, [wanted, pending]);
    }

    #[test]
    fn queue_resolve_flush() {
        let mut c = cache();
        let t = Duration::ZERO;
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
        let q = c.learn(t, ip(), [2; 6], false).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(c.lookup(t, ip()), Lookup::Hit([2; 6]));
        // Expiry.
        assert_eq!(c.lookup(t + Duration::from_secs(61), ip()), Lookup::Miss);
    }

    #[test]
    fn gives_up_after_probes() {
        let mut c = cache();
        let mut t = Duration::ZERO;
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
        c.learn(t, ip(), [1; 6], false).unwrap();
        assert_eq!(c.lookup(t, ip()), Lookup::Miss);
    }

    /// A full table refuses addresses only learned from peers, gives one of
    /// those up for an address this host needs, refuses when every entry is
    /// wanted, keeps serving and updating the ones it has, and once entries
    /// expire, a sweep (not before the retry interval since the last one) makes
    /// room.
    #[test]
    fn full_table_refuses_evicts_unwanted_then_sweeps_expired() {
        let mut c = NeighborCache::new(Limits {
            ttl: Duration::from_secs(60),
            retry: Duration::from_secs(1),
            probes: 3,
            queue: 2,
            max: 4,
        });
        let a = |i: u8| IpAddr::from([10, 0, 1, i]);
        let t = Duration::ZERO;
        for i in 0..4 {
            assert!(c.learn(t, a(i), [i; 6], true).is_ok());
        }
        assert_eq!(c.learn(t, a(9), [9; 6], true), Err(TableFull));
        // Sent to: wanted from now on.
        for i in 1..4 {
            assert_eq!(c.lookup_mut(t, a(i)), Lookup::Hit([i; 6]));
        }
        // A needed address takes the place of the one never sent to.
        assert_eq!(
            c.enqueue(t, a(9), (vec![1], OffloadMeta::plain())),
            Queued::ProbeNow
        );
        assert_eq!(c.lookup(t, a(0)), Lookup::Miss);
        assert_eq!(c.len(), 4);
        // Every entry wanted (resolving counts): refused.
        assert_eq!(
            c.enqueue(t, a(10), (vec![1], OffloadMeta::plain())),
            Queued::TableFull
        );
        // Known addresses still resolve and update, keeping their mark.
        assert_eq!(c.learn(t, a(9), [9; 6], false).map(|q| q.len()), Ok(1));
        assert!(c.learn(t, a(1), [7; 6], false).is_ok());
        assert_eq!(c.lookup(t, a(1)), Lookup::Hit([7; 6]));
        assert_eq!(
            c.enqueue(t, a(10), (vec![1], OffloadMeta::plain())),
            Queued::TableFull
        );
        // Entries 2, 3 and 9 expire at 60 s; 1 was refreshed at 30 s.
        let t1 = t + Duration::from_secs(30);
        assert!(c.learn(t1, a(1), [7; 6], false).is_ok());
        let t2 = t + Duration::from_secs(61);
        assert!(c.learn(t2, a(20), [20; 6], true).is_ok());
        assert_eq!(c.len(), 2, "expired entries swept");
        assert_eq!(c.lookup(t2, a(1)), Lookup::Hit([7; 6]));
        // Full again of wanted entries: refused, and no second sweep within the
        // retry interval.
        assert_eq!(c.lookup_mut(t2, a(20)), Lookup::Hit([20; 6]));
        assert_eq!(
            c.enqueue(t2, a(21), (vec![1], OffloadMeta::plain())),
            Queued::ProbeNow
        );
        assert!(c.learn(t2, a(21), [21; 6], false).is_ok());
        assert_eq!(
            c.enqueue(t2, a(22), (vec![1], OffloadMeta::plain())),
            Queued::ProbeNow
        );
        assert_eq!(c.learn(t2, a(23), [23; 6], true), Err(TableFull));
        assert_eq!(
            c.enqueue(t2, a(24), (vec![1], OffloadMeta::plain())),
            Queued::TableFull
        );
        assert_eq!(c.next_deadline(), Some(t2 + Duration::from_secs(1)));
    }

    /// Many resolutions give up and many resolve: the count of entries being
    /// resolved stays exact, so the deadline is there exactly while some are.
    #[test]
    fn deadline_follows_the_entries_being_resolved() {
        let mut c = cache();
        let mut t = Duration::ZERO;
        let a = |i: u8| IpAddr::from([10, 0, 2, i]);
        for i in 0..10 {
            c.enqueue(t, a(i), (vec![i], OffloadMeta::plain()));
        }
        for i in 0..5 {
            c.learn(t, a(i), [i; 6], false).unwrap();
        }
        assert_eq!(c.incomplete, 5);
        assert_eq!(c.next_deadline(), Some(t + Duration::from_secs(1)));
        let mut probes = Vec::new();
        for _ in 0..5 {
            t += Duration::from_secs(1);
            c.poll(t, &mut probes);
        }
        assert_eq!(c.incomplete, 0);
        assert_eq!(c.next_deadline(), None);
        // An expired entry resolved again counts once more.
        let late = t + Duration::from_secs(120);
        c.enqueue(late, a(0), (vec![0], OffloadMeta::plain()));
        assert_eq!(c.incomplete, 1);
        c.learn(late, a(0), [1; 6], false).unwrap();
        assert_eq!((c.incomplete, c.next_deadline()), (0, None));
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
            max: 1024,
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
            let mut now = Duration::ZERO;
            let mut next_mac = 0u8;
            for _ in 0..2_000 {
                let ip = ips[rng.below(ips.len() as u64) as usize];
                match rng.below(10) {
                    0 => now += Duration::from_millis(rng.below(30)),
                    1 => now += Duration::from_nanos(rng.below(3)),
                    2 => {
                        next_mac = next_mac.wrapping_add(1);
                        let create = rng.below(10) < 7;
                        c.learn(now, ip, [next_mac; 6], create).unwrap();
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
                        // The count of entries being resolved is exact: the
                        // deadline is the table's own minimum.
                        let scan = c
                            .map
                            .values()
                            .filter_map(|e| match e {
                                Entry::Incomplete { next_probe, .. } => Some(*next_probe),
                                Entry::Reachable { .. } => None,
                            })
                            .min();
                        assert_eq!(c.next_deadline(), scan);
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
        let t = Duration::ZERO;
        let other: IpAddr = "10.0.0.9".parse().unwrap();
        c.learn(t, ip(), [1; 6], true).unwrap();
        c.learn(t, other, [9; 6], true).unwrap();
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([1; 6]));
        assert_eq!(c.lookup_mut(t, other), Lookup::Hit([9; 6]));
        assert_eq!(c.lookup_mut(t, ip()), Lookup::Hit([1; 6]));
        // The peer moved.
        c.learn(t, ip(), [2; 6], false).unwrap();
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
