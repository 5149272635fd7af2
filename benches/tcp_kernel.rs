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
//! * `kernel/from_linerate/<tso|plain>`: a linerate client to a kernel server.
//!
//! The engine runs on the bench thread, the kernel's sockets on threads in the
//! namespace; on two cores both ends get one each. Criterion gives bytes per
//! second of wall time. After each case the bench prints the whole process's CPU
//! seconds per GB (all threads and their system calls, so both ends of the
//! transfer and the kernel's work on their behalf; softirq work the kernel
//! hands to ksoftirqd is not in it).
//!
//! Run with `cargo bench --features system-tests --bench tcp_kernel`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::toe::{Error, TcpState};
use linerate_testkit::cpu::{CpuTime, process_cpu_time};
use linerate_testkit::netns::{self, Netns, VethPair};
use linerate_testkit::stream;
use linerate_testkit::tap::{KERNEL_IP, OUR_IP, TapHost};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
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

/// A kernel client to a linerate server over a TAP.
fn to_linerate(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
    let mut h = TapHost::new("lrkt", offloads).expect("TAP host");
    let l = h.engine_mut().tcp_listen(5001).expect("listen");
    let data = vec![0x5au8; WRITE];
    let name = format!("to_linerate/{}", if offloads { "tso" } else { "plain" });
    let mut buf = vec![0u8; WRITE];
    case(c, &name, log, || {
        let d = data.clone();
        let start = std::time::Instant::now();
        let client =
            h.ns.spawn(move || -> std::io::Result<()> {
                let mut s = TcpStream::connect((OUR_IP, 5001))?;
                kernel_send(&mut s, &d)?;
                // The server's close: EOF.
                kernel_drain(&mut s).map(|_| ())
            })
            .expect("namespace");
        let s = h.accept(l).expect("accept");
        let (mut got, mut eof) = (0usize, false);
        h.pump_until(LIMIT, "bulk receive", |h| {
            loop {
                match h.engine_mut().tcp_recv(s, &mut buf) {
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
        })
        .expect("transfer");
        let wall = start.elapsed();
        assert_eq!(got, LEN);
        h.engine_mut().tcp_close(s).expect("close");
        h.pump_until(LIMIT, "kernel sees EOF", |_| client.is_finished())
            .expect("close");
        client
            .join()
            .expect("client")
            .expect("namespace")
            .expect("client io");
        wall
    });
}

/// A linerate client to a kernel server over a TAP.
fn from_linerate(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
    let mut h = TapHost::new("lrkf", offloads).expect("TAP host");
    let listener =
        h.ns.run(|| TcpListener::bind((KERNEL_IP, 5002)))
            .expect("namespace")
            .expect("bind");
    let data = vec![0x5au8; WRITE];
    let name = format!("from_linerate/{}", if offloads { "tso" } else { "plain" });
    case(c, &name, log, || {
        let start = std::time::Instant::now();
        let server = kernel_server(&listener);
        let now = h.now();
        let conn = h
            .engine_mut()
            .tcp_connect(now, SocketAddr::from((KERNEL_IP, 5002)))
            .expect("connect");
        let (mut sent, mut shut) = (0usize, false);
        h.pump_until(LIMIT, "bulk send", |h| {
            while !shut {
                if sent == LEN {
                    h.engine_mut().tcp_shutdown(conn).expect("shutdown");
                    shut = true;
                    break;
                }
                let n = (LEN - sent).min(data.len());
                match h.engine_mut().tcp_send(conn, &data[..n]) {
                    Ok(k) => sent += k,
                    Err(Error::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            server.is_finished()
        })
        .expect("transfer");
        let wall = start.elapsed();
        assert_eq!(server.join().expect("server").expect("server io"), LEN);
        // The kernel's FIN follows; the connection winds down.
        h.pump_until(LIMIT, "close", |h| {
            matches!(
                h.engine().tcp_state(conn),
                Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed)
                    | Err(Error::InvalidHandle)
            )
        })
        .expect("close");
        wall
    });
}

fn kernel(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("tcp_kernel benches skipped: they need root");
        return;
    }
    let mut log = Vec::new();
    for offloads in [true, false] {
        veth(c, offloads, &mut log);
        to_linerate(c, offloads, &mut log);
        from_linerate(c, offloads, &mut log);
    }
    println!("\nCPU seconds per GB, whole process (both ends):");
    for (name, figure) in &log {
        println!("  {name:<22} {figure:.3}");
    }
}

criterion_group!(benches, kernel);
criterion_main!(benches);
