//! The `reasm` fuzz target (`fuzz/fuzz_targets/reasm.rs`): IP reassembly fed
//! fuzzed fragments, twice over.
//!
//! The input is read as steps: time advances, fragments (IPv4 or IPv6, a few
//! sources and identifications, any offset, length and M flag, in IPv6
//! optionally behind or ahead of a Destination Options header) and raw frames.
//! Each fragment goes both to a [`Reassembler`] of its own, under a small
//! budget, whose fragments carry bytes that depend only on (datagram, offset),
//! and, as a frame, to an engine with fragments on and a UDP socket bound.
//! After every step:
//!
//! * the reassembler's memory is within its high threshold and every source
//!   within its share; the engine's reassembly memory within its own;
//! * every datagram the reassembler completes holds, at every offset, the
//!   byte every fragment carried there (overlaps never blend two);
//! * after a timeout run, nothing is due at or before that time; every frame
//!   the engine sends fits its MTU;
//! * nothing panics.
#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing
)]

use super::Input;
use crate::config::FragConfig;
use crate::counters::Counters;
use crate::engine::Engine;
use crate::frag::{FragKey, Fragment, Insert, Reassembler};
use crate::sim::Sim;
use crate::time::Instant;
use linerate_offload::OffloadMeta;
use std::time::Duration;

const ME_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];

/// The byte at `off` of the datagram keyed `k`.
fn byte(k: &FragKey, off: usize) -> u8 {
    (off as u32)
        .wrapping_mul(0x9e37_79b1)
        .wrapping_add(k.id.wrapping_mul(31))
        .wrapping_add(u32::from(k.src[15]) << 8)
        .rotate_left(7) as u8
}

fn budget() -> FragConfig {
    FragConfig {
        enabled: true,
        high_thresh: 96 * 1024,
        low_thresh: 64 * 1024,
        per_source: 40 * 1024,
        max_fragments: 24,
        timeout_v4: Duration::from_secs(30),
        timeout_v6: Duration::from_secs(60),
    }
}

/// An IPv4 fragment frame from 10.0.0.`src` to 10.0.0.1.
fn frame4(src: u8, proto: u8, id: u16, units: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(34 + data.len());
    f.extend_from_slice(&ME_MAC);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = (20 + data.len()).min(65_535) as u16;
    let flg = (units & 0x1fff) | if more { 0x2000 } else { 0 };
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&id.to_be_bytes());
    h[6..8].copy_from_slice(&flg.to_be_bytes());
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&[10, 0, 0, src]);
    h[16..20].copy_from_slice(&[10, 0, 0, 1]);
    let mut p = linerate_wire::ipv4::Packet::new_unchecked(&mut h[..]);
    p.fill_checksum();
    f.extend_from_slice(&h);
    f.extend_from_slice(data);
    f
}

/// An IPv6 fragment frame from fd00::`src` to fd00::1; `opts` puts an empty
/// Destination Options header before (1) or after (2) the Fragment header.
fn frame6(src: u8, next: u8, id: u32, units: u16, more: bool, opts: u8, data: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(70 + data.len());
    f.extend_from_slice(&ME_MAC);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&0x86ddu16.to_be_bytes());
    let extra = if opts.is_multiple_of(3) { 0 } else { 8 };
    let plen = (8 + extra + data.len()).min(65_535) as u16;
    let mut h = [0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&plen.to_be_bytes());
    h[6] = if opts % 3 == 1 { 60 } else { 44 };
    h[7] = 64;
    h[8] = 0xfd;
    h[23] = src;
    h[24] = 0xfd;
    h[39] = 1;
    f.extend_from_slice(&h);
    let o = ((units & 0x1fff) << 3) | u16::from(more);
    let frag_next = if opts % 3 == 2 { 60 } else { next };
    if opts % 3 == 1 {
        f.extend_from_slice(&[44, 0, 1, 4, 0, 0, 0, 0]);
    }
    f.extend_from_slice(&[frag_next, 0]);
    f.extend_from_slice(&o.to_be_bytes());
    f.extend_from_slice(&id.to_be_bytes());
    if opts % 3 == 2 {
        f.extend_from_slice(&[next, 0, 1, 4, 0, 0, 0, 0]);
    }
    f.extend_from_slice(data);
    f
}

