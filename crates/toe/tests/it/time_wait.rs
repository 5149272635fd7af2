//! TIME-WAIT after the application let go (RFC 9293 sections 3.4.2 and
//! 3.10.7.4): the engine keeps a small record instead of the connection, and
//! that record must still answer as TIME-WAIT does: a retransmitted FIN is
//! acknowledged and restarts 2 MSL, an RST at RCV.NXT ends it, one elsewhere in
//! the window draws a challenge ACK (RFC 5961), a SYN reopens the 4-tuple only
//! as RFC 6191 allows, and after 2 MSL the 4-tuple is free again. The segments
//! are built with etherparse and the expected numbers follow from the
//! handshake the test drove itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::TcpState;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

/// The peer's port and initial sequence number.
const PEER_PORT: u16 = 40_000;
const P: u32 = 1_000_000;
/// The peer's timestamp clock at the start.
const TSV: u32 = 5_000;

/// A connection the engine accepted, closed first, and so holds in TIME-WAIT.
struct Tw {
    r: Raw,
    l: linerate_toe::ListenerHandle,
    /// The engine's SND.NXT (past its FIN).
    my_nxt: u32,
    /// The engine's RCV.NXT (past the peer's FIN).
    peer_nxt: u32,
    /// The peer's last TSval.
    last_tsval: u32,
    /// The engine's last TSval seen.
    my_tsval: u32,
}

fn ts(on: bool, val: u32, ecr: u32) -> Vec<O> {
    if on {
        vec![O::Timestamp(val, ecr)]
    } else {
        vec![]
    }
}

/// Engine as server on port 80, MSL 2 s; the peer connects (with timestamps
/// if `with_ts`), the application accepts and closes, the peer acknowledges
/// the FIN and sends its own, which the engine acknowledges.
fn time_wait(with_ts: bool) -> Tw {
    let mut r = Raw::host(|c| c.tcp.msl = Duration::from_secs(2));
    let l = r.e.tcp_listen(80).unwrap();
    let mut syn_opts = vec![O::MaximumSegmentSize(1460)];
    syn_opts.extend(ts(with_ts, TSV, 0));
    r.input(&tcp_frame(
        PEER_PORT,
        80,
        P,
        None,
        Flags::SYN,
        65_535,
        &syn_opts,
        &[],
    ));
    let synack = r.segments();
    assert_eq!(synack.len(), 1);
    assert_eq!(synack[0].flags, Flags::SYN | Flags::ACK);
    assert_eq!(synack[0].ack, P + 1);
    assert_eq!(synack[0].opts.timestamps.is_some(), with_ts);
    let iss = synack[0].seq;
    let my_ts = synack[0].opts.timestamps.map_or(0, |t| t.0);
    r.input(&tcp_frame(
        PEER_PORT,
        80,
        P + 1,
        Some(iss + 1),
        Flags::empty(),
        65_535,
        &ts(with_ts, TSV + 1, my_ts),
        &[],
    ));
    let s = r.e.tcp_accept(l).unwrap();
    r.e.tcp_close(s).unwrap();
    let fin = r.segments();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].flags, Flags::FIN | Flags::ACK);
    assert_eq!(fin[0].seq, iss + 1);
    let my_ts = fin[0].opts.timestamps.map_or(0, |t| t.0);
    r.input(&tcp_frame(
        PEER_PORT,
        80,
        P + 1,
        Some(iss + 2),
        Flags::FIN,
        65_535,
        &ts(with_ts, TSV + 2, my_ts),
        &[],
    ));
    let ack = r.segments();
    assert_eq!(ack.len(), 1, "{ack:?}");
    assert_eq!(
        (ack[0].flags, ack[0].seq, ack[0].ack),
        (Flags::ACK, iss + 2, P + 2)
    );
    Tw {
        l,
        my_tsval: ack[0].opts.timestamps.map_or(0, |t| t.0),
        r,
        my_nxt: iss + 2,
        peer_nxt: P + 2,
        last_tsval: TSV + 2,
    }
}

