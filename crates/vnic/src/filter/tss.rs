//! Tuple space search (Srinivasan, Suri and Varghese, 1999; Open vSwitch's
//! classifier): rules that mask the same bits form a tuple, a hash table of their
//! masked values, so a frame costs one lookup per tuple whatever the number of
//! rules in it.
//!
//! - Exact fields and prefixes are masks; a port range becomes the few prefixes
//!   that cover it (at most 30 for a 16-bit range, as a TCAM stores it). A rule
//!   whose ranges would expand to more than [`MAX_EXPANSION`] entries is kept
//!   whole in a short list checked by comparison instead.
//! - Tuples are ordered by the first rule in them, so the search stops at the
//!   first tuple that cannot hold a better (earlier) rule than the one found.
//! - `Count` rules do not decide: they sit in tuples of their own, looked up
//!   after the deciding rule is known, and counted when they come before it.

use super::key::{self, WORDS, Words};
use super::{FilterError, IpPrefix, Level, Match, PortRange, Side};

/// Most entries one rule's port ranges may expand to before it is checked whole.
pub(crate) const MAX_EXPANSION: usize = 16;

/// A rule as (value, mask) over a level's words, with its port ranges apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compiled {
    pub level: Level,
    pub value: Words,
    pub mask: Words,
    pub sport: Option<PortRange>,
    pub dport: Option<PortRange>,
}

fn set(c: &mut Compiled, word: usize, mask: u64, value: u64) {
    c.mask[word] |= mask;
    c.value[word] |= value & mask;
}

/// Errors name rule 0; [`super::Filters::new`] puts in the rule's index.
fn prefix(c: &mut Compiled, hi: usize, p: &IpPrefix, side: Side) -> Result<(), FilterError> {
    let too_long = || FilterError::PrefixTooLong {
        rule: 0,
        side,
        prefix: *p,
    };
    match p.addr {
        std::net::IpAddr::V4(a) => {
            if p.len > 32 {
                return Err(too_long());
            }
            set(c, 6, key::IS_V4, key::IS_V4);
            let m = if p.len == 0 {
                0
            } else {
                u64::from(u32::MAX << (32 - p.len))
            };
            set(c, hi + 1, m, u64::from(u32::from(a)));
        }
        std::net::IpAddr::V6(a) => {
            if p.len > 128 {
                return Err(too_long());
            }
            set(c, 6, key::IS_V6, key::IS_V6);
            let m = if p.len == 0 {
                0
            } else {
                u128::MAX << (128 - p.len)
            };
            let a = u128::from(a);
            set(c, hi, (m >> 64) as u64, (a >> 64) as u64);
            set(c, hi + 1, m as u64, a as u64);
        }
    }
    Ok(())
}

impl Compiled {
    /// Checks and packs a rule's match; an error names rule 0.
    pub(crate) fn new(m: &Match) -> Result<Compiled, FilterError> {
        let mut c = Compiled {
            level: m.level,
            value: [0; WORDS],
            mask: [0; WORDS],
            sport: None,
            dport: None,
        };
        if let Some(mac) = m.dst_mac {
            set(&mut c, 0, key::MAC_MASK, mac_word(mac));
        }
        if let Some(et) = m.ethertype {
            set(
                &mut c,
                0,
                0xffff << key::ETHERTYPE_SHIFT,
                u64::from(et) << key::ETHERTYPE_SHIFT,
            );
        }
        if let Some(mac) = m.src_mac {
            set(&mut c, 1, key::MAC_MASK, mac_word(mac));
        }
        if let Some(vid) = m.vlan {
            if vid > 0xfff {
                return Err(FilterError::VlanTooLarge { rule: 0, vid });
            }
            let tag = key::TAGGED | (u64::from(vid) << key::VID_SHIFT);
            set(&mut c, 1, key::TAGGED | (0xfff << key::VID_SHIFT), tag);
        }
        if let Some(p) = &m.src_ip {
            prefix(&mut c, 2, p, Side::Source)?;
        }
        if let Some(p) = &m.dst_ip {
            prefix(&mut c, 4, p, Side::Destination)?;
        }
        if let Some(proto) = m.proto {
            set(&mut c, 6, key::IS_IP | 0xff, key::IS_IP | u64::from(proto));
        }
        for (r, side) in [(m.src_port, Side::Source), (m.dst_port, Side::Destination)] {
            if let Some(range) = r {
                if range.lo > range.hi {
                    return Err(FilterError::EmptyPortRange {
                        rule: 0,
                        side,
                        range,
                    });
                }
                set(&mut c, 6, key::HAS_PORTS, key::HAS_PORTS);
            }
        }
        c.sport = m.src_port;
        c.dport = m.dst_port;
        if let Some((v, mask)) = m.tcp_flags {
            let f = key::IS_TCP | (u64::from(mask) << key::FLAGS_SHIFT);
            set(
                &mut c,
                6,
                f,
                key::IS_TCP | (u64::from(v) << key::FLAGS_SHIFT),
            );
        }
        if let Some(vni) = m.vni {
            if vni > 0x00ff_ffff {
                return Err(FilterError::VniTooLarge { rule: 0, vni });
            }
            set(
                &mut c,
                7,
                key::TUNNELLED | 0x00ff_ffff,
                key::TUNNELLED | u64::from(vni),
            );
        }
        Ok(c)
    }

