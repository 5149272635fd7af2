//! An engine in the caller's own event loop: no runtime threads, no tokio.
//! A [`Driver`] moves frames between one NIC queue and an [`Engine`]; between
//! rounds the loop makes the engine's socket calls (here a TCP echo on port 7),
//! then sleeps on the queue's readiness until the engine's next timer. A
//! program with a poll(2) or epoll loop of its own adds
//! [`Driver::readiness`] (the TAP's file descriptor) to its set instead.
//!
//! ```text
//! # The kernel's side of the TAP: 10.0.0.1; linerate answers at 10.0.0.2.
//! sudo ip tuntap add dev lr0 mode tap
//! sudo ip addr add 10.0.0.1/24 dev lr0 && sudo ip link set lr0 up
//! sudo cargo run --example event_loop -- --tap lr0 --ip 10.0.0.2
//! echo hello | nc -q1 10.0.0.2 7
//!
//! # No root: one loop drives two engines on an in-memory wire, a client
//! # that sends and checks, and the echo server.
//! cargo run --example event_loop -- --memory
//! ```

use clap::Parser;
use linerate::nic::{MemNic, NicCaps, Tap, TapConfig};
use linerate::rt::Driver;
use linerate::toe::{Config, Engine, Instant, ListenerHandle, SendError, SocketHandle};
use std::error::Error;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// A TCP echo server on an engine driven by hand.
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
    /// Instead of a TAP: serve at 10.0.0.2 on an in-memory wire, echo a client
    /// engine's bytes from 10.0.0.1 driven by the same loop, check and exit.
    #[arg(long)]
    memory: bool,
}

/// The application: the echo's connections and the bytes each still owes.
struct Echo {
    listener: ListenerHandle,
    conns: Vec<(SocketHandle, Vec<u8>, bool)>,
}

impl Echo {
    /// One round of socket calls: accept, read, write back, close after EOF.
    fn serve(&mut self, e: &mut Engine) {
        while let Ok(s) = e.tcp_accept(self.listener) {
            self.conns.push((s, Vec::new(), false));
        }
        let mut buf = [0u8; 16 * 1024];
        self.conns.retain_mut(|(s, owed, eof)| {
            loop {
                match e.tcp_send(*s, owed) {
                    Ok(n) => drop(owed.drain(..n)),
                    Err(SendError::WouldBlock) => {}
                    Err(_) => return false, // reset by the peer: forget it
                }
                if !owed.is_empty() || *eof {
                    break;
                }
                match e.tcp_recv(*s, &mut buf) {
                    Ok(0) => *eof = true,
                    Ok(n) => owed.extend_from_slice(&buf[..n]),
                    Err(_) => break,
                }
            }
            // The engine finishes the close (FIN, TIME-WAIT) on its own.
            let done = *eof && owed.is_empty();
            !(done && e.tcp_close(*s).is_ok())
        });
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args = Args::parse();
    let engine = |ip, last, seed| {
        let cfg = Config::new([2, 0, 0, 0, 0, last]).with_ipv4(ip, args.prefix_len);
        Engine::new(cfg, seed)
    };
    let epoch = std::time::Instant::now();
    let clock = || Instant::from_nanos(epoch.elapsed().as_nanos() as u64);
    if !args.memory {
        let tap = Tap::open(&TapConfig::new(&args.tap))?;
        let mut server = Driver::new(engine(args.ip, 2, 0x5eed), tap, 0)?;
        let listener = server.engine_mut().tcp_listen(7)?;
        let mut echo = Echo {
            listener,
            conns: Vec::new(),
        };
        println!("event_loop: listening on port 7");
        loop {
            let now = clock();
            let next = server.poll(now)?; // receive, timers, transmit
            echo.serve(server.engine_mut());
            server.transmit(now)?; // what the socket calls queued
            server.wait(now, next, Duration::from_secs(1))?;
        }
    }
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let mut server = Driver::new(engine([10, 0, 0, 2].into(), 2, 1), a, 0)?;
    let mut client = Driver::new(engine([10, 0, 0, 1].into(), 1, 2), b, 0)?;
    let listener = server.engine_mut().tcp_listen(7)?;
    let mut echo = Echo {
        listener,
        conns: Vec::new(),
    };
    let to = SocketAddr::from(([10, 0, 0, 2], 7));
    let c = client.engine_mut().tcp_connect(clock(), to)?;
    let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut off, mut back, mut buf) = (0, Vec::new(), vec![0u8; 64 * 1024]);
    while back.len() < sent.len() {
        if epoch.elapsed() > Duration::from_secs(30) {
            return Err(format!("{} of {} bytes echoed in 30 s", back.len(), sent.len()).into());
        }
        let now = clock();
        let next = [server.poll(now)?, client.poll(now)?]
            .into_iter()
            .flatten()
            .min();
        echo.serve(server.engine_mut());
        let e = client.engine_mut();
        if let Ok(n) = e.tcp_send(c, &sent[off..]) {
            off += n;
        }
        while let Ok(n @ 1..) = e.tcp_recv(c, &mut buf) {
            back.extend_from_slice(&buf[..n]);
        }
        server.transmit(now)?;
        client.transmit(now)?;
        // Both queues belong to this thread: a short wait on one of them.
        server.wait(now, next, Duration::from_millis(1))?;
    }
    assert!(back == sent, "the echo differs from what was sent");
    println!(
        "event_loop: {} bytes echoed over the memory wire",
        sent.len()
    );
    Ok(())
}
