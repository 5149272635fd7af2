//! A UDP echo server on linerate with tokio: a [`UdpSocket`] on a [`Runtime`]
//! over a TAP interface sends every datagram back to where it came from.
//!
//! ```text
//! # The kernel's side of the TAP: 10.0.0.1; linerate answers at 10.0.0.2.
//! sudo ip tuntap add dev lr0 mode tap
//! sudo ip addr add 10.0.0.1/24 dev lr0 && sudo ip link set lr0 up
//! sudo cargo run --example udp_echo -- --tap lr0 --ip 10.0.0.2
//! echo hello | nc -u -q1 10.0.0.2 7
//!
//! # No root: a linerate client on an in-memory wire sends and checks.
//! cargo run --example udp_echo -- --memory
//! ```

use clap::Parser;
use linerate::nic::{MemNic, NicCaps, Tap, TapConfig};
use linerate::rt::{Runtime, RuntimeConfig, UdpSocket};
use linerate::toe::Config;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};

/// A UDP echo server on linerate.
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
    /// linerate client's datagrams from 10.0.0.1, check them and exit.
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
        let sock = UdpSocket::bind(rt.handle(), SocketAddr::from((args.ip, args.port))).await?;
        return Ok(serve(sock).await?);
    }
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let server = Runtime::start(a, RuntimeConfig::new(host([10, 0, 0, 2].into(), 2)))?;
    let client = Runtime::start(b, RuntimeConfig::new(host([10, 0, 0, 1].into(), 1)))?;
    let to = SocketAddr::from(([10, 0, 0, 2], args.port));
    tokio::spawn(serve(UdpSocket::bind(server.handle(), to).await?));
    let sock = UdpSocket::bind(client.handle(), "10.0.0.1:0".parse()?).await?;
    let mut buf = vec![0u8; 2048];
    // The memory wire loses nothing: every datagram must come back.
    let wait = std::time::Duration::from_secs(5);
    for i in 0..100u32 {
        let sent = format!("datagram {i} ").repeat(1 + i as usize % 50);
        sock.send_to(sent.as_bytes(), to).await?;
        let (n, from) = tokio::time::timeout(wait, sock.recv_from(&mut buf)).await??;
        assert_eq!((&buf[..n], from), (sent.as_bytes(), to));
    }
    println!("udp_echo: 100 datagrams echoed over the memory wire");
    Ok(())
}

/// Sends every datagram back to its source.
async fn serve(sock: UdpSocket) -> std::io::Result<()> {
    println!("udp_echo: listening on {}", sock.local_addr());
    let mut buf = vec![0u8; 65536];
    loop {
        let (n, peer) = sock.recv_from(&mut buf).await?;
        sock.send_to(&buf[..n], peer).await?;
    }
}
