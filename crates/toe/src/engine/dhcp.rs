//! The DHCP client's way in and out of the engine ([`Config::dhcp`](crate::Config::dhcp)).
//!
//! A DHCP client needs to talk before the interface has an IPv4 address:
//! its DISCOVER goes from 0.0.0.0:68 to 255.255.255.255:67, and the
//! server's replies come to port 68 broadcast, or addressed to the address
//! being offered. With `Config::dhcp` on, the engine
//!
//! * takes every UDP datagram from port 67 to port 68 that is broadcast,
//!   to its address, or (while it has none) to any address, ahead of its
//!   sockets, and queues the DHCP message for [`Engine::dhcp_recv`]
//!   (raising [`Event::Dhcp`] when the queue was empty);
//! * sends what the client gives [`Engine::dhcp_send`] from port 68 to port
//!   67, broadcast or (renewing) unicast through its routes and neighbours;
//! * sends RFC 5227 ARP probes ([`Engine::dhcp_arp_probe`]) and, while one
//!   address is probed, queues the ARP packets that claim or probe that
//!   address for the client too.
//!
//! The queue holds [`QUEUE`] entries; more are dropped and counted
//! ([`DhcpStats::dropped`]). The client itself (`linerate-dhcp`) is driven
//! outside the engine, by `linerate-rt` or the application.

use super::input::From;
use super::output::{put_eth, put_ipv4};
use super::{Engine, Event};
use crate::config::NextHop;
use crate::net::neighbor::{Lookup, Queued};
use crate::time::Instant;
use linerate_offload::{Checksum, OffloadMeta};
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::{arp, checksum, udp};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// Entries the DHCP channel holds before it drops.
pub const QUEUE: usize = 16;

const SERVER_PORT: u16 = 67;
const CLIENT_PORT: u16 = 68;

/// What the DHCP channel hands the client, from [`Engine::dhcp_recv`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DhcpIn {
    /// A DHCP message from a server (the UDP payload).
    Message(Vec<u8>),
    /// An ARP packet about the address being probed: its sender hardware
    /// and protocol addresses and its target protocol address.
    Arp {
        /// Sender hardware address.
        sha: [u8; 6],
        /// Sender protocol address.
        spa: Ipv4Addr,
        /// Target protocol address.
        tpa: Ipv4Addr,
    },
}

/// Why [`Engine::dhcp_send`] refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DhcpSendError {
    /// [`Config::dhcp`](crate::Config::dhcp) is off.
    Disabled,
    /// The message does not fit the MTU in one datagram.
    TooLarge,
    /// No route goes to the unicast destination (the engine has no
    /// address in its subnet, or a route refuses it).
    NoRoute,
}

impl core::fmt::Display for DhcpSendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            DhcpSendError::Disabled => "DHCP is off in the engine's configuration",
            DhcpSendError::TooLarge => "the DHCP message does not fit the MTU",
            DhcpSendError::NoRoute => "no route to the DHCP server",
        })
    }
}

impl std::error::Error for DhcpSendError {}

/// The channel's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DhcpStats {
    /// DHCP messages queued for the client.
    pub received: u64,
    /// ARP packets about the probed address queued for the client.
    pub arp_seen: u64,
    /// Entries dropped because the queue was full.
    pub dropped: u64,
    /// Datagrams to port 68 dropped for a bad UDP checksum or length.
    pub errors: u64,
    /// Messages sent.
    pub sent: u64,
    /// ARP probes sent.
    pub probes: u64,
}

/// The channel's state.
#[derive(Debug, Clone, Default)]
pub(super) struct DhcpChannel {
    queue: VecDeque<DhcpIn>,
    /// The address ARP packets are watched for.
    probing: Option<Ipv4Addr>,
    stats: DhcpStats,
}

impl Engine {
    /// The next message or ARP packet for the DHCP client; see the module
    /// docs of `engine::dhcp`.
    pub fn dhcp_recv(&mut self) -> Option<DhcpIn> {
        self.dhcp.queue.pop_front()
    }

    /// The DHCP channel's counters.
    pub fn dhcp_stats(&self) -> DhcpStats {
        self.dhcp.stats
    }

    /// Sends the DHCP message `payload` from `src`:68 to `dst`:67.
    /// `dst` 255.255.255.255 goes to the Ethernet broadcast address; a
    /// unicast `dst` goes through the routing table and the neighbour cache,
    /// as any datagram.
    pub fn dhcp_send(
        &mut self,
        now: Instant,
        src: Ipv4Addr,
        dst: Ipv4Addr,
        payload: &[u8],
    ) -> Result<(), DhcpSendError> {
        if !self.cfg.dhcp {
            return Err(DhcpSendError::Disabled);
        }
        let ulen = udp::HEADER_LEN + payload.len();
        if ipv4::HEADER_LEN + ulen > usize::from(self.cfg.mtu) {
            return Err(DhcpSendError::TooLarge);
        }
        let hop = if dst.is_broadcast() {
            None
        } else {
            match self.routes.lookup(std::net::IpAddr::V4(dst)) {
                NextHop::Neighbor(h) if self.cfg.ipv4.is_some() => Some(h),
                _ => return Err(DhcpSendError::NoRoute),
            }
        };
        let l4 = ethernet::HEADER_LEN + ipv4::HEADER_LEN;
        let mut f = vec![0u8; l4 + ulen];
        put_eth(&mut f, ethernet::BROADCAST, self.cfg.mac, ethertype::IPV4);
        let id = self.next_ip_id(1);
        put_ipv4(
            f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default(),
            src,
            dst,
            protocol::UDP,
            ulen,
            id,
        );
        let Some(dgram) = f.get_mut(l4..) else {
            return Err(DhcpSendError::TooLarge);
        };
        let mut u = udp::Packet::new_unchecked(dgram);
        u.set_src_port(CLIENT_PORT);
        u.set_dst_port(SERVER_PORT);
        u.set_length(ulen as u16);
        u.payload_mut().copy_from_slice(payload);
        u.fill_checksum(checksum::pseudo_ipv4(
            src.octets(),
            dst.octets(),
            protocol::UDP,
            ulen as u16,
        ));
        self.dhcp.stats.sent += 1;
        self.counters.udp_out_datagrams += 1;
        self.counters.ip_out_requests += 1;
        let meta = OffloadMeta::plain();
        let Some(hop) = hop else {
            self.control.push_back((f, meta));
            return Ok(());
        };
        match self.neighbors.lookup(now, hop) {
            Lookup::Hit(mac) => {
                if let Some(d) = f.get_mut(..6) {
                    d.copy_from_slice(&mac);
                }
                self.control.push_back((f, meta));
            }
            Lookup::Miss => match self.neighbors.enqueue(now, hop, (f, meta)) {
                Queued::ProbeNow => self.probe(hop),
                Queued::Waiting => {}
                Queued::Dropped | Queued::TableFull => self.counters.neighbor_drops += 1,
            },
        }
        Ok(())
    }

