//! Per-vNIC filters: ordered rules on L2 to L4 fields of the outer or inner
//! headers, with the actions of tc flower and rte_flow (allow, drop, count,
//! steer to a queue), classified by tuple space search ([`Filters`]).
//!
//! ```
//! use linerate_vnic::filter::{Action, Filters, FlowKey, Match, PortRange, Rule, Verdict};
//!
//! let rules = vec![
//!     // Count everything, then drop TCP to ports 6000-6063, steer DNS to queue 1.
//!     Rule { when: Match::default(), action: Action::Count },
//!     Rule {
//!         when: Match { proto: Some(6), dst_port: Some(PortRange { lo: 6000, hi: 6063 }), ..Match::default() },
//!         action: Action::Drop,
//!     },
//!     Rule {
//!         when: Match { proto: Some(17), dst_port: Some(PortRange { lo: 53, hi: 53 }), ..Match::default() },
//!         action: Action::Steer(1),
//!     },
//! ];
//! let mut f = Filters::new(rules)?;
//! let frame = linerate_wire::build::FrameBuilder::new(
//!     linerate_wire::build::Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]),
//!     linerate_wire::build::L4::tcp(40000, 6001),
//! )
//! .build(b"x");
//! assert_eq!(f.classify(&FlowKey::extract(&frame)), Verdict::Drop);
//! assert_eq!(f.hits(), &[1, 1, 0]);
//! # Ok::<(), linerate_vnic::filter::FilterError>(())
//! ```

use std::collections::HashMap;
use std::net::IpAddr;

mod key;
pub mod naive;
mod tss;

use key::Words;
pub use key::{Fields, FlowKey};
use tss::{Compiled, Tuple};

/// Which headers a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Level {
    /// The outer (or only) headers.
    #[default]
    Outer,
    /// The headers inside a VXLAN, GENEVE or NVGRE tunnel.
    Inner,
}

/// An address prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPrefix {
    /// The address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

/// What a rule matches; `None` matches anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Match {
    /// Which headers.
    pub level: Level,
    /// Destination MAC.
    pub dst_mac: Option<[u8; 6]>,
    /// Source MAC.
    pub src_mac: Option<[u8; 6]>,
    /// VLAN ID.
    pub vlan: Option<u16>,
    /// EtherType.
    pub ethertype: Option<u16>,
    /// Source prefix.
    pub src_ip: Option<IpPrefix>,
    /// Destination prefix.
    pub dst_ip: Option<IpPrefix>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Source port.
    pub src_port: Option<PortRange>,
    /// Destination port.
    pub dst_port: Option<PortRange>,
    /// TCP flags (value, mask).
    pub tcp_flags: Option<(u8, u8)>,
    /// Tunnel VNI.
    pub vni: Option<u32>,
}

/// What a rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Accept.
    Allow,
    /// Drop.
    Drop,
    /// Count and go on.
    Count,
    /// Accept onto a queue.
    Steer(u16),
}

/// A rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// What it matches.
    pub when: Match,
    /// What it does.
    pub action: Action,
}

/// A decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Accept.
    Allow,
    /// Drop.
    Drop,
    /// Accept onto a queue.
    Steer(u16),
}

/// Which address or port of a rule: the frame's source or its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// `src_ip`, `src_port`.
    Source,
    /// `dst_ip`, `dst_port`.
    Destination,
}

impl core::fmt::Display for Side {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Side::Source => "source",
            Side::Destination => "destination",
        })
    }
}

/// Why a rule set was refused; `rule` is the index of the rule at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterError {
    /// More rules than a rule set holds.
    TooManyRules {
        /// Rules given.
        rules: usize,
        /// The most a rule set holds.
        max: usize,
    },
    /// A prefix longer than its address (32 bits for IPv4, 128 for IPv6).
    PrefixTooLong {
        /// The rule.
        rule: usize,
        /// Which address.
        side: Side,
        /// The prefix.
        prefix: IpPrefix,
    },
    /// A VLAN ID over 12 bits.
    VlanTooLarge {
        /// The rule.
        rule: usize,
        /// The VLAN ID given.
        vid: u16,
    },
    /// A port range whose low end is above its high end.
    EmptyPortRange {
        /// The rule.
        rule: usize,
        /// Which port.
        side: Side,
        /// The range.
        range: PortRange,
    },
    /// A VNI over 24 bits.
    VniTooLarge {
        /// The rule.
        rule: usize,
        /// The VNI given.
        vni: u32,
    },
    /// A rule steering to a queue the vNIC does not have.
    NoSuchQueue {
        /// The rule.
        rule: usize,
        /// The queue the rule names.
        queue: u16,
        /// Queues the vNIC has.
        queues: u16,
    },
}

