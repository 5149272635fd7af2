use super::*;
use etherparse::{TcpOptionElement, TcpOptions, TcpOptionsIterator};
use proptest::prelude::*;

fn sack_blocks() -> impl Strategy<Value = SackBlocks> {
    proptest::collection::vec(any::<(u32, u32)>(), 1..=MAX_SACK_BLOCKS)
        .prop_map(|v| SackBlocks::from_slice(&v).unwrap())
}

/// Known options (what etherparse also understands).
fn known_option() -> impl Strategy<Value = TcpOption<'static>> {
    prop_oneof![
        Just(TcpOption::NoOp),
        any::<u16>().prop_map(TcpOption::Mss),
        any::<u8>().prop_map(TcpOption::WindowScale),
        Just(TcpOption::SackPermitted),
        sack_blocks().prop_map(TcpOption::Sack),
        any::<(u32, u32)>().prop_map(|(tsval, tsecr)| TcpOption::Timestamps { tsval, tsecr }),
    ]
}

/// Lists that fit in 40 bytes.
fn fitting<S: Strategy<Value = TcpOption<'static>>>(
    s: S,
) -> impl Strategy<Value = Vec<TcpOption<'static>>> {
    proptest::collection::vec(s, 0..8).prop_map(|mut v| {
        while emitted_len(&v) > MAX_LEN {
            v.pop();
        }
        v
    })
}

const UNKNOWN_DATA: [u8; 16] = [0xab; 16];

fn any_option() -> impl Strategy<Value = TcpOption<'static>> {
    prop_oneof![
        4 => known_option(),
        1 => (prop_oneof![6u8..=7, 9u8..=255], 0usize..=16)
            .prop_map(|(kind, n)| TcpOption::Unknown { kind, data: &UNKNOWN_DATA[..n] }),
    ]
}

fn parse_all(bytes: &[u8]) -> Result<Vec<TcpOption<'_>>> {
    iter(bytes).collect()
}