impl Tw {
    fn records(&self) -> usize {
        self.r.e.memory_usage().time_wait
    }

    fn send(&mut self, seq: u32, ack: Option<u32>, flags: Flags, opts: &[O], data: &[u8]) {
        let f = tcp_frame(PEER_PORT, 80, seq, ack, flags, 65_535, opts, data);
        self.r.input(&f);
    }
}

#[test]
fn time_wait_without_a_handle_is_a_record_not_a_connection() {
    let mut t = time_wait(true);
    let m = t.r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (1, 1), "{m:?}");
    // The 4-tuple is still taken.
    assert_eq!(t.r.e.table_load().0, 1);
    // Nothing to send, and nothing until 2 MSL is over.
    assert!(t.r.advance(Duration::from_millis(3_990)).is_empty());
    assert_eq!(t.records(), 1);
    assert!(t.r.advance(Duration::from_millis(20)).is_empty());
    let m = t.r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (0, 0), "{m:?}");
    assert_eq!(t.r.e.table_load().0, 0);
    assert_eq!(t.r.e.poll_timeout(), None);
}

#[test]
fn retransmitted_fin_is_acknowledged_and_restarts_two_msl() {
    let mut t = time_wait(true);
    t.r.advance(Duration::from_secs(3));
    // Our ACK was lost: the peer sends its FIN again, with a later TSval.
    let (me, peer, tsv) = (t.my_nxt, t.peer_nxt, t.last_tsval + 10);
    t.send(
        peer - 1,
        Some(me),
        Flags::FIN,
        &ts(true, tsv, t.my_tsval),
        &[],
    );
    let a = t.r.segments();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].flags, a[0].seq, a[0].ack), (Flags::ACK, me, peer));
    // The timestamps: our clock moved on 3 s, the echo is the peer's last
    // in-window TSval (the repeated FIN is below RCV.NXT: it does not update it).
    let (val, ecr) = a[0].opts.timestamps.unwrap();
    assert_eq!(ecr, t.last_tsval);
    assert_eq!(val.wrapping_sub(t.my_tsval), 3_000);
    // 2 MSL from that FIN, not from the first.
    assert!(t.r.advance(Duration::from_millis(3_990)).is_empty());
    assert_eq!(t.records(), 1);
    t.r.advance(Duration::from_millis(20));
    assert_eq!(t.records(), 0);
}

#[test]
fn retransmitted_fin_without_timestamps() {
    let mut t = time_wait(false);
    let (me, peer) = (t.my_nxt, t.peer_nxt);
    t.send(peer - 1, Some(me), Flags::FIN, &[], &[]);
    let a = t.r.segments();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].flags, a[0].seq, a[0].ack), (Flags::ACK, me, peer));
    assert_eq!(a[0].opts.timestamps, None);
    // A plain ACK at RCV.NXT is acceptable and asks for nothing.
    t.send(peer, Some(me), Flags::empty(), &[], &[]);
    assert!(t.r.segments().is_empty());
    assert_eq!(t.records(), 1);
}

#[test]
fn rst_in_time_wait() {
    let mut t = time_wait(true);
    let (me, peer) = (t.my_nxt, t.peer_nxt);
    let before = t.r.e.counters().tcp_challenge_acks;
    // Outside the window: dropped, no answer.
    t.send(peer.wrapping_sub(100_000), None, Flags::RST, &[], &[]);
    assert!(t.r.segments().is_empty());
    assert_eq!(t.records(), 1);
    // In the window but not at RCV.NXT: a challenge ACK (RFC 5961 section 3.2).
    t.send(peer + 10, None, Flags::RST, &[], &[]);
    let a = t.r.segments();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].flags, a[0].seq, a[0].ack), (Flags::ACK, me, peer));
    assert_eq!(t.r.e.counters().tcp_challenge_acks, before + 1);
    assert_eq!(t.records(), 1);
    // At RCV.NXT: the record goes at once, silently.
    t.send(peer, None, Flags::RST, &[], &[]);
    assert!(t.r.segments().is_empty());
    let m = t.r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (0, 0), "{m:?}");
    // The 4-tuple is free: a SYN opens a new connection.
    t.send(P + 500, None, Flags::SYN, &[], &[]);
    let s = t.r.segments();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].flags, Flags::SYN | Flags::ACK);
    assert_eq!(s[0].ack, P + 501);
}

