//! When the engine acknowledges received data, against a hand-driven sender
//! (RFC 9293 section 3.8.6.3, RFC 5681 section 4.2, RFC 1122 section 4.2.3.2):
//! once the quick-ACK allowance of a new connection is spent, a lone full-sized
//! segment waits for the delayed-ACK timer, the second of two full-sized
//! segments is acknowledged at once, and a GRO super-segment (one frame whose
//! meta says `gso: TcpV4, size: MSS, segs: N`, checksum verified by the NIC)
//! counts as the N segments it holds: acknowledged at once, N segments counted
//! in `tcp_in_segs`, as Linux treats a GRO skb.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_toe::SocketHandle;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

/// The engine's receive MSS: MTU 1500 less 20 bytes of IPv4 and 20 of TCP
/// (no timestamps are negotiated).
const MSS: u32 = 1460;
/// Segments acknowledged at once at the start of a connection, at most. The
/// engine's allowance (Linux's quick-ACK mode at the start has the same
/// purpose); feeding this many single segments spends it whatever it is, as
/// long as it is no larger.
const QUICKACK: u32 = 16;
const DELACK: Duration = Duration::from_millis(40);
/// A pause between parts of a test: longer than the delayed-ACK timer, shorter
/// than the RTO (200 ms at least), so that it does not bring quick ACKs back.
const PAUSE: Duration = Duration::from_millis(100);

struct Peer {
    r: Raw,
    c: SocketHandle,
    port: u16,
    /// The peer's next sequence number.
    seq: u32,
    /// Our next sequence number (what the peer acknowledges).
    me: u32,
    data: Vec<u8>,
    got: Vec<u8>,
}

impl Peer {
    fn new() -> Peer {
        Peer::with(&[O::MaximumSegmentSize(1460), O::Noop, O::WindowScale(7)])
    }

    /// [`Peer::new`] with SACK permitted in the peer's SYN-ACK, as a Linux
    /// sender has it.
    fn sack() -> Peer {
        Peer::with(&[
            O::MaximumSegmentSize(1460),
            O::Noop,
            O::WindowScale(7),
            O::SelectiveAcknowledgementPermitted,
        ])
    }

    /// A connection whose peer answered the SYN with `opts`.
    fn with(opts: &[O]) -> Peer {
        let mut r = Raw::host(|c| {
            c.tcp.delayed_ack = DELACK;
            // The hand-driven peer answers no ARP.
            c.neighbor_ttl = Duration::from_secs(3600);
        });
        let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
        let syn = r.segments().remove(0);
        assert_eq!(syn.opts.mss, Some(MSS as u16), "the MSS this test assumes");
        let port = r.answer_syn_with(c, &syn, 9_999, 65_535, opts);
        Peer {
            r,
            c,
            port,
            seq: 10_000,
            me: syn.seq.wrapping_add(1),
            data: common::pattern(400 * MSS as usize, 5),
            got: Vec::new(),
        }
    }

    /// The next `n` bytes of the peer's stream as one frame.
    fn frame(&mut self, n: usize) -> Vec<u8> {
        let at = self.seq.wrapping_sub(10_000) as usize;
        let f = tcp_frame(
            80,
            self.port,
            self.seq,
            Some(self.me),
            Flags::ACK,
            65_535,
            &[],
            &self.data[at..at + n],
        );
        self.seq = self.seq.wrapping_add(n as u32);
        f
    }

    /// Sends the next `n` bytes as a plain segment.
    fn send(&mut self, n: usize) {
        let f = self.frame(n);
        self.r.input(&f);
    }

    /// Reads what arrived (keeps the window open).
    fn read(&mut self) {
        let mut buf = vec![0u8; 1 << 20];
        while let Ok(n) = self.r.e.tcp_recv(self.c, &mut buf) {
            if n == 0 {
                break;
            }
            self.got.extend_from_slice(&buf[..n]);
        }
    }

    /// Pure ACKs the engine sends now, as their acknowledgement numbers.
    fn acks_now(&mut self) -> Vec<u32> {
        let segs = self.r.segments();
        assert!(segs.iter().all(|s| s.payload.is_empty()), "{segs:?}");
        segs.iter().map(|s| s.ack).collect()
    }

