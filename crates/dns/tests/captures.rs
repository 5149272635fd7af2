//! The parser and the resolver against messages captured between dig and
//! dnsmasq (`testdata/README.md` says how they were made). The expected
//! values are read from dig's own printout of each answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_dns::message::{RData, Record};
use linerate_dns::{Config, Instant, Io, LookupError, Message, Name, RecordType, Resolver};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

fn testdata(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(file)
}

fn bytes(name: &str, kind: &str) -> Vec<u8> {
    std::fs::read(testdata(&format!("{name}.{kind}.bin"))).unwrap()
}

/// What dig printed about an answer.
#[derive(Debug, Default)]
struct Dig {
    id: u16,
    status: String,
    flags: Vec<String>,
    counts: [u16; 4],
    udp: Option<u16>,
    /// Question, answer and authority lines, split on whitespace.
    question: Vec<Vec<String>>,
    answer: Vec<Vec<String>>,
    authority: Vec<Vec<String>>,
}

fn dig(name: &str) -> Dig {
    let text = std::fs::read_to_string(testdata(&format!("{name}.dig.txt"))).unwrap();
    let mut d = Dig::default();
    let mut section = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(";; ->>HEADER<<- ") {
            for part in rest.split(", ") {
                if let Some(s) = part.strip_prefix("status: ") {
                    d.status = s.to_string();
                }
                if let Some(s) = part.strip_prefix("id: ") {
                    d.id = s.parse().unwrap();
                }
            }
        } else if let Some(rest) = line.strip_prefix(";; flags: ") {
            let (flags, counts) = rest.split_once("; ").unwrap();
            d.flags = flags.split(' ').map(str::to_string).collect();
            for (i, c) in counts.split(", ").enumerate() {
                d.counts[i] = c.split(": ").nth(1).unwrap().parse().unwrap();
            }
        } else if let Some(rest) = line.strip_prefix("; EDNS: ") {
            d.udp = Some(rest.rsplit(' ').next().unwrap().parse().unwrap());
        } else if line == ";; QUESTION SECTION:" {
            section = Some(0);
        } else if line == ";; ANSWER SECTION:" {
            section = Some(1);
        } else if line == ";; AUTHORITY SECTION:" {
            section = Some(2);
        } else if line.is_empty() {
            section = None;
        } else if let Some(s) = section {
            let words = line
                .trim_start_matches(';')
                .split_whitespace()
                .map(str::to_string)
                .collect();
            [&mut d.question, &mut d.answer, &mut d.authority][s].push(words);
        }
    }
    d
}

/// A record as dig prints it: name, TTL, class, type, data words (NS data,
/// which the parser keeps raw, left out).
fn dig_words(r: &Record) -> Vec<String> {
    let mut w = vec![
        format!("{}.", r.name),
        r.ttl.to_string(),
        "IN".to_string(),
        r.rtype.to_string(),
    ];
    match &r.data {
        RData::A(a) => w.push(a.to_string()),
        RData::Aaaa(a) => w.push(a.to_string()),
        RData::Cname(n) => w.push(format!("{n}.")),
        RData::Soa(s) => {
            w.push(format!("{}.", s.mname));
            w.push(format!("{}.", s.rname));
            for v in [s.serial, s.refresh, s.retry, s.expire, s.minimum] {
                w.push(v.to_string());
            }
        }
        _ => {}
    }
    w
}

const CAPTURES: &[&str] = &[
    "www-a",
    "www-aaaa",
    "alias-a",
    "nx-a",
    "v4only-aaaa",
    "big-a-udp",
    "big-a-tcp",
];

