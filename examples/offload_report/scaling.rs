//! Shared-nothing scaling: linerate-rt's per-queue runtime at each end of a
//! memory pair with offload ports, one queue per end against two, several flows
//! through the tokio adaptor. One thread per queue and each flow on its queue
//! (the memory wire maps queue q to queue q; the client's runtime spreads
//! connects over its queues), so with two queues the work splits in two with
//! nothing shared per frame: CPU per byte should not move, and Gbit/s grows
//! with the cores there are.
//!
//! Two ways to run the flows' tasks, side by side: on a tokio runtime of two
//! workers (the adaptor: every batch of bytes crosses between a worker and a
//! queue thread, a sleep and a wake-up each way once six threads share two
//! cores), and on the queue threads themselves (`linerate_rt::local`: each
//! flow's task on its stream's queue, listeners per queue, nothing crosses
//! threads, and the tasks read and write their engine's buffers directly; one
//! thread per queue and per end).
//!
//! CPU is the whole process's (user plus system, all threads: both runtimes'
//! queue threads and, with the adaptor, the two tokio workers).

use linerate::nic::NicCaps;
use linerate::nic::memory::{self, Clock, PairConfig};
use linerate::rt::{Handle, Runtime, RuntimeConfig, TcpListener, TcpStream, local};
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

/// Where the flows' tasks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tasks {
    /// A tokio runtime of two workers, through the adaptor.
    Tokio,
    /// The queue threads (`linerate_rt::local`), each flow on its queue.
    OnQueues,
}

impl Tasks {
    /// The label in the table and the CSV.
    pub fn label(self) -> &'static str {
        match self {
            Tasks::Tokio => "tokio",
            Tasks::OnQueues => "on queues",
        }
    }
}

/// One measurement of the runtimes.
#[derive(Debug, Clone, Copy)]
pub struct Scaled {
    /// Where the tasks ran.
    pub tasks: Tasks,
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
/// queues each, each flow writing `per_flow` bytes (a multiple of [`CHUNK`]),
/// their tasks run as `tasks` says.
pub fn measure(
    tasks: Tasks,
    queues: u16,
    flows: usize,
    per_flow: usize,
) -> Result<Scaled, Box<dyn Error>> {
    let caps = NicCaps {
        queues,
        ..NicCaps::full()
    };
    let (a, b) = memory::pair(PairConfig {
        clock: Clock::system(),
        ..PairConfig::new(caps, caps)
    });
    // Each queue thread owns its queue of the port (no lock between them).
    let cfg = |i: u8| RuntimeConfig::new(Sim::host_config(i));
    let client = Runtime::start_queues(a.split(), cfg(1))?;
    let server = Runtime::start_queues(b.split(), cfg(2))?;
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let chunks = per_flow.div_ceil(CHUNK);
    let before = process_cpu_time();
    let start = Instant::now();
    let received = match tasks {
        Tasks::Tokio => on_tokio(&ch, &sh, flows, chunks)?,
        Tasks::OnQueues => on_queues(&ch, &sh, flows, chunks)?,
    };
    let wall = start.elapsed();
    let cpu = process_cpu_time().since(before);
    let want = flows * chunks * CHUNK;
    if received != want {
        return Err(format!("{queues} queue(s): received {received} bytes of {want}").into());
    }
    let (mut polls, mut rx_frames) = (0, 0);
    for h in [&ch, &sh] {
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
        tasks,
        queues,
        bytes: received as u64,
        wall,
        cpu,
        polls,
        rx_frames,
    })
}

/// Reads a stream to its end, checking every byte; the count.
async fn sink(mut s: TcpStream) -> io::Result<usize> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0usize;
    loop {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(total);
        }
        if !all_fill(&buf[..n]) {
            return Err(io::Error::other("corrupted bytes"));
        }
        total += n;
    }
}

/// Writes `chunks` chunks and shuts down (the caller keeps the stream until
/// the peer has read everything: its FIN).
async fn source(s: &mut TcpStream, chunks: usize) -> io::Result<()> {
    let chunk = vec![FILL; CHUNK];
    for _ in 0..chunks {
        s.write_all(&chunk).await?;
    }
    s.shutdown().await
}

