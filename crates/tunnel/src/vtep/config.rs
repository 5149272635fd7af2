//! The VTEP's configuration file: TOML read with serde, then checked rule by rule
//! into a typed [`EndpointConfig`].
//!
//! Every refusal is a [`ConfigProblem`] that names the field (`vni[1].port`), says
//! what is wrong with its value and what to change; [`parse`] reports all of them
//! at once, so a user fixes a file in one pass. Syntax errors and unknown fields
//! come from the TOML reader with their line and column.
//!
//! ```
//! use linerate_tunnel::vtep::config::{parse, EncapSpec};
//!
//! let cfg = parse(r#"
//!     [underlay]
//!     tap = "ul0"
//!     address = "10.0.0.2/24"
//!
//!     [[vni]]
//!     id = 42
//!     encap = "vxlan"
//!     flood = ["10.0.0.1"]
//!     ports = ["vm0"]
//! "#).unwrap();
//! assert_eq!(cfg.vnis[0].encap, EncapSpec::Vxlan { port: 4789 });
//!
//! let err = parse(r#"
//!     [underlay]
//!     tap = "ul0"
//!     address = "10.0.0.2/24"
//!
//!     [[vni]]
//!     id = 16777216
//!     encap = "vxlan"
//! "#).unwrap_err();
//! assert!(err.to_string().contains("vni[0].id: 16777216 does not fit in 24 bits"));
//! ```

use crate::bridge::{FdbConfig, Mac};
use crate::{Df, Dscp, GeneveOpt};
use serde::Deserialize;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// The IANA VXLAN port (RFC 7348).
pub const VXLAN_PORT: u16 = 4789;
/// The IANA GENEVE port (RFC 8926).
pub const GENEVE_PORT: u16 = 6081;
/// Longest Linux interface name (IFNAMSIZ - 1).
pub const IFNAME_MAX: usize = 15;
/// Most GENEVE option bytes (Opt Len is 6 bits of 4-byte words).
pub const GENEVE_OPTIONS_MAX: usize = 252;

/// The file as written (what serde reads).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    underlay: RawUnderlay,
    #[serde(default)]
    fdb: RawFdb,
    #[serde(default)]
    vni: Vec<RawVni>,
    #[serde(default)]
    control: RawControl,
    #[serde(default)]
    metrics: RawMetrics,
    #[serde(default)]
    tap: RawTap,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTap {
    io_uring: Option<u32>,
}

/// The smallest and largest `[tap] io_uring` depth.
pub const IO_URING_DEPTH: RangeInclusive<u32> = 2..=4096;

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawControl {
    socket: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    listen: Option<String>,
}

/// Longest path of a Unix socket (`sun_path` less its terminating NUL).
pub const SOCKET_PATH_MAX: usize = 107;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUnderlay {
    tap: Option<String>,
    xdp: Option<String>,
    address: String,
    gateway: Option<String>,
    mac: Option<String>,
    mtu: Option<u32>,
    #[serde(default = "default_queues")]
    queues: u32,
}

