//! The engine: one network interface's worth (or a few interfaces', see
//! `iface`) of ARP, NDP, IPv4, IPv6, ICMP, TCP and UDP as a sans-IO state
//! machine (the shape of quinn-proto's `Endpoint`).
//!
//! * [`Engine::handle_frame`] takes a received Ethernet frame and its
//!   [`OffloadMeta`] (checksums the NIC verified, or a GRO super-segment);
//! * [`Engine::poll_transmit`] hands out every frame due now, TCP data as one
//!   super-segment per flow per round with a GSO request when offloads are on;
//! * [`Engine::poll_timeout`] says when to call [`Engine::handle_timeout`].
//!
//! Time only enters as an argument and randomness comes from the seed, so a run
//! is a pure function of its inputs. Connections are found by their 4-tuple in a
//! hash map (O(1)); each connection's earliest deadline sits in an indexed heap
//! (`timers`); orphaned TIME-WAIT connections are compact records
//! (`time_wait`); connections with something to send wait in a round-robin
//! queue, visited again only while they may have more to send, and send up to
//! a super-segment's worth of data per visit.

mod addr;
mod announce;
mod dhcp;
mod error;
mod events;
pub(crate) mod flow_hash;
mod frag;
mod icmp;
mod iface;
mod input;
mod mcast;
mod memory;
mod output;
mod routes;
mod sink;
mod slaac;
mod socket;
mod template;
mod time_wait;
mod timers;
mod tuples;
mod udp;

pub use dhcp::{DhcpIn, DhcpSendError, DhcpStats};
pub use events::Event;
pub use iface::IfaceCounters;
pub use mcast::{
    Compat, DEFAULT_MULTICAST_HOPS, FilterMode, MAX_GROUPS, MAX_SOURCES, McastCounters, McastError,
};
pub use memory::{Closing, MemoryUsage};
use sink::CallbackSink;
pub use sink::{PoolSink, TxSink};
pub use slaac::{AddrState, SlaacAddr, SlaacState};

pub use error::{
    AcceptError, ConnectError, ConnectionError, EPHEMERAL_PORTS, InvalidHandle, ListenError,
    RecvError, SendError, UdpBindError, UdpRecvError, UdpSendError, Unroutable,
};
pub use socket::{ListenerHandle, Readiness, SocketHandle, TcpInfo};
pub use udp::{MAX_UDP_SEGMENTS, UdpHandle, UdpInfo};

use crate::config::{Config, ConfigError, NextHop, Route, RouteError, RouteTable};
use crate::counters::Counters;
use crate::net::neighbor::{Limits, NeighborCache};
use crate::net::pmtu::PmtuCache;
use crate::net::ratelimit::PerSecond;
use crate::rng::{IsnGenerator, Rng};
use crate::tcp::conn::Conn;
use crate::tcp::cookie::SynCookies;
use crate::tcp::recvbuf::OwnedFrame;
use crate::time::{Instant, earliest};
use flow_hash::FlowHash;
use linerate_offload::OffloadMeta;
use std::collections::{HashMap, VecDeque};
use time_wait::TimeWaitTable;
use timers::TimerHeap;

/// A connection slot: handles carry the generation so a reused slot is not
/// mistaken for the connection that had it before.
#[derive(Debug, Clone)]
struct Slot {
    generation: u32,
    conn: Option<Conn>,
    /// In the transmit queue.
    queued: bool,
    /// In its listener's accept queue (established, not yet accepted).
    accept: bool,
    /// The connection's header template (`template`), for its next hop.
    tmpl: template::TxTemplate,
    /// Its place in the event queue and the readiness last reported.
    ev: events::EventState,
    /// Its next hop, output interface (a `u8`, which keeps the slot its
    /// size: `Config::interfaces` has at most 15), and the routing table
    /// generation they were looked up in.
    route: (NextHop, u8, u32),
}

