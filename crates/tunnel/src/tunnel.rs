//! The overlay NIC: [`Tunnel`] builds [`TunnelNic`]s over an underlay.

use crate::bridge::Overlay;
use crate::config::{Encap, MAX_REMOTES, NextHop, TunnelConfigError, VniConfig, VtepConfig};
use crate::counters::{TunnelCounter, TunnelCounters};
use crate::decap::{self, Control, Decap, Refused, RxConfig};
use crate::encap::{Template, overhead};
use crate::mcast::{Membership, group_mac};
use crate::neigh;
use crate::{EcnDecap, decap_ecn};
use linerate_nic::neigh::{Lookup, NeighborCache, Queued};
use linerate_nic::{
    Batch, Counter, Counters, Frame, MetaError, Nic, NicCaps, NicError, Offloads, PacketBuf, Pool,
    Readiness, Recorder,
};
use linerate_offload::{Checksum, GsoTunnel, OffloadMeta};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Frames one VNI's per-queue inbox holds (received on another VNI's call);
/// more are dropped (`rx_dropped_ring_full`).
pub const INBOX_LEN: usize = 4096;

/// Builds overlay NICs over an underlay.
#[derive(Debug)]
pub struct Tunnel;

/// One remote VTEP of a VNI: its outer header template (destination address
/// and MAC in place) and its next hop.
struct Peer {
    ip: IpAddr,
    template: Template,
    /// The next hop to resolve; `None` with a static MAC.
    hop: Option<IpAddr>,
    /// The MAC in the template (static, or as last resolved).
    mac: Option<[u8; 6]>,
}

/// One VNI's shared state.
struct VniState {
    cfg: VniConfig,
    /// `cfg.remote_ip` first, then `cfg.remotes`.
    peers: Vec<Peer>,
    /// Frames for this VNI received on another VNI's call, with their outer
    /// source address.
    inbox: Vec<VecDeque<(IpAddr, Frame)>>,
    counters: Counters,
    tcounters: TunnelCounters,
}

/// Counts a probe started by VNI `index`'s traffic on that VNI too.
fn tcounters_probe(vnis: &mut [VniState], index: usize) {
    if let Some(s) = vnis.get_mut(index) {
        s.tcounters.add(TunnelCounter::NeighProbes, 1);
    }
}

/// The state every VNI of one underlay shares.
struct Vtep {
    underlay: Box<dyn Nic>,
    config: VtepConfig,
    rx: RxConfig,
    counters: TunnelCounters,
    vnis: Vec<VniState>,
    control: Batch,
    pool: Pool,
    /// The next hops of every VNI's remotes: the engine's neighbour table,
    /// holding the encapsulated frames that wait for their next hop.
    neigh: NeighborCache<Instant, Frame>,
    /// Frames whose next hop was resolved, with its MAC in place, to send.
    ready: Batch,
    /// Addresses to probe (scratch for [`NeighborCache::poll`]).
    probes: Vec<IpAddr>,
    /// Next hops resolved since [`TunnelNic::take_neighbors`], when shared.
    resolved: Option<Vec<(IpAddr, [u8; 6])>>,
    /// VNIs whose layer above takes scatter-gather frames
    /// ([`Nic::set_rx_sg`]); while there is one, the underlay is asked for
    /// them, and `underlay_sg` says whether it hands them up.
    sg_users: usize,
    underlay_sg: bool,
    /// The multicast groups joined (every VNI's `group`).
    mcast: Membership,
    /// Frames `mcast` made, to go out with the control frames.
    mcast_out: Vec<Vec<u8>>,
}

/// One VNI's overlay NIC: inner Ethernet frames in and out, carried over the
/// underlay in the VTEP's encapsulation.
///
/// Its [`Nic::counters`] count inner frames (`rx_packets`, `tx_packets`,
/// `tx_dropped_oversize`...); [`TunnelNic::tunnel_counters`] what this VNI
/// refused, [`TunnelNic::vtep_counters`] what the VTEP refused before a VNI
/// was known.
pub struct TunnelNic {
    vtep: Arc<Mutex<Vtep>>,
    index: usize,
    vni: VniConfig,
    caps: NicCaps,
    hlen: usize,
    counters: Counters,
    tcounters: TunnelCounters,
    vcounters: TunnelCounters,
    pool: Pool,
    pending: Vec<Batch>,
    /// [`Overlay`] side: the underlay queue it uses, its receive scratch.
    overlay_queue: usize,
    scratch: Batch,
    sources: Vec<IpAddr>,
    /// The underlay takes scatter-gather frames: so does this NIC (the
    /// tunnel's headers go into the head, the payload stays where it is).
    tx_sg: bool,
    /// The layer above takes scatter-gather frames ([`Nic::set_rx_sg`]).
    up_sg: bool,
}

