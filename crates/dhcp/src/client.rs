//! The client state machine of RFC 2131 section 4.4, with the address probe
//! of RFC 5227 before an address is used.
//!
//! ```text
//!  INIT --DISCOVER--> SELECTING --OFFER/REQUEST--> REQUESTING --ACK--> PROBING
//!    ^                                               |  NAK             | no conflict
//!    |<----------------------------------------------+                  v
//!    |<--DECLINE (an ARP conflict), after decline_wait ------------- BOUND
//!    |                                                                 | T1
//!    |<--NAK, or the lease expires---- REBINDING <--T2-- RENEWING <----+
//!                                          \----ACK----> BOUND <--ACK--/
//!
//!  INIT-REBOOT --REQUEST--> REBOOTING --ACK--> PROBING
//!                               | NAK, or no answer after request_attempts
//!                               v
//!                             INIT
//! ```
//!
//! * SELECTING and REQUESTING retransmit with RFC 2131 section 4.1's
//!   backoff: [`Config::retransmit_initial`] doubling up to
//!   [`Config::retransmit_max`], each randomised by up to one second either
//!   way; REQUESTING gives up after [`Config::request_attempts`] and starts
//!   over.
//! * INIT-REBOOT ([`Config::init_reboot`]) asks, by broadcast and without
//!   a server identifier, to keep the address of a lease held before a
//!   restart (RFC 2131 section 3.2); REBOOTING retransmits as REQUESTING
//!   does.
//! * RENEWING (at T1) asks the server that granted the lease, by unicast
//!   from the leased address; REBINDING (at T2) broadcasts. Both retransmit
//!   after half the time left to T2 (to the lease's end), at least
//!   [`Config::min_renew_retransmit`] (RFC 2131 section 4.4.5 says 60 s).
//! * The lease's times count from when the REQUEST that won it was sent
//!   (section 4.4.1). Without options 58 and 59, T1 is half the lease and T2
//!   seven eighths (section 4.4.5).
//! * An address newly assigned is probed first (RFC 5227 section 2.1.1):
//!   [`ArpProbe::count`] ARP probes, then [`ArpProbe::announce_wait`]. An
//!   ARP packet from another host that claims the address, or probes for it
//!   too, is a conflict: the client sends DHCPDECLINE, reports
//!   [`Event::Declined`] and starts over after [`Config::decline_wait`]
//!   (RFC 2131 section 3.1.5 says at least 10 s).
//! * Replies count only with the transaction's `xid` and the client's
//!   hardware address; anything else is dropped and counted.
//!
//! The broadcast bit is set in every broadcast message: the client's host
//! takes no unicast datagram for an address it does not have yet.

use crate::message::{FLAG_BROADCAST, Message, MessageType, OP_REPLY, code};
use crate::time::Instant;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

/// RFC 5227's probe before an address is used (section 2.1.1; the
/// defaults are its constants).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArpProbe {
    /// Probes sent (PROBE_NUM, 3); 0 skips the probe.
    pub count: u32,
    /// Longest random wait before the first (PROBE_WAIT, 1 s).
    pub wait: Duration,
    /// Shortest time between probes (PROBE_MIN, 1 s).
    pub min: Duration,
    /// Longest time between probes (PROBE_MAX, 2 s).
    pub max: Duration,
    /// Time after the last probe before the address is taken
    /// (ANNOUNCE_WAIT, 2 s).
    pub announce_wait: Duration,
}

impl Default for ArpProbe {
    fn default() -> ArpProbe {
        ArpProbe {
            count: 3,
            wait: Duration::from_secs(1),
            min: Duration::from_secs(1),
            max: Duration::from_secs(2),
            announce_wait: Duration::from_secs(2),
        }
    }
}

