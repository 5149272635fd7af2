//! A minimal `virtio_net_hdr_v1` (12 bytes, little-endian) and its mapping to and
//! from [`OffloadMeta`], for the TAP backend.
//!
//! Deliberately private and small: linerate-offload's `virtio` module carries the
//! complete conversion (tunnel kinds, the 24-byte tunnel header, hash reports), and
//! replaces this one once merged.

use linerate_offload::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta};

/// Length of the header this backend configures (`TUNSETVNETHDRSZ`).
pub(crate) const LEN: usize = 12;

/// `flags`.
const F_NEEDS_CSUM: u8 = 1;
const F_DATA_VALID: u8 = 2;

/// `gso_type`.
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;

/// The header's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct VnetHdr {
    pub(crate) flags: u8,
    pub(crate) gso_type: u8,
    pub(crate) hdr_len: u16,
    pub(crate) gso_size: u16,
    pub(crate) csum_start: u16,
    pub(crate) csum_offset: u16,
    pub(crate) num_buffers: u16,
}

fn le16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(&[lo, hi]) => u16::from_le_bytes([lo, hi]),
        _ => 0,
    }
}

impl VnetHdr {
    /// Reads the first [`LEN`] bytes of `b`.
    pub(crate) fn decode(b: &[u8]) -> Option<VnetHdr> {
        if b.len() < LEN {
            return None;
        }
        Some(VnetHdr {
            flags: *b.first()?,
            gso_type: *b.get(1)?,
            hdr_len: le16(b, 2),
            gso_size: le16(b, 4),
            csum_start: le16(b, 6),
            csum_offset: le16(b, 8),
            num_buffers: le16(b, 10),
        })
    }

    /// Writes the header into the first [`LEN`] bytes of `out`.
    pub(crate) fn encode(&self, out: &mut [u8]) {
        let mut bytes = [0u8; LEN];
        bytes[0] = self.flags;
        bytes[1] = self.gso_type;
        for (i, v) in [
            self.hdr_len,
            self.gso_size,
            self.csum_start,
            self.csum_offset,
            self.num_buffers,
        ]
        .into_iter()
        .enumerate()
        {
            if let Some(d) = bytes.get_mut(2 + 2 * i..4 + 2 * i) {
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        if let Some(d) = out.get_mut(..LEN) {
            d.copy_from_slice(&bytes);
        }
    }

    /// The metadata a received frame with this header carries; `None` for a
    /// segmentation type this backend never asks the kernel for (UFO, tunnels).
    pub(crate) fn to_meta(self) -> Option<OffloadMeta> {
        let csum = if self.flags & F_NEEDS_CSUM != 0 {
            Checksum::Partial {
                start: self.csum_start,
                offset: self.csum_offset,
            }
        } else if self.flags & F_DATA_VALID != 0 {
            Checksum::Verified { levels: 1 }
        } else {
            Checksum::None
        };
        let kind = match self.gso_type & !GSO_ECN {
            GSO_NONE => None,
            GSO_TCPV4 => Some(GsoType::TcpV4),
            GSO_TCPV6 => Some(GsoType::TcpV6),
            GSO_UDP_L4 => Some(GsoType::UdpL4),
            _ => return None,
        };
        let gso = kind.map(|k| Gso {
            ecn: self.gso_type & GSO_ECN != 0,
            ..Gso::new(k, self.gso_size)
        });
        Some(OffloadMeta {
            csum,
            gso,
            ..OffloadMeta::plain()
        })
    }

    /// The header for sending `meta`, given the length of the frame's headers
    /// (`hdr_len`; only read for super-frames). `None` for a tunnel segmentation
    /// request, which needs the 24-byte header.
    pub(crate) fn from_meta(
        meta: &OffloadMeta,
        headers_len: impl FnOnce() -> u16,
    ) -> Option<VnetHdr> {
        let mut h = VnetHdr::default();
        match meta.csum {
            Checksum::Partial { start, offset } => {
                h.flags = F_NEEDS_CSUM;
                h.csum_start = start;
                h.csum_offset = offset;
                h.hdr_len = start.saturating_add(offset).saturating_add(2);
            }
            Checksum::Verified { .. } => h.flags = F_DATA_VALID,
            Checksum::None => {}
        }
        if let Some(g) = &meta.gso {
            if g.tunnel != GsoTunnel::None {
                return None;
            }
            h.gso_type = match g.kind {
                GsoType::TcpV4 => GSO_TCPV4,
                GsoType::TcpV6 => GSO_TCPV6,
                GsoType::UdpL4 => GSO_UDP_L4,
            } | if g.ecn { GSO_ECN } else { 0 };
            h.gso_size = g.size;
            h.hdr_len = headers_len();
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_kernel_tso_header() {
        // What the kernel hands over for a TCPv4 super-frame (flags NEEDS_CSUM,
        // gso TCPV4, hdr_len 66, gso_size 1448, csum 34+16).
        let b = [1, 1, 66, 0, 0xa8, 0x05, 34, 0, 16, 0, 0, 0];
        let h = VnetHdr::decode(&b).unwrap();
        assert_eq!(h.gso_size, 1448);
        let m = h.to_meta().unwrap();
        assert_eq!(m.gso, Some(Gso::new(GsoType::TcpV4, 1448)));
        assert_eq!(
            m.csum,
            Checksum::Partial {
                start: 34,
                offset: 16
            }
        );
        let back = VnetHdr::from_meta(&m, || 66).unwrap();
        let mut out = [0u8; LEN];
        back.encode(&mut out);
        assert_eq!(out, b);
        assert!(VnetHdr::decode(&b[..11]).is_none());
    }

    #[test]
    fn unknown_gso_and_tunnels_are_refused() {
        let ufo = VnetHdr {
            gso_type: 3,
            ..VnetHdr::default()
        };
        assert!(ufo.to_meta().is_none());
        let meta = OffloadMeta {
            gso: Some(Gso {
                tunnel: GsoTunnel::Udp { outer_csum: false },
                ..Gso::new(GsoType::TcpV4, 1400)
            }),
            ..OffloadMeta::plain()
        };
        assert!(VnetHdr::from_meta(&meta, || 0).is_none());
        let valid = VnetHdr {
            flags: F_DATA_VALID,
            gso_type: GSO_TCPV6 | GSO_ECN,
            gso_size: 1000,
            ..VnetHdr::default()
        };
        let m = valid.to_meta().unwrap();
        assert_eq!(m.csum, Checksum::Verified { levels: 1 });
        assert!(m.gso.unwrap().ecn);
    }
}
