//! TCP: Linux `tcp_gro_receive` (with `tcp4_gro_receive` / `tcp6_gro_receive` for
//! the checksum) and `tcp_gro_complete`; REFERENCE.md "GRO".
//!
//! * Packet: no SYN, RST or URG; some payload (a pure ACK never merges); checksum
//!   good. A segment with FIN or PSH that finds no run to join is not held.
//! * Same flow: both ports (addresses and protocol are the IP layer's).
//! * Flush (the run is delivered, the segment starts a new one): CWR set (it can
//!   only start a run); the 32-bit word of data offset, flags and window differs
//!   other than in CWR, FIN and PSH (so a window change ends the run); the ACK
//!   number differs; any option byte differs (a timestamp that moved); the payload
//!   is larger than the run's MSS (the first segment's payload); the sequence
//!   number is not exactly the run's next.
//! * After merging: FIN or PSH (ORed into the run's head), or a payload shorter than
//!   the MSS, flush the run.
//! * Fix-up: the head's flags get the merged segments' FIN and PSH; the checksum
//!   field holds the folded, not complemented, pseudo-header sum over the merged
//!   length (`th->check = ~tcp_v4_check(len, saddr, daddr, 0)`), with the frame
//!   marked `Checksum::Partial { start: <TCP header>, offset: 16 }`.

use super::FlushReason;
use super::bytes::{self, hdr16, hdr32};
use super::view::View;
use linerate_wire::checksum;
use linerate_wire::layout::Headers;
use linerate_wire::tcp::{Flags, field};

/// CWR, FIN and PSH in the data offset / flags / window word.
const FREE_BITS: u32 = ((Flags::CWR.bits() | Flags::FIN.bits() | Flags::PSH.bits()) as u32) << 16;
/// The data offset bits of that word.
const DOFF_BITS: u32 = 0xf000_0000;
/// The window bits of that word.
const WINDOW_BITS: u32 = 0x0000_ffff;

/// The fixed TCP header (options follow it).
pub(super) type Hdr = [u8; 20];

/// The fixed header at `h.l4_offset` in `b`, if it lies there.
#[inline]
pub(super) fn header<'a>(b: &'a [u8], h: &Headers) -> Option<&'a Hdr> {
    bytes::array(b, usize::from(h.l4_offset))
}

/// The options of the segment at `h` in `b`.
#[inline]
pub(super) fn options<'a>(b: &'a [u8], h: &Headers) -> &'a [u8] {
    bytes::range(b, usize::from(h.l4_offset) + 20, usize::from(h.payload))
}

/// The flags.
#[inline]
pub(super) fn flags(t: &Hdr) -> Flags {
    Flags::from_bits(hdr16!(t, field::FLAGS.start) & 0x01ff)
}

/// The sequence number.
#[inline]
pub(super) fn seq(t: &Hdr) -> u32 {
    hdr32!(t, field::SEQ_NUM.start)
}

/// The packet-level checks for a segment with `len` payload bytes.
#[inline]
pub(super) fn check(t: &Hdr, len: usize) -> Result<(), FlushReason> {
    let f = flags(t);
    if f.intersects(Flags::SYN | Flags::RST | Flags::URG) {
        return Err(if f.contains(Flags::SYN) {
            FlushReason::Syn
        } else if f.contains(Flags::RST) {
            FlushReason::Rst
        } else {
            FlushReason::Urg
        });
    }
    if len == 0 {
        return Err(FlushReason::PureAck);
    }
    Ok(())
}

/// Verifies the checksum of the segment at `h` (to the end of `b`) in software,
/// with the pseudo-header sum `pseudo`.
#[inline]
pub(super) fn verify(v: &View<'_>, h: &Headers, pseudo: u32) -> Result<(), FlushReason> {
    if checksum::fold(v.sum_from(usize::from(h.l4_offset), pseudo)) == 0xffff {
        Ok(())
    } else {
        Err(FlushReason::CsumBad)
    }
}

/// A segment that finds no run may start one unless it has FIN or PSH (Linux's
/// final flush check): such a segment is delivered as it is.
#[inline]
pub(super) fn can_start(t: &Hdr) -> Result<(), FlushReason> {
    let f = flags(t);
    if f.contains(Flags::FIN) {
        Err(FlushReason::Fin)
    } else if f.contains(Flags::PSH) {
        Err(FlushReason::Psh)
    } else {
        Ok(())
    }
}

/// Same flow if both ports are equal.
#[inline]
pub(super) fn same_flow(p: &Hdr, h: &Hdr) -> Result<(), FlushReason> {
    if hdr32!(p, 0) == hdr32!(h, 0) {
        Ok(())
    } else {
        Err(FlushReason::Tuple)
    }
}

/// The flush rules for a segment `p` (options `popts`, `len` payload bytes)
/// against the run's head `h` (options `hopts`), whose MSS is `mss` and next
/// sequence number `next_seq`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) fn must_flush(
    p: &Hdr,
    popts: &[u8],
    h: &Hdr,
    hopts: &[u8],
    len: usize,
    mss: u16,
    next_seq: u32,
) -> Result<(), FlushReason> {
    let word = hdr32!(p, field::FLAGS.start);
    if word & (u32::from(Flags::CWR.bits()) << 16) != 0 {
        return Err(FlushReason::Cwr);
    }
    let diff = (word ^ hdr32!(h, field::FLAGS.start)) & !FREE_BITS;
    if diff != 0 {
        return Err(if diff & DOFF_BITS != 0 {
            FlushReason::TcpOptions
        } else if diff & WINDOW_BITS != 0 {
            FlushReason::Window
        } else {
            FlushReason::TcpFlags
        });
    }
    if hdr32!(p, field::ACK_NUM.start) != hdr32!(h, field::ACK_NUM.start) {
        return Err(FlushReason::Ack);
    }
    if !bytes::eq(popts, hopts) {
        return Err(FlushReason::TcpOptions);
    }
    if len > usize::from(mss) {
        return Err(FlushReason::OverMss);
    }
    if seq(p) != next_seq {
        return Err(FlushReason::SeqGap);
    }
    Ok(())
}

/// After the segment `p` (`len` payload bytes) joined a run of MSS `mss`: the
/// reason to flush the run now, if any.
#[inline]
pub(super) fn after_merge(p: &Hdr, len: usize, mss: u16) -> Option<FlushReason> {
    let f = flags(p);
    if f.contains(Flags::FIN) {
        Some(FlushReason::Fin)
    } else if f.contains(Flags::PSH) {
        Some(FlushReason::Psh)
    } else if len < usize::from(mss) {
        Some(FlushReason::Short)
    } else {
        None
    }
}

/// ORs `or_flags` into the head's flags and writes the folded pseudo-header sum
/// `pseudo` into the checksum field.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &Headers, or_flags: Flags, pseudo: u32) {
    let at = usize::from(h.l4_offset) + field::FLAGS.start;
    let f = bytes::be16(b, at) | or_flags.bits();
    bytes::put16(b, at, f);
    bytes::put16(
        b,
        usize::from(h.l4_offset) + field::CHECKSUM.start,
        checksum::fold(pseudo),
    );
}
