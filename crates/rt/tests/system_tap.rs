//! Linux TCP against the linerate engine over a TAP interface (docs/testing.md:
//! "Linux TCP against the engine").
//!
//! Each test makes a [`TapHost`]: a TAP (with a virtio_net_hdr) moved into a
//! network namespace it creates, the kernel at 10.77.0.1/24 on it, and a linerate
//! engine at 10.77.0.2/24 on this side, driven in a loop on the test thread
//! (`handle_frames` keeps large payloads in their buffers). The kernel's sockets
//! run on a thread that has entered the namespace. The namespace and the TAP go
//! away when the host drops, also on failure.
//!
//! * bulk transfers both ways (a kernel client to a linerate server, a linerate
//!   client to a kernel server), compared by SHA-256, with the TAP's offloads on
//!   (the kernel hands 64 KiB TSO super-frames to the engine, which takes each as
//!   the segments it holds, and takes the engine's super-segments with partial
//!   checksums as GSO frames) and off (`TUNSETOFFLOAD 0`: MTU-sized frames with
//!   full checksums both ways);
//! * refused (`ECONNREFUSED`), reset (`ECONNRESET`) and graceful close (EOF) as the
//!   kernel sees them, and refused as linerate sees it.
//!
//! Size: 256 MiB per transfer (`LINERATE_BULK_MIB` changes it). Measured at the
//! test profile's opt-level 1 on two shared cores: 0.3 to 0.8 s per transfer with
//! offloads on, 0.8 s (kernel to linerate) and 4.5 s (linerate to kernel, one
//! 1448-byte write per segment) with them off.
//!
//! Needs root: `cargo test -p linerate-rt --features system-tests --test system_tap`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_testkit::netns;
use linerate_testkit::tap::{KERNEL_IP, OUR_IP, TapHost};
use linerate_toe::{ConnectionError, RecvError, SendError, TcpState};
use sha2::{Digest, Sha256};
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Bytes per bulk transfer: 256 MiB, or `LINERATE_BULK_MIB` MiB.
fn bulk_len() -> usize {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(256)
        << 20
}

/// Deterministic data, produced in chunks so 256 MiB never sits in memory.
struct Pattern {
    x: u64,
    left: usize,
}

impl Pattern {
    fn new(seed: u64, len: usize) -> Pattern {
        Pattern {
            x: seed | 1,
            left: len,
        }
    }

    /// Fills `buf` with the next bytes; returns how many (0 at the end).
    fn fill(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.left) / 8 * 8;
        let n = if n == 0 { buf.len().min(self.left) } else { n };
        for chunk in buf[..n].chunks_mut(8) {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            let b = self.x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        self.left -= n;
        n
    }

    /// SHA-256 of the whole pattern.
    fn digest(seed: u64, len: usize) -> Vec<u8> {
        let mut p = Pattern::new(seed, len);
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = p.fill(&mut buf);
            if n == 0 {
                return h.finalize().to_vec();
            }
            h.update(&buf[..n]);
        }
    }
}

/// The TAP host, with test-style failure.
fn host(offloads: bool) -> TapHost {
    assert!(netns::is_root(), "system tests need root");
    TapHost::new("lrte", offloads).unwrap()
}

/// Pumps until `done`; panics on timeout.
fn pump_until(
    h: &mut TapHost,
    limit: Duration,
    what: &str,
    done: impl FnMut(&mut TapHost) -> bool,
) {
    h.pump_until(limit, what, done).unwrap();
}

