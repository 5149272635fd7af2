//! Socket options of linerate sockets: what `getsockopt` reports and
//! `setsockopt` keeps.

use super::*;
use linerate_toe::{Keepalive, TcpInfo, TcpState};

impl Core {
    /// `getsockopt`. `None`: the kernel's.
    pub(crate) fn getsockopt(&self, level: c_int, name: c_int) -> Option<R<OptVal>> {
        if !self.is_linerate() {
            return None;
        }
        let mut g = lock(&self.st);
        let o = g.opts;
        let b = |v: bool| OptVal::Int(c_int::from(v));
        let tcp = self.kind == Kind::Tcp;
        Some(Ok(match (level, name) {
            (libc::SOL_SOCKET, libc::SO_ERROR) => OptVal::Int(std::mem::take(&mut g.so_error)),
            (libc::SOL_SOCKET, libc::SO_TYPE) => OptVal::Int(if tcp {
                libc::SOCK_STREAM
            } else {
                libc::SOCK_DGRAM
            }),
            (libc::SOL_SOCKET, libc::SO_DOMAIN) => OptVal::Int(self.domain),
            (libc::SOL_SOCKET, libc::SO_PROTOCOL) => OptVal::Int(if tcp {
                libc::IPPROTO_TCP
            } else {
                libc::IPPROTO_UDP
            }),
            (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => b(matches!(g.state, State::Listener { .. })),
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => b(o.reuseaddr),
            (libc::SOL_SOCKET, libc::SO_REUSEPORT) => b(o.reuseport),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => b(o.keepalive),
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => OptVal::Int(if o.rcvbuf > 0 {
                o.rcvbuf.saturating_mul(2)
            } else {
                256 * 1024
            }),
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => OptVal::Int(if o.sndbuf > 0 {
                o.sndbuf.saturating_mul(2)
            } else {
                256 * 1024
            }),
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => OptVal::Time(o.rcvtimeo),
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => OptVal::Time(o.sndtimeo),
            (libc::SOL_SOCKET, libc::SO_LINGER) => OptVal::Linger(o.linger),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) if tcp => b(o.nodelay),
            (libc::IPPROTO_TCP, libc::TCP_MAXSEG) if tcp => {
                let mtu = stack::config().map_or(1500, |c| c.nic.mtu);
                OptVal::Int(c_int::from(mtu) - 52)
            }
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) if tcp => OptVal::Str("cubic"),
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) if tcp => {
                OptVal::Int(o.keepidle.unwrap_or(7200))
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) if tcp => {
                OptVal::Int(o.keepintvl.unwrap_or(75))
            }
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) if tcp => OptVal::Int(o.keepcnt.unwrap_or(9)),
            (libc::IPPROTO_TCP, libc::TCP_INFO) if tcp => {
                let info = match &g.state {
                    State::Stream { s, .. } => {
                        let (q, h) = (s.queue(), s.engine_handle());
                        drop(g);
                        return Some(Ok(OptVal::TcpInfo(stream_info(q, h))));
                    }
                    State::Connecting(_) => TcpInfoVals::state(2), // TCP_SYN_SENT
                    State::Listener { .. } => TcpInfoVals::state(10), // TCP_LISTEN
                    _ => TcpInfoVals::state(7),                    // TCP_CLOSE
                };
                OptVal::TcpInfo(info)
            }
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) if self.domain == libc::AF_INET6 => b(o.v6only),
            _ => {
                unknown_option(level, name);
                return Some(Err(libc::ENOPROTOOPT));
            }
        }))
    }

    /// `setsockopt`. `None`: the kernel's.
    pub(crate) fn setsockopt(&self, level: c_int, name: c_int, v: OptSet) -> Option<R<()>> {
        if !self.is_linerate() {
            return None;
        }
        let mut g = lock(&self.st);
        let tcp = self.kind == Kind::Tcp;
        let int = match v {
            OptSet::Int(i) => Some(i),
            _ => None,
        };
        let o = &mut g.opts;
        let flag = |slot: &mut bool| match int {
            Some(i) => {
                *slot = i != 0;
                Ok(())
            }
            None => Err(libc::EINVAL),
        };
        let r = match (level, name) {
            (libc::SOL_SOCKET, libc::SO_REUSEADDR) => flag(&mut o.reuseaddr),
            (libc::SOL_SOCKET, libc::SO_REUSEPORT) => flag(&mut o.reuseport),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => flag(&mut o.keepalive),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY) if tcp => flag(&mut o.nodelay),
            (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) if self.domain == libc::AF_INET6 => {
                flag(&mut o.v6only)
            }
            (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
                int.map(|i| o.rcvbuf = i.max(0)).ok_or(libc::EINVAL)
            }
            (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                int.map(|i| o.sndbuf = i.max(0)).ok_or(libc::EINVAL)
            }
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => match v {
                OptSet::Time(t) => {
                    o.rcvtimeo = t;
                    Ok(())
                }
                _ => Err(libc::EINVAL),
            },
            (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => match v {
                OptSet::Time(t) => {
                    o.sndtimeo = t;
                    Ok(())
                }
                _ => Err(libc::EINVAL),
            },
            (libc::SOL_SOCKET, libc::SO_LINGER) => match v {
                OptSet::Linger(on, secs) => {
                    o.linger = on.then_some(secs.max(0));
                    Ok(())
                }
                _ => Err(libc::EINVAL),
            },
            (libc::IPPROTO_TCP, libc::TCP_CONGESTION) if tcp => Ok(()),
            // Kept and reported back (the engine has no keepalive timer
            // yet), in Linux's ranges: seconds 1 to 32767, probes 1 to 127.
            (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) if tcp => keep(int, 32767, &mut o.keepidle),
            (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) if tcp => keep(int, 32767, &mut o.keepintvl),
            (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) if tcp => keep(int, 127, &mut o.keepcnt),
            _ => {
                unknown_option(level, name);
                Err(libc::ENOPROTOOPT)
            }
        };
        // Options the engine has a knob for reach a connected stream at once.
        let engine_opt = matches!(
            (level, name),
            (libc::SOL_SOCKET, libc::SO_KEEPALIVE)
                | (
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY
                        | libc::TCP_KEEPIDLE
                        | libc::TCP_KEEPINTVL
                        | libc::TCP_KEEPCNT
                )
        );
        if r.is_ok()
            && engine_opt
            && let State::Stream { s, .. } = &g.state
        {
            apply_stream_opts(s, &g.opts, false);
        }
        Some(r)
    }

    /// Which `getsockopt`/`setsockopt` value shape an option takes.
    pub(crate) fn opt_shape(level: c_int, name: c_int) -> OptShape {
        match (level, name) {
            (libc::SOL_SOCKET, libc::SO_RCVTIMEO | libc::SO_SNDTIMEO) => OptShape::Time,
            (libc::SOL_SOCKET, libc::SO_LINGER) => OptShape::Linger,
            _ => OptShape::Int,
        }
    }
}

