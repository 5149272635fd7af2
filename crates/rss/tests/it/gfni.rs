//! The GFNI Toeplitz path ([`Path::Gfni`]) against the portable tables: random
//! inputs of every hash type, single and batched (even and odd batch lengths, mixed
//! types in one batch), Microsoft's key and random 40- and 52-byte keys, the bytes
//! API at every length, and Microsoft's published verification values. Where the
//! CPU lacks GFNI or the AVX-512 parts the path uses, each test prints that it
//! skipped and returns.
//!
//! Inputs per type: 1,000,000 when the test binary is built with optimisations
//! (`cargo test --release`) or the `_million` test is run with `--ignored`, 20,000
//! in the default debug build (CI's).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{KINDS, Rng, input};
use linerate_rss::toeplitz::bitwise;
use linerate_rss::{HashInput, Path, RssKey, Toeplitz};

/// Inputs per hash type in the default run.
const DEFAULT_N: usize = if cfg!(debug_assertions) {
    20_000
} else {
    1_000_000
};

/// The GFNI and portable hashers for `key`, or `None` (and a note) without GFNI.
fn pair(key: &RssKey) -> Option<(Toeplitz, Toeplitz)> {
    let Ok(g) = Toeplitz::with_path(key, Path::Gfni) else {
        eprintln!("skipped: this CPU lacks GFNI / AVX-512F/BW/VBMI; Path::Gfni not checked");
        return None;
    };
    Some((g, Toeplitz::with_path(key, Path::Portable).unwrap()))
}

fn agree(n: usize, seed: u64, key: &RssKey) {
    let Some((g, p)) = pair(key) else { return };
    assert_eq!(g.path(), Path::Gfni);
    let mut r = Rng(seed);
    for kind in KINDS {
        let inputs: Vec<HashInput> = (0..n).map(|_| input(kind, &mut r)).collect();
        let want: Vec<u32> = inputs.iter().map(|i| p.hash(i)).collect();
        let mut batch = vec![0u32; n];
        g.hash_batch(&inputs, &mut batch);
        for (i, inp) in inputs.iter().enumerate() {
            assert_eq!(g.hash(inp), want[i], "{kind} {key:?} {inp:?}");
            assert_eq!(batch[i], want[i], "{kind} batch {key:?} {inp:?}");
        }
        for (i, inp) in inputs.iter().enumerate().step_by(997) {
            assert_eq!(g.hash_bytes(inp.as_bytes()), Ok(want[i]), "{kind} bytes");
            assert_eq!(bitwise(key.as_bytes(), inp.as_bytes()), want[i]);
        }
    }
}

#[test]
fn gfni_matches_portable_microsoft_key() {
    agree(DEFAULT_N, 11, &RssKey::MICROSOFT);
}

/// A million inputs per type even in a debug build (about 1.5 s at the test
/// profile's opt-level 1 on the development machine).
#[test]
#[ignore = "slow in debug builds; the release run does a million by default"]
fn gfni_matches_portable_million() {
    agree(1_000_000, 12, &RssKey::MICROSOFT);
}

#[test]
fn gfni_matches_portable_random_keys() {
    let mut r = Rng(13);
    for round in 0..4 {
        let key = if round % 2 == 0 {
            RssKey::new(&r.bytes::<40>()).unwrap()
        } else {
            RssKey::new(&r.bytes::<52>()).unwrap()
        };
        agree(DEFAULT_N / 10, 14 + round, &key);
    }
    agree(DEFAULT_N / 10, 20, &RssKey::SYMMETRIC);
}

/// Mixed types in one batch, every batch length 0..=9, and `out` shorter or longer
/// than `inputs` (the odd input left over, and the pairs' lengths mismatched).
#[test]
fn gfni_batch_mixed_and_odd() {
    let key = RssKey::new(&Rng(21).bytes::<52>()).unwrap();
    let Some((g, p)) = pair(&key) else { return };
    let mut r = Rng(22);
    for round in 0..200usize {
        let n = round % 10;
        let inputs: Vec<HashInput> = (0..n)
            .map(|_| input(KINDS[r.below(6) as usize], &mut r))
            .collect();
        let m = (n + round % 3).saturating_sub(1);
        let mut out = vec![0xdead_beef_u32; m];
        g.hash_batch(&inputs, &mut out);
        for (j, o) in out.iter().enumerate() {
            match inputs.get(j) {
                Some(i) => assert_eq!(*o, p.hash(i), "n {n} m {m} at {j}"),
                None => assert_eq!(*o, 0xdead_beef, "n {n} m {m}: slot {j} untouched"),
            }
        }
    }
}

/// The bytes API at every length up to the key's limit, against the bitwise
/// reference (Microsoft's definition).
#[test]
fn gfni_bytes_every_length() {
    let mut r = Rng(23);
    for key in [
        RssKey::MICROSOFT,
        RssKey::SYMMETRIC_52,
        RssKey::new(&r.bytes::<52>()).unwrap(),
    ] {
        let Some((g, _)) = pair(&key) else { return };
        for len in 0..=key.max_input_len() {
            for _ in 0..20 {
                let b: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
                assert_eq!(
                    g.hash_bytes(&b),
                    Ok(bitwise(key.as_bytes(), &b)),
                    "len {len}"
                );
            }
        }
    }
}

/// Microsoft's verification table ("Verifying the RSS Hash Calculation"), IPv4.
#[test]
fn gfni_microsoft_vectors() {
    let Some((g, _)) = pair(&RssKey::MICROSOFT) else {
        return;
    };
    let text = include_str!("../data/rss_vectors_ipv4.txt");
    let mut rows = 0;
    for l in text.lines().map(str::trim) {
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = l.split(',').map(str::trim).collect();
        let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
        let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
        let (s, d) = (ip(f[1]), ip(f[3]));
        let (sp, dp) = (f[2].parse().unwrap(), f[4].parse().unwrap());
        assert_eq!(g.hash(&HashInput::ipv4(s, d)), hex(f[5]), "{l}");
        assert_eq!(g.hash(&HashInput::tcp_ipv4(s, d, sp, dp)), hex(f[6]), "{l}");
        let mut out = [0u32; 2];
        g.hash_batch(
            &[HashInput::ipv4(s, d), HashInput::udp_ipv4(s, d, sp, dp)],
            &mut out,
        );
        assert_eq!(out, [hex(f[5]), hex(f[6])], "{l} batched");
        rows += 1;
    }
    assert_eq!(rows, 5);
}
