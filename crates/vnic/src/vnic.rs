//! A virtual NIC: the handle a stack runs on, and the transmit side of the data path.

use crate::config::{SwitchMode, VlanMode, VnicConfig};
use crate::filter::{FlowKey, Verdict};
use crate::partition::{Shared, Slot, State, WIRE_BACKLOG, shapes};
use crate::steer::{self, UNTAGGED};
use crate::vlan;
use linerate_nic::pcap::Recorder;
use linerate_nic::{
    Batch, Counter, Counters, Frame, Nic, NicCaps, NicError, Notify, Pool, Readiness, RssCaps,
    Tally,
};
use linerate_rss::Steering;
use linerate_wire::ethernet::{self, ethertype};
use std::net::IpAddr;
use std::sync::Arc;

/// One virtual NIC of a [`crate::Partition`]: a [`Nic`] of its own, so an engine, a
/// tunnel or the runtime runs on it unchanged. Dropping it removes it from the
/// partition (its queued frames are dropped with it).
pub struct Vnic<N: Nic> {
    shared: Arc<Shared<N>>,
    slot: u16,
    mac: [u8; 6],
    caps: NicCaps,
    counters: Arc<Counters>,
    pool: Pool,
    notifies: Vec<Arc<Notify>>,
    steering: Option<Arc<Steering>>,
    decisions: Vec<Decision>,
}

/// What pass one decided for a frame to transmit.
#[derive(Debug, Clone, Copy)]
enum Decision {
    Drop(Counter),
    Forward { lan: u16, tagged: bool },
}

impl<N: Nic> Vnic<N> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shared: Arc<Shared<N>>,
        slot: u16,
        mac: [u8; 6],
        backend: NicCaps,
        counters: Arc<Counters>,
        pool: Pool,
        notifies: Vec<Arc<Notify>>,
        steering: Option<Arc<Steering>>,
    ) -> Vnic<N> {
        let queues = u16::try_from(notifies.len()).unwrap_or(1);
        let caps = NicCaps {
            queues,
            rss: (queues > 1).then_some(RssCaps {
                key_len: 40,
                table_len: 128,
            }),
            ..backend
        };
        Vnic {
            shared,
            slot,
            mac,
            caps,
            counters,
            pool,
            notifies,
            steering,
            decisions: Vec::new(),
        }
    }

    /// Its place in the partition (0..256), stable while it exists.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// Its unicast MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Its RSS steering, when it has several queues (for a port allocator that
    /// picks source ports landing on a wanted queue).
    pub fn steering(&self) -> Option<&Arc<Steering>> {
        self.steering.as_ref()
    }

    /// Its configuration as given.
    pub fn config(&self) -> Option<VnicConfig> {
        let st = self.shared.lock();
        slot(&st, self.slot).map(|s| s.cfg.clone())
    }

    /// Hits per rule of its receive and transmit filters.
    pub fn filter_hits(&self) -> (Vec<u64>, Vec<u64>) {
        let st = self.shared.lock();
        slot(&st, self.slot).map_or_else(Default::default, |s| {
            (s.rx_filters.hits().to_vec(), s.tx_filters.hits().to_vec())
        })
    }

    /// Pass one of transmit: decides the fate of the frames at the front of
    /// `batch`, stopping at one the rate limit or the backlog holds back, or at
    /// one the NIC refuses (returned with how many were decided before it).
    fn decide(
        &mut self,
        st: &mut State<N>,
        bq: usize,
        batch: &Batch,
        now: u64,
    ) -> (usize, Option<(NicError, Counter)>, bool) {
        self.decisions.clear();
        let backlog = st.wire_out.get(bq).map_or(0, |b| b.len());
        let Some(Some(s)) = st.slots.get_mut(usize::from(self.slot)) else {
            return (0, None, false);
        };
        let mut throttled = false;
        for frame in batch.iter() {
            if let Err(e) = linerate_nic::check_tx(&self.caps, frame) {
                return (self.decisions.len(), Some(e), throttled);
            }
            let d = check(s, frame);
            if let Decision::Forward { .. } = d {
                if backlog + self.decisions.len() >= WIRE_BACKLOG {
                    break;
                }
                if let Some(r) = &mut s.tx_rate {
                    if !r.conforms(now) {
                        if shapes(r) {
                            throttled = true;
                            break;
                        }
                        self.decisions.push(Decision::Drop(Counter::TxDroppedRate));
                        continue;
                    }
                    r.charge(crate::rate::cost(frame));
                }
            }
            self.decisions.push(d);
        }
        (self.decisions.len(), None, throttled)
    }
}

