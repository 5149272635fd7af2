//! `Config::validate`: each rule rejects what it names, with its variant; the
//! configurations the project uses pass; `Engine::try_new` agrees with it;
//! `Engine::new` never panics on any configuration (proptest over every numeric
//! field, running a handshake, data and a UDP datagram through the simulator);
//! the runtime and the driver refuse a bad configuration with
//! `RtError::Config`.

use linerate_toe::config::{
    MAX_ANNOUNCEMENTS, MAX_DELAYED_ACK, MAX_TCP_BUFFER, MIN_MTU_IPV4, MIN_MTU_IPV6,
    MIN_NEIGHBOR_RETRY,
};
use linerate_toe::sim::{LinkConfig, Sim};
use linerate_toe::{Config, ConfigError, Engine, Instant};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

fn host() -> Config {
    Sim::host_config(1)
}

/// `edit` applied to host 1's configuration, validated.
fn check(edit: impl FnOnce(&mut Config)) -> Result<(), ConfigError> {
    let mut c = host();
    edit(&mut c);
    c.validate()
}

#[test]
fn defaults_and_sim_hosts_are_valid() {
    assert_eq!(Config::new([2, 0, 0, 0, 0, 1]).validate(), Ok(()));
    for i in 1..=4 {
        assert_eq!(Sim::host_config(i).validate(), Ok(()));
    }
    let v4only = Config::new([2, 0, 0, 0, 0, 1]).with_ipv4(Ipv4Addr::new(10, 0, 0, 1), 24);
    assert_eq!(v4only.validate(), Ok(()));
}

#[test]
fn mac_must_be_unicast_and_nonzero() {
    for mac in [
        [0; 6],
        [0xff; 6],
        [0x01, 0, 0x5e, 0, 0, 1],
        [0x33, 0x33, 0, 0, 0, 1],
    ] {
        assert_eq!(check(|c| c.mac = mac), Err(ConfigError::Mac { mac }));
    }
    // Locally administered unicast is fine.
    assert_eq!(check(|c| c.mac = [0x06, 1, 2, 3, 4, 5]), Ok(()));
}

#[test]
fn prefix_lengths_fit_the_address() {
    assert_eq!(check(|c| c.ipv4.as_mut().unwrap().prefix_len = 32), Ok(()));
    assert_eq!(
        check(|c| c.ipv4.as_mut().unwrap().prefix_len = 33),
        Err(ConfigError::PrefixLen {
            field: "ipv4.prefix_len",
            value: 33,
            max: 32
        })
    );
    assert_eq!(check(|c| c.ipv6.as_mut().unwrap().prefix_len = 128), Ok(()));
    assert_eq!(
        check(|c| c.ipv6.as_mut().unwrap().prefix_len = 200),
        Err(ConfigError::PrefixLen {
            field: "ipv6.prefix_len",
            value: 200,
            max: 128
        })
    );
}

#[test]
fn addresses_must_be_usable_sources() {
    for a in [
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::BROADCAST,
        Ipv4Addr::new(224, 0, 0, 1),
        Ipv4Addr::new(239, 1, 2, 3),
    ] {
        assert_eq!(
            check(|c| c.ipv4.as_mut().unwrap().addr = a),
            Err(ConfigError::Address {
                field: "ipv4.addr",
                addr: IpAddr::V4(a)
            })
        );
    }
    for a in [
        Ipv6Addr::UNSPECIFIED,
        Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
    ] {
        assert_eq!(
            check(|c| c.ipv6.as_mut().unwrap().addr = a),
            Err(ConfigError::Address {
                field: "ipv6.addr",
                addr: IpAddr::V6(a)
            })
        );
    }
}

