//! `Segment::parse` (with its direct reads of the usual option layouts)
//! against etherparse, which builds and reads the segments independently, and
//! against `Segment::parse_general` (the option walk every segment took
//! before), which it must match exactly on any input, refusals included.

use super::*;
use linerate_wire::etherparse::{TcpHeader, TcpHeaderSlice, TcpOptionElement};
use proptest::prelude::*;

/// Everything a parse yields, comparable.
type Parsed<'a> = (
    u16,
    u16,
    u32,
    u32,
    u16,
    u16,
    SynOptions,
    SackBlocks,
    &'a [u8],
    u32,
);

fn flat<'a>(s: &Segment<'a>) -> Parsed<'a> {
    (
        s.src_port,
        s.dst_port,
        s.seq.0,
        s.ack.0,
        s.flags.bits(),
        s.wnd,
        s.opts,
        s.sack,
        s.payload,
        s.segs,
    )
}

/// `parse` and `parse_general` agree on `bytes`: the same segment or the
/// same error.
fn same_as_general(bytes: &[u8], segs: u32) -> Result<(), TestCaseError> {
    let fast = Segment::parse(bytes, segs).map(|s| flat(&s));
    let general = Segment::parse_general(bytes, segs).map(|s| flat(&s));
    prop_assert_eq!(fast, general);
    Ok(())
}

fn element() -> impl Strategy<Value = TcpOptionElement> {
    use TcpOptionElement::*;
    prop_oneof![
        Just(Noop),
        any::<u16>().prop_map(MaximumSegmentSize),
        any::<u8>().prop_map(WindowScale),
        Just(SelectiveAcknowledgementPermitted),
        any::<(u32, u32)>().prop_map(|(a, b)| Timestamp(a, b)),
        (
            any::<(u32, u32)>(),
            proptest::option::of(any::<(u32, u32)>())
        )
            .prop_map(|(a, b)| SelectiveAcknowledgement(a, [b, None, None])),
    ]
}

/// Option lists: the layouts read directly, and any others.
fn elements() -> impl Strategy<Value = Vec<TcpOptionElement>> {
    use TcpOptionElement::*;
    prop_oneof![
        Just(vec![]),
        any::<(u32, u32)>().prop_map(|(a, b)| vec![Noop, Noop, Timestamp(a, b)]),
        (any::<u16>(), any::<(u32, u32)>(), any::<u8>()).prop_map(|(m, (a, b), ws)| vec![
            MaximumSegmentSize(m),
            SelectiveAcknowledgementPermitted,
            Timestamp(a, b),
            Noop,
            WindowScale(ws),
        ]),
        proptest::collection::vec(element(), 0..6),
    ]
}

