//! Fuzz harness of the VTEP's bridging: arbitrary frames into a [`BridgeDomain`]
//! from both sides, local ports and remote VTEPs, with suppression on and off.
//!
//! The input is a sequence of records `[what: u8][len: u8][len bytes]`: `what`
//! picks the side (local port 0 or 1, or the overlay from one of four remote
//! VTEPs) or, for `0xff`, advances time by `len` seconds. Whatever the bytes, the
//! domain must not panic, must not deliver more copies than head-end replication
//! allows, and must keep its tables within their bounds. The same function runs
//! under cargo-fuzz (`fuzz/fuzz_targets/vtep.rs`) and replays the corpus in
//! `tests/fuzz_corpus.rs`.

use super::domain::{BridgeDomain, DomainConfig, Overlay};
use super::fdb::{Fdb, FdbConfig};
use super::suppress::SuppressConfig;
use linerate_nic::{Batch, Frame, MemNic, Nic, NicCaps, NicError, PacketBuf};
use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

/// A fuzz target: a function of the fuzzer's bytes.
pub type Target = fn(&[u8]);

/// The fuzz targets of this module: (name, function).
pub const TARGETS: &[(&str, Target)] = &[("vtep", vtep)];

#[derive(Default)]
struct Loop {
    inbound: VecDeque<(IpAddr, Frame)>,
    sent: usize,
}

impl Overlay for Loop {
    fn receive(&mut self, batch: &mut Vec<(IpAddr, Frame)>, max: usize) -> Result<usize, NicError> {
        let n = max.min(self.inbound.len());
        batch.extend(self.inbound.drain(..n));
        Ok(n)
    }
    fn transmit(&mut self, _remote: IpAddr, batch: &mut Batch) -> Result<usize, NicError> {
        let n = batch.len();
        self.sent += n;
        batch.clear();
        Ok(n)
    }
}

const REMOTES: u8 = 4;
const FDB_BOUND: usize = 32;

/// Runs the input through two domains (suppression on and off).
pub fn vtep(data: &[u8]) {
    for suppress in [false, true] {
        run(data, suppress);
    }
}

fn run(data: &[u8], suppress: bool) {
    let mut cfg = DomainConfig::new(7);
    cfg.tx_backlog = 64;
    cfg.suppress = suppress.then(|| SuppressConfig {
        max_per_vni: 16,
        max_total: 16,
        ..SuppressConfig::default()
    });
    let fdb = Fdb::new(FdbConfig {
        max_per_vni: FDB_BOUND,
        max_total: FDB_BOUND,
        ..FdbConfig::default()
    });
    let mut d = BridgeDomain::new(cfg, Loop::default(), fdb);
    let mut hosts = Vec::new();
    for _ in 0..2 {
        let (host, port) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
        d.add_port(Box::new(port));
        hosts.push(host);
    }
    for r in 1..=REMOTES {
        let _ = d.fdb_mut().add_flood(7, IpAddr::from([10, 0, 0, r]));
    }
    let (mut now, mut fed, mut delivered) = (Duration::ZERO, 0usize, 0usize);
    let mut batch = Batch::new();
    let mut rest = data;
    while let [what, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, next) = tail.split_at(n);
        rest = next;
        match what % 4 {
            _ if *what == 0xff => now += Duration::from_secs(u64::from(*len)),
            side @ (0 | 1) => {
                let Some(host) = hosts.get_mut(usize::from(side)) else {
                    continue;
                };
                batch.push(Frame::plain(host.pool().alloc_from(bytes)));
                // A frame the host's NIC refuses (oversize) is not fed.
                if host.transmit(0, &mut batch).is_ok() {
                    fed += 1;
                }
                batch.clear();
            }
            _ => {
                let remote = IpAddr::from([10, 0, 0, 1 + what / 4 % REMOTES]);
                d.overlay_mut()
                    .inbound
                    .push_back((remote, Frame::plain(PacketBuf::from_slice(bytes))));
                fed += 1;
            }
        }
        d.poll(now);
        for host in &mut hosts {
            delivered += host.receive(0, &mut batch, 1024).unwrap_or(0);
            batch.clear();
        }
        assert!(d.fdb().len() <= FDB_BOUND, "FDB past its bound");
    }
    // Every frame goes to at most every other port and every remote VTEP (or
    // back to its port as an ARP/ND answer).
    let copies = fed * (2 + usize::from(REMOTES));
    assert!(
        delivered + d.overlay().sent <= copies,
        "more copies than replication allows"
    );
}
