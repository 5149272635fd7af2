//! ARP and neighbour-discovery suppression: requests answered by the VTEP from what
//! it knows, instead of flooded to every remote VTEP.
//!
//! Linux's vxlan `proxy` option (`arp_reduce`, `neigh_reduce` in
//! `drivers/net/vxlan/vxlan_core.c`): an ARP request (RFC 826) or an IPv6 Neighbor
//! Solicitation (RFC 4861 section 7.2.3) from a local port whose target address
//! the table knows is answered locally with an ARP reply or a Neighbor
//! Advertisement carrying the known MAC; anything else goes on as usual (flooded).
//!
//! The table ([`Suppress`]) maps (VNI, IP) to MAC. It learns from the ARP
//! requests and replies it sees (sender fields) and from Neighbor Advertisements
//! (target address and target link-layer option) and Solicitations (source
//! address and source link-layer option); static entries are configured. Like
//! [`super::Fdb`], it ages learned entries and is bounded per VNI and in total.
//!
//! ```
//! use linerate_tunnel::bridge::{Answer, Suppress, SuppressConfig};
//! use linerate_wire::build::FrameBuilder;
//! use linerate_wire::arp;
//! use std::time::Duration;
//!
//! let mut s = Suppress::new(SuppressConfig::default());
//! s.add_static(5, "192.0.2.9".parse().unwrap(), [2, 0, 0, 0, 0, 9]).unwrap();
//! // 192.0.2.1 asks who has 192.0.2.9.
//! let request = FrameBuilder::arp(arp::request([2, 0, 0, 0, 0, 1], [192, 0, 2, 1], [192, 0, 2, 9]).into(),
//!     [2, 0, 0, 0, 0, 1], [0xff; 6]).build(&[]);
//! let mut out = [0u8; 128];
//! let Answer::Answered(n) = s.answer(Duration::ZERO, 5, &request, &mut out) else { panic!() };
//! let reply = arp::Packet::new_checked(&out[14..n]).unwrap();
//! assert_eq!((reply.sha(), reply.spa()), ([2, 0, 0, 0, 0, 9], [192, 0, 2, 9]));
//! ```

use super::fdb::{Mac, is_valid_unicast};
use linerate_wire::etherparse::{IpNumber, Ipv6Header};
use linerate_wire::icmp::{ndp, v6 as icmp6};
use linerate_wire::{arp, ethernet, ipv6};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

const ETHERTYPE_ARP: u16 = 0x0806;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETH_LEN: usize = 14;

/// Bounds and ageing of a [`Suppress`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SuppressConfig {
    /// How long a learned entry lives without being seen again.
    pub ageing: Duration,
    /// The most entries one VNI may hold.
    pub max_per_vni: usize,
    /// The most entries in all.
    pub max_total: usize,
}

impl Default for SuppressConfig {
    fn default() -> SuppressConfig {
        SuppressConfig {
            ageing: Duration::from_secs(300),
            max_per_vni: 16_384,
            max_total: 65_536,
        }
    }
}

/// Why a static entry was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuppressError {
    /// The MAC is not a unicast address.
    InvalidMac(Mac),
    /// The bound of the VNI or the table is reached.
    Full {
        /// The VNI.
        vni: u32,
    },
}

impl core::fmt::Display for SuppressError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SuppressError::InvalidMac(m) => {
                write!(f, "{} is not a unicast MAC", super::MacFmt(*m))
            }
            SuppressError::Full { vni } => write!(f, "neighbour table full (VNI {vni})"),
        }
    }
}

impl std::error::Error for SuppressError {}

/// What [`Suppress::answer`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Not an ARP request or a Neighbor Solicitation (or malformed): forward it.
    NotARequest,
    /// A request for an address the table does not know: forward it.
    Unknown,
    /// Answered: the reply is the first `n` bytes of the output buffer; the
    /// request goes no further.
    Answered(usize),
}

/// Per-VNI suppression counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SuppressCounters {
    /// Requests answered locally (`arp_suppressed` + `nd_suppressed`).
    pub answered: u64,
    /// Requests for unknown targets (forwarded).
    pub missed: u64,
    /// Entries learned.
    pub learned: u64,
    /// Entries not learned because a bound was reached.
    pub full: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    mac: Mac,
    seen: Duration,
    is_static: bool,
}

