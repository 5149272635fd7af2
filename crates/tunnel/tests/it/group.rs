//! A VNI with an underlay multicast group (`VniConfig::group`, Linux's vxlan
//! `group`): three VTEPs of the group and a raw port on a memory switch
//! (which floods multicast as an Ethernet switch without snooping does).
//! Frames to the group reach every member and are accepted from senders no
//! member was configured with; an answer to a sender goes unicast; frames
//! to another group are not taken; the VTEP's membership reports answer an
//! IGMPv3 query from the raw port, which also sees the join and the leave.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, SwitchConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::bridge::Overlay;
use linerate_tunnel::{Encap, Tunnel, TunnelCounter, TunnelNic, VniConfig, VtepConfig};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

const GROUP: Ipv4Addr = Ipv4Addr::new(239, 5, 5, 5);

fn ip(i: usize) -> IpAddr {
    IpAddr::from([192, 0, 2, 10 + i as u8])
}

fn mac(i: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0x30, i as u8]
}

fn inner(tag: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 1, tag, 2, 0, 0, 0, 2, tag, 0x88, 0xb5];
    f.resize(80, tag);
    f
}

/// VTEPs 0..3 in VNI 5 with the group (VTEP 2 with another group), and
/// the raw port.
fn setup() -> (Vec<TunnelNic>, MemNic) {
    let (_sw, mut ports) = memory::switch(SwitchConfig::new(4, NicCaps::plain()));
    let raw = ports.pop().unwrap();
    let nics = ports
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let g = if i == 2 {
                IpAddr::from([239, 6, 6, 6])
            } else {
                IpAddr::from(GROUP)
            };
            let vni = VniConfig {
                group: Some(g),
                ..VniConfig::new(5, g)
            };
            Tunnel::new(p, VtepConfig::new(Encap::Vxlan, mac(i), ip(i)), vni).unwrap()
        })
        .collect();
    (nics, raw)
}

/// Polls every NIC a few rounds; returns what each received, with sources,
/// and what the raw port got.
fn run(nics: &mut [TunnelNic], raw: &mut MemNic) -> (Vec<Vec<IpAddr>>, Vec<Vec<u8>>) {
    let mut got: Vec<Vec<IpAddr>> = nics.iter().map(|_| Vec::new()).collect();
    let mut seen = Vec::new();
    for _ in 0..20 {
        for (i, t) in nics.iter_mut().enumerate() {
            let mut v = Vec::new();
            Overlay::receive(t, &mut v, 64).unwrap();
            got[i].extend(v.into_iter().map(|(src, _)| src));
        }
        let mut b = Batch::new();
        raw.receive(0, &mut b, 256).unwrap();
        seen.extend(b.iter().map(|f| f.bytes().to_vec()));
    }
    (got, seen)
}

fn send(t: &mut TunnelNic, to: IpAddr, tag: u8) {
    let mut b: Batch = [Frame::plain(t.pool().alloc_from(&inner(tag)))]
        .into_iter()
        .collect();
    Overlay::transmit(t, to, &mut b).unwrap();
}

/// IGMP messages among `frames`: (IPv4 source, IGMP message).
fn igmp(frames: &[Vec<u8>]) -> Vec<(Ipv4Addr, Vec<u8>)> {
    frames
        .iter()
        .filter(|f| f.get(12..14) == Some(&[8, 0][..]) && f.get(23) == Some(&2))
        .map(|f| {
            let ihl = usize::from(f[14] & 0xf) * 4;
            (
                Ipv4Addr::new(f[26], f[27], f[28], f[29]),
                f[14 + ihl..].to_vec(),
            )
        })
        .collect()
}

/// The (record type, group) pairs of the IGMPv3 reports of `from`.
fn records(frames: &[Vec<u8>], from: IpAddr) -> Vec<(u8, Ipv4Addr)> {
    let mut out = Vec::new();
    for (src, m) in igmp(frames) {
        if IpAddr::from(src) != from || m[0] != 0x22 {
            continue;
        }
        assert!(linerate_wire::checksum::verify(&m, 0));
        let n = usize::from(u16::from_be_bytes([m[6], m[7]]));
        let mut at = 8;
        for _ in 0..n {
            out.push((
                m[at],
                Ipv4Addr::new(m[at + 4], m[at + 5], m[at + 6], m[at + 7]),
            ));
            at += 8 + 4 * usize::from(u16::from_be_bytes([m[at + 2], m[at + 3]]));
        }
    }
    out
}

