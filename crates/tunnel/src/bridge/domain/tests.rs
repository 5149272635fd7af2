use super::*;
use crate::bridge::{FdbConfig, SuppressConfig};
use linerate_nic::{MemNic, NicCaps};
use linerate_wire::arp;
use linerate_wire::build::FrameBuilder;
use std::collections::VecDeque;

const T0: Duration = Duration::ZERO;

/// The tunnel side as a test sees it: frames "from" remote VTEPs are pushed in,
/// frames "to" them are collected.
#[derive(Default)]
struct FakeOverlay {
    inbound: VecDeque<(IpAddr, Frame)>,
    sent: Vec<(IpAddr, Vec<u8>)>,
}

impl Overlay for FakeOverlay {
    fn receive(&mut self, batch: &mut Vec<(IpAddr, Frame)>, max: usize) -> Result<usize, NicError> {
        let n = max.min(self.inbound.len());
        batch.extend(self.inbound.drain(..n));
        Ok(n)
    }
    fn transmit(&mut self, remote: IpAddr, batch: &mut Batch) -> Result<usize, NicError> {
        let n = batch.len();
        self.sent
            .extend(batch.drain(..).map(|f| (remote, f.bytes().to_vec())));
        Ok(n)
    }
}

fn r(i: u8) -> IpAddr {
    IpAddr::from([10, 0, 0, i])
}

fn mac(i: u8) -> Mac {
    [2, 0, 0, 0, 0, i]
}

/// An Ethernet frame from `src` to `dst` with a marker payload.
fn eth(src: Mac, dst: Mac, mark: u8) -> Vec<u8> {
    let mut f = dst.to_vec();
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend_from_slice(&[mark; 46]);
    f
}

/// A domain with `n` local ports; returns it and the host ends of the ports.
fn domain(n: usize, cfg: DomainConfig, fdb: FdbConfig) -> (BridgeDomain<FakeOverlay>, Vec<MemNic>) {
    let mut d = BridgeDomain::new(cfg, FakeOverlay::default(), Fdb::new(fdb));
    let mut hosts = Vec::new();
    for _ in 0..n {
        let (host, port) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        d.add_port(Box::new(port));
        hosts.push(host);
    }
    d.fdb_mut().add_flood(cfg.vni, r(2)).unwrap();
    d.fdb_mut().add_flood(cfg.vni, r(3)).unwrap();
    (d, hosts)
}

fn send(host: &mut MemNic, bytes: &[u8]) {
    let mut b = Batch::new();
    b.push(Frame::plain(host.pool().alloc_from(bytes)));
    assert_eq!(host.transmit(0, &mut b).unwrap(), 1);
}

fn recv(host: &mut MemNic) -> Vec<Vec<u8>> {
    let mut b = Batch::new();
    host.receive(0, &mut b, 1024).unwrap();
    b.iter().map(|f| f.bytes().to_vec()).collect()
}

fn from_remote(d: &mut BridgeDomain<FakeOverlay>, remote: IpAddr, bytes: &[u8]) {
    let f = Frame::plain(linerate_nic::PacketBuf::from_slice(bytes));
    d.overlay_mut().inbound.push_back((remote, f));
}

fn sent_to(d: &mut BridgeDomain<FakeOverlay>) -> Vec<(IpAddr, Vec<u8>)> {
    std::mem::take(&mut d.overlay_mut().sent)
}

#[test]
fn flood_then_learn_then_unicast() {
    let (mut d, mut h) = domain(2, DomainConfig::new(42), FdbConfig::default());
    // Host 0 (A) to an unknown B: every other local port and every remote VTEP.
    let a_to_b = eth(mac(0xa), mac(0xb), 1);
    send(&mut h[0], &a_to_b);
    d.poll(T0);
    assert_eq!(recv(&mut h[1]), std::slice::from_ref(&a_to_b));
    assert!(recv(&mut h[0]).is_empty(), "never back to the ingress");
    let mut to = sent_to(&mut d);
    to.sort();
    assert_eq!(to, [(r(2), a_to_b.clone()), (r(3), a_to_b.clone())]);

    // B answers from behind VTEP 10.0.0.3: only host 0 gets it.
    let b_to_a = eth(mac(0xb), mac(0xa), 2);
    from_remote(&mut d, r(3), &b_to_a);
    d.poll(T0);
    assert_eq!(recv(&mut h[0]), [b_to_a]);
    assert!(recv(&mut h[1]).is_empty());
    assert!(sent_to(&mut d).is_empty(), "never back into the tunnel");

    // Now A to B goes to 10.0.0.3 alone.
    send(&mut h[0], &a_to_b);
    d.poll(T0);
    assert_eq!(sent_to(&mut d), [(r(3), a_to_b)]);
    assert!(recv(&mut h[1]).is_empty());
    assert_eq!(d.port_counters(0).unwrap().flooded, 1);
    let dump: Vec<String> = d.dump(T0).iter().map(ToString::to_string).collect();
    assert!(
        dump.contains(&"02:00:00:00:00:0b dst 10.0.0.3 vni 42 used 0".to_string()),
        "{dump:?}"
    );
    assert!(
        dump.contains(&"02:00:00:00:00:0a port 0 vni 42 used 0".to_string()),
        "{dump:?}"
    );
}

