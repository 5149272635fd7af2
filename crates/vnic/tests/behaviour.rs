//! One test per vNIC behaviour: spoof check, VLAN tagging and stripping (with
//! offloads), promiscuous mode, multicast replication, the default vNIC, the
//! embedded switch's three modes, per-vNIC RSS, run-time removal and refused
//! configurations. Frames are built and read with etherparse.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

mod common;

use common::{drain, from_wire, parse, send, setup, udp_frame, udp_frame_ip};
use etherparse::{SlicedPacket, TransportSlice};
use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_nic::{Batch, Counter, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
use linerate_offload::{Gso, GsoType, OffloadMeta};
use linerate_rss::{FlowTuple, HashConfig, IndirectionTable, RssKey, Steering};
use linerate_vnic::filter::FilterError;
use linerate_vnic::{
    Partition, PartitionConfig, RateError, SwitchMode, VlanMode, Vnic, VnicConfig, VnicError,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::net::Ipv4Addr;
use std::sync::Arc;

const A: [u8; 6] = [2, 0, 0, 0, 0, 0xa];
const B: [u8; 6] = [2, 0, 0, 0, 0, 0xb];
const C: [u8; 6] = [2, 0, 0, 0, 0, 0xc];
const OUTSIDE: [u8; 6] = [2, 0, 0, 0, 0, 0xee];

fn total<N: Nic>(n: &N, c: Counter) -> u64 {
    n.counters().total(c)
}

#[test]
fn a_vnic_sends_only_from_its_own_mac_and_ips() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut a = part
        .add(VnicConfig {
            extra_macs: vec![C],
            ips: vec![Ipv4Addr::new(10, 0, 0, 1).into()],
            ..VnicConfig::new(A)
        })
        .unwrap();
    let mut b = part
        .add(VnicConfig {
            spoof_check: false,
            ..VnicConfig::new(B)
        })
        .unwrap();
    // Another vNIC's MAC, an outsider's: dropped, counted, taken from the batch.
    assert_eq!(send(&mut a, &udp_frame(B, OUTSIDE, None, 1, 0)), 1);
    assert_eq!(send(&mut a, &udp_frame(OUTSIDE, OUTSIDE, None, 2, 0)), 1);
    // Its own IP is required too.
    send(&mut a, &udp_frame_ip(A, OUTSIDE, None, [10, 0, 0, 2], 3, 0));
    assert_eq!(total(&a, Counter::TxDroppedSpoof), 3);
    assert!(drain(&mut wire).is_empty());
    // Its own and its extra MAC, from its IP: on the wire.
    send(&mut a, &udp_frame(A, OUTSIDE, None, 4, 0));
    send(&mut a, &udp_frame(C, OUTSIDE, None, 5, 0));
    let ids: Vec<_> = drain(&mut wire).iter().map(|f| parse(f).1).collect();
    assert_eq!(ids, [Some(4), Some(5)]);
    // Spoof check off (SR-IOV `spoofchk off`): anything goes.
    send(&mut b, &udp_frame(OUTSIDE, OUTSIDE, None, 6, 0));
    assert_eq!(drain(&mut wire).len(), 1);
    assert_eq!(total(&b, Counter::TxDroppedSpoof), 0);
}

/// A TCP super-frame of `len` payload bytes with a partial checksum and a GSO
/// request of `mss`, from `src` to `dst`.
fn super_frame(src: [u8; 6], dst: [u8; 6], len: usize, mss: u16) -> (Vec<u8>, OffloadMeta) {
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let mut frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40_000, 80))
        .macs(src, dst)
        .build(&payload);
    let l = linerate_wire::layout::parse(&frame).unwrap();
    let csum = linerate_offload::csum::prepare_partial(&mut frame, &l).unwrap();
    let meta = OffloadMeta {
        csum,
        gso: Some(Gso::new(GsoType::TcpV4, mss)),
        rss: None,
    };
    (frame, meta)
}

fn send_meta<N: Nic>(n: &mut N, frame: &[u8], meta: OffloadMeta) -> usize {
    let mut b = Batch::new();
    b.push(Frame::new(n.pool().alloc_from(frame), meta));
    n.transmit(0, &mut b).unwrap()
}

