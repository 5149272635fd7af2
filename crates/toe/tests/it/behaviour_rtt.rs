//! The retransmission timeout from timestamp RTT samples (RFC 6298 section 2
//! with RFC 7323 section 4), against a hand-driven peer in virtual time. The
//! expected SRTT, RTTVAR and RTO are computed here from RFC 6298's formulas
//! (alpha = 1/8, beta = 1/4, K = 4, G = 1 ms), with the minimum RTO lowered so
//! that clamping does not hide them; the RTO is checked both as reported and
//! by when the retransmission actually fires.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::TcpState;
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;
use std::time::Duration;

/// RFC 6298 section 2 in floating-point milliseconds: (SRTT, RTTVAR, RTO)
/// after the samples `r`.
fn rfc6298(samples: &[f64]) -> (f64, f64, f64) {
    let (alpha, beta, k, g) = (1.0 / 8.0, 1.0 / 4.0, 4.0, 1.0);
    let (mut srtt, mut rttvar) = (samples[0], samples[0] / 2.0); // 2.2
    for &r in &samples[1..] {
        // 2.3: RTTVAR first, with the old SRTT.
        rttvar = (1.0 - beta) * rttvar + beta * (srtt - r).abs();
        srtt = (1.0 - alpha) * srtt + alpha * r;
    }
    let rto = srtt + f64::max(g, k * rttvar);
    (srtt, rttvar, rto)
}

fn ms(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1e6
}

#[test]
fn srtt_rttvar_and_rto_follow_rfc6298_from_timestamp_samples() {
    let mut r = Raw::host(|c| {
        c.offloads = false;
        c.tcp.min_rto = Duration::from_millis(1);
        c.tcp.no_delay = true;
        c.neighbor_ttl = Duration::from_secs(3600);
    });
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let syn_ts = syn.opts.timestamps.expect("timestamps offered").0;
    // The SYN-ACK comes 300 ms later, echoing the SYN's TSval: the first
    // sample, R = 300 ms. No SACK: no tail loss probe before the RTO.
    r.now += Duration::from_millis(300);
    let port = r.answer_syn_with(
        c,
        &syn,
        4_999,
        60_000,
        &[O::MaximumSegmentSize(1000), O::Timestamp(100, syn_ts)],
    );
    let me = syn.seq.wrapping_add(1);
    let info = r.e.tcp_info(c).unwrap();
    assert!(info.timestamps);
    let (srtt, _, rto) = rfc6298(&[300.0]);
    assert_eq!(ms(info.srtt.unwrap()), srtt);
    assert_eq!(ms(info.rto), rto, "R + max(G, 4 * R/2) = 900 ms");
    assert_eq!(rto, 900.0);

    // Data, acknowledged 100 ms later with its TSval echoed: R' = 100 ms.
    r.e.tcp_send(c, &[1u8; 500]).unwrap();
    let sent = r.segments();
    assert_eq!(sent.len(), 1);
    let tsval = sent[0].opts.timestamps.unwrap().0;
    assert!(r.advance(Duration::from_millis(100)).is_empty());
    r.input(&tcp_frame(
        80,
        port,
        5_000,
        Some(me + 500),
        Flags::ACK,
        60_000,
        &[O::Timestamp(101, tsval)],
        &[],
    ));
    let info = r.e.tcp_info(c).unwrap();
    let (srtt, rttvar, rto) = rfc6298(&[300.0, 100.0]);
    // 7/8 * 300 + 1/8 * 100 = 275; 3/4 * 150 + 1/4 * |300 - 100| = 162.5;
    // 275 + 4 * 162.5 = 925.
    assert_eq!((srtt, rttvar, rto), (275.0, 162.5, 925.0));
    assert_eq!(ms(info.srtt.unwrap()), srtt);
    assert_eq!(ms(info.rto), rto);
    // RTTVAR is not reported on its own: it is what the RTO implies.
    assert_eq!((ms(info.rto) - ms(info.srtt.unwrap())) / 4.0, rttvar);

    // The timer as armed: new data that is never acknowledged goes again
    // exactly one RTO after it was sent (RFC 6298 section 5.1), then after
    // twice that (5.5).
    r.e.tcp_send(c, &[2u8; 500]).unwrap();
    let sent = r.segments();
    assert_eq!(sent.len(), 1);
    let again = r.advance(Duration::from_millis(3000));
    assert!(again.len() >= 2, "{again:?}");
    assert!(again.iter().all(|s| s.seq == me + 500));
    assert_eq!(ms(again[0].at - sent[0].at), rto);
    assert_eq!(ms(again[1].at - again[0].at), 2.0 * rto);
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
}

#[test]
fn the_first_sample_alone_sets_the_timer() {
    // The same first sample, checked by the retransmission alone: data sent
    // right after the handshake goes again 900 ms later.
    let mut r = Raw::host(|c| {
        c.offloads = false;
        c.tcp.min_rto = Duration::from_millis(1);
        c.neighbor_ttl = Duration::from_secs(3600);
    });
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let syn_ts = syn.opts.timestamps.unwrap().0;
    r.now += Duration::from_millis(300);
    r.answer_syn_with(
        c,
        &syn,
        4_999,
        60_000,
        &[O::MaximumSegmentSize(1000), O::Timestamp(100, syn_ts)],
    );
    r.e.tcp_send(c, &[3u8; 100]).unwrap();
    let sent = r.segments();
    let again = r.advance(Duration::from_millis(1000));
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].seq, sent[0].seq);
    assert_eq!(ms(again[0].at - sent[0].at), rfc6298(&[300.0]).2);
}
