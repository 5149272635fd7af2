//! RSS-aware source port choice: a free local port whose hash puts the connection
//! on a chosen queue, in O(1) expected time.
//!
//! A shared-nothing stack opens a connection on one core and wants its replies to
//! arrive on that core's queue. The replies' hash covers the local port (their
//! destination port), so the stack picks the port: mTCP's `FetchFreePort` and
//! DPDK's `rte_thash_adjust_tuple` (with `rte_thash_get_complement`) do the same.
//!
//! The Toeplitz hash is linear over XOR, so for the replies' tuple
//! `(remote, local, remote_port, port)`:
//! `h(remote, local, remote_port, port) = h(remote, local, remote_port, 0) ^ h(0, 0, 0, port)`.
//! [`PortAllocator::new`] computes `h(0, 0, 0, port)` for every port of the range
//! once, and keeps the free ports in 512 buckets by the low 9 bits of that value
//! (the most bits an indirection table uses). To place a flow on queue `q`, it
//! hashes the flow once with port 0, and for an entry `i` of the table that names
//! `q`, the ports that land on `i` are exactly those in the buckets whose low bits
//! equal `(base ^ i) & (size - 1)`: it takes the first free port from such a
//! bucket. With ports spread evenly over buckets the first bucket tried almost
//! always has one; the worst case visits each bucket once (at most 512).
//!
//! The port is chosen so that the *replies* land on `q`; since the transmit queue is
//! the reply direction's receive queue ([`crate::Steering::tx_queue`]), the
//! connection is then on `q` both ways, with any key.

use std::collections::VecDeque;
use std::sync::Arc;

use linerate_offload::RssHashType;

use crate::error::{ConfigError, PortError};
use crate::flow::FlowTuple;
use crate::indirection::MAX_SIZE;
use crate::input::HashInput;
use crate::steering::Steering;

/// The IANA dynamic (ephemeral) port range, 49152..=65535 (RFC 6335).
pub const EPHEMERAL: (u16, u16) = (49152, 65535);

/// Free local ports of one address family, bucketed by their hash contribution.
///
/// A port is free or in use for the allocator as a whole (as a local port pool per
/// local address is). IPv4 and IPv6 need one allocator each: the port sits at a
/// different offset of the hash input.
///
/// ```
/// use linerate_rss::{FlowTuple, HashConfig, IndirectionTable, PortAllocator, RssKey, Steering};
/// use std::net::Ipv4Addr;
/// use std::sync::Arc;
///
/// let s = Arc::new(Steering::new(&RssKey::MICROSOFT, IndirectionTable::new(4).unwrap(), HashConfig::default()));
/// let mut ports = PortAllocator::new(s.clone(), false, 49152, 65535).unwrap();
/// // Open a connection from core 3 to 192.0.2.7:443.
/// let mut flow = FlowTuple::tcp4(Ipv4Addr::new(10, 0, 0, 1), 0, Ipv4Addr::new(192, 0, 2, 7), 443);
/// flow.src_port = ports.allocate(&flow, 3).unwrap();
/// assert_eq!(s.tx_queue(&flow), 3);
/// assert_eq!(s.rx_queue(&flow.reversed()), 3);
/// ports.release(flow.src_port).unwrap();
/// ```
#[derive(Debug)]
pub struct PortAllocator {
    steering: Arc<Steering>,
    v6: bool,
    /// `h(0, 0, 0, port)` for each port of the range (port at the destination-port
    /// offset of the replies' input).
    hport: Box<[u32]>,
    pool: Pool,
}

/// The free ports.
#[derive(Debug)]
struct Pool {
    first: u16,
    last: u16,
    /// Free ports by `hport & (MAX_SIZE - 1)`, oldest release first.
    buckets: Box<[VecDeque<u16>]>,
    /// In-use bitmap over the range.
    in_use: Box<[u64]>,
    free: usize,
    /// Rotates the table entry (or bucket) tried first, so successive ports for
    /// one queue spread over that queue's entries.
    cursor: usize,
}

impl PortAllocator {
    /// An allocator for the ports `first..=last` of IPv4 (`v6` false) or IPv6
    /// flows steered by `steering`. Port 0 is not a port:
    /// [`ConfigError::PortRange`] for a range that is empty or holds it.
    pub fn new(
        steering: Arc<Steering>,
        v6: bool,
        first: u16,
        last: u16,
    ) -> Result<PortAllocator, ConfigError> {
        if first == 0 || first > last {
            return Err(ConfigError::PortRange { first, last });
        }
        let hasher = steering.hasher();
        let n = usize::from(last - first) + 1;
        let mut hport = Vec::with_capacity(n);
        let mut buckets = vec![VecDeque::new(); MAX_SIZE].into_boxed_slice();
        for port in first..=last {
            let input = if v6 {
                HashInput::tcp_ipv6([0; 16], [0; 16], 0, port)
            } else {
                HashInput::tcp_ipv4([0; 4], [0; 4], 0, port)
            };
            let h = hasher.hash(&input);
            hport.push(h);
            if let Some(b) = buckets.get_mut(bucket(h)) {
                b.push_back(port);
            }
        }
        Ok(PortAllocator {
            steering,
            v6,
            hport: hport.into_boxed_slice(),
            pool: Pool {
                first,
                last,
                buckets,
                in_use: vec![0u64; n.div_ceil(64)].into_boxed_slice(),
                free: n,
                cursor: 0,
            },
        })
    }

