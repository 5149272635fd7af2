//! Header prediction (the receive fast path, `tcp_hp_hits`), against a
//! hand-driven sender: the next in-order data segment, ACK or ACK|PSH only,
//! acknowledging nothing new while nothing of ours is in flight, with the
//! window unchanged, is taken by the fast path; anything else (out of order, a
//! FIN, a window change, an ACK of new data, data of ours in flight) by the
//! general path. Both place the same bytes: the stream read back is exact and
//! our ACKs acknowledge it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_wire::tcp::Flags;
use std::time::Duration;

fn hits(x: &Receiver) -> u64 {
    x.r.e.counters().tcp_hp_hits
}

#[test]
fn in_order_data_takes_the_fast_path_and_anything_else_the_general_one() {
    let mut x = Receiver::new(|_| {});
    let ack = Flags::ACK;
    let psh = Flags::ACK | Flags::PSH;
    let base = hits(&x);
    // In order, nothing new acknowledged, window as before: predicted.
    x.send_with(0, 1000, 0, ack, 60_000);
    x.send_with(1000, 2000, 0, psh, 60_000);
    assert_eq!(hits(&x) - base, 2);
    // Out of order: the general path (a hole), then its filling.
    x.send_with(3000, 4000, 0, ack, 60_000);
    assert_eq!(hits(&x) - base, 2);
    x.send_with(2000, 3000, 0, ack, 60_000);
    let h = hits(&x) - base;
    // A window change, then the same window again.
    x.send_with(4000, 5000, 0, ack, 50_000);
    assert_eq!(hits(&x) - base, h);
    x.send_with(5000, 6000, 0, ack, 50_000);
    assert_eq!(hits(&x) - base, h + 1);
    // A FIN is the general path's.
    x.send_with(6000, 6500, 0, ack | Flags::FIN, 50_000);
    assert_eq!(hits(&x) - base, h + 1);
    assert_eq!(x.read(), &x.stream[..6500]);
    // Our ACK covers the stream and the FIN.
    let acks = x.r.advance(Duration::from_millis(200));
    let last = acks.last().expect("an ACK");
    assert_eq!(last.ack, x.base.wrapping_add(6501));
}

#[test]
fn data_of_ours_in_flight_or_newly_acknowledged_goes_the_general_way() {
    let mut x = Receiver::new(|_| {});
    let ack = Flags::ACK;
    // Ours in flight: the peer's data segments acknowledge nothing new.
    assert_eq!(x.r.e.tcp_send(x.c, &[7u8; 3000]).unwrap(), 3000);
    let now = x.r.now;
    x.r.e.poll_transmit(now, &mut |_, _| {});
    let base = hits(&x);
    x.send_with(0, 1000, 0, ack, 60_000);
    assert_eq!(hits(&x), base, "data in flight: general path");
    // This one acknowledges all of ours: general path, and SND.UNA moves.
    x.send_with(1000, 2000, 3000, ack, 60_000);
    assert_eq!(hits(&x), base);
    assert_eq!(x.r.e.tcp_info(x.c).unwrap().unacked, 0);
    // Now nothing is in flight: predicted again.
    x.send_with(2000, 3000, 3000, ack, 60_000);
    assert_eq!(hits(&x), base + 1);
    assert_eq!(x.read(), &x.stream[..3000]);
}
