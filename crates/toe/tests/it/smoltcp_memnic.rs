//! Interop with smoltcp 0.14 over linerate-nic's memory backend
//! (`linerate_nic::memory`): a linerate [`Engine`] on one port of a memory pair
//! at MTU 1500, smoltcp on the other through
//! [`SmolPort`](linerate_testkit::smol::SmolPort), both in the virtual time of
//! the pair's manual [`Clock`], so the backend's delays and seeded faults are
//! reproducible. (tests/smoltcp.rs runs the same stacks over the engine's own
//! simulated hub, `linerate_toe::sim::Link`; this is the backend applications
//! and the offload report use.)
//!
//! Both directions, 64 MiB each, byte-exact: the receiver hashes what it reads
//! with SHA-256 and the digest is compared with one computed from the source on
//! its own. Once over a clean wire, once with the backend's `Faults` on both
//! directions (loss, corruption, duplication, reordering); 50 us of delay each
//! way in both.
//!
//! How linerate meets the wire:
//!
//! * linerate to smoltcp: over the software-offload [`Shim`] (offloads on) when
//!   clean, so the engine's 64 KiB TSO super-segments and partial checksums are
//!   cut and completed by the shim before the wire; straight on the memory port
//!   (offloads off, the engine's own MSS segments and checksums) with faults.
//! * smoltcp to linerate: straight on the port when clean; over the shim with
//!   faults, so the shim's software checksum check and GRO stand between the
//!   faulty wire and the engine.
//!
//! Either way every frame on the wire has a complete checksum (the backend's
//! corruption flips a bit the receiver can detect; see `memory::Faults`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::smol::{Sink, Source, smol_connect, smol_host, smol_time};
use linerate_nic::memory::{self, Clock, Faults, PairConfig};
use linerate_nic::{Batch, Counter, MemNic, Nic, NicCaps, Shim, ShimConfig};
use linerate_testkit::smol::SmolPort;
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, PoolSink, SocketHandle, TcpState};
use smoltcp::iface::{Interface, SocketHandle as SmolHandle, SocketSet};
use smoltcp::socket::tcp;
use std::time::Duration;

/// One wire direction's propagation delay.
const DELAY: Duration = Duration::from_micros(50);

/// Socket buffers on both sides.
const BUFFER: usize = 512 * 1024;

/// The faults of each direction: milder than the engine-to-engine campaign
/// (tests/faults.rs) because smoltcp 0.14 has no SACK.
fn faults() -> Faults {
    Faults {
        loss: 0.01,
        corrupt: 0.001,
        duplicate: 0.005,
        reorder: 0.01,
        reorder_depth: 3,
        delay: DELAY,
        rate: None,
    }
}

/// A memory port, bare or under the shim: the underlying port is what the
/// driver asks about arrivals and wire counters.
trait Port: Nic {
    fn mem(&self) -> &MemNic;
}

impl Port for MemNic {
    fn mem(&self) -> &MemNic {
        self
    }
}

impl Port for Shim<MemNic> {
    fn mem(&self) -> &MemNic {
        self.backend()
    }
}

/// linerate (10.0.0.1) on port A, smoltcp (10.0.0.2) on port B.
struct Pair<N: Port> {
    clock: Clock,
    engine: Engine,
    nic: N,
    rx: Batch,
    tx: Batch,
    smol: SmolPort<MemNic>,
    iface: Interface,
    sockets: SocketSet<'static>,
    socket: SmolHandle,
}

impl<N: Port> Pair<N> {
    fn new(offloads: bool, nic: N, smol: MemNic, clock: Clock, seed: u64) -> Pair<N> {
        let mut cfg = Sim::host_config(1);
        cfg.offloads = offloads;
        cfg.mtu = nic.caps().mtu;
        cfg.tcp.send_buffer = BUFFER;
        cfg.tcp.recv_buffer = BUFFER;
        let engine = Engine::new(cfg, seed);
        let mut smol = SmolPort::new(smol);
        let (iface, sockets, socket) = smol_host(&mut smol, seed, BUFFER);
        Pair {
            clock,
            engine,
            nic,
            rx: Batch::with_capacity(256),
            tx: Batch::with_capacity(256),
            smol,
            iface,
            sockets,
            socket,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.clock.now().as_nanos() as u64)
    }

