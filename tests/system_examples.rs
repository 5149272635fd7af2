//! The small API examples on a TAP against the Linux kernel, started as a user
//! starts them.
//!
//! Each test makes a network namespace with a persistent TAP in it (`ip tuntap
//! add`), the kernel at 10.215.0.1/24 on it, and runs the example inside the
//! namespace (`ip netns exec`), where it opens the TAP by name and answers at
//! 10.215.0.2. The peers are the kernel's own: std::net sockets on a thread
//! that has entered the namespace, and curl for the HTTP server (a std::net
//! client where curl is missing). The example is killed, and the namespace and
//! the TAP deleted, when the test ends, also on failure.
//!
//! Two tests show what a first program needs of the runtime and are ignored
//! until it has it: an example started before its link is up serves once the
//! link comes up, and a server that answers its last request and returns from
//! `main` still delivers the whole response.
//!
//! Needs root: `cargo test --features system-tests --test system_examples`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod examples_common;

use examples_common::{Running, example};
use linerate_testkit::netns::{self, Netns};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

/// The kernel's address on the TAP.
const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 1);
/// The example's.
const OURS: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 2);
/// How long an example may take to start listening (a cold build included).
const START: Duration = Duration::from_secs(120);
/// How long a kernel peer waits on a socket.
const IO: Duration = Duration::from_secs(20);

/// A namespace with a persistent TAP in it, the kernel at [`KERNEL`]/24.
struct Site {
    ns: Netns,
    tap: String,
}

impl Site {
    /// The namespace and the TAP; the link is brought up if `up`.
    fn new(up: bool) -> Site {
        assert!(netns::is_root(), "system tests need root");
        let ns = Netns::new("lrx").unwrap();
        let tap = netns::unique("lrxt");
        ns.ip(&["tuntap", "add", "dev", &tap, "mode", "tap"])
            .unwrap();
        // No IPv6 on it: no router solicitations or DAD in the way.
        let off = format!("echo 1 > /proc/sys/net/ipv6/conf/{tap}/disable_ipv6");
        let _ = ns.exec("sh", &["-c", &off]);
        ns.ip(&["addr", "add", &format!("{KERNEL}/24"), "dev", &tap])
            .unwrap();
        let site = Site { ns, tap };
        if up {
            site.up();
        }
        site
    }

    /// Brings the TAP's link up.
    fn up(&self) {
        self.ns.ip(&["link", "set", &self.tap, "up"]).unwrap();
    }

    /// Starts example `name` in the namespace on the TAP at [`OURS`], with
    /// `args` after those flags.
    fn start(&self, name: &str, args: &[&str]) -> Running {
        let bin = example(name);
        let mut cmd = self.ns.command(bin.to_str().unwrap());
        cmd.args(["--tap", &self.tap, "--ip", &OURS.to_string()])
            .args(args);
        Running::start(name, cmd)
    }

    /// Runs `f` on a thread inside the namespace and returns its result.
    fn kernel<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        self.ns.run(f).unwrap()
    }
}

/// Deterministic bytes, different per `seed`.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64 * 2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

/// A kernel client: sends `data` to `to`, closes its side, and returns every
/// byte it read until the server closed (written from a second thread, so
/// neither side's buffers fill up waiting for the other).
fn exchange(to: SocketAddr, data: Vec<u8>) -> Vec<u8> {
    let mut s = TcpStream::connect_timeout(&to, IO).unwrap();
    s.set_read_timeout(Some(IO)).unwrap();
    s.set_write_timeout(Some(IO)).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        w.write_all(&data).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    writer.join().unwrap();
    back
}

/// A TCP echo example answers the kernel: 4 MiB back as sent, then EOF.
fn echo_serves_the_kernel(name: &str) {
    let site = Site::new(true);
    let mut ex = site.start(name, &[]);
    ex.expect_line("listening on port 7", START);
    let sent = pattern(7, 4 << 20);
    let expect = sent.clone();
    let back = site.kernel(move || exchange(SocketAddr::from((OURS, 7)), sent));
    assert!(
        back == expect,
        "{} bytes back of {}",
        back.len(),
        expect.len()
    );
    assert!(ex.is_running(), "{name} stopped: {:?}", ex.seen);
}

#[test]
fn tcp_echo_serves_the_kernel() {
    echo_serves_the_kernel("tcp_echo");
}

#[test]
fn event_loop_serves_the_kernel() {
    echo_serves_the_kernel("event_loop");
}

#[test]
fn udp_echo_serves_the_kernel() {
    let site = Site::new(true);
    let mut ex = site.start("udp_echo", &[]);
    ex.expect_line("listening on", START);
    let echoed = site.kernel(|| {
        let s = UdpSocket::bind((KERNEL, 0)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        let to = SocketAddr::from((OURS, 7));
        let mut buf = [0u8; 2048];
        let mut echoed = 0;
        for i in 0..50u8 {
            // Up to 1472 bytes: a datagram that fits one 1500-byte frame.
            let sent = pattern(i, 1 + usize::from(i) * 30);
            // UDP may lose a datagram: send again after a second, three times.
            'tries: for _ in 0..3 {
                s.send_to(&sent, to).unwrap();
                while let Ok((n, from)) = s.recv_from(&mut buf) {
                    if from == to && buf[..n] == sent[..] {
                        echoed += 1;
                        break 'tries;
                    }
                }
            }
        }
        echoed
    });
    assert_eq!(echoed, 50, "{:?}", ex.seen);
}

