//! Super-frames of every layout GSO handles, and an independent checker of the
//! segments made from them.
//!
//! Shared by the offload crate's tests, the root package's GSO benchmark and its
//! tshark system test (which include this file by path). The checker reads the
//! segments with etherparse, not with linerate-wire, and computes every checksum
//! with etherparse's own routines; it then also runs linerate's verifier.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use etherparse::checksum::Sum16BitWords;
use etherparse::{NetSlice, SlicedPacket, TcpOptionElement, TransportSlice};
use linerate_offload::{Checksum, Gso, GsoTunnel, GsoType, OffloadMeta, csum};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::geneve::GeneveOption;
use linerate_wire::layout;

/// The tunnel around the segmented flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tunnel {
    /// No tunnel.
    None,
    /// VXLAN (UDP 4789).
    Vxlan,
    /// GENEVE (UDP 6081) with this many 8-byte options.
    Geneve {
        /// Number of options (each 4 bytes of header and 4 of data).
        options: u8,
    },
    /// NVGRE, with or without a GRE checksum.
    Nvgre {
        /// GRE header carries a checksum (C).
        csum: bool,
    },
}

impl Tunnel {
    /// Every layout, GENEVE with two options, NVGRE with and without checksum.
    pub const ALL: [Tunnel; 5] = [
        Tunnel::None,
        Tunnel::Vxlan,
        Tunnel::Geneve { options: 2 },
        Tunnel::Nvgre { csum: false },
        Tunnel::Nvgre { csum: true },
    ];

    /// A short name for messages and benchmark ids.
    pub fn name(self) -> String {
        match self {
            Tunnel::None => "plain".into(),
            Tunnel::Vxlan => "vxlan".into(),
            Tunnel::Geneve { options } => format!("geneve{options}"),
            Tunnel::Nvgre { csum: false } => "nvgre".into(),
            Tunnel::Nvgre { csum: true } => "nvgre-csum".into(),
        }
    }
}

/// VNI / VSID used in every tunnel.
pub const VNI: u32 = 0x00ab_cdef;
/// The flow's ports.
pub const SPORT: u16 = 40000;
/// The flow's destination port.
pub const DPORT: u16 = 5201;
/// The tunnel's UDP source port.
pub const TUNNEL_SPORT: u16 = 49999;

/// What super-frame to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The tunnel.
    pub tunnel: Tunnel,
    /// The segmented flow's IP version is 6 (the inner one in a tunnel).
    pub ip_v6: bool,
    /// The tunnel's outer IP version is 6.
    pub outer_v6: bool,
    /// UDP (USO) instead of TCP.
    pub udp: bool,
    /// Payload bytes (clamped to what fits, see [`max_payload`]).
    pub payload: usize,
    /// Segment size.
    pub mss: u16,
    /// UDP tunnel: ask for the outer UDP checksum per segment.
    pub outer_csum: bool,
    /// UDP tunnel: the super-frame's outer UDP checksum is filled in.
    pub input_outer_csum: bool,
    /// Keep the (inner) IPv4 ID.
    pub fixed_id: bool,
    /// Keep the outer IPv4 ID.
    pub outer_fixed_id: bool,
    /// TCP flags on the super-frame.
    pub fin: bool,
    /// TCP PSH.
    pub psh: bool,
    /// TCP CWR.
    pub cwr: bool,
    /// TCP ECE (kept on every segment).
    pub ece: bool,
    /// TCP timestamp option.
    pub tcp_options: bool,
    /// Initial sequence number.
    pub seq: u32,
    /// (Inner) IPv4 ID.
    pub ip_id: u16,
    /// Outer IPv4 ID.
    pub outer_ip_id: u16,
    /// A VLAN tag on the outermost Ethernet header.
    pub vlan: bool,
    /// The super-frame's transport checksum is partial (as the stack hands it).
    pub partial: bool,
    /// Seed of the payload bytes.
    pub seed: u8,
}

impl Spec {
    /// A TCP spec over `tunnel` with the given payload and MSS, defaults elsewhere.
    pub fn new(tunnel: Tunnel, payload: usize, mss: u16) -> Spec {
        Spec {
            tunnel,
            ip_v6: false,
            outer_v6: false,
            udp: false,
            payload,
            mss,
            outer_csum: false,
            input_outer_csum: false,
            fixed_id: false,
            outer_fixed_id: false,
            fin: false,
            psh: true,
            cwr: false,
            ece: false,
            tcp_options: true,
            seq: 1,
            ip_id: 100,
            outer_ip_id: 7,
            vlan: false,
            partial: true,
            seed: 1,
        }
    }

