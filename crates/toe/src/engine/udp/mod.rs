//! UDP sockets (RFC 768, RFC 1122 section 4.1, RFC 8085's advice for senders)
//! over IPv4 and IPv6, and the ICMP port unreachable answer to datagrams for a
//! closed port (RFC 1122 section 4.1.3.1, RFC 792 type 3 code 3, RFC 4443
//! section 3.1 type 1 code 4), rate-limited by a token bucket (RFC 4443 section
//! 2.4 (f), RFC 1812 section 4.3.2.8).
//!
//! # Sockets
//!
//! [`Engine::udp_bind`] binds an address of one family: the unspecified address
//! (every datagram to the port, unicast or broadcast) or the interface's own
//! (unicast only); port 0 picks a free port at random from 49152..=65535 (RFC
//! 6056). One socket per port and family. Each socket has a bounded receive
//! queue (bytes and datagrams, [`UdpConfig`](crate::config::UdpConfig)); a
//! datagram that does not fit is dropped and counted (`udp_rcvbuf_errors`), as
//! Linux's `SO_RCVBUF` does. Sends are queued in the engine (bounded per socket;
//! a full queue refuses with [`UdpSendError::WouldBlock`]) and written straight into
//! the transmit sink by [`Engine::poll_transmit_into`].
//!
//! # Sizes and fragments
//!
//! A datagram that fits the path MTU (the interface MTU, or less once ICMP has
//! said so: `net::pmtu`) leaves whole, with DF set over IPv4. A larger one is
//! fragmented when [`Config::fragments`](crate::Config::fragments) is on and
//! the socket allows it (the default; [`Engine::udp_set_dont_fragment`] is
//! Linux's `IP_PMTUDISC_DO`): over IPv4 in fragments with DF clear, over IPv6
//! behind a Fragment header (RFC 8200 section 4.5) whose identification
//! follows RFC 7739; checksums complete, no GSO. Otherwise the send fails
//! with [`UdpSendError::MessageTooLong`]. A segmented send's datagrams must
//! each fit. Received fragments are reassembled when the same switch is on
//! (`engine::frag`).
//!
//! # Offloads
//!
//! With [`Config::offloads`](crate::Config::offloads) on, datagrams leave with a
//! partial checksum (`Checksum::Partial { start: UDP header, offset: 6 }`, the
//! folded pseudo-header sum in the field) and [`Engine::udp_send_to_segmented`]
//! (Linux's `UDP_SEGMENT`) hands over one super-datagram marked
//! `gso: UdpL4 { size: segment_size }` that the NIC layer cuts (USO); off, every
//! datagram is built on its own with its checksum complete. A received GRO
//! super-datagram (`meta.gso` of kind `UdpL4`) is split back into its datagrams
//! (every `size` bytes, a shorter last one), each queued on its own.
//!
//! # Checksums on receive
//!
//! Verified unless the NIC layer says it did; a zero checksum means "none" over
//! IPv4 and is refused over IPv6 (RFC 8200 section 8.1).

use super::Engine;
use super::error::{EPHEMERAL_PORTS, InvalidHandle, UdpBindError, UdpRecvError, UdpSendError};
use super::events::{EventState, bits};
use super::output::ip_header_len;
use super::socket::Readiness;
use crate::net::ratelimit::TokenBucket;
use crate::time::Instant;
use linerate_wire::udp;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

/// Datagrams one super-datagram may hold (Linux's `UDP_MAX_SEGMENTS` was 64).
pub const MAX_UDP_SEGMENTS: usize = 64;

/// Receive buffers kept for reuse, at most.
const SPARE_BUFFERS: usize = 256;

mod io;

pub(in crate::engine) use io::UdpIn;

/// A UDP socket's handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpHandle {
    index: u32,
    generation: u32,
}

impl UdpHandle {
    /// A small number naming the socket's slot in its engine: dense, and
    /// reused once the socket is closed (a handle compares unequal to the one
    /// before it, an index does not). For the caller's own tables.
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

/// A snapshot of a UDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpInfo {
    /// The bound address (its IP may be unspecified).
    pub local: SocketAddr,
    /// Datagrams waiting to be read.
    pub recv_datagrams: usize,
    /// Payload bytes waiting to be read.
    pub recv_bytes: usize,
    /// Payload bytes queued for sending.
    pub send_bytes: usize,
    /// Datagrams dropped because the receive queue was full.
    pub drops: u64,
}

