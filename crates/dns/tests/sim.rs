//! The resolver in simulated time: retries across servers, rotation, server
//! errors, validation of answers, CNAME chains, TCP failures, the cache's
//! bound. Answers are written here byte by byte in RFC 1035 section 4.1's
//! layout (not with the crate's own encoder).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_dns::{
    Config, ExchangeId, Instant, Io, LookupError, Message, Name, Rcode, RecordType, Resolver,
};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

const S0: &str = "192.0.2.1:53";
const S1: &str = "192.0.2.2:53";

fn resolver(servers: &[&str], tune: impl FnOnce(&mut Config)) -> Resolver {
    let mut cfg = Config::new(servers.iter().map(|s| addr(s)).collect());
    cfg.timeout = Duration::from_secs(1);
    cfg.attempts = 2;
    tune(&mut cfg);
    Resolver::new(cfg, 7).unwrap()
}

#[derive(Debug)]
struct Sent {
    exchange: ExchangeId,
    server: SocketAddr,
    query: Vec<u8>,
    tcp: bool,
}

fn drain(r: &mut Resolver, closed: &mut Vec<ExchangeId>) -> Vec<Sent> {
    let mut out = Vec::new();
    while let Some(io) = r.poll_io() {
        match io {
            Io::UdpSend {
                exchange,
                server,
                data,
            } => out.push(Sent {
                exchange,
                server,
                query: data,
                tcp: false,
            }),
            Io::TcpConnect {
                exchange,
                server,
                data,
            } => out.push(Sent {
                exchange,
                server,
                query: data[2..].to_vec(),
                tcp: true,
            }),
            Io::Close { exchange } => closed.push(exchange),
        }
    }
    out
}

/// Writes a name uncompressed.
fn name(out: &mut Vec<u8>, n: &str) {
    for label in n.split('.') {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

struct Rr<'a> {
    owner: &'a str,
    rtype: u16,
    ttl: u32,
    data: Vec<u8>,
}

fn a(owner: &str, ttl: u32, ip: [u8; 4]) -> Rr<'_> {
    Rr {
        owner,
        rtype: 1,
        ttl,
        data: ip.to_vec(),
    }
}

fn cname<'a>(owner: &'a str, ttl: u32, target: &str) -> Rr<'a> {
    let mut data = Vec::new();
    name(&mut data, target);
    Rr {
        owner,
        rtype: 5,
        ttl,
        data,
    }
}