    /// The GSO kind this spec asks for.
    pub fn kind(&self) -> GsoType {
        match (self.udp, self.ip_v6) {
            (true, _) => GsoType::UdpL4,
            (false, false) => GsoType::TcpV4,
            (false, true) => GsoType::TcpV6,
        }
    }

    /// A short name: tunnel, versions, protocol.
    pub fn name(&self) -> String {
        let v = |six: bool| if six { "v6" } else { "v4" };
        let proto = if self.udp { "udp" } else { "tcp" };
        match self.tunnel {
            Tunnel::None => format!("plain-{}-{proto}", v(self.ip_v6)),
            t => format!(
                "{}-{}-{}-{proto}",
                t.name(),
                v(self.outer_v6),
                v(self.ip_v6)
            ),
        }
    }
}

/// A super-frame, its meta and its payload.
#[derive(Debug, Clone)]
pub struct Super {
    /// The whole frame.
    pub frame: Vec<u8>,
    /// Its offload meta (GSO request, checksum state, layout).
    pub meta: OffloadMeta,
    /// The payload it carries.
    pub payload: Vec<u8>,
}

fn ip(v6: bool, outer: bool, id: u16) -> Ip {
    let n = u8::from(outer);
    if v6 {
        let mut src = [0xfd; 16];
        let mut dst = [0xfd; 16];
        src[15] = 1 + n;
        dst[15] = 0x80 + n;
        Ip::v6(src, dst)
    } else {
        let mut h = match Ip::v4([10, n, 0, 1], [10, n, 0, 2]) {
            Ip::V4(h) => h,
            Ip::V6(..) => unreachable!(),
        };
        h.identification = id;
        Ip::V4(h)
    }
}

fn builder(spec: &Spec) -> FrameBuilder {
    let l4 = if spec.udp {
        L4::udp(SPORT, DPORT)
    } else {
        let mut h = etherparse::TcpHeader::new(SPORT, DPORT, spec.seq, 1000);
        h.ack = true;
        h.acknowledgment_number = 77;
        h.fin = spec.fin;
        h.psh = spec.psh;
        h.cwr = spec.cwr;
        h.ece = spec.ece;
        if spec.tcp_options {
            h.set_options(&[
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(0x0102_0304, 0x0506_0708),
            ])
            .unwrap();
        }
        L4::Tcp(h)
    };
    let b = FrameBuilder::new(ip(spec.ip_v6, false, spec.ip_id), l4);
    let outer = ip(spec.outer_v6, true, spec.outer_ip_id);
    let opt_data: Vec<[u8; 4]> = (0..8u8).map(|i| [i; 4]).collect();
    let b = match spec.tunnel {
        Tunnel::None => b,
        Tunnel::Vxlan => b.vxlan(VNI, outer),
        Tunnel::Geneve { options } => {
            let opts: Vec<GeneveOption<'_>> = (0..options)
                .map(|i| GeneveOption {
                    class: 0x0102,
                    kind: i + 1,
                    data: &opt_data[usize::from(i) % 8],
                })
                .collect();
            b.geneve(VNI, &opts, outer)
        }
        Tunnel::Nvgre { .. } => b.nvgre(VNI, 0x5a, outer),
    };
    let b = b
        .tunnel_ports(TUNNEL_SPORT, tunnel_dport(spec.tunnel))
        .outer_udp_checksum(spec.input_outer_csum);
    if spec.vlan { b.vlan(100) } else { b }
}

fn tunnel_dport(t: Tunnel) -> u16 {
    match t {
        Tunnel::Geneve { .. } => 6081,
        _ => 4789,
    }
}

/// The largest payload whose super-frame fits the 16-bit IP length fields.
pub fn max_payload(spec: &Spec) -> usize {
    let empty = builder(spec).build(&[]);
    let l = layout::parse(&empty).unwrap();
    let outer = &l.outer;
    let gre_csum = usize::from(matches!(spec.tunnel, Tunnel::Nvgre { csum: true })) * 4;
    // IPv4's total length is 16 bits; IPv6's payload length (without the fixed
    // header) too.
    let ip_overhead = empty.len() - usize::from(outer.l3_offset) + gre_csum;
    let v6 = if spec.tunnel == Tunnel::None {
        spec.ip_v6
    } else {
        spec.outer_v6
    };
    65535 + if v6 { 40 } else { 0 } - ip_overhead
}

