//! A bridge domain: one VNI's local ports and its remote VTEPs, switched by the
//! [`Fdb`], as Linux's bridge with a vxlan device in it.
//!
//! Local ports are any [`Nic`] (a TAP toward a namespace or VM, a memory port, a
//! vNIC, an engine's NIC). The tunnel side is an [`Overlay`]: it hands over
//! decapsulated frames with the underlay address of the VTEP that sent them, and
//! takes frames to encapsulate toward a given remote VTEP. [`BridgeDomain::poll`]
//! moves one round of frames:
//!
//! 1. receive a batch from every local port and from the overlay;
//! 2. per frame: learn the source MAC where it came from; with suppression on,
//!    learn IP-to-MAC bindings from ARP/ND and answer requests for known
//!    addresses back to the asking port ([`super::Suppress`]); then forward by the
//!    [`Fdb`]'s decision: to one port or VTEP, or flooded by head-end replication
//!    (one copy per local port but the ingress, and per remote VTEP of the flood
//!    list when the frame came from a local port);
//! 3. transmit every port's batch. A port that takes fewer frames than it was
//!    given keeps the rest for the next round, up to [`DomainConfig::tx_backlog`]
//!    frames; past that they are dropped and counted (`tx_dropped_full`).
//!
//! With [`DomainConfig::mtu`] set (the tunnel endpoint sets it to the overlay
//! MTU), an IP packet from a local port too big for the tunnel is not sent
//! into it: the sender gets ICMP "fragmentation needed" or ICMPv6 "packet too
//! big" back, as from a router on the path (rate-limited, counted; see
//! `pmtu`).
//!
//! Frames cross the domain without a copy, in the buffers they arrived in; only
//! flooding copies, once per extra destination. Counters are per port and per
//! domain, named like `ethtool -S` ([`PortCounters::named`]).

use super::fdb::{Dest, DropReason, Fdb, FdbRecord, Forward, Learned, Mac, MacFmt};
use super::pmtu::{self, Fit, RateLimit};
use super::suppress::{Answer, Suppress, SuppressConfig};
use linerate_nic::{Batch, Frame, Nic, NicError};
use std::net::IpAddr;
use std::time::Duration;

/// The tunnel side of a bridge domain.
pub trait Overlay {
    /// Appends up to `max` decapsulated frames to `batch`, each with the underlay
    /// address of the VTEP that sent it; returns how many.
    fn receive(&mut self, batch: &mut Vec<(IpAddr, Frame)>, max: usize) -> Result<usize, NicError>;

    /// Encapsulates frames from the front of `batch` toward `remote` and sends
    /// them, removing the ones taken; returns how many were taken.
    fn transmit(&mut self, remote: IpAddr, batch: &mut Batch) -> Result<usize, NicError>;
}

/// Settings of a [`BridgeDomain`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DomainConfig {
    /// The VNI.
    pub vni: u32,
    /// Frames received from each port per round.
    pub batch: usize,
    /// Frames a port may hold waiting for room in its transmit queue.
    pub tx_backlog: usize,
    /// Answer ARP/ND requests for known addresses (`Some`), or flood them.
    pub suppress: Option<SuppressConfig>,
    /// How often aged entries are freed.
    pub age_interval: Duration,
    /// The largest IP packet the tunnel carries (the overlay MTU): a larger
    /// one from a local port toward a remote VTEP is dropped and its sender
    /// told (ICMP). `None`: no check (the tunnel refuses what does not fit).
    pub mtu: Option<u16>,
    /// Learn the inner source MAC of frames from remote VTEPs (Linux's vxlan
    /// `learning`, on by default). Off (`nolearning`), remote MACs are known
    /// only from static entries: frames from the tunnel are still delivered,
    /// and frames toward an unknown MAC flood. Local ports always learn, as
    /// the bridge above a Linux vxlan device does.
    pub learning: bool,
    /// Log each unicast destination MAC a frame from a local port is sent
    /// toward without an FDB entry (Linux's vxlan `l2miss`), once per
    /// [`L2MISS_INTERVAL`] at most, through `tracing`. Counted either way
    /// (`l2miss`).
    pub l2miss: bool,
}

