//! [`Vtep`]: the bridge domains and tunnel NICs of an [`EndpointConfig`], over
//! an underlay and local ports the caller gives (memory ports in tests, TAPs in
//! the binary).
//!
//! Per encapsulation kind (kind and UDP port, GENEVE options) one
//! [`Tunnel::many`] carries that kind's VNIs; when several kinds share the
//! underlay, each group gets a [`super::split::SplitPort`] of it (see there).
//! Per VNI one [`BridgeDomain`] over its [`TunnelNic`] with its own [`Fdb`]
//! (the config's per-VNI bound applies; its total bound applies per domain).
//! A VNI's tunnel reaches the remote VTEPs of its flood list and of its static
//! entries, and accepts frames from those only (`rx_dropped_source`
//! otherwise): learning happens over configured VTEPs.

use super::config::{EncapSpec, EndpointConfig, OuterSpec, VniSpec};
use super::split::{SplitHandle, SplitKey, split};
use crate::bridge::{
    BridgeDomain, Dest, DomainConfig, Fdb, FdbError, FdbRecord, Mac, SuppressConfig, SuppressError,
};
use crate::{
    Encap, Gateway, NextHop, Tunnel, TunnelConfigError, TunnelCounter, TunnelGroup, TunnelNic,
    UdpCsum, VniConfig, VtepConfig,
};
use linerate_nic::Nic;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::Duration;

/// Why a [`Vtep`] could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum VtepError {
    /// VNI `vni` has neither a flood list, a static remote entry nor a
    /// group: no remote VTEP to reach.
    NoRemote(u32),
    /// VNI `vni` was given `got` local ports; its config names `want`.
    Ports {
        /// The VNI.
        vni: u32,
        /// Ports its config names.
        want: usize,
        /// Ports given.
        got: usize,
    },
    /// The tunnel refused its config.
    Tunnel(TunnelConfigError),
    /// A flood-list entry or a static FDB entry was refused.
    Fdb {
        /// The VNI.
        vni: u32,
        /// Why.
        error: FdbError,
    },
    /// A static neighbour entry (ARP/ND suppression) was refused.
    Neighbor {
        /// The VNI.
        vni: u32,
        /// Why.
        error: SuppressError,
    },
}

impl core::fmt::Display for VtepError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VtepError::NoRemote(v) => write!(
                f,
                "vni {v}: no remote VTEP: give it a flood list, a static entry or a group"
            ),
            VtepError::Ports { vni, want, got } => write!(
                f,
                "vni {vni}: {got} local ports given, {want} configured: give one per port \
                 its config names"
            ),
            VtepError::Tunnel(e) => write!(f, "tunnel: {e}"),
            VtepError::Fdb { vni, error } => write!(
                f,
                "vni {vni}: forwarding table: {error}: raise the FDB's bounds or give fewer \
                 entries"
            ),
            VtepError::Neighbor { vni, error } => write!(
                f,
                "vni {vni}: neighbour table: {error}: raise its bounds or give fewer entries"
            ),
        }
    }
}

impl std::error::Error for VtepError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VtepError::Tunnel(e) => Some(e),
            VtepError::Fdb { error, .. } => Some(error),
            VtepError::Neighbor { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl From<TunnelConfigError> for VtepError {
    fn from(e: TunnelConfigError) -> VtepError {
        VtepError::Tunnel(e)
    }
}

/// A VTEP: one bridge domain per VNI over tunnel NICs sharing one underlay.
///
/// `domains`, `names` and `kinds` go by index with `cfg.vnis`: the running
/// configuration, which [`Vtep::apply`] keeps in step with the domains.
pub struct Vtep {
    domains: Vec<BridgeDomain<TunnelNic>>,
    names: Vec<Vec<String>>,
    /// Per domain: the encapsulation's name, for the counters.
    kinds: Vec<&'static str>,
    cfg: EndpointConfig,
    /// Per encapsulation, its outer options and its tunnel: where VNIs are
    /// added at run time.
    groups: Vec<(EncapSpec, OuterSpec, TunnelGroup)>,
    /// The underlay's split between tunnels, once there are several: where
    /// a tunnel added at run time gets its port.
    split: Option<SplitHandle>,
    /// The underlay MAC (outer source MAC of every tunnel).
    mac: [u8; 6],
    /// Learning shared with other replicas ([`Vtep::share_learning`]).
    shared: bool,
    /// Bumped whenever the devices to wait on change ([`Vtep::readiness`]).
    generation: u64,
}

impl core::fmt::Debug for Vtep {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Vtep")
            .field("ports", &self.names)
            .finish_non_exhaustive()
    }
}

