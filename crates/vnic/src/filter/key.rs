//! The fields a rule can look at, extracted once per frame and packed into words.
//!
//! A level's fields (outer, or inner in a tunnel) are packed into [`WORDS`] 64-bit
//! words so that a rule becomes a (value, mask) pair over them and a tuple's lookup
//! hashes and compares only the words its mask touches:
//!
//! | word | bits                                                               |
//! |------|--------------------------------------------------------------------|
//! | 0    | destination MAC (0..48), EtherType after the tags (48..64)          |
//! | 1    | source MAC (0..48), VLAN ID (48..60), tagged (60)                   |
//! | 2, 3 | source address, high and low 64 bits (IPv4 in the low 32 bits)      |
//! | 4, 5 | destination address                                                 |
//! | 6    | protocol (0..8), source port (8..24), destination port (24..40),   |
//! |      | TCP flags (40..48), IPv4 (48), IPv6 (49), ports (50), TCP (51), IP (52) |
//! | 7    | VNI (0..24), tunnelled (24)                                         |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Words per level.
pub(crate) const WORDS: usize = 8;

/// A level's packed fields.
pub(crate) type Words = [u64; WORDS];

pub(crate) const ETHERTYPE_SHIFT: u32 = 48;
pub(crate) const VID_SHIFT: u32 = 48;
pub(crate) const TAGGED: u64 = 1 << 60;
pub(crate) const SPORT_SHIFT: u32 = 8;
pub(crate) const DPORT_SHIFT: u32 = 24;
pub(crate) const FLAGS_SHIFT: u32 = 40;
pub(crate) const IS_V4: u64 = 1 << 48;
pub(crate) const IS_V6: u64 = 1 << 49;
pub(crate) const HAS_PORTS: u64 = 1 << 50;
pub(crate) const IS_TCP: u64 = 1 << 51;
pub(crate) const IS_IP: u64 = 1 << 52;
pub(crate) const TUNNELLED: u64 = 1 << 24;
pub(crate) const MAC_MASK: u64 = (1 << 48) - 1;

/// The fields of one level of a frame, as plain values (what [`FlowKey`] packs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fields {
    /// Destination MAC.
    pub dst_mac: [u8; 6],
    /// Source MAC.
    pub src_mac: [u8; 6],
    /// The VLAN ID of the outermost tag, if tagged.
    pub vlan: Option<u16>,
    /// The EtherType after the tags.
    pub ethertype: u16,
    /// Source address, if IP.
    pub src_ip: Option<IpAddr>,
    /// Destination address, if IP.
    pub dst_ip: Option<IpAddr>,
    /// IP protocol (the final IPv6 next header), if IP.
    pub proto: Option<u8>,
    /// Source port, if TCP, UDP or SCTP and not a later fragment.
    pub src_port: Option<u16>,
    /// Destination port, likewise.
    pub dst_port: Option<u16>,
    /// TCP flags (the byte with FIN..CWR), if TCP.
    pub tcp_flags: Option<u8>,
    /// The tunnel's VNI (NVGRE: VSID), if the frame is tunnelled.
    pub vni: Option<u32>,
}

/// The fields of a frame: its outer level and, when it is a tunnelled Ethernet
/// frame (VXLAN, GENEVE, NVGRE), its inner level; extracted once, classified by
/// any number of rule sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowKey {
    pub(crate) outer: Words,
    pub(crate) inner: Words,
    pub(crate) tunnelled: bool,
}

impl FlowKey {
    /// Extracts the fields of `frame`, as far as its bytes go: a header cut short
    /// leaves its fields and those after it absent, so rules on them do not match.
    /// Tunnels on their standard ports (VXLAN 4789 and 8472, GENEVE 6081, NVGRE)
    /// carrying Ethernet give the inner level.
    ///
    /// A parser of its own, not [`linerate_wire::layout`]: it only reads the fields
    /// rules look at, with the receive rules' checks on the tunnel headers, and
    /// costs a third of a full parse per frame.
    pub fn extract(frame: &[u8]) -> FlowKey {
        let mut k = FlowKey::default();
        k.fill(frame);
        k
    }

