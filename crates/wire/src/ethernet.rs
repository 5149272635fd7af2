//! Ethernet II frames (RFC 894 for IP over Ethernet, EtherType registry per RFC 7042
//! section 3) and IEEE 802.1Q / 802.1ad VLAN tags.
//!
//! [`Packet`] is a checked view over the 14-byte header (destination, source,
//! EtherType) and what follows it; [`vlan::Packet`] (alias [`VlanTag`]) is a view over
//! one 4-byte tag as it follows a VLAN TPID (TCI: PCP 3 bits, DEI 1 bit, VID 12 bits;
//! then the next EtherType). [`walk_vlans`] skips up to [`MAX_VLAN_TAGS`] tags
//! (802.1ad S-tag then 802.1Q C-tag, or two 802.1Q tags) and says where L3 starts.
//!
//! The owned header values are [`etherparse::Ethernet2Header`] and
//! [`etherparse::SingleVlanHeader`]; `header()` / `set_header()` convert. The frame
//! check sequence is not part of the view: backends strip it.

use crate::error::{Error, Layer, Result, need};

/// EtherType values (IEEE registry; RFC 7042 section 3 and appendix B).
pub mod ethertype {
    /// Internet Protocol version 4 (RFC 894).
    pub const IPV4: u16 = 0x0800;
    /// Address Resolution Protocol (RFC 826).
    pub const ARP: u16 = 0x0806;
    /// Transparent Ethernet Bridging: an Ethernet frame inside GRE / NVGRE (RFC 7637).
    pub const TEB: u16 = 0x6558;
    /// IEEE 802.1Q customer VLAN tag (C-tag) TPID.
    pub const VLAN: u16 = 0x8100;
    /// Internet Protocol version 6 (RFC 2464).
    pub const IPV6: u16 = 0x86dd;
    /// MPLS unicast (RFC 3032).
    pub const MPLS_UNICAST: u16 = 0x8847;
    /// MPLS multicast (RFC 5332).
    pub const MPLS_MULTICAST: u16 = 0x8848;
    /// IEEE 802.1ad service VLAN tag (S-tag, "QinQ") TPID.
    pub const QINQ: u16 = 0x88a8;
    /// Link Layer Discovery Protocol (IEEE 802.1AB).
    pub const LLDP: u16 = 0x88cc;
    /// MACsec (IEEE 802.1AE).
    pub const MACSEC: u16 = 0x88e5;
    /// Pre-standard double tagging TPID, still sent by some switches as the outer tag.
    pub const QINQ_LEGACY: u16 = 0x9100;
}

/// Field offsets of the Ethernet II header.
pub mod field {
    use core::ops::{Range, RangeFrom};
    /// Destination MAC address.
    pub const DST: Range<usize> = 0..6;
    /// Source MAC address.
    pub const SRC: Range<usize> = 6..12;
    /// EtherType (or the TPID of a first VLAN tag).
    pub const ETHERTYPE: Range<usize> = 12..14;
    /// Everything after the header.
    pub const PAYLOAD: RangeFrom<usize> = 14..;
}

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = 14;

/// The broadcast MAC address.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// Most VLAN tags [`walk_vlans`] skips (an 802.1ad S-tag and an 802.1Q C-tag).
pub const MAX_VLAN_TAGS: usize = 2;

/// True for the EtherTypes that announce a VLAN tag: [`ethertype::VLAN`],
/// [`ethertype::QINQ`] and [`ethertype::QINQ_LEGACY`].
pub const fn is_vlan_tpid(ethertype: u16) -> bool {
    matches!(
        ethertype,
        ethertype::VLAN | ethertype::QINQ | ethertype::QINQ_LEGACY
    )
}

