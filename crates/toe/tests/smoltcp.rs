//! Interop with smoltcp 0.14 (a TCP written elsewhere) over the simulated link,
//! in the same virtual time: smoltcp's `phy::Device` is implemented over a port
//! of [`Link`]. Byte-exact in both directions, with and without loss.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fnv, pattern};
use linerate_offload::OffloadMeta;
use linerate_toe::sim::{Link, LinkConfig, Sim};
use linerate_toe::{Engine, Error, Instant, TcpState};
use smoltcp::iface::{Config as SmolConfig, Interface, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use std::time::Duration;

const SMOL_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

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

fn smol_now(t: Instant) -> smoltcp::time::Instant {
    smoltcp::time::Instant::from_micros(t.as_micros() as i64)
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
        let mut iface = Interface::new(
            SmolConfig::new(HardwareAddress::Ethernet(EthernetAddress(SMOL_MAC))),
            &mut port,
            smol_now(Instant::ZERO),
        );
        iface.update_ip_addrs(|a| {
            a.push(IpCidr::new(IpAddress::v4(10, 0, 0, 2), 24)).unwrap();
        });
        let sock = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; 512 * 1024]),
            tcp::SocketBuffer::new(vec![0; 512 * 1024]),
        );
        let mut sockets = SocketSet::new(vec![]);
        let smol = sockets.add(sock);
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
        self.iface.poll(smol_now(now), &mut port, &mut self.sockets);
        let smol_next = self
            .iface
            .poll_delay(smol_now(now), &self.sockets)
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
                Err(Error::WouldBlock) => break,
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
    let cx = p.iface.context();
    let sock = p.sockets.get_mut::<tcp::Socket>(p.smol);
    sock.connect(cx, (IpAddress::v4(10, 0, 0, 1), 5001), 40_000)
        .unwrap();
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
                    Err(Error::WouldBlock) => break,
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
        let cx = p.iface.context();
        let sock = p.sockets.get_mut::<tcp::Socket>(p.smol);
        sock.connect(cx, (IpAddress::v4(10, 0, 0, 1), 5001), 40_000)
            .unwrap();
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