    /// Spends the quick-ACK allowance: single full-sized segments, each
    /// acknowledged at once while it lasts, until one is not.
    fn spend_quickack(&mut self) {
        for k in 0..=QUICKACK {
            self.send(MSS as usize);
            self.read();
            let acks = self.acks_now();
            if acks.is_empty() {
                // Delayed: the allowance is spent. Let the delayed ACK go.
                assert!(k >= 1, "the first segment is acknowledged at once");
                let acks = self.advance_acks(DELACK);
                assert_eq!(acks, vec![self.seq]);
                return;
            }
            assert_eq!(acks, vec![self.seq], "segment {k} acknowledged at once");
        }
        panic!("more than {QUICKACK} segments acknowledged at once, one by one");
    }

    /// Runs timers for `d`; the ACK numbers sent meanwhile.
    fn advance_acks(&mut self, d: Duration) -> Vec<u32> {
        self.r.advance(d).iter().map(|s| s.ack).collect()
    }
}

#[test]
fn a_lone_full_sized_segment_waits_for_the_delayed_ack_timer() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    let t0 = p.r.now;
    p.send(MSS as usize);
    p.read();
    assert_eq!(p.acks_now(), Vec::<u32>::new(), "no ACK at once");
    // Nothing until the deadline, then exactly the ACK of the segment.
    let early = p.r.advance(DELACK - Duration::from_millis(1));
    assert!(early.is_empty(), "{early:?}");
    let acks = p.r.advance(Duration::from_millis(2));
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0].ack, p.seq);
    assert_eq!(acks[0].at - t0, DELACK);
    assert_eq!(p.got, p.data[..p.got.len()]);
}

#[test]
fn the_second_of_two_full_sized_segments_is_acknowledged_at_once() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    p.send(MSS as usize);
    p.read();
    assert!(p.acks_now().is_empty(), "the first waits");
    p.r.now += Duration::from_millis(5);
    p.send(MSS as usize);
    p.read();
    assert_eq!(
        p.acks_now(),
        vec![p.seq],
        "the second: both acknowledged at once"
    );
    // And no delayed ACK is left pending for them.
    assert!(p.r.advance(DELACK * 2).is_empty());
}

/// A GRO super-segment of `segs` full-sized segments, as a NIC hands it over:
/// one frame, `gso` saying what it holds, the checksum verified.
fn gro(p: &mut Peer, segs: u16) {
    let f = p.frame(usize::from(segs) * MSS as usize);
    let mut gso = Gso::new(GsoType::TcpV4, MSS as u16);
    gso.segs = segs;
    let meta = OffloadMeta {
        csum: Checksum::Verified { levels: 1 },
        gso: Some(gso),
        ..OffloadMeta::plain()
    };
    let now = p.r.now;
    p.r.e.handle_frame(now, &f, &meta);
}

#[test]
fn a_gro_super_segment_counts_as_its_segments() {
    for n in [2u16, 3, 8, 44] {
        let mut p = Peer::new();
        p.spend_quickack();
        p.r.now += PAUSE;
        let before = p.r.e.counters().tcp_in_segs;
        gro(&mut p, n);
        assert_eq!(
            p.r.e.counters().tcp_in_segs - before,
            u64::from(n),
            "tcp_in_segs grows by the segments a super-segment holds"
        );
        p.read();
        // At least every second full-sized segment: N >= 2 of them call for an
        // ACK now, covering the end of the super-segment.
        assert_eq!(
            p.acks_now(),
            vec![p.seq],
            "{n} segments acknowledged at once"
        );
        assert!(p.r.advance(DELACK * 2).is_empty());
        assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
        assert_eq!(p.got.len(), (p.seq - 10_000) as usize);
    }
    // By contrast, a single full-sized segment (no GRO) is counted once and
    // waits (the test above).
    let mut p = Peer::new();
    p.spend_quickack();
    let before = p.r.e.counters().tcp_in_segs;
    p.send(MSS as usize);
    assert_eq!(p.r.e.counters().tcp_in_segs - before, 1);
    assert!(p.acks_now().is_empty());
}

