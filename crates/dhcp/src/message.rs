//! The DHCP message (RFC 2131 section 2, the BOOTP layout of RFC 951) and
//! the options the client uses (RFC 2132), parsed into owned values and
//! written back.
//!
//! [`Message::parse`] never panics: every length is checked before it is
//! used, and what is wrong comes back as a [`ParseError`] naming the field or
//! option. Options are read from the `options` field and, when option 52
//! (overload) says so, from `file` and `sname` (RFC 2132 section 9.3); an
//! option that appears more than once is the concatenation of its pieces
//! (RFC 3396 section 5), so long options split by a server are whole again.

use std::net::Ipv4Addr;

/// The port a DHCP server listens on.
pub const SERVER_PORT: u16 = 67;
/// The port a DHCP client listens on.
pub const CLIENT_PORT: u16 = 68;
/// The magic cookie that starts the options field (RFC 2131 section 3).
pub const MAGIC_COOKIE: [u8; 4] = [99, 130, 83, 99];
/// Bytes before the options field: the fixed BOOTP header and the cookie.
pub const HEADER_LEN: usize = 240;
/// Smallest message written: a BOOTP relay may drop shorter ones (RFC 1542
/// section 2.1 keeps the 300-byte BOOTP minimum).
pub const MIN_EMIT_LEN: usize = 300;
/// The `flags` field's broadcast bit (RFC 2131 section 2): the server is to
/// broadcast its replies, since the client cannot take unicast datagrams
/// before it has an address.
pub const FLAG_BROADCAST: u16 = 0x8000;

/// `op`: a message from a client.
pub const OP_REQUEST: u8 = 1;
/// `op`: a message from a server.
pub const OP_REPLY: u8 = 2;
/// `htype` of Ethernet (RFC 1700).
pub const HTYPE_ETHERNET: u8 = 1;

/// Option codes used here (RFC 2132).
pub mod code {
    /// Padding.
    pub const PAD: u8 = 0;
    /// Subnet mask (section 3.3).
    pub const SUBNET_MASK: u8 = 1;
    /// Routers (section 3.5).
    pub const ROUTER: u8 = 3;
    /// Domain name servers (section 3.8).
    pub const DNS_SERVER: u8 = 6;
    /// Host name (section 3.14).
    pub const HOST_NAME: u8 = 12;
    /// Interface MTU (section 5.1).
    pub const INTERFACE_MTU: u8 = 26;
    /// Requested IP address (section 9.1).
    pub const REQUESTED_IP: u8 = 50;
    /// IP address lease time (section 9.2).
    pub const LEASE_TIME: u8 = 51;
    /// Option overload (section 9.3).
    pub const OVERLOAD: u8 = 52;
    /// DHCP message type (section 9.6).
    pub const MESSAGE_TYPE: u8 = 53;
    /// Server identifier (section 9.7).
    pub const SERVER_ID: u8 = 54;
    /// Parameter request list (section 9.8).
    pub const PARAMETER_LIST: u8 = 55;
    /// Message (section 9.9).
    pub const MESSAGE: u8 = 56;
    /// Maximum DHCP message size (section 9.10).
    pub const MAX_MESSAGE_SIZE: u8 = 57;
    /// Renewal (T1) time (section 9.11).
    pub const RENEWAL_TIME: u8 = 58;
    /// Rebinding (T2) time (section 9.12).
    pub const REBINDING_TIME: u8 = 59;
    /// Client identifier (section 9.14).
    pub const CLIENT_ID: u8 = 61;
    /// End.
    pub const END: u8 = 255;
}

/// The DHCP message type (option 53, RFC 2132 section 9.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    /// A client looks for servers.
    Discover,
    /// A server offers an address.
    Offer,
    /// A client asks for the offered address, or to extend its lease.
    Request,
    /// A client found the address in use.
    Decline,
    /// A server confirms the lease.
    Ack,
    /// A server refuses the request.
    Nak,
    /// A client gives its address up.
    Release,
    /// A client with an address asks for parameters only.
    Inform,
}

impl MessageType {
    /// The option's value.
    pub fn code(self) -> u8 {
        match self {
            MessageType::Discover => 1,
            MessageType::Offer => 2,
            MessageType::Request => 3,
            MessageType::Decline => 4,
            MessageType::Ack => 5,
            MessageType::Nak => 6,
            MessageType::Release => 7,
            MessageType::Inform => 8,
        }
    }

