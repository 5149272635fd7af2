//! Addresses from the network: the runtime's DHCP client and what SLAAC
//! found, applied to every queue's engine and published to the application.
//!
//! With [`Config::dhcp`](linerate_toe::Config::dhcp) or
//! [`Config::slaac`](linerate_toe::Config::slaac) on, [`Runtime::start`](crate::Runtime::start)
//! starts one task on queue 0 (a [`crate::local`] task, as the DNS driver is)
//! that
//!
//! * runs the sans-IO [`linerate_dhcp::Client`] over queue 0's engine: the
//!   engine's DHCP channel (`Engine::dhcp_recv`, `Engine::dhcp_send`,
//!   `Engine::dhcp_arp_probe`) carries its messages and ARP probes, and the
//!   client's timers sleep on the queue loop's clock. The DHCP replies other
//!   queues receive are copied to every queue, as neighbour discovery is,
//!   so queue 0's engine sees them all;
//! * applies a lease to every queue's engine: the address and prefix
//!   (`Engine::set_ipv4`), the first router as the IPv4 default gateway, the
//!   interface MTU; and takes them away when the lease is lost;
//! * gathers the DNS servers of the lease and of router advertisements
//!   (`Engine::dns_servers`) and, unless [`RuntimeConfig::dns`](crate::RuntimeConfig::dns)
//!   names servers, makes a resolver asking them the runtime's
//!   ([`Handle::set_resolver`]);
//! * publishes the interface's addresses and DNS servers
//!   ([`Handle::net_state`], [`Handle::watch_net`]).
//!
//! SLAAC runs in each queue's engine on the router advertisements it sees
//! (copied to every queue): each forms the same addresses.
//!
//! The lease is kept when the runtime stops (a client started again soon
//! asks for the same address with [`linerate_dhcp::Config::init_reboot`] and
//! usually gets it), unless [`RuntimeConfig::dhcp_release_on_stop`](crate::RuntimeConfig::dhcp_release_on_stop)
//! asks for a DHCPRELEASE: queue 0 runs the task once more when it stops,
//! the release goes to the server (its next hop resolved if need be) while
//! the queue lingers, and the address stays on the engine until then.

use crate::local::{self, Sleep};
use crate::runtime::Handle;
use linerate_dhcp::{Client, Event, Io, Lease, LostReason};
use linerate_toe::{DhcpIn, Engine};
use std::future::{Future, poll_fn};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

/// The interface's addresses and DNS servers as the runtime knows them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetState {
    /// The IPv4 address and prefix length, if any.
    pub ipv4: Option<(Ipv4Addr, u8)>,
    /// The IPv6 address and prefix length, if any.
    pub ipv6: Option<(Ipv6Addr, u8)>,
    /// The DHCP lease in use, if any.
    pub lease: Option<Lease>,
    /// DNS servers: the lease's, then the router advertisements'.
    pub dns: Vec<IpAddr>,
    /// DHCP leases extended so far (renewals and rebinds).
    pub renewals: u64,
}

/// What the queue loops and the task share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: tokio::sync::watch::Sender<NetState>,
    waker: std::sync::Mutex<Option<Waker>>,
    /// The task releases the lease when the runtime stops.
    release_on_stop: AtomicBool,
    /// The runtime is stopping.
    stopping: AtomicBool,
    /// The task handed its DHCPRELEASE to the engine.
    released: AtomicBool,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            state: tokio::sync::watch::Sender::new(NetState::default()),
            waker: std::sync::Mutex::new(None),
            release_on_stop: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }
}

impl Shared {
    /// The runtime is stopping: wakes the task if it has something to say
    /// (a DHCPRELEASE) and says whether it has.
    pub(crate) fn stop(&self) -> bool {
        self.stopping.store(true, Ordering::Release);
        if !self.release_on_stop.load(Ordering::Acquire) {
            return false;
        }
        self.wake();
        true
    }

    /// Whether the task handed a last message to the engine.
    pub(crate) fn said_last_words(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// Wakes the task: queue 0's engine has DHCP input, or its addresses or
    /// DNS servers changed.
    pub(crate) fn wake(&self) {
        if let Ok(mut w) = self.waker.lock()
            && let Some(w) = w.take()
        {
            w.wake();
        }
    }
}

impl Handle {
    /// The interface's addresses and DNS servers (see [`crate::netconf`]).
    pub fn net_state(&self) -> NetState {
        self.inner.net.state.borrow().clone()
    }

