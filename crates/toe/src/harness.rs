//! The entry point of the `engine` fuzz target (`fuzz/fuzz_targets/engine.rs`),
//! shared with the test that replays its corpus (`tests/fuzz_corpus.rs` in the
//! workspace root).
//!
//! [`engine`] sets up an engine (host 10.0.0.1) with a listener on port 80, one
//! connection it opened to the peer 10.0.0.2 and one it accepted from it, both
//! made by hand-built handshakes whose options the input chooses. Then the input
//! is read as a sequence of steps: TCP segments built from a live connection's
//! 4-tuple with fuzzed flags, sequence and acknowledgement numbers (near the ones
//! in use, or anywhere), window, options, payload and offload metadata (plain,
//! verified, GRO super-segment); raw frames; SYNs to the listener; time advances;
//! and socket calls (send, recv, shutdown, close, abort, connect). After every step
//! the engine's output is read and these invariants are checked:
//!
//! * counters only grow; `rx_frames` counts every frame handed in and `tx_frames`
//!   every frame handed out;
//! * after `handle_timeout(now)` nothing is due at or before `now` any more (a
//!   runtime would spin otherwise);
//! * a connection with data outstanding has a timer running (else it can stall
//!   forever);
//! * `tcp_info` stays within the configuration: buffers within their sizes,
//!   unacknowledged bytes within the send buffer (plus SYN and FIN), the RTO within
//!   its bounds, a positive MSS and congestion window once synchronized; a failed
//!   connection is readable; a closed one never comes back;
//! * every byte a connection sends is the byte the application wrote at that
//!   offset, and every byte it delivers is the byte the peer sent at that offset
//!   (unless the input also sent raw or corrupted frames that could forge data).
//!
//! Not a public API: hidden from the docs, and allowed to panic (that is how a
//! fuzzer reports a broken invariant).
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    missing_docs
)]

use crate::config::Config;
use crate::counters::Counters;
use crate::engine::PoolSink;
use crate::engine::{Engine, InvalidHandle, SocketHandle};
use crate::sim::Sim;
use crate::tcp::TcpState;
use crate::time::Instant;
use linerate_nic::{Batch, Frag, Frame, PacketBuf, Pool, PoolConfig, SharedBuf};
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{TcpHeader, TcpOptionElement};
use linerate_wire::{arp, ethernet, ipv4, ipv6, tcp};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// A fuzz target: arbitrary bytes in, panics on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target of this crate, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[("engine", engine)];

const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const ME: [u8; 4] = [10, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];

/// The byte the application writes at offset `o` of connection `k`'s stream.
fn app_byte(k: usize, o: u64) -> u8 {
    (o.wrapping_mul(131).wrapping_add(o >> 9) as u8) ^ (k as u8).wrapping_mul(0x5b)
}

/// The byte the peer sends at offset `o` of its stream on connection `k`.
fn peer_byte(k: usize, o: u32) -> u8 {
    (o.wrapping_mul(197).wrapping_add(o >> 7) as u8) ^ (k as u8).wrapping_mul(0x3d) ^ 0xa5
}

/// Reads the fuzz input front to back; zeros once it is used up.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What the harness knows of one connection, from both ends.
#[derive(Debug)]
struct Conn {
    h: SocketHandle,
    /// Our port and the peer's.
    local: u16,
    remote: u16,
    /// The engine's ISS and the peer's.
    iss: u32,
    irs: u32,
    /// Bytes the application wrote, and read.
    written: u64,
    read: u64,
    /// Highest sequence number the engine sent (+ length) and its last ACK.
    snd_max: u32,
    last_ack: u32,
    /// Peer's next sequence number (in order).
    peer_nxt: u32,
    /// Last TSval the engine sent (for the peer's TSecr).
    ts: u32,
    /// Seen closed (or the handle gone): it must stay so.
    closed: bool,
}

struct Harness {
    e: Engine,
    cfg: Config,
    now: Instant,
    conns: Vec<Conn>,
    /// Frames handed in and out, to check the counters against.
    fed: u64,
    emitted: u64,
    counters: Counters,
    /// Raw or corrupted frames were sent: data may have been forged.
    tainted: bool,
    next_port: u16,
    /// The frame being handed to the engine (reused).
    batch: Batch,
    /// With offloads, output goes to a sink that takes super-segments by
    /// reference to the send buffer (`PoolSink::with_frags`), gathered to
    /// be read: buffers from here.
    pool: Pool,
}