/// Every out-of-order frame gets an immediate duplicate ACK of its own (RFC 5681
/// section 4.2), also when several arrive before the engine next transmits (one
/// receive batch): a sender without SACK (this peer negotiated none, like
/// smoltcp) counts three of them to retransmit fast (RFC 5681 section 3.2),
/// where one ACK for the batch would leave it waiting for its timer. Filling
/// the hole is acknowledged once, for everything.
#[test]
fn each_out_of_order_frame_gets_its_own_duplicate_ack() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    let hole_at = p.seq;
    let lost = p.frame(MSS as usize);
    let behind: Vec<Vec<u8>> = (0..4).map(|_| p.frame(MSS as usize)).collect();
    for f in &behind {
        p.r.input(f);
    }
    let dups = p.acks_now();
    assert_eq!(
        dups,
        vec![hole_at; 4],
        "one duplicate ACK per out-of-order frame"
    );
    // Retransmitted data already held is a duplicate too: acknowledged at once,
    // each frame on its own.
    p.r.input(&behind[1]);
    p.r.input(&behind[2]);
    assert_eq!(p.acks_now(), vec![hole_at; 2]);
    p.r.input(&lost);
    p.read();
    assert_eq!(
        p.acks_now(),
        vec![p.seq],
        "the filled hole, acknowledged once"
    );
    assert!(p.r.advance(DELACK * 2).is_empty());
    assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
    assert_eq!(p.got.len(), (p.seq - 10_000) as usize);
}

/// Reordering inside one receive batch, nothing lost: frames 2 to 5 arrive
/// before frame 1, all before the engine next transmits. The ACKs are those a
/// receiver handling the frames one by one sends (Linux's): a duplicate ACK
/// for the hole at frame 1 per out-of-order frame, each with the
/// acknowledgement number of its moment, then one covering all five (the hole
/// filled, RFC 5681 section 4.2). One ACK for the five is the failure this
/// guards against: a Linux sender on a reordering path then gets a stretch ACK
/// per batch and takes several times as long (the reordering cells of
/// `tests/system_impair.rs`'s `issue_16_matrix`).
#[test]
fn reordering_healed_within_one_batch_is_acknowledged_as_it_happened() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    let hole_at = p.seq;
    let first = p.frame(MSS as usize);
    let behind: Vec<Vec<u8>> = (0..4).map(|_| p.frame(MSS as usize)).collect();
    for f in &behind {
        p.r.input(f);
    }
    p.r.input(&first);
    p.read();
    assert_eq!(
        p.acks_now(),
        vec![hole_at, hole_at, hole_at, hole_at, p.seq],
        "four duplicates, then the hole filled"
    );
    assert!(p.r.advance(DELACK * 2).is_empty());
    assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
    assert_eq!(p.got.len(), (p.seq - 10_000) as usize);
}

/// A retransmission fills the hole and, in the same batch, in-order data
/// follows it. The ACK owed for the filled hole carries the acknowledgement
/// number of its moment; the data after it must be acknowledged at once too,
/// not left to the delayed-ACK timer. The failure this guards against: the
/// last ACK short of RCV.NXT, the owed ACK taking the place of the one the
/// later data calls for, and a Linux sender sitting in tail loss probes and
/// 40 ms waits.
#[test]
fn data_after_a_filled_hole_in_one_batch_is_acknowledged_at_once() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    let hole_at = p.seq;
    let lost = p.frame(MSS as usize);
    let behind: Vec<Vec<u8>> = (0..2).map(|_| p.frame(MSS as usize)).collect();
    for f in &behind {
        p.r.input(f);
    }
    assert_eq!(p.acks_now(), vec![hole_at; 2]);
    let filled_to = p.seq;
    let after: Vec<Vec<u8>> = (0..3).map(|_| p.frame(MSS as usize)).collect();
    p.r.input(&lost);
    for f in &after {
        p.r.input(f);
    }
    p.read();
    let acks = p.acks_now();
    assert_eq!(acks.first(), Some(&filled_to), "{acks:?}");
    assert_eq!(acks.last(), Some(&p.seq), "{acks:?}");
    assert!(p.r.advance(DELACK * 2).is_empty());
    assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
}

