//! ECN (RFC 3168) on the wire, against a hand-driven peer: negotiation both
//! ways (section 6.1.1), ECT(0) on new data only (section 6.1.5), CE echoed
//! with ECE until CWR (section 6.1.3), the sender's one reduction per window
//! and its CWR (section 6.1.2), and CWR on the first segment of a
//! super-segment only (the GSO ECN flag). Frames are built and parsed by
//! etherparse, independent of the engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_offload::OffloadMeta;
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_toe::{Config, EcnMode, SocketHandle, TcpState};
use linerate_wire::etherparse::{
    IpEcn, IpHeaders, IpNumber, Ipv4Header, Ipv4HeaderSlice, Ipv6Header, Ipv6HeaderSlice,
    PacketBuilder, TcpHeader, TcpHeaderSlice, TcpOptionElement as O,
};

use std::time::Duration;

const MSS: usize = 1000;
const NOT_ECT: u8 = 0;
const ECT0: u8 = 2;
const CE: u8 = 3;

/// A segment as sent, parsed by etherparse.
#[derive(Debug, Clone)]
struct Out {
    ecn: u8,
    seq: u32,
    syn: bool,
    ece: bool,
    cwr: bool,
    len: usize,
}

fn parse(f: &[u8]) -> Option<Out> {
    let (ecn, l4) = match f.get(12..14)? {
        [0x08, 0x00] => {
            let ip = Ipv4HeaderSlice::from_slice(&f[14..]).ok()?;
            let h = ip.to_header();
            // The codepoint is set after the header was put together: its
            // checksum must still hold.
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "IPv4 header checksum"
            );
            let l4 = &f[14 + ip.slice().len()..14 + usize::from(ip.total_len())];
            (
                ip.ecn().value(),
                (ip.protocol() == IpNumber::TCP).then_some(l4)?,
            )
        }
        [0x86, 0xdd] => {
            let ip = Ipv6HeaderSlice::from_slice(&f[14..]).ok()?;
            let l4 = &f[54..54 + usize::from(ip.payload_length())];
            (
                ip.ecn().value(),
                (ip.next_header() == IpNumber::TCP).then_some(l4)?,
            )
        }
        _ => return None,
    };
    let t = TcpHeaderSlice::from_slice(l4).ok()?;
    Some(Out {
        ecn,
        seq: t.sequence_number(),
        syn: t.syn(),
        ece: t.ece(),
        cwr: t.cwr(),
        len: l4.len() - t.slice().len(),
    })
}

/// Every frame the engine sends now with its meta, unsegmented.
fn emitted(r: &mut Raw) -> Vec<(Vec<u8>, OffloadMeta)> {
    let mut out = Vec::new();
    let now = r.now;
    r.e.poll_transmit(now, &mut |f, m| out.push((f.to_vec(), *m)));
    out
}

/// The wire segments the engine sends now (super-segments cut by the real
/// software GSO).
fn sent(r: &mut Raw) -> Vec<Out> {
    r.frames().iter().filter_map(|f| parse(f)).collect()
}

/// Flags of a peer segment.
#[derive(Default, Clone, Copy)]
struct F {
    syn: bool,
    ack: Option<u32>,
    ece: bool,
    cwr: bool,
}

/// A segment from the peer (10.0.0.2:`from`) to the engine's port `to`, in a
/// datagram with ECN codepoint `ecn`.
fn peer(from: u16, to: u16, seq: u32, f: F, ecn: u8, opts: &[O], payload: &[u8]) -> Vec<u8> {
    let mut h = TcpHeader::new(from, to, seq, 60_000);
    h.syn = f.syn;
    h.ece = f.ece;
    h.cwr = f.cwr;
    if let Some(a) = f.ack {
        h.ack = true;
        h.acknowledgment_number = a;
    }
    h.set_options(opts).unwrap();
    let mut ip = Ipv4Header::new(0, 64, IpNumber::TCP, [10, 0, 0, 2], [10, 0, 0, 1]).unwrap();
    ip.ecn = IpEcn::try_new(ecn).unwrap();
    let b = PacketBuilder::ethernet2(PEER_MAC, ME_MAC)
        .ip(IpHeaders::Ipv4(ip, Default::default()))
        .tcp_header(h);
    let mut out = Vec::with_capacity(b.size(payload.len()));
    b.write(&mut out, payload).unwrap();
    out
}

