//! One-way TCP bulk transfer between two stacks on a memory link, in one thread,
//! measured in wall-clock time and thread CPU time: the cells of the offload report
//! (`examples/offload_report.rs`) and of the `tcp` benchmark.
//!
//! Three set-ups, all at MTU 1500 over a pair of memory ports with no hardware
//! offloads:
//!
//! * [`Stack::LinerateOn`]: two linerate engines with `Config::offloads` on, each
//!   over the software-offload [`Shim`] wrapping its memory port. The sender's
//!   engine emits 64 KiB super-segments with a GSO request and a partial checksum;
//!   the shim segments them into MTU-sized frames and completes their checksums;
//!   the receiving shim verifies checksums and coalesces the frames again (GRO,
//!   flushed at the end of every receive call, as NAPI does) before the engine
//!   sees them.
//! * [`Stack::LinerateOff`]: offloads off: the engine emits MSS-sized segments with
//!   full checksums and verifies checksums of what it receives; the NIC layer only
//!   moves frames.
//! * [`Stack::Smoltcp`]: smoltcp 0.14 on both ends ([`crate::smol::SmolPort`]),
//!   checksums in smoltcp.
//!
//! The off and smoltcp cells do not acknowledge alike. smoltcp's
//! `Interface::poll` takes every frame waiting before it sends anything, and
//! its socket sends at most one ACK per poll, so its receiver answers a whole
//! window of segments with one stretch ACK. linerate acknowledges every second
//! full-sized segment even within a batch (`tcp::input`'s `process_text` says
//! why), but keeps at most 16 ACKs of in-order data owed per batch (`tcp::sack_owed`: the newest
//! covers the rest, as a GRO receiver's one ACK per super-segment does), so
//! over the memory pair, where a whole window arrives per batch, it sends
//! several times smoltcp's ACKs for the same data (the wire's `tx_packets`
//! counters show how many).
//! smoltcp here also runs no congestion control (its `socket-tcp-cubic` and
//! `-reno` features are off), no SACK and no timestamps.
//!
//! The application writes `write` bytes per call (`tcp_send` / `send_slice`)
//! whenever the socket takes them, and reads up to [`READ_LEN`] bytes per call,
//! comparing every byte read with what was sent. Time is the real monotonic clock,
//! except that when nothing at all can happen until a timer (a delayed ACK, say)
//! the clock jumps to it instead of the thread sleeping, so a timer never costs
//! wall time: what is measured is the work, not the waiting.

use crate::cpu::{CpuTime, thread_cpu_time};
use crate::smol::SmolPort;
use linerate_nic::memory::{self, PairConfig};
use linerate_nic::{Batch, Counter, MemNic, Nic, NicCaps, NicError, Shim, ShimConfig};
use linerate_toe::sim::Sim;
use linerate_toe::{Bytes, Engine, Instant, PoolSink};
use smoltcp::iface::{Config as SmolConfig, Interface, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

mod both_ways;
mod tunnel;

use both_ways::both_ways;
pub use tunnel::{Offload, Tunnelled, transfer_tunnel};

/// The write sizes of the offload report and the bulk benchmark: 64 B to 256 KiB.
pub const WRITES: [usize; 6] = [64, 1024, 4096, 16 * 1024, 64 * 1024, 256 * 1024];

/// Bytes the receiving application asks for per read.
pub const READ_LEN: usize = 64 * 1024;

/// Send and receive buffer of every connection, both stacks (linerate's default).
pub const SOCKET_BUFFER: usize = 512 * 1024;

/// The TCP port the receiver listens on.
const PORT: u16 = 5001;

/// The longest chunk the shared pattern serves in one slice (longer writes make
/// their own).
const MAX_CHUNK: usize = 256 * 1024;

/// The pattern repeats every this many bytes (odd, so that no write size lines up
/// with it).
const PATTERN_PERIOD: usize = (1 << 20) + 7;

/// Which stacks move the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stack {
    /// linerate, offloads on: GSO, GRO and checksums in the NIC layer.
    LinerateOn,
    /// linerate, offloads off: MSS-sized segments, checksums in the engine.
    LinerateOff,
    /// linerate, offloads on, over memory ports that have them (checksum, TSO and
    /// LRO, as veth or a virtio NIC with host offloads): super-frames cross the
    /// link whole, as they do between Linux network namespaces.
    LinerateHw,
    /// smoltcp 0.14 on both ends.
    Smoltcp,
    /// [`Stack::LinerateHw`] with linerate's zero-copy socket calls: the writer
    /// hands over slices of its (reference-counted) buffer with `tcp_send_bytes`,
    /// the reader checks the received bytes where they lie with `tcp_recv_with`.
    LinerateHwZeroCopy,
    /// smoltcp with its lending receive (`recv` with a closure, no copy out);
    /// sends copy (`send_slice`), as smoltcp has no way to take a buffer over.
    SmoltcpLending,
}

