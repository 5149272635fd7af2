//! Explicit Congestion Notification (RFC 3168), as Linux does it.
//!
//! * Negotiation (section 6.1.1): an active open asks with ECE and CWR on the SYN
//!   when [`EcnMode::On`]; a passive open answers a SYN carrying both with ECE on
//!   the SYN-ACK unless [`EcnMode::Off`]. The asking side takes ECN as on when the
//!   SYN-ACK carries ECE without CWR (Linux's `tcp_ecn_rcv_synack`).
//! * Marking (section 6.1.5, Linux's `tcp_ecn_send`): ECT(0) on segments carrying
//!   new data only; never on SYN, SYN-ACK, pure ACKs, window probes' retransmitted
//!   byte, retransmissions or keep-alives.
//! * Receiver (section 6.1.3): a CE-marked segment sets ECE on every segment sent
//!   until a segment with CWR arrives (and the first CE asks for an ACK at once,
//!   as Linux's quick-ACK on `TCP_ECN_DEMAND_CWR`). A CWR is taken before the CE
//!   of the same segment, so a CE on the CWR segment itself starts a new echo.
//!   A GRO super-segment carries one codepoint for all its wire segments: GRO
//!   never merges segments whose IPv4 TOS or IPv6 traffic class differ
//!   (`linerate-offload`'s `FlushReason::Tos` / `TrafficClass`), so its CE mark
//!   stands for all of them, and a CWR segment only starts a run.
//! * Sender (section 6.1.2): ECE reduces the congestion window as a loss would
//!   (the congestion control's multiplicative decrease), without retransmitting,
//!   at most once per window of data: further ECEs are ignored until SND.UNA
//!   passes SND.MAX as it was at the reduction (Linux's CWR state ending
//!   when something above `high_seq` is acknowledged: the ACK of exactly
//!   that point left the receiver before our CWR could reach it). During
//!   loss recovery or after a retransmission timeout the window was already
//!   reduced: the ECE only asks for a CWR. The next segment with new data
//!   carries CWR; when that is a super-segment, the GSO
//!   metadata's `ecn` flag (`SKB_GSO_TCP_ECN`) says the CWR belongs on the
//!   first wire segment only, which is what the software GSO of
//!   `linerate-offload` and TSO-ECN hardware do.
//!
//! Not done: SYN cookies do not carry the ECN bit (Linux encodes it in the
//! cookie's timestamp bits), so a connection opened from a cookie runs without
//! ECN. Accurate ECN (RFC 9768) is not implemented, because it is not cheap:
//! it needs the AE header bit in a handshake that negotiates three ways and
//! feeds back the SYN's codepoint, a receiver counting CE packets (and, in
//! the AccECN option, CE, ECT(0) and ECT(1) bytes) whose counter replaces the
//! ECE/CWR echo, the AccECN option with its own rules for when it is sent and
//! how middleboxes that strip it are detected, and a sender that turns counter
//! deltas into a congestion response. With a classic congestion control
//! (NewReno, CUBIC) the response would be the same once per round trip as
//! here; the gain is for ECN-scaled controls (DCTCP, Prague), which linerate
//! does not have. An AccECN peer falls back to this RFC 3168 feedback when the
//! other end does not ask for AccECN (RFC 9768 keeps it as the fallback).

use super::seq::Seq;
use super::state::Snd;
use crate::counters::Counters;
use linerate_wire::tcp::Flags;

/// Whether connections use ECN (Linux's `net.ipv4.tcp_ecn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EcnMode {
    /// Never: SYNs do not ask, SYNs that ask get a plain SYN-ACK (`tcp_ecn=0`).
    Off,
    /// Only when the peer asks in its SYN (`tcp_ecn=2`, Linux's default).
    #[default]
    Passive,
    /// Ask on active opens too (`tcp_ecn=1`).
    On,
}

/// The ECN codepoint of a datagram (RFC 3168 section 5): the low two bits of
/// the IPv4 TOS byte or the IPv6 traffic class.
pub const CE: u8 = 0b11;
/// ECT(0), the codepoint we mark data with.
pub const ECT0: u8 = 0b10;

/// A connection's ECN state.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ecn {
    /// Before the handshake completes: we ask (SYN-SENT) or agreed to the
    /// peer's asking (SYN-RECEIVED).
    pub asked: bool,
    /// Negotiated: data goes out ECT(0) and ECE / CWR are acted on.
    pub ok: bool,
    /// Receiver: a CE arrived; every segment carries ECE until CWR.
    pub echo: bool,
    /// Sender: the next segment with new data carries CWR.
    pub cwr_due: bool,
    /// Sender: the window was reduced; ECE is ignored until SND.UNA reaches this.
    pub reduced_until: Option<Seq>,
}

/// True if a SYN asks for ECN (ECE and CWR both set, RFC 3168 section 6.1.1).
pub(crate) fn syn_asks(flags: Flags) -> bool {
    flags.contains(Flags::ECE | Flags::CWR)
}

impl Ecn {
    /// The state of an active open under `mode`.
    pub fn active(mode: EcnMode) -> Ecn {
        Ecn {
            asked: mode == EcnMode::On,
            ..Ecn::default()
        }
    }

    /// The state of a passive open under `mode` for a SYN with `flags`.
    pub fn passive(mode: EcnMode, flags: Flags) -> Ecn {
        Ecn {
            asked: mode != EcnMode::Off && syn_asks(flags),
            ..Ecn::default()
        }
    }

