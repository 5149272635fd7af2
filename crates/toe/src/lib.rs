//! The linerate connection engine: ARP, IPv6 neighbour discovery, IPv4, IPv6,
//! ICMP (echo, errors acted on), TCP and UDP as a sans-IO state machine, with
//! offload-aware output.
//!
//! The engine is sans-IO, as quinn-proto is: it is fed received frames and the
//! time, hands out frames to send, and says when it next needs the time. The
//! loop around it is the caller's; here two engines, offloads off, are joined by
//! a `Vec` each way, in virtual time:
//!
//! ```
//! use linerate_offload::OffloadMeta;
//! use linerate_toe::{Config, Engine, Instant};
//! use std::net::Ipv4Addr;
//!
//! let host = |i: u8| Config::new([2, 0, 0, 0, 0, i]).with_ipv4(Ipv4Addr::new(10, 0, 0, i), 24);
//! let mut engines = [Engine::new(host(1), 1), Engine::new(host(2), 2)];
//! let mut now = Instant::ZERO;
//!
//! let listener = engines[1].tcp_listen(80).unwrap();
//! let client = engines[0].tcp_connect(now, "10.0.0.2:80".parse().unwrap()).unwrap();
//! engines[0].tcp_send(client, b"hello, linerate").unwrap();
//!
//! let (mut server, mut got) = (None, Vec::new());
//! for _ in 0..100 {
//!     // Frames out of each engine, into the other.
//!     for from in 0..2 {
//!         let mut wire: Vec<(Vec<u8>, OffloadMeta)> = Vec::new();
//!         engines[from].poll_transmit(now, &mut |frame, meta| wire.push((frame.to_vec(), *meta)));
//!         for (frame, meta) in wire {
//!             engines[1 - from].handle_frame(now, &frame, &meta);
//!         }
//!     }
//!     // The application side.
//!     server = server.or_else(|| engines[1].tcp_accept(listener).ok());
//!     if let Some(s) = server {
//!         let mut buf = [0u8; 64];
//!         if let Ok(n) = engines[1].tcp_recv(s, &mut buf) {
//!             got.extend_from_slice(&buf[..n]);
//!         }
//!     }
//!     // Time moves to the next deadline either engine asks for.
//!     let next = engines.iter().filter_map(|e| e.poll_timeout()).min();
//!     now = next.unwrap_or(now).max(now);
//!     for e in &mut engines {
//!         e.handle_timeout(now);
//!     }
//! }
//! assert_eq!(got, b"hello, linerate");
//! ```
//!
//! Over a NIC, `linerate-rt`'s `Driver` is that loop (batched, with
//! back-pressure), and its `Runtime` runs one per queue on threads of its own.
//! With the `harness` feature, [`sim`] (a simulated link with faults, in
//! virtual time) and the fuzz harness are built too: test support, not part of
//! the engine.
//!
//! # Shape
//!
//! [`Engine`] is quinn-proto's `Endpoint` shape: [`Engine::handle_frame`] takes a
//! received frame with its [`OffloadMeta`](linerate_offload::OffloadMeta),
//! [`Engine::poll_transmit`] hands out frames to send, [`Engine::poll_timeout`] says
//! when to call [`Engine::handle_timeout`]. Time ([`Instant`], nanoseconds of the
//! caller's clock) is always an argument; randomness comes from the seed given to
//! [`Engine::new`] ([`rng`]). No thread, clock or socket inside: the same engine runs
//! in a simulation or on a NIC.
//!
//! The socket API sits on the engine: `tcp_listen`, `tcp_accept`, `tcp_connect`,
//! `tcp_send`, `tcp_recv`, `tcp_shutdown`, `tcp_close`, `tcp_abort`, `tcp_state`,
//! `tcp_readiness`, `tcp_info`, `tcp_set_keepalive`, each with an error type
//! of its own whose variants say what to do next ([`SendError::WouldBlock`]:
//! wait for [`Event::Writable`]), a failed connection's cause a
//! [`ConnectionError`] (refused, reset, timed out); and UDP: `udp_bind`, `udp_send_to`,
//! `udp_send_to_segmented` (USO), `udp_recv_from`, `udp_recv_with` (lending),
//! `udp_readiness`, `udp_info`, `udp_close`. Handles are slot indices with a
//! generation. Zero-copy variants:
//! `tcp_send_bytes` queues an owned [`Bytes`] without copying it, and
//! `tcp_recv_with` lends the received bytes in place to a closure that says how
//! many it took. [`Engine::memory_usage`] accounts for what the engine holds.
//!
//! # Design
//!
//! * **States as types** (`tcp::state`, netstack3's idea): one struct per RFC 9293
//!   state; the synchronized ones hold a send space (`Snd`: SND.UNA/NXT/MAX/WND,
//!   RTO estimator, congestion window, SACK scoreboard, recovery, timers) and a
//!   receive space (`Rcv`: RCV.NXT, the advertised right edge, TS.Recent, delayed-ACK
//!   state). FIN-WAIT-2 and TIME-WAIT have no send space, so no retransmission can be
//!   pending there.
//! * **Buffers**: per connection, a send buffer from SND.UNA that is a queue of
//!   byte chunks (`tcp::sendbuf`: copies fill a growing tail chunk,
//!   handed-over `Bytes` are queued as they are), and a receive ring whose free
//!   space past the readable bytes holds out-of-order data, tracked by an
//!   assembler (`tcp::assembler`) that also yields the SACK blocks. Both hold
//!   storage only while they hold data (the ring's comes from a per-thread
//!   `tcp::pool` and returns there when drained), so an idle connection
//!   costs its slot and its table entries. Output copies payload once, from the
//!   send buffer into the frame.
//! * **Timers**: each connection knows its earliest deadline (RTO, persist, delayed
//!   ACK, SYN retransmission, TIME-WAIT); the engine keeps them in an indexed
//!   binary heap, one entry per connection, removed with it. A connection whose
//!   handle was given up leaves its slot on reaching TIME-WAIT for a compact record
//!   (as Linux's `inet_timewait_sock`) that still answers per RFC 9293 and RFC 6191.
//!   Connections with something to send wait in a round-robin queue; lookup is a
//!   hash map on the 4-tuple with a keyed folded-multiply hash (O(1) up to a
//!   million connections, see `tests/it/scale.rs`).
//! * **Offloads**: with [`Config::offloads`] on, each connection emits one
//!   super-segment (up to 64 KiB of whole MSS-sized segments) per round, marked
//!   `gso: TcpV4/TcpV6 with size MSS` and `csum: Partial` with the pseudo-header sum
//!   in the checksum field; off, MSS-sized segments with full checksums. A received
//!   GRO super-segment is one segment that counts as the segments it holds.
//!   UDP likewise: partial checksums, one USO super-datagram per segmented
//!   send; a GRO super-datagram is split back into its datagrams.
//! * **ICMP errors** are validated against the socket they quote (RFC 5927)
//!   before they lower a destination's path MTU (a bounded, expiring cache) or
//!   fail a connection attempt; the engine's own ICMP errors and challenge ACKs
//!   are rate-limited.
//!
//! # Interfaces and routes
//!
//! An engine has interface 0 ([`Config::mac`], [`Config::ipv4`],
//! [`Config::ipv6`], [`Config::mtu`]) and, as a Linux host with eth0 and eth1,
//! any further ones in [`Config::interfaces`] ([`Interface`]: its own MAC,
//! addresses and MTU). One routing table ([`Config::routes`], [`config::RouteTable`])
//! serves them all: longest prefix, then lowest metric; a route may name its
//! output interface ([`Route::dev`]); each interface's prefixes are on-link
//! routes on it. A connection or datagram leaves by its route's interface, with
//! that interface's MAC, after resolving the next hop out of it, and with its
//! address as the source unless the socket is bound (RFC 6724 rule 5). The
//! arrival interface of a frame is [`Engine::handle_frame_on`]'s argument, or
//! the frame's port tag in [`Engine::handle_frames`] (`linerate_nic::Ports`,
//! which presents one NIC per interface as one to the runtime); ARP requests
//! and neighbour solicitations are answered for that interface's addresses
//! only. DHCP, SLAAC and multicast run on interface 0. Interfaces that cannot
//! work together (shared MACs, overlapping prefixes, a route naming a missing
//! interface) are a [`ConfigError`]. With one interface nothing of this costs
//! anything on the data path.
//!
//! # Fragments
//!
//! One switch, [`Config::fragments`] ([`FragConfig::enabled`]), turns IP
//! fragmentation and reassembly on. **Off by default**, and then a received
//! IPv4 fragment (MF set or a non-zero offset) or IPv6 fragment (a Fragment
//! extension header with M set or a non-zero offset) is dropped without an
//! answer and counted in [`Counters::ip_in_fragments_dropped`], and a UDP
//! datagram must fit the path MTU or [`Engine::udp_send_to`] fails with
//! [`UdpSendError::MessageTooLong`]. Why off:
//!
//! * TCP never needs it: every segment leaves with DF set (IPv4; IPv6 routers
//!   never fragment), the MSS announced and used is clamped to the interface
//!   MTU, and path MTU discovery (RFC 1191 / RFC 8201, `net::pmtu`) lowers it
//!   when a smaller link says so. A peer doing the same never sends fragments.
//! * Reassembly is a memory-exhaustion surface: buffers held for datagrams that
//!   may never complete, per source, under a timer (the "teardrop" and
//!   fragment-flood attacks; RFC 8900 describes why fragmentation is
//!   considered fragile). A TCP appliance pays nothing for it when off.
//!
//! On, for hosts that serve UDP protocols whose datagrams exceed the MTU (DNS
//! with EDNS, RFC 1122 section 3.3.2 and RFC 8200 section 5 expect every host
//! to reassemble):
//!
//! * fragments of every protocol (UDP, ICMP, and TCP from a peer that sends
//!   them) are reassembled by [`frag::Reassembler`] and the datagram processed
//!   as if it had come whole. It is bounded as Linux bounds it
//!   ([`FragConfig`]): a memory budget whose high threshold evicts the oldest
//!   datagrams down to the low one, a share per source, a fragment count per
//!   datagram, and timeouts (30 s IPv4, 60 s IPv6) answered with ICMP time
//!   exceeded, code 1, when the first fragment had arrived (RFC 792, RFC 8200
//!   section 4.5). Overlapping fragments drop the whole datagram and its
//!   fragments still to come (RFC 5722; IPv4 too); exact duplicates are
//!   ignored; a fragment not a multiple of 8 bytes with more to follow, one
//!   that would take the datagram past 65,535 bytes, one past the end a last
//!   fragment set, and an IPv6 first fragment without its whole header chain
//!   (RFC 7112) are dropped, the IPv6 ones answered with ICMPv6 parameter
//!   problem as RFC 8200 and RFC 7112 ask. Counters: `ip_reasm_reqds`,
//!   `ip_reasm_oks`, `ip_reasm_fails`, `ip_reasm_timeout`, `ip_reasm_overlaps`
//!   (the MIB's and Linux's names) and one per reason.
//! * a UDP datagram over the path MTU leaves in fragments, unless its socket
//!   refuses ([`Engine::udp_set_dont_fragment`]): over IPv4 with DF clear, over
//!   IPv6 behind a Fragment header whose identification follows RFC 7739.
//!
//! An IPv6 *atomic* fragment (Fragment header with offset 0 and M clear) is a
//! whole datagram: it is processed as one, as RFC 6946 section 4 requires, and
//! not counted, whether the switch is on or off. `tests/it/fragments.rs` checks
//! the default, `tests/it/reassembly.rs` the rest.
//!
//! # RFCs
//!
//! RFC 9293 (TCP), RFC 7323 (window scale, timestamps, PAWS), RFC 2018 (SACK),
//! RFC 6675 (SACK loss recovery), RFC 6582 (NewReno), RFC 5681 and RFC 3465
//! (congestion control, byte counting), RFC 9438 (CUBIC), RFC 6928 (initial window),
//! RFC 6298 (RTO), RFC 5961 (challenge ACKs), RFC 6528 (ISNs), RFC 4987 section 3.6
//! (SYN cookies), RFC 6056 (ephemeral ports), RFC 826 and RFC 1122 (ARP), RFC 4861
//! (NDP), RFC 792 / RFC 4443 (echo, errors), RFC 768 and RFC 1122 section 4.1
//! (UDP), RFC 1191 / RFC 8201 (path MTU discovery), RFC 5927 (ICMP attacks),
//! RFC 791 section 3.2 / RFC 8200 section 4.5 / RFC 5722 / RFC 7112 / RFC 7739
//! (fragments),
//! RFC 1122 section 4.2.3.9 and RFC 5461 (hard and soft errors), RFC 9293
//! section 3.8.4 and RFC 1122 section 4.2.3.6 (keep-alives), RFC 5961 section 7
//! (challenge ACK limit), RFC 6946 (IPv6 atomic fragments), RFC 5227 section 3
//! (gratuitous ARP).
#![forbid(unsafe_code)]

