//! Interface addresses at run time: [`Config::ipv4`] and [`Config::ipv6`]
//! set and removed after the engine started (by a DHCP client, by SLAAC, by
//! the application), each change an [`Event::AddressAdded`] or
//! [`Event::AddressRemoved`], the interface's on-link route following the
//! address, and the default gateway of a family replaced.
//!
//! A new IPv4 address is announced as at start (gratuitous ARP,
//! `Config::announcements`), a new IPv6 one with an unsolicited neighbour
//! advertisement. Connections and sockets bound to an address that goes
//! are left as they are: what they send no longer leaves from an address of
//! ours, so they time out (the application closes them on
//! [`Event::AddressRemoved`]).

use super::{Engine, Event};
use crate::config::{
    Config, ConfigError, Ipv4Cidr, Ipv6Cidr, MIN_MTU_IPV4, MIN_MTU_IPV6, Route, RouteError,
    RouteKind,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

impl Engine {
    /// Gives the interface the IPv4 address `addr/prefix_len`, replacing the
    /// one it had (which is reported removed).
    ///
    /// Errors: [`ConfigError::PrefixLen`] and [`ConfigError::Address`] as
    /// [`Config::validate`] gives them; nothing changes then.
    pub fn set_ipv4(&mut self, addr: Ipv4Addr, prefix_len: u8) -> Result<(), ConfigError> {
        let mut probe = Config::new(self.cfg.mac).with_ipv4(addr, prefix_len);
        probe.mtu = MIN_MTU_IPV4.max(self.cfg.mtu);
        probe.validate()?;
        let new = Ipv4Cidr::new(addr, prefix_len);
        if self.cfg.ipv4 == Some(new) {
            return Ok(());
        }
        self.remove_ipv4();
        self.cfg.ipv4 = Some(new);
        self.add_connected(IpAddr::V4(addr), prefix_len);
        self.dhcp_address_set();
        self.announce = super::announce::Announce::new(
            self.cfg.announcements.min(crate::config::MAX_ANNOUNCEMENTS),
            true,
            false,
        );
        self.mcast_addresses_changed();
        self.events.push(Event::AddressAdded(IpAddr::V4(addr)));
        Ok(())
    }

    /// Takes the IPv4 address away; the one removed, if there was one.
    pub fn remove_ipv4(&mut self) -> Option<Ipv4Cidr> {
        let old = self.cfg.ipv4.take()?;
        self.remove_connected(IpAddr::V4(old.addr), old.prefix_len);
        self.mcast_addresses_changed();
        self.events
            .push(Event::AddressRemoved(IpAddr::V4(old.addr)));
        Some(old)
    }

    /// Gives the interface the IPv6 address `addr/prefix_len`, replacing the
    /// one it had (which is reported removed).
    ///
    /// Errors: [`ConfigError::PrefixLen`] and [`ConfigError::Address`] as
    /// [`Config::validate`] gives them, and [`ConfigError::Mtu`] when the
    /// MTU is below IPv6's minimum; nothing changes then.
    pub fn set_ipv6(&mut self, addr: Ipv6Addr, prefix_len: u8) -> Result<(), ConfigError> {
        let mut probe = Config::new(self.cfg.mac).with_ipv6(addr, prefix_len);
        probe.mtu = self.cfg.mtu;
        probe.validate()?;
        let new = Ipv6Cidr::new(addr, prefix_len);
        if self.cfg.ipv6 == Some(new) {
            return Ok(());
        }
        self.remove_ipv6();
        self.cfg.ipv6 = Some(new);
        self.add_connected(IpAddr::V6(addr), prefix_len);
        if self.announce.left == 0 && self.cfg.announcements > 0 {
            self.announce = super::announce::Announce::new(1, false, true);
        }
        self.mcast_addresses_changed();
        self.events.push(Event::AddressAdded(IpAddr::V6(addr)));
        Ok(())
    }

    /// Takes the IPv6 address away; the one removed, if there was one.
    pub fn remove_ipv6(&mut self) -> Option<Ipv6Cidr> {
        let old = self.cfg.ipv6.take()?;
        self.remove_connected(IpAddr::V6(old.addr), old.prefix_len);
        self.mcast_addresses_changed();
        self.events
            .push(Event::AddressRemoved(IpAddr::V6(old.addr)));
        Some(old)
    }

    /// Sets the IP MTU (a DHCP lease's option 26): connections opened from
    /// now on take their MSS from it.
    ///
    /// Errors: [`ConfigError::Mtu`] below the minimum of the families the
    /// engine has (or may get, with SLAAC).
    pub fn set_mtu(&mut self, mtu: u16) -> Result<(), ConfigError> {
        let min = if self.cfg.ipv6.is_some() || self.cfg.slaac {
            MIN_MTU_IPV6
        } else {
            MIN_MTU_IPV4
        };
        if mtu < min {
            return Err(ConfigError::Mtu { value: mtu, min });
        }
        self.cfg.mtu = mtu;
        Ok(())
    }

    /// Sends what no longer prefix covers through `gateway`: replaces the
    /// default route (metric 0) of `gateway`'s family with one via it, as
    /// [`Config::with_gateway`] does at start.
    ///
    /// Errors: as [`Engine::add_route`] (a gateway no on-link route covers);
    /// the default route is left as it was then.
    pub fn set_gateway(&mut self, gateway: IpAddr) -> Result<(), RouteError> {
        let v6 = gateway.is_ipv6();
        let new = Route::default_for(v6, RouteKind::Via(gateway));
        let old = self.remove_route(new.dst, 0, 0);
        if let Err(e) = self.add_route(new) {
            if let Some(r) = old {
                let _ = self.add_route(r);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Takes the default route (metric 0) of a family through a gateway
    /// away, if it goes through `gateway`, and puts back the on-link default
    /// route [`Config::new`] starts with.
    pub fn clear_gateway(&mut self, gateway: IpAddr) {
        let v6 = gateway.is_ipv6();
        let dflt = Route::default_for(v6, RouteKind::OnLink);
        let through = self
            .routes()
            .iter()
            .any(|r| r.prefix_len == 0 && r.metric == 0 && r.kind == RouteKind::Via(gateway));
        if through {
            self.remove_route(dflt.dst, 0, 0);
            let _ = self.add_route(dflt);
        }
    }

    /// The on-link route of a new interface prefix.
    fn add_connected(&mut self, addr: IpAddr, prefix_len: u8) {
        // Taken already (a configured route of the same prefix): theirs.
        let _ = self
            .routes
            .add(Route::new(addr, prefix_len, RouteKind::OnLink));
    }

    /// Removes the on-link route of an interface prefix, unless the
    /// configuration lists that route itself.
    fn remove_connected(&mut self, addr: IpAddr, prefix_len: u8) {
        let configured = self.cfg.routes.iter().any(|r| {
            r.kind == RouteKind::OnLink
                && r.metric == 0
                && r.prefix_len == prefix_len
                && r.contains(addr)
        });
        if !configured {
            self.routes.remove(addr, prefix_len, 0);
        }
    }
}
