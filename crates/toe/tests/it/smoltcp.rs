//! Interop with smoltcp 0.14 (a TCP written elsewhere) over the simulated link,
//! in the same virtual time: smoltcp's `phy::Device` is implemented over a port
//! of [`Link`]. Byte-exact in both directions, with and without loss; 64 MiB each
//! way, offloads on and off, clean and over a faulty link, compared by SHA-256
//! against the source computed on its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::smol::{Sink, Source, smol_connect, smol_host, smol_time};
use common::{fnv, pattern};
use linerate_offload::OffloadMeta;
use linerate_toe::sim::{Link, LinkConfig, Sim};
use linerate_toe::{Engine, Instant, RecvError, SendError, TcpState};
use smoltcp::iface::{Interface, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use std::time::Duration;

/// smoltcp's device: port `port` of the link at virtual time `now`.
struct Port<'a> {
    link: &'a mut Link,
    port: usize,
    now: Instant,
}

struct Rx(Vec<u8>);
struct Tx<'a> {
    link: &'a mut Link,
    port: usize,
    now: Instant,
}

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0u8; len];
        let r = f(&mut buf);
        self.link
            .send(self.now, self.port, &buf, &OffloadMeta::plain());
        r
    }
}

impl Device for Port<'_> {
    type RxToken<'b>
        = Rx
    where
        Self: 'b;
    type TxToken<'b>
        = Tx<'b>
    where
        Self: 'b;

    fn receive(&mut self, _: smoltcp::time::Instant) -> Option<(Rx, Tx<'_>)> {
        let (f, _) = self.link.recv(self.now, self.port)?;
        Some((
            Rx(f),
            Tx {
                link: self.link,
                port: self.port,
                now: self.now,
            },
        ))
    }

    fn transmit(&mut self, _: smoltcp::time::Instant) -> Option<Tx<'_>> {
        Some(Tx {
            link: self.link,
            port: self.port,
            now: self.now,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = 1514;
        caps
    }
}

/// linerate (port 0, 10.0.0.1) and smoltcp (port 1, 10.0.0.2) on one link.
struct Pair {
    link: Link,
    engine: Engine,
    iface: Interface,
    sockets: SocketSet<'static>,
    smol: smoltcp::iface::SocketHandle,
    now: Instant,
}

impl Pair {
    fn new(link: LinkConfig, offloads: bool) -> Pair {
        let mut link = Link::new(2, link);
        let mut cfg = Sim::host_config(1);
        cfg.offloads = offloads;
        let engine = Engine::new(cfg, 11);
        let mut port = Port {
            link: &mut link,
            port: 1,
            now: Instant::ZERO,
        };
        // smoltcp's default seed, 0.
        let (iface, sockets, smol) = smol_host(&mut port, 0, 512 * 1024);
        Pair {
            link,
            engine,
            iface,
            sockets,
            smol,
            now: Instant::ZERO,
        }
    }

    fn sock(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.smol)
    }

    /// One round at the current time, then a jump to the next event.
    fn step(&mut self) {
        let now = self.now;
        while let Some((f, m)) = self.link.recv(now, 0) {
            self.engine.handle_frame(now, &f, &m);
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        let link = &mut self.link;
        self.engine
            .poll_transmit(now, &mut |f, m| link.send(now, 0, f, m));
        let mut port = Port {
            link: &mut self.link,
            port: 1,
            now,
        };
        self.iface
            .poll(smol_time(now), &mut port, &mut self.sockets);
        let smol_next = self
            .iface
            .poll_delay(smol_time(now), &self.sockets)
            .map(|d| now + Duration::from_micros(d.total_micros().max(1)));
        let next = [
            self.engine.poll_timeout(),
            self.link.next_delivery(),
            smol_next,
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now + Duration::from_millis(1));
        self.now = next.max(now + Duration::from_nanos(1));
    }
}

