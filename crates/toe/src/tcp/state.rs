//! The connection states of RFC 9293 section 3.3.2, one type each (netstack3's
//! shape): a state holds exactly what is meaningful in it. A SYN-SENT connection
//! has no receive sequence space, FIN-WAIT-2 and TIME-WAIT have nothing left to
//! send and so no retransmission timer, congestion window or send buffer state.
//!
//! The synchronized states share two blocks: [`Snd`], the send sequence space with
//! everything that drives transmission (RFC 9293 section 3.3.1 SND.* plus RTO,
//! congestion and SACK state), and [`Rcv`], the receive sequence space with
//! everything that drives acknowledgement (RCV.*, TS.Recent, delayed ACK). The
//! bytes themselves live in the connection's buffers, outside the state.

use super::cc::{Congestion, CongestionControl};
use super::rack::Rack;
use super::rtt::RttEstimator;
use super::sack::Scoreboard;
use super::seq::Seq;
use crate::time::Instant;
use linerate_wire::tcp::SynOptions;

/// Fast recovery in progress (RFC 6675 section 5, RFC 6582 for receivers without SACK).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Recovery {
    /// RecoveryPoint: SND.MAX when recovery began; an ACK at or past it ends recovery.
    pub recover: Seq,
    /// HighRxt: the highest sequence number retransmitted so far.
    pub high_rxt: Seq,
    /// Retransmit the first hole now whatever pipe says (RFC 6675 section 5 step
    /// 4.3 on entry; RFC 6582 section 3.2 step 4 on a partial ACK).
    pub rexmit_first: bool,
    /// The last ACK showed a hole filled by a delayed original while
    /// retransmissions are still out (Linux's `tcp_try_undo_partial` returning
    /// early): until an ACK says otherwise, nothing more is marked lost or
    /// retransmitted; new data still goes.
    pub hold: bool,
    /// RFC 6937 (PRR) with SACK: the flight when recovery began (RecoverFS),
    /// bytes delivered since (prr_delivered) and sent since (prr_out).
    pub recover_fs: usize,
    pub prr_delivered: usize,
    pub prr_out: usize,
    /// PRR held cwnd below ssthresh at the last ACK: if no ACK comes by then
    /// (an SRTT later) to clock more out, cwnd goes to ssthresh, so what was
    /// held back (lost ranges, or new data that would reveal a lost
    /// retransmission) goes without waiting for the retransmission timeout.
    pub stall_at: Option<Instant>,
}

/// Zero-window probing (RFC 9293 section 3.8.6.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Persist {
    /// When the next probe goes out.
    pub at: Instant,
    /// Probes sent since the window closed.
    pub probes: u32,
    /// Probes sent since the peer last acknowledged anything: past
    /// `max_retries` of them the peer is taken for gone (RFC 1122 section
    /// 4.2.2.17 keeps the connection open only while probes are answered).
    pub unanswered: u32,
    /// A probe is to be sent now.
    pub due: bool,
}

/// The send sequence space and what drives transmission.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Snd {
    /// SND.UNA: oldest unacknowledged sequence number. The send buffer starts here.
    pub una: Seq,
    /// SND.NXT: next sequence number to send (pulled back to SND.UNA by an RTO).
    pub nxt: Seq,
    /// SND.MAX: one past the highest sequence number ever sent.
    pub max: Seq,
    /// SND.WND, scaled.
    pub wnd: usize,
    /// SND.WL1: SEG.SEQ of the last window update.
    pub wl1: Seq,
    /// SND.WL2: SEG.ACK of the last window update.
    pub wl2: Seq,
    /// Largest window the peer has offered (RFC 5961 section 5.2 MAX.SND.WND).
    pub max_wnd: usize,
    /// The peer's window scale shift (RFC 7323 Snd.Wind.Shift).
    pub shift: u8,
    /// Data bytes per segment: the effective send MSS less the options every
    /// segment carries (RFC 9293 section 3.7.1, RFC 7323 section 3.2).
    pub mss: usize,
    /// RTT estimator and RTO (RFC 6298).
    pub rtt: RttEstimator,
    /// Congestion window and ssthresh.
    pub cc: Congestion,
    /// SACK was negotiated (RFC 2018).
    pub sack_ok: bool,
    /// SACK scoreboard.
    pub sack: Scoreboard,
    /// Consecutive duplicate ACKs (RFC 5681 section 2).
    pub dupacks: u32,
    /// Loss recovery, when in it.
    pub recovery: Option<Recovery>,
    /// Retransmission timer (RFC 6298 section 5).
    pub rto_at: Option<Instant>,
    /// Consecutive expiries of the retransmission timer.
    pub retries: u32,
    /// Persist timer, while the peer's window is zero.
    pub persist: Option<Persist>,
    /// Without timestamps: the segment being timed and when it was sent (Karn).
    pub timed: Option<(Seq, Instant)>,
    /// Transmission times, RACK loss detection and tail loss probes (RFC 8985).
    pub rack: Rack,
    /// The last congestion episode, while it may still be undone (`tcp::undo`).
    pub undo: super::undo::Undo,
}

