//! The tunnel endpoint against the kernel's, side by side in one run (issue 13's
//! performance figure; root only, skipped with a message otherwise). Each
//! iteration moves [`LEN`] bytes over one new kernel TCP connection from
//! namespace A to namespace B, through VXLAN (VNI 42, port 4789):
//!
//! * `vxlan/kernel/<tso|plain>`: the reference: a kernel VXLAN device in each
//!   namespace over a veth pair;
//! * `vxlan/linerate/<tso|plain>`: A's kernel sends into a TAP that is a local
//!   port of the linerate VTEP (`linerate::tunnel::vtep::Vtep` on one
//!   linerate-rt worker thread), which encapsulates onto an underlay TAP whose
//!   kernel side is B's VXLAN device.
//!
//! `tso`: every device's offloads as they come (veth's and VXLAN's TSO/GRO; the
//! TAPs' vnet_hdr offloads, so A hands the VTEP 64 KiB frames it encapsulates
//! whole and the underlay shim segments once). `plain`: off everywhere
//! (`ethtool -K ... tso off gso off gro off tx off rx off` on the kernel's
//! devices, TAPs without offloads, shims with none): MTU-sized frames with full
//! checksums.
//!
//! `vxlan/linerate/tso-uring` is the `tso` case with both TAPs batched through
//! io_uring (`TapConfig::io_uring`).
//!
//! Criterion gives bytes per second of wall time. After each case the bench
//! prints the whole process's CPU seconds per GB: the client and server threads
//! (in their namespaces, with the kernel's work in their system calls) and the
//! VTEP's thread; softirq work the kernel hands to ksoftirqd is not in it.
//!
//! Then small frames, outside criterion (loss is not a time): `iperf3 -u -l 64
//! -b RATE` from A to B through each path in turn (kernel VXLAN, the VTEP with
//! a system call per frame, the VTEP through io_uring), [`UDP_ROUNDS`] rounds
//! of [`UDP_SECS`] seconds at each rate, printing the packets per second the
//! sender reached, those the server counted, and the loss. Skipped with a
//! message where iperf3 is missing.
//!
//! Run with `sudo cargo bench --features system-tests --bench vtep_kernel`
//! (`-- udp` for the small frames only, `-- vxlan` for TCP only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use linerate::nic::tap::TapOffloads;
use linerate::nic::{Nic, Offloads, Readiness, Shim, ShimConfig, Tap, TapConfig};
use linerate::rt::{Worker, Workers};
use linerate::toe::Instant;
use linerate::tunnel::vtep::Vtep;
use linerate::tunnel::vtep::config::parse;
use linerate_testkit::cpu::{CpuTime, process_cpu_time};
use linerate_testkit::netns::{self, Netns, VethPair};
use linerate_testkit::stream;
use linerate_testkit::vxlan::{IANA_PORT, KernelVtep, VxlanSpec};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Bytes per iteration.
const LEN: usize = 128 << 20;
/// Bytes per write (and per read buffer).
const WRITE: usize = 128 << 10;
const PORT: u16 = 5004;
/// Seconds per small-frame run.
const UDP_SECS: u32 = 4;
/// Small-frame rounds per path and rate.
const UDP_ROUNDS: usize = 3;
/// iperf3 `-b` rates of the small-frame runs (64-byte payloads: 60M is
/// 0.117 Mpps).
const UDP_RATES: [&str; 2] = ["60M", "130M"];

/// Writes `LEN` bytes to `s` and half-closes it.
fn kernel_send(s: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    stream::write_len(s, data, LEN)?;
    s.shutdown(Shutdown::Write)
}

/// Reads `s` to EOF; returns the byte count.
fn kernel_drain(s: &mut TcpStream) -> std::io::Result<usize> {
    stream::drain(s)
}

/// Turns a device's offloads off as the `plain` cases do.
fn ethtool_off(ns: &Netns, dev: &str) {
    let mut args = vec!["-K", dev];
    args.extend([
        "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
    ]);
    // Not every device has every flag (a TAP without vnet_hdr cannot do
    // checksums): what it refuses is already off.
    let _ = ns.exec("ethtool", &args);
}