#[test]
fn mtu_covers_the_families_configured() {
    // With IPv6: RFC 8200's 1280.
    assert_eq!(check(|c| c.mtu = 1280), Ok(()));
    assert_eq!(
        check(|c| c.mtu = 1279),
        Err(ConfigError::Mtu {
            value: 1279,
            min: 1280
        })
    );
    assert_eq!(MIN_MTU_IPV6, 1280);
    // IPv4 only: 576 (RFC 791's datagram every host accepts).
    assert_eq!(MIN_MTU_IPV4, 576);
    let v4 = |mtu| {
        let mut c = Config::new([2, 0, 0, 0, 0, 1]).with_ipv4(Ipv4Addr::new(10, 0, 0, 1), 24);
        c.mtu = mtu;
        c.validate()
    };
    assert_eq!(v4(576), Ok(()));
    assert_eq!(v4(u16::MAX), Ok(()));
    assert_eq!(
        v4(575),
        Err(ConfigError::Mtu {
            value: 575,
            min: 576
        })
    );
    assert_eq!(v4(0), Err(ConfigError::Mtu { value: 0, min: 576 }));
}

#[test]
fn tcp_buffers_are_nonzero_and_advertisable() {
    // RFC 7323 section 2.3: scale 14 over a 16-bit field.
    assert_eq!(MAX_TCP_BUFFER, 1 << 30);
    for field in ["tcp.send_buffer", "tcp.recv_buffer"] {
        let set = |c: &mut Config, v| match field {
            "tcp.send_buffer" => c.tcp.send_buffer = v,
            _ => c.tcp.recv_buffer = v,
        };
        assert_eq!(check(|c| set(c, 1)), Ok(()));
        assert_eq!(check(|c| set(c, 1 << 30)), Ok(()));
        for value in [0, (1 << 30) + 1, usize::MAX] {
            assert_eq!(
                check(|c| set(c, value)),
                Err(ConfigError::TcpBuffer {
                    field,
                    value,
                    max: 1 << 30
                })
            );
        }
    }
    // An initial receive buffer above the maximum is documented (auto-tuning
    // off), not an error.
    assert_eq!(check(|c| c.tcp.recv_buffer_initial = usize::MAX), Ok(()));
}

#[test]
fn rto_bounds() {
    let ms = Duration::from_millis;
    assert_eq!(
        check(|c| c.tcp.min_rto = Duration::ZERO),
        Err(ConfigError::MinRto {
            value: Duration::ZERO
        })
    );
    assert_eq!(
        check(|c| {
            c.tcp.min_rto = ms(300);
            c.tcp.max_rto = ms(200);
        }),
        Err(ConfigError::RtoBounds {
            min_rto: ms(300),
            max_rto: ms(200)
        })
    );
    assert_eq!(
        check(|c| {
            c.tcp.min_rto = ms(1);
            c.tcp.max_rto = ms(1);
        }),
        Ok(())
    );
}

#[test]
fn delayed_ack_is_under_half_a_second() {
    assert_eq!(MAX_DELAYED_ACK, Duration::from_millis(500));
    assert_eq!(check(|c| c.tcp.delayed_ack = Duration::ZERO), Ok(()));
    assert_eq!(
        check(|c| c.tcp.delayed_ack = Duration::from_millis(499)),
        Ok(())
    );
    for value in [Duration::from_millis(500), Duration::MAX] {
        assert_eq!(
            check(|c| c.tcp.delayed_ack = value),
            Err(ConfigError::DelayedAck {
                value,
                max: MAX_DELAYED_ACK
            })
        );
    }
}

#[test]
fn counts_that_must_be_at_least_one() {
    type Edit = fn(&mut Config);
    let cases: [(&str, Edit); 7] = [
        ("tcp.backlog", |c| c.tcp.backlog = 0),
        ("udp.recv_buffer", |c| c.udp.recv_buffer = 0),
        ("udp.recv_datagrams", |c| c.udp.recv_datagrams = 0),
        ("udp.send_buffer", |c| c.udp.send_buffer = 0),
        ("neighbor_queue", |c| c.neighbor_queue = 0),
        ("neighbor_max", |c| c.neighbor_max = 0),
        ("pmtu_entries", |c| c.pmtu_entries = 0),
    ];
    for (field, edit) in cases {
        assert_eq!(check(edit), Err(ConfigError::Zero { field }), "{field}");
    }
}

