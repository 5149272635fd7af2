//! The TAP backend against the Linux kernel.
//!
//! Each test creates a TAP interface in this process, moves it into a network
//! namespace it creates (the descriptors keep working there), gives the kernel an
//! address on it, and plays the other host itself through the backend: frames it
//! reads are what the kernel sent, frames it writes are what the kernel receives.
//! The namespace and the interface go away when the guards drop, also on failure.
//!
//! * the kernel pings an address the test answers (ARP and ICMP echo), over two
//!   queues; the backend's pcap recording of it reads back in tshark;
//! * a kernel TCP sender, with the kernel's TSO on toward this side, hands over
//!   super-frames marked TCPv4 GSO, larger than the MTU; with it off, only
//!   MTU-sized frames;
//! * a super-frame written by linerate (one 40 KiB TCP segment, marked for
//!   segmentation with a partial checksum) reaches a kernel socket intact, handed
//!   to the kernel whole (the kernel segments it) and, with the TAP's transmit
//!   offloads off, segmented and checksummed by the shim into MTU frames;
//! * the TAP uses the 24-byte `virtio_net_hdr` exactly where the kernel has the
//!   UDP tunnel offload;
//! * the batched mode ([`TapConfig::io_uring`]): the ping, TSO, super-frame,
//!   shim and split cases again with a ring per queue (`_io_uring`), and a
//!   burst each way whose frames are exact and whose completions are reaped
//!   many per look and whose writes go in one submit.
//!
//! Every test drives the TAP through a [`Shim`]: transparent
//! ([`ShimConfig::none`]) unless the test says otherwise.
//!
//! Needs root: `cargo test --features system-tests --test system_nic_tap`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate::nic::pcap::MemoryRecorder;
use linerate::nic::tap::{Tap, TapConfig, TapOffloads};
use linerate::nic::{
    Batch, Counter, Frag, Frame, Nic, Offloads, PcapRecorder, Readiness, SharedBuf, Shim,
    ShimConfig,
};
use linerate::offload::virtio::HdrLen;
use linerate::offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate::wire::build::{FrameBuilder, Ip, L4};
use linerate::wire::etherparse::{
    IcmpEchoHeader, Icmpv4Type, NetSlice, SlicedPacket, TcpHeader, TcpOptionElement, TransportSlice,
};
use linerate::wire::{arp, checksum};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::tshark;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x02];
const KERNEL_IP: [u8; 4] = [10, 213, 0, 1];
const OUR_IP: [u8; 4] = [10, 213, 0, 2];
/// The ring depth of the batched cases.
const RING: u32 = 64;

/// The TAP, moved into its own namespace, with the kernel at `KERNEL_IP`/24.
struct Link {
    tap: Shim<Tap>,
    ns: Netns,
    /// The kernel interface's MAC.
    kernel_mac: [u8; 6],
    /// Frames answered here (ARP requests for `OUR_IP`).
    arp_replies: usize,
}

impl Link {
    fn new(queues: u16, offloads: TapOffloads, ring: Option<u32>) -> Link {
        Link::with(
            queues,
            offloads,
            Offloads::ALL,
            ShimConfig::none(),
            ring,
            true,
        )
    }

    /// A link whose TAP lets the kernel do `tx` on transmit, behind a shim
    /// with `shim`, batched through an io_uring of depth `ring` if given
    /// (receiving through a multishot read if `multishot`).
    fn with(
        queues: u16,
        offloads: TapOffloads,
        tx: Offloads,
        shim: ShimConfig,
        ring: Option<u32>,
        multishot: bool,
    ) -> Link {
        assert!(netns::is_root(), "system tests need root");
        let ns = Netns::new("lrnt").unwrap();
        let tap = Tap::open(&TapConfig {
            queues,
            offloads,
            tx,
            io_uring: ring,
            io_uring_multishot: multishot,
            ..TapConfig::new(netns::unique("lrt"))
        })
        .unwrap();
        assert!(
            tap.io_uring_fallback().is_none(),
            "{:?}",
            tap.io_uring_fallback()
        );
        assert_eq!(tap.io_uring_active(), ring.is_some());
        netns::ip(&["link", "set", tap.name(), "netns", ns.name()]).unwrap();
        ns.ip(&["addr", "add", "10.213.0.1/24", "dev", tap.name()])
            .unwrap();
        ns.ip(&["link", "set", tap.name(), "up"]).unwrap();
        let path = format!("/sys/class/net/{}/address", tap.name());
        let out = ns.exec("cat", &[&path]).unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let mac: Vec<u8> = text
            .trim()
            .split(':')
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        Link {
            tap: Shim::new(tap, shim).unwrap(),
            ns,
            kernel_mac: mac.try_into().unwrap(),
            arp_replies: 0,
        }
    }

