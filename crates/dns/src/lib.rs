//! A sans-IO DNS stub resolver: A and AAAA lookups over UDP with EDNS0 and
//! TCP fallback, retries across servers, and a small cache honouring TTLs.
//!
//! Like the engine (`linerate-toe`), the [`Resolver`] is a state machine with
//! no socket, clock or thread: it is fed datagrams, TCP bytes and the time,
//! and says what to send and when to call back. `linerate-rt`'s `Resolver`
//! runs it over the runtime's sockets; tests run it in simulated time.
//!
//! ```
//! use linerate_dns::{Config, Instant, Io, Resolver};
//!
//! let server = "192.0.2.53:53".parse()?;
//! let mut r = Resolver::new(Config::new(vec![server]), 0x5eed)?;
//! let now = Instant::ZERO;
//! let id = r.lookup_host(now, "www.example.test")?;
//! // Two questions, AAAA and A, each from a socket of its own.
//! let mut queries = Vec::new();
//! while let Some(io) = r.poll_io() {
//!     if let Io::UdpSend { exchange, server, data } = io {
//!         queries.push((exchange, server, data));
//!     }
//! }
//! assert_eq!(queries.len(), 2);
//! // No answer: after the timeout (5 s) and the tries on every server
//! // (2 each), the lookup fails.
//! let mut t = now;
//! while let Some(deadline) = r.poll_timeout() {
//!     t = deadline;
//!     r.handle_timeout(t);
//! }
//! let (done, result) = r.poll_answer().expect("one answer");
//! assert_eq!(done, id);
//! assert_eq!(result, Err(linerate_dns::LookupError::TimedOut));
//! assert_eq!(t, Instant::from_millis(10_000));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Modules
//!
//! * [`message`]: the wire format, parsed into owned values (zero-panic on any
//!   input, typed errors) and queries written.
//! * [`name`]: domain names, with bounds-checked decompression.
//! * [`resolver`]: the state machine: exchanges, validation, retries, TCP
//!   fallback, CNAMEs, the cache.
//!
//! # Not implemented
//!
//! Search domains and `ndots`; record types other than A and AAAA (and the
//! CNAME and SOA records that answers carry); DNSSEC validation; DNS over
//! TLS or HTTPS; 0x20 case randomisation; a retry without EDNS0 when a
//! server answers FORMERR (it is passed over like a failed server).
#![forbid(unsafe_code)]

mod cache;
pub mod config;
#[cfg(feature = "harness")]
pub mod harness;
pub mod message;
pub mod name;
pub mod resolver;
mod rng;
mod time;

pub use config::{Config, ConfigError, DNS_PORT};
pub use message::{Message, ParseError, Rcode, RecordType};
pub use name::{Name, NameError};
pub use resolver::{ExchangeId, Io, Lookup, LookupError, LookupId, Resolver, Stats};
pub use time::Instant;
