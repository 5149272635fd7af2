//! The routing table: where a datagram for a destination goes next.
//!
//! A [`Route`] covers a prefix (`dst/prefix_len`) and says what happens to
//! datagrams for addresses in it: sent straight to the destination on the link
//! ([`RouteKind::OnLink`]), to a gateway's Ethernet address
//! ([`RouteKind::Via`]), dropped in silence ([`RouteKind::Blackhole`]) or
//! refused ([`RouteKind::Unreachable`]). The look-up is Linux's for one table:
//! the longest prefix that contains the destination wins, and among routes of
//! the same prefix the lowest metric. The prefixes of the interface's own
//! addresses are on-link routes of their own (metric 0, as the kernel's
//! `proto kernel` routes), added by the engine; IPv6 link-local addresses
//! (`fe80::/10`) are always on the link.
//!
//! [`Config::routes`](super::Config::routes) starts with one on-link default
//! route per family: every destination is a neighbour, as on a flat network.
//! [`Config::with_gateway`](super::Config::with_gateway) replaces it with a
//! default route through a gateway; [`Config::with_route`](super::Config::with_route)
//! adds others. An engine's table changes at run time with
//! [`Engine::add_route`](crate::Engine::add_route) and
//! [`Engine::remove_route`](crate::Engine::remove_route); connections pick up
//! the change at their next segment.
//!
//! An engine with more than one interface ([`Config::interfaces`](super::Config::interfaces))
//! keeps one table for all of them, as Linux's main table: a route may name its
//! output interface ([`Route::dev`], `ip route add PREFIX via GW dev eth1`);
//! one that does not goes out the interface of the on-link route that covers
//! its gateway (or, for an on-link route, interface 0). Each interface's own
//! prefixes are on-link routes on it. [`RouteTable::lookup_dev`] answers with
//! the next hop and the interface.
//!
//! The look-up runs once per connection (and again after a change of the
//! table), and once per UDP datagram: a scan of the table, which is meant for
//! the handful of routes a host has, not a router's hundreds of thousands.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Routes an engine's table holds at most.
pub const MAX_ROUTES: usize = 256;

/// Where a route sends what it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RouteKind {
    /// The destination is on the link: resolved by ARP or NDP itself
    /// (`ip route add PREFIX dev IF`).
    OnLink,
    /// Through a gateway on the link, whose Ethernet address is resolved
    /// instead (`ip route add PREFIX via GW`). The gateway must be of the
    /// route's family and on the link by another route.
    Via(IpAddr),
    /// Dropped without a word, counted in
    /// [`Counters::route_blackhole_drops`](crate::Counters::route_blackhole_drops);
    /// a connect or a UDP send to it is refused (`EINVAL`, as Linux's
    /// `blackhole` routes).
    Blackhole,
    /// Refused: a connect or a UDP send gets `EHOSTUNREACH` (Linux's
    /// `unreachable` routes); a segment of a connection already open is
    /// dropped and counted in
    /// [`Counters::route_unreachable_drops`](crate::Counters::route_unreachable_drops).
    Unreachable,
}

/// One route: a prefix, what happens to it, and its metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The prefix's address (bits past `prefix_len` are ignored).
    pub dst: IpAddr,
    /// The prefix length: 0 (a default route) to 32 or 128.
    pub prefix_len: u8,
    /// What happens to datagrams it covers.
    pub kind: RouteKind,
    /// Among routes of the same prefix, the lowest metric wins.
    pub metric: u32,
    /// The output interface (`dev` in `ip route`): 0 is the interface of
    /// [`Config::mac`](super::Config::mac), 1 the first of
    /// [`Config::interfaces`](super::Config::interfaces), and so on. `None`:
    /// the interface of the on-link route that covers the gateway, or
    /// interface 0 for an on-link route.
    pub dev: Option<usize>,
}

impl Route {
    /// A route for `dst/prefix_len`, metric 0.
    pub fn new(dst: IpAddr, prefix_len: u8, kind: RouteKind) -> Route {
        Route {
            dst,
            prefix_len,
            kind,
            metric: 0,
            dev: None,
        }
    }

