//! Multicast against a Linux bridge that snoops IGMP and MLD and is the
//! querier (issue 38, multicast).
//!
//! Namespace B holds bridge `br` with `mcast_snooping 1 mcast_querier 1`, short
//! query intervals, IGMPv3 and MLDv2; linerate's TAP is a port of it with
//! `mcast_flood off`, so the bridge forwards a group's traffic to the TAP only
//! while its membership database says linerate is a member. A kernel sender in
//! namespace S (a veth port of the bridge) sends a datagram to the group every
//! 20 ms. linerate's engine (driven on the test thread) joins the group on a UDP
//! socket, receives the datagrams, answers the bridge's queries, leaves, and
//! then nothing of the group reaches the TAP any more; the same over IPv6.
//!
//! Every frame on the TAP is written to a pcap that tshark dissects with
//! checksum validation (`checksum.status` 1: good): linerate's IGMPv3 / MLDv2 reports (TTL / hop limit 1,
//! Router Alert, the right record types: CHANGE_TO_EXCLUDE on join,
//! MODE_IS_EXCLUDE answering a general query, CHANGE_TO_INCLUDE on leave) and
//! the bridge's queries.
//!
//! A second test checks the TAP's own filter: with the runtime's `Driver`
//! giving the TAP the engine's groups (`TUNSETTXFILTER`), the kernel drops a
//! group's frames before linerate reads them (its `tx_dropped` grows) until
//! the engine joins the group, and again after it leaves.
//!
//! Needs root and tshark: `cargo test --features system-tests --test system_mcast`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use linerate_nic::tap::{Tap, TapConfig, TapOffloads};
use linerate_nic::{Batch, Frame, Nic};
use linerate_testkit::netns::{self, Netns};
use linerate_testkit::{pcap, tshark};
use linerate_toe::{Config, Engine, Instant, UdpHandle};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const OUR_MAC: [u8; 6] = [0x02, 0x4c, 0x52, 0, 0, 0x38];
const OUR_V4: Ipv4Addr = Ipv4Addr::new(10, 79, 0, 2);
const OUR_V6: Ipv6Addr = Ipv6Addr::new(0xfd79, 0, 0, 0, 0, 0, 0, 2);
const GROUP_V4: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
const GROUP_V6: Ipv6Addr = Ipv6Addr::new(0xff15, 0, 0, 0, 0, 0, 0, 0x1234);
const PORT: u16 = 5038;

fn ok(out: std::io::Result<std::process::Output>, what: &str) {
    netns::must(out, what);
}

struct Lab {
    engine: Engine,
    tap: Tap,
    bridge_ns: Netns,
    sender_ns: Netns,
    epoch: std::time::Instant,
    rx: Batch,
    tx: Batch,
    /// Every frame on the TAP, with when it passed.
    frames: Vec<(Duration, Vec<u8>)>,
}

