//! The VTEP's membership of its multicast groups on the underlay (Linux's
//! vxlan `group`): the host side of IGMPv3 (RFC 3376 section 5) and MLDv2
//! (RFC 3810 section 6) for groups joined in EXCLUDE mode with no source,
//! which is all a VTEP asks for ("every sender of the group").
//!
//! * A join is reported at once as a state change (CHANGE_TO_EXCLUDE {})
//!   and [`ROBUSTNESS`] - 1 more times at random within the Unsolicited
//!   Report Interval (RFC 3376 section 5.1, RFC 3810 section 6.1).
//! * A general query is answered with the current state of every group
//!   (MODE_IS_EXCLUDE {}), a group-specific one with that group's, each
//!   after a delay chosen at random in [0, Max Resp Time] (RFC 3376 section
//!   5.2, RFC 3810 section 6.2); a pending answer is kept when it is due
//!   sooner.
//! * An IGMPv1 or IGMPv2 querier (an MLDv1 one for IPv6) makes the answers
//!   that version's reports while it is present (RFC 3376 section 7.2.1,
//!   RFC 3810 section 8.2.1: the Older Version Querier Present Timeout).
//! * A leave is reported as CHANGE_TO_INCLUDE {} (an IGMPv2 leave, an MLDv1
//!   done), [`ROBUSTNESS`] times at once, as the VTEP may be gone before a
//!   retransmission would be due.
//!
//! Messages are encoded by `linerate_wire::mcast` (shared with the engine's
//! sockets); this keeps the timers. It runs on the receive path's clock
//! ([`Instant`]) and is polled there, so no thread of its own.

use linerate_wire::mcast::{Compat, Out, Query, igmp, mld, record};
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

/// Robustness Variable (RFC 3376 section 8.1, RFC 3810 section 9.1).
pub const ROBUSTNESS: u8 = 2;
/// Unsolicited Report Interval of IGMPv3 and MLDv2 (RFC 3376 section 8.11,
/// RFC 3810 section 9.11).
const URI: Duration = Duration::from_secs(1);
/// Query Interval assumed for the Older Version Querier Present Timeout
/// (RFC 3376 section 8.2).
const QUERY_INTERVAL: Duration = Duration::from_secs(125);

/// One group joined.
#[derive(Debug, Clone)]
struct Group {
    addr: IpAddr,
    /// State-change reports still to send, and when the next is due.
    changes_left: u8,
    change_at: Option<Instant>,
    /// A pending answer to a group-specific query.
    answer_at: Option<Instant>,
}

/// The groups one VTEP joined on its underlay, and the messages due.
#[derive(Debug)]
pub(crate) struct Membership {
    local_ip: IpAddr,
    local_mac: [u8; 6],
    groups: Vec<Group>,
    /// A pending answer to a general query.
    general_at: Option<Instant>,
    /// An older-version querier (IGMPv1/v2, MLDv1) heard, until.
    older: Option<(Compat, Instant)>,
    rng: u64,
    ip_id: u16,
}

impl Membership {
    pub(crate) fn new(local_ip: IpAddr, local_mac: [u8; 6]) -> Membership {
        // A seed of the process's random hash keys, the address and the
        // time: hosts that start together answer queries at different times.
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new().hash_one((
            local_ip,
            local_mac,
            Instant::now(),
        ));
        Membership {
            local_ip,
            local_mac,
            groups: Vec::new(),
            general_at: None,
            older: None,
            rng: seed | 1,
            ip_id: 0,
        }
    }

    /// The groups joined.
    pub(crate) fn groups(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.groups.iter().map(|g| g.addr)
    }

    /// True if `g` is joined.
    pub(crate) fn has(&self, g: IpAddr) -> bool {
        self.groups.iter().any(|x| x.addr == g)
    }

