//! The fuzz harness (feature `harness`): what `fuzz/fuzz_targets/dhcp.rs`
//! and the corpus replay (`tests/fuzz_corpus.rs`) run. Test support, not API.

use crate::client::{ArpProbe, Client, Config, Event, Io, State};
use crate::message::Message;
use crate::time::Instant;
use std::net::Ipv4Addr;
use std::time::Duration;

/// A fuzz target: takes any bytes, panics only on a bug.
pub type Target = fn(&[u8]);

/// Every target of this crate, by corpus directory name.
pub const TARGETS: &[(&str, Target)] = &[("dhcp", dhcp)];

/// What separates the steps of a run in the input.
pub const STEP: &[u8] = b"\n--\n";

const MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x68];

/// The message parser, and a client driven by the same bytes.
///
/// The input is parsed whole as a message (any result is fine; none may
/// panic; what parses emits and parses back the same). Then, for a client
/// that starts in INIT (inputs of even length) or INIT-REBOOT (odd), it is cut at
/// [`STEP`] into steps for a client, each chosen by its first byte: a
/// datagram from a server (the rest, its `op`, `xid` and `chaddr` set to
/// what the client's transaction expects so that it gets past the checks),
/// an ARP packet (sender address from the next four bytes, or the probed
/// address), time running to the client's next deadline, or a release.
/// After every step: the deadline is not in the past, the lease is there
/// exactly in the states that have one, and the events tell a consistent
/// story (an address is lost only after it was bound, and bound once).
pub fn dhcp(data: &[u8]) {
    if let Ok(m) = Message::parse(data) {
        let again = Message::parse(&m.emit());
        assert_eq!(again.as_ref().ok(), Some(&m), "emit and parse round trip");
    }
    let mut cfg = Config::new(MAC);
    cfg.arp_probe = ArpProbe {
        count: 1,
        wait: Duration::from_millis(100),
        min: Duration::from_millis(100),
        max: Duration::from_millis(200),
        announce_wait: Duration::from_millis(200),
    };
    // Inputs of odd length start in INIT-REBOOT.
    if data.len() % 2 == 1 {
        cfg.init_reboot = Some(Ipv4Addr::new(10, 38, 0, 90));
    }
    let mut c = Client::new(cfg, 0x5eed);
    let mut now = Instant::ZERO;
    c.handle_timeout(now);
    let mut bound: Option<Ipv4Addr> = None;
    let mut probing: Option<Ipv4Addr> = None;
    // The transaction of the client's last message.
    let mut xid = 0;
    drain(&mut c, &mut probing, &mut xid);
    for step in split(data).take(64) {
        let Some((&op, rest)) = step.split_first() else {
            continue;
        };
        match op % 4 {
            0 => {
                let mut m = rest.to_vec();
                patch(&mut m, xid);
                c.handle_message(now, &m);
            }
            1 => {
                let spa = rest
                    .get(..4)
                    .and_then(|a| <[u8; 4]>::try_from(a).ok())
                    .map(Ipv4Addr::from)
                    .or(c.lease().map(|l| l.addr))
                    .unwrap_or(Ipv4Addr::UNSPECIFIED);
                let tpa = c.lease().map_or(Ipv4Addr::UNSPECIFIED, |l| l.addr);
                c.handle_arp(now, [2, 0, 0, 0, 0, 1], spa, tpa);
            }
            2 => {
                if let Some(t) = c.poll_timeout() {
                    now = now.max(t);
                    c.handle_timeout(now);
                }
            }
            _ => c.release(now),
        }
        check(&mut c, now, &mut bound, &mut probing, &mut xid);
    }
    // Time runs on: the client keeps going (or stays stopped) and never
    // asks to be called in the past.
    for _ in 0..16 {
        let Some(t) = c.poll_timeout() else { break };
        assert!(t >= now, "a deadline in the past");
        now = t;
        c.handle_timeout(now);
        check(&mut c, now, &mut bound, &mut probing, &mut xid);
    }
}

fn split(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(data);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(STEP.len()).position(|w| w == STEP) {
            Some(i) => {
                rest = r.get(i + STEP.len()..);
                r.get(..i)
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Takes the client's I/O, noting the `xid` of its last message and the
/// address it probes.
fn drain(c: &mut Client, probing: &mut Option<Ipv4Addr>, xid: &mut u32) {
    while let Some(io) = c.poll_io() {
        match io {
            Io::Send(t) => {
                let m = Message::parse(&t.data);
                let m = m.as_ref();
                assert!(m.is_ok(), "the client sends what it parses");
                if let Ok(m) = m {
                    *xid = m.xid;
                }
            }
            Io::ArpProbe { target } => *probing = Some(target),
        }
    }
}

/// Makes `m` a reply to the client's transaction `xid`.
fn patch(m: &mut [u8], xid: u32) {
    if let Some(op) = m.first_mut() {
        *op = crate::message::OP_REPLY;
    }
    if let Some(x) = m.get_mut(4..8) {
        x.copy_from_slice(&xid.to_be_bytes());
    }
    if let Some(ch) = m.get_mut(28..34) {
        ch.copy_from_slice(&MAC);
    }
}

fn check(
    c: &mut Client,
    now: Instant,
    bound: &mut Option<Ipv4Addr>,
    probing: &mut Option<Ipv4Addr>,
    xid: &mut u32,
) {
    drain(c, probing, xid);
    if let Some(t) = c.poll_timeout() {
        assert!(t >= now, "a deadline in the past: {t:?} < {now:?}");
    }
    let has_lease = matches!(
        c.state(),
        State::Probing | State::Bound | State::Renewing | State::Rebinding
    );
    assert_eq!(c.lease().is_some(), has_lease, "lease in {:?}", c.state());
    while let Some(e) = c.poll_event() {
        match e {
            Event::Bound(l) => {
                assert!(bound.is_none(), "bound twice without a loss");
                *bound = Some(l.addr);
            }
            Event::Renewed(l) => assert_eq!(*bound, Some(l.addr), "renewed what is not bound"),
            Event::Lost { lease, .. } => {
                assert_eq!(bound.take(), Some(lease.addr), "lost what was not bound");
            }
            Event::Declined { addr, .. } => {
                assert!(bound.is_none(), "declined while bound");
                // A conflict counts from the ACK on, before the first
                // probe too (RFC 5227 section 2.1.1's PROBE_WAIT).
                assert!(
                    probing.is_none_or(|p| p == addr),
                    "declined {addr}, probed {probing:?}"
                );
                *probing = None;
            }
        }
    }
    if matches!(c.state(), State::Bound | State::Renewing | State::Rebinding) {
        assert_eq!(*bound, c.lease().map(|l| l.addr));
    }
}