/// The flows' tasks on the queue threads: per queue of the server a listener
/// whose task spawns a reader per connection there; per flow a writer on the
/// client's queue `flow % queues`, connecting from that queue (the memory
/// wire keeps queue numbers, so the server sees it on the same queue).
fn on_queues(ch: &Handle, sh: &Handle, flows: usize, chunks: usize) -> io::Result<usize> {
    let wait = tokio::runtime::Builder::new_current_thread().build()?;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<io::Result<usize>>();
    for q in 0..sh.queues() {
        let bound = sh.spawn_on(q, move || async move {
            let rt = local::handle().ok_or_else(|| io::Error::other("not on a queue"))?;
            TcpListener::bind_on(&rt, q, 9000).await
        })?;
        let listener = wait.block_on(bound)??;
        let done = done_tx.clone();
        sh.spawn_on(q, move || async move {
            while let Ok((s, _)) = listener.accept().await {
                let done = done.clone();
                let _ = local::spawn(async move {
                    let _ = done.send(sink(s).await);
                });
            }
        })?;
    }
    let queues = ch.queues();
    let mut senders = Vec::new();
    for f in 0..flows {
        let q = f % queues;
        senders.push(ch.spawn_on(q, move || async move {
            let rt = local::handle().ok_or_else(|| io::Error::other("not on a queue"))?;
            let server = "10.0.0.2:9000".parse().map_err(io::Error::other)?;
            let mut s = TcpStream::connect_on(&rt, q, server).await?;
            source(&mut s, chunks).await?;
            let mut b = [0u8; 1];
            let _ = local::timeout(Duration::from_secs(5), s.read(&mut b)).await;
            io::Result::Ok(())
        })?);
    }
    let mut received = 0;
    for _ in 0..flows {
        received += done_rx
            .recv_timeout(Duration::from_secs(120))
            .map_err(io::Error::other)??;
    }
    for s in senders {
        wait.block_on(s)??;
    }
    Ok(received)
}

/// The flows' tasks on a tokio runtime of two workers, through the adaptor.
fn on_tokio(ch: &Handle, sh: &Handle, flows: usize, chunks: usize) -> io::Result<usize> {
    let (ch, sh) = (ch.clone(), sh.clone());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let received = tokio.block_on(async move {
        let listener = TcpListener::bind(&sh, 9000).await?;
        let sinks = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..flows {
                let (s, _) = listener.accept().await?;
                tasks.push(tokio::spawn(sink(s)));
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
                let server: std::net::SocketAddr =
                    "10.0.0.2:9000".parse().map_err(io::Error::other)?;
                let mut s = TcpStream::connect(&ch, server).await?;
                source(&mut s, chunks).await?;
                let mut b = [0u8; 1];
                let _ = tokio::time::timeout(Duration::from_secs(5), s.read(&mut b)).await;
                io::Result::Ok(())
            }));
        }
        let received = sinks.await.map_err(io::Error::other)??;
        for s in senders {
            s.await.map_err(io::Error::other)??;
        }
        io::Result::Ok(received)
    })?;
    drop(tokio);
    Ok(received)
}