/// How a [`Client`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The interface's Ethernet address (`chaddr`).
    pub mac: [u8; 6],
    /// Option 61; `None` sends type 1 (Ethernet) and the MAC, as most
    /// clients do.
    pub client_id: Option<Vec<u8>>,
    /// Option 12, if any.
    pub host_name: Option<String>,
    /// An address to ask for in DISCOVER (the last lease's, say).
    pub requested_ip: Option<Ipv4Addr>,
    /// The address of a lease this client held before it restarted, which
    /// may still be valid: the client starts in INIT-REBOOT (RFC 2131
    /// sections 3.2 and 4.3.2) and asks to keep it with a broadcast REQUEST
    /// that names no server. An ACK binds it (after the ARP probe), a NAK
    /// sends the client to INIT, and silence after
    /// [`Config::request_attempts`] tries does too, asking for the address
    /// again in its DISCOVERs.
    pub init_reboot: Option<Ipv4Addr>,
    /// First retransmission timeout of DISCOVER and REQUEST (RFC 2131
    /// section 4.1: 4 s).
    pub retransmit_initial: Duration,
    /// Largest retransmission timeout (64 s).
    pub retransmit_max: Duration,
    /// REQUESTs sent in REQUESTING before the client starts over.
    pub request_attempts: u32,
    /// Shortest time between REQUESTs in RENEWING and REBINDING (60 s).
    pub min_renew_retransmit: Duration,
    /// The ARP probe of a new address.
    pub arp_probe: ArpProbe,
    /// Wait after a DECLINE before starting over (10 s).
    pub decline_wait: Duration,
}

impl Config {
    /// RFC 2131's and RFC 5227's defaults for the interface `mac`.
    pub fn new(mac: [u8; 6]) -> Config {
        Config {
            mac,
            client_id: None,
            host_name: None,
            requested_ip: None,
            init_reboot: None,
            retransmit_initial: Duration::from_secs(4),
            retransmit_max: Duration::from_secs(64),
            request_attempts: 4,
            min_renew_retransmit: Duration::from_secs(60),
            arp_probe: ArpProbe::default(),
            decline_wait: Duration::from_secs(10),
        }
    }

    fn client_id(&self) -> Vec<u8> {
        self.client_id.clone().unwrap_or_else(|| {
            let mut v = vec![1];
            v.extend_from_slice(&self.mac);
            v
        })
    }
}

/// A lease: the address and what came with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The address (`yiaddr`).
    pub addr: Ipv4Addr,
    /// The subnet's prefix length (option 1; without it, the address
    /// class's, RFC 2131 section 2 leaves it to the client).
    pub prefix_len: u8,
    /// The server that granted it (option 54).
    pub server: Ipv4Addr,
    /// Routers (option 3), the first the default gateway.
    pub routers: Vec<Ipv4Addr>,
    /// DNS servers (option 6).
    pub dns_servers: Vec<Ipv4Addr>,
    /// The interface MTU (option 26), if given and at least 68 (RFC 2132
    /// section 5.1's minimum).
    pub mtu: Option<u16>,
    /// The lease's length; `None`: infinite.
    pub lease_time: Option<Duration>,
    /// T1, from `acquired`.
    pub renewal_time: Duration,
    /// T2, from `acquired`.
    pub rebinding_time: Duration,
    /// When the REQUEST that won it was sent: the times count from here.
    pub acquired: Instant,
}

impl Lease {
    /// When the client starts renewing (T1); `None` for an infinite lease.
    pub fn renew_at(&self) -> Option<Instant> {
        self.lease_time.map(|_| self.acquired + self.renewal_time)
    }

    /// When the client starts rebinding (T2).
    pub fn rebind_at(&self) -> Option<Instant> {
        self.lease_time.map(|_| self.acquired + self.rebinding_time)
    }

    /// When the lease ends.
    pub fn expires_at(&self) -> Option<Instant> {
        self.lease_time.map(|l| self.acquired + l)
    }

    /// The lease an ACK grants, if it is one: a unicast `yiaddr`, a server
    /// identifier (or, failing that, `from`) and a lease time.
    fn from_ack(m: &Message, acquired: Instant, server: Ipv4Addr) -> Option<Lease> {
        let o = &m.options;
        let addr = m.yiaddr;
        if !usable(addr) {
            return None;
        }
        let secs = o.lease_time?;
        let lease_time = (secs != u32::MAX).then(|| Duration::from_secs(u64::from(secs)));
        let l = lease_time.unwrap_or(Duration::MAX);
        let mut t1 = o
            .renewal_time
            .map_or(l / 2, |s| Duration::from_secs(u64::from(s)));
        let mut t2 = o
            .rebinding_time
            .map_or(l / 8 * 7, |s| Duration::from_secs(u64::from(s)));
        // Inconsistent times (T1 after T2, T2 after the end): the defaults.
        if t2 > l || t1 > t2 {
            t1 = l / 2;
            t2 = l / 8 * 7;
        }
        let prefix_len = m.prefix_len().unwrap_or(match addr.octets()[0] {
            0..=127 => 8,
            128..=191 => 16,
            _ => 24,
        });
        Some(Lease {
            addr,
            prefix_len,
            server: o.server_id.unwrap_or(server),
            routers: o.routers.iter().copied().filter(|a| usable(*a)).collect(),
            dns_servers: o
                .dns_servers
                .iter()
                .copied()
                .filter(|a| usable(*a))
                .collect(),
            mtu: o.interface_mtu.filter(|&m| m >= 68),
            lease_time,
            renewal_time: t1,
            rebinding_time: t2,
            acquired,
        })
    }
}

