//! A received segment, parsed once (RFC 9293 section 3.1 header, options of
//! section 3.2, RFC 7323 and RFC 2018), and a segment to send.

use super::seq::Seq;
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
    pub payload: &'a [u8],
    /// Wire segments this stands for (more than one after GRO).
    pub segs: u32,
}

impl<'a> Segment<'a> {
    /// Parses the TCP header and options of `bytes` (the whole segment). `segs` is
    /// the number of wire segments it stands for.
    pub fn parse(bytes: &'a [u8], segs: u32) -> linerate_wire::Result<Segment<'a>> {
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
            segs: segs.max(1),
        })
    }

    /// True if `f` is set.
    pub fn has(&self, f: Flags) -> bool {
        self.flags.contains(f)
    }

    /// SEG.LEN: data plus one for SYN and one for FIN.
    pub fn len(&self) -> usize {
        self.payload.len() + usize::from(self.has(Flags::SYN)) + usize::from(self.has(Flags::FIN))
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
    pub fn write_options(&self, buf: &mut [u8]) -> usize {
        if let Some(syn) = &self.syn {
            return syn.emit(buf).unwrap_or(0);
        }
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
        if self.data_len == 0 || self.mss == 0 {
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
