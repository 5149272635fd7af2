//! Readiness without moving bytes (`poll_read_ready`, `poll_write_ready`,
//! `poll_recv_ready`, `poll_send_ready`, `readable_bytes`,
//! `next_datagram_len`): what an event loop that asks before it reads (the
//! preload library's poll/epoll) relies on. Pending leaves the waker, which
//! the queue thread wakes when the answer changes.

use crate::common;

use common::mem_pair;
use linerate_rt::{Runtime, RuntimeConfig, TcpListener, TcpStream, UdpSocket};
use linerate_toe::sim::Sim;
use std::future::poll_fn;
use std::task::Poll;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

#[test]
fn a_stream_is_readable_once_bytes_arrive_and_writable_with_room() {
    let (a, b) = mem_pair(1);
    let c = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    let s = Runtime::start(b, RuntimeConfig::new(Sim::host_config(2))).unwrap();
    let (ch, sh) = (c.handle().clone(), s.handle().clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = TcpListener::bind(&sh, 6100).await.unwrap();
        let mut client = TcpStream::connect(&ch, "10.0.0.2:6100").await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        // Nothing to read yet: pending, and the waker stays.
        let first = poll_fn(|cx| Poll::Ready(server.poll_read_ready(cx))).await;
        assert!(first.is_pending());
        assert_eq!(server.readable_bytes(), 0);
        assert!(
            poll_fn(|cx| Poll::Ready(client.poll_write_ready(cx)))
                .await
                .is_ready()
        );
        client.write_all(b"hello").await.unwrap();
        // The queue thread wakes the waiting task when the bytes are staged.
        tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| server.poll_read_ready(cx)),
        )
        .await
        .unwrap();
        assert_eq!(server.readable_bytes(), 5);
        // Readiness moved nothing: the bytes are still there.
        assert!(
            poll_fn(|cx| Poll::Ready(server.poll_read_ready(cx)))
                .await
                .is_ready()
        );
        assert_eq!(server.readable_bytes(), 5);
        // The end of the stream is readable too.
        client.shutdown().await.unwrap();
        drop(client);
    });
}

#[test]
fn a_udp_socket_is_readable_once_a_datagram_is_staged() {
    let (a, b) = mem_pair(1);
    let c = Runtime::start(a, RuntimeConfig::new(Sim::host_config(1))).unwrap();
    let s = Runtime::start(b, RuntimeConfig::new(Sim::host_config(2))).unwrap();
    let (ch, sh) = (c.handle().clone(), s.handle().clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let server = UdpSocket::bind(&sh, "0.0.0.0:6200".parse().unwrap())
            .await
            .unwrap();
        let client = UdpSocket::bind(&ch, "0.0.0.0:0".parse().unwrap())
            .await
            .unwrap();
        assert!(
            poll_fn(|cx| Poll::Ready(server.poll_recv_ready(cx)))
                .await
                .is_pending()
        );
        assert_eq!(server.next_datagram_len(), None);
        assert!(
            poll_fn(|cx| Poll::Ready(client.poll_send_ready(cx)))
                .await
                .is_ready()
        );
        client
            .send_to(b"datagram", "10.0.0.2:6200".parse().unwrap())
            .await
            .unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            poll_fn(|cx| server.poll_recv_ready(cx)),
        )
        .await
        .unwrap();
        assert_eq!(server.next_datagram_len(), Some(8));
        let mut buf = [0u8; 16];
        let (n, _) = server.recv_from(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"datagram");
        assert_eq!(server.next_datagram_len(), None);
    });
}
