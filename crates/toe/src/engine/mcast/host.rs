//! The host side of IGMPv3 (RFC 3376 section 5) and MLDv2 (RFC 3810 section
//! 6), which are one protocol over two families, with the compatibility modes
//! of RFC 3376 section 7 (IGMPv1 and IGMPv2 queriers) and RFC 3810 section 8
//! (MLDv1 queriers).
//!
//! [`Host`] holds one interface's per-group state for one family: the filter
//! each group has (the union of the sockets' filters, worked out by the
//! caller), the state-change records still to be retransmitted, pending
//! answers to queries, and the Older Version Querier Present timers. It
//! produces [`Out`] messages, which `igmp` and `mld` encode; it never sees
//! bytes.

use crate::rng::Rng;
use crate::time::Instant;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

pub use linerate_wire::mcast::Compat;
pub(crate) use linerate_wire::mcast::{Out, Query, V1_MAX_RESP, record};

/// Default Robustness Variable (RFC 3376 section 8.1, RFC 3810 section 9.1).
pub(crate) const ROBUSTNESS: u8 = 2;
/// Default Query Interval (RFC 3376 section 8.2, RFC 3810 section 9.2).
pub(crate) const QUERY_INTERVAL: Duration = Duration::from_secs(125);
/// Unsolicited Report Interval of IGMPv3 and MLDv2 (RFC 3376 section 8.11,
/// RFC 3810 section 9.11).
pub(crate) const URI_V3: Duration = Duration::from_secs(1);
/// Unsolicited Report Interval of IGMPv1/v2 and MLDv1 (RFC 2236 section 8.10,
/// RFC 2710 section 7.10).
pub(crate) const URI_OLD: Duration = Duration::from_secs(10);
/// A group's filter mode (RFC 3376 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterMode {
    /// Only datagrams from the listed sources.
    Include,
    /// Datagrams from every source but the listed ones.
    Exclude,
}

/// A filter: mode and source list (sorted, no duplicates).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    pub mode: FilterMode,
    pub sources: Vec<IpAddr>,
}

impl Filter {
    /// INCLUDE {}: not a member.
    pub const NONE: Filter = Filter {
        mode: FilterMode::Include,
        sources: Vec::new(),
    };

    /// `mode` over `sources`, sorted and deduplicated.
    pub fn new(mode: FilterMode, sources: &[IpAddr]) -> Filter {
        let mut sources = sources.to_vec();
        sources.sort_unstable();
        sources.dedup();
        Filter { mode, sources }
    }

    /// True for INCLUDE {}.
    pub fn is_none(&self) -> bool {
        self.mode == FilterMode::Include && self.sources.is_empty()
    }

    /// True if a datagram from `src` passes.
    pub fn allows(&self, src: IpAddr) -> bool {
        let listed = self.sources.binary_search(&src).is_ok();
        match self.mode {
            FilterMode::Include => listed,
            FilterMode::Exclude => !listed,
        }
    }
}

/// State-change records still to be retransmitted (RFC 3376 section 5.1).
#[derive(Debug, Clone, Default)]
struct Change {
    /// Filter mode change records (or, in an older mode, reports) still to send.
    mode_left: u8,
    /// Sources to report in ALLOW / BLOCK records, each with its retransmissions left.
    allow: Vec<(IpAddr, u8)>,
    block: Vec<(IpAddr, u8)>,
}

impl Change {
    fn pending(&self) -> bool {
        self.mode_left > 0 || !self.allow.is_empty() || !self.block.is_empty()
    }
}

/// One group's state on the interface.
#[derive(Debug, Clone)]
struct Group {
    filter: Filter,
    change: Change,
    /// A pending answer to a query about this group (the group timer).
    query_at: Option<Instant>,
    /// The sources that query asked about (empty: the whole group).
    query_sources: Vec<IpAddr>,
}

/// One interface's IGMP or MLD host state.
#[derive(Debug, Clone)]
pub(crate) struct Host {
    groups: BTreeMap<IpAddr, Group>,
    /// Robustness Variable, from the last query that gave one.
    robustness: u8,
    /// Query Interval, from the last query that gave one.
    query_interval: Duration,
    /// IGMPv1 querier present until.
    v1_until: Option<Instant>,
    /// IGMPv2 / MLDv1 querier present until.
    v2_until: Option<Instant>,
    /// Pending answer to a general query (the interface timer).
    general_at: Option<Instant>,
    /// Next retransmission of state-change records.
    change_at: Option<Instant>,
    /// The earliest of the above and the groups' timers.
    next: Option<Instant>,
}

