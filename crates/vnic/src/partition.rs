//! The partition: one backend, its vNICs, and the receive side of the data path.

use crate::config::{
    Exceed, MAX_QUEUES, MAX_VID, MAX_VNICS, PartitionConfig, RateError, RateLimit, SwitchMode,
    VlanMode, VnicConfig, VnicError,
};
use crate::filter::{Action, FilterError, Filters, FlowKey, Verdict};
use crate::rate::Limiter;
use crate::steer::{self, Table, UNTAGGED};
use crate::vlan;
use crate::vnic::Vnic;
use linerate_nic::memory::Clock;
use linerate_nic::{
    Batch, Counter, Counters, Frame, Nic, NicError, Notify, Pool, PoolConfig, Readiness, Tally,
};
use linerate_rss::{HashConfig, IndirectionTable, RssKey, Steering};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Frames waiting for one backend transmit queue before vNICs sending on it are
/// held back (their frames stay in their batches).
pub(crate) const WIRE_BACKLOG: usize = 1024;

/// One NIC partitioned into virtual NICs.
///
/// [`Partition::add`] makes a [`Vnic`], a [`Nic`] of its own; dropping the vNIC
/// removes it. Both happen while the others run. All vNICs share one lock over
/// the partition's state, taken once per `receive` or `transmit` call (per batch,
/// not per frame).
///
/// Received frames reach the vNICs' queues when someone *pumps* the backend: a
/// vNIC's `receive` pumps when its queue is empty, so a loop that polls its vNICs
/// needs nothing more; a driver that sleeps on a vNIC's readiness needs a pump
/// running, [`Partition::pump`] in its own loop (or [`Partition::run_pump`] on a
/// thread), since the backend's readiness is not the vNIC's.
pub struct Partition<N: Nic> {
    pub(crate) shared: Arc<Shared<N>>,
}

pub(crate) struct Shared<N> {
    pub(crate) state: Mutex<State<N>>,
    pub(crate) clock: Clock,
    /// Whether any vNIC has a rate limit (else the clock is not read).
    pub(crate) timed: AtomicBool,
    /// The partition's own counters (one queue): frames for no vNIC.
    pub(crate) counters: Counters,
}

