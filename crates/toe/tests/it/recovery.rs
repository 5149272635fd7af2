//! Loss recovery against a hand-driven receiver: SACK-based fast retransmit of
//! only the holes (RFC 6675), NewReno without SACK on three duplicate ACKs with a
//! partial ACK retransmitting the next hole (RFC 6582), and the congestion window
//! halving (RFC 5681 / RFC 9438).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::config::CongestionControl;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

const MSS: u32 = 1000;

/// An established connection whose peer offered MSS 1000, SACK if `sack`, no
/// timestamps, a large window; 20 segments of data are sent.
fn sending(sack: bool, cc: CongestionControl) -> (Raw, u16, u32, u32, Vec<Seen>) {
    let mut r = Raw::host(|c| {
        c.tcp.congestion_control = cc;
        c.offloads = false;
    });
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let mut opts = vec![O::MaximumSegmentSize(MSS as u16)];
    if sack {
        opts.push(O::SelectiveAcknowledgementPermitted);
    }
    opts.push(O::Noop);
    opts.push(O::WindowScale(4));
    let port = r.answer_syn(c, &syn, &opts);
    let data = common::pattern(20 * MSS as usize, 1);
    assert_eq!(r.e.tcp_send(c, &data).unwrap(), data.len());
    let first = r.segments();
    (r, port, syn.seq.wrapping_add(1), 7001, first)
}

fn ack(r: &mut Raw, port: u16, ack: u32, sack: &[(u32, u32)]) {
    let opts: Vec<O> = if sack.is_empty() {
        vec![]
    } else {
        let first = sack[0];
        let mut more = [None; 3];
        for (slot, b) in more.iter_mut().zip(&sack[1..]) {
            *slot = Some(*b);
        }
        vec![O::Noop, O::Noop, O::SelectiveAcknowledgement(first, more)]
    };
    // 3750 << 4 = 60000: the same window as the SYN-ACK's, so these are duplicates.
    r.input(&tcp_frame(
        80,
        port,
        7001,
        Some(ack),
        Flags::empty(),
        3750,
        &opts,
        &[],
    ));
}

#[test]
fn sack_recovery_retransmits_only_the_hole() {
    let (mut r, port, iss1, _, first) = sending(true, CongestionControl::Cubic);
    // Initial window: 10 segments of 1000 bytes.
    assert_eq!(first.len(), 10);
    // Segment 0 is lost; 1..=4 arrive and are SACKed one by one.
    for k in 1..=4u32 {
        ack(&mut r, port, iss1, &[(iss1 + MSS, iss1 + (k + 1) * MSS)]);
    }
    let out = r.segments();
    let rexmit: Vec<_> = out.iter().filter(|s| s.seq == iss1).collect();
    assert_eq!(rexmit.len(), 1, "{out:?}");
    assert_eq!(rexmit[0].payload.len(), MSS as usize);
    // Nothing that was SACKed went again.
    assert!(
        out.iter()
            .all(|s| s.seq == iss1 || s.seq >= iss1 + 10 * MSS)
    );
    assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    // The cumulative ACK for everything sent ends recovery with cwnd = ssthresh = 0.7 * 10 segments.
    let high = out
        .iter()
        .map(|s| s.seq + s.payload.len() as u32)
        .max()
        .unwrap();
    ack(&mut r, port, high, &[]);
    let c = r.e.counters().clone();
    assert_eq!(c.tcp_retrans_segs, 1);
}

#[test]
fn newreno_three_dupacks_then_partial_ack() {
    let (mut r, port, iss1, _, first) = sending(false, CongestionControl::NewReno);
    assert_eq!(first.len(), 10);
    // Segments 0 and 5 are lost. Three duplicate ACKs for 0.
    for _ in 0..2 {
        ack(&mut r, port, iss1, &[]);
        assert!(r.segments().iter().all(|s| s.seq != iss1));
    }
    ack(&mut r, port, iss1, &[]);
    let out = r.segments();
    assert_eq!(out.iter().filter(|s| s.seq == iss1).count(), 1, "{out:?}");
    // The partial ACK (up to the second hole) retransmits it at once.
    ack(&mut r, port, iss1 + 5 * MSS, &[]);
    let out = r.segments();
    assert_eq!(
        out.iter().filter(|s| s.seq == iss1 + 5 * MSS).count(),
        1,
        "{out:?}"
    );
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    assert_eq!(r.e.counters().tcp_retrans_segs, 2);
}

#[test]
fn rto_after_total_loss_resends_from_snd_una_with_one_segment() {
    let (mut r, _, iss1, _, first) = sending(true, CongestionControl::NewReno);
    assert_eq!(first.len(), 10);
    // The handshake's RTT sample was zero (virtual time): RTO is the 200 ms minimum.
    // A tail loss probe goes first (RFC 8985: after 2 * SRTT + 2 ms), with the
    // next two new segments; the timeout follows it.
    let again = r.advance(Duration::from_millis(300));
    assert_eq!(r.e.counters().tcp_tlp_probes, 1);
    assert_eq!(again[0].seq, iss1 + 10 * MSS, "{again:?}");
    assert_eq!(again[1].seq, iss1 + 11 * MSS, "{again:?}");
    let again = &again[2..];
    // cwnd is one segment after the timeout: exactly the first one goes again.
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].seq, iss1);
    assert_eq!(r.e.counters().tcp_timeouts, 1);
}