    /// The flags our SYN (`ack` false) or SYN-ACK (`ack` true) adds.
    pub fn syn_flags(&self, ack: bool) -> Flags {
        match (self.asked, ack) {
            (false, _) => Flags::empty(),
            (true, false) => Flags::ECE | Flags::CWR,
            (true, true) => Flags::ECE,
        }
    }

    /// SYN-SENT took the peer's SYN-ACK with `flags`.
    pub fn on_synack(&mut self, flags: Flags, c: &mut Counters) {
        self.ok = self.asked && flags.contains(Flags::ECE) && !flags.contains(Flags::CWR);
        if self.ok {
            c.tcp_ecn_negotiated += 1;
        }
    }

    /// SYN-RECEIVED went to ESTABLISHED.
    pub fn on_established(&mut self, c: &mut Counters) {
        self.ok = self.asked;
        if self.ok {
            c.tcp_ecn_negotiated += 1;
        }
    }

    /// A segment arrived in a synchronized state with `flags`, `ce` set when its
    /// datagram was marked CE. Returns true when an ACK should go out at once
    /// (the first CE of an echo).
    pub fn on_segment(&mut self, flags: Flags, ce: bool, has_data: bool, c: &mut Counters) -> bool {
        if !self.ok {
            return false;
        }
        if flags.contains(Flags::CWR) {
            self.echo = false;
        }
        if ce && has_data {
            c.tcp_ecn_ce_in += 1;
            if !self.echo {
                self.echo = true;
                return true;
            }
        }
        false
    }

    /// An acceptable ACK with `flags` was processed by `snd`: ECE reduces the
    /// window once per window of data.
    pub fn on_ack(&mut self, snd: &mut Snd, flags: Flags, c: &mut Counters) {
        if !self.ok {
            return;
        }
        // The reduction holds until something above its SND.MAX is
        // acknowledged: our CWR goes on the next new data, at that point, so
        // an ACK of exactly it was sent before the receiver could see the CWR
        // and its ECE answers the same mark (Linux's CWR state ends only when
        // `snd_una` is past `high_seq`, `tcp_fastretrans_alert`).
        if self.reduced_until.is_some_and(|end| snd.una > end) {
            self.reduced_until = None;
        }
        if !flags.contains(Flags::ECE) || self.reduced_until.is_some() {
            return;
        }
        match snd.recovery {
            // Loss recovery has reduced the window already.
            Some(rec) => self.reduced_until = Some(rec.recover),
            // So has a retransmission timeout (SND.NXT pulled back).
            None if snd.nxt < snd.max => self.reduced_until = Some(snd.max),
            None => {
                let ss = snd.cc.on_congestion(snd.outstanding());
                // Never a larger window than before (an application-limited
                // flight may be far below cwnd).
                let cwnd = ss.min(snd.cc.cwnd());
                snd.cc.set_cwnd(cwnd);
                self.reduced_until = Some(snd.max);
                c.tcp_ecn_reductions += 1;
            }
        }
        self.cwr_due = true;
    }

    /// The flags a synchronized segment adds: ECE while echoing, and CWR on the
    /// first segment of new data after a reduction (`new_data`).
    pub fn out_flags(&mut self, new_data: bool) -> Flags {
        if !self.ok {
            return Flags::empty();
        }
        let mut f = Flags::empty();
        if self.echo {
            f |= Flags::ECE;
        }
        if new_data && self.cwr_due {
            self.cwr_due = false;
            f |= Flags::CWR;
        }
        f
    }

    /// Whether a segment goes out ECT(0): new data on an ECN connection.
    pub fn ect(&self, data_len: usize, retransmit: bool) -> bool {
        self.ok && data_len > 0 && !retransmit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_mode() {
        let both = Flags::SYN | Flags::ECE | Flags::CWR;
        assert!(!Ecn::passive(EcnMode::Off, both).asked);
        assert!(Ecn::passive(EcnMode::Passive, both).asked);
        assert!(!Ecn::passive(EcnMode::On, Flags::SYN | Flags::ECE).asked);
        assert!(!Ecn::active(EcnMode::Passive).asked);
        let mut e = Ecn::active(EcnMode::On);
        let mut c = Counters::default();
        // A SYN-ACK echoing both bits is a peer that did not understand.
        e.on_synack(Flags::SYN | Flags::ACK | Flags::ECE | Flags::CWR, &mut c);
        assert!(!e.ok);
        e.on_synack(Flags::SYN | Flags::ACK | Flags::ECE, &mut c);
        assert!(e.ok);
        assert_eq!(c.tcp_ecn_negotiated, 1);
    }

    #[test]
    fn echo_lasts_until_cwr_and_cwr_before_ce() {
        let mut e = Ecn {
            ok: true,
            ..Ecn::default()
        };
        let mut c = Counters::default();
        assert!(e.on_segment(Flags::ACK, true, true, &mut c));
        assert!(!e.on_segment(Flags::ACK, false, true, &mut c));
        assert!(e.out_flags(false).contains(Flags::ECE));
        // CWR with CE on the same segment: a new congestion event.
        assert!(e.on_segment(Flags::ACK | Flags::CWR, true, true, &mut c));
        assert!(!e.on_segment(Flags::ACK | Flags::CWR, false, true, &mut c));
        assert!(e.out_flags(false).is_empty());
        // CE on a pure ACK is not congestion on data.
        assert!(!e.on_segment(Flags::ACK, true, false, &mut c));
    }
}
