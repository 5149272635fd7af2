//! One VNI toward several remote VTEPs: `transmit_to` picks the remote, the
//! receive side reports each frame's outer source, unknown sources are refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, SwitchConfig};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::bridge::Overlay;
use linerate_tunnel::{
    Encap, Gateway, NextHop, Tunnel, TunnelCounter, TunnelNic, VniConfig, VtepConfig,
};
use std::net::IpAddr;

const MACS: [[u8; 6]; 4] = [
    [2, 0, 0, 0, 0x20, 1],
    [2, 0, 0, 0, 0x20, 2],
    [2, 0, 0, 0, 0x20, 3],
    [2, 0, 0, 0, 0x20, 4],
];

fn ip(i: usize) -> IpAddr {
    IpAddr::from([192, 0, 2, 10 + i as u8])
}

fn inner(tag: u8) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 1, tag, 2, 0, 0, 0, 2, tag, 0x88, 0xb5];
    f.resize(80, tag);
    f
}

/// VTEP 0 reaches 1 and 2; 1, 2 and 3 each reach 0; all on one switch.
fn setup(encap: Encap) -> Vec<TunnelNic> {
    let (_sw, ports) = memory::switch(SwitchConfig::new(4, NicCaps::plain()));
    ports
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let vni = if i == 0 {
                VniConfig {
                    next_hop: NextHop::Resolve(ip(1)),
                    remotes: vec![ip(2)],
                    ..VniConfig::new(42, ip(1))
                }
            } else {
                VniConfig::new(42, ip(0))
            };
            Tunnel::new(p, VtepConfig::new(encap.clone(), MACS[i], ip(i)), vni).unwrap()
        })
        .collect()
}

/// Polls every NIC until `n` receives `want` frames (ARP resolves meanwhile).
fn drain(nics: &mut [TunnelNic], n: usize) -> Vec<(IpAddr, Frame)> {
    let mut got = Vec::new();
    for _ in 0..50 {
        for (i, t) in nics.iter_mut().enumerate() {
            if i == n {
                Overlay::receive(t, &mut got, 64).unwrap();
            } else {
                let mut b = Batch::new();
                let _ = Nic::receive(t, 0, &mut b, 64);
                assert!(b.is_empty(), "nic {i} got a frame");
            }
            let _ = Nic::transmit(t, 0, &mut Batch::new());
        }
    }
    got
}

#[test]
fn transmit_to_each_remote_and_sources_reported() {
    for encap in [Encap::Vxlan, Encap::Nvgre] {
        let mut nics = setup(encap);
        // 0 -> 2 (a remote of `remotes`, resolved by its own ARP).
        let mut b: Batch = [Frame::plain(nics[0].pool().alloc_from(&inner(2)))]
            .into_iter()
            .collect();
        assert_eq!(nics[0].transmit_to(0, ip(2), &mut b).unwrap(), 1);
        // 2 must get it; 1 and 3 nothing.
        let mut got2 = Batch::new();
        for _ in 0..50 {
            for t in nics.iter_mut() {
                let _ = Nic::transmit(t, 0, &mut Batch::new());
            }
            for (i, t) in nics.iter_mut().enumerate() {
                let mut b = Batch::new();
                let _ = Nic::receive(t, 0, &mut b, 64);
                if i == 2 {
                    got2.extend(b.drain(..));
                } else {
                    assert!(b.is_empty(), "nic {i} got a frame for 2");
                }
            }
        }
        assert_eq!(got2.len(), 1);
        assert_eq!(got2.first().unwrap().bytes(), &inner(2)[..]);
        // 1 and 2 send to 0: 0 reports each source; 3 is refused.
        for k in [1, 2, 3] {
            let mut b: Batch = [Frame::plain(nics[k].pool().alloc_from(&inner(k as u8)))]
                .into_iter()
                .collect();
            Nic::transmit(&mut nics[k], 0, &mut b).unwrap();
        }
        let mut got = drain(&mut nics, 0);
        got.sort_by_key(|(s, _)| *s);
        let seen: Vec<(IpAddr, Vec<u8>)> =
            got.iter().map(|(s, f)| (*s, f.bytes().to_vec())).collect();
        assert_eq!(seen, vec![(ip(1), inner(1)), (ip(2), inner(2))]);
        assert_eq!(nics[0].tunnel_counters().get(TunnelCounter::RxSource), 1);
        // An address the VNI does not know: dropped, counted.
        let mut b: Batch = [Frame::plain(nics[0].pool().alloc_from(&inner(9)))]
            .into_iter()
            .collect();
        assert_eq!(nics[0].transmit_to(0, ip(3), &mut b).unwrap(), 1);
        assert_eq!(
            nics[0]
                .tunnel_counters()
                .get(TunnelCounter::TxUnknownRemote),
            1
        );
    }
}

#[test]
fn outer_header_patched_per_remote_and_gateway_used_off_prefix() {
    let (a, mut raw) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let far = IpAddr::from([198, 51, 100, 7]);

    let vni = VniConfig {
        remotes: vec![ip(2), far],
        gateway: Some(Gateway {
            ip: ip(9),
            prefix: 24,
        }),
        next_hop: NextHop::Static(MACS[1]),
        ..VniConfig::new(7, ip(1))
    };
    // A static next hop gives every remote that MAC.
    let mut t = Tunnel::new(
        a,
        VtepConfig::new(Encap::Vxlan, MACS[0], ip(0)),
        vni.clone(),
    )
    .unwrap();
    for dst in [ip(1), ip(2), far] {
        let mut b: Batch = [Frame::plain(t.pool().alloc_from(&inner(1)))]
            .into_iter()
            .collect();
        t.transmit_to(0, dst, &mut b).unwrap();
        let mut r = Batch::new();
        raw.receive(0, &mut r, 8).unwrap();
        let f = r.first().unwrap();
        let (eth, rest) = etherparse::Ethernet2Header::from_slice(f.bytes()).unwrap();
        assert_eq!(eth.destination, MACS[1]);
        let (h, _) = etherparse::Ipv4Header::from_slice(rest).unwrap();
        assert_eq!(IpAddr::from(h.destination), dst);
        assert_eq!(h.header_checksum, h.calc_header_checksum());
    }
    // Resolved: the far remote's ARP asks for the gateway, the near one's for itself.
    let (a, mut raw) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let vni = VniConfig {
        next_hop: NextHop::Resolve(ip(1)),
        ..vni
    };
    let mut t = Tunnel::new(a, VtepConfig::new(Encap::Vxlan, MACS[0], ip(0)), vni).unwrap();
    for (dst, asked) in [(far, ip(9)), (ip(2), ip(2))] {
        let mut b: Batch = [Frame::plain(t.pool().alloc_from(&inner(1)))]
            .into_iter()
            .collect();
        t.transmit_to(0, dst, &mut b).unwrap();
        let mut r = Batch::new();
        raw.receive(0, &mut r, 8).unwrap();
        let f = r.first().unwrap();
        let arp = etherparse::ArpPacketSlice::from_slice(&f.bytes()[14..]).unwrap();
        assert_eq!(
            arp.target_protocol_addr(),
            &match asked {
                IpAddr::V4(v) => v.octets(),
                IpAddr::V6(_) => unreachable!(),
            }[..]
        );
    }
}
