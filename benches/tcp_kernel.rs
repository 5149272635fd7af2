//! TCP bulk against the Linux kernel, side by side in one run (root only; skipped
//! with a message otherwise). Each iteration moves [`LEN`] bytes over one new
//! connection in writes of 256 KiB and counts them at the receiver:
//!
//! * `kernel/veth/<tso|plain>`: the reference: a kernel client in one namespace
//!   to a kernel server in another, over a veth pair, with veth's default
//!   offloads (TSO, GRO, checksums skipped between two ends of one host) or with
//!   them off (`ethtool -K`: MTU-sized segments with full checksums, no GRO);
//! * `kernel/to_linerate/<tso|plain>`: a kernel client to a linerate server over
//!   a TAP ([`TapHost`]) with the TAP's offloads on (64 KiB super-frames both ways,
//!   partial checksums) or off (MTU-sized frames, full checksums);
//! * `kernel/from_linerate/<tso|plain>`: a linerate client to a kernel server;
//! * with the `af-xdp` feature, `kernel/xdp_to_linerate/<shim|off>` and
//!   `kernel/xdp_from_linerate/<shim|off>`: the same two transfers with the
//!   engine on an AF_XDP socket (copy mode, the XDP program native, generic
//!   where refused) on one end of a veth pair whose other end is the kernel's
//!   in a namespace, segmentation offloads off there (AF_XDP takes MTU-sized
//!   frames with full checksums). `shim`: the engine hands the shim 64 KiB
//!   super-segments with partial checksums, the shim segments them and
//!   completes the checksums in one pass and coalesces received frames with
//!   GRO; `off`: the engine builds and checksums every MSS segment and handles
//!   every received frame itself.
//!
//! The engine runs on the bench thread, the kernel's sockets on threads in the
//! namespace; on two cores both ends get one each. Criterion gives bytes per
//! second of wall time. After each case the bench prints the whole process's CPU
//! seconds per GB (all threads and their system calls, so both ends of the
//! transfer and the kernel's work on their behalf; softirq work the kernel
//! hands to ksoftirqd is not in it).
//!
//! Run with `cargo bench --features system-tests --bench tcp_kernel` (add
//! `af-xdp` to the features for the AF_XDP cases).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::toe::{Engine, Instant, InvalidHandle, RecvError, SendError, TcpState};
use linerate_testkit::cpu::{CpuTime, process_cpu_time};
use linerate_testkit::netns::{self, Netns, VethPair};
use linerate_testkit::stream;
use linerate_testkit::tap::{KERNEL_IP, OUR_IP, TapHost};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Bytes per iteration.
const LEN: usize = 64 << 20;
/// Bytes per write (and per read buffer).
const WRITE: usize = 256 << 10;
/// Longest a transfer may take before the bench gives up.
const LIMIT: Duration = Duration::from_secs(60);

/// Writes `LEN` bytes to `s` and half-closes it.
fn kernel_send(s: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    stream::write_len(s, data, LEN)?;
    s.shutdown(Shutdown::Write)
}

/// Reads `s` to EOF; returns the byte count.
fn kernel_drain(s: &mut TcpStream) -> std::io::Result<usize> {
    stream::drain(s)
}

/// A thread that accepts one connection on `listener` and reads it to EOF.
fn kernel_server(listener: &TcpListener) -> std::thread::JoinHandle<std::io::Result<usize>> {
    let l = listener.try_clone().expect("listener");
    std::thread::spawn(move || {
        let (mut s, _) = l.accept()?;
        kernel_drain(&mut s)
    })
}

/// CPU seconds per GB over `bytes`.
fn per_gb(cpu: Duration, bytes: u64) -> f64 {
    cpu.as_secs_f64() / (bytes as f64 / 1e9)
}