fn host(mode: EcnMode, offloads: bool) -> Raw {
    Raw::host(|c: &mut Config| {
        c.tcp.ecn = mode;
        c.offloads = offloads;
        c.neighbor_ttl = std::time::Duration::from_secs(3600);
    })
}

const SYN_OPTS: &[O] = &[
    O::MaximumSegmentSize(MSS as u16),
    O::Noop,
    O::WindowScale(4),
];

/// Advances time by `d`, running timers; returns the segments sent meanwhile.
fn advance(r: &mut Raw, d: Duration) -> Vec<Out> {
    let end = r.now + d;
    let mut seen = sent(r);
    while let Some(t) = r.e.poll_timeout() {
        if t > end {
            break;
        }
        r.now = t.max(r.now);
        r.e.handle_timeout(r.now);
        seen.extend(sent(r));
    }
    r.now = end;
    seen
}

/// A passive open: the peer's SYN (asking for ECN with `ask`) to a listener on
/// port 80 under `mode`; returns the host, the SYN-ACK and the accepted socket
/// once the peer's ACK completed the handshake.
fn passive(mode: EcnMode, ask: bool) -> (Raw, Out, SocketHandle) {
    let mut r = host(mode, false);
    let l = r.e.tcp_listen(80).unwrap();
    let f = F {
        syn: true,
        ece: ask,
        cwr: ask,
        ..F::default()
    };
    r.input(&peer(5000, 80, 100, f, NOT_ECT, SYN_OPTS, &[]));
    let out = sent(&mut r);
    assert_eq!(out.len(), 1, "{out:?}");
    let sa = out[0].clone();
    let ack = F {
        ack: Some(sa.seq + 1),
        ..F::default()
    };
    r.input(&peer(5000, 80, 101, ack, NOT_ECT, &[], &[]));
    let c = r.e.tcp_accept(l).unwrap();
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    (r, sa, c)
}

/// An active open to the peer's port 80 under `mode`; the peer answers with a
/// SYN-ACK carrying ECE and CWR as given. Returns the host, the SYN, the
/// socket, its port and its first data sequence number.
fn active(
    mode: EcnMode,
    offloads: bool,
    ece: bool,
    cwr: bool,
) -> (Raw, Out, SocketHandle, u16, u32) {
    let mut r = host(mode, offloads);
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = sent(&mut r).remove(0);
    let (me, _) = r.e.tcp_addrs(c).unwrap();
    let f = F {
        syn: true,
        ack: Some(syn.seq + 1),
        ece,
        cwr,
    };
    r.input(&peer(80, me.port(), 7000, f, NOT_ECT, SYN_OPTS, &[]));
    let acks = sent(&mut r);
    assert!(
        acks.iter().all(|a| a.ecn == NOT_ECT && a.len == 0),
        "{acks:?}"
    );
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    let first = syn.seq + 1;
    (r, syn, c, me.port(), first)
}

#[test]
fn passive_open_answers_an_ecn_syn_with_ece_only() {
    let (mut r, sa, c) = passive(EcnMode::Passive, true);
    assert!(
        sa.syn && sa.ece && !sa.cwr,
        "RFC 3168 6.1.1: SYN-ACK with ECE, not CWR: {sa:?}"
    );
    assert_eq!(sa.ecn, NOT_ECT, "no ECT on a SYN-ACK (6.1.1)");
    assert!(r.e.tcp_info(c).unwrap().ecn);
    assert_eq!(r.e.counters().tcp_ecn_negotiated, 1);
    // Data goes out ECT(0); a pure ACK does not.
    r.e.tcp_send(c, &[7u8; 300]).unwrap();
    let d = sent(&mut r);
    assert_eq!(d.len(), 1);
    assert_eq!((d[0].len, d[0].ecn), (300, ECT0), "{d:?}");
    let ack = F {
        ack: Some(d[0].seq + 300),
        ..F::default()
    };
    r.input(&peer(5000, 80, 101, ack, NOT_ECT, &[], &[1u8; 10]));
    let a = advance(&mut r, Duration::from_millis(200));
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!((a[0].len, a[0].ecn, a[0].ece), (0, NOT_ECT, false), "{a:?}");
}