#[test]
fn syn_with_a_newer_timestamp_reopens_the_four_tuple() {
    let mut t = time_wait(true);
    let me = t.my_nxt;
    // RFC 6191: a newer TSval is enough, whatever the sequence number.
    let syn_opts = [
        O::MaximumSegmentSize(1460),
        O::Timestamp(t.last_tsval + 1, 0),
    ];
    t.send(7, None, Flags::SYN, &syn_opts, &[]);
    let s = t.r.segments();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!((s[0].flags, s[0].ack), (Flags::SYN | Flags::ACK, 8));
    // The new ISS lies past everything the old incarnation sent.
    let iss = s[0].seq;
    assert_eq!(iss, me.wrapping_add(65_535 + 2));
    assert!(iss.wrapping_sub(me) as i32 > 0);
    assert_eq!(t.records(), 0);
    // The handshake completes and the application gets the connection.
    let my_ts = s[0].opts.timestamps.unwrap().0;
    t.send(
        8,
        Some(iss + 1),
        Flags::empty(),
        &ts(true, t.last_tsval + 2, my_ts),
        &[],
    );
    let s = t.r.e.tcp_accept(t.l).unwrap();
    assert_eq!(t.r.e.tcp_state(s), Ok(TcpState::Established));
    let m = t.r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (1, 0), "{m:?}");
}

#[test]
fn syn_with_an_old_timestamp_does_not_reopen() {
    let mut t = time_wait(true);
    let (me, peer) = (t.my_nxt, t.peer_nxt);
    // An older TSval (an old duplicate SYN, or a peer whose clock went back):
    // the TIME-WAIT stays, and the SYN is answered with an ACK (RFC 5961
    // section 4.2, as in every synchronized state).
    let syn_opts = [O::Timestamp(t.last_tsval - 1, 0)];
    t.send(peer + 1_000, None, Flags::SYN, &syn_opts, &[]);
    let a = t.r.segments();
    assert!(a.iter().all(|s| !s.flags.contains(Flags::SYN)), "{a:?}");
    assert!(a.iter().all(|s| (s.seq, s.ack) == (me, peer)), "{a:?}");
    assert_eq!(t.records(), 1);
}

#[test]
fn syn_without_timestamps_reopens_only_above_rcv_nxt() {
    let mut t = time_wait(false);
    let (me, peer) = (t.my_nxt, t.peer_nxt);
    // At or below RCV.NXT: not a new incarnation.
    t.send(peer - 1, None, Flags::SYN, &[], &[]);
    let a = t.r.segments();
    assert!(a.iter().all(|s| !s.flags.contains(Flags::SYN)), "{a:?}");
    assert_eq!(t.records(), 1);
    // Above it: reopened.
    t.send(peer + 1_000, None, Flags::SYN, &[], &[]);
    let s = t.r.segments();
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(
        (s[0].flags, s[0].ack),
        (Flags::SYN | Flags::ACK, peer + 1_001)
    );
    assert!(s[0].seq.wrapping_sub(me) as i32 > 0);
    assert_eq!(t.records(), 0);
}

/// A segment from the peer's port 80 to the engine's `port` (the engine as
/// client), acknowledging `ack`, with a 65,535 byte window and no options.
fn to_client(port: u16, seq: u32, ack: u32, flags: Flags) -> Vec<u8> {
    tcp_frame(80, port, seq, Some(ack), flags, 65_535, &[], &[])
}

