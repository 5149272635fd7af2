//! The linerate VTEP with a multicast underlay against Linux's VXLAN device
//! created with `group` (issue 37, "Must show": a multicast group with the
//! kernel's vxlan device, ARP, ping and TCP across, the IGMP join seen in a
//! capture).
//!
//! ```text
//! ns A: kernel TCP ── TAP ══ linerate Vtep (group G) ══ TAP ── ns B: vx0 (group G dev TAP) ── kernel TCP
//! ```
//!
//! Neither side names the other: `vx0` floods to group G and the VTEP's VNI
//! has `group = G` and no flood list, so ARP, neighbour discovery and the
//! first frames cross only through the group; each side then learns the
//! other's MAC behind its unicast underlay address, and the rest goes
//! unicast. A TCP transfer of `LINERATE_BULK_MIB` MiB (8 by default here)
//! each way, SHA-256 checked. Then queries (IGMPv3, or MLDv2 from the
//! kernel's link-local address) are sent from the kernel's side through a
//! packet socket, as a querier on the segment would: five for a group the
//! VTEP did not join, which the TAP's multicast filter (set from the groups
//! joined) must keep from it, one for its group and a general one, which
//! it must hear. `dumpcap` there records
//! the underlay from the start: tshark must read the query as valid, and
//! the VTEP's IGMPv3 (MLDv2) reports: joining G (change to exclude {}), the
//! answer to the query (is exclude {}), and its leave when it stops (change
//! to include {}).
//!
//! Needs root, dumpcap and tshark:
//! `cargo test --features linerate/system-tests --test system_vtep_group -- --test-threads=1`.
#![cfg(feature = "system-tests")]
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod vtep_common;

use linerate::nic::{Shim, ShimConfig};
use linerate::tunnel::bridge::Dest;
use linerate::tunnel::vtep::config::parse;
use linerate::tunnel::vtep::underlay_mac;
use linerate_testkit::netns;
use linerate_testkit::tshark;
use linerate_testkit::vxlan::{IANA_PORT, KernelVtep, VxlanSpec};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use vtep_common::{LocalPort, Running, TempDir, fmt_mac, ping_from, transfer};

const VNI: u32 = 3737;

