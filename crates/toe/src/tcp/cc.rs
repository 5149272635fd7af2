//! Congestion control: NewReno window growth (RFC 5681 section 3.1, with
//! appropriate byte counting per RFC 3465) and CUBIC (RFC 9438).
//!
//! Every acknowledged byte counts, as in Linux's `tcp_slow_start`: slow start
//! grows cwnd by the bytes an ACK covers, up to ssthresh, and what is left over
//! goes to congestion avoidance. RFC 3465's per-ACK limit L = 2 SMSS is not
//! applied: with GRO at the peer one ACK covers a whole burst (a stretch ACK),
//! and L would turn slow start's doubling per round trip into a few percent.
//!
//! This module decides how the window grows on ACKs and what ssthresh becomes on
//! a congestion event; *when* there is a congestion event, and fast recovery
//! itself (RFC 6675 / RFC 6582), are the connection's. The initial window is
//! RFC 6928's `min(10 * SMSS, max(2 * SMSS, 14600))`.

use crate::time::Instant;
use std::time::Duration;

/// Which congestion control a connection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CongestionControl {
    /// RFC 5681 slow start and congestion avoidance.
    NewReno,
    /// RFC 9438 CUBIC (the default, as in Linux).
    #[default]
    Cubic,
}

/// CUBIC's constant C (RFC 9438 section 4.1), in segments per second cubed.
const C: f64 = 0.4;
/// CUBIC's multiplicative decrease factor (RFC 9438 section 4.6).
const BETA: f64 = 0.7;

#[derive(Debug, Clone, Default)]
struct Cubic {
    /// W_max in segments.
    w_max: f64,
    /// K in seconds.
    k: f64,
    /// Start of the current congestion avoidance epoch.
    epoch: Option<Instant>,
    /// The Reno-friendly estimate W_est, in segments.
    w_est: f64,
    /// Fractional segments of growth not yet added to cwnd.
    carry: f64,
}

/// Equal when every field is bit for bit (a NaN equals itself, 0.0 and
/// -0.0 differ): what a debug build's check that a step changed nothing
/// compares.
impl PartialEq for Cubic {
    fn eq(&self, o: &Cubic) -> bool {
        let bits = |c: &Cubic| [c.w_max, c.k, c.w_est, c.carry].map(f64::to_bits);
        self.epoch == o.epoch && bits(self) == bits(o)
    }
}

/// The congestion window and slow start threshold.
#[derive(Debug, Clone, PartialEq)]
pub struct Congestion {
    algo: CongestionControl,
    cwnd: usize,
    ssthresh: usize,
    mss: usize,
    /// Bytes acknowledged in congestion avoidance since cwnd last grew (NewReno).
    bytes_acked: usize,
    cubic: Cubic,
}

impl Congestion {
    /// The initial window for segments of `mss` bytes (RFC 6928), ssthresh unbounded.
    pub fn new(algo: CongestionControl, mss: usize) -> Congestion {
        let mss = mss.max(1);
        Congestion {
            algo,
            cwnd: (10 * mss).min((2 * mss).max(14_600)),
            ssthresh: usize::MAX,
            mss,
            bytes_acked: 0,
            cubic: Cubic::default(),
        }
    }

    /// cwnd in bytes.
    pub fn cwnd(&self) -> usize {
        self.cwnd
    }

    /// ssthresh in bytes.
    pub fn ssthresh(&self) -> usize {
        self.ssthresh
    }

    /// Sets cwnd (fast recovery inflates, deflates and restores it).
    pub fn set_cwnd(&mut self, cwnd: usize) {
        self.cwnd = cwnd.max(self.mss);
    }

    /// The segment size changed (a smaller path MTU, RFC 1191 section 6.4):
    /// growth is counted in segments of `mss` bytes from now on. The window in
    /// bytes is kept, as Linux's `tcp_mtu_reduced` keeps it.
    pub fn set_mss(&mut self, mss: usize) {
        self.mss = mss.max(1);
    }

    /// True while in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// Grows the window for `acked` newly acknowledged bytes outside recovery.
    /// `srtt` is the smoothed RTT, used by CUBIC.
    pub fn on_ack(&mut self, now: Instant, acked: usize, srtt: Option<Duration>) {
        if acked == 0 {
            return;
        }
        let mut acked = acked;
        if self.in_slow_start() {
            // Linux's tcp_slow_start: all of it, up to ssthresh; the rest is
            // congestion avoidance's.
            let grown = self.cwnd.saturating_add(acked).min(self.ssthresh);
            acked -= grown.saturating_sub(self.cwnd).min(acked);
            self.cwnd = grown.max(self.cwnd);
            if acked == 0 {
                return;
            }
        }
        match self.algo {
            CongestionControl::NewReno => {
                // Linux's tcp_cong_avoid_ai: one segment per window of bytes
                // acknowledged, several if a stretch ACK covers several windows.
                self.bytes_acked = self.bytes_acked.saturating_add(acked);
                let w = self.cwnd.max(1);
                if self.bytes_acked >= w {
                    let delta = self.bytes_acked / w;
                    self.bytes_acked -= delta * w;
                    self.cwnd = self.cwnd.saturating_add(delta.saturating_mul(self.mss));
                }
            }
            CongestionControl::Cubic => self.cubic_on_ack(now, acked, srtt),
        }
    }

