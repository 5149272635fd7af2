//! Each TCP option negotiated or refused, as seen on the wire (RFC 9293 section
//! 3.7.1 MSS, RFC 7323 window scale and timestamps, RFC 2018 SACK-permitted): the
//! engine opens a connection to a hand-driven peer whose SYN-ACK offers the option
//! or not (or the engine's own configuration leaves it out), then the segments it
//! sends are parsed with etherparse and checked for what is in use.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{Config, SocketHandle, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;

const PEER_ISS: u32 = 50_000;

/// A connection from the engine (offloads off: one segment per frame) to a peer
/// whose SYN-ACK carries `opts` and the window field `wnd`. Returns the engine's
/// SYN (as a frame), its ISS + 1 and the connection.
struct Conn {
    r: Raw,
    c: SocketHandle,
    port: u16,
    syn: Vec<u8>,
    me: u32,
}

fn open(tune: impl FnOnce(&mut Config), opts: &[O], wnd: u16) -> Conn {
    let mut r = Raw::host(|c| {
        c.offloads = false;
        tune(c);
    });
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.frames().remove(0);
    let seen = parse_tcp(&syn, r.now).unwrap();
    assert_eq!(seen.flags, Flags::SYN);
    let port = r.e.tcp_addrs(c).unwrap().0.port();
    r.input(&tcp_frame(
        80,
        port,
        PEER_ISS,
        Some(seen.seq.wrapping_add(1)),
        Flags::SYN,
        wnd,
        opts,
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    Conn {
        r,
        c,
        port,
        syn,
        me: seen.seq.wrapping_add(1),
    }
}

impl Conn {
    /// The frames the engine sends now.
    fn out(&mut self) -> Vec<Vec<u8>> {
        self.r.frames()
    }

    /// Data from the peer at `seq` (relative to its ISS + 1), with `opts`.
    fn data(&mut self, rel: u32, opts: &[O], payload: &[u8]) {
        let f = tcp_frame(
            80,
            self.port,
            PEER_ISS + 1 + rel,
            Some(self.me),
            Flags::empty(),
            8_000,
            opts,
            payload,
        );
        self.r.input(&f);
    }
}

fn has_ts(o: &[O]) -> Option<(u32, u32)> {
    o.iter().find_map(|o| match o {
        O::Timestamp(v, e) => Some((*v, *e)),
        _ => None,
    })
}

fn has_sack(o: &[O]) -> bool {
    o.iter()
        .any(|o| matches!(o, O::SelectiveAcknowledgement(..)))
}

// --- MSS ------------------------------------------------------------------------

#[test]
fn mss_offered_caps_every_data_segment() {
    let mut k = open(|_| {}, &[O::MaximumSegmentSize(700)], 60_000);
    // Our SYN announced what our MTU allows: 1500 - 40.
    assert!(tcp_options(&k.syn).contains(&O::MaximumSegmentSize(1460)));
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 5_000]).unwrap();
    let segs: Vec<Seen> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .collect();
    let lens: Vec<usize> = segs
        .iter()
        .map(|s| s.payload.len())
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(
        lens,
        vec![700, 700, 700, 700, 700, 700, 700, 100],
        "{segs:?}"
    );
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().snd_mss, 700);
}

#[test]
fn no_mss_offered_means_536_for_ipv4() {
    let mut k = open(|_| {}, &[], 60_000);
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 2_000]).unwrap();
    let lens: Vec<usize> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .map(|s| s.payload.len())
        .filter(|&n| n > 0)
        .collect();
    // RFC 9293 section 3.7.1: without the option, 536 bytes (IPv4 default).
    assert_eq!(lens, vec![536, 536, 536, 392]);
}

#[test]
fn mss_less_the_timestamp_option_when_timestamps_are_in_use() {
    let mut k = open(
        |_| {},
        &[O::MaximumSegmentSize(1000), O::Timestamp(9, 0)],
        60_000,
    );
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 3_000]).unwrap();
    let lens: Vec<usize> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .map(|s| s.payload.len())
        .filter(|&n| n > 0)
        .collect();
    // RFC 7323 section 3.2 / RFC 6691: the 12 option bytes come out of the MSS.
    assert_eq!(lens, vec![988, 988, 988, 36]);
}

// --- Window scale ---------------------------------------------------------------