#[test]
fn passive_open_without_asking_or_with_ecn_off_gets_a_plain_synack() {
    for (mode, ask) in [
        (EcnMode::Passive, false),
        (EcnMode::On, false),
        (EcnMode::Off, true),
    ] {
        let (mut r, sa, c) = passive(mode, ask);
        assert!(!sa.ece && !sa.cwr, "{mode:?} ask {ask}: {sa:?}");
        assert!(!r.e.tcp_info(c).unwrap().ecn);
        r.e.tcp_send(c, &[7u8; 300]).unwrap();
        let d = sent(&mut r);
        assert_eq!(
            (d[0].len, d[0].ecn),
            (300, NOT_ECT),
            "{mode:?} ask {ask}: {d:?}"
        );
    }
}

#[test]
fn active_open_asks_only_when_on() {
    let (mut r, syn, c, _, _) = active(EcnMode::On, false, true, false);
    assert!(
        syn.ece && syn.cwr,
        "RFC 3168 6.1.1: an ECN-setup SYN: {syn:?}"
    );
    assert_eq!(syn.ecn, NOT_ECT);
    assert!(r.e.tcp_info(c).unwrap().ecn);
    r.e.tcp_send(c, &[7u8; 300]).unwrap();
    assert_eq!(sent(&mut r)[0].ecn, ECT0);

    // Linux's default (tcp_ecn=2) does not ask.
    let (_, syn, c2, _, _) = active(EcnMode::Passive, false, false, false);
    assert!(!syn.ece && !syn.cwr, "{syn:?}");
    let _ = c2;

    // A SYN-ACK with ECE and CWR both is from a peer that only reflects the
    // bits (RFC 3168 6.1.1): no ECN.
    let (mut r, _, c, _, _) = active(EcnMode::On, false, true, true);
    assert!(!r.e.tcp_info(c).unwrap().ecn);
    r.e.tcp_send(c, &[7u8; 300]).unwrap();
    assert_eq!(sent(&mut r)[0].ecn, NOT_ECT);
    // And a peer that ignored the request.
    let (r, _, c, _, _) = active(EcnMode::On, false, false, false);
    assert!(!r.e.tcp_info(c).unwrap().ecn);
}

#[test]
fn ce_is_echoed_with_ece_on_every_ack_until_cwr() {
    let (mut r, _, c, port, me) = active(EcnMode::On, false, true, false);
    let data = |seq: u32, ecn: u8, cwr: bool| {
        let f = F {
            ack: Some(me),
            cwr,
            ..F::default()
        };
        peer(80, port, seq, f, ecn, &[], &[5u8; MSS])
    };
    let mut seq = 7001;
    // A CE-marked segment: acknowledged at once, with ECE.
    r.input(&data(seq, CE, false));
    seq += MSS as u32;
    let a = sent(&mut r);
    assert_eq!(a.len(), 1, "the first CE asks for an ACK at once: {a:?}");
    assert!(a[0].ece, "{a:?}");
    assert_eq!(r.e.counters().tcp_ecn_ce_in, 1);
    // Unmarked segments after it: every ACK still carries ECE.
    for _ in 0..4 {
        r.input(&data(seq, ECT0, false));
        seq += MSS as u32;
    }
    let a = advance(&mut r, Duration::from_millis(100));
    assert!(!a.is_empty());
    assert!(a.iter().all(|s| s.ece), "ECE until CWR: {a:?}");
    // Data we send meanwhile carries ECE too (Linux sets it on every segment).
    r.e.tcp_send(c, &[1u8; 100]).unwrap();
    let d = sent(&mut r);
    assert!(d.iter().all(|s| s.ece && s.len == 100), "{d:?}");
    // The segment with CWR ends the echo.
    r.input(&data(seq, ECT0, true));
    seq += MSS as u32;
    r.input(&data(seq, ECT0, false));
    let a = advance(&mut r, Duration::from_millis(100));
    assert!(!a.is_empty());
    assert!(a.iter().all(|s| !s.ece), "no ECE after CWR: {a:?}");
}