impl Snd {
    /// Send state after a handshake: `una == nxt == max == iss + 1`.
    pub fn new(iss: Seq, negotiated: &Negotiated, rtt: RttEstimator, cc: CongestionControl) -> Snd {
        let start = iss.plus(1);
        Snd {
            una: start,
            nxt: start,
            max: start,
            wnd: 0,
            wl1: Seq(0),
            wl2: start,
            max_wnd: 0,
            shift: negotiated.snd_shift,
            mss: negotiated.snd_mss,
            rtt,
            cc: Congestion::new(cc, negotiated.snd_mss),
            sack_ok: negotiated.sack,
            sack: Scoreboard::new(),
            dupacks: 0,
            recovery: None,
            rto_at: None,
            retries: 0,
            persist: None,
            timed: None,
            rack: Rack::default(),
            undo: Default::default(),
        }
    }

    /// Bytes sent and not yet acknowledged (SND.MAX - SND.UNA).
    pub fn outstanding(&self) -> usize {
        self.max.since(self.una)
    }
}

/// The receive sequence space and what drives acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rcv {
    /// RCV.NXT.
    pub nxt: Seq,
    /// Our window scale shift (RFC 7323 Rcv.Wind.Shift).
    pub shift: u8,
    /// The right edge last advertised (RCV.NXT + RCV.WND when it was sent); it
    /// never moves left (RFC 9293 section 3.8.6.2.2).
    pub adv_right: Seq,
    /// Timestamps were negotiated.
    pub ts_ok: bool,
    /// TS.Recent (RFC 7323 section 4.3).
    pub ts_recent: u32,
    /// SACK was negotiated: ACKs carry SACK blocks.
    pub sack_ok: bool,
    /// Bytes received in order since the last ACK sent.
    pub unacked: usize,
    /// An ACK must go out now (out of order data, hole filled, window update,
    /// duplicate, challenge).
    pub ack_now: bool,
    /// Out-of-order or duplicate frames received since the last ACK: each is owed
    /// an immediate ACK of its own (RFC 5681 section 4.2; Linux sends one per
    /// such skb), so a sender that counts duplicate ACKs, without SACK, sees
    /// them even when several such frames arrive in one receive batch.
    pub dup_owed: u16,
    /// Delayed ACK deadline.
    pub ack_at: Option<Instant>,
    /// Segments still to be acknowledged at once: at the start, after a gap in
    /// the data longer than the RTO, after a duplicate (Linux's quick-ACK mode).
    pub quickack: u32,
    /// When data last arrived (a gap longer than the RTO re-enters quick ACK).
    pub data_at: Option<Instant>,
    /// A FIN that arrived above a hole, waiting for the data below it.
    pub fin_at: Option<Seq>,
    /// The largest segment received (to tell full-sized ones).
    pub seg_max: usize,
}

/// Segments acknowledged at once in quick-ACK mode (Linux's
/// `TCP_MAX_QUICKACKS`).
pub const QUICKACKS: u32 = 16;

