//! ICMP errors received, acted on: path MTU discovery (RFC 1191, RFC 8201),
//! hard errors during a connection attempt (RFC 1122 section 4.2.3.9), and
//! the RFC 5961 section 7 limit on challenge ACKs.
//!
//! # Validation (RFC 5927)
//!
//! An ICMP error quotes the head of the datagram that caused it. It is acted on
//! only if that datagram was ours (its source is our address) and belongs to a
//! live socket: for TCP, a connection with that 4-tuple whose quoted sequence
//! number is one we sent and that is not yet acknowledged (RFC 5927 section
//! 4.1's SND.UNA <= SEG.SEQ < SND.NXT, where SND.MAX, one past the highest
//! sequence number sent, plays the RFC's SND.NXT, since an RTO pulls SND.NXT
//! back); in SYN-SENT and SYN-RECEIVED, the ISS. For UDP, a socket bound to the
//! quoted source port. Anything else is counted (`icmp_in_ignored`) and dropped.
//!
//! # Path MTU
//!
//! IPv4 "fragmentation needed" (type 3 code 4) and ICMPv6 "packet too big"
//! (type 2) lower the destination's entry in the path MTU cache (`net::pmtu`:
//! never raised by a message, clamped to 552 / 1280, expiring). Every TCP
//! connection to that destination then sends smaller segments: its MSS becomes
//! the path MTU less the IP and TCP headers and the options every segment
//! carries, and what it had in flight is sent again from SND.UNA at the new
//! size (Linux's `tcp_simple_retransmit`: the congestion window is not cut, the
//! loss was not congestion). New connections to the destination start with the
//! cached value; UDP sends that no longer fit are refused.
//!
//! # Hard and soft errors
//!
//! Port and protocol unreachable (ICMPv4 codes 3 and 2, ICMPv6 code 4) are hard
//! errors (RFC 1122 section 4.2.3.9). A connection in SYN-SENT fails with
//! [`ConnectionError::Refused`](super::ConnectionError::Refused), as Linux does
//! (the one case RFC 5461 section 2.1 describes every stack agreeing on). In the
//! synchronized states hard errors are treated as soft, as RFC 5461 section 2.1
//! and RFC 1122's advice against aborting on transient conditions lead Linux
//! and the BSDs to do: counted, and the connection left to its timers. Soft
//! errors (net or host unreachable, time exceeded, ...) never abort anything:
//! RFC 5461's "abort on soft errors in SYN-SENT" is non-standard and not done.
//! UDP sockets here are unconnected, so, as with Linux without `IP_RECVERR`,
//! errors quoting their datagrams are counted, not reported.

use super::Engine;
use super::output::ip_header_len;
use crate::net::pmtu::{clamp, plateau_below};
use crate::tcp::seq::Seq;
use crate::tcp::state::{CloseReason, Closed, State};
use linerate_wire::icmp::{v4 as icmpv4, v6 as icmpv6};
use linerate_wire::ipv4::protocol;
use linerate_wire::ipv6::ext;
use linerate_wire::tcp;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What an ICMP error says about the quoted datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IcmpError {
    /// Too big for the path: the next-hop MTU, when the message gives one.
    TooBig(Option<u16>),
    /// Port or protocol unreachable.
    Hard,
    /// Anything else.
    Soft,
}

/// The head of a datagram we sent, as an ICMP error quotes it.
#[derive(Debug, Clone, Copy)]
struct Quoted<'a> {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    /// IPv4 total length (for RFC 1191's plateaus); 0 for IPv6.
    total_len: u16,
    /// The transport header's first bytes (at least 8).
    l4: &'a [u8],
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let x = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([
        *x.first()?,
        *x.get(1)?,
        *x.get(2)?,
        *x.get(3)?,
    ]))
}

/// Parses a quoted IPv4 datagram: header (options allowed) and at least 8 bytes
/// of the first fragment's transport header. The header checksum is not
/// checked: routers quote what they received, and a mismatch says nothing.
fn quoted_v4(q: &[u8]) -> Option<Quoted<'_>> {
    let vihl = *q.first()?;
    let hl = usize::from(vihl & 0x0f) * 4;
    if vihl >> 4 != 4 || hl < 20 {
        return None;
    }
    let frag = be16(q, 6)? & 0x1fff;
    let l4 = q.get(hl..).filter(|l| l.len() >= 8 && frag == 0)?;
    let a: [u8; 4] = q.get(12..16)?.try_into().ok()?;
    let b: [u8; 4] = q.get(16..20)?.try_into().ok()?;
    Some(Quoted {
        src: IpAddr::V4(Ipv4Addr::from(a)),
        dst: IpAddr::V4(Ipv4Addr::from(b)),
        proto: *q.get(9)?,
        total_len: be16(q, 2)?,
        l4,
    })
}