#[test]
fn ce_is_ignored_without_ecn() {
    let (mut r, _, _, port, me) = active(EcnMode::Passive, false, false, false);
    let f = F {
        ack: Some(me),
        ..F::default()
    };
    r.input(&peer(80, port, 7001, f, CE, &[], &[5u8; MSS]));
    let a = advance(&mut r, Duration::from_millis(100));
    assert!(a.iter().all(|s| !s.ece), "{a:?}");
}

/// Sends `n` segments of new data on an ECN connection (offloads off);
/// returns their sequence numbers.
fn send_window(r: &mut Raw, c: SocketHandle, n: usize) -> Vec<u32> {
    r.e.tcp_send(c, &vec![3u8; n * MSS]).unwrap();
    let d = sent(r);
    assert!(d.iter().all(|s| s.ecn == ECT0 && !s.cwr), "{d:?}");
    d.iter().map(|s| s.seq).collect()
}

#[test]
fn ece_reduces_cwnd_once_per_window_and_the_next_new_data_carries_cwr() {
    let (mut r, _, c, port, me) = active(EcnMode::On, false, true, false);
    let seqs = send_window(&mut r, c, 10);
    assert_eq!(seqs.len(), 10, "initial window");
    let ack = |r: &mut Raw, a: u32, ece: bool| {
        let f = F {
            ack: Some(a),
            ece,
            ..F::default()
        };
        r.input(&peer(80, port, 7001, f, NOT_ECT, &[], &[]));
    };
    // A plain ACK of the first segment: slow start, cwnd 11 MSS.
    ack(&mut r, me + MSS as u32, false);
    let grown = r.e.tcp_info(c).unwrap().cwnd;
    assert_eq!(grown, 11 * MSS);
    let _ = sent(&mut r);
    // ECE on the ACK of the second: cwnd reduced as a loss would (CUBIC,
    // beta 0.7 of the flight), nothing retransmitted.
    ack(&mut r, me + 2 * MSS as u32, true);
    let info = r.e.tcp_info(c).unwrap();
    assert!(info.cwnd < grown, "reduced: {} -> {}", grown, info.cwnd);
    assert_eq!(info.ssthresh, info.cwnd, "ssthresh set");
    assert_eq!(r.e.counters().tcp_ecn_reductions, 1);
    assert_eq!(r.e.counters().tcp_retrans_segs, 0);
    let reduced = info.cwnd;
    // More ECEs within the same window: no further reduction.
    for k in 3..=6u32 {
        ack(&mut r, me + k * MSS as u32, true);
    }
    assert_eq!(r.e.counters().tcp_ecn_reductions, 1, "once per window");
    assert!(r.e.tcp_info(c).unwrap().cwnd >= reduced);
    // The next new data carries CWR, only the first segment of it.
    let _ = sent(&mut r);
    r.e.tcp_send(c, &vec![4u8; 3 * MSS]).unwrap();
    let d = sent(&mut r);
    assert!(!d.is_empty(), "{d:?}");
    assert!(d[0].cwr && d[0].ecn == ECT0, "{d:?}");
    assert!(d[1..].iter().all(|s| !s.cwr), "{d:?}");
    let high = d.iter().map(|s| s.seq + s.len as u32).max().unwrap();
    // ECE once the reduced window has been acknowledged: a new reduction.
    ack(&mut r, me + 10 * MSS as u32, false);
    let _ = sent(&mut r);
    ack(&mut r, high, true);
    assert_eq!(r.e.counters().tcp_ecn_reductions, 2, "next window");
}

