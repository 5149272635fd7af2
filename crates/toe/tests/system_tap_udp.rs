//! Linux UDP against the linerate engine over a TAP interface (docs/testing.md:
//! "Linux TCP against the engine"), over IPv4 and IPv6.
//!
//! The set-up is `system_tap.rs`'s (copied, the test files share no module): a
//! TAP with a virtio_net_hdr moved into a namespace where the kernel has
//! 10.78.0.1/24 and fd78::1/64; the engine at 10.78.0.2 and fd78::2 drives the
//! other end in a loop on the test thread; the kernel's sockets run on a thread
//! in the namespace.
//!
//! * datagrams both ways: linerate sends datagrams of many sizes (and a USO
//!   super-datagram with offloads on) to a kernel socket that echoes each back;
//!   every one must come back byte for byte, from the kernel's address. With
//!   offloads off every checksum is linerate's own, and the kernel drops bad ones.
//! * ICMP port unreachable honoured by Linux: a connected kernel UDP socket
//!   sending to a closed linerate port gets `ECONNREFUSED`.
//!
//! Needs root: `cargo test -p linerate-toe --features system-tests --test
//! system_tap_udp -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::tap::{Tap, TapConfig, TapOffloads};
use linerate_nic::{Batch, Frame, Nic};
use linerate_testkit::netns::{self, Netns};
use linerate_toe::{Config, Engine, Instant, UdpHandle, UdpRecvError};
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x03];
const KERNEL_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 1);
const OUR_V4: Ipv4Addr = Ipv4Addr::new(10, 78, 0, 2);
const KERNEL_V6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 1);
const OUR_V6: Ipv6Addr = Ipv6Addr::new(0xfd78, 0, 0, 0, 0, 0, 0, 2);

/// The TAP in its namespace, the kernel at `KERNEL_*`, the engine at `OUR_*`.
struct Host {
    engine: Engine,
    tap: Tap,
    ns: Netns,
    epoch: std::time::Instant,
    rx: Batch,
    tx: Batch,
    /// Super-frames (GSO) sent to the kernel.
    tx_gso: u64,
}

