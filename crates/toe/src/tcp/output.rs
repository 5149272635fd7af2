//! What a connection sends next (RFC 9293 section 3.8.6 and 3.10.2).
//!
//! One call yields at most one segment, which may carry up to `max_data` bytes:
//! with offloads that is a super-segment of whole MSS-sized segments (the NIC layer
//! cuts it), without them one MSS. In order of priority:
//!
//! 1. an RST after ABORT;
//! 2. SYN or SYN-ACK (with the options of RFC 9293 section 3.7.1, RFC 7323, RFC 2018);
//! 3. a zero-window probe when the persist timer fired (section 3.8.6.1);
//! 4. a tail loss probe when its timer fired (RFC 8985 section 7.3, `tcp::rack`);
//!    in loss recovery, the lowest range RACK marked lost (with SACK), or the next
//!    hole after three duplicate ACKs / a partial ACK (without), while pipe < cwnd
//!    (RFC 6675 section 5, NextSeg and SetPipe; RFC 6582);
//! 5. new data (or, after an RTO, data again from SND.UNA), limited by cwnd and the
//!    peer's window, cut to whole segments unless it is the last of the buffer, with
//!    Nagle (section 3.7.4) holding a small tail while data is unacknowledged and
//!    sender-side SWS avoidance (section 3.8.6.2.1); the FIN follows the last byte;
//! 6. a pure ACK when one is due, carrying SACK blocks (RFC 2018 section 4);
//! 7. a keep-alive probe when one is due (`tcp::keepalive`).
//!
//! Every synchronized segment carries the window (never moving its right edge left,
//! section 3.8.6.2.2), the timestamps (RFC 7323 section 3) and clears the pending
//! ACK state. The retransmission timer is armed when data goes out (RFC 6298
//! section 5.1).

use super::conn::Conn;
use super::sack::Scoreboard;
use super::sack_owed::blocks_now;
use super::segment::Outgoing;
use super::seq::Seq;
use super::state::*;
use crate::counters::Counters;
use crate::time::Instant;
use linerate_wire::tcp::{Flags, SackBlocks};

/// The data part of a segment to send.
#[derive(Debug, Clone, Copy)]
struct Chosen {
    seq: Seq,
    len: usize,
    fin: bool,
    retransmit: bool,
    /// A tail loss probe (RFC 8985 section 7.3).
    tlp: bool,
}

impl Conn {
    /// The next segment to send, with at most `max_data` bytes of data.
    pub fn poll_output(
        &mut self,
        now: Instant,
        max_data: usize,
        c: &mut Counters,
    ) -> Option<Outgoing> {
        let ts_now = self.ts_now(now);
        self.rcv_space_adjust(now, c);
        if self.send_rst
            || matches!(
                self.state,
                State::Closed(_) | State::SynSent(_) | State::SynRcvd(_)
            )
        {
            return self.poll_unsynchronized(now, ts_now, c);
        }
        match self.poll_synchronized(now, ts_now, max_data, c) {
            Some(o) => Some(o),
            None => self.poll_keepalive(ts_now),
        }
    }

    /// [`Conn::poll_output`] for an RST after ABORT and in the states
    /// before synchronization (SYN, SYN-ACK) or after it (CLOSED): out of
    /// line, so the synchronized path's frame and registers are its own.
    #[cold]
    #[inline(never)]
    fn poll_unsynchronized(
        &mut self,
        now: Instant,
        ts_now: u32,
        c: &mut Counters,
    ) -> Option<Outgoing> {
        let free = self.rx.free();
        if self.send_rst {
            self.send_rst = false;
            let seq = match &self.state {
                State::SynRcvd(s) => s.iss.plus(1),
                other => other.snd_nxt()?,
            };
            self.state = State::Closed(Closed {
                reason: CloseReason::Aborted,
            });
            c.tcp_out_rsts += 1;
            return Some(bare(seq, Seq(0), Flags::RST, 0));
        }
        match &mut self.state {
            State::SynSent(s) => {
                if !s.send_syn {
                    return None;
                }
                s.send_syn = false;
                s.sent_at.get_or_insert(now);
                s.rto_at = Some(now + s.rtt.rto());
                let mut syn = s.ours;
                if let Some(ts) = &mut syn.timestamps {
                    *ts = (ts_now, 0);
                }
                let flags = Flags::SYN | self.ecn.syn_flags(false);
                let mut o = bare(s.iss, Seq(0), flags, free.min(65_535) as u16);
                o.syn = Some(syn);
                o.retransmit = s.retries > 0;
                Some(o)
            }
            State::SynRcvd(s) => {
                if !s.send_synack {
                    return None;
                }
                s.send_synack = false;
                s.rto_at = Some(now + s.rtt.rto());
                let mut syn = s.ours;
                if let Some(ts) = &mut syn.timestamps {
                    *ts = (ts_now, s.ts_recent);
                }
                let mut o = bare(
                    s.iss,
                    s.irs.plus(1),
                    Flags::SYN | Flags::ACK | self.ecn.syn_flags(true),
                    free.min(65_535) as u16,
                );
                o.syn = Some(syn);
                o.retransmit = s.retries > 0;
                Some(o)
            }
            _ => None,
        }
    }