/// The reduction lasts until something above SND.MAX as it was at the
/// reduction is acknowledged, not merely up to it (Linux's CWR state:
/// "CWR is to be held something *above* high_seq is ACKed for CWR bit to
/// reach receiver", `tcp_fastretrans_alert`). The ACK of exactly that
/// point was sent before the receiver could see our CWR (which goes on the
/// next new data, at that point), so its ECE still answers the old mark.
/// Taken as a new mark, that ACK would reduce cwnd a second time: two
/// reductions per mark in `ecn_sim` once the receiver acknowledges every
/// second segment.
#[test]
fn an_ece_on_the_ack_of_the_reduced_window_itself_does_not_reduce_again() {
    let (mut r, _, c, port, me) = active(EcnMode::On, false, true, false);
    let seqs = send_window(&mut r, c, 10);
    assert_eq!(seqs.len(), 10, "initial window");
    let high = me + 10 * MSS as u32;
    let ack = |r: &mut Raw, a: u32, ece: bool| {
        let f = F {
            ack: Some(a),
            ece,
            ..F::default()
        };
        r.input(&peer(80, port, 7001, f, NOT_ECT, &[], &[]));
    };
    ack(&mut r, me + MSS as u32, true);
    assert_eq!(r.e.counters().tcp_ecn_reductions, 1);
    // Nothing new is sent meanwhile (the application has nothing more).
    let _ = sent(&mut r);
    // The receiver acknowledges the whole window, still echoing: no CWR has
    // reached it.
    ack(&mut r, high, true);
    assert_eq!(
        r.e.counters().tcp_ecn_reductions,
        1,
        "the ACK of the reduced window answers the same mark"
    );
    // New data carries CWR; an ECE on an ACK above the old SND.MAX is a new
    // mark: a new reduction.
    r.e.tcp_send(c, &vec![4u8; 2 * MSS]).unwrap();
    let d = sent(&mut r);
    assert!(d.first().is_some_and(|s| s.cwr && s.seq == high), "{d:?}");
    ack(&mut r, high + MSS as u32, true);
    assert_eq!(r.e.counters().tcp_ecn_reductions, 2, "next window");
}

#[test]
fn retransmissions_are_not_ect() {
    let (mut r, _, c, port, me) = active(EcnMode::On, false, true, false);
    let seqs = send_window(&mut r, c, 2);
    assert_eq!(seqs[0], me);
    // Nothing acknowledged: the retransmission timer resends the first segment.
    let a = advance(&mut r, Duration::from_secs(2));
    let rtx: Vec<_> = a.iter().filter(|s| s.seq == me && s.len > 0).collect();
    assert!(!rtx.is_empty(), "{a:?}");
    assert!(
        rtx.iter().all(|s| s.ecn == NOT_ECT),
        "RFC 3168 6.1.5: {rtx:?}"
    );
    // ECE on the ACK of the retransmission: the timeout reduced the window
    // already (to one segment); no second reduction, which would raise it to
    // ssthresh, but CWR goes on the next new data.
    let f = F {
        ack: Some(me + MSS as u32),
        ece: true,
        ..F::default()
    };
    r.input(&peer(80, port, 7001, f, NOT_ECT, &[], &[]));
    assert_eq!(r.e.counters().tcp_ecn_reductions, 0);
    assert!(r.e.tcp_info(c).unwrap().cwnd <= 2 * MSS);
    r.e.tcp_send(c, &[6u8; MSS]).unwrap();
    let d = sent(&mut r);
    let again: Vec<_> = d.iter().filter(|s| s.seq < me + 2 * MSS as u32).collect();
    let new: Vec<_> = d.iter().filter(|s| s.seq >= me + 2 * MSS as u32).collect();
    assert!(again.iter().all(|s| !s.cwr && s.ecn == NOT_ECT), "{d:?}");
    assert!(new.first().is_some_and(|s| s.cwr && s.ecn == ECT0), "{d:?}");
}

