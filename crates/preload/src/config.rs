//! The configuration file (`LINERATE_CONFIG=path.toml`), read and checked field
//! by field when the library loads.
//!
//! ```toml
//! on_error = "exit"          # or "kernel": a bad file runs the program on the kernel
//!
//! [nic]
//! tap = "lr0"                # the TAP interface linerate owns
//! create = false             # false: attach to an existing TAP; true: create it
//! vnet_hdr = true            # checksum and TSO offloads with the kernel
//! queues = 1                 # one linerate-rt queue thread per queue
//! mtu = 1500
//! mac = "02:00:00:00:00:02"  # optional; derived from the address otherwise
//! busy_poll_us = 0           # optional: spin this long before sleeping (SO_BUSY_POLL)
//! children = 0               # optional: forked children with a queue of their own
//!                            # (a multi-queue TAP, queues = 1; see the crate's `# fork`)
//!
//! [net]
//! address = "10.0.0.2/24"
//! gateway = "10.0.0.1"       # optional
//! address6 = "fd00::2/64"    # optional: IPv6 peers on linerate too
//! gateway6 = "fd00::1"       # optional, on address6's prefix
//!
//! [policy]
//! default = "kernel"         # or "linerate"
//!
//! [[policy.rule]]            # the first rule that matches decides
//! type = "tcp"               # "tcp", "udp" or "any"
//! local_port = 5201          # the port bound or listened on
//! remote = "10.0.0.0/24"     # the peer's prefix
//! remote_port = 5201
//! action = "linerate"        # or "kernel"
//! ```
//!
//! # An interface shared with the kernel (AF_XDP)
//!
//! With the `af-xdp` feature, `xdp` names an existing interface instead of
//! `tap` (one or the other): linerate binds AF_XDP sockets to its queues and
//! attaches its steering XDP program, which hands linerate only its own
//! frames and passes the rest to the kernel's stack, so the host's own
//! traffic on the interface goes on.
//!
//! ```toml
//! [nic]
//! xdp = "eth0"               # an existing interface
//! first_queue = 0            # the interface queue linerate's queue 0 binds
//! queues = 1                 # queues first_queue.. (one thread each)
//! bind = "auto"              # "copy", "zero-copy" (refused where the driver
//!                            # lacks it) or "auto" (zero-copy where it has it)
//! attach = "auto"            # the XDP program: "native", "generic" or "auto"
//! # mtu: the interface's unless given (at most the interface's);
//! # mac: the interface's unless given
//!
//! [net]
//! share_kernel_address = true
//! # address = "192.168.1.7/24"  # optional: the interface's first IPv4 address
//! ```
//!
//! `share_kernel_address = true` makes linerate use the interface's own
//! address and MAC, which the kernel keeps using: `net.address` (and
//! `net.address6`) must be the interface's, and without `net.address` its
//! first IPv4 address is taken when the library loads. linerate then claims
//! its listening ports and connections in the steering program's maps, holds
//! each of its ports in the kernel with a bound kernel socket (so neither
//! stack picks the other's ports), and takes next hops from the kernel's neighbour table (the
//! kernel answers ARP and ND). Without it, `net.address` is an address of
//! linerate's own on the interface (not one the kernel has): all of its
//! traffic, ARP and ND included, is linerate's.
//!
//! A build without the `af-xdp` feature refuses `xdp` with the command that
//! builds one that has it.
//!
//! Every error names the field and says how to fix it; [`Config::from_toml`]
//! returns the first one.

use crate::policy::{Action, Kind, Prefix, Rule};
use linerate_toe::config::MIN_MTU_IPV4 as MIN_MTU;
use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What to do when the configuration is bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnError {
    /// Print the error and exit before `main` (status 1).
    #[default]
    Exit,
    /// Print the error and leave every socket to the kernel.
    Kernel,
}

/// The NIC linerate runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicConfig {
    /// A TAP, or an existing interface through AF_XDP.
    pub device: Device,
    /// Queues, one linerate-rt thread each (1 to 16).
    pub queues: u16,
    /// IP MTU.
    pub mtu: u16,
    /// The interface's Ethernet address.
    pub mac: [u8; 6],
    /// Busy polling, as `SO_BUSY_POLL`: the queue threads after moving
    /// frames, and the program's blocking calls before they sleep, look
    /// again for this long instead of sleeping at once (zero: off).
    pub busy_poll: std::time::Duration,
    /// `[nic] children = N` (a TAP only, with one queue): forked children
    /// that may each run a linerate runtime of their own, on a queue of the
    /// TAP kept for them (0: a child's sockets are the kernel's).
    pub children: u16,
}

impl NicConfig {
    /// The interface's name, whichever kind it is.
    pub fn interface(&self) -> &str {
        match &self.device {
            Device::Tap(t) => &t.name,
            Device::Xdp(x) => &x.interface,
        }
    }

    /// The field that names the interface, for messages.
    pub fn field(&self) -> &'static str {
        match self.device {
            Device::Tap(_) => "nic.tap",
            Device::Xdp(_) => "nic.xdp",
        }
    }
}

/// The kind of NIC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// `[nic] tap = "lr0"`: a TAP interface linerate owns.
    Tap(TapNic),
    /// `[nic] xdp = "eth0"`: queues of an existing interface through AF_XDP,
    /// with linerate's steering program (the frames of linerate's address,
    /// ports and connections to linerate, the rest to the kernel's stack).
    /// Needs the `af-xdp` feature.
    Xdp(XdpNic),
}

