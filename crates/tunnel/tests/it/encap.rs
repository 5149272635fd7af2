//! The outer headers the tunnel writes, read back by etherparse (an
//! independent parser): RFC 7348 / 8926 / 7637 fields, DF, TTL, DSCP, ECN
//! normal mode (RFC 6040 section 4.1), source ports in range, checksums.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{MAC_A, MAC_B, kinds, static_vni};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps};
use linerate_tunnel::{Dscp, Encap, Tunnel, TunnelNic, UdpCsum, VtepConfig};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::net::IpAddr;

fn endpoints(encap: Encap, v6: bool, tweak: impl Fn(&mut VtepConfig)) -> (TunnelNic, MemNic) {
    let (a, b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let (la, lb): (IpAddr, IpAddr) = if v6 {
        (
            "2001:db8::a".parse().unwrap(),
            "2001:db8::b".parse().unwrap(),
        )
    } else {
        ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap())
    };
    let mut cfg = VtepConfig::new(encap, MAC_A, la);
    tweak(&mut cfg);
    (
        Tunnel::new(a, cfg, static_vni(0x123456, lb, MAC_B)).unwrap(),
        b,
    )
}

/// Sends inner frames with `tos` from ports `sports`; returns the underlay frames.
fn send(t: &mut TunnelNic, b: &mut MemNic, tos: u8, sports: std::ops::Range<u16>) -> Vec<Vec<u8>> {
    let mut batch = Batch::new();
    for sp in sports {
        let mut ip = Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]);
        if let Ip::V4(h) = &mut ip {
            h.dscp = etherparse::IpDscp::try_new(tos >> 2).unwrap();
            h.ecn = etherparse::IpEcn::try_new(tos & 3).unwrap();
        }
        let f = FrameBuilder::new(ip, L4::tcp(sp, 80)).build(b"inner payload");
        batch.push(Frame::plain(t.pool().alloc_from(&f)));
    }
    t.transmit(0, &mut batch).unwrap();
    let mut out = Batch::new();
    b.receive(0, &mut out, 1024).unwrap();
    out.iter().map(|f| f.bytes().to_vec()).collect()
}

#[test]
fn outer_ipv4_fields() {
    for encap in kinds() {
        let nvgre = encap == Encap::Nvgre;
        let (mut t, mut b) = endpoints(encap, false, |c| c.ttl = 17);
        let frames = send(&mut t, &mut b, (46 << 2) | 2, 1000..1064);
        assert_eq!(frames.len(), 64);
        let mut ports = std::collections::HashSet::new();
        for f in &frames {
            assert_eq!(&f[0..6], &MAC_B);
            assert_eq!(&f[6..12], &MAC_A);
            let p = SlicedPacket::from_ethernet(f).unwrap();
            let Some(NetSlice::Ipv4(ip)) = &p.net else {
                panic!()
            };
            let h = ip.header();
            assert!(h.dont_fragment());
            assert_eq!(h.ttl(), 17);
            assert_eq!(h.dcp().value(), 46, "DSCP inherited");
            assert_eq!(h.ecn().value(), 2, "ECT(0) copied (RFC 6040 normal mode)");
            assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
            if nvgre {
                assert_eq!(h.protocol(), etherparse::IpNumber::GRE);
                let g = &f[34..42];
                assert_eq!(&g[0..4], &[0x20, 0, 0x65, 0x58], "K only, TEB");
                assert_eq!(&g[4..7], &[0x12, 0x34, 0x56], "VSID");
                ports.insert(u16::from(g[7]));
            } else {
                let Some(TransportSlice::Udp(u)) = &p.transport else {
                    panic!()
                };
                assert!(u.source_port() >= 49152);
                assert_eq!(
                    u.checksum(),
                    0,
                    "zero outer UDP checksum on IPv4 by default"
                );
                ports.insert(u.source_port());
                assert_eq!(&f[42 + 4..42 + 7], &[0x12, 0x34, 0x56], "VNI");
            }
        }
        assert!(
            ports.len() > 16,
            "entropy from the inner flow: {}",
            ports.len()
        );
    }
}

