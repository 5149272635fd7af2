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
//! verified, GRO super-segment); receive batches of up to 64 segments of one
//! size with holes, duplicates and reordering (`batch`), as a NIC without GRO
//! hands them over; raw frames; SYNs to the listener; time advances; and socket
//! calls (send, recv, shutdown, close, abort, connect). After every step the
//! engine's output is read and these invariants are checked:
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
//! The set-up is made once per thread for each pair of option bytes and
//! cloned for every input that starts with them: an input pays for a copy of
//! the engine, not for building one and two handshakes. Buffers (the batch,
//! the output pool, the gathered output) are kept from input to input, and the
//! streams' bytes come from tables (`oracle`).
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
use linerate_wire::etherparse::TcpOptionElement;
use linerate_wire::{arp, checksum, ethernet, ipv4, ipv6, tcp};
use oracle::{app_bytes, peer_bytes};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

mod batch;
mod oracle;
mod reasm;
mod seeds;

pub use reasm::reasm;
pub use seeds::engine_input;

/// A fuzz target: arbitrary bytes in, panics on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target of this crate, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[("engine", engine), ("reasm", reasm)];

const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const ME: [u8; 4] = [10, 0, 0, 1];
const PEER: [u8; 4] = [10, 0, 0, 2];

/// The 16-bit sum of the IPv4 header [`Harness::build`] writes, without its
/// total length and checksum.
const IP_HEADER_SUM: u32 = 0x4500
    + 0x4000
    + 0x4006
    + (PEER[0] as u32) * 256
    + PEER[1] as u32
    + (PEER[2] as u32) * 256
    + PEER[3] as u32
    + (ME[0] as u32) * 256
    + ME[1] as u32
    + (ME[2] as u32) * 256
    + ME[3] as u32;

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
    /// The next `N` bytes, zeros for those past the end. Whole when they are
    /// there: byte by byte, each read is a branch the fuzzer's instrumentation
    /// traces.
    fn array<const N: usize>(&mut self) -> [u8; N] {
        if let Some((a, rest)) = self.0.split_first_chunk::<N>() {
            self.0 = rest;
            return *a;
        }
        let mut a = [0; N];
        let n = self.0.len();
        a[..n].copy_from_slice(self.0);
        self.0 = &[];
        a
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
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
#[derive(Debug, Clone)]
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
    s: Scratch,
}

/// The harness after its set-up, before the input's steps: cloned for each
/// input.
#[derive(Clone)]
struct Prepared {
    e: Engine,
    cfg: Config,
    conns: Vec<Conn>,
    fed: u64,
    emitted: u64,
    counters: Counters,
}

/// Buffers kept from input to input.
struct Scratch {
    /// The frames being handed to the engine.
    batch: Batch,
    /// With offloads, output goes to a sink that takes super-segments by
    /// reference to the send buffer (`PoolSink::with_frags`), gathered into
    /// `gather` to be read: its buffers from `pool`.
    out: Batch,
    pool: Pool,
    gather: Vec<u8>,
    /// What the application reads into.
    read: Vec<u8>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            batch: Batch::with_capacity(2 * batch::MAX_SEGS),
            out: Batch::new(),
            pool: Pool::new(PoolConfig::mtu()),
            gather: Vec::new(),
            read: vec![0; 1 << 16],
        }
    }
}

/// Steps an input takes at most (the rest of it is not read). Under the
/// fuzzer's instrumentation a step costs tens of microseconds, and libFuzzer's
/// bookkeeping per input grows with the code the input reaches, so longer
/// inputs run fewer a second without covering more: in equal time from the
/// committed corpus (`cargo fuzz run engine -- -max_total_time=480`), inputs
/// cut at 32 steps reached at least as many edges as inputs cut at 400 or 16.
/// A batch (op 2) is one step of up to 64 segments and a time step can jump
/// to the next deadline: what this bounds is not depth in segments or time.
const MAX_STEPS: usize = 32;

/// Most set-ups a thread keeps (each a small engine with two connections).
const PREPARED_MAX: usize = 1024;

