//! The control socket's protocol: one JSON object per line each way.
//!
//! A request names its command in `cmd`; a reply names its kind in
//! `reply`. Shows: `fdb` (optionally `"vni": N`), `vnis`, `ports`,
//! `neighbors`, `counters`. Changes: `fdb_add` (`vni`, `mac`, `remote`),
//! `fdb_del` (`vni`, `mac`), `flood_add` / `flood_del` (`vni`, `remote`),
//! `vni_add` (`vni`: a `[[vni]]` table of the config file, as JSON),
//! `vni_del` (`vni`), `port_add` / `port_del` (`vni`, `name`), `flush`
//! (optionally `vni`: forget learned entries), and `reload` (read the config
//! file again, as SIGHUP does).
//!
//! ```text
//! -> {"cmd":"fdb_add","vni":42,"mac":"02:00:00:00:00:01","remote":"10.0.0.1"}
//! <- {"reply":"done","edits":["add fdb 02:00:00:00:00:01 dst 10.0.0.1 vni 42"]}
//! -> {"cmd":"fdb_add","vni":42,"mac":"ff:ff:ff:ff:ff:ff","remote":"10.0.0.1"}
//! <- {"reply":"error","error":{"kind":"invalid","problems":[{"field":"mac",...}]}}
//! ```
//!
//! Every request that cannot be served gets a [`CtlError`] reply: a line
//! that is not JSON or not a request, or a field that breaks a rule, is
//! [`CtlError::Invalid`] with each problem's field, what is wrong and the
//! fix, the same [`ConfigProblem`]s the config file gets ([`parse_request`],
//! [`edits`]); the connection and the server go on. [`answer`] serves a
//! show from one replica of the VTEP, [`merge`] joins the replicas' answers.

use super::config::{
    ConfigProblem, EncapSpec, EndpointConfig, VniTable, check_new_port, check_new_vni, parse_mac,
};
use super::diff::{Edit, TunnelSpec, encap_name};
use super::endpoint::{Sample, Vtep};
use crate::bridge::{Dest, MacFmt};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::Duration;

/// A request, as read from one line.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The FDB (of one VNI), like `bridge fdb show`.
    Fdb {
        /// Only this VNI's entries.
        #[serde(default)]
        vni: Option<u32>,
    },
    /// The running VNIs and what they are configured with.
    Vnis {},
    /// The local ports and their traffic.
    Ports {},
    /// The remote VTEPs with their next hops, and the ARP/ND suppression
    /// tables.
    Neighbors {},
    /// Every counter.
    Counters {},
    /// Adds or replaces a static FDB entry.
    FdbAdd {
        /// The VNI.
        vni: u32,
        /// The inner MAC.
        mac: String,
        /// The remote VTEP it lives behind.
        remote: String,
    },
    /// Removes a static FDB entry.
    FdbDel {
        /// The VNI.
        vni: u32,
        /// The inner MAC.
        mac: String,
    },
    /// Adds a remote VTEP to a VNI's flood list.
    FloodAdd {
        /// The VNI.
        vni: u32,
        /// The remote VTEP.
        remote: String,
    },
    /// Removes a remote VTEP from a VNI's flood list.
    FloodDel {
        /// The VNI.
        vni: u32,
        /// The remote VTEP.
        remote: String,
    },
    /// Adds a VNI.
    VniAdd {
        /// Its `[[vni]]` table.
        vni: VniTable,
    },
    /// Removes a VNI with its ports.
    VniDel {
        /// The VNI.
        vni: u32,
    },
    /// Creates a local port (a TAP) in a VNI.
    PortAdd {
        /// The VNI.
        vni: u32,
        /// The port's device name.
        name: String,
    },
    /// Removes a local port.
    PortDel {
        /// The VNI.
        vni: u32,
        /// The port's device name.
        name: String,
    },
    /// Forgets learned FDB and neighbour entries (of one VNI).
    Flush {
        /// Only this VNI's.
        #[serde(default)]
        vni: Option<u32>,
    },
    /// Reads the config file again and applies the difference (as SIGHUP).
    Reload {},
}

