//! Bulk throughput through the tokio adaptor: two per-queue runtimes on a memory
//! pair, `STREAMS` streams each writing `MIB` MiB from client to server.
//!
//! `cargo run --release -p linerate-toe --example rt_throughput -- [queues] [streams] [MiB per stream]`
use linerate_nic::NicCaps;
use linerate_nic::memory::{self, Clock, PairConfig};
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<Vec<usize>, _>>()?;
    let queues = args.first().copied().unwrap_or(1);
    let streams = args.get(1).copied().unwrap_or(4);
    let mib = args.get(2).copied().unwrap_or(256);
    let caps = NicCaps {
        queues: queues as u16,
        ..NicCaps::full()
    };
    let (a, b) = memory::pair(PairConfig {
        clock: Clock::system(),
        ..PairConfig::new(caps, caps)
    });
    // The memory wire maps queue q to queue q, so every flow stays on the queue
    // it was opened on without steering.
    let client = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1)))?;
    let server = Runtime::start(b, RuntimeConfig::new(Sim::host_config(2)))?;
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let elapsed = tokio.block_on(async move {
        let listener = TcpListener::bind(&sh, 9000).await?;
        let sink = tokio::spawn(async move {
            let mut tasks = Vec::new();
            for _ in 0..streams {
                let (mut s, _) = listener.accept().await?;
                tasks.push(tokio::spawn(async move {
                    let mut buf = vec![0u8; 256 * 1024];
                    let mut total = 0usize;
                    loop {
                        let n = s.read(&mut buf).await?;
                        if n == 0 {
                            return io::Result::Ok(total);
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
        let start = Instant::now();
        let mut senders = Vec::new();
        for _ in 0..streams {
            let ch = ch.clone();
            senders.push(tokio::spawn(async move {
                let server = "10.0.0.2:9000".parse().map_err(io::Error::other)?;
                let mut s = TcpStream::connect(&ch, server).await?;
                let chunk = vec![0x5au8; 256 * 1024];
                for _ in 0..mib * 4 {
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
        let elapsed = start.elapsed();
        if received != (streams * mib) << 20 {
            return Err(io::Error::other(format!("received {received} bytes")));
        }
        for s in senders {
            s.await.map_err(io::Error::other)??;
        }
        io::Result::Ok(elapsed)
    })?;
    let bytes = (streams * mib) as f64 * 1048576.0;
    println!(
        "{queues} queue(s), {streams} stream(s), {} MiB in {:.3} s: {:.2} Gbit/s",
        streams * mib,
        elapsed.as_secs_f64(),
        bytes * 8.0 / elapsed.as_secs_f64() / 1e9
    );
    drop(tokio);
    client.shutdown()?;
    server.shutdown()?;
    Ok(())
}
