//! Super-segments with offloads on, against a hand-driven peer: two connections
//! with large windows and plenty to send take turns in one `poll_transmit`
//! (one super-segment per connection per round, A, B, A, B, ...); each is one
//! IPv4 datagram of at most 65,535 bytes, asks for segmentation at the
//! connection's MSS (`gso: TcpV4, size: MSS`) and leaves the TCP checksum to
//! the NIC (`Checksum::Partial`, the field holding the pseudo-header sum,
//! RFC 9293 section 3.1). The checks are independent of the engine: the
//! pseudo-header sum is computed here, the checksum completed by
//! `linerate_offload::csum::complete` and the real `Segmenter`, and verified
//! by etherparse. Without offloads the turns are by the same bytes: a
//! super-segment's worth of MSS segments per connection per round.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_offload::gso::{CsumMode, SegmentBuf, Segmenter};
use linerate_offload::{Checksum, GsoType, OffloadMeta};
use linerate_toe::SocketHandle;
use linerate_wire::etherparse::{Ipv4HeaderSlice, TcpHeaderSlice, TcpOptionElement as O};
use linerate_wire::tcp::Flags;

/// The MSS the peer offers (no timestamps: every segment carries 1460 bytes).
const MSS: usize = 1460;

struct Flow {
    c: SocketHandle,
    port: u16,
    /// Peer's port (80 or 81) and its sequence number.
    peer_port: u16,
    peer_seq: u32,
    /// Our ISN + 1: the sequence number of the stream's first byte.
    me: u32,
}

/// A super-segment as emitted: its frame and offload meta.
struct Emitted {
    frame: Vec<u8>,
    meta: OffloadMeta,
}

fn poll(r: &mut Raw) -> Vec<Emitted> {
    let mut out = Vec::new();
    let now = r.now;
    r.e.poll_transmit(now, &mut |f, m| {
        out.push(Emitted {
            frame: f.to_vec(),
            meta: *m,
        })
    });
    out
}

/// (IPv4 header, TCP header, TCP payload) of an IPv4 frame, parsed by etherparse.
fn split(f: &[u8]) -> (Ipv4HeaderSlice<'_>, TcpHeaderSlice<'_>, &[u8]) {
    let ip = Ipv4HeaderSlice::from_slice(&f[14..]).unwrap();
    let l4 = &f[14 + ip.slice().len()..14 + usize::from(ip.total_len())];
    let tcp = TcpHeaderSlice::from_slice(l4).unwrap();
    let payload = &l4[tcp.slice().len()..];
    (ip, tcp, payload)
}

