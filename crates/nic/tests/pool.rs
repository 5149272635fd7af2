//! The buffer pool across threads, and against a model of its counts.
//!
//! Each thread keeps a cache of a pool's free buffers, so these tests check what
//! the single-threaded unit tests cannot: buffers allocated on one thread and
//! dropped on another come back (and are reused, not allocated again), a
//! thread's cache goes back to the pool when the thread exits, and `max_free`
//! bounds the free buffers of all threads together.

use std::sync::mpsc;
use std::thread;

use linerate_nic::{PacketBuf, Pool, PoolConfig, PoolStats};
use proptest::prelude::*;

fn small(max_free: usize, prealloc: usize) -> Pool {
    Pool::new(PoolConfig {
        buf_len: 64,
        prealloc,
        max_free,
        ..PoolConfig::mtu()
    })
}

fn assert_send_sync<T: Send + Sync>() {}
fn assert_send<T: Send>() {}

#[test]
fn buffers_and_pools_cross_threads() {
    assert_send::<PacketBuf>();
    assert_send_sync::<Pool>();
}

/// Allocated on this thread, dropped on another, then reused here.
#[test]
fn dropped_on_another_thread_then_reused_here() {
    const N: usize = 300;
    let pool = small(1000, 0);
    let bufs: Vec<PacketBuf> = (0..N).map(|i| pool.alloc_from(&[i as u8; 10])).collect();
    assert_eq!(pool.stats().allocated, N as u64);
    thread::spawn(move || drop(bufs)).join().unwrap();
    // The dropping thread has exited: its cache went back to the pool.
    assert_eq!(
        pool.stats(),
        PoolStats {
            allocated: N as u64,
            reused: 0,
            free: N
        }
    );
    let again: Vec<PacketBuf> = (0..N).map(|_| pool.alloc()).collect();
    assert_eq!(
        pool.stats(),
        PoolStats {
            allocated: N as u64,
            reused: N as u64,
            free: 0
        }
    );
    drop(again);
    assert_eq!(pool.stats().free, N);
}

/// Allocated on another thread, dropped here, then reused by a third thread.
/// This thread's cache keeps up to two batches (a batch is an eighth of
/// `max_free`, at most 256: here 125, so 250 buffers) that the third thread
/// cannot reach; the rest it reuses.
#[test]
fn allocated_on_another_thread_dropped_here() {
    const N: usize = 300;
    let pool = small(1000, 0);
    let p = pool.clone();
    let bufs = thread::spawn(move || (0..N).map(|_| p.alloc()).collect::<Vec<_>>())
        .join()
        .unwrap();
    assert_eq!(pool.stats().free, 0);
    drop(bufs);
    assert_eq!(pool.stats().free, N, "{:?}", pool.stats());
    let p = pool.clone();
    let reused = thread::spawn(move || {
        let bufs: Vec<_> = (0..N).map(|_| p.alloc()).collect();
        let s = p.stats();
        drop(bufs);
        s
    })
    .join()
    .unwrap();
    assert!(reused.allocated <= N as u64 + 250, "{reused:?}");
    assert_eq!(reused.allocated + reused.reused, 2 * N as u64);
    // Free: what this thread's cache held back.
    assert_eq!(reused.free as u64, reused.allocated - N as u64);
    let s = pool.stats();
    assert_eq!(s.free as u64, s.allocated, "{s:?}");
}

