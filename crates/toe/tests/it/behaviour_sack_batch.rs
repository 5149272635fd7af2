//! A receive batch of MSS-sized segments with holes (a NIC without GRO hands
//! over a whole ring's worth at once): every out-of-order segment gets an ACK
//! of its own whose first SACK block holds it (RFC 2018 section 4), however
//! many the batch carries, so the sender learns of every range received before
//! the batch's last ACK. A Linux sender (RACK) marks lost, and retransmits,
//! whatever it has not seen SACKed by the time later data is; when the
//! receiver capped the ACKs of a batch, two thirds of the kernel's
//! retransmissions toward it were of segments it had received.
//!
//! Over IPv4 and IPv6, with timestamps (three blocks per ACK) and without (four).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::{ME_MAC, PEER_MAC, Raw};
use linerate_nic::{Batch, Frame, PacketBuf};
use linerate_offload::OffloadMeta;
use linerate_toe::{Config, SocketHandle, TcpState};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{SlicedPacket, TcpHeader, TcpOptionElement as O, TransportSlice};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const MSS: u32 = 1000;
/// The peer's ISS.
const ISS: u32 = 7000;

/// One end of the test: the engine (host 1 of the simulation) with a
/// connection it opened to the peer's port 80, over IPv4 or IPv6.
struct Peer {
    r: Raw,
    c: SocketHandle,
    port: u16,
    v6: bool,
    /// The peer's timestamps, if negotiated: its TSval, and the engine's last.
    ts: Option<(u32, u32)>,
    /// The engine's ISS + 1.
    me: u32,
}

fn ips(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        ("fd00::2".parse().unwrap(), "fd00::1".parse().unwrap())
    } else {
        ("10.0.0.2".parse().unwrap(), "10.0.0.1".parse().unwrap())
    }
}

/// A TCP header's fields as the engine sent them.
#[derive(Debug, Clone)]
struct Ack {
    seq: u32,
    ack: u32,
    syn: bool,
    tsval: Option<u32>,
    sack: Vec<(u32, u32)>,
    payload: usize,
}

fn parse(f: &[u8]) -> Option<Ack> {
    let p = SlicedPacket::from_ethernet(f).ok()?;
    let Some(TransportSlice::Tcp(t)) = p.transport else {
        return None;
    };
    let mut a = Ack {
        seq: t.sequence_number(),
        ack: t.acknowledgment_number(),
        syn: t.syn(),
        tsval: None,
        sack: Vec::new(),
        payload: t.payload().len(),
    };
    for o in t.options_iterator() {
        match o.unwrap() {
            O::Timestamp(v, _) => a.tsval = Some(v),
            O::SelectiveAcknowledgement(b, more) => {
                a.sack.push(b);
                a.sack.extend(more.into_iter().flatten());
            }
            _ => {}
        }
    }
    Some(a)
}

impl Peer {
    /// Established, the peer offering MSS 1000, SACK, window scale 7 and,
    /// with `ts`, timestamps; offloads off (one segment per frame); a receive
    /// buffer that takes the whole batch.
    fn new(v6: bool, ts: bool) -> Peer {
        let mut r = Raw::host(|c: &mut Config| {
            c.offloads = false;
            c.tcp.timestamps = ts;
            c.tcp.recv_buffer_initial = 512 * 1024;
            c.neighbor_ttl = Duration::from_secs(3600);
        });
        let (peer, _) = ips(v6);
        let c = r.e.tcp_connect(r.now, SocketAddr::new(peer, 80)).unwrap();
        if v6 {
            // The engine solicits the peer's address; the peer advertises it.
            r.frames();
            r.e.handle_frame(r.now, &neighbor_advert(), &OffloadMeta::plain());
        }
        let syn = r.frames().iter().find_map(|f| parse(f)).unwrap();
        assert!(syn.syn);
        let port = r.e.tcp_addrs(c).unwrap().0.port();
        let mut p = Peer {
            r,
            c,
            port,
            v6,
            ts: syn.tsval.map(|v| (1, v)),
            me: syn.seq.wrapping_add(1),
        };
        let mut opts = vec![
            O::MaximumSegmentSize(MSS as u16),
            O::SelectiveAcknowledgementPermitted,
            O::Noop,
            O::WindowScale(7),
        ];
        if let Some((v, e)) = p.ts {
            opts.push(O::Timestamp(v, e));
        }
        let f = p.frame(ISS, true, &opts, &[]);
        p.r.input(&f);
        p.r.frames();
        assert_eq!(p.r.e.tcp_state(c), Ok(TcpState::Established));
        p
    }

