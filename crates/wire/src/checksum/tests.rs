use super::*;

/// The reference: big-endian byte pairs into a `u64`, folded. Deliberately naive.
fn naive(data: &[u8], initial: u32) -> u16 {
    let mut acc = u64::from(initial);
    for pair in data.chunks(2) {
        let hi = u64::from(pair[0]);
        let lo = u64::from(pair.get(1).copied().unwrap_or(0));
        acc += (hi << 8) | lo;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// SplitMix64: a seeded generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Every kernel that runs here, checked to include AVX2 where the CPU has it, so a
/// broken detection cannot quietly skip the vector kernel.
fn kernels() -> &'static [Implementation] {
    let imps = available();
    #[cfg(target_arch = "x86_64")]
    {
        assert_eq!(
            imps.contains(&Implementation::Avx2),
            std::arch::is_x86_feature_detected!("avx2")
        );
        assert_eq!(
            imps.contains(&Implementation::Avx512),
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
        );
    }
    imps
}

/// Every kernel this build knows, with those the CPU lacks reported as skipped.
fn chunk_kernels() -> Vec<Implementation> {
    let imps = kernels();
    for imp in Implementation::ALL {
        if !imps.contains(imp) {
            println!("{}: skipped (this CPU lacks it)", imp.name());
        }
    }
    imps.to_vec()
}

/// `partial_chunks_with(imp, data, size, ..)` against the naive sum of each piece.
fn check_chunks(imp: Implementation, data: &[u8], size: usize, slots: usize, what: &str) {
    let mut sums = vec![0x5a5a_5a5a; slots];
    let got = partial_chunks_with(imp, data, size, &mut sums);
    let pieces = if size == 0 {
        0
    } else {
        data.len().div_ceil(size)
    };
    let n = pieces.min(slots);
    assert_eq!(got, Some(n), "{imp:?} {what}: pieces");
    for (k, sum) in sums.iter().enumerate() {
        if k < n {
            let piece = &data[k * size..((k + 1) * size).min(data.len())];
            assert_eq!(fold(*sum), naive(piece, 0), "{imp:?} {what}: piece {k}");
        } else {
            assert_eq!(*sum, 0x5a5a_5a5a, "{imp:?} {what}: slot {k} written");
        }
    }
}

#[test]
fn every_length_and_alignment_matches_naive() {
    let mut rng = Rng(1);
    let buf = rng.bytes(2000 + 64);
    for len in 0..2000 {
        let off = rng.below(64);
        let initial = rng.next() as u32;
        // A copy that ends exactly where its allocation ends, so that a sanitizer
        // (`-Zsanitizer=address`) catches any read past the end of `data`.
        let owned = buf[..off + len].to_vec();
        let data = &owned[off..];
        let want = naive(data, initial);
        for &imp in kernels() {
            let got = partial_with(imp, data, initial).map(fold);
            assert_eq!(
                got,
                Some(want),
                "{imp:?} len {len} offset {off} initial {initial:#x}"
            );
        }
        assert_eq!(
            fold(partial(data, initial)),
            want,
            "partial len {len} offset {off}"
        );
    }
}

#[test]
fn extreme_bytes_match_naive() {
    // All 0xff maximises every lane; all zero must stay zero (not 0xffff).
    let mut rng = Rng(2);
    for fill in [0x00, 0xff] {
        let buf = vec![fill; 2000 + 64];
        for len in 0..2000 {
            let off = rng.below(64);
            let data = &buf[off..off + len];
            for initial in [0, 0xffff, u32::MAX] {
                let want = naive(data, initial);
                for &imp in kernels() {
                    let got = partial_with(imp, data, initial).map(fold);
                    assert_eq!(got, Some(want), "{imp:?} fill {fill:#x} len {len}");
                }
            }
        }
    }
}

#[test]
fn blocks_longer_than_the_overflow_bound_match_naive() {
    // Longer than four AVX2 blocks (the lanes are widened between blocks), nearly all
    // 0xff so that an overflowing lane would lose 2^32 = 1 (mod 0xffff) and show: a
    // block four times as long as `x86::BLOCK` fails this test.
    #[cfg(target_arch = "x86_64")]
    let block = x86::BLOCK;
    #[cfg(not(target_arch = "x86_64"))]
    let block = 1 << 22;
    let mut rng = Rng(3);
    let mut buf = vec![0xff; 4 * block + 1000];
    for _ in 0..100 {
        let i = rng.below(buf.len());
        buf[i] = rng.next() as u8;
    }
    for len in [block - 1, block, block + 33, 4 * block + 999] {
        let data = &buf[1..1 + len];
        let want = naive(data, 7);
        for &imp in kernels() {
            assert_eq!(
                partial_with(imp, data, 7).map(fold),
                Some(want),
                "{imp:?} len {len}"
            );
        }
    }
}

#[test]
fn unavailable_kernel_is_none() {
    for &imp in Implementation::ALL {
        assert_eq!(
            partial_with(imp, &[1, 2, 3], 0).is_some(),
            imp.is_available()
        );
        assert_eq!(available().contains(&imp), imp.is_available());
    }
    assert!(best().is_available());
    assert_eq!(available().last(), Some(&best()));
}

#[test]
fn rfc1071_example() {
    // RFC 1071 section 3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
    let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
    for &imp in kernels() {
        assert_eq!(
            partial_with(imp, &data, 0).map(fold),
            Some(0xddf2),
            "{imp:?}"
        );
    }
    assert_eq!(checksum(&data), 0x220d);
    // With the checksum appended the whole sums to all ones, and a flipped bit does not.
    let mut with = data.to_vec();
    with.extend_from_slice(&0x220du16.to_be_bytes());
    assert!(verify(&with, 0));
    with[3] ^= 0x10;
    assert!(!verify(&with, 0));
}

#[test]
fn split_sums_combine_to_the_whole() {
    let mut rng = Rng(4);
    let buf = rng.bytes(300);
    let whole = fold(partial(&buf, 0));
    for at in 0..=buf.len() {
        let (a, b) = buf.split_at(at);
        let sb = partial(b, 0);
        let sb = if at % 2 == 1 { shift_odd(sb) } else { sb };
        assert_eq!(fold(combine(partial(a, 0), sb)), whole, "split at {at}");
    }
    // And the shift matters: without it an odd split gives another sum.
    let (a, b) = buf.split_at(101);
    assert_ne!(fold(combine(partial(a, 0), partial(b, 0))), whole);
}

#[test]
fn update16_and_update32_match_recomputation() {
    let mut rng = Rng(5);
    for _ in 0..2000 {
        let len = 2 * (2 + rng.below(40));
        let mut data = rng.bytes(len);
        let check = checksum(&data);

        let at = 2 * rng.below(len / 2);
        let old = u16::from_be_bytes([data[at], data[at + 1]]);
        let new = rng.next() as u16;
        data[at..at + 2].copy_from_slice(&new.to_be_bytes());
        let check = update16(check, old, new);
        assert_eq!(
            check,
            checksum(&data),
            "update16 at {at}: {old:#x} -> {new:#x}"
        );

        let at = 2 * rng.below(len / 2 - 1);
        let old = u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
        let new = rng.next() as u32;
        data[at..at + 4].copy_from_slice(&new.to_be_bytes());
        assert_eq!(
            update32(check, old, new),
            checksum(&data),
            "update32 at {at}"
        );
    }
}

#[test]
fn rfc1624_section3_example() {
    // The other words sum to cd7a; m = 5555 changes to m' = 3285.
    let before = [0xcd, 0x7a, 0x55, 0x55];
    let after = [0xcd, 0x7a, 0x32, 0x85];
    assert_eq!(checksum(&before), 0xdd2f);
    // Recomputed from scratch the new field is 0x0000 (the sum is ffff, "-0").
    assert_eq!(checksum(&after), 0x0000);
    // RFC 1141's equation 2, HC' = HC - ~m - m' (one's-complement subtraction is
    // adding the complement), gives ffff: the bug RFC 1624 corrects.
    let eqn2 = fold(combine(combine(0xdd2f, 0x5555), u32::from(!0x3285u16)));
    assert_eq!(eqn2, 0xffff);
    // Equation 3 agrees with the recomputation.
    assert_eq!(update16(0xdd2f, 0x5555, 0x3285), checksum(&after));
}

#[test]
fn update16_all_zero_result_is_the_documented_exception() {
    // An ICMP echo request, type 8, zero identifier and sequence number, no data,
    // turned into an echo reply (type 0): the covered data becomes all zeros.
    let request = [0x08, 0x00, 0x00, 0x00, 0x00, 0x00];
    let reply = [0u8; 6];
    assert_eq!(checksum(&request), 0xf7ff);
    assert_eq!(checksum(&reply), 0xffff);
    // Equation 3 yields 0x0000, as documented on `update16`...
    assert_eq!(update16(0xf7ff, 0x0800, 0x0000), 0x0000);
    // ...and it cannot do better: other data with the same field and the same changed
    // word (ffff 0800 -> ffff 0000) really does need 0x0000 after the change.
    let other_before = [0xff, 0xff, 0x08, 0x00];
    let other_after = [0xff, 0xff, 0x00, 0x00];
    assert_eq!(checksum(&other_before), 0xf7ff);
    assert_eq!(checksum(&other_after), 0x0000);
}

#[test]
fn pseudo_headers_match_etherparse() {
    use etherparse::{TcpHeader, UdpHeader};
    let mut rng = Rng(6);
    for _ in 0..300 {
        let n = rng.below(1600);
        let payload = rng.bytes(n);
        let src4: [u8; 4] = rng.next().to_be_bytes()[..4].try_into().unwrap();
        let dst4: [u8; 4] = rng.next().to_be_bytes()[..4].try_into().unwrap();
        let src6: [u8; 16] = rng.bytes(16).try_into().unwrap();
        let dst6: [u8; 16] = rng.bytes(16).try_into().unwrap();

        let mut tcp = TcpHeader::new(rng.next() as u16, rng.next() as u16, rng.next() as u32, 1);
        tcp.acknowledgment_number = rng.next() as u32;
        tcp.ack = true;
        tcp.psh = rng.next() & 1 == 1;
        let mut segment = tcp.to_bytes().to_vec();
        segment.extend_from_slice(&payload);

        let len = segment.len();
        let want = tcp.calc_checksum_ipv4_raw(src4, dst4, &payload).unwrap();
        let sum = pseudo_ipv4(src4, dst4, 6, len as u16);
        assert_eq!(finish(partial(&segment, sum)), want, "tcp4 len {len}");
        let want = tcp.calc_checksum_ipv6_raw(src6, dst6, &payload).unwrap();
        let sum = pseudo_ipv6(&src6, &dst6, 6, len as u32);
        assert_eq!(finish(partial(&segment, sum)), want, "tcp6 len {len}");

        // UDP maps a computed 0x0000 to 0xffff (RFC 768); etherparse does too.
        let udp = UdpHeader::without_ipv4_checksum(rng.next() as u16, 53, payload.len()).unwrap();
        let mut datagram = udp.to_bytes().to_vec();
        datagram.extend_from_slice(&payload);
        let len = datagram.len();
        let udp_field = |s: u32| match finish(partial(&datagram, s)) {
            0 => 0xffff,
            c => c,
        };
        let want = udp.calc_checksum_ipv4_raw(src4, dst4, &payload).unwrap();
        assert_eq!(
            udp_field(pseudo_ipv4(src4, dst4, 17, len as u16)),
            want,
            "udp4"
        );
        let want = udp.calc_checksum_ipv6_raw(src6, dst6, &payload).unwrap();
        assert_eq!(
            udp_field(pseudo_ipv6(&src6, &dst6, 17, len as u32)),
            want,
            "udp6"
        );
    }
}

#[test]
fn implementation_names() {
    assert_eq!(Implementation::Portable.name(), "portable");
    assert_eq!(Implementation::Avx2.name(), "avx2");
}

#[test]
fn copy_partial_copies_and_sums_like_naive() {
    let mut rng = Rng(11);
    let buf = rng.bytes(3000 + 64);
    let mut lens: Vec<usize> = (0..600).collect();
    lens.extend([1023, 1024, 1460, 1461, 2047, 3000]);
    for len in lens {
        let (off, dst_off) = (rng.below(64), rng.below(64));
        let src = &buf[off..off + len];
        let initial = rng.next() as u32;
        let mut dst = vec![0xa5u8; dst_off + len + 7];
        let got = copy_partial(&mut dst[dst_off..], src, initial).map(fold);
        assert_eq!(got, Some(naive(src, initial)), "len {len}");
        assert_eq!(&dst[dst_off..dst_off + len], src, "len {len}");
        // Nothing written outside the copy.
        assert!(dst[..dst_off].iter().all(|&b| b == 0xa5), "len {len}");
        assert!(dst[dst_off + len..].iter().all(|&b| b == 0xa5), "len {len}");
    }
}

#[test]
fn every_copy_kernel_copies_and_sums_like_naive() {
    let mut rng = Rng(13);
    let buf = rng.bytes(70_000 + 128);
    let mut lens: Vec<usize> = (0..300).collect();
    lens.extend([
        511, 512, 513, 1447, 1448, 1460, 1461, 4095, 9000, 65_535, 65_536, 70_000,
    ]);
    for &imp in chunk_kernels().iter() {
        for &len in &lens {
            for _ in 0..4 {
                let (off, dst_off) = (rng.below(64), rng.below(64));
                let src = &buf[off..off + len];
                let initial = rng.next() as u32;
                let mut dst = vec![0xa5u8; dst_off + len + 70];
                let got = copy_partial_with(imp, &mut dst[dst_off..], src, initial).map(fold);
                let what = format!("{} len {len} src +{off} dst +{dst_off}", imp.name());
                assert_eq!(got, Some(naive(src, initial)), "{what}");
                assert_eq!(&dst[dst_off..dst_off + len], src, "{what}");
                assert!(dst[..dst_off].iter().all(|&b| b == 0xa5), "{what}: before");
                assert!(
                    dst[dst_off + len..].iter().all(|&b| b == 0xa5),
                    "{what}: after"
                );
            }
        }
        let mut short = vec![0u8; 10];
        assert_eq!(copy_partial_with(imp, &mut short, &buf[..11], 0), None);
    }
}

#[test]
fn copy_partial_across_blocks_and_into_short_buffers() {
    #[cfg(target_arch = "x86_64")]
    let block = x86::BLOCK;
    #[cfg(not(target_arch = "x86_64"))]
    let block = 1 << 19;
    let mut rng = Rng(12);
    let mut src = vec![0xff; 2 * block + 77];
    for _ in 0..100 {
        let i = rng.below(src.len());
        src[i] = rng.next() as u8;
    }
    let mut dst = vec![0u8; src.len()];
    assert_eq!(
        copy_partial(&mut dst, &src, 3).map(fold),
        Some(naive(&src, 3))
    );
    assert_eq!(dst, src);
    let mut short = vec![0u8; 10];
    assert_eq!(copy_partial(&mut short, &src[..11], 0), None);
    assert!(
        short.iter().all(|&b| b == 0),
        "a refused copy writes nothing"
    );
}

#[test]
fn chunk_sums_match_naive_per_piece() {
    // Random lengths, piece sizes (odd ones included, so pieces start at odd
    // offsets) and alignments, every kernel the CPU has, and `partial_chunks`.
    let imps = chunk_kernels();
    let mut rng = Rng(4);
    let buf = rng.bytes(12_000 + 128);
    for round in 0..1500 {
        let size = match round % 4 {
            0 => 1 + rng.below(80),
            1 => 1 + rng.below(3000),
            2 => 1448 + rng.below(3),
            _ => 64 * (1 + rng.below(40)) + rng.below(2),
        };
        let len = rng.below(12_000);
        let off = rng.below(128);
        // Ends where its allocation ends (see every_length_and_alignment_matches_naive).
        let owned = buf[..off + len].to_vec();
        let data = &owned[off..];
        let slots = data.len().div_ceil(size) + rng.below(3);
        let what = format!("len {len} size {size} offset {off}");
        for &imp in &imps {
            check_chunks(imp, data, size, slots, &what);
        }
        let mut sums = vec![0; slots];
        let n = partial_chunks(data, size, &mut sums);
        assert_eq!(n, data.len().div_ceil(size), "partial_chunks {what}");
        for (k, piece) in data.chunks(size).enumerate() {
            assert_eq!(
                fold(sums[k]),
                naive(piece, 0),
                "partial_chunks {what}: piece {k}"
            );
        }
    }
}

#[test]
fn chunk_sums_stop_at_the_slots_and_take_edge_cases() {
    let imps = chunk_kernels();
    let mut rng = Rng(5);
    let buf = rng.bytes(5000);
    for &imp in &imps {
        // Fewer slots than pieces: the first ones only, nothing written after.
        check_chunks(imp, &buf[3..], 1448, 2, "two slots");
        check_chunks(imp, &buf[3..], 1448, 0, "no slot");
        // No pieces: size 0, or nothing to cut.
        check_chunks(imp, &buf, 0, 4, "size 0");
        check_chunks(imp, &[], 1448, 4, "empty");
        // One piece longer than the data, and pieces of one byte.
        check_chunks(imp, &buf[1..4000], 1 << 20, 2, "one piece");
        check_chunks(imp, &buf[1..200], 1, 200, "bytes");
    }
}

#[test]
fn chunk_sums_of_extreme_bytes_match_naive() {
    // All 0xff maximises every lane; all zero must stay zero (not 0xffff).
    let imps = chunk_kernels();
    let mut rng = Rng(6);
    for fill in [0x00, 0xff] {
        let buf = vec![fill; 70_000];
        for _ in 0..40 {
            let off = rng.below(64);
            let size = 1 + rng.below(4000);
            let data = &buf[off..off + 60_000 + rng.below(5000)];
            let slots = data.len().div_ceil(size);
            for &imp in &imps {
                check_chunks(
                    imp,
                    data,
                    size,
                    slots,
                    &format!("fill {fill:#x} size {size}"),
                );
            }
        }
    }
}

#[test]
fn chunk_sums_of_pieces_longer_than_a_block_match_naive() {
    // Pieces longer than the AVX-512 kernel's block (1 MiB), nearly all 0xff.
    let imps = chunk_kernels();
    let mut rng = Rng(7);
    let mut buf = vec![0xff; (3 << 20) + 100];
    for _ in 0..100 {
        let i = rng.below(buf.len());
        buf[i] = rng.next() as u8;
    }
    for &imp in &imps {
        check_chunks(imp, &buf[1..], (1 << 20) + 3, 3, "long pieces");
    }
}
