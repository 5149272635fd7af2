//! Transmit: the outer headers, built once per VNI as a template, copied into
//! a frame's headroom and patched.

use crate::config::{Dscp, Encap, GeneveOpt, TunnelConfigError, UdpCsum, VniConfig, VtepConfig};
use linerate_offload::{Checksum, GsoTunnel, OffloadMeta};
use linerate_wire::{checksum, geneve, gre, vxlan};
use std::net::IpAddr;

/// The longest outer header: Ethernet, IPv6, UDP, GENEVE with every option.
pub(crate) const MAX_HEADER: usize = 14 + 40 + 8 + geneve::MAX_HEADER_LEN;

/// One VNI's outer header template and how to patch it.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    bytes: [u8; MAX_HEADER],
    /// Header length (outer Ethernet to the inner Ethernet header).
    pub len: usize,
    v6: bool,
    /// Offset of UDP or GRE.
    l4: usize,
    udp: bool,
    /// Compute the outer UDP checksum.
    pub csum: bool,
    sport_min: u32,
    sport_span: u32,
    dscp: Dscp,
    /// Sum of the outer source and destination addresses and the protocol.
    pseudo: u32,
    ident: u16,
}

/// The overhead of `vtep`'s encapsulation (outer Ethernet included).
pub(crate) fn overhead(vtep: &VtepConfig) -> usize {
    let ip = if vtep.local_ip.is_ipv6() { 40 } else { 20 };
    14 + ip
        + match &vtep.encap {
            Encap::Vxlan => 8 + vxlan::HEADER_LEN,
            Encap::Geneve { options, .. } => {
                8 + geneve::HEADER_LEN
                    + options
                        .iter()
                        .map(|o| geneve::OPTION_HEADER_LEN + o.data.len())
                        .sum::<usize>()
            }
            Encap::Nvgre => gre::NVGRE_LEN,
        }
}

/// GENEVE options as RFC 8926 section 3.5 allows them: data a multiple of 4
/// bytes, at most 124, and 252 bytes of options in all.
fn check_geneve(options: &[GeneveOpt]) -> Result<(), TunnelConfigError> {
    let mut total = 0;
    for o in options {
        total += geneve::OPTION_HEADER_LEN + o.data.len();
        if o.data.len() % 4 != 0
            || o.data.len() > geneve::MAX_OPTION_DATA_LEN
            || total > geneve::MAX_OPTIONS_LEN
        {
            return Err(TunnelConfigError::GeneveOption {
                class: o.class,
                kind: o.kind,
                data_len: o.data.len(),
                total,
            });
        }
    }
    Ok(())
}

