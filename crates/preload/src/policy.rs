//! The offload policy: which sockets linerate serves and which stay the kernel's.
//!
//! Rules are tried in order; the first whose every condition holds decides,
//! else the default does. A condition on something not known yet (the remote
//! of a socket that listens) does not hold. That gives the three levels of a
//! TOE: per connection (remote prefix and port), per server (the listening
//! port) and per interface (the default).

use std::net::IpAddr;

/// A socket's transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SOCK_STREAM.
    Tcp,
    /// SOCK_DGRAM.
    Udp,
}

/// Who serves a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// linerate.
    Linerate,
    /// The kernel (libc).
    Kernel,
}

/// An address prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

impl Prefix {
    /// `addr/len` (the length is cut to the family's width).
    pub fn new(addr: IpAddr, len: u8) -> Prefix {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        Prefix {
            addr,
            len: len.min(max),
        }
    }

    /// Parses `a.b.c.d/len` or `v6::/len`.
    pub fn parse(s: &str) -> Option<Prefix> {
        let (a, l) = s.split_once('/')?;
        let addr: IpAddr = a.parse().ok()?;
        let len: u8 = l.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        (len <= max).then_some(Prefix { addr, len })
    }

    /// Whether `ip` is inside (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                u32::from(p) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(p), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                u128::from(p) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// One rule: conditions (`None`: any) and the decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The transport.
    pub kind: Option<Kind>,
    /// The local port (bound, or listened on).
    pub local_port: Option<u16>,
    /// The peer's prefix.
    pub remote: Option<Prefix>,
    /// The peer's port.
    pub remote_port: Option<u16>,
    /// What a match decides.
    pub action: Action,
}

/// What is known of a socket when the policy is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    /// Its transport.
    pub kind: Kind,
    /// Its local port, if bound.
    pub local_port: Option<u16>,
    /// Its peer, if it has one.
    pub remote: Option<(IpAddr, u16)>,
}

impl Rule {
    fn matches(&self, q: &Query) -> bool {
        let port_ok = |want: Option<u16>, have: Option<u16>| want.is_none() || want == have;
        self.kind.is_none_or(|k| k == q.kind)
            && port_ok(self.local_port, q.local_port)
            && port_ok(self.remote_port, q.remote.map(|r| r.1))
            && self
                .remote
                .is_none_or(|p| q.remote.is_some_and(|(ip, _)| p.contains(ip)))
    }
}

/// The decision for `q`: the first matching rule's, else `default`.
pub fn decide(rules: &[Rule], default: Action, q: &Query) -> Action {
    let rule = rules.iter().position(|r| r.matches(q));
    let action = rule.map_or(default, |i| rules[i].action);
    tracing::debug!(
        kind = ?q.kind,
        local_port = ?q.local_port,
        remote = ?q.remote,
        rule = ?rule,
        ?action,
        "policy decided"
    );
    action
}

/// Whether some socket of `kind` could be offloaded: otherwise `socket()` need
/// not watch it at all.
pub fn may_offload(rules: &[Rule], default: Action, kind: Kind) -> bool {
    default == Action::Linerate
        || rules
            .iter()
            .any(|r| r.action == Action::Linerate && r.kind.is_none_or(|k| k == kind))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rule(kind: Option<Kind>, lp: Option<u16>, remote: Option<&str>, action: Action) -> Rule {
        Rule {
            kind,
            local_port: lp,
            remote: remote.map(|r| Prefix::parse(r).unwrap()),
            remote_port: None,
            action,
        }
    }

    #[test]
    fn first_match_wins_and_unknowns_do_not_match() {
        let rules = [
            rule(Some(Kind::Tcp), Some(22), None, Action::Kernel),
            rule(None, None, Some("10.1.0.0/16"), Action::Linerate),
            rule(Some(Kind::Tcp), Some(5201), None, Action::Linerate),
        ];
        let q = |kind, lp, remote: Option<&str>| Query {
            kind,
            local_port: lp,
            remote: remote.map(|r| (r.parse().unwrap(), 80)),
        };
        let d = |q: Query| decide(&rules, Action::Kernel, &q);
        assert_eq!(d(q(Kind::Tcp, Some(22), Some("10.1.2.3"))), Action::Kernel);
        assert_eq!(d(q(Kind::Udp, None, Some("10.1.2.3"))), Action::Linerate);
        assert_eq!(
            d(q(Kind::Udp, None, Some("::ffff:10.1.2.3"))),
            Action::Linerate
        );
        assert_eq!(d(q(Kind::Tcp, Some(5201), None)), Action::Linerate);
        assert_eq!(d(q(Kind::Tcp, None, None)), Action::Kernel);
        assert_eq!(d(q(Kind::Tcp, None, Some("10.2.0.1"))), Action::Kernel);
        assert!(may_offload(&rules, Action::Kernel, Kind::Udp));
        assert!(!may_offload(&rules[..1], Action::Kernel, Kind::Tcp));
    }

    #[test]
    fn prefixes() {
        let p = Prefix::parse("10.0.0.0/8").unwrap();
        assert!(p.contains("10.255.0.1".parse().unwrap()));
        assert!(!p.contains("11.0.0.1".parse().unwrap()));
        assert!(
            Prefix::parse("0.0.0.0/0")
                .unwrap()
                .contains("1.2.3.4".parse().unwrap())
        );
        assert!(Prefix::parse("10.0.0.0/33").is_none());
        assert!(
            Prefix::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!(
            !Prefix::parse("fd00::/8")
                .unwrap()
                .contains("10.0.0.1".parse().unwrap())
        );
    }
}
