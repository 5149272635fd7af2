//! A running `Vtep` changed between rounds (`Vtep::apply`), checked by where
//! frames go: three VTEPs on a memory switch, VNI 100 (VXLAN) and 200
//! (GENEVE), one memory port per VNI per VTEP to start with.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, SwitchConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::bridge::Dest;
use linerate_tunnel::vtep::config::{EncapSpec, VniSpec, parse};
use linerate_tunnel::vtep::diff::{diff, tunnels};
use linerate_tunnel::vtep::{Edit, EditError, Vtep};
use std::net::IpAddr;
use std::time::Duration;

const N: usize = 3;

fn ip(v: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, 1 + v as u8])
}

fn flood(v: usize) -> String {
    (0..N)
        .filter(|&o| o != v)
        .map(|o| format!("\"{}\"", ip(o)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn config(v: usize) -> String {
    format!(
        r#"
        [underlay]
        tap = "ul{v}"
        address = "{}/24"
        [[vni]]
        id = 100
        encap = "vxlan"
        flood = [{f}]
        ports = ["a{v}"]
        [[vni]]
        id = 200
        encap = "geneve"
        flood = [{f}]
        ports = ["b{v}"]
        "#,
        ip(v),
        f = flood(v)
    )
}

/// A host behind a VTEP's port: the VNI and the port's name.
struct Host {
    vni: u32,
    name: String,
    nic: MemNic,
}

struct Net {
    vteps: Vec<Vtep>,
    hosts: Vec<Vec<Host>>,
    now: Duration,
}

fn net() -> Net {
    let (_sw, ports) = memory::switch(SwitchConfig::new(N, NicCaps::plain()));
    let mut vteps = Vec::new();
    let mut hosts = Vec::new();
    for (v, under) in ports.into_iter().enumerate() {
        let cfg = parse(&config(v)).unwrap();
        let mut hs = Vec::new();
        let mut ps: Vec<Vec<Box<dyn Nic>>> = Vec::new();
        for (vni, name) in [(100, format!("a{v}")), (200, format!("b{v}"))] {
            let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
            hs.push(Host { vni, name, nic: h });
            ps.push(vec![Box::new(p)]);
        }
        vteps.push(Vtep::new(&cfg, Box::new(under), ps).unwrap());
        hosts.push(hs);
    }
    Net {
        vteps,
        hosts,
        now: Duration::ZERO,
    }
}

fn mac(n: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, n]
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0xa5);
    f
}

impl Net {
    fn host(&mut self, v: usize, name: &str) -> &mut Host {
        self.hosts[v].iter_mut().find(|h| h.name == name).unwrap()
    }

    fn send(&mut self, v: usize, name: &str, f: &[u8]) {
        let h = &mut self.host(v, name).nic;
        let mut b: Batch = [Frame::plain(h.pool().alloc_from(f))].into_iter().collect();
        h.transmit(0, &mut b).unwrap();
    }

    /// Polls every VTEP a few rounds; returns which hosts got a frame with
    /// sequence number `seq`, as (vtep, port name), sorted.
    fn run(&mut self, seq: u16) -> Vec<(usize, String)> {
        for _ in 0..12 {
            for t in &mut self.vteps {
                t.poll(self.now);
            }
        }
        let mut who = Vec::new();
        for (v, hs) in self.hosts.iter_mut().enumerate() {
            for h in hs {
                let mut b = Batch::new();
                while h.nic.receive(0, &mut b, 256).unwrap() > 0 {}
                for f in b.iter() {
                    if f.bytes().get(14..16) == Some(&seq.to_be_bytes()[..]) {
                        who.push((v, h.name.clone()));
                    }
                }
            }
        }
        who.sort();
        who
    }

    /// Applies `edit` on VTEP `v`; an added port gets a host.
    fn apply(&mut self, v: usize, edit: Edit) -> Result<(), EditError> {
        let port = match &edit {
            Edit::AddPort { vni, name } => {
                let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
                self.hosts[v].push(Host {
                    vni: *vni,
                    name: name.clone(),
                    nic: h,
                });
                Some(Box::new(p) as Box<dyn Nic>)
            }
            _ => None,
        };
        let r = self.vteps[v].apply(&edit, port);
        if r.is_err()
            && let Edit::AddPort { name, .. } = &edit
        {
            self.hosts[v].retain(|h| h.name != *name);
        }
        r
    }

    fn counter(&self, v: usize, name: &str) -> u64 {
        self.vteps[v]
            .counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, x)| x)
    }
}

