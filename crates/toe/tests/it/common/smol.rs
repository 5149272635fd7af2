//! Pieces shared by the smoltcp interop tests (tests/smoltcp.rs over the
//! simulated link, tests/smoltcp_memnic.rs over the memory NIC): the byte
//! stream both sides hash, the smoltcp host, and the application loops that
//! move a [`Source`] through either stack while hashing what arrives.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::pattern;
use linerate_toe::{Engine, Instant, RecvError, SendError, SocketHandle};
use sha2::{Digest, Sha256};
use smoltcp::iface::{Config as SmolConfig, Interface, SocketHandle as SmolHandle, SocketSet};
use smoltcp::phy::Device;
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};

/// smoltcp's MAC; its address is 10.0.0.2.
pub const SMOL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// A linerate instant as smoltcp's (microseconds).
pub fn smol_time(t: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(t.as_micros() as i64)
}

/// smoltcp at 10.0.0.2/24 on `device`, seeded with `seed`, with one TCP socket
/// of `buffer` bytes each way.
pub fn smol_host(
    device: &mut impl Device,
    seed: u64,
    buffer: usize,
) -> (Interface, SocketSet<'static>, SmolHandle) {
    let mut cfg = SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress(SMOL_MAC)));
    cfg.random_seed = seed;
    let mut iface = Interface::new(cfg, device, smol_time(Instant::ZERO));
    iface.update_ip_addrs(|a| {
        a.push(IpCidr::new(IpAddress::v4(10, 0, 0, 2), 24)).unwrap();
    });
    let socket = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; buffer]),
        tcp::SocketBuffer::new(vec![0; buffer]),
    );
    let mut sockets = SocketSet::new(vec![]);
    let handle = sockets.add(socket);
    (iface, sockets, handle)
}

/// Connects smoltcp's socket `socket` to linerate at 10.0.0.1:5001.
pub fn smol_connect(iface: &mut Interface, sockets: &mut SocketSet<'static>, socket: SmolHandle) {
    let cx = iface.context();
    sockets
        .get_mut::<tcp::Socket>(socket)
        .connect(cx, (IpAddress::v4(10, 0, 0, 1), 5001), 40_000)
        .unwrap();
}

/// A long stream that never repeats: chunk `i` of 1 MiB is `pattern(1 MiB, seed + i)`.
pub struct Source {
    seed: u64,
    chunk: Vec<u8>,
    index: usize,
}

impl Source {
    pub fn new(seed: u64) -> Source {
        Source {
            seed,
            chunk: pattern(1 << 20, seed),
            index: 0,
        }
    }

    /// The bytes of the stream from `off` to the end of its chunk.
    pub fn at(&mut self, off: usize) -> &[u8] {
        let i = off >> 20;
        if i != self.index {
            self.chunk = pattern(1 << 20, self.seed + i as u64);
            self.index = i;
        }
        &self.chunk[off & ((1 << 20) - 1)..]
    }

    /// SHA-256 of the first `len` bytes, computed apart from any transfer.
    pub fn digest(seed: u64, len: usize) -> [u8; 32] {
        let mut h = Sha256::new();
        let mut src = Source::new(seed);
        let mut off = 0;
        while off < len {
            let n = (len - off).min(1 << 20);
            h.update(&src.at(off)[..n]);
            off += n;
        }
        h.finalize().into()
    }

    /// Sends the stream from `*sent` up to `len` on linerate's connection `c`,
    /// as much as it takes now.
    pub fn send_linerate(&mut self, e: &mut Engine, c: SocketHandle, sent: &mut usize, len: usize) {
        while *sent < len {
            let chunk = self.at(*sent);
            let n = chunk.len().min(len - *sent);
            match e.tcp_send(c, &chunk[..n]) {
                Ok(k) => *sent += k,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("linerate send after {sent} bytes: {e}"),
            }
        }
    }

    /// Sends the stream from `*sent` up to `len` on smoltcp's socket, as much
    /// as it takes now.
    pub fn send_smol(&mut self, sock: &mut tcp::Socket<'_>, sent: &mut usize, len: usize) {
        while *sent < len && sock.can_send() {
            let chunk = self.at(*sent);
            let n = chunk.len().min(len - *sent);
            let k = sock.send_slice(&chunk[..n]).unwrap();
            if k == 0 {
                break;
            }
            *sent += k;
        }
    }
}

/// The receiving application: hashes what it reads and counts it.
pub struct Sink {
    pub hash: Sha256,
    pub got: usize,
    buf: Vec<u8>,
}

impl Default for Sink {
    fn default() -> Sink {
        Sink {
            hash: Sha256::new(),
            got: 0,
            buf: vec![0u8; 256 * 1024],
        }
    }
}

impl Sink {
    /// Reads all smoltcp's socket holds.
    pub fn recv_smol(&mut self, sock: &mut tcp::Socket<'_>) {
        while sock.can_recv() {
            let n = sock.recv_slice(&mut self.buf).unwrap();
            self.hash.update(&self.buf[..n]);
            self.got += n;
        }
    }

    /// Reads all linerate's connection `s` holds; true at the end of stream.
    pub fn recv_linerate(&mut self, e: &mut Engine, s: SocketHandle) -> bool {
        loop {
            match e.tcp_recv(s, &mut self.buf) {
                Ok(0) => return true,
                Ok(n) => {
                    self.hash.update(&self.buf[..n]);
                    self.got += n;
                }
                Err(RecvError::WouldBlock) => return false,
                Err(e) => panic!("linerate recv after {} bytes: {e}", self.got),
            }
        }
    }

    /// SHA-256 of everything read.
    pub fn digest(self) -> [u8; 32] {
        self.hash.finalize().into()
    }
}