    fn send(&mut self, frame: Vec<u8>, meta: OffloadMeta) {
        self.send_pieces(frame, meta, 0, 1);
    }

    /// Sends `frame` as a scatter-gather frame: its first `head` bytes in the
    /// head, the rest in `pieces` fragments of one shared buffer (linear if
    /// `head` is 0).
    fn send_pieces(&mut self, frame: Vec<u8>, meta: OffloadMeta, head: usize, pieces: usize) {
        let mut batch = Batch::new();
        if head == 0 {
            batch.push(Frame::new(self.tap.pool().alloc_from(&frame), meta));
        } else {
            let mut f = Frame::new(self.tap.pool().alloc_from(&frame[..head]), meta);
            let rest = SharedBuf::from_bytes(frame[head..].to_vec().into());
            let (len, step) = (rest.len(), rest.len().div_ceil(pieces));
            for at in (0..len).step_by(step) {
                let frag = Frag::new(rest.clone(), at, step.min(len - at)).unwrap();
                f.frags.push(frag).unwrap();
            }
            batch.push(f);
        }
        assert_eq!(self.tap.transmit(0, &mut batch).unwrap(), 1);
    }

    /// Every frame the kernel sent within `wait`, from all queues, after
    /// answering ARP requests for `OUR_IP`. Returns early once something came.
    fn poll(&mut self, wait: Duration) -> Vec<Frame> {
        let deadline = Instant::now() + wait;
        let mut batch = Batch::new();
        loop {
            for q in 0..self.tap.queues() {
                self.tap.receive(q, &mut batch, 64).unwrap();
            }
            if !batch.is_empty() || Instant::now() >= deadline {
                break;
            }
            let each = Duration::from_millis(2);
            for q in 0..self.tap.queues() {
                self.tap.readiness(q).unwrap().wait(each).unwrap();
            }
        }
        let mut out = Vec::new();
        for f in batch.drain(..) {
            let b = f.bytes();
            if b[12..14] == [0x08, 0x06] {
                let req = arp::Packet::new_checked(&b[14..]).unwrap();
                if req.oper() == arp::operation::REQUEST && req.tpa() == OUR_IP {
                    let reply = req.reply_to(OUR_MAC).to_arp_packet();
                    let frame = FrameBuilder::arp(reply, OUR_MAC, req.sha()).build(&[]);
                    self.send(frame, OffloadMeta::plain());
                    self.arp_replies += 1;
                }
                continue;
            }
            out.push(f);
        }
        out
    }
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let p = std::env::temp_dir().join(netns::unique("lrpc"));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TCP/IPv4 frame from us to the kernel.
#[allow(clippy::too_many_arguments)]
fn tcp_frame(
    kernel_mac: [u8; 6],
    ports: (u16, u16),
    seq: u32,
    ack: Option<u32>,
    syn: bool,
    fin: bool,
    options: &[TcpOptionElement],
    payload: &[u8],
) -> Vec<u8> {
    let mut h = TcpHeader::new(ports.0, ports.1, seq, 65_535);
    h.syn = syn;
    h.fin = fin;
    h.psh = !payload.is_empty();
    if let Some(a) = ack {
        h.ack = true;
        h.acknowledgment_number = a;
    }
    h.set_options(options).unwrap();
    FrameBuilder::new(Ip::v4(OUR_IP, KERNEL_IP), L4::Tcp(h))
        .macs(OUR_MAC, kernel_mac)
        .build(payload)
}

/// The TCP segment in a frame: (ports, seq, ack, syn, fin, window, payload length).
struct Seg {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    syn: bool,
    fin: bool,
    rst: bool,
    window: u16,
    payload: Vec<u8>,
}

fn tcp_of(frame: &[u8]) -> Option<Seg> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        return None;
    };
    if ip.header().destination() != OUR_IP {
        return None;
    }
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        return None;
    };
    Some(Seg {
        src_port: t.source_port(),
        dst_port: t.destination_port(),
        seq: t.sequence_number(),
        ack: t.acknowledgment_number(),
        syn: t.syn(),
        fin: t.fin(),
        rst: t.rst(),
        window: t.window_size(),
        payload: t.payload().to_vec(),
    })
}

