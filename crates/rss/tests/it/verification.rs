//! Microsoft's published Toeplitz verification values (IPv4 and IPv6 tables of
//! "Verifying the RSS Hash Calculation"; the data files under `tests/data` say where
//! they come from), checked on every hash path this CPU has and on the bitwise
//! reference.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::IpAddr;

use linerate_rss::toeplitz::{ALL_PATHS, bitwise};
use linerate_rss::{HashInput, RssKey, Toeplitz};

struct Row {
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    l3: u32,
    l4: u32,
}

fn rows(text: &str) -> Vec<Row> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split(',').map(str::trim).collect();
            assert_eq!(f.len(), 7, "row {l}");
            let hex = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            Row {
                src: f[1].parse().unwrap(),
                sport: f[2].parse().unwrap(),
                dst: f[3].parse().unwrap(),
                dport: f[4].parse().unwrap(),
                l3: hex(f[5]),
                l4: hex(f[6]),
            }
        })
        .collect()
}

/// (address-only input, TCP input) of a row.
fn inputs(r: &Row) -> (HashInput, HashInput) {
    match (r.src, r.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => (
            HashInput::ipv4(s.octets(), d.octets()),
            HashInput::tcp_ipv4(s.octets(), d.octets(), r.sport, r.dport),
        ),
        (IpAddr::V6(s), IpAddr::V6(d)) => (
            HashInput::ipv6(s.octets(), d.octets()),
            HashInput::tcp_ipv6(s.octets(), d.octets(), r.sport, r.dport),
        ),
        _ => panic!("mixed families"),
    }
}

fn paths() -> Vec<Toeplitz> {
    let mut v: Vec<Toeplitz> = ALL_PATHS
        .into_iter()
        .filter_map(|p| match Toeplitz::with_path(&RssKey::MICROSOFT, p) {
            Ok(t) => Some(t),
            Err(_) => {
                eprintln!("note: path {p:?} is not available on this CPU");
                None
            }
        })
        .collect();
    v.push(Toeplitz::new(&RssKey::MICROSOFT));
    v
}

fn check(file: &str, expect_rows: usize) {
    let rows = rows(file);
    assert_eq!(rows.len(), expect_rows);
    let key = RssKey::MICROSOFT;
    for r in &rows {
        let (l3, l4) = inputs(r);
        assert_eq!(bitwise(key.as_bytes(), l3.as_bytes()), r.l3, "bitwise l3");
        assert_eq!(bitwise(key.as_bytes(), l4.as_bytes()), r.l4, "bitwise l4");
        // UDP uses the same input bytes as TCP.
        let udp = match (r.src, r.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                HashInput::udp_ipv4(s.octets(), d.octets(), r.sport, r.dport)
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                HashInput::udp_ipv6(s.octets(), d.octets(), r.sport, r.dport)
            }
            _ => unreachable!(),
        };
        for t in paths() {
            assert_eq!(
                t.hash(&l3),
                r.l3,
                "{:?} l3 {} -> {}",
                t.path(),
                r.src,
                r.dst
            );
            assert_eq!(
                t.hash(&l4),
                r.l4,
                "{:?} l4 {} -> {}",
                t.path(),
                r.src,
                r.dst
            );
            assert_eq!(t.hash(&udp), r.l4, "{:?} udp", t.path());
            assert_eq!(
                t.hash_bytes(l4.as_bytes()),
                Ok(r.l4),
                "{:?} bytes",
                t.path()
            );
        }
    }
}

#[test]
fn microsoft_ipv4() {
    check(include_str!("../data/rss_vectors_ipv4.txt"), 5);
}

#[test]
fn microsoft_ipv6() {
    check(include_str!("../data/rss_vectors_ipv6.txt"), 3);
}
