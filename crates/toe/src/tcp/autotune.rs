//! Receive-window auto-tuning: dynamic right-sizing (Fisher, Feng and Weigle's
//! DRS; Linux's `tcp_rcv_space_adjust` and `tcp_rcv_rtt_*` in
//! `net/ipv4/tcp_input.c`).
//!
//! A connection starts with a receive buffer of
//! [`TcpConfig::recv_buffer_initial`](crate::TcpConfig::recv_buffer_initial)
//! and grows it, never past [`TcpConfig::recv_buffer`](crate::TcpConfig::recv_buffer),
//! when the application reads faster than the window lets the sender send:
//!
//! * The receiver estimates the RTT from the data it receives: the timestamp
//!   echoed in full-sized segments (RFC 7323 section 4: a new TSecr, our clock
//!   now less it; smoothed with gain 1/8), and the time the peer takes to fill
//!   the window advertised when the measurement began (an upper bound of the
//!   RTT, so only ever lowering the estimate: the minimum of those samples).
//!   A timestamp sample under one tick of the millisecond clock is dropped
//!   (as is one of a minute or more: a bad echo).
//! * Once an estimate exists, the bytes the application read since the last
//!   measurement are looked at whenever at least one estimated RTT has passed
//!   (when the connection next polls for output, so right after a read). If
//!   they exceed the previous such figure (initially the initial window over 2,
//!   at most ten segments), the capacity becomes twice what was read plus 16
//!   segments, plus twice that again in proportion to how much faster the
//!   reading got (the sender may be in slow start and double every RTT: the
//!   window announced now is used one RTT later), clamped to the maximum.
//! * Growth only: the capacity never shrinks, so growth never pulls the
//!   advertised right edge left (RFC 9293 section 3.8.6.2.2; what remains is
//!   RFC 7323 section 2.4's retraction by less than one unit of the window
//!   scale, from rounding the window field down). When the window left to the
//!   sender is under half the new capacity, the larger window is announced at
//!   once instead of with the next ACK.
//!
//! Memory follows the reader: a connection whose application does not read
//! keeps its initial capacity, and storage is still only taken as bytes arrive.

use super::conn::Conn;
use super::segment::Segment;
use super::seq::Seq;
use crate::config::TcpConfig;
use crate::counters::Counters;
use crate::time::Instant;

/// The smallest initial capacity: below it a connection could not receive
/// enough in one RTT to ever grow.
const MIN_INITIAL: usize = 4096;

/// Timestamp samples at or above this many milliseconds are taken for a bad
/// echo and dropped.
const MAX_TS_SAMPLE_MS: i32 = 60_000;

/// Segments of headroom in the grown window (Linux's `16 * advmss`).
const HEADROOM_SEGS: usize = 16;

/// Segments of the first "read per RTT" figure to beat (Linux's initial
/// `rcvq_space.space`, `TCP_INIT_CWND * advmss`).
const INITIAL_SPACE_SEGS: usize = 10;

/// The receive buffer capacity a connection starts with: `recv_buffer_initial`
/// (at least 4 KiB, and at least four units of the window scale `shift`) when
/// auto-tuning is on and it is below `recv_buffer`; `recv_buffer` otherwise.
pub(crate) fn initial_capacity(t: &TcpConfig, shift: u8) -> usize {
    let floor = MIN_INITIAL.max(4usize << shift.min(14));
    let initial = t.recv_buffer_initial.max(floor);
    if t.recv_autotune && initial < t.recv_buffer {
        initial
    } else {
        t.recv_buffer
    }
}

/// A connection's auto-tuning state (kept small: every connection holds one).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RcvTune {
    /// The receiver's RTT estimate in nanoseconds; 0 until the first sample.
    rtt: u64,
    /// When the window measurement under way began (if `win_on`).
    win_at: Instant,
    /// When the current read measurement began (if `mark_on`).
    mark_at: Instant,
    /// The capacity may grow up to this (`recv_buffer`, or what the window
    /// field can say); nothing is measured once the receive buffer has it.
    max: u32,
    /// Segment size for the headroom (our MSS).
    mss: u32,
    /// The bytes read in the last measurement that read more than the one
    /// before it (Linux's `rcvq_space.space`).
    space: u32,
    /// The TSecr of the last timestamp sample (if `tsecr_on`): one sample per
    /// echoed value.
    last_tsecr: u32,
    /// The window measurement ends when RCV.NXT reaches this (if `win_on`).
    win_end: Seq,
    /// The sequence number of the next byte the application was to read when
    /// the read measurement began (if `mark_on`).
    mark_seq: Seq,
    tsecr_on: bool,
    win_on: bool,
    mark_on: bool,
}