/// How often one unknown destination MAC is logged at most, with
/// [`DomainConfig::l2miss`] on.
pub const L2MISS_INTERVAL: Duration = Duration::from_secs(10);

/// Lines the `l2miss` log writes per [`L2MISS_INTERVAL`] and domain at most,
/// however many MACs miss (the rest are counted, and summed up in the next
/// line).
pub const L2MISS_LINES: u32 = 32;

impl DomainConfig {
    /// VNI `vni`, batches of 64, a backlog of 1024 frames, no suppression, ageing
    /// swept every second.
    pub fn new(vni: u32) -> DomainConfig {
        DomainConfig {
            vni,
            batch: 64,
            tx_backlog: 1024,
            suppress: None,
            age_interval: Duration::from_secs(1),
            mtu: None,
            learning: true,
            l2miss: false,
        }
    }
}

/// Counters of one port (a local port, or the overlay as a whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// Frames received from the port.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames the port took for sending.
    pub tx_packets: u64,
    /// Bytes queued for the port (those dropped with `tx_dropped_*` included).
    pub tx_bytes: u64,
    /// Frames from the port too short for an Ethernet header.
    pub rx_dropped_malformed: u64,
    /// Frames from the port whose destination is behind the same port.
    pub rx_dropped_same_port: u64,
    /// Frames from a remote VTEP to another remote VTEP (overlay only).
    pub rx_dropped_split_horizon: u64,
    /// Frames for the port dropped because its backlog was full.
    pub tx_dropped_full: u64,
    /// Frames for the port dropped because the port refused them.
    pub tx_dropped_error: u64,
    /// Frames from the port flooded.
    pub flooded: u64,
    /// ARP/ND requests from the port answered by the domain.
    pub suppressed: u64,
    /// IP packets from the port too big for the tunnel ([`DomainConfig::mtu`]).
    pub rx_dropped_oversize: u64,
    /// Of those, the ones answered with ICMP "fragmentation needed" or
    /// ICMPv6 "packet too big".
    pub icmp_too_big: u64,
    /// Frames from the port toward a unicast MAC the FDB does not know
    /// (flooded; Linux's `l2miss`).
    pub l2miss: u64,
}

impl PortCounters {
    /// The counters with their names.
    pub fn named(&self) -> [(&'static str, u64); 14] {
        [
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_dropped_malformed", self.rx_dropped_malformed),
            ("rx_dropped_same_port", self.rx_dropped_same_port),
            ("rx_dropped_split_horizon", self.rx_dropped_split_horizon),
            ("tx_dropped_full", self.tx_dropped_full),
            ("tx_dropped_error", self.tx_dropped_error),
            ("flooded", self.flooded),
            ("arp_nd_suppressed", self.suppressed),
            ("rx_dropped_oversize", self.rx_dropped_oversize),
            ("icmp_too_big", self.icmp_too_big),
            ("l2miss", self.l2miss),
        ]
    }
}

struct Port {
    nic: Box<dyn Nic>,
    tx: Batch,
    counters: PortCounters,
}

/// One VNI's bridge: local ports, an overlay, the FDB and the suppression table.
pub struct BridgeDomain<O: Overlay> {
    cfg: DomainConfig,
    ports: Vec<Port>,
    overlay: O,
    overlay_rx: Vec<(IpAddr, Frame)>,
    /// Frames waiting for the overlay, per remote VTEP.
    overlay_tx: Vec<(IpAddr, Batch)>,
    overlay_counters: PortCounters,
    fdb: Fdb,
    suppress: Option<Suppress>,
    rx: Batch,
    answer: Vec<u8>,
    next_age: Duration,
    /// New and moved MACs since [`BridgeDomain::take_learned`], when shared.
    learned: Option<Vec<(Mac, Dest)>>,
    /// ICMP answers to packets too big for the tunnel, and their bytes.
    too_big: RateLimit,
    too_big_buf: Vec<u8>,
    /// Where the frame being switched goes (kept to reuse its allocation).
    targets: Vec<Dest>,
    /// The `l2miss` log's rate limit.
    misses: MissLog,
}

/// Slots of the `l2miss` log's memory of MACs logged recently.
const MISS_SLOTS: usize = 64;

/// The `l2miss` log's rate limit: a MAC is logged once per
/// [`L2MISS_INTERVAL`] (remembered in a small direct-mapped table, so two
/// MACs of one slot may each be logged again sooner), and at most
/// [`L2MISS_LINES`] lines per interval in all. Fixed size: a flood of random
/// destinations costs neither memory nor log volume.
struct MissLog {
    slots: [(Mac, Duration); MISS_SLOTS],
    interval_start: Duration,
    lines: u32,
    /// Misses not logged for the line budget, since the last line.
    unlogged: u64,
}

impl MissLog {
    fn new() -> MissLog {
        MissLog {
            slots: [([0; 6], Duration::ZERO); MISS_SLOTS],
            interval_start: Duration::ZERO,
            lines: 0,
            unlogged: 0,
        }
    }

