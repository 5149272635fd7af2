//! The bytes each end of a connection writes, by stream offset: the data the
//! harness sends and checks. Each stream repeats with a period (a power of
//! two that divides 2^32, so a wrapped sequence number still finds its byte),
//! so runs of it are slices of a table built once: a segment's payload is a
//! slice and a check a comparison, not a loop over bytes (the byte loops were
//! most of an input's time under the fuzzer's instrumentation).

use std::sync::OnceLock;

/// Connections whose streams have tables (the harness's two).
pub(super) const CONNS: usize = 2;

/// The longest run asked for at once.
pub(super) const MAX_RUN: usize = 1 << 16;

/// `app_byte(k, o)` repeats every this many bytes: `o * 131` every 2^8,
/// `o >> 9` (as a byte) every 2^17.
const APP_PERIOD: u64 = 1 << 17;

/// `peer_byte(k, o)` repeats every this many bytes: `o * 197` every 2^8,
/// `o >> 7` (as a byte) every 2^15.
const PEER_PERIOD: u32 = 1 << 15;

/// The byte the application writes at offset `o` of connection `k`'s stream.
pub(super) fn app_byte(k: usize, o: u64) -> u8 {
    (o.wrapping_mul(131).wrapping_add(o >> 9) as u8) ^ (k as u8).wrapping_mul(0x5b)
}

/// The byte the peer sends at offset `o` of its stream on connection `k`.
pub(super) fn peer_byte(k: usize, o: u32) -> u8 {
    (o.wrapping_mul(197).wrapping_add(o >> 7) as u8) ^ (k as u8).wrapping_mul(0x3d) ^ 0xa5
}

struct Tables {
    /// One period and [`MAX_RUN`] bytes more of each stream, by connection.
    app: [Vec<u8>; CONNS],
    peer: [Vec<u8>; CONNS],
    /// For each byte `i` of `peer`, the sum of the 16-bit words that start
    /// at `i - 2`, `i - 4`, ... (every second byte before it): the checksum
    /// of a run of the stream is a difference, not a pass over it.
    peer_sums: [Vec<u64>; CONNS],
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| Tables {
        app: std::array::from_fn(|k| {
            (0..APP_PERIOD + MAX_RUN as u64)
                .map(|o| app_byte(k, o))
                .collect()
        }),
        peer: std::array::from_fn(|k| {
            (0..PEER_PERIOD + MAX_RUN as u32)
                .map(|o| peer_byte(k, o))
                .collect()
        }),
        peer_sums: std::array::from_fn(|k| {
            let len = (PEER_PERIOD + MAX_RUN as u32) as usize;
            let word = |i: usize| {
                u64::from(peer_byte(k, i as u32)) << 8
                    | if i + 1 < len {
                        u64::from(peer_byte(k, i as u32 + 1))
                    } else {
                        0
                    }
            };
            let mut sums = vec![0u64; len + 2];
            for i in 0..len {
                sums[i + 2] = sums[i] + word(i);
            }
            sums
        }),
    })
}

/// `len` bytes (at most [`MAX_RUN`]) the application of connection `k` (below
/// [`CONNS`]) writes from offset `o` on.
pub(super) fn app_bytes(k: usize, o: u64, len: usize) -> &'static [u8] {
    let at = (o % APP_PERIOD) as usize;
    &tables().app[k % CONNS][at..at + len.min(MAX_RUN)]
}

/// `len` bytes (at most [`MAX_RUN`]) the peer of connection `k` (below
/// [`CONNS`]) sends from offset `o` on.
pub(super) fn peer_bytes(k: usize, o: u32, len: usize) -> &'static [u8] {
    let at = (o % PEER_PERIOD) as usize;
    &tables().peer[k % CONNS][at..at + len.min(MAX_RUN)]
}

/// The 16-bit one's complement sum (unfolded) of [`peer_bytes`]`(k, o, len)`
/// read as big-endian words from its first byte, a last odd byte padded with
/// zero: what a checksum over it adds.
pub(super) fn peer_sum(k: usize, o: u32, len: usize) -> u64 {
    let t = tables();
    let at = (o % PEER_PERIOD) as usize;
    let len = len.min(MAX_RUN);
    let sums = &t.peer_sums[k % CONNS];
    let words = len / 2;
    let mut sum = sums[at + 2 * words] - sums[at];
    if len % 2 == 1 {
        sum += u64::from(t.peer[k % CONNS][at + len - 1]) << 8;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold64(mut s: u64) -> u16 {
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn tables_hold_the_streams_across_their_periods_and_wraps() {
        for k in 0..CONNS {
            for o in [
                0u64,
                1,
                511,
                70_000,
                (1 << 17) - 3,
                5 << 30,
                u64::from(u32::MAX) - 2,
            ] {
                let run = app_bytes(k, o, 1000);
                for (i, &b) in run.iter().enumerate() {
                    assert_eq!(b, app_byte(k, o + i as u64), "app {k} at {o}+{i}");
                }
            }
            for o in [0u32, 127, 32_760, 1 << 20, u32::MAX - 5] {
                let run = peer_bytes(k, o, 1000);
                for (i, &b) in run.iter().enumerate() {
                    assert_eq!(
                        b,
                        peer_byte(k, o.wrapping_add(i as u32)),
                        "peer {k} at {o}+{i}"
                    );
                }
            }
            for (o, len) in [
                (0u32, 0usize),
                (1, 1),
                (7, 1448),
                (32_767, 3),
                (u32::MAX - 9, MAX_RUN),
            ] {
                let want = linerate_wire::checksum::partial(peer_bytes(k, o, len), 0);
                assert_eq!(
                    linerate_wire::checksum::fold(want),
                    fold64(peer_sum(k, o, len)),
                    "sum {k} at {o}+{len}"
                );
            }
            assert_eq!(app_bytes(k, 12_345, MAX_RUN).len(), MAX_RUN);
            assert_eq!(peer_bytes(k, u32::MAX, MAX_RUN).len(), MAX_RUN);
        }
    }
}
