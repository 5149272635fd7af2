//! One read or write of a stream or a datagram, and the state moving on
//! by what the runtime answered.

use super::*;

/// Moves the state on by what the runtime answered: a connect's outcome,
/// accepted connections. True if a connect ended (both sides then need a
/// look).
pub(super) fn advance(st: &mut St, cx: &mut Context<'_>) -> bool {
    match &mut st.state {
        State::Connecting(f) => match f.as_mut().poll(cx) {
            Poll::Pending => false,
            Poll::Ready(Ok(s)) => {
                // Options set while it connected take effect now.
                opts::apply_stream_opts(&s, &st.opts, true);
                st.state = State::Stream {
                    s,
                    peek: Vec::new(),
                    rd_shut: false,
                    wr_shut: false,
                };
                true
            }
            Poll::Ready(Err(e)) => {
                st.so_error = errno_of(&e);
                st.state = State::Failed;
                true
            }
        },
        State::Listener {
            l,
            ready,
            err,
            v4,
            v6,
        } => {
            while err.is_none() {
                match l.poll_accept(cx) {
                    Poll::Ready(Ok(c)) => {
                        // A peer of a family this socket does not take is
                        // refused with a reset, as a kernel without such a
                        // listener would refuse its SYN.
                        if if c.1.is_ipv4() { *v4 } else { *v6 } {
                            ready.push_back(c);
                        } else {
                            c.0.set_linger(Some(std::time::Duration::ZERO));
                        }
                    }
                    Poll::Ready(Err(e)) => *err = Some(errno_of(&e)),
                    Poll::Pending => break,
                }
            }
            false
        }
        _ => false,
    }
}

/// One read of a stream or one datagram, into `buf`.
pub(super) fn recv_once(
    st: &mut St,
    cx: &mut Context<'_>,
    buf: &mut [u8],
    peek: bool,
    domain: c_int,
) -> Poll<R<(usize, Option<SocketAddr>, usize)>> {
    if st.so_error != 0 {
        return Poll::Ready(Err(std::mem::take(&mut st.so_error)));
    }
    match &mut st.state {
        State::Stream {
            s,
            peek: held,
            rd_shut,
            ..
        } => {
            if buf.is_empty() {
                return Poll::Ready(Ok((0, None, 0)));
            }
            if !held.is_empty() {
                let n = held.len().min(buf.len());
                if let (Some(d), Some(h)) = (buf.get_mut(..n), held.get(..n)) {
                    d.copy_from_slice(h);
                }
                if peek {
                    return Poll::Ready(Ok((n, None, n)));
                }
                held.drain(..n);
                // As the kernel's one receive queue: what came after the
                // peeked bytes follows them in the same call.
                let mut more = 0;
                if let Some(rest) = buf.get_mut(n..)
                    && !rest.is_empty()
                    && held.is_empty()
                {
                    let mut rb = ReadBuf::new(rest);
                    if let Poll::Ready(Ok(())) = Pin::new(&mut *s).poll_read(cx, &mut rb) {
                        more = rb.filled().len();
                    }
                }
                return Poll::Ready(Ok((n + more, None, n + more)));
            }
            if *rd_shut {
                return Poll::Ready(Ok((0, None, 0)));
            }
            if peek {
                held.resize(buf.len(), 0);
                let mut rb = ReadBuf::new(held);
                let r = Pin::new(&mut *s).poll_read(cx, &mut rb);
                let n = rb.filled().len();
                held.truncate(n);
                return match r {
                    Poll::Ready(Ok(())) => {
                        if let (Some(d), Some(h)) = (buf.get_mut(..n), held.get(..n)) {
                            d.copy_from_slice(h);
                        }
                        Poll::Ready(Ok((n, None, n)))
                    }
                    Poll::Ready(Err(e)) => Poll::Ready(Err(errno_of(&e))),
                    Poll::Pending => Poll::Pending,
                };
            }
            let mut rb = ReadBuf::new(buf);
            match Pin::new(s).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let n = rb.filled().len();
                    Poll::Ready(Ok((n, None, n)))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(errno_of(&e))),
                Poll::Pending => Poll::Pending,
            }
        }
        State::Udp {
            s,
            peer,
            peek: held,
        } => {
            loop {
                if let Some((d, from)) = held {
                    let n = d.len().min(buf.len());
                    if let (Some(dst), Some(src)) = (buf.get_mut(..n), d.get(..n)) {
                        dst.copy_from_slice(src);
                    }
                    let r = (n, Some(in_domain(domain, *from)), d.len());
                    if !peek {
                        *held = None;
                    }
                    return Poll::Ready(Ok(r));
                }
                let from = if peek {
                    let mut d = vec![0u8; MAX_DATAGRAM];
                    let mut rb = ReadBuf::new(&mut d);
                    match s.poll_recv_from(cx, &mut rb) {
                        Poll::Ready(Ok(from)) => {
                            let n = rb.filled().len();
                            d.truncate(n);
                            *held = Some((d, from));
                            from
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(errno_of(&e))),
                        Poll::Pending => return Poll::Pending,
                    }
                } else {
                    let full = s.next_datagram_len();
                    let mut rb = ReadBuf::new(buf);
                    match s.poll_recv_from(cx, &mut rb) {
                        Poll::Ready(Ok(from)) => {
                            if peer.is_none_or(|p| p == from) {
                                let n = rb.filled().len();
                                let full = full.unwrap_or(n);
                                return Poll::Ready(Ok((
                                    n,
                                    Some(in_domain(domain, from)),
                                    full.max(n),
                                )));
                            }
                            from
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(errno_of(&e))),
                        Poll::Pending => return Poll::Pending,
                    }
                };
                // A connected socket takes datagrams from its peer only.
                if peer.is_some_and(|p| p != from) {
                    *held = None;
                }
            }
        }
        State::Connecting(_) => Poll::Pending,
        State::Failed => Poll::Ready(Ok((0, None, 0))),
        State::Listener { .. } | State::Undecided { .. } => Poll::Ready(Err(libc::ENOTCONN)),
        State::Closed => Poll::Ready(Err(libc::EBADF)),
    }
}