impl FilterError {
    /// The same error, of rule `rule`.
    fn of_rule(self, rule: usize) -> FilterError {
        match self {
            FilterError::PrefixTooLong { side, prefix, .. } => {
                FilterError::PrefixTooLong { rule, side, prefix }
            }
            FilterError::VlanTooLarge { vid, .. } => FilterError::VlanTooLarge { rule, vid },
            FilterError::EmptyPortRange { side, range, .. } => {
                FilterError::EmptyPortRange { rule, side, range }
            }
            FilterError::VniTooLarge { vni, .. } => FilterError::VniTooLarge { rule, vni },
            FilterError::NoSuchQueue { queue, queues, .. } => FilterError::NoSuchQueue {
                rule,
                queue,
                queues,
            },
            e @ FilterError::TooManyRules { .. } => e,
        }
    }
}

impl core::fmt::Display for FilterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FilterError::TooManyRules { rules, max } => {
                write!(f, "{rules} rules: a rule set holds at most {max}")
            }
            FilterError::PrefixTooLong { rule, side, prefix } => {
                let bits = if prefix.addr.is_ipv4() { 32 } else { 128 };
                write!(
                    f,
                    "rule {rule}: {side} prefix {}/{} is longer than {bits} bits: use a length \
                     of 0 to {bits}",
                    prefix.addr, prefix.len
                )
            }
            FilterError::VlanTooLarge { rule, vid } => write!(
                f,
                "rule {rule}: VLAN {vid} is over 12 bits: use a VLAN ID of 0 to 4095"
            ),
            FilterError::EmptyPortRange { rule, side, range } => write!(
                f,
                "rule {rule}: {side} ports {}-{} are an empty range: use a range whose low port is at most its high \
                 port",
                range.lo, range.hi
            ),
            FilterError::VniTooLarge { rule, vni } => write!(
                f,
                "rule {rule}: VNI {vni} is over 24 bits: use a VNI of 0 to 16777215"
            ),
            FilterError::NoSuchQueue {
                rule,
                queue,
                queues,
            } => write!(
                f,
                "rule {rule}: steers to queue {queue}, the vNIC has {queues}: steer to a queue \
                 below {queues}, or give the vNIC more queues"
            ),
        }
    }
}

impl std::error::Error for FilterError {}

/// A compiled rule set: the rules in order, their hit counters, and the tuples.
///
/// Semantics (those of [`naive::scan`]): the first matching rule whose action is
/// not `Count` decides, and every matching `Count` rule before it is counted; with
/// no such rule the frame is allowed. A rule at [`Level::Inner`] matches only a
/// tunnelled Ethernet frame, on its inner headers; `vni` matches at either level.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    rules: Vec<Rule>,
    /// Each rule's action, apart from its match (the hot path reads only these).
    actions: Vec<Action>,
    hits: Vec<u64>,
    /// Tuples of deciding rules, by their first rule.
    decide: Vec<Tuple>,
    /// Deciding rules kept whole (ranges too wide to expand), in order.
    decide_whole: Vec<(u32, Compiled)>,
    /// Tuples of `Count` rules (their entries are lists).
    count: Vec<Tuple>,
    count_whole: Vec<(u32, Compiled)>,
    /// The rules sharing an entry, in order, with the ranges still to check: the
    /// payload of an entry with [`LIST`] set.
    lists: Vec<Vec<Cand>>,
}

/// Keys classified together by [`Filters::classify_batch`].
const CHUNK: usize = 32;

/// Hashes the keys `want` picks (and that have `t`'s level) for tuple `t`,
/// asking for the cache line each will probe; returns them as a bit set.
fn hash_all(
    t: &Tuple,
    keys: &[FlowKey],
    want: impl Fn(usize) -> bool,
    hash: &mut [u64; CHUNK],
) -> u64 {
    let mut active = 0u64;
    for (j, key) in keys.iter().enumerate().take(CHUNK) {
        if want(j)
            && let Some(k) = key.words(t.level)
        {
            hash[j] = t.hash(k);
            t.prefetch(hash[j]);
            active |= 1 << j;
        }
    }
    active
}

/// An entry's payload: a rule, or with this bit a list of candidates.
const LIST: u32 = 1 << 31;

