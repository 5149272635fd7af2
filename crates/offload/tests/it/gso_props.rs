//! GSO over every layout, checked independently (etherparse) and by linerate's
//! verifier: plain, VXLAN, GENEVE with options, NVGRE with and without GRE
//! checksum; IPv4/IPv6 outer and inner; TCP and UDP (USO); payloads up to 64 KiB;
//! MSS 536..9000; copying and zero-copy output; checksums completed or left
//! partial.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Spec, Super, Tunnel, build, check_segments};
use linerate_offload::gso::{
    CsumMode, HeaderSink, SegmentBuf, SegmentSink, Segmenter, ZeroCopyBuf,
};
use linerate_offload::{Checksum, OffloadMeta, csum};
use proptest::prelude::*;

/// Segments `sup` every way and checks each: copy and zero-copy, complete and
/// partial (completed afterwards as a backend would).
fn segment_every_way(spec: &Spec, sup: &Super) {
    let mut seg = Segmenter::new(CsumMode::Complete);
    let mut out = SegmentBuf::new();
    let n = seg.segment(&sup.frame, &sup.meta, &mut out).unwrap();
    assert_eq!(n, out.len());
    assert_eq!(out.csum(), Checksum::None);
    let segs: Vec<Vec<u8>> = out.iter().map(<[u8]>::to_vec).collect();
    check_segments(spec, sup, &segs);

    // Zero-copy: the same bytes, payloads pointing into the super-frame.
    let mut zc = ZeroCopyBuf::new();
    assert_eq!(
        seg.segment_zero_copy(&sup.frame, &sup.meta, &mut zc)
            .unwrap(),
        n
    );
    let hdr_len = sup.frame.len() - sup.payload.len();
    for (i, (h, p)) in zc.iter(&sup.frame).enumerate() {
        assert_eq!(h.len(), hdr_len);
        let mut whole = h.to_vec();
        whole.extend_from_slice(p);
        assert!(
            whole == segs[i],
            "{}: zero-copy segment {i} differs",
            spec.name()
        );
    }

    // Headers into lent buffers, payload left where it is (scatter-gather
    // heads): gathered, the same bytes; and the same checksum state.
    let mut heads = Heads::default();
    let (m, state) = seg
        .segment_headers_to(&sup.frame, &sup.meta, &mut heads)
        .unwrap();
    assert_eq!((m, state), (n, Checksum::None));
    let gathered: Vec<Vec<u8>> = heads
        .segs
        .iter()
        .map(|(h, p)| [&h[..], &sup.frame[p.clone()]].concat())
        .collect();
    assert!(
        gathered == segs,
        "{}: segment_headers_to differs",
        spec.name()
    );

    // Into lent buffers, payload copied and summed in one pass: the same bytes,
    // and they pass the independent checks on their own.
    let mut lent = Lent::default();
    let (m, state) = seg.segment_to(&sup.frame, &sup.meta, &mut lent).unwrap();
    assert_eq!((m, state), (n, Checksum::None));
    check_segments(spec, sup, &lent.frames);
    assert!(lent.frames == segs, "{}: segment_to differs", spec.name());

    // Left partial, then completed as a backend with checksum offload would.
    seg.set_mode(CsumMode::LeavePartial);
    let mut lent_partial = Lent::default();
    let (_, lent_state) = seg
        .segment_to(&sup.frame, &sup.meta, &mut lent_partial)
        .unwrap();
    let mut partial = SegmentBuf::new();
    seg.segment(&sup.frame, &sup.meta, &mut partial).unwrap();
    let Checksum::Partial { start, offset } = partial.csum() else {
        panic!("not partial: {:?}", partial.csum())
    };
    let l = linerate_wire::layout::parse(&sup.frame).unwrap();
    assert_eq!(usize::from(start), usize::from(l.innermost().l4_offset));
    assert_eq!(offset, if spec.udp { 6 } else { 16 });
    let meta = OffloadMeta {
        csum: partial.csum(),
        ..OffloadMeta::plain()
    };
    let completed: Vec<Vec<u8>> = partial
        .iter()
        .map(|f| {
            let mut f = f.to_vec();
            csum::complete(&mut f, &meta).unwrap();
            f
        })
        .collect();
    check_segments(spec, sup, &completed);
    assert_eq!(lent_state, partial.csum());
    let partial_frames: Vec<Vec<u8>> = partial.iter().map(<[u8]>::to_vec).collect();
    assert!(
        lent_partial.frames == partial_frames,
        "{}: partial segment_to differs",
        spec.name()
    );
    // Zero-copy and partial: the headers are those of the copying output.
    seg.segment_zero_copy(&sup.frame, &sup.meta, &mut zc)
        .unwrap();
    for i in 0..n {
        assert_eq!(zc.header(i).unwrap(), &partial.get(i).unwrap()[..hdr_len]);
    }
    assert_eq!(seg.stats().super_frames, 7);
    assert_eq!(seg.stats().segments, 7 * n as u64);
}

/// A [`HeaderSink`] lending fresh header buffers filled with junk, so a byte the
/// segmenter fails to write shows; keeps each segment's headers and payload range.
#[derive(Default)]
struct Heads {
    segs: Vec<(Vec<u8>, std::ops::Range<usize>)>,
    pending: Vec<u8>,
}

impl HeaderSink for Heads {
    fn header(&mut self, len: usize) -> Option<&mut [u8]> {
        self.pending = vec![0xa5; len];
        Some(&mut self.pending)
    }
    fn commit(&mut self, payload: std::ops::Range<usize>) {
        self.segs.push((std::mem::take(&mut self.pending), payload));
    }
}

