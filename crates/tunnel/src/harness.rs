//! Fuzz harness for the tunnel's receive path (`fuzz/fuzz_targets/tunnel.rs`,
//! corpus `fuzz/corpus/tunnel`, replayed by the root `tests/fuzz_corpus.rs`).
//!
//! The first byte picks the endpoint: bits 0-1 the encapsulation (VXLAN,
//! GENEVE with a known critical option, NVGRE), bit 2 an IPv6 underlay, bit 3
//! the IPv6 zero-checksum opt-in, bit 4 a second VNI, bit 5 whether the frame
//! arrives marked `Checksum::Verified` (as after the underlay's shim). The
//! rest is one underlay frame, received on every VNI. Invariants: no panic;
//! every delivered frame is an Ethernet frame at least 14 bytes long and no
//! longer than the underlay frame minus the smallest encapsulation; at most
//! one VNI delivers it; every frame is counted somewhere.

use crate::{Encap, GeneveOpt, NextHop, Tunnel, TunnelCounter, VniConfig, VtepConfig};
use linerate_nic::{
    Batch, Counters, Frame, Nic, NicCaps, NicError, Notify, Pool, PoolConfig, Readiness, Recorder,
};
use linerate_offload::{Checksum, OffloadMeta};
use std::sync::Arc;

/// A fuzz target: takes arbitrary bytes and panics on a broken invariant.
pub type Target = fn(&[u8]);

/// Every target of this crate, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[("tunnel", receive)];

/// The endpoint's underlay MAC and addresses (the harness's frames are sent
/// to these).
pub const LOCAL_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 2];
/// The remote VTEP's MAC.
pub const REMOTE_MAC: [u8; 6] = [2, 0, 0, 0, 0x10, 1];
/// Local and remote IPv4 underlay addresses.
pub const V4: ([u8; 4], [u8; 4]) = ([192, 0, 2, 11], [192, 0, 2, 10]);
/// Local and remote IPv6 underlay addresses.
pub const V6: ([u8; 16], [u8; 16]) = (
    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb],
    [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xa],
);
/// The VNIs of the harness's endpoint.
pub const VNIS: [u32; 2] = [42, 0xabcdef];

/// An underlay that hands over one frame, then nothing; takes whatever is sent.
struct OneShot {
    frame: Option<Frame>,
    caps: NicCaps,
    counters: Counters,
    pool: Pool,
    notify: Arc<Notify>,
}

impl Nic for OneShot {
    fn caps(&self) -> &NicCaps {
        &self.caps
    }
    fn receive(&mut self, _: usize, batch: &mut Batch, max: usize) -> Result<usize, NicError> {
        if max == 0 {
            return Ok(0);
        }
        Ok(self.frame.take().map(|f| batch.push(f)).map_or(0, |()| 1))
    }
    fn transmit(&mut self, _: usize, batch: &mut Batch) -> Result<usize, NicError> {
        let n = batch.len();
        batch.clear();
        Ok(n)
    }
    fn readiness(&self, _: usize) -> Result<Readiness, NicError> {
        Ok(Readiness::Notify(Arc::clone(&self.notify)))
    }
    fn counters(&self) -> &Counters {
        &self.counters
    }
    fn pool(&self) -> &Pool {
        &self.pool
    }
    fn set_recorder(&mut self, _: Option<Arc<dyn Recorder>>) {}
}

/// The encapsulation selected by `sel`.
pub fn encap(sel: u8) -> Encap {
    match sel & 3 {
        1 | 3 => Encap::Geneve {
            options: vec![GeneveOpt {
                class: 0x0102,
                kind: 0x80,
                data: vec![1, 2, 3, 4],
            }],
            known_critical: vec![(0x0102, 0x80)],
        },
        2 => Encap::Nvgre,
        _ => Encap::Vxlan,
    }
}

/// The target: see the module docs.
#[allow(clippy::expect_used)]
pub fn receive(data: &[u8]) {
    let Some((&sel, frame)) = data.split_first() else {
        return;
    };
    let v6 = sel & 4 != 0;
    let (local, remote) = if v6 {
        (V6.0.into(), V6.1.into())
    } else {
        (V4.0.into(), V4.1.into())
    };
    let pool = Pool::new(PoolConfig::super_frames());
    let meta = OffloadMeta {
        csum: if sel & 32 != 0 {
            Checksum::Verified { levels: 2 }
        } else {
            Checksum::None
        },
        ..OffloadMeta::plain()
    };
    let under = OneShot {
        frame: Some(Frame::new(pool.alloc_from(frame), meta)),
        caps: NicCaps::full(),
        counters: Counters::new(1),
        pool,
        notify: Arc::new(Notify::new()),
    };
    let mut cfg = VtepConfig::new(encap(sel), LOCAL_MAC, local);
    cfg.ipv6_zero_csum = sel & 8 != 0;
    let n = if sel & 16 != 0 { 2 } else { 1 };
    let vnis = VNIS
        .iter()
        .take(n)
        .map(|&v| VniConfig {
            next_hop: NextHop::Static(REMOTE_MAC),
            ..VniConfig::new(v, remote)
        })
        .collect();
    let mut nics = Tunnel::many(under, cfg, vnis).expect("the harness's config is valid");
    let mut delivered = 0;
    let mut batch = Batch::new();
    for nic in &mut nics {
        batch.clear();
        let got = nic.receive(0, &mut batch, 64).expect("one queue");
        assert_eq!(got, batch.len());
        for f in batch.iter() {
            assert!(
                f.len() >= 14 && f.len() + 42 <= frame.len(),
                "delivered {} of {}",
                f.len(),
                frame.len()
            );
        }
        delivered += got;
    }
    assert!(delivered <= 1);
    if let Some(nic) = nics.first() {
        let counted: u64 = nic.vtep_counters().iter().map(|(_, v)| v).sum::<u64>()
            + nics
                .iter()
                .map(|n| n.tunnel_counters().iter().map(|(_, v)| v).sum::<u64>())
                .sum::<u64>();
        let decap: u64 = nics
            .iter()
            .map(|n| n.tunnel_counters().get(TunnelCounter::RxDecap))
            .sum();
        assert_eq!(decap, delivered as u64);
        assert!(
            frame.len() < 14 || counted >= 1 || delivered == 1,
            "an uncounted frame"
        );
    }
}