/// Keeps a keepalive setting `v` if it is in `1..=max` (else `EINVAL`, as
/// Linux answers).
fn keep(v: Option<c_int>, max: c_int, slot: &mut Option<c_int>) -> R<()> {
    match v {
        Some(i) if (1..=max).contains(&i) => {
            *slot = Some(i);
            Ok(())
        }
        _ => Err(libc::EINVAL),
    }
}

/// Hands the options the engine has knobs for (`TCP_NODELAY`, keep-alive)
/// to a stream's queue thread. `fresh`: the stream just connected, and
/// needs no word about options still at their defaults (Nagle on,
/// keep-alive off).
pub(super) fn apply_stream_opts(s: &TcpStream, o: &Opts, fresh: bool) {
    if !fresh || o.nodelay {
        let _ = s.set_nodelay(o.nodelay);
    }
    if !fresh || o.keepalive {
        let ka = o.keepalive.then(|| Keepalive {
            idle: secs(o.keepidle, 7200),
            interval: secs(o.keepintvl, 75),
            probes: o.keepcnt.map_or(9, |n| u32::try_from(n).unwrap_or(9)),
        });
        let _ = s.set_keepalive(ka);
    }
}

fn secs(v: Option<c_int>, default: u64) -> Duration {
    Duration::from_secs(v.and_then(|s| u64::try_from(s).ok()).unwrap_or(default))
}

