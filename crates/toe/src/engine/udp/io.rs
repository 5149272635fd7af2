//! UDP datagrams on the wire: frames built straight into the transmit sink
//! (one super-datagram with a USO request, or datagram by datagram), received
//! datagrams checked and queued (GRO super-datagrams split), and the ICMP port
//! unreachable answer. See the [parent module](super) for the rules.

use super::UdpOut;
use crate::config::NextHop;
use crate::engine::Engine;
use crate::engine::frag::FRAG_HEADER_LEN;
use crate::engine::output::{HOP_LIMIT, IpTo, ip_header_len, put_eth, put_ipv4, put_ipv6};
use crate::engine::sink::TxSink;
use crate::net::neighbor::{Lookup, Queued};
use crate::time::Instant;
use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
use linerate_wire::checksum;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::icmp::v6::Addrs;
use linerate_wire::icmp::{self, v4 as icmpv4, v6 as icmpv6};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::{ipv6, udp};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// A received UDP datagram and where it came from.
#[derive(Debug, Clone, Copy)]
pub(in crate::engine) struct UdpIn<'a> {
    /// IP source and destination.
    pub src: IpAddr,
    pub dst: IpAddr,
    /// Addressed to our unicast address (not broadcast or multicast).
    pub unicast: bool,
    /// The whole IP datagram (quoted by an ICMP error).
    pub packet: &'a [u8],
    /// The UDP header and payload.
    pub l4: &'a [u8],
    /// The sender's Ethernet address.
    pub mac: [u8; 6],
    pub meta: &'a OffloadMeta,
}

/// The Ethernet address of a broadcast or multicast destination, which needs
/// no resolution (RFC 1112 section 6.4, RFC 2464 section 7).
fn group_mac(ip: IpAddr, subnet_broadcast: Option<Ipv4Addr>) -> Option<[u8; 6]> {
    match ip {
        IpAddr::V4(a) if a == Ipv4Addr::BROADCAST || Some(a) == subnet_broadcast => {
            Some(ethernet::BROADCAST)
        }
        IpAddr::V4(a) if a.is_multicast() => {
            let o = a.octets();
            Some([0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]])
        }
        IpAddr::V6(a) if a.is_multicast() => {
            let o = a.octets();
            Some([0x33, 0x33, o[12], o[13], o[14], o[15]])
        }
        _ => None,
    }
}

/// True for an address that may be the source of a datagram we answer with an
/// ICMP error (RFC 1122 section 3.2.2: not broadcast, multicast, unspecified).
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

/// Writes the frame of one UDP datagram (or a super-datagram) into `buf`
/// (exactly its length): Ethernet with `macs` (destination, source), IP, UDP,
/// `payload`. The checksum is complete, or partial when `partial`; `gso` marks a
/// super-datagram. Returns the frame's metadata.
#[allow(clippy::too_many_arguments)]
fn build_udp(
    buf: &mut [u8],
    macs: ([u8; 6], [u8; 6]),
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    id: u16,
    partial: bool,
    gso: Option<Gso>,
) -> Option<OffloadMeta> {
    let l3 = ethernet::HEADER_LEN;
    let l4 = l3 + ip_header_len(src.ip());
    let ulen = udp::HEADER_LEN + payload.len();
    let ulen16 = u16::try_from(ulen).ok()?;
    let pseudo = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            put_eth(buf, macs.0, macs.1, ethertype::IPV4);
            put_ipv4(buf.get_mut(l3..)?, s, d, protocol::UDP, ulen, id);
            checksum::pseudo_ipv4(s.octets(), d.octets(), protocol::UDP, ulen16)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            put_eth(buf, macs.0, macs.1, ethertype::IPV6);
            put_ipv6(buf.get_mut(l3..)?, s, d, protocol::UDP, ulen, HOP_LIMIT);
            checksum::pseudo_ipv6(&s.octets(), &d.octets(), protocol::UDP, ulen as u32)
        }
        _ => return None,
    };
    let dgram = buf.get_mut(l4..)?;
    if dgram.len() != ulen {
        return None;
    }
    let mut u = udp::Packet::new_unchecked(dgram);
    u.set_src_port(src.port());
    u.set_dst_port(dst.port());
    u.set_length(ulen16);
    u.payload_mut().copy_from_slice(payload);
    let mut meta = OffloadMeta::plain();
    if partial {
        u.set_checksum(checksum::fold(pseudo));
        meta.csum = Checksum::Partial {
            start: l4 as u16,
            offset: 6,
        };
        meta.gso = gso;
    } else {
        u.fill_checksum(pseudo);
    }
    Some(meta)
}