/// One bound socket.
#[derive(Debug, Clone)]
struct UdpSock {
    local: SocketAddr,
    rx: VecDeque<(SocketAddr, Vec<u8>)>,
    rx_bytes: usize,
    tx_bytes: usize,
    drops: u64,
    /// Datagrams over the path MTU are refused rather than fragmented
    /// (Linux's `IP_PMTUDISC_DO`).
    dont_fragment: bool,
}

#[derive(Debug, Clone, Default)]
struct UdpSlot {
    generation: u32,
    sock: Option<UdpSock>,
    /// Its place in the event queue and the readiness last reported.
    ev: EventState,
}

/// A send waiting for the transmit sink.
#[derive(Debug, Clone)]
struct UdpOut {
    slot: usize,
    generation: u32,
    src: SocketAddr,
    dst: SocketAddr,
    /// Datagram payload size of a segmented send (0: one datagram).
    seg: usize,
    data: Vec<u8>,
    /// Bytes of `data` already sent (a segmented send without offloads goes out
    /// datagram by datagram, and the sink may fill up in between); for a
    /// datagram sent in fragments, bytes of the UDP datagram (header
    /// included) already sent.
    off: usize,
    /// The datagram may be fragmented if it does not fit the path MTU.
    may_fragment: bool,
    /// Its fragments' identification, once the first is out.
    frag_id: Option<u32>,
    /// TTL / hop limit, for a datagram to a group (`mcast`).
    hops: Option<u8>,
}

/// The engine's UDP state.
#[derive(Debug, Clone)]
pub(super) struct UdpTable {
    slots: Vec<UdpSlot>,
    free: Vec<usize>,
    /// (port, IPv6) to slot.
    by_port: HashMap<(u16, bool), usize>,
    tx: VecDeque<UdpOut>,
    spare: Vec<Vec<u8>>,
    /// ICMP errors' rate limit.
    pub(super) icmp: TokenBucket,
}

impl UdpTable {
    pub(super) fn new(icmp_rate: u32, icmp_burst: u32) -> UdpTable {
        UdpTable {
            slots: Vec::new(),
            free: Vec::new(),
            by_port: HashMap::new(),
            tx: VecDeque::new(),
            spare: Vec::new(),
            icmp: TokenBucket::new(icmp_rate, icmp_burst),
        }
    }

    fn sock(&self, h: UdpHandle) -> Result<&UdpSock, InvalidHandle> {
        let slot = self.slots.get(h.index as usize).ok_or(InvalidHandle)?;
        if slot.generation != h.generation {
            return Err(InvalidHandle);
        }
        slot.sock.as_ref().ok_or(InvalidHandle)
    }

    fn sock_mut(&mut self, h: UdpHandle) -> Result<&mut UdpSock, InvalidHandle> {
        let slot = self.slots.get_mut(h.index as usize).ok_or(InvalidHandle)?;
        if slot.generation != h.generation {
            return Err(InvalidHandle);
        }
        slot.sock.as_mut().ok_or(InvalidHandle)
    }

    /// Forgets `bit` of socket `h`'s reported readiness.
    fn rearm(&mut self, h: UdpHandle, bit: u8) {
        if let Some(slot) = self.slots.get_mut(h.index as usize) {
            slot.ev.rearm(bit);
        }
    }

    /// A buffer holding a copy of `data`, reused when one is spare.
    fn buffer_of(&mut self, data: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(data);
        b
    }

    fn recycle(&mut self, b: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS {
            self.spare.push(b);
        }
    }

    /// The socket of the slot `idx` while it still has generation `generation`.
    fn live_mut(&mut self, idx: usize, generation: u32) -> Option<&mut UdpSock> {
        self.slots
            .get_mut(idx)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.sock.as_mut())
    }

    /// The event state of the bound socket in slot `idx`.
    pub(super) fn event_state(&mut self, idx: usize) -> Option<&mut EventState> {
        self.slots
            .get_mut(idx)
            .filter(|s| s.sock.is_some())
            .map(|s| &mut s.ev)
    }

    /// The handle, readiness bits and event state of the socket in slot `idx`;
    /// clears its queued flag.
    pub(super) fn readiness_bits(
        &mut self,
        idx: usize,
        send_buffer: usize,
    ) -> Option<(UdpHandle, u8, &mut EventState)> {
        let slot = self.slots.get_mut(idx)?;
        slot.ev.clear_queued();
        let s = slot.sock.as_ref()?;
        let mut cur = 0;
        if !s.rx.is_empty() {
            cur |= bits::READABLE;
        }
        if s.tx_bytes < send_buffer {
            cur |= bits::WRITABLE;
        }
        let h = UdpHandle {
            index: idx as u32,
            generation: slot.generation,
        };
        Some((h, cur, &mut slot.ev))
    }

    /// True if a socket is bound to `port` for the family of `ip`.
    pub(super) fn bound(&self, port: u16, ip: IpAddr) -> bool {
        self.by_port.contains_key(&(port, ip.is_ipv6()))
    }
}

