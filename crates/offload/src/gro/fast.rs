//! The fast path: a TCP segment that continues the run GRO last touched.
//!
//! A bulk flow's segments differ from the first of their run in a few header
//! fields only: the IP length, ID and header checksum, the TCP sequence number
//! and checksum, and in a tunnel the outer IP header's length, ID and checksum
//! and the outer UDP length and checksum. When a TCP run (IPv4 without options
//! or IPv6 without extension headers; plain, or in VXLAN, GENEVE or NVGRE
//! without a GRE checksum over such an outer IP header) is held, its first
//! frame's headers are kept as a template with a mask of the bytes every later
//! segment must repeat. A frame that equals the template under the mask, has
//! the sequence number the run expects, the IP IDs its modes expect, lengths
//! that match the frame, good IPv4 header checksums and a payload that fits
//! joins the run at once, without a parse, a [`View`](super::view::View) or the
//! layers' walks. Its checksums, the TCP one and a tunnel's non-zero outer UDP
//! one, are verified with one pass over the payload: each is its headers' sum
//! (a few dozen bytes, in cache) plus the payload's.
//!
//! Those conditions are exactly what the layers' rules would find for such a
//! frame (see `Gro::fast`): the masked bytes cover everything `same_flow`,
//! `check`, `must_flush` and `after_merge` compare against the first segment
//! (MACs and VLAN tags, the IP version, TOS, DF and fragment bits, TTL, protocol
//! and addresses, traffic class, flow label and hop limit, the ports, ACK,
//! flags, window and options). Anything else takes the full path, which decides
//! as it always did; the proptests run every stream both ways.

use super::bytes;
use super::ipv4::IdMode;
use super::view;
use linerate_wire::checksum;
use linerate_wire::layout::{Fragment, L3Kind, L4Kind, Layout, TunnelKind};
use linerate_wire::tcp::Flags;

/// Header bytes a template covers at most (24 words): VXLAN over IPv6 around
/// IPv6 and TCP with 40 bytes of options is 164.
const MAX: usize = 192;
/// Words of a template.
const WORDS: usize = MAX / 8;

/// Where a plain TCP frame's IP header and ports are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    l3: u16,
    l4: u16,
    v4: bool,
}

impl Shape {
    /// The flow hash of a frame of this shape (addresses and ports where this
    /// shape has them), as the layers compute it once the frame is parsed.
    #[inline]
    pub(super) fn hash(&self, head: &[u8]) -> u32 {
        let l3 = usize::from(self.l3);
        let addrs = if self.v4 {
            bytes::be64(head, l3 + 12)
        } else {
            view::fold_v6(
                bytes::be64(head, l3 + 8),
                bytes::be64(head, l3 + 16),
                bytes::be64(head, l3 + 24),
                bytes::be64(head, l3 + 32),
            )
        };
        view::hash(addrs, bytes::be32(head, usize::from(self.l4)))
    }
}

/// Clears the mask bits of the `n` header bytes from `from` (a field that
/// varies from segment to segment).
fn free(mask: &mut [u64; WORDS], from: usize, n: usize) {
    for at in from..from + n {
        if let Some(m) = mask.get_mut(at / 8) {
            *m &= !(0xff << (8 * (at % 8)));
        }
    }
}

/// A tunnel's outer headers, as the fast path checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Outer {
    /// Offset of the outer IP header.
    l3: u16,
    /// The outer IP header is IPv4 (else IPv6).
    v4: bool,
    /// Offset of the outer UDP header (VXLAN, GENEVE); 0 for NVGRE.
    udp: u16,
    /// The outer UDP checksum is not zero: a checksum level of its own.
    csum: bool,
}

#[derive(Debug, Clone)]
pub(super) struct Template {
    /// Header bytes (where the payload starts); 0 when the run has none.
    pub(super) len: u16,
    /// The run's frames were looked at (a run the fast path does not cover
    /// keeps `len` 0 and is not looked at again).
    pub(super) tried: bool,
    /// Offset of the IP header.
    l3: u16,
    /// Offset of the TCP header.
    l4: u16,
    /// IPv4 (else IPv6).
    v4: bool,
    /// The tunnel's outer headers; `None` for a plain run (then `l3` and `l4`
    /// are the only IP and TCP headers; in a tunnel they are the inner ones).
    pub(super) outer: Option<Outer>,
    /// The part of the TCP checksum's pseudo-header and header sum that every
    /// segment the template matches shares: the addresses, the protocol, and
    /// the TCP header but for its sequence number and checksum (the bytes the
    /// mask leaves free). A segment's sum is this plus its TCP length,
    /// sequence number and checksum field: no pass over its header.
    tcp_sum: u32,
    /// Per word of the headers: the first frame's bytes (as a native-order
    /// word, zero past `len`) and the mask (ones where a later segment must
    /// equal the first), side by side: one cache line holds four of each.
    words: [[u64; 2]; WORDS],
}