proptest! {
    /// Segments etherparse writes, read back: the header fields and options
    /// are what etherparse reads from the same bytes, and the payload follows
    /// the header. Then damaged (a byte of the data offset or the options
    /// changed, or the buffer cut short): the same result as the general walk.
    #[test]
    fn matches_etherparse_and_the_general_walk(
        ports in any::<(u16, u16)>(),
        seq in any::<u32>(),
        ack in any::<u32>(),
        wnd in any::<u16>(),
        flag_bits in any::<u8>(),
        opts in elements(),
        payload_len in 0usize..40,
        segs in 0u32..4,
        damage in proptest::option::of((12usize..60, any::<u8>())),
        cut in proptest::option::of(0usize..100),
    ) {
        let mut h = TcpHeader::new(ports.0, ports.1, seq, wnd);
        h.acknowledgment_number = ack;
        h.fin = flag_bits & 1 != 0;
        h.syn = flag_bits & 2 != 0;
        h.rst = flag_bits & 4 != 0;
        h.psh = flag_bits & 8 != 0;
        h.ack = flag_bits & 16 != 0;
        h.urg = flag_bits & 32 != 0;
        h.ece = flag_bits & 64 != 0;
        h.cwr = flag_bits & 128 != 0;
        if h.set_options(&opts).is_err() {
            return Ok(());
        }
        let mut bytes = h.to_bytes().to_vec();
        let hl = bytes.len();
        bytes.extend((0..payload_len).map(|i| i as u8));

        let s = Segment::parse(&bytes, segs).expect("a well-formed segment");
        let e = TcpHeaderSlice::from_slice(&bytes).expect("etherparse reads it");
        prop_assert_eq!((s.src_port, s.dst_port), (e.source_port(), e.destination_port()));
        prop_assert_eq!((s.seq.0, s.ack.0, s.wnd), (e.sequence_number(), e.acknowledgment_number(), e.window_size()));
        let f = |x: Flags| s.flags.contains(x);
        prop_assert_eq!(
            [f(Flags::FIN), f(Flags::SYN), f(Flags::RST), f(Flags::PSH), f(Flags::ACK), f(Flags::URG), f(Flags::ECE), f(Flags::CWR)],
            [e.fin(), e.syn(), e.rst(), e.psh(), e.ack(), e.urg(), e.ece(), e.cwr()]
        );
        prop_assert_eq!(s.payload, &bytes[hl..]);
        prop_assert_eq!(s.segs, segs.max(1));
        // The options as etherparse reads them: the first MSS, window scale
        // and timestamps count, SACK-permitted anywhere, the last SACK.
        let mut want = SynOptions::default();
        let mut sack = SackBlocks::new();
        for o in e.options_iterator() {
            match o.expect("etherparse reads the options") {
                TcpOptionElement::MaximumSegmentSize(m) => { want.mss.get_or_insert(m); }
                TcpOptionElement::WindowScale(w) => { want.window_scale.get_or_insert(w); }
                TcpOptionElement::SelectiveAcknowledgementPermitted => want.sack_permitted = true,
                TcpOptionElement::Timestamp(a, b) => { want.timestamps.get_or_insert((a, b)); }
                TcpOptionElement::SelectiveAcknowledgement(first, rest) => {
                    sack = SackBlocks::new();
                    for b in std::iter::once(Some(first)).chain(rest).flatten() {
                        sack.push(b);
                    }
                }
                TcpOptionElement::Noop => {}
            }
        }
        prop_assert_eq!(s.opts, want);
        prop_assert_eq!(s.sack, sack);
        same_as_general(&bytes, segs)?;

        if let Some((at, v)) = damage
            && let Some(b) = bytes.get_mut(at)
        {
            *b = v;
        }
        if let Some(c) = cut {
            bytes.truncate(c);
        }
        same_as_general(&bytes, segs)?;
    }

    /// Arbitrary bytes, mostly shaped like the layouts read directly (data
    /// offset 5, 8 or 10, their option bytes) with lengths and option bytes
    /// that may be wrong: the same as the general walk.
    #[test]
    fn arbitrary_bytes_as_the_general_walk(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..72),
        shape in 0usize..4,
        keep in 0usize..20,
        segs in any::<u32>(),
    ) {
        let layouts: [&[u8]; 3] = [
            &[],
            &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            &[2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 1, 3, 3, 7],
        ];
        if let Some(l) = layouts.get(shape) && bytes.len() >= 20 {
            bytes[12] = (((20 + l.len()) / 4) as u8) << 4 | (bytes[12] & 0x0f);
            // A prefix of the layout, the rest left random.
            let n = keep.min(l.len()).max(l.len().saturating_sub(3));
            for (i, &b) in l.iter().take(n).enumerate() {
                if let Some(x) = bytes.get_mut(20 + i) {
                    *x = b;
                }
            }
        }
        same_as_general(&bytes, segs)?;
    }
}

/// Options running past the header, data offsets below 5 and headers past
/// the end of the buffer are refused, as the general walk refuses them.
#[test]
fn malformed_refused_as_before() {
    let base = {
        let mut b = vec![0u8; 32];
        b[12] = 8 << 4;
        b[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        b
    };
    assert!(Segment::parse(&base, 1).is_ok());
    let cases: Vec<Vec<u8>> = vec![
        base[..19].to_vec(),
        base[..31].to_vec(),
        {
            let mut b = base.clone();
            b[12] = 4 << 4;
            b
        },
        {
            let mut b = base.clone();
            b[12] = 9 << 4;
            b
        },
        {
            // Timestamps whose length runs past the header.
            let mut b = base.clone();
            b[23] = 11;
            b
        },
        {
            // An option length below 2.
            let mut b = base.clone();
            b[23] = 1;
            b
        },
    ];
    for b in &cases {
        let fast = Segment::parse(b, 1).map(|s| flat(&s));
        assert!(fast.is_err(), "{b:?} accepted");
        assert_eq!(fast, Segment::parse_general(b, 1).map(|s| flat(&s)));
    }
}
