//! ECN (RFC 3168) between linerate and the Linux kernel over a TAP: the kernel
//! in its namespace with `net.ipv4.tcp_ecn=1` (asks on connect, accepts when
//! asked) connects to linerate (default `EcnMode::Passive`) and linerate
//! (`EcnMode::On`) connects to the kernel. The kernel's `TCP_INFO` must show
//! `TCPI_OPT_ECN` and linerate's `TcpInfo::ecn` agree; 16 MiB go across
//! SHA-256 exact, TAP offloads on and off. A linerate client in passive mode
//! must leave the kernel without ECN.
//!
//! Needs root: `cargo test -p linerate-rt --features system-tests --test system_ecn`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_testkit::impair::tcp_info;
use linerate_testkit::netns;
use linerate_testkit::tap::{KERNEL_IP, OUR_IP, TapHost};
use linerate_toe::{EcnMode, RecvError, SendError, TcpState};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

const LEN: usize = 16 << 20;

/// Deterministic bytes: `len` of them from `seed`.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn host(offloads: bool, mode: EcnMode) -> TapHost {
    assert!(netns::is_root(), "system tests need root");
    let h = TapHost::with_config("lrec", offloads, |c| c.tcp.ecn = mode).unwrap();
    h.ns.exec("sysctl", &["-qw", "net.ipv4.tcp_ecn=1"]).unwrap();
    h
}

/// Kernel client to a linerate server: ECN negotiated at the kernel's asking.
fn kernel_to_linerate(offloads: bool) {
    let mut h = host(offloads, EcnMode::Passive);
    let l = h.engine_mut().tcp_listen(5001).unwrap();
    let client =
        h.ns.spawn(move || {
            let mut s = TcpStream::connect((OUR_IP, 5001)).unwrap();
            s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
            let ecn = tcp_info(&s).unwrap().ecn();
            s.write_all(&pattern(1, LEN)).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            ecn
        })
        .unwrap();
    let s = h.accept(l).unwrap();
    assert!(h.engine().tcp_info(s).unwrap().ecn, "linerate: ECN on");
    let mut hasher = Sha256::new();
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 << 10];
    let mut eof = false;
    h.pump_until(Duration::from_secs(120), "receive", |h| {
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
    })
    .unwrap();
    assert_eq!(got, LEN);
    assert_eq!(
        hasher.finalize().to_vec(),
        Sha256::digest(pattern(1, LEN)).to_vec()
    );
    h.engine_mut().tcp_close(s).unwrap();
    h.pump_until(Duration::from_secs(10), "kernel sees EOF", |_| {
        client.is_finished()
    })
    .unwrap();
    assert!(client.join().unwrap().unwrap(), "kernel: TCPI_OPT_ECN");
    assert_eq!(h.engine().counters().tcp_ecn_negotiated, 1);
}

/// Linerate client (in `mode`) to a kernel server; returns whether the kernel
/// saw ECN negotiated, after checking the transfer and linerate's view.
fn linerate_to_kernel(offloads: bool, mode: EcnMode) -> bool {
    let mut h = host(offloads, mode);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server =
        h.ns.spawn(move || {
            let l = TcpListener::bind((KERNEL_IP, 5002)).unwrap();
            ready_tx.send(()).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let ecn = tcp_info(&s).unwrap().ecn();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut all = Vec::with_capacity(LEN);
            s.read_to_end(&mut all).unwrap();
            (ecn, Sha256::digest(&all).to_vec(), all.len())
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let now = h.now();
    let c = h
        .engine_mut()
        .tcp_connect(now, SocketAddr::from((KERNEL_IP, 5002)))
        .unwrap();
    let data = pattern(2, LEN);
    let mut off = 0;
    let mut shut = false;
    h.pump_until(Duration::from_secs(120), "send", |h| {
        while !shut {
            if off == data.len() {
                h.engine_mut().tcp_shutdown(c).unwrap();
                shut = true;
                break;
            }
            match h.engine_mut().tcp_send(c, &data[off..]) {
                Ok(n) => off += n,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        server.is_finished()
    })
    .unwrap();
    let (ecn, digest, got) = server.join().unwrap().unwrap();
    assert_eq!(got, LEN);
    assert_eq!(digest, Sha256::digest(&data).to_vec());
    let ours = h.engine().tcp_info(c).map(|i| i.ecn).unwrap_or(false);
    let state = h.engine().tcp_state(c);
    if matches!(
        state,
        Ok(TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2)
    ) {
        assert_eq!(ours, ecn, "linerate and the kernel agree");
    }
    assert_eq!(h.engine().counters().tcp_ecn_negotiated, u64::from(ecn));
    ecn
}

#[test]
fn kernel_client_negotiates_ecn_with_linerate_offloads_on() {
    kernel_to_linerate(true);
}

#[test]
fn kernel_client_negotiates_ecn_with_linerate_offloads_off() {
    kernel_to_linerate(false);
}

#[test]
fn linerate_client_negotiates_ecn_with_the_kernel_offloads_on() {
    assert!(
        linerate_to_kernel(true, EcnMode::On),
        "kernel: TCPI_OPT_ECN"
    );
}

#[test]
fn linerate_client_negotiates_ecn_with_the_kernel_offloads_off() {
    assert!(
        linerate_to_kernel(false, EcnMode::On),
        "kernel: TCPI_OPT_ECN"
    );
}

#[test]
fn a_passive_linerate_client_does_not_ask() {
    assert!(!linerate_to_kernel(true, EcnMode::Passive));
}
