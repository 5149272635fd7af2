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
//! unicast. `dumpcap` on the kernel's side of the underlay records IGMP /
//! MLD from the start: tshark must read the VTEP's IGMPv3 (MLDv2) report
//! joining G (change to exclude {}), and, after the VTEP stops, its leave
//! (change to include {}). A TCP transfer of `LINERATE_BULK_MIB` MiB (8 by
//! default here) each way, SHA-256 checked.
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
