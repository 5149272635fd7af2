//! `Workers` and `SharedNic::queue`: one thread per queue, each owning the view
//! of its queue, over a two-queue memory pair.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_nic::memory::{self, PairConfig};
use linerate_nic::{Batch, Counter, Frame, MemNic, Nic, NicCaps, NicError, Readiness};
use linerate_rt::{QueueNic, SharedNic, Worker, Workers};
use linerate_toe::Instant;
use std::time::{Duration, Instant as Wall};

/// Echoes every frame back on its own queue, counting what it saw.
struct Echo {
    nic: QueueNic<MemNic>,
    batch: Batch,
    echoed: u64,
    /// Frames tagged for another queue.
    strays: u64,
}

impl Worker for Echo {
    fn poll(&mut self, _now: Instant) -> usize {
        self.batch.clear();
        let n = self.nic.receive(0, &mut self.batch, 32).unwrap();
        let q = self.nic.queue() as u8;
        self.strays += self.batch.iter().filter(|f| f.bytes()[14] != q).count() as u64;
        self.echoed += n as u64;
        while !self.batch.is_empty() {
            self.nic.transmit(0, &mut self.batch).unwrap();
        }
        n
    }

    fn readiness(&self) -> Vec<Readiness> {
        vec![self.nic.readiness(0).unwrap()]
    }
}

fn two_queues() -> NicCaps {
    NicCaps {
        queues: 2,
        ..NicCaps::plain()
    }
}

fn frame(nic: &MemNic, queue: u8, seq: u16) -> Frame {
    let mut f = vec![0xff; 12];
    f.extend_from_slice(&[0x88, 0xb5, queue]);
    f.extend_from_slice(&seq.to_be_bytes());
    f.resize(60, 0);
    Frame::plain(nic.pool().alloc_from(&f))
}

#[test]
fn each_worker_serves_its_own_queue_and_join_hands_them_back() {
    let (a, mut b) = memory::pair(PairConfig::new(two_queues(), two_queues()));
    let shared = SharedNic::new(a);
    let workers: Vec<Echo> = (0..2)
        .map(|q| Echo {
            nic: shared.queue(q).unwrap(),
            batch: Batch::new(),
            echoed: 0,
            strays: 0,
        })
        .collect();
    let running = Workers::spawn(workers, "echo").unwrap();
    const N: u16 = 500;
    for q in 0..2u8 {
        let mut batch: Batch = (0..N).map(|s| frame(&b, q, s)).collect();
        while !batch.is_empty() {
            b.transmit(usize::from(q), &mut batch).unwrap();
        }
    }
    // Collect the echoes (the workers wake on the memory port's notify).
    let mut back = [0u64; 2];
    let deadline = Wall::now() + Duration::from_secs(30);
    while back.iter().sum::<u64>() < 2 * u64::from(N) && Wall::now() < deadline {
        for (q, got) in back.iter_mut().enumerate() {
            let mut rx = Batch::new();
            b.receive(q, &mut rx, 256).unwrap();
            assert!(rx.iter().all(|f| usize::from(f.bytes()[14]) == q));
            *got += rx.len() as u64;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(running.running());
    let done = running.join().unwrap();
    assert_eq!(back, [u64::from(N); 2], "every frame echoed on its queue");
    for (q, w) in done.iter().enumerate() {
        assert_eq!(w.echoed, u64::from(N), "worker {q}");
        assert_eq!(w.strays, 0, "worker {q} saw another queue's frames");
    }
    // The views transmitted on their own queues of the shared NIC.
    let c = shared.counters();
    assert_eq!(c.get(0, Counter::TxPackets), u64::from(N));
    assert_eq!(c.get(1, Counter::TxPackets), u64::from(N));
}

#[test]
fn a_view_has_one_queue_and_the_shared_nic_bounds_them() {
    let (a, _b) = memory::pair(PairConfig::new(two_queues(), two_queues()));
    let shared = SharedNic::new(a);
    assert!(matches!(
        shared.queue(2),
        Err(NicError::NoQueue {
            queue: 2,
            queues: 2
        })
    ));
    let mut v = shared.queue(1).unwrap();
    assert_eq!(v.queues(), 1);
    assert_eq!(v.queue(), 1);
    let mut batch = Batch::new();
    assert!(matches!(
        v.receive(1, &mut batch, 8),
        Err(NicError::NoQueue {
            queue: 1,
            queues: 1
        })
    ));
    assert_eq!(v.receive(0, &mut batch, 8).unwrap(), 0);
}

/// Setting the stop flag (as a signal handler does) ends idle workers
/// promptly: they wait at most `MAX_WAIT` between polls.
#[test]
fn the_stop_flag_ends_idle_workers() {
    let (a, _b) = memory::pair(PairConfig::new(two_queues(), two_queues()));
    let shared = SharedNic::new(a);
    let workers: Vec<Echo> = (0..2)
        .map(|q| Echo {
            nic: shared.queue(q).unwrap(),
            batch: Batch::new(),
            echoed: 0,
            strays: 0,
        })
        .collect();
    let running = Workers::spawn(workers, "idle").unwrap();
    running
        .stop_flag()
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let start = Wall::now();
    while running.running() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!running.running(), "still running after the stop flag");
    let done = running.join().unwrap();
    assert_eq!(done.len(), 2);
}
