//! Frame input: Ethernet demultiplexing, ARP (RFC 826), IPv4 (RFC 791, RFC 1122
//! section 3.2.1) and IPv6 (RFC 8200) validation, ICMP echo (RFC 792, RFC 4443
//! section 4), neighbour discovery (RFC 4861 sections 7.1 and 7.2.3 to 7.2.5) and
//! TCP demultiplexing to connections and listeners (RFC 9293 section 3.10.7).
//! UDP datagrams go to `udp`, ICMP errors to `icmp`.
//!
//! Checksums are verified here unless the NIC layer says it did
//! (`Checksum::Verified`, or `Checksum::Partial` for a frame that never left the
//! host). A GRO super-segment (`meta.gso` set) is handed to TCP as one segment that
//! stands for the segments it holds. Every refusal is counted, none panics.

use super::Engine;
use super::frag::upper_header_len;
use super::output::IpTo;
use crate::net::neighbor::Pending;
use crate::tcp::conn::{Conn, ConnParams};
use crate::tcp::cookie;
use crate::tcp::input::Rst;
use crate::tcp::recvbuf::OwnedFrame;
use crate::tcp::segment::Segment;
use crate::time::Instant;
use linerate_nic::{Batch, Frag, Frame, PacketBuf};
use linerate_offload::{Checksum, GsoType, OffloadMeta};
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::icmp::ndp;
use linerate_wire::icmp::v6::Addrs;
use linerate_wire::icmp::{self, v4 as icmpv4, v6 as icmpv6};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::ipv6::{self, ext};
use linerate_wire::{arp, checksum, tcp};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// The IPv6 all-nodes multicast address ff02::1.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Where a datagram came from and how the NIC layer marked it.
#[derive(Debug, Clone, Copy)]
pub(super) struct From<'m> {
    pub(super) mac: [u8; 6],
    pub(super) meta: &'m OffloadMeta,
    /// The frame's data past its head, a chain of fragments (frag-list GRO),
    /// and its length; empty for a linear frame.
    pub(super) more: &'m [Frag],
    pub(super) more_len: usize,
    /// The interface it arrived on (a `u8`, in what would be padding: the
    /// struct is passed by value down the receive path).
    pub(super) iface: u8,
}

impl From<'_> {
    /// The source of a datagram reassembled from fragments that came from
    /// `mac` on interface `iface`: a plain datagram whose checksums are
    /// still to be verified.
    pub(super) fn reassembled(mac: [u8; 6], iface: u8) -> From<'static> {
        static PLAIN: OffloadMeta = OffloadMeta::plain();
        From {
            mac,
            meta: &PLAIN,
            more: &[],
            more_len: 0,
            iface,
        }
    }
}