/// The underlay MTU of a TAP the VTEP creates, unless configured.
const DEFAULT_MTU: u32 = 1500;
fn default_queues() -> u32 {
    1
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawFdb {
    ageing_secs: Option<u64>,
    max_per_vni: Option<usize>,
    max_total: Option<usize>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
enum RawEncap {
    Vxlan,
    Geneve,
    Nvgre,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawVni {
    id: u64,
    encap: RawEncap,
    port: Option<u32>,
    #[serde(default)]
    flood: Vec<String>,
    #[serde(default)]
    ports: Vec<String>,
    #[serde(default)]
    suppress_arp: bool,
    #[serde(default, rename = "static")]
    statics: Vec<RawStatic>,
    #[serde(default)]
    neighbor: Vec<RawNeighbor>,
    #[serde(default)]
    geneve_option: Vec<RawOption>,
    // The outer headers, named as `ip link add type vxlan` names them.
    ttl: Option<u32>,
    tos: Option<RawTos>,
    df: Option<String>,
    srcport: Option<Vec<u32>>,
    udpcsum: Option<bool>,
    udp6zerocsumtx: Option<bool>,
    udp6zerocsumrx: Option<bool>,
    // The bridge's learning, named as `ip link add type vxlan` names it.
    learning: Option<bool>,
    /// Linux's spelling, refused with the fix (`learning = false`).
    nolearning: Option<bool>,
    l2miss: Option<bool>,
    // The underlay multicast group, as `ip link add type vxlan group`.
    group: Option<String>,
}

/// `tos = "inherit"` or a value.
#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
enum RawTos {
    Value(u32),
    Name(String),
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawStatic {
    mac: String,
    remote: String,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawNeighbor {
    ip: String,
    mac: String,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawOption {
    class: u32,
    #[serde(rename = "type")]
    kind: u32,
    #[serde(default)]
    data: String,
}

/// What carries the underlay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnderlayDevice {
    /// A TAP device of this name, created with `vnet_hdr` offloads.
    Tap(String),
    /// An existing interface, through AF_XDP (the `af-xdp` feature).
    Xdp(String),
}

/// The underlay: device, address, next hop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    /// The device.
    pub device: UnderlayDevice,
    /// This VTEP's underlay address.
    pub address: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
    /// The next hop for remote VTEPs outside the prefix.
    pub gateway: Option<IpAddr>,
    /// The underlay MAC (a locally administered one is made up if absent).
    pub mac: Option<Mac>,
    /// The underlay MTU (a TAP the VTEP creates is given it).
    pub mtu: u16,
    /// `mtu` was configured; otherwise it is 1500, and a VTEP attached to an
    /// existing interface takes the interface's.
    pub mtu_configured: bool,
    /// Queues (one thread each).
    pub queues: u16,
}

/// The encapsulation of one VNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncapSpec {
    /// VXLAN (RFC 7348) on this UDP port.
    Vxlan {
        /// Destination UDP port.
        port: u16,
    },
    /// GENEVE (RFC 8926) on this UDP port with these options.
    Geneve {
        /// Destination UDP port.
        port: u16,
        /// Option TLVs sent on every frame.
        options: Vec<GeneveOpt>,
    },
    /// NVGRE (RFC 7637).
    Nvgre,
}

/// One VNI's bridge domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VniSpec {
    /// The VNI (VSID for NVGRE), 24 bits.
    pub id: u32,
    /// Its encapsulation.
    pub encap: EncapSpec,
    /// Remote VTEPs that get broadcast, unknown unicast and multicast.
    pub flood: Vec<IpAddr>,
    /// Local TAP ports joined to the domain.
    pub ports: Vec<String>,
    /// Answer ARP and neighbour solicitations locally when the address is known.
    pub suppress_arp: bool,
    /// Static FDB entries: inner MAC behind remote VTEP.
    pub statics: Vec<(Mac, IpAddr)>,
    /// Static neighbour entries for suppression: IP at MAC.
    pub neighbors: Vec<(IpAddr, Mac)>,
    /// The outer headers' options.
    pub outer: OuterSpec,
    /// Learn inner source MACs from remote VTEPs (`learning`, on by default
    /// as Linux's vxlan; off is its `nolearning`): off, remote MACs come from
    /// static entries only and frames toward others flood.
    pub learning: bool,
    /// Log unknown unicast destinations of frames from local ports,
    /// rate-limited (`l2miss`, off by default); counted either way.
    pub l2miss: bool,
    /// An underlay multicast group (`group`, Linux's vxlan `group`):
    /// broadcast, unknown unicast and multicast go to it (beside the flood
    /// list), the VTEP joins it with IGMPv3 / MLDv2, and frames of the VNI
    /// are accepted from any VTEP of the group.
    pub group: Option<IpAddr>,
}

/// The outer headers of a VNI's tunnel, as Linux's vxlan device sets them
/// (`ttl`, `tos`, `df`, `srcport`, `udpcsum`, `udp6zerocsumtx`/`rx`). VNIs
/// sharing an encapsulation and port share one tunnel, so they must agree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OuterSpec {
    /// Outer TTL / hop limit (`ttl`, 64 by default).
    pub ttl: u8,
    /// Outer TTL / hop limit toward the VNI's multicast group: `ttl` when
    /// set, else 1, as Linux's vxlan device.
    pub multicast_ttl: u8,
    /// Outer DSCP: inherited from the inner packet (`tos = "inherit"`, the
    /// default) or fixed (`tos = N`: the TOS byte, whose ECN bits RFC 6040
    /// sets).
    pub dscp: Dscp,
    /// Outer IPv4 DF (`df = "set" | "unset" | "inherit"`, set by default).
    pub df: Df,
    /// Outer UDP source ports (`srcport = [MIN, MAX]`, 49152-65535).
    pub src_ports: RangeInclusive<u16>,
    /// Outer UDP checksum over IPv4 (`udpcsum`, off by default as Linux).
    pub udp_csum: bool,
    /// Zero outer UDP checksums over IPv6, sent and accepted
    /// (`udp6zerocsumtx` and `udp6zerocsumrx`, together).
    pub udp6_zero_csum: bool,
}

impl Default for OuterSpec {
    fn default() -> OuterSpec {
        OuterSpec {
            ttl: 64,
            multicast_ttl: 1,
            dscp: Dscp::Inherit,
            df: Df::Set,
            src_ports: 49152..=65535,
            udp_csum: false,
            udp6_zero_csum: false,
        }
    }
}

/// A checked VTEP configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointConfig {
    /// The underlay.
    pub underlay: Underlay,
    /// FDB ageing and bounds.
    pub fdb: FdbConfig,
    /// The bridge domains.
    pub vnis: Vec<VniSpec>,
    /// The control socket's path (`[control] socket`), if any.
    pub control: Option<PathBuf>,
    /// The address the Prometheus metrics are served on (`[metrics]
    /// listen`), if any.
    pub metrics: Option<SocketAddr>,
    /// `[tap] io_uring`: every TAP the VTEP creates (the underlay's and the
    /// ports') batches its reads and writes through an io_uring of this
    /// depth per queue; `None`: one system call per frame.
    pub tap_io_uring: Option<u32>,
}

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct ConfigProblem {
    /// The field, as a path (`vni[1].flood[0]`).
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What to change.
    pub fix: String,
}