/// Segment fields as the peer sends them.
struct Seg<'a> {
    k: usize,
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: Option<u32>,
    flags: u8,
    wnd: u16,
    opts: &'a [TcpOptionElement],
    raw_opts: Option<&'a [u8]>,
    payload: &'a [u8],
}

impl Harness {
    fn new(sel: u8) -> Harness {
        let mut cfg = Sim::host_config(1);
        cfg.offloads = sel & 1 != 0;
        cfg.tcp.timestamps = sel & 2 == 0;
        cfg.tcp.sack = sel & 4 == 0;
        cfg.tcp.window_scaling = sel & 8 == 0;
        if sel & 32 != 0 {
            // Ask for ECN on active opens (passive ones accept it anyway).
            cfg.tcp.ecn = crate::tcp::EcnMode::On;
        }
        if sel & 16 != 0 {
            // Small buffers: zero windows and full send buffers come quickly.
            cfg.tcp.send_buffer = 8 * 1024;
            cfg.tcp.recv_buffer = 4 * 1024;
        }
        cfg.tcp.backlog = 4;
        cfg.tcp.max_retries = 4;
        cfg.tcp.syn_retries = 2;
        cfg.tcp.msl = Duration::from_secs(2);
        // The peer answers no ARP: keep its entry for the whole run.
        cfg.neighbor_ttl = Duration::from_secs(100_000);
        Harness {
            e: Engine::new(cfg.clone(), u64::from(sel)),
            cfg,
            now: Instant::ZERO,
            conns: Vec::new(),
            fed: 0,
            emitted: 0,
            counters: Counters::default(),
            tainted: false,
            next_port: 20_000,
            batch: Batch::new(),
            pool: Pool::new(PoolConfig::mtu()),
        }
    }

    /// Hands the engine a frame it owns (as a NIC would), so large in-order
    /// payloads are kept in it (`tcp::recvbuf`) and read from there.
    fn feed(&mut self, frame: &[u8], meta: &OffloadMeta) {
        self.fed += 1;
        self.batch
            .push(Frame::new(PacketBuf::from_slice(frame), *meta));
        self.e.handle_frames(self.now, &mut self.batch);
    }

    /// Hands the engine `frame` as a scatter-gather frame: its first `head`
    /// bytes in the head, the rest as fragments of `piece` bytes (the last
    /// shorter) of one shared buffer.
    fn feed_chained(&mut self, frame: &[u8], head: usize, piece: usize, meta: &OffloadMeta) {
        self.fed += 1;
        let (h, rest) = frame.split_at(head.min(frame.len()));
        let shared = SharedBuf::new(PacketBuf::from_slice(rest));
        let mut f = Frame::new(PacketBuf::from_slice(h), *meta);
        let mut at = 0;
        while at < rest.len() {
            let n = piece.min(rest.len() - at);
            let _ = f.frags.push(Frag::new(shared.clone(), at, n).unwrap());
            at += n;
        }
        self.batch.push(f);
        self.e.handle_frames(self.now, &mut self.batch);
    }

    /// The peer announces itself with an ARP request.
    fn arp(&mut self) {
        let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
        f[..6].copy_from_slice(&ethernet::BROADCAST);
        f[6..12].copy_from_slice(&PEER_MAC);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        arp::emit_request(&mut f[ethernet::HEADER_LEN..], PEER_MAC, PEER, ME).unwrap();
        self.feed(&f, &OffloadMeta::plain());
    }

    fn build(seg: &Seg<'_>) -> Option<Vec<u8>> {
        let mut h = TcpHeader::new(seg.src_port, seg.dst_port, seg.seq, seg.wnd);
        h.fin = seg.flags & 0x01 != 0;
        h.syn = seg.flags & 0x02 != 0;
        h.rst = seg.flags & 0x04 != 0;
        h.psh = seg.flags & 0x08 != 0;
        h.urg = seg.flags & 0x20 != 0;
        h.ece = seg.flags & 0x40 != 0;
        h.cwr = seg.flags & 0x80 != 0;
        if let Some(a) = seg.ack {
            h.ack = true;
            h.acknowledgment_number = a;
        }
        match seg.raw_opts {
            Some(raw) => h.set_options_raw(raw).ok()?,
            None => h.set_options(seg.opts).ok()?,
        }
        FrameBuilder::new(Ip::v4(PEER, ME), L4::Tcp(h))
            .macs(PEER_MAC, ME_MAC)
            .try_build(seg.payload)
            .ok()
    }