#[test]
fn window_scale_offered_scales_both_directions() {
    // The peer's shift is 3: its window field 1000 means 8000 bytes. The
    // receive buffer is the whole 512 KiB from the start (no auto-tuning).
    let mut k = open(
        |c| c.tcp.recv_autotune = false,
        &[O::MaximumSegmentSize(1000), O::Noop, O::WindowScale(3)],
        10_000,
    );
    assert!(tcp_options(&k.syn).contains(&O::WindowScale(4)));
    // The SYN-ACK's own window is never scaled (RFC 7323 section 2.2): 10,000.
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().snd_wnd, 10_000);
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().snd_wscale, 3);
    // A window update of 1000 << 3.
    k.r.input(&tcp_frame(
        80,
        k.port,
        PEER_ISS + 1,
        Some(k.me),
        Flags::empty(),
        1000,
        &[],
        &[],
    ));
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().snd_wnd, 8_000);
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 20_000]).unwrap();
    let segs: Vec<Seen> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .collect();
    let sent: usize = segs.iter().map(|s| s.payload.len()).sum();
    assert_eq!(sent, 8_000, "exactly the scaled window: {segs:?}");
    // Our own window fields are scaled by our shift 4: 512 KiB buffer less nothing
    // read = 524,288 >> 4.
    for s in &segs {
        assert_eq!(s.wnd, (524_288u32 >> 4) as u16);
    }
}

#[test]
fn window_scale_not_offered_means_no_scaling_either_way() {
    let mut k = open(|_| {}, &[O::MaximumSegmentSize(1000)], 8_000);
    let i = k.r.e.tcp_info(k.c).unwrap();
    assert_eq!((i.snd_wscale, i.rcv_wscale), (0, 0));
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 20_000]).unwrap();
    let segs: Vec<Seen> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .collect();
    let sent: usize = segs.iter().map(|s| s.payload.len()).sum();
    // The peer's 8000 is taken as it is, not shifted by our 4.
    assert_eq!(sent, 8_000, "{segs:?}");
    // Our window: the 512 KiB buffer cannot be told without scaling: 65,535.
    assert!(segs.iter().all(|s| s.wnd == 65_535));
    assert!(segs.iter().all(|f| f.opts.window_scale.is_none()));
}

#[test]
fn window_scale_turned_off_locally_is_not_offered_and_peer_shift_ignored() {
    let mut k = open(
        |c| c.tcp.window_scaling = false,
        &[O::MaximumSegmentSize(1000), O::Noop, O::WindowScale(5)],
        8_000,
    );
    assert!(
        !tcp_options(&k.syn)
            .iter()
            .any(|o| matches!(o, O::WindowScale(_)))
    );
    // RFC 7323 section 2.2: scaling only if both sent the option.
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().snd_wscale, 0);
    k.r.input(&tcp_frame(
        80,
        k.port,
        PEER_ISS + 1,
        Some(k.me),
        Flags::empty(),
        3_000,
        &[],
        &[],
    ));
    k.r.e.tcp_set_nodelay(k.c, true).unwrap();
    k.r.e.tcp_send(k.c, &vec![1u8; 20_000]).unwrap();
    let sent: usize = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .map(|s| s.payload.len())
        .sum();
    assert_eq!(sent, 3_000);
}

// --- SACK-permitted -------------------------------------------------------------

#[test]
fn sack_permitted_offered_dup_acks_carry_sack_blocks() {
    let mut k = open(
        |_| {},
        &[
            O::MaximumSegmentSize(1000),
            O::SelectiveAcknowledgementPermitted,
        ],
        8_000,
    );
    assert!(tcp_options(&k.syn).contains(&O::SelectiveAcknowledgementPermitted));
    assert!(k.r.e.tcp_info(k.c).unwrap().sack);
    // Out of order: 1000 bytes past a 1000-byte hole.
    k.data(1000, &[], &[5; 1000]);
    let a = k.out();
    assert_eq!(a.len(), 1);
    let o = tcp_options(&a[0]);
    let blocks: Vec<(u32, u32)> = o
        .iter()
        .filter_map(|o| match o {
            O::SelectiveAcknowledgement(b, _) => Some(*b),
            _ => None,
        })
        .collect();
    assert_eq!(
        blocks,
        vec![(PEER_ISS + 1001, PEER_ISS + 2001)],
        "the block past the hole"
    );
}