impl Template {
    /// The template for `vni` on `vtep` toward `remote` with destination MAC
    /// `dst_mac`.
    pub fn new(
        vtep: &VtepConfig,
        vni: &VniConfig,
        remote: IpAddr,
        dst_mac: [u8; 6],
    ) -> Result<Template, TunnelConfigError> {
        if vni.vni > 0x00ff_ffff {
            return Err(TunnelConfigError::VniTooLarge { vni: vni.vni });
        }
        if vtep.src_ports.is_empty() {
            return Err(TunnelConfigError::EmptySourcePorts);
        }
        if vtep.port == 0 && !matches!(vtep.encap, Encap::Nvgre) {
            return Err(TunnelConfigError::ZeroPort);
        }
        if let Dscp::Fixed(dscp) = vtep.dscp
            && dscp > 63
        {
            return Err(TunnelConfigError::Dscp { dscp });
        }
        if vtep.ttl == 0 {
            return Err(TunnelConfigError::ZeroTtl);
        }
        if let Encap::Geneve { options, .. } = &vtep.encap {
            check_geneve(options)?;
        }
        let len = overhead(vtep);
        let mut b = [0u8; MAX_HEADER];
        b[0..6].copy_from_slice(&dst_mac);
        b[6..12].copy_from_slice(&vtep.local_mac);
        let udp = !matches!(vtep.encap, Encap::Nvgre);
        let proto = if udp { 17 } else { 47 };
        let (v6, l4, pseudo) = match (vtep.local_ip, remote) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                b[14] = 0x45;
                b[20] = 0x40; // DF
                b[22] = vtep.ttl;
                b[23] = proto;
                b[26..30].copy_from_slice(&s.octets());
                b[30..34].copy_from_slice(&d.octets());
                (
                    false,
                    34,
                    checksum::pseudo_ipv4(s.octets(), d.octets(), proto, 0),
                )
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
                b[14] = 0x60;
                b[20] = proto;
                b[21] = vtep.ttl;
                b[22..38].copy_from_slice(&s.octets());
                b[38..54].copy_from_slice(&d.octets());
                (
                    true,
                    54,
                    checksum::pseudo_ipv6(&s.octets(), &d.octets(), proto, 0),
                )
            }
            (local, other) => return Err(TunnelConfigError::Family { local, other }),
        };
        let t = if udp { l4 + 8 } else { l4 };
        let vni24 = (vni.vni << 8).to_be_bytes();
        // Config-time writes at offsets that depend on the family: checked.
        let mut put = |at: usize, bytes: &[u8]| {
            if let Some(d) = b.get_mut(at..at + bytes.len()) {
                d.copy_from_slice(bytes);
            }
        };
        if udp {
            put(l4 + 2, &vtep.port.to_be_bytes());
        }
        match &vtep.encap {
            Encap::Vxlan => {
                put(t, &[vxlan::FLAG_I]);
                put(t + 4, &vni24);
            }
            Encap::Geneve { options, .. } => {
                let opts: Vec<geneve::GeneveOption<'_>> = options
                    .iter()
                    .map(|o| geneve::GeneveOption {
                        class: o.class,
                        kind: o.kind,
                        data: &o.data,
                    })
                    .collect();
                let mut buf = [0u8; geneve::MAX_OPTIONS_LEN];
                // Checked above (`check_geneve`): emitting cannot fail.
                let n = geneve::emit_options(&opts, &mut buf).unwrap_or(0);
                let critical = options.iter().any(|o| o.kind & geneve::TYPE_CRITICAL != 0);
                let flags = if critical { geneve::FLAG_CRITICAL } else { 0 };
                // Version 0, option length in 4-byte words.
                put(t, &[(n / 4) as u8, flags]);
                put(t + 2, &geneve::PROTO_TEB.to_be_bytes());
                put(t + 4, &vni24);
                put(t + 8, buf.get(..n).unwrap_or_default());
            }
            Encap::Nvgre => {
                put(t, &gre::FLAG_K.to_be_bytes());
                put(t + 2, &gre::PROTO_TEB.to_be_bytes());
                put(t + 4, &vni24);
            }
        }
        let csum = udp && (vtep.udp_csum == UdpCsum::Compute || (v6 && !vtep.ipv6_zero_csum));
        let (lo, hi) = (*vtep.src_ports.start(), *vtep.src_ports.end());
        Ok(Template {
            bytes: b,
            len,
            v6,
            l4,
            udp,
            csum,
            sport_min: u32::from(lo),
            sport_span: u32::from(hi) - u32::from(lo) + 1,
            dscp: vtep.dscp,
            pseudo,
            ident: 0,
        })
    }

    /// Sets the outer destination MAC (the next hop was resolved).
    pub fn set_dst_mac(&mut self, mac: [u8; 6]) {
        self.bytes[0..6].copy_from_slice(&mac);
    }

    /// The GSO tunnel kind of frames sent with this template.
    pub fn gso_tunnel(&self) -> GsoTunnel {
        if self.udp {
            GsoTunnel::Udp {
                outer_csum: self.csum,
            }
        } else {
            GsoTunnel::Gre { csum: false }
        }
    }

    /// True if encapsulating a frame with `meta` reads its payload (an outer
    /// UDP checksum summed over a frame whose inner checksum is complete):
    /// a scatter-gather frame is then gathered first.
    pub fn reads_payload(&self, meta: &OffloadMeta) -> bool {
        self.udp && self.csum && !matches!(meta.csum, Checksum::Partial { .. })
    }

    /// Encapsulates a frame `total` bytes long whose first bytes are `frame`
    /// (an inner Ethernet frame, `hlen` bytes of headroom already prepended in
    /// front of it: `frame[..self.len]` is written; all of it, or the head of
    /// a scatter-gather frame, holding the inner headers) with `meta`; returns
    /// the new meta, or `None` if a length does not fit or, for a head,
    /// encapsulating would read the payload ([`Template::reads_payload`]).
    pub fn write_head(
        &mut self,
        frame: &mut [u8],
        total: usize,
        meta: &OffloadMeta,
    ) -> Option<OffloadMeta> {
        if total != frame.len() && self.reads_payload(meta) {
            return None;
        }
        let hl = self.len;
        let (hdr, inner) = frame.split_at_mut_checked(hl)?;
        let (tc, hash) = inner_facts(inner);
        hdr.copy_from_slice(self.bytes.get(..hl)?);
        let ecn = tc & 3;
        let dscp = match self.dscp {
            Dscp::Inherit => tc >> 2,
            Dscp::Fixed(d) => d,
        };
        let tos = (dscp << 2) | ecn;
        let l4 = self.l4;
        if self.v6 {
            let plen = u16::try_from(total - 54).ok()?;
            *hdr.get_mut(14)? = 0x60 | (tos >> 4);
            *hdr.get_mut(15)? = tos << 4;
            hdr.get_mut(18..20)?.copy_from_slice(&plen.to_be_bytes());
        } else {
            let tl = u16::try_from(total - 14).ok()?;
            *hdr.get_mut(15)? = tos;
            hdr.get_mut(16..18)?.copy_from_slice(&tl.to_be_bytes());
            self.ident = self.ident.wrapping_add(1);
            hdr.get_mut(18..20)?
                .copy_from_slice(&self.ident.to_be_bytes());
            let c = !ipv4_header_sum(hdr.get(14..)?.first_chunk::<20>()?);
            hdr.get_mut(24..26)?.copy_from_slice(&c.to_be_bytes());
        }
        let mut csum = meta.csum;
        if let Checksum::Partial { start, offset } = csum {
            csum = Checksum::Partial {
                start: start.checked_add(u16::try_from(hl).ok()?)?,
                offset,
            };
        }
        if self.udp {
            // Linux's udp_flow_src_port: the hash scaled into the range.
            let sport =
                self.sport_min + ((u64::from(hash) * u64::from(self.sport_span)) >> 32) as u32;
            let ulen = u16::try_from(total - l4).ok()?;
            hdr.get_mut(l4..l4 + 2)?
                .copy_from_slice(&(sport as u16).to_be_bytes());
            hdr.get_mut(l4 + 4..l4 + 6)?
                .copy_from_slice(&ulen.to_be_bytes());
            if self.csum {
                let len = u32::from(ulen);
                let pseudo = checksum::combine(self.pseudo, len);
                let sum = match meta.csum {
                    // Local checksum offload (Linux lco_csum): once the inner
                    // checksum is complete, the inner L4 bytes sum to the
                    // complement of the pseudo-header sum seeded in its field.
                    Checksum::Partial { start, offset } => {
                        let start = usize::from(start) + hl;
                        let at = start + usize::from(offset);
                        let seed = u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]);
                        checksum::partial(frame.get(l4..start)?, u32::from(!seed))
                    }
                    _ => checksum::partial(frame.get(l4..)?, 0),
                };
                let mut c = checksum::finish(checksum::combine(pseudo, sum));
                if c == 0 {
                    c = 0xffff;
                }
                frame
                    .get_mut(l4 + 6..l4 + 8)?
                    .copy_from_slice(&c.to_be_bytes());
            }
        } else {
            // NVGRE FlowID (RFC 7637 section 3.2): from the flow hash.
            *hdr.get_mut(l4 + 7)? = (hash & 0xff) as u8;
        }
        let gso = meta.gso.map(|mut g| {
            g.tunnel = self.gso_tunnel();
            g
        });
        Some(OffloadMeta {
            csum,
            gso,
            rss: meta.rss,
        })
    }
}

