//! TCP options (RFC 9293 section 3.2 and 3.7.1 for MSS, RFC 7323 sections 2 and 3
//! for window scale and timestamps, RFC 2018 for SACK): a bounds-checked iterator,
//! a writer that pads to a 4-byte multiple, and the SYN options a connection
//! negotiates.
//!
//! [`iter`] yields every option as a [`TcpOption`], `NoOp` included; it yields
//! `EndOfList` once and stops there (what follows is padding). Options it does not
//! know are returned as [`TcpOption::Unknown`] and skipped by their length. A bad
//! length is an [`Error`] with [`Layer::TcpOption`], after which the iterator ends:
//! `"length"` (below 2), `"mss length"` (not 4), `"window scale length"` (not 3),
//! `"sack-permitted length"` (not 2), `"timestamps length"` (not 10),
//! `"sack length"` (not 2 + 8n with n in 1..=4); an option running past the end
//! is [`Error::Truncated`] (`need` and `have` counted from the option's kind byte).
//!
//! ```
//! use linerate_wire::tcp::options::{self, TcpOption};
//!
//! let mut buf = [0u8; options::MAX_LEN];
//! let opts = [TcpOption::Mss(1460), TcpOption::NoOp, TcpOption::WindowScale(7)];
//! let n = options::emit_options(&opts, &mut buf).unwrap();
//! assert_eq!(&buf[..n], &[2, 4, 5, 0xb4, 1, 3, 3, 7]);
//! let back: Vec<_> = options::iter(&buf[..n]).collect::<Result<_, _>>().unwrap();
//! assert_eq!(back, opts);
//! let syn = options::parse_syn_options(&buf[..n]).unwrap();
//! assert_eq!((syn.mss, syn.window_scale), (Some(1460), Some(7)));
//! ```

use crate::error::{Error, Layer, Result};

/// Option kinds (IANA "TCP Option Kind Numbers").
pub mod kind {
    /// End of option list.
    pub const END: u8 = 0;
    /// No operation (padding between options).
    pub const NOP: u8 = 1;
    /// Maximum segment size.
    pub const MSS: u8 = 2;
    /// Window scale.
    pub const WINDOW_SCALE: u8 = 3;
    /// SACK permitted.
    pub const SACK_PERMITTED: u8 = 4;
    /// Selective acknowledgment blocks.
    pub const SACK: u8 = 5;
    /// Timestamps.
    pub const TIMESTAMPS: u8 = 8;
}

/// Most option bytes a header carries (data offset 15).
pub const MAX_LEN: usize = 40;
/// Most SACK blocks one option carries.
pub const MAX_SACK_BLOCKS: usize = 4;
/// Largest window scale shift a receiver uses (RFC 7323 section 2.3).
pub const MAX_WINDOW_SCALE: u8 = 14;

/// Up to four SACK blocks, each a (left edge, right edge) pair of sequence numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    len: u8,
    blocks: [(u32, u32); MAX_SACK_BLOCKS],
}

impl SackBlocks {
    /// No blocks.
    pub const fn new() -> Self {
        SackBlocks {
            len: 0,
            blocks: [(0, 0); MAX_SACK_BLOCKS],
        }
    }

    /// The blocks of `blocks`, or `None` if there are more than four.
    pub fn from_slice(blocks: &[(u32, u32)]) -> Option<Self> {
        let mut s = SackBlocks::new();
        for &b in blocks {
            if !s.push(b) {
                return None;
            }
        }
        Some(s)
    }

    /// Appends a block; false (and no change) if four are already there.
    pub fn push(&mut self, block: (u32, u32)) -> bool {
        match self.blocks.get_mut(usize::from(self.len)) {
            Some(slot) => {
                *slot = block;
                self.len += 1;
                true
            }
            None => false,
        }
    }

