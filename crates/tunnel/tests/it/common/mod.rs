//! Two engines over two tunnel endpoints on a memory pair: the one place the
//! tests use the engine (so its imports change in one place).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::memory::{self, Faults, PairConfig};
use linerate_nic::{Batch, Nic, NicCaps, Shim, ShimConfig};
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, PoolSink};
use linerate_tunnel::{Encap, GeneveOpt, NextHop, Tunnel, TunnelNic, VniConfig, VtepConfig};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// How offloads are arranged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Ports with tunnel TSO/LRO: super-segments cross whole.
    Hw,
    /// Plain ports, the shim segments and coalesces in software.
    Sw,
    /// No offload anywhere: MSS-sized segments encapsulated one by one.
    Off,
}

/// The three encapsulations; GENEVE with two option TLVs.
pub fn kinds() -> [Encap; 3] {
    [
        Encap::Vxlan,
        Encap::Geneve {
            options: vec![
                GeneveOpt {
                    class: 0x0102,
                    kind: 0x80,
                    data: vec![1, 2, 3, 4],
                },
                GeneveOpt {
                    class: 0xff01,
                    kind: 0x05,
                    data: vec![9; 8],
                },
            ],
            known_critical: vec![(0x0102, 0x80)],
        },
        Encap::Nvgre,
    ]
}

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x10, 1];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x10, 2];

/// The underlay addresses of VTEP A and B.
pub fn underlay_ips(v6: bool) -> (IpAddr, IpAddr) {
    if v6 {
        (
            "2001:db8::a".parse().unwrap(),
            "2001:db8::b".parse().unwrap(),
        )
    } else {
        ("192.0.2.10".parse().unwrap(), "192.0.2.11".parse().unwrap())
    }
}

/// The VTEP config of one side.
pub fn vtep(encap: &Encap, mac: [u8; 6], ip: IpAddr, mode: Mode) -> VtepConfig {
    let mut v = VtepConfig::new(encap.clone(), mac, ip);
    v.offloads = mode != Mode::Off;
    v
}

fn shim_config(mode: Mode) -> ShimConfig {
    match mode {
        Mode::Off => ShimConfig::none(),
        _ => ShimConfig::all(),
    }
}

/// A memory pair with `faults` both ways, each port under a shim.
pub fn underlay(
    mode: Mode,
    faults: Faults,
    seed: u64,
) -> (Shim<linerate_nic::MemNic>, Shim<linerate_nic::MemNic>) {
    let caps = if mode == Mode::Hw {
        NicCaps::full()
    } else {
        NicCaps::plain()
    };
    let mut cfg = PairConfig::new(caps, caps);
    cfg.a_to_b = faults;
    cfg.b_to_a = faults;
    cfg.seed = seed;
    let (a, b) = memory::pair(cfg);
    (
        Shim::new(a, shim_config(mode)).unwrap(),
        Shim::new(b, shim_config(mode)).unwrap(),
    )
}

/// Two tunnel endpoints of `encap` for VNI 42, next hops resolved with ARP/ND.
pub fn tunnel_pair(
    encap: &Encap,
    v6: bool,
    mode: Mode,
    faults: Faults,
    seed: u64,
) -> (TunnelNic, TunnelNic) {
    let (a, b) = underlay(mode, faults, seed);
    let (ia, ib) = underlay_ips(v6);
    let ta = Tunnel::new(a, vtep(encap, MAC_A, ia, mode), VniConfig::new(42, ib)).unwrap();
    let tb = Tunnel::new(b, vtep(encap, MAC_B, ib, mode), VniConfig::new(42, ia)).unwrap();
    (ta, tb)
}

/// Static next hops (no ARP/ND).
pub fn static_vni(vni: u32, remote: IpAddr, mac: [u8; 6]) -> VniConfig {
    VniConfig {
        next_hop: NextHop::Static(mac),
        ..VniConfig::new(vni, remote)
    }
}

struct Host<N: Nic> {
    engine: Engine,
    nic: N,
    tx: Batch,
    rx: Batch,
    sent: usize,
    got: usize,
    hash_in: Sha256,
}