#[test]
fn an_access_vlan_is_tagged_on_the_wire_and_stripped_for_the_vnic_with_offloads_kept() {
    // The partition over the shim over a plain port: software GSO below the vNIC.
    let clock = Clock::manual();
    let (port, mut wire) = memory::pair(PairConfig {
        clock: clock.clone(),
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    let part = Partition::new(
        Shim::new(port, ShimConfig::all()).unwrap(),
        PartitionConfig {
            clock,
            ..PartitionConfig::default()
        },
    );
    let mut a = part
        .add(VnicConfig {
            vlan: VlanMode::Access(100),
            ..VnicConfig::new(A)
        })
        .unwrap();
    assert!(a.caps().offloads.tso4, "the shim's TSO is the vNIC's");
    // A 20,000-byte super-frame: MTU segments on the wire, each tagged 100, each
    // with a TCP checksum etherparse agrees with.
    let (f, meta) = super_frame(A, OUTSIDE, 20_000, 1448);
    send_meta(&mut a, &f, meta);
    let segs = drain(&mut wire);
    assert_eq!(segs.len(), 20_000usize.div_ceil(1448));
    let mut carried = 0;
    for s in &segs {
        assert!(
            s.len() <= 1518,
            "a tagged segment within the MTU: {}",
            s.len()
        );
        let p = SlicedPacket::from_ethernet(s).unwrap();
        assert_eq!(parse(s).0, Some(100));
        let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
            panic!("IPv4")
        };
        let Some(TransportSlice::Tcp(tcp)) = &p.transport else {
            panic!("TCP")
        };
        let want = tcp
            .to_header()
            .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
            .unwrap();
        assert_eq!(tcp.checksum(), want, "segment checksum");
        carried += tcp.payload().len();
    }
    assert_eq!(carried, 20_000);
    // From the wire: tag 100 for A reaches A untagged; tag 200 and untagged do not.
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, Some(100), 7, 0));
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, Some(200), 8, 0));
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, None, 9, 0));
    let got = drain(&mut a);
    assert_eq!(got.len(), 1);
    assert_eq!(parse(&got[0]), (None, Some(7)));
    assert_eq!(part.counters().total(Counter::RxDroppedNoVnic), 2);
    // A tagged frame from an access vNIC is refused.
    send(&mut a, &udp_frame(A, OUTSIDE, Some(100), 10, 0));
    assert_eq!(total(&a, Counter::TxDroppedVlan), 1);
    assert!(drain(&mut wire).is_empty());
}

#[test]
fn a_trunk_vnic_sees_and_sends_the_tags_of_its_vlans_only() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut t = part
        .add(VnicConfig {
            vlan: VlanMode::Trunk {
                allowed: vec![10, 20],
                native: false,
            },
            ..VnicConfig::new(A)
        })
        .unwrap();
    for (vid, id) in [(Some(10), 1), (Some(20), 2), (Some(30), 3), (None, 4)] {
        from_wire(&mut wire, &udp_frame(OUTSIDE, A, vid, id, 0));
    }
    let got: Vec<_> = drain(&mut t).iter().map(|f| parse(f)).collect();
    assert_eq!(got, [(Some(10), Some(1)), (Some(20), Some(2))]);
    send(&mut t, &udp_frame(A, OUTSIDE, Some(20), 5, 0));
    send(&mut t, &udp_frame(A, OUTSIDE, Some(30), 6, 0));
    send(&mut t, &udp_frame(A, OUTSIDE, None, 7, 0));
    let out: Vec<_> = drain(&mut wire).iter().map(|f| parse(f)).collect();
    assert_eq!(out, [(Some(20), Some(5))]);
    assert_eq!(total(&t, Counter::TxDroppedVlan), 2);
}

#[test]
fn a_promiscuous_vnic_gets_copies_of_its_vlan_only() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut a = part.add(VnicConfig::new(A)).unwrap();
    let mut p = part
        .add(VnicConfig {
            promiscuous: true,
            ..VnicConfig::new(B)
        })
        .unwrap();
    let mut other = part
        .add(VnicConfig {
            vlan: VlanMode::Access(5),
            ..VnicConfig::new(C)
        })
        .unwrap();
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, None, 1, 0)); // A's, copy to P
    from_wire(&mut wire, &udp_frame(OUTSIDE, OUTSIDE, None, 2, 0)); // nobody's: P
    from_wire(&mut wire, &udp_frame(OUTSIDE, C, Some(5), 3, 0)); // VLAN 5: not P
    let ids = |v: Vec<Vec<u8>>| v.iter().map(|f| parse(f).1.unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(drain(&mut a)), [1]);
    assert_eq!(ids(drain(&mut p)), [1, 2]);
    assert_eq!(ids(drain(&mut other)), [3]);
    // Switched inside as well: A to C's MAC on the untagged LAN has no owner there,
    // P gets the copy and the wire the frame.
    send(&mut a, &udp_frame(A, OUTSIDE, None, 4, 0));
    assert_eq!(ids(drain(&mut p)), [4]);
    assert_eq!(ids(drain(&mut wire)), [4]);
}