impl Lab {
    fn new() -> Lab {
        assert!(netns::is_root(), "system tests need root");
        let bridge_ns = Netns::new("lrmcb").unwrap();
        let sender_ns = Netns::new("lrmcs").unwrap();
        let b = |args: &[&str], what: &str| ok(bridge_ns.ip(args), what);
        // Intervals in centiseconds: a query every 2 s (startup ones at
        // 0.5 s), answers within 1 s, a leave settled after 2 x 0.3 s.
        b(
            &[
                "link",
                "add",
                "mcbr",
                "type",
                "bridge",
                "mcast_snooping",
                "1",
                "mcast_querier",
                "1",
                "mcast_igmp_version",
                "3",
                "mcast_mld_version",
                "2",
                "mcast_query_interval",
                "200",
                "mcast_query_response_interval",
                "100",
                "mcast_startup_query_interval",
                "50",
                "mcast_last_member_interval",
                "30",
            ],
            "bridge",
        );
        b(
            &["addr", "add", "10.79.0.254/24", "dev", "mcbr"],
            "bridge v4",
        );
        b(
            &["-6", "addr", "add", "fd79::fe/64", "dev", "mcbr", "nodad"],
            "bridge v6",
        );
        let tap = Tap::open(&TapConfig {
            offloads: TapOffloads::NONE,
            ..TapConfig::new(netns::unique("lrmt"))
        })
        .unwrap();
        ok(
            netns::ip(&["link", "set", tap.name(), "netns", bridge_ns.name()]),
            "tap to ns",
        );
        b(&["link", "set", tap.name(), "master", "mcbr"], "tap port");
        ok(
            bridge_ns.exec(
                "bridge",
                &["link", "set", "dev", tap.name(), "mcast_flood", "off"],
            ),
            "mcast_flood off",
        );
        b(&["link", "set", tap.name(), "up"], "tap up");
        // The sender's veth, its peer a bridge port.
        let veth = netns::unique("lrmv");
        ok(
            netns::ip(&[
                "link",
                "add",
                &veth,
                "netns",
                sender_ns.name(),
                "type",
                "veth",
                "peer",
                "name",
                "port1",
                "netns",
                bridge_ns.name(),
            ]),
            "veth",
        );
        b(&["link", "set", "port1", "master", "mcbr"], "veth port");
        b(&["link", "set", "port1", "up"], "veth port up");
        b(&["link", "set", "mcbr", "up"], "bridge up");
        let s = |args: &[&str], what: &str| ok(sender_ns.ip(args), what);
        s(&["addr", "add", "10.79.0.1/24", "dev", &veth], "sender v4");
        s(
            &["-6", "addr", "add", "fd79::1/64", "dev", &veth, "nodad"],
            "sender v6",
        );
        s(&["link", "set", &veth, "up"], "sender up");
        s(
            &["route", "add", "224.0.0.0/4", "dev", &veth],
            "sender mroute",
        );
        let mut cfg = Config::new(OUR_MAC)
            .with_ipv4(OUR_V4, 24)
            .with_ipv6(OUR_V6, 64);
        cfg.offloads = false;
        cfg.announcements = 0;
        Lab {
            engine: Engine::new(cfg, 0x3838),
            tap,
            bridge_ns,
            sender_ns,
            epoch: std::time::Instant::now(),
            rx: Batch::new(),
            tx: Batch::new(),
            frames: Vec::new(),
        }
    }

    fn now(&self) -> Instant {
        Instant::from_nanos(self.epoch.elapsed().as_nanos() as u64)
    }

