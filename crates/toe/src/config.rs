//! Engine configuration: the interfaces (MAC, addresses, MTU; offloads), TCP and
//! UDP defaults, ICMP error rate and path MTU cache bounds.
//!
//! Interface 0 is [`Config::mac`], [`Config::ipv4`], [`Config::ipv6`] and
//! [`Config::mtu`]; an engine with further uplinks lists them in
//! [`Config::interfaces`] (interface 1, 2, ...), as a Linux host has eth0 and
//! eth1. Routes name their output interface with [`Route::dev`].

pub use crate::tcp::cc::CongestionControl;
pub use route::{MAX_ROUTES, NextHop, Route, RouteError, RouteKind, RouteTable};

mod route;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

/// An IPv4 address with its prefix length (the on-link subnet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Cidr {
    /// The interface's address.
    pub addr: Ipv4Addr,
    /// Prefix length, 0 to 32.
    pub prefix_len: u8,
}

impl Ipv4Cidr {
    /// `addr/prefix_len`.
    pub const fn new(addr: Ipv4Addr, prefix_len: u8) -> Ipv4Cidr {
        Ipv4Cidr { addr, prefix_len }
    }

    fn mask(&self) -> u32 {
        match self.prefix_len {
            0 => 0,
            n => u32::MAX << (32 - u32::from(n.min(32))),
        }
    }

    /// True if `ip` is in the subnet.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        (u32::from(ip) ^ u32::from(self.addr)) & self.mask() == 0
    }

    /// The subnet's directed broadcast address.
    pub fn broadcast(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.addr) | !self.mask())
    }
}

/// An IPv6 address with its prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Cidr {
    /// The interface's address.
    pub addr: Ipv6Addr,
    /// Prefix length, 0 to 128.
    pub prefix_len: u8,
}

impl Ipv6Cidr {
    /// `addr/prefix_len`.
    pub const fn new(addr: Ipv6Addr, prefix_len: u8) -> Ipv6Cidr {
        Ipv6Cidr { addr, prefix_len }
    }
}

/// Interfaces an engine has at most: interface 0 and
/// [`Config::interfaces`] together.
pub const MAX_INTERFACES: usize = 16;

/// A further interface of the engine (interface 1, 2, ... in
/// [`Config::interfaces`]): its own Ethernet address, addresses and MTU, as a
/// second NIC of a Linux host. Frames leave it with its MAC as their source
/// (which is how a [`linerate_nic::ports::Ports`] adaptor sends each out of
/// its port), its prefixes are on-link routes on it, and ARP requests and
/// neighbour solicitations for its addresses are answered on it only.
/// DHCP, SLAAC and multicast stay on interface 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// The interface's Ethernet address (unique among the engine's).
    pub mac: [u8; 6],
    /// IPv4 address and subnet, if any.
    pub ipv4: Option<Ipv4Cidr>,
    /// IPv6 address and prefix, if any.
    pub ipv6: Option<Ipv6Cidr>,
    /// IP MTU of its link.
    pub mtu: u16,
}

impl Interface {
    /// An interface with `mac` and no addresses, MTU 1500.
    pub fn new(mac: [u8; 6]) -> Interface {
        Interface {
            mac,
            ipv4: None,
            ipv6: None,
            mtu: 1500,
        }
    }

    /// Sets the IPv4 address.
    pub fn with_ipv4(mut self, addr: Ipv4Addr, prefix_len: u8) -> Interface {
        self.ipv4 = Some(Ipv4Cidr::new(addr, prefix_len));
        self
    }

    /// Sets the IPv6 address.
    pub fn with_ipv6(mut self, addr: Ipv6Addr, prefix_len: u8) -> Interface {
        self.ipv6 = Some(Ipv6Cidr::new(addr, prefix_len));
        self
    }

    /// Sets the MTU.
    pub fn with_mtu(mut self, mtu: u16) -> Interface {
        self.mtu = mtu;
        self
    }
}

