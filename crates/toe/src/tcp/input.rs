//! Segment arrival (RFC 9293 section 3.10.7.3 for SYN-SENT, 3.10.7.4 for the
//! other states), hardened per RFC 5961 (challenge ACKs for in-window RSTs and
//! SYNs, section 3 and 4; ACK acceptance bounded by MAX.SND.WND, section 5) and
//! RFC 7323 (PAWS, section 5; TS.Recent, section 4.3; RTT from TSecr, section 4).
//!
//! ACK processing advances SND.UNA, samples the RTT (not from an echo older than
//! a retransmission the ACK covers), grows the window or runs loss recovery:
//! with SACK, entry when RACK finds a range lost (RFC 8985, `tcp::rack`), without
//! it on three duplicate ACKs; exit at RecoveryPoint (RFC 6675 section 5); a
//! partial ACK without SACK retransmits the next segment (RFC 6582 section 3.2).

use super::conn::Conn;
use super::sack_owed::{owe_dup_ack, owe_in_order_ack};
use super::segment::Segment;
use super::sendbuf::SendBuf;
use super::seq::Seq;
use super::state::*;
use crate::counters::Counters;
use crate::time::Instant;
use linerate_wire::tcp::Flags;
use std::time::Duration;

/// The RTO a connection with no RTT sample yet would arm (RFC 6298 section 2.1).
const INITIAL_RTO: Duration = Duration::from_secs(1);

/// An RST to send in reply to a segment (RFC 9293 section 3.10.7.1 "reset
/// generation").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rst {
    pub seq: Seq,
    /// `Some` for RST|ACK with this acknowledgement number.
    pub ack: Option<Seq>,
}

impl Rst {
    /// The reset RFC 9293 prescribes for a segment that belongs to no connection.
    pub fn for_segment(seg: &Segment<'_>) -> Option<Rst> {
        if seg.has(Flags::RST) {
            return None;
        }
        Some(if seg.has(Flags::ACK) {
            Rst {
                seq: seg.ack,
                ack: None,
            }
        } else {
            Rst {
                seq: Seq(0),
                ack: Some(seg.seq.plus(seg.len())),
            }
        })
    }
}

enum AckResult {
    Ok {
        fin_acked: bool,
    },
    /// Acknowledges something never sent: ACK and drop.
    Drop,
    /// Too old to be plausible: challenge ACK and drop (RFC 5961 section 5.2).
    Challenge,
}

impl Conn {
    /// Processes one segment addressed to this connection; returns an RST to send
    /// in reply, if any.
    pub fn on_segment(&mut self, now: Instant, seg: &Segment<'_>, c: &mut Counters) -> Option<Rst> {
        self.ka.heard(now);
        if self.on_predicted(now, seg, c) {
            self.apply_close();
            return None;
        }
        let r = match self.state {
            State::SynSent(_) => self.on_syn_sent(now, seg, c),
            State::Closed(_) => None,
            _ => self.on_synchronized(now, seg, c),
        };
        self.apply_close();
        r
    }