    /// The default route of `dst`'s family (prefix length 0) of `kind`.
    pub fn default_for(v6: bool, kind: RouteKind) -> Route {
        let dst = if v6 {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        };
        Route::new(dst, 0, kind)
    }

    /// The same route with `metric`.
    pub fn with_metric(mut self, metric: u32) -> Route {
        self.metric = metric;
        self
    }

    /// The same route out of interface `dev`.
    pub fn with_dev(mut self, dev: usize) -> Route {
        self.dev = Some(dev);
        self
    }

    /// True if `ip` is in the route's prefix (and of its family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.dst, ip) {
            (IpAddr::V4(d), IpAddr::V4(a)) => prefix_eq(
                u128::from(u32::from(d)),
                u128::from(u32::from(a)),
                32,
                self.prefix_len,
            ),
            (IpAddr::V6(d), IpAddr::V6(a)) => {
                prefix_eq(u128::from(d), u128::from(a), 128, self.prefix_len)
            }
            _ => false,
        }
    }

    /// The same prefix and metric (what identifies a route in the table, as
    /// for `ip route del PREFIX metric M`).
    fn same_key(&self, other: &Route) -> bool {
        self.prefix_len == other.prefix_len
            && self.metric == other.metric
            && self.contains(other.dst)
            && other.contains(self.dst)
    }

    fn max_len(&self) -> u8 {
        if self.dst.is_ipv6() { 128 } else { 32 }
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.prefix_len == 0 {
            f.write_str("default")?;
        } else {
            write!(f, "{}/{}", self.dst, self.prefix_len)?;
        }
        match self.kind {
            RouteKind::OnLink => f.write_str(" on-link")?,
            RouteKind::Via(gw) => write!(f, " via {gw}")?,
            RouteKind::Blackhole => f.write_str(" blackhole")?,
            RouteKind::Unreachable => f.write_str(" unreachable")?,
        }
        if let Some(dev) = self.dev {
            write!(f, " dev {dev}")?;
        }
        if self.metric != 0 {
            write!(f, " metric {}", self.metric)?;
        }
        Ok(())
    }
}

/// True if the first `len` of `bits` high bits of `a` and `b` agree.
fn prefix_eq(a: u128, b: u128, bits: u32, len: u8) -> bool {
    let len = u32::from(len).min(bits);
    if len == 0 {
        return true;
    }
    let shift = bits - len;
    (a ^ b) >> shift == 0
}

/// Where a destination's datagrams go, from [`RouteTable::lookup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NextHop {
    /// To this address's Ethernet address: the destination itself or a gateway.
    Neighbor(IpAddr),
    /// Dropped in silence (a blackhole route).
    Blackhole,
    /// Refused (an unreachable route).
    Unreachable,
    /// No route covers the destination (`ENETUNREACH`).
    NoRoute,
}

/// Why a route is refused by [`RouteTable::check`] (and so by
/// [`Config::validate`](super::Config::validate) and
/// [`Engine::add_route`](crate::Engine::add_route)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// A prefix length longer than the address.
    PrefixLen {
        /// The route.
        route: Route,
    },
    /// A gateway of the other family than the route, unspecified, multicast or
    /// broadcast.
    Gateway {
        /// The route.
        route: Route,
    },
    /// A gateway that no on-link route (or interface prefix) covers: its
    /// Ethernet address could never be resolved (Linux: "Nexthop has invalid
    /// gateway").
    GatewayNotOnLink {
        /// The route.
        route: Route,
    },
    /// A route with the same prefix and metric is already in the table
    /// (`EEXIST`, as `ip route add` says "File exists").
    Exists {
        /// The route.
        route: Route,
    },
    /// The table holds [`MAX_ROUTES`] already.
    Full,
    /// The route names an output interface the engine does not have
    /// (Linux: "Cannot find device").
    NoDevice {
        /// The route.
        route: Route,
        /// How many interfaces the engine has.
        devices: usize,
    },
}