/// Why a request was not served. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CtlError {
    /// The request, or the config file it reloads, breaks these rules.
    Invalid {
        /// Each field, what is wrong, and the fix.
        problems: Vec<ConfigProblem>,
    },
    /// The VTEP refused the change (a table's bound, a tunnel's limit).
    Refused {
        /// Why.
        message: String,
    },
    /// The VTEP could not serve it (a thread did not answer, a device could
    /// not be created).
    Failed {
        /// Why.
        message: String,
    },
}

impl CtlError {
    /// One problem with `field`.
    pub fn field(
        field: impl Into<String>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) -> CtlError {
        CtlError::Invalid {
            problems: vec![ConfigProblem {
                field: field.into(),
                problem: problem.into(),
                fix: fix.into(),
            }],
        }
    }
}

impl core::fmt::Display for CtlError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CtlError::Invalid { problems } => {
                write!(f, "refused:")?;
                for p in problems {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
            CtlError::Refused { message } => write!(f, "refused: {message}"),
            CtlError::Failed { message } => write!(f, "failed: {message}"),
        }
    }
}

impl std::error::Error for CtlError {}

/// One FDB entry as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FdbEntry {
    /// The VNI.
    pub vni: u32,
    /// The MAC (all zero for a flood-list entry).
    pub mac: String,
    /// The local port it lives behind, by name.
    pub port: Option<String>,
    /// The remote VTEP it lives behind.
    pub remote: Option<IpAddr>,
    /// Configured (or a flood-list entry) rather than learned.
    pub permanent: bool,
    /// Seconds since it was last seen (0 when permanent).
    pub age_secs: u64,
}

/// One VNI as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VniInfo {
    /// The VNI.
    pub vni: u32,
    /// Its encapsulation and port.
    pub encap: String,
    /// The overlay MTU its ports have.
    pub mtu: u16,
    /// Its flood list.
    pub flood: Vec<IpAddr>,
    /// Its local ports.
    pub ports: Vec<String>,
    /// Its static FDB entries: MAC and remote VTEP.
    pub statics: Vec<(String, IpAddr)>,
    /// Its static neighbour entries: IP and MAC.
    pub neighbors: Vec<(IpAddr, String)>,
    /// ARP/ND suppression.
    pub suppress_arp: bool,
    /// Learning from remote VTEPs (`learning`).
    #[serde(default = "yes")]
    pub learning: bool,
    /// The log of unknown destinations (`l2miss`).
    #[serde(default)]
    pub l2miss: bool,
    /// The multicast group its floods go to (`group`).
    #[serde(default)]
    pub group: Option<IpAddr>,
}

fn yes() -> bool {
    true
}

/// One local port as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortInfo {
    /// The VNI.
    pub vni: u32,
    /// The device name.
    pub name: String,
    /// Frames received from it.
    pub rx_packets: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// Frames sent to it.
    pub tx_packets: u64,
    /// Their bytes.
    pub tx_bytes: u64,
}

/// One remote VTEP of a VNI as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteInfo {
    /// The VNI.
    pub vni: u32,
    /// The remote VTEP.
    pub remote: IpAddr,
    /// The next hop toward it.
    pub next_hop: Option<IpAddr>,
    /// The next hop's MAC, once resolved.
    pub mac: Option<String>,
}

/// One ARP/ND suppression entry as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeighInfo {
    /// The VNI.
    pub vni: u32,
    /// The inner address.
    pub ip: IpAddr,
    /// Its MAC.
    pub mac: String,
    /// Configured rather than learned.
    pub permanent: bool,
    /// Seconds since it was last seen.
    pub age_secs: u64,
}

