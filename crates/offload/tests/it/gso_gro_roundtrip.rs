//! GSO then GRO gives back the super-frame: the real segmenter's output, fed to the
//! real coalescer, reproduces the input's headers and payload byte for byte (the IP
//! IDs follow the +1 rule, so the first segment's ID is the super-frame's), and the
//! merged frame's meta asks for exactly the segmentation that was done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_offload::{
    Checksum, CsumMode, Gro, GroConfig, Gso, GsoTunnel, GsoType, OffloadMeta, SegmentBuf,
    Segmenter, prepare_partial,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::geneve::GeneveOption;
use linerate_wire::layout::{self, L3Kind, TunnelKind};
use proptest::prelude::*;

#[derive(Debug, Clone, Copy)]
enum Tun {
    None,
    Vxlan { outer_csum: bool },
    Geneve,
    Nvgre,
}

fn ip(v6: bool, n: u8) -> Ip {
    if v6 {
        Ip::v6([n; 16], [n + 1; 16])
    } else {
        Ip::v4([10, 0, 0, n], [10, 0, 1, n])
    }
}

fn super_frame(tun: Tun, outer_v6: bool, inner_v6: bool, payload: &[u8], id: u16) -> Vec<u8> {
    let mut inner = ip(inner_v6, 1);
    if let Ip::V4(h) = &mut inner {
        h.identification = id;
    }
    let L4::Tcp(mut tcp) = L4::tcp(40000, 5201) else {
        unreachable!()
    };
    tcp.sequence_number = 0xfff0_0000; // wraps within a 64 KiB super-frame
    tcp.psh = true;
    tcp.set_options(&[
        etherparse::TcpOptionElement::Noop,
        etherparse::TcpOptionElement::Noop,
        etherparse::TcpOptionElement::Timestamp(1, 2),
    ])
    .unwrap();
    let mut outer = ip(outer_v6, 9);
    if let Ip::V4(h) = &mut outer {
        h.identification = id.wrapping_mul(3);
    }
    let opts = [GeneveOption {
        class: 0x0102,
        kind: 1,
        data: &[1, 2, 3, 4],
    }];
    let b = FrameBuilder::new(inner, L4::Tcp(tcp));
    match tun {
        Tun::None => b.build(payload),
        Tun::Vxlan { outer_csum } => b
            .vxlan(42, outer)
            .outer_udp_checksum(outer_csum)
            .build(payload),
        Tun::Geneve => b.geneve(7, &opts, outer).build(payload),
        Tun::Nvgre => b.nvgre(0x1234, 5, outer).build(payload),
    }
}