impl Stack {
    /// Every stack, in report order.
    pub const ALL: [Stack; 4] = [
        Stack::LinerateOn,
        Stack::LinerateOff,
        Stack::Smoltcp,
        Stack::LinerateHw,
    ];

    /// The zero-copy comparison: each stack with its least-copying socket calls.
    pub const ZERO_COPY: [Stack; 2] = [Stack::LinerateHwZeroCopy, Stack::SmoltcpLending];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Stack::LinerateOn => "linerate-on",
            Stack::LinerateOff => "linerate-off",
            Stack::LinerateHw => "linerate-hw",
            Stack::LinerateHwZeroCopy => "linerate-hw-zc",
            Stack::SmoltcpLending => "smoltcp-lend",
            Stack::Smoltcp => "smoltcp",
        }
    }
}

/// What a transfer measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Application bytes moved (and checked).
    pub bytes: u64,
    /// Wall-clock time, connection set-up included.
    pub wall: Duration,
    /// Thread CPU time (user plus system) over the same span.
    pub cpu: CpuTime,
    /// Frames that crossed the wire, both directions.
    pub wire_frames: u64,
    /// Frames the receiving stack processed, both directions (after GRO).
    pub stack_frames: u64,
    /// Idle time skipped by jumping to timers.
    pub skipped: Duration,
    /// TCP super-segments the engines sent as headers plus references to
    /// their send buffers (`tcp_out_by_ref`); 0 for smoltcp.
    pub by_ref: u64,
    /// TCP segments the engines took with their payload as a chain of
    /// references (`rx_chained`); 0 for smoltcp.
    pub chained: u64,
}

impl Measurement {
    /// Goodput in Gbit/s of wall time.
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.wall.as_secs_f64().max(1e-9) / 1e9
    }

    /// CPU seconds per gigabyte (10^9 bytes) moved.
    pub fn cpu_s_per_gb(&self) -> f64 {
        self.cpu.total().as_secs_f64() / (self.bytes as f64 / 1e9).max(1e-12)
    }
}

/// Why a transfer failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BulkError {
    /// A NIC refused a frame.
    Nic(NicError),
    /// A socket call failed.
    Socket(String),
    /// Writes of this size are not supported (0, or over 1 MiB).
    WriteSize(usize),
    /// The bytes read differ from the bytes written.
    Corrupt {
        /// Offset in the stream of the first chunk that differs.
        offset: u64,
    },
    /// Nothing moved for too long (a stall or a deadlock in the driver).
    Stalled {
        /// Bytes received by then.
        received: u64,
    },
}

impl fmt::Display for BulkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BulkError::Nic(e) => write!(f, "NIC: {e}"),
            BulkError::Socket(e) => write!(f, "socket: {e}"),
            BulkError::WriteSize(w) => write!(f, "write size {w} not supported (1 B to 1 MiB)"),
            BulkError::Corrupt { offset } => {
                write!(
                    f,
                    "received data differs from sent data near offset {offset}"
                )
            }
            BulkError::Stalled { received } => {
                write!(f, "transfer stalled after {received} bytes")
            }
        }
    }
}

impl std::error::Error for BulkError {}

impl From<NicError> for BulkError {
    fn from(e: NicError) -> Self {
        BulkError::Nic(e)
    }
}

fn socket_error(e: impl fmt::Display) -> BulkError {
    BulkError::Socket(e.to_string())
}

