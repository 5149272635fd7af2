//! Software dispatch: frames of a flow stay in order on one queue (with consumer
//! threads draining while the producer pushes), overflow is counted per queue,
//! the backend's hash is used when present, and the table can be swapped while
//! frames flow; frames of any kind land where `Steering` says, with either item
//! type, whether their hashes come in chunks, one by one or mixed with backend
//! hashes.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::Rng;
use linerate_offload::{OffloadMeta, RssHash, RssHashType};
use linerate_rss::{
    ConfigError, Dispatcher, HashConfig, IndirectionTable, RssKey, RxBuf, RxFrame, RxItem, Steering,
};
use linerate_wire::build::{FrameBuilder, Ip, L4};

fn steering(queues: u16) -> Arc<Steering> {
    Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(queues).unwrap(),
        HashConfig::default(),
    ))
}

/// Frame `seq` of flow `flow`: the flow number in the source port, the sequence in
/// the payload.
fn frame(flow: u16, seq: u32) -> Vec<u8> {
    FrameBuilder::new(
        Ip::v4([10, 0, (flow >> 8) as u8, flow as u8], [10, 1, 0, 1]),
        L4::udp(1000 + flow, 53),
    )
    .build(&seq.to_be_bytes())
}

fn parse(f: &[u8]) -> (u16, u32) {
    let flow = u16::from_be_bytes([f[34], f[35]]) - 1000;
    let seq = u32::from_be_bytes(f[f.len() - 4..].try_into().unwrap());
    (flow, seq)
}

#[test]
fn flows_stay_in_order_on_one_queue() {
    const FLOWS: u16 = 64;
    const PER_FLOW: u32 = 200;
    let s = steering(4);
    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s.clone(), 64).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = rx
        .into_iter()
        .map(|q| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut last: HashMap<u16, u32> = HashMap::new();
                let mut got = 0u64;
                let mut batch = Vec::new();
                loop {
                    let finished = done.load(Ordering::Acquire);
                    batch.clear();
                    if q.pop_batch(&mut batch, 32) == 0 {
                        if finished {
                            break;
                        }
                        std::thread::yield_now();
                        continue;
                    }
                    for f in &batch {
                        let (flow, seq) = parse(&f.data);
                        if let Some(prev) = last.insert(flow, seq) {
                            assert!(seq > prev, "flow {flow}: {seq} after {prev}");
                        }
                        assert!(f.meta.rss.is_some());
                        got += 1;
                    }
                }
                (q.queue(), last, got, q.stats())
            })
        })
        .collect();
    let mut r = Rng(1);
    let mut next = vec![0u32; usize::from(FLOWS)];
    let mut batch = Vec::new();
    let mut dropped = 0;
    let mut delivered = 0;
    while next.iter().any(|&n| n < PER_FLOW) {
        batch.clear();
        for _ in 0..32 {
            let f = r.below(u64::from(FLOWS)) as usize;
            if next[f] < PER_FLOW {
                batch.push(RxFrame::new(frame(f as u16, next[f])));
                next[f] += 1;
            }
        }
        let res = d.dispatch(batch.drain(..));
        dropped += res.dropped;
        delivered += res.delivered;
    }
    done.store(true, Ordering::Release);
    let mut flows_seen = HashMap::new();
    let mut total = 0;
    for c in consumers {
        let (queue, last, got, stats) = c.join().unwrap();
        total += got;
        assert_eq!(stats.delivered, got);
        for flow in last.keys() {
            // Each flow on exactly one queue, the one steering names.
            assert!(flows_seen.insert(*flow, queue).is_none());
        }
    }
    assert_eq!(total as usize, delivered);
    assert_eq!(delivered + dropped, usize::from(FLOWS) * PER_FLOW as usize);
    let stats = d.stats();
    assert_eq!(
        stats.queues.iter().map(|q| q.dropped).sum::<u64>() as usize,
        dropped
    );
    assert_eq!(
        stats.software_hashed as usize,
        usize::from(FLOWS) * PER_FLOW as usize
    );
    for (flow, queue) in flows_seen {
        assert_eq!(s.rx_queue_of_frame(&frame(flow, 0), None), queue);
    }
}

