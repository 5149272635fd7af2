//! Fragments in the engine (with [`Config::fragments`](crate::Config::fragments)
//! on): received IPv4 (RFC 791 section 3.2) and IPv6 (RFC 8200 section 4.5)
//! fragments go to the reassembler ([`crate::frag`]), a completed datagram is
//! processed as if it had arrived whole; reassembly timeouts are answered with
//! ICMP time exceeded, code 1, when the first fragment had arrived (RFC 792,
//! RFC 8200 section 4.5); refused IPv6 fragments with ICMPv6 parameter problem
//! (RFC 8200 section 4.5: code 0 for a bad length or a datagram over 65,535
//! bytes; RFC 7112 section 5: code 3, pointer 0, for a first fragment without
//! its whole header chain). ICMP errors share the engine's rate limit and go
//! only to a unicast source of a datagram sent to our unicast address (RFC
//! 1122 section 3.2.2).
//!
//! On output, `udp` cuts datagrams larger than the path MTU with
//! [`Engine::fragment_into`]: IPv4 fragments with DF clear and the datagram's
//! identification, IPv6 fragments behind a Fragment header whose
//! identification follows RFC 7739 (`frag::ident`).

use super::Engine;
use super::input::From;
use super::output::{HOP_LIMIT, IpTo};
use crate::frag::{FragKey, Fragment, Insert, Refused};
use crate::time::Instant;
use linerate_wire::icmp::v6::{Addrs, parameter_problem_code};
use linerate_wire::icmp::{self, v4 as icmpv4, v6 as icmpv6};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::ipv6::{self, ext};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes of the IPv6 Fragment header.
pub(super) const FRAG_HEADER_LEN: usize = 8;

/// The least bytes of an upper-layer header a first fragment must hold (RFC
/// 7112; the sizes Linux's `ipv6frag_thdr_truncated` checks): `None` for No
/// Next Header.
pub(super) fn upper_header_len(next_header: u8) -> Option<usize> {
    match next_header {
        protocol::TCP => Some(20),
        protocol::UDP | protocol::ICMPV6 => Some(8),
        59 => None,
        _ => Some(1),
    }
}

/// True for an address an ICMP error may go to (RFC 1122 section 3.2.2).
fn unicast_source(ip: IpAddr, subnet_broadcast: Option<Ipv4Addr>) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || Some(a) == subnet_broadcast)
        }
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

impl Engine {
    /// An IPv4 fragment addressed to us, its header checked.
    pub(super) fn ipv4_fragment(
        &mut self,
        now: Instant,
        ip: &ipv4::Fields<'_>,
        unicast: bool,
        from: From<'_>,
    ) {
        let hl = ip.datagram.len().saturating_sub(ip.payload.len());
        let (Some(head), Some(h)) = (ip.datagram.get(..hl), ip.datagram.first_chunk::<8>()) else {
            return;
        };
        let id = u16::from_be_bytes([h[4], h[5]]);
        let flg_off = u16::from_be_bytes([h[6], h[7]]);
        let bcast = self.cfg.ipv4.map(|c| c.broadcast());
        let src = IpAddr::V4(Ipv4Addr::from(ip.src));
        let f = Fragment {
            key: FragKey::v4(ip.src, ip.dst, ip.protocol, id),
            offset: usize::from(flg_off & 0x1fff) * 8,
            more: flg_off & 0x2000 != 0,
            data: ip.payload,
            head,
            limit: crate::frag::MAX_DATAGRAM - hl,
            link: from.mac,
            answerable: unicast && unicast_source(src, bcast),
        };
        let Insert::Complete { head_len } = self.reasm.insert(now, &f, &mut self.counters) else {
            return;
        };
        let mut out = self.reasm.take_output();
        // The first fragment's header, now for the whole datagram: its length,
        // no fragment fields, its checksum again.
        let total = out.len().min(65_535) as u16;
        if let Some(h) = out.get_mut(..head_len)
            && h.len() >= ipv4::HEADER_LEN
        {
            let mut p = ipv4::Packet::new_unchecked(h);
            p.set_total_len(total);
            p.set_more_frags(false);
            p.set_frag_offset(0);
            p.fill_checksum();
            self.ipv4_packet(now, &out, From::reassembled(from.mac, from.iface));
        }
        self.reasm.put_output(out);
    }

