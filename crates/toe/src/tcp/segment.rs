//! A received segment, parsed once (RFC 9293 section 3.1 header, options of
//! section 3.2, RFC 7323 and RFC 2018), and a segment to send.

use super::seq::Seq;
use linerate_nic::Frag;
use linerate_wire::tcp::options::{self, TcpOption};
use linerate_wire::tcp::{self, Flags, SackBlocks, SynOptions};

/// A received TCP segment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Segment<'a> {
    pub src_port: u16,
    pub dst_port: u16,
    pub seq: Seq,
    pub ack: Seq,
    pub flags: Flags,
    pub wnd: u16,
    /// MSS, window scale, SACK-permitted and timestamps, when present.
    pub opts: SynOptions,
    /// SACK blocks, when present.
    pub sack: SackBlocks,
    /// The data in the frame's head (all of it for a linear frame).
    pub payload: &'a [u8],
    /// The data after `payload`, by reference: a chain that frag-list GRO
    /// made (empty for a linear frame).
    pub more: &'a [Frag],
    /// Bytes in `more`.
    pub more_len: usize,
    /// Wire segments this stands for (more than one after GRO).
    pub segs: u32,
    /// The frame `payload` lies in, when the engine owns it and can hand it to
    /// the receive buffer ([`super::recvbuf`]).
    pub frame: Option<super::recvbuf::OwnedFrame>,
    /// The datagram was marked CE (RFC 3168); set by the engine from the IP header.
    pub ce: bool,
}

