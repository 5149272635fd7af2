//! Engine configuration: the interface (MAC, addresses, MTU, offloads), TCP and
//! UDP defaults, ICMP error rate and path MTU cache bounds.

pub use crate::tcp::cc::CongestionControl;
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
    /// the limit again (`tests/behaviour_ofo.rs`).
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
    /// not fit is refused with [`crate::Error::WouldBlock`].
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

/// The interface and engine configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The interface's Ethernet address.
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
        }
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