/// A listening port.
#[derive(Debug, Clone)]
struct Listener {
    port: u16,
    /// Connections that reached ESTABLISHED, waiting for `tcp_accept`, by slot
    /// and generation. One that closes before it is taken is left here, stale,
    /// and skipped (no search on the packet path); the queue is compacted when
    /// the stale entries outnumber the live ones.
    ready: VecDeque<(usize, u32)>,
    /// Live entries of `ready`.
    queued: usize,
    /// Connections in SYN-RECEIVED.
    embryonic: usize,
    /// Until when returning ACKs are checked for SYN cookies (set when one is
    /// sent, for as long as a cookie stays valid).
    cookies_until: Option<Instant>,
    /// Its place in the event queue and the readiness last reported.
    ev: events::EventState,
}

/// The connection engine for one interface, or a few (a host's uplinks:
/// [`Config::interfaces`]). See the [crate docs](crate).
#[derive(Debug)]
#[cfg_attr(feature = "harness", derive(Clone))]
pub struct Engine {
    cfg: Config,
    rng: Rng,
    isn: IsnGenerator,
    cookies: SynCookies,
    counters: Counters,
    neighbors: NeighborCache,
    slots: Vec<Slot>,
    free: Vec<usize>,
    by_tuple: tuples::TupleTable,
    listeners: Vec<Option<Listener>>,
    by_port: HashMap<u16, usize, FlowHash>,
    /// Frames ready to go that are not TCP output (ARP, NDP, ICMP, RST, frames
    /// released by a neighbour resolution).
    control: VecDeque<(Vec<u8>, OffloadMeta)>,
    ready: VecDeque<usize>,
    /// Each connection's earliest deadline (at most one entry per slot).
    timers: TimerHeap,
    /// Connections in TIME-WAIT whose handles were given up, kept small.
    time_wait: TimeWaitTable,
    /// The buffer [`Engine::poll_transmit`] builds frames in (reused).
    scratch: Vec<u8>,
    ip_id: u16,
    /// Out-of-order bytes held over all connections.
    ofo_held: usize,
    /// UDP sockets, their send queue, the ICMP error rate limit.
    udp: udp::UdpTable,
    /// Path MTUs learnt from ICMP.
    pmtu: PmtuCache,
    /// The challenge ACK limit (RFC 5961 section 7).
    challenge: PerSecond,
    /// The latest time the engine was given (for calls that take none).
    clock: Instant,
    /// Gratuitous ARP / unsolicited NA rounds still to send.
    announce: announce::Announce,
    /// The frame being processed, while [`Engine::handle_frames`] owns it.
    rx_owned: Option<OwnedFrame>,
    /// The connection (slot, generation) that adopted part of that frame.
    adopted: Option<(usize, u32)>,
    /// A connection whose timer is rescheduled when the receive call returns
    /// rather than after each of its segments (see `after_input_event`).
    deferred_timer: Option<usize>,
    /// Sockets that changed, for [`Engine::poll_event`].
    events: events::EventQueue,
    /// Datagrams being reassembled from fragments (`Config::fragments`).
    reasm: crate::frag::Reassembler,
    /// The quote of an ICMP time exceeded (reused).
    frag_quote: Vec<u8>,
    /// A UDP datagram built whole before it is cut into fragments (reused).
    frag_scratch: Vec<u8>,
    /// IPv6 Fragment identifications (RFC 7739).
    ident6: crate::frag::ident::Ipv6Ident,
    /// Where datagrams go next (`Config::routes`).
    routes: RouteTable,
    /// The DHCP client's channel (`Config::dhcp`).
    dhcp: dhcp::DhcpChannel,
    /// Stateless address autoconfiguration (`Config::slaac`).
    slaac: slaac::Slaac,
    /// Multicast groups, IGMP and MLD (`mcast`).
    mcast: mcast::Mcast,
    /// Interface 0's counters (`iface`).
    iface0_counters: IfaceCounters,
    /// The other interfaces' counters, from interface 1: empty, and so no
    /// allocation, for an engine of one interface.
    iface_counters: Vec<IfaceCounters>,
}

