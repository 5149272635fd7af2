//! Engine internals that tests and benchmarks measure against: test support,
//! built with the feature, not part of the engine's API. The values follow the
//! implementation and may change with it.

/// Disjoint out-of-order ranges a connection holds at most; a segment that
/// would make one more is dropped and counted in
/// [`Counters::tcp_ofo_dropped`](crate::Counters::tcp_ofo_dropped).
pub const OOO_RANGES: usize = crate::tcp::assembler::MAX_RANGES;

/// Bytes the calling thread's buffer cache holds now: receive-buffer blocks
/// and send chunks given back by connections and kept for the next ones
/// (outside [`Engine::memory_usage`](crate::Engine::memory_usage), which counts
/// what connections hold).
pub fn cached_buffer_bytes() -> usize {
    use crate::tcp::pool;
    let (small, chunks) = pool::cached_small();
    pool::cached_bytes() + small + chunks * pool::CHUNK
}
