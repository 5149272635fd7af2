//! The reassembler against datagrams cut here: random fragment sets in random
//! order with duplicates, overlaps, the memory bounds and the timeouts.

use super::*;
use proptest::prelude::*;
use std::time::Duration;

const SRC: [u8; 4] = [10, 0, 0, 2];
const DST: [u8; 4] = [10, 0, 0, 1];
const HEAD: [u8; 20] = [0x45; 20];

fn key(id: u16) -> FragKey {
    FragKey::v4(SRC, DST, 17, id)
}

/// The byte at `i` of datagram `id`'s data.
fn byte(id: u32, i: usize) -> u8 {
    (i as u32).wrapping_mul(31).wrapping_add(id.wrapping_mul(7)) as u8
}

fn datagram(id: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| byte(id, i)).collect()
}

fn frag<'a>(k: FragKey, off: usize, more: bool, data: &'a [u8]) -> Fragment<'a> {
    Fragment {
        key: k,
        offset: off,
        more,
        data,
        head: &HEAD,
        limit: MAX_DATAGRAM - HEAD.len(),
        link: [2, 0, 0, 0, 0, 2],
        answerable: true,
    }
}

/// `len` bytes cut at `cuts` (multiples of 8 inside it): the ranges.
fn ranges(len: usize, cuts: &[usize]) -> Vec<(usize, usize)> {
    let mut c: Vec<usize> = cuts
        .iter()
        .map(|x| (x % len) / 8 * 8)
        .filter(|&x| x > 0 && x < len)
        .collect();
    c.sort_unstable();
    c.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for x in c.into_iter().chain([len]) {
        out.push((start, x));
        start = x;
    }
    out
}

fn cfg() -> FragConfig {
    FragConfig {
        enabled: true,
        ..FragConfig::default()
    }
}

