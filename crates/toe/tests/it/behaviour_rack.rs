//! RACK-TLP (RFC 8985) and RTT sampling after retransmissions (RFC 6298 section
//! 3, RFC 7323 section 4), against a hand-driven peer that decides which
//! segments arrive and when: a lost tail is repaired by a tail loss probe, a lost
//! retransmission is found by RACK, reordering within the reordering window
//! costs no retransmission (and beyond it does), the ACK of a spurious
//! retransmission that echoes the original's timestamp does not inflate the RTO,
//! and many segments found lost at once are retransmitted at the pace of
//! proportional rate reduction (RFC 6937), stopped by an ACK that shows an
//! original arrived, and released after an SRTT if no ACK comes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::{Instant, SocketHandle};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const MSS: u32 = 1000;
/// The round trip the peer plays.
const RTT: Duration = Duration::from_millis(10);

struct Peer {
    r: Raw,
    c: SocketHandle,
    port: u16,
    /// Our first data sequence number.
    base: u32,
    /// Timestamps on: the peer's TSval and the last TSval it saw from us.
    ts: Option<(u32, u32)>,
    /// Data bytes per segment (MSS less the timestamp option).
    seg: u32,
}

/// Established after a handshake that took [`RTT`], with a peer offering MSS
/// 1000, window scale 4 and a 60,000 byte window, SACK if `sack`, timestamps if
/// `ts`; offloads off (one segment per frame).
fn established(sack: bool, ts: bool) -> Peer {
    let mut r = Raw::host(|c| c.offloads = false);
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    r.now += RTT;
    let mut opts = vec![O::MaximumSegmentSize(MSS as u16)];
    if sack {
        opts.push(O::SelectiveAcknowledgementPermitted);
    }
    opts.extend([O::Noop, O::WindowScale(4)]);
    let ts = ts.then(|| (100, syn.opts.timestamps.unwrap().0));
    if let Some((v, e)) = ts {
        opts.push(O::Timestamp(v, e));
    }
    let port = r.answer_syn(c, &syn, &opts);
    Peer {
        r,
        c,
        port,
        base: syn.seq.wrapping_add(1),
        ts,
        seg: if ts.is_some() { MSS - 12 } else { MSS },
    }
}

impl Peer {
    /// An ACK for segments below `ack_seg`, SACKing segment ranges `[a, b)`; with
    /// timestamps it echoes `tsecr` (or the last TSval seen).
    fn ack(&mut self, ack_seg: u32, blocks: &[(u32, u32)], tsecr: Option<u32>) {
        let b: Vec<(u32, u32)> = blocks
            .iter()
            .map(|&(s, e)| (self.base + s * self.seg, self.base + e * self.seg))
            .collect();
        let mut opts = Vec::new();
        if let Some((v, e)) = &mut self.ts {
            *v += 1;
            opts.push(O::Timestamp(*v, tsecr.unwrap_or(*e)));
        }
        if let Some((&first, rest)) = b.split_first() {
            let mut more = [None; 3];
            for (slot, x) in more.iter_mut().zip(rest) {
                *slot = Some(*x);
            }
            opts.extend([O::Noop, O::Noop, O::SelectiveAcknowledgement(first, more)]);
        }
        let frame = tcp_frame(
            80,
            self.port,
            7001,
            Some(self.base + ack_seg * self.seg),
            Flags::empty(),
            3750,
            &opts,
            &[],
        );
        self.r.input(&frame);
    }

    /// Segments sent now, noting the latest TSval.
    fn out(&mut self) -> Vec<Seen> {
        let s = self.r.segments();
        self.note(&s);
        s
    }

    /// Runs time forward by `d`; segments sent meanwhile.
    fn advance(&mut self, d: Duration) -> Vec<Seen> {
        let s = self.r.advance(d);
        self.note(&s);
        s
    }

    fn note(&mut self, s: &[Seen]) {
        if let (Some((_, e)), Some(t)) = (&mut self.ts, s.last().and_then(|x| x.opts.timestamps)) {
            *e = t.0;
        }
    }