/// One entry of the IP-to-MAC table, as [`Suppress::dump`] lists it (like a
/// line of `ip neigh show`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NeighRecord {
    /// The VNI.
    pub vni: u32,
    /// The inner IP address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: Mac,
    /// Static (configured) rather than learned.
    pub is_static: bool,
    /// Time since it was last seen (zero for static entries).
    pub age: Duration,
}

/// The IP-to-MAC table of every VNI, and the answering of requests from it.
#[derive(Debug)]
pub struct Suppress {
    cfg: SuppressConfig,
    table: HashMap<(u32, IpAddr), Entry>,
    per_vni: HashMap<u32, (usize, SuppressCounters)>,
}

impl Suppress {
    /// An empty table.
    pub fn new(cfg: SuppressConfig) -> Suppress {
        Suppress {
            cfg,
            table: HashMap::new(),
            per_vni: HashMap::new(),
        }
    }

    /// Entries in all VNIs.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The counters of `vni`.
    pub fn counters(&self, vni: u32) -> SuppressCounters {
        self.per_vni.get(&vni).map(|v| v.1).unwrap_or_default()
    }

    fn room(&self, vni: u32) -> bool {
        self.table.len() < self.cfg.max_total
            && self.per_vni.get(&vni).map_or(0, |v| v.0) < self.cfg.max_per_vni
    }

    /// Adds or replaces a static entry (never ages, never overwritten by learning).
    pub fn add_static(&mut self, vni: u32, ip: IpAddr, mac: Mac) -> Result<(), SuppressError> {
        if !is_valid_unicast(mac) {
            return Err(SuppressError::InvalidMac(mac));
        }
        let e = Entry {
            mac,
            seen: Duration::ZERO,
            is_static: true,
        };
        if let Some(old) = self.table.get_mut(&(vni, ip)) {
            *old = e;
            return Ok(());
        }
        if !self.room(vni) {
            return Err(SuppressError::Full { vni });
        }
        self.table.insert((vni, ip), e);
        self.per_vni.entry(vni).or_default().0 += 1;
        Ok(())
    }

    /// Removes the entry for `ip` in `vni`, static or learned; true if there
    /// was one.
    pub fn remove(&mut self, vni: u32, ip: IpAddr) -> bool {
        if self.table.remove(&(vni, ip)).is_none() {
            return false;
        }
        if let Some(v) = self.per_vni.get_mut(&vni) {
            v.0 = v.0.saturating_sub(1);
        }
        true
    }

    /// Removes the learned entries of `vni` (every VNI with `None`); returns
    /// how many went.
    pub fn flush_learned(&mut self, vni: Option<u32>) -> usize {
        let per_vni = &mut self.per_vni;
        let before = self.table.len();
        self.table.retain(|(v, _), e| {
            let go = !e.is_static && vni.is_none_or(|n| n == *v);
            if go && let Some(c) = per_vni.get_mut(v) {
                c.0 = c.0.saturating_sub(1);
            }
            !go
        });
        before - self.table.len()
    }

    /// The entries of `vni` not aged out at `now`, sorted by address.
    pub fn dump(&self, now: Duration, vni: u32) -> Vec<NeighRecord> {
        let mut out: Vec<NeighRecord> = self
            .table
            .iter()
            .filter(|((v, _), e)| {
                *v == vni && (e.is_static || now.saturating_sub(e.seen) < self.cfg.ageing)
            })
            .map(|((v, ip), e)| NeighRecord {
                vni: *v,
                ip: *ip,
                mac: e.mac,
                is_static: e.is_static,
                age: if e.is_static {
                    Duration::ZERO
                } else {
                    now.saturating_sub(e.seen)
                },
            })
            .collect();
        out.sort_by_key(|r| r.ip);
        out
    }

