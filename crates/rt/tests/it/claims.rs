//! `RuntimeConfig::claims`: what a runtime on an interface shared with the
//! kernel's stack tells the steering, checked with a steering that records
//! every call (the AF_XDP one is tested against the kernel in
//! `system_xdp_shared.rs`): listeners and connections claimed as they open,
//! connections before their SYN leaves, every claim given up once the engine
//! lets the 4-tuple go; a port the kernel uses skipped; a full table refusing
//! the connection, counted.

use crate::common;

use common::mem_pair;
use linerate_nic::claims::{ClaimError, Claims, L4, Table};
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::collections::{HashMap, HashSet};
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A steering that records claims; it refuses the source ports in `in_use`
/// and, once `full`, every new 4-tuple.
#[derive(Debug, Default)]
struct Recorder {
    st: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    ports: HashMap<(L4, u16), u32>,
    flows: HashSet<(SocketAddr, SocketAddr)>,
    /// Every 4-tuple ever claimed, in order.
    claimed: Vec<(SocketAddr, SocketAddr)>,
    in_use: HashSet<u16>,
    refused_in_use: Vec<u16>,
    full: bool,
}

impl Claims for Recorder {
    fn claim_port(&self, l4: L4, port: u16) -> Result<(), ClaimError> {
        *self.st.lock().unwrap().ports.entry((l4, port)).or_default() += 1;
        Ok(())
    }
    fn release_port(&self, l4: L4, port: u16) {
        let mut st = self.st.lock().unwrap();
        let n = st
            .ports
            .get_mut(&(l4, port))
            .expect("released unclaimed port");
        *n -= 1;
        if *n == 0 {
            st.ports.remove(&(l4, port));
        }
    }
    fn claim_flow(&self, l4: L4, local: SocketAddr, remote: SocketAddr) -> Result<(), ClaimError> {
        assert_eq!(l4, L4::Tcp);
        let mut st = self.st.lock().unwrap();
        if st.in_use.contains(&local.port()) {
            st.refused_in_use.push(local.port());
            return Err(ClaimError::InUse { l4, local });
        }
        if st.full {
            return Err(ClaimError::Full {
                table: Table::Flows,
                capacity: 0,
            });
        }
        assert!(st.flows.insert((local, remote)), "claimed twice");
        st.claimed.push((local, remote));
        Ok(())
    }
    fn release_flow(&self, _: L4, local: SocketAddr, remote: SocketAddr) {
        let mut st = self.st.lock().unwrap();
        assert!(st.flows.remove(&(local, remote)), "released unclaimed flow");
    }
}

/// A client and a server runtime on a memory pair, each with a recorder.
fn hosts() -> (Runtime, Runtime, Arc<Recorder>, Arc<Recorder>) {
    let (a, b) = mem_pair(1);
    let (ca, cb) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let cfg = |i: u8, c: &Arc<Recorder>| RuntimeConfig {
        seed: u64::from(i),
        claims: Some(Arc::clone(c) as Arc<dyn Claims>),
        ..RuntimeConfig::new(Sim::host_config(i))
    };
    let client = Runtime::start(a, cfg(1, &ca)).unwrap();
    let server = Runtime::start(b, cfg(2, &cb)).unwrap();
    (client, server, ca, cb)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn claims_follow_listeners_and_connections() {
    let (client, server, ca, cb) = hosts();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    // The kernel uses two source ports in three: the connect skips them.
    ca.st.lock().unwrap().in_use = (0..=u16::MAX).filter(|p| p % 3 != 0).collect();
    let rt = tokio();
    let (local, remote) = rt.block_on(async {
        let listener = TcpListener::bind(&sh, 80).await.unwrap();
        assert_eq!(cb.st.lock().unwrap().ports.get(&(L4::Tcp, 80)), Some(&1));
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            s.write_all(&got).await.unwrap();
            s.shutdown().await.unwrap();
            listener
        });
        let mut c = TcpStream::connect(&ch, "10.0.0.2:80".parse::<std::net::SocketAddr>().unwrap())
            .await
            .unwrap();
        let tuple = (c.local_addr(), c.peer_addr());
        // Claimed before the SYN left, on a port the kernel does not use.
        assert_eq!(ca.st.lock().unwrap().claimed, vec![tuple]);
        assert_eq!(tuple.0.port() % 3, 0);
        c.write_all(b"claimed").await.unwrap();
        c.shutdown().await.unwrap();
        let mut back = Vec::new();
        c.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"claimed");
        let listener = server.await.unwrap();
        // The accepted connection is claimed too (it may outlive its listener).
        assert_eq!(cb.st.lock().unwrap().claimed, vec![(tuple.1, tuple.0)]);
        drop(listener);
        tuple
    });
    let refused = ca.st.lock().unwrap().refused_in_use.clone();
    assert!(refused.iter().all(|p| p % 3 != 0) && !refused.contains(&local.port()));
    // Every claim is given up once the engines let go (the client's after
    // TIME-WAIT: it closed first) and the listener is gone.
    wait_until("the server's claims given up", || {
        let st = cb.st.lock().unwrap();
        st.flows.is_empty() && st.ports.is_empty()
    });
    assert!(
        ca.st.lock().unwrap().flows.contains(&(local, remote)),
        "released in TIME-WAIT"
    );
    drop(client);
    assert!(
        ca.st.lock().unwrap().flows.is_empty(),
        "claims left after shutdown"
    );
    assert_eq!(refusals(&server), 0);
}

/// Claims a runtime's queue refused because a table was full.
fn refusals(rt: &Runtime) -> u64 {
    rt.handle().stats(0).unwrap().claims_refused
}

#[test]
fn a_full_table_refuses_connections_both_ways() {
    let (client, server, ca, cb) = hosts();
    let (ch, sh) = (client.handle().clone(), server.handle().clone());
    let rt = tokio();
    rt.block_on(async {
        let listener = TcpListener::bind(&sh, 80).await.unwrap();
        // The client's table is full: its connect fails at once.
        ca.st.lock().unwrap().full = true;
        let e = TcpStream::connect(&ch, "10.0.0.2:80".parse::<std::net::SocketAddr>().unwrap())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
        wait_until("the client's refusal", || refusals(&client) == 1);
        // The server's table is full: the accepted connection is reset, never
        // handed to the application.
        ca.st.lock().unwrap().full = false;
        cb.st.lock().unwrap().full = true;
        let c =
            TcpStream::connect(&ch, "10.0.0.2:80".parse::<std::net::SocketAddr>().unwrap()).await;
        if let Ok(mut c) = c {
            let mut buf = [0u8; 8];
            let r = c.read(&mut buf).await;
            assert!(
                r.is_err() || r.is_ok_and(|n| n == 0),
                "the connection lived"
            );
        }
        wait_until("the server's refusal", || refusals(&server) == 1);
        let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a refused connection was accepted");
    });
}