    /// Header prediction (Van Jacobson's; Linux's `tcp_rcv_established` fast
    /// path) for the receiver of a bulk transfer: in ESTABLISHED, the next
    /// in-order data segment, ACK (and PSH) only, inside the window, with a
    /// timestamp PAWS accepts when timestamps are on, acknowledging nothing new
    /// while nothing of ours is in flight, the window unchanged, no SACK
    /// blocks, and nothing in the send state that an ACK could move
    /// ([`Snd::ack_cannot_move`]). Every check of the general path passes for
    /// such a segment, and its ACK processing (`process_ack`) would change
    /// only SND.WL1, SND.WL2 and the probe timer: those are done here, then
    /// the text as the general path places it. Returns false, having changed
    /// nothing, for any other segment.
    fn on_predicted(&mut self, now: Instant, seg: &Segment<'_>, c: &mut Counters) -> bool {
        let len = seg.data_len();
        if self.app_closed
            || len == 0
            || len > self.rx.free()
            || seg.flags.bits() & !(Flags::ACK.bits() | Flags::PSH.bits()) != 0
            || !seg.has(Flags::ACK)
        {
            return false;
        }
        let State::Established(Established { snd, rcv }) = &mut self.state else {
            return false;
        };
        if seg.seq != rcv.nxt {
            return false;
        }
        let tsval = match (rcv.ts_ok, seg.opts.timestamps) {
            (false, _) => None,
            (true, Some((v, _))) if (v.wrapping_sub(rcv.ts_recent) as i32) >= 0 => Some(v),
            (true, _) => return false,
        };
        let seg_wnd = usize::from(seg.wnd) << snd.shift;
        if seg.ack != snd.una
            || snd.una != snd.max
            || seg_wnd != snd.wnd
            || !seg.sack.is_empty()
            || !snd.ack_cannot_move()
        {
            return false;
        }
        // TS.Recent (RFC 7323 section 4.3).
        if let Some(v) = tsval {
            rcv.ts_recent = v;
        }
        // The window update (SND.WL1 / SND.WL2) and the probe timer, as
        // `process_ack` leaves them for this ACK.
        if snd.wl1 < seg.seq || (snd.wl1 == seg.seq && snd.wl2 <= seg.ack) {
            snd.wl1 = seg.seq;
            snd.wl2 = seg.ack;
            snd.max_wnd = snd.max_wnd.max(seg_wnd);
        }
        snd.rack.pto_at = None;
        c.tcp_hp_hits += 1;
        self.ecn.on_ack(snd, seg.flags, c);
        if self.ecn.on_segment(seg.flags, seg.ce, true, c) {
            rcv.ack_now = true;
        }
        self.process_text(now, seg, c);
        self.rcv_rtt_measure(now, seg);
        // A FIN can only be waiting if one came out of order before: the
        // call (on every segment of a bulk transfer) only then.
        if self.state.rcv().is_some_and(|r| r.fin_at.is_some()) {
            self.take_fin(now);
        }
        true
    }

    fn closed(&mut self, reason: CloseReason) {
        self.state = State::Closed(Closed { reason });
    }

    fn on_syn_sent(&mut self, now: Instant, seg: &Segment<'_>, c: &mut Counters) -> Option<Rst> {
        let State::SynSent(ss) = &self.state else {
            return None;
        };
        let iss = ss.iss;
        if seg.has(Flags::ACK) && (seg.ack <= iss || seg.ack > iss.plus(1)) {
            return Rst::for_segment(seg);
        }
        if seg.has(Flags::RST) {
            if seg.has(Flags::ACK) {
                c.tcp_attempt_fails += 1;
                self.closed(CloseReason::Refused);
            }
            return None;
        }
        if !seg.has(Flags::SYN) {
            return None;
        }
        let p = &self.params;
        let neg = Negotiated::new(&ss.ours, &seg.opts, p.mtu_mss, p.default_mss);
        let ts_recent = seg.opts.timestamps.map_or(0, |t| t.0);
        if seg.has(Flags::ACK) {
            let mut rtt = ss.rtt.clone();
            if let (0, Some(sent)) = (ss.retries, ss.sent_at) {
                rtt.sample(now - sent);
            }
            let mut rcv = Rcv::new(seg.seq, &neg, ts_recent);
            rcv.ack_now = true;
            self.ecn.on_synack(seg.flags, c);
            if let Some(snd) = self.establish(iss, &neg, rtt, rcv) {
                // RFC 7323 section 2.2: the window of a SYN is never scaled.
                snd.wnd = usize::from(seg.wnd);
                snd.max_wnd = snd.wnd;
                snd.wl1 = seg.seq;
                snd.wl2 = seg.ack;
            }
        } else {
            // Simultaneous open (RFC 9293 section 3.5, figure 8).
            self.ecn.asked &= super::ecn::syn_asks(seg.flags);
            self.state = State::SynRcvd(SynRcvd {
                cookie: false,
                iss,
                irs: seg.seq,
                ours: ss.ours,
                peer: seg.opts,
                ts_recent,
                rtt: ss.rtt.clone(),
                rto_at: None,
                retries: 0,
                send_synack: true,
                active: true,
            });
        }
        None
    }

    /// Enters ESTABLISHED from SYN-SENT or SYN-RECEIVED with the send space
    /// [`Snd::new`] makes of `iss`, `neg` and `rtt` and the receive space
    /// `rcv`; returns the send space for the caller to finish. The handshake
    /// state holds nothing to drop: it is cleared first, so that the new state
    /// is built where it lives rather than aside and then moved in (it is most
    /// of a kilobyte).
    fn establish(
        &mut self,
        iss: Seq,
        neg: &Negotiated,
        rtt: super::rtt::RttEstimator,
        rcv: Rcv,
    ) -> Option<&mut Snd> {
        let cc = self.params.tcp.congestion_control;
        self.state = State::Closed(Closed {
            reason: CloseReason::Normal,
        });
        self.state = State::Established(Established {
            snd: Snd::new(iss, neg, rtt, cc),
            rcv,
        });
        self.became_established = true;
        self.state.snd_mut()
    }

