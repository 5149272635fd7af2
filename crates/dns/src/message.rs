//! DNS messages: parsing whole messages and writing queries (RFC 1035
//! section 4, RFC 6891 for the OPT pseudo-record, RFC 3596 for AAAA).
//!
//! [`Message::parse`] reads a message into owned values: the [`Header`], the
//! questions and the records of the three sections, with the EDNS0 OPT
//! record taken out of the additional section into [`Message::edns`]. Every
//! read is bounds-checked and every failure is a [`ParseError`] naming the
//! section, the entry and what was wrong; no input panics (a fuzz target
//! runs the parser). Records of types the resolver does not use keep their
//! raw data. [`encode_query`] writes the one kind of message a stub
//! resolver sends.

use crate::name::{Name, NameError};
use core::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Length of the fixed header (RFC 1035 section 4.1.1).
pub const HEADER_LEN: usize = 12;

/// The payload size advertised in EDNS0: 1232 bytes, the DNS Flag Day 2020
/// value, which fits an IPv6 minimum MTU of 1280 without fragments.
pub const EDNS_PAYLOAD: u16 = 1232;

/// A record type (RFC 1035 section 3.2.2 and later RFCs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordType(pub u16);

impl RecordType {
    /// An IPv4 address (RFC 1035).
    pub const A: RecordType = RecordType(1);
    /// An authoritative name server.
    pub const NS: RecordType = RecordType(2);
    /// The canonical name of an alias.
    pub const CNAME: RecordType = RecordType(5);
    /// The start of a zone of authority (its MINIMUM bounds negative caching,
    /// RFC 2308).
    pub const SOA: RecordType = RecordType(6);
    /// An IPv6 address (RFC 3596).
    pub const AAAA: RecordType = RecordType(28);
    /// The EDNS0 pseudo-record (RFC 6891).
    pub const OPT: RecordType = RecordType(41);
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RecordType::A => f.write_str("A"),
            RecordType::NS => f.write_str("NS"),
            RecordType::CNAME => f.write_str("CNAME"),
            RecordType::SOA => f.write_str("SOA"),
            RecordType::AAAA => f.write_str("AAAA"),
            RecordType::OPT => f.write_str("OPT"),
            RecordType(t) => write!(f, "TYPE{t}"),
        }
    }
}

/// The Internet class.
pub const CLASS_IN: u16 = 1;

/// A response code: the header's four bits, extended by EDNS0's eight
/// (RFC 6891 section 6.1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rcode(pub u16);

impl Rcode {
    /// No error.
    pub const NOERROR: Rcode = Rcode(0);
    /// The server could not interpret the query.
    pub const FORMERR: Rcode = Rcode(1);
    /// The server failed to answer (its upstream, its zone).
    pub const SERVFAIL: Rcode = Rcode(2);
    /// The name does not exist (RFC 8020: nor does anything below it).
    pub const NXDOMAIN: Rcode = Rcode(3);
    /// The server does not do this kind of query.
    pub const NOTIMP: Rcode = Rcode(4);
    /// The server refuses to answer.
    pub const REFUSED: Rcode = Rcode(5);
}

impl fmt::Display for Rcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Rcode::NOERROR => f.write_str("NOERROR"),
            Rcode::FORMERR => f.write_str("FORMERR"),
            Rcode::SERVFAIL => f.write_str("SERVFAIL"),
            Rcode::NXDOMAIN => f.write_str("NXDOMAIN"),
            Rcode::NOTIMP => f.write_str("NOTIMP"),
            Rcode::REFUSED => f.write_str("REFUSED"),
            Rcode(r) => write!(f, "RCODE{r}"),
        }
    }
}

/// The fixed header (RFC 1035 section 4.1.1; AD and CD from RFC 4035).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// The query ID, echoed in the response.
    pub id: u16,
    /// QR: a response.
    pub response: bool,
    /// The kind of query (0: a standard query).
    pub opcode: u8,
    /// AA: the answer is authoritative.
    pub authoritative: bool,
    /// TC: the message was truncated to fit the transport; ask again over TCP.
    pub truncated: bool,
    /// RD: recursion desired.
    pub recursion_desired: bool,
    /// RA: recursion available.
    pub recursion_available: bool,
    /// AD: authentic data (DNSSEC).
    pub authentic_data: bool,
    /// CD: checking disabled (DNSSEC).
    pub checking_disabled: bool,
    /// The header's four RCODE bits ([`Message::rcode`] adds EDNS0's).
    pub rcode: u8,
    /// Entries in the question section.
    pub qdcount: u16,
    /// Records in the answer section.
    pub ancount: u16,
    /// Records in the authority section.
    pub nscount: u16,
    /// Records in the additional section.
    pub arcount: u16,
}