/// The largest window a window field can say (65,535 << 14), which also keeps
/// every byte count here in 32 bits.
const MAX_WINDOW: usize = 65_535 << 14;

impl RcvTune {
    /// Tuning from `initial` capacity up to `t.recv_buffer`, with our MSS `mss`.
    pub fn new(t: &TcpConfig, initial: usize, mss: u16) -> RcvTune {
        let mss = usize::from(mss).max(1);
        let space = (initial / 2).min(INITIAL_SPACE_SEGS * mss).max(1);
        RcvTune {
            rtt: 0,
            win_at: Instant::ZERO,
            mark_at: Instant::ZERO,
            max: t.recv_buffer.min(MAX_WINDOW) as u32,
            mss: mss as u32,
            space: space as u32,
            last_tsecr: 0,
            win_end: Seq(0),
            mark_seq: Seq(0),
            tsecr_on: false,
            win_on: false,
            mark_on: false,
        }
    }

    /// The most the capacity may grow to.
    fn max(&self) -> usize {
        self.max as usize
    }

    /// The receiver's RTT estimate, if it has one.
    #[cfg(test)]
    fn rtt(&self) -> Option<std::time::Duration> {
        (self.rtt > 0).then(|| std::time::Duration::from_nanos(self.rtt))
    }

    /// A timestamp sample (smoothed, gain 1/8).
    fn ts_sample(&mut self, ns: u64) {
        self.rtt = if self.rtt == 0 {
            ns
        } else {
            self.rtt - self.rtt / 8 + ns / 8
        };
    }

    /// A window sample: an upper bound of the RTT, so only the minimum counts.
    fn win_sample(&mut self, ns: u64) {
        let ns = ns.max(1);
        self.rtt = if self.rtt == 0 { ns } else { self.rtt.min(ns) };
    }

    /// The capacity wanted after reading `copied` bytes in a measurement that
    /// beat the previous figure.
    fn target(&self, copied: usize) -> usize {
        let copied = copied as u64;
        let space = u64::from(self.space).max(1);
        let base = copied
            .saturating_mul(2)
            .saturating_add(HEADROOM_SEGS as u64 * u64::from(self.mss));
        let grow = base.saturating_mul(copied.saturating_sub(space)) / space;
        let want = base.saturating_add(grow.saturating_mul(2));
        usize::try_from(want).unwrap_or(usize::MAX).min(self.max())
    }
}

impl Conn {
    /// Data arrived (after RCV.NXT moved): RTT samples for auto-tuning.
    pub(super) fn rcv_rtt_measure(&mut self, now: Instant, seg: &Segment<'_>) {
        if seg.data_len() == 0 || self.rx.capacity() >= self.tune.max() {
            return;
        }
        let ts_now = self.ts_now(now);
        let Some(rcv) = self.state.rcv() else {
            return;
        };
        let t = &mut self.tune;
        if let Some((_, tsecr)) = seg.opts.timestamps.filter(|_| rcv.ts_ok)
            && !(t.tsecr_on && t.last_tsecr == tsecr)
        {
            (t.tsecr_on, t.last_tsecr) = (true, tsecr);
            // Only full-sized segments: a small one may answer an old ACK.
            let ms = ts_now.wrapping_sub(tsecr) as i32;
            if seg.data_len() >= rcv.seg_max && ms > 0 && ms < MAX_TS_SAMPLE_MS {
                t.ts_sample(ms.unsigned_abs() as u64 * 1_000_000);
            }
        }
        if t.win_on && rcv.nxt >= t.win_end {
            t.win_sample(now.saturating_duration_since(t.win_at).as_nanos() as u64);
            t.win_on = false;
        }
        if !t.win_on {
            let wnd = rcv.adv_right.since(rcv.nxt);
            (t.win_on, t.win_end, t.win_at) = (wnd > 0, rcv.nxt.plus(wnd), now);
        }
    }

    /// Whether output may measure or grow the buffer ([`Conn::rcv_space_adjust`]
    /// does something): false with no RTT estimate yet, or fully grown.
    pub(crate) fn rcv_space_measures(&self) -> bool {
        self.tune.rtt != 0 && self.rx.capacity() < self.tune.max()
    }

