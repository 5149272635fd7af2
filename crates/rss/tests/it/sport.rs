//! RSS-aware source ports: every port returned lands on the asked queue (both
//! directions), exhaustion is a typed error, release and reserve work, for IPv4 and
//! IPv6, several table sizes, and both built-in keys.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use common::Rng;
use linerate_rss::{
    ConfigError, FlowTuple, HashConfig, HashTypes, IndirectionTable, PortAllocator, PortError,
    RssKey, Steering,
};

fn steering(key: RssKey, size: usize, queues: u16) -> Arc<Steering> {
    Arc::new(Steering::new(
        &key,
        IndirectionTable::with_size(size, queues).unwrap(),
        HashConfig::default(),
    ))
}

#[test]
fn every_port_lands_on_the_asked_queue() {
    let mut r = Rng(9);
    for key in [RssKey::MICROSOFT, RssKey::SYMMETRIC] {
        for (size, queues) in [(128, 8), (512, 6), (64, 3), (1, 1)] {
            let s = steering(key, size, queues);
            let mut ports = PortAllocator::new(s.clone(), false, 10_000, 19_999).unwrap();
            let mut seen = HashSet::new();
            for i in 0..3000 {
                let queue = (i % usize::from(queues)) as u16;
                let mut flow = FlowTuple::tcp4(
                    Ipv4Addr::new(10, 0, 0, 1),
                    0,
                    Ipv4Addr::from(r.next() as u32),
                    r.port(),
                );
                let p = ports.allocate(&flow, queue).unwrap();
                assert!((10_000..=19_999).contains(&p));
                assert!(seen.insert(p), "port {p} handed out twice");
                flow.src_port = p;
                assert_eq!(s.tx_queue(&flow), queue, "{key:?} {size}");
                assert_eq!(s.rx_queue(&flow.reversed()), queue);
                if key.is_symmetric() {
                    assert_eq!(s.rx_queue(&flow), queue);
                }
            }
            assert_eq!(ports.free(), 10_000 - 3000);
        }
    }
}

#[test]
fn ipv6_and_udp() {
    let s = steering(RssKey::MICROSOFT, 128, 4);
    let mut ports = PortAllocator::new(s.clone(), true, 49152, 65535).unwrap();
    let mut r = Rng(10);
    for i in 0..1000 {
        let q = (i % 4) as u16;
        let mut flow = FlowTuple::udp6(
            Ipv6Addr::from(r.bytes::<16>()),
            0,
            Ipv6Addr::from(r.bytes::<16>()),
            53,
        );
        flow.src_port = ports.allocate(&flow, q).unwrap();
        assert_eq!(s.tx_queue(&flow), q);
    }
    let v4 = FlowTuple::tcp4(Ipv4Addr::LOCALHOST, 0, Ipv4Addr::LOCALHOST, 1);
    assert_eq!(ports.allocate(&v4, 0), Err(PortError::FamilyMismatch));
}

#[test]
fn exhaustion_is_a_typed_error() {
    let s = steering(RssKey::MICROSOFT, 128, 4);
    // A small range: 64 ports, about 16 per queue.
    let mut ports = PortAllocator::new(s.clone(), false, 40_000, 40_063).unwrap();
    let flow = FlowTuple::tcp4(
        Ipv4Addr::new(10, 0, 0, 1),
        0,
        Ipv4Addr::new(10, 0, 0, 2),
        80,
    );
    let mut got = Vec::new();
    loop {
        match ports.allocate(&flow, 1) {
            Ok(p) => got.push(p),
            Err(e) => {
                assert_eq!(e, PortError::Exhausted { queue: 1 });
                break;
            }
        }
    }
    // Exactly the ports of the range that land on queue 1 were handed out.
    let want: Vec<u16> = (40_000..=40_063)
        .filter(|&p| {
            let mut f = flow;
            f.src_port = p;
            s.tx_queue(&f) == 1
        })
        .collect();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, want);
    assert!(!want.is_empty());
    // Other queues still have ports; a released port comes back.
    assert!(ports.allocate(&flow, 0).is_ok());
    ports.release(got[0]).unwrap();
    assert_eq!(ports.allocate(&flow, 1), Ok(got[0]));
    assert_eq!(
        ports.allocate(&flow, 4),
        Err(PortError::QueueOutOfRange {
            queue: 4,
            queues: 4
        })
    );
}

#[test]
fn release_and_reserve() {
    let s = steering(RssKey::MICROSOFT, 128, 2);
    let mut ports = PortAllocator::new(s, false, 1000, 1999).unwrap();
    assert_eq!(ports.release(999), Err(PortError::NotInRange { port: 999 }));
    assert_eq!(
        ports.release(1500),
        Err(PortError::WrongState {
            port: 1500,
            in_use: false
        })
    );
    ports.reserve(1500).unwrap();
    assert!(ports.is_in_use(1500));
    assert_eq!(
        ports.reserve(1500),
        Err(PortError::WrongState {
            port: 1500,
            in_use: true
        })
    );
    let flow = FlowTuple::tcp4(Ipv4Addr::LOCALHOST, 0, Ipv4Addr::LOCALHOST, 80);
    for _ in 0..999 {
        let q = (ports.free() % 2) as u16;
        match ports.allocate(&flow, q) {
            Ok(p) => assert_ne!(p, 1500),
            Err(PortError::Exhausted { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    ports.release(1500).unwrap();
    assert!(!ports.is_in_use(1500));
}

#[test]
fn bad_ranges() {
    let s = steering(RssKey::MICROSOFT, 128, 2);
    assert_eq!(
        PortAllocator::new(s.clone(), false, 2000, 1999).err(),
        Some(ConfigError::PortRange {
            first: 2000,
            last: 1999
        })
    );
    assert!(PortAllocator::new(s.clone(), false, 0, 10).is_err());
    assert!(PortAllocator::new(s, false, 65535, 65535).is_ok());
}

#[test]
fn port_not_hashed_when_four_tuple_disabled() {
    let s = Arc::new(Steering::new(
        &RssKey::MICROSOFT,
        IndirectionTable::new(4).unwrap(),
        HashConfig {
            types: HashTypes::IPV4,
            ..HashConfig::default()
        },
    ));
    let mut ports = PortAllocator::new(s.clone(), false, 5000, 5099).unwrap();
    let flow = FlowTuple::tcp4(
        Ipv4Addr::new(10, 0, 0, 1),
        0,
        Ipv4Addr::new(10, 0, 0, 2),
        80,
    );
    let q = s.tx_queue(&flow);
    assert!(ports.allocate(&flow, q).is_ok());
    assert_eq!(
        ports.allocate(&flow, (q + 1) % 4),
        Err(PortError::Exhausted { queue: (q + 1) % 4 })
    );
}

#[test]
fn table_swap_is_followed() {
    let s = steering(RssKey::MICROSOFT, 128, 4);
    let mut ports = PortAllocator::new(s.clone(), false, 20_000, 29_999).unwrap();
    s.table()
        .store(IndirectionTable::with_size(512, 2).unwrap())
        .unwrap();
    let mut flow = FlowTuple::tcp4(
        Ipv4Addr::new(10, 0, 0, 1),
        0,
        Ipv4Addr::new(10, 0, 0, 2),
        80,
    );
    for q in [0u16, 1, 1, 0] {
        flow.src_port = ports.allocate(&flow, q).unwrap();
        assert_eq!(s.tx_queue(&flow), q);
    }
    // Queue 3 exists but the table no longer names it.
    assert_eq!(
        ports.allocate(&flow, 3),
        Err(PortError::Exhausted { queue: 3 })
    );
}
