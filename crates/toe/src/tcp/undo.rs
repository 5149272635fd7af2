//! Undo of a congestion response that proved needless, as Linux's `tcp_undo_*`
//! do: a fast retransmission or a retransmission timeout whose retransmissions
//! were all reported needless by D-SACK (RFC 2883 section 5, RFC 3708), or whose
//! original segments the peer acknowledged (a timestamp echo older than the
//! episode's first retransmission: Eifel detection, RFC 3522). In fast recovery
//! the echo counts once every range retransmitted in the episode is below
//! SND.UNA, as in Linux's `tcp_try_undo_partial`: the holes were filled by
//! delayed originals, not by the retransmissions, so a reordered path gets its
//! window back within the round trip instead of after the D-SACKs. The window and
//! ssthresh go back to what they were before the episode (cwnd at least its old
//! value, ssthresh at least `max(ssthresh, 3/4 cwnd)`, Linux's
//! `tcp_current_ssthresh`), recovery ends, and sending resumes with new data
//! (SND.NXT back at SND.MAX, RFC 4015 section 4's response).
//!
//! RACK's reordering window widens on the same D-SACKs (`tcp::rack`,
//! RFC 8985 section 6.2 step 4), so the same reordering does not trigger the
//! next episode.

use super::seq::Seq;
use super::state::Snd;

/// One congestion episode that may still be undone.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Undo {
    /// An episode is open.
    active: bool,
    prior_cwnd: usize,
    prior_ssthresh: usize,
    /// Segments retransmitted in the episode not yet reported needless.
    retrans: u32,
    /// Some were retransmitted (so that a count back at zero means something).
    any_retrans: bool,
    /// The highest sequence retransmitted in the episode (end of the range).
    rtx_high: Seq,
    /// SND.UNA when it began: D-SACKs below it are about older data.
    marker: Seq,
    /// The episode is over once SND.UNA reaches this (a window past its
    /// recovery point): late reports no longer say anything about it.
    end: Seq,
    /// Our timestamp clock at its first retransmission (Linux's retrans_stamp).
    first_rtx_ts: Option<u32>,
}

impl Undo {
    /// No episode is open: an ACK has nothing to judge.
    pub(crate) fn idle(&self) -> bool {
        !self.active
    }
}

impl Snd {
    /// A fast retransmission or a first retransmission timeout begins an
    /// episode (call before cwnd and ssthresh are cut). A timeout during fast
    /// recovery continues that episode, with the values from before it.
    pub(crate) fn undo_begin(&mut self, rto: bool) {
        if rto && (self.retries > 1 || self.recovery.is_some()) && self.undo.active {
            return;
        }
        let cwnd = self.cc.cwnd();
        let out = self.outstanding();
        self.undo = Undo {
            active: true,
            prior_cwnd: cwnd,
            prior_ssthresh: self.cc.ssthresh().max(cwnd / 2 + cwnd / 4),
            retrans: 0,
            any_retrans: false,
            rtx_high: self.una,
            marker: self.una,
            end: self.max.plus(out),
            first_rtx_ts: None,
        };
    }

    /// `segs` segments ending at `end` were retransmitted at our timestamp
    /// clock `ts_now`.
    pub(crate) fn undo_on_retransmit(&mut self, segs: usize, end: Seq, ts_now: u32) {
        let u = &mut self.undo;
        if !u.active {
            return;
        }
        u.retrans = u.retrans.saturating_add(segs as u32);
        u.any_retrans = true;
        u.rtx_high = u.rtx_high.max(end);
        u.first_rtx_ts.get_or_insert(ts_now);
    }

    /// An ACK arrived: `dsack` is its D-SACK block, `tsecr` its timestamp echo
    /// (with timestamps on), `una_moved` whether it acknowledged new data.
    /// Undoes the episode if this shows it needless.
    pub(crate) fn undo_on_ack(
        &mut self,
        dsack: Option<(Seq, Seq)>,
        tsecr: Option<u32>,
        una_moved: bool,
    ) -> bool {
        if let Some(rec) = &mut self.recovery {
            rec.hold = false;
        }
        let u = &mut self.undo;
        if !u.active {
            return false;
        }
        if self.una >= u.end {
            u.active = false;
            return false;
        }
        if let Some((l, r)) = dsack
            && l >= u.marker
        {
            let segs = r.since(l).div_ceil(self.mss.max(1)).max(1);
            u.retrans = u.retrans.saturating_sub(segs as u32);
        }
        let all_dsacked = u.any_retrans && u.retrans == 0;
        // Eifel: an ACK of new data echoing a timestamp older than the first
        // retransmission was sent for an original. In fast recovery only once
        // no retransmission is left above SND.UNA (Linux's partial undo):
        // before that, the echo may be of an original while a retransmission
        // still repairs a real loss further on.
        let delayed = una_moved
            && u.first_rtx_ts
                .zip(tsecr)
                .is_some_and(|(first, e)| e != 0 && (e.wrapping_sub(first) as i32) < 0);
        let eifel = delayed && (self.recovery.is_none() || self.una >= u.rtx_high);
        if !(all_dsacked || eifel) {
            // Linux's partial undo with retransmissions still out: the hole was
            // filled by a delayed original, so the reordering is deeper than
            // RACK allowed for; no more is marked lost or retransmitted on this
            // ACK (the marks made from the same reordering would be spurious too).
            if let Some(rec) = &mut self.recovery {
                rec.hold = delayed;
            }
            return false;
        }
        let (cwnd, ssthresh) = (u.prior_cwnd, u.prior_ssthresh);
        u.active = false;
        self.cc.undo(cwnd, ssthresh);
        self.recovery = None;
        self.dupacks = 0;
        self.nxt = self.max;
        self.rack.unmark_lost();
        true
    }
}
