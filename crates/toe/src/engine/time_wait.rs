//! Compact TIME-WAIT (the shape of Linux's `inet_timewait_sock`): a connection
//! that reaches TIME-WAIT after the application gave its handle up keeps only
//! what RFC 9293 needs to answer the segments that may still come, in a small
//! record of its own, and its connection slot (buffers, send and receive
//! state) is freed at once.
//!
//! The record answers as the full connection did (RFC 9293 section 3.10.7.4
//! for TIME-WAIT, RFC 7323 PAWS, RFC 5961 challenge ACKs): an unacceptable
//! segment, a retransmitted FIN among them, is acknowledged (a FIN also
//! restarts the 2 MSL timer); an RST at RCV.NXT deletes the record, one
//! elsewhere in the window draws a challenge ACK, as does a SYN. A SYN that
//! RFC 6191 lets through (a newer timestamp, or without timestamps a higher
//! sequence number) to a port with a listener ends the TIME-WAIT and opens
//! the new incarnation, with an ISN past everything the old one sent (as Linux
//! does). The record goes after 2 MSL.
//!
//! Records live in a slab; the 4-tuple table maps a TIME-WAIT 4-tuple to its
//! record index with [`TW_TAG`] set, so one lookup serves connections and
//! records. Every record lasts 2 MSL from the moment it was last (re)started,
//! so expiries come in the order records were made: a FIFO holds them, and a
//! restarted record is queued again when its old turn comes.

use super::Engine;
use super::output::{HOP_LIMIT, IpTo};
use crate::tcp::conn::Conn;
use crate::tcp::segment::{Outgoing, Segment};
use crate::tcp::seq::Seq;
use crate::tcp::state::State;
use crate::time::Instant;
use linerate_wire::ipv4::protocol;
use linerate_wire::tcp::{self, Flags, SackBlocks};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Set in a 4-tuple table value that names a TIME-WAIT record rather than a
/// connection slot.
pub(super) const TW_TAG: usize = 1 << (usize::BITS - 1);

/// What a TIME-WAIT connection keeps.
#[derive(Debug, Clone)]
pub(super) struct TwRecord {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    /// SND.NXT (our FIN acknowledged: nothing more to send).
    pub snd_nxt: Seq,
    /// RCV.NXT (past the peer's FIN).
    pub rcv_nxt: Seq,
    /// RCV.WND for the acceptability test.
    pub rcv_wnd: u32,
    /// The window field our ACKs carry (scaled as negotiated).
    pub wnd_field: u16,
    /// Timestamps were negotiated.
    pub ts_ok: bool,
    /// TS.Recent.
    pub ts_recent: u32,
    /// Our timestamp clock's offset.
    pub ts_offset: u32,
    /// When the record goes.
    pub expiry: Instant,
}

#[derive(Debug, Clone)]
struct TwSlot {
    generation: u32,
    rec: Option<TwRecord>,
}

/// The engine's TIME-WAIT records.
#[derive(Debug, Clone, Default)]
pub(super) struct TimeWaitTable {
    slots: Vec<TwSlot>,
    free: Vec<u32>,
    /// `(expiry, index, generation)` in expiry order.
    fifo: VecDeque<(Instant, u32, u32)>,
    live: usize,
}

/// What a segment asks of a TIME-WAIT record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TwAnswer {
    /// Nothing.
    Drop,
    /// An ACK.
    Ack,
    /// A challenge ACK (RFC 5961), within the engine's rate limit.
    Challenge,
    /// Delete the record.
    Close,
    /// A SYN RFC 6191 lets reopen the 4-tuple: delete the record, and open
    /// the new connection with at least this ISS.
    Reopen(u32),
}

