//! The transmit checks every backend applies before a frame goes on the wire.

use crate::caps::NicCaps;
use crate::counters::Counter;
use crate::error::{MetaError, NicError};
use crate::frame::Frame;
use linerate_offload::GsoType;
use linerate_wire::layout::{L3Kind, L4Kind, Layout};
use linerate_wire::{Layer, ethernet};

/// Checks that `frame` may go on a wire with `caps` as it is: at least an
/// Ethernet header; only offloads the backend has; not longer than the MTU
/// unless marked for segmentation; and if marked, a request that matches the
/// headers, whose segments fit the MTU and whose size is within the GSO limits.
///
/// Returns the frame's layout when it had to parse it (super-frames); on
/// refusal, also says which `tx_dropped_<reason>` counter to bump.
///
/// Inline for the common frame (no segmentation request, no partial checksum,
/// its head an Ethernet header at least, within the MTU): a backend checks
/// every wire frame, software GSO's segments included, and a call per frame
/// shows in a profile of the software-offload bulk cell (`offload_report --
/// --only linerate-on`). Anything else takes the full check, out of line.
#[inline]
pub fn check_tx(caps: &NicCaps, frame: &Frame) -> Result<Option<Layout>, (NicError, Counter)> {
    if frame.meta.gso.is_none()
        && !matches!(frame.meta.csum, linerate_offload::Checksum::Partial { .. })
        && frame.bytes().len() >= ethernet::HEADER_LEN
        && frame.len() <= caps.max_frame_len(0)
    {
        return Ok(None);
    }
    check_tx_full(caps, frame)
}