fn slot<N>(st: &State<N>, id: u16) -> Option<&Slot> {
    st.slots.get(usize::from(id)).and_then(Option::as_ref)
}

/// The checks a frame to transmit passes: source MAC and IP, VLAN, filters.
fn check(s: &mut Slot, frame: &Frame) -> Decision {
    let bytes = frame.bytes();
    let Some((_, src, lan, tagged)) = steer::addresses(bytes) else {
        return Decision::Drop(Counter::TxDroppedInvalid);
    };
    if s.cfg.spoof_check && src != s.cfg.mac && !s.cfg.extra_macs.contains(&src) {
        return Decision::Drop(Counter::TxDroppedSpoof);
    }
    if !s.cfg.ips.is_empty() && !ip_allowed(bytes, &s.cfg.ips) {
        return Decision::Drop(Counter::TxDroppedSpoof);
    }
    let lan = match (&s.cfg.vlan, tagged) {
        (VlanMode::Untagged, false) => UNTAGGED,
        (VlanMode::Access(v), false) => *v,
        (VlanMode::Trunk { allowed, .. }, true) if allowed.contains(&lan) => lan,
        (VlanMode::Trunk { native: true, .. }, false) => UNTAGGED,
        _ => return Decision::Drop(Counter::TxDroppedVlan),
    };
    if !s.tx_filters.is_empty() {
        let mut key = FlowKey::extract(bytes);
        if lan != UNTAGGED && !tagged {
            key.set_vlan(lan);
        }
        if s.tx_filters.classify(&key) == Verdict::Drop {
            return Decision::Drop(Counter::TxDroppedFilter);
        }
    }
    Decision::Forward { lan, tagged }
}

/// Whether the frame's source IP (IPv4, IPv6, ARP sender) is one of `ips`;
/// frames of other protocols pass, and so does `::` (duplicate address detection).
fn ip_allowed(b: &[u8], ips: &[IpAddr]) -> bool {
    let Ok(v) = ethernet::walk_vlans(b) else {
        return false;
    };
    let l3 = v.l3_offset;
    let get = |r: core::ops::Range<usize>| b.get(l3 + r.start..l3 + r.end);
    let src: Option<IpAddr> = match v.ethertype {
        ethertype::IPV4 => get(12..16)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map(IpAddr::from),
        ethertype::ARP => get(14..18)
            .and_then(|s| <[u8; 4]>::try_from(s).ok())
            .map(IpAddr::from),
        ethertype::IPV6 => match get(8..24).and_then(|s| <[u8; 16]>::try_from(s).ok()) {
            Some(a) if a == [0; 16] => return true,
            a => a.map(IpAddr::from),
        },
        _ => return true,
    };
    src.is_some_and(|ip| ips.contains(&ip))
}

impl<N: Nic> State<N> {
    /// Where a frame a vNIC sent goes: other vNICs (switched inside), the wire, or
    /// nowhere, by the partition's mode.
    fn route(&mut self, from: u16, frame: Frame, lan: u16, tagged: bool, bq: usize, now: u64) {
        let Some((dst, _, _, _)) = steer::addresses(frame.bytes()) else {
            return;
        };
        let group = steer::is_group(&dst);
        let owner = if group {
            None
        } else {
            self.table.owner(&dst, lan)
        };
        let to_other = owner.is_some_and(|o| o != from);
        match self.mode {
            SwitchMode::Veb => {
                let mut targets = std::mem::take(&mut self.targets);
                targets.clear();
                self.table.receivers(&dst, lan, Some(from), &mut targets);
                if to_other {
                    self.deliver_all(&targets, frame, lan, tagged, now);
                } else {
                    for &t in &targets {
                        let copy = self.copy(&frame);
                        self.deliver_all(&[t], copy, lan, tagged, now);
                    }
                    self.send_to_wire(from, frame, lan, tagged, bq);
                }
                self.targets = targets;
            }
            SwitchMode::Private if to_other => {
                self.count(from, Counter::TxDroppedPrivate);
            }
            SwitchMode::Private | SwitchMode::Vepa => {
                self.send_to_wire(from, frame, lan, tagged, bq)
            }
        }
    }