/// Bytes each way: `LINERATE_BULK_MIB`, 8 MiB when unset.
fn len() -> usize {
    std::env::var("LINERATE_BULK_MIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(8)
        << 20
}

/// dumpcap on the kernel's side of the underlay TAP, writing `pcap` (the
/// first 256 bytes of each frame, every frame: a BPF filter for IGMP missed
/// the reports on this TAP); returns once it records.
fn capture(kernel: &KernelVtep, pcap: &std::path::Path) -> Child {
    let child = kernel
        .ns
        .command("dumpcap")
        .args(["-q", "-s", "256", "-i", &kernel.tap_name, "-w"])
        .arg(pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("dumpcap runs");
    let t0 = Instant::now();
    while !pcap.exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The file is there once the capture is open; a moment for the filter.
    std::thread::sleep(Duration::from_millis(300));
    child
}

/// Sends `frame` out of `dev` in `ns` through a packet socket (the querier
/// a multicast router on the segment would be).
fn send_raw(ns: &linerate_testkit::netns::Netns, dev: &str, frame: Vec<u8>) {
    let dev = std::ffi::CString::new(dev).unwrap();
    let sent = ns
        .run(move || {
            // SAFETY: plain socket calls on a descriptor this closure owns,
            // with buffers that outlive them.
            #[allow(unsafe_code)]
            unsafe {
                let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0);
                assert!(fd >= 0, "packet socket");
                let mut sll: libc::sockaddr_ll = std::mem::zeroed();
                sll.sll_family = libc::AF_PACKET as u16;
                sll.sll_ifindex = libc::if_nametoindex(dev.as_ptr()) as i32;
                sll.sll_halen = 6;
                sll.sll_addr[..6].copy_from_slice(&frame[..6]);
                let n = libc::sendto(
                    fd,
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                    (&raw const sll).cast(),
                    std::mem::size_of::<libc::sockaddr_ll>() as u32,
                );
                libc::close(fd);
                n
            }
        })
        .unwrap();
    assert!(sent > 0, "the query was sent");
}

/// A query from the kernel's side (Max Resp 1 s): IGMPv3 from its underlay
/// address, or MLDv2 from its link-local one, as RFC 3376 section 4.1 and
/// RFC 3810 section 5.1 shape them (TTL / hop limit 1, Router Alert);
/// general, or about `group` and sent to it.
fn query(kernel: &KernelVtep, v6: bool, group: Option<IpAddr>) -> Vec<u8> {
    use linerate::wire::mcast::{igmp, mld};
    let mac = kernel.mac(&kernel.tap_name).unwrap();
    if v6 {
        let out = kernel
            .ns
            .ip(&[
                "-6",
                "-o",
                "addr",
                "show",
                "dev",
                &kernel.tap_name,
                "scope",
                "link",
            ])
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ll: std::net::Ipv6Addr = text
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no link-local address: {text}"));
        // Type 130, Max Resp Code 1000 ms, the group (:: for general), QRV 2,
        // QQIC 125.
        let g = match group {
            Some(IpAddr::V6(g)) => g,
            _ => std::net::Ipv6Addr::UNSPECIFIED,
        };
        let mut m = vec![130, 0, 0, 0, 0x03, 0xe8, 0, 0];
        m.extend_from_slice(&g.octets());
        m.extend_from_slice(&[2, 125, 0, 0]);
        let dst = if g.is_unspecified() {
            mld::ALL_NODES
        } else {
            g
        };
        mld::frame(mac, ll, dst, &m)
    } else {
        let IpAddr::V4(src) = kernel.spec.kernel_underlay else {
            panic!("an IPv4 underlay")
        };
        // Type 0x11, Max Resp Code 10 tenths, the group (0 for general), QRV
        // 2, QQIC 125.
        let g = match group {
            Some(IpAddr::V4(g)) => g,
            _ => std::net::Ipv4Addr::UNSPECIFIED,
        };
        let o = g.octets();
        let mut m = vec![0x11, 10, 0, 0, o[0], o[1], o[2], o[3], 2, 125, 0, 0];
        let c = linerate::wire::checksum::checksum(&m);
        m[2..4].copy_from_slice(&c.to_be_bytes());
        let dst = if g.is_unspecified() {
            igmp::ALL_SYSTEMS
        } else {
            g
        };
        igmp::frame(mac, src, dst, 1, &m)
    }
}

fn stop(mut c: Child) {
    // SIGINT: dumpcap closes the file properly.
    let pid = i32::try_from(c.id()).unwrap();
    // SAFETY: a signal to the child this test spawned.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let _ = c.wait();
}

fn vtep_with_group(underlay_v6: bool, group: IpAddr) {
    assert!(netns::is_root(), "system tests need root");
    assert!(
        tshark::available(),
        "tshark is needed (apt-get install tshark)"
    );
    let what = format!("group {group}");
    let spec = VxlanSpec {
        group: Some(group),
        ..VxlanSpec::new(underlay_v6, VNI, IANA_PORT)
    };
    let mut b = KernelVtep::new("vgb", &spec).unwrap();
    let (a4, a6) = spec.ours_overlay;
    let (b4, b6) = spec.kernel_overlay;
    let mut a = LocalPort::new("vga", true, spec.overlay_mtu(), a4, a6).unwrap();
    let dir = TempDir::new("vgrp");
    let pcap = dir.0.join("underlay.pcap");
    let dump = capture(&b, &pcap);

    let ul = Shim::new(b.take_tap().unwrap(), ShimConfig::all()).unwrap();
    let local = Shim::new(a.take_tap(), ShimConfig::all()).unwrap();
    let prefix = if underlay_v6 { 64 } else { 24 };
    let toml = format!(
        r#"
        [underlay]
        tap = "unused"
        address = "{ours}/{prefix}"

        [[vni]]
        id = {VNI}
        encap = "vxlan"
        group = "{group}"
        ports = ["{name}"]
        "#,
        ours = spec.ours_underlay,
        name = a.name,
    );
    let cfg = parse(&toml).unwrap();
    let vtep = Running::start(&cfg, Box::new(ul), vec![vec![Box::new(local)]]);

    // ARP / ND and pings both ways, through the group first.
    for to in [IpAddr::from(b4), IpAddr::from(b6)] {
        ping_from(&a.ns, to, &what);
    }
    b.ns.ip(&["neigh", "flush", "dev", &b.vxlan_name]).unwrap();
    for to in [IpAddr::from(a4), IpAddr::from(a6)] {
        ping_from(&b.ns, to, &what);
    }
    // The kernel learned A behind the VTEP's unicast address, and the VTEP
    // vx0's MAC behind the kernel's.
    let (a_mac, b_mac) = (a.mac(), b.kernel_overlay_mac().unwrap());
    let fdb =
        b.ns.command("bridge")
            .args(["fdb", "show", "dev", &b.vxlan_name])
            .output()
            .unwrap();
    let fdb = String::from_utf8_lossy(&fdb.stdout).into_owned();
    let want = format!("{} dst {}", fmt_mac(a_mac), spec.ours_underlay);
    assert!(
        fdb.lines().any(|l| l.starts_with(&want)),
        "{what}: `bridge fdb show dev vx0` lacks {want:?}:\n{fdb}"
    );
    let dump_fdb = vtep.dump();
    let listing = dump_fdb
        .iter()
        .map(|r| format!("\n  {r}"))
        .collect::<String>();
    let at_b = dump_fdb
        .iter()
        .find(|r| r.mac == b_mac)
        .unwrap_or_else(|| panic!("{what}: no entry for vx0:{listing}"));
    assert_eq!(at_b.dest, Dest::Remote(spec.kernel_underlay), "{what}");
    assert!(
        dump_fdb
            .iter()
            .any(|r| r.mac == [0; 6] && r.dest == Dest::Remote(group)),
        "{what}: the group as the flood entry:{listing}"
    );

    let server = if underlay_v6 {
        IpAddr::from(b6)
    } else {
        IpAddr::from(b4)
    };
    let secs = transfer(&a.ns, &b.ns, SocketAddr::new(server, 5001), len(), &what);
    let rx_group = vtep.counter(&format!("vni{VNI}.tunnel.rx_decap"));
    eprintln!(
        "{what}: {} MiB each way in {secs:.2} s; {rx_group} frames decapsulated\n{}",
        len() >> 20,
        vtep.nonzero()
    );
    assert!(
        vtep.counter("vtep.mcast_reports") >= 1,
        "{what}: reports sent"
    );
    // A querier on the segment asks: the VTEP answers with its group's
    // current state (IS_EX {}) within the Max Resp Time of 1 s.
    let queries = vtep.counter("vtep.mcast_queries");
    // Queries for a group the VTEP did not join, sent to that group: the
    // TAP's multicast filter (TUNSETTXFILTER, set from the groups joined)
    // keeps them from the VTEP.
    let other: IpAddr = if underlay_v6 {
        "ff05::7f7f".parse().unwrap()
    } else {
        IpAddr::from([239, 127, 127, 127])
    };
    for _ in 0..5 {
        send_raw(&b.ns, &b.tap_name, query(&b, underlay_v6, Some(other)));
    }
    // One for the VTEP's own group, and a general one, do reach it.
    send_raw(&b.ns, &b.tap_name, query(&b, underlay_v6, Some(group)));
    send_raw(&b.ns, &b.tap_name, query(&b, underlay_v6, None));
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        vtep.counter("vtep.mcast_queries"),
        queries + 2,
        "{what}: the two queries for it heard, the five for {other} filtered"
    );
    // Stopping: the groups are left while the underlay is still there.
    assert_eq!(vtep.with(|v| v.leave_groups()), 1);
    std::thread::sleep(Duration::from_millis(300));
    stop(dump);
    drop(vtep);

    // The capture, read by tshark: the VTEP's report joining the group, and
    // its leave.
    let ours = spec.ours_underlay.to_string();
    let rows = if underlay_v6 {
        tshark::fields(
            &pcap,
            &[
                "ipv6.src",
                "icmpv6.type",
                "icmpv6.mldr.mar.multicast_address",
                "icmpv6.mldr.mar.record_type",
            ],
            &["-Y", "icmpv6.type == 143"],
        )
    } else {
        tshark::fields(
            &pcap,
            &[
                "ip.src",
                "igmp.version",
                "igmp.type",
                "igmp.maddr",
                "igmp.record_type",
            ],
            &["-Y", "igmp"],
        )
    }
    .unwrap();
    let from_us: Vec<&Vec<String>> = if underlay_v6 {
        // Reports leave from the VTEP's link-local address, the modified
        // EUI-64 one of its underlay MAC (RFC 3810 section 5).
        let m = underlay_mac(&cfg);
        let ll = std::net::Ipv6Addr::from([
            0xfe,
            0x80,
            0,
            0,
            0,
            0,
            0,
            0,
            m[0] ^ 2,
            m[1],
            m[2],
            0xff,
            0xfe,
            m[3],
            m[4],
            m[5],
        ])
        .to_string();
        rows.iter().filter(|r| r[0] == ll).collect()
    } else {
        rows.iter().filter(|r| r[0] == ours).collect()
    };
    eprintln!("{what}: the VTEP's membership reports: {from_us:?}");
    let g = group.to_string();
    let has = |record: &str| {
        from_us.iter().any(|r| {
            let (maddr, rtype) = if underlay_v6 {
                (&r[2], &r[3])
            } else {
                (&r[3], &r[4])
            };
            maddr.split(',').any(|m| m == g) && rtype.split(',').any(|t| t == record)
        })
    };
    if !underlay_v6 {
        assert!(
            from_us.iter().all(|r| r[1] == "3" && r[2] == "0x22"),
            "{what}: IGMPv3 reports only: {from_us:?}"
        );
    }
    assert!(
        has("2"),
        "{what}: the answer to the query (is exclude {{}}): {from_us:?}"
    );
    let queries = if underlay_v6 {
        tshark::fields(
            &pcap,
            &["icmpv6.type"],
            &["-Y", "icmpv6.type == 130 && icmpv6.checksum.status == 1"],
        )
    } else {
        tshark::fields(
            &pcap,
            &["igmp.type"],
            &["-Y", "igmp.type == 0x11 && igmp.checksum.status == 1"],
        )
    }
    .unwrap();
    assert_eq!(
        queries.len(),
        7,
        "{what}: tshark reads the queries as valid"
    );
    // Frames to the group leave with TTL / hop limit 1, as Linux's (no
    // `ttl` configured); those to the kernel's address with 64.
    let (dst, ttl) = if underlay_v6 {
        ("ipv6.dst", "ipv6.hlim")
    } else {
        ("ip.dst", "ip.ttl")
    };
    for (to, want) in [
        (group.to_string(), "1"),
        (spec.kernel_underlay.to_string(), "64"),
    ] {
        let rows = tshark::fields(
            &pcap,
            &[ttl],
            &[
                "-Y",
                &format!(
                    "vxlan && {dst} == {to} && {} == {ours}",
                    dst.replace("dst", "src")
                ),
            ],
        )
        .unwrap();
        assert!(!rows.is_empty(), "{what}: no VXLAN frame to {to}");
        for r in &rows {
            assert_eq!(r[0].split(',').next(), Some(want), "{what}: to {to}: {r:?}");
        }
    }
    assert!(
        has("4"),
        "{what}: a report joining {g} (change to exclude): {from_us:?}"
    );
    assert!(
        has("3"),
        "{what}: a leave of {g} (change to include): {from_us:?}"
    );
}

#[test]
fn vtep_group_ipv4_against_kernel_vxlan() {
    vtep_with_group(false, IpAddr::from([239, 37, 0, 1]));
}

#[test]
fn vtep_group_ipv6_against_kernel_vxlan() {
    vtep_with_group(true, "ff05::3737".parse().unwrap());
}
