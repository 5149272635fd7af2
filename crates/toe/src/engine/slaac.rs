//! IPv6 stateless address autoconfiguration (RFC 4862) and the DNS servers
//! of router advertisements (RFC 8106), with [`Config::slaac`](crate::Config::slaac).
//!
//! * At start the engine forms its link-local address (fe80::/64 and the
//!   modified EUI-64 interface identifier of its MAC, RFC 4291 appendix A),
//!   checks it with duplicate address detection (RFC 4862 section 5.4: one
//!   neighbour solicitation from :: to its solicited-node group, then
//!   [`DAD_WAIT`]), and sends router solicitations from it (RFC 4861 section
//!   6.3.7: up to [`MAX_RTR_SOLICITATIONS`], [`RTR_SOLICITATION_INTERVAL`]
//!   apart). The link-local address answers neighbour solicitations and
//!   carries the engine's NDP with routers; it is not an address sockets use.
//! * A router advertisement (RFC 4861 section 6.1.2's checks: link-local
//!   source, hop limit 255) gives:
//!   - for each prefix information option with the autonomous flag and a
//!     /64 prefix (RFC 4862 section 5.5.3), an address of the prefix and
//!     the interface identifier, checked by DAD, then made the engine's IPv6
//!     address ([`Engine::set_ipv6`], [`Event::AddressAdded`]) if it has
//!     none. Its valid lifetime is updated by later advertisements with
//!     section 5.5.3 (e)'s two-hour rule; when it runs out the address goes
//!     ([`Event::AddressRemoved`]) and another formed address takes its
//!     place. A preferred lifetime that runs out deprecates the address;
//!     the engine has one IPv6 address, so a deprecated one stays in use
//!     while no preferred one replaces it;
//!   - a default route through the router while its router lifetime runs
//!     ([`Engine::set_gateway`]);
//!   - the recursive DNS servers of RDNSS options (RFC 8106 section 5.1),
//!     for their lifetime ([`Engine::dns_servers`], [`Event::DnsServers`]).
//! * An address found duplicate (a neighbour solicitation for it from ::,
//!   or an advertisement for it, during DAD) is not used; counted in
//!   [`SlaacState::duplicates`].
//!
//! Not done: temporary addresses (RFC 8981), DAD retries and the
//! random delay before the first solicitation, more than one IPv6 address
//! at once in the engine, the route information and MTU options, DNS
//! search lists (DNSSL).

use super::output::put_ipv6;
use super::{Engine, Event};
use crate::time::Instant;
use linerate_offload::OffloadMeta;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::etherparse::Icmpv6Type;
use linerate_wire::icmp::ndp;
use linerate_wire::icmp::v6::{self as icmpv6, Addrs};
use linerate_wire::ipv4::protocol;
use linerate_wire::ipv6;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

/// The all-nodes multicast address ff02::1.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// The all-routers multicast address ff02::2.
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// Time a tentative address waits for a conflict after its solicitation
/// (RFC 4861's RetransTimer, 1 s, with DupAddrDetectTransmits 1).
pub const DAD_WAIT: Duration = Duration::from_secs(1);
/// Router solicitations sent at most (RFC 4861 section 10).
pub const MAX_RTR_SOLICITATIONS: u32 = 3;
/// Time between router solicitations (RFC 4861 section 10).
pub const RTR_SOLICITATION_INTERVAL: Duration = Duration::from_secs(4);
/// RFC 4862 section 5.5.3 (e)'s two hours.
const TWO_HOURS: Duration = Duration::from_secs(7200);
/// Prefixes followed at most.
const MAX_PREFIXES: usize = 8;
/// DNS servers kept at most.
const MAX_DNS: usize = 8;

/// Where an address is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrState {
    /// Being checked by DAD until the instant.
    Tentative(Instant),
    /// In use, preferred.
    Preferred,
    /// In use, past its preferred lifetime.
    Deprecated,
    /// Another node has it: not used.
    Duplicate,
}

/// An address formed from an advertised prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlaacAddr {
    /// The address.
    pub addr: Ipv6Addr,
    /// Its state.
    pub state: AddrState,
    /// When it stops being valid (`None`: infinite).
    pub valid_until: Option<Instant>,
    /// When it stops being preferred (`None`: infinite).
    pub preferred_until: Option<Instant>,
}

