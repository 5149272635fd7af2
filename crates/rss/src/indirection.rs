//! The indirection table: hash -> queue, replaceable at run time.
//!
//! Microsoft's "RSS Configuration": the low bits of the hash index a table of CPU
//! (here: queue) numbers; 128 entries indexed by the low 7 bits is the Microsoft and
//! Intel ixgbe convention, and some NICs have 512 (DPDK's `reta_size` goes from 64
//! to 512). A table here has a power-of-two number of entries from 1 to
//! [`MAX_SIZE`], [`DEFAULT_SIZE`] by default, and spreads 1..=size queues evenly
//! by default (entry `i` is queue `i % queues`, as Linux's
//! `ethtool_rxfh_indir_default`).
//!
//! [`SharedTable`] holds the table in use behind an atomic pointer
//! ([`arc_swap::ArcSwap`]): readers load it without locking, and a new table is
//! swapped in whole while traffic flows (`ethtool -X` without stopping the port).
//! A reader sees either the old or the new table, never a mixture.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::error::ConfigError;

/// Default number of table entries (Microsoft, ixgbe).
pub const DEFAULT_SIZE: usize = 128;
/// Largest table size.
pub const MAX_SIZE: usize = 512;

/// Maps a hash to a queue by its low bits.
///
/// ```
/// use linerate_rss::IndirectionTable;
/// let t = IndirectionTable::new(4).unwrap();
/// assert_eq!(t.len(), 128);
/// assert_eq!(t.queue(0x1234_5607), 3); // 0x07 % 4
/// assert_eq!(t.indices_of(1).len(), 32);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct IndirectionTable {
    /// Entries; only the first `mask + 1` are used (the rest stay 0).
    entries: [u16; MAX_SIZE],
    mask: u32,
    queues: u16,
    /// Indices of each queue's entries: queue `q`'s are
    /// `indices[starts[q]..starts[q + 1]]`.
    indices: Box<[u16]>,
    starts: Box<[u32]>,
}

impl IndirectionTable {
    /// [`DEFAULT_SIZE`] entries spread evenly over `queues` queues.
    pub fn new(queues: u16) -> Result<IndirectionTable, ConfigError> {
        IndirectionTable::with_size(DEFAULT_SIZE, queues)
    }

    /// `size` entries spread evenly over `queues` queues: entry `i` is `i % queues`.
    pub fn with_size(size: usize, queues: u16) -> Result<IndirectionTable, ConfigError> {
        check_size(size)?;
        if queues == 0 {
            return Err(ConfigError::QueueCount {
                queues: 0,
                table_size: size,
            });
        }
        let entries: Vec<u16> = (0..size)
            .map(|i| (i % usize::from(queues)) as u16)
            .collect();
        IndirectionTable::from_entries(&entries, queues)
    }

    /// A table with the given entries, each a queue below `queues`; `queues` is
    /// from 1 to the number of entries, which is a power of two up to
    /// [`MAX_SIZE`]. Queues may be left without entries (steering to a subset).
    pub fn from_entries(entries: &[u16], queues: u16) -> Result<IndirectionTable, ConfigError> {
        let size = entries.len();
        check_size(size)?;
        if queues == 0 || usize::from(queues) > size {
            return Err(ConfigError::QueueCount {
                queues: usize::from(queues),
                table_size: size,
            });
        }
        if let Some(&queue) = entries.iter().find(|&&q| q >= queues) {
            return Err(ConfigError::QueueOutOfRange { queue, queues });
        }
        let mut e = [0u16; MAX_SIZE];
        for (d, s) in e.iter_mut().zip(entries) {
            *d = *s;
        }
        // Group entry indices by queue (a counting sort).
        let mut starts = vec![0u32; usize::from(queues) + 1];
        for &q in entries {
            if let Some(s) = starts.get_mut(usize::from(q) + 1) {
                *s += 1;
            }
        }
        for i in 1..starts.len() {
            let prev = starts.get(i - 1).copied().unwrap_or(0);
            if let Some(s) = starts.get_mut(i) {
                *s += prev;
            }
        }
        let mut fill = starts.clone();
        let mut indices = vec![0u16; size];
        for (i, &q) in entries.iter().enumerate() {
            if let Some(f) = fill.get_mut(usize::from(q)) {
                if let Some(slot) = indices.get_mut(*f as usize) {
                    *slot = i as u16;
                }
                *f += 1;
            }
        }
        Ok(IndirectionTable {
            entries: e,
            mask: (size - 1) as u32,
            queues,
            indices: indices.into_boxed_slice(),
            starts: starts.into_boxed_slice(),
        })
    }

    /// The queue for `hash`: the entry its low bits index.
    #[inline]
    pub fn queue(&self, hash: u32) -> u16 {
        // mask < MAX_SIZE, so the entry always exists.
        self.entries
            .get((hash & self.mask) as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.mask as usize + 1
    }

    /// Always false: a table has at least one entry.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The number of queues the table is for.
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// The entries.
    pub fn entries(&self) -> &[u16] {
        self.entries.get(..self.len()).unwrap_or_default()
    }

    /// The indices of the entries that name `queue` (empty if none do, or if
    /// `queue` is out of range), in increasing order.
    pub fn indices_of(&self, queue: u16) -> &[u16] {
        let q = usize::from(queue);
        match (self.starts.get(q), self.starts.get(q + 1)) {
            (Some(&a), Some(&b)) => self.indices.get(a as usize..b as usize).unwrap_or_default(),
            _ => &[],
        }
    }
}

impl core::fmt::Debug for IndirectionTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IndirectionTable")
            .field("queues", &self.queues)
            .field("entries", &self.entries())
            .finish()
    }
}