/// Moves `total` bytes from one `stack` to another in `write`-byte writes and
/// measures it. Every byte received is compared with the byte sent.
pub fn transfer(stack: Stack, write: usize, total: u64) -> Result<Measurement, BulkError> {
    if write == 0 || write > PATTERN_PERIOD {
        return Err(BulkError::WriteSize(write));
    }
    let shared = shared_source();
    let own;
    let source = if write <= MAX_CHUNK {
        shared
    } else {
        own = Source::new(write);
        &own
    };
    match stack {
        Stack::LinerateOn => linerate(true, write, total, source),
        Stack::LinerateOff => linerate(false, write, total, source),
        Stack::LinerateHw => linerate_hw(write, total, source, Calls::Copy),
        Stack::LinerateHwZeroCopy => linerate_hw(write, total, source, Calls::ZeroCopy),
        Stack::Smoltcp => smoltcp(write, total, source, Calls::Copy),
        Stack::SmoltcpLending => smoltcp(write, total, source, Calls::ZeroCopy),
    }
}

/// The stream every transfer with writes up to [`MAX_CHUNK`] checks against.
fn shared_source() -> &'static Source {
    static SOURCE: std::sync::OnceLock<Source> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| Source::new(MAX_CHUNK))
}

/// The byte stream: a pseudo-random pattern of period [`PATTERN_PERIOD`], stored
/// with `max_len` bytes of overlap so that any chunk is one slice.
struct Source {
    bytes: Bytes,
}

impl Source {
    fn new(max_len: usize) -> Source {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut bytes: Vec<u8> = (0..PATTERN_PERIOD)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        bytes.extend_from_within(..max_len.clamp(READ_LEN, PATTERN_PERIOD));
        Source {
            bytes: Bytes::from(bytes),
        }
    }

    /// [`Source::chunk`] as a reference-counted slice (no copy).
    fn chunk_bytes(&self, at: u64, len: usize) -> Bytes {
        let start = (at % PATTERN_PERIOD as u64) as usize;
        let end = (start + len).min(self.bytes.len());
        self.bytes.slice(start.min(end)..end)
    }

    /// The `len` bytes at stream offset `at`.
    fn chunk(&self, at: u64, len: usize) -> &[u8] {
        let start = (at % PATTERN_PERIOD as u64) as usize;
        self.bytes.get(start..start + len).unwrap_or_default()
    }

    /// Checks `got`, read at stream offset `at` (any length: a lending read may
    /// hand over more than the source serves in one slice).
    fn check(&self, at: u64, got: &[u8]) -> Result<(), BulkError> {
        let mut at = at;
        for piece in got.chunks(READ_LEN) {
            if self.chunk(at, piece.len()) != piece {
                return Err(BulkError::Corrupt { offset: at });
            }
            at += piece.len() as u64;
        }
        Ok(())
    }
}

/// The clock: real time since the start, plus idle time skipped.
struct Clock {
    start: std::time::Instant,
    skipped: Duration,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: std::time::Instant::now(),
            skipped: Duration::ZERO,
        }
    }

    fn now(&self) -> Instant {
        let ns = (self.start.elapsed() + self.skipped).as_nanos();
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Nothing can happen before `next`: jump there.
    fn idle_until(&mut self, next: Option<Instant>) {
        let now = self.now();
        if let Some(next) = next
            && next > now
        {
            self.skipped += next.saturating_duration_since(now);
        }
    }
}

/// Give up when this much clock time passes with no byte received.
const STALL: Duration = Duration::from_secs(30);

/// One linerate host: its engine and its NIC (a memory port, or the
/// software-offload shim over one).
struct Host<N: Nic> {
    engine: Engine,
    nic: N,
    tx: Batch,
    rx: Batch,
    /// Frames handed to the engine.
    delivered: u64,
}

impl<N: Nic> Host<N> {
    fn new(i: u8, offloads: bool, mut nic: N) -> Host<N> {
        // The engine takes scatter-gather frames, chains included: where the
        // NIC can hand them up (the shim's frag-list GRO over a memory port),
        // received payloads are read where they arrived.
        nic.set_rx_sg(true);
        let mut cfg = Sim::host_config(i);
        cfg.offloads = offloads;
        cfg.mtu = nic.caps().mtu;
        cfg.tcp.send_buffer = SOCKET_BUFFER;
        cfg.tcp.recv_buffer = SOCKET_BUFFER;
        Host {
            engine: Engine::new(cfg, 0x5eed + u64::from(i)),
            nic,
            tx: Batch::with_capacity(256),
            rx: Batch::with_capacity(256),
            delivered: 0,
        }
    }