/// A reply, written as one line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The FDB.
    Fdb {
        /// Its entries, by VNI and MAC.
        entries: Vec<FdbEntry>,
    },
    /// The VNIs.
    Vnis {
        /// In the running configuration's order.
        vnis: Vec<VniInfo>,
    },
    /// The local ports.
    Ports {
        /// By VNI, in each VNI's order.
        ports: Vec<PortInfo>,
    },
    /// Remote VTEPs and neighbours.
    Neighbors {
        /// Each VNI's remote VTEPs.
        remotes: Vec<RemoteInfo>,
        /// The suppression tables.
        neighbors: Vec<NeighInfo>,
    },
    /// Every counter.
    Counters {
        /// Summed over the queues' threads.
        counters: Vec<Sample>,
    },
    /// A change was applied.
    Done {
        /// What changed, one line per edit (none when nothing had to).
        edits: Vec<String>,
    },
    /// Not served.
    Error {
        /// Why.
        error: CtlError,
    },
}

impl From<CtlError> for Reply {
    fn from(error: CtlError) -> Reply {
        Reply::Error { error }
    }
}

/// What a request asks: a show, or changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Query {
    /// [`Request::Fdb`].
    Fdb(Option<u32>),
    /// [`Request::Vnis`].
    Vnis,
    /// [`Request::Ports`].
    Ports,
    /// [`Request::Neighbors`].
    Neighbors,
    /// [`Request::Counters`].
    Counters,
}

impl Request {
    /// The show it asks for, if it is one.
    pub fn query(&self) -> Option<Query> {
        Some(match self {
            Request::Fdb { vni } => Query::Fdb(*vni),
            Request::Vnis {} => Query::Vnis,
            Request::Ports {} => Query::Ports,
            Request::Neighbors {} => Query::Neighbors,
            Request::Counters {} => Query::Counters,
            _ => return None,
        })
    }
}

/// Longest request line read (a `vni_add` with many entries fits).
pub const MAX_LINE: usize = 64 * 1024;

/// Reads one request line; a line that is not JSON or not a request is
/// [`CtlError::Invalid`] naming the field where reading stopped (`.` for the
/// line as a whole).
pub fn parse_request(line: &str) -> Result<Request, CtlError> {
    const ONE_OBJECT: &str = "send one JSON object per line, e.g. {\"cmd\":\"fdb\"}";
    if line.len() > MAX_LINE {
        return Err(CtlError::field(
            ".",
            format!("{} bytes", line.len()),
            format!("send a request of at most {MAX_LINE} bytes"),
        ));
    }
    let value: serde_json::Value =
        serde_json::from_str(line).map_err(|e| CtlError::field(".", e.to_string(), ONE_OBJECT))?;
    let serde_json::Value::Object(mut fields) = value else {
        return Err(CtlError::field(".", "not a JSON object", ONE_OBJECT));
    };
    let cmd = match fields.remove("cmd") {
        Some(serde_json::Value::String(c)) => c,
        Some(other) => {
            return Err(CtlError::field(
                "cmd",
                format!("{other} is not a command name"),
                COMMANDS,
            ));
        }
        None => {
            return Err(CtlError::field(
                "cmd",
                "no command",
                "name the command in \"cmd\", e.g. {\"cmd\":\"fdb\"}",
            ));
        }
    };
    // Read as the enum's external form, {"fdb_add": {...}}: serde then knows
    // the path to a bad field, without the command in front.
    let mut tagged = serde_json::Map::new();
    tagged.insert(cmd, serde_json::Value::Object(fields));
    let r: Result<Request, _> = serde_path_to_error::deserialize(serde_json::Value::Object(tagged));
    r.map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        let field = match path.split_once('.').filter(|(_, rest)| !rest.is_empty()) {
            Some((_, rest)) => rest.to_owned(),
            None if message.contains("unknown variant") => "cmd".to_owned(),
            None => missing_field(&message).map_or_else(|| ".".to_owned(), str::to_owned),
        };
        let fix = if field == "cmd" {
            COMMANDS
        } else {
            "give the field as the protocol documents it (tunnel_endpoint ctl --help)"
        };
        CtlError::field(field, message, fix)
    })
}