#[test]
fn broadcast_from_the_tunnel_stays_local() {
    let (mut d, mut h) = domain(3, DomainConfig::new(1), FdbConfig::default());
    let bcast = eth(mac(0xb), [0xff; 6], 3);
    from_remote(&mut d, r(2), &bcast);
    d.poll(T0);
    for host in &mut h {
        assert_eq!(recv(host), std::slice::from_ref(&bcast));
    }
    assert!(sent_to(&mut d).is_empty());
}

#[test]
fn entries_age_in_virtual_time_and_flooding_resumes() {
    let (mut d, mut h) = domain(2, DomainConfig::new(1), FdbConfig::default());
    from_remote(&mut d, r(2), &eth(mac(0xb), mac(0xa), 0));
    d.poll(T0);
    recv(&mut h[0]);
    recv(&mut h[1]);
    send(&mut h[0], &eth(mac(0xa), mac(0xb), 1));
    d.poll(Duration::from_secs(299));
    assert_eq!(sent_to(&mut d).len(), 1, "still known after 299 s");
    send(&mut h[0], &eth(mac(0xa), mac(0xb), 2));
    d.poll(Duration::from_secs(300));
    assert_eq!(
        sent_to(&mut d).len(),
        2,
        "aged out at 300 s: flooded to both VTEPs"
    );
    assert_eq!(recv(&mut h[1]).len(), 1);
    assert_eq!(d.fdb().counters(1).unwrap().aged, 1);
}

#[test]
fn a_mac_moves_from_a_remote_vtep_to_a_local_port() {
    let (mut d, mut h) = domain(2, DomainConfig::new(1), FdbConfig::default());
    from_remote(&mut d, r(2), &eth(mac(0xb), mac(0xa), 0));
    d.poll(T0);
    recv(&mut h[1]);
    send(&mut h[1], &eth(mac(0xb), mac(0xa), 1)); // B is now behind port 1
    d.poll(T0);
    recv(&mut h[0]);
    sent_to(&mut d);
    send(&mut h[0], &eth(mac(0xa), mac(0xb), 2));
    d.poll(T0);
    assert_eq!(recv(&mut h[1]).len(), 1);
    assert!(sent_to(&mut d).is_empty());
    assert_eq!(d.fdb().counters(1).unwrap().moved, 1);
}

#[test]
fn a_flood_of_random_source_macs_keeps_the_table_bounded() {
    let fdb = FdbConfig {
        max_per_vni: 64,
        max_total: 64,
        ..FdbConfig::default()
    };
    let (mut d, mut h) = domain(2, DomainConfig::new(1), fdb);
    let mut x = 0x1234_5678u32;
    for round in 0..50 {
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let b = x.to_be_bytes();
            send(
                &mut h[0],
                &eth([2, 1, b[0], b[1], b[2], b[3]], [0xff; 6], 0),
            );
        }
        d.poll(Duration::from_millis(round));
        recv(&mut h[1]);
        sent_to(&mut d);
        assert!(d.fdb().len() <= 64);
    }
    assert_eq!(d.fdb().len(), 64);
    assert_eq!(d.fdb().counters(1).unwrap().full, 50 * 40 - 64);
}

