//! The network layer's state: the neighbour cache shared by ARP (RFC 826) and
//! IPv6 neighbour discovery (RFC 4861), the path MTU cache (RFC 1191, RFC 8201)
//! and the rate limits on what input may make the engine send.

pub(crate) mod neighbor;
pub(crate) mod pmtu;
pub(crate) mod ratelimit;
