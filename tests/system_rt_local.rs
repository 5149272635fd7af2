//! Tasks on the runtime's queue thread against Linux TCP over a TAP: the
//! stream's reads and writes go straight to the engine (`linerate_rt::local`),
//! and the kernel, an independent TCP, checks what it gets.
//!
//! The TAP (with a `virtio_net_hdr`) is moved into a namespace the test creates,
//! the kernel at 10.77.0.1/24 there, a [`Runtime`] of one queue at 10.77.0.2 on
//! this side. The kernel's client sends a stream and reads one back; the server
//! is a task on the queue thread that hashes what it reads and writes a
//! stream of its own, then the hash. Both directions are compared by SHA-256,
//! with the TAP's offloads on (TSO super-frames both ways) and off, each also
//! with the TAP batched through io_uring (`_io_uring`). The
//! namespace and the TAP go away when the test ends, also on failure.
//!
//! Needs root: `cargo test --features linerate/system-tests --test system_rt_local`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../crates/rt/tests/common/mod.rs"]
mod common;

use common::pattern;
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, local};
use linerate_testkit::netns;
use linerate_testkit::tap::{OUR_IP, OUR_MAC};
use linerate_toe::Config;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const UP: usize = 48 << 20;
const DOWN: usize = 32 << 20;
const PORT: u16 = 5100;

fn run(offloads: bool) {
    run_ring(offloads, None);
}

/// [`run`] with the TAP batched through an io_uring of depth `ring`: the
/// queue thread then sleeps on the ring's eventfd.
fn run_ring(offloads: bool, ring: Option<u32>) {
    if !netns::is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let (tap, ns) = linerate_testkit::tap::tap_in_namespace_ring("lrl", offloads, ring).unwrap();
    assert_eq!(tap.io_uring_active(), ring.is_some());
    let mut cfg = Config::new(OUR_MAC).with_ipv4(OUR_IP, 24);
    cfg.offloads = offloads;
    cfg.tcp.send_buffer = 4 << 20;
    cfg.tcp.recv_buffer = 4 << 20;
    let rt = Runtime::start(tap, RuntimeConfig::new(cfg)).unwrap();
    let wait = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let listener = wait
        .block_on(
            rt.handle()
                .spawn_on(0, || async {
                    TcpListener::bind_on(&local::handle().unwrap(), 0, PORT).await
                })
                .unwrap(),
        )
        .unwrap()
        .unwrap();
    // The server: reads the client's stream to its end on the queue thread,
    // then answers with its own stream and the hash of what it read.
    let server = rt
        .handle()
        .spawn_on(0, move || async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut h = Sha256::new();
            let (mut buf, mut total) = (vec![0u8; 100_000], 0usize);
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                h.update(&buf[..n]);
                total += n;
            }
            for chunk in pattern(2, DOWN).chunks(77_777) {
                s.write_all(chunk).await.unwrap();
            }
            s.write_all(&h.finalize()).await.unwrap();
            s.shutdown().await.unwrap();
            // Kept open until the kernel has read everything and closed.
            let mut b = [0u8; 1];
            let _ = local::timeout(Duration::from_secs(60), s.read(&mut b)).await;
            total
        })
        .unwrap();
    let client = ns
        .spawn(move || {
            let addr = SocketAddr::new(OUR_IP.into(), PORT);
            let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let up = pattern(1, UP);
            s.write_all(&up).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let mut back = Vec::with_capacity(DOWN + 32);
            s.read_to_end(&mut back).unwrap();
            (Sha256::digest(&up).to_vec(), back)
        })
        .unwrap();
    let (sent_hash, back) = client.join().unwrap().unwrap();
    let read = wait
        .block_on(async { tokio::time::timeout(Duration::from_secs(60), server).await })
        .expect("the server task finishes")
        .unwrap();
    assert_eq!(read, UP, "bytes the server read");
    assert_eq!(back.len(), DOWN + 32, "bytes the kernel read");
    assert_eq!(
        &back[DOWN..],
        &sent_hash[..],
        "the server hashed what was sent"
    );
    assert!(
        Sha256::digest(&back[..DOWN]) == Sha256::digest(pattern(2, DOWN)),
        "the kernel got the server's stream"
    );
    let st = rt.handle().stats(0).unwrap();
    assert!(
        st.direct_io > 0,
        "the task read and wrote the engine: {st:?}"
    );
    rt.shutdown().unwrap();
    drop(ns);
}

#[test]
fn a_task_on_the_queue_serves_the_kernel_offloads_on() {
    run(true);
}

#[test]
fn a_task_on_the_queue_serves_the_kernel_offloads_off() {
    run(false);
}

/// The queue thread sleeps on the ring's eventfd between rounds (with the
/// application's kick): a completion it slept through would stall the
/// transfer.
#[test]
fn a_task_on_the_queue_serves_the_kernel_offloads_on_io_uring() {
    run_ring(true, Some(256));
}

#[test]
fn a_task_on_the_queue_serves_the_kernel_offloads_off_io_uring() {
    run_ring(false, Some(256));
}