#[test]
fn arp_for_a_known_address_is_answered_locally_not_flooded() {
    let mut cfg = DomainConfig::new(7);
    cfg.suppress = Some(SuppressConfig::default());
    let (mut d, mut h) = domain(2, cfg, FdbConfig::default());
    // The remote host's ARP reply teaches the binding on its way through.
    let reply = FrameBuilder::arp(
        arp::reply(mac(0xb), [192, 168, 0, 2], mac(0xa), [192, 168, 0, 1]).into(),
        mac(0xb),
        mac(0xa),
    )
    .build(&[]);
    from_remote(&mut d, r(3), &reply);
    d.poll(T0);
    recv(&mut h[0]);
    recv(&mut h[1]);
    // Host 1 asks: answered at once on port 1; nothing flooded.
    let ask = FrameBuilder::arp(
        arp::request(mac(0xc), [192, 168, 0, 3], [192, 168, 0, 2]).into(),
        mac(0xc),
        [0xff; 6],
    )
    .build(&[]);
    send(&mut h[1], &ask);
    d.poll(T0);
    let got = recv(&mut h[1]);
    assert_eq!(got.len(), 1);
    let p = arp::Packet::new_checked(&got[0][14..]).unwrap();
    assert_eq!(
        (p.oper(), p.sha(), p.spa()),
        (2, mac(0xb), [192, 168, 0, 2])
    );
    assert!(recv(&mut h[0]).is_empty());
    assert!(sent_to(&mut d).is_empty());
    assert_eq!(d.port_counters(1).unwrap().suppressed, 1);
}

#[test]
fn runt_frames_are_counted_and_dropped() {
    let (mut d, mut h) = domain(2, DomainConfig::new(1), FdbConfig::default());
    from_remote(&mut d, r(2), &[1, 2, 3]);
    d.poll(T0);
    assert_eq!(d.overlay_counters().rx_dropped_malformed, 1);
    assert!(recv(&mut h[0]).is_empty() && recv(&mut h[1]).is_empty());
}

#[test]
fn a_slow_port_keeps_a_bounded_backlog() {
    /// A port that never has room.
    struct Stuck(MemNic);
    impl Nic for Stuck {
        fn caps(&self) -> &NicCaps {
            self.0.caps()
        }
        fn receive(&mut self, q: usize, b: &mut Batch, m: usize) -> Result<usize, NicError> {
            self.0.receive(q, b, m)
        }
        fn transmit(&mut self, _: usize, _: &mut Batch) -> Result<usize, NicError> {
            Ok(0)
        }
        fn readiness(&self, q: usize) -> Result<linerate_nic::Readiness, NicError> {
            self.0.readiness(q)
        }
        fn counters(&self) -> &linerate_nic::Counters {
            self.0.counters()
        }
        fn pool(&self) -> &linerate_nic::Pool {
            self.0.pool()
        }
        fn set_recorder(&mut self, r: Option<std::sync::Arc<dyn linerate_nic::Recorder>>) {
            self.0.set_recorder(r)
        }
    }
    let mut cfg = DomainConfig::new(1);
    cfg.tx_backlog = 10;
    let mut d = BridgeDomain::new(cfg, FakeOverlay::default(), Fdb::new(FdbConfig::default()));
    let (_host, port) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    d.add_port(Box::new(Stuck(port)));
    for i in 0..25u8 {
        from_remote(&mut d, r(2), &eth(mac(0xb), [0xff; 6], i));
    }
    d.poll(T0);
    let c = d.port_counters(0).unwrap();
    assert_eq!((c.tx_packets, c.tx_dropped_full), (0, 15));
}

