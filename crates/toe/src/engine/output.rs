//! Frame construction: Ethernet, IPv4 (RFC 791) or IPv6 (RFC 8200) and TCP headers
//! written straight into a buffer the caller lends (a [`TxSink`]), payload copied once from the
//! send buffer; ARP requests and replies, neighbour solicitations and
//! advertisements, ICMP echo replies and RSTs as control frames.
//!
//! With offloads on, a segment carrying more than one MSS of data goes out as one
//! super-segment with `gso: Some(Gso::new(TcpV4 | TcpV6, mss))`, and every TCP
//! segment with `csum: Partial { start: l4 offset, offset: 16 }` and the folded,
//! uncomplemented pseudo-header sum (addresses, protocol, and the L4 length of the
//! frame as built, as Linux's `CHECKSUM_PARTIAL` does) in the checksum field. The
//! NIC layer segments (IPv4 ID advancing by one per segment, FIN and PSH only on
//! the last) and completes the checksums. With offloads off, segments are at most
//! one MSS and every checksum is complete.

use super::Engine;
use super::sink::TxSink;
use super::template::{TcpFixed, TxTemplate};
use crate::config::NextHop;
use crate::net::neighbor::{Lookup, Queued};
use crate::tcp::conn::Conn;
use crate::tcp::segment::Outgoing;
use crate::time::Instant;
use linerate_nic::Frags;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::checksum;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::icmp::ndp;
use linerate_wire::icmp::v6::Addrs;
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::{arp, ipv6, tcp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Largest TCP data per super-segment: the IPv4 total length (and IPv6 payload
/// length) is 16 bits, so 65535 less the largest IP and TCP headers.
pub(crate) const MAX_SUPER_DATA: usize = 65_535 - ipv4::HEADER_LEN - tcp::MAX_HEADER_LEN;

/// Bytes of data one connection sends per visit of the transmit round
/// (`Engine::poll_transmit_into`): one super-segment's worth, so that with
/// offloads off a visit sends as many MSS segments as one super-segment would
/// carry with them on.
pub(crate) const ROUND_QUANTUM: usize = MAX_SUPER_DATA;

/// Most chunks of the send buffer one super-segment references (more, from
/// many short writes, and it is copied instead). Linux's `MAX_SKB_FRAGS` is
/// 17. Each transmit round seals what the writer added since the last into a
/// chunk of its own, so a writer of 1 KiB pieces leaves chunks of one round's
/// freed window each; with too few references a super-segment of such chunks
/// is copied whole (`SendBuf::peek`; counter `tcp_out_by_ref` against the
/// report's 1 KiB cells shows it).
const MAX_TX_FRAGS: usize = 16;

/// Hop limit / TTL of the datagrams we originate.
pub(super) const HOP_LIMIT: u8 = 64;

/// Where a control datagram goes: next-hop MAC, addresses, protocol, hop limit.
#[derive(Debug, Clone, Copy)]
pub(super) struct IpTo {
    pub mac: [u8; 6],
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub hop: u8,
}

/// Writes an Ethernet header at the start of `buf` (at least 14 bytes).
pub(super) fn put_eth(buf: &mut [u8], dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    if let Some(h) = buf.get_mut(..ethernet::HEADER_LEN) {
        let mut e = ethernet::Packet::new_unchecked(h);
        e.set_dst_addr(dst);
        e.set_src_addr(src);
        e.set_ethertype(ethertype);
    }
}

/// Writes a 20-byte IPv4 header (no options, DF) at the start of `buf`, checksum filled.
/// Every field is known, so the header is put together as one array and its
/// checksum summed from the fields (RFC 1071) rather than over the bytes.
pub(super) fn put_ipv4(
    buf: &mut [u8],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    payload_len: usize,
    id: u16,
) {
    let Some(h) = buf.get_mut(..ipv4::HEADER_LEN) else {
        return;
    };
    let total = (ipv4::HEADER_LEN + payload_len).min(65_535) as u16;
    let [s0, s1, s2, s3] = src.octets();
    let [d0, d1, d2, d3] = dst.octets();
    let word = |a: u8, b: u8| u32::from(u16::from_be_bytes([a, b]));
    // Version 4 and IHL 5, the total length, the ID, DF, TTL and protocol,
    // the addresses.
    let mut sum = 0x4500
        + u32::from(total)
        + u32::from(id)
        + 0x4000
        + word(HOP_LIMIT, proto)
        + word(s0, s1)
        + word(s2, s3)
        + word(d0, d1)
        + word(d2, d3);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    let [c0, c1] = (!(sum as u16)).to_be_bytes();
    let [t0, t1] = total.to_be_bytes();
    let [i0, i1] = id.to_be_bytes();
    h.copy_from_slice(&[
        0x45, 0, t0, t1, i0, i1, 0x40, 0, HOP_LIMIT, proto, c0, c1, s0, s1, s2, s3, d0, d1, d2, d3,
    ]);
}

/// Writes a 40-byte IPv6 header at the start of `buf`.
pub(super) fn put_ipv6(
    buf: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    next: u8,
    payload_len: usize,
    hop: u8,
) {
    if let Some(h) = buf.get_mut(..ipv6::HEADER_LEN) {
        h.fill(0);
        let mut p = ipv6::Packet::new_unchecked(h);
        p.set_version(6);
        p.set_payload_len(payload_len.min(65_535) as u16);
        p.set_next_header(next);
        p.set_hop_limit(hop);
        p.set_src_addr(src.octets());
        p.set_dst_addr(dst.octets());
    }
}

/// Sets the ECN codepoint `ecn` (RFC 3168 section 5) in the IPv4 or IPv6 header
/// at the start of `ip`, whose ECN bits are zero; an IPv4 header checksum is
/// updated incrementally (RFC 1624 equation 3: the codepoint only adds to the
/// first 16-bit word). Segments get theirs from their template
/// (`template::TxTemplate::write`); this is the reference the tests build
/// frames with.
#[cfg(test)]
pub(super) fn set_ecn(ip: &mut [u8], ecn: u8) {
    let ecn = ecn & 0b11;
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            if let Some(b) = ip.get_mut(1) {
                *b |= ecn;
            }
            if let Some(c) = ip.get_mut(10..12) {
                let old = u16::from_be_bytes([c[0], c[1]]);
                let mut sum = u32::from(!old) + u32::from(ecn);
                sum = (sum & 0xffff) + (sum >> 16);
                c.copy_from_slice(&(!(sum as u16)).to_be_bytes());
            }
        }
        Some(6) => {
            // The traffic class spans bytes 0 and 1; its low two bits are the
            // top of byte 1's upper nibble.
            if let Some(b) = ip.get_mut(1) {
                *b |= ecn << 4;
            }
        }
        _ => {}
    }
}

