//! RFC 5961 hardening: challenge ACKs for in-window RSTs and SYNs, exact-sequence
//! RSTs accepted; RFC 7323 PAWS; segments for no connection answered with RST;
//! arbitrary frames never panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{ConnectionError, RecvError, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use proptest::prelude::*;

fn established(r: &mut Raw, opts: &[O]) -> (linerate_toe::SocketHandle, u16, u32, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let mut o = vec![O::MaximumSegmentSize(1000)];
    o.extend_from_slice(opts);
    let port = r.answer_syn(c, &syn, &o);
    (c, port, syn.seq.wrapping_add(1), 7001)
}

#[test]
fn in_window_rst_gets_a_challenge_ack_exact_rst_resets() {
    let mut r = Raw::host(|_| {});
    let (c, port, me, peer) = established(&mut r, &[]);
    // RST inside the window but not at RCV.NXT: challenge ACK, connection stays.
    r.input(&tcp_frame(
        80,
        port,
        peer + 100,
        None,
        Flags::RST,
        0,
        &[],
        &[],
    ));
    let ch = r.segments();
    assert_eq!(ch.len(), 1);
    assert_eq!(ch[0].flags, Flags::ACK);
    assert_eq!((ch[0].seq, ch[0].ack), (me, peer));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(r.e.counters().tcp_challenge_acks, 1);
    // RST outside the window: silently dropped.
    r.input(&tcp_frame(
        80,
        port,
        peer.wrapping_sub(100_000),
        None,
        Flags::RST,
        0,
        &[],
        &[],
    ));
    assert!(r.segments().is_empty());
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    // RST exactly at RCV.NXT: reset.
    r.input(&tcp_frame(80, port, peer, None, Flags::RST, 0, &[], &[]));
    assert!(r.segments().is_empty());
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::Reset)
    );
    assert_eq!(
        r.e.tcp_recv(c, &mut [0; 8]),
        Err(RecvError::Failed(ConnectionError::Reset))
    );
    assert_eq!(r.e.counters().tcp_estab_resets, 1);
}

#[test]
fn syn_in_established_gets_a_challenge_ack() {
    let mut r = Raw::host(|_| {});
    let (c, port, me, peer) = established(&mut r, &[]);
    r.input(&tcp_frame(
        80,
        port,
        peer + 5,
        None,
        Flags::SYN,
        60_000,
        &[],
        &[],
    ));
    let ch = r.segments();
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].flags, ch[0].seq, ch[0].ack), (Flags::ACK, me, peer));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
}

#[test]
fn ack_of_unsent_data_is_answered_and_dropped() {
    let mut r = Raw::host(|_| {});
    let (c, port, me, peer) = established(&mut r, &[]);
    r.input(&tcp_frame(
        80,
        port,
        peer,
        Some(me + 5000),
        Flags::empty(),
        60_000,
        &[],
        b"data",
    ));
    let a = r.segments();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].ack, peer, "the data of that segment was not taken");
    assert_eq!(r.e.tcp_info(c).unwrap().recv_queue, 0);
}

#[test]
fn paws_drops_old_timestamps() {
    let mut r = Raw::host(|_| {});
    let (c, port, me, peer) = established(&mut r, &[O::Timestamp(1000, 0)]);
    assert!(r.e.tcp_info(c).unwrap().timestamps);
    r.input(&tcp_frame(
        80,
        port,
        peer,
        Some(me),
        Flags::empty(),
        60_000,
        &[O::Timestamp(1001, 0)],
        b"new",
    ));
    r.segments();
    assert_eq!(r.e.tcp_info(c).unwrap().recv_queue, 3);
    // A segment whose TSval is older than TS.Recent is a wrapped old duplicate.
    r.input(&tcp_frame(
        80,
        port,
        peer + 3,
        Some(me),
        Flags::empty(),
        60_000,
        &[O::Timestamp(900, 0)],
        b"old",
    ));
    let a = r.segments();
    assert_eq!(a.len(), 1);
    assert_eq!(r.e.tcp_info(c).unwrap().recv_queue, 3);
    assert_eq!(r.e.counters().tcp_out_of_window, 1);
}

#[test]
fn segments_for_no_connection_get_rst() {
    let mut r = Raw::host(|_| {});
    // An ACK to a closed port: RST with SEQ = SEG.ACK.
    r.input(&tcp_frame(
        3000,
        81,
        10,
        Some(555),
        Flags::empty(),
        1000,
        &[],
        &[],
    ));
    let s = r.segments();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].flags, s[0].seq), (Flags::RST, 555));
    // A SYN: RST|ACK acknowledging it.
    r.input(&tcp_frame(3000, 81, 10, None, Flags::SYN, 1000, &[], &[]));
    let s = r.segments();
    assert_eq!(
        (s[0].flags, s[0].seq, s[0].ack),
        (Flags::RST | Flags::ACK, 0, 11)
    );
    // An RST: nothing.
    r.input(&tcp_frame(3000, 81, 10, None, Flags::RST, 1000, &[], &[]));
    assert!(r.segments().is_empty());
}

#[test]
fn bad_checksums_and_garbage_are_counted() {
    let mut r = Raw::host(|_| {});
    r.e.tcp_listen(80).unwrap();
    let mut f = tcp_frame(1000, 80, 5, None, Flags::SYN, 1000, &[], &[]);
    let last = f.len() - 1;
    f[last] ^= 0x40; // inside the TCP header: the checksum no longer holds
    r.input(&f);
    assert!(r.segments().is_empty());
    assert_eq!(r.e.counters().tcp_in_csum_errors, 1);
    r.input(&[0u8; 5]);
    assert_eq!(r.e.counters().rx_bad_ethernet, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any bytes after a valid Ethernet header, of any EtherType we handle:
    /// no panic, and the engine stays usable.
    #[test]
    fn arbitrary_frames_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200), kind in 0usize..3, flip in any::<(u16, u8)>()) {
        let mut r = Raw::host(|_| {});
        r.e.tcp_listen(80).unwrap();
        let ethertype: u16 = [0x0800, 0x86dd, 0x0806][kind];
        let mut f = vec![0u8; 14];
        f[..6].copy_from_slice(&ME_MAC);
        f[6..12].copy_from_slice(&PEER_MAC);
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&body);
        r.input(&f);
        // And a valid SYN with one byte flipped somewhere.
        let mut syn = tcp_frame(1000, 80, 5, None, Flags::SYN, 1000, &[O::MaximumSegmentSize(1400), O::WindowScale(3)], b"xy");
        let at = 14 + usize::from(flip.0) % (syn.len() - 14);
        syn[at] ^= flip.1;
        r.input(&syn);
        r.advance(std::time::Duration::from_secs(5));
    }
}