/// The commands, for a refusal's fix.
const COMMANDS: &str = "set cmd to one of: fdb, vnis, ports, neighbors, counters, fdb_add, \
     fdb_del, flood_add, flood_del, vni_add, vni_del, port_add, port_del, flush, reload";

/// The field a serde "missing field `x`" message names.
fn missing_field(message: &str) -> Option<&str> {
    let rest = message.split("missing field `").nth(1)?;
    rest.split('`').next()
}

fn vni_index(running: &EndpointConfig, vni: u32) -> Result<usize, CtlError> {
    running
        .vnis
        .iter()
        .position(|v| v.id == vni)
        .ok_or_else(|| {
            let ids: Vec<String> = running.vnis.iter().map(|v| v.id.to_string()).collect();
            CtlError::field(
                "vni",
                format!("VNI {vni} is not running"),
                format!("use a running VNI ({})", ids.join(", ")),
            )
        })
}

fn mac_field(field: &str, s: &str) -> Result<[u8; 6], CtlError> {
    let Some(mac) = parse_mac(s) else {
        return Err(CtlError::field(
            field,
            format!("{s:?} is not a MAC address"),
            "write six hex bytes separated by colons, e.g. \"02:00:00:00:00:01\"",
        ));
    };
    if mac[0] & 1 == 1 || mac == [0; 6] {
        return Err(CtlError::field(
            field,
            format!("{s} is not a unicast address"),
            "use a unicast MAC (the low bit of the first byte clear, not all zero)",
        ));
    }
    Ok(mac)
}

fn remote_field(running: &EndpointConfig, field: &str, s: &str) -> Result<IpAddr, CtlError> {
    let Ok(ip) = s.parse::<IpAddr>() else {
        return Err(CtlError::field(
            field,
            format!("{s:?} is not an IP address"),
            "write an IPv4 or IPv6 address, e.g. \"10.0.0.1\" or \"2001:db8::1\"",
        ));
    };
    if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
        return Err(CtlError::field(
            field,
            format!("{ip} is not a remote VTEP"),
            "give the unicast underlay address of a remote VTEP",
        ));
    }
    if ip.is_ipv4() != running.underlay.address.is_ipv4() {
        return Err(CtlError::field(
            field,
            format!("{ip} is not of the underlay's address family"),
            format!(
                "use an address of the same family as the underlay's {}",
                running.underlay.address
            ),
        ));
    }
    Ok(ip)
}

fn last_remote(field: &str, vni: u32) -> CtlError {
    CtlError::field(
        field,
        format!("VNI {vni} would have no remote VTEP left"),
        "add another flood entry or static entry first, or remove the VNI",
    )
}