    /// Asks for an ACK (or, in SYN-RECEIVED, the SYN-ACK again).
    pub(crate) fn want_ack(&mut self) {
        match &mut self.state {
            State::SynRcvd(s) => s.send_synack = true,
            other => {
                if let Some(r) = other.rcv_mut() {
                    r.ack_now = true;
                }
            }
        }
    }

    /// Asks for a challenge ACK; the engine sends it (and counts it) within its
    /// rate limit (RFC 5961 section 7).
    fn challenge_ack(&mut self) {
        self.challenge_pending = true;
    }

    fn on_synchronized(
        &mut self,
        now: Instant,
        seg: &Segment<'_>,
        c: &mut Counters,
    ) -> Option<Rst> {
        // Simultaneous open: the peer's SYN-ACK repeats the SYN we already took
        // (RFC 9293 figure 8); its SYN is old, its ACK completes the handshake.
        let trimmed;
        let seg = match &self.state {
            State::SynRcvd(s)
                if s.active && seg.has(Flags::SYN | Flags::ACK) && seg.seq == s.irs =>
            {
                let mut t = *seg;
                t.flags.remove(Flags::SYN);
                t.seq = t.seq.plus(1);
                trimmed = t;
                &trimmed
            }
            _ => seg,
        };
        let (rcv_nxt, ts_ok, ts_recent) = match &self.state {
            State::SynRcvd(s) => (
                s.irs.plus(1),
                s.ours.timestamps.is_some() && s.peer.timestamps.is_some(),
                s.ts_recent,
            ),
            other => {
                let r = other.rcv()?;
                (r.nxt, r.ts_ok, r.ts_recent)
            }
        };
        // First: the sequence number (RFC 9293 section 3.10.7.4, table 6).
        let wnd = self.rx.free();
        let len = seg.len();
        let in_wnd = |s: Seq| s.in_range(rcv_nxt, rcv_nxt.plus(wnd));
        let mut acceptable = match (len, wnd) {
            (0, 0) => seg.seq == rcv_nxt,
            (0, _) => in_wnd(seg.seq),
            (_, 0) => false,
            (_, _) => in_wnd(seg.seq) || in_wnd(seg.seq.plus(len - 1)),
        };
        // With a zero window, ACK, RST and URG are still processed; text is not.
        let mut text_ok = true;
        if !acceptable && wnd == 0 && seg.seq == rcv_nxt {
            acceptable = true;
            text_ok = false;
        }
        let tsval = seg.opts.timestamps.map(|t| t.0).filter(|_| ts_ok);
        // PAWS (RFC 7323 section 5.3).
        if let Some(v) = tsval
            && acceptable
            && !seg.has(Flags::RST)
            && (v.wrapping_sub(ts_recent) as i32) < 0
        {
            acceptable = false;
        }
        if !acceptable {
            c.tcp_out_of_window += 1;
            if !seg.has(Flags::RST) {
                // Data wholly old (a needless retransmission) or past the
                // window: a duplicate ACK of its own, as for out-of-order data
                // (Linux rate-limits only the dataless ones).
                match self.state.rcv_mut() {
                    Some(r) if seg.data_len() != 0 => {
                        // Wholly below RCV.NXT: a duplicate, reported (RFC 2883).
                        let end = seg.seq.plus(seg.data_len());
                        let dsack = (end <= rcv_nxt).then_some((seg.seq, end));
                        if seg.seq < rcv_nxt {
                            // The sender retransmitted: quick ACKs for what
                            // follows (`process_text` says why).
                            r.quickack = r.quickack.max(QUICKACKS);
                        }
                        owe_dup_ack(r, &self.asm, &mut self.sack_owed, dsack)
                    }
                    _ => self.want_ack(),
                }
                let two_msl = self.params.tcp.msl.saturating_mul(2);
                if let State::TimeWait(t) = &mut self.state
                    && seg.has(Flags::FIN)
                {
                    t.expiry = now + two_msl;
                }
            }
            return None;
        }
        // TS.Recent (RFC 7323 section 4.3).
        if let Some(v) = tsval
            && seg.seq <= rcv_nxt
            && (v.wrapping_sub(ts_recent) as i32) >= 0
        {
            match &mut self.state {
                State::SynRcvd(s) => s.ts_recent = v,
                other => {
                    if let Some(r) = other.rcv_mut() {
                        r.ts_recent = v;
                    }
                }
            }
        }
        // Second: RST (RFC 5961 section 3.2).
        if seg.has(Flags::RST) {
            if seg.seq == rcv_nxt {
                let reason = match &self.state {
                    State::SynRcvd(s) if s.active => CloseReason::Refused,
                    State::TimeWait(_) | State::Closing(_) | State::LastAck(_) => {
                        CloseReason::Normal
                    }
                    _ => CloseReason::Reset,
                };
                match self.state {
                    State::SynRcvd(_) => c.tcp_attempt_fails += 1,
                    State::Established(_) | State::CloseWait(_) => c.tcp_estab_resets += 1,
                    _ => {}
                }
                self.closed(reason);
            } else {
                self.challenge_ack();
            }
            return None;
        }
        // Fourth: SYN in a synchronized state (RFC 5961 section 4.2).
        if seg.has(Flags::SYN) {
            self.challenge_ack();
            return None;
        }
        // Fifth: ACK.
        if !seg.has(Flags::ACK) {
            return None;
        }
        if let State::SynRcvd(s) = &self.state {
            if !(s.iss < seg.ack && seg.ack <= s.iss.plus(1)) {
                return Rst::for_segment(seg);
            }
            let p = &self.params;
            let neg = Negotiated::new(&s.ours, &s.peer, p.mtu_mss, p.default_mss);
            let mut rtt = s.rtt.clone();
            if let (true, false, Some((_, tsecr))) = (neg.ts, s.cookie, seg.opts.timestamps) {
                let ms = self.ts_now(now).wrapping_sub(tsecr);
                if tsecr != 0 && (ms as i32) >= 0 {
                    rtt.sample(Duration::from_millis(u64::from(ms)));
                }
            }
            let rcv = Rcv::new(s.irs, &neg, s.ts_recent);
            self.ecn.on_established(c);
            if let Some(snd) = self.establish(s.iss, &neg, rtt, rcv) {
                snd.wnd = usize::from(seg.wnd) << neg.snd_shift;
                snd.max_wnd = snd.wnd;
                snd.wl1 = seg.seq;
                snd.wl2 = seg.ack;
            }
        }
        let fin_queued = self.state.fin_queued();
        let ts_now = self.ts_now(now);
        let delack = self.params.tcp.delayed_ack;
        let mut fin_acked = false;
        if let Some((snd, rcv)) = self.state.snd_rcv_mut() {
            let ts = rcv.ts_ok.then_some(ts_now);
            match process_ack(snd, &mut self.tx, fin_queued, ts, delack, now, seg, c) {
                AckResult::Ok { fin_acked: f } => {
                    fin_acked = f;
                    self.ecn.on_ack(snd, seg.flags, c);
                }
                AckResult::Drop => {
                    rcv.ack_now = true;
                    return None;
                }
                AckResult::Challenge => {
                    self.challenge_pending = true;
                    return None;
                }
            }
        }
        if fin_acked {
            self.our_fin_acked(now);
        }
        // Seventh: text.
        if text_ok && self.state.accepts_text() {
            let fresh = seg.seq.plus(seg.data_len()) > rcv_nxt;
            if self.app_closed && seg.data_len() != 0 && fresh {
                // Nobody will read it (RFC 9293 section 3.10.7.4, RFC 2525 section 2.17).
                let rst = self.state.snd_nxt().map(|s| Rst { seq: s, ack: None });
                self.closed(CloseReason::Aborted);
                return rst;
            }
            let has_data = seg.data_len() != 0;
            if self.ecn.on_segment(seg.flags, seg.ce, has_data, c)
                && let Some(r) = self.state.rcv_mut()
            {
                r.ack_now = true;
            }
            self.process_text(now, seg, c);
            self.rcv_rtt_measure(now, seg);
        }
        // Eighth: FIN.
        if text_ok && seg.has(Flags::FIN) {
            let fin_at = seg.seq.plus(seg.data_len());
            if let Some(r) = self.state.rcv_mut()
                && fin_at >= r.nxt
            {
                r.fin_at = Some(fin_at);
            }
        }
        self.take_fin(now);
        None
    }

