//! The fuzz harness (feature `harness`): what `fuzz/fuzz_targets/dns.rs` and
//! the corpus replay (`tests/fuzz_corpus.rs`) run. Test support, not API.

use crate::{Config, ExchangeId, Instant, Io, Message, Resolver};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

/// A fuzz target: takes any bytes, panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target of this crate, by corpus directory name.
pub const TARGETS: &[(&str, Target)] = &[("dns", dns)];

/// The message parser, and the resolver fed the same bytes as an answer.
///
/// `data` is parsed as a message (any result is fine; none may panic). Then
/// a resolver looks up `example.test`; `data`, with its first two bytes set
/// to the first query's ID, arrives as the UDP answer from the server, and
/// again over TCP (in two pieces) if the resolver asks for TCP. Time then
/// runs out; every lookup must end with exactly one answer, and every
/// exchange the resolver opened must be closed.
pub fn dns(data: &[u8]) {
    if let Ok(m) = Message::parse(data) {
        // What parsed is consistent with the header's counts.
        assert_eq!(m.questions.len(), usize::from(m.header.qdcount));
        assert_eq!(m.answers.len(), usize::from(m.header.ancount));
        assert!(
            m.additional.len() + usize::from(m.edns.is_some()) == usize::from(m.header.arcount)
        );
        for r in m.answers.iter().chain(&m.authority).chain(&m.additional) {
            assert!(r.name.as_wire().len() <= crate::name::MAX_NAME);
        }
    }
    let server = SocketAddr::from(([192, 0, 2, 53], 53));
    let mut cfg = Config::new(vec![server]);
    cfg.timeout = Duration::from_secs(1);
    cfg.attempts = 1;
    let Ok(mut r) = Resolver::new(cfg, 0x5eed) else {
        return;
    };
    let mut now = Instant::ZERO;
    let Ok(id) = r.lookup_host(now, "example.test") else {
        return;
    };
    let mut open = BTreeSet::new();
    let (udp, _) = drain(&mut r, &mut open);
    let Some((ex, query)) = udp.into_iter().next() else {
        return;
    };
    let mut answer = data.to_vec();
    if let (Some(a), Some(q)) = (answer.get_mut(..2), query.get(..2)) {
        a.copy_from_slice(q);
    }
    r.handle_udp(now, ex, server, &answer);
    let (_, tcp) = drain(&mut r, &mut open);
    for (tex, _) in tcp {
        let len = u16::try_from(answer.len())
            .unwrap_or(u16::MAX)
            .to_be_bytes();
        let mut framed = len.to_vec();
        framed.extend_from_slice(&answer);
        let (a, b) = framed.split_at(framed.len() / 2);
        r.handle_tcp(now, tex, a);
        r.handle_tcp(now, tex, b);
        drain(&mut r, &mut open);
    }
    let mut answers = 0;
    for _ in 0..64 {
        while let Some((got, _)) = r.poll_answer() {
            assert_eq!(got, id);
            answers += 1;
        }
        drain(&mut r, &mut open);
        match r.poll_timeout() {
            Some(t) => {
                assert!(t >= now, "a deadline in the past");
                now = t;
                r.handle_timeout(now);
            }
            None => break,
        }
    }
    while let Some((got, _)) = r.poll_answer() {
        assert_eq!(got, id);
        answers += 1;
    }
    drain(&mut r, &mut open);
    assert_eq!(answers, 1, "one answer per lookup");
    assert!(open.is_empty(), "exchanges left open: {open:?}");
    assert_eq!(r.poll_timeout(), None);
}

type Sends = Vec<(ExchangeId, Vec<u8>)>;

/// Takes the resolver's I/O: its UDP sends and TCP connects, keeping `open`
/// (the exchanges not yet closed) up to date.
fn drain(r: &mut Resolver, open: &mut BTreeSet<u64>) -> (Sends, Sends) {
    let (mut udp, mut tcp) = (Vec::new(), Vec::new());
    while let Some(io) = r.poll_io() {
        match io {
            Io::UdpSend { exchange, data, .. } => {
                open.insert(exchange.as_u64());
                udp.push((exchange, data));
            }
            Io::TcpConnect { exchange, data, .. } => {
                open.insert(exchange.as_u64());
                tcp.push((exchange, data));
            }
            Io::Close { exchange } => {
                assert!(open.remove(&exchange.as_u64()), "closed twice");
            }
        }
    }
    (udp, tcp)
}
