//! The connection's zero-copy operations: SEND of an owned buffer, which the
//! send buffer queues by reference, and RECEIVE through a closure lent the
//! receive buffer's readable bytes in place. Plus giving buffer memory back
//! when a buffer drains, so an idle connection holds none.

use super::conn::Conn;
use bytes::Bytes;

impl Conn {
    /// Queues `data` without copying it (SEND); returns the bytes taken.
    pub fn send_bytes(&mut self, data: Bytes) -> usize {
        self.tx.push_bytes(data)
    }

    /// Lends the readable bytes to `read`, in order, as slices (each adopted
    /// frame's payload, then up to two of the ring's, whose storage wraps), and
    /// consumes as many as it returns (clamped to the slice). Stops at the first
    /// slice not consumed whole. Returns the bytes consumed; may decide a window
    /// update is due.
    pub fn recv_with(&mut self, mut read: impl FnMut(&[u8]) -> usize) -> usize {
        let mut n = 0;
        for s in self.rx.slices() {
            if s.is_empty() {
                break;
            }
            let k = read(s).min(s.len());
            n += k;
            if k < s.len() {
                break;
            }
        }
        self.rx.consume(n);
        if n > 0 {
            self.maybe_window_update();
            self.release_drained();
        }
        n
    }

    /// Gives the receive buffer's storage back once everything in it was read
    /// and nothing waits out of order past it.
    pub fn release_drained(&mut self) {
        if self.rx.is_empty() && self.asm.is_empty() {
            self.rx.release();
        }
    }

    /// Bytes of buffer memory the connection holds (send and receive).
    pub fn buffer_storage(&self) -> usize {
        self.tx.storage() + self.rx.storage()
    }
}
