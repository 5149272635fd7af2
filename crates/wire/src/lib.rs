//! Zero-copy header views and builders, Internet checksums, and tunnel codecs.
//!
//! Two levels, as in smoltcp and etherparse:
//!
//! * **Views** (`ipv4::Packet<T>`, `tcp::Packet<T>`, ...) wrap a byte buffer. `new_checked`
//!   validates lengths once; after that the field accessors cannot fail, and setters
//!   (when the buffer is mutable) rewrite fields in place. GSO, GRO and the engine
//!   work on frames through these.
//! * **Headers** (owned values) are etherparse's for the standard protocols
//!   (re-exported as [`etherparse`]) and this crate's `Repr` types for what etherparse
//!   lacks (VXLAN, NVGRE/GRE, GENEVE with options).
//!
//! [`layout::parse`] finds, in one pass, the kind and offset of every header of a
//! frame: outer L2/L3/L4, one tunnel header, inner L2/L3/L4. GRO, GSO and RSS all
//! read that one [`layout::Layout`]. [`build::FrameBuilder`] writes whole frames,
//! with lengths and checksums filled in.
//!
//! ```
//! use linerate_wire::build::{FrameBuilder, Ip, L4};
//! use linerate_wire::layout::{self, L3Kind, L4Kind, TunnelKind};
//!
//! // TCP over IPv4, inside VXLAN (VNI 42) over IPv6.
//! let frame = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(40000, 80))
//!     .vxlan(42, Ip::v6([0xfd; 16], [0xfe; 16]))
//!     .build(b"hello");
//! let l = layout::parse(&frame).unwrap();
//! assert_eq!(l.tunnel.unwrap().kind, TunnelKind::Vxlan);
//! assert_eq!(l.tunnel.unwrap().vni, 42);
//! assert_eq!(l.outer.l3, L3Kind::Ipv6);
//! let inner = l.inner.unwrap();
//! assert_eq!((inner.l3, inner.l4), (L3Kind::Ipv4, L4Kind::Tcp));
//! assert_eq!(&frame[usize::from(l.payload)..], b"hello");
//! ```
#![deny(unsafe_code)]

pub mod error;
pub use error::{Error, Layer, Result};

pub mod checksum;

pub mod arp;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod mcast;
pub mod tcp;
pub mod udp;

pub mod geneve;
pub mod gre;
pub mod vxlan;

pub mod build;
pub mod layout;

#[cfg(feature = "harness")]
#[doc(hidden)]
pub mod harness;

pub use etherparse;
