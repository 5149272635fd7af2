//! The 4-tuple table: connection (or TIME-WAIT record) by local and remote
//! address. IPv4 4-tuples, nearly all of them, are packed into one `u128` key,
//! so an entry is 24 bytes instead of 72 and hashing one takes two multiplies
//! instead of eight (every segment received looks one up, and with many
//! connections the entry is usually a cache miss); others keep the full
//! addresses. The interface is the map's own.

use super::flow_hash::FlowHash;
use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};

/// A 4-tuple: local address, remote address.
pub(super) type Tuple = (SocketAddr, SocketAddr);

/// 4-tuple to table value.
#[derive(Debug, Clone)]
pub(super) struct TupleTable {
    v4: HashMap<u128, usize, FlowHash>,
    other: HashMap<Tuple, usize, FlowHash>,
}

/// The packed key of an IPv4 4-tuple: addresses in the high half, ports in
/// the low one.
fn pack(k: &Tuple) -> Option<u128> {
    match k {
        (SocketAddr::V4(l), SocketAddr::V4(r)) => Some(pack_v4(l, r)),
        _ => None,
    }
}

/// The packed key of local `l`, remote `r`.
#[inline]
fn pack_v4(l: &SocketAddrV4, r: &SocketAddrV4) -> u128 {
    (u128::from(l.ip().to_bits()) << 96)
        | (u128::from(r.ip().to_bits()) << 64)
        | (u128::from(l.port()) << 16)
        | u128::from(r.port())
}

impl TupleTable {
    /// Empty, hashing with `h`.
    pub fn with_hasher(h: FlowHash) -> TupleTable {
        TupleTable {
            v4: HashMap::with_hasher(h),
            other: HashMap::with_hasher(h),
        }
    }

    pub fn get(&self, k: &Tuple) -> Option<&usize> {
        match pack(k) {
            Some(p) => self.v4.get(&p),
            None => self.other.get(k),
        }
    }

    /// [`TupleTable::get`] of an IPv4 4-tuple, without making the
    /// `SocketAddr` pair (every IPv4 segment received looks one up).
    #[inline]
    pub fn get_v4(&self, local: SocketAddrV4, remote: SocketAddrV4) -> Option<usize> {
        self.v4.get(&pack_v4(&local, &remote)).copied()
    }

    pub fn contains_key(&self, k: &Tuple) -> bool {
        self.get(k).is_some()
    }

    pub fn insert(&mut self, k: Tuple, v: usize) -> Option<usize> {
        match pack(&k) {
            Some(p) => self.v4.insert(p, v),
            None => self.other.insert(k, v),
        }
    }

    pub fn remove(&mut self, k: &Tuple) -> Option<usize> {
        match pack(k) {
            Some(p) => self.v4.remove(&p),
            None => self.other.remove(k),
        }
    }

    pub fn len(&self) -> usize {
        self.v4.len() + self.other.len()
    }

    pub fn capacity(&self) -> usize {
        self.v4.capacity() + self.other.capacity()
    }

    /// The (capacity, entry bytes) of each part, for memory accounting.
    pub fn parts(&self) -> [(usize, usize); 2] {
        [
            (self.v4.capacity(), size_of::<(u128, usize)>()),
            (self.other.capacity(), size_of::<(Tuple, usize)>()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Against a plain map of full 4-tuples: IPv4 and IPv6 tuples, ports and
    /// addresses that differ in one part only, inserted, replaced, removed.
    #[test]
    fn behaves_as_a_map_of_full_tuples() {
        let mut rng = Rng::new(11);
        let mut t = TupleTable::with_hasher(FlowHash::new(&mut rng));
        let mut model: HashMap<Tuple, usize> = HashMap::new();
        let addrs: Vec<SocketAddr> = [
            "10.0.0.1:80",
            "10.0.0.1:81",
            "10.0.0.2:80",
            "0.0.0.80:1",
            "10.0.0.1:0",
            "[2001:db8::1]:80",
            "[2001:db8::1]:81",
            "[::ffff:10.0.0.1]:80",
        ]
        .iter()
        .map(|s| s.parse().unwrap_or_else(|_| unreachable!()))
        .collect();
        for i in 0..5_000 {
            let pick = |rng: &mut Rng| addrs[rng.below(addrs.len() as u64) as usize];
            let k = (pick(&mut rng), pick(&mut rng));
            if rng.chance(0.3) {
                assert_eq!(t.remove(&k), model.remove(&k));
            } else {
                assert_eq!(t.insert(k, i), model.insert(k, i));
            }
            let q = (pick(&mut rng), pick(&mut rng));
            assert_eq!(t.get(&q), model.get(&q));
            if let (SocketAddr::V4(l), SocketAddr::V4(r)) = q {
                assert_eq!(t.get_v4(l, r), model.get(&q).copied());
            }
            assert_eq!(t.len(), model.len());
        }
    }
}
