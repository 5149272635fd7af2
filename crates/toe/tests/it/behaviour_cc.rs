//! What a fast retransmit does to ssthresh, per congestion control, against a
//! hand-driven receiver: the default is CUBIC, whose multiplicative decrease is
//! ssthresh = cwnd * beta_cubic with beta_cubic = 0.7 (RFC 9438 section 4.6);
//! NewReno's is ssthresh = max(FlightSize / 2, 2 * SMSS) (RFC 5681 equation
//! 4). The flow is made application-limited so that FlightSize and cwnd
//! differ, and the two rules give different answers. (The CUBIC window curve
//! of RFC 9438 section 4.2 is checked in `tcp::cc`'s unit tests.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_toe::config::CongestionControl;
use linerate_toe::{Config, TcpState};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::Flags;

const MSS: usize = 1000;

/// What the sender's state was when the third duplicate ACK arrived.
struct Event {
    cwnd_before: usize,
    flight: usize,
    ssthresh: usize,
}

/// Sends 14 segments on a connection to a peer offering MSS 1000 (no SACK,
/// no timestamps): the initial window of 10 goes; the peer acknowledges the
/// first four one by one (slow start: cwnd grows by one MSS each, to 14), the
/// last four go, and with nothing more to send 10 segments are in flight.
/// Segment 4 was lost: three duplicate ACKs for it start a fast retransmit.
fn fast_retransmit(tune: impl FnOnce(&mut Config)) -> Event {
    let (mut r, c, port, base) = connected(
        |c| {
            c.offloads = false;
            c.neighbor_ttl = std::time::Duration::from_secs(3600);
            tune(c);
        },
        &[
            O::MaximumSegmentSize(MSS as u16),
            O::Noop,
            O::WindowScale(4),
        ],
    );
    let data = common::pattern(14 * MSS, 4);
    r.e.tcp_send(c, &data).unwrap();
    let mut high = base;
    let note = |segs: Vec<Seen>, high: &mut u32| {
        for s in segs {
            *high = (*high).max(s.seq + s.payload.len() as u32);
        }
    };
    let first = r.segments();
    assert_eq!(first.len(), 10, "RFC 6928 initial window: {first:?}");
    note(first, &mut high);
    // 3750 << 4 = 60,000: the SYN-ACK's window, so the later ACKs are duplicates.
    let ack = |r: &mut Raw, a: u32| {
        r.input(&tcp_frame(
            80,
            port,
            7001,
            Some(a),
            Flags::ACK,
            3750,
            &[],
            &[],
        ))
    };
    for k in 1..=4u32 {
        ack(&mut r, base + k * MSS as u32);
        let s = r.segments();
        note(s, &mut high);
    }
    let una = base + 4 * MSS as u32;
    assert_eq!(high, base + 14 * MSS as u32, "everything sent");
    let info = r.e.tcp_info(c).unwrap();
    assert_eq!(info.ssthresh, usize::MAX, "no loss yet");
    let cwnd_before = info.cwnd;
    // Slow start with byte counting (RFC 3465, L = 2 SMSS): one MSS per ACK of one MSS.
    assert_eq!(cwnd_before, 14 * MSS);
    let flight = (high - una) as usize;
    assert_eq!(flight, 10 * MSS);
    for _ in 0..3 {
        ack(&mut r, una);
    }
    let out = r.segments();
    assert!(
        out.iter().any(|s| s.seq == una && s.payload.len() == MSS),
        "the hole is retransmitted: {out:?}"
    );
    assert_eq!(r.e.counters().tcp_fast_retransmits, 1);
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    let info = r.e.tcp_info(c).unwrap();
    assert_eq!(info.state, TcpState::Established);
    Event {
        cwnd_before,
        flight,
        ssthresh: info.ssthresh,
    }
}

#[test]
fn default_is_cubic_ssthresh_is_cwnd_times_beta() {
    let e = fast_retransmit(|_| {});
    let beta_cubic = 0.7;
    let want = e.cwnd_before as f64 * beta_cubic;
    assert!(
        (e.ssthresh as f64 - want).abs() < MSS as f64,
        "ssthresh {} vs cwnd {} * 0.7 = {want}",
        e.ssthresh,
        e.cwnd_before
    );
    assert!(e.ssthresh >= 2 * MSS);
    // Not NewReno's rule, which would give something else here.
    assert_ne!(e.ssthresh, (e.flight / 2).max(2 * MSS));
}

#[test]
fn cubic_selected_explicitly_is_the_same() {
    let d = fast_retransmit(|_| {});
    let e = fast_retransmit(|c| c.tcp.congestion_control = CongestionControl::Cubic);
    assert_eq!(d.ssthresh, e.ssthresh);
}

#[test]
fn newreno_ssthresh_is_half_the_flight_size() {
    let e = fast_retransmit(|c| c.tcp.congestion_control = CongestionControl::NewReno);
    let want = (e.flight / 2).max(2 * MSS);
    assert_eq!(e.ssthresh, want, "max(FlightSize / 2, 2 * SMSS)");
    // Not half of cwnd: the flow was application-limited.
    assert_ne!(e.ssthresh, e.cwnd_before / 2);
}
