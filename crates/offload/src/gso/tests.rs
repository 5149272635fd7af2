use super::*;
use crate::meta::GsoType;
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::{Layer as WireLayer, layout};

fn tcp4(payload: usize) -> Vec<u8> {
    FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2)).build(&vec![7; payload])
}

fn meta(frame: &[u8], gso: Option<Gso>) -> OffloadMeta {
    assert!(layout::parse(frame).is_ok(), "the test frame parses");
    OffloadMeta {
        gso,
        ..OffloadMeta::plain()
    }
}

fn err(frame: &[u8], gso: Gso) -> GsoError {
    let mut out = SegmentBuf::new();
    let mut s = Segmenter::default();
    let e = s
        .segment(frame, &meta(frame, Some(gso)), &mut out)
        .unwrap_err();
    assert_eq!(s.stats().errors, 1);
    assert!(out.is_empty());
    // The zero-copy path refuses the same frames.
    let mut zc = ZeroCopyBuf::new();
    assert_eq!(
        s.segment_zero_copy(frame, &meta(frame, Some(gso)), &mut zc),
        Err(e)
    );
    e
}

#[test]
fn no_request_passes_through_with_checksum_completed() {
    let mut frame = tcp4(3000);
    let l = layout::parse(&frame).unwrap();
    let partial = csum::prepare_partial(&mut frame, &l).unwrap();
    let mut m = meta(&frame, None);
    m.csum = partial;
    for gso in [None, Some(Gso::new(GsoType::TcpV4, 0))] {
        m.gso = gso;
        let mut s = Segmenter::new(CsumMode::Complete);
        let mut out = SegmentBuf::new();
        assert_eq!(s.segment(&frame, &m, &mut out).unwrap(), 1);
        assert_eq!(out.csum(), Checksum::None);
        let f = out.get(0).unwrap();
        assert_eq!(f.len(), frame.len());
        assert!(csum::verify(f, &l).ok());
        let mut zc = ZeroCopyBuf::new();
        assert_eq!(s.segment_zero_copy(&frame, &m, &mut zc).unwrap(), 1);
        let (h, p) = zc.get(0, &frame).unwrap();
        assert_eq!((h, p.len()), (f, 0));
        assert_eq!(s.stats().passed_through, 2);

        // Left partial: the frame as it was, as payload only.
        s.set_mode(CsumMode::LeavePartial);
        s.segment(&frame, &m, &mut out).unwrap();
        assert_eq!((out.get(0).unwrap(), out.csum()), (&frame[..], partial));
        s.segment_zero_copy(&frame, &m, &mut zc).unwrap();
        assert_eq!(zc.get(0, &frame).unwrap(), (&[][..], &frame[..]));
        assert_eq!(zc.csum(), partial);
    }
}

#[test]
fn one_segment_when_payload_fits() {
    for payload in [0, 1, 1448] {
        let frame = tcp4(payload);
        let m = meta(&frame, Some(Gso::new(GsoType::TcpV4, 1448)));
        let mut out = SegmentBuf::new();
        let n = Segmenter::default().segment(&frame, &m, &mut out).unwrap();
        assert_eq!(n, 1);
        // Every field is rewritten to what it was.
        assert_eq!(out.get(0).unwrap(), &frame[..], "payload {payload}");
    }
}

#[test]
fn kind_must_match_the_frame() {
    let frame = tcp4(100);
    assert_eq!(
        err(&frame, Gso::new(GsoType::TcpV6, 10)),
        GsoError::KindMismatch {
            kind: GsoType::TcpV6
        }
    );
    assert_eq!(
        err(&frame, Gso::new(GsoType::UdpL4, 10)),
        GsoError::KindMismatch {
            kind: GsoType::UdpL4
        }
    );
}