/// The encapsulation of a spec, its port, and the key its frames carry.
fn encap_of(e: &EncapSpec) -> (Encap, Option<u16>, SplitKey) {
    match e {
        EncapSpec::Vxlan { port } => (Encap::Vxlan, Some(*port), SplitKey::Udp(*port)),
        EncapSpec::Geneve { port, options } => (
            Encap::Geneve {
                options: options.clone(),
                known_critical: options
                    .iter()
                    .filter(|o| o.kind & 0x80 != 0)
                    .map(|o| (o.class, o.kind))
                    .collect(),
            },
            Some(*port),
            SplitKey::Udp(*port),
        ),
        EncapSpec::Nvgre => (Encap::Nvgre, None, SplitKey::Gre),
    }
}

/// The underlay MAC: configured, or a locally administered one from the address.
pub fn underlay_mac(cfg: &EndpointConfig) -> [u8; 6] {
    if let Some(m) = cfg.underlay.mac {
        return m;
    }
    let o = match cfg.underlay.address {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [0x02, 0x4c, o[0], o[1], o[2], o[3]]
}

/// The MTU of VNI `s`'s overlay: the underlay's less the encapsulation (outer
/// Ethernet, IP, UDP and VXLAN or GENEVE with its options, or GRE). Local
/// ports of that VNI want this MTU, so a host behind them never sends a frame
/// the tunnel has to drop as too long.
pub fn overlay_mtu(cfg: &EndpointConfig, s: &VniSpec) -> u16 {
    let (encap, _, _) = encap_of(&s.encap);
    let v = VtepConfig::new(encap, underlay_mac(cfg), cfg.underlay.address);
    let o = u16::try_from(crate::encap::overhead(&v)).unwrap_or(u16::MAX);
    cfg.underlay.mtu.saturating_sub(o)
}

/// The tunnel of encapsulation `e` with outer options `o`, from `mac` and
/// the underlay address of `cfg`.
fn tunnel_config(cfg: &EndpointConfig, mac: [u8; 6], e: &EncapSpec, o: &OuterSpec) -> VtepConfig {
    let (encap, port, _) = encap_of(e);
    let mut v = VtepConfig::new(encap, mac, cfg.underlay.address);
    if let Some(p) = port {
        v.port = p;
    }
    v.ttl = o.ttl;
    v.multicast_ttl = o.multicast_ttl;
    v.dscp = o.dscp;
    v.df = o.df;
    v.src_ports = o.src_ports.clone();
    v.udp_csum = if o.udp_csum {
        UdpCsum::Compute
    } else {
        UdpCsum::Zero
    };
    v.ipv6_zero_csum = o.udp6_zero_csum;
    v
}

/// The name of an encapsulation in counter names.
fn kind_of(e: &EncapSpec) -> &'static str {
    match e {
        EncapSpec::Vxlan { .. } => "vxlan",
        EncapSpec::Geneve { .. } => "geneve",
        EncapSpec::Nvgre => "nvgre",
    }
}

