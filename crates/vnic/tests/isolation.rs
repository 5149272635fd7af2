//! Isolation: random vNICs (MACs, VLAN modes, promiscuous, multicast) and random
//! traffic from the wire and from the vNICs; every frame reaches exactly the vNICs
//! a plain reading of the rules says should take it (a scan over the vNICs, not
//! the partition's hash tables), in the right tag form, and never one of another
//! VLAN.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{drain, from_wire, parse, send, setup, udp_frame};
use linerate_nic::{MemNic, NicCaps};
use linerate_vnic::{SwitchMode, VlanMode, Vnic, VnicConfig};
use proptest::prelude::*;
use std::collections::BTreeSet;

const VIDS: [u16; 3] = [10, 20, 30];
const GROUPS: [[u8; 6]; 2] = [[0x01, 0, 0x5e, 0, 0, 1], [0x33, 0x33, 0, 0, 0, 2]];
const BROADCAST: [u8; 6] = [0xff; 6];

#[derive(Debug, Clone)]
struct Spec {
    mac: u8,
    vlan: VlanMode,
    promisc: bool,
    groups: Vec<usize>,
    all_multi: bool,
}

impl Spec {
    fn mac(&self) -> [u8; 6] {
        [0x02, 0, 0, 0, 0, self.mac]
    }

    /// The LANs it is on (0: untagged).
    fn lans(&self) -> Vec<u16> {
        match &self.vlan {
            VlanMode::Untagged => vec![0],
            VlanMode::Access(v) => vec![*v],
            VlanMode::Trunk { allowed, native } => {
                let mut l = allowed.clone();
                if *native {
                    l.push(0);
                }
                l
            }
        }
    }

    /// Whether it takes a frame for `dst` on `lan` (model).
    fn takes(&self, dst: [u8; 6], lan: u16) -> bool {
        if !self.lans().contains(&lan) {
            return false;
        }
        if dst == BROADCAST {
            return true;
        }
        if dst[0] & 1 == 1 {
            return self.promisc || self.all_multi || self.groups.iter().any(|&g| GROUPS[g] == dst);
        }
        self.promisc || dst == self.mac()
    }
}

fn vlan_mode() -> impl Strategy<Value = VlanMode> {
    prop_oneof![
        Just(VlanMode::Untagged),
        prop::sample::select(VIDS.to_vec()).prop_map(VlanMode::Access),
        (
            prop::sample::subsequence(VIDS.to_vec(), 1..=3),
            any::<bool>()
        )
            .prop_map(|(allowed, native)| VlanMode::Trunk { allowed, native }),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        1u8..8,
        vlan_mode(),
        prop::bool::weighted(0.2),
        prop::sample::subsequence(vec![0usize, 1], 0..=2),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(mac, vlan, promisc, groups, all_multi)| Spec {
            mac,
            vlan,
            promisc,
            groups,
            all_multi,
        })
}

/// A frame: from the wire (None) or from vNIC index `i`; destination choice; tag.
#[derive(Debug, Clone)]
struct Send {
    from: Option<usize>,
    dst: u8,
    tag: Option<u16>,
}

fn sends() -> impl Strategy<Value = Vec<Send>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.5, 0usize..12),
            0u8..12,
            prop::option::of(prop::sample::select(vec![10u16, 20, 30, 40])),
        )
            .prop_map(|(from, dst, tag)| Send { from, dst, tag }),
        1..40,
    )
}

/// Destination `d`: 0..8 unicast MACs (1..8 may be vNICs), 8 broadcast, 9..11 groups.
fn dst_of(d: u8) -> [u8; 6] {
    match d {
        8 => BROADCAST,
        9 | 10 => GROUPS[usize::from(d - 9)],
        11 => [0x01, 0x80, 0xc2, 0, 0, 0x0e],
        m => [0x02, 0, 0, 0, 0, m],
    }
}