    /// The blocks, first one first.
    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.blocks[..usize::from(self.len)]
    }

    /// Number of blocks.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True if there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// End of option list (kind 0); the rest of the options area is padding.
    EndOfList,
    /// No operation (kind 1).
    NoOp,
    /// Maximum segment size (kind 2, length 4).
    Mss(u16),
    /// Window scale shift count (kind 3, length 3).
    WindowScale(u8),
    /// SACK permitted (kind 4, length 2).
    SackPermitted,
    /// SACK blocks (kind 5, length 2 + 8n).
    Sack(SackBlocks),
    /// Timestamps (kind 8, length 10).
    Timestamps {
        /// The sender's timestamp value.
        tsval: u32,
        /// The echoed timestamp.
        tsecr: u32,
    },
    /// Any other option: its kind and the bytes after the length byte.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data (without kind and length bytes).
        data: &'a [u8],
    },
}

impl TcpOption<'_> {
    /// The option's kind byte.
    pub fn kind(&self) -> u8 {
        match *self {
            TcpOption::EndOfList => kind::END,
            TcpOption::NoOp => kind::NOP,
            TcpOption::Mss(_) => kind::MSS,
            TcpOption::WindowScale(_) => kind::WINDOW_SCALE,
            TcpOption::SackPermitted => kind::SACK_PERMITTED,
            TcpOption::Sack(_) => kind::SACK,
            TcpOption::Timestamps { .. } => kind::TIMESTAMPS,
            TcpOption::Unknown { kind, .. } => kind,
        }
    }

    /// Bytes the option takes on the wire.
    pub fn wire_len(&self) -> usize {
        match *self {
            TcpOption::EndOfList | TcpOption::NoOp => 1,
            TcpOption::Mss(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::Sack(b) => 2 + 8 * b.len(),
            TcpOption::Timestamps { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// The etherparse element for this option; `None` for `EndOfList`, `Unknown`
    /// and an empty `Sack`, which etherparse cannot express.
    pub fn to_etherparse(&self) -> Option<etherparse::TcpOptionElement> {
        use etherparse::TcpOptionElement as E;
        Some(match *self {
            TcpOption::EndOfList | TcpOption::Unknown { .. } => return None,
            TcpOption::NoOp => E::Noop,
            TcpOption::Mss(v) => E::MaximumSegmentSize(v),
            TcpOption::WindowScale(v) => E::WindowScale(v),
            TcpOption::SackPermitted => E::SelectiveAcknowledgementPermitted,
            TcpOption::Sack(b) => {
                let (&first, rest) = b.as_slice().split_first()?;
                let mut more = [None; 3];
                for (slot, &blk) in more.iter_mut().zip(rest) {
                    *slot = Some(blk);
                }
                E::SelectiveAcknowledgement(first, more)
            }
            TcpOption::Timestamps { tsval, tsecr } => E::Timestamp(tsval, tsecr),
        })
    }
}

impl From<&etherparse::TcpOptionElement> for TcpOption<'static> {
    fn from(e: &etherparse::TcpOptionElement) -> Self {
        use etherparse::TcpOptionElement as E;
        match *e {
            E::Noop => TcpOption::NoOp,
            E::MaximumSegmentSize(v) => TcpOption::Mss(v),
            E::WindowScale(v) => TcpOption::WindowScale(v),
            E::SelectiveAcknowledgementPermitted => TcpOption::SackPermitted,
            E::SelectiveAcknowledgement(first, more) => {
                let mut b = SackBlocks::new();
                b.push(first);
                for blk in more.into_iter().flatten() {
                    b.push(blk);
                }
                TcpOption::Sack(b)
            }
            E::Timestamp(tsval, tsecr) => TcpOption::Timestamps { tsval, tsecr },
        }
    }
}

/// Iterates over the options in `options` (the bytes between the fixed header and
/// the data offset); see the [module docs](self).
pub fn iter(options: &[u8]) -> Iter<'_> {
    Iter { rest: options }
}

/// Iterator over TCP options; see [`iter`].
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    rest: &'a [u8],
}

impl<'a> Iter<'a> {
    /// The bytes not yet read.
    pub fn rest(&self) -> &'a [u8] {
        self.rest
    }

    fn fail<T>(&mut self, e: Error) -> Option<Result<T>> {
        self.rest = &[];
        Some(Err(e))
    }
}

