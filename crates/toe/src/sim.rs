//! A deterministic simulation: engines on one in-memory Ethernet segment, in
//! virtual time, with seeded faults (netstack3's `FakeNetwork` idea).
//!
//! [`Link`] is a hub: a frame sent on one port reaches every other port after the
//! configured latency, unless a fault takes it. Faults are drawn from the link's
//! own seeded generator: loss, duplication, reordering (extra delay), corruption
//! (one flipped byte, and the metadata then claims nothing verified, so the
//! receiver's checksum check must catch it). The link also enforces the MTU.
//!
//! With [`LinkConfig::pmtu`] set, the link also plays a router with a smaller
//! MTU on the path: a frame whose IP datagram is larger than that is dropped
//! and answered, to its sender only, with ICMPv4 "fragmentation needed"
//! (type 3 code 4, RFC 1191 section 4) or ICMPv6 "packet too big" (type 2, RFC
//! 4443 section 3.2) announcing the path MTU, from [`ROUTER_MAC`] and
//! [`ROUTER_V4`] / [`ROUTER_V6`], quoting the head of the dropped datagram.
//!
//! Offloads are finished as a NIC would finish them, by linerate-offload's real
//! code: frames marked `Checksum::Partial` get their checksum completed
//! ([`linerate_offload::csum::complete`]), and GSO super-frames (TSO and USO) are
//! cut into segments by a [`Segmenter`] in [`CsumMode::Complete`]. With
//! [`LinkConfig::gro`] on, super-frames instead cross whole, their checksum
//! completed and marked verified with the GSO record kept, as a GRO-capable
//! receiver would hand them up.
//!
//! [`Sim`] steps engines and link together: deliver due frames, run due timers,
//! collect transmissions, jump to the next event.
//!
//! Everything is a function of the engines' seeds, the link's seed and what
//! the applications do: the same run gives the same frames at the same virtual
//! times (tests/it/sim_determinism.rs checks it). [`Link::tap`] records what the
//! link hands out, for a test to compare runs by.
//!
//! [`internals`] exposes the few engine internals that tests and benchmarks
//! measure against (the out-of-order range limit, the thread's buffer cache).

use crate::config::Config;
use crate::engine::Engine;
use crate::rng::Rng;
use crate::time::Instant;
use linerate_nic::{Batch, Frame, PacketBuf};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_offload::{Checksum, OffloadMeta, csum};
use linerate_wire::ethernet;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

pub mod internals;

/// The Ethernet address the simulated router answers from ([`LinkConfig::pmtu`]).
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xfe];
/// The router's IPv4 address.
pub const ROUTER_V4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 254);
/// The router's IPv6 address.
pub const ROUTER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0xfe);

/// How the simulated link behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way delay.
    pub latency: Duration,
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub duplicate: f64,
    /// Probability a frame is held back by up to `reorder_delay` more.
    pub reorder: f64,
    /// The most extra delay of a reordered frame.
    pub reorder_delay: Duration,
    /// Probability one byte of a frame is flipped.
    pub corrupt: f64,
    /// IP MTU enforced on segmented frames.
    pub mtu: u16,
    /// Deliver GSO super-frames whole, as GRO would (no segmentation).
    pub gro: bool,
    /// A smaller MTU on the path: frames the link segments (or that need no
    /// segmentation) whose IP datagram is larger are dropped and answered with
    /// "fragmentation needed" / "packet too big" (see the module docs).
    /// GRO-whole frames ([`LinkConfig::gro`]) are not checked.
    pub pmtu: Option<u16>,
    /// Seed of the fault generator.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            latency: Duration::from_micros(50),
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(200),
            corrupt: 0.0,
            mtu: 1500,
            gro: false,
            pmtu: None,
            seed: 0,
        }
    }
}

/// What the link did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames offered by the ports (after segmentation).
    pub sent: u64,
    /// Frames lost on purpose.
    pub lost: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames with a flipped byte.
    pub corrupted: u64,
    /// Frames above the MTU, dropped.
    pub oversize: u64,
    /// Super-frames cut by the segmenter.
    pub segmented: u64,
    /// Frames a GSO request could not be honoured for (malformed), dropped.
    pub bad_gso: u64,
    /// Frames above [`LinkConfig::pmtu`], dropped and answered with ICMP.
    pub too_big: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: Instant,
    seq: u64,
    frame: Vec<u8>,
    meta: MetaOrd,
}

/// `OffloadMeta` has no ordering; frames are ordered by (time, sequence) only.
#[derive(Debug, PartialEq, Eq)]
struct MetaOrd(OffloadMeta);

