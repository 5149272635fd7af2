//! TCP keep-alives (RFC 9293 section 3.8.4, RFC 1122 section 4.2.3.6): off by
//! default; when a connection has heard nothing from its peer for `idle`, and has
//! nothing of its own in flight, it sends a probe, then another every `interval`
//! while none is answered; after `probes` unanswered ones it fails with
//! "timed out".
//!
//! A probe is an ACK with SEG.SEQ = SND.NXT - 1 and no data (RFC 1122's
//! "probe with an old sequence number", which every TCP answers with an ACK;
//! SND.NXT equals SND.UNA here, so this is also Linux's SND.UNA - 1). Any
//! segment from the peer counts as an answer (Linux resets on any acceptable
//! ACK; here any segment for the connection resets the idle clock, which can
//! only keep a connection up longer). Probes are only sent in ESTABLISHED and
//! CLOSE-WAIT, with nothing unacknowledged and nothing waiting to be sent: a
//! connection with data in flight has its retransmission timer for that.

use super::conn::Conn;
use super::output::window_field;
use super::segment::Outgoing;
use super::state::{CloseReason, Closed, State};
use crate::counters::Counters;
use crate::time::Instant;
use linerate_wire::tcp::{Flags, SackBlocks};
use std::time::Duration;

/// Keep-alive settings of a connection (Linux's `TCP_KEEPIDLE`,
/// `TCP_KEEPINTVL`, `TCP_KEEPCNT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Keepalive {
    /// Silence from the peer before the first probe (RFC 1122: at least two
    /// hours by default; this is the caller's choice).
    pub idle: Duration,
    /// Time between unanswered probes.
    pub interval: Duration,
    /// Unanswered probes after which the connection fails.
    pub probes: u32,
}

/// A connection's keep-alive state.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KaState {
    /// The settings; `None` is off.
    pub cfg: Option<Keepalive>,
    /// When the peer last sent a segment.
    pub last_heard: Option<Instant>,
    /// Probes sent since then.
    pub probes_out: u32,
    /// When the last probe went out.
    pub last_probe: Option<Instant>,
    /// A probe is to be sent now.
    pub due: bool,
}

impl KaState {
    /// A segment from the peer arrived at `now`.
    pub fn heard(&mut self, now: Instant) {
        self.last_heard = Some(now);
        self.probes_out = 0;
        self.last_probe = None;
    }
}

impl Conn {
    /// True in the states and conditions where probes may be sent.
    fn keepalive_eligible(&self) -> bool {
        let idle_state = matches!(self.state, State::Established(_) | State::CloseWait(_));
        idle_state && self.tx.is_empty() && self.state.snd().is_some_and(|s| s.una == s.max)
    }

    /// When the keep-alive timer fires next, if it runs.
    pub fn keepalive_deadline(&self) -> Option<Instant> {
        let cfg = self.ka.cfg?;
        if !self.keepalive_eligible() || self.ka.due {
            return None;
        }
        match self.ka.last_probe {
            Some(p) if self.ka.probes_out > 0 => Some(p + cfg.interval),
            _ => self.ka.last_heard.map(|h| h + cfg.idle),
        }
    }

    /// Runs the keep-alive timer at `now`: a probe falls due, or the connection
    /// fails after `probes` unanswered ones.
    pub fn keepalive_on_timeout(&mut self, now: Instant, c: &mut Counters) {
        let Some(cfg) = self.ka.cfg else { return };
        if self.keepalive_deadline().is_none_or(|d| d > now) {
            return;
        }
        if self.ka.probes_out >= cfg.probes {
            c.tcp_keepalive_timeouts += 1;
            c.tcp_estab_resets += 1;
            self.state = State::Closed(Closed {
                reason: CloseReason::TimedOut,
            });
            return;
        }
        self.ka.probes_out += 1;
        self.ka.last_probe = Some(now);
        self.ka.due = true;
        c.tcp_keepalive_probes += 1;
    }

    /// The probe, if one is due: SEG.SEQ = SND.NXT - 1, no data, the current
    /// ACK, window and timestamps.
    pub fn poll_keepalive(&mut self, ts_now: u32) -> Option<Outgoing> {
        if !self.ka.due {
            return None;
        }
        self.ka.due = false;
        if !self.keepalive_eligible() {
            return None;
        }
        let free = self.rx.free();
        let seq = self.state.snd_nxt()?.minus(1);
        let rcv = self.state.rcv_mut()?;
        let wnd = window_field(rcv, free, false);
        let ts = rcv.ts_ok.then_some((ts_now, rcv.ts_recent));
        let ack = rcv.nxt;
        rcv.acked();
        Some(Outgoing {
            seq,
            ack,
            flags: Flags::ACK,
            wnd,
            syn: None,
            ts,
            sack: SackBlocks::new(),
            data_off: 0,
            data_len: 0,
            mss: 0,
            retransmit: false,
        })
    }
}
