//! The `Vtep` over the memory backend: three VTEPs on a memory switch, two VNIs
//! (VXLAN and GENEVE sharing each underlay), one memory port per VNI per VTEP.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, SwitchConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::bridge::{Dest, FdbRecord};
use linerate_tunnel::vtep::config::parse;
use linerate_tunnel::vtep::{Learning, Vtep, overlay_mtu};
use proptest::prelude::*;
use std::net::IpAddr;
use std::time::Duration;

const VNIS: [u32; 2] = [100, 200];
const N: usize = 3;

fn ip(v: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, 1 + v as u8])
}

fn config(v: usize) -> String {
    let flood = |v: usize| {
        (0..N)
            .filter(|&o| o != v)
            .map(|o| format!("\"{}\"", ip(o)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        r#"
        [underlay]
        tap = "ul{v}"
        address = "{}/24"
        [fdb]
        ageing_secs = 10
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

struct Net {
    vteps: Vec<Vtep>,
    /// hosts[vtep][vni index]
    hosts: Vec<Vec<MemNic>>,
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
        for _ in VNIS {
            let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
            hs.push(h);
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

/// A frame from `src` to `dst` whose payload says where it entered.
fn frame(dst: [u8; 6], src: [u8; 6], v: usize, k: usize, seq: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5, v as u8, k as u8]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0xa5);
    f
}

impl Net {
    fn send(&mut self, v: usize, k: usize, f: &[u8]) {
        let h = &mut self.hosts[v][k];
        let mut b: Batch = [Frame::plain(h.pool().alloc_from(f))].into_iter().collect();
        h.transmit(0, &mut b).unwrap();
    }

    /// Polls every VTEP for a few rounds; returns what every host received.
    fn run(&mut self) -> Vec<Vec<Vec<Vec<u8>>>> {
        for _ in 0..12 {
            for t in &mut self.vteps {
                t.poll(self.now);
            }
        }
        self.hosts
            .iter_mut()
            .map(|hs| {
                hs.iter_mut()
                    .map(|h| {
                        let mut b = Batch::new();
                        while h.receive(0, &mut b, 256).unwrap() > 0 {}
                        b.iter().map(|f| f.bytes().to_vec()).collect()
                    })
                    .collect()
            })
            .collect()
    }

    fn dump(&self, v: usize) -> Vec<FdbRecord> {
        self.vteps[v].dump(self.now)
    }
}

fn learned(d: &[FdbRecord], vni: u32, m: [u8; 6]) -> Option<Dest> {
    d.iter()
        .find(|r| r.vni == vni && r.mac == m && !r.is_static)
        .map(|r| r.dest)
}

/// Which hosts got a frame: (vtep, vni index).
fn who(got: &[Vec<Vec<Vec<u8>>>]) -> Vec<(usize, usize)> {
    let mut w = Vec::new();
    for (v, hs) in got.iter().enumerate() {
        for (k, fs) in hs.iter().enumerate() {
            for _ in fs {
                w.push((v, k));
            }
        }
    }
    w
}

#[test]
fn flood_learn_unicast_age_and_move() {
    let mut n = net();
    let (a, b) = (mac(0xa), mac(0xb));
    // Warm the underlay ARP: the first frames may wait for resolution.
    n.send(0, 0, &frame(b, a, 0, 0, 1));
    let got = n.run();
    assert_eq!(who(&got), vec![(1, 0), (2, 0)], "flooded in VNI 100 only");
    assert_eq!(got[1][0][0], frame(b, a, 0, 0, 1));
    assert_eq!(learned(&n.dump(1), 100, a), Some(Dest::Remote(ip(0))));
    assert_eq!(learned(&n.dump(0), 100, a), Some(Dest::Local(0)));
    // The answer is unicast to VTEP 0 only.
    n.send(1, 0, &frame(a, b, 1, 0, 2));
    assert_eq!(who(&n.run()), vec![(0, 0)]);
    assert_eq!(learned(&n.dump(0), 100, b), Some(Dest::Remote(ip(1))));
    // And now a to b is unicast too.
    n.send(0, 0, &frame(b, a, 0, 0, 3));
    assert_eq!(who(&n.run()), vec![(1, 0)]);
    // VNI 200 knows nothing of them: flooded there.
    n.send(0, 1, &frame(b, a, 0, 1, 4));
    assert_eq!(who(&n.run()), vec![(1, 1), (2, 1)]);
    // Ageing in virtual time: past 10 s the entries are gone, a to b floods.
    n.now += Duration::from_secs(11);
    n.run();
    assert_eq!(learned(&n.dump(0), 100, b), None);
    n.send(0, 0, &frame(b, a, 0, 0, 5));
    assert_eq!(who(&n.run()), vec![(1, 0), (2, 0)]);
    // b talks from VTEP 1 again, then moves behind VTEP 0's local port.
    n.send(1, 0, &frame(a, b, 1, 0, 6));
    n.run();
    assert_eq!(learned(&n.dump(0), 100, b), Some(Dest::Remote(ip(1))));
    n.send(0, 0, &frame([0xff; 6], b, 0, 0, 7));
    let got = n.run();
    assert_eq!(who(&got), vec![(1, 0), (2, 0)]);
    assert_eq!(learned(&n.dump(0), 100, b), Some(Dest::Local(0)));
    assert_eq!(learned(&n.dump(1), 100, b), Some(Dest::Remote(ip(0))));
    let c = n.vteps[0].counters();
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    assert_eq!(get("vni100.fdb.fdb_moved"), Some(1));
    assert!(get("vni100.a0.rx_packets").is_some_and(|v| v >= 4));
    assert_eq!(get("vni200.tunnel.rx_dropped_source"), Some(0));
}

/// A replica of VTEP 0 (as the tunnel endpoint runs one per queue, each over
/// its own queue of the same devices): it learns what VTEP 0 learns and sees
/// move, through `take_learned` / `apply_learned`, and nothing without them.
#[test]
fn replicas_share_what_they_learn_and_a_move() {
    let mut n = net();
    n.vteps[0].share_learning(true);
    let (under, mut under_peer) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut hosts = Vec::new();
    let ports: Vec<Vec<Box<dyn Nic>>> = VNIS
        .iter()
        .map(|_| {
            let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
            hosts.push(h);
            vec![Box::new(p) as Box<dyn Nic>]
        })
        .collect();
    let mut replica = Vtep::new(&parse(&config(0)).unwrap(), Box::new(under), ports).unwrap();
    let (a, b) = (mac(0xa), mac(0xb));
    n.send(0, 0, &frame(b, a, 0, 0, 1));
    n.run();
    assert_eq!(learned(&n.dump(0), 100, a), Some(Dest::Local(0)));
    assert_eq!(learned(&replica.dump(n.now), 100, a), None);
    let mut events = Learning::default();
    n.vteps[0].take_learned(&mut events);
    // VTEP 0 resolved VTEPs 1 and 2 on the underlay to flood.
    let mut hops: Vec<IpAddr> = events.neighbors.iter().map(|&(ip, _)| ip).collect();
    hops.sort();
    hops.dedup();
    assert_eq!(hops, vec![ip(1), ip(2)]);
    replica.apply_learned(n.now, &events);
    assert_eq!(learned(&replica.dump(n.now), 100, a), Some(Dest::Local(0)));
    assert_eq!(
        learned(&replica.dump(n.now), 200, a),
        None,
        "VNI 200 learned nothing"
    );
    // a moves behind VTEP 1: VTEP 0 sees it move, the replica follows.
    n.send(1, 0, &frame([0xff; 6], a, 1, 0, 2));
    n.run();
    assert_eq!(learned(&n.dump(0), 100, a), Some(Dest::Remote(ip(1))));
    let mut events = Learning::default();
    n.vteps[0].take_learned(&mut events);
    replica.apply_learned(n.now, &events);
    assert_eq!(
        learned(&replica.dump(n.now), 100, a),
        Some(Dest::Remote(ip(1)))
    );
    // The replica resolved nothing itself, yet sends to VTEP 1's MAC at once:
    // its first underlay frame is the encapsulated one, not an ARP request.
    let f = frame(a, mac(0xc), 0, 0, 9);
    let mut b: Batch = [Frame::plain(hosts[0].pool().alloc_from(&f))]
        .into_iter()
        .collect();
    hosts[0].transmit(0, &mut b).unwrap();
    replica.poll(n.now);
    let mut got = Batch::new();
    under_peer.receive(0, &mut got, 16).unwrap();
    let first = got
        .iter()
        .next()
        .expect("the replica sent nothing")
        .bytes()
        .to_vec();
    let p = etherparse::SlicedPacket::from_ethernet(&first).unwrap();
    assert!(
        matches!(p.net, Some(etherparse::NetSlice::Ipv4(_))),
        "an IPv4 (VXLAN) frame, not ARP: {first:02x?}"
    );
    assert_eq!(got.len(), 1, "unicast to VTEP 1 only");
    // Seen again in the same place: nothing new to share.
    n.send(1, 0, &frame([0xff; 6], a, 1, 0, 3));
    n.run();
    let mut events = Learning::default();
    n.vteps[0].take_learned(&mut events);
    assert!(events.fdb.iter().all(|(_, e)| e.is_empty()), "{events:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]
    #[test]
    fn random_traffic_stays_in_its_vni_and_never_returns(
        sends in proptest::collection::vec((0..N, 0..2usize, 0..6u8, 0..7u8), 1..40)
    ) {
        let mut n = net();
        let mut total = 0usize;
        for (seq, &(v, k, s, d)) in sends.iter().enumerate() {
            // MACs 1..=6; 7 is broadcast.
            let dst = if d == 6 { [0xff; 6] } else { mac(1 + d) };
            n.send(v, k, &frame(dst, mac(1 + s), v, k, seq as u16));
            if seq % 5 == 4 {
                n.now += Duration::from_secs(1);
                for (hv, hs) in n.run().iter().enumerate() {
                    for (hk, fs) in hs.iter().enumerate() {
                        total += fs.len();
                        for f in fs {
                            prop_assert_eq!(usize::from(f[15]), hk, "crossed VNIs");
                            prop_assert!(usize::from(f[14]) != hv, "returned to its ingress");
                        }
                    }
                }
            }
        }
        for (hv, hs) in n.run().iter().enumerate() {
            for (hk, fs) in hs.iter().enumerate() {
                total += fs.len();
                for f in fs {
                    prop_assert_eq!(usize::from(f[15]), hk, "crossed VNIs");
                    prop_assert!(usize::from(f[14]) != hv, "returned to its ingress");
                }
            }
        }
        // The first frame meets an empty FDB: flooded to both other VTEPs,
        // unless it is addressed to its own source (learned on its ingress
        // port at once, so dropped there as Linux's bridge does).
        let (_, _, s0, d0) = sends[0];
        if d0 == 6 || d0 != s0 {
            prop_assert!(total >= 2, "only {} frames delivered", total);
        }
    }
}

/// The overlay MTU the endpoint gives its local ports is what the tunnel
/// reports in its caps: the underlay's (1500) less 50 bytes of VXLAN over IPv4,
/// and less GENEVE's 50 here too (no options configured).
#[test]
fn local_ports_get_the_overlay_mtu_the_tunnel_reports() {
    let cfg = parse(&config(0)).unwrap();
    let n = net();
    for (i, d) in n.vteps[0].domains().iter().enumerate() {
        assert_eq!(overlay_mtu(&cfg, &cfg.vnis[i]), d.overlay().caps().mtu);
    }
    assert_eq!(overlay_mtu(&cfg, &cfg.vnis[0]), 1450);
}