impl<'a> Segment<'a> {
    /// Parses the TCP header and options of `bytes` (the whole segment). `segs` is
    /// the number of wire segments it stands for.
    ///
    /// The usual option layouts (none; NOP, NOP, Timestamps; a SYN's full set in
    /// Linux's order) are read straight from the header's bytes; anything else
    /// (and every segment to refuse) goes the general way, [`Segment::parse_general`].
    #[inline]
    pub fn parse(bytes: &'a [u8], segs: u32) -> linerate_wire::Result<Segment<'a>> {
        let Some(h) = bytes.first_chunk::<{ tcp::HEADER_LEN }>() else {
            return Segment::parse_general(bytes, segs);
        };
        let hl = usize::from(h[12] >> 4) * 4;
        // `None` for a data offset below 5 or a header past the end.
        let (Some(raw), Some(payload)) = (bytes.get(tcp::HEADER_LEN..hl), bytes.get(hl..)) else {
            return Segment::parse_general(bytes, segs);
        };
        let be32 = |a, b, c, d| u32::from_be_bytes([a, b, c, d]);
        let opts = match *raw {
            [] => SynOptions::default(),
            // RFC 7323 appendix A's layout (Linux's aligned timestamp fast path).
            [1, 1, 8, 10, a, b, c, d, e, f, g, h] => SynOptions {
                timestamps: Some((be32(a, b, c, d), be32(e, f, g, h))),
                ..SynOptions::default()
            },
            // A SYN with every option in Linux's layout (MSS, SACK-permitted,
            // Timestamps, NOP, window scale): what the general walk finds.
            [
                2,
                4,
                m0,
                m1,
                4,
                2,
                8,
                10,
                a,
                b,
                c,
                d,
                e,
                f,
                g,
                h,
                1,
                3,
                3,
                ws,
            ] => SynOptions {
                mss: Some(u16::from_be_bytes([m0, m1])),
                window_scale: Some(ws),
                sack_permitted: true,
                timestamps: Some((be32(a, b, c, d), be32(e, f, g, h))),
            },
            _ => return Segment::parse_general(bytes, segs),
        };
        Ok(Segment {
            src_port: u16::from_be_bytes([h[0], h[1]]),
            dst_port: u16::from_be_bytes([h[2], h[3]]),
            seq: Seq(be32(h[4], h[5], h[6], h[7])),
            ack: Seq(be32(h[8], h[9], h[10], h[11])),
            flags: Flags::from_bits(u16::from_be_bytes([h[12], h[13]])),
            wnd: u16::from_be_bytes([h[14], h[15]]),
            opts,
            sack: SackBlocks::new(),
            payload,
            more: &[],
            more_len: 0,
            segs: segs.max(1),
            frame: None,
            ce: false,
        })
    }

    /// [`Segment::parse`] through [`tcp::Packet`] and the option walk: any
    /// layout of options, and the refusals.
    #[cold]
    #[inline(never)]
    pub fn parse_general(bytes: &'a [u8], segs: u32) -> linerate_wire::Result<Segment<'a>> {
        let p = tcp::Packet::new_checked(bytes)?;
        let mut opts = SynOptions::default();
        let mut sack = SackBlocks::new();
        for o in options::iter(p.options()) {
            match o? {
                TcpOption::Mss(v) => {
                    opts.mss.get_or_insert(v);
                }
                TcpOption::WindowScale(v) => {
                    opts.window_scale.get_or_insert(v);
                }
                TcpOption::SackPermitted => opts.sack_permitted = true,
                TcpOption::Timestamps { tsval, tsecr } => {
                    opts.timestamps.get_or_insert((tsval, tsecr));
                }
                TcpOption::Sack(b) => sack = b,
                _ => {}
            }
        }
        let hl = p.header_len();
        Ok(Segment {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: Seq(p.seq_number()),
            ack: Seq(p.ack_number()),
            flags: p.flags(),
            wnd: p.window(),
            opts,
            sack,
            payload: bytes.get(hl..).unwrap_or_default(),
            more: &[],
            more_len: 0,
            segs: segs.max(1),
            frame: None,
            ce: false,
        })
    }

    /// True if `f` is set.
    pub fn has(&self, f: Flags) -> bool {
        self.flags.contains(f)
    }

    /// Data bytes: `payload` and `more`.
    #[inline]
    pub fn data_len(&self) -> usize {
        self.payload.len() + self.more_len
    }

    /// The data as pieces, in order: `payload`, then each of `more`.
    pub fn pieces(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        core::iter::once(self.payload).chain(self.more.iter().map(Frag::bytes))
    }

    /// SEG.LEN: data plus one for SYN and one for FIN.
    pub fn len(&self) -> usize {
        self.data_len() + usize::from(self.has(Flags::SYN)) + usize::from(self.has(Flags::FIN))
    }
}

/// A segment the connection wants sent. The data is `data_len` bytes of the send
/// buffer from `data_off`; a length above `mss` asks for segmentation (GSO).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outgoing {
    pub seq: Seq,
    pub ack: Seq,
    pub flags: Flags,
    pub wnd: u16,
    /// SYN options (on SYN and SYN-ACK only).
    pub syn: Option<SynOptions>,
    /// Timestamps (tsval, tsecr) on other segments.
    pub ts: Option<(u32, u32)>,
    /// SACK blocks (on segments without data).
    pub sack: SackBlocks,
    pub data_off: usize,
    pub data_len: usize,
    /// Data bytes per wire segment.
    pub mss: usize,
    /// Part of it was sent before.
    pub retransmit: bool,
}

impl Outgoing {
    /// Writes the options into `buf` (at most 40 bytes); returns their length.
    /// Inline for the options of nearly every segment, timestamps alone.
    #[inline]
    pub fn write_options(&self, buf: &mut [u8]) -> usize {
        if self.syn.is_none()
            && self.sack.is_empty()
            && let Some((tsval, tsecr)) = self.ts
        {
            // NOP, NOP, Timestamps (RFC 7323 appendix A's layout), as
            // `emit_options` would write it.
            let word = (0x0101_080a_u128 << 64) | (u128::from(tsval) << 32) | u128::from(tsecr);
            let bytes = word.to_be_bytes();
            return match (buf.get_mut(..12), bytes.get(4..)) {
                (Some(out), Some(src)) => {
                    out.copy_from_slice(src);
                    12
                }
                _ => 0,
            };
        }
        self.write_options_general(buf)
    }