/// TCP defaults for every connection of an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct TcpConfig {
    /// Send buffer bytes per connection.
    pub send_buffer: usize,
    /// Receive buffer bytes per connection, at most: the largest window
    /// advertised, and the one the window scale is chosen for (RFC 7323 section
    /// 2.3). With [`TcpConfig::recv_autotune`] the buffer starts at
    /// [`TcpConfig::recv_buffer_initial`] and grows up to this; otherwise it is
    /// this from the start.
    pub recv_buffer: usize,
    /// Receive buffer bytes a connection starts with when
    /// [`TcpConfig::recv_autotune`] is on (Linux's effective initial window
    /// from `tcp_rmem[1]`, 64 KiB). Raised to 4 KiB, and to four units of the
    /// window scale, if smaller; at or above [`TcpConfig::recv_buffer`]
    /// auto-tuning is off and the buffer is `recv_buffer`.
    pub recv_buffer_initial: usize,
    /// Receive-window auto-tuning (dynamic right-sizing, Linux's
    /// `tcp_moderate_rcvbuf`): the receive buffer grows, from
    /// [`TcpConfig::recv_buffer_initial`] up to [`TcpConfig::recv_buffer`], to
    /// about twice what the application reads per round trip, so a reader that
    /// keeps up gets the window a long path needs, and one that does not read
    /// keeps a small buffer. The buffer never shrinks (nor does the window
    /// advertised). Off: every connection has `recv_buffer` from the start.
    /// Growths are counted in `tcp_rcvbuf_grown`.
    pub recv_autotune: bool,
    /// Disable Nagle's algorithm (RFC 9293 section 3.7.4), like `TCP_NODELAY`.
    pub no_delay: bool,
    /// Offer window scaling (RFC 7323 section 2).
    pub window_scaling: bool,
    /// Offer SACK (RFC 2018).
    pub sack: bool,
    /// Offer timestamps (RFC 7323 section 3).
    pub timestamps: bool,
    /// Explicit Congestion Notification (RFC 3168, [`crate::tcp::ecn`]): off,
    /// on when the peer asks (the default, as Linux's `tcp_ecn=2`), or asked
    /// for on active opens too.
    pub ecn: crate::tcp::EcnMode,
    /// Congestion control.
    pub congestion_control: CongestionControl,
    /// Lower bound of the RTO (RFC 6298 says 1 s; Linux uses 200 ms).
    pub min_rto: Duration,
    /// Upper bound of the RTO (at least 60 s per RFC 6298 section 2.5).
    pub max_rto: Duration,
    /// Retransmissions of one segment before the connection is abandoned
    /// (RFC 9293 section 3.8.3's R2, counted in retransmissions).
    pub max_retries: u32,
    /// Retransmissions of a SYN before a connect fails.
    pub syn_retries: u32,
    /// Delayed ACK timeout (RFC 9293 section 3.8.6.3: under 0.5 s).
    pub delayed_ack: Duration,
    /// Maximum segment lifetime; TIME-WAIT lasts twice this (RFC 9293 section 3.4.2).
    pub msl: Duration,
    /// Connections waiting in a listener's accept queue, at most. Also the size
    /// of its SYN queue: connections in SYN-RECEIVED and accepted-not-taken ones
    /// together stay below it.
    pub backlog: usize,
    /// Answer SYNs with SYN cookies (RFC 4987 section 3.6) when a listener's SYN
    /// queue is full, instead of dropping them. See `tcp::cookie` for what a
    /// cookie connection loses.
    pub syn_cookies: bool,
    /// Challenge ACKs (RFC 5961 sections 3 to 5) the engine sends per second of
    /// its clock, over all connections (RFC 5961 section 7; Linux's
    /// `tcp_challenge_ack_limit` was 1000). Those over the limit are counted in
    /// `tcp_challenge_acks_suppressed` and not sent.
    pub challenge_ack_limit: u32,
    /// Out-of-order bytes held over all connections, at most (each connection is
    /// also bounded by its receive buffer). Past it, segments that arrive ahead of
    /// RCV.NXT are dropped and counted in `tcp_ofo_dropped` (only acknowledged,
    /// so SACK still tells the peer what is missing); in-order data is always
    /// taken. Linux bounds the same memory through `tcp_mem` pressure.
    ///
    /// A soft bound: a segment is taken whole when the bytes held are below
    /// the limit as it arrives, so the total can exceed the limit by less than
    /// one segment's payload (a GRO super-segment's, up to 64 KiB), never more;
    /// after that nothing out of order is taken until the total falls below
    /// the limit again (`tests/it/behaviour_ofo.rs`).
    pub ofo_total: usize,
}

impl Default for TcpConfig {
    fn default() -> TcpConfig {
        TcpConfig {
            send_buffer: 512 * 1024,
            recv_buffer: 512 * 1024,
            recv_buffer_initial: 64 * 1024,
            recv_autotune: true,
            no_delay: false,
            window_scaling: true,
            sack: true,
            timestamps: true,
            ecn: crate::tcp::EcnMode::Passive,
            congestion_control: CongestionControl::Cubic,
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            max_retries: 15,
            syn_retries: 6,
            delayed_ack: Duration::from_millis(40),
            msl: Duration::from_secs(30),
            backlog: 128,
            syn_cookies: true,
            challenge_ack_limit: 1000,
            ofo_total: 64 << 20,
        }
    }
}

/// UDP socket defaults for every socket of an engine.
#[derive(Debug, Clone, PartialEq)]
pub struct UdpConfig {
    /// Payload bytes a socket's receive queue holds; datagrams that do not fit
    /// are dropped and counted (`udp_rcvbuf_errors`).
    pub recv_buffer: usize,
    /// Datagrams a socket's receive queue holds at most, whatever their size.
    pub recv_datagrams: usize,
    /// Payload bytes a socket may have queued for transmission; a send that does
    /// not fit is refused with [`crate::UdpSendError::WouldBlock`].
    pub send_buffer: usize,
}