    fn frame(&self, seq: u32, syn: bool, opts: &[O], payload: &[u8]) -> Vec<u8> {
        let mut h = TcpHeader::new(80, self.port, seq, 1000);
        h.syn = syn;
        h.ack = true;
        h.acknowledgment_number = self.me;
        h.set_options(opts).unwrap();
        let ip = match ips(self.v6) {
            (IpAddr::V6(s), IpAddr::V6(d)) => Ip::v6(s.octets(), d.octets()),
            (IpAddr::V4(s), IpAddr::V4(d)) => Ip::v4(s.octets(), d.octets()),
            _ => unreachable!(),
        };
        FrameBuilder::new(ip, L4::Tcp(h))
            .macs(PEER_MAC, ME_MAC)
            .build(payload)
    }

    /// The peer's data segment `k` (MSS bytes from ISS + 1 + k * MSS).
    fn segment(&self, k: u32) -> Vec<u8> {
        let opts: Vec<O> = self
            .ts
            .map(|(v, e)| vec![O::Noop, O::Noop, O::Timestamp(v + k, e)])
            .unwrap_or_default();
        self.frame(seq(k), false, &opts, &[k as u8; MSS as usize])
    }

    /// Hands the engine segments `ks` in one receive batch, as a NIC without
    /// GRO would, and returns the ACKs it sends after it, in order.
    fn batch(&mut self, ks: &[u32]) -> Vec<Ack> {
        let mut b = Batch::with_capacity(ks.len());
        for &k in ks {
            b.push(Frame::new(
                PacketBuf::from_slice(&self.segment(k)),
                OffloadMeta::plain(),
            ));
        }
        self.r.e.handle_frames(self.r.now, &mut b);
        let acks: Vec<Ack> = self.r.frames().iter().filter_map(|f| parse(f)).collect();
        assert!(acks.iter().all(|a| a.payload == 0 && a.seq == self.me));
        acks
    }
}

