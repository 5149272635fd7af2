//! One test per refusal reason: a crafted underlay frame (built by
//! linerate-wire's `FrameBuilder`, not by the tunnel) is sent from a raw
//! memory port to a tunnel endpoint over the other port (no shim, so nothing
//! is verified for it); each test asserts the named counter and that nothing
//! was delivered. A good frame is the control that the rig delivers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{MAC_A, MAC_B, kinds, static_vni};
use linerate_nic::{Batch, Counter, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::{Encap, Tunnel, TunnelCounter, TunnelNic, VtepConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::checksum;
use linerate_wire::geneve::GeneveOption;

const A4: [u8; 4] = [192, 0, 2, 10];
const B4: [u8; 4] = [192, 0, 2, 11];
const A6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xa];
const B6: [u8; 16] = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb];

fn inner() -> FrameBuilder {
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(1000, 2000))
}

/// Sends `frame` to a tunnel endpoint of `encap` at B (VNI 42, remote A) and
/// returns the endpoint and how many frames it delivered.
fn inject(encap: Encap, v6: bool, frame: &[u8]) -> (TunnelNic, usize, MemNic) {
    let (mut a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let (local, remote) = if v6 {
        (B6.into(), A6.into())
    } else {
        (B4.into(), A4.into())
    };
    let mut t = Tunnel::new(
        b,
        VtepConfig::new(encap, MAC_B, local),
        static_vni(42, remote, MAC_A),
    )
    .unwrap();
    let mut batch = Batch::new();
    batch.push(Frame::plain(a.pool().alloc_from(frame)));
    a.transmit(0, &mut batch).unwrap();
    let n = t.receive(0, &mut batch, 64).unwrap();
    assert_eq!(n, batch.len());
    (t, n, a)
}

fn vxlan(vni: u32) -> Vec<u8> {
    inner()
        .vxlan(vni, Ip::v4(A4, B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload")
}

fn fix_ipv4(b: &mut [u8]) {
    b[24..26].fill(0);
    let c = checksum::checksum(&b[14..34]);
    b[24..26].copy_from_slice(&c.to_be_bytes());
}

/// Asserts nothing delivered and `c` counted once in the VTEP's counters.
fn refused_vtep(encap: Encap, v6: bool, frame: &[u8], c: TunnelCounter) {
    let (t, n, _) = inject(encap, v6, frame);
    assert_eq!(n, 0, "{c:?}: delivered");
    assert_eq!(
        t.vtep_counters().get(c),
        1,
        "{c:?}: {:?}",
        t.vtep_counters().iter().collect::<Vec<_>>()
    );
    assert_eq!(t.counters().total(Counter::RxPackets), 0);
}

#[test]
fn control_good_frames_are_delivered_unchanged() {
    let inner_bytes = inner().build(b"payload");
    let (t, n, _) = inject(Encap::Vxlan, false, &vxlan(42));
    assert_eq!(n, 1);
    assert_eq!(t.tunnel_counters().get(TunnelCounter::RxDecap), 1);
    // GENEVE with a known critical option, NVGRE, IPv6 with a checksum.
    let opt = [GeneveOption {
        class: 0x0102,
        kind: 0x80,
        data: &[1, 2, 3, 4],
    }];
    let g = inner()
        .geneve(42, &opt, Ip::v4(A4, B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    let kinds = kinds();
    let (_, n, _) = inject(kinds[1].clone(), false, &g);
    assert_eq!(n, 1);
    let nv = inner()
        .nvgre(42, 7, Ip::v4(A4, B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    let (_, n, _) = inject(Encap::Nvgre, false, &nv);
    assert_eq!(n, 1);
    let v6 = inner()
        .vxlan(42, Ip::v6(A6, B6))
        .outer_udp_checksum(true)
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    let (mut t, n, _) = inject(Encap::Vxlan, true, &v6);
    assert_eq!(n, 1);
    let _ = (&mut t, inner_bytes);
}

#[test]
fn unknown_vni() {
    refused_vtep(Encap::Vxlan, false, &vxlan(43), TunnelCounter::RxUnknownVni);
}

#[test]
fn bad_outer_udp_checksum() {
    let mut f = inner()
        .vxlan(42, Ip::v4(A4, B4))
        .outer_udp_checksum(true)
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    f[34 + 6] ^= 0x10;
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxBadOuterCsum);
}

#[test]
fn bad_outer_ipv4_header_checksum() {
    let mut f = vxlan(42);
    f[24] ^= 1;
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxBadOuterCsum);
}

#[test]
fn zero_udp_checksum_over_ipv6_without_opt_in() {
    let f = inner()
        .vxlan(42, Ip::v6(A6, B6))
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    refused_vtep(Encap::Vxlan, true, &f, TunnelCounter::RxZeroCsum6);
}

#[test]
fn vxlan_without_the_i_flag() {
    let mut f = vxlan(42);
    f[42] = 0;
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxVxlanNoI);
}

fn geneve(opts: &[GeneveOption<'_>]) -> Vec<u8> {
    inner()
        .geneve(42, opts, Ip::v4(A4, B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload")
}

#[test]
fn geneve_of_another_version() {
    let mut f = geneve(&[]);
    f[42] |= 0x40;
    refused_vtep(
        kinds()[1].clone(),
        false,
        &f,
        TunnelCounter::RxGeneveVersion,
    );
}

#[test]
fn geneve_control_bit() {
    let mut f = geneve(&[]);
    f[43] |= 0x80;
    refused_vtep(kinds()[1].clone(), false, &f, TunnelCounter::RxGeneveOam);
}

#[test]
fn geneve_unknown_critical_option() {
    let f = geneve(&[GeneveOption {
        class: 0x9999,
        kind: 0x81,
        data: &[0; 4],
    }]);
    refused_vtep(
        kinds()[1].clone(),
        false,
        &f,
        TunnelCounter::RxGeneveCritical,
    );
    // The same option without the critical bit is ignored and delivered.
    let f = geneve(&[GeneveOption {
        class: 0x9999,
        kind: 0x01,
        data: &[0; 4],
    }]);
    assert_eq!(inject(kinds()[1].clone(), false, &f).1, 1);
}

#[test]
fn nvgre_with_a_checksum_or_sequence_is_not_nvgre() {
    let mut f = inner()
        .nvgre(42, 7, Ip::v4(A4, B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    f[34] |= 0x10; // S
    refused_vtep(Encap::Nvgre, false, &f, TunnelCounter::RxBadTunnelHeader);
}

#[test]
fn truncated_headers() {
    for cut in [14 + 10, 14 + 20 + 4, 14 + 20 + 8 + 4, 14 + 20 + 8 + 8 + 6] {
        let f = vxlan(42);
        refused_vtep(Encap::Vxlan, false, &f[..cut], TunnelCounter::RxTruncated);
    }
    // Consistent lengths, but the inner Ethernet header cut short.
    let mut f = vxlan(42);
    let keep = 14 + 20 + 8 + 8 + 10;
    f.truncate(keep);
    f[16..18].copy_from_slice(&((keep - 14) as u16).to_be_bytes());
    f[38..40].copy_from_slice(&((keep - 34) as u16).to_be_bytes());
    fix_ipv4(&mut f);
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxTruncated);
}

#[test]
fn source_not_allowed() {
    let f = inner()
        .vxlan(42, Ip::v4([192, 0, 2, 99], B4))
        .macs(MAC_A, MAC_B)
        .build(b"payload");
    let (t, n, _) = inject(Encap::Vxlan, false, &f);
    assert_eq!(n, 0);
    assert_eq!(t.tunnel_counters().get(TunnelCounter::RxSource), 1);
}

#[test]
fn ce_outer_on_not_ect_inner_is_dropped() {
    let mut f = vxlan(42);
    f[15] |= 3;
    fix_ipv4(&mut f);
    let (t, n, _) = inject(Encap::Vxlan, false, &f);
    assert_eq!(n, 0);
    assert_eq!(t.tunnel_counters().get(TunnelCounter::RxEcnDrop), 1);
}

#[test]
fn not_ours_other_address_port_or_protocol() {
    let f = inner()
        .vxlan(42, Ip::v4(A4, [192, 0, 2, 12]))
        .macs(MAC_A, MAC_B)
        .build(b"p");
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxNotOurs);
    let f = inner()
        .vxlan(42, Ip::v4(A4, B4))
        .tunnel_ports(1, 9999)
        .macs(MAC_A, MAC_B)
        .build(b"p");
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxNotOurs);
    let f = inner().build(b"plain udp, not a tunnel");
    refused_vtep(Encap::Vxlan, false, &f, TunnelCounter::RxNotOurs);
    // VXLAN frames at an NVGRE endpoint.
    refused_vtep(Encap::Nvgre, false, &vxlan(42), TunnelCounter::RxNotOurs);
}

#[test]
fn arp_for_the_underlay_address_is_answered_not_delivered() {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&MAC_A);
    f.extend_from_slice(&[0x08, 0x06]);
    let mut arp = [0u8; 28];
    linerate_wire::arp::emit_request(&mut arp, MAC_A, A4, B4).unwrap();
    f.extend_from_slice(&arp);
    let (t, n, mut a) = inject(Encap::Vxlan, false, &f);
    assert_eq!(n, 0);
    assert_eq!(t.vtep_counters().get(TunnelCounter::NeighAnswered), 1);
    let mut batch = Batch::new();
    assert_eq!(a.receive(0, &mut batch, 8).unwrap(), 1);
    let reply = etherparse::SlicedPacket::from_ethernet(batch[0].bytes()).unwrap();
    let Some(etherparse::NetSlice::Arp(arp)) = reply.net else {
        panic!("not ARP")
    };
    assert_eq!(arp.operation(), etherparse::ArpOperation::REPLY);
    assert_eq!(arp.sender_hw_addr(), &MAC_B);
    assert_eq!(arp.sender_protocol_addr(), &B4);
}

#[test]
fn oversize_inner_frame_is_dropped_not_fragmented() {
    let (a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut t = Tunnel::new(
        a,
        VtepConfig::new(Encap::Vxlan, MAC_A, A4.into()),
        static_vni(42, B4.into(), MAC_B),
    )
    .unwrap();
    assert_eq!(t.caps().mtu, 1450);
    let mut batch = Batch::new();
    let ok = inner().build(&[0; 1450 - 28]);
    let big = inner().build(&[0; 1451 - 28]);
    batch.push(Frame::plain(t.pool().alloc_from(&ok)));
    batch.push(Frame::plain(t.pool().alloc_from(&big)));
    batch.push(Frame::plain(t.pool().alloc_from(&ok)));
    assert!(matches!(
        t.transmit(0, &mut batch),
        Err(linerate_nic::NicError::Oversize { .. })
    ));
    assert_eq!(batch.len(), 1, "the frame after the refused one stays");
    assert_eq!(t.counters().total(Counter::TxDroppedOversize), 1);
    assert_eq!(t.tunnel_counters().get(TunnelCounter::TxOversize), 1);
    batch.clear();
    assert_eq!(
        b.receive(0, &mut batch, 8).unwrap(),
        1,
        "only the frame that fits crossed"
    );
    assert_eq!(
        batch[0].len(),
        1514,
        "a full underlay frame, not a fragment"
    );
}

#[test]
fn neighbour_solicitation_for_the_underlay_address_is_answered() {
    let ns = etherparse::PacketBuilder::ethernet2(MAC_A, [0x33, 0x33, 0xff, 0, 0, 0xb])
        .ipv6(
            A6,
            [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0xb],
            255,
        )
        .icmpv6(etherparse::Icmpv6Type::Unknown {
            type_u8: 135,
            code_u8: 0,
            bytes5to8: [0; 4],
        });
    let mut body = B6.to_vec();
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&MAC_A);
    let mut f = Vec::new();
    ns.write(&mut f, &body).unwrap();
    let (t, n, mut a) = inject(Encap::Vxlan, true, &f);
    assert_eq!(n, 0);
    assert_eq!(t.vtep_counters().get(TunnelCounter::NeighAnswered), 1);
    let mut batch = Batch::new();
    assert_eq!(a.receive(0, &mut batch, 8).unwrap(), 1);
    let p = etherparse::SlicedPacket::from_ethernet(batch[0].bytes()).unwrap();
    let Some(etherparse::NetSlice::Ipv6(ip)) = &p.net else {
        panic!("not IPv6")
    };
    assert_eq!(ip.header().hop_limit(), 255);
    assert_eq!(ip.header().destination(), A6);
    let Some(etherparse::TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!()
    };
    let want = icmp
        .header()
        .icmp_type
        .calc_checksum(B6, A6, icmp.payload())
        .unwrap();
    assert_eq!(icmp.checksum(), want, "ICMPv6 checksum");
    let b = batch[0].bytes();
    assert_eq!(b[54], 136, "a neighbour advertisement");
    assert_eq!(b[58] & 0x60, 0x60, "solicited and override");
    assert_eq!(&b[62..78], &B6, "target");
    assert_eq!(
        &b[78..86],
        &[
            2, 1, MAC_B[0], MAC_B[1], MAC_B[2], MAC_B[3], MAC_B[4], MAC_B[5]
        ]
    );
}

#[test]
fn unresolved_next_hop_probes_and_bounds_the_waiting_frames() {
    use linerate_tunnel::VniConfig;
    let (a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    // Nobody answers for 192.0.2.11.
    let mut t = Tunnel::new(
        a,
        VtepConfig::new(Encap::Vxlan, MAC_A, A4.into()),
        VniConfig::new(42, B4.into()),
    )
    .unwrap();
    let mut batch = Batch::new();
    for _ in 0..100 {
        batch.push(Frame::plain(t.pool().alloc_from(&inner().build(b"x"))));
    }
    assert_eq!(t.transmit(0, &mut batch).unwrap(), 100);
    let c = t.tunnel_counters();
    assert_eq!(c.get(TunnelCounter::NeighProbes), 1);
    assert_eq!(
        c.get(TunnelCounter::TxUnresolved),
        100 - 64,
        "64 frames wait"
    );
    // On the wire: one ARP request for the remote VTEP, nothing else.
    assert_eq!(b.receive(0, &mut batch, 128).unwrap(), 1);
    let probe = batch.pop().unwrap();
    let p = etherparse::SlicedPacket::from_ethernet(probe.bytes()).unwrap();
    let Some(etherparse::NetSlice::Arp(arp)) = p.net else {
        panic!("not ARP")
    };
    assert_eq!(arp.operation(), etherparse::ArpOperation::REQUEST);
    assert_eq!(arp.target_protocol_addr(), &B4);
    // The answer releases the waiting frames, encapsulated to the learned MAC.
    let mut reply = MAC_A.to_vec();
    reply.extend_from_slice(&MAC_B);
    reply.extend_from_slice(&[8, 6]);
    let mut body = [0u8; 28];
    linerate_wire::arp::emit_reply(&mut body, MAC_B, B4, MAC_A, A4).unwrap();
    reply.extend_from_slice(&body);
    batch.clear();
    batch.push(Frame::plain(b.pool().alloc_from(&reply)));
    b.transmit(0, &mut batch).unwrap();
    assert_eq!(t.receive(0, &mut batch, 8).unwrap(), 0);
    assert_eq!(t.transmit(0, &mut batch).unwrap(), 0);
    assert_eq!(b.receive(0, &mut batch, 128).unwrap(), 64);
    assert!(
        batch
            .iter()
            .all(|f| f.bytes()[..6] == MAC_B && f.len() == 50 + 43)
    );
}

/// The next hop's resolution is the engine's neighbour table with the bounds
/// `VtepConfig::neighbors` gives: 8 frames wait, not 64; after the configured
/// probes with no answer the waiting frames are dropped and counted on the
/// VTEP, and the next frame starts a new resolution.
#[test]
fn the_neighbour_bounds_come_from_the_config_and_an_unanswered_hop_gives_up() {
    use linerate_tunnel::VniConfig;
    use std::time::Duration;
    let (a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut vtep = VtepConfig::new(Encap::Vxlan, MAC_A, A4.into());
    vtep.neighbors.queue = 8;
    vtep.neighbors.probes = 2;
    vtep.neighbors.retry = Duration::from_millis(20);
    let mut t = Tunnel::new(a, vtep, VniConfig::new(42, B4.into())).unwrap();
    let mut batch = Batch::new();
    for _ in 0..20 {
        batch.push(Frame::plain(t.pool().alloc_from(&inner().build(b"x"))));
    }
    assert_eq!(t.transmit(0, &mut batch).unwrap(), 20);
    assert_eq!(t.tunnel_counters().get(TunnelCounter::TxUnresolved), 12);
    // Nobody answers: a second probe after 20 ms, then the 8 frames go.
    let start = std::time::Instant::now();
    while t.vtep_counters().get(TunnelCounter::TxUnresolved) < 8
        && start.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(5));
        t.receive(0, &mut batch, 8).unwrap();
    }
    assert_eq!(t.vtep_counters().get(TunnelCounter::TxUnresolved), 8);
    let mut wire = Batch::new();
    b.receive(0, &mut wire, 64).unwrap();
    let arps = wire
        .iter()
        .filter(|f| f.bytes().get(12..14) == Some(&[8, 6][..]))
        .count();
    assert_eq!(arps, 2, "two probes, then it gave up");
    assert_eq!(wire.len(), 2, "no data frame went out unresolved");
    // A new frame starts a new resolution.
    batch.clear();
    batch.push(Frame::plain(t.pool().alloc_from(&inner().build(b"y"))));
    t.transmit(0, &mut batch).unwrap();
    wire.clear();
    b.receive(0, &mut wire, 64).unwrap();
    assert_eq!(wire.len(), 1, "a fresh probe");
}
