//! The AF_XDP backend against the Linux kernel, over a veth pair.
//!
//! Each test creates a veth pair and a network namespace: one end stays in the
//! root namespace, where the test binds AF_XDP to its queue 0 and plays a host at
//! `OUR_IP`; the other end goes into the namespace with the kernel at
//! `KERNEL_IP`/24 (IPv6 off on both ends, so nothing but the test's traffic
//! crosses). The pair and the namespace go away when the guards drop, also on
//! failure.
//!
//! * the kernel pings an address the test answers (ARP and ICMP echo);
//! * UDP datagrams in both directions, test to a kernel socket and kernel socket
//!   to test, at batch sizes 1, 2, 4, ..., 64: every one arrives, byte-exact and
//!   in order, and the backend's counters match what was sent and received
//!   (every other datagram sent as a scatter-gather frame);
//! * a queue the interface lacks, a missing interface, a frame over the MTU and a
//!   segmentation request are refused with their typed errors, and without root
//!   opening fails with `PermissionDenied`.
//!
//! Needs root: `cargo test -p linerate-nic --features af-xdp,system-tests
//! --test system_xdp -- --test-threads=1`. It lives in the NIC crate so that
//! the AF_XDP build touches only this crate, not every crate above it.
//! `netns` is the test kit's module, compiled in here (the test kit depends on
//! this crate).
#![cfg(all(feature = "system-tests", feature = "af-xdp"))]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::xdp::{Xdp, XdpAttach, XdpConfig};
use linerate_nic::{Batch, Counter, Frag, Frame, Nic, NicError, Readiness, SharedBuf};
use linerate_offload::{Gso, GsoType, OffloadMeta};
use linerate_wire::arp;
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::etherparse::{
    IcmpEchoHeader, Icmpv4Type, NetSlice, SlicedPacket, TransportSlice,
};
#[path = "../../testkit/src/netns.rs"]
#[allow(dead_code, missing_docs)]
mod netns;

use netns::Netns;
use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x03];
const KERNEL_IP: [u8; 4] = [10, 215, 0, 1];
const OUR_IP: [u8; 4] = [10, 215, 0, 2];
/// The kernel's UDP socket (it receives here, and sends from here).
const KERNEL_PORT: u16 = 7000;
/// Our UDP port.
const OUR_PORT: u16 = 7001;

/// The root-namespace end of a veth pair, deleted (with its peer) on drop.
struct Veth(String);

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = netns::ip(&["link", "del", &self.0]);
    }
}

/// AF_XDP on the root end of a veth pair whose other end is in `ns`, with the
/// kernel at `KERNEL_IP`/24. Fields drop in order: sockets, pair, namespace.
struct Link {
    nic: Xdp,
    _veth: Veth,
    ns: Netns,
    kernel_mac: [u8; 6],
    arp_replies: usize,
    /// Every frame `receive` handed over, and their bytes.
    rx_frames: u64,
    rx_bytes: u64,
    /// Every frame `transmit` took, and their bytes.
    tx_frames: u64,
    tx_bytes: u64,
}

impl Link {
    /// With `static_neigh`, the kernel knows `OUR_IP`'s MAC without asking.
    fn new(static_neigh: bool, attach: XdpAttach) -> Link {
        Link::with_queues(static_neigh, attach, 1)
    }

    /// A pair whose ends have `queues` queues each, all opened.
    fn with_queues(static_neigh: bool, attach: XdpAttach, queues: u16) -> Link {
        Link::with_config(static_neigh, 1500, |c| XdpConfig {
            attach,
            queues,
            ..c
        })
    }

