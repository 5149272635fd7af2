//! The forwarding database of a VTEP: per VNI, where each inner MAC address lives.
//!
//! Modelled on Linux's vxlan driver (`drivers/net/vxlan/vxlan_core.c`: `vxlan_snoop`,
//! `vxlan_fdb_create`, `vxlan_cleanup`) and the bridge it usually sits under:
//!
//! * **Learning**: the inner source MAC of a frame is bound to where the frame came
//!   from, a local port or the remote VTEP that encapsulated it. Only valid unicast
//!   source addresses are learned (not multicast, broadcast or all-zero, as
//!   `is_valid_ether_addr`).
//! * **Moves**: a learned MAC seen behind another port moves there (`fdb_moved`);
//!   a static entry never moves (as Linux keeps `NUD_PERMANENT` entries).
//! * **Ageing**: a learned entry not refreshed for [`FdbConfig::ageing`] (300 s by
//!   default, Linux's `ageing`) is gone: lookups treat it as absent from that
//!   instant, and [`Fdb::age`] frees it. Time is an argument (`now`, a [`Duration`]
//!   since the caller's epoch), so ageing runs in virtual time in tests.
//! * **Bounds**: at most [`FdbConfig::max_per_vni`] entries in one VNI and
//!   [`FdbConfig::max_total`] in all (Linux's `maxaddress`); a MAC that would pass
//!   either is not learned and counted (`fdb_full`), so a flood of random source
//!   MACs cannot grow memory. Frames to MACs not learned are flooded, so the
//!   bound costs bandwidth, never connectivity.
//! * **Flood lists**: per VNI the remote VTEPs that get broadcast, unknown unicast
//!   and multicast (Linux's all-zero entries, `bridge fdb append 00:00:00:00:00:00
//!   dev vx0 dst IP`): head-end replication.
//!
//! [`Fdb::forward`] is the bridge's decision for one frame: to one destination,
//! flooded (to the local ports but the ingress, and to the flood list only if the
//! frame came from a local port: split horizon, a frame from the tunnel never goes
//! back into it), or dropped with a reason.
//!
//! ```
//! use linerate_tunnel::bridge::{Dest, Fdb, FdbConfig, Forward};
//! use std::time::Duration;
//!
//! let mut fdb = Fdb::new(FdbConfig::default());
//! fdb.add_vni(42);
//! fdb.add_flood(42, "10.0.0.2".parse().unwrap()).unwrap();
//! let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
//! let t0 = Duration::ZERO;
//!
//! // A frame from local port 0 to b: b is unknown, flood (to the remote VTEP too).
//! fdb.learn(t0, 42, a, Dest::Local(0));
//! assert!(matches!(fdb.forward(t0, 42, b, Dest::Local(0)), Forward::Flood { remotes, .. } if remotes.len() == 1));
//!
//! // b answers from the remote VTEP: now learned, a's reply path is known too.
//! fdb.learn(t0, 42, b, Dest::Remote("10.0.0.2".parse().unwrap()));
//! assert_eq!(fdb.forward(t0, 42, b, Dest::Local(0)), Forward::Unicast(Dest::Remote("10.0.0.2".parse().unwrap())));
//! assert_eq!(fdb.forward(t0, 42, a, Dest::Remote("10.0.0.2".parse().unwrap())), Forward::Unicast(Dest::Local(0)));
//!
//! // Five minutes of silence and b is forgotten.
//! assert!(fdb.lookup(Duration::from_secs(300), 42, b).is_none());
//! ```

use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::net::IpAddr;
use std::time::Duration;

/// An Ethernet MAC address.
pub type Mac = [u8; 6];

/// Where a MAC address lives, seen from one VTEP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dest {
    /// Behind local port `n` of the bridge domain (a TAP, a memory port, a vNIC).
    Local(u16),
    /// Behind the remote VTEP with this underlay address.
    Remote(IpAddr),
}

impl core::fmt::Display for Dest {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Dest::Local(p) => write!(f, "port {p}"),
            Dest::Remote(ip) => write!(f, "dst {ip}"),
        }
    }
}

/// Bounds and ageing of an [`Fdb`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbConfig {
    /// How long a learned entry lives without being refreshed (Linux: `ageing`,
    /// 300 s by default).
    pub ageing: Duration,
    /// The most entries (learned and static) one VNI may hold.
    pub max_per_vni: usize,
    /// The most entries all VNIs together may hold.
    pub max_total: usize,
    /// The most remote VTEPs in one VNI's flood list.
    pub max_flood: usize,
}