/// Deterministic payload bytes.
pub fn payload_bytes(len: usize, seed: u8) -> Vec<u8> {
    let mut x = u32::from(seed)
        .wrapping_mul(2_654_435_761)
        .wrapping_add(12345);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Builds the super-frame of `spec` (payload clamped to [`max_payload`]).
pub fn build(spec: &Spec) -> Super {
    let len = spec.payload.min(max_payload(spec));
    let payload = payload_bytes(len, spec.seed);
    let mut frame = builder(spec).build(&payload);
    if let Tunnel::Nvgre { csum: true } = spec.tunnel {
        add_gre_checksum(&mut frame);
    }
    let l = layout::parse(&frame).unwrap();
    let mut gso = Gso::new(spec.kind(), spec.mss);
    gso.tunnel = match spec.tunnel {
        Tunnel::None => GsoTunnel::None,
        Tunnel::Vxlan | Tunnel::Geneve { .. } => GsoTunnel::Udp {
            outer_csum: spec.outer_csum,
        },
        Tunnel::Nvgre { csum } => GsoTunnel::Gre { csum },
    };
    gso.fixed_id = spec.fixed_id;
    gso.outer_fixed_id = spec.outer_fixed_id;
    gso.ecn = spec.cwr && !spec.udp;
    let csum = if spec.partial {
        csum::prepare_partial(&mut frame, &l).unwrap()
    } else {
        Checksum::None
    };
    let meta = OffloadMeta {
        csum,
        gso: Some(gso),
        rss: None,
    };
    Super {
        frame,
        meta,
        payload,
    }
}

/// Turns the NVGRE header of `frame` into one with a checksum (C), fixing the
/// outer IP length (FrameBuilder makes NVGRE without one).
pub fn add_gre_checksum(frame: &mut Vec<u8>) {
    let l = layout::parse(frame).unwrap();
    let (l3, l4) = (
        usize::from(l.outer.l3_offset),
        usize::from(l.outer.l4_offset),
    );
    frame.splice(l4 + 4..l4 + 4, [0u8; 4]);
    frame[l4] |= 0x80;
    if frame[l3] >> 4 == 4 {
        let total = u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]) + 4;
        frame[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
        frame[l3 + 10..l3 + 12].fill(0);
        let ihl = usize::from(frame[l3] & 0x0f) * 4;
        let c = Sum16BitWords::new()
            .add_slice(&frame[l3..l3 + ihl])
            .ones_complement();
        frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
    } else {
        let plen = u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]) + 4;
        frame[l3 + 4..l3 + 6].copy_from_slice(&plen.to_be_bytes());
    }
    let c = Sum16BitWords::new()
        .add_slice(&frame[l4..])
        .ones_complement();
    frame[l4 + 4..l4 + 6].copy_from_slice(&c.to_be_bytes());
}

/// Two checksum field values are the same checksum (0 and 0xffff are both
/// "negative zero" in one's complement).
fn same_csum(a: u16, b: u16) -> bool {
    a == b || (a | b == 0xffff && (a == 0 || b == 0))
}

/// What one network level of a segment holds, read by etherparse.
struct Level<'a> {
    ipv4: Option<etherparse::Ipv4Header>,
    ipv6: Option<etherparse::Ipv6Header>,
    /// The IP payload.
    ip_payload: &'a [u8],
    transport: Option<TransportSlice<'a>>,
}

fn level<'a>(bytes: &'a [u8], vlan: bool, what: &str) -> Level<'a> {
    let p = SlicedPacket::from_ethernet(bytes).unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(p.vlan().is_some(), vlan, "{what}: VLAN tag");
    let (ipv4, ipv6, ip_payload) = match p.net {
        Some(NetSlice::Ipv4(ip)) => {
            let h = ip.header().to_header();
            assert_eq!(
                h.header_checksum,
                h.calc_header_checksum(),
                "{what}: IPv4 header checksum"
            );
            assert_eq!(
                usize::from(h.total_len),
                ip.header().slice().len() + ip.payload().payload.len(),
                "{what}: IPv4 total length"
            );
            (Some(h), None, ip.payload().payload)
        }
        Some(NetSlice::Ipv6(ip)) => (None, Some(ip.header().to_header()), ip.payload().payload),
        other => panic!("{what}: not IP: {other:?}"),
    };
    // The IP packet ends the frame: no padding, nothing lost.
    let end = ip_payload.as_ptr() as usize + ip_payload.len();
    assert_eq!(end, bytes.as_ptr() as usize + bytes.len(), "{what}: IP end");
    Level {
        ipv4,
        ipv6,
        ip_payload,
        transport: p.transport,
    }
}

