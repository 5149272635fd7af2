//! The sans-IO stub resolver: lookups in, datagrams and TCP bytes out.
//!
//! Like the engine, a [`Resolver`] owns no socket and no clock. The driver
//! starts lookups ([`Resolver::lookup_host`], [`Resolver::lookup`]), carries
//! out what [`Resolver::poll_io`] asks (send a datagram from a socket of the
//! exchange's own, connect over TCP and write, close), feeds back what
//! arrives ([`Resolver::handle_udp`], [`Resolver::handle_tcp`],
//! [`Resolver::handle_tcp_closed`]), calls [`Resolver::handle_timeout`] at
//! [`Resolver::poll_timeout`], and collects results from
//! [`Resolver::poll_answer`].
//!
//! # Exchanges
//!
//! Every try of a question is an *exchange*: one query with a fresh
//! unpredictable ID (SipHash of a counter, keyed by the caller's seed) sent
//! from a socket the driver opens for that exchange alone, so each try has
//! its own source port too (RFC 5452 section 9.2; the driver picks the port,
//! randomly). An exchange stays open,
//! and a late answer to it counts, until its question is answered; then
//! [`Io::Close`] releases its socket.
//!
//! # Validation (RFC 5452 section 4.2)
//!
//! A datagram counts only if it comes from the address and port the
//! exchange's query went to, carries the query's ID, has QR set and opcode
//! QUERY, and echoes the question (name without regard to case, type,
//! class). Anything else is dropped and counted ([`Stats::mismatched`],
//! [`Stats::malformed`]), and the exchange goes on waiting: a forged or
//! stray datagram cannot end a lookup.
//!
//! # Answers
//!
//! * TC set in a UDP answer: the question is asked again over TCP, of the
//!   same server (RFC 7766 section 5), framed with a two-byte length
//!   (RFC 1035 section 4.2.2).
//! * NOERROR: the answer section is walked from the question's name through
//!   its CNAMEs (RFC 1034 section 3.6.2; at most [`Config::max_cnames`]) to
//!   the records of the type asked; a chain that ends without them and
//!   without an SOA (the server did not follow it) is asked again for its
//!   last name. No records and an SOA: no data (RFC 2308 section 2.2).
//! * NXDOMAIN: the name does not exist (RFC 6604: after the CNAMEs, the
//!   last name).
//! * SERVFAIL, REFUSED, NOTIMP, FORMERR and the rest: the next try starts at
//!   once, with the next server.
//! * No answer within [`Config::timeout`]: the next try. When the tries run
//!   out the lookup fails ([`LookupError::TimedOut`], or
//!   [`LookupError::ServerFailure`] when a server did answer with an error).

use crate::cache::{Cache, Cached};
use crate::config::{Config, ConfigError};
use crate::message::{CLASS_IN, Message, Question, RData, Rcode, RecordType, encode_query};
use crate::name::{Name, NameError};
use crate::rng::Rng;
use crate::time::Instant;
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Largest TCP message with its length prefix.
const TCP_MAX: usize = 2 + 65_535;

/// A lookup, as [`Resolver::lookup_host`] and [`Resolver::lookup`] return it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LookupId(u64);

/// One try of one question: a query and the socket it goes out on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExchangeId(u64);

impl ExchangeId {
    /// A number unique among the resolver's exchanges, for a driver's tables.
    pub fn as_u64(self) -> u64 {
        self.0
    }
}

/// What the driver does next, from [`Resolver::poll_io`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Send `data` as one UDP datagram to `server`, from the exchange's own
    /// socket: open one (on a random source port) at the exchange's first
    /// datagram, and feed what it receives to [`Resolver::handle_udp`].
    UdpSend {
        /// The exchange.
        exchange: ExchangeId,
        /// Where to.
        server: SocketAddr,
        /// The query.
        data: Vec<u8>,
    },
    /// Open a TCP connection to `server` for the exchange and write `data`
    /// (the query with its length prefix); feed what arrives to
    /// [`Resolver::handle_tcp`], and a failure or the end of the stream to
    /// [`Resolver::handle_tcp_closed`].
    TcpConnect {
        /// The exchange.
        exchange: ExchangeId,
        /// Where to.
        server: SocketAddr,
        /// The framed query.
        data: Vec<u8>,
    },
    /// The exchange is over: close its socket or connection.
    Close {
        /// The exchange.
        exchange: ExchangeId,
    },
}

