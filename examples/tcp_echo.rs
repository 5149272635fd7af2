//! A TCP echo server on linerate with tokio: a [`Runtime`] over a TAP
//! interface, a [`TcpListener`], one task per connection.
//!
//! ```text
//! # The kernel's side of the TAP: 10.0.0.1; linerate answers at 10.0.0.2.
//! sudo ip tuntap add dev lr0 mode tap
//! sudo ip addr add 10.0.0.1/24 dev lr0 && sudo ip link set lr0 up
//! sudo cargo run --example tcp_echo -- --tap lr0 --ip 10.0.0.2
//! echo hello | nc -q1 10.0.0.2 7
//!
//! # No root: a linerate client on an in-memory wire sends and checks.
//! cargo run --example tcp_echo -- --memory
//! ```

use clap::Parser;
use linerate::nic::{MemNic, NicCaps, Tap, TapConfig};
use linerate::rt::{Handle, Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate::toe::Config;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A TCP echo server on linerate.
#[derive(Parser)]
struct Args {
    /// The TAP interface to serve on (opened, or created if there is none).
    #[arg(long, default_value = "lr0")]
    tap: String,
    /// This host's IPv4 address on it.
    #[arg(long, default_value = "10.0.0.2")]
    ip: Ipv4Addr,
    /// The prefix length of that address.
    #[arg(long, default_value_t = 24)]
    prefix_len: u8,
    /// The port to listen on.
    #[arg(long, default_value_t = 7)]
    port: u16,
    /// Instead of a TAP: serve at 10.0.0.2 on an in-memory wire, echo a
    /// linerate client's bytes from 10.0.0.1, check them and exit.
    #[arg(long)]
    memory: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let host = |ip, last| Config::new([2, 0, 0, 0, 0, last]).with_ipv4(ip, args.prefix_len);
    if !args.memory {
        let tap = Tap::open(&TapConfig::new(&args.tap))?;
        let rt = Runtime::start(tap, RuntimeConfig::new(host(args.ip, 2)))?;
        return Ok(serve(rt.handle().clone(), args.port).await?);
    }
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let server = Runtime::start(a, RuntimeConfig::new(host([10, 0, 0, 2].into(), 2)))?;
    let client = Runtime::start(b, RuntimeConfig::new(host([10, 0, 0, 1].into(), 1)))?;
    tokio::spawn(serve(server.handle().clone(), args.port));
    let to = SocketAddr::from(([10, 0, 0, 2], args.port));
    let mut s = TcpStream::connect(client.handle(), to).await?;
    let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut r, mut w) = s.split();
    let (wrote, back) = tokio::join!(
        async { w.write_all(&sent).await.and(w.shutdown().await) },
        async {
            let mut back = Vec::new();
            r.read_to_end(&mut back).await.map(|_| back)
        }
    );
    wrote?;
    assert!(back? == sent, "the echo differs from what was sent");
    println!("tcp_echo: {} bytes echoed over the memory wire", sent.len());
    Ok(())
}

/// Accepts connections on `port` and echoes each on its own task.
async fn serve(rt: Handle, port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(&rt, port).await?;
    println!("tcp_echo: listening on port {port}");
    loop {
        let (mut stream, peer) = listener.accept().await?;
        tokio::spawn(async move {
            let (mut r, mut w) = stream.split();
            // Echo until the peer's FIN, then send ours.
            match tokio::io::copy(&mut r, &mut w).await {
                Ok(n) => println!("tcp_echo: {peer}: {n} bytes echoed"),
                Err(e) => println!("tcp_echo: {peer}: {e}"),
            }
            let _ = w.shutdown().await;
        });
    }
}