    /// Learns that `ip` in `vni` is at `mac`; false if not learned (invalid, full,
    /// or a static entry holds the address).
    pub fn learn(&mut self, now: Duration, vni: u32, ip: IpAddr, mac: Mac) -> bool {
        if !is_valid_unicast(mac) || ip.is_unspecified() || ip.is_multicast() {
            return false;
        }
        if let Some(e) = self.table.get_mut(&(vni, ip)) {
            if e.is_static {
                return false;
            }
            e.mac = mac;
            e.seen = now;
            return true;
        }
        let room = self.room(vni);
        let v = self.per_vni.entry(vni).or_default();
        if !room {
            v.1.full += 1;
            return false;
        }
        v.0 += 1;
        v.1.learned += 1;
        self.table.insert(
            (vni, ip),
            Entry {
                mac,
                seen: now,
                is_static: false,
            },
        );
        true
    }

    /// The MAC of `ip` in `vni`, if known and not aged out at `now`.
    pub fn lookup(&self, now: Duration, vni: u32, ip: IpAddr) -> Option<Mac> {
        let e = self.table.get(&(vni, ip))?;
        (e.is_static || now.saturating_sub(e.seen) < self.cfg.ageing).then_some(e.mac)
    }

    /// Frees the learned entries aged out at `now`; returns how many.
    pub fn age(&mut self, now: Duration) -> usize {
        let ageing = self.cfg.ageing;
        let per_vni = &mut self.per_vni;
        let before = self.table.len();
        self.table.retain(|(vni, _), e| {
            let keep = e.is_static || now.saturating_sub(e.seen) < ageing;
            if !keep && let Some(v) = per_vni.get_mut(vni) {
                v.0 = v.0.saturating_sub(1);
            }
            keep
        });
        before - self.table.len()
    }

    /// Learns the addresses an ARP packet or a Neighbor Solicitation or
    /// Advertisement of `vni` carries (call it on every frame the bridge
    /// forwards, from either side). Malformed frames teach nothing.
    pub fn snoop(&mut self, now: Duration, vni: u32, frame: &[u8]) {
        match parse(frame) {
            Some(Request::Arp(p)) => {
                let spa = p.spa();
                if spa != [0; 4] {
                    self.learn(now, vni, IpAddr::from(spa), p.sha());
                }
            }
            Some(Request::Nd { src, msg }) => {
                if msg.is_solicitation() {
                    if let Some(m) = msg.source_lladdr() {
                        self.learn(now, vni, IpAddr::from(src), m);
                    }
                } else if let Some(m) = msg.target_lladdr() {
                    self.learn(now, vni, IpAddr::from(msg.target_addr()), m);
                }
            }
            None => {}
        }
    }

    /// Answers `frame` (from a local port of `vni`) into `out` if it is an ARP
    /// request or a Neighbor Solicitation for a known address.
    pub fn answer(&mut self, now: Duration, vni: u32, frame: &[u8], out: &mut [u8]) -> Answer {
        let answer = match parse(frame) {
            Some(Request::Arp(p)) if p.oper() == arp::operation::REQUEST => {
                let target = Ipv4Addr::from(p.tpa());
                if target.is_multicast() || target.is_loopback() || p.tpa() == p.spa() {
                    return Answer::NotARequest;
                }
                self.lookup(now, vni, IpAddr::V4(target))
                    .map(|mac| arp_reply(&p, mac, out))
            }
            Some(Request::Nd { src, msg }) if msg.is_solicitation() => {
                let target = Ipv6Addr::from(msg.target_addr());
                if target.is_multicast() {
                    return Answer::NotARequest;
                }
                self.lookup(now, vni, IpAddr::V6(target))
                    .map(|mac| neighbor_advert(frame, src, &msg, mac, out))
            }
            _ => return Answer::NotARequest,
        };
        let counters = &mut self.per_vni.entry(vni).or_default().1;
        match answer {
            None => {
                counters.missed += 1;
                Answer::Unknown
            }
            Some(Some(n)) => {
                counters.answered += 1;
                Answer::Answered(n)
            }
            Some(None) => Answer::NotARequest,
        }
    }
}

enum Request<'a> {
    Arp(arp::Packet<&'a [u8]>),
    Nd {
        src: [u8; 16],
        msg: ndp::Neighbor<&'a [u8]>,
    },
}