#[test]
fn multicast_is_replicated_to_subscribers_and_broadcast_to_the_lan() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let group = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
    let mut a = part
        .add(VnicConfig {
            multicast: vec![group],
            ..VnicConfig::new(A)
        })
        .unwrap();
    let mut b = part
        .add(VnicConfig {
            multicast: vec![group],
            ..VnicConfig::new(B)
        })
        .unwrap();
    let mut c = part.add(VnicConfig::new(C)).unwrap();
    let mut d = part
        .add(VnicConfig {
            all_multicast: true,
            ..VnicConfig::new([2, 0, 0, 0, 0, 0xd])
        })
        .unwrap();
    from_wire(&mut wire, &udp_frame(OUTSIDE, group, None, 1, 0));
    from_wire(&mut wire, &udp_frame(OUTSIDE, [0xff; 6], None, 2, 0));
    let ids = |v: Vec<Vec<u8>>| v.iter().map(|f| parse(f).1.unwrap()).collect::<Vec<_>>();
    assert_eq!(ids(drain(&mut a)), [1, 2]);
    assert_eq!(ids(drain(&mut b)), [1, 2]);
    assert_eq!(ids(drain(&mut c)), [2]);
    assert_eq!(ids(drain(&mut d)), [1, 2]);
    // From a vNIC: the other subscribers get copies and the wire gets it.
    send(&mut a, &udp_frame(A, group, None, 3, 0));
    assert_eq!(ids(drain(&mut a)), Vec::<u32>::new());
    assert_eq!(ids(drain(&mut b)), [3]);
    assert_eq!(ids(drain(&mut c)), Vec::<u32>::new());
    assert_eq!(ids(drain(&mut wire)), [3]);
    // Refused: a unicast address as a group.
    assert!(matches!(
        part.add(VnicConfig {
            multicast: vec![OUTSIDE],
            ..VnicConfig::new([2, 0, 0, 0, 0, 0x77])
        }),
        Err(VnicError::NotMulticast(_))
    ));
}

#[test]
fn frames_for_no_vnic_go_to_the_default_vnic_or_are_counted() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut a = part.add(VnicConfig::new(A)).unwrap();
    let mut dflt = part.add(VnicConfig::new(B)).unwrap();
    from_wire(&mut wire, &udp_frame(OUTSIDE, OUTSIDE, None, 1, 0));
    assert!(drain(&mut dflt).is_empty());
    assert_eq!(part.counters().total(Counter::RxDroppedNoVnic), 1);
    part.set_default(Some(&dflt));
    from_wire(&mut wire, &udp_frame(OUTSIDE, OUTSIDE, None, 2, 0));
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, None, 3, 0));
    assert_eq!(
        drain(&mut dflt)
            .iter()
            .map(|f| parse(f).1)
            .collect::<Vec<_>>(),
        [Some(2)]
    );
    assert_eq!(drain(&mut a).len(), 1);
    assert_eq!(part.counters().total(Counter::RxDroppedNoVnic), 1);
    // Removing the default vNIC clears it.
    drop(dflt);
    from_wire(&mut wire, &udp_frame(OUTSIDE, OUTSIDE, None, 4, 0));
    assert_eq!(part.pump().unwrap(), 1);
    assert_eq!(part.counters().total(Counter::RxDroppedNoVnic), 2);
}

