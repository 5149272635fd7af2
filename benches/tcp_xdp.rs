//! TCP bulk over AF_XDP on a veth pair, the engine with the shim's software
//! GSO/GRO and checksums against the engine with offloads off, side by side in
//! one run (root only; skipped with a message otherwise).
//!
//! One veth end stays in the root namespace with an AF_XDP socket on its queue 0
//! (copy mode, the XDP program attached native, generic where refused); the
//! other is in a namespace with the kernel at 10.217.0.1, its segmentation
//! offloads off (AF_XDP takes MTU-sized frames, full checksums). Each iteration
//! moves [`LEN`] bytes over one new connection, both ways:
//!
//! * `xdp/to_linerate/<shim|off>`: a kernel client writes, the engine reads;
//! * `xdp/from_linerate/<shim|off>`: the engine writes, a kernel server reads.
//!
//! `shim`: the engine hands the shim 64 KiB super-segments with partial
//! checksums; the shim cuts them into MTU frames and completes the checksums in
//! one pass, and coalesces received frames with GRO before the engine sees
//! them. `off`: the engine builds every MSS segment and its checksum itself and
//! handles every received frame. After each case the bench prints the whole
//! process's CPU seconds per GB (both ends and the kernel's work on their
//! behalf, less what ksoftirqd does).
//!
//! Run with `sudo cargo bench --features af-xdp,system-tests --bench tcp_xdp`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::xdp::{Xdp, XdpAttach, XdpConfig};
use linerate::nic::{Nic, Shim, ShimConfig};
use linerate::rt::Driver;
use linerate::toe::{Config, Engine, Error, Instant, TcpState};
use linerate_testkit::cpu::{CpuTime, process_cpu_time};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::stream;
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Bytes per iteration.
const LEN: usize = 32 << 20;
/// Bytes per write (and per read buffer).
const WRITE: usize = 256 << 10;
/// Longest a transfer may take before the bench gives up.
const LIMIT: Duration = Duration::from_secs(60);
const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x05];
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 1);
const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 2);

/// The root end of a veth pair, deleted (with its peer) on drop.
struct Veth(String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = netns::ip(&["link", "del", &self.0]);
    }
}

/// The pair: our end up in the root namespace, the peer in a new namespace
/// at [`KERNEL_IP`] with TSO, GSO and checksum offload off.
fn veth_pair() -> (Veth, Netns) {
    let ns = Netns::new("lrtx").expect("namespace");
    let ours = netns::unique("ltxa");
    let peer = netns::unique("ltxb");
    netns::ip(&["link", "add", &ours, "type", "veth", "peer", "name", &peer]).expect("veth");
    let veth = Veth(ours.clone());
    netns::ip(&["link", "set", &peer, "netns", ns.name()]).expect("move");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{ours}/disable_ipv6"), "1");
    let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{peer}/disable_ipv6");
    let _ = ns.exec("sh", &["-c", &off]);
    ns.exec(
        "ethtool",
        &[
            "-K", &peer, "tso", "off", "gso", "off", "gro", "off", "tx", "off",
        ],
    )
    .expect("ethtool -K");
    let cidr = format!("{KERNEL_IP}/24");
    ns.ip(&["addr", "add", &cidr, "dev", &peer]).expect("addr");
    ns.ip(&["link", "set", &peer, "up"]).expect("up");
    netns::ip(&["link", "set", &ours, "up"]).expect("up");
    (veth, ns)
}

/// The engine on a NIC, driven by the runtime's driver on this thread.
struct Host<N: Nic> {
    driver: Driver<N>,
    epoch: std::time::Instant,
}

impl<N: Nic> Host<N> {
    fn new(nic: N, offloads: bool) -> Host<N> {
        let mut cfg = Config::new(OUR_MAC).with_ipv4(OUR_IP, 24);
        cfg.offloads = offloads;
        cfg.tcp.send_buffer = 4 << 20;
        cfg.tcp.recv_buffer = 4 << 20;
        let driver = Driver::new(Engine::new(cfg, 0x5eed), nic, 0).expect("driver");
        Host {
            driver,
            epoch: std::time::Instant::now(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    fn engine(&mut self) -> &mut Engine {
        self.driver.engine_mut()
    }

    /// One round; if it moved nothing, waits a moment for the NIC or a timer.
    fn pump(&mut self) {
        let before = self.driver.stats();
        let next = self.driver.poll(self.now()).expect("poll");
        let after = self.driver.stats();
        if after.rx_frames == before.rx_frames && after.tx_frames == before.tx_frames {
            self.driver
                .wait(self.now(), next, Duration::from_millis(1))
                .expect("wait");
        }
    }

    fn pump_until(&mut self, what: &str, mut done: impl FnMut(&mut Host<N>) -> bool) {
        let end = std::time::Instant::now() + LIMIT;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            self.pump();
        }
    }
}

/// Runs one case: `transfer` moves `LEN` bytes and returns its wall time.
fn case(
    c: &mut Criterion,
    name: &str,
    log: &mut Vec<(String, f64)>,
    mut transfer: impl FnMut() -> Duration,
) {
    let mut g = c.benchmark_group("xdp");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Bytes(LEN as u64));
    let (mut cpu, mut bytes) = (Duration::ZERO, 0u64);
    g.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter_custom(|iters| {
            let before: CpuTime = process_cpu_time();
            let wall = (0..iters).map(|_| transfer()).sum();
            cpu += process_cpu_time().since(before).total();
            bytes += iters * LEN as u64;
            wall
        });
    });
    g.finish();
    if bytes > 0 {
        let figure = cpu.as_secs_f64() / (bytes as f64 / 1e9);
        println!("xdp/{name}: {figure:.3} CPU s/GB (process, both ends)");
        log.push((name.to_owned(), figure));
    }
}