impl core::fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}: {}", self.field, self.problem, self.fix)
    }
}

/// Why a VTEP configuration file was refused by [`parse`]: its TOML, or the
/// rules of an [`EndpointConfig`]. (What [`crate::Tunnel::new`] refuses of a
/// [`crate::VtepConfig`] is a [`crate::TunnelConfigError`].)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VtepConfigError {
    /// The TOML reader's message (syntax, types, unknown or missing fields).
    Syntax(String),
    /// The rules the file breaks, all of them.
    Invalid(Vec<ConfigProblem>),
}

impl core::fmt::Display for VtepConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            VtepConfigError::Syntax(m) => write!(f, "configuration: {m}"),
            VtepConfigError::Invalid(ps) => {
                write!(f, "configuration refused:")?;
                for p in ps {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for VtepConfigError {}

/// Collects problems while checking.
struct Check(Vec<ConfigProblem>);

impl Check {
    fn fail(
        &mut self,
        field: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.0.push(ConfigProblem {
            field: field.into(),
            problem: problem.into(),
            fix: fix.into(),
        });
    }

    fn ip(&mut self, field: &str, s: &str) -> Option<IpAddr> {
        match s.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                self.fail(
                    field,
                    format!("{s:?} is not an IP address"),
                    "write an IPv4 or IPv6 address, e.g. \"10.0.0.1\" or \"2001:db8::1\"",
                );
                None
            }
        }
    }

    fn mac(&mut self, field: &str, s: &str) -> Option<Mac> {
        let Some(mac) = parse_mac(s) else {
            self.fail(
                field,
                format!("{s:?} is not a MAC address"),
                "write six hex bytes separated by colons, e.g. \"02:00:00:00:00:01\"",
            );
            return None;
        };
        if mac[0] & 1 == 1 || mac == [0; 6] {
            self.fail(
                field,
                format!("{s} is not a unicast address"),
                "use a unicast MAC (the low bit of the first byte clear, not all zero)",
            );
            return None;
        }
        Some(mac)
    }

    fn ifname(&mut self, field: &str, name: &str, seen: &mut HashSet<String>) {
        if name.is_empty() || name.len() > IFNAME_MAX {
            self.fail(
                field,
                format!("{name:?} has {} bytes", name.len()),
                format!("use an interface name of 1 to {IFNAME_MAX} bytes"),
            );
        } else if name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace())
            || name == "."
            || name == ".."
        {
            self.fail(
                field,
                format!("{name:?} is not a valid interface name"),
                "use letters, digits, '-', '_' or '.', without '/', ':' or spaces",
            );
        }
        if !seen.insert(name.to_owned()) {
            self.fail(
                field,
                format!("{name:?} is used twice"),
                "give every device its own name",
            );
        }
    }
}

