//! The engine inside a tunnel, receiving one batch of MSS-sized segments
//! with holes (offloads off: no inner GRO): every out-of-order segment gets an
//! ACK of its own, out through the tunnel, whose first SACK block holds it
//! (RFC 2018 section 4), so every range received is reported before the
//! batch's last ACK. Each encapsulation, IPv4 and IPv6 underlay. (The engine's
//! own test, `crates/toe/tests/it/behaviour_sack_batch.rs`, says why.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{Mode, kinds, tunnel_pair};
use etherparse::{SlicedPacket, TcpHeader, TcpOptionElement as O, TransportSlice};
use linerate_nic::memory::Faults;
use linerate_nic::{Batch, Frame, Nic, PacketBuf};
use linerate_offload::OffloadMeta;
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, PoolSink, TcpState};
use linerate_tunnel::{Encap, TunnelNic};
use linerate_wire::arp;
use linerate_wire::build::{FrameBuilder, Ip, L4};
use std::time::Duration;

const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const MSS: u32 = 1000;
const ISS: u32 = 7000;

/// The engine on tunnel A; the test plays the peer behind tunnel B.
struct Ends {
    e: Engine,
    a: TunnelNic,
    b: TunnelNic,
    now: Instant,
}

impl Ends {
    /// Moves frames until nothing moves: the engine's output through A to B
    /// (returned, inner frames), what B was given through A to the engine
    /// (each receive call one batch).
    fn pump(&mut self, to_a: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
        let mut batch = Batch::with_capacity(256);
        for f in to_a {
            batch.push(Frame::new(PacketBuf::from_slice(&f), OffloadMeta::plain()));
        }
        if !batch.is_empty() {
            self.b.transmit(0, &mut batch).unwrap();
            batch.clear();
        }
        let mut got = Vec::new();
        for _ in 0..20 {
            let mut moved = 0;
            let n = self.a.receive(0, &mut batch, 256).unwrap();
            moved += n;
            self.e.handle_frames(self.now, &mut batch);
            let mut tx = Batch::with_capacity(256);
            self.e.poll_transmit_into(
                self.now,
                &mut PoolSink::new(self.a.pool(), &mut tx).with_frags(self.a.tx_sg()),
            );
            moved += tx.len();
            while !tx.is_empty() {
                if self.a.transmit(0, &mut tx).unwrap() == 0 {
                    break;
                }
            }
            let mut rx = Batch::with_capacity(256);
            moved += self.b.receive(0, &mut rx, 256).unwrap();
            for f in rx.iter() {
                let mut v = Vec::new();
                f.gather_to_vec(&mut v);
                got.push(v);
            }
            if moved == 0 {
                break;
            }
        }
        got
    }
}

#[derive(Debug)]
struct Ack {
    seq: u32,
    ack: u32,
    syn: bool,
    tsval: Option<u32>,
    sack: Vec<(u32, u32)>,
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

fn tcp(port: u16, seq: u32, ack: u32, syn: bool, opts: &[O], payload: &[u8]) -> Vec<u8> {
    let mut h = TcpHeader::new(80, port, seq, 1000);
    h.syn = syn;
    h.ack = true;
    h.acknowledgment_number = ack;
    h.set_options(opts).unwrap();
    FrameBuilder::new(Ip::v4([10, 0, 0, 2], [10, 0, 0, 1]), L4::Tcp(h))
        .macs(PEER_MAC, ME_MAC)
        .build(payload)
}

fn seq(k: u32) -> u32 {
    ISS + 1 + k * MSS
}

fn run(encap: &Encap, v6: bool) {
    let what = format!("{encap:?} underlay v6 {v6}");
    let (a, b) = tunnel_pair(encap, v6, Mode::Off, Faults::NONE, 34);
    let mut cfg = Sim::host_config(1);
    cfg.offloads = false;
    cfg.mtu = a.caps().mtu;
    cfg.tcp.recv_buffer_initial = 512 * 1024;
    cfg.neighbor_ttl = Duration::from_secs(3600);
    let mut x = Ends {
        e: Engine::new(cfg, 34),
        a,
        b,
        now: Instant::ZERO,
    };
    // The peer announces itself, then the engine opens to its port 80.
    let mut f = vec![0u8; 14 + arp::PACKET_LEN];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&PEER_MAC);
    f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    arp::emit_request(&mut f[14..], PEER_MAC, [10, 0, 0, 2], [10, 0, 0, 1]).unwrap();
    x.pump(vec![f]);
    let c =
        x.e.tcp_connect(x.now, "10.0.0.2:80".parse().unwrap())
            .unwrap();
    let port = x.e.tcp_addrs(c).unwrap().0.port();
    let syn = x
        .pump(Vec::new())
        .iter()
        .find_map(|f| parse(f))
        .expect(&what);
    assert!(syn.syn, "{what}");
    let me = syn.seq.wrapping_add(1);
    let ts = syn.tsval.expect("timestamps on");
    let opts = [
        O::MaximumSegmentSize(MSS as u16),
        O::SelectiveAcknowledgementPermitted,
        O::Noop,
        O::WindowScale(7),
        O::Timestamp(1, ts),
    ];
    x.pump(vec![tcp(port, ISS, me, true, &opts, &[])]);
    assert_eq!(x.e.tcp_state(c), Ok(TcpState::Established), "{what}");
    // One batch: 64 segments of the first 72, 8 missing.
    let holes = [3u32, 11, 20, 28, 37, 45, 54, 62];
    let sent: Vec<u32> = (0..72).filter(|k| !holes.contains(k)).collect();
    let frames = sent
        .iter()
        .map(|&k| {
            let opts = [O::Noop, O::Noop, O::Timestamp(2 + k, ts)];
            tcp(port, seq(k), me, false, &opts, &[k as u8; MSS as usize])
        })
        .collect();
    let before = x.e.counters().tcp_in_segs;
    let acks: Vec<Ack> = x.pump(frames).iter().filter_map(|f| parse(f)).collect();
    assert_eq!(x.e.counters().tcp_in_segs - before, 64, "{what}");
    assert!(
        acks.iter().all(|a| a.seq == me && a.sack.len() <= 3),
        "{what}"
    );
    let mut it = acks.iter();
    for &k in sent.iter().filter(|&&k| k > holes[0]) {
        assert!(
            it.any(|a| a
                .sack
                .first()
                .is_some_and(|&(l, r)| l <= seq(k) && seq(k + 1) <= r)),
            "{what}: segment {k} leads no ACK of its own: {acks:?}"
        );
    }
    let (last, before) = acks.split_last().unwrap();
    assert_eq!(last.ack, seq(3), "{what}");
    for &k in sent.iter().filter(|&&k| k > holes[0] && k < 71) {
        assert!(
            before
                .iter()
                .any(|a| a.sack.iter().any(|&(l, r)| l <= seq(k) && seq(k + 1) <= r)),
            "{what}: segment {k} in no SACK block before the last ACK: {acks:?}"
        );
    }
}

#[test]
fn batch_with_holes_through_each_tunnel() {
    for encap in &kinds() {
        for v6 in [false, true] {
            run(encap, v6);
        }
    }
}