    fn later(&mut self, d: Duration) {
        self.r.now += d;
    }

    /// Segment index of a data segment.
    fn idx(&self, s: &Seen) -> u32 {
        s.seq.wrapping_sub(self.base) / self.seg
    }

    fn data(&self, s: &[Seen]) -> Vec<u32> {
        s.iter()
            .filter(|x| !x.payload.is_empty())
            .map(|x| self.idx(x))
            .collect()
    }
}

#[test]
fn lost_tail_segment_is_repaired_by_a_probe_without_rto() {
    let mut p = established(true, false);
    let data = common::pattern(10 * MSS as usize, 1);
    p.r.e.tcp_send(p.c, &data).unwrap();
    let o = p.out();
    assert_eq!(p.data(&o), (0..10).collect::<Vec<_>>());
    // One round trip later segments 0..=8 are acknowledged; 9, the tail, is lost:
    // no SACK block or duplicate ACK will ever tell.
    p.later(RTT);
    p.ack(9, &[], None);
    let acked_at = p.r.now;
    assert!(p.out().is_empty());
    // The probe: the last segment again (there is no new data), after 2 * SRTT
    // plus the delayed-ACK allowance for a single outstanding segment, well
    // before the 200 ms RTO.
    let probe = p.advance(Duration::from_millis(150));
    assert_eq!(p.data(&probe), vec![9], "{probe:?}");
    assert_eq!(probe[0].payload, data[9000..]);
    let waited = probe[0].at - acked_at;
    assert!(
        waited >= 2 * RTT && waited < Duration::from_millis(100),
        "probe after {waited:?}"
    );
    let c = p.r.e.counters().clone();
    assert_eq!((c.tcp_tlp_probes, c.tcp_timeouts), (1, 0), "{c:?}");
    // Its ACK covers everything: nothing else goes, no timer fires.
    p.later(RTT);
    p.ack(10, &[], None);
    assert!(p.advance(Duration::from_secs(2)).is_empty());
    assert_eq!(p.r.e.tcp_info(p.c).unwrap().unacked, 0);
    let c = p.r.e.counters();
    assert_eq!(
        (c.tcp_tlp_probes, c.tcp_timeouts, c.tcp_retrans_segs),
        (1, 0, 1)
    );
}

#[test]
fn lost_retransmission_is_found_by_rack_without_rto() {
    let mut p = established(true, false);
    let data = common::pattern(30 * MSS as usize, 2);
    p.r.e.tcp_send(p.c, &data).unwrap();
    assert_eq!(p.out().len(), 10);
    // Segment 3 is lost: 0..=2 are acknowledged, then 4..=9 SACKed one by one.
    p.later(RTT);
    p.ack(3, &[], None);
    let mut round1 = p.out();
    for k in 4..10 {
        p.ack(3, &[(4, k + 1)], None);
        round1.extend(p.out());
    }
    // Three segments SACKed above it with no reordering seen: lost (RACK's
    // window is zero then, RFC 8985 section 6.2). Retransmitted once, then new data.
    let sent = p.data(&round1);
    assert_eq!(sent.iter().filter(|&&k| k == 3).count(), 1, "{sent:?}");
    let rexmit_at = sent.iter().position(|&k| k == 3).unwrap();
    assert!(
        sent[rexmit_at + 1..].iter().any(|&k| k >= 10),
        "new data after the retransmission: {sent:?}"
    );
    // The retransmission is lost too; the new data sent after it arrives.
    let new: Vec<u32> = sent.iter().copied().filter(|&k| k >= 10).collect();
    p.later(RTT);
    let top = new.iter().max().unwrap() + 1;
    p.ack(3, &[(4, top)], None);
    let round2 = p.out();
    // Data sent after the retransmission was delivered and it was not: RACK marks
    // it lost and it goes a third time, without waiting for the RTO.
    assert_eq!(p.data(&round2).first(), Some(&3), "{round2:?}");
    let c = p.r.e.counters().clone();
    assert_eq!(c.tcp_timeouts, 0, "{c:?}");
    assert!(c.tcp_rack_lost >= 2, "{c:?}");
    // The third copy arrives: everything sent is acknowledged.
    let high = p
        .data(&round2)
        .into_iter()
        .chain(new.iter().copied())
        .max()
        .unwrap()
        + 1;
    p.later(RTT);
    p.ack(high, &[], None);
    assert_eq!(p.r.e.counters().tcp_timeouts, 0);
    let at = (3 * MSS) as usize;
    let third = round2.iter().find(|s| p.idx(s) == 3).unwrap();
    assert_eq!(third.payload, data[at..at + MSS as usize]);
}

