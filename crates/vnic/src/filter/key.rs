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

use linerate_wire::layout::{self, Fragment, Headers, L3Kind, L4Kind};

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
    pub(crate) inner: Option<Words>,
}

impl FlowKey {
    /// Extracts the fields of `frame` (tunnels on their default ports). A frame
    /// whose IP or transport headers do not parse keeps its L2 fields only, so
    /// rules on L3 and L4 fields do not match it.
    pub fn extract(frame: &[u8]) -> FlowKey {
        match layout::parse(frame) {
            Ok(l) => {
                let vni = l.tunnel.map(|t| t.vni);
                FlowKey {
                    outer: pack(frame, &l.outer, vni),
                    inner: l.inner.map(|h| pack(frame, &h, vni)),
                }
            }
            Err(_) => FlowKey {
                outer: pack_l2(frame),
                inner: None,
            },
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
        self.inner.as_ref().map(unpack)
    }
}

fn mac(b: &[u8]) -> u64 {
    b.iter().take(6).fold(0, |a, &x| (a << 8) | u64::from(x))
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

fn be32(b: &[u8]) -> u64 {
    u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The L2 fields alone (a frame whose upper headers did not parse).
fn pack_l2(frame: &[u8]) -> Words {
    let mut w = [0u64; WORDS];
    if frame.len() < 14 {
        return w;
    }
    let mut et = u16::from_be_bytes([frame[12], frame[13]]);
    w[1] = mac(&frame[6..12]);
    if matches!(et, 0x8100 | 0x88a8) && frame.len() >= 18 {
        let tci = u16::from_be_bytes([frame[14], frame[15]]);
        w[1] |= TAGGED | (u64::from(tci & 0xfff) << VID_SHIFT);
        et = u16::from_be_bytes([frame[16], frame[17]]);
    }
    w[0] = mac(&frame[0..6]) | (u64::from(et) << ETHERTYPE_SHIFT);
    w
}

/// One parsed level (offsets from `layout`, which checked the lengths).
fn pack(frame: &[u8], h: &Headers, vni: Option<u32>) -> Words {
    let mut w = [0u64; WORDS];
    let l2 = usize::from(h.l2);
    let l3 = usize::from(h.l3_offset);
    w[0] = mac(&frame[l2..]) | (u64::from(h.ethertype) << ETHERTYPE_SHIFT);
    w[1] = mac(&frame[l2 + 6..]);
    if h.vlan_tags > 0 {
        let tci = u16::from_be_bytes([frame[l2 + 14], frame[l2 + 15]]);
        w[1] |= TAGGED | (u64::from(tci & 0xfff) << VID_SHIFT);
    }
    match h.l3 {
        L3Kind::Ipv4 => {
            w[3] = be32(&frame[l3 + 12..]);
            w[5] = be32(&frame[l3 + 16..]);
            w[6] = IS_IP | IS_V4 | u64::from(h.protocol);
        }
        L3Kind::Ipv6 => {
            w[2] = be64(&frame[l3 + 8..]);
            w[3] = be64(&frame[l3 + 16..]);
            w[4] = be64(&frame[l3 + 24..]);
            w[5] = be64(&frame[l3 + 32..]);
            w[6] = IS_IP | IS_V6 | u64::from(h.protocol);
        }
        _ => {}
    }
    let l4 = usize::from(h.l4_offset);
    let ported = match h.l4 {
        L4Kind::Tcp | L4Kind::Udp => true,
        // SCTP: ports in the same place, when the header is there.
        L4Kind::Other(132) => h.frag != Fragment::Later && frame.len() >= l4 + 4,
        _ => false,
    };
    if let (true, Some(p)) = (ported, frame.get(l4..l4 + 4)) {
        let sport = u16::from_be_bytes([p[0], p[1]]);
        let dport = u16::from_be_bytes([p[2], p[3]]);
        w[6] |= HAS_PORTS | (u64::from(sport) << SPORT_SHIFT) | (u64::from(dport) << DPORT_SHIFT);
    }
    if let (L4Kind::Tcp, Some(&flags)) = (h.l4, frame.get(l4 + 13)) {
        w[6] |= IS_TCP | (u64::from(flags) << FLAGS_SHIFT);
    }
    if let Some(v) = vni {
        w[7] = TUNNELLED | u64::from(v & 0x00ff_ffff);
    }
    w
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
            Some(IpAddr::V6(Ipv6Addr::from((u128::from(hi) << 64) | u128::from(lo))))
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