impl Host {
    fn new(offloads: bool) -> Host {
        assert!(netns::is_root(), "system tests need root");
        let ns = Netns::new("lrudp").unwrap();
        let want = if offloads {
            TapOffloads {
                uso: true,
                ..TapOffloads::TSO
            }
        } else {
            TapOffloads::NONE
        };
        let tap = Tap::open(&TapConfig {
            offloads: want,
            ..TapConfig::new(netns::unique("lrtu"))
        })
        .unwrap();
        netns::ip(&["link", "set", tap.name(), "netns", ns.name()]).unwrap();
        ns.ip(&["addr", "add", "10.78.0.1/24", "dev", tap.name()])
            .unwrap();
        ns.ip(&[
            "-6",
            "addr",
            "add",
            "fd78::1/64",
            "dev",
            tap.name(),
            "nodad",
        ])
        .unwrap();
        ns.ip(&["link", "set", tap.name(), "up"]).unwrap();
        let mut cfg = Config::new(OUR_MAC)
            .with_ipv4(OUR_V4, 24)
            .with_ipv6(OUR_V6, 64);
        cfg.offloads = offloads;
        Host {
            engine: Engine::new(cfg, 0x5eed),
            tap,
            ns,
            epoch: std::time::Instant::now(),
            rx: Batch::new(),
            tx: Batch::new(),
            tx_gso: 0,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    /// One round of the driver loop; waits up to `wait` on the TAP when there was
    /// nothing to do.
    fn pump(&mut self, wait: Duration) {
        let now = self.now();
        let mut got = 0;
        loop {
            let n = self.tap.receive(0, &mut self.rx, 64).unwrap();
            for f in self.rx.drain(..) {
                self.engine.handle_frame(now, f.bytes(), &f.meta);
            }
            got += n;
            if n < 64 {
                break;
            }
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        let (tx, pool, tx_gso) = (&mut self.tx, self.tap.pool(), &mut self.tx_gso);
        let sent = self.engine.poll_transmit(now, &mut |f, m| {
            *tx_gso += u64::from(m.gso.is_some());
            tx.push(Frame::new(pool.alloc_from(f), *m));
        });
        while !self.tx.is_empty() {
            let n = self.tap.transmit(0, &mut self.tx).unwrap();
            if n == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        if got == 0 && sent == 0 {
            let until_timer = self
                .engine
                .poll_timeout()
                .map_or(wait, |t| t.saturating_duration_since(self.now()));
            let w = wait.min(until_timer);
            if !w.is_zero() {
                self.tap.readiness(0).unwrap().wait(w).unwrap();
            }
        }
    }

    /// Pumps until `done` or `limit` passes; panics on timeout with `what`.
    fn pump_until(&mut self, limit: Duration, what: &str, mut done: impl FnMut(&mut Host) -> bool) {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            self.pump(Duration::from_millis(2));
        }
    }

    /// Waits for one datagram on `h`.
    fn recv(&mut self, h: UdpHandle, what: &str) -> (Vec<u8>, SocketAddr) {
        let mut got = None;
        self.pump_until(Duration::from_secs(10), what, |h2| {
            got = h2
                .engine
                .udp_recv_with(h, |d, from| (d.to_vec(), from))
                .ok();
            got.is_some()
        });
        got.unwrap()
    }
}

fn payload(id: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (id * 131 + i * 7) as u8).collect()
}

/// Linerate sends datagrams to a kernel echo socket and checks every echo.
fn echo(offloads: bool, v6: bool) {
    let mut h = Host::new(offloads);
    let kernel_ip: IpAddr = if v6 {
        KERNEL_V6.into()
    } else {
        KERNEL_V4.into()
    };
    let server = SocketAddr::new(kernel_ip, 7000);
    let sizes: Vec<usize> = vec![0, 1, 2, 100, 512, 1000, 1200, if v6 { 1452 } else { 1472 }];
    let uso = 20usize;
    let expect = sizes.len() + uso;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let kernel =
        h.ns.spawn(move || {
            let s = UdpSocket::bind(server).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = vec![0u8; 65_536];
            let mut lens = Vec::new();
            for _ in 0..expect {
                let (n, from) = s.recv_from(&mut buf).unwrap();
                s.send_to(&buf[..n], from).unwrap();
                lens.push(n);
            }
            lens
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let any: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }.parse().unwrap();
    let u = h.engine.udp_bind(any).unwrap();
    let mut kernel_saw = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data = payload(i, n);
        h.engine.udp_send_to(u, &data, server).unwrap();
        let (back, from) = h.recv(u, "echo");
        assert_eq!(from, server);
        assert_eq!(back, data, "offloads {offloads} v6 {v6} size {n}");
        kernel_saw.push(n);
    }
    // 20 datagrams of 1000 bytes in one send: one USO super-frame with
    // offloads on (the kernel segments it), 20 frames without.
    let data = payload(99, uso * 1000);
    h.engine
        .udp_send_to_segmented(u, &data, server, 1000)
        .unwrap();
    let mut echoed = Vec::new();
    for _ in 0..uso {
        let (back, from) = h.recv(u, "segmented echo");
        assert_eq!(from, server);
        echoed.push(back);
    }
    assert!(echoed.iter().all(|d| d.len() == 1000));
    assert_eq!(echoed.concat(), data, "in order, byte for byte");
    h.pump_until(Duration::from_secs(10), "kernel done", |_| {
        kernel.is_finished()
    });
    let lens = kernel.join().unwrap().unwrap();
    kernel_saw.extend(std::iter::repeat_n(1000, uso));
    assert_eq!(lens, kernel_saw);
    assert_eq!(h.tx_gso > 0, offloads, "{} USO frames sent", h.tx_gso);
    let c = h.engine.counters();
    assert_eq!((c.udp_in_errors, c.udp_in_csum_errors), (0, 0));
    eprintln!(
        "offloads {offloads} v6 {v6}: {} datagrams out, {} in",
        c.udp_out_datagrams, c.udp_in_datagrams
    );
}

#[test]
fn datagrams_both_ways_v4_offloads_on() {
    echo(true, false);
}

#[test]
fn datagrams_both_ways_v4_offloads_off() {
    echo(false, false);
}

#[test]
fn datagrams_both_ways_v6_offloads_on() {
    echo(true, true);
}

#[test]
fn datagrams_both_ways_v6_offloads_off() {
    echo(false, true);
}

#[test]
fn kernel_gets_econnrefused_from_a_closed_linerate_port() {
    let mut h = Host::new(true);
    for (ours, kernel) in [
        (IpAddr::from(OUR_V4), IpAddr::from(KERNEL_V4)),
        (IpAddr::from(OUR_V6), IpAddr::from(KERNEL_V6)),
    ] {
        let before = h.engine.counters().icmp_out_dest_unreachs;
        let closed = SocketAddr::new(ours, 7999);
        let t =
            h.ns.spawn(move || {
                let s = UdpSocket::bind(SocketAddr::new(kernel, 0)).unwrap();
                s.connect(closed).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(200)))
                    .unwrap();
                // The error arrives asynchronously: the send after it, or a
                // receive, reports it.
                for _ in 0..50 {
                    if let Err(e) = s.send(b"anyone?") {
                        return e.kind();
                    }
                    match s.recv(&mut [0u8; 16]) {
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == ErrorKind::TimedOut => {}
                        Err(e) => return e.kind(),
                        Ok(_) => panic!("a datagram from a closed port"),
                    }
                }
                ErrorKind::Other
            })
            .unwrap();
        h.pump_until(Duration::from_secs(20), "kernel error", |_| t.is_finished());
        assert_eq!(
            t.join().unwrap().unwrap(),
            ErrorKind::ConnectionRefused,
            "{ours}"
        );
        let c = h.engine.counters();
        assert!(c.icmp_out_dest_unreachs > before);
        assert!(c.udp_no_ports > 0);
    }
    // And a linerate socket bound there takes the datagrams instead.
    let u = h
        .engine
        .udp_bind(SocketAddr::new(OUR_V4.into(), 7999))
        .unwrap();
    let t =
        h.ns.spawn(|| {
            let s = UdpSocket::bind((KERNEL_V4, 0)).unwrap();
            s.send_to(b"now open", (OUR_V4, 7999)).unwrap();
            s.local_addr().unwrap()
        })
        .unwrap();
    let (data, from) = h.recv(u, "datagram to the open port");
    assert_eq!(data, b"now open");
    h.pump_until(Duration::from_secs(5), "sender done", |_| t.is_finished());
    assert_eq!(from, t.join().unwrap().unwrap());
    assert_eq!(
        h.engine.udp_recv_from(u, &mut [0; 4]),
        Err(UdpRecvError::WouldBlock)
    );
}
