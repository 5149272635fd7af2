//! SYN cookies (RFC 4987 section 3.6), used when a listener's SYN queue is full:
//! the SYN-ACK's ISN encodes what the connection needs, and no state is kept until
//! the peer's ACK returns it.
//!
//! The encoding is Linux's (`net/ipv4/syncookies.c`):
//!
//! ```text
//! ISN = H1(tuple) + SEG.SEQ(SYN) + (t << 24) + ((H2(tuple, t) + mss_index) mod 2^24)
//! ```
//!
//! with `t` a counter of 64-second slots (8 bits), `H1` and `H2` SipHash-2-4 keyed
//! with 128 secret bits, and `mss_index` the largest entry of a four-entry MSS table
//! not above the peer's MSS. A returning ACK is valid if `ACK - 1` decodes to a slot
//! at most [`MAX_AGE`] old and an index inside the table: an attacker must guess 24
//! keyed-hash bits per tuple.
//!
//! With timestamps, the SYN's other options travel in the low 6 bits of our TSval,
//! echoed back in the ACK's TSecr (again as Linux does): bits 0 to 3 the peer's
//! window scale (15: none), bit 4 SACK-permitted. Without timestamps they are lost:
//! the connection then runs without window scaling and SACK, with the MSS rounded
//! down to the table (RFC 4987 section 3.6 lists these costs).

use crate::rng::{put_addr, siphash24};
use crate::time::Instant;
use std::net::{IpAddr, SocketAddr};

/// The MSS values a cookie can carry, IPv4 (Linux's `msstab`).
const MSS_V4: [u16; 4] = [536, 1300, 1440, 1460];
/// The MSS values a cookie can carry, IPv6 (Linux's `msstab` for IPv6).
const MSS_V6: [u16; 4] = [1220, 1420, 1440, 8940];
/// Slots a cookie stays valid after the one it was made in (so 128 to 192 s).
pub(crate) const MAX_AGE: u32 = 2;
/// Seconds per time slot (`t`).
const SLOT_SECS: u64 = 64;
/// TSval bits that carry options.
pub(crate) const TS_OPT_MASK: u32 = 0x3f;
/// "No window scale" in the TSval's option bits.
const TS_NO_WSCALE: u32 = 0xf;
const TS_SACK: u32 = 0x10;

/// What a validated cookie gives back about the peer's SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Decoded {
    /// The peer's MSS, rounded down to the table.
    pub mss: u16,
    /// The peer's window scale, if known and offered.
    pub window_scale: Option<u8>,
    /// The peer offered SACK (only known with timestamps).
    pub sack_permitted: bool,
}

/// The keyed cookie functions of one engine.
#[derive(Debug, Clone)]
pub(crate) struct SynCookies {
    k0: u64,
    k1: u64,
}

fn table(ip: IpAddr) -> &'static [u16; 4] {
    match ip {
        IpAddr::V4(_) => &MSS_V4,
        IpAddr::V6(_) => &MSS_V6,
    }
}

fn slot(now: Instant) -> u32 {
    ((now.as_nanos() / 1_000_000_000 / SLOT_SECS) & 0xff) as u32
}

impl SynCookies {
    /// Cookie functions keyed with `k0`, `k1`.
    pub fn new(k0: u64, k1: u64) -> SynCookies {
        SynCookies { k0, k1 }
    }

    /// SipHash-2-4 of the tag byte, the 4-tuple (addresses, big-endian
    /// ports) and `t` (little-endian), over one fixed buffer.
    fn hash(&self, tag: u8, local: SocketAddr, remote: SocketAddr, t: u32) -> u32 {
        let mut buf = [0u8; 41];
        buf[0] = tag;
        let n = put_addr(&mut buf, 1, local);
        let n = put_addr(&mut buf, n, remote);
        if let Some(d) = buf.get_mut(n..n + 4) {
            d.copy_from_slice(&t.to_le_bytes());
        }
        siphash24(self.k0, self.k1, buf.get(..n + 4).unwrap_or_default()) as u32
    }

    /// The ISN for a SYN from `remote` to `local` with sequence number `seq` and
    /// MSS option `mss` (the family default when absent), at `now`.
    pub fn isn(
        &self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        mss: u16,
    ) -> u32 {
        let tab = table(local.ip());
        let index = tab.iter().rposition(|&m| m <= mss).unwrap_or(0) as u32;
        let t = slot(now);
        let h1 = self.hash(1, local, remote, 0);
        let h2 = self.hash(2, local, remote, t);
        h1.wrapping_add(seq)
            .wrapping_add(t << 24)
            .wrapping_add(h2.wrapping_add(index) & 0x00ff_ffff)
    }

    /// Checks the cookie `isn` (the ACK's acknowledgement number less one) for a
    /// SYN that had sequence number `seq` (the ACK's sequence number less one).
    pub fn check(
        &self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        isn: u32,
    ) -> Option<u16> {
        let h1 = self.hash(1, local, remote, 0);
        let c = isn.wrapping_sub(h1).wrapping_sub(seq);
        let t = c >> 24;
        let age = slot(now).wrapping_sub(t) & 0xff;
        if age > MAX_AGE {
            return None;
        }
        let h2 = self.hash(2, local, remote, t);
        let index = c.wrapping_sub(h2) & 0x00ff_ffff;
        table(local.ip()).get(index as usize).copied()
    }