impl core::fmt::Debug for TunnelNic {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TunnelNic")
            .field("vni", &self.vni)
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

/// The overlay's caps over an underlay with `u`.
fn overlay_caps(
    u: &NicCaps,
    hlen: usize,
    offloads: bool,
    encap: &Encap,
    csum: bool,
) -> Option<NicCaps> {
    let mtu = u16::try_from(usize::from(u.mtu).checked_sub(hlen)?).ok()?;
    if mtu < 68 {
        return None;
    }
    let o = u.offloads;
    let tunnel = match encap {
        Encap::Nvgre => o.tunnel_gre,
        _ if csum => o.tunnel_udp_csum,
        _ => o.tunnel_udp,
    };
    let offloads = if offloads {
        Offloads {
            tx_csum: o.tx_csum,
            rx_csum: o.rx_csum,
            tso4: o.tso4 && tunnel,
            tso6: o.tso6 && tunnel,
            tso_ecn: o.tso_ecn && tunnel,
            uso: o.uso && tunnel,
            lro: o.lro,
            ..Offloads::NONE
        }
    } else {
        Offloads::NONE
    };
    Some(NicCaps {
        mtu,
        max_gso_size: u.max_gso_size.saturating_sub(u32::try_from(hlen).ok()?),
        offloads,
        ..*u
    })
}

/// The remote VTEP at `ip` of VNI `v`: its outer header template and next
/// hop. The first remote (`v.remote_ip`) is reached through `v.next_hop`;
/// the others on-link, or through the gateway when outside the prefix (a
/// static next-hop MAC serves them all).
fn make_peer(
    vtep: &VtepConfig,
    v: &VniConfig,
    first: bool,
    ip: IpAddr,
) -> Result<Peer, TunnelConfigError> {
    let hop = match (first, v.next_hop, v.gateway) {
        (true, h, _) | (_, h @ NextHop::Static(_), _) => h,
        (_, NextHop::Resolve(_), Some(g)) if g.routes(vtep.local_ip, ip) => NextHop::Resolve(g.ip),
        (_, NextHop::Resolve(_), _) => NextHop::Resolve(ip),
    };
    let (hop, mac) = match hop {
        // A group's frames go to its Ethernet address: nothing to resolve.
        _ if ip.is_multicast() => (None, Some(group_mac(ip))),
        NextHop::Resolve(h) => (Some(h), None),
        NextHop::Static(m) => (None, Some(m)),
    };
    let template = if ip.is_multicast() {
        let to_group = VtepConfig {
            ttl: vtep.multicast_ttl,
            ..vtep.clone()
        };
        Template::new(&to_group, v, ip, mac.unwrap_or([0; 6]))?
    } else {
        Template::new(vtep, v, ip, mac.unwrap_or([0; 6]))?
    };
    Ok(Peer {
        ip,
        template,
        hop,
        mac,
    })
}

/// Every address of `v` is of the local address's family.
fn check_family(vtep: &VtepConfig, v: &VniConfig) -> Result<(), TunnelConfigError> {
    let fam = vtep.local_ip.is_ipv6();
    let hop = match v.next_hop {
        NextHop::Resolve(ip) => Some(ip),
        NextHop::Static(_) => None,
    };
    let mismatch = std::iter::once(v.remote_ip)
        .chain(hop)
        .chain(v.allowed_sources.iter().copied())
        .chain(v.remotes.iter().copied())
        .chain(v.gateway.map(|g| g.ip))
        .chain(v.group)
        .find(|a| a.is_ipv6() != fam);
    match mismatch {
        Some(other) => Err(TunnelConfigError::Family {
            local: vtep.local_ip,
            other,
        }),
        None => Ok(()),
    }
}

impl Tunnel {
    /// One overlay NIC for `vni` over `underlay` (typically a
    /// [`linerate_nic::Shim`] over a backend).
    #[allow(clippy::new_ret_no_self)]
    pub fn new<N: Nic + 'static>(
        underlay: N,
        vtep: VtepConfig,
        vni: VniConfig,
    ) -> Result<TunnelNic, TunnelConfigError> {
        let mut v = Tunnel::many(underlay, vtep, vec![vni])?;
        v.pop().ok_or(TunnelConfigError::NoVni)
    }

    /// One overlay NIC per VNI of `vnis`, in that order, all over `underlay`
    /// and sharing its queues (see the crate docs).
    pub fn many<N: Nic + 'static>(
        underlay: N,
        vtep: VtepConfig,
        vnis: Vec<VniConfig>,
    ) -> Result<Vec<TunnelNic>, TunnelConfigError> {
        if vnis.is_empty() {
            return Err(TunnelConfigError::NoVni);
        }
        let queues = underlay.queues();
        let hlen = overhead(&vtep);
        let mut states = Vec::with_capacity(vnis.len());
        for (i, v) in vnis.iter().enumerate() {
            if vnis.iter().take(i).any(|w| w.vni == v.vni) {
                return Err(TunnelConfigError::DuplicateVni { vni: v.vni });
            }
            states.push(vni_state(&vtep, v, queues)?);
        }
        let csum = states
            .first()
            .and_then(|s| s.peers.first())
            .is_some_and(|p| p.template.csum);
        let caps = overlay_caps(underlay.caps(), hlen, vtep.offloads, &vtep.encap, csum).ok_or(
            TunnelConfigError::Mtu {
                mtu: underlay.caps().mtu,
                overhead: hlen,
            },
        )?;
        let pool = underlay.pool().clone();
        let tx_sg = underlay.tx_sg();
        let vcounters = TunnelCounters::new();
        let rx = RxConfig {
            local_ip: vtep.local_ip,
            port: vtep.port,
            encap: vtep.encap.clone(),
            zero_csum6: vtep.ipv6_zero_csum,
            local_mac: vtep.local_mac,
            groups: Vec::new(),
        };
        let mcast = Membership::new(vtep.local_ip, vtep.local_mac);
        let nics: Vec<(Counters, TunnelCounters)> = states
            .iter()
            .map(|s| (s.counters.clone(), s.tcounters.clone()))
            .collect();
        let vtep_neighbors = vtep.neighbors;
        let shared = Arc::new(Mutex::new(Vtep {
            underlay: Box::new(underlay),
            config: vtep,
            rx,
            counters: vcounters.clone(),
            vnis: states,
            control: Batch::new(),
            neigh: NeighborCache::new(vtep_neighbors),
            ready: Batch::new(),
            probes: Vec::new(),
            resolved: None,
            pool: pool.clone(),
            sg_users: 0,
            underlay_sg: false,
            mcast,
            mcast_out: Vec::new(),
        }));
        {
            let mut g = match shared.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            let groups: Vec<IpAddr> = vnis.iter().filter_map(|v| v.group).collect();
            g.join(&groups);
        }
        let group = TunnelGroup {
            vtep: shared,
            caps,
            hlen,
            vcounters,
            pool,
            queues,
            tx_sg,
        };
        Ok(nics
            .into_iter()
            .zip(vnis)
            .enumerate()
            .map(|(index, ((counters, tcounters), vni))| group.nic(index, vni, counters, tcounters))
            .collect())
    }
}