impl Default for UdpConfig {
    fn default() -> UdpConfig {
        UdpConfig {
            recv_buffer: 256 * 1024,
            recv_datagrams: 1024,
            send_buffer: 256 * 1024,
        }
    }
}

/// IP fragmentation and reassembly ([`Config::fragments`]; see the crate
/// docs, "Fragments", and [`crate::frag`]).
///
/// The bounds are Linux's (`net/ipv4/inet_fragment.c`): a memory budget with a
/// high and a low threshold (`ipfrag_high_thresh`, `ipfrag_low_thresh`), here
/// one per engine for both families; the reassembly timeouts `ipfrag_time`
/// (30 s) and `ip6frag_time` (60 s, RFC 8200 section 4.5). The per-source
/// share and the fragment count per datagram are linerate's own (FreeBSD
/// bounds the latter with `maxfragsperpacket`).
#[derive(Debug, Clone, PartialEq)]
pub struct FragConfig {
    /// Reassemble received fragments and fragment UDP datagrams larger than
    /// the path MTU (for sockets that allow it). Off by default: every
    /// fragment is dropped and counted (`ip_in_fragments_dropped`) and a UDP
    /// datagram must fit the path MTU, as before reassembly existed. The
    /// default suits the TCP appliance linerate is first built for: TCP never
    /// needs fragments (it keeps DF and clamps its MSS), and reassembly is
    /// memory held for peers that may never complete a datagram. A host that
    /// serves UDP protocols with large datagrams (DNS with EDNS, which
    /// RFC 1122 section 3.3.2 and RFC 8200 section 5 expect every host to
    /// reassemble) turns it on.
    pub enabled: bool,
    /// Bytes all datagrams being reassembled may hold (their buffers, the
    /// pooled spare buffers and a fixed cost per datagram). A fragment that
    /// would take the total past this evicts the oldest datagrams until the
    /// total is at most [`FragConfig::low_thresh`]. Linux's default, 4 MiB.
    pub high_thresh: usize,
    /// What eviction brings the total down to (Linux's default, 3 MiB).
    pub low_thresh: usize,
    /// Bytes the datagrams from one source address may hold together: a
    /// fragment that would take its source past this drops the datagram it
    /// belongs to, so that one sender cannot take the whole budget.
    pub per_source: usize,
    /// Fragments one datagram may be made of; one more drops it. A
    /// 65,535-byte datagram over a 1,280-byte MTU takes 52.
    pub max_fragments: usize,
    /// How long an IPv4 datagram may take to complete (Linux's `ipfrag_time`;
    /// RFC 791 suggests 15 s as the initial timer).
    pub timeout_v4: Duration,
    /// How long an IPv6 datagram may take to complete (RFC 8200 section 4.5:
    /// 60 s).
    pub timeout_v6: Duration,
}

impl Default for FragConfig {
    fn default() -> FragConfig {
        FragConfig {
            enabled: false,
            high_thresh: 4 << 20,
            low_thresh: 3 << 20,
            per_source: 1 << 20,
            max_fragments: 64,
            timeout_v4: Duration::from_secs(30),
            timeout_v6: Duration::from_secs(60),
        }
    }
}