proptest! {
    /// Random datagrams cut into random fragment sets, delivered in random
    /// order with duplicates: reassembled exactly, once, duplicates ignored.
    #[test]
    fn random_order_with_duplicates(
        len in 1usize..=(MAX_DATAGRAM - 20),
        cuts in proptest::collection::vec(any::<usize>(), 0..40),
        order in proptest::collection::vec(any::<usize>(), 0..200),
        dups in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let data = datagram(1, len);
        let rs = ranges(len, &cuts);
        let mut seq: Vec<usize> = (0..rs.len()).collect();
        for &d in &dups {
            seq.push(d % rs.len());
        }
        // A permutation from `order` (Fisher-Yates with the given numbers).
        for i in (1..seq.len()).rev() {
            let j = order.get(i).copied().unwrap_or(i) % (i + 1);
            seq.swap(i, j);
        }
        // One piece from offset 0 without M is not a fragment at all.
        prop_assume!(rs.len() > 1);
        let mut r = Reassembler::new(&cfg(), 1);
        let mut c = Counters::default();
        let mut seen = vec![false; rs.len()];
        let mut complete_at = None;
        for (n, &i) in seq.iter().enumerate() {
            let (a, b) = rs[i];
            let res = r.insert(Instant::ZERO, &frag(key(1), a, b < len, &data[a..b]), &mut c);
            let fresh = !seen[i];
            seen[i] = true;
            let all = seen.iter().all(|&s| s);
            match res {
                Insert::Complete { head_len } => {
                    prop_assert_eq!(head_len, 20);
                    prop_assert_eq!(&r.output()[..20], &HEAD[..]);
                    prop_assert!(r.output()[20..] == data[..]);
                    // First when the last piece came; later only again from
                    // duplicates that came after it.
                    prop_assert!(all);
                    prop_assert!(complete_at.is_some() || fresh);
                    complete_at.get_or_insert(n);
                }
                Insert::Duplicate => prop_assert!(!fresh),
                Insert::Held => prop_assert!(!all || complete_at.is_some()),
                Insert::Refused(why) => prop_assert!(false, "refused: {:?}", why),
            }
            prop_assert!(r.memory() <= cfg().high_thresh);
        }
        prop_assert!(complete_at.is_some());
        prop_assert_eq!(c.ip_reasm_fails, 0);
        prop_assert_eq!(c.ip_reasm_reqds, seq.len() as u64);
    }

    /// One fragment overlapping the set (not an exact duplicate): if it comes
    /// before the datagram completes, the datagram is dropped whole, and the
    /// fragments still to come are dropped too.
    #[test]
    fn overlapping_fragments_drop_the_datagram(
        len in 32usize..=4000,
        cuts in proptest::collection::vec(any::<usize>(), 1..12),
        extra in (any::<usize>(), any::<usize>()),
        at in any::<usize>(),
    ) {
        let data = datagram(2, len);
        let rs = ranges(len, &cuts);
        // An 8-aligned range that differs from every fragment.
        let a = (extra.0 % len) / 8 * 8;
        let b = (a + 8 + (extra.1 % len) / 8 * 8).min(len);
        // And that no tiling of the datagram can use: one of its ends is no
        // fragment's end.
        let bounds: Vec<usize> = rs.iter().map(|r| r.0).chain([len]).collect();
        prop_assume!(!bounds.contains(&a) || !bounds.contains(&b));
        let mut seq: Vec<(usize, usize)> = rs.clone();
        let pos = at % (seq.len() + 1);
        seq.insert(pos, (a, b));
        let mut r = Reassembler::new(&cfg(), 2);
        let mut c = Counters::default();
        let mut completed = false;
        let mut killed = false;
        for (n, &(x, y)) in seq.iter().enumerate() {
            let res = r.insert(Instant::ZERO, &frag(key(2), x, y < len, &data[x..y]), &mut c);
            if let Insert::Complete { .. } = res {
                completed = true;
                // Only possible with the overlapping fragment last, when
                // the others are all in.
                prop_assert_eq!(pos, seq.len() - 1);
                prop_assert_eq!(n, seq.len() - 2);
            }
            // Once the overlap is seen, every later fragment is dropped.
            if killed {
                prop_assert_eq!(res, Insert::Refused(Refused::AfterOverlap));
            }
            if res == Insert::Refused(Refused::Overlap) {
                prop_assert!(n >= pos && !killed);
                killed = true;
            }
        }
        if pos < seq.len() - 1 {
            prop_assert!(!completed && killed);
            prop_assert_eq!(c.ip_reasm_overlaps, 1);
            prop_assert_eq!(c.ip_reasm_oks, 0);
        }
        prop_assert!(r.memory() <= cfg().high_thresh);
    }

    /// A flood of random fragments from a few sources for many datagrams
    /// never takes the memory past the high threshold, nor a source past
    /// its share; what completes is exact.
    #[test]
    fn flood_stays_within_the_bounds(
        ops in proptest::collection::vec(
            (0u8..4, 0u16..64, 0usize..8192, 1usize..3000, any::<bool>(), 0u64..2000),
            1..400,
        ),
    ) {
        let c0 = FragConfig {
            enabled: true,
            high_thresh: 200_000,
            low_thresh: 150_000,
            per_source: 80_000,
            max_fragments: 16,
            ..FragConfig::default()
        };
        let mut r = Reassembler::new(&c0, 3);
        let mut c = Counters::default();
        let mut now = Instant::ZERO;
        let mut quote = Vec::new();
        for (src, id, off, len, more, dt) in ops {
            now += Duration::from_millis(dt);
            while r.expire(now, &mut quote, 576, &mut c).is_some() {}
            let k = FragKey::v4([10, 0, 0, src], DST, 17, id);
            let off = off / 8 * 8;
            let len = if more { (len / 8 * 8).max(8) } else { len };
            let data: Vec<u8> = (off..off + len).map(|i| byte(u32::from(id) ^ (u32::from(src) << 16), i)).collect();
            let f = Fragment { key: k, ..frag(k, off, more, &data) };
            if let Insert::Complete { head_len } = r.insert(now, &f, &mut c) {
                let out = &r.output()[head_len..];
                for (i, &b) in out.iter().enumerate() {
                    prop_assert_eq!(b, byte(u32::from(id) ^ (u32::from(src) << 16), i));
                }
            }
            prop_assert!(r.memory() <= c0.high_thresh, "{} > {}", r.memory(), c0.high_thresh);
            for s in 0..4u8 {
                let src = FragKey::v4([10, 0, 0, s], DST, 0, 0).src;
                prop_assert!(r.source_memory(&src) <= c0.per_source);
            }
        }
    }
}