    /// Our FIN was acknowledged: FIN-WAIT-1 to FIN-WAIT-2, CLOSING to TIME-WAIT,
    /// LAST-ACK to CLOSED. The new states keep only SND.NXT and the receive
    /// space: those are copied out of the old state, which is then overwritten
    /// where it lies (no move of the whole state, most of a kilobyte).
    fn our_fin_acked(&mut self, now: Instant) {
        let two_msl = self.params.tcp.msl.saturating_mul(2);
        match &self.state {
            State::FinWait1(f) => {
                let (snd_nxt, rcv) = (f.snd.nxt, f.rcv);
                self.state = State::FinWait2(FinWait2 { snd_nxt, rcv });
            }
            State::Closing(s) => {
                let (snd_nxt, rcv) = (s.snd.nxt, s.rcv);
                self.state = State::TimeWait(TimeWait {
                    snd_nxt,
                    rcv,
                    expiry: now + two_msl,
                });
            }
            State::LastAck(_) => {
                self.state = State::Closed(Closed {
                    reason: CloseReason::Normal,
                });
            }
            _ => {}
        }
    }

    /// Places segment text in the receive buffer (RFC 9293 section 3.10.7.4
    /// "seventh") and decides when to acknowledge: at once for out-of-order data or
    /// a filled hole (RFC 5681 section 4.2), at least every second full-sized
    /// segment, otherwise after the delayed-ACK timeout (RFC 9293 section 3.8.6.3).
    fn process_text(&mut self, now: Instant, seg: &Segment<'_>, c: &mut Counters) {
        let delack = self.params.tcp.delayed_ack;
        // The time of the last data, if some time has passed since: only then
        // is the RTO worked out (every segment of a receive batch arrives in
        // the same instant).
        let last = self
            .state
            .rcv()
            .and_then(|r| r.data_at)
            .filter(|&t| now > t);
        let rto = match last {
            Some(_) => self.state.snd().map_or(INITIAL_RTO, |s| s.rtt.rto()),
            None => Duration::ZERO,
        };
        let Some(rcv) = self.state.rcv_mut() else {
            return;
        };
        if seg.data_len() == 0 {
            return;
        }
        // Quick ACKs again after a gap in the data longer than the RTO: the
        // sender is likely restarting from a timeout with a window of one or
        // two segments, which a delayed ACK would hold up by its timer each
        // round trip (Linux's `tcp_event_data_recv`: "sender failed to restart
        // window, so that we send ACKs quickly").
        if last.is_some_and(|t| now > t + rto) {
            rcv.quickack = rcv.quickack.max(QUICKACKS);
        }
        rcv.data_at = Some(now);
        let skip = rcv.nxt.since(seg.seq);
        let data_len = seg.data_len().saturating_sub(skip);
        if data_len == 0 {
            // A duplicate: acknowledge at once so the sender learns it arrived,
            // and the data after it at once too (Linux enters quick-ACK mode
            // here: the sender retransmitted, its window is small).
            rcv.quickack = rcv.quickack.max(QUICKACKS);
            let dsack = (seg.seq, seg.seq.plus(seg.data_len()));
            owe_dup_ack(rcv, &self.asm, &mut self.sack_owed, Some(dsack));
            return;
        }
        // A division only for a super-segment.
        let per_seg = if seg.segs <= 1 {
            seg.data_len()
        } else {
            seg.data_len() / seg.segs as usize
        };
        rcv.seg_max = rcv.seg_max.max(per_seg);
        let start = seg.seq.plus(skip);
        let offset = start.since(rcv.nxt);
        if offset > 0 && !self.ofo_allowed {
            // The engine's out-of-order budget is spent: acknowledge, keep nothing.
            c.tcp_ofo_dropped += 1;
            owe_dup_ack(rcv, &self.asm, &mut self.sack_owed, None);
            return;
        }
        let in_order = offset == 0 && self.asm.is_empty();
        let (written, adopted) = if seg.more.is_empty() {
            let data = seg.payload.get(skip..).unwrap_or_default();
            let adopt = if in_order {
                seg.frame
                    .filter(|f| self.rx.adoptable(f, data.len()))
                    .and_then(|f| f.range_of(data))
            } else {
                None
            };
            if let Some(range) = adopt {
                // In order, large, and the engine will hand over the frame: keep it
                // instead of copying (`recvbuf`).
                self.rx.adopt(range);
                c.tcp_rx_adopted += 1;
                (data.len(), true)
            } else {
                (self.rx.write_at(offset, data), false)
            }
        } else {
            place_chain(&mut self.rx, seg, skip, offset, in_order, c)
        };
        if written < data_len {
            rcv.ack_now = true;
        }
        if offset > 0 {
            // Out of order. A part already held is a duplicate (RFC 2883).
            let dsack = self.asm.overlap(start, start.plus(data_len));
            // A range the assembler cannot track (it holds `MAX_RANGES`
            // already) is dropped: its bytes stay unaccounted in the ring.
            if written > 0 && !self.asm.insert(start, start.plus(written)) {
                c.tcp_ofo_dropped += 1;
            }
            owe_dup_ack(rcv, &self.asm, &mut self.sack_owed, dsack);
            return;
        }
        if !adopted {
            self.rx.commit(written);
        }
        rcv.nxt = rcv.nxt.plus(written);
        if skip > 0 {
            // Partly old (a retransmitted super-segment, say): the old part is
            // a duplicate, reported in the ACK this calls for (RFC 2883).
            self.sack_owed.set_dsack(seg.seq, seg.seq.plus(skip));
            rcv.ack_now |= rcv.sack_ok;
        }
        if !self.asm.is_empty() {
            while let Some(end) = self.asm.pop_front(rcv.nxt) {
                let more = end.since(rcv.nxt);
                self.rx.commit(more);
                rcv.nxt = rcv.nxt.plus(more);
            }
            // All or part of a hole filled: an ACK of its own, at once
            // (RFC 5681 section 4.2), with RCV.NXT as it is now; ACKs owed for
            // earlier frames of the batch keep theirs.
            let d = self.sack_owed.take_dsack().map(|(l, r)| (Seq(l), Seq(r)));
            owe_dup_ack(rcv, &self.asm, &mut self.sack_owed, d);
            rcv.unacked = 0;
            return;
        }
        rcv.unacked = rcv.unacked.saturating_add(written);
        if rcv.unacked >= 2 * rcv.seg_max {
            // Every second full-sized segment (every GRO super-segment) gets
            // an ACK of its own even within one receive batch (RFC 5681
            // section 4.2; Linux acknowledges each skb holding more than one
            // MSS), not one stretch ACK for the batch. With one ACK per
            // flight, the loss of that ACK idles the sender: without SACK
            // until its retransmission timeout; with SACK until its tail loss
            // probe, one new segment that then waits for our delayed-ACK timer,
            // 40 ms, and inflates the sender's RTT (the loss and corruption
            // cells of `tests/system_impair.rs`'s `issue_16_matrix`, kernel to
            // linerate, show both). With an ACK per frame the earlier ones keep
            // the sender going and its next flight covers the lost one.
            let d = self.sack_owed.take_dsack().map(|(l, r)| (Seq(l), Seq(r)));
            owe_in_order_ack(rcv, &self.asm, &mut self.sack_owed, d);
            rcv.unacked = 0;
        } else if rcv.quickack > 0 {
            rcv.ack_now = true;
        } else if rcv.ack_at.is_none() {
            rcv.ack_at = Some(now + delack);
        }
    }

