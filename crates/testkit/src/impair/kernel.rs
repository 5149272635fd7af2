//! The kernel's ends of a transfer: a sending and a receiving socket, each on a
//! thread inside a namespace, reporting its times and its `TCP_INFO`.

use super::setup::CONGESTION_CONTROL;
use super::tcp_info::{TcpInfo, set_congestion, tcp_info};
use crate::netns::Netns;
use crate::stream::{self, Digester};
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A kernel thread's handle: errors of entering the namespace outside, of the
/// transfer inside.
pub(crate) type KernelThread<T> = JoinHandle<io::Result<io::Result<T>>>;

/// What a sending socket reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    /// When the connection was established and the first write began.
    pub start: Instant,
    /// The socket at the end (after the receiver's close was seen).
    pub info: TcpInfo,
}

/// What a receiving socket reports.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    /// When the end of file arrived.
    pub end: Instant,
    /// Bytes received.
    pub len: usize,
    /// Their SHA-256.
    pub digest: [u8; 32],
    /// The socket at the end of file.
    pub info: TcpInfo,
}

/// Connects from inside `ns` to `to`, writes the pattern (`seed`, `len`),
/// half-closes, and waits for the peer's close.
pub(crate) fn sender(
    ns: &Netns,
    to: SocketAddrV4,
    seed: u64,
    len: usize,
    limit: Duration,
) -> io::Result<KernelThread<Sent>> {
    ns.spawn(move || -> io::Result<Sent> {
        let mut s = TcpStream::connect_timeout(&to.into(), limit)?;
        set_congestion(&s, CONGESTION_CONTROL)?;
        s.set_write_timeout(Some(limit))?;
        s.set_read_timeout(Some(limit))?;
        let start = Instant::now();
        stream::send(&mut s, seed, len)?;
        s.shutdown(Shutdown::Write)?;
        let mut rest = Vec::new();
        s.read_to_end(&mut rest)?;
        if !rest.is_empty() {
            return Err(io::Error::other(format!(
                "{} unexpected bytes from the receiver",
                rest.len()
            )));
        }
        let info = tcp_info(&s)?;
        Ok(Sent { start, info })
    })
}

/// Listens inside `ns` on `at`, says so on `ready`, accepts one connection and
/// reads it to the end, then closes it.
pub(crate) fn receiver(
    ns: &Netns,
    at: SocketAddrV4,
    ready: Sender<()>,
    limit: Duration,
) -> io::Result<KernelThread<Received>> {
    ns.spawn(move || -> io::Result<Received> {
        let l = TcpListener::bind(at)?;
        let _ = ready.send(());
        let (mut s, _) = l.accept()?;
        set_congestion(&s, CONGESTION_CONTROL)?;
        s.set_read_timeout(Some(limit))?;
        let mut d = Digester::default();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => d.update(buf.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let end = Instant::now();
        let info = tcp_info(&s)?;
        let len = d.len;
        Ok(Received {
            end,
            len,
            digest: d.finish(),
            info,
        })
    })
}

/// Checks a received transfer against the pattern it should be.
pub(crate) fn check(len: usize, digest: &[u8; 32], seed: u64, want: usize) -> io::Result<()> {
    if len != want || *digest != stream::Pattern::digest(seed, want) {
        return Err(io::Error::other(format!(
            "received {len} bytes of {want}, SHA-256 {}",
            if len == want {
                "differs"
            } else {
                "not checked"
            }
        )));
    }
    Ok(())
}

/// For `LINERATE_IMPAIR_DEBUG`: the loss-recovery counters of `ns`'s TCP
/// (`nstat`'s TcpExt lines about undo, reordering, recovery, D-SACK, losses
/// and probes that are not zero), on stderr.
pub(crate) fn print_recovery_counters(ns: &Netns) {
    let Ok(out) = ns.exec("nstat", &["-az"]) else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let keys = [
        "Undo", "Reorder", "Recovery", "DSACK", "Lost", "Spurious", "Probe", "Timeout",
    ];
    for line in text.lines().filter(|l| keys.iter().any(|k| l.contains(k))) {
        let mut f = line.split_whitespace();
        if let (Some(name), Some(v)) = (f.next(), f.next())
            && v != "0"
        {
            eprintln!("  {name} {v}");
        }
    }
}
