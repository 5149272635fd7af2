//! Shared set-up of the runtime tests: two hosts on a memory wire whose receiving
//! side steers frames by RSS, as a multi-queue NIC does.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_nic::{Batch, Counters, MemNic, Nic, NicCaps, NicError, Pool, Readiness, Recorder};
use linerate_rss::{HashConfig, IndirectionTable, RssKey, Steering};
use linerate_rt::{Runtime, RuntimeConfig};
use linerate_toe::sim::Sim;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A memory port whose transmitted frames arrive on the peer's queue that RSS
/// (`steering`, the same on both hosts) picks for them: the memory wire maps
/// transmit queue q to receive queue q, so the frame is sent on that queue.
pub struct RssWire {
    pub nic: MemNic,
    pub steering: Arc<Steering>,
    per_queue: Vec<Batch>,
}

impl RssWire {
    pub fn new(nic: MemNic, steering: Arc<Steering>) -> RssWire {
        let per_queue = (0..nic.queues()).map(|_| Batch::new()).collect();
        RssWire {
            nic,
            steering,
            per_queue,
        }
    }
}

impl Nic for RssWire {
    fn caps(&self) -> &NicCaps {
        self.nic.caps()
    }
    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        self.nic.receive(queue, batch, max)
    }
    fn transmit(&mut self, _queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let n = batch.len();
        for f in batch.drain(..) {
            let q = usize::from(self.steering.rx_queue_of_frame(f.bytes(), None));
            self.per_queue[q].push(f);
        }
        for (q, b) in self.per_queue.iter_mut().enumerate() {
            while !b.is_empty() {
                if self.nic.transmit(q, b)? == 0 {
                    b.clear();
                }
            }
        }
        Ok(n)
    }
    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        self.nic.readiness(queue)
    }
    fn counters(&self) -> &Counters {
        self.nic.counters()
    }
    fn pool(&self) -> &Pool {
        self.nic.pool()
    }
    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.nic.set_recorder(recorder);
    }
}

/// RSS over `queues` queues with the symmetric key: both directions of a flow
/// hash alike, so a connection has the same queue index on both hosts.
pub fn steering(queues: u16) -> Arc<Steering> {
    Arc::new(Steering::new(
        &RssKey::SYMMETRIC,
        IndirectionTable::new(queues).unwrap(),
        HashConfig::default(),
    ))
}

/// Two memory ports with every offload and `queues` queues, on the system clock.
pub fn mem_pair(queues: u16) -> (MemNic, MemNic) {
    let caps = NicCaps {
        queues,
        ..NicCaps::full()
    };
    memory::pair(PairConfig {
        clock: Clock::system(),
        ..PairConfig::new(caps, caps)
    })
}

/// Host 1 (client, 10.0.0.1 / fd00::1) and host 2 (server, 10.0.0.2 / fd00::2),
/// each a runtime over one port of an RSS wire, with the steering of the wire.
pub fn two_runtimes(queues: u16) -> (Runtime, Runtime) {
    two_runtimes_waiting(queues, RuntimeConfig::new(Sim::host_config(1)).max_wait)
}

/// As [`two_runtimes`], the queue threads sleeping up to `max_wait` when
/// nothing wakes them (a long one makes a lost wake-up a hang).
pub fn two_runtimes_waiting(queues: u16, max_wait: std::time::Duration) -> (Runtime, Runtime) {
    let s = steering(queues);
    let (a, b) = mem_pair(queues);
    let cfg = |i: u8| RuntimeConfig {
        steering: Some(Arc::clone(&s)),
        seed: u64::from(i),
        max_wait,
        ..RuntimeConfig::new(Sim::host_config(i))
    };
    let client = Runtime::start(RssWire::new(a, Arc::clone(&s)), cfg(1)).unwrap();
    let server = Runtime::start(RssWire::new(b, Arc::clone(&s)), cfg(2)).unwrap();
    (client, server)
}

