//! A deterministic simulation: engines on one in-memory Ethernet segment, in
//! virtual time, with seeded faults (netstack3's `FakeNetwork` idea).
//!
//! [`Link`] is a hub: a frame sent on one port reaches every other port after the
//! configured latency, unless a fault takes it. Faults are drawn from the link's
//! own seeded generator: loss, duplication, reordering (extra delay), corruption
//! (one flipped byte, and the metadata then claims nothing verified, so the
//! receiver's checksum check must catch it). The link also enforces the MTU.
//!
//! Offloads: frames marked `Checksum::Partial` get their checksum completed, and
//! GSO super-frames are cut into MSS-sized segments by [`gso_segment`]. **That
//! segmenter is a small test-only stand-in** (plain TCP over IPv4/IPv6, no VLANs,
//! no tunnels) until the NIC layer's GSO from linerate-offload replaces it. With
//! [`LinkConfig::gro`] on, super-frames instead cross whole, marked as a coalesced
//! frame with verified checksums, as a GRO-capable receiver would hand them up.
//!
//! [`Sim`] steps engines and link together: deliver due frames, run due timers,
//! collect transmissions, jump to the next event.

use crate::config::Config;
use crate::engine::Engine;
use crate::rng::Rng;
use crate::time::Instant;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::checksum;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::{ipv6, tcp};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

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
    /// Super-frames cut by the test segmenter.
    pub segmented: u64,
    /// Frames a GSO request could not be honoured for (malformed), dropped.
    pub bad_gso: u64,
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
        }
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
            Some(g) if self.cfg.gro => match complete_checksum(frame) {
                Some(f) => {
                    let mut m = OffloadMeta::plain();
                    m.csum = Checksum::Verified { levels: 1 };
                    m.gso = Some(g);
                    frames.push((f, m, true));
                }
                None => self.stats.bad_gso += 1,
            },
            Some(g) => match gso_segment(frame, &g) {
                Some(segs) => {
                    self.stats.segmented += 1;
                    frames.extend(segs.into_iter().map(|f| (f, OffloadMeta::plain(), false)));
                }
                None => self.stats.bad_gso += 1,
            },
            None => {
                let f = match meta.csum {
                    Checksum::Partial { .. } => complete_checksum(frame),
                    _ => Some(frame.to_vec()),
                };
                match f {
                    Some(f) => frames.push((f, OffloadMeta::plain(), false)),
                    None => self.stats.bad_gso += 1,
                }
            }
        }
        for (mut f, mut m, whole) in frames {
            self.stats.sent += 1;
            let ip_len = f.len().saturating_sub(ethernet::HEADER_LEN);
            if !whole && ip_len > usize::from(self.cfg.mtu) {
                self.stats.oversize += 1;
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

    /// The next frame for `port` due at or before `now`.
    pub fn recv(&mut self, now: Instant, port: usize) -> Option<(Vec<u8>, OffloadMeta)> {
        let q = self.queues.get_mut(port)?;
        if q.peek().is_some_and(|Reverse(f)| f.at <= now) {
            q.pop().map(|Reverse(f)| (f.frame, f.meta.0))
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

/// Offsets of a plain Ethernet / IPv4-or-IPv6 / TCP frame: (l3, l4, payload, v4).
fn tcp_offsets(frame: &[u8]) -> Option<(usize, usize, usize, bool)> {
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    let l3 = ethernet::HEADER_LEN;
    let (l4, v4) = match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
            (ip.protocol() == protocol::TCP).then_some(())?;
            (l3 + ip.header_len(), true)
        }
        ethertype::IPV6 => {
            let ip = ipv6::Packet::new_checked(eth.payload()).ok()?;
            (ip.next_header() == protocol::TCP).then_some(())?;
            (l3 + ipv6::HEADER_LEN, false)
        }
        _ => return None,
    };
    let t = tcp::Packet::new_checked(frame.get(l4..)?).ok()?;
    Some((l3, l4, l4 + t.header_len(), v4))
}

/// Sets the IP length fields and checksums and the TCP checksum of a plain TCP
/// frame whose lengths changed.
fn fix_tcp_frame(f: &mut [u8], l3: usize, l4: usize, v4: bool) -> Option<()> {
    let l4_len = f.len().checked_sub(l4)?;
    let pseudo = if v4 {
        let mut ip = ipv4::Packet::new_unchecked(f.get_mut(l3..)?);
        ip.set_total_len(u16::try_from(l4 - l3 + l4_len).ok()?);
        ip.fill_checksum();
        checksum::pseudo_ipv4(
            ip.src_addr(),
            ip.dst_addr(),
            protocol::TCP,
            u16::try_from(l4_len).ok()?,
        )
    } else {
        let mut ip = ipv6::Packet::new_unchecked(f.get_mut(l3..)?);
        ip.set_payload_len(u16::try_from(l4_len).ok()?);
        checksum::pseudo_ipv6(&ip.src_addr(), &ip.dst_addr(), protocol::TCP, l4_len as u32)
    };
    tcp::Packet::new_unchecked(f.get_mut(l4..)?).fill_checksum(pseudo);
    Some(())
}

/// Completes the TCP checksum of a frame (test-only stand-in for checksum offload).
pub fn complete_checksum(frame: &[u8]) -> Option<Vec<u8>> {
    let mut f = frame.to_vec();
    match tcp_offsets(&f) {
        Some((l3, l4, _, v4)) => fix_tcp_frame(&mut f, l3, l4, v4).map(|_| f),
        // Not TCP: nothing of ours asks for checksum offload on it.
        None => Some(f),
    }
}

/// Cuts a TCP super-frame into segments of `gso.size` payload bytes, as TSO does:
/// sequence numbers advance, the IPv4 ID advances by one per segment, FIN and PSH
/// stay on the last segment only, every checksum is computed. **Test-only**: plain
/// TCP over IPv4 or IPv6 without VLANs, extension headers or tunnels; the NIC
/// layer's GSO replaces it.
pub fn gso_segment(frame: &[u8], gso: &Gso) -> Option<Vec<Vec<u8>>> {
    if !matches!(gso.kind, GsoType::TcpV4 | GsoType::TcpV6) || gso.size == 0 {
        return None;
    }
    let (l3, l4, pl, v4) = tcp_offsets(frame)?;
    let header = frame.get(..pl)?;
    let payload = frame.get(pl..)?;
    let t = tcp::Packet::new_checked(frame.get(l4..)?).ok()?;
    let (seq0, flags) = (t.seq_number(), t.flags());
    let id0 = if v4 {
        ipv4::Packet::new_checked(frame.get(l3..)?).ok()?.ident()
    } else {
        0
    };
    let chunks: Vec<&[u8]> = payload.chunks(usize::from(gso.size)).collect();
    let n = chunks.len();
    let mut out = Vec::with_capacity(n);
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mut f = Vec::with_capacity(header.len() + chunk.len());
        f.extend_from_slice(header);
        f.extend_from_slice(chunk);
        let off = i * usize::from(gso.size);
        if v4 {
            ipv4::Packet::new_unchecked(f.get_mut(l3..)?).set_ident(id0.wrapping_add(i as u16));
        }
        let mut t = tcp::Packet::new_unchecked(f.get_mut(l4..)?);
        t.set_seq_number(seq0.wrapping_add(off as u32));
        let mut fl = flags;
        if i + 1 < n {
            fl.remove(tcp::Flags::FIN | tcp::Flags::PSH);
        }
        if i > 0 {
            fl.remove(tcp::Flags::CWR);
        }
        t.set_flags(fl);
        fix_tcp_frame(&mut f, l3, l4, v4)?;
        out.push(f);
    }
    Some(out)
}

/// Engines on a [`Link`], stepped together in virtual time.
#[derive(Debug)]
pub struct Sim {
    /// The link; engine `i` is on port `i`.
    pub link: Link,
    /// The engines.
    pub engines: Vec<Engine>,
    /// Virtual time now.
    pub now: Instant,
}

impl Sim {
    /// Engines on a link with one port each.
    pub fn new(engines: Vec<Engine>, link: LinkConfig) -> Sim {
        Sim {
            link: Link::new(engines.len(), link),
            engines,
            now: Instant::ZERO,
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
            while let Some((f, m)) = self.link.recv(now, port) {
                e.handle_frame(now, &f, &m);
            }
            if e.poll_timeout().is_some_and(|t| t <= now) {
                e.handle_timeout(now);
            }
            let link = &mut self.link;
            e.poll_transmit(now, &mut |f, m| link.send(now, port, f, m));
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