    /// An IPv6 fragment addressed to us: `packet` (to its payload length),
    /// its Fragment header `f` and the chain walked.
    pub(super) fn ipv6_fragment(
        &mut self,
        now: Instant,
        packet: &[u8],
        f: ext::FragmentInfo,
        chain: ext::ExtChain,
        unicast: bool,
        from: From<'_>,
    ) {
        let at = ipv6::HEADER_LEN + f.at;
        let data_at = at + FRAG_HEADER_LEN;
        let (Some(fixed), Some(fh), Some(data)) = (
            packet.first_chunk::<{ ipv6::HEADER_LEN }>(),
            packet.get(at..data_at),
            packet.get(data_at..),
        ) else {
            return;
        };
        let src: [u8; 16] = fixed[8..24].try_into().unwrap_or_default();
        let dst: [u8; 16] = fixed[24..40].try_into().unwrap_or_default();
        if f.offset == 0 {
            // RFC 7112: the first fragment holds the whole chain, up to and
            // including the upper-layer header.
            let upper = packet
                .get(ipv6::HEADER_LEN + chain.len..)
                .unwrap_or_default();
            if upper_header_len(chain.next_header).is_some_and(|n| upper.len() < n) {
                self.incomplete_chain(packet, unicast, from);
                return;
            }
        }
        // The reassembled packet starts with the first fragment's fixed
        // header and Fragment header; the unfragmentable extension headers
        // between them are left out (nothing here reads them again).
        let mut head = [0u8; ipv6::HEADER_LEN + FRAG_HEADER_LEN];
        head[..ipv6::HEADER_LEN].copy_from_slice(fixed);
        head[6] = protocol::FRAGMENT;
        head[ipv6::HEADER_LEN..].copy_from_slice(fh);
        let unfragmentable = f.at;
        let answerable = unicast && unicast_source(IpAddr::V6(Ipv6Addr::from(src)), None);
        let frag = Fragment {
            key: FragKey::v6(src, dst, f.ident),
            offset: usize::from(f.offset) * 8,
            more: f.more,
            data,
            head: &head,
            limit: crate::frag::MAX_DATAGRAM.saturating_sub(unfragmentable),
            link: from.mac,
            answerable,
        };
        match self.reasm.insert(now, &frag, &mut self.counters) {
            Insert::Complete { head_len } => {
                let mut out = self.reasm.take_output();
                if head_len == head.len() && out.len() >= head_len {
                    // Fixed header moved up over the Fragment header, with
                    // the fragment's Next Header and the new payload length.
                    let next = out.get(ipv6::HEADER_LEN).copied().unwrap_or(59);
                    let plen = (out.len() - head_len).min(65_535) as u16;
                    out.copy_within(..ipv6::HEADER_LEN, FRAG_HEADER_LEN);
                    if let Some(h) = out.get_mut(FRAG_HEADER_LEN..head_len) {
                        h[4..6].copy_from_slice(&plen.to_be_bytes());
                        h[6] = next;
                    }
                    let pkt = out.get(FRAG_HEADER_LEN..).unwrap_or_default();
                    self.ipv6_packet(now, pkt, From::reassembled(from.mac, from.iface), true);
                }
                self.reasm.put_output(out);
            }
            Insert::Refused(Refused::BadLength) if answerable => {
                // Pointing to the Payload Length field.
                self.parameter_problem(packet, from.mac, parameter_problem_code::HEADER_FIELD, 4);
            }
            Insert::Refused(Refused::TooLong) if answerable => {
                // Pointing to the Fragment Offset field.
                let ptr = (at + 2) as u32;
                self.parameter_problem(packet, from.mac, parameter_problem_code::HEADER_FIELD, ptr);
            }
            _ => {}
        }
    }

