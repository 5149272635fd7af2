//! The `engine` fuzz target's entry point (`linerate_toe::harness::engine`) on
//! seeded inputs, so its invariants are checked in every `cargo test` and not only
//! under cargo-fuzz: structured inputs (`harness::engine_input`: a peer and an
//! application mostly behaving, with stale, out-of-order and raw frames mixed in)
//! and plain random bytes. A failure prints the seed and the input in hex; write
//! it to a file and run `cargo +nightly fuzz run engine <file>` from fuzz/ to debug.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use linerate_toe::harness;

fn run(what: &str, seed: u64, data: &[u8]) {
    let r = std::panic::catch_unwind(|| harness::engine(data));
    assert!(
        r.is_ok(),
        "{what} seed {seed}: invariant broken; input (hex) {}",
        data.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
}

#[test]
fn structured_inputs_keep_the_invariants() {
    for seed in 0..600u64 {
        let data = harness::engine_input(seed, 20 + (seed as usize * 7) % 300);
        run("structured", seed, &data);
    }
}

#[test]
fn random_inputs_keep_the_invariants() {
    for seed in 0..600u64 {
        let data = common::pattern(64 + (seed as usize * 37) % 2_000, seed * 0x9e37 + 1);
        run("random", seed, &data);
    }
}

/// Runs the harness on the file named by `LINERATE_ENGINE_INPUT` (a fuzzer crash
/// or a corpus entry), outside the fuzzer and its sanitizers.
#[test]
#[ignore = "replays one input: LINERATE_ENGINE_INPUT=<file>"]
fn replay_one_input() {
    let path = std::env::var("LINERATE_ENGINE_INPUT").expect("set LINERATE_ENGINE_INPUT");
    harness::engine(&std::fs::read(path).unwrap());
}
