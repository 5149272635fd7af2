//! Spread: 10,000 random flows over 8 queues put every queue within 15 % of an even
//! share, for each hash path and both built-in keys (a count, not a timing).

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::Rng;
use linerate_rss::{
    FlowTuple, HashConfig, IndirectionTable, RssKey, Steering, Toeplitz, Transport,
    toeplitz::ALL_PATHS,
};

fn check(s: &Steering, flows: &[FlowTuple], what: &str) {
    let queues = usize::from(s.queues());
    let mut counts = vec![0usize; queues];
    for f in flows {
        counts[usize::from(s.rx_queue(f))] += 1;
    }
    let even = flows.len() as f64 / queues as f64;
    for (q, &c) in counts.iter().enumerate() {
        let dev = (c as f64 - even).abs() / even;
        assert!(
            dev <= 0.15,
            "{what}: queue {q} has {c}, even is {even}: {counts:?}"
        );
    }
}

#[test]
fn ten_thousand_flows_over_eight_queues() {
    let mut r = Rng(2024);
    let v4: Vec<FlowTuple> = (0..10_000)
        .map(|i| {
            let t = if i % 2 == 0 {
                Transport::Tcp
            } else {
                Transport::Udp
            };
            FlowTuple::v4(
                t,
                Ipv4Addr::from(r.next() as u32),
                r.port(),
                Ipv4Addr::from(r.next() as u32),
                r.port(),
            )
        })
        .collect();
    let v6: Vec<FlowTuple> = (0..10_000)
        .map(|_| {
            FlowTuple::tcp6(
                Ipv6Addr::from(r.bytes::<16>()),
                r.port(),
                Ipv6Addr::from(r.bytes::<16>()),
                r.port(),
            )
        })
        .collect();
    // Clients of one server: only the client address and port vary.
    let server: Vec<FlowTuple> = (0..10_000)
        .map(|_| {
            FlowTuple::tcp4(
                Ipv4Addr::from(r.next() as u32),
                r.port(),
                Ipv4Addr::new(192, 0, 2, 80),
                443,
            )
        })
        .collect();
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        for path in ALL_PATHS {
            let Ok(hasher) = Toeplitz::with_path(&key, path) else {
                continue;
            };
            let s = Steering::with_hasher(
                hasher,
                IndirectionTable::new(8).unwrap(),
                HashConfig::default(),
            );
            check(&s, &v4, &format!("{key:?} {path:?} v4"));
            check(&s, &v6, &format!("{key:?} {path:?} v6"));
            check(&s, &server, &format!("{key:?} {path:?} one server"));
        }
    }
}