#[test]
fn timeout_reports_the_first_fragment_for_icmp() {
    let mut r = Reassembler::new(&cfg(), 4);
    let mut c = Counters::default();
    let data = datagram(3, 3000);
    let t0 = Instant::from_millis(1000);
    assert_eq!(
        r.insert(t0, &frag(key(3), 0, true, &data[..1480]), &mut c),
        Insert::Held
    );
    // Another datagram without its first fragment, and an IPv6 one.
    assert_eq!(
        r.insert(t0, &frag(key(4), 1480, true, &data[1480..2960]), &mut c),
        Insert::Held
    );
    let k6 = FragKey::v6([1; 16], [2; 16], 9);
    assert_eq!(
        r.insert(t0, &frag(k6, 0, true, &data[..1232]), &mut c),
        Insert::Held
    );
    assert_eq!(r.next_deadline(), Some(t0 + Duration::from_secs(30)));
    let mut quote = Vec::new();
    let before = t0 + Duration::from_secs(29);
    assert_eq!(r.expire(before, &mut quote, 576, &mut c), None);
    let at = t0 + Duration::from_secs(30);
    let e = r.expire(at, &mut quote, 576, &mut c).unwrap();
    assert_eq!(e.key, key(3));
    assert!(e.answer);
    assert_eq!(quote.len(), 576);
    assert_eq!(&quote[..20], &HEAD);
    assert_eq!(&quote[20..], &data[..556]);
    let e = r.expire(at, &mut quote, 576, &mut c).unwrap();
    assert_eq!(e.key, key(4));
    assert!(!e.answer, "no first fragment: no ICMP (RFC 792)");
    assert!(quote.is_empty());
    assert_eq!(r.expire(at, &mut quote, 576, &mut c), None);
    assert_eq!(r.next_deadline(), Some(t0 + Duration::from_secs(60)));
    let e = r
        .expire(t0 + Duration::from_secs(60), &mut quote, 1232, &mut c)
        .unwrap();
    assert_eq!(e.key, k6);
    assert!(e.answer);
    assert_eq!(c.ip_reasm_timeout, 3);
    assert_eq!(c.ip_reasm_fails, 3);
    assert!(r.is_empty());
    assert_eq!(r.next_deadline(), None);
    // The buffers stay as spare, within the budget.
    assert!(r.memory() <= cfg().high_thresh);
}

#[test]
fn bad_fragments_are_refused_and_counted() {
    let mut r = Reassembler::new(&cfg(), 5);
    let mut c = Counters::default();
    let d = datagram(5, 4000);
    // Not a multiple of 8 with more to follow; empty.
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(5), 0, true, &d[..100]), &mut c),
        Insert::Refused(Refused::BadLength)
    );
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(5), 0, false, &d[..0]), &mut c),
        Insert::Refused(Refused::BadLength)
    );
    // Past 65,535.
    assert_eq!(
        r.insert(
            Instant::ZERO,
            &frag(key(5), 65_000, false, &d[..600]),
            &mut c
        ),
        Insert::Refused(Refused::TooLong)
    );
    assert!(r.is_empty());
    // A last fragment, then data past its end: the datagram goes.
    assert_eq!(
        r.insert(
            Instant::ZERO,
            &frag(key(6), 800, false, &d[800..1000]),
            &mut c
        ),
        Insert::Held
    );
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(6), 1000, true, &d[..8]), &mut c),
        Insert::Refused(Refused::PastEnd)
    );
    assert!(r.is_empty());
    // A second last fragment with another end.
    r.insert(
        Instant::ZERO,
        &frag(key(7), 800, false, &d[800..1000]),
        &mut c,
    );
    assert_eq!(
        r.insert(
            Instant::ZERO,
            &frag(key(7), 960, false, &d[960..1200]),
            &mut c
        ),
        Insert::Refused(Refused::PastEnd)
    );
    // Too many fragments.
    let small = FragConfig {
        max_fragments: 4,
        ..cfg()
    };
    let mut r = Reassembler::new(&small, 6);
    for i in 0..4 {
        assert_eq!(
            r.insert(Instant::ZERO, &frag(key(8), i * 8, true, &d[..8]), &mut c),
            Insert::Held
        );
    }
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(8), 32, true, &d[..8]), &mut c),
        Insert::Refused(Refused::TooMany)
    );
    assert!(r.is_empty());
    assert_eq!(c.ip_reasm_bad_length, 2);
    assert_eq!(c.ip_reasm_too_long, 1);
    assert_eq!(c.ip_reasm_past_end, 2);
    assert_eq!(c.ip_reasm_too_many, 1);
    assert_eq!(c.ip_reasm_fails, 6);
}

