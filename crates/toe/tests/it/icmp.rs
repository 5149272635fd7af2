//! ICMP errors acted on: path MTU discovery (a simulated path with a smaller MTU
//! answering with "fragmentation needed" / "packet too big"; RFC 5927's
//! sequence-number check; clamping and plateaus; expiry), hard errors failing a
//! connection attempt, soft errors and errors for established connections
//! ignored.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::raw::*;
use common::udp::*;
use common::{pattern, settle};
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{ConnectionError, RecvError, SendError, SocketHandle, TcpState, UdpSendError};
use linerate_wire::etherparse::TcpOptionElement as O;
use linerate_wire::icmp::{v4 as icmpv4, v6 as icmpv6};
use std::net::SocketAddr;
use std::time::Duration;

fn server_addr(v6: bool, port: u16) -> SocketAddr {
    if v6 {
        SocketAddr::new("fd00::2".parse().unwrap(), port)
    } else {
        SocketAddr::new("10.0.0.2".parse().unwrap(), port)
    }
}

/// Sends `data` from engine 0 to a listener on engine 1 at `port`; checks it
/// arrives byte for byte, and that once half of it has arrived no frame is
/// too big for the path any more. Returns the sender's MSS at that point.
fn bulk(sim: &mut Sim, v6: bool, port: u16, data: &[u8]) -> usize {
    let l = sim.engines[1].tcp_listen(port).unwrap();
    let c = sim.engines[0]
        .tcp_connect(sim.now, server_addr(v6, port))
        .unwrap();
    let (mut s, mut sent, mut got) = (None, 0, Vec::new());
    let mut buf = vec![0u8; 64 * 1024];
    let mut mid = None;
    let limit = sim.now + Duration::from_secs(60);
    let ok = sim.run_until(limit, |sim| {
        s = s.or_else(|| sim.engines[1].tcp_accept(l).ok());
        while sent < data.len() {
            match sim.engines[0].tcp_send(c, &data[sent..]) {
                Ok(n) => sent += n,
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        if let Some(s) = s {
            loop {
                match sim.engines[1].tcp_recv(s, &mut buf) {
                    Ok(0) | Err(RecvError::WouldBlock) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) => panic!("recv: {e}"),
                }
            }
        }
        if mid.is_none() && got.len() >= data.len() / 2 {
            let mss = sim.engines[0].tcp_info(c).unwrap().snd_mss;
            mid = Some((sim.link.stats().too_big, mss));
        }
        got.len() == data.len()
    });
    assert!(ok, "transfer stalled at {} of {}", got.len(), data.len());
    assert!(got == data, "bytes differ");
    let (too_big, mss) = mid.unwrap();
    assert_eq!(
        sim.link.stats().too_big,
        too_big,
        "a frame above the path MTU after it was learnt"
    );
    sim.engines[0].tcp_close(c).unwrap();
    sim.engines[1].tcp_close(s.unwrap()).unwrap();
    sim.engines[1].tcp_unlisten(l).unwrap();
    settle(sim, Duration::from_secs(1));
    mss
}

#[test]
fn bulk_transfer_over_a_smaller_path_mtu_is_exact_and_fits_the_path() {
    for offloads in [true, false] {
        for v6 in [false, true] {
            let link = LinkConfig {
                pmtu: Some(1280),
                ..LinkConfig::default()
            };
            let mut sim = Sim::two_hosts(offloads, 11, link);
            let data = pattern(2 << 20, 77);
            let mss = bulk(&mut sim, v6, 80, &data);
            // Path MTU less IP, TCP and the timestamp option.
            let want = if v6 {
                1280 - 40 - 20 - 12
            } else {
                1280 - 20 - 20 - 12
            };
            assert_eq!(mss, want, "offloads {offloads} v6 {v6}");
            let first = sim.link.stats().too_big;
            assert!(first > 0, "the path never refused a frame");
            let c = sim.engines[0].counters();
            assert_eq!(c.pmtu_updates, 1);
            assert_eq!(c.icmp_in_ignored, 0);
            if v6 {
                assert!(c.icmp_in_pkt_too_bigs > 0);
            } else {
                assert!(c.icmp_in_dest_unreachs > 0);
            }
            // A new connection to the same destination starts at the cached
            // path MTU: not one frame refused.
            let data = pattern(1 << 20, 78);
            assert_eq!(bulk(&mut sim, v6, 81, &data), want);
            assert_eq!(sim.link.stats().too_big, first);
            assert_eq!(sim.engines[0].counters().pmtu_updates, 1);
        }
    }
}

#[test]
fn a_learnt_path_mtu_expires() {
    let link = LinkConfig {
        pmtu: Some(1400),
        ..LinkConfig::default()
    };
    let mut sim = Sim::two_hosts(true, 12, link);
    sim.engines[0] = {
        let mut c = Sim::host_config(1);
        c.pmtu_expiry = Duration::from_secs(30);
        linerate_toe::Engine::new(c, 99)
    };
    let data = pattern(256 << 10, 5);
    assert_eq!(bulk(&mut sim, false, 80, &data), 1400 - 52);
    let first = sim.link.stats().too_big;
    sim.now += Duration::from_secs(31);
    // Expired: the interface MTU again, refused again, learnt again.
    assert_eq!(bulk(&mut sim, false, 81, &data), 1400 - 52);
    assert!(sim.link.stats().too_big > first);
    assert_eq!(sim.engines[0].counters().pmtu_updates, 2);
}

/// A connection to 10.0.0.2:80 from a hand-driven engine; the peer offers
/// MSS `mss` and no other option.
fn established(r: &mut Raw, mss: u16) -> (SocketHandle, u32) {
    let c = r.e.tcp_connect(r.now, peer_addr(80)).unwrap();
    let syn = r.segments().remove(0);
    r.answer_syn(c, &syn, &[O::MaximumSegmentSize(mss)]);
    (c, syn.seq.wrapping_add(1))
}

/// The first 28 bytes of `frame`'s IP datagram (header and 8 bytes of TCP),
/// with the quoted sequence number replaced by `seq` if given.
fn quote(frame: &[u8], seq: Option<u32>) -> Vec<u8> {
    let mut q = ip_of(frame)[..28].to_vec();
    if let Some(s) = seq {
        q[24..28].copy_from_slice(&s.to_be_bytes());
    }
    q
}

fn frag_needed(mtu: u16, quoted: &[u8]) -> Vec<u8> {
    icmp4_from([10, 0, 0, 254], |b| {
        icmpv4::emit_frag_needed(b, mtu, quoted).unwrap()
    })
}

#[test]
fn frag_needed_is_validated_then_shrinks_the_mss_and_resends_at_it() {
    let mut r = Raw::host(|_| {});
    let (c, una) = established(&mut r, 1460);
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1460);
    let data = pattern(4000, 9);
    assert_eq!(r.e.tcp_send(c, &data), Ok(4000));
    let frames = r.frames();
    let lens: Vec<usize> = frames
        .iter()
        .map(|f| parse_tcp(f, r.now).unwrap().payload.len())
        .collect();
    assert_eq!(lens, [1460, 1460, 1080]);
    // Sequence numbers outside SND.UNA..SND.MAX: ignored (RFC 5927 4.1).
    for bad in [
        una.wrapping_sub(1),
        una.wrapping_add(4000),
        una.wrapping_add(1 << 30),
    ] {
        r.input(&frag_needed(1200, &quote(&frames[1], Some(bad))));
        assert!(r.frames().is_empty());
        assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1460);
    }
    // A quote of a datagram that was not ours (another source address).
    let mut q = quote(&frames[1], None);
    q[12..16].copy_from_slice(&[10, 0, 0, 9]);
    r.input(&frag_needed(1200, &q));
    // A quote of another connection (another port).
    let mut q = quote(&frames[1], None);
    q[20] ^= 1;
    r.input(&frag_needed(1200, &q));
    // Too short to hold the ports and sequence number.
    r.input(&frag_needed(1200, &ip_of(&frames[1])[..24]));
    assert_eq!(r.e.counters().icmp_in_ignored, 6);
    assert_eq!(r.e.counters().pmtu_updates, 0);
    assert!(r.frames().is_empty());
    // The real thing, quoting the second segment.
    r.input(&frag_needed(1200, &quote(&frames[1], None)));
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1200 - 40);
    assert_eq!(r.e.counters().pmtu_updates, 1);
    // Everything in flight again, from SND.UNA, at the new size.
    let again: Vec<Seen> = r
        .frames()
        .iter()
        .filter_map(|f| parse_tcp(f, r.now))
        .collect();
    let lens: Vec<usize> = again.iter().map(|s| s.payload.len()).collect();
    assert_eq!(lens, [1160, 1160, 1160, 520]);
    assert_eq!(again[0].seq, una);
    let resent: Vec<u8> = again.iter().flat_map(|s| s.payload.clone()).collect();
    assert_eq!(resent, data);
    // The loss was not congestion: the window is not cut, no timer fired.
    assert_eq!(r.e.tcp_info(c).unwrap().ssthresh, usize::MAX);
    assert_eq!(r.e.counters().tcp_timeouts, 0);
    assert_eq!(r.e.counters().tcp_fast_retransmits, 0);
    // A larger MTU later is never taken.
    r.input(&frag_needed(1400, &quote(&frames[1], None)));
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1160);
}