    /// The type of value `v`, if it is one of RFC 2131's.
    pub fn from_code(v: u8) -> Option<MessageType> {
        Some(match v {
            1 => MessageType::Discover,
            2 => MessageType::Offer,
            3 => MessageType::Request,
            4 => MessageType::Decline,
            5 => MessageType::Ack,
            6 => MessageType::Nak,
            7 => MessageType::Release,
            8 => MessageType::Inform,
            _ => return None,
        })
    }
}

/// Why a message does not parse: the field or option, and what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// Shorter than the fixed header and the magic cookie.
    Truncated {
        /// The message's length.
        len: usize,
    },
    /// The four bytes after `file` are not the magic cookie: a BOOTP
    /// message, or not DHCP at all.
    MagicCookie,
    /// `op` is neither request (1) nor reply (2).
    Op(u8),
    /// `hlen` is above the 16 bytes of `chaddr`.
    HardwareLength(u8),
    /// An option's length byte or data runs past the end of its field.
    OptionTruncated {
        /// The option code.
        code: u8,
    },
    /// An option's data is not a length its code allows.
    OptionLength {
        /// The option code.
        code: u8,
        /// The length found.
        len: usize,
    },
    /// Option 53 holds a value that is no DHCP message type.
    MessageType(u8),
    /// Option 53 is missing: a BOOTP message.
    NoMessageType,
}

impl core::fmt::Display for ParseError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ParseError::Truncated { len } => {
                write!(f, "{len} bytes, shorter than the {HEADER_LEN}-byte header")
            }
            ParseError::MagicCookie => f.write_str("no DHCP magic cookie"),
            ParseError::Op(op) => write!(f, "op {op} is neither request nor reply"),
            ParseError::HardwareLength(l) => write!(f, "hlen {l} is above 16"),
            ParseError::OptionTruncated { code } => {
                write!(f, "option {code} runs past the end of its field")
            }
            ParseError::OptionLength { code, len } => {
                write!(f, "option {code} has a length of {len}, not one it allows")
            }
            ParseError::MessageType(v) => write!(f, "message type {v} is not one of RFC 2131's"),
            ParseError::NoMessageType => f.write_str("no message type option (a BOOTP message)"),
        }
    }
}

impl std::error::Error for ParseError {}

/// The options the client reads and writes; others are skipped when parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Options {
    /// Option 53.
    pub message_type: Option<MessageType>,
    /// Option 54.
    pub server_id: Option<Ipv4Addr>,
    /// Option 50.
    pub requested_ip: Option<Ipv4Addr>,
    /// Option 51, in seconds (`u32::MAX`: infinite).
    pub lease_time: Option<u32>,
    /// Option 58, in seconds.
    pub renewal_time: Option<u32>,
    /// Option 59, in seconds.
    pub rebinding_time: Option<u32>,
    /// Option 1.
    pub subnet_mask: Option<Ipv4Addr>,
    /// Option 3, in order of preference.
    pub routers: Vec<Ipv4Addr>,
    /// Option 6, in order of preference.
    pub dns_servers: Vec<Ipv4Addr>,
    /// Option 26.
    pub interface_mtu: Option<u16>,
    /// Option 61.
    pub client_id: Option<Vec<u8>>,
    /// Option 55.
    pub parameter_list: Vec<u8>,
    /// Option 57.
    pub max_message_size: Option<u16>,
    /// Option 12.
    pub host_name: Option<Vec<u8>>,
    /// Option 56: a server's explanation (of a NAK, say).
    pub message: Option<Vec<u8>>,
}

/// A DHCP message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// [`OP_REQUEST`] or [`OP_REPLY`].
    pub op: u8,
    /// Hardware address type ([`HTYPE_ETHERNET`]).
    pub htype: u8,
    /// Hardware address length (6 for Ethernet).
    pub hlen: u8,
    /// Relay hops.
    pub hops: u8,
    /// Transaction ID, chosen by the client.
    pub xid: u32,
    /// Seconds since the client began acquiring or renewing.
    pub secs: u16,
    /// Flags ([`FLAG_BROADCAST`]).
    pub flags: u16,
    /// The client's address, when it has one it may use (BOUND, RENEWING,
    /// REBINDING).
    pub ciaddr: Ipv4Addr,
    /// "Your" address: the one offered or assigned.
    pub yiaddr: Ipv4Addr,
    /// The next server (for booting).
    pub siaddr: Ipv4Addr,
    /// The relay agent's address.
    pub giaddr: Ipv4Addr,
    /// The client's hardware address (its first `hlen` bytes).
    pub chaddr: [u8; 16],
    /// The options.
    pub options: Options,
}