/// The IP header length for an address family.
pub(super) fn ip_header_len(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => ipv4::HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN,
    }
}

impl Engine {
    /// Asks connection `idx` for its next segment and writes the frame straight
    /// into a buffer of `sink`; returns whether a segment was produced. A frame for
    /// an unresolved neighbour goes to the neighbour queue (and a probe is sent); a
    /// frame the sink has no room for waits in the control queue for the next poll.
    /// Emits connection `idx`'s next segment (or super-segment); returns the
    /// bytes of TCP data it carried, `None` if it had nothing to send.
    pub(super) fn emit_tcp(
        &mut self,
        now: Instant,
        idx: usize,
        sink: &mut impl TxSink,
    ) -> Option<usize> {
        self.try_emit_tcp(now, idx, sink)
    }

    fn try_emit_tcp(&mut self, now: Instant, idx: usize, sink: &mut impl TxSink) -> Option<usize> {
        let offloads = self.cfg.offloads;
        // One look-up of the slot for the whole segment (the fields used
        // beside it are disjoint from `slots`).
        let slot = self.slots.get_mut(idx)?;
        let conn = slot.conn.as_mut()?;
        // Bytes of TCP data one segment (or super-segment) may carry.
        let max_data = if offloads {
            MAX_SUPER_DATA
        } else {
            conn.state.snd().map_or(1, |s| s.mss.max(1))
        };
        // Used where it was returned: moved out of the `Option`, its fields
        // would be read back wider than the callee wrote them (perf: a
        // store-forwarding stall on every segment).
        let out = conn.poll_output(now, max_data, &mut self.counters);
        let o = out.as_ref()?;
        // A super-segment to a sink that takes scatter-gather frames goes as its
        // headers plus references to the send buffer: its payload is not copied
        // here (nor, over a memory wire, anywhere before the reader's copy).
        let mut frags = Frags::new();
        let by_ref = offloads
            && o.data_len > o.mss
            && sink.takes_frags()
            && conn
                .tx
                .frags(o.data_off, o.data_len, MAX_TX_FRAGS, &mut frags);
        let conn = &*conn;
        let data_len = o.data_len;
        let remote = conn.remote;
        let segments = o.wire_segments();
        self.counters.tcp_out_segs += segments as u64;
        self.counters.ip_out_requests += 1;
        let id = self.ip_id;
        self.ip_id = self.ip_id.wrapping_add(segments as u16);
        let mut opts = [0u8; tcp::options::MAX_LEN];
        let opt_len = o.write_options(&mut opts);
        let opts = opts.get(..opt_len)?;
        let total = ethernet::HEADER_LEN
            + ip_header_len(remote.ip())
            + tcp::HEADER_LEN
            + opt_len
            + o.data_len;
        // The next hop and output interface, looked up once per connection
        // and again after the routing table changed (the template then
        // again too: its source MAC is the interface's).
        let generation = self.routes.generation();
        if slot.route.2 != generation {
            let (hop, dev) = self.routes.lookup_dev(remote.ip());
            slot.route = (hop, u8::try_from(dev).unwrap_or(0), generation);
            slot.tmpl = TxTemplate::EMPTY;
        }
        let src_mac = match usize::from(slot.route.1) {
            0 => self.cfg.mac,
            i => self
                .cfg
                .interfaces
                .get(i - 1)
                .map_or(self.cfg.mac, |f| f.mac),
        };
        let hop = match slot.route.0 {
            NextHop::Neighbor(ip) => ip,
            NextHop::Blackhole => {
                // Gone as on a wire that drops it: retransmitted while the
                // connection lasts.
                self.counters.route_blackhole_drops += 1;
                return Some(data_len);
            }
            NextHop::Unreachable | NextHop::NoRoute => {
                self.counters.route_unreachable_drops += 1;
                return Some(data_len);
            }
        };
        let hit = match self.neighbors.lookup_mut(now, hop) {
            Lookup::Hit(mac) => Some(mac),
            Lookup::Miss => None,
        };
        if let Some(dst_mac) = hit
            && !slot.tmpl.is_for(dst_mac)
        {
            slot.tmpl = TxTemplate::new((dst_mac, src_mac), conn.local, conn.remote)?;
        }
        let tmpl = &slot.tmpl;
        if by_ref
            && hit.is_some()
            && let Some(buf) = sink.buffer(total - o.data_len)
        {
            // The headers only: build_tcp's copy of the data copies nothing.
            let meta = build_tcp(buf, tmpl, conn, o, opts, id, offloads);
            sink.commit_frags(meta.as_ref()?, frags);
            self.counters.tcp_out_by_ref += 1;
            return Some(data_len);
        }
        drop(frags);
        if hit.is_some()
            && let Some(buf) = sink.buffer(total)
        {
            // By reference, as `out` above.
            let meta = build_tcp(buf, tmpl, conn, o, opts, id, offloads);
            sink.commit(meta.as_ref()?);
            return Some(data_len);
        }
        let mut frame = vec![0u8; total];
        // Without a next hop, a template of its own, the destination MAC
        // zero until the neighbour is resolved (`Engine::release`).
        let unresolved;
        let tmpl = if hit.is_some() {
            tmpl
        } else {
            unresolved = TxTemplate::new(([0; 6], src_mac), conn.local, conn.remote)?;
            &unresolved
        };
        let meta = build_tcp(&mut frame, tmpl, conn, o, opts, id, offloads)?;
        if hit.is_some() {
            self.control.push_back((frame, meta));
            return Some(data_len);
        }
        match self.neighbors.enqueue(now, hop, (frame, meta)) {
            Queued::ProbeNow => self.probe(hop),
            Queued::Waiting => {}
            Queued::Dropped => self.counters.neighbor_drops += 1,
            Queued::TableFull => {
                self.counters.neighbor_drops += 1;
                self.counters.neighbor_table_full += 1;
            }
        }
        Some(data_len)
    }