impl Template {
    /// No template.
    pub(super) const NONE: Template = Template {
        len: 0,
        tried: false,
        l3: 0,
        l4: 0,
        v4: false,
        outer: None,
        tcp_sum: 0,
        words: [[0; 2]; WORDS],
    };

    /// Checksum levels a frame of this run carries: the TCP checksum's, and a
    /// tunnel's non-zero outer UDP checksum's.
    #[inline]
    pub(super) fn levels(&self) -> u8 {
        1 + u8::from(self.outer.is_some_and(|o| o.csum))
    }

    /// The template of a TCP run whose first frame `b` has layout `l`, or
    /// `NONE` when the fast path does not cover it.
    pub(super) fn of(b: &[u8], l: &Layout) -> Template {
        // (A constant: built on every call, it was 400 bytes written whether
        // returned or not.)
        const NONE: Template = Template {
            tried: true,
            ..Template::NONE
        };
        let none = NONE;
        let len = usize::from(l.payload);
        if l.tunnel_error.is_some() || len > MAX || b.len() < len {
            return none;
        }
        let outer = match (&l.tunnel, &l.inner) {
            (None, None) => None,
            (Some(t), Some(_)) => match Outer::of(b, l, t.kind, usize::from(t.offset), len) {
                Some(o) => Some(o),
                None => return none,
            },
            _ => return none,
        };
        let h = l.innermost();
        let (l3, l4) = (usize::from(h.l3_offset), usize::from(h.l4_offset));
        let v4 = match h.l3 {
            L3Kind::Ipv4 if l4 == l3 + 20 => true,
            L3Kind::Ipv6 if l4 == l3 + 40 => false,
            _ => return none,
        };
        if h.l4 != L4Kind::Tcp || len < l4 + 20 {
            return none;
        }
        // A first segment with CWR must not pass its CWR on to the run's later
        // segments (a later CWR ends the run).
        let flags = bytes::be16(b, l4 + 12) & 0x01ff;
        if flags & Flags::CWR.bits() != 0 {
            return none;
        }
        // The TCP header's sum without its sequence number and checksum (three
        // pieces, each from an even offset: their words are the checksum's),
        // with the pseudo-header's addresses and protocol. Built with no
        // header-sized scratch (once per run: a short run's share is felt).
        let addrs = if v4 {
            bytes::range(b, l3 + 12, l3 + 20)
        } else {
            bytes::range(b, l3 + 8, l3 + 40)
        };
        let tcp_sum = [(l4, l4 + 4), (l4 + 8, l4 + 16), (l4 + 18, len)]
            .into_iter()
            .fold(checksum::partial(addrs, 6), |sum, (from, to)| {
                checksum::partial(bytes::range(b, from, to), sum)
            });
        // Ones over the header bytes but the free fields.
        let words = len.div_ceil(8).min(WORDS);
        let mut mask = [0u64; WORDS];
        for (i, m) in mask.iter_mut().enumerate().take(words) {
            *m = u64::MAX >> (8 * (8 - (len - i * 8).min(8)));
        }
        let free_ip = |mask: &mut [u64; WORDS], l3: usize, v4: bool| {
            if v4 {
                free(mask, l3 + 2, 4); // total length, ID
                free(mask, l3 + 10, 2); // header checksum
            } else {
                free(mask, l3 + 4, 2); // payload length
            }
        };
        free_ip(&mut mask, l3, v4);
        if let Some(o) = outer {
            free_ip(&mut mask, usize::from(o.l3), o.v4);
            if o.udp != 0 {
                free(&mut mask, usize::from(o.udp) + 4, 2); // UDP length
                if o.csum {
                    // A zero checksum stays masked: it must stay zero (a
                    // non-zero one after a zero one is another flow).
                    free(&mut mask, usize::from(o.udp) + 6, 2);
                }
            }
        }
        free(&mut mask, l4 + 4, 4); // sequence number
        free(&mut mask, l4 + 16, 2); // checksum
        let mut t = Template {
            len: len as u16,
            tried: true,
            l3: l3 as u16,
            l4: l4 as u16,
            v4,
            outer,
            tcp_sum,
            words: [[0; 2]; WORDS],
        };
        for (i, (w, &m)) in t.words.iter_mut().zip(&mask).enumerate().take(words) {
            let at = i * 8;
            // Whole words loaded as they are; the last, partial one byte by
            // byte (a copy of a length known only at run time is a call).
            let x = match bytes::array::<8>(b, at) {
                Some(x) if at + 8 <= len => u64::from_le_bytes(*x),
                _ => b
                    .get(at..len)
                    .unwrap_or_default()
                    .iter()
                    .rev()
                    .fold(0, |x, &v| (x << 8) | u64::from(v)),
            };
            *w = [x & m, m];
        }
        t
    }

