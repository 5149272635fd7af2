//! Next hops from the kernel's neighbour table, for an interface whose address
//! the kernel's stack shares ([`crate::RuntimeConfig::kernel_neighbors`]).
//!
//! On a shared address the kernel answers ARP and neighbour discovery, and the
//! replies to linerate's own requests go to the kernel too (the steering
//! program passes them): linerate's engine would never learn a next hop. Each
//! queue thread asks the kernel instead, with its own rtnetlink socket:
//!
//! * a next hop the engine is resolving is read from the kernel's table; if
//!   the kernel has no usable entry, it is asked to resolve it (`NTF_USE`) and
//!   read again a few milliseconds later, until the engine's own resolution
//!   gives up;
//! * a next hop in use whose entry expires within half the engine's
//!   `neighbor_ttl` is read again and re-added, so it never lapses while the
//!   kernel still knows it; one the kernel holds as `STALE` is handed back for
//!   the kernel to confirm (its unicast probe), so a peer that changed its MAC
//!   is found out.
//!
//! The same loop serves a [`NeighborSource`]
//! ([`crate::RuntimeConfig::neighbor_source`]): a process on one queue of a
//! shared TAP, whose ARP replies the steering program sends to another
//! queue, reads the next hops it resolves from what the program recorded;
//! its own ARP requests still go out, and bring the replies that the program
//! records.
//!
//! The look-ups happen at most once per [`KernelNeighborTable::interval`] (and every
//! few milliseconds while a resolution waits), never per frame.

use crate::runtime::QueueStats;
use linerate_nic::kernel_neigh::KernelNeighbors;
use linerate_nic::neigh::NeighborSource;
use linerate_toe::{Engine, Instant};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// How often a waiting resolution is looked up again.
const PENDING: Duration = Duration::from_millis(5);

/// Where next hops are read.
#[derive(Debug)]
pub(crate) enum Source {
    /// The kernel's table over rtnetlink.
    Kernel(KernelNeighbors),
    /// Some other source (a TAP steering program's record of ARP).
    Other(Arc<dyn NeighborSource>),
}

/// One queue thread's view of the kernel's neighbour table (or of another
/// [`Source`]).
#[derive(Debug)]
pub(crate) struct KernelNeighborTable {
    nl: Source,
    /// Refresh entries expiring within this.
    within: Duration,
    /// Time between refresh scans.
    interval: Duration,
    /// When the table is scanned next for refreshes.
    next_refresh: Instant,
    /// When waiting resolutions are looked up next.
    next_pending: Instant,
    due: Vec<IpAddr>,
    /// A failure was logged (once).
    warned: bool,
}

impl KernelNeighborTable {
    /// For an engine whose entries live `ttl`.
    pub(crate) fn new(nl: Source, ttl: Duration) -> KernelNeighborTable {
        KernelNeighborTable {
            nl,
            within: ttl / 2,
            interval: (ttl / 8).clamp(Duration::from_millis(10), Duration::from_secs(1)),
            next_refresh: Instant::ZERO,
            next_pending: Instant::ZERO,
            due: Vec::new(),
            warned: false,
        }
    }

    /// Looks up what is due in the kernel's table and hands the engine what
    /// the kernel knows.
    pub(crate) fn poll(&mut self, now: Instant, engine: &mut Engine, stats: &mut QueueStats) {
        let refresh = now >= self.next_refresh;
        let pending = engine.neighbors_resolving() && now >= self.next_pending;
        if !(refresh || pending) {
            return;
        }
        self.due.clear();
        let within = if refresh { self.within } else { Duration::ZERO };
        engine.neighbors_due(now, within, &mut self.due);
        let mut waiting = false;
        let mut failed = None;
        let due = std::mem::take(&mut self.due);
        for &ip in &due {
            let nl = match &mut self.nl {
                Source::Kernel(nl) => nl,
                Source::Other(src) => {
                    // Nothing to ask for: the engine's own requests bring
                    // the replies the source records.
                    match src.neighbor(ip) {
                        Some(mac) => {
                            engine.neighbor_add(now, ip, mac);
                            stats.kernel_neighbors += 1;
                        }
                        None => waiting = true,
                    }
                    continue;
                }
            };
            match nl.get(ip) {
                Ok(Some(n)) if n.usable().is_some() => {
                    let mac = n.usable().unwrap_or_default();
                    engine.neighbor_add(now, ip, mac);
                    stats.kernel_neighbors += 1;
                    if n.is_stale() {
                        // The kernel confirms it (unicast probe) on this use.
                        let _ = nl.resolve(ip);
                    }
                }
                Ok(_) => {
                    waiting = true;
                    stats.kernel_resolves += 1;
                    if let Err(e) = nl.resolve(ip) {
                        failed = Some(e);
                    }
                }
                Err(e) => {
                    waiting = true;
                    failed = Some(e);
                }
            }
            if let Some(e) = failed.take() {
                self.failed(&e, stats);
            }
        }
        self.due = due;
        if refresh {
            self.next_refresh = now + self.interval;
        }
        self.next_pending = now + if waiting { PENDING } else { Duration::ZERO };
    }

    /// When [`KernelNeighborTable::poll`] has work next, for the loop's sleep.
    pub(crate) fn next_deadline(&self, engine: &Engine) -> Instant {
        if engine.neighbors_resolving() {
            self.next_refresh.min(self.next_pending)
        } else {
            self.next_refresh
        }
    }

    fn failed(&mut self, e: &std::io::Error, stats: &mut QueueStats) {
        stats.kernel_neighbor_errors += 1;
        if !self.warned {
            self.warned = true;
            tracing::warn!(error = %e, "reading the kernel's neighbour table failed");
        }
    }
}