    /// Sends an ARP request or a neighbour solicitation for `ip`, out of the
    /// interface its on-link route names, with that interface's MAC and
    /// address.
    pub(super) fn probe(&mut self, ip: IpAddr) {
        let iface = self.output_iface(ip);
        let mac = self.iface_mac(iface);
        match ip {
            IpAddr::V4(target) => {
                let Some(me) = self.iface_v4(iface).or(self.cfg.ipv4) else {
                    return;
                };
                let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
                put_eth(&mut f, ethernet::BROADCAST, mac, ethertype::ARP);
                let body = f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default();
                if arp::emit_request(body, mac, me.addr.octets(), target.octets()).is_ok() {
                    self.counters.arp_requests_out += 1;
                    if let Some(c) = self.iface_counter(iface) {
                        c.arp_requests_out += 1;
                    }
                    self.control.push_back((f, OffloadMeta::plain()));
                }
            }
            IpAddr::V6(target) => {
                let Some(me) = self.iface_v6(iface).or(self.cfg.ipv6) else {
                    return;
                };
                let group = Ipv6Addr::from(ndp::solicited_node_multicast(&target.octets()));
                let len = ndp::NEIGHBOR_LEN + ndp::LL_ADDR_OPTION_LEN;
                let l4 = ethernet::HEADER_LEN + ipv6::HEADER_LEN;
                let mut f = vec![0u8; l4 + len];
                put_eth(
                    &mut f,
                    ndp::multicast_mac(&group.octets()),
                    mac,
                    ethertype::IPV6,
                );
                put_ipv6(
                    f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default(),
                    me.addr,
                    group,
                    protocol::ICMPV6,
                    len,
                    255,
                );
                let ip = Addrs {
                    src: &me.addr.octets(),
                    dst: &group.octets(),
                };
                let body = f.get_mut(l4..).unwrap_or_default();
                if ndp::emit_neighbor_solicitation(body, ip, &target.octets(), Some(mac)).is_ok() {
                    self.counters.icmp_out_msgs += 1;
                    if let Some(c) = self.iface_counter(iface) {
                        c.ndp_solicits_out += 1;
                    }
                    self.control.push_back((f, OffloadMeta::plain()));
                }
            }
        }
    }

