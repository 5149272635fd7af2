//! What the tunnel system tests share: a linerate engine over any NIC (an
//! overlay), pumped on the test thread, and the engine's side of byte-exact
//! transfers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::Nic;
// The only place these tests name the runtime's driver (it is moving to its own
// crate): `Host::new`.
use linerate::rt::Driver;
use linerate::toe::{Config, Engine, Instant, ListenerHandle, RecvError, SendError, SocketHandle};
use linerate_testkit::stream::{Digester, Pattern};
use std::io;
use std::time::Duration;

/// A linerate engine over `N`, driven by the runtime's driver from the test
/// thread ([`Host::pump`]).
pub struct Host<N: Nic> {
    driver: Driver<N>,
    epoch: std::time::Instant,
}

impl<N: Nic> Host<N> {
    /// An engine made of `cfg` (its IP MTU set to the NIC's, as the runtime
    /// does) and `seed` over queue 0 of `nic`.
    pub fn new(mut cfg: Config, seed: u64, nic: N) -> Host<N> {
        cfg.mtu = nic.caps().mtu;
        let engine = Engine::new(cfg, seed);
        Host {
            driver: Driver::new(engine, nic, 0).unwrap(),
            epoch: std::time::Instant::now(),
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.driver.engine()
    }

    /// The engine, mutable.
    pub fn engine_mut(&mut self) -> &mut Engine {
        self.driver.engine_mut()
    }

    /// The NIC.
    pub fn nic(&self) -> &N {
        self.driver.nic()
    }

    /// The NIC, mutable.
    pub fn nic_mut(&mut self) -> &mut N {
        self.driver.nic_mut()
    }

    /// The engine's clock: time since the host was made.
    pub fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// One round of the driver; if it moved no frame, waits up to `wait` (or
    /// the engine's next timer, if sooner) for frames.
    pub fn pump(&mut self, wait: Duration) -> io::Result<()> {
        let before = self.driver.stats();
        let now = self.now();
        let next = self.driver.poll(now).map_err(io::Error::other)?;
        let after = self.driver.stats();
        if after.rx_frames != before.rx_frames || after.tx_frames != before.tx_frames {
            return Ok(());
        }
        self.driver
            .wait(self.now(), next, wait)
            .map_err(io::Error::other)?;
        Ok(())
    }

    /// Pumps until `done`; panics naming `what` after `limit`.
    pub fn pump_until(
        &mut self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&mut Self) -> bool,
    ) {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            self.pump(Duration::from_millis(2)).unwrap();
        }
    }

    /// Pumps until a connection is accepted on `l`.
    pub fn accept(&mut self, l: ListenerHandle) -> SocketHandle {
        let mut s = None;
        self.pump_until(Duration::from_secs(20), "accept", |h| {
            s = h.engine_mut().tcp_accept(l).ok();
            s.is_some()
        });
        s.unwrap()
    }

    /// Sends `len` bytes of the pattern `seed` on `s` and shuts it down for
    /// writing, pumping meanwhile.
    pub fn send(&mut self, s: SocketHandle, seed: u64, len: usize) {
        let mut tx = Sender::new(s, seed, len);
        self.pump_until(Duration::from_secs(120), "send", |h| {
            tx.step(h.engine_mut())
        });
    }

    /// Reads `s` to EOF; returns the byte count and SHA-256.
    pub fn receive(&mut self, s: SocketHandle) -> (usize, [u8; 32]) {
        let mut rx = Receiver::new(s);
        self.pump_until(Duration::from_secs(120), "receive", |h| {
            rx.step(h.engine_mut())
        });
        rx.finish()
    }
}

/// The engine's side of sending a pattern: as much as the socket takes per
/// step, then a shutdown for writing.
pub struct Sender {
    s: SocketHandle,
    p: Pattern,
    len: usize,
    buf: Vec<u8>,
    off: usize,
    end: usize,
    shut: bool,
}

impl Sender {
    /// `len` bytes of the pattern `seed` on `s`.
    pub fn new(s: SocketHandle, seed: u64, len: usize) -> Sender {
        Sender {
            s,
            p: Pattern::new(seed, len),
            len,
            buf: vec![0u8; 256 << 10],
            off: 0,
            end: 0,
            shut: false,
        }
    }

    /// Sends what the socket takes now; true once everything was taken and the
    /// socket shut down for writing.
    pub fn step(&mut self, engine: &mut Engine) -> bool {
        while !self.shut {
            if self.off == self.end {
                self.end = self.p.fill(&mut self.buf);
                self.off = 0;
                if self.end == 0 {
                    engine.tcp_shutdown(self.s).unwrap();
                    self.shut = true;
                    break;
                }
            }
            match engine.tcp_send(self.s, &self.buf[self.off..self.end]) {
                Ok(n) => self.off += n,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send after {} bytes: {e}", self.len - self.p.left()),
            }
        }
        self.shut
    }
}

/// The engine's side of reading a socket to EOF, hashing what it reads.
pub struct Receiver {
    s: SocketHandle,
    d: Digester,
    buf: Vec<u8>,
    eof: bool,
}

