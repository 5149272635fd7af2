//! The papers' experiment: N pairs of "virtual machines" (linerate engines) over
//! one partitioned port each side, through a hypervisor's software switch or
//! through virtual NICs.
//!
//! Two memory ports joined by a wire, with hardware offloads (super-frames cross
//! whole, as between two VIC or T5 adapters). Pair i is a client engine on side A
//! and a server engine on side B; each pair runs one bulk connection (the client
//! writes 64 KiB at a time) and one HTTP-like request/response connection (128-byte
//! request, 16 KiB response, one outstanding). Every engine ARPs for its peer at
//! the start (broadcasts cross both switches). All in one thread, round robin.
//!
//! * **vswitch**: each engine has a virtual port (a memory pair: the guest's side
//!   and the host's), and a learning bridge per side (the hypervisor's vSwitch, as
//!   an OVS PMD thread runs it) polls the N guest ports and the uplink, learns,
//!   looks up and forwards, keeping offloads. Frames from a guest are taken by
//!   reference; a frame into a guest is copied into a buffer of the guest's pool,
//!   as vhost-net copies into the guest's receive buffers (`vswitch-zc` skips that
//!   copy, an optimistic zero-copy vSwitch).
//! * **vnic**: each engine runs on a [`linerate::vnic::Vnic`] of its side's
//!   partition: steered by destination MAC straight to its queue, no hop.
//!
//! Each cell runs for its warm-up ([`WARMUP`] plus [`WARMUP_PER_PAIR`] per pair) after every connection is up, then measures for
//! [`SPAN`] the application bytes of all pairs (Gbit/s), the thread's CPU per
//! GB, and Jain's fairness index over the pairs' bytes.

use linerate::nic::memory::{self, Clock, PairConfig, PortConfig};
use linerate::nic::{Batch, Frame, MemNic, Nic, NicCaps, Shim, ShimConfig};
use linerate::toe::{Bytes, Config, Engine, Instant, PoolSink, SocketHandle};
use linerate::vnic::{Partition, PartitionConfig, VnicConfig};
use linerate_testkit::cpu::thread_cpu_time;
use std::collections::HashMap;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How long each cell measures, after set-up and warm-up.
pub const SPAN: Duration = Duration::from_millis(1000);

/// How long every connection runs before the measurement starts, plus
/// [`WARMUP_PER_PAIR`] per pair: slow start and receive-buffer auto-tuning take
/// the same number of round trips at any pair count, and on one thread a round
/// trip is a visit to every engine, so reaching the steady state takes longer
/// with more pairs (with a fixed 300 ms, 128 pairs are measured still ramping
/// up, below 16 pairs: `--vnic-only --pairs 128` against `--pairs 16`).
pub const WARMUP: Duration = Duration::from_millis(300);

/// Warm-up added per pair.
pub const WARMUP_PER_PAIR: Duration = Duration::from_millis(5);

/// The warm-up for `pairs` pairs, or `LINERATE_VNIC_WARMUP_MS` milliseconds.
fn warmup(pairs: usize) -> Duration {
    std::env::var("LINERATE_VNIC_WARMUP_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(
            WARMUP + WARMUP_PER_PAIR * pairs as u32,
            Duration::from_millis,
        )
}

/// [`SPAN`], or `LINERATE_VNIC_SPAN_MS` milliseconds (for profiling).
fn span() -> Duration {
    std::env::var("LINERATE_VNIC_SPAN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(SPAN, Duration::from_millis)
}

/// The pair counts of the papers' figure.
pub const PAIRS: [usize; 5] = [1, 16, 32, 48, 128];

/// Request and response sizes of the request/response connection.
const REQUEST: usize = 128;
const RESPONSE: usize = 16 * 1024;
const BULK_WRITE: usize = 64 * 1024;
const BULK_PORT: u16 = 5001;
const RR_PORT: u16 = 80;

/// Which path the pairs' traffic takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// A learning bridge per side, copying into the guest.
    Vswitch,
    /// The same without the copy into the guest.
    VswitchZeroCopy,
    /// Virtual NICs of a partition per side.
    Vnic,
}

