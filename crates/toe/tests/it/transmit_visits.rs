//! Frames go out as soon as there is something to send, after the engine
//! stopped queueing a connection for transmission when a segment left it with
//! nothing to send (the pure ACK of all its data, or of its FIN): data written
//! after such an ACK, a FIN after a close, a window update after a read that
//! reopens a shut window all go out in the very next `poll_transmit`, with no
//! virtual time passing. Two engines back to back, no link model: every frame
//! is delivered before the next round.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_offload::OffloadMeta;
use linerate_toe::sim::Sim;
use linerate_toe::{Engine, Instant, SocketHandle, TcpState};
use std::time::Duration;

/// What a frame said: sender (engine index), TCP flags, payload length, window field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    from: usize,
    flags: u8,
    len: usize,
    wnd: u16,
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const PSH: u8 = 0x08;
const ACK: u8 = 0x10;

/// The TCP fields of an IPv4 frame (Ethernet, IPv4, TCP; read from the
/// headers, independently of the engine's code).
fn parse(from: usize, f: &[u8]) -> Option<Frame> {
    let ip = f.get(14..)?;
    if ip.first()? >> 4 != 4 || *ip.get(9)? != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 15) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    let tcp = ip.get(ihl..total)?;
    let doff = usize::from(tcp.get(12)? >> 4) * 4;
    Some(Frame {
        from,
        flags: *tcp.get(13)?,
        len: tcp.len().checked_sub(doff)?,
        wnd: u16::from_be_bytes([*tcp.get(14)?, *tcp.get(15)?]),
    })
}

struct Wire {
    e: [Engine; 2],
    now: Instant,
}

impl Wire {
    fn new(tune: impl Fn(&mut linerate_toe::Config)) -> Wire {
        let engine = |i: u8| {
            let mut cfg = Sim::host_config(i);
            cfg.tcp.msl = Duration::from_millis(1);
            tune(&mut cfg);
            Engine::new(cfg, u64::from(i))
        };
        let mut w = Wire {
            e: [engine(1), engine(2)],
            now: Instant::ZERO,
        };
        // Neighbour resolution out of the way.
        w.e[0].handle_timeout(w.now);
        w
    }

    /// Delivers frames both ways until neither engine sends, without moving
    /// the clock; returns every TCP frame seen, in order.
    fn pump(&mut self) -> Vec<Frame> {
        let mut seen = Vec::new();
        for _ in 0..1000 {
            let mut queues: [Vec<(Vec<u8>, OffloadMeta)>; 2] = Default::default();
            let mut moved = 0;
            for (i, e) in self.e.iter_mut().enumerate() {
                let q = &mut queues[1 - i];
                moved += e.poll_transmit(self.now, &mut |f, m| {
                    seen.extend(parse(i, f));
                    q.push((f.to_vec(), *m));
                });
            }
            if moved == 0 {
                return seen;
            }
            for (e, q) in self.e.iter_mut().zip(&mut queues) {
                for (f, m) in q.drain(..) {
                    e.handle_frame(self.now, &f, &m);
                }
            }
        }
        panic!("frames never stopped");
    }

    /// A connection from engine 0 to engine 1, established and accepted.
    fn connect(&mut self) -> (SocketHandle, SocketHandle) {
        let l = self.e[1].tcp_listen(80).unwrap();
        let c = self.e[0]
            .tcp_connect(self.now, "10.0.0.2:80".parse().unwrap())
            .unwrap();
        let frames = self.pump();
        let flags: Vec<u8> = frames.iter().map(|f| f.flags).collect();
        assert_eq!(flags[..3], [SYN, SYN | ACK, ACK], "{frames:?}");
        let s = self.e[1].tcp_accept(l).unwrap();
        (c, s)
    }
}