    /// Consumes the peer's FIN once every byte before it is in (RFC 9293 section
    /// 3.10.7.4 "eighth").
    fn take_fin(&mut self, now: Instant) {
        let Some(r) = self.state.rcv_mut() else {
            return;
        };
        if r.fin_at != Some(r.nxt) {
            return;
        }
        r.nxt = r.nxt.plus(1);
        r.fin_at = None;
        r.ack_now = true;
        let two_msl = self.params.tcp.msl.saturating_mul(2);
        // Into CLOSE-WAIT and CLOSING the send and receive spaces go whole: the
        // state is moved out once and the new one built in its place. Into
        // TIME-WAIT only SND.NXT and the receive space survive: copied out,
        // and the old state overwritten where it lies.
        let normal = State::Closed(Closed {
            reason: CloseReason::Normal,
        });
        match &self.state {
            State::Established(_) => {
                if let State::Established(e) = std::mem::replace(&mut self.state, normal) {
                    self.state = State::CloseWait(CloseWait {
                        snd: e.snd,
                        rcv: e.rcv,
                    });
                }
            }
            State::FinWait1(_) => {
                if let State::FinWait1(f) = std::mem::replace(&mut self.state, normal) {
                    self.state = State::Closing(Closing {
                        snd: f.snd,
                        rcv: f.rcv,
                    });
                }
            }
            State::FinWait2(f) => {
                let (snd_nxt, rcv) = (f.snd_nxt, f.rcv);
                self.state = State::TimeWait(TimeWait {
                    snd_nxt,
                    rcv,
                    expiry: now + two_msl,
                });
            }
            _ => {}
        }
    }
}