/// What SLAAC knows, from [`Engine::slaac_state`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlaacState {
    /// The link-local address and its state (`None` before the engine's
    /// first timer).
    pub link_local: Option<(Ipv6Addr, AddrState)>,
    /// Addresses formed from advertised prefixes.
    pub addrs: Vec<SlaacAddr>,
    /// The default router and until when (`None`: none).
    pub router: Option<(Ipv6Addr, Instant)>,
    /// Router solicitations sent.
    pub solicitations: u64,
    /// Router advertisements taken.
    pub advertisements: u64,
    /// Router advertisements refused (not link-local, hop limit, length,
    /// a malformed option).
    pub bad_advertisements: u64,
    /// Addresses found duplicate by DAD.
    pub duplicates: u64,
}

/// SLAAC's state in the engine.
#[derive(Debug, Clone, Default)]
pub(super) struct Slaac {
    st: SlaacState,
    /// RDNSS servers and until when.
    dns: Vec<(Ipv6Addr, Instant)>,
    /// Solicitations left to send, and when the next is due.
    rs_left: u32,
    rs_next: Option<Instant>,
    started: bool,
}

/// The modified EUI-64 interface identifier of `mac` in the low 64 bits of
/// `prefix` (RFC 4291 appendix A).
fn with_iid(prefix: Ipv6Addr, mac: [u8; 6]) -> Ipv6Addr {
    let mut o = prefix.octets();
    let iid = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    if let Some(low) = o.get_mut(8..) {
        low.copy_from_slice(&iid);
    }
    Ipv6Addr::from(o)
}

fn link_local_of(mac: [u8; 6]) -> Ipv6Addr {
    with_iid(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), mac)
}

fn is_link_local(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xffc0 == 0xfe80
}

fn be32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_be_bytes)
}