    fn sock(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.socket)
    }

    /// Frames received by either side plus frames sent, so far (to tell a round
    /// that moved something from an idle one).
    fn activity(&self) -> u64 {
        let c = |n: &MemNic| {
            n.counters().total(Counter::RxPackets) + n.counters().total(Counter::TxPackets)
        };
        c(self.nic.mem()) + c(self.smol.nic())
    }

    /// One round at the current virtual time: linerate receives, runs its timers
    /// and sends; smoltcp does the same. Then `app` plays both applications.
    fn round(&mut self, app: &mut impl FnMut(&mut Self)) {
        let now = self.now();
        loop {
            let n = self.nic.receive(0, &mut self.rx, 256).unwrap();
            if n == 0 {
                break;
            }
            self.engine.handle_frames(now, &mut self.rx);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        self.iface
            .poll(smol_time(now), &mut self.smol, &mut self.sockets);
        app(self);
        self.engine.poll_transmit_into(
            now,
            &mut PoolSink::new(self.nic.pool(), &mut self.tx).with_frags(self.nic.tx_sg()),
        );
        if !self.tx.is_empty() {
            self.nic.transmit(0, &mut self.tx).unwrap();
        }
        self.iface
            .poll(smol_time(now), &mut self.smol, &mut self.sockets);
        self.smol.flush();
        assert!(self.smol.take_error().is_none());
    }

    /// Moves the clock to the next thing that can happen: a frame arriving at
    /// either port, a linerate timer, a smoltcp timer. A round that moved
    /// frames is followed by another at the same time.
    fn advance(&mut self, before: u64) {
        let now = self.now();
        if self.activity() != before {
            return;
        }
        let arrivals = [
            self.nic.mem().next_arrival(0),
            self.smol.nic().next_arrival(0),
        ]
        .into_iter()
        .flatten()
        .map(|d| Instant::from_nanos(d.as_nanos() as u64));
        let smol = self
            .iface
            .poll_delay(smol_time(now), &self.sockets)
            .map(|d| now + Duration::from_micros(d.total_micros()));
        let next = arrivals
            .chain(self.engine.poll_timeout())
            .chain(smol)
            .min()
            .unwrap_or(now + Duration::from_millis(1));
        // At least a microsecond (smoltcp's resolution), so an idle round that
        // something claims is due "now" cannot repeat forever.
        let next = next.max(now + Duration::from_micros(1));
        self.clock.advance(next.saturating_duration_since(now));
    }

    /// Rounds until `done` (called after each) or `limit` of virtual time.
    fn run(&mut self, limit: Duration, mut app: impl FnMut(&mut Self) -> bool) -> bool {
        let end = self.now() + limit;
        let mut finished = false;
        while self.now() < end {
            let before = self.activity();
            self.round(&mut |p: &mut Self| finished = app(p));
            if finished {
                return true;
            }
            self.advance(before);
        }
        false
    }
}

/// What a transfer did, for the assertions and the printed figures.
#[derive(Debug)]
#[allow(dead_code)] // `sim` and `wall` are read through Debug only
struct Report {
    dir: &'static str,
    /// Virtual time to the receiver's end of stream.
    sim: Duration,
    wall: Duration,
    /// Wire faults counted by both ports: lost, corrupted, duplicated, reordered.
    wire: [u64; 4],
    /// linerate's retransmitted segments and checksum errors caught.
    retrans: u64,
    csum_errors: u64,
    /// Checksum failures the shim caught before the engine (0 without one).
    shim_csum_bad: u64,
}

/// The ports: `shim` puts linerate's port under the software-offload shim
/// (and turns the engine's offloads on).
fn ports(faulty: bool, seed: u64) -> (MemNic, MemNic, Clock) {
    let clock = Clock::manual();
    let f = if faulty {
        faults()
    } else {
        Faults {
            delay: DELAY,
            ..Faults::NONE
        }
    };
    let (a, b) = memory::pair(PairConfig {
        a_to_b: f,
        b_to_a: f,
        seed,
        clock: clock.clone(),
        ..PairConfig::new(NicCaps::plain(), NicCaps::plain())
    });
    (a, b, clock)
}

fn transfer(shim: bool, faulty: bool, to_smoltcp: bool, len: usize, seed: u64) -> Report {
    let (a, b, clock) = ports(faulty, seed);
    if shim {
        let a = Shim::new(a, ShimConfig::all()).unwrap();
        let mut p = Pair::new(true, a, b, clock, seed);
        let mut r = drive(&mut p, to_smoltcp, len, seed);
        r.shim_csum_bad = p.nic.counters().total(Counter::CsumBad);
        println!("{r:?}");
        r
    } else {
        let mut p = Pair::new(false, a, b, clock, seed);
        let r = drive(&mut p, to_smoltcp, len, seed);
        println!("{r:?}");
        r
    }
}