impl Engine {
    /// [`Engine::new`] for a `config` that passes [`Config::validate`], or
    /// the first rule it breaks.
    pub fn try_new(config: Config, rng_seed: u64) -> Result<Engine, ConfigError> {
        config.validate()?;
        Ok(Engine::new(config, rng_seed))
    }

    /// An engine for the interface `config`, drawing all its randomness (ISN key,
    /// timestamp offsets, ephemeral ports) from `rng_seed`.
    ///
    /// `config` is expected to pass [`Config::validate`] (use
    /// [`Engine::try_new`] to check). One that does not is not checked, and
    /// never makes the engine panic or spin at one instant: zero `neighbor_max`
    /// and `pmtu_entries` count as 1, a zero `tcp.min_rto` as 1 ns, a
    /// `tcp.max_rto` below `tcp.min_rto` as `tcp.min_rto`, a `neighbor_retry`
    /// below [`MIN_NEIGHBOR_RETRY`](crate::config::MIN_NEIGHBOR_RETRY) as that,
    /// `announcements` above
    /// [`MAX_ANNOUNCEMENTS`](crate::config::MAX_ANNOUNCEMENTS) as that, and
    /// every other value is used as given, with the effect its
    /// [`ConfigError`] variant describes (frames larger than the link, a
    /// listener that accepts nothing, a flood of requests...).
    pub fn new(config: Config, rng_seed: u64) -> Engine {
        let mut rng = Rng::new(rng_seed);
        let isn = IsnGenerator::new(&mut rng);
        let (k0, k1) = isn.derived_key();
        let limits = Limits {
            ttl: config.neighbor_ttl,
            retry: config.neighbor_retry.max(crate::config::MIN_NEIGHBOR_RETRY),
            probes: config.neighbor_probes,
            queue: config.neighbor_queue,
            max: config.neighbor_max.max(1),
        };
        let ip_id = rng.next_u32() as u16;
        let udp = udp::UdpTable::new(config.icmp_error_rate, config.icmp_error_burst);
        let pmtu = PmtuCache::new(config.pmtu_entries, config.pmtu_expiry);
        let challenge = PerSecond::new(config.tcp.challenge_ack_limit);
        let announce = announce::Announce::new(
            config.announcements.min(crate::config::MAX_ANNOUNCEMENTS),
            config.all_interfaces().any(|f| f.ipv4.is_some()),
            config.all_interfaces().any(|f| f.ipv6.is_some()),
        );
        // From a generator of its own, so the main one's sequence (ports, ISN
        // offsets) is what it was without it.
        let flow_hash = FlowHash::new(&mut Rng::new(
            k0.rotate_left(29) ^ k1 ^ 0x464c_4f57_4841_5348,
        ));
        // Keys of their own, derived like the flow hash's.
        let reasm = crate::frag::Reassembler::new(
            &config.fragments,
            k1.rotate_left(17) ^ k0 ^ 0x5245_4153_4d42_4c59,
        );
        let ident6 = crate::frag::ident::Ipv6Ident::new(&mut Rng::new(
            k0.rotate_left(41) ^ k1 ^ 0x4950_3649_4445_4e54,
        ));
        // A configuration that fails `Config::validate` keeps its interface
        // prefixes and treats every other destination as on the link.
        let routes = config.route_table().unwrap_or_else(|_| {
            let flat = Config::new(config.mac).routes;
            RouteTable::with_devices(
                1 + config.interfaces.len(),
                &config.connected_routes(),
                &flat,
            )
            .unwrap_or_default()
        });
        let iface_counters = vec![IfaceCounters::default(); config.interfaces.len()];
        Engine {
            routes,
            cfg: config,
            rng,
            isn,
            cookies: SynCookies::new(k0, k1),
            counters: Counters::default(),
            neighbors: NeighborCache::with_hash(limits, flow_hash),
            slots: Vec::new(),
            free: Vec::new(),
            by_tuple: tuples::TupleTable::with_hasher(flow_hash),
            listeners: Vec::new(),
            by_port: HashMap::with_hasher(flow_hash),
            control: VecDeque::new(),
            ready: VecDeque::new(),
            timers: TimerHeap::default(),
            time_wait: TimeWaitTable::default(),
            scratch: Vec::new(),
            ip_id,
            ofo_held: 0,
            udp,
            pmtu,
            challenge,
            announce,
            clock: Instant::ZERO,
            rx_owned: None,
            adopted: None,
            deferred_timer: None,
            events: events::EventQueue::default(),
            reasm,
            frag_quote: Vec::new(),
            frag_scratch: Vec::new(),
            ident6,
            dhcp: dhcp::DhcpChannel::default(),
            slaac: slaac::Slaac::default(),
            mcast: mcast::Mcast::default(),
            iface0_counters: IfaceCounters::default(),
            iface_counters,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// When [`Engine::handle_timeout`] should next be called, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let conn = self.timers.peek().map(|(t, _)| t);
        let conn = earliest(conn, self.time_wait.next_expiry());
        let conn = earliest(conn, self.announce.deadline());
        let conn = earliest(conn, self.reasm.next_deadline());
        let conn = earliest(conn, self.slaac.deadline(self.cfg.slaac));
        let conn = earliest(conn, self.mcast.deadline());
        earliest(conn, self.neighbors.next_deadline())
    }

    /// Runs every timer due at `now`: retransmissions, delayed ACKs, zero-window
    /// probes, TIME-WAIT expiry, neighbour resolution retries, gratuitous ARP
    /// announcements, reassembly timeouts.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.clock = self.clock.max(now);
        while let Some(idx) = self.timers.pop_due(now) {
            if let Some(conn) = self.slots.get_mut(idx).and_then(|s| s.conn.as_mut()) {
                conn.on_timeout(now, &mut self.counters);
                self.tcp_changed(idx);
                self.after_event(idx);
                self.mark_ready(idx);
            }
        }
        self.time_wait_timers(now);
        self.neighbor_timers(now);
        if self.reasm.next_deadline().is_some_and(|t| t <= now) {
            self.frag_timers(now);
        }
        if self.announce.left != 0 {
            self.announce(now);
        }
        if self
            .slaac
            .deadline(self.cfg.slaac)
            .is_some_and(|t| t <= now)
        {
            self.slaac_timers(now);
        }
        if self.mcast.deadline().is_some_and(|t| t <= now) {
            self.mcast_timers(now);
        }
    }

