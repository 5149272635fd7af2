//! Forked children under the preload with `[nic] children = N`: each serves
//! the sockets it opens on a linerate runtime of its own, on a queue of the
//! multi-queue TAP kept for it, beside the parent's.
//!
//! A C program (tests/preload_c/fork.c, compiled here with `cc`) listens in
//! the parent and forks three children, each listening on a port of its
//! own (the first also connecting out to a kernel echo server), plus a
//! victim child that the test kills with SIGKILL (its port is then refused
//! by the parent's engine, its claims reaped) and a late child forked after
//! it, on the queue it left. Kernel clients in the namespace fetch
//! from every server at once, SHA-256 exact, wait more than five seconds
//! (past the kernel's flow-learning age, which the steering program
//! replaces) and fetch again on the same connections. Each child's
//! `LINERATE_STATS` file (the file name with its pid appended) shows its
//! own runtime accepted the connection: the children's sockets were not
//! the kernel's. A child's bound UDP socket echoes a datagram on its queue.
//! Each child also finds its inherited copy of the parent's
//! listener failing with EIO, and a listen on the parent's port refused
//! (`EADDRINUSE`: the port is claimed for the parent's queue).
//!
//! Needs root: `cargo test --features system-tests --test system_preload_fork`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod preload_common;

use preload_common::{KERNEL, OURS, Site};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const BASE: u16 = 6400;
const ECHO: u16 = 6399;
const CHILDREN: u16 = 3;

fn fork_program(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/preload_c/fork.c");
    let exe = dir.join("fork");
    let out = Command::new("cc")
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn expected(port: u16, from: usize, len: usize) -> [u8; 32] {
    let mut h = Sha256::new();
    let bytes: Vec<u8> = (from..from + len)
        .map(|i| ((i % 251) as u8) ^ (port as u8))
        .collect();
    h.update(&bytes);
    h.finalize().into()
}

/// Asks for `len` bytes on `s` and checks their SHA-256 against the pattern.
fn fetch(s: &mut TcpStream, port: u16, len: usize) {
    s.write_all(format!("{len}\n").as_bytes()).unwrap();
    let mut got = vec![0u8; len];
    s.read_exact(&mut got).unwrap();
    let sum: [u8; 32] = Sha256::digest(&got).into();
    assert_eq!(sum, expected(port, 0, len), "port {port}: bytes differ");
}

/// Kills the process group started here (the program and its children)
/// when the test ends, also on failure.
struct Reap(std::process::Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).output();
        let _ = self.0.wait();
    }
}