/// A view over an Ethernet II frame (header and payload, without FCS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is shorter than
    /// [`HEADER_LEN`]. Use [`Packet::new_checked`] on untrusted input.
    pub const fn new_unchecked(buffer: T) -> Self {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 14-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`Packet::new_checked`].
    pub fn check_len(&self) -> Result<()> {
        need(Layer::Ethernet, self.buffer.as_ref(), HEADER_LEN)
    }

    /// Unwraps the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn mac_at(&self, r: core::ops::Range<usize>) -> [u8; 6] {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.buffer.as_ref()[r]);
        m
    }

    /// Destination MAC address.
    pub fn dst_addr(&self) -> [u8; 6] {
        self.mac_at(field::DST)
    }

    /// Source MAC address.
    pub fn src_addr(&self) -> [u8; 6] {
        self.mac_at(field::SRC)
    }

    /// The EtherType field (the TPID if the frame is VLAN tagged).
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[12], b[13]])
    }

    /// Everything after the 14-byte header (VLAN tags included, if any).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// Walks the VLAN tags after the header; see [`walk_vlans`].
    pub fn vlans(&self) -> Result<VlanWalk> {
        walk_vlans(self.buffer.as_ref())
    }

    /// The header as an owned etherparse value.
    pub fn header(&self) -> etherparse::Ethernet2Header {
        let mut b = [0u8; HEADER_LEN];
        b.copy_from_slice(&self.buffer.as_ref()[..HEADER_LEN]);
        etherparse::Ethernet2Header::from_bytes(b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC address.
    pub fn set_dst_addr(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&v);
    }

    /// Sets the source MAC address.
    pub fn set_src_addr(&mut self, v: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&v);
    }

    /// Sets the EtherType field.
    pub fn set_ethertype(&mut self, v: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }

    /// Writes all three fields of `h`.
    pub fn set_header(&mut self, h: &etherparse::Ethernet2Header) {
        self.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&h.to_bytes());
    }
}

/// Writes `h` at the start of `buf` and returns the header length, or
/// [`Error::BufferTooSmall`].
pub fn emit(h: &etherparse::Ethernet2Header, buf: &mut [u8]) -> Result<usize> {
    let have = buf.len();
    let out = buf.get_mut(..HEADER_LEN).ok_or(Error::BufferTooSmall {
        layer: Layer::Ethernet,
        need: HEADER_LEN,
        have,
    })?;
    out.copy_from_slice(&h.to_bytes());
    Ok(HEADER_LEN)
}

/// What [`walk_vlans`] found between the MAC addresses and the L3 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanWalk {
    /// Number of VLAN tags, 0 to [`MAX_VLAN_TAGS`].
    pub tags: usize,
    /// TCI of each tag, outermost first; entries past `tags` are zero.
    pub tci: [u16; MAX_VLAN_TAGS],
    /// The EtherType after the last tag: the L3 protocol.
    pub ethertype: u16,
    /// Offset of the L3 header from the start of the frame.
    pub l3_offset: usize,
}

impl VlanWalk {
    /// VLAN ID (12 bits) of the outermost tag, if any.
    pub fn outer_vid(&self) -> Option<u16> {
        (self.tags > 0).then_some(self.tci[0] & vlan::VID_MASK)
    }

    /// VLAN ID of the innermost tag, if any.
    pub fn inner_vid(&self) -> Option<u16> {
        self.tags
            .checked_sub(1)
            .and_then(|i| self.tci.get(i))
            .map(|t| t & vlan::VID_MASK)
    }
}

/// Walks the VLAN tags of the Ethernet frame `frame` (starting at the destination
/// MAC): an 802.1ad S-tag (or a legacy 0x9100 tag, or an 802.1Q tag) optionally
/// followed by an 802.1Q C-tag.
///
/// Errors: [`Error::Truncated`] (layer [`Layer::Ethernet`] or [`Layer::Vlan`]) when a
/// header or tag is cut short; [`Error::Invalid`] with field `"tpid"` when an
/// S-tag TPID (0x88a8 / 0x9100) follows a first tag; [`Error::TooMany`] when a third
/// tag follows.
pub fn walk_vlans(frame: &[u8]) -> Result<VlanWalk> {
    need(Layer::Ethernet, frame, HEADER_LEN)?;
    let mut w = VlanWalk {
        ethertype: u16::from_be_bytes([frame[12], frame[13]]),
        l3_offset: HEADER_LEN,
        ..VlanWalk::default()
    };
    while is_vlan_tpid(w.ethertype) {
        if w.tags == MAX_VLAN_TAGS {
            return Err(Error::TooMany {
                layer: Layer::Vlan,
                limit: MAX_VLAN_TAGS,
            });
        }
        if w.tags > 0 && w.ethertype != ethertype::VLAN {
            return Err(Error::invalid(Layer::Vlan, "tpid", u32::from(w.ethertype)));
        }
        let rest = frame.get(w.l3_offset..).unwrap_or_default();
        let tag = vlan::Packet::new_checked(rest)?;
        w.tci[w.tags] = tag.tci();
        w.ethertype = tag.ethertype();
        w.tags += 1;
        w.l3_offset += vlan::HEADER_LEN;
    }
    Ok(w)
}