/// An answer to `query` (its ID and question copied), with `rcode`, flags
/// `tc`, and the records.
fn answer(query: &[u8], rcode: u8, tc: bool, answers: &[Rr<'_>]) -> Vec<u8> {
    let q = Message::parse(query).unwrap();
    let mut m = Vec::new();
    m.extend_from_slice(&query[..2]);
    let flags: u16 = 0x8000 | 0x0100 | 0x0080 | u16::from(rcode) | if tc { 0x0200 } else { 0 };
    m.extend_from_slice(&flags.to_be_bytes());
    for c in [1u16, answers.len() as u16, 0, 0] {
        m.extend_from_slice(&c.to_be_bytes());
    }
    name(&mut m, &q.questions[0].name.to_string());
    m.extend_from_slice(&q.questions[0].qtype.0.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    for rr in answers {
        name(&mut m, rr.owner);
        m.extend_from_slice(&rr.rtype.to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&rr.ttl.to_be_bytes());
        m.extend_from_slice(&(rr.data.len() as u16).to_be_bytes());
        m.extend_from_slice(&rr.data);
    }
    m
}

fn qname(query: &[u8]) -> String {
    Message::parse(query).unwrap().questions[0].name.to_string()
}

fn lookup_a(r: &mut Resolver, now: Instant, n: &str) -> linerate_dns::LookupId {
    r.lookup(now, &n.parse::<Name>().unwrap(), RecordType::A)
}

/// resolv.conf's order: each server once, then each again; a try every
/// `timeout`; then the lookup fails, every exchange closed.
#[test]
fn timeouts_walk_the_servers_then_fail() {
    let mut r = resolver(&[S0, S1], |_| {});
    let mut closed = Vec::new();
    let id = lookup_a(&mut r, Instant::ZERO, "www.example.test");
    let mut now = Instant::ZERO;
    let mut log = Vec::new();
    loop {
        for s in drain(&mut r, &mut closed) {
            log.push((now, s.server, s.exchange));
        }
        match r.poll_timeout() {
            Some(t) => {
                now = t;
                r.handle_timeout(now);
            }
            None => break,
        }
    }
    let sec = |s| Instant::ZERO + Duration::from_secs(s);
    let order: Vec<_> = log.iter().map(|&(t, s, _)| (t, s)).collect();
    assert_eq!(
        order,
        vec![
            (sec(0), addr(S0)),
            (sec(1), addr(S1)),
            (sec(2), addr(S0)),
            (sec(3), addr(S1)),
        ]
    );
    assert_eq!(now, sec(4));
    assert_eq!(r.poll_answer(), Some((id, Err(LookupError::TimedOut))));
    let mut opened: Vec<_> = log.iter().map(|&(_, _, e)| e).collect();
    opened.sort();
    closed.sort();
    assert_eq!(opened, closed, "every exchange closed");
    assert_eq!(r.stats().timeouts, 4);
    // Every query had its own ID.
    assert_eq!(r.stats().udp_queries, 4);
}

/// A late answer to an earlier try still counts while the question is open.
#[test]
fn a_late_answer_to_an_earlier_try_counts() {
    let mut r = resolver(&[S0, S1], |_| {});
    let mut closed = Vec::new();
    lookup_a(&mut r, Instant::ZERO, "late.test");
    let first = drain(&mut r, &mut closed).remove(0);
    let t1 = Instant::from_millis(1000);
    r.handle_timeout(t1);
    let second = drain(&mut r, &mut closed).remove(0);
    assert_eq!(second.server, addr(S1));
    let t = Instant::from_millis(1200);
    let ans = answer(&first.query, 0, false, &[a("late.test", 60, [10, 0, 0, 1])]);
    r.handle_udp(t, first.exchange, addr(S0), &ans);
    let l = r.poll_answer().unwrap().1.unwrap();
    assert_eq!(l.addrs, vec![IpAddr::from([10, 0, 0, 1])]);
    drain(&mut r, &mut closed);
    assert!(closed.contains(&first.exchange) && closed.contains(&second.exchange));
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn rotate_starts_each_lookup_at_the_next_server() {
    for (rotate, want) in [(false, [S0, S0, S0]), (true, [S0, S1, S0])] {
        let mut r = resolver(&[S0, S1], |c| c.rotate = rotate);
        let mut closed = Vec::new();
        let firsts: Vec<SocketAddr> = ["a.test", "b.test", "c.test"]
            .iter()
            .map(|n| {
                lookup_a(&mut r, Instant::ZERO, n);
                drain(&mut r, &mut closed)[0].server
            })
            .collect();
        assert_eq!(firsts, want.map(addr), "rotate {rotate}");
    }
}

/// SERVFAIL, REFUSED and NOTIMP move on to the next server at once; when
/// every try fails so, the lookup says the last RCODE.
#[test]
fn server_errors_try_the_next_server_at_once() {
    let mut r = resolver(&[S0, S1], |c| c.attempts = 1);
    let mut closed = Vec::new();
    let t = Instant::from_millis(5);
    lookup_a(&mut r, Instant::ZERO, "www.example.test");
    let q0 = drain(&mut r, &mut closed).remove(0);
    r.handle_udp(t, q0.exchange, addr(S0), &answer(&q0.query, 2, false, &[]));
    let q1 = drain(&mut r, &mut closed).remove(0);
    assert_eq!(q1.server, addr(S1), "SERVFAIL: the next server, at once");
    assert!(closed.contains(&q0.exchange));
    let ans = answer(
        &q1.query,
        0,
        false,
        &[a("www.example.test", 30, [1, 2, 3, 4])],
    );
    r.handle_udp(t, q1.exchange, addr(S1), &ans);
    assert_eq!(
        r.poll_answer().unwrap().1.unwrap().addrs,
        vec![IpAddr::from([1, 2, 3, 4])]
    );

    let mut r = resolver(&[S0, S1], |c| c.attempts = 1);
    lookup_a(&mut r, Instant::ZERO, "x.test");
    for rcode in [5u8, 4] {
        let q = drain(&mut r, &mut closed).remove(0);
        r.handle_udp(
            t,
            q.exchange,
            q.server,
            &answer(&q.query, rcode, false, &[]),
        );
    }
    assert_eq!(
        r.poll_answer().unwrap().1,
        Err(LookupError::ServerFailure(Rcode::NOTIMP))
    );
    assert_eq!(r.stats().server_errors, 2);
}

/// RFC 5452 section 4.2: wrong source address or port, wrong ID, another
/// question, QR clear, garbage: dropped, counted, the try goes on.
#[test]
fn answers_that_do_not_match_are_dropped() {
    let mut r = resolver(&[S0], |_| {});
    let mut closed = Vec::new();
    let t = Instant::from_millis(10);
    lookup_a(&mut r, Instant::ZERO, "www.example.test");
    let q = drain(&mut r, &mut closed).remove(0);
    let good = answer(
        &q.query,
        0,
        false,
        &[a("www.example.test", 30, [1, 1, 1, 1])],
    );
    let mut wrong_id = good.clone();
    wrong_id[1] ^= 1;
    let mut not_response = good.clone();
    not_response[2] &= 0x7f;
    let mut other_query = q.query.clone();
    // The first label's first letter: "xww.example.test".
    other_query[13] = b'x';
    let other_question = answer(
        &other_query,
        0,
        false,
        &[a("xww.example.test", 30, [6, 6, 6, 6])],
    );
    r.handle_udp(t, q.exchange, addr("192.0.2.1:5353"), &good);
    r.handle_udp(t, q.exchange, addr("192.0.2.9:53"), &good);
    r.handle_udp(t, q.exchange, addr(S0), &wrong_id);
    r.handle_udp(t, q.exchange, addr(S0), &not_response);
    r.handle_udp(t, q.exchange, addr(S0), &other_question);
    r.handle_udp(t, q.exchange, addr(S0), &good[..good.len() - 1]);
    assert_eq!(r.poll_answer(), None);
    assert_eq!(r.stats().mismatched, 5);
    assert_eq!(r.stats().malformed, 1);
    // The question in another case still matches (RFC 4343).
    let mut upper = good.clone();
    upper[13..16].copy_from_slice(b"WWW");
    r.handle_udp(t, q.exchange, addr(S0), &upper);
    assert_eq!(
        r.poll_answer().unwrap().1.unwrap().addrs,
        vec![IpAddr::from([1, 1, 1, 1])]
    );
}

/// A CNAME whose target the server did not resolve is asked again for the
/// target; the TTL of the whole is the chain's smallest.
#[test]
fn an_unresolved_cname_is_followed_with_a_new_question() {
    let mut r = resolver(&[S0], |_| {});
    let mut closed = Vec::new();
    let t = Instant::ZERO;
    lookup_a(&mut r, t, "alias.test");
    let q = drain(&mut r, &mut closed).remove(0);
    r.handle_udp(
        t,
        q.exchange,
        addr(S0),
        &answer(&q.query, 0, false, &[cname("alias.test", 20, "real.other")]),
    );
    let q2 = drain(&mut r, &mut closed).remove(0);
    assert_eq!(qname(&q2.query), "real.other");
    let ans = answer(&q2.query, 0, false, &[a("real.other", 300, [9, 9, 9, 9])]);
    r.handle_udp(t, q2.exchange, addr(S0), &ans);
    let l = r.poll_answer().unwrap().1.unwrap();
    assert_eq!(l.addrs, vec![IpAddr::from([9, 9, 9, 9])]);
    assert_eq!(l.valid_until, t + Duration::from_secs(20));
}

#[test]
fn cname_loops_and_long_chains_are_bounded() {
    let mut r = resolver(&[S0], |c| c.max_cnames = 3);
    let mut closed = Vec::new();
    lookup_a(&mut r, Instant::ZERO, "a.test");
    let q = drain(&mut r, &mut closed).remove(0);
    let looped = answer(
        &q.query,
        0,
        false,
        &[cname("a.test", 5, "b.test"), cname("b.test", 5, "a.test")],
    );
    r.handle_udp(Instant::ZERO, q.exchange, addr(S0), &looped);
    assert_eq!(
        r.poll_answer().unwrap().1,
        Err(LookupError::CnameChainTooLong)
    );
    // A chain spread over answers, each naming one more alias.
    lookup_a(&mut r, Instant::ZERO, "c0.test");
    let mut asked = 0;
    for i in 0..10 {
        let Some(q) = drain(&mut r, &mut closed).into_iter().next() else {
            break;
        };
        asked += 1;
        let (from, to) = (format!("c{i}.test"), format!("c{}.test", i + 1));
        r.handle_udp(
            Instant::ZERO,
            q.exchange,
            addr(S0),
            &answer(&q.query, 0, false, &[cname(&from, 5, &to)]),
        );
    }
    assert_eq!(asked, 4, "the original and three aliases");
    assert_eq!(
        r.poll_answer().unwrap().1,
        Err(LookupError::CnameChainTooLong)
    );
}

/// A TCP connection that ends without an answer is a failed try: the next
/// server, over UDP.
#[test]
fn tcp_failure_moves_on() {
    let mut r = resolver(&[S0, S1], |_| {});
    let mut closed = Vec::new();
    let t = Instant::from_millis(1);
    lookup_a(&mut r, Instant::ZERO, "big.test");
    let q = drain(&mut r, &mut closed).remove(0);
    r.handle_udp(t, q.exchange, addr(S0), &answer(&q.query, 0, true, &[]));
    let tq = drain(&mut r, &mut closed).remove(0);
    assert!(tq.tcp && tq.server == addr(S0));
    // Half a length prefix, then the end.
    r.handle_tcp(t, tq.exchange, &[0]);
    r.handle_tcp_closed(t, tq.exchange);
    let next = drain(&mut r, &mut closed).remove(0);
    assert!(!next.tcp && next.server == addr(S1));
    assert!(closed.contains(&tq.exchange));
    assert_eq!(r.stats().tcp_failures, 1);
    // The TCP try times out like any other.
    r.handle_udp(
        t,
        next.exchange,
        addr(S1),
        &answer(&next.query, 0, true, &[]),
    );
    let tq2 = drain(&mut r, &mut closed).remove(0);
    assert!(tq2.tcp && tq2.server == addr(S1));
    r.handle_timeout(t + Duration::from_secs(1));
    let again = drain(&mut r, &mut closed).remove(0);
    assert_eq!((again.tcp, again.server), (false, addr(S0)));
}

#[test]
fn the_cache_is_bounded() {
    let mut r = resolver(&[S0], |c| c.cache_size = 4);
    let mut closed = Vec::new();
    for i in 0..20u8 {
        let n = format!("h{i}.test");
        lookup_a(&mut r, Instant::ZERO, &n);
        let q = drain(&mut r, &mut closed).remove(0);
        let ans = answer(
            &q.query,
            0,
            false,
            &[a(&n, 100 + u32::from(i), [10, 0, 0, i])],
        );
        r.handle_udp(Instant::ZERO, q.exchange, addr(S0), &ans);
        assert!(r.poll_answer().unwrap().1.is_ok());
        assert!(r.cache_len() <= 4);
    }
    // The longest-lived entries stayed.
    lookup_a(&mut r, Instant::ZERO, "h19.test");
    assert!(drain(&mut r, &mut closed).is_empty());
    lookup_a(&mut r, Instant::ZERO, "h0.test");
    assert_eq!(drain(&mut r, &mut closed).len(), 1);
}

/// A zero TTL is used once and not cached.
#[test]
fn zero_ttl_is_not_cached() {
    let mut r = resolver(&[S0], |_| {});
    let mut closed = Vec::new();
    for _ in 0..2 {
        lookup_a(&mut r, Instant::ZERO, "z.test");
        let q = drain(&mut r, &mut closed).remove(0);
        r.handle_udp(
            Instant::ZERO,
            q.exchange,
            addr(S0),
            &answer(&q.query, 0, false, &[a("z.test", 0, [1, 0, 0, 1])]),
        );
        assert!(r.poll_answer().unwrap().1.is_ok());
    }
    assert_eq!(r.stats().cache_hits, 0);
}

/// Query IDs are unpredictable: they depend on the seed, and in-flight ones
/// never repeat.
#[test]
fn query_ids_differ_and_depend_on_the_seed() {
    let ids = |seed: u128| {
        let cfg = Config::new(vec![addr(S0)]);
        let mut r = Resolver::new(cfg, seed).unwrap();
        let mut closed = Vec::new();
        (0..50)
            .map(|i| {
                lookup_a(&mut r, Instant::ZERO, &format!("n{i}.test"));
                let q = drain(&mut r, &mut closed).remove(0);
                u16::from_be_bytes([q.query[0], q.query[1]])
            })
            .collect::<Vec<_>>()
    };
    let a = ids(1);
    let mut uniq = a.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), a.len());
    assert_ne!(a, ids(2));
    assert_eq!(a, ids(1), "a seed replays");
}

#[test]
fn cancel_closes_and_answers_once() {
    let mut r = resolver(&[S0], |_| {});
    let mut closed = Vec::new();
    let id = r.lookup_host(Instant::ZERO, "c.test").unwrap();
    let sent = drain(&mut r, &mut closed);
    assert_eq!(sent.len(), 2);
    r.cancel(id);
    drain(&mut r, &mut closed);
    assert_eq!(closed.len(), 2);
    assert_eq!(r.poll_answer(), Some((id, Err(LookupError::Cancelled))));
    assert_eq!(r.poll_answer(), None);
    assert_eq!(r.poll_timeout(), None);
}

#[test]
fn bad_names_are_refused() {
    let mut r = resolver(&[S0], |_| {});
    assert!(r.lookup_host(Instant::ZERO, "a..b").is_err());
    assert!(r.lookup_host(Instant::ZERO, &"x".repeat(64)).is_err());
    assert!(r.poll_io().is_none());
}