#[test]
fn answers_parse_as_dig_read_them() {
    for &name in CAPTURES {
        let d = dig(name);
        let m = Message::parse(&bytes(name, "answer")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let h = &m.header;
        assert_eq!(h.id, d.id, "{name}");
        assert_eq!(m.rcode().to_string(), d.status, "{name}");
        for (flag, set) in [
            ("qr", h.response),
            ("aa", h.authoritative),
            ("tc", h.truncated),
            ("rd", h.recursion_desired),
            ("ra", h.recursion_available),
            ("ad", h.authentic_data),
            ("cd", h.checking_disabled),
        ] {
            assert_eq!(d.flags.iter().any(|f| f == flag), set, "{name}: {flag}");
        }
        // dig counts the OPT record in ADDITIONAL.
        let additional = m.additional.len() + usize::from(m.edns.is_some());
        assert_eq!(
            [
                m.questions.len(),
                m.answers.len(),
                m.authority.len(),
                additional
            ],
            d.counts.map(usize::from),
            "{name}"
        );
        assert_eq!(m.edns.map(|e| e.payload), d.udp, "{name}");
        let q = &m.questions[0];
        assert_eq!(
            vec![format!("{}.", q.name), "IN".into(), q.qtype.to_string()],
            d.question[0],
            "{name}"
        );
        assert_eq!(d.answer.len(), m.answers.len(), "{name}");
        for (r, words) in m.answers.iter().zip(&d.answer) {
            assert_eq!(&dig_words(r), words, "{name}");
        }
        for (r, words) in m.authority.iter().zip(&d.authority) {
            let ours = dig_words(r);
            assert_eq!(ours[..], words[..ours.len()], "{name}");
        }
    }
}

#[test]
fn digs_queries_parse() {
    for &name in CAPTURES {
        let d = dig(name);
        let q = Message::parse(&bytes(name, "query")).unwrap();
        assert_eq!(
            q.header.id, d.id,
            "{name}: the answer echoes the query's ID"
        );
        assert!(!q.header.response && q.header.recursion_desired, "{name}");
        assert_eq!(q.questions.len(), 1);
        assert_eq!(format!("{}.", q.questions[0].name), d.question[0][0]);
        assert_eq!(q.edns.map(|e| e.payload), Some(1232), "dig +bufsize=1232");
    }
}

/// Our query for the same question has the layout of dig's up to the end of
/// the question (dig sets AD and adds a cookie option; the rest is RFC 1035's
/// fixed layout), and an OPT record advertising 1232 bytes.
#[test]
fn our_query_matches_digs_question() {
    let dig_q = bytes("www-a", "query");
    let parsed = Message::parse(&dig_q).unwrap();
    let mut ours = Vec::new();
    linerate_dns::message::encode_query(
        parsed.header.id,
        &parsed.questions[0],
        Some(1232),
        &mut ours,
    );
    let qend = 12 + parsed.questions[0].name.as_wire().len() + 4;
    assert_eq!(ours[..2], dig_q[..2], "ID");
    assert_eq!(ours[2] & 0x01, dig_q[2] & 0x01, "RD");
    assert_eq!(ours[4..6], dig_q[4..6], "QDCOUNT");
    assert_eq!(ours[12..qend], dig_q[12..qend], "question");
    let back = Message::parse(&ours).unwrap();
    assert_eq!(back.edns.unwrap().payload, 1232);
    assert_eq!(back.questions, parsed.questions);
}

const SERVER: &str = "127.0.0.1:53";

fn server() -> SocketAddr {
    SERVER.parse().unwrap()
}

fn resolver() -> Resolver {
    let mut cfg = Config::new(vec![server()]);
    cfg.timeout = Duration::from_secs(1);
    Resolver::new(cfg, 42).unwrap()
}

/// Drains the resolver's I/O: the UDP queries (exchange, ID) and TCP
/// connects (exchange, framed query) it asked for.
type Sends = Vec<(linerate_dns::ExchangeId, Vec<u8>)>;

fn drain(r: &mut Resolver) -> (Sends, Sends) {
    let (mut udp, mut tcp) = (Vec::new(), Vec::new());
    while let Some(io) = r.poll_io() {
        match io {
            Io::UdpSend {
                exchange,
                server: s,
                data,
            } => {
                assert_eq!(s, server());
                udp.push((exchange, data));
            }
            Io::TcpConnect {
                exchange,
                server: s,
                data,
            } => {
                assert_eq!(s, server());
                tcp.push((exchange, data));
            }
            Io::Close { .. } => {}
        }
    }
    (udp, tcp)
}

/// The captured answer with the ID of `query`.
fn answer_to(name: &str, query: &[u8]) -> Vec<u8> {
    let mut a = bytes(name, "answer");
    a[..2].copy_from_slice(&query[..2]);
    a
}

fn dig_addrs(name: &str) -> Vec<IpAddr> {
    dig(name)
        .answer
        .iter()
        .filter(|w| w[3] == "A" || w[3] == "AAAA")
        .map(|w| w[4].parse().unwrap())
        .collect()
}

fn lookup_one(r: &mut Resolver, now: Instant, name: &str, t: RecordType) -> linerate_dns::LookupId {
    r.lookup(now, &name.parse::<Name>().unwrap(), t)
}

#[test]
fn resolves_and_caches_a_captured_answer() {
    let mut r = resolver();
    let t0 = Instant::ZERO;
    let id = lookup_one(&mut r, t0, "www.example.test", RecordType::A);
    let (udp, _) = drain(&mut r);
    assert_eq!(udp.len(), 1);
    let (ex, q) = &udp[0];
    r.handle_udp(t0, *ex, server(), &answer_to("www-a", q));
    let (got, res) = r.poll_answer().unwrap();
    assert_eq!(got, id);
    let l = res.unwrap();
    assert_eq!(l.addrs, dig_addrs("www-a"));
    // dig printed TTL 600.
    assert_eq!(l.valid_until, t0 + Duration::from_secs(600));
    // From the cache until the TTL runs out: no query.
    let t1 = t0 + Duration::from_secs(599);
    lookup_one(&mut r, t1, "WWW.example.test", RecordType::A);
    assert_eq!(drain(&mut r).0.len(), 0);
    assert_eq!(
        r.poll_answer().unwrap().1.unwrap().addrs,
        dig_addrs("www-a")
    );
    assert_eq!(r.stats().cache_hits, 1);
    let t2 = t0 + Duration::from_secs(600);
    lookup_one(&mut r, t2, "www.example.test", RecordType::A);
    assert_eq!(drain(&mut r).0.len(), 1, "expired: asked again");
}

#[test]
fn truncated_answer_falls_back_to_tcp() {
    let mut r = resolver();
    let t0 = Instant::ZERO;
    lookup_one(&mut r, t0, "big.example.test", RecordType::A);
    let (udp, _) = drain(&mut r);
    let (ex, q) = &udp[0];
    r.handle_udp(t0, *ex, server(), &answer_to("big-a-udp", q));
    assert!(r.poll_answer().is_none(), "a truncated answer is not used");
    let (udp, tcp) = drain(&mut r);
    assert!(udp.is_empty());
    assert_eq!(tcp.len(), 1);
    let (tex, framed) = &tcp[0];
    // RFC 1035 section 4.2.2: a two-byte length, then the query.
    let len = usize::from(u16::from_be_bytes([framed[0], framed[1]]));
    assert_eq!(len, framed.len() - 2);
    let query = Message::parse(&framed[2..]).unwrap();
    assert_eq!(query.questions[0].name.to_string(), "big.example.test");
    // The answer arrives in three pieces, the prefix split.
    let answer = answer_to("big-a-tcp", &framed[2..]);
    let mut stream = (answer.len() as u16).to_be_bytes().to_vec();
    stream.extend_from_slice(&answer);
    for piece in [&stream[..1], &stream[1..700], &stream[700..]] {
        r.handle_tcp(t0, *tex, piece);
    }
    let l = r.poll_answer().unwrap().1.unwrap();
    assert_eq!(l.addrs.len(), 100);
    assert_eq!(l.addrs, dig_addrs("big-a-tcp"));
    let s = r.stats();
    assert_eq!((s.udp_queries, s.tcp_queries), (1, 1));
}

#[test]
fn follows_a_cname_in_the_answer() {
    let mut r = resolver();
    lookup_one(&mut r, Instant::ZERO, "alias.example.test", RecordType::A);
    let (udp, _) = drain(&mut r);
    r.handle_udp(
        Instant::ZERO,
        udp[0].0,
        server(),
        &answer_to("alias-a", &udp[0].1),
    );
    let l = r.poll_answer().unwrap().1.unwrap();
    assert_eq!(l.addrs, dig_addrs("alias-a"));
    assert_eq!(l.addrs, vec!["192.0.2.10".parse::<IpAddr>().unwrap()]);
}

/// NXDOMAIN and NODATA with the zone's SOA: cached for min(SOA TTL, MINIMUM)
/// (RFC 2308 section 5), both 600 as dig printed them.
#[test]
fn negative_answers_are_cached_from_the_soa() {
    for (capture, name, t, err) in [
        (
            "nx-a",
            "nx.example.test",
            RecordType::A,
            LookupError::NxDomain,
        ),
        (
            "v4only-aaaa",
            "v4only.example.test",
            RecordType::AAAA,
            LookupError::NoRecords,
        ),
    ] {
        let soa = &dig(capture).authority[0];
        assert_eq!(soa[3], "SOA");
        let ttl: u64 = soa[1].parse::<u64>().unwrap().min(soa[10].parse().unwrap());
        let mut r = resolver();
        let t0 = Instant::ZERO;
        lookup_one(&mut r, t0, name, t);
        let (udp, _) = drain(&mut r);
        r.handle_udp(t0, udp[0].0, server(), &answer_to(capture, &udp[0].1));
        assert_eq!(r.poll_answer().unwrap().1, Err(err), "{capture}");
        let almost = t0 + Duration::from_secs(ttl) - Duration::from_millis(1);
        lookup_one(&mut r, almost, name, t);
        assert!(drain(&mut r).0.is_empty(), "{capture}: from the cache");
        assert_eq!(r.poll_answer().unwrap().1, Err(err));
        lookup_one(&mut r, t0 + Duration::from_secs(ttl), name, t);
        assert_eq!(drain(&mut r).0.len(), 1, "{capture}: expired");
    }
}

/// A host lookup asks AAAA and A at once and returns both families.
#[test]
fn host_lookup_asks_both_families_in_parallel() {
    let mut r = resolver();
    let id = r.lookup_host(Instant::ZERO, "www.example.test").unwrap();
    let (udp, _) = drain(&mut r);
    assert_eq!(udp.len(), 2);
    let mut types = Vec::new();
    for (ex, q) in &udp {
        let t = Message::parse(q).unwrap().questions[0].qtype;
        types.push(t);
        let capture = if t == RecordType::A {
            "www-a"
        } else {
            "www-aaaa"
        };
        r.handle_udp(Instant::ZERO, *ex, server(), &answer_to(capture, q));
    }
    types.sort();
    assert_eq!(types, [RecordType::A, RecordType::AAAA]);
    let (got, res) = r.poll_answer().unwrap();
    assert_eq!(got, id);
    let mut want = dig_addrs("www-aaaa");
    want.extend(dig_addrs("www-a"));
    assert_eq!(res.unwrap().addrs, want);
}