#[test]
fn the_four_tuple_is_reusable_after_two_msl() {
    // Engine as client: it closes first, so its side holds the TIME-WAIT and
    // the same local port towards the same peer is refused until it is over.
    let mut r = Raw::host(|c| c.tcp.msl = Duration::from_secs(1));
    let c = r.e.tcp_connect_from(r.now, 50_000, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let iss = syn.seq;
    r.input(&to_client(50_000, P, iss + 1, Flags::SYN));
    r.segments();
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    r.e.tcp_close(c).unwrap();
    let fin = r.segments();
    assert_eq!(fin[0].flags, Flags::FIN | Flags::ACK);
    r.input(&to_client(50_000, P + 1, iss + 2, Flags::FIN));
    let ack = r.segments();
    assert_eq!((ack.len(), ack[0].ack), (1, P + 2));
    assert_eq!(r.e.memory_usage().time_wait, 1);
    assert_eq!(
        r.e.tcp_connect_from(r.now, 50_000, peer_addr(80)),
        Err(linerate_toe::ConnectError::AddrInUse)
    );
    // Another peer port is another 4-tuple.
    assert!(r.e.tcp_connect_from(r.now, 50_000, peer_addr(81)).is_ok());
    r.advance(Duration::from_millis(2_010));
    assert_eq!(r.e.memory_usage().time_wait, 0);
    let again = r.e.tcp_connect_from(r.now, 50_000, peer_addr(80)).unwrap();
    let syn = r.segments();
    assert!(syn.iter().any(|s| s.flags == Flags::SYN), "{syn:?}");
    assert_eq!(r.e.tcp_state(again), Ok(TcpState::SynSent));
}

#[test]
fn a_handle_still_held_sees_time_wait_then_closed() {
    // Not given up (only shut down): the connection itself stays in
    // TIME-WAIT, visible through its handle; no record is made.
    let mut r = Raw::host(|c| c.tcp.msl = Duration::from_secs(1));
    let c = r.e.tcp_connect_from(r.now, 50_001, peer_addr(80)).unwrap();
    let iss = r.segments().remove(0).seq;
    r.input(&to_client(50_001, P, iss + 1, Flags::SYN));
    r.segments();
    r.e.tcp_shutdown(c).unwrap();
    r.segments();
    r.input(&to_client(50_001, P + 1, iss + 2, Flags::FIN));
    r.segments();
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::TimeWait));
    assert_eq!(r.e.memory_usage().time_wait, 0);
    // Closing the handle now hands the TIME-WAIT over to a record, which ends
    // when the connection's 2 MSL would have.
    r.advance(Duration::from_millis(1_500));
    r.e.tcp_close(c).unwrap();
    let m = r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (1, 1), "{m:?}");
    r.advance(Duration::from_millis(490));
    assert_eq!(r.e.memory_usage().time_wait, 1);
    r.advance(Duration::from_millis(20));
    assert_eq!(r.e.memory_usage().time_wait, 0);
}

#[test]
fn many_time_waits_are_cheap() {
    // A thousand orphaned TIME-WAITs hold no connection slot each: what they
    // cost beyond the empty engine is well under a slot apiece.
    let mut r = Raw::host(|c| c.tcp.msl = Duration::from_secs(1));
    let empty = r.e.memory_usage().total();
    for i in 0..1_000u16 {
        let port = 20_000 + i;
        let c = r.e.tcp_connect_from(r.now, port, peer_addr(80)).unwrap();
        let iss = r.segments().remove(0).seq;
        r.input(&to_client(port, P, iss + 1, Flags::SYN));
        r.e.tcp_close(c).unwrap();
        r.segments();
        r.input(&to_client(port, P + 1, iss + 2, Flags::FIN));
        r.segments();
    }
    let m = r.e.memory_usage();
    assert_eq!((m.connections, m.time_wait), (1_000, 1_000), "{m:?}");
    let per = (m.total() - empty) / 1_000;
    assert!(
        per < linerate_toe::Engine::slot_size() / 2,
        "{per} B each: {m:?}"
    );
    r.advance(Duration::from_millis(2_010));
    assert_eq!(r.e.memory_usage().connections, 0);
}