    /// Sends a segment from the peer.
    fn send(&mut self, seg: &Seg<'_>, meta: &OffloadMeta) {
        if let Some(f) = Harness::build(seg) {
            self.feed(&f, meta);
        }
    }

    /// Reads the engine's output: the peer's view of each connection, and the
    /// sent-bytes oracle.
    fn drain(&mut self) {
        let mut frames = Vec::new();
        let n = if self.cfg.offloads {
            let mut out = Batch::new();
            let n = self.e.poll_transmit_into(
                self.now,
                &mut PoolSink::new(&self.pool, &mut out).with_frags(true),
            );
            for f in out.iter() {
                let mut v = Vec::new();
                f.gather_to_vec(&mut v);
                frames.push(v);
            }
            n
        } else {
            self.e
                .poll_transmit(self.now, &mut |f, _| frames.push(f.to_vec()))
        };
        assert_eq!(n, frames.len());
        self.emitted += n as u64;
        for f in &frames {
            self.observe(f);
        }
    }

    fn observe(&mut self, f: &[u8]) {
        let Ok(eth) = ethernet::Packet::new_checked(f) else {
            panic!("the engine sent a malformed Ethernet frame");
        };
        let l4 = match eth.ethertype() {
            ethernet::ethertype::IPV4 => {
                let ip = ipv4::Packet::new_checked(eth.payload())
                    .expect("the engine sent a malformed IPv4 header");
                if ip.protocol() != ipv4::protocol::TCP || ip.dst_addr() != PEER {
                    return;
                }
                ip.payload().to_vec()
            }
            ethernet::ethertype::IPV6 => {
                ipv6::Packet::new_checked(eth.payload())
                    .expect("the engine sent a malformed IPv6 header");
                return;
            }
            _ => return,
        };
        let t = tcp::Packet::new_checked(&l4[..]).expect("the engine sent a malformed TCP header");
        let flags = t.flags();
        let Some(k) = self
            .conns
            .iter()
            .position(|c| c.local == t.src_port() && c.remote == t.dst_port())
        else {
            return;
        };
        let c = &mut self.conns[k];
        let seq = t.seq_number();
        let payload = t.payload();
        // Every byte sent is the one the application wrote at that offset.
        if !payload.is_empty() && !flags.contains(tcp::Flags::SYN) {
            let off = seq.wrapping_sub(c.iss.wrapping_add(1));
            for (i, &b) in payload.iter().enumerate() {
                let o = u64::from(off) + i as u64;
                assert!(
                    o < c.written,
                    "conn {k}: sent byte at offset {o}, only {} written",
                    c.written
                );
                assert_eq!(b, app_byte(k, o), "conn {k}: wrong byte at offset {o}");
            }
        }
        let end = seq
            .wrapping_add(payload.len() as u32)
            .wrapping_add(u32::from(flags.contains(tcp::Flags::FIN)));
        if (end.wrapping_sub(c.snd_max) as i32) > 0 {
            c.snd_max = end;
        }
        if flags.contains(tcp::Flags::ACK) {
            c.last_ack = t.ack_number();
        }
        if let Ok(o) = tcp::parse_syn_options(t.options())
            && let Some((v, _)) = o.timestamps
        {
            c.ts = v;
        }
    }

