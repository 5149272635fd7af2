//! RSS secret keys: 40 bytes (Microsoft RSS) or 52 bytes, with Microsoft's default
//! key and the symmetric `0x6d5a` key built in.
//!
//! Microsoft's "RSS Configuration" and "Verifying the RSS Hash Calculation" define
//! the 40-byte key and publish the default key used to verify implementations.
//! Some NICs (Intel i40e/ice, and DPDK users of `rte_thash`) take 52 bytes, which
//! covers hash inputs up to 48 bytes.
//!
//! A key whose bits repeat every 16 bits makes the hash *symmetric*: swapping the
//! source and destination addresses (a shift of 32 or 128 bits in the input) and the
//! ports (16 bits) leaves the result unchanged, so both directions of a connection
//! hash alike (Woo and Park, "Scalable TCP Session Monitoring with Symmetric
//! Receive-side Scaling", 2012). [`RssKey::SYMMETRIC`] is `0x6d5a` repeated.

use crate::error::ConfigError;

/// Length of a Microsoft RSS key.
pub const KEY_LEN_40: usize = 40;
/// Length of the longer key some NICs accept.
pub const KEY_LEN_52: usize = 52;

/// Microsoft's default (verification) key, 40 bytes.
const MICROSOFT: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

/// `0x6d5a` repeated to `N` bytes.
const fn symmetric<const N: usize>() -> [u8; N] {
    let mut k = [0u8; N];
    let mut i = 0;
    while i < N {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
}

/// Pads a key to the 52-byte storage.
const fn pad<const N: usize>(key: [u8; N]) -> [u8; KEY_LEN_52] {
    let mut k = [0u8; KEY_LEN_52];
    let mut i = 0;
    while i < N && i < KEY_LEN_52 {
        k[i] = key[i];
        i += 1;
    }
    k
}

/// A validated RSS key of 40 or 52 bytes.
///
/// ```
/// use linerate_rss::RssKey;
/// assert_eq!(RssKey::MICROSOFT.as_bytes()[..2], [0x6d, 0x5a]);
/// assert!(RssKey::SYMMETRIC.is_symmetric());
/// assert!(!RssKey::MICROSOFT.is_symmetric());
/// assert!(RssKey::new(&[0; 41]).is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RssKey {
    bytes: [u8; KEY_LEN_52],
    len: u8,
}

impl RssKey {
    /// Microsoft's default 40-byte key (the one its verification table uses, and
    /// many NICs' default): `6d5a56da255b0ec2...01fa`. It is not symmetric.
    pub const MICROSOFT: RssKey = RssKey {
        bytes: pad(MICROSOFT),
        len: KEY_LEN_40 as u8,
    };

    /// The symmetric 40-byte key: `0x6d5a` repeated 20 times.
    pub const SYMMETRIC: RssKey = RssKey {
        bytes: pad(symmetric::<KEY_LEN_40>()),
        len: KEY_LEN_40 as u8,
    };

    /// The symmetric 52-byte key: `0x6d5a` repeated 26 times.
    pub const SYMMETRIC_52: RssKey = RssKey {
        bytes: symmetric::<KEY_LEN_52>(),
        len: KEY_LEN_52 as u8,
    };

    /// A key from its bytes; 40 or 52 of them, else [`ConfigError::KeyLength`].
    pub fn new(bytes: &[u8]) -> Result<RssKey, ConfigError> {
        let len = bytes.len();
        if len != KEY_LEN_40 && len != KEY_LEN_52 {
            return Err(ConfigError::KeyLength { len });
        }
        let mut k = [0u8; KEY_LEN_52];
        for (d, s) in k.iter_mut().zip(bytes) {
            *d = *s;
        }
        Ok(RssKey {
            bytes: k,
            len: len as u8,
        })
    }

    /// The key's bytes (40 or 52).
    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// The key length in bytes (40 or 52).
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Always false: a key is never empty. (Here for the `len`/`is_empty` pair.)
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The longest hash input this key covers: 4 bytes less than the key (36 bytes
    /// for a 40-byte key: an IPv6 4-tuple; 48 for a 52-byte key).
    pub fn max_input_len(&self) -> usize {
        self.len() - 4
    }

    /// True if the key's bits repeat every 16 bits, so that swapping source and
    /// destination (addresses and ports) gives the same hash.
    pub fn is_symmetric(&self) -> bool {
        let b = self.as_bytes();
        b.iter().zip(b.iter().skip(2)).all(|(x, y)| x == y)
    }
}

impl Default for RssKey {
    /// Microsoft's default key.
    fn default() -> Self {
        RssKey::MICROSOFT
    }
}

impl core::fmt::Debug for RssKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RssKey(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths() {
        assert_eq!(RssKey::new(&[1; 40]).map(|k| k.len()), Ok(40));
        assert_eq!(RssKey::new(&[1; 52]).map(|k| k.len()), Ok(52));
        for len in [0, 39, 41, 51, 53, 64] {
            assert_eq!(
                RssKey::new(&vec![0; len]),
                Err(ConfigError::KeyLength { len })
            );
        }
    }

    #[test]
    fn builtin_keys() {
        assert_eq!(RssKey::MICROSOFT.as_bytes(), &MICROSOFT);
        assert_eq!(RssKey::SYMMETRIC.as_bytes().len(), 40);
        assert!(
            RssKey::SYMMETRIC
                .as_bytes()
                .chunks(2)
                .all(|c| c == [0x6d, 0x5a])
        );
        assert!(RssKey::SYMMETRIC_52.is_symmetric());
        assert_eq!(RssKey::SYMMETRIC_52.max_input_len(), 48);
        assert_eq!(
            format!("{:?}", RssKey::MICROSOFT),
            "RssKey(6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa)"
        );
    }
}