impl Receiver {
    /// Reads `s`.
    pub fn new(s: SocketHandle) -> Receiver {
        Receiver {
            s,
            d: Digester::default(),
            buf: vec![0u8; 256 << 10],
            eof: false,
        }
    }

    /// Reads what is there; true at EOF.
    pub fn step(&mut self, engine: &mut Engine) -> bool {
        while !self.eof {
            match engine.tcp_recv(self.s, &mut self.buf) {
                Ok(0) => self.eof = true,
                Ok(n) => self.d.update(&self.buf[..n]),
                Err(RecvError::WouldBlock) => break,
                Err(e) => panic!("recv after {} bytes: {e}", self.d.len),
            }
        }
        self.eof
    }

    /// The byte count and SHA-256 of what was read.
    pub fn finish(self) -> (usize, [u8; 32]) {
        let len = self.d.len;
        (len, self.d.finish())
    }
}

/// Pumps two hosts in turn, without waiting, until `done`; false if `limit`
/// passed first.
#[must_use]
pub fn pump_pair<A: Nic, B: Nic>(
    a: &mut Host<A>,
    b: &mut Host<B>,
    limit: Duration,
    mut done: impl FnMut(&mut Host<A>, &mut Host<B>) -> bool,
) -> bool {
    let end = std::time::Instant::now() + limit;
    while !done(a, b) {
        if std::time::Instant::now() >= end {
            return false;
        }
        a.pump(Duration::ZERO).unwrap();
        b.pump(Duration::ZERO).unwrap();
    }
    true
}

/// ICMPv4 echo from linerate's side of a tunnel, straight on the overlay NIC
/// before an engine runs on it (the engine answers echo requests but has no API
/// to send one): `count` requests from `ours` (MAC, IPv4) to `theirs`, one per
/// `interval`, answering ARP requests for our address meanwhile, then up to
/// `timeout` for the last replies. Returns how many requests were answered (a
/// reply must carry the request's identifier, sequence number and payload).
pub fn overlay_ping<N: Nic>(
    nic: &mut N,
    ours: ([u8; 6], std::net::Ipv4Addr),
    theirs: ([u8; 6], std::net::Ipv4Addr),
    count: u16,
    interval: Duration,
    timeout: Duration,
) -> u16 {
    use etherparse::{IcmpEchoHeader, Icmpv4Type, NetSlice, SlicedPacket, TransportSlice};
    use linerate::nic::{Batch, Frame};
    use linerate::offload::OffloadMeta;
    use linerate::wire::arp;
    use linerate::wire::build::{FrameBuilder, Ip, L4};

    let send = |nic: &mut N, frame: Vec<u8>| {
        let mut batch = Batch::new();
        batch.push(Frame::new(
            nic.pool().alloc_from(&frame),
            OffloadMeta::plain(),
        ));
        nic.transmit(0, &mut batch).unwrap();
    };
    let id = 0x4c52;
    let payload = |seq: u16| -> Vec<u8> { (0..56u8).map(|i| i ^ seq as u8).collect() };
    let mut answered = vec![false; usize::from(count)];
    let mut batch = Batch::new();
    let start = std::time::Instant::now();
    let end = start + interval * u32::from(count) + timeout;
    let mut sent = 0u16;
    while std::time::Instant::now() < end && answered.iter().any(|a| !a) {
        if sent < count && start.elapsed() >= interval * u32::from(sent) {
            let request = FrameBuilder::new(
                Ip::v4(ours.1.octets(), theirs.1.octets()),
                L4::Icmpv4(Icmpv4Type::EchoRequest(IcmpEchoHeader { id, seq: sent })),
            )
            .macs(ours.0, theirs.0)
            .build(&payload(sent));
            send(nic, request);
            sent += 1;
        }
        batch.clear();
        if nic.receive(0, &mut batch, 64).unwrap() == 0 {
            let _ = nic.readiness(0).unwrap().wait(Duration::from_millis(5));
            continue;
        }
        let mut replies = Vec::new();
        for f in batch.iter() {
            let b = f.bytes();
            if b.get(12..14) == Some(&[0x08, 0x06]) {
                if let Ok(req) = arp::Packet::new_checked(&b[14..])
                    && req.oper() == arp::operation::REQUEST
                    && req.tpa() == ours.1.octets()
                {
                    let reply = req.reply_to(ours.0).to_arp_packet();
                    replies.push(FrameBuilder::arp(reply, ours.0, req.sha()).build(&[]));
                }
                continue;
            }
            let Ok(p) = SlicedPacket::from_ethernet(b) else {
                continue;
            };
            let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Icmpv4(icmp))) =
                (&p.net, &p.transport)
            else {
                continue;
            };
            if let Icmpv4Type::EchoReply(echo) = icmp.icmp_type()
                && echo.id == id
                && echo.seq < sent
                && icmp.payload() == payload(echo.seq)
                && ip.header().source_addr() == theirs.1
            {
                answered[usize::from(echo.seq)] = true;
            }
        }
        for r in replies {
            send(nic, r);
        }
    }
    answered.iter().filter(|a| **a).count() as u16
}
