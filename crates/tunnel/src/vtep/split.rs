//! One underlay shared by tunnel groups of different encapsulations.
//!
//! A [`crate::Tunnel`] decapsulates one encapsulation kind (one `VtepConfig`)
//! per underlay. A VTEP whose VNIs use several kinds (VXLAN on 4789 and on
//! 8472, GENEVE, NVGRE) builds one `Tunnel::many` per kind, each over a
//! [`SplitPort`] of one underlay: a port's receive pulls from the underlay and
//! hands every frame to the group its outer header names (UDP destination port,
//! or IP protocol 47 for NVGRE); frames no group names (ARP, neighbour
//! discovery, anything else) go to every group, the first in place and copies
//! to the others, so each group resolves its next hops and answers for the
//! underlay address (an ARP request is then answered once per group: the same
//! answer). Transmit goes straight to the underlay. One lock guards the
//! underlay; frames for another group wait in its inbox (at most
//! [`crate::INBOX_LEN`] per queue, then dropped and counted).
//!
//! A group added while the VTEP runs (a VNI of a new encapsulation) gets a
//! port of its own from [`SplitHandle::add`]. A split underlay hands up every
//! multicast frame: the groups' tunnels join different multicast groups, and
//! one filter would have to be their union, so [`Nic::set_multicast_filter`]
//! on a port turns the underlay's filter off.

use linerate_nic::{
    Batch, Counter, Counters, Frame, Nic, NicCaps, NicError, PacketBuf, Pool, Readiness, Recorder,
};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

/// What a group receives: UDP to this destination port, or GRE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitKey {
    /// UDP datagrams to this destination port (VXLAN, GENEVE).
    Udp(u16),
    /// IP protocol 47 (NVGRE).
    Gre,
}

struct Shared {
    underlay: Box<dyn Nic>,
    keys: Vec<SplitKey>,
    inbox: Vec<Vec<VecDeque<Frame>>>,
}

/// One group's view of a shared underlay.
pub struct SplitPort {
    shared: Arc<Mutex<Shared>>,
    index: usize,
    caps: NicCaps,
    pool: Pool,
    counters: Counters,
}

impl core::fmt::Debug for SplitPort {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitPort")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

/// One port per key of `keys`, in that order, all over `underlay`.
pub fn split(mut underlay: Box<dyn Nic>, keys: Vec<SplitKey>) -> Vec<SplitPort> {
    // Every group's multicast frames must come up (see the module docs).
    let _ = underlay.set_multicast_filter([0; 6], &[]);
    let queues = underlay.queues();
    let caps = *underlay.caps();
    let pool = underlay.pool().clone();
    let n = keys.len();
    let shared = Arc::new(Mutex::new(Shared {
        underlay,
        keys,
        inbox: (0..n)
            .map(|_| (0..queues).map(|_| VecDeque::new()).collect())
            .collect(),
    }));
    (0..n)
        .map(|index| SplitPort {
            shared: Arc::clone(&shared),
            index,
            caps,
            pool: pool.clone(),
            counters: Counters::new(queues),
        })
        .collect()
}

/// A split of `underlay` with one port, for `key`, and the handle that adds
/// the next ones (a VTEP that had one tunnel and gets another while it
/// runs).
pub fn split_one(underlay: Box<dyn Nic>, key: SplitKey) -> (SplitPort, SplitHandle) {
    let queues = underlay.queues();
    let caps = *underlay.caps();
    let pool = underlay.pool().clone();
    let mut underlay = underlay;
    let _ = underlay.set_multicast_filter([0; 6], &[]);
    let shared = Arc::new(Mutex::new(Shared {
        underlay,
        keys: vec![key],
        inbox: vec![(0..queues).map(|_| VecDeque::new()).collect()],
    }));
    let port = SplitPort {
        shared: Arc::clone(&shared),
        index: 0,
        caps,
        pool: pool.clone(),
        counters: Counters::new(queues),
    };
    (port, SplitHandle { shared, caps, pool })
}

/// The group of a frame: `Some(key)` for UDP or GRE over IPv4/IPv6.
fn key_of(b: &[u8]) -> Option<SplitKey> {
    let et = u16::from_be_bytes([*b.get(12)?, *b.get(13)?]);
    let (proto, l4) = match et {
        0x0800 => (*b.get(23)?, 14 + usize::from(b.get(14)? & 0xf) * 4),
        0x86dd => (*b.get(20)?, 54),
        _ => return None,
    };
    match proto {
        17 => Some(SplitKey::Udp(u16::from_be_bytes([
            *b.get(l4 + 2)?,
            *b.get(l4 + 3)?,
        ]))),
        47 => Some(SplitKey::Gre),
        _ => None,
    }
}

/// Adds ports to a split underlay ([`SplitPort::handle`]).
#[derive(Clone)]
pub struct SplitHandle {
    shared: Arc<Mutex<Shared>>,
    caps: NicCaps,
    pool: Pool,
}

impl core::fmt::Debug for SplitHandle {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SplitHandle").finish_non_exhaustive()
    }
}