/// RFC 9293 section 3.10.7.4 "fifth, check the ACK field" for the states with a
/// send space, with RFC 5961 section 5.2, RFC 6298 section 5, RFC 5681 and
/// RFC 6675 / RFC 6582 recovery; with SACK, losses are found by RACK and tails
/// probed by TLP (RFC 8985, `tcp::rack`). `ts` is our timestamp clock now if
/// timestamps are on; `delack` the delayed ACK assumed of the peer (TLP).
#[allow(clippy::too_many_arguments)]
fn process_ack(
    snd: &mut Snd,
    tx: &mut SendBuf,
    fin_queued: bool,
    ts: Option<u32>,
    delack: Duration,
    now: Instant,
    seg: &Segment<'_>,
    c: &mut Counters,
) -> AckResult {
    if seg.ack > snd.max {
        return AckResult::Drop;
    }
    if seg.ack < snd.una.minus(snd.max_wnd.max(1)) {
        return AckResult::Challenge;
    }
    let seg_wnd = usize::from(seg.wnd) << snd.shift;
    let blocks = seg.sack.as_slice();
    // RFC 6937's DeliveredData: SND.UNA's advance plus the change in SACKed bytes.
    let (una_before, sacked_before) = (snd.una, snd.sack.sacked_bytes());
    let new_sack = snd.sack_ok
        && !blocks.is_empty()
        && snd.sack.update_with(snd.una, snd.max, blocks, |l, r| {
            snd.rack.on_sacked(l, r, now)
        });
    let mut fin_acked = false;
    let una_moved = seg.ack > snd.una;
    if una_moved {
        let acked = seg.ack.since(snd.una);
        let data_acked = acked.min(tx.len());
        tx.consume(data_acked);
        fin_acked = fin_queued && acked > data_acked;
        let rtx_ts = snd.rack.on_cum_ack(seg.ack, &snd.sack, now);
        snd.una = seg.ack;
        snd.nxt = snd.nxt.max(snd.una);
        snd.sack.prune(snd.una);
        snd.retries = 0;
        // RTT sample: the timestamp echo (RFC 7323 section 4) or the timed segment.
        // An echo older than the latest retransmission this ACK covers is the
        // original's: the retransmission may have been spurious and the time since
        // the original was sent is no round trip (RFC 6298 section 3, Karn), so
        // no sample, and the backoff stays.
        match seg.opts.timestamps.zip(ts) {
            Some(((_, tsecr), ts_now)) if tsecr != 0 => {
                let ms = ts_now.wrapping_sub(tsecr);
                if rtx_ts.is_some_and(|t| (tsecr.wrapping_sub(t) as i32) < 0) {
                    c.tcp_rtt_spurious_skipped += 1;
                    snd.rack.on_spurious(snd.nxt);
                } else if (ms as i32) >= 0 {
                    snd.rtt.sample(Duration::from_millis(u64::from(ms)));
                }
            }
            _ => {
                if let Some((s, t)) = snd.timed
                    && seg.ack > s
                {
                    snd.rtt.sample(now - t);
                    snd.timed = None;
                }
            }
        }
        match snd.recovery {
            Some(rec) if seg.ack >= rec.recover => {
                // Full acknowledgement: leave recovery with cwnd = ssthresh
                // (RFC 6675 section 5 step 4, RFC 6582 section 3.2 step 3).
                snd.recovery = None;
                snd.dupacks = 0;
                let ss = snd.cc.ssthresh();
                snd.cc.set_cwnd(ss);
                snd.rack_recovery_ended(c);
            }
            Some(mut rec) => {
                // Partial acknowledgement. Without SACK the next segment is taken
                // as lost and retransmitted (RFC 6582 section 3.2 step 4).
                rec.high_rxt = if snd.sack_ok {
                    rec.high_rxt.max(snd.una)
                } else {
                    snd.una
                };
                snd.recovery = Some(rec);
                snd.dupacks = 0;
            }
            None => {
                snd.dupacks = 0;
                snd.cc.on_ack(now, data_acked, snd.rtt.srtt());
            }
        }
        // RFC 6298 sections 5.2 and 5.3.
        snd.rto_at = (snd.una != snd.max).then(|| now + snd.rtt.rto());
    } else if seg.ack == snd.una
        && seg.data_len() == 0
        && !seg.flags.intersects(Flags::SYN | Flags::FIN)
        && seg_wnd == snd.wnd
        && snd.max > snd.una
    {
        // A duplicate ACK (RFC 5681 section 2).
        snd.dupacks = snd.dupacks.saturating_add(1);
    }
    let dsack = super::rack::dsack(blocks, seg.ack).filter(|_| snd.sack_ok);
    let tsecr = seg.opts.timestamps.filter(|_| ts.is_some()).map(|t| t.1);
    if snd.undo_on_ack(dsack, tsecr, una_moved) {
        c.tcp_undos += 1;
    }
    if snd.sack_ok {
        // RACK replaces the duplicate ACK count and IsLost (RFC 8985 section 6).
        snd.rack_on_ack(now, dsack, una_moved, new_sack, c);
        let delivered =
            (snd.una.since(una_before) + snd.sack.sacked_bytes()).saturating_sub(sacked_before);
        snd.prr_on_ack(now, delivered);
    } else {
        snd.tlp_outcome_without_sack();
        if snd.recovery.is_none() && snd.max > snd.una && snd.persist.is_none() && snd.dupacks >= 3
        {
            snd.enter_recovery(c);
        }
    }
    // The peer answered: probing goes on for as long as it does.
    if let Some(p) = &mut snd.persist {
        p.unanswered = 0;
    }
    // Window update (RFC 9293 section 3.10.7.4, SND.WL1 / SND.WL2).
    if snd.wl1 < seg.seq || (snd.wl1 == seg.seq && snd.wl2 <= seg.ack) {
        snd.wnd = seg_wnd;
        snd.wl1 = seg.seq;
        snd.wl2 = seg.ack;
        snd.max_wnd = snd.max_wnd.max(seg_wnd);
    }
    if snd.wnd >= snd.mss.min(snd.max_wnd / 2).max(1) {
        // The window opened: the retransmission timer takes over from the persist
        // timer for whatever is outstanding (a probe may have carried data, and
        // probes do not arm it), so one of the two always runs while data waits.
        if snd.persist.take().is_some() && snd.rto_at.is_none() && snd.max > snd.una {
            snd.rto_at = Some(now + snd.rtt.rto());
        }
    } else if snd.wnd == 0 && snd.persist.is_some() {
        // The probe byte was not taken: send it again on the next probe.
        snd.nxt = snd.una;
    }
    if una_moved || (new_sack && snd.recovery.is_some()) {
        // In recovery new SACK information is progress too: the recovery
        // probe is for ACKs that stopped, not for a long recovery.
        snd.arm_pto(now, delack);
    } else if !snd.any_probe_allowed() {
        snd.rack.pto_at = None;
    }
    AckResult::Ok { fin_acked }
}