#[test]
fn the_embedded_switch_moves_super_frames_whole_and_vepa_and_private_do_not() {
    for mode in [SwitchMode::Veb, SwitchMode::Vepa, SwitchMode::Private] {
        let (part, mut wire, _) = setup(mode, NicCaps::full());
        let mut a = part.add(VnicConfig::new(A)).unwrap();
        let mut b = part.add(VnicConfig::new(B)).unwrap();
        let (f, meta) = super_frame(A, B, 60_000, 1448);
        send_meta(&mut a, &f, meta);
        let mut got = Batch::new();
        b.receive(0, &mut got, 64).unwrap();
        let on_wire = drain(&mut wire);
        match mode {
            SwitchMode::Veb => {
                assert_eq!(got.len(), 1, "one frame: the super-frame, whole");
                assert_eq!(got[0].bytes(), &f[..]);
                assert_eq!(got[0].meta.gso, meta.gso);
                assert_eq!(got[0].meta.csum, meta.csum, "the partial checksum kept");
                assert!(on_wire.is_empty(), "never on the wire");
            }
            SwitchMode::Vepa => {
                assert!(got.is_empty());
                assert_eq!(on_wire.len(), 1, "out to the external switch");
                assert_eq!(on_wire[0], f);
            }
            SwitchMode::Private => {
                assert!(got.is_empty() && on_wire.is_empty());
                assert_eq!(total(&a, Counter::TxDroppedPrivate), 1);
            }
        }
    }
}

#[test]
fn each_vnic_spreads_its_flows_with_its_own_rss() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let key = RssKey::new(&[0x6d, 0x5a].repeat(20)).unwrap();
    let steering = Arc::new(Steering::new(
        &key,
        IndirectionTable::new(4).unwrap(),
        HashConfig::default(),
    ));
    let mut a = part
        .add(VnicConfig {
            queues: 4,
            rss: Some(Arc::clone(&steering)),
            ..VnicConfig::new(A)
        })
        .unwrap();
    assert_eq!(a.queues(), 4);
    let mut want = [0usize; 4];
    for port in 0..64u16 {
        let f = FrameBuilder::new(
            Ip::v4([192, 0, 2, 1], [10, 0, 0, 1]),
            L4::tcp(10_000 + port, 80),
        )
        .macs(OUTSIDE, A)
        .build(b"x");
        from_wire(&mut wire, &f);
        let flow = FlowTuple::tcp4(
            Ipv4Addr::new(192, 0, 2, 1),
            10_000 + port,
            Ipv4Addr::new(10, 0, 0, 1),
            80,
        );
        want[usize::from(steering.rx_queue(&flow))] += 1;
    }
    a.receive(0, &mut Batch::new(), 0).unwrap(); // pumps
    let mut got = [0usize; 4];
    for (q, g) in got.iter_mut().enumerate() {
        let mut b = Batch::new();
        a.receive(q, &mut b, 1024).unwrap();
        *g = b.len();
    }
    assert_eq!(
        got, want,
        "queues by the vNIC's key, computed from the flow tuple"
    );
    assert!(want.iter().all(|&n| n > 0), "64 flows land on every queue");
}

#[test]
fn vnics_come_and_go_while_the_others_run() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let mut a = part.add(VnicConfig::new(A)).unwrap();
    let b = part.add(VnicConfig::new(B)).unwrap();
    // The same MAC cannot be used twice on one LAN, but can on another.
    assert!(matches!(
        part.add(VnicConfig::new(B)),
        Err(VnicError::MacInUse { .. })
    ));
    let b_vlan = part
        .add(VnicConfig {
            vlan: VlanMode::Access(7),
            ..VnicConfig::new(B)
        })
        .unwrap();
    assert_eq!(part.len(), 3);
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, None, 1, 0));
    drop(b);
    assert_eq!(part.len(), 2);
    from_wire(&mut wire, &udp_frame(OUTSIDE, B, None, 2, 0));
    from_wire(&mut wire, &udp_frame(OUTSIDE, A, None, 3, 0));
    let ids: Vec<_> = drain(&mut a).iter().map(|f| parse(f).1.unwrap()).collect();
    assert_eq!(ids, [1, 3], "A never stopped");
    assert_eq!(part.counters().total(Counter::RxDroppedNoVnic), 1);
    // Its MAC is free again.
    let mut b2 = part.add(VnicConfig::new(B)).unwrap();
    from_wire(&mut wire, &udp_frame(OUTSIDE, B, None, 4, 0));
    assert_eq!(drain(&mut b2).len(), 1);
    drop(b_vlan);
}

