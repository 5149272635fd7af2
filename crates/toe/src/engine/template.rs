//! Per-connection header templates: the Ethernet header, the IP header (RFC 791
//! or RFC 8200) and the TCP ports (RFC 9293 section 3.1) every segment of one
//! connection to one next hop shares, built once, with the sums of their fixed
//! fields (RFC 1071). A segment copies the template with a few wide moves and
//! patches what varies: the IP length, ID and ECN codepoint, the IPv4 header
//! checksum (the fixed fields' sum plus the varying ones), and the TCP fields,
//! whose checksum starts from the pseudo-header sum kept here.
//!
//! The template is rebuilt when the next hop's MAC changes (a neighbour moved),
//! and when the slot gets a new connection.

use super::output::{HOP_LIMIT, put_eth, put_ipv6};
use linerate_wire::checksum;
use linerate_wire::ethernet::{self, ethertype};
use linerate_wire::ipv4::{self, protocol};
use linerate_wire::{ipv6, tcp};
use std::net::{IpAddr, SocketAddr};

/// Ethernet, IPv4 and the TCP ports.
pub(super) const V4_LEN: usize = ethernet::HEADER_LEN + ipv4::HEADER_LEN + 4;
/// Ethernet, IPv6 and the TCP ports.
pub(super) const V6_LEN: usize = ethernet::HEADER_LEN + ipv6::HEADER_LEN + 4;

/// The fixed header bytes of one connection's segments to one next hop.
#[derive(Debug, Clone)]
pub(super) struct TxTemplate {
    /// Ethernet, IP with its length, ID, checksum and ECN bits zero, then the
    /// TCP source and destination ports ([`V4_LEN`] or [`V6_LEN`] bytes used).
    hdr: [u8; V6_LEN],
    /// The next hop the template is for; `None` until one is built.
    dst_mac: Option<[u8; 6]>,
    v4: bool,
    /// IPv4: the unfolded sum of the header's fixed words (version and IHL,
    /// flags, TTL and protocol, addresses).
    ip_sum: u32,
    /// The pseudo-header's addresses and protocol (its length is added per
    /// segment), unfolded.
    pseudo: u32,
    /// The TCP ports as one big-endian word.
    ports: u32,
}

impl TxTemplate {
    /// No template: the first segment builds one.
    pub(super) const EMPTY: TxTemplate = TxTemplate {
        hdr: [0; V6_LEN],
        dst_mac: None,
        v4: true,
        ip_sum: 0,
        pseudo: 0,
        ports: 0,
    };

    /// True if this is the template for next hop `dst_mac`.
    #[inline(always)]
    pub(super) fn is_for(&self, dst_mac: [u8; 6]) -> bool {
        self.dst_mac == Some(dst_mac)
    }

    /// The template of segments from `local` to `remote` through `macs`
    /// (destination, source), or `None` if the two addresses are of different
    /// families.
    #[cold]
    #[inline(never)]
    pub(super) fn new(
        macs: ([u8; 6], [u8; 6]),
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Option<TxTemplate> {
        let mut t = TxTemplate::EMPTY;
        let [p0, p1] = local.port().to_be_bytes();
        let [q0, q1] = remote.port().to_be_bytes();
        t.ports = u32::from_be_bytes([p0, p1, q0, q1]);
        let l3 = ethernet::HEADER_LEN;
        match (local.ip(), remote.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put_eth(&mut t.hdr, macs.0, macs.1, ethertype::IPV4);
                let [s0, s1, s2, s3] = s.octets();
                let [d0, d1, d2, d3] = d.octets();
                let ip = [
                    0x45,
                    0,
                    0,
                    0,
                    0,
                    0,
                    0x40,
                    0,
                    HOP_LIMIT,
                    protocol::TCP,
                    0,
                    0,
                    s0,
                    s1,
                    s2,
                    s3,
                    d0,
                    d1,
                    d2,
                    d3,
                    p0,
                    p1,
                    q0,
                    q1,
                ];
                t.hdr.get_mut(l3..V4_LEN)?.copy_from_slice(&ip);
                t.ip_sum = checksum::partial(t.hdr.get(l3..l3 + ipv4::HEADER_LEN)?, 0);
                t.pseudo = checksum::pseudo_ipv4(s.octets(), d.octets(), protocol::TCP, 0);
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put_eth(&mut t.hdr, macs.0, macs.1, ethertype::IPV6);
                put_ipv6(t.hdr.get_mut(l3..)?, s, d, protocol::TCP, 0, HOP_LIMIT);
                t.hdr
                    .get_mut(V6_LEN - 4..)?
                    .copy_from_slice(&[p0, p1, q0, q1]);
                t.v4 = false;
                t.pseudo = checksum::pseudo_ipv6(&s.octets(), &d.octets(), protocol::TCP, 0);
            }
            _ => return None,
        }
        t.dst_mac = Some(macs.0);
        Some(t)
    }