    fn poll_synchronized(
        &mut self,
        now: Instant,
        ts_now: u32,
        max_data: usize,
        c: &mut Counters,
    ) -> Option<Outgoing> {
        let fin_queued = self.state.fin_queued();
        let hole = !self.asm.is_empty();
        let tx_len = self.tx.len();
        let free = self.rx.free();
        let no_delay = self.no_delay;
        let delack = self.params.tcp.delayed_ack;
        let mut mss = 0;
        let mut una = Seq(0);
        // An owed ACK that reports a hole, a duplicate or a filled hole goes
        // out as it is, before any data: a segment with data carries the
        // acknowledgment number of now and no SACK blocks, so it would take
        // that ACK's place and lose what it reports. (One owed for in-order
        // data only, a data segment carries as well.)
        let owed_first = self.sack_owed.next_reports_hole();
        let chosen = match self.state.snd_mut() {
            Some(snd) if !owed_first => {
                mss = snd.mss;
                let ch = choose(snd, tx_len, fin_queued, max_data, no_delay, now);
                una = snd.una;
                if let Some(ch) = ch {
                    if ch.retransmit {
                        c.tcp_retrans_segs += ch.len.div_ceil(snd.mss.max(1)).max(1) as u64;
                    }
                    let end = ch.seq.plus(ch.len + usize::from(ch.fin));
                    if ch.retransmit {
                        let segs = ch.len.div_ceil(snd.mss.max(1)).max(1);
                        snd.undo_on_retransmit(segs, end, ts_now);
                    }
                    snd.rack.on_send(ch.seq, end, now, ts_now);
                    if ch.tlp {
                        c.tcp_tlp_probes += 1;
                    } else if !ch.retransmit || snd.recovery.is_some() {
                        // RFC 8985 section 7.2: new data (re)starts the probe
                        // timer; in recovery a retransmission too (it may be
                        // the last thing sent: `Snd::recovery_probe_allowed`).
                        snd.arm_pto_after_send(now, delack);
                    }
                }
                ch
            }
            _ => None,
        };
        let snd_nxt = self.state.snd_nxt()?;
        let rcv = self.state.rcv_mut()?;
        if chosen.is_none() && !rcv.ack_now {
            return None;
        }
        let mut wnd = window_field(rcv, free, hole);
        let ts = rcv.ts_ok.then_some((ts_now, rcv.ts_recent));
        let mut ack = rcv.nxt;
        let sack_ok = rcv.sack_ok;
        let owed = if rcv.dup_owed > 0 {
            self.sack_owed.pop()
        } else {
            None
        };
        // An owed ACK without data goes with the acknowledgment number of its
        // moment, advertising the same right edge.
        let owed = match owed {
            Some((a, blocks)) if chosen.is_none() => {
                let back = rcv.nxt.since(a) >> rcv.shift;
                wnd = (usize::from(wnd) + back).min(65_535) as u16;
                ack = a;
                Some(blocks)
            }
            _ => None,
        };
        // A D-SACK block waiting for an ACK not owed: not this one if it is
        // owed (it carries its own blocks); the ACK of RCV.NXT after it then.
        let dsack = if owed.is_none() {
            self.sack_owed.take_dsack()
        } else {
            None
        };
        rcv.acked();
        if ack < rcv.nxt || (owed.is_some() && self.sack_owed.dsack_pending()) {
            // An owed ACK of an earlier moment: what arrived since is not
            // acknowledged by it, so an ACK of RCV.NXT follows at once.
            rcv.ack_now = true;
        }
        let mut o = bare(snd_nxt, ack, Flags::ACK, wnd);
        o.ts = ts;
        o.mss = mss;
        match chosen {
            Some(ch) => {
                o.seq = ch.seq;
                o.data_off = ch.seq.since(una);
                o.data_len = ch.len;
                o.retransmit = ch.retransmit;
                if ch.fin {
                    o.flags |= Flags::FIN;
                }
                if ch.len > 0 && o.data_off + ch.len == tx_len {
                    o.flags |= Flags::PSH;
                }
                o.flags |= self.ecn.out_flags(ch.len > 0 && !ch.retransmit);
            }
            None => {
                o.flags |= self.ecn.out_flags(false);
                if let Some(blocks) = owed.filter(|_| sack_ok) {
                    o.sack = blocks;
                } else if sack_ok && (dsack.is_some() || !self.asm.is_empty()) {
                    o.sack = blocks_now(&self.asm, dsack, ts.is_some());
                }
            }
        }
        Some(o)
    }
}