impl<N> Shared<N> {
    /// The time for the rate limits, read only when some vNIC has one.
    pub(crate) fn now_ns(&self) -> u64 {
        if self.timed.load(Ordering::Relaxed) {
            self.clock.now_ns()
        } else {
            0
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State<N>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(crate) struct State<N> {
    pub(crate) nic: N,
    pub(crate) mode: SwitchMode,
    burst: usize,
    pub(crate) slots: Vec<Option<Slot>>,
    pub(crate) table: Table,
    pub(crate) default: Option<u16>,
    scratch: Batch,
    /// Frames waiting for each backend transmit queue.
    pub(crate) wire_out: Vec<Batch>,
    pub(crate) targets: Vec<u16>,
    /// Buffers for the copies of replicated frames that fit an MTU (ARP,
    /// neighbour discovery): a 42-byte broadcast copied into a 64 KiB buffer of
    /// a super-frame pool, 255 times, costs more than the traffic it serves.
    small: Pool,
}

/// One vNIC's state inside the partition.
pub(crate) struct Slot {
    pub(crate) cfg: VnicConfig,
    pub(crate) steering: Option<Arc<Steering>>,
    pub(crate) rings: Vec<VecDeque<Frame>>,
    pub(crate) notifies: Vec<Arc<Notify>>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) rx_filters: Filters,
    pub(crate) tx_filters: Filters,
    pub(crate) rx_rate: Option<Limiter>,
    pub(crate) tx_rate: Option<Limiter>,
}

impl<N: Nic> Partition<N> {
    /// Partitions `nic`. Wrap a backend in the shim first to give every vNIC every
    /// offload.
    pub fn new(nic: N, cfg: PartitionConfig) -> Partition<N> {
        let queues = nic.queues();
        Partition {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    nic,
                    mode: cfg.mode,
                    burst: cfg.burst.max(1),
                    slots: Vec::new(),
                    table: Table::new(),
                    default: None,
                    scratch: Batch::with_capacity(cfg.burst.max(1)),
                    wire_out: (0..queues).map(|_| Batch::new()).collect(),
                    targets: Vec::new(),
                    small: Pool::new(PoolConfig::mtu()),
                }),
                clock: cfg.clock,
                timed: AtomicBool::new(false),
                counters: Counters::new(1),
            }),
        }
    }

    /// Adds a vNIC.
    ///
    /// # Errors
    ///
    /// [`VnicError`] for a configuration refused: an address not unicast or
    /// already taken on one of its VLANs, a VLAN ID out of range, a bad queue
    /// count, rate or filter rule, or a full partition.
    pub fn add(&self, cfg: VnicConfig) -> Result<Vnic<N>, VnicError> {
        let lans = validate(&cfg)?;
        let steering = steering(&cfg)?;
        for (i, r) in cfg.rx_filters.iter().enumerate() {
            if let Action::Steer(q) = r.action
                && q >= cfg.queues
            {
                return Err(VnicError::Filter(FilterError::NoSuchQueue {
                    rule: i,
                    queue: q,
                    queues: cfg.queues,
                }));
            }
        }
        let rx_filters = Filters::new(cfg.rx_filters.clone())?;
        let tx_filters = Filters::new(cfg.tx_filters.clone())?;
        if cfg.tx_rate.is_some() || cfg.rx_rate.is_some() {
            self.shared.timed.store(true, Ordering::Relaxed);
        }
        let now = self.shared.clock.now_ns();
        let queues = usize::from(cfg.queues);
        let counters = Arc::new(Counters::new(queues));
        let notifies: Vec<Arc<Notify>> = (0..queues).map(|_| Arc::new(Notify::new())).collect();
        let mut st = self.shared.lock();
        let slot = match st.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if st.slots.len() < MAX_VNICS => {
                st.slots.push(None);
                st.slots.len() - 1
            }
            None => return Err(VnicError::Full),
        };
        let id = u16::try_from(slot).map_err(|_| VnicError::Full)?;
        let macs: Vec<[u8; 6]> = std::iter::once(cfg.mac)
            .chain(cfg.extra_macs.iter().copied())
            .collect();
        for &lan in &lans {
            for mac in &macs {
                if st.table.owner(mac, lan).is_some() {
                    return Err(VnicError::MacInUse {
                        mac: *mac,
                        vlan: (lan != UNTAGGED).then_some(lan),
                    });
                }
            }
        }
        for (vni, mac) in &cfg.tunnel_macs {
            if !st.table.claim_inner(*vni, mac, id) {
                st.table.remove(id);
                return Err(VnicError::TunnelMacInUse {
                    vni: *vni,
                    mac: *mac,
                });
            }
        }
        for &lan in &lans {
            for mac in &macs {
                st.table.claim(mac, lan, id);
            }
            for group in &cfg.multicast {
                st.table.subscribe(group, lan, id);
            }
            st.table.join(lan, id, cfg.all_multicast, cfg.promiscuous);
        }
        let limiter = |r: &Option<RateLimit>| r.as_ref().map(|r| Limiter::new(r, now));
        let (nic_caps, pool) = (*st.nic.caps(), st.nic.pool().clone());
        let s = Slot {
            steering: steering.clone(),
            rings: (0..queues).map(|_| VecDeque::new()).collect(),
            notifies: notifies.clone(),
            counters: Arc::clone(&counters),
            rx_filters,
            tx_filters,
            rx_rate: limiter(&cfg.rx_rate),
            tx_rate: limiter(&cfg.tx_rate),
            cfg,
        };
        let mac = s.cfg.mac;
        if let Some(entry) = st.slots.get_mut(slot) {
            *entry = Some(s);
        }
        drop(st);
        Ok(Vnic::new(
            Arc::clone(&self.shared),
            id,
            mac,
            nic_caps,
            counters,
            pool,
            notifies,
            steering,
        ))
    }

    /// Sends frames for no vNIC to `vnic` (`None`: drop them, counted in
    /// `rx_dropped_no_vnic`).
    pub fn set_default(&self, vnic: Option<&Vnic<N>>) {
        self.shared.lock().default = vnic.map(Vnic::slot);
    }

    /// How many vNICs there are.
    pub fn len(&self) -> usize {
        self.shared.lock().slots.iter().flatten().count()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves what the backend has received to the vNICs' queues (one burst per
    /// backend queue) and sends what waits for the backend; returns the frames
    /// received.
    ///
    /// # Errors
    ///
    /// The backend's.
    pub fn pump(&self) -> Result<usize, NicError> {
        let now = self.shared.now_ns();
        let mut st = self.shared.lock();
        st.pump(now, &self.shared.counters)
    }

    /// What to wait on for the backend to have frames (one entry per queue).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub fn readiness(&self) -> Result<Vec<Readiness>, NicError> {
        let st = self.shared.lock();
        (0..st.nic.queues()).map(|q| st.nic.readiness(q)).collect()
    }

    /// Pumps until `stop` is set, waiting on the backend between pumps (at most
    /// `idle` at a time, so that frames waiting to be sent are retried).
    ///
    /// # Errors
    ///
    /// The backend's.
    pub fn run_pump(&self, stop: &AtomicBool, idle: Duration) -> Result<(), NicError> {
        let ready = self.readiness()?;
        while !stop.load(Ordering::Relaxed) {
            if self.pump()? == 0 {
                linerate_nic::wait_any(&ready, idle)?;
            }
        }
        Ok(())
    }

    /// The partition's own counters: `rx_dropped_no_vnic`, `rx_dropped_malformed`.
    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Runs `f` on the backend (its counters, its recorder), holding the lock.
    pub fn with_backend<R>(&self, f: impl FnOnce(&mut N) -> R) -> R {
        f(&mut self.shared.lock().nic)
    }
}