    /// A receiver that sees every change of [`Handle::net_state`]
    /// (`changed().await`, `wait_for(|s| s.ipv4.is_some()).await`).
    pub fn watch_net(&self) -> tokio::sync::watch::Receiver<NetState> {
        self.inner.net.state.subscribe()
    }
}

/// Starts the task on queue 0 if the engine configuration asks for DHCP or
/// SLAAC. `client` configures the DHCP client (`None`: the defaults for the
/// interface's MAC); `auto_dns`: make a resolver of the servers learnt.
pub(crate) fn start(
    rt: &Handle,
    engine: &linerate_toe::Config,
    client: Option<linerate_dhcp::Config>,
    release_on_stop: bool,
    auto_dns: bool,
    seed: u64,
) -> io::Result<()> {
    if !engine.dhcp && !engine.slaac {
        return Ok(());
    }
    rt.inner
        .net
        .release_on_stop
        .store(release_on_stop && engine.dhcp, Ordering::Release);
    let client = engine.dhcp.then(|| {
        let cfg = client.unwrap_or_else(|| linerate_dhcp::Config::new(engine.mac));
        Client::new(cfg, seed)
    });
    let handle = rt.clone();
    rt.spawn_on(0, move || async move {
        let mut t = Task {
            rt: handle,
            client,
            sleep: None,
            auto_dns,
            dns: Vec::new(),
        };
        poll_fn(|cx| t.poll(cx)).await;
    })?;
    Ok(())
}

struct Task {
    rt: Handle,
    client: Option<Client>,
    sleep: Option<(linerate_dhcp::Instant, Pin<Box<Sleep>>)>,
    auto_dns: bool,
    /// The DNS servers the resolver was last made with.
    dns: Vec<IpAddr>,
}

impl Task {
    fn now(&self) -> linerate_dhcp::Instant {
        linerate_dhcp::Instant::from_nanos(self.rt.now().as_nanos())
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Ok(mut w) = self.rt.inner.net.waker.lock() {
            *w = Some(cx.waker().clone());
        }
        loop {
            let mut progress = self.input();
            progress |= self.release();
            progress |= self.output();
            progress |= self.events();
            progress |= self.timer(cx);
            self.publish();
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Feeds the client what queue 0's engine received for it.
    fn input(&mut self) -> bool {
        let Some(c) = self.client.as_mut() else {
            return false;
        };
        let now = linerate_dhcp::Instant::from_nanos(self.rt.now().as_nanos());
        let got = local::with_engine(&self.rt, 0, |e| {
            std::iter::from_fn(|| e.dhcp_recv()).collect::<Vec<_>>()
        })
        .unwrap_or_default();
        let progress = !got.is_empty();
        for d in got {
            match d {
                DhcpIn::Message(m) => c.handle_message(now, &m),
                DhcpIn::Arp { sha, spa, tpa } => c.handle_arp(now, sha, spa, tpa),
            }
        }
        progress
    }

    /// When the runtime stops and the configuration asks for it: gives the
    /// lease back (the client's RELEASE, sent by `output`).
    fn release(&mut self) -> bool {
        let net = &self.rt.inner.net;
        if !net.stopping.load(Ordering::Acquire) || !net.release_on_stop.load(Ordering::Acquire) {
            return false;
        }
        let Some(c) = self.client.as_mut() else {
            return false;
        };
        if c.state() == linerate_dhcp::State::Stopped {
            return false;
        }
        let now = linerate_dhcp::Instant::from_nanos(self.rt.now().as_nanos());
        c.release(now);
        true
    }

    /// Carries out what the client asked.
    fn output(&mut self) -> bool {
        let Some(c) = self.client.as_mut() else {
            return false;
        };
        let mut ios = Vec::new();
        while let Some(io) = c.poll_io() {
            ios.push(io);
        }
        if ios.is_empty() {
            return false;
        }
        let now = self.rt.now();
        let released = &self.rt.inner.net.released;
        let stopping = self.rt.inner.net.stopping.load(Ordering::Acquire);
        local::with_engine(&self.rt, 0, |e| {
            for io in ios {
                match io {
                    Io::Send(t) => match e.dhcp_send(now, t.src, t.dst, &t.data) {
                        Ok(()) => {
                            if stopping {
                                released.store(true, Ordering::Release);
                            }
                        }
                        Err(err) => tracing::debug!("dhcp: send to {}: {err}", t.dst),
                    },
                    Io::ArpProbe { target } => e.dhcp_arp_probe(target),
                }
            }
        });
        true
    }

    /// Applies the client's leases to every queue's engine.
    fn events(&mut self) -> bool {
        let Some(c) = self.client.as_mut() else {
            return false;
        };
        let mut evs = Vec::new();
        while let Some(e) = c.poll_event() {
            evs.push(e);
        }
        if evs.is_empty() {
            return false;
        }
        for ev in evs {
            match ev {
                Event::Bound(lease) => {
                    tracing::info!(
                        "dhcp: {}/{} from {} for {:?}",
                        lease.addr,
                        lease.prefix_len,
                        lease.server,
                        lease.lease_time
                    );
                    let l = lease.clone();
                    self.on_all(move |e| apply(e, &l));
                    self.rt
                        .inner
                        .net
                        .state
                        .send_modify(|s| s.lease = Some(lease));
                }
                Event::Renewed(lease) => {
                    self.rt.inner.net.state.send_modify(|s| {
                        s.lease = Some(lease);
                        s.renewals += 1;
                    });
                }
                Event::Lost {
                    lease,
                    reason: LostReason::Released,
                } => {
                    // The runtime is stopping: the address stays until the
                    // RELEASE from it is out.
                    tracing::info!("dhcp: released {} to {}", lease.addr, lease.server);
                    self.rt.inner.net.state.send_modify(|s| s.lease = None);
                }
                Event::Lost { lease, reason } => {
                    tracing::info!("dhcp: lost {} ({reason:?})", lease.addr);
                    let replaced = reason == LostReason::Replaced;
                    self.on_all(move |e| unapply(e, &lease, replaced));
                    self.rt.inner.net.state.send_modify(|s| s.lease = None);
                }
                Event::Declined { addr, by } => {
                    tracing::warn!("dhcp: {addr} is in use by {by:02x?}: declined");
                }
            }
        }
        true
    }

    /// Runs `f` on every queue's engine: queue 0's here and now, the
    /// others' through their command channels.
    fn on_all(&self, f: impl Fn(&mut Engine) + Clone + Send + 'static) {
        let g = f.clone();
        local::with_engine(&self.rt, 0, move |e| g(e));
        for q in 1..self.rt.queues() {
            let (rt, g) = (self.rt.clone(), f.clone());
            let _ = local::spawn(async move {
                let _ = rt.with_engine(q, move |e| g(e)).await;
            });
        }
    }

    /// Runs the client's timers; sleeps until the next.
    fn timer(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.client.as_ref().and_then(Client::poll_timeout) else {
            self.sleep = None;
            return false;
        };
        let now = self.now();
        if deadline <= now {
            self.sleep = None;
            if let Some(c) = self.client.as_mut() {
                c.handle_timeout(now);
            }
            return true;
        }
        let sleep = match &mut self.sleep {
            Some((at, s)) if *at == deadline => s,
            slot => {
                let d = deadline.saturating_duration_since(now);
                &mut slot.insert((deadline, Box::pin(local::sleep(d)))).1
            }
        };
        if sleep.as_mut().poll(cx).is_ready() {
            self.sleep = None;
            let now = self.now().max(deadline);
            if let Some(c) = self.client.as_mut() {
                c.handle_timeout(now);
            }
            return true;
        }
        false
    }

    /// Publishes queue 0's addresses and the DNS servers, and makes a
    /// resolver of new servers.
    fn publish(&mut self) {
        let Some((v4, v6, ra_dns)) = local::with_engine(&self.rt, 0, |e| {
            let c = e.config();
            (
                c.ipv4.map(|a| (a.addr, a.prefix_len)),
                c.ipv6.map(|a| (a.addr, a.prefix_len)),
                e.dns_servers(),
            )
        }) else {
            return;
        };
        let lease_dns = self
            .client
            .as_ref()
            .and_then(Client::lease)
            .filter(|_| v4.is_some())
            .map(|l| {
                l.dns_servers
                    .iter()
                    .map(|a| IpAddr::V4(*a))
                    .collect::<Vec<IpAddr>>()
            })
            .unwrap_or_default();
        let mut dns = lease_dns;
        for a in ra_dns {
            if !dns.contains(&a) {
                dns.push(a);
            }
        }
        self.rt.inner.net.state.send_if_modified(|s| {
            let new = (v4, v6, &dns);
            if (s.ipv4, s.ipv6, &s.dns) == new {
                return false;
            }
            s.ipv4 = v4;
            s.ipv6 = v6;
            s.dns = dns.clone();
            true
        });
        // Only servers of a family the interface has an address of.
        let usable: Vec<IpAddr> = dns
            .iter()
            .copied()
            .filter(|a| {
                if a.is_ipv4() {
                    v4.is_some()
                } else {
                    v6.is_some()
                }
            })
            .collect();
        if self.auto_dns && !usable.is_empty() && usable != self.dns {
            let servers = usable.iter().map(|a| SocketAddr::new(*a, 53)).collect();
            match crate::Resolver::start(&self.rt, linerate_dns::Config::new(servers)) {
                Ok(r) => {
                    self.rt.set_resolver(r);
                    self.dns = usable;
                }
                Err(e) => tracing::debug!("dhcp: cannot start a resolver: {e}"),
            }
        }
    }
}

/// A lease applied to an engine.
fn apply(e: &mut Engine, l: &Lease) {
    if let Err(err) = e.set_ipv4(l.addr, l.prefix_len) {
        tracing::warn!("dhcp: cannot use {}/{}: {err}", l.addr, l.prefix_len);
        return;
    }
    if let Some(m) = l.mtu {
        let _ = e.set_mtu(m.min(e.config().mtu));
    }
    if let Some(gw) = l.routers.first()
        && let Err(err) = e.set_gateway(IpAddr::V4(*gw))
    {
        tracing::warn!("dhcp: cannot route through {gw}: {err}");
    }
}

/// A lost lease taken off an engine (its address only if the engine still
/// has it; `replaced`: the new lease's `apply` follows).
fn unapply(e: &mut Engine, l: &Lease, replaced: bool) {
    if let Some(gw) = l.routers.first() {
        e.clear_gateway(IpAddr::V4(*gw));
    }
    if !replaced && e.config().ipv4.is_some_and(|c| c.addr == l.addr) {
        e.remove_ipv4();
    }
}