#[test]
fn reordering_within_the_window_is_not_retransmitted_beyond_it_is() {
    let mut p = established(true, false);
    let data = common::pattern(20 * MSS as usize, 3);
    p.r.e.tcp_send(p.c, &data[..10 * MSS as usize]).unwrap();
    assert_eq!(p.out().len(), 10);
    // Segment 0 arrives 1 ms after segment 1: less than the window, min_RTT / 4
    // = 2.5 ms.
    p.later(RTT);
    p.ack(0, &[(1, 2)], None);
    let o = p.out();
    assert!(p.data(&o).is_empty());
    let o = p.advance(Duration::from_millis(1));
    assert!(p.data(&o).is_empty());
    p.ack(10, &[], None);
    let quiet = p.advance(Duration::from_millis(50));
    assert!(p.data(&quiet).is_empty(), "{quiet:?}");
    let c = p.r.e.counters().clone();
    assert_eq!(
        (c.tcp_retrans_segs, c.tcp_fast_retransmits),
        (0, 0),
        "{c:?}"
    );
    // The same, with segment 10 held back 5 ms: the reordering timer marks it
    // lost 2.5 ms after segment 11's SACK, and it goes again.
    p.r.e.tcp_send(p.c, &data[10 * MSS as usize..]).unwrap();
    assert_eq!(p.out().len(), 10);
    p.later(RTT);
    p.ack(10, &[(11, 12)], None);
    let sacked_at = p.r.now;
    let o = p.out();
    assert!(p.data(&o).is_empty());
    let out = p.advance(Duration::from_millis(5));
    assert_eq!(p.data(&out), vec![10], "{out:?}");
    let waited = out[0].at - sacked_at;
    assert!(
        waited >= Duration::from_millis(2) && waited <= Duration::from_millis(3),
        "{waited:?}"
    );
    let c = p.r.e.counters();
    assert_eq!(
        (c.tcp_retrans_segs, c.tcp_rack_lost, c.tcp_timeouts),
        (1, 1, 0)
    );
}

#[test]
fn ack_echoing_the_original_after_a_spurious_retransmission_does_not_inflate_the_rto() {
    // No SACK: no probes, only the retransmission timer.
    let mut p = established(false, true);
    let rto0 = p.r.e.tcp_info(p.c).unwrap().rto;
    assert_eq!(rto0, Duration::from_millis(200), "10 ms RTT: the minimum");
    let seg = p.seg as usize;
    p.r.e.tcp_send(p.c, &vec![7u8; seg]).unwrap();
    let orig = p.out();
    let orig_ts = orig[0].opts.timestamps.unwrap().0;
    // The ACK is held back: the RTO fires at 200 ms, 600 ms, 1.4 s and 3 s.
    let again = p.advance(Duration::from_millis(3005));
    assert_eq!(again.len(), 4, "{again:?}");
    assert!(again.iter().all(|s| s.opts.timestamps.unwrap().0 > orig_ts));
    // Then the ACK arrives, echoing the original's TSval: its 3 s are no round
    // trip. Taken as one, SRTT would be near 400 ms and the RTO over 3 s.
    p.ack(1, &[], Some(orig_ts));
    let info = p.r.e.tcp_info(p.c).unwrap();
    assert_eq!(p.r.e.counters().tcp_rtt_spurious_skipped, 1);
    assert_eq!(info.srtt, Some(RTT), "{info:?}");
    // No valid sample yet: the backoff stays (RFC 6298 section 5.7).
    assert_eq!(info.rto, Duration::from_millis(3200));
    // The next segment is acknowledged in one round trip with a proper echo: the
    // backoff ends and the RTO is back at the minimum.
    p.r.e.tcp_send(p.c, &vec![8u8; seg]).unwrap();
    assert_eq!(p.out().len(), 1);
    p.later(RTT);
    p.ack(2, &[], None);
    let info = p.r.e.tcp_info(p.c).unwrap();
    assert_eq!(info.rto, Duration::from_millis(200), "{info:?}");
    // And a loss now costs 200 ms, not seconds.
    p.r.e.tcp_send(p.c, &vec![9u8; seg]).unwrap();
    let sent: Instant = p.out()[0].at;
    let again = p.advance(Duration::from_millis(250));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].at - sent, Duration::from_millis(200));
}