/// Runs one case: `transfer` moves `LEN` bytes and returns its wall time.
fn case(
    c: &mut Criterion,
    name: &str,
    cpu_log: &mut Vec<(String, f64)>,
    mut transfer: impl FnMut() -> Duration,
) {
    let mut g = c.benchmark_group("kernel");
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
    if bytes == 0 {
        // Filtered out on the command line.
        return;
    }
    let figure = per_gb(cpu, bytes);
    println!("kernel/{name}: {figure:.3} CPU s/GB (process, both ends)");
    cpu_log.push((name.to_owned(), figure));
}

/// Kernel to kernel over a veth pair between two namespaces, offloads on or off.
fn veth(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
    let a = Netns::new("lrka").expect("namespace");
    let b = Netns::new("lrkb").expect("namespace");
    let pair = VethPair::new(&a, "10.78.0.1/24", &b, "10.78.0.2/24").expect("veth");
    if !offloads {
        let off = [
            "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
        ];
        for (ns, dev) in [(&a, &pair.a), (&b, &pair.b)] {
            let mut args = vec!["-K", dev.as_str()];
            args.extend(off);
            ns.exec("ethtool", &args).expect("ethtool -K");
        }
    }
    let name = format!("veth/{}", if offloads { "tso" } else { "plain" });
    let listener = b
        .run(|| TcpListener::bind(("10.78.0.2", 5003)))
        .expect("namespace")
        .expect("bind");
    let data = vec![0x5au8; WRITE];
    case(c, &name, log, || {
        let start = std::time::Instant::now();
        let server = kernel_server(&listener);
        let d = data.clone();
        let client = a
            .spawn(move || -> std::io::Result<()> {
                let mut s = TcpStream::connect(("10.78.0.2", 5003))?;
                kernel_send(&mut s, &d)
            })
            .expect("namespace");
        let got = server.join().expect("server").expect("server io");
        let wall = start.elapsed();
        client
            .join()
            .expect("client")
            .expect("namespace")
            .expect("client io");
        assert_eq!(got, LEN);
        wall
    });
}

/// An engine facing the kernel in a namespace: over a TAP, or over AF_XDP.
trait Host {
    fn engine(&mut self) -> &mut Engine;
    fn now(&self) -> Instant;
    fn ns(&self) -> &Netns;
    /// Pumps until `done` (panics after [`LIMIT`], naming `what`).
    fn pump_until(&mut self, what: &str, done: &mut dyn FnMut(&mut Engine) -> bool);
}

impl Host for TapHost {
    fn engine(&mut self) -> &mut Engine {
        self.engine_mut()
    }
    fn now(&self) -> Instant {
        TapHost::now(self)
    }
    fn ns(&self) -> &Netns {
        &self.ns
    }
    fn pump_until(&mut self, what: &str, done: &mut dyn FnMut(&mut Engine) -> bool) {
        TapHost::pump_until(self, LIMIT, what, |h| done(h.engine_mut())).expect(what);
    }
}

/// A kernel client to a linerate server (`what`: the case's name).
fn to_linerate(
    c: &mut Criterion,
    h: &mut dyn Host,
    name: &str,
    port: u16,
    our_ip: Ipv4Addr,
    log: &mut Vec<(String, f64)>,
) {
    let l = h.engine().tcp_listen(port).expect("listen");
    let data = vec![0x5au8; WRITE];
    let mut buf = vec![0u8; WRITE];
    case(c, name, log, || {
        let d = data.clone();
        let start = std::time::Instant::now();
        let client = h
            .ns()
            .spawn(move || -> std::io::Result<()> {
                let mut s = TcpStream::connect((our_ip, port))?;
                kernel_send(&mut s, &d)?;
                // The server's close: EOF.
                kernel_drain(&mut s).map(|_| ())
            })
            .expect("namespace");
        let mut s = None;
        h.pump_until("accept", &mut |e| {
            s = e.tcp_accept(l).ok();
            s.is_some()
        });
        let s = s.expect("accepted");
        let (mut got, mut eof) = (0usize, false);
        h.pump_until("bulk receive", &mut |e| {
            loop {
                match e.tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => got += n,
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("recv after {got} bytes: {e}"),
                }
            }
            eof
        });
        let wall = start.elapsed();
        assert_eq!(got, LEN);
        h.engine().tcp_close(s).expect("close");
        h.pump_until("kernel sees EOF", &mut |_| client.is_finished());
        client
            .join()
            .expect("client")
            .expect("namespace")
            .expect("client io");
        wall
    });
}

