//! Flows as the stack sees them: addresses, transport and ports of one direction,
//! and the hash input a NIC would build from a packet of the flow.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::input::{HashInput, HashTypes, Transport, concat16, shape};

/// A flow's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowAddrs {
    /// IPv4 source and destination.
    V4 {
        /// Source address.
        src: Ipv4Addr,
        /// Destination address.
        dst: Ipv4Addr,
    },
    /// IPv6 source and destination.
    V6 {
        /// Source address.
        src: Ipv6Addr,
        /// Destination address.
        dst: Ipv6Addr,
    },
}

/// A flow as one direction sees it: addresses, transport and ports.
///
/// ```
/// use linerate_rss::FlowTuple;
/// use std::net::Ipv4Addr;
/// let out = FlowTuple::tcp4(Ipv4Addr::new(10, 0, 0, 1), 40000, Ipv4Addr::new(10, 0, 0, 2), 80);
/// let back = out.reversed();
/// assert_eq!(back, FlowTuple::tcp4(Ipv4Addr::new(10, 0, 0, 2), 80, Ipv4Addr::new(10, 0, 0, 1), 40000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowTuple {
    /// Addresses.
    pub addrs: FlowAddrs,
    /// TCP, UDP or other (ports are ignored for other).
    pub transport: Transport,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl FlowTuple {
    /// A TCP/IPv4 flow.
    pub fn tcp4(src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) -> FlowTuple {
        FlowTuple::v4(Transport::Tcp, src, src_port, dst, dst_port)
    }

    /// A UDP/IPv4 flow.
    pub fn udp4(src: Ipv4Addr, src_port: u16, dst: Ipv4Addr, dst_port: u16) -> FlowTuple {
        FlowTuple::v4(Transport::Udp, src, src_port, dst, dst_port)
    }

    /// A TCP/IPv6 flow.
    pub fn tcp6(src: Ipv6Addr, src_port: u16, dst: Ipv6Addr, dst_port: u16) -> FlowTuple {
        FlowTuple::v6(Transport::Tcp, src, src_port, dst, dst_port)
    }

    /// A UDP/IPv6 flow.
    pub fn udp6(src: Ipv6Addr, src_port: u16, dst: Ipv6Addr, dst_port: u16) -> FlowTuple {
        FlowTuple::v6(Transport::Udp, src, src_port, dst, dst_port)
    }

    /// An IPv4 flow of `transport` between the given ends.
    pub fn v4(
        transport: Transport,
        src: Ipv4Addr,
        src_port: u16,
        dst: Ipv4Addr,
        dst_port: u16,
    ) -> FlowTuple {
        FlowTuple {
            addrs: FlowAddrs::V4 { src, dst },
            transport,
            src_port,
            dst_port,
        }
    }

    /// An IPv6 flow of `transport` between the given ends.
    pub fn v6(
        transport: Transport,
        src: Ipv6Addr,
        src_port: u16,
        dst: Ipv6Addr,
        dst_port: u16,
    ) -> FlowTuple {
        FlowTuple {
            addrs: FlowAddrs::V6 { src, dst },
            transport,
            src_port,
            dst_port,
        }
    }

    /// True for an IPv6 flow.
    pub fn is_v6(&self) -> bool {
        matches!(self.addrs, FlowAddrs::V6 { .. })
    }

    /// The same flow seen from the other end.
    pub fn reversed(&self) -> FlowTuple {
        let addrs = match self.addrs {
            FlowAddrs::V4 { src, dst } => FlowAddrs::V4 { src: dst, dst: src },
            FlowAddrs::V6 { src, dst } => FlowAddrs::V6 { src: dst, dst: src },
        };
        FlowTuple {
            addrs,
            transport: self.transport,
            src_port: self.dst_port,
            dst_port: self.src_port,
        }
    }

    /// The hash input of this flow under `types`, as a NIC would build it from a
    /// packet of the flow; `None` if the flow's type (and its family's address-only
    /// type) is disabled.
    pub fn input(&self, types: HashTypes) -> Option<HashInput> {
        let kind = types.select(self.is_v6(), self.transport)?;
        let ports = Some(HashInput::ports(self.src_port, self.dst_port)).filter(|_| shape(kind).1);
        Some(match self.addrs {
            FlowAddrs::V4 { src, dst } => {
                let [a, b, c, d] = src.octets();
                let [e, f, g, h] = dst.octets();
                HashInput::build(kind, &[a, b, c, d, e, f, g, h], ports)
            }
            FlowAddrs::V6 { src, dst } => {
                HashInput::build(kind, &concat16(src.octets(), dst.octets()), ports)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_input_follows_mask() {
        let f = FlowTuple::udp4(Ipv4Addr::new(1, 2, 3, 4), 7, Ipv4Addr::new(5, 6, 7, 8), 9);
        let i = f.input(HashTypes::ALL).unwrap();
        assert_eq!(i, HashInput::udp_ipv4([1, 2, 3, 4], [5, 6, 7, 8], 7, 9));
        let i = f.input(HashTypes::IPV4).unwrap();
        assert_eq!(i, HashInput::ipv4([1, 2, 3, 4], [5, 6, 7, 8]));
        assert_eq!(f.input(HashTypes::TCP_IPV4), None);
    }
}
