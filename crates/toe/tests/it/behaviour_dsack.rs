//! D-SACK on the receive side (RFC 2883 section 4), against a hand-driven peer:
//! an ACK for data that arrived twice carries the duplicate range as its first
//! SACK block, then the SACK blocks as RFC 2018 section 4 orders them (for a
//! duplicate above RCV.NXT, the block holding it second). Covered: a duplicate
//! segment below RCV.NXT, a duplicate of out-of-order data, a GRO super-segment
//! partly old and partly new, and a duplicate range of several segments below
//! RCV.NXT; with timestamps off (four blocks fit) and on (three fit).
//!
//! Before D-SACK, every one of these failed: the duplicate's ACK carried no block
//! for the duplicate (no SACK option at all when nothing was out of order).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::etherparse::{TcpHeaderSlice, TcpOptionElement as O};
use linerate_wire::tcp::Flags;
use linerate_wire::{ethernet, ipv4};

const MSS: u32 = 1000;
const PEER: u32 = 7001;

/// The peer's sequence number of its segment `k` (from its first data byte).
fn seg(k: u32) -> u32 {
    PEER + k * MSS
}

/// A receiver established with a peer offering MSS 1000, SACK and window scale,
/// with timestamps or without, offloads off.
struct Rx {
    r: Raw,
    port: u16,
    me: u32,
    ts: bool,
}

impl Rx {
    fn new(ts: bool) -> Rx {
        let mut opts = vec![
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
            O::Noop,
            O::WindowScale(4),
        ];
        if ts {
            opts.extend([O::Noop, O::Noop, O::Timestamp(100, 0)]);
        }
        let (r, _c, port, me) = connected(|c| c.offloads = false, &opts);
        Rx { r, port, me, ts }
    }

    /// The peer's segments `[a, b)` in one frame (a GRO super-segment when longer
    /// than one segment).
    fn frame(&self, a: u32, b: u32) -> Vec<u8> {
        let opts = if self.ts {
            vec![O::Noop, O::Noop, O::Timestamp(200, 0)]
        } else {
            vec![]
        };
        let payload: Vec<u8> = (a..b)
            .flat_map(|k| std::iter::repeat_n(k as u8, MSS as usize))
            .collect();
        tcp_frame(
            80,
            self.port,
            seg(a),
            Some(self.me),
            Flags::empty(),
            3750,
            &opts,
            &payload,
        )
    }

    /// Delivers segments `[a, b)` in one frame, with GRO meta if more than one;
    /// returns the frames sent in reply.
    fn send(&mut self, a: u32, b: u32) -> Vec<Vec<u8>> {
        let f = self.frame(a, b);
        let meta = if b - a > 1 {
            let mut gso = Gso::new(GsoType::TcpV4, MSS as u16);
            gso.segs = (b - a) as u16;
            OffloadMeta {
                csum: Checksum::Verified { levels: 1 },
                gso: Some(gso),
                ..OffloadMeta::plain()
            }
        } else {
            OffloadMeta::plain()
        };
        let now = self.r.now;
        self.r.e.handle_frame(now, &f, &meta);
        self.r.frames()
    }

    /// Delivers `[a, b)` and returns the one ACK sent for it: (ACK number, SACK
    /// blocks as segment ranges).
    fn ack_for(&mut self, a: u32, b: u32) -> (u32, Vec<(u32, u32)>) {
        let out = self.send(a, b);
        assert_eq!(out.len(), 1, "one ACK for [{a}, {b})");
        let ack = parse_tcp(&out[0], self.r.now).unwrap().ack;
        let blocks = sack_blocks(&out[0])
            .into_iter()
            .map(|(l, r)| ((l - PEER) / MSS, (r - PEER) / MSS))
            .collect();
        ((ack - PEER) / MSS, blocks)
    }
}

/// The SACK blocks of an ACK the engine sent, parsed by etherparse.
fn sack_blocks(frame: &[u8]) -> Vec<(u32, u32)> {
    let eth = ethernet::Packet::new_checked(frame).unwrap();
    let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
    let t = TcpHeaderSlice::from_slice(ip.payload()).unwrap();
    t.options_iterator()
        .filter_map(|o| match o.unwrap() {
            O::SelectiveAcknowledgement(a, more) => {
                Some(std::iter::once(a).chain(more.into_iter().flatten()))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// RFC 2883 section 4.1.1 (no loss, an ACK lost, the segment resent): the
/// duplicate's ACK reports it in a D-SACK block and nothing else.
#[test]
fn duplicate_segment_below_rcv_nxt_is_reported_first() {
    for ts in [false, true] {
        let mut rx = Rx::new(ts);
        rx.send(0, 1);
        rx.send(1, 2);
        assert_eq!(rx.ack_for(0, 1), (2, vec![(0, 1)]), "timestamps {ts}");
        // Reported once: the next ACK has no D-SACK left.
        assert_eq!(rx.ack_for(2, 4), (4, vec![]), "timestamps {ts}");
    }
}

/// RFC 2883 section 4.2.1 (a duplicate with out-of-order data held): the
/// D-SACK block first, then the SACK blocks most recent first; with timestamps
/// off four blocks fit, with them three.
#[test]
fn duplicate_below_rcv_nxt_with_holes_above() {
    for ts in [false, true] {
        let mut rx = Rx::new(ts);
        rx.send(0, 2);
        // Holes at 2, 4, 6: blocks 3, 5, 7 arrive in that order.
        for k in [3, 5, 7] {
            rx.send(k, k + 1);
        }
        let (ack, blocks) = rx.ack_for(1, 2);
        assert_eq!(ack, 2);
        let want = if ts {
            vec![(1, 2), (7, 8), (5, 6)]
        } else {
            vec![(1, 2), (7, 8), (5, 6), (3, 4)]
        };
        assert_eq!(blocks, want, "timestamps {ts}");
    }
}

/// RFC 2883 section 4.2.2 (a duplicate of out-of-order data): the duplicate
/// range first, the block holding it second, then the others.
#[test]
fn duplicate_of_out_of_order_data_is_followed_by_its_block() {
    for ts in [false, true] {
        let mut rx = Rx::new(ts);
        rx.send(0, 1);
        rx.send(2, 4);
        rx.send(5, 6);
        assert_eq!(
            rx.ack_for(3, 4),
            (1, vec![(3, 4), (2, 4), (5, 6)]),
            "timestamps {ts}"
        );
    }
}

/// A retransmitted GRO super-segment partly below RCV.NXT (segments 0..4 when
/// 0 and 1 are in): the new part is taken, the old part reported in a D-SACK
/// block of the ACK it calls for.
#[test]
fn super_segment_partly_old_reports_its_old_part() {
    for ts in [false, true] {
        let mut rx = Rx::new(ts);
        rx.send(0, 2);
        assert_eq!(rx.ack_for(0, 4), (4, vec![(0, 2)]), "timestamps {ts}");
        // And with a block above: the D-SACK first, the block after it.
        rx.send(6, 7);
        assert_eq!(
            rx.ack_for(3, 5),
            (5, vec![(3, 4), (6, 7)]),
            "timestamps {ts}"
        );
    }
}

/// A duplicate range of several segments below RCV.NXT (a super-segment wholly
/// old) is one D-SACK block of all of it.
#[test]
fn duplicate_range_below_rcv_nxt_is_one_block() {
    for ts in [false, true] {
        let mut rx = Rx::new(ts);
        rx.send(0, 6);
        assert_eq!(rx.ack_for(1, 4), (6, vec![(1, 4)]), "timestamps {ts}");
    }
}