    /// Whether a port range needs checking beyond a mask: neither one port nor all.
    pub(crate) fn ranged(&self) -> bool {
        let partial =
            |r: Option<PortRange>| r.is_some_and(|r| r.lo != r.hi && (r.lo, r.hi) != (0, 65535));
        partial(self.sport) || partial(self.dport)
    }

    /// Whether `k` matches, ranges compared (the check of a rule kept whole).
    pub(crate) fn matches(&self, k: &Words) -> bool {
        let masked = (0..WORDS).all(|i| k[i] & self.mask[i] == self.value[i]);
        let port = |shift: u32| (k[6] >> shift) as u16;
        masked
            && self
                .sport
                .is_none_or(|r| (r.lo..=r.hi).contains(&port(key::SPORT_SHIFT)))
            && self
                .dport
                .is_none_or(|r| (r.lo..=r.hi).contains(&port(key::DPORT_SHIFT)))
    }

    /// The (value, mask) entries that cover its port ranges, or `None` if there
    /// would be more than [`MAX_EXPANSION`].
    pub(crate) fn expand(&self) -> Option<Vec<(Words, Words)>> {
        let s = self.sport.map_or_else(|| vec![(0, 0)], cover);
        let d = self.dport.map_or_else(|| vec![(0, 0)], cover);
        if s.len() * d.len() > MAX_EXPANSION {
            return None;
        }
        let mut out = Vec::with_capacity(s.len() * d.len());
        for &(sv, sm) in &s {
            for &(dv, dm) in &d {
                let (mut v, mut m) = (self.value, self.mask);
                m[6] |= (u64::from(sm) << key::SPORT_SHIFT) | (u64::from(dm) << key::DPORT_SHIFT);
                v[6] |= (u64::from(sv) << key::SPORT_SHIFT) | (u64::from(dv) << key::DPORT_SHIFT);
                out.push((v, m));
            }
        }
        Some(out)
    }
}

fn mac_word(mac: [u8; 6]) -> u64 {
    mac.iter().fold(0, |a, &x| (a << 8) | u64::from(x))
}

/// The fewest (value, mask) prefixes of 16 bits whose union is `r`.
pub(crate) fn cover(r: PortRange) -> Vec<(u16, u16)> {
    let (mut lo, hi) = (u32::from(r.lo), u32::from(r.hi));
    let mut out = Vec::new();
    while lo <= hi {
        // The largest aligned block starting at `lo` that stays within `hi`.
        let mut size = if lo == 0 {
            1 << 16
        } else {
            1u32 << lo.trailing_zeros()
        };
        while lo + size - 1 > hi {
            size >>= 1;
        }
        out.push((lo as u16, !(size - 1) as u16));
        lo += size;
    }
    out
}