    /// Offset of the IP header.
    pub(super) fn l3(&self) -> usize {
        usize::from(self.l3)
    }

    /// Where the template's addresses and ports are.
    #[inline]
    pub(super) fn shape(&self) -> Shape {
        Shape {
            l3: self.l3,
            l4: self.l4,
            v4: self.v4,
        }
    }
}

impl Outer {
    /// The outer headers of the tunnelled run whose first frame `b` has layout
    /// `l` (a tunnel of `kind` whose header is at `at`, headers `len` bytes in
    /// all), or `None` where the fast path does not cover them: IP options or
    /// extension headers, a fragment, a GRE checksum (over the payload: the
    /// full path verifies it), or outer UDP headers an odd number of bytes
    /// before the payload (whose sum would not add to the payload's as it is).
    fn of(b: &[u8], l: &Layout, kind: TunnelKind, at: usize, len: usize) -> Option<Outer> {
        let o = &l.outer;
        let (l3, l4) = (usize::from(o.l3_offset), usize::from(o.l4_offset));
        let v4 = match o.l3 {
            L3Kind::Ipv4 if l4 == l3 + 20 => true,
            L3Kind::Ipv6 if l4 == l3 + 40 => false,
            _ => return None,
        };
        if o.frag != Fragment::None {
            return None;
        }
        let (udp, csum) = match (kind, o.l4) {
            (TunnelKind::Vxlan | TunnelKind::Geneve, L4Kind::Udp) => {
                let csum = bytes::be16(b, l4 + 6) != 0;
                if csum && (len - l4) % 2 == 1 {
                    return None;
                }
                (l4, csum)
            }
            // The C bit: the GRE flags word's top bit.
            (TunnelKind::Nvgre, L4Kind::Gre) if bytes::be16(b, at) & 0x8000 == 0 => (0, false),
            _ => return None,
        };
        Some(Outer {
            l3: l3 as u16,
            v4,
            udp: udp as u16,
            csum,
        })
    }

    /// Offset of the outer IP header.
    pub(super) fn l3(&self) -> usize {
        usize::from(self.l3)
    }
}

impl Template {
    /// True if `head` (at least `len` bytes) repeats the template's bytes.
    #[inline]
    pub(super) fn matches(&self, head: &[u8]) -> bool {
        if self.len == 0 {
            return false;
        }
        let len = usize::from(self.len);
        let Some(h) = head.get(..len) else {
            return false;
        };
        let mut diff = 0u64;
        let mut chunks = h.chunks_exact(8);
        // Zipped, not indexed: no bounds check per word.
        for (c, &[t, m]) in chunks.by_ref().zip(&self.words) {
            let w = <[u8; 8]>::try_from(c).map_or(0, u64::from_le_bytes);
            diff |= (w ^ t) & m;
        }
        let rest = chunks.remainder().len();
        if rest != 0 {
            // The last `rest` bytes, as the top of the 8 that end the headers
            // (a template is at least 34 bytes): one load, where copying them
            // into a zeroed word first makes narrow stores that the word's
            // load waits on (a store-forwarding stall, in perf of
            // `cargo bench --bench gro`).
            let Some(end) = len
                .checked_sub(8)
                .and_then(|from| bytes::array::<8>(h, from))
            else {
                return false;
            };
            let i = len / 8;
            let w = u64::from_le_bytes(*end) >> (8 * (8 - rest));
            let [t, m] = self.words.get(i).copied().unwrap_or_default();
            diff |= (w ^ t) & m;
        }
        diff == 0
    }
}

/// What the fast path found for a frame that repeats a run's template.
#[derive(Debug, Clone, Copy)]
pub(super) struct Hit {
    /// Payload bytes.
    pub(super) len: usize,
    /// The pseudo-header and TCP header sum, when the checksum is to be verified
    /// in software (over the payload then).
    pub(super) deferred: Option<u32>,
    /// The same for a tunnel's non-zero outer UDP checksum: the outer
    /// pseudo-header and every byte from the UDP header to the payload.
    pub(super) outer: Option<u32>,
}