fn ipv4_at(b: &[u8], at: usize) -> Ipv4Addr {
    b.get(at..at + 4)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(Ipv4Addr::UNSPECIFIED, Ipv4Addr::from)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2)
        .and_then(|s| <[u8; 2]>::try_from(s).ok())
        .map_or(0, u16::from_be_bytes)
}

/// Options by code, each the concatenation of its pieces (RFC 3396), in
/// order of first appearance.
#[derive(Default)]
struct Raw {
    opts: Vec<(u8, Vec<u8>)>,
}

impl Raw {
    /// Reads one field's options until END or the field's end.
    fn read(&mut self, field: &[u8]) -> Result<(), ParseError> {
        let mut i = 0;
        while let Some(&c) = field.get(i) {
            match c {
                code::PAD => i += 1,
                code::END => return Ok(()),
                _ => {
                    let len = usize::from(
                        *field
                            .get(i + 1)
                            .ok_or(ParseError::OptionTruncated { code: c })?,
                    );
                    let data = field
                        .get(i + 2..i + 2 + len)
                        .ok_or(ParseError::OptionTruncated { code: c })?;
                    match self.opts.iter_mut().find(|(k, _)| *k == c) {
                        Some((_, v)) => v.extend_from_slice(data),
                        None => self.opts.push((c, data.to_vec())),
                    }
                    i += 2 + len;
                }
            }
        }
        // No END: RFC 2131 asks for one, but servers that leave it out of
        // `file` or `sname` are common enough to be forgiven.
        Ok(())
    }

    fn get(&self, code: u8) -> Option<&[u8]> {
        self.opts
            .iter()
            .find(|(k, _)| *k == code)
            .map(|(_, v)| v.as_slice())
    }
}

fn exact<const N: usize>(code: u8, v: &[u8]) -> Result<[u8; N], ParseError> {
    <[u8; N]>::try_from(v).map_err(|_| ParseError::OptionLength { code, len: v.len() })
}

fn addr_list(code: u8, v: &[u8]) -> Result<Vec<Ipv4Addr>, ParseError> {
    if v.is_empty() || !v.len().is_multiple_of(4) {
        return Err(ParseError::OptionLength { code, len: v.len() });
    }
    Ok(v.chunks_exact(4)
        .filter_map(|c| <[u8; 4]>::try_from(c).ok())
        .map(Ipv4Addr::from)
        .collect())
}

impl Options {
    fn from_raw(raw: &Raw) -> Result<Options, ParseError> {
        let mut o = Options::default();
        let addr = |c: u8| -> Result<Option<Ipv4Addr>, ParseError> {
            raw.get(c)
                .map(|v| exact::<4>(c, v).map(Ipv4Addr::from))
                .transpose()
        };
        let secs = |c: u8| -> Result<Option<u32>, ParseError> {
            raw.get(c)
                .map(|v| exact::<4>(c, v).map(u32::from_be_bytes))
                .transpose()
        };
        let u16opt = |c: u8| -> Result<Option<u16>, ParseError> {
            raw.get(c)
                .map(|v| exact::<2>(c, v).map(u16::from_be_bytes))
                .transpose()
        };
        if let Some(v) = raw.get(code::MESSAGE_TYPE) {
            let [t] = exact::<1>(code::MESSAGE_TYPE, v)?;
            o.message_type = Some(MessageType::from_code(t).ok_or(ParseError::MessageType(t))?);
        }
        o.server_id = addr(code::SERVER_ID)?;
        o.requested_ip = addr(code::REQUESTED_IP)?;
        o.subnet_mask = addr(code::SUBNET_MASK)?;
        o.lease_time = secs(code::LEASE_TIME)?;
        o.renewal_time = secs(code::RENEWAL_TIME)?;
        o.rebinding_time = secs(code::REBINDING_TIME)?;
        o.interface_mtu = u16opt(code::INTERFACE_MTU)?;
        o.max_message_size = u16opt(code::MAX_MESSAGE_SIZE)?;
        if let Some(v) = raw.get(code::ROUTER) {
            o.routers = addr_list(code::ROUTER, v)?;
        }
        if let Some(v) = raw.get(code::DNS_SERVER) {
            o.dns_servers = addr_list(code::DNS_SERVER, v)?;
        }
        o.client_id = raw.get(code::CLIENT_ID).map(<[u8]>::to_vec);
        o.parameter_list = raw
            .get(code::PARAMETER_LIST)
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        o.host_name = raw.get(code::HOST_NAME).map(<[u8]>::to_vec);
        o.message = raw.get(code::MESSAGE).map(<[u8]>::to_vec);
        Ok(o)
    }
}