/// The IPv4 pseudo-header sum (RFC 9293 section 3.1), one's complement,
/// folded, not complemented: what a partial checksum field holds.
fn pseudo_sum(src: [u8; 4], dst: [u8; 4], l4_len: usize) -> u16 {
    let mut s: u32 = 0;
    for w in [src, dst] {
        s += u32::from(u16::from_be_bytes([w[0], w[1]]));
        s += u32::from(u16::from_be_bytes([w[2], w[3]]));
    }
    s += 6; // protocol TCP
    s += l4_len as u32;
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// Two connections to the hand-driven peer, each with 1 MiB queued and its
/// window grown by four round trips of slow start; the stream's bytes.
fn two_flows_in_slow_start(offloads: bool) -> (Raw, Vec<Flow>, Vec<u8>) {
    let mut r = Raw::host(|c| {
        c.offloads = offloads;
        c.tcp.send_buffer = 1 << 20;
        c.neighbor_ttl = std::time::Duration::from_secs(3600);
    });
    let mut flows = Vec::new();
    for (peer_port, iss) in [(80u16, 1_000u32), (81, 900_000)] {
        let c = r.e.tcp_connect(r.now, peer_addr(peer_port)).unwrap();
        let syn = r.segments().remove(0);
        let port = r.answer_syn_with(
            c,
            &syn,
            iss,
            65_535,
            &[
                O::MaximumSegmentSize(MSS as u16),
                O::Noop,
                O::WindowScale(7),
            ],
        );
        assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, MSS);
        flows.push(Flow {
            c,
            port,
            peer_port,
            peer_seq: iss.wrapping_add(1),
            me: syn.seq.wrapping_add(1),
        });
    }
    let data = common::pattern(1 << 20, 3);
    for f in &flows {
        assert_eq!(r.e.tcp_send(f.c, &data).unwrap(), data.len());
    }

    // Slow start (RFC 5681, RFC 3465): every full-sized segment acknowledged on
    // its own grows cwnd by one MSS, so each round trip doubles it. Four round
    // trips from the initial window of 10 segments: 160 segments, several
    // super-segments per connection.
    for _ in 0..4 {
        let out = poll(&mut r);
        assert!(!out.is_empty());
        for e in &out {
            let k = flow_of(&flows, &e.frame);
            let (_, tcp, payload) = split(&e.frame);
            let (seq, len) = (tcp.sequence_number(), payload.len());
            let f = &flows[k];
            let mut acked = 0;
            while acked < len {
                acked = (acked + MSS).min(len);
                r.input(&tcp_frame(
                    f.peer_port,
                    f.port,
                    f.peer_seq,
                    Some(seq.wrapping_add(acked as u32)),
                    Flags::ACK,
                    65_535,
                    &[],
                    &[],
                ));
            }
        }
    }
    let cwnd: Vec<usize> = flows
        .iter()
        .map(|f| r.e.tcp_info(f.c).unwrap().cwnd)
        .collect();
    assert!(cwnd.iter().all(|&w| w >= 100 * MSS), "cwnd {cwnd:?}");
    (r, flows, data)
}

/// Which of `flows` sent `frame`.
fn flow_of(flows: &[Flow], frame: &[u8]) -> usize {
    let (_, tcp, _) = split(frame);
    flows
        .iter()
        .position(|f| f.port == tcp.source_port())
        .unwrap()
}