fn check_udp(lv: &Level<'_>, u: &etherparse::UdpSlice<'_>, what: &str, zero_ok: bool) {
    assert_eq!(
        usize::from(u.length()),
        lv.ip_payload.len(),
        "{what}: UDP length"
    );
    let h = u.to_header();
    let want = match (&lv.ipv4, &lv.ipv6) {
        (Some(ip), _) => h.calc_checksum_ipv4(ip, u.payload()).unwrap(),
        (_, Some(ip)) => h.calc_checksum_ipv6(ip, u.payload()).unwrap(),
        _ => unreachable!(),
    };
    if u.checksum() == 0 {
        assert!(zero_ok, "{what}: UDP checksum missing");
    } else {
        assert!(
            same_csum(u.checksum(), want),
            "{what}: UDP checksum {:#06x}, etherparse {want:#06x}",
            u.checksum()
        );
    }
}

/// Checks the segments made from `sup` (built from `spec`) against the rules of
/// segmentation, with etherparse's parsing and checksums and then linerate's
/// verifier. Panics with a message on the first violation.
pub fn check_segments(spec: &Spec, sup: &Super, segs: &[Vec<u8>]) {
    let mss = usize::from(spec.mss);
    let n = segs.len();
    let want_n = sup.payload.len().div_ceil(mss).max(1);
    assert_eq!(n, want_n, "segment count");
    let mut joined = Vec::with_capacity(sup.payload.len());
    for (i, f) in segs.iter().enumerate() {
        let what = format!("{} segment {i}/{n}", spec.name());
        let (first, last) = (i == 0, i + 1 == n);
        let outer = level(f, spec.vlan, &what);
        let mut levels = 0u8;
        // The tunnel, if any: its IP ID, its checksum, and where the inner frame is.
        let inner_bytes: Option<&[u8]> = match spec.tunnel {
            Tunnel::None => None,
            Tunnel::Vxlan | Tunnel::Geneve { .. } => {
                let Some(TransportSlice::Udp(u)) = &outer.transport else {
                    panic!("{what}: no outer UDP")
                };
                assert_eq!(u.source_port(), TUNNEL_SPORT, "{what}: tunnel port");
                assert_eq!(u.destination_port(), tunnel_dport(spec.tunnel));
                let want_csum = spec.outer_csum || (spec.outer_v6 && spec.input_outer_csum);
                assert_eq!(u.checksum() != 0, want_csum, "{what}: outer UDP checksum");
                levels += u8::from(want_csum);
                check_udp(&outer, u, &what, true);
                let t = u.payload();
                let tlen = match spec.tunnel {
                    Tunnel::Vxlan => {
                        assert_eq!(t[0], 0x08, "{what}: VXLAN flags");
                        8
                    }
                    _ => {
                        assert_eq!(t[0] >> 6, 0, "{what}: GENEVE version");
                        8 + usize::from(t[0] & 0x3f) * 4
                    }
                };
                let vni = u32::from_be_bytes([0, t[4], t[5], t[6]]);
                assert_eq!(vni, VNI, "{what}: VNI");
                Some(&t[tlen..])
            }
            Tunnel::Nvgre { csum } => {
                let g = outer.ip_payload;
                let flags = u16::from_be_bytes([g[0], g[1]]);
                assert_eq!(flags & 0x8000 != 0, csum, "{what}: GRE C");
                assert_eq!(&g[2..4], &[0x65, 0x58], "{what}: GRE protocol");
                let glen = 4 + 4
                    * (usize::from(flags & 0x8000 != 0)
                        + usize::from(flags & 0x2000 != 0)
                        + usize::from(flags & 0x1000 != 0));
                if csum {
                    let c = Sum16BitWords::new().add_slice(g).ones_complement();
                    assert_eq!(c, 0, "{what}: GRE checksum");
                    levels += 1;
                }
                let key = u32::from_be_bytes(g[glen - 4..glen].try_into().unwrap());
                assert_eq!(key >> 8, VNI, "{what}: VSID");
                Some(&g[glen..])
            }
        };
        if let Some(ip) = &outer.ipv4
            && spec.tunnel != Tunnel::None
        {
            let step = if spec.outer_fixed_id { 0 } else { i as u16 };
            let want = spec.outer_ip_id.wrapping_add(step);
            assert_eq!(ip.identification, want, "{what}: outer IP ID");
        }
        let flow = match inner_bytes {
            Some(b) => level(b, false, &what),
            None => outer,
        };
        if let Some(ip) = &flow.ipv4 {
            let step = if spec.fixed_id { 0 } else { i as u16 };
            let want = spec.ip_id.wrapping_add(step);
            assert_eq!(ip.identification, want, "{what}: IP ID");
        }
        assert_eq!(flow.ipv6.is_some(), spec.ip_v6, "{what}: IP version");
        let payload = match &flow.transport {
            Some(TransportSlice::Tcp(t)) if !spec.udp => {
                assert_eq!((t.source_port(), t.destination_port()), (SPORT, DPORT));
                let seq = spec.seq.wrapping_add((i * mss) as u32);
                assert_eq!(t.sequence_number(), seq, "{what}: sequence number");
                assert_eq!(t.fin(), spec.fin && last, "{what}: FIN");
                assert_eq!(t.psh(), spec.psh && last, "{what}: PSH");
                assert_eq!(t.cwr(), spec.cwr && first, "{what}: CWR");
                assert_eq!(t.ece(), spec.ece, "{what}: ECE");
                assert!(t.ack() && t.acknowledgment_number() == 77, "{what}: ACK");
                assert_eq!(t.options().len(), if spec.tcp_options { 12 } else { 0 });
                let h = t.to_header();
                let want = match (&flow.ipv4, &flow.ipv6) {
                    (Some(ip), _) => h.calc_checksum_ipv4(ip, t.payload()).unwrap(),
                    (_, Some(ip)) => h.calc_checksum_ipv6(ip, t.payload()).unwrap(),
                    _ => unreachable!(),
                };
                assert!(
                    same_csum(t.checksum(), want),
                    "{what}: TCP checksum {:#06x}, etherparse {want:#06x}",
                    t.checksum()
                );
                t.payload()
            }
            Some(TransportSlice::Udp(u)) if spec.udp => {
                assert_eq!((u.source_port(), u.destination_port()), (SPORT, DPORT));
                check_udp(&flow, u, &what, false);
                u.payload()
            }
            other => panic!("{what}: unexpected transport {other:?}"),
        };
        levels += 1;
        assert!(payload.len() <= mss, "{what}: {} > MSS", payload.len());
        if !last {
            assert_eq!(payload.len(), mss, "{what}: short segment before the last");
        }
        joined.extend_from_slice(payload);
        // And linerate's own verifier agrees, and so do linerate-wire's views.
        let l = layout::parse(f).unwrap_or_else(|e| panic!("{what}: {e}"));
        let v = csum::verify(f, &l);
        assert_eq!(v.bad, None, "{what}: linerate verify");
        assert_eq!(v.levels, levels, "{what}: verified levels");
        check_with_views(f, &l, &what);
    }
    assert!(joined == sup.payload, "{}: payloads differ", spec.name());
}