/// The edits a change request makes to a VTEP running `running` with the
/// tunnels `tunnels`, checked against it: a field that breaks a rule is
/// refused by name, before anything changes. `None` for a show or
/// [`Request::Reload`].
pub fn edits(
    req: &Request,
    running: &EndpointConfig,
    tunnels: &[TunnelSpec],
) -> Result<Option<Vec<Edit>>, CtlError> {
    let one = |e: Edit| Ok(Some(vec![e]));
    match req {
        Request::FdbAdd { vni, mac, remote } => {
            vni_index(running, *vni)?;
            let mac = mac_field("mac", mac)?;
            let remote = remote_field(running, "remote", remote)?;
            one(Edit::AddStatic {
                vni: *vni,
                mac,
                remote,
            })
        }
        Request::FdbDel { vni, mac } => {
            let s = running.vnis.get(vni_index(running, *vni)?);
            let mac = mac_field("mac", mac)?;
            let Some(s) = s.filter(|s| s.statics.iter().any(|(m, _)| *m == mac)) else {
                return Err(CtlError::field(
                    "mac",
                    format!("VNI {vni} has no static entry for {}", MacFmt(mac)),
                    "name a static entry `fdb` shows as permanent (learned ones go with `flush`)",
                ));
            };
            if s.flood.is_empty() && s.statics.len() == 1 && s.group.is_none() {
                return Err(last_remote("mac", *vni));
            }
            one(Edit::RemoveStatic { vni: *vni, mac })
        }
        Request::FloodAdd { vni, remote } => {
            vni_index(running, *vni)?;
            let remote = remote_field(running, "remote", remote)?;
            one(Edit::AddFlood { vni: *vni, remote })
        }
        Request::FloodDel { vni, remote } => {
            let s = running.vnis.get(vni_index(running, *vni)?);
            let remote = remote_field(running, "remote", remote)?;
            let Some(s) = s.filter(|s| s.flood.contains(&remote)) else {
                return Err(CtlError::field(
                    "remote",
                    format!("{remote} is not in VNI {vni}'s flood list"),
                    "name a remote `vnis` lists in the VNI's flood list",
                ));
            };
            if s.flood.len() == 1 && s.statics.is_empty() && s.group.is_none() {
                return Err(last_remote("remote", *vni));
            }
            one(Edit::RemoveFlood { vni: *vni, remote })
        }
        Request::VniAdd { vni } => {
            let spec = check_new_vni(running, "vni", vni)
                .map_err(|problems| CtlError::Invalid { problems })?;
            if spec.flood.is_empty() && spec.statics.is_empty() && spec.group.is_none() {
                return Err(CtlError::field(
                    "vni.flood",
                    format!("VNI {} has no remote VTEP", spec.id),
                    "list a remote VTEP in flood, or give a static entry",
                ));
            }
            if let Some(t) = super::diff::clashing_tunnel(tunnels, &spec.encap, &spec.outer) {
                return Err(no_tunnel(&spec.encap, t));
            }
            let mut out = vec![Edit::AddVni(super::config::VniSpec {
                ports: Vec::new(),
                ..spec.clone()
            })];
            out.extend(spec.ports.iter().map(|name| Edit::AddPort {
                vni: spec.id,
                name: name.clone(),
            }));
            Ok(Some(out))
        }
        Request::VniDel { vni } => {
            vni_index(running, *vni)?;
            if running.vnis.len() == 1 {
                return Err(CtlError::field(
                    "vni",
                    format!("VNI {vni} is the only one running"),
                    "add another VNI first, or stop the VTEP",
                ));
            }
            one(Edit::RemoveVni(*vni))
        }
        Request::PortAdd { vni, name } => {
            vni_index(running, *vni)?;
            check_new_port(running, "name", name)
                .map_err(|problems| CtlError::Invalid { problems })?;
            one(Edit::AddPort {
                vni: *vni,
                name: name.clone(),
            })
        }
        Request::PortDel { vni, name } => {
            let s = running.vnis.get(vni_index(running, *vni)?);
            if !s.is_some_and(|s| s.ports.contains(name)) {
                return Err(CtlError::field(
                    "name",
                    format!("VNI {vni} has no port {name:?}"),
                    "name a port `ports` lists for the VNI",
                ));
            }
            one(Edit::RemovePort {
                vni: *vni,
                name: name.clone(),
            })
        }
        Request::Flush { vni } => {
            if let Some(v) = vni {
                vni_index(running, *v)?;
            }
            one(Edit::FlushLearned(*vni))
        }
        _ => Ok(None),
    }
}

fn no_tunnel(encap: &EncapSpec, running: &TunnelSpec) -> CtlError {
    CtlError::field(
        "vni.encap",
        format!(
            "the running tunnel {} takes the port of {} with other options",
            encap_name(&running.0),
            encap_name(encap)
        ),
        "give the VNI that tunnel's encapsulation and outer options (ttl, tos, df, srcport, \
         udpcsum, udp6zerocsum*), or another port",
    )
}