/// Parses a MAC written as `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Option<Mac> {
    let mut mac = [0u8; 6];
    let mut parts = s.split([':', '-']);
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn parse_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

/// Reads and checks a configuration.
pub fn parse(text: &str) -> Result<EndpointConfig, VtepConfigError> {
    let raw: RawConfig =
        toml::from_str(text).map_err(|e| VtepConfigError::Syntax(e.to_string()))?;
    let mut c = Check(Vec::new());
    let underlay = check_underlay(&mut c, &raw.underlay);
    let fdb = check_fdb(&mut c, &raw.fdb);
    let family = underlay.as_ref().map(|u| u.address.is_ipv4());
    let mut names: HashSet<String> = HashSet::new();
    if let Some(UnderlayDevice::Tap(n) | UnderlayDevice::Xdp(n)) =
        underlay.as_ref().map(|u| &u.device)
    {
        names.insert(n.clone());
    }
    let mut ids = HashSet::new();
    let vnis: Vec<VniSpec> = raw
        .vni
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            check_vni(
                &mut c,
                &format!("vni[{i}]"),
                v,
                family,
                &mut names,
                &mut ids,
            )
        })
        .collect();
    // One tunnel per encapsulation and port: its VNIs share the outer headers.
    for (i, v) in vnis.iter().enumerate() {
        if let Some((j, _)) = vnis
            .iter()
            .enumerate()
            .take(i)
            .find(|(_, w)| same_tunnel(&w.encap, &v.encap) && w.outer != v.outer)
        {
            c.fail(
                format!("vni[{i}]"),
                format!(
                    "its outer header options (ttl, tos, df, srcport, udpcsum, udp6zerocsum*) \
                     differ from vni[{j}]'s, on the same tunnel"
                ),
                "give VNIs of one encapsulation and port the same options, or another port",
            );
        }
    }
    if raw.vni.is_empty() {
        c.fail(
            "vni",
            "no VNI is configured",
            "add at least one [[vni]] table with an id and an encap",
        );
    }
    let control = check_control(&mut c, &raw.control);
    let metrics = check_metrics(&mut c, &raw.metrics);
    if let Some(d) = raw.tap.io_uring
        && !IO_URING_DEPTH.contains(&d)
    {
        c.fail(
            "tap.io_uring",
            format!("a ring of {d} entries"),
            format!(
                "use {} to {} (256 is a good start), or leave it out for one system call per frame",
                IO_URING_DEPTH.start(),
                IO_URING_DEPTH.end()
            ),
        );
    }
    match (underlay, c.0.is_empty()) {
        (Some(underlay), true) => Ok(EndpointConfig {
            underlay,
            fdb,
            vnis,
            control,
            metrics,
            tap_io_uring: raw.tap.io_uring,
        }),
        _ => Err(VtepConfigError::Invalid(c.0)),
    }
}

fn check_control(c: &mut Check, r: &RawControl) -> Option<PathBuf> {
    let p = r.socket.as_deref()?;
    if p.is_empty() || p.len() > SOCKET_PATH_MAX || p.contains('\0') {
        c.fail(
            "control.socket",
            format!("{p:?} cannot be a Unix socket's path"),
            format!("use a path of 1 to {SOCKET_PATH_MAX} bytes, e.g. \"/run/vtep.sock\""),
        );
        return None;
    }
    Some(PathBuf::from(p))
}