impl Engine {
    /// Binds a UDP socket to `addr`: the unspecified address of a family (every
    /// datagram of that family to the port) or an interface's address of that
    /// family; port 0 picks a free ephemeral port.
    ///
    /// Errors: [`UdpBindError::NoAddress`] if the interface has no such
    /// address, [`UdpBindError::AddrInUse`] if the port is bound for that
    /// family, [`UdpBindError::NoPorts`] if no ephemeral port is free.
    pub fn udp_bind(&mut self, addr: SocketAddr) -> Result<UdpHandle, UdpBindError> {
        let has_family = (0..self.interface_count()).any(|i| match addr.ip() {
            IpAddr::V4(_) => self.iface_v4(i).is_some(),
            IpAddr::V6(_) => self.iface_v6(i).is_some(),
        });
        if !has_family {
            return Err(UdpBindError::NoAddress);
        }
        if !addr.ip().is_unspecified() && !self.is_local_addr(addr.ip()) {
            return Err(UdpBindError::NoAddress);
        }
        let v6 = addr.is_ipv6();
        let port = match addr.port() {
            0 => self.udp_ephemeral(v6)?,
            p if self.udp.by_port.contains_key(&(p, v6)) => return Err(UdpBindError::AddrInUse),
            p => p,
        };
        let sock = UdpSock {
            local: SocketAddr::new(addr.ip(), port),
            rx: VecDeque::new(),
            rx_bytes: 0,
            tx_bytes: 0,
            drops: 0,
            dont_fragment: false,
        };
        let t = &mut self.udp;
        let idx = match t.free.pop() {
            Some(i) if i < t.slots.len() => i,
            _ => {
                t.slots.push(UdpSlot::default());
                t.slots.len() - 1
            }
        };
        let Some(slot) = t.slots.get_mut(idx) else {
            // Not reached: `idx` is in range by construction.
            return Err(UdpBindError::NoPorts);
        };
        slot.sock = Some(sock);
        // Writable from the start: that is no news (room that comes back
        // after a refused send is).
        slot.ev.seen = bits::WRITABLE;
        let generation = slot.generation;
        t.by_port.insert((port, v6), idx);
        Ok(UdpHandle {
            index: idx as u32,
            generation,
        })
    }

    /// A free port for the family, searched from a random start (RFC 6056
    /// section 3.3.2).
    fn udp_ephemeral(&mut self, v6: bool) -> Result<u16, UdpBindError> {
        let (low, high) = EPHEMERAL_PORTS;
        let span = u64::from(high - low) + 1;
        let start = self.rng.below(span);
        (0..span)
            .map(|i| low + ((start + i) % span) as u16)
            .find(|p| !self.udp.by_port.contains_key(&(*p, v6)))
            .ok_or(UdpBindError::NoPorts)
    }

    /// Closes a UDP socket: unread datagrams are dropped; datagrams already
    /// queued for sending still go out.
    pub fn udp_close(&mut self, h: UdpHandle) -> Result<(), InvalidHandle> {
        self.udp.sock(h)?;
        let t = &mut self.udp;
        let idx = h.index as usize;
        let Some(slot) = t.slots.get_mut(idx) else {
            return Err(InvalidHandle);
        };
        let sock = slot.sock.take();
        slot.generation = slot.generation.wrapping_add(1);
        t.free.push(idx);
        self.mcast_socket_closed(h);
        let t = &mut self.udp;
        if let Some(sock) = sock {
            let key = (sock.local.port(), sock.local.is_ipv6());
            if t.by_port.get(&key) == Some(&idx) {
                t.by_port.remove(&key);
            }
            for (_, b) in sock.rx {
                t.recycle(b);
            }
        }
        Ok(())
    }

    /// The handle of the socket bound in slot `index` ([`UdpHandle::index`]),
    /// if there is one (for a caller that keeps indices).
    pub fn udp_handle(&self, index: usize) -> Option<UdpHandle> {
        let slot = self.udp.slots.get(index)?;
        slot.sock.as_ref()?;
        Some(UdpHandle {
            index: index as u32,
            generation: slot.generation,
        })
    }