/// One replica's answer to `query` at `now` (its clock).
pub fn answer(query: Query, vtep: &Vtep, now: Duration) -> Reply {
    let cfg = vtep.config();
    match query {
        Query::Fdb(which) => {
            let entries = vtep
                .dump(now)
                .into_iter()
                .filter(|r| which.is_none_or(|v| v == r.vni))
                .map(|r| {
                    let (port, remote) = match r.dest {
                        Dest::Local(p) => (
                            cfg.vnis
                                .iter()
                                .find(|v| v.id == r.vni)
                                .and_then(|v| v.ports.get(usize::from(p)))
                                .cloned()
                                .or_else(|| Some(format!("#{p}"))),
                            None,
                        ),
                        Dest::Remote(ip) => (None, Some(ip)),
                    };
                    FdbEntry {
                        vni: r.vni,
                        mac: MacFmt(r.mac).to_string(),
                        port,
                        remote,
                        permanent: r.is_static,
                        age_secs: r.age.as_secs(),
                    }
                })
                .collect();
            Reply::Fdb { entries }
        }
        Query::Vnis => Reply::Vnis {
            vnis: cfg
                .vnis
                .iter()
                .map(|v| VniInfo {
                    vni: v.id,
                    encap: encap_name(&v.encap),
                    mtu: super::overlay_mtu(cfg, v),
                    flood: v.flood.clone(),
                    ports: v.ports.clone(),
                    statics: v
                        .statics
                        .iter()
                        .map(|(m, r)| (MacFmt(*m).to_string(), *r))
                        .collect(),
                    neighbors: v
                        .neighbors
                        .iter()
                        .map(|(ip, m)| (*ip, MacFmt(*m).to_string()))
                        .collect(),
                    suppress_arp: v.suppress_arp,
                    learning: v.learning,
                    l2miss: v.l2miss,
                    group: v.group,
                })
                .collect(),
        },
        Query::Ports => {
            let samples = vtep.samples();
            let get = |vni: u32, port: &str, name: &str| {
                samples
                    .iter()
                    .find(|s| {
                        s.name == name
                            && matches!(&s.scope, super::Scope::Port { vni: v, port: p }
                                if *v == vni && p == port)
                    })
                    .map_or(0, |s| s.value)
            };
            Reply::Ports {
                ports: cfg
                    .vnis
                    .iter()
                    .flat_map(|v| v.ports.iter().map(move |p| (v.id, p)))
                    .map(|(vni, name)| PortInfo {
                        vni,
                        name: name.clone(),
                        rx_packets: get(vni, name, "rx_packets"),
                        rx_bytes: get(vni, name, "rx_bytes"),
                        tx_packets: get(vni, name, "tx_packets"),
                        tx_bytes: get(vni, name, "tx_bytes"),
                    })
                    .collect(),
            }
        }
        Query::Neighbors => Reply::Neighbors {
            remotes: vtep
                .remotes()
                .into_iter()
                .map(|(vni, r)| RemoteInfo {
                    vni,
                    remote: r.ip,
                    next_hop: r.next_hop,
                    mac: r.mac.map(|m| MacFmt(m).to_string()),
                })
                .collect(),
            neighbors: vtep
                .neighbors(now)
                .into_iter()
                .map(|n| NeighInfo {
                    vni: n.vni,
                    ip: n.ip,
                    mac: MacFmt(n.mac).to_string(),
                    permanent: n.is_static,
                    age_secs: n.age.as_secs(),
                })
                .collect(),
        },
        Query::Counters => Reply::Counters {
            counters: vtep.samples(),
        },
    }
}

/// The replicas' answers to one show as one: counters summed as
/// [`Sample::merge`] does, ports' traffic summed, the rest (copies of one
/// another) from the first.
pub fn merge(mut replies: Vec<Reply>) -> Reply {
    if replies.len() <= 1 {
        return replies.pop().unwrap_or(Reply::Done { edits: Vec::new() });
    }
    let first = replies.remove(0);
    match first {
        Reply::Counters { counters } => {
            let mut all = vec![counters];
            for r in replies {
                if let Reply::Counters { counters } = r {
                    all.push(counters);
                }
            }
            Reply::Counters {
                counters: Sample::merge(&all),
            }
        }
        Reply::Ports { mut ports } => {
            for r in replies {
                let Reply::Ports { ports: more } = r else {
                    continue;
                };
                for m in more {
                    if let Some(p) = ports
                        .iter_mut()
                        .find(|p| p.vni == m.vni && p.name == m.name)
                    {
                        p.rx_packets += m.rx_packets;
                        p.rx_bytes += m.rx_bytes;
                        p.tx_packets += m.tx_packets;
                        p.tx_bytes += m.tx_bytes;
                    }
                }
            }
            Reply::Ports { ports }
        }
        other => other,
    }
}