fn check_metrics(c: &mut Check, r: &RawMetrics) -> Option<SocketAddr> {
    let l = r.listen.as_deref()?;
    match l.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            c.fail(
                "metrics.listen",
                format!("{l:?} is not an address and port"),
                "write IP:PORT, e.g. \"127.0.0.1:9100\" or \"[::1]:9100\"",
            );
            None
        }
    }
}

fn check_underlay(c: &mut Check, u: &RawUnderlay) -> Option<Underlay> {
    let mut seen = HashSet::new();
    let device = match (&u.tap, &u.xdp) {
        (Some(t), None) => {
            c.ifname("underlay.tap", t, &mut seen);
            Some(UnderlayDevice::Tap(t.clone()))
        }
        (None, Some(x)) => {
            c.ifname("underlay.xdp", x, &mut seen);
            Some(UnderlayDevice::Xdp(x.clone()))
        }
        (Some(_), Some(_)) => {
            c.fail("underlay", "both tap and xdp are set", "keep one: tap = NAME creates a TAP, xdp = IFNAME binds AF_XDP to an existing interface");
            None
        }
        (None, None) => {
            c.fail("underlay", "no device", "set tap = \"NAME\" (a TAP device to create) or xdp = \"IFNAME\" (an existing interface)");
            None
        }
    };
    let (addr, prefix) = match u.address.split_once('/') {
        Some((a, p)) => (c.ip("underlay.address", a), p.parse::<u8>().ok()),
        None => {
            c.fail(
                "underlay.address",
                format!("{:?} has no prefix length", u.address),
                "write ADDRESS/PREFIX, e.g. \"10.0.0.2/24\"",
            );
            (None, None)
        }
    };
    let max_prefix = if addr.is_some_and(|a| a.is_ipv6()) {
        128
    } else {
        32
    };
    let prefix = match prefix {
        Some(p) if (1..=max_prefix).contains(&p) => Some(p),
        _ if addr.is_none() => None,
        _ => {
            c.fail(
                "underlay.address",
                format!("{:?} has a bad prefix length", u.address),
                format!("use a prefix length of 1 to {max_prefix}"),
            );
            None
        }
    };
    if let Some(a) = addr
        && (a.is_unspecified() || a.is_multicast() || a.is_loopback())
    {
        c.fail(
            "underlay.address",
            format!("{a} cannot be a VTEP's address"),
            "use a unicast address of the underlay network",
        );
    }
    let gateway = u
        .gateway
        .as_deref()
        .and_then(|g| c.ip("underlay.gateway", g));
    if let (Some(g), Some(a), Some(p)) = (gateway, addr, prefix)
        && !same_subnet(g, a, p)
    {
        c.fail(
            "underlay.gateway",
            format!("{g} is not in {a}/{p}"),
            "use a next hop on the underlay's own subnet",
        );
    }
    let mac = u.mac.as_deref().and_then(|m| c.mac("underlay.mac", m));
    let min_mtu = if addr.is_some_and(|a| a.is_ipv6()) {
        1280
    } else {
        576
    };
    let mtu = u.mtu.unwrap_or(DEFAULT_MTU);
    if !(min_mtu..=65535).contains(&mtu) {
        c.fail(
            "underlay.mtu",
            format!("{mtu} is out of range"),
            format!("use {min_mtu} to 65535"),
        );
    }
    if !(1..=64).contains(&u.queues) {
        c.fail(
            "underlay.queues",
            format!("{} queues", u.queues),
            "use 1 to 64 (one thread per queue)",
        );
    }
    Some(Underlay {
        device: device?,
        address: addr?,
        prefix: prefix?,
        gateway,
        mac,
        mtu: u16::try_from(mtu).ok()?,
        mtu_configured: u.mtu.is_some(),
        queues: u16::try_from(u.queues).ok()?,
    })
}