#[test]
fn many_segments_found_lost_at_once_go_a_few_per_ack_and_stop_when_an_original_shows_up() {
    // Timestamps on, so that an ACK can show it was sent for an original.
    let mut p = established(true, true);
    let data = common::pattern(10 * p.seg as usize, 4);
    p.r.e.tcp_send(p.c, &data).unwrap();
    let o = p.out();
    assert_eq!(p.data(&o), (0..10).collect::<Vec<_>>());
    let original_ts = o[0].opts.timestamps.unwrap().0;
    // Segment 9 overtakes the other nine (reordering, as netem's `reorder`):
    // once the reordering window passes they are all marked lost together.
    p.later(RTT);
    p.ack(0, &[(9, 10)], None);
    let first = p.advance(Duration::from_millis(5));
    let c = p.r.e.counters().clone();
    assert_eq!((c.tcp_rack_lost, c.tcp_fast_retransmits), (9, 1), "{c:?}");
    // Proportional rate reduction (RFC 6937): two segments now, not the whole
    // of cwnd = ssthresh (seven) in one burst.
    assert_eq!(p.data(&first), vec![0, 1], "{first:?}");
    // The originals arrive after all: an ACK of 0 echoing its timestamp.
    // While a retransmission (1) is still out nothing more goes (Linux's
    // tcp_try_undo_partial): the rest of the marks came from the same
    // reordering.
    p.ack(1, &[(9, 10)], Some(original_ts));
    let held = p.out();
    assert!(p.data(&held).is_empty(), "{held:?}");
    // Past the retransmissions: the episode is undone.
    p.ack(5, &[(9, 10)], Some(original_ts));
    let held = p.out();
    assert!(p.data(&held).is_empty(), "{held:?}");
    // Everything arrives; nothing else went.
    p.ack(10, &[], Some(original_ts));
    let rest = p.advance(Duration::from_secs(1));
    assert!(p.data(&rest).is_empty(), "{rest:?}");
    let c = p.r.e.counters();
    assert_eq!((c.tcp_retrans_segs, c.tcp_timeouts), (2, 0), "{c:?}");
}

#[test]
fn what_rate_reduction_holds_back_goes_after_an_srtt_without_acks() {
    let mut p = established(true, false);
    let data = common::pattern(10 * MSS as usize, 5);
    p.r.e.tcp_send(p.c, &data).unwrap();
    assert_eq!(p.out().len(), 10);
    // As above: nine segments marked lost together, two retransmitted at once.
    p.later(RTT);
    p.ack(0, &[(9, 10)], None);
    let first = p.advance(Duration::from_millis(5));
    assert_eq!(p.data(&first), vec![0, 1], "{first:?}");
    // No ACK comes to clock out the rest (the whole flight was lost): about
    // an SRTT later the rest of cwnd = ssthresh goes, not at the RTO.
    let marked_at = first[0].at;
    let more = p.advance(Duration::from_millis(15));
    assert_eq!(p.data(&more), vec![2, 3, 4, 5, 6], "{more:?}");
    let waited = more[0].at - marked_at;
    assert!(
        waited >= Duration::from_millis(9) && waited <= Duration::from_millis(12),
        "{waited:?}"
    );
    // Still nothing back: a PTO (2 SRTT + 2 ms) after the last of them, the
    // recovery probe resends the lowest un-SACKed segment, not the RTO.
    let probe = p.advance(Duration::from_millis(100));
    assert_eq!(p.data(&probe), vec![0], "{probe:?}");
    assert_eq!(probe[0].at - more[4].at, 2 * RTT + Duration::from_millis(2));
    assert_eq!(p.r.e.counters().tcp_timeouts, 0);
}

