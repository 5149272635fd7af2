//! Why a NIC operation failed: [`NicError`], with the frame-metadata problems
//! ([`MetaError`]) and the configuration problems ([`NicConfigError`]) as their
//! own types, and the offload crate's segmentation and checksum errors carried
//! whole ([`GsoError`], [`CsumError`]), so a caller can match on what went wrong
//! and read every figure the failing layer knew.

use crate::buf::BufError;
use crate::caps::Unsupported;
use linerate_offload::{CsumError, GsoError, GsoType};

/// Why a NIC operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum NicError {
    /// There is no queue `queue`; the NIC has `queues`.
    NoQueue {
        /// The queue asked for.
        queue: usize,
        /// How many the NIC has.
        queues: usize,
    },
    /// A frame longer than the MTU allows, without a segmentation request (or with
    /// one whose segments would be too long, or a super-frame over the limit).
    Oversize {
        /// The frame's length, or the length of one of its segments.
        len: usize,
        /// The most allowed.
        limit: usize,
    },
    /// A frame asks for an offload the backend does not have.
    Unsupported(Unsupported),
    /// A frame whose headers cannot be parsed where the backend needs them.
    Malformed(linerate_wire::Error),
    /// A frame whose metadata cannot be honoured as it stands.
    InvalidMeta(MetaError),
    /// Software segmentation refused a super-frame (its headers parsed, but
    /// disagree with the request or with themselves).
    Gso(GsoError),
    /// A partial checksum could not be completed in software.
    Checksum(CsumError),
    /// A frame the kernel refused (`EINVAL` on a TAP write: a bad
    /// `virtio_net_hdr` or a frame the kernel cannot take).
    Rejected {
        /// The frame's length.
        len: usize,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// A buffer operation did not fit.
    Buffer(BufError),
    /// An operating-system call failed.
    Io(std::io::Error),
    /// The operating system refused for lack of privilege (`EPERM`, `EACCES`):
    /// TAP devices, AF_XDP sockets and XDP programs need root (`CAP_NET_ADMIN`,
    /// `CAP_NET_RAW`, `CAP_BPF`).
    PermissionDenied {
        /// What was being done.
        what: &'static str,
        /// What the kernel said.
        error: std::io::Error,
    },
    /// A configuration value was refused.
    Config(NicConfigError),
    /// A frame's metadata has no `virtio_net_hdr` form the backend can write
    /// (GSO inside GRE; a tunnel request without the 24-byte header), or the
    /// header is inconsistent with the frame.
    Virtio(linerate_offload::virtio::VirtioError),
    /// The interface is down (a TAP whose link is not up refuses frames with
    /// `EIO`): the frame is dropped and counted (`tx_dropped_link_down`). Not
    /// fatal: bring the link up (`ip link set DEV up`) and frames flow again.
    LinkDown,
}

impl core::fmt::Display for NicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NicError::NoQueue { queue, queues } => write!(
                f,
                "no queue {queue}: the NIC has {queues} (queues count from 0)"
            ),
            NicError::Oversize { len, limit } => write!(
                f,
                "frame of {len} bytes exceeds the limit of {limit} and is not marked for \
                 segmentation: send at most the MTU, or mark it for GSO"
            ),
            NicError::Unsupported(u) => write!(f, "unsupported offload: {u}"),
            NicError::Malformed(e) => write!(f, "malformed frame: {e}"),
            NicError::InvalidMeta(e) => write!(f, "invalid offload metadata: {e}"),
            NicError::Gso(e) => write!(
                f,
                "software segmentation refused the super-frame: {e}; fix its headers or \
                 its GSO request"
            ),
            NicError::Checksum(e) => write!(
                f,
                "software checksum completion failed: {e}; point the partial checksum at \
                 the frame's TCP or UDP header"
            ),
            NicError::Rejected { len, error } => {
                write!(f, "the kernel refused a {len}-byte frame: {error}")
            }
            NicError::Buffer(e) => write!(f, "buffer: {e}"),
            NicError::Io(e) => write!(f, "I/O: {e}"),
            NicError::PermissionDenied { what, error } => {
                write!(f, "{what}: {error} (this needs root)")
            }
            NicError::Config(e) => write!(f, "configuration: {e}"),
            NicError::Virtio(e) => write!(f, "virtio_net_hdr: {e}"),
            NicError::LinkDown => f.write_str(
                "the interface is down: frames are dropped until it is up (ip link set DEV up)",
            ),
        }
    }
}