impl Engine {
    /// Processes one received Ethernet frame. `meta` says what the NIC layer
    /// verified or coalesced; a frame from a plain link passes
    /// [`OffloadMeta::plain()`].
    /// The frame arrived on interface 0 (see [`Engine::handle_frame_on`]).
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8], meta: &OffloadMeta) {
        self.frame_input(now, frame, meta, 0);
        self.flush_deferred_timer();
    }

    /// [`Engine::handle_frame`] for a frame that arrived on interface `iface`
    /// (0 for [`Config::mac`](crate::Config::mac)'s, 1 for the first of
    /// [`Config::interfaces`](crate::Config::interfaces)): it is taken if it
    /// is for that interface's MAC (or a group), and ARP requests and
    /// neighbour solicitations are answered for that interface's addresses
    /// only. A frame for an interface the engine lacks is counted in
    /// `rx_other_host` and dropped.
    pub fn handle_frame_on(
        &mut self,
        iface: usize,
        now: Instant,
        frame: &[u8],
        meta: &OffloadMeta,
    ) {
        self.frame_input(now, frame, meta, iface);
        self.flush_deferred_timer();
    }

    /// [`Engine::handle_frame`] leaving a connection's timer deferred (see
    /// `after_input_event`): the caller flushes it.
    fn frame_input(&mut self, now: Instant, frame: &[u8], meta: &OffloadMeta, iface: usize) {
        self.counters.rx_frames += 1;
        self.clock = self.clock.max(now);
        let Ok(eth) = ethernet::Packet::new_checked(frame) else {
            self.counters.rx_bad_ethernet += 1;
            return;
        };
        let dst = eth.dst_addr();
        let mac = if iface == 0 {
            self.cfg.mac
        } else {
            match self.arrival_mac(iface) {
                Some(mac) => mac,
                None => {
                    self.counters.rx_other_host += 1;
                    return;
                }
            }
        };
        let for_us = dst == mac
            || dst == ethernet::BROADCAST
            || (dst[0] & 1 == 1 && self.mcast.takes_mac(&dst));
        if !for_us {
            self.counters.rx_other_host += 1;
            return;
        }
        let from = From {
            mac: eth.src_addr(),
            meta,
            more: &[],
            more_len: 0,
            // Below `MAX_INTERFACES` (`arrival_mac`).
            iface: iface as u8,
        };
        match eth.ethertype() {
            ethertype::ARP => self.arp_input(now, eth.payload(), iface),
            ethertype::IPV4 => self.ipv4_input(now, eth.payload(), from),
            ethertype::IPV6 => self.ipv6_input(now, eth.payload(), from),
            _ => self.counters.rx_unknown_ethertype += 1,
        }
    }

    /// Processes a batch of received frames, taking them: large in-order TCP
    /// payloads stay in their buffers until the application reads them (see
    /// `tcp::recvbuf`), the other buffers go back to their pool. Leaves the
    /// batch empty.
    ///
    /// A scatter-gather frame whose payload is a chain (frag-list GRO, from a
    /// NIC the caller asked for such frames, [`linerate_nic::Nic::set_rx_sg`])
    /// is taken as it is when it is a TCP/IPv4 or TCP/IPv6 segment to us with
    /// its checksum verified below: its fragments become the connection's
    /// receive storage, by reference, when the data is in order (copied once,
    /// into the reader). Any other scatter-gather frame is gathered first.
    pub fn handle_frames(&mut self, now: Instant, batch: &mut Batch) {
        // Each frame processed where it lies in the batch, a buffer kept by
        // a connection taken out of it, and the rest dropped together at the
        // end, in the same order as one by one (nothing takes a buffer from
        // a pool meanwhile). Moving a frame out of the batch would copy it
        // through the stack.
        for f in batch.iter_mut() {
            if !f.frags.is_empty() {
                if self.handle_chained(now, f) {
                    if let Some((idx, generation)) = self.adopted.take()
                        && let Some(slot) = self.slots.get_mut(idx)
                        && slot.generation == generation
                        && let Some(conn) = slot.conn.as_mut()
                    {
                        conn.rx.fill_chain(&mut f.frags);
                    }
                    continue;
                }
                f.linearize();
            }
            let bytes = f.buf.as_slice();
            self.rx_owned = Some(OwnedFrame {
                addr: bytes.as_ptr().addr(),
                len: bytes.len(),
                storage: f.buf.storage(),
            });
            self.frame_input(now, bytes, &f.meta, f.buf.port());
            self.rx_owned = None;
            if let Some((idx, generation)) = self.adopted.take()
                && let Some(slot) = self.slots.get_mut(idx)
                && slot.generation == generation
                && let Some(conn) = slot.conn.as_mut()
            {
                conn.rx.fill(std::mem::replace(
                    &mut f.buf,
                    PacketBuf::from_vec(Vec::new()),
                ));
            }
        }
        batch.clear();
        self.flush_deferred_timer();
    }

    /// A frame whose TCP data lies in its head and a chain of fragments:
    /// Ethernet, then IPv4 without options or IPv6 without extension headers,
    /// then TCP to one of our unicast addresses, its transport checksum
    /// verified by the NIC layer (which read the fragments). Returns false,
    /// having done nothing, for anything else: the caller gathers the frame and
    /// takes it the usual way (which counts what it refuses).
    fn handle_chained(&mut self, now: Instant, f: &Frame) -> bool {
        if !matches!(
            f.meta.csum,
            Checksum::Verified { levels: 1.. } | Checksum::Partial { .. }
        ) {
            return false;
        }
        let head = f.bytes();
        let more = f.frags.as_slice();
        let more_len = f.frags.total_len();
        let (Some(eth), Some(ip)) = (
            head.get(..ethernet::HEADER_LEN),
            head.get(ethernet::HEADER_LEN..),
        ) else {
            return false;
        };
        let Some(mac) = eth.first_chunk::<6>() else {
            return false;
        };
        let iface = f.buf.port();
        if iface != 0 || *mac != self.cfg.mac {
            // Another interface's: taken the usual way.
            return false;
        }
        let src_mac: [u8; 6] = eth
            .get(6..12)
            .and_then(|m| m.try_into().ok())
            .unwrap_or_default();
        let ethertype = eth.get(12..14).map(|t| u16::from_be_bytes([t[0], t[1]]));
        let from = From {
            mac: src_mac,
            meta: &f.meta,
            more,
            more_len,
            iface: 0,
        };
        let (src, dst, tcp, ce) = match ethertype {
            Some(ethertype::IPV4) => {
                let Some(me) = self.cfg.ipv4 else {
                    return false;
                };
                let Some(h) = ip.first_chunk::<{ ipv4::HEADER_LEN }>() else {
                    return false;
                };
                let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
                let flg_off = u16::from_be_bytes([h[6], h[7]]);
                if h[0] != 0x45
                    || total != ip.len() + more_len
                    || h[9] != protocol::TCP
                    || flg_off & 0x3fff != 0
                    || !checksum::verify(h, 0)
                    || Ipv4Addr::from([h[16], h[17], h[18], h[19]]) != me.addr
                {
                    return false;
                }
                let src = Ipv4Addr::from([h[12], h[13], h[14], h[15]]);
                let tcp = ip.get(ipv4::HEADER_LEN..).unwrap_or_default();
                let ce = h[1] & 0b11 == crate::tcp::ecn::CE;
                (IpAddr::V4(src), IpAddr::V4(me.addr), tcp, ce)
            }
            Some(ethertype::IPV6) => {
                let Some(me) = self.cfg.ipv6 else {
                    return false;
                };
                let Some(h) = ip.first_chunk::<{ ipv6::HEADER_LEN }>() else {
                    return false;
                };
                let plen = usize::from(u16::from_be_bytes([h[4], h[5]]));
                let dst: [u8; 16] = h
                    .get(24..40)
                    .and_then(|a| a.try_into().ok())
                    .unwrap_or_default();
                let src: [u8; 16] = h
                    .get(8..24)
                    .and_then(|a| a.try_into().ok())
                    .unwrap_or_default();
                if h[0] >> 4 != 6
                    || h[6] != protocol::TCP
                    || plen != ip.len() - ipv6::HEADER_LEN + more_len
                    || Ipv6Addr::from(dst) != me.addr
                {
                    return false;
                }
                let tcp = ip.get(ipv6::HEADER_LEN..).unwrap_or_default();
                let ce = (h[1] >> 4) & 0b11 == crate::tcp::ecn::CE;
                (
                    IpAddr::V6(Ipv6Addr::from(src)),
                    IpAddr::V6(me.addr),
                    tcp,
                    ce,
                )
            }
            _ => return false,
        };
        self.counters.rx_frames += 1;
        self.counters.rx_chained += 1;
        self.counters.ip_in_receives += 1;
        self.counters.ip_in_delivers += 1;
        self.clock = self.clock.max(now);
        self.tcp_input(now, src, dst, tcp, from, ce);
        true
    }

    /// RFC 826 "packet reception": merge the sender if known, add it if the request
    /// is for us, answer requests for our address.
    ///
    /// A gratuitous ARP (request or reply with sender and target protocol
    /// address the same, RFC 5227 section 3) from a neighbour in the table
    /// moves it to the new MAC (the merge); one from an address not in the
    /// table adds nothing, as Linux with its default `arp_accept=0`: only a
    /// packet whose target is our address creates an entry. A packet from
    /// another MAC claiming our own address (RFC 5227 section 2.4's conflict) is
    /// counted in `arp_conflicts` and otherwise ignored: no entry for our
    /// address, no reply, no defence (RFC 5227 makes defending optional).
    ///
    /// Per interface: `iface` is the one the packet arrived on, and only its
    /// own address is answered for (Linux's `arp_ignore=1`; a host with
    /// uplinks to two networks should not claim one's address on the other).
    fn arp_input(&mut self, now: Instant, data: &[u8], iface: usize) {
        self.counters.arp_in += 1;
        if self.cfg.dhcp && iface == 0 {
            self.dhcp_arp(data);
        }
        let Some(me) = self.iface_v4(iface) else {
            return;
        };
        let Ok(p) = arp::Packet::new_checked(data) else {
            self.counters.arp_errors += 1;
            return;
        };
        if p.htype() != arp::HTYPE_ETHERNET
            || p.ptype() != ethertype::IPV4
            || p.hlen() != 6
            || p.plen() != 4
        {
            self.counters.arp_errors += 1;
            return;
        }
        let spa = Ipv4Addr::from(p.spa());
        let sha = p.sha();
        if sha == ethernet::BROADCAST || sha[0] & 1 == 1 {
            return;
        }
        if spa.is_unspecified() {
            // An ARP probe (RFC 5227 section 2.1.1): another host asks whether
            // our address is in use before taking it. Answered, as Linux does,
            // to the prober's MAC with target address 0.0.0.0; nothing learned.
            if p.oper() == arp::operation::REQUEST && Ipv4Addr::from(p.tpa()) == me.addr {
                self.reply_arp(sha, [0; 4], iface);
            }
            return;
        }
        if spa == me.addr {
            // Our own announcements looped back are not a conflict.
            if sha != self.iface_mac(iface) {
                self.counters.arp_conflicts += 1;
            }
            return;
        }
        let for_me = Ipv4Addr::from(p.tpa()) == me.addr;
        let released = self.learn_neighbor(now, IpAddr::V4(spa), sha, for_me);
        self.release(released, sha);
        if for_me && p.oper() == arp::operation::REQUEST {
            self.reply_arp(sha, spa.octets(), iface);
        }
    }

    /// Queues an ARP reply with interface `iface`'s address to `sha`, target
    /// address `tpa`, out of that interface.
    fn reply_arp(&mut self, sha: [u8; 6], tpa: [u8; 4], iface: usize) {
        let Some(me) = self.iface_v4(iface) else {
            return;
        };
        let mac = self.iface_mac(iface);
        let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
        super::output::put_eth(&mut f, sha, mac, ethertype::ARP);
        let body = f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default();
        if arp::emit_reply(body, mac, me.addr.octets(), sha, tpa).is_ok() {
            self.counters.arp_replies_out += 1;
            if let Some(c) = self.iface_counter(iface) {
                c.arp_replies_out += 1;
            }
            self.control.push_back((f, OffloadMeta::plain()));
        }
    }

    /// Sends the frames that waited for a neighbour, now at `mac`.
    fn release(
        &mut self,
        frames: std::collections::VecDeque<(Vec<u8>, OffloadMeta)>,
        mac: [u8; 6],
    ) {
        for (mut f, meta) in frames {
            if let Some(d) = f.get_mut(..6) {
                d.copy_from_slice(&mac);
            }
            self.control.push_back((f, meta));
        }
    }

    fn ipv4_input(&mut self, now: Instant, data: &[u8], from: From<'_>) {
        self.counters.ip_in_receives += 1;
        self.ipv4_packet(now, data, from);
    }

    /// An IPv4 datagram received, or reassembled from its fragments.
    pub(super) fn ipv4_packet(&mut self, now: Instant, data: &[u8], from: From<'_>) {
        if self.cfg.dhcp && from.iface == 0 && self.dhcp_input(data, &from) {
            return;
        }
        let Some(me) = self.iface_v4(usize::from(from.iface)) else {
            self.counters.ip_in_addr_errors += 1;
            return;
        };
        // The checks of `ipv4::Packet::new_checked` and the header checksum,
        // in one pass over a header without options.
        let Ok(ip) = ipv4::fields(data) else {
            self.counters.ip_in_hdr_errors += 1;
            return;
        };
        if !ip.checksum_ok {
            self.counters.ip_in_hdr_errors += 1;
            return;
        }
        let dst = Ipv4Addr::from(ip.dst);
        let src = Ipv4Addr::from(ip.src);
        // To the arrival interface's address, or (the weak host model of
        // RFC 1122 section 3.3.4.2, as Linux) to another interface's.
        let unicast = dst == me.addr || self.other_iface_v4(dst, usize::from(from.iface));
        if !unicast
            && dst != Ipv4Addr::BROADCAST
            && dst != me.broadcast()
            && !(dst.is_multicast() && self.mcast.joined(IpAddr::V4(dst)))
        {
            self.counters.ip_in_addr_errors += 1;
            return;
        }
        if ip.fragment {
            if self.cfg.fragments.enabled {
                self.ipv4_fragment(now, &ip, unicast, from);
            } else {
                self.counters.ip_in_fragments_dropped += 1;
            }
            return;
        }
        let payload = ip.payload;
        match ip.protocol {
            protocol::ICMP => {
                self.counters.ip_in_delivers += 1;
                self.icmpv4_input(payload, src, dst, unicast, from);
            }
            protocol::TCP if unicast => {
                self.counters.ip_in_delivers += 1;
                let ce = data.get(1).is_some_and(|t| t & 0b11 == crate::tcp::ecn::CE);
                self.tcp_input(now, IpAddr::V4(src), IpAddr::V4(dst), payload, from, ce);
            }
            protocol::UDP => {
                self.counters.ip_in_delivers += 1;
                self.udp_input(
                    now,
                    udp_in(
                        IpAddr::V4(src),
                        IpAddr::V4(dst),
                        unicast,
                        ip.datagram,
                        payload,
                        from,
                    ),
                );
            }
            protocol::IGMP => {
                self.counters.ip_in_delivers += 1;
                self.igmp_input(now, payload);
            }
            protocol::TCP => self.counters.ip_in_addr_errors += 1,
            _ => self.counters.ip_in_unknown_protos += 1,
        }
    }

    fn ipv6_input(&mut self, now: Instant, data: &[u8], from: From<'_>) {
        self.counters.ip_in_receives += 1;
        self.ipv6_packet(now, data, from, false);
    }

    /// An IPv6 packet received, or `reassembled` from its fragments.
    pub(super) fn ipv6_packet(
        &mut self,
        now: Instant,
        data: &[u8],
        from: From<'_>,
        reassembled: bool,
    ) {
        if self.cfg.slaac && from.iface == 0 && self.slaac_input(now, data, from.mac) {
            return;
        }
        let Some(me) = self.iface_v6(usize::from(from.iface)) else {
            self.counters.ip_in_addr_errors += 1;
            return;
        };
        let Ok(ip) = ipv6::Packet::new_checked(data) else {
            self.counters.ip_in_hdr_errors += 1;
            return;
        };
        let dst = Ipv6Addr::from(ip.dst_addr());
        let src = Ipv6Addr::from(ip.src_addr());
        let unicast = dst == me.addr || self.other_iface_v6(dst, usize::from(from.iface));
        let group = Ipv6Addr::from(ndp::solicited_node_multicast(&me.addr.octets()));
        if !unicast
            && dst != group
            && dst != ALL_NODES
            && !(dst.is_multicast() && self.mcast.joined(IpAddr::V6(dst)))
        {
            self.counters.ip_in_addr_errors += 1;
            return;
        }
        let payload = ip.payload();
        let Ok(chain) = ext::walk(ip.next_header(), payload) else {
            if self.cfg.fragments.enabled
                && !reassembled
                && ext::first_fragment_truncated(ip.next_header(), payload, upper_header_len)
            {
                self.incomplete_chain(data.get(..ip.total_len()).unwrap_or(data), unicast, from);
            } else {
                self.counters.ip_in_hdr_errors += 1;
            }
            return;
        };
        // An atomic fragment (offset 0, no more fragments) is a whole datagram
        // and is processed as one (RFC 6946 section 4); other fragments are
        // reassembled, or dropped when that is off (see the crate docs).
        if let Some(f) = chain.fragment.filter(|f| f.offset != 0 || f.more) {
            if reassembled {
                // A fragment inside a reassembled packet: nested fragmentation,
                // which no sender does.
                self.counters.ip_in_hdr_errors += 1;
            } else if self.cfg.fragments.enabled {
                let packet = data.get(..ip.total_len()).unwrap_or(data);
                self.ipv6_fragment(now, packet, f, chain, unicast, from);
            } else {
                self.counters.ip_in_fragments_dropped += 1;
            }
            return;
        }
        let upper = payload.get(chain.len..).unwrap_or_default();
        match chain.next_header {
            protocol::ICMPV6 if upper.first().is_some_and(|&t| super::mcast::is_mld(t)) => {
                self.counters.ip_in_delivers += 1;
                self.counters.icmp_in_msgs += 1;
                if icmpv6::Packet::new_checked(upper)
                    .is_ok_and(|p| p.verify_checksum(&src.octets(), &dst.octets()))
                {
                    self.mld_input(now, data, upper, src);
                } else {
                    self.counters.icmp_in_errors += 1;
                }
            }
            protocol::ICMPV6 => {
                self.counters.ip_in_delivers += 1;
                self.icmpv6_input(now, upper, src, dst, ip.hop_limit(), unicast, from);
            }
            protocol::TCP if unicast => {
                self.counters.ip_in_delivers += 1;
                let ce = data
                    .get(1)
                    .is_some_and(|t| (t >> 4) & 0b11 == crate::tcp::ecn::CE);
                self.tcp_input(now, IpAddr::V6(src), IpAddr::V6(dst), upper, from, ce);
            }
            protocol::UDP => {
                self.counters.ip_in_delivers += 1;
                let packet = data.get(..ip.total_len()).unwrap_or(data);
                self.udp_input(
                    now,
                    udp_in(
                        IpAddr::V6(src),
                        IpAddr::V6(dst),
                        unicast,
                        packet,
                        upper,
                        from,
                    ),
                );
            }
            protocol::TCP => self.counters.ip_in_addr_errors += 1,
            _ => self.counters.ip_in_unknown_protos += 1,
        }
    }

    /// ICMPv4: answer echo requests to our unicast address (RFC 1122 section
    /// 3.2.2.6); everything else is counted and dropped.
    fn icmpv4_input(
        &mut self,
        data: &[u8],
        src: Ipv4Addr,
        dst: Ipv4Addr,
        unicast: bool,
        from: From<'_>,
    ) {
        self.counters.icmp_in_msgs += 1;
        let Ok(p) = icmpv4::Packet::new_checked(data) else {
            self.counters.icmp_in_errors += 1;
            return;
        };
        if !p.verify_checksum() {
            self.counters.icmp_in_errors += 1;
            return;
        }
        if p.is_error() {
            // Errors are only ever sent to the source of a datagram: ours is
            // a unicast address (RFC 1122 section 3.2.2).
            if unicast {
                self.icmpv4_error(&p);
            }
            return;
        }
        if p.msg_type() != icmpv4::msg_type::ECHO_REQUEST || p.code() != 0 {
            return;
        }
        self.counters.icmp_in_echos += 1;
        if !unicast {
            return;
        }
        let (ident, seq, body) = (p.echo_ident(), p.echo_seq_no(), p.data());
        let len = icmp::HEADER_LEN + body.len();
        self.counters.icmp_out_msgs += 1;
        self.counters.icmp_out_echo_reps += 1;
        self.send_ip_direct(
            IpTo {
                mac: from.mac,
                src: IpAddr::V4(dst),
                dst: IpAddr::V4(src),
                proto: protocol::ICMP,
                hop: 64,
            },
            len,
            |b| icmpv4::emit_echo_reply(b, ident, seq, body).is_ok(),
        );
    }

    /// ICMPv6: echo (RFC 4443 section 4.2) and neighbour solicitation and
    /// advertisement (RFC 4861 sections 7.1.1, 7.1.2, 7.2.3 to 7.2.5).
    #[allow(clippy::too_many_arguments)]
    fn icmpv6_input(
        &mut self,
        now: Instant,
        data: &[u8],
        src: Ipv6Addr,
        dst: Ipv6Addr,
        hop_limit: u8,
        unicast: bool,
        from: From<'_>,
    ) {
        self.counters.icmp_in_msgs += 1;
        let Ok(p) = icmpv6::Packet::new_checked(data) else {
            self.counters.icmp_in_errors += 1;
            return;
        };
        if !p.verify_checksum(&src.octets(), &dst.octets()) {
            self.counters.icmp_in_errors += 1;
            return;
        }
        let Some(me) = self.iface_v6(usize::from(from.iface)) else {
            return;
        };
        match p.msg_type() {
            icmpv6::msg_type::ECHO_REQUEST if unicast => {
                self.counters.icmp_in_echos += 1;
                let (ident, seq, body) = (p.echo_ident(), p.echo_seq_no(), p.data());
                let len = icmp::HEADER_LEN + body.len();
                self.counters.icmp_out_msgs += 1;
                self.counters.icmp_out_echo_reps += 1;
                // From the address pinged (another interface's, maybe).
                let (s, d) = (dst.octets(), src.octets());
                self.send_ip_direct(
                    IpTo {
                        mac: from.mac,
                        src: IpAddr::V6(dst),
                        dst: IpAddr::V6(src),
                        proto: protocol::ICMPV6,
                        hop: 64,
                    },
                    len,
                    |b| {
                        icmpv6::emit_echo_reply(b, Addrs { src: &s, dst: &d }, ident, seq, body)
                            .is_ok()
                    },
                );
            }
            icmpv6::msg_type::NEIGHBOR_SOLICITATION | icmpv6::msg_type::NEIGHBOR_ADVERTISEMENT => {
                let Ok(n) = ndp::Neighbor::new_checked(data) else {
                    self.counters.ndp_errors += 1;
                    return;
                };
                if hop_limit != 255 {
                    self.counters.ndp_errors += 1;
                    return;
                }
                let target = Ipv6Addr::from(n.target_addr());
                if n.is_solicitation() {
                    if target != me.addr {
                        return;
                    }
                    self.counters.ndp_in_solicits += 1;
                    let reply_to = if src.is_unspecified() { ALL_NODES } else { src };
                    if let (false, Some(mac)) = (src.is_unspecified(), n.source_lladdr()) {
                        let released = self.learn_neighbor(now, IpAddr::V6(src), mac, true);
                        self.release(released, mac);
                    }
                    let dst_mac = if src.is_unspecified() {
                        ndp::multicast_mac(&ALL_NODES.octets())
                    } else {
                        from.mac
                    };
                    self.counters.icmp_out_msgs += 1;
                    self.send_neighbor_advert(me.addr, dst_mac, reply_to, !src.is_unspecified());
                } else {
                    self.counters.ndp_in_adverts += 1;
                    if let Some(mac) = n.target_lladdr() {
                        let released = self.learn_neighbor(now, IpAddr::V6(target), mac, false);
                        self.release(released, mac);
                    }
                }
            }
            icmpv6::msg_type::DEST_UNREACHABLE | icmpv6::msg_type::PACKET_TOO_BIG if unicast => {
                self.icmpv6_error(&p);
            }
            _ => {}
        }
    }

    /// TCP demultiplexing (RFC 9293 section 3.10.7): to the connection with this
    /// 4-tuple, else a SYN to a listener opens one, else an RST answers.
    /// A TCP segment in a datagram from `src` to `dst`; `ce` when the datagram
    /// was marked CE (RFC 3168 section 5; after GRO, every wire segment was).
    fn tcp_input(
        &mut self,
        now: Instant,
        src: IpAddr,
        dst: IpAddr,
        data: &[u8],
        from: From<'_>,
        ce: bool,
    ) {
        let csum_ok = match from.meta.csum {
            Checksum::Verified { levels } if levels >= 1 => true,
            Checksum::Partial { .. } => true,
            // The pseudo-header sum only when the checksum is checked here.
            _ => tcp::Packet::new_checked(data)
                .is_ok_and(|p| p.verify_checksum(pseudo_sum(src, dst, data.len()))),
        };
        if !csum_ok {
            self.counters.tcp_in_errs += 1;
            self.counters.tcp_in_csum_errors += 1;
            return;
        }
        let segs = match from.meta.gso {
            Some(g) if matches!(g.kind, GsoType::TcpV4 | GsoType::TcpV6) && g.size > 0 => {
                let hl = tcp::Packet::new_checked(data).map_or(0, |p| p.header_len());
                (data.len() + from.more_len)
                    .saturating_sub(hl)
                    .div_ceil(usize::from(g.size))
                    .max(1) as u32
            }
            _ => 1,
        };
        // Used where it lies, not moved out of the `Result` (a copy of the
        // whole segment).
        let mut parsed = Segment::parse(data, segs);
        let Ok(seg) = &mut parsed else {
            self.counters.tcp_in_errs += 1;
            return;
        };
        seg.frame = self.rx_owned;
        seg.more = from.more;
        seg.more_len = from.more_len;
        seg.ce = ce;
        self.counters.tcp_in_segs += u64::from(segs);
        let local = SocketAddr::new(dst, seg.dst_port);
        let remote = SocketAddr::new(src, seg.src_port);
        let found = match (dst, src) {
            (IpAddr::V4(d), IpAddr::V4(s)) => self.by_tuple.get_v4(
                SocketAddrV4::new(d, seg.dst_port),
                SocketAddrV4::new(s, seg.src_port),
            ),
            _ => self.by_tuple.get(&(local, remote)).copied(),
        };
        if let Some(idx) = found {
            if idx & super::time_wait::TW_TAG != 0 {
                self.tcp_input_time_wait(now, idx, seg, from.mac);
                return;
            }
            let rst = self.segment_to_conn(now, idx, seg);
            self.challenge_gate(now, idx);
            if let Some(r) = rst {
                self.send_rst(from.mac, local, remote, r);
            }
            self.after_input_event(idx);
            self.mark_ready_after_input(now, idx);
            return;
        }
        self.tcp_input_unmatched(now, local, remote, seg, from.mac);
    }

    /// [`Engine::time_wait_input`] kept out of [`Engine::tcp_input`] (whose
    /// frame and registers are for the established path).
    #[cold]
    #[inline(never)]
    fn tcp_input_time_wait(
        &mut self,
        now: Instant,
        tagged: usize,
        seg: &Segment<'_>,
        mac: [u8; 6],
    ) {
        self.time_wait_input(now, tagged, seg, mac);
    }

    /// A segment no connection took: a SYN to a listener opens one (or is
    /// answered with a cookie), a cookie's ACK opens one, anything else is
    /// answered with RST. Out of line: a passive open builds a connection,
    /// most of a kilobyte, which [`Engine::tcp_input`]'s established path
    /// should not carry in its frame.
    #[inline(never)]
    fn tcp_input_unmatched(
        &mut self,
        now: Instant,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Segment<'_>,
        mac: [u8; 6],
    ) {
        let syn_only =
            seg.has(tcp::Flags::SYN) && !seg.flags.intersects(tcp::Flags::ACK | tcp::Flags::RST);
        if syn_only && let Some(&l) = self.by_port.get(&seg.dst_port) {
            self.passive_open(now, l, local, remote, seg, mac, None);
            return;
        }
        let ack_only =
            seg.has(tcp::Flags::ACK) && !seg.flags.intersects(tcp::Flags::SYN | tcp::Flags::RST);
        if ack_only
            && let Some(&l) = self.by_port.get(&seg.dst_port)
            && self.cookie_open(now, l, local, remote, seg, mac)
        {
            return;
        }
        if let Some(r) = Rst::for_segment(seg) {
            self.send_rst(mac, local, remote, r);
        }
    }

    /// A SYN for listener `l` (RFC 9293 section 3.10.7.2). When the SYN queue is
    /// full, a SYN cookie answers instead (RFC 4987 section 3.6), unless the
    /// accept queue is full too (then nothing could take the connection).
    /// `iss` replaces the RFC 6528 ISN (for a 4-tuple reopened from TIME-WAIT).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn passive_open(
        &mut self,
        now: Instant,
        l: usize,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Segment<'_>,
        mac: [u8; 6],
        iss: Option<u32>,
    ) {
        let backlog = self.cfg.tcp.backlog;
        let cookies = self.cfg.tcp.syn_cookies;
        let Some(Some(lst)) = self.listeners.get_mut(l) else {
            return;
        };
        if lst.embryonic + lst.queued >= backlog {
            if !cookies || lst.queued >= backlog {
                self.counters.tcp_listen_drops += 1;
                return;
            }
            let slots = u64::from(cookie::MAX_AGE + 1);
            lst.cookies_until = Some(now + Duration::from_secs(64 * slots));
            self.send_cookie_synack(now, mac, local, remote, seg);
            return;
        }
        lst.embryonic += 1;
        let iss = iss.unwrap_or_else(|| self.isn.isn(now, local, remote));
        let ts_offset = self.rng.next_u32();
        let params = self.conn_params(local.ip());
        let idx = self
            .insert_conn(|| Conn::accept_syn(now, local, remote, iss, ts_offset, params, seg, l));
        self.after_event(idx);
    }

    /// Answers a SYN with a SYN-ACK whose ISN is a cookie, keeping no state.
    fn send_cookie_synack(
        &mut self,
        now: Instant,
        mac: [u8; 6],
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Segment<'_>,
    ) {
        let params = self.conn_params(local.ip());
        let default_mss = params.default_mss;
        let mss = seg.opts.mss.unwrap_or(default_mss);
        let iss = self.cookies.isn(now, local, remote, seg.seq.0, mss);
        let ts_offset = self.cookies.ts_offset(local, remote);
        let ts = (now.as_millis() as u32).wrapping_add(ts_offset);
        let opts = Conn::cookie_syn_options(&params, &seg.opts, ts);
        let shift = Conn::our_shift(&params);
        let wnd = crate::tcp::autotune::initial_capacity(&params.tcp, shift).min(65_535) as u16;
        let ack = seg.seq.plus(1);
        self.counters.tcp_syncookies_sent += 1;
        self.send_syn_ack_stateless(mac, local, remote, iss, ack.0, wnd, &opts);
    }

    /// An ACK for a listener that matched no connection: if the listener sent
    /// cookies lately and the ACK returns a valid one, the connection is made
    /// from it and the ACK processed in it. Returns false if the segment is
    /// still to be answered (with RST).
    #[cold]
    #[inline(never)]
    fn cookie_open(
        &mut self,
        now: Instant,
        l: usize,
        local: SocketAddr,
        remote: SocketAddr,
        seg: &Segment<'_>,
        mac: [u8; 6],
    ) -> bool {
        let backlog = self.cfg.tcp.backlog;
        let Some(Some(lst)) = self.listeners.get(l) else {
            return false;
        };
        if lst.cookies_until.is_none_or(|t| now > t) {
            return false;
        }
        let irs = seg.seq.0.wrapping_sub(1);
        let iss = seg.ack.0.wrapping_sub(1);
        let Some(mss) = self.cookies.check(now, local, remote, irs, iss) else {
            self.counters.tcp_syncookies_failed += 1;
            return false;
        };
        if lst.queued >= backlog {
            self.counters.tcp_listen_drops += 1;
            return true;
        }
        self.counters.tcp_syncookies_recv += 1;
        let ts_offset = self.cookies.ts_offset(local, remote);
        let params = self.conn_params(local.ip());
        let ts = seg.opts.timestamps;
        if let Some(Some(lst)) = self.listeners.get_mut(l) {
            // Counted like a SYN-RECEIVED one; reaching ESTABLISHED moves it on.
            lst.embryonic += 1;
        }
        let idx = self.insert_conn(|| {
            Conn::from_cookie(local, remote, iss, irs, ts_offset, params, mss, ts, l)
        });
        let rst = self.segment_to_conn(now, idx, seg);
        self.challenge_gate(now, idx);
        if let Some(r) = rst {
            self.send_rst(mac, local, remote, r);
        }
        self.after_event(idx);
        self.mark_ready(idx);
        true
    }

    /// The per-connection parameters for a connection from our address `ip`.
    pub(super) fn conn_params(&self, ip: IpAddr) -> ConnParams {
        let (l3, default_mss) = match ip {
            IpAddr::V4(_) => (ipv4::HEADER_LEN, 536),
            IpAddr::V6(_) => (ipv6::HEADER_LEN, 1220),
        };
        // The MTU of the interface the connection's address is on.
        let mtu = if self.cfg.interfaces.is_empty() {
            self.cfg.mtu
        } else {
            self.iface_mtu(self.iface_of(ip).unwrap_or(0))
        };
        let mtu_mss = usize::from(mtu)
            .saturating_sub(l3 + tcp::HEADER_LEN)
            .clamp(64, 65_535);
        ConnParams {
            tcp: self.cfg.tcp.clone(),
            mtu_mss: mtu_mss as u16,
            default_mss,
        }
    }

    /// Learns neighbour `ip` at `mac` as if it had answered ARP or neighbour
    /// discovery, and sends what waited for it. For an interface whose
    /// address the kernel's stack shares and resolves: the kernel gets the
    /// ARP/ND replies there, and the runtime copies its neighbour table here.
    /// Counted like a learned entry (a full table refuses it).
    pub fn neighbor_add(&mut self, now: Instant, ip: std::net::IpAddr, mac: [u8; 6]) {
        let released = self.learn_neighbor(now, ip, mac, true);
        self.release(released, mac);
    }

    /// True if some next hop is being resolved (frames wait for it).
    pub fn neighbors_resolving(&self) -> bool {
        self.neighbors.resolving()
    }

    /// Next hops to look up in the kernel's neighbour table when the kernel's
    /// stack shares the interface's address (and so gets its ARP replies and
    /// neighbour advertisements): those being resolved, and those in use
    /// that expire within `within` (so [`Engine::neighbor_add`] refreshes them
    /// before they lapse). Appended to `out`; a scan of the table, for a
    /// runtime that looks now and then.
    pub fn neighbors_due(&self, now: Instant, within: Duration, out: &mut Vec<IpAddr>) {
        self.neighbors.due(now, within, out);
    }

    /// [`NeighborCache::learn`], counting a refusal by a full table.
    fn learn_neighbor(
        &mut self,
        now: Instant,
        ip: IpAddr,
        mac: [u8; 6],
        create: bool,
    ) -> VecDeque<Pending> {
        self.neighbors
            .learn(now, ip, mac, create)
            .unwrap_or_else(|_| {
                self.counters.neighbor_table_full += 1;
                VecDeque::new()
            })
    }

    /// Neighbour retries; failed resolutions drop their frames.
    pub(super) fn neighbor_timers(&mut self, now: Instant) {
        let mut probes = Vec::new();
        let (failed, dropped) = self.neighbors.poll(now, &mut probes);
        self.counters.neighbor_failures += failed as u64;
        self.counters.neighbor_drops += dropped as u64;
        for ip in probes {
            self.probe(ip);
        }
    }
}