    /// Everything the engine has to send, into the NIC. Returns the frames the NIC
    /// took (super-segments count once).
    fn transmit(&mut self, now: Instant) -> Result<usize, BulkError> {
        let Host {
            engine, nic, tx, ..
        } = self;
        engine.poll_transmit_into(
            now,
            &mut PoolSink::new(nic.pool(), tx).with_frags(nic.tx_sg()),
        );
        let before = tx.len();
        if !tx.is_empty() {
            nic.transmit(0, tx)?;
        }
        Ok(before - tx.len())
    }

    /// Everything the NIC has received, into the engine; then any timer due.
    /// Returns the frames taken from the NIC (after GRO, with the shim).
    fn receive(&mut self, now: Instant) -> Result<usize, BulkError> {
        let mut taken = 0;
        loop {
            let n = self.nic.receive(0, &mut self.rx, 256)?;
            if n == 0 {
                break;
            }
            taken += n;
            self.engine.handle_frames(now, &mut self.rx);
        }
        self.delivered += taken as u64;
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        Ok(taken)
    }
}

/// The frames a NIC put on the wire: a memory port's own, or the backend's under
/// the shim (MTU-sized segments, not super-frames).
trait WireCount {
    fn wire_frames(&self) -> u64;
}

impl WireCount for MemNic {
    fn wire_frames(&self) -> u64 {
        packets(self, Counter::TxPackets)
    }
}

impl WireCount for Shim<MemNic> {
    fn wire_frames(&self) -> u64 {
        packets(self.backend(), Counter::TxPackets)
    }
}

fn memory_pair() -> (MemNic, MemNic) {
    memory::pair(PairConfig::new(NicCaps::plain(), NicCaps::plain()))
}

/// linerate over the shim (offloads on) or straight over the memory ports
/// (offloads off).
fn linerate(
    offloads: bool,
    write: usize,
    total: u64,
    source: &Source,
) -> Result<Measurement, BulkError> {
    let (a, b) = memory_pair();
    if offloads {
        let a = Shim::new(a, ShimConfig::all())?;
        let b = Shim::new(b, ShimConfig::all())?;
        linerate_over(
            Host::new(1, true, a),
            Host::new(2, true, b),
            write,
            total,
            source,
            Calls::Copy,
        )
    } else {
        linerate_over(
            Host::new(1, false, a),
            Host::new(2, false, b),
            write,
            total,
            source,
            Calls::Copy,
        )
    }
}

/// linerate with offloads on over ports that have them: the shim passes
/// super-frames and partial checksums through.
fn linerate_hw(
    write: usize,
    total: u64,
    source: &Source,
    calls: Calls,
) -> Result<Measurement, BulkError> {
    let (a, b) = memory::pair(PairConfig::new(NicCaps::full(), NicCaps::full()));
    let a = Shim::new(a, ShimConfig::all())?;
    let b = Shim::new(b, ShimConfig::all())?;
    linerate_over(
        Host::new(1, true, a),
        Host::new(2, true, b),
        write,
        total,
        source,
        calls,
    )
}

/// Which socket calls the applications use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calls {
    /// Copying: the writer's bytes are copied into the send buffer, the reader's
    /// into its own buffer.
    Copy,
    /// The least copying each stack offers (see [`Stack::LinerateHwZeroCopy`] and
    /// [`Stack::SmoltcpLending`]).
    ZeroCopy,
}