/// A finished lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The name asked about.
    pub name: Name,
    /// The addresses: IPv6 first, then IPv4, for a host lookup (RFC 6724's
    /// default preference), each family in the server's order.
    pub addrs: Vec<IpAddr>,
    /// Until when the answer may be used (the smallest TTL in it).
    pub valid_until: Instant,
}

/// Why a lookup failed; each variant says what the caller can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupError {
    /// The name does not exist (NXDOMAIN): asking again will not help.
    NxDomain,
    /// The name exists but has no address of the kind asked (NOERROR, no
    /// data): asking for another family may.
    NoRecords,
    /// No server answered in time on any try: the servers are down or
    /// unreachable; try later.
    TimedOut,
    /// Every try was answered with an error, the last one this (SERVFAIL,
    /// REFUSED, ...): the servers cannot answer for this name now.
    ServerFailure(Rcode),
    /// The CNAME chain is longer than [`Config::max_cnames`] (or loops).
    CnameChainTooLong,
    /// The lookup was cancelled ([`Resolver::cancel`]).
    Cancelled,
}

impl core::fmt::Display for LookupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            LookupError::NxDomain => f.write_str("the name does not exist (NXDOMAIN)"),
            LookupError::NoRecords => f.write_str("the name has no address records"),
            LookupError::TimedOut => f.write_str("no DNS server answered in time"),
            LookupError::ServerFailure(r) => write!(f, "the DNS servers answered {r}"),
            LookupError::CnameChainTooLong => f.write_str("the CNAME chain is too long"),
            LookupError::Cancelled => f.write_str("the lookup was cancelled"),
        }
    }
}

impl std::error::Error for LookupError {}

/// Counters, like a kernel's `netstat -s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Lookups started.
    pub lookups: u64,
    /// Questions answered from the cache.
    pub cache_hits: u64,
    /// Queries sent over UDP.
    pub udp_queries: u64,
    /// Queries sent over TCP (after a truncated answer).
    pub tcp_queries: u64,
    /// Tries that got no answer in time.
    pub timeouts: u64,
    /// Answers with an error RCODE other than NXDOMAIN (the next server was
    /// asked).
    pub server_errors: u64,
    /// Datagrams dropped for not matching their exchange: wrong source, ID
    /// or question, QR clear, or an unknown exchange.
    pub mismatched: u64,
    /// Datagrams or TCP messages dropped because they do not parse.
    pub malformed: u64,
    /// TCP connections that ended without an answer.
    pub tcp_failures: u64,
}

/// One try in flight.
#[derive(Debug)]
struct Exchange {
    lookup: LookupId,
    part: usize,
    server: SocketAddr,
    id: u16,
    /// TCP: the bytes received so far; `None` for UDP.
    tcp: Option<Vec<u8>>,
}

/// The resolution of one question (one name and type) of a lookup.
#[derive(Debug)]
struct Query {
    /// The name asked now (the original, or a CNAME target).
    qname: Name,
    qtype: RecordType,
    /// CNAMEs followed from the original name.
    cnames: u8,
    /// When the CNAMEs followed so far expire.
    chain_expires: Option<Instant>,
    /// Tries started.
    tries: u32,
    /// The first server's index.
    start: usize,
    deadline: Instant,
    /// The last error RCODE a server answered with.
    last_rcode: Option<Rcode>,
    exchanges: Vec<ExchangeId>,
}

type PartResult = Result<(Vec<IpAddr>, Instant), LookupError>;

#[derive(Debug)]
enum Part {
    Pending(Box<Query>),
    Done(PartResult),
}

#[derive(Debug)]
struct LookupState {
    name: Name,
    /// The record type of each part.
    types: Vec<RecordType>,
    parts: Vec<Part>,
}