/// The bridge domain of VNI `s` over its tunnel NIC `t`, with its flood
/// list, static FDB and neighbour entries (no ports yet).
fn domain(
    cfg: &EndpointConfig,
    s: &VniSpec,
    t: TunnelNic,
) -> Result<BridgeDomain<TunnelNic>, VtepError> {
    let mut dc = DomainConfig::new(s.id);
    // A packet the tunnel cannot carry is answered with ICMP, as a
    // router on the path would (the ports have this MTU already).
    dc.mtu = Some(overlay_mtu(cfg, s));
    if s.suppress_arp {
        dc.suppress = Some(SuppressConfig::default());
    }
    dc.learning = s.learning;
    dc.l2miss = s.l2miss;
    let mut d = BridgeDomain::new(dc, t, Fdb::new(cfg.fdb));
    let fdb = |error| VtepError::Fdb { vni: s.id, error };
    // The group gets the floods as a remote VTEP would (Linux lists it as
    // an all-zero entry too).
    for ip in s.flood.iter().chain(&s.group) {
        d.fdb_mut().add_flood(s.id, *ip).map_err(fdb)?;
    }
    for (m, ip) in &s.statics {
        d.fdb_mut()
            .add_static(s.id, *m, Dest::Remote(*ip))
            .map_err(fdb)?;
    }
    if let Some(sup) = d.suppress_mut() {
        for (ip, m) in &s.neighbors {
            sup.add_static(s.id, *ip, *m)
                .map_err(|error| VtepError::Neighbor { vni: s.id, error })?;
        }
    }
    Ok(d)
}

/// The tunnel side of VNI `s`: every remote VTEP it names.
fn vni_config(cfg: &EndpointConfig, s: &VniSpec) -> Result<VniConfig, VtepError> {
    let mut remotes: Vec<IpAddr> = s.flood.clone();
    for ip in s.statics.iter().map(|(_, ip)| ip).chain(&s.group) {
        if !remotes.contains(ip) {
            remotes.push(*ip);
        }
    }
    let Some(&first) = remotes.first() else {
        return Err(VtepError::NoRemote(s.id));
    };
    let u = &cfg.underlay;
    let gateway = u.gateway.map(|ip| Gateway {
        ip,
        prefix: u.prefix,
    });
    let hop = match gateway {
        Some(g) if g.routes(u.address, first) => g.ip,
        _ => first,
    };
    Ok(VniConfig {
        next_hop: NextHop::Resolve(hop),
        remotes: remotes.get(1..).unwrap_or_default().to_vec(),
        gateway,
        group: s.group,
        ..VniConfig::new(s.id, first)
    })
}

/// What a replica learned, for the others ([`Vtep::take_learned`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Learning {
    /// Per VNI: MACs learned anew or moved.
    pub fdb: Vec<(u32, Vec<(Mac, Dest)>)>,
    /// Underlay next hops resolved: address and MAC.
    pub neighbors: Vec<(IpAddr, Mac)>,
}

impl Learning {
    /// Nothing learned.
    pub fn is_empty(&self) -> bool {
        self.neighbors.is_empty() && self.fdb.iter().all(|(_, e)| e.is_empty())
    }

    /// Empties it, keeping the allocations.
    pub fn clear(&mut self) {
        self.neighbors.clear();
        self.fdb.iter_mut().for_each(|(_, e)| e.clear());
    }
}