impl PartialOrd for MetaOrd {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MetaOrd {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// An in-memory Ethernet hub with latency and seeded faults.
#[derive(Debug)]
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    queues: Vec<BinaryHeap<Reverse<InFlight>>>,
    seq: u64,
    stats: LinkStats,
    /// linerate-offload's GSO, completing every checksum.
    segmenter: Segmenter,
    /// Its reusable output.
    segments: SegmentBuf,
    /// Deliveries recorded since [`Link::tap`] turned recording on.
    tap: Option<Vec<Delivery>>,
}

/// A frame the link handed to a port ([`Link::tap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// When it was handed over (the receiver's virtual time).
    pub at: Instant,
    /// The port it went to.
    pub port: usize,
    /// Its bytes.
    pub frame: Vec<u8>,
}

impl Link {
    /// A hub with `ports` ports.
    pub fn new(ports: usize, cfg: LinkConfig) -> Link {
        Link {
            rng: Rng::new(cfg.seed),
            cfg,
            queues: (0..ports).map(|_| BinaryHeap::new()).collect(),
            seq: 0,
            stats: LinkStats::default(),
            segmenter: Segmenter::new(CsumMode::Complete),
            segments: SegmentBuf::new(),
            tap: None,
        }
    }

    /// Starts (or restarts) recording every frame [`Link::recv`] hands out,
    /// with its time and port; returns what was recorded before. Recording
    /// copies every frame and grows without bound: for tests, not benches.
    pub fn tap(&mut self) -> Vec<Delivery> {
        self.tap.replace(Vec::new()).unwrap_or_default()
    }

    /// Stops recording; returns what was recorded.
    pub fn untap(&mut self) -> Vec<Delivery> {
        self.tap.take().unwrap_or_default()
    }

    /// What the link did so far.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// The configuration (faults may be changed between steps).
    pub fn config_mut(&mut self) -> &mut LinkConfig {
        &mut self.cfg
    }

    /// Sends `frame` from port `from` at `now`: offloads are finished, faults drawn,
    /// and every other port gets its copy.
    pub fn send(&mut self, now: Instant, from: usize, frame: &[u8], meta: &OffloadMeta) {
        let mut frames = Vec::new();
        match meta.gso {
            Some(g) if self.cfg.gro => {
                let mut f = frame.to_vec();
                match csum::complete(&mut f, meta) {
                    Ok(_) => {
                        let mut m = OffloadMeta::plain();
                        m.csum = Checksum::Verified { levels: 1 };
                        m.gso = Some(g);
                        frames.push((f, m, true));
                    }
                    Err(_) => self.stats.bad_gso += 1,
                }
            }
            gso => match self.segmenter.segment(frame, meta, &mut self.segments) {
                Ok(_) => {
                    if gso.is_some() {
                        self.stats.segmented += 1;
                    }
                    frames.extend(
                        self.segments
                            .iter()
                            .map(|f| (f.to_vec(), OffloadMeta::plain(), false)),
                    );
                }
                Err(_) => self.stats.bad_gso += 1,
            },
        }
        for (mut f, mut m, whole) in frames {
            self.stats.sent += 1;
            let ip_len = f.len().saturating_sub(ethernet::HEADER_LEN);
            if !whole && ip_len > usize::from(self.cfg.mtu) {
                self.stats.oversize += 1;
                continue;
            }
            if let Some(pmtu) = self.cfg.pmtu
                && !whole
                && ip_len > usize::from(pmtu)
            {
                self.stats.too_big += 1;
                if let Some(icmp) = too_big(&f, pmtu) {
                    self.deliver(now, from, icmp);
                }
                continue;
            }
            if self.rng.chance(self.cfg.loss) {
                self.stats.lost += 1;
                continue;
            }
            if self.rng.chance(self.cfg.corrupt) && f.len() > ethernet::HEADER_LEN {
                let span = (f.len() - ethernet::HEADER_LEN) as u64;
                let at = ethernet::HEADER_LEN + self.rng.below(span) as usize;
                if let Some(b) = f.get_mut(at) {
                    *b ^= 1 << self.rng.below(8);
                }
                m.csum = Checksum::None;
                self.stats.corrupted += 1;
            }
            let copies = if self.rng.chance(self.cfg.duplicate) {
                self.stats.duplicated += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                let mut delay = self.cfg.latency.max(Duration::from_nanos(1));
                if self.rng.chance(self.cfg.reorder) {
                    self.stats.reordered += 1;
                    let extra = self.cfg.reorder_delay.as_nanos().min(u128::from(u64::MAX)) as u64;
                    delay += Duration::from_nanos(self.rng.below(extra.max(1)));
                }
                for port in 0..self.queues.len() {
                    if port == from {
                        continue;
                    }
                    self.seq += 1;
                    let item = InFlight {
                        at: now + delay,
                        seq: self.seq,
                        frame: f.clone(),
                        meta: MetaOrd(m),
                    };
                    if let Some(q) = self.queues.get_mut(port) {
                        q.push(Reverse(item));
                    }
                }
            }
        }
    }

