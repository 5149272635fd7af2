//! The engine's interfaces: interface 0 (`Config::mac`, `ipv4`, `ipv6`,
//! `mtu`) and the further ones of
//! [`Config::interfaces`](crate::Config::interfaces), as a Linux host's eth0
//! and eth1.
//!
//! Each frame the engine sends carries its output interface's MAC as its
//! source: the route of its destination names the interface
//! ([`RouteTable::lookup_dev`](crate::config::RouteTable::lookup_dev)), and a
//! reply leaves by the interface that owns the address it is sent from. A
//! multi-port NIC adaptor ([`linerate_nic::ports::Ports`]) sends each frame
//! out of the port whose MAC is its source, and tags each frame it receives
//! with its port ([`linerate_nic::PacketBuf::port`]), which
//! [`Engine::handle_frames`] reads (and [`Engine::handle_frame_on`] takes):
//! ARP requests and neighbour solicitations are answered only for the
//! arrival interface's own addresses.
//!
//! Source address selection (RFC 1122 section 3.3.4.3, RFC 6724 section 5
//! rule 5): a connection or datagram that is not bound to an address takes
//! the address of the interface its route goes out of, or, if that one has
//! none of the family, interface 0's.
//!
//! With one interface, every helper here answers from interface 0's fields
//! after one test of an empty vector: the single-interface path is what it
//! was.

use super::Engine;
use crate::config::{Ipv4Cidr, Ipv6Cidr};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Counters kept per interface (those that cost nothing on the TCP data
/// path; each NIC port keeps its own frame and byte counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfaceCounters {
    /// Frames received on the interface (through [`Engine::handle_frames`]
    /// or [`Engine::handle_frame_on`]).
    pub rx_frames: u64,
    /// ARP requests sent from it (resolutions and announcements).
    pub arp_requests_out: u64,
    /// ARP replies sent from it.
    pub arp_replies_out: u64,
    /// Neighbour solicitations sent from it.
    pub ndp_solicits_out: u64,
}

impl Engine {
    /// How many interfaces the engine has (1 +
    /// [`Config::interfaces`](crate::Config::interfaces)).
    pub fn interface_count(&self) -> usize {
        1 + self.cfg.interfaces.len()
    }

    /// Interface `i`'s counters (zero for an interface the engine lacks).
    pub fn interface_counters(&self, i: usize) -> IfaceCounters {
        match i {
            0 => self.iface0_counters,
            _ => self.iface_counters.get(i - 1).copied().unwrap_or_default(),
        }
    }

    /// Interface `i`'s counters, mutable (`None` for one the engine lacks).
    #[inline]
    pub(super) fn iface_counter(&mut self, i: usize) -> Option<&mut IfaceCounters> {
        match i {
            0 => Some(&mut self.iface0_counters),
            _ => self.iface_counters.get_mut(i - 1),
        }
    }

    /// The MAC of interface `iface` (not 0) for a frame that arrived on it,
    /// counted; `None` for an interface the engine lacks. Out of line: the
    /// receive path of interface 0 never comes here.
    #[cold]
    #[inline(never)]
    pub(super) fn arrival_mac(&mut self, iface: usize) -> Option<[u8; 6]> {
        let mac = self.cfg.interfaces.get(iface.checked_sub(1)?)?.mac;
        if let Some(c) = self.iface_counter(iface) {
            c.rx_frames += 1;
        }
        Some(mac)
    }

    /// Interface `i`'s MAC (interface 0's for an index the engine lacks).
    #[inline]
    pub(super) fn iface_mac(&self, i: usize) -> [u8; 6] {
        match i {
            0 => self.cfg.mac,
            _ => self
                .cfg
                .interfaces
                .get(i - 1)
                .map_or(self.cfg.mac, |f| f.mac),
        }
    }

    /// Interface `i`'s IPv4 address.
    #[inline]
    pub(super) fn iface_v4(&self, i: usize) -> Option<Ipv4Cidr> {
        match i {
            0 => self.cfg.ipv4,
            _ => self.cfg.interfaces.get(i - 1).and_then(|f| f.ipv4),
        }
    }

    /// Interface `i`'s IPv6 address.
    #[inline]
    pub(super) fn iface_v6(&self, i: usize) -> Option<Ipv6Cidr> {
        match i {
            0 => self.cfg.ipv6,
            _ => self.cfg.interfaces.get(i - 1).and_then(|f| f.ipv6),
        }
    }

    /// Interface `i`'s MTU.
    #[inline]
    pub(super) fn iface_mtu(&self, i: usize) -> u16 {
        match i {
            0 => self.cfg.mtu,
            _ => self
                .cfg
                .interfaces
                .get(i - 1)
                .map_or(self.cfg.mtu, |f| f.mtu),
        }
    }

    /// The interface whose address `ip` is, if any.
    pub(super) fn iface_of(&self, ip: IpAddr) -> Option<usize> {
        (0..self.interface_count()).find(|&i| match ip {
            IpAddr::V4(a) => self.iface_v4(i).is_some_and(|c| c.addr == a),
            IpAddr::V6(a) => self.iface_v6(i).is_some_and(|c| c.addr == a),
        })
    }

    /// True if `a` is the IPv4 address of an interface other than `not`.
    #[inline]
    pub(super) fn other_iface_v4(&self, a: Ipv4Addr, not: usize) -> bool {
        !self.cfg.interfaces.is_empty()
            && (0..self.interface_count())
                .any(|i| i != not && self.iface_v4(i).is_some_and(|c| c.addr == a))
    }

    /// True if `a` is the IPv6 address of an interface other than `not`.
    #[inline]
    pub(super) fn other_iface_v6(&self, a: Ipv6Addr, not: usize) -> bool {
        !self.cfg.interfaces.is_empty()
            && (0..self.interface_count())
                .any(|i| i != not && self.iface_v6(i).is_some_and(|c| c.addr == a))
    }

    /// The MAC frames from our address `src` leave with: that of the
    /// interface that owns it (interface 0's if none does).
    #[inline]
    pub(super) fn mac_for_src(&self, src: IpAddr) -> [u8; 6] {
        if self.cfg.interfaces.is_empty() {
            return self.cfg.mac;
        }
        self.iface_mac(self.iface_of(src).unwrap_or(0))
    }

    /// The interface datagrams to `dst` leave by (its route's).
    #[inline]
    pub(super) fn output_iface(&self, dst: IpAddr) -> usize {
        if self.cfg.interfaces.is_empty() {
            return 0;
        }
        self.routes.lookup_dev(dst).1
    }

    /// The source address for datagrams to `dst` from a socket not bound to
    /// one: the output interface's address of `dst`'s family, else interface
    /// 0's (see the module docs).
    pub(super) fn source_for(&self, dst: IpAddr) -> Option<IpAddr> {
        let out = self.output_iface(dst);
        match dst {
            IpAddr::V4(_) => self
                .iface_v4(out)
                .or(self.cfg.ipv4)
                .map(|c| IpAddr::V4(c.addr)),
            IpAddr::V6(_) => self
                .iface_v6(out)
                .or(self.cfg.ipv6)
                .map(|c| IpAddr::V6(c.addr)),
        }
    }

    /// True if `ip` is an address of one of the engine's interfaces.
    pub(super) fn is_local_addr(&self, ip: IpAddr) -> bool {
        self.iface_of(ip).is_some()
    }
}