    /// Builds an IPv4 or IPv6 frame around an L4 message written by `body` (which
    /// gets the buffer for the message and returns its length), addressed to
    /// `dst_mac`, and queues it.
    pub(super) fn send_ip_direct(
        &mut self,
        to: IpTo,
        len: usize,
        body: impl FnOnce(&mut [u8]) -> bool,
    ) {
        let IpTo {
            mac: dst_mac,
            src,
            dst,
            proto,
            hop,
        } = to;
        let l4 = ethernet::HEADER_LEN + ip_header_len(src);
        let mut f = vec![0u8; l4 + len];
        // Out of the interface that owns the address it is sent from.
        let mac = self.mac_for_src(src);
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put_eth(&mut f, dst_mac, mac, ethertype::IPV4);
                let id = self.next_ip_id(1);
                put_ipv4(
                    f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default(),
                    s,
                    d,
                    proto,
                    len,
                    id,
                );
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put_eth(&mut f, dst_mac, mac, ethertype::IPV6);
                put_ipv6(
                    f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default(),
                    s,
                    d,
                    proto,
                    len,
                    hop,
                );
            }
            _ => return,
        }
        if body(f.get_mut(l4..).unwrap_or_default()) {
            self.counters.ip_out_requests += 1;
            self.control.push_back((f, OffloadMeta::plain()));
        }
    }

    /// Sends a SYN-ACK that belongs to no connection (a SYN cookie's, RFC 4987
    /// section 3.6) from `local` to `remote` at `dst_mac`, checksum complete.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_syn_ack_stateless(
        &mut self,
        dst_mac: [u8; 6],
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        ack: u32,
        wnd: u16,
        syn: &tcp::SynOptions,
    ) {
        let mut opts = [0u8; tcp::options::MAX_LEN];
        let opt_len = syn.emit(&mut opts).unwrap_or(0);
        let len = tcp::HEADER_LEN + opt_len;
        let Some(pseudo) = tcp_pseudo(local.ip(), remote.ip(), len) else {
            return;
        };
        self.counters.tcp_out_segs += 1;
        self.send_ip_direct(
            IpTo {
                mac: dst_mac,
                src: local.ip(),
                dst: remote.ip(),
                proto: protocol::TCP,
                hop: HOP_LIMIT,
            },
            len,
            |b| {
                let Some(h) = b.get_mut(..len) else {
                    return false;
                };
                let mut t = tcp::Packet::new_unchecked(h);
                t.set_src_port(local.port());
                t.set_dst_port(remote.port());
                t.set_seq_number(seq);
                t.set_ack_number(ack);
                t.set_data_offset((len / 4) as u8);
                t.set_flags(tcp::Flags::SYN | tcp::Flags::ACK);
                t.set_window(wnd);
                if let Some(o) = opts.get(..opt_len) {
                    t.options_mut().copy_from_slice(o);
                }
                t.fill_checksum(pseudo);
                true
            },
        );
    }

    /// Sends an RST (RFC 9293 section 3.10.7.1) from `local` to `remote` at `dst_mac`.
    pub(super) fn send_rst(
        &mut self,
        dst_mac: [u8; 6],
        local: SocketAddr,
        remote: SocketAddr,
        rst: crate::tcp::input::Rst,
    ) {
        let flags = if rst.ack.is_some() {
            tcp::Flags::RST | tcp::Flags::ACK
        } else {
            tcp::Flags::RST
        };
        let ack = rst.ack.map_or(0, |a| a.0);
        let Some(pseudo) = tcp_pseudo(local.ip(), remote.ip(), tcp::HEADER_LEN) else {
            return;
        };
        self.counters.tcp_out_rsts += 1;
        self.counters.tcp_out_segs += 1;
        self.send_ip_direct(
            IpTo {
                mac: dst_mac,
                src: local.ip(),
                dst: remote.ip(),
                proto: protocol::TCP,
                hop: HOP_LIMIT,
            },
            tcp::HEADER_LEN,
            |b| {
                let Some(h) = b.get_mut(..tcp::HEADER_LEN) else {
                    return false;
                };
                let mut t = tcp::Packet::new_unchecked(h);
                t.set_src_port(local.port());
                t.set_dst_port(remote.port());
                t.set_seq_number(rst.seq.0);
                t.set_ack_number(ack);
                t.set_data_offset(5);
                t.set_flags(flags);
                t.fill_checksum(pseudo);
                true
            },
        );
    }
}