mod field {
    pub const QR: u16 = 0x8000;
    pub const OPCODE_SHIFT: u16 = 11;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const RA: u16 = 0x0080;
    pub const AD: u16 = 0x0020;
    pub const CD: u16 = 0x0010;
}

impl Header {
    /// Reads the header at the start of `msg`.
    pub fn parse(msg: &[u8]) -> Result<Header, ParseError> {
        let h: &[u8; HEADER_LEN] = msg
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(ParseError::at(Section::Header, 0, ErrorKind::Truncated))?;
        let word = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let flags = word(2);
        Ok(Header {
            id: word(0),
            response: flags & field::QR != 0,
            opcode: ((flags >> field::OPCODE_SHIFT) & 0xf) as u8,
            authoritative: flags & field::AA != 0,
            truncated: flags & field::TC != 0,
            recursion_desired: flags & field::RD != 0,
            recursion_available: flags & field::RA != 0,
            authentic_data: flags & field::AD != 0,
            checking_disabled: flags & field::CD != 0,
            rcode: (flags & 0xf) as u8,
            qdcount: word(4),
            ancount: word(6),
            nscount: word(8),
            arcount: word(10),
        })
    }

    /// Writes the header.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let mut flags = (u16::from(self.opcode) & 0xf) << field::OPCODE_SHIFT;
        flags |= u16::from(self.rcode) & 0xf;
        for (set, bit) in [
            (self.response, field::QR),
            (self.authoritative, field::AA),
            (self.truncated, field::TC),
            (self.recursion_desired, field::RD),
            (self.recursion_available, field::RA),
            (self.authentic_data, field::AD),
            (self.checking_disabled, field::CD),
        ] {
            if set {
                flags |= bit;
            }
        }
        for w in [
            self.id,
            flags,
            self.qdcount,
            self.ancount,
            self.nscount,
            self.arcount,
        ] {
            out.extend_from_slice(&w.to_be_bytes());
        }
    }
}

/// One entry of the question section.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Question {
    /// The name asked about.
    pub name: Name,
    /// The record type asked for.
    pub qtype: RecordType,
    /// The class ([`CLASS_IN`]).
    pub qclass: u16,
}

/// The start of a zone of authority (RFC 1035 section 3.3.13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Soa {
    /// The zone's primary server.
    pub mname: Name,
    /// The mailbox of the zone's administrator.
    pub rname: Name,
    /// The zone's version.
    pub serial: u32,
    /// Secondary refresh interval, seconds.
    pub refresh: u32,
    /// Secondary retry interval, seconds.
    pub retry: u32,
    /// Secondary expiry, seconds.
    pub expire: u32,
    /// The TTL of negative answers (RFC 2308 section 4), seconds.
    pub minimum: u32,
}

/// A record's data, decoded for the types the resolver uses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RData {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// The canonical name the owner is an alias of.
    Cname(Name),
    /// The start of authority.
    Soa(Soa),
    /// Any other type: its data as it was on the wire (names in it may be
    /// compressed).
    Other(Vec<u8>),
}

/// A resource record (RFC 1035 section 4.1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The owner name.
    pub name: Name,
    /// The type.
    pub rtype: RecordType,
    /// The class.
    pub class: u16,
    /// Seconds the record may be cached. RFC 2181 section 8: a TTL with the
    /// top bit set is taken as zero.
    pub ttl: u32,
    /// The data.
    pub data: RData,
}

/// The EDNS0 OPT pseudo-record's fields (RFC 6891 section 6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edns {
    /// The sender's largest UDP payload.
    pub payload: u16,
    /// The upper eight bits of the extended RCODE.
    pub extended_rcode: u8,
    /// The EDNS version.
    pub version: u8,
    /// DO: DNSSEC records wanted.
    pub dnssec_ok: bool,
}

