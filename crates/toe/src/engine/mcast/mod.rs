//! Multicast: UDP sockets that join groups with source filters, the
//! interface state they make (RFC 3376 section 3.2, RFC 3810 section 4.2),
//! the IGMPv3 and MLDv2 host protocols that report it (`host`, `igmp`,
//! `mld`) with their IGMPv1/v2 and MLDv1 compatibility modes, and the
//! Ethernet multicast filter that follows it.
//!
//! # Sockets
//!
//! [`Engine::udp_join_multicast`] joins a group in EXCLUDE {} mode (any
//! source, as `join_multicast_v4`/`v6` of std), [`Engine::udp_set_multicast_filter`]
//! sets a group's filter to INCLUDE or EXCLUDE a source list (RFC 3678's
//! full-state API; INCLUDE {} leaves), [`Engine::udp_leave_multicast`]
//! leaves. A socket bound to the unspecified address receives a group's
//! datagrams while it has joined it, from the sources its filter allows;
//! datagrams to a group it has not joined are not delivered to it, as
//! Linux's `IP_MULTICAST_ALL` off (Linux's default delivers a group's
//! datagrams to every socket of the port once any socket joined it). The
//! all-systems and all-nodes groups (224.0.0.1, ff02::1) are always joined
//! and reach every socket of the port, as before multicast existed.
//!
//! Datagrams sent to a group leave with TTL / hop limit
//! [`Engine::udp_set_multicast_hops`] (default 1, as Linux's
//! `IP_MULTICAST_TTL`), to the group's Ethernet address (in fragments, as
//! other datagrams, when they do not fit), and are not looped back to the
//! engine's own sockets.
//!
//! # The interface
//!
//! For each group, the sockets' filters merge as RFC 3376 section 3.2 says:
//! EXCLUDE if any socket excludes, with the sources every excluding socket
//! excludes and no including socket includes; otherwise INCLUDE the union.
//! At most [`MAX_SOURCES`] sources per group and socket, and
//! [`MAX_GROUPS`] groups per socket. Each change of a group's interface
//! state is reported at once and retransmitted (`host`). Frames to an
//! Ethernet group address are taken only for a joined group, the
//! all-systems and all-nodes groups and the solicited-node groups
//! (`33:33:ff:..`, which neighbour discovery needs); others are dropped and
//! counted in `rx_other_host`. [`Engine::multicast_macs`] lists the
//! addresses for a NIC's own filter.
//!
//! MLD messages leave from a link-local address (RFC 3810 section 5): the
//! interface's own if it is one, else the modified EUI-64 address of its MAC
//! (which the engine does not otherwise answer for).
//!
//! A runtime with several queues runs an engine per queue on the same
//! interface: each reports the groups its sockets joined, which the sockets
//! bound on every queue make the same everywhere.

mod host;
mod igmp;
mod mld;
#[cfg(test)]
mod tests;

pub use host::{Compat, FilterMode};

use super::Engine;
use super::error::InvalidHandle;
use super::udp::UdpHandle;
use host::{Filter, Host, Out};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};

/// Sources a socket's filter of one group may list (Linux's `mld_max_msf`).
pub const MAX_SOURCES: usize = 64;
/// Groups one socket may join (Linux's `igmp_max_memberships` is 20).
pub const MAX_GROUPS: usize = 64;
/// The default TTL / hop limit of datagrams to a group.
pub const DEFAULT_MULTICAST_HOPS: u8 = 1;

/// Why a multicast call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum McastError {
    /// No such socket.
    InvalidHandle,
    /// The group is not a multicast address of the socket's family, or a
    /// source is not a unicast address of that family.
    InvalidAddress,
    /// The interface has no address of that family.
    NoAddress,
    /// More than [`MAX_SOURCES`] sources.
    TooManySources,
    /// The socket has joined [`MAX_GROUPS`] groups already.
    TooManyGroups,
    /// The socket has not joined the group.
    NotJoined,
}