    /// An IPv6 first fragment without its whole header chain (RFC 7112
    /// section 5): dropped, counted, answered with parameter problem code 3,
    /// pointer 0.
    pub(super) fn incomplete_chain(&mut self, packet: &[u8], unicast: bool, from: From<'_>) {
        self.counters.ip_reasm_reqds += 1;
        self.counters.ip_reasm_fails += 1;
        self.counters.ip_reasm_incomplete_chain += 1;
        let src = packet
            .get(8..24)
            .and_then(|s| <[u8; 16]>::try_from(s).ok())
            .map(Ipv6Addr::from);
        if unicast && src.is_some_and(|s| unicast_source(IpAddr::V6(s), None)) {
            self.parameter_problem(
                packet,
                from.mac,
                parameter_problem_code::INCOMPLETE_CHAIN,
                0,
            );
        }
    }

    /// Sends an ICMPv6 parameter problem about `packet` (to its source, at
    /// `mac`), within the ICMP rate limit.
    fn parameter_problem(&mut self, packet: &[u8], mac: [u8; 6], code: u8, pointer: u32) {
        let (Some(me), Some(peer)) = (
            self.cfg.ipv6.map(|c| c.addr),
            packet
                .get(8..24)
                .and_then(|s| <[u8; 16]>::try_from(s).ok())
                .map(Ipv6Addr::from),
        ) else {
            return;
        };
        if !self.udp.icmp.take(self.clock) {
            self.counters.icmp_out_rate_limited += 1;
            return;
        }
        self.counters.icmp_out_msgs += 1;
        self.counters.icmp_out_parm_probs += 1;
        let quote = packet
            .get(..packet.len().min(icmpv6::MAX_INVOKING))
            .unwrap_or_default();
        let (s, d) = (me.octets(), peer.octets());
        let to = IpTo {
            mac,
            src: IpAddr::V6(me),
            dst: IpAddr::V6(peer),
            proto: protocol::ICMPV6,
            hop: HOP_LIMIT,
        };
        self.send_ip_direct(to, icmp::HEADER_LEN + quote.len(), |b| {
            icmpv6::emit_parameter_problem(b, Addrs { src: &s, dst: &d }, code, pointer, quote)
                .is_ok()
        });
    }

    /// Datagrams whose reassembly timed out by `now`: dropped, and answered
    /// with ICMP time exceeded, code 1, when their first fragment had arrived.
    pub(super) fn frag_timers(&mut self, now: Instant) {
        let mut quote = std::mem::take(&mut self.frag_quote);
        loop {
            let max = icmpv6::MAX_INVOKING;
            let Some(e) = self.reasm.expire(now, &mut quote, max, &mut self.counters) else {
                break;
            };
            if !e.answer {
                continue;
            }
            if !self.udp.icmp.take(now) {
                self.counters.icmp_out_rate_limited += 1;
                continue;
            }
            let (src, dst) = (Ipv6Addr::from(e.key.src), Ipv6Addr::from(e.key.dst));
            let mut to = IpTo {
                mac: e.link,
                src: IpAddr::V6(dst),
                dst: IpAddr::V6(src),
                proto: protocol::ICMPV6,
                hop: HOP_LIMIT,
            };
            self.counters.icmp_out_msgs += 1;
            self.counters.icmp_out_time_excds += 1;
            if e.key.v6 {
                let (s, d) = (dst.octets(), src.octets());
                let q = quote.get(..quote.len().min(icmpv6::MAX_INVOKING));
                let q = q.unwrap_or_default();
                self.send_ip_direct(to, icmp::HEADER_LEN + q.len(), |b| {
                    let ip = Addrs { src: &s, dst: &d };
                    icmpv6::emit_time_exceeded(b, ip, icmpv6::time_exceeded_code::REASSEMBLY, q)
                        .is_ok()
                });
            } else if let (Some(s), Some(d)) = (src.to_ipv4_mapped(), dst.to_ipv4_mapped()) {
                to.src = IpAddr::V4(d);
                to.dst = IpAddr::V4(s);
                to.proto = protocol::ICMP;
                let q = quote.get(..quote.len().min(icmpv4::MAX_INVOKING));
                let q = q.unwrap_or_default();
                self.send_ip_direct(to, icmp::HEADER_LEN + q.len(), |b| {
                    icmpv4::emit_time_exceeded(b, icmpv4::time_exceeded_code::REASSEMBLY, q).is_ok()
                });
            }
        }
        self.frag_quote = quote;
    }
}