/// One VNI's shared state: its remote VTEPs (`remote_ip` first, then
/// `remotes` without repeats) and an inbox per underlay queue.
fn vni_state(
    vtep: &VtepConfig,
    v: &VniConfig,
    queues: usize,
) -> Result<VniState, TunnelConfigError> {
    check_family(vtep, v)?;
    let mut ips = vec![v.remote_ip];
    for r in &v.remotes {
        if !ips.contains(r) {
            if ips.len() >= MAX_REMOTES {
                return Err(TunnelConfigError::TooManyRemotes { vni: v.vni });
            }
            ips.push(*r);
        }
    }
    let mut peers = Vec::with_capacity(ips.len());
    for (k, ip) in ips.into_iter().enumerate() {
        peers.push(make_peer(vtep, v, k == 0, ip)?);
    }
    Ok(VniState {
        cfg: v.clone(),
        peers,
        inbox: (0..queues).map(|_| VecDeque::new()).collect(),
        counters: Counters::new(queues),
        tcounters: TunnelCounters::new(),
    })
}

/// The VNI a removed VNI's slot holds: none that a header carries (VNIs
/// are 24 bits), so the receive path's lookup passes over the slot at no
/// cost, and frames of the removed VNI count as `rx_dropped_unknown_vni`.
const FREE_SLOT: u32 = u32::MAX;

/// The tunnel of [`Tunnel::many`]'s NICs (their shared underlay and
/// encapsulation), to add VNIs to at run time ([`TunnelGroup::add_vni`]).
/// It keeps the underlay open while held, even when no VNI is left.
#[derive(Clone)]
pub struct TunnelGroup {
    vtep: Arc<Mutex<Vtep>>,
    caps: NicCaps,
    hlen: usize,
    vcounters: TunnelCounters,
    pool: Pool,
    queues: usize,
    tx_sg: bool,
}

impl core::fmt::Debug for TunnelGroup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TunnelGroup")
            .field("vnis", &self.vnis())
            .finish_non_exhaustive()
    }
}