/// The connection-rate exchange (request, response with FIN, FIN): each
/// segment that needs an answer gets it within the same pump, and nothing
/// more goes out.
#[test]
fn request_response_close_sends_each_frame_at_once() {
    let mut w = Wire::new(|_| {});
    let l = w.e[1].tcp_listen(80).unwrap();
    let c = w.e[0]
        .tcp_connect(w.now, "10.0.0.2:80".parse().unwrap())
        .unwrap();
    assert_eq!(w.e[0].tcp_send(c, &[1; 64]), Ok(64));
    let f = w.pump();
    let got: Vec<_> = f.iter().map(|f| (f.from, f.flags & !PSH, f.len)).collect();
    // The server ACKs the request at once (quick ACKs at the start, as Linux).
    assert_eq!(
        got,
        [(0, SYN, 0), (1, SYN | ACK, 0), (0, ACK, 64), (1, ACK, 0)]
    );
    // The client has been ACKed and has nothing to send. Data written now
    // goes out in the next round, without waiting for any timer.
    assert_eq!(w.e[0].tcp_send(c, &[3; 10]), Ok(10));
    let got: Vec<_> = w
        .pump()
        .iter()
        .map(|f| (f.from, f.flags & !PSH, f.len))
        .collect();
    assert_eq!(got[0], (0, ACK, 10));
    let s = w.e[1].tcp_accept(l).unwrap();
    let mut buf = [0u8; 128];
    assert_eq!(w.e[1].tcp_recv(s, &mut buf), Ok(74));
    assert_eq!(w.e[1].tcp_send(s, &[2; 64]), Ok(64));
    w.e[1].tcp_close(s).unwrap();
    let got: Vec<_> = w
        .pump()
        .iter()
        .map(|f| (f.from, f.flags & !PSH, f.len))
        .collect();
    assert_eq!(got, [(1, ACK | FIN, 64), (0, ACK, 0)]);
    // The server's FIN is ACKed (FIN-WAIT-2, nothing to send); the client's
    // close sends its FIN at once, and the server ACKs it at once.
    assert_eq!(w.e[1].tcp_state(s), Err(linerate_toe::InvalidHandle));
    assert_eq!(w.e[0].tcp_recv(c, &mut buf), Ok(64));
    assert_eq!(w.e[0].tcp_recv(c, &mut buf), Ok(0));
    assert_eq!(w.e[0].tcp_state(c), Ok(TcpState::CloseWait));
    w.e[0].tcp_close(c).unwrap();
    let got: Vec<_> = w.pump().iter().map(|f| (f.from, f.flags, f.len)).collect();
    assert_eq!(got, [(0, ACK | FIN, 0), (1, ACK, 0)]);
    assert_eq!(
        w.e[0].counters().tcp_out_rsts + w.e[1].counters().tcp_out_rsts,
        0
    );
}

/// A shut receive window: the reader's first read reopens it and the window
/// update goes out in the next round; the sender, whose data was all ACKed,
/// then sends the rest at once (before its persist timer).
#[test]
fn read_that_reopens_a_shut_window_sends_the_update_at_once() {
    // Four full segments (MSS 1448 with timestamps): the first flight shuts it.
    const BUF: usize = 4 * 1448;
    let mut w = Wire::new(|c| {
        c.tcp.recv_buffer = BUF;
        c.tcp.recv_autotune = false;
    });
    let (c, s) = w.connect();
    let data = vec![7u8; 3 * BUF];
    let mut sent = w.e[0].tcp_send(c, &data).unwrap();
    let f = w.pump();
    // The receiver's window shut: its last ACK says 0.
    let last = f.iter().rev().find(|f| f.from == 1).unwrap();
    assert_eq!(last.wnd, 0, "{f:?}");
    let moved: usize = f.iter().filter(|f| f.from == 0).map(|f| f.len).sum();
    assert_eq!(moved, BUF, "{f:?}");
    let mut got = 0;
    let mut buf = vec![0u8; BUF];
    while got < data.len() {
        // A full read: the window reopens and the update goes at once; the
        // sender answers with data in the same pump.
        let n = w.e[1].tcp_recv(s, &mut buf).unwrap();
        assert!(n > 0);
        got += n;
        if sent < data.len() {
            sent += w.e[0].tcp_send(c, &data[sent..]).unwrap_or(0);
        }
        if got == data.len() {
            break;
        }
        let f = w.pump();
        let update = f.first().expect("a window update at once");
        assert_eq!((update.from, update.flags & !PSH, update.len), (1, ACK, 0));
        assert!(update.wnd > 0, "{f:?}");
        assert!(
            f.iter().any(|f| f.from == 0 && f.len > 0),
            "the sender goes on at once: {f:?}"
        );
    }
    assert_eq!(got, data.len());
}
