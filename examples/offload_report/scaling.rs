//! Shared-nothing scaling: linerate-rt's per-queue runtime at each end of a
//! memory pair with offload ports, one queue per end against two, several flows
//! through the tokio adaptor. One thread per queue and each flow on its queue
//! (the memory wire maps queue q to queue q; the client's runtime spreads
//! connects over its queues), so with two queues the work splits in two with
//! nothing shared per frame: CPU per byte should not move, and Gbit/s grows
//! with the cores there are.
//!
//! CPU is the whole process's (user plus system, all threads: both runtimes'
//! queue threads and the two tokio workers that run the flows).

use linerate::nic::NicCaps;
use linerate::nic::memory::{self, Clock, PairConfig};
use linerate::rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate::toe::sim::Sim;
use linerate_testkit::cpu::{CpuTime, process_cpu_time};
use std::error::Error;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bytes per write and per read.
const CHUNK: usize = 256 * 1024;

/// The byte every flow writes.
const FILL: u8 = 0x5a;

/// Whether every byte of `b` is [`FILL`]: compared a cache line at a time, which
/// the compiler turns into vector compares (a byte-at-a-time `any` with its early
/// exit does not vectorize and cost as much CPU as the runtimes it checks).
fn all_fill(b: &[u8]) -> bool {
    let (lines, tail) = b.as_chunks::<64>();
    lines
        .iter()
        .all(|l| l.iter().fold(0u8, |acc, &x| acc | (x ^ FILL)) == 0)
        && tail.iter().all(|&x| x == FILL)
}

/// Bytes each flow writes: 256 MiB, or 32 MiB for `--quick`.
pub fn per_flow(quick: bool) -> usize {
    if quick { 32 << 20 } else { 256 << 20 }
}

/// One measurement of the runtimes.
#[derive(Debug, Clone, Copy)]
pub struct Scaled {
    /// Queues per end.
    pub queues: u16,
    /// Bytes moved and checked.
    pub bytes: u64,
    /// Wall time of the transfer (connects included).
    pub wall: Duration,
    /// Process CPU over the same span.
    pub cpu: CpuTime,
    /// Rounds of the queue loops, both ends, all queues.
    pub polls: u64,
    /// Frames the queues received, both ends.
    pub rx_frames: u64,
}

impl Scaled {
    /// Goodput in Gbit/s of wall time.
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.wall.as_secs_f64().max(1e-9) / 1e9
    }

    /// Process CPU seconds per GB (10^9 bytes).
    pub fn cpu_s_per_gb(&self) -> f64 {
        self.per_gb(self.cpu.total())
    }

    /// `n` per MB (10^6 bytes) moved.
    fn per_mb(&self, n: u64) -> f64 {
        n as f64 / (self.bytes as f64 / 1e6).max(1e-12)
    }

    /// `t` per GB of the bytes moved.
    fn per_gb(&self, t: Duration) -> f64 {
        t.as_secs_f64() / (self.bytes as f64 / 1e9).max(1e-12)
    }
}