#[test]
fn two_connections_take_turns_with_checksum_partial_super_segments() {
    let (mut r, flows, data) = two_flows_in_slow_start(true);
    let flow_of = |frame: &[u8]| flow_of(&flows, frame);

    // One poll: both connections send their window as super-segments, in turns.
    let out = poll(&mut r);
    let order: Vec<usize> = out.iter().map(|e| flow_of(&e.frame)).collect();
    for k in 0..2 {
        assert!(
            order.iter().filter(|&&x| x == k).count() >= 2,
            "several super-segments each: {order:?}"
        );
    }
    // Alternating while both have something to send; then only the one left.
    let a = order.iter().filter(|&&x| x == 0).count();
    let alternating = 2 * a.min(order.len() - a);
    for w in order[..alternating].windows(2) {
        assert_ne!(w[0], w[1], "round robin: {order:?}");
    }
    assert!(
        order[alternating..].windows(2).all(|w| w[0] == w[1]),
        "after the turns, one connection only: {order:?}"
    );

    let mut seg = Segmenter::new(CsumMode::Complete);
    let mut buf = SegmentBuf::new();
    let mut segments_seen = 0;
    for e in &out {
        let (ip, tcp, payload) = split(&e.frame);
        // One IPv4 datagram of at most 65,535 bytes (its total length field).
        assert_eq!(e.frame.len(), 14 + usize::from(ip.total_len()));
        assert!(usize::from(ip.total_len()) <= 65_535);
        // Whole MSS-sized segments.
        assert!(payload.len().is_multiple_of(MSS), "{}", payload.len());
        if payload.len() == MSS && e.meta.gso.is_none() {
            // A lone segment at the end of a window needs no segmentation.
            continue;
        }
        let gso = e.meta.gso.expect("a segmentation request");
        assert_eq!(gso.kind, GsoType::TcpV4);
        assert_eq!(
            usize::from(gso.size),
            r.e.tcp_info(flows[flow_of(&e.frame)].c).unwrap().snd_mss
        );
        assert_eq!(usize::from(gso.size), MSS);
        // The checksum is left partial, its field holding the pseudo-header sum.
        let Checksum::Partial { start, offset } = e.meta.csum else {
            panic!("partial checksum expected: {:?}", e.meta.csum);
        };
        let l4_start = 14 + ip.slice().len();
        assert_eq!(usize::from(start), l4_start);
        assert_eq!(usize::from(offset), 16, "the TCP checksum field");
        let l4_len = usize::from(ip.total_len()) - ip.slice().len();
        assert_eq!(
            tcp.checksum(),
            pseudo_sum(ip.source(), ip.destination(), l4_len),
            "pseudo-header sum in the field"
        );
        // Completing it yields the checksum etherparse computes.
        let mut done = e.frame.clone();
        linerate_offload::csum::complete(&mut done, &e.meta).unwrap();
        let (ip2, tcp2, payload2) = split(&done);
        let want = tcp2
            .to_header()
            .calc_checksum_ipv4(&ip2.to_header(), payload2)
            .unwrap();
        assert_eq!(tcp2.checksum(), want);
        // And the segmenter cuts it into MSS-sized segments whose checksums are
        // all right, the payload the stream's bytes in order.
        seg.segment(&e.frame, &e.meta, &mut buf).unwrap();
        let mut at = tcp.sequence_number();
        for s in buf.iter() {
            let (ip, tcp, payload) = split(s);
            assert!(usize::from(ip.total_len()) <= 1500);
            assert_eq!(payload.len(), MSS);
            assert_eq!(tcp.sequence_number(), at);
            let want = tcp
                .to_header()
                .calc_checksum_ipv4(&ip.to_header(), payload)
                .unwrap();
            assert_eq!(tcp.checksum(), want, "segment checksum");
            assert_eq!(ip.header_checksum(), ip.to_header().calc_header_checksum());
            at = at.wrapping_add(MSS as u32);
            segments_seen += 1;
        }
        // The payload is the stream's bytes at that sequence number.
        let f = &flows[flow_of(&e.frame)];
        let off = tcp.sequence_number().wrapping_sub(f.me) as usize;
        assert_eq!(payload, &data[off..off + payload.len()]);
    }
    assert!(segments_seen > 2 * 100);
}

/// Without offloads the turns are by the same bytes: a connection's turn is as
/// many MSS segments as one super-segment would carry (65,455 bytes of data,
/// 44 segments of 1460), not one segment (which made the per-visit work, the
/// round-robin queue and the timers, a per-segment cost).
#[test]
fn without_offloads_connections_take_turns_of_a_super_segments_worth() {
    let (mut r, flows, data) = two_flows_in_slow_start(false);
    let out = poll(&mut r);
    let order: Vec<usize> = out.iter().map(|e| flow_of(&flows, &e.frame)).collect();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &k in &order {
        match runs.last_mut() {
            Some((f, n)) if *f == k => *n += 1,
            _ => runs.push((k, 1)),
        }
    }
    let turn = (65_535 - 20 - 60) / MSS;
    assert!(runs.len() >= 4, "several turns each: {runs:?}");
    // While both have something to send every turn is a whole quantum; the
    // last of each may be shorter (the window ran out), and after the other's
    // last turn one connection may go on alone.
    for (i, &(_, n)) in runs[..runs.len() - 2].iter().enumerate() {
        assert_eq!(n, turn, "turn {i} of {runs:?}");
    }
    for e in &out {
        let (ip, tcp, payload) = split(&e.frame);
        assert!(e.meta.gso.is_none());
        assert_eq!(payload.len(), MSS);
        assert!(usize::from(ip.total_len()) <= 1500);
        let want = tcp
            .to_header()
            .calc_checksum_ipv4(&ip.to_header(), payload)
            .unwrap();
        assert_eq!(tcp.checksum(), want, "segment checksum");
        let f = &flows[flow_of(&flows, &e.frame)];
        let off = tcp.sequence_number().wrapping_sub(f.me) as usize;
        assert_eq!(payload, &data[off..off + payload.len()]);
    }
}