    /// Hands every frame due now to `out`, with its offload metadata; returns how
    /// many. The same as [`Engine::poll_transmit_into`] over a reused scratch
    /// buffer: each frame is built there and lent to `out`.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        out: &mut impl FnMut(&[u8], &OffloadMeta),
    ) -> usize {
        let mut buf = std::mem::take(&mut self.scratch);
        let mut sink = CallbackSink {
            buf: &mut buf,
            len: 0,
            out,
        };
        let n = self.poll_transmit_into(now, &mut sink);
        self.scratch = buf;
        n
    }

    /// Writes every frame due now into buffers `sink` lends, and returns how many.
    /// Control frames first, then queued UDP datagrams, then TCP. A poll is
    /// made of rounds: in each, every connection with something to send emits
    /// up to `ROUND_QUANTUM` bytes of data (one super-segment with offloads
    /// on, up to 45 MSS segments without), in round-robin order (A, B, A, B,
    /// ...), and rounds follow until none has anything left or the sink is
    /// full.
    /// TCP headers and payload are written straight into the sink's buffer.
    pub fn poll_transmit_into(&mut self, now: Instant, sink: &mut impl TxSink) -> usize {
        self.clock = self.clock.max(now);
        if self.announce.left != 0 {
            self.announce(now);
        }
        let mut n = 0;
        if !self.flush_control(sink, &mut n) || !self.flush_udp(now, sink, &mut n) {
            self.counters.tx_frames += n as u64;
            return n;
        }
        while let Some(idx) = self.ready.pop_front() {
            let Some(slot) = self.slots.get_mut(idx) else {
                continue;
            };
            slot.queued = false;
            // One visit sends up to a round's quantum: one super-segment with
            // offloads, as many MSS segments as fill one without, so that
            // connections share the sink by the same bytes per round either
            // way, and the per-visit work (the queue, the timers) is done once
            // per quantum rather than once per segment.
            let (mut sent, mut quantum) = (false, output::ROUND_QUANTUM);
            let room = loop {
                let emitted = self.emit_tcp(now, idx, sink);
                // Frames a neighbour miss queued, an RST, or a frame the sink
                // had no room for may be waiting.
                let room = self.flush_control(sink, &mut n);
                let Some(len) = emitted else {
                    break room;
                };
                sent = true;
                n += 1;
                // Another as long would not fit the quantum: the visit ends.
                let len = len.max(1);
                quantum = quantum.saturating_sub(len);
                if !room || quantum < len || !self.conn(idx).is_some_and(may_send_more) {
                    break room;
                }
            };
            self.after_event(idx);
            // Back in the queue for the next round only if there may be more
            // to send: a second visit that finds nothing costs as much as the
            // first.
            if sent && self.conn(idx).is_some_and(may_send_more) {
                self.mark_ready(idx);
            }
            if !room {
                break;
            }
        }
        self.counters.tx_frames += n as u64;
        n
    }

    /// Moves control frames into `sink`, counting them in `n`; false when the
    /// sink ran out of room (the rest stay queued). Inlined for the common
    /// case, an empty queue (it is checked after every TCP segment).
    #[inline]
    fn flush_control(&mut self, sink: &mut impl TxSink, n: &mut usize) -> bool {
        self.control.is_empty() || self.flush_control_queued(sink, n)
    }

    #[inline(never)]
    fn flush_control_queued(&mut self, sink: &mut impl TxSink, n: &mut usize) -> bool {
        while let Some((frame, meta)) = self.control.pop_front() {
            let Some(buf) = sink.buffer(frame.len()) else {
                self.control.push_front((frame, meta));
                return false;
            };
            buf.copy_from_slice(&frame);
            sink.commit(&meta);
            *n += 1;
        }
        true
    }

    /// Hands `seg` to connection `idx`, with the engine's out-of-order budget
    /// ([`crate::TcpConfig::ofo_total`]) applied and its use accounted; returns
    /// the RST to send, if any.
    fn segment_to_conn(
        &mut self,
        now: Instant,
        idx: usize,
        seg: &crate::tcp::segment::Segment<'_>,
    ) -> Option<crate::tcp::input::Rst> {
        let limit = self.cfg.tcp.ofo_total;
        // One look-up of the slot (its generation and connection are
        // disjoint fields).
        let slot = self.slots.get_mut(idx)?;
        let conn = slot.conn.as_mut()?;
        let before = conn.asm.held();
        conn.ofo_allowed = self.ofo_held < limit;
        let rst = conn.on_segment(now, seg, &mut self.counters);
        if conn.rx.awaits_frame() {
            self.adopted = Some((idx, slot.generation));
        }
        let after = conn.asm.held();
        if !slot.ev.queued {
            slot.ev.queued = true;
            self.events.push_tcp(idx);
        }
        self.ofo_held = (self.ofo_held + after).saturating_sub(before);
        rst
    }

    fn conn(&self, idx: usize) -> Option<&Conn> {
        self.slots.get(idx).and_then(|s| s.conn.as_ref())
    }

    fn conn_mut(&mut self, idx: usize) -> Option<&mut Conn> {
        self.slots.get_mut(idx).and_then(|s| s.conn.as_mut())
    }

    /// Queues a connection for transmission.
    fn mark_ready(&mut self, idx: usize) {
        if let Some(slot) = self.slots.get_mut(idx)
            && slot.conn.is_some()
        {
            Engine::enqueue(&mut self.ready, &mut slot.queued, idx);
        }
    }

    /// After a segment: queues connection `idx` for transmission unless a visit
    /// would certainly send nothing and change nothing ([`needs_visit`]), as
    /// after the pure ACK of all our data or of our FIN. (A skipped visit is
    /// not missed: whatever later gives the connection something to send, an
    /// application call, a timer or a segment, queues it itself.)
    fn mark_ready_after_input(&mut self, now: Instant, idx: usize) {
        match self.conn(idx) {
            Some(c) if !needs_visit(c) => {
                #[cfg(debug_assertions)]
                self.check_idle_visit(now, idx);
                let _ = now;
            }
            _ => self.mark_ready(idx),
        }
    }

    /// Debug builds: the visit [`Engine::mark_ready_after_input`] skipped would
    /// have sent nothing and changed nothing (its output, the connection's
    /// state, tuning and buffer sizes, and the counters are compared).
    #[cfg(debug_assertions)]
    #[inline(never)]
    fn check_idle_visit(&mut self, now: Instant, idx: usize) {
        let Some(conn) = self.slots.get_mut(idx).and_then(|s| s.conn.as_mut()) else {
            return;
        };
        // Compared by value, not as text: the fuzz target runs this after
        // every segment that skips a visit, and formatting it was most of
        // that target's time.
        let snapshot = |c: &Conn| {
            (
                c.state.clone(),
                c.tune.clone(),
                c.rx.capacity(),
                c.tx.len(),
                c.ka.clone(),
                c.send_rst,
            )
        };
        let before = snapshot(conn);
        let mut counters = Counters::default();
        let out = conn.poll_output(now, usize::MAX, &mut counters);
        assert!(out.is_none(), "skipped visit would send {out:?}");
        assert_eq!(counters, Counters::default(), "skipped visit would count");
        assert!(
            before == snapshot(conn),
            "skipped visit would change state: {before:?} -> {:?}",
            snapshot(conn)
        );
    }

    /// Queues connection `idx` for transmission unless its slot's `queued` flag
    /// says it already is: on the per-write path, a flag test (taking the
    /// fields, so that a caller holding the connection can use it).
    #[inline]
    fn enqueue(ready: &mut VecDeque<usize>, queued: &mut bool, idx: usize) {
        if !*queued {
            *queued = true;
            ready.push_back(idx);
        }
    }

    /// Stores the connection `make` builds (in its slot, rather than built
    /// elsewhere and moved in: a connection is most of a kilobyte); returns
    /// the slot.
    fn insert_conn(&mut self, make: impl FnOnce() -> Conn) -> usize {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: None,
                    queued: false,
                    accept: false,
                    tmpl: template::TxTemplate::EMPTY,
                    ev: events::EventState::NEW,
                    route: (NextHop::NoRoute, 0, 0),
                });
                self.slots.len() - 1
            }
        };
        let Some(slot) = self.slots.get_mut(idx) else {
            return idx;
        };
        // A template is for one connection's addresses and ports, and so is
        // a next hop.
        slot.tmpl = template::TxTemplate::EMPTY;
        let generation = self.routes.generation();
        slot.route = (NextHop::NoRoute, 0, generation.wrapping_sub(1));
        // Nothing reported for the new connection yet (a queue entry of the
        // slot's last one, if any, now serves this one).
        slot.ev.seen = 0;
        let conn = slot.conn.insert(make());
        self.by_tuple.insert((conn.local, conn.remote), idx);
        self.apply_cached_pmtu(idx);
        self.mark_ready(idx);
        idx
    }

    /// Frees a slot (the connection is dropped where it lies).
    fn remove_conn(&mut self, idx: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let Some(conn) = slot.conn.as_ref() else {
            return;
        };
        let (key, listener) = ((conn.local, conn.remote), conn.listener);
        self.ofo_held = self.ofo_held.saturating_sub(conn.asm.held());
        let accept = std::mem::take(&mut slot.accept);
        slot.conn = None;
        slot.generation = slot.generation.wrapping_add(1);
        self.timers.remove(idx);
        if let Some(v) = self.by_tuple.remove(&key)
            && v != idx
        {
            // The 4-tuple belongs to another (a TIME-WAIT record): keep it.
            self.by_tuple.insert(key, v);
        }
        if let (true, Some(l)) = (accept, listener) {
            self.left_listener(l, true);
        }
        self.free.push(idx);
    }

    /// A connection of listener `l` ends before it was accepted: it leaves the
    /// accept queue (`queued`: its entry goes stale) or the SYN-RECEIVED count.
    /// The queue is compacted once stale entries outnumber live ones, so it
    /// stays within twice the backlog whatever the peers do.
    fn left_listener(&mut self, l: usize, queued: bool) {
        let Some(Some(lst)) = self.listeners.get_mut(l) else {
            return;
        };
        if !queued {
            lst.embryonic = lst.embryonic.saturating_sub(1);
            return;
        }
        lst.queued = lst.queued.saturating_sub(1);
        if lst.queued == 0 {
            // Emptied: the next connection is reported again.
            lst.ev.rearm(events::bits::READABLE);
        }
        if lst.ready.len() > 2 * lst.queued + 16 {
            let slots = &self.slots;
            lst.ready
                .retain(|&(i, g)| slots.get(i).is_some_and(|s| s.accept && s.generation == g));
        }
    }

    /// Bookkeeping after anything happened to a connection: the accept queue,
    /// removal of finished connections, the timer heap. Inlined for the common
    /// case (it runs after every segment in or out): nothing to do but keep
    /// the timer.
    #[inline]
    fn after_event(&mut self, idx: usize) {
        if self.settle(idx) {
            self.schedule_conn(idx);
        }
    }

    /// What every event needs after it: the close the application asked for
    /// applied, and the rare bookkeeping done (see `after_event_rare`). True
    /// in the common case, when only the timer is left to keep.
    #[inline]
    fn settle(&mut self, idx: usize) -> bool {
        use crate::tcp::state::State;
        let Some(conn) = self.slots.get_mut(idx).and_then(|s| s.conn.as_mut()) else {
            return false;
        };
        conn.apply_close();
        if conn.became_established || matches!(conn.state, State::Closed(_) | State::TimeWait(_)) {
            self.after_event_rare(idx);
            return false;
        }
        true
    }

    /// [`Engine::after_event`] for a segment received in a batch: the same,
    /// except that the connection's next deadline is computed and scheduled
    /// once, when the receive call returns ([`Engine::flush_deferred_timer`]),
    /// not after each of its segments. No time passes and no timer fires
    /// inside a receive call, so only the last deadline matters (the heap only
    /// moves a slot's entry earlier, and a due entry is checked against the
    /// connection when it fires).
    #[inline]
    fn after_input_event(&mut self, idx: usize) {
        if !self.settle(idx) {
            return;
        }
        match self.deferred_timer {
            Some(d) if d == idx => {}
            Some(d) => {
                self.schedule_conn(d);
                self.deferred_timer = Some(idx);
            }
            None => self.deferred_timer = Some(idx),
        }
    }

    /// Schedules the connection whose timer [`Engine::after_input_event`]
    /// deferred, if any. Every receive entry point calls it before returning.
    pub(super) fn flush_deferred_timer(&mut self) {
        if let Some(idx) = self.deferred_timer.take() {
            self.schedule_conn(idx);
        }
    }

    /// Schedules the connection in slot `idx` (if there is one) at its next
    /// deadline.
    #[inline]
    fn schedule_conn(&mut self, idx: usize) {
        if let Some(d) = self
            .slots
            .get(idx)
            .and_then(|s| s.conn.as_ref())
            .and_then(|c| c.next_deadline())
        {
            self.timers.schedule(idx, d);
        }
    }

    /// [`Engine::after_event`] when the connection became established, closed,
    /// or is in TIME-WAIT.
    #[inline(never)]
    fn after_event_rare(&mut self, idx: usize) {
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        let established = std::mem::take(&mut conn.became_established);
        let listener = conn.listener;
        if established && let Some(Some(lst)) = listener.and_then(|l| self.listeners.get_mut(l)) {
            lst.embryonic = lst.embryonic.saturating_sub(1);
            lst.ready.push_back((idx, slot.generation));
            lst.queued += 1;
            slot.accept = true;
            self.counters.tcp_passive_opens += 1;
            if let Some(l) = listener {
                self.listener_changed(l);
            }
        }
        // Connected, closed or failed: an event for its owner.
        self.tcp_changed(idx);
        let Some(slot) = self.slots.get_mut(idx) else {
            return;
        };
        let Some(conn) = slot.conn.as_mut() else {
            return;
        };
        if conn.close_reason().is_some() {
            let orphan = conn.app_closed || listener.is_some();
            let key = (conn.local, conn.remote);
            let was_queued = std::mem::take(&mut slot.accept);
            if let Some(l) = listener {
                self.left_listener(l, was_queued);
            }
            if orphan {
                self.remove_conn(idx);
            } else if let Some(v) = self.by_tuple.remove(&key)
                && v != idx
            {
                self.by_tuple.insert(key, v);
            }
            return;
        }
        if conn.app_closed
            && matches!(conn.state, crate::tcp::state::State::TimeWait(_))
            && !may_send_more(conn)
        {
            self.enter_time_wait(idx);
            return;
        }
        if let Some(d) = conn.next_deadline() {
            self.timers.schedule(idx, d);
        }
    }

    fn next_ip_id(&mut self, segments: usize) -> u16 {
        let id = self.ip_id;
        self.ip_id = self.ip_id.wrapping_add(segments as u16);
        id
    }
}