/// A TAP interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TapNic {
    /// The TAP interface's name.
    pub name: String,
    /// Create the interface (true) or attach to an existing one (false).
    pub create: bool,
    /// `IFF_VNET_HDR` with checksum and TSO offloads toward the kernel.
    pub vnet_hdr: bool,
}

/// An existing interface through AF_XDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XdpNic {
    /// The interface, in the program's network namespace.
    pub interface: String,
    /// The interface queue linerate's queue 0 binds (`nic.first_queue`); the
    /// others follow it.
    pub first_queue: u32,
    /// Copy, zero-copy, or zero-copy where the driver has it (`nic.bind`).
    pub bind: XdpBind,
    /// How the steering program is attached (`nic.attach`).
    pub attach: XdpAttach,
}

/// `nic.bind`: how an AF_XDP socket gets its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpBind {
    /// `"auto"` (the default): zero-copy where the driver has it, copy
    /// otherwise (veth, generic attach).
    #[default]
    Auto,
    /// `"copy"`: the kernel copies each frame.
    Copy,
    /// `"zero-copy"`: the driver DMAs into linerate's memory; refused at
    /// start where the driver lacks it.
    ZeroCopy,
}

/// `nic.attach`: where the steering XDP program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XdpAttach {
    /// `"auto"` (the default): in the driver, or generic where the driver
    /// has no XDP.
    #[default]
    Auto,
    /// `"native"`: in the driver.
    Native,
    /// `"generic"`: in the kernel's generic receive path (every device).
    Generic,
}

/// What the kernel says of an interface: read when the file names one for
/// AF_XDP (its MAC, MTU and, with `net.share_kernel_address`, its address).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    /// Its Ethernet address.
    pub mac: [u8; 6],
    /// Its MTU.
    pub mtu: u32,
    /// Its IPv4 addresses and prefix lengths, in the kernel's order.
    pub ipv4: Vec<(Ipv4Addr, u8)>,
    /// Its IPv6 addresses and prefix lengths.
    pub ipv6: Vec<(Ipv6Addr, u8)>,
}

/// A checked configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// What a bad file does (kept from a file that fails later checks too).
    pub on_error: OnError,
    /// The NIC.
    pub nic: NicConfig,
    /// linerate's address and prefix length.
    pub address: (Ipv4Addr, u8),
    /// The gateway, on the address's subnet: linerate's default route. Without
    /// one, destinations off the subnet stay on the kernel whatever the rules
    /// say.
    pub gateway: Option<Ipv4Addr>,
    /// linerate's IPv6 address and prefix length. Without one, IPv6 peers
    /// (other than IPv4-mapped ones) stay on the kernel.
    pub address6: Option<(Ipv6Addr, u8)>,
    /// The IPv6 gateway, on `address6`'s prefix: the IPv6 default route.
    pub gateway6: Option<Ipv6Addr>,
    /// `net.share_kernel_address` (AF_XDP only): the addresses and the MAC
    /// are the interface's own, which the kernel's stack keeps using. linerate
    /// claims its ports and connections in the steering program's maps, holds
    /// its ports in the kernel (a bound kernel socket each) and takes next
    /// hops from the kernel's neighbour table; the kernel answers ARP and ND.
    pub share_kernel_address: bool,
    /// Ordered rules; the first that matches decides.
    pub rules: Vec<Rule>,
    /// The decision when no rule matches.
    pub default: Action,
}

/// A field that is wrong, and how to make it right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The field, as a TOML path (`nic.tap`, `policy.rule[2].remote`).
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
    /// What to write instead.
    pub fix: String,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}; {}", self.field, self.problem, self.fix)
    }
}

impl std::error::Error for ConfigError {}

