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
    /// The TAP interface's name.
    pub tap: String,
    /// Create the interface (true) or attach to an existing one (false).
    pub create: bool,
    /// `IFF_VNET_HDR` with checksum and TSO offloads toward the kernel.
    pub vnet_hdr: bool,
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
    create: Option<bool>,
    vnet_hdr: Option<bool>,
    queues: Option<i64>,
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
    /// Parses and checks `text`.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
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
        let tap = nic.tap.ok_or_else(|| {
            err(
                "nic.tap",
                "missing",
                "name the TAP interface: tap = \"lr0\"",
            )
        })?;
        if tap.is_empty() || tap.len() > 15 || tap.contains(['/', ' ', '%']) {
            return Err(err(
                "nic.tap",
                format!("{tap:?} is not an interface name"),
                "use 1 to 15 characters without '/', ' ' or '%'",
            ));
        }
        let queues = match nic.queues {
            None => 1,
            Some(q) => u16::try_from(q)
                .ok()
                .filter(|q| (1..=16).contains(q))
                .ok_or_else(|| err("nic.queues", format!("{q} queues"), "give 1 to 16"))?,
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
        let mtu = match nic.mtu {
            None => 1500,
            Some(m) => u16::try_from(m)
                .ok()
                .filter(|&m| (MIN_MTU..=9000).contains(&m))
                .ok_or_else(|| {
                    err(
                        "nic.mtu",
                        format!("{m} is not a usable MTU"),
                        "give 576 to 9000 (the interface's MTU, usually 1500)",
                    )
                })?,
        };
        let address = parse_cidr(
            "net.address",
            &net.address.ok_or_else(|| {
                err(
                    "net.address",
                    "missing",
                    "give linerate's address: address = \"10.0.0.2/24\"",
                )
            })?,
        )?;
        if address.0.is_unspecified() || address.0.is_multicast() || address.0.is_broadcast() {
            return Err(err(
                "net.address",
                format!("{} is not a host address", address.0),
                "give a unicast address",
            ));
        }
        let mac = match nic.mac {
            Some(m) => parse_mac("nic.mac", &m)?,
            None => {
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
                tap,
                create: nic.create.unwrap_or(false),
                vnet_hdr: nic.vnet_hdr.unwrap_or(true),
                queues,
                mtu,
                mac,
                busy_poll,
            },
            address,
            gateway,
            address6,
            gateway6,
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
        assert_eq!(c.nic.tap, "lr0");
        assert!(!c.nic.create && c.nic.vnet_hdr);
        assert_eq!((c.nic.queues, c.nic.mtu), (2, 1500));
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
