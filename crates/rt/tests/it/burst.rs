//! A burst of handshakes that complete in one receive batch: every one is
//! accepted (the engine's accept queue holds them until the queue thread moves
//! them to the listener, however many arrive between two rounds).

use crate::common;

use common::mem_pair;
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream};
use linerate_toe::sim::Sim;
use std::time::Duration;

#[test]
fn a_thousand_connects_at_once_are_all_accepted() {
    const K: usize = 1000;
    let (a, b) = mem_pair(1);
    let c = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    let s = Runtime::start(b, RuntimeConfig::new(Sim::host_config(2))).unwrap();
    let (ch, sh) = (c.handle().clone(), s.handle().clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = TcpListener::bind(&sh, 6000).await.unwrap();
        let to: std::net::SocketAddr = "10.0.0.2:6000".parse().unwrap();
        let tasks: Vec<_> = (0..K)
            .map(|_| {
                let c = ch.clone();
                tokio::spawn(async move { TcpStream::connect(&c, to).await })
            })
            .collect();
        let accepts = async {
            let mut v = Vec::new();
            // A connection the server dropped would never come: bounded.
            while let Ok(r) = tokio::time::timeout(Duration::from_secs(5), l.accept()).await {
                v.push(r.unwrap());
                if v.len() == K {
                    break;
                }
            }
            v
        };
        let connects = async {
            let mut v = Vec::new();
            for t in tasks {
                v.push(t.await.unwrap().unwrap());
            }
            v
        };
        let (accepted, connected) = tokio::join!(accepts, connects);
        assert_eq!(connected.len(), K);
        assert_eq!(accepted.len(), K, "server {:?}", sh.stats(0));
    });
}