    /// The offset of the TCP header in a frame built from this template.
    #[inline(always)]
    pub(super) fn l4(&self) -> usize {
        if self.v4 { V4_LEN - 4 } else { V6_LEN - 4 }
    }

    /// True for IPv4.
    #[inline(always)]
    pub(super) fn is_v4(&self) -> bool {
        self.v4
    }

    /// Writes the headers of a segment into `buf` (which may hold anything
    /// before): Ethernet, IP for `l4_len` bytes of TCP with identification
    /// `id` (IPv4) and ECN codepoint `ecn` (zero for Not-ECT), and the TCP
    /// header with `fixed` (sequence and acknowledgment numbers, data offset
    /// and flags, window) and `opts` (a multiple of 4 bytes). The TCP
    /// checksum field is left zero. Returns the TCP header's unfolded sum with
    /// the pseudo-header's (the checksum of a segment without data, before
    /// [`checksum::finish`]), and the pseudo-header sum alone; `None` if `buf`
    /// is too short.
    #[inline(always)]
    pub(super) fn write(
        &self,
        buf: &mut [u8],
        l4_len: usize,
        id: u16,
        ecn: u8,
        fixed: TcpFixed,
        opts: &[u8],
    ) -> Option<(u32, u32)> {
        let l4 = if self.v4 {
            let (h, _) = buf.split_first_chunk_mut::<V4_LEN>()?;
            let t = self.hdr.first_chunk::<V4_LEN>()?;
            *h = *t;
            let total = (ipv4::HEADER_LEN + l4_len).min(65_535) as u16;
            // The ECN codepoint is the low byte of the first word.
            let sum = self.ip_sum + u32::from(total) + u32::from(id) + u32::from(ecn);
            let [t0, t1] = total.to_be_bytes();
            let [i0, i1] = id.to_be_bytes();
            let [c0, c1] = checksum::finish(sum).to_be_bytes();
            let ip = h.get_mut(ethernet::HEADER_LEN..)?;
            let ip = ip.first_chunk_mut::<12>()?;
            ip[1] = ecn;
            ip[2] = t0;
            ip[3] = t1;
            ip[4] = i0;
            ip[5] = i1;
            ip[10] = c0;
            ip[11] = c1;
            V4_LEN
        } else {
            let (h, _) = buf.split_first_chunk_mut::<V6_LEN>()?;
            *h = self.hdr;
            let [l0, l1] = (l4_len.min(65_535) as u16).to_be_bytes();
            let ip = h.get_mut(ethernet::HEADER_LEN..)?;
            let ip = ip.first_chunk_mut::<6>()?;
            // The traffic class's low two bits are the top of byte 1's upper
            // nibble.
            ip[1] |= ecn << 4;
            ip[4] = l0;
            ip[5] = l1;
            V6_LEN
        };
        // The TCP header after the ports: sequence and acknowledgment
        // numbers, data offset and flags, window, checksum and urgent pointer
        // zero, in one store.
        let off_flags = (((tcp::HEADER_LEN + opts.len()) as u32 / 4) << 12) | fixed.flags;
        let word3 = (off_flags << 16) | u32::from(fixed.wnd);
        let rest =
            (u128::from(fixed.seq) << 96) | (u128::from(fixed.ack) << 64) | u128::from(word3) << 32;
        let (t, _) = buf.get_mut(l4..)?.split_first_chunk_mut::<16>()?;
        *t = rest.to_be_bytes();
        let o = buf.get_mut(l4 + 16..l4 + 16 + opts.len())?;
        o.copy_from_slice(opts);
        // The pseudo-header's length: 16 bits for IPv4, 32 for IPv6 (a 32-bit
        // word sums as its two halves).
        let len = if self.v4 {
            l4_len.min(65_535) as u64
        } else {
            l4_len as u32 as u64
        };
        let pseudo = u64::from(self.pseudo) + len;
        let mut sum = pseudo
            + u64::from(self.ports)
            + u64::from(fixed.seq)
            + u64::from(fixed.ack)
            + u64::from(word3);
        for w in opts.chunks_exact(4) {
            if let Ok(w) = <[u8; 4]>::try_from(w) {
                sum += u64::from(u32::from_be_bytes(w));
            }
        }
        Some((u32::from(fold64(sum)), u32::from(fold64(pseudo))))
    }
}

/// The TCP header fields that vary per segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct TcpFixed {
    pub seq: u32,
    pub ack: u32,
    /// The NS bit and the eight flags (RFC 3540, RFC 9293).
    pub flags: u32,
    pub wnd: u16,
}

