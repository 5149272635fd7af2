//! Stacks run on vNICs unchanged: linerate engines on vNICs of one partition
//! (switched inside, super-frames whole), across two partitions over a wire with
//! software offloads (with a second pair on VLAN 7 at the same time), and a VXLAN
//! tunnel endpoint on a vNIC. Byte-exact each way.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, PairConfig};
use linerate_nic::{Batch, Counter, Nic, NicCaps, Shim, ShimConfig};
use linerate_toe::{Config, Engine, Instant, PoolSink, SocketHandle};
use linerate_tunnel::{Encap, Tunnel, VniConfig, VtepConfig};
use linerate_vnic::{Partition, PartitionConfig, VlanMode, VnicConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

const LEN: usize = 4 << 20;

fn byte(side: u8, i: usize) -> u8 {
    ((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8 ^ side
}

struct Host {
    engine: Engine,
    nic: Box<dyn Nic>,
    tx: Batch,
    rx: Batch,
}

impl Host {
    fn new(nic: Box<dyn Nic>, mac: [u8; 6], ip: Ipv4Addr) -> Host {
        let mut cfg = Config::new(mac).with_ipv4(ip, 24);
        cfg.offloads = true;
        cfg.mtu = nic.caps().mtu;
        Host {
            engine: Engine::new(cfg, u64::from(mac[5])),
            nic,
            tx: Batch::new(),
            rx: Batch::new(),
        }
    }

    fn pump(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        while let Ok(n) = self.nic.receive(0, &mut self.rx, 256) {
            if n == 0 {
                break;
            }
            moved += n;
            self.engine.handle_frames(now, &mut self.rx);
        }
        self.engine.poll_transmit_into(
            now,
            &mut PoolSink::new(self.nic.pool(), &mut self.tx).with_frags(self.nic.tx_sg()),
        );
        moved += self.tx.len();
        while !self.tx.is_empty() {
            if self.nic.transmit(0, &mut self.tx).unwrap_or(1) == 0 {
                break;
            }
        }
        self.tx.clear();
        moved
    }
}

/// Connections from each pair's first host to its second (`dst`), LEN bytes each
/// way at once, all pairs together; every byte checked.
fn transfer(pairs: &mut [(Host, Host, Ipv4Addr)]) {
    let start = std::time::Instant::now();
    let mut skipped = Duration::ZERO;
    let now_of =
        |skipped: Duration| Instant::from_nanos((start.elapsed() + skipped).as_nanos() as u64);
    struct Flow {
        socks: [Option<SocketHandle>; 2],
        listener: linerate_toe::ListenerHandle,
        sent: [usize; 2],
        got: [usize; 2],
    }
    let mut flows: Vec<Flow> = pairs
        .iter_mut()
        .map(|(a, b, dst)| {
            let listener = b.engine.tcp_listen(5001).unwrap();
            let c = a
                .engine
                .tcp_connect(
                    now_of(Duration::ZERO),
                    SocketAddr::new(IpAddr::V4(*dst), 5001),
                )
                .unwrap();
            Flow {
                socks: [Some(c), None],
                listener,
                sent: [0; 2],
                got: [0; 2],
            }
        })
        .collect();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    while flows.iter().any(|f| f.got.iter().any(|&g| g < LEN)) {
        assert!(start.elapsed() < Duration::from_secs(120), "stalled");
        let now = now_of(skipped);
        let mut moved = 0;
        for ((a, b, _), f) in pairs.iter_mut().zip(flows.iter_mut()) {
            if f.socks[1].is_none() {
                f.socks[1] = b.engine.tcp_accept(f.listener).ok();
            }
            for (i, host) in [&mut *a, &mut *b].into_iter().enumerate() {
                let Some(s) = f.socks[i] else { continue };
                while f.sent[i] < LEN {
                    let len = chunk.len().min(LEN - f.sent[i]);
                    for (k, x) in chunk[..len].iter_mut().enumerate() {
                        *x = byte(i as u8, f.sent[i] + k);
                    }
                    match host.engine.tcp_send(s, &chunk[..len]) {
                        Ok(n) if n > 0 => f.sent[i] += n,
                        _ => break,
                    }
                }
                while let Ok(n) = host.engine.tcp_recv(s, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    for (k, &x) in buf[..n].iter().enumerate() {
                        assert_eq!(x, byte(1 - i as u8, f.got[i] + k), "byte {}", f.got[i] + k);
                    }
                    f.got[i] += n;
                    moved += 1;
                }
            }
            moved += a.pump(now) + b.pump(now);
        }
        if moved == 0 {
            let next = pairs
                .iter()
                .flat_map(|(a, b, _)| [a.engine.poll_timeout(), b.engine.poll_timeout()])
                .flatten()
                .min();
            if let Some(next) = next {
                let cur = now_of(skipped).as_nanos();
                skipped += Duration::from_nanos(next.as_nanos().saturating_sub(cur));
            }
            let now = now_of(skipped);
            for (a, b, _) in pairs.iter_mut() {
                a.engine.handle_timeout(now);
                b.engine.handle_timeout(now);
            }
        }
    }
}

fn mac(i: u8) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x20, i]
}

/// Two partitions over the two ends of a plain memory pair, each under the
/// shim (software GSO/GRO and checksums for every vNIC).
fn shimmed_partitions() -> (
    Partition<Shim<linerate_nic::MemNic>>,
    Partition<Shim<linerate_nic::MemNic>>,
) {
    let (pa, pb) = memory::pair(PairConfig::new(NicCaps::plain(), NicCaps::plain()));
    let part = |p| {
        Partition::new(
            Shim::new(p, ShimConfig::all()).unwrap(),
            PartitionConfig::default(),
        )
    };
    (part(pa), part(pb))
}

#[test]
fn engines_on_two_vnics_of_one_partition_talk_through_the_embedded_switch() {
    let (port, _far) = memory::pair(PairConfig::new(NicCaps::plain(), NicCaps::plain()));
    let part = Partition::new(
        Shim::new(port, ShimConfig::all()).unwrap(),
        PartitionConfig::default(),
    );
    let a = part.add(VnicConfig::new(mac(1))).unwrap();
    let b = part.add(VnicConfig::new(mac(2))).unwrap();
    let ip = |i| Ipv4Addr::new(10, 0, 0, i);
    let mut pairs = [(
        Host::new(Box::new(a), mac(1), ip(1)),
        Host::new(Box::new(b), mac(2), ip(2)),
        ip(2),
    )];
    transfer(&mut pairs);
    // Super-frames crossed whole, and only ARP's broadcasts reached the wire.
    let (a, b, _) = &pairs[0];
    assert!(b.nic.counters().total(Counter::RxGsoPackets) > 0);
    assert!(a.nic.counters().total(Counter::RxGsoPackets) > 0);
    let wire_frames = part.with_backend(|s| s.backend().counters().total(Counter::TxPackets));
    assert!(wire_frames <= 4, "{wire_frames} frames reached the wire");
}

#[test]
fn engines_on_vnics_of_two_partitions_with_two_vlans_at_once() {
    let (pa, pb) = shimmed_partitions();
    let on = |p: &Partition<Shim<linerate_nic::MemNic>>, i: u8, vlan: VlanMode| {
        Box::new(
            p.add(VnicConfig {
                vlan,
                ..VnicConfig::new(mac(i))
            })
            .unwrap(),
        )
    };
    // The same addresses on both VLANs: only the tags keep the pairs apart.
    let ip = |i| Ipv4Addr::new(10, 0, 0, i);
    let mut pairs = [
        (
            Host::new(on(&pa, 1, VlanMode::Untagged), mac(1), ip(1)),
            Host::new(on(&pb, 2, VlanMode::Untagged), mac(2), ip(2)),
            ip(2),
        ),
        (
            Host::new(on(&pa, 1, VlanMode::Access(7)), mac(1), ip(1)),
            Host::new(on(&pb, 2, VlanMode::Access(7)), mac(2), ip(2)),
            ip(2),
        ),
    ];
    transfer(&mut pairs);
    for (a, b, _) in &pairs {
        for h in [a, b] {
            assert!(h.nic.counters().total(Counter::RxBytes) >= LEN as u64);
            assert!(h.nic.counters().total(Counter::RxBytes) < (LEN as u64) * 5 / 4);
        }
    }
    // Software GSO below the partition: MTU segments on the wire.
    let segs = pa.with_backend(|s| s.counters().total(Counter::GsoSegments));
    assert!(segs > (LEN / 1500) as u64);
}

#[test]
fn a_vxlan_tunnel_runs_on_a_vnic() {
    let (pa, pb) = shimmed_partitions();
    let (ua, ub) = (mac(0x11), mac(0x12));
    let (ia, ib): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    let va = pa.add(VnicConfig::new(ua)).unwrap();
    let vb = pb.add(VnicConfig::new(ub)).unwrap();
    // A plain engine on another vNIC of side A, untouched by the tunnel.
    let mut bystander = pa.add(VnicConfig::new(mac(0x13))).unwrap();
    let ta = Tunnel::new(
        va,
        VtepConfig::new(Encap::Vxlan, ua, ia),
        VniConfig::new(42, ib),
    )
    .unwrap();
    let tb = Tunnel::new(
        vb,
        VtepConfig::new(Encap::Vxlan, ub, ib),
        VniConfig::new(42, ia),
    )
    .unwrap();
    let ip = |i| Ipv4Addr::new(10, 0, 0, i);
    let mut pairs = [(
        Host::new(Box::new(ta), mac(1), ip(1)),
        Host::new(Box::new(tb), mac(2), ip(2)),
        ip(2),
    )];
    transfer(&mut pairs);
    // The tunnel's frames went to its vNIC only: the bystander saw broadcasts
    // (the VTEPs' ARP) and nothing else.
    let mut seen = Batch::new();
    while bystander.receive(0, &mut seen, 256).unwrap() > 0 {}
    assert!(
        !seen.is_empty(),
        "ARP broadcasts reach every vNIC of the LAN"
    );
    assert!(seen.iter().all(|f| f.bytes()[..6] == [0xff; 6]));
}