    /// The socket's bound address and queues.
    pub fn udp_info(&self, h: UdpHandle) -> Result<UdpInfo, InvalidHandle> {
        let s = self.udp.sock(h)?;
        Ok(UdpInfo {
            local: s.local,
            recv_datagrams: s.rx.len(),
            recv_bytes: s.rx_bytes,
            send_bytes: s.tx_bytes,
            drops: s.drops,
        })
    }

    /// What the socket is ready for: a datagram to read; room to queue a send.
    pub fn udp_readiness(&self, h: UdpHandle) -> Result<Readiness, InvalidHandle> {
        let s = self.udp.sock(h)?;
        Ok(Readiness {
            readable: !s.rx.is_empty(),
            writable: s.tx_bytes < self.cfg.udp.send_buffer,
            error: None,
        })
    }

    /// Refuses (`on`) or allows datagrams larger than the path MTU on socket
    /// `h`, like Linux's `IP_MTU_DISCOVER` with `IP_PMTUDISC_DO` or
    /// `IP_PMTUDISC_WANT`. Allowed by default; either way such datagrams are
    /// refused while [`Config::fragments`](crate::Config::fragments) is off.
    pub fn udp_set_dont_fragment(&mut self, h: UdpHandle, on: bool) -> Result<(), InvalidHandle> {
        self.udp.sock_mut(h)?.dont_fragment = on;
        Ok(())
    }

    /// The largest UDP payload one unfragmented datagram to `ip` may carry:
    /// the path MTU less the IP and UDP headers.
    pub fn udp_max_payload(&self, now: Instant, ip: IpAddr) -> usize {
        usize::from(self.path_mtu(now, ip)).saturating_sub(ip_header_len(ip) + udp::HEADER_LEN)
    }

    /// Reads the next datagram into `buf`; returns its length and sender. A
    /// datagram longer than `buf` is cut to it (the rest is lost, as with
    /// `recvfrom(2)` without `MSG_TRUNC`). [`UdpRecvError::WouldBlock`] when
    /// none waits (wait for [`Event::UdpReadable`](super::Event::UdpReadable)).
    pub fn udp_recv_from(
        &mut self,
        h: UdpHandle,
        buf: &mut [u8],
    ) -> Result<(usize, SocketAddr), UdpRecvError> {
        self.udp_recv_with(h, |data, from| {
            let n = data.len().min(buf.len());
            if let (Some(d), Some(s)) = (buf.get_mut(..n), data.get(..n)) {
                d.copy_from_slice(s);
            }
            (n, from)
        })
    }

    /// Lends the next datagram to `f` (no copy) and returns what `f` returns;
    /// the datagram is consumed. [`UdpRecvError::WouldBlock`] when none waits.
    pub fn udp_recv_with<R>(
        &mut self,
        h: UdpHandle,
        f: impl FnOnce(&[u8], SocketAddr) -> R,
    ) -> Result<R, UdpRecvError> {
        let s = self.udp.sock_mut(h)?;
        let Some((from, data)) = s.rx.pop_front() else {
            self.udp.rearm(h, bits::READABLE);
            return Err(UdpRecvError::WouldBlock);
        };
        s.rx_bytes = s.rx_bytes.saturating_sub(data.len());
        if s.rx.is_empty() {
            self.udp.rearm(h, bits::READABLE);
        }
        let r = f(&data, from);
        self.udp.recycle(data);
        Ok(r)
    }

    /// Queues one datagram carrying `payload` to `remote`; returns its length.
    ///
    /// Errors: [`UdpSendError::InvalidDestination`] for a destination of the
    /// other family, port 0 or the unspecified address;
    /// [`UdpSendError::NoAddress`] without a source address of the family;
    /// [`UdpSendError::MessageTooLong`] if it does not fit the path MTU
    /// ([`Engine::udp_max_payload`]) and may not be fragmented (fragments
    /// off in the config, or [`Engine::udp_set_dont_fragment`]), or does not
    /// fit a UDP length field; [`UdpSendError::WouldBlock`] if the socket's
    /// send queue is full.
    pub fn udp_send_to(
        &mut self,
        h: UdpHandle,
        payload: &[u8],
        remote: SocketAddr,
    ) -> Result<usize, UdpSendError> {
        self.udp_queue(h, payload, remote, 0)
    }

