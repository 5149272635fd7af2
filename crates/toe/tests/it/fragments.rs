//! Fragmented input with reassembly off, the default (`Config::fragments`;
//! crate docs, "Fragments"; `tests/reassembly.rs` has it on). An engine with an established TCP connection (IPv4) and a bound UDP socket
//! (IPv6) is fed fragments built here with etherparse, each carrying a transport
//! header and payload that would be accepted if the fragment were taken for a
//! whole datagram: an IPv4 first fragment (MF=1, offset 0) and an IPv4 last
//! fragment (offset != 0) with TCP, and IPv6 first and last fragments (Fragment
//! extension header) with UDP. Each must be counted in
//! `ip_in_fragments_dropped`, reach no socket, and draw no answer (no RST, ICMP
//! or ACK). The same frames built unfragmented then go through, so the drop was
//! the fragmentation and not a mistake in the frames; the connection still works.
//!
//! An IPv6 atomic fragment (Fragment header with offset 0 and M=0) is a whole
//! datagram: RFC 6946 section 4 says to process it as one, and the engine does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::{ME_MAC, PEER_MAC, Raw, peer_addr};
use common::udp::{ME4, ME6, PEER4, PEER6, dual_host};
use linerate_toe::{RecvError, SocketHandle, UdpHandle, UdpRecvError};
use linerate_wire::etherparse::{
    IpFragOffset, IpNumber, Ipv4Header, Ipv6FragmentHeader, Ipv6Header, TcpHeader, UdpHeader,
};
use std::time::Duration;

/// The peer's first sequence number after the handshake (`Raw::answer_syn`).
const PEER_SEQ: u32 = 7001;
const UDP_PORT: u16 = 4000;

fn ethernet(ethertype: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(1514);
    f.extend_from_slice(&ME_MAC);
    f.extend_from_slice(&PEER_MAC);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f
}

