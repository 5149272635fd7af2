//! RACK-TLP loss detection (RFC 8985) over the SACK scoreboard.
//!
//! RACK (section 6) remembers when each range of sequence space was last sent
//! and, from the ACKs, which sent range was delivered most recently (RACK.xmit_ts,
//! RACK.end_seq, RACK.rtt). A range that is neither acknowledged nor SACKed and was
//! sent before that one is lost once RACK.rtt plus the reordering window
//! (RACK.reo_wnd) has passed since it was sent; until then the reordering timer
//! waits for it. Retransmissions are ranges like any other, so a lost
//! retransmission is found the same way, without the retransmission timeout.
//! RACK.reo_wnd is min_RTT / 4, times a multiplier raised by D-SACKs (section
//! 6.2 step 4) or by ACKs whose timestamp echo shows the original, not the
//! retransmission, arrived (RFC 3522's Eifel test), capped by SRTT. One
//! departure: the step is a quarter of max(min_RTT, SRTT / 4), not of min_RTT.
//! Where the reordering is what makes min_RTT small (segments that skip a queue
//! or take a faster path, as netem's `reorder` does, where min_RTT is a small
//! fraction of SRTT) the RFC's window can never grow past a few hundred
//! microseconds, every reordered segment marks the half window sent before it
//! lost, and the sender never leaves recovery (the `delay 5 ms, reorder 10 %`
//! cells of `tests/system_impair.rs`'s `issue_16_matrix`, linerate to Linux,
//! beside Linux's own sender). Without reordering seen nothing changes: the
//! window is still zero in recovery or with DupThresh segments SACKed as long
//! as no reordering was seen (a never-retransmitted range delivered below the
//! highest delivered sequence).
//!
//! TLP (section 7): when the sender is neither in recovery nor holding SACKed
//! data, a probe timeout PTO = 2 * SRTT (plus the peer's delayed ACK when one
//! segment is outstanding; capped by the RTO) after the last new data or ACK
//! sends one probe: a segment of new data if the peer's window allows, else the
//! last segment again. Its ACK (or the SACK it provokes) lets RACK repair the
//! tail without a timeout. A retransmitted probe that turns out to have repaired a
//! loss (acknowledged beyond it, without a D-SACK) reduces cwnd once (section 7.4).
//!
//! Ranges are kept per transmission (one per call of `poll_output`, so a GSO
//! super-segment is one range), in sequence order, at most [`MAX_RANGES`] per
//! connection: past that, new data is merged into the last range and a
//! retransmission takes whole ranges, either way only coarser timing.

use super::sack::{DUP_THRESH, Scoreboard};
use super::seq::Seq;
use super::state::{Recovery, Snd};
use crate::counters::Counters;
use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Most transmission ranges remembered per connection.
pub(crate) const MAX_RANGES: usize = 256;
/// Added to 2 * SRTT for the PTO (Linux's TCP_TIMEOUT_MIN): keeps probes from
/// racing ACKs when the RTT is far below the timestamp clock's millisecond.
const PTO_SLACK: Duration = Duration::from_millis(2);
/// Recoveries a raised reordering window outlives (RFC 8985 section 6.2 step 4).
const REO_WND_PERSIST: u32 = 16;
/// Largest multiplier of the window's step (Linux's 0xFF; the window is capped
/// by SRTT anyway).
const REO_WND_MULT_MAX: u32 = 255;

/// One transmission of `[start, end)` (data and FIN).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Xmit {
    start: Seq,
    end: Seq,
    /// When it was (last) sent.
    at: Instant,
    /// Transmission count at that time: orders transmissions made at the same
    /// instant (RACK_sent_after's tie-break, without confusing a retransmission
    /// with the original sent in the same tick).
    order: u64,
    /// The TSval it carried.
    tsval: u32,
    /// Sent more than once.
    retrans: bool,
    /// Deemed lost, not retransmitted since.
    lost: bool,
}

/// The most recently sent delivered range: RACK.xmit_ts and RACK.end_seq.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Latest {
    order: u64,
    end: Seq,
}

/// Transmissions kept inline before the log moves to the heap: a short
/// exchange (a request or a response, then the FIN) never has more ranges
/// outstanding, so a connection that only does that allocates nothing here.
const INLINE_RANGES: usize = 2;

/// An empty slot of the inline log.
const NO_XMIT: Xmit = Xmit {
    start: Seq(0),
    end: Seq(0),
    at: Instant::ZERO,
    order: 0,
    tsval: 0,
    retrans: false,
    lost: false,
};

/// The transmission log, in sequence order: a double-ended queue whose first
/// [`INLINE_RANGES`] entries live inline. Once it outgrows them it moves to a
/// `VecDeque` and stays there (a connection with that many ranges in flight
/// is likely to have them again).
#[derive(Debug, Clone, PartialEq)]
enum XmitLog {
    Inline { n: u8, x: [Xmit; INLINE_RANGES] },
    Heap(VecDeque<Xmit>),
}

impl Default for XmitLog {
    fn default() -> XmitLog {
        XmitLog::Inline {
            n: 0,
            x: [NO_XMIT; INLINE_RANGES],
        }
    }
}

impl XmitLog {
    /// The entries as at most two slices, in order.
    fn as_slices(&self) -> (&[Xmit], &[Xmit]) {
        match self {
            XmitLog::Inline { n, x } => (x.get(..usize::from(*n)).unwrap_or_default(), &[]),
            XmitLog::Heap(d) => d.as_slices(),
        }
    }

    fn as_mut_slices(&mut self) -> (&mut [Xmit], &mut [Xmit]) {
        match self {
            XmitLog::Inline { n, x } => (x.get_mut(..usize::from(*n)).unwrap_or_default(), &mut []),
            XmitLog::Heap(d) => d.as_mut_slices(),
        }
    }

