//! The fuzz harness (`linerate_dhcp::harness::dhcp`: the parser and the
//! client driven by the same bytes) over arbitrary bytes and over dnsmasq's
//! captured replies with bytes flipped, cut into client steps: no panic, no
//! broken invariant.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_dhcp::harness::{STEP, dhcp};
use proptest::prelude::*;

fn capture(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..700)) {
        dhcp(&data);
    }

    #[test]
    fn mutated_exchanges(
        flips in proptest::collection::vec((0usize..300, any::<u8>()), 0..6),
        steps in proptest::collection::vec(0u8..6, 1..12),
    ) {
        let (mut offer, mut ack, nak) = (capture("offer"), capture("ack"), capture("nak"));
        for &(at, x) in &flips {
            if at % 2 == 0 { offer[at] ^= x } else { ack[at] ^= x }
        }
        let mut input = Vec::new();
        for s in steps {
            let step: Vec<u8> = match s {
                0 => [&[0u8][..], &offer].concat(),
                1 => [&[0u8][..], &ack].concat(),
                2 => [&[0u8][..], &nak].concat(),
                3 => vec![1, 10, 38, 0, 90],
                4 => vec![2],
                _ => vec![3],
            };
            input.extend_from_slice(&step);
            input.extend_from_slice(STEP);
        }
        dhcp(&input);
    }
}