fn err(
    field: impl Into<String>,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> ConfigError {
    ConfigError {
        field: field.into(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    on_error: Option<String>,
    nic: Option<RawNic>,
    net: Option<RawNet>,
    policy: Option<RawPolicy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNic {
    tap: Option<String>,
    xdp: Option<String>,
    first_queue: Option<i64>,
    bind: Option<String>,
    attach: Option<String>,
    create: Option<bool>,
    vnet_hdr: Option<bool>,
    queues: Option<i64>,
    children: Option<i64>,
    mtu: Option<i64>,
    busy_poll_us: Option<i64>,
    mac: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNet {
    address: Option<String>,
    gateway: Option<String>,
    address6: Option<String>,
    gateway6: Option<String>,
    share_kernel_address: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    default: Option<String>,
    rule: Option<Vec<RawRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(rename = "type")]
    kind: Option<String>,
    local_port: Option<i64>,
    remote: Option<String>,
    remote_port: Option<i64>,
    action: Option<String>,
}

/// The `on_error` of a file, if it says one validly, so that a file whose
/// other fields are wrong still chooses what its errors do.
pub fn on_error_of(text: &str) -> OnError {
    let on = toml::from_str::<toml::Table>(text).ok().and_then(|t| {
        t.get("on_error")
            .and_then(|v| v.as_str().map(str::to_owned))
    });
    match on.as_deref() {
        Some("kernel") => OnError::Kernel,
        _ => OnError::Exit,
    }
}

fn ifname(field: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '%', '\0']) {
        return Err(err(
            field,
            format!("{name:?} is not an interface name"),
            "use 1 to 15 characters without '/', ' ' or '%'",
        ));
    }
    Ok(())
}

fn port(field: &str, v: i64) -> Result<u16, ConfigError> {
    u16::try_from(v)
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| err(field, format!("{v} is not a port"), "give 1 to 65535"))
}

fn action(field: &str, v: &str) -> Result<Action, ConfigError> {
    match v {
        "linerate" => Ok(Action::Linerate),
        "kernel" => Ok(Action::Kernel),
        _ => Err(err(
            field,
            format!("unknown action {v:?}"),
            "write \"linerate\" or \"kernel\"",
        )),
    }
}

fn parse_mac(field: &str, s: &str) -> Result<[u8; 6], ConfigError> {
    let bad = || {
        err(
            field,
            format!("{s:?} is not an Ethernet address"),
            "write six hex bytes, such as \"02:00:00:00:00:02\" (unicast: first byte even)",
        )
    };
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let p = parts.next().ok_or_else(bad)?;
        if p.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() || mac[0] & 1 != 0 || mac == [0; 6] {
        return Err(bad());
    }
    Ok(mac)
}

fn parse_cidr(field: &str, s: &str) -> Result<(Ipv4Addr, u8), ConfigError> {
    let fix = "write an IPv4 address and prefix length, such as \"10.0.0.2/24\"";
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| err(field, format!("{s:?} has no prefix length"), fix))?;
    let addr: Ipv4Addr = a
        .parse()
        .map_err(|_| err(field, format!("{a:?} is not an IPv4 address"), fix))?;
    let len: u8 = p
        .parse()
        .ok()
        .filter(|&l| l <= 32)
        .ok_or_else(|| err(field, format!("{p:?} is not a prefix length"), fix))?;
    Ok((addr, len))
}

fn parse_cidr6(field: &str, s: &str) -> Result<(Ipv6Addr, u8), ConfigError> {
    let fix = "write an IPv6 address and prefix length, such as \"fd00::2/64\"";
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| err(field, format!("{s:?} has no prefix length"), fix))?;
    let addr: Ipv6Addr = a
        .parse()
        .map_err(|_| err(field, format!("{a:?} is not an IPv6 address"), fix))?;
    let len: u8 = p
        .parse()
        .ok()
        .filter(|&l| (1..=128).contains(&l))
        .ok_or_else(|| err(field, format!("{p:?} is not a prefix length"), fix))?;
    if addr.is_unspecified()
        || addr.is_multicast()
        || addr.is_loopback()
        || addr.to_ipv4_mapped().is_some()
    {
        return Err(err(
            field,
            format!("{addr} is not a host address of its own"),
            "give a unicast IPv6 address (not ::, ::1, multicast or IPv4-mapped)",
        ));
    }
    Ok((addr, len))
}