impl core::fmt::Display for Reply {
    /// As a person reads it: `bridge fdb show`-like lines, one per entry.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Reply::Fdb { entries } => {
                for e in entries {
                    match (&e.port, e.remote) {
                        (Some(p), _) => write!(f, "{} port {p} vni {}", e.mac, e.vni)?,
                        (None, Some(r)) => write!(f, "{} dst {r} vni {}", e.mac, e.vni)?,
                        (None, None) => write!(f, "{} vni {}", e.mac, e.vni)?,
                    }
                    if e.permanent {
                        writeln!(f, " permanent")?;
                    } else {
                        writeln!(f, " used {}", e.age_secs)?;
                    }
                }
                Ok(())
            }
            Reply::Vnis { vnis } => {
                for v in vnis {
                    writeln!(f, "vni {} {} mtu {}", v.vni, v.encap, v.mtu)?;
                    let list = |l: &[IpAddr]| {
                        l.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(" ")
                    };
                    writeln!(f, "  flood {}", list(&v.flood))?;
                    if let Some(g) = v.group {
                        writeln!(f, "  group {g}")?;
                    }
                    writeln!(f, "  ports {}", v.ports.join(" "))?;
                    for (m, r) in &v.statics {
                        writeln!(f, "  static {m} dst {r}")?;
                    }
                    for (ip, m) in &v.neighbors {
                        writeln!(f, "  neighbor {ip} lladdr {m}")?;
                    }
                    if v.suppress_arp {
                        writeln!(f, "  suppress_arp")?;
                    }
                    // As `ip -d link` shows a vxlan device's.
                    if !v.learning {
                        writeln!(f, "  nolearning")?;
                    }
                    if v.l2miss {
                        writeln!(f, "  l2miss")?;
                    }
                }
                Ok(())
            }
            Reply::Ports { ports } => {
                for p in ports {
                    writeln!(
                        f,
                        "{} vni {} rx {} packets {} bytes tx {} packets {} bytes",
                        p.name, p.vni, p.rx_packets, p.rx_bytes, p.tx_packets, p.tx_bytes
                    )?;
                }
                Ok(())
            }
            Reply::Neighbors { remotes, neighbors } => {
                for r in remotes {
                    write!(f, "vni {} remote {}", r.vni, r.remote)?;
                    if let Some(h) = r.next_hop {
                        write!(f, " via {h}")?;
                    }
                    match &r.mac {
                        Some(m) => writeln!(f, " lladdr {m}")?,
                        None => writeln!(f, " unresolved")?,
                    }
                }
                for n in neighbors {
                    write!(f, "vni {} {} lladdr {}", n.vni, n.ip, n.mac)?;
                    if n.permanent {
                        writeln!(f, " permanent")?;
                    } else {
                        writeln!(f, " used {}", n.age_secs)?;
                    }
                }
                Ok(())
            }
            Reply::Counters { counters } => {
                for s in counters {
                    writeln!(f, "{}: {}", s.dotted(), s.value)?;
                }
                Ok(())
            }
            Reply::Done { edits } => {
                if edits.is_empty() {
                    writeln!(f, "nothing to change")?;
                }
                for e in edits {
                    writeln!(f, "{e}")?;
                }
                Ok(())
            }
            Reply::Error { error } => writeln!(f, "{error}"),
        }
    }
}

#[cfg(test)]
mod tests;