impl Default for FdbConfig {
    fn default() -> FdbConfig {
        FdbConfig {
            ageing: Duration::from_secs(300),
            max_per_vni: 16_384,
            max_total: 65_536,
            max_flood: 1_024,
        }
    }
}

/// Why an FDB operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdbError {
    /// The VNI was never added with [`Fdb::add_vni`].
    UnknownVni(u32),
    /// The VNI's or the whole table's bound is reached.
    Full {
        /// The VNI the entry was for.
        vni: u32,
    },
    /// The MAC is not a valid unicast address (multicast, broadcast or all-zero).
    InvalidMac(Mac),
    /// The VNI's flood list already has [`FdbConfig::max_flood`] entries.
    FloodListFull(u32),
}

impl core::fmt::Display for FdbError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FdbError::UnknownVni(v) => write!(f, "VNI {v} is not configured"),
            FdbError::Full { vni } => write!(f, "forwarding table full (VNI {vni})"),
            FdbError::InvalidMac(m) => write!(f, "{} is not a unicast MAC", MacFmt(*m)),
            FdbError::FloodListFull(v) => write!(f, "flood list of VNI {v} is full"),
        }
    }
}

impl std::error::Error for FdbError {}

/// What [`Fdb::learn`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Learned {
    /// A new entry.
    New,
    /// An existing entry, same place, seen again.
    Refreshed,
    /// The MAC moved from `from` to the new place.
    Moved {
        /// Where it was.
        from: Dest,
    },
    /// A static entry for the MAC exists elsewhere and was kept.
    StaticKept,
    /// Not learned: the VNI's or the table's bound is reached (`fdb_full`).
    Full,
    /// Not learned: not a valid unicast source, or a VNI not configured.
    Invalid,
}

/// The bridge's decision for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward<'a> {
    /// To this one destination.
    Unicast(Dest),
    /// Broadcast, multicast or unknown unicast: to every local port of the VNI
    /// but `except`, and to every remote VTEP of `remotes` (empty when the frame
    /// came from a remote VTEP: split horizon).
    Flood {
        /// The local port the frame came in on, if it came from one.
        except: Option<u16>,
        /// The remote VTEPs to replicate to.
        remotes: &'a [IpAddr],
    },
    /// Not forwarded.
    Drop(DropReason),
}

/// Why [`Fdb::forward`] dropped a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The destination is where the frame came from (Linux's bridge drops these).
    SamePort,
    /// The frame came from a remote VTEP and its destination is another remote
    /// VTEP: a VTEP never relays between tunnels.
    SplitHorizon,
    /// The VNI is not configured.
    UnknownVni,
}

/// One FDB entry, as [`Fdb::dump`] lists it (like a line of `bridge fdb show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdbRecord {
    /// The VNI.
    pub vni: u32,
    /// The MAC (all-zero for a flood-list entry).
    pub mac: Mac,
    /// Where it lives.
    pub dest: Dest,
    /// Static (configured) rather than learned.
    pub is_static: bool,
    /// Time since it was last seen (zero for static and flood entries).
    pub age: Duration,
}

impl core::fmt::Display for FdbRecord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} {} vni {}", MacFmt(self.mac), self.dest, self.vni)?;
        if self.is_static {
            write!(f, " permanent")
        } else {
            write!(f, " used {}", self.age.as_secs())
        }
    }
}

/// Per-VNI FDB counters (`bridge -s fdb` / `ethtool -S` style names in
/// [`FdbCounters::named`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FdbCounters {
    /// Entries learned.
    pub learned: u64,
    /// Entries that moved to another port or VTEP.
    pub moved: u64,
    /// Learned entries that aged out.
    pub aged: u64,
    /// MACs not learned because a bound was reached.
    pub full: u64,
    /// Learning attempts for a MAC with a static entry elsewhere.
    pub static_kept: u64,
    /// Source MACs not learned because they are not valid unicast addresses.
    pub invalid_src: u64,
}

impl FdbCounters {
    /// The counters with their names.
    pub fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("fdb_learned", self.learned),
            ("fdb_moved", self.moved),
            ("fdb_aged", self.aged),
            ("fdb_full", self.full),
            ("fdb_static_kept", self.static_kept),
            ("fdb_invalid_src", self.invalid_src),
        ]
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    dest: Dest,
    seen: Duration,
    is_static: bool,
}