#[test]
fn tunnel_must_match_the_frame() {
    let plain = tcp4(100);
    let mut g = Gso::new(GsoType::TcpV4, 10);
    g.tunnel = GsoTunnel::Udp { outer_csum: false };
    assert_eq!(
        err(&plain, g),
        GsoError::TunnelMismatch { tunnel: g.tunnel }
    );

    let vxlan = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .vxlan(5, Ip::v4([3; 4], [4; 4]))
        .build(&[0; 100]);
    g.tunnel = GsoTunnel::Gre { csum: false };
    assert_eq!(
        err(&vxlan, g),
        GsoError::TunnelMismatch { tunnel: g.tunnel }
    );

    // NVGRE without a GRE checksum cannot have one recomputed.
    let nvgre = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .nvgre(5, 1, Ip::v4([3; 4], [4; 4]))
        .build(&[0; 100]);
    g.tunnel = GsoTunnel::Gre { csum: true };
    assert_eq!(
        err(&nvgre, g),
        GsoError::TunnelMismatch { tunnel: g.tunnel }
    );
    // Without a tunnel request, the outer transport is what is segmented: GRE.
    assert_eq!(
        err(&nvgre, Gso::new(GsoType::TcpV4, 10)),
        GsoError::KindMismatch {
            kind: GsoType::TcpV4
        }
    );
}

/// A tunnel on a port of its own is a tunnel only to a segmenter whose tunnel
/// ports include it (what a layout parsed with those ports in the meta gave).
#[test]
fn tunnel_ports_are_configurable() {
    let frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::tcp(1, 2))
        .vxlan(5, Ip::v4([3; 4], [4; 4]))
        .tunnel_ports(40000, 9999)
        .build(&[0; 3000]);
    let mut g = Gso::new(GsoType::TcpV4, 1000);
    g.tunnel = GsoTunnel::Udp { outer_csum: false };
    let m = meta(&frame, Some(g));
    let mut out = SegmentBuf::new();
    let mut s = Segmenter::default();
    assert_eq!(
        s.segment(&frame, &m, &mut out),
        Err(GsoError::TunnelMismatch { tunnel: g.tunnel })
    );
    let mut cfg = layout::Config::DEFAULT;
    cfg.vxlan_ports.insert(9999).unwrap();
    s.set_layout_config(cfg);
    assert_eq!(s.layout_config(), &cfg);
    assert_eq!(s.segment(&frame, &m, &mut out), Ok(3));
    for f in out.iter() {
        let l = cfg.parse(f).unwrap();
        assert!(l.tunnel.is_some());
        assert!(csum::verify(f, &l).ok());
    }
}

#[test]
fn usso_without_tunnel_request_segments_the_outer_udp() {
    // A VXLAN frame segmented as plain USO: the VXLAN header and inner frame are
    // payload (what Linux does for UDP GSO to port 4789 without a tunnel type).
    let frame = FrameBuilder::new(Ip::v4([1; 4], [2; 4]), L4::udp(1, 2))
        .vxlan(5, Ip::v4([3; 4], [4; 4]))
        .build(&[9; 1000]);
    let m = meta(&frame, Some(Gso::new(GsoType::UdpL4, 500)));
    let mut out = SegmentBuf::new();
    let n = Segmenter::default().segment(&frame, &m, &mut out).unwrap();
    let inner = frame.len() - 42;
    assert_eq!(n, inner.div_ceil(500));
    assert_eq!(out.get(0).unwrap()[42..], frame[42..542]);
}

#[test]
fn fragments_are_refused() {
    let mut frame = tcp4(100);
    frame[14 + 6] |= 0x20; // MF
    assert_eq!(
        err(&frame, Gso::new(GsoType::TcpV4, 10)),
        GsoError::Fragment
    );
}