impl Vtep {
    /// The VTEP of `cfg` over `underlay`, with `ports[i]` the local ports of
    /// `cfg.vnis[i]` in the order its `ports` names them.
    pub fn new(
        cfg: &EndpointConfig,
        underlay: Box<dyn Nic>,
        mut ports: Vec<Vec<Box<dyn Nic>>>,
    ) -> Result<Vtep, VtepError> {
        let mac = underlay_mac(cfg);
        // Group the VNIs by encapsulation (same kind, port and options).
        let mut groups: Vec<(EncapSpec, Vec<usize>)> = Vec::new();
        for (i, s) in cfg.vnis.iter().enumerate() {
            match groups.iter_mut().find(|(e, _)| *e == s.encap) {
                Some((_, v)) => v.push(i),
                None => groups.push((s.encap.clone(), vec![i])),
            }
            let want = s.ports.len();
            let got = ports.get(i).map_or(0, Vec::len);
            if want != got {
                return Err(VtepError::Ports {
                    vni: s.id,
                    want,
                    got,
                });
            }
        }
        let mut split_handle = None;
        let underlays: Vec<Box<dyn Nic>> = if groups.len() == 1 {
            vec![underlay]
        } else {
            let keys = groups.iter().map(|(e, _)| encap_of(e).2).collect();
            let ports = split(underlay, keys);
            split_handle = ports.first().map(|p| p.handle());
            ports
                .into_iter()
                .map(|p| Box::new(p) as Box<dyn Nic>)
                .collect()
        };
        let mut tunnels: Vec<Option<TunnelNic>> = cfg.vnis.iter().map(|_| None).collect();
        let mut tunnel_groups = Vec::with_capacity(groups.len());
        for ((e, members), under) in groups.iter().zip(underlays) {
            // The group's VNIs agree on the outer options (checked with the
            // config).
            let outer = members
                .first()
                .and_then(|&i| cfg.vnis.get(i))
                .map(|s| s.outer.clone())
                .unwrap_or_default();
            let v = tunnel_config(cfg, mac, e, &outer);
            let mut vnis = Vec::with_capacity(members.len());
            for &i in members {
                if let Some(s) = cfg.vnis.get(i) {
                    vnis.push(vni_config(cfg, s)?);
                }
            }
            let nics = Tunnel::many(under, v, vnis)?;
            if let Some(t) = nics.first() {
                tunnel_groups.push((e.clone(), outer, t.group()));
            }
            for (t, &i) in nics.into_iter().zip(members) {
                if let Some(slot) = tunnels.get_mut(i) {
                    *slot = Some(t);
                }
            }
        }
        let mut domains = Vec::with_capacity(cfg.vnis.len());
        let mut names = Vec::with_capacity(cfg.vnis.len());
        let mut kinds = Vec::with_capacity(cfg.vnis.len());
        for (i, (s, t)) in cfg.vnis.iter().zip(tunnels).enumerate() {
            let Some(t) = t else {
                return Err(VtepError::NoRemote(s.id));
            };
            let mut d = domain(cfg, s, t)?;
            for p in ports.get_mut(i).map(core::mem::take).unwrap_or_default() {
                d.add_port(p);
            }
            domains.push(d);
            names.push(s.ports.clone());
            kinds.push(kind_of(&s.encap));
        }
        Ok(Vtep {
            domains,
            names,
            kinds,
            cfg: cfg.clone(),
            groups: tunnel_groups,
            split: split_handle,
            mac,
            shared: false,
            generation: 0,
        })
    }

    /// Moves one round of frames in every domain at time `now` (any clock
    /// that only goes forward; ageing runs on it); returns the frames moved.
    pub fn poll(&mut self, now: Duration) -> usize {
        self.domains.iter_mut().map(|d| d.poll(now)).sum()
    }

    /// What to wait on for frames: queue 0 of every local port and of the
    /// underlay (once per VNI; the same descriptor or notify).
    pub fn readiness(&self) -> Vec<linerate_nic::Readiness> {
        let mut out = Vec::new();
        for d in &self.domains {
            let mut n = 0u16;
            while let Some(p) = d.port(n) {
                out.extend(p.readiness(0).ok());
                n += 1;
            }
            out.extend(Nic::readiness(d.overlay(), 0).ok());
        }
        out
    }

    /// Shares learning between replicas of this VTEP (one per queue, each on
    /// its own thread over its own queue of the same devices): the MACs each
    /// learns anew or sees move (see [`BridgeDomain::share_learning`]) and the
    /// underlay next hops it resolves (an ARP or neighbour answer arrives on
    /// whichever queue the underlay picks).
    pub fn share_learning(&mut self, on: bool) {
        self.shared = on;
        for d in &mut self.domains {
            d.share_learning(on);
            d.overlay().share_neighbors(on);
        }
    }