/// Most ranged rules sharing their other fields kept as a list under one entry
/// (checked in order); more are expanded to prefixes.
const LIST_MAX: usize = 8;

/// A rule under an entry, with the port ranges its entry does not cover.
#[derive(Debug, Clone, Copy)]
struct Cand {
    rule: u32,
    sport: Option<PortRange>,
    dport: Option<PortRange>,
}

impl Cand {
    #[inline]
    fn ports_match(&self, k: &Words) -> bool {
        let sport = (k[6] >> key::SPORT_SHIFT) as u16;
        let dport = (k[6] >> key::DPORT_SHIFT) as u16;
        self.sport.is_none_or(|r| r.lo <= sport && sport <= r.hi)
            && self.dport.is_none_or(|r| r.lo <= dport && dport <= r.hi)
    }
}

impl Filters {
    /// Checks and compiles `rules` (prefix lengths, VLAN IDs, VNIs, port ranges).
    pub fn new(rules: Vec<Rule>) -> Result<Filters, FilterError> {
        if rules.len() >= LIST as usize {
            return Err(FilterError::TooManyRules {
                rules: rules.len(),
                max: LIST as usize - 1,
            });
        }
        let mut f = Filters {
            hits: vec![0; rules.len()],
            ..Filters::default()
        };
        let compiled = rules
            .iter()
            .enumerate()
            .map(|(i, r)| Compiled::new(&r.when).map_err(|e| e.of_rule(i)))
            .collect::<Result<Vec<_>, _>>()?;
        // Ranged rules sharing everything but their ranges: a short list under
        // one entry, or, when many share, expanded to prefixes.
        let mut ranged: HashMap<(Level, Words, Words, bool), usize> = HashMap::new();
        for (c, r) in compiled.iter().zip(&rules) {
            if c.ranged() {
                let counting = r.action == Action::Count;
                *ranged
                    .entry((c.level, c.value, c.mask, counting))
                    .or_default() += 1;
            }
        }
        // Candidates per (tuple, masked value).
        let mut tuples: HashMap<(Level, Words, bool), HashMap<Words, Vec<Cand>>> = HashMap::new();
        let mut add = |level, mask, value, counting, cand: Cand| {
            let t = tuples.entry((level, mask, counting)).or_default();
            t.entry(value).or_default().push(cand);
        };
        for (i, (c, r)) in compiled.iter().zip(&rules).enumerate() {
            let rule = i as u32;
            let counting = r.action == Action::Count;
            if c.ranged() {
                let k = (c.level, c.value, c.mask, counting);
                if ranged.get(&k).is_some_and(|&n| n <= LIST_MAX) {
                    let cand = Cand {
                        rule,
                        sport: c.sport,
                        dport: c.dport,
                    };
                    add(c.level, c.mask, c.value, counting, cand);
                    continue;
                }
            }
            match c.expand() {
                Some(entries) => {
                    for (value, mask) in entries {
                        let cand = Cand {
                            rule,
                            sport: None,
                            dport: None,
                        };
                        add(c.level, mask, value, counting, cand);
                    }
                }
                None if counting => f.count_whole.push((rule, *c)),
                None => f.decide_whole.push((rule, *c)),
            }
        }
        for ((level, mask, counting), values) in tuples {
            let mut best = u32::MAX;
            let mut table = Vec::with_capacity(values.len());
            for (value, mut cands) in values {
                cands.sort_unstable_by_key(|c| c.rule);
                best = best.min(cands[0].rule);
                if !counting {
                    // Nothing after a candidate without ranges can ever decide.
                    if let Some(p) = cands
                        .iter()
                        .position(|c| c.sport.is_none() && c.dport.is_none())
                    {
                        cands.truncate(p + 1);
                    }
                }
                let payload = match cands[..] {
                    [
                        Cand {
                            rule,
                            sport: None,
                            dport: None,
                        },
                    ] if !counting => rule,
                    _ => {
                        f.lists.push(cands);
                        LIST | (f.lists.len() - 1) as u32
                    }
                };
                table.push((value, payload));
            }
            let t = Tuple::new(level, mask, &table, best);
            if counting {
                &mut f.count
            } else {
                &mut f.decide
            }
            .push(t);
        }
        f.decide.sort_by_key(|t| t.best);
        f.count.sort_by_key(|t| t.best);
        f.actions = rules.iter().map(|r| r.action).collect();
        f.rules = rules;
        Ok(f)
    }