/// The interfaces and engine configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Interface 0's Ethernet address.
    pub mac: [u8; 6],
    /// IPv4 address and subnet, if any.
    pub ipv4: Option<Ipv4Cidr>,
    /// IPv6 address and prefix, if any.
    pub ipv6: Option<Ipv6Cidr>,
    /// IP MTU (bytes of IP datagram per frame, without the Ethernet header).
    pub mtu: u16,
    /// Emit TCP super-segments (up to 64 KiB) with a GSO request and a partial
    /// checksum for the NIC layer to complete; off: MSS-sized segments with full
    /// checksums.
    pub offloads: bool,
    /// How long a resolved neighbour (ARP or NDP) stays valid.
    pub neighbor_ttl: Duration,
    /// Time between ARP requests / neighbour solicitations while resolving.
    pub neighbor_retry: Duration,
    /// Requests sent before a resolution fails and its queued frames are dropped.
    pub neighbor_probes: u32,
    /// Frames queued per neighbour while it is being resolved.
    pub neighbor_queue: usize,
    /// Addresses the neighbour table holds at most (resolved or being
    /// resolved; Linux's `gc_thresh3`). A full table sweeps out expired entries
    /// (at most once per `neighbor_retry`) and otherwise refuses new addresses:
    /// counted in `neighbor_table_full`, their frames in `neighbor_drops`
    /// (but an address this host needs replaces one only learned from a peer's
    /// request and never sent to). At least 1.
    pub neighbor_max: usize,
    /// Gratuitous ARP announcements of the IPv4 address when the engine starts
    /// (RFC 5227 section 3: ANNOUNCE_NUM is 2), [`Config::announce_interval`]
    /// apart: ARP requests with sender and target protocol address both ours,
    /// broadcast, so neighbours that cached another MAC for it update theirs.
    /// The first goes out with the first `poll_transmit`, the others by the
    /// engine's timer. With an IPv6 address, the first round also sends one
    /// unsolicited neighbour advertisement (RFC 4861 section 7.2.6, override
    /// set, to ff02::1). Counted in `arp_announcements_out` and
    /// `ndp_unsolicited_adverts_out`. 0: none (for tests that count frames).
    pub announcements: u32,
    /// Time between gratuitous ARP announcements (RFC 5227's
    /// ANNOUNCE_INTERVAL, 2 s). Zero sends them all at once.
    pub announce_interval: Duration,
    /// TCP defaults.
    pub tcp: TcpConfig,
    /// UDP defaults.
    pub udp: UdpConfig,
    /// ICMP errors (port unreachable) the engine sends per second, on average: a
    /// token bucket refilled at this rate (Linux's `icmp_msgs_per_sec`).
    pub icmp_error_rate: u32,
    /// The token bucket's depth: errors sent back to back at most (Linux's
    /// `icmp_msgs_burst`).
    pub icmp_error_burst: u32,
    /// How long a path MTU learnt from ICMP stays valid (RFC 1191 section 6.3
    /// and RFC 8201 section 5.3 suggest 10 minutes, as Linux's `mtu_expires`).
    pub pmtu_expiry: Duration,
    /// Destinations the path MTU cache holds; the one expiring first makes room.
    pub pmtu_entries: usize,
    /// IP fragmentation and reassembly (off by default: see
    /// [`FragConfig::enabled`]).
    pub fragments: FragConfig,
    /// The routing table, besides the prefixes of [`Config::ipv4`] and
    /// [`Config::ipv6`], which are on-link routes of their own (see
    /// [`route`](RouteTable)). By default one on-link default route per family:
    /// every destination is resolved on the link, as on a flat network.
    /// [`Config::with_gateway`] replaces a family's default route with one
    /// through a gateway.
    pub routes: Vec<Route>,
    /// Take an IPv4 address from the network by DHCP (off by default): the
    /// engine passes UDP datagrams to port 68 and the ARP packets a probe
    /// watches to a DHCP client (`linerate-dhcp`, which `linerate-rt` runs),
    /// and sends its messages, before it has an address of its own (see
    /// `Engine::dhcp_send`). [`Config::ipv4`] may stay `None`.
    pub dhcp: bool,
    /// Form IPv6 addresses from router advertisements (RFC 4862 SLAAC, off
    /// by default): a link-local address, router solicitations, an address
    /// per advertised prefix after duplicate address detection, the default
    /// router and RFC 8106 DNS servers (see `Engine::slaac_state`).
    /// [`Config::ipv6`] may stay `None`.
    pub slaac: bool,
    /// Interfaces besides interface 0 (empty by default): interface 1 is the
    /// first. See [`Interface`]; [`Config::with_interface`] adds one.
    pub interfaces: Vec<Interface>,
}

impl Config {
    /// An interface with `mac` and no addresses, MTU 1500, offloads on.
    pub fn new(mac: [u8; 6]) -> Config {
        Config {
            mac,
            ipv4: None,
            ipv6: None,
            mtu: 1500,
            offloads: true,
            neighbor_ttl: Duration::from_secs(60),
            neighbor_retry: Duration::from_secs(1),
            neighbor_probes: 3,
            neighbor_queue: 64,
            neighbor_max: 1024,
            announcements: 2,
            announce_interval: Duration::from_secs(2),
            tcp: TcpConfig::default(),
            udp: UdpConfig::default(),
            icmp_error_rate: 1000,
            icmp_error_burst: 50,
            pmtu_expiry: Duration::from_secs(600),
            pmtu_entries: 256,
            fragments: FragConfig::default(),
            routes: vec![
                Route::default_for(false, RouteKind::OnLink),
                Route::default_for(true, RouteKind::OnLink),
            ],
            dhcp: false,
            slaac: false,
            interfaces: Vec::new(),
        }
    }

    /// Adds interface `iface` (the next index: 1 for the first).
    pub fn with_interface(mut self, iface: Interface) -> Config {
        self.interfaces.push(iface);
        self
    }

