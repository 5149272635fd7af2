//! What changes between two configurations of a running VTEP, as [`Edit`]s
//! its data path applies between batches ([`super::Vtep::apply`]).
//!
//! [`diff`] compares the running configuration with a new one (the file read
//! again on SIGHUP) and returns the edits that turn the one into the other:
//! VNIs (a VNI of a new encapsulation or port with a tunnel of its own),
//! local ports, flood lists, static FDB and neighbour entries added and
//! removed, learning turned on or off. What cannot change while the VTEP runs
//! (the underlay, the FDB's bounds, the control socket and metrics address,
//! a VNI's encapsulation, outer options, suppression and group, a new VNI on
//! a running tunnel's port with other options) refuses the
//! whole new configuration, every such field named with its fix, so the
//! running state is kept whole or changed whole. Like `frr-reload`, the file
//! is the truth: changes made through the control socket and absent from the
//! file are undone.

use super::config::{ConfigProblem, EncapSpec, EndpointConfig, OuterSpec, VniSpec};
use crate::bridge::{Mac, MacFmt};
use std::net::IpAddr;

/// One change to a running VTEP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Adds a VNI with its flood list, static FDB and neighbour entries; its
    /// ports come with [`Edit::AddPort`]s (`spec.ports` is ignored).
    AddVni(VniSpec),
    /// Removes a VNI, with its ports and FDB.
    RemoveVni(u32),
    /// Joins a new local port (a device the caller creates) to a VNI.
    AddPort {
        /// The VNI.
        vni: u32,
        /// The port's name.
        name: String,
    },
    /// Takes a local port out of its VNI (and closes it).
    RemovePort {
        /// The VNI.
        vni: u32,
        /// The port's name.
        name: String,
    },
    /// Adds a remote VTEP to a VNI's flood list.
    AddFlood {
        /// The VNI.
        vni: u32,
        /// The remote VTEP.
        remote: IpAddr,
    },
    /// Removes a remote VTEP from a VNI's flood list.
    RemoveFlood {
        /// The VNI.
        vni: u32,
        /// The remote VTEP.
        remote: IpAddr,
    },
    /// Adds or replaces a static FDB entry: `mac` behind `remote`.
    AddStatic {
        /// The VNI.
        vni: u32,
        /// The inner MAC.
        mac: Mac,
        /// The remote VTEP.
        remote: IpAddr,
    },
    /// Removes a static FDB entry.
    RemoveStatic {
        /// The VNI.
        vni: u32,
        /// The inner MAC.
        mac: Mac,
    },
    /// Adds or replaces a static neighbour (suppression) entry.
    AddNeighbor {
        /// The VNI.
        vni: u32,
        /// The inner IP address.
        ip: IpAddr,
        /// Its MAC.
        mac: Mac,
    },
    /// Removes a static neighbour entry.
    RemoveNeighbor {
        /// The VNI.
        vni: u32,
        /// The inner IP address.
        ip: IpAddr,
    },
    /// Turns a VNI's learning from remote VTEPs and its `l2miss` log on or
    /// off (entries learned already stay until they age or are flushed).
    SetLearning {
        /// The VNI.
        vni: u32,
        /// Learn from remote VTEPs.
        learning: bool,
        /// Log unknown destinations.
        l2miss: bool,
    },
    /// Forgets the learned FDB and neighbour entries of a VNI (of every VNI
    /// with `None`); static ones stay.
    FlushLearned(Option<u32>),
}

impl core::fmt::Display for Edit {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Edit::AddVni(s) => write!(f, "add vni {}", s.id),
            Edit::RemoveVni(v) => write!(f, "remove vni {v}"),
            Edit::AddPort { vni, name } => write!(f, "add port {name} to vni {vni}"),
            Edit::RemovePort { vni, name } => write!(f, "remove port {name} from vni {vni}"),
            Edit::AddFlood { vni, remote } => write!(f, "add flood {remote} to vni {vni}"),
            Edit::RemoveFlood { vni, remote } => {
                write!(f, "remove flood {remote} from vni {vni}")
            }
            Edit::AddStatic { vni, mac, remote } => {
                write!(f, "add fdb {} dst {remote} vni {vni}", MacFmt(*mac))
            }
            Edit::RemoveStatic { vni, mac } => write!(f, "remove fdb {} vni {vni}", MacFmt(*mac)),
            Edit::AddNeighbor { vni, ip, mac } => {
                write!(f, "add neighbor {ip} lladdr {} vni {vni}", MacFmt(*mac))
            }
            Edit::RemoveNeighbor { vni, ip } => write!(f, "remove neighbor {ip} vni {vni}"),
            Edit::SetLearning {
                vni,
                learning,
                l2miss,
            } => {
                let on = |b: &bool| if *b { "on" } else { "off" };
                write!(
                    f,
                    "set vni {vni} learning {} l2miss {}",
                    on(learning),
                    on(l2miss)
                )
            }
            Edit::FlushLearned(Some(v)) => write!(f, "flush learned entries of vni {v}"),
            Edit::FlushLearned(None) => write!(f, "flush learned entries"),
        }
    }
}

