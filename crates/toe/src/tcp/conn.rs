//! One connection: its state, its buffers, its timers, and the application's
//! operations on it (RFC 9293 section 3.10.1 to 3.10.6: OPEN, SEND, RECEIVE,
//! CLOSE, ABORT, STATUS).

use super::TcpState;
use super::assembler::Assembler;
use super::recvbuf::RecvBuf;
use super::rtt::RttEstimator;
use super::sendbuf::SendBuf;
use super::seq::Seq;
use super::state::*;
use crate::config::TcpConfig;
use crate::counters::Counters;
use crate::time::{Earliest, Instant};
use linerate_wire::tcp::SynOptions;
use std::net::SocketAddr;

/// Parameters fixed when the connection is made.
#[derive(Debug, Clone)]
pub(crate) struct ConnParams {
    pub tcp: TcpConfig,
    /// Largest MSS our MTU allows.
    pub mtu_mss: u16,
    /// MSS assumed when the peer sends none.
    pub default_mss: u16,
}

/// A TCP connection.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub state: State,
    /// Send buffer: bytes from SND.UNA (ISS + 1 before the handshake completes).
    pub tx: SendBuf,
    /// Receive buffer: readable bytes (adopted frames, then a ring), then
    /// out-of-order bytes past them.
    pub rx: RecvBuf,
    pub asm: Assembler,
    /// SACK blocks of the duplicate ACKs owed (`tcp::sack_owed`).
    pub sack_owed: super::sack_owed::OwedSacks,
    pub params: ConnParams,
    /// Random offset added to our timestamp clock (RFC 7323 section 5.4).
    pub ts_offset: u32,
    /// The application asked to close the sending side (CLOSE or shutdown).
    pub close_requested: bool,
    /// The application will not read again (CLOSE): the connection is orphaned.
    pub app_closed: bool,
    /// Set when the connection reaches ESTABLISHED; taken by the engine.
    pub became_established: bool,
    /// An RST to send because the application aborted.
    pub send_rst: bool,
    /// The listener that created it (passive open), not yet accepted.
    pub listener: Option<usize>,
    /// No-delay (Nagle off), per connection.
    pub no_delay: bool,
    /// Keep-alive settings and state (`tcp::keepalive`).
    pub ka: super::keepalive::KaState,
    /// Whether out-of-order data may be kept now: the engine clears it while its
    /// budget over all connections ([`crate::TcpConfig::ofo_total`]) is spent.
    pub ofo_allowed: bool,
    /// A challenge ACK (RFC 5961) is wanted; the engine sends it if its rate
    /// limit allows (RFC 5961 section 7).
    pub challenge_pending: bool,
    /// Receive-window auto-tuning (`tcp::autotune`).
    pub tune: super::autotune::RcvTune,
    /// ECN negotiation and feedback (`tcp::ecn`).
    pub ecn: super::ecn::Ecn,
}

impl Conn {
    #[inline(always)]
    fn new(
        local: SocketAddr,
        remote: SocketAddr,
        state: State,
        params: ConnParams,
        ts_offset: u32,
    ) -> Conn {
        let rcv_cap = super::autotune::initial_capacity(&params.tcp, Conn::our_shift(&params));
        Conn {
            local,
            remote,
            state,
            tx: SendBuf::new(params.tcp.send_buffer),
            rx: RecvBuf::new(rcv_cap),
            tune: super::autotune::RcvTune::new(&params.tcp, rcv_cap, params.mtu_mss),
            asm: Assembler::new(),
            sack_owed: Default::default(),
            no_delay: params.tcp.no_delay,
            params,
            ts_offset,
            close_requested: false,
            app_closed: false,
            became_established: false,
            send_rst: false,
            listener: None,
            ka: Default::default(),
            ofo_allowed: true,
            challenge_pending: false,
            ecn: Default::default(),
        }
    }