impl std::fmt::Display for McastError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            McastError::InvalidHandle => "no such socket",
            McastError::InvalidAddress => {
                "not a multicast group (or unicast source) of the socket's family"
            }
            McastError::NoAddress => "the interface has no address of that family",
            McastError::TooManySources => "more sources than a filter may list",
            McastError::TooManyGroups => "the socket has joined as many groups as it may",
            McastError::NotJoined => "the socket has not joined that group",
        })
    }
}

impl std::error::Error for McastError {}

impl From<InvalidHandle> for McastError {
    fn from(_: InvalidHandle) -> McastError {
        McastError::InvalidHandle
    }
}

/// Multicast counters (inside [`Counters`](crate::Counters)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct McastCounters {
    /// IGMP messages received.
    pub igmp_in: u64,
    /// IGMP messages dropped: too short, bad length for a query, bad
    /// checksum, a query for a group that is not one.
    pub igmp_in_errors: u64,
    /// IGMP queries acted on.
    pub igmp_queries_in: u64,
    /// IGMP reports sent (every version).
    pub igmp_reports_out: u64,
    /// IGMPv2 leave group messages sent.
    pub igmp_leaves_out: u64,
    /// MLD messages received.
    pub mld_in: u64,
    /// MLD messages dropped: too short, bad length for a query, a query not
    /// from a link-local source, with a hop limit other than 1 or without
    /// Router Alert, a query for a group that is not one.
    pub mld_in_errors: u64,
    /// MLD queries acted on.
    pub mld_queries_in: u64,
    /// MLD reports sent (every version).
    pub mld_reports_out: u64,
    /// MLDv1 done messages sent.
    pub mld_dones_out: u64,
    /// Datagrams to a group that no socket admitted (not joined, or a
    /// source its filter blocks).
    pub udp_filtered: u64,
    /// Datagrams this engine sent to a group and delivered to its own
    /// socket of that group as well (multicast loopback).
    pub udp_looped: u64,
}

/// One socket's memberships.
#[derive(Debug, Clone, Default)]
struct SockMc {
    hops: Option<u8>,
    /// `IP_MULTICAST_LOOP` off.
    no_loop: bool,
    groups: Vec<(IpAddr, Filter)>,
}

/// The engine's multicast state.
#[derive(Debug, Clone, Default)]
pub(super) struct Mcast {
    v4: Host,
    v6: Host,
    socks: HashMap<UdpHandle, SockMc>,
    /// Ethernet group addresses taken besides the fixed ones, sorted.
    macs: Vec<[u8; 6]>,
    generation: u64,
}

/// Groups never reported: all-systems (RFC 3376 section 5), and
/// link-scope all-nodes and scopes 0 and 1 (RFC 3810 section 6).
fn unreported(g: IpAddr) -> bool {
    match g {
        IpAddr::V4(a) => a == igmp::ALL_SYSTEMS,
        IpAddr::V6(a) => a == mld::ALL_NODES || a.segments()[0] & 0x000f <= 1,
    }
}

/// True for the groups every interface is in (all-systems, all-nodes).
pub(super) fn always_member(g: IpAddr) -> bool {
    match g {
        IpAddr::V4(a) => a == igmp::ALL_SYSTEMS,
        IpAddr::V6(a) => a == mld::ALL_NODES,
    }
}

/// The Ethernet address of group `g`.
fn group_mac(g: IpAddr) -> [u8; 6] {
    match g {
        IpAddr::V4(a) => igmp::group_mac(a),
        IpAddr::V6(a) => mld::group_mac(a),
    }
}

