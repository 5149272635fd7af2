//! Per-queue counters named like `ethtool -S`.
//!
//! Every backend and the shim count into one [`Counters`] per NIC: one row of
//! [`Counter`]s per queue, each a relaxed atomic so that a monitoring thread can
//! read them while the data path runs. The data path adds once per batch, not per
//! frame, through a [`Tally`].
//!
//! Names follow the drivers: `rx_packets`, `rx_bytes`, `tx_packets`, `tx_bytes`,
//! `rx_dropped_<reason>` and `tx_dropped_<reason>` for every place a frame can be
//! lost, `gro_merged`, `gso_segments`, `csum_bad` and so on ([`Counter::name`]).
//! [`Snapshot`] prints them as `ethtool -S` does, per queue with the queue number
//! after the direction (`rx0_packets`, as mlx5 names them) and totals under the
//! plain name.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! counters {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// One counter of a queue.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Counter {
            $( $(#[$doc])* $variant, )*
        }

        impl Counter {
            /// Every counter, in display order.
            pub const ALL: &'static [Counter] = &[$(Counter::$variant,)*];

            /// The `ethtool -S` style name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Counter::$variant => $name,)*
                }
            }
        }
    };
}

counters! {
    /// Frames handed to the stack.
    RxPackets => "rx_packets",
    /// Bytes of those frames.
    RxBytes => "rx_bytes",
    /// Received super-frames (coalesced by the backend or by GRO).
    RxGsoPackets => "rx_gso_packets",
    /// Frames taken for transmission.
    TxPackets => "tx_packets",
    /// Bytes of those frames.
    TxBytes => "tx_bytes",
    /// Super-frames handed to the backend unsegmented.
    TxGsoPackets => "tx_gso_packets",
    /// Received frames dropped because the receive ring was full.
    RxDroppedRingFull => "rx_dropped_ring_full",
    /// Received frames longer than the MTU and not marked as coalesced.
    RxDroppedOversize => "rx_dropped_oversize",
    /// Received frames cut short (longer than the receive buffer).
    RxDroppedTruncated => "rx_dropped_truncated",
    /// Received frames whose headers could not be parsed.
    RxDroppedMalformed => "rx_dropped_malformed",
    /// Received frames whose checksum was bad.
    RxDroppedCsum => "rx_dropped_csum",
    /// Frames refused for transmission: longer than the MTU without a
    /// segmentation request, or with segments that would be.
    TxDroppedOversize => "tx_dropped_oversize",
    /// Frames refused for transmission: an offload the backend lacks.
    TxDroppedUnsupported => "tx_dropped_unsupported",
    /// Frames refused for transmission: malformed, or rejected by the kernel.
    TxDroppedInvalid => "tx_dropped_invalid",
    /// Frames dropped because the interface was down.
    TxDroppedLinkDown => "tx_dropped_link_down",
    /// Received frames GRO merged into another (each merge counts one).
    GroMerged => "gro_merged",
    /// Super-frames GRO emitted.
    GroFlushed => "gro_flushed",
    /// Segments software GSO produced.
    GsoSegments => "gso_segments",
    /// Super-frames software GSO split.
    GsoPackets => "gso_packets",
    /// Checksums software completed on transmit.
    CsumCompleted => "csum_completed",
    /// Checksums software verified good on receive.
    CsumVerified => "csum_verified",
    /// Checksums found bad on receive.
    CsumBad => "csum_bad",
    /// Frames software RSS moved to a queue.
    RssDispatched => "rss_dispatched",
    /// Memory wire: frames lost by the loss fault.
    WireLost => "wire_lost",
    /// Memory wire: extra copies made by the duplication fault.
    WireDuplicated => "wire_duplicated",
    /// Memory wire: frames with a bit flipped by the corruption fault.
    WireCorrupted => "wire_corrupted",
    /// Memory wire: frames held back by the reordering fault.
    WireReordered => "wire_reordered",
    /// Memory wire: frames dropped because the rate limiter's queue was full.
    WireDroppedRate => "wire_dropped_rate",
    /// Partition: received frames no virtual NIC takes (and no default vNIC).
    RxDroppedNoVnic => "rx_dropped_no_vnic",
    /// Virtual NIC: received frames a filter rule dropped.
    RxDroppedFilter => "rx_dropped_filter",
    /// Virtual NIC: frames to transmit a filter rule dropped.
    TxDroppedFilter => "tx_dropped_filter",
    /// Virtual NIC: frames to transmit from a MAC or IP address not its own.
    TxDroppedSpoof => "tx_dropped_spoof",
    /// Virtual NIC: frames to transmit with a VLAN the vNIC may not use.
    TxDroppedVlan => "tx_dropped_vlan",
    /// Virtual NIC: frames to another vNIC of a private partition.
    TxDroppedPrivate => "tx_dropped_private",
    /// Virtual NIC: received frames over the receive rate limit.
    RxDroppedRate => "rx_dropped_rate",
    /// Virtual NIC: frames over the transmit rate limit, dropped (policing).
    TxDroppedRate => "tx_dropped_rate",
    /// Virtual NIC: transmit calls that left frames in the batch for the rate
    /// limit (shaping; the frames are sent later, not lost).
    TxThrottled => "tx_throttled",
    /// Scatter-gather frames gathered into one buffer (for a receiver that did not
    /// opt in, a wire fault that rewrites bytes, or GRO).
    SgLinearized => "sg_linearized",
}

