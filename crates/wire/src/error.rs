//! Typed parse errors: which layer, and what was wrong with it.
//!
//! Every parser in this crate returns [`Error`] instead of panicking. The error
//! names the [`Layer`] whose header was bad and the problem, so a caller (or a
//! drop counter) can say *why* a frame was refused, as `ethtool -S` does.

use core::fmt;

/// The protocol layer an error was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// 802.1Q / 802.1ad VLAN tag.
    Vlan,
    /// ARP packet.
    Arp,
    /// IPv4 header (and its options).
    Ipv4,
    /// IPv6 fixed header.
    Ipv6,
    /// An IPv6 extension header.
    Ipv6Ext,
    /// ICMPv4 message.
    Icmpv4,
    /// ICMPv6 message (including NDP).
    Icmpv6,
    /// UDP header.
    Udp,
    /// TCP header.
    Tcp,
    /// A TCP option.
    TcpOption,
    /// VXLAN header.
    Vxlan,
    /// GRE / NVGRE header.
    Gre,
    /// GENEVE header.
    Geneve,
    /// A GENEVE option TLV.
    GeneveOption,
}

impl Layer {
    /// A short lower-case name, as used in messages and counters.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Ethernet => "ethernet",
            Layer::Vlan => "vlan",
            Layer::Arp => "arp",
            Layer::Ipv4 => "ipv4",
            Layer::Ipv6 => "ipv6",
            Layer::Ipv6Ext => "ipv6-ext",
            Layer::Icmpv4 => "icmpv4",
            Layer::Icmpv6 => "icmpv6",
            Layer::Udp => "udp",
            Layer::Tcp => "tcp",
            Layer::TcpOption => "tcp-option",
            Layer::Vxlan => "vxlan",
            Layer::Gre => "gre",
            Layer::Geneve => "geneve",
            Layer::GeneveOption => "geneve-option",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a header could not be parsed or built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before the header (or the length it declares) does.
    Truncated {
        /// Layer whose header is cut short.
        layer: Layer,
        /// Bytes the header needs, counted from its own start.
        need: usize,
        /// Bytes that were available from the header's start.
        have: usize,
    },
    /// A field holds a value this layer does not accept.
    Invalid {
        /// Layer of the offending header.
        layer: Layer,
        /// Field name, as in the RFC (for example `"ihl"`, `"version"`).
        field: &'static str,
        /// The value found.
        value: u32,
    },
    /// A chain (VLAN tags, IPv6 extension headers, options) is longer than the
    /// bound this crate walks.
    TooMany {
        /// Layer of the chain.
        layer: Layer,
        /// The bound that was exceeded.
        limit: usize,
    },
    /// A buffer given to a builder is too small for what it must hold.
    BufferTooSmall {
        /// Layer being written.
        layer: Layer,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

impl Error {
    /// The layer the error belongs to.
    pub const fn layer(&self) -> Layer {
        match *self {
            Error::Truncated { layer, .. }
            | Error::Invalid { layer, .. }
            | Error::TooMany { layer, .. }
            | Error::BufferTooSmall { layer, .. } => layer,
        }
    }

    /// Shorthand for [`Error::Truncated`].
    #[cold]
    pub const fn truncated(layer: Layer, need: usize, have: usize) -> Self {
        Error::Truncated { layer, need, have }
    }

    /// Shorthand for [`Error::Invalid`].
    #[cold]
    pub const fn invalid(layer: Layer, field: &'static str, value: u32) -> Self {
        Error::Invalid {
            layer,
            field,
            value,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { layer, need, have } => {
                write!(f, "{layer}: truncated, need {need} bytes, have {have}")
            }
            Error::Invalid {
                layer,
                field,
                value,
            } => {
                write!(f, "{layer}: invalid {field} {value:#x}")
            }
            Error::TooMany { layer, limit } => {
                write!(f, "{layer}: chain longer than the limit of {limit}")
            }
            Error::BufferTooSmall { layer, need, have } => {
                write!(
                    f,
                    "{layer}: output buffer too small, need {need} bytes, have {have}"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `need` bytes for `layer`.
#[inline]
pub(crate) fn need(layer: Layer, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::truncated(layer, need, buf.len()))
    } else {
        Ok(())
    }
}