    /// A delay in [0, `max`] at millisecond resolution (xorshift64*).
    fn delay(&mut self, max: Duration) -> Duration {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(x.wrapping_mul(0x2545_f491_4f6c_dd1d) % ms.saturating_add(1))
    }

    fn compat(&self, now: Instant) -> Compat {
        match self.older {
            Some((c, until)) if now < until => c,
            _ => Compat::V3,
        }
    }

    /// Joins `g` (nothing if joined): its state-change report goes into
    /// `out` now. Returns whether it was new.
    pub(crate) fn join(&mut self, now: Instant, g: IpAddr, out: &mut Vec<Vec<u8>>) -> bool {
        if self.has(g) {
            return false;
        }
        let first = self.delay(URI);
        self.groups.push(Group {
            addr: g,
            changes_left: ROBUSTNESS - 1,
            change_at: Some(now + first),
            answer_at: None,
        });
        let msg = match self.compat(now) {
            Compat::V3 => Out::Report(vec![(record::TO_EX, g, Vec::new())]),
            Compat::V2 => Out::V2Report(g),
            Compat::V1 => Out::V1Report(g),
        };
        self.encode(&msg, out);
        true
    }

    /// Leaves `g` (nothing if not joined): the leave goes into `out`.
    pub(crate) fn leave(&mut self, now: Instant, g: IpAddr, out: &mut Vec<Vec<u8>>) -> bool {
        let Some(at) = self.groups.iter().position(|x| x.addr == g) else {
            return false;
        };
        self.groups.remove(at);
        let msg = match self.compat(now) {
            Compat::V3 => Some(Out::Report(vec![(record::TO_IN, g, Vec::new())])),
            Compat::V2 => Some(Out::Leave(g)),
            // IGMPv1 has no leave.
            Compat::V1 => None,
        };
        if let Some(m) = msg {
            for _ in 0..ROBUSTNESS {
                self.encode(&m, out);
            }
        }
        true
    }

    /// Leaves every group.
    pub(crate) fn leave_all(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        let all: Vec<IpAddr> = self.groups().collect();
        for g in all {
            self.leave(now, g, out);
        }
    }

    /// A query heard: the answer is scheduled.
    pub(crate) fn query(&mut self, now: Instant, q: &Query) {
        if q.version != Compat::V3 {
            let qi = if q.qqi.is_zero() {
                QUERY_INTERVAL
            } else {
                q.qqi
            };
            let timeout = qi * u32::from(ROBUSTNESS) + q.max_resp;
            self.older = Some((q.version, now + timeout));
        }
        let at = now + self.delay(q.max_resp);
        match q.group {
            None => {
                if self.general_at.is_none_or(|g| at < g) {
                    self.general_at = Some(at);
                }
            }
            Some(g) => {
                // Answered by a pending general answer due sooner anyway.
                if self.general_at.is_some_and(|ga| ga <= at) {
                    return;
                }
                if let Some(x) = self.groups.iter_mut().find(|x| x.addr == g)
                    && x.answer_at.is_none_or(|a| at < a)
                {
                    x.answer_at = Some(at);
                }
            }
        }
    }