/// Number of counters per queue.
pub const COUNT: usize = Counter::ALL.len();

/// The counters of one queue.
#[derive(Debug)]
pub struct QueueCounters {
    values: [AtomicU64; COUNT],
}

impl QueueCounters {
    fn new() -> QueueCounters {
        QueueCounters {
            values: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Adds `n` to `c`.
    #[inline]
    pub fn add(&self, c: Counter, n: u64) {
        if let Some(v) = self.values.get(c as usize) {
            v.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The value of `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values
            .get(c as usize)
            .map_or(0, |v| v.load(Ordering::Relaxed))
    }
}

/// The counters of every queue of one NIC; clones share them.
#[derive(Debug, Clone)]
pub struct Counters {
    queues: Arc<[QueueCounters]>,
}

impl Counters {
    /// Zeroed counters for `queues` queues.
    pub fn new(queues: usize) -> Counters {
        Counters {
            queues: (0..queues.max(1)).map(|_| QueueCounters::new()).collect(),
        }
    }

    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The counters of `queue` (`None` past the last queue).
    pub fn queue(&self, queue: usize) -> Option<&QueueCounters> {
        self.queues.get(queue)
    }

    /// Adds `n` to `c` of `queue`; a queue past the last is ignored.
    #[inline]
    pub fn add(&self, queue: usize, c: Counter, n: u64) {
        if let Some(q) = self.queues.get(queue) {
            q.add(c, n);
        }
    }

    /// The value of `c` of `queue` (0 past the last queue).
    pub fn get(&self, queue: usize, c: Counter) -> u64 {
        self.queues.get(queue).map_or(0, |q| q.get(c))
    }

    /// The sum of `c` over all queues.
    pub fn total(&self, c: Counter) -> u64 {
        self.queues.iter().map(|q| q.get(c)).sum()
    }

    /// A copy of every value now.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            queues: self
                .queues
                .iter()
                .map(|q| {
                    core::array::from_fn(|i| {
                        q.values.get(i).map_or(0, |v| v.load(Ordering::Relaxed))
                    })
                })
                .collect(),
        }
    }
}

/// Counts `frames` in `tally` as sent (`tx`) or received: packets, bytes and
/// super-frames.
pub fn count(tally: &mut Tally, frames: &[crate::Frame], tx: bool) {
    let (p, b, g) = if tx {
        (Counter::TxPackets, Counter::TxBytes, Counter::TxGsoPackets)
    } else {
        (Counter::RxPackets, Counter::RxBytes, Counter::RxGsoPackets)
    };
    // One pass over the records (two cost a second walk of every frame).
    let (bytes, gso) = frames.iter().fold((0usize, 0usize), |(b, g), f| {
        (b + f.len(), g + usize::from(f.meta.gso.is_some()))
    });
    tally.add(p, frames.len() as u64);
    tally.add(b, bytes as u64);
    tally.add(g, gso as u64);
}

/// Counter values accumulated locally (one batch) and added to [`Counters`] at once.
#[derive(Debug, Clone)]
pub struct Tally {
    values: [u64; COUNT],
}

impl Default for Tally {
    fn default() -> Self {
        Tally { values: [0; COUNT] }
    }
}

impl Tally {
    /// Adds `n` to `c`.
    #[inline]
    pub fn add(&mut self, c: Counter, n: u64) {
        if let Some(v) = self.values.get_mut(c as usize) {
            *v += n;
        }
    }

    /// The value accumulated for `c`.
    pub fn get(&self, c: Counter) -> u64 {
        self.values.get(c as usize).copied().unwrap_or(0)
    }

    /// Adds every non-zero value to `queue` of `counters` and zeroes the tally.
    pub fn flush(&mut self, counters: &Counters, queue: usize) {
        let Some(q) = counters.queue(queue) else {
            self.values = [0; COUNT];
            return;
        };
        for (v, a) in self.values.iter_mut().zip(q.values.iter()) {
            if *v != 0 {
                a.fetch_add(*v, Ordering::Relaxed);
                *v = 0;
            }
        }
    }
}

/// Counter values at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    queues: Vec<[u64; COUNT]>,
}

impl Snapshot {
    /// Number of queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// The value of `c` of `queue` (0 past the last queue).
    pub fn get(&self, queue: usize, c: Counter) -> u64 {
        self.queues
            .get(queue)
            .and_then(|q| q.get(c as usize))
            .copied()
            .unwrap_or(0)
    }

    /// The sum of `c` over all queues.
    pub fn total(&self, c: Counter) -> u64 {
        (0..self.queues.len()).map(|q| self.get(q, c)).sum()
    }

    /// The total of the counter called `name` ([`Counter::name`]), if there is one.
    pub fn by_name(&self, name: &str) -> Option<u64> {
        Counter::ALL
            .iter()
            .find(|c| c.name() == name)
            .map(|&c| self.total(c))
    }

    /// Every (queue, counter, value), queue by queue.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Counter, u64)> + '_ {
        self.queues.iter().enumerate().flat_map(|(q, vals)| {
            Counter::ALL
                .iter()
                .zip(vals.iter())
                .map(move |(&c, &v)| (q, c, v))
        })
    }

    /// Every counter's total with its name.
    pub fn totals(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Counter::ALL.iter().map(|&c| (c.name(), self.total(c)))
    }

    /// The per-queue name of `c` for `queue`: the queue number goes after the
    /// `rx`/`tx` prefix (`rx0_packets`, `tx3_dropped_oversize`), or in front as
    /// `q<n>_` for the others (`q0_gro_merged`).
    pub fn queue_name(queue: usize, c: Counter) -> String {
        let name = c.name();
        match name.split_at_checked(2) {
            Some((dir @ ("rx" | "tx"), rest)) if rest.starts_with('_') => {
                format!("{dir}{queue}{rest}")
            }
            _ => format!("q{queue}_{name}"),
        }
    }

    /// The `ethtool -S` listing of non-zero counters: totals, then per queue.
    pub fn ethtool(&self) -> String {
        use core::fmt::Write;
        let mut out = String::from("NIC statistics:\n");
        for (name, v) in self.totals().filter(|&(_, v)| v != 0) {
            let _ = writeln!(out, "     {name}: {v}");
        }
        for (q, c, v) in self.iter().filter(|&(_, _, v)| v != 0) {
            let _ = writeln!(out, "     {}: {v}", Snapshot::queue_name(q, c));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_ethtool_like() {
        let mut names: Vec<_> = Counter::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNT);
        assert!(
            names
                .iter()
                .all(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        );
        assert_eq!(Snapshot::queue_name(0, Counter::RxPackets), "rx0_packets");
        assert_eq!(
            Snapshot::queue_name(3, Counter::TxDroppedOversize),
            "tx3_dropped_oversize"
        );
        assert_eq!(Snapshot::queue_name(1, Counter::GroMerged), "q1_gro_merged");
    }

    #[test]
    fn tally_flushes_into_queues() {
        let c = Counters::new(2);
        let mut t = Tally::default();
        t.add(Counter::RxPackets, 3);
        t.add(Counter::RxBytes, 300);
        t.flush(&c, 1);
        t.add(Counter::RxPackets, 1);
        t.flush(&c, 0);
        t.add(Counter::RxPackets, 100);
        t.flush(&c, 7); // no such queue: dropped, not a panic
        assert_eq!(t.get(Counter::RxPackets), 0);
        let s = c.snapshot();
        assert_eq!(s.get(1, Counter::RxPackets), 3);
        assert_eq!(s.total(Counter::RxPackets), 4);
        assert_eq!(s.by_name("rx_bytes"), Some(300));
        assert_eq!(s.by_name("no_such"), None);
        let text = s.ethtool();
        assert!(text.contains("     rx_packets: 4\n"), "{text}");
        assert!(text.contains("     rx1_bytes: 300\n"), "{text}");
        assert!(!text.contains("tx_packets"));
        assert_eq!(s.iter().count(), 2 * COUNT);
    }
}