impl Config {
    /// Parses and checks `text`; an interface it names for AF_XDP is read
    /// from the kernel (in the calling thread's network namespace).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, crate::ffi::sys::interface, cfg!(feature = "af-xdp"))
    }

    /// [`Config::from_toml`], with `lookup` telling what the kernel says of
    /// an interface named by `nic.xdp`, and `xdp_built` whether this build
    /// has AF_XDP.
    pub(crate) fn parse(
        text: &str,
        lookup: impl Fn(&str) -> std::io::Result<Interface>,
        xdp_built: bool,
    ) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let msg = e.message().to_owned();
            let field = e
                .span()
                .and_then(|s| text.get(..s.start))
                .map(|before| format!("line {}", before.matches('\n').count() + 1))
                .unwrap_or_else(|| "file".to_owned());
            err(
                field,
                msg,
                "see the crate documentation of linerate-preload for the fields",
            )
        })?;
        let on_error = match raw.on_error.as_deref() {
            None | Some("exit") => OnError::Exit,
            Some("kernel") => OnError::Kernel,
            Some(o) => {
                return Err(err(
                    "on_error",
                    format!("unknown value {o:?}"),
                    "write \"exit\" or \"kernel\"",
                ));
            }
        };
        let nic = raw
            .nic
            .ok_or_else(|| err("nic", "missing", "add a [nic] table with tap = \"name\""))?;
        let net = raw.net.ok_or_else(|| {
            err(
                "net",
                "missing",
                "add a [net] table with address = \"10.0.0.2/24\"",
            )
        })?;
        let share = net.share_kernel_address.unwrap_or(false);
        let device = match (nic.tap, nic.xdp) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "nic",
                    "both tap and xdp are set",
                    "keep one: tap = \"lr0\" runs on a TAP, xdp = \"eth0\" on an existing interface through AF_XDP",
                ));
            }
            (None, None) => {
                return Err(err(
                    "nic.tap",
                    "missing",
                    "name the TAP interface: tap = \"lr0\" (or an existing interface for AF_XDP: xdp = \"eth0\")",
                ));
            }
            (Some(tap), None) => {
                ifname("nic.tap", &tap)?;
                let xdp_only = [
                    ("nic.first_queue", nic.first_queue.is_some()),
                    ("nic.bind", nic.bind.is_some()),
                    ("nic.attach", nic.attach.is_some()),
                    ("net.share_kernel_address", share),
                ];
                if let Some((field, _)) = xdp_only.iter().find(|(_, set)| *set) {
                    return Err(err(
                        *field,
                        "only for AF_XDP (a TAP's kernel side has addresses of its own)",
                        "remove it, or run on an existing interface with xdp = \"eth0\" instead of tap",
                    ));
                }
                Device::Tap(TapNic {
                    name: tap,
                    create: nic.create.unwrap_or(false),
                    vnet_hdr: nic.vnet_hdr.unwrap_or(true),
                })
            }
            (None, Some(x)) => {
                ifname("nic.xdp", &x)?;
                if !xdp_built {
                    return Err(err(
                        "nic.xdp",
                        "this build of linerate-preload has no AF_XDP",
                        "build it with `cargo build -p linerate-preload --features af-xdp` (needs clang and libelf), or run on a TAP: tap = \"lr0\"",
                    ));
                }
                for (field, set) in [
                    ("nic.create", nic.create.is_some()),
                    ("nic.vnet_hdr", nic.vnet_hdr.is_some()),
                ] {
                    if set {
                        return Err(err(
                            field,
                            "only for a TAP",
                            "remove it (xdp binds an existing interface, which AF_XDP gives no offloads)",
                        ));
                    }
                }
                let first_queue = match nic.first_queue {
                    None => 0,
                    Some(q) => u32::try_from(q).map_err(|_| {
                        err(
                            "nic.first_queue",
                            format!("{q} is not a queue"),
                            "give the interface's queue number, 0 or more (ethtool -l)",
                        )
                    })?,
                };
                let bind = match nic.bind.as_deref() {
                    None | Some("auto") => XdpBind::Auto,
                    Some("copy") => XdpBind::Copy,
                    Some("zero-copy") => XdpBind::ZeroCopy,
                    Some(b) => {
                        return Err(err(
                            "nic.bind",
                            format!("unknown mode {b:?}"),
                            "write \"auto\", \"copy\" or \"zero-copy\"",
                        ));
                    }
                };
                let attach = match nic.attach.as_deref() {
                    None | Some("auto") => XdpAttach::Auto,
                    Some("native") => XdpAttach::Native,
                    Some("generic") => XdpAttach::Generic,
                    Some(a) => {
                        return Err(err(
                            "nic.attach",
                            format!("unknown mode {a:?}"),
                            "write \"auto\", \"native\" or \"generic\"",
                        ));
                    }
                };
                Device::Xdp(XdpNic {
                    interface: x,
                    first_queue,
                    bind,
                    attach,
                })
            }
        };
        // An AF_XDP interface exists already: what the kernel says of it.
        let iface = match &device {
            Device::Tap(_) => None,
            Device::Xdp(x) => Some(lookup(&x.interface).map_err(|e| {
                err(
                    "nic.xdp",
                    format!("cannot read interface {:?}: {e}", x.interface),
                    "name an existing interface of the program's network namespace (ip link)",
                )
            })?),
        };
        let queues = match nic.queues {
            None => 1,
            Some(q) => u16::try_from(q)
                .ok()
                .filter(|q| (1..=16).contains(q))
                .ok_or_else(|| err("nic.queues", format!("{q} queues"), "give 1 to 16"))?,
        };
        let children = match nic.children {
            None | Some(0) => 0,
            Some(c) => {
                let c = u16::try_from(c)
                    .ok()
                    .filter(|c| (1..=64).contains(c))
                    .ok_or_else(|| {
                        err(
                            "nic.children",
                            format!("{c} children"),
                            "give 0 (children's sockets go to the kernel) to 64",
                        )
                    })?;
                match &device {
                    Device::Xdp(_) => {
                        return Err(err(
                            "nic.children",
                            "only for a TAP",
                            "remove it (an AF_XDP interface's queues are not handed to children)",
                        ));
                    }
                    Device::Tap(t) if !t.vnet_hdr => {
                        return Err(err(
                            "nic.children",
                            "needs nic.vnet_hdr = true",
                            "remove vnet_hdr = false, or children = ...",
                        ));
                    }
                    Device::Tap(_) => {}
                }
                if queues != 1 {
                    return Err(err(
                        "nic.children",
                        format!("needs nic.queues = 1, not {queues}"),
                        "set queues = 1 (the program runs on the TAP's queue 0, each child on one more)",
                    ));
                }
                c
            }
        };
        let busy_poll = match nic.busy_poll_us {
            None => std::time::Duration::ZERO,
            Some(us) => u64::try_from(us)
                .ok()
                .filter(|&us| us <= 1_000_000)
                .map(std::time::Duration::from_micros)
                .ok_or_else(|| {
                    err(
                        "nic.busy_poll_us",
                        format!("{us} is not a busy-poll time"),
                        "give 0 (off) to 1000000 microseconds; 50 suits request/response traffic",
                    )
                })?,
        };
        let if_mtu = iface
            .as_ref()
            .map(|i| u16::try_from(i.mtu.min(9000)).unwrap_or(9000));
        let mtu = match nic.mtu {
            None => if_mtu.unwrap_or(1500).max(MIN_MTU),
            Some(m) => {
                let m = u16::try_from(m)
                    .ok()
                    .filter(|&m| (MIN_MTU..=9000).contains(&m))
                    .ok_or_else(|| {
                        err(
                            "nic.mtu",
                            format!("{m} is not a usable MTU"),
                            "give 576 to 9000 (the interface's MTU, usually 1500)",
                        )
                    })?;
                if let Some(have) = if_mtu.filter(|&have| m > have) {
                    return Err(err(
                        "nic.mtu",
                        format!("{m} is over the interface's MTU, {have}"),
                        format!(
                            "give at most {have}, leave it out, or raise the interface's (ip link set dev NAME mtu {m})"
                        ),
                    ));
                }
                m
            }
        };
        let address = match (net.address, &iface) {
            (None, Some(i)) if share => *i.ipv4.first().ok_or_else(|| {
                err(
                    "net.address",
                    "the interface has no IPv4 address to share",
                    "give it one (ip addr add 10.0.0.2/24 dev NAME), or give net.address",
                )
            })?,
            (None, _) => {
                return Err(err(
                    "net.address",
                    "missing",
                    "give linerate's address: address = \"10.0.0.2/24\"",
                ));
            }
            (Some(a), _) => parse_cidr("net.address", &a)?,
        };
        if address.0.is_unspecified() || address.0.is_multicast() || address.0.is_broadcast() {
            return Err(err(
                "net.address",
                format!("{} is not a host address", address.0),
                "give a unicast address",
            ));
        }
        if let Some(i) = &iface {
            let kernels = i.ipv4.iter().any(|&(a, _)| a == address.0);
            if share && !kernels {
                return Err(err(
                    "net.address",
                    format!("{} is not an address of the interface", address.0),
                    "give one the interface has (ip addr), or leave net.address out to share its first",
                ));
            }
            if !share && kernels {
                return Err(err(
                    "net.address",
                    format!("{} is the kernel's address on the interface", address.0),
                    "set net.share_kernel_address = true to share it with the kernel, or give linerate an address of its own",
                ));
            }
        }
        let mac = match (nic.mac, &iface) {
            (Some(m), Some(i)) => {
                let m = parse_mac("nic.mac", &m)?;
                if share && m != i.mac {
                    return Err(err(
                        "nic.mac",
                        "sharing the kernel's address means sharing its MAC (the kernel answers ARP with it)",
                        "remove nic.mac",
                    ));
                }
                m
            }
            (Some(m), None) => parse_mac("nic.mac", &m)?,
            // The interface's own: a NIC takes only its MAC's unicast frames
            // (unless promiscuous).
            (None, Some(i)) => i.mac,
            (None, None) => {
                let o = address.0.octets();
                [0x02, 0x4c, o[0], o[1], o[2], o[3]]
            }
        };
        let gateway = match net.gateway {
            None => None,
            Some(g) => {
                let gw: Ipv4Addr = g.parse().map_err(|_| {
                    err(
                        "net.gateway",
                        format!("{g:?} is not an IPv4 address"),
                        "write an address such as \"10.0.0.1\"",
                    )
                })?;
                if !Prefix::new(IpAddr::V4(address.0), address.1).contains(IpAddr::V4(gw)) {
                    return Err(err(
                        "net.gateway",
                        format!("{gw} is not on {}/{}", address.0, address.1),
                        "give a gateway on the address's subnet",
                    ));
                }
                Some(gw)
            }
        };
        let address6 = net
            .address6
            .map(|a| parse_cidr6("net.address6", &a))
            .transpose()?;
        if let (Some((a6, _)), Some(i)) = (address6, &iface) {
            let kernels = i.ipv6.iter().any(|&(a, _)| a == a6);
            if share != kernels {
                return Err(err(
                    "net.address6",
                    if share {
                        format!("{a6} is not an address of the interface")
                    } else {
                        format!("{a6} is the kernel's address on the interface")
                    },
                    if share {
                        "give one the interface has (ip -6 addr), or leave net.address6 out"
                    } else {
                        "set net.share_kernel_address = true to share it, or give linerate an address of its own"
                    },
                ));
            }
        }
        let gateway6 = match net.gateway6 {
            None => None,
            Some(g) => {
                let Some((a6, l6)) = address6 else {
                    return Err(err(
                        "net.gateway6",
                        "a gateway without net.address6",
                        "give net.address6 too, or remove net.gateway6",
                    ));
                };
                let gw: Ipv6Addr = g.parse().map_err(|_| {
                    err(
                        "net.gateway6",
                        format!("{g:?} is not an IPv6 address"),
                        "write an address such as \"fd00::1\"",
                    )
                })?;
                if !Prefix::new(IpAddr::V6(a6), l6).contains(IpAddr::V6(gw)) {
                    return Err(err(
                        "net.gateway6",
                        format!("{gw} is not on {a6}/{l6}"),
                        "give a gateway on address6's prefix",
                    ));
                }
                Some(gw)
            }
        };
        let (default, raw_rules) = match raw.policy {
            None => (Action::Kernel, Vec::new()),
            Some(p) => (
                match p.default.as_deref() {
                    None => Action::Kernel,
                    Some(d) => action("policy.default", d)?,
                },
                p.rule.unwrap_or_default(),
            ),
        };
        let mut rules = Vec::with_capacity(raw_rules.len());
        for (i, r) in raw_rules.into_iter().enumerate() {
            let f = |name: &str| format!("policy.rule[{i}].{name}");
            let kind = match r.kind.as_deref() {
                None | Some("any") => None,
                Some("tcp") => Some(Kind::Tcp),
                Some("udp") => Some(Kind::Udp),
                Some(k) => {
                    return Err(err(
                        f("type"),
                        format!("unknown type {k:?}"),
                        "write \"tcp\", \"udp\" or \"any\"",
                    ));
                }
            };
            let local_port = r
                .local_port
                .map(|p| port(&f("local_port"), p))
                .transpose()?;
            let remote_port = r
                .remote_port
                .map(|p| port(&f("remote_port"), p))
                .transpose()?;
            let remote = r
                .remote
                .map(|s| {
                    Prefix::parse(&s).ok_or_else(|| {
                        err(
                            f("remote"),
                            format!("{s:?} is not a prefix"),
                            "write an address and prefix length, such as \"10.0.0.0/24\"",
                        )
                    })
                })
                .transpose()?;
            let action = action(
                &f("action"),
                r.action.as_deref().ok_or_else(|| {
                    err(
                        f("action"),
                        "missing",
                        "say action = \"linerate\" or \"kernel\"",
                    )
                })?,
            )?;
            rules.push(Rule {
                kind,
                local_port,
                remote,
                remote_port,
                action,
            });
        }
        Ok(Config {
            on_error,
            nic: NicConfig {
                device,
                queues,
                mtu,
                mac,
                busy_poll,
                children,
            },
            address,
            gateway,
            address6,
            gateway6,
            share_kernel_address: share,
            rules,
            default,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GOOD: &str = r#"
        on_error = "kernel"
        [nic]
        tap = "lr0"
        queues = 2
        [net]
        address = "10.0.0.2/24"
        gateway = "10.0.0.1"
        [policy]
        default = "linerate"
        [[policy.rule]]
        type = "udp"
        action = "kernel"
        [[policy.rule]]
        type = "tcp"
        local_port = 22
        remote = "10.0.0.0/8"
        action = "kernel"
    "#;

    fn field_of(text: &str) -> String {
        Config::from_toml(text).unwrap_err().field
    }

    #[test]
    fn a_good_file() {
        let c = Config::from_toml(GOOD).unwrap();
        assert_eq!(c.on_error, OnError::Kernel);
        assert_eq!(
            c.nic.device,
            Device::Tap(TapNic {
                name: "lr0".into(),
                create: false,
                vnet_hdr: true
            })
        );
        assert!(!c.share_kernel_address);
        assert_eq!((c.nic.queues, c.nic.mtu), (2, 1500));
        assert_eq!(c.nic.children, 0);
        let forking = Config::from_toml(
            "[nic]\ntap = \"lr0\"\nchildren = 4\n[net]\naddress = \"10.0.0.2/24\"\n",
        )
        .unwrap();
        assert_eq!((forking.nic.children, forking.nic.queues), (4, 1));
        assert_eq!(c.nic.mac, [0x02, 0x4c, 10, 0, 0, 2]);
        assert_eq!(c.address, (Ipv4Addr::new(10, 0, 0, 2), 24));
        assert_eq!(c.gateway, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(c.default, Action::Linerate);
        assert_eq!(c.rules.len(), 2);
        assert_eq!(c.rules[1].local_port, Some(22));
        assert_eq!(c.rules[1].kind, Some(Kind::Tcp));
    }

    #[test]
    fn each_bad_field_is_named() {
        let base = "[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2/24\"\n";
        assert!(Config::from_toml(base).is_ok());
        let cases: &[(&str, &str)] = &[
            ("on_error = \"maybe\"\n", "on_error"),
            ("[nic]\n[net]\naddress = \"10.0.0.2/24\"\n", "nic.tap"),
            ("[net]\naddress = \"10.0.0.2/24\"\n", "nic"),
            ("[nic]\ntap = \"lr0\"\n", "net"),
            (
                "[nic]\ntap = \"much-too-long-name\"\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.tap",
            ),
            (
                "[nic]\ntap = \"lr0\"\nqueues = 0\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.queues",
            ),
            (
                "[nic]\ntap = \"lr0\"\nmtu = 100\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.mtu",
            ),
            (
                "[nic]\ntap = \"lr0\"\nbusy_poll_us = -1\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.busy_poll_us",
            ),
            (
                "[nic]\ntap = \"lr0\"\nchildren = 65\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.children",
            ),
            (
                "[nic]\ntap = \"lr0\"\nchildren = -1\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.children",
            ),
            (
                "[nic]\ntap = \"lr0\"\nchildren = 2\nqueues = 2\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.children",
            ),
            (
                "[nic]\ntap = \"lr0\"\nchildren = 2\nvnet_hdr = false\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.children",
            ),
            (
                "[nic]\ntap = \"lr0\"\nmac = \"01:00:00:00:00:01\"\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.mac",
            ),
            (
                "[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2\"\n",
                "net.address",
            ),
            (
                "[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2/33\"\n",
                "net.address",
            ),
            (
                "[nic]\ntap = \"lr0\"\n[net]\naddress = \"0.0.0.0/24\"\n",
                "net.address",
            ),
            (
                "[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2/24\"\ngateway = \"10.0.1.1\"\n",
                "net.gateway",
            ),
        ];
        let v6 =
            |net: &str| format!("[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2/24\"\n{net}");
        let cases6: &[(&str, &str)] = &[
            ("address6 = \"fd00::2\"\n", "net.address6"),
            ("address6 = \"10.0.0.2/24\"\n", "net.address6"),
            ("address6 = \"fd00::2/129\"\n", "net.address6"),
            ("address6 = \"ff02::1/64\"\n", "net.address6"),
            ("address6 = \"::ffff:10.0.0.2/64\"\n", "net.address6"),
            ("gateway6 = \"fd00::1\"\n", "net.gateway6"),
            (
                "address6 = \"fd00::2/64\"\ngateway6 = \"fd01::1\"\n",
                "net.gateway6",
            ),
            (
                "address6 = \"fd00::2/64\"\ngateway6 = \"10.0.0.1\"\n",
                "net.gateway6",
            ),
            (
                "address6 = \"fd00::2/64\"\ngateway6 = \"fe80::1\"\n",
                "net.gateway6",
            ),
        ];
        for (net, field) in cases6 {
            assert_eq!(&field_of(&v6(net)), field, "{net}");
        }
        let c =
            Config::from_toml(&v6("address6 = \"fd00::2/64\"\ngateway6 = \"fd00::1\"\n")).unwrap();
        assert_eq!(c.address6, Some(("fd00::2".parse().unwrap(), 64)));
        assert_eq!(c.gateway6, Some("fd00::1".parse().unwrap()));
        for (text, field) in cases {
            assert_eq!(&field_of(text), field, "{text}");
        }
        let policy = |p: &str| format!("{base}[policy]\n{p}");
        assert_eq!(field_of(&policy("default = \"both\"\n")), "policy.default");
        assert_eq!(
            field_of(&policy(
                "[[policy.rule]]\ntype = \"sctp\"\naction = \"kernel\"\n"
            )),
            "policy.rule[0].type"
        );
        assert_eq!(
            field_of(&policy(
                "[[policy.rule]]\naction = \"kernel\"\n[[policy.rule]]\nlocal_port = 70000\naction = \"kernel\"\n"
            )),
            "policy.rule[1].local_port"
        );
        assert_eq!(
            field_of(&policy(
                "[[policy.rule]]\nremote = \"10.0.0.0\"\naction = \"kernel\"\n"
            )),
            "policy.rule[0].remote"
        );
        assert_eq!(
            field_of(&policy("[[policy.rule]]\ntype = \"tcp\"\n")),
            "policy.rule[0].action"
        );
    }

    #[test]
    fn syntax_and_unknown_fields_name_the_line() {
        let e = Config::from_toml("[nic]\ntap = \"lr0\"\ntpa = 1\n").unwrap_err();
        assert_eq!(e.field, "line 3");
        assert!(e.problem.contains("tpa"), "{e}");
        let e = Config::from_toml("[nic\n").unwrap_err();
        assert!(e.field.starts_with("line"), "{e}");
        assert!(!e.to_string().is_empty());
    }

    /// What the kernel says of `eth0` in the tests below.
    fn eth0(name: &str) -> std::io::Result<Interface> {
        if name != "eth0" {
            return Err(std::io::Error::from(std::io::ErrorKind::NotFound));
        }
        Ok(Interface {
            mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
            mtu: 1500,
            ipv4: vec![(Ipv4Addr::new(192, 168, 1, 7), 24)],
            ipv6: vec![("fd00::7".parse().unwrap(), 64)],
        })
    }

    fn xdp(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, eth0, true)
    }

    #[test]
    fn an_xdp_interface_shared_with_the_kernel() {
        let c = xdp("[nic]\nxdp = \"eth0\"\n[net]\nshare_kernel_address = true\n").unwrap();
        assert_eq!(
            c.nic.device,
            Device::Xdp(XdpNic {
                interface: "eth0".into(),
                first_queue: 0,
                bind: XdpBind::Auto,
                attach: XdpAttach::Auto,
            })
        );
        assert!(c.share_kernel_address);
        // The interface's own address, MAC and MTU.
        assert_eq!(c.address, (Ipv4Addr::new(192, 168, 1, 7), 24));
        assert_eq!(c.nic.mac, [0x52, 0x54, 0, 0x12, 0x34, 0x56]);
        assert_eq!((c.nic.mtu, c.nic.queues), (1500, 1));
        assert_eq!(c.nic.interface(), "eth0");
        let c = xdp(
            "[nic]\nxdp = \"eth0\"\nfirst_queue = 2\nqueues = 2\nbind = \"zero-copy\"\n\
             attach = \"native\"\nmtu = 1400\n[net]\naddress = \"192.168.1.7/24\"\n\
             address6 = \"fd00::7/64\"\nshare_kernel_address = true\n",
        )
        .unwrap();
        let Device::Xdp(x) = &c.nic.device else {
            panic!("{c:?}")
        };
        assert_eq!(
            (x.first_queue, x.bind, x.attach),
            (2, XdpBind::ZeroCopy, XdpAttach::Native)
        );
        assert_eq!((c.nic.mtu, c.nic.queues), (1400, 2));
        // An address of linerate's own on the interface, beside the kernel's.
        let c =
            xdp("[nic]\nxdp = \"eth0\"\nbind = \"copy\"\n[net]\naddress = \"192.168.1.9/24\"\n")
                .unwrap();
        assert!(!c.share_kernel_address);
        assert_eq!(c.nic.mac, [0x52, 0x54, 0, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn each_bad_xdp_field_is_named() {
        let cases: &[(&str, &str)] = &[
            (
                "[nic]\ntap = \"lr0\"\nxdp = \"eth0\"\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic",
            ),
            (
                "[nic]\nxdp = \"eth1\"\n[net]\nshare_kernel_address = true\n",
                "nic.xdp",
            ),
            (
                "[nic]\nxdp = \"a/b\"\n[net]\nshare_kernel_address = true\n",
                "nic.xdp",
            ),
            ("[nic]\nxdp = \"eth0\"\n[net]\n", "net.address"),
            (
                "[nic]\nxdp = \"eth0\"\n[net]\naddress = \"192.168.1.7/24\"\n",
                "net.address",
            ),
            (
                "[nic]\nxdp = \"eth0\"\n[net]\naddress = \"192.168.1.8/24\"\nshare_kernel_address = true\n",
                "net.address",
            ),
            (
                "[nic]\nxdp = \"eth0\"\n[net]\naddress6 = \"fd00::8/64\"\nshare_kernel_address = true\n",
                "net.address6",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nmac = \"02:00:00:00:00:02\"\n[net]\nshare_kernel_address = true\n",
                "nic.mac",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nmtu = 9000\n[net]\nshare_kernel_address = true\n",
                "nic.mtu",
            ),
            (
                "[nic]\nxdp = \"eth0\"\ncreate = true\n[net]\nshare_kernel_address = true\n",
                "nic.create",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nvnet_hdr = false\n[net]\nshare_kernel_address = true\n",
                "nic.vnet_hdr",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nbind = \"fast\"\n[net]\nshare_kernel_address = true\n",
                "nic.bind",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nattach = \"skb\"\n[net]\nshare_kernel_address = true\n",
                "nic.attach",
            ),
            (
                "[nic]\nxdp = \"eth0\"\nfirst_queue = -1\n[net]\nshare_kernel_address = true\n",
                "nic.first_queue",
            ),
            (
                "[nic]\ntap = \"lr0\"\n[net]\naddress = \"10.0.0.2/24\"\nshare_kernel_address = true\n",
                "net.share_kernel_address",
            ),
            (
                "[nic]\ntap = \"lr0\"\nbind = \"copy\"\n[net]\naddress = \"10.0.0.2/24\"\n",
                "nic.bind",
            ),
        ];
        for (text, field) in cases {
            let e = xdp(text).unwrap_err();
            assert_eq!(&e.field, field, "{text}: {e}");
            assert!(!e.fix.is_empty());
        }
    }

    #[test]
    fn xdp_without_the_feature_says_how_to_build_it() {
        let text = "[nic]\nxdp = \"eth0\"\n[net]\nshare_kernel_address = true\n";
        let e = Config::parse(text, eth0, false).unwrap_err();
        assert_eq!(e.field, "nic.xdp");
        assert!(e.fix.contains("--features af-xdp"), "{e}");
        // The library's own build says the same when it lacks the feature.
        if !cfg!(feature = "af-xdp") {
            assert_eq!(Config::from_toml(text).unwrap_err(), e);
        }
    }

    proptest::proptest! {
        /// Any mix of the `[nic]` and `[net]` fields, with values good and
        /// bad: the check never panics, a refusal names a field and a fix,
        /// and what it accepts is within the documented bounds.
        #[test]
        fn random_files_are_checked_without_panics(
            fields in proptest::collection::vec((0usize..15, 0usize..8), 0..10),
        ) {
            const KEYS: [(&str, &str); 15] = [
                ("nic", "tap"), ("nic", "xdp"), ("nic", "first_queue"), ("nic", "bind"),
                ("nic", "attach"), ("nic", "create"), ("nic", "vnet_hdr"), ("nic", "queues"),
                ("nic", "mtu"), ("nic", "mac"), ("net", "address"), ("net", "address6"),
                ("net", "share_kernel_address"), ("net", "gateway"), ("nic", "children"),
            ];
            const VALUES: [&str; 8] = [
                "\"eth0\"", "\"lr0\"", "true", "0", "70000", "1500", "\"192.168.1.7/24\"",
                "\"copy\"",
            ];
            let mut nic = String::new();
            let mut net = String::new();
            let mut seen = std::collections::HashSet::new();
            for (k, v) in fields {
                let (table, key) = KEYS[k];
                if !seen.insert(k) {
                    continue;
                }
                let line = format!("{key} = {}\n", VALUES[v]);
                if table == "nic" { nic.push_str(&line) } else { net.push_str(&line) }
            }
            let text = format!("[nic]\n{nic}[net]\n{net}");
            match Config::parse(&text, eth0, true) {
                Ok(c) => {
                    proptest::prop_assert!((MIN_MTU..=9000).contains(&c.nic.mtu));
                    proptest::prop_assert!((1..=16).contains(&c.nic.queues));
                    proptest::prop_assert!(c.nic.children <= 64);
                    proptest::prop_assert!(c.nic.children == 0 || c.nic.queues == 1);
                    if c.share_kernel_address {
                        proptest::prop_assert!(matches!(c.nic.device, Device::Xdp(_)));
                        proptest::prop_assert_eq!(c.address, (Ipv4Addr::new(192, 168, 1, 7), 24));
                    }
                }
                Err(e) => {
                    proptest::prop_assert!(!e.field.is_empty() && !e.fix.is_empty(), "{}", e);
                }
            }
        }
    }

    #[test]
    fn on_error_survives_a_bad_file() {
        assert_eq!(
            on_error_of("on_error = \"kernel\"\n[nic]\n"),
            OnError::Kernel
        );
        assert_eq!(on_error_of("[nic\n"), OnError::Exit);
        assert_eq!(on_error_of(""), OnError::Exit);
    }
}