impl Default for Host {
    fn default() -> Host {
        Host {
            groups: BTreeMap::new(),
            robustness: ROBUSTNESS,
            query_interval: QUERY_INTERVAL,
            v1_until: None,
            v2_until: None,
            general_at: None,
            change_at: None,
            next: None,
        }
    }
}

/// A uniform delay in `0..=max`, at millisecond resolution.
fn delay(rng: &mut Rng, max: Duration) -> Duration {
    let ms = max.as_millis().min(u128::from(u32::MAX)) as u64;
    Duration::from_millis(rng.below(ms + 1))
}

fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    crate::time::earliest(a, b)
}

/// Sorted-set difference `a - b`.
fn minus(a: &[IpAddr], b: &[IpAddr]) -> Vec<IpAddr> {
    a.iter()
        .filter(|x| b.binary_search(x).is_err())
        .copied()
        .collect()
}

/// Sorted-set intersection.
fn and(a: &[IpAddr], b: &[IpAddr]) -> Vec<IpAddr> {
    a.iter()
        .filter(|x| b.binary_search(x).is_ok())
        .copied()
        .collect()
}

/// Adds `sources` to a retransmission list with `count` transmissions each,
/// and takes them off the opposite list.
fn schedule_sources(
    list: &mut Vec<(IpAddr, u8)>,
    other: &mut Vec<(IpAddr, u8)>,
    s: &[IpAddr],
    count: u8,
) {
    for a in s {
        other.retain(|(x, _)| x != a);
        match list.iter_mut().find(|(x, _)| x == a) {
            Some(e) => e.1 = count,
            None => list.push((*a, count)),
        }
    }
}

impl Host {
    /// The mode the host answers in now (RFC 3376 section 7.2.1).
    pub fn compat(&self) -> Compat {
        if self.v1_until.is_some() {
            Compat::V1
        } else if self.v2_until.is_some() {
            Compat::V2
        } else {
            Compat::V3
        }
    }

    /// The Robustness Variable in use.
    #[cfg(test)]
    pub fn robustness(&self) -> u8 {
        self.robustness
    }

    /// When [`Host::timeout`] is next due.
    pub fn deadline(&self) -> Option<Instant> {
        self.next
    }

    /// The interface filter of `group` (INCLUDE {} if none).
    #[cfg(test)]
    pub fn filter(&self, group: IpAddr) -> Option<&Filter> {
        self.groups.get(&group).map(|g| &g.filter)
    }

    /// Groups with a filter other than INCLUDE {} (members).
    pub fn members(&self) -> impl Iterator<Item = (&IpAddr, &Filter)> {
        self.groups
            .iter()
            .filter(|(_, g)| !g.filter.is_none())
            .map(|(a, g)| (a, &g.filter))
    }

    fn recompute(&mut self) {
        let mut t = earliest(self.v1_until, self.v2_until);
        t = earliest(t, self.general_at);
        t = earliest(t, self.change_at);
        for g in self.groups.values() {
            t = earliest(t, g.query_at);
        }
        self.next = t;
    }

    /// The interface's filter for `group` becomes `new` (RFC 3376 section
    /// 5.1, RFC 3810 section 6.1): the state-change report goes at once into
    /// `out`, its retransmissions are scheduled.
    pub fn set_filter(
        &mut self,
        now: Instant,
        rng: &mut Rng,
        group: IpAddr,
        new: Filter,
        out: &mut Vec<Out>,
    ) {
        let compat = self.compat();
        let robustness = self.robustness.max(1);
        let g = self.groups.entry(group).or_insert_with(|| Group {
            filter: Filter::NONE,
            change: Change::default(),
            query_at: None,
            query_sources: Vec::new(),
        });
        let old = std::mem::replace(&mut g.filter, new.clone());
        if old == new {
            self.settle(group);
            return;
        }
        match compat {
            Compat::V3 => {
                let c = &mut g.change;
                if old.mode != new.mode {
                    // A filter mode change record supersedes source list
                    // change records (RFC 3376 section 5.1).
                    c.mode_left = robustness;
                    c.allow.clear();
                    c.block.clear();
                } else {
                    let (allow, block) = match new.mode {
                        FilterMode::Include => (
                            minus(&new.sources, &old.sources),
                            minus(&old.sources, &new.sources),
                        ),
                        FilterMode::Exclude => (
                            minus(&old.sources, &new.sources),
                            minus(&new.sources, &old.sources),
                        ),
                    };
                    schedule_sources(&mut c.allow, &mut c.block, &allow, robustness);
                    schedule_sources(&mut c.block, &mut c.allow, &block, robustness);
                }
                if let Some(r) = Self::change_records(group, g) {
                    out.push(Out::Report(r));
                }
            }
            Compat::V2 | Compat::V1 => {
                if new.is_none() {
                    g.change.mode_left = 0;
                    g.query_at = None;
                    if compat == Compat::V2 {
                        out.push(Out::Leave(group));
                    }
                } else if old.is_none() {
                    out.push(if compat == Compat::V1 {
                        Out::V1Report(group)
                    } else {
                        Out::V2Report(group)
                    });
                    g.change.mode_left = robustness - 1;
                }
            }
        }
        if g.change.pending() {
            let uri = if compat == Compat::V3 {
                URI_V3
            } else {
                URI_OLD
            };
            let at = now + delay(rng, uri);
            self.change_at = Some(self.change_at.map_or(at, |t| t.min(at)));
        }
        self.settle(group);
    }