/// Segment 3 lost; 4..=9 SACKed one by one: the retransmission of 3 and new
/// data go. Returns the segments sent in that round.
fn recovery_with_a_retransmission(p: &mut Peer) -> Vec<u32> {
    p.later(RTT);
    p.ack(3, &[], None);
    let mut round = p.out();
    for k in 4..10 {
        p.ack(3, &[(4, k + 1)], None);
        round.extend(p.out());
    }
    let sent = p.data(&round);
    assert_eq!(sent.iter().filter(|&&k| k == 3).count(), 1, "{sent:?}");
    sent
}

#[test]
fn a_lost_ack_at_the_end_of_a_recovery_costs_a_probe_not_the_rto() {
    let mut p = established(true, false);
    let data = common::pattern(40 * MSS as usize, 6);
    p.r.e.tcp_send(p.c, &data).unwrap();
    assert_eq!(p.out().len(), 10);
    let sent = recovery_with_a_retransmission(&mut p);
    let top = sent.iter().max().unwrap() + 1;
    let last_sent = p.r.now;
    // Everything arrives, the retransmission last; the receiver answers all of
    // it with one ACK (as a Linux receiver compressing its SACKs does), and that
    // ACK is lost. Nothing else comes back.
    let probe = p.advance(Duration::from_millis(150));
    // Before: nothing until the retransmission timer (200 ms at least).
    assert!(!probe.is_empty(), "no probe within 150 ms");
    let got = p.data(&probe);
    assert!(got.iter().all(|&k| k >= top), "new data probes: {got:?}");
    let waited = probe[0].at - last_sent;
    assert!(
        waited >= 2 * RTT && waited < Duration::from_millis(60),
        "probe after {waited:?}"
    );
    // Its ACK acknowledges everything: recovery is over, no timeout.
    let high = got.iter().max().unwrap() + 1;
    p.later(RTT);
    p.ack(high, &[], None);
    let c = p.r.e.counters().clone();
    assert_eq!(c.tcp_timeouts, 0, "{c:?}");
    assert_eq!(c.tcp_tlp_probes, 1, "{c:?}");
    // And sending goes on with cwnd as recovery left it, not one segment.
    let next = p.out();
    assert!(p.data(&next).len() >= 2, "{next:?}");
}

#[test]
fn a_lost_last_retransmission_with_no_new_data_is_probed_before_the_rto() {
    let mut p = established(true, false);
    let data = common::pattern(10 * MSS as usize, 7);
    p.r.e.tcp_send(p.c, &data).unwrap();
    assert_eq!(p.out().len(), 10);
    let sent = recovery_with_a_retransmission(&mut p);
    assert_eq!(sent, vec![3], "no new data to send");
    // The retransmission is lost: nothing was sent after it, so no SACK can
    // show RACK the loss. The probe is segment 3 again, well before the RTO.
    let probe = p.advance(Duration::from_millis(150));
    assert_eq!(p.data(&probe), vec![3], "{probe:?}");
    let at = (3 * MSS) as usize;
    assert_eq!(probe[0].payload, data[at..at + MSS as usize]);
    p.later(RTT);
    p.ack(10, &[], None);
    assert!(p.advance(Duration::from_secs(2)).is_empty());
    assert_eq!(p.r.e.tcp_info(p.c).unwrap().unacked, 0);
    let c = p.r.e.counters();
    assert_eq!((c.tcp_timeouts, c.tcp_tlp_probes), (0, 1), "{c:?}");
}
