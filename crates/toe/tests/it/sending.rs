//! What goes on the wire: the offload contract of super-segments (GSO request,
//! partial checksum with the pseudo-header sum in place), full checksums with
//! offloads off, Nagle's algorithm and `no_delay` (RFC 9293 section 3.7.4).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use linerate_offload::{Checksum, GsoType, OffloadMeta};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::tcp::{self, Flags};
use linerate_wire::{checksum, ethernet, ipv4};

/// Established with a peer offering MSS 1460 and a 1 MiB window, no options.
fn established(offloads: bool) -> (Raw, linerate_toe::SocketHandle, u16, u32) {
    let mut r = Raw::host(|c| c.offloads = offloads);
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    let opts = [O::MaximumSegmentSize(1460), O::Noop, O::WindowScale(5)];
    let port = r.answer_syn_with(c, &syn, 7000, 32_000, &opts);
    (r, c, port, syn.seq.wrapping_add(1))
}

fn raw_out(r: &mut Raw) -> Vec<(Vec<u8>, OffloadMeta)> {
    let mut out = Vec::new();
    r.e.poll_transmit(r.now, &mut |f, m| out.push((f.to_vec(), *m)));
    out
}

#[test]
fn super_segment_carries_gso_request_and_partial_checksum() {
    let (mut r, c, _, _) = established(true);
    r.e.tcp_send(c, &vec![9u8; 10 * 1460]).unwrap();
    let out = raw_out(&mut r);
    assert_eq!(out.len(), 1, "one super-segment for the initial window");
    let (f, m) = &out[0];
    let gso = m.gso.unwrap();
    assert_eq!((gso.kind, gso.size, gso.segs), (GsoType::TcpV4, 1460, 10));
    assert_eq!(
        m.csum,
        Checksum::Partial {
            start: 34,
            offset: 16
        }
    );
    let eth = ethernet::Packet::new_checked(&f[..]).unwrap();
    let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
    assert!(ip.verify_checksum());
    assert!(ip.dont_frag());
    let t = tcp::Packet::new_checked(ip.payload()).unwrap();
    assert_eq!(t.payload().len(), 10 * 1460);
    // The checksum field holds the folded pseudo-header sum, not complemented.
    let pseudo = ip.pseudo_header_sum(ip.payload().len() as u16);
    assert_eq!(t.checksum(), checksum::fold(pseudo));
    assert_eq!(r.e.counters().tcp_out_segs, 10 + 2);
}

#[test]
fn offloads_off_sends_mss_segments_with_full_checksums() {
    let (mut r, c, _, _) = established(false);
    r.e.tcp_send(c, &vec![9u8; 3 * 1460 + 100]).unwrap();
    let out = raw_out(&mut r);
    // Three full segments; Nagle holds the 100-byte tail while they are in flight.
    assert_eq!(out.len(), 3);
    for (f, m) in &out {
        assert_eq!(*m, OffloadMeta::plain());
        let eth = ethernet::Packet::new_checked(&f[..]).unwrap();
        let ip = ipv4::Packet::new_checked(eth.payload()).unwrap();
        let t = tcp::Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(t.payload().len(), 1460);
        assert!(t.verify_checksum(ip.pseudo_header_sum(ip.payload().len() as u16)));
    }
}

#[test]
fn nagle_holds_small_writes_while_data_is_unacknowledged() {
    let (mut r, c, port, my) = established(true);
    r.e.tcp_send(c, b"a").unwrap();
    assert_eq!(r.segments().len(), 1);
    r.e.tcp_send(c, b"b").unwrap();
    r.e.tcp_send(c, b"c").unwrap();
    assert!(r.segments().is_empty(), "held while 'a' is unacknowledged");
    r.input(&tcp_frame(
        80,
        port,
        7001,
        Some(my + 1),
        Flags::empty(),
        1000,
        &[],
        &[],
    ));
    let s = r.segments();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].payload, b"bc");
    // With no_delay every write goes at once.
    r.e.tcp_set_nodelay(c, true).unwrap();
    r.e.tcp_send(c, b"d").unwrap();
    assert_eq!(r.segments().len(), 1);
    r.e.tcp_send(c, b"e").unwrap();
    assert_eq!(r.segments().len(), 1);
}