    /// Drops `group` if it is INCLUDE {} with nothing pending; recomputes the deadline.
    fn settle(&mut self, group: IpAddr) {
        if let Some(g) = self.groups.get(&group)
            && g.filter.is_none()
            && !g.change.pending()
            && g.query_at.is_none()
        {
            self.groups.remove(&group);
        }
        self.recompute();
    }

    /// The records of a state-change report for `g` now, one retransmission
    /// of each taken; `None` when nothing is pending.
    fn change_records(group: IpAddr, g: &mut Group) -> Option<Vec<(u8, IpAddr, Vec<IpAddr>)>> {
        let c = &mut g.change;
        let mut recs = Vec::new();
        if c.mode_left > 0 {
            c.mode_left -= 1;
            let t = match g.filter.mode {
                FilterMode::Include => record::TO_IN,
                FilterMode::Exclude => record::TO_EX,
            };
            recs.push((t, group, g.filter.sources.clone()));
        } else {
            for (list, t) in [(&mut c.allow, record::ALLOW), (&mut c.block, record::BLOCK)] {
                if list.is_empty() {
                    continue;
                }
                let mut s: Vec<IpAddr> = list.iter().map(|(a, _)| *a).collect();
                s.sort_unstable();
                recs.push((t, group, s));
                for e in list.iter_mut() {
                    e.1 = e.1.saturating_sub(1);
                }
                list.retain(|e| e.1 > 0);
            }
        }
        (!recs.is_empty()).then_some(recs)
    }

    /// A query arrived (RFC 3376 sections 5.2 and 7.2.1, RFC 3810 sections
    /// 6.2 and 8.2.1): answers are scheduled, not sent.
    pub fn query(&mut self, now: Instant, rng: &mut Rng, q: &Query) {
        if q.version == Compat::V3 {
            if q.qrv != 0 {
                self.robustness = q.qrv;
            }
            if !q.qqi.is_zero() {
                self.query_interval = q.qqi;
            }
        }
        let before = self.compat();
        if q.version < Compat::V3 {
            // The Older Version Querier Present Timeout (RFC 3376 section
            // 8.12, RFC 3810 section 9.12).
            let until = now + self.query_interval * u32::from(self.robustness) + q.max_resp;
            match q.version {
                Compat::V1 => self.v1_until = Some(until),
                _ => self.v2_until = Some(until),
            }
        }
        let compat = self.compat();
        if compat < before {
            // Entering an older mode cancels every pending response and
            // retransmission (RFC 3376 section 7.2.1).
            self.general_at = None;
            self.change_at = None;
            for g in self.groups.values_mut() {
                g.change = Change::default();
                g.query_at = None;
                g.query_sources.clear();
            }
            self.groups.retain(|_, g| !g.filter.is_none());
        }
        let max = if q.version == Compat::V1 {
            V1_MAX_RESP
        } else {
            q.max_resp
        };
        let at = now + delay(rng, max);
        if compat < Compat::V3 {
            // RFC 2236 section 3 / RFC 2710 section 4: each group's timer is
            // set to the random delay unless it runs out sooner already.
            for (a, g) in self.groups.iter_mut() {
                if g.filter.is_none() || q.group.is_some_and(|x| x != *a) {
                    continue;
                }
                if g.query_at.is_none_or(|t| t > now + max) {
                    g.query_at = Some(now + delay(rng, max));
                }
            }
            self.recompute();
            return;
        }
        // RFC 3376 section 5.2, rules 1 to 4.
        if self.general_at.is_some_and(|t| t < at) {
            self.recompute();
            return;
        }
        match q.group {
            None => self.general_at = Some(at),
            Some(group) => {
                let Some(g) = self.groups.get_mut(&group) else {
                    return;
                };
                if g.filter.is_none() {
                    return;
                }
                match g.query_at {
                    None => {
                        g.query_at = Some(at);
                        g.query_sources = q.sources.clone();
                        g.query_sources.sort_unstable();
                        g.query_sources.dedup();
                    }
                    Some(t) => {
                        g.query_at = Some(t.min(at));
                        if q.sources.is_empty() || g.query_sources.is_empty() {
                            g.query_sources.clear();
                        } else {
                            g.query_sources.extend_from_slice(&q.sources);
                            g.query_sources.sort_unstable();
                            g.query_sources.dedup();
                        }
                    }
                }
            }
        }
        self.recompute();
    }