fn same_subnet(a: IpAddr, b: IpAddr, prefix: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

fn check_fdb(c: &mut Check, f: &RawFdb) -> FdbConfig {
    let d = FdbConfig::default();
    let cfg = FdbConfig {
        ageing: f.ageing_secs.map_or(d.ageing, Duration::from_secs),
        max_per_vni: f.max_per_vni.unwrap_or(d.max_per_vni),
        max_total: f.max_total.unwrap_or(d.max_total),
        max_flood: d.max_flood,
    };
    if cfg.ageing.is_zero() {
        c.fail(
            "fdb.ageing_secs",
            "0 would forget every MAC at once",
            "use a positive number of seconds (Linux's default is 300)",
        );
    }
    if cfg.max_per_vni == 0 || cfg.max_total == 0 {
        c.fail(
            "fdb",
            "a bound of 0 entries",
            "set max_per_vni and max_total to at least 1",
        );
    } else if cfg.max_per_vni > cfg.max_total {
        c.fail(
            "fdb.max_per_vni",
            format!(
                "{} is more than max_total {}",
                cfg.max_per_vni, cfg.max_total
            ),
            "make max_per_vni at most max_total",
        );
    }
    cfg
}

fn check_vni(
    c: &mut Check,
    prefix: &str,
    v: &RawVni,
    family: Option<bool>,
    names: &mut HashSet<String>,
    ids: &mut HashSet<u32>,
) -> Option<VniSpec> {
    let at = |f: &str| format!("{prefix}.{f}");
    let id = match u32::try_from(v.id) {
        Ok(id) if id < 1 << 24 => Some(id),
        _ => {
            c.fail(
                at("id"),
                format!("{} does not fit in 24 bits", v.id),
                "use 0 to 16777215",
            );
            None
        }
    };
    if let Some(id) = id
        && !ids.insert(id)
    {
        c.fail(
            at("id"),
            format!("VNI {id} is configured twice"),
            "merge the two [[vni]] tables or give one another id",
        );
    }
    let port = match v.port {
        Some(0) => {
            c.fail(
                at("port"),
                "0 is not a port",
                "use 4789 (VXLAN), 8472 (Linux's VXLAN default) or 6081 (GENEVE)",
            );
            None
        }
        Some(p) => match u16::try_from(p) {
            Ok(p) => Some(p),
            Err(_) => {
                c.fail(at("port"), format!("{p} is not a port"), "use 1 to 65535");
                None
            }
        },
        None => None,
    };
    let options: Vec<GeneveOpt> = v
        .geneve_option
        .iter()
        .enumerate()
        .filter_map(|(j, o)| check_option(c, &at(&format!("geneve_option[{j}]")), o))
        .collect();
    let opt_bytes: usize = options.iter().map(|o| 4 + o.data.len()).sum();
    if opt_bytes > GENEVE_OPTIONS_MAX {
        c.fail(
            at("geneve_option"),
            format!("{opt_bytes} bytes of options"),
            format!(
                "keep the options within {GENEVE_OPTIONS_MAX} bytes (4 per option plus its data)"
            ),
        );
    }
    let encap = match v.encap {
        RawEncap::Vxlan if !v.geneve_option.is_empty() => {
            c.fail(
                at("geneve_option"),
                "options on a VXLAN VNI",
                "remove them, or set encap = \"geneve\"",
            );
            None
        }
        RawEncap::Vxlan => Some(EncapSpec::Vxlan {
            port: port.unwrap_or(VXLAN_PORT),
        }),
        RawEncap::Geneve => Some(EncapSpec::Geneve {
            port: port.unwrap_or(GENEVE_PORT),
            options,
        }),
        RawEncap::Nvgre => {
            if v.port.is_some() {
                c.fail(at("port"), "NVGRE runs over GRE, not UDP", "remove port");
            }
            if !v.geneve_option.is_empty() {
                c.fail(
                    at("geneve_option"),
                    "options on an NVGRE VNI",
                    "remove them, or set encap = \"geneve\"",
                );
            }
            Some(EncapSpec::Nvgre)
        }
    };
    let mut flood = Vec::new();
    for (j, f) in v.flood.iter().enumerate() {
        let field = at(&format!("flood[{j}]"));
        let Some(ip) = c.ip(&field, f) else { continue };
        if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
            c.fail(
                &field,
                format!("{ip} is not a remote VTEP"),
                "list the unicast underlay addresses of the remote VTEPs",
            );
        } else if family.is_some_and(|v4| v4 != ip.is_ipv4()) {
            c.fail(
                &field,
                format!("{ip} is not of the underlay's address family"),
                "use addresses of the same family as underlay.address",
            );
        } else if flood.contains(&ip) {
            c.fail(
                &field,
                format!("{ip} is listed twice"),
                "list each remote VTEP once",
            );
        } else {
            flood.push(ip);
        }
    }
    for (j, p) in v.ports.iter().enumerate() {
        c.ifname(&at(&format!("ports[{j}]")), p, names);
    }
    let mut statics = Vec::new();
    for (j, s) in v.statics.iter().enumerate() {
        let mac = c.mac(&at(&format!("static[{j}].mac")), &s.mac);
        let field = at(&format!("static[{j}].remote"));
        let remote = c.ip(&field, &s.remote);
        if let Some(r) = remote
            && family.is_some_and(|v4| v4 != r.is_ipv4())
        {
            c.fail(
                &field,
                format!("{r} is not of the underlay's address family"),
                "use addresses of the same family as underlay.address",
            );
            continue;
        }
        if let (Some(m), Some(r)) = (mac, remote) {
            statics.push((m, r));
        }
    }
    let mut neighbors = Vec::new();
    for (j, n) in v.neighbor.iter().enumerate() {
        let ip = c.ip(&at(&format!("neighbor[{j}].ip")), &n.ip);
        let mac = c.mac(&at(&format!("neighbor[{j}].mac")), &n.mac);
        if let (Some(ip), Some(mac)) = (ip, mac) {
            neighbors.push((ip, mac));
        }
    }
    if !v.neighbor.is_empty() && !v.suppress_arp {
        c.fail(
            at("neighbor"),
            "static neighbours without suppression are never used",
            "set suppress_arp = true or remove them",
        );
    }
    if let Some(n) = v.nolearning {
        c.fail(
            at("nolearning"),
            "this is how `ip link` spells it; the file uses `learning`",
            format!("write learning = {}", !n),
        );
    }
    let group = v
        .group
        .as_deref()
        .and_then(|g| check_group(c, &at("group"), g, family));
    let outer = check_outer(c, prefix, v);
    Some(VniSpec {
        id: id?,
        encap: encap?,
        flood,
        ports: v.ports.clone(),
        suppress_arp: v.suppress_arp,
        statics,
        neighbors,
        outer: outer?,
        learning: v.learning.unwrap_or(true),
        l2miss: v.l2miss.unwrap_or(false),
        group,
    })
}