#[derive(Debug, Default)]
struct Vni {
    entries: usize,
    flood: Vec<IpAddr>,
    counters: FdbCounters,
}

/// The forwarding database of a VTEP: every VNI's MAC table and flood list.
///
/// Memory is bounded by the configuration: entries by `max_total`, flood lists by
/// `max_flood` per configured VNI; VNIs exist only once added.
#[derive(Debug)]
pub struct Fdb {
    cfg: FdbConfig,
    /// Keyed by [`key`]: the VNI and the MAC packed in one word, hashed with
    /// foldhash seeded per process (a few multiplies per lookup, where SipHash
    /// would cost a run per frame; the seed keeps bucket placement unpredictable).
    table: HashMap<u128, Entry, RandomState>,
    vnis: HashMap<u32, Vni, RandomState>,
    total: usize,
}

/// The table key of `mac` in `vni`.
#[inline]
fn key(vni: u32, mac: Mac) -> u128 {
    let [a, b, c, d, e, f] = mac;
    u128::from(vni) << 48 | u128::from(u64::from_be_bytes([0, 0, a, b, c, d, e, f]))
}

/// The VNI and MAC of a table key.
fn unkey(k: u128) -> (u32, Mac) {
    let [_, _, a, b, c, d, e, f] = (k as u64).to_be_bytes();
    ((k >> 48) as u32, [a, b, c, d, e, f])
}

/// True for a MAC that may be learned: not multicast/broadcast, not all-zero.
pub fn is_valid_unicast(mac: Mac) -> bool {
    mac[0] & 1 == 0 && mac != [0; 6]
}