/// What `TCP_INFO` reports: the fields of Linux's `struct tcp_info` the
/// engine has figures for; the others stay zero.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TcpInfoVals {
    pub(crate) state: u8,
    pub(crate) options: u8,
    pub(crate) snd_wscale: u8,
    pub(crate) rcv_wscale: u8,
    /// Microseconds.
    pub(crate) rto: u32,
    pub(crate) snd_mss: u32,
    pub(crate) unacked: u32,
    pub(crate) retransmits: u8,
    /// Microseconds.
    pub(crate) rtt: u32,
    pub(crate) rttvar: u32,
    pub(crate) snd_ssthresh: u32,
    pub(crate) snd_cwnd: u32,
    pub(crate) min_rtt: u32,
    pub(crate) notsent_bytes: u32,
}

impl TcpInfoVals {
    fn state(state: u8) -> TcpInfoVals {
        TcpInfoVals {
            state,
            ..TcpInfoVals::default()
        }
    }
}

/// Asks the stream's queue thread for its figures. A stream whose
/// connection is gone reports CLOSE, as Linux's does.
fn stream_info(queue: usize, h: linerate_toe::SocketHandle) -> TcpInfoVals {
    let Some(stack) = stack::stack() else {
        return TcpInfoVals::state(7);
    };
    match stack
        .handle
        .with_engine_blocking(queue, move |e| e.tcp_info(h))
    {
        Ok(Ok(i)) => from_engine(&i),
        _ => TcpInfoVals::state(7),
    }
}

/// SO_LINGER with a time: the last close waits, as Linux's does, until the
/// peer has acknowledged everything sent and the FIN (the connection is in
/// FIN-WAIT-2 or TIME-WAIT, or gone: a reset, or the engine done with it) or
/// until `time` has passed; then it returns and the close goes on without
/// the program. The stream is already dropped, so the engine sends what
/// was staged and then its FIN; the state is asked of the queue thread
/// every few milliseconds (a close with a linger time is rare and may wait
/// seconds, so it is not worth a wake of its own).
pub(crate) fn linger_close(queue: usize, h: linerate_toe::SocketHandle, time: Duration) {
    let deadline = std::time::Instant::now() + time;
    loop {
        // FIN-WAIT-2, TIME-WAIT, CLOSE.
        if matches!(stream_info(queue, h).state, 5..=7) {
            return;
        }
        let now = std::time::Instant::now();
        if now >= deadline {
            return;
        }
        std::thread::sleep((deadline - now).min(Duration::from_millis(2)));
    }
}

fn from_engine(i: &TcpInfo) -> TcpInfoVals {
    let us = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
    let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let mss = i.snd_mss.max(1);
    // Linux's option bits: TCPI_OPT_TIMESTAMPS 1, SACK 2, WSCALE 4, ECN 8.
    let options = u8::from(i.timestamps)
        | u8::from(i.sack) << 1
        | u8::from(i.snd_wscale > 0 || i.rcv_wscale > 0) << 2
        | u8::from(i.ecn) << 3;
    TcpInfoVals {
        state: linux_state(i.state),
        options,
        snd_wscale: i.snd_wscale,
        rcv_wscale: i.rcv_wscale,
        rto: us(i.rto),
        snd_mss: n(i.snd_mss),
        // Linux counts segments for these.
        unacked: n(i.unacked.div_ceil(mss)),
        retransmits: u8::try_from(i.retransmits).unwrap_or(u8::MAX),
        rtt: i.srtt.map_or(0, us),
        rttvar: 0,
        snd_ssthresh: if i.ssthresh == usize::MAX {
            0x7fff_ffff // Linux's TCP_INFINITE_SSTHRESH
        } else {
            n(i.ssthresh / mss)
        },
        snd_cwnd: n(i.cwnd.div_ceil(mss)),
        min_rtt: i.min_rtt.map_or(u32::MAX, us),
        notsent_bytes: n(i.send_queue),
    }
}

/// Linux's `TCP_*` state numbers.
fn linux_state(s: TcpState) -> u8 {
    match s {
        TcpState::Established => 1,
        TcpState::SynSent => 2,
        TcpState::SynReceived => 3,
        TcpState::FinWait1 => 4,
        TcpState::FinWait2 => 5,
        TcpState::TimeWait => 6,
        TcpState::Closed => 7,
        TcpState::CloseWait => 8,
        TcpState::LastAck => 9,
        TcpState::Listen => 10,
        TcpState::Closing => 11,
    }
}