/// A TCP segment from the peer's port 80 to `my_port` carrying `payload` at
/// `seq`, acknowledging `ack`, in an IPv4 datagram with MF = `more` and
/// fragment offset `offset` (8-byte units). The TCP checksum is right for the
/// bytes carried, so the segment is acceptable if taken as a whole datagram.
fn tcp4(my_port: u16, seq: u32, ack: u32, payload: &[u8], more: bool, offset: u16) -> Vec<u8> {
    let mut tcp = TcpHeader::new(80, my_port, seq, 60_000);
    tcp.ack = true;
    tcp.psh = true;
    tcp.acknowledgment_number = ack;
    tcp.checksum = tcp.calc_checksum_ipv4_raw(PEER4, ME4, payload).unwrap();
    let len = tcp.header_len_u16() + payload.len() as u16;
    let mut ip = Ipv4Header::new(len, 64, IpNumber::TCP, PEER4, ME4).unwrap();
    ip.identification = 0x4242;
    ip.dont_fragment = false;
    ip.more_fragments = more;
    ip.fragment_offset = IpFragOffset::try_new(offset).unwrap();
    let mut f = ethernet(0x0800);
    ip.write(&mut f).unwrap();
    tcp.write(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}

/// A UDP datagram from the peer's port 5000 to [`UDP_PORT`] over IPv6, behind a
/// Fragment header `(offset, more)` if `frag` is given. The UDP checksum is
/// right for the bytes carried.
fn udp6(payload: &[u8], frag: Option<(u16, bool)>) -> Vec<u8> {
    let frag_len = if frag.is_some() {
        Ipv6FragmentHeader::LEN
    } else {
        0
    };
    let ip = Ipv6Header {
        payload_length: (frag_len + UdpHeader::LEN + payload.len()) as u16,
        next_header: if frag.is_some() {
            IpNumber::IPV6_FRAGMENTATION_HEADER
        } else {
            IpNumber::UDP
        },
        hop_limit: 64,
        source: PEER6.octets(),
        destination: ME6.octets(),
        ..Ipv6Header::default()
    };
    let udp = UdpHeader::with_ipv6_checksum(5000, UDP_PORT, &ip, payload).unwrap();
    let mut f = ethernet(0x86dd);
    ip.write(&mut f).unwrap();
    if let Some((offset, more)) = frag {
        Ipv6FragmentHeader::new(
            IpNumber::UDP,
            IpFragOffset::try_new(offset).unwrap(),
            more,
            0x0bad_cafe,
        )
        .write(&mut f)
        .unwrap();
    }
    udp.write(&mut f).unwrap();
    f.extend_from_slice(payload);
    f
}

/// The engine (10.0.0.1, fd00::1) with a connection established to the peer's
/// port 80 and a UDP socket on [`UDP_PORT`]; returns it, the connection, its
/// local port, the engine's next sequence number, and the UDP socket.
fn setup() -> (Raw, SocketHandle, u16, u32, UdpHandle) {
    let mut r = dual_host(|_| {});
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().pop().unwrap();
    let port = r.answer_syn(c, &syn, &[]);
    let u = r.e.udp_bind("[::]:4000".parse().unwrap()).unwrap();
    assert!(r.frames().is_empty());
    (r, c, port, syn.seq.wrapping_add(1), u)
}

/// Feeds `frame` and checks it was dropped as a fragment, silently, with no
/// delivery to `c` or `u`, nor anything sent for 200 ms.
fn dropped_as_fragment(r: &mut Raw, frame: &[u8], c: SocketHandle, u: UdpHandle, what: &str) {
    let before = r.e.counters().clone();
    r.input(frame);
    let after = r.e.counters().clone();
    assert_eq!(
        after.ip_in_fragments_dropped,
        before.ip_in_fragments_dropped + 1,
        "{what}: not counted as a dropped fragment"
    );
    assert_eq!(after.ip_in_delivers, before.ip_in_delivers, "{what}");
    assert_eq!(after.tcp_in_segs, before.tcp_in_segs, "{what}");
    assert_eq!(after.udp_in_datagrams, before.udp_in_datagrams, "{what}");
    assert_eq!(after.icmp_out_msgs, before.icmp_out_msgs, "{what}");
    assert_eq!(after.tcp_out_rsts, before.tcp_out_rsts, "{what}");
    let mut buf = [0u8; 2048];
    assert_eq!(
        r.e.tcp_recv(c, &mut buf),
        Err(RecvError::WouldBlock),
        "{what}"
    );
    assert_eq!(
        r.e.udp_recv_from(u, &mut buf).map(|x| x.0),
        Err(UdpRecvError::WouldBlock),
        "{what}"
    );
    assert!(r.frames().is_empty(), "{what}: the engine answered");
    assert!(
        r.advance(Duration::from_millis(200)).is_empty(),
        "{what}: the engine sent something later"
    );
    assert!(r.frames().is_empty(), "{what}");
}

#[test]
fn ipv4_tcp_fragments_are_dropped_and_counted() {
    let (mut r, c, port, my_seq, u) = setup();
    let data = b"fragmented data that must not be taken";
    // A first fragment: MF set, offset 0, a whole acceptable segment inside.
    let first = tcp4(port, PEER_SEQ, my_seq, data, true, 0);
    dropped_as_fragment(&mut r, &first, c, u, "IPv4 first fragment");
    // A last fragment (offset 1480 bytes, MF clear) whose bytes happen to look
    // like an acceptable segment.
    let later = tcp4(port, PEER_SEQ, my_seq, data, false, 185);
    dropped_as_fragment(&mut r, &later, c, u, "IPv4 non-first fragment");
    // A middle one (MF set, offset != 0).
    let middle = tcp4(port, PEER_SEQ, my_seq, data, true, 185);
    dropped_as_fragment(&mut r, &middle, c, u, "IPv4 middle fragment");
    assert_eq!(r.e.counters().ip_in_fragments_dropped, 3);

    // The same segment unfragmented is taken, and acknowledged: the connection
    // works and the fragments left no trace in it.
    let whole = tcp4(port, PEER_SEQ, my_seq, data, false, 0);
    r.input(&whole);
    let mut buf = [0u8; 2048];
    let n = r.e.tcp_recv(c, &mut buf).unwrap();
    assert_eq!(&buf[..n], data);
    let acks = r.advance(Duration::from_millis(500));
    let want = PEER_SEQ.wrapping_add(data.len() as u32);
    assert!(
        acks.iter().any(|s| s.ack == want),
        "no ACK of the data: {acks:?}"
    );
    assert_eq!(r.e.counters().tcp_out_rsts, 0);
    assert_eq!(r.e.counters().ip_in_fragments_dropped, 3);
    // And the engine's own data gets across.
    assert_eq!(r.e.tcp_send(c, b"reply"), Ok(5));
    let out = r.segments();
    assert!(out.iter().any(|s| s.payload == b"reply"), "{out:?}");
}

#[test]
fn ipv6_udp_fragments_are_dropped_and_counted() {
    let (mut r, c, _, _, u) = setup();
    let data = b"a datagram in pieces";
    let first = udp6(data, Some((0, true)));
    dropped_as_fragment(&mut r, &first, c, u, "IPv6 first fragment");
    let later = udp6(data, Some((185, false)));
    dropped_as_fragment(&mut r, &later, c, u, "IPv6 non-first fragment");
    assert_eq!(r.e.counters().ip_in_fragments_dropped, 2);

    // Unfragmented, the same datagram is delivered.
    r.input(&udp6(data, None));
    let mut buf = [0u8; 2048];
    let (n, from) = r.e.udp_recv_from(u, &mut buf).unwrap();
    assert_eq!(&buf[..n], data);
    assert_eq!(from, "[fd00::2]:5000".parse().unwrap());
}

/// RFC 6946 section 4: an atomic fragment is processed as a non-fragmented
/// datagram (it needs no reassembly), not counted as a fragment.
#[test]
fn ipv6_atomic_fragment_is_processed_whole() {
    let (mut r, _, _, _, u) = setup();
    let data = b"atomic";
    r.input(&udp6(data, Some((0, false))));
    assert_eq!(r.e.counters().ip_in_fragments_dropped, 0);
    let mut buf = [0u8; 2048];
    let (n, from) = r.e.udp_recv_from(u, &mut buf).unwrap();
    assert_eq!(&buf[..n], data);
    assert_eq!(from, "[fd00::2]:5000".parse().unwrap());
    assert_eq!(
        r.e.udp_recv_from(u, &mut buf),
        Err(UdpRecvError::WouldBlock)
    );
    assert!(r.frames().is_empty());
    // A wrong checksum is still caught behind the Fragment header.
    let mut bad = udp6(data, Some((0, false)));
    let last = bad.len() - 1;
    bad[last] ^= 1;
    r.input(&bad);
    assert_eq!(
        r.e.udp_recv_from(u, &mut buf),
        Err(UdpRecvError::WouldBlock)
    );
    assert_eq!(r.e.counters().udp_in_csum_errors, 1);
}