/// An IP level's IPv4 ID: its mode, and the ID of the run's first segment.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ids {
    pub(super) mode: IdMode,
    pub(super) first: u16,
}

/// Checks a frame of `total` bytes whose headers are `head` (the whole frame, or
/// its first `t.len` bytes) against the template `t` of a run of `segs`
/// segments expecting sequence number `next_seq` and, with IPv4, the IDs `ids`
/// give (the inner or only IP header's, then a tunnel's outer one), with
/// payload at most `mss`. `verify` asks for the checksums' header parts.
/// `None` sends the frame down the full path.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn check(
    t: &Template,
    head: &[u8],
    total: usize,
    next_seq: u32,
    ids: [Ids; 2],
    segs: u16,
    mss: u16,
    verify: bool,
) -> Option<Hit> {
    // The caller found `t` matching `head` (`Template::matches`).
    let (len, l3, l4) = (usize::from(t.len), usize::from(t.l3), usize::from(t.l4));
    let payload = total.checked_sub(len)?;
    if payload == 0 || payload > usize::from(mss) {
        return None;
    }
    if bytes::be32(head, l4 + 4) != next_seq {
        return None;
    }
    let [inner_ids, outer_ids] = ids;
    ip_ok(head, l3, t.v4, total, inner_ids, segs)?;
    let mut outer = None;
    if let Some(o) = &t.outer {
        ip_ok(head, o.l3(), o.v4, total, outer_ids, segs)?;
        if o.udp != 0 {
            let u = usize::from(o.udp);
            let udp_len = total - u;
            if usize::from(bytes::be16(head, u + 4)) != udp_len {
                return None;
            }
            if o.csum {
                // Zero is "no checksum": another flow's rule, the full path's.
                if bytes::be16(head, u + 6) == 0 {
                    return None;
                }
                if verify {
                    let pseudo = pseudo(head, o.l3(), o.v4, 17, udp_len as u32);
                    outer = Some(checksum::partial(bytes::range(head, u, len), pseudo));
                }
            }
        }
    }
    // The template's shared part (its addresses and TCP header are this
    // frame's: the mask covers them) plus what the mask leaves free: the TCP
    // length, sequence number and checksum field.
    let deferred = verify.then(|| {
        let l4_len = (total - l4) as u32;
        let seq = bytes::be32(head, l4 + 4);
        let csum = u32::from(bytes::be16(head, l4 + 16));
        checksum::combine(t.tcp_sum, l4_len + (seq >> 16) + (seq & 0xffff) + csum)
    });
    Some(Hit {
        len: payload,
        deferred,
        outer,
    })
}

/// Checks the IP header at `l3` of a frame of `total` bytes: its length, and
/// for IPv4 its ID (as `ids` expects for a run of `segs` segments) and header
/// checksum.
#[inline(always)]
fn ip_ok(head: &[u8], l3: usize, v4: bool, total: usize, ids: Ids, segs: u16) -> Option<()> {
    let ip_len = total - l3;
    if v4 {
        let ip = bytes::array::<20>(head, l3)?;
        if usize::from(bytes::be16(ip, 2)) != ip_len {
            return None;
        }
        let id = bytes::be16(ip, 4);
        let want = match ids.mode {
            // IDs are compared against the first segment's.
            IdMode::Fixed => ids.first,
            IdMode::Incrementing => ids.first.wrapping_add(segs),
            IdMode::Undecided => return None,
        };
        if id != want || checksum::fold(header_sum(ip)) != 0xffff {
            return None;
        }
    } else if usize::from(bytes::be16(head, l3 + 4)) + 40 != ip_len {
        return None;
    }
    Some(())
}

/// The pseudo-header sum of the IP header at `l3` for `proto` and a
/// transport length `l4_len`.
#[inline]
fn pseudo(head: &[u8], l3: usize, v4: bool, proto: u32, l4_len: u32) -> u32 {
    let addrs = if v4 {
        bytes::range(head, l3 + 12, l3 + 20)
    } else {
        bytes::range(head, l3 + 8, l3 + 40)
    };
    checksum::partial(addrs, proto + (l4_len >> 16) + (l4_len & 0xffff))
}

/// The IPv4 header's unfolded one's-complement sum.
#[inline]
fn header_sum(ip: &[u8; 20]) -> u32 {
    let w = |i: usize| u64::from(bytes::array::<4>(ip, i).map_or(0, |x| u32::from_ne_bytes(*x)));
    let s = w(0) + w(4) + w(8) + w(12) + w(16);
    let s = (s & 0xffff_ffff) + (s >> 32);
    ((s & 0xffff_ffff) + (s >> 32)) as u32
}
