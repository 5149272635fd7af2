//! A per-thread cache of receive buffer storage, so that a buffer drained and
//! released (an idle connection holds none) and needed again soon after (a
//! busy one drains between arrivals) costs no allocation: the shape of a slab
//! cache, with blocks of the sizes the rings use (powers of two, or the
//! configured capacity).
//!
//! Engines are shared-nothing, one per thread, so a thread's cache serves the
//! engines on it without locks. It holds at most [`MAX_BYTES`] in at most
//! [`MAX_BLOCKS`] blocks; what does not fit goes back to the allocator. The
//! bytes in a cached block are not zeroed again: a block is handed out empty
//! (length 0) and its user initialises what it writes.

use std::cell::RefCell;

/// Bytes a thread keeps cached, at most.
pub const MAX_BYTES: usize = 8 << 20;

/// Blocks a thread keeps cached, at most.
pub const MAX_BLOCKS: usize = 64;

/// Smaller blocks are not cached: the allocator's own per-thread cache serves
/// them as fast.
pub const MIN_BLOCK: usize = 4096;

/// Cached blocks by size class: class `k` holds capacities in `[2^k, 2^(k+1))`.
#[derive(Default)]
struct Cache {
    classes: [Vec<Vec<u8>>; 32],
    blocks: usize,
    bytes: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// An empty vector with room for at least `min` bytes (and less than four
/// times that): a cached block if one fits, else a new allocation of `min`.
pub fn take(min: usize) -> Vec<u8> {
    if min < MIN_BLOCK {
        return Vec::with_capacity(min);
    }
    // Every block of the class of the next power of two holds `min`.
    let class = min.next_power_of_two().trailing_zeros() as usize;
    let cached = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let v = c.classes.get_mut(class)?.pop()?;
        c.blocks -= 1;
        c.bytes -= v.capacity();
        Some(v)
    });
    cached.unwrap_or_else(|| Vec::with_capacity(min))
}

/// Gives `v`'s allocation back to the cache (or to the allocator when the
/// cache is full or the block small).
pub fn give(mut v: Vec<u8>) {
    let cap = v.capacity();
    if cap < MIN_BLOCK {
        return;
    }
    v.clear();
    let class = (usize::BITS - 1 - cap.leading_zeros()) as usize;
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.blocks >= MAX_BLOCKS || c.bytes + cap > MAX_BYTES {
            return;
        }
        if let Some(list) = c.classes.get_mut(class) {
            list.push(v);
            c.blocks += 1;
            c.bytes += cap;
        }
    });
}

/// Bytes cached by this thread now.
pub fn cached_bytes() -> usize {
    CACHE.with(|c| c.borrow().bytes)
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
}
