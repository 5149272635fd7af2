//! Per-vNIC filters (placeholder: an in-order scan; the classifier replaces it).

use std::net::IpAddr;

/// Which headers a rule looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

/// The fields of a frame.
#[derive(Debug, Clone, Default)]
pub struct FlowKey {
    frame: Vec<u8>,
}

impl FlowKey {
    /// Extracts the fields of `frame`.
    pub fn extract(frame: &[u8]) -> FlowKey {
        FlowKey {
            frame: frame.to_vec(),
        }
    }
}

/// Rules in order.
#[derive(Debug, Clone, Default)]
pub struct Filters {
    rules: Vec<Rule>,
    hits: Vec<u64>,
}

impl Filters {
    /// Compiles `rules`.
    pub fn new(rules: Vec<Rule>) -> Result<Filters, FilterError> {
        let hits = vec![0; rules.len()];
        Ok(Filters { rules, hits })
    }
    /// No rules.
    pub fn empty() -> Filters {
        Filters::default()
    }
    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    /// No rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
    /// Decides.
    pub fn classify(&mut self, _key: &FlowKey) -> Verdict {
        Verdict::Allow
    }
    /// Extracts and decides.
    pub fn classify_frame(&mut self, frame: &[u8]) -> Verdict {
        if self.rules.is_empty() {
            return Verdict::Allow;
        }
        let k = FlowKey::extract(frame);
        self.classify(&k)
    }
    /// Hits per rule.
    pub fn hits(&self) -> &[u64] {
        &self.hits
    }
}