#[test]
fn lengths_must_match_the_frame() {
    let mut frame = tcp4(100);
    frame.extend_from_slice(&[0; 4]); // trailing bytes the IP length does not cover
    assert_eq!(
        err(&frame, Gso::new(GsoType::TcpV4, 10)),
        GsoError::LengthMismatch {
            layer: WireLayer::Ipv4,
            declared: 14 + 40 + 100,
            actual: 14 + 40 + 104
        }
    );
    let mut udp = FrameBuilder::new(Ip::v6([1; 16], [2; 16]), L4::udp(1, 2)).build(&[0; 100]);
    udp[14 + 40 + 5] -= 10; // UDP length 10 short of the IP payload
    assert_eq!(
        err(&udp, Gso::new(GsoType::UdpL4, 10)),
        GsoError::LengthMismatch {
            layer: WireLayer::Udp,
            declared: 14 + 40 + 98,
            actual: 14 + 40 + 108
        }
    );
}

#[test]
fn unparsable_frames_are_refused() {
    let frame = tcp4(100);
    let short = &frame[..30];
    let mut out = SegmentBuf::new();
    let m = OffloadMeta {
        gso: Some(Gso::new(GsoType::TcpV4, 10)),
        ..OffloadMeta::plain()
    };
    assert!(matches!(
        Segmenter::default().segment(short, &m, &mut out),
        Err(GsoError::Layout(_))
    ));
}

#[test]
fn a_truncated_super_frame_is_an_error_not_a_panic() {
    // The request was made for a longer frame than the one given.
    let long = tcp4(3000);
    let m = meta(&long, Some(Gso::new(GsoType::TcpV4, 1000)));
    for cut in [0, 10, 40, 60, 1000, long.len() - 1] {
        let mut out = SegmentBuf::new();
        assert!(
            Segmenter::default()
                .segment(&long[..cut], &m, &mut out)
                .is_err()
        );
        let mut zc = ZeroCopyBuf::new();
        assert!(
            Segmenter::default()
                .segment_zero_copy(&long[..cut], &m, &mut zc)
                .is_err()
        );
    }
}

#[test]
fn buffers_are_reused_without_allocating() {
    let frame = tcp4(65000);
    let m = meta(&frame, Some(Gso::new(GsoType::TcpV4, 1448)));
    let mut s = Segmenter::default();
    let mut out = SegmentBuf::new();
    let mut zc = ZeroCopyBuf::new();
    s.segment(&frame, &m, &mut out).unwrap();
    s.segment_zero_copy(&frame, &m, &mut zc).unwrap();
    let (a, b) = (out.get(0).unwrap().as_ptr(), zc.header(0).unwrap().as_ptr());
    for _ in 0..3 {
        assert_eq!(s.segment(&frame, &m, &mut out).unwrap(), 45);
        assert_eq!(s.segment_zero_copy(&frame, &m, &mut zc).unwrap(), 45);
    }
    assert_eq!(out.get(0).unwrap().as_ptr(), a);
    assert_eq!(zc.header(0).unwrap().as_ptr(), b);
    assert_eq!(out.bytes(), frame.len() + 44 * 54);
    assert_eq!(zc.header_bytes().len(), 45 * 54);
}

/// Segments `frame` (TCP, 1000-byte MSS) and checks each segment with linerate's
/// verifier and parser: every checksum good, lengths and sequence numbers right.
fn segment_and_verify(frame: &[u8], gso: Gso) -> usize {
    let l = layout::parse(frame).unwrap();
    let m = OffloadMeta {
        gso: Some(gso),
        ..OffloadMeta::plain()
    };
    let mut out = SegmentBuf::new();
    let n = Segmenter::default().segment(frame, &m, &mut out).unwrap();
    let h = l.innermost();
    let seq0 = u32::from_be_bytes(
        frame[usize::from(h.l4_offset) + 4..][..4]
            .try_into()
            .unwrap(),
    );
    let mut payload = Vec::new();
    for (i, f) in out.iter().enumerate() {
        let sl = layout::parse(f).unwrap();
        assert_eq!(sl.header_len(), l.header_len(), "segment {i}");
        let v = csum::verify(f, &sl);
        assert!(v.ok(), "segment {i}: {v:?}");
        let sh = sl.innermost();
        let seq = u32::from_be_bytes(f[usize::from(sh.l4_offset) + 4..][..4].try_into().unwrap());
        assert_eq!(seq, seq0 + payload.len() as u32);
        payload.extend_from_slice(&f[sl.header_len()..]);
    }
    assert_eq!(payload, frame[l.header_len()..]);
    n
}