impl std::error::Error for NicError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NicError::Unsupported(e) => Some(e),
            NicError::Malformed(e) => Some(e),
            NicError::InvalidMeta(e) => Some(e),
            NicError::Gso(e) => Some(e),
            NicError::Checksum(e) => Some(e),
            NicError::Rejected { error, .. }
            | NicError::Io(error)
            | NicError::PermissionDenied { error, .. } => Some(error),
            NicError::Buffer(e) => Some(e),
            NicError::Config(e) => Some(e),
            NicError::Virtio(e) => Some(e),
            NicError::NoQueue { .. } | NicError::Oversize { .. } | NicError::LinkDown => None,
        }
    }
}

impl From<std::io::Error> for NicError {
    fn from(e: std::io::Error) -> Self {
        NicError::Io(e)
    }
}

impl From<BufError> for NicError {
    fn from(e: BufError) -> Self {
        NicError::Buffer(e)
    }
}

impl From<Unsupported> for NicError {
    fn from(e: Unsupported) -> Self {
        NicError::Unsupported(e)
    }
}

impl From<MetaError> for NicError {
    fn from(e: MetaError) -> Self {
        NicError::InvalidMeta(e)
    }
}

impl From<NicConfigError> for NicError {
    fn from(e: NicConfigError) -> Self {
        NicError::Config(e)
    }
}

impl From<linerate_rss::ConfigError> for NicError {
    fn from(e: linerate_rss::ConfigError) -> Self {
        NicError::Config(NicConfigError::Rss(e))
    }
}

impl From<GsoError> for NicError {
    /// Headers that do not parse are [`NicError::Malformed`], as the transmit
    /// check says of them; the rest is [`NicError::Gso`].
    fn from(e: GsoError) -> Self {
        match e {
            GsoError::Layout(w) => NicError::Malformed(w),
            e => NicError::Gso(e),
        }
    }
}

impl From<CsumError> for NicError {
    /// Headers that do not parse are [`NicError::Malformed`]; the rest is
    /// [`NicError::Checksum`].
    fn from(e: CsumError) -> Self {
        match e {
            CsumError::Layout(w) => NicError::Malformed(w),
            e => NicError::Checksum(e),
        }
    }
}

/// Why a frame's offload metadata cannot be honoured as it stands (the frame
/// itself parses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetaError {
    /// A segmentation request with segment size 0.
    ZeroSegmentSize,
    /// A scatter-gather super-frame whose headers run past its head: the
    /// segmenter writes each segment's headers from the head alone.
    HeadersOutsideHead {
        /// Bytes of headers (outer and inner).
        headers: usize,
        /// Bytes in the frame's head.
        head: usize,
    },
    /// The segmentation kind does not match the frame's innermost headers
    /// (TCPv4 needs IPv4 and TCP, TCPv6 IPv6 and TCP, UDP L4 UDP).
    KindMismatch {
        /// The kind asked for.
        kind: GsoType,
    },
    /// The super-frame would make more segments than the backend takes from
    /// one frame ([`crate::NicCaps::max_gso_segs`]).
    TooManySegments {
        /// Segments the frame would make.
        segments: usize,
        /// The most the backend takes.
        limit: u16,
    },
    /// A frame too long for the length fields of the outer headers a tunnel
    /// puts in front of it (the outer IP length is 16 bits).
    EncapOverflow {
        /// The inner frame's length.
        len: usize,
    },
}

impl core::fmt::Display for MetaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MetaError::ZeroSegmentSize => f.write_str(
                "a segmentation request with segment size 0: set the size to the MSS, or \
                 drop the request",
            ),
            MetaError::HeadersOutsideHead { headers, head } => write!(
                f,
                "the super-frame's {headers} bytes of headers run past its {head}-byte head: \
                 build the headers in the head (or linearize the frame)"
            ),
            MetaError::KindMismatch { kind } => write!(
                f,
                "segmentation kind {kind:?} does not match the frame's headers: ask for the \
                 kind of its innermost IP and transport headers"
            ),
            MetaError::TooManySegments { segments, limit } => write!(
                f,
                "the super-frame makes {segments} segments, the backend takes at most \
                 {limit}: send smaller super-frames or larger segments"
            ),
            MetaError::EncapOverflow { len } => write!(
                f,
                "a {len}-byte frame does not fit the length fields of the tunnel's outer \
                 headers: send frames of at most the tunnel's max_gso_size"
            ),
        }
    }
}

impl std::error::Error for MetaError {}