#[test]
fn sack_permitted_not_offered_dup_acks_carry_none() {
    let mut k = open(|_| {}, &[O::MaximumSegmentSize(1000)], 8_000);
    assert!(!k.r.e.tcp_info(k.c).unwrap().sack);
    k.data(1000, &[], &[5; 1000]);
    let a = k.out();
    assert_eq!(a.len(), 1, "still a duplicate ACK");
    assert_eq!(parse_tcp(&a[0], k.r.now).unwrap().ack, PEER_ISS + 1);
    assert!(!has_sack(&tcp_options(&a[0])));
}

#[test]
fn sack_turned_off_locally_is_not_offered_nor_used() {
    let mut k = open(
        |c| c.tcp.sack = false,
        &[
            O::MaximumSegmentSize(1000),
            O::SelectiveAcknowledgementPermitted,
        ],
        8_000,
    );
    assert!(!tcp_options(&k.syn).contains(&O::SelectiveAcknowledgementPermitted));
    assert!(!k.r.e.tcp_info(k.c).unwrap().sack);
    k.data(1000, &[], &[5; 1000]);
    let a = k.out();
    assert!(!has_sack(&tcp_options(&a[0])));
}

// --- Timestamps -----------------------------------------------------------------

#[test]
fn timestamps_offered_every_segment_echoes_ts_recent() {
    let mut k = open(
        |_| {},
        &[O::MaximumSegmentSize(1000), O::Timestamp(1_000, 0)],
        8_000,
    );
    let syn_ts = has_ts(&tcp_options(&k.syn)).expect("our SYN offers timestamps");
    assert_eq!(syn_ts.1, 0, "a SYN echoes nothing");
    // The ACK of the handshake echoes the SYN-ACK's TSval.
    let ack = k.out();
    assert_eq!(has_ts(&tcp_options(&ack[0])).map(|t| t.1), Some(1_000));
    assert!(has_ts(&tcp_options(&ack[0])).unwrap().0 >= syn_ts.0);
    // In-order data with a newer TSval: the echo follows it (RFC 7323 section 4.3).
    k.data(0, &[O::Timestamp(1_005, 0)], &[1; 100]);
    k.r.advance(std::time::Duration::from_millis(100));
    k.r.e.tcp_send(k.c, b"reply").unwrap();
    let out = k.out();
    assert!(!out.is_empty());
    for f in &out {
        assert_eq!(has_ts(&tcp_options(f)).map(|t| t.1), Some(1_005), "{f:?}");
    }
}

#[test]
fn timestamps_not_offered_no_segment_carries_them() {
    let mut k = open(|_| {}, &[O::MaximumSegmentSize(1000)], 8_000);
    assert!(!k.r.e.tcp_info(k.c).unwrap().timestamps);
    let mut frames = k.out();
    k.r.e.tcp_send(k.c, &vec![2u8; 3_000]).unwrap();
    frames.extend(k.out());
    k.data(0, &[], &[1; 100]);
    k.r.now += std::time::Duration::from_millis(100);
    k.r.e.handle_timeout(k.r.now); // the delayed ACK of the peer's data
    frames.extend(k.out());
    assert!(frames.len() >= 5, "{}", frames.len());
    for f in &frames {
        assert!(tcp_options(f).is_empty(), "no options at all after the SYN");
    }
}

#[test]
fn timestamps_turned_off_locally_peer_timestamps_ignored() {
    let mut k = open(
        |c| c.tcp.timestamps = false,
        &[O::MaximumSegmentSize(1000), O::Timestamp(1_000, 0)],
        8_000,
    );
    assert!(has_ts(&tcp_options(&k.syn)).is_none());
    assert!(!k.r.e.tcp_info(k.c).unwrap().timestamps);
    // The peer keeps sending TSopt (it should not); RFC 7323 section 3.2 says
    // ignore it: no PAWS drop for an "old" TSval, no echo.
    k.data(0, &[O::Timestamp(5, 0)], &[1; 100]);
    k.data(100, &[O::Timestamp(1, 0)], &[2; 100]);
    assert_eq!(k.r.e.tcp_info(k.c).unwrap().recv_queue, 200);
    for f in k.out() {
        assert!(has_ts(&tcp_options(&f)).is_none());
    }
    // Full 1000-byte segments: no 12 bytes set aside for the option.
    k.r.e.tcp_send(k.c, &vec![2u8; 2_000]).unwrap();
    let lens: Vec<usize> = k
        .out()
        .iter()
        .filter_map(|f| parse_tcp(f, k.r.now))
        .map(|s| s.payload.len())
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(lens, vec![1000, 1000]);
}
