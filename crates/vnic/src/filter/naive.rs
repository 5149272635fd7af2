//! The reference: every rule in order against the plain fields, as the rules read.
//!
//! Slow on purpose (one comparison per field per rule, no packing, no hashing); the
//! differential tests and the benchmark hold the classifier to it.

use std::net::IpAddr;

use super::{Action, FlowKey, IpPrefix, Level, Match, PortRange, Rule, Verdict};
use crate::filter::key::Fields;

fn prefix_has(p: &IpPrefix, a: Option<IpAddr>) -> bool {
    match (p.addr, a) {
        (IpAddr::V4(n), Some(IpAddr::V4(a))) => {
            let len = u32::from(p.len.min(32));
            len == 0 || (u32::from(n) ^ u32::from(a)) >> (32 - len) == 0
        }
        (IpAddr::V6(n), Some(IpAddr::V6(a))) => {
            let len = u32::from(p.len.min(128));
            len == 0 || (u128::from(n) ^ u128::from(a)) >> (128 - len) == 0
        }
        _ => false,
    }
}

fn range_has(r: &PortRange, p: Option<u16>) -> bool {
    p.is_some_and(|p| r.lo <= p && p <= r.hi)
}

/// Whether `m` matches the level of `key` it names.
pub fn matches(m: &Match, key: &FlowKey) -> bool {
    let f: Fields = match m.level {
        Level::Outer => key.outer(),
        Level::Inner => match key.inner() {
            Some(f) => f,
            None => return false,
        },
    };
    m.dst_mac.is_none_or(|x| x == f.dst_mac)
        && m.src_mac.is_none_or(|x| x == f.src_mac)
        && m.vlan.is_none_or(|x| f.vlan == Some(x))
        && m.ethertype.is_none_or(|x| x == f.ethertype)
        && m.src_ip.is_none_or(|p| prefix_has(&p, f.src_ip))
        && m.dst_ip.is_none_or(|p| prefix_has(&p, f.dst_ip))
        && m.proto.is_none_or(|x| f.proto == Some(x))
        && m.src_port.is_none_or(|r| range_has(&r, f.src_port))
        && m.dst_port.is_none_or(|r| range_has(&r, f.dst_port))
        && m.tcp_flags
            .is_none_or(|(v, mask)| f.tcp_flags.is_some_and(|t| t & mask == v & mask))
        && m.vni.is_none_or(|x| f.vni == Some(x))
}

/// Scans `rules` in order: each matching `Count` rule is counted and the scan goes
/// on; the first matching rule of another action is counted and decides. No match
/// allows.
pub fn scan(rules: &[Rule], key: &FlowKey, hits: &mut [u64]) -> Verdict {
    for (i, r) in rules.iter().enumerate() {
        if !matches(&r.when, key) {
            continue;
        }
        if let Some(h) = hits.get_mut(i) {
            *h += 1;
        }
        match r.action {
            Action::Count => {}
            Action::Allow => return Verdict::Allow,
            Action::Drop => return Verdict::Drop,
            Action::Steer(q) => return Verdict::Steer(q),
        }
    }
    Verdict::Allow
}