#[test]
fn cwr_goes_on_the_first_segment_of_a_super_segment_only() {
    let (mut r, _, c, port, me) = active(EcnMode::On, true, true, false);
    r.e.tcp_send(c, &vec![3u8; 10 * MSS]).unwrap();
    let first = emitted(&mut r);
    assert!(!first.is_empty());
    let f = F {
        ack: Some(me + MSS as u32),
        ece: true,
        ..F::default()
    };
    r.input(&peer(80, port, 7001, f, NOT_ECT, &[], &[]));
    let _ = emitted(&mut r);
    assert_eq!(r.e.counters().tcp_ecn_reductions, 1);
    // Acknowledge everything so the window opens again; more data goes out as
    // one super-segment.
    let f = F {
        ack: Some(me + 10 * MSS as u32),
        ..F::default()
    };
    r.input(&peer(80, port, 7001, f, NOT_ECT, &[], &[]));
    r.e.tcp_send(c, &vec![4u8; 6 * MSS]).unwrap();
    let out = emitted(&mut r);
    let (frame, meta) = out
        .iter()
        .find(|(_, m)| m.gso.is_some())
        .expect("a super-segment");
    let gso = meta.gso.unwrap();
    assert!(gso.ecn, "the GSO ECN flag (SKB_GSO_TCP_ECN): {gso:?}");
    let sup = parse(frame).unwrap();
    assert!(sup.cwr && sup.ecn == ECT0, "{sup:?}");
    let mut seg = Segmenter::new(CsumMode::Complete);
    let mut buf = SegmentBuf::new();
    seg.segment(frame, meta, &mut buf).unwrap();
    let wire: Vec<Out> = buf.iter().filter_map(parse).collect();
    assert!(wire.len() > 1);
    assert!(wire[0].cwr);
    assert!(
        wire[1..].iter().all(|s| !s.cwr && s.ecn == ECT0),
        "{wire:?}"
    );
    // Only that super-segment asked for it.
    assert!(
        out.iter()
            .filter(|(_, m)| m.gso.is_some_and(|g| g.ecn))
            .count()
            == 1
    );
}

/// The same over IPv6: the codepoint in the traffic class, read from the
/// peer's datagrams and set on ours, whatever the DSCP bits beside it.
#[test]
fn ipv6_negotiates_marks_data_and_echoes_ce() {
    use common::udp::{ME6, PEER6, dual_host, peer as peer_of};
    let mut r = dual_host(|c: &mut Config| {
        c.tcp.ecn = EcnMode::On;
        c.offloads = false;
        c.neighbor_ttl = Duration::from_secs(3600);
    });
    let c = r.e.tcp_connect(r.now, peer_of(true, 80)).unwrap();
    let syn = sent(&mut r).remove(0);
    assert!(syn.ece && syn.cwr && syn.ecn == NOT_ECT, "{syn:?}");
    let (me, _) = r.e.tcp_addrs(c).unwrap();
    let from_peer = |seq: u32, f: F, tc: u8, payload: &[u8]| {
        let mut h = TcpHeader::new(80, me.port(), seq, 60_000);
        h.syn = f.syn;
        h.ece = f.ece;
        h.ack = true;
        h.acknowledgment_number = f.ack.unwrap();
        h.set_options(if f.syn { SYN_OPTS } else { &[] }).unwrap();
        let ip = Ipv6Header {
            traffic_class: tc,
            next_header: IpNumber::TCP,
            hop_limit: 64,
            source: PEER6.octets(),
            destination: ME6.octets(),
            ..Default::default()
        };
        let b = PacketBuilder::ethernet2(PEER_MAC, ME_MAC)
            .ip(IpHeaders::Ipv6(ip, Default::default()))
            .tcp_header(h);
        let mut out = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut out, payload).unwrap();
        out
    };
    let synack = F {
        syn: true,
        ack: Some(syn.seq + 1),
        ece: true,
        cwr: false,
    };
    r.input(&from_peer(7000, synack, 0, &[]));
    let _ = sent(&mut r);
    assert!(r.e.tcp_info(c).unwrap().ecn);
    r.e.tcp_send(c, &[1u8; 200]).unwrap();
    let d = sent(&mut r);
    assert_eq!((d[0].len, d[0].ecn), (200, ECT0), "{d:?}");
    // CE with DSCP 46 (EF) beside it: 0xb8 | CE.
    let data = F {
        ack: Some(syn.seq + 201),
        ..F::default()
    };
    r.input(&from_peer(7001, data, 0xb8 | CE, &[9u8; 100]));
    let a = sent(&mut r);
    assert!(a.len() == 1 && a[0].ece && a[0].ecn == NOT_ECT, "{a:?}");
    assert_eq!(r.e.counters().tcp_ecn_ce_in, 1);
}