/// A segment with no data and no options.
fn bare(seq: Seq, ack: Seq, flags: Flags, wnd: u16) -> Outgoing {
    Outgoing {
        seq,
        ack,
        flags,
        wnd,
        syn: None,
        ts: None,
        sack: SackBlocks::new(),
        data_off: 0,
        data_len: 0,
        mss: 0,
        retransmit: false,
    }
}

/// The window field to send, and the right edge it advertises (never left of the
/// last one, RFC 9293 section 3.8.6.2.2; RFC 7323 section 2.3 scaling).
///
/// With `hold` (out-of-order data waits for a hole: every ACK is a duplicate
/// of the one before) the right edge stays where it was advertised, as long
/// as a window was: a duplicate ACK counts as one only if its window is the
/// same (RFC 5681 section 2, and Linux's sender, for which any window change
/// is a window update, `FLAG_WIN_UPDATE`). Without SACK the sender then sees
/// its three duplicate ACKs and retransmits at once; were the window to move
/// because the reader freed space between two of them, a Linux sender would
/// wait for its retransmission timeout instead (the `SACK off, loss 1 %`
/// cells of `tests/system_impair.rs`'s `issue_16_matrix`).
pub(super) fn window_field(rcv: &mut Rcv, free: usize, hold: bool) -> u16 {
    if hold && holds_window(rcv, free) {
        let field = (rcv.adv_right.since(rcv.nxt) >> rcv.shift).min(65_535);
        return field as u16;
    }
    let right = rcv.nxt.plus(free).max(rcv.adv_right);
    let wnd = right.since(rcv.nxt);
    let field = (wnd >> rcv.shift).min(65_535);
    rcv.adv_right = rcv.adv_right.max(rcv.nxt.plus(field << rcv.shift));
    field as u16
}

/// True if a window advertised while a hole waits stays where it was
/// ([`window_field`] with `hold`): only while it is at least half of what the
/// buffer could offer (`free`), so that a long episode cannot starve the
/// sender of window.
pub(super) fn holds_window(rcv: &Rcv, free: usize) -> bool {
    rcv.adv_right > rcv.nxt && rcv.adv_right.since(rcv.nxt) >= free / 2
}

/// Bytes in flight per RFC 6675 SetPipe: outstanding, less SACKed (estimated from
/// duplicate ACKs without SACK, as Linux does for Reno), less the lost bytes not yet
/// retransmitted (below `lost_end`, at or above HighRxt).
fn pipe(snd: &Snd, lost_end: Seq, high_rxt: Seq) -> usize {
    let sacked = if snd.sack_ok {
        snd.sack.sacked_bytes()
    } else {
        (snd.dupacks as usize).saturating_mul(snd.mss)
    };
    let from = high_rxt.max(snd.una);
    let lost = if snd.sack_ok {
        snd.sack.holes_between(from, lost_end)
    } else {
        lost_end.since(from)
    };
    snd.outstanding()
        .saturating_sub(sacked)
        .saturating_sub(lost)
}

/// Where the lost region ends during recovery: the first segment at least, and
/// everything with DupThresh segments SACKed above it.
fn lost_end(snd: &Snd, sb: &Scoreboard) -> Seq {
    let first = snd.una.plus(snd.mss);
    let end = match sb.lost_boundary(snd.mss) {
        Some(b) if snd.sack_ok => b.max(first),
        _ => first,
    };
    end.min(snd.max)
}

