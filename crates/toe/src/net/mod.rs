//! The network layer's state: the neighbour cache shared by ARP (RFC 826) and
//! IPv6 neighbour discovery (RFC 4861).

pub(crate) mod neighbor;