    /// Active open to the peer's port 5000, and a passive one on port 80 from the
    /// peer's port 4000, with the peer offering what `sel` says.
    fn connect(&mut self, sel: u8) {
        let listener = self.e.tcp_listen(80).unwrap();
        let opts = peer_syn_options(sel, 1);
        // Active.
        let h = self
            .e
            .tcp_connect(self.now, SocketAddr::new(IpAddr::from(PEER), 5000))
            .unwrap();
        let local = self.e.tcp_addrs(h).unwrap().0.port();
        let mut syn = None;
        self.e.poll_transmit(self.now, &mut |f, _| {
            syn = syn.or_else(|| syn_of(f));
        });
        self.emitted += 1;
        let (iss, ts) = syn.expect("the engine sent its SYN");
        let opts_a = with_tsecr(&opts, ts);
        self.conns.push(Conn {
            h,
            local,
            remote: 5000,
            iss,
            irs: 7_000_000,
            written: 0,
            read: 0,
            snd_max: iss.wrapping_add(1),
            last_ack: 0,
            peer_nxt: 7_000_001,
            ts,
            closed: false,
        });
        self.send(
            &Seg {
                k: 0,
                src_port: 5000,
                dst_port: local,
                seq: 7_000_000,
                ack: Some(iss.wrapping_add(1)),
                flags: 0x02,
                wnd: 30_000,
                opts: &opts_a,
                raw_opts: None,
                payload: &[],
            },
            &OffloadMeta::plain(),
        );
        self.drain();
        // Passive.
        self.send(
            &Seg {
                k: 1,
                src_port: 4000,
                dst_port: 80,
                seq: 9_000_000,
                ack: None,
                flags: 0x02,
                wnd: 30_000,
                opts: &opts,
                raw_opts: None,
                payload: &[],
            },
            &OffloadMeta::plain(),
        );
        let mut synack = None;
        let n = self.e.poll_transmit(self.now, &mut |f, _| {
            synack = synack.or_else(|| syn_of(f));
        });
        self.emitted += n as u64;
        let (iss, ts) = synack.expect("the listener answered with a SYN-ACK");
        let opts_p = with_tsecr(&opts, ts)
            .into_iter()
            .filter(|o| matches!(o, TcpOptionElement::Timestamp(..)))
            .collect::<Vec<_>>();
        self.send(
            &Seg {
                k: 1,
                src_port: 4000,
                dst_port: 80,
                seq: 9_000_001,
                ack: Some(iss.wrapping_add(1)),
                flags: 0,
                wnd: 30_000,
                opts: &opts_p,
                raw_opts: None,
                payload: &[],
            },
            &OffloadMeta::plain(),
        );
        let h = self
            .e
            .tcp_accept(listener)
            .expect("the handshake completed");
        self.conns.push(Conn {
            h,
            local: 80,
            remote: 4000,
            iss,
            irs: 9_000_000,
            written: 0,
            read: 0,
            snd_max: iss.wrapping_add(1),
            last_ack: 0,
            peer_nxt: 9_000_001,
            ts,
            closed: false,
        });
        self.drain();
        for c in &self.conns {
            assert_eq!(self.e.tcp_state(c.h), Ok(TcpState::Established));
        }
    }

    /// One step of the input.
    fn step(&mut self, inp: &mut Input<'_>) {
        let op = inp.u8();
        let k = usize::from(op >> 4) % self.conns.len();
        match op % 10 {
            0..=2 => self.segment(inp, k),
            3 => {
                let len = usize::from(inp.u16() % 1600);
                let mut f = inp.bytes(len).to_vec();
                if f.len() >= 12 {
                    f[..6].copy_from_slice(&ME_MAC);
                }
                self.tainted = true;
                self.feed(&f, &OffloadMeta::plain());
            }
            4 => {
                let x = inp.u16();
                let d = match x & 3 {
                    0 => Duration::from_micros(u64::from(x >> 2)),
                    1 => Duration::from_millis(u64::from(x >> 2) % 2000),
                    2 => Duration::from_secs(u64::from(x >> 2) % 300),
                    _ => self
                        .e
                        .poll_timeout()
                        .map_or(Duration::ZERO, |t| t - self.now),
                };
                self.now += d;
                self.timers();
            }
            5 => {
                let n = usize::from(inp.u16() % 20_000);
                self.app_send(k, n);
            }
            6 => {
                let n = usize::from(inp.u16());
                self.app_recv(k, n);
            }
            7 => {
                let c = &self.conns[k];
                let _ = match inp.u8() % 4 {
                    0 => self.e.tcp_shutdown(c.h),
                    1 => self.e.tcp_close(c.h),
                    2 => self.e.tcp_abort(c.h),
                    _ => self.e.tcp_set_nodelay(c.h, true),
                };
            }
            8 => self.syn_to_listener(inp),
            _ => {
                // Another connection to the peer, or a listener on a fuzzed port.
                let port = inp.u16();
                if port & 1 == 0 {
                    let _ = self
                        .e
                        .tcp_connect(self.now, SocketAddr::new(IpAddr::from(PEER), port | 1));
                } else {
                    let _ = self.e.tcp_listen(port);
                }
            }
        }
        self.drain();
        self.check();
    }

