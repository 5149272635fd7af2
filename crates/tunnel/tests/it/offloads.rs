//! The overlay's caps (MTU minus the encapsulation, offloads as the underlay
//! presents them) and RSS on the inner headers through the tunnel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{MAC_A, MAC_B, kinds, static_vni};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
use linerate_tunnel::{Encap, Tunnel, VtepConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::net::IpAddr;

fn ips(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (
            "2001:db8::a".parse().unwrap(),
            "2001:db8::b".parse().unwrap(),
        )
    } else {
        ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap())
    }
}

#[test]
fn overlay_mtu_is_the_underlay_minus_the_encapsulation() {
    // Linux: vxlan 1450 (v4) / 1430 (v6); NVGRE (GRE with key) 1458 / 1438;
    // GENEVE with 4 + 8 bytes of options and their two 4-byte option headers.
    let want = [(1450, 1430), (1450 - 20, 1430 - 20), (1458, 1438)];
    for (encap, (w4, w6)) in kinds().into_iter().zip(want) {
        for (v6, w) in [(false, w4), (true, w6)] {
            let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
            let (la, lb) = ips(v6);
            let t = Tunnel::new(
                a,
                VtepConfig::new(encap.clone(), MAC_A, la),
                static_vni(1, lb, MAC_B),
            )
            .unwrap();
            assert_eq!(usize::from(t.caps().mtu), w, "{encap:?} v6 {v6}");
            assert_eq!(t.overhead(), 1500 - w);
        }
    }
}

#[test]
fn overlay_offloads_follow_the_underlay() {
    let (la, lb) = ips(false);
    // A shim over a plain port presents every offload: so does the overlay.
    let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let t = Tunnel::new(
        Shim::new(a, ShimConfig::all()).unwrap(),
        VtepConfig::new(Encap::Vxlan, MAC_A, la),
        static_vni(1, lb, MAC_B),
    )
    .unwrap();
    let o = t.caps().offloads;
    assert!(o.tso4 && o.tso6 && o.uso && o.tx_csum && o.rx_csum && o.lro);
    assert!(!o.tunnel_udp && !o.tunnel_gre, "no nested tunnels");
    // A bare plain port: nothing.
    let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let t = Tunnel::new(
        a,
        VtepConfig::new(Encap::Vxlan, MAC_A, la),
        static_vni(1, lb, MAC_B),
    )
    .unwrap();
    assert!(!t.caps().offloads.tso4 && !t.caps().offloads.tx_csum);
    // Offloads switched off in the VTEP: nothing, whatever the underlay.
    let (a, _b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let mut cfg = VtepConfig::new(Encap::Nvgre, MAC_A, la);
    cfg.offloads = false;
    let t = Tunnel::new(a, cfg, static_vni(1, lb, MAC_B)).unwrap();
    assert_eq!(t.caps().offloads, linerate_nic::Offloads::NONE);
}

#[test]
fn rss_spreads_one_tunnels_inner_flows_over_the_overlay_queues() {
    let (la, lb) = ips(false);
    let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let rx_shim = Shim::new(
        b,
        ShimConfig {
            queues: 4,
            ..ShimConfig::all()
        },
    )
    .unwrap();
    // One outer source port: every outer header is the same, so any spread
    // comes from hashing the inner headers.
    let mut cfg = VtepConfig::new(Encap::Vxlan, MAC_A, la);
    cfg.src_ports = 50_000..=50_000;
    let mut tx = Tunnel::new(a, cfg, static_vni(9, lb, MAC_B)).unwrap();
    let mut rx = Tunnel::new(
        rx_shim,
        VtepConfig::new(Encap::Vxlan, MAC_B, lb),
        static_vni(9, la, MAC_A),
    )
    .unwrap();
    assert_eq!(rx.queues(), 4);
    let mut batch = Batch::new();
    for port in 0..64u16 {
        let f = FrameBuilder::new(
            Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]),
            L4::udp(10_000 + port, 53),
        )
        .build(b"q");
        batch.push(Frame::plain(tx.pool().alloc_from(&f)));
    }
    assert_eq!(tx.transmit(0, &mut batch).unwrap(), 64);
    let mut per_queue = [0usize; 4];
    // The shim dispatches what the backend queue holds when any queue is read.
    for _ in 0..2 {
        for (q, n) in per_queue.iter_mut().enumerate() {
            let mut out = Batch::new();
            *n += rx.receive(q, &mut out, 64).unwrap();
        }
    }
    assert_eq!(per_queue.iter().sum::<usize>(), 64);
    assert!(
        per_queue.iter().all(|&n| n > 0),
        "inner flows spread: {per_queue:?}"
    );
}