    /// A per-tuple timestamp offset for cookie connections: the TSval of the
    /// SYN-ACK must be reproducible when the ACK arrives.
    pub fn ts_offset(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.hash(3, local, remote, 0)
    }
}

/// Our TSval `ts` with the SYN's options in its low bits, not above `ts`.
pub(crate) fn ts_encode(ts: u32, window_scale: Option<u8>, sack: bool) -> u32 {
    let mut opts = window_scale.map_or(TS_NO_WSCALE, |w| u32::from(w.min(14)));
    if sack {
        opts |= TS_SACK;
    }
    let v = (ts & !TS_OPT_MASK) | opts;
    if v > ts {
        v.wrapping_sub(TS_OPT_MASK + 1)
    } else {
        v
    }
}

/// The options in an echoed TSval (`tsecr`), with the MSS from the cookie.
pub(crate) fn ts_decode(tsecr: u32, mss: u16) -> Decoded {
    let w = tsecr & TS_NO_WSCALE;
    Decoded {
        mss,
        window_scale: (w != TS_NO_WSCALE).then_some(w as u8),
        sack_permitted: tsecr & TS_SACK != 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "10.0.0.2:80".parse().unwrap_or_else(|_| unreachable!()),
            "198.18.3.4:40000"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        )
    }

    /// The keyed hash is what the streaming `siphasher` computes over the
    /// same writes (tag, addresses and ports, slot), IPv4 and IPv6.
    #[test]
    fn hash_matches_streaming_siphash() {
        use core::hash::Hasher;
        use siphasher::sip::SipHasher24;
        let c = SynCookies::new(0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210);
        let v6: (SocketAddr, SocketAddr) = (
            "[2001:db8::1]:443"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
            "[2001:db8::2]:50000"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        for (l, r) in [addrs(), v6] {
            for (tag, t) in [(1u8, 0u32), (2, 77), (3, 0xdead_beef)] {
                let mut h = SipHasher24::new_with_keys(c.k0, c.k1);
                h.write_u8(tag);
                for a in [l, r] {
                    match a.ip() {
                        IpAddr::V4(ip) => h.write(&ip.octets()),
                        IpAddr::V6(ip) => h.write(&ip.octets()),
                    }
                    h.write(&a.port().to_be_bytes());
                }
                h.write_u32(t);
                assert_eq!(c.hash(tag, l, r, t), h.finish() as u32);
            }
        }
    }

    #[test]
    fn round_trip_mss_and_age() {
        let c = SynCookies::new(1, 2);
        let (l, r) = addrs();
        let t0 = Instant::from_millis(5_000);
        for (mss, want) in [(1460, 1460), (1400, 1300), (9000, 1460), (100, 536)] {
            let isn = c.isn(t0, l, r, 777, mss);
            assert_eq!(c.check(t0, l, r, 777, isn), Some(want));
            // Still valid two slots later, not three.
            let later = Instant::from_millis(5_000 + 2 * 64_000);
            assert_eq!(c.check(later, l, r, 777, isn), Some(want));
            let too_late = Instant::from_millis(5_000 + 3 * 64_000);
            assert_eq!(c.check(too_late, l, r, 777, isn), None);
        }
    }

    #[test]
    fn wrong_tuple_seq_or_key_fails() {
        let c = SynCookies::new(1, 2);
        let (l, r) = addrs();
        let t0 = Instant::from_millis(1);
        let isn = c.isn(t0, l, r, 777, 1460);
        let other: SocketAddr = "198.18.3.4:40001"
            .parse()
            .unwrap_or_else(|_| unreachable!());
        assert_eq!(c.check(t0, l, other, 777, isn), None);
        // The sequence number is added in linearly (as in Linux): one far off
        // fails; a near one only moves the MSS index, which gains nothing to
        // someone who must have seen the cookie anyway.
        assert_eq!(c.check(t0, l, r, 777 + 1_000_000, isn), None);
        assert_eq!(SynCookies::new(1, 3).check(t0, l, r, 777, isn), None);
        // Guessing: of 100,000 random cookies almost none pass (2 in 2^24 each).
        let mut x = 12345u32;
        let hits = (0..100_000)
            .filter(|_| {
                x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                c.check(t0, l, r, 777, x).is_some()
            })
            .count();
        assert!(hits < 5, "{hits}");
    }

    #[test]
    fn timestamp_options() {
        for (w, s) in [
            (Some(7), true),
            (None, false),
            (Some(0), false),
            (None, true),
        ] {
            let ts = ts_encode(1_000_000, w, s);
            assert!(ts <= 1_000_000 && 1_000_000 - ts < 128);
            assert_eq!(
                ts_decode(ts, 1460),
                Decoded {
                    mss: 1460,
                    window_scale: w,
                    sack_permitted: s,
                }
            );
        }
    }
}