impl Rcv {
    /// Receive state after a handshake with initial receive sequence `irs`.
    pub fn new(irs: Seq, negotiated: &Negotiated, ts_recent: u32) -> Rcv {
        let nxt = irs.plus(1);
        Rcv {
            nxt,
            shift: negotiated.rcv_shift,
            adv_right: nxt,
            ts_ok: negotiated.ts,
            ts_recent,
            sack_ok: negotiated.sack,
            unacked: 0,
            ack_now: false,
            dup_owed: 0,
            ack_at: None,
            quickack: QUICKACKS,
            data_at: None,
            fin_at: None,
            seg_max: negotiated.rcv_mss.min(536),
        }
    }

    /// Clears the pending ACK state once an ACK has gone out.
    pub fn acked(&mut self) {
        if self.unacked > 0 {
            self.quickack = self.quickack.saturating_sub(1);
        }
        self.unacked = 0;
        self.ack_at = None;
        // One more duplicate owed: the next visit sends it.
        self.dup_owed = self.dup_owed.saturating_sub(1);
        self.ack_now = self.dup_owed > 0;
    }

    /// An out-of-order or duplicate frame arrived: acknowledge it at once, with
    /// an ACK of its own.
    pub fn owe_dup_ack(&mut self) {
        self.ack_now = true;
        self.dup_owed = self.dup_owed.saturating_add(1);
    }
}

/// What the handshake settled (RFC 9293 section 3.7.1, RFC 7323, RFC 2018).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Negotiated {
    /// Data bytes per segment we send (peer MSS, capped by our MTU, less options).
    pub snd_mss: usize,
    /// Data bytes per segment we expect (our MSS less options).
    pub rcv_mss: usize,
    /// The peer's shift, applied to windows it sends.
    pub snd_shift: u8,
    /// Our shift, applied to windows we send.
    pub rcv_shift: u8,
    /// SACK permitted both ways.
    pub sack: bool,
    /// Timestamps both ways.
    pub ts: bool,
}

impl Negotiated {
    /// Combines what we offered with what the peer offered. `mtu_mss` is the
    /// largest MSS our MTU allows; `default_mss` applies when the peer sent none
    /// (536 for IPv4, 1220 for IPv6: RFC 9293 section 3.7.1, RFC 8200 section 5).
    pub fn new(ours: &SynOptions, peer: &SynOptions, mtu_mss: u16, default_mss: u16) -> Negotiated {
        let ts = ours.timestamps.is_some() && peer.timestamps.is_some();
        let ws = ours.window_scale.is_some() && peer.window_scale.is_some();
        let opt_len = if ts { 12 } else { 0 };
        let peer_mss = peer.mss.unwrap_or(default_mss).min(mtu_mss);
        let snd_mss = usize::from(peer_mss).saturating_sub(opt_len).max(64);
        let rcv_mss = usize::from(ours.mss.unwrap_or(mtu_mss))
            .saturating_sub(opt_len)
            .max(64);
        let clamp = |s: Option<u8>| {
            s.unwrap_or(0)
                .min(linerate_wire::tcp::options::MAX_WINDOW_SCALE)
        };
        Negotiated {
            snd_mss,
            rcv_mss,
            snd_shift: if ws { clamp(peer.window_scale) } else { 0 },
            rcv_shift: if ws { clamp(ours.window_scale) } else { 0 },
            sack: ours.sack_permitted && peer.sack_permitted,
            ts,
        }
    }
}

/// SYN-SENT: our SYN is out, nothing received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SynSent {
    /// ISS.
    pub iss: Seq,
    /// The options our SYN carries.
    pub ours: SynOptions,
    /// RTO state; its backoff grows with each retransmitted SYN.
    pub rtt: RttEstimator,
    /// When the SYN was first sent (an RTT sample if it is not retransmitted).
    pub sent_at: Option<Instant>,
    /// Retransmission deadline.
    pub rto_at: Option<Instant>,
    /// SYNs retransmitted.
    pub retries: u32,
    /// A SYN is to be sent.
    pub send_syn: bool,
}