/// A TCP super-segment with a partial checksum crosses a VXLAN tunnel over
/// plain ports (IPv6 underlay, so the outer UDP checksum is computed): the
/// sending shim segments it, the receiving shim verifies and coalesces it,
/// and the overlay hands up one inner super-frame marked verified, its GSO
/// record without the tunnel, its bytes those sent with the checksum filled.
#[test]
fn inner_offload_state_survives_the_tunnel() {
    use linerate_offload::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta, csum};
    use linerate_wire::layout;
    let (la, lb) = ips(true);
    let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let sa = Shim::new(a, ShimConfig::all()).unwrap();
    let sb = Shim::new(b, ShimConfig::all()).unwrap();
    let mut tx = Tunnel::new(
        sa,
        VtepConfig::new(Encap::Vxlan, MAC_A, la),
        static_vni(5, lb, MAC_B),
    )
    .unwrap();
    let mut rx = Tunnel::new(
        sb,
        VtepConfig::new(Encap::Vxlan, MAC_B, lb),
        static_vni(5, la, MAC_A),
    )
    .unwrap();
    let payload: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let mut bytes =
        FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2)).build(&payload);
    let l = layout::parse(&bytes).unwrap();
    let partial = csum::prepare_partial(&mut bytes, &l).unwrap();
    let gso = Gso::new(GsoType::TcpV4, 1380);
    let meta = OffloadMeta {
        csum: partial,
        gso: Some(gso),
        ..OffloadMeta::plain()
    };
    let mut batch = Batch::new();
    batch.push(Frame::new(tx.pool().alloc_from(&bytes), meta));
    assert_eq!(tx.transmit(0, &mut batch).unwrap(), 1);
    let wire = tx.with_underlay(|u| {
        u.counters()
            .snapshot()
            .total(linerate_nic::Counter::GsoSegments)
    });
    assert_eq!(wire, 15, "20 000 bytes in 1380-byte segments");
    assert_eq!(rx.receive(0, &mut batch, 64).unwrap(), 1);
    let mut f = batch.pop().unwrap();
    // GRO hands a coalesced run up with its checksum partial (as Linux's GRO
    // does, CHECKSUM_PARTIAL), now at the inner TCP header.
    assert_eq!(
        f.meta.csum,
        Checksum::Partial {
            start: 34,
            offset: 16
        }
    );
    let g = f.meta.gso.expect("a coalesced super-frame");
    assert_eq!(
        (g.kind, g.size, g.tunnel),
        (GsoType::TcpV4, 1380, GsoTunnel::None)
    );
    let meta = f.meta;
    csum::complete(f.bytes_mut(), &meta).unwrap();
    let p = etherparse::SlicedPacket::from_ethernet(f.bytes()).unwrap();
    let Some(etherparse::TransportSlice::Tcp(t)) = &p.transport else {
        panic!()
    };
    let Some(etherparse::NetSlice::Ipv4(ip)) = &p.net else {
        panic!()
    };
    let want = t
        .to_header()
        .calc_checksum_ipv4(&ip.header().to_header(), t.payload())
        .unwrap();
    assert_eq!(t.checksum(), want, "inner checksum right once completed");
    let got = t.payload();
    let diff = got.iter().zip(&payload).position(|(a, b)| a != b);
    assert!(
        got.len() == payload.len() && diff.is_none(),
        "{} vs {}, first difference at {diff:?}",
        got.len(),
        payload.len()
    );

    // A lone segment: completed by the sending shim, verified by the
    // receiving one at both levels (outer UDP over IPv6, inner TCP); the
    // overlay sees the inner level verified.
    let mut small = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(3, 4))
        .build(&payload[..100]);
    let l = layout::parse(&small).unwrap();
    let partial = csum::prepare_partial(&mut small, &l).unwrap();
    batch.clear();
    batch.push(Frame::new(
        tx.pool().alloc_from(&small),
        OffloadMeta {
            csum: partial,
            ..OffloadMeta::plain()
        },
    ));
    assert_eq!(tx.transmit(0, &mut batch).unwrap(), 1);
    assert_eq!(rx.receive(0, &mut batch, 8).unwrap(), 1);
    assert_eq!(batch[0].meta.csum, Checksum::Verified { levels: 1 });
}
