//! The resolver's configuration, in the terms of resolv.conf(5).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The port DNS servers listen on.
pub const DNS_PORT: u16 = 53;

/// How a [`Resolver`](crate::Resolver) asks.
///
/// Each question is tried at most `attempts` times on every server, one
/// server after the other, each try waiting `timeout` for an answer
/// (glibc's order: all servers once, then all servers again); a server that
/// answers SERVFAIL, REFUSED, NOTIMP or FORMERR, or whose TCP connection
/// fails, is passed over at once for the next.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The servers, in order (resolv.conf's `nameserver` lines).
    pub servers: Vec<SocketAddr>,
    /// How long one try waits for an answer (`options timeout:`; 5 s).
    pub timeout: Duration,
    /// Tries per server (`options attempts:`; 2).
    pub attempts: u32,
    /// Each lookup starts at the next server in turn instead of the first
    /// (`options rotate`), spreading the load.
    pub rotate: bool,
    /// Entries the cache holds (positive and negative answers for one name
    /// and type each; 256). Zero turns the cache off.
    pub cache_size: usize,
    /// Longest a positive answer is cached, whatever its TTL (1 day).
    pub max_ttl: Duration,
    /// Longest a negative answer is cached (RFC 2308 section 5 suggests one
    /// to three hours; 1 hour).
    pub max_negative_ttl: Duration,
    /// CNAMEs followed from one name before giving up (8).
    pub max_cnames: u8,
    /// The UDP payload size advertised with EDNS0 (RFC 6891), `None` for no
    /// OPT record (512-byte answers). 1232 by default.
    pub edns_payload: Option<u16>,
}

/// Why a [`Config`] cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No server to ask.
    NoServers,
    /// `attempts` is zero.
    NoAttempts,
    /// An advertised payload below 512 bytes (RFC 6891 section 6.2.5).
    PayloadTooSmall(u16),
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConfigError::NoServers => f.write_str("no DNS server configured"),
            ConfigError::NoAttempts => f.write_str("attempts is zero"),
            ConfigError::PayloadTooSmall(p) => {
                write!(
                    f,
                    "an EDNS payload of {p} bytes is below the minimum of 512"
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// resolv.conf's defaults with `servers`.
    pub fn new(servers: Vec<SocketAddr>) -> Config {
        Config {
            servers,
            timeout: Duration::from_secs(5),
            attempts: 2,
            rotate: false,
            cache_size: 256,
            max_ttl: Duration::from_secs(86_400),
            max_negative_ttl: Duration::from_secs(3_600),
            max_cnames: 8,
            edns_payload: Some(crate::message::EDNS_PAYLOAD),
        }
    }

    /// Reads the resolv.conf(5) text `text`: `nameserver` lines (port 53),
    /// and `options timeout:N attempts:N rotate`. Other lines, and options
    /// this resolver does not have, are ignored, as the C library ignores
    /// what it does not know; so are addresses that do not parse. The
    /// limits the C library applies hold (timeout at most 30 s, attempts at
    /// most 5).
    pub fn from_resolv_conf(text: &str) -> Config {
        let mut cfg = Config::new(Vec::new());
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("nameserver") => {
                    // An IPv6 address may carry a zone (`fe80::1%eth0`),
                    // which a SocketAddr has no room for: such lines are skipped.
                    if let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) {
                        cfg.servers.push(SocketAddr::new(ip, DNS_PORT));
                    }
                }
                Some("options") => {
                    for opt in words {
                        let (key, value) = opt.split_once(':').unwrap_or((opt, ""));
                        let n = value.parse::<u32>().ok();
                        match (key, n) {
                            ("timeout", Some(n)) => {
                                cfg.timeout = Duration::from_secs(u64::from(n.clamp(1, 30)));
                            }
                            ("attempts", Some(n)) => cfg.attempts = n.clamp(1, 5),
                            ("rotate", _) => cfg.rotate = true,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        cfg
    }

    /// Checks the rules of [`ConfigError`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.servers.is_empty() {
            return Err(ConfigError::NoServers);
        }
        if self.attempts == 0 {
            return Err(ConfigError::NoAttempts);
        }
        if let Some(p) = self.edns_payload
            && p < 512
        {
            return Err(ConfigError::PayloadTooSmall(p));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf() {
        // As resolv.conf(5) describes the file.
        let cfg = Config::from_resolv_conf(
            "# comment\nsearch example.test\nnameserver 192.0.2.1\nnameserver 2001:db8::53\n\
             nameserver fe80::1%eth0\noptions ndots:2 timeout:3 attempts:9 rotate\n",
        );
        assert_eq!(
            cfg.servers,
            vec![
                "192.0.2.1:53".parse().unwrap(),
                "[2001:db8::53]:53".parse().unwrap()
            ]
        );
        assert_eq!(cfg.timeout, Duration::from_secs(3));
        assert_eq!(cfg.attempts, 5);
        assert!(cfg.rotate);
        assert_eq!(
            Config::from_resolv_conf("").validate(),
            Err(ConfigError::NoServers)
        );
    }
}