    /// The range, first and last port.
    pub fn range(&self) -> (u16, u16) {
        (self.pool.first, self.pool.last)
    }

    /// How many ports are free.
    pub fn free(&self) -> usize {
        self.pool.free
    }

    /// True if `port` is in the range and allocated or reserved.
    pub fn is_in_use(&self, port: u16) -> bool {
        self.pool.slot(port).is_some_and(|i| self.pool.bit(i))
    }

    /// A free port `p` such that `flow` with source port `p` is transmitted, and its
    /// replies received, on `queue`; the port is then in use until released.
    ///
    /// `flow` is the connection as sent (source: this host); its source port is
    /// ignored. Errors: the family differs from the allocator's; `queue` is out of
    /// range; [`PortError::Exhausted`] when no free port of the range lands there
    /// (also when the flow's enabled hash type has no ports and its addresses
    /// hash elsewhere).
    pub fn allocate(&mut self, flow: &FlowTuple, queue: u16) -> Result<u16, PortError> {
        if flow.is_v6() != self.v6 {
            return Err(PortError::FamilyMismatch);
        }
        let steering = &self.steering;
        let pool = &mut self.pool;
        let queues = steering.queues();
        if queue >= queues {
            return Err(PortError::QueueOutOfRange { queue, queues });
        }
        let mut reply = flow.reversed();
        reply.dst_port = 0;
        let Some(input) = reply.input(steering.config().types) else {
            // Not hashed at all: every port goes to the default queue.
            return if queue == steering.default_queue() {
                pool.take_any(queue)
            } else {
                Err(PortError::Exhausted { queue })
            };
        };
        let base = steering.hasher().hash(&input);
        steering.table().with(|table| {
            if !has_ports(input.kind()) {
                // The port is not hashed: the addresses decide.
                return if table.queue(base) == queue {
                    pool.take_any(queue)
                } else {
                    Err(PortError::Exhausted { queue })
                };
            }
            let size = table.len();
            let mask = size - 1;
            let entries = table.indices_of(queue);
            let k = entries.len();
            for j in 0..k {
                let Some(&i) = entries.get((pool.cursor + j) % k) else {
                    continue;
                };
                let low = (base as usize ^ usize::from(i)) & mask;
                // The buckets whose low bits (as many as the table uses) are `low`.
                for b in (low..MAX_SIZE).step_by(size) {
                    if let Some(port) = pool.pop(b) {
                        pool.cursor = (pool.cursor + j + 1) % k;
                        return Ok(port);
                    }
                }
            }
            Err(PortError::Exhausted { queue })
        })
    }

    /// Returns `port` to the free ports (it becomes the last to be reused).
    pub fn release(&mut self, port: u16) -> Result<(), PortError> {
        let i = self.pool.slot(port).ok_or(PortError::NotInRange { port })?;
        if !self.pool.bit(i) {
            return Err(PortError::WrongState {
                port,
                in_use: false,
            });
        }
        self.pool.mark(port, false);
        let h = self.hport.get(i).copied().unwrap_or(0);
        if let Some(b) = self.pool.buckets.get_mut(bucket(h)) {
            b.push_back(port);
        }
        Ok(())
    }

    /// Takes a specific port (an explicit `bind`), so it is not handed out.
    pub fn reserve(&mut self, port: u16) -> Result<(), PortError> {
        let i = self.pool.slot(port).ok_or(PortError::NotInRange { port })?;
        if self.pool.bit(i) {
            return Err(PortError::WrongState { port, in_use: true });
        }
        let h = self.hport.get(i).copied().unwrap_or(0);
        if let Some(b) = self.pool.buckets.get_mut(bucket(h)) {
            b.retain(|&p| p != port);
        }
        self.pool.mark(port, true);
        Ok(())
    }
}

impl Pool {
    /// The oldest free port of bucket `b`, now in use.
    fn pop(&mut self, b: usize) -> Option<u16> {
        let port = self.buckets.get_mut(b)?.pop_front()?;
        self.mark(port, true);
        Some(port)
    }

    /// Any free port (when the port does not change the queue).
    fn take_any(&mut self, queue: u16) -> Result<u16, PortError> {
        let n = self.buckets.len();
        for j in 0..n {
            let b = (self.cursor + j) % n;
            if let Some(port) = self.pop(b) {
                self.cursor = (b + 1) % n;
                return Ok(port);
            }
        }
        Err(PortError::Exhausted { queue })
    }

    fn slot(&self, port: u16) -> Option<usize> {
        (self.first..=self.last)
            .contains(&port)
            .then(|| usize::from(port - self.first))
    }

    fn bit(&self, i: usize) -> bool {
        self.in_use
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn mark(&mut self, port: u16, used: bool) {
        let Some(i) = self.slot(port) else { return };
        if let Some(w) = self.in_use.get_mut(i / 64) {
            if used {
                *w |= 1 << (i % 64);
                self.free -= 1;
            } else {
                *w &= !(1 << (i % 64));
                self.free += 1;
            }
        }
    }
}

fn bucket(h: u32) -> usize {
    h as usize & (MAX_SIZE - 1)
}

fn has_ports(kind: RssHashType) -> bool {
    !matches!(kind, RssHashType::Ipv4 | RssHashType::Ipv6)
}