impl SplitHandle {
    /// A port for one more group, receiving what `key` names, over the same
    /// underlay; `None` if a port has that key already.
    pub fn add(&self, key: SplitKey) -> Option<SplitPort> {
        let mut g = match self.shared.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if g.keys.contains(&key) {
            return None;
        }
        let queues = g.underlay.queues();
        g.keys.push(key);
        g.inbox.push((0..queues).map(|_| VecDeque::new()).collect());
        let index = g.keys.len() - 1;
        drop(g);
        Some(SplitPort {
            shared: Arc::clone(&self.shared),
            index,
            caps: self.caps,
            pool: self.pool.clone(),
            counters: Counters::new(queues),
        })
    }
}

impl SplitPort {
    /// A handle to add more ports over the same underlay.
    pub fn handle(&self) -> SplitHandle {
        SplitHandle {
            shared: Arc::clone(&self.shared),
            caps: self.caps,
            pool: self.pool.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        match self.shared.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Nic for SplitPort {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        let index = self.index;
        let shared = Arc::clone(&self.shared);
        let mut g = match shared.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let s = &mut *g;
        let mut got = 0;
        if let Some(q) = s.inbox.get_mut(index).and_then(|i| i.get_mut(queue)) {
            while got < max {
                let Some(f) = q.pop_front() else { break };
                batch.push(f);
                got += 1;
            }
        }
        if got >= max {
            return Ok(got);
        }
        let start = batch.len();
        let r = s.underlay.receive(queue, batch, max - got);
        let mut w = start;
        for i in start..batch.len() {
            let Some(f) = batch.get_mut(i) else { break };
            let key = key_of(f.bytes());
            let mine = key.is_none_or(|k| s.keys.get(index) == Some(&k));
            let owner = key.and_then(|k| s.keys.iter().position(|x| *x == k));
            if key.is_none() {
                // Control frames: a copy for every other group.
                for (j, inbox) in s.inbox.iter_mut().enumerate() {
                    if j == index {
                        continue;
                    }
                    if let Some(q) = inbox.get_mut(queue)
                        && q.len() < crate::INBOX_LEN
                    {
                        q.push_back(Frame::plain(s.underlay.pool().alloc_from(f.bytes())));
                    }
                }
            }
            if mine {
                got += 1;
                if w != i {
                    batch.swap(w, i);
                }
                w += 1;
            } else if let Some(o) = owner {
                let f = core::mem::replace(f, Frame::plain(PacketBuf::from_vec(Vec::new())));
                match s.inbox.get_mut(o).and_then(|i| i.get_mut(queue)) {
                    Some(q) if q.len() < crate::INBOX_LEN => q.push_back(f),
                    _ => self.counters.add(queue, Counter::RxDroppedRingFull, 1),
                }
            }
            // No group for this port or protocol: dropped (not ours).
        }
        batch.truncate(w);
        r?;
        Ok(got)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        self.lock().underlay.transmit(queue, batch)
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        self.lock().underlay.readiness(queue)
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.lock().underlay.set_recorder(recorder);
    }

    /// Turns the underlay's filter off: the groups sharing it want
    /// different multicast frames (module docs). Returns false: this port
    /// hands up every frame.
    fn set_multicast_filter(
        &mut self,
        unicast: [u8; 6],
        groups: &[[u8; 6]],
    ) -> Result<bool, NicError> {
        let _ = (unicast, groups);
        self.lock().underlay.set_multicast_filter([0; 6], &[])?;
        Ok(false)
    }
}