impl<N: Nic> Host<N> {
    fn pump(&mut self, now: Instant) -> usize {
        let Host {
            engine,
            nic,
            tx,
            rx,
            ..
        } = self;
        engine.poll_transmit_into(
            now,
            &mut PoolSink::new(nic.pool(), tx).with_frags(nic.tx_sg()),
        );
        let mut moved = tx.len();
        while !tx.is_empty() {
            match nic.transmit(0, tx) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => {}
            }
        }
        tx.clear();
        loop {
            let n = nic.receive(0, rx, 256).unwrap_or(0);
            if n == 0 {
                break;
            }
            moved += n;
            engine.handle_frames(now, rx);
        }
        moved
    }
}

/// The pattern byte at stream offset `i` of side `side`.
fn pattern(side: u8, at: usize, out: &mut [u8]) {
    for (k, b) in out.iter_mut().enumerate() {
        let x = (at + k) as u64;
        *b = ((x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8) ^ side;
    }
}

/// `total` bytes each way at once over one TCP connection between engines on
/// `a` and `b` (inner IPv4 or IPv6), compared by SHA-256. Errors say why.
pub fn transfer<N: Nic>(
    a: N,
    b: N,
    offloads: bool,
    inner_v6: bool,
    total: usize,
) -> Result<(N, N), String> {
    let host = |i: u8, nic: N| {
        let mut cfg = Sim::host_config(i);
        cfg.offloads = offloads;
        cfg.mtu = nic.caps().mtu;
        Host {
            engine: Engine::new(cfg, 7 + u64::from(i)),
            nic,
            tx: Batch::with_capacity(256),
            rx: Batch::with_capacity(256),
            sent: 0,
            got: 0,
            hash_in: Sha256::new(),
        }
    };
    let mut h = [host(1, a), host(2, b)];
    let start = std::time::Instant::now();
    let mut skipped = Duration::ZERO;
    let now_of =
        |skipped: Duration| Instant::from_nanos((start.elapsed() + skipped).as_nanos() as u64);
    let listener = h[1].engine.tcp_listen(5001).map_err(|e| format!("{e:?}"))?;
    let dst: IpAddr = if inner_v6 {
        "fd00::2".parse().unwrap()
    } else {
        "10.0.0.2".parse().unwrap()
    };
    let client = h[0]
        .engine
        .tcp_connect(now_of(skipped), SocketAddr::new(dst, 5001))
        .map_err(|e| format!("{e:?}"))?;
    let mut server = None;
    let mut hash_out = [Sha256::new(), Sha256::new()];
    let mut chunk = vec![0u8; 64 * 1024];
    let mut buf = vec![0u8; 64 * 1024];
    while h[0].got < total || h[1].got < total {
        let now = now_of(skipped);
        let mut moved = 0;
        if server.is_none() {
            server = h[1].engine.tcp_accept(listener).ok();
        }
        let socks = [Some(client), server];
        for (i, s) in socks.iter().enumerate() {
            let Some(s) = *s else { continue };
            let host = &mut h[i];
            while host.sent < total {
                let len = chunk.len().min(total - host.sent);
                pattern(i as u8, host.sent, &mut chunk[..len]);
                match host.engine.tcp_send(s, &chunk[..len]) {
                    Ok(n) if n > 0 => {
                        hash_out[i].update(&chunk[..n]);
                        host.sent += n;
                        moved += 1;
                    }
                    _ => break,
                }
            }
            while let Ok(n) = host.engine.tcp_recv(s, &mut buf) {
                if n == 0 {
                    break;
                }
                host.hash_in.update(&buf[..n]);
                host.got += n;
                moved += 1;
            }
        }
        for host in &mut h {
            moved += host.pump(now);
        }
        if moved == 0 {
            let next = h.iter().filter_map(|x| x.engine.poll_timeout()).min();
            let cur = now_of(skipped).as_nanos();
            if let Some(next) = next {
                skipped += Duration::from_nanos(next.as_nanos().saturating_sub(cur));
            }
            let now = now_of(skipped);
            for host in &mut h {
                host.engine.handle_timeout(now);
            }
        }
        if start.elapsed() > Duration::from_secs(120) {
            return Err(format!(
                "stalled: got {} and {} of {total}",
                h[0].got, h[1].got
            ));
        }
    }
    let [o0, o1] = hash_out;
    let (s0, s1) = (o0.finalize(), o1.finalize());
    let [h0, h1] = h;
    if h1.hash_in.finalize() != s0 || h0.hash_in.finalize() != s1 {
        return Err("SHA-256 mismatch".into());
    }
    Ok((h0.nic, h1.nic))
}
