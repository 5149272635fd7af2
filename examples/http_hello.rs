//! A small HTTP "hello" server on linerate with tokio: each connection gets
//! one response and is closed. With `--requests N` it returns from `main`
//! after answering the N-th request: the runtime is dropped there, and what
//! the last response still has in flight must reach the client all the same.
//!
//! ```text
//! # The kernel's side of the TAP: 10.0.0.1; linerate answers at 10.0.0.2.
//! sudo ip tuntap add dev lr0 mode tap
//! sudo ip addr add 10.0.0.1/24 dev lr0 && sudo ip link set lr0 up
//! sudo cargo run --example http_hello -- --tap lr0 --ip 10.0.0.2
//! curl http://10.0.0.2:8080/
//!
//! # No root: a linerate client on an in-memory wire asks once and checks.
//! cargo run --example http_hello -- --memory
//! ```

use clap::Parser;
use linerate::nic::{MemNic, NicCaps, Tap, TapConfig};
use linerate::rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate::toe::Config;
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An HTTP "hello" server on linerate.
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
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Return from main after answering this many requests (default: never).
    #[arg(long)]
    requests: Option<u64>,
    /// Bytes of the body: "hello, world\n" repeated and cut to this length.
    #[arg(long, default_value_t = 13)]
    body_bytes: usize,
    /// Instead of a TAP: serve at 10.0.0.2 on an in-memory wire one request
    /// of a linerate client at 10.0.0.1, check the response and exit.
    #[arg(long)]
    memory: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let host = |ip, last| Config::new([2, 0, 0, 0, 0, last]).with_ipv4(ip, args.prefix_len);
    let (rt, ip, client) = if args.memory {
        let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
        let client = Runtime::start(b, RuntimeConfig::new(host([10, 0, 0, 1].into(), 1)))?;
        let server = Runtime::start(a, RuntimeConfig::new(host([10, 0, 0, 2].into(), 2)))?;
        (server, [10, 0, 0, 2].into(), Some(client))
    } else {
        let tap = Tap::open(&TapConfig::new(&args.tap))?;
        (
            Runtime::start(tap, RuntimeConfig::new(host(args.ip, 2)))?,
            args.ip,
            None,
        )
    };
    let listener = TcpListener::bind(rt.handle(), args.port).await?;
    println!("http_hello: listening on port {}", args.port);
    let body: Vec<u8> = b"hello, world\n"
        .iter()
        .copied()
        .cycle()
        .take(args.body_bytes)
        .collect();
    // In memory mode: a client of our own, one request.
    let check = client.map(|client| {
        let (to, expect) = (SocketAddr::from((ip, args.port)), body.clone());
        tokio::spawn(async move {
            let mut s = TcpStream::connect(client.handle(), to).await?;
            s.write_all(b"GET / HTTP/1.1\r\nHost: linerate\r\n\r\n")
                .await?;
            let mut response = Vec::new();
            s.read_to_end(&mut response).await?;
            let ok = response.starts_with(b"HTTP/1.1 200 OK\r\n") && response.ends_with(&expect);
            std::io::Result::Ok(ok)
        })
    });
    let requests = if args.memory { Some(1) } else { args.requests };
    for _ in 0..requests.unwrap_or(u64::MAX) {
        let (mut s, peer) = listener.accept().await?;
        // Read the request's head (this server answers every path alike).
        let (mut head, mut buf) = (Vec::new(), [0u8; 4096]);
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await? {
                0 => break,
                n => head.extend_from_slice(&buf[..n]),
            }
        }
        let response = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            body.len()
        );
        s.write_all(response.as_bytes()).await?;
        s.write_all(&body).await?;
        s.shutdown().await?;
        println!("http_hello: answered {peer}");
    }
    if let Some(check) = check {
        assert!(check.await??, "the response is not the one sent");
        println!("http_hello: the response arrived whole over the memory wire");
    }
    Ok(())
}