    /// Another host's IGMPv1/v2 report or MLDv1 report for `group` arrived:
    /// in an older mode, our own pending report is suppressed (RFC 2236
    /// section 3, RFC 2710 section 4).
    pub fn heard_report(&mut self, group: IpAddr) {
        if self.compat() == Compat::V3 {
            return;
        }
        if let Some(g) = self.groups.get_mut(&group) {
            g.query_at = None;
        }
        self.recompute();
    }

    /// Runs the timers due at `now`; messages to send go into `out`.
    pub fn timeout(&mut self, now: Instant, rng: &mut Rng, out: &mut Vec<Out>) {
        if self.v1_until.is_some_and(|t| t <= now) {
            self.v1_until = None;
        }
        if self.v2_until.is_some_and(|t| t <= now) {
            self.v2_until = None;
        }
        let compat = self.compat();
        if self.general_at.is_some_and(|t| t <= now) {
            self.general_at = None;
            if compat == Compat::V3 {
                let recs: Vec<_> = self
                    .members()
                    .map(|(a, f)| {
                        let t = match f.mode {
                            FilterMode::Include => record::IS_IN,
                            FilterMode::Exclude => record::IS_EX,
                        };
                        (t, *a, f.sources.clone())
                    })
                    .collect();
                if !recs.is_empty() {
                    out.push(Out::Report(recs));
                }
            }
        }
        let mut answers = Vec::new();
        for (a, g) in self.groups.iter_mut() {
            if g.query_at.is_none_or(|t| t > now) {
                continue;
            }
            g.query_at = None;
            let asked = std::mem::take(&mut g.query_sources);
            if g.filter.is_none() {
                continue;
            }
            match compat {
                Compat::V1 => out.push(Out::V1Report(*a)),
                Compat::V2 => out.push(Out::V2Report(*a)),
                Compat::V3 => {
                    let f = &g.filter;
                    let rec = match (asked.is_empty(), f.mode) {
                        (true, FilterMode::Include) => (record::IS_IN, f.sources.clone()),
                        (true, FilterMode::Exclude) => (record::IS_EX, f.sources.clone()),
                        // RFC 3376 section 5.2: the sources asked about that
                        // the interface state lets through.
                        (false, FilterMode::Include) => (record::IS_IN, and(&f.sources, &asked)),
                        (false, FilterMode::Exclude) => (record::IS_IN, minus(&asked, &f.sources)),
                    };
                    if asked.is_empty() || !rec.1.is_empty() {
                        answers.push((rec.0, *a, rec.1));
                    }
                }
            }
        }
        if !answers.is_empty() {
            out.push(Out::Report(answers));
        }
        if self.change_at.is_some_and(|t| t <= now) {
            self.change_at = None;
            let mut recs = Vec::new();
            for (a, g) in self.groups.iter_mut() {
                match compat {
                    Compat::V3 => {
                        if let Some(r) = Self::change_records(*a, g) {
                            recs.extend(r);
                        }
                    }
                    _ if g.change.mode_left > 0 => {
                        g.change.mode_left -= 1;
                        if !g.filter.is_none() {
                            out.push(if compat == Compat::V1 {
                                Out::V1Report(*a)
                            } else {
                                Out::V2Report(*a)
                            });
                        }
                    }
                    _ => {}
                }
            }
            if !recs.is_empty() {
                out.push(Out::Report(recs));
            }
            if self.groups.values().any(|g| g.change.pending()) {
                let uri = if compat == Compat::V3 {
                    URI_V3
                } else {
                    URI_OLD
                };
                self.change_at = Some(now + delay(rng, uri));
            }
        }
        self.groups
            .retain(|_, g| !(g.filter.is_none() && !g.change.pending() && g.query_at.is_none()));
        self.recompute();
    }
}