/// A unicast address a host may use.
fn usable(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
}

/// Where a client's state machine is (RFC 2131 figure 5's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// About to look for a server.
    Init,
    /// About to ask to keep the address of an earlier lease
    /// ([`Config::init_reboot`]).
    InitReboot,
    /// REQUEST for the earlier address sent, waiting for the ACK or NAK.
    Rebooting,
    /// DISCOVER sent, waiting for an offer.
    Selecting,
    /// REQUEST sent for an offer, waiting for the ACK.
    Requesting,
    /// ACKed: probing the address with ARP before using it.
    Probing,
    /// The lease is in use.
    Bound,
    /// Past T1: asking the server to extend the lease.
    Renewing,
    /// Past T2: asking any server to extend it.
    Rebinding,
    /// Released ([`Client::release`]): the client does nothing more.
    Stopped,
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// It expired before a server extended it.
    Expired,
    /// A server refused to extend it (DHCPNAK).
    Nak,
    /// The client gave it up ([`Client::release`]).
    Released,
    /// The server extended the lease with another address.
    Replaced,
}

/// What the application is told, from [`Client::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A lease is in use from now on: configure its address, route, DNS
    /// servers and MTU.
    Bound(Lease),
    /// The lease in use was extended (same address; times, and perhaps
    /// options, new).
    Renewed(Lease),
    /// The lease is no longer to be used: remove its address.
    Lost {
        /// The lease.
        lease: Lease,
        /// Why.
        reason: LostReason,
    },
    /// An offered address was found in use by another host and declined.
    Declined {
        /// The address.
        addr: Ipv4Addr,
        /// The host that claimed it.
        by: [u8; 6],
    },
}

/// A datagram to send from port 68 to port 67.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The source address: 0.0.0.0 until the client has a lease.
    pub src: Ipv4Addr,
    /// The destination: 255.255.255.255, or the server's address.
    pub dst: Ipv4Addr,
    /// The DHCP message.
    pub data: Vec<u8>,
}

/// What the driver does next, from [`Client::poll_io`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Io {
    /// Send a DHCP message.
    Send(Transmit),
    /// Send an ARP probe for `target` (RFC 5227 section 2.1.1: a broadcast
    /// request, sender protocol address 0.0.0.0) and pass every ARP packet
    /// seen to [`Client::handle_arp`] until the client leaves PROBING.
    ArpProbe {
        /// The address probed.
        target: Ipv4Addr,
    },
}

/// Counters, like a kernel's `netstat -s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// DISCOVERs sent.
    pub discovers: u64,
    /// OFFERs taken.
    pub offers: u64,
    /// REQUESTs sent (selecting, renewing and rebinding).
    pub requests: u64,
    /// ACKs taken.
    pub acks: u64,
    /// NAKs taken.
    pub naks: u64,
    /// DECLINEs sent.
    pub declines: u64,
    /// RELEASEs sent.
    pub releases: u64,
    /// ARP probes asked for.
    pub probes: u64,
    /// Leases extended by RENEWING.
    pub renewals: u64,
    /// Leases extended by REBINDING.
    pub rebinds: u64,
    /// Leases that expired.
    pub expiries: u64,
    /// Datagrams that did not parse.
    pub malformed: u64,
    /// Datagrams that parsed but were not for this client's transaction,
    /// or not expected in its state.
    pub ignored: u64,
}

/// An offer being requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Offer {
    addr: Ipv4Addr,
    server: Ipv4Addr,
}