    /// Before output: if an RTT estimate has passed since the last
    /// measurement, compare what the application read in it with the last
    /// figure and grow the receive buffer (see the module docs).
    pub(super) fn rcv_space_adjust(&mut self, now: Instant, c: &mut Counters) {
        let t = &self.tune;
        if t.rtt == 0 || self.rx.capacity() >= t.max() {
            return;
        }
        let Some(rcv) = self.state.rcv() else {
            return;
        };
        let copied_seq = rcv.nxt.minus(self.rx.len());
        let t = &mut self.tune;
        // Without window scaling the window cannot say more than 64 KiB.
        t.max = t.max.min(65_535u32 << rcv.shift.min(14));
        let started = t.mark_on;
        let (seq, at) = (t.mark_seq, t.mark_at);
        if started && now.saturating_duration_since(at).as_nanos() < u128::from(t.rtt) {
            return;
        }
        (t.mark_on, t.mark_seq, t.mark_at) = (true, copied_seq, now);
        let copied = copied_seq.since(seq);
        if !started || copied <= t.space as usize {
            return;
        }
        let want = t.target(copied);
        t.space = copied.min(MAX_WINDOW) as u32;
        if want > self.rx.capacity() {
            self.rx.set_capacity(want);
            c.tcp_rcvbuf_grown += 1;
            self.maybe_window_update();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(initial: usize, max: usize, on: bool) -> TcpConfig {
        TcpConfig {
            recv_buffer_initial: initial,
            recv_buffer: max,
            recv_autotune: on,
            ..TcpConfig::default()
        }
    }

    #[test]
    fn initial_capacity_falls_back_to_the_fixed_buffer() {
        assert_eq!(initial_capacity(&cfg(64 << 10, 4 << 20, true), 7), 64 << 10);
        assert_eq!(initial_capacity(&cfg(64 << 10, 4 << 20, false), 7), 4 << 20);
        assert_eq!(initial_capacity(&cfg(8 << 20, 4 << 20, true), 7), 4 << 20);
        // Too small to ever grow: raised to the floor, or to what the scale can say.
        assert_eq!(initial_capacity(&cfg(0, 4 << 20, true), 0), 4096);
        assert_eq!(initial_capacity(&cfg(0, 1 << 30, true), 14), 4 << 14);
    }

    #[test]
    fn samples_smooth_timestamps_and_keep_the_least_window_time() {
        let mut t = RcvTune::new(&cfg(64 << 10, 4 << 20, true), 64 << 10, 1460);
        assert_eq!(t.rtt(), None);
        t.ts_sample(80_000_000);
        assert_eq!(t.rtt, 80_000_000);
        t.ts_sample(0);
        assert_eq!(t.rtt, 70_000_000);
        t.win_sample(90_000_000);
        assert_eq!(t.rtt, 70_000_000);
        t.win_sample(20_000_000);
        assert_eq!(t.rtt, 20_000_000);
    }

    #[test]
    fn the_target_is_twice_the_rate_plus_headroom_and_growth() {
        let mut t = RcvTune::new(&cfg(64 << 10, 4 << 20, true), 64 << 10, 1000);
        assert_eq!(t.space, 10_000);
        // Twice as much as last time: 2 * 20000 + 16000 = 56000, plus twice
        // that again (the rate doubled).
        assert_eq!(t.target(20_000), 56_000 * 3);
        t.space = 100_000;
        assert_eq!(t.target(100_000), 216_000);
        // Clamped to the maximum.
        assert_eq!(t.target(3 << 20), 4 << 20);
        // No overflow on absurd figures.
        t.space = 1;
        assert_eq!(t.target(usize::MAX / 2), 4 << 20);
    }

    #[test]
    fn a_ring_grows_its_capacity_but_never_shrinks_it() {
        let mut r = super::super::ring::Ring::new(8);
        assert_eq!(r.push(b"0123456789"), 8);
        r.set_capacity(16);
        assert_eq!((r.capacity(), r.free()), (16, 8));
        assert_eq!(r.push(b"abcdefghij"), 8);
        r.set_capacity(4);
        assert_eq!((r.capacity(), r.len(), r.free()), (16, 16, 0));
        let mut out = [0u8; 16];
        assert_eq!(r.pop(&mut out), 16);
        assert_eq!(&out, b"01234567abcdefgh");
    }
}
