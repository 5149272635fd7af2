//! Writes the seeds of `fuzz/corpus/tunnel` (run by hand) and checks that the
//! seeds exercise both delivery and refusal through the harness.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_tunnel::harness::{self, LOCAL_MAC, REMOTE_MAC, V4, V6};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::geneve::GeneveOption;

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let inner = || FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1000, 80));
    for v6 in [false, true] {
        let outer = || {
            if v6 {
                Ip::v6(V6.1, V6.0)
            } else {
                Ip::v4(V4.1, V4.0)
            }
        };
        let opt = [GeneveOption {
            class: 0x0102,
            kind: 0x80,
            data: &[1, 2, 3, 4],
        }];
        let frames = [
            (
                "vxlan",
                0u8,
                inner().vxlan(42, outer()).outer_udp_checksum(v6),
            ),
            (
                "vxlan-vni2",
                16,
                inner().vxlan(0xabcdef, outer()).outer_udp_checksum(v6),
            ),
            (
                "vxlan-unknown",
                0,
                inner().vxlan(7, outer()).outer_udp_checksum(v6),
            ),
            (
                "geneve",
                1,
                inner().geneve(42, &opt, outer()).outer_udp_checksum(v6),
            ),
            (
                "geneve-noopt",
                1,
                inner().geneve(42, &[], outer()).outer_udp_checksum(v6),
            ),
            ("nvgre", 2, inner().nvgre(42, 3, outer())),
        ];
        for (name, sel, b) in frames {
            let sel = sel | if v6 { 4 } else { 0 };
            let f = b.macs(REMOTE_MAC, LOCAL_MAC).build(b"fuzz seed payload");
            out.push((
                format!("seed-{name}-v{}", if v6 { 6 } else { 4 }),
                [&[sel][..], &f].concat(),
            ));
            out.push((
                format!("seed-{name}-v{}-verified", if v6 { 6 } else { 4 }),
                [&[sel | 32][..], &f].concat(),
            ));
        }
    }
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&REMOTE_MAC);
    arp.extend_from_slice(&[8, 6]);
    let mut body = [0u8; 28];
    linerate_wire::arp::emit_request(&mut body, REMOTE_MAC, V4.1, V4.0).unwrap();
    arp.extend_from_slice(&body);
    out.push(("seed-arp".into(), [&[0u8][..], &arp].concat()));
    out
}

#[test]
fn seeds_deliver_and_refuse_without_panicking() {
    for (_, s) in seeds() {
        harness::receive(&s);
    }
}

#[test]
#[ignore = "rewrites fuzz/corpus/tunnel seeds; run by hand"]
fn regenerate_seeds() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/tunnel");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, s) in seeds() {
        std::fs::write(dir.join(name), s).unwrap();
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]

    /// A poor man's fuzzer for CI: seeds with bytes flipped and cut short.
    #[test]
    fn mutated_seeds_keep_the_invariants(
        which in 0usize..64,
        flips in proptest::collection::vec((0usize..200, proptest::prelude::any::<u8>()), 0..6),
        cut in proptest::prelude::any::<proptest::sample::Index>(),
        sel in proptest::prelude::any::<u8>(),
    ) {
        let seeds = seeds();
        let mut s = seeds[which % seeds.len()].1.clone();
        for (at, x) in flips {
            let n = s.len();
            s[at % n] ^= x;
        }
        s[0] ^= sel & 0x3f;
        let keep = cut.index(s.len() + 1);
        s.truncate(keep.max(1));
        harness::receive(&s);
    }
}