/// The interface filter the sockets' `filters` of one group make (RFC 3376
/// section 3.2).
fn merge<'a>(filters: impl Iterator<Item = &'a Filter> + Clone) -> Filter {
    let mut include: Vec<IpAddr> = filters
        .clone()
        .filter(|f| f.mode == FilterMode::Include)
        .flat_map(|f| f.sources.iter().copied())
        .collect();
    include.sort_unstable();
    include.dedup();
    let mut excl = filters.filter(|f| f.mode == FilterMode::Exclude);
    let Some(first) = excl.next() else {
        include.truncate(MAX_SOURCES);
        return Filter {
            mode: FilterMode::Include,
            sources: include,
        };
    };
    let mut sources: Vec<IpAddr> = first.sources.clone();
    for f in excl {
        sources.retain(|s| f.sources.binary_search(s).is_ok());
    }
    sources.retain(|s| include.binary_search(s).is_err());
    Filter {
        mode: FilterMode::Exclude,
        sources,
    }
}

impl Mcast {
    fn host(&mut self, v6: bool) -> &mut Host {
        if v6 { &mut self.v6 } else { &mut self.v4 }
    }

    /// True if the interface has joined group `g` (or is always in it).
    pub(super) fn joined(&self, g: IpAddr) -> bool {
        if always_member(g) {
            return true;
        }
        self.socks
            .values()
            .any(|s| s.groups.iter().any(|(x, _)| *x == g))
    }

    /// True if socket `h` takes a datagram from `src` to group `dst`.
    pub(super) fn delivers(&self, h: UdpHandle, dst: IpAddr, src: IpAddr) -> bool {
        always_member(dst)
            || self
                .socks
                .get(&h)
                .is_some_and(|s| s.groups.iter().any(|(g, f)| *g == dst && f.allows(src)))
    }

    /// The TTL / hop limit of socket `h`'s datagrams to a group.
    pub(super) fn hops(&self, h: UdpHandle) -> u8 {
        self.socks
            .get(&h)
            .and_then(|s| s.hops)
            .unwrap_or(DEFAULT_MULTICAST_HOPS)
    }

    /// True if socket `h`'s datagrams to groups are looped back to this
    /// engine's members.
    pub(super) fn loops(&self, h: UdpHandle) -> bool {
        self.socks.get(&h).is_none_or(|s| !s.no_loop)
    }

    /// True if a frame to Ethernet group address `mac` is taken.
    pub(super) fn takes_mac(&self, mac: &[u8; 6]) -> bool {
        matches!(
            mac,
            [0x01, 0x00, 0x5e, 0, 0, 1] | [0x33, 0x33, 0, 0, 0, 1] | [0x33, 0x33, 0xff, ..]
        ) || self.macs.binary_search(mac).is_ok()
    }

    /// When the next IGMP or MLD timer is due.
    pub(super) fn deadline(&self) -> Option<crate::time::Instant> {
        crate::time::earliest(self.v4.deadline(), self.v6.deadline())
    }

    fn refresh_macs(&mut self) {
        let mut m: Vec<[u8; 6]> = self
            .socks
            .values()
            .flat_map(|s| s.groups.iter().map(|(g, _)| group_mac(*g)))
            .collect();
        m.sort_unstable();
        m.dedup();
        if m != self.macs {
            self.macs = m;
            self.generation += 1;
        }
    }
}

impl Engine {
    /// Joins `group` on UDP socket `h` for every source (EXCLUDE {}), like
    /// std's `join_multicast_v4` / `join_multicast_v6`. Joining a group the
    /// socket is in makes its filter EXCLUDE {}. The interface reports the
    /// change at once (IGMPv3 or MLDv2, or the older version a querier on the
    /// link asks for).
    ///
    /// Errors: see [`McastError`].
    pub fn udp_join_multicast(&mut self, h: UdpHandle, group: IpAddr) -> Result<(), McastError> {
        self.udp_set_multicast_filter(h, group, FilterMode::Exclude, &[])
    }