fn be32(b: &[u8]) -> u32 {
    match b {
        [a, b, c, d, ..] => u32::from_be_bytes([*a, *b, *c, *d]),
        _ => 0,
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let data = self.rest;
        let (&k, after) = data.split_first()?;
        match k {
            kind::END => {
                self.rest = &[];
                return Some(Ok(TcpOption::EndOfList));
            }
            kind::NOP => {
                self.rest = after;
                return Some(Ok(TcpOption::NoOp));
            }
            _ => {}
        }
        let Some(&len) = after.first() else {
            return self.fail(Error::truncated(Layer::TcpOption, 2, data.len()));
        };
        let len = usize::from(len);
        if len < 2 {
            return self.fail(Error::invalid(Layer::TcpOption, "length", len as u32));
        }
        let (Some(body), Some(rest)) = (data.get(2..len), data.get(len..)) else {
            return self.fail(Error::truncated(Layer::TcpOption, len, data.len()));
        };
        let bad = |field| Error::invalid(Layer::TcpOption, field, len as u32);
        let opt = match (k, body) {
            (kind::MSS, &[a, b]) => TcpOption::Mss(u16::from_be_bytes([a, b])),
            (kind::MSS, _) => return self.fail(bad("mss length")),
            (kind::WINDOW_SCALE, &[s]) => TcpOption::WindowScale(s),
            (kind::WINDOW_SCALE, _) => return self.fail(bad("window scale length")),
            (kind::SACK_PERMITTED, &[]) => TcpOption::SackPermitted,
            (kind::SACK_PERMITTED, _) => return self.fail(bad("sack-permitted length")),
            (kind::TIMESTAMPS, _) if body.len() == 8 => TcpOption::Timestamps {
                tsval: be32(body),
                tsecr: be32(&body[4..]),
            },
            (kind::TIMESTAMPS, _) => return self.fail(bad("timestamps length")),
            (kind::SACK, _) => {
                if body.is_empty() || body.len() % 8 != 0 || body.len() > 8 * MAX_SACK_BLOCKS {
                    return self.fail(bad("sack length"));
                }
                let mut blocks = SackBlocks::new();
                for c in body.chunks_exact(8) {
                    blocks.push((be32(c), be32(&c[4..])));
                }
                TcpOption::Sack(blocks)
            }
            _ => TcpOption::Unknown {
                kind: k,
                data: body,
            },
        };
        self.rest = rest;
        Some(Ok(opt))
    }
}