/// A configuration the NIC layer refused, at open or when a [`crate::Shim`] is
/// built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NicConfigError {
    /// The software RSS steering could not be built.
    Rss(linerate_rss::ConfigError),
    /// A steering given to a shim spreads flows over another number of queues
    /// than the shim presents.
    SteeringQueues {
        /// Queues of the steering's indirection table.
        steering: u16,
        /// Queues the shim presents.
        presented: u16,
    },
    /// An interface name the kernel cannot take: 1 to 15 bytes, no NUL.
    InterfaceName {
        /// The name given.
        name: String,
    },
    /// An AF_XDP ring size that is not a power of two (or is zero, or so large
    /// the UMEM's frame count overflows).
    RingSize {
        /// The size given.
        size: u32,
    },
    /// An AF_XDP UMEM frame size that is not a power of two of at least 2048.
    FrameSize {
        /// The size given.
        size: u32,
    },
    /// libxdp bound the socket without handing back its own fill and
    /// completion rings: the UMEM is shared with another socket.
    SharedUmem,
    /// Zero-copy AF_XDP was asked for (`XdpBind::ZeroCopy`) and the driver
    /// (or the generic attach) does not have it.
    ZeroCopy {
        /// The interface.
        interface: String,
        /// What the kernel said.
        error: String,
    },
}

impl core::fmt::Display for NicConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            NicConfigError::Rss(e) => write!(f, "RSS steering: {e}"),
            NicConfigError::SteeringQueues {
                steering,
                presented,
            } => write!(
                f,
                "the steering spreads flows over {steering} queues, the shim presents \
                 {presented}: build the steering for {presented} queues, or present {steering}"
            ),
            NicConfigError::InterfaceName { name } => write!(
                f,
                "interface name {name:?} is not 1 to 15 bytes without NUL: choose a shorter \
                 name"
            ),
            NicConfigError::RingSize { size } => write!(
                f,
                "AF_XDP ring size {size}: use a power of two, such as 2048"
            ),
            NicConfigError::FrameSize { size } => write!(
                f,
                "AF_XDP frame size {size}: use a power of two of at least 2048, such as 4096"
            ),
            NicConfigError::ZeroCopy { interface, error } => write!(
                f,
                "{interface} cannot bind AF_XDP zero-copy ({error}): its driver lacks it or the \
                 program is attached generically; use XdpBind::Auto to fall back to copy mode, \
                 or XdpBind::Copy"
            ),
            NicConfigError::SharedUmem => f.write_str(
                "libxdp handed back no fill and completion rings (the UMEM is shared): give \
                 each queue its own UMEM",
            ),
        }
    }
}

impl std::error::Error for NicConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            NicConfigError::Rss(e) => Some(e),
            _ => None,
        }
    }
}

/// Checks an interface name as the kernel's `struct ifreq` takes it.
#[cfg(target_os = "linux")]
pub(crate) fn check_ifname(name: &str) -> Result<(), NicConfigError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        Err(NicConfigError::InterfaceName {
            name: name.to_owned(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn gso_errors_keep_their_figures() {
        let e = NicError::from(GsoError::LengthMismatch {
            layer: linerate_wire::Layer::Ipv4,
            declared: 100,
            actual: 120,
        });
        assert!(matches!(
            e,
            NicError::Gso(GsoError::LengthMismatch {
                declared: 100,
                actual: 120,
                ..
            })
        ));
        assert!(e.to_string().contains("120"), "{e}");
        assert!(e.source().is_some());
        let w = linerate_wire::Error::truncated(linerate_wire::Layer::Tcp, 20, 8);
        assert!(matches!(NicError::from(GsoError::Layout(w)), NicError::Malformed(x) if x == w));
    }

    #[test]
    fn checksum_errors_keep_their_figures() {
        let e = NicError::from(CsumError::OutOfFrame {
            start: 34,
            offset: 16,
            len: 40,
        });
        assert!(matches!(
            e,
            NicError::Checksum(CsumError::OutOfFrame { start: 34, .. })
        ));
        assert!(e.to_string().contains("34"), "{e}");
    }

    #[test]
    fn config_errors_say_what_to_do() {
        let e = NicError::from(NicConfigError::SteeringQueues {
            steering: 4,
            presented: 2,
        });
        let s = e.to_string();
        assert!(s.contains("4 queues") && s.contains("for 2 queues"), "{s}");
        #[cfg(target_os = "linux")]
        {
            assert_eq!(check_ifname("eth0"), Ok(()));
            for bad in ["", "sixteen-bytes-xx", "a\0b"] {
                assert_eq!(
                    check_ifname(bad),
                    Err(NicConfigError::InterfaceName { name: bad.into() })
                );
            }
        }
    }
}
