//! Learning from remote VTEPs on and off (Linux's vxlan `learning` /
//! `nolearning`) and the `l2miss` count, checked by where frames go: three
//! VTEPs on a memory switch, VNI 100 (VXLAN), one memory port each; VTEP 0's
//! `[[vni]]` table varies. What the control socket shows (`fdb`, `vnis`)
//! follows, and a reload that turns learning off applies it. The same
//! single-tunnel VTEPs also get a second tunnel while they run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, SwitchConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::bridge::Dest;
use linerate_tunnel::vtep::config::parse;
use linerate_tunnel::vtep::control::{Query, Reply, answer};
use linerate_tunnel::vtep::diff::{diff, tunnels};
use linerate_tunnel::vtep::{Edit, Vtep};
use std::net::IpAddr;
use std::time::Duration;

const N: usize = 3;

fn ip(v: usize) -> IpAddr {
    IpAddr::from([10, 0, 0, 1 + v as u8])
}

fn mac(n: u8) -> [u8; 6] {
    [2, 0, 0, 0, 0, n]
}

/// VTEP `v`'s file, with `extra` lines in its `[[vni]]` table.
fn config(v: usize, extra: &str) -> String {
    let flood: Vec<String> = (0..N)
        .filter(|&o| o != v)
        .map(|o| format!("\"{}\"", ip(o)))
        .collect();
    format!(
        r#"
        [underlay]
        tap = "ul{v}"
        address = "{}/24"
        [[vni]]
        id = 100
        encap = "vxlan"
        flood = [{}]
        ports = ["a{v}"]
        {extra}
        "#,
        ip(v),
        flood.join(", ")
    )
}

fn frame(dst: [u8; 6], src: [u8; 6], seq: u16) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(64, 0xa5);
    f
}

struct Net {
    vteps: Vec<Vtep>,
    hosts: Vec<MemNic>,
}

/// Three VTEPs; VTEP 0's VNI gets `extra0`.
fn net(extra0: &str) -> Net {
    let (_sw, ports) = memory::switch(SwitchConfig::new(N, NicCaps::plain()));
    let mut vteps = Vec::new();
    let mut hosts = Vec::new();
    for (v, under) in ports.into_iter().enumerate() {
        let cfg = parse(&config(v, if v == 0 { extra0 } else { "" })).unwrap();
        let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        hosts.push(h);
        let ps: Vec<Vec<Box<dyn Nic>>> = vec![vec![Box::new(p)]];
        vteps.push(Vtep::new(&cfg, Box::new(under), ps).unwrap());
    }
    Net { vteps, hosts }
}

impl Net {
    fn send(&mut self, v: usize, f: &[u8]) {
        let h = &mut self.hosts[v];
        let mut b: Batch = [Frame::plain(h.pool().alloc_from(f))].into_iter().collect();
        h.transmit(0, &mut b).unwrap();
    }

    /// Polls a few rounds; returns the VTEPs whose host got frame `seq`.
    fn run(&mut self, seq: u16) -> Vec<usize> {
        for _ in 0..12 {
            for t in &mut self.vteps {
                t.poll(Duration::ZERO);
            }
        }
        let mut who = Vec::new();
        for (v, h) in self.hosts.iter_mut().enumerate() {
            let mut b = Batch::new();
            while h.receive(0, &mut b, 256).unwrap() > 0 {}
            if b.iter()
                .any(|f| f.bytes().get(14..16) == Some(&seq.to_be_bytes()[..]))
            {
                who.push(v);
            }
        }
        who
    }

    fn counter(&self, v: usize, name: &str) -> u64 {
        self.vteps[v]
            .counters()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no counter {name}"))
            .1
    }

    /// Where VTEP 0's FDB has `m`, as the control socket shows it.
    fn shown(&self, m: [u8; 6]) -> Option<(Option<IpAddr>, bool)> {
        let Reply::Fdb { entries } = answer(Query::Fdb(Some(100)), &self.vteps[0], Duration::ZERO)
        else {
            panic!("not an fdb reply");
        };
        let m = linerate_tunnel::bridge::MacFmt(m).to_string();
        entries
            .iter()
            .find(|e| e.mac == m)
            .map(|e| (e.remote, e.permanent))
    }

    /// Host 1 (MAC 1) broadcasts, then host 0 (MAC 0) answers it unicast.
    fn exchange(&mut self) -> Vec<usize> {
        self.send(1, &frame([0xff; 6], mac(1), 1));
        assert_eq!(self.run(1), vec![0, 2], "the broadcast reaches every VTEP");
        self.send(0, &frame(mac(1), mac(0), 2));
        self.run(2)
    }
}

#[test]
fn with_learning_a_remote_mac_is_learned_and_answered_unicast() {
    let mut n = net("");
    assert_eq!(n.exchange(), vec![1], "the answer goes to host 1 only");
    assert_eq!(
        n.vteps[0]
            .dump(Duration::ZERO)
            .iter()
            .find(|r| r.mac == mac(1))
            .map(|r| r.dest),
        Some(Dest::Remote(ip(1)))
    );
    assert_eq!(
        n.shown(mac(1)),
        Some((Some(ip(1)), false)),
        "shown as learned"
    );
    assert_eq!(n.counter(0, "vni100.a0.l2miss"), 0);
    assert_eq!(n.counter(2, "vni100.vxlan.rx_dropped_split_horizon"), 0);
}