    /// [`FlowKey::extract`] into this key, in place (a batch's keys reused
    /// without moving them).
    #[inline]
    pub fn fill(&mut self, frame: &[u8]) {
        self.outer = [0; WORDS];
        self.tunnelled = false;
        if let Some(inner) = level(frame, 0, &mut self.outer, true)
            && frame.len() >= inner + 14
        {
            self.inner = [0; WORDS];
            level(frame, inner, &mut self.inner, false);
            self.inner[7] = self.outer[7];
            self.tunnelled = true;
        }
    }

    /// Sets the VLAN the frame is on where the tag is not in the bytes (a vNIC in
    /// access mode sees its frames untagged; its rules still match its VLAN).
    pub fn set_vlan(&mut self, vid: u16) {
        self.outer[1] = (self.outer[1] & MAC_MASK) | TAGGED | (u64::from(vid & 0xfff) << VID_SHIFT);
    }

    /// The outer (or only) level's fields.
    pub fn outer(&self) -> Fields {
        unpack(&self.outer)
    }

    /// The inner level's fields, for a tunnelled Ethernet frame.
    pub fn inner(&self) -> Option<Fields> {
        self.tunnelled.then(|| unpack(&self.inner))
    }

    /// The words of `level`, if the frame has it.
    #[inline]
    pub(crate) fn words(&self, level: super::Level) -> Option<&Words> {
        match level {
            super::Level::Outer => Some(&self.outer),
            super::Level::Inner => self.tunnelled.then_some(&self.inner),
        }
    }
}

#[inline]
fn mac(b: &[u8]) -> u64 {
    b.iter().take(6).fold(0, |a, &x| (a << 8) | u64::from(x))
}

#[inline]
fn be16(f: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(f.get(at..at + 2)?.try_into().ok()?))
}

#[inline]
fn be32(f: &[u8], at: usize) -> Option<u64> {
    Some(u64::from(u32::from_be_bytes(
        f.get(at..at + 4)?.try_into().ok()?,
    )))
}

#[inline]
fn be64(f: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(f.get(at..at + 8)?.try_into().ok()?))
}

const VXLAN_PORTS: [u16; 2] = [4789, 8472];
const GENEVE_PORT: u16 = 6081;
const TEB: u16 = 0x6558;