    /// A pair at `mtu` opened with the configuration `config` makes of the
    /// default one.
    fn with_config(
        static_neigh: bool,
        mtu: u32,
        config: impl FnOnce(XdpConfig) -> XdpConfig,
    ) -> Link {
        let cfg = config(XdpConfig {
            mount_bpffs: true,
            ..XdpConfig::new("")
        });
        let queues = cfg.queues;
        assert!(netns::is_root(), "system tests need root");
        let ns = Netns::new("lrxn").unwrap();
        let ours = netns::unique("lxa");
        let peer = netns::unique("lxb");
        let q = queues.to_string();
        let each = ["numtxqueues", &q, "numrxqueues", &q];
        let mut add = vec!["link", "add", &ours];
        add.extend(each);
        add.extend(["type", "veth", "peer", "name", &peer]);
        add.extend(each);
        netns::ip(&add).unwrap();
        let veth = Veth(ours.clone());
        netns::ip(&["link", "set", &peer, "netns", ns.name()]).unwrap();
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{ours}/disable_ipv6"), "1").unwrap();
        let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{peer}/disable_ipv6");
        ns.exec("sh", &["-c", &off]).unwrap();
        ns.ip(&["addr", "add", "10.215.0.1/24", "dev", &peer])
            .unwrap();
        ns.ip(&["link", "set", &peer, "up"]).unwrap();
        netns::ip(&["link", "set", &ours, "up"]).unwrap();
        let mtu = mtu.to_string();
        netns::ip(&["link", "set", &ours, "mtu", &mtu]).unwrap();
        ns.ip(&["link", "set", &peer, "mtu", &mtu]).unwrap();
        if static_neigh {
            let mac = "02:4c:52:00:00:03";
            ns.ip(&["neigh", "add", "10.215.0.2", "lladdr", mac, "dev", &peer])
                .unwrap();
        }
        let out = ns
            .exec("cat", &[&format!("/sys/class/net/{peer}/address")])
            .unwrap();
        let kernel_mac: Vec<u8> = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        let nic = Xdp::open(&XdpConfig {
            interface: ours,
            ..cfg
        })
        .unwrap();
        Link {
            nic,
            _veth: veth,
            ns,
            kernel_mac: kernel_mac.try_into().unwrap(),
            arp_replies: 0,
            rx_frames: 0,
            rx_bytes: 0,
            tx_frames: 0,
            tx_bytes: 0,
        }
    }

    /// Sends every frame of `frames`, retrying while the rings are full. Every
    /// other frame goes as a scatter-gather frame (its first 42 bytes in the
    /// head, the rest by reference into one shared buffer), which the backend
    /// gathers into its UMEM frame.
    fn send_all(&mut self, frames: Vec<Vec<u8>>) {
        let tails: Vec<u8> = frames.iter().flat_map(|f| f[42..].to_vec()).collect();
        let shared = SharedBuf::new(self.nic.pool().alloc_from(&tails));
        let mut at = 0;
        let mut batch: Batch = frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let tail = f.len() - 42;
                at += tail;
                match Frag::new(shared.clone(), at - tail, tail) {
                    Some(frag) if i % 2 == 1 => Frame::with_frag(
                        self.nic.pool().alloc_from(&f[..42]),
                        frag,
                        OffloadMeta::plain(),
                    ),
                    _ => Frame::plain(self.nic.pool().alloc_from(f)),
                }
            })
            .collect();
        assert!(self.nic.tx_sg());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !batch.is_empty() {
            let bytes: usize = batch.iter().map(Frame::len).sum();
            let n = self.nic.transmit(0, &mut batch).unwrap();
            let left: usize = batch.iter().map(Frame::len).sum();
            self.tx_frames += n as u64;
            self.tx_bytes += (bytes - left) as u64;
            assert!(Instant::now() < deadline, "transmit stuck");
            if n == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// Frames the kernel sent within `wait` (returns early once some came), at
    /// most `max` per receive call; ARP requests for `OUR_IP` are answered.
    fn poll(&mut self, wait: Duration, max: usize) -> Vec<Vec<u8>> {
        let deadline = Instant::now() + wait;
        let mut batch = Batch::new();
        loop {
            let before = batch.len();
            let n = self.nic.receive(0, &mut batch, max).unwrap();
            assert!(n <= max, "receive returned {n} > {max}");
            assert_eq!(batch.len() - before, n);
            if n == 0 {
                if !batch.is_empty() || Instant::now() >= deadline {
                    break;
                }
                let ready = self.nic.readiness(0).unwrap();
                ready.wait(Duration::from_millis(5)).unwrap();
            }
        }
        self.rx_frames += batch.len() as u64;
        self.rx_bytes += batch.bytes() as u64;
        let mut out = Vec::new();
        for f in batch.drain(..) {
            let b = f.bytes();
            if b[12..14] == [0x08, 0x06] {
                let req = arp::Packet::new_checked(&b[14..]).unwrap();
                if req.oper() == arp::operation::REQUEST && req.tpa() == OUR_IP {
                    let reply = req.reply_to(OUR_MAC).to_arp_packet();
                    let frame = FrameBuilder::arp(reply, OUR_MAC, req.sha()).build(&[]);
                    self.send_all(vec![frame]);
                    self.arp_replies += 1;
                }
                continue;
            }
            out.push(b.to_vec());
        }
        out
    }

    /// A UDP datagram from us to the kernel's socket.
    fn udp_to_kernel(&self, payload: &[u8]) -> Vec<u8> {
        FrameBuilder::new(Ip::v4(OUR_IP, KERNEL_IP), L4::udp(OUR_PORT, KERNEL_PORT))
            .macs(OUR_MAC, self.kernel_mac)
            .build(payload)
    }

    fn check_counters(&self) {
        let s = self.nic.counters().snapshot();
        let text = s.ethtool();
        assert_eq!(s.total(Counter::TxPackets), self.tx_frames, "{text}");
        assert_eq!(s.total(Counter::TxBytes), self.tx_bytes, "{text}");
        assert_eq!(s.total(Counter::RxPackets), self.rx_frames, "{text}");
        assert_eq!(s.total(Counter::RxBytes), self.rx_bytes, "{text}");
        let k = self.nic.statistics(0).unwrap();
        assert_eq!(
            k.rx_dropped + k.rx_ring_full + k.tx_invalid_descs,
            0,
            "{k:?}"
        );
    }
}

