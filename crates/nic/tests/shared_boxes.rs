//! Shared buffers made on one thread and dropped on another (a sender's GSO
//! segments released by the receiver's thread): their boxes come back through
//! the shared depot, so once warm the making thread allocates none, and every
//! buffer goes back to its pool. One test in its own process, because the box
//! count is the process's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::buf::BOX_CACHE;
use linerate_nic::{Frag, Pool, PoolConfig, SharedBuf};
use std::sync::mpsc::sync_channel;

#[test]
fn boxes_made_here_and_dropped_there_come_back() {
    let pool = Pool::new(PoolConfig::mtu());
    let (tx, rx) = sync_channel::<Frag>(64);
    let receiver = std::thread::spawn(move || {
        let mut n = 0u64;
        for f in rx {
            n += u64::from(f.bytes()[0]);
        }
        n
    });
    let mut want = 0u64;
    let mut send = |n: usize| {
        for i in 0..n {
            let b = (i % 251) as u8;
            let s = SharedBuf::new(pool.alloc_from(&[b, b]));
            // Two references per buffer, as a super-frame's segments hold.
            tx.send(Frag::new(s.clone(), 0, 1).unwrap()).unwrap();
            tx.send(Frag::new(s, 1, 1).unwrap()).unwrap();
            want += 2 * u64::from(b);
        }
    };
    send(5_000);
    let before = SharedBuf::boxes_allocated();
    send(50_000);
    let after = SharedBuf::boxes_allocated();
    drop(tx);
    assert_eq!(receiver.join().unwrap(), want);
    println!("boxes: {before} to warm up, {} more after", after - before);
    assert!(
        after - before <= BOX_CACHE as u64,
        "{} boxes allocated for 50 000 buffers once warm",
        after - before
    );
    let s = pool.stats();
    assert_eq!(s.allocated, s.free as u64, "buffers not back: {s:?}");
}