#[test]
fn without_learning_a_remote_mac_is_not_learned_and_the_answer_floods() {
    let mut n = net("learning = false\nl2miss = true");
    // Delivered still, and host 1 gets the answer: flooded.
    assert_eq!(n.exchange(), vec![1]);
    assert!(
        n.vteps[0]
            .dump(Duration::ZERO)
            .iter()
            .all(|r| r.mac != mac(1)),
        "no FDB entry for a MAC behind a remote VTEP"
    );
    assert_eq!(n.shown(mac(1)), None, "the control socket shows none");
    // The local MAC is still learned (the ports' side learns).
    assert!(n.shown(mac(0)).is_some());
    // The flood's copy to VTEP 2, which knows MAC 1 is behind VTEP 1 and
    // keeps split horizon: proof the answer was flooded, not sent unicast.
    assert_eq!(n.counter(2, "vni100.vxlan.rx_dropped_split_horizon"), 1);
    assert_eq!(n.counter(0, "vni100.a0.l2miss"), 1);
    assert_eq!(n.counter(0, "vni100.fdb.fdb_learned"), 1, "MAC 0 only");
    let Reply::Vnis { vnis } = answer(Query::Vnis, &n.vteps[0], Duration::ZERO) else {
        panic!("not a vnis reply");
    };
    assert!(!vnis[0].learning && vnis[0].l2miss);
    let text = Reply::Vnis { vnis }.to_string();
    assert!(
        text.contains("  nolearning\n") && text.contains("  l2miss\n"),
        "{text}"
    );
}

#[test]
fn static_entries_still_steer_without_learning() {
    let extra = format!(
        "learning = false\n[[vni.static]]\nmac = \"{}\"\nremote = \"{}\"",
        linerate_tunnel::bridge::MacFmt(mac(1)),
        ip(1)
    );
    let mut n = net(&extra);
    assert_eq!(n.exchange(), vec![1]);
    assert_eq!(
        n.counter(2, "vni100.vxlan.rx_dropped_split_horizon"),
        0,
        "unicast"
    );
    assert_eq!(n.counter(0, "vni100.a0.l2miss"), 0);
}

#[test]
fn a_reload_turns_learning_off() {
    let mut n = net("");
    let running = n.vteps[0].config().clone();
    let new = parse(&config(0, "learning = false")).unwrap();
    let edits = diff(&running, &new, &tunnels(&running)).unwrap();
    assert_eq!(
        edits,
        vec![Edit::SetLearning {
            vni: 100,
            learning: false,
            l2miss: false
        }]
    );
    assert_eq!(edits[0].to_string(), "set vni 100 learning off l2miss off");
    for e in &edits {
        n.vteps[0].apply(e, None).unwrap();
    }
    assert!(!n.vteps[0].config().vnis[0].learning);
    assert_eq!(n.exchange(), vec![1]);
    assert_eq!(n.shown(mac(1)), None);
    assert_eq!(n.counter(2, "vni100.vxlan.rx_dropped_split_horizon"), 1);
}

/// A VTEP with one tunnel gets a second while it runs: its underlay is then
/// split between them (the first tunnel's traffic goes on as before).
#[test]
fn a_tunnel_added_at_run_time_shares_the_underlay() {
    use linerate_tunnel::vtep::config::{EncapSpec, VniSpec};
    let mut n = net("");
    for v in [0, 1] {
        let peer = ip(1 - v);
        let base = n.vteps[v].config().vnis[0].clone();
        let spec = VniSpec {
            id: 600,
            encap: EncapSpec::Geneve {
                port: 6081,
                options: Vec::new(),
            },
            flood: vec![peer],
            ports: Vec::new(),
            ..base
        };
        n.vteps[v].apply(&Edit::AddVni(spec), None).unwrap();
        let (h, p) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        n.vteps[v]
            .apply(
                &Edit::AddPort {
                    vni: 600,
                    name: format!("g{v}"),
                },
                Some(Box::new(p)),
            )
            .unwrap();
        n.hosts.push(h);
    }
    // Hosts 3 and 4 are VTEP 0's and 1's ports in VNI 600.
    let seq = 60u16;
    let f = frame([0xff; 6], mac(6), seq);
    let h = &mut n.hosts[3];
    let mut b: Batch = [Frame::plain(h.pool().alloc_from(&f))]
        .into_iter()
        .collect();
    h.transmit(0, &mut b).unwrap();
    assert_eq!(n.run(seq), vec![4], "GENEVE VNI 600 reaches VTEP 1 only");
    assert!(n.counter(0, "vni600.tunnel.tx_encap") >= 1);
    assert!(n.counter(1, "vni600.tunnel.rx_decap") >= 1);
    // VXLAN VNI 100 on the split underlay, both ways.
    assert_eq!(n.exchange(), vec![1]);
}
