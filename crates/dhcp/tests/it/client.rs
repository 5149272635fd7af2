//! The client's state machine fed dnsmasq's replies (testdata/, captured
//! from dnsmasq 2.90: a 2-minute lease of 10.38.0.90 from 10.38.0.1 with T1
//! 5 s and T2 8 s), their transaction ID set to the one the client chose:
//! selecting, requesting, the ARP probe, renewing at T1, rebinding at T2,
//! expiry, NAKs, the decline of an address another host claims, release.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use linerate_dhcp::{
    ArpProbe, Client, Config, Event, Instant, Io, LostReason, Message, MessageType, State, Transmit,
};
use std::net::Ipv4Addr;
use std::time::Duration;

const MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0x00, 0x00, 0x38];
const ADDR: Ipv4Addr = Ipv4Addr::new(10, 38, 0, 90);
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 38, 0, 1);

fn capture(name: &str) -> Vec<u8> {
    let p = format!("{}/testdata/{name}.bin", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

/// A reply of dnsmasq's, made the answer to transaction `xid`.
fn reply(name: &str, xid: u32) -> Vec<u8> {
    let mut b = capture(name);
    b[4..8].copy_from_slice(&xid.to_be_bytes());
    b
}

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn client() -> Client {
    let mut cfg = Config::new(MAC);
    cfg.arp_probe = ArpProbe {
        count: 2,
        wait: Duration::from_millis(100),
        min: Duration::from_millis(100),
        max: Duration::from_millis(200),
        announce_wait: Duration::from_millis(500),
    };
    Client::new(cfg, 7)
}

/// The client's messages and probes, parsed.
fn sent(c: &mut Client) -> (Vec<(Transmit, Message)>, Vec<Ipv4Addr>) {
    let (mut msgs, mut probes) = (Vec::new(), Vec::new());
    while let Some(io) = c.poll_io() {
        match io {
            Io::Send(t) => {
                let m = Message::parse(&t.data).unwrap();
                msgs.push((t, m));
            }
            Io::ArpProbe { target } => probes.push(target),
        }
    }
    (msgs, probes)
}

fn one(c: &mut Client) -> (Transmit, Message) {
    let (mut m, p) = sent(c);
    assert!(p.is_empty(), "no probe: {p:?}");
    assert_eq!(m.len(), 1, "one message: {m:?}");
    m.remove(0)
}

fn events(c: &mut Client) -> Vec<Event> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// Runs the client's timers up to `until`, collecting what it sends.
fn run_until(c: &mut Client, until: Instant) -> (Vec<(Transmit, Message)>, Vec<Ipv4Addr>) {
    let (mut msgs, mut probes) = (Vec::new(), Vec::new());
    while let Some(t) = c.poll_timeout().filter(|t| *t <= until) {
        c.handle_timeout(t);
        let (m, p) = sent(c);
        msgs.extend(m);
        probes.extend(p);
    }
    (msgs, probes)
}

/// DISCOVER, dnsmasq's OFFER, REQUEST, dnsmasq's ACK at `t0` ms, the probe:
/// a client bound to 10.38.0.90 at about `t0` + 0.9 s.
fn bound(c: &mut Client) -> Instant {
    c.handle_timeout(ms(0));
    let (t, d) = one(c);
    assert_eq!(d.kind(), Some(MessageType::Discover));
    assert_eq!((t.src, t.dst), (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST));
    assert_eq!(d.chaddr[..6], MAC);
    assert_eq!(c.state(), State::Selecting);
    c.handle_message(ms(10), &reply("offer", d.xid));
    let (t, r) = one(c);
    assert_eq!(r.kind(), Some(MessageType::Request));
    assert_eq!(t.dst, Ipv4Addr::BROADCAST);
    assert_eq!(r.xid, d.xid, "the same transaction");
    assert_eq!(r.options.requested_ip, Some(ADDR));
    assert_eq!(r.options.server_id, Some(SERVER));
    assert_eq!(r.ciaddr, Ipv4Addr::UNSPECIFIED);
    c.handle_message(ms(20), &reply("ack", r.xid));
    assert_eq!(c.state(), State::Probing);
    assert!(events(c).is_empty(), "not bound before the probe");
    let (m, probes) = run_until(c, ms(2_000));
    assert!(m.is_empty());
    assert_eq!(probes, [ADDR, ADDR], "two probes of the offered address");
    assert_eq!(c.state(), State::Bound);
    let ev = events(c);
    let [Event::Bound(l)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(l.addr, ADDR);
    assert_eq!(l.prefix_len, 24);
    assert_eq!(l.server, SERVER);
    assert_eq!(l.routers, [SERVER]);
    assert_eq!(l.dns_servers, [SERVER]);
    assert_eq!(l.mtu, Some(1400));
    assert_eq!(l.lease_time, Some(Duration::from_secs(120)));
    // The lease counts from the REQUEST (RFC 2131 section 4.4.1).
    assert_eq!(l.acquired, ms(10));
    assert_eq!(l.renew_at(), Some(ms(5_010)));
    ms(10)
}

#[test]
fn selects_requests_probes_and_binds() {
    let mut c = client();
    bound(&mut c);
    assert_eq!(c.poll_timeout(), Some(ms(5_010)), "next: T1");
    let s = c.stats();
    assert_eq!(
        (s.discovers, s.offers, s.requests, s.acks, s.probes),
        (1, 1, 1, 1, 2)
    );
}

#[test]
fn renews_at_t1_by_unicast() {
    let mut c = client();
    bound(&mut c);
    let (m, _) = run_until(&mut c, ms(5_010));
    let [(t, r)] = &m[..] else { panic!("{m:?}") };
    assert_eq!(c.state(), State::Renewing);
    assert_eq!((t.src, t.dst), (ADDR, SERVER), "unicast to the server");
    assert_eq!(r.kind(), Some(MessageType::Request));
    assert_eq!(r.ciaddr, ADDR);
    assert_eq!(
        r.options.requested_ip, None,
        "RFC 2131 section 4.3.2: not in RENEWING"
    );
    assert_eq!(r.options.server_id, None);
    c.handle_message(ms(5_020), &reply("ack", r.xid));
    assert_eq!(c.state(), State::Bound);
    let ev = events(&mut c);
    let [Event::Renewed(l)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(l.acquired, ms(5_010));
    assert_eq!(c.poll_timeout(), Some(ms(10_010)));
    assert_eq!(c.stats().renewals, 1);
}

#[test]
fn rebinds_at_t2_by_broadcast() {
    let mut c = client();
    bound(&mut c);
    // The server does not answer the renewal: at T2 the client broadcasts.
    let (m, _) = run_until(&mut c, ms(8_010));
    assert_eq!(m.len(), 2, "one renewal, then the rebinding request: {m:?}");
    let (t, r) = &m[1];
    assert_eq!(c.state(), State::Rebinding);
    assert_eq!((t.src, t.dst), (ADDR, Ipv4Addr::BROADCAST));
    assert_eq!(r.ciaddr, ADDR);
    c.handle_message(ms(8_020), &reply("ack", r.xid));
    assert_eq!(c.state(), State::Bound);
    assert!(matches!(events(&mut c)[..], [Event::Renewed(_)]));
    assert_eq!(c.stats().rebinds, 1);
}

#[test]
fn expires_and_starts_over() {
    let mut c = client();
    bound(&mut c);
    let (m, _) = run_until(&mut c, ms(120_010));
    let last = &m.last().unwrap().1;
    assert_eq!(last.kind(), Some(MessageType::Discover), "looking again");
    assert_eq!(c.state(), State::Selecting);
    let ev = events(&mut c);
    let [
        Event::Lost {
            lease,
            reason: LostReason::Expired,
        },
    ] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(lease.addr, ADDR);
    assert!(c.lease().is_none());
    // Rebinding retransmits no sooner than every 60 s (RFC 2131 4.4.5).
    let rebinds = m
        .iter()
        .filter(|(t, r)| r.kind() == Some(MessageType::Request) && t.dst == Ipv4Addr::BROADCAST)
        .count();
    assert!((1..=3).contains(&rebinds), "{rebinds} rebinding requests");
}

#[test]
fn nak_while_renewing_loses_the_lease() {
    let mut c = client();
    bound(&mut c);
    let (m, _) = run_until(&mut c, ms(5_010));
    let xid = m[0].1.xid;
    c.handle_message(ms(5_020), &reply("nak", xid));
    let ev = events(&mut c);
    assert!(
        matches!(&ev[..], [Event::Lost { reason: LostReason::Nak, lease }] if lease.addr == ADDR),
        "{ev:?}"
    );
    let (m, _) = run_until(&mut c, ms(5_020));
    assert_eq!(m[0].1.kind(), Some(MessageType::Discover));
}

#[test]
fn nak_while_requesting_starts_over() {
    let mut c = client();
    c.handle_timeout(ms(0));
    let (_, d) = one(&mut c);
    c.handle_message(ms(10), &reply("offer", d.xid));
    let (_, r) = one(&mut c);
    c.handle_message(ms(20), &reply("nak", r.xid));
    assert_eq!(c.state(), State::Init);
    assert!(events(&mut c).is_empty(), "nothing was bound");
    let (m, _) = run_until(&mut c, ms(20));
    assert_eq!(m[0].1.kind(), Some(MessageType::Discover));
    assert_ne!(m[0].1.xid, d.xid, "a new transaction");
    assert_eq!(c.stats().naks, 1);
}

#[test]
fn declines_an_address_another_host_claims() {
    let mut c = client();
    c.handle_timeout(ms(0));
    let (_, d) = one(&mut c);
    c.handle_message(ms(10), &reply("offer", d.xid));
    let (_, r) = one(&mut c);
    c.handle_message(ms(20), &reply("ack", r.xid));
    let (_, probes) = run_until(&mut c, ms(150));
    assert_eq!(probes, [ADDR]);
    // Another host answers the probe: its ARP reply has the address as sender.
    let other = [0x02, 0, 0, 0, 0, 0x99];
    c.handle_arp(ms(160), other, ADDR, Ipv4Addr::UNSPECIFIED);
    let (t, decline) = one(&mut c);
    assert_eq!(decline.kind(), Some(MessageType::Decline));
    assert_eq!((t.src, t.dst), (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST));
    assert_eq!(decline.options.requested_ip, Some(ADDR));
    assert_eq!(decline.options.server_id, Some(SERVER));
    assert_eq!(
        events(&mut c),
        [Event::Declined {
            addr: ADDR,
            by: other
        }]
    );
    assert_eq!(c.state(), State::Init);
    // RFC 2131 section 3.1.5: at least 10 s before starting over.
    assert_eq!(c.poll_timeout(), Some(ms(10_160)));
    assert_eq!(c.stats().declines, 1);
}

#[test]
fn another_prober_is_a_conflict_and_own_probes_are_not() {
    let mut c = client();
    c.handle_timeout(ms(0));
    let (_, d) = one(&mut c);
    c.handle_message(ms(10), &reply("offer", d.xid));
    let (_, r) = one(&mut c);
    c.handle_message(ms(20), &reply("ack", r.xid));
    // Our own probe, looped back: nothing.
    c.handle_arp(ms(30), MAC, Ipv4Addr::UNSPECIFIED, ADDR);
    // An unrelated ARP request: nothing.
    c.handle_arp(
        ms(31),
        [2, 0, 0, 0, 0, 5],
        Ipv4Addr::new(10, 38, 0, 7),
        SERVER,
    );
    assert_eq!(c.state(), State::Probing);
    // Another host probing for the same address (RFC 5227 section 2.1.1).
    c.handle_arp(ms(32), [2, 0, 0, 0, 0, 6], Ipv4Addr::UNSPECIFIED, ADDR);
    assert_eq!(c.state(), State::Init);
    assert!(matches!(events(&mut c)[..], [Event::Declined { .. }]));
}

#[test]
fn replies_of_other_transactions_are_ignored() {
    let mut c = client();
    c.handle_timeout(ms(0));
    let (_, d) = one(&mut c);
    c.handle_message(ms(10), &reply("offer", d.xid ^ 1));
    let mut other = reply("offer", d.xid);
    other[28] ^= 0xff;
    c.handle_message(ms(11), &other);
    c.handle_message(ms(12), &capture("offer")[..100]);
    assert_eq!(c.state(), State::Selecting);
    assert!(sent(&mut c).0.is_empty());
    let s = c.stats();
    assert_eq!((s.ignored, s.malformed), (2, 1));
    // An ACK where an OFFER is expected: ignored too.
    c.handle_message(ms(13), &reply("ack", d.xid));
    assert_eq!(c.state(), State::Selecting);
}

#[test]
fn discover_backs_off() {
    let mut c = client();
    c.handle_timeout(ms(0));
    one(&mut c);
    let mut at = Vec::new();
    while let Some(t) = c
        .poll_timeout()
        .filter(|t| *t < Instant::from_millis(200_000))
    {
        c.handle_timeout(t);
        one(&mut c);
        at.push(t.as_nanos() / 1_000_000);
    }
    // 4, 8, 16, 32, 64, 64 s apart, each within a second either way.
    let gaps: Vec<u64> = std::iter::once(at[0])
        .chain(at.windows(2).map(|w| w[1] - w[0]))
        .collect();
    for (g, want) in gaps
        .iter()
        .zip([4_000u64, 8_000, 16_000, 32_000, 64_000, 64_000])
    {
        assert!(g.abs_diff(want) <= 1_000, "{gaps:?}");
    }
}

#[test]
fn release_tells_the_server_and_stops() {
    let mut c = client();
    bound(&mut c);
    c.release(ms(3_000));
    let (t, m) = one(&mut c);
    assert_eq!(m.kind(), Some(MessageType::Release));
    assert_eq!((t.src, t.dst), (ADDR, SERVER));
    assert_eq!(m.ciaddr, ADDR);
    assert_eq!(m.options.server_id, Some(SERVER));
    assert!(matches!(
        events(&mut c)[..],
        [Event::Lost {
            reason: LostReason::Released,
            ..
        }]
    ));
    assert_eq!(c.state(), State::Stopped);
    assert_eq!(c.poll_timeout(), None);
}

fn rebooting_client() -> Client {
    let mut c = client();
    let mut cfg = c.config().clone();
    cfg.init_reboot = Some(ADDR);
    c = Client::new(cfg, 7);
    c
}

/// RFC 2131 section 4.3.2's INIT-REBOOT REQUEST: broadcast from 0.0.0.0,
/// option 50 the earlier address, no server identifier, `ciaddr` zero.
fn reboot_request(c: &mut Client, at: Instant) -> Message {
    assert_eq!(c.state(), State::InitReboot);
    c.handle_timeout(at);
    let (t, r) = one(c);
    assert_eq!(r.kind(), Some(MessageType::Request));
    assert_eq!((t.src, t.dst), (Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST));
    assert_eq!(r.options.requested_ip, Some(ADDR));
    assert_eq!(r.options.server_id, None, "no server identifier");
    assert_eq!(r.ciaddr, Ipv4Addr::UNSPECIFIED);
    assert_eq!(c.state(), State::Rebooting);
    r
}

#[test]
fn init_reboot_asks_for_the_earlier_address_and_binds_it_after_the_probe() {
    let mut c = rebooting_client();
    let r = reboot_request(&mut c, ms(0));
    c.handle_message(ms(5), &reply("ack", r.xid));
    assert_eq!(c.state(), State::Probing, "probed before use (RFC 5227)");
    let (m, probes) = run_until(&mut c, ms(2_000));
    assert!(m.is_empty());
    assert_eq!(probes, [ADDR, ADDR]);
    let ev = events(&mut c);
    let [Event::Bound(l)] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!((l.addr, l.server, l.acquired), (ADDR, SERVER, ms(0)));
    let s = c.stats();
    assert_eq!((s.discovers, s.requests, s.acks), (0, 1, 1), "no DISCOVER");
    // It renews from then on as any bound client: unicast to the server.
    let (m, _) = run_until(&mut c, ms(5_000));
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].0.dst, SERVER);
    assert_eq!(c.state(), State::Renewing);
}

#[test]
fn init_reboot_nak_starts_over_without_the_address() {
    let mut c = rebooting_client();
    let r = reboot_request(&mut c, ms(0));
    c.handle_message(ms(5), &reply("nak", r.xid));
    assert_eq!(c.state(), State::Init);
    assert!(events(&mut c).is_empty());
    let (m, _) = run_until(&mut c, ms(5));
    assert_eq!(m[0].1.kind(), Some(MessageType::Discover));
    assert_eq!(
        m[0].1.options.requested_ip, None,
        "the refused address is not asked for"
    );
    assert_eq!(c.stats().naks, 1);
}

#[test]
fn init_reboot_without_an_answer_falls_back_to_discover() {
    let mut c = rebooting_client();
    let first = reboot_request(&mut c, ms(0));
    let (m, _) = run_until(&mut c, ms(600_000));
    let requests: Vec<_> = m
        .iter()
        .take_while(|(_, m)| m.kind() == Some(MessageType::Request))
        .collect();
    assert_eq!(requests.len(), 3, "four REQUESTs in all: {m:?}");
    assert!(
        requests
            .iter()
            .all(|(_, r)| r.xid == first.xid && r.options.server_id.is_none())
    );
    let d = &m[3].1;
    assert_eq!(d.kind(), Some(MessageType::Discover));
    assert_eq!(d.options.requested_ip, Some(ADDR), "asks for it again");
    assert_ne!(d.xid, first.xid);
    assert_eq!(c.state(), State::Selecting);
}

#[test]
fn an_unusable_reboot_address_is_ignored() {
    let mut cfg = Config::new(MAC);
    cfg.init_reboot = Some(Ipv4Addr::BROADCAST);
    let mut c = Client::new(cfg, 7);
    assert_eq!(c.state(), State::Init);
    c.handle_timeout(ms(0));
    assert_eq!(one(&mut c).1.kind(), Some(MessageType::Discover));
}