    fn segs(&self, bytes: usize) -> f64 {
        bytes as f64 / self.mss as f64
    }

    /// RFC 9438 section 4.2 to 4.4.
    fn cubic_on_ack(&mut self, now: Instant, acked: usize, srtt: Option<Duration>) {
        let cwnd = self.segs(self.cwnd);
        let c = &mut self.cubic;
        let epoch = *c.epoch.get_or_insert_with(|| {
            // A new epoch after slow start or a loss: if W_max is below cwnd (no loss
            // yet), the plateau is here and now (section 4.2, K = 0).
            if c.w_max < cwnd {
                c.w_max = cwnd;
                c.k = 0.0;
            }
            c.w_est = cwnd;
            now
        });
        let rtt = srtt.unwrap_or(Duration::from_millis(100)).as_secs_f64();
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let w_cubic = |t: f64| C * (t - c.k).powi(3) + c.w_max;
        // Reno-friendly region (section 4.3): alpha = 3 (1 - beta) / (1 + beta).
        let alpha = 3.0 * (1.0 - BETA) / (1.0 + BETA);
        c.w_est += alpha * (acked as f64 / self.mss as f64) / cwnd;
        let next = if w_cubic(t) < c.w_est {
            c.w_est
        } else {
            // Concave and convex regions (section 4.4), target clamped to 1.5 cwnd.
            let target = w_cubic(t + rtt).clamp(cwnd, 1.5 * cwnd);
            cwnd + (target - cwnd) / cwnd * (acked as f64 / self.mss as f64)
        };
        c.carry += (next - cwnd).max(0.0) * self.mss as f64;
        let whole = c.carry.floor();
        c.carry -= whole;
        self.cwnd = self.cwnd.saturating_add(whole as usize);
    }

    /// A congestion event with `flight` bytes outstanding (fast retransmit): sets
    /// ssthresh (RFC 5681 equation 4, or CUBIC's beta with fast convergence,
    /// RFC 9438 sections 4.6 and 4.7) and returns it. The caller sets cwnd.
    pub fn on_congestion(&mut self, flight: usize) -> usize {
        self.ssthresh = match self.algo {
            CongestionControl::NewReno => (flight / 2).max(2 * self.mss),
            CongestionControl::Cubic => {
                let cwnd = self.segs(self.cwnd);
                let c = &mut self.cubic;
                c.w_max = if cwnd < c.w_max {
                    cwnd * (1.0 + BETA) / 2.0
                } else {
                    cwnd
                };
                c.k = (c.w_max * (1.0 - BETA) / C).cbrt();
                c.epoch = None;
                c.carry = 0.0;
                ((self.cwnd as f64 * BETA) as usize).max(2 * self.mss)
            }
        };
        self.bytes_acked = 0;
        self.ssthresh
    }

    /// A reduction proved needless (`tcp::undo`): cwnd and ssthresh back to at
    /// least `cwnd` and `ssthresh` (Linux's `tcp_undo_cwnd_reduction`).
    pub fn undo(&mut self, cwnd: usize, ssthresh: usize) {
        self.cwnd = self.cwnd.max(cwnd);
        self.ssthresh = self.ssthresh.max(ssthresh);
        self.bytes_acked = 0;
        self.cubic.epoch = None;
    }

