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
//! Criterion gives bytes per second of wall time. After each case the bench
//! prints the whole process's CPU seconds per GB: the client and server threads
//! (in their namespaces, with the kernel's work in their system calls) and the
//! VTEP's thread; softirq work the kernel hands to ksoftirqd is not in it.
//!
//! Run with `sudo cargo bench --features system-tests --bench vtep_kernel`.
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
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Bytes per iteration.
const LEN: usize = 128 << 20;
/// Bytes per write (and per read buffer).
const WRITE: usize = 256 << 10;
const PORT: u16 = 5004;

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

/// Kernel VXLAN to kernel VXLAN over a veth pair.
fn kernel(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
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
    let to = SocketAddr::from(([192, 168, 43, 2], PORT));
    let listener = b
        .run(move || TcpListener::bind(to))
        .expect("namespace")
        .expect("bind");
    let data = vec![0x5au8; WRITE];
    let name = format!("kernel/{}", if offloads { "tso" } else { "plain" });
    case(c, &name, log, || transfer(&a, &listener, to, &data));
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

/// Kernel in A -> TAP -> linerate VTEP -> TAP -> kernel VXLAN in B.
fn linerate(c: &mut Criterion, offloads: bool, log: &mut Vec<(String, f64)>) {
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
        ..TapConfig::new(netns::unique("lrvp"))
    })
    .expect("port TAP");
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
    let to = SocketAddr::from((spec.kernel_overlay.0, PORT));
    let listener =
        b.ns.run(move || TcpListener::bind(to))
            .expect("namespace")
            .expect("bind");
    let data = vec![0x5au8; WRITE];
    let name = format!("linerate/{}", if offloads { "tso" } else { "plain" });
    case(c, &name, log, || transfer(&a, &listener, to, &data));
    let w = workers.join().expect("vtep worker");
    for (k, v) in w[0].0.counters() {
        if v != 0 && (k.contains("drop") || k.contains("unresolved")) {
            println!("  vtep {k}: {v}");
        }
    }
}

fn vtep(c: &mut Criterion) {
    if !netns::is_root() {
        eprintln!("vtep_kernel benches skipped: they need root");
        return;
    }
    let mut log = Vec::new();
    for offloads in [true, false] {
        kernel(c, offloads, &mut log);
        linerate(c, offloads, &mut log);
    }
    println!("\nCPU seconds per GB, whole process (both ends and the VTEP):");
    for (name, figure) in &log {
        println!("  {name:<18} {figure:.3}");
    }
}

criterion_group!(benches, vtep);
criterion_main!(benches);