/// An unsolicited neighbour advertisement from the peer (fd00::2) to
/// all-nodes, so the engine knows its MAC.
fn neighbor_advert() -> Vec<u8> {
    use linerate_wire::etherparse::{Icmpv6Type, PacketBuilder, icmpv6::NdpOptionType};
    let (IpAddr::V6(peer), _) = ips(true) else {
        unreachable!()
    };
    let mut payload = peer.octets().to_vec();
    // Target link-layer address option.
    payload.extend_from_slice(&[NdpOptionType::TARGET_LINK_LAYER_ADDRESS.0, 1]);
    payload.extend_from_slice(&PEER_MAC);
    let all_nodes = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    let b = PacketBuilder::ethernet2(PEER_MAC, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(peer.octets(), all_nodes, 255)
        .icmpv6(Icmpv6Type::NeighborAdvertisement(
            linerate_wire::etherparse::icmpv6::NeighborAdvertisementHeader {
                router: false,
                solicited: false,
                r#override: true,
            },
        ));
    let mut out = Vec::new();
    b.write(&mut out, &payload).unwrap();
    out
}

/// The sequence number of the peer's segment `k`.
fn seq(k: u32) -> u32 {
    ISS + 1 + k * MSS
}

/// ACKs as segment indices: the acknowledgment number, then the blocks.
fn show(acks: &[Ack]) -> String {
    let k = |s: u32| s.wrapping_sub(seq(0)) as i64 / i64::from(MSS);
    acks.iter()
        .map(|a| {
            let b: Vec<String> = a
                .sack
                .iter()
                .map(|&(l, r)| format!("{}-{}", k(l), k(r)))
                .collect();
            format!("\n  {} [{}]", k(a.ack), b.join(" "))
        })
        .collect()
}

/// `[l, r)` lies within one of `blocks`.
fn covered(blocks: &[(u32, u32)], l: u32, r: u32) -> bool {
    blocks.iter().any(|&(s, e)| s <= l && r <= e)
}

/// 64 segments out of the first 72, 8 of them missing: the checks of the
/// issue on the ACKs sent after the batch.
fn sixty_four_with_eight_holes(v6: bool, ts: bool) {
    let mut p = Peer::new(v6, ts);
    let holes = [3u32, 11, 20, 28, 37, 45, 54, 62];
    let sent: Vec<u32> = (0..72).filter(|k| !holes.contains(k)).collect();
    assert_eq!(sent.len(), 64);
    let acks = p.batch(&sent);
    let what = format!("v6 {v6} ts {ts}: {}", show(&acks));
    let max_blocks = if ts { 3 } else { 4 };
    let mut last_ack = seq(0);
    for a in &acks {
        assert!(a.sack.len() <= max_blocks, "{what}");
        assert!(
            a.ack >= last_ack,
            "acknowledgment numbers only grow: {what}"
        );
        last_ack = a.ack;
        // Every block above the acknowledgment number (no D-SACK here: no
        // segment came twice), each one received whole.
        for &(l, r) in &a.sack {
            assert!(l > a.ack && l < r && (r - l) % MSS == 0, "{what}");
            let (lo, hi) = ((l - seq(0)) / MSS, (r - seq(0)) / MSS);
            assert!((lo..hi).all(|k| sent.contains(&k)), "{what}");
        }
    }
    assert_eq!(last_ack, seq(3), "{what}");
    // Each segment above the first hole is, in arrival order, the first block
    // of an ACK of its own.
    let mut it = acks.iter();
    for &k in sent.iter().filter(|&&k| k > holes[0]) {
        assert!(
            it.any(|a| a
                .sack
                .first()
                .is_some_and(|&(l, r)| l <= seq(k) && seq(k + 1) <= r)),
            "segment {k} leads no ACK of its own after the previous one's: {what}"
        );
    }
    // Every range received above RCV.NXT appears in some SACK block before
    // the batch's last ACK (all of it but the segment that calls for that
    // ACK, which leads it).
    let (last, before) = acks.split_last().unwrap();
    assert_eq!(last.ack, seq(3));
    assert_eq!(last.sack.first(), Some(&(seq(63), seq(72))), "{what}");
    for &k in sent.iter().filter(|&&k| k > holes[0] && k < 71) {
        assert!(
            before.iter().any(|a| covered(&a.sack, seq(k), seq(k + 1))),
            "segment {k} reported in no SACK block before the last ACK: {what}"
        );
    }
    // The blocks after the first are the most recent other ranges (RFC 2018
    // section 4): in the last ACK, the three (or two) ranges below the newest.
    let newest: Vec<(u32, u32)> = [(63, 72), (55, 62), (46, 54), (38, 45)]
        .iter()
        .take(max_blocks)
        .map(|&(a, b)| (seq(a), seq(b)))
        .collect();
    assert_eq!(last.sack, newest, "{what}");
    let _ = p.c;
}

#[test]
fn batch_of_64_with_8_holes_reports_every_range_timestamps_on() {
    sixty_four_with_eight_holes(false, true);
}

#[test]
fn batch_of_64_with_8_holes_reports_every_range_timestamps_off() {
    sixty_four_with_eight_holes(false, false);
}

#[test]
fn batch_of_64_with_8_holes_reports_every_range_ipv6() {
    sixty_four_with_eight_holes(true, true);
    sixty_four_with_eight_holes(true, false);
}

/// One batch with reordering and duplicates: each out-of-order segment, each
/// duplicate and each segment that fills a hole gets its ACK, in arrival
/// order, with the acknowledgment number and blocks of its moment; a
/// duplicate's range comes first (RFC 2883 section 4), then the block
/// holding it.
#[test]
fn batch_with_duplicates_and_reordering_acks_each_at_its_moment() {
    for ts in [true, false] {
        let mut p = Peer::new(false, ts);
        p.batch(&[0, 1, 2]);
        let acks = p.batch(&[5, 6, 4, 6, 1, 3, 9, 8, 7, 10]);
        let b = |a: u32, e: u32| (seq(a), seq(e));
        let want = vec![
            (3, vec![b(5, 6)]),
            (3, vec![b(5, 7)]),
            (3, vec![b(4, 7)]),
            (3, vec![b(6, 7), b(4, 7)]),
            (3, vec![b(1, 2), b(4, 7)]),
            (7, vec![]),
            (7, vec![b(9, 10)]),
            (7, vec![b(8, 10)]),
            (10, vec![]),
            (11, vec![]),
        ];
        let got: Vec<(u32, Vec<(u32, u32)>)> = acks
            .iter()
            .map(|a| ((a.ack - seq(0)) / MSS, a.sack.clone()))
            .collect();
        assert_eq!(got, want, "ts {ts}: {}", show(&acks));
    }
}
