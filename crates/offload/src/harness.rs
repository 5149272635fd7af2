//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the test that
//! replays their corpus (`tests/fuzz_corpus.rs`).
//!
//! `gro`: a stream of TCP segments of two flows (plain or VLAN-tagged, IPv4 or
//! IPv6, with or without options), bent by the input (bytes flipped, with or
//! without the IPv4 header checksum made good again, frames dropped, repeated,
//! swapped, cut short or padded), is given to three GRO contexts: copying without
//! the fast path (the layers' full walk), copying with it (whole frames and in two
//! parts), and frag-list. All three must deliver the same frames (chains
//! gathered), metas and counters, and the frag-list one must hold no payload
//! handle once flushed.
//!
//! Not a public API: hidden from the docs, and allowed to panic (that is how a
//! fuzzer reports a broken invariant).
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use crate::gro::{ChainSink, Gro, GroConfig};
use crate::meta::{Checksum, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::checksum;
use linerate_wire::etherparse::{TcpHeader, TcpOptionElement};
use std::rc::Rc;

/// A fuzz target's entry point.
pub type Target = fn(&[u8]);

/// Every target here, by the name of its corpus directory.
pub const TARGETS: &[(&str, Target)] = &[("gro", gro)];

type Out = Vec<(Vec<u8>, OffloadMeta)>;

/// A payload handle: a shared buffer and where in it the payload is.
#[derive(Debug, Clone)]
struct Pay(Rc<Vec<u8>>, usize);

impl AsRef<[u8]> for Pay {
    fn as_ref(&self) -> &[u8] {
        self.0.get(self.1..).unwrap_or_default()
    }
}

struct Gather(Out);

impl ChainSink<Pay> for Gather {
    fn frame(&mut self, head: &[u8], payload: &Pay, meta: &OffloadMeta) {
        let mut f = head.to_vec();
        f.extend_from_slice(payload.as_ref());
        self.0.push((f, *meta));
    }
    fn run(&mut self, head: &[u8], chain: &mut Vec<Pay>, meta: &OffloadMeta) {
        let mut f = head.to_vec();
        for p in chain.drain(..) {
            f.extend_from_slice(p.as_ref());
        }
        self.0.push((f, *meta));
    }
}

/// Segment `i` (of `mss` bytes) of flow `flow` in the shape `shape` selects.
fn segment(shape: u8, flow: u16, i: u32, mss: usize) -> Vec<u8> {
    let mut tcp = TcpHeader::new(40_000 + flow, 443 - flow, 1_000 + i * mss as u32, 512);
    tcp.ack = true;
    tcp.acknowledgment_number = 77;
    if shape & 4 != 0 {
        let _ = tcp.set_options(&[
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(5, 6),
        ]);
    }
    let mut ip = if shape & 1 == 0 {
        Ip::v4([10, 0, 0, 1], [10, 0, 0, 2])
    } else {
        Ip::v6([0xfd; 16], [0xfe; 16])
    };
    if let Ip::V4(h) = &mut ip {
        h.identification = (i as u16).wrapping_add(flow * 1000);
        h.dont_fragment = shape & 8 != 0;
    }
    let b = FrameBuilder::new(ip, L4::Tcp(tcp));
    let b = if shape & 2 != 0 { b.vlan(7) } else { b };
    let payload: Vec<u8> = (0..mss).map(|k| (k as u32 ^ i) as u8).collect();
    b.build(&payload)
}

/// Makes the IPv4 header checksum of `f` good again (if it has an IPv4 header
/// where the template frames do).
fn fix_ipv4(f: &mut [u8], l3: usize) {
    if f.len() >= l3 + 20 && f.get(l3).is_some_and(|b| b >> 4 == 4) {
        f[l3 + 10] = 0;
        f[l3 + 11] = 0;
        let c = checksum::checksum(&f[l3..l3 + 20]);
        f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    }
}

/// See the module docs.
pub fn gro(data: &[u8]) {
    let Some((&[shape, count, mss, flags], ops)) = data.split_first_chunk::<4>() else {
        return;
    };
    let mss = 64 + usize::from(mss) * 4;
    let count = 3 + u32::from(count % 40);
    let l3 = if shape & 2 != 0 { 18 } else { 14 };
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for i in 0..count {
        frames.push(segment(shape, 0, i, mss));
        if flags & 1 != 0 {
            frames.push(segment(shape, 1, i, mss));
        }
    }
    for op in ops.chunks_exact(4) {
        let Some(&[kind, at, off, val]) = op.first_chunk::<4>() else {
            continue;
        };
        let n = frames.len();
        let i = usize::from(at) % n;
        match kind % 8 {
            0..=2 => {
                let j = usize::from(off) % frames[i].len().min(100);
                frames[i][j] ^= val | 1;
            }
            3 => {
                let j = usize::from(off) % frames[i].len().min(100);
                frames[i][j] ^= val | 1;
                fix_ipv4(&mut frames[i], l3);
            }
            4 => {
                frames.remove(i);
                if frames.is_empty() {
                    return;
                }
            }
            5 => {
                let f = frames[i].clone();
                frames.insert(i, f);
            }
            6 => frames.swap(i, usize::from(off) % n),
            _ => {
                if val & 1 == 0 {
                    let keep = frames[i].len().saturating_sub(usize::from(off) % 8 + 1);
                    frames[i].truncate(keep.max(1));
                } else {
                    frames[i].extend_from_slice(&[0; 6]);
                }
            }
        }
    }
    let meta = if flags & 2 != 0 {
        OffloadMeta {
            csum: Checksum::Verified { levels: 1 },
            ..OffloadMeta::plain()
        }
    } else {
        OffloadMeta::plain()
    };
    agree(&frames, meta);
}

/// Gives `frames`, each with `meta`, to the three GRO contexts of the `gro`
/// target (copying without the fast path, copying with it, whole and in two
/// parts, and frag-list) and panics unless they deliver the same frames, metas
/// and counters, and the frag-list one holds no payload handle once flushed.
pub fn agree(frames: &[Vec<u8>], meta: OffloadMeta) {
    let cfg = GroConfig::default();
    let mut slow = Gro::new(cfg).without_fast_path();
    let mut fast = Gro::new(cfg);
    let mut chain = Gro::<Pay>::chaining(cfg);
    let (mut a, mut b, mut c): (Out, Out, Gather) = (Vec::new(), Vec::new(), Gather(Vec::new()));
    let mut bufs = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let now = i as u64;
        slow.receive(now, f, meta, &mut |x: &[u8], m: &OffloadMeta| {
            a.push((x.to_vec(), *m));
        });
        let parsed = cfg.layout.parse(f);
        let at = parsed
            .as_ref()
            .map_or(f.len(), |l| usize::from(l.payload).min(f.len()));
        let mut sink = |x: &[u8], m: &OffloadMeta| b.push((x.to_vec(), *m));
        let split = i % 2 == 1
            && parsed.as_ref().is_ok_and(|l| {
                let (head, pay) = f.split_at(at);
                fast.receive_split_with(now, head, pay, || Some(*l), &meta, &mut sink)
            });
        if !split {
            fast.receive(now, f, meta, &mut sink);
        }
        let buf = Rc::new(f.clone());
        let pay = Pay(Rc::clone(&buf), at);
        chain.receive_chained(now, &f[..at], &pay, || cfg.layout.parse(f), &meta, &mut c);
        bufs.push(buf);
    }
    slow.flush_all(&mut |x: &[u8], m: &OffloadMeta| a.push((x.to_vec(), *m)));
    fast.flush_all(&mut |x: &[u8], m: &OffloadMeta| b.push((x.to_vec(), *m)));
    chain.flush_all_chained(&mut c);
    let counters = slow.counters().to_string();
    assert_eq!(counters, fast.counters().to_string());
    assert_eq!(counters, chain.counters().to_string());
    assert!(a == b, "the fast path delivered other frames");
    assert!(a == c.0, "frag-list GRO delivered other frames");
    assert!(bufs.iter().all(|buf| Rc::strong_count(buf) == 1));
}