fn tunnel_strategy() -> impl Strategy<Value = Tun> {
    prop_oneof![
        Just(Tun::None),
        any::<bool>().prop_map(|outer_csum| Tun::Vxlan { outer_csum }),
        Just(Tun::Geneve),
        Just(Tun::Nvgre),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn gso_then_gro_is_identity(
        tun in tunnel_strategy(),
        outer_v6 in any::<bool>(),
        inner_v6 in any::<bool>(),
        mss in 536u16..=9000,
        len in 1usize..60_000,
        id in any::<u16>(),
        seed in any::<u8>(),
    ) {
        let mss_us = usize::from(mss);
        let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        let mut frame = super_frame(tun, outer_v6, inner_v6, &payload, id);
        let l = layout::parse(&frame).unwrap();
        // GRO's documented limits: at most 64 segments per run, and a run is
        // delivered as soon as its IP packet (outer IP header on) plus one more full
        // segment would pass 65,535 bytes. So n segments make one run exactly when
        // n <= 64 and the headers plus n full segments fit; the byte-exact comparison
        // with the super-frame needs one run, longer trains are checked by
        // re-segmenting and must come out as several.
        let segs = len.div_ceil(mss_us);
        let ip_headers = frame.len() - usize::from(l.outer.l3_offset) - len;
        let one_run = segs <= 64 && (segs == 1 || ip_headers + segs * mss_us <= 65_535);
        let inner = *l.innermost();
        let tunnel = match l.tunnel {
            None => GsoTunnel::None,
            Some(t) if t.kind == TunnelKind::Nvgre => GsoTunnel::Gre { csum: t.flags.gre_csum },
            Some(t) => GsoTunnel::Udp { outer_csum: t.flags.outer_udp_csum },
        };
        let kind = if inner.l3 == L3Kind::Ipv6 { GsoType::TcpV6 } else { GsoType::TcpV4 };
        let csum = prepare_partial(&mut frame, &l).unwrap();
        let gso = Gso { tunnel, ..Gso::new(kind, mss) };
        let meta = OffloadMeta { csum, gso: Some(gso), rss: None };

        let mut seg = Segmenter::new(CsumMode::Complete);
        let mut out = SegmentBuf::default();
        let n = seg.segment(&frame, &meta, &mut out).unwrap();
        prop_assert_eq!(n, len.div_ceil(usize::from(mss)));

        let mut gro = Gro::new(GroConfig::default());
        let mut merged: Vec<(Vec<u8>, OffloadMeta)> = Vec::new();
        let mut sink = |f: &[u8], m: &OffloadMeta| merged.push((f.to_vec(), *m));
        for s in out.iter() {
            gro.receive(0, s, OffloadMeta::plain(), &mut sink);
        }
        gro.flush_all(&mut sink);
        // Whatever the runs, re-segmenting each delivered frame with the real GSO gives
        // back exactly the segments the super-frame was cut into.
        let mut again: Vec<Vec<u8>> = Vec::new();
        for (f, m) in &merged {
            if m.gso.is_some() {
                let mut o = SegmentBuf::default();
                seg.segment(f, m, &mut o).unwrap();
                again.extend(o.iter().map(<[u8]>::to_vec));
            } else {
                again.push(f.clone());
            }
        }
        let orig: Vec<Vec<u8>> = out.iter().map(<[u8]>::to_vec).collect();
        prop_assert!(again == orig, "re-segmented runs differ from the original segments");
        if !one_run {
            prop_assert!(merged.len() >= 2);
            return Ok(());
        }
        prop_assert_eq!(merged.len(), 1, "one run expected, counters {}", gro.counters());
        let (m, mmeta) = &merged[0];
        if n == 1 {
            // A lone segment (here with PSH) is not coalesced: delivered as it came.
            prop_assert_eq!(m, out.get(0).unwrap());
            prop_assert_eq!(mmeta.gso, None);
            return Ok(());
        }
        prop_assert_eq!(m.len(), frame.len());

        // The merged frame's checksum fields hold what GRO leaves (the pseudo-header
        // sum inner, as the input had; the outer UDP one too when non-zero): compare
        // everything but the outer UDP checksum, which the input carried complete.
        let mut want = frame.clone();
        let mut got = m.clone();
        if let Some(t) = l.tunnel.filter(|t| t.kind != TunnelKind::Nvgre) {
            let at = usize::from(l.outer.l4_offset) + 6;
            prop_assert_eq!(got[at] == 0 && got[at + 1] == 0, !t.flags.outer_udp_csum);
            want[at..at + 2].fill(0);
            got[at..at + 2].fill(0);
        }
        let diff: Vec<usize> = (0..want.len()).filter(|&i| want[i] != got[i]).take(8).collect();
        prop_assert!(diff.is_empty(), "merged frame differs at {:?} (layout {:?})", diff, l);

        let g = mmeta.gso.unwrap();
        prop_assert_eq!((g.kind, g.size, g.tunnel), (kind, mss.min(len as u16), tunnel));
        prop_assert_eq!(usize::from(g.segs), n);
        prop_assert_eq!(mmeta.csum, Checksum::Partial { start: inner.l4_offset, offset: 16 });
    }
}