fn check_size(size: usize) -> Result<(), ConfigError> {
    if size == 0 || size > MAX_SIZE || !size.is_power_of_two() {
        return Err(ConfigError::TableSize { size });
    }
    Ok(())
}

/// The indirection table in use, swapped atomically at run time.
///
/// The number of queues is fixed when it is made (it is the number of receive
/// queues that exist); later tables may steer to any subset of them.
///
/// ```
/// use linerate_rss::{IndirectionTable, SharedTable};
/// let shared = SharedTable::new(IndirectionTable::new(4).unwrap());
/// assert_eq!(shared.queue(5), 1);
/// // Move everything to queues 0 and 1 while readers keep reading.
/// shared.store(IndirectionTable::new(2).unwrap()).unwrap();
/// assert_eq!(shared.queue(5), 1);
/// assert_eq!(shared.queue(6), 0);
/// assert!(shared.store(IndirectionTable::new(8).unwrap()).is_err());
/// ```
#[derive(Debug)]
pub struct SharedTable {
    current: ArcSwap<IndirectionTable>,
    queues: u16,
}

impl SharedTable {
    /// Holds `table`; the number of queues is fixed to `table.queues()`.
    pub fn new(table: IndirectionTable) -> SharedTable {
        let queues = table.queues();
        SharedTable {
            current: ArcSwap::from_pointee(table),
            queues,
        }
    }

    /// The number of queues.
    pub fn queues(&self) -> u16 {
        self.queues
    }

    /// The table in use now (a snapshot: a later [`SharedTable::store`] does not
    /// change it).
    pub fn load(&self) -> Arc<IndirectionTable> {
        self.current.load_full()
    }

    /// The queue for `hash` under the table in use.
    #[inline]
    pub fn queue(&self, hash: u32) -> u16 {
        self.current.load().queue(hash)
    }

    /// Runs `f` with the table in use, without touching its reference count (use
    /// for a batch of lookups).
    #[inline]
    pub fn with<R>(&self, f: impl FnOnce(&IndirectionTable) -> R) -> R {
        f(&self.current.load())
    }

    /// Replaces the table; traffic keeps flowing, each lookup sees the old or the
    /// new one whole. A table naming more queues than exist is refused.
    pub fn store(&self, table: IndirectionTable) -> Result<(), ConfigError> {
        if table.queues() > self.queues {
            return Err(ConfigError::QueueCount {
                queues: usize::from(table.queues()),
                table_size: table.len(),
            });
        }
        self.current.store(Arc::new(table));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_queues() {
        for size in [1, 2, 64, 128, 256, 512] {
            let t = IndirectionTable::with_size(size, 1).unwrap();
            assert_eq!(t.len(), size);
        }
        for size in [0, 3, 100, 1024] {
            assert_eq!(
                IndirectionTable::with_size(size, 1),
                Err(ConfigError::TableSize { size })
            );
        }
        assert!(IndirectionTable::with_size(128, 128).is_ok());
        assert_eq!(
            IndirectionTable::with_size(128, 129),
            Err(ConfigError::QueueCount {
                queues: 129,
                table_size: 128
            })
        );
        assert!(IndirectionTable::new(0).is_err());
        assert_eq!(
            IndirectionTable::from_entries(&[0, 1, 2, 1], 2),
            Err(ConfigError::QueueOutOfRange {
                queue: 2,
                queues: 2
            })
        );
    }

    #[test]
    fn even_spread_and_lookup() {
        let t = IndirectionTable::with_size(512, 3).unwrap();
        let counts: Vec<usize> = (0..3).map(|q| t.indices_of(q).len()).collect();
        assert_eq!(counts, [171, 171, 170]);
        assert_eq!(t.queue(0xffff_ffff), (511 % 3) as u16);
        assert_eq!(t.queue(512 + 4), 1);
        for q in 0..3 {
            for &i in t.indices_of(q) {
                assert_eq!(t.entries()[usize::from(i)], q);
            }
        }
        assert!(t.indices_of(3).is_empty());
    }

    #[test]
    fn swap_under_readers() {
        let shared = Arc::new(SharedTable::new(IndirectionTable::new(4).unwrap()));
        let reader = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut seen = [0u32; 4];
                for h in 0..200_000u32 {
                    // Whole-table consistency: every entry of one snapshot agrees
                    // with one of the two tables.
                    let t = shared.load();
                    let q = t.queue(h);
                    if t.queues() == 2 {
                        assert_eq!(q, (h % 128 % 2) as u16);
                    } else {
                        assert_eq!(q, (h % 128 % 4) as u16);
                    }
                    seen[usize::from(q)] += 1;
                }
                seen
            })
        };
        for i in 0..100 {
            let q = if i % 2 == 0 { 2 } else { 4 };
            shared.store(IndirectionTable::new(q).unwrap()).unwrap();
        }
        let seen = reader.join().unwrap();
        assert!(seen[0] > 0 && seen[1] > 0);
    }
}