    /// A segment on connection `k` with fuzzed fields, near the numbers in use.
    fn segment(&mut self, inp: &mut Input<'_>, k: usize) {
        let flags = inp.u8();
        let how = inp.u8();
        let (snd_max, last_ack, peer_nxt, ts) = {
            let c = &self.conns[k];
            (c.snd_max, c.last_ack, c.peer_nxt, c.ts)
        };
        let base = if how & 1 == 0 { last_ack } else { peer_nxt };
        let seq = match how >> 1 & 3 {
            0 => base,
            1 => base.wrapping_add(u32::from(inp.u16())),
            2 => base.wrapping_sub(u32::from(inp.u16())),
            _ => inp.u32(),
        };
        let ack = match how >> 3 & 3 {
            0 => Some(snd_max),
            1 => Some(snd_max.wrapping_sub(u32::from(inp.u16()))),
            2 => Some(inp.u32()),
            _ => None,
        };
        let wnd = inp.u16();
        let opt_sel = inp.u8();
        let mut opts = Vec::new();
        let raw;
        let mut raw_opts = None;
        if opt_sel & 0x80 != 0 {
            let n = usize::from(opt_sel & 0x3f).min(40);
            raw = inp.bytes(n).to_vec();
            raw_opts = Some(&raw[..]);
        } else {
            if opt_sel & 1 != 0 {
                opts.push(TcpOptionElement::Timestamp(inp.u32(), ts));
            }
            if opt_sel & 2 != 0 {
                let a = snd_max.wrapping_sub(u32::from(inp.u16()));
                let b = a.wrapping_add(u32::from(inp.u16()));
                opts.push(TcpOptionElement::Noop);
                opts.push(TcpOptionElement::Noop);
                opts.push(TcpOptionElement::SelectiveAcknowledgement(
                    (a, b),
                    [None; 3],
                ));
            }
        }
        let len = match how >> 5 {
            0..=3 => 0,
            4 | 5 => usize::from(inp.u16() % 1500),
            _ => usize::from(inp.u16()) % 64_000,
        };
        let irs = self.conns[k].irs;
        let off = seq.wrapping_sub(irs.wrapping_add(1));
        let payload: Vec<u8> = (0..len as u32)
            .map(|i| peer_byte(k, off.wrapping_add(i)))
            .collect();
        let meta_sel = inp.u8();
        let mut meta = OffloadMeta::plain();
        match meta_sel & 3 {
            1 => meta.csum = Checksum::Verified { levels: 1 },
            2 => {
                meta.csum = Checksum::Verified { levels: 1 };
                let size = (u16::from(meta_sel >> 2) * 64).max(1);
                let mut g = Gso::new(GsoType::TcpV4, size);
                g.segs = (len / usize::from(size)).max(1) as u16;
                meta.gso = Some(g);
            }
            _ => {}
        }
        let seg = Seg {
            k,
            src_port: self.conns[k].remote,
            dst_port: self.conns[k].local,
            seq,
            ack,
            flags,
            wnd,
            opts: &opts,
            raw_opts,
            payload: &payload,
        };
        let _ = seg.k;
        let Some(mut f) = Harness::build(&seg) else {
            return;
        };
        if meta_sel & 0x80 != 0 && f.len() > ethernet::HEADER_LEN {
            // Corrupt one byte; with a "verified" claim it may pass as data.
            let at =
                ethernet::HEADER_LEN + usize::from(inp.u16()) % (f.len() - ethernet::HEADER_LEN);
            f[at] ^= inp.u8() | 1;
            self.tainted = true;
        }
        if meta_sel & 0x40 != 0 && meta.csum != Checksum::None && len >= 64 && f.len() > len {
            // As frag-list GRO hands it up: the headers in the head, the
            // payload a chain of fragments of chosen sizes in one shared buffer.
            let piece = 1 + usize::from(inp.u16()) % 2048;
            self.feed_chained(&f, f.len() - len, piece, &meta);
        } else {
            self.feed(&f, &meta);
        }
        // The peer's stream position follows what it sent in order.
        if self.conns[k].peer_nxt == seq {
            let c = &mut self.conns[k];
            c.peer_nxt = seq
                .wrapping_add(len as u32)
                .wrapping_add(u32::from(flags & 1));
        }
    }

