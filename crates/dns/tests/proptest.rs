//! No input panics the parser or the resolver (the fuzz target's harness,
//! run here on random and mutated captured messages).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_dns::Message;
use proptest::prelude::*;

fn captured() -> Vec<Vec<u8>> {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata");
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    v.sort();
    v
}

proptest! {
    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = Message::parse(&data);
        linerate_dns::harness::dns(&data);
    }

    #[test]
    fn mutated_captures(
        which in any::<prop::sample::Index>(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let all = captured();
        let mut m = which.get(&all).clone();
        for (at, b) in flips {
            let i = at.index(m.len());
            m[i] = b;
        }
        let keep = cut.index(m.len() + 1);
        m.truncate(keep.max(m.len() / 2));
        let _ = Message::parse(&m);
        linerate_dns::harness::dns(&m);
    }
}

#[test]
fn the_harness_takes_every_capture() {
    for m in captured() {
        linerate_dns::harness::dns(&m);
    }
}