#[test]
fn tiny_and_missing_mtus_are_clamped_or_taken_from_plateaus() {
    // 300 is below Linux's 552 minimum: 552 is used.
    let mut r = Raw::host(|_| {});
    let (c, _) = established(&mut r, 1460);
    r.e.tcp_send(c, &[1; 3000]).unwrap();
    let frames = r.frames();
    r.input(&frag_needed(300, &quote(&frames[0], None)));
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 552 - 40);
    // Zero (an RFC 792 router): the plateau below the quoted length 1500.
    let mut r = Raw::host(|_| {});
    let (c, _) = established(&mut r, 1460);
    r.e.tcp_send(c, &[1; 3000]).unwrap();
    let frames = r.frames();
    r.input(&frag_needed(0, &quote(&frames[0], None)));
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1492 - 40);
}

#[test]
fn packet_too_big_below_1280_is_clamped() {
    let mut r = dual_host(|_| {});
    let c = r.e.tcp_connect(r.now, peer(true, 80)).unwrap();
    let syn = transmit(&mut r);
    let syn_seq = u32::from_be_bytes(ip_of(&syn[0].0)[44..48].try_into().unwrap());
    let port = r.e.tcp_addrs(c).unwrap().0.port();
    // The SYN-ACK, by hand, over IPv6.
    let mut h = linerate_wire::etherparse::TcpHeader::new(80, port, 5000, 60_000);
    h.syn = true;
    h.ack = true;
    h.acknowledgment_number = syn_seq.wrapping_add(1);
    h.set_options(&[O::MaximumSegmentSize(1440)]).unwrap();
    let synack = linerate_wire::build::FrameBuilder::new(
        linerate_wire::build::Ip::v6(PEER6.octets(), ME6.octets()),
        linerate_wire::build::L4::Tcp(h),
    )
    .macs(PEER_MAC, ME_MAC)
    .build(&[]);
    r.input(&synack);
    transmit(&mut r);
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1440);
    r.e.tcp_send(c, &[3; 4000]).unwrap();
    let frames = on_wire(&transmit(&mut r));
    let quoted = &ip_of(&frames[0])[..48];
    let ptb = icmp6_from(PEER6, |b, ip| {
        icmpv6::emit_packet_too_big(b, ip, 1000, quoted).unwrap()
    });
    r.input(&ptb);
    assert_eq!(r.e.tcp_info(c).unwrap().snd_mss, 1280 - 60);
    assert_eq!(r.e.counters().icmp_in_pkt_too_bigs, 1);
}