impl Message {
    /// Parses a DHCP message (the UDP payload). Every DHCP message carries a
    /// message type: one without is refused ([`ParseError::NoMessageType`]).
    pub fn parse(b: &[u8]) -> Result<Message, ParseError> {
        if b.len() < HEADER_LEN {
            return Err(ParseError::Truncated { len: b.len() });
        }
        if b.get(236..240) != Some(&MAGIC_COOKIE[..]) {
            return Err(ParseError::MagicCookie);
        }
        let op = b.first().copied().unwrap_or(0);
        if op != OP_REQUEST && op != OP_REPLY {
            return Err(ParseError::Op(op));
        }
        let hlen = b.get(2).copied().unwrap_or(0);
        if hlen > 16 {
            return Err(ParseError::HardwareLength(hlen));
        }
        let mut raw = Raw::default();
        raw.read(b.get(HEADER_LEN..).unwrap_or_default())?;
        let overload = match raw.get(code::OVERLOAD) {
            Some(v) => exact::<1>(code::OVERLOAD, v)?[0],
            None => 0,
        };
        // RFC 2132 section 9.3: `file` first, then `sname`.
        if overload & 1 != 0 {
            raw.read(b.get(108..236).unwrap_or_default())?;
        }
        if overload & 2 != 0 {
            raw.read(b.get(44..108).unwrap_or_default())?;
        }
        let options = Options::from_raw(&raw)?;
        if options.message_type.is_none() {
            return Err(ParseError::NoMessageType);
        }
        let mut chaddr = [0u8; 16];
        if let Some(c) = b.get(28..44) {
            chaddr.copy_from_slice(c);
        }
        Ok(Message {
            op,
            htype: b.get(1).copied().unwrap_or(0),
            hlen,
            hops: b.get(3).copied().unwrap_or(0),
            xid: b
                .get(4..8)
                .and_then(|s| <[u8; 4]>::try_from(s).ok())
                .map_or(0, u32::from_be_bytes),
            secs: u16_at(b, 8),
            flags: u16_at(b, 10),
            ciaddr: ipv4_at(b, 12),
            yiaddr: ipv4_at(b, 16),
            siaddr: ipv4_at(b, 20),
            giaddr: ipv4_at(b, 24),
            chaddr,
            options,
        })
    }

    /// A client message of `kind` from hardware address `mac`, everything
    /// else zero or empty.
    pub fn client(kind: MessageType, xid: u32, mac: [u8; 6]) -> Message {
        let mut chaddr = [0u8; 16];
        if let Some(c) = chaddr.get_mut(..6) {
            c.copy_from_slice(&mac);
        }
        Message {
            op: OP_REQUEST,
            htype: HTYPE_ETHERNET,
            hlen: 6,
            hops: 0,
            xid,
            secs: 0,
            flags: 0,
            ciaddr: Ipv4Addr::UNSPECIFIED,
            yiaddr: Ipv4Addr::UNSPECIFIED,
            siaddr: Ipv4Addr::UNSPECIFIED,
            giaddr: Ipv4Addr::UNSPECIFIED,
            chaddr,
            options: Options {
                message_type: Some(kind),
                ..Options::default()
            },
        }
    }