fn linerate_to_smoltcp(link: LinkConfig, offloads: bool, len: usize) -> (Duration, Pair) {
    let mut p = Pair::new(link, offloads);
    p.sock().listen(5001).unwrap();
    let data = pattern(len, 5);
    let c = p
        .engine
        .tcp_connect(p.now, "10.0.0.2:5001".parse().unwrap())
        .unwrap();
    let (mut sent, mut got, mut shut) = (0, Vec::with_capacity(len), false);
    let mut buf = vec![0u8; 64 * 1024];
    let limit = Instant::ZERO + Duration::from_secs(600);
    while p.now < limit {
        p.step();
        while sent < len {
            match p.engine.tcp_send(c, &data[sent..]) {
                Ok(n) => sent += n,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        if sent == len && !shut {
            p.engine.tcp_shutdown(c).unwrap();
            shut = true;
        }
        while p.sock().can_recv() {
            let n = p.sock().recv_slice(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        if !p.sock().may_recv() && got.len() == len {
            break;
        }
    }
    assert_eq!(got.len(), len, "received {} of {len}", got.len());
    assert_eq!(fnv(&got), fnv(&data));
    assert!(got == data);
    let t = p.now;
    // smoltcp closes too; linerate sees the FIN.
    p.sock().close();
    let end = p.now + Duration::from_secs(60);
    while p.now < end
        && !matches!(
            p.engine.tcp_state(c),
            Ok(TcpState::TimeWait | TcpState::Closed)
        )
    {
        p.step();
    }
    assert!(matches!(
        p.engine.tcp_state(c),
        Ok(TcpState::TimeWait | TcpState::Closed)
    ));
    (t - Instant::ZERO, p)
}

fn smoltcp_to_linerate(link: LinkConfig, offloads: bool, len: usize) -> Pair {
    let mut p = Pair::new(link, offloads);
    let l = p.engine.tcp_listen(5001).unwrap();
    let data = pattern(len, 6);
    smol_connect(&mut p.iface, &mut p.sockets, p.smol);
    let (mut sent, mut got, mut s, mut closed) = (0, Vec::with_capacity(len), None, false);
    let mut buf = vec![0u8; 64 * 1024];
    let limit = Instant::ZERO + Duration::from_secs(600);
    let mut eof = false;
    while p.now < limit && !eof {
        p.step();
        s = s.or_else(|| p.engine.tcp_accept(l).ok());
        while sent < len && p.sock().can_send() {
            sent += p.sock().send_slice(&data[sent..]).unwrap();
        }
        if sent == len && !closed {
            p.sock().close();
            closed = true;
        }
        if let Some(s) = s {
            loop {
                match p.engine.tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    assert_eq!(got.len(), len, "received {} of {len}", got.len());
    assert_eq!(fnv(&got), fnv(&data));
    assert!(got == data);
    p.engine.tcp_close(s.unwrap()).unwrap();
    let end = p.now + Duration::from_secs(60);
    while p.now < end
        && p.sock().state() != tcp::State::TimeWait
        && p.sock().state() != tcp::State::Closed
    {
        p.step();
    }
    assert!(
        matches!(p.sock().state(), tcp::State::TimeWait | tcp::State::Closed),
        "{}",
        p.sock().state()
    );
    p
}

#[test]
fn linerate_sends_to_smoltcp() {
    let (_, p) = linerate_to_smoltcp(LinkConfig::default(), true, 2 << 20);
    assert!(p.link.stats().segmented > 0);
    linerate_to_smoltcp(LinkConfig::default(), false, 1 << 20);
}

#[test]
fn smoltcp_sends_to_linerate() {
    smoltcp_to_linerate(LinkConfig::default(), true, 2 << 20);
    smoltcp_to_linerate(LinkConfig::default(), false, 1 << 20);
}

#[test]
fn both_directions_with_loss() {
    let lossy = |seed| LinkConfig {
        loss: 0.005,
        reorder: 0.01,
        seed,
        ..LinkConfig::default()
    };
    let (_, p) = linerate_to_smoltcp(lossy(1), true, 1 << 20);
    assert!(p.link.stats().lost > 0);
    assert!(p.engine.counters().tcp_retrans_segs > 0);
    let p = smoltcp_to_linerate(lossy(2), true, 1 << 20);
    assert!(p.link.stats().lost > 0);
}

/// Streams `total` bytes one way between linerate and smoltcp (a 1 MiB pattern sent
/// cyclically, the receiver counting and discarding); returns the wall time.
fn stream(offloads: bool, to_smoltcp: bool, total: usize) -> Duration {
    let mut p = Pair::new(LinkConfig::default(), offloads);
    let chunk = pattern(1 << 20, 1);
    let mut buf = vec![0u8; 256 * 1024];
    let (mut sent, mut got) = (0usize, 0usize);
    let t0 = std::time::Instant::now();
    if to_smoltcp {
        p.sock().listen(5001).unwrap();
        let c = p
            .engine
            .tcp_connect(p.now, "10.0.0.2:5001".parse().unwrap())
            .unwrap();
        while got < total {
            p.step();
            while sent < total {
                let off = sent % chunk.len();
                let n = (total - sent).min(chunk.len() - off);
                match p.engine.tcp_send(c, &chunk[off..off + n]) {
                    Ok(k) => sent += k,
                    Err(_) => break,
                }
            }
            while p.sock().can_recv() {
                got += p.sock().recv_slice(&mut buf).unwrap();
            }
        }
    } else {
        let l = p.engine.tcp_listen(5001).unwrap();
        smol_connect(&mut p.iface, &mut p.sockets, p.smol);
        let mut s = None;
        while got < total {
            p.step();
            s = s.or_else(|| p.engine.tcp_accept(l).ok());
            while sent < total && p.sock().can_send() {
                let off = sent % chunk.len();
                let n = (total - sent).min(chunk.len() - off);
                sent += p.sock().send_slice(&chunk[off..off + n]).unwrap();
            }
            if let Some(s) = s {
                while let Ok(n) = p.engine.tcp_recv(s, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    got += n;
                }
            }
        }
    }
    t0.elapsed()
}

#[test]
#[ignore = "measurement; run in release"]
fn smoltcp_throughput() {
    let total = 256 << 20;
    let g = |d: Duration| total as f64 * 8.0 / d.as_secs_f64() / 1e9;
    for offloads in [true, false] {
        let a = stream(offloads, true, total);
        let b = stream(offloads, false, total);
        println!(
            "linerate offloads {offloads}: linerate -> smoltcp {:.2} Gbit/s, smoltcp -> linerate {:.2} Gbit/s (wall, MTU 1500, link segments)",
            g(a),
            g(b)
        );
    }
}

/// What a hashed transfer did.
struct Hashed {
    /// Simulated time to the receiver's end of stream.
    sim: Duration,
    digest: [u8; 32],
    received: usize,
    pair: Pair,
}

/// Streams `len` bytes of [`Source`] `seed` between linerate and smoltcp (to
/// smoltcp if `to_smoltcp`), the receiver hashing what it reads; both ends close.
fn hashed(link: LinkConfig, offloads: bool, to_smoltcp: bool, len: usize, seed: u64) -> Hashed {
    let mut p = Pair::new(link, offloads);
    let mut src = Source::new(seed);
    let mut sink = Sink::default();
    let (mut sent, mut eof) = (0usize, false);
    let limit = Instant::ZERO + Duration::from_secs(3600);
    if to_smoltcp {
        p.sock().listen(5001).unwrap();
        let c = p
            .engine
            .tcp_connect(p.now, "10.0.0.2:5001".parse().unwrap())
            .unwrap();
        let mut shut = false;
        while p.now < limit && !eof {
            p.step();
            src.send_linerate(&mut p.engine, c, &mut sent, len);
            if sent == len && !shut {
                p.engine.tcp_shutdown(c).unwrap();
                shut = true;
            }
            sink.recv_smol(p.sock());
            eof = !p.sock().may_recv() && shut;
        }
        let t = p.now - Instant::ZERO;
        p.sock().close();
        let end = p.now + Duration::from_secs(120);
        while p.now < end
            && !matches!(
                p.engine.tcp_state(c),
                Ok(TcpState::TimeWait | TcpState::Closed)
            )
        {
            p.step();
        }
        assert!(
            matches!(
                p.engine.tcp_state(c),
                Ok(TcpState::TimeWait | TcpState::Closed)
            ),
            "linerate did not see smoltcp's FIN: {:?}",
            p.engine.tcp_state(c)
        );
        Hashed {
            sim: t,
            received: sink.got,
            digest: sink.digest(),
            pair: p,
        }
    } else {
        let l = p.engine.tcp_listen(5001).unwrap();
        smol_connect(&mut p.iface, &mut p.sockets, p.smol);
        let (mut s, mut closed) = (None, false);
        while p.now < limit && !eof {
            p.step();
            s = s.or_else(|| p.engine.tcp_accept(l).ok());
            src.send_smol(p.sock(), &mut sent, len);
            if sent == len && !closed {
                p.sock().close();
                closed = true;
            }
            if let Some(s) = s {
                eof = sink.recv_linerate(&mut p.engine, s);
            }
        }
        let t = p.now - Instant::ZERO;
        if let Some(s) = s {
            p.engine.tcp_close(s).unwrap();
        }
        let end = p.now + Duration::from_secs(120);
        while p.now < end && !matches!(p.sock().state(), tcp::State::TimeWait | tcp::State::Closed)
        {
            p.step();
        }
        assert!(
            matches!(p.sock().state(), tcp::State::TimeWait | tcp::State::Closed),
            "smoltcp did not see linerate's FIN: {}",
            p.sock().state()
        );
        Hashed {
            sim: t,
            received: sink.got,
            digest: sink.digest(),
            pair: p,
        }
    }
}

/// Runs [`hashed`] and checks length and digest against the source.
fn exact(link: LinkConfig, offloads: bool, to_smoltcp: bool, len: usize, seed: u64) -> Hashed {
    let wall = std::time::Instant::now();
    let r = hashed(link, offloads, to_smoltcp, len, seed);
    let dir = if to_smoltcp {
        "linerate -> smoltcp"
    } else {
        "smoltcp -> linerate"
    };
    assert_eq!(r.received, len, "{dir}: received {} of {len}", r.received);
    assert!(
        r.digest == Source::digest(seed, len),
        "{dir}: {len} bytes arrived but their SHA-256 differs"
    );
    println!(
        "{dir}, offloads {offloads}: {len} bytes in {:?} simulated, {:?} wall",
        r.sim,
        wall.elapsed()
    );
    r
}

/// The faults of the interop runs: smoltcp 0.14 has no SACK, so milder than the
/// engine-to-engine campaign (tests/faults.rs).
fn faults(seed: u64) -> LinkConfig {
    LinkConfig {
        loss: 0.01,
        reorder: 0.01,
        duplicate: 0.005,
        corrupt: 0.001,
        seed,
        ..LinkConfig::default()
    }
}

#[test]
fn sixty_four_mib_each_way_clean() {
    for (i, offloads) in [true, false].into_iter().enumerate() {
        let seed = 100 + 2 * i as u64;
        let a = exact(LinkConfig::default(), offloads, true, 64 << 20, seed);
        assert_eq!(a.pair.link.stats().segmented > 0, offloads);
        assert_eq!(a.pair.engine.counters().tcp_retrans_segs, 0);
        let b = exact(LinkConfig::default(), offloads, false, 64 << 20, seed + 1);
        assert_eq!(b.pair.link.stats().lost, 0);
        assert_eq!(b.pair.engine.counters().tcp_in_csum_errors, 0);
    }
}

/// 64 MiB each way over the faulty link, offloads on and off: every fault kind
/// happened, and linerate retransmitted (as sender) or caught corruption (as
/// receiver). About 10 s of wall time in the test profile, beside the clean run.
#[test]
fn sixty_four_mib_each_way_with_faults() {
    for (i, offloads) in [true, false].into_iter().enumerate() {
        let seed = 400 + 2 * i as u64;
        let a = exact(faults(seed), offloads, true, 64 << 20, seed);
        let s = a.pair.link.stats();
        assert!(
            s.lost > 0 && s.corrupted > 0 && s.duplicated > 0 && s.reordered > 0,
            "{s:?}"
        );
        assert!(a.pair.engine.counters().tcp_retrans_segs > 0);
        let b = exact(faults(seed + 1), offloads, false, 64 << 20, seed + 1);
        let k = b.pair.engine.counters();
        assert!(b.pair.link.stats().lost > 0);
        assert!(
            k.tcp_in_csum_errors + k.ip_in_hdr_errors + k.rx_other_host > 0,
            "{k:?}"
        );
    }
}