    /// A SYN to the listener from a new peer port, with fuzzed options.
    fn syn_to_listener(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let opts = peer_syn_options(sel, inp.u32());
        let port = self.next_port;
        self.next_port = self.next_port.wrapping_add(1).max(20_000);
        let seq = inp.u32();
        let f = Harness::build(&Seg {
            k: 0,
            src_port: port,
            dst_port: if sel & 0x80 != 0 { 80 } else { inp.u16() },
            seq,
            ack: (sel & 0x40 != 0).then(|| inp.u32()),
            flags: 0x02 | ((sel >> 4) & 0x05),
            wnd: inp.u16(),
            opts: &opts,
            raw_opts: None,
            payload: &[],
        });
        if let Some(f) = f {
            self.feed(&f, &OffloadMeta::plain());
        }
    }

    fn app_send(&mut self, k: usize, n: usize) {
        let c = &self.conns[k];
        let data: Vec<u8> = (0..n as u64).map(|i| app_byte(k, c.written + i)).collect();
        if let Ok(m) = self.e.tcp_send(c.h, &data) {
            assert!(m <= n);
            self.conns[k].written += m as u64;
        }
    }

    fn app_recv(&mut self, k: usize, n: usize) {
        let mut buf = vec![0u8; n];
        let c = &self.conns[k];
        if let Ok(m) = self.e.tcp_recv(c.h, &mut buf) {
            assert!(m <= n);
            if !self.tainted {
                for (i, &b) in buf[..m].iter().enumerate() {
                    let o = c.read + i as u64;
                    assert_eq!(
                        b,
                        peer_byte(k, o as u32),
                        "conn {k}: delivered a byte the peer did not send at offset {o}"
                    );
                }
            }
            self.conns[k].read += m as u64;
        }
    }

    /// Runs the timers due now; afterwards nothing may be due at or before now.
    fn timers(&mut self) {
        if self.e.poll_timeout().is_some_and(|t| t <= self.now) {
            self.e.handle_timeout(self.now);
            self.drain();
            if let Some(t) = self.e.poll_timeout() {
                assert!(
                    t > self.now,
                    "handle_timeout({:?}) left a deadline at {t:?}",
                    self.now
                );
            }
        }
    }

    fn check(&mut self) {
        let c = self.e.counters().clone();
        assert_eq!(
            c.rx_frames, self.fed,
            "rx_frames counts every frame handed in"
        );
        assert_eq!(
            c.tx_frames, self.emitted,
            "tx_frames counts every frame handed out"
        );
        assert_counters_grow(&self.counters, &c);
        self.counters = c;
        let tcp = &self.cfg.tcp;
        let mut outstanding = false;
        for (k, conn) in self.conns.iter_mut().enumerate() {
            let state = self.e.tcp_state(conn.h);
            if conn.closed {
                assert!(
                    matches!(state, Ok(TcpState::Closed) | Err(InvalidHandle)),
                    "conn {k}: closed, then {state:?}"
                );
                continue;
            }
            let Ok(info) = self.e.tcp_info(conn.h) else {
                conn.closed = true;
                continue;
            };
            if info.state == TcpState::Closed {
                conn.closed = true;
            }
            let r = self.e.tcp_readiness(conn.h).unwrap();
            if r.error.is_some() {
                assert!(r.readable, "conn {k}: failed but not readable");
            }
            assert!(info.recv_queue <= tcp.recv_buffer, "conn {k}: {info:?}");
            assert!(info.send_queue <= tcp.send_buffer, "conn {k}: {info:?}");
            assert!(info.send_queue as u64 <= conn.written, "conn {k}: {info:?}");
            let synchronized = matches!(
                info.state,
                TcpState::Established
                    | TcpState::FinWait1
                    | TcpState::CloseWait
                    | TcpState::Closing
                    | TcpState::LastAck
            );
            if synchronized {
                assert!(info.unacked <= info.send_queue + 2, "conn {k}: {info:?}");
                assert!(info.snd_mss > 0 && info.cwnd > 0, "conn {k}: {info:?}");
                assert!(
                    info.rto >= tcp.min_rto && info.rto <= tcp.max_rto,
                    "conn {k}: {info:?}"
                );
                outstanding |= info.unacked > 0;
            }
        }
        if outstanding {
            assert!(
                self.e.poll_timeout().is_some(),
                "data outstanding and no timer running at {:?}: {:?}",
                self.now,
                self.conns
                    .iter()
                    .map(|c| (c, self.e.tcp_info(c.h)))
                    .collect::<Vec<_>>()
            );
        }
    }
}