/// Data the engine has already acknowledged, retransmitted needlessly (wholly
/// below RCV.NXT), draws an immediate duplicate ACK per frame too.
#[test]
fn each_wholly_old_frame_gets_its_own_duplicate_ack() {
    let mut p = Peer::new();
    p.spend_quickack();
    p.r.now += PAUSE;
    let old: Vec<Vec<u8>> = (0..3).map(|_| p.frame(MSS as usize)).collect();
    for f in &old {
        p.r.input(f);
    }
    p.read();
    // Without SACK, every second segment of the batch has an ACK of its own;
    // the one after it is acknowledged at once after that (an ACK owed for
    // an earlier moment is followed by one of RCV.NXT).
    assert_eq!(
        p.acks_now(),
        vec![p.seq - MSS, p.seq],
        "every second segment, then the rest"
    );
    for f in &old {
        p.r.input(f);
    }
    assert_eq!(
        p.acks_now(),
        vec![p.seq; 3],
        "one duplicate ACK per old frame"
    );
}

/// With SACK, as without: several frames of in-order data arriving in one
/// receive batch (GRO super-segments, or plain full-sized segments) are
/// acknowledged as a receiver handling them one by one acknowledges them
/// (Linux: an ACK for each skb holding more than one MSS), not by one stretch
/// ACK for the batch. Each ACK covers the end of its frame (of its second
/// segment), the last one everything.
///
/// With one ACK for the batch, a Linux sender whose flight all arrives in one
/// batch gets one ACK per flight; when that ACK is lost (1 % of frames
/// corrupted), nothing is left to clock it, it waits for its tail loss probe,
/// a single new segment, which waits for our 40 ms delayed-ACK timer (the
/// "dup 5 %, corrupt 1 %" cells, kernel to linerate, of
/// `tests/system_impair.rs`'s `issue_16_matrix`).
#[test]
fn with_sack_each_frame_of_a_batch_holding_two_segments_gets_its_own_ack() {
    let mut p = Peer::sack();
    p.spend_quickack();
    p.r.now += PAUSE;
    let mut ends = Vec::new();
    for n in [4u16, 2, 6] {
        gro(&mut p, n);
        ends.push(p.seq);
    }
    p.read();
    assert_eq!(p.acks_now(), ends, "one ACK per super-segment of the batch");
    assert!(p.r.advance(DELACK * 2).is_empty());

    // Plain full-sized segments (offloads off), four in one batch: every
    // second one acknowledged, as it was when it arrived.
    p.r.now += PAUSE;
    let mut ends = Vec::new();
    for k in 0..4 {
        p.send(MSS as usize);
        if k % 2 == 1 {
            ends.push(p.seq);
        }
    }
    p.read();
    assert_eq!(p.acks_now(), ends, "every second segment of the batch");
    assert!(p.r.advance(DELACK * 2).is_empty());
    assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
    assert_eq!(p.got.len(), (p.seq - 10_000) as usize);
}