    /// What was learned since the last call, appended to `out`.
    pub fn take_learned(&mut self, out: &mut Learning) {
        for d in &mut self.domains {
            let vni = d.overlay().vni().vni;
            let at = match out.fdb.iter().position(|(v, _)| *v == vni) {
                Some(at) => at,
                None => {
                    out.fdb.push((vni, Vec::new()));
                    out.fdb.len() - 1
                }
            };
            if let Some((_, o)) = out.fdb.get_mut(at) {
                d.take_learned(o);
            }
            d.overlay().take_neighbors(&mut out.neighbors);
        }
    }

    /// Learns what another replica learned (for the VNIs this one has).
    pub fn apply_learned(&mut self, now: Duration, learning: &Learning) {
        for (vni, e) in &learning.fdb {
            if let Some(d) = self
                .domains
                .iter_mut()
                .find(|d| d.overlay().vni().vni == *vni)
            {
                d.apply_learned(now, e);
            }
        }
        for &(ip, mac) in &learning.neighbors {
            for d in &self.domains {
                d.overlay().learn_neighbor(ip, mac);
            }
        }
    }

    /// Leaves every underlay multicast group (`group`) now: for a VTEP that
    /// is stopping, which should keep its devices a moment longer (see
    /// [`TunnelNic::leave_groups`]). Returns how many groups were left.
    pub fn leave_groups(&self) -> usize {
        self.domains
            .iter()
            .map(|d| d.overlay().leave_groups())
            .sum()
    }

    /// The bridge domains, in the config's VNI order.
    pub fn domains(&self) -> &[BridgeDomain<TunnelNic>] {
        &self.domains
    }

    /// The bridge domains, mutable (static entries at run time).
    pub fn domains_mut(&mut self) -> &mut [BridgeDomain<TunnelNic>] {
        &mut self.domains
    }

    /// Every FDB entry of every VNI, like `bridge fdb show`.
    pub fn dump(&self, now: Duration) -> Vec<FdbRecord> {
        self.domains.iter().flat_map(|d| d.dump(now)).collect()
    }

    /// Every counter, named `vni<N>.<port>.<counter>` (ports by their config
    /// name, the tunnel by its encapsulation: `vxlan`, `geneve` or `nvgre`), `vni<N>.fdb.<counter>` and
    /// `vni<N>.tunnel.<counter>`, like `ethtool -S`; zeros included.
    pub fn counters(&self) -> Vec<(String, u64)> {
        self.samples()
            .into_iter()
            .map(|s| (s.dotted(), s.value))
            .collect()
    }

    /// Every counter with where it belongs ([`Vtep::counters`] names them
    /// from this).
    pub fn samples(&self) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut push = |scope: &Scope, name: &str, value: u64| {
            out.push(Sample {
                scope: scope.clone(),
                name: name.to_owned(),
                value,
            });
        };
        for ((d, names), kind) in self.domains.iter().zip(&self.names).zip(&self.kinds) {
            let vni = d.overlay().vni().vni;
            for (n, name) in names.iter().enumerate() {
                let Some(c) = u16::try_from(n).ok().and_then(|n| d.port_counters(n)) else {
                    continue;
                };
                let scope = Scope::Port {
                    vni,
                    port: name.clone(),
                };
                for (k, v) in c.named() {
                    push(&scope, k, v);
                }
            }
            let scope = Scope::Overlay {
                vni,
                tunnel: (*kind).to_owned(),
            };
            for (k, v) in d.overlay_counters().named() {
                push(&scope, k, v);
            }
            if let Some(c) = d.fdb().counters(vni) {
                for (k, v) in c.named() {
                    push(&Scope::Fdb { vni }, k, v);
                }
            }
            let t = d.overlay().tunnel_counters();
            let scope = Scope::Tunnel {
                vni,
                tunnel: (*kind).to_owned(),
            };
            for c in TunnelCounter::ALL {
                push(&scope, c.name(), t.get(*c));
            }
        }
        // What the VTEP refused before a VNI was known, and the underlay NIC's
        // own counters: once (every VNI shares them; over several
        // encapsulations, the first one's).
        if let Some(d) = self.domains.first() {
            let t = d.overlay().vtep_counters();
            for c in TunnelCounter::ALL {
                push(&Scope::Vtep, c.name(), t.get(*c));
            }
            let snap = d.overlay().with_underlay(|u| u.counters().snapshot());
            for (k, v) in snap.totals() {
                push(&Scope::Underlay, k, v);
            }
        }
        out
    }
}

