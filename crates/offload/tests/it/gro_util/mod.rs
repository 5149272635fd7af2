//! Shared helpers of the GRO tests: segment trains built with `FrameBuilder`, a
//! runner that collects what GRO delivers, and a reference re-segmenter that
//! applies the GSO rules of REFERENCE.md to a merged frame, so tests can check that
//! GRO followed by GSO gives back exactly the segments that went in.
#![allow(dead_code)]
// Helpers of tests: a panic here is a failed test.
#![allow(clippy::unwrap_used)]

use linerate_offload::gro::Gro;
use linerate_offload::{Checksum, GsoTunnel, GsoType, OffloadMeta};
use linerate_wire::build::{FrameBuilder, Ip, L4};
use linerate_wire::checksum;
use linerate_wire::etherparse::{IpDscp, Ipv6FlowLabel, TcpHeader};
use linerate_wire::geneve::GeneveOption;
use linerate_wire::layout::{self, Headers, L3Kind, L4Kind, TunnelKind};

/// Inner source and destination addresses.
pub const SRC4: [u8; 4] = [10, 0, 0, 1];
pub const DST4: [u8; 4] = [10, 0, 0, 2];
pub const SRC6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const DST6: [u8; 16] = [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// Meta of a frame whose checksums the NIC verified (every level).
pub fn verified() -> OffloadMeta {
    OffloadMeta {
        csum: Checksum::Verified { levels: 3 },
        ..OffloadMeta::plain()
    }
}

/// Meta of a frame nothing verified.
pub fn unverified() -> OffloadMeta {
    OffloadMeta::plain()
}

/// IPv4 with DF, TTL 64 and `id`.
pub fn v4(id: u16) -> Ip {
    let mut ip = Ip::v4(SRC4, DST4);
    if let Ip::V4(h) = &mut ip {
        h.identification = id;
    }
    ip
}

/// IPv6 with hop limit 64.
pub fn v6() -> Ip {
    Ip::v6(SRC6, DST6)
}

/// Sets the IPv4 TOS (DSCP) of `ip`.
pub fn with_dscp(mut ip: Ip, dscp: u8) -> Ip {
    if let Ip::V4(h) = &mut ip {
        h.dscp = IpDscp::try_new(dscp).unwrap();
    }
    ip
}

/// Sets the IPv6 flow label of `ip`.
pub fn with_flow_label(mut ip: Ip, label: u32) -> Ip {
    if let Ip::V6(h, _) = &mut ip {
        h.flow_label = Ipv6FlowLabel::try_new(label).unwrap();
    }
    ip
}

/// A TCP header 40000 -> 443 with ACK, ack number 1, window 65535 and `seq`.
pub fn tcp(seq: u32) -> TcpHeader {
    let mut h = TcpHeader::new(40000, 443, seq, 65535);
    h.ack = true;
    h.acknowledgment_number = 1;
    h
}

/// Payload bytes that tell flow `tag` and sequence number `seq` apart.
pub fn payload(tag: u8, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq.wrapping_add(i as u32) as u8) ^ tag.wrapping_mul(37))
        .collect()
}

/// A plain frame.
pub fn frame(ip: Ip, tcp: TcpHeader, len: usize) -> Vec<u8> {
    let seq = tcp.sequence_number;
    FrameBuilder::new(ip, L4::Tcp(tcp)).build(&payload(0, seq, len))
}

/// `n` plain IPv4 segments of `mss` bytes from sequence 1, IDs 100, 101, ...
pub fn train_v4(n: usize, mss: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| frame(v4(100 + i as u16), tcp(1 + (i * mss) as u32), mss))
        .collect()
}

/// What GRO delivered.
pub type Delivered = Vec<(Vec<u8>, OffloadMeta)>;

/// Feeds `frames` (each with `meta`) to `gro` as one batch, then flushes.
pub fn run_with(gro: &mut Gro, frames: &[Vec<u8>], meta: OffloadMeta) -> Delivered {
    let mut out = Vec::new();
    gro.receive_batch(
        0,
        frames.iter().map(|f| (f.as_slice(), meta)),
        &mut |f: &[u8], m: &OffloadMeta| out.push((f.to_vec(), *m)),
    );
    out
}

