//! The driver loop with a service that is not an engine: a reflector that sends
//! every frame back with its MACs swapped, handing the received buffers over
//! as they are (no copy), and keeps what the NIC has no room for.

use linerate_nic::{
    Batch, Counters, Frame, MemNic, Nic, NicCaps, NicError, Pool, Readiness, Recorder,
};
use linerate_rt::{Driver, Service};
use linerate_toe::{Instant, TxSink};
use std::collections::VecDeque;
use std::sync::Arc;

/// Sends back what it receives, MACs swapped.
#[derive(Default)]
struct Reflector {
    queue: VecDeque<Frame>,
    refused: usize,
}

impl Service for Reflector {
    fn handle_frames(&mut self, _now: Instant, batch: &mut Batch) {
        for mut f in batch.drain(..) {
            let b = f.bytes_mut();
            for i in 0..6 {
                b.swap(i, i + 6);
            }
            self.queue.push_back(f);
        }
    }

    fn poll_transmit_into<S: TxSink>(&mut self, _now: Instant, sink: &mut S) {
        while let Some(f) = self.queue.pop_front() {
            if let Err(f) = sink.push_frame(f) {
                self.refused += 1;
                self.queue.push_front(f);
                return;
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

fn frame(i: u16) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5];
    f.extend_from_slice(&i.to_be_bytes());
    f.resize(60, 0);
    f
}

#[test]
fn a_reflector_runs_on_the_driver_loop() {
    let (mut peer, nic) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut d = Driver::with_service(Reflector::default(), nic, 0).unwrap();
    let mut batch = Batch::new();
    for i in 0..100u16 {
        batch.push(Frame::plain(peer.pool().alloc_from(&frame(i))));
    }
    peer.transmit(0, &mut batch).unwrap();
    let now = Instant::ZERO;
    let mut next = d.poll(now).unwrap();
    while next == Some(now) {
        next = d.poll(now).unwrap();
    }
    assert_eq!(next, None, "a reflector has no timers");
    let mut got = Batch::new();
    peer.receive(0, &mut got, 1000).unwrap();
    assert_eq!(got.len(), 100);
    for (i, f) in got.iter().enumerate() {
        let b = f.bytes();
        assert_eq!(
            &b[..12],
            &[2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2],
            "MACs swapped"
        );
        assert_eq!(u16::from_be_bytes([b[14], b[15]]), i as u16, "in order");
    }
    assert_eq!(d.stats().rx_frames, 100);
    assert_eq!(d.stats().tx_frames, 100);
}

/// A port whose transmit takes nothing while closed (a full backend queue).
struct Gate {
    nic: MemNic,
    open: bool,
}

impl Nic for Gate {
    fn caps(&self) -> &NicCaps {
        self.nic.caps()
    }
    fn receive(&mut self, q: usize, b: &mut Batch, max: usize) -> Result<usize, NicError> {
        self.nic.receive(q, b, max)
    }
    fn transmit(&mut self, q: usize, b: &mut Batch) -> Result<usize, NicError> {
        if self.open {
            self.nic.transmit(q, b)
        } else {
            Ok(0)
        }
    }
    fn readiness(&self, q: usize) -> Result<Readiness, NicError> {
        self.nic.readiness(q)
    }
    fn counters(&self) -> &Counters {
        self.nic.counters()
    }
    fn pool(&self) -> &Pool {
        self.nic.pool()
    }
    fn set_recorder(&mut self, r: Option<Arc<dyn Recorder>>) {
        self.nic.set_recorder(r);
    }
}

#[test]
fn a_service_keeps_what_the_driver_cannot_take() {
    let (mut peer, nic) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let gate = Gate { nic, open: false };
    let mut d = Driver::with_service(Reflector::default(), gate, 0).unwrap();
    let now = Instant::ZERO;
    let mut batch = Batch::new();
    for i in 0..2000u16 {
        batch.push(Frame::plain(peer.pool().alloc_from(&frame(i))));
        if batch.len() == 64 {
            peer.transmit(0, &mut batch).unwrap();
            d.poll(now).unwrap();
        }
    }
    peer.transmit(0, &mut batch).unwrap();
    while d.poll(now).unwrap() == Some(now) && d.stats().rx_frames < 2000 {}
    // The backend took nothing: the driver holds its backlog, the service the rest.
    assert_eq!(d.stats().tx_frames, 0);
    assert!(
        d.service().refused > 0,
        "the sink refused once its backlog was full"
    );
    assert!(!d.service().queue.is_empty());
    // The backend opens: everything goes out, in order, nothing lost.
    d.nic_mut().open = true;
    let mut got = Batch::new();
    let mut order = Vec::new();
    for _ in 0..100 {
        d.poll(now).unwrap();
        peer.receive(0, &mut got, 4096).unwrap();
        order.extend(
            got.drain(..)
                .map(|f| u16::from_be_bytes([f.bytes()[14], f.bytes()[15]])),
        );
    }
    assert_eq!(order, (0..2000).collect::<Vec<u16>>());
}