/// A tunnel a VTEP runs: an encapsulation and its outer options. A VNI of
/// another encapsulation or UDP port added while the VTEP runs gets a
/// tunnel of its own (a share of the underlay); one on a running tunnel's
/// port must agree with it ([`clashing_tunnel`]).
pub type TunnelSpec = (EncapSpec, OuterSpec);

/// The tunnels the VTEP of `cfg` runs.
pub fn tunnels(cfg: &EndpointConfig) -> Vec<TunnelSpec> {
    let mut out: Vec<TunnelSpec> = Vec::new();
    for v in &cfg.vnis {
        if !out.iter().any(|(e, _)| *e == v.encap) {
            out.push((v.encap.clone(), v.outer.clone()));
        }
    }
    out
}

/// The tunnel among `tunnels` that a VNI of `encap` and `outer` cannot
/// join nor stand beside: one on the same UDP port (or GRE) with another
/// encapsulation or other outer options (frames are told apart by the port
/// alone). `None`: it joins a running tunnel, or gets a new one.
pub fn clashing_tunnel<'a>(
    tunnels: &'a [TunnelSpec],
    encap: &EncapSpec,
    outer: &OuterSpec,
) -> Option<&'a TunnelSpec> {
    let key = |e: &EncapSpec| match e {
        EncapSpec::Vxlan { port } | EncapSpec::Geneve { port, .. } => Some(*port),
        EncapSpec::Nvgre => None,
    };
    tunnels
        .iter()
        .find(|(e, o)| key(e) == key(encap) && (e != encap || o != outer))
}

/// How an encapsulation is written in the config, for messages.
pub fn encap_name(e: &EncapSpec) -> String {
    match e {
        EncapSpec::Vxlan { port } => format!("vxlan on port {port}"),
        EncapSpec::Geneve { port, options } if options.is_empty() => {
            format!("geneve on port {port}")
        }
        EncapSpec::Geneve { port, options } => {
            format!("geneve on port {port} with {} option(s)", options.len())
        }
        EncapSpec::Nvgre => "nvgre".to_owned(),
    }
}

/// Collects the refusals.
struct Refusals(Vec<ConfigProblem>);

impl Refusals {
    /// `field` differs between the running configuration and the new one.
    fn fixed(&mut self, field: String, was: impl core::fmt::Debug, now: impl core::fmt::Debug) {
        self.0.push(ConfigProblem {
            field,
            problem: format!(
                "changed from {was:?} to {now:?}, which cannot change while the VTEP runs"
            ),
            fix: "restore it (the running configuration is kept), or restart the VTEP to change it"
                .to_owned(),
        });
    }

    fn same<T: PartialEq + core::fmt::Debug>(
        &mut self,
        field: impl Into<String>,
        was: &T,
        now: &T,
    ) {
        if was != now {
            self.fixed(field.into(), was, now);
        }
    }
}

