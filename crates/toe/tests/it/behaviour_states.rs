//! State transitions on the wire against a hand-driven peer (tests/handshake.rs and
//! tests/timers.rs cover them engine to engine): simultaneous open (RFC 9293
//! section 3.5, figure 8) and simultaneous close (section 3.6, figure 13) with the
//! exact segments each side sends, and RFC 5961 challenge ACKs in the states past
//! ESTABLISHED (CLOSE-WAIT, FIN-WAIT-2), where tests/security.rs covers ESTABLISHED.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{ConnectionError, SocketHandle, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const P: u32 = 70_000;

fn host() -> Raw {
    Raw::host(|c| {
        c.offloads = false;
        c.tcp.msl = Duration::from_secs(1);
        c.neighbor_ttl = Duration::from_secs(3600);
    })
}

#[test]
fn simultaneous_open_syns_cross() {
    let mut r = host();
    let c = r.e.tcp_connect_from(r.now, 6000, peer_addr(7000)).unwrap();
    let syn = r.segments().remove(0);
    assert_eq!(syn.flags, Flags::SYN);
    let iss = syn.seq;
    // The peer's SYN crosses ours: SYN-SENT -> SYN-RECEIVED, and a SYN-ACK goes out
    // with our ISS again, acknowledging the peer's SYN, with our options.
    let opts = [
        O::MaximumSegmentSize(1000),
        O::SelectiveAcknowledgementPermitted,
    ];
    r.input(&tcp_frame(
        7000,
        6000,
        P,
        None,
        Flags::SYN,
        20_000,
        &opts,
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::SynReceived));
    let sa = r.segments();
    assert_eq!(sa.len(), 1, "{sa:?}");
    assert_eq!(sa[0].flags, Flags::SYN | Flags::ACK);
    assert_eq!((sa[0].seq, sa[0].ack), (iss, P + 1));
    assert_eq!(sa[0].opts.mss, Some(1460));
    assert!(sa[0].opts.sack_permitted);
    // The peer's SYN-ACK (it did the same) completes the handshake.
    r.input(&tcp_frame(
        7000,
        6000,
        P,
        Some(iss.wrapping_add(1)),
        Flags::SYN,
        20_000,
        &opts,
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    let i = r.e.tcp_info(c).unwrap();
    assert!(i.sack);
    assert_eq!(i.snd_mss, 1000);
    // Data flows from ISS + 1, acknowledging P + 1.
    r.e.tcp_send(c, b"hello").unwrap();
    let d: Vec<Seen> = r
        .segments()
        .into_iter()
        .filter(|s| !s.payload.is_empty())
        .collect();
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].seq, d[0].ack), (iss.wrapping_add(1), P + 1));
    // And data from the peer is taken.
    r.input(&tcp_frame(
        7000,
        6000,
        P + 1,
        Some(iss.wrapping_add(6)),
        Flags::empty(),
        20_000,
        &[],
        b"world",
    ));
    let mut buf = [0u8; 8];
    assert_eq!(r.e.tcp_recv(c, &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"world");
}

#[test]
fn simultaneous_open_completed_by_a_plain_ack() {
    let mut r = host();
    let c = r.e.tcp_connect_from(r.now, 6001, peer_addr(7001)).unwrap();
    let iss = r.segments().remove(0).seq;
    r.input(&tcp_frame(
        7001,
        6001,
        P,
        None,
        Flags::SYN,
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::SynReceived));
    r.segments();
    // A peer that answers our SYN-ACK with an ACK alone.
    r.input(&tcp_frame(
        7001,
        6001,
        P + 1,
        Some(iss.wrapping_add(1)),
        Flags::empty(),
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    // The peer offered no options: none are used.
    let i = r.e.tcp_info(c).unwrap();
    assert!(!i.sack && !i.timestamps);
    assert_eq!((i.snd_wscale, i.rcv_wscale, i.snd_mss), (0, 0, 536));
}

/// Established to the peer at port 80 (no options); (handle, port, ISS + 1).
fn established(r: &mut Raw) -> (SocketHandle, u16, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let port = r.answer_syn_with(c, &syn, P, 20_000, &[O::MaximumSegmentSize(1000)]);
    (c, port, syn.seq.wrapping_add(1))
}

#[test]
fn simultaneous_close_goes_through_closing_on_the_wire() {
    let mut r = host();
    let (c, port, me) = established(&mut r);
    r.e.tcp_shutdown(c).unwrap();
    let fin = r.segments();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].flags, Flags::FIN | Flags::ACK);
    assert_eq!((fin[0].seq, fin[0].ack), (me, P + 1));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::FinWait1));
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        Some(me),
        Flags::FIN,
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Closing));
    let a = r.segments();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].flags, Flags::ACK);
    assert_eq!((a[0].seq, a[0].ack), (me + 1, P + 2));
    // The peer's ACK of our FIN: TIME-WAIT, for 2 MSL (2 s here).
    r.input(&tcp_frame(
        80,
        port,
        P + 2,
        Some(me + 1),
        Flags::empty(),
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    assert!(r.segments().is_empty(), "nothing acknowledges an ACK");
    let quiet = r.advance(Duration::from_millis(1_900));
    assert!(quiet.is_empty(), "{quiet:?}");
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    r.advance(Duration::from_millis(200));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Closed));
    assert_eq!(r.e.tcp_recv(c, &mut [0; 4]), Ok(0));
}