    /// The IGMP message `data` (an IPv4 payload) heard: a query is
    /// scheduled. Returns whether it was a query, or an error for a
    /// malformed one.
    pub(crate) fn igmp(&mut self, now: Instant, data: &[u8]) -> Result<bool, ()> {
        match igmp::decode(data) {
            Ok(igmp::Msg::Query(q)) => {
                self.query(now, &q);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(_) => Err(()),
        }
    }

    /// The MLD message `data` (checksum verified) heard from `src` with
    /// `hop_limit` and a Router Alert option or not.
    pub(crate) fn mld(
        &mut self,
        now: Instant,
        data: &[u8],
        src: Ipv6Addr,
        hop_limit: u8,
        router_alert: bool,
    ) -> Result<bool, ()> {
        match mld::decode(data, src, hop_limit, router_alert) {
            Ok(mld::Msg::Query(q)) => {
                self.query(now, &q);
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(_) => Err(()),
        }
    }

    /// The earliest timer.
    fn next(&self) -> Option<Instant> {
        let g = self
            .groups
            .iter()
            .flat_map(|g| [g.change_at, g.answer_at])
            .flatten()
            .min();
        match (g, self.general_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Sends (into `out`) what is due at `now`.
    pub(crate) fn poll(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        if self.next().is_none_or(|n| n > now) {
            return;
        }
        let compat = self.compat(now);
        let mut msgs: Vec<Out> = Vec::new();
        let mut current: Vec<IpAddr> = Vec::new();
        let mut changes: Vec<IpAddr> = Vec::new();
        let general = self.general_at.is_some_and(|g| g <= now);
        if general {
            self.general_at = None;
        }
        for i in 0..self.groups.len() {
            let d = self.delay(URI);
            let Some(g) = self.groups.get_mut(i) else {
                continue;
            };
            if g.change_at.is_some_and(|c| c <= now) {
                changes.push(g.addr);
                g.changes_left = g.changes_left.saturating_sub(1);
                g.change_at = (g.changes_left > 0).then(|| now + d);
            }
            if general || g.answer_at.is_some_and(|a| a <= now) {
                g.answer_at = None;
                current.push(g.addr);
            }
        }
        match compat {
            Compat::V3 => {
                if !changes.is_empty() {
                    msgs.push(Out::Report(
                        changes
                            .iter()
                            .map(|g| (record::TO_EX, *g, Vec::new()))
                            .collect(),
                    ));
                }
                if !current.is_empty() {
                    msgs.push(Out::Report(
                        current
                            .iter()
                            .map(|g| (record::IS_EX, *g, Vec::new()))
                            .collect(),
                    ));
                }
            }
            Compat::V2 => msgs.extend(changes.iter().chain(&current).map(|g| Out::V2Report(*g))),
            Compat::V1 => msgs.extend(changes.iter().chain(&current).map(|g| Out::V1Report(*g))),
        }
        for m in &msgs {
            self.encode(m, out);
        }
    }

    /// The frames of `m` from this VTEP, into `out`.
    fn encode(&mut self, m: &Out, out: &mut Vec<Vec<u8>>) {
        const MTU: usize = 1280;
        match self.local_ip {
            IpAddr::V4(src) => {
                for (dst, msg) in igmp::messages(m, MTU) {
                    self.ip_id = self.ip_id.wrapping_add(1);
                    out.push(igmp::frame(self.local_mac, src, dst, self.ip_id, &msg));
                }
            }
            IpAddr::V6(own) => {
                let src = mld::source(own, self.local_mac);
                for (dst, msg) in mld::messages(m, MTU) {
                    out.push(mld::frame(self.local_mac, src, dst, &msg));
                }
            }
        }
    }

    /// The Ethernet group addresses the underlay must let in: the groups',
    /// the all-systems / all-nodes group (queries) and, over IPv6, the
    /// solicited-node group of the VTEP's address (neighbour discovery).
    pub(crate) fn macs(&self) -> Vec<[u8; 6]> {
        let mut v: Vec<[u8; 6]> = self.groups().map(group_mac).collect();
        match self.local_ip {
            IpAddr::V4(_) => v.push(igmp::group_mac(igmp::ALL_SYSTEMS)),
            IpAddr::V6(a) => {
                v.push(mld::group_mac(mld::ALL_NODES));
                let o = a.octets();
                v.push([0x33, 0x33, 0xff, o[13], o[14], o[15]]);
            }
        }
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// The Ethernet address of group `g` (RFC 1112 section 6.4, RFC 2464
/// section 7).
pub(crate) fn group_mac(g: IpAddr) -> [u8; 6] {
    match g {
        IpAddr::V4(a) => igmp::group_mac(a),
        IpAddr::V6(a) => mld::group_mac(a),
    }
}

#[cfg(test)]
mod tests;