impl fmt::Display for RouteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteError::PrefixLen { route } => write!(
                f,
                "route {route}: prefix length {} is longer than the address ({} bits)",
                route.prefix_len,
                route.max_len()
            ),
            RouteError::Gateway { route } => write!(
                f,
                "route {route}: the gateway must be a unicast address of the route's family"
            ),
            RouteError::GatewayNotOnLink { route } => write!(
                f,
                "route {route}: no on-link route or interface prefix covers the gateway; \
                 add the gateway's subnet as on-link, or fix the gateway address"
            ),
            RouteError::Exists { route } => write!(
                f,
                "route {route}: a route with the same prefix and metric exists; remove it first \
                 or give this one another metric"
            ),
            RouteError::Full => write!(f, "the routing table holds {MAX_ROUTES} routes already"),
            RouteError::NoDevice { route, devices } => write!(
                f,
                "route {route}: no interface of that index (the engine has {devices}, \
                 numbered from 0)"
            ),
        }
    }
}

impl std::error::Error for RouteError {}

/// An engine's routes, kept in look-up order: longest prefix first, then
/// lowest metric.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    /// Interfaces a route may name; 0 stands for 1 (the table of
    /// [`RouteTable::default`]).
    devices: usize,
    /// Bumped by every change: connections cache their next hop with the
    /// generation it was looked up in.
    generation: u32,
}

impl RouteTable {
    /// The table of `routes` plus the interface prefixes `connected` (on-link,
    /// metric 0), after [`RouteTable::check`] on each route.
    pub fn new(connected: &[Route], routes: &[Route]) -> Result<RouteTable, RouteError> {
        RouteTable::with_devices(1, connected, routes)
    }

    /// [`RouteTable::new`] for an engine of `devices` interfaces: a route
    /// naming another is refused ([`RouteError::NoDevice`]).
    pub fn with_devices(
        devices: usize,
        connected: &[Route],
        routes: &[Route],
    ) -> Result<RouteTable, RouteError> {
        let mut t = RouteTable {
            devices,
            ..RouteTable::default()
        };
        for r in connected {
            // The interface's own prefixes: duplicates of a configured route
            // are the configured one's business.
            if !t.routes.iter().any(|x| x.same_key(r)) {
                t.insert(*r);
            }
        }
        // On-link routes first, so a gateway may be covered by a route
        // listed after it.
        for r in routes.iter().filter(|r| r.kind == RouteKind::OnLink) {
            t.add(*r)?;
        }
        for r in routes.iter().filter(|r| r.kind != RouteKind::OnLink) {
            t.add(*r)?;
        }
        Ok(t)
    }

    /// Why `route` cannot join this table, if it cannot.
    pub fn check(&self, route: &Route) -> Result<(), RouteError> {
        let route = *route;
        if route.prefix_len > route.max_len() {
            return Err(RouteError::PrefixLen { route });
        }
        let devices = self.devices.max(1);
        if route.dev.is_some_and(|d| d >= devices) {
            return Err(RouteError::NoDevice { route, devices });
        }
        if let RouteKind::Via(gw) = route.kind {
            let bad = match gw {
                IpAddr::V4(a) => {
                    !route.dst.is_ipv4()
                        || a.is_unspecified()
                        || a.is_multicast()
                        || a.is_broadcast()
                }
                IpAddr::V6(a) => !route.dst.is_ipv6() || a.is_unspecified() || a.is_multicast(),
            };
            if bad {
                return Err(RouteError::Gateway { route });
            }
            // On the link of the route's interface, when it names one.
            let on_link = is_link_local(gw)
                || self.routes.iter().any(|r| {
                    r.kind == RouteKind::OnLink
                        && r.contains(gw)
                        && (route.dev.is_none() || r.dev.unwrap_or(0) == route.dev.unwrap_or(0))
                });
            if !on_link {
                return Err(RouteError::GatewayNotOnLink { route });
            }
        }
        if self.routes.iter().any(|r| r.same_key(&route)) {
            return Err(RouteError::Exists { route });
        }
        if self.routes.len() >= MAX_ROUTES {
            return Err(RouteError::Full);
        }
        Ok(())
    }

