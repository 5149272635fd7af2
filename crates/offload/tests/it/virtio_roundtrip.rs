//! virtio_net_hdr round trips for every GSO kind: OffloadMeta -> header -> bytes
//! -> header -> OffloadMeta gives back the meta, for TCPv4, TCPv6 and USO, plain
//! and in VXLAN and GENEVE over IPv4 and IPv6, with ECN, outer checksum, every
//! checksum state and receive hashes; the decoded meta then segments correctly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Spec, Tunnel, build, check_segments};
use linerate_offload::gso::{SegmentBuf, Segmenter};
use linerate_offload::virtio::{HdrLen, VirtioError, VirtioNetHdr};
use linerate_offload::{Checksum, RssHash, RssHashType};
use proptest::prelude::*;

const HASHES: [RssHashType; 6] = [
    RssHashType::Ipv4,
    RssHashType::TcpIpv4,
    RssHashType::UdpIpv4,
    RssHashType::Ipv6,
    RssHashType::TcpIpv6,
    RssHashType::UdpIpv6,
];

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::None),
        Just(Tunnel::Vxlan),
        (0u8..=3).prop_map(|options| Tunnel::Geneve { options }),
        any::<bool>().prop_map(|csum| Tunnel::Nvgre { csum }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn meta_survives_the_header(
        (tunnel, ip_v6, outer_v6, udp) in (tunnel(), any::<bool>(), any::<bool>(), any::<bool>()),
        payload in 1usize..9000,
        mss in 1u16..=9000,
        (ecn, outer_csum, gso_on) in (any::<bool>(), any::<bool>(), any::<bool>()),
        csum_kind in 0u8..4,
        segs in any::<u16>(),
        rss in proptest::option::of((any::<u32>(), 0usize..6)),
        len in prop_oneof![
            Just(HdrLen::Legacy), Just(HdrLen::V1), Just(HdrLen::V1Hash), Just(HdrLen::V1HashTunnel)
        ],
    ) {
        let mut spec = Spec::new(tunnel, payload, mss);
        (spec.ip_v6, spec.outer_v6, spec.udp, spec.outer_csum) = (ip_v6, outer_v6, udp, outer_csum);
        spec.cwr = ecn && !udp;
        let sup = build(&spec);
        let mut meta = sup.meta;
        let g = meta.gso.as_mut().unwrap();
        g.ecn = ecn;
        let udp_tunnel = matches!(tunnel, Tunnel::Vxlan | Tunnel::Geneve { .. });
        // Tunnel GSO travels with a partial checksum only; otherwise any state.
        if !(gso_on && udp_tunnel) {
            meta.csum = match csum_kind {
                0 => meta.csum,
                1 => Checksum::None,
                k => Checksum::Verified { levels: k - 1 },
            };
        }
        if matches!(meta.csum, Checksum::Verified { .. }) {
            meta.gso.as_mut().unwrap().segs = segs;
        }
        if !gso_on {
            meta.gso = None;
        }
        meta.rss = rss.map(|(value, k)| RssHash { value, kind: HASHES[k] });

        let hdr = VirtioNetHdr::from_meta(&meta, &sup.frame);
        if gso_on && matches!(tunnel, Tunnel::Nvgre { .. }) {
            prop_assert_eq!(hdr, Err(VirtioError::Unrepresentable));
            return Ok(());
        }
        let hdr = hdr.unwrap();
        let mut buf = [0u8; 24];
        let written = hdr.write(&mut buf, len);
        if gso_on && udp_tunnel && len != HdrLen::V1HashTunnel {
            prop_assert_eq!(written, Err(VirtioError::NeedsTunnelHeader));
            return Ok(());
        }
        prop_assert_eq!(written, Ok(len.bytes()));
        let read = VirtioNetHdr::read(&buf, len).unwrap();
        let back = read.to_meta(&sup.frame).unwrap();
        let mut want = meta;
        if !matches!(len, HdrLen::V1Hash | HdrLen::V1HashTunnel) {
            want.rss = None; // a short header has no hash
        }
        prop_assert_eq!(back, want);

        // What came out of the header segments as the original asked.
        if gso_on && mss >= 536 {
            let mut out = SegmentBuf::new();
            Segmenter::default().segment(&sup.frame, &back, &mut out).unwrap();
            let segs: Vec<Vec<u8>> = out.iter().map(<[u8]>::to_vec).collect();
            check_segments(&spec, &sup, &segs);
        }
    }
}
