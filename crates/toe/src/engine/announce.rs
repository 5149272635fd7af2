//! Announcing our addresses when the engine starts: gratuitous ARP (RFC 5227
//! section 3, ANNOUNCE_NUM announcements ANNOUNCE_INTERVAL apart) and one
//! unsolicited neighbour advertisement (RFC 4861 section 7.2.6), so that
//! neighbours holding another MAC for our addresses (a host that had them
//! before, a NIC replaced) update their caches. `Config::announcements` sets
//! how many; 0 sends none.
//!
//! The first round goes out with the first `poll_transmit`, the rest from
//! `handle_timeout`; `poll_timeout` reports the next. While none is left the
//! cost is one test of a counter per `poll_transmit` and `handle_timeout`
//! call, nothing per frame. Address conflict detection (RFC 5227 section 2.1's
//! probes) is not done: the engine is configured with its addresses.

use super::Engine;
use super::output::put_eth;
use crate::time::Instant;
use linerate_offload::OffloadMeta;
use linerate_wire::arp;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::icmp::ndp;
use std::net::Ipv6Addr;

/// The IPv6 all-nodes multicast address ff02::1.
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// Announcement rounds still to send and when the next is due.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Announce {
    /// Rounds left.
    pub left: u32,
    /// When the next round is due; `None` before the first (due at once).
    pub next: Option<Instant>,
}

impl Announce {
    /// The rounds for an interface with `ipv4` and `ipv6` addresses: up to
    /// `count` with an IPv4 address, at most one (the advertisement) with only
    /// an IPv6 one, none with neither.
    pub fn new(count: u32, ipv4: bool, ipv6: bool) -> Announce {
        let left = match (ipv4, ipv6) {
            (true, _) => count,
            (false, true) => count.min(1),
            (false, false) => 0,
        };
        Announce { left, next: None }
    }

    /// When [`Engine::announce`] next has work.
    pub fn deadline(&self) -> Option<Instant> {
        if self.left == 0 { None } else { self.next }
    }
}

impl Engine {
    /// Queues the announcement round due at `now`, if one is. The caller
    /// checks `self.announce.left != 0` first.
    #[inline(never)]
    pub(super) fn announce(&mut self, now: Instant) {
        let first = self.announce.next.is_none();
        if self.announce.next.is_some_and(|t| t > now) {
            return;
        }
        self.announce.left = self.announce.left.saturating_sub(1);
        self.announce.next = Some(now + self.cfg.announce_interval);
        // Each interface announces its own addresses on its own link.
        for iface in 0..self.interface_count() {
            let mac = self.iface_mac(iface);
            if let Some(me) = self.iface_v4(iface) {
                let mut f = vec![0u8; ethernet::HEADER_LEN + arp::PACKET_LEN];
                put_eth(&mut f, ethernet::BROADCAST, mac, ethertype::ARP);
                let body = f.get_mut(ethernet::HEADER_LEN..).unwrap_or_default();
                if arp::emit_gratuitous(body, mac, me.addr.octets()).is_ok() {
                    self.counters.arp_announcements_out += 1;
                    if let Some(c) = self.iface_counter(iface) {
                        c.arp_requests_out += 1;
                    }
                    self.control.push_back((f, OffloadMeta::plain()));
                }
            }
            if let (true, Some(me)) = (first, self.iface_v6(iface)) {
                let to = ndp::multicast_mac(&ALL_NODES.octets());
                if self.send_neighbor_advert(me.addr, to, ALL_NODES, false) {
                    self.counters.icmp_out_msgs += 1;
                    self.counters.ndp_unsolicited_adverts_out += 1;
                }
            }
        }
    }
}
