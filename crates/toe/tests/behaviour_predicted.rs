//! Header prediction (the receive fast path, `tcp_hp_hits`), against a
//! hand-driven sender: the next in-order data segment, ACK or ACK|PSH only,
//! acknowledging nothing new while nothing of ours is in flight, with the
//! window unchanged, is taken by the fast path; anything else (out of order, a
//! FIN, a window change, an ACK of new data, data of ours in flight) by the
//! general path. Both place the same bytes: the stream read back is exact and
//! our ACKs acknowledge it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::*;
use linerate_toe::SocketHandle;
use linerate_wire::tcp::Flags;
use std::time::Duration;

struct Rx {
    r: Raw,
    c: SocketHandle,
    port: u16,
    /// The peer's ISN + 1.
    base: u32,
    /// Our ISN + 1.
    me: u32,
    stream: Vec<u8>,
}

impl Rx {
    fn new() -> Rx {
        let mut r = Raw::host(|c| {
            c.neighbor_ttl = Duration::from_secs(3600);
        });
        let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
        let syn = r.segments().remove(0);
        r.answer_syn_with(c, &syn, 99, 60_000, &[]);
        let (me, _) = r.e.tcp_addrs(c).unwrap();
        Rx {
            r,
            c,
            port: me.port(),
            base: 100,
            me: syn.seq.wrapping_add(1),
            stream: common::pattern(1 << 16, 5),
        }
    }

    fn hits(&self) -> u64 {
        self.r.e.counters().tcp_hp_hits
    }

    /// Stream bytes `[from, to)` in one segment acknowledging `ack` (bytes of
    /// ours), with `flags` and window `wnd`.
    fn send(&mut self, from: usize, to: usize, ack: u32, flags: Flags, wnd: u16) {
        let f = tcp_frame(
            80,
            self.port,
            self.base.wrapping_add(from as u32),
            Some(self.me.wrapping_add(ack)),
            flags,
            wnd,
            &[],
            &self.stream[from..to],
        );
        self.r.input(&f);
    }

    fn read(&mut self) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 17];
        while let Ok(n) = self.r.e.tcp_recv(self.c, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        got
    }
}

#[test]
fn in_order_data_takes_the_fast_path_and_anything_else_the_general_one() {
    let mut x = Rx::new();
    let ack = Flags::ACK;
    let psh = Flags::ACK | Flags::PSH;
    let base = x.hits();
    // In order, nothing new acknowledged, window as before: predicted.
    x.send(0, 1000, 0, ack, 60_000);
    x.send(1000, 2000, 0, psh, 60_000);
    assert_eq!(x.hits() - base, 2);
    // Out of order: the general path (a hole), then its filling.
    x.send(3000, 4000, 0, ack, 60_000);
    assert_eq!(x.hits() - base, 2);
    x.send(2000, 3000, 0, ack, 60_000);
    let h = x.hits() - base;
    // A window change, then the same window again.
    x.send(4000, 5000, 0, ack, 50_000);
    assert_eq!(x.hits() - base, h);
    x.send(5000, 6000, 0, ack, 50_000);
    assert_eq!(x.hits() - base, h + 1);
    // A FIN is the general path's.
    x.send(6000, 6500, 0, ack | Flags::FIN, 50_000);
    assert_eq!(x.hits() - base, h + 1);
    assert_eq!(x.read(), &x.stream[..6500]);
    // Our ACK covers the stream and the FIN.
    let acks = x.r.advance(Duration::from_millis(200));
    let last = acks.last().expect("an ACK");
    assert_eq!(last.ack, x.base.wrapping_add(6501));
}

#[test]
fn data_of_ours_in_flight_or_newly_acknowledged_goes_the_general_way() {
    let mut x = Rx::new();
    let ack = Flags::ACK;
    // Ours in flight: the peer's data segments acknowledge nothing new.
    assert_eq!(x.r.e.tcp_send(x.c, &[7u8; 3000]).unwrap(), 3000);
    let now = x.r.now;
    x.r.e.poll_transmit(now, &mut |_, _| {});
    let base = x.hits();
    x.send(0, 1000, 0, ack, 60_000);
    assert_eq!(x.hits(), base, "data in flight: general path");
    // This one acknowledges all of ours: general path, and SND.UNA moves.
    x.send(1000, 2000, 3000, ack, 60_000);
    assert_eq!(x.hits(), base);
    assert_eq!(x.r.e.tcp_info(x.c).unwrap().unacked, 0);
    // Now nothing is in flight: predicted again.
    x.send(2000, 3000, 3000, ack, 60_000);
    assert_eq!(x.hits(), base + 1);
    assert_eq!(x.read(), &x.stream[..3000]);
}