    /// [`Outgoing::write_options`] for SYNs, SACK blocks, no timestamps: any
    /// options but timestamps alone.
    #[inline(never)]
    fn write_options_general(&self, buf: &mut [u8]) -> usize {
        if let Some(syn) = &self.syn {
            if let SynOptions {
                mss: Some(mss),
                window_scale: Some(ws),
                sack_permitted: true,
                timestamps: Some((tsval, tsecr)),
            } = *syn
            {
                // Every option, as `SynOptions::emit` lays them out (Linux's
                // SYN): MSS, SACK-permitted, Timestamps, NOP, window scale.
                let [m0, m1] = mss.to_be_bytes();
                let [a, b, c, d] = tsval.to_be_bytes();
                let [e, f, g, h] = tsecr.to_be_bytes();
                let all = [
                    2, 4, m0, m1, 4, 2, 8, 10, a, b, c, d, e, f, g, h, 1, 3, 3, ws,
                ];
                return match buf.get_mut(..all.len()) {
                    Some(out) => {
                        out.copy_from_slice(&all);
                        all.len()
                    }
                    None => 0,
                };
            }
            return syn.emit(buf).unwrap_or(0);
        }
        // (Timestamps alone, the common case, never come here: the caller
        // writes them.)
        let mut list = [TcpOption::NoOp; 6];
        let mut n = 0;
        let mut add = |o| {
            if let Some(slot) = list.get_mut(n) {
                *slot = o;
                n += 1;
            }
        };
        if let Some((tsval, tsecr)) = self.ts {
            add(TcpOption::NoOp);
            add(TcpOption::NoOp);
            add(TcpOption::Timestamps { tsval, tsecr });
        }
        if !self.sack.is_empty() {
            add(TcpOption::NoOp);
            add(TcpOption::NoOp);
            add(TcpOption::Sack(self.sack));
        }
        options::emit_options(list.get(..n).unwrap_or_default(), buf).unwrap_or(0)
    }

    /// Number of wire segments this becomes.
    pub fn wire_segments(&self) -> usize {
        if self.data_len <= self.mss || self.mss == 0 {
            // Without a division: every segment when offloads are off.
            1
        } else {
            self.data_len.div_ceil(self.mss)
        }
    }
}

/// Most SACK blocks that fit beside timestamps (RFC 2018 section 3).
pub(crate) fn max_sack_blocks(ts: bool) -> usize {
    if ts { 3 } else { 4 }
}

#[cfg(test)]
mod parse_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// A SYN's options written directly are what `SynOptions::emit`
        /// writes, and read back directly are what the general walk
        /// (`parse_syn_options`) reads, for every combination of options.
        #[test]
        fn syn_options_fast_paths_match_the_general_ones(
            mss in proptest::option::of(any::<u16>()),
            ws in proptest::option::of(0u8..15),
            sack: bool,
            ts in proptest::option::of(any::<(u32, u32)>()),
        ) {
            let syn = SynOptions { mss, window_scale: ws, sack_permitted: sack, timestamps: ts };
            let o = Outgoing {
                seq: Seq(1),
                ack: Seq(0),
                flags: Flags::SYN,
                wnd: 100,
                syn: Some(syn),
                ts: None,
                sack: SackBlocks::default(),
                data_off: 0,
                data_len: 0,
                mss: 0,
                retransmit: false,
            };
            let mut fast = [0u8; 40];
            let n = o.write_options(&mut fast);
            let mut general = [0u8; 40];
            let m = syn.emit(&mut general).unwrap();
            prop_assert_eq!(&fast[..n], &general[..m]);
            // The segment around them, parsed.
            let mut seg = vec![0u8; 20 + n];
            {
                let mut t = tcp::Packet::new_unchecked(&mut seg[..]);
                t.set_data_offset(((20 + n) / 4) as u8);
                t.set_flags(Flags::SYN);
                t.options_mut().copy_from_slice(&fast[..n]);
            }
            let parsed = Segment::parse(&seg, 1).unwrap();
            prop_assert_eq!(parsed.opts, options::parse_syn_options(&fast[..n]).unwrap());
            prop_assert_eq!(parsed.opts, syn);
        }

        /// The direct timestamps-only encoding is what the general one writes.
        #[test]
        fn timestamps_fast_path_matches_emit_options(tsval: u32, tsecr: u32) {
            let o = Outgoing {
                seq: Seq(1),
                ack: Seq(2),
                flags: Flags::ACK,
                wnd: 100,
                syn: None,
                ts: Some((tsval, tsecr)),
                sack: SackBlocks::default(),
                data_off: 0,
                data_len: 0,
                mss: 1460,
                retransmit: false,
            };
            let mut fast = [0u8; 40];
            let n = o.write_options(&mut fast);
            let mut general = [0u8; 40];
            let list = [TcpOption::NoOp, TcpOption::NoOp, TcpOption::Timestamps { tsval, tsecr }];
            let m = options::emit_options(&list, &mut general).unwrap();
            prop_assert_eq!(&fast[..n], &general[..m]);
            prop_assert_eq!(o.write_options(&mut [0u8; 11]), 0);
        }
    }
}
