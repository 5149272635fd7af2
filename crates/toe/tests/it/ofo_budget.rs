//! The engine-wide bound on out-of-order data (`TcpConfig::ofo_total`): while the
//! bytes held ahead of RCV.NXT over all connections are at the limit, further
//! out-of-order segments are dropped and counted, in-order data is still taken,
//! and the budget comes back as holes are filled.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::SocketHandle;
use linerate_wire::tcp::Flags;

/// An active open to the peer's `peer_port`; returns the socket, our port, the
/// peer's next sequence number and ours.
fn established(r: &mut Raw, peer_port: u16, isn: u32) -> (SocketHandle, u16, u32, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(peer_port)).unwrap();
    let syn = r.segments().remove(0);
    let port = r.answer_syn_with(c, &syn, isn, 60_000, &[]);
    (c, port, isn.wrapping_add(1), syn.seq.wrapping_add(1))
}

/// A data segment from the peer, acknowledging `ack`.
fn data(peer_port: u16, port: u16, seq: u32, ack: u32, payload: &[u8]) -> Vec<u8> {
    tcp_frame(
        peer_port,
        port,
        seq,
        Some(ack),
        Flags::ACK,
        60_000,
        &[],
        payload,
    )
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt)
        .collect()
}

#[test]
fn out_of_order_data_over_all_connections_stays_within_the_budget() {
    let mut r = Raw::host(|c| c.tcp.ofo_total = 3000);
    let (a, pa, sa, ka) = established(&mut r, 80, 1000);
    let (b, pb, sb, kb) = established(&mut r, 81, 500_000);
    let stream_a = pattern(6000, 1);
    let stream_b = pattern(6000, 2);

    // A: 1000 bytes ahead of RCV.NXT, held (1000 of 3000).
    r.input(&data(80, pa, sa + 1000, ka, &stream_a[1000..2000]));
    // B: 2500 bytes ahead, held: the budget was not yet spent when it came (3500).
    r.input(&data(81, pb, sb + 1000, kb, &stream_b[1000..3500]));
    assert_eq!(r.e.counters().tcp_ofo_dropped, 0);
    r.segments();
    // A again, ahead: the budget is spent, dropped and counted.
    r.input(&data(80, pa, sa + 3000, ka, &stream_a[3000..4000]));
    assert_eq!(r.e.counters().tcp_ofo_dropped, 1);
    // The ACK for it still goes out (and names only what A holds).
    let acks = r.segments();
    assert!(acks.iter().any(|s| s.ack == sa), "{acks:?}");

    // In-order data is always taken: A's hole filled, its held range delivered,
    // the budget back under the limit (2500 held).
    r.input(&data(80, pa, sa, ka, &stream_a[..1000]));
    let mut got = vec![0u8; 8000];
    let n = r.e.tcp_recv(a, &mut got).unwrap();
    assert_eq!(&got[..n], &stream_a[..2000]);
    // So A may hold out-of-order data again.
    r.input(&data(80, pa, sa + 3000, ka, &stream_a[3000..4000]));
    assert_eq!(r.e.counters().tcp_ofo_dropped, 1);
    r.input(&data(80, pa, sa + 2000, ka, &stream_a[2000..3000]));
    let n = r.e.tcp_recv(a, &mut got).unwrap();
    assert_eq!(&got[..n], &stream_a[2000..4000]);

    // B's hole filled: everything it held arrives, byte-exact.
    r.input(&data(81, pb, sb, kb, &stream_b[..1000]));
    let n = r.e.tcp_recv(b, &mut got).unwrap();
    assert_eq!(&got[..n], &stream_b[..3500]);
}

#[test]
fn closing_a_connection_returns_its_share_of_the_budget() {
    let mut r = Raw::host(|c| c.tcp.ofo_total = 1000);
    let (a, pa, sa, ka) = established(&mut r, 80, 1000);
    let (_b, pb, sb, kb) = established(&mut r, 81, 9000);
    let stream = pattern(4000, 3);
    r.input(&data(80, pa, sa + 1000, ka, &stream[1000..2000]));
    r.input(&data(81, pb, sb + 1000, kb, &stream[1000..2000]));
    assert_eq!(r.e.counters().tcp_ofo_dropped, 1, "A's 1000 bytes spent it");
    r.e.tcp_abort(a).unwrap();
    r.segments();
    r.input(&data(81, pb, sb + 1000, kb, &stream[1000..2000]));
    assert_eq!(r.e.counters().tcp_ofo_dropped, 1, "A's share came back");
}
