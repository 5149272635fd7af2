//! A per-thread cache of buffer storage, so that a buffer drained and
//! released (an idle connection holds none) and needed again soon after (a
//! busy one drains between arrivals, and a new connection takes what a closed
//! one gave back) costs no allocation: the shape of a slab cache, with blocks
//! of the sizes the rings use (powers of two, or the configured capacity), and
//! the send buffer's first chunk ([`take_chunk`], [`give_chunk`]).
//!
//! Engines are shared-nothing, one per thread, so a thread's cache serves the
//! engines on it without locks. Blocks of [`MIN_BLOCK`] or more: at most
//! [`MAX_BYTES`] in at most [`MAX_BLOCKS`] blocks. Smaller blocks and send
//! chunks, which every short connection takes and gives back (thousands of
//! them at once when connections open in bursts, more than the allocator's
//! own per-thread cache keeps: its slow path costs several hundred
//! instructions a block): at most [`MAX_SMALL`] of each, at most
//! [`MAX_SMALL_BYTES`] and [`MAX_SMALL`] times [`CHUNK`] bytes. What does not
//! fit goes back to the allocator, which would keep it in its heap all the
//! same. The bytes in a cached block are not zeroed again: a block is handed
//! out empty (length 0) and its user initialises what it writes.

use bytes::BytesMut;
use std::cell::RefCell;

/// Bytes a thread keeps cached, at most.
pub const MAX_BYTES: usize = 8 << 20;

/// Blocks a thread keeps cached, at most.
pub const MAX_BLOCKS: usize = 64;

/// The boundary between large blocks (limited by [`MAX_BLOCKS`] and
/// [`MAX_BYTES`]) and small ones (by [`MAX_SMALL`] and [`MAX_SMALL_BYTES`]).
pub const MIN_BLOCK: usize = 4096;

/// Small blocks, and send chunks, a thread keeps cached, at most (each).
pub const MAX_SMALL: usize = 4096;

/// Bytes a thread keeps cached in small blocks, at most.
pub const MAX_SMALL_BYTES: usize = 2 << 20;

/// Capacity of the send chunks [`take_chunk`] hands out (a send buffer's first
/// chunk for short writes).
pub const CHUNK: usize = 1024;

/// Blocks shorter than this are not cached (nothing asks for them).
const MIN_SMALL: usize = 64;

/// Cached blocks by size class: class `k` holds capacities in `[2^k, 2^(k+1))`.
#[derive(Default)]
struct Cache {
    classes: [Vec<Vec<u8>>; 32],
    /// Large blocks and their bytes.
    blocks: usize,
    bytes: usize,
    /// Small blocks and their bytes.
    small: usize,
    small_bytes: usize,
    /// Send chunks, each of capacity [`CHUNK`].
    chunks: Vec<BytesMut>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// An empty vector with room for at least `min` bytes (and less than four
/// times that): a cached block if one fits, else a new allocation of `min`.
pub fn take(min: usize) -> Vec<u8> {
    if min < MIN_SMALL {
        return Vec::with_capacity(min);
    }
    // Every block of the class of the next power of two holds `min`.
    let class = min.next_power_of_two().trailing_zeros() as usize;
    let cached = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let v = c.classes.get_mut(class)?.pop()?;
        if v.capacity() < MIN_BLOCK {
            c.small -= 1;
            c.small_bytes -= v.capacity();
        } else {
            c.blocks -= 1;
            c.bytes -= v.capacity();
        }
        Some(v)
    });
    cached.unwrap_or_else(|| Vec::with_capacity(min))
}

/// Gives `v`'s allocation back to the cache (or to the allocator when the
/// cache is full or the block tiny).
pub fn give(mut v: Vec<u8>) {
    let cap = v.capacity();
    if cap < MIN_SMALL {
        return;
    }
    v.clear();
    let class = (usize::BITS - 1 - cap.leading_zeros()) as usize;
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let c = &mut *c;
        let (blocks, bytes, max_blocks, max_bytes) = if cap < MIN_BLOCK {
            (&mut c.small, &mut c.small_bytes, MAX_SMALL, MAX_SMALL_BYTES)
        } else {
            (&mut c.blocks, &mut c.bytes, MAX_BLOCKS, MAX_BYTES)
        };
        if *blocks >= max_blocks || *bytes + cap > max_bytes {
            return;
        }
        if let Some(list) = c.classes.get_mut(class) {
            list.push(v);
            *blocks += 1;
            *bytes += cap;
        }
    });
}

/// An empty send chunk of capacity [`CHUNK`]: a cached one, else a new one.
pub fn take_chunk() -> BytesMut {
    let cached = CACHE.with(|c| c.borrow_mut().chunks.pop());
    cached.unwrap_or_else(|| BytesMut::with_capacity(CHUNK))
}

/// Gives a send chunk back (emptied, its consumed front reclaimed): cached if
/// it is a whole [`CHUNK`] held by no one else and the cache has room, else
/// freed.
pub fn give_chunk(mut b: BytesMut) {
    b.clear();
    // Asking for more than the view holds moves it back to the start of its
    // allocation when the front was consumed (never allocating), so that the
    // capacity is the whole allocation's.
    let _ = b.try_reclaim(b.capacity() + 1);
    if b.capacity() != CHUNK {
        return;
    }
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.chunks.len() < MAX_SMALL {
            c.chunks.push(b);
        }
    });
}