    fn pump(&mut self) {
        let now = self.now();
        let at = self.epoch.elapsed();
        loop {
            let n = self.tap.receive(0, &mut self.rx, 64).unwrap();
            for f in self.rx.drain(..) {
                self.frames.push((at, f.bytes().to_vec()));
                self.engine.handle_frame(now, f.bytes(), &f.meta);
            }
            if n < 64 {
                break;
            }
        }
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
        }
        let (tx, pool, frames) = (&mut self.tx, self.tap.pool(), &mut self.frames);
        self.engine.poll_transmit(now, &mut |f, m| {
            frames.push((at, f.to_vec()));
            tx.push(Frame::new(pool.alloc_from(f), *m));
        });
        while !self.tx.is_empty() {
            self.tap.transmit(0, &mut self.tx).unwrap();
        }
        self.tap
            .readiness(0)
            .unwrap()
            .wait(Duration::from_millis(2))
            .unwrap();
    }

    fn pump_for(&mut self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end {
            self.pump();
        }
    }

    fn pump_until(&mut self, limit: Duration, what: &str, mut done: impl FnMut(&mut Lab) -> bool) {
        let end = std::time::Instant::now() + limit;
        while !done(self) {
            assert!(std::time::Instant::now() < end, "timed out: {what}");
            self.pump();
        }
    }

    /// Datagrams waiting on `h`, taken.
    fn drain(&mut self, h: UdpHandle) -> usize {
        let mut n = 0;
        while self.engine.udp_recv_with(h, |_, _| ()).is_ok() {
            n += 1;
        }
        n
    }

    /// The bridge's membership database.
    fn mdb(&self) -> String {
        let out = self.bridge_ns.exec("bridge", &["mdb", "show"]).unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A kernel sender in namespace S: a datagram to `group` every 20 ms until stopped.
fn sender(
    lab: &Lab,
    group: IpAddr,
) -> (
    Arc<AtomicBool>,
    std::thread::JoinHandle<std::io::Result<()>>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let h = lab
        .sender_ns
        .spawn(move || {
            let bind: SocketAddr = if group.is_ipv6() {
                "[::]:0".parse().unwrap()
            } else {
                "0.0.0.0:0".parse().unwrap()
            };
            let s = UdpSocket::bind(bind).unwrap();
            let mut i = 0u32;
            while !flag.load(Ordering::Relaxed) {
                let _ = s.send_to(&i.to_be_bytes(), SocketAddr::new(group, PORT));
                i += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
        })
        .unwrap();
    (stop, h)
}

/// Frames on the TAP to the group's Ethernet address after `since`.
fn group_frames(lab: &Lab, group: IpAddr, since: Duration) -> usize {
    let mac: [u8; 6] = match group {
        IpAddr::V4(a) => {
            let o = a.octets();
            [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [0x33, 0x33, o[12], o[13], o[14], o[15]]
        }
    };
    lab.frames
        .iter()
        .filter(|(t, f)| *t >= since && f.get(..6) == Some(&mac[..]))
        .count()
}

/// Join, receive, answer a query, leave, then nothing: for `group`.
fn membership(lab: &mut Lab, group: IpAddr) {
    let v6 = group.is_ipv6();
    let any: SocketAddr = if v6 { "[::]:0" } else { "0.0.0.0:0" }.parse().unwrap();
    let u = lab
        .engine
        .udp_bind(SocketAddr::new(any.ip(), PORT))
        .unwrap();
    let (stop, th) = sender(lab, group);
    // Not joined: the bridge keeps the group's traffic from the TAP.
    lab.pump_for(Duration::from_millis(500));
    assert_eq!(lab.drain(u), 0, "datagrams before the join");
    let queries = |l: &Lab| {
        let c = &l.engine.counters().mcast;
        if v6 {
            c.mld_queries_in
        } else {
            c.igmp_queries_in
        }
    };
    let reports = |l: &Lab| {
        let c = &l.engine.counters().mcast;
        if v6 {
            c.mld_reports_out
        } else {
            c.igmp_reports_out
        }
    };
    lab.engine.udp_join_multicast(u, group).unwrap();
    let mut got = 0;
    lab.pump_until(
        Duration::from_secs(10),
        "group datagrams after the join",
        |l| {
            got += l.drain(u);
            got >= 10
        },
    );
    let (q0, r0) = (queries(lab), reports(lab));
    lab.pump_until(Duration::from_secs(10), "a query answered", |l| {
        queries(l) > q0 && reports(l) > r0 + 1
    });
    let mdb = lab.mdb();
    let g = group.to_string();
    assert!(
        mdb.lines()
            .any(|l| l.contains(lab.tap.name()) && l.contains(&g)),
        "bridge mdb lacks {g} on the TAP:\n{mdb}"
    );
    lab.engine.udp_leave_multicast(u, group).unwrap();
    // The bridge's group-specific queries and the last member interval.
    lab.pump_until(
        Duration::from_secs(10),
        "the bridge forgets the member",
        |l| !l.mdb().lines().any(|x| x.contains(&g)),
    );
    lab.pump_for(Duration::from_millis(200));
    lab.drain(u);
    let quiet = lab.epoch.elapsed();
    lab.pump_for(Duration::from_millis(1500));
    assert_eq!(lab.drain(u), 0, "datagrams after the leave");
    assert_eq!(
        group_frames(lab, group, quiet),
        0,
        "the group's frames reach the TAP after the leave"
    );
    stop.store(true, Ordering::Relaxed);
    th.join().unwrap().unwrap();
    lab.engine.udp_close(u).unwrap();
}

/// Values of tshark `fields` per frame of `pcap` matching `filter`.
fn dissect(pcap: &std::path::Path, filter: &str, fields: &[&str]) -> Vec<Vec<String>> {
    tshark::fields(pcap, fields, &["-Y", filter]).unwrap()
}

#[test]
fn joins_receives_answers_and_leaves_v4_and_v6() {
    assert!(tshark::available(), "tshark is needed");
    let mut lab = Lab::new();
    membership(&mut lab, IpAddr::V4(GROUP_V4));
    membership(&mut lab, IpAddr::V6(GROUP_V6));
    let c = lab.engine.counters().mcast.clone();

    let dir = std::env::temp_dir().join(netns::unique("lrmcap"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("tap.pcap");
    pcap::write(&file, lab.frames.iter().map(|(_, f)| f.as_slice())).unwrap();
    assert_eq!(c.igmp_in_errors, 0, "{c:?}");
    // RFC 3810 section 5.1.14: queries not from a link-local source (the
    // bridge's first ones, sent from its global address while its
    // link-local one is still tentative) are dropped and counted; every
    // general query from a link-local source is taken.
    let unlinked = dissect(
        &file,
        "icmpv6.type == 130 && !(ipv6.src == fe80::/10)",
        &["ipv6.src"],
    );
    let linked = dissect(
        &file,
        "icmpv6.type == 130 && ipv6.src == fe80::/10 && ipv6.dst == ff02::1",
        &["ipv6.src"],
    );
    assert!(!linked.is_empty());
    assert!(
        c.mld_in_errors <= unlinked.len() as u64,
        "{c:?} {unlinked:?}"
    );
    assert!(c.mld_queries_in >= linked.len() as u64, "{c:?} {linked:?}");
    let mac = "02:4c:52:00:00:38";

    // IGMP from linerate: IGMPv3 reports to 224.0.0.22, TTL 1, Router Alert,
    // checksums good.
    let igmp = dissect(
        &file,
        &format!("igmp && eth.src == {mac}"),
        &[
            "ip.dst",
            "ip.ttl",
            "ip.opt.ra",
            "igmp.type",
            "igmp.checksum.status",
            "igmp.record_type",
            "igmp.maddr",
            "ip.checksum.status",
        ],
    );
    assert!(!igmp.is_empty(), "no IGMP from linerate");
    let mut kinds = Vec::new();
    for r in &igmp {
        assert_eq!(r[0], "224.0.0.22", "{r:?}");
        assert_eq!(r[1], "1", "{r:?}");
        assert_eq!(r[2], "0", "Router Alert value: {r:?}");
        assert_eq!(r[3], "0x22", "{r:?}");
        assert_eq!(r[4], "1", "IGMP checksum good: {r:?}");
        assert_eq!(r[7], "1", "IP checksum good: {r:?}");
        assert!(r[6].split(',').all(|g| g == "239.1.2.3"), "{r:?}");
        kinds.extend(r[5].split(',').map(str::to_owned));
    }
    // CHANGE_TO_EXCLUDE (4) twice on join, MODE_IS_EXCLUDE (2) for the
    // general query, CHANGE_TO_INCLUDE (3) twice on leave.
    let count = |k: &[String], t: &str| k.iter().filter(|x| *x == t).count();
    assert!(count(&kinds, "4") >= 2, "IGMP records: {kinds:?}");
    assert!(count(&kinds, "2") >= 1, "IGMP records: {kinds:?}");
    assert!(count(&kinds, "3") >= 2, "IGMP records: {kinds:?}");
    let pos = |k: &[String], t: &str| k.iter().position(|x| x == t).unwrap();
    assert!(
        pos(&kinds, "4") < pos(&kinds, "3"),
        "join before leave: {kinds:?}"
    );
    let queries = dissect(
        &file,
        "igmp.type == 0x11",
        &["igmp.version", "igmp.checksum.status"],
    );
    assert!(
        queries.iter().any(|r| r[0] == "3" && r[1] == "1"),
        "{queries:?}"
    );

    // MLD from linerate: MLDv2 reports to ff02::16, hop limit 1, a Hop-by-Hop
    // Router Alert, a link-local source, checksums good.
    let mld = dissect(
        &file,
        &format!("icmpv6.type == 143 && eth.src == {mac}"),
        &[
            "ipv6.dst",
            "ipv6.hlim",
            "ipv6.opt.router_alert",
            "icmpv6.checksum.status",
            "icmpv6.mldr.mar.record_type",
            "icmpv6.mldr.mar.multicast_address",
            "ipv6.src",
        ],
    );
    assert!(!mld.is_empty(), "no MLD from linerate");
    let mut kinds = Vec::new();
    for r in &mld {
        assert_eq!(r[0], "ff02::16", "{r:?}");
        assert_eq!(r[1], "1", "{r:?}");
        assert_eq!(r[2], "0", "Router Alert value (MLD): {r:?}");
        assert_eq!(r[3], "1", "ICMPv6 checksum good: {r:?}");
        assert!(r[5].split(',').all(|g| g == "ff15::1234"), "{r:?}");
        assert!(r[6].starts_with("fe80::"), "source not link-local: {r:?}");
        kinds.extend(r[4].split(',').map(str::to_owned));
    }
    assert!(count(&kinds, "4") >= 2, "MLD records: {kinds:?}");
    assert!(count(&kinds, "2") >= 1, "MLD records: {kinds:?}");
    assert!(count(&kinds, "3") >= 2, "MLD records: {kinds:?}");
    assert!(
        pos(&kinds, "4") < pos(&kinds, "3"),
        "join before leave: {kinds:?}"
    );
    let queries = dissect(&file, "icmpv6.type == 130", &["icmpv6.checksum.status"]);
    assert!(queries.iter().any(|r| r[0] == "1"), "{queries:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The TAP's `tx_dropped` in `ns` (frames the kernel did not hand to us).
fn tap_tx_dropped(ns: &Netns, tap: &str) -> u64 {
    let out = ns
        .exec(
            "cat",
            &[&format!("/sys/class/net/{tap}/statistics/tx_dropped")],
        )
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn tap_filter_follows_the_joins() {
    use linerate_rt::Driver;
    assert!(netns::is_root(), "system tests need root");
    let ns = Netns::new("lrmcf").unwrap();
    let tap = Tap::open(&TapConfig {
        offloads: TapOffloads::NONE,
        ..TapConfig::new(netns::unique("lrmf"))
    })
    .unwrap();
    let name = tap.name().to_owned();
    ok(
        netns::ip(&["link", "set", &name, "netns", ns.name()]),
        "tap to ns",
    );
    ok(
        ns.ip(&["addr", "add", "10.80.0.1/24", "dev", &name]),
        "addr",
    );
    ok(ns.ip(&["link", "set", &name, "up"]), "up");
    ok(
        ns.ip(&["route", "add", "224.0.0.0/4", "dev", &name]),
        "mroute",
    );
    let mut cfg = Config::new(OUR_MAC).with_ipv4(Ipv4Addr::new(10, 80, 0, 2), 24);
    cfg.offloads = false;
    cfg.announcements = 0;
    let mut d = Driver::new(Engine::new(cfg, 9), tap, 0).unwrap();
    let epoch = std::time::Instant::now();
    let now = || Instant::from_nanos(epoch.elapsed().as_nanos() as u64);
    let group = Ipv4Addr::new(239, 7, 7, 7);
    let other = Ipv4Addr::new(239, 8, 8, 8);
    let u = d
        .engine_mut()
        .udp_bind("0.0.0.0:5038".parse().unwrap())
        .unwrap();
    // Another group joined: the driver programs the TAP's filter, which
    // `group` is not in.
    d.engine_mut().udp_join_multicast(u, other.into()).unwrap();
    let send = |n: usize| {
        ns.run(move || {
            let s = UdpSocket::bind("10.80.0.1:0").unwrap();
            for _ in 0..n {
                s.send_to(b"g", SocketAddr::new(group.into(), PORT))
                    .unwrap();
            }
        })
        .unwrap();
    };
    let pump = |d: &mut Driver<Tap>, ms: u64| {
        let end = std::time::Instant::now() + Duration::from_millis(ms);
        while std::time::Instant::now() < end {
            d.poll(now()).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    pump(&mut d, 100);
    let drops0 = tap_tx_dropped(&ns, &name);
    let seen0 = d.engine().counters().rx_frames;
    send(20);
    pump(&mut d, 200);
    assert!(
        tap_tx_dropped(&ns, &name) >= drops0 + 20,
        "the kernel drops the group"
    );
    assert_eq!(d.engine().counters().rx_frames, seen0, "nothing read");
    // Joined: the frames come through and reach the socket.
    d.engine_mut().udp_join_multicast(u, group.into()).unwrap();
    pump(&mut d, 100);
    send(20);
    pump(&mut d, 200);
    let mut got = 0;
    while d.engine_mut().udp_recv_with(u, |_, _| ()).is_ok() {
        got += 1;
    }
    assert_eq!(got, 20);
    // Left: dropped by the kernel again.
    d.engine_mut().udp_leave_multicast(u, group.into()).unwrap();
    pump(&mut d, 100);
    let drops1 = tap_tx_dropped(&ns, &name);
    send(20);
    pump(&mut d, 200);
    assert!(
        tap_tx_dropped(&ns, &name) >= drops1 + 20,
        "dropped after the leave"
    );
}
