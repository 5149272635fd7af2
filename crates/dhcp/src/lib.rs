//! A sans-IO DHCPv4 client (RFC 2131, RFC 2132): discover, request, the ARP
//! probe of the offered address and a decline on a conflict (RFC 5227),
//! renew at T1, rebind at T2, expiry and release.
//!
//! Like the engine (`linerate-toe`) and the resolver (`linerate-dns`), the
//! [`Client`] has no socket, clock or thread: it is fed datagrams, ARP
//! packets and the time, and says what to send and when to call back.
//! `linerate-rt` runs it over the engine's DHCP channel and applies the
//! lease to the engine; tests run it in simulated time.
//!
//! ```
//! use linerate_dhcp::{Client, Config, Instant, Io, Message, MessageType};
//!
//! let mac = [2, 0, 0, 0, 0, 1];
//! let mut c = Client::new(Config::new(mac), 0x5eed);
//! c.handle_timeout(Instant::ZERO);
//! // A DISCOVER, broadcast from 0.0.0.0.
//! let Some(Io::Send(t)) = c.poll_io() else { panic!("a DISCOVER") };
//! assert_eq!(t.dst, std::net::Ipv4Addr::BROADCAST);
//! let m = Message::parse(&t.data)?;
//! assert_eq!(m.kind(), Some(MessageType::Discover));
//! // Nobody answers: it is sent again after about 4 s (RFC 2131 section 4.1).
//! let again = c.poll_timeout().expect("a retransmission");
//! assert!(again >= Instant::from_millis(3_000) && again <= Instant::from_millis(5_000));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Modules
//!
//! * [`message`]: the wire format, parsed into owned values (zero-panic on
//!   any input, typed errors) and written.
//! * [`client`]: the state machine.
//!
//! # Not implemented
//!
//! DHCPINFORM; choosing among several offers (the first valid one
//! is taken); defending the address after it is bound (RFC 5227 section
//! 2.4: the engine counts conflicts in `arp_conflicts`); authentication
//! (RFC 3118); relay agents' options.
#![forbid(unsafe_code)]

pub mod client;
#[cfg(feature = "harness")]
pub mod harness;
pub mod message;
mod time;

pub use client::{ArpProbe, Client, Config, Event, Io, Lease, LostReason, State, Stats, Transmit};
pub use message::{CLIENT_PORT, Message, MessageType, ParseError, SERVER_PORT};
pub use time::Instant;