fn linerate_over<N: Nic + WireCount>(
    mut tx: Host<N>,
    mut rx: Host<N>,
    write: usize,
    total: u64,
    source: &Source,
    calls: Calls,
) -> Result<Measurement, BulkError> {
    let mut buf = vec![0u8; READ_LEN];
    let cpu0 = thread_cpu_time();
    let mut clock = Clock::new();

    let listener = rx.engine.tcp_listen(PORT).map_err(socket_error)?;
    let remote = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), PORT));
    let client = tx
        .engine
        .tcp_connect(clock.now(), remote)
        .map_err(socket_error)?;
    let (mut server, mut sent, mut got) = (None, 0u64, 0u64);
    let mut last_progress = clock.now();
    while got < total {
        let now = clock.now();
        let mut moved = 0;
        while sent < total {
            let len = write.min((total - sent) as usize);
            let r = match calls {
                Calls::Copy => tx.engine.tcp_send(client, source.chunk(sent, len)),
                Calls::ZeroCopy => tx
                    .engine
                    .tcp_send_bytes(client, source.chunk_bytes(sent, len)),
            };
            match r {
                Ok(n) if n > 0 => sent += n as u64,
                _ => break,
            }
        }
        moved += tx.transmit(now)?;
        moved += rx.receive(now)?;
        if server.is_none() {
            server = rx.engine.tcp_accept(listener).ok();
        }
        if let Some(s) = server {
            loop {
                let read = match calls {
                    Calls::Copy => rx.engine.tcp_recv(s, &mut buf).map(|n| {
                        buf.get(..n)
                            .map_or(Ok(()), |d| source.check(got, d))
                            .map(|()| n)
                    }),
                    Calls::ZeroCopy => {
                        let mut checked = Ok(());
                        let mut at = got;
                        rx.engine
                            .tcp_recv_with(s, |d| {
                                if checked.is_ok() {
                                    checked = source.check(at, d);
                                }
                                at += d.len() as u64;
                                d.len()
                            })
                            .map(|n| checked.map(|()| n))
                    }
                };
                let Ok(n) = read else { break };
                let n = n?;
                if n == 0 {
                    break;
                }
                got += n as u64;
                last_progress = now;
            }
        }
        moved += rx.transmit(now)?;
        moved += tx.receive(now)?;
        if moved == 0 {
            let next = [tx.engine.poll_timeout(), rx.engine.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            clock.idle_until(next);
            let now = clock.now();
            tx.engine.handle_timeout(now);
            rx.engine.handle_timeout(now);
        }
        if clock.now().saturating_duration_since(last_progress) > STALL {
            return Err(BulkError::Stalled { received: got });
        }
    }
    let wall = clock.start.elapsed();
    let cpu = thread_cpu_time().since(cpu0);
    let wire_frames = tx.nic.wire_frames() + rx.nic.wire_frames();
    Ok(Measurement {
        bytes: got,
        wall,
        cpu,
        wire_frames,
        stack_frames: tx.delivered + rx.delivered,
        skipped: clock.skipped,
        by_ref: tx.engine.counters().tcp_out_by_ref + rx.engine.counters().tcp_out_by_ref,
        chained: tx.engine.counters().rx_chained + rx.engine.counters().rx_chained,
    })
}

/// One smoltcp host: an interface with one TCP socket on a memory port.
struct SmolHost {
    port: SmolPort<MemNic>,
    iface: Interface,
    sockets: SocketSet<'static>,
    socket: smoltcp::iface::SocketHandle,
}

fn smol_time(t: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(i64::try_from(t.as_micros()).unwrap_or(i64::MAX))
}

impl SmolHost {
    fn new(i: u8, nic: MemNic, now: Instant) -> SmolHost {
        let mut port = SmolPort::new(nic);
        let mut cfg = SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress([
            0x02, 0, 0, 0, 0, i,
        ])));
        cfg.random_seed = u64::from(i);
        let mut iface = Interface::new(cfg, &mut port, smol_time(now));
        iface.update_ip_addrs(|a| {
            // Room for one address is always there (an empty heapless Vec).
            let _ = a.push(IpCidr::new(IpAddress::v4(10, 0, 0, i), 24));
        });
        let socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
            tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        );
        let mut sockets = SocketSet::new(vec![]);
        let socket = sockets.add(socket);
        SmolHost {
            port,
            iface,
            sockets,
            socket,
        }
    }

    fn sock(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.socket)
    }

    /// One poll of the interface: receive, process, send; then the frames out.
    fn poll(&mut self, now: Instant) -> Result<(), BulkError> {
        self.iface
            .poll(smol_time(now), &mut self.port, &mut self.sockets);
        self.port.flush();
        match self.port.take_error() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn next_timer(&mut self, now: Instant) -> Option<Instant> {
        self.iface
            .poll_delay(smol_time(now), &self.sockets)
            .map(|d| now + Duration::from_micros(d.total_micros()))
    }
}

fn packets(nic: &MemNic, counter: Counter) -> u64 {
    nic.counters().total(counter)
}

