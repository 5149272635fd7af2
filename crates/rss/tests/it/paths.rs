//! The portable and SIMD Toeplitz paths agree with each other on random inputs of
//! every hash type, single and batched, for a 40- and a 52-byte key, and with the
//! bitwise reference on a sample; the symmetric key hashes swapped tuples alike.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{KINDS, Rng, input};
use linerate_rss::toeplitz::{ALL_PATHS, bitwise};
use linerate_rss::{HashInput, Path, RssKey, Toeplitz};
use proptest::prelude::*;

fn agree(n: usize, seed: u64, keys: &[RssKey]) {
    let mut r = Rng(seed);
    for &key in keys {
        let portable = Toeplitz::with_path(&key, Path::Portable).unwrap();
        let simd: Vec<Toeplitz> = [Path::Clmul, Path::Vpclmul, Path::Gfni]
            .into_iter()
            .filter_map(|p| Toeplitz::with_path(&key, p).ok())
            .collect();
        if simd.is_empty() {
            eprintln!("note: no SIMD path on this CPU; only the portable path is checked");
        }
        for kind in KINDS {
            let inputs: Vec<HashInput> = (0..n).map(|_| input(kind, &mut r)).collect();
            let mut batch_p = vec![0u32; n];
            portable.hash_batch(&inputs, &mut batch_p);
            let want: Vec<u32> = inputs.iter().map(|i| portable.hash(i)).collect();
            assert_eq!(want, batch_p, "{kind} portable batch");
            for (i, inp) in inputs.iter().enumerate().step_by(1000) {
                assert_eq!(
                    want[i],
                    bitwise(key.as_bytes(), inp.as_bytes()),
                    "{kind} bitwise"
                );
            }
            for t in &simd {
                let mut batch = vec![0u32; n];
                t.hash_batch(&inputs, &mut batch);
                for (i, inp) in inputs.iter().enumerate() {
                    assert_eq!(
                        want[i],
                        t.hash(inp),
                        "{kind} {:?} {key:?} {inp:?}",
                        t.path()
                    );
                    assert_eq!(want[i], batch[i], "{kind} {:?} batch {inp:?}", t.path());
                }
                for (i, inp) in inputs.iter().enumerate().step_by(1000) {
                    assert_eq!(t.hash_bytes(inp.as_bytes()), Ok(want[i]));
                }
            }
        }
        // Arbitrary lengths up to the key's limit, bytes API.
        for len in 0..=key.max_input_len() {
            let b: Vec<u8> = (0..len).map(|_| r.next() as u8).collect();
            let want = bitwise(key.as_bytes(), &b);
            assert_eq!(portable.hash_bytes(&b), Ok(want), "len {len}");
            for t in &simd {
                assert_eq!(t.hash_bytes(&b), Ok(want), "{:?} len {len}", t.path());
            }
        }
    }
}

/// A million random inputs of each type with Microsoft's key: about 0.9 s at the
/// test profile's opt-level 1 on the development machine (0.5 s in release).
#[test]
fn paths_agree_million_per_type() {
    agree(1_000_000, 1, &[RssKey::MICROSOFT]);
}

/// 100,000 random inputs per type with the symmetric keys and a random 52-byte key.
#[test]
fn paths_agree_other_keys() {
    let random52 = RssKey::new(&Rng(3).bytes::<52>()).unwrap();
    agree(
        100_000,
        2,
        &[RssKey::SYMMETRIC, RssKey::SYMMETRIC_52, random52],
    );
}

#[test]
fn microsoft_key_is_not_symmetric() {
    let t = Toeplitz::new(&RssKey::MICROSOFT);
    let i = HashInput::tcp_ipv4([66, 9, 149, 187], [161, 142, 100, 80], 2794, 1766);
    assert_ne!(t.hash(&i), t.hash(&i.swapped()));
}

fn v4() -> impl Strategy<Value = [u8; 4]> {
    any::<[u8; 4]>()
}

fn v6() -> impl Strategy<Value = [u8; 16]> {
    any::<[u8; 16]>()
}

proptest! {
    #[test]
    fn symmetric_key_hashes_swapped_ipv4_alike(s in v4(), d in v4(), sp: u16, dp: u16) {
        for key in [RssKey::SYMMETRIC, RssKey::SYMMETRIC_52] {
            for path in ALL_PATHS {
                let Ok(t) = Toeplitz::with_path(&key, path) else { continue };
                for i in [
                    HashInput::ipv4(s, d),
                    HashInput::tcp_ipv4(s, d, sp, dp),
                    HashInput::udp_ipv4(s, d, sp, dp),
                ] {
                    prop_assert_eq!(t.hash(&i), t.hash(&i.swapped()));
                }
            }
        }
    }

    #[test]
    fn symmetric_key_hashes_swapped_ipv6_alike(s in v6(), d in v6(), sp: u16, dp: u16) {
        for key in [RssKey::SYMMETRIC, RssKey::SYMMETRIC_52] {
            for path in ALL_PATHS {
                let Ok(t) = Toeplitz::with_path(&key, path) else { continue };
                for i in [
                    HashInput::ipv6(s, d),
                    HashInput::tcp_ipv6(s, d, sp, dp),
                    HashInput::udp_ipv6(s, d, sp, dp),
                ] {
                    prop_assert_eq!(t.hash(&i), t.hash(&i.swapped()));
                }
            }
        }
    }

    #[test]
    fn paths_agree_on_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..=48)) {
        let key = RssKey::SYMMETRIC_52;
        let want = bitwise(key.as_bytes(), &b);
        for path in ALL_PATHS {
            let Ok(t) = Toeplitz::with_path(&key, path) else { continue };
            prop_assert_eq!(t.hash_bytes(&b), Ok(want));
        }
    }
}