    /// Every interface as an [`Interface`], interface 0 first.
    pub fn all_interfaces(&self) -> impl Iterator<Item = Interface> + '_ {
        let zero = Interface {
            mac: self.mac,
            ipv4: self.ipv4,
            ipv6: self.ipv6,
            mtu: self.mtu,
        };
        core::iter::once(zero).chain(self.interfaces.iter().cloned())
    }

    /// Sets the IPv4 address.
    pub fn with_ipv4(mut self, addr: Ipv4Addr, prefix_len: u8) -> Config {
        self.ipv4 = Some(Ipv4Cidr::new(addr, prefix_len));
        self
    }

    /// Sets the IPv6 address.
    pub fn with_ipv6(mut self, addr: Ipv6Addr, prefix_len: u8) -> Config {
        self.ipv6 = Some(Ipv6Cidr::new(addr, prefix_len));
        self
    }

    /// Sends what no longer prefix covers through `gateway`: replaces the
    /// default routes of `gateway`'s family (metric 0) with one via it.
    pub fn with_gateway(mut self, gateway: std::net::IpAddr) -> Config {
        let v6 = gateway.is_ipv6();
        self.routes
            .retain(|r| !(r.prefix_len == 0 && r.metric == 0 && r.dst.is_ipv6() == v6));
        self.routes
            .push(Route::default_for(v6, RouteKind::Via(gateway)));
        self
    }

    /// Adds `route` to [`Config::routes`].
    pub fn with_route(mut self, route: Route) -> Config {
        self.routes.push(route);
        self
    }

    /// The on-link routes of the interfaces' own prefixes, each on its
    /// interface.
    pub(crate) fn connected_routes(&self) -> Vec<Route> {
        let mut v = Vec::new();
        for (i, f) in self.all_interfaces().enumerate() {
            if let Some(c) = f.ipv4 {
                let r = Route::new(
                    std::net::IpAddr::V4(c.addr),
                    c.prefix_len.min(32),
                    RouteKind::OnLink,
                );
                v.push(r.with_dev(i));
            }
            if let Some(c) = f.ipv6 {
                let r = Route::new(
                    std::net::IpAddr::V6(c.addr),
                    c.prefix_len.min(128),
                    RouteKind::OnLink,
                );
                v.push(r.with_dev(i));
            }
        }
        v
    }

    /// The routing table [`Config::routes`] and the interface prefixes make.
    pub fn route_table(&self) -> Result<RouteTable, ConfigError> {
        RouteTable::with_devices(
            1 + self.interfaces.len(),
            &self.connected_routes(),
            &self.routes,
        )
        .map_err(ConfigError::Route)
    }
}

/// Largest TCP send or receive buffer: the largest window RFC 7323 section 2.3
/// lets a window scale of 14 advertise (2^30 bytes), and well inside the
/// 2^31 bytes sequence number comparisons can tell apart (RFC 9293 section 3.4).
pub const MAX_TCP_BUFFER: usize = 1 << 30;

/// Smallest MTU: an ICMP error the engine sends is filled up to 576 bytes
/// (RFC 1812 section 4.3.2.3), the datagram every IPv4 host must accept
/// (RFC 791); a smaller link could not carry it.
pub const MIN_MTU_IPV4: u16 = 576;

/// Smallest MTU with an IPv6 address (RFC 8200 section 5): the engine's IPv6
/// default MSS (1220) and ICMPv6 errors (RFC 4443 section 2.4) assume it.
pub const MIN_MTU_IPV6: u16 = 1280;

/// Largest delayed ACK timeout: RFC 9293 section 3.8.6.3 says the delay MUST be
/// less than 0.5 seconds.
pub const MAX_DELAYED_ACK: Duration = Duration::from_millis(500);

/// Smallest time between ARP requests / neighbour solicitations: RFC 1122
/// section 2.3.2.1 requires a host to prevent ARP flooding (RFC 4861 section
/// 7.2.2 rate-limits solicitations likewise); with no floor a resolution that
/// is not answered sends its probes back to back.
pub const MIN_NEIGHBOR_RETRY: Duration = Duration::from_millis(1);

/// Most gratuitous ARP announcements at start (RFC 5227 asks for 2): with a
/// zero [`Config::announce_interval`] they all go out at once, and an engine
/// asked for billions would flood the link and never get past its first round.
pub const MAX_ANNOUNCEMENTS: u32 = 16;