/// A parsed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The header.
    pub header: Header,
    /// The question section.
    pub questions: Vec<Question>,
    /// The answer section.
    pub answers: Vec<Record>,
    /// The authority section.
    pub authority: Vec<Record>,
    /// The additional section, without the OPT record.
    pub additional: Vec<Record>,
    /// The OPT record, if the message has one.
    pub edns: Option<Edns>,
}

/// Where in a message a [`ParseError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The fixed header.
    Header,
    /// The question section.
    Question,
    /// The answer section.
    Answer,
    /// The authority section.
    Authority,
    /// The additional section.
    Additional,
}

/// What was wrong, in a [`ParseError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The message ends inside the entry.
    Truncated,
    /// A name in the entry is malformed.
    Name(NameError),
    /// The record's data length does not fit its type (an A record of other
    /// than 4 bytes, an AAAA of other than 16, a name or SOA that ends
    /// before or after the data).
    BadLength {
        /// The record's type.
        rtype: RecordType,
        /// Its RDLENGTH.
        len: u16,
    },
    /// More than one OPT record, or one outside the additional section or
    /// not owned by the root (RFC 6891 section 6.1.1).
    BadOpt,
}

/// Why [`Message::parse`] failed: the section, the entry's index in it, and
/// what was wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseError {
    /// The section of the bad entry.
    pub section: Section,
    /// The entry's index in its section (0 for the header).
    pub index: u16,
    /// What was wrong.
    pub kind: ErrorKind,
}

impl ParseError {
    fn at(section: Section, index: u16, kind: ErrorKind) -> ParseError {
        ParseError {
            section,
            index,
            kind,
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} entry {}: ", self.section, self.index)?;
        match self.kind {
            ErrorKind::Truncated => f.write_str("the message ends inside it"),
            ErrorKind::Name(e) => write!(f, "{e}"),
            ErrorKind::BadLength { rtype, len } => {
                write!(f, "{len} bytes of data do not fit type {rtype}")
            }
            ErrorKind::BadOpt => f.write_str("misplaced or repeated OPT record"),
        }
    }
}

impl std::error::Error for ParseError {}

/// A bounds-checked reader over a whole message (names point anywhere in it).
struct Reader<'a> {
    msg: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ErrorKind> {
        let end = self.pos.checked_add(n).ok_or(ErrorKind::Truncated)?;
        let b = self.msg.get(self.pos..end).ok_or(ErrorKind::Truncated)?;
        self.pos = end;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, ErrorKind> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([
            b.first().copied().unwrap_or(0),
            b.get(1).copied().unwrap_or(0),
        ]))
    }

    fn u32(&mut self) -> Result<u32, ErrorKind> {
        Ok((u32::from(self.u16()?) << 16) | u32::from(self.u16()?))
    }

    fn name(&mut self) -> Result<Name, ErrorKind> {
        let (n, next) = Name::decode(self.msg, self.pos).map_err(ErrorKind::Name)?;
        self.pos = next;
        Ok(n)
    }
}

impl Message {
    /// Parses a whole message. Bytes after the last record are ignored.
    pub fn parse(msg: &[u8]) -> Result<Message, ParseError> {
        let header = Header::parse(msg)?;
        let mut r = Reader {
            msg,
            pos: HEADER_LEN,
        };
        let mut questions = Vec::new();
        for i in 0..header.qdcount {
            let q = (|| {
                let name = r.name()?;
                let qtype = RecordType(r.u16()?);
                let qclass = r.u16()?;
                Ok(Question {
                    name,
                    qtype,
                    qclass,
                })
            })()
            .map_err(|k| ParseError::at(Section::Question, i, k))?;
            questions.push(q);
        }
        let mut edns = None;
        let mut sections: [(Section, u16, Vec<Record>); 3] = [
            (Section::Answer, header.ancount, Vec::new()),
            (Section::Authority, header.nscount, Vec::new()),
            (Section::Additional, header.arcount, Vec::new()),
        ];
        for (section, count, records) in &mut sections {
            for i in 0..*count {
                let err = |k| ParseError::at(*section, i, k);
                match read_record(&mut r).map_err(err)? {
                    Entry::Record(rec) => records.push(rec),
                    Entry::Opt(opt) => {
                        if *section != Section::Additional || edns.is_some() {
                            return Err(err(ErrorKind::BadOpt));
                        }
                        edns = Some(opt);
                    }
                }
            }
        }
        let [(_, _, answers), (_, _, authority), (_, _, additional)] = sections;
        Ok(Message {
            header,
            questions,
            answers,
            authority,
            additional,
            edns,
        })
    }