/// Writes one fragment's frame into `buf` (exactly its length): Ethernet with
/// `macs`, then an IPv4 header with DF clear, MF = `more` and offset `off`, or
/// an IPv6 header and a Fragment header (RFC 8200 section 4.5) with
/// identification `id`, then `piece`. False if `buf` is not that length.
#[allow(clippy::too_many_arguments)]
fn put_fragment(
    buf: &mut [u8],
    macs: ([u8; 6], [u8; 6]),
    src: IpAddr,
    dst: IpAddr,
    id: u32,
    off: usize,
    more: bool,
    piece: &[u8],
) -> bool {
    let l3 = ethernet::HEADER_LEN;
    let units = (off / 8) as u16;
    let data_at = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            put_eth(buf, macs.0, macs.1, ethertype::IPV4);
            let Some(ip) = buf.get_mut(l3..) else {
                return false;
            };
            put_ipv4(ip, s, d, protocol::UDP, piece.len(), id as u16);
            let Some(h) = ip.get_mut(..ipv4::HEADER_LEN) else {
                return false;
            };
            let mut p = ipv4::Packet::new_unchecked(h);
            p.set_dont_frag(false);
            p.set_more_frags(more);
            p.set_frag_offset(units);
            p.fill_checksum();
            l3 + ipv4::HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            put_eth(buf, macs.0, macs.1, ethertype::IPV6);
            let Some(ip) = buf.get_mut(l3..) else {
                return false;
            };
            let plen = FRAG_HEADER_LEN + piece.len();
            put_ipv6(ip, s, d, protocol::FRAGMENT, plen, HOP_LIMIT);
            let Some(fh) = ip.get_mut(ipv6::HEADER_LEN..ipv6::HEADER_LEN + FRAG_HEADER_LEN) else {
                return false;
            };
            let [o0, o1] = ((units << 3) | u16::from(more)).to_be_bytes();
            let [i0, i1, i2, i3] = id.to_be_bytes();
            fh.copy_from_slice(&[protocol::UDP, 0, o0, o1, i0, i1, i2, i3]);
            l3 + ipv6::HEADER_LEN + FRAG_HEADER_LEN
        }
        _ => return false,
    };
    match buf.get_mut(data_at..) {
        Some(d) if d.len() == piece.len() => {
            d.copy_from_slice(piece);
            true
        }
        _ => false,
    }
}

impl Engine {
    /// the sink ran out of room (the rest stays queued).
    pub(in crate::engine) fn flush_udp(
        &mut self,
        now: Instant,
        sink: &mut impl TxSink,
        n: &mut usize,
    ) -> bool {
        while let Some(mut out) = self.udp.tx.pop_front() {
            if !self.emit_udp(now, &mut out, sink, n) {
                self.udp.tx.push_front(out);
                return false;
            }
            if let Some(s) = self.udp.live_mut(out.slot, out.generation) {
                s.tx_bytes = s.tx_bytes.saturating_sub(out.data.len());
                self.udp_changed(out.slot);
            }
            self.udp.recycle(out.data);
        }
        // An ARP request or neighbour solicitation a miss just queued.
        self.flush_control(sink, n)
    }