/// The SYN options a peer offers, chosen by `sel`.
fn peer_syn_options(sel: u8, tsval: u32) -> Vec<TcpOptionElement> {
    let mut o = Vec::new();
    if sel & 1 == 0 {
        o.push(TcpOptionElement::MaximumSegmentSize(
            [1460, 536, 64, 9000][usize::from(sel >> 1 & 3)],
        ));
    }
    if sel & 8 == 0 {
        o.push(TcpOptionElement::SelectiveAcknowledgementPermitted);
    }
    if sel & 16 == 0 {
        o.push(TcpOptionElement::Timestamp(tsval.max(1), 0));
    }
    if sel & 32 == 0 {
        o.push(TcpOptionElement::Noop);
        o.push(TcpOptionElement::WindowScale(sel >> 6 << 2));
    }
    o
}

/// `opts` with the timestamp echo set to `tsecr`.
fn with_tsecr(opts: &[TcpOptionElement], tsecr: u32) -> Vec<TcpOptionElement> {
    opts.iter()
        .map(|o| match o {
            TcpOptionElement::Timestamp(v, _) => TcpOptionElement::Timestamp(*v, tsecr),
            other => other.clone(),
        })
        .collect()
}

/// The sequence number and TSval of a SYN (or SYN-ACK) the engine sent.
fn syn_of(f: &[u8]) -> Option<(u32, u32)> {
    let eth = ethernet::Packet::new_checked(f).ok()?;
    let ip = ipv4::Packet::new_checked(eth.payload()).ok()?;
    let t = tcp::Packet::new_checked(ip.payload()).ok()?;
    if !t.flags().contains(tcp::Flags::SYN) {
        return None;
    }
    let ts = tcp::parse_syn_options(t.options())
        .ok()?
        .timestamps
        .map_or(0, |t| t.0);
    Some((t.seq_number(), ts))
}

/// Every counter is at least what it was.
fn assert_counters_grow(a: &Counters, b: &Counters) {
    let pairs = [
        (a.rx_frames, b.rx_frames),
        (a.tx_frames, b.tx_frames),
        (a.ip_in_receives, b.ip_in_receives),
        (a.ip_in_delivers, b.ip_in_delivers),
        (a.ip_out_requests, b.ip_out_requests),
        (a.tcp_active_opens, b.tcp_active_opens),
        (a.tcp_passive_opens, b.tcp_passive_opens),
        (a.tcp_attempt_fails, b.tcp_attempt_fails),
        (a.tcp_estab_resets, b.tcp_estab_resets),
        (a.tcp_in_segs, b.tcp_in_segs),
        (a.tcp_out_segs, b.tcp_out_segs),
        (a.tcp_retrans_segs, b.tcp_retrans_segs),
        (a.tcp_in_errs, b.tcp_in_errs),
        (a.tcp_out_rsts, b.tcp_out_rsts),
        (a.tcp_out_of_window, b.tcp_out_of_window),
        (a.tcp_challenge_acks, b.tcp_challenge_acks),
        (a.tcp_timeouts, b.tcp_timeouts),
        (a.tcp_window_probes, b.tcp_window_probes),
        (a.tcp_listen_drops, b.tcp_listen_drops),
        (a.tcp_syncookies_sent, b.tcp_syncookies_sent),
    ];
    for (i, (x, y)) in pairs.into_iter().enumerate() {
        assert!(y >= x, "counter {i} went down: {a:?} -> {b:?}");
    }
    assert!(b.tcp_in_csum_errors <= b.tcp_in_errs);
}