fn at(v: usize, name: &str) -> (usize, String) {
    (v, name.to_owned())
}

#[test]
fn flood_remotes_and_static_entries_change_where_frames_go() {
    let mut n = net();
    let (a, c) = (mac(0xa), mac(0xc));
    n.send(0, "a0", &frame([0xff; 6], a, 1));
    assert_eq!(n.run(1), vec![at(1, "a1"), at(2, "a2")]);

    // VTEP 2 leaves VNI 100's flood list on VTEP 0: broadcasts skip it, and
    // its frames are refused.
    n.apply(
        0,
        Edit::RemoveFlood {
            vni: 100,
            remote: ip(2),
        },
    )
    .unwrap();
    n.send(0, "a0", &frame([0xff; 6], a, 2));
    assert_eq!(n.run(2), vec![at(1, "a1")]);
    let refused = n.counter(0, "vni100.tunnel.rx_dropped_source");
    n.send(2, "a2", &frame([0xff; 6], c, 3));
    assert_eq!(n.run(3), vec![at(1, "a1")], "VTEP 0 refused VTEP 2's flood");
    assert_eq!(n.counter(0, "vni100.tunnel.rx_dropped_source"), refused + 1);
    // VNI 200 is untouched.
    n.send(0, "b0", &frame([0xff; 6], a, 4));
    assert_eq!(n.run(4), vec![at(1, "b1"), at(2, "b2")]);

    // A static entry puts c behind VTEP 2: unicast there, and VTEP 2 is a
    // remote of the VNI again (its frames accepted).
    n.apply(
        0,
        Edit::AddStatic {
            vni: 100,
            mac: c,
            remote: ip(2),
        },
    )
    .unwrap();
    n.send(0, "a0", &frame(c, a, 5));
    assert_eq!(n.run(5), vec![at(2, "a2")]);
    n.send(2, "a2", &frame(a, c, 6));
    assert_eq!(n.run(6), vec![at(0, "a0")]);

    // Without it, c is unknown: flooded (to VTEP 1 only, which knows c
    // behind VTEP 2 from its refused broadcast, and drops it: split horizon).
    n.apply(0, Edit::RemoveStatic { vni: 100, mac: c }).unwrap();
    let flooded = n.counter(0, "vni100.a0.flooded");
    let horizon = n.counter(1, "vni100.vxlan.rx_dropped_split_horizon");
    n.send(0, "a0", &frame(c, a, 7));
    assert_eq!(n.run(7), vec![]);
    assert_eq!(n.counter(0, "vni100.a0.flooded"), flooded + 1);
    assert_eq!(
        n.counter(1, "vni100.vxlan.rx_dropped_split_horizon"),
        horizon + 1
    );
    assert!(
        n.vteps[0]
            .dump(n.now)
            .iter()
            .all(|r| r.dest != Dest::Remote(ip(2)) || r.vni != 100),
        "nothing of VNI 100 is left behind VTEP 2"
    );

    // The last remote stays.
    let e = n.apply(
        0,
        Edit::RemoveFlood {
            vni: 100,
            remote: ip(1),
        },
    );
    assert!(
        matches!(e, Err(EditError::LastRemote { vni: 100 })),
        "{e:?}"
    );
    let e = n.apply(0, Edit::RemoveStatic { vni: 100, mac: c });
    assert!(matches!(e, Err(EditError::NotFound { .. })), "{e:?}");

    // Back in the flood list: broadcasts reach it again.
    n.apply(
        0,
        Edit::AddFlood {
            vni: 100,
            remote: ip(2),
        },
    )
    .unwrap();
    n.send(0, "a0", &frame([0xff; 6], a, 8));
    assert_eq!(n.run(8), vec![at(1, "a1"), at(2, "a2")]);
    let cfg = n.vteps[0].config();
    assert_eq!(cfg.vnis[0].flood, vec![ip(1), ip(2)]);
    assert!(cfg.vnis[0].statics.is_empty());
}