impl Path {
    /// Every path, in report order.
    pub const ALL: [Path; 3] = [Path::Vswitch, Path::VswitchZeroCopy, Path::Vnic];

    /// The report's name.
    pub fn name(self) -> &'static str {
        match self {
            Path::Vswitch => "vswitch",
            Path::VswitchZeroCopy => "vswitch-zc",
            Path::Vnic => "vnic",
        }
    }
}

/// One cell.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Application bytes of each pair over the span.
    pub per_pair: Vec<u64>,
    /// Wall time measured.
    pub wall: Duration,
    /// Thread CPU over it.
    pub cpu: Duration,
    /// Frames dropped for full rings anywhere (NICs, wires, vNIC queues), and
    /// TCP retransmissions, over the whole run.
    pub drops: u64,
    /// TCP segments retransmitted, over the whole run.
    pub retrans: u64,
}

impl Cell {
    fn bytes(&self) -> u64 {
        self.per_pair.iter().sum()
    }

    /// Aggregate goodput.
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes() as f64 * 8.0 / self.wall.as_secs_f64().max(1e-9) / 1e9
    }

    /// CPU seconds per 10^9 application bytes.
    pub fn cpu_s_per_gb(&self) -> f64 {
        self.cpu.as_secs_f64() / (self.bytes() as f64 / 1e9).max(1e-12)
    }

    /// Jain's fairness index over the pairs: (sum x)^2 / (n sum x^2).
    pub fn fairness(&self) -> f64 {
        jain(&self.per_pair)
    }
}

/// Jain's index of `x` (1.0 when all are equal).
pub fn jain(x: &[u64]) -> f64 {
    let n = x.len() as f64;
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if sq == 0.0 { 0.0 } else { sum * sum / (n * sq) }
}

/// A learning bridge over ports: the hypervisor's software switch.
struct SoftSwitch {
    /// Port 0 is the uplink, the others the guests' host-side ports.
    ports: Vec<Box<dyn Nic>>,
    fdb: HashMap<[u8; 6], usize>,
    out: Vec<Batch>,
    scratch: Batch,
    /// Copy frames into the guest's buffers.
    copy: bool,
}

impl SoftSwitch {
    fn new(ports: Vec<Box<dyn Nic>>, copy: bool) -> SoftSwitch {
        let out = ports.iter().map(|_| Batch::new()).collect();
        SoftSwitch {
            ports,
            fdb: HashMap::new(),
            out,
            scratch: Batch::new(),
            copy,
        }
    }

    /// One poll of every port: learn, look up, forward. Returns frames moved.
    fn step(&mut self) -> Result<usize, Box<dyn Error>> {
        let mut moved = 0;
        for i in 0..self.ports.len() {
            let Some(port) = self.ports.get_mut(i) else {
                continue;
            };
            let n = port.receive(0, &mut self.scratch, 64)?;
            moved += n;
            for frame in self.scratch.drain(..) {
                let b = frame.bytes();
                let (Some(dst), Some(src)) = (b.get(0..6), b.get(6..12)) else {
                    continue;
                };
                let (Ok(dst), Ok(src)) = (<[u8; 6]>::try_from(dst), <[u8; 6]>::try_from(src))
                else {
                    continue;
                };
                if src[0] & 1 == 0 {
                    self.fdb.insert(src, i);
                }
                match self.fdb.get(&dst) {
                    Some(&t) if dst[0] & 1 == 0 => {
                        if t != i {
                            push(&mut self.out, &self.ports, t, frame, self.copy);
                        }
                    }
                    _ => {
                        for t in (0..self.ports.len()).filter(|&t| t != i) {
                            let copy = Frame::new(frame.buf.clone(), frame.meta);
                            push(&mut self.out, &self.ports, t, copy, self.copy);
                        }
                    }
                }
            }
        }
        for (port, out) in self.ports.iter_mut().zip(self.out.iter_mut()) {
            while !out.is_empty() {
                if port.transmit(0, out)? == 0 {
                    break;
                }
            }
        }
        Ok(moved)
    }
}

