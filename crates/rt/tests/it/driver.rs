//! The single-threaded driver: two engines on a memory pair, driven by hand in
//! one thread, with the engine's socket API.

use linerate_nic::{MemNic, Nic, NicCaps};
use linerate_rt::{Driver, RtError};
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, SocketHandle, TcpState};
use std::time::Duration;

fn clock(epoch: std::time::Instant) -> Instant {
    Instant::from_nanos(epoch.elapsed().as_nanos() as u64)
}

/// Polls both drivers until `done` or 20 s pass; sleeps on the readiness of the
/// one whose deadline is furthest when neither has work.
fn run(
    epoch: std::time::Instant,
    d: &mut [Driver<MemNic>; 2],
    mut done: impl FnMut(&mut [Driver<MemNic>; 2]) -> bool,
) -> bool {
    let limit = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < limit {
        let now = clock(epoch);
        let t0 = d[0].poll(now).unwrap();
        let t1 = d[1].poll(now).unwrap();
        if done(d) {
            return true;
        }
        let next = [t0, t1].into_iter().flatten().min();
        // A frame just sent wakes the other side's queue; wait on one of them
        // briefly (both are in this thread).
        d[0].wait(now, next, Duration::from_millis(1)).unwrap();
    }
    false
}

fn transfer(
    epoch: std::time::Instant,
    d: &mut [Driver<MemNic>; 2],
    from: SocketHandle,
    to: SocketHandle,
    data: &[u8],
) {
    let (mut sent, mut got) = (0, Vec::with_capacity(data.len()));
    let mut buf = vec![0u8; 32 * 1024];
    let ok = run(epoch, d, |d| {
        if sent < data.len()
            && let Ok(n) = d[0].engine_mut().tcp_send(from, &data[sent..])
        {
            sent += n;
        }
        while let Ok(n) = d[1].engine_mut().tcp_recv(to, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got.len() == data.len()
    });
    assert!(ok, "transfer stalled at {} of {}", got.len(), data.len());
    assert!(got == data, "bytes differ");
}

#[test]
fn two_drivers_in_one_thread() {
    let epoch = std::time::Instant::now();
    let (a, b) = MemNic::pair(NicCaps::full(), NicCaps::full());
    let mut d = [
        Driver::new(Engine::new(Sim::host_config(1), 1), a, 0).unwrap(),
        Driver::new(Engine::new(Sim::host_config(2), 2), b, 0).unwrap(),
    ];
    let listener = d[1].engine_mut().tcp_listen(80).unwrap();
    let remote = "10.0.0.2:80".parse().unwrap();
    let client = d[0].engine_mut().tcp_connect(clock(epoch), remote).unwrap();
    let mut server = None;
    assert!(run(epoch, &mut d, |d| {
        server = server.or_else(|| d[1].engine_mut().tcp_accept(listener).ok());
        server.is_some() && d[0].engine().tcp_state(client) == Ok(TcpState::Established)
    }));
    let server = server.unwrap();

    // 2 MiB, then 2 MiB more: once the pools are warm, the second allocates
    // (almost) no buffers.
    let data: Vec<u8> = (0..2 << 20)
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    transfer(epoch, &mut d, client, server, &data);
    let warm = d[0].nic().pool().stats().allocated + d[1].nic().pool().stats().allocated;
    transfer(epoch, &mut d, client, server, &data);
    let after = d[0].nic().pool().stats().allocated + d[1].nic().pool().stats().allocated;
    assert!(
        after - warm <= 16,
        "buffers allocated on a warm path: {}",
        after - warm
    );
    assert!(d[0].stats().tx_frames > 0 && d[1].stats().rx_frames > 0);
    assert_eq!(d[0].stats().tx_refused, 0);

    // Graceful close: the server reads EOF, closes too; the client ends in
    // TIME-WAIT, the server's connection is gone.
    d[0].engine_mut().tcp_close(client).unwrap();
    let mut buf = [0u8; 16];
    assert!(run(epoch, &mut d, |d| d[1]
        .engine_mut()
        .tcp_recv(server, &mut buf)
        == Ok(0)));
    d[1].engine_mut().tcp_close(server).unwrap();
    assert!(run(epoch, &mut d, |d| d[1]
        .engine()
        .tcp_state(server)
        .is_err()));
}

#[test]
fn offloads_the_nic_cannot_finish_are_refused() {
    let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let engine = Engine::new(Sim::host_config(1), 1);
    assert!(engine.config().offloads);
    assert!(matches!(Driver::new(engine, a, 0), Err(RtError::Offloads)));
    let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let mut cfg = Sim::host_config(1);
    cfg.offloads = false;
    assert!(matches!(
        Driver::new(Engine::new(cfg.clone(), 1), a, 1),
        Err(RtError::NoQueue {
            queue: 1,
            queues: 1
        })
    ));
    let (a, _b) = MemNic::pair(NicCaps::plain(), NicCaps::plain());
    let d = Driver::new(Engine::new(cfg, 1), a, 0).unwrap();
    assert_eq!(d.queue(), 0);
    assert!(d.nic().queues() == 1);
}