    /// No rules: everything allowed.
    pub fn empty() -> Filters {
        Filters::default()
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True if there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Number of tuples (distinct masks), deciding and counting: what a frame's
    /// classification costs at most, in hash lookups.
    pub fn tuples(&self) -> usize {
        self.decide.len() + self.count.len()
    }

    /// Number of hash entries across tuples (rules after range expansion).
    pub fn entries(&self) -> usize {
        self.decide.iter().chain(&self.count).map(Tuple::len).sum()
    }

    /// Decides `key`, counting the rules that match as [`naive::scan`] would.
    pub fn classify(&mut self, key: &FlowKey) -> Verdict {
        let mut out = [Verdict::Allow];
        self.chunk(core::slice::from_ref(key), &mut out);
        out[0]
    }

    /// Decides every key of a batch (`out[i]` for `keys[i]`, as many as the
    /// shorter holds): the verdicts and counts of [`Filters::classify`] on each in
    /// turn, faster with large rule sets, as each tuple is probed for the whole
    /// batch at once with its cache lines asked for ahead.
    pub fn classify_batch(&mut self, keys: &[FlowKey], out: &mut [Verdict]) {
        for (k, o) in keys.chunks(CHUNK).zip(out.chunks_mut(CHUNK)) {
            self.chunk(k, o);
        }
    }

    /// Up to [`CHUNK`] keys, tuple by tuple: hash and prefetch for every key that
    /// may still find an earlier rule there, then probe.
    fn chunk(&mut self, keys: &[FlowKey], out: &mut [Verdict]) {
        let n = keys.len().min(out.len()).min(CHUNK);
        let mut best = [u32::MAX; CHUNK];
        let mut hash = [0u64; CHUNK];
        let mut worst = u32::MAX;
        for t in &self.decide {
            if worst <= t.best {
                // Tuples come by first rule: no later one can do better.
                break;
            }
            let mut active = hash_all(t, &keys[..n], |j| best[j] > t.best, &mut hash);
            while active != 0 {
                let j = active.trailing_zeros() as usize;
                active &= active - 1;
                let Some(k) = keys[j].words(t.level) else {
                    continue;
                };
                match t.probe(k, hash[j]) {
                    None => {}
                    Some(p) if p & LIST == 0 => best[j] = best[j].min(p),
                    Some(p) => {
                        let list = &self.lists[(p & !LIST) as usize];
                        let b = best[j];
                        if let Some(c) = list
                            .iter()
                            .take_while(|c| c.rule < b)
                            .find(|c| c.ports_match(k))
                        {
                            best[j] = c.rule;
                        }
                    }
                }
            }
            worst = best[..n].iter().copied().max().unwrap_or(0);
        }
        for j in 0..n {
            for (i, c) in &self.decide_whole {
                if *i >= best[j] {
                    break;
                }
                if keys[j].words(c.level).is_some_and(|k| c.matches(k)) {
                    best[j] = *i;
                    break;
                }
            }
        }
        for t in &self.count {
            let mut active = hash_all(t, &keys[..n], |j| t.best < best[j], &mut hash);
            while active != 0 {
                let j = active.trailing_zeros() as usize;
                active &= active - 1;
                let Some(k) = keys[j].words(t.level) else {
                    continue;
                };
                let Some(p) = t.probe(k, hash[j]) else {
                    continue;
                };
                let before = self.lists[(p & !LIST) as usize]
                    .iter()
                    .take_while(|c| c.rule < best[j]);
                for c in before {
                    if c.ports_match(k) {
                        self.hits[c.rule as usize] += 1;
                    }
                }
            }
        }
        for j in 0..n {
            for (i, c) in &self.count_whole {
                if *i >= best[j] {
                    break;
                }
                if keys[j].words(c.level).is_some_and(|k| c.matches(k)) {
                    self.hits[*i as usize] += 1;
                }
            }
            out[j] = match self.actions.get(best[j] as usize) {
                None => Verdict::Allow,
                Some(a) => {
                    self.hits[best[j] as usize] += 1;
                    match *a {
                        Action::Allow | Action::Count => Verdict::Allow,
                        Action::Drop => Verdict::Drop,
                        Action::Steer(q) => Verdict::Steer(q),
                    }
                }
            };
        }
    }

    /// Extracts `frame`'s fields and decides (no rules: allowed without looking).
    pub fn classify_frame(&mut self, frame: &[u8]) -> Verdict {
        if self.rules.is_empty() {
            return Verdict::Allow;
        }
        self.classify(&FlowKey::extract(frame))
    }

    /// Hits per rule, in rule order.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }
}