#[test]
fn ip_options_extension_headers_and_vlan_tags_are_carried() {
    use etherparse::{IpNumber, Ipv4Options, Ipv6RawExtHeader};
    let Ip::V4(mut h4) = Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]) else {
        unreachable!()
    };
    h4.options = Ipv4Options::try_from(&[1u8, 1, 1, 0][..]).unwrap();
    let Ip::V6(h6, mut exts) = Ip::v6([1; 16], [2; 16]) else {
        unreachable!()
    };
    exts.hop_by_hop_options = Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, 0, 0, 0, 0]).ok();
    exts.destination_options = Ipv6RawExtHeader::new_raw(IpNumber(0), &[1, 4, 0, 0, 0, 0]).ok();
    let v6x = Ip::V6(h6, exts);

    let payload = vec![0x5a; 4321];
    // IPv4 options, two VLAN tags.
    let f = FrameBuilder::new(Ip::V4(h4.clone()), L4::tcp(1, 2))
        .vlan(10)
        .vlan(20)
        .build(&payload);
    assert_eq!(segment_and_verify(&f, Gso::new(GsoType::TcpV4, 1000)), 5);
    // IPv6 extension headers inside VXLAN with an inner VLAN tag, over IPv4 with
    // options and an outer tag.
    let f = FrameBuilder::new(v6x.clone(), L4::tcp(1, 2))
        .vlan(30)
        .vxlan(9, Ip::V4(h4.clone()))
        .vlan(40)
        .outer_udp_checksum(true)
        .build(&payload);
    let mut g = Gso::new(GsoType::TcpV6, 1000);
    g.tunnel = GsoTunnel::Udp { outer_csum: true };
    assert_eq!(segment_and_verify(&f, g), 5);
    // The same over NVGRE with an IPv6 outer header carrying extension headers.
    let f = FrameBuilder::new(Ip::V4(h4), L4::tcp(1, 2))
        .nvgre(9, 1, v6x)
        .build(&payload);
    let mut g = Gso::new(GsoType::TcpV4, 1000);
    g.tunnel = GsoTunnel::Gre { csum: false };
    assert_eq!(segment_and_verify(&f, g), 5);
}

/// Payload sums are made 64 segments at a time ([`SUM_BATCH`]): odd and tiny
/// MSS values (segments at odd offsets, several batches, a short last batch)
/// still give every segment a good checksum and the right bytes, in every
/// output form.
#[test]
fn payload_sums_across_batches_and_odd_mss() {
    let payload: Vec<u8> = (0..20_011u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let f = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2)).build(&payload);
    for mss in [1u16, 7, 63, 64, 65, 299, 1448] {
        let n = segment_and_verify(&f, Gso::new(GsoType::TcpV4, mss));
        assert_eq!(n, payload.len().div_ceil(usize::from(mss)), "mss {mss}");
        let m = meta(&f, Some(Gso::new(GsoType::TcpV4, mss)));
        let mut seg = Segmenter::default();
        let mut out = SegmentBuf::new();
        seg.segment(&f, &m, &mut out).unwrap();
        let mut zc = ZeroCopyBuf::new();
        seg.segment_zero_copy(&f, &m, &mut zc).unwrap();
        for (i, (h, p)) in zc.iter(&f).enumerate() {
            assert_eq!(
                [h, p].concat(),
                out.get(i).unwrap(),
                "mss {mss} segment {i}"
            );
        }
    }
}

#[test]
fn header_copy_is_exact_at_every_length() {
    for n in 0..=160usize {
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
        let mut dst = vec![0xeeu8; n];
        copy_headers(&mut dst, &src);
        assert_eq!(dst, src, "length {n}");
    }
}