#[test]
fn tcp_proxy_spreads_kernel_clients_over_kernel_backends() {
    let site = Site::new(true);
    // Three kernel backends, two connections each: each reads the request to
    // its end and answers with its name and the request's size.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let backends = site
        .ns
        .spawn(move || {
            let listeners: Vec<TcpListener> = (0..3)
                .map(|k| TcpListener::bind((KERNEL, 9101 + k)).unwrap())
                .collect();
            ready_tx.send(()).unwrap();
            let threads: Vec<_> = listeners
                .into_iter()
                .enumerate()
                .map(|(k, l)| {
                    std::thread::spawn(move || {
                        for _ in 0..2 {
                            let (mut s, _) = l.accept().unwrap();
                            s.set_read_timeout(Some(IO)).unwrap();
                            let mut request = Vec::new();
                            s.read_to_end(&mut request).unwrap();
                            let answer = format!("backend {k}: {} bytes", request.len());
                            s.write_all(answer.as_bytes()).unwrap();
                        }
                    })
                })
                .collect();
            threads.into_iter().all(|t| t.join().is_ok())
        })
        .unwrap();
    ready_rx.recv_timeout(IO).unwrap();
    let list: Vec<String> = (0..3).map(|k| format!("{KERNEL}:{}", 9101 + k)).collect();
    let mut args = vec!["--listen", "8080"];
    for b in &list {
        args.extend(["--backend", b.as_str()]);
    }
    let mut ex = site.start("tcp_proxy", &args);
    ex.expect_line("listening on port 8080", START);
    let answers = site.kernel(|| {
        (0..6usize)
            .map(|i| {
                let back = exchange(SocketAddr::from((OURS, 8080)), pattern(1, 200_000 + i));
                String::from_utf8_lossy(&back).into_owned()
            })
            .collect::<Vec<_>>()
    });
    let want: Vec<String> = (0..6)
        .map(|i| format!("backend {}: {} bytes", i % 3, 200_000 + i))
        .collect();
    assert_eq!(answers, want, "{:?}", ex.seen);
    assert!(backends.join().unwrap().unwrap(), "a backend failed");
}

/// Started on a TAP whose link is down, the example keeps running (frames
/// wait or are dropped and counted) and serves once the link comes up.
#[test]
fn tcp_echo_started_before_the_link_is_up_serves_once_it_is() {
    let site = Site::new(false);
    let mut ex = site.start("tcp_echo", &[]);
    ex.expect_line("listening on port 7", START);
    // A while with the link down: long enough for its first frames (the
    // address announcements) to have met the down link.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        ex.is_running(),
        "stopped while the link was down: {:?}",
        ex.seen
    );
    site.up();
    let sent = pattern(3, 1 << 20);
    let expect = sent.clone();
    let back = site.kernel(move || exchange(SocketAddr::from((OURS, 7)), sent));
    assert!(
        back == expect,
        "{} bytes back of {}",
        back.len(),
        expect.len()
    );
    assert!(ex.is_running(), "{:?}", ex.seen);
}

/// GETs `url` from inside the namespace: the response body, with curl where
/// there is one (its exit status checked), else over a std::net socket.
fn http_get(site: &Site, port: u16) -> Vec<u8> {
    let url = format!("http://{OURS}:{port}/");
    let curl = std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if curl {
        let out = site
            .ns
            .command("curl")
            .args(["-sS", "--max-time", "20", &url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "curl {url}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        return out.stdout;
    }
    eprintln!("no curl here: a std::net client instead");
    let raw = site.kernel(move || {
        exchange(
            SocketAddr::from((OURS, port)),
            b"GET / HTTP/1.1\r\nHost: linerate\r\nConnection: close\r\n\r\n".to_vec(),
        )
    });
    let at = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    raw[at + 4..].to_vec()
}

/// The HTTP example answers its last request, shuts the stream down and
/// returns from `main`; the client still gets the whole response (the
/// runtime, dropped as main returns, lets the staged bytes and the FIN go out
/// first). A 13-byte body is staged whole when main returns; a megabyte is
/// mostly still in the engine's send buffer.
#[test]
fn http_hello_returns_from_main_and_the_client_gets_the_whole_response() {
    for len in [13usize, 1 << 20] {
        let site = Site::new(true);
        let body_bytes = len.to_string();
        let args = ["--requests", "1", "--body-bytes", &body_bytes];
        let mut ex = site.start("http_hello", &args);
        ex.expect_line("listening on port 8080", START);
        let body = http_get(&site, 8080);
        let want: Vec<u8> = b"hello, world\n"
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect();
        assert!(
            body == want,
            "{len}-byte body: {} bytes arrived: {:?}",
            body.len(),
            ex.seen
        );
        let status = ex.wait(Duration::from_secs(30));
        assert!(status.success(), "{status}: {:?}", ex.seen);
    }
}