fn check(mode: SwitchMode, specs: Vec<Spec>, traffic: Vec<Send>) -> Result<(), TestCaseError> {
    let (part, mut wire, _clock) = setup(mode, NicCaps::plain());
    let mut vnics: Vec<(Spec, Vnic<MemNic>)> = Vec::new();
    for s in specs {
        let cfg = VnicConfig {
            vlan: s.vlan.clone(),
            promiscuous: s.promisc,
            all_multicast: s.all_multi,
            multicast: s.groups.iter().map(|&g| GROUPS[g]).collect(),
            ..VnicConfig::new(s.mac())
        };
        // A MAC already used on one of its LANs is refused; the model agrees.
        let clash = vnics
            .iter()
            .any(|(o, _)| o.mac == s.mac && o.lans().iter().any(|l| s.lans().contains(l)));
        match part.add(cfg) {
            Ok(v) => {
                prop_assert!(!clash, "a clashing MAC was accepted");
                vnics.push((s, v));
            }
            Err(e) => prop_assert!(clash, "refused without a clash: {e}"),
        }
    }
    for (id, t) in traffic.iter().enumerate() {
        let id = id as u32;
        let dst = dst_of(t.dst);
        // Where the frame is and what the model expects.
        let (lan, sender) = match t.from {
            None => {
                let f = udp_frame([0x02, 0, 0, 0, 9, 9], dst, t.tag, id, 20);
                from_wire(&mut wire, &f);
                (t.tag.unwrap_or(0), None)
            }
            Some(i) => {
                let Some((s, v)) = vnics.get_mut(i % 12) else {
                    continue;
                };
                let f = udp_frame(s.mac(), dst, t.tag, id, 20);
                send(v, &f);
                let lan = match (&s.vlan, t.tag) {
                    (VlanMode::Untagged, None) => Some(0),
                    (VlanMode::Access(v), None) => Some(*v),
                    (VlanMode::Trunk { allowed, .. }, Some(x)) if allowed.contains(&x) => Some(x),
                    (VlanMode::Trunk { native: true, .. }, None) => Some(0),
                    _ => None,
                };
                match lan {
                    Some(l) => (l, Some(i % 12)),
                    None => (u16::MAX, Some(i % 12)), // refused: nobody gets it
                }
            }
        };
        let mut want: BTreeSet<usize> = BTreeSet::new();
        let mut want_wire = false;
        if lan != u16::MAX {
            let owner = vnics
                .iter()
                .position(|(s, _)| s.mac() == dst && s.lans().contains(&lan));
            let local = |want: &mut BTreeSet<usize>| {
                for (j, (s, _)) in vnics.iter().enumerate() {
                    if Some(j) != sender && s.takes(dst, lan) {
                        want.insert(j);
                    }
                }
            };
            match (sender, mode) {
                (None, _) => local(&mut want),
                (Some(_), SwitchMode::Veb) => {
                    local(&mut want);
                    want_wire = !(dst[0] & 1 == 0 && owner.is_some_and(|o| Some(o) != sender));
                }
                (Some(_), SwitchMode::Vepa) => want_wire = true,
                (Some(_), SwitchMode::Private) => {
                    want_wire = !(dst[0] & 1 == 0 && owner.is_some_and(|o| Some(o) != sender));
                }
            }
        }
        let mut got = BTreeSet::new();
        for (j, (s, v)) in vnics.iter_mut().enumerate() {
            for f in drain(v) {
                let (vid, fid) = parse(&f);
                prop_assert_eq!(fid, Some(id), "vNIC {} got another frame", j);
                // The tag form: access and untagged vNICs see untagged frames,
                // trunks the tag of the LAN.
                let seen_lan = vid.unwrap_or(0);
                match &s.vlan {
                    VlanMode::Trunk { .. } => prop_assert_eq!(seen_lan, lan),
                    _ => prop_assert_eq!(vid, None),
                }
                prop_assert!(s.lans().contains(&lan), "vNIC {} is not on LAN {}", j, lan);
                prop_assert!(got.insert(j), "vNIC {} got frame {} twice", j, id);
            }
        }
        prop_assert_eq!(&got, &want, "frame {} ({:?}) on LAN {}", id, t, lan);
        let on_wire = drain(&mut wire);
        prop_assert_eq!(
            on_wire.len(),
            usize::from(want_wire),
            "frame {} to the wire",
            id
        );
        if let Some(f) = on_wire.first() {
            let (vid, fid) = parse(f);
            prop_assert_eq!(fid, Some(id));
            prop_assert_eq!(vid.unwrap_or(0), lan, "the wire sees the LAN's tag");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn each_frame_reaches_exactly_its_vnics_veb(
        specs in prop::collection::vec(spec(), 1..10),
        traffic in sends(),
    ) {
        check(SwitchMode::Veb, specs, traffic)?;
    }

    #[test]
    fn each_frame_reaches_exactly_its_vnics_vepa_and_private(
        specs in prop::collection::vec(spec(), 1..10),
        traffic in sends(),
        private in any::<bool>(),
    ) {
        let mode = if private { SwitchMode::Private } else { SwitchMode::Vepa };
        check(mode, specs, traffic)?;
    }
}