/// Folds a sum of at most 2^32 words to 16 bits (zero only if it is zero).
#[inline(always)]
fn fold64(sum: u64) -> u16 {
    let s = (sum & 0xffff_ffff) + (sum >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    checksum::fold(s as u32)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::super::output::{build_tcp, put_ipv4, set_ecn};
    use super::*;
    use crate::config::TcpConfig;
    use crate::tcp::conn::{Conn, ConnParams};
    use crate::tcp::segment::Outgoing;
    use crate::tcp::seq::Seq;
    use crate::time::Instant;
    use linerate_offload::{Checksum, Gso, GsoType, OffloadMeta};
    use linerate_wire::tcp::{Flags, SackBlocks, SynOptions};
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// The frame as the engine built it before templates: every header
    /// written field by field, the IPv4 checksum summed from the fields, the
    /// ECN codepoint set afterwards with an incremental update, the TCP
    /// checksum summed over the header bytes.
    fn reference(
        buf: &mut [u8],
        macs: ([u8; 6], [u8; 6]),
        conn: &Conn,
        o: &Outgoing,
        opts: &[u8],
        id: u16,
        offloads: bool,
    ) -> Option<OffloadMeta> {
        let (local, remote) = (conn.local, conn.remote);
        let tcp_len = tcp::HEADER_LEN + opts.len();
        let l3 = ethernet::HEADER_LEN;
        let l4 = l3
            + if local.is_ipv4() {
                ipv4::HEADER_LEN
            } else {
                ipv6::HEADER_LEN
            };
        let l4_len = tcp_len + o.data_len;
        let pseudo = match (local.ip(), remote.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                put_eth(buf, macs.0, macs.1, ethertype::IPV4);
                put_ipv4(buf.get_mut(l3..)?, s, d, protocol::TCP, l4_len, id);
                checksum::pseudo_ipv4(
                    s.octets(),
                    d.octets(),
                    protocol::TCP,
                    l4_len.min(65_535) as u16,
                )
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put_eth(buf, macs.0, macs.1, ethertype::IPV6);
                put_ipv6(buf.get_mut(l3..)?, s, d, protocol::TCP, l4_len, HOP_LIMIT);
                checksum::pseudo_ipv6(&s.octets(), &d.octets(), protocol::TCP, l4_len as u32)
            }
            _ => return None,
        };
        if conn.ecn.ect(o.data_len, o.retransmit) {
            set_ecn(buf.get_mut(l3..)?, crate::tcp::ecn::ECT0);
        }
        let seg = buf.get_mut(l4..)?;
        let (hdr, data) = seg.split_at_mut(tcp_len);
        {
            hdr.fill(0);
            let mut t = tcp::Packet::new_unchecked(&mut hdr[..]);
            t.set_src_port(local.port());
            t.set_dst_port(remote.port());
            t.set_seq_number(o.seq.0);
            let ack = if o.flags.contains(Flags::ACK) {
                o.ack.0
            } else {
                0
            };
            t.set_ack_number(ack);
            t.set_data_offset((tcp_len / 4) as u8);
            t.set_flags(o.flags);
            t.set_window(o.wnd);
            t.options_mut().copy_from_slice(opts);
        }
        let sum = if offloads {
            conn.tx.peek(o.data_off, data);
            None
        } else {
            let (_, data_sum) = conn.tx.peek_sum(o.data_off, data);
            Some(checksum::combine(checksum::partial(hdr, pseudo), data_sum))
        };
        let mut t = tcp::Packet::new_unchecked(seg);
        let mut meta = OffloadMeta::plain();
        if let Some(sum) = sum {
            t.set_checksum(checksum::finish(sum));
        } else {
            t.set_checksum(checksum::fold(pseudo));
            meta.csum = Checksum::Partial {
                start: l4 as u16,
                offset: 16,
            };
            if o.data_len > o.mss && o.mss > 0 {
                let kind = if local.is_ipv4() {
                    GsoType::TcpV4
                } else {
                    GsoType::TcpV6
                };
                let mut gso = Gso::new(kind, o.mss.min(65_535) as u16);
                gso.segs = o.wire_segments().min(65_535) as u16;
                gso.ecn = o.flags.contains(Flags::CWR);
                meta.gso = Some(gso);
            }
        }
        Some(meta)
    }

    fn params() -> ConnParams {
        ConnParams {
            tcp: TcpConfig::default(),
            mtu_mss: 1460,
            default_mss: 536,
        }
    }

    /// Frames built through a template equal the reference's byte for byte,
    /// with the same metadata: IPv4 and IPv6, random addresses and ports,
    /// every flag combination, with and without ACK, ECN, timestamps, SACK
    /// blocks, SYN options, data (odd lengths and offsets too, up to
    /// super-segments), offloads on and off; the template reused across
    /// segments and rebuilt for a new next hop.
    #[test]
    fn template_frames_match_the_reference() {
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let payload: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let src_mac = [2, 0, 0, 0, 0, 1];
        let mut checked = 0;
        for case in 0..200 {
            let v4 = case % 2 == 0;
            let (a, b) = (next(), next());
            let (local, remote) = if v4 {
                (
                    SocketAddr::new(Ipv4Addr::from(a as u32).into(), (a >> 32) as u16),
                    SocketAddr::new(Ipv4Addr::from(b as u32).into(), (b >> 48) as u16),
                )
            } else {
                (
                    SocketAddr::new(
                        Ipv6Addr::from(u128::from(a) << 64 | u128::from(b)).into(),
                        (a >> 20) as u16,
                    ),
                    SocketAddr::new(
                        Ipv6Addr::from(u128::from(b) << 64 | u128::from(a)).into(),
                        (b >> 40) as u16,
                    ),
                )
            };
            let mut conn = Conn::connect(Instant::ZERO, local, remote, 1, 0, params());
            conn.tx = crate::tcp::sendbuf::SendBuf::new(1 << 20);
            // In pieces, so that data spans chunks of the send buffer.
            let cut = (next() % 5000) as usize;
            conn.tx.push(&payload[..cut]);
            conn.tx.push(&payload[cut..]);
            conn.ecn.ok = case % 3 != 0;
            let mut tmpl = TxTemplate::EMPTY;
            for step in 0..40 {
                let dst_mac = [0x02, 0, 0, 0, (case % 7) as u8, (step / 20) as u8];
                if !tmpl.is_for(dst_mac) {
                    tmpl = TxTemplate::new((dst_mac, src_mac), local, remote).unwrap();
                }
                let r = next();
                let flags = Flags::from_bits((r & 0x1ff) as u16);
                let offloads = r & (1 << 9) != 0;
                let data_len = match (r >> 10) % 4 {
                    0 => 0,
                    1 => (r >> 16) as usize % 1461,
                    2 => 1460,
                    _ => (r >> 16) as usize % 65_000,
                };
                let mut sack = SackBlocks::new();
                if (r >> 40) % 3 == 0 {
                    for k in 0..((r >> 42) % 4) as u32 {
                        sack.push((k.wrapping_mul(0x0101_0101), r as u32 ^ k));
                    }
                }
                let syn = ((r >> 44) % 5 == 0).then(|| SynOptions {
                    mss: ((r >> 45) % 2 == 0).then_some(1460),
                    window_scale: ((r >> 46) % 2 == 0).then_some(7),
                    sack_permitted: (r >> 47) % 2 == 0,
                    timestamps: ((r >> 48) % 2 == 0).then_some((r as u32, (r >> 8) as u32)),
                });
                let o = Outgoing {
                    seq: Seq(next() as u32),
                    ack: Seq(next() as u32),
                    flags,
                    wnd: (r >> 50) as u16,
                    syn,
                    ts: ((r >> 52) % 4 != 0).then_some(((r >> 3) as u32, (r >> 11) as u32)),
                    sack,
                    data_off: (r >> 20) as usize % 3000,
                    data_len,
                    mss: 1460,
                    retransmit: (r >> 56) % 5 == 0,
                };
                let mut opts = [0u8; tcp::options::MAX_LEN];
                let opt_len = o.write_options(&mut opts);
                let opts = &opts[..opt_len];
                let l3 = if v4 {
                    ipv4::HEADER_LEN
                } else {
                    ipv6::HEADER_LEN
                };
                let total = ethernet::HEADER_LEN + l3 + tcp::HEADER_LEN + opt_len + data_len;
                let id = (r >> 24) as u16;
                let mut ours = vec![0x5a; total];
                let mut theirs = vec![0xa5; total];
                let m1 = build_tcp(&mut ours, &tmpl, &conn, &o, opts, id, offloads).unwrap();
                let m2 = reference(
                    &mut theirs,
                    (dst_mac, src_mac),
                    &conn,
                    &o,
                    opts,
                    id,
                    offloads,
                )
                .unwrap();
                assert_eq!(ours, theirs, "case {case} step {step}");
                assert_eq!(m1, m2, "case {case} step {step}");
                checked += 1;
            }
        }
        assert_eq!(checked, 200 * 40);
    }

    /// A template refuses mixed address families.
    #[test]
    fn mixed_families_have_no_template() {
        let a = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 1);
        let b = SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 2);
        assert!(TxTemplate::new(([1; 6], [2; 6]), a, b).is_none());
    }
}