/// One transfer from a client in `a` to the listener in `b` at `to`; the wall time.
fn transfer(a: &Netns, listener: &TcpListener, to: SocketAddr, data: &[u8]) -> Duration {
    let start = std::time::Instant::now();
    let l = listener.try_clone().expect("listener");
    let server = std::thread::spawn(move || -> std::io::Result<usize> {
        let (mut s, _) = l.accept()?;
        kernel_drain(&mut s)
    });
    let d = data.to_vec();
    let client = a
        .spawn(move || -> std::io::Result<()> {
            let mut s = TcpStream::connect(to)?;
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
}

/// Runs one case; logs its CPU seconds per GB.
fn case(
    c: &mut Criterion,
    name: &str,
    log: &mut Vec<(String, f64)>,
    mut run: impl FnMut() -> Duration,
) {
    let mut g = c.benchmark_group("vxlan");
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(LEN as u64));
    let (mut cpu, mut bytes) = (Duration::ZERO, 0u64);
    g.bench_function(BenchmarkId::from_parameter(name), |b| {
        b.iter_custom(|iters| {
            let before: CpuTime = process_cpu_time();
            let wall = (0..iters).map(|_| run()).sum();
            cpu += process_cpu_time().since(before).total();
            bytes += iters * LEN as u64;
            wall
        });
    });
    g.finish();
    if bytes > 0 {
        let figure = cpu.as_secs_f64() / (bytes as f64 / 1e9);
        println!("vxlan/{name}: {figure:.3} CPU s/GB (process: both ends and the VTEP)");
        log.push((name.to_owned(), figure));
    }
}

/// What is beyond namespace A: B and what connects them.
enum Far {
    /// A kernel VXLAN device in B over a veth pair (the pair goes with the
    /// namespaces).
    Kernel { b: Netns, _pair: VethPair },
    /// B's VXLAN device behind the linerate VTEP's underlay TAP, the VTEP on
    /// a worker thread.
    Vtep(Box<KernelVtep>, Option<Workers<VtepWorker>>),
}

/// A path from namespace A to B's overlay address through VXLAN.
struct Path {
    // Field order: the VTEP's worker stops before A's port goes.
    far: Far,
    a: Netns,
    /// B's overlay address.
    to: Ipv4Addr,
}

impl Path {
    fn b(&self) -> &Netns {
        match &self.far {
            Far::Kernel { b, .. } => b,
            Far::Vtep(k, _) => &k.ns,
        }
    }

    /// Stops the VTEP (if any) and prints its drop counters.
    fn finish(mut self) {
        if let Far::Vtep(_, workers) = &mut self.far
            && let Some(w) = workers.take()
        {
            let w = w.join().expect("vtep worker");
            for (k, v) in w[0].0.counters() {
                if v != 0 && (k.contains("drop") || k.contains("unresolved")) {
                    println!("  vtep {k}: {v}");
                }
            }
        }
    }
}

/// Kernel VXLAN to kernel VXLAN over a veth pair.
fn kernel_path(offloads: bool) -> Path {
    let a = Netns::new("lrva").expect("namespace");
    let b = Netns::new("lrvb").expect("namespace");
    let pair = VethPair::new(&a, "10.79.0.1/24", &b, "10.79.0.2/24").expect("veth");
    for (ns, dev, local, remote, addr) in [
        (&a, &pair.a, "10.79.0.1", "10.79.0.2", "192.168.43.1/24"),
        (&b, &pair.b, "10.79.0.2", "10.79.0.1", "192.168.43.2/24"),
    ] {
        let port = IANA_PORT.to_string();
        ns.ip(&[
            "link", "add", "vx0", "type", "vxlan", "id", "42", "local", local, "remote", remote,
            "dstport", &port, "dev", dev,
        ])
        .expect("vxlan");
        ns.ip(&["addr", "add", addr, "dev", "vx0"]).expect("addr");
        ns.ip(&["link", "set", "vx0", "up"]).expect("up");
        if !offloads {
            ethtool_off(ns, dev);
            ethtool_off(ns, "vx0");
        }
    }
    Path {
        far: Far::Kernel { b, _pair: pair },
        a,
        to: Ipv4Addr::new(192, 168, 43, 2),
    }
}

/// The VTEP on a worker thread.
struct VtepWorker(Vtep);

impl Worker for VtepWorker {
    fn poll(&mut self, now: Instant) -> usize {
        self.0.poll(Duration::from_nanos(now.as_nanos()))
    }

    fn readiness(&self) -> Vec<Readiness> {
        self.0.readiness()
    }
}

/// Kernel in A -> TAP -> linerate VTEP -> TAP -> kernel VXLAN in B, the TAPs
/// batched through an io_uring of depth `ring` if given (receiving through a
/// multishot read if `multishot`, else reads kept posted).
fn linerate_path(offloads: bool, ring: Option<u32>, multishot: bool) -> Path {
    let (tap_offloads, tap_tx) = if offloads {
        (TapOffloads::ALL, Offloads::ALL)
    } else {
        (TapOffloads::NONE, Offloads::NONE)
    };
    let shim = if offloads {
        ShimConfig::all()
    } else {
        ShimConfig::none()
    };
    let mut spec = VxlanSpec::new(false, 42, IANA_PORT);
    spec.offloads = tap_offloads;
    spec.tap_tx = tap_tx;
    spec.io_uring = ring;
    spec.io_uring_multishot = multishot;
    let mut b = KernelVtep::new("lrvk", &spec).expect("kernel VTEP");
    if !offloads {
        let (tap, vx) = (b.tap_name.clone(), b.vxlan_name.clone());
        ethtool_off(&b.ns, &tap);
        ethtool_off(&b.ns, &vx);
    }
    let under = Shim::new(b.take_tap().expect("underlay TAP"), shim.clone()).expect("shim");
    // The local port: a TAP whose kernel side is in namespace A.
    let a = Netns::new("lrvp").expect("namespace");
    let port = Tap::open(&TapConfig {
        offloads: tap_offloads,
        tx: tap_tx,
        mtu: spec.overlay_mtu(),
        io_uring: ring,
        io_uring_multishot: multishot,
        ..TapConfig::new(netns::unique("lrvp"))
    })
    .expect("port TAP");
    assert_eq!(
        port.io_uring_active(),
        ring.is_some(),
        "{:?}",
        port.io_uring_fallback()
    );
    let pname = port.name().to_owned();
    netns::ip(&["link", "set", &pname, "netns", a.name()]).expect("move");
    let addr = format!("{}/24", spec.ours_overlay.0);
    a.ip(&["addr", "add", &addr, "dev", &pname]).expect("addr");
    a.ip(&["link", "set", &pname, "up"]).expect("up");
    if !offloads {
        ethtool_off(&a, &pname);
    }
    let cfg = parse(&format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{}/24"
        [[vni]]
        id = 42
        encap = "vxlan"
        port = {IANA_PORT}
        flood = ["{}"]
        ports = ["{pname}"]
        "#,
        spec.ours_underlay, spec.kernel_underlay
    ))
    .expect("config");
    let port: Box<dyn Nic> = Box::new(Shim::new(port, shim).expect("shim"));
    let vtep = Vtep::new(&cfg, Box::new(under), vec![vec![port]]).expect("vtep");
    let workers = Workers::spawn(vec![VtepWorker(vtep)], "vtep").expect("worker");
    let to = spec.kernel_overlay.0;
    Path {
        far: Far::Vtep(Box::new(b), Some(workers)),
        a,
        to,
    }
}