/// `flows` connections from a client runtime to a server runtime with `queues`
/// queues each, each flow writing `per_flow` bytes (a multiple of [`CHUNK`]).
pub fn measure(queues: u16, flows: usize, per_flow: usize) -> Result<Scaled, Box<dyn Error>> {
    let caps = NicCaps {
        queues,
        ..NicCaps::full()
    };
    let (a, b) = memory::pair(PairConfig {
        clock: Clock::system(),
        ..PairConfig::new(caps, caps)
    });
    // Each queue thread owns its queue of the port (no lock between them).
    let client = Runtime::start_queues(a.split(), RuntimeConfig::new(Sim::host_config(1)))?;
    let server = Runtime::start_queues(b.split(), RuntimeConfig::new(Sim::host_config(2)))?;
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let (cstats, sstats) = (ch.clone(), sh.clone());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let chunks = per_flow.div_ceil(CHUNK);
    let before = process_cpu_time();
    let start = Instant::now();
    let received = tokio.block_on(async move {
        let listener = TcpListener::bind(&sh, 9000).await?;
        let sink = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..flows {
                let (mut s, _) = listener.accept().await?;
                tasks.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; CHUNK];
                    let mut total = 0usize;
                    loop {
                        let n = s.read(&mut buf).await?;
                        if n == 0 {
                            return io::Result::Ok(total);
                        }
                        if !all_fill(&buf[..n]) {
                            return Err(io::Error::other("corrupted bytes"));
                        }
                        total += n;
                    }
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.map_err(io::Error::other)??;
            }
            io::Result::Ok(total)
        });
        let mut senders = Vec::new();
        for _ in 0..flows {
            let ch = ch.clone();
            senders.push(tokio::spawn(async move {
                let server = "10.0.0.2:9000".parse().map_err(io::Error::other)?;
                let mut s = TcpStream::connect(&ch, server).await?;
                let chunk = vec![FILL; CHUNK];
                for _ in 0..chunks {
                    s.write_all(&chunk).await?;
                }
                s.shutdown().await?;
                // Keep the stream until the peer has read everything.
                let mut b = [0u8; 1];
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await;
                io::Result::Ok(())
            }));
        }
        let received = sink.await.map_err(io::Error::other)??;
        for s in senders {
            s.await.map_err(io::Error::other)??;
        }
        io::Result::Ok(received)
    })?;
    let wall = start.elapsed();
    let cpu = process_cpu_time().since(before);
    let want = flows * chunks * CHUNK;
    if received != want {
        return Err(format!("{queues} queue(s): received {received} bytes of {want}").into());
    }
    drop(tokio);
    let (mut polls, mut rx_frames) = (0, 0);
    for h in [&cstats, &sstats] {
        for q in 0..h.queues() {
            if let Some(st) = h.stats(q) {
                polls += st.polls;
                rx_frames += st.rx_frames;
            }
        }
    }
    client.shutdown()?;
    server.shutdown()?;
    Ok(Scaled {
        queues,
        bytes: received as u64,
        wall,
        cpu,
        polls,
        rx_frames,
    })
}

/// The scaling table: 1 and 2 queues per end, best of `rounds` each
/// (alternating, so both see the same machine), `flows` flows of `per_flow`
/// bytes. Returns the two rows.
pub fn run(flows: usize, per_flow: usize, rounds: usize) -> Result<[Scaled; 2], Box<dyn Error>> {
    println!();
    println!(
        "shared-nothing scaling: linerate-rt, one thread per queue at each end of a memory \
         pair with offload ports, {flows} flows of {} MiB through the tokio adaptor; CPU is \
         the process's (all threads)",
        per_flow >> 20
    );
    let mut best: [Option<Scaled>; 2] = [None, None];
    for _ in 0..rounds.max(1) {
        for (slot, queues) in best.iter_mut().zip([1u16, 2]) {
            let m = measure(queues, flows, per_flow)?;
            // The cheapest per byte: the run the machine disturbed least.
            if slot.is_none_or(|b| m.cpu_s_per_gb() < b.cpu_s_per_gb()) {
                *slot = Some(m);
            }
        }
    }
    let [Some(one), Some(two)] = best else {
        return Err("no measurement".into());
    };
    // User and system time apart: the data path runs in user space; the
    // kernel's part is the threads' sleeps and wake-ups, which grow when the
    // threads (two queue threads per end with two queues, and the two tokio
    // workers) outnumber the cores.
    println!(
        "{:>7} | {:>8} | {:>9} | {:>10} | {:>10} | {:>9} | {:>10}",
        "queues", "Gbit/s", "CPU s/GB", "user s/GB", "sys s/GB", "polls/MB", "frames/MB"
    );
    for m in [one, two] {
        println!(
            "{:>7} | {:>8.2} | {:>9.3} | {:>10.3} | {:>10.3} | {:>9.1} | {:>10.1}",
            m.queues,
            m.gbit_per_s(),
            m.cpu_s_per_gb(),
            m.per_gb(m.cpu.user),
            m.per_gb(m.cpu.system),
            m.per_mb(m.polls),
            m.per_mb(m.rx_frames)
        );
    }
    println!(
        "2 queues / 1 queue: {:.2}x Gbit/s, {:.2}x CPU per byte (target: CPU within 10 %); \
         user time alone {:.2}x, system time {:.2}x",
        two.gbit_per_s() / one.gbit_per_s(),
        two.cpu_s_per_gb() / one.cpu_s_per_gb(),
        two.per_gb(two.cpu.user) / one.per_gb(one.cpu.user).max(1e-12),
        two.per_gb(two.cpu.system) / one.per_gb(one.cpu.system).max(1e-12)
    );
    Ok([one, two])
}