/// Producer and consumer threads at once, both directions, with a small
/// `max_free`: the free count never passes it, every allocation is counted
/// once, and once warm the exchange allocates nothing new.
#[test]
fn concurrent_exchange_respects_max_free() {
    const MAX_FREE: usize = 40;
    const ROUNDS: usize = 400;
    let pool = small(MAX_FREE, 0);
    let (to_b, from_a) = mpsc::channel::<Vec<PacketBuf>>();
    let (to_a, from_b) = mpsc::channel::<Vec<PacketBuf>>();
    let worker =
        |pool: Pool, tx: mpsc::Sender<Vec<PacketBuf>>, rx: mpsc::Receiver<Vec<PacketBuf>>| {
            move || {
                let mut allocs = 0u64;
                let mut worst = 0;
                for round in 0..ROUNDS {
                    let n = 1 + round % 7;
                    let batch: Vec<_> = (0..n).map(|_| pool.alloc_from(&[round as u8])).collect();
                    allocs += n as u64;
                    if tx.send(batch).is_err() {
                        break;
                    }
                    // Drop what the other side sent (allocated there).
                    if let Ok(got) = rx.recv() {
                        assert!(got.iter().all(|b| b.len() == 1));
                        drop(got);
                    }
                    worst = worst.max(pool.stats().free);
                }
                (allocs, worst)
            }
        };
    let a = thread::spawn(worker(pool.clone(), to_b, from_b));
    let b = thread::spawn(worker(pool.clone(), to_a, from_a));
    let (na, worst_a) = a.join().unwrap();
    let (nb, worst_b) = b.join().unwrap();
    let s = pool.stats();
    assert!(
        worst_a <= MAX_FREE && worst_b <= MAX_FREE,
        "{worst_a} {worst_b}"
    );
    assert!(s.free <= MAX_FREE, "{s:?}");
    assert_eq!(s.allocated + s.reused, na + nb, "{s:?}");
    // At most 2 x 7 buffers are out at once (plus what the caches hold back
    // from each other): far fewer fresh allocations than allocs.
    assert!(s.allocated < (na + nb) / 10, "{s:?}");
}

/// Many threads hammer one pool at once; counts add up afterwards.
#[test]
fn many_threads_at_once_counts_add_up() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    let pool = small(64, 16);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = pool.clone();
            thread::spawn(move || {
                let mut allocs = 0u64;
                let mut held = Vec::new();
                for round in 0..ROUNDS {
                    for _ in 0..(round + t) % 9 {
                        held.push(pool.alloc());
                        allocs += 1;
                    }
                    held.truncate((round * 7 + t) % 5);
                    assert!(pool.stats().free <= 64);
                }
                allocs
            })
        })
        .collect();
    let allocs: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let s = pool.stats();
    assert_eq!(s.allocated + s.reused, allocs + 16, "{s:?}");
    assert!(s.free <= 64 && s.free > 0, "{s:?}");
    assert!(s.allocated <= 16 + (THREADS * 12) as u64 * 4, "{s:?}");
}

/// The last `Pool` handle goes while buffers are out (here and on another
/// thread): they are released when dropped later, wherever that happens.
#[test]
fn buffers_outlive_their_pool() {
    let pool = small(100, 4);
    let here: Vec<_> = (0..10).map(|_| pool.alloc_from(b"x")).collect();
    let there: Vec<_> = (0..10).map(|_| pool.alloc_from(b"y")).collect();
    let copy = here[0].clone();
    drop(pool);
    let t = thread::spawn(move || {
        let c = there[3].clone();
        drop(there);
        c
    });
    let c = t.join().unwrap();
    assert_eq!((&copy[..], &c[..]), (&b"x"[..], &b"y"[..]));
    drop(here);
    drop((copy, c));
    // A new pool on this thread after the old one closed works as usual.
    let pool = small(100, 0);
    drop(pool.alloc());
    assert_eq!(pool.stats().free, 1);
}

/// A buffer kept in a thread-local of its own is dropped while the thread's
/// thread-locals are torn down, maybe after the pool's cache for that thread is
/// gone: it goes back to the pool all the same (or is released), no panic.
#[test]
fn dropped_while_thread_locals_are_torn_down() {
    use std::cell::RefCell;
    thread_local! {
        static KEPT: RefCell<Vec<PacketBuf>> = const { RefCell::new(Vec::new()) };
    }
    let pool = small(100, 0);
    let p = pool.clone();
    thread::spawn(move || {
        drop(p.alloc());
        let bufs: Vec<_> = (0..5).map(|_| p.alloc()).collect();
        KEPT.with(|k| k.borrow_mut().extend(bufs));
    })
    .join()
    .unwrap();
    let s = pool.stats();
    assert_eq!((s.allocated, s.reused), (5, 1), "{s:?}");
    assert!(s.free <= 5, "{s:?}");
    // Whatever came back is reused before anything is allocated.
    let free = s.free;
    let again: Vec<_> = (0..free).map(|_| pool.alloc()).collect();
    assert_eq!(pool.stats().allocated, 5);
    drop(again);
}