    /// Where a datagram for `ip` goes: the Ethernet address to send it to if
    /// known now, and the next hop's address to resolve otherwise (a group
    /// address's MAC is always known). None if a route drops it (counted).
    fn udp_next_hop(&mut self, now: Instant, ip: IpAddr) -> Option<(Option<[u8; 6]>, IpAddr)> {
        let bcast = self.cfg.ipv4.map(|c| c.broadcast());
        if let Some(mac) = group_mac(ip, bcast) {
            return Some((Some(mac), ip));
        }
        let hop = match self.routes.lookup(ip) {
            NextHop::Neighbor(hop) => hop,
            NextHop::Blackhole => {
                self.counters.route_blackhole_drops += 1;
                return None;
            }
            NextHop::Unreachable | NextHop::NoRoute => {
                self.counters.route_unreachable_drops += 1;
                return None;
            }
        };
        let mac = match self.neighbors.lookup(now, hop) {
            Lookup::Hit(mac) => Some(mac),
            Lookup::Miss => None,
        };
        Some((mac, hop))
    }

    /// The MAC a datagram to `ip` leaves with: its output interface's (see
    /// `iface`); groups and broadcasts leave by interface 0.
    fn udp_src_mac(&self, ip: IpAddr) -> [u8; 6] {
        if self.cfg.interfaces.is_empty() || group_mac(ip, None).is_some() {
            return self.cfg.mac;
        }
        let bcast = self.cfg.ipv4.map(|c| c.broadcast());
        if group_mac(ip, bcast).is_some() {
            return self.cfg.mac;
        }
        self.iface_mac(self.output_iface(ip))
    }

    /// Emits what is left of `out`; false if the sink had no room for a frame.
    fn emit_udp(
        &mut self,
        now: Instant,
        out: &mut UdpOut,
        sink: &mut impl TxSink,
        n: &mut usize,
    ) -> bool {
        let offloads = self.cfg.offloads;
        let Some((hop, hop_ip)) = self.udp_next_hop(now, out.dst.ip()) else {
            // Dropped by its route (a change of the table since the send).
            out.off = out.data.len();
            return true;
        };
        let src_mac = self.udp_src_mac(out.dst.ip());
        let hdrs = ethernet::HEADER_LEN + ip_header_len(out.dst.ip()) + udp::HEADER_LEN;
        if out.may_fragment
            && (out.frag_id.is_some() || out.data.len() > self.udp_max_payload(now, out.dst.ip()))
        {
            return self.emit_udp_fragments(now, out, (hop, hop_ip), sink, n);
        }
        loop {
            let rest = out.data.len() - out.off;
            let (len, gso) = match out.seg {
                0 => (rest, None),
                s if offloads && rest > s => {
                    let kind = GsoType::UdpL4;
                    let mut g = Gso::new(kind, s.min(65_535) as u16);
                    g.segs = rest.div_ceil(s).min(65_535) as u16;
                    (rest, Some(g))
                }
                s => (rest.min(s), None),
            };
            let segments = gso.map_or(1, |g| usize::from(g.segs));
            let payload = out.data.get(out.off..out.off + len).unwrap_or_default();
            let id = self.next_ip_id(segments);
            let frame_len = hdrs + len;
            let built = match hop {
                Some(mac) => {
                    let Some(buf) = sink.buffer(frame_len) else {
                        return false;
                    };
                    let meta = build_udp(
                        buf,
                        (mac, src_mac),
                        out.src,
                        out.dst,
                        payload,
                        id,
                        offloads,
                        gso,
                    );
                    if let Some(h) = out.hops {
                        crate::engine::mcast::set_hops(buf, h);
                    }
                    if let Some(m) = meta {
                        sink.commit(&m);
                        *n += 1;
                    }
                    meta.is_some()
                }
                None => {
                    let mut f = vec![0u8; frame_len];
                    let meta = build_udp(
                        &mut f,
                        ([0; 6], src_mac),
                        out.src,
                        out.dst,
                        payload,
                        id,
                        offloads,
                        gso,
                    );
                    if let Some(m) = meta {
                        match self.neighbors.enqueue(now, hop_ip, (f, m)) {
                            Queued::ProbeNow => self.probe(hop_ip),
                            Queued::Waiting => {}
                            Queued::Dropped => self.counters.neighbor_drops += 1,
                            Queued::TableFull => {
                                self.counters.neighbor_drops += 1;
                                self.counters.neighbor_table_full += 1;
                            }
                        }
                    }
                    meta.is_some()
                }
            };
            if built {
                self.counters.udp_out_datagrams += segments as u64;
                self.counters.ip_out_requests += 1;
            }
            out.off += len;
            if out.off >= out.data.len() {
                return true;
            }
        }
    }