impl TwRecord {
    /// The record of `conn`, in TIME-WAIT, if it is.
    pub fn of(conn: &Conn) -> Option<TwRecord> {
        let State::TimeWait(t) = &conn.state else {
            return None;
        };
        let free = conn.rx.free();
        let r = &t.rcv;
        // As `tcp::output::window_field` computes it: the right edge never
        // moves left; nothing changes it in TIME-WAIT.
        let right = r.nxt.plus(free).max(r.adv_right);
        let wnd_field = (right.since(r.nxt) >> r.shift).min(65_535) as u16;
        Some(TwRecord {
            local: conn.local,
            remote: conn.remote,
            snd_nxt: t.snd_nxt,
            rcv_nxt: r.nxt,
            rcv_wnd: u32::try_from(free).unwrap_or(u32::MAX),
            wnd_field,
            ts_ok: r.ts_ok,
            ts_recent: r.ts_recent,
            ts_offset: conn.ts_offset,
            expiry: t.expiry,
        })
    }

    /// RFC 6191 section 2: may a SYN (no ACK, no RST) reopen the 4-tuple?
    /// `ts_new` says whether the new incarnation would use timestamps.
    fn syn_may_reopen(&self, seg: &Segment<'_>, ts_new: bool) -> bool {
        let newer_seq = seg.seq > self.rcv_nxt;
        match (self.ts_ok, seg.opts.timestamps.filter(|_| ts_new)) {
            (true, Some((v, _))) => {
                let d = v.wrapping_sub(self.ts_recent) as i32;
                d > 0 || (d == 0 && newer_seq)
            }
            (false, Some(_)) => true,
            (_, None) => newer_seq,
        }
    }

    /// Processes `seg` (RFC 9293 section 3.10.7.4 in TIME-WAIT); `listening`
    /// says whether a listener could take a new connection, `ts_new` whether
    /// it would use timestamps.
    pub fn on_segment(
        &mut self,
        now: Instant,
        seg: &Segment<'_>,
        two_msl: std::time::Duration,
        listening: bool,
        ts_new: bool,
        out_of_window: &mut u64,
    ) -> TwAnswer {
        let syn_only = seg.has(Flags::SYN) && !seg.flags.intersects(Flags::ACK | Flags::RST);
        if syn_only && listening && self.syn_may_reopen(seg, ts_new) {
            // Past everything the old incarnation sent, and a window beyond.
            return TwAnswer::Reopen(self.snd_nxt.0.wrapping_add(65_535 + 2));
        }
        let rcv_nxt = self.rcv_nxt;
        let wnd = self.rcv_wnd as usize;
        let len = seg.len();
        let in_wnd = |s: Seq| s.in_range(rcv_nxt, rcv_nxt.plus(wnd));
        let mut acceptable = match (len, wnd) {
            (0, 0) => seg.seq == rcv_nxt,
            (0, _) => in_wnd(seg.seq),
            (_, 0) => false,
            (_, _) => in_wnd(seg.seq) || in_wnd(seg.seq.plus(len - 1)),
        };
        if !acceptable && wnd == 0 && seg.seq == rcv_nxt {
            acceptable = true;
        }
        let tsval = seg.opts.timestamps.map(|t| t.0).filter(|_| self.ts_ok);
        // PAWS (RFC 7323 section 5.3).
        if let Some(v) = tsval
            && acceptable
            && !seg.has(Flags::RST)
            && (v.wrapping_sub(self.ts_recent) as i32) < 0
        {
            acceptable = false;
        }
        if !acceptable {
            *out_of_window += 1;
            if seg.has(Flags::RST) {
                return TwAnswer::Drop;
            }
            if seg.has(Flags::FIN) {
                // The peer's FIN again: our ACK was lost (RFC 9293 section 3.6.1).
                self.expiry = now + two_msl;
            }
            return TwAnswer::Ack;
        }
        // TS.Recent (RFC 7323 section 4.3).
        if let Some(v) = tsval
            && seg.seq <= rcv_nxt
            && (v.wrapping_sub(self.ts_recent) as i32) >= 0
        {
            self.ts_recent = v;
        }
        if seg.has(Flags::RST) {
            return if seg.seq == rcv_nxt {
                TwAnswer::Close
            } else {
                TwAnswer::Challenge
            };
        }
        if seg.has(Flags::SYN) {
            return TwAnswer::Challenge;
        }
        if !seg.has(Flags::ACK) {
            return TwAnswer::Drop;
        }
        // Text is ignored in TIME-WAIT; a FIN at RCV.NXT is taken, acknowledged,
        // and restarts the 2 MSL timer (section 3.10.7.4, "eighth").
        if seg.has(Flags::FIN) && seg.seq.plus(seg.data_len()) == rcv_nxt {
            self.rcv_nxt = rcv_nxt.plus(1);
            self.expiry = now + two_msl;
            return TwAnswer::Ack;
        }
        TwAnswer::Drop
    }