/// One write of a stream or one datagram.
pub(super) fn send_once(
    st: &mut St,
    cx: &mut Context<'_>,
    data: &[u8],
    to: Option<SocketAddr>,
) -> Poll<R<usize>> {
    if st.so_error != 0 {
        return Poll::Ready(Err(std::mem::take(&mut st.so_error)));
    }
    match &mut st.state {
        State::Stream { s, wr_shut, .. } => {
            if *wr_shut {
                return Poll::Ready(Err(libc::EPIPE));
            }
            match Pin::new(s).poll_write(cx, data) {
                Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(match errno_of(&e) {
                    libc::ENOTCONN | libc::ECONNABORTED => libc::EPIPE,
                    n => n,
                })),
                Poll::Pending => Poll::Pending,
            }
        }
        State::Udp { s, peer, .. } => {
            let Some(to) = to.map(unmapped).or(*peer) else {
                return Poll::Ready(Err(libc::EDESTADDRREQ));
            };
            if data.len() > MAX_DATAGRAM {
                return Poll::Ready(Err(libc::EMSGSIZE));
            }
            match s.poll_send_to(cx, data, to) {
                Poll::Ready(Ok(n)) => Poll::Ready(Ok(n)),
                Poll::Ready(Err(e)) => Poll::Ready(Err(errno_of(&e))),
                Poll::Pending => Poll::Pending,
            }
        }
        State::Connecting(_) => Poll::Pending,
        State::Failed | State::Listener { .. } | State::Undecided { .. } => {
            Poll::Ready(Err(libc::EPIPE))
        }
        State::Closed => Poll::Ready(Err(libc::EBADF)),
    }
}