/// A receive batch holding more frames than the engine keeps owed ACKs for
/// (40 plain full-sized segments, in order, nothing lost: 20 ACKs owed): every ACK sent
/// acknowledges more than the one before, the last one everything. ACKs owed
/// beyond the 16 the engine keeps must not go out with the final
/// acknowledgment number, all alike: a sender without SACK counts such ACKs as
/// duplicates, more than it has segments out, takes that for reordering and
/// retransmits more than toward a Linux receiver (the "SACK off, loss 1 %"
/// cells of `tests/system_impair.rs`'s `issue_16_matrix`).
#[test]
fn a_batch_longer_than_the_owed_acks_sends_no_duplicate_ack() {
    for mut p in [Peer::new(), Peer::sack()] {
        p.spend_quickack();
        p.r.now += PAUSE;
        let start = p.seq;
        // 40 segments (the connection's 64 KiB window): 20 ACKs owed.
        for _ in 0..40 {
            p.send(MSS as usize);
        }
        p.read();
        let acks = p.acks_now();
        assert!(acks.len() >= 2, "{acks:?}");
        assert!(
            acks.windows(2).all(|w| w[1].wrapping_sub(w[0]) as i32 > 0),
            "ACKs of a batch in order, each past the one before: {:?}",
            acks.iter()
                .map(|a| a.wrapping_sub(start))
                .collect::<Vec<_>>()
        );
        assert_eq!(acks.last(), Some(&p.seq), "the last one acknowledges all");
        assert!(p.r.advance(DELACK * 2).is_empty());

        // Out of order beyond the ring: duplicates, never more than the frames
        // out of order; the hole filled, everything acknowledged at once.
        p.r.now += PAUSE;
        let hole_at = p.seq;
        let lost = p.frame(MSS as usize);
        for _ in 0..40 {
            p.send(MSS as usize);
        }
        let dups = p.acks_now();
        assert!(
            (3..=40).contains(&dups.len()) && dups.iter().all(|&a| a == hole_at),
            "{dups:?}"
        );
        p.r.input(&lost);
        p.read();
        assert_eq!(p.acks_now(), vec![p.seq]);

        // Both in one batch: 34 segments in order (17 ACKs owed), a hole, five
        // out of order. The five duplicate ACKs all go out (a sender without
        // SACK needs three), after ACKs that each moved further.
        p.r.now += PAUSE;
        for _ in 0..34 {
            p.send(MSS as usize);
        }
        let hole_at = p.seq;
        let lost = p.frame(MSS as usize);
        for _ in 0..5 {
            p.send(MSS as usize);
        }
        let acks = p.acks_now();
        let (adv, dups) = acks.split_at(acks.len() - 5);
        assert_eq!(dups, [hole_at; 5], "{acks:?}");
        assert!(
            adv.windows(2).all(|w| w[1].wrapping_sub(w[0]) as i32 > 0)
                && adv.last() == Some(&hole_at),
            "{acks:?}"
        );
        p.r.input(&lost);
        p.read();
        assert_eq!(p.acks_now(), vec![p.seq]);
        assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
        assert_eq!(p.got.len(), (p.seq - 10_000) as usize);
    }
}

/// Quick ACKs come back after a gap in the data longer than the RTO (the
/// sender restarting from a timeout with a window of a segment or two) and
/// after a duplicate (the sender retransmitted), as in Linux's receiver
/// (`tcp_event_data_recv`, `tcp_data_queue`'s `tcp_enter_quickack_mode`):
/// a lone full-sized segment then gets its ACK at once instead of after the
/// delayed-ACK timer. With quick ACKs only at the start of a connection, a
/// sender restarting after each of its timeouts over a lossy path waits for
/// linerate's 40 ms timer where a Linux receiver answers at once (the
/// "loss 5 %" cells, kernel to linerate, of `tests/system_impair.rs`'s
/// `issue_16_matrix`).
#[test]
fn quick_acks_return_after_a_gap_longer_than_the_rto_and_after_a_duplicate() {
    let mut p = Peer::new();
    p.spend_quickack();
    // In delayed-ACK mode: a lone segment waits for the timer.
    p.send(MSS as usize);
    assert!(p.acks_now().is_empty(), "delayed while data flows");
    assert_eq!(p.advance_acks(DELACK), vec![p.seq]);

    // A gap of three seconds (more than any RTO here), then one segment.
    p.r.now += Duration::from_secs(3);
    p.send(MSS as usize);
    assert_eq!(
        p.acks_now(),
        vec![p.seq],
        "acknowledged at once after the gap"
    );
    // And the next ones too, each alone.
    for _ in 0..3 {
        p.send(MSS as usize);
        p.read();
        assert_eq!(p.acks_now(), vec![p.seq]);
    }
    // Spend them again, then a duplicate: acknowledged at once, and so is the
    // lone segment after it.
    p.spend_quickack();
    p.seq -= MSS;
    let old = p.frame(MSS as usize);
    p.r.input(&old);
    assert_eq!(p.acks_now(), vec![p.seq], "the duplicate's ACK");
    p.send(MSS as usize);
    p.read();
    assert_eq!(
        p.acks_now(),
        vec![p.seq],
        "acknowledged at once after a duplicate"
    );
    assert_eq!(p.got, p.data[..p.got.len()], "byte-exact");
}
