//! Fragments between the engine (`Config::fragments` on) and the Linux
//! kernel, over a TAP in a namespace the test creates (docs/testing.md, "Linux
//! TCP against the engine", for UDP): the kernel at 10.79.0.1 / fd79::1, the
//! engine at 10.79.0.2 / fd79::2, driven in a loop on the test thread that
//! also stands between the TAP and the engine.
//!
//! * Both ways, SHA-256 exact: a kernel socket sends UDP datagrams of 1 to
//!   65,507 bytes, the engine echoes each back; the kernel fragments what
//!   passes 1,500 bytes and the loop delivers its fragments to the engine out
//!   of order (a seeded window of held frames) with a quarter of them
//!   duplicated; the engine fragments the echo and the kernel reassembles it.
//! * Overlaps: every third datagram gets a forged fragment overlapping its
//!   first one, delivered just before it: those datagrams never reach the
//!   socket (RFC 5722), the others do, byte for byte.
//! * A flood: while the kernel's datagrams are echoed, the loop injects
//!   incomplete fragments from a few hundred forged sources; the reassembly
//!   memory never passes its bound and every datagram still gets through.
//!
//! Every namespace and TAP has a unique name and goes when the test ends,
//! failed or not (the namespace is deleted on drop, with the TAP in it).
//! Needs root: `cargo test --features linerate/system-tests --test
//! system_frag -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
use linerate::nic::{Batch, Frame, Nic};
use linerate::offload::OffloadMeta;
use linerate::toe::{Config, Engine, FragConfig, Instant, UdpHandle};
use linerate_testkit::netns::{self, Netns};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x79];
const KERNEL_V4: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 1);
const OUR_V4: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
const KERNEL_V6: Ipv6Addr = Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0, 1);
const OUR_V6: Ipv6Addr = Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0, 2);
const PORT: u16 = 7900;

/// Datagram sizes, 1 to 65,507 bytes: around the fragment boundaries (1,472
/// and 1,452 bytes fit one IPv4 and IPv6 packet), and up to the largest.
const SIZES: &[usize] = &[
    1, 7, 8, 100, 1000, 1232, 1452, 1453, 1472, 1473, 1480, 1481, 2944, 2953, 4000, 8192, 9000,
    16_384, 32_768, 50_000, 65_000, 65_507,
];

/// What the loop does to the kernel's fragments on their way to the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mangle {
    /// Out of order, a quarter duplicated.
    Reorder,
    /// In order, with a forged overlapping fragment before the first fragment
    /// of every datagram whose sequence number is a multiple of 3.
    Overlap,
    /// In order, with forged incomplete datagrams from many sources.
    Flood,
}

/// xorshift64*, for the loop's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The fragment fields of an IPv4 or IPv6 frame from the kernel: (offset in
/// bytes, more, where its data starts), or `None` for anything else.
fn fragment(f: &[u8]) -> Option<(usize, bool, usize)> {
    match u16::from_be_bytes([*f.get(12)?, *f.get(13)?]) {
        0x0800 => {
            let flg = u16::from_be_bytes([*f.get(20)?, *f.get(21)?]);
            let ihl = usize::from(f.get(14)? & 0xf) * 4;
            (flg & 0x3fff != 0).then_some((
                usize::from(flg & 0x1fff) * 8,
                flg & 0x2000 != 0,
                14 + ihl,
            ))
        }
        0x86dd if *f.get(20)? == 44 => {
            let o = u16::from_be_bytes([*f.get(56)?, *f.get(57)?]);
            Some((usize::from(o >> 3) * 8, o & 1 != 0, 62))
        }
        _ => None,
    }
}

/// A forged fragment of `first`'s datagram: 16 other bytes at offset 8, more
/// to follow. It overlaps the first fragment.
fn overlapping(first: &[u8], data_at: usize) -> Vec<u8> {
    let mut f = first[..data_at].to_vec();
    f.extend_from_slice(&[0xee; 16]);
    if f[12] == 0x08 {
        f[16..18].copy_from_slice(&((data_at - 14 + 16) as u16).to_be_bytes());
        f[20..22].copy_from_slice(&(0x2000u16 | 1).to_be_bytes());
        let mut ip = linerate::wire::ipv4::Packet::new_unchecked(&mut f[14..data_at]);
        ip.fill_checksum();
    } else {
        f[18..20].copy_from_slice(&((data_at - 54 + 16) as u16).to_be_bytes());
        f[56..58].copy_from_slice(&((1u16 << 3) | 1).to_be_bytes());
    }
    f
}

