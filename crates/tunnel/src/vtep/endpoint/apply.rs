//! A running [`Vtep`] changed between two rounds of its loop: the [`Edit`]s
//! of [`super::super::diff`] and of the control socket, and what the control
//! socket shows (the running configuration, remote VTEPs, neighbours).
//!
//! Nothing here runs per frame: the caller applies an edit between two
//! calls of [`Vtep::poll`] on the thread that polls (the tunnel endpoint
//! sends edits to each queue's thread as messages), so the forwarding path
//! takes no lock and reads no shared table for them.

use super::{Vtep, VtepError, domain, encap_of, kind_of, tunnel_config, vni_config};
use crate::bridge::{Dest, FdbError, NeighRecord, SuppressError};
use crate::vtep::config::EndpointConfig;
use crate::vtep::config::VniSpec;
use crate::vtep::diff::{Edit, encap_name};
use crate::vtep::split::split_one;
use crate::{RemoteVtep, TunnelConfigError};
use crate::{Tunnel, TunnelNic, VniConfig};
use linerate_nic::Nic;
use std::net::IpAddr;
use std::time::Duration;

/// Why an [`Edit`] was not applied (the VTEP is as it was).
#[derive(Debug)]
#[non_exhaustive]
pub enum EditError {
    /// No such VNI runs.
    UnknownVni(u32),
    /// The VNI runs already.
    VniExists(u32),
    /// The running tunnel of the VNI's encapsulation has other outer
    /// options, or another encapsulation's tunnel takes its port.
    NoTunnel {
        /// The VNI.
        vni: u32,
        /// Its encapsulation, as the config writes it.
        encap: String,
    },
    /// The VNI has no such port, flood entry, static entry or neighbour.
    NotFound {
        /// The VNI.
        vni: u32,
        /// What was not found (`port vm0`, `flood 10.0.0.1`, ...).
        what: String,
    },
    /// The VNI has a port of that name already.
    PortExists {
        /// The VNI.
        vni: u32,
        /// The name.
        name: String,
    },
    /// [`Edit::AddPort`] came without its device.
    NoDevice {
        /// The VNI.
        vni: u32,
        /// The port's name.
        name: String,
    },
    /// The edit would leave the VNI without a remote VTEP.
    LastRemote {
        /// The VNI.
        vni: u32,
    },
    /// A neighbour entry for a VNI without ARP/ND suppression.
    NoSuppression(u32),
    /// The FDB refused it.
    Fdb {
        /// The VNI.
        vni: u32,
        /// Why.
        error: FdbError,
    },
    /// The neighbour table refused it.
    Neighbor {
        /// The VNI.
        vni: u32,
        /// Why.
        error: SuppressError,
    },
    /// The tunnel refused it.
    Tunnel(TunnelConfigError),
    /// Building the VNI's domain failed.
    Vtep(VtepError),
}