#[test]
fn neighbor_retry_and_announcements_are_bounded() {
    assert_eq!(check(|c| c.neighbor_retry = MIN_NEIGHBOR_RETRY), Ok(()));
    assert_eq!(
        check(|c| c.neighbor_retry = Duration::from_micros(999)),
        Err(ConfigError::NeighborRetry {
            value: Duration::from_micros(999),
            min: Duration::from_millis(1)
        })
    );
    assert_eq!(check(|c| c.announcements = MAX_ANNOUNCEMENTS), Ok(()));
    assert_eq!(
        check(|c| c.announcements = u32::MAX),
        Err(ConfigError::Announcements {
            value: u32::MAX,
            max: MAX_ANNOUNCEMENTS
        })
    );
}

#[test]
fn errors_display_the_field() {
    let e = check(|c| c.tcp.backlog = 0).unwrap_err();
    assert!(e.to_string().contains("tcp.backlog"), "{e}");
    let e: Box<dyn std::error::Error> = Box::new(check(|c| c.mtu = 9).unwrap_err());
    assert!(e.to_string().contains("mtu is 9"), "{e}");
}

fn size() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(1),
        Just(usize::MAX),
        0..4096usize,
        any::<usize>()
    ]
}

fn count() -> impl Strategy<Value = u32> {
    prop_oneof![Just(0), Just(1), Just(u32::MAX), 0..8u32, any::<u32>()]
}

fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::MAX),
        (0..2_000_000_000u64).prop_map(Duration::from_nanos),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Every numeric field of a configuration, arbitrary (addresses and MAC are
/// host `i`'s, with arbitrary prefix lengths).
fn config(i: u8) -> impl Strategy<Value = Config> {
    let iface = (
        any::<u16>(),
        any::<u8>(),
        any::<u8>(),
        duration(),
        duration(),
        count(),
        size(),
        size(),
        count(),
        duration(),
    );
    let tcp = (
        (size(), size(), size(), any::<bool>()),
        (duration(), duration(), count(), count()),
        (duration(), duration(), size(), count(), size()),
    );
    let rest = (
        (size(), size(), size()),
        (count(), count(), duration(), size()),
    );
    (iface, tcp, rest).prop_map(move |(iface, tcp, rest)| {
        let mut c = Sim::host_config(i);
        let (mtu, p4, p6, ttl, retry, probes, queue, max, announcements, interval) = iface;
        c.mtu = mtu;
        if let Some(v4) = c.ipv4.as_mut() {
            v4.prefix_len = p4;
        }
        if let Some(v6) = c.ipv6.as_mut() {
            v6.prefix_len = p6;
        }
        (c.neighbor_ttl, c.neighbor_retry, c.neighbor_probes) = (ttl, retry, probes);
        (c.neighbor_queue, c.neighbor_max) = (queue, max);
        (c.announcements, c.announce_interval) = (announcements, interval);
        let ((sb, rb, rbi, autotune), (min_rto, max_rto, retries, syn_retries), t3) = tcp;
        let (delack, msl, backlog, challenge, ofo) = t3;
        let t = &mut c.tcp;
        (t.send_buffer, t.recv_buffer, t.recv_buffer_initial) = (sb, rb, rbi);
        t.recv_autotune = autotune;
        (t.min_rto, t.max_rto, t.max_retries, t.syn_retries) =
            (min_rto, max_rto, retries, syn_retries);
        (t.delayed_ack, t.msl, t.backlog) = (delack, msl, backlog);
        (t.challenge_ack_limit, t.ofo_total) = (challenge, ofo);
        let ((urb, urd, usb), (rate, burst, pmtu_expiry, pmtu_entries)) = rest;
        (c.udp.recv_buffer, c.udp.recv_datagrams, c.udp.send_buffer) = (urb, urd, usb);
        (c.icmp_error_rate, c.icmp_error_burst) = (rate, burst);
        (c.pmtu_expiry, c.pmtu_entries) = (pmtu_expiry, pmtu_entries);
        c
    })
}

/// Steps `sim` until `limit`, at most `steps` times (a configuration that
/// floods at one instant must not hang the test).
fn run(sim: &mut Sim, limit: Instant, steps: usize) {
    for _ in 0..steps {
        if !sim.step(limit) {
            break;
        }
    }
}

/// Two engines with `a` and `b`: a listener on the second, connections to it
/// over IPv4 and IPv6 with data each way, UDP datagrams (one to a closed
/// port), closes, then far-off timers. Returns the connections accepted.
fn exchange(a: Config, b: Config, seed: u64) -> usize {
    let engines = vec![Engine::new(a, seed), Engine::new(b, seed ^ 1)];
    let mut sim = Sim::new(
        engines,
        LinkConfig {
            mtu: 1500,
            ..LinkConfig::default()
        },
    );
    let listener = sim.engines[1].tcp_listen(80);
    let server_v4 = SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).into(), 80);
    let server_v6 = SocketAddr::new(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).into(), 80);
    let now = sim.now;
    let c4 = sim.engines[0].tcp_connect(now, server_v4);
    let c6 = sim.engines[0].tcp_connect(now, server_v6);
    let u = sim.engines[0].udp_bind(SocketAddr::new(Ipv4Addr::new(10, 0, 0, 1).into(), 5000));
    let _ = sim.engines[1].udp_bind(SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).into(), 5001));
    if let Ok(u) = u {
        let to = SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).into(), 5001);
        let _ = sim.engines[0].udp_send_to(u, &[7; 1200], to);
        let _ = sim.engines[0].udp_send_to(
            u,
            &[8; 600],
            SocketAddr::new(Ipv4Addr::new(10, 0, 0, 2).into(), 9),
        );
    }
    run(&mut sim, Instant::from_millis(2), 400);
    let data = vec![0x5a; 20_000];
    for c in [c4, c6].into_iter().flatten() {
        let _ = sim.engines[0].tcp_send(c, &data);
    }
    let mut accepted = Vec::new();
    if let Ok(l) = listener {
        while let Ok(s) = sim.engines[1].tcp_accept(l) {
            let _ = sim.engines[1].tcp_send(s, &data);
            accepted.push(s);
        }
    }
    run(&mut sim, Instant::from_millis(6), 400);
    let mut buf = [0u8; 4096];
    for &s in &accepted {
        while matches!(sim.engines[1].tcp_recv(s, &mut buf), Ok(n) if n > 0) {}
        let _ = sim.engines[1].tcp_close(s);
    }
    for c in [c4, c6].into_iter().flatten() {
        while matches!(sim.engines[0].tcp_recv(c, &mut buf), Ok(n) if n > 0) {}
        let _ = sim.engines[0].tcp_close(c);
    }
    run(&mut sim, Instant::from_millis(10), 400);
    // Far timers (RTO, TIME-WAIT, keepalive, neighbour expiry) too.
    let later = sim.now + Duration::from_secs(3600);
    for e in &mut sim.engines {
        e.handle_timeout(later);
        let _ = e.poll_timeout();
    }
    accepted.len()
}

#[test]
fn the_exchange_connects_with_valid_configs() {
    assert_eq!(exchange(Sim::host_config(1), Sim::host_config(2), 7), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// `Engine::new` takes any configuration without panicking, through a
    /// handshake attempt (SYN to a listener), some data each way and a UDP
    /// datagram over IPv4 and IPv6; `try_new` accepts exactly the
    /// configurations `validate` does.
    #[test]
    fn any_config_runs_without_panicking(a in config(1), b in config(2), seed in any::<u64>()) {
        prop_assert_eq!(Engine::try_new(a.clone(), seed).is_ok(), a.validate().is_ok());
        prop_assert_eq!(Engine::try_new(b.clone(), seed).is_ok(), b.validate().is_ok());
        exchange(a, b, seed);
    }
}