    fn send_to_wire(&mut self, from: u16, mut frame: Frame, lan: u16, tagged: bool, bq: usize) {
        if lan != UNTAGGED && !tagged && vlan::insert(&mut frame, lan).is_err() {
            self.count(from, Counter::TxDroppedInvalid);
            return;
        }
        if let Some(out) = self.wire_out.get_mut(bq) {
            out.push(frame);
        }
    }

    fn count(&self, slot: u16, c: Counter) {
        if let Some(s) = slot_ref(self, slot) {
            s.counters.add(0, c, 1);
        }
    }
}

fn slot_ref<N>(st: &State<N>, id: u16) -> Option<&Slot> {
    slot(st, id)
}

impl<N: Nic> Nic for Vnic<N> {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        check_queue(queue, self.notifies.len())?;
        let now = self.shared.now_ns();
        let mut st = self.shared.lock();
        let empty = slot(&st, self.slot)
            .and_then(|s| s.rings.get(queue))
            .is_none_or(|r| r.is_empty());
        let pumped = if empty {
            st.pump(now, &self.shared.counters)
        } else {
            Ok(0)
        };
        let Some(Some(s)) = st.slots.get_mut(usize::from(self.slot)) else {
            return Ok(0);
        };
        let Some(ring) = s.rings.get_mut(queue) else {
            return Ok(0);
        };
        let n = ring.len().min(max);
        if n > 0 {
            let before = batch.len();
            batch.extend(ring.drain(..n));
            let mut tally = Tally::default();
            linerate_nic::count(&mut tally, batch.get(before..).unwrap_or_default(), false);
            tally.flush(&self.counters, queue);
        }
        pumped.map(|_| n)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        check_queue(queue, self.notifies.len())?;
        let now = self.shared.now_ns();
        let shared = Arc::clone(&self.shared);
        let mut st = shared.lock();
        let bq = queue % st.nic.queues().max(1);
        let (n, refused, throttled) = self.decide(&mut st, bq, batch, now);
        let mut tally = Tally::default();
        if throttled {
            tally.add(Counter::TxThrottled, 1);
        }
        let mut decisions = std::mem::take(&mut self.decisions);
        for (frame, d) in batch.drain(..n).zip(decisions.drain(..)) {
            match d {
                Decision::Drop(c) => tally.add(c, 1),
                Decision::Forward { lan, tagged } => {
                    linerate_nic::count(&mut tally, core::slice::from_ref(&frame), true);
                    st.route(self.slot, frame, lan, tagged, bq, now);
                }
            }
        }
        self.decisions = decisions;
        let flushed = st.flush(bq);
        drop(st);
        let result = match refused {
            Some((e, c)) => {
                tally.add(c, 1);
                if !batch.is_empty() {
                    batch.remove(0);
                }
                Err(e)
            }
            None => flushed.map(|()| n),
        };
        tally.flush(&self.counters, queue);
        result
    }

    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        check_queue(queue, self.notifies.len())?;
        self.notifies
            .get(queue)
            .map(|n| Readiness::Notify(Arc::clone(n)))
            .ok_or(NicError::NoQueue {
                queue,
                queues: self.notifies.len(),
            })
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }

    fn pool(&self) -> &Pool {
        &self.pool
    }

    fn set_recorder(&mut self, _recorder: Option<Arc<dyn Recorder>>) {
        // A vNIC has no wire of its own; record on the backend
        // (`Partition::with_backend`).
    }
}

impl<N: Nic> Drop for Vnic<N> {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        if let Some(s) = st.slots.get_mut(usize::from(self.slot)) {
            *s = None;
        }
        st.table.remove(self.slot);
        if st.default == Some(self.slot) {
            st.default = None;
        }
    }
}

fn check_queue(queue: usize, queues: usize) -> Result<(), NicError> {
    if queue < queues {
        Ok(())
    } else {
        Err(NicError::NoQueue { queue, queues })
    }
}