#[test]
fn vnis_and_ports_come_and_go() {
    let mut n = net();
    let base = n.vteps[0].config().vnis[0].clone();
    let spec = |v: usize| VniSpec {
        id: 300,
        flood: vec![ip(1 - v)],
        ports: Vec::new(),
        ..base.clone()
    };
    // VNI 300 between VTEPs 0 and 1, on the VXLAN tunnel.
    let (s0, s1) = (spec(0), spec(1));
    let g = n.vteps[0].generation();
    for (v, s) in [(0, s0.clone()), (1, s1)] {
        n.apply(v, Edit::AddVni(s)).unwrap();
        n.apply(
            v,
            Edit::AddPort {
                vni: 300,
                name: format!("c{v}"),
            },
        )
        .unwrap();
    }
    assert!(
        n.vteps[0].generation() > g,
        "the devices to wait on changed"
    );
    n.send(0, "c0", &frame([0xff; 6], mac(1), 1));
    assert_eq!(n.run(1), vec![at(1, "c1")], "VNI 300 only, VTEP 1 only");
    assert!(matches!(
        n.apply(0, Edit::AddVni(s0.clone())),
        Err(EditError::VniExists(300))
    ));
    // A VNI of an encapsulation no tunnel runs gets a tunnel of its own (a
    // share of the split underlay): NVGRE between VTEPs 0 and 1, beside the
    // running VXLAN and GENEVE.
    for v in [0, 1] {
        let nvgre = VniSpec {
            id: 400,
            encap: EncapSpec::Nvgre,
            ..spec(v)
        };
        n.apply(v, Edit::AddVni(nvgre)).unwrap();
        n.apply(
            v,
            Edit::AddPort {
                vni: 400,
                name: format!("n{v}"),
            },
        )
        .unwrap();
    }
    n.send(0, "n0", &frame([0xff; 6], mac(4), 40));
    assert_eq!(n.run(40), vec![at(1, "n1")], "NVGRE VNI 400 only");
    n.send(1, "n1", &frame(mac(4), mac(5), 41));
    assert_eq!(n.run(41), vec![at(0, "n0")], "and back, learned");
    assert!(n.counter(0, "vni400.tunnel.tx_encap") >= 1);
    n.send(0, "c0", &frame([0xff; 6], mac(1), 42));
    assert_eq!(n.run(42), vec![at(1, "c1")], "VXLAN VNI 300 still runs");
    // VXLAN on GENEVE's running port cannot be told apart from it.
    let clash = VniSpec {
        id: 500,
        encap: EncapSpec::Vxlan { port: 6081 },
        ..s0.clone()
    };
    assert!(matches!(
        n.apply(0, Edit::AddVni(clash)),
        Err(EditError::NoTunnel { vni: 500, .. })
    ));

    // A second port in VNI 100 on VTEP 0 gets floods; x is learned behind it.
    n.apply(
        0,
        Edit::AddPort {
            vni: 100,
            name: "d0".into(),
        },
    )
    .unwrap();
    n.send(1, "a1", &frame([0xff; 6], mac(2), 2));
    assert_eq!(n.run(2), vec![at(0, "a0"), at(0, "d0"), at(2, "a2")]);
    let x = mac(0x11);
    n.send(0, "d0", &frame([0xff; 6], x, 3));
    n.run(3);
    // The first port goes: d0 is port 0 now, and x's entry follows it.
    n.apply(
        0,
        Edit::RemovePort {
            vni: 100,
            name: "a0".into(),
        },
    )
    .unwrap();
    n.hosts[0].retain(|h| h.name != "a0");
    let d = n.vteps[0].dump(n.now);
    assert!(
        d.iter()
            .any(|r| r.vni == 100 && r.mac == x && r.dest == Dest::Local(0)),
        "{d:?}"
    );
    n.send(1, "a1", &frame(x, mac(2), 4));
    assert_eq!(n.run(4), vec![at(0, "d0")]);
    assert_eq!(n.vteps[0].config().vnis[0].ports, vec!["d0".to_owned()]);
    let c = n.counter(0, "vni100.d0.rx_packets");
    assert_eq!(c, 1, "counters under the port's name");

    // Flushed, x is unknown again and VTEP 1 floods it (VTEP 2, which
    // learned x behind VTEP 0, drops its copy: split horizon).
    n.apply(1, Edit::FlushLearned(Some(100))).unwrap();
    assert!(
        n.vteps[1]
            .dump(n.now)
            .iter()
            .all(|r| r.vni != 100 || r.is_static)
    );
    let flooded = n.counter(1, "vni100.a1.flooded");
    n.send(1, "a1", &frame(x, mac(2), 5));
    assert_eq!(n.run(5), vec![at(0, "d0")]);
    assert_eq!(n.counter(1, "vni100.a1.flooded"), flooded + 1);

    // VNI 300 leaves VTEP 1: VTEP 0's frames for it are an unknown VNI there.
    n.apply(1, Edit::RemoveVni(300)).unwrap();
    n.hosts[1].retain(|h| h.vni != 300);
    let before = n.counter(1, "vtep.rx_dropped_unknown_vni");
    n.send(0, "c0", &frame([0xff; 6], mac(1), 6));
    assert_eq!(n.run(6), vec![]);
    assert_eq!(n.counter(1, "vtep.rx_dropped_unknown_vni"), before + 1);
    // And it can come back, on the freed slot.
    n.apply(1, Edit::AddVni(spec(1))).unwrap();
    n.apply(
        1,
        Edit::AddPort {
            vni: 300,
            name: "c1".into(),
        },
    )
    .unwrap();
    n.send(0, "c0", &frame([0xff; 6], mac(1), 7));
    assert_eq!(n.run(7), vec![at(1, "c1")]);
}