/// `now` plus a lifetime in seconds; `None` for infinity (all ones).
fn until(now: Instant, secs: u32) -> Option<Instant> {
    (secs != u32::MAX).then(|| now + Duration::from_secs(u64::from(secs)))
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Slaac {
    /// When [`Engine::slaac_timers`] next has work.
    pub(super) fn deadline(&self, enabled: bool) -> Option<Instant> {
        if !enabled {
            return None;
        }
        if !self.started {
            return Some(Instant::ZERO);
        }
        let mut t = self.rs_next.filter(|_| self.rs_left > 0);
        if let Some((_, AddrState::Tentative(at))) = self.st.link_local {
            t = earliest(t, Some(at));
        }
        for a in &self.st.addrs {
            if let AddrState::Tentative(at) = a.state {
                t = earliest(t, Some(at));
            }
            t = earliest(t, a.valid_until);
            if a.state == AddrState::Preferred {
                t = earliest(t, a.preferred_until);
            }
        }
        t = earliest(t, self.st.router.map(|(_, u)| u));
        for (_, u) in &self.dns {
            t = earliest(t, Some(*u));
        }
        t
    }
}

impl Engine {
    /// What SLAAC knows: the link-local address, the formed addresses, the
    /// router, counters.
    pub fn slaac_state(&self) -> &SlaacState {
        &self.slaac.st
    }

    /// The DNS servers router advertisements gave (RFC 8106), in the order
    /// they came, while their lifetime runs.
    pub fn dns_servers(&self) -> Vec<IpAddr> {
        self.slaac.dns.iter().map(|(a, _)| IpAddr::V6(*a)).collect()
    }

    /// Runs SLAAC's timers (the hook in `handle_timeout`).
    pub(super) fn slaac_timers(&mut self, now: Instant) {
        if !self.slaac.started {
            self.slaac.started = true;
            let ll = link_local_of(self.cfg.mac);
            self.slaac.st.link_local = Some((ll, AddrState::Tentative(now + DAD_WAIT)));
            self.send_dad(ll);
        }
        if let Some((ll, AddrState::Tentative(at))) = self.slaac.st.link_local
            && at <= now
        {
            self.slaac.st.link_local = Some((ll, AddrState::Preferred));
            self.slaac.rs_left = MAX_RTR_SOLICITATIONS;
            self.slaac.rs_next = Some(now);
        }
        if self.slaac.rs_left > 0 && self.slaac.rs_next.is_some_and(|t| t <= now) {
            // Answered already: an advertisement came.
            if self.slaac.st.advertisements > 0 {
                self.slaac.rs_left = 0;
            } else {
                self.slaac.rs_left -= 1;
                self.slaac.rs_next = Some(now + RTR_SOLICITATION_INTERVAL);
                self.send_rs();
            }
        }
        let mut changed = false;
        for i in 0..self.slaac.st.addrs.len() {
            let Some(a) = self.slaac.st.addrs.get_mut(i) else {
                break;
            };
            if let AddrState::Tentative(at) = a.state
                && at <= now
            {
                a.state = AddrState::Preferred;
                changed = true;
            }
            if a.state == AddrState::Preferred && a.preferred_until.is_some_and(|t| t <= now) {
                a.state = AddrState::Deprecated;
            }
        }
        let before = self.slaac.st.addrs.len();
        let gone: Vec<Ipv6Addr> = self
            .slaac
            .st
            .addrs
            .iter()
            .filter(|a| a.valid_until.is_some_and(|t| t <= now))
            .map(|a| a.addr)
            .collect();
        self.slaac
            .st
            .addrs
            .retain(|a| a.valid_until.is_none_or(|t| t > now));
        changed |= self.slaac.st.addrs.len() != before;
        for a in gone {
            if self.cfg.ipv6.is_some_and(|c| c.addr == a) {
                self.remove_ipv6();
            }
        }
        if changed {
            self.slaac_assign();
        }
        if let Some((r, u)) = self.slaac.st.router
            && u <= now
        {
            self.slaac.st.router = None;
            self.clear_gateway(IpAddr::V6(r));
        }
        let n = self.slaac.dns.len();
        self.slaac.dns.retain(|(_, u)| *u > now);
        if self.slaac.dns.len() != n {
            self.events.push(Event::DnsServers);
        }
    }

    /// Makes the best formed address the engine's, if the engine has none
    /// from SLAAC in use: a preferred one, else a deprecated one.
    fn slaac_assign(&mut self) {
        let current = self.cfg.ipv6.map(|c| c.addr);
        let ours = |s: &AddrState| matches!(s, AddrState::Preferred | AddrState::Deprecated);
        if let Some(c) = current
            && self
                .slaac
                .st
                .addrs
                .iter()
                .any(|a| a.addr == c && ours(&a.state))
        {
            // In use; a preferred one replaces it only once it is deprecated.
            let dep = self
                .slaac
                .st
                .addrs
                .iter()
                .any(|a| a.addr == c && a.state == AddrState::Deprecated);
            if !dep {
                return;
            }
        } else if current.is_some() {
            // An address the application set: left alone.
            return;
        }
        let pick = self
            .slaac
            .st
            .addrs
            .iter()
            .find(|a| a.state == AddrState::Preferred)
            .or_else(|| self.slaac.st.addrs.iter().find(|a| ours(&a.state)))
            .map(|a| a.addr);
        if let Some(a) = pick
            && Some(a) != current
        {
            let _ = self.set_ipv6(a, 64);
        }
    }

    /// A neighbour solicitation for `target` from :: (DAD).
    fn send_dad(&mut self, target: Ipv6Addr) {
        let group = Ipv6Addr::from(ndp::solicited_node_multicast(&target.octets()));
        let src = Ipv6Addr::UNSPECIFIED;
        self.send_icmpv6(src, group, ndp::NEIGHBOR_LEN, |b, ip| {
            ndp::emit_neighbor_solicitation(b, ip, &target.octets(), None).is_ok()
        });
    }

    /// A router solicitation from the link-local address, with our
    /// link-layer address.
    fn send_rs(&mut self) {
        let Some((ll, AddrState::Preferred)) = self.slaac.st.link_local else {
            return;
        };
        let mac = self.cfg.mac;
        let opt = [1, 1, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]];
        let before = self.control.len();
        self.send_icmpv6(ll, ALL_ROUTERS, 8 + opt.len(), |b, ip| {
            icmpv6::emit(b, ip, Icmpv6Type::RouterSolicitation, &opt).is_ok()
        });
        if self.control.len() > before {
            self.slaac.st.solicitations += 1;
        }
    }

    /// Queues an ICMPv6 message of `len` bytes written by `body`, with hop
    /// limit 255, to a multicast `dst`.
    fn send_icmpv6(
        &mut self,
        src: Ipv6Addr,
        dst: Ipv6Addr,
        len: usize,
        body: impl FnOnce(&mut [u8], Addrs<'_>) -> bool,
    ) {
        let l4 = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
        let mut f = vec![0u8; l4 + len];
        super::output::put_eth(
            &mut f,
            ndp::multicast_mac(&dst.octets()),
            self.cfg.mac,
            ethertype::IPV6,
        );
        put_ipv6(
            f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default(),
            src,
            dst,
            protocol::ICMPV6,
            len,
            255,
        );
        let (s, d) = (src.octets(), dst.octets());
        if body(
            f.get_mut(l4..).unwrap_or_default(),
            Addrs { src: &s, dst: &d },
        ) {
            self.counters.icmp_out_msgs += 1;
            self.control.push_back((f, OffloadMeta::plain()));
        }
    }

    /// An IPv6 packet (the hook at the top of `ipv6_packet`): true if SLAAC
    /// took it (a router advertisement, NDP for the link-local or a
    /// tentative address); false leaves it to the engine's own path.
    pub(super) fn slaac_input(&mut self, now: Instant, data: &[u8], mac: [u8; 6]) -> bool {
        let Ok(ip) = ipv6::Packet::new_checked(data) else {
            return false;
        };
        if ip.next_header() != protocol::ICMPV6 {
            return false;
        }
        let (src, dst) = (Ipv6Addr::from(ip.src_addr()), Ipv6Addr::from(ip.dst_addr()));
        let msg = ip.payload();
        let Ok(p) = icmpv6::Packet::new_checked(msg) else {
            return false;
        };
        let ll = self.slaac.st.link_local.map(|(a, _)| a);
        match p.msg_type() {
            icmpv6::msg_type::ROUTER_ADVERTISEMENT => {
                if !p.verify_checksum(&src.octets(), &dst.octets()) {
                    self.counters.icmp_in_errors += 1;
                    return true;
                }
                self.counters.icmp_in_msgs += 1;
                if dst == ALL_NODES || Some(dst) == ll {
                    self.router_advert(now, src, ip.hop_limit(), msg, mac);
                }
                true
            }
            icmpv6::msg_type::NEIGHBOR_SOLICITATION | icmpv6::msg_type::NEIGHBOR_ADVERTISEMENT => {
                let Ok(n) = ndp::Neighbor::new_checked(msg) else {
                    return false;
                };
                let target = Ipv6Addr::from(n.target_addr());
                let tentative = self.slaac_tentative(target);
                let is_ll = Some(target) == ll;
                if !(tentative || is_ll) {
                    return false;
                }
                if ip.hop_limit() != 255 || !p.verify_checksum(&src.octets(), &dst.octets()) {
                    self.counters.ndp_errors += 1;
                    return true;
                }
                self.counters.icmp_in_msgs += 1;
                let dad_from_other = n.is_solicitation() && src.is_unspecified();
                let advert = !n.is_solicitation() && n.target_lladdr() != Some(self.cfg.mac);
                if tentative && (dad_from_other || advert) {
                    self.slaac_duplicate(target);
                    return true;
                }
                // A solicitation for our link-local address: answered as the
                // engine answers for its own address.
                if n.is_solicitation()
                    && is_ll
                    && !tentative
                    && let Some(me) = ll
                {
                    self.counters.ndp_in_solicits += 1;
                    if let (false, Some(m)) = (src.is_unspecified(), n.source_lladdr()) {
                        self.neighbor_add(now, IpAddr::V6(src), m);
                    }
                    let (to, to_mac) = if src.is_unspecified() {
                        (ALL_NODES, ndp::multicast_mac(&ALL_NODES.octets()))
                    } else {
                        (src, mac)
                    };
                    self.counters.icmp_out_msgs += 1;
                    self.send_neighbor_advert(me, to_mac, to, !src.is_unspecified());
                }
                true
            }
            _ => false,
        }
    }

    fn slaac_tentative(&self, a: Ipv6Addr) -> bool {
        matches!(self.slaac.st.link_local, Some((l, AddrState::Tentative(_))) if l == a)
            || self
                .slaac
                .st
                .addrs
                .iter()
                .any(|x| x.addr == a && matches!(x.state, AddrState::Tentative(_)))
    }

    fn slaac_duplicate(&mut self, a: Ipv6Addr) {
        self.slaac.st.duplicates += 1;
        if let Some((l, s)) = &mut self.slaac.st.link_local
            && *l == a
        {
            *s = AddrState::Duplicate;
        }
        for x in &mut self.slaac.st.addrs {
            if x.addr == a {
                x.state = AddrState::Duplicate;
            }
        }
    }

    /// RFC 4861 section 6.3.4 (router and options) and RFC 4862 section
    /// 5.5.3 (prefixes).
    fn router_advert(&mut self, now: Instant, src: Ipv6Addr, hop: u8, msg: &[u8], mac: [u8; 6]) {
        // RFC 4861 section 6.1.2; the checksum was checked by the caller.
        if !is_link_local(src) || hop != 255 || msg.len() < 16 || msg.get(1) != Some(&0) {
            self.slaac.st.bad_advertisements += 1;
            return;
        }
        let lifetime = u16::from_be_bytes([
            msg.get(6).copied().unwrap_or(0),
            msg.get(7).copied().unwrap_or(0),
        ]);
        let opts: Vec<ndp::NdpOption<'_>> =
            match ndp::options(msg.get(16..).unwrap_or_default()).collect::<Result<_, _>>() {
                Ok(v) => v,
                Err(_) => {
                    self.slaac.st.bad_advertisements += 1;
                    return;
                }
            };
        self.slaac.st.advertisements += 1;
        let lladdr = opts
            .iter()
            .find(|o| o.kind == ndp::option_type::SOURCE_LL_ADDR)
            .and_then(|o| o.lladdr())
            .unwrap_or(mac);
        self.neighbor_add(now, IpAddr::V6(src), lladdr);
        if lifetime > 0 {
            let u = now + Duration::from_secs(u64::from(lifetime));
            if self.slaac.st.router.map(|(r, _)| r) != Some(src) {
                if let Some((old, _)) = self.slaac.st.router {
                    self.clear_gateway(IpAddr::V6(old));
                }
                let _ = self.set_gateway(IpAddr::V6(src));
            }
            self.slaac.st.router = Some((src, u));
        } else if self.slaac.st.router.map(|(r, _)| r) == Some(src) {
            self.slaac.st.router = None;
            self.clear_gateway(IpAddr::V6(src));
        }
        for o in &opts {
            match o.kind {
                ndp::option_type::PREFIX_INFO => self.prefix_info(now, o.data),
                RDNSS => self.rdnss(now, o.data),
                _ => {}
            }
        }
    }

    /// A prefix information option (its data after type and length).
    fn prefix_info(&mut self, now: Instant, d: &[u8]) {
        // prefix length, flags, valid, preferred, reserved, prefix.
        let (Some(&len), Some(&flags), Some(pfx)) = (d.first(), d.get(1), d.get(14..30)) else {
            return;
        };
        let Ok(pfx) = <[u8; 16]>::try_from(pfx) else {
            return;
        };
        let prefix = Ipv6Addr::from(pfx);
        let (valid, preferred) = (be32(d, 2), be32(d, 6));
        // RFC 4862 section 5.5.3 (a) to (d).
        if flags & 0x40 == 0 || is_link_local(prefix) || preferred > valid || len != 64 {
            return;
        }
        let addr = with_iid(prefix, self.cfg.mac);
        let valid_until = until(now, valid);
        let preferred_until = until(now, preferred);
        if let Some(a) = self.slaac.st.addrs.iter_mut().find(|a| a.addr == addr) {
            // (e): the two-hour rule against a forged short lifetime.
            let remaining = a.valid_until.map(|t| t.saturating_duration_since(now));
            let received = Duration::from_secs(u64::from(valid));
            let take = valid == u32::MAX
                || received > TWO_HOURS
                || remaining.is_some_and(|r| received > r);
            if take {
                a.valid_until = valid_until;
            } else if remaining.is_some_and(|r| r > TWO_HOURS) {
                a.valid_until = Some(now + TWO_HOURS);
            }
            a.preferred_until = preferred_until;
            if a.state == AddrState::Deprecated && preferred > 0 {
                a.state = AddrState::Preferred;
            }
            return;
        }
        if valid == 0 || self.slaac.st.addrs.len() >= MAX_PREFIXES {
            return;
        }
        self.slaac.st.addrs.push(SlaacAddr {
            addr,
            state: AddrState::Tentative(now + DAD_WAIT),
            valid_until,
            preferred_until,
        });
        self.send_dad(addr);
    }

    /// An RDNSS option (RFC 8106 section 5.1): reserved, lifetime, addresses.
    fn rdnss(&mut self, now: Instant, d: &[u8]) {
        let lifetime = be32(d, 2);
        let addrs = d.get(6..).unwrap_or_default();
        if addrs.is_empty() || !addrs.len().is_multiple_of(16) {
            return;
        }
        let before = self.slaac.dns.clone();
        for c in addrs.chunks_exact(16) {
            let Ok(a) = <[u8; 16]>::try_from(c) else {
                continue;
            };
            let a = Ipv6Addr::from(a);
            self.slaac.dns.retain(|(x, _)| *x != a);
            if lifetime > 0 && self.slaac.dns.len() < MAX_DNS {
                let u = until(now, lifetime).unwrap_or(Instant::from_nanos(u64::MAX));
                self.slaac.dns.push((a, u));
            }
        }
        let same = before.len() == self.slaac.dns.len()
            && before.iter().zip(&self.slaac.dns).all(|(x, y)| x.0 == y.0);
        if !same {
            self.events.push(Event::DnsServers);
        }
    }
}

/// The RDNSS option's type (RFC 8106 section 5.1).
const RDNSS: u8 = 25;