/// Writes the frame for segment `o` of `conn` into `buf` (exactly the frame's
/// length, or its headers' only when the data goes by reference): the headers
/// from `tmpl` (Ethernet with the next hop's MAC, IP, the ports), the rest of
/// TCP with `opts`, and the data copied from the send buffer. Every header byte
/// is written, so `buf` may hold anything before. Returns the frame's offload
/// metadata.
///
/// Inline: returned from a call, the metadata is written to the stack field by
/// field and read back whole by the sink's commit, which stalls on store
/// forwarding (perf, every segment).
#[inline(always)]
pub(super) fn build_tcp(
    buf: &mut [u8],
    tmpl: &TxTemplate,
    conn: &Conn,
    o: &Outgoing,
    opts: &[u8],
    id: u16,
    offloads: bool,
) -> Option<OffloadMeta> {
    let tcp_len = tcp::HEADER_LEN + opts.len();
    let l4_len = tcp_len + o.data_len;
    let ecn = if conn.ecn.ect(o.data_len, o.retransmit) {
        crate::tcp::ecn::ECT0
    } else {
        0
    };
    let ack = if o.flags.contains(tcp::Flags::ACK) {
        o.ack.0
    } else {
        0
    };
    let fixed = TcpFixed {
        seq: o.seq.0,
        ack,
        flags: u32::from(o.flags.bits() & 0x1ff),
        wnd: o.wnd,
    };
    let (hdr_sum, pseudo) = tmpl.write(buf, l4_len, id, ecn, fixed, opts)?;
    let l4 = tmpl.l4();
    let seg = buf.get_mut(l4..)?;
    let (hdr, data) = seg.split_at_mut(tcp_len);
    let sum = if offloads {
        conn.tx.peek(o.data_off, data);
        None
    } else {
        // Without checksum offload the sum comes with the copy (tcp_len is a
        // multiple of 4, so the data's sum adds as it is).
        let (_, data_sum) = conn.tx.peek_sum(o.data_off, data);
        Some(checksum::combine(hdr_sum, data_sum))
    };
    let mut meta = OffloadMeta::plain();
    let csum = match sum {
        Some(sum) => checksum::finish(sum),
        None => {
            meta.csum = Checksum::Partial {
                start: l4 as u16,
                offset: 16,
            };
            if o.data_len > o.mss && o.mss > 0 {
                let kind = if tmpl.is_v4() {
                    GsoType::TcpV4
                } else {
                    GsoType::TcpV6
                };
                let mut gso = Gso::new(kind, o.mss.min(65_535) as u16);
                gso.segs = o.wire_segments().min(65_535) as u16;
                // CWR on the first wire segment only (RFC 3168 section 6.1.2).
                gso.ecn = o.flags.contains(tcp::Flags::CWR);
                meta.gso = Some(gso);
            }
            checksum::fold(pseudo)
        }
    };
    if let Some(c) = hdr.get_mut(16..18) {
        c.copy_from_slice(&csum.to_be_bytes());
    }
    Some(meta)
}