pub mod config;
pub mod counters;
pub mod engine;
pub mod frag;
#[cfg(feature = "harness")]
#[doc(hidden)]
pub mod harness;
pub(crate) mod net;
pub mod rng;
#[cfg(feature = "harness")]
pub mod sim;
pub mod tcp;
pub mod time;

pub use bytes::Bytes;
pub use config::{
    Config, ConfigError, FragConfig, Interface, NextHop, Route, RouteError, RouteKind, TcpConfig,
    UdpConfig,
};
pub use counters::Counters;
pub use engine::{
    AcceptError, Closing, Compat, ConnectError, ConnectionError, EPHEMERAL_PORTS, Engine, Event,
    FilterMode, InvalidHandle, ListenError, ListenerHandle, MAX_UDP_SEGMENTS, McastCounters,
    McastError, MemoryUsage, PoolSink, Readiness, RecvError, SendError, SocketHandle, TcpInfo,
    TxSink, UdpBindError, UdpHandle, UdpInfo, UdpRecvError, UdpSendError, Unroutable,
};
pub use engine::{
    AddrState, DhcpIn, DhcpSendError, DhcpStats, IfaceCounters, SlaacAddr, SlaacState,
};
pub use tcp::{EcnMode, Keepalive, TcpState};
pub use time::Instant;