/// SYN-RECEIVED: the peer's SYN is in, our SYN-ACK is out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SynRcvd {
    /// Made from a SYN cookie on the ACK's arrival (RFC 4987 section 3.6): the
    /// SYN-ACK's TSval carried option bits, so it is no RTT sample.
    pub cookie: bool,
    /// ISS.
    pub iss: Seq,
    /// IRS.
    pub irs: Seq,
    /// Our options (echoing only what the peer offered).
    pub ours: SynOptions,
    /// The peer's SYN options.
    pub peer: SynOptions,
    /// TS.Recent from the peer's SYN.
    pub ts_recent: u32,
    /// RTO state.
    pub rtt: RttEstimator,
    /// Retransmission deadline.
    pub rto_at: Option<Instant>,
    /// SYN-ACKs retransmitted.
    pub retries: u32,
    /// A SYN-ACK is to be sent.
    pub send_synack: bool,
    /// Reached from SYN-SENT (simultaneous open) rather than from LISTEN.
    pub active: bool,
}

/// ESTABLISHED.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Established {
    pub snd: Snd,
    pub rcv: Rcv,
}

/// FIN-WAIT-1: we closed; our FIN is queued or sent, not acknowledged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FinWait1 {
    pub snd: Snd,
    pub rcv: Rcv,
}

/// FIN-WAIT-2: our FIN is acknowledged; the peer may still send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FinWait2 {
    /// SND.NXT, final.
    pub snd_nxt: Seq,
    pub rcv: Rcv,
}

/// CLOSE-WAIT: the peer closed; we may still send.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CloseWait {
    pub snd: Snd,
    pub rcv: Rcv,
}

/// CLOSING: both sides closed at once; our FIN is not acknowledged yet.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Closing {
    pub snd: Snd,
    pub rcv: Rcv,
}

/// LAST-ACK: the peer closed first, then we did; waiting for our FIN's ACK.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LastAck {
    pub snd: Snd,
    pub rcv: Rcv,
}

/// TIME-WAIT: both FINs acknowledged; lingering 2 MSL (RFC 9293 section 3.4.2).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimeWait {
    /// SND.NXT, final.
    pub snd_nxt: Seq,
    pub rcv: Rcv,
    /// When the connection is deleted.
    pub expiry: Instant,
}

/// Why a connection ended (kept in CLOSED for the application to read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CloseReason {
    /// Orderly close, both FINs exchanged.
    Normal,
    /// The peer answered our SYN with RST.
    Refused,
    /// The peer reset the connection.
    Reset,
    /// Retransmissions gave up.
    TimedOut,
    /// The application aborted.
    Aborted,
}

/// CLOSED.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Closed {
    pub reason: CloseReason,
}

/// A connection's state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum State {
    SynSent(SynSent),
    SynRcvd(SynRcvd),
    Established(Established),
    FinWait1(FinWait1),
    FinWait2(FinWait2),
    CloseWait(CloseWait),
    Closing(Closing),
    LastAck(LastAck),
    TimeWait(TimeWait),
    Closed(Closed),
}

impl State {
    /// The public name of the state.
    pub fn name(&self) -> super::TcpState {
        use super::TcpState as T;
        match self {
            State::SynSent(_) => T::SynSent,
            State::SynRcvd(_) => T::SynReceived,
            State::Established(_) => T::Established,
            State::FinWait1(_) => T::FinWait1,
            State::FinWait2(_) => T::FinWait2,
            State::CloseWait(_) => T::CloseWait,
            State::Closing(_) => T::Closing,
            State::LastAck(_) => T::LastAck,
            State::TimeWait(_) => T::TimeWait,
            State::Closed(_) => T::Closed,
        }
    }

    /// The send space, in the states that have one.
    pub fn snd(&self) -> Option<&Snd> {
        match self {
            State::Established(s) => Some(&s.snd),
            State::FinWait1(s) => Some(&s.snd),
            State::CloseWait(s) => Some(&s.snd),
            State::Closing(s) => Some(&s.snd),
            State::LastAck(s) => Some(&s.snd),
            _ => None,
        }
    }