/// Kernel client to a linerate server: the kernel writes `len` bytes and closes;
/// the engine reads to the end and compares digests.
fn kernel_to_linerate(offloads: bool) {
    let len = bulk_len();
    let mut h = host(offloads);
    let l = h.engine_mut().tcp_listen(5001).unwrap();
    let start = std::time::Instant::now();
    let client =
        h.ns.spawn(move || {
            let mut s = TcpStream::connect((OUR_IP, 5001)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut p = Pattern::new(1, len);
            let mut buf = vec![0u8; 256 << 10];
            loop {
                let n = p.fill(&mut buf);
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
            s.shutdown(Shutdown::Write).unwrap();
            // Wait for the server's close: EOF.
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            rest.len()
        })
        .unwrap();
    let s = h.accept(l).unwrap();
    let mut hasher = Sha256::new();
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 << 10];
    let mut eof = false;
    pump_until(
        &mut h,
        Duration::from_secs(300),
        "bulk receive",
        |h: &mut TapHost| {
            loop {
                match h.engine_mut().tcp_recv(s, &mut buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => {
                        hasher.update(&buf[..n]);
                        got += n;
                    }
                    Err(RecvError::WouldBlock) => break,
                    Err(e) => panic!("recv after {got} bytes: {e}"),
                }
            }
            eof
        },
    );
    let secs = start.elapsed().as_secs_f64();
    assert_eq!(got, len);
    assert_eq!(hasher.finalize().to_vec(), Pattern::digest(1, len));
    h.engine_mut().tcp_close(s).unwrap();
    pump_until(&mut h, Duration::from_secs(10), "kernel sees EOF", |_| {
        client.is_finished()
    });
    assert_eq!(client.join().unwrap().unwrap(), 0);
    eprintln!(
        "kernel -> linerate, offloads {offloads}: {len} bytes in {secs:.2} s, {:.2} Gbit/s; {:?}",
        len as f64 * 8.0 / secs / 1e9,
        h.engine().counters().tcp_in_segs
    );
    assert_eq!(h.engine().counters().tcp_in_csum_errors, 0);
    // With offloads on the kernel hands over TSO super-frames; off, none.
    assert_eq!(
        h.rx_gso() > 0,
        offloads,
        "{} GSO frames received",
        h.rx_gso()
    );
    // Super-frames are kept in their buffers until read (`tcp::recvbuf`);
    // MTU-sized ones are copied.
    let adopted = h.engine().counters().tcp_rx_adopted;
    assert_eq!(
        adopted > 0,
        offloads,
        "{adopted} segments kept in their frames"
    );
}

/// Linerate client to a kernel server: the engine writes `len` bytes and closes;
/// the kernel reads to EOF and returns the digest.
fn linerate_to_kernel(offloads: bool) {
    let len = bulk_len();
    let mut h = host(offloads);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server =
        h.ns.spawn(move || {
            let l = TcpListener::bind((KERNEL_IP, 5002)).unwrap();
            ready_tx.send(()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 256 << 10];
            let mut got = 0usize;
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                got += n;
            }
            (got, hasher.finalize().to_vec())
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let start = std::time::Instant::now();
    let now = h.now();
    let c = h
        .engine_mut()
        .tcp_connect(now, SocketAddr::from((KERNEL_IP, 5002)))
        .unwrap();
    let mut p = Pattern::new(2, len);
    let mut buf = vec![0u8; 256 << 10];
    let (mut off, mut end) = (0, 0);
    let mut shut = false;
    pump_until(
        &mut h,
        Duration::from_secs(300),
        "bulk send",
        |h: &mut TapHost| {
            while !shut {
                if off == end {
                    end = p.fill(&mut buf);
                    off = 0;
                    if end == 0 {
                        h.engine_mut().tcp_shutdown(c).unwrap();
                        shut = true;
                        break;
                    }
                }
                match h.engine_mut().tcp_send(c, &buf[off..end]) {
                    Ok(n) => off += n,
                    Err(SendError::WouldBlock) => break,
                    Err(e) => panic!("send: {e}"),
                }
            }
            server.is_finished()
        },
    );
    let secs = start.elapsed().as_secs_f64();
    let (got, digest) = server.join().unwrap().unwrap();
    assert_eq!(got, len);
    assert_eq!(digest, Pattern::digest(2, len));
    eprintln!(
        "linerate -> kernel, offloads {offloads}: {len} bytes in {secs:.2} s, {:.2} Gbit/s; {} segments out, {} retransmitted",
        len as f64 * 8.0 / secs / 1e9,
        h.engine().counters().tcp_out_segs,
        h.engine().counters().tcp_retrans_segs
    );
    // With offloads on the engine's super-segments went to the kernel as GSO frames.
    assert_eq!(h.tx_gso() > 0, offloads, "{} GSO frames sent", h.tx_gso());
    // The kernel's FIN follows: the connection winds down.
    pump_until(
        &mut h,
        Duration::from_secs(10),
        "close",
        |h: &mut TapHost| {
            matches!(
                h.engine().tcp_state(c),
                Ok(TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed)
            )
        },
    );
}

#[test]
fn kernel_client_to_linerate_server_offloads_on() {
    kernel_to_linerate(true);
}

#[test]
fn kernel_client_to_linerate_server_offloads_off() {
    kernel_to_linerate(false);
}

#[test]
fn linerate_client_to_kernel_server_offloads_on() {
    linerate_to_kernel(true);
}

#[test]
fn linerate_client_to_kernel_server_offloads_off() {
    linerate_to_kernel(false);
}

#[test]
fn kernel_sees_refused_reset_and_eof() {
    let mut h = host(true);
    // Refused: nobody listens on 6000; the engine answers the SYN with RST.
    let refused =
        h.ns.spawn(|| TcpStream::connect((OUR_IP, 6000)).map(|_| ()))
            .unwrap();
    pump_until(&mut h, Duration::from_secs(10), "refused", |_| {
        refused.is_finished()
    });
    let e = refused.join().unwrap().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");

    // Reset: the engine accepts, then aborts.
    let l = h.engine_mut().tcp_listen(6001).unwrap();
    let reset =
        h.ns.spawn(|| {
            // The RST may beat the connecting thread back from connect(2) (the
            // socket is already reset when it wakes): then connect says it.
            let mut s = TcpStream::connect((OUR_IP, 6001))?;
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s.read(&mut [0u8; 16])
        })
        .unwrap();
    let s = h.accept(l).unwrap();
    h.engine_mut().tcp_abort(s).unwrap();
    pump_until(&mut h, Duration::from_secs(10), "reset", |_| {
        reset.is_finished()
    });
    let e = reset.join().unwrap().unwrap().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");

    // Graceful close: the engine sends a line and closes; the kernel reads it, then EOF.
    let close =
        h.ns.spawn(|| {
            let mut s = TcpStream::connect((OUR_IP, 6001)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).map(|_| all)
        })
        .unwrap();
    let s = h.accept(l).unwrap();
    assert_eq!(h.engine_mut().tcp_send(s, b"bye\n"), Ok(4));
    h.engine_mut().tcp_close(s).unwrap();
    pump_until(&mut h, Duration::from_secs(10), "EOF", |_| {
        close.is_finished()
    });
    assert_eq!(close.join().unwrap().unwrap().unwrap(), b"bye\n");

    // Refused as linerate sees it: the kernel answers a SYN to a closed port with RST.
    let now = h.now();
    let c = h
        .engine_mut()
        .tcp_connect(now, SocketAddr::from((KERNEL_IP, 6002)))
        .unwrap();
    pump_until(
        &mut h,
        Duration::from_secs(10),
        "refused by the kernel",
        |h: &mut TapHost| h.engine_mut().tcp_readiness(c).unwrap().error.is_some(),
    );
    assert_eq!(
        h.engine_mut().tcp_readiness(c).unwrap().error,
        Some(ConnectionError::Refused)
    );
    assert!(h.engine().counters().tcp_out_rsts >= 2);
}