/// An untagged ARP packet, or an ICMPv6 neighbour message sent with hop limit 255
/// (RFC 4861 section 7.1.1) and a good checksum.
fn parse(frame: &[u8]) -> Option<Request<'_>> {
    let eth = ethernet::Packet::new_checked(frame).ok()?;
    let payload = frame.get(ETH_LEN..)?;
    match eth.ethertype() {
        ETHERTYPE_ARP => {
            let p = arp::Packet::new_checked(payload).ok()?;
            (p.htype() == arp::HTYPE_ETHERNET && p.ptype() == 0x0800).then_some(Request::Arp(p))
        }
        ETHERTYPE_IPV6 => {
            let ip = ipv6::Packet::new_checked(payload).ok()?;
            if ip.next_header() != 58 || ip.hop_limit() != 255 {
                return None;
            }
            let body = payload.get(ipv6::HEADER_LEN..ip.total_len())?;
            let msg = ndp::Neighbor::new_checked(body).ok()?;
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            if msg.code() != 0 || !msg.verify_checksum(&src, &dst) {
                return None;
            }
            let t = msg.msg_type();
            (t == icmp6::msg_type::NEIGHBOR_SOLICITATION
                || t == icmp6::msg_type::NEIGHBOR_ADVERTISEMENT)
                .then_some(Request::Nd { src, msg })
        }
        _ => None,
    }
}

fn arp_reply(req: &arp::Packet<&[u8]>, mac: Mac, out: &mut [u8]) -> Option<usize> {
    let (eth, body) = out.split_at_mut_checked(ETH_LEN)?;
    eth.get_mut(0..6)?.copy_from_slice(&req.sha());
    eth.get_mut(6..12)?.copy_from_slice(&mac);
    eth.get_mut(12..14)?
        .copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let n = arp::emit_reply(body, mac, req.tpa(), req.sha(), req.spa()).ok()?;
    // Pad to the Ethernet minimum (60 bytes without FCS), as a host's stack does.
    let len = (ETH_LEN + n).max(60);
    out.get_mut(ETH_LEN + n..len)?.fill(0);
    Some(len)
}

fn neighbor_advert(
    frame: &[u8],
    src: [u8; 16],
    ns: &ndp::Neighbor<&[u8]>,
    mac: Mac,
    out: &mut [u8],
) -> Option<usize> {
    let requester_mac: Mac = frame.get(6..12)?.try_into().ok()?;
    let target = ns.target_addr();
    // RFC 4861 section 7.2.4: to the solicitation's source, solicited; to
    // all-nodes, not solicited, when it came from the unspecified address (DAD).
    let dad = src == [0; 16];
    let dst: [u8; 16] = if dad {
        [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    } else {
        src
    };
    let eth_dst = if dad {
        ndp::multicast_mac(&dst)
    } else {
        requester_mac
    };
    let flags = linerate_wire::etherparse::icmpv6::NeighborAdvertisementHeader {
        router: false,
        solicited: !dad,
        r#override: true,
    };
    let (head, rest) = out.split_at_mut_checked(ETH_LEN + ipv6::HEADER_LEN)?;
    let icmp_len = ndp::emit_neighbor_advertisement(
        rest,
        icmp6::Addrs {
            src: &target,
            dst: &dst,
        },
        &target,
        flags,
        Some(mac),
    )
    .ok()?;
    head.get_mut(0..6)?.copy_from_slice(&eth_dst);
    head.get_mut(6..12)?.copy_from_slice(&mac);
    head.get_mut(12..14)?
        .copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
    let ip = Ipv6Header {
        traffic_class: 0,
        flow_label: Default::default(),
        payload_length: u16::try_from(icmp_len).ok()?,
        next_header: IpNumber::IPV6_ICMP,
        hop_limit: 255,
        source: target,
        destination: dst,
    };
    ipv6::emit(&ip, head.get_mut(ETH_LEN..)?).ok()?;
    Some(ETH_LEN + ipv6::HEADER_LEN + icmp_len)
}

#[cfg(test)]
mod tests;
