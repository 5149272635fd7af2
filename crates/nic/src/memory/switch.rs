//! A learning Ethernet switch of N memory ports (IEEE 802.1D section 8.7, without
//! ageing or VLAN awareness).
//!
//! For every frame a port sends, the switch learns the source MAC (unicast only) on
//! that port, then forwards: to the port that learned the destination, or, for an
//! unknown unicast, a multicast or the broadcast address, to every other port
//! (flooding, one copy each). A frame whose destination was learned on the port it
//! came from is filtered. Forwarding happens in the sender's `transmit` call; each
//! port's faults apply on the way from the switch to it, so a path through the
//! switch passes one fault stage, the receiver's.

use super::wire::Wire;
use super::{Clock, Faults, Inbound, MemNic, Outbound, PortConfig, inbound, wire_seed};
use crate::buf::lock;
use crate::caps::NicCaps;
use crate::frame::Frame;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One port of a switch: the NIC plugged into it and the faults of the cable from
/// the switch to that NIC.
#[derive(Debug, Clone)]
pub struct SwitchPort {
    /// The NIC on this port.
    pub port: PortConfig,
    /// Faults on frames the switch sends to this port.
    pub faults: Faults,
}

/// A switch's make-up.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// The ports, numbered from 0.
    pub ports: Vec<SwitchPort>,
    /// Seed of every random decision on the cables.
    pub seed: u64,
    /// The time the switch runs on.
    pub clock: Clock,
    /// Most MAC addresses the switch learns; past that it floods unknown ones.
    pub table_len: usize,
}

impl SwitchConfig {
    /// `n` ports with `caps` each, perfect cables, seed 0, a manual clock, 4096
    /// MAC addresses.
    pub fn new(n: usize, caps: NicCaps) -> SwitchConfig {
        SwitchConfig {
            ports: (0..n)
                .map(|_| SwitchPort {
                    port: PortConfig::new(caps),
                    faults: Faults::NONE,
                })
                .collect(),
            seed: 0,
            clock: Clock::manual(),
            table_len: 4096,
        }
    }
}

/// Forwarding counts of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwitchStats {
    /// Frames sent to the one port that learned their destination.
    pub forwarded: u64,
    /// Frames flooded (unknown unicast, multicast, broadcast).
    pub flooded: u64,
    /// Frames dropped because their destination is on the port they came from.
    pub filtered: u64,
    /// MAC addresses learned.
    pub learned: usize,
}

struct Core {
    table: HashMap<[u8; 6], usize>,
    table_len: usize,
    egress: Vec<Vec<Arc<Mutex<Wire>>>>,
    /// Frames per output port of the current forwarding call.
    out: Vec<Vec<Frame>>,
    stats: SwitchStats,
}

/// A handle on a switch, to look into its table and counts.
#[derive(Clone)]
pub struct Switch {
    core: Arc<Mutex<Core>>,
}

impl core::fmt::Debug for Switch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Switch")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Switch {
    /// Forwarding counts so far.
    pub fn stats(&self) -> SwitchStats {
        let c = lock(&self.core);
        SwitchStats {
            learned: c.table.len(),
            ..c.stats
        }
    }

    /// The port that learned `mac`, if any.
    pub fn lookup(&self, mac: [u8; 6]) -> Option<usize> {
        lock(&self.core).table.get(&mac).copied()
    }

    /// Number of ports.
    pub fn ports(&self) -> usize {
        lock(&self.core).egress.len()
    }
}

/// A port's connection into the switch.
#[derive(Clone)]
pub(crate) struct Uplink {
    core: Arc<Mutex<Core>>,
    port: usize,
}

fn mac_at(frame: &Frame, at: usize) -> Option<[u8; 6]> {
    frame.bytes().get(at..at + 6)?.try_into().ok()
}

impl Uplink {
    /// Learns from and forwards `frames` sent on transmit queue `queue`.
    pub(crate) fn forward(&mut self, queue: usize, frames: impl Iterator<Item = Frame>, now: u64) {
        let mut guard = lock(&self.core);
        let core = &mut *guard;
        let ports = core.egress.len();
        for f in frames {
            let (Some(dst), Some(src)) = (mac_at(&f, 0), mac_at(&f, 6)) else {
                continue;
            };
            let src_unicast = src[0] & 1 == 0;
            if src_unicast && (core.table.len() < core.table_len || core.table.contains_key(&src)) {
                core.table.insert(src, self.port);
            }
            let known = if dst[0] & 1 == 0 {
                core.table.get(&dst).copied()
            } else {
                None
            };
            match known {
                Some(p) if p == self.port => core.stats.filtered += 1,
                Some(p) => {
                    core.stats.forwarded += 1;
                    if let Some(o) = core.out.get_mut(p) {
                        o.push(f);
                    }
                }
                None => {
                    core.stats.flooded += 1;
                    let targets = (0..ports).filter(|&p| p != self.port);
                    let last = targets.clone().next_back();
                    for p in targets {
                        if Some(p) == last {
                            break;
                        }
                        if let Some(o) = core.out.get_mut(p) {
                            o.push(f.clone());
                        }
                    }
                    if let Some(o) = last.and_then(|p| core.out.get_mut(p)) {
                        o.push(f);
                    }
                }
            }
        }
        for (wires, out) in core.egress.iter().zip(core.out.iter_mut()) {
            if !out.is_empty()
                && let Some(wire) = Inbound::wire(wires, queue)
            {
                lock(wire).push(queue, out.drain(..), now);
            }
            out.clear();
        }
    }
}

/// A switch with the ports `cfg` describes, and the NIC on each port.
pub fn switch(cfg: SwitchConfig) -> (Switch, Vec<MemNic>) {
    let inbound: Vec<_> = cfg
        .ports
        .iter()
        .enumerate()
        .map(|(i, p)| inbound(&p.port, &p.faults, wire_seed(cfg.seed, i as u64)))
        .collect();
    let core = Arc::new(Mutex::new(Core {
        table: HashMap::new(),
        table_len: cfg.table_len,
        egress: inbound.iter().map(|i| i.wires.clone()).collect(),
        out: (0..cfg.ports.len()).map(|_| Vec::new()).collect(),
        stats: SwitchStats::default(),
    }));
    let nics = cfg
        .ports
        .iter()
        .zip(inbound)
        .enumerate()
        .map(|(port, (p, inb))| {
            let up = Uplink {
                core: Arc::clone(&core),
                port,
            };
            MemNic::new(&p.port, cfg.clock.clone(), inb, Outbound::Switch(up))
        })
        .collect();
    (Switch { core }, nics)
}
