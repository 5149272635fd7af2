//! IPv4: Linux `inet_gro_receive` (packet checks, same flow) and `inet_gro_flush`
//! (the rules that end a run), `inet_gro_complete` (the fix-up); REFERENCE.md "GRO".
//!
//! * Packet: IHL 5 (no options), not a fragment (nor the reserved flag), header
//!   checksum good, total length equal to the real length (no padding).
//! * Same flow: protocol, source and destination address.
//! * Flush: TTL, TOS or DF differ; the ID is neither fixed for the run nor the first
//!   segment's ID plus the number of segments held. Whether the run's ID is fixed is
//!   decided at its second segment, separately for the outer and the inner header of
//!   a tunnel; as in Linux, a fixed ID needs DF (an atomic datagram, RFC 6864).
//! * Fix-up: total length of the merged packet; header checksum recomputed.

use super::FlushReason;
use super::bytes;
use linerate_wire::checksum;
use linerate_wire::ipv4::field;
use linerate_wire::layout::Headers;

/// DF in the flags / fragment offset word.
const DF: u16 = 0x4000;

/// How a run's IPv4 IDs advance (Linux `NAPI_GRO_CB(p)->ip_fixedid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum IdMode {
    /// One segment so far (or not IPv4): decided at the second.
    #[default]
    Undecided,
    /// Every segment has the first one's ID (`SKB_GSO_TCP_FIXEDID`).
    Fixed,
    /// Each segment's ID is the previous one's plus one.
    Incrementing,
}

/// The packet-level checks, for the header `h` of a packet ending at `end`.
#[inline]
pub(super) fn check(b: &[u8], h: &Headers, end: usize) -> Result<(), FlushReason> {
    let l3 = usize::from(h.l3_offset);
    if bytes::u8_at(b, l3 + field::VER_IHL) != 0x45 {
        return Err(FlushReason::IpOptions);
    }
    if bytes::be16(b, l3 + field::FLG_OFF.start) & !DF != 0 {
        return Err(FlushReason::Fragment);
    }
    if usize::from(bytes::be16(b, l3 + field::LENGTH.start)) != end.wrapping_sub(l3) {
        return Err(FlushReason::Length);
    }
    if !checksum::verify(bytes::slice(b, l3, 20), 0) {
        return Err(FlushReason::IpCsum);
    }
    Ok(())
}

/// Same flow if protocol and both addresses are equal.
#[inline]
pub(super) fn same_flow(p: &[u8], ph: &Headers, h: &[u8], hh: &Headers) -> Result<(), FlushReason> {
    let (pl, hl) = (usize::from(ph.l3_offset), usize::from(hh.l3_offset));
    let same = bytes::u8_at(p, pl + field::PROTOCOL) == bytes::u8_at(h, hl + field::PROTOCOL)
        && bytes::slice(p, pl + field::SRC_ADDR.start, 8)
            == bytes::slice(h, hl + field::SRC_ADDR.start, 8);
    if same {
        Ok(())
    } else {
        Err(FlushReason::Tuple)
    }
}

/// The flush rules against the run's first header `hh`, which holds `count`
/// segments with ID mode `mode`. Returns the ID mode the run has if the packet joins.
#[inline]
pub(super) fn must_flush(
    p: &[u8],
    ph: &Headers,
    h: &[u8],
    hh: &Headers,
    mode: IdMode,
    count: u16,
) -> Result<IdMode, FlushReason> {
    let (pl, hl) = (usize::from(ph.l3_offset), usize::from(hh.l3_offset));
    if bytes::u8_at(p, pl + field::TTL) != bytes::u8_at(h, hl + field::TTL) {
        return Err(FlushReason::Ttl);
    }
    if bytes::u8_at(p, pl + field::DSCP_ECN) != bytes::u8_at(h, hl + field::DSCP_ECN) {
        return Err(FlushReason::Tos);
    }
    let df = bytes::be16(p, pl + field::FLG_OFF.start) & DF;
    if df != bytes::be16(h, hl + field::FLG_OFF.start) & DF {
        return Err(FlushReason::Df);
    }
    let offset = bytes::be16(p, pl + field::IDENT.start)
        .wrapping_sub(bytes::be16(h, hl + field::IDENT.start));
    match mode {
        IdMode::Undecided if offset == 0 && df != 0 => Ok(IdMode::Fixed),
        IdMode::Undecided if offset == 1 => Ok(IdMode::Incrementing),
        IdMode::Fixed if offset == 0 => Ok(IdMode::Fixed),
        IdMode::Incrementing if offset == count => Ok(IdMode::Incrementing),
        _ => Err(FlushReason::IpId),
    }
}

/// The pseudo-header sum of the transport header at `h` for `l4_len` bytes.
#[inline]
pub(super) fn pseudo(b: &[u8], h: &Headers, protocol: u8, l4_len: u16) -> u32 {
    let l3 = usize::from(h.l3_offset);
    let a = |at| {
        let s = bytes::slice(b, l3 + at, 4);
        let mut x = [0u8; 4];
        if s.len() == 4 {
            x.copy_from_slice(s);
        }
        x
    };
    checksum::pseudo_ipv4(
        a(field::SRC_ADDR.start),
        a(field::DST_ADDR.start),
        protocol,
        l4_len,
    )
}

/// Sets the total length to `total` and recomputes the header checksum.
#[inline]
pub(super) fn complete(b: &mut [u8], h: &mut Headers, total: u16) {
    let l3 = usize::from(h.l3_offset);
    bytes::put16(b, l3 + field::LENGTH.start, total);
    bytes::put16(b, l3 + field::CHECKSUM.start, 0);
    let c = checksum::checksum(bytes::slice(b, l3, 20));
    bytes::put16(b, l3 + field::CHECKSUM.start, c);
    h.l3_len = total;
}