    /// Adds `route` after [`RouteTable::check`].
    pub fn add(&mut self, route: Route) -> Result<(), RouteError> {
        self.check(&route)?;
        self.insert(route);
        Ok(())
    }

    fn insert(&mut self, route: Route) {
        let at = self
            .routes
            .iter()
            .position(|r| {
                (r.prefix_len, u32::MAX - r.metric) < (route.prefix_len, u32::MAX - route.metric)
            })
            .unwrap_or(self.routes.len());
        self.routes.insert(at, route);
        self.generation = self.generation.wrapping_add(1);
    }

    /// Removes the route of `dst/prefix_len` with `metric`; the route removed.
    pub fn remove(&mut self, dst: IpAddr, prefix_len: u8, metric: u32) -> Option<Route> {
        let key = Route::new(dst, prefix_len, RouteKind::OnLink).with_metric(metric);
        let at = self.routes.iter().position(|r| r.same_key(&key))?;
        self.generation = self.generation.wrapping_add(1);
        Some(self.routes.remove(at))
    }

    /// The routes, in look-up order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// The table's generation: changes whenever a route is added or removed.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Where datagrams for `dst` go: the first route, in look-up order, that
    /// contains it. Link-local IPv6 destinations are always neighbours.
    pub fn lookup(&self, dst: IpAddr) -> NextHop {
        self.lookup_dev(dst).0
    }

    /// [`RouteTable::lookup`] and the output interface: the route's
    /// [`Route::dev`], else that of the on-link route covering its gateway,
    /// else 0. Link-local IPv6 destinations go out interface 0 (a scope
    /// the engine does not take from the caller).
    pub fn lookup_dev(&self, dst: IpAddr) -> (NextHop, usize) {
        if is_link_local(dst) {
            return (NextHop::Neighbor(dst), 0);
        }
        match self.routes.iter().find(|r| r.contains(dst)) {
            None => (NextHop::NoRoute, 0),
            Some(r) => match r.kind {
                RouteKind::OnLink => (NextHop::Neighbor(dst), r.dev.unwrap_or(0)),
                RouteKind::Via(gw) => (
                    NextHop::Neighbor(gw),
                    r.dev.unwrap_or_else(|| self.gateway_dev(gw)),
                ),
                RouteKind::Blackhole => (NextHop::Blackhole, 0),
                RouteKind::Unreachable => (NextHop::Unreachable, 0),
            },
        }
    }

    /// The interface of the on-link route that covers gateway `gw` (0 if none).
    fn gateway_dev(&self, gw: IpAddr) -> usize {
        self.routes
            .iter()
            .find(|r| r.kind == RouteKind::OnLink && r.contains(gw))
            .and_then(|r| r.dev)
            .unwrap_or(0)
    }
}

fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        IpAddr::V4(s.parse().unwrap())
    }
    fn v6(s: &str) -> IpAddr {
        IpAddr::V6(s.parse().unwrap())
    }

    /// Linux's choice, `ip route get`, for a table like the one below.
    #[test]
    fn longest_prefix_then_lowest_metric() {
        let connected = [Route::new(v4("192.0.2.0"), 24, RouteKind::OnLink)];
        let routes = [
            Route::default_for(false, RouteKind::Via(v4("192.0.2.1"))).with_metric(100),
            Route::default_for(false, RouteKind::Via(v4("192.0.2.2"))).with_metric(50),
            Route::new(v4("198.51.100.0"), 24, RouteKind::Via(v4("192.0.2.3"))),
            Route::new(v4("198.51.100.128"), 25, RouteKind::Via(v4("192.0.2.4"))),
            Route::new(v4("203.0.113.0"), 24, RouteKind::Blackhole),
            Route::new(v4("203.0.113.64"), 26, RouteKind::Unreachable),
        ];
        let t = RouteTable::new(&connected, &routes).unwrap();
        let hop = |d: &str| t.lookup(v4(d));
        assert_eq!(hop("192.0.2.77"), NextHop::Neighbor(v4("192.0.2.77")));
        assert_eq!(hop("8.8.8.8"), NextHop::Neighbor(v4("192.0.2.2")));
        assert_eq!(hop("198.51.100.5"), NextHop::Neighbor(v4("192.0.2.3")));
        assert_eq!(hop("198.51.100.200"), NextHop::Neighbor(v4("192.0.2.4")));
        assert_eq!(hop("203.0.113.1"), NextHop::Blackhole);
        assert_eq!(hop("203.0.113.70"), NextHop::Unreachable);
        // No IPv6 route at all.
        assert_eq!(t.lookup(v6("2001:db8::1")), NextHop::NoRoute);
        // But link-local is always on the link.
        assert_eq!(t.lookup(v6("fe80::1")), NextHop::Neighbor(v6("fe80::1")));
    }

    #[test]
    fn bad_routes_are_refused_with_their_reason() {
        let connected = [
            Route::new(v4("10.0.0.0"), 8, RouteKind::OnLink),
            Route::new(v6("2001:db8::"), 64, RouteKind::OnLink),
        ];
        let mut t = RouteTable::new(&connected, &[]).unwrap();
        let r = Route::new(v4("10.0.0.0"), 33, RouteKind::OnLink);
        assert_eq!(t.add(r), Err(RouteError::PrefixLen { route: r }));
        let r = Route::default_for(false, RouteKind::Via(v6("2001:db8::1")));
        assert_eq!(t.add(r), Err(RouteError::Gateway { route: r }));
        let r = Route::default_for(false, RouteKind::Via(v4("224.0.0.1")));
        assert_eq!(t.add(r), Err(RouteError::Gateway { route: r }));
        let r = Route::default_for(false, RouteKind::Via(v4("172.16.0.1")));
        assert_eq!(t.add(r), Err(RouteError::GatewayNotOnLink { route: r }));
        // A link-local IPv6 gateway is on the link by definition (RFC 4861
        // routers advertise from theirs).
        t.add(Route::default_for(true, RouteKind::Via(v6("fe80::1"))))
            .unwrap();
        let r = Route::default_for(true, RouteKind::Via(v6("2001:db8::1")));
        assert_eq!(t.add(r), Err(RouteError::Exists { route: r }));
        t.add(r.with_metric(10)).unwrap();
        assert_eq!(
            t.lookup(v6("2001:4860::8888")),
            NextHop::Neighbor(v6("fe80::1"))
        );
        // The same prefix written with host bits set is the same key.
        assert!(t.remove(v6("::5"), 0, 0).is_some());
        assert_eq!(
            t.lookup(v6("2001:4860::8888")),
            NextHop::Neighbor(v6("2001:db8::1"))
        );
        assert!(t.remove(v6("::"), 0, 0).is_none());
        let messages = [
            RouteError::Full.to_string(),
            RouteError::GatewayNotOnLink { route: r }.to_string(),
        ];
        assert!(messages[1].contains("via 2001:db8::1"), "{messages:?}");
    }

    #[test]
    fn a_gateway_may_be_covered_by_a_route_listed_after_it() {
        let routes = [
            Route::default_for(false, RouteKind::Via(v4("100.64.0.1"))),
            Route::new(v4("100.64.0.0"), 30, RouteKind::OnLink),
        ];
        let t = RouteTable::new(&[], &routes).unwrap();
        assert_eq!(t.lookup(v4("1.1.1.1")), NextHop::Neighbor(v4("100.64.0.1")));
        assert_eq!(t.routes().len(), 2);
    }

    #[test]
    fn the_table_is_bounded_and_counts_its_changes() {
        let mut t = RouteTable::new(&[], &[]).unwrap();
        let g0 = t.generation();
        for i in 0..MAX_ROUTES {
            let dst = IpAddr::V4(Ipv4Addr::from(0x0a00_0000u32 + ((i as u32) << 8)));
            t.add(Route::new(dst, 24, RouteKind::OnLink)).unwrap();
        }
        assert_ne!(t.generation(), g0);
        let r = Route::new(v4("11.0.0.0"), 24, RouteKind::OnLink);
        assert_eq!(t.add(r), Err(RouteError::Full));
    }
}