impl Fdb {
    /// An empty table.
    pub fn new(cfg: FdbConfig) -> Fdb {
        Fdb {
            cfg,
            table: HashMap::default(),
            vnis: HashMap::default(),
            total: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FdbConfig {
        &self.cfg
    }

    /// Adds VNI `vni` (no entries, empty flood list); nothing if it exists.
    pub fn add_vni(&mut self, vni: u32) {
        self.vnis.entry(vni).or_default();
    }

    /// Removes VNI `vni` with its entries and flood list.
    pub fn remove_vni(&mut self, vni: u32) {
        if self.vnis.remove(&vni).is_some() {
            self.table.retain(|k, _| unkey(*k).0 != vni);
            self.total = self.table.len();
        }
    }

    /// True if `vni` was added.
    pub fn has_vni(&self, vni: u32) -> bool {
        self.vnis.contains_key(&vni)
    }

    /// Entries in VNI `vni` (0 for an unknown VNI).
    pub fn len_vni(&self, vni: u32) -> usize {
        self.vnis.get(&vni).map_or(0, |v| v.entries)
    }

    /// Entries in all VNIs.
    pub fn len(&self) -> usize {
        self.total
    }

    /// True if no VNI holds an entry.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The counters of VNI `vni`.
    pub fn counters(&self, vni: u32) -> Option<FdbCounters> {
        self.vnis.get(&vni).map(|v| v.counters)
    }

    /// Appends `remote` to the flood list of `vni` (nothing if it is there).
    pub fn add_flood(&mut self, vni: u32, remote: IpAddr) -> Result<(), FdbError> {
        let max = self.cfg.max_flood;
        let v = self.vnis.get_mut(&vni).ok_or(FdbError::UnknownVni(vni))?;
        if v.flood.contains(&remote) {
            return Ok(());
        }
        if v.flood.len() >= max {
            return Err(FdbError::FloodListFull(vni));
        }
        v.flood.push(remote);
        Ok(())
    }

    /// Removes `remote` from the flood list of `vni`.
    pub fn remove_flood(&mut self, vni: u32, remote: IpAddr) {
        if let Some(v) = self.vnis.get_mut(&vni) {
            v.flood.retain(|r| *r != remote);
        }
    }

    /// The flood list of `vni`.
    pub fn flood_list(&self, vni: u32) -> &[IpAddr] {
        self.vnis.get(&vni).map_or(&[], |v| v.flood.as_slice())
    }

    /// Adds or replaces a static entry: `mac` in `vni` lives at `dest`, never
    /// ages and never moves (`bridge fdb add MAC dev vx0 dst IP vni N`).
    pub fn add_static(&mut self, vni: u32, mac: Mac, dest: Dest) -> Result<(), FdbError> {
        if !is_valid_unicast(mac) {
            return Err(FdbError::InvalidMac(mac));
        }
        if !self.vnis.contains_key(&vni) {
            return Err(FdbError::UnknownVni(vni));
        }
        let entry = Entry {
            dest,
            seen: Duration::ZERO,
            is_static: true,
        };
        if let Some(e) = self.table.get_mut(&key(vni, mac)) {
            *e = entry;
            return Ok(());
        }
        if !self.room(vni) {
            return Err(FdbError::Full { vni });
        }
        self.insert(vni, mac, entry);
        Ok(())
    }

    /// Removes the entry for `mac` in `vni`, static or learned; true if there was one.
    pub fn remove(&mut self, vni: u32, mac: Mac) -> bool {
        if self.table.remove(&key(vni, mac)).is_none() {
            return false;
        }
        self.total -= 1;
        if let Some(v) = self.vnis.get_mut(&vni) {
            v.entries = v.entries.saturating_sub(1);
        }
        true
    }

    /// Removes the learned entries of `vni` (of every VNI with `None`) for
    /// which `pick` is true of their destination; static entries stay.
    /// Returns how many went. A scan of the table: a control operation.
    pub fn flush_learned(&mut self, vni: Option<u32>, mut pick: impl FnMut(Dest) -> bool) -> usize {
        let vnis = &mut self.vnis;
        let before = self.table.len();
        self.table.retain(|k, e| {
            let v = unkey(*k).0;
            let go = !e.is_static && vni.is_none_or(|n| n == v) && pick(e.dest);
            if go && let Some(s) = vnis.get_mut(&v) {
                s.entries = s.entries.saturating_sub(1);
            }
            !go
        });
        self.total = self.table.len();
        before - self.total
    }

    /// Local port `port` of `vni` is gone and the ports after it moved down
    /// by one: its entries (learned and static) are removed, and those of
    /// the later ports renumbered. Returns how many entries were removed.
    pub fn remove_port(&mut self, vni: u32, port: u16) -> usize {
        let vnis = &mut self.vnis;
        let before = self.table.len();
        self.table.retain(|k, e| {
            if unkey(*k).0 != vni {
                return true;
            }
            match e.dest {
                Dest::Local(p) if p == port => {
                    if let Some(s) = vnis.get_mut(&vni) {
                        s.entries = s.entries.saturating_sub(1);
                    }
                    false
                }
                Dest::Local(p) if p > port => {
                    e.dest = Dest::Local(p - 1);
                    true
                }
                _ => true,
            }
        });
        self.total = self.table.len();
        before - self.total
    }

    /// The static entry for `mac` in `vni`, if there is one.
    pub fn get_static(&self, vni: u32, mac: Mac) -> Option<Dest> {
        self.table
            .get(&key(vni, mac))
            .filter(|e| e.is_static)
            .map(|e| e.dest)
    }

    fn room(&self, vni: u32) -> bool {
        self.total < self.cfg.max_total && self.len_vni(vni) < self.cfg.max_per_vni
    }

    fn insert(&mut self, vni: u32, mac: Mac, entry: Entry) {
        self.table.insert(key(vni, mac), entry);
        self.total += 1;
        if let Some(v) = self.vnis.get_mut(&vni) {
            v.entries += 1;
        }
    }

    /// Learns that the inner source `mac` of a frame of `vni` came from `from`.
    ///
    /// An entry whose ageing time has passed counts as absent (it is replaced, and
    /// counted as aged). When the table is full, expired entries of the VNI are
    /// not searched for: [`Fdb::age`] frees them.
    pub fn learn(&mut self, now: Duration, vni: u32, mac: Mac, from: Dest) -> Learned {
        let ageing = self.cfg.ageing;
        let Some(v) = self.vnis.get_mut(&vni) else {
            return Learned::Invalid;
        };
        if !is_valid_unicast(mac) {
            v.counters.invalid_src += 1;
            return Learned::Invalid;
        }
        match self.table.entry(key(vni, mac)) {
            MapEntry::Occupied(mut o) => {
                let e = o.get_mut();
                if e.is_static {
                    if e.dest == from {
                        return Learned::Refreshed;
                    }
                    v.counters.static_kept += 1;
                    return Learned::StaticKept;
                }
                let expired = now.saturating_sub(e.seen) >= ageing;
                let old = e.dest;
                e.seen = now;
                e.dest = from;
                if expired {
                    v.counters.aged += 1;
                    v.counters.learned += 1;
                    Learned::New
                } else if old == from {
                    Learned::Refreshed
                } else {
                    v.counters.moved += 1;
                    Learned::Moved { from: old }
                }
            }
            MapEntry::Vacant(slot) => {
                if self.total >= self.cfg.max_total || v.entries >= self.cfg.max_per_vni {
                    v.counters.full += 1;
                    return Learned::Full;
                }
                slot.insert(Entry {
                    dest: from,
                    seen: now,
                    is_static: false,
                });
                v.entries += 1;
                v.counters.learned += 1;
                self.total += 1;
                Learned::New
            }
        }
    }

    /// Where `mac` of `vni` lives, if known and not aged out at `now`.
    pub fn lookup(&self, now: Duration, vni: u32, mac: Mac) -> Option<Dest> {
        let e = self.table.get(&key(vni, mac))?;
        if e.is_static || now.saturating_sub(e.seen) < self.cfg.ageing {
            Some(e.dest)
        } else {
            None
        }
    }

    /// The bridge's decision for a frame of `vni` to `dst` that came in at
    /// `ingress` (learn its source first, with [`Fdb::learn`]).
    pub fn forward(&self, now: Duration, vni: u32, dst: Mac, ingress: Dest) -> Forward<'_> {
        let Some(v) = self.vnis.get(&vni) else {
            return Forward::Drop(DropReason::UnknownVni);
        };
        let flood = |ingress: Dest| match ingress {
            Dest::Local(p) => Forward::Flood {
                except: Some(p),
                remotes: v.flood.as_slice(),
            },
            Dest::Remote(_) => Forward::Flood {
                except: None,
                remotes: &[],
            },
        };
        if dst[0] & 1 == 1 {
            return flood(ingress);
        }
        match self.lookup(now, vni, dst) {
            None => flood(ingress),
            Some(d) if d == ingress => Forward::Drop(DropReason::SamePort),
            Some(Dest::Remote(_)) if matches!(ingress, Dest::Remote(_)) => {
                Forward::Drop(DropReason::SplitHorizon)
            }
            Some(d) => Forward::Unicast(d),
        }
    }

    /// Frees the learned entries aged out at `now`, counting them; returns how many.
    pub fn age(&mut self, now: Duration) -> usize {
        let ageing = self.cfg.ageing;
        let vnis = &mut self.vnis;
        let before = self.table.len();
        self.table.retain(|k, e| {
            let keep = e.is_static || now.saturating_sub(e.seen) < ageing;
            if !keep && let Some(v) = vnis.get_mut(&unkey(*k).0) {
                v.counters.aged += 1;
                v.entries = v.entries.saturating_sub(1);
            }
            keep
        });
        self.total = self.table.len();
        before - self.total
    }

    /// Every entry and flood-list member, sorted by VNI, then MAC, then
    /// destination (flood entries show as MAC 00:00:00:00:00:00), without the
    /// aged-out ones.
    pub fn dump(&self, now: Duration) -> Vec<FdbRecord> {
        let mut out: Vec<FdbRecord> = self
            .table
            .iter()
            .filter(|(_, e)| e.is_static || now.saturating_sub(e.seen) < self.cfg.ageing)
            .map(|(k, e)| (unkey(*k), e))
            .map(|((vni, mac), e)| FdbRecord {
                vni,
                mac,
                dest: e.dest,
                is_static: e.is_static,
                age: if e.is_static {
                    Duration::ZERO
                } else {
                    now.saturating_sub(e.seen)
                },
            })
            .collect();
        for (vni, v) in &self.vnis {
            out.extend(v.flood.iter().map(|ip| FdbRecord {
                vni: *vni,
                mac: [0; 6],
                dest: Dest::Remote(*ip),
                is_static: true,
                age: Duration::ZERO,
            }));
        }
        out.sort_by_key(|a| (a.vni, a.mac, a.dest));
        out
    }
}

/// Formats a MAC as `aa:bb:cc:dd:ee:ff`.
#[derive(Debug, Clone, Copy)]
pub struct MacFmt(pub Mac);

impl core::fmt::Display for MacFmt {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

#[cfg(test)]
mod tests;
