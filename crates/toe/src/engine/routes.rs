//! The engine's routing table at run time (`Config::routes`, `config::route`).

use super::{Engine, NextHop, Route, RouteError, Unroutable};
use std::net::IpAddr;

impl Engine {
    /// The routing table, in look-up order (longest prefix first, then lowest
    /// metric), the interface's own prefixes included.
    pub fn routes(&self) -> &[Route] {
        self.routes.routes()
    }

    /// Where datagrams for `dst` go now (what `ip route get` answers).
    pub fn route_lookup(&self, dst: IpAddr) -> NextHop {
        self.routes.lookup(dst)
    }

    /// Adds `route`. Open connections whose destination it covers send their
    /// next segment by it.
    ///
    /// Errors: see [`RouteError`] (a gateway not on the link, a route of the
    /// same prefix and metric, a full table).
    pub fn add_route(&mut self, route: Route) -> Result<(), RouteError> {
        self.routes.add(route)
    }

    /// Removes the route of `dst/prefix_len` with `metric` (`ip route del`);
    /// the route removed, if there was one. Open connections whose route it was
    /// take the next best route, or drop their segments (counted in
    /// [`Counters::route_unreachable_drops`](crate::Counters::route_unreachable_drops))
    /// until one is added.
    pub fn remove_route(&mut self, dst: IpAddr, prefix_len: u8, metric: u32) -> Option<Route> {
        self.routes.remove(dst, prefix_len, metric)
    }

    /// Whether a new connection or datagram to `dst` may go: refused as Linux
    /// refuses it when no route, an unreachable route or a blackhole route
    /// covers it.
    pub(super) fn route_check(&self, dst: IpAddr) -> Result<(), Unroutable> {
        match self.routes.lookup(dst) {
            NextHop::Neighbor(_) => Ok(()),
            NextHop::NoRoute => Err(Unroutable::NoRoute),
            NextHop::Unreachable => Err(Unroutable::Unreachable),
            NextHop::Blackhole => Err(Unroutable::Blackhole),
        }
    }
}