    /// The send space, mutable.
    pub fn snd_mut(&mut self) -> Option<&mut Snd> {
        match self {
            State::Established(s) => Some(&mut s.snd),
            State::FinWait1(s) => Some(&mut s.snd),
            State::CloseWait(s) => Some(&mut s.snd),
            State::Closing(s) => Some(&mut s.snd),
            State::LastAck(s) => Some(&mut s.snd),
            _ => None,
        }
    }

    /// The receive space, in the synchronized states.
    pub fn rcv(&self) -> Option<&Rcv> {
        match self {
            State::Established(s) => Some(&s.rcv),
            State::FinWait1(s) => Some(&s.rcv),
            State::FinWait2(s) => Some(&s.rcv),
            State::CloseWait(s) => Some(&s.rcv),
            State::Closing(s) => Some(&s.rcv),
            State::LastAck(s) => Some(&s.rcv),
            State::TimeWait(s) => Some(&s.rcv),
            _ => None,
        }
    }

    /// The receive space, mutable.
    pub fn rcv_mut(&mut self) -> Option<&mut Rcv> {
        match self {
            State::Established(s) => Some(&mut s.rcv),
            State::FinWait1(s) => Some(&mut s.rcv),
            State::FinWait2(s) => Some(&mut s.rcv),
            State::CloseWait(s) => Some(&mut s.rcv),
            State::Closing(s) => Some(&mut s.rcv),
            State::LastAck(s) => Some(&mut s.rcv),
            State::TimeWait(s) => Some(&mut s.rcv),
            _ => None,
        }
    }

    /// Both spaces at once, where both exist.
    pub fn snd_rcv_mut(&mut self) -> Option<(&mut Snd, &mut Rcv)> {
        match self {
            State::Established(s) => Some((&mut s.snd, &mut s.rcv)),
            State::FinWait1(s) => Some((&mut s.snd, &mut s.rcv)),
            State::CloseWait(s) => Some((&mut s.snd, &mut s.rcv)),
            State::Closing(s) => Some((&mut s.snd, &mut s.rcv)),
            State::LastAck(s) => Some((&mut s.snd, &mut s.rcv)),
            _ => None,
        }
    }

    /// True in the states where our FIN is queued after the send buffer.
    pub fn fin_queued(&self) -> bool {
        matches!(
            self,
            State::FinWait1(_) | State::Closing(_) | State::LastAck(_)
        )
    }

    /// True in the states that accept segment text (RFC 9293 section 3.10.7.4).
    pub fn accepts_text(&self) -> bool {
        matches!(
            self,
            State::Established(_) | State::FinWait1(_) | State::FinWait2(_)
        )
    }

    /// SND.NXT in any synchronized state.
    pub fn snd_nxt(&self) -> Option<Seq> {
        match self {
            State::FinWait2(s) => Some(s.snd_nxt),
            State::TimeWait(s) => Some(s.snd_nxt),
            other => other.snd().map(|s| s.nxt),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation() {
        let ours = SynOptions {
            mss: Some(1460),
            window_scale: Some(7),
            sack_permitted: true,
            timestamps: Some((1, 0)),
        };
        let all = Negotiated::new(&ours, &ours, 1460, 536);
        assert_eq!(
            all,
            Negotiated {
                snd_mss: 1448,
                rcv_mss: 1448,
                snd_shift: 7,
                rcv_shift: 7,
                sack: true,
                ts: true
            }
        );
        // A peer that offers nothing: no scaling, no SACK, no timestamps, default MSS.
        let none = Negotiated::new(&ours, &SynOptions::default(), 1460, 536);
        assert_eq!(
            none,
            Negotiated {
                snd_mss: 536,
                rcv_mss: 1460,
                snd_shift: 0,
                rcv_shift: 0,
                sack: false,
                ts: false
            }
        );
        // A shift above 14 is used as 14 (RFC 7323 section 2.3).
        let big = SynOptions {
            window_scale: Some(20),
            mss: Some(9000),
            ..ours
        };
        let n = Negotiated::new(&ours, &big, 1460, 536);
        assert_eq!((n.snd_shift, n.snd_mss), (14, 1448));
    }
}