/// An incomplete datagram's first fragment from a forged source `n`.
fn forged(n: usize, v6: bool) -> Vec<u8> {
    let mut f = Vec::with_capacity(1514);
    f.extend_from_slice(&OUR_MAC);
    f.extend_from_slice(&[0x02, 0x66, 0, 0, (n >> 8) as u8, n as u8]);
    let body = [0x5au8; 1400];
    if v6 {
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&((8 + body.len()) as u16).to_be_bytes());
        h[6] = 44;
        h[7] = 64;
        h[8..24].copy_from_slice(&Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0x66, n as u16).octets());
        h[24..40].copy_from_slice(&OUR_V6.octets());
        f.extend_from_slice(&h);
        f.extend_from_slice(&[17, 0, 0, 1]);
        f.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let mut h = [0u8; 20];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&((20 + body.len()) as u16).to_be_bytes());
        h[4..6].copy_from_slice(&(n as u16).to_be_bytes());
        h[6..8].copy_from_slice(&0x2000u16.to_be_bytes());
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&[10, 79, 1 + (n / 250) as u8 % 200, 3 + (n % 250) as u8]);
        h[16..20].copy_from_slice(&OUR_V4.octets());
        let mut ip = linerate::wire::ipv4::Packet::new_unchecked(&mut h[..]);
        ip.fill_checksum();
        f.extend_from_slice(&h);
    }
    f.extend_from_slice(&body);
    f
}

/// The TAP in its namespace and the engine; the loop's held frames.
struct Host {
    engine: Engine,
    tap: Tap,
    ns: Netns,
    epoch: std::time::Instant,
    rx: Batch,
    tx: Batch,
    mangle: Mangle,
    rng: Rng,
    held: Vec<(Vec<u8>, OffloadMeta, bool)>,
    forged: usize,
    /// The most reassembly memory seen.
    peak: usize,
}