    /// The ACK this record sends at `now`.
    fn ack(&self, now: Instant) -> Outgoing {
        let ts_now = (now.as_millis() as u32).wrapping_add(self.ts_offset);
        Outgoing {
            seq: self.snd_nxt,
            ack: self.rcv_nxt,
            flags: Flags::ACK,
            wnd: self.wnd_field,
            syn: None,
            ts: self.ts_ok.then_some((ts_now, self.ts_recent)),
            sack: SackBlocks::new(),
            data_off: 0,
            data_len: 0,
            mss: 0,
            retransmit: false,
        }
    }
}

impl TimeWaitTable {
    /// Records held.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<TwSlot>()
            + self.free.capacity() * size_of::<u32>()
            + self.fifo.capacity() * size_of::<(Instant, u32, u32)>()
    }

    /// Stores `rec`; returns its index.
    pub fn insert(&mut self, rec: TwRecord) -> usize {
        let expiry = rec.expiry;
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.slots.push(TwSlot {
                    generation: 0,
                    rec: None,
                });
                self.slots.len() - 1
            }
        };
        let Some(slot) = self.slots.get_mut(idx) else {
            return idx;
        };
        slot.rec = Some(rec);
        self.live += 1;
        let entry = (expiry, idx as u32, slot.generation);
        self.queue(entry);
        idx
    }

    /// Queues an expiry, in order (at the back but for a record made from a
    /// connection that sat in TIME-WAIT for a while before its handle went).
    fn queue(&mut self, entry: (Instant, u32, u32)) {
        if self.fifo.back().is_none_or(|b| b.0 <= entry.0) {
            self.fifo.push_back(entry);
        } else {
            let at = self.fifo.partition_point(|e| e.0 <= entry.0);
            self.fifo.insert(at, entry);
        }
    }

    pub fn get_mut(&mut self, idx: usize) -> Option<&mut TwRecord> {
        self.slots.get_mut(idx)?.rec.as_mut()
    }

    /// Deletes record `idx`; returns it.
    pub fn remove(&mut self, idx: usize) -> Option<TwRecord> {
        let slot = self.slots.get_mut(idx)?;
        let rec = slot.rec.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(idx as u32);
        self.live -= 1;
        Some(rec)
    }

    /// When the next record may expire (possibly one deleted or restarted
    /// since: then nothing happens at that time).
    pub fn next_expiry(&self) -> Option<Instant> {
        self.fifo.front().map(|e| e.0)
    }

    /// Deletes the next record due at `now` and returns it, if there is one.
    pub fn pop_expired(&mut self, now: Instant) -> Option<TwRecord> {
        while let Some(&(t, idx, generation)) = self.fifo.front() {
            if t > now {
                return None;
            }
            self.fifo.pop_front();
            let Some(slot) = self.slots.get(idx as usize) else {
                continue;
            };
            let Some(rec) = slot.rec.as_ref() else {
                continue;
            };
            if slot.generation != generation {
                continue;
            }
            if rec.expiry > now {
                // Restarted by a FIN since: wait for the new expiry.
                let entry = (rec.expiry, idx, generation);
                self.queue(entry);
                continue;
            }
            return self.remove(idx as usize);
        }
        None
    }
}