    /// A retransmission timeout (RFC 5681 equation 4 and section 3.1: cwnd becomes
    /// the loss window, one segment).
    pub fn on_rto(&mut self, flight: usize) {
        self.on_congestion(flight);
        self.cwnd = self.mss;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_window() {
        assert_eq!(
            Congestion::new(CongestionControl::NewReno, 1460).cwnd(),
            14_600
        );
        assert_eq!(
            Congestion::new(CongestionControl::NewReno, 536).cwnd(),
            5_360
        );
        assert_eq!(
            Congestion::new(CongestionControl::NewReno, 9000).cwnd(),
            18_000
        );
    }

    #[test]
    fn reno_slow_start_then_linear() {
        let mut c = Congestion::new(CongestionControl::NewReno, 1000);
        let t = Instant::ZERO;
        c.on_ack(t, 5000, None);
        assert_eq!(c.cwnd(), 15_000); // every byte counts (a stretch ACK)
        c.on_congestion(20_000);
        assert_eq!(c.ssthresh(), 10_000);
        c.set_cwnd(10_000);
        assert!(!c.in_slow_start());
        for _ in 0..10 {
            c.on_ack(t, 1000, None);
        }
        assert_eq!(c.cwnd(), 11_000);
        c.on_rto(8000);
        assert_eq!((c.cwnd(), c.ssthresh()), (1000, 4000));
        // Slow start stops at ssthresh; the rest of a stretch ACK goes to
        // congestion avoidance (3000 to reach 4000, 5000 left: one window and more).
        c.on_ack(t, 8000, None);
        assert_eq!(c.cwnd(), 5000);
    }

    /// RFC 9438 section 4.2 with the RFC's own constants (not this module's):
    /// after a loss at W_max, the window follows W_cubic(t) = C (t - K)^3 +
    /// W_max with K = cbrt(W_max (1 - beta) / C): concave up to W_max at t = K,
    /// convex beyond it. Driven in virtual time, one window of ACKs (one per
    /// MSS, spread over the round trip) per 100 ms round trip, long enough
    /// that the Reno-friendly estimate (section 4.3) stays below the curve.
    #[test]
    fn cubic_window_follows_the_rfc_9438_curve() {
        let (c_rfc, beta_rfc) = (0.4f64, 0.7f64);
        let mss = 1000;
        let w_max = 100.0;
        let k = (w_max * (1.0 - beta_rfc) / c_rfc).cbrt();
        let w_cubic = |t: f64| c_rfc * (t - k).powi(3) + w_max;
        let mut cc = Congestion::new(CongestionControl::Cubic, mss);
        cc.set_cwnd(100 * mss);
        let ss = cc.on_congestion(100 * mss);
        assert_eq!(ss, 70 * mss);
        cc.set_cwnd(ss);
        let rtt = Duration::from_millis(100);
        let start = Instant::ZERO + Duration::from_secs(1);
        let mut now = start;
        let mut at_k = None;
        let mut worst: f64 = 0.0;
        while now < start + Duration::from_secs_f64(k + 1.0) {
            let t = (now - start).as_secs_f64();
            let w = cc.cwnd() as f64 / mss as f64;
            // The window at the start of each round trip, against the curve.
            worst = worst.max((w - w_cubic(t)).abs());
            if at_k.is_none() && t >= k {
                at_k = Some(w);
            }
            let n = cc.cwnd() / mss;
            for i in 0..n {
                cc.on_ack(now + rtt * i as u32 / n as u32, mss, Some(rtt));
            }
            now += rtt;
        }
        // Within a few segments of the curve all along (the RFC aims one
        // round trip ahead, at W_cubic(t + RTT), and whole bytes are added).
        assert!(worst < 3.0, "off the curve by {worst} segments");
        let at_k = at_k.unwrap();
        assert!((at_k - w_max).abs() < 3.0, "W(K) = {at_k}, W_max = {w_max}");
        // Beyond K the window grows past W_max (the convex region).
        for _ in 0..10 {
            let n = cc.cwnd() / mss;
            for i in 0..n {
                cc.on_ack(now + rtt * i as u32 / n as u32, mss, Some(rtt));
            }
            now += rtt;
        }
        let t = (now - start).as_secs_f64();
        let w = cc.cwnd() as f64 / mss as f64;
        assert!(w > w_max + 1.0, "W({t}) = {w}");
        assert!(
            (w - w_cubic(t)).abs() < 3.0,
            "W({t}) = {w} vs {}",
            w_cubic(t)
        );
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows() {
        let mut c = Congestion::new(CongestionControl::Cubic, 1000);
        c.set_cwnd(100_000);
        let ss = c.on_congestion(100_000);
        assert_eq!(ss, 70_000);
        c.set_cwnd(ss);
        let srtt = Some(Duration::from_millis(10));
        let mut t = Instant::ZERO;
        // One cwnd of ACKs per RTT for a while: the window climbs back toward W_max.
        for _ in 0..200 {
            let w = c.cwnd();
            for _ in 0..w / 1000 {
                c.on_ack(t, 1000, srtt);
            }
            t += Duration::from_millis(10);
        }
        assert!(c.cwnd() > 95_000, "{}", c.cwnd());
        // Fast convergence: a second loss below W_max lowers W_max further.
        c.set_cwnd(80_000);
        c.on_congestion(80_000);
        assert!(c.cubic.w_max < 80.0);
    }
}
