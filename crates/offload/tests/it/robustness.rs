//! Damaged input is an error, never a panic: super-frames with bytes flipped,
//! truncated or extended, segmented with random requests; random virtio headers
//! over them; checksum completion and verification of the same, with their own
//! layout and with the layout of the undamaged frame (stale).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Spec, Tunnel, build};
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter, ZeroCopyBuf};
use linerate_offload::virtio::{HdrLen, VirtioNetHdr};
use linerate_offload::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta, csum};
use linerate_wire::layout;
use proptest::prelude::*;

fn damaged() -> impl Strategy<Value = (Vec<u8>, OffloadMeta, layout::Layout)> {
    (
        (0usize..5, any::<bool>(), any::<bool>(), any::<bool>()),
        1usize..4000,
        proptest::collection::vec((any::<u16>(), any::<u8>()), 0..6),
        prop_oneof![
            Just(None),
            (0usize..200).prop_map(Some),
            (0usize..8).prop_map(|n| Some(n + 100_000))
        ],
    )
        .prop_map(|((t, ip_v6, outer_v6, udp), payload, flips, cut)| {
            let mut spec = Spec::new(Tunnel::ALL[t], payload, 536);
            (spec.ip_v6, spec.outer_v6, spec.udp) = (ip_v6, outer_v6, udp);
            let sup = build(&spec);
            let undamaged = layout::parse(&sup.frame).unwrap();
            let mut f = sup.frame;
            let hdr = undamaged.header_len();
            for (at, x) in flips {
                let i = usize::from(at) % hdr.max(1); // damage the headers
                f[i] ^= x;
            }
            match cut {
                Some(n) if n >= 100_000 => f.extend(std::iter::repeat_n(0, n - 100_000 + 1)),
                Some(n) => f.truncate(f.len().saturating_sub(n)),
                None => {}
            }
            (f, sup.meta, undamaged)
        })
}

fn request() -> impl Strategy<Value = Option<Gso>> {
    proptest::option::of(
        (
            0usize..3,
            0u16..3000,
            0usize..5,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(k, size, t, fixed_id, ecn)| {
                let kind = [GsoType::TcpV4, GsoType::TcpV6, GsoType::UdpL4][k];
                let mut g = Gso::new(kind, size);
                g.tunnel = [
                    GsoTunnel::None,
                    GsoTunnel::Udp { outer_csum: false },
                    GsoTunnel::Udp { outer_csum: true },
                    GsoTunnel::Gre { csum: false },
                    GsoTunnel::Gre { csum: true },
                ][t];
                (g.fixed_id, g.ecn) = (fixed_id, ecn);
                g
            }),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn damaged_frames_never_panic(
        (frame, meta, undamaged) in damaged(),
        gso in request(),
        stale in any::<bool>(),
        start in any::<u16>(), offset in 0u16..64,
        hdr_bytes in proptest::collection::vec(any::<u8>(), 24),
    ) {
        let layout = if stale { Some(undamaged) } else { layout::parse(&frame).ok() };
        let csum = if start % 3 == 0 { Checksum::Partial { start, offset } } else { meta.csum };
        let m = OffloadMeta { gso, csum, ..meta };
        for mode in [CsumMode::Complete, CsumMode::LeavePartial] {
            let mut s = Segmenter::new(mode);
            let mut out = SegmentBuf::new();
            if let Ok(n) = s.segment(&frame, &m, &mut out) {
                prop_assert_eq!(n, out.len());
            }
            let mut zc = ZeroCopyBuf::new();
            if let Ok(n) = s.segment_zero_copy(&frame, &m, &mut zc) {
                prop_assert_eq!(n, zc.len());
                for (h, p) in zc.iter(&frame) {
                    prop_assert!(h.len() + p.len() <= frame.len() + 256);
                }
            }
        }
        let mut f = frame.clone();
        let _ = csum::complete_with(&mut f, &m, csum::CompleteOptions { ipv4_headers: true, outer: true });
        if let Some(l) = &layout {
            let mut g = frame.clone();
            let opts = csum::CompleteOptions { ipv4_headers: true, outer: true };
            let _ = csum::complete_layout(&mut g, l, &m, opts);
            let _ = csum::verify(&frame, l);
            let _ = csum::prepare_partial(&mut f, l);
        }
        for len in [HdrLen::Legacy, HdrLen::V1, HdrLen::V1Hash, HdrLen::V1HashTunnel] {
            let h = VirtioNetHdr::read(&hdr_bytes, len).unwrap();
            if let Ok(m) = h.to_meta(&frame) {
                // What virtio accepted, GSO handles or refuses cleanly.
                let mut out = SegmentBuf::new();
                let _ = Segmenter::default().segment(&frame, &m, &mut out);
                let back = VirtioNetHdr::from_meta(&m, &frame).unwrap();
                prop_assert_eq!(back.to_meta(&frame).unwrap(), m);
            }
        }
        let _ = VirtioNetHdr::from_meta(&m, &frame);
    }
}