/// A [`SegmentSink`] lending fresh buffers filled with junk, so a byte the
/// segmenter fails to write shows.
#[derive(Default)]
struct Lent {
    frames: Vec<Vec<u8>>,
    pending: Vec<u8>,
}

impl SegmentSink for Lent {
    fn buffer(&mut self, len: usize) -> Option<&mut [u8]> {
        self.pending = vec![0xa5; len];
        Some(&mut self.pending)
    }
    fn commit(&mut self) {
        self.frames.push(std::mem::take(&mut self.pending));
    }
}

fn tunnel() -> impl Strategy<Value = Tunnel> {
    prop_oneof![
        Just(Tunnel::None),
        Just(Tunnel::Vxlan),
        (0u8..=4).prop_map(|options| Tunnel::Geneve { options }),
        any::<bool>().prop_map(|csum| Tunnel::Nvgre { csum }),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        (tunnel(), any::<bool>(), any::<bool>(), any::<bool>()),
        prop_oneof![1usize..=3000, 1usize..=65536],
        536u16..=9000,
        any::<u16>(),
        (any::<u32>(), any::<u16>(), any::<u16>(), any::<u8>()),
    )
        .prop_map(
            |(
                (tunnel, ip_v6, outer_v6, udp),
                payload,
                mss,
                bits,
                (seq, ip_id, outer_ip_id, seed),
            )| {
                let bit = |n: u32| bits & (1 << n) != 0;
                Spec {
                    tunnel,
                    ip_v6,
                    outer_v6,
                    udp,
                    payload,
                    mss,
                    outer_csum: bit(0),
                    input_outer_csum: bit(1),
                    fixed_id: bit(2),
                    outer_fixed_id: bit(3),
                    fin: bit(4),
                    psh: bit(5),
                    cwr: bit(6),
                    ece: bit(7),
                    tcp_options: bit(8),
                    vlan: bit(9),
                    partial: bit(10),
                    seq,
                    ip_id,
                    outer_ip_id,
                    seed,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_layout_segments_by_the_rules(spec in spec()) {
        let sup = build(&spec);
        segment_every_way(&spec, &sup);
    }
}

/// Every layout, every IP version combination, TCP and UDP, 64 KiB at MSS 1448,
/// with every option on (outer checksum, CWR/FIN/PSH, VLAN).
#[test]
fn matrix_of_layouts_at_64k() {
    for tunnel in Tunnel::ALL {
        for outer_v6 in [false, true] {
            for ip_v6 in [false, true] {
                for udp in [false, true] {
                    if tunnel == Tunnel::None && outer_v6 {
                        continue;
                    }
                    let mut spec = Spec::new(tunnel, 65536, 1448);
                    spec.outer_v6 = outer_v6;
                    spec.ip_v6 = ip_v6;
                    spec.udp = udp;
                    spec.outer_csum = true;
                    spec.fin = true;
                    spec.cwr = true;
                    spec.vlan = true;
                    spec.seq = u32::MAX - 5000; // wraps
                    spec.ip_id = u16::MAX - 3; // wraps
                    let sup = build(&spec);
                    assert!(sup.payload.len() > 65_000, "{}", spec.name());
                    segment_every_way(&spec, &sup);
                }
            }
        }
    }
}

/// Payload of exactly one MSS, and one byte more.
#[test]
fn boundaries_around_one_mss() {
    for tunnel in Tunnel::ALL {
        for (payload, segs) in [
            (1, 1),
            (1447, 1),
            (1448, 1),
            (1449, 2),
            (2896, 2),
            (2897, 3),
        ] {
            let mut spec = Spec::new(tunnel, payload, 1448);
            spec.fin = true;
            let sup = build(&spec);
            let mut out = SegmentBuf::new();
            let n = Segmenter::default()
                .segment(&sup.frame, &sup.meta, &mut out)
                .unwrap();
            assert_eq!(n, segs, "{} payload {payload}", spec.name());
            let segs: Vec<Vec<u8>> = out.iter().map(<[u8]>::to_vec).collect();
            check_segments(&spec, &sup, &segs);
        }
    }
}

/// The checker is not vacuous: each kind of damage to a good segment list fails it.
#[test]
fn checker_catches_damage() {
    let mut spec = Spec::new(Tunnel::Vxlan, 5000, 1448);
    spec.outer_csum = true;
    spec.fin = true;
    let sup = build(&spec);
    let mut out = SegmentBuf::new();
    Segmenter::default()
        .segment(&sup.frame, &sup.meta, &mut out)
        .unwrap();
    let good: Vec<Vec<u8>> = out.iter().map(<[u8]>::to_vec).collect();
    check_segments(&spec, &sup, &good);
    let hdr_len = sup.frame.len() - sup.payload.len();
    let l4 = usize::from(
        linerate_wire::layout::parse(&sup.frame)
            .unwrap()
            .innermost()
            .l4_offset,
    );
    type Damage = fn(&mut Vec<Vec<u8>>, usize, usize);
    let damages: [(&str, Damage); 6] = [
        ("payload byte", |s, h, _| s[1][h + 7] ^= 1),
        ("sequence number", |s, _, l4| s[1][l4 + 7] ^= 1),
        ("FIN on a middle segment", |s, _, l4| s[1][l4 + 13] |= 1),
        ("outer IP ID", |s, _, _| s[2][14 + 5] ^= 1),
        ("dropped segment", |s, _, _| {
            s.remove(1);
        }),
        ("swapped segments", |s, _, _| s.swap(0, 1)),
    ];
    for (what, damage) in damages {
        let mut segs = good.clone();
        damage(&mut segs, hdr_len, l4);
        let caught = std::panic::catch_unwind(|| check_segments(&spec, &sup, &segs));
        assert!(caught.is_err(), "checker missed: {what}");
    }
}