/// A deterministic byte stream: `len` bytes for stream `id`.
pub fn pattern(id: u64, len: usize) -> Vec<u8> {
    let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// FNV-1a, 64 bits: enough to compare streams.
#[derive(Clone, Copy)]
pub struct Fnv(pub u64);

impl Fnv {
    pub fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    pub fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    pub fn of(data: &[u8]) -> u64 {
        let mut h = Fnv::new();
        h.update(data);
        h.0
    }
}

/// A future handed to a spawn function (tokio's or `linerate_rt::local`'s) by
/// the echo helpers below; the function must start it at once (not lazily in
/// the future it returns): the helpers read while it writes.
pub type Task<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// The server of the echo test: reads a 16-byte header (stream id, bytes to
/// send back), sends those bytes (uneven writes, from a task `spawn` starts)
/// while reading the client's until EOF, then a trailer: hash and length of
/// what it read.
pub async fn serve_echo<S, F>(s: linerate_rt::TcpStream, spawn: S)
where
    S: FnOnce(Task<linerate_rt::OwnedWriteHalf>) -> F,
    F: std::future::Future<Output = linerate_rt::OwnedWriteHalf>,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut r, mut w) = s.into_split();
    let mut hdr = [0u8; 16];
    r.read_exact(&mut hdr).await.unwrap();
    let id = u64::from_le_bytes(hdr[..8].try_into().unwrap());
    let down = u64::from_le_bytes(hdr[8..].try_into().unwrap()) as usize;
    let writer = spawn(Box::pin(async move {
        // Uneven writes, across ring boundaries.
        for chunk in pattern(id ^ 0xd0d0, down).chunks(5_003) {
            w.write_all(chunk).await.unwrap();
        }
        w
    }));
    let (mut h, mut total, mut buf) = (Fnv::new(), 0u64, vec![0u8; 16 * 1024]);
    loop {
        let n = r.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
    let mut w = writer.await;
    w.write_all(&h.0.to_le_bytes()).await.unwrap();
    w.write_all(&total.to_le_bytes()).await.unwrap();
    w.shutdown().await.unwrap();
}

/// The client of the echo test: sends `up` bytes (from a task `spawn`
/// starts), receives `down` bytes and the trailer, checks both directions byte
/// for byte (by hash).
pub async fn echo_client<S, F>(s: linerate_rt::TcpStream, id: u64, up: usize, down: usize, spawn: S)
where
    S: FnOnce(Task<()>) -> F,
    F: std::future::Future<Output = ()>,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut r, mut w) = s.into_split();
    let data = pattern(id, up);
    let sent = Fnv::of(&data);
    let writer = spawn(Box::pin(async move {
        let mut hdr = id.to_le_bytes().to_vec();
        hdr.extend_from_slice(&(down as u64).to_le_bytes());
        w.write_all(&hdr).await.unwrap();
        // Uneven write sizes, to cross ring boundaries.
        for chunk in data.chunks(7_001) {
            w.write_all(chunk).await.unwrap();
        }
        w.shutdown().await.unwrap();
    }));
    let mut got = Vec::new();
    r.read_to_end(&mut got).await.unwrap();
    writer.await;
    assert_eq!(got.len(), down + 16, "stream {id}");
    assert_eq!(
        Fnv::of(&got[..down]),
        Fnv::of(&pattern(id ^ 0xd0d0, down)),
        "stream {id}: bytes from the server"
    );
    let hash = u64::from_le_bytes(got[down..down + 8].try_into().unwrap());
    let len = u64::from_le_bytes(got[down + 8..].try_into().unwrap());
    assert_eq!(
        (hash, len),
        (sent, up as u64),
        "stream {id}: bytes at the server"
    );
}

/// A memory port with a switch: while `down`, every transmit fails with
/// [`NicError::LinkDown`] (the frame dropped, as a TAP that is not up does);
/// once `broken`, receive fails with an I/O error.
pub struct Switched {
    pub nic: MemNic,
    pub down: Arc<AtomicBool>,
    pub broken: Arc<AtomicBool>,
}

impl Nic for Switched {
    fn caps(&self) -> &NicCaps {
        self.nic.caps()
    }
    fn receive(&mut self, queue: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        if self.broken.load(Ordering::Acquire) {
            return Err(NicError::Io(std::io::Error::other(
                "injected device failure",
            )));
        }
        self.nic.receive(queue, batch, max)
    }
    fn transmit(&mut self, queue: usize, batch: &mut Batch) -> Result<usize, NicError> {
        if self.down.load(Ordering::Acquire) && !batch.is_empty() {
            batch.remove(0);
            return Err(NicError::LinkDown);
        }
        self.nic.transmit(queue, batch)
    }
    fn readiness(&self, queue: usize) -> Result<Readiness, NicError> {
        self.nic.readiness(queue)
    }
    fn counters(&self) -> &Counters {
        self.nic.counters()
    }
    fn pool(&self) -> &Pool {
        self.nic.pool()
    }
    fn set_recorder(&mut self, recorder: Option<Arc<dyn Recorder>>) {
        self.nic.set_recorder(recorder);
    }
}