    /// Our timestamp clock (milliseconds plus the offset).
    pub fn ts_now(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts_offset)
    }

    /// The window scale shift that lets the receive buffer, grown to its most,
    /// be advertised whole.
    pub(crate) fn our_shift(params: &ConnParams) -> u8 {
        let buf = params.tcp.recv_buffer;
        let mut s = 0u8;
        while s < linerate_wire::tcp::options::MAX_WINDOW_SCALE && (buf >> s) > 65_535 {
            s += 1;
        }
        s
    }

    /// The options we offer in a SYN.
    fn our_syn_options(params: &ConnParams, tsval: u32) -> SynOptions {
        let t = &params.tcp;
        SynOptions {
            mss: Some(params.mtu_mss),
            window_scale: t.window_scaling.then(|| Conn::our_shift(params)),
            sack_permitted: t.sack,
            timestamps: t.timestamps.then_some((tsval, 0)),
        }
    }

    fn rtt(params: &ConnParams) -> RttEstimator {
        RttEstimator::new(params.tcp.min_rto, params.tcp.max_rto)
    }

    /// An active open (RFC 9293 section 3.10.1): SYN-SENT with `iss`.
    #[inline]
    pub fn connect(
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
        params: ConnParams,
    ) -> Conn {
        let tsval = (now.as_millis() as u32).wrapping_add(ts_offset);
        let ours = Conn::our_syn_options(&params, tsval);
        let st = SynSent {
            iss: Seq(iss),
            ours,
            rtt: Conn::rtt(&params),
            sent_at: None,
            rto_at: None,
            retries: 0,
            send_syn: true,
        };
        let ecn = super::ecn::Ecn::active(params.tcp.ecn);
        let mut c = Conn::new(local, remote, State::SynSent(st), params, ts_offset);
        c.ecn = ecn;
        c
    }

    /// A passive open from a listener that received `syn` (RFC 9293 section
    /// 3.10.7.2): SYN-RECEIVED, echoing only the options the peer offered
    /// (RFC 7323 sections 2.2 and 3.2, RFC 2018 section 2).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn accept_syn(
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        ts_offset: u32,
        params: ConnParams,
        syn: &super::segment::Segment<'_>,
        listener: usize,
    ) -> Conn {
        let tsval = (now.as_millis() as u32).wrapping_add(ts_offset);
        let mut ours = Conn::our_syn_options(&params, tsval);
        let peer = syn.opts;
        if peer.window_scale.is_none() {
            ours.window_scale = None;
        }
        ours.sack_permitted &= peer.sack_permitted;
        match (ours.timestamps, peer.timestamps) {
            (Some(_), Some((peer_val, _))) => ours.timestamps = Some((tsval, peer_val)),
            _ => ours.timestamps = None,
        }
        let st = SynRcvd {
            cookie: false,
            iss: Seq(iss),
            irs: syn.seq,
            ours,
            peer,
            ts_recent: peer.timestamps.map_or(0, |t| t.0),
            rtt: Conn::rtt(&params),
            rto_at: None,
            retries: 0,
            send_synack: true,
            active: false,
        };
        let ecn = super::ecn::Ecn::passive(params.tcp.ecn, syn.flags);
        let mut c = Conn::new(local, remote, State::SynRcvd(st), params, ts_offset);
        c.listener = Some(listener);
        c.ecn = ecn;
        c
    }

    /// The SYN-ACK options of a cookie answer to a SYN with options `peer`
    /// (RFC 4987 section 3.6): without timestamps only the MSS, since window
    /// scaling and SACK could not be recovered from the ACK (Linux does the same);
    /// with them, `ts` (our TSval, options encoded in its low bits) and the peer's
    /// TSval, and window scale and SACK as usual.
    pub fn cookie_syn_options(params: &ConnParams, peer: &SynOptions, ts: u32) -> SynOptions {
        let mut ours = Conn::our_syn_options(params, ts);
        match (ours.timestamps, peer.timestamps) {
            (Some(_), Some((peer_val, _))) => {
                if peer.window_scale.is_none() {
                    ours.window_scale = None;
                }
                ours.sack_permitted &= peer.sack_permitted;
                let tsval = super::cookie::ts_encode(
                    ts,
                    ours.window_scale.and(peer.window_scale),
                    ours.sack_permitted,
                );
                ours.timestamps = Some((tsval, peer_val));
            }
            _ => {
                ours.window_scale = None;
                ours.sack_permitted = false;
                ours.timestamps = None;
            }
        }
        ours
    }

    /// A passive open from a validated SYN cookie (RFC 4987 section 3.6): the
    /// state the SYN would have made, rebuilt from the ACK (`irs` is its sequence
    /// number less one, `ack_ts` its timestamps) and the cookie's MSS. The ACK
    /// itself is then processed as in SYN-RECEIVED.
    #[allow(clippy::too_many_arguments)]
    pub fn from_cookie(
        local: SocketAddr,
        remote: SocketAddr,
        iss: u32,
        irs: u32,
        ts_offset: u32,
        params: ConnParams,
        mss: u16,
        ack_ts: Option<(u32, u32)>,
        listener: usize,
    ) -> Conn {
        let mut ours = Conn::our_syn_options(&params, 0);
        let ts = ack_ts.filter(|_| ours.timestamps.is_some());
        let dec = ts.map(|(_, tsecr)| super::cookie::ts_decode(tsecr, mss));
        let peer = SynOptions {
            mss: Some(mss),
            window_scale: dec.and_then(|d| d.window_scale),
            sack_permitted: dec.is_some_and(|d| d.sack_permitted),
            timestamps: ts,
        };
        if peer.window_scale.is_none() {
            ours.window_scale = None;
        }
        ours.sack_permitted &= peer.sack_permitted;
        ours.timestamps = ts.map(|(tsval, tsecr)| (tsecr, tsval));
        let st = SynRcvd {
            cookie: true,
            iss: Seq(iss),
            irs: Seq(irs),
            ours,
            peer,
            ts_recent: ts.map_or(0, |t| t.0),
            rtt: Conn::rtt(&params),
            rto_at: None,
            retries: 0,
            send_synack: false,
            active: false,
        };
        let mut c = Conn::new(local, remote, State::SynRcvd(st), params, ts_offset);
        c.listener = Some(listener);
        c
    }

    /// The public state name.
    pub fn tcp_state(&self) -> TcpState {
        self.state.name()
    }

    /// Appends to the send buffer (SEND); returns the bytes taken.
    #[inline]
    pub fn send(&mut self, data: &[u8]) -> usize {
        self.tx.push(data)
    }

    /// True if the application may still write.
    pub fn can_send(&self) -> bool {
        !self.close_requested
            && matches!(
                self.state,
                State::SynSent(_) | State::SynRcvd(_) | State::Established(_) | State::CloseWait(_)
            )
    }

    /// Our FIN (and so everything before it) was acknowledged: FIN-WAIT-2,
    /// TIME-WAIT, or closed in order.
    pub fn fin_acked(&self) -> bool {
        matches!(self.state, State::FinWait2(_) | State::TimeWait(_))
            || matches!(&self.state, State::Closed(c) if c.reason == CloseReason::Normal)
    }

    /// True once the peer's FIN has been received (all data before it is in `rx`).
    pub fn fin_received(&self) -> bool {
        matches!(
            self.state,
            State::CloseWait(_) | State::Closing(_) | State::LastAck(_) | State::TimeWait(_)
        ) || matches!(&self.state, State::Closed(c) if c.reason == CloseReason::Normal)
    }

    /// Reads from the receive buffer (RECEIVE); returns the bytes copied. May
    /// decide a window update is due.
    pub fn recv(&mut self, out: &mut [u8]) -> usize {
        let n = self.rx.pop(out);
        if n > 0 {
            self.maybe_window_update();
            self.release_drained();
        }
        n
    }

    /// RFC 9293 section 3.8.6.2.2: after the application reads, announce the
    /// larger window if the advertised one had shrunk below half the buffer and
    /// the right edge can move by at least min(buffer / 2, MSS).
    ///
    /// Not while out-of-order data waits for a hole and the window is held
    /// (`window_field`): the update could only repeat the last ACK, and to a
    /// sender without SACK that is one more duplicate ACK than segments
    /// arrived (Linux's sender takes the excess for reordering and raises its
    /// duplicate threshold). The ACK that fills the hole opens the window.
    pub(super) fn maybe_window_update(&mut self) {
        let cap = self.rx.capacity();
        let free = self.rx.free();
        let hole = !self.asm.is_empty();
        if let Some(rcv) = self.state.rcv_mut() {
            let advertised = rcv.adv_right.since(rcv.nxt);
            if hole && super::output::holds_window(rcv, free) {
                return;
            }
            let new_right = rcv.nxt.plus(free);
            let gain = new_right.since(rcv.adv_right);
            if advertised < cap / 2 && gain >= (cap / 2).min(rcv.seg_max.max(1)) {
                rcv.ack_now = true;
            }
        }
    }

    /// CLOSE of the sending side: a FIN follows the buffered data (RFC 9293
    /// section 3.10.4). Applied as soon as the state allows it: in SYN-SENT and
    /// SYN-RECEIVED it waits for ESTABLISHED.
    pub fn shutdown(&mut self) {
        self.close_requested = true;
        self.apply_close();
    }

    /// Moves to the closing state if a close was requested and the state allows.
    /// Inlined: it runs after every event, and seldom has anything to do.
    #[inline]
    pub fn apply_close(&mut self) {
        if self.close_requested
            && matches!(
                self.state,
                State::SynSent(_) | State::Established(_) | State::CloseWait(_)
            )
        {
            self.close_now();
        }
    }

    #[inline(never)]
    fn close_now(&mut self) {
        // Only these states move on a close. The state (most of a kilobyte)
        // is moved out once and the new one built in its place.
        let normal = State::Closed(Closed {
            reason: CloseReason::Normal,
        });
        match self.state {
            // Nothing sent yet and nobody left to want it: delete the TCB (RFC 9293
            // section 3.10.4). With data queued, the FIN waits for ESTABLISHED.
            State::SynSent(_) if self.app_closed && self.tx.is_empty() => {
                self.state = State::Closed(Closed {
                    reason: CloseReason::Aborted,
                });
            }
            State::Established(_) => {
                if let State::Established(e) = std::mem::replace(&mut self.state, normal) {
                    self.state = State::FinWait1(FinWait1 {
                        snd: e.snd,
                        rcv: e.rcv,
                    });
                }
            }
            State::CloseWait(_) => {
                if let State::CloseWait(s) = std::mem::replace(&mut self.state, normal) {
                    self.state = State::LastAck(LastAck {
                        snd: s.snd,
                        rcv: s.rcv,
                    });
                }
            }
            _ => {}
        }
    }

    /// ABORT (RFC 9293 section 3.10.5): an RST goes out if the peer knows us.
    pub fn abort(&mut self) {
        self.send_rst = matches!(
            self.state,
            State::SynRcvd(_)
                | State::Established(_)
                | State::FinWait1(_)
                | State::FinWait2(_)
                | State::CloseWait(_)
        );
        if !self.send_rst {
            self.state = State::Closed(Closed {
                reason: CloseReason::Aborted,
            });
        }
    }

    /// The reason, once closed.
    pub fn close_reason(&self) -> Option<CloseReason> {
        match &self.state {
            State::Closed(c) => Some(c.reason),
            _ => None,
        }
    }

    /// The earliest deadline of any timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        // One match (this runs after every event): the delayed ACK unless an
        // ACK goes out now anyway, the send space's RTO, persist and RACK-TLP
        // timers, the handshake's RTO, the TIME-WAIT expiry, keep-alive;
        // folded as nanoseconds, not as options.
        let ack = |r: &Rcv| if r.ack_now { None } else { r.ack_at };
        let both = |s: &Snd, r: &Rcv| {
            Earliest::NONE
                .with(s.rto_at)
                .with(s.persist.map(|p| p.at))
                .with(s.rack.pto_at)
                .with(s.rack.reo_at)
                .with(ack(r))
        };
        let t = match &self.state {
            State::SynSent(s) => Earliest::NONE.with(s.rto_at),
            State::SynRcvd(s) => Earliest::NONE.with(s.rto_at),
            State::Established(s) => both(&s.snd, &s.rcv),
            State::FinWait1(s) => both(&s.snd, &s.rcv),
            State::CloseWait(s) => both(&s.snd, &s.rcv),
            State::Closing(s) => both(&s.snd, &s.rcv),
            State::LastAck(s) => both(&s.snd, &s.rcv),
            State::FinWait2(s) => Earliest::NONE.with(ack(&s.rcv)),
            State::TimeWait(t) => Earliest::NONE.with(ack(&t.rcv)).with(Some(t.expiry)),
            State::Closed(_) => Earliest::NONE,
        };
        if self.ka.cfg.is_some() {
            t.with(self.keepalive_deadline()).get()
        } else {
            t.get()
        }
    }

    /// Runs the timers due at `now` (RFC 6298 section 5.4 to 5.7, RFC 9293
    /// sections 3.8.3, 3.8.6.1 and 3.8.6.3, and the TIME-WAIT expiry).
    pub fn on_timeout(&mut self, now: Instant, c: &mut Counters) {
        let max_retries = self.params.tcp.max_retries;
        let syn_retries = self.params.tcp.syn_retries;
        let closed = |reason| State::Closed(Closed { reason });
        match &mut self.state {
            State::SynSent(s) if s.rto_at.is_some_and(|t| t <= now) => {
                s.rto_at = None;
                if s.retries >= syn_retries {
                    c.tcp_attempt_fails += 1;
                    self.state = closed(CloseReason::TimedOut);
                    return;
                }
                s.retries += 1;
                s.rtt.back_off();
                s.send_syn = true;
                c.tcp_timeouts += 1;
            }
            State::SynRcvd(s) if s.rto_at.is_some_and(|t| t <= now) => {
                s.rto_at = None;
                if s.retries >= syn_retries {
                    c.tcp_attempt_fails += 1;
                    self.state = closed(CloseReason::TimedOut);
                    return;
                }
                s.retries += 1;
                s.rtt.back_off();
                s.send_synack = true;
                c.tcp_timeouts += 1;
            }
            State::TimeWait(t) if t.expiry <= now => {
                self.state = closed(CloseReason::Normal);
                return;
            }
            _ => {}
        }
        if let Some(r) = self.state.rcv_mut()
            && r.ack_at.is_some_and(|t| t <= now)
        {
            r.ack_now = true;
            r.ack_at = None;
        }
        let tx_len = self.tx.len();
        let mut timed_out = false;
        if let Some(s) = self.state.snd_mut() {
            s.on_rack_timers(now, c);
            if let Some(p) = &mut s.persist
                && p.at <= now
            {
                // As many unanswered probes as retransmissions: the peer is gone.
                if p.unanswered >= max_retries {
                    timed_out = true;
                }
                // Probe now (output sends one byte beyond the window); back off.
                p.probes = p.probes.saturating_add(1);
                p.unanswered = p.unanswered.saturating_add(1);
                let shift = p.probes.min(16);
                let wait = s.rtt.rto().saturating_mul(1 << shift).min(s.rtt.max_rto());
                p.at = now + wait;
                p.due = true;
                c.tcp_window_probes += 1;
            }
            if s.rto_at.is_some_and(|t| t <= now) {
                s.rto_at = None;
                if s.retries >= max_retries {
                    timed_out = true;
                } else {
                    // RFC 6298 5.4 to 5.6, RFC 5681 equation 4, RFC 2018 section 5.1.
                    s.retries += 1;
                    c.tcp_timeouts += 1;
                    let flight = s.max.since(s.una).min(tx_len);
                    s.undo_begin(true);
                    s.cc.on_rto(flight);
                    s.rtt.back_off();
                    s.recovery = None;
                    s.dupacks = 0;
                    s.sack.clear();
                    s.nxt = s.una;
                    s.timed = None;
                    s.rack_on_rto();
                }
            }
        }
        if timed_out {
            c.tcp_estab_resets += u64::from(matches!(
                self.state,
                State::Established(_) | State::CloseWait(_)
            ));
            self.state = closed(CloseReason::TimedOut);
        }
        self.keepalive_on_timeout(now, c);
    }
}