impl Engine {
    /// Moves connection `idx`, in TIME-WAIT with its handle given up and
    /// nothing left to send, to a TIME-WAIT record and frees its slot.
    pub(super) fn enter_time_wait(&mut self, idx: usize) {
        let Some(rec) = self.conn(idx).and_then(TwRecord::of) else {
            return;
        };
        let key = (rec.local, rec.remote);
        let tw = self.time_wait.insert(rec);
        self.remove_conn(idx);
        self.by_tuple.insert(key, TW_TAG | tw);
    }

    /// Expires the TIME-WAIT records due at `now`.
    pub(super) fn time_wait_timers(&mut self, now: Instant) {
        while let Some(rec) = self.time_wait.pop_expired(now) {
            let key = (rec.local, rec.remote);
            if let Some(v) = self.by_tuple.remove(&key)
                && v & TW_TAG == 0
            {
                // Another connection's (cannot be while the record holds the
                // 4-tuple, but never drop a live connection's entry).
                self.by_tuple.insert(key, v);
            }
        }
    }

    /// A segment for the TIME-WAIT record `tagged` (its table value).
    pub(super) fn time_wait_input(
        &mut self,
        now: Instant,
        tagged: usize,
        seg: &Segment<'_>,
        mac: [u8; 6],
    ) {
        let idx = tagged & !TW_TAG;
        let two_msl = self.cfg.tcp.msl.saturating_mul(2);
        let listener = self.by_port.get(&seg.dst_port).copied();
        let ts_new = self.cfg.tcp.timestamps;
        let mut oow = 0;
        let Some(rec) = self.time_wait.get_mut(idx) else {
            return;
        };
        let answer = rec.on_segment(now, seg, two_msl, listener.is_some(), ts_new, &mut oow);
        self.counters.tcp_out_of_window += oow;
        let (local, remote) = (rec.local, rec.remote);
        let ack = rec.ack(now);
        match answer {
            TwAnswer::Drop => {}
            TwAnswer::Ack => self.send_tw_ack(mac, local, remote, &ack),
            TwAnswer::Challenge => {
                if self.challenge.allow(now) {
                    self.counters.tcp_challenge_acks += 1;
                    self.send_tw_ack(mac, local, remote, &ack);
                } else {
                    self.counters.tcp_challenge_acks_suppressed += 1;
                }
            }
            TwAnswer::Close | TwAnswer::Reopen(_) => {
                self.time_wait.remove(idx);
                self.by_tuple.remove(&(local, remote));
                if let (TwAnswer::Reopen(iss), Some(l)) = (answer, listener) {
                    self.passive_open(now, l, local, remote, seg, mac, Some(iss));
                }
            }
        }
    }

    /// Sends `o`, an ACK of a TIME-WAIT record, as a control frame.
    fn send_tw_ack(&mut self, mac: [u8; 6], local: SocketAddr, remote: SocketAddr, o: &Outgoing) {
        let mut opts = [0u8; tcp::options::MAX_LEN];
        let opt_len = o.write_options(&mut opts);
        let len = tcp::HEADER_LEN + opt_len;
        let Some(pseudo) = super::output::tcp_pseudo(local.ip(), remote.ip(), len) else {
            return;
        };
        self.counters.tcp_out_segs += 1;
        self.send_ip_direct(
            IpTo {
                mac,
                src: local.ip(),
                dst: remote.ip(),
                proto: protocol::TCP,
                hop: HOP_LIMIT,
            },
            len,
            |b| {
                let Some(h) = b.get_mut(..len) else {
                    return false;
                };
                let mut t = tcp::Packet::new_unchecked(h);
                t.set_src_port(local.port());
                t.set_dst_port(remote.port());
                t.set_seq_number(o.seq.0);
                t.set_ack_number(o.ack.0);
                t.set_data_offset((len / 4) as u8);
                t.set_flags(o.flags);
                t.set_window(o.wnd);
                if let Some(src) = opts.get(..opt_len) {
                    t.options_mut().copy_from_slice(src);
                }
                t.fill_checksum(pseudo);
                true
            },
        );
    }
}
