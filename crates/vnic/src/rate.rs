//! Token buckets in bits and packets per second, charged by wire cost.

use crate::config::{Exceed, RateLimit};
use linerate_nic::Frame;

/// Nanoseconds per second: tokens are kept in units of 1/1e9 of a bit or packet
/// so refilling is exact integer arithmetic.
const NS: i128 = 1_000_000_000;

/// What a frame costs on the wire: its segments and their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cost {
    pub(crate) packets: u64,
    pub(crate) bytes: u64,
}

/// The wire cost of `frame`: one packet of its length, or for a super-frame the
/// segments GSO will make, each carrying the headers.
pub(crate) fn cost(frame: &Frame) -> Cost {
    let len = frame.len() as u64;
    let Some(gso) = frame.meta.gso else {
        return Cost {
            packets: 1,
            bytes: len,
        };
    };
    let header = linerate_wire::layout::parse(frame.bytes()).map_or(0, |l| l.header_len()) as u64;
    let payload = len.saturating_sub(header);
    let size = u64::from(gso.size.max(1));
    let segs = payload.div_ceil(size).max(1);
    Cost {
        packets: segs,
        bytes: len + (segs - 1) * header,
    }
}

/// One bucket (bits or packets): tokens scaled by 1e9, may go into debt.
#[derive(Debug, Clone)]
struct Bucket {
    rate: i128,
    depth: i128,
    tokens: i128,
}

impl Bucket {
    fn new(rate: u64, burst: u64) -> Option<Bucket> {
        (rate > 0).then(|| Bucket {
            rate: i128::from(rate),
            depth: i128::from(burst) * NS,
            tokens: i128::from(burst) * NS,
        })
    }

    fn refill(&mut self, elapsed_ns: u64) {
        self.tokens = (self.tokens + i128::from(elapsed_ns) * self.rate).min(self.depth);
    }
}

/// A rate limiter: a bit bucket and a packet bucket, either optional.
#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    bits: Option<Bucket>,
    packets: Option<Bucket>,
    last_ns: u64,
    pub(crate) exceed: Exceed,
}

impl Limiter {
    pub(crate) fn new(limit: &RateLimit, now_ns: u64) -> Limiter {
        Limiter {
            bits: Bucket::new(limit.bits_per_sec, limit.burst_bits),
            packets: Bucket::new(limit.packets_per_sec, limit.burst_packets),
            last_ns: now_ns,
            exceed: limit.exceed,
        }
    }

    /// Whether a frame may go now (every bucket holds some credit); refills first.
    pub(crate) fn conforms(&mut self, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        for b in [&mut self.bits, &mut self.packets].into_iter().flatten() {
            b.refill(elapsed);
        }
        [&self.bits, &self.packets]
            .into_iter()
            .flatten()
            .all(|b| b.tokens > 0)
    }

    /// Charges a conforming frame.
    pub(crate) fn charge(&mut self, c: Cost) {
        if let Some(b) = &mut self.bits {
            b.tokens -= i128::from(c.bytes) * 8 * NS;
        }
        if let Some(b) = &mut self.packets {
            b.tokens -= i128::from(c.packets) * NS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_at_its_rate_and_stops_at_its_depth() {
        let mut l = Limiter::new(&RateLimit::packets(1000), 0);
        // Depth 64 packets: 64 go at once, the 65th waits.
        for _ in 0..64 {
            assert!(l.conforms(0));
            l.charge(Cost {
                packets: 1,
                bytes: 60,
            });
        }
        assert!(!l.conforms(0));
        // 1 ms later one packet's worth is back.
        assert!(l.conforms(1_000_000));
        l.charge(Cost {
            packets: 1,
            bytes: 60,
        });
        assert!(!l.conforms(1_000_000));
        // A long idle period refills only to the depth.
        assert!(l.conforms(10_000_000_000));
        for _ in 0..64 {
            assert!(l.conforms(10_000_000_000));
            l.charge(Cost {
                packets: 1,
                bytes: 60,
            });
        }
        assert!(!l.conforms(10_000_000_000));
    }
}