/// TCP through `path`: the criterion case `name`.
fn tcp(c: &mut Criterion, path: &Path, name: &str, log: &mut Vec<(String, f64)>) {
    let to = SocketAddr::from((path.to, PORT));
    let listener = path
        .b()
        .run(move || TcpListener::bind(to))
        .expect("namespace")
        .expect("bind");
    let data = vec![0x5au8; WRITE];
    case(c, name, log, || transfer(&path.a, &listener, to, &data));
}

/// One small-frame run through `path` at `rate`: packets per second the
/// sender reached, packets per second the server counted, and the loss in
/// percent.
fn udp_run(path: &Path, rate: &str) -> Option<(f64, f64, f64)> {
    let to = path.to.to_string();
    let mut server = path
        .b()
        .command("iperf3")
        .args(["-s", "-1", "-p", "5301"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let secs = UDP_SECS.to_string();
    let out = path
        .a
        .command("iperf3")
        .args([
            "-c", &to, "-p", "5301", "-u", "-l", "64", "-b", rate, "-t", &secs, "-J",
        ])
        .output();
    let _ = server.wait();
    let out = out.ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let sum = v.get("end")?.get("sum")?;
    let f = |k: &str| sum.get(k).and_then(serde_json::Value::as_f64);
    let (packets, lost, secs) = (f("packets")?, f("lost_packets")?, f("seconds")?);
    Some((packets / secs, (packets - lost) / secs, f("lost_percent")?))
}

/// The small-frame table: each path in turn, [`UDP_ROUNDS`] rounds per rate.
fn udp(filter: Option<&str>) {
    if filter.is_some_and(|f| !f.contains("udp")) {
        return;
    }
    if std::process::Command::new("iperf3")
        .arg("-v")
        .output()
        .is_err()
    {
        eprintln!("vtep_kernel udp: skipped, iperf3 is not installed (apt-get install iperf3)");
        return;
    }
    println!(
        "\nUDP, 64-byte payloads, A -> B through VXLAN ({UDP_SECS} s runs): sent Mpps / delivered Mpps / lost %"
    );
    type MakePath = fn() -> Path;
    let paths: [(&str, MakePath); 4] = [
        ("kernel VXLAN, veth", || kernel_path(true)),
        ("VTEP, a system call per frame", || {
            linerate_path(true, None, false)
        }),
        ("VTEP, io_uring, multishot read", || {
            linerate_path(true, Some(256), true)
        }),
        ("VTEP, io_uring, posted reads", || {
            linerate_path(true, Some(256), false)
        }),
    ];
    for rate in UDP_RATES {
        for (name, make) in &paths {
            let path = make();
            let mut runs = Vec::new();
            for _ in 0..UDP_ROUNDS {
                match udp_run(&path, rate) {
                    Some((sent, got, lost)) => runs.push(format!(
                        "{:.3} / {:.3} / {lost:.1} %",
                        sent / 1e6,
                        got / 1e6
                    )),
                    None => runs.push("(no report)".to_owned()),
                }
            }
            println!("  -b {rate:<5} {name:<31} {}", runs.join("   "));
            path.finish();
        }
    }
}

fn vtep(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("vtep_kernel benches skipped: they need root");
        return;
    }
    // The name filter criterion was given (`cargo bench ... -- udp`).
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut log = Vec::new();
    if filter.as_deref().is_none_or(|f| !f.contains("udp")) {
        for offloads in [true, false] {
            let mode = if offloads { "tso" } else { "plain" };
            let path = kernel_path(offloads);
            tcp(c, &path, &format!("kernel/{mode}"), &mut log);
            path.finish();
            let path = linerate_path(offloads, None, false);
            tcp(c, &path, &format!("linerate/{mode}"), &mut log);
            path.finish();
        }
        let path = linerate_path(true, Some(256), true);
        tcp(c, &path, "linerate/tso-uring", &mut log);
        path.finish();
        println!("\nCPU seconds per GB, whole process (both ends and the VTEP):");
        for (name, figure) in &log {
            println!("  {name:<20} {figure:.3}");
        }
    }
    udp(filter.as_deref());
}

criterion_group!(benches, vtep);
criterion_main!(benches);
