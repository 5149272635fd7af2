//! The engine's own accounting of the memory it holds: connection slots,
//! buffer storage, and the tables and queues around them.
//!
//! Buffers hold storage only while they hold data (see
//! `tcp::ring::Ring` and `tcp::sendbuf::SendBuf`),
//! so an idle established connection costs its slot and its table entries.

use super::{Engine, Slot};
use std::mem::size_of;

/// Bytes an engine holds, by kind (from the capacities of its containers; hash
/// tables are estimated as hashbrown lays them out: a power-of-two number of
/// buckets at most 7/8 full, one control byte per bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// Live connections (every state, TIME-WAIT included).
    pub connections: usize,
    /// Of those, the ones in TIME-WAIT whose handles were given up: they are
    /// kept as small records (counted in `tables`), without a slot.
    pub time_wait: usize,
    /// The slot table: every slot allocated, live or free, each holding a
    /// connection's state inline.
    pub slots: usize,
    /// Send and receive buffer storage of all connections (handed-over
    /// [`Bytes`](bytes::Bytes) counted by their length).
    pub buffers: usize,
    /// The 4-tuple table, the timer heap, the transmit and free-slot queues,
    /// the listeners' accept queues, the TIME-WAIT records.
    pub tables: usize,
}

impl MemoryUsage {
    /// Everything counted.
    pub fn total(&self) -> usize {
        self.slots + self.buffers + self.tables
    }

    /// [`MemoryUsage::total`] per live connection (0 with none).
    pub fn per_connection(&self) -> usize {
        self.total().checked_div(self.connections).unwrap_or(0)
    }
}

/// Bytes of a hashbrown table with room for `capacity` entries of `entry` bytes.
fn table_bytes(capacity: usize, entry: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity.saturating_mul(8) / 7).next_power_of_two();
    buckets.saturating_mul(entry + 1)
}

impl Engine {
    /// What the engine holds now. Walks every slot: O(connections), meant for
    /// monitoring and tests rather than the packet path.
    pub fn memory_usage(&self) -> MemoryUsage {
        let (mut connections, mut buffers) = (0, 0);
        for conn in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
            connections += 1;
            buffers += conn.buffer_storage();
        }
        let tuples: usize = (self.by_tuple.parts().iter())
            .map(|&(cap, entry)| table_bytes(cap, entry))
            .sum();
        let tables = tuples
            + self.timers.bytes()
            + self.time_wait.bytes()
            + self
                .listeners
                .iter()
                .flatten()
                .map(|l| l.ready.capacity() * size_of::<(usize, u32)>())
                .sum::<usize>()
            + (self.ready.capacity() + self.free.capacity()) * size_of::<usize>()
            + self.events.bytes();
        let time_wait = self.time_wait.len();
        MemoryUsage {
            connections: connections + time_wait,
            time_wait,
            slots: self.slots.capacity() * size_of::<Slot>(),
            buffers,
            tables,
        }
    }

    /// Bytes of one slot (a connection's state and bookkeeping, held inline in
    /// the slot table).
    pub fn slot_size() -> usize {
        size_of::<Slot>()
    }

    /// Entries in the 4-tuple table and buckets it has room for: the table
    /// grows with the connections, so lookups stay O(1) at any count.
    pub fn table_load(&self) -> (usize, usize) {
        (self.by_tuple.len(), self.by_tuple.capacity())
    }
}

/// Connections whose handles were given up ([`Engine::tcp_close`]) and that
/// still have data or a FIN the peer has not acknowledged: what a runtime
/// waits for before it stops ([`Engine::closing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Closing {
    /// Such connections.
    pub connections: usize,
    /// Bytes they hold that the peer has not acknowledged.
    pub bytes: usize,
}

impl Engine {
    /// The connections the engine is still closing on its own (their handles
    /// given up, data or FIN unacknowledged). Walks every slot: O(connections),
    /// for a runtime that is stopping.
    pub fn closing(&self) -> Closing {
        let mut c = Closing::default();
        for conn in self.slots.iter().filter_map(|s| s.conn.as_ref()) {
            if conn.app_closed && conn.close_reason().is_none() && !conn.fin_acked() {
                c.connections += 1;
                c.bytes += conn.tx.len();
            }
        }
        c
    }

    /// Whether everything sent on `h`, its FIN included, was acknowledged
    /// (FIN-WAIT-2, TIME-WAIT, or closed in order). False while data or the
    /// FIN waits, or before the application shut the sending side.
    pub fn tcp_fin_acked(&self, h: crate::SocketHandle) -> Result<bool, super::InvalidHandle> {
        let c = self.handle_conn(h)?;
        Ok(c.fin_acked())
    }
}