#[test]
fn overflow_is_counted_per_queue() {
    let s = steering(2);
    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s.clone(), 8).unwrap();
    // Find a flow for queue 0 and one for queue 1.
    let f0 = (0..)
        .find(|&f| s.rx_queue_of_frame(&frame(f, 0), None) == 0)
        .unwrap();
    let f1 = (0..)
        .find(|&f| s.rx_queue_of_frame(&frame(f, 0), None) == 1)
        .unwrap();
    let frames = (0..20)
        .map(|i| RxFrame::new(frame(f0, i)))
        .chain((0..5).map(|i| RxFrame::new(frame(f1, i))));
    let mut returned = Vec::new();
    let res = d.dispatch_with(frames, |f| returned.push(f));
    assert_eq!(res.delivered, 8 + 5);
    assert_eq!(res.dropped, 12);
    // The dropped frames were handed back, the last 12 of flow f0.
    let seqs: Vec<u32> = returned.iter().map(|f| parse(&f.data).1).collect();
    assert_eq!(seqs, (8..20).collect::<Vec<_>>());
    let st = d.stats();
    assert_eq!(st.queues[0].delivered, 8);
    assert_eq!(st.queues[0].dropped, 12);
    assert_eq!(st.queues[1].delivered, 5);
    assert_eq!(st.queues[1].dropped, 0);
    assert_eq!(rx[0].stats(), st.queues[0]);
    // The first eight are queued, in order.
    let got: Vec<u32> = std::iter::from_fn(|| rx[0].pop())
        .map(|f| parse(&f.data).1)
        .collect();
    assert_eq!(got, (0..8).collect::<Vec<_>>());
    assert_eq!(rx[0].capacity(), 8);
    assert!(rx[0].is_empty());
}

#[test]
fn backend_hash_is_used_and_unhashable_goes_to_default() {
    let s = steering(4);
    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s, 16).unwrap();
    let mut meta = OffloadMeta::plain();
    // A backend hash whose low bits pick entry 3 (queue 3).
    meta.rss = Some(RssHash {
        value: 0xdead_be03,
        kind: RssHashType::TcpIpv4,
    });
    d.dispatch([
        RxFrame::with_meta(frame(1, 0), meta),
        RxFrame::new(vec![0xffu8; 60]),
    ]);
    assert_eq!(rx[3].pop().unwrap().meta.rss.unwrap().value, 0xdead_be03);
    let junk = rx[0].pop().unwrap();
    assert_eq!(junk.meta.rss, None);
    let st = d.stats();
    assert_eq!((st.backend_hashed, st.unhashed), (1, 1));
    assert_eq!(
        Dispatcher::<RxFrame<Vec<u8>>>::new(steering(2), 0).err(),
        Some(ConfigError::QueueCapacity)
    );
}

#[test]
fn table_swap_while_dispatching() {
    let s = steering(4);
    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s.clone(), 1 << 14).unwrap();
    let frames: Vec<Vec<u8>> = (0..256).map(|f| frame(f, 0)).collect();
    let control = {
        let s = s.clone();
        std::thread::spawn(move || {
            for i in 0..200 {
                let q = if i % 2 == 0 { 1 } else { 4 };
                s.table().store(IndirectionTable::new(q).unwrap()).unwrap();
            }
            s.table().store(IndirectionTable::new(1).unwrap()).unwrap();
        })
    };
    let mut sent = 0;
    for _ in 0..20 {
        let res = d.dispatch(frames.iter().cloned().map(RxFrame::new));
        sent += res.delivered;
    }
    control.join().unwrap();
    // After the last swap everything goes to queue 0.
    let before = rx[0].len();
    d.dispatch(frames.iter().cloned().map(RxFrame::new));
    assert_eq!(rx[0].len(), before + frames.len());
    let total: usize = rx.iter().map(|q| q.len()).sum();
    assert_eq!(total, sent + frames.len());
}

/// Every frame of the testkit catalogue plus junk, in batches of every size and
/// with every other frame carrying a (correct) backend hash: each lands on the
/// queue `Steering` names, with the hash `Steering` computes, in ring order.
#[test]
fn dispatch_agrees_with_steering_for_every_frame() {
    let s = steering(8);
    let mut frames: Vec<Vec<u8>> = linerate_testkit::catalog::all()
        .into_iter()
        .map(|x| x.frame)
        .collect();
    frames.push(vec![0xff; 60]);
    frames.push(Vec::new());
    // Enough frames for several chunks.
    let frames: Vec<Vec<u8>> = (0..4).flat_map(|_| frames.iter().cloned()).collect();
    for batch in [1usize, 7, 31, 32, 33, 100, frames.len()] {
        for backend_every in [0usize, 1, 2, 5] {
            let (mut d, rx) = Dispatcher::<RxBuf<&[u8]>>::new(s.clone(), 1024).unwrap();
            let items: Vec<RxBuf<&[u8]>> = frames
                .iter()
                .enumerate()
                .map(|(i, f)| match s.hash_frame(f, None) {
                    Some(h) if backend_every != 0 && i % backend_every == 0 => {
                        RxBuf::with_rss(f.as_slice(), h)
                    }
                    _ => RxBuf::new(f.as_slice()),
                })
                .collect();
            for chunk in items.chunks(batch) {
                let res = d.dispatch(chunk.iter().copied());
                assert_eq!(res.delivered, chunk.len());
            }
            // Per queue, the frames steering names for it, in ring order.
            for (q, rx) in rx.iter().enumerate() {
                let want: Vec<&[u8]> = frames
                    .iter()
                    .filter(|f| usize::from(s.rx_queue_of_frame(f, None)) == q)
                    .map(Vec::as_slice)
                    .collect();
                let got: Vec<RxBuf<&[u8]>> = std::iter::from_fn(|| rx.pop()).collect();
                assert_eq!(got.len(), want.len(), "queue {q}");
                for (g, w) in got.iter().zip(want) {
                    assert_eq!(g.data, w);
                    assert_eq!(g.rss, s.hash_frame(w, None));
                }
            }
            let st = d.stats();
            let hashable = frames.iter().filter(|f| s.hash_frame(f, None).is_some());
            assert_eq!(
                (st.backend_hashed + st.software_hashed) as usize,
                hashable.count()
            );
        }
    }
}