/// The scaling table: 1 and 2 queues per end, the flows' tasks on tokio and
/// on the queue threads, best of `rounds` each (alternating, so all see the
/// same machine), `flows` flows of `per_flow` bytes. Returns the four rows:
/// tokio 1 and 2 queues, on queues 1 and 2.
pub fn run(flows: usize, per_flow: usize, rounds: usize) -> Result<[Scaled; 4], Box<dyn Error>> {
    println!();
    println!(
        "shared-nothing scaling: linerate-rt, one thread per queue at each end of a memory \
         pair with offload ports, {flows} flows of {} MiB, their tasks on a tokio runtime \
         (two workers, through the adaptor) or on the queue threads (linerate_rt::local); \
         CPU is the process's (all threads)",
        per_flow >> 20
    );
    const CELLS: [(Tasks, u16); 4] = [
        (Tasks::Tokio, 1),
        (Tasks::Tokio, 2),
        (Tasks::OnQueues, 1),
        (Tasks::OnQueues, 2),
    ];
    let mut best: [Option<Scaled>; 4] = [None; 4];
    for _ in 0..rounds.max(1) {
        for (slot, (tasks, queues)) in best.iter_mut().zip(CELLS) {
            let m = measure(tasks, queues, flows, per_flow)?;
            // The cheapest per byte: the run the machine disturbed least.
            if slot.is_none_or(|b| m.cpu_s_per_gb() < b.cpu_s_per_gb()) {
                *slot = Some(m);
            }
        }
    }
    let [Some(t1), Some(t2), Some(l1), Some(l2)] = best else {
        return Err("no measurement".into());
    };
    // User and system time apart: the data path runs in user space; the
    // kernel's part is the threads' sleeps and wake-ups, which grow when the
    // threads outnumber the cores.
    println!(
        "{:>9} | {:>6} | {:>8} | {:>9} | {:>10} | {:>10} | {:>9} | {:>10}",
        "tasks", "queues", "Gbit/s", "CPU s/GB", "user s/GB", "sys s/GB", "polls/MB", "frames/MB"
    );
    for m in [t1, t2, l1, l2] {
        println!(
            "{:>9} | {:>6} | {:>8.2} | {:>9.3} | {:>10.3} | {:>10.3} | {:>9.1} | {:>10.1}",
            m.tasks.label(),
            m.queues,
            m.gbit_per_s(),
            m.cpu_s_per_gb(),
            m.per_gb(m.cpu.user),
            m.per_gb(m.cpu.system),
            m.per_mb(m.polls),
            m.per_mb(m.rx_frames)
        );
    }
    for (one, two) in [(t1, t2), (l1, l2)] {
        println!(
            "{:>9}: 2 queues / 1 queue {:.2}x Gbit/s, {:.2}x CPU per byte (target: CPU within \
             10 %); user time alone {:.2}x, system time {:.2}x",
            one.tasks.label(),
            two.gbit_per_s() / one.gbit_per_s(),
            two.cpu_s_per_gb() / one.cpu_s_per_gb(),
            two.per_gb(two.cpu.user) / one.per_gb(one.cpu.user).max(1e-12),
            two.per_gb(two.cpu.system) / one.per_gb(one.cpu.system).max(1e-12)
        );
    }
    println!(
        "on queues / tokio: {:.2}x CPU per byte with 1 queue, {:.2}x with 2",
        l1.cpu_s_per_gb() / t1.cpu_s_per_gb(),
        l2.cpu_s_per_gb() / t2.cpu_s_per_gb()
    );
    Ok([t1, t2, l1, l2])
}

/// One cell, `TASKS:QUEUES` (`tokio:2`, `queues:1`), `repeat` times, a line
/// each: for profiling one configuration.
pub fn cell(
    spec: &str,
    flows: usize,
    per_flow: usize,
    repeat: usize,
) -> Result<(), Box<dyn Error>> {
    let (tasks, queues) = spec
        .split_once(':')
        .ok_or_else(|| format!("scaling cell {spec:?}: want TASKS:QUEUES"))?;
    let tasks = match tasks {
        "tokio" => Tasks::Tokio,
        "queues" => Tasks::OnQueues,
        other => return Err(format!("scaling cell: tasks {other:?}, want tokio or queues").into()),
    };
    let queues: u16 = queues.parse()?;
    for _ in 0..repeat {
        let m = measure(tasks, queues, flows, per_flow)?;
        println!(
            "{} {}q: {:.2} Gbit/s, {:.3} CPU s/GB (user {:.3}, sys {:.3}), {:.1} polls/MB",
            tasks.label(),
            queues,
            m.gbit_per_s(),
            m.cpu_s_per_gb(),
            m.per_gb(m.cpu.user),
            m.per_gb(m.cpu.system),
            m.per_mb(m.polls)
        );
    }
    Ok(())
}