/// Queues `frame` for port `t`: into a guest (t > 0) as a copy in the guest's
/// buffer when `copy`.
fn push(out: &mut [Batch], ports: &[Box<dyn Nic>], t: usize, frame: Frame, copy: bool) {
    let frame = match ports.get(t) {
        Some(p) if copy && t > 0 => Frame::new(p.pool().alloc_from(frame.bytes()), frame.meta),
        _ => frame,
    };
    if let Some(o) = out.get_mut(t) {
        o.push(frame);
    }
}

/// One engine and its NIC.
struct Host {
    engine: Engine,
    nic: Box<dyn Nic>,
    tx: Batch,
    rx: Batch,
}

impl Host {
    fn new(cfg: Config, seed: u64, nic: Box<dyn Nic>) -> Host {
        Host {
            engine: Engine::new(cfg, seed),
            nic,
            tx: Batch::with_capacity(256),
            rx: Batch::with_capacity(256),
        }
    }

    fn step(&mut self, now: Instant) -> Result<usize, Box<dyn Error>> {
        let mut moved = 0;
        loop {
            let n = self.nic.receive(0, &mut self.rx, 256)?;
            if n == 0 {
                break;
            }
            moved += n;
            self.engine.handle_frames(now, &mut self.rx);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        self.engine.poll_transmit_into(
            now,
            &mut PoolSink::new(self.nic.pool(), &mut self.tx).with_frags(self.nic.tx_sg()),
        );
        if !self.tx.is_empty() {
            let before = self.tx.len();
            let _ = self.nic.transmit(0, &mut self.tx);
            moved += before - self.tx.len();
            self.tx.clear();
        }
        Ok(moved)
    }
}

/// One pair: the engines and their connections' state.
struct Pair {
    client: Host,
    server: Host,
    bulk: Option<(SocketHandle, Option<SocketHandle>)>,
    rr: Option<(SocketHandle, Option<SocketHandle>)>,
    listeners: [linerate::toe::ListenerHandle; 2],
    /// Bytes of the current request the server has read, of the response the
    /// client has read; whether a request is outstanding.
    req_got: usize,
    resp_got: usize,
    resp_left: usize,
    outstanding: bool,
    /// Application bytes delivered (both connections).
    bytes: u64,
}

fn config(mac: [u8; 6], ip: Ipv4Addr, mtu: u16) -> Config {
    let mut c = Config::new(mac).with_ipv4(ip, 16);
    c.offloads = true;
    c.mtu = mtu;
    let buf = std::env::var("LINERATE_VNIC_BUF_KIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 10;
    c.tcp.send_buffer = buf;
    c.tcp.recv_buffer = buf;
    c
}

fn addr(side: u8, i: usize) -> ([u8; 6], Ipv4Addr) {
    let (hi, lo) = ((i >> 8) as u8, i as u8);
    (
        [0x02, 0, side, 0, hi, lo],
        Ipv4Addr::new(10, side, hi, lo.wrapping_add(1)),
    )
}

impl Pair {
    fn new(i: usize, client: Box<dyn Nic>, server: Box<dyn Nic>) -> Result<Pair, Box<dyn Error>> {
        let mtu = client.caps().mtu;
        let (cm, cip) = addr(1, i);
        let (sm, sip) = addr(2, i);
        let client = Host::new(config(cm, cip, mtu), 1 + 2 * i as u64, client);
        let mut server = Host::new(config(sm, sip, mtu), 2 + 2 * i as u64, server);
        let listeners = [
            server.engine.tcp_listen(BULK_PORT)?,
            server.engine.tcp_listen(RR_PORT)?,
        ];
        let _ = sip;
        Ok(Pair {
            client,
            server,
            bulk: None,
            rr: None,
            listeners,
            req_got: 0,
            resp_got: 0,
            resp_left: 0,
            outstanding: false,
            bytes: 0,
        })
    }

    fn server_ip(i: usize) -> Ipv4Addr {
        addr(2, i).1
    }

    fn connect(&mut self, i: usize, now: Instant) -> Result<(), Box<dyn Error>> {
        let ip = Pair::server_ip(i);
        let b = self
            .client
            .engine
            .tcp_connect(now, SocketAddr::from((ip, BULK_PORT)))?;
        let r = self
            .client
            .engine
            .tcp_connect(now, SocketAddr::from((ip, RR_PORT)))?;
        self.bulk = Some((b, None));
        self.rr = Some((r, None));
        Ok(())
    }

    fn up(&self) -> bool {
        matches!(self.bulk, Some((_, Some(_)))) && matches!(self.rr, Some((_, Some(_))))
    }

    /// The applications' work, then the engines'.
    fn step(
        &mut self,
        now: Instant,
        data: &[u8],
        bulk: &Bytes,
        sink: &mut [u8],
    ) -> Result<usize, Box<dyn Error>> {
        let mut moved = self.client.step(now)? + self.server.step(now)?;
        if let Some((c, s)) = &mut self.bulk {
            if s.is_none() {
                *s = self.server.engine.tcp_accept(self.listeners[0]).ok();
            }
            if let Some(s) = *s {
                // The least-copying calls (the send buffer keeps a reference to
                // the shared block; the reader looks at the received bytes in
                // place), so what is measured is the path, not memcpy.
                while let Ok(n) = self.client.engine.tcp_send_bytes(*c, bulk.clone()) {
                    if n < bulk.len() {
                        break;
                    }
                }
                while let Ok(n) = self.server.engine.tcp_recv_with(s, |d| d.len()) {
                    if n == 0 {
                        break;
                    }
                    self.bytes += n as u64;
                    moved += 1;
                }
            }
        }
        if let Some((c, s)) = &mut self.rr {
            if s.is_none() {
                *s = self.server.engine.tcp_accept(self.listeners[1]).ok();
            }
            if let Some(s) = *s {
                let c = *c;
                if !self.outstanding {
                    let req = data.get(..REQUEST).unwrap_or_default();
                    if self.client.engine.tcp_send(c, req)? == REQUEST {
                        self.outstanding = true;
                    }
                }
                while let Ok(n) = self.server.engine.tcp_recv(s, sink) {
                    if n == 0 {
                        break;
                    }
                    self.req_got += n;
                    self.bytes += n as u64;
                    while self.req_got >= REQUEST {
                        self.req_got -= REQUEST;
                        self.resp_left += RESPONSE;
                    }
                }
                while self.resp_left > 0 {
                    let chunk = data
                        .get(..self.resp_left.min(data.len()))
                        .unwrap_or_default();
                    match self.server.engine.tcp_send(s, chunk) {
                        Ok(n) if n > 0 => self.resp_left -= n,
                        _ => break,
                    }
                }
                while let Ok(n) = self.client.engine.tcp_recv(c, sink) {
                    if n == 0 {
                        break;
                    }
                    self.resp_got += n;
                    self.bytes += n as u64;
                    moved += 1;
                    if self.resp_got >= RESPONSE {
                        self.resp_got -= RESPONSE;
                        self.outstanding = false;
                    }
                }
            }
        }
        Ok(moved)
    }

    fn next_timer(&self) -> Option<Instant> {
        [
            self.client.engine.poll_timeout(),
            self.server.engine.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// The wire between the two sides: ports with hardware offloads, their rings and
/// buffer pools sized for `tenants` (as the guests' ports together are in the
/// vswitch path: a pool and rings each).
fn ports(tenants: usize) -> (MemNic, MemNic) {
    let mut port = PortConfig::new(NicCaps::full());
    port.ring_len *= tenants;
    port.pool.max_free *= tenants;
    memory::pair(PairConfig {
        clock: Clock::system(),
        a: port,
        b: port,
        ..PairConfig::new(NicCaps::full(), NicCaps::full())
    })
}

fn shim(n: MemNic) -> Result<Shim<MemNic>, Box<dyn Error>> {
    Ok(Shim::new(n, ShimConfig::all())?)
}

/// Builds `pairs` pairs over `path` and runs one cell.
pub fn measure(pairs: usize, path: Path) -> Result<Cell, Box<dyn Error>> {
    let (a, b) = ports(pairs);
    let mut switches = Vec::new();
    let mut pair_list = Vec::with_capacity(pairs);
    match path {
        Path::Vnic => {
            let pa = Partition::new(shim(a)?, PartitionConfig::default());
            let pb = Partition::new(shim(b)?, PartitionConfig::default());
            for i in 0..pairs {
                let ca = pa.add(vnic_config(addr(1, i).0))?;
                let cb = pb.add(vnic_config(addr(2, i).0))?;
                pair_list.push(Pair::new(i, Box::new(ca), Box::new(cb))?);
            }
        }
        Path::Vswitch | Path::VswitchZeroCopy => {
            let copy = path == Path::Vswitch;
            let mut side = |uplink: MemNic| -> Result<Vec<Box<dyn Nic>>, Box<dyn Error>> {
                let mut host_ports: Vec<Box<dyn Nic>> = vec![Box::new(uplink)];
                let mut guests: Vec<Box<dyn Nic>> = Vec::new();
                for _ in 0..pairs {
                    let (guest, host) = ports(1);
                    host_ports.push(Box::new(host));
                    guests.push(Box::new(shim(guest)?));
                }
                switches.push(SoftSwitch::new(host_ports, copy));
                Ok(guests)
            };
            let ga = side(a)?;
            let gb = side(b)?;
            for (i, (ca, cb)) in ga.into_iter().zip(gb).enumerate() {
                pair_list.push(Pair::new(i, ca, cb)?);
            }
        }
    }
    run(pair_list, switches, pairs, path)
}

fn vnic_config(mac: [u8; 6]) -> VnicConfig {
    VnicConfig {
        ring_len: 4096,
        ..VnicConfig::new(mac)
    }
}

fn run(
    mut pairs: Vec<Pair>,
    mut switches: Vec<SoftSwitch>,
    n: usize,
    path: Path,
) -> Result<Cell, Box<dyn Error>> {
    let data = vec![0x5au8; BULK_WRITE];
    let bulk = Bytes::from(data.clone());
    let mut sink = vec![0u8; 256 * 1024];
    let start = std::time::Instant::now();
    let mut skipped = Duration::ZERO;
    let now = |skipped: Duration| {
        Instant::from_nanos(u64::try_from((start.elapsed() + skipped).as_nanos()).unwrap_or(0))
    };
    for (i, p) in pairs.iter_mut().enumerate() {
        p.connect(i, now(skipped))?;
    }
    let mut measuring: Option<(std::time::Instant, Duration, Vec<u64>)> = None;
    let mut up_at: Option<std::time::Instant> = None;
    loop {
        let t = now(skipped);
        let mut moved = 0;
        for p in pairs.iter_mut() {
            moved += p.step(t, &data, &bulk, &mut sink)?;
        }
        for s in switches.iter_mut() {
            moved += s.step()?;
        }
        if moved == 0 {
            let next = pairs.iter().filter_map(Pair::next_timer).min();
            if let Some(next) = next {
                skipped += next.saturating_duration_since(now(skipped));
            }
        }
        match &measuring {
            None if up_at.is_none() && pairs.iter().all(Pair::up) => {
                up_at = Some(std::time::Instant::now());
            }
            None if up_at.is_some_and(|t| t.elapsed() >= warmup(n)) => {
                let base = pairs.iter().map(|p| p.bytes).collect();
                measuring = Some((std::time::Instant::now(), thread_cpu_time().total(), base));
            }
            None if start.elapsed() > Duration::from_secs(30) => {
                return Err(format!("{n} pairs over {}: connections not up", path.name()).into());
            }
            Some((t0, _, _)) if t0.elapsed() >= span() => break,
            _ => {}
        }
    }
    let Some((t0, cpu0, base)) = measuring else {
        return Err("not measured".into());
    };
    let wall = t0.elapsed();
    let cpu = thread_cpu_time().total().saturating_sub(cpu0);
    let per_pair = pairs.iter().zip(base).map(|(p, b)| p.bytes - b).collect();
    let ring = linerate::nic::Counter::RxDroppedRingFull;
    let drops = pairs
        .iter()
        .flat_map(|p| [&p.client, &p.server])
        .map(|h| h.nic.counters().total(ring))
        .chain(
            switches
                .iter()
                .flat_map(|s| s.ports.iter().map(|p| p.counters().total(ring))),
        )
        .sum();
    let retrans = pairs
        .iter()
        .flat_map(|p| [&p.client, &p.server])
        .map(|h| h.engine.counters().tcp_retrans_segs)
        .sum();
    Ok(Cell {
        per_pair,
        wall,
        cpu,
        drops,
        retrans,
    })
}

/// The section: every path at every pair count, a table, CSV rows and the
/// papers' ratios.
pub fn section(
    out: &mut crate::chart::Out,
    quick: bool,
    only: Option<usize>,
    rounds: usize,
) -> Result<(), Box<dyn Error>> {
    let one = only.map(|n| [n]);
    let counts: &[usize] = match &one {
        Some(n) => n,
        None if quick => &[1, 16, 48],
        None => &PAIRS,
    };
    println!();
    println!(
        "Virtual NICs against a software switch (the VIC paper's experiment): N pairs of engines, bulk + request/response, best of {rounds} runs of {} ms per cell",
        span().as_millis()
    );
    println!(
        "{:>6} | {:>10} {:>8} {:>7} | {:>10} {:>8} {:>7} | {:>10} {:>8} {:>7} | {:>8} {:>8}",
        "pairs",
        "vswitch",
        "CPU s/GB",
        "Jain",
        "vswitch-zc",
        "CPU s/GB",
        "Jain",
        "vnic",
        "CPU s/GB",
        "Jain",
        "vnic/vsw",
        "vnic/zc"
    );
    let mut drops = Vec::new();
    for &n in counts {
        let mut cells = Vec::new();
        for path in Path::ALL {
            if std::env::var("LINERATE_VNIC_PATH").is_ok_and(|p| p != path.name()) {
                // Profiling one path: the others are skipped (their cells read 0).
                cells.push(Cell {
                    per_pair: vec![0],
                    wall: SPAN,
                    cpu: Duration::ZERO,
                    drops: 0,
                    retrans: 0,
                });
                continue;
            }
            // The best of `rounds` runs (the machine may be shared).
            let mut c = measure(n, path)?;
            for _ in 1..rounds {
                let again = measure(n, path)?;
                if again.gbit_per_s() > c.gbit_per_s() {
                    c = again;
                }
            }
            out.row(crate::chart::Row {
                experiment: "vnic_pairs".into(),
                direction: "bi",
                stack: path.name().into(),
                write: n,
                gbit_per_s: c.gbit_per_s(),
                cpu_s_per_gb: c.cpu_s_per_gb(),
            });
            cells.push(c);
        }
        let [v, z, x] = [&cells[0], &cells[1], &cells[2]];
        drops.push(format!(
            "{n:>4} pairs: ring drops / TCP retransmissions: vswitch {} / {}, vswitch-zc {} / {}, vnic {} / {}",
            v.drops, v.retrans, z.drops, z.retrans, x.drops, x.retrans
        ));
        println!(
            "{:>6} | {:>10.2} {:>8.3} {:>7.3} | {:>10.2} {:>8.3} {:>7.3} | {:>10.2} {:>8.3} {:>7.3} | {:>7.2}x {:>7.2}x",
            n,
            v.gbit_per_s(),
            v.cpu_s_per_gb(),
            v.fairness(),
            z.gbit_per_s(),
            z.cpu_s_per_gb(),
            z.fairness(),
            x.gbit_per_s(),
            x.cpu_s_per_gb(),
            x.fairness(),
            x.gbit_per_s() / v.gbit_per_s().max(1e-9),
            x.gbit_per_s() / z.gbit_per_s().max(1e-9),
        );
    }
    println!("(Gbit/s of application bytes, both directions, all pairs; CSV: write_bytes = pairs)");
    for c in &drops {
        println!("{c}");
    }
    Ok(())
}