/// A linerate client to a kernel server at `kernel_ip`.
fn from_linerate(
    c: &mut Criterion,
    h: &mut dyn Host,
    name: &str,
    port: u16,
    kernel_ip: Ipv4Addr,
    log: &mut Vec<(String, f64)>,
) {
    let listener = h
        .ns()
        .run(move || TcpListener::bind((kernel_ip, port)))
        .expect("namespace")
        .expect("bind");
    let data = vec![0x5au8; WRITE];
    case(c, name, log, || {
        let start = std::time::Instant::now();
        let server = kernel_server(&listener);
        let now = h.now();
        let conn = h
            .engine()
            .tcp_connect(now, SocketAddr::from((kernel_ip, port)))
            .expect("connect");
        let (mut sent, mut shut) = (0usize, false);
        h.pump_until("bulk send", &mut |e| {
            while !shut {
                if sent == LEN {
                    e.tcp_shutdown(conn).expect("shutdown");
                    shut = true;
                    break;
                }
                let n = (LEN - sent).min(data.len());
                match e.tcp_send(conn, &data[..n]) {
                    Ok(k) => sent += k,
                    Err(SendError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            server.is_finished()
        });
        let wall = start.elapsed();
        assert_eq!(server.join().expect("server").expect("server io"), LEN);
        // The kernel's FIN follows; the connection winds down.
        h.pump_until("close", &mut |e| {
            matches!(
                e.tcp_state(conn),
                Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed) | Err(InvalidHandle)
            )
        });
        wall
    });
}

/// Both transfers over a TAP with its offloads on or off.
fn tap(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
    let label = if offloads { "tso" } else { "plain" };
    let mut h = TapHost::new("lrkt", offloads).expect("TAP host");
    to_linerate(
        c,
        &mut h,
        &format!("to_linerate/{label}"),
        5001,
        OUR_IP,
        log,
    );
    let mut h = TapHost::new("lrkf", offloads).expect("TAP host");
    from_linerate(
        c,
        &mut h,
        &format!("from_linerate/{label}"),
        5002,
        KERNEL_IP,
        log,
    );
}

#[cfg(feature = "af-xdp")]
mod xdp {
    //! The engine over AF_XDP on a veth pair.

    use super::{Host, LIMIT, from_linerate, to_linerate};
    use criterion::Criterion;
    use linerate::nic::xdp::{Xdp, XdpAttach, XdpConfig};
    use linerate::nic::{Nic, Shim, ShimConfig};
    use linerate::rt::Driver;
    use linerate::toe::{Config, Engine, Instant};
    use linerate_testkit::netns::{Netns, RootVeth};
    use std::net::Ipv4Addr;
    use std::time::Duration;

    const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x05];
    const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 1);
    const OUR_IP: Ipv4Addr = Ipv4Addr::new(10, 217, 0, 2);

    /// The engine on an AF_XDP NIC (or the shim over one), the kernel's end of
    /// the pair in `ns`. Field order: the driver (and its socket) goes first.
    struct XdpHost<N: Nic> {
        driver: Driver<N>,
        ns: Netns,
        _veth: RootVeth,
        epoch: std::time::Instant,
    }

    impl<N: Nic> Host for XdpHost<N> {
        fn engine(&mut self) -> &mut Engine {
            self.driver.engine_mut()
        }
        fn now(&self) -> Instant {
            Instant::from_nanos(u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX))
        }
        fn ns(&self) -> &Netns {
            &self.ns
        }
        fn pump_until(&mut self, what: &str, done: &mut dyn FnMut(&mut Engine) -> bool) {
            let end = std::time::Instant::now() + LIMIT;
            while !done(self.driver.engine_mut()) {
                assert!(std::time::Instant::now() < end, "timed out: {what}");
                let before = self.driver.stats();
                let next = self.driver.poll(self.now()).expect("poll");
                let after = self.driver.stats();
                if after.rx_frames == before.rx_frames && after.tx_frames == before.tx_frames {
                    self.driver
                        .wait(self.now(), next, Duration::from_millis(1))
                        .expect("wait");
                }
            }
        }
    }

    /// A veth pair: ours up in the root namespace, the peer in a new namespace
    /// at [`KERNEL_IP`] with TSO, GSO, GRO and checksum offload off; and an
    /// AF_XDP socket on ours.
    fn pair() -> Option<(RootVeth, Netns, Xdp)> {
        let ns = Netns::new("lrtx").expect("namespace");
        let veth = RootVeth::new("ltx", &ns, &format!("{KERNEL_IP}/24")).expect("veth");
        let k = [
            "-K", &veth.peer, "tso", "off", "gso", "off", "gro", "off", "tx", "off",
        ];
        ns.exec("ethtool", &k).expect("ethtool -K");
        let ours = veth.ours.clone();
        for attach in [XdpAttach::Native, XdpAttach::Generic] {
            let cfg = XdpConfig {
                attach,
                mount_bpffs: true,
                ..XdpConfig::new(ours.clone())
            };
            match Xdp::open(&cfg) {
                Ok(x) => return Some((veth, ns, x)),
                Err(e) => eprintln!("AF_XDP open ({attach:?}) failed: {e}"),
            }
        }
        None
    }

    fn host<N: Nic>(nic: N, veth: RootVeth, ns: Netns, offloads: bool) -> XdpHost<N> {
        let mut cfg = Config::new(OUR_MAC).with_ipv4(OUR_IP, 24);
        cfg.offloads = offloads;
        cfg.tcp.send_buffer = 4 << 20;
        cfg.tcp.recv_buffer = 4 << 20;
        XdpHost {
            driver: Driver::new(Engine::new(cfg, 0x5eed), nic, 0).expect("driver"),
            ns,
            _veth: veth,
            epoch: std::time::Instant::now(),
        }
    }

    /// Both transfers, the engine on the shim over AF_XDP or on AF_XDP alone.
    pub(super) fn cases(c: &mut Criterion, shim: bool, log: &mut Vec<(String, f64)>) {
        let Some((veth, ns, x)) = pair() else {
            eprintln!("AF_XDP cases skipped: no AF_XDP socket");
            return;
        };
        let label = if shim { "shim" } else { "off" };
        let to = format!("xdp_to_linerate/{label}");
        let from = format!("xdp_from_linerate/{label}");
        if shim {
            let mut h = host(
                Shim::new(x, ShimConfig::all()).expect("shim"),
                veth,
                ns,
                true,
            );
            to_linerate(c, &mut h, &to, 5001, OUR_IP, log);
            from_linerate(c, &mut h, &from, 5002, KERNEL_IP, log);
        } else {
            let mut h = host(x, veth, ns, false);
            to_linerate(c, &mut h, &to, 5001, OUR_IP, log);
            from_linerate(c, &mut h, &from, 5002, KERNEL_IP, log);
        }
    }
}

fn kernel(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("tcp_kernel benches skipped: they need root");
        return;
    }
    let mut log = Vec::new();
    for offloads in [true, false] {
        veth(c, offloads, &mut log);
        tap(c, offloads, &mut log);
    }
    #[cfg(feature = "af-xdp")]
    for shim in [true, false] {
        xdp::cases(c, shim, &mut log);
    }
    println!("\nCPU seconds per GB, whole process (both ends):");
    for (name, figure) in &log {
        println!("  {name:<22} {figure:.3}");
    }
}

criterion_group!(benches, kernel);
criterion_main!(benches);