/// False when a transmit visit to `conn` would certainly send nothing and change
/// nothing: [`may_send_more`] is false, no tail loss probe is due (taking it
/// clears the flag even when nothing goes), and receive auto-tuning would not
/// measure (output takes its read measurement; see
/// [`Conn::rcv_space_measures`]).
fn needs_visit(conn: &Conn) -> bool {
    may_send_more(conn)
        || conn.rcv_space_measures()
        || conn.state.snd().is_some_and(|s| s.rack.tlp_due)
}

/// False when `conn` certainly has nothing to send now (so `poll_output` would
/// return nothing, and change nothing): no RST, SYN, SYN-ACK, ACK, probe or
/// retransmission pending, no data past SND.NXT, no FIN still to go. True
/// whenever it may have.
fn may_send_more(conn: &Conn) -> bool {
    use crate::tcp::state::State;
    if conn.send_rst || conn.ka.due {
        return true;
    }
    match &conn.state {
        State::SynSent(s) => s.send_syn,
        State::SynRcvd(s) => s.send_synack,
        State::Closed(_) => false,
        st => {
            if st.rcv().is_some_and(|r| r.ack_now) {
                return true;
            }
            let Some(snd) = st.snd() else {
                return false;
            };
            let data_end = snd.una.plus(conn.tx.len());
            snd.persist.is_some()
                || snd.recovery.is_some()
                || snd.nxt < data_end
                || (st.fin_queued() && snd.nxt <= data_end)
        }
    }
}