/// Both directions over `nic`.
fn directions<N: Nic>(
    c: &mut Criterion,
    nic: N,
    ns: &Netns,
    label: &str,
    offloads: bool,
    log: &mut Vec<(String, f64)>,
) {
    let mut h = Host::new(nic, offloads);
    let data = vec![0x5au8; WRITE];

    // The kernel writes, the engine reads.
    let l = h.engine().tcp_listen(5001).expect("listen");
    let mut buf = vec![0u8; WRITE];
    case(c, &format!("to_linerate/{label}"), log, || {
        let d = data.clone();
        let start = std::time::Instant::now();
        let client = ns
            .spawn(move || -> std::io::Result<()> {
                let mut s = TcpStream::connect((OUR_IP, 5001))?;
                stream::write_len(&mut s, &d, LEN)?;
                s.shutdown(Shutdown::Write)?;
                stream::drain(&mut s).map(|_| ())
            })
            .expect("namespace");
        let mut s = None;
        h.pump_until("accept", |h| {
            s = h.engine().tcp_accept(l).ok();
            s.is_some()
        });
        let s = s.expect("accepted");
        let (mut got, mut eof) = (0usize, false);
        h.pump_until("bulk receive", |h| {
            loop {
                match h.engine().tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => got += n,
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("recv after {got} bytes: {e}"),
                }
            }
            eof
        });
        let wall = start.elapsed();
        assert_eq!(got, LEN);
        h.engine().tcp_close(s).expect("close");
        h.pump_until("kernel sees EOF", |_| client.is_finished());
        client
            .join()
            .expect("client")
            .expect("namespace")
            .expect("client io");
        wall
    });

    // The engine writes, the kernel reads.
    let listener = ns
        .run(|| TcpListener::bind((KERNEL_IP, 5002)))
        .expect("namespace")
        .expect("bind");
    case(c, &format!("from_linerate/{label}"), log, || {
        let start = std::time::Instant::now();
        let l = listener.try_clone().expect("listener");
        let server = std::thread::spawn(move || -> std::io::Result<usize> {
            let (mut s, _) = l.accept()?;
            stream::drain(&mut s)
        });
        let now = h.now();
        let conn = h
            .engine()
            .tcp_connect(now, SocketAddr::from((KERNEL_IP, 5002)))
            .expect("connect");
        let (mut sent, mut shut) = (0usize, false);
        h.pump_until("bulk send", |h| {
            while !shut {
                if sent == LEN {
                    h.engine().tcp_shutdown(conn).expect("shutdown");
                    shut = true;
                    break;
                }
                let n = (LEN - sent).min(data.len());
                match h.engine().tcp_send(conn, &data[..n]) {
                    Ok(k) => sent += k,
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            server.is_finished()
        });
        let wall = start.elapsed();
        assert_eq!(server.join().expect("server").expect("server io"), LEN);
        h.pump_until("close", |h| {
            matches!(
                h.engine().tcp_state(conn),
                Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed)
                    | Err(Error::InvalidHandle)
            )
        });
        wall
    });
}

fn open(veth: &Veth) -> Option<Xdp> {
    for attach in [XdpAttach::Native, XdpAttach::Generic] {
        match Xdp::open(&XdpConfig {
            attach,
            mount_bpffs: true,
            ..XdpConfig::new(veth.0.clone())
        }) {
            Ok(x) => return Some(x),
            Err(e) => eprintln!("AF_XDP open ({attach:?}) failed: {e}"),
        }
    }
    None
}

fn xdp(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("tcp_xdp benches skipped: they need root");
        return;
    }
    let mut log = Vec::new();
    for offloads in [true, false] {
        let (veth, ns) = veth_pair();
        let Some(x) = open(&veth) else {
            eprintln!("tcp_xdp skipped: no AF_XDP socket");
            return;
        };
        if offloads {
            let shim = Shim::new(x, ShimConfig::all()).expect("shim");
            directions(c, shim, &ns, "shim", true, &mut log);
        } else {
            directions(c, x, &ns, "off", false, &mut log);
        }
        drop(veth);
    }
    println!("\nCPU seconds per GB, whole process (both ends):");
    for (name, figure) in &log {
        println!("  {name:<22} {figure:.3}");
    }
}

criterion_group!(benches, xdp);
criterion_main!(benches);