#[test]
fn tap_probes_offloads_and_disappears_when_dropped() {
    assert!(netns::is_root(), "system tests need root");
    let name = netns::unique("lrp");
    let tap = Tap::open(&TapConfig::new(name.clone())).unwrap();
    assert_eq!(tap.name(), name);
    let avail = tap.offloads_available();
    assert!(
        avail.csum && avail.tso4 && avail.tso6 && avail.tso_ecn,
        "{avail:?}"
    );
    assert_eq!(tap.offloads_enabled(), TapOffloads::TSO);
    let caps = tap.caps();
    assert!(caps.offloads.lro && caps.offloads.tso4 && caps.offloads.tx_csum);
    assert_eq!(caps.queues, 1);
    assert!(netns::ip(&["link", "show", &name]).is_ok());
    drop(tap);
    assert!(
        netns::ip(&["link", "show", &name]).is_err(),
        "interface left behind"
    );
    assert!(Tap::open(&TapConfig::new("a-name-longer-than-15")).is_err());
}

/// `Tap::split`: one `Tap` per queue descriptor, each sending on its own
/// queue (the kernel counts both frames on the one interface, the counters keep
/// the interface's queue numbering), and the interface lives until the last
/// of them is dropped.
#[test]
fn a_split_tap_is_one_nic_per_queue_and_the_interface_outlives_all_but_the_last() {
    split_case(None);
}

#[test]
fn a_split_tap_is_one_nic_per_queue_and_the_interface_outlives_all_but_the_last_io_uring() {
    split_case(Some(RING));
}

fn split_case(ring: Option<u32>) {
    assert!(netns::is_root(), "system tests need root");
    let name = netns::unique("lrs");
    let tap = Tap::open(&TapConfig {
        queues: 2,
        io_uring: ring,
        ..TapConfig::new(name.clone())
    })
    .unwrap();
    assert_eq!(tap.io_uring_active(), ring.is_some());
    let counters = tap.counters().clone();
    netns::ip(&["link", "set", &name, "up"]).unwrap();
    let stat = |what: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{name}/statistics/{what}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let before = stat("rx_packets");
    let mut split = tap.split();
    assert_eq!(split.len(), 2);
    assert!(split.iter().all(|t| t.queues() == 1));
    let fds: Vec<_> = split.iter().map(|t| t.readiness(0).unwrap()).collect();
    assert!(matches!((&fds[0], &fds[1]), (Readiness::Fd(a), Readiness::Fd(b)) if a != b));
    for t in &mut split {
        let mut f = vec![0xffu8; 6];
        f.extend_from_slice(&[2, 0x4c, 0x52, 0, 0, 9, 0x88, 0xb5]);
        f.resize(60, 0);
        let mut batch: Batch = [Frame::plain(t.pool().alloc_from(&f))]
            .into_iter()
            .collect();
        assert_eq!(t.transmit(0, &mut batch).unwrap(), 1);
        assert!(t.transmit(1, &mut batch).is_err(), "one queue each");
    }
    assert_eq!(stat("rx_packets") - before, 2, "the kernel got both");
    assert_eq!(counters.get(0, Counter::TxPackets), 1);
    assert_eq!(counters.get(1, Counter::TxPackets), 1);
    let last = split.pop().unwrap();
    drop(split);
    assert!(
        netns::ip(&["link", "show", &name]).is_ok(),
        "gone with one queue left"
    );
    drop(last);
    assert!(
        netns::ip(&["link", "show", &name]).is_err(),
        "interface left behind"
    );
}