/// Where a counter of [`Vtep::samples`] belongs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "snake_case")]
pub enum Scope {
    /// A local port of a VNI ([`crate::bridge::PortCounters`]).
    Port {
        /// The VNI.
        vni: u32,
        /// The port's name.
        port: String,
    },
    /// A VNI's side toward the remote VTEPs ([`crate::bridge::PortCounters`]).
    Overlay {
        /// The VNI.
        vni: u32,
        /// Its encapsulation (`vxlan`, `geneve`, `nvgre`).
        tunnel: String,
    },
    /// A VNI's forwarding table ([`crate::bridge::FdbCounters`]).
    Fdb {
        /// The VNI.
        vni: u32,
    },
    /// A VNI's tunnel ([`TunnelCounter`]).
    Tunnel {
        /// The VNI.
        vni: u32,
        /// Its encapsulation.
        tunnel: String,
    },
    /// What the VTEP refused before a VNI was known ([`TunnelCounter`]).
    Vtep,
    /// The underlay NIC ([`linerate_nic::Counter`]).
    Underlay,
    /// The process running the VTEP (counters of its own).
    Process,
}

/// One counter and where it belongs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// Where.
    #[serde(flatten)]
    pub scope: Scope,
    /// The counter's `ethtool -S` style name.
    pub name: String,
    /// Its value.
    pub value: u64,
}

impl Sample {
    /// The name [`Vtep::counters`] gives it: `vni42.p0.rx_packets`,
    /// `vni42.vxlan.tx_packets`, `vni42.fdb.fdb_learned`,
    /// `vni42.tunnel.rx_decap`, `vtep.rx_dropped_not_ours`,
    /// `underlay.rx_packets`; a process counter by its name with `vtep.`.
    pub fn dotted(&self) -> String {
        let n = &self.name;
        match &self.scope {
            Scope::Port { vni, port } => format!("vni{vni}.{port}.{n}"),
            Scope::Overlay { vni, tunnel } => format!("vni{vni}.{tunnel}.{n}"),
            Scope::Fdb { vni } => format!("vni{vni}.fdb.{n}"),
            Scope::Tunnel { vni, .. } => format!("vni{vni}.tunnel.{n}"),
            Scope::Vtep | Scope::Process => format!("vtep.{n}"),
            Scope::Underlay => format!("underlay.{n}"),
        }
    }

    /// The counters of several replicas of one VTEP as one: summed, but the
    /// FDB's taken from the first replica only (the replicas' tables are
    /// copies of each other, each counting what it learned itself or was
    /// told). In the first replica's order; counters another replica has
    /// and the first has not (a VNI just added there) come after.
    pub fn merge(replicas: &[Vec<Sample>]) -> Vec<Sample> {
        let mut out: Vec<Sample> = Vec::new();
        let mut at: std::collections::HashMap<(Scope, String), usize> =
            std::collections::HashMap::new();
        for (i, r) in replicas.iter().enumerate() {
            for s in r {
                let fdb = matches!(s.scope, Scope::Fdb { .. });
                match at.get(&(s.scope.clone(), s.name.clone())) {
                    Some(&k) => {
                        if !fdb && let Some(o) = out.get_mut(k) {
                            o.value = o.value.saturating_add(s.value);
                        }
                    }
                    None if i == 0 || !fdb => {
                        at.insert((s.scope.clone(), s.name.clone()), out.len());
                        out.push(s.clone());
                    }
                    None => {}
                }
            }
        }
        out
    }
}

mod apply;
pub use apply::EditError;