    /// The response code, with EDNS0's upper bits when there is an OPT record.
    pub fn rcode(&self) -> Rcode {
        let high = self.edns.map_or(0, |e| u16::from(e.extended_rcode));
        Rcode((high << 4) | u16::from(self.header.rcode))
    }
}

enum Entry {
    Record(Record),
    Opt(Edns),
}

fn read_record(r: &mut Reader<'_>) -> Result<Entry, ErrorKind> {
    let name = r.name()?;
    let rtype = RecordType(r.u16()?);
    let class = r.u16()?;
    let ttl = r.u32()?;
    let len = r.u16()?;
    let start = r.pos;
    let rdata = r.bytes(usize::from(len))?;
    let bad = ErrorKind::BadLength { rtype, len };
    if rtype == RecordType::OPT {
        if !name.is_root() {
            return Err(ErrorKind::BadOpt);
        }
        // The options are not used: only the fixed fields.
        return Ok(Entry::Opt(Edns {
            payload: class,
            extended_rcode: (ttl >> 24) as u8,
            version: (ttl >> 16) as u8,
            dnssec_ok: ttl & 0x8000 != 0,
        }));
    }
    let data = match rtype {
        RecordType::A => {
            let b: [u8; 4] = rdata.try_into().map_err(|_| bad)?;
            RData::A(Ipv4Addr::from(b))
        }
        RecordType::AAAA => {
            let b: [u8; 16] = rdata.try_into().map_err(|_| bad)?;
            RData::Aaaa(Ipv6Addr::from(b))
        }
        RecordType::CNAME => {
            let mut inner = Reader {
                msg: r.msg,
                pos: start,
            };
            let target = inner.name()?;
            if inner.pos != r.pos {
                return Err(bad);
            }
            RData::Cname(target)
        }
        RecordType::SOA => {
            let mut inner = Reader {
                msg: r.msg,
                pos: start,
            };
            let mname = inner.name()?;
            let rname = inner.name()?;
            let mut fields = [0u32; 5];
            for f in &mut fields {
                *f = inner.u32()?;
            }
            if inner.pos != r.pos {
                return Err(bad);
            }
            let [serial, refresh, retry, expire, minimum] = fields;
            RData::Soa(Soa {
                mname,
                rname,
                serial,
                refresh,
                retry,
                expire,
                minimum,
            })
        }
        _ => RData::Other(rdata.to_vec()),
    };
    // RFC 2181 section 8: TTLs are 31 bits; one with the top bit set is zero.
    let ttl = if ttl & 0x8000_0000 != 0 { 0 } else { ttl };
    Ok(Entry::Record(Record {
        name,
        rtype,
        class,
        ttl,
        data,
    }))
}

/// Writes a standard query for `question` with ID `id`, recursion desired,
/// and an OPT record advertising `edns_payload` bytes when it is `Some`
/// (RFC 6891; the resolver advertises [`EDNS_PAYLOAD`]).
pub fn encode_query(id: u16, question: &Question, edns_payload: Option<u16>, out: &mut Vec<u8>) {
    Header {
        id,
        recursion_desired: true,
        qdcount: 1,
        arcount: u16::from(edns_payload.is_some()),
        ..Header::default()
    }
    .emit(out);
    out.extend_from_slice(question.name.as_wire());
    out.extend_from_slice(&question.qtype.0.to_be_bytes());
    out.extend_from_slice(&question.qclass.to_be_bytes());
    if let Some(payload) = edns_payload {
        // Root owner, type OPT, class = payload size, TTL = extended RCODE 0,
        // version 0, no flags; no options.
        out.push(0);
        out.extend_from_slice(&RecordType::OPT.0.to_be_bytes());
        out.extend_from_slice(&payload.to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
}
