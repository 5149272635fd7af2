//! A layer-4 TCP load balancer on linerate with tokio: it accepts connections
//! on one port and hands each to the next of its backends in turn
//! (round-robin), copying bytes both ways until both sides have closed.
//!
//! ```text
//! # The kernel's side of the TAP: 10.0.0.1, with backends on 9001 and 9002.
//! sudo ip tuntap add dev lr0 mode tap
//! sudo ip addr add 10.0.0.1/24 dev lr0 && sudo ip link set lr0 up
//! sudo cargo run --example tcp_proxy -- --tap lr0 --ip 10.0.0.2 \
//!     --backend 10.0.0.1:9001 --backend 10.0.0.1:9002
//! curl http://10.0.0.2:8080/
//!
//! # No root: backends and clients of linerate's own on an in-memory wire.
//! cargo run --example tcp_proxy -- --memory
//! ```

use clap::Parser;
use linerate::nic::{MemNic, NicCaps, Tap, TapConfig};
use linerate::rt::{Handle, Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate::toe::Config;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A round-robin TCP load balancer on linerate.
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
    /// The port clients connect to.
    #[arg(long, default_value_t = 8080)]
    listen: u16,
    /// A backend (address:port); give the flag once per backend.
    #[arg(long = "backend", required_unless_present = "memory")]
    backends: Vec<SocketAddr>,
    /// Instead of a TAP: balance at 10.0.0.2 on an in-memory wire over three
    /// backends at 10.0.0.1, check which answers each client, and exit.
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
        return Ok(balance(rt.handle().clone(), args.listen, args.backends).await?);
    }
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let proxy = Runtime::start(a, RuntimeConfig::new(host([10, 0, 0, 2].into(), 2)))?;
    let peer = Runtime::start(b, RuntimeConfig::new(host([10, 0, 0, 1].into(), 1)))?;
    // Backend k reads a request to its end and answers with its name and size.
    let mut backends = Vec::new();
    for k in 0..3u16 {
        let listener = TcpListener::bind(peer.handle(), 9001 + k).await?;
        backends.push(SocketAddr::from(([10, 0, 0, 1], 9001 + k)));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut request = Vec::new();
                let _ = s.read_to_end(&mut request).await;
                let answer = format!("backend {k}: {} bytes", request.len());
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
    }
    tokio::spawn(balance(proxy.handle().clone(), args.listen, backends));
    for i in 0..6usize {
        let to = SocketAddr::from(([10, 0, 0, 2], args.listen));
        let mut s = TcpStream::connect(peer.handle(), to).await?;
        s.write_all(&vec![b'x'; 100_000 + i]).await?;
        s.shutdown().await?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).await?;
        assert_eq!(answer, format!("backend {}: {} bytes", i % 3, 100_000 + i));
    }
    println!("tcp_proxy: 6 connections spread over 3 backends in turn");
    Ok(())
}

/// Accepts on `port` and joins each connection to the next backend.
async fn balance(rt: Handle, port: u16, backends: Vec<SocketAddr>) -> std::io::Result<()> {
    let listener = TcpListener::bind(&rt, port).await?;
    println!(
        "tcp_proxy: listening on port {port}, {} backends",
        backends.len()
    );
    for backend in backends.into_iter().cycle() {
        let (mut client, peer) = listener.accept().await?;
        let rt = rt.clone();
        tokio::spawn(async move {
            let joined = match TcpStream::connect(&rt, backend).await {
                Ok(mut server) => tokio::io::copy_bidirectional(&mut client, &mut server).await,
                Err(e) => Err(e),
            };
            match joined {
                Ok((up, down)) => println!("tcp_proxy: {peer} -> {backend}: {up} up, {down} down"),
                Err(e) => println!("tcp_proxy: {peer} -> {backend}: {e}"),
            }
        });
    }
    Ok(())
}