#[test]
fn our_fin_retransmitted_in_closing_until_acknowledged() {
    let mut r = host();
    let (c, port, me) = established(&mut r);
    r.e.tcp_shutdown(c).unwrap();
    r.segments();
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        Some(me),
        Flags::FIN,
        20_000,
        &[],
        &[],
    ));
    r.segments();
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Closing));
    // Our FIN is unacknowledged: the retransmission timer sends it again.
    let again = r.advance(Duration::from_secs(3));
    assert!(!again.is_empty());
    assert!(
        again
            .iter()
            .all(|s| s.flags.contains(Flags::FIN) && s.seq == me && s.ack == P + 2),
        "{again:?}"
    );
}

/// Established, then the peer's FIN: CLOSE-WAIT. Returns (handle, port, ISS + 1).
fn close_wait(r: &mut Raw) -> (SocketHandle, u16, u32) {
    let (c, port, me) = established(r);
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        Some(me),
        Flags::FIN,
        20_000,
        &[],
        &[],
    ));
    r.segments();
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::CloseWait));
    (c, port, me)
}

#[test]
fn challenge_acks_in_close_wait() {
    let mut r = host();
    let (c, port, me) = close_wait(&mut r);
    // An RST inside the window but not at RCV.NXT (P + 2): a challenge ACK.
    r.input(&tcp_frame(80, port, P + 500, None, Flags::RST, 0, &[], &[]));
    let ch = r.segments();
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].flags, ch[0].seq, ch[0].ack), (Flags::ACK, me, P + 2));
    // A SYN: a challenge ACK too (RFC 5961 section 4).
    r.input(&tcp_frame(
        80,
        port,
        P + 2,
        None,
        Flags::SYN,
        20_000,
        &[],
        &[],
    ));
    let ch = r.segments();
    assert_eq!(ch.len(), 1);
    assert_eq!((ch[0].flags, ch[0].seq, ch[0].ack), (Flags::ACK, me, P + 2));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::CloseWait));
    assert_eq!(r.e.counters().tcp_challenge_acks, 2);
    // The exact RST resets it.
    r.input(&tcp_frame(80, port, P + 2, None, Flags::RST, 0, &[], &[]));
    assert_eq!(
        r.e.tcp_readiness(c).unwrap().error,
        Some(ConnectionError::Reset)
    );
}

#[test]
fn challenge_acks_in_fin_wait_2() {
    let mut r = host();
    let (c, port, me) = established(&mut r);
    r.e.tcp_shutdown(c).unwrap();
    r.segments();
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        Some(me + 1),
        Flags::empty(),
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::FinWait2));
    r.input(&tcp_frame(80, port, P + 900, None, Flags::RST, 0, &[], &[]));
    let ch = r.segments();
    assert_eq!(ch.len(), 1);
    assert_eq!(
        (ch[0].flags, ch[0].seq, ch[0].ack),
        (Flags::ACK, me + 1, P + 1)
    );
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        None,
        Flags::SYN,
        20_000,
        &[],
        &[],
    ));
    assert_eq!(r.segments().len(), 1);
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::FinWait2));
    assert_eq!(r.e.counters().tcp_challenge_acks, 2);
    // Data still arrives in FIN-WAIT-2.
    r.input(&tcp_frame(
        80,
        port,
        P + 1,
        Some(me + 1),
        Flags::empty(),
        20_000,
        &[],
        b"late",
    ));
    let mut buf = [0u8; 8];
    assert_eq!(r.e.tcp_recv(c, &mut buf), Ok(4));
}