#[test]
fn kernel_pings_an_address_answered_through_the_tap() {
    ping_case(None);
}

#[test]
fn kernel_pings_an_address_answered_through_the_tap_io_uring() {
    ping_case(Some(RING));
}

fn ping_case(ring: Option<u32>) {
    let mut link = Link::new(2, TapOffloads::TSO, ring);
    assert_eq!(link.tap.queues(), 2);
    let dir = TempDir::new();
    let pcap = dir.0.join("ping.pcap");
    let recorder = Arc::new(PcapRecorder::create(&pcap).unwrap());
    link.tap.set_recorder(Some(recorder.clone()));
    let ns_name = link.ns.name().to_owned();
    let ping = std::thread::spawn(move || {
        std::process::Command::new("ip")
            .args(["netns", "exec", &ns_name, "ping", "-c", "3", "-i", "0.2"])
            .args(["-W", "2", "10.213.0.2"])
            .output()
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut echoes = 0;
    while !ping.is_finished() && Instant::now() < deadline {
        for f in link.poll(Duration::from_millis(50)) {
            let p = SlicedPacket::from_ethernet(f.bytes()).unwrap();
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
            .macs(OUR_MAC, f.bytes()[6..12].try_into().unwrap())
            .build(icmp.payload());
            link.send(reply, OffloadMeta::plain());
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
    assert!(link.arp_replies >= 1);
    let s = link.tap.counters().snapshot();
    assert!(s.total(Counter::RxPackets) >= 4, "{}", s.ethtool());
    assert_eq!(
        s.total(Counter::TxPackets) as usize,
        echoes + link.arp_replies
    );

    // The recording, read by tshark: both directions, every checksum good.
    link.tap.set_recorder(None);
    let recorder = Arc::into_inner(recorder).unwrap();
    assert!(recorder.error().is_none());
    recorder.finish().unwrap();
    let fields = ["icmp.type", "icmp.checksum.status", "arp.opcode"];
    let rows = tshark::fields(&pcap, &fields, &[]).unwrap();
    let count = |col: usize, v: &str| rows.iter().filter(|r| r[col] == v).count();
    assert_eq!(count(0, "8"), echoes, "echo requests in the pcap");
    assert_eq!(count(0, "0"), echoes, "echo replies in the pcap");
    assert_eq!(count(1, "1"), 2 * echoes, "good ICMP checksums");
    assert!(
        count(2, "1") >= 1 && count(2, "2") >= 1,
        "ARP request and reply"
    );
}

/// What a kernel TCP sender handed over: every data frame's length and GSO mark.
struct Received {
    frames: Vec<(usize, Option<Gso>, Checksum)>,
    bytes: usize,
}

/// The kernel connects to `OUR_IP:5001` and writes `len` bytes; the test plays a
/// receiver that acknowledges everything at once with a large window.
fn kernel_sends(offloads: TapOffloads, len: usize, ring: Option<u32>) -> Received {
    let mut link = Link::new(1, offloads, ring);
    let client = link
        .ns
        .spawn(move || {
            let to = SocketAddrV4::new(Ipv4Addr::from(OUR_IP), 5001);
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(5))?;
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            s.write_all(&data)?;
            std::io::Result::Ok(())
        })
        .unwrap();
    const ISS: u32 = 77_000;
    let mut rcv_nxt = None::<u32>;
    let mut got = Received {
        frames: Vec::new(),
        bytes: 0,
    };
    let mut fin = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fin && Instant::now() < deadline {
        for f in link.poll(Duration::from_millis(100)) {
            let Some(seg) = tcp_of(f.bytes()) else {
                continue;
            };
            assert!(!seg.rst, "the kernel reset the connection");
            let mac = link.kernel_mac;
            let ports = (seg.dst_port, seg.src_port);
            if seg.syn {
                rcv_nxt = Some(seg.seq.wrapping_add(1));
                let syn_ack = tcp_frame(
                    mac,
                    ports,
                    ISS,
                    rcv_nxt,
                    true,
                    false,
                    &[
                        TcpOptionElement::MaximumSegmentSize(1460),
                        TcpOptionElement::WindowScale(7),
                    ],
                    &[],
                );
                link.send(syn_ack, OffloadMeta::plain());
                continue;
            }
            let Some(nxt) = rcv_nxt else { continue };
            if !seg.payload.is_empty() {
                got.frames.push((f.len(), f.meta.gso, f.meta.csum));
            }
            if seg.seq == nxt {
                for (i, b) in seg.payload.iter().enumerate() {
                    assert_eq!(*b, ((got.bytes + i) % 251) as u8, "byte {}", got.bytes + i);
                }
                got.bytes += seg.payload.len();
                let mut n = nxt.wrapping_add(seg.payload.len() as u32);
                if seg.fin {
                    n = n.wrapping_add(1);
                    fin = true;
                }
                rcv_nxt = Some(n);
            }
            let ack = tcp_frame(
                mac,
                ports,
                ISS.wrapping_add(1),
                rcv_nxt,
                false,
                false,
                &[],
                &[],
            );
            link.send(ack, OffloadMeta::plain());
        }
    }
    client.join().unwrap().unwrap().unwrap();
    assert!(fin, "no FIN within the time limit; got {} bytes", got.bytes);
    assert_eq!(got.bytes, len);
    got
}

#[test]
fn kernel_tcp_hands_over_tso_super_frames() {
    tso_case(None);
}

#[test]
fn kernel_tcp_hands_over_tso_super_frames_io_uring() {
    tso_case(Some(RING));
}

fn tso_case(ring: Option<u32>) {
    let got = kernel_sends(TapOffloads::TSO, 8 << 20, ring);
    let supers: Vec<_> = got
        .frames
        .iter()
        .filter(|(len, gso, _)| gso.is_some() && *len > 1514)
        .collect();
    assert!(
        !supers.is_empty(),
        "no super-frame among {}",
        got.frames.len()
    );
    for (len, gso, csum) in &supers {
        let g = gso.unwrap();
        assert_eq!(g.kind, GsoType::TcpV4);
        assert!((1400..=1460).contains(&g.size), "gso_size {}", g.size);
        assert!(*len <= 65_536 + 14, "{len}");
        assert!(matches!(
            csum,
            Checksum::Partial {
                start: 34,
                offset: 16
            }
        ));
    }
    let biggest = supers.iter().map(|(len, ..)| *len).max().unwrap();
    eprintln!(
        "{} data frames, {} super-frames, the largest {biggest} bytes",
        got.frames.len(),
        supers.len()
    );
    assert!(biggest > 32 * 1024, "largest super-frame {biggest} bytes");
}

#[test]
fn without_tso_the_kernel_hands_over_mtu_sized_frames() {
    let got = kernel_sends(TapOffloads::NONE, 1 << 20, None);
    assert!(got.frames.len() >= (1 << 20) / 1460);
    for (len, gso, _) in &got.frames {
        assert!(gso.is_none() && *len <= 1514, "{len} bytes, {gso:?}");
    }
}

#[test]
fn a_linerate_super_frame_reaches_a_kernel_socket_intact() {
    super_frame_case(None);
}

#[test]
fn a_linerate_super_frame_reaches_a_kernel_socket_intact_io_uring() {
    super_frame_case(Some(RING));
}

fn super_frame_case(ring: Option<u32>) {
    // Linear, then scatter-gather (headers in the head, the payload in one,
    // three and twenty pieces: written with writev, or gathered past its limit).
    for (port, pieces) in [(5002, 0), (5012, 1), (5013, 3), (5014, 20)] {
        let mut link = Link::new(1, TapOffloads::TSO, ring);
        let rec = Arc::new(MemoryRecorder::new());
        link.tap.set_recorder(Some(rec.clone()));
        send_super_frame(&mut link, port, pieces);
        let wire = rec.take();
        assert!(
            wire.iter().any(|r| r.frame.len() > 1514),
            "handed over whole"
        );
        let s = link.tap.counters().snapshot();
        assert_eq!(s.total(Counter::TxGsoPackets), 1);
        assert_eq!(s.total(Counter::GsoSegments), 0);
    }
}

#[test]
fn shim_segments_accepted_by_the_kernel_when_the_tap_does_no_tso() {
    shim_case(None);
}

#[test]
fn shim_segments_accepted_by_the_kernel_when_the_tap_does_no_tso_io_uring() {
    shim_case(Some(RING));
}

fn shim_case(ring: Option<u32>) {
    // The kernel is not asked to segment or checksum anything from this side:
    // the shim does it, and the kernel socket must get the bytes intact.
    let mut link = Link::with(
        1,
        TapOffloads::TSO,
        Offloads::NONE,
        ShimConfig::all(),
        ring,
        false,
    );
    assert!(!link.tap.backend().caps().offloads.tso4);
    assert!(link.tap.caps().offloads.tso4 && link.tap.software().tx_csum);
    let rec = Arc::new(MemoryRecorder::new());
    link.tap.set_recorder(Some(rec.clone()));
    let n = send_super_frame(&mut link, 5003, 2);
    let wire: Vec<_> = rec
        .take()
        .into_iter()
        .filter(|r| r.dir == linerate::nic::pcap::Direction::Tx)
        .collect();
    assert!(!wire.is_empty());
    for r in &wire {
        assert!(r.frame.len() <= 1514, "{} bytes on the wire", r.frame.len());
        assert!(r.meta.gso.is_none());
        assert_eq!(r.meta.csum, Checksum::None, "completed in software");
    }
    let s = link.tap.counters().snapshot();
    assert_eq!(s.total(Counter::GsoSegments) as usize, n.div_ceil(1460));
    assert_eq!(s.total(Counter::TxGsoPackets), 0);
    let b = link.tap.backend().counters().snapshot();
    assert_eq!(b.total(Counter::TxGsoPackets), 0);
}

#[test]
fn tap_uses_the_tunnel_header_where_the_kernel_has_tunnel_gso() {
    assert!(netns::is_root(), "system tests need root");
    let tap = Tap::open(&TapConfig::new(netns::unique("lrh"))).unwrap();
    let avail = tap.offloads_available();
    eprintln!("kernel offloads {avail:?}, header {:?}", tap.header_len());
    if avail.udp_tunnel {
        assert_eq!(tap.header_len(), HdrLen::V1HashTunnel);
    } else {
        assert_eq!(tap.header_len(), HdrLen::V1);
        assert!(!tap.caps().offloads.tunnel_udp);
    }
}

/// Connects to a kernel socket on `port`, sends one 40 KiB super-frame (its
/// payload in `pieces` fragments, or in its head if 0) and a FIN, and checks
/// the socket read exactly the bytes; returns the payload size.
fn send_super_frame(link: &mut Link, port: u16, pieces: usize) -> usize {
    let listener = link
        .ns
        .run(move || TcpListener::bind(("10.213.0.1", port)))
        .unwrap()
        .unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    });
    let ports = (40_000, port);
    const ISS: u32 = 5_000;
    let mac = link.kernel_mac;
    let syn = tcp_frame(
        mac,
        ports,
        ISS,
        None,
        true,
        false,
        &[
            TcpOptionElement::MaximumSegmentSize(1460),
            TcpOptionElement::WindowScale(7),
        ],
        &[],
    );
    link.send(syn, OffloadMeta::plain());
    let deadline = Instant::now() + Duration::from_secs(10);
    let (irs, window) = loop {
        assert!(Instant::now() < deadline, "no SYN-ACK");
        let segs: Vec<_> = link
            .poll(Duration::from_millis(100))
            .iter()
            .filter_map(|f| tcp_of(f.bytes()))
            .collect();
        if let Some(s) = segs.iter().find(|s| s.syn && s.ack == ISS + 1) {
            break (s.seq, s.window);
        }
    };
    let ack = Some(irs.wrapping_add(1));
    link.send(
        tcp_frame(mac, ports, ISS + 1, ack, false, false, &[], &[]),
        OffloadMeta::plain(),
    );
    // One segment, 40 KiB or the kernel's window if smaller, marked for
    // segmentation into 1460-byte segments, its checksum left partial: the TCP
    // checksum field holds the pseudo-header sum only.
    let n = usize::from(window).min(40 * 1024);
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 256) as u8).collect();
    let mut frame = tcp_frame(mac, ports, ISS + 1, ack, false, false, &[], &data);
    let pseudo = checksum::pseudo_ipv4(OUR_IP, KERNEL_IP, 6, (20 + n) as u16);
    frame[34 + 16..34 + 18].copy_from_slice(&checksum::fold(pseudo).to_be_bytes());
    assert!(frame.len() > 1514);
    let head = if pieces == 0 { 0 } else { 14 + 20 + 20 };
    link.send_pieces(
        frame,
        OffloadMeta {
            csum: Checksum::Partial {
                start: 34,
                offset: 16,
            },
            gso: Some(Gso::new(GsoType::TcpV4, 1460)),
            ..OffloadMeta::plain()
        },
        head,
        pieces.max(1),
    );
    let fin_seq = ISS + 1 + n as u32;
    link.send(
        tcp_frame(mac, ports, fin_seq, ack, false, true, &[], &[]),
        OffloadMeta::plain(),
    );
    // Keep answering ARP until the kernel acknowledges the data and the FIN.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut acked = false;
    while !acked && Instant::now() < deadline {
        acked = link
            .poll(Duration::from_millis(100))
            .iter()
            .filter_map(|f| tcp_of(f.bytes()))
            .any(|s| s.ack == fin_seq + 1);
    }
    assert!(acked, "the kernel did not acknowledge the data and FIN");
    assert_eq!(server.join().unwrap(), data);
    n
}