/// Alias for the VLAN tag view, [`vlan::Packet`].
pub type VlanTag<T> = vlan::Packet<T>;

/// IEEE 802.1Q / 802.1ad VLAN tags: the 4 bytes after a TPID.
pub mod vlan {
    use crate::error::{Layer, Result, need};

    /// Field offsets within the tag (the TPID before it is not part of the view).
    pub mod field {
        use core::ops::{Range, RangeFrom};
        /// Tag control information: PCP (3 bits), DEI (1 bit), VID (12 bits).
        pub const TCI: Range<usize> = 0..2;
        /// The EtherType after the tag.
        pub const ETHERTYPE: Range<usize> = 2..4;
        /// Everything after the tag.
        pub const PAYLOAD: RangeFrom<usize> = 4..;
    }

    /// Length of a tag after its TPID.
    pub const HEADER_LEN: usize = 4;
    /// Mask of the VLAN ID in the TCI.
    pub const VID_MASK: u16 = 0x0fff;
    /// Mask of the drop eligible indicator in the TCI.
    pub const DEI_MASK: u16 = 0x1000;
    /// Shift of the priority code point in the TCI.
    pub const PCP_SHIFT: u16 = 13;

    /// A view over one VLAN tag (TCI and next EtherType) and what follows it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Packet<T> {
        buffer: T,
    }

    impl<T: AsRef<[u8]>> Packet<T> {
        /// Wraps `buffer` without checking it; accessors may panic if it is shorter
        /// than [`HEADER_LEN`]. Use [`Packet::new_checked`] on untrusted input.
        pub const fn new_unchecked(buffer: T) -> Self {
            Packet { buffer }
        }

        /// Wraps `buffer` after checking that it holds the 4-byte tag.
        pub fn new_checked(buffer: T) -> Result<Self> {
            let p = Packet { buffer };
            p.check_len()?;
            Ok(p)
        }

        /// The checks of [`Packet::new_checked`].
        pub fn check_len(&self) -> Result<()> {
            need(Layer::Vlan, self.buffer.as_ref(), HEADER_LEN)
        }

        /// Unwraps the buffer.
        pub fn into_inner(self) -> T {
            self.buffer
        }

        /// The whole tag control information field.
        pub fn tci(&self) -> u16 {
            let b = self.buffer.as_ref();
            u16::from_be_bytes([b[0], b[1]])
        }

        /// Priority code point (3 bits).
        pub fn pcp(&self) -> u8 {
            (self.tci() >> PCP_SHIFT) as u8
        }

        /// Drop eligible indicator.
        pub fn dei(&self) -> bool {
            self.tci() & DEI_MASK != 0
        }

        /// VLAN identifier (12 bits).
        pub fn vid(&self) -> u16 {
            self.tci() & VID_MASK
        }

        /// The EtherType after the tag.
        pub fn ethertype(&self) -> u16 {
            let b = self.buffer.as_ref();
            u16::from_be_bytes([b[2], b[3]])
        }

        /// Everything after the tag.
        pub fn payload(&self) -> &[u8] {
            &self.buffer.as_ref()[field::PAYLOAD]
        }

        /// The tag as an owned etherparse value.
        pub fn header(&self) -> etherparse::SingleVlanHeader {
            let mut b = [0u8; HEADER_LEN];
            b.copy_from_slice(&self.buffer.as_ref()[..HEADER_LEN]);
            etherparse::SingleVlanHeader::from_bytes(b)
        }
    }

    impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
        /// Sets the whole tag control information field.
        pub fn set_tci(&mut self, v: u16) {
            self.buffer.as_mut()[field::TCI].copy_from_slice(&v.to_be_bytes());
        }

        /// Sets the priority code point (the low 3 bits of `v`).
        pub fn set_pcp(&mut self, v: u8) {
            let t = self.tci() & !(0x7 << PCP_SHIFT);
            self.set_tci(t | (u16::from(v & 0x7) << PCP_SHIFT));
        }

        /// Sets the drop eligible indicator.
        pub fn set_dei(&mut self, v: bool) {
            let t = self.tci() & !DEI_MASK;
            self.set_tci(if v { t | DEI_MASK } else { t });
        }

        /// Sets the VLAN identifier (the low 12 bits of `v`).
        pub fn set_vid(&mut self, v: u16) {
            let t = self.tci() & !VID_MASK;
            self.set_tci(t | (v & VID_MASK));
        }

        /// Sets the EtherType after the tag.
        pub fn set_ethertype(&mut self, v: u16) {
            self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&v.to_be_bytes());
        }

        /// The payload, mutable.
        pub fn payload_mut(&mut self) -> &mut [u8] {
            &mut self.buffer.as_mut()[field::PAYLOAD]
        }

        /// Writes all fields of `h`.
        pub fn set_header(&mut self, h: &etherparse::SingleVlanHeader) {
            self.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&h.to_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{EtherType, Ethernet2Header, SingleVlanHeader, VlanId, VlanPcp};
    use proptest::prelude::*;

    fn eth_header() -> impl Strategy<Value = Ethernet2Header> {
        (any::<[u8; 6]>(), any::<[u8; 6]>(), any::<u16>()).prop_map(|(s, d, t)| Ethernet2Header {
            source: s,
            destination: d,
            ether_type: EtherType(t),
        })
    }

    fn vlan_header() -> impl Strategy<Value = SingleVlanHeader> {
        (0u8..8, any::<bool>(), 0u16..4096, any::<u16>()).prop_map(|(p, d, v, t)| {
            SingleVlanHeader {
                pcp: VlanPcp::try_new(p).unwrap(),
                drop_eligible_indicator: d,
                vlan_id: VlanId::try_new(v).unwrap(),
                ether_type: EtherType(t),
            }
        })
    }

    proptest! {
        #[test]
        fn parse_matches_etherparse(h in eth_header(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut buf = h.to_bytes().to_vec();
            buf.extend_from_slice(&payload);
            let p = Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(p.dst_addr(), h.destination);
            prop_assert_eq!(p.src_addr(), h.source);
            prop_assert_eq!(p.ethertype(), h.ether_type.0);
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert_eq!(p.header(), h.clone());

            // Setters into a zeroed buffer give back what etherparse reads.
            let mut out = vec![0u8; buf.len()];
            let mut q = Packet::new_unchecked(&mut out[..]);
            q.set_dst_addr(h.destination);
            q.set_src_addr(h.source);
            q.set_ethertype(h.ether_type.0);
            q.payload_mut().copy_from_slice(&payload);
            prop_assert_eq!(&out, &buf);
            let (back, rest) = Ethernet2Header::from_slice(&out).unwrap();
            prop_assert_eq!(back, h.clone());
            prop_assert_eq!(rest, &payload[..]);

            let mut out2 = [0u8; HEADER_LEN];
            Packet::new_unchecked(&mut out2[..]).set_header(&h);
            prop_assert_eq!(&out2[..], &buf[..HEADER_LEN]);
            let mut out3 = [0u8; HEADER_LEN];
            prop_assert_eq!(emit(&h, &mut out3), Ok(HEADER_LEN));
            prop_assert_eq!(&out3[..], &buf[..HEADER_LEN]);
        }

        #[test]
        fn vlan_matches_etherparse(h in vlan_header()) {
            let buf = h.to_bytes();
            let v = vlan::Packet::new_checked(&buf[..]).unwrap();
            prop_assert_eq!(v.pcp(), h.pcp.value());
            prop_assert_eq!(v.dei(), h.drop_eligible_indicator);
            prop_assert_eq!(v.vid(), h.vlan_id.value());
            prop_assert_eq!(v.ethertype(), h.ether_type.0);
            prop_assert_eq!(v.header(), h.clone());

            let mut out = [0u8; 4];
            let mut w = VlanTag::new_unchecked(&mut out[..]);
            w.set_pcp(h.pcp.value());
            w.set_dei(h.drop_eligible_indicator);
            w.set_vid(h.vlan_id.value());
            w.set_ethertype(h.ether_type.0);
            prop_assert_eq!(SingleVlanHeader::from_slice(&out).unwrap().0, h.clone());
            let mut out2 = [0u8; 4];
            vlan::Packet::new_unchecked(&mut out2[..]).set_header(&h);
            prop_assert_eq!(out2, buf);
        }

        #[test]
        fn walk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = walk_vlans(&bytes);
        }

        #[test]
        fn walk_matches_etherparse(
            h in eth_header(),
            tags in proptest::collection::vec(vlan_header(), 0..=2),
            outer in prop_oneof![Just(ethertype::QINQ), Just(ethertype::VLAN), Just(ethertype::QINQ_LEGACY)],
            l3 in prop_oneof![Just(ethertype::IPV4), Just(ethertype::IPV6), Just(ethertype::ARP)],
        ) {
            let mut h = h;
            let mut tags = tags;
            h.ether_type = EtherType(if tags.is_empty() { l3 } else { outer });
            if tags.len() == 2 {
                tags[0].ether_type = EtherType(ethertype::VLAN);
            }
            if let Some(last) = tags.last_mut() {
                last.ether_type = EtherType(l3);
            }
            let mut buf = h.to_bytes().to_vec();
            for t in &tags {
                buf.extend_from_slice(&t.to_bytes());
            }
            buf.extend_from_slice(&[0x45, 0, 0, 20]);
            let w = walk_vlans(&buf).unwrap();
            prop_assert_eq!(w.tags, tags.len());
            prop_assert_eq!(w.ethertype, l3);
            prop_assert_eq!(w.l3_offset, HEADER_LEN + 4 * tags.len());
            for (i, t) in tags.iter().enumerate() {
                prop_assert_eq!(w.tci[i] & vlan::VID_MASK, t.vlan_id.value());
            }
            prop_assert_eq!(w.outer_vid(), tags.first().map(|t| t.vlan_id.value()));
            prop_assert_eq!(w.inner_vid(), tags.last().map(|t| t.vlan_id.value()));
            // Same verdict as etherparse's own link layer walk.
            let sliced = etherparse::LaxSlicedPacket::from_ethernet(&buf).unwrap();
            prop_assert_eq!(sliced.link_exts.len(), tags.len());
            // Every truncation is a typed error.
            for cut in 0..w.l3_offset {
                let e = walk_vlans(&buf[..cut]).unwrap_err();
                let (layer, want) = if cut < HEADER_LEN {
                    (Layer::Ethernet, HEADER_LEN)
                } else {
                    (Layer::Vlan, 4)
                };
                prop_assert_eq!(e.layer(), layer);
                match e {
                    Error::Truncated { need, have, .. } => {
                        prop_assert_eq!(need, want);
                        prop_assert!(have < want);
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
        }
    }

    #[test]
    fn truncated_header() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&[0u8; HEADER_LEN][..n]).unwrap_err(),
                Error::truncated(Layer::Ethernet, HEADER_LEN, n)
            );
        }
        for n in 0..4 {
            assert_eq!(
                vlan::Packet::new_checked(&[0u8; 4][..n]).unwrap_err(),
                Error::truncated(Layer::Vlan, 4, n)
            );
        }
        let mut out = [0u8; 13];
        assert_eq!(
            emit(&Ethernet2Header::default(), &mut out),
            Err(Error::BufferTooSmall {
                layer: Layer::Ethernet,
                need: 14,
                have: 13
            })
        );
    }

    #[test]
    fn too_many_and_misordered_tags() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[
            0x88, 0xa8, 0, 1, 0x81, 0x00, 0, 2, 0x81, 0x00, 0, 3, 0x08, 0,
        ]);
        assert_eq!(
            walk_vlans(&f).unwrap_err(),
            Error::TooMany {
                layer: Layer::Vlan,
                limit: MAX_VLAN_TAGS
            }
        );
        let mut g = vec![0u8; 12];
        g.extend_from_slice(&[0x81, 0x00, 0, 1, 0x88, 0xa8, 0, 2, 0x08, 0]);
        assert_eq!(
            walk_vlans(&g).unwrap_err(),
            Error::invalid(Layer::Vlan, "tpid", 0x88a8)
        );
        let mut ok = vec![0u8; 12];
        ok.extend_from_slice(&[0x81, 0x00, 0x20, 7, 0x81, 0x00, 0, 9, 0x86, 0xdd]);
        let w = Packet::new_checked(&ok[..]).unwrap().vlans().unwrap();
        assert_eq!((w.tags, w.ethertype, w.l3_offset), (2, ethertype::IPV6, 22));
        assert_eq!((w.outer_vid(), w.inner_vid()), (Some(7), Some(9)));
        assert_eq!(w.tci[0] >> vlan::PCP_SHIFT, 1);
        let w0 = walk_vlans(&[0u8; 14]).unwrap();
        assert_eq!((w0.tags, w0.outer_vid(), w0.inner_vid()), (0, None, None));
    }
}