/// Why [`Config::validate`] rejects a configuration: one variant per rule, with
/// the field and the offending value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// An entry of `routes` that cannot be (see [`RouteError`]).
    Route(RouteError),
    /// `mac` is zero or a group (multicast or broadcast) address: frames must
    /// carry an individual source address (IEEE 802.3 clause 3.2.3), and peers
    /// would resolve our addresses to a group.
    Mac {
        /// The address given.
        mac: [u8; 6],
    },
    /// A prefix length longer than the address (`ipv4.prefix_len` at most 32,
    /// `ipv6.prefix_len` at most 128): the subnet (on-link test, directed
    /// broadcast) would be meaningless.
    PrefixLen {
        /// `ipv4.prefix_len` or `ipv6.prefix_len`.
        field: &'static str,
        /// The length given.
        value: u8,
        /// The largest allowed.
        max: u8,
    },
    /// An interface address that is unspecified, multicast or (IPv4) the
    /// limited broadcast address: none may be a source address (RFC 1122
    /// section 3.2.1.3, RFC 4291 sections 2.5.2 and 2.7).
    Address {
        /// `ipv4.addr` or `ipv6.addr`.
        field: &'static str,
        /// The address given.
        addr: std::net::IpAddr,
    },
    /// `mtu` is below what the configured families need ([`MIN_MTU_IPV4`];
    /// [`MIN_MTU_IPV6`] with an IPv6 address): the engine would send frames
    /// larger than the link carries.
    Mtu {
        /// The MTU given.
        value: u16,
        /// The smallest allowed.
        min: u16,
    },
    /// `tcp.send_buffer` or `tcp.recv_buffer` is zero (a connection could
    /// never send, or would advertise a zero window forever: a hang) or above
    /// [`MAX_TCP_BUFFER`] (a window RFC 7323 section 2.3 cannot advertise).
    TcpBuffer {
        /// `tcp.send_buffer` or `tcp.recv_buffer`.
        field: &'static str,
        /// The size given.
        value: usize,
        /// The largest allowed (the smallest is 1).
        max: usize,
    },
    /// `tcp.min_rto` is zero: with `tcp.max_rto` zero too the retransmission
    /// timer expires at once, every time (a retransmission storm that never
    /// lets time advance).
    MinRto {
        /// The bound given.
        value: Duration,
    },
    /// `tcp.max_rto` is below `tcp.min_rto`: contradictory bounds, only one of
    /// which the engine could honour.
    RtoBounds {
        /// `tcp.min_rto`.
        min_rto: Duration,
        /// `tcp.max_rto`.
        max_rto: Duration,
    },
    /// `tcp.delayed_ack` is not under [`MAX_DELAYED_ACK`] (RFC 9293 section
    /// 3.8.6.3: MUST be less than 0.5 s; a peer's RTO may be as low as 200 ms).
    DelayedAck {
        /// The timeout given.
        value: Duration,
        /// The bound it must stay under.
        max: Duration,
    },
    /// A count that must be at least 1 is zero: `tcp.backlog` (a listener
    /// could never accept: every connect would hang), `udp.recv_buffer` /
    /// `udp.recv_datagrams` (every datagram dropped: a reader waits forever),
    /// `udp.send_buffer` (never writable: a writer waits forever),
    /// `neighbor_queue` (RFC 1122 section 2.3.2.2: keep at least the latest
    /// packet while resolving), `neighbor_max` and `pmtu_entries` (tables
    /// that could hold nothing), `fragments.max_fragments` (no datagram could
    /// be reassembled) and the reassembly timeouts (every datagram would
    /// expire as it starts).
    Zero {
        /// The field.
        field: &'static str,
    },
    /// `fragments.low_thresh` is above `fragments.high_thresh`: eviction
    /// could never bring the reassembly memory down to its target.
    FragThresholds {
        /// `fragments.low_thresh`.
        low: usize,
        /// `fragments.high_thresh`.
        high: usize,
    },
    /// `neighbor_retry` is below [`MIN_NEIGHBOR_RETRY`]: an ARP / neighbour
    /// solicitation flood (RFC 1122 section 2.3.2.1).
    NeighborRetry {
        /// The interval given.
        value: Duration,
        /// The smallest allowed.
        min: Duration,
    },
    /// `announcements` is above [`MAX_ANNOUNCEMENTS`]: a broadcast flood.
    Announcements {
        /// The count given.
        value: u32,
        /// The largest allowed.
        max: u32,
    },
    /// More interfaces than [`MAX_INTERFACES`] (interface 0 included).
    Interfaces {
        /// How many were given.
        count: usize,
        /// The largest allowed.
        max: usize,
    },
    /// `interfaces[index - 1]` breaks a rule of interface 0's fields
    /// (`Mac`, `PrefixLen`, `Address` or `Mtu`, in `error`).
    Interface {
        /// The interface's index (1 for `interfaces[0]`).
        index: usize,
        /// The rule it breaks.
        error: Box<ConfigError>,
    },
    /// Two interfaces have the same MAC: the frames the engine sends carry the
    /// output interface's MAC as their source, which is how a multi-port NIC
    /// adaptor sends each out of its port, and how peers tell them apart.
    DuplicateMac {
        /// The address.
        mac: [u8; 6],
        /// The interfaces that share it.
        first: usize,
        /// The other.
        second: usize,
    },
    /// The prefixes of two interfaces overlap (one contains the other's
    /// network, or they share an address): which interface a neighbour in
    /// the overlap is on would depend on table order.
    OverlappingPrefixes {
        /// The address of the first interface's prefix.
        first_addr: std::net::IpAddr,
        /// The first interface.
        first: usize,
        /// The address of the second interface's prefix.
        second_addr: std::net::IpAddr,
        /// The second interface.
        second: usize,
    },
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::Route(e) => write!(f, "routes: {e}"),
            ConfigError::Mac { mac } => write!(
                f,
                "mac {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x} is not a unicast address",
                mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
            ),
            ConfigError::PrefixLen { field, value, max } => {
                write!(f, "{field} is {value}, at most {max}")
            }
            ConfigError::Address { field, addr } => {
                write!(f, "{field} {addr} is unspecified, multicast or broadcast")
            }
            ConfigError::Mtu { value, min } => write!(f, "mtu is {value}, at least {min}"),
            ConfigError::TcpBuffer { field, value, max } => {
                write!(f, "{field} is {value}, must be 1 to {max}")
            }
            ConfigError::MinRto { value } => {
                write!(f, "tcp.min_rto is {value:?}, must be above zero")
            }
            ConfigError::RtoBounds { min_rto, max_rto } => write!(
                f,
                "tcp.max_rto ({max_rto:?}) is below tcp.min_rto ({min_rto:?})"
            ),
            ConfigError::DelayedAck { value, max } => {
                write!(f, "tcp.delayed_ack is {value:?}, must be under {max:?}")
            }
            ConfigError::Zero { field } => write!(f, "{field} is 0, at least 1"),
            ConfigError::FragThresholds { low, high } => write!(
                f,
                "fragments.low_thresh ({low}) is above fragments.high_thresh ({high})"
            ),
            ConfigError::NeighborRetry { value, min } => {
                write!(f, "neighbor_retry is {value:?}, at least {min:?}")
            }
            ConfigError::Announcements { value, max } => {
                write!(f, "announcements is {value}, at most {max}")
            }
            ConfigError::Interfaces { count, max } => {
                write!(f, "{count} interfaces, at most {max}")
            }
            ConfigError::Interface { index, error } => write!(f, "interface {index}: {error}"),
            ConfigError::DuplicateMac { mac, first, second } => write!(
                f,
                "interfaces {first} and {second} share mac \
                 {:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]
            ),
            ConfigError::OverlappingPrefixes {
                first_addr,
                first,
                second_addr,
                second,
            } => write!(
                f,
                "the prefixes of interface {first} ({first_addr}) and interface {second} \
                 ({second_addr}) overlap"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Checks the rules of [`ConfigError`], in field order; the first broken
    /// one is returned. [`crate::Engine::try_new`] and the runtimes call it.
    pub fn validate(&self) -> Result<(), ConfigError> {
        check_interface(
            &Interface {
                mac: self.mac,
                ipv4: self.ipv4,
                ipv6: self.ipv6,
                mtu: self.mtu,
            },
            self.slaac,
        )?;
        self.check_interfaces()?;
        self.validate_rest()
    }

    /// The rules between interfaces, and each further interface's own.
    fn check_interfaces(&self) -> Result<(), ConfigError> {
        use std::net::IpAddr;
        let count = 1 + self.interfaces.len();
        if count > MAX_INTERFACES {
            return Err(ConfigError::Interfaces {
                count,
                max: MAX_INTERFACES,
            });
        }
        for (i, f) in self.interfaces.iter().enumerate() {
            check_interface(f, false).map_err(|e| ConfigError::Interface {
                index: i + 1,
                error: Box::new(e),
            })?;
        }
        let all: Vec<Interface> = self.all_interfaces().collect();
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate().skip(i + 1) {
                if a.mac == b.mac {
                    return Err(ConfigError::DuplicateMac {
                        mac: a.mac,
                        first: i,
                        second: j,
                    });
                }
                let pairs = [
                    (
                        a.ipv4.map(|c| route_of(IpAddr::V4(c.addr), c.prefix_len)),
                        b.ipv4.map(|c| route_of(IpAddr::V4(c.addr), c.prefix_len)),
                    ),
                    (
                        a.ipv6.map(|c| route_of(IpAddr::V6(c.addr), c.prefix_len)),
                        b.ipv6.map(|c| route_of(IpAddr::V6(c.addr), c.prefix_len)),
                    ),
                ];
                for (x, y) in pairs {
                    if let (Some(x), Some(y)) = (x, y)
                        && (x.contains(y.dst) || y.contains(x.dst))
                    {
                        return Err(ConfigError::OverlappingPrefixes {
                            first_addr: x.dst,
                            first: i,
                            second_addr: y.dst,
                            second: j,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// The rules past the interfaces'.
    fn validate_rest(&self) -> Result<(), ConfigError> {
        let zero = |field: &'static str, v: usize| match v {
            0 => Err(ConfigError::Zero { field }),
            _ => Ok(()),
        };
        zero("neighbor_queue", self.neighbor_queue)?;
        zero("neighbor_max", self.neighbor_max)?;
        if self.neighbor_retry < MIN_NEIGHBOR_RETRY {
            return Err(ConfigError::NeighborRetry {
                value: self.neighbor_retry,
                min: MIN_NEIGHBOR_RETRY,
            });
        }
        if self.announcements > MAX_ANNOUNCEMENTS {
            return Err(ConfigError::Announcements {
                value: self.announcements,
                max: MAX_ANNOUNCEMENTS,
            });
        }
        let t = &self.tcp;
        for (field, value) in [
            ("tcp.send_buffer", t.send_buffer),
            ("tcp.recv_buffer", t.recv_buffer),
        ] {
            if value == 0 || value > MAX_TCP_BUFFER {
                return Err(ConfigError::TcpBuffer {
                    field,
                    value,
                    max: MAX_TCP_BUFFER,
                });
            }
        }
        if t.min_rto.is_zero() {
            return Err(ConfigError::MinRto { value: t.min_rto });
        }
        if t.max_rto < t.min_rto {
            return Err(ConfigError::RtoBounds {
                min_rto: t.min_rto,
                max_rto: t.max_rto,
            });
        }
        if t.delayed_ack >= MAX_DELAYED_ACK {
            return Err(ConfigError::DelayedAck {
                value: t.delayed_ack,
                max: MAX_DELAYED_ACK,
            });
        }
        zero("tcp.backlog", t.backlog)?;
        zero("udp.recv_buffer", self.udp.recv_buffer)?;
        zero("udp.recv_datagrams", self.udp.recv_datagrams)?;
        zero("udp.send_buffer", self.udp.send_buffer)?;
        zero("pmtu_entries", self.pmtu_entries)?;
        let f = &self.fragments;
        zero("fragments.max_fragments", f.max_fragments)?;
        if f.low_thresh > f.high_thresh {
            return Err(ConfigError::FragThresholds {
                low: f.low_thresh,
                high: f.high_thresh,
            });
        }
        if f.timeout_v4.is_zero() {
            return Err(ConfigError::Zero {
                field: "fragments.timeout_v4",
            });
        }
        if f.timeout_v6.is_zero() {
            return Err(ConfigError::Zero {
                field: "fragments.timeout_v6",
            });
        }
        self.route_table()?;
        Ok(())
    }
}

/// The rules of one interface's fields: a unicast MAC, prefix lengths and
/// addresses, and an MTU the families need (`slaac`: an IPv6 address may
/// come).
fn check_interface(f: &Interface, slaac: bool) -> Result<(), ConfigError> {
    use std::net::IpAddr;
    let mac = f.mac;
    if mac == [0; 6] || mac[0] & 1 != 0 {
        return Err(ConfigError::Mac { mac });
    }
    if let Some(c) = f.ipv4 {
        if c.prefix_len > 32 {
            return Err(ConfigError::PrefixLen {
                field: "ipv4.prefix_len",
                value: c.prefix_len,
                max: 32,
            });
        }
        let a = c.addr;
        if a.is_unspecified() || a.is_multicast() || a.is_broadcast() {
            return Err(ConfigError::Address {
                field: "ipv4.addr",
                addr: IpAddr::V4(a),
            });
        }
    }
    if let Some(c) = f.ipv6 {
        if c.prefix_len > 128 {
            return Err(ConfigError::PrefixLen {
                field: "ipv6.prefix_len",
                value: c.prefix_len,
                max: 128,
            });
        }
        let a = c.addr;
        if a.is_unspecified() || a.is_multicast() {
            return Err(ConfigError::Address {
                field: "ipv6.addr",
                addr: IpAddr::V6(a),
            });
        }
    }
    let min_mtu = if f.ipv6.is_some() || slaac {
        MIN_MTU_IPV6
    } else {
        MIN_MTU_IPV4
    };
    if f.mtu < min_mtu {
        return Err(ConfigError::Mtu {
            value: f.mtu,
            min: min_mtu,
        });
    }
    Ok(())
}

/// The on-link route of `addr/prefix_len`, for prefix comparisons.
fn route_of(addr: std::net::IpAddr, prefix_len: u8) -> Route {
    Route::new(addr, prefix_len, RouteKind::OnLink)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnet() {
        let c = Ipv4Cidr::new(Ipv4Addr::new(10, 0, 1, 5), 24);
        assert!(c.contains(Ipv4Addr::new(10, 0, 1, 200)));
        assert!(!c.contains(Ipv4Addr::new(10, 0, 2, 1)));
        assert_eq!(c.broadcast(), Ipv4Addr::new(10, 0, 1, 255));
        assert!(Ipv4Cidr::new(Ipv4Addr::new(1, 2, 3, 4), 0).contains(Ipv4Addr::new(9, 9, 9, 9)));
    }
}