/// A structured input for [`engine`] from `seed`: mostly what a well-behaved
/// peer and application do (in-order data acknowledging everything sent, time
/// passing, reads and writes), with some out-of-order and stale segments, closes,
/// SYNs to the listener, and now and then a raw frame. Seeds the fuzz corpus and
/// the tests that run the harness without a fuzzer.
pub fn engine_input(seed: u64, steps: usize) -> Vec<u8> {
    let mut rng = crate::rng::Rng::new(seed);
    let mut r = |n: u64| rng.below(n.max(1));
    let mut v = vec![r(256) as u8, r(256) as u8];
    for _ in 0..steps {
        let k = r(2) as u8;
        match r(100) {
            0..=44 => {
                // A segment: op 0..=2.
                v.push((k << 4) | r(3) as u8);
                let fin = r(40) == 0;
                v.push(if fin {
                    0x01
                } else {
                    [0x00, 0x08][r(2) as usize]
                });
                let seq_mode = [0u8, 0, 0, 0, 1, 2][r(6) as usize];
                let ack_mode = [0u8, 0, 0, 1][r(4) as usize];
                let len_mode = [0u8, 4, 4, 5, 6][r(5) as usize];
                v.push(1 | (seq_mode << 1) | (ack_mode << 3) | (len_mode << 5));
                if seq_mode != 0 {
                    v.extend_from_slice(&(r(4000) as u16).to_le_bytes());
                }
                if ack_mode == 1 {
                    v.extend_from_slice(&(r(3000) as u16).to_le_bytes());
                }
                v.extend_from_slice(&(r(65_536) as u16 | 0x0400).to_le_bytes());
                let opt_sel = r(4) as u8;
                v.push(opt_sel);
                if opt_sel & 1 != 0 {
                    v.extend_from_slice(&(1_000 + r(1000) as u32).to_le_bytes());
                }
                if opt_sel & 2 != 0 {
                    v.extend_from_slice(&(r(8000) as u16).to_le_bytes());
                    v.extend_from_slice(&(r(3000) as u16).to_le_bytes());
                }
                if len_mode >= 4 {
                    v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
                }
                v.push([0u8, 1, 2 | (22 << 2)][r(3) as usize]);
            }
            45..=59 => {
                v.push(4);
                let mode = [3u16, 3, 1, 0][r(4) as usize];
                v.extend_from_slice(&(mode | ((r(4000) as u16) << 2)).to_le_bytes());
            }
            60..=74 => {
                v.push((k << 4) | 5);
                v.extend_from_slice(&(r(20_000) as u16).to_le_bytes());
            }
            75..=89 => {
                v.push((k << 4) | 6);
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            90..=93 => {
                v.push((k << 4) | 7);
                v.push(r(4) as u8);
            }
            94..=97 => {
                v.push(8);
                v.push(r(256) as u8 | 0x80);
                v.extend_from_slice(&(r(u64::from(u32::MAX)) as u32).to_le_bytes());
                v.extend_from_slice(&(r(u64::from(u32::MAX)) as u32).to_le_bytes());
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            98 => {
                v.push(9);
                v.extend_from_slice(&(r(65_536) as u16).to_le_bytes());
            }
            _ => {
                v.push(3);
                let n = r(80) as u16;
                v.extend_from_slice(&n.to_le_bytes());
                v.extend((0..n).map(|_| r(256) as u8));
            }
        }
    }
    v
}

/// The `engine` target: see the module docs.
pub fn engine(data: &[u8]) {
    let mut inp = Input(data);
    let sel = inp.u8();
    let mut h = Harness::new(sel);
    h.arp();
    h.drain();
    h.connect(inp.u8());
    // Some data each way to start from.
    h.app_send(0, 3000);
    h.app_send(1, 100);
    h.drain();
    h.check();
    let mut steps = 0;
    while !inp.is_empty() && steps < 400 {
        h.step(&mut inp);
        steps += 1;
    }
    if std::env::var_os("LINERATE_HARNESS_STATS").is_some() {
        let c = h.e.counters();
        eprintln!(
            "in {} out {} ooo {} challenge {} rst {} rto {} fast {} probes {} retrans {} cookies {} states {:?} read {:?} written {:?} tainted {}",
            c.tcp_in_segs,
            c.tcp_out_segs,
            c.tcp_out_of_window,
            c.tcp_challenge_acks,
            c.tcp_out_rsts,
            c.tcp_timeouts,
            c.tcp_fast_retransmits,
            c.tcp_window_probes,
            c.tcp_retrans_segs,
            c.tcp_syncookies_sent,
            h.conns
                .iter()
                .map(|c| h.e.tcp_state(c.h))
                .collect::<Vec<_>>(),
            h.conns.iter().map(|c| c.read).collect::<Vec<_>>(),
            h.conns.iter().map(|c| c.written).collect::<Vec<_>>(),
            h.tainted
        );
    }
    // Then let every timer run out: nothing may panic or spin.
    for _ in 0..200 {
        let Some(t) = h.e.poll_timeout() else { break };
        h.now = t.max(h.now);
        h.timers();
        h.check();
    }
}