/// The resolver; see the [module docs](self).
#[derive(Debug)]
pub struct Resolver {
    cfg: Config,
    rng: Rng,
    cache: Cache,
    next_lookup: u64,
    next_exchange: u64,
    rotate: usize,
    lookups: BTreeMap<LookupId, LookupState>,
    exchanges: BTreeMap<ExchangeId, Exchange>,
    io: VecDeque<Io>,
    answers: VecDeque<(LookupId, Result<Lookup, LookupError>)>,
    stats: Stats,
}

/// What an answer means for its question.
enum Outcome {
    /// Addresses, and when the records used expire.
    Addrs(Vec<IpAddr>, Instant),
    /// Ask again for the CNAME target: the server did not follow it.
    Follow(Name, u8, Instant),
    /// A final negative answer, cached until the instant if there is one.
    Negative(LookupError, Option<Instant>),
    /// A failed try: the next one.
    Retry(Rcode),
    /// Fatal for the question.
    Fail(LookupError),
}

impl Resolver {
    /// A resolver asking `cfg`'s servers. `seed` is the secret the query IDs
    /// are drawn from: 128 bits from the operating system's generator
    /// (`getrandom(2)`), as the runtime's driver does; a fixed seed only to
    /// replay a test.
    pub fn new(cfg: Config, seed: u128) -> Result<Resolver, ConfigError> {
        cfg.validate()?;
        Ok(Resolver {
            cache: Cache::new(cfg.cache_size),
            cfg,
            rng: Rng::new(seed),
            next_lookup: 0,
            next_exchange: 0,
            rotate: 0,
            lookups: BTreeMap::new(),
            exchanges: BTreeMap::new(),
            io: VecDeque::new(),
            answers: VecDeque::new(),
            stats: Stats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Entries in the cache now (expired ones included until they are looked
    /// up or pushed out).
    pub fn cache_len(&self) -> usize {
        self.cache.len()
    }

    /// Looks up the IPv4 and IPv6 addresses of `name`, both questions in
    /// parallel. The answer ([`Resolver::poll_answer`]) has every address
    /// found when at least one family has some; otherwise the error says why
    /// (NXDOMAIN before a failure to answer, that before no records).
    pub fn lookup_host(&mut self, now: Instant, name: &str) -> Result<LookupId, NameError> {
        let name = Name::from_ascii(name)?;
        Ok(self.start(now, name, vec![RecordType::AAAA, RecordType::A]))
    }

    /// [`Resolver::lookup_host`] for a name already parsed.
    pub fn lookup_host_name(&mut self, now: Instant, name: &Name) -> LookupId {
        self.start(now, name.clone(), vec![RecordType::AAAA, RecordType::A])
    }

    /// Looks up records of one type, [`RecordType::A`] or
    /// [`RecordType::AAAA`], of `name`.
    pub fn lookup(&mut self, now: Instant, name: &Name, rtype: RecordType) -> LookupId {
        self.start(now, name.clone(), vec![rtype])
    }

    /// Stops a lookup: its exchanges close, and its answer is
    /// [`LookupError::Cancelled`] (so every lookup has exactly one answer).
    pub fn cancel(&mut self, id: LookupId) {
        if let Some(l) = self.lookups.remove(&id) {
            for part in l.parts {
                if let Part::Pending(q) = part {
                    for ex in q.exchanges {
                        self.close(ex);
                    }
                }
            }
            self.answers.push_back((id, Err(LookupError::Cancelled)));
        }
    }

    /// The next thing to do, if any (see [`Io`]). Changes after any call that
    /// takes `now`.
    pub fn poll_io(&mut self) -> Option<Io> {
        self.io.pop_front()
    }

    /// The next finished lookup, if any.
    pub fn poll_answer(&mut self) -> Option<(LookupId, Result<Lookup, LookupError>)> {
        self.answers.pop_front()
    }

    /// When to call [`Resolver::handle_timeout`]: the earliest deadline of a
    /// try in flight (`None`: nothing waits). Changes after any call that
    /// takes `now`.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.lookups
            .values()
            .flat_map(|l| l.parts.iter())
            .filter_map(|p| match p {
                Part::Pending(q) => Some(q.deadline),
                Part::Done(_) => None,
            })
            .min()
    }

    /// Moves every try whose time is up to the next one, or fails its
    /// question when the tries have run out.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<(LookupId, usize)> = self
            .lookups
            .iter()
            .flat_map(|(id, l)| {
                l.parts
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, p)| match p {
                        Part::Pending(q) if q.deadline <= now => Some((*id, i)),
                        _ => None,
                    })
            })
            .collect();
        for (id, part) in due {
            self.stats.timeouts += 1;
            self.next_try(now, id, part);
        }
    }