/// A VNI's multicast group: a multicast address of the underlay's family
/// whose membership is reported (not the link-local control block
/// 224.0.0.0/24, which IGMP never reports, nor an IPv6 scope below
/// link-local).
fn check_group(c: &mut Check, field: &str, g: &str, family: Option<bool>) -> Option<IpAddr> {
    let ip = c.ip(field, g)?;
    let reserved = match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0x000f < 2,
    };
    if !ip.is_multicast() {
        c.fail(
            field,
            format!("{ip} is not a multicast address"),
            "use a group such as \"239.1.1.1\" (IPv4) or \"ff05::100\" (IPv6); remote VTEPs \
             go in flood",
        );
    } else if family.is_some_and(|v4| v4 != ip.is_ipv4()) {
        c.fail(
            field,
            format!("{ip} is not of the underlay's address family"),
            "use a group of the same family as underlay.address",
        );
    } else if reserved {
        c.fail(
            field,
            format!("{ip} is reserved for link-local control traffic"),
            "use an administratively scoped group: 239.0.0.0/8, or ff05::/16 and ff08::/16 \
             for IPv6",
        );
    } else {
        return Some(ip);
    }
    None
}

/// True if VNIs of these encapsulations share one tunnel.
fn same_tunnel(a: &EncapSpec, b: &EncapSpec) -> bool {
    match (a, b) {
        (EncapSpec::Vxlan { port: p }, EncapSpec::Vxlan { port: q })
        | (EncapSpec::Geneve { port: p, .. }, EncapSpec::Geneve { port: q, .. }) => p == q,
        (EncapSpec::Nvgre, EncapSpec::Nvgre) => true,
        _ => false,
    }
}

