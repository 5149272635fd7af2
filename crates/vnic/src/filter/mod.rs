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

use std::net::IpAddr;

mod key;
pub mod naive;
mod tss;

pub use key::{Fields, FlowKey};
use key::Words;
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

/// A rule refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError(pub String);

impl core::fmt::Display for FilterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
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
    hits: Vec<u64>,
    /// Tuples of deciding rules, by their first rule.
    decide: Vec<Tuple>,
    /// Deciding rules kept whole (ranges too wide to expand), in order.
    decide_whole: Vec<(u32, Compiled)>,
    /// Tuples of `Count` rules; entries point into `lists`.
    count: Vec<Tuple>,
    count_whole: Vec<(u32, Compiled)>,
    /// The `Count` rules sharing an entry, in order.
    lists: Vec<Vec<u32>>,
}

type Group = ((Level, Words, bool), Vec<(Words, u32)>);

impl Filters {
    /// Checks and compiles `rules` (prefix lengths, VLAN IDs, VNIs, port ranges).
    pub fn new(rules: Vec<Rule>) -> Result<Filters, FilterError> {
        if rules.len() >= u32::MAX as usize {
            return Err(FilterError("too many rules".into()));
        }
        let mut f = Filters {
            hits: vec![0; rules.len()],
            ..Filters::default()
        };
        // Entries grouped by (level, mask, counting), in first-seen order.
        let mut groups: Vec<Group> = Vec::new();
        let mut index: std::collections::HashMap<(Level, Words, bool), usize> = Default::default();
        for (i, r) in rules.iter().enumerate() {
            let c = Compiled::new(&r.when).map_err(|e| FilterError(format!("rule {i}: {e}")))?;
            let counting = r.action == Action::Count;
            let i = i as u32;
            let Some(entries) = c.expand() else {
                if counting { &mut f.count_whole } else { &mut f.decide_whole }.push((i, c));
                continue;
            };
            for (value, mask) in entries {
                let g = *index.entry((c.level, mask, counting)).or_insert_with(|| {
                    groups.push(((c.level, mask, counting), Vec::new()));
                    groups.len() - 1
                });
                groups[g].1.push((value, i));
            }
        }
        for ((level, mask, counting), entries) in groups {
            let best = entries.iter().map(|e| e.1).min().unwrap_or(u32::MAX);
            let mut by_value: std::collections::HashMap<Words, Vec<u32>> = Default::default();
            for (v, i) in entries {
                by_value.entry(v).or_default().push(i);
            }
            let table: Vec<(Words, u32)> = if counting {
                by_value
                    .into_iter()
                    .map(|(v, mut l)| {
                        l.sort_unstable();
                        f.lists.push(l);
                        (v, (f.lists.len() - 1) as u32)
                    })
                    .collect()
            } else {
                // Of equal entries only the first rule can ever decide.
                by_value.into_iter().map(|(v, l)| (v, l.into_iter().min().unwrap_or(0))).collect()
            };
            let t = Tuple::new(level, mask, &table, best);
            if counting { &mut f.count } else { &mut f.decide }.push(t);
        }
        f.decide.sort_by_key(|t| t.best);
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
        let level = |l: Level| match l {
            Level::Outer => Some(&key.outer),
            Level::Inner => key.inner.as_ref(),
        };
        let mut best = u32::MAX;
        for t in &self.decide {
            if t.best >= best {
                break;
            }
            if let Some(r) = level(t.level).and_then(|k| t.find(k)) {
                best = best.min(r);
            }
        }
        for (i, c) in &self.decide_whole {
            if *i >= best {
                break;
            }
            if level(c.level).is_some_and(|k| c.matches(k)) {
                best = *i;
                break;
            }
        }
        for t in &self.count {
            if t.best >= best {
                continue;
            }
            if let Some(l) = level(t.level).and_then(|k| t.find(k)) {
                for &r in self.lists[l as usize].iter().take_while(|&&r| r < best) {
                    self.hits[r as usize] += 1;
                }
            }
        }
        for (i, c) in &self.count_whole {
            if *i >= best {
                break;
            }
            if level(c.level).is_some_and(|k| c.matches(k)) {
                self.hits[*i as usize] += 1;
            }
        }
        let Some(rule) = self.rules.get(best as usize) else {
            return Verdict::Allow;
        };
        self.hits[best as usize] += 1;
        match rule.action {
            Action::Allow | Action::Count => Verdict::Allow,
            Action::Drop => Verdict::Drop,
            Action::Steer(q) => Verdict::Steer(q),
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