    /// A datagram `data` from `from` on the socket of `exchange`.
    pub fn handle_udp(
        &mut self,
        now: Instant,
        exchange: ExchangeId,
        from: SocketAddr,
        data: &[u8],
    ) {
        let Some(ex) = self.exchanges.get(&exchange) else {
            self.stats.mismatched += 1;
            return;
        };
        if ex.tcp.is_some() || from != ex.server {
            self.stats.mismatched += 1;
            return;
        }
        self.handle_message(now, exchange, data, false);
    }

    /// Bytes `data` received on the TCP connection of `exchange`.
    pub fn handle_tcp(&mut self, now: Instant, exchange: ExchangeId, data: &[u8]) {
        let Some(buf) = self
            .exchanges
            .get_mut(&exchange)
            .and_then(|e| e.tcp.as_mut())
        else {
            self.stats.mismatched += 1;
            return;
        };
        let room = TCP_MAX.saturating_sub(buf.len());
        buf.extend_from_slice(data.get(..data.len().min(room)).unwrap_or_default());
        let len = match buf.get(..2) {
            Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
            _ => return,
        };
        let Some(msg) = buf.get(2..2 + len) else {
            return;
        };
        let msg = msg.to_vec();
        self.handle_message(now, exchange, &msg, true);
        // A message that did not count leaves the connection useless (the
        // server answers one query per connection here).
        if self.exchanges.contains_key(&exchange) {
            self.handle_tcp_closed(now, exchange);
        }
    }

    /// The TCP connection of `exchange` failed, or ended before a whole
    /// answer: the next try starts at once.
    pub fn handle_tcp_closed(&mut self, now: Instant, exchange: ExchangeId) {
        let Some(ex) = self.exchanges.get(&exchange) else {
            return;
        };
        if ex.tcp.is_none() {
            return;
        }
        let (lookup, part) = (ex.lookup, ex.part);
        self.stats.tcp_failures += 1;
        self.close(exchange);
        if let Some(q) = self.query_mut(lookup, part) {
            q.exchanges.retain(|&e| e != exchange);
        }
        self.next_try(now, lookup, part);
    }

    fn query_mut(&mut self, lookup: LookupId, part: usize) -> Option<&mut Query> {
        match self.lookups.get_mut(&lookup)?.parts.get_mut(part)? {
            Part::Pending(q) => Some(q),
            Part::Done(_) => None,
        }
    }

    fn start(&mut self, now: Instant, name: Name, types: Vec<RecordType>) -> LookupId {
        let id = LookupId(self.next_lookup);
        self.next_lookup += 1;
        self.stats.lookups += 1;
        let start = if self.cfg.rotate {
            let s = self.rotate % self.cfg.servers.len().max(1);
            self.rotate = self.rotate.wrapping_add(1);
            s
        } else {
            0
        };
        let mut parts = Vec::with_capacity(types.len());
        for &qtype in &types {
            let key = (name.clone(), qtype);
            let part = match self.cache.get(now, &key) {
                Some((cached, expires)) => {
                    self.stats.cache_hits += 1;
                    Part::Done(match cached {
                        Cached::Addrs(a) => Ok((a, expires)),
                        Cached::NxDomain => Err(LookupError::NxDomain),
                        Cached::NoData => Err(LookupError::NoRecords),
                    })
                }
                None => Part::Pending(Box::new(Query {
                    qname: name.clone(),
                    qtype,
                    cnames: 0,
                    chain_expires: None,
                    tries: 0,
                    start,
                    deadline: now,
                    last_rcode: None,
                    exchanges: Vec::new(),
                })),
            };
            parts.push(part);
        }
        let n = types.len();
        self.lookups.insert(id, LookupState { name, types, parts });
        for part in 0..n {
            if self.query_mut(id, part).is_some() {
                self.send_try(now, id, part);
            }
        }
        self.finish_if_done(id);
        id
    }

