//! Structured inputs for the `engine` target ([`engine_input`]): the seeds of
//! its corpus and of the tests that run the harness without a fuzzer.

/// A structured input for [`super::engine`] from `seed`: mostly what a well-behaved
/// peer and application do (in-order data acknowledging everything sent, time
/// passing, reads and writes), with some out-of-order and stale segments,
/// receive batches with holes, duplicates and reordering, closes, SYNs to the
/// listener, and now and then a raw frame. Seeds the fuzz corpus and
/// the tests that run the harness without a fuzzer.
pub fn engine_input(seed: u64, steps: usize) -> Vec<u8> {
    let mut rng = crate::rng::Rng::new(seed);
    let mut r = |n: u64| rng.below(n.max(1));
    let mut v = vec![r(256) as u8, r(256) as u8];
    for _ in 0..steps {
        let k = r(2) as u8;
        match r(100) {
            0..=39 => {
                // A segment: op 0 or 1.
                v.push((k << 4) | r(2) as u8);
                let fin = r(40) == 0;
                v.push(if fin {
                    0x01
                } else {
                    [0x00, 0x08][r(2) as usize]
                });
                let seq_mode = [0u8, 0, 0, 0, 1, 2][r(6) as usize];
                let ack_mode = [0u8, 0, 0, 1][r(4) as usize];
                let len_mode = [0u8, 4, 4, 5, 6][r(5) as usize];
                v.push(1 | (seq_mode << 1) | (ack_mode << 3) | (len_mode << 5));
                if seq_mode != 0 {
                    v.extend_from_slice(&(r(4000) as u16).to_le_bytes());
                }
                if ack_mode == 1 {
                    v.extend_from_slice(&(r(3000) as u16).to_le_bytes());
                }
                v.extend_from_slice(&(r(65_536) as u16 | 0x0400).to_le_bytes());
                let opt_sel = r(4) as u8;
                v.push(opt_sel);
                if opt_sel & 1 != 0 {
                    v.extend_from_slice(&(1_000 + r(1000) as u32).to_le_bytes());
                }
                if opt_sel & 2 != 0 {
                    v.extend_from_slice(&(r(8000) as u16).to_le_bytes());
                    v.extend_from_slice(&(r(3000) as u16).to_le_bytes());
                }
                if len_mode >= 4 {
                    v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
                }
                v.push([0u8, 1, 2 | (22 << 2)][r(3) as usize]);
            }
            40..=44 => {
                // A batch (op 2): from the peer's next sequence number, MSS
                // or 1000-byte segments, one in eight lost, one in sixteen
                // twice, a few swapped.
                v.push((k << 4) | 2);
                v.push(r(64) as u8);
                let ts = r(2) as u8;
                v.push(1 | ([0u8, 2][r(2) as usize] << 1) | ts << 3 | 0x10);
                let mask = |r: &mut dyn FnMut(u64) -> u64, one_in: u64| {
                    (0..64).fold(0u64, |m, i| m | u64::from(r(one_in) == 0) << i)
                };
                let holes = mask(&mut r, 8);
                let dups = mask(&mut r, 16);
                v.extend_from_slice(&holes.to_le_bytes());
                v.extend_from_slice(&dups.to_le_bytes());
                if ts != 0 {
                    v.extend_from_slice(&(r(1 << 20) as u32 + 1000).to_le_bytes());
                }
                let swaps = r(4) as u8;
                v.push(swaps);
                for _ in 0..2 * swaps {
                    v.push(r(256) as u8);
                }
                v.extend_from_slice(&(r(65_536) as u16 | 0x0400).to_le_bytes());
            }
            45..=59 => {
                v.push(4);
                let mode = [3u16, 3, 1, 0][r(4) as usize];
                v.extend_from_slice(&(mode | ((r(4000) as u16) << 2)).to_le_bytes());
            }
            60..=74 => {
                v.push((k << 4) | 5);
                v.extend_from_slice(&(r(20_000) as u16).to_le_bytes());
            }
            75..=89 => {
                v.push((k << 4) | 6);
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            90..=93 => {
                v.push((k << 4) | 7);
                v.push(r(4) as u8);
            }
            94..=97 => {
                v.push(8);
                v.push(r(256) as u8 | 0x80);
                v.extend_from_slice(&(r(u64::from(u32::MAX)) as u32).to_le_bytes());
                v.extend_from_slice(&(r(u64::from(u32::MAX)) as u32).to_le_bytes());
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            98 => {
                v.push(9);
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            _ => {
                v.push(3);
                let n = r(80) as u16;
                v.extend_from_slice(&n.to_le_bytes());
                v.extend((0..n).map(|_| r(256) as u8));
            }
        }
    }
    v
}
