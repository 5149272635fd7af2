//! What a running VTEP's control socket adds to its configuration, checked
//! by the rules [`parse`](super::parse) applies to a file: a `[[vni]]` table
//! ([`check_new_vni`]) and a local port's name ([`check_new_port`]), against
//! the running configuration (VNI ids and device names already taken, the
//! underlay's address family, the outer options of a shared tunnel).

use super::{
    Check, ConfigProblem, EndpointConfig, RawVni, UnderlayDevice, VniSpec, check_vni, same_tunnel,
};
use serde::Deserialize;
use std::collections::HashSet;

/// A `[[vni]]` table as the control socket takes it: the file's fields, in
/// JSON (`{"id": 43, "encap": "vxlan", "flood": ["10.0.0.1"]}`).
#[derive(Debug, Clone, Deserialize)]
#[serde(transparent)]
pub struct VniTable(RawVni);

/// Every device name the running configuration uses.
fn names(running: &EndpointConfig) -> HashSet<String> {
    let mut names: HashSet<String> = running
        .vnis
        .iter()
        .flat_map(|v| v.ports.iter().cloned())
        .collect();
    match &running.underlay.device {
        UnderlayDevice::Tap(n) | UnderlayDevice::Xdp(n) => names.insert(n.clone()),
    };
    names
}

/// The VNI of `table`, checked as a file's `[[vni]]` would be and against
/// the running VNIs; its problems name fields under `field` (`vni.flood[0]`).
pub fn check_new_vni(
    running: &EndpointConfig,
    field: &str,
    table: &VniTable,
) -> Result<VniSpec, Vec<ConfigProblem>> {
    let mut c = Check(Vec::new());
    let mut names = names(running);
    let mut ids: HashSet<u32> = running.vnis.iter().map(|v| v.id).collect();
    let family = Some(running.underlay.address.is_ipv4());
    let spec = check_vni(&mut c, field, &table.0, family, &mut names, &mut ids);
    if let Some(s) = &spec
        && let Some(w) = running
            .vnis
            .iter()
            .find(|w| same_tunnel(&w.encap, &s.encap) && w.outer != s.outer)
    {
        c.fail(
            field,
            format!(
                "its outer header options (ttl, tos, df, srcport, udpcsum, udp6zerocsum*) \
                 differ from VNI {}'s, on the same tunnel",
                w.id
            ),
            "give it the options of the VNIs of its encapsulation and port",
        );
    }
    match spec {
        Some(s) if c.0.is_empty() => Ok(s),
        _ => Err(c.0),
    }
}

/// A new local port's `name`, checked as a file's `ports` entry would be
/// and against the device names the running configuration uses.
pub fn check_new_port(
    running: &EndpointConfig,
    field: &str,
    name: &str,
) -> Result<(), Vec<ConfigProblem>> {
    let mut c = Check(Vec::new());
    c.ifname(field, name, &mut names(running));
    if c.0.is_empty() { Ok(()) } else { Err(c.0) }
}