    /// A query ID no exchange in flight uses.
    fn fresh_id(&mut self) -> u16 {
        loop {
            let id = self.rng.next_u16();
            if !self.exchanges.values().any(|e| e.id == id) {
                return id;
            }
        }
    }

    fn new_exchange(
        &mut self,
        lookup: LookupId,
        part: usize,
        server: SocketAddr,
        tcp: bool,
    ) -> (ExchangeId, u16) {
        let ex = ExchangeId(self.next_exchange);
        self.next_exchange += 1;
        let id = self.fresh_id();
        self.exchanges.insert(
            ex,
            Exchange {
                lookup,
                part,
                server,
                id,
                tcp: tcp.then(Vec::new),
            },
        );
        (ex, id)
    }

    /// Sends the next try of a question over UDP, to the next server.
    fn send_try(&mut self, now: Instant, lookup: LookupId, part: usize) {
        let n = self.cfg.servers.len().max(1);
        let timeout = self.cfg.timeout;
        let Some(q) = self.query_mut(lookup, part) else {
            return;
        };
        let idx = (q.start + q.tries as usize) % n;
        q.tries += 1;
        q.deadline = now + timeout;
        let question = Question {
            name: q.qname.clone(),
            qtype: q.qtype,
            qclass: CLASS_IN,
        };
        let Some(&server) = self.cfg.servers.get(idx) else {
            return;
        };
        let (ex, id) = self.new_exchange(lookup, part, server, false);
        let mut data = Vec::with_capacity(64);
        encode_query(id, &question, self.cfg.edns_payload, &mut data);
        if let Some(q) = self.query_mut(lookup, part) {
            q.exchanges.push(ex);
        }
        self.stats.udp_queries += 1;
        self.io.push_back(Io::UdpSend {
            exchange: ex,
            server,
            data,
        });
    }

    /// The try in flight failed or timed out: the next one, or the end.
    fn next_try(&mut self, now: Instant, lookup: LookupId, part: usize) {
        let total = self
            .cfg
            .attempts
            .saturating_mul(self.cfg.servers.len() as u32);
        let Some(q) = self.query_mut(lookup, part) else {
            return;
        };
        if q.tries < total {
            self.send_try(now, lookup, part);
        } else {
            let err = match q.last_rcode {
                Some(r) => LookupError::ServerFailure(r),
                None => LookupError::TimedOut,
            };
            self.finish_part(lookup, part, Err(err));
        }
    }

    fn close(&mut self, ex: ExchangeId) {
        if self.exchanges.remove(&ex).is_some() {
            self.io.push_back(Io::Close { exchange: ex });
        }
    }

    fn finish_part(&mut self, lookup: LookupId, part: usize, result: PartResult) {
        let Some(l) = self.lookups.get_mut(&lookup) else {
            return;
        };
        let Some(slot) = l.parts.get_mut(part) else {
            return;
        };
        if let Part::Pending(q) = core::mem::replace(slot, Part::Done(result)) {
            for ex in q.exchanges {
                self.close(ex);
            }
        }
        self.finish_if_done(lookup);
    }