/// The TCP pseudo-header sum for a `len`-byte segment from `src` to `dst`, or
/// `None` if the two are of different families.
pub(super) fn tcp_pseudo(src: IpAddr, dst: IpAddr, len: usize) -> Option<u32> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(checksum::pseudo_ipv4(
            s.octets(),
            d.octets(),
            protocol::TCP,
            len.min(65_535) as u16,
        )),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(checksum::pseudo_ipv6(
            &s.octets(),
            &d.octets(),
            protocol::TCP,
            len as u32,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linerate_wire::etherparse::{IpNumber, Ipv4Header};

    /// The IPv4 header as etherparse writes it, with its checksum, for a
    /// spread of lengths, IDs, protocols and addresses.
    #[test]
    fn ipv4_header_matches_etherparse() {
        let mut x = 0x1234_5678_u32;
        for i in 0..2_000u32 {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let (src, dst) = (Ipv4Addr::from(x), Ipv4Addr::from(x.rotate_left(13) ^ i));
            let len = (x >> 7) as usize % 70_000;
            let (id, proto) = ((x >> 3) as u16, [6u8, 17, 1][i as usize % 3]);
            let mut ours = [0xaau8; 20];
            put_ipv4(&mut ours, src, dst, proto, len, id);
            let payload = (20 + len).min(65_535) as u16 - 20;
            let mut h = Ipv4Header::new(
                payload,
                HOP_LIMIT,
                IpNumber(proto),
                src.octets(),
                dst.octets(),
            )
            .unwrap();
            h.identification = id;
            h.dont_fragment = true;
            h.header_checksum = h.calc_header_checksum();
            assert_eq!(ours.to_vec(), h.to_bytes().to_vec(), "{i}");
        }
    }
}
