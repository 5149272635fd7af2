use super::*;
use crate::csum;
use linerate_wire::build::{FrameBuilder, Ip, L4};

/// A 24-byte header as a Linux 6.17 TAP writes it for a VXLAN (IPv4) TCPv4 GSO
/// frame with outer checksum: fields spelled out byte by byte.
const TUNNEL_HDR: [u8; 24] = [
    0x09, 0x21, // flags NEEDS_CSUM | UDP_TUNNEL_CSUM, gso_type TCPV4 | UDP_TUNNEL_IPV4
    0x68, 0x00, // hdr_len 104
    0xa8, 0x05, // gso_size 1448
    0x54, 0x00, // csum_start 84
    0x10, 0x00, // csum_offset 16
    0x01, 0x00, // num_buffers 1
    0x78, 0x56, 0x34, 0x12, // hash_value 0x12345678
    0x02, 0x00, // hash_report TCPv4
    0x00, 0x00, // padding
    0x22, 0x00, // outer_th_offset 34
    0x40, 0x00, // inner_nh_offset 64
];

#[test]
fn decodes_and_encodes_every_field() {
    let h = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::V1HashTunnel).unwrap();
    assert_eq!(
        h,
        VirtioNetHdr {
            flags: flags::NEEDS_CSUM | flags::UDP_TUNNEL_CSUM,
            gso_type: gso_type::TCPV4 | gso_type::UDP_TUNNEL_IPV4,
            hdr_len: 104,
            gso_size: 1448,
            csum_start: 84,
            csum_offset: 16,
            num_buffers: 1,
            hash_value: 0x1234_5678,
            hash_report: hash_report::TCPV4,
            outer_th_offset: 34,
            inner_nh_offset: 64,
        }
    );
    let mut buf = [0xffu8; 30];
    assert_eq!(h.write(&mut buf, HdrLen::V1HashTunnel), Ok(24));
    assert_eq!(buf[..24], TUNNEL_HDR);
    assert_eq!(buf[24..], [0xff; 6]);

    // Shorter layouts read only their part.
    let v1 = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::V1).unwrap();
    assert_eq!(
        (v1.num_buffers, v1.hash_value, v1.outer_th_offset),
        (1, 0, 0)
    );
    let legacy = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::Legacy).unwrap();
    assert_eq!((legacy.csum_offset, legacy.num_buffers), (16, 0));
    let hash = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::V1Hash).unwrap();
    assert_eq!((hash.hash_report, hash.inner_nh_offset), (2, 0));
}

#[test]
fn sizes_and_short_buffers() {
    for len in [
        HdrLen::Legacy,
        HdrLen::V1,
        HdrLen::V1Hash,
        HdrLen::V1HashTunnel,
    ] {
        assert_eq!(HdrLen::from_bytes(len.bytes()), Some(len));
        let n = len.bytes();
        assert_eq!(
            VirtioNetHdr::read(&TUNNEL_HDR[..n - 1], len),
            Err(VirtioError::Short {
                need: n,
                have: n - 1
            })
        );
        let plain = VirtioNetHdr {
            hash_value: 5,
            ..Default::default()
        };
        let mut buf = [0u8; 23];
        let r = plain.write(&mut buf[..n - 1], len);
        assert_eq!(
            r,
            Err(VirtioError::Short {
                need: n,
                have: n - 1
            })
        );
    }
    assert_eq!(HdrLen::from_bytes(11), None);
    // UDP-tunnel GSO cannot be written without the tunnel fields.
    let h = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::V1HashTunnel).unwrap();
    let mut buf = [0u8; 24];
    assert_eq!(
        h.write(&mut buf, HdrLen::V1Hash),
        Err(VirtioError::NeedsTunnelHeader)
    );
}

fn vxlan_tcp4() -> Vec<u8> {
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
        .vxlan(3, Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]))
        .build(&[0; 3000])
}

#[test]
fn the_tunnel_header_above_describes_a_vxlan_frame() {
    let frame = vxlan_tcp4();
    let h = VirtioNetHdr::read(&TUNNEL_HDR, HdrLen::V1HashTunnel).unwrap();
    let m = h.to_meta(&frame).unwrap();
    let mut g = Gso::new(GsoType::TcpV4, 1448);
    g.tunnel = GsoTunnel::Udp { outer_csum: true };
    assert_eq!(m.gso, Some(g));
    assert_eq!(
        m.csum,
        Checksum::Partial {
            start: 84,
            offset: 16
        }
    );
    assert_eq!(
        m.rss,
        Some(RssHash {
            value: 0x1234_5678,
            kind: RssHashType::TcpIpv4
        })
    );
    // And back: the same header, except num_buffers (not offload metadata).
    let back = VirtioNetHdr::from_meta(&m, &frame).unwrap();
    assert_eq!(
        back,
        VirtioNetHdr {
            num_buffers: 0,
            ..h
        }
    );
}