thread_local! {
    static PREPARED: RefCell<HashMap<u16, Prepared>> = RefCell::new(HashMap::new());
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
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
    /// The payload's 16-bit sum when known without reading it (a run of the
    /// peer's stream, `oracle::peer_sum`).
    payload_sum: Option<u64>,
}

impl Harness {
    fn new(sel: u8, s: Scratch) -> Harness {
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
            s,
        }
    }

    /// The harness `p` describes, with buffers `s`.
    fn from_prepared(p: Prepared, s: Scratch) -> Harness {
        Harness {
            e: p.e,
            cfg: p.cfg,
            now: Instant::ZERO,
            conns: p.conns,
            fed: p.fed,
            emitted: p.emitted,
            counters: p.counters,
            tainted: false,
            next_port: 20_000,
            s,
        }
    }

    /// What [`Harness::from_prepared`] takes to make this harness again.
    fn prepared(&self) -> Prepared {
        Prepared {
            e: self.e.clone(),
            cfg: self.cfg.clone(),
            conns: self.conns.clone(),
            fed: self.fed,
            emitted: self.emitted,
            counters: self.counters.clone(),
        }
    }

    /// Hands the engine a frame it owns (as a NIC would), so large in-order
    /// payloads are kept in it (`tcp::recvbuf`) and read from there.
    fn feed(&mut self, frame: PacketBuf, meta: &OffloadMeta) {
        self.fed += 1;
        self.s.batch.push(Frame::new(frame, *meta));
        self.e.handle_frames(self.now, &mut self.s.batch);
    }

    /// Hands the engine `frame` as a scatter-gather frame: its first `head`
    /// bytes in the head, the rest as fragments of `piece` bytes (the last
    /// shorter; at most 64 of them, as frag-list GRO makes) of one shared
    /// buffer.
    fn feed_chained(&mut self, frame: &[u8], head: usize, piece: usize, meta: &OffloadMeta) {
        self.fed += 1;
        let (h, rest) = frame.split_at(head.min(frame.len()));
        let piece = piece.max(rest.len().div_ceil(64)).max(1);
        let shared = SharedBuf::new(PacketBuf::from_slice(rest));
        let mut f = Frame::new(PacketBuf::from_slice(h), *meta);
        let mut at = 0;
        while at < rest.len() {
            let n = piece.min(rest.len() - at);
            let _ = f.frags.push(Frag::new(shared.clone(), at, n).unwrap());
            at += n;
        }
        self.s.batch.push(f);
        self.e.handle_frames(self.now, &mut self.s.batch);
    }

    /// The peer announces itself with an ARP request.
    fn arp(&mut self) {
        let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
        f[..6].copy_from_slice(&ethernet::BROADCAST);
        f[6..12].copy_from_slice(&PEER_MAC);
        f[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        arp::emit_request(&mut f[ethernet::HEADER_LEN..], PEER_MAC, PEER, ME).unwrap();
        self.feed(PacketBuf::from_vec(f), &OffloadMeta::plain());
    }

    /// The frame of `seg` from the peer: Ethernet, IPv4 without options,
    /// TCP with its options (padded with zeros to a multiple of four bytes),
    /// checksums filled; in a buffer of `pool` if it fits one. None if the
    /// options take more than 40 bytes or the datagram more than 65,535.
    /// (Written here rather than by etherparse's builder, which was most of
    /// a step's time under the fuzzer's instrumentation.)
    fn build(pool: &Pool, seg: &Seg<'_>) -> Option<PacketBuf> {
        let mut opts = [0u8; 40];
        let olen = match seg.raw_opts {
            Some(raw) => {
                opts.get_mut(..raw.len())?.copy_from_slice(raw);
                raw.len()
            }
            None => encode_options(seg.opts, &mut opts)?,
        };
        let thl = 20 + olen.div_ceil(4) * 4;
        let ip_len = 20 + thl + seg.payload.len();
        let ip_len16 = u16::try_from(ip_len).ok()?;
        let total = ethernet::HEADER_LEN + ip_len;
        let mut b = if total <= pool.config().buf_len {
            pool.alloc()
        } else {
            PacketBuf::with_headroom(0, total)
        };
        let f = b.append(total);
        let (eth, rest) = f.split_at_mut(ethernet::HEADER_LEN);
        eth[..6].copy_from_slice(&ME_MAC);
        eth[6..12].copy_from_slice(&PEER_MAC);
        eth[12..].copy_from_slice(&ethernet::ethertype::IPV4.to_be_bytes());
        let (ip, tcp) = rest.split_at_mut(20);
        ip[..12].copy_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0]);
        ip[2..4].copy_from_slice(&ip_len16.to_be_bytes());
        ip[12..16].copy_from_slice(&PEER);
        ip[16..].copy_from_slice(&ME);
        // Only the length varies: the header's sum is a constant plus it.
        let c = checksum::finish(IP_HEADER_SUM + u32::from(ip_len16));
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let flags = (seg.flags & !0x10) | u8::from(seg.ack.is_some()) << 4;
        tcp[..2].copy_from_slice(&seg.src_port.to_be_bytes());
        tcp[2..4].copy_from_slice(&seg.dst_port.to_be_bytes());
        tcp[4..8].copy_from_slice(&seg.seq.to_be_bytes());
        let ack = seg.ack.unwrap_or(0);
        tcp[8..12].copy_from_slice(&ack.to_be_bytes());
        tcp[12] = (thl as u8 / 4) << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&seg.wnd.to_be_bytes());
        tcp[16..20].fill(0);
        tcp[20..thl].copy_from_slice(&opts[..thl - 20]);
        tcp[thl..].copy_from_slice(seg.payload);
        let pseudo = checksum::pseudo_ipv4(PEER, ME, 6, (thl + seg.payload.len()) as u16);
        let payload_sum = seg
            .payload_sum
            .unwrap_or_else(|| u64::from(checksum::partial(seg.payload, 0)));
        // The header's sum from its fields (the options zero-padded to 40
        // bytes sum as they are): no pass over the bytes just written.
        let word = |b: [u8; 2]| u64::from(u16::from_be_bytes(b));
        let fields = u64::from(seg.src_port)
            + u64::from(seg.dst_port)
            + u64::from(seg.seq >> 16)
            + u64::from(seg.seq & 0xffff)
            + u64::from(ack >> 16)
            + u64::from(ack & 0xffff)
            + word([tcp[12], flags])
            + u64::from(seg.wnd);
        let opts_sum: u64 = if olen == 0 {
            0
        } else {
            opts.as_chunks::<2>().0.iter().map(|&w| word(w)).sum()
        };
        let mut sum = u64::from(pseudo) + fields + opts_sum + payload_sum;
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let c = !(sum as u16);
        tcp[16..18].copy_from_slice(&c.to_be_bytes());
        Some(b)
    }

    /// Sends a segment from the peer.
    fn send(&mut self, seg: &Seg<'_>, meta: &OffloadMeta) {
        if let Some(f) = Harness::build(&self.s.pool, seg) {
            self.feed(f, meta);
        }
    }

    /// Reads the engine's output: the peer's view of each connection, and the
    /// sent-bytes oracle.
    fn drain(&mut self) {
        let Scratch {
            out, pool, gather, ..
        } = &mut self.s;
        let conns = &mut self.conns;
        // Each frame is read where it lies: a linear one in place, one with
        // fragments gathered first.
        let mut n = 0;
        let sent = if self.cfg.offloads {
            let sent = self
                .e
                .poll_transmit_into(self.now, &mut PoolSink::new(pool, out).with_frags(true));
            for f in out.iter() {
                observe(conns, f.contiguous(gather));
                n += 1;
            }
            out.clear();
            sent
        } else {
            self.e.poll_transmit(self.now, &mut |f, _| {
                observe(conns, f);
                n += 1;
            })
        };
        assert_eq!(sent, n);
        self.emitted += sent as u64;
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
                payload_sum: None,
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
                payload_sum: None,
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
                payload_sum: None,
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
            0 | 1 => self.segment(inp, k),
            2 => self.batch(inp, k),
            3 => {
                let len = usize::from(inp.u16() % 1600);
                let mut f = inp.bytes(len).to_vec();
                if f.len() >= 12 {
                    f[..6].copy_from_slice(&ME_MAC);
                }
                self.tainted = true;
                self.feed(PacketBuf::from_vec(f), &OffloadMeta::plain());
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
        let payload = peer_bytes(k, off, len);
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
            payload,
            payload_sum: Some(oracle::peer_sum(k, off, len)),
        };
        let _ = seg.k;
        let Some(mut f) = Harness::build(&self.s.pool, &seg) else {
            return;
        };
        if meta_sel & 0x80 != 0 && f.len() > ethernet::HEADER_LEN {
            // Corrupt one byte; with a "verified" claim it may pass as data.
            let at =
                ethernet::HEADER_LEN + usize::from(inp.u16()) % (f.len() - ethernet::HEADER_LEN);
            f.as_mut_slice()[at] ^= inp.u8() | 1;
            self.tainted = true;
        }
        if meta_sel & 0x40 != 0 && meta.csum != Checksum::None && len >= 64 && f.len() > len {
            // As frag-list GRO hands it up: the headers in the head, the
            // payload a chain of fragments of chosen sizes in one shared buffer.
            let piece = 1 + usize::from(inp.u16()) % 2048;
            self.feed_chained(f.as_slice(), f.len() - len, piece, &meta);
        } else {
            self.feed(f, &meta);
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
        let f = Harness::build(
            &self.s.pool,
            &Seg {
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
                payload_sum: None,
            },
        );
        if let Some(f) = f {
            self.feed(f, &OffloadMeta::plain());
        }
    }

    fn app_send(&mut self, k: usize, n: usize) {
        let c = &self.conns[k];
        let data = app_bytes(k, c.written, n);
        if let Ok(m) = self.e.tcp_send(c.h, data) {
            assert!(m <= n);
            self.conns[k].written += m as u64;
        }
    }

    fn app_recv(&mut self, k: usize, n: usize) {
        let buf = &mut self.s.read[..n.min(oracle::MAX_RUN)];
        let c = &self.conns[k];
        if let Ok(m) = self.e.tcp_recv(c.h, buf) {
            assert!(m <= n);
            let got = &buf[..m];
            if !self.tainted && got != peer_bytes(k, c.read as u32, m) {
                let i = got
                    .iter()
                    .zip(peer_bytes(k, c.read as u32, m))
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                panic!(
                    "conn {k}: delivered a byte the peer did not send at offset {}",
                    c.read + i as u64
                );
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

/// The peer's view of one frame the engine sent: each connection's highest
/// sequence number, last ACK and TSval; and every byte of data sent is the one
/// the application wrote at that offset.
fn observe(conns: &mut [Conn], f: &[u8]) {
    let Ok(eth) = ethernet::Packet::new_checked(f) else {
        panic!("the engine sent a malformed Ethernet frame");
    };
    match eth.ethertype() {
        ethernet::ethertype::IPV4 => {}
        ethernet::ethertype::IPV6 => {
            ipv6::Packet::new_checked(eth.payload())
                .expect("the engine sent a malformed IPv6 header");
            return;
        }
        _ => return,
    }
    let ip =
        ipv4::Packet::new_checked(eth.payload()).expect("the engine sent a malformed IPv4 header");
    if ip.protocol() != ipv4::protocol::TCP || ip.dst_addr() != PEER {
        return;
    }
    let t = tcp::Packet::new_checked(ip.payload()).expect("the engine sent a malformed TCP header");
    let flags = t.flags();
    let Some(k) = conns
        .iter()
        .position(|c| c.local == t.src_port() && c.remote == t.dst_port())
    else {
        return;
    };
    let c = &mut conns[k];
    let seq = t.seq_number();
    let payload = t.payload();
    // Every byte sent is the one the application wrote at that offset.
    if !payload.is_empty() && !flags.contains(tcp::Flags::SYN) {
        let off = u64::from(seq.wrapping_sub(c.iss.wrapping_add(1)));
        let end = off + payload.len() as u64;
        assert!(
            end <= c.written,
            "conn {k}: sent bytes up to offset {end}, only {} written",
            c.written
        );
        for (at, run) in payload.chunks(oracle::MAX_RUN).enumerate() {
            let o = off + (at * oracle::MAX_RUN) as u64;
            if run != app_bytes(k, o, run.len()) {
                let i = run
                    .iter()
                    .zip(app_bytes(k, o, run.len()))
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                panic!("conn {k}: wrong byte at offset {}", o + i as u64);
            }
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

/// Writes `opts` as TCP options into `out`; their length, or None if they do
/// not fit.
fn encode_options(opts: &[TcpOptionElement], out: &mut [u8; 40]) -> Option<usize> {
    let mut n = 0;
    let mut put = |bytes: &[u8]| -> Option<()> {
        out.get_mut(n..n + bytes.len())?.copy_from_slice(bytes);
        n += bytes.len();
        Some(())
    };
    for o in opts {
        match *o {
            TcpOptionElement::Noop => put(&[1])?,
            TcpOptionElement::MaximumSegmentSize(m) => {
                let [a, b] = m.to_be_bytes();
                put(&[2, 4, a, b])?;
            }
            TcpOptionElement::WindowScale(s) => put(&[3, 3, s])?,
            TcpOptionElement::SelectiveAcknowledgementPermitted => put(&[4, 2])?,
            TcpOptionElement::SelectiveAcknowledgement(first, more) => {
                let blocks = 1 + more.iter().flatten().count();
                put(&[5, 2 + 8 * blocks as u8])?;
                for (l, r) in std::iter::once(first).chain(more.into_iter().flatten()) {
                    let (l, r) = (l.to_be_bytes(), r.to_be_bytes());
                    put(&[l[0], l[1], l[2], l[3], r[0], r[1], r[2], r[3]])?;
                }
            }
            TcpOptionElement::Timestamp(v, e) => {
                let (v, e) = (v.to_be_bytes(), e.to_be_bytes());
                put(&[8, 10, v[0], v[1], v[2], v[3], e[0], e[1], e[2], e[3]])?;
            }
        }
    }
    Some(n)
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

/// Whether `LINERATE_HARNESS_STATS` is set (read once: each read takes the
/// environment's lock and copies the value).
fn stats() -> bool {
    static STATS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STATS.get_or_init(|| std::env::var_os("LINERATE_HARNESS_STATS").is_some())
}

/// The `engine` target: see the module docs.
pub fn engine(data: &[u8]) {
    let mut inp = Input(data);
    let (sel, sel2) = (inp.u8(), inp.u8());
    let s = SCRATCH
        .with(|s| s.borrow_mut().take())
        .unwrap_or_else(Scratch::new);
    let key = u16::from(sel) << 8 | u16::from(sel2);
    let prepared = PREPARED.with(|p| p.borrow().get(&key).cloned());
    let mut h = match prepared {
        Some(p) => Harness::from_prepared(p, s),
        None => {
            let mut h = Harness::new(sel, s);
            h.arp();
            h.drain();
            h.connect(sel2);
            h.check();
            // Every input runs on a copy, this one too: a copy behaves as the
            // original, but the first input of a set-up and the next must
            // not differ in any way (a crash must replay).
            let p = h.prepared();
            PREPARED.with(|c| {
                let mut c = c.borrow_mut();
                if c.len() >= PREPARED_MAX {
                    c.clear();
                }
                c.insert(key, p.clone());
            });
            Harness::from_prepared(p, h.s)
        }
    };
    let mut steps = 0;
    while !inp.is_empty() && steps < MAX_STEPS {
        h.step(&mut inp);
        steps += 1;
    }
    if stats() {
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
    SCRATCH.with(|s| *s.borrow_mut() = Some(h.s));
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_wire::build::{FrameBuilder, Ip, L4};
    use linerate_wire::etherparse::TcpHeader;

    /// The frames the harness writes are the ones etherparse's builder makes.
    #[test]
    fn frames_match_etherparse() {
        let pool = Pool::new(PoolConfig::mtu());
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let sack = TcpOptionElement::SelectiveAcknowledgement((5, 9), [Some((11, 20)), None, None]);
        let opt_sets: [&[TcpOptionElement]; 4] = [
            &[],
            &[TcpOptionElement::Noop, TcpOptionElement::Timestamp(7, 8)],
            &[TcpOptionElement::Noop, TcpOptionElement::Noop, sack],
            &[
                TcpOptionElement::MaximumSegmentSize(1460),
                TcpOptionElement::SelectiveAcknowledgementPermitted,
                TcpOptionElement::WindowScale(7),
            ],
        ];
        let raw: [Option<&[u8]>; 3] = [None, Some(&[1, 1, 1]), Some(&[9; 40])];
        for opts in opt_sets {
            for raw_opts in raw {
                for (len, flags, ack) in [
                    (0, 0x02, None),
                    (100, 0x19, Some(77)),
                    (3000, 0xe5, Some(1)),
                ] {
                    let seg = Seg {
                        k: 0,
                        src_port: 4000,
                        dst_port: 80,
                        seq: 0xdead_beef,
                        ack,
                        flags,
                        wnd: 1234,
                        opts,
                        raw_opts,
                        payload: &payload[..len],
                        payload_sum: None,
                    };
                    let mut h = TcpHeader::new(seg.src_port, seg.dst_port, seg.seq, seg.wnd);
                    h.fin = flags & 0x01 != 0;
                    h.syn = flags & 0x02 != 0;
                    h.rst = flags & 0x04 != 0;
                    h.psh = flags & 0x08 != 0;
                    h.urg = flags & 0x20 != 0;
                    h.ece = flags & 0x40 != 0;
                    h.cwr = flags & 0x80 != 0;
                    if let Some(a) = ack {
                        h.ack = true;
                        h.acknowledgment_number = a;
                    }
                    match raw_opts {
                        Some(r) => h.set_options_raw(r).unwrap(),
                        None => h.set_options(opts).unwrap(),
                    }
                    let want = FrameBuilder::new(Ip::v4(PEER, ME), L4::Tcp(h))
                        .macs(PEER_MAC, ME_MAC)
                        .build(seg.payload);
                    let got = Harness::build(&pool, &seg).unwrap();
                    assert_eq!(got.as_slice(), &want[..], "{opts:?} {raw_opts:?} {len}");
                }
            }
        }
        // A run of the peer's stream with its sum from the tables: the same
        // frame as with the sum worked out.
        for (o, len) in [
            (0u32, 1448usize),
            (77, 1),
            (32_000, 9000),
            (u32::MAX - 3, 601),
        ] {
            let mut seg = Seg {
                k: 1,
                src_port: 4000,
                dst_port: 80,
                seq: o,
                ack: Some(1),
                flags: 0x10,
                wnd: 9,
                opts: &[],
                raw_opts: None,
                payload: peer_bytes(1, o, len),
                payload_sum: None,
            };
            let want = Harness::build(&pool, &seg).unwrap();
            seg.payload_sum = Some(oracle::peer_sum(1, o, len));
            let got = Harness::build(&pool, &seg).unwrap();
            assert_eq!(got.as_slice(), want.as_slice(), "{o} {len}");
        }
        // Options beyond 40 bytes, a datagram beyond 65,535: no frame.
        let long = vec![TcpOptionElement::Timestamp(1, 2); 5];
        let big = vec![0u8; 65_536];
        for (opts, payload) in [(&long[..], &[][..]), (&[][..], &big[..])] {
            let seg = Seg {
                k: 0,
                src_port: 1,
                dst_port: 2,
                seq: 3,
                ack: None,
                flags: 0,
                wnd: 4,
                opts,
                raw_opts: None,
                payload,
                payload_sum: None,
            };
            assert!(Harness::build(&pool, &seg).is_none());
        }
    }
}
