//! Streams for the GRO proptests that compare two ways of feeding GRO
//! (`gro_split.rs`: whole against in two parts; `gro_chain.rs`: copying
//! against frag-list): two flows of GSO-made segments of any layout (plain,
//! VXLAN, GENEVE with options, NVGRE with and without checksum; IPv4/IPv6),
//! interleaved at random, with corrupt bytes anywhere and in the headers.
//! Included by path next to `common`.
#![allow(dead_code, clippy::unwrap_used, clippy::indexing_slicing)]

use super::common::{Spec, Tunnel, build};
use linerate_offload::{CsumMode, SegmentBuf, Segmenter};
use proptest::prelude::*;

/// The segments GSO makes of `spec`'s super-frame.
pub fn segments(spec: &Spec) -> Vec<Vec<u8>> {
    let sup = build(spec);
    let mut out = SegmentBuf::new();
    Segmenter::new(CsumMode::Complete)
        .segment(&sup.frame, &sup.meta, &mut out)
        .unwrap();
    out.iter().map(<[u8]>::to_vec).collect()
}

/// A TCP flow of `payload` bytes in `mss` segments; `seed` picks its options
/// (outer checksum, fixed outer ID, PSH, FIN, TCP options, VLAN) and sequence
/// numbers.
pub fn spec(tunnel: Tunnel, v6: bool, outer_v6: bool, payload: usize, mss: u16, seed: u8) -> Spec {
    Spec {
        tunnel,
        ip_v6: v6,
        outer_v6,
        udp: false,
        payload,
        mss,
        outer_csum: seed & 1 != 0,
        input_outer_csum: false,
        fixed_id: false,
        outer_fixed_id: seed & 2 != 0,
        fin: seed & 32 != 0,
        psh: seed & 4 != 0,
        cwr: false,
        ece: false,
        tcp_options: seed & 8 != 0,
        vlan: seed & 16 != 0,
        partial: true,
        seq: u32::from(seed) << 20,
        ip_id: u16::from(seed) * 7,
        outer_ip_id: 1,
        seed,
    }
}

/// Any tunnel (or none).
pub fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::None),
        Just(Tunnel::Vxlan),
        (0u8..=3).prop_map(|options| Tunnel::Geneve { options }),
        any::<bool>().prop_map(|csum| Tunnel::Nvgre { csum }),
    ]
}

/// Two flows (different seeds: different sequence numbers; the layouts may be
/// the same), interleaved at random, each in its order, then up to three bytes
/// corrupted anywhere and up to three in the first 100 bytes, where the headers
/// are (the fields a segment may change without ending its run among them).
pub fn stream() -> impl Strategy<Value = Vec<Vec<u8>>> {
    (
        (tunnel(), tunnel()),
        any::<(bool, bool, bool, bool)>(),
        (1usize..30_000, 1usize..30_000),
        536u16..=1400,
        any::<(u8, u8)>(),
        proptest::collection::vec(any::<bool>(), 0..200),
        proptest::collection::vec((any::<u16>(), any::<u16>(), any::<u8>()), 0..3),
        proptest::collection::vec((any::<u16>(), 0u16..100, any::<u8>()), 0..3),
    )
        .prop_map(
            |((t1, t2), v, len, mss, seeds, order, corrupt, in_headers)| {
                let mut f1 = segments(&spec(t1, v.0, v.1, len.0, mss, seeds.0));
                let mut f2 = segments(&spec(t2, v.2, v.3, len.1, mss, seeds.1.wrapping_add(1)));
                f1.reverse();
                f2.reverse();
                let mut frames = Vec::new();
                for pick in order.iter().copied().chain(std::iter::repeat(true)) {
                    let from = if pick { &mut f1 } else { &mut f2 };
                    match from.pop().or_else(|| f1.pop()).or_else(|| f2.pop()) {
                        Some(f) => frames.push(f),
                        None => break,
                    }
                }
                for &(which, at, bit) in corrupt.iter().chain(&in_headers) {
                    if frames.is_empty() {
                        break;
                    }
                    let i = usize::from(which) % frames.len();
                    let j = usize::from(at) % frames[i].len();
                    frames[i][j] ^= 1 << (bit % 8);
                }
                frames
            },
        )
}