#[derive(Debug, Clone)]
enum Op {
    Alloc,
    /// Drops the held buffer at this index (modulo the count held).
    Drop(usize),
    /// Clones the held buffer at this index (a new buffer from the pool).
    Clone(usize),
    /// Grows the held buffer at this index past the pool's buffer size.
    Grow(usize),
    /// A clone of the pool handle allocates (same pool, same counts).
    AllocViaClone,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Alloc),
        4 => any::<usize>().prop_map(Op::Drop),
        1 => any::<usize>().prop_map(Op::Clone),
        1 => any::<usize>().prop_map(Op::Grow),
        1 => Just(Op::AllocViaClone),
    ]
}

/// What the pool's counts must be, on one thread: a buffer dropped is kept if
/// fewer than `max_free` are free, else released; an allocation reuses a free
/// buffer if there is one, else allocates.
struct Model {
    max_free: usize,
    allocated: u64,
    reused: u64,
    free: usize,
}

impl Model {
    fn alloc(&mut self) {
        if self.free > 0 {
            self.free -= 1;
            self.reused += 1;
        } else {
            self.allocated += 1;
        }
    }

    fn drop_one(&mut self) {
        if self.free < self.max_free {
            self.free += 1;
        }
    }

    fn stats(&self) -> PoolStats {
        PoolStats {
            allocated: self.allocated,
            reused: self.reused,
            free: self.free,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Alloc/drop sequences on one thread give exactly the model's counts
    /// (however the pool splits its free buffers between cache and depot).
    #[test]
    fn counts_follow_the_model(
        max_free in 0usize..80,
        prealloc_frac in 0usize..=4,
        ops in proptest::collection::vec(op(), 0..300),
    ) {
        let prealloc = max_free * prealloc_frac / 4;
        let pool = small(max_free, prealloc);
        let mut model = Model { max_free, allocated: prealloc as u64, reused: 0, free: prealloc };
        let mut held: Vec<PacketBuf> = Vec::new();
        prop_assert_eq!(pool.stats(), model.stats());
        for op in ops {
            match op {
                Op::Alloc => {
                    let b = pool.alloc();
                    prop_assert!(b.is_empty());
                    prop_assert!(b.headroom() >= 128 && b.tailroom() >= 64);
                    held.push(b);
                    model.alloc();
                }
                Op::AllocViaClone => {
                    held.push(pool.clone().alloc_from(b"abc"));
                    model.alloc();
                }
                Op::Drop(i) if !held.is_empty() => {
                    drop(held.swap_remove(i % held.len()));
                    model.drop_one();
                }
                Op::Clone(i) if !held.is_empty() => {
                    let c = held[i % held.len()].clone();
                    prop_assert_eq!(&c[..], &held[i % held.len()][..]);
                    held.push(c);
                    model.alloc();
                }
                Op::Grow(i) if !held.is_empty() => {
                    let n = held.len();
                    held[i % n].extend_from_slice(&[7; 300]);
                }
                _ => {}
            }
            prop_assert_eq!(pool.stats(), model.stats());
        }
        for b in held.drain(..) {
            drop(b);
            model.drop_one();
        }
        prop_assert_eq!(pool.stats(), model.stats());
    }

    /// Some drops on other threads: the model's exact split between reused and
    /// released no longer holds (another thread's cache gets its own share of
    /// `max_free`), but the invariants do.
    #[test]
    fn drops_elsewhere_keep_the_invariants(
        max_free in 0usize..40,
        ops in proptest::collection::vec((op(), any::<bool>()), 0..60),
    ) {
        let pool = small(max_free, 0);
        let mut held: Vec<PacketBuf> = Vec::new();
        let mut allocs = 0u64;
        for (op, elsewhere) in ops {
            match op {
                Op::Alloc | Op::AllocViaClone | Op::Clone(_) | Op::Grow(_) => {
                    held.push(pool.alloc());
                    allocs += 1;
                }
                Op::Drop(i) if !held.is_empty() => {
                    let b = held.swap_remove(i % held.len());
                    if elsewhere {
                        thread::spawn(move || drop(b)).join().unwrap();
                    } else {
                        drop(b);
                    }
                }
                Op::Drop(_) => {}
            }
            let s = pool.stats();
            prop_assert_eq!(s.allocated + s.reused, allocs);
            prop_assert!(s.free <= max_free);
            // Every buffer ever allocated is held, free, or released.
            prop_assert!(s.free + held.len() <= s.allocated as usize);
        }
    }
}