    /// Whether a miss of `mac` at `now` is logged; if so, the number of
    /// misses left unlogged before it for the line budget.
    fn allow(&mut self, now: Duration, mac: Mac) -> Option<u64> {
        let h = mac
            .iter()
            .fold(0usize, |h, b| h.wrapping_mul(31) ^ usize::from(*b));
        let slot = self.slots.get_mut(h % MISS_SLOTS)?;
        // The all-zero MAC never misses (not unicast), so it marks a free slot.
        if slot.0 == mac && slot.0 != [0; 6] && now.saturating_sub(slot.1) < L2MISS_INTERVAL {
            return None;
        }
        if now.saturating_sub(self.interval_start) >= L2MISS_INTERVAL {
            self.interval_start = now;
            self.lines = 0;
        }
        if self.lines >= L2MISS_LINES {
            self.unlogged += 1;
            return None;
        }
        self.lines += 1;
        *slot = (mac, now);
        Some(core::mem::take(&mut self.unlogged))
    }
}

/// Learning events kept for [`BridgeDomain::take_learned`] at most (past it
/// the oldest are still in this domain's FDB, and the others learn them from
/// traffic).
const LEARNED_MAX: usize = 4096;

impl<O: Overlay> BridgeDomain<O> {
    /// A domain for `cfg.vni` over `overlay`, with `fdb` (its VNI is added to it).
    pub fn new(cfg: DomainConfig, overlay: O, mut fdb: Fdb) -> BridgeDomain<O> {
        fdb.add_vni(cfg.vni);
        BridgeDomain {
            cfg,
            ports: Vec::new(),
            overlay,
            overlay_rx: Vec::with_capacity(cfg.batch),
            overlay_tx: Vec::new(),
            overlay_counters: PortCounters::default(),
            fdb,
            suppress: cfg.suppress.map(Suppress::new),
            rx: Batch::with_capacity(cfg.batch),
            answer: vec![0; 128],
            next_age: Duration::ZERO,
            learned: None,
            too_big: RateLimit::new(),
            too_big_buf: Vec::new(),
            targets: Vec::new(),
            misses: MissLog::new(),
        }
    }

    /// Turns learning from remote VTEPs and the `l2miss` log on or off
    /// ([`DomainConfig::learning`], [`DomainConfig::l2miss`]); entries learned
    /// already stay until they age out or are flushed.
    pub fn set_learning(&mut self, learning: bool, l2miss: bool) {
        self.cfg.learning = learning;
        self.cfg.l2miss = l2miss;
    }

    /// The domain's settings.
    pub fn config(&self) -> &DomainConfig {
        &self.cfg
    }

    /// Keeps the MACs this domain learns anew or sees move, for
    /// [`BridgeDomain::take_learned`]: replicas of one domain (one per queue,
    /// each on its own thread, as the tunnel endpoint runs) tell each other
    /// what they learn, so a MAC that moves is not left stale in a replica that
    /// did not see it move. Refreshes are not shared: each replica ages its own
    /// entries, and one that ages a MAC out floods its frames until it learns it
    /// again.
    pub fn share_learning(&mut self, on: bool) {
        self.learned = on.then(Vec::new);
    }