/// Parses a quoted IPv6 datagram: the fixed header, extension headers, and at
/// least 8 bytes of the transport header of a first (or only) fragment.
fn quoted_v6(q: &[u8]) -> Option<Quoted<'_>> {
    if q.first()? >> 4 != 6 {
        return None;
    }
    let a: [u8; 16] = q.get(8..24)?.try_into().ok()?;
    let b: [u8; 16] = q.get(24..40)?.try_into().ok()?;
    let rest = q.get(40..)?;
    let chain = ext::walk(*q.get(6)?, rest).ok()?;
    if chain.fragment.is_some_and(|f| f.offset != 0) {
        return None;
    }
    let l4 = rest.get(chain.len..).filter(|l| l.len() >= 8)?;
    Some(Quoted {
        src: IpAddr::V6(Ipv6Addr::from(a)),
        dst: IpAddr::V6(Ipv6Addr::from(b)),
        proto: chain.next_header,
        total_len: 0,
        l4,
    })
}

impl Engine {
    /// An ICMPv4 error (checksum verified): destination unreachable is acted
    /// on, the others are soft.
    pub(super) fn icmpv4_error(&mut self, p: &icmpv4::Packet<&[u8]>) {
        use icmpv4::unreachable_code as code;
        if p.msg_type() != icmpv4::msg_type::DEST_UNREACHABLE {
            return;
        }
        self.counters.icmp_in_dest_unreachs += 1;
        let kind = match p.code() {
            code::FRAG_NEEDED => IcmpError::TooBig(p.next_hop_mtu().filter(|&m| m != 0)),
            code::PORT | code::PROTOCOL => IcmpError::Hard,
            _ => IcmpError::Soft,
        };
        match quoted_v4(p.data()) {
            Some(q) => self.icmp_error(kind, q),
            None => self.counters.icmp_in_ignored += 1,
        }
    }

    /// An ICMPv6 error (checksum verified): destination unreachable and packet
    /// too big are acted on, the others are soft.
    pub(super) fn icmpv6_error(&mut self, p: &icmpv6::Packet<&[u8]>) {
        let kind = match p.msg_type() {
            icmpv6::msg_type::PACKET_TOO_BIG => {
                self.counters.icmp_in_pkt_too_bigs += 1;
                let mtu = p.mtu().map(|m| m.min(65_535) as u16);
                IcmpError::TooBig(mtu)
            }
            icmpv6::msg_type::DEST_UNREACHABLE => {
                self.counters.icmp_in_dest_unreachs += 1;
                if p.code() == icmpv6::unreachable_code::PORT {
                    IcmpError::Hard
                } else {
                    IcmpError::Soft
                }
            }
            _ => return,
        };
        match quoted_v6(p.data()) {
            Some(q) => self.icmp_error(kind, q),
            None => self.counters.icmp_in_ignored += 1,
        }
    }

    fn is_our_addr(&self, ip: IpAddr) -> bool {
        self.is_local_addr(ip)
    }

    fn icmp_error(&mut self, kind: IcmpError, q: Quoted<'_>) {
        if !self.is_our_addr(q.src) {
            self.counters.icmp_in_ignored += 1;
            return;
        }
        let (Some(sport), Some(dport)) = (be16(q.l4, 0), be16(q.l4, 2)) else {
            self.counters.icmp_in_ignored += 1;
            return;
        };
        match q.proto {
            protocol::TCP => {
                let key = (SocketAddr::new(q.src, sport), SocketAddr::new(q.dst, dport));
                let seq = be32(q.l4, 4).map(Seq);
                match (self.by_tuple.get(&key).copied(), seq) {
                    (Some(idx), Some(seq)) if self.quoted_seq_valid(idx, seq) => {
                        self.icmp_tcp(kind, idx, &q);
                    }
                    _ => self.counters.icmp_in_ignored += 1,
                }
            }
            protocol::UDP if self.udp.bound(sport, q.src) => {
                if let IcmpError::TooBig(mtu) = kind {
                    let _ = self.learn_pmtu(&q, mtu);
                }
            }
            _ => self.counters.icmp_in_ignored += 1,
        }
    }

    /// RFC 5927 section 4.1: the quoted sequence number is one the connection
    /// sent and has not seen acknowledged.
    fn quoted_seq_valid(&self, idx: usize, seq: Seq) -> bool {
        match self.conn(idx).map(|c| &c.state) {
            Some(State::SynSent(s)) => seq == s.iss,
            Some(State::SynRcvd(s)) => seq == s.iss,
            Some(st) => st.snd().is_some_and(|s| seq.in_range(s.una, s.max)),
            None => false,
        }
    }

