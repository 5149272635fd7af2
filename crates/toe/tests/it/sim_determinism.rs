//! The simulation is deterministic: the same engine seed and link seed give the
//! same run, frame for frame. A faulty 1 MiB transfer (loss, reordering,
//! duplication and corruption, as in tests/faults.rs) is run twice; every frame
//! the link hands to an engine is recorded with its virtual time and port
//! ([`Link::tap`](linerate_toe::sim::Link::tap)), hashed with SHA-256 together
//! with both engines' counters at the end, and the digests must be equal. A
//! different link seed must give a different trace (else the trace would not
//! depend on the faults and the comparison would prove little), and so must a
//! different engine seed (the initial sequence numbers and ports differ).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{faulty_link, pattern, recv_each, send_then_shut, server_addr};
use linerate_toe::Counters;
use linerate_toe::sim::{Delivery, LinkConfig, Sim};
use sha2::{Digest, Sha256};
use std::time::Duration;

const LEN: usize = 1 << 20;

/// What one run produced.
struct Run {
    deliveries: Vec<Delivery>,
    counters: [Counters; 2],
    digest: [u8; 32],
}

/// 1 MiB from engine 0 to engine 1 over a faulty link; the sender closes and the
/// run continues until the receiver has read everything and the end of stream.
fn run(engine_seed: u64, link_seed: u64, offloads: bool, v6: bool) -> Run {
    // The campaign's link with ten times the corruption.
    let link = LinkConfig {
        corrupt: 0.01,
        ..faulty_link(link_seed)
    };
    let mut sim = Sim::two_hosts(offloads, engine_seed, link);
    sim.link.tap();
    let server = server_addr(v6);
    let data = pattern(LEN, 9);
    let l = sim.engines[1].tcp_listen(server.port()).unwrap();
    let c = sim.engines[0].tcp_connect(sim.now, server).unwrap();
    let (mut s, mut sent, mut shut, mut got, mut eof) = (None, 0, false, 0, false);
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = sim.now + Duration::from_secs(60);
    let done = sim.run_until(deadline, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        send_then_shut(&mut sim.engines[0], c, &data, &mut sent, &mut shut)
            .unwrap_or_else(|e| panic!("send: {e}"));
        if let Some(s) = s {
            eof = recv_each(&mut sim.engines[1], s, &mut buf, |d| {
                assert_eq!(d, &data[got..got + d.len()]);
                got += d.len();
            })
            .unwrap_or_else(|e| panic!("recv: {e}"));
        }
        eof
    });
    assert!(done && got == LEN, "received {got} of {LEN}");
    let deliveries = sim.link.untap();
    let counters = [
        sim.engines[0].counters().clone(),
        sim.engines[1].counters().clone(),
    ];
    let mut h = Sha256::new();
    for d in &deliveries {
        h.update(d.at.as_nanos().to_le_bytes());
        h.update((d.port as u64).to_le_bytes());
        h.update((d.frame.len() as u64).to_le_bytes());
        h.update(&d.frame);
    }
    for c in &counters {
        h.update(format!("{c:?}").as_bytes());
    }
    Run {
        deliveries,
        counters,
        digest: h.finalize().into(),
    }
}

/// Where two traces first part, for the failure message.
fn first_difference(a: &[Delivery], b: &[Delivery]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!(
            "delivery {i} differs: {:?} port {} {} bytes vs {:?} port {} {} bytes",
            a[i].at,
            a[i].port,
            a[i].frame.len(),
            b[i].at,
            b[i].port,
            b[i].frame.len()
        ),
        None => format!("{} vs {} deliveries", a.len(), b.len()),
    }
}

fn same_seeds_same_trace(offloads: bool, v6: bool) {
    let a = run(3, 77, offloads, v6);
    let b = run(3, 77, offloads, v6);
    // The faults happened: frames were lost and resent, corruption was caught.
    let k = &a.counters[0];
    assert!(k.tcp_retrans_segs > 0, "{k:?}");
    assert!(a.deliveries.len() > LEN / 1500, "{}", a.deliveries.len());
    assert!(
        a.digest == b.digest,
        "same seeds, different runs: {}; counters equal: {}",
        first_difference(&a.deliveries, &b.deliveries),
        a.counters == b.counters
    );
    assert_eq!(a.deliveries, b.deliveries);
    // Another link seed: other faults, another trace.
    let c = run(3, 78, offloads, v6);
    assert!(a.digest != c.digest);
    assert!(a.deliveries != c.deliveries);
    // Another engine seed, same faults: other sequence numbers and ports.
    let d = run(4, 77, offloads, v6);
    assert!(a.digest != d.digest);
}

#[test]
fn offloads_off_ipv4() {
    same_seeds_same_trace(false, false);
}

#[test]
fn offloads_on_ipv6() {
    same_seeds_same_trace(true, true);
}