#[test]
fn a_group_carries_floods_and_its_senders_are_answered_unicast() {
    let (mut nics, mut raw) = setup();
    // The joins went out with the first polls: the raw port saw each.
    let (_, seen) = run(&mut nics, &mut raw);
    for i in [0, 1] {
        assert!(
            records(&seen, ip(i)).contains(&(4, GROUP)),
            "VTEP {i} joined {GROUP} (change to exclude)"
        );
    }
    // 1 floods to the group: 0 takes it from 1 (never configured), 2 (in
    // another group) does not.
    send(&mut nics[1], GROUP.into(), 1);
    let (got, _) = run(&mut nics, &mut raw);
    assert_eq!(got[0], vec![ip(1)]);
    assert!(got[1].is_empty() && got[2].is_empty());
    assert!(nics[2].vtep_counters().get(TunnelCounter::RxNotOurs) >= 1);
    // 0 answers 1 unicast: 1 is a remote of 0 from now on.
    send(&mut nics[0], ip(1), 2);
    let (got, _) = run(&mut nics, &mut raw);
    assert_eq!(got[1], vec![ip(0)]);
    assert!(got[0].is_empty() && got[2].is_empty());
    assert!(nics[0].remotes().iter().any(|r| r.ip == ip(1)));
    assert_eq!(
        nics[0]
            .tunnel_counters()
            .get(TunnelCounter::TxUnknownRemote),
        0
    );
}

#[test]
fn an_igmp_query_is_answered_within_its_max_response_time() {
    let (mut nics, mut raw) = setup();
    run(&mut nics, &mut raw);
    // Past the joins' retransmissions.
    std::thread::sleep(Duration::from_millis(1100));
    run(&mut nics, &mut raw);
    // An IGMPv3 general query, Max Resp 0.5 s, from 192.0.2.1.
    let mut q = vec![0x11, 5, 0, 0, 0, 0, 0, 0, 2, 125, 0, 0];
    let c = linerate_wire::checksum::checksum(&q);
    q[2..4].copy_from_slice(&c.to_be_bytes());
    let mut f = vec![0x01, 0x00, 0x5e, 0, 0, 1, 2, 0, 0, 0, 0x30, 0xee, 8, 0];
    let mut iph = [
        0x46, 0xc0, 0, 0, 0, 1, 0x40, 0, 1, 2, 0, 0, 192, 0, 2, 1, 224, 0, 0, 1, 0x94, 4, 0, 0,
    ];
    let total = (iph.len() + q.len()) as u16;
    iph[2..4].copy_from_slice(&total.to_be_bytes());
    let c = linerate_wire::checksum::checksum(&iph);
    iph[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&iph);
    f.extend_from_slice(&q);
    let mut b: Batch = [Frame::plain(raw.pool().alloc_from(&f))]
        .into_iter()
        .collect();
    raw.transmit(0, &mut b).unwrap();
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while t0.elapsed() < Duration::from_millis(900) {
        seen.extend(run(&mut nics, &mut raw).1);
        std::thread::sleep(Duration::from_millis(5));
    }
    for (i, n) in nics.iter().enumerate() {
        assert_eq!(
            n.vtep_counters().get(TunnelCounter::McastQueries),
            1,
            "VTEP {i} heard the query"
        );
    }
    assert_eq!(
        records(&seen, ip(0)),
        vec![(2, GROUP)],
        "current state: IS_EX {{}}"
    );
    assert_eq!(
        records(&seen, ip(2)),
        vec![(2, Ipv4Addr::new(239, 6, 6, 6))]
    );
    // Stopping: the leave (change to include {}).
    assert_eq!(nics[0].leave_groups(), 1);
    let mut b = Batch::new();
    raw.receive(0, &mut b, 256).unwrap();
    let left: Vec<Vec<u8>> = b.iter().map(|f| f.bytes().to_vec()).collect();
    assert!(records(&left, ip(0)).contains(&(3, GROUP)));
}