/// A flow whose frames alternate between carrying the backend's hash and not
/// stays in order: frames waiting for a software hash are not overtaken.
#[test]
fn backend_and_software_hashed_frames_of_a_flow_stay_in_order() {
    let s = steering(4);
    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s.clone(), 1024).unwrap();
    let mut r = Rng(9);
    let frames: Vec<RxFrame<Vec<u8>>> = (0..500)
        .map(|i| {
            let f = frame(3, i);
            let mut meta = OffloadMeta::plain();
            if r.below(3) == 0 {
                meta.rss = s.hash_frame(&f, None);
            }
            RxFrame::with_meta(f, meta)
        })
        .collect();
    d.dispatch(frames);
    let q = usize::from(s.rx_queue_of_frame(&frame(3, 0), None));
    let seqs: Vec<u32> = std::iter::from_fn(|| rx[q].pop())
        .map(|f| parse(&f.data).1)
        .collect();
    assert_eq!(seqs, (0..500).collect::<Vec<_>>());
}

/// An item that carries a layout ([`RxItem::layout`], [`RxItem::set_layout`]).
#[derive(Debug, Clone)]
struct WithLayout {
    data: Vec<u8>,
    rss: Option<RssHash>,
    layout: Option<linerate_wire::layout::Layout>,
}

impl RxItem for WithLayout {
    fn frame(&self) -> &[u8] {
        &self.data
    }
    fn rss(&self) -> Option<RssHash> {
        self.rss
    }
    fn set_rss(&mut self, hash: RssHash) {
        self.rss = Some(hash);
    }
    fn layout(&self) -> Option<&linerate_wire::layout::Layout> {
        self.layout.as_ref()
    }
    fn set_layout(&mut self, layout: linerate_wire::layout::Layout) {
        self.layout = Some(layout);
    }
}

/// An item that can keep a layout is given one when dispatch had to parse the
/// frame (an IPv6 extension header), not when it read the input straight from
/// the bytes; a layout an item brings is used. `RxFrame` keeps none (its meta
/// has no place for one) and hashes the same.
#[test]
fn layout_is_kept_only_when_parsed() {
    use linerate_wire::etherparse::{IpFragOffset, IpNumber, Ipv6FragmentHeader};
    let s = steering(2);
    let Ip::V6(h, mut ext) = Ip::v6([1; 16], [2; 16]) else {
        unreachable!()
    };
    ext.fragment = Some(Ipv6FragmentHeader::new(
        IpNumber::UDP,
        IpFragOffset::try_new(0).unwrap(),
        false,
        1,
    ));
    let with_ext = FrameBuilder::new(Ip::V6(h, ext), L4::udp(1, 2)).build(b"x");
    let item = |data: Vec<u8>| WithLayout {
        data,
        rss: None,
        layout: None,
    };
    let (mut d, rx) = Dispatcher::<WithLayout>::new(s.clone(), 16).unwrap();
    d.dispatch([item(with_ext.clone()), item(frame(1, 0))]);
    let got: Vec<WithLayout> = rx
        .iter()
        .flat_map(|q| std::iter::from_fn(|| q.pop()))
        .collect();
    assert_eq!(got.len(), 2);
    for f in &got {
        assert_eq!(f.rss, s.hash_frame(&f.data, None));
        assert_eq!(f.layout.is_some(), f.data == with_ext);
    }
    // An item may bring its own layout: the input read at its offsets is the same.
    let mut given = item(frame(2, 0));
    given.layout = Some(linerate_wire::layout::parse(&given.data).unwrap());
    d.dispatch([given]);
    let f = rx.iter().find_map(|q| q.pop()).unwrap();
    assert_eq!(f.rss, s.hash_frame(&f.data, None));

    let (mut d, rx) = Dispatcher::<RxFrame<Vec<u8>>>::new(s.clone(), 16).unwrap();
    d.dispatch([RxFrame::new(with_ext.clone()), RxFrame::new(frame(1, 0))]);
    let got: Vec<RxFrame<Vec<u8>>> = rx
        .iter()
        .flat_map(|q| std::iter::from_fn(|| q.pop()))
        .collect();
    assert_eq!(got.len(), 2);
    for f in got {
        assert_eq!(f.meta.rss, s.hash_frame(&f.data, None));
    }
}
