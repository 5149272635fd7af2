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

#[derive(Default)]
struct Cache {
    blocks: Vec<Vec<u8>>,
    bytes: usize,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// An empty vector with room for `min` bytes and at most twice that: a cached
/// block if one fits, else a new allocation of exactly `min`.
pub fn take(min: usize) -> Vec<u8> {
    let cached = CACHE.with(|c| {
        let mut c = c.borrow_mut();
        let fits = |v: &Vec<u8>| v.capacity() >= min && v.capacity() / 2 <= min;
        let i = c.blocks.iter().position(fits)?;
        let v = c.blocks.swap_remove(i);
        c.bytes -= v.capacity();
        Some(v)
    });
    cached.unwrap_or_else(|| Vec::with_capacity(min))
}

/// Gives `v`'s allocation back to the cache (or to the allocator when the
/// cache is full).
pub fn give(mut v: Vec<u8>) {
    let cap = v.capacity();
    if cap == 0 {
        return;
    }
    v.clear();
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.blocks.len() < MAX_BLOCKS && c.bytes + cap <= MAX_BYTES {
            c.bytes += cap;
            c.blocks.push(v);
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
        let mut v = take(4096);
        v.extend_from_slice(&[1; 100]);
        let ptr = v.as_ptr();
        give(v);
        assert_eq!(cached_bytes(), before + 4096);
        // Too small, or far too large a request: not this block.
        assert_eq!(take(8192).capacity(), 8192);
        let small = take(1000);
        assert_ne!(small.as_ptr(), ptr);
        assert_eq!(small.capacity(), 1000);
        let again = take(3000);
        assert_eq!((again.as_ptr(), again.len()), (ptr, 0));
        assert_eq!(cached_bytes(), before);
        for _ in 0..2 * MAX_BLOCKS {
            give(Vec::with_capacity(1 << 20));
        }
        assert!(cached_bytes() <= MAX_BYTES);
    }
}