    fn finish_if_done(&mut self, lookup: LookupId) {
        let done = self
            .lookups
            .get(&lookup)
            .is_some_and(|l| l.parts.iter().all(|p| matches!(p, Part::Done(_))));
        if !done {
            return;
        }
        let Some(l) = self.lookups.remove(&lookup) else {
            return;
        };
        let mut addrs = Vec::new();
        let mut valid_until: Option<Instant> = None;
        let mut errors = Vec::new();
        for p in l.parts {
            match p {
                Part::Done(Ok((a, until))) => {
                    addrs.extend(a);
                    valid_until = Some(valid_until.map_or(until, |v| v.min(until)));
                }
                Part::Done(Err(e)) => errors.push(e),
                Part::Pending(_) => {}
            }
        }
        let result = match valid_until {
            Some(valid_until) if !addrs.is_empty() => Ok(Lookup {
                name: l.name,
                addrs,
                valid_until,
            }),
            _ => Err(worst(&errors)),
        };
        self.answers.push_back((lookup, result));
    }

    fn handle_message(&mut self, now: Instant, exchange: ExchangeId, data: &[u8], tcp: bool) {
        let Ok(msg) = Message::parse(data) else {
            self.stats.malformed += 1;
            return;
        };
        let Some(ex) = self.exchanges.get(&exchange) else {
            return;
        };
        let (lookup, part, server, id) = (ex.lookup, ex.part, ex.server, ex.id);
        let timeout = self.cfg.timeout;
        let Some(q) = self.query_mut(lookup, part) else {
            return;
        };
        let echoed = match msg.questions.as_slice() {
            [asked] => asked.name == q.qname && asked.qtype == q.qtype && asked.qclass == CLASS_IN,
            _ => false,
        };
        if !msg.header.response || msg.header.id != id || msg.header.opcode != 0 || !echoed {
            self.stats.mismatched += 1;
            return;
        }
        if msg.header.truncated && !tcp {
            // Ask the same server over TCP; the UDP exchange is done.
            let question = Question {
                name: q.qname.clone(),
                qtype: q.qtype,
                qclass: CLASS_IN,
            };
            q.deadline = now + timeout;
            q.exchanges.retain(|&e| e != exchange);
            self.close(exchange);
            let (tex, tid) = self.new_exchange(lookup, part, server, true);
            let mut data = vec![0, 0];
            encode_query(tid, &question, self.cfg.edns_payload, &mut data);
            let len = (data.len() - 2) as u16;
            if let Some(prefix) = data.get_mut(..2) {
                prefix.copy_from_slice(&len.to_be_bytes());
            }
            if let Some(q) = self.query_mut(lookup, part) {
                q.exchanges.push(tex);
            }
            self.stats.tcp_queries += 1;
            self.io.push_back(Io::TcpConnect {
                exchange: tex,
                server,
                data,
            });
            return;
        }
        let outcome = self.interpret(now, lookup, part, &msg);
        match outcome {
            Outcome::Addrs(addrs, expires) => {
                self.cache_put(
                    now,
                    lookup,
                    part,
                    Cached::Addrs(addrs.clone()),
                    Some(expires),
                );
                self.finish_part(lookup, part, Ok((addrs, expires)));
            }
            Outcome::Negative(e, expires) => {
                let cached = if e == LookupError::NxDomain {
                    Cached::NxDomain
                } else {
                    Cached::NoData
                };
                self.cache_put(now, lookup, part, cached, expires);
                self.finish_part(lookup, part, Err(e));
            }
            Outcome::Follow(target, cnames, chain_expires) => {
                let Some(q) = self.query_mut(lookup, part) else {
                    return;
                };
                let old = core::mem::take(&mut q.exchanges);
                q.qname = target;
                q.cnames = cnames;
                q.chain_expires = Some(chain_expires);
                q.tries = 0;
                q.last_rcode = None;
                for ex in old {
                    self.close(ex);
                }
                self.send_try(now, lookup, part);
            }
            Outcome::Retry(rcode) => {
                self.stats.server_errors += 1;
                if let Some(q) = self.query_mut(lookup, part) {
                    q.last_rcode = Some(rcode);
                    q.exchanges.retain(|&e| e != exchange);
                }
                self.close(exchange);
                self.next_try(now, lookup, part);
            }
            Outcome::Fail(e) => self.finish_part(lookup, part, Err(e)),
        }
    }