    /// Emits what is left of `out`, a datagram larger than the path MTU, in
    /// fragments (see the [parent module](super)); false if the sink had no
    /// room for one (the rest goes on the next poll, with the same
    /// identification).
    fn emit_udp_fragments(
        &mut self,
        now: Instant,
        out: &mut UdpOut,
        (hop, hop_ip): (Option<[u8; 6]>, IpAddr),
        sink: &mut impl TxSink,
        n: &mut usize,
    ) -> bool {
        // The whole UDP datagram, checksum complete: the fragments are its
        // pieces.
        let mut dg = std::mem::take(&mut self.frag_scratch);
        dg.clear();
        dg.resize(udp::HEADER_LEN + out.data.len(), 0);
        let ulen = dg.len();
        let v6 = out.dst.is_ipv6();
        let pseudo = match (out.src.ip(), out.dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                checksum::pseudo_ipv4(s.octets(), d.octets(), protocol::UDP, ulen as u16)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                checksum::pseudo_ipv6(&s.octets(), &d.octets(), protocol::UDP, ulen as u32)
            }
            _ => 0,
        };
        {
            let mut u = udp::Packet::new_unchecked(&mut dg[..]);
            u.set_src_port(out.src.port());
            u.set_dst_port(out.dst.port());
            u.set_length(ulen.min(65_535) as u16);
            u.payload_mut().copy_from_slice(&out.data);
            u.fill_checksum(pseudo);
        }
        let id = match out.frag_id {
            Some(id) => id,
            None => {
                let id = match (out.src.ip(), out.dst.ip()) {
                    (IpAddr::V6(s), IpAddr::V6(d)) => self.ident6.next(&s.octets(), &d.octets()),
                    _ => u32::from(self.next_ip_id(1)),
                };
                out.frag_id = Some(id);
                id
            }
        };
        // Data per fragment: what fits the path MTU behind the IP header
        // (and the Fragment header), in 8-byte units.
        let ip_hdrs = ip_header_len(out.dst.ip()) + if v6 { FRAG_HEADER_LEN } else { 0 };
        let mtu = usize::from(self.path_mtu(now, out.dst.ip()));
        let per = (mtu.saturating_sub(ip_hdrs) / 8 * 8).max(8);
        let src_mac = self.udp_src_mac(out.dst.ip());
        let mut room = true;
        while out.off < ulen {
            let off = out.off;
            let end = off.saturating_add(per).min(ulen);
            let more = end < ulen;
            let piece = dg.get(off..end).unwrap_or_default();
            let frame_len = ethernet::HEADER_LEN + ip_hdrs + piece.len();
            let hops = out.hops;
            let fill = |buf: &mut [u8], mac: [u8; 6]| {
                let ok = put_fragment(
                    buf,
                    (mac, src_mac),
                    out.src.ip(),
                    out.dst.ip(),
                    id,
                    off,
                    more,
                    piece,
                );
                if let Some(h) = hops {
                    crate::engine::mcast::set_hops(buf, h);
                }
                ok
            };
            match hop {
                Some(mac) => {
                    let Some(buf) = sink.buffer(frame_len) else {
                        room = false;
                        break;
                    };
                    if fill(buf, mac) {
                        sink.commit(&OffloadMeta::plain());
                        *n += 1;
                    }
                }
                None => {
                    let mut f = vec![0u8; frame_len];
                    if fill(&mut f, [0; 6]) {
                        match self
                            .neighbors
                            .enqueue(now, hop_ip, (f, OffloadMeta::plain()))
                        {
                            Queued::ProbeNow => self.probe(hop_ip),
                            Queued::Waiting => {}
                            Queued::Dropped => self.counters.neighbor_drops += 1,
                            Queued::TableFull => {
                                self.counters.neighbor_drops += 1;
                                self.counters.neighbor_table_full += 1;
                            }
                        }
                    }
                }
            }
            self.counters.ip_frag_creates += 1;
            out.off = end;
        }
        self.frag_scratch = dg;
        if room {
            self.counters.ip_frag_oks += 1;
            self.counters.udp_out_datagrams += 1;
            self.counters.ip_out_requests += 1;
        }
        room
    }

    /// A UDP datagram addressed to us (RFC 768, RFC 1122 section 4.1.3): checked,
    /// then queued on the socket bound to its port (split into its datagrams if
    /// it is a GRO super-datagram), or answered with port unreachable.
    pub(in crate::engine) fn udp_input(&mut self, now: Instant, d: UdpIn<'_>) {
        let Ok(p) = udp::Packet::new_checked(d.l4) else {
            self.counters.udp_in_errors += 1;
            return;
        };
        let v6 = d.src.is_ipv6();
        let csum_ok = match d.meta.csum {
            Checksum::Verified { levels } if levels >= 1 => true,
            Checksum::Partial { .. } => true,
            _ => {
                let len = p.length();
                let pseudo = match (d.src, d.dst) {
                    (IpAddr::V4(s), IpAddr::V4(t)) => {
                        checksum::pseudo_ipv4(s.octets(), t.octets(), protocol::UDP, len)
                    }
                    (IpAddr::V6(s), IpAddr::V6(t)) => checksum::pseudo_ipv6(
                        &s.octets(),
                        &t.octets(),
                        protocol::UDP,
                        u32::from(len),
                    ),
                    _ => return,
                };
                p.verify_checksum(pseudo, !v6)
            }
        };
        if !csum_ok {
            self.counters.udp_in_errors += 1;
            self.counters.udp_in_csum_errors += 1;
            return;
        }
        let port = p.dst_port();
        let from = SocketAddr::new(d.src, p.src_port());
        let target = self.udp.by_port.get(&(port, v6)).copied().filter(|&i| {
            self.udp
                .slots
                .get(i)
                .and_then(|s| s.sock.as_ref())
                .is_some_and(|s| {
                    s.local.ip().is_unspecified() || (d.unicast && s.local.ip() == d.dst)
                })
        });
        // A group's datagrams only to a socket that joined it (`mcast`).
        let target = match target {
            Some(i) if d.dst.is_multicast() => {
                let h = self.udp.slots.get(i).map(|s| super::UdpHandle {
                    index: i as u32,
                    generation: s.generation,
                });
                if h.is_some_and(|h| self.mcast.delivers(h, d.dst, d.src)) {
                    Some(i)
                } else {
                    self.counters.mcast.udp_filtered += 1;
                    return;
                }
            }
            t => t,
        };
        let Some(idx) = target else {
            self.counters.udp_no_ports += 1;
            let bcast = self.cfg.ipv4.map(|c| c.broadcast());
            if d.unicast && unicast_source(d.src, bcast) {
                self.port_unreachable(now, d);
            }
            return;
        };
        let size = match d.meta.gso {
            Some(g) if g.kind == GsoType::UdpL4 && g.size > 0 => usize::from(g.size),
            _ => usize::MAX,
        };
        self.udp_deliver(idx, from, p.payload(), size);
    }

    /// Queues `payload` on socket `idx` as datagrams of `size` bytes (the
    /// last shorter), each dropped and counted if the queue is full.
    fn udp_deliver(&mut self, idx: usize, from: SocketAddr, payload: &[u8], size: usize) {
        let (cap_bytes, cap_count) = (self.cfg.udp.recv_buffer, self.cfg.udp.recv_datagrams);
        let mut off = 0usize;
        loop {
            let end = off.saturating_add(size).min(payload.len());
            let chunk = payload.get(off..end).unwrap_or_default();
            off = end;
            let t = &mut self.udp;
            let Some(s) = t.slots.get(idx).and_then(|s| s.sock.as_ref()) else {
                return;
            };
            if s.rx.len() >= cap_count || s.rx_bytes + chunk.len() > cap_bytes {
                self.counters.udp_rcvbuf_errors += 1;
                self.counters.udp_in_errors += 1;
                if let Some(s) = t.slots.get_mut(idx).and_then(|s| s.sock.as_mut()) {
                    s.drops += 1;
                }
            } else {
                let b = t.buffer_of(chunk);
                if let Some(s) = t.slots.get_mut(idx).and_then(|s| s.sock.as_mut()) {
                    s.rx_bytes += b.len();
                    s.rx.push_back((from, b));
                    self.counters.udp_in_datagrams += 1;
                }
                self.udp_changed(idx);
            }
            if off >= payload.len() {
                return;
            }
        }
    }

    /// Multicast loopback (RFC 1112 section 6.1, Linux's
    /// `IP_MULTICAST_LOOP`): a datagram this engine sends to group `to`,
    /// which it has joined, also reaches its own socket of that port if that
    /// socket's filter admits the source `from`, as one received would
    /// (`seg`: a segmented send's datagram size, 0 for one datagram).
    pub(in crate::engine) fn udp_loopback(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        payload: &[u8],
        seg: usize,
    ) {
        if !self.mcast.joined(to.ip()) {
            return;
        }
        let Some(&idx) = self.udp.by_port.get(&(to.port(), to.is_ipv6())) else {
            return;
        };
        let Some(slot) = self.udp.slots.get(idx) else {
            return;
        };
        let bound_any = slot
            .sock
            .as_ref()
            .is_some_and(|s| s.local.ip().is_unspecified() || s.local.ip() == to.ip());
        let h = super::UdpHandle {
            index: idx as u32,
            generation: slot.generation,
        };
        if !bound_any || !self.mcast.delivers(h, to.ip(), from.ip()) {
            return;
        }
        self.counters.mcast.udp_looped += 1;
        let size = if seg == 0 { usize::MAX } else { seg };
        self.udp_deliver(idx, from, payload, size);
    }

    /// Answers a datagram for a closed port with ICMP port unreachable, quoting
    /// as much of it as fits 576 bytes (IPv4, RFC 1812 section 4.3.2.3) or 1280
    /// (IPv6, RFC 4443 section 2.4 (c)), within the rate limit.
    fn port_unreachable(&mut self, now: Instant, d: UdpIn<'_>) {
        if !self.udp.icmp.take(now) {
            self.counters.icmp_out_rate_limited += 1;
            return;
        }
        self.counters.icmp_out_msgs += 1;
        self.counters.icmp_out_dest_unreachs += 1;
        let to = IpTo {
            mac: d.mac,
            src: d.dst,
            dst: d.src,
            proto: protocol::ICMP,
            hop: HOP_LIMIT,
        };
        match (d.dst, d.src) {
            (IpAddr::V4(_), IpAddr::V4(_)) => {
                let quote = d.packet.get(..d.packet.len().min(icmpv4::MAX_INVOKING));
                let quote = quote.unwrap_or_default();
                let len = icmp::HEADER_LEN + quote.len();
                self.send_ip_direct(to, len, |b| {
                    icmpv4::emit_dest_unreachable(b, icmpv4::unreachable_code::PORT, quote).is_ok()
                });
            }
            (IpAddr::V6(me), IpAddr::V6(peer)) => {
                let quote = d.packet.get(..d.packet.len().min(icmpv6::MAX_INVOKING));
                let quote = quote.unwrap_or_default();
                let len = icmp::HEADER_LEN + quote.len();
                let (s, t) = (me.octets(), peer.octets());
                let to = IpTo {
                    proto: protocol::ICMPV6,
                    ..to
                };
                self.send_ip_direct(to, len, |b| {
                    let ip = Addrs { src: &s, dst: &t };
                    icmpv6::emit_dest_unreachable(b, ip, icmpv6::unreachable_code::PORT, quote)
                        .is_ok()
                });
            }
            _ => {}
        }
    }
}