fn choose(
    snd: &mut Snd,
    tx_len: usize,
    fin_queued: bool,
    max_data: usize,
    no_delay: bool,
    now: Instant,
) -> Option<Chosen> {
    let mss = snd.mss.max(1);
    let max_data = max_data.max(1);
    let data_end = snd.una.plus(tx_len);
    // 3. Zero-window probe (out of line: `choose_persist`).
    if snd.persist.is_some() {
        return choose_persist(snd, data_end, fin_queued, mss);
    }
    // 3b. A tail loss probe, when its timer fired (RFC 8985 section 7.3).
    if let Some((seq, len, fin)) = snd.take_probe_rest(data_end, fin_queued, max_data) {
        return Some(Chosen {
            seq,
            len,
            fin,
            retransmit: false,
            tlp: false,
        });
    }
    if let Some((seq, len, fin, retransmit)) = snd.take_probe(data_end, fin_queued, max_data) {
        if snd.rto_at.is_none() {
            snd.rto_at = Some(now + snd.rtt.rto());
        }
        return Some(Chosen {
            seq,
            len,
            fin,
            retransmit,
            tlp: true,
        });
    }
    // 4. Loss recovery (out of line: `choose_recovery`).
    let mut room = None;
    if snd.recovery.is_some() {
        match choose_recovery(snd, data_end, fin_queued, max_data, mss, now) {
            Ok(ch) => return Some(ch),
            Err(r) => room = r,
        }
    }
    // 5. New data from SND.NXT.
    let flight = snd.nxt.since(snd.una);
    let cwnd_room = room.unwrap_or_else(|| snd.cc.cwnd().saturating_sub(flight));
    let wnd_room = snd.una.plus(snd.wnd).since(snd.nxt);
    let avail = data_end.since(snd.nxt);
    let mut len = avail.min(cwnd_room).min(wnd_room).min(max_data);
    if len < avail {
        if len > mss {
            len = len / mss * mss;
        } else if len < mss && (len < snd.max_wnd / 2 || len == 0) {
            len = 0;
        }
    } else if !no_delay && !fin_queued && flight > 0 && len % mss != 0 {
        // Nagle: hold the partial tail while data is unacknowledged.
        len = len / mss * mss;
    }
    let fin = fin_queued && snd.nxt <= data_end && snd.nxt.plus(len) == data_end && (len == avail);
    if len == 0 && !fin {
        // The persist timer takes over only when no retransmission timer runs
        // (nothing outstanding, or an RTO just fired and the window now keeps
        // even SND.UNA from going again): one of the two must always run while
        // data waits. Started beside a running retransmission timer (as when an
        // RTO had pulled SND.NXT back to SND.UNA and recovery used up the
        // congestion window), it held back every retransmission, its probes do
        // not re-arm that timer, and the connection stalled.
        if avail > 0 && snd.rto_at.is_none() && snd.persist.is_none() {
            snd.persist = Some(Persist {
                at: now + snd.rtt.rto(),
                probes: 0,
                unanswered: 0,
                due: false,
            });
        }
        return None;
    }
    let seq = snd.nxt;
    snd.prr_sent(len);
    let retransmit = seq < snd.max;
    if retransmit && snd.timed.is_some_and(|(s, _)| s >= seq) {
        snd.timed = None;
    }
    snd.nxt = seq.plus(len + usize::from(fin));
    snd.max = snd.max.max(snd.nxt);
    if snd.rto_at.is_none() {
        snd.rto_at = Some(now + snd.rtt.rto());
    }
    if !retransmit && snd.timed.is_none() {
        snd.timed = Some((seq, now));
    }
    Some(Chosen {
        seq,
        len,
        fin,
        retransmit,
        tlp: false,
    })
}

