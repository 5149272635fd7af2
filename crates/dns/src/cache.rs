//! The answer cache: a bounded map from (name, type) to addresses or a
//! negative answer, each until its TTL runs out.
//!
//! Positive answers live for the smallest TTL of the records used (the
//! CNAMEs followed and the addresses), negative ones for the SOA's TTL or
//! its MINIMUM, whichever is smaller (RFC 2308 section 5); negative answers
//! without an SOA are not cached (the same section). When the cache is
//! full, expired entries go first, then the one that would expire soonest.
//! Expiry is checked on lookup: no timer.

use crate::message::RecordType;
use crate::name::Name;
use crate::time::Instant;
use std::collections::HashMap;
use std::net::IpAddr;

/// What is cached for one name and type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cached {
    /// The addresses (non-empty).
    Addrs(Vec<IpAddr>),
    /// The name does not exist.
    NxDomain,
    /// The name exists without records of the type.
    NoData,
}

#[derive(Debug)]
struct Entry {
    value: Cached,
    expires: Instant,
}

#[derive(Debug)]
pub(crate) struct Cache {
    cap: usize,
    map: HashMap<(Name, RecordType), Entry>,
}

impl Cache {
    pub(crate) fn new(cap: usize) -> Cache {
        Cache {
            cap,
            map: HashMap::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// The live entry for `key` and when it expires; an expired one is
    /// removed.
    pub(crate) fn get(
        &mut self,
        now: Instant,
        key: &(Name, RecordType),
    ) -> Option<(Cached, Instant)> {
        let e = self.map.get(key)?;
        if e.expires <= now {
            self.map.remove(key);
            return None;
        }
        Some((e.value.clone(), e.expires))
    }

    /// Caches `value` for `key` until `expires`; nothing if that is not
    /// after `now` or the cache holds nothing.
    pub(crate) fn insert(
        &mut self,
        now: Instant,
        key: (Name, RecordType),
        value: Cached,
        expires: Instant,
    ) {
        if self.cap == 0 || expires <= now {
            return;
        }
        if self.map.len() >= self.cap && !self.map.contains_key(&key) {
            self.map.retain(|_, e| e.expires > now);
            if self.map.len() >= self.cap
                && let Some(k) = self
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.expires)
                    .map(|(k, _)| k.clone())
            {
                self.map.remove(&k);
            }
        }
        self.map.insert(key, Entry { value, expires });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> (Name, RecordType) {
        (n.parse().unwrap(), RecordType::A)
    }

    #[test]
    fn bounded_and_expiring() {
        let mut c = Cache::new(2);
        let t = |ms| Instant::from_millis(ms);
        c.insert(t(0), key("a.test"), Cached::NxDomain, t(100));
        c.insert(t(0), key("b.test"), Cached::NoData, t(50));
        assert_eq!(c.len(), 2);
        // Full: the one expiring soonest (b) makes room.
        c.insert(t(0), key("c.test"), Cached::NoData, t(200));
        assert_eq!(c.len(), 2);
        assert!(c.get(t(1), &key("b.test")).is_none());
        assert_eq!(
            c.get(t(1), &key("A.TEST")),
            Some((Cached::NxDomain, t(100)))
        );
        // Expired on lookup.
        assert!(c.get(t(100), &key("a.test")).is_none());
        assert_eq!(c.len(), 1);
        // A zero TTL is not cached.
        c.insert(t(300), key("d.test"), Cached::NoData, t(300));
        assert!(c.get(t(300), &key("d.test")).is_none());
    }
}