/// Checks the IPv4 header and transport checksums of every level of `f` with
/// linerate-wire's header views.
fn check_with_views(f: &[u8], l: &layout::Layout, what: &str) {
    use linerate_wire::layout::{L3Kind, L4Kind};
    use linerate_wire::{gre, ipv4, ipv6, tcp, udp};
    for h in [Some(l.outer), l.inner].into_iter().flatten() {
        let (l3, l4, end) = (
            usize::from(h.l3_offset),
            usize::from(h.l4_offset),
            h.l3_end(),
        );
        let len = end - l4;
        let pseudo = |proto: u8| match h.l3 {
            L3Kind::Ipv4 => {
                let ip = ipv4::Packet::new_checked(&f[l3..end]).unwrap();
                assert!(ip.verify_checksum(), "{what}: IPv4 view checksum");
                ip.pseudo_header_sum(len as u16)
            }
            _ => ipv6::Packet::new_checked(&f[l3..end])
                .unwrap()
                .pseudo_header_sum(proto, len as u32),
        };
        match h.l4 {
            L4Kind::Tcp => {
                let p = tcp::Packet::new_checked(&f[l4..end]).unwrap();
                assert!(p.verify_checksum(pseudo(6)), "{what}: TCP view checksum");
            }
            L4Kind::Udp => {
                let p = udp::Packet::new_checked(&f[l4..end]).unwrap();
                // Zero is absent: fine for a tunnel's outer header.
                let zero_ok = l.tunnel.is_some() && h == l.outer;
                assert!(
                    p.verify_checksum(pseudo(17), zero_ok),
                    "{what}: UDP view checksum"
                );
            }
            L4Kind::Gre => {
                let _ = pseudo(47);
                let p = gre::Packet::new_checked(&f[l4..end]).unwrap();
                assert!(p.verify_checksum(), "{what}: GRE view checksum");
            }
            other => panic!("{what}: unexpected {other:?}"),
        }
    }
}