/// The batched mode batches, and keeps frames exact both ways: a burst of
/// small UDP datagrams from a kernel socket arrives whole, its completions
/// reaped many per look at the completion queue; a batch of 64 frames from
/// here goes to the kernel in one submit and reaches a kernel socket whole.
/// Receive through the multishot read: one arming for the burst (again only
/// when its buffers ran out), where posted reads would poll once per read.
#[test]
fn io_uring_reaps_and_submits_in_batches() {
    io_uring_batches(true);
}

/// The same with reads kept posted (the default, and the path of kernels
/// before 6.7).
#[test]
fn io_uring_with_posted_reads_reaps_and_submits_in_batches() {
    io_uring_batches(false);
}

fn io_uring_batches(multishot: bool) {
    const N: usize = 400;
    // Half the entries are writes: room for the whole transmit batch.
    const DEPTH: u32 = 256;
    let mut link = Link::with(
        1,
        TapOffloads::TSO,
        Offloads::ALL,
        ShimConfig::none(),
        Some(DEPTH),
        multishot,
    );
    let dev = link.tap.backend().name().to_owned();
    // A static neighbour: the burst needs no ARP answered first.
    link.ns
        .ip(&[
            "neigh",
            "replace",
            "10.213.0.2",
            "lladdr",
            "02:4c:52:00:00:02",
            "dev",
            &dev,
        ])
        .unwrap();
    let payload = |i: usize| -> Vec<u8> { (0..64).map(|j| (i * 31 + j) as u8).collect() };
    // Reads posted or armed before the burst (the first receive does it).
    let mut batch = Batch::new();
    link.tap.receive(0, &mut batch, 64).unwrap();
    let before = link.tap.backend().ring_stats(0).unwrap();
    if multishot {
        assert_eq!(before.multishot_arms, 1, "{before:?}");
    } else {
        assert!(before.reads >= u64::from(DEPTH / 2), "{before:?}");
        assert_eq!(before.multishot_arms, 0);
    }
    // N datagrams from a kernel socket in the namespace.
    let burst = |ns: &Netns| {
        ns.run(move || {
            let s = std::net::UdpSocket::bind("10.213.0.1:0").unwrap();
            for i in 0..N {
                s.send_to(&payload(i), "10.213.0.2:6000").unwrap();
            }
        })
        .unwrap();
    };
    burst(&link.ns);
    std::thread::sleep(Duration::from_millis(200));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < N && Instant::now() < deadline {
        for f in link.poll(Duration::from_millis(50)) {
            let p = SlicedPacket::from_ethernet(f.bytes()).unwrap();
            if let Some(TransportSlice::Udp(u)) = &p.transport
                && u.destination_port() == 6000
            {
                got.push(u.payload().to_vec());
            }
        }
    }
    let mut want: Vec<Vec<u8>> = (0..N).map(payload).collect();
    want.sort();
    got.sort();
    assert_eq!(got.len(), N, "datagrams received");
    assert!(got == want, "received datagrams differ from those sent");
    let rx = link.tap.backend().ring_stats(0).unwrap();
    eprintln!("receive: {rx:?}");

    // A receiver that takes four frames per call, through bursts of N: what
    // the ring completed and not yet handed up is bounded by its buffers,
    // so the pool lends no more than a ring's worth of new ones.
    let allocated = |l: &Link| linerate_nic::Nic::pool(l.tap.backend()).stats().allocated;
    let start = allocated(&link);
    for _ in 0..3 {
        burst(&link.ns);
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while n < N && Instant::now() < deadline {
            let mut batch = Batch::new();
            link.tap.receive(0, &mut batch, 4).unwrap();
            n += batch
                .iter()
                .filter(|f| f.bytes().len() == 14 + 20 + 8 + 64)
                .count();
            if batch.is_empty() {
                let _ = link
                    .tap
                    .readiness(0)
                    .unwrap()
                    .wait(Duration::from_millis(2));
            }
        }
        assert_eq!(n, N, "datagrams received four at a time");
    }
    let slow = link.tap.backend().ring_stats(0).unwrap();
    assert!(slow.max_waiting <= u64::from(DEPTH / 2), "{slow:?}");
    let more = allocated(&link) - start;
    assert!(
        more <= u64::from(DEPTH),
        "{more} buffers allocated for {} frames taken four at a time",
        3 * N
    );
    if multishot {
        // Every datagram read by the one operation; armed again only after
        // its 128 buffers ran out (at most once per 128 frames), not per frame.
        assert!(rx.reads - before.reads >= N as u64, "{rx:?}");
        let arms = rx.multishot_arms - before.multishot_arms;
        assert!(
            arms <= (N as u64).div_ceil(u64::from(DEPTH / 2)) + 1,
            "{rx:?}"
        );
    }
    assert!(
        rx.max_reaped >= u64::from(DEPTH / 8),
        "at most {} completions in one look",
        rx.max_reaped
    );
    assert!(
        rx.completions - before.completions > 2 * (rx.enters - before.enters),
        "{} completions for {} enters",
        rx.completions - before.completions,
        rx.enters - before.enters
    );

    // 64 frames in one transmit: one submit, every datagram exact.
    let sock = link
        .ns
        .run(|| std::net::UdpSocket::bind("10.213.0.1:6001"))
        .unwrap()
        .unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mac = link.kernel_mac;
    let mut batch = Batch::new();
    for i in 0..64 {
        let frame = FrameBuilder::new(Ip::v4(OUR_IP, KERNEL_IP), L4::udp(7000, 6001))
            .macs(OUR_MAC, mac)
            .build(&payload(1000 + i));
        batch.push(Frame::plain(link.tap.pool().alloc_from(&frame)));
    }
    let tx_before = link.tap.backend().ring_stats(0).unwrap();
    assert_eq!(link.tap.transmit(0, &mut batch).unwrap(), 64);
    let tx = link.tap.backend().ring_stats(0).unwrap();
    eprintln!("transmit: {tx:?}");
    assert_eq!(tx.writes - tx_before.writes, 64);
    assert_eq!(tx.enters - tx_before.enters, 1, "one submit for the batch");
    let mut seen = Vec::new();
    let mut buf = [0u8; 2048];
    for _ in 0..64 {
        let n = sock.recv(&mut buf).unwrap();
        seen.push(buf[..n].to_vec());
    }
    seen.sort();
    let mut want: Vec<Vec<u8>> = (0..64).map(|i| payload(1000 + i)).collect();
    want.sort();
    assert!(seen == want, "the kernel socket got other bytes");
}