fn check_outer(c: &mut Check, prefix: &str, v: &RawVni) -> Option<OuterSpec> {
    let at = |f: &str| format!("{prefix}.{f}");
    let mut o = OuterSpec::default();
    let mut ok = true;
    if let Some(ttl) = v.ttl {
        match u8::try_from(ttl) {
            Ok(t) if t > 0 => {
                o.ttl = t;
                o.multicast_ttl = t;
            }
            _ => {
                c.fail(at("ttl"), format!("{ttl} is not a TTL"), "use 1 to 255");
                ok = false;
            }
        }
    }
    match &v.tos {
        None => {}
        Some(RawTos::Name(n)) if n == "inherit" => o.dscp = Dscp::Inherit,
        Some(RawTos::Value(t)) if *t <= 255 => o.dscp = Dscp::Fixed((*t as u8) >> 2),
        Some(RawTos::Name(n)) => {
            c.fail(
                at("tos"),
                format!("{n:?} is not a TOS"),
                "use \"inherit\" or 0 to 255",
            );
            ok = false;
        }
        Some(RawTos::Value(t)) => {
            c.fail(
                at("tos"),
                format!("{t} is not a TOS byte"),
                "use \"inherit\" or 0 to 255",
            );
            ok = false;
        }
    }
    match v.df.as_deref() {
        None | Some("set") => o.df = Df::Set,
        Some("unset") => o.df = Df::Unset,
        Some("inherit") => o.df = Df::Inherit,
        Some(d) => {
            c.fail(
                at("df"),
                format!("{d:?} is not a DF mode"),
                "use \"set\", \"unset\" or \"inherit\"",
            );
            ok = false;
        }
    }
    if let Some(r) = &v.srcport {
        match r.as_slice() {
            [lo, hi] if 0 < *lo && lo <= hi && *hi <= 65535 => {
                o.src_ports = (*lo as u16)..=(*hi as u16);
            }
            _ => {
                c.fail(
                    at("srcport"),
                    format!("{r:?} is not a port range"),
                    "write [MIN, MAX] with 1 <= MIN <= MAX <= 65535, e.g. [49152, 65535]",
                );
                ok = false;
            }
        }
    }
    if v.udpcsum == Some(true) && matches!(v.encap, RawEncap::Nvgre) {
        c.fail(at("udpcsum"), "NVGRE has no UDP header", "remove udpcsum");
        ok = false;
    }
    o.udp_csum = v.udpcsum.unwrap_or(false);
    let (tx, rx) = (
        v.udp6zerocsumtx.unwrap_or(false),
        v.udp6zerocsumrx.unwrap_or(false),
    );
    if tx != rx {
        c.fail(
            at("udp6zerocsumtx"),
            "udp6zerocsumtx and udp6zerocsumrx differ",
            "set both (zero IPv6 UDP checksums sent and accepted) or neither",
        );
        ok = false;
    }
    o.udp6_zero_csum = tx && rx;
    ok.then_some(o)
}

fn check_option(c: &mut Check, field: &str, o: &RawOption) -> Option<GeneveOpt> {
    let class = u16::try_from(o.class);
    let kind = u8::try_from(o.kind);
    if class.is_err() {
        c.fail(
            format!("{field}.class"),
            format!("{:#x} is not 16 bits", o.class),
            "use 0x0000 to 0xffff",
        );
    }
    if kind.is_err() {
        c.fail(
            format!("{field}.type"),
            format!("{:#x} is not 8 bits", o.kind),
            "use 0x00 to 0xff (0x80 and up are critical)",
        );
    }
    let Some(data) = parse_hex(&o.data) else {
        c.fail(
            format!("{field}.data"),
            format!("{:?} is not hex bytes", o.data),
            "write an even number of hex digits, e.g. \"0000000a\"",
        );
        return None;
    };
    if !data.len().is_multiple_of(4) || data.len() > 124 {
        c.fail(
            format!("{field}.data"),
            format!("{} bytes", data.len()),
            "use a multiple of 4 bytes, at most 124",
        );
        return None;
    }
    Some(GeneveOpt {
        class: class.ok()?,
        kind: kind.ok()?,
        data,
    })
}

mod runtime;
pub use runtime::{VniTable, check_new_port, check_new_vni};

#[cfg(test)]
mod tests;