/// [`run_with`] with [`verified`] meta.
pub fn run(gro: &mut Gro, frames: &[Vec<u8>]) -> Delivered {
    run_with(gro, frames, verified())
}

/// Asserts every packet was accounted once and every delivered frame once, and
/// nothing is left held.
pub fn assert_balanced(g: &Gro) {
    let c = g.counters();
    assert_eq!(c.received, c.merged + c.held + c.refused_total(), "{c}");
    assert_eq!(c.delivered, c.flushed_total() + c.refused_total(), "{c}");
    assert_eq!(g.held(), 0);
}

/// Segment counts of what was delivered (1 for frames delivered as they came).
pub fn segs(out: &Delivered) -> Vec<u16> {
    out.iter()
        .map(|(_, m)| m.gso.map_or(1, |g| g.segs))
        .collect()
}

// ---- reference GSO -------------------------------------------------------------

fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Pseudo-header sum for the transport header at `h` of `seg`.
fn pseudo(seg: &[u8], h: &Headers, proto: u8) -> u32 {
    let l3 = usize::from(h.l3_offset);
    let len = seg.len() - usize::from(h.l4_offset);
    match h.l3 {
        L3Kind::Ipv4 => checksum::pseudo_ipv4(
            seg[l3 + 12..l3 + 16].try_into().unwrap(),
            seg[l3 + 16..l3 + 20].try_into().unwrap(),
            proto,
            len as u16,
        ),
        _ => checksum::pseudo_ipv6(
            seg[l3 + 8..l3 + 24].try_into().unwrap(),
            seg[l3 + 24..l3 + 40].try_into().unwrap(),
            proto,
            len as u32,
        ),
    }
}

/// Fixes an IP header for a segment: length, and for IPv4 the ID (first + `i`
/// unless fixed) and header checksum.
fn fix_ip(seg: &mut [u8], h: &Headers, i: usize, fixed: bool) {
    let l3 = usize::from(h.l3_offset);
    let total = seg.len() - l3;
    match h.l3 {
        L3Kind::Ipv4 => {
            put16(seg, l3 + 2, total as u16);
            if !fixed {
                let id = get16(seg, l3 + 4).wrapping_add(i as u16);
                put16(seg, l3 + 4, id);
            }
            put16(seg, l3 + 10, 0);
            let c = checksum::checksum(&seg[l3..l3 + 20]);
            put16(seg, l3 + 10, c);
        }
        _ => put16(seg, l3 + 4, (total - 40) as u16),
    }
}