/// An IPv4 UDP frame from `src` to `dst` whose IP packet is `len` bytes, DF set.
fn ipv4_df(src: Mac, dst: Mac, len: usize) -> Vec<u8> {
    let b = etherparse::PacketBuilder::ethernet2(src, dst)
        .ipv4([192, 168, 0, 1], [192, 168, 0, 2], 64)
        .udp(1000, 2000);
    let mut f = Vec::new();
    b.write(&mut f, &vec![7u8; len - 28]).unwrap();
    f[14 + 6] |= 0x40;
    f[24] = 0;
    f[25] = 0;
    let c = linerate_wire::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn a_packet_too_big_for_the_tunnel_is_answered_and_kept_out_of_it() {
    let cfg = DomainConfig {
        mtu: Some(1450),
        ..DomainConfig::new(42)
    };
    let (mut d, mut h) = domain(2, cfg, FdbConfig::default());
    // Flooded (B unknown): the other local port gets it, the tunnel does not,
    // and the sender is told the overlay's MTU.
    let big = ipv4_df(mac(0xa), mac(0xb), 1500);
    send(&mut h[0], &big);
    d.poll(T0);
    assert_eq!(recv(&mut h[1]), std::slice::from_ref(&big));
    assert!(
        sent_to(&mut d).is_empty(),
        "nothing oversize into the tunnel"
    );
    let back = recv(&mut h[0]);
    assert_eq!(back.len(), 1, "one ICMP answer");
    let p = etherparse::SlicedPacket::from_ethernet(&back[0]).unwrap();
    let Some(etherparse::TransportSlice::Icmpv4(icmp)) = p.transport else {
        panic!("not ICMP: {p:?}");
    };
    assert_eq!(
        icmp.icmp_type(),
        etherparse::Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu: 1450 }
        )
    );
    let c = d.port_counters(0).unwrap();
    assert_eq!((c.rx_dropped_oversize, c.icmp_too_big), (1, 1));
    // Unicast to a remote VTEP: dropped and answered too.
    d.fdb_mut()
        .add_static(42, mac(0xb), Dest::Remote(r(2)))
        .unwrap();
    send(&mut h[0], &big);
    d.poll(T0);
    assert!(sent_to(&mut d).is_empty());
    assert_eq!(recv(&mut h[0]).len(), 1);
    // At the MTU it goes.
    let fits = ipv4_df(mac(0xa), mac(0xb), 1450);
    send(&mut h[0], &fits);
    d.poll(T0);
    assert_eq!(sent_to(&mut d), [(r(2), fits)]);
    assert!(recv(&mut h[0]).is_empty());
    let c = d.port_counters(0).unwrap();
    assert_eq!((c.rx_dropped_oversize, c.icmp_too_big), (2, 2));
}

/// Counts the `l2miss` log's lines.
struct MissLines(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl tracing::Subscriber for MissLines {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if e.metadata().target().ends_with("domain") {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn an_unknown_destination_is_logged_once_per_interval_and_counted_each_time() {
    let lines = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = || lines.load(std::sync::atomic::Ordering::Relaxed);
    let cfg = DomainConfig {
        l2miss: true,
        ..DomainConfig::new(42)
    };
    let (mut d, mut h) = domain(2, cfg, FdbConfig::default());
    tracing::subscriber::with_default(MissLines(lines.clone()), || {
        for _ in 0..3 {
            send(&mut h[0], &eth(mac(0xa), mac(0xb), 1));
            d.poll(T0);
        }
        assert_eq!(seen(), 1, "one line for B in the interval");
        // Broadcast is no miss; a known destination neither.
        send(&mut h[0], &eth(mac(0xa), [0xff; 6], 2));
        send(&mut h[1], &eth(mac(0xc), mac(0xa), 3));
        d.poll(T0);
        assert_eq!(seen(), 1);
        send(&mut h[0], &eth(mac(0xa), mac(0xb), 4));
        d.poll(L2MISS_INTERVAL);
        assert_eq!(seen(), 2, "B again once the interval passed");
        // Many MACs: the line budget holds.
        let later = L2MISS_INTERVAL * 3;
        for i in 0..200u8 {
            send(&mut h[0], &eth(mac(0xa), [2, 1, 0, 0, 0, i], 5));
            d.poll(later);
        }
        assert_eq!(seen(), 2 + L2MISS_LINES as usize);
    });
    assert_eq!(d.port_counters(0).unwrap().l2miss, 3 + 1 + 200);
    assert_eq!(d.port_counters(1).unwrap().l2miss, 0);
}

#[test]
fn without_learning_remote_sources_are_not_learned_but_local_ones_are() {
    let cfg = DomainConfig {
        learning: false,
        ..DomainConfig::new(42)
    };
    let (mut d, mut h) = domain(1, cfg, FdbConfig::default());
    from_remote(&mut d, r(2), &eth(mac(0xb), mac(0xa), 1));
    send(&mut h[0], &eth(mac(0xa), mac(0xb), 2));
    d.poll(T0);
    assert_eq!(recv(&mut h[0]).len(), 1, "delivered");
    assert_eq!(d.fdb().lookup(T0, 42, mac(0xb)), None);
    assert_eq!(d.fdb().lookup(T0, 42, mac(0xa)), Some(Dest::Local(0)));
    // A's answer to B floods to both remote VTEPs.
    let sent: Vec<IpAddr> = sent_to(&mut d).into_iter().map(|(ip, _)| ip).collect();
    assert_eq!(sent, vec![r(2), r(3)]);
    d.set_learning(true, false);
    from_remote(&mut d, r(2), &eth(mac(0xb), mac(0xa), 3));
    d.poll(T0);
    assert_eq!(d.fdb().lookup(T0, 42, mac(0xb)), Some(Dest::Remote(r(2))));
}