fn without_end(mut v: Vec<TcpOption<'_>>) -> Vec<TcpOption<'_>> {
    if v.last() == Some(&TcpOption::EndOfList) {
        v.pop();
    }
    v
}

proptest! {
    #[test]
    fn emit_then_iterate_round_trips(opts in fitting(any_option())) {
        let mut buf = [0u8; MAX_LEN];
        let n = emit_options(&opts, &mut buf).unwrap();
        prop_assert_eq!(n, emitted_len(&opts));
        prop_assert_eq!(n % 4, 0);
        let parsed = parse_all(&buf[..n]).unwrap();
        let padded = n > opts.iter().map(TcpOption::wire_len).sum::<usize>();
        prop_assert_eq!(parsed.last() == Some(&TcpOption::EndOfList), padded);
        prop_assert_eq!(without_end(parsed), opts);
    }

    #[test]
    fn etherparse_reads_what_we_emit(opts in fitting(known_option())) {
        let mut buf = [0u8; MAX_LEN];
        let n = emit_options(&opts, &mut buf).unwrap();
        let theirs: Vec<TcpOptionElement> =
            TcpOptionsIterator::from_slice(&buf[..n]).collect::<core::result::Result<_, _>>().unwrap();
        let ours: Vec<TcpOptionElement> = opts.iter().filter_map(TcpOption::to_etherparse).collect();
        prop_assert_eq!(theirs, ours);
        // And a whole header carrying them parses with the same options.
        let mut h = etherparse::TcpHeader::new(1, 2, 3, 4);
        h.set_options_raw(&buf[..n]).unwrap();
        let (back, _) = etherparse::TcpHeader::from_slice(&h.to_bytes()).unwrap();
        prop_assert_eq!(back.options.as_slice(), &buf[..n]);
    }

    #[test]
    fn we_read_what_etherparse_emits(opts in fitting(known_option())) {
        let elems: Vec<TcpOptionElement> = opts.iter().filter_map(TcpOption::to_etherparse).collect();
        let theirs = TcpOptions::try_from_elements(&elems).unwrap();
        let parsed = without_end(parse_all(theirs.as_slice()).unwrap());
        let back: Vec<TcpOption<'_>> = elems.iter().map(TcpOption::from).collect();
        prop_assert_eq!(parsed, back);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_agree_with_etherparse(
        bytes in proptest::collection::vec(any::<u8>(), 0..48),
    ) {
        let ours: Vec<Result<TcpOption<'_>>> = iter(&bytes).collect();
        // The iterator ends: at most one item per byte, and nothing after an error.
        prop_assert!(ours.len() <= bytes.len());
        if let Some(i) = ours.iter().position(|r| r.is_err()) {
            prop_assert_eq!(i, ours.len() - 1);
            prop_assert_eq!(ours[i].unwrap_err().layer(), Layer::TcpOption);
        }
        // Up to the first option etherparse cannot name, both agree on every success.
        let theirs: Vec<_> = TcpOptionsIterator::from_slice(&bytes).collect();
        for (o, t) in ours.iter().zip(theirs.iter()) {
            match (o, t) {
                (Ok(TcpOption::Unknown { .. }), _) => break,
                (Ok(o), Ok(t)) => prop_assert_eq!(o.to_etherparse(), Some(t.clone())),
                (Err(_), Err(_)) => break,
                (o, t) => prop_assert!(false, "disagree: {:?} vs {:?}", o, t),
            }
        }
        let _ = parse_syn_options(&bytes);
    }

    #[test]
    fn syn_options_round_trip(
        mss in proptest::option::of(any::<u16>()),
        window_scale in proptest::option::of(0u8..=14),
        sack_permitted in any::<bool>(),
        timestamps in proptest::option::of(any::<(u32, u32)>()),
    ) {
        let s = SynOptions { mss, window_scale, sack_permitted, timestamps };
        let mut buf = [0u8; MAX_LEN];
        let n = s.emit(&mut buf).unwrap();
        prop_assert!(n <= 20);
        prop_assert_eq!(parse_syn_options(&buf[..n]), Ok(s));
    }
}

#[test]
fn linux_syn_layout() {
    let s = SynOptions {
        mss: Some(1460),
        window_scale: Some(7),
        sack_permitted: true,
        timestamps: Some((1, 0)),
    };
    let mut buf = [0u8; MAX_LEN];
    let n = s.emit(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        &[
            2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7
        ]
    );
}

#[test]
fn malformed_lengths_are_typed() {
    let e = |bytes: &[u8]| parse_all(bytes).unwrap_err();
    let inv = |f, v| Error::invalid(Layer::TcpOption, f, v);
    assert_eq!(e(&[2]), Error::truncated(Layer::TcpOption, 2, 1));
    assert_eq!(e(&[1, 1, 9]), Error::truncated(Layer::TcpOption, 2, 1));
    assert_eq!(e(&[2, 0]), inv("length", 0));
    assert_eq!(e(&[30, 1, 0, 0]), inv("length", 1));
    assert_eq!(e(&[2, 4, 5]), Error::truncated(Layer::TcpOption, 4, 3));
    assert_eq!(
        e(&[1, 30, 20, 0, 0]),
        Error::truncated(Layer::TcpOption, 20, 4)
    );
    assert_eq!(e(&[2, 3, 5]), inv("mss length", 3));
    assert_eq!(e(&[3, 4, 5, 6]), inv("window scale length", 4));
    assert_eq!(e(&[4, 3, 0]), inv("sack-permitted length", 3));
    assert_eq!(e(&[8, 8, 0, 0, 0, 0, 0, 0]), inv("timestamps length", 8));
    assert_eq!(e(&[5, 2]), inv("sack length", 2));
    assert_eq!(e(&[5, 9, 0, 0, 0, 0, 0, 0, 0]), inv("sack length", 9));
    let mut big = vec![5, 42];
    big.resize(42, 0);
    assert_eq!(e(&big), inv("sack length", 42));
    // Errors end the iteration; unknown options are skipped by length.
    let mut it = iter(&[2, 0, 1, 1]);
    assert!(it.next().unwrap().is_err());
    assert!(it.next().is_none());
    assert_eq!(
        parse_all(&[99, 4, 7, 7, 1, 0, 2, 4]).unwrap(),
        vec![
            TcpOption::Unknown {
                kind: 99,
                data: &[7, 7]
            },
            TcpOption::NoOp,
            TcpOption::EndOfList
        ]
    );
    assert_eq!(
        parse_syn_options(&[2, 4, 1, 0, 99, 2, 2, 4, 2, 0, 0]),
        Ok(SynOptions {
            mss: Some(256),
            ..SynOptions::default()
        })
    );
}

#[test]
fn emit_errors() {
    let mut buf = [0u8; 64];
    let ts = TcpOption::Timestamps { tsval: 0, tsecr: 0 };
    assert_eq!(
        emit_options(&[ts; 5], &mut buf),
        Err(Error::TooMany {
            layer: Layer::TcpOption,
            limit: MAX_LEN
        })
    );
    assert_eq!(
        emit_options(&[ts], &mut buf[..11]),
        Err(Error::BufferTooSmall {
            layer: Layer::TcpOption,
            need: 12,
            have: 11
        })
    );
    assert_eq!(
        emit_options(&[TcpOption::Sack(SackBlocks::new())], &mut buf),
        Err(Error::invalid(Layer::TcpOption, "sack length", 2))
    );
    assert_eq!(
        emit_options(&[TcpOption::Unknown { kind: 1, data: &[] }], &mut buf),
        Err(Error::invalid(Layer::TcpOption, "kind", 1))
    );
    assert_eq!(emit_options(&[], &mut []), Ok(0));
    let mut s = SackBlocks::new();
    for i in 0..4 {
        assert!(s.push((i, i + 1)));
    }
    assert!(!s.push((9, 9)));
    assert_eq!(s.len(), 4);
    assert!(SackBlocks::from_slice(&[(0, 0); 5]).is_none());
    assert_eq!(TcpOption::Sack(SackBlocks::new()).to_etherparse(), None);
}
