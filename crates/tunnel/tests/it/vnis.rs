//! Several VNIs over one underlay: random traffic on each never reaches
//! another, whichever VNI's receive call drains the underlay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{MAC_A, MAC_B, kinds, static_vni};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::{Tunnel, TunnelCounter, VtepConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use proptest::prelude::*;
use std::net::IpAddr;

const VNIS: [u32; 4] = [1, 2, 0xabcdef, 4096];

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn traffic_never_crosses_vnis(
        kind in 0usize..3,
        v6 in any::<bool>(),
        sends in proptest::collection::vec((0usize..4, 1usize..600), 1..80),
        order in proptest::collection::vec(0usize..4, 1..12),
    ) {
        let encap = kinds()[kind].clone();
        let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        let (la, lb): (IpAddr, IpAddr) = if v6 {
            ("2001:db8::a".parse().unwrap(), "2001:db8::b".parse().unwrap())
        } else {
            ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap())
        };
        let mut va = VtepConfig::new(encap.clone(), MAC_A, la);
        va.ipv6_zero_csum = false;
        let vb = VtepConfig::new(encap, MAC_B, lb);
        let mut tx = Tunnel::many(a, va, VNIS.iter().map(|&v| static_vni(v, lb, MAC_B)).collect()).unwrap();
        let mut rx = Tunnel::many(b, vb, VNIS.iter().map(|&v| static_vni(v, la, MAC_A)).collect()).unwrap();
        let mut sent = [0usize; 4];
        let mut batch = Batch::new();
        for (seq, &(i, len)) in sends.iter().enumerate() {
            // The payload says which VNI and which frame it is.
            let mut payload = vec![i as u8; len];
            payload[0] = i as u8;
            let f = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(seq as u16, 9)).build(&payload);
            batch.push(Frame::plain(tx[i].pool().alloc_from(&f)));
            prop_assert_eq!(tx[i].transmit(0, &mut batch).unwrap(), 1);
            sent[i] += 1;
        }
        let mut got = [0usize; 4];
        // Receive in a random order of VNIs, then every VNI until nothing is left.
        for &i in order.iter().chain(&[0, 1, 2, 3, 0, 1, 2, 3]) {
            let mut out = Batch::new();
            let max = if order.len() % 2 == 0 { 3 } else { 64 };
            while rx[i].receive(0, &mut out, max).unwrap() > 0 {}
            for f in out.iter() {
                let b = f.bytes();
                prop_assert!(b.len() > 42);
                prop_assert_eq!(usize::from(b[42]), i, "frame of VNI index {} delivered on {}", b[42], i);
                got[i] += 1;
            }
        }
        prop_assert_eq!(got, sent);
        prop_assert_eq!(rx[0].vtep_counters().get(TunnelCounter::RxUnknownVni), 0);
    }
}

/// A frame of VNI 2 pulled by VNI 1's receive wakes whoever waits on VNI 2.
#[test]
fn routing_to_another_vni_wakes_it() {
    let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let (la, lb): (IpAddr, IpAddr) = ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap());
    let vnis = |remote, mac| vec![static_vni(1, remote, mac), static_vni(2, remote, mac)];
    let mut tx = Tunnel::many(
        a,
        VtepConfig::new(kinds()[0].clone(), MAC_A, la),
        vnis(lb, MAC_B),
    )
    .unwrap();
    let mut rx = Tunnel::many(
        b,
        VtepConfig::new(kinds()[0].clone(), MAC_B, lb),
        vnis(la, MAC_A),
    )
    .unwrap();
    let f =
        FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(1, 2)).build(b"for vni 2");
    let mut batch = Batch::new();
    batch.push(Frame::plain(tx[1].pool().alloc_from(&f)));
    tx[1].transmit(0, &mut batch).unwrap();
    let ready = rx[1].readiness(0).unwrap();
    // Drain the memory port's own notification first.
    let _ = ready.wait(std::time::Duration::ZERO);
    assert_eq!(rx[0].receive(0, &mut batch, 64).unwrap(), 0);
    assert!(
        ready.wait(std::time::Duration::ZERO).unwrap(),
        "VNI 2 woken"
    );
    assert_eq!(rx[1].receive(0, &mut batch, 64).unwrap(), 1);
    assert_eq!(batch[0].bytes(), &f[..]);
}