impl Host {
    fn new(mangle: Mangle, frag: FragConfig) -> Host {
        assert!(netns::is_root(), "system tests need root");
        let ns = Netns::new("lrfrag").unwrap();
        let tap = Tap::open(&TapConfig {
            offloads: TapOffloads::NONE,
            ..TapConfig::new(netns::unique("lrfr"))
        })
        .unwrap();
        netns::ip(&["link", "set", tap.name(), "netns", ns.name()]).unwrap();
        ns.ip(&["addr", "add", "10.79.0.1/24", "dev", tap.name()])
            .unwrap();
        ns.ip(&[
            "-6",
            "addr",
            "add",
            "fd79::1/64",
            "dev",
            tap.name(),
            "nodad",
        ])
        .unwrap();
        ns.ip(&["link", "set", tap.name(), "up"]).unwrap();
        let mut cfg = Config::new(OUR_MAC)
            .with_ipv4(OUR_V4, 24)
            .with_ipv6(OUR_V6, 64);
        cfg.offloads = false;
        cfg.fragments = frag;
        cfg.udp.recv_buffer = 1 << 20;
        Host {
            engine: Engine::new(cfg, 0xf2a9),
            tap,
            ns,
            epoch: std::time::Instant::now(),
            rx: Batch::new(),
            tx: Batch::new(),
            mangle,
            rng: Rng(0x9e37_79b9_7f4a_7c15),
            held: Vec::new(),
            forged: 0,
            peak: 0,
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn deliver(&mut self, f: &[u8], meta: &OffloadMeta) {
        let now = self.now();
        self.engine.handle_frame(now, f, meta);
        self.peak = self.peak.max(self.engine.memory_usage().reassembly);
    }

    /// One frame from the kernel, through the loop's mangling.
    fn kernel_frame(&mut self, f: Vec<u8>, meta: OffloadMeta) {
        let Some((off, more, data_at)) = fragment(&f) else {
            return self.deliver(&f, &meta);
        };
        match self.mangle {
            Mangle::Reorder => {
                self.held.push((f, meta, false));
                while self.held.len() > 6 {
                    self.release_one();
                }
            }
            Mangle::Overlap => {
                // The sequence number is the first 4 bytes after the UDP
                // header, in the first fragment.
                let seq = f
                    .get(data_at + 8..data_at + 12)
                    .map(|s| u32::from_be_bytes(s.try_into().unwrap()));
                if off == 0 && more && seq.is_some_and(|s| s.is_multiple_of(3)) {
                    let forged = overlapping(&f, data_at);
                    self.deliver(&forged, &OffloadMeta::plain());
                    self.forged += 1;
                }
                self.deliver(&f, &meta);
            }
            Mangle::Flood => self.deliver(&f, &meta),
        }
    }

    /// Delivers one held fragment picked at random; a quarter of them twice
    /// (the copy goes back among the held ones).
    fn release_one(&mut self) {
        let i = self.rng.below(self.held.len());
        let (f, meta, copy) = self.held.swap_remove(i);
        if !copy && self.rng.below(4) == 0 {
            self.held.push((f.clone(), meta, true));
        }
        self.deliver(&f, &meta);
    }

    /// One round of the loop; waits up to `wait` on the TAP when there was
    /// nothing to do.
    fn pump(&mut self, wait: Duration) {
        let mut got = 0;
        loop {
            let n = self.tap.receive(0, &mut self.rx, 64).unwrap();
            let frames: Vec<(Vec<u8>, OffloadMeta)> = self
                .rx
                .drain(..)
                .map(|f| (f.bytes().to_vec(), f.meta))
                .collect();
            for (f, m) in frames {
                self.kernel_frame(f, m);
            }
            got += n;
            if n < 64 {
                break;
            }
        }
        if got == 0 {
            // Quiet: what is held goes, in random order.
            while !self.held.is_empty() {
                self.release_one();
            }
        }
        if self.mangle == Mangle::Flood {
            let high = self.engine.config().fragments.high_thresh;
            for _ in 0..40 {
                let n = self.forged;
                self.forged += 1;
                let f = forged(n % 60_000, !n.is_multiple_of(2));
                self.deliver(&f, &OffloadMeta::plain());
                let m = self.engine.memory_usage().reassembly;
                assert!(m <= high, "reassembly memory {m} over {high}");
            }
        }
        let now = self.now();
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        let (tx, pool) = (&mut self.tx, self.tap.pool());
        let sent = self.engine.poll_transmit(now, &mut |f, m| {
            assert!(f.len() <= 1514, "a frame of {} bytes", f.len());
            tx.push(Frame::new(pool.alloc_from(f), *m));
        });
        while !self.tx.is_empty() {
            if self.tap.transmit(0, &mut self.tx).unwrap() == 0 {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        if got == 0 && sent == 0 && self.held.is_empty() {
            self.tap.readiness(0).unwrap().wait(wait).unwrap();
        }
    }

    fn pump_until(&mut self, limit: Duration, what: &str, mut done: impl FnMut(&mut Host) -> bool) {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            self.pump(Duration::from_millis(2));
        }
    }
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut d: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seq) as u8 ^ (i >> 8) as u8)
        .collect();
    for (i, b) in seq.to_be_bytes().iter().enumerate() {
        if let Some(x) = d.get_mut(i) {
            *x = *b;
        }
    }
    d
}

/// SHA-256 of a datagram sent and of its echo.
type Pair = ([u8; 32], [u8; 32]);

fn sha(d: &[u8]) -> [u8; 32] {
    Sha256::digest(d).into()
}

/// The kernel sends every size (each `rounds` times) to the engine and waits
/// for the echo, resending after a second without one; returns (SHA-256 of
/// what it sent, of what came back) and how many resends it took.
fn kernel_echo_client(v6: bool, rounds: usize) -> (Vec<Pair>, usize) {
    let (ours, kernel): (IpAddr, IpAddr) = if v6 {
        (OUR_V6.into(), KERNEL_V6.into())
    } else {
        (OUR_V4.into(), KERNEL_V4.into())
    };
    let s = UdpSocket::bind(SocketAddr::new(kernel, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut buf = vec![0u8; 65_536];
    let mut out = Vec::new();
    let mut resends = 0;
    let mut seq = 1u32;
    for _ in 0..rounds {
        for &len in SIZES {
            let data = payload(seq, len);
            let mut tries = 0;
            s.send_to(&data, SocketAddr::new(ours, PORT)).unwrap();
            // An echo of an earlier datagram (one the engine got twice, from
            // duplicated fragments) is skipped; a second without the right
            // one, and the datagram goes again.
            let back = loop {
                match s.recv_from(&mut buf) {
                    Ok((n, _)) if n == len && buf[..4.min(n)] == data[..4.min(n)] => {
                        break buf[..n].to_vec();
                    }
                    Ok(_) => {}
                    Err(e) => {
                        assert!(
                            matches!(
                                e.kind(),
                                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                            ),
                            "{e}"
                        );
                        tries += 1;
                        resends += 1;
                        assert!(tries < 10, "no echo of {len} bytes after {tries} tries");
                        s.send_to(&data, SocketAddr::new(ours, PORT)).unwrap();
                    }
                }
            };
            out.push((sha(&data), sha(&back)));
            seq += 1;
        }
    }
    (out, resends)
}

/// Runs the echo exchange under `mangle`; returns the host for its counters,
/// the kernel's resends and the number of datagrams.
fn echo(v6: bool, mangle: Mangle, frag: FragConfig, rounds: usize) -> (Host, usize) {
    let mut h = Host::new(mangle, frag);
    let any: SocketAddr = if v6 { "[::]:7900" } else { "0.0.0.0:7900" }
        .parse()
        .unwrap();
    let u = h.engine.udp_bind(any).unwrap();
    let kernel = h.ns.spawn(move || kernel_echo_client(v6, rounds)).unwrap();
    let mut got: Vec<[u8; 32]> = Vec::new();
    h.pump_until(Duration::from_secs(300), "kernel echo client", |h| {
        echo_all(h, u, &mut got);
        kernel.is_finished()
    });
    let (pairs, resends) = kernel.join().unwrap().unwrap();
    for (i, (sent, back)) in pairs.iter().enumerate() {
        assert_eq!(sent, back, "v6 {v6} datagram {i}: the echo differs");
    }
    // Every datagram the kernel sent reached the engine's socket intact.
    for (sent, _) in &pairs {
        assert!(
            got.contains(sent),
            "v6 {v6}: a datagram never reached the socket whole"
        );
    }
    (h, resends)
}

/// Echoes every datagram waiting on `u` back to its sender, noting its
/// SHA-256.
fn echo_all(h: &mut Host, u: UdpHandle, got: &mut Vec<[u8; 32]>) {
    while let Ok((d, from)) = h.engine.udp_recv_with(u, |d, from| (d.to_vec(), from)) {
        got.push(sha(&d));
        h.engine.udp_send_to(u, &d, from).unwrap();
    }
}

fn on() -> FragConfig {
    FragConfig {
        enabled: true,
        ..FragConfig::default()
    }
}

fn reorder(v6: bool) {
    let (h, resends) = echo(v6, Mangle::Reorder, on(), 2);
    let c = h.engine.counters();
    eprintln!(
        "v6 {v6}: reasm reqds {} oks {} dups {} fails {}; frag oks {} creates {}; peak {} B",
        c.ip_reasm_reqds,
        c.ip_reasm_oks,
        c.ip_reasm_duplicates,
        c.ip_reasm_fails,
        c.ip_frag_oks,
        c.ip_frag_creates,
        h.peak
    );
    assert_eq!(resends, 0, "every datagram came back the first time");
    let fragmented = SIZES
        .iter()
        .filter(|&&n| n > if v6 { 1452 } else { 1472 })
        .count() as u64
        * 2;
    // Once each, and again only when duplicates of every fragment came after
    // the datagram was whole.
    assert!(
        c.ip_reasm_oks >= fragmented,
        "{} reassembled",
        c.ip_reasm_oks
    );
    // Each datagram the engine got is echoed: as many fragmented sends.
    assert_eq!(
        c.ip_frag_oks, c.ip_reasm_oks,
        "every reassembled one echoed in fragments"
    );
    assert!(c.ip_reasm_duplicates > 0, "the loop duplicated fragments");
    assert_eq!(c.ip_reasm_overlaps, 0);
    assert_eq!((c.udp_in_errors, c.udp_in_csum_errors), (0, 0));
}

#[test]
fn v4_both_ways_out_of_order_and_duplicated() {
    reorder(false);
}

#[test]
fn v6_both_ways_out_of_order_and_duplicated() {
    reorder(true);
}

/// The kernel sends datagrams of 4,000 bytes numbered 0..60 (no echo); the
/// loop forges an overlapping fragment for every third one.
fn overlaps(v6: bool) {
    let mut h = Host::new(Mangle::Overlap, on());
    let any: SocketAddr = if v6 { "[::]:7900" } else { "0.0.0.0:7900" }
        .parse()
        .unwrap();
    let u = h.engine.udp_bind(any).unwrap();
    let ours: IpAddr = if v6 { OUR_V6.into() } else { OUR_V4.into() };
    let kernel: IpAddr = if v6 {
        KERNEL_V6.into()
    } else {
        KERNEL_V4.into()
    };
    const N: u32 = 60;
    let t =
        h.ns.spawn(move || {
            let s = UdpSocket::bind(SocketAddr::new(kernel, 0)).unwrap();
            for seq in 0..N {
                s.send_to(&payload(seq, 4000), SocketAddr::new(ours, PORT))
                    .unwrap();
                std::thread::sleep(Duration::from_millis(3));
            }
        })
        .unwrap();
    let mut got = BTreeMap::new();
    let mut collect = |h: &mut Host| {
        while let Ok(d) = h.engine.udp_recv_with(u, |d, _| d.to_vec()) {
            let seq = u32::from_be_bytes(d[..4].try_into().unwrap());
            assert!(got.insert(seq, sha(&d)).is_none(), "datagram {seq} twice");
        }
    };
    h.pump_until(Duration::from_secs(60), "kernel sender", |h| {
        collect(h);
        t.is_finished()
    });
    t.join().unwrap().unwrap();
    let quiet = std::time::Instant::now() + Duration::from_millis(300);
    h.pump_until(Duration::from_secs(5), "quiet", |h| {
        collect(h);
        std::time::Instant::now() > quiet
    });
    let want: Vec<u32> = (0..N).filter(|s| s % 3 != 0).collect();
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), want, "v6 {v6}");
    for (seq, d) in &got {
        assert_eq!(*d, sha(&payload(*seq, 4000)), "datagram {seq}");
    }
    let c = h.engine.counters();
    assert_eq!(c.ip_reasm_overlaps, u64::from(N / 3), "v6 {v6}");
    assert_eq!(h.forged, (N / 3) as usize);
    // The overlapped datagrams' other fragments were dropped as they came.
    assert!(c.ip_reasm_after_overlap >= u64::from(N / 3));
}

#[test]
fn v4_overlapping_fragments_drop_the_datagram() {
    overlaps(false);
}

#[test]
fn v6_overlapping_fragments_drop_the_datagram() {
    overlaps(true);
}

#[test]
fn flood_of_incomplete_fragments_stays_bounded_and_traffic_flows() {
    let frag = FragConfig {
        enabled: true,
        high_thresh: 1 << 20,
        low_thresh: 768 << 10,
        per_source: 160 << 10,
        ..FragConfig::default()
    };
    for v6 in [false, true] {
        let (h, resends) = echo(v6, Mangle::Flood, frag.clone(), 1);
        let c = h.engine.counters();
        eprintln!(
            "flood v6 {v6}: {} forged, evicted {}, source limit {}, oks {}, resends {resends}, peak {} B",
            h.forged, c.ip_reasm_evicted, c.ip_reasm_source_limit, c.ip_reasm_oks, h.peak
        );
        assert!(h.peak <= frag.high_thresh);
        assert!(c.ip_reasm_evicted > 0, "the flood filled the budget");
        assert!(h.forged > 1000);
    }
}