    /// Queues `frame` for `port` after the link's latency, without faults.
    fn deliver(&mut self, now: Instant, port: usize, frame: Vec<u8>) {
        self.seq += 1;
        let item = InFlight {
            at: now + self.cfg.latency.max(Duration::from_nanos(1)),
            seq: self.seq,
            frame,
            meta: MetaOrd(OffloadMeta::plain()),
        };
        if let Some(q) = self.queues.get_mut(port) {
            q.push(Reverse(item));
        }
    }

    /// The next frame for `port` due at or before `now`.
    pub fn recv(&mut self, now: Instant, port: usize) -> Option<(Vec<u8>, OffloadMeta)> {
        let q = self.queues.get_mut(port)?;
        if q.peek().is_some_and(|Reverse(f)| f.at <= now) {
            let Reverse(f) = q.pop()?;
            if let Some(tap) = &mut self.tap {
                tap.push(Delivery {
                    at: now,
                    port,
                    frame: f.frame.clone(),
                });
            }
            Some((f.frame, f.meta.0))
        } else {
            None
        }
    }

    /// When the next frame arrives anywhere.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.queues
            .iter()
            .filter_map(|q| q.peek().map(|Reverse(f)| f.at))
            .min()
    }
}

/// The router's answer to `frame` (Ethernet, IPv4 with DF or IPv6) being too
/// big for a path MTU of `pmtu`: "fragmentation needed" or "packet too big",
/// quoting as much of the datagram as RFC 1812 section 4.3.2.3 / RFC 4443
/// section 2.4 (c) allow. `None` for frames a router would not answer (IPv4
/// without DF would be fragmented; the simulation just drops it).
fn too_big(frame: &[u8], pmtu: u16) -> Option<Vec<u8>> {
    use linerate_wire::icmp::{self, v4 as icmpv4, v6 as icmpv6};
    use linerate_wire::{ipv4, ipv6};
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    let ip = eth.payload();
    let sender = eth.src_addr();
    match eth.ethertype() {
        ethernet::ethertype::IPV4 => {
            let p = ipv4::Packet::new_checked(ip).ok()?;
            if !p.dont_frag() {
                return None;
            }
            let quote = ip.get(..ip.len().min(icmpv4::MAX_INVOKING))?;
            let icmp_len = icmp::HEADER_LEN + quote.len();
            let mut f = vec![0u8; ethernet::HEADER_LEN + ipv4::HEADER_LEN + icmp_len];
            let mut e = ethernet::Packet::new_unchecked(&mut f[..]);
            e.set_dst_addr(sender);
            e.set_src_addr(ROUTER_MAC);
            e.set_ethertype(ethernet::ethertype::IPV4);
            let ipb = f.get_mut(ethernet::HEADER_LEN..)?;
            let mut h = ipv4::Packet::new_unchecked(&mut ipb[..]);
            h.set_version(4);
            h.set_ihl(5);
            h.set_total_len((ipv4::HEADER_LEN + icmp_len) as u16);
            h.set_ttl(64);
            h.set_protocol(ipv4::protocol::ICMP);
            h.set_src_addr(ROUTER_V4.octets());
            h.set_dst_addr(p.src_addr());
            h.fill_checksum();
            icmpv4::emit_frag_needed(ipb.get_mut(ipv4::HEADER_LEN..)?, pmtu, quote).ok()?;
            Some(f)
        }
        ethernet::ethertype::IPV6 => {
            let p = ipv6::Packet::new_checked(ip).ok()?;
            let quote = ip.get(..ip.len().min(icmpv6::MAX_INVOKING))?;
            let icmp_len = icmp::HEADER_LEN + quote.len();
            let mut f = vec![0u8; ethernet::HEADER_LEN + ipv6::HEADER_LEN + icmp_len];
            let mut e = ethernet::Packet::new_unchecked(&mut f[..]);
            e.set_dst_addr(sender);
            e.set_src_addr(ROUTER_MAC);
            e.set_ethertype(ethernet::ethertype::IPV6);
            let ipb = f.get_mut(ethernet::HEADER_LEN..)?;
            let mut h = ipv6::Packet::new_unchecked(&mut ipb[..]);
            h.set_version(6);
            h.set_payload_len(icmp_len as u16);
            h.set_next_header(ipv4::protocol::ICMPV6);
            h.set_hop_limit(64);
            h.set_src_addr(ROUTER_V6.octets());
            h.set_dst_addr(p.src_addr());
            let addrs = icmpv6::Addrs {
                src: &ROUTER_V6.octets(),
                dst: &p.src_addr(),
            };
            let body = ipb.get_mut(ipv6::HEADER_LEN..)?;
            icmpv6::emit_packet_too_big(body, addrs, u32::from(pmtu), quote).ok()?;
            Some(f)
        }
        _ => None,
    }
}