    /// Sets socket `h`'s filter for `group` to `mode` over `sources` (RFC
    /// 3678's `setsourcefilter`): INCLUDE a list joins for those sources only
    /// (source-specific), EXCLUDE a list joins for all but those; INCLUDE
    /// with no sources leaves.
    ///
    /// Errors: see [`McastError`].
    pub fn udp_set_multicast_filter(
        &mut self,
        h: UdpHandle,
        group: IpAddr,
        mode: FilterMode,
        sources: &[IpAddr],
    ) -> Result<(), McastError> {
        let local = self.udp_info(h)?.local;
        if group.is_ipv4() != local.is_ipv4() || !group.is_multicast() {
            return Err(McastError::InvalidAddress);
        }
        if sources
            .iter()
            .any(|s| s.is_ipv4() != group.is_ipv4() || s.is_multicast() || s.is_unspecified())
        {
            return Err(McastError::InvalidAddress);
        }
        let has_addr = match group {
            IpAddr::V4(_) => self.cfg.ipv4.is_some(),
            IpAddr::V6(_) => self.cfg.ipv6.is_some(),
        };
        if !has_addr {
            return Err(McastError::NoAddress);
        }
        let filter = Filter::new(mode, sources);
        if filter.sources.len() > MAX_SOURCES {
            return Err(McastError::TooManySources);
        }
        let s = self.mcast.socks.entry(h).or_default();
        match s.groups.iter().position(|(g, _)| *g == group) {
            Some(i) if filter.is_none() => {
                s.groups.remove(i);
            }
            Some(i) => {
                if let Some(e) = s.groups.get_mut(i) {
                    e.1 = filter;
                }
            }
            None if filter.is_none() => return Ok(()),
            None if s.groups.len() >= MAX_GROUPS => return Err(McastError::TooManyGroups),
            None => s.groups.push((group, filter)),
        }
        self.mcast_apply(group);
        Ok(())
    }

    /// Leaves `group` on socket `h` (its filter becomes INCLUDE {}).
    ///
    /// Errors: [`McastError::NotJoined`] if the socket is not in the group;
    /// [`McastError::InvalidHandle`].
    pub fn udp_leave_multicast(&mut self, h: UdpHandle, group: IpAddr) -> Result<(), McastError> {
        self.udp_info(h)?;
        let joined = self
            .mcast
            .socks
            .get(&h)
            .is_some_and(|s| s.groups.iter().any(|(g, _)| *g == group));
        if !joined {
            return Err(McastError::NotJoined);
        }
        self.udp_set_multicast_filter(h, group, FilterMode::Include, &[])
    }