    /// Caches a final answer under the lookup's original name.
    fn cache_put(
        &mut self,
        now: Instant,
        lookup: LookupId,
        part: usize,
        value: Cached,
        expires: Option<Instant>,
    ) {
        let Some(l) = self.lookups.get(&lookup) else {
            return;
        };
        let (Some(&qtype), Some(expires)) = (l.types.get(part), expires) else {
            return;
        };
        let key = (l.name.clone(), qtype);
        self.cache.insert(now, key, value, expires);
    }

    /// What a validated answer to question `part` means.
    fn interpret(&mut self, now: Instant, lookup: LookupId, part: usize, msg: &Message) -> Outcome {
        let max_cnames = self.cfg.max_cnames;
        let max_ttl = self.cfg.max_ttl;
        let max_neg = self.cfg.max_negative_ttl;
        let Some(q) = self.query_mut(lookup, part) else {
            return Outcome::Fail(LookupError::Cancelled);
        };
        let rcode = msg.rcode();
        if rcode != Rcode::NOERROR && rcode != Rcode::NXDOMAIN {
            return Outcome::Retry(rcode);
        }
        let ttl_until =
            |ttl: u32, cap: Duration| now + Duration::from_secs(u64::from(ttl)).min(cap);
        // Walk the CNAMEs from the name asked.
        let mut name = q.qname.clone();
        let mut cnames = q.cnames;
        let mut expires = q.chain_expires.unwrap_or(now + max_ttl);
        let mut followed = false;
        loop {
            let addrs: Vec<(IpAddr, u32)> = msg
                .answers
                .iter()
                .filter(|r| r.name == name && r.rtype == q.qtype && r.class == CLASS_IN)
                .filter_map(|r| match r.data {
                    RData::A(a) => Some((IpAddr::V4(a), r.ttl)),
                    RData::Aaaa(a) => Some((IpAddr::V6(a), r.ttl)),
                    _ => None,
                })
                .collect();
            if !addrs.is_empty() && rcode == Rcode::NOERROR {
                for &(_, ttl) in &addrs {
                    expires = expires.min(ttl_until(ttl, max_ttl));
                }
                return Outcome::Addrs(addrs.into_iter().map(|(a, _)| a).collect(), expires);
            }
            let cname = msg.answers.iter().find_map(|r| match &r.data {
                RData::Cname(target) if r.name == name && r.class == CLASS_IN => {
                    Some((target.clone(), r.ttl))
                }
                _ => None,
            });
            let Some((target, ttl)) = cname else {
                break;
            };
            cnames = cnames.saturating_add(1);
            if cnames > max_cnames {
                return Outcome::Fail(LookupError::CnameChainTooLong);
            }
            expires = expires.min(ttl_until(ttl, max_ttl));
            name = target;
            followed = true;
        }
        // No records for the chain's last name.
        let soa = msg.authority.iter().find_map(|r| match &r.data {
            RData::Soa(s) if name.is_subdomain_of(&r.name) => Some(r.ttl.min(s.minimum)),
            _ => None,
        });
        if rcode == Rcode::NXDOMAIN {
            return Outcome::Negative(LookupError::NxDomain, soa.map(|t| ttl_until(t, max_neg)));
        }
        if followed && soa.is_none() {
            return Outcome::Follow(name, cnames, expires);
        }
        Outcome::Negative(LookupError::NoRecords, soa.map(|t| ttl_until(t, max_neg)))
    }
}

/// The error a host lookup reports when no family has addresses: the most
/// telling of its questions' errors.
fn worst(errors: &[LookupError]) -> LookupError {
    let rank = |e: &LookupError| match e {
        LookupError::Cancelled => 0,
        LookupError::NxDomain => 1,
        LookupError::CnameChainTooLong => 2,
        LookupError::ServerFailure(_) => 3,
        LookupError::TimedOut => 4,
        LookupError::NoRecords => 5,
    };
    errors
        .iter()
        .copied()
        .min_by_key(rank)
        .unwrap_or(LookupError::NoRecords)
}