#[test]
fn children_serve_their_own_sockets_on_queues_of_their_own() {
    let site = Site::forking(CHILDREN + 1);
    let dir = std::env::temp_dir().join(linerate_testkit::netns::unique("lrpf"));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = fork_program(&dir);
    let stats = dir.join("stats");

    // The kernel's echo server for the first child's active open.
    let echo = site
        .ns
        .run(|| TcpListener::bind(SocketAddr::from((KERNEL, ECHO))).unwrap())
        .unwrap();
    let echoer = std::thread::spawn(move || {
        let (mut c, _) = echo.accept().unwrap();
        let mut buf = vec![0u8; 65536];
        let mut total = 0usize;
        loop {
            let n = c.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            c.write_all(&buf[..n]).unwrap();
            total += n;
        }
        c.shutdown(Shutdown::Write).unwrap();
        total
    });

    let mut cmd = site.preloaded(
        exe.to_str().unwrap(),
        &[
            &KERNEL.to_string(),
            &ECHO.to_string(),
            &BASE.to_string(),
            &CHILDREN.to_string(),
        ],
    );
    cmd.env("LINERATE_STATS", &stats)
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Reap(cmd.spawn().unwrap());
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let mut ready: HashMap<u16, i32> = HashMap::new();
    let mut victim = 0;
    let wait_for = |lines: &mut Vec<String>,
                    ready: &mut HashMap<u16, i32>,
                    victim: &mut i32,
                    done: &dyn Fn(&HashMap<u16, i32>, i32) -> bool| {
        while !done(ready, *victim) {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("waiting; so far: {lines:?}"));
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["ready", port, pid] => {
                    ready.insert(port.parse().unwrap(), pid.parse().unwrap());
                }
                ["victim", pid] => *victim = pid.parse().unwrap(),
                ["udp", "ready", port] => {
                    ready.insert(port.parse().unwrap(), 0);
                }
                _ => {}
            }
            lines.push(line);
        }
    };
    wait_for(&mut lines, &mut ready, &mut victim, &|r, v| {
        v != 0 && r.len() == usize::from(CHILDREN) + 3
    });
    // The third child's UDP socket, bound on its queue.
    let echoed = site
        .ns
        .run(|| {
            let u = UdpSocket::bind(SocketAddr::from((KERNEL, 0))).unwrap();
            u.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut buf = [0u8; 64];
            for _ in 0..10 {
                u.send_to(b"forked udp", (OURS, BASE + 70)).unwrap();
                if let Ok((n, from)) = u.recv_from(&mut buf) {
                    return Some((buf[..n].to_vec(), from));
                }
            }
            None
        })
        .unwrap();
    let (bytes, from) = echoed.expect("the child's UDP echo");
    assert_eq!(bytes, b"forked udp");
    assert_eq!(from, SocketAddr::from((OURS, BASE + 70)));
    // The victim has its listener (its runtime runs): kill it.
    let out = Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    // Its claims are reaped by the parent: a connection to its port reaches
    // the parent's engine, which refuses it (as the kernel refuses a port
    // whose process died), instead of the dead queue swallowing the SYN.
    let refused = site
        .ns
        .run(|| {
            let to = SocketAddr::from((OURS, BASE + 50));
            (0..20).find_map(|_| {
                match TcpStream::connect_timeout(&to, Duration::from_millis(500)) {
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                    _ => {
                        std::thread::sleep(Duration::from_millis(250));
                        None
                    }
                }
            })
        })
        .unwrap();
    assert!(
        refused.is_some(),
        "the killed child's port was never refused"
    );

    // Every server at once; each child's connection stays open until the
    // late child is served (so the late child takes the victim's queue).
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Arc::new(std::sync::Mutex::new(release_rx));
    let mut clients = Vec::new();
    for port in BASE..=BASE + CHILDREN {
        let release = std::sync::Arc::clone(&release_rx);
        clients.push(
            site.ns
                .spawn(move || {
                    let mut s = TcpStream::connect(SocketAddr::from((OURS, port))).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                    fetch(&mut s, port, 4 << 20);
                    // Idle past the kernel's flow-learning age.
                    std::thread::sleep(Duration::from_secs(6));
                    fetch(&mut s, port, 1 << 20);
                    if port != BASE {
                        let _ = release.lock().unwrap().recv();
                    }
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut rest = Vec::new();
                    s.read_to_end(&mut rest).unwrap();
                    assert!(rest.is_empty());
                })
                .unwrap(),
        );
    }
    // The parent's first connection ends: it reaps the victim and forks
    // the late child.
    let parent_client = clients.remove(0);
    parent_client.join().unwrap().unwrap();
    wait_for(&mut lines, &mut ready, &mut victim, &|r, _| {
        r.contains_key(&(BASE + 60))
    });
    let late = site.ns.run(|| {
        let mut s = TcpStream::connect(SocketAddr::from((OURS, BASE + 60))).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        fetch(&mut s, BASE + 60, 2 << 20);
    });
    late.unwrap();
    // The parent, after the kill, still serves.
    site.ns
        .run(|| {
            let mut s = TcpStream::connect(SocketAddr::from((OURS, BASE))).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            fetch(&mut s, BASE, 2 << 20);
        })
        .unwrap();
    for _ in &clients {
        release_tx.send(()).unwrap();
    }
    for c in clients {
        c.join().unwrap().unwrap();
    }
    let status = child.0.wait().unwrap();
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(500)) {
        lines.push(l);
    }
    assert!(status.success(), "{status}: {lines:?}");
    assert_eq!(echoer.join().unwrap(), 1 << 20);
    let count = |s: &str| lines.iter().filter(|l| l.as_str() == s).count();
    assert_eq!(count("eio ok"), usize::from(CHILDREN), "{lines:?}");
    assert_eq!(count("connect ok"), 1, "{lines:?}");
    assert_eq!(count("busy ok"), 1, "{lines:?}");
    assert_eq!(count("done 0"), 1, "{lines:?}");

    // Each child's own runtime accepted its connection (and the first
    // made its active open there).
    for port in (BASE + 1..=BASE + CHILDREN).chain([BASE + 60]) {
        let pid = ready[&port];
        let file = PathBuf::from(format!("{}.{pid}", stats.display()));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: the child on {port} ran no runtime",
                file.display()
            )
        });
        assert!(
            text.contains("passive_opens: 1,"),
            "child on {port}: {text}"
        );
        // Its next hop (the kernel) came from the steering program's
        // record of ARP: the ARP replies went to the program's queue.
        assert!(
            text.contains("kernel_neighbors: ") && !text.contains("kernel_neighbors: 0,"),
            "child on {port}: {text}"
        );
        if port == BASE + 1 {
            assert!(text.contains("active_opens: 1,"), "child on {port}: {text}");
        }
    }
    let parent = std::fs::read_to_string(&stats).unwrap();
    assert!(parent.contains("passive_opens: 2,"), "parent: {parent}");
    let _ = std::fs::remove_dir_all(&dir);
}