impl core::fmt::Display for EditError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EditError::UnknownVni(v) => write!(f, "VNI {v} is not running"),
            EditError::VniExists(v) => write!(f, "VNI {v} is running already"),
            EditError::NoTunnel { vni, encap } => write!(
                f,
                "VNI {vni}: the running tunnel of {encap} has other outer options, or \
                 another encapsulation has its port: use its options, or another port"
            ),
            EditError::NotFound { vni, what } => write!(f, "VNI {vni} has no {what}"),
            EditError::PortExists { vni, name } => {
                write!(f, "VNI {vni} has a port {name} already")
            }
            EditError::NoDevice { vni, name } => {
                write!(f, "VNI {vni}: port {name} came without its device")
            }
            EditError::LastRemote { vni } => write!(
                f,
                "VNI {vni} would have no remote VTEP left: add another first, or remove the VNI"
            ),
            EditError::NoSuppression(v) => write!(
                f,
                "VNI {v} does not suppress ARP/ND, so it keeps no neighbours: \
                 set suppress_arp = true in its config and restart"
            ),
            EditError::Fdb { vni, error } => write!(f, "VNI {vni}: forwarding table: {error}"),
            EditError::Neighbor { vni, error } => write!(f, "VNI {vni}: neighbour table: {error}"),
            EditError::Tunnel(e) => write!(f, "tunnel: {e}"),
            EditError::Vtep(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for EditError {}

impl Vtep {
    /// The running configuration: the one it started with, as edited since.
    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    /// Changes whenever the devices [`Vtep::readiness`] lists change (a VNI
    /// or port added or removed): a loop waiting on them asks again.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The remote VTEPs of every VNI and their next hops.
    pub fn remotes(&self) -> Vec<(u32, RemoteVtep)> {
        self.domains
            .iter()
            .flat_map(|d| {
                let vni = d.overlay().vni().vni;
                d.overlay().remotes().into_iter().map(move |r| (vni, r))
            })
            .collect()
    }

    /// The neighbour (ARP/ND suppression) entries of every VNI that has
    /// suppression on.
    pub fn neighbors(&self, now: Duration) -> Vec<NeighRecord> {
        let mut out = Vec::new();
        for (d, s) in self.domains.iter().zip(&self.cfg.vnis) {
            if let Some(sup) = d.suppress() {
                out.extend(sup.dump(now, s.id));
            }
        }
        out
    }

    fn index(&self, vni: u32) -> Result<usize, EditError> {
        self.cfg
            .vnis
            .iter()
            .position(|v| v.id == vni)
            .ok_or(EditError::UnknownVni(vni))
    }

    /// Applies `edit` (with `port`, the new port's device on this replica's
    /// queue, for [`Edit::AddPort`]); on an error nothing changed.
    pub fn apply(&mut self, edit: &Edit, port: Option<Box<dyn Nic>>) -> Result<(), EditError> {
        match edit {
            Edit::AddVni(spec) => {
                if self.index(spec.id).is_ok() {
                    return Err(EditError::VniExists(spec.id));
                }
                let vc = vni_config(&self.cfg, spec).map_err(EditError::Vtep)?;
                let t = match self.groups.iter().find(|(e, _, _)| *e == spec.encap) {
                    Some((_, outer, _)) if *outer != spec.outer => {
                        return Err(EditError::NoTunnel {
                            vni: spec.id,
                            encap: encap_name(&spec.encap),
                        });
                    }
                    Some((_, _, group)) => group.add_vni(vc).map_err(EditError::Tunnel)?,
                    None => self.add_tunnel(spec, vc)?,
                };
                let mut spec = spec.clone();
                spec.ports.clear();
                let mut d = domain(&self.cfg, &spec, t).map_err(EditError::Vtep)?;
                d.share_learning(self.shared);
                self.domains.push(d);
                self.names.push(Vec::new());
                self.kinds.push(kind_of(&spec.encap));
                self.cfg.vnis.push(spec);
                self.generation += 1;
            }
            Edit::RemoveVni(vni) => {
                let i = self.index(*vni)?;
                // Its ports close and its tunnel NIC leaves the tunnel as they
                // drop.
                self.domains.remove(i);
                self.names.remove(i);
                self.kinds.remove(i);
                self.cfg.vnis.remove(i);
                self.generation += 1;
            }
            Edit::AddPort { vni, name } => {
                let i = self.index(*vni)?;
                if self.names.get(i).is_some_and(|n| n.contains(name)) {
                    return Err(EditError::PortExists {
                        vni: *vni,
                        name: name.clone(),
                    });
                }
                let Some(nic) = port else {
                    return Err(EditError::NoDevice {
                        vni: *vni,
                        name: name.clone(),
                    });
                };
                if let (Some(d), Some(n), Some(s)) = (
                    self.domains.get_mut(i),
                    self.names.get_mut(i),
                    self.cfg.vnis.get_mut(i),
                ) {
                    d.add_port(nic);
                    n.push(name.clone());
                    s.ports.push(name.clone());
                }
                self.generation += 1;
            }
            Edit::RemovePort { vni, name } => {
                let i = self.index(*vni)?;
                let not_found = || EditError::NotFound {
                    vni: *vni,
                    what: format!("port {name}"),
                };
                let n = self
                    .names
                    .get(i)
                    .and_then(|n| n.iter().position(|p| p == name))
                    .ok_or_else(not_found)?;
                let at = u16::try_from(n).map_err(|_| not_found())?;
                if let (Some(d), Some(names), Some(s)) = (
                    self.domains.get_mut(i),
                    self.names.get_mut(i),
                    self.cfg.vnis.get_mut(i),
                ) {
                    d.remove_port(at);
                    names.remove(n);
                    s.ports.retain(|p| p != name);
                }
                self.generation += 1;
            }
            Edit::AddFlood { vni, remote } => {
                let i = self.index(*vni)?;
                let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) else {
                    return Err(EditError::UnknownVni(*vni));
                };
                if s.flood.contains(remote) {
                    return Ok(());
                }
                let added = d
                    .overlay_mut()
                    .add_remote(*remote)
                    .map_err(EditError::Tunnel)?;
                if let Err(error) = d.fdb_mut().add_flood(*vni, *remote) {
                    if added {
                        d.overlay_mut().remove_remote(*remote);
                    }
                    return Err(EditError::Fdb { vni: *vni, error });
                }
                s.flood.push(*remote);
            }
            Edit::RemoveFlood { vni, remote } => {
                let i = self.index(*vni)?;
                let s = self.cfg.vnis.get(i).ok_or(EditError::UnknownVni(*vni))?;
                if !s.flood.contains(remote) {
                    return Err(EditError::NotFound {
                        vni: *vni,
                        what: format!("flood entry {remote}"),
                    });
                }
                if s.flood.len() == 1 && s.statics.is_empty() && s.group.is_none() {
                    return Err(EditError::LastRemote { vni: *vni });
                }
                if let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) {
                    d.fdb_mut().remove_flood(*vni, *remote);
                    s.flood.retain(|r| r != remote);
                }
                self.release(i, *remote);
            }
            Edit::AddStatic { vni, mac, remote } => {
                let i = self.index(*vni)?;
                let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) else {
                    return Err(EditError::UnknownVni(*vni));
                };
                let added = d
                    .overlay_mut()
                    .add_remote(*remote)
                    .map_err(EditError::Tunnel)?;
                if let Err(error) = d.fdb_mut().add_static(*vni, *mac, Dest::Remote(*remote)) {
                    if added {
                        d.overlay_mut().remove_remote(*remote);
                    }
                    return Err(EditError::Fdb { vni: *vni, error });
                }
                let old = s.statics.iter().position(|(m, _)| m == mac);
                let was = old.and_then(|k| s.statics.get(k)).map(|(_, r)| *r);
                match old.and_then(|k| s.statics.get_mut(k)) {
                    Some(e) => e.1 = *remote,
                    None => s.statics.push((*mac, *remote)),
                }
                if let Some(w) = was.filter(|w| w != remote) {
                    self.release(i, w);
                }
            }
            Edit::RemoveStatic { vni, mac } => {
                let i = self.index(*vni)?;
                let s = self.cfg.vnis.get(i).ok_or(EditError::UnknownVni(*vni))?;
                let Some(&(_, remote)) = s.statics.iter().find(|(m, _)| m == mac) else {
                    return Err(EditError::NotFound {
                        vni: *vni,
                        what: format!("static entry {}", crate::bridge::MacFmt(*mac)),
                    });
                };
                if s.flood.is_empty() && s.statics.len() == 1 && s.group.is_none() {
                    return Err(EditError::LastRemote { vni: *vni });
                }
                if let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) {
                    d.fdb_mut().remove(*vni, *mac);
                    s.statics.retain(|(m, _)| m != mac);
                }
                self.release(i, remote);
            }
            Edit::AddNeighbor { vni, ip, mac } => {
                let i = self.index(*vni)?;
                let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) else {
                    return Err(EditError::UnknownVni(*vni));
                };
                let sup = d.suppress_mut().ok_or(EditError::NoSuppression(*vni))?;
                sup.add_static(*vni, *ip, *mac)
                    .map_err(|error| EditError::Neighbor { vni: *vni, error })?;
                match s.neighbors.iter_mut().find(|(a, _)| a == ip) {
                    Some(e) => e.1 = *mac,
                    None => s.neighbors.push((*ip, *mac)),
                }
            }
            Edit::RemoveNeighbor { vni, ip } => {
                let i = self.index(*vni)?;
                let (Some(d), Some(s)) = (self.domains.get_mut(i), self.cfg.vnis.get_mut(i)) else {
                    return Err(EditError::UnknownVni(*vni));
                };
                let sup = d.suppress_mut().ok_or(EditError::NoSuppression(*vni))?;
                if !s.neighbors.iter().any(|(a, _)| a == ip) {
                    return Err(EditError::NotFound {
                        vni: *vni,
                        what: format!("static neighbour {ip}"),
                    });
                }
                sup.remove(*vni, *ip);
                s.neighbors.retain(|(a, _)| a != ip);
            }
            Edit::SetLearning {
                vni,
                learning,
                l2miss,
            } => {
                let i = self.index(*vni)?;
                if let Some(d) = self.domains.get_mut(i) {
                    d.set_learning(*learning, *l2miss);
                }
                if let Some(s) = self.cfg.vnis.get_mut(i) {
                    s.learning = *learning;
                    s.l2miss = *l2miss;
                }
            }
            Edit::FlushLearned(which) => {
                if let Some(v) = which {
                    self.index(*v)?;
                }
                for d in &mut self.domains {
                    let vni = d.overlay().vni().vni;
                    if which.is_some_and(|w| w != vni) {
                        continue;
                    }
                    d.fdb_mut().flush_learned(Some(vni), |_| true);
                    if let Some(s) = d.suppress_mut() {
                        s.flush_learned(Some(vni));
                    }
                }
            }
        }
        Ok(())
    }

    /// Domain `i` no longer names `remote` in its flood list or a static
    /// entry: unless another still does, its tunnel forgets it, and the MACs
    /// learned behind it are forgotten too (its frames are refused from now
    /// on, so they would only go stale).
    /// A tunnel for `spec`'s encapsulation and outer options, added while
    /// the VTEP runs, carrying `vc`; its NIC for the VNI. The underlay is
    /// shared through a split: the one the VTEP has, or one made now from
    /// the first tunnel's underlay (which then gets the split's first port).
    fn add_tunnel(&mut self, spec: &VniSpec, vc: VniConfig) -> Result<TunnelNic, EditError> {
        let refused = || EditError::NoTunnel {
            vni: spec.id,
            encap: encap_name(&spec.encap),
        };
        let key = encap_of(&spec.encap).2;
        let port = match &self.split {
            Some(h) => h.add(key).ok_or_else(refused)?,
            None => {
                let (first, _, group) = self.groups.first().ok_or_else(refused)?;
                let first_key = encap_of(first).2;
                if first_key == key {
                    return Err(refused());
                }
                let mut handle = None;
                group.wrap_underlay(|u| {
                    let (port, h) = split_one(u, first_key);
                    handle = Some(h);
                    Box::new(port)
                });
                let h = handle.ok_or_else(refused)?;
                let port = h.add(key).ok_or_else(refused)?;
                self.split = Some(h);
                port
            }
        };
        let v = tunnel_config(&self.cfg, self.mac, &spec.encap, &spec.outer);
        let mut nics = Tunnel::many(port, v, vec![vc]).map_err(EditError::Tunnel)?;
        let t = nics.pop().ok_or_else(refused)?;
        self.groups
            .push((spec.encap.clone(), spec.outer.clone(), t.group()));
        Ok(t)
    }

    fn release(&mut self, i: usize, remote: IpAddr) {
        let Some(s) = self.cfg.vnis.get(i) else {
            return;
        };
        if s.flood.contains(&remote) || s.statics.iter().any(|(_, r)| *r == remote) {
            return;
        }
        let vni = s.id;
        if let Some(d) = self.domains.get_mut(i) {
            d.overlay_mut().remove_remote(remote);
            d.fdb_mut()
                .flush_learned(Some(vni), |dest| dest == Dest::Remote(remote));
        }
    }
}