    /// The groups socket `h` has joined, with its filter of each.
    pub fn udp_multicast_groups(
        &self,
        h: UdpHandle,
    ) -> Result<Vec<(IpAddr, FilterMode, Vec<IpAddr>)>, InvalidHandle> {
        self.udp_info(h)?;
        Ok(self
            .mcast
            .socks
            .get(&h)
            .map(|s| {
                s.groups
                    .iter()
                    .map(|(g, f)| (*g, f.mode, f.sources.clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Sets the TTL (IPv4) or hop limit (IPv6) of socket `h`'s datagrams to
    /// groups (`IP_MULTICAST_TTL`, `IPV6_MULTICAST_HOPS`; default 1).
    pub fn udp_set_multicast_hops(&mut self, h: UdpHandle, hops: u8) -> Result<(), InvalidHandle> {
        self.udp_info(h)?;
        self.mcast.socks.entry(h).or_default().hops = Some(hops);
        Ok(())
    }

    /// Whether socket `h`'s datagrams to a group the engine has joined also
    /// reach the engine's own socket of that group and port
    /// (`IP_MULTICAST_LOOP`, `IPV6_MULTICAST_LOOP`; on by default, as in
    /// Linux). The looped copy is filtered as a received one is.
    pub fn udp_set_multicast_loop(&mut self, h: UdpHandle, on: bool) -> Result<(), InvalidHandle> {
        self.udp_info(h)?;
        self.mcast.socks.entry(h).or_default().no_loop = !on;
        Ok(())
    }

    /// The interface's multicast state: each group reported with its filter
    /// (the sockets' filters merged), IPv4 then IPv6.
    pub fn multicast_groups(&self) -> Vec<(IpAddr, FilterMode, Vec<IpAddr>)> {
        self.mcast
            .v4
            .members()
            .chain(self.mcast.v6.members())
            .map(|(g, f)| (*g, f.mode, f.sources.clone()))
            .collect()
    }

    /// The version of IGMP (`v6` false) or MLD (`v6` true) the interface
    /// answers in: [`Compat::V3`] (IGMPv3, MLDv2) unless an older querier was
    /// heard within the Older Version Querier Present Timeout.
    pub fn multicast_compat(&self, v6: bool) -> Compat {
        if v6 {
            self.mcast.v6.compat()
        } else {
            self.mcast.v4.compat()
        }
    }

    /// The Ethernet group addresses of the joined groups (sorted), for a NIC
    /// filter. The engine also always takes 01:00:5e:00:00:01,
    /// 33:33:00:00:00:01 and the solicited-node groups 33:33:ff:xx:xx:xx.
    pub fn multicast_macs(&self) -> &[[u8; 6]] {
        &self.mcast.macs
    }

    /// The Ethernet group addresses a NIC filter should pass for this
    /// engine: all-systems and all-nodes, the solicited-node group of its IPv6
    /// address, and [`Engine::multicast_macs`] (broadcast and the unicast
    /// address besides).
    pub fn multicast_filter(&self) -> Vec<[u8; 6]> {
        let mut v = Vec::new();
        if self.cfg.ipv4.is_some() {
            v.push([0x01, 0x00, 0x5e, 0, 0, 1]);
        }
        if let Some(c) = self.cfg.ipv6 {
            let o = c.addr.octets();
            v.push([0x33, 0x33, 0, 0, 0, 1]);
            v.push([0x33, 0x33, 0xff, o[13], o[14], o[15]]);
        }
        if self.cfg.slaac {
            // Router advertisements, and neighbour solicitations for the
            // EUI-64 addresses SLAAC forms (link-local and global alike end
            // in the MAC's last three bytes), before and after they exist.
            let m = self.cfg.mac;
            for g in [
                [0x33, 0x33, 0, 0, 0, 1],
                [0x33, 0x33, 0xff, m[3], m[4], m[5]],
            ] {
                if !v.contains(&g) {
                    v.push(g);
                }
            }
        }
        v.extend_from_slice(&self.mcast.macs);
        v
    }

    /// The interface's addresses changed: the NIC's filter, which holds
    /// their groups, is due again ([`Engine::multicast_macs_generation`]).
    pub(super) fn mcast_addresses_changed(&mut self) {
        self.mcast.generation += 1;
    }

    /// A number that changes whenever [`Engine::multicast_macs`] does.
    pub fn multicast_macs_generation(&self) -> u64 {
        self.mcast.generation
    }

    /// Socket `h` is closed: it leaves its groups.
    pub(super) fn mcast_socket_closed(&mut self, h: UdpHandle) {
        if let Some(s) = self.mcast.socks.remove(&h) {
            for (g, _) in s.groups {
                self.mcast_apply(g);
            }
        }
    }

    /// Recomputes the interface state of `group` and reports a change.
    fn mcast_apply(&mut self, group: IpAddr) {
        let filter = merge(
            self.mcast
                .socks
                .values()
                .flat_map(|s| s.groups.iter())
                .filter(|(g, _)| *g == group)
                .map(|(_, f)| f),
        );
        self.mcast.refresh_macs();
        if unreported(group) {
            return;
        }
        let v6 = group.is_ipv6();
        let mut out = Vec::new();
        let now = self.clock;
        let host = if v6 {
            &mut self.mcast.v6
        } else {
            &mut self.mcast.v4
        };
        host.set_filter(now, &mut self.rng, group, filter, &mut out);
        self.mcast_send(v6, &out);
    }

    /// Runs the IGMP and MLD timers due at `now`.
    pub(super) fn mcast_timers(&mut self, now: crate::time::Instant) {
        for v6 in [false, true] {
            if self.mcast.host(v6).deadline().is_some_and(|t| t <= now) {
                let mut out = Vec::new();
                let host = if v6 {
                    &mut self.mcast.v6
                } else {
                    &mut self.mcast.v4
                };
                host.timeout(now, &mut self.rng, &mut out);
                self.mcast_send(v6, &out);
            }
        }
    }

    /// Queues the frames of `out`.
    fn mcast_send(&mut self, v6: bool, out: &[Out]) {
        let mtu = usize::from(self.cfg.mtu);
        let mac = self.cfg.mac;
        for o in out {
            let leave = matches!(o, Out::Leave(_));
            if v6 {
                let Some(me) = self.cfg.ipv6 else { return };
                let src = mld::source(me.addr, mac);
                for (dst, m) in mld::messages(o, mtu) {
                    let f = mld::frame(mac, src, dst, &m);
                    let c = &mut self.counters.mcast;
                    if leave {
                        c.mld_dones_out += 1
                    } else {
                        c.mld_reports_out += 1
                    }
                    self.counters.icmp_out_msgs += 1;
                    self.control
                        .push_back((f, linerate_offload::OffloadMeta::plain()));
                }
            } else {
                let Some(me) = self.cfg.ipv4 else { return };
                for (dst, m) in igmp::messages(o, mtu) {
                    let id = self.next_ip_id(1);
                    let f = igmp::frame(mac, me.addr, dst, id, &m);
                    let c = &mut self.counters.mcast;
                    if leave {
                        c.igmp_leaves_out += 1
                    } else {
                        c.igmp_reports_out += 1
                    }
                    self.control
                        .push_back((f, linerate_offload::OffloadMeta::plain()));
                }
            }
        }
    }

    /// An IGMP message (the IPv4 payload `data`) from `src` to `dst`.
    pub(super) fn igmp_input(&mut self, now: crate::time::Instant, data: &[u8]) {
        self.counters.mcast.igmp_in += 1;
        match igmp::decode(data) {
            Err(_) => self.counters.mcast.igmp_in_errors += 1,
            Ok(igmp::Msg::Query(q)) => {
                self.counters.mcast.igmp_queries_in += 1;
                self.mcast.v4.query(now, &mut self.rng, &q);
            }
            Ok(igmp::Msg::Report(g)) => self.mcast.v4.heard_report(g),
            Ok(igmp::Msg::Other) => {}
        }
    }

    /// An MLD message `data` (checksum verified) in the IPv6 packet `ip`
    /// from `src`.
    pub(super) fn mld_input(
        &mut self,
        now: crate::time::Instant,
        ip: &[u8],
        data: &[u8],
        src: Ipv6Addr,
    ) {
        self.counters.mcast.mld_in += 1;
        let hop_limit = ip.get(7).copied().unwrap_or(0);
        match mld::decode(data, src, hop_limit, mld::has_router_alert(ip)) {
            Err(_) => self.counters.mcast.mld_in_errors += 1,
            Ok(mld::Msg::Query(q)) => {
                self.counters.mcast.mld_queries_in += 1;
                self.mcast.v6.query(now, &mut self.rng, &q);
            }
            Ok(mld::Msg::Report(g)) => self.mcast.v6.heard_report(g),
            Ok(mld::Msg::Other) => {}
        }
    }
}

/// True for an ICMPv6 message type of MLD.
pub(super) fn is_mld(t: u8) -> bool {
    mld::is_mld(t)
}

/// Rewrites the TTL (IPv4) or hop limit (IPv6) of the frame `f` (Ethernet
/// first) to `hops`, the IPv4 header checksum with it.
pub(super) fn set_hops(f: &mut [u8], hops: u8) {
    match f.get(12..14) {
        Some([0x08, 0x00]) => {
            let Some(ip) = f.get_mut(14..34) else { return };
            ip[8] = hops;
            ip[10] = 0;
            ip[11] = 0;
            let c = linerate_wire::checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
        Some([0x86, 0xdd]) => {
            if let Some(h) = f.get_mut(14 + 7) {
                *h = hops;
            }
        }
        _ => {}
    }
}