/// Engines on a [`Link`], stepped together in virtual time. The link may have
/// more ports than there are engines: a test can inject frames from them
/// ([`Link::send`]); frames reaching them are dropped.
#[derive(Debug)]
pub struct Sim {
    /// The link; engine `i` is on port `i`.
    pub link: Link,
    /// The engines.
    pub engines: Vec<Engine>,
    /// Virtual time now.
    pub now: Instant,
    /// Frames on their way into an engine (reused).
    rx: Batch,
}

impl Sim {
    /// Engines on a link with one port each.
    pub fn new(engines: Vec<Engine>, link: LinkConfig) -> Sim {
        Sim {
            link: Link::new(engines.len(), link),
            engines,
            now: Instant::ZERO,
            rx: Batch::new(),
        }
    }

    /// The configuration of host `i` (1-based) of [`Sim::two_hosts`]:
    /// MAC 02:00:00:00:00:0i, 10.0.0.i/24, fd00::i/64.
    pub fn host_config(i: u8) -> Config {
        Config::new([0x02, 0, 0, 0, 0, i])
            .with_ipv4(Ipv4Addr::new(10, 0, 0, i), 24)
            .with_ipv6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(i)), 64)
    }

    /// Two engines (hosts 1 and 2 of [`Sim::host_config`], with `offloads`),
    /// seeded from `seed`.
    pub fn two_hosts(offloads: bool, seed: u64, link: LinkConfig) -> Sim {
        let engines = (1..=2u8)
            .map(|i| {
                let mut c = Sim::host_config(i);
                c.offloads = offloads;
                c.mtu = link.mtu;
                Engine::new(c, seed.wrapping_mul(31).wrapping_add(u64::from(i)))
            })
            .collect();
        Sim::new(engines, link)
    }

    /// Everything due at the current time: deliveries, timers, transmissions.
    pub fn poll(&mut self) {
        let now = self.now;
        for (port, e) in self.engines.iter_mut().enumerate() {
            // Owned frames, as a NIC hands them over: the engine may keep
            // large payloads in their buffers (`tcp::recvbuf`).
            while let Some((f, m)) = self.link.recv(now, port) {
                self.rx.push(Frame::new(PacketBuf::from_vec(f), m));
            }
            e.handle_frames(now, &mut self.rx);
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            let link = &mut self.link;
            e.poll_transmit(now, &mut |f, m| link.send(now, port, f, m));
        }
        // Ports without an engine (a test injecting frames there) drop what
        // reaches them.
        for port in self.engines.len()..self.link.queues.len() {
            while self.link.recv(now, port).is_some() {}
        }
    }

    /// The next time anything happens.
    pub fn next_event(&self) -> Option<Instant> {
        let engines = self.engines.iter().filter_map(Engine::poll_timeout).min();
        crate::time::earliest(engines, self.link.next_delivery())
    }

    /// Polls, then moves time to the next event (or to `limit`). False if nothing
    /// is left to happen before `limit`.
    pub fn step(&mut self, limit: Instant) -> bool {
        self.poll();
        match self.next_event() {
            Some(t) if t <= limit => {
                self.now = t.max(self.now);
                true
            }
            _ => {
                self.now = limit.max(self.now);
                false
            }
        }
    }

    /// Steps until `done` says so (called after every step, with the chance to act
    /// as the applications) or `limit` passes; returns whether `done` was reached.
    pub fn run_until(&mut self, limit: Instant, mut done: impl FnMut(&mut Sim) -> bool) -> bool {
        loop {
            if done(self) {
                return true;
            }
            if !self.step(limit) {
                return done(self);
            }
        }
    }
}