#[test]
fn port_unreachable_fails_a_connection_attempt_only_when_it_quotes_the_syn() {
    for v6 in [false, true] {
        let mut r = dual_host(|_| {});
        let c = r.e.tcp_connect(r.now, peer(v6, 81)).unwrap();
        let syn = transmit(&mut r);
        let ip = ip_of(&syn[0].0);
        let l4 = if v6 { 40 } else { 20 };
        let good = ip[..l4 + 8].to_vec();
        let mut wrong_seq = good.clone();
        wrong_seq[l4 + 7] ^= 1;
        let unreachable = |code: u8, q: &[u8]| {
            if v6 {
                icmp6_from(PEER6, |b, a| {
                    icmpv6::emit_dest_unreachable(b, a, code, q).unwrap()
                })
            } else {
                icmp4_from(PEER4, |b| {
                    icmpv4::emit_dest_unreachable(b, code, q).unwrap()
                })
            }
        };
        let (port_code, host_code) = if v6 { (4, 3) } else { (3, 1) };
        // Soft (host or address unreachable): the attempt goes on.
        r.input(&unreachable(host_code, &good));
        // Hard, but not for our SYN.
        r.input(&unreachable(port_code, &wrong_seq));
        assert_eq!(r.e.tcp_state(c), Ok(TcpState::SynSent), "v6 {v6}");
        assert_eq!(r.e.counters().icmp_in_ignored, 1);
        // Hard, for our SYN: refused, as an RST would have said.
        r.input(&unreachable(port_code, &good));
        assert_eq!(
            r.e.tcp_readiness(c).unwrap().error,
            Some(ConnectionError::Refused)
        );
        assert_eq!(
            r.e.tcp_recv(c, &mut [0; 4]),
            Err(RecvError::Failed(ConnectionError::Refused))
        );
        let k = r.e.counters();
        assert_eq!((k.tcp_icmp_refused, k.tcp_attempt_fails), (1, 1));
        assert_eq!(k.icmp_in_dest_unreachs, 3);
    }
}