/// Bytes [`emit_options`] writes for `opts`: their wire lengths rounded up to a
/// multiple of 4.
pub fn emitted_len(opts: &[TcpOption<'_>]) -> usize {
    opts.iter()
        .map(TcpOption::wire_len)
        .sum::<usize>()
        .next_multiple_of(4)
}

/// Writes `opts` in order at the start of `buf`, then pads with an end-of-list and
/// zeros to a multiple of 4 bytes, and returns the length written.
///
/// Errors: [`Error::TooMany`] if that exceeds [`MAX_LEN`] (40) bytes;
/// [`Error::BufferTooSmall`] if `buf` is shorter; [`Error::Invalid`] for an empty
/// `Sack` (`"sack length"`) or an `Unknown` option of kind 0 or 1 (`"kind"`).
/// Nothing is written on error.
pub fn emit_options(opts: &[TcpOption<'_>], buf: &mut [u8]) -> Result<usize> {
    let len = emitted_len(opts);
    if len > MAX_LEN {
        return Err(Error::TooMany {
            layer: Layer::TcpOption,
            limit: MAX_LEN,
        });
    }
    for o in opts {
        match *o {
            TcpOption::Sack(b) if b.is_empty() => {
                return Err(Error::invalid(Layer::TcpOption, "sack length", 2));
            }
            TcpOption::Unknown {
                kind: k @ (kind::END | kind::NOP),
                ..
            } => {
                return Err(Error::invalid(Layer::TcpOption, "kind", k.into()));
            }
            _ => {}
        }
    }
    let have = buf.len();
    let out = buf.get_mut(..len).ok_or(Error::BufferTooSmall {
        layer: Layer::TcpOption,
        need: len,
        have,
    })?;
    let mut at = 0;
    for o in opts {
        let n = o.wire_len();
        write_one(o, &mut out[at..at + n]);
        at += n;
    }
    out[at..].fill(kind::END);
    Ok(len)
}

/// Writes `o` into `out`, which is exactly `o.wire_len()` bytes long.
fn write_one(o: &TcpOption<'_>, out: &mut [u8]) {
    out[0] = o.kind();
    if let Some(l) = out.get_mut(1) {
        *l = o.wire_len() as u8;
    }
    match *o {
        TcpOption::EndOfList | TcpOption::NoOp | TcpOption::SackPermitted => {}
        TcpOption::Mss(v) => out[2..4].copy_from_slice(&v.to_be_bytes()),
        TcpOption::WindowScale(v) => out[2] = v,
        TcpOption::Sack(b) => {
            for (c, &(l, r)) in out[2..].chunks_exact_mut(8).zip(b.as_slice()) {
                c[..4].copy_from_slice(&l.to_be_bytes());
                c[4..].copy_from_slice(&r.to_be_bytes());
            }
        }
        TcpOption::Timestamps { tsval, tsecr } => {
            out[2..6].copy_from_slice(&tsval.to_be_bytes());
            out[6..10].copy_from_slice(&tsecr.to_be_bytes());
        }
        TcpOption::Unknown { data, .. } => out[2..].copy_from_slice(data),
    }
}

/// The options a SYN or SYN-ACK negotiates (RFC 9293 section 3.7.1, RFC 7323,
/// RFC 2018).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SynOptions {
    /// Maximum segment size the sender can receive.
    pub mss: Option<u16>,
    /// Window scale shift count, as received (RFC 7323 section 2.3: a receiver
    /// uses at most [`MAX_WINDOW_SCALE`]).
    pub window_scale: Option<u8>,
    /// SACK permitted.
    pub sack_permitted: bool,
    /// Timestamps (tsval, tsecr).
    pub timestamps: Option<(u32, u32)>,
}

impl SynOptions {
    /// Writes these options in the layout Linux uses (MSS; SACK-permitted and
    /// timestamps, NOP-aligned; NOP and window scale), 4-byte aligned, and returns
    /// the length; errors as [`emit_options`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let mut list = [TcpOption::NoOp; 8];
        let mut n = 0;
        let mut add = |o| {
            if let Some(slot) = list.get_mut(n) {
                *slot = o;
                n += 1;
            }
        };
        if let Some(mss) = self.mss {
            add(TcpOption::Mss(mss));
        }
        match (self.sack_permitted, self.timestamps) {
            (true, Some((tsval, tsecr))) => {
                add(TcpOption::SackPermitted);
                add(TcpOption::Timestamps { tsval, tsecr });
            }
            (false, Some((tsval, tsecr))) => {
                add(TcpOption::NoOp);
                add(TcpOption::NoOp);
                add(TcpOption::Timestamps { tsval, tsecr });
            }
            (true, None) => {
                add(TcpOption::NoOp);
                add(TcpOption::NoOp);
                add(TcpOption::SackPermitted);
            }
            (false, None) => {}
        }
        if let Some(ws) = self.window_scale {
            add(TcpOption::NoOp);
            add(TcpOption::WindowScale(ws));
        }
        emit_options(&list[..n], buf)
    }
}

/// Collects the SYN options from the raw options of a segment. The first of
/// duplicated options wins; unknown options are skipped; the first malformed one
/// is returned as the error.
pub fn parse_syn_options(options: &[u8]) -> Result<SynOptions> {
    let mut s = SynOptions::default();
    for o in iter(options) {
        match o? {
            TcpOption::Mss(v) => {
                s.mss.get_or_insert(v);
            }
            TcpOption::WindowScale(v) => {
                s.window_scale.get_or_insert(v);
            }
            TcpOption::SackPermitted => s.sack_permitted = true,
            TcpOption::Timestamps { tsval, tsecr } => {
                s.timestamps.get_or_insert((tsval, tsecr));
            }
            _ => {}
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