/// A small generator for transaction IDs and jitter (SplitMix64): the
/// `xid` only has to differ between clients and transactions, it defends
/// nothing (any host on the link sees it).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A duration in `[0, d]`.
    fn upto(&mut self, d: Duration) -> Duration {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.next_u64() % ns.saturating_add(1).max(1))
    }
}

/// The sans-IO DHCPv4 client (see the [module docs](self)).
#[derive(Debug, Clone)]
pub struct Client {
    cfg: Config,
    rng: Rng,
    state: State,
    /// When `handle_timeout` next has work.
    timer: Option<Instant>,
    xid: u32,
    /// When the transaction began (`secs`).
    began: Instant,
    /// Messages sent in this state (for the backoff and the give-up).
    tries: u32,
    /// When the last REQUEST was sent (a lease counts from it).
    requested_at: Instant,
    offer: Option<Offer>,
    /// The address DISCOVER asks for (option 50).
    requested: Option<Ipv4Addr>,
    /// The lease in use (BOUND, RENEWING, REBINDING) or being probed.
    lease: Option<Lease>,
    io: VecDeque<Io>,
    events: VecDeque<Event>,
    stats: Stats,
}

impl Client {
    /// A client in INIT whose first DISCOVER goes at the first
    /// [`Client::handle_timeout`] (its [`Client::poll_timeout`] is the
    /// epoch). `seed` makes its transaction IDs and jitter; give each client
    /// its own.
    pub fn new(cfg: Config, seed: u64) -> Client {
        let mut rng = Rng(seed ^ u64::from_be_bytes([0, 0, 0x44, 0x48, 0x43, 0x50, 0x76, 0x34]));
        let xid = rng.next_u64() as u32;
        let state = match cfg.init_reboot {
            Some(a) if usable(a) => State::InitReboot,
            _ => State::Init,
        };
        let requested = cfg.requested_ip;
        Client {
            cfg,
            rng,
            state,
            timer: Some(Instant::ZERO),
            xid,
            began: Instant::ZERO,
            tries: 0,
            requested_at: Instant::ZERO,
            offer: None,
            requested,
            lease: None,
            io: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
        }
    }