fn smoltcp(
    write: usize,
    total: u64,
    source: &Source,
    calls: Calls,
) -> Result<Measurement, BulkError> {
    let (a, b) = memory_pair();
    let mut buf = vec![0u8; READ_LEN];
    let mut tx = SmolHost::new(1, a, Instant::ZERO);
    let mut rx = SmolHost::new(2, b, Instant::ZERO);
    let cpu0 = thread_cpu_time();
    let mut clock = Clock::new();
    rx.sock().listen(PORT).map_err(socket_error)?;
    let cx = tx.iface.context();
    tx.sockets
        .get_mut::<tcp::Socket>(tx.socket)
        .connect(cx, (IpAddress::v4(10, 0, 0, 2), PORT), 40_000)
        .map_err(socket_error)?;
    let (mut sent, mut got) = (0u64, 0u64);
    let mut last_progress = clock.now();
    while got < total {
        let now = clock.now();
        let wire_before =
            packets(tx.port.nic(), Counter::TxPackets) + packets(rx.port.nic(), Counter::TxPackets);
        while sent < total && tx.sock().can_send() {
            let len = write.min((total - sent) as usize);
            match tx.sock().send_slice(source.chunk(sent, len)) {
                Ok(n) if n > 0 => sent += n as u64,
                Ok(_) => break,
                Err(e) => return Err(socket_error(e)),
            }
        }
        tx.poll(now)?;
        rx.poll(now)?;
        while rx.sock().can_recv() {
            let n = match calls {
                Calls::Copy => {
                    let n = rx.sock().recv_slice(&mut buf).map_err(socket_error)?;
                    source.check(got, buf.get(..n).unwrap_or_default())?;
                    n
                }
                Calls::ZeroCopy => {
                    let at = got;
                    rx.sock()
                        .recv(|d| (d.len(), source.check(at, d).map(|()| d.len())))
                        .map_err(socket_error)??
                }
            };
            if n == 0 {
                break;
            }
            got += n as u64;
            last_progress = now;
        }
        // The window the read opened, and ACKs, go out now.
        rx.poll(now)?;
        tx.poll(now)?;
        let wire_after =
            packets(tx.port.nic(), Counter::TxPackets) + packets(rx.port.nic(), Counter::TxPackets);
        if wire_after == wire_before {
            let next = [tx.next_timer(now), rx.next_timer(now)]
                .into_iter()
                .flatten()
                .min();
            clock.idle_until(next);
        }
        if clock.now().saturating_duration_since(last_progress) > STALL {
            return Err(BulkError::Stalled { received: got });
        }
    }
    let wall = clock.start.elapsed();
    let cpu = thread_cpu_time().since(cpu0);
    let wire_frames =
        packets(tx.port.nic(), Counter::TxPackets) + packets(rx.port.nic(), Counter::TxPackets);
    Ok(Measurement {
        bytes: got,
        wall,
        cpu,
        wire_frames,
        stack_frames: packets(tx.port.nic(), Counter::RxPackets)
            + packets(rx.port.nic(), Counter::RxPackets),
        skipped: clock.skipped,
        by_ref: 0,
        chained: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stack_moves_every_byte() {
        for stack in Stack::ALL.into_iter().chain(Stack::ZERO_COPY) {
            for write in [64, 1500, 64 * 1024] {
                let m = transfer(stack, write, 300_000)
                    .unwrap_or_else(|e| panic!("{} at {write}: {e}", stack.name()));
                assert_eq!(m.bytes, 300_000, "{}", stack.name());
                // 300 kB needs over 200 MSS-sized segments; with offloads in the
                // ports, 64 KiB writes cross as a few super-frames (and ACKs).
                if !matches!(stack, Stack::LinerateHw | Stack::LinerateHwZeroCopy) {
                    assert!(m.wire_frames > 200, "{}: {m:?}", stack.name());
                } else if write == 64 * 1024 {
                    assert!(m.wire_frames < 100, "{}: {m:?}", stack.name());
                }
            }
        }
    }

    #[test]
    fn offloads_on_coalesces() {
        let m = transfer(Stack::LinerateOn, 64 * 1024, 4 << 20).unwrap_or_else(|e| panic!("{e}"));
        assert!(m.stack_frames * 4 < m.wire_frames, "{m:?}");
    }

    #[test]
    fn corruption_is_noticed() {
        let s = Source::new(100);
        assert!(s.check(5, s.chunk(5, 50)).is_ok());
        assert!(s.check(6, s.chunk(5, 50)).is_err());
    }
}