    /// The message in wire form, padded to [`MIN_EMIT_LEN`]. Options longer
    /// than 255 bytes are split into pieces (RFC 3396).
    pub fn emit(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MIN_EMIT_LEN);
        b.extend_from_slice(&[self.op, self.htype, self.hlen, self.hops]);
        b.extend_from_slice(&self.xid.to_be_bytes());
        b.extend_from_slice(&self.secs.to_be_bytes());
        b.extend_from_slice(&self.flags.to_be_bytes());
        for a in [self.ciaddr, self.yiaddr, self.siaddr, self.giaddr] {
            b.extend_from_slice(&a.octets());
        }
        b.extend_from_slice(&self.chaddr);
        // sname and file: unused by a client.
        b.resize(236, 0);
        b.extend_from_slice(&MAGIC_COOKIE);
        let o = &self.options;
        let mut put = |c: u8, v: &[u8]| {
            for piece in v.chunks(255) {
                b.push(c);
                b.push(piece.len() as u8);
                b.extend_from_slice(piece);
            }
        };
        // The message type first, as RFC 2131's examples and most servers
        // expect.
        if let Some(t) = o.message_type {
            put(code::MESSAGE_TYPE, &[t.code()]);
        }
        if let Some(id) = &o.client_id {
            put(code::CLIENT_ID, id);
        }
        if let Some(a) = o.requested_ip {
            put(code::REQUESTED_IP, &a.octets());
        }
        if let Some(a) = o.server_id {
            put(code::SERVER_ID, &a.octets());
        }
        if let Some(s) = o.max_message_size {
            put(code::MAX_MESSAGE_SIZE, &s.to_be_bytes());
        }
        if let Some(h) = &o.host_name {
            put(code::HOST_NAME, h);
        }
        if !o.parameter_list.is_empty() {
            put(code::PARAMETER_LIST, &o.parameter_list);
        }
        if let Some(a) = o.subnet_mask {
            put(code::SUBNET_MASK, &a.octets());
        }
        let list = |v: &[Ipv4Addr]| v.iter().flat_map(|a| a.octets()).collect::<Vec<u8>>();
        if !o.routers.is_empty() {
            put(code::ROUTER, &list(&o.routers));
        }
        if !o.dns_servers.is_empty() {
            put(code::DNS_SERVER, &list(&o.dns_servers));
        }
        if let Some(m) = o.interface_mtu {
            put(code::INTERFACE_MTU, &m.to_be_bytes());
        }
        for (c, v) in [
            (code::LEASE_TIME, o.lease_time),
            (code::RENEWAL_TIME, o.renewal_time),
            (code::REBINDING_TIME, o.rebinding_time),
        ] {
            if let Some(v) = v {
                put(c, &v.to_be_bytes());
            }
        }
        if let Some(m) = &o.message {
            put(code::MESSAGE, m);
        }
        b.push(code::END);
        if b.len() < MIN_EMIT_LEN {
            b.resize(MIN_EMIT_LEN, code::PAD);
        }
        b
    }

    /// The message type (every parsed message has one).
    pub fn kind(&self) -> Option<MessageType> {
        self.options.message_type
    }

    /// The prefix length of the subnet mask, if there is one and it is a
    /// contiguous mask.
    pub fn prefix_len(&self) -> Option<u8> {
        let m = u32::from(self.options.subnet_mask?);
        let n = m.leading_ones();
        (m.checked_shl(n).unwrap_or(0) == 0).then_some(n as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_bootp_are_refused() {
        assert_eq!(
            Message::parse(&[0; 10]),
            Err(ParseError::Truncated { len: 10 })
        );
        let mut b = vec![0u8; 300];
        assert_eq!(Message::parse(&b), Err(ParseError::MagicCookie));
        b[236..240].copy_from_slice(&MAGIC_COOKIE);
        b[0] = 2;
        b[240] = code::END;
        assert_eq!(Message::parse(&b), Err(ParseError::NoMessageType));
        b[240..244].copy_from_slice(&[53, 1, 9, 255]);
        assert_eq!(Message::parse(&b), Err(ParseError::MessageType(9)));
        b[240..243].copy_from_slice(&[53, 5, 2]);
        b.truncate(243);
        assert_eq!(
            Message::parse(&b),
            Err(ParseError::OptionTruncated { code: 53 })
        );
    }

    #[test]
    fn split_options_are_joined_and_overload_is_read() {
        let mut m = Message::client(MessageType::Offer, 7, [2, 0, 0, 0, 0, 1]);
        m.op = OP_REPLY;
        let mut b = m.emit();
        // Two pieces of the DNS server option, and option 52 pointing at
        // `file`, which holds the router.
        let end = b.iter().rposition(|&x| x == code::END).unwrap();
        b.truncate(end);
        b.extend_from_slice(&[6, 4, 10, 0, 0, 1, 6, 4, 10, 0, 0, 2, 52, 1, 1, 255]);
        b[108..116].copy_from_slice(&[3, 4, 10, 0, 0, 254, 255, 0]);
        let p = Message::parse(&b).unwrap();
        assert_eq!(
            p.options.dns_servers,
            [Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)]
        );
        assert_eq!(p.options.routers, [Ipv4Addr::new(10, 0, 0, 254)]);
    }

    #[test]
    fn prefix_len_of_masks() {
        let mut m = Message::client(MessageType::Ack, 1, [2, 0, 0, 0, 0, 1]);
        m.options.subnet_mask = Some(Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(m.prefix_len(), Some(24));
        m.options.subnet_mask = Some(Ipv4Addr::new(255, 255, 255, 255));
        assert_eq!(m.prefix_len(), Some(32));
        m.options.subnet_mask = Some(Ipv4Addr::new(255, 0, 255, 0));
        assert_eq!(m.prefix_len(), None);
    }
}