/// Re-segments a delivered frame as GSO would (REFERENCE.md "GSO / TSO"), or
/// returns it as it is when it carries no GSO record. Also checks that the merged
/// frame's partial checksum field holds the pseudo-header sum.
pub fn resegment(frame: &[u8], meta: &OffloadMeta) -> Vec<Vec<u8>> {
    let Some(gso) = meta.gso else {
        return vec![frame.to_vec()];
    };
    let l = layout::parse(frame).unwrap();
    let h = *l.innermost();
    let tcp = gso.kind != GsoType::UdpL4;
    let (proto, csum_at) = if tcp { (6, 16) } else { (17, 6) };
    assert_eq!(
        meta.csum,
        Checksum::Partial {
            start: h.l4_offset,
            offset: csum_at as u16
        }
    );
    let l4 = usize::from(h.l4_offset);
    assert_eq!(
        get16(frame, l4 + csum_at),
        checksum::fold(pseudo(frame, &h, proto)),
        "partial checksum field holds the pseudo-header sum"
    );
    let hdr_len = usize::from(l.payload);
    let chunks: Vec<&[u8]> = frame[hdr_len..].chunks(usize::from(gso.size)).collect();
    assert_eq!(chunks.len(), usize::from(gso.segs), "segs matches size");
    let n = chunks.len();
    let seq0 = get32(frame, l4 + 4);
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| {
            let mut seg = frame[..hdr_len].to_vec();
            seg.extend_from_slice(chunk);
            let tunnelled = l.tunnel.is_some();
            // Inner (or only) IP header and the transport.
            fix_ip(&mut seg, &h, i, gso.fixed_id);
            if tcp {
                put32(
                    &mut seg,
                    l4 + 4,
                    seq0.wrapping_add((i * usize::from(gso.size)) as u32),
                );
                let mut flags = get16(&seg, l4 + 12);
                if i > 0 {
                    flags &= !0x0080; // CWR only on the first
                }
                if i + 1 < n {
                    flags &= !0x0009; // FIN and PSH only on the last
                }
                put16(&mut seg, l4 + 12, flags);
            } else {
                let len = seg.len() - l4;
                put16(&mut seg, l4 + 4, len as u16);
            }
            put16(&mut seg, l4 + csum_at, 0);
            let ps = pseudo(&seg, &h, proto);
            let mut c = checksum::finish(checksum::partial(&seg[l4..], ps));
            if !tcp && c == 0 {
                c = 0xffff;
            }
            put16(&mut seg, l4 + csum_at, c);
            if tunnelled {
                let o = l.outer;
                let t = l.tunnel.unwrap();
                let ol4 = usize::from(o.l4_offset);
                match gso.tunnel {
                    GsoTunnel::Udp { outer_csum } => {
                        assert_ne!(t.kind, TunnelKind::Nvgre);
                        let len = seg.len() - ol4;
                        put16(&mut seg, ol4 + 4, len as u16);
                        put16(&mut seg, ol4 + 6, 0);
                        if outer_csum {
                            let ps = pseudo(&seg, &o, 17);
                            let mut c = checksum::finish(checksum::partial(&seg[ol4..], ps));
                            if c == 0 {
                                c = 0xffff;
                            }
                            put16(&mut seg, ol4 + 6, c);
                        }
                    }
                    GsoTunnel::Gre { csum } => {
                        assert_eq!(t.kind, TunnelKind::Nvgre);
                        if csum {
                            put16(&mut seg, ol4 + 4, 0);
                            let c = checksum::checksum(&seg[ol4..]);
                            put16(&mut seg, ol4 + 4, c);
                        }
                    }
                    GsoTunnel::None => panic!("tunnelled frame without a GSO tunnel kind"),
                }
                fix_ip(&mut seg, &o, i, gso.outer_fixed_id);
            } else {
                assert_eq!(gso.tunnel, GsoTunnel::None);
            }
            seg
        })
        .collect()
}

/// Every delivered frame re-segmented, in delivery order.
pub fn resegment_all(out: &Delivered) -> Vec<Vec<u8>> {
    out.iter().flat_map(|(f, m)| resegment(f, m)).collect()
}

// ---- tunnels ---------------------------------------------------------------------

/// An outer (underlay) IPv4 header with `id`.
pub fn under4(id: u16) -> Ip {
    let mut ip = Ip::v4([192, 0, 2, 1], [192, 0, 2, 2]);
    if let Ip::V4(h) = &mut ip {
        h.identification = id;
    }
    ip
}

/// An outer (underlay) IPv6 header.
pub fn under6() -> Ip {
    Ip::v6(
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
    )
}

/// A GENEVE option with `data`.
pub fn geneve_opt(data: &[u8]) -> GeneveOption<'_> {
    GeneveOption {
        class: 0x0102,
        kind: 1,
        data,
    }
}

/// True if `frame` parses as a tunnelled TCP frame.
pub fn is_tunnelled_tcp(frame: &[u8]) -> bool {
    let l = layout::parse(frame).unwrap();
    l.tunnel.is_some() && l.inner.is_some_and(|i| i.l4 == L4Kind::Tcp)
}

/// Recomputes the IPv4 header checksum of the header at `l3`.
pub fn refill_ipv4_csum(frame: &mut [u8], l3: usize) {
    put16(frame, l3 + 10, 0);
    let c = checksum::checksum(&frame[l3..l3 + 20]);
    put16(frame, l3 + 10, c);
}

/// Recomputes the TCP checksum of the innermost TCP header of `frame`.
pub fn refill_tcp_csum(frame: &mut [u8]) {
    let l = layout::parse(frame).unwrap();
    let h = *l.innermost();
    let l4 = usize::from(h.l4_offset);
    put16(frame, l4 + 16, 0);
    let ps = pseudo(frame, &h, 6);
    let c = checksum::finish(checksum::partial(&frame[l4..], ps));
    put16(frame, l4 + 16, c);
}