    fn icmp_tcp(&mut self, kind: IcmpError, idx: usize, q: &Quoted<'_>) {
        match kind {
            IcmpError::TooBig(mtu) => {
                let (pmtu, lowered) = self.learn_pmtu(q, mtu);
                if !lowered {
                    // Nothing new about the path (the others already follow
                    // it): only the quoted connection may lag behind.
                    self.apply_pmtu(idx, pmtu);
                    return;
                }
                // Every connection to the destination, not only the one quoted.
                let dst = q.dst;
                let on_path: Vec<usize> = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.conn.as_ref().is_some_and(|c| c.remote.ip() == dst))
                    .map(|(i, _)| i)
                    .collect();
                for i in on_path {
                    self.apply_pmtu(i, pmtu);
                }
            }
            IcmpError::Hard => {
                let Some(conn) = self.conn_mut(idx) else {
                    return;
                };
                if matches!(conn.state, State::SynSent(_)) {
                    conn.state = State::Closed(Closed {
                        reason: CloseReason::Refused,
                    });
                    self.counters.tcp_attempt_fails += 1;
                    self.counters.tcp_icmp_refused += 1;
                    self.after_event(idx);
                }
            }
            IcmpError::Soft => {}
        }
    }

    /// Lowers the path MTU to `q.dst` per a message announcing `mtu`; returns
    /// the path MTU now in force and whether this message lowered it.
    fn learn_pmtu(&mut self, q: &Quoted<'_>, mtu: Option<u16>) -> (u16, bool) {
        let now = self.clock;
        let mtu = clamp(q.dst, mtu.unwrap_or_else(|| plateau_below(q.total_len)));
        let link = self.iface_mtu(self.output_iface(q.dst));
        let lowered = self.pmtu.update(now, q.dst, mtu, link);
        if lowered {
            self.counters.pmtu_updates += 1;
        }
        (self.path_mtu(now, q.dst), lowered)
    }

    /// The largest IP datagram that crosses the path to `ip` now: the
    /// interface MTU, or less if ICMP said so.
    pub(super) fn path_mtu(&self, now: crate::time::Instant, ip: IpAddr) -> u16 {
        // The MTU of the interface the route to `ip` goes out of.
        let link = self.iface_mtu(self.output_iface(ip));
        self.pmtu.get(now, ip).map_or(link, |p| p.min(link))
    }

    /// Fits connection `idx` to a path MTU of `mtu`: a smaller MSS from now on,
    /// and what is in flight sent again at that size.
    fn apply_pmtu(&mut self, idx: usize, mtu: u16) {
        let Some(conn) = self.conn_mut(idx) else {
            return;
        };
        let hdrs = ip_header_len(conn.remote.ip()) + tcp::HEADER_LEN;
        let mtu_mss = usize::from(mtu).saturating_sub(hdrs).max(64);
        conn.params.mtu_mss = conn.params.mtu_mss.min(mtu_mss.min(65_535) as u16);
        let mut resend = false;
        if let Some((snd, rcv)) = conn.state.snd_rcv_mut() {
            let opts = if rcv.ts_ok { 12 } else { 0 };
            let mss = mtu_mss.saturating_sub(opts).max(64);
            if mss < snd.mss {
                snd.mss = mss;
                snd.cc.set_mss(mss);
                if snd.max != snd.una {
                    snd.nxt = snd.una;
                    snd.timed = None;
                    snd.recovery = None;
                    snd.dupacks = 0;
                    resend = true;
                }
            }
        }
        if resend {
            self.mark_ready(idx);
        }
        self.after_event(idx);
    }

    /// A new connection to a destination with a cached path MTU starts with it.
    pub(super) fn apply_cached_pmtu(&mut self, idx: usize) {
        let now = self.clock;
        let Some(remote) = self.conn(idx).map(|c| c.remote.ip()) else {
            return;
        };
        let mtu = self.path_mtu(now, remote);
        if mtu < self.iface_mtu(self.output_iface(remote)) {
            self.apply_pmtu(idx, mtu);
        }
    }

    /// Sends the challenge ACK connection `idx` asked for, if the engine's limit
    /// allows (RFC 5961 section 7); otherwise counts it as suppressed.
    pub(super) fn challenge_gate(&mut self, now: crate::time::Instant, idx: usize) {
        let Some(conn) = self.slots.get_mut(idx).and_then(|s| s.conn.as_mut()) else {
            return;
        };
        if !std::mem::take(&mut conn.challenge_pending) {
            return;
        }
        if self.challenge.allow(now) {
            self.counters.tcp_challenge_acks += 1;
            conn.want_ack();
        } else {
            self.counters.tcp_challenge_acks_suppressed += 1;
        }
    }
}