/// The harness; see the module docs.
pub fn reasm(data: &[u8]) {
    let mut inp = Input(data);
    let cfg = budget();
    let mut r = Reassembler::new(&cfg, inp.u64());
    let mut counters = Counters::default();
    let mut ecfg = Sim::host_config(1);
    ecfg.fragments = budget();
    ecfg.announcements = 0;
    ecfg.offloads = false;
    let mut e = Engine::new(ecfg, 7);
    let _ = e.udp_bind("0.0.0.0:4000".parse().unwrap());
    let _ = e.udp_bind("[::]:4000".parse().unwrap());
    let mut now = Instant::ZERO;
    let mut quote = Vec::new();
    let mut pattern = Vec::new();
    let mut steps = 0;
    while !inp.is_empty() && steps < 2000 {
        steps += 1;
        match inp.u8() % 8 {
            0 => {
                now += Duration::from_millis(u64::from(inp.u16()) * 8);
                while let Some(x) = r.expire(now, &mut quote, 1232, &mut counters) {
                    assert!(quote.len() <= 1232);
                    assert!(!x.answer || !quote.is_empty());
                }
                assert!(r.next_deadline().is_none_or(|t| t > now));
                e.handle_timeout(now);
                assert!(e.poll_timeout().is_none_or(|t| t > now));
            }
            7 => {
                let n = usize::from(inp.u16() % 1600);
                let raw = inp.bytes(n).to_vec();
                e.handle_frame(now, &raw, &OffloadMeta::plain());
            }
            _ => {
                let src = inp.u8() % 4 + 2;
                let id = u32::from(inp.u8() % 8);
                let flags = inp.u8();
                let (v6, more) = (flags & 1 != 0, flags & 2 != 0);
                let units = inp.u16() % 8192;
                let len = match flags >> 6 {
                    0 => usize::from(inp.u8()),
                    1 => usize::from(inp.u8()) * 8,
                    _ => usize::from(inp.u16() % 4096),
                };
                let key = if v6 {
                    let mut s = [0u8; 16];
                    s[0] = 0xfd;
                    s[15] = src;
                    let mut d = [0u8; 16];
                    d[0] = 0xfd;
                    d[15] = 1;
                    FragKey::v6(s, d, id)
                } else {
                    FragKey::v4([10, 0, 0, src], [10, 0, 0, 1], 17, id as u16)
                };
                let off = usize::from(units) * 8;
                pattern.clear();
                pattern.extend((off..off + len).map(|i| byte(&key, i)));
                let head = [0x45u8; 20];
                let f = Fragment {
                    key,
                    offset: off,
                    more,
                    data: &pattern,
                    head: &head,
                    limit: 65_535 - 20,
                    link: PEER_MAC,
                    answerable: flags & 4 != 0,
                };
                if let Insert::Complete { head_len } = r.insert(now, &f, &mut counters) {
                    assert_eq!(head_len, 20);
                    for (i, &b) in r.output()[20..].iter().enumerate() {
                        assert_eq!(b, byte(&key, i), "byte {i} of a reassembled datagram");
                    }
                }
                let proto = [17, 1, 6, 58][usize::from(flags >> 3 & 3)];
                let frame = if v6 {
                    frame6(src, proto, id, units, more, flags >> 5, &pattern)
                } else {
                    frame4(src, proto, id as u16, units, more, &pattern)
                };
                e.handle_frame(now, &frame, &OffloadMeta::plain());
            }
        }
        assert!(
            r.memory() <= cfg.high_thresh,
            "{} over the bound",
            r.memory()
        );
        for s in 2..6u8 {
            let v4 = FragKey::v4([10, 0, 0, s], [0; 4], 0, 0).src;
            let mut v6 = [0u8; 16];
            v6[0] = 0xfd;
            v6[15] = s;
            assert!(r.source_memory(&v4) <= cfg.per_source);
            assert!(r.source_memory(&v6) <= cfg.per_source);
        }
        assert!(e.memory_usage().reassembly <= cfg.high_thresh);
        e.poll_transmit(now, &mut |f, _| assert!(f.len() <= 1514));
    }
}