    /// Sends an ARP probe for `target` (RFC 5227 section 2.1.1: a broadcast
    /// request with sender protocol address 0.0.0.0) and, from now until
    /// the interface gets an IPv4 address or another address is probed,
    /// queues the ARP packets about `target` for the DHCP client.
    pub fn dhcp_arp_probe(&mut self, target: Ipv4Addr) {
        if !self.cfg.dhcp {
            return;
        }
        self.dhcp.probing = Some(target);
        let mac = self.cfg.mac;
        let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
        put_eth(&mut f, ethernet::BROADCAST, mac, ethertype::ARP);
        let body = f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default();
        if arp::emit_request(body, mac, [0; 4], target.octets()).is_ok() {
            self.dhcp.stats.probes += 1;
            self.counters.arp_requests_out += 1;
            self.control.push_back((f, OffloadMeta::plain()));
        }
    }

    /// The interface got an IPv4 address: the probe is over.
    pub(super) fn dhcp_address_set(&mut self) {
        self.dhcp.probing = None;
    }

    fn dhcp_queue(&mut self, e: DhcpIn) {
        if self.dhcp.queue.len() >= QUEUE {
            self.dhcp.stats.dropped += 1;
            return;
        }
        if self.dhcp.queue.is_empty() {
            self.events.push(Event::Dhcp);
        }
        self.dhcp.queue.push_back(e);
    }

    /// An ARP packet (the hook in `arp_input`): queued for the client if it
    /// is about the probed address.
    pub(super) fn dhcp_arp(&mut self, data: &[u8]) {
        let Some(target) = self.dhcp.probing else {
            return;
        };
        let Ok(p) = arp::Packet::new_checked(data) else {
            return;
        };
        let (spa, tpa) = (Ipv4Addr::from(p.spa()), Ipv4Addr::from(p.tpa()));
        if p.sha() == self.cfg.mac || (spa != target && tpa != target) {
            return;
        }
        self.dhcp.stats.arp_seen += 1;
        let sha = p.sha();
        self.dhcp_queue(DhcpIn::Arp { sha, spa, tpa });
    }

    /// An IPv4 datagram (the hook at the top of `ipv4_packet`): true if it
    /// was a DHCP reply for the client, which takes it.
    pub(super) fn dhcp_input(&mut self, data: &[u8], from: &From<'_>) -> bool {
        let Ok(ip) = ipv4::fields(data) else {
            return false;
        };
        if ip.protocol != protocol::UDP || ip.fragment || !ip.checksum_ok {
            return false;
        }
        let dst = Ipv4Addr::from(ip.dst);
        let ours = match self.cfg.ipv4 {
            None => true,
            Some(me) => dst == me.addr || dst == me.broadcast(),
        };
        if !(dst.is_broadcast() || ours) {
            return false;
        }
        let l4 = ip.payload;
        let Ok(u) = udp::Packet::new_checked(l4) else {
            return false;
        };
        if u.dst_port() != CLIENT_PORT || u.src_port() != SERVER_PORT {
            return false;
        }
        let ulen = usize::from(u.length());
        let Some(dgram) = l4.get(..ulen).filter(|_| ulen >= udp::HEADER_LEN) else {
            self.dhcp.stats.errors += 1;
            return true;
        };
        let verified = matches!(
            from.meta.csum,
            Checksum::Verified { levels: 1.. } | Checksum::Partial { .. }
        );
        let csum = u16::from_be_bytes([
            dgram.get(6).copied().unwrap_or(0),
            dgram.get(7).copied().unwrap_or(0),
        ]);
        if !verified && csum != 0 {
            let pseudo = checksum::pseudo_ipv4(ip.src, ip.dst, protocol::UDP, ulen as u16);
            if !udp::Packet::new_unchecked(dgram).verify_checksum(pseudo, true) {
                self.dhcp.stats.errors += 1;
                return true;
            }
        }
        self.counters.udp_in_datagrams += 1;
        self.dhcp.stats.received += 1;
        let msg = dgram.get(udp::HEADER_LEN..).unwrap_or_default().to_vec();
        self.dhcp_queue(DhcpIn::Message(msg));
        true
    }
}