/// The edits that turn the running configuration `running` into `new`, for
/// a VTEP running the tunnels `tunnels` ([`tunnels`] of the configuration
/// it started with); or every field that cannot change at run time, named
/// with its fix. Removals come first, so a port or remote may move.
pub fn diff(
    running: &EndpointConfig,
    new: &EndpointConfig,
    tunnels: &[TunnelSpec],
) -> Result<Vec<Edit>, Vec<ConfigProblem>> {
    let mut r = Refusals(Vec::new());
    let (a, b) = (&running.underlay, &new.underlay);
    r.same("underlay.tap / underlay.xdp", &a.device, &b.device);
    r.same(
        "underlay.address",
        &(a.address, a.prefix),
        &(b.address, b.prefix),
    );
    r.same("underlay.gateway", &a.gateway, &b.gateway);
    r.same("underlay.mac", &a.mac, &b.mac);
    r.same(
        "underlay.mtu",
        &(a.mtu_configured, a.mtu),
        &(b.mtu_configured, b.mtu),
    );
    r.same("underlay.queues", &a.queues, &b.queues);
    let (a, b) = (&running.fdb, &new.fdb);
    r.same("fdb.ageing_secs", &a.ageing, &b.ageing);
    r.same("fdb.max_per_vni", &a.max_per_vni, &b.max_per_vni);
    r.same("fdb.max_total", &a.max_total, &b.max_total);
    r.same("control.socket", &running.control, &new.control);
    r.same("metrics.listen", &running.metrics, &new.metrics);
    r.same("tap.io_uring", &running.tap_io_uring, &new.tap_io_uring);

    let mut removes = Vec::new();
    let mut adds = Vec::new();
    for old in &running.vnis {
        if !new.vnis.iter().any(|v| v.id == old.id) {
            removes.push(Edit::RemoveVni(old.id));
        }
    }
    for (i, v) in new.vnis.iter().enumerate() {
        let at = |f: &str| format!("vni[{i}].{f}");
        if v.flood.is_empty() && v.statics.is_empty() && v.group.is_none() {
            r.0.push(ConfigProblem {
                field: at("flood"),
                problem: format!("VNI {} has no remote VTEP", v.id),
                fix: "list a remote VTEP in flood, give a static entry, or a multicast group"
                    .to_owned(),
            });
        }
        let Some(old) = running.vnis.iter().find(|o| o.id == v.id) else {
            if let Some(t) = clashing_tunnel(tunnels, &v.encap, &v.outer) {
                r.0.push(ConfigProblem {
                    field: at("encap"),
                    problem: format!(
                        "the running tunnel {} takes this port with other options",
                        encap_name(&t.0)
                    ),
                    fix: "give the new VNI that tunnel's encapsulation and outer options \
                          (ttl, tos, df, srcport, udpcsum, udp6zerocsum*), or another port"
                        .to_owned(),
                });
            }
            adds.push(Edit::AddVni(VniSpec {
                ports: Vec::new(),
                ..v.clone()
            }));
            adds.extend(v.ports.iter().map(|name| Edit::AddPort {
                vni: v.id,
                name: name.clone(),
            }));
            continue;
        };
        same_vni(&mut r, i, old, v);
        let id = v.id;
        for name in old.ports.iter().filter(|p| !v.ports.contains(p)) {
            removes.push(Edit::RemovePort {
                vni: id,
                name: name.clone(),
            });
        }
        for (mac, _) in old
            .statics
            .iter()
            .filter(|(m, _)| !v.statics.iter().any(|(n, _)| n == m))
        {
            removes.push(Edit::RemoveStatic { vni: id, mac: *mac });
        }
        for (ip, _) in old
            .neighbors
            .iter()
            .filter(|(a, _)| !v.neighbors.iter().any(|(b, _)| b == a))
        {
            removes.push(Edit::RemoveNeighbor { vni: id, ip: *ip });
        }
        for remote in old.flood.iter().filter(|f| !v.flood.contains(f)) {
            removes.push(Edit::RemoveFlood {
                vni: id,
                remote: *remote,
            });
        }
        for remote in v.flood.iter().filter(|f| !old.flood.contains(f)) {
            adds.push(Edit::AddFlood {
                vni: id,
                remote: *remote,
            });
        }
        for &(mac, remote) in v.statics.iter().filter(|s| !old.statics.contains(s)) {
            adds.push(Edit::AddStatic {
                vni: id,
                mac,
                remote,
            });
        }
        for &(ip, mac) in v.neighbors.iter().filter(|n| !old.neighbors.contains(n)) {
            adds.push(Edit::AddNeighbor { vni: id, ip, mac });
        }
        if (old.learning, old.l2miss) != (v.learning, v.l2miss) {
            adds.push(Edit::SetLearning {
                vni: id,
                learning: v.learning,
                l2miss: v.l2miss,
            });
        }
        for name in v.ports.iter().filter(|p| !old.ports.contains(p)) {
            adds.push(Edit::AddPort {
                vni: id,
                name: name.clone(),
            });
        }
    }
    if !r.0.is_empty() {
        return Err(r.0);
    }
    removes.extend(adds);
    Ok(removes)
}

/// Refuses what changed in a VNI that is in both configurations and cannot
/// change while it runs.
fn same_vni(r: &mut Refusals, i: usize, old: &VniSpec, v: &VniSpec) {
    let at = |f: &str| format!("vni[{i}].{f}");
    match (&old.encap, &v.encap) {
        (EncapSpec::Vxlan { port: p }, EncapSpec::Vxlan { port: q }) => r.same(at("port"), p, q),
        (
            EncapSpec::Geneve {
                port: p,
                options: o,
            },
            EncapSpec::Geneve {
                port: q,
                options: n,
            },
        ) => {
            r.same(at("port"), p, q);
            r.same(at("geneve_option"), o, n);
        }
        (EncapSpec::Nvgre, EncapSpec::Nvgre) => {}
        (a, b) => r.fixed(at("encap"), encap_name(a), encap_name(b)),
    }
    let (a, b) = (&old.outer, &v.outer);
    r.same(at("ttl"), &a.ttl, &b.ttl);
    r.same(at("tos"), &a.dscp, &b.dscp);
    r.same(at("df"), &a.df, &b.df);
    r.same(at("srcport"), &a.src_ports, &b.src_ports);
    r.same(at("udpcsum"), &a.udp_csum, &b.udp_csum);
    r.same(at("udp6zerocsumtx"), &a.udp6_zero_csum, &b.udp6_zero_csum);
    r.same(at("suppress_arp"), &old.suppress_arp, &v.suppress_arp);
    r.same(at("group"), &old.group, &v.group);
}

#[cfg(test)]
mod tests;