/// Bytes cached by this thread now in blocks of [`MIN_BLOCK`] or more.
#[cfg(any(test, feature = "harness"))]
pub fn cached_bytes() -> usize {
    CACHE.with(|c| c.borrow().bytes)
}

/// Bytes cached by this thread now in smaller blocks, and send chunks cached.
#[cfg(any(test, feature = "harness"))]
pub fn cached_small() -> (usize, usize) {
    CACHE.with(|c| {
        let c = c.borrow();
        (c.small_bytes, c.chunks.len())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_blocks_of_the_right_size_and_stays_bounded() {
        let before = cached_bytes();
        let mut v = take(6000);
        v.extend_from_slice(&[1; 100]);
        let ptr = v.as_ptr();
        give(v);
        assert_eq!(cached_bytes(), before + 6000);
        // A larger class, or a block too small to cache: not this one.
        assert_eq!(take(8193).capacity(), 8193);
        let small = take(1000);
        assert_ne!(small.as_ptr(), ptr);
        give(small);
        assert_eq!(cached_bytes(), before + 6000);
        let again = take(4096);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0));
        assert_eq!(cached_bytes(), before);
        for _ in 0..2 * MAX_BLOCKS {
            give(Vec::with_capacity(1 << 20));
        }
        assert!(cached_bytes() <= MAX_BYTES);
    }

    /// Against a model of what the cache holds (blocks per class, in the order
    /// given back): random takes and gives of small and large blocks hand out
    /// the block the model says (the last one given back to the class that
    /// serves the size), empty, never smaller than asked nor four times
    /// larger, and the cache never passes its bounds.
    #[test]
    fn matches_a_model_of_the_classes_and_stays_within_bounds() {
        use std::collections::BTreeMap;
        // Fresh thread: an empty cache to start from.
        std::thread::spawn(|| {
            let mut rng = crate::rng::Rng::new(11);
            let mut model: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
            let mut held: Vec<Vec<u8>> = Vec::new();
            let size = |rng: &mut crate::rng::Rng| match rng.below(3) {
                0 => 64 + rng.below(1500) as usize,
                1 => 512 << rng.below(4),
                _ => MIN_BLOCK + rng.below(20_000) as usize,
            };
            for _ in 0..20_000 {
                if rng.below(2) == 0 {
                    let min = size(&mut rng);
                    let v = take(min);
                    assert_eq!(v.len(), 0);
                    assert!(v.capacity() >= min && v.capacity() < 4 * min, "{min}");
                    let class = min.next_power_of_two().trailing_zeros();
                    let want = model.get_mut(&class).and_then(Vec::pop);
                    match want {
                        Some((ptr, cap)) => {
                            assert_eq!((v.as_ptr() as usize, v.capacity()), (ptr, cap))
                        }
                        None => assert_eq!(v.capacity(), min),
                    }
                    held.push(v);
                } else if !held.is_empty() {
                    let i = rng.below(held.len() as u64) as usize;
                    let mut v = held.swap_remove(i);
                    v.extend_from_slice(&[7; 10]);
                    let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
                    let class = usize::BITS - 1 - cap.leading_zeros();
                    let (blocks, bytes): (usize, usize) = model
                        .values()
                        .flatten()
                        .filter(|&&(_, c)| (c < MIN_BLOCK) == (cap < MIN_BLOCK))
                        .fold((0, 0), |(n, b), &(_, c)| (n + 1, b + c));
                    let (max_n, max_b) = if cap < MIN_BLOCK {
                        (MAX_SMALL, MAX_SMALL_BYTES)
                    } else {
                        (MAX_BLOCKS, MAX_BYTES)
                    };
                    give(v);
                    if blocks < max_n && bytes + cap <= max_b {
                        model.entry(class).or_default().push((ptr, cap));
                    }
                }
                let all = model.values().flatten();
                let small: usize = all.filter(|&&(_, c)| c < MIN_BLOCK).map(|&(_, c)| c).sum();
                let large: usize = model.values().flatten().map(|&(_, c)| c).sum::<usize>() - small;
                assert_eq!((cached_small().0, cached_bytes()), (small, large));
                assert!(small <= MAX_SMALL_BYTES && large <= MAX_BYTES);
            }
        })
        .join()
        .unwrap();
    }

    /// A send chunk given back, its front consumed, comes back whole and
    /// empty; one of another size, or still shared, is not kept.
    #[test]
    fn send_chunks_come_back_whole() {
        std::thread::spawn(|| {
            let mut b = take_chunk();
            assert_eq!((b.len(), b.capacity()), (0, CHUNK));
            b.extend_from_slice(&[1; 300]);
            let ptr = b.as_ptr();
            bytes::Buf::advance(&mut b, 300);
            give_chunk(b);
            assert_eq!(cached_small().1, 1);
            let again = take_chunk();
            assert_eq!(
                (again.as_ptr(), again.len(), again.capacity()),
                (ptr, 0, CHUNK)
            );
            assert_eq!(cached_small().1, 0);
            give_chunk(BytesMut::with_capacity(4 * CHUNK));
            let mut shared = BytesMut::with_capacity(CHUNK);
            shared.extend_from_slice(&[2; 100]);
            let front = shared.split_to(50).freeze();
            give_chunk(shared);
            assert_eq!(cached_small().1, 0);
            assert_eq!(&front[..], &[2; 50]);
            for _ in 0..MAX_SMALL + 10 {
                give_chunk(BytesMut::with_capacity(CHUNK));
            }
            assert_eq!(cached_small().1, MAX_SMALL);
        })
        .join()
        .unwrap();
    }
}