    /// Moves the learning events since the last call into `out` (nothing unless
    /// [`BridgeDomain::share_learning`] is on).
    pub fn take_learned(&mut self, out: &mut Vec<(Mac, Dest)>) {
        if let Some(l) = self.learned.as_mut() {
            out.append(l);
        }
    }

    /// Learns what another replica learned (entries as [`Fdb::learn`] takes
    /// them; static entries are kept).
    pub fn apply_learned(&mut self, now: Duration, events: &[(Mac, Dest)]) {
        let ports = self.ports.len();
        for &(mac, dest) in events {
            // A port removed meanwhile (the other replica's numbering was
            // older): not learned, its frames flood until seen again.
            if matches!(dest, Dest::Local(p) if usize::from(p) >= ports) {
                continue;
            }
            self.fdb.learn(now, self.cfg.vni, mac, dest);
        }
    }

    /// Joins `nic` to the domain as the next local port; returns its number.
    pub fn add_port(&mut self, nic: Box<dyn Nic>) -> u16 {
        self.ports.push(Port {
            nic,
            tx: Batch::with_capacity(self.cfg.batch),
            counters: PortCounters::default(),
        });
        u16::try_from(self.ports.len() - 1).unwrap_or(u16::MAX)
    }

    /// Takes local port `n` out of the domain and returns its NIC; the ports
    /// after it move down by one, and the FDB follows (the port's entries
    /// go, the later ports' are renumbered). Frames waiting for it are
    /// dropped with it.
    pub fn remove_port(&mut self, n: u16) -> Option<Box<dyn Nic>> {
        let i = usize::from(n);
        if i >= self.ports.len() {
            return None;
        }
        let port = self.ports.remove(i);
        self.fdb.remove_port(self.cfg.vni, n);
        if let Some(l) = self.learned.as_mut() {
            l.retain(|(_, d)| !matches!(d, Dest::Local(p) if *p >= n));
        }
        Some(port.nic)
    }

    /// The number of local ports.
    pub fn ports(&self) -> usize {
        self.ports.len()
    }

    /// The FDB (static entries and flood lists are set here).
    pub fn fdb_mut(&mut self) -> &mut Fdb {
        &mut self.fdb
    }

    /// The FDB.
    pub fn fdb(&self) -> &Fdb {
        &self.fdb
    }

    /// The suppression table, when suppression is on.
    pub fn suppress(&self) -> Option<&Suppress> {
        self.suppress.as_ref()
    }

    /// The suppression table, mutable, when suppression is on.
    pub fn suppress_mut(&mut self) -> Option<&mut Suppress> {
        self.suppress.as_mut()
    }

    /// The overlay.
    pub fn overlay(&self) -> &O {
        &self.overlay
    }

    /// The overlay, mutable.
    pub fn overlay_mut(&mut self) -> &mut O {
        &mut self.overlay
    }

    /// Local port `n`'s NIC.
    pub fn port(&self, n: u16) -> Option<&dyn Nic> {
        self.ports.get(usize::from(n)).map(|p| &*p.nic)
    }

    /// Local port `n`'s NIC, mutable.
    pub fn port_mut(&mut self, n: u16) -> Option<&mut (dyn Nic + 'static)> {
        self.ports.get_mut(usize::from(n)).map(|p| &mut *p.nic)
    }

    /// Local port `n`'s counters.
    pub fn port_counters(&self, n: u16) -> Option<PortCounters> {
        self.ports.get(usize::from(n)).map(|p| p.counters)
    }

    /// The overlay's counters (frames to and from every remote VTEP).
    pub fn overlay_counters(&self) -> PortCounters {
        self.overlay_counters
    }

    /// The FDB entries of this domain, as `bridge fdb show` lists them.
    pub fn dump(&self, now: Duration) -> Vec<FdbRecord> {
        let vni = self.cfg.vni;
        let mut d = self.fdb.dump(now);
        d.retain(|r| r.vni == vni);
        d
    }