/// Fills `w` with the level starting at `at`; returns where the inner Ethernet
/// frame starts when `tunnels` and this level is a tunnel carrying Ethernet (its
/// VNI in `w[7]`).
fn level(f: &[u8], at: usize, w: &mut Words, tunnels: bool) -> Option<usize> {
    let hdr = f.get(at..at + 14)?;
    w[1] = mac(&hdr[6..12]);
    let mut et = u16::from_be_bytes([hdr[12], hdr[13]]);
    let mut l3 = at + 14;
    let mut tags = 0;
    while matches!(et, 0x8100 | 0x88a8) && tags < 2 {
        let tci = be16(f, l3)?;
        if tags == 0 {
            w[1] |= TAGGED | (u64::from(tci & 0xfff) << VID_SHIFT);
        }
        et = be16(f, l3 + 2)?;
        l3 += 4;
        tags += 1;
    }
    w[0] = mac(hdr) | (u64::from(et) << ETHERTYPE_SHIFT);
    let (proto, l4, later) = match et {
        0x0800 => {
            let b = f.get(l3..l3 + 20)?;
            let ihl = usize::from(b[0] & 0x0f) * 4;
            if b[0] >> 4 != 4 || ihl < 20 {
                return None;
            }
            w[3] = be32(b, 12)?;
            w[5] = be32(b, 16)?;
            w[6] = IS_IP | IS_V4 | u64::from(b[9]);
            let offset = u16::from_be_bytes([b[6], b[7]]) & 0x1fff;
            (b[9], l3 + ihl, offset != 0)
        }
        0x86dd => {
            let b = f.get(l3..l3 + 40)?;
            if b[0] >> 4 != 6 {
                return None;
            }
            w[2] = be64(b, 8)?;
            w[3] = be64(b, 16)?;
            w[4] = be64(b, 24)?;
            w[5] = be64(b, 32)?;
            let (mut nh, mut at, mut later) = (b[6], l3 + 40, false);
            // Extension headers: hop-by-hop, routing, fragment, AH, destination.
            for _ in 0..8 {
                let len = match nh {
                    0 | 43 | 60 => (usize::from(*f.get(at + 1)?) + 1) * 8,
                    44 => {
                        later = be16(f, at + 2)? >> 3 != 0;
                        8
                    }
                    51 => (usize::from(*f.get(at + 1)?) + 2) * 4,
                    _ => break,
                };
                nh = *f.get(at)?;
                at += len;
            }
            w[6] = IS_IP | IS_V6 | u64::from(nh);
            (nh, at, later)
        }
        _ => return None,
    };
    if later {
        return None;
    }
    match proto {
        6 | 17 | 132 => {
            let (sport, dport) = (be16(f, l4)?, be16(f, l4 + 2)?);
            w[6] |=
                HAS_PORTS | (u64::from(sport) << SPORT_SHIFT) | (u64::from(dport) << DPORT_SHIFT);
            if proto == 6 {
                w[6] |= IS_TCP | (u64::from(*f.get(l4 + 13)?) << FLAGS_SHIFT);
            }
            if proto != 17 || !tunnels || f.len() < l4 + 16 {
                return None;
            }
            let t = l4 + 8;
            if VXLAN_PORTS.contains(&dport) {
                // RFC 7348 as Linux receives it: the I flag alone, reserved bits zero.
                let h = f.get(t..t + 8)?;
                if h[..4] != [0x08, 0, 0, 0] || h[7] != 0 {
                    return None;
                }
                w[7] = TUNNELLED | (be32(h, 4)? >> 8);
                Some(t + 8)
            } else if dport == GENEVE_PORT {
                let h = f.get(t..t + 8)?;
                if h[0] >> 6 != 0 || u16::from_be_bytes([h[2], h[3]]) != TEB {
                    return None;
                }
                w[7] = TUNNELLED | (be32(h, 4)? >> 8);
                Some(t + 8 + usize::from(h[0] & 0x3f) * 4)
            } else {
                None
            }
        }
        47 if tunnels => {
            // GRE version 0 carrying Ethernet; R and the reserved bits clear.
            let fv = be16(f, l4)?;
            if fv & 0x4ff8 != 0 || fv & 7 != 0 || be16(f, l4 + 2)? != TEB {
                return None;
            }
            let (c, k, s) = (fv & 0x8000 != 0, fv & 0x2000 != 0, fv & 0x1000 != 0);
            let key_at = l4 + 4 + if c { 4 } else { 0 };
            let vsid = if k { be32(f, key_at)? >> 8 } else { 0 };
            w[7] = TUNNELLED | vsid;
            Some(key_at + if k { 4 } else { 0 } + if s { 4 } else { 0 })
        }
        _ => None,
    }
}

fn unmac(v: u64) -> [u8; 6] {
    let b = v.to_be_bytes();
    [b[2], b[3], b[4], b[5], b[6], b[7]]
}

fn unpack(w: &Words) -> Fields {
    let bit = |x: u64, m: u64| x & m != 0;
    let ip = |hi: u64, lo: u64| {
        if bit(w[6], IS_V4) {
            Some(IpAddr::V4(Ipv4Addr::from(lo as u32)))
        } else if bit(w[6], IS_V6) {
            Some(IpAddr::V6(Ipv6Addr::from(
                (u128::from(hi) << 64) | u128::from(lo),
            )))
        } else {
            None
        }
    };
    let is_ip = bit(w[6], IS_IP);
    let ports = bit(w[6], HAS_PORTS);
    Fields {
        dst_mac: unmac(w[0] & MAC_MASK),
        src_mac: unmac(w[1] & MAC_MASK),
        vlan: bit(w[1], TAGGED).then_some(((w[1] >> VID_SHIFT) & 0xfff) as u16),
        ethertype: (w[0] >> ETHERTYPE_SHIFT) as u16,
        src_ip: ip(w[2], w[3]),
        dst_ip: ip(w[4], w[5]),
        proto: is_ip.then_some(w[6] as u8),
        src_port: ports.then_some((w[6] >> SPORT_SHIFT) as u16),
        dst_port: ports.then_some((w[6] >> DPORT_SHIFT) as u16),
        tcp_flags: bit(w[6], IS_TCP).then_some((w[6] >> FLAGS_SHIFT) as u8),
        vni: bit(w[7], TUNNELLED).then_some((w[7] & 0x00ff_ffff) as u32),
    }
}