#[test]
fn one_source_cannot_take_the_budget_and_the_oldest_goes_first() {
    let small = FragConfig {
        high_thresh: 64 * 1024,
        low_thresh: 48 * 1024,
        per_source: 24 * 1024,
        ..cfg()
    };
    let mut r = Reassembler::new(&small, 7);
    let mut c = Counters::default();
    let d = datagram(9, 8192);
    // One source opens datagrams of 4 KiB until its share is full.
    let mut held = 0;
    for id in 0..32u16 {
        if r.insert(Instant::ZERO, &frag(key(id), 0, true, &d[..4096]), &mut c) == Insert::Held {
            held += 1;
        }
    }
    assert!((3..32).contains(&held), "{held}");
    assert!(r.source_memory(&key(0).src) <= small.per_source);
    assert!(c.ip_reasm_source_limit > 0);
    // Other sources still get in; when the budget is full the oldest
    // datagrams are evicted.
    for s in 3..20u8 {
        let k = FragKey::v4([10, 0, 0, s], DST, 17, 1);
        let t = Instant::from_millis(u64::from(s));
        assert_eq!(
            r.insert(t, &frag(k, 0, true, &d[..4096]), &mut c),
            Insert::Held,
            "source {s}"
        );
        assert!(r.memory() <= small.high_thresh);
    }
    assert!(c.ip_reasm_evicted > 0);
    // The newest is still there and completes.
    let k = FragKey::v4([10, 0, 0, 19], DST, 17, 1);
    assert!(matches!(
        r.insert(Instant::ZERO, &frag(k, 4096, false, &d[4096..4100]), &mut c),
        Insert::Complete { .. }
    ));
}

#[test]
fn an_atomic_looking_first_fragment_completes_at_once_and_buffers_are_reused() {
    let mut r = Reassembler::new(&cfg(), 8);
    let mut c = Counters::default();
    let d = datagram(10, 1000);
    for id in 0..100u16 {
        r.insert(Instant::ZERO, &frag(key(id), 512, false, &d[512..]), &mut c);
        let res = r.insert(Instant::ZERO, &frag(key(id), 0, true, &d[..512]), &mut c);
        assert_eq!(res, Insert::Complete { head_len: 20 });
        assert_eq!(&r.output()[20..], &d[..]);
    }
    // One slot served them all.
    assert_eq!(r.slots.len(), 1);
    assert!(r.is_empty());
}

#[test]
fn a_duplicate_that_says_last_completes_the_datagram() {
    let mut r = Reassembler::new(&cfg(), 9);
    let mut c = Counters::default();
    let d = datagram(11, 16);
    let held = Insert::Held;
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(1), 0, true, &d[..8]), &mut c),
        held
    );
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(1), 8, true, &d[8..]), &mut c),
        held
    );
    assert_eq!(
        r.insert(Instant::ZERO, &frag(key(1), 8, false, &d[8..]), &mut c),
        Insert::Complete { head_len: 20 }
    );
    assert_eq!(&r.output()[20..], &d[..]);
}