    /// One round: receive from every port and the overlay, switch, transmit.
    /// Returns the number of frames received.
    pub fn poll(&mut self, now: Duration) -> usize {
        if now >= self.next_age {
            self.fdb.age(now);
            if let Some(s) = self.suppress.as_mut() {
                s.age(now);
            }
            self.next_age = now.saturating_add(self.cfg.age_interval);
        }
        let mut got = 0;
        for i in 0..self.ports.len() {
            let mut rx = std::mem::take(&mut self.rx);
            let n = match self.ports.get_mut(i) {
                Some(p) => p.nic.receive(0, &mut rx, self.cfg.batch).unwrap_or(0),
                None => 0,
            };
            got += n;
            let port = u16::try_from(i).unwrap_or(u16::MAX);
            for frame in rx.drain(..) {
                self.ingress(now, Dest::Local(port), frame);
            }
            self.rx = rx;
        }
        let mut orx = std::mem::take(&mut self.overlay_rx);
        got += self.overlay.receive(&mut orx, self.cfg.batch).unwrap_or(0);
        for (remote, frame) in orx.drain(..) {
            self.ingress(now, Dest::Remote(remote), frame);
        }
        self.overlay_rx = orx;
        self.flush();
        got
    }

    fn counters(&mut self, at: Dest) -> &mut PortCounters {
        match at {
            Dest::Local(p) => match self.ports.get_mut(usize::from(p)) {
                Some(port) => &mut port.counters,
                None => &mut self.overlay_counters,
            },
            Dest::Remote(_) => &mut self.overlay_counters,
        }
    }

    fn ingress(&mut self, now: Duration, from: Dest, frame: Frame) {
        let vni = self.cfg.vni;
        let len = frame.len() as u64;
        let c = self.counters(from);
        c.rx_packets += 1;
        c.rx_bytes += len;
        let bytes = frame.bytes();
        let (Some(dst), Some(src)) = (mac_at(bytes, 0), mac_at(bytes, 6)) else {
            self.counters(from).rx_dropped_malformed += 1;
            return;
        };
        if self.cfg.learning || matches!(from, Dest::Local(_)) {
            let l = self.fdb.learn(now, vni, src, from);
            if let (Learned::New | Learned::Moved { .. }, Some(out)) = (l, self.learned.as_mut())
                && out.len() < LEARNED_MAX
            {
                out.push((src, from));
            }
        }
        if let Some(s) = self.suppress.as_mut() {
            s.snoop(now, vni, bytes);
            if let Dest::Local(port) = from
                && let Answer::Answered(n) = s.answer(now, vni, bytes, &mut self.answer)
            {
                let reply = self.answer.get(..n).unwrap_or_default();
                let mut buf = frame.buf;
                buf.clear();
                buf.extend_from_slice(reply);
                self.counters(from).suppressed += 1;
                self.enqueue(Dest::Local(port), Frame::plain(buf));
                return;
            }
        }
        // The decision as owned targets (it borrows the FDB): a flood's copies,
        // one per local port but the ingress and one per remote VTEP.
        let mut targets = std::mem::take(&mut self.targets);
        targets.clear();
        let mut flooded = false;
        match self.fdb.forward(now, vni, dst, from) {
            Forward::Unicast(to) => targets.push(to),
            Forward::Drop(DropReason::SamePort | DropReason::UnknownVni) => {
                self.targets = targets;
                self.counters(from).rx_dropped_same_port += 1;
                return;
            }
            Forward::Drop(DropReason::SplitHorizon) => {
                self.targets = targets;
                self.counters(from).rx_dropped_split_horizon += 1;
                return;
            }
            Forward::Flood { except, remotes } => {
                let ports = u16::try_from(self.ports.len()).unwrap_or(u16::MAX);
                targets.extend((0..ports).filter(|p| Some(*p) != except).map(Dest::Local));
                targets.extend(remotes.iter().map(|r| Dest::Remote(*r)));
                flooded = true;
            }
        }
        if flooded {
            self.counters(from).flooded += 1;
            if let Dest::Local(port) = from
                && dst[0] & 1 == 0
            {
                self.l2miss(now, port, dst, src);
            }
        }
        if let (Dest::Local(port), Some(mtu)) = (from, self.cfg.mtu)
            && frame.meta.gso.is_none()
            && targets.iter().any(|t| matches!(t, Dest::Remote(_)))
        {
            let fit = pmtu::check(frame.bytes(), mtu, &mut self.too_big_buf);
            if fit != Fit::Fits {
                // Not into the tunnel; local ports still get their copies.
                targets.retain(|t| matches!(t, Dest::Local(_)));
                self.counters(from).rx_dropped_oversize += 1;
                if let Fit::Answer(n) = fit
                    && self.too_big.allow(now)
                {
                    let reply = self.too_big_buf.get(..n).unwrap_or_default();
                    let buf = linerate_nic::PacketBuf::from_slice(reply);
                    self.counters(from).icmp_too_big += 1;
                    self.enqueue(Dest::Local(port), Frame::plain(buf));
                }
            }
        }
        if let Some((last, rest)) = targets.split_last() {
            for to in rest {
                self.enqueue(*to, frame.clone());
            }
            self.enqueue(*last, frame);
        }
        self.targets = targets;
    }