fn to_meta_err(flags: u8, gso_type: u8, frame: &[u8]) -> VirtioError {
    let h = VirtioNetHdr {
        flags,
        gso_type,
        gso_size: 1000,
        csum_start: 34,
        csum_offset: 16,
        ..Default::default()
    };
    h.to_meta(frame).unwrap_err()
}

#[test]
fn refuses_what_linux_refuses() {
    let plain = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2)).build(&[0; 100]);
    let vxlan = vxlan_tcp4();
    let n = flags::NEEDS_CSUM;
    assert_eq!(
        to_meta_err(n, gso_type::UDP, &plain),
        VirtioError::UnsupportedGsoType(3)
    );
    assert_eq!(
        to_meta_err(n, 0x17, &plain),
        VirtioError::UnsupportedGsoType(0x17)
    );
    assert_eq!(
        to_meta_err(n, gso_type::ECN, &plain),
        VirtioError::BadGsoType(0x80)
    );
    assert_eq!(to_meta_err(n, 0x61, &vxlan), VirtioError::BadGsoType(0x61));
    assert_eq!(
        to_meta_err(n | flags::DATA_VALID, 0, &plain),
        VirtioError::ConflictingFlags(3)
    );
    assert_eq!(
        to_meta_err(n, gso_type::TCPV6, &plain),
        VirtioError::GsoMismatch {
            gso_type: gso_type::TCPV6
        }
    );
    assert_eq!(
        to_meta_err(n, gso_type::TCPV4 | gso_type::UDP_TUNNEL_IPV4, &plain),
        VirtioError::GsoMismatch { gso_type: 0x21 }
    );
    assert_eq!(
        to_meta_err(n, gso_type::TCPV4 | gso_type::UDP_TUNNEL_IPV6, &vxlan),
        VirtioError::GsoMismatch { gso_type: 0x41 }
    );
    assert_eq!(
        to_meta_err(0, gso_type::TCPV4 | gso_type::UDP_TUNNEL_IPV4, &vxlan),
        VirtioError::TunnelNeedsPartial
    );
    let zero = VirtioNetHdr {
        gso_type: gso_type::TCPV4,
        ..Default::default()
    };
    assert_eq!(zero.to_meta(&plain), Err(VirtioError::ZeroGsoSize));
    let out = VirtioNetHdr {
        flags: n,
        csum_start: 140,
        csum_offset: 16,
        ..Default::default()
    };
    assert_eq!(
        out.to_meta(&plain),
        Err(VirtioError::CsumOutOfFrame {
            start: 140,
            offset: 16,
            len: 154
        })
    );
    assert!(matches!(
        VirtioNetHdr::default().to_meta(&plain[..20]),
        Err(VirtioError::Layout(_))
    ));
}

#[test]
fn gre_gso_has_no_virtio_form() {
    let mut frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .nvgre(3, 4, Ip::v4([5; 4], [6; 4]))
        .build(&[0; 3000]);
    let l = layout::parse(&frame).unwrap();
    let mut g = Gso::new(GsoType::TcpV4, 1000);
    g.tunnel = GsoTunnel::Gre { csum: false };
    let m = OffloadMeta {
        csum: csum::prepare_partial(&mut frame, &l).unwrap(),
        gso: Some(g),
        ..OffloadMeta::plain()
    };
    assert_eq!(
        VirtioNetHdr::from_meta(&m, &frame),
        Err(VirtioError::Unrepresentable)
    );
    // Nor is NVGRE a UDP tunnel.
    let mut udp = m;
    udp.gso.as_mut().unwrap().tunnel = GsoTunnel::Udp { outer_csum: false };
    assert_eq!(
        VirtioNetHdr::from_meta(&udp, &frame),
        Err(VirtioError::GsoMismatch {
            gso_type: gso_type::TCPV4
        })
    );
    // The checksum alone converts: the inner TCP is partial.
    let m = OffloadMeta { gso: None, ..m };
    let h = VirtioNetHdr::from_meta(&m, &frame).unwrap();
    assert_eq!((h.csum_start, h.hdr_len), (14 + 20 + 8 + 14 + 20, 0));
    assert_eq!(h.to_meta(&frame).unwrap(), m);
}

#[test]
fn verified_levels_and_segment_counts() {
    // A coalesced (GRO) plain TCP frame, verified.
    let frame = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::tcp(1, 2)).build(&[0; 3000]);
    let mut g = Gso::new(GsoType::TcpV6, 1448);
    g.segs = 3;
    for levels in [1, 2] {
        let m = OffloadMeta {
            csum: Checksum::Verified { levels },
            gso: Some(g),
            rss: None,
        };
        let h = VirtioNetHdr::from_meta(&m, &frame).unwrap();
        let want = flags::DATA_VALID
            | flags::RSC_INFO
            | if levels == 2 {
                flags::UDP_TUNNEL_CSUM
            } else {
                0
            };
        assert_eq!((h.flags, h.csum_start), (want, 3));
        assert_eq!(h.to_meta(&frame).unwrap(), m);
    }
}