/// Places the data of a segment whose payload is a chain of fragments
/// (frag-list GRO), from `skip` bytes in, at `offset` past RCV.NXT; returns
/// the bytes placed and whether they were adopted. In order and large, the
/// fragments are kept by reference as the receive buffer's storage (read
/// where they arrived, copied once, into the reader); otherwise each piece
/// is copied into the ring. Bytes in the head (none after GRO, which leaves
/// only headers there) rule out adoption: the adopted bytes are always
/// in order, before the ring's.
fn place_chain(
    rx: &mut super::recvbuf::RecvBuf,
    seg: &Segment<'_>,
    skip: usize,
    offset: usize,
    in_order: bool,
    c: &mut Counters,
) -> (usize, bool) {
    let len = seg.data_len().saturating_sub(skip);
    if in_order && skip >= seg.payload.len() && rx.adoptable_chain(len) {
        // The fragments follow when the engine has the frame back
        // (`RecvBuf::fill_chain`): moved, not cloned.
        rx.adopt_chain(skip - seg.payload.len(), len);
        c.tcp_rx_adopted += 1;
        return (len, true);
    }
    let (mut written, mut pos) = (0, 0);
    for piece in seg.pieces() {
        let from = skip.saturating_sub(pos).min(piece.len());
        pos += piece.len();
        let part = piece.get(from..).unwrap_or_default();
        if part.is_empty() {
            continue;
        }
        let n = rx.write_at(offset + written, part);
        written += n;
        if n < part.len() {
            break;
        }
    }
    (written, false)
}