/// Streams `len` bytes of [`Source`] `seed` one way, the receiver hashing what
/// it reads; both ends close. Checks length, digest and the close.
fn drive<N: Port>(p: &mut Pair<N>, to_smoltcp: bool, len: usize, seed: u64) -> Report {
    let wall = std::time::Instant::now();
    let mut src = Source::new(seed);
    let mut sink = Sink::default();
    let (mut sent, mut closed) = (0usize, false);
    let limit = Duration::from_secs(600);
    let dir = if to_smoltcp {
        "linerate -> smoltcp"
    } else {
        "smoltcp -> linerate"
    };
    let finished;
    let client: SocketHandle;
    if to_smoltcp {
        p.sock().listen(5001).unwrap();
        client = p
            .engine
            .tcp_connect(p.now(), "10.0.0.2:5001".parse().unwrap())
            .unwrap();
        finished = p.run(limit, |p| {
            src.send_linerate(&mut p.engine, client, &mut sent, len);
            if sent == len && !closed {
                p.engine.tcp_shutdown(client).unwrap();
                closed = true;
            }
            sink.recv_smol(p.sock());
            closed && !p.sock().may_recv()
        });
    } else {
        let l = p.engine.tcp_listen(5001).unwrap();
        smol_connect(&mut p.iface, &mut p.sockets, p.socket);
        let mut s = None;
        finished = p.run(limit, |p| {
            s = s.or_else(|| p.engine.tcp_accept(l).ok());
            src.send_smol(p.sock(), &mut sent, len);
            if sent == len && !closed {
                p.sock().close();
                closed = true;
            }
            let Some(s) = s else { return false };
            sink.recv_linerate(&mut p.engine, s)
        });
        client = s.expect("linerate accepted no connection");
    }
    let sim = p.now() - Instant::ZERO;
    let got = sink.got;
    assert!(
        finished,
        "{dir}: no end of stream within {limit:?} of virtual time: sent {sent}, received {got} of {len}"
    );
    assert_eq!(got, len, "{dir}: received {got} of {len}");
    assert!(
        sink.digest() == Source::digest(seed, len),
        "{dir}: {len} bytes arrived but their SHA-256 differs"
    );
    // The receiver closes too; the sender must see it.
    let closed_both = if to_smoltcp {
        p.sock().close();
        p.run(Duration::from_secs(120), |p| {
            matches!(
                p.engine.tcp_state(client),
                Ok(TcpState::TimeWait | TcpState::Closed)
            )
        })
    } else {
        p.engine.tcp_close(client).unwrap();
        p.run(Duration::from_secs(120), |p| {
            matches!(p.sock().state(), tcp::State::TimeWait | tcp::State::Closed)
        })
    };
    assert!(
        closed_both,
        "{dir}: the sender did not see the receiver's FIN"
    );
    let wire = |c: Counter| p.nic.mem().counters().total(c) + p.smol.nic().counters().total(c);
    let k = p.engine.counters();
    Report {
        sim,
        wall: wall.elapsed(),
        wire: [
            wire(Counter::WireLost),
            wire(Counter::WireCorrupted),
            wire(Counter::WireDuplicated),
            wire(Counter::WireReordered),
        ],
        retrans: k.tcp_retrans_segs,
        csum_errors: k.tcp_in_csum_errors + k.ip_in_hdr_errors,
        shim_csum_bad: 0,
        dir,
    }
}

const MIB: usize = 1 << 20;

/// Clean wire, 64 MiB: linerate over the shim sends to smoltcp (the shim cuts
/// its super-segments), and smoltcp sends to linerate on the bare port.
#[test]
fn sixty_four_mib_each_way_clean() {
    let a = transfer(true, false, true, 64 * MIB, 1);
    assert_eq!(a.wire, [0; 4]);
    assert_eq!(a.retrans, 0, "{a:?}");
    let b = transfer(false, false, false, 64 * MIB, 2);
    assert_eq!(b.wire, [0; 4]);
    assert_eq!(b.csum_errors, 0, "{b:?}");
}

/// Both directions over the faulty wire: linerate on the bare port sends to
/// smoltcp; smoltcp sends to linerate over the shim. Every fault kind happened
/// in each run, linerate retransmitted (as the sender), and the shim's software
/// checksum check caught corrupted frames before the engine (as the receiver).
fn faulty_each_way(len: usize, seed: u64) {
    let a = transfer(false, true, true, len, seed);
    assert!(a.wire.iter().all(|&n| n > 0), "{a:?}");
    assert!(a.retrans > 0, "{a:?}");
    let b = transfer(true, true, false, len, seed + 1);
    assert!(b.wire.iter().all(|&n| n > 0), "{b:?}");
    assert!(b.shim_csum_bad > 0, "{b:?}");
}

/// About 1.5 s of wall time in the test profile. smoltcp as the sender takes
/// about 2 minutes of virtual time to recover its losses without SACK (the
/// same as over `sim::Link`, tests/smoltcp.rs); linerate as the sender under
/// 0.6 s.
#[test]
fn sixty_four_mib_each_way_with_faults() {
    faulty_each_way(64 * MIB, 3);
}

/// More seeds, 8 MiB each way: ten in the default run (about 1 s), forty more
/// behind `--ignored`.
#[test]
fn eight_mib_each_way_with_faults_ten_seeds() {
    for seed in (1000..1020).step_by(2) {
        faulty_each_way(8 * MIB, seed);
    }
}

#[test]
#[ignore = "long: 40 more seeds each way (about 5 s in the test profile)"]
fn eight_mib_each_way_with_faults_forty_seeds() {
    for seed in (1020..1100).step_by(2) {
        faulty_each_way(8 * MIB, seed);
    }
}