    /// Queues `payload` as datagrams of `segment_size` bytes each (a shorter
    /// last one) to `remote`, like Linux's `UDP_SEGMENT`: with offloads on, one
    /// super-datagram the NIC layer cuts (USO); off, the datagrams one by one.
    /// Returns the bytes queued (all of `payload`).
    ///
    /// Errors: those of [`Engine::udp_send_to`], and
    /// [`UdpSendError::InvalidSegmentSize`] for a zero `segment_size`;
    /// [`UdpSendError::MessageTooLong`] if a segment does
    /// not fit the path MTU, or the payload needs more than
    /// [`MAX_UDP_SEGMENTS`] datagrams or more than a UDP length field can hold.
    pub fn udp_send_to_segmented(
        &mut self,
        h: UdpHandle,
        payload: &[u8],
        remote: SocketAddr,
        segment_size: u16,
    ) -> Result<usize, UdpSendError> {
        if segment_size == 0 {
            return Err(UdpSendError::InvalidSegmentSize);
        }
        let seg = usize::from(segment_size);
        if payload.len().div_ceil(seg) > MAX_UDP_SEGMENTS {
            return Err(UdpSendError::MessageTooLong);
        }
        self.udp_queue(h, payload, remote, seg)
    }

    fn udp_queue(
        &mut self,
        h: UdpHandle,
        payload: &[u8],
        remote: SocketAddr,
        seg: usize,
    ) -> Result<usize, UdpSendError> {
        let sock = self.udp.sock(h)?;
        let local = sock.local;
        // A single datagram may go in fragments (a segmented send's
        // datagrams must each fit).
        let group = remote.ip().is_multicast();
        let may_fragment = seg == 0 && self.cfg.fragments.enabled && !sock.dont_fragment;
        if local.is_ipv4() != remote.is_ipv4() || remote.port() == 0 || remote.ip().is_unspecified()
        {
            return Err(UdpSendError::InvalidDestination);
        }
        let src_ip = if local.ip().is_unspecified() && !group {
            // The address of the interface the route goes out of (`iface`).
            self.source_for(remote.ip())
                .ok_or(UdpSendError::NoAddress)?
        } else if local.ip().is_unspecified() {
            // Groups are joined on interface 0.
            match remote.ip() {
                IpAddr::V4(_) => self.cfg.ipv4.map(|c| IpAddr::V4(c.addr)),
                IpAddr::V6(_) => self.cfg.ipv6.map(|c| IpAddr::V6(c.addr)),
            }
            .ok_or(UdpSendError::NoAddress)?
        } else {
            local.ip()
        };
        self.route_check(remote.ip())
            .map_err(UdpSendError::Unroutable)?;
        // One datagram must fit the path; a super-datagram's segments must, and
        // the whole must fit the 16-bit UDP (and IPv4 total) length.
        let max = self.udp_max_payload(self.clock, remote.ip());
        let per = if seg == 0 { payload.len() } else { seg };
        // IPv4's total length covers its header; IPv6's payload length does not.
        let whole_max = match remote.ip() {
            IpAddr::V4(_) => 65_535 - 20 - udp::HEADER_LEN,
            IpAddr::V6(_) => 65_535 - udp::HEADER_LEN,
        };
        if (per.min(payload.len()) > max && !may_fragment) || payload.len() > whole_max {
            return Err(UdpSendError::MessageTooLong);
        }
        let limit = self.cfg.udp.send_buffer;
        let s = self.udp.sock_mut(h)?;
        if s.tx_bytes > 0 && s.tx_bytes + payload.len() > limit {
            self.counters.udp_sndbuf_errors += 1;
            self.udp.rearm(h, bits::WRITABLE);
            return Err(UdpSendError::WouldBlock);
        }
        s.tx_bytes += payload.len();
        if s.tx_bytes >= limit {
            self.udp.rearm(h, bits::WRITABLE);
        }
        let seg = if payload.len() <= seg { 0 } else { seg };
        let data = self.udp.buffer_of(payload);
        self.udp.tx.push_back(UdpOut {
            slot: h.index as usize,
            generation: h.generation,
            src: SocketAddr::new(src_ip, local.port()),
            dst: remote,
            seg,
            data,
            off: 0,
            may_fragment,
            frag_id: None,
            hops: group.then(|| self.mcast.hops(h)),
        });
        if group && self.mcast.loops(h) {
            let from = SocketAddr::new(src_ip, local.port());
            self.udp_loopback(from, remote, payload, seg);
        }
        Ok(payload.len())
    }
}
