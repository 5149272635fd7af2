//! Socket options of linerate sockets: what `getsockopt` reports and
//! `setsockopt` keeps.

use super::*;

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
            (libc::IPPROTO_TCP, libc::TCP_INFO) if tcp => OptVal::TcpInfo(match &g.state {
                State::Stream { .. } => 1,    // TCP_ESTABLISHED
                State::Connecting(_) => 2,    // TCP_SYN_SENT
                State::Listener { .. } => 10, // TCP_LISTEN
                _ => 7,                       // TCP_CLOSE
            }),
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