    fn len(&self) -> usize {
        match self {
            XmitLog::Inline { n, .. } => usize::from(*n),
            XmitLog::Heap(d) => d.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Xmit> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Xmit> {
        let (a, b) = self.as_mut_slices();
        a.iter_mut().chain(b)
    }

    fn get(&self, i: usize) -> Option<&Xmit> {
        let (a, b) = self.as_slices();
        a.get(i).or_else(|| b.get(i.checked_sub(a.len())?))
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut Xmit> {
        let (a, b) = self.as_mut_slices();
        let k = a.len();
        match a.get_mut(i) {
            Some(x) => Some(x),
            None => b.get_mut(i.checked_sub(k)?),
        }
    }

    fn front(&self) -> Option<&Xmit> {
        self.get(0)
    }

    fn front_mut(&mut self) -> Option<&mut Xmit> {
        self.get_mut(0)
    }

    fn back(&self) -> Option<&Xmit> {
        self.get(self.len().checked_sub(1)?)
    }

    fn back_mut(&mut self) -> Option<&mut Xmit> {
        self.get_mut(self.len().checked_sub(1)?)
    }

    /// The index of the first entry for which `pred` is false (entries for
    /// which it holds come first).
    fn partition_point(&self, pred: impl Fn(&Xmit) -> bool) -> usize {
        match self {
            XmitLog::Inline { .. } => self.as_slices().0.partition_point(pred),
            XmitLog::Heap(d) => d.partition_point(pred),
        }
    }

    fn push_back(&mut self, v: Xmit) {
        let len = self.len();
        self.insert(len, v);
    }

    fn pop_front(&mut self) -> Option<Xmit> {
        match self {
            XmitLog::Inline { n, x } => {
                let live = x.get_mut(..usize::from(*n))?;
                let first = *live.first()?;
                live.rotate_left(1);
                *n -= 1;
                Some(first)
            }
            XmitLog::Heap(d) => d.pop_front(),
        }
    }

    /// Inserts `v` at `i` (at the end if `i` is past it).
    fn insert(&mut self, i: usize, v: Xmit) {
        let i = i.min(self.len());
        if let XmitLog::Inline { n, x } = self
            && usize::from(*n) < INLINE_RANGES
        {
            if let Some(tail) = x.get_mut(i..=usize::from(*n)) {
                if let Some(last) = tail.last_mut() {
                    *last = v;
                }
                tail.rotate_right(1);
                *n += 1;
            }
            return;
        }
        match self {
            XmitLog::Heap(d) => d.insert(i, v),
            XmitLog::Inline { .. } => {
                // Full: the entries move to the heap, for good.
                let mut d = VecDeque::with_capacity(2 * INLINE_RANGES);
                d.extend(self.iter().copied());
                d.insert(i, v);
                *self = XmitLog::Heap(d);
            }
        }
    }

    /// Removes the entries `[i, j)` (clamped to the log).
    fn remove_range(&mut self, i: usize, j: usize) {
        let j = j.min(self.len());
        let i = i.min(j);
        match self {
            XmitLog::Inline { n, x } => {
                if let Some(live) = x.get_mut(i..usize::from(*n)) {
                    live.rotate_left(j - i);
                }
                *n -= (j - i) as u8;
            }
            XmitLog::Heap(d) => {
                d.drain(i..j);
            }
        }
    }
}

/// RACK and TLP state of one connection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rack {
    log: XmitLog,
    order: u64,
    latest: Option<Latest>,
    /// RACK.rtt: the RTT of the most recently sent delivered range.
    rtt: Duration,
    /// RACK.fack: the highest sequence delivered.
    fack: Option<Seq>,
    /// RACK.reordering_seen.
    reordering_seen: bool,
    /// RACK.min_RTT, from ranges that were never retransmitted.
    min_rtt: Option<Duration>,
    reo_wnd_mult: u32,
    reo_wnd_persist: u32,
    /// RACK.dsack_round: one raise of the window per round trip.
    dsack_round: Option<Seq>,
    /// `latest` moved since the last loss detection.
    advanced: bool,
    /// `latest` is a retransmission (detection then runs without SACK blocks).
    by_retrans: bool,
    /// Reordering timer (RFC 8985 section 6.3).
    pub reo_at: Option<Instant>,
    /// Probe timer (RFC 8985 section 7.2).
    pub pto_at: Option<Instant>,
    /// When `pto_at` was last computed (a burst re-arms it once).
    pto_from: Instant,
    /// It was computed for a single segment in flight.
    pto_single: bool,
    /// A probe is to be sent now.
    pub tlp_due: bool,
    /// TLP.end_seq: SND.MAX after the probe, until its outcome is known.
    pub tlp_end: Option<Seq>,
    /// TLP.is_retrans.
    tlp_retrans: bool,
    /// Bytes of new data still to go with the probe (see [`Snd::take_probe`]).
    tlp_more: usize,
}

impl Default for Rack {
    fn default() -> Rack {
        Rack {
            log: XmitLog::default(),
            order: 0,
            latest: None,
            rtt: Duration::ZERO,
            fack: None,
            reordering_seen: false,
            min_rtt: None,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            dsack_round: None,
            advanced: false,
            by_retrans: false,
            reo_at: None,
            pto_at: None,
            pto_from: Instant::ZERO,
            pto_single: false,
            tlp_due: false,
            tlp_end: None,
            tlp_retrans: false,
            tlp_more: 0,
        }
    }
}

/// Un-SACKed bytes of `[s, e)`; `k` is a cursor into `blocks` for calls with
/// ascending, disjoint ranges.
fn unsacked(blocks: &[(Seq, Seq)], k: &mut usize, s: Seq, e: Seq) -> usize {
    while blocks.get(*k).is_some_and(|&(_, be)| be <= s) {
        *k += 1;
    }
    let mut sacked = 0;
    for &(bs, be) in blocks.get(*k..).unwrap_or_default() {
        if bs >= e {
            break;
        }
        sacked += be.min(e).since(bs.max(s));
    }
    e.since(s).saturating_sub(sacked)
}

/// The D-SACK block of an ACK, if its first block is one (RFC 2883 section 4:
/// below the cumulative ACK, or inside the second block).
pub(crate) fn dsack(blocks: &[(u32, u32)], ack: Seq) -> Option<(Seq, Seq)> {
    let &(l, r) = blocks.first()?;
    let (l, r) = (Seq(l), Seq(r));
    if l >= r {
        return None;
    }
    if r <= ack {
        return Some((l, r));
    }
    let &(l2, r2) = blocks.get(1)?;
    (Seq(l2) <= l && r <= Seq(r2)).then_some((l, r))
}

impl Rack {
    /// Records a transmission of `[seq, end)` at `now` carrying `tsval`.
    #[inline]
    pub fn on_send(&mut self, seq: Seq, end: Seq, now: Instant, tsval: u32) {
        // New data right after the previous transmission, in the same instant:
        // one burst, ordered within by sequence like a GSO super-segment.
        if let Some(last) = self.log.back_mut()
            && last.end == seq
            && last.order == self.order
            && last.at == now
            && !last.retrans
            && !last.lost
            && end > seq
        {
            last.end = end;
            return;
        }
        self.on_send_new(seq, end, now, tsval);
    }

    fn on_send_new(&mut self, seq: Seq, end: Seq, now: Instant, tsval: u32) {
        if end <= seq {
            return;
        }
        self.order += 1;
        let x = Xmit {
            start: seq,
            end,
            at: now,
            order: self.order,
            tsval,
            retrans: false,
            lost: false,
        };
        match self.log.back() {
            Some(last) if seq < last.end => self.resend(x),
            _ if self.log.len() >= MAX_RANGES => {
                if let Some(last) = self.log.back_mut() {
                    last.end = end;
                    last.at = now;
                    last.order = x.order;
                    last.tsval = tsval;
                }
            }
            _ => self.log.push_back(x),
        }
    }

    /// A retransmission: the ranges it covers become one, sent now.
    fn resend(&mut self, mut x: Xmit) {
        x.retrans = true;
        let room = self.log.len() + 2 <= MAX_RANGES;
        let mut i = self.log.partition_point(|r| r.end <= x.start);
        if let Some(r) = self.log.get(i).copied()
            && r.start < x.start
        {
            if room {
                self.log.insert(i, Xmit { end: x.start, ..r });
                if let Some(m) = self.log.get_mut(i + 1) {
                    m.start = x.start;
                }
                i += 1;
            } else {
                x.start = r.start;
            }
        }
        let j = self.log.partition_point(|r| r.start < x.end);
        if j > i
            && let Some(r) = self.log.get(j - 1).copied()
            && r.end > x.end
        {
            if room {
                self.log.insert(j, Xmit { start: x.end, ..r });
                if let Some(m) = self.log.get_mut(j - 1) {
                    m.end = x.end;
                }
            } else {
                x.end = r.end;
            }
        }
        let j = self.log.partition_point(|r| r.start < x.end);
        self.log.remove_range(i, j.max(i));
        self.log.insert(i, x);
    }

    /// SND.UNA moved to `una`: the ranges below it are delivered. `sack` is the
    /// scoreboard before pruning (ranges it held were taken when SACKed).
    /// Returns the latest TSval among the retransmissions acknowledged.
    pub fn on_cum_ack(&mut self, una: Seq, sack: &Scoreboard, now: Instant) -> Option<u32> {
        let mut rtx_ts: Option<u32> = None;
        let mut k = 0;
        while let Some(x) = self.log.front().copied() {
            if x.start >= una {
                break;
            }
            let end = x.end.min(una);
            if x.retrans {
                rtx_ts = Some(match rtx_ts {
                    Some(t) if (t.wrapping_sub(x.tsval) as i32) >= 0 => t,
                    _ => x.tsval,
                });
            }
            if sack.is_empty() || unsacked(sack.blocks(), &mut k, x.start, end) > 0 {
                self.delivered(&x, end, now);
            }
            if x.end <= una {
                self.log.pop_front();
            } else {
                if let Some(f) = self.log.front_mut() {
                    f.start = una;
                }
                break;
            }
        }
        rtx_ts
    }

    /// `[l, r)` was SACKed for the first time.
    pub fn on_sacked(&mut self, l: Seq, r: Seq, now: Instant) {
        let mut i = self.log.partition_point(|x| x.end <= l);
        while let Some(x) = self.log.get(i).copied() {
            if x.start >= r {
                break;
            }
            self.delivered(&x, x.end.min(r), now);
            i += 1;
        }
    }

    /// RFC 8985 section 6.2 steps 1 to 3 for a range delivered up to `end`.
    fn delivered(&mut self, x: &Xmit, end: Seq, now: Instant) {
        let rtt = now.saturating_duration_since(x.at);
        // A retransmission acknowledged sooner than min_RTT after it was sent:
        // the original was delivered, so this tells nothing about its send time.
        if x.retrans && self.min_rtt.is_some_and(|m| rtt < m) {
            return;
        }
        if !x.retrans {
            if self.fack.is_some_and(|f| end < f) {
                self.reordering_seen = true;
            }
            self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        }
        self.fack = Some(self.fack.map_or(end, |f| f.max(end)));
        let newer = self
            .latest
            .is_none_or(|l| x.order > l.order || (x.order == l.order && end > l.end));
        if newer {
            self.latest = Some(Latest {
                order: x.order,
                end,
            });
            self.rtt = rtt;
            self.advanced = true;
            self.by_retrans = x.retrans;
        }
    }

    /// RACK.min_RTT.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// RACK.reo_wnd (RFC 8985 section 6.2 step 4, without the D-SACK bookkeeping
    /// done in [`Rack::on_spurious`]), in steps of max(min_RTT, SRTT / 4) / 4
    /// (see the module's docs for why not min_RTT / 4).
    fn reo_wnd(
        &self,
        in_recovery: bool,
        dupthresh_sacked: bool,
        srtt: Option<Duration>,
    ) -> Duration {
        if !self.reordering_seen && (in_recovery || dupthresh_sacked) {
            return Duration::ZERO;
        }
        let Some(min) = self.min_rtt.or(srtt) else {
            return Duration::ZERO;
        };
        let cap = srtt.unwrap_or(min).max(min);
        let base = min.max(cap / 4);
        (base / 4 * self.reo_wnd_mult).min(cap)
    }

    /// RFC 8985 section 6.2 step 5: marks lost every range below `nxt` sent
    /// before the latest delivered one whose time is up; returns the un-SACKed
    /// bytes newly marked and how long the reordering timer must wait for the rest.
    fn detect(
        &mut self,
        now: Instant,
        sack: &Scoreboard,
        nxt: Seq,
        reo: Duration,
    ) -> (usize, Option<Duration>) {
        self.advanced = false;
        let Some(l) = self.latest else {
            return (0, None);
        };
        let blocks = sack.blocks();
        let limit = self.rtt + reo;
        let (mut k, mut lost, mut wait) = (0, 0, None::<Duration>);
        let mut i = 0;
        while let Some(x) = self.log.get(i).copied() {
            if x.start >= nxt {
                break;
            }
            // Sent in the same burst as the latest delivered range and reaching
            // past its end: only the part below was sent before it.
            if x.order == l.order && x.start < l.end && l.end < x.end && self.log.len() < MAX_RANGES
            {
                self.log.insert(i + 1, Xmit { start: l.end, ..x });
                if let Some(m) = self.log.get_mut(i) {
                    m.end = l.end;
                }
                continue;
            }
            i += 1;
            let before = x.order < l.order || (x.order == l.order && x.end <= l.end);
            if !before {
                continue;
            }
            let holes = unsacked(blocks, &mut k, x.start, x.end.min(nxt));
            let Some(m) = self.log.get_mut(i - 1) else {
                break;
            };
            if holes == 0 {
                m.lost = false;
                continue;
            }
            if m.lost {
                continue;
            }
            let elapsed = now.saturating_duration_since(x.at);
            if elapsed >= limit {
                m.lost = true;
                lost += holes;
            } else {
                let left = limit - elapsed;
                wait = Some(wait.map_or(left, |w| w.max(left)));
            }
        }
        (lost, wait)
    }

    /// The first lost hole below `nxt` to retransmit: `(start, end)`.
    pub fn next_lost(&self, sack: &Scoreboard, nxt: Seq) -> Option<(Seq, Seq)> {
        for x in self.log.iter() {
            if x.start >= nxt {
                return None;
            }
            if !x.lost {
                continue;
            }
            let end = x.end.min(nxt);
            let mut s = x.start;
            while let Some(e) = sack.sacked_until(s) {
                s = e;
            }
            if s >= end {
                continue;
            }
            let hole_end = sack.next_sacked_after(s).map_or(end, |b| b.min(end));
            return Some((s, hole_end));
        }
        None
    }

    /// True if a range below `nxt` is marked lost and not retransmitted.
    fn has_lost(&self, nxt: Seq) -> bool {
        self.log
            .iter()
            .take_while(|x| x.start < nxt)
            .any(|x| x.lost)
    }

    /// Bytes in flight (RFC 6675 SetPipe with RACK's marks): sent below `nxt`,
    /// less SACKed, less lost and not retransmitted since.
    pub fn pipe(&self, sack: &Scoreboard, una: Seq, nxt: Seq) -> usize {
        let blocks = sack.blocks();
        let sacked: usize = blocks
            .iter()
            .map(|&(s, e)| e.min(nxt).since(s.max(una)))
            .sum();
        let mut k = 0;
        let mut lost = 0;
        for x in self.log.iter() {
            if x.start >= nxt {
                break;
            }
            if x.lost {
                lost += unsacked(blocks, &mut k, x.start, x.end.min(nxt));
            }
        }
        nxt.since(una).saturating_sub(sacked).saturating_sub(lost)
    }

    /// A retransmission proved spurious (D-SACK, or a timestamp echo older than
    /// the retransmission): widen the reordering window, once per round trip
    /// (RFC 8985 section 6.2 step 4).
    /// It is also reordering seen (as Linux counts a D-SACKed retransmission in
    /// `tcp_check_sack_reordering`): without that, the window stays zero once
    /// DupThresh segments are SACKed, and the widening would not apply.
    pub fn on_spurious(&mut self, nxt: Seq) {
        self.reordering_seen = true;
        if self.dsack_round.is_none() {
            self.dsack_round = Some(nxt);
            self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(REO_WND_MULT_MAX);
            self.reo_wnd_persist = REO_WND_PERSIST;
        }
    }

    /// A congestion response was undone (`tcp::undo`): nothing is taken as lost.
    pub fn unmark_lost(&mut self) {
        for x in self.log.iter_mut() {
            x.lost = false;
        }
        self.reo_at = None;
    }

    /// A retransmission timeout: the sender goes back to SND.UNA and sends
    /// everything again, so nothing is pending here.
    fn on_rto(&mut self) {
        for x in self.log.iter_mut() {
            x.lost = false;
        }
        self.fack = None;
        self.advanced = false;
        self.reo_at = None;
        self.pto_at = None;
        self.tlp_due = false;
        self.tlp_end = None;
    }
}

impl Snd {
    /// Fast recovery begins: cwnd down to the new ssthresh (RFC 6675 section 5
    /// step 4, RFC 5681 equation 4 / RFC 9438), the first lost hole goes at once.
    pub(crate) fn enter_recovery(&mut self, c: &mut Counters) {
        self.undo_begin(false);
        let flight = self.outstanding();
        let ss = self.cc.on_congestion(flight);
        self.cc.set_cwnd(ss);
        self.recovery = Some(Recovery {
            recover: self.max,
            high_rxt: self.una,
            rexmit_first: true,
            hold: false,
            recover_fs: flight,
            prr_delivered: 0,
            prr_out: 0,
            stall_at: None,
        });
        self.timed = None;
        self.rack.pto_at = None;
        c.tcp_fast_retransmits += 1;
    }

    /// Proportional Rate Reduction (RFC 6937, PRR-SSRB; Linux's
    /// `tcp_cwnd_reduction`) at an ACK in SACK recovery that delivered
    /// `delivered` bytes (cumulatively acknowledged or newly SACKed): cwnd
    /// becomes pipe plus what may go now. Without it cwnd drops to ssthresh at
    /// once, and when RACK marks much of the window lost (a reordered segment
    /// SACKed ahead of half a window still on its way) all of it is
    /// retransmitted in one burst before the ACKs that show the originals
    /// arrived; with it, a segment or two per ACK go, as in Linux, and the
    /// first of those ACKs stops the rest (`Recovery::hold`, the undo).
    pub(crate) fn prr_on_ack(&mut self, now: Instant, delivered: usize) {
        if !self.sack_ok {
            return;
        }
        let Some(rec) = &mut self.recovery else {
            return;
        };
        let mss = self.mss.max(1);
        rec.prr_delivered = rec.prr_delivered.saturating_add(delivered);
        let pipe = self.rack.pipe(&self.sack, self.una, self.nxt);
        let ssthresh = self.cc.ssthresh();
        let sndcnt = if pipe > ssthresh {
            // Proportional part: ceil(prr_delivered * ssthresh / RecoverFS) - prr_out.
            let fs = rec.recover_fs.max(1) as u128;
            let want = (rec.prr_delivered as u128 * ssthresh as u128).div_ceil(fs);
            usize::try_from(want)
                .unwrap_or(usize::MAX)
                .saturating_sub(rec.prr_out)
        } else {
            // Slow-start reduction bound.
            let limit = rec
                .prr_delivered
                .saturating_sub(rec.prr_out)
                .max(delivered)
                .saturating_add(mss);
            (ssthresh - pipe).min(limit)
        };
        self.cc.set_cwnd(pipe.saturating_add(sndcnt).max(mss));
        rec.stall_at = None;
        if pipe.saturating_add(sndcnt) < ssthresh {
            let wait = self.rtt.srtt().unwrap_or(Duration::from_millis(1));
            let at = now + wait;
            rec.stall_at = Some(at);
            self.rack.reo_at = Some(self.rack.reo_at.map_or(at, |t| t.min(at)));
        }
    }

    /// Bytes sent in recovery (PRR's prr_out).
    pub(crate) fn prr_sent(&mut self, len: usize) {
        if let Some(rec) = &mut self.recovery {
            rec.prr_out = rec.prr_out.saturating_add(len);
        }
    }

    /// RACK's part of an ACK (SACK connections): the ranges it delivered were
    /// taken by `on_cum_ack` / `on_sacked`; here the D-SACK and TLP outcome,
    /// then loss detection and, on a loss, recovery.
    pub(crate) fn rack_on_ack(
        &mut self,
        now: Instant,
        dsack: Option<(Seq, Seq)>,
        una_moved: bool,
        new_sack: bool,
        c: &mut Counters,
    ) {
        let busy = dsack.is_some() || self.rack.tlp_end.is_some() || self.rack.advanced;
        if !busy && self.rack.dsack_round.is_none() {
            return;
        }
        if self.rack.dsack_round.is_some_and(|r| self.una >= r) {
            self.rack.dsack_round = None;
        }
        if dsack.is_some() {
            self.rack.on_spurious(self.nxt);
        }
        // RFC 8985 section 7.4: what became of the probe.
        if let Some(end) = self.rack.tlp_end
            && self.una >= end
        {
            let spurious = dsack.is_some_and(|(_, r)| r == end);
            if !self.rack.tlp_retrans || spurious {
                self.rack.tlp_end = None;
            } else if self.una > end {
                // Acknowledged beyond the probe without a D-SACK for it: the
                // probe repaired a loss, which calls for one cwnd reduction.
                self.rack.tlp_end = None;
                if self.recovery.is_none() {
                    let ss = self.cc.on_congestion(self.outstanding());
                    self.cc.set_cwnd(ss);
                }
            } else if !una_moved && !new_sack {
                // A duplicate ACK at the probe's end: original and probe both
                // arrived.
                self.rack.tlp_end = None;
            }
        }
        let rack = &self.rack;
        let hold = self.recovery.is_some_and(|r| r.hold);
        if rack.advanced
            && !hold
            && (!self.sack.is_empty() || self.recovery.is_some() || rack.by_retrans)
        {
            self.rack_detect(now, c);
        }
        self.rack.advanced = false;
    }

    /// What became of a probe without SACK (new data only): nothing to judge,
    /// settled once the ACK covers it.
    pub(crate) fn tlp_outcome_without_sack(&mut self) {
        if self.rack.tlp_end.is_some_and(|end| self.una >= end) {
            self.rack.tlp_end = None;
        }
    }

    /// RACK's reordering window outside recovery (for `TcpInfo`).
    pub(crate) fn rack_reo_wnd(&self) -> Duration {
        self.rack.reo_wnd(false, false, self.rtt.srtt())
    }

    /// Loss detection now (an ACK, or the reordering timer); enters recovery if
    /// anything is lost.
    fn rack_detect(&mut self, now: Instant, c: &mut Counters) {
        let in_recovery = self.recovery.is_some() || self.nxt < self.max;
        let dupthresh = self.sack.sacked_bytes() >= DUP_THRESH * self.mss.max(1);
        let reo = self.rack.reo_wnd(in_recovery, dupthresh, self.rtt.srtt());
        let (lost, wait) = self.rack.detect(now, &self.sack, self.nxt, reo);
        self.rack.reo_at = wait.map(|w| now + w);
        if lost > 0 {
            c.tcp_rack_lost += lost.div_ceil(self.mss.max(1)) as u64;
        }
        if self.recovery.is_none() && self.persist.is_none() && self.rack.has_lost(self.nxt) {
            self.enter_recovery(c);
        }
    }

    /// Recovery ended at an ACK: the reordering window's persistence counts down,
    /// and ranges found lost meanwhile start the next recovery.
    pub(crate) fn rack_recovery_ended(&mut self, c: &mut Counters) {
        let r = &mut self.rack;
        r.reo_wnd_persist = r.reo_wnd_persist.saturating_sub(1);
        if r.reo_wnd_persist == 0 {
            r.reo_wnd_mult = 1;
        }
        if self.sack_ok && self.persist.is_none() && self.rack.has_lost(self.nxt) {
            self.enter_recovery(c);
        }
    }

    /// Starts (or restarts) the probe timer after new data or an ACK, when a
    /// probe is allowed (RFC 8985 section 7.2): SACK, nothing SACKed, not in
    /// recovery (nor going back after an RTO), no probe outstanding, data in flight.
    /// `delack` is the delayed ACK the peer is assumed to use (WCDelAckT).
    pub(crate) fn arm_pto(&mut self, now: Instant, delack: Duration) {
        if !self.any_probe_allowed() || self.rack.tlp_end.is_some() {
            self.rack.pto_at = None;
            return;
        }
        let single = self.outstanding() <= self.mss;
        let pto = match self.rtt.srtt() {
            Some(srtt) if single => (srtt * 2).saturating_add(delack.max(PTO_SLACK)),
            Some(srtt) => srtt * 2 + PTO_SLACK,
            None => Duration::from_secs(1),
        };
        self.rack.pto_single = single;
        let at = now + pto;
        self.rack.pto_at = Some(self.rto_at.map_or(at, |r| r.min(at)));
        self.rack.pto_from = now;
    }

    /// [`Snd::arm_pto`] after new data went out; the rest of a burst sent in the
    /// same instant leaves the timer as the first segment set it (unless that
    /// one was alone in flight and got the delayed-ACK allowance).
    pub(crate) fn arm_pto_after_send(&mut self, now: Instant, delack: Duration) {
        let r = &self.rack;
        if r.pto_at.is_some() && r.pto_from == now && !r.pto_single {
            return;
        }
        self.arm_pto(now, delack);
    }

    /// An ACK of nothing new, without SACK blocks or a window change, while
    /// nothing is in flight, would change nothing here but the probe timer:
    /// no recovery, persist probe, undo episode, tail probe or D-SACK round
    /// is open and RACK has nothing new to look at (the receive fast path,
    /// `Conn::on_predicted`, relies on it).
    pub(crate) fn ack_cannot_move(&self) -> bool {
        self.recovery.is_none()
            && self.persist.is_none()
            && self.undo.idle()
            && self.rack.tlp_end.is_none()
            // RACK's state is an ACK's business only with SACK (`rack_on_ack`).
            && (!self.sack_ok || (!self.rack.advanced && self.rack.dsack_round.is_none()))
    }

    /// A probe may be scheduled (RFC 8985 section 7.2's conditions).
    /// Without SACK too, but there only new data is probed ([`Snd::take_probe`]):
    /// RFC 8985 asks for SACK, since without it (and D-SACK) a resend's need
    /// cannot be judged; new data can only help, and it stands in for a lost
    /// stretch ACK, which otherwise stalls the sender until its retransmission
    /// timer (the peer's answer to it acknowledges everything).
    pub(crate) fn probe_allowed(&self) -> bool {
        self.sack.is_empty()
            && self.recovery.is_none()
            && self.persist.is_none()
            && self.nxt == self.max
            && self.max > self.una
    }

    /// A probe in SACK recovery whose ACKs stopped (a departure from RFC 8985
    /// section 7.2 and from Linux, which probe only outside recovery). When
    /// the last retransmission fills the last hole after the new data sent
    /// with it, the receiver answers all of it with one ACK (a Linux receiver
    /// compresses the SACKs of out-of-order segments into one), and if that
    /// ACK is lost, or the retransmission is and nothing was sent after it,
    /// nothing comes back: the sender waited for its retransmission timer
    /// (200 ms at least, against RTTs of about 100 µs over the impaired TAP:
    /// the `timestamps off, loss 1 %` cells of `tests/system_impair.rs`'s
    /// `issue_16_matrix`).
    /// After a PTO without an ACK the probe is new data (its ACK or SACK
    /// either ends recovery or shows RACK the retransmission lost), else the
    /// lowest un-SACKed segment again; cwnd is not cut.
    pub(crate) fn recovery_probe_allowed(&self) -> bool {
        self.sack_ok
            && self.recovery.is_some()
            && self.persist.is_none()
            && self.nxt == self.max
            && self.max > self.una
    }

    /// Either kind of probe may be scheduled.
    pub(crate) fn any_probe_allowed(&self) -> bool {
        self.probe_allowed() || self.recovery_probe_allowed()
    }

    /// The reordering and probe timers, if due (before the retransmission timer:
    /// a probe re-arms it, RFC 8985 section 7.3).
    pub(crate) fn on_rack_timers(&mut self, now: Instant, c: &mut Counters) {
        if self.rack.reo_at.is_some_and(|t| t <= now) {
            self.rack.reo_at = None;
            let was = self.recovery.is_some();
            self.rack_detect(now, c);
            if !was {
                // Recovery begun by the timer: PRR as for an ACK of one segment
                // (Linux's `tcp_rack_reo_timeout`).
                self.prr_on_ack(now, self.mss);
            } else if let Some(rec) = &mut self.recovery
                && let Some(at) = rec.stall_at
            {
                if at <= now {
                    // No ACK came to clock out what PRR held back.
                    rec.stall_at = None;
                    let ss = self.cc.ssthresh();
                    if self.cc.cwnd() < ss {
                        self.cc.set_cwnd(ss);
                    }
                } else {
                    self.rack.reo_at = Some(self.rack.reo_at.map_or(at, |t| t.min(at)));
                }
            }
        }
        if self.rack.pto_at.is_some_and(|t| t <= now) {
            self.rack.pto_at = None;
            if self.any_probe_allowed() && self.rack.tlp_end.is_none() {
                self.rack.tlp_due = true;
            }
            if self.max > self.una && self.sack_ok {
                self.rto_at = Some(now + self.rtt.rto());
            }
        }
    }

    /// The retransmission timer expired.
    pub(crate) fn rack_on_rto(&mut self) {
        self.rack.on_rto();
    }

    /// The loss probe to send now, if one is due (RFC 8985 section 7.3): a
    /// segment of new data if there is some and the peer's window takes it,
    /// otherwise the last segment sent. Returns `(seq, data_len, fin, retransmit)`.
    /// Inline for the common case, no probe due (checked before every
    /// segment sent).
    #[inline]
    pub(crate) fn take_probe(
        &mut self,
        data_end: Seq,
        fin_queued: bool,
        max_data: usize,
    ) -> Option<(Seq, usize, bool, bool)> {
        if !self.rack.tlp_due {
            return None;
        }
        self.take_probe_due(data_end, fin_queued, max_data)
    }

    #[inline(never)]
    fn take_probe_due(
        &mut self,
        data_end: Seq,
        fin_queued: bool,
        max_data: usize,
    ) -> Option<(Seq, usize, bool, bool)> {
        if !std::mem::take(&mut self.rack.tlp_due) || !self.any_probe_allowed() {
            return None;
        }
        let mss = self.mss.max(1);
        let wnd_room = self.una.plus(self.wnd).since(self.nxt);
        let avail = data_end.since(self.nxt);
        let probe = if avail > 0 && wnd_room > 0 {
            // Two segments of new data, not one: a receiver acknowledges every
            // second full-sized segment at once (RFC 5681 section 4.2) but may
            // hold the ACK of a lone one for its delayed-ACK time (40 ms in
            // Linux), which is what a probe after a lost ACK would then wait.
            // Linux's probe is one skb, which can carry several segments.
            let total = avail.min(2 * mss).min(wnd_room);
            let len = total.min(max_data.max(1));
            self.rack.tlp_more = total - len;
            let seq = self.nxt;
            let fin = fin_queued && seq.plus(len) == data_end;
            self.nxt = seq.plus(len + usize::from(fin));
            self.max = self.max.max(self.nxt);
            (seq, len, fin, false)
        } else if !self.sack_ok {
            // Without SACK only new data is probed (see `probe_allowed`).
            return None;
        } else if self.recovery.is_some() {
            // In recovery: the lowest un-SACKed segment (the last hole's
            // retransmission if that was lost; a D-SACK and the ACK that
            // was lost if not).
            let mut seq = self.una;
            while let Some(e) = self.sack.sacked_until(seq) {
                seq = e;
            }
            let top = self.max.min(data_end);
            let end = self.sack.next_sacked_after(seq).map_or(top, |b| b.min(top));
            let len = end.since(seq).min(mss).min(max_data.max(1));
            let fin = fin_queued && self.max == data_end.plus(1) && seq.plus(len) == data_end;
            if len == 0 && !fin {
                return None;
            }
            (seq, len, fin, true)
        } else {
            let fin = fin_queued && self.max == data_end.plus(1);
            let top = self.max.min(data_end);
            let seq = top.minus(mss).max(self.una);
            let len = top.since(seq);
            if len == 0 && !fin {
                return None;
            }
            (seq, len, fin, true)
        };
        self.rack.tlp_end = Some(self.max);
        self.rack.tlp_retrans = probe.3;
        Some(probe)
    }

    /// The rest of a probe of new data that did not fit one call's `max_data`
    /// (offloads off): sent right after it, part of the same probe. Inline
    /// for the common case, no probe under way.
    #[inline]
    pub(crate) fn take_probe_rest(
        &mut self,
        data_end: Seq,
        fin_queued: bool,
        max_data: usize,
    ) -> Option<(Seq, usize, bool)> {
        if self.rack.tlp_more == 0 {
            return None;
        }
        self.take_probe_rest_due(data_end, fin_queued, max_data)
    }

    #[inline(never)]
    fn take_probe_rest_due(
        &mut self,
        data_end: Seq,
        fin_queued: bool,
        max_data: usize,
    ) -> Option<(Seq, usize, bool)> {
        let more = std::mem::take(&mut self.rack.tlp_more);
        let wnd_room = self.una.plus(self.wnd).since(self.nxt);
        let avail = data_end.since(self.nxt);
        if more == 0 || avail == 0 || wnd_room == 0 || self.nxt != self.max {
            return None;
        }
        let len = avail.min(more).min(wnd_room).min(max_data.max(1));
        self.rack.tlp_more = more - len;
        let seq = self.nxt;
        let fin = fin_queued && seq.plus(len) == data_end;
        self.nxt = seq.plus(len + usize::from(fin));
        self.max = self.max.max(self.nxt);
        self.rack.tlp_end = Some(self.max);
        Some((seq, len, fin))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Instant {
        Instant::from_millis(n)
    }

    proptest::proptest! {
        /// The log with its inline entries behaves as the `VecDeque` it
        /// replaces, through every operation RACK uses, across the move to
        /// the heap.
        #[test]
        fn xmit_log_behaves_like_a_deque(
            ops in proptest::collection::vec((0u8..6, 0usize..6, 0usize..6), 0..40)
        ) {
            let mut log = XmitLog::default();
            let mut model: VecDeque<Xmit> = VecDeque::new();
            let key = |x: &Xmit| (x.start, x.order);
            for (k, (op, a, b)) in ops.into_iter().enumerate() {
                let v = Xmit { start: Seq(k as u32), order: k as u64, ..NO_XMIT };
                match op {
                    0 => {
                        log.push_back(v);
                        model.push_back(v);
                    }
                    1 => {
                        proptest::prop_assert_eq!(
                            log.pop_front().map(|x| key(&x)),
                            model.pop_front().map(|x| key(&x))
                        );
                    }
                    2 => {
                        let i = a.min(model.len());
                        log.insert(i, v);
                        model.insert(i, v);
                    }
                    3 => {
                        let j = b.min(model.len());
                        let i = a.min(j);
                        log.remove_range(i, j);
                        model.drain(i..j);
                    }
                    4 => {
                        if let (Some(x), Some(y)) = (log.get_mut(a), model.get_mut(a)) {
                            x.end = Seq(99);
                            y.end = Seq(99);
                        }
                        if let (Some(x), Some(y)) = (log.back_mut(), model.back_mut()) {
                            x.lost = true;
                            y.lost = true;
                        }
                    }
                    _ => {
                        let p = |x: &Xmit| x.start < Seq(b as u32 * 4);
                        if model.iter().is_sorted_by_key(|x| x.start) {
                            proptest::prop_assert_eq!(log.partition_point(p), model.partition_point(p));
                        }
                        for x in log.iter_mut().zip(model.iter_mut()) {
                            x.0.tsval += 1;
                            x.1.tsval += 1;
                        }
                    }
                }
                proptest::prop_assert_eq!(log.len(), model.len());
                let got: Vec<_> = log.iter().map(|x| (key(x), x.end, x.lost, x.tsval)).collect();
                let want: Vec<_> = model.iter().map(|x| (key(x), x.end, x.lost, x.tsval)).collect();
                proptest::prop_assert_eq!(got, want);
                proptest::prop_assert_eq!(log.front().map(key), model.front().map(key));
                proptest::prop_assert_eq!(log.back().map(key), model.back().map(key));
                proptest::prop_assert_eq!(log.get(a).map(key), model.get(a).map(key));
            }
        }
    }

    /// Ten 1000-byte segments from 0, one per millisecond.
    fn ten() -> Rack {
        let mut r = Rack::default();
        for k in 0..10u32 {
            r.on_send(Seq(k * 1000), Seq((k + 1) * 1000), ms(u64::from(k)), k);
        }
        r
    }

    #[test]
    fn resend_splits_and_replaces_ranges() {
        let mut r = ten();
        r.on_send(Seq(1500), Seq(3500), ms(20), 20);
        let spans: Vec<(u32, u32, bool)> = r
            .log
            .iter()
            .map(|x| (x.start.0, x.end.0, x.retrans))
            .collect();
        assert_eq!(
            &spans[..4],
            &[
                (0, 1000, false),
                (1000, 1500, false),
                (1500, 3500, true),
                (3500, 4000, false)
            ]
        );
        assert_eq!(r.log.len(), 10);
        // Contiguous, in order.
        assert!(
            r.log
                .iter()
                .zip(r.log.iter().skip(1))
                .all(|(a, b)| a.end == b.start)
        );
    }

    #[test]
    fn sacked_later_segment_marks_earlier_lost_after_reo_wnd() {
        let mut r = ten();
        let mut sb = Scoreboard::new();
        // At 10 ms, segment 5 is SACKed: 0..5 were sent before it.
        sb.update_with(Seq(0), Seq(10_000), &[(5000, 6000)], |l, h| {
            r.on_sacked(l, h, ms(10))
        });
        assert_eq!(r.rtt, Duration::from_millis(5));
        // A 1.5 ms window: 0..=3 were sent at least 1.5 ms before 5, 4 not.
        let reo = Duration::from_micros(1500);
        let (lost, wait) = r.detect(ms(10), &sb, Seq(10_000), reo);
        assert_eq!(lost, 4000);
        assert_eq!(wait, Some(Duration::from_micros(500)));
        assert_eq!(r.next_lost(&sb, Seq(10_000)), Some((Seq(0), Seq(1000))));
        // Segment 4's time is up 1 ms later.
        let (lost, wait) = r.detect(ms(11), &sb, Seq(10_000), reo);
        assert_eq!((lost, wait), (1000, None));
        // In flight: 10 sent, 1 SACKed, 5 lost.
        assert_eq!(r.pipe(&sb, Seq(0), Seq(10_000)), 4000);
    }

    /// Reordering that skips the path's delay makes min_RTT tiny (here 20 µs
    /// against a 10 ms SRTT): after D-SACKs the window must still grow to cover
    /// segments sent milliseconds before the reordered one. With steps of
    /// min_RTT / 4 it would stop at 255 * 5 µs = 1.3 ms.
    #[test]
    fn reordering_window_grows_past_a_collapsed_min_rtt() {
        let mut r = Rack {
            min_rtt: Some(Duration::from_micros(20)),
            reordering_seen: true,
            ..Rack::default()
        };
        let srtt = Some(Duration::from_millis(10));
        let w1 = r.reo_wnd(true, true, srtt);
        assert_eq!(w1, Duration::from_micros(625));
        for round in 0..8u32 {
            r.dsack_round = None;
            r.on_spurious(Seq(round));
        }
        // Nine steps of 625 µs, short of the SRTT cap.
        let w = r.reo_wnd(true, true, srtt);
        assert_eq!(w, Duration::from_micros(5625));
        // Segments 0..=9 one per millisecond; segment 9 SACKed at 10 ms with
        // a 1 ms RTT: only those sent more than 5.625 ms before it are lost.
        let mut t = ten();
        t.min_rtt = r.min_rtt;
        let mut sb = Scoreboard::new();
        sb.update_with(Seq(0), Seq(10_000), &[(9000, 10_000)], |l, h| {
            t.on_sacked(l, h, ms(10))
        });
        let (lost, _) = t.detect(ms(10), &sb, Seq(10_000), w);
        assert_eq!(lost, 4000);
        // More rounds: the window stops at SRTT.
        for round in 8..40u32 {
            r.dsack_round = None;
            r.on_spurious(Seq(round));
        }
        assert_eq!(r.reo_wnd(true, true, srtt), Duration::from_millis(10));
        // Without reordering seen, recovery still means no window at all.
        let fresh = Rack {
            min_rtt: Some(Duration::from_micros(20)),
            ..Rack::default()
        };
        assert_eq!(fresh.reo_wnd(true, false, srtt), Duration::ZERO);
    }

    #[test]
    fn a_burst_is_one_range_split_where_the_latest_delivery_ends() {
        let mut r = Rack::default();
        for k in 0..10u32 {
            r.on_send(Seq(k * 1000), Seq((k + 1) * 1000), ms(0), 0);
        }
        assert_eq!(r.log.len(), 1);
        let mut sb = Scoreboard::new();
        sb.update_with(Seq(0), Seq(10_000), &[(1000, 5000)], |l, h| {
            r.on_sacked(l, h, ms(10))
        });
        // Only segment 0, below the delivered part, was sent before it.
        let (lost, wait) = r.detect(ms(10), &sb, Seq(10_000), Duration::ZERO);
        assert_eq!((lost, wait), (1000, None));
        assert_eq!(r.next_lost(&sb, Seq(10_000)), Some((Seq(0), Seq(1000))));
        assert_eq!(r.pipe(&sb, Seq(0), Seq(10_000)), 5000);
        // A retransmission in the same instant is a later transmission: new data
        // after it is not merged into the burst before it.
        r.on_send(Seq(0), Seq(1000), ms(0), 0);
        r.on_send(Seq(10_000), Seq(11_000), ms(0), 0);
        let orders: Vec<u64> = r.log.iter().map(|x| x.order).collect();
        assert_eq!(orders, vec![2, 1, 1, 3]);
    }

    #[test]
    fn lost_retransmission_is_found_again() {
        let mut r = ten();
        let mut sb = Scoreboard::new();
        sb.update_with(Seq(0), Seq(10_000), &[(1000, 10_000)], |l, h| {
            r.on_sacked(l, h, ms(10))
        });
        let (lost, _) = r.detect(ms(10), &sb, Seq(10_000), Duration::ZERO);
        assert_eq!(lost, 1000);
        // Retransmitted at 10 ms, then new data at 11 ms, which is SACKed at 20 ms.
        r.on_send(Seq(0), Seq(1000), ms(10), 10);
        assert_eq!(r.next_lost(&sb, Seq(10_000)), None);
        r.on_send(Seq(10_000), Seq(11_000), ms(11), 11);
        sb.update_with(Seq(0), Seq(11_000), &[(1000, 11_000)], |l, h| {
            r.on_sacked(l, h, ms(20))
        });
        let (lost, _) = r.detect(ms(20), &sb, Seq(11_000), Duration::ZERO);
        assert_eq!(lost, 1000);
        assert_eq!(r.next_lost(&sb, Seq(11_000)), Some((Seq(0), Seq(1000))));
    }

    #[test]
    fn cumulative_ack_reports_retransmissions_and_reordering() {
        let mut r = ten();
        r.on_send(Seq(0), Seq(1000), ms(30), 30);
        let sb = Scoreboard::new();
        assert_eq!(r.on_cum_ack(Seq(2000), &sb, ms(31)), Some(30));
        assert_eq!(r.log.front().map(|x| x.start), Some(Seq(2000)));
        assert!(!r.reordering_seen);
        // 5 SACKed, then 3 delivered (never retransmitted): reordering.
        let mut sb = Scoreboard::new();
        sb.update_with(Seq(2000), Seq(10_000), &[(5000, 6000)], |l, h| {
            r.on_sacked(l, h, ms(32))
        });
        sb.update_with(Seq(2000), Seq(10_000), &[(3000, 4000)], |l, h| {
            r.on_sacked(l, h, ms(32))
        });
        assert!(r.reordering_seen);
    }

    #[test]
    fn bounded_log() {
        let mut r = Rack::default();
        for k in 0..(MAX_RANGES as u32 * 2) {
            r.on_send(Seq(k * 10), Seq((k + 1) * 10), ms(u64::from(k)), k);
        }
        assert_eq!(r.log.len(), MAX_RANGES);
        assert_eq!(
            r.log.back().map(|x| x.end),
            Some(Seq(MAX_RANGES as u32 * 20))
        );
        // Retransmissions in the middle of a full log do not grow it.
        for k in 0..50u32 {
            r.on_send(Seq(k * 20 + 5), Seq(k * 20 + 7), ms(10_000), 0);
        }
        assert!(r.log.len() <= MAX_RANGES);
        assert!(
            r.log
                .iter()
                .zip(r.log.iter().skip(1))
                .all(|(a, b)| a.end == b.start)
        );
    }

    #[test]
    fn dsack_detection() {
        assert_eq!(dsack(&[(100, 200)], Seq(300)), Some((Seq(100), Seq(200))));
        assert_eq!(
            dsack(&[(500, 600), (400, 700)], Seq(300)),
            Some((Seq(500), Seq(600)))
        );
        assert_eq!(dsack(&[(500, 600), (700, 800)], Seq(300)), None);
        assert_eq!(dsack(&[], Seq(300)), None);
    }
}