impl<N: Nic> State<N> {
    /// See [`Partition::pump`].
    pub(crate) fn pump(&mut self, now: u64, counters: &Counters) -> Result<usize, NicError> {
        self.flush_all()?;
        let mut got = 0;
        let mut batch = std::mem::take(&mut self.scratch);
        let mut result = Ok(());
        for q in 0..self.nic.queues() {
            match self.nic.receive(q, &mut batch, self.burst) {
                Ok(n) => got += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            let mut tally = Tally::default();
            for frame in batch.drain(..) {
                self.take_from_wire(frame, now, &mut tally);
            }
            tally.flush(counters, 0);
        }
        self.scratch = batch;
        result.map(|()| got)
    }

    /// Hands a frame from the wire to the vNICs that take it.
    fn take_from_wire(&mut self, frame: Frame, now: u64, tally: &mut Tally) {
        let Some((dst, _, lan, tagged)) = steer::addresses(frame.bytes()) else {
            tally.add(Counter::RxDroppedMalformed, 1);
            return;
        };
        if self.table.steers_inner()
            && let Some(slot) = self.inner_owner(frame.bytes())
        {
            self.deliver(slot, frame, lan, tagged, now);
            return;
        }
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        let owned = self.table.receivers(&dst, lan, None, &mut targets);
        if !owned
            && let Some(d) = self.default
            && !targets.contains(&d)
        {
            targets.push(d);
        }
        if targets.is_empty() {
            tally.add(Counter::RxDroppedNoVnic, 1);
        }
        self.deliver_all(&targets, frame, lan, tagged, now);
        self.targets = targets;
    }

    /// The vNIC a tunnelled frame is steered to by its VNI and inner destination MAC.
    fn inner_owner(&self, frame: &[u8]) -> Option<u16> {
        let l = linerate_wire::layout::parse(frame).ok()?;
        let vni = l.tunnel?.vni;
        let at = usize::from(l.inner?.l2);
        let mac: [u8; 6] = frame.get(at..at + 6)?.try_into().ok()?;
        self.table.inner_owner(vni, &mac)
    }

    /// Delivers `frame` (on `lan`, `tagged` or not) to each of `targets`: copies
    /// to all but the last, which gets the frame itself.
    pub(crate) fn deliver_all(
        &mut self,
        targets: &[u16],
        frame: Frame,
        lan: u16,
        tagged: bool,
        now: u64,
    ) {
        let Some((&last, rest)) = targets.split_last() else {
            return;
        };
        for &t in rest {
            let copy = self.copy(&frame);
            self.deliver(t, copy, lan, tagged, now);
        }
        self.deliver(last, frame, lan, tagged, now);
    }

    /// A copy of `frame` for one more receiver: in a small buffer when it fits.
    pub(crate) fn copy(&self, frame: &Frame) -> Frame {
        let fits = frame.len() + 4 <= self.small.config().buf_len;
        let buf = if fits {
            self.small.alloc_from(frame.bytes())
        } else {
            frame.buf.clone()
        };
        Frame::new(buf, frame.meta)
    }

    /// One vNIC's receive path: its tag handling, filters, rate, RSS and ring.
    fn deliver(&mut self, slot: u16, mut frame: Frame, lan: u16, tagged: bool, now: u64) {
        let Some(Some(s)) = self.slots.get_mut(usize::from(slot)) else {
            return;
        };
        let wants_tag = matches!(s.cfg.vlan, VlanMode::Trunk { .. }) && lan != UNTAGGED;
        let fixed = match (tagged, wants_tag) {
            (true, false) => vlan::strip(&mut frame),
            (false, true) => vlan::insert(&mut frame, lan),
            _ => Ok(()),
        };
        let counters = &s.counters;
        if fixed.is_err() {
            counters.add(0, Counter::RxDroppedMalformed, 1);
            return;
        }
        let mut queue = None;
        if !s.rx_filters.is_empty() {
            let mut key = FlowKey::extract(frame.bytes());
            if lan != UNTAGGED && !wants_tag {
                // Access mode: the tag is gone from the bytes, not from the frame.
                key.set_vlan(lan);
            }
            match s.rx_filters.classify(&key) {
                Verdict::Drop => {
                    counters.add(0, Counter::RxDroppedFilter, 1);
                    return;
                }
                Verdict::Steer(q) if q < s.cfg.queues => queue = Some(usize::from(q)),
                _ => {}
            }
        }
        if let Some(r) = &mut s.rx_rate {
            if !r.conforms(now) {
                counters.add(0, Counter::RxDroppedRate, 1);
                return;
            }
            r.charge(crate::rate::cost(&frame));
        }
        let q = match (queue, &s.steering) {
            (Some(q), _) => q,
            (None, Some(st)) => match st.hash_frame(frame.bytes(), None) {
                Some(h) => {
                    frame.meta.rss = Some(h);
                    usize::from(st.queue_of(Some(h.value)))
                }
                None => usize::from(st.default_queue()),
            },
            (None, None) => 0,
        };
        let (Some(ring), Some(notify)) = (s.rings.get_mut(q), s.notifies.get(q)) else {
            return;
        };
        if ring.len() >= s.cfg.ring_len {
            counters.add(q, Counter::RxDroppedRingFull, 1);
            return;
        }
        let was_empty = ring.is_empty();
        ring.push_back(frame);
        if was_empty {
            notify.notify();
        }
    }

    /// Sends what waits for every backend queue.
    pub(crate) fn flush_all(&mut self) -> Result<(), NicError> {
        let mut first = Ok(());
        for q in 0..self.wire_out.len() {
            if let Err(e) = self.flush(q)
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// Sends what waits for backend queue `q`, as much as it takes now. A frame
    /// the backend refuses is dropped by it (and counted there); the first such
    /// error is returned after the rest were offered.
    pub(crate) fn flush(&mut self, q: usize) -> Result<(), NicError> {
        let Some(out) = self.wire_out.get_mut(q) else {
            return Ok(());
        };
        let mut first = Ok(());
        while !out.is_empty() {
            match self.nic.transmit(q, out) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
        }
        first
    }
}

/// The LANs a configuration puts a vNIC on, after checking it.
fn validate(cfg: &VnicConfig) -> Result<Vec<u16>, VnicError> {
    for mac in std::iter::once(&cfg.mac).chain(&cfg.extra_macs) {
        if steer::is_group(mac) || mac == &[0; 6] {
            return Err(VnicError::NotUnicast(*mac));
        }
    }
    if let Some(m) = cfg.multicast.iter().find(|m| !steer::is_group(m)) {
        return Err(VnicError::NotMulticast(*m));
    }
    if cfg.queues == 0 || cfg.queues > MAX_QUEUES {
        return Err(VnicError::BadQueues(cfg.queues));
    }
    if cfg.ring_len == 0 {
        return Err(VnicError::BadRing);
    }
    for r in [&cfg.tx_rate, &cfg.rx_rate].into_iter().flatten() {
        if r.bits_per_sec > 0 && r.burst_bits == 0 {
            return Err(VnicError::BadRate(RateError::BitRateWithoutBurst));
        }
        if r.packets_per_sec > 0 && r.burst_packets == 0 {
            return Err(VnicError::BadRate(RateError::PacketRateWithoutBurst));
        }
        if r.bits_per_sec == 0 && r.packets_per_sec == 0 {
            return Err(VnicError::BadRate(RateError::NoRate));
        }
    }
    let check = |v: u16| {
        if (1..=MAX_VID).contains(&v) {
            Ok(v)
        } else {
            Err(VnicError::BadVlan(v))
        }
    };
    let mut lans = match &cfg.vlan {
        VlanMode::Untagged => vec![UNTAGGED],
        VlanMode::Access(v) => vec![check(*v)?],
        VlanMode::Trunk { allowed, native } => {
            let mut l = allowed
                .iter()
                .map(|&v| check(v))
                .collect::<Result<Vec<_>, _>>()?;
            if *native {
                l.push(UNTAGGED);
            }
            l
        }
    };
    lans.sort_unstable();
    lans.dedup();
    Ok(lans)
}

/// The vNIC's RSS steering, when it has more than one queue.
fn steering(cfg: &VnicConfig) -> Result<Option<Arc<Steering>>, VnicError> {
    if let Some(s) = &cfg.rss {
        if s.queues() != cfg.queues {
            return Err(VnicError::BadQueues(cfg.queues));
        }
        return Ok(Some(Arc::clone(s)));
    }
    if cfg.queues <= 1 {
        return Ok(None);
    }
    let table = IndirectionTable::new(cfg.queues).map_err(VnicError::Rss)?;
    Ok(Some(Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        table,
        HashConfig::default(),
    ))))
}

/// Whether a limiter drops (police) or holds back (shape) on transmit.
pub(crate) fn shapes(l: &Limiter) -> bool {
    l.exceed == Exceed::Shape
}