/// The inner traffic class (DSCP and ECN) and flow hash of an inner Ethernet
/// frame: addresses, protocol and ports of IPv4/IPv6 TCP/UDP; addresses only
/// otherwise; 0 for non-IP.
pub(crate) fn inner_facts(inner: &[u8]) -> (u8, u32) {
    let byte = |i: usize| inner.get(i).copied().unwrap_or(0);
    let word = |i: usize| u32::from_be_bytes([byte(i), byte(i + 1), byte(i + 2), byte(i + 3)]);
    let et = u16::from_be_bytes([byte(12), byte(13)]);
    const L3: usize = 14;
    let (tc, addrs, proto, l4) = match et {
        0x0800 if inner.len() >= L3 + 20 => {
            let ihl = usize::from(byte(L3) & 0xf) * 4;
            let frag = u16::from_be_bytes([byte(L3 + 6), byte(L3 + 7)]) & 0x1fff != 0;
            let proto = if frag { 0 } else { byte(L3 + 9) };
            (byte(L3 + 1), (L3 + 12, 2), proto, L3 + ihl)
        }
        0x86dd if inner.len() >= L3 + 40 => {
            let tc = (byte(L3) << 4) | (byte(L3 + 1) >> 4);
            (tc, (L3 + 8, 8), byte(L3 + 6), L3 + 40)
        }
        _ => return (0, 0),
    };
    let mut h: u32 = 0x9e37_79b9;
    let (at, words) = addrs;
    for k in 0..words {
        h = mix(h, word(at + 4 * k));
    }
    if (proto == 6 || proto == 17) && inner.len() >= l4 + 4 {
        h = mix(h, word(l4));
    }
    h = mix(h, u32::from(proto));
    (tc, h ^ (h >> 16))
}

#[inline]
fn mix(h: u32, v: u32) -> u32 {
    (h ^ v).wrapping_mul(0x85eb_ca6b).rotate_left(13)
}

/// The folded ones'-complement sum of a 20-byte IPv4 header (inlined: the
/// generic checksum's dispatch costs more than these ten additions).
#[inline(always)]
pub(crate) fn ipv4_header_sum(h: &[u8; 20]) -> u16 {
    let [
        a0,
        a1,
        b0,
        b1,
        c0,
        c1,
        d0,
        d1,
        e0,
        e1,
        f0,
        f1,
        g0,
        g1,
        h0,
        h1,
        i0,
        i1,
        j0,
        j1,
    ] = *h;
    let w = |x: u8, y: u8| u32::from(u16::from_be_bytes([x, y]));
    let s = w(a0, a1)
        + w(b0, b1)
        + w(c0, c1)
        + w(d0, d1)
        + w(e0, e1)
        + w(f0, f1)
        + w(g0, g1)
        + w(h0, h1)
        + w(i0, i1)
        + w(j0, j1);
    checksum::fold(s)
}