/// The edits `diff` finds, applied to a running VTEP, make its running
/// configuration the new one.
#[test]
fn a_diff_applied_makes_the_running_config_the_new_one() {
    let mut n = net();
    let old = parse(&config(0)).unwrap();
    let text = format!(
        r#"
        [underlay]
        tap = "ul0"
        address = "{}/24"
        [[vni]]
        id = 100
        encap = "vxlan"
        flood = ["{}"]
        ports = ["a0", "e0"]
        [[vni.static]]
        mac = "02:00:00:00:00:0c"
        remote = "{}"
        [[vni]]
        id = 300
        encap = "vxlan"
        flood = ["{}"]
        ports = ["f0"]
        "#,
        ip(0),
        ip(1),
        ip(2),
        ip(1)
    );
    let new = parse(&text).unwrap();
    let edits = diff(&old, &new, &tunnels(&old)).unwrap();
    for e in edits {
        n.apply(0, e.clone())
            .unwrap_or_else(|err| panic!("{e}: {err}"));
    }
    assert_eq!(n.vteps[0].config().vnis, new.vnis);
    assert!(
        diff(n.vteps[0].config(), &new, &tunnels(&old))
            .unwrap()
            .is_empty()
    );
    // And traffic follows: a0's broadcast reaches e0 and VTEP 1 only.
    n.send(0, "a0", &frame([0xff; 6], mac(1), 1));
    assert_eq!(n.run(1), vec![at(0, "e0"), at(1, "a1")]);
    n.send(0, "a0", &frame(mac(0xc), mac(1), 2));
    assert_eq!(n.run(2), vec![at(2, "a2")], "the static entry");
}