#[test]
fn configurations_are_checked() {
    let (part, _wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let bad = |cfg: VnicConfig| part.add(cfg).err();
    assert!(matches!(
        bad(VnicConfig::new([1, 0, 0, 0, 0, 1])),
        Some(VnicError::NotUnicast(_))
    ));
    assert!(matches!(
        bad(VnicConfig::new([0; 6])),
        Some(VnicError::NotUnicast(_))
    ));
    for vid in [0, 4095, 5000] {
        let cfg = VnicConfig {
            vlan: VlanMode::Access(vid),
            ..VnicConfig::new(A)
        };
        assert!(matches!(bad(cfg), Some(VnicError::BadVlan(v)) if v == vid));
    }
    for queues in [0, 65] {
        let cfg = VnicConfig {
            queues,
            ..VnicConfig::new(A)
        };
        assert!(matches!(bad(cfg), Some(VnicError::BadQueues(_))));
    }
    let cfg = VnicConfig {
        tx_rate: Some(linerate_vnic::RateLimit {
            burst_bits: 0,
            ..linerate_vnic::RateLimit::bits(1_000_000)
        }),
        ..VnicConfig::new(A)
    };
    assert!(matches!(
        bad(cfg),
        Some(VnicError::BadRate(RateError::BitRateWithoutBurst))
    ));
    // 256 and no more.
    let vnics: Vec<Vnic<MemNic>> = (0..256u16)
        .map(|i| {
            let [hi, lo] = i.to_be_bytes();
            part.add(VnicConfig::new([2, 1, 0, 0, hi, lo])).unwrap()
        })
        .collect();
    assert!(matches!(bad(VnicConfig::new(A)), Some(VnicError::Full)));
    drop(vnics);
    assert!(part.add(VnicConfig::new(A)).is_ok());
}

#[test]
fn tunnelled_frames_are_steered_by_vni_and_inner_mac() {
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let (x, y) = ([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2]);
    let mut vm1 = part
        .add(VnicConfig {
            tunnel_macs: vec![(42, x)],
            ..VnicConfig::new(A)
        })
        .unwrap();
    let mut vm2 = part
        .add(VnicConfig {
            tunnel_macs: vec![(43, y)],
            ..VnicConfig::new(B)
        })
        .unwrap();
    let mut vtep = part.add(VnicConfig::new(C)).unwrap();
    // Outer destination: the VTEP vNIC C, for all of them.
    let tunnelled = |vni: u32, inner_dst: [u8; 6], nvgre: bool| {
        let b = FrameBuilder::new(Ip::v4([10, 1, 0, 1], [10, 1, 0, 2]), L4::udp(1, 2))
            .macs(OUTSIDE, inner_dst);
        let outer = Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
        let b = if nvgre {
            b.nvgre(vni, 0, outer)
        } else {
            b.vxlan(vni, outer)
        };
        b.macs(OUTSIDE, C).build(b"inner")
    };
    from_wire(&mut wire, &tunnelled(42, x, false));
    from_wire(&mut wire, &tunnelled(43, y, true));
    from_wire(&mut wire, &tunnelled(42, y, false)); // no (VNI, MAC) match: outer MAC
    from_wire(&mut wire, &udp_frame(OUTSIDE, C, None, 1, 0));
    assert_eq!(
        drain(&mut vm1),
        [tunnelled(42, x, false)],
        "whole, still encapsulated"
    );
    assert_eq!(drain(&mut vm2), [tunnelled(43, y, true)]);
    assert_eq!(drain(&mut vtep).len(), 2);
    // A (VNI, MAC) steers to one vNIC only.
    assert!(matches!(
        part.add(VnicConfig {
            tunnel_macs: vec![(42, x)],
            ..VnicConfig::new([2, 0, 0, 0, 0, 0x42])
        }),
        Err(VnicError::TunnelMacInUse { vni: 42, .. })
    ));
    drop(vm1);
    from_wire(&mut wire, &tunnelled(42, x, false));
    assert_eq!(
        drain(&mut vtep).len(),
        1,
        "steered by its outer MAC once vm1 is gone"
    );
}

/// Filters on a vNIC: on receive, a drop rule and a steer rule (one on the inner
/// headers of VXLAN traffic, by VNI and inner port) decide per frame and count; a
/// rule on the vNIC's access VLAN matches though the tag is stripped; on
/// transmit, a drop rule stops a frame before the wire, counted.
#[test]
fn filters_drop_steer_and_count_per_vnic() {
    use linerate_vnic::filter::{Action, Level, Match, PortRange, Rule};
    let (part, mut wire, _) = setup(SwitchMode::Veb, NicCaps::plain());
    let udp = |dport: u16| Match {
        proto: Some(17),
        dst_port: Some(PortRange {
            lo: dport,
            hi: dport,
        }),
        ..Match::default()
    };
    let mut a = part
        .add(VnicConfig {
            queues: 4,
            vlan: VlanMode::Access(7),
            rx_filters: vec![
                Rule {
                    when: Match::default(),
                    action: Action::Count,
                },
                Rule {
                    when: udp(9),
                    action: Action::Drop,
                },
                Rule {
                    when: Match {
                        level: Level::Inner,
                        vni: Some(42),
                        dst_port: Some(PortRange { lo: 5000, hi: 5999 }),
                        ..Match::default()
                    },
                    action: Action::Steer(3),
                },
                Rule {
                    when: Match {
                        vlan: Some(7),
                        ..udp(2000)
                    },
                    action: Action::Steer(2),
                },
            ],
            tx_filters: vec![Rule {
                when: udp(25),
                action: Action::Drop,
            }],
            ..VnicConfig::new(A)
        })
        .unwrap();
    let tagged = |dport: u16| {
        FrameBuilder::new(Ip::v4([10, 0, 0, 9], [10, 0, 0, 1]), L4::udp(1000, dport))
            .macs(OUTSIDE, A)
            .vlan(7)
            .build(b"payload")
    };
    let vxlan = |vni: u32, dport: u16| {
        FrameBuilder::new(
            Ip::v4([192, 168, 0, 1], [192, 168, 0, 2]),
            L4::udp(1, dport),
        )
        .macs([2, 9, 9, 9, 9, 1], [2, 9, 9, 9, 9, 2])
        .vxlan(vni, Ip::v4([10, 0, 0, 9], [10, 0, 0, 1]))
        .macs(OUTSIDE, A)
        .vlan(7)
        .build(b"inner")
    };
    // (frame, the queue it must reach or None if dropped)
    let cases = [
        (tagged(9), None),
        (tagged(2000), Some(2)),
        (vxlan(42, 5500), Some(3)),
        (vxlan(43, 5500), None::<usize>),
        (vxlan(42, 6000), None),
    ];
    for (frame, want) in &cases {
        from_wire(&mut wire, frame);
        let mut got = Vec::new();
        let mut b = Batch::new();
        for q in 0..4 {
            if a.receive(q, &mut b, 64).unwrap() > 0 {
                got.push(q);
                // The tag is gone: access mode.
                assert_eq!(parse(b.iter().next().unwrap().bytes()).0, None);
                b.clear();
            }
        }
        match want {
            None if frame == &tagged(9) => assert!(got.is_empty(), "dropped by rule 1"),
            // Not steered: RSS picks some queue, but exactly one.
            None => assert_eq!(got.len(), 1, "delivered once"),
            Some(q) => assert_eq!(got, vec![*q]),
        }
    }
    assert_eq!(total(&a, Counter::RxDroppedFilter), 1);
    let (rx_hits, _) = a.filter_hits();
    assert_eq!(rx_hits, vec![5, 1, 1, 1]);

    // Transmit: port 25 stopped and counted, port 26 on the wire.
    let mail = |dport: u16| {
        FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 9]), L4::udp(1000, dport))
            .macs(A, OUTSIDE)
            .build(b"x")
    };
    send(&mut a, &mail(25));
    send(&mut a, &mail(26));
    let out = drain(&mut wire);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0][out[0].len() - 1], b'x');
    assert_eq!(total(&a, Counter::TxDroppedFilter), 1);
    assert_eq!(a.filter_hits().1, vec![1]);

    // A steer to a queue the vNIC does not have is refused.
    let bad = part.add(VnicConfig {
        rx_filters: vec![Rule {
            when: Match::default(),
            action: Action::Steer(1),
        }],
        ..VnicConfig::new(B)
    });
    assert!(
        matches!(
            bad.as_ref().err(),
            Some(VnicError::Filter(FilterError::NoSuchQueue {
                rule: 0,
                queue: 1,
                queues: 1
            }))
        ),
        "{:?}",
        bad.err()
    );
}