    /// The state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The lease in use (or being probed), if any.
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// When to call [`Client::handle_timeout`] next, if ever.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timer
    }

    /// The next thing to send.
    pub fn poll_io(&mut self) -> Option<Io> {
        self.io.pop_front()
    }

    /// The next thing to tell the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The retransmission timeout after `tries` messages: the initial one
    /// doubled per try up to the largest, plus or minus up to one second.
    fn backoff(&mut self, tries: u32) -> Duration {
        let shift = tries.saturating_sub(1).min(16);
        let base = self
            .cfg
            .retransmit_initial
            .saturating_mul(1 << shift)
            .min(self.cfg.retransmit_max);
        let jitter = self.rng.upto(Duration::from_secs(2));
        (base + jitter)
            .saturating_sub(Duration::from_secs(1))
            .max(base / 2)
    }

    fn secs(&self, now: Instant) -> u16 {
        u16::try_from(now.saturating_duration_since(self.began).as_secs()).unwrap_or(u16::MAX)
    }

    /// A client message of `kind` in the current transaction.
    fn message(&self, now: Instant, kind: MessageType) -> Message {
        let mut m = Message::client(kind, self.xid, self.cfg.mac);
        m.secs = self.secs(now);
        m.options.client_id = Some(self.cfg.client_id());
        if matches!(
            kind,
            MessageType::Discover | MessageType::Request | MessageType::Inform
        ) {
            m.options.parameter_list = vec![
                code::SUBNET_MASK,
                code::ROUTER,
                code::DNS_SERVER,
                code::INTERFACE_MTU,
                code::LEASE_TIME,
                code::RENEWAL_TIME,
                code::REBINDING_TIME,
            ];
            m.options.max_message_size = Some(1500);
            m.options.host_name = self.cfg.host_name.as_ref().map(|h| h.as_bytes().to_vec());
        }
        m
    }

    fn send(&mut self, src: Ipv4Addr, dst: Ipv4Addr, m: &Message) {
        self.io.push_back(Io::Send(Transmit {
            src,
            dst,
            data: m.emit(),
        }));
    }

    fn broadcast(&mut self, m: &Message) {
        self.send(Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST, m);
    }

    fn new_transaction(&mut self, now: Instant) {
        self.xid = self.rng.next_u64() as u32;
        self.began = now;
        self.tries = 0;
    }

    fn send_discover(&mut self, now: Instant) {
        let mut m = self.message(now, MessageType::Discover);
        m.flags = FLAG_BROADCAST;
        m.options.requested_ip = self.requested;
        self.broadcast(&m);
        self.stats.discovers += 1;
        self.tries += 1;
        let rto = self.backoff(self.tries);
        self.timer = Some(now + rto);
    }

    fn send_select_request(&mut self, now: Instant) {
        let Some(offer) = self.offer else { return };
        let mut m = self.message(now, MessageType::Request);
        m.flags = FLAG_BROADCAST;
        m.options.requested_ip = Some(offer.addr);
        m.options.server_id = Some(offer.server);
        self.broadcast(&m);
        self.stats.requests += 1;
        self.requested_at = now;
        self.tries += 1;
        let rto = self.backoff(self.tries);
        self.timer = Some(now + rto);
    }

    /// The INIT-REBOOT REQUEST (RFC 2131 section 4.3.2): broadcast, the
    /// earlier address in option 50, no server identifier, `ciaddr` zero.
    fn send_reboot_request(&mut self, now: Instant) {
        let Some(addr) = self.cfg.init_reboot else {
            return;
        };
        let mut m = self.message(now, MessageType::Request);
        m.flags = FLAG_BROADCAST;
        m.options.requested_ip = Some(addr);
        self.broadcast(&m);
        self.stats.requests += 1;
        self.requested_at = now;
        self.tries += 1;
        let rto = self.backoff(self.tries);
        self.timer = Some(now + rto);
    }

    /// A REQUEST to extend the lease: unicast to its server (RENEWING) or
    /// broadcast (REBINDING), `ciaddr` the leased address, and the next try
    /// after half the time left to `until`, at least the configured minimum,
    /// and not after `until`.
    fn send_extend_request(&mut self, now: Instant, until: Instant) {
        let Some(lease) = &self.lease else { return };
        let (addr, server) = (lease.addr, lease.server);
        let mut m = self.message(now, MessageType::Request);
        m.ciaddr = addr;
        if self.state == State::Renewing {
            self.send(addr, server, &m);
        } else {
            self.send(addr, Ipv4Addr::BROADCAST, &m);
        }
        self.stats.requests += 1;
        self.requested_at = now;
        let half = until.saturating_duration_since(now) / 2;
        let next = now + half.max(self.cfg.min_renew_retransmit);
        self.timer = Some(next.min(until));
    }

    /// Runs what is due at `now`: (re)transmissions, probes, T1, T2, expiry.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.timer.is_none_or(|t| t > now) {
            return;
        }
        match self.state {
            State::Init => {
                self.new_transaction(now);
                self.state = State::Selecting;
                self.send_discover(now);
            }
            State::Selecting => self.send_discover(now),
            State::InitReboot => {
                self.new_transaction(now);
                self.state = State::Rebooting;
                self.send_reboot_request(now);
            }
            State::Rebooting => {
                if self.tries >= self.cfg.request_attempts {
                    // No server answered for the earlier address: look for
                    // one, asking for it again.
                    if self.requested.is_none() {
                        self.requested = self.cfg.init_reboot;
                    }
                    self.restart(now, Duration::ZERO);
                    self.handle_timeout(now);
                } else {
                    self.send_reboot_request(now);
                }
            }
            State::Requesting => {
                if self.tries >= self.cfg.request_attempts {
                    self.restart(now, Duration::ZERO);
                    self.handle_timeout(now);
                } else {
                    self.send_select_request(now);
                }
            }
            State::Probing => self.probe_step(now),
            State::Bound | State::Renewing | State::Rebinding => self.lease_step(now),
            State::Stopped => self.timer = None,
        }
    }

    /// Back to INIT, the next DISCOVER after `wait`.
    fn restart(&mut self, now: Instant, wait: Duration) {
        self.state = State::Init;
        self.offer = None;
        self.lease = None;
        self.timer = Some(now + wait);
    }

    /// PROBING at its timer: the next probe, or, after the last one and
    /// ANNOUNCE_WAIT, the address is ours.
    fn probe_step(&mut self, now: Instant) {
        let Some(lease) = &self.lease else {
            self.restart(now, Duration::ZERO);
            return;
        };
        let target = lease.addr;
        let p = self.cfg.arp_probe.clone();
        if self.tries < p.count {
            self.io.push_back(Io::ArpProbe { target });
            self.stats.probes += 1;
            self.tries += 1;
            let wait = if self.tries == p.count {
                p.announce_wait
            } else {
                p.min + self.rng.upto(p.max.saturating_sub(p.min))
            };
            self.timer = Some(now + wait);
            return;
        }
        self.bind(now);
    }

    /// An ACKed lease: probed with ARP before it is used (RFC 5227).
    fn probe(&mut self, now: Instant, lease: Lease) {
        self.lease = Some(lease);
        self.state = State::Probing;
        self.tries = 0;
        if self.cfg.arp_probe.count == 0 {
            self.bind(now);
        } else {
            let wait = self.rng.upto(self.cfg.arp_probe.wait);
            self.timer = Some(now + wait);
        }
    }

    /// The probed lease goes into use.
    fn bind(&mut self, now: Instant) {
        let Some(lease) = self.lease.clone() else {
            return;
        };
        self.state = State::Bound;
        self.timer = lease.renew_at().map(|t| t.max(now));
        self.events.push_back(Event::Bound(lease));
    }

    /// BOUND, RENEWING or REBINDING at its timer.
    fn lease_step(&mut self, now: Instant) {
        let Some(lease) = &self.lease else {
            self.restart(now, Duration::ZERO);
            return;
        };
        let (Some(t1), Some(t2), Some(end)) =
            (lease.renew_at(), lease.rebind_at(), lease.expires_at())
        else {
            // Infinite: nothing to do, ever.
            self.timer = None;
            return;
        };
        if now >= end {
            self.stats.expiries += 1;
            if let Some(lease) = self.lease.take() {
                self.events.push_back(Event::Lost {
                    lease,
                    reason: LostReason::Expired,
                });
            }
            self.restart(now, Duration::ZERO);
            self.handle_timeout(now);
            return;
        }
        if now >= t2 {
            if self.state != State::Rebinding {
                self.state = State::Rebinding;
                self.new_transaction(now);
            }
            self.send_extend_request(now, end);
        } else if now >= t1 {
            if self.state != State::Renewing {
                self.state = State::Renewing;
                self.new_transaction(now);
            }
            self.send_extend_request(now, t2);
        } else {
            self.timer = Some(t1);
        }
    }

    /// A datagram received on port 68.
    pub fn handle_message(&mut self, now: Instant, data: &[u8]) {
        let m = match Message::parse(data) {
            Ok(m) => m,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        if m.op != OP_REPLY || m.xid != self.xid || m.chaddr.get(..6) != Some(&self.cfg.mac[..]) {
            self.stats.ignored += 1;
            return;
        }
        match (self.state, m.kind()) {
            (State::Selecting, Some(MessageType::Offer)) => {
                let Some(server) = m.options.server_id.filter(|a| usable(*a)) else {
                    self.stats.ignored += 1;
                    return;
                };
                if !usable(m.yiaddr) {
                    self.stats.ignored += 1;
                    return;
                }
                self.stats.offers += 1;
                self.offer = Some(Offer {
                    addr: m.yiaddr,
                    server,
                });
                self.state = State::Requesting;
                self.tries = 0;
                self.send_select_request(now);
            }
            (State::Requesting, Some(MessageType::Ack)) => {
                let Some(offer) = self.offer else { return };
                // The ACK of another server than the one chosen: not ours.
                if m.options.server_id.is_some_and(|s| s != offer.server) {
                    self.stats.ignored += 1;
                    return;
                }
                let Some(lease) = Lease::from_ack(&m, self.requested_at, offer.server) else {
                    self.stats.ignored += 1;
                    return;
                };
                self.stats.acks += 1;
                self.probe(now, lease);
            }
            (State::Rebooting, Some(MessageType::Ack)) => {
                // Any server may answer: the ACK names it.
                let Some(server) = m.options.server_id.filter(|a| usable(*a)) else {
                    self.stats.ignored += 1;
                    return;
                };
                let Some(lease) = Lease::from_ack(&m, self.requested_at, server) else {
                    self.stats.ignored += 1;
                    return;
                };
                self.stats.acks += 1;
                self.offer = Some(Offer {
                    addr: lease.addr,
                    server,
                });
                self.probe(now, lease);
            }
            (State::Renewing | State::Rebinding, Some(MessageType::Ack)) => {
                let Some(old) = self.lease.clone() else {
                    return;
                };
                let Some(lease) = Lease::from_ack(&m, self.requested_at, old.server) else {
                    self.stats.ignored += 1;
                    return;
                };
                self.stats.acks += 1;
                if self.state == State::Renewing {
                    self.stats.renewals += 1;
                } else {
                    self.stats.rebinds += 1;
                }
                self.state = State::Bound;
                self.timer = lease.renew_at().map(|t| t.max(now));
                self.lease = Some(lease.clone());
                if lease.addr == old.addr {
                    self.events.push_back(Event::Renewed(lease));
                } else {
                    self.events.push_back(Event::Lost {
                        lease: old,
                        reason: LostReason::Replaced,
                    });
                    self.events.push_back(Event::Bound(lease));
                }
            }
            (State::Requesting, Some(MessageType::Nak)) => {
                if m.options
                    .server_id
                    .is_some_and(|s| Some(s) != self.offer.map(|o| o.server))
                {
                    self.stats.ignored += 1;
                    return;
                }
                self.stats.naks += 1;
                self.restart(now, Duration::ZERO);
            }
            (State::Rebooting, Some(MessageType::Nak)) => {
                // The earlier address is wrong for this network (RFC 2131
                // section 3.2 step 3): start over without it.
                self.stats.naks += 1;
                if self.requested == self.cfg.init_reboot {
                    self.requested = None;
                }
                self.restart(now, Duration::ZERO);
            }
            (State::Renewing | State::Rebinding, Some(MessageType::Nak)) => {
                self.stats.naks += 1;
                if let Some(lease) = self.lease.take() {
                    self.events.push_back(Event::Lost {
                        lease,
                        reason: LostReason::Nak,
                    });
                }
                self.restart(now, Duration::ZERO);
            }
            _ => self.stats.ignored += 1,
        }
    }

    /// An ARP packet seen on the link: sender hardware and protocol
    /// addresses and target protocol address. While PROBING, one from
    /// another host that has the probed address as its sender, or probes for
    /// it (sender 0.0.0.0, RFC 5227 section 2.1.1), is a conflict: the
    /// client declines the address. Ignored in every other state.
    pub fn handle_arp(&mut self, now: Instant, sha: [u8; 6], spa: Ipv4Addr, tpa: Ipv4Addr) {
        if self.state != State::Probing || sha == self.cfg.mac {
            return;
        }
        let Some(lease) = &self.lease else { return };
        let addr = lease.addr;
        let server = lease.server;
        let conflict = spa == addr || (spa.is_unspecified() && tpa == addr);
        if !conflict {
            return;
        }
        let mut m = self.message(now, MessageType::Decline);
        m.options.requested_ip = Some(addr);
        m.options.server_id = Some(server);
        self.broadcast(&m);
        self.stats.declines += 1;
        self.events.push_back(Event::Declined { addr, by: sha });
        let wait = self.cfg.decline_wait;
        self.restart(now, wait);
    }

    /// Gives the lease up (RFC 2131 section 4.4.6): a DHCPRELEASE to its
    /// server, [`Event::Lost`] with [`LostReason::Released`], and the client
    /// stops (STOPPED). Without a lease in use it just stops.
    pub fn release(&mut self, now: Instant) {
        let in_use = matches!(
            self.state,
            State::Bound | State::Renewing | State::Rebinding
        );
        if let (true, Some(lease)) = (in_use, self.lease.take()) {
            self.new_transaction(now);
            let mut m = self.message(now, MessageType::Release);
            m.ciaddr = lease.addr;
            m.options.server_id = Some(lease.server);
            self.send(lease.addr, lease.server, &m);
            self.stats.releases += 1;
            self.events.push_back(Event::Lost {
                lease,
                reason: LostReason::Released,
            });
        }
        self.lease = None;
        self.offer = None;
        self.state = State::Stopped;
        self.timer = None;
    }
}