    /// A frame from local `port` toward `dst`, a unicast MAC the FDB does
    /// not know: counted, and logged when the domain asks for it.
    fn l2miss(&mut self, now: Duration, port: u16, dst: Mac, src: Mac) {
        self.counters(Dest::Local(port)).l2miss += 1;
        if !self.cfg.l2miss {
            return;
        }
        if let Some(unlogged) = self.misses.allow(now, dst) {
            tracing::info!(
                vni = self.cfg.vni,
                port,
                dst = %MacFmt(dst),
                src = %MacFmt(src),
                unlogged,
                "l2miss: no forwarding entry for the destination, flooded"
            );
        }
    }

    fn enqueue(&mut self, to: Dest, frame: Frame) {
        let backlog = self.cfg.tx_backlog;
        let queue = match to {
            Dest::Local(p) => match self.ports.get_mut(usize::from(p)) {
                Some(port) => &mut port.tx,
                None => return,
            },
            Dest::Remote(ip) => {
                let at = match self.overlay_tx.iter().position(|(r, _)| *r == ip) {
                    Some(at) => at,
                    None => {
                        self.overlay_tx
                            .push((ip, Batch::with_capacity(self.cfg.batch)));
                        self.overlay_tx.len() - 1
                    }
                };
                match self.overlay_tx.get_mut(at) {
                    Some((_, b)) => b,
                    None => return,
                }
            }
        };
        if queue.len() >= backlog {
            self.counters(to).tx_dropped_full += 1;
            return;
        }
        let len = frame.len() as u64;
        queue.push(frame);
        self.counters(to).tx_bytes += len;
    }

    fn flush(&mut self) {
        for port in &mut self.ports {
            send(&mut port.tx, &mut port.counters, |b| {
                port.nic.transmit(0, b)
            });
        }
        let overlay = &mut self.overlay;
        let counters = &mut self.overlay_counters;
        for (remote, batch) in &mut self.overlay_tx {
            send(batch, counters, |b| overlay.transmit(*remote, b));
        }
    }
}

/// Sends what `tx` holds through `transmit`, counting; a refused frame (the NIC
/// drops it, counts why and says so) is counted here too and the rest retried;
/// frames the NIC has no room for stay in `tx`.
fn send(
    tx: &mut Batch,
    c: &mut PortCounters,
    mut transmit: impl FnMut(&mut Batch) -> Result<usize, NicError>,
) {
    while !tx.is_empty() {
        let frames = tx.len();
        let result = transmit(tx);
        let taken = frames - tx.len();
        match result {
            Ok(_) => {
                c.tx_packets += taken as u64;
                return;
            }
            Err(_) => {
                // Those before the refused one were sent, and it was dropped.
                c.tx_packets += taken.saturating_sub(1) as u64;
                c.tx_dropped_error += 1;
                if taken == 0 {
                    // Nothing taken (an I/O error): drop the head so the port
                    // cannot stall the domain, and try again next round.
                    if !tx.is_empty() {
                        tx.remove(0);
                    }
                    return;
                }
            }
        }
    }
}

fn mac_at(bytes: &[u8], at: usize) -> Option<Mac> {
    bytes.get(at..at + 6)?.try_into().ok()
}

#[cfg(test)]
mod tests;