/// A payload naming its batch size and index, then a pattern of `len` bytes.
fn payload(size: usize, i: usize, len: usize) -> Vec<u8> {
    let mut p = format!("{size:02}/{i:04}:").into_bytes();
    p.extend((0..len).map(|k| (k * 31 + i * 7 + size) as u8));
    p
}

/// The UDP payload of a frame for `OUR_IP:OUR_PORT`, if it is one.
fn udp_to_us(frame: &[u8]) -> Option<Vec<u8>> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(udp))) = (&p.net, &p.transport) else {
        return None;
    };
    (ip.header().destination() == OUR_IP && udp.destination_port() == OUR_PORT)
        .then(|| udp.payload().to_vec())
}

#[test]
fn kernel_pings_an_address_answered_over_af_xdp() {
    let mut link = Link::new(false, XdpAttach::Generic);
    assert_eq!(link.nic.attach_mode(), XdpAttach::Generic);
    assert!(std::fs::metadata("/sys/fs/bpf").is_ok());
    let ns_name = link.ns.name().to_owned();
    let ping = std::thread::spawn(move || {
        std::process::Command::new("ip")
            .args(["netns", "exec", &ns_name, "ping", "-c", "3", "-i", "0.2"])
            .args(["-W", "2", "10.215.0.2"])
            .output()
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut echoes = 0;
    while !ping.is_finished() && Instant::now() < deadline {
        for f in link.poll(Duration::from_millis(50), 64) {
            let p = SlicedPacket::from_ethernet(&f).unwrap();
            let (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Icmpv4(icmp))) =
                (&p.net, &p.transport)
            else {
                continue;
            };
            let Icmpv4Type::EchoRequest(echo) = icmp.icmp_type() else {
                continue;
            };
            assert_eq!(ip.header().destination(), OUR_IP);
            let reply = FrameBuilder::new(
                Ip::v4(OUR_IP, KERNEL_IP),
                L4::Icmpv4(Icmpv4Type::EchoReply(IcmpEchoHeader {
                    id: echo.id,
                    seq: echo.seq,
                })),
            )
            .macs(OUR_MAC, f[6..12].try_into().unwrap())
            .build(icmp.payload());
            link.send_all(vec![reply]);
            echoes += 1;
        }
    }
    let out = ping.join().unwrap();
    assert!(
        out.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(echoes >= 3, "answered {echoes} echo requests");
    assert!(link.arp_replies >= 1, "no ARP request came");
    assert_eq!(link.tx_frames as usize, echoes + link.arp_replies);
    link.check_counters();
}

/// Both directions at every batch size; returns (datagrams each way).
fn exchange(link: &mut Link) -> usize {
    const ROUNDS: usize = 4;
    const LEN: usize = 200;
    let sizes: Vec<usize> = (0..7).map(|k| 1 << k).collect();
    let total: usize = sizes.iter().map(|s| s * ROUNDS).sum();

    // Us -> a kernel socket in the namespace.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // How many the kernel socket has delivered so far: each round waits for the
    // one before it, so a receiver thread the scheduler starves for a while
    // cannot let the socket's buffer overflow (that would be the test's loss,
    // not the backend's).
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&received);
    let receiver = link
        .ns
        .spawn(move || {
            let s = UdpSocket::bind(("10.215.0.1", KERNEL_PORT)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ready_tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 2048];
            while got.len() < total {
                match s.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        got.push((from.port(), buf[..n].to_vec()));
                        counted.store(got.len(), std::sync::atomic::Ordering::Release);
                    }
                    Err(_) => break,
                }
            }
            got
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mut sent = Vec::new();
    // One deadline for the whole exchange: a lost datagram fails it in seconds,
    // not in a wait per round.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    for &size in &sizes {
        for r in 0..ROUNDS {
            let payloads: Vec<Vec<u8>> = (0..size)
                .map(|i| payload(size, r * size + i, LEN))
                .collect();
            let frames = payloads.iter().map(|p| link.udp_to_kernel(p)).collect();
            let before = link.tx_frames;
            link.send_all(frames);
            assert_eq!(link.tx_frames - before, size as u64);
            sent.extend(payloads);
            while received.load(std::sync::atomic::Ordering::Acquire) < sent.len()
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    let got = receiver.join().unwrap().unwrap();
    assert_eq!(got.len(), total, "datagrams lost on the way to the kernel");
    for ((port, p), want) in got.iter().zip(&sent) {
        assert_eq!(*port, OUR_PORT);
        assert_eq!(p, want, "payload differs");
    }

    // A kernel socket -> us, received at most `size` frames per call.
    for &size in &sizes {
        let count = size * ROUNDS;
        let sender = link
            .ns
            .spawn(move || {
                let s = UdpSocket::bind(("10.215.0.1", KERNEL_PORT)).unwrap();
                let mut sent = Vec::new();
                for i in 0..count {
                    let p = payload(size, i, LEN);
                    s.send_to(&p, ("10.215.0.2", OUR_PORT)).unwrap();
                    sent.push(p);
                    if i % size == size - 1 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                sent
            })
            .unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while got.len() < count && Instant::now() < deadline {
            got.extend(
                link.poll(Duration::from_millis(100), size)
                    .iter()
                    .filter_map(|f| udp_to_us(f)),
            );
        }
        let sent = sender.join().unwrap().unwrap();
        assert_eq!(got.len(), count, "datagrams lost at batch size {size}");
        assert_eq!(got, sent, "payloads differ at batch size {size}");
    }
    total
}

#[test]
fn udp_both_ways_at_every_batch_size_none_lost() {
    let mut link = Link::new(true, XdpAttach::Generic);
    let n = exchange(&mut link);
    assert_eq!(n, 127 * 4);
    // Nothing else crossed: exactly the datagrams (and no ARP) each way.
    assert_eq!(link.tx_frames, n as u64);
    assert_eq!(link.rx_frames, n as u64);
    link.check_counters();
    let s = link.nic.counters().snapshot();
    assert_eq!(s.by_name("tx_packets"), Some(n as u64));
    assert_eq!(s.by_name("rx_packets"), Some(n as u64));
    assert_eq!(s.by_name("rx_bytes"), Some((n * (42 + 8 + 200)) as u64));
}

#[test]
fn native_or_fallback_attach_exchanges_too() {
    let mut link = Link::new(true, XdpAttach::Auto);
    let mode = link.nic.attach_mode();
    assert!(matches!(mode, XdpAttach::Native | XdpAttach::Generic));
    eprintln!("auto attach on veth: {mode:?}");
    let n = exchange(&mut link);
    assert_eq!(link.rx_frames, n as u64);
    link.check_counters();
}

/// The speed knobs: zero-copy asked for on veth (which has none) is refused
/// with `NicConfigError::ZeroCopy`, `XdpBind::Auto` falls back to copy mode
/// and says so; small rings, kicks of 16 frames, need-wakeup off and
/// preferred busy polling (the kernel holds the `SO_BUSY_POLL` given) still
/// move every datagram both ways at every batch size.
#[test]
fn speed_knobs_and_zero_copy_refused_or_fallen_back() {
    use linerate_nic::NicConfigError;
    use linerate_nic::xdp::{BusyPoll, XdpBind};
    assert!(netns::is_root(), "system tests need root");
    let ours = netns::unique("lxk");
    let peer = netns::unique("lxl");
    netns::ip(&["link", "add", &ours, "type", "veth", "peer", "name", &peer]).unwrap();
    let _veth = Veth(ours.clone());
    netns::ip(&["link", "set", &ours, "up"]).unwrap();
    netns::ip(&["link", "set", &peer, "up"]).unwrap();
    let open = |bind| {
        Xdp::open(&XdpConfig {
            mount_bpffs: true,
            attach: XdpAttach::Native,
            bind,
            ..XdpConfig::new(ours.clone())
        })
    };
    match open(XdpBind::ZeroCopy) {
        Err(NicError::Config(e @ NicConfigError::ZeroCopy { .. })) => {
            let text = e.to_string();
            assert!(text.contains("XdpBind::Auto"), "{text}");
            eprintln!("{text}");
        }
        other => panic!("expected NicConfigError::ZeroCopy, got {other:?}"),
    }
    let auto = open(XdpBind::Auto).unwrap();
    assert!(!auto.zero_copy(), "veth bound zero-copy");
    drop(auto);

    let busy = BusyPoll {
        usecs: 50,
        ..BusyPoll::default()
    };
    let mut link = Link::with_config(true, 1500, |c| XdpConfig {
        ring_size: 256,
        tx_kick_batch: 16,
        need_wakeup: false,
        busy_poll: Some(busy),
        ..c
    });
    assert_eq!(link.nic.busy_poll_usecs(0).unwrap(), 50);
    assert!(!link.nic.zero_copy());
    let n = exchange(&mut link);
    assert_eq!(link.rx_frames, n as u64);
    link.check_counters();
}

/// MTU 9000 through multi-buffer (`XDP_USE_SG`, the steering program's
/// `xdp.frags` variant): with 4 KiB UMEM frames, 8,000-byte datagrams go to a
/// kernel socket as chains of descriptors and come back from it as chains
/// gathered into one frame, byte-exact; with receive buffers of 6,000 bytes
/// a longer frame from the kernel is counted (`rx_dropped_oversize`), not
/// truncated, and the frames around it still arrive; a frame over the MTU is
/// refused on transmit.
#[test]
fn jumbo_frames_through_multi_buffer() {
    use linerate_nic::PoolConfig;
    use linerate_nic::xdp::SteerConfig;
    let mut link = Link::with_config(true, 9000, |c| XdpConfig {
        multi_buffer: true,
        pool: Some(PoolConfig {
            buf_len: 6000,
            ..PoolConfig::mtu()
        }),
        steer: Some(SteerConfig {
            addresses: vec![std::net::Ipv4Addr::from(OUR_IP).into()],
            ..SteerConfig::default()
        }),
        ..c
    });
    assert!(link.nic.multi_buffer());
    assert_eq!(link.nic.caps().mtu, 9000);
    assert!(link.nic.frame_room() < 4096);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let kernel = link
        .ns
        .spawn(move || {
            let s = UdpSocket::bind(("10.215.0.1", KERNEL_PORT)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ready_tx.send(()).unwrap();
            let mut buf = vec![0u8; 65536];
            let mut got = Vec::new();
            for _ in 0..2 {
                let n = s.recv(&mut buf).unwrap();
                got.push(buf[..n].to_vec());
            }
            // Back: one that fits the receive buffers, one over them, one
            // that fits.
            let to = ("10.215.0.2", OUR_PORT);
            for len in [5000, 8000, 5001] {
                s.send_to(&payload(90, len, len - 8), to).unwrap();
            }
            got
        })
        .unwrap();
    ready_rx.recv().unwrap();
    let out: Vec<Vec<u8>> = [8000, 1000]
        .iter()
        .map(|&len| payload(91, len, len - 8))
        .collect();
    let frames = out.iter().map(|p| link.udp_to_kernel(p)).collect();
    link.send_all(frames);
    let too_big = link.udp_to_kernel(&[0; 8973]);
    let mut batch = Batch::new();
    batch.push(Frame::plain(link.nic.pool().alloc_from(&too_big)));
    assert!(matches!(
        link.nic.transmit(0, &mut batch),
        Err(NicError::Oversize { len: 9015, .. })
    ));
    let got = kernel.join().unwrap().unwrap();
    assert_eq!(got, out, "what the kernel received");
    let mut back = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while back.len() < 2 && Instant::now() < deadline {
        back.extend(
            link.poll(Duration::from_millis(100), 64)
                .iter()
                .filter_map(|f| udp_to_us(f)),
        );
    }
    assert_eq!(back, vec![payload(90, 5000, 4992), payload(90, 5001, 4993)]);
    let s = link.nic.counters().snapshot();
    assert_eq!(s.by_name("rx_dropped_oversize"), Some(1), "{}", s.ethtool());
    assert_eq!(s.by_name("tx_dropped_oversize"), Some(1), "{}", s.ethtool());
}

/// UDP datagrams from two kernel sockets (two flows) to our address; the
/// frames that arrive, with their receive hash from the steering program's
/// metadata (`SteerConfig::rx_hash`), each flow's hash per frame.
fn hashes_of_two_flows(link: &mut Link) -> Vec<(u16, Option<linerate_offload::RssHash>)> {
    let sender = link
        .ns
        .spawn(move || {
            for port in [KERNEL_PORT, KERNEL_PORT + 2] {
                let s = UdpSocket::bind(("10.215.0.1", port)).unwrap();
                for i in 0..4 {
                    s.send_to(&payload(1, i, 32), ("10.215.0.2", OUR_PORT))
                        .unwrap();
                }
            }
        })
        .unwrap();
    sender.join().unwrap().unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut batch = Batch::new();
    while out.len() < 8 && Instant::now() < deadline {
        batch.clear();
        if link.nic.receive(0, &mut batch, 64).unwrap() == 0 {
            let ready = link.nic.readiness(0).unwrap();
            ready.wait(Duration::from_millis(5)).unwrap();
        }
        for f in batch.iter() {
            let b = f.bytes();
            if udp_to_us(b).is_some() {
                out.push((u16::from_be_bytes([b[34], b[35]]), f.meta.rss));
            }
        }
    }
    out
}

/// The device's receive hash read in the steering program
/// (`bpf_xdp_metadata_rx_hash`, device-bound, native on veth) arrives as each
/// frame's `OffloadMeta::rss`: present on every frame, one value per flow,
/// two flows two values, the type UDP over IPv4 (veth says "L4"; the family
/// and protocol come from the frame). veth's hash is the kernel's software
/// flow hash (`skb_get_hash`, keyed at random at boot), not a Toeplitz hash
/// with a key one can set (veth has no `ethtool -X`), so it is printed beside
/// linerate's Toeplitz of the same 4-tuple, not compared. Attached
/// generically, the program falls back to the one without the kfunc and
/// frames carry no hash.
#[test]
fn rx_hash_from_the_device_rides_in_the_metadata() {
    use linerate_nic::xdp::SteerConfig;
    use linerate_offload::RssHashType;
    let steer = SteerConfig {
        addresses: vec![std::net::Ipv4Addr::from(OUR_IP).into()],
        rx_hash: true,
        ..SteerConfig::default()
    };
    let cfg = |attach| {
        let steer = steer.clone();
        move |c| XdpConfig {
            attach,
            steer: Some(steer),
            ..c
        }
    };
    let mut link = Link::with_config(true, 1500, cfg(XdpAttach::Native));
    assert!(
        link.nic.steering().unwrap().rx_hash(),
        "the device-bound program with the rx-hash kfunc did not load on veth"
    );
    let got = hashes_of_two_flows(&mut link);
    assert_eq!(got.len(), 8, "{got:?}");
    let key = linerate_rss::RssKey::default();
    for port in [KERNEL_PORT, KERNEL_PORT + 2] {
        let flow: Vec<_> = got.iter().filter(|(p, _)| *p == port).collect();
        assert_eq!(flow.len(), 4);
        let first = flow[0].1.expect("a frame without the device's hash");
        assert_eq!(first.kind, RssHashType::UdpIpv4);
        assert!(flow.iter().all(|(_, h)| *h == Some(first)), "{flow:?}");
        let mut input = Vec::new();
        input.extend(KERNEL_IP);
        input.extend(OUR_IP);
        input.extend(port.to_be_bytes());
        input.extend(OUR_PORT.to_be_bytes());
        let toeplitz = linerate_rss::toeplitz::bitwise(key.as_bytes(), &input);
        println!(
            "flow from port {port}: veth's hash {:#010x}, linerate's Toeplitz {toeplitz:#010x}",
            first.value
        );
    }
    assert_ne!(got[0].1, got[4].1, "two flows, one hash");
    drop(link);

    let mut link = Link::with_config(true, 1500, cfg(XdpAttach::Generic));
    assert!(!link.nic.steering().unwrap().rx_hash());
    let got = hashes_of_two_flows(&mut link);
    assert_eq!(got.len(), 8);
    assert!(got.iter().all(|(_, h)| h.is_none()), "{got:?}");
}

#[test]
fn refuses_missing_queues_interfaces_oversize_and_gso() {
    let mut link = Link::new(true, XdpAttach::Generic);
    let name = link.nic.interface().to_owned();
    // veth has one queue.
    for (first_queue, queues, missing) in [(3, 1, 3), (0, 2, 1)] {
        match Xdp::open(&XdpConfig {
            first_queue,
            queues,
            ..XdpConfig::new(name.clone())
        }) {
            Err(NicError::NoQueue { queue, queues: 1 }) => assert_eq!(queue, missing),
            other => panic!("expected NoQueue, got {other:?}"),
        }
    }
    match Xdp::open(&XdpConfig::new(netns::unique("lxz"))) {
        Err(NicError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}"),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(link.nic.caps().offloads == linerate_nic::Offloads::NONE);
    assert_eq!(link.nic.caps().mtu, 1500);

    let oversize = link.udp_to_kernel(&[0; 1473]);
    let ok = link.udp_to_kernel(&[1; 1472]);
    let mut batch: Batch = [ok.clone(), oversize, ok]
        .iter()
        .map(|f| Frame::plain(link.nic.pool().alloc_from(f)))
        .collect();
    match link.nic.transmit(0, &mut batch) {
        Err(NicError::Oversize {
            len: 1515,
            limit: 1514,
        }) => {}
        other => panic!("expected Oversize, got {other:?}"),
    }
    assert_eq!(batch.len(), 1, "the frame after the refused one stays");
    let gso = OffloadMeta {
        gso: Some(Gso::new(GsoType::UdpL4, 1000)),
        ..OffloadMeta::plain()
    };
    let big = link.udp_to_kernel(&[2; 3000]);
    batch.clear();
    batch.push(Frame::new(link.nic.pool().alloc_from(&big), gso));
    match link.nic.transmit(0, &mut batch) {
        Err(NicError::Unsupported(_)) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let s = link.nic.counters().snapshot();
    assert_eq!(s.by_name("tx_packets"), Some(1));
    assert_eq!(s.by_name("tx_dropped_oversize"), Some(1));
    assert_eq!(s.by_name("tx_dropped_unsupported"), Some(1));
    assert!(matches!(
        link.nic.transmit(7, &mut batch),
        Err(NicError::NoQueue {
            queue: 7,
            queues: 1
        })
    ));
}

#[test]
fn two_queues_two_sockets() {
    let mut link = Link::with_queues(true, XdpAttach::Auto, 2);
    assert_eq!(link.nic.queues(), 2);
    let (Readiness::Fd(a), Readiness::Fd(b)) = (
        link.nic.readiness(0).unwrap(),
        link.nic.readiness(1).unwrap(),
    ) else {
        panic!("AF_XDP readiness is the socket's descriptor");
    };
    assert_ne!(a, b, "one socket per queue");
    assert!(link.nic.readiness(2).is_err());

    // Kernel -> us from many source ports: whichever queue each lands on.
    const COUNT: usize = 256;
    let sender = link
        .ns
        .spawn(|| {
            let socks: Vec<UdpSocket> = (0..16)
                .map(|_| UdpSocket::bind("10.215.0.1:0").unwrap())
                .collect();
            for i in 0..COUNT {
                let p = payload(2, i, 100);
                socks[i % 16].send_to(&p, ("10.215.0.2", OUR_PORT)).unwrap();
                if i % 16 == 15 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
        .unwrap();
    let mut got = Vec::new();
    let mut per_queue = [0usize; 2];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut batch = Batch::new();
    while got.len() < COUNT && Instant::now() < deadline {
        for (q, n) in per_queue.iter_mut().enumerate() {
            let k = link.nic.receive(q, &mut batch, 64).unwrap();
            *n += k;
            link.rx_frames += k as u64;
        }
        link.rx_bytes += batch.bytes() as u64;
        got.extend(batch.drain(..).filter_map(|f| udp_to_us(f.bytes())));
        std::thread::sleep(Duration::from_millis(1));
    }
    sender.join().unwrap().unwrap();
    got.sort();
    let mut want: Vec<Vec<u8>> = (0..COUNT).map(|i| payload(2, i, 100)).collect();
    want.sort();
    assert_eq!(got, want, "received {per_queue:?} per queue");
    eprintln!("kernel -> AF_XDP per queue: {per_queue:?}");
    let s = link.nic.counters().snapshot();
    for (q, &n) in per_queue.iter().enumerate() {
        assert_eq!(s.get(q, Counter::RxPackets), n as u64);
    }

    // Us -> kernel, half through each queue.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    // How many the kernel socket has delivered so far: each round waits for the
    // one before it, so a receiver thread the scheduler starves for a while
    // cannot let the socket's buffer overflow (that would be the test's loss,
    // not the backend's).
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&received);
    let receiver = link
        .ns
        .spawn(move || {
            let s = UdpSocket::bind(("10.215.0.1", KERNEL_PORT)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ready_tx.send(()).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 2048];
            while got.len() < 128 {
                match s.recv(&mut buf) {
                    Ok(n) => {
                        got.push(buf[..n].to_vec());
                        counted.store(got.len(), std::sync::atomic::Ordering::Release);
                    }
                    Err(_) => break,
                }
            }
            got
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let mut sent = Vec::new();
    for q in 0..2 {
        let payloads: Vec<Vec<u8>> = (0..64).map(|i| payload(3, q * 64 + i, 100)).collect();
        let mut batch: Batch = payloads
            .iter()
            .map(|p| Frame::plain(link.nic.pool().alloc_from(&link.udp_to_kernel(p))))
            .collect();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !batch.is_empty() && Instant::now() < deadline {
            link.nic.transmit(q, &mut batch).unwrap();
        }
        assert!(batch.is_empty(), "transmit stuck on queue {q}");
        sent.extend(payloads);
        let deadline = Instant::now() + Duration::from_secs(5);
        while received.load(std::sync::atomic::Ordering::Acquire) < sent.len()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let mut got = receiver.join().unwrap().unwrap();
    got.sort();
    sent.sort();
    assert_eq!(got, sent, "datagrams lost or changed");
    let s = link.nic.counters().snapshot();
    assert_eq!(s.get(0, Counter::TxPackets), 64);
    assert_eq!(s.get(1, Counter::TxPackets), 64);
    assert_eq!(s.total(Counter::RxPackets), link.rx_frames);
    assert_eq!(s.total(Counter::RxBytes), link.rx_bytes);
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(netns::unique("lrxd"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Set when this binary runs again, as nobody, to try opening AF_XDP.
const AS_NOBODY: &str = "LINERATE_XDP_AS_NOBODY";

#[test]
fn without_root_opening_is_permission_denied() {
    if std::env::var_os(AS_NOBODY).is_some() {
        // The child: no capabilities. `lo` is in every namespace.
        assert!(!netns::is_root());
        match Xdp::open(&XdpConfig::new("lo")) {
            Err(NicError::PermissionDenied { error, .. }) => {
                assert_eq!(error.raw_os_error(), Some(1), "{error}");
            }
            other => panic!("expected PermissionDenied, got {other:?}"),
        }
        return;
    }
    assert!(netns::is_root(), "system tests need root");
    // A copy nobody can execute, wherever the build tree is (it may be under a
    // directory only root can enter).
    let dir = TempDir::new();
    let exe = dir.0.join("system_xdp");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    for p in [&dir.0, &exe] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .current_dir("/")
        .args(["--exact", "without_root_opening_is_permission_denied"])
        .args(["--test-threads=1", "--nocapture"])
        .env(AS_NOBODY, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