#[test]
fn hard_errors_do_not_abort_an_established_connection() {
    let mut r = Raw::host(|_| {});
    let (c, _) = established(&mut r, 1460);
    r.e.tcp_send(c, b"hello").unwrap();
    let frames = r.frames();
    let q = quote(&frames[0], None);
    for code in [2, 3] {
        r.input(&icmp4_from(PEER4, |b| {
            icmpv4::emit_dest_unreachable(b, code, &q).unwrap()
        }));
    }
    assert_eq!(r.e.tcp_state(c), Ok(TcpState::Established));
    assert_eq!(r.e.tcp_readiness(c).unwrap().error, None);
}

#[test]
fn frag_needed_for_a_udp_socket_lowers_its_largest_datagram() {
    let mut r = dual_host(|c| c.offloads = false);
    let h = r.e.udp_bind("0.0.0.0:4000".parse().unwrap()).unwrap();
    let to = peer(false, 53);
    r.e.udp_send_to(h, &[5; 1400], to).unwrap();
    let out = transmit(&mut r);
    let q = ip_of(&out[0].0)[..28].to_vec();
    r.input(&frag_needed(1000, &q));
    assert_eq!(r.e.udp_max_payload(r.now, to.ip()), 1000 - 28);
    assert_eq!(
        r.e.udp_send_to(h, &[5; 973], to),
        Err(UdpSendError::MessageTooLong)
    );
    assert_eq!(r.e.udp_send_to(h, &[5; 972], to), Ok(972));
    // The same from a port nobody is bound to: ignored.
    let mut r2 = dual_host(|_| {});
    r2.input(&frag_needed(1000, &q));
    assert_eq!(r2.e.udp_max_payload(r2.now, to.ip()), 1472);
    assert_eq!(r2.e.counters().icmp_in_ignored, 1);
}