/// The pseudo-header sum of a TCP segment of `len` bytes from `src` to `dst`
/// (`len` is at most 65,535 for IPv4: the datagram's total length bounds it).
#[inline]
fn pseudo_sum(src: IpAddr, dst: IpAddr, len: usize) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            checksum::pseudo_ipv4(s.octets(), d.octets(), protocol::TCP, len as u16)
        }
        (s, d) => {
            checksum::pseudo_ipv6(&ipv6_octets(s), &ipv6_octets(d), protocol::TCP, len as u32)
        }
    }
}

/// The IPv6 address `a` (an IPv4 one mapped, though the callers never mix).
fn ipv6_octets(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
        IpAddr::V6(a) => a.octets(),
    }
}

/// The UDP input of a datagram from `from`.
fn udp_in<'a>(
    src: IpAddr,
    dst: IpAddr,
    unicast: bool,
    packet: &'a [u8],
    l4: &'a [u8],
    from: From<'a>,
) -> super::udp::UdpIn<'a> {
    super::udp::UdpIn {
        src,
        dst,
        unicast,
        packet,
        l4,
        mac: from.mac,
        meta: from.meta,
    }
}

impl Engine {
    /// Queues a neighbour advertisement for our address `me` (override set, with
    /// our link-layer address) to `dst` at `dst_mac`: solicited, or unsolicited
    /// (RFC 4861 section 7.2.6). True if it was queued.
    pub(super) fn send_neighbor_advert(
        &mut self,
        me: Ipv6Addr,
        dst_mac: [u8; 6],
        dst: Ipv6Addr,
        solicited: bool,
    ) -> bool {
        let flags = linerate_wire::etherparse::icmpv6::NeighborAdvertisementHeader {
            router: false,
            solicited,
            r#override: true,
        };
        let mac = self.mac_for_src(IpAddr::V6(me));
        let (s, d) = (me.octets(), dst.octets());
        let before = self.control.len();
        self.send_ip_direct(
            IpTo {
                mac: dst_mac,
                src: IpAddr::V6(me),
                dst: IpAddr::V6(dst),
                proto: protocol::ICMPV6,
                hop: 255,
            },
            ndp::NEIGHBOR_LEN + ndp::LL_ADDR_OPTION_LEN,
            |b| {
                ndp::emit_neighbor_advertisement(
                    b,
                    Addrs { src: &s, dst: &d },
                    &s,
                    flags,
                    Some(mac),
                )
                .is_ok()
            },
        );
        self.control.len() > before
    }
}