/// [`choose`] while the persist timer runs (RFC 9293 section 3.8.6.1).
#[cold]
#[inline(never)]
fn choose_persist(snd: &mut Snd, data_end: Seq, fin_queued: bool, mss: usize) -> Option<Chosen> {
    // 3. Zero-window probe: one byte past the window, or the FIN; if the window is
    // open but too small for the sender's SWS avoidance, what fits (the override
    // timeout of RFC 9293 section 3.8.6.2.1).
    if let Some(p) = &mut snd.persist {
        if !p.due {
            return None;
        }
        p.due = false;
        // With no room left at SND.NXT (window shut, or filled by an earlier
        // probe), an unanswered probe is sent again from SND.UNA rather than
        // followed by the next byte further past the window.
        let right = snd.una.plus(snd.wnd);
        let seq = if right.since(snd.nxt) == 0 {
            snd.una
        } else {
            snd.nxt
        };
        let wnd_room = right.since(seq);
        let len = data_end.since(seq).min(wnd_room.clamp(1, mss));
        let fin = len == 0 && fin_queued && seq == data_end;
        if len == 0 && !fin {
            return None;
        }
        snd.nxt = seq.plus(len + usize::from(fin));
        let retransmit = seq < snd.max;
        snd.max = snd.max.max(snd.nxt);
        return Some(Chosen {
            seq,
            len,
            fin,
            retransmit,
            tlp: false,
        });
    }
    None
}

/// [`choose`] in loss recovery: the retransmission to send, or the room the
/// congestion window leaves for new data (`Err`).
#[cold]
#[inline(never)]
fn choose_recovery(
    snd: &mut Snd,
    data_end: Seq,
    fin_queued: bool,
    max_data: usize,
    mss: usize,
    now: Instant,
) -> Result<Chosen, Option<usize>> {
    // 4. Loss recovery with SACK: the lowest range RACK marked lost, while
    // pipe < cwnd (RFC 6675 section 5 NextSeg and SetPipe, with RACK's marks
    // for IsLost).
    let mut room = None;
    if snd.sack_ok
        && let Some(mut rec) = snd.recovery
    {
        let pipe = snd.rack.pipe(&snd.sack, snd.una, snd.nxt);
        let cwnd_room = snd.cc.cwnd().saturating_sub(pipe);
        if (cwnd_room > 0 || rec.rexmit_first)
            && !rec.hold
            && let Some((start, hole_end)) = snd.rack.next_lost(&snd.sack, snd.nxt)
        {
            let cwnd_room = if rec.rexmit_first {
                cwnd_room.max(mss)
            } else {
                cwnd_room
            };
            let mut len = hole_end.since(start).min(max_data).min(cwnd_room.max(mss));
            if len > mss {
                len = len / mss * mss;
            }
            let data_len = len.min(data_end.since(start));
            let fin = fin_queued && start.plus(data_len) == data_end && len > data_len;
            if data_len > 0 || fin {
                rec.rexmit_first = false;
                rec.high_rxt = rec.high_rxt.max(start.plus(data_len + usize::from(fin)));
                rec.prr_out = rec.prr_out.saturating_add(data_len);
                snd.recovery = Some(rec);
                if snd.rto_at.is_none() {
                    snd.rto_at = Some(now + snd.rtt.rto());
                }
                return Ok(Chosen {
                    seq: start,
                    len: data_len,
                    fin,
                    retransmit: true,
                    tlp: false,
                });
            }
        }
        room = Some(cwnd_room);
    }
    // 4 (without SACK). Loss recovery: retransmit the next lost hole while pipe < cwnd.
    if let Some(mut rec) = snd.recovery.filter(|_| !snd.sack_ok) {
        let end = lost_end(snd, &snd.sack);
        let mut start = rec.high_rxt.max(snd.una);
        while let Some(e) = snd.sack.sacked_until(start) {
            start = e;
        }
        let pipe = pipe(snd, end, rec.high_rxt);
        let cwnd_room = snd.cc.cwnd().saturating_sub(pipe);
        if start < end && (cwnd_room > 0 || rec.rexmit_first) {
            let cwnd_room = if rec.rexmit_first {
                cwnd_room.max(mss)
            } else {
                cwnd_room
            };
            rec.rexmit_first = false;
            let hole_end = snd
                .sack
                .next_sacked_after(start)
                .unwrap_or(snd.max)
                .min(end);
            let mut len = hole_end.since(start).min(max_data).min(cwnd_room.max(mss));
            if len > mss {
                len = len / mss * mss;
            }
            let data_len = len.min(data_end.since(start));
            let fin = fin_queued && start.plus(data_len) == data_end && len > data_len;
            rec.high_rxt = start.plus(data_len + usize::from(fin));
            snd.recovery = Some(rec);
            if snd.rto_at.is_none() {
                snd.rto_at = Some(now + snd.rtt.rto());
            }
            return Ok(Chosen {
                seq: start,
                len: data_len,
                fin,
                retransmit: true,
                tlp: false,
            });
        }
        room = Some(cwnd_room);
    }
    Err(room)
}