#[test]
fn outer_ipv6_checksum_and_fixed_dscp() {
    for (zero, csum) in [
        (false, UdpCsum::Zero),
        (true, UdpCsum::Compute),
        (true, UdpCsum::Zero),
    ] {
        let (mut t, mut b) = endpoints(Encap::Vxlan, true, |c| {
            c.ipv6_zero_csum = zero;
            c.udp_csum = csum;
            c.dscp = Dscp::Fixed(10);
        });
        for f in send(&mut t, &mut b, 0, 1000..1004) {
            let p = SlicedPacket::from_ethernet(&f).unwrap();
            let Some(NetSlice::Ipv6(ip)) = &p.net else {
                panic!()
            };
            assert_eq!(ip.header().traffic_class() >> 2, 10);
            let Some(TransportSlice::Udp(u)) = &p.transport else {
                panic!()
            };
            let expect_zero = zero && csum == UdpCsum::Zero;
            if expect_zero {
                assert_eq!(u.checksum(), 0);
            } else {
                let want = u
                    .to_header()
                    .calc_checksum_ipv6(&ip.header().to_header(), u.payload())
                    .unwrap();
                assert_eq!(u.checksum(), want);
            }
        }
    }
}

#[test]
fn ce_on_the_outside_reaches_an_ect_inner_header() {
    let (a, mut b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let la: IpAddr = "192.0.2.10".parse().unwrap();
    let lb: IpAddr = "192.0.2.11".parse().unwrap();
    let mut rx = Tunnel::new(
        a,
        VtepConfig::new(Encap::Vxlan, MAC_A, la),
        static_vni(7, lb, MAC_B),
    )
    .unwrap();
    let mut ip = Ip::v4([10, 0, 0, 2], [10, 0, 0, 1]);
    if let Ip::V4(h) = &mut ip {
        h.ecn = etherparse::IpEcn::try_new(2).unwrap();
    }
    let mut outer = Ip::v4([192, 0, 2, 11], [192, 0, 2, 10]);
    if let Ip::V4(h) = &mut outer {
        h.ecn = etherparse::IpEcn::try_new(3).unwrap();
    }
    let f = FrameBuilder::new(ip, L4::tcp(5, 6))
        .vxlan(7, outer)
        .macs(MAC_B, MAC_A)
        .build(b"x");
    let mut batch = Batch::new();
    batch.push(Frame::plain(b.pool().alloc_from(&f)));
    b.transmit(0, &mut batch).unwrap();
    assert_eq!(rx.receive(0, &mut batch, 8).unwrap(), 1);
    let p = SlicedPacket::from_ethernet(batch[0].bytes()).unwrap();
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!()
    };
    assert_eq!(ip.header().ecn().value(), 3, "CE");
    assert_eq!(
        ip.header().to_header().calc_header_checksum(),
        ip.header().header_checksum()
    );
}

#[test]
fn outer_df_set_unset_or_inherited_and_source_ports_in_range() {
    use linerate_tunnel::Df;
    for df in [Df::Set, Df::Unset, Df::Inherit] {
        let (mut t, mut b) = endpoints(Encap::Vxlan, false, |c| {
            c.df = df;
            c.src_ports = 40000..=40009;
        });
        for inner_df in [false, true] {
            let mut batch = Batch::new();
            for sp in 1000..1032u16 {
                let mut f =
                    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::udp(sp, 80))
                        .build(b"inner payload");
                if inner_df {
                    f[20] |= 0x40;
                } else {
                    f[20] &= !0x40;
                }
                batch.push(Frame::plain(t.pool().alloc_from(&f)));
            }
            t.transmit(0, &mut batch).unwrap();
            let mut out = Batch::new();
            b.receive(0, &mut out, 1024).unwrap();
            assert_eq!(out.len(), 32);
            for f in out.iter() {
                let p = SlicedPacket::from_ethernet(f.bytes()).unwrap();
                let Some(NetSlice::Ipv4(ip)) = &p.net else {
                    panic!()
                };
                let h = ip.header();
                let want = match df {
                    Df::Set => true,
                    Df::Unset => false,
                    Df::Inherit => inner_df,
                };
                assert_eq!(h.dont_fragment(), want, "{df:?}, inner DF {inner_df}");
                assert_eq!(h.to_header().calc_header_checksum(), h.header_checksum());
                let Some(TransportSlice::Udp(u)) = &p.transport else {
                    panic!()
                };
                assert!(
                    (40000..=40009).contains(&u.source_port()),
                    "{}",
                    u.source_port()
                );
            }
        }
    }
}