impl TunnelGroup {
    fn nic(
        &self,
        index: usize,
        vni: VniConfig,
        counters: Counters,
        tcounters: TunnelCounters,
    ) -> TunnelNic {
        TunnelNic {
            vtep: Arc::clone(&self.vtep),
            index,
            vni,
            caps: self.caps,
            hlen: self.hlen,
            counters,
            tcounters,
            vcounters: self.vcounters.clone(),
            pool: self.pool.clone(),
            pending: (0..self.queues).map(|_| Batch::new()).collect(),
            overlay_queue: 0,
            scratch: Batch::new(),
            sources: Vec::new(),
            tx_sg: self.tx_sg,
            up_sg: false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vtep> {
        match self.vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Replaces the tunnel's underlay by `f` of it (to share it with
    /// another tunnel through [`crate::vtep::split`]); a control operation
    /// between two polls.
    pub fn wrap_underlay(&self, f: impl FnOnce(Box<dyn Nic>) -> Box<dyn Nic>) {
        let mut g = self.lock();
        let caps = *g.underlay.caps();
        let (stand_in, _) = linerate_nic::MemNic::pair(caps, caps);
        let old = core::mem::replace(&mut g.underlay, Box::new(stand_in));
        g.underlay = f(old);
        // The groups joined: the new underlay's filter follows them.
        if !g.rx.groups.is_empty() {
            g.groups_changed();
        }
    }

    /// The VNIs the tunnel carries now, in no particular order.
    pub fn vnis(&self) -> Vec<u32> {
        self.lock()
            .vnis
            .iter()
            .map(|v| v.cfg.vni)
            .filter(|v| *v != FREE_SLOT)
            .collect()
    }

    /// A NIC for one more VNI on this tunnel, as [`Tunnel::many`] would have
    /// made it; the VNI's frames are taken from the underlay from now on.
    /// Dropping the NIC removes the VNI again.
    ///
    /// Errors: [`TunnelConfigError::DuplicateVni`] if the tunnel carries it
    /// already; the others as [`Tunnel::many`].
    pub fn add_vni(&self, vni: VniConfig) -> Result<TunnelNic, TunnelConfigError> {
        if vni.vni >= 1 << 24 {
            return Err(TunnelConfigError::VniTooLarge { vni: vni.vni });
        }
        let mut g = self.lock();
        if g.vnis.iter().any(|v| v.cfg.vni == vni.vni) {
            return Err(TunnelConfigError::DuplicateVni { vni: vni.vni });
        }
        let state = vni_state(&g.config, &vni, self.queues)?;
        let (counters, tcounters) = (state.counters.clone(), state.tcounters.clone());
        g.join(vni.group.as_slice());
        let index = match g.vnis.iter().position(|v| v.cfg.vni == FREE_SLOT) {
            Some(i) => {
                if let Some(slot) = g.vnis.get_mut(i) {
                    *slot = state;
                }
                i
            }
            None => {
                g.vnis.push(state);
                g.vnis.len() - 1
            }
        };
        drop(g);
        Ok(self.nic(index, vni, counters, tcounters))
    }
}

/// One remote VTEP of a VNI as [`TunnelNic::remotes`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteVtep {
    /// Its underlay address.
    pub ip: IpAddr,
    /// The next hop resolved to reach it (itself, or the gateway); `None`
    /// with a static next-hop MAC.
    pub next_hop: Option<IpAddr>,
    /// The next hop's MAC, once known.
    pub mac: Option<[u8; 6]>,
}

impl TunnelNic {
    /// This VNI's configuration (its remotes as they are now).
    pub fn vni(&self) -> &VniConfig {
        &self.vni
    }

    /// The tunnel this NIC is on, to add VNIs to it.
    pub fn group(&self) -> TunnelGroup {
        let queues = self.pending.len();
        TunnelGroup {
            vtep: Arc::clone(&self.vtep),
            caps: self.caps,
            hlen: self.hlen,
            vcounters: self.vcounters.clone(),
            pool: self.pool.clone(),
            queues,
            tx_sg: self.tx_sg,
        }
    }

    /// Adds a remote VTEP to this VNI: [`TunnelNic::transmit_to`] reaches it,
    /// and frames from it are accepted, from now on (its next hop is
    /// resolved with the first frame). False if it was one already.
    ///
    /// Errors: [`TunnelConfigError::Family`] for an address of the other
    /// family, [`TunnelConfigError::TooManyRemotes`] past [`MAX_REMOTES`].
    pub fn add_remote(&mut self, ip: IpAddr) -> Result<bool, TunnelConfigError> {
        let vtep = Arc::clone(&self.vtep);
        let mut g = match vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let v = &mut *g;
        let Some(s) = v.vnis.get_mut(self.index) else {
            return Ok(false);
        };
        if s.peers.iter().any(|p| p.ip == ip) {
            return Ok(false);
        }
        if ip.is_ipv6() != v.config.local_ip.is_ipv6() {
            return Err(TunnelConfigError::Family {
                local: v.config.local_ip,
                other: ip,
            });
        }
        if s.peers.len() >= MAX_REMOTES {
            return Err(TunnelConfigError::TooManyRemotes { vni: self.vni.vni });
        }
        let first = s.peers.is_empty();
        if first {
            self.vni.remote_ip = ip;
        } else {
            self.vni.remotes.push(ip);
        }
        s.peers.push(make_peer(&v.config, &self.vni, first, ip)?);
        s.cfg = self.vni.clone();
        Ok(true)
    }

    /// Removes a remote VTEP of this VNI: frames toward it are dropped
    /// (`tx_dropped_unknown_remote`) and frames from it refused
    /// (`rx_dropped_source`) from now on. When it was the first remote
    /// ([`Nic::transmit`]'s destination), the next one takes its place.
    /// False if it was none.
    pub fn remove_remote(&mut self, ip: IpAddr) -> bool {
        let vtep = Arc::clone(&self.vtep);
        let mut g = match vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let Some(s) = g.vnis.get_mut(self.index) else {
            return false;
        };
        let Some(at) = s.peers.iter().position(|p| p.ip == ip) else {
            return false;
        };
        s.peers.remove(at);
        let mut ips = s.peers.iter().map(|p| p.ip);
        if let Some(first) = ips.next() {
            self.vni.remote_ip = first;
        }
        self.vni.remotes = ips.collect();
        s.cfg = self.vni.clone();
        true
    }

    /// The remote VTEPs of this VNI and their next hops.
    pub fn remotes(&self) -> Vec<RemoteVtep> {
        let g = self.lock();
        g.vnis
            .get(self.index)
            .map(|s| {
                s.peers
                    .iter()
                    .map(|p| RemoteVtep {
                        ip: p.ip,
                        next_hop: p.hop,
                        mac: p.mac,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Leaves every multicast group the tunnel joined, now (the leaves go
    /// out on the underlay's queue 0 before this returns), and stops
    /// answering queries for them: for a VTEP on its way out, which then
    /// keeps its underlay open a moment, so the leaves are not lost with a
    /// device that goes away at once (a TAP's backlog is freed with it).
    /// Returns how many groups were left.
    pub fn leave_groups(&self) -> usize {
        let mut g = self.lock();
        let n = g.mcast.groups().count();
        if n > 0 {
            let mut out = core::mem::take(&mut g.mcast_out);
            g.mcast.leave_all(Instant::now(), &mut out);
            g.mcast_out = out;
            g.groups_changed();
            g.poll_mcast(Instant::now());
            g.send_control(0);
        }
        n
    }

    /// What this VNI refused after its VNI was known.
    pub fn tunnel_counters(&self) -> &TunnelCounters {
        &self.tcounters
    }

    /// What the VTEP refused before a VNI was known (shared by every VNI).
    pub fn vtep_counters(&self) -> &TunnelCounters {
        &self.vcounters
    }

    /// Keeps the next hops this VTEP resolves (ARP / neighbour discovery
    /// answers and refreshes), for [`TunnelNic::take_neighbors`]: replicas of
    /// one VTEP over different queues of one underlay (one per thread) share
    /// them, since an answer arrives on whichever queue the underlay picks.
    /// Shared by every VNI of the VTEP.
    pub fn share_neighbors(&self, on: bool) {
        self.lock().resolved = on.then(Vec::new);
    }

    /// Moves the next hops resolved since the last call into `out`.
    pub fn take_neighbors(&self, out: &mut Vec<(IpAddr, [u8; 6])>) {
        if let Some(r) = self.lock().resolved.as_mut() {
            out.append(r);
        }
    }

    /// Learns that `ip` is at `mac`, as if its ARP or neighbour advertisement
    /// had arrived here (another replica's [`TunnelNic::take_neighbors`]);
    /// only next hops this VTEP resolves are taken.
    pub fn learn_neighbor(&self, ip: IpAddr, mac: [u8; 6]) {
        let mut v = self.lock();
        let shared = v.resolved.take();
        v.learn(ip, mac, Instant::now());
        v.resolved = shared;
    }

    /// Runs `f` on the underlay (locks it: not for the data path).
    pub fn with_underlay<R>(&self, f: impl FnOnce(&mut dyn Nic) -> R) -> R {
        f(self.lock().underlay.as_mut())
    }

    /// The encapsulation overhead in bytes: outer Ethernet, IP, UDP and tunnel
    /// header (GENEVE options included) or GRE.
    pub fn overhead(&self) -> usize {
        self.hlen
    }

    fn lock(&self) -> MutexGuard<'_, Vtep> {
        match self.vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Vtep {
    /// Joins `groups` (those not joined yet): reports go out with the next
    /// control frames, and the receive path and the underlay's filter take
    /// the groups' frames.
    fn join(&mut self, groups: &[IpAddr]) {
        let now = Instant::now();
        let mut out = core::mem::take(&mut self.mcast_out);
        let mut changed = false;
        for g in groups {
            changed |= self.mcast.join(now, *g, &mut out);
        }
        self.mcast_out = out;
        if changed {
            self.groups_changed();
        }
    }

    /// Leaves `g` unless a VNI still has it.
    fn leave_unused(&mut self, g: IpAddr) {
        if self
            .vnis
            .iter()
            .any(|v| v.cfg.vni != FREE_SLOT && v.cfg.group == Some(g))
        {
            return;
        }
        let mut out = core::mem::take(&mut self.mcast_out);
        if self.mcast.leave(Instant::now(), g, &mut out) {
            self.groups_changed();
        }
        self.mcast_out = out;
    }

    /// The groups joined changed: the receive path follows, and the
    /// underlay's multicast filter where it has one (all off again with no
    /// group left, as before the first).
    fn groups_changed(&mut self) {
        self.rx.groups = self.mcast.groups().collect();
        let r = if self.rx.groups.is_empty() {
            self.underlay.set_multicast_filter([0; 6], &[])
        } else {
            self.underlay
                .set_multicast_filter(self.config.local_mac, &self.mcast.macs())
        };
        // A backend without a filter hands up every frame: nothing to do.
        let _ = r;
    }

    /// Counts an IGMP / MLD message heard.
    fn heard(&mut self, r: Result<bool, ()>) {
        match r {
            Ok(true) => self.counters.add(TunnelCounter::McastQueries, 1),
            Ok(false) => {}
            Err(()) => self.counters.add(TunnelCounter::McastBad, 1),
        }
    }

    /// The membership's reports due at `now` join the control frames.
    fn poll_mcast(&mut self, now: Instant) {
        let mut out = core::mem::take(&mut self.mcast_out);
        self.mcast.poll(now, &mut out);
        if !out.is_empty() {
            self.counters
                .add(TunnelCounter::McastReports, out.len() as u64);
            for m in out.drain(..) {
                self.control.push(Frame::plain(self.pool.alloc_from(&m)));
            }
        }
        self.mcast_out = out;
    }

    /// Sends control frames (ARP/ND answers, probes) on `queue`; best effort.
    fn send_control(&mut self, queue: usize) {
        if !self.control.is_empty() {
            let _ = self.underlay.transmit(queue, &mut self.control);
            self.control.clear();
        }
        // Frames released by a resolution; what the underlay cannot take now
        // waits for the next call.
        if !self.ready.is_empty() {
            let _ = self.underlay.transmit(queue, &mut self.ready);
        }
    }

    /// Sends an ARP request or neighbour solicitation for `target`.
    fn probe(&mut self, target: IpAddr) {
        let (mac, ip) = (self.config.local_mac, self.config.local_ip);
        if let Some(f) = neigh::probe(&self.pool, mac, ip, target) {
            self.control.push(f);
            self.counters.add(TunnelCounter::NeighProbes, 1);
        }
    }

    /// Runs the neighbour table's retry timers (only when one is due): probes
    /// again, or gives up and drops the frames that waited (counted in the
    /// VTEP's `tx_dropped_unresolved`).
    fn poll_neigh(&mut self, now: Instant) {
        if self.neigh.next_deadline().is_none_or(|d| d > now) {
            return;
        }
        let mut probes = core::mem::take(&mut self.probes);
        let (_, dropped) = self.neigh.poll(now, &mut probes);
        for ip in probes.drain(..) {
            self.probe(ip);
        }
        self.probes = probes;
        self.counters
            .add(TunnelCounter::TxUnresolved, dropped as u64);
    }

    /// Learns that a next hop of ours is at `mac`: its waiting frames get the
    /// MAC and go, and the remotes behind it use it from now on.
    fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) {
        let mut used = false;
        for p in self.vnis.iter_mut().flat_map(|v| v.peers.iter_mut()) {
            if p.hop == Some(ip) {
                used = true;
                if p.mac != Some(mac) {
                    p.template.set_dst_mac(mac);
                    p.mac = Some(mac);
                }
            }
        }
        if !used {
            return;
        }
        if let Ok(waiting) = self.neigh.learn(now, ip, mac, true) {
            for mut f in waiting {
                if let Some(d) = f.bytes_mut().get_mut(0..6) {
                    d.copy_from_slice(&mac);
                }
                self.ready.push(f);
            }
        }
        if let Some(out) = self.resolved.as_mut()
            && out.len() < 1024
        {
            out.push((ip, mac));
        }
    }

    /// Decapsulates one underlay frame in place; returns the VNI index it is
    /// for and the outer source address, or `None` when it was refused,
    /// handled or counted (drop it).
    fn decap(&mut self, f: &mut Frame, now: Instant) -> Option<(usize, IpAddr)> {
        if !f.is_linear() {
            // A scatter-gather frame (an underlay that hands them up, for a
            // layer above that takes them) is decapsulated in its head, if
            // nothing needs its payload: the outer checksum trusted (partial or
            // verified below), the tunnel's and the inner headers in the head,
            // nothing past the outer packet. Otherwise gathered first.
            let (meta, head) = (f.meta, f.head_len());
            let rx = &self.rx;
            let in_head = !matches!(meta.csum, Checksum::None)
                && f.with_probe(|b| {
                    // The inner IP header's first 20 bytes (its ECN field,
                    // and an IPv4 header's checksum) must be in the head.
                    decap::classify(b, &meta, rx)
                        .is_ok_and(|d| d.end == b.len() && d.hlen + 14 + 20 <= head)
                });
            if !in_head {
                f.linearize();
            }
        }
        let classified = if f.is_linear() {
            decap::classify(f.bytes(), &f.meta, &self.rx)
        } else {
            let (meta, rx) = (f.meta, &self.rx);
            f.with_probe(|b| decap::classify(b, &meta, rx))
        };
        let d: Decap = match classified {
            Ok(d) => d,
            Err(Refused::Counted(c)) => {
                self.counters.add(c, 1);
                return None;
            }
            Err(Refused::Control(Control::Igmp { off, end })) => {
                let data = f.bytes().get(off..end).unwrap_or_default();
                let r = self.mcast.igmp(now, data);
                self.heard(r);
                return None;
            }
            Err(Refused::Control(Control::Mld {
                off,
                end,
                src,
                hop_limit,
                router_alert,
            })) => {
                let data = f.bytes().get(off..end).unwrap_or_default();
                let src = std::net::Ipv6Addr::from(src);
                let r = self.mcast.mld(now, data, src, hop_limit, router_alert);
                self.heard(r);
                return None;
            }
            Err(Refused::Control(c)) => {
                self.counters.add(TunnelCounter::NeighSeen, 1);
                let nd = match c {
                    Control::Nd { off, end } => Some((off, end)),
                    _ => None,
                };
                let (answer, learn) = neigh::handle(
                    f.bytes(),
                    nd,
                    &self.pool,
                    self.config.local_mac,
                    self.config.local_ip,
                );
                if let Some(a) = answer {
                    self.control.push(a);
                    self.counters.add(TunnelCounter::NeighAnswered, 1);
                }
                if let Some((ip, mac)) = learn {
                    self.learn(ip, mac, now);
                }
                return None;
            }
        };
        let Some(index) = self.vnis.iter().position(|v| v.cfg.vni == d.vni) else {
            self.counters.add(TunnelCounter::RxUnknownVni, 1);
            return None;
        };
        let v = self.vnis.get(index)?;
        if d.group.is_some() && d.group != v.cfg.group {
            // Sent to another VNI's group.
            self.counters.add(TunnelCounter::RxNotOurs, 1);
            return None;
        }
        if !(v.cfg.group.is_some()
            || v.peers.iter().any(|p| p.ip == d.src)
            || v.cfg.allowed_sources.contains(&d.src))
        {
            v.tcounters.add(TunnelCounter::RxSource, 1);
            return None;
        }
        // RFC 6040 section 4.2.
        let b = f.bytes_mut();
        let et = u16::from_be_bytes([*b.get(d.hlen + 12)?, *b.get(d.hlen + 13)?]);
        let l3 = d.hlen + 14;
        if let Some(inner) = decap::inner_ecn(b, et, l3) {
            match decap_ecn(inner, d.ecn) {
                EcnDecap::Drop => {
                    v.tcounters.add(TunnelCounter::RxEcnDrop, 1);
                    return None;
                }
                EcnDecap::Forward(e) if e != inner => decap::set_inner_ecn(b, et, l3, e),
                EcnDecap::Forward(_) => {}
            }
        }
        let cut = f.is_linear() && f.buf.truncate(d.end).is_err();
        if cut || f.buf.strip_front(d.hlen).is_err() {
            self.counters.add(TunnelCounter::RxTruncated, 1);
            return None;
        }
        let csum = match f.meta.csum {
            Checksum::Verified { levels } if d.outer_csum => match levels.saturating_sub(1) {
                0 => Checksum::None,
                l => Checksum::Verified { levels: l },
            },
            Checksum::Partial { start, offset } => match start.checked_sub(d.hlen as u16) {
                Some(start) => Checksum::Partial { start, offset },
                None => Checksum::None,
            },
            c => c,
        };
        let gso = f.meta.gso.map(|mut g| {
            g.tunnel = GsoTunnel::None;
            g
        });
        f.meta = OffloadMeta {
            csum,
            gso,
            rss: f.meta.rss,
        };
        v.tcounters.add(TunnelCounter::RxDecap, 1);
        Some((index, d.src))
    }
}

impl TunnelNic {
    /// [`Nic::receive`], also appending each frame's outer source address to
    /// `sources` when given.
    fn recv(
        &mut self,
        queue: usize,
        batch: &mut Batch,
        max: usize,
        mut sources: Option<&mut Vec<IpAddr>>,
    ) -> Result<usize, NicError> {
        let queues = self.pending.len();
        if queue >= queues {
            return Err(NicError::NoQueue { queue, queues });
        }
        let index = self.index;
        let vtep = Arc::clone(&self.vtep);
        let mut g = match vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let v = &mut *g;
        let mut got = 0;
        let (mut bytes, mut packets) = (0u64, 0u64);
        if let Some(inbox) = v.vnis.get_mut(index).and_then(|s| s.inbox.get_mut(queue)) {
            while got < max {
                let Some((src, f)) = inbox.pop_front() else {
                    break;
                };
                if let Some(s) = sources.as_deref_mut() {
                    s.push(src);
                }
                let mut f = f;
                if !self.up_sg {
                    f.linearize();
                }
                bytes += f.len() as u64;
                packets += 1;
                batch.push(f);
                got += 1;
            }
        }
        let now = Instant::now();
        // Pull from the underlay until this VNI has something or the underlay
        // is empty: 0 means nothing waits for this VNI, even when the
        // underlay's first frames were for others. Frames are received into
        // the caller's batch and decapsulated where they lie; this VNI's are
        // compacted to the front (no move when all are kept), the others'
        // moved to their inbox, refused ones dropped.
        let mut result = Ok(());
        let mut routed = false;
        while got < max {
            let start = batch.len();
            let r = v.underlay.receive(queue, batch, max - got);
            let pulled = batch.len() - start;
            let mut w = start;
            for r in start..batch.len() {
                let Some(f) = batch.get_mut(r) else { break };
                match v.decap(f, now) {
                    Some((i, src)) if i == index => {
                        if let Some(s) = sources.as_deref_mut() {
                            s.push(src);
                        }
                        if !self.up_sg {
                            f.linearize();
                        }
                        bytes += f.len() as u64;
                        packets += 1;
                        got += 1;
                        if w != r {
                            batch.swap(w, r);
                        }
                        w += 1;
                    }
                    Some((i, src)) => {
                        let f =
                            core::mem::replace(f, Frame::plain(PacketBuf::from_vec(Vec::new())));
                        if let Some(s) = v.vnis.get_mut(i) {
                            match s.inbox.get_mut(queue) {
                                Some(q) if q.len() < INBOX_LEN => {
                                    q.push_back((src, f));
                                    routed = true;
                                }
                                _ => s.counters.add(queue, Counter::RxDroppedRingFull, 1),
                            }
                        }
                    }
                    None => {}
                }
            }
            batch.truncate(w);
            if let Err(e) = r {
                result = Err(e);
                break;
            }
            if pulled == 0 || got > 0 {
                break;
            }
        }
        v.poll_neigh(now);
        v.poll_mcast(now);
        v.send_control(queue);
        if routed {
            // Wake whoever waits on this queue for another VNI (the underlay's
            // readiness is theirs too): possible with a notify; a file
            // descriptor cannot be made readable from here (crate docs).
            if let Ok(Readiness::Notify(n)) = v.underlay.readiness(queue) {
                n.notify();
            }
        }
        result?;
        self.counters.add(queue, Counter::RxPackets, packets);
        self.counters.add(queue, Counter::RxBytes, bytes);
        Ok(got)
    }

    /// [`Nic::transmit`] toward the remote at `peer` of this VNI's peers.
    fn send(&mut self, queue: usize, peer: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let queues = self.pending.len();
        if queue >= queues {
            return Err(NicError::NoQueue { queue, queues });
        }
        let vtep = Arc::clone(&self.vtep);
        let mut g = match vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let v = &mut *g;
        let Some(pending) = self.pending.get_mut(queue) else {
            return Ok(0);
        };
        let now = Instant::now();
        // Frames that waited for a next hop go first.
        if !v.ready.is_empty() {
            pending.extend(v.ready.drain(..));
        }
        // The remote's next hop: static, or from the neighbour table.
        let Some(&Peer {
            hop, mac: known, ..
        }) = v.vnis.get(self.index).and_then(|s| s.peers.get(peer))
        else {
            return Ok(0);
        };
        let mac = match hop {
            None => known,
            Some(h) => match v.neigh.lookup_mut(now, h) {
                Lookup::Hit(m) => Some(m),
                Lookup::Miss => None,
            },
        };
        if !pending.is_empty() {
            v.underlay.transmit(queue, pending)?;
            if !pending.is_empty() {
                return Ok(0);
            }
        }
        let Some(VniState {
            peers, tcounters, ..
        }) = v.vnis.get_mut(self.index)
        else {
            return Ok(0);
        };
        let Some(p) = peers.get_mut(peer) else {
            return Ok(0);
        };
        if let Some(m) = mac
            && p.mac != Some(m)
        {
            p.template.set_dst_mac(m);
            p.mac = Some(m);
        }
        let limit = self.caps.max_frame_len(0);
        let mut err = None;
        let mut stop = batch.len();
        let (mut bytes, mut unresolved) = (0u64, 0u64);
        for (i, f) in batch.iter_mut().enumerate() {
            let len = f.len();
            if f.meta.gso.is_none() && len > limit {
                self.counters.add(queue, Counter::TxDroppedOversize, 1);
                tcounters.add(TunnelCounter::TxOversize, 1);
                err = Some(NicError::Oversize { len, limit });
                stop = i;
                break;
            }
            if !f.is_linear() && p.template.reads_payload(&f.meta) {
                // The outer checksum sums the inner frame: gathered for it.
                f.linearize();
            }
            let meta = match f.buf.prepend(self.hlen) {
                Ok(_) => {
                    let m = f.meta;
                    let total = f.len();
                    p.template.write_head(f.bytes_mut(), total, &m)
                }
                Err(e) => {
                    err = Some(NicError::Buffer(e));
                    None
                }
            };
            let Some(meta) = meta else {
                self.counters.add(queue, Counter::TxDroppedInvalid, 1);
                tcounters.add(TunnelCounter::TxInvalid, 1);
                err.get_or_insert(NicError::InvalidMeta(MetaError::EncapOverflow { len }));
                stop = i;
                break;
            };
            f.meta = meta;
            bytes += len as u64;
        }
        let taken = if err.is_some() { stop + 1 } else { stop };
        let resolved = mac.is_some();
        if err.is_none() && resolved && pending.is_empty() {
            // The common case: the whole batch, encapsulated where it lies,
            // goes to the underlay as it is; what the underlay cannot take now
            // waits in `pending` (already encapsulated, it must not go back).
            tcounters.add(TunnelCounter::TxEncap, stop as u64);
            self.counters.add(queue, Counter::TxPackets, stop as u64);
            self.counters.add(queue, Counter::TxBytes, bytes);
            let r = v.underlay.transmit(queue, batch);
            pending.extend(batch.drain(..));
            r?;
            return Ok(taken);
        }
        let mut probe = false;
        for (i, f) in batch.drain(..taken).enumerate() {
            if i >= stop {
                continue;
            }
            match hop {
                Some(h) if !resolved => match v.neigh.enqueue(now, h, f) {
                    Queued::ProbeNow => probe = true,
                    Queued::Waiting => {}
                    Queued::Dropped | Queued::TableFull => unresolved += 1,
                },
                _ => pending.push(f),
            }
        }
        tcounters.add(TunnelCounter::TxUnresolved, unresolved);
        tcounters.add(TunnelCounter::TxEncap, stop as u64);
        self.counters.add(queue, Counter::TxPackets, stop as u64);
        self.counters.add(queue, Counter::TxBytes, bytes);
        if !resolved {
            if probe && let Some(h) = hop {
                v.probe(h);
                tcounters_probe(&mut v.vnis, self.index);
            }
            v.poll_neigh(now);
            v.send_control(queue);
        }
        if !pending.is_empty() {
            v.underlay.transmit(queue, pending)?;
        }
        match err {
            Some(e) => Err(e),
            None => Ok(taken),
        }
    }

    /// Encapsulates frames from the front of `batch` toward `remote` (the
    /// VNI's `remote_ip` or one of its `remotes`) and sends them on the
    /// underlay's `queue`, like [`Nic::transmit`]. Toward any other address
    /// the batch is dropped and counted (`tx_dropped_unknown_remote`).
    pub fn transmit_to(
        &mut self,
        queue: usize,
        remote: IpAddr,
        batch: &mut Batch,
    ) -> Result<usize, NicError> {
        let peer = {
            let g = self.lock();
            g.vnis
                .get(self.index)
                .and_then(|s| s.peers.iter().position(|p| p.ip == remote))
        };
        let peer = match peer {
            // A sender heard through the VNI's group: reached from now on.
            None if self.vni.group.is_some()
                && remote.is_ipv6() == self.vni.remote_ip.is_ipv6() =>
            {
                match self.add_remote(remote) {
                    Ok(_) => self
                        .lock()
                        .vnis
                        .get(self.index)
                        .and_then(|s| s.peers.iter().position(|p| p.ip == remote)),
                    Err(_) => None,
                }
            }
            p => p,
        };
        match peer {
            Some(p) => self.send(queue, p, batch),
            None => {
                let n = batch.len();
                self.tcounters.add(TunnelCounter::TxUnknownRemote, n as u64);
                batch.clear();
                Ok(n)
            }
        }
    }

    /// [`Nic::receive`] that also appends each frame's outer source address
    /// (the remote VTEP that sent it) to `sources`, in the order of the
    /// frames appended to `batch`.
    pub fn receive_from(
        &mut self,
        queue: usize,
        batch: &mut Batch,
        sources: &mut Vec<IpAddr>,
        max: usize,
    ) -> Result<usize, NicError> {
        self.recv(queue, batch, max, Some(sources))
    }

    /// The underlay queue the [`Overlay`] side uses (0 by default).
    pub fn set_overlay_queue(&mut self, queue: usize) {
        self.overlay_queue = queue;
    }
}

impl Overlay for TunnelNic {
    fn receive(&mut self, batch: &mut Vec<(IpAddr, Frame)>, max: usize) -> Result<usize, NicError> {
        let mut scratch = core::mem::take(&mut self.scratch);
        let mut sources = core::mem::take(&mut self.sources);
        scratch.clear();
        sources.clear();
        let r = self.recv(self.overlay_queue, &mut scratch, max, Some(&mut sources));
        // Frames that waited for a next hop resolved meanwhile leave now, not
        // with the next frame sent.
        let _ = self.send(self.overlay_queue, 0, &mut Batch::new());
        let n = scratch.len().min(sources.len());
        batch.extend(sources.drain(..).zip(scratch.drain(..)));
        self.scratch = scratch;
        self.sources = sources;
        r.map(|_| n)
    }

    fn transmit(&mut self, remote: IpAddr, batch: &mut Batch) -> Result<usize, NicError> {
        self.transmit_to(self.overlay_queue, remote, batch)
    }
}

impl Nic for TunnelNic {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }

    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        self.recv(queue, batch, max, None)
    }

    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        self.send(queue, 0, batch)
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

    /// True if the underlay takes scatter-gather frames: a frame's payload
    /// stays where it is, the tunnel's headers go into its head (gathered
    /// only where the outer UDP checksum must sum the inner frame).
    fn tx_sg(&self) -> bool {
        self.tx_sg
    }

    /// Asks the underlay for scatter-gather frames while any VNI's layer
    /// above takes them; this VNI's frames go up as they came when its layer
    /// does, gathered otherwise.
    fn set_rx_sg(&mut self, on: bool) -> bool {
        if on == self.up_sg {
            return on;
        }
        let vtep = Arc::clone(&self.vtep);
        let mut g = match vtep.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let was = g.sg_users;
        g.sg_users = if on { was + 1 } else { was.saturating_sub(1) };
        if (was == 0) != (g.sg_users == 0) {
            let want = g.sg_users > 0;
            g.underlay_sg = g.underlay.set_rx_sg(want) && want;
        }
        // Counted as a user either way, so that turning it off balances.
        self.up_sg = on;
        on && g.underlay_sg
    }
}

impl Drop for TunnelNic {
    /// Removes the VNI from the tunnel: its slot is freed for a VNI added
    /// later, and its frames are refused as of an unknown VNI.
    fn drop(&mut self) {
        if self.up_sg {
            self.set_rx_sg(false);
        }
        let mut g = self.lock();
        if let Some(s) = g.vnis.get_mut(self.index) {
            s.cfg.vni = FREE_SLOT;
            s.peers.clear();
            s.inbox.iter_mut().for_each(VecDeque::clear);
        }
        if let Some(group) = self.vni.group {
            g.leave_unused(group);
            // The leave goes now: the VTEP may be on its way out.
            g.poll_mcast(Instant::now());
            g.send_control(0);
        }
    }
}