/// One tuple: the rules (or count lists) whose entries share a mask.
///
/// Open addressing with linear probing over slots of `1 + used` words: a tag (the
/// hash's high half beside the payload) then the masked values of the words the
/// mask uses, so a probe reads one cache line and compares the key only when the
/// tags agree.
#[derive(Debug, Clone)]
pub(crate) struct Tuple {
    pub level: Level,
    pub mask: Words,
    /// The words the mask touches (the first `n_used`), the only ones hashed
    /// and stored.
    used: [u8; WORDS],
    n_used: usize,
    /// The first rule with an entry here.
    pub best: u32,
    /// Slots: tag (hash high 32 bits, payload + 1; 0 when empty), key words.
    slots: Vec<u64>,
    slots_mask: usize,
    entries: usize,
}

#[inline]
fn mix(h: u64, w: u64) -> u64 {
    // A folded multiply (as foldhash and wyhash): full avalanche in two steps.
    let p = u128::from(h ^ w) * 0x9e37_79b9_7f4a_7c15_u128;
    (p as u64) ^ ((p >> 64) as u64)
}

impl Tuple {
    /// A table for `entries` (masked value, payload), each value given once.
    pub(crate) fn new(level: Level, mask: Words, entries: &[(Words, u32)], best: u32) -> Tuple {
        let slots = (entries.len() * 2).next_power_of_two().max(8);
        let mut used = [0u8; WORDS];
        let mut n_used = 0;
        for (i, m) in mask.iter().enumerate() {
            if *m != 0 {
                used[n_used] = i as u8;
                n_used += 1;
            }
        }
        let stride = n_used + 1;
        let mut t = Tuple {
            level,
            mask,
            used,
            n_used,
            best,
            slots: vec![0; slots * stride],
            slots_mask: slots - 1,
            entries: entries.len(),
        };
        for (k, v) in entries {
            let h = t.hash(k);
            let mut i = (h as usize) & t.slots_mask;
            while t.slots[i * stride] != 0 {
                i = (i + 1) & t.slots_mask;
            }
            t.slots[i * stride] = (h & 0xffff_ffff_0000_0000) | (u64::from(*v) + 1);
            for (j, &w) in t.used[..t.n_used].iter().enumerate() {
                t.slots[i * stride + 1 + j] = k[usize::from(w)];
            }
        }
        t
    }

    /// The hash of `k`'s masked words (`k` need not be masked).
    #[inline]
    pub(crate) fn hash(&self, k: &Words) -> u64 {
        let mut h = 0x243f_6a88_85a3_08d3_u64;
        for &i in &self.used[..self.n_used] {
            let i = usize::from(i);
            h = mix(h, k[i] & self.mask[i]);
        }
        h
    }

    /// Asks for the cache line `hash` starts probing at, ahead of [`Tuple::probe`].
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        let at = ((hash as usize) & self.slots_mask) * (self.n_used + 1);
        #[cfg(target_arch = "x86_64")]
        if let Some(p) = self.slots.get(at) {
            use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            // SAFETY: a prefetch is a hint: it reads nothing the program sees and
            // cannot fault; the pointer is to an element of `slots`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>((p as *const u64).cast::<i8>()) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = at;
    }

    /// The payload of the entry `k` falls in, if any (`hash` from [`Tuple::hash`]).
    #[inline]
    pub(crate) fn probe(&self, k: &Words, hash: u64) -> Option<u32> {
        let stride = self.n_used + 1;
        let mut i = (hash as usize) & self.slots_mask;
        loop {
            let slot = self.slots.get(i * stride..(i + 1) * stride)?;
            let tag = slot[0];
            if tag == 0 {
                return None;
            }
            if tag >> 32 == hash >> 32
                && self.used[..self.n_used]
                    .iter()
                    .zip(&slot[1..])
                    .all(|(&w, &v)| {
                        let w = usize::from(w);
                        k[w] & self.mask[w] == v
                    })
            {
                return Some((tag as u32).wrapping_sub(1));
            }
            i = (i + 1) & self.slots_mask;
        }
    }

    /// Number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries
    }
}
