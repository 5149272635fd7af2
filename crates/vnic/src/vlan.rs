//! 802.1Q tag insertion and stripping on a frame, keeping its offload metadata right.

use linerate_nic::{BufError, Frame};
use linerate_offload::Checksum;
use linerate_wire::ethernet::ethertype;

/// Inserts an 802.1Q tag with `vid` after the source MAC (into the headroom: no
/// copy of the payload), shifting a partial checksum's start.
pub(crate) fn insert(frame: &mut Frame, vid: u16) -> Result<(), BufError> {
    frame.buf.prepend(4)?;
    let b = frame.buf.as_mut_slice();
    b.copy_within(4..16, 0);
    if let Some(tag) = b.get_mut(12..16) {
        tag[..2].copy_from_slice(&ethertype::VLAN.to_be_bytes());
        tag[2..].copy_from_slice(&(vid & 0x0fff).to_be_bytes());
    }
    shift(frame, 4);
    Ok(())
}

/// Removes the outer tag (the caller checked there is one).
pub(crate) fn strip(frame: &mut Frame) -> Result<(), BufError> {
    if frame.len() < 18 {
        return Err(BufError::Short {
            need: 18,
            have: frame.len(),
        });
    }
    frame.buf.as_mut_slice().copy_within(0..12, 4);
    frame.buf.strip_front(4)?;
    shift(frame, -4);
    Ok(())
}

fn shift(frame: &mut Frame, by: i32) {
    if let Checksum::Partial { start, offset } = frame.meta.csum {
        let s = (i32::from(start) + by).clamp(0, i32::from(u16::MAX));
        frame.meta.csum = Checksum::Partial {
            start: u16::try_from(s).unwrap_or(start),
            offset,
        };
    }
}
