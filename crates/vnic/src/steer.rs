//! Steering: which vNICs take a frame, by destination MAC and VLAN, in O(1).
//!
//! Every table is keyed by one `u64`: the 48-bit MAC in the low bits and the LAN
//! (a VLAN ID, or [`UNTAGGED`]) above it, hashed with foldhash. A unicast frame
//! costs one lookup (and one more when promiscuous vNICs are on its LAN); a
//! broadcast or multicast one a lookup of its receivers' list. Nothing scans the
//! vNICs.

use linerate_wire::ethernet;
use std::collections::HashMap;

/// The untagged LAN (VLAN ID 0 is a priority tag: untagged as far as membership goes).
pub(crate) const UNTAGGED: u16 = 0;

type Map<V> = HashMap<u64, V, foldhash::fast::FixedState>;

fn map<V>() -> Map<V> {
    HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x6c69_6e65_7261_7465))
}

/// The key of a MAC on a LAN.
#[inline]
pub(crate) fn key(mac: &[u8; 6], lan: u16) -> u64 {
    let [a, b, c, d, e, f] = *mac;
    u64::from_be_bytes([0, 0, a, b, c, d, e, f]) | (u64::from(lan) << 48)
}

/// Whether `mac` is a group (multicast or broadcast) address.
#[inline]
pub(crate) fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 == 1
}

/// The destination, source and LAN of an Ethernet frame (`None`: too short).
#[inline]
pub(crate) fn addresses(frame: &[u8]) -> Option<([u8; 6], [u8; 6], u16, bool)> {
    let dst: [u8; 6] = frame.get(0..6)?.try_into().ok()?;
    let src: [u8; 6] = frame.get(6..12)?.try_into().ok()?;
    let et = u16::from_be_bytes(frame.get(12..14)?.try_into().ok()?);
    if ethernet::is_vlan_tpid(et) {
        let tci = u16::from_be_bytes(frame.get(14..16)?.try_into().ok()?);
        Some((dst, src, tci & 0x0fff, true))
    } else {
        Some((dst, src, UNTAGGED, false))
    }
}

/// Who takes what.
#[derive(Debug)]
pub(crate) struct Table {
    /// (unicast MAC, LAN) -> owner.
    unicast: Map<u16>,
    /// (group MAC, LAN) -> subscribers.
    groups: Map<Vec<u16>>,
    /// LAN -> members (they take broadcasts).
    members: Map<Vec<u16>>,
    /// LAN -> members taking every multicast (all-multicast or promiscuous).
    all_multi: Map<Vec<u16>>,
    /// LAN -> promiscuous members.
    promisc: Map<Vec<u16>>,
    /// (VNI, inner destination MAC) -> vNIC, for tunnelled frames.
    inner: HashMap<(u32, [u8; 6]), u16, foldhash::fast::FixedState>,
}

impl Table {
    pub(crate) fn new() -> Table {
        Table {
            unicast: map(),
            groups: map(),
            members: map(),
            all_multi: map(),
            promisc: map(),
            inner: HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0x7475_6e6e)),
        }
    }

    /// Whether any vNIC is steered by inner headers (else frames are not parsed
    /// past Ethernet).
    pub(crate) fn steers_inner(&self) -> bool {
        !self.inner.is_empty()
    }

    /// The vNIC taking tunnelled frames of `vni` for inner `mac`.
    pub(crate) fn inner_owner(&self, vni: u32, mac: &[u8; 6]) -> Option<u16> {
        self.inner.get(&(vni, *mac)).copied()
    }

    /// Steers tunnelled frames of `vni` for inner `mac` to `slot`; false if taken.
    pub(crate) fn claim_inner(&mut self, vni: u32, mac: &[u8; 6], slot: u16) -> bool {
        if vni > 0x00ff_ffff || self.inner.contains_key(&(vni, *mac)) {
            return false;
        }
        self.inner.insert((vni, *mac), slot);
        true
    }

    /// The owner of a unicast address on a LAN.
    #[inline]
    pub(crate) fn owner(&self, mac: &[u8; 6], lan: u16) -> Option<u16> {
        self.unicast.get(&key(mac, lan)).copied()
    }

    pub(crate) fn claim(&mut self, mac: &[u8; 6], lan: u16, slot: u16) {
        self.unicast.insert(key(mac, lan), slot);
    }

    pub(crate) fn subscribe(&mut self, mac: &[u8; 6], lan: u16, slot: u16) {
        add(&mut self.groups, key(mac, lan), slot);
    }

    pub(crate) fn join(&mut self, lan: u16, slot: u16, all_multi: bool, promisc: bool) {
        let k = u64::from(lan);
        add(&mut self.members, k, slot);
        if all_multi || promisc {
            add(&mut self.all_multi, k, slot);
        }
        if promisc {
            add(&mut self.promisc, k, slot);
        }
    }

    /// Forgets every entry of `slot`.
    pub(crate) fn remove(&mut self, slot: u16) {
        self.unicast.retain(|_, s| *s != slot);
        self.inner.retain(|_, s| *s != slot);
        for m in [
            &mut self.groups,
            &mut self.members,
            &mut self.all_multi,
            &mut self.promisc,
        ] {
            m.retain(|_, v| {
                v.retain(|s| *s != slot);
                !v.is_empty()
            });
        }
    }

    /// Appends to `out` the vNICs that take a frame for `dst` on `lan`, except
    /// `from` (the sender, for frames switched inside). A unicast frame goes to
    /// its owner and the LAN's promiscuous members; a broadcast to every member;
    /// a multicast to its subscribers and the LAN's all-multicast members.
    /// Returns whether the destination is owned (unicast) or a group.
    pub(crate) fn receivers(
        &self,
        dst: &[u8; 6],
        lan: u16,
        from: Option<u16>,
        out: &mut Vec<u16>,
    ) -> bool {
        let start = out.len();
        let lan_key = u64::from(lan);
        let owned = if dst == &ethernet::BROADCAST {
            out.extend(self.members.get(&lan_key).into_iter().flatten());
            true
        } else if is_group(dst) {
            out.extend(self.groups.get(&key(dst, lan)).into_iter().flatten());
            push_new(out, start, self.all_multi.get(&lan_key));
            true
        } else {
            let owner = self.owner(dst, lan);
            out.extend(owner);
            push_new(out, start, self.promisc.get(&lan_key));
            owner.is_some()
        };
        if let Some(f) = from {
            let mut i = start;
            while i < out.len() {
                if out.get(i) == Some(&f) {
                    out.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        owned
    }
}

fn add(m: &mut Map<Vec<u16>>, k: u64, slot: u16) {
    let v = m.entry(k).or_default();
    if !v.contains(&slot) {
        v.push(slot);
    }
}

fn push_new(out: &mut Vec<u16>, start: usize, more: Option<&Vec<u16>>) {
    for &s in more.into_iter().flatten() {
        if !out.get(start..).unwrap_or_default().contains(&s) {
            out.push(s);
        }
    }
}