/// [`check_tx`] of any frame.
#[inline(never)]
fn check_tx_full(caps: &NicCaps, frame: &Frame) -> Result<Option<Layout>, (NicError, Counter)> {
    let bytes = frame.bytes();
    let len = frame.len();
    let malformed = |e| (NicError::Malformed(e), Counter::TxDroppedInvalid);
    if bytes.len() < ethernet::HEADER_LEN {
        return Err(malformed(linerate_wire::Error::truncated(
            Layer::Ethernet,
            ethernet::HEADER_LEN,
            bytes.len(),
        )));
    }
    caps.offloads
        .check_tx(&frame.meta)
        .map_err(|u| (NicError::Unsupported(u), Counter::TxDroppedUnsupported))?;
    let Some(gso) = &frame.meta.gso else {
        if len <= caps.max_frame_len(0) {
            return Ok(None);
        }
        let tags = ethernet::walk_vlans(bytes).map_err(malformed)?.tags;
        let limit = caps.max_frame_len(u8::try_from(tags).unwrap_or(u8::MAX));
        if len > limit {
            return Err((
                NicError::Oversize { len, limit },
                Counter::TxDroppedOversize,
            ));
        }
        return Ok(None);
    };
    let invalid = |e| (NicError::InvalidMeta(e), Counter::TxDroppedInvalid);
    if gso.size == 0 {
        return Err(invalid(MetaError::ZeroSegmentSize));
    }
    // A scatter-gather super-frame is parsed in its head, against its whole
    // length; its headers must all be there.
    let layout = frame
        .with_probe(linerate_wire::layout::parse)
        .map_err(malformed)?;
    if layout.header_len() > frame.head_len() {
        return Err(invalid(MetaError::HeadersOutsideHead {
            headers: layout.header_len(),
            head: frame.head_len(),
        }));
    }
    let inner = layout.innermost();
    let kind_ok = match gso.kind {
        GsoType::TcpV4 => inner.l3 == L3Kind::Ipv4 && inner.l4 == L4Kind::Tcp,
        GsoType::TcpV6 => inner.l3 == L3Kind::Ipv6 && inner.l4 == L4Kind::Tcp,
        GsoType::UdpL4 => inner.l4 == L4Kind::Udp,
    };
    if !kind_ok {
        return Err(invalid(MetaError::KindMismatch { kind: gso.kind }));
    }
    let l2 = usize::from(layout.outer.l3_offset);
    let limit = caps.max_gso_size as usize + l2;
    if len > limit {
        return Err((
            NicError::Oversize { len, limit },
            Counter::TxDroppedOversize,
        ));
    }
    let headers = layout.header_len();
    let segment = headers + usize::from(gso.size);
    let seg_limit = usize::from(caps.mtu) + l2;
    if segment > seg_limit && len > seg_limit {
        return Err((
            NicError::Oversize {
                len: segment,
                limit: seg_limit,
            },
            Counter::TxDroppedOversize,
        ));
    }
    let payload = len.saturating_sub(headers);
    let segments = payload.div_ceil(usize::from(gso.size));
    if segments > usize::from(caps.max_gso_segs) {
        return Err(invalid(MetaError::TooManySegments {
            segments,
            limit: caps.max_gso_segs,
        }));
    }
    Ok(Some(layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::PacketBuf;
    use crate::caps::Offloads;
    use linerate_offload::{Checksum, Gso, OffloadMeta};
    use linerate_wire::build::{FrameBuilder, Ip, L4};

    fn tcp4(payload: usize) -> Vec<u8> {
        FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
            .build(&vec![0xab; payload])
    }

    fn gso_frame(bytes: &[u8], size: u16) -> Frame {
        Frame::new(
            PacketBuf::from_slice(bytes),
            OffloadMeta {
                gso: Some(Gso::new(GsoType::TcpV4, size)),
                csum: Checksum::Partial {
                    start: 34,
                    offset: 16,
                },
                ..OffloadMeta::plain()
            },
        )
    }

    #[test]
    fn mtu_is_enforced_without_gso() {
        let caps = NicCaps::plain();
        let ok = Frame::plain(PacketBuf::from_slice(&tcp4(1460)));
        assert!(check_tx(&caps, &ok).is_ok());
        let big = Frame::plain(PacketBuf::from_slice(&tcp4(1461)));
        match check_tx(&caps, &big) {
            Err((
                NicError::Oversize {
                    len: 1515,
                    limit: 1514,
                },
                Counter::TxDroppedOversize,
            )) => {}
            other => panic!("{other:?}"),
        }
        let runt = Frame::plain(PacketBuf::from_slice(&[0; 10]));
        assert!(matches!(
            check_tx(&caps, &runt),
            Err((NicError::Malformed(_), Counter::TxDroppedInvalid))
        ));
    }

    #[test]
    fn vlan_tags_add_to_the_limit() {
        let caps = NicCaps::plain();
        let f = FrameBuilder::new(Ip::v4([10, 0, 0, 1], [10, 0, 0, 2]), L4::tcp(1, 2))
            .vlan(7)
            .build(&[0; 1460]);
        assert_eq!(f.len(), 1518);
        assert!(check_tx(&caps, &Frame::plain(PacketBuf::from_slice(&f))).is_ok());
    }

    #[test]
    fn gso_needs_the_offload_and_fitting_segments() {
        let bytes = tcp4(60_000);
        let plain = NicCaps::plain();
        assert!(matches!(
            check_tx(&plain, &gso_frame(&bytes, 1460)),
            Err((NicError::Unsupported(_), Counter::TxDroppedUnsupported))
        ));
        let full = NicCaps::full();
        assert!(check_tx(&full, &gso_frame(&bytes, 1460)).is_ok());
        assert!(matches!(
            check_tx(&full, &gso_frame(&bytes, 1461)),
            Err((NicError::Oversize { len: 1515, .. }, _))
        ));
        assert!(matches!(
            check_tx(&full, &gso_frame(&bytes, 0)),
            Err((NicError::InvalidMeta(MetaError::ZeroSegmentSize), _))
        ));
        let mut v6 = gso_frame(&bytes, 1000);
        if let Some(g) = v6.meta.gso.as_mut() {
            g.kind = GsoType::TcpV6;
        }
        assert!(matches!(
            check_tx(&full, &v6),
            Err((
                NicError::InvalidMeta(MetaError::KindMismatch {
                    kind: GsoType::TcpV6
                }),
                Counter::TxDroppedInvalid
            ))
        ));
        let small = NicCaps {
            max_gso_size: 30_000,
            ..full
        };
        assert!(matches!(
            check_tx(&small, &gso_frame(&bytes, 1000)),
            Err((NicError::Oversize { .. }, _))
        ));
        let tx_only = NicCaps {
            offloads: Offloads {
                tso4: true,
                ..Offloads::NONE
            },
            ..full
        };
        assert!(matches!(
            check_tx(&tx_only, &gso_frame(&bytes, 1000)),
            Err((NicError::Unsupported(_), _))
        ));
    }
}
